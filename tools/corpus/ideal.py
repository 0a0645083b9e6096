#!/usr/bin/env python3
"""The idealised allocator the corpus is compared with, and what it would cost in driver calls.

    python3 tools/corpus/ideal.py [--pages MIB,...] crates/genesis-mem/corpus/*.trace.gz

Per stream, blocks (rounded to 512 bytes) go best fit (smallest, then lowest address) into
coalesced free address space, or at the end of the stream's address space when nothing fits.
Physical memory comes in pages of `--pages` MiB (2 MiB by default, the driver's granularity),
each page its own handle, a page being needed exactly while some live block covers it. A page
that becomes needed is served from the same place if it is still mapped there ("inplace", no
call), by moving an idle page ("move": a map, and later the unmap of its old mapping), or by
creating one ("create": a create and a map). Pages stay where they are until needed elsewhere,
so memory is created only when no idle page is left and peak reserved is the peak of needed
pages.

For each page size it prints, per trace, peak reserved / peak live and the driver calls
(2 per create or move) next to the trace's targets: the ratio target (the lowest of 1.03 and
PyTorch's three figures) and the call budget (4x the larger of PyTorch's segments and maps),
then how many traces meet each. It is a bound on placement by best fit with perfect page
release, not an allocator: it knows nothing about streams' events or the future. Needs
`sortedcontainers` (pip).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from expandable import MB, Segment, load  # noqa: E402

ALIGNMENT = 512
TARGET_RATIO = 1.03
CALLS_PER_PYTORCH_SEGMENT = 4


def targets(meta, peak_live):
    """(ratio target, call budget or None), by the rule `genesis-mem replay` uses."""
    ratio = TARGET_RATIO
    for key in ("peak_reserved", "expandable_peak_reserved", "async_peak_reserved"):
        if key in meta and peak_live > 0:
            ratio = min(ratio, int(meta[key]) / peak_live)
    counts = [int(meta[k]) for k in ("segment_allocs", "expandable_maps") if k in meta]
    budget = CALLS_PER_PYTORCH_SEGMENT * max(counts) if counts else None
    return ratio, budget


class Arena(Segment):
    """One stream's address space: best fit over coalesced free ranges (as `Segment`), a block
    that fits none going at the end, with nothing mapped ahead of it."""

    def __init__(self, base):
        super().__init__(page=ALIGNMENT)
        self.end = base

    def take(self, size):
        a = self.best_fit(size)
        if a is None:
            a = self.end
            self.end += size
        return a


def ideal(events, page):
    """(peak needed pages * page, peak live, creates, moves) for one trace."""
    arenas, live, users = {}, {}, {}
    idle = set()
    creates = moves = 0
    cur = peak_live = needed = peak_needed = 0
    for is_alloc, i, sz, stream in events:
        if is_alloc:
            size = max(ALIGNMENT, -(-sz // ALIGNMENT) * ALIGNMENT)
            arena = arenas.get(stream)
            if arena is None:
                arena = arenas[stream] = Arena(stream << 44)
            a = arena.take(size)
            live[i] = (stream, a, size, sz)
            for p in range(a // page, (a + size - 1) // page + 1):
                c = users.get(p, 0)
                if c == 0:
                    needed += 1
                    if p in idle:
                        idle.discard(p)
                    elif idle:
                        idle.pop()
                        moves += 1
                    else:
                        creates += 1
                users[p] = c + 1
            cur += sz
            peak_live = max(peak_live, cur)
            peak_needed = max(peak_needed, needed)
        elif i in live:
            stream, a, size, sz = live.pop(i)
            cur -= sz
            arenas[stream].give(a, size)
            for p in range(a // page, (a + size - 1) // page + 1):
                users[p] -= 1
                if users[p] == 0:
                    del users[p]
                    needed -= 1
                    idle.add(p)
    return peak_needed * page, peak_live, creates, moves


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", default="2", metavar="MIB[,MIB...]",
                    help="page sizes in MiB, multiples of 2 (default 2)")
    ap.add_argument("traces", nargs="+")
    args = ap.parse_args()
    try:
        pages = [int(x) for x in args.pages.split(",")]
    except ValueError:
        sys.exit(f"--pages {args.pages}: expected MiB values separated by commas")
    for page_mib in pages:
        if page_mib <= 0 or page_mib % 2:
            sys.exit(f"--pages: {page_mib} MiB is not a positive multiple of 2 MiB")
    loaded = [(os.path.basename(p).replace(".trace.gz", ""), *load(p)) for p in args.traces]
    for page_mib in pages:
        print(f"{page_mib} MiB pages")
        print(f"  {'trace':40s} {'ratio':>7s} {'target':>7s} {'calls':>7s} {'budget':>7s}")
        met_ratio = met_calls = met_both = 0
        for name, events, meta in loaded:
            reserved, peak_live, creates, moves = ideal(events, page_mib * MB)
            ratio = reserved / peak_live if peak_live else 1.0
            target, budget = targets(meta, peak_live)
            calls = 2 * (creates + moves)
            r_ok = ratio <= target + 1e-9
            c_ok = budget is None or calls <= budget
            met_ratio += r_ok
            met_calls += c_ok
            met_both += r_ok and c_ok
            print(f"  {name[:40]:40s} {ratio:7.4f} {target:7.4f} {calls:7d} "
                  f"{budget if budget is not None else '-':>7}")
        print(f"  of {len(loaded)}: ratio met on {met_ratio}, calls within budget on "
              f"{met_calls}, both on {met_both}")


if __name__ == "__main__":
    main()
