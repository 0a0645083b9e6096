#!/usr/bin/env python3
"""PyTorch's expandable segments, modelled, against what PyTorch recorded for the same workload.

    python3 tools/corpus/expandable.py crates/genesis-mem/corpus/*.trace.gz

A check of the corpus and a baseline for policies: if a trace holds the allocations PyTorch
saw, a model of `expandable_segments:True` replaying it must land on the peak PyTorch reported
in the trace's `expandable_peak_reserved`. The model follows CUDACachingAllocator: requests
rounded to 512 bytes; requests of at most 1 MiB in the small pool, others in the large pool;
one segment per (stream, pool) that grows at its end in 2 MiB (small) or 20 MiB (large) pages,
merging the free block at its end; best fit (smallest block, then lowest address) over the
pool's free blocks of the stream, split whatever is left; nothing is ever unmapped (no
`empty_cache` in the workloads). Prints the recorded and modelled peak reserved / peak live and
map counts, then the same model with 2 MiB pages for the large pool too and with one pool.
Needs `sortedcontainers` (pip).
"""
import gzip
import sys

from sortedcontainers import SortedList

MB = 1 << 20


def load(path):
    events, meta = [], {}
    with gzip.open(path, "rt") as f:
        for line in f:
            if line[0] == "#":
                for kv in line[1:].split():
                    if "=" in kv:
                        k, v = kv.split("=", 1)
                        meta[k] = v
                continue
            p = line.split()
            if p[0] == "a":
                events.append((True, int(p[1]), int(p[2]), int(p[3]) if len(p) > 3 else 0))
            else:
                events.append((False, int(p[1]), 0, 0))
    return events, meta


class Segment:
    """An expandable segment: address space from 0, mapped in `page`-byte pages up to `end`."""

    def __init__(self, page):
        self.page, self.end = page, 0
        self.free = SortedList()  # (size, address)
        self.by_start, self.by_end = {}, {}

    def _remove(self, a, n):
        self.free.remove((n, a))
        del self.by_start[a], self.by_end[a + n]

    def _add(self, a, n):
        self.free.add((n, a))
        self.by_start[a], self.by_end[a + n] = n, n

    def best_fit(self, size):
        """The address of `size` bytes cut from the smallest free block that holds them (the
        lowest such), or None when none does."""
        k = self.free.bisect_left((size, -1))
        if k == len(self.free):
            return None
        n, a = self.free[k]
        self._remove(a, n)
        if n > size:
            self._add(a + size, n - size)
        return a

    def take(self, size):
        """Address of a block of `size` bytes and the bytes newly mapped for it."""
        a = self.best_fit(size)
        if a is not None:
            return a, 0
        a = self.end
        if self.end in self.by_end:  # the free block at the end grows into the new pages
            n = self.by_end[self.end]
            a = self.end - n
            self._remove(a, n)
        new_end = -(-(a + size) // self.page) * self.page
        grown, self.end = new_end - self.end, new_end
        if new_end > a + size:
            self._add(a + size, new_end - a - size)
        return a, grown

    def give(self, a, n):
        if a in self.by_end:
            p = self.by_end[a]
            self._remove(a - p, p)
            a, n = a - p, n + p
        if a + n in self.by_start:
            q = self.by_start[a + n]
            self._remove(a + n, q)
            n += q
        self._add(a, n)


def model(events, large_page=20 * MB, small_page=2 * MB, pools=True):
    segments, live = {}, {}
    cur = peak = reserved = peak_reserved = maps = 0
    for is_alloc, i, sz, stream in events:
        if is_alloc:
            size = max(512, -(-sz // 512) * 512)
            small = pools and size <= MB
            key = (stream, small)
            seg = segments.get(key)
            if seg is None:
                seg = segments[key] = Segment(small_page if small else large_page)
            a, grown = seg.take(size)
            if grown:
                maps += 1
                reserved += grown
                peak_reserved = max(peak_reserved, reserved)
            live[i] = (key, a, size, sz)
            cur += sz
            peak = max(peak, cur)
        elif i in live:
            key, a, size, sz = live.pop(i)
            cur -= sz
            segments[key].give(a, size)
    return peak_reserved / peak, maps, peak


def main():
    print(f"{'trace':40s} {'recorded':>16s} {'model':>16s} {'2 MiB pages':>16s} {'one pool':>16s}")
    for path in sys.argv[1:]:
        events, meta = load(path)
        ratio, maps, peak = model(events)
        recorded = int(meta.get("expandable_peak_reserved", 0)) / peak
        r2, m2, _ = model(events, large_page=2 * MB)
        r3, m3, _ = model(events, large_page=2 * MB, pools=False)
        name = path.split("/")[-1].replace(".trace.gz", "")[:40]
        print(f"{name:40s} {recorded:8.4f} ({meta.get('expandable_maps', '?'):>4s}) "
              f"{ratio:8.4f} ({maps:4d}) {r2:8.4f} ({m2:4d}) {r3:8.4f} ({m3:4d})")


if __name__ == "__main__":
    main()
