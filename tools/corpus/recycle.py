#!/usr/bin/env python3
"""Expandable segments' placement with physical memory mapped lazily and recycled: a design
study for the allocator (not the allocator's policy).

    python3 tools/corpus/recycle.py [--policy never|steal|pin] [--page-mib 20] TRACE...

Virtual placement is `expandable.py`'s model of PyTorch's expandable segments (per stream and
pool, best fit, segments growing at their end). Physical memory comes in pages of
`--page-mib` (2 MiB for the small pool), mapped only when a live block first touches them:
- `never`: a page stays mapped once mapped (never more than expandable segments reserve);
- `steal`: a page needed while none is spare takes the least recently freed wholly free
  mapped page of its pool (unmap, map, set access) instead of new memory;
- `pin`: as `steal`, but a page that is needed again after being stolen from becomes
  unstealable (repeated steps stop moving memory).
Prints, per trace, peak reserved over the best of PyTorch's three recorded modes, memory
driver calls, their time priced as `SimBackend::PRICES` (create, map and set-access for new
memory; unmap, map and set-access for a move; 1.15x the 2 MiB prices for 20 MiB pages) over
the trace's recorded run time, and the calls after reserved memory last grew.
"""
import argparse
import sys
from collections import OrderedDict

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from expandable import MB, Segment, load  # noqa: E402


def simulate(events, seconds, page, policy):
    segments, live = {}, {}
    count = {}  # (pool key, page index) -> live blocks touching it
    mapped, free_mapped = set(), OrderedDict()  # free_mapped: least recently freed first
    stolen, hot = set(), set()
    reserved = peak_reserved = 0
    cur = peak = 0
    calls = calls_at_peak = 0
    ns = 0.0
    create, move = 77e3 * 1.15, 94e3 * 1.15
    for is_alloc, i, sz, stream in events:
        if is_alloc:
            size = max(512, -(-sz // 512) * 512)
            small = size <= MB
            key = (stream, small)
            seg = segments.get(key)
            if seg is None:
                seg = segments[key] = Segment(2 * MB if small else 20 * MB)
            a, _ = seg.take(size)
            g = 2 * MB if small else page
            for p in range(a // g, (a + size - 1) // g + 1):
                pg = (key, p)
                c = count.get(pg, 0)
                if c == 0:
                    if pg in mapped:
                        del free_mapped[pg]
                    else:
                        if pg in stolen and policy == "pin":
                            hot.add(pg)
                        victim = None
                        if policy != "never":
                            victim = next((v for v in free_mapped
                                           if v[0][1] == small and v not in hot), None)
                        if victim is not None:
                            del free_mapped[victim]
                            mapped.discard(victim)
                            stolen.add(victim)
                            ns += move
                            calls += 2
                        else:
                            reserved += g
                            ns += create
                            calls += 2
                            if reserved > peak_reserved:
                                peak_reserved, calls_at_peak = reserved, calls
                        mapped.add(pg)
                count[pg] = c + 1
            live[i] = (key, a, size, sz, g)
            cur += sz
            peak = max(peak, cur)
        elif i in live:
            key, a, size, sz, g = live.pop(i)
            cur -= sz
            for p in range(a // g, (a + size - 1) // g + 1):
                pg = (key, p)
                count[pg] -= 1
                if count[pg] == 0:
                    free_mapped[pg] = None
            segments[key].give(a, size)
    return peak_reserved, peak, calls, ns / 1e9 / seconds * 100, calls - calls_at_peak


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policy", default="pin", choices=["never", "steal", "pin"])
    ap.add_argument("--page-mib", type=int, default=20)
    ap.add_argument("traces", nargs="+")
    a = ap.parse_args()
    print(f"{'trace':38s} {'vs best':>8s} {'calls':>6s} {'drv %run':>9s} {'steady':>7s}")
    for path in a.traces:
        events, meta = load(path)
        res, peak, calls, pct, steady = simulate(
            events, float(meta.get("seconds", 1)), a.page_mib * MB, a.policy)
        modes = [int(meta[k]) for k in ("peak_reserved", "expandable_peak_reserved",
                                        "async_peak_reserved") if k in meta]
        name = path.split("/")[-1].replace(".trace.gz", "")[:38]
        print(f"{name:38s} {res / min(modes):8.4f} {calls:6d} {pct:9.3f} {steady:7d}", flush=True)


if __name__ == "__main__":
    main()
