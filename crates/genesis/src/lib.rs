//! Genesis: a PyTorch-style [`Tensor`] over a Rust GPU memory, storage and indexing stack.
//!
//! ```
//! use genesis::{Device, Tensor};
//!
//! let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], Device::Cpu)?;
//! let b = Tensor::full(&[2, 2], 0.5f32, Device::Cpu)?;
//! let c = a.add(&b)?;
//! assert_eq!(c.to_vec::<f32>()?, vec![1.5, 2.5, 3.5, 4.5]);
//! # Ok::<(), genesis::Error>(())
//! ```
//!
//! With the `cuda` feature, `Device::Cuda(n)` puts tensors on GPU `n`; without it (the default)
//! asking for a CUDA device is a typed error.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod interop;
mod mask;
mod matmul;
mod ops;
mod random;
mod reduce;
mod tensor;

pub use error::{Error, Result};
pub use genesis_index::{IndexItem, IndexTensor, ToIndex, s};
pub use genesis_storage::{BinaryOp, CompareOp, ReduceOp, UnaryOp};
pub use genesis_storage::{DType, Device, Layout, WithDType};
pub use half::{bf16, f16};
pub use interop::{
    deserialize_safetensors, deserialize_safetensors_with_metadata, load_safetensors,
    load_safetensors_map, load_safetensors_with_metadata, save_safetensors,
    save_safetensors_with_metadata, serialize_safetensors,
};
pub use random::{DEFAULT_SEED, Generator, default_generator, manual_seed};
pub use tensor::{Tensor, broadcast_shape};

/// CUDA devices and their memory (PyTorch's `torch.cuda` names).
pub mod cuda {
    mod streams;
    pub use streams::{DeviceGuard, current, current_device, set_device, with_device};
    #[cfg(feature = "cuda")]
    pub use streams::{
        DeviceProperties, Event, Stream, StreamGuard, get_device_properties, with_stream,
    };

    /// Whether a CUDA device can be used (always `false` without the `cuda` feature).
    pub fn is_available() -> bool {
        genesis_cuda::is_available()
    }

    /// Number of CUDA devices (0 without the `cuda` feature or without a GPU).
    pub fn device_count() -> usize {
        genesis_cuda::device_count().unwrap_or(0)
    }

    #[cfg(feature = "cuda")]
    fn context(ordinal: usize) -> crate::Result<std::sync::Arc<genesis_cuda::Context>> {
        Ok(genesis_cuda::Context::get(ordinal)?)
    }

    #[cfg(feature = "cuda")]
    fn pool(ordinal: usize) -> crate::Result<&'static genesis_storage::cuda::DevicePool> {
        Ok(genesis_storage::cuda::device_pool(ordinal)?)
    }

    /// The name of device `ordinal`, e.g. `"NVIDIA H200"`.
    #[cfg(feature = "cuda")]
    pub fn get_device_name(ordinal: usize) -> crate::Result<String> {
        Ok(context(ordinal)?.name().to_string())
    }

    /// The compute capability `(major, minor)` of device `ordinal`.
    #[cfg(feature = "cuda")]
    pub fn get_device_capability(ordinal: usize) -> crate::Result<(u32, u32)> {
        Ok(context(ordinal)?.compute_capability())
    }

    /// Waits for all work on device `ordinal`.
    #[cfg(feature = "cuda")]
    pub fn synchronize(ordinal: usize) -> crate::Result<()> {
        Ok(context(ordinal)?.synchronize()?)
    }

    /// Turns batching of small elementwise ops on device `ordinal` on or off (on by default, or
    /// off when `GENESIS_NO_BATCH` is set). Batched ops (at most
    /// [`genesis_kernels::gpu::BATCH_MAX_ELEMS`] elements) are queued on the host and run by one
    /// launch of up to 127 of them, before anything else of the device reaches the driver: the
    /// results and their order are those of one launch per op, at a fraction of the host cost.
    /// Turn it off to see one kernel per op in a profiler.
    #[cfg(feature = "cuda")]
    pub fn set_batching(ordinal: usize, on: bool) -> crate::Result<()> {
        // The pool's context: it lives as long as the process, so the setting sticks.
        Ok(pool(ordinal)?.context().set_batching(on)?)
    }

    /// Whether small elementwise ops on device `ordinal` are batched (see [`set_batching`]).
    #[cfg(feature = "cuda")]
    pub fn batching(ordinal: usize) -> crate::Result<bool> {
        Ok(pool(ordinal)?.context().batching())
    }

    /// Bytes of tensors currently allocated on device `ordinal`.
    #[cfg(feature = "cuda")]
    pub fn memory_allocated(ordinal: usize) -> crate::Result<u64> {
        Ok(pool(ordinal)?
            .allocator()
            .stats()
            .allocated_bytes
            .all()
            .current as u64)
    }

    /// Peak of [`memory_allocated`] since the start or the last reset.
    #[cfg(feature = "cuda")]
    pub fn max_memory_allocated(ordinal: usize) -> crate::Result<u64> {
        Ok(pool(ordinal)?
            .allocator()
            .stats()
            .allocated_bytes
            .all()
            .peak as u64)
    }

    /// Bytes the allocator holds from the driver on device `ordinal`.
    #[cfg(feature = "cuda")]
    pub fn memory_reserved(ordinal: usize) -> crate::Result<u64> {
        Ok(pool(ordinal)?
            .allocator()
            .stats()
            .reserved_bytes
            .all()
            .current as u64)
    }

    /// The old name of [`memory_reserved`].
    #[cfg(feature = "cuda")]
    pub fn memory_cached(ordinal: usize) -> crate::Result<u64> {
        memory_reserved(ordinal)
    }

    /// Every statistic with PyTorch's key names (`"allocated_bytes.all.current"`, ...).
    #[cfg(feature = "cuda")]
    pub fn memory_stats(ordinal: usize) -> crate::Result<std::collections::BTreeMap<String, i64>> {
        Ok(pool(ordinal)?.allocator().stats().to_map())
    }

    /// A table like PyTorch's `memory_summary()`.
    #[cfg(feature = "cuda")]
    pub fn memory_summary(ordinal: usize) -> crate::Result<String> {
        Ok(pool(ordinal)?
            .allocator()
            .stats()
            .summary(&format!("cuda:{ordinal}")))
    }

    /// Every segment and block of device `ordinal`'s allocator.
    #[cfg(feature = "cuda")]
    pub fn memory_snapshot(ordinal: usize) -> crate::Result<genesis_mem::Snapshot> {
        Ok(pool(ordinal)?.allocator().snapshot())
    }

    /// Resets the peak statistics of device `ordinal`.
    #[cfg(feature = "cuda")]
    pub fn reset_peak_memory_stats(ordinal: usize) -> crate::Result<()> {
        pool(ordinal)?.allocator().reset_peak_stats();
        Ok(())
    }

    /// Limits device `ordinal`'s allocator to `fraction` (0 < f ≤ 1) of its memory.
    #[cfg(feature = "cuda")]
    pub fn set_memory_fraction(fraction: f64, ordinal: usize) -> crate::Result<()> {
        Ok(pool(ordinal)?.allocator().set_memory_fraction(fraction)?)
    }

    /// Limits the cached (reserved but unused) memory of device `ordinal`, e.g. `"2GB"`.
    #[cfg(feature = "cuda")]
    pub fn set_cache_size(limit: &str, ordinal: usize) -> crate::Result<()> {
        Ok(pool(ordinal)?.allocator().set_cache_size(limit)?)
    }

    /// Starts recording allocator events of device `ordinal` (the last `capacity`).
    #[cfg(feature = "cuda")]
    pub fn record_memory_history(ordinal: usize, capacity: usize) -> crate::Result<()> {
        pool(ordinal)?.allocator().record_history(capacity);
        Ok(())
    }

    /// Stops recording and returns the history (report, timeline picture).
    #[cfg(feature = "cuda")]
    pub fn take_memory_history(ordinal: usize) -> crate::Result<Option<genesis_mem::History>> {
        Ok(pool(ordinal)?.allocator().take_history())
    }

    /// Starts a leak scope on device `ordinal`: `.check(...)` lists what was allocated since
    /// and is still live, with call sites.
    #[cfg(feature = "cuda")]
    pub fn leak_scope(
        ordinal: usize,
    ) -> crate::Result<(
        genesis_mem::LeakScope,
        &'static genesis_mem::CachingAllocator<genesis_mem::cuda::CudaBackend>,
    )> {
        let a = pool(ordinal)?.allocator();
        Ok((a.leak_scope(), a))
    }

    /// Gives the cached memory of every device's pool (and the pinned pool) back to the
    /// driver; memory of live tensors stays.
    #[cfg(feature = "cuda")]
    pub fn empty_cache() -> crate::Result<()> {
        Ok(genesis_storage::cuda::empty_caches()?)
    }
}
