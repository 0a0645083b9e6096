//! CUDA devices and their memory, with PyTorch's `torch.cuda` names.
//!
//! Every function here exists on every build. Without the `cuda` feature, or on a machine
//! without a usable GPU, [`is_available`] is `false`, [`device_count`] is 0, the memory
//! statistics are zeros, [`memory_snapshot`] is empty and the cache functions do nothing (as
//! PyTorch's `torch.cuda.memory_allocated()` is 0 before CUDA is initialised), while the
//! functions about one device ([`get_device_name`], [`synchronize`], ...) return an error
//! saying the device does not exist. Streams and events (`Stream`, `Event`,
//! `with_stream`) need the `cuda` feature.
//!
//! ```
//! // Compiles and runs with and without the `cuda` feature, with and without a GPU.
//! let before = genesis::cuda::memory_allocated(0)?;
//! if !genesis::cuda::is_available() {
//!     assert_eq!(before, 0);
//!     assert!(genesis::cuda::memory_snapshot(0)?.segments.is_empty());
//!     assert!(genesis::cuda::get_device_name(0).is_err());
//! }
//! println!("{}", genesis::cuda::memory_summary(0)?);
//! genesis::cuda::empty_cache()?;
//! # Ok::<(), genesis::Error>(())
//! ```

mod streams;
pub use streams::{DeviceGuard, current, current_device, set_device, with_device};
pub use streams::{DeviceProperties, get_device_properties};
pub use streams::{Event, Stream, StreamGuard, with_stream};

use std::collections::BTreeMap;

/// Whether a CUDA device can be used (always `false` without the `cuda` feature).
pub fn is_available() -> bool {
    genesis_cuda::is_available()
}

/// Number of CUDA devices (0 without the `cuda` feature or without a GPU).
pub fn device_count() -> usize {
    genesis_cuda::device_count().unwrap_or(0)
}

/// Device `ordinal`'s memory pool; `None` when no CUDA device can be used at all (a build
/// without `cuda`, or no GPU), where the memory API reports zeros.
#[cfg(feature = "cuda")]
fn pool(ordinal: usize) -> crate::Result<Option<&'static genesis_storage::cuda::DevicePool>> {
    if !is_available() {
        return Ok(None);
    }
    Ok(Some(genesis_storage::cuda::device_pool(ordinal)?))
}

/// The allocator statistics of device `ordinal` (all zeros without CUDA).
fn stats(ordinal: usize) -> crate::Result<genesis_mem::Stats> {
    #[cfg(feature = "cuda")]
    if let Some(p) = pool(ordinal)? {
        return Ok(p.allocator().stats());
    }
    let _ = ordinal;
    Ok(genesis_mem::Stats::default())
}

#[cfg(feature = "cuda")]
fn context(ordinal: usize) -> crate::Result<std::sync::Arc<genesis_cuda::Context>> {
    Ok(genesis_cuda::Context::get(ordinal)?)
}

/// The error of a call about device `ordinal` on a build without CUDA.
#[cfg(not(feature = "cuda"))]
fn no_device(op: &'static str, ordinal: usize) -> crate::Error {
    crate::Error::InvalidArgument {
        op,
        reason: format!(
            "device {ordinal} does not exist (0 CUDA devices: built without the `cuda` feature)"
        ),
    }
}

/// The name of device `ordinal`, e.g. `"NVIDIA H200"` (an error when it does not exist).
pub fn get_device_name(ordinal: usize) -> crate::Result<String> {
    #[cfg(feature = "cuda")]
    return Ok(context(ordinal)?.name().to_string());
    #[cfg(not(feature = "cuda"))]
    Err(no_device("get_device_name", ordinal))
}

/// The compute capability `(major, minor)` of device `ordinal` (an error when it does not
/// exist).
pub fn get_device_capability(ordinal: usize) -> crate::Result<(u32, u32)> {
    #[cfg(feature = "cuda")]
    return Ok(context(ordinal)?.compute_capability());
    #[cfg(not(feature = "cuda"))]
    Err(no_device("get_device_capability", ordinal))
}

/// Waits for all work on device `ordinal` (an error when it does not exist).
pub fn synchronize(ordinal: usize) -> crate::Result<()> {
    #[cfg(feature = "cuda")]
    {
        context(ordinal)?.synchronize()?;
        // The pinned sources of completed non-blocking copies can go back to the pool.
        genesis_storage::cuda::release_completed_copies();
        Ok(())
    }
    #[cfg(not(feature = "cuda"))]
    Err(no_device("synchronize", ordinal))
}

/// Turns batching of small elementwise ops on device `ordinal` on or off (on by default, or
/// off when `GENESIS_NO_BATCH` is set). Batched ops (at most 2048 elements,
/// `genesis_kernels::gpu::BATCH_MAX_ELEMS`) are queued on the host and run by one launch of up
/// to 127 of them, before anything else of the device reaches the driver: the
/// results and their order are those of one launch per op, at a fraction of the host cost.
/// Turn it off to see one kernel per op in a profiler. An error when the device does not
/// exist.
pub fn set_batching(ordinal: usize, on: bool) -> crate::Result<()> {
    #[cfg(feature = "cuda")]
    {
        // The pool's context: it lives as long as the process, so the setting sticks.
        Ok(genesis_storage::cuda::device_pool(ordinal)?
            .context()
            .set_batching(on)?)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = on;
        Err(no_device("set_batching", ordinal))
    }
}

/// Whether small elementwise ops on device `ordinal` are batched (see [`set_batching`]).
pub fn batching(ordinal: usize) -> crate::Result<bool> {
    #[cfg(feature = "cuda")]
    return Ok(genesis_storage::cuda::device_pool(ordinal)?
        .context()
        .batching());
    #[cfg(not(feature = "cuda"))]
    Err(no_device("batching", ordinal))
}

/// Bytes of tensors currently allocated on device `ordinal` (0 without CUDA).
pub fn memory_allocated(ordinal: usize) -> crate::Result<u64> {
    Ok(stats(ordinal)?.allocated_bytes.all().current as u64)
}

/// Peak of [`memory_allocated`] since the start or the last reset (0 without CUDA).
pub fn max_memory_allocated(ordinal: usize) -> crate::Result<u64> {
    Ok(stats(ordinal)?.allocated_bytes.all().peak as u64)
}

/// Bytes the allocator holds from the driver on device `ordinal` (0 without CUDA).
pub fn memory_reserved(ordinal: usize) -> crate::Result<u64> {
    Ok(stats(ordinal)?.reserved_bytes.all().current as u64)
}

/// Peak of [`memory_reserved`] since the start or the last reset (0 without CUDA).
pub fn max_memory_reserved(ordinal: usize) -> crate::Result<u64> {
    Ok(stats(ordinal)?.reserved_bytes.all().peak as u64)
}

/// The old name of [`memory_reserved`].
pub fn memory_cached(ordinal: usize) -> crate::Result<u64> {
    memory_reserved(ordinal)
}

/// Every statistic with PyTorch's key names (`"allocated_bytes.all.current"`, ...); every
/// key is present, all zeros without CUDA.
pub fn memory_stats(ordinal: usize) -> crate::Result<BTreeMap<String, i64>> {
    Ok(stats(ordinal)?.to_map())
}

/// A table like PyTorch's `memory_summary()`.
pub fn memory_summary(ordinal: usize) -> crate::Result<String> {
    Ok(stats(ordinal)?.summary(&format!("cuda:{ordinal}")))
}

/// Every segment and block of device `ordinal`'s allocator (no segments without CUDA).
pub fn memory_snapshot(ordinal: usize) -> crate::Result<genesis_mem::Snapshot> {
    #[cfg(feature = "cuda")]
    if let Some(p) = pool(ordinal)? {
        return Ok(p.allocator().snapshot());
    }
    let _ = ordinal;
    Ok(genesis_mem::Snapshot {
        segments: Vec::new(),
        device_total: 0,
    })
}

/// Resets the peak statistics of device `ordinal` (nothing to do without CUDA).
pub fn reset_peak_memory_stats(ordinal: usize) -> crate::Result<()> {
    #[cfg(feature = "cuda")]
    if let Some(p) = pool(ordinal)? {
        p.allocator().reset_peak_stats();
    }
    let _ = ordinal;
    Ok(())
}

/// Limits device `ordinal`'s allocator to `fraction` (0 < f ≤ 1) of its memory. The fraction
/// is checked on every build; without CUDA there is nothing to limit.
pub fn set_memory_fraction(fraction: f64, ordinal: usize) -> crate::Result<()> {
    #[cfg(feature = "cuda")]
    if let Some(p) = pool(ordinal)? {
        return Ok(p.allocator().set_memory_fraction(fraction)?);
    }
    let _ = ordinal;
    if !(fraction > 0.0 && fraction <= 1.0) {
        return Err(genesis_mem::Error::InvalidFraction(fraction).into());
    }
    Ok(())
}

/// Limits the cached (reserved but unused) memory of device `ordinal`, e.g. `"2GB"`. The size
/// is parsed on every build; without CUDA there is nothing to limit.
pub fn set_cache_size(limit: &str, ordinal: usize) -> crate::Result<()> {
    #[cfg(feature = "cuda")]
    if let Some(p) = pool(ordinal)? {
        return Ok(p.allocator().set_cache_size(limit)?);
    }
    let _ = ordinal;
    genesis_mem::parse_size(limit).map_err(genesis_mem::Error::from)?;
    Ok(())
}

/// Starts recording allocator events of device `ordinal` (the last `capacity`); nothing to
/// record without CUDA.
pub fn record_memory_history(ordinal: usize, capacity: usize) -> crate::Result<()> {
    #[cfg(feature = "cuda")]
    if let Some(p) = pool(ordinal)? {
        p.allocator().record_history(capacity);
    }
    let _ = (ordinal, capacity);
    Ok(())
}

/// Stops recording and returns the history (report, timeline picture); `None` when nothing
/// was recorded (always without CUDA).
pub fn take_memory_history(ordinal: usize) -> crate::Result<Option<genesis_mem::History>> {
    #[cfg(feature = "cuda")]
    if let Some(p) = pool(ordinal)? {
        return Ok(p.allocator().take_history());
    }
    let _ = ordinal;
    Ok(None)
}

/// Starts a leak scope on device `ordinal`: `.check(...)` lists what was allocated since
/// and is still live, with call sites.
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub fn leak_scope(
    ordinal: usize,
) -> crate::Result<(
    genesis_mem::LeakScope,
    &'static genesis_mem::CachingAllocator<genesis_mem::cuda::CudaBackend>,
)> {
    let a = genesis_storage::cuda::device_pool(ordinal)?.allocator();
    Ok((a.leak_scope(), a))
}

/// Gives the cached memory of every device's pool (and the pinned pool) back to the
/// driver; memory of live tensors stays. Nothing to do without CUDA.
pub fn empty_cache() -> crate::Result<()> {
    #[cfg(feature = "cuda")]
    if is_available() {
        // Emptying synchronises every device: the pinned sources of the non-blocking copies
        // are then released, and their memory emptied too.
        genesis_storage::cuda::empty_caches()?;
        if genesis_storage::cuda::release_completed_copies() == 0 {
            genesis_storage::cuda::empty_caches()?;
        }
    }
    Ok(())
}
