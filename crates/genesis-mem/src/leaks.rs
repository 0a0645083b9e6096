//! Leak tracking: live allocations with their call sites, and scope checks.

use std::fmt;
use std::panic::Location;

use crate::CachingAllocator;
use crate::backend::{Backend, StreamId};
use crate::stats::human;

/// A live allocation, as reported by [`CachingAllocator::live_allocations`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveAllocation {
    /// Its address.
    pub addr: u64,
    /// Its rounded size.
    pub size: usize,
    /// The size asked for.
    pub requested: usize,
    /// Its stream.
    pub stream: StreamId,
    /// Allocation order (larger is younger).
    pub seq: u64,
    /// Where it was allocated, when sites are recorded.
    pub site: Option<&'static Location<'static>>,
}

impl fmt::Display for LiveAllocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at {:#x}", human(self.requested as i64), self.addr)?;
        match self.site {
            Some(s) => write!(f, " allocated at {s}"),
            None => write!(f, " (site not recorded)"),
        }
    }
}

/// What a region of code leaked: allocations it made that are still live.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeakReport {
    /// The leaked allocations, oldest first.
    pub leaks: Vec<LiveAllocation>,
}

impl LeakReport {
    /// Bytes leaked (requested sizes).
    pub fn bytes(&self) -> usize {
        self.leaks.iter().map(|l| l.requested).sum()
    }

    /// Whether nothing leaked.
    pub fn is_clean(&self) -> bool {
        self.leaks.is_empty()
    }
}

impl fmt::Display for LeakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.leaks.is_empty() {
            return writeln!(f, "no leaks");
        }
        writeln!(
            f,
            "{} allocation(s) leaked, {}:",
            self.leaks.len(),
            human(self.bytes() as i64)
        )?;
        for l in &self.leaks {
            writeln!(f, "  {l}")?;
        }
        Ok(())
    }
}

/// Marks the start of a region of code; [`LeakScope::check`] lists what it allocated and did
/// not free.
#[derive(Debug, Clone, Copy)]
pub struct LeakScope {
    start_seq: u64,
}

impl<B: Backend> CachingAllocator<B> {
    /// Starts a leak scope.
    pub fn leak_scope(&self) -> LeakScope {
        LeakScope {
            start_seq: self.clock_now(),
        }
    }

    /// Live allocations of at least `min_bytes`, largest first.
    pub fn large_allocations(&self, min_bytes: usize) -> Vec<LiveAllocation> {
        let mut v: Vec<LiveAllocation> = self
            .live_allocations()
            .into_iter()
            .filter(|a| a.requested >= min_bytes)
            .collect();
        v.sort_by_key(|a| std::cmp::Reverse(a.requested));
        v
    }
}

impl LeakScope {
    /// The allocations made since the scope started that are still live.
    pub fn check<B: Backend>(&self, allocator: &CachingAllocator<B>) -> LeakReport {
        LeakReport {
            leaks: allocator
                .live_allocations()
                .into_iter()
                .filter(|a| a.seq > self.start_seq)
                .collect(),
        }
    }
}
