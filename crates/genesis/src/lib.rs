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
mod tensor;

pub use error::{Error, Result};
pub use genesis_storage::{DType, Device, WithDType};
pub use half::{bf16, f16};
pub use tensor::Tensor;

/// CUDA device queries.
pub mod cuda {
    /// Whether a CUDA device can be used (always `false` without the `cuda` feature).
    pub fn is_available() -> bool {
        genesis_cuda::is_available()
    }

    /// Number of CUDA devices (0 without the `cuda` feature or without a GPU).
    pub fn device_count() -> usize {
        genesis_cuda::device_count().unwrap_or(0)
    }

    /// The name of device `ordinal`, e.g. `"NVIDIA H200"`.
    #[cfg(feature = "cuda")]
    pub fn get_device_name(ordinal: usize) -> crate::Result<String> {
        Ok(genesis_cuda::Context::get(ordinal)
            .map_err(genesis_storage::Error::from)?
            .name()
            .to_string())
    }

    /// Gives the cached memory of every device's pool (and the pinned pool) back to the
    /// driver; memory of live tensors stays.
    #[cfg(feature = "cuda")]
    pub fn empty_cache() -> crate::Result<()> {
        Ok(genesis_storage::cuda::empty_caches()?)
    }

    /// The compute capability `(major, minor)` of device `ordinal`.
    #[cfg(feature = "cuda")]
    pub fn get_device_capability(ordinal: usize) -> crate::Result<(u32, u32)> {
        Ok(genesis_cuda::Context::get(ordinal)
            .map_err(genesis_storage::Error::from)?
            .compute_capability())
    }
}
