//! Allocator statistics with PyTorch's key names (`torch.cuda.memory_stats()`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Requests of at most this many bytes belong to the small pool (as in PyTorch).
pub const SMALL_SIZE: usize = 1 << 20;

/// Which pool a block counts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pool {
    /// Blocks of at most 1 MiB.
    Small,
    /// Larger blocks.
    Large,
}

impl Pool {
    /// The pool of a block of `bytes`.
    pub fn of(bytes: usize) -> Pool {
        if bytes <= SMALL_SIZE {
            Pool::Small
        } else {
            Pool::Large
        }
    }

    #[inline(always)]
    fn index(self) -> usize {
        match self {
            Pool::Small => 0,
            Pool::Large => 1,
        }
    }
}

/// One statistic: its current value, its peak, and the totals added and removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stat {
    /// Current value.
    pub current: i64,
    /// Highest value since the last reset of peaks.
    pub peak: i64,
    /// Sum of all increases.
    pub allocated: i64,
    /// Sum of all decreases.
    pub freed: i64,
}

/// A statistic for all pools, the small pool and the large pool (`.all`, `.small_pool`,
/// `.large_pool`). The allocator's hot path updates one pool's figures and the peak of the
/// total; the total's current value and sums are the pools' added up when read, and `freed` is
/// `allocated - current` (every change goes through `inc` or `dec`), so a decrease is one
/// subtraction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatArray {
    /// The small and the large pool.
    pools: [Stat; 2],
    /// Highest value of the total since the last reset of peaks.
    all_peak: i64,
}

impl StatArray {
    /// Adds `n` (negative to remove) to the pool's stat (and so to the total).
    #[inline(always)]
    pub(crate) fn add(&mut self, pool: Pool, n: i64) {
        if n >= 0 {
            self.inc(pool, n);
        } else {
            self.dec(pool, -n);
        }
    }

    /// Adds `n` ≥ 0 to the pool's stat.
    #[inline(always)]
    pub(crate) fn inc(&mut self, pool: Pool, n: i64) {
        let p = &mut self.pools[pool.index()];
        p.current += n;
        p.allocated += n;
        p.peak = p.peak.max(p.current);
        let all = self.pools[0].current + self.pools[1].current;
        self.all_peak = self.all_peak.max(all);
    }

    /// [`Self::inc`], skipping the peaks when the caller knows the result stays within them
    /// (`within_peak`: it undoes a removal made by the operation just before, with no reset in
    /// between).
    #[inline(always)]
    pub(crate) fn inc_known(&mut self, pool: Pool, n: i64, within_peak: bool) {
        if !within_peak {
            return self.inc(pool, n);
        }
        let p = &mut self.pools[pool.index()];
        p.current += n;
        p.allocated += n;
        debug_assert!(p.current <= p.peak);
        debug_assert!(self.pools[0].current + self.pools[1].current <= self.all_peak);
    }

    /// Adds `n` ≥ 0 to the pool's total of increases only: an increase and a decrease of `n`
    /// that cancelled out (the current value and the peaks stay).
    #[inline(always)]
    pub(crate) fn add_total(&mut self, pool: Pool, n: i64) {
        self.pools[pool.index()].allocated += n;
    }

    /// Removes `n` ≥ 0 from the pool's stat.
    #[inline(always)]
    pub(crate) fn dec(&mut self, pool: Pool, n: i64) {
        self.pools[pool.index()].current -= n;
    }

    /// A pool's figures with `freed` filled in.
    fn pool(&self, i: usize) -> Stat {
        let p = self.pools[i];
        Stat {
            freed: p.allocated - p.current,
            ..p
        }
    }

    /// All pools.
    pub fn all(&self) -> Stat {
        let (s, l) = (self.pool(0), self.pool(1));
        Stat {
            current: s.current + l.current,
            peak: self.all_peak,
            allocated: s.allocated + l.allocated,
            freed: s.freed + l.freed,
        }
    }

    /// The small pool.
    pub fn small_pool(&self) -> Stat {
        self.pool(0)
    }

    /// The large pool.
    pub fn large_pool(&self) -> Stat {
        self.pool(1)
    }

    fn reset_peak(&mut self) {
        for s in &mut self.pools {
            s.peak = s.current;
        }
        self.all_peak = self.all().current;
    }
}

/// Everything the allocator counts. Field names are PyTorch's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// Allocated blocks.
    pub allocation: StatArray,
    /// Device allocations held: plain segments, or physical handles with VMM.
    pub segment: StatArray,
    /// Blocks in use: allocated, or freed but waiting for queued work on other streams.
    pub active: StatArray,
    /// Free blocks that are a split part of a segment.
    pub inactive_split: StatArray,
    /// Bytes of allocated blocks (rounded sizes).
    pub allocated_bytes: StatArray,
    /// Bytes held from the device.
    pub reserved_bytes: StatArray,
    /// Bytes of active blocks.
    pub active_bytes: StatArray,
    /// Bytes of inactive split blocks.
    pub inactive_split_bytes: StatArray,
    /// Bytes the callers asked for (before rounding).
    pub requested_bytes: StatArray,
    /// Allocations that needed a release of cached memory and a retry.
    pub num_alloc_retries: u64,
    /// Allocations that failed with out-of-memory.
    pub num_ooms: u64,
    /// Device allocations made (`cuMemCreate` / `cuMemAlloc`).
    pub num_device_alloc: u64,
    /// Device frees made (`cuMemRelease` / `cuMemFree`).
    pub num_device_free: u64,
    /// Allocations served from the cache without asking the device.
    pub num_cache_hits: u64,
    /// Allocations that had to ask the device.
    pub num_cache_misses: u64,
    /// Bytes of the largest free block (with VMM: the largest mapped free range).
    pub largest_free_block: u64,
}

impl Stats {
    /// Resets every `peak` to its current value (`reset_peak_memory_stats`).
    pub fn reset_peak(&mut self) {
        for a in self.arrays_mut() {
            a.reset_peak();
        }
    }

    fn arrays(&self) -> [(&'static str, &StatArray); 9] {
        [
            ("allocation", &self.allocation),
            ("segment", &self.segment),
            ("active", &self.active),
            ("inactive_split", &self.inactive_split),
            ("allocated_bytes", &self.allocated_bytes),
            ("reserved_bytes", &self.reserved_bytes),
            ("active_bytes", &self.active_bytes),
            ("inactive_split_bytes", &self.inactive_split_bytes),
            ("requested_bytes", &self.requested_bytes),
        ]
    }

    fn arrays_mut(&mut self) -> [&mut StatArray; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }

    /// Share of allocations served from the cache, in [0, 1].
    pub fn cache_hit_rate(&self) -> f64 {
        let total = self.num_cache_hits + self.num_cache_misses;
        if total == 0 {
            0.0
        } else {
            self.num_cache_hits as f64 / total as f64
        }
    }

    /// (reserved − allocated) / reserved: the share of held memory not in use.
    pub fn fragmentation(&self) -> f64 {
        let reserved = self.reserved_bytes.all().current as f64;
        if reserved <= 0.0 {
            0.0
        } else {
            (reserved - self.allocated_bytes.all().current as f64) / reserved
        }
    }

    /// 1 − largest free / free: how scattered the free memory is (0 when it is one block).
    pub fn external_fragmentation(&self) -> f64 {
        let free = self.reserved_bytes.all().current - self.allocated_bytes.all().current;
        if free <= 0 {
            0.0
        } else {
            1.0 - self.largest_free_block as f64 / free as f64
        }
    }

    /// Flat map with PyTorch's keys (`"allocated_bytes.all.current"`, `"num_ooms"`, ...).
    pub fn to_map(&self) -> BTreeMap<String, i64> {
        let mut m = BTreeMap::new();
        for (name, arr) in self.arrays() {
            for (pool, stat) in [
                ("all", arr.all()),
                ("small_pool", arr.small_pool()),
                ("large_pool", arr.large_pool()),
            ] {
                for (field, v) in [
                    ("current", stat.current),
                    ("peak", stat.peak),
                    ("allocated", stat.allocated),
                    ("freed", stat.freed),
                ] {
                    m.insert(format!("{name}.{pool}.{field}"), v);
                }
            }
        }
        let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        m.insert("num_alloc_retries".into(), as_i64(self.num_alloc_retries));
        m.insert("num_ooms".into(), as_i64(self.num_ooms));
        m.insert("num_device_alloc".into(), as_i64(self.num_device_alloc));
        m.insert("num_device_free".into(), as_i64(self.num_device_free));
        m
    }

    /// A table like PyTorch's `memory_summary()`.
    pub fn summary(&self, title: &str) -> String {
        let mut s = String::new();
        let rule = "|".to_string() + &"=".repeat(75) + "|\n";
        let thin = "|".to_string() + &"-".repeat(75) + "|\n";
        s += &rule;
        let _ = writeln!(s, "| {:<73} |", format!("{title} memory summary"));
        let _ = writeln!(
            s,
            "| {:<73} |",
            format!(
                "OOMs: {:<6} alloc retries: {:<6} cache hit rate: {:>6.2}%",
                self.num_ooms,
                self.num_alloc_retries,
                100.0 * self.cache_hit_rate()
            )
        );
        let _ = writeln!(
            s,
            "| {:<73} |",
            format!(
                "fragmentation: {:.2}% of reserved free, {:.2}% of free outside the largest block",
                100.0 * self.fragmentation(),
                100.0 * self.external_fragmentation()
            )
        );
        s += &rule;
        let _ = writeln!(
            s,
            "| {:<25}| {:>10} | {:>10} | {:>10} | {:>10} |",
            "Metric", "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed"
        );
        for (name, arr, bytes) in [
            ("Allocated memory", &self.allocated_bytes, true),
            ("Active memory", &self.active_bytes, true),
            ("Requested memory", &self.requested_bytes, true),
            ("GPU reserved memory", &self.reserved_bytes, true),
            ("Non-releasable memory", &self.inactive_split_bytes, true),
            ("Allocations", &self.allocation, false),
            ("Active allocs", &self.active, false),
            ("GPU reserved segments", &self.segment, false),
            ("Non-releasable allocs", &self.inactive_split, false),
        ] {
            s += &thin;
            for (label, stat) in [
                (name.to_string(), arr.all()),
                ("      from large pool".to_string(), arr.large_pool()),
                ("      from small pool".to_string(), arr.small_pool()),
            ] {
                let f = |v: i64| if bytes { human(v) } else { v.to_string() };
                let _ = writeln!(
                    s,
                    "| {:<25}| {:>10} | {:>10} | {:>10} | {:>10} |",
                    label,
                    f(stat.current),
                    f(stat.peak),
                    f(stat.allocated),
                    f(stat.freed)
                );
            }
        }
        s += &rule;
        s
    }
}

/// Bytes as a short human string (`"1.50 GiB"`).
pub fn human(bytes: i64) -> String {
    let b = bytes as f64;
    let (v, unit) = if b.abs() >= (1u64 << 30) as f64 {
        (b / (1u64 << 30) as f64, "GiB")
    } else if b.abs() >= (1 << 20) as f64 {
        (b / (1 << 20) as f64, "MiB")
    } else if b.abs() >= 1024.0 {
        (b / 1024.0, "KiB")
    } else {
        return format!("{bytes} B");
    };
    format!("{v:.2} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_tracks_peak_and_totals() {
        let mut a = StatArray::default();
        a.add(Pool::Small, 10);
        a.add(Pool::Large, 5);
        a.add(Pool::Small, -10);
        assert_eq!(
            a.all(),
            Stat {
                current: 5,
                peak: 15,
                allocated: 15,
                freed: 10
            }
        );
        assert_eq!(a.small_pool().peak, 10);
        a.reset_peak();
        assert_eq!(a.all().peak, 5);
    }

    #[test]
    fn map_has_pytorch_keys() {
        let m = Stats::default().to_map();
        for k in [
            "allocated_bytes.all.current",
            "reserved_bytes.large_pool.peak",
            "inactive_split_bytes.small_pool.freed",
            "requested_bytes.all.allocated",
            "segment.all.current",
            "num_alloc_retries",
            "num_ooms",
            "num_device_alloc",
            "num_device_free",
        ] {
            assert!(m.contains_key(k), "{k}");
        }
        assert_eq!(m.len(), 9 * 3 * 4 + 4);
    }

    #[test]
    fn summary_renders() {
        let mut s = Stats::default();
        s.allocated_bytes.add(Pool::Large, 3 << 30);
        s.reserved_bytes.add(Pool::Large, 4 << 30);
        let text = s.summary("test");
        assert!(
            text.contains("Allocated memory") && text.contains("3.00 GiB"),
            "{text}"
        );
        assert!((s.fragmentation() - 0.25).abs() < 1e-12);
    }
}
