//! The Genesis caching GPU allocator.
//!
//! [`CachingAllocator`] is generic over a [`Backend`] of raw device memory, so its whole policy
//! runs and is tested without a GPU on [`SimBackend`]; the CUDA backends (`cuda` feature) make
//! the real driver calls. It keeps PyTorch's statistics ([`Stats`]), snapshots every segment and
//! block ([`Snapshot`]), records a bounded history with a timeline picture ([`History`]), tracks
//! live allocations and their call sites ([`LeakScope`]), and replays allocation traces
//! ([`trace::replay`], and the `genesis-mem replay` command).
//!
//! ```
//! use genesis_mem::{CachingAllocator, Config, SimBackend};
//!
//! let alloc = CachingAllocator::new(SimBackend::new(8 << 30, true), Config::default())?;
//! let a = alloc.alloc(1000, 0)?;          // 1000 bytes on stream 0
//! assert_eq!(a.size(), 1024);             // rounded to 512
//! alloc.free(a)?;
//! let b = alloc.alloc(1000, 0)?;          // served from the cache
//! assert_eq!(alloc.stats().num_cache_hits, 1);
//! alloc.free(b)?;
//! # Ok::<(), genesis_mem::Error>(())
//! ```
#![warn(missing_docs)]

mod allocator;
pub mod backend;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod history;
pub mod leaks;
mod lock;
mod size;
pub mod snapshot;
pub mod stats;
pub mod trace;

pub use allocator::{
    ALIGNMENT, Allocation, Backing, BlockState, CachingAllocator, Config, Error, MappedHandle,
};
pub use backend::{
    Backend, BackendError, CallCounts, CallPrices, FaultPoint, SimBackend, StreamId,
};
pub use history::History;
pub use leaks::{LeakReport, LeakScope, LiveAllocation};
pub use size::{SizeError, parse_size};
pub use snapshot::Snapshot;
pub use stats::{Pool, Stat, StatArray, Stats};
