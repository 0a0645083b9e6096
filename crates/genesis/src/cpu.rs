//! Host memory: pinned (page-locked) tensors and the switch that makes new host tensors pinned
//! (`genesis.cpu.enable_pinned_memory(True)`).
//!
//! Pinned memory comes from the pinned pool of the storage layer. The GPU copies it by DMA,
//! faster than pageable memory, and a copy from it to a device can be queued on a stream while
//! the host goes on ([`Tensor::to_non_blocking`]). Pinning needs CUDA: without the `cuda`
//! feature or a GPU, [`Tensor::pin_memory`] and [`enable_pinned_memory`]`(true)` are errors
//! (as PyTorch's `pin_memory()` fails without an accelerator).
//!
//! ```
//! use genesis::{Device, Tensor};
//! # fn main() -> genesis::Result<()> {
//! let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], Device::Cpu)?;
//! assert!(!x.is_pinned());
//! if genesis::cuda::is_available() {
//!     let pinned = x.pin_memory()?;
//!     assert!(pinned.is_pinned());
//!     // Queued on the current stream; later work on that stream sees the data.
//!     let y = pinned.to_non_blocking(Device::Cuda(0))?;
//!     genesis::cuda::synchronize(0)?;
//!     assert_eq!(y.to_vec::<f32>()?, [1.0, 2.0, 3.0]);
//!
//!     genesis::cpu::enable_pinned_memory(true)?;
//!     assert!(Tensor::zeros(&[4], genesis::DType::F32, Device::Cpu)?.is_pinned());
//!     genesis::cpu::enable_pinned_memory(false)?;
//! } else {
//!     assert!(x.pin_memory().is_err());
//!     assert!(genesis::cpu::enable_pinned_memory(true).is_err());
//! }
//! # Ok(())
//! # }
//! ```

use std::sync::atomic::{AtomicBool, Ordering};

use genesis_storage::{Device, Storage};

use crate::{Error, Result, Tensor};

/// Whether new host tensors are pinned.
static PINNED: AtomicBool = AtomicBool::new(false);

/// Makes the tensors that the creation functions make on the host (`zeros`, `ones`, `full`,
/// `empty`, `from_slice`, `from_bools`, `arange`) and copies to the host (`to(Device::Cpu)`)
/// pinned (`true`) or ordinary host memory (`false`, the default), for the whole process.
/// Results of ops on host tensors stay ordinary host memory.
///
/// Turning it on needs a CUDA device: without one (or without the `cuda` feature) it is an
/// [`Error::InvalidArgument`] and the setting stays off. Turning it off always succeeds.
pub fn enable_pinned_memory(on: bool) -> Result<()> {
    if on && !crate::cuda::is_available() {
        return Err(Error::InvalidArgument {
            op: "enable_pinned_memory",
            reason: "pinned host memory needs a CUDA device, and none is available".into(),
        });
    }
    PINNED.store(on, Ordering::SeqCst);
    Ok(())
}

/// Whether new host tensors are pinned (see [`enable_pinned_memory`]).
pub fn pinned_memory_enabled() -> bool {
    PINNED.load(Ordering::SeqCst)
}

/// `storage` in pinned memory when the switch is on and it is ordinary host memory; as it is
/// otherwise (device memory, mapped files and shared memory are never moved).
pub(crate) fn host_storage(storage: Storage) -> Result<Storage> {
    if pinned_memory_enabled() && storage.kind() == "cpu" {
        Ok(storage.to_pinned()?)
    } else {
        Ok(storage)
    }
}

impl Tensor {
    /// A new tensor of `shape` over `storage`, pinned by the switch when it is host memory
    /// (the creation functions' path).
    pub(crate) fn created(storage: Storage, shape: &[usize]) -> Result<Tensor> {
        Tensor::from_storage(host_storage(storage)?, shape)
    }

    /// Whether the tensor is its whole storage, row-major.
    fn is_whole_storage(&self) -> bool {
        self.is_contiguous()
            && self.first_element() == 0
            && self.numel() == self.view.storage().len()
    }

    /// Whether the tensor's memory is pinned (page-locked) host memory.
    pub fn is_pinned(&self) -> bool {
        self.view.storage().is_pinned()
    }

    /// A contiguous copy of this host tensor in pinned memory (PyTorch's `pin_memory()`),
    /// or the tensor itself when it is pinned already. Errors: a tensor on a CUDA device
    /// ([`Error::InvalidArgument`]: only host tensors are pinned), no CUDA (pinned memory
    /// needs the driver).
    #[track_caller]
    pub fn pin_memory(&self) -> Result<Tensor> {
        crate::autograd::op1(
            "pin_memory",
            self,
            || self.pin_memory_raw(),
            || |g: &Tensor| Ok(g.clone()),
        )
    }

    fn pin_memory_raw(&self) -> Result<Tensor> {
        if self.device() != Device::Cpu {
            return Err(Error::InvalidArgument {
                op: "pin_memory",
                reason: format!(
                    "only host tensors can be pinned; this one is on {}",
                    self.device()
                ),
            });
        }
        if self.is_pinned() {
            return Ok(self.clone());
        }
        let pinned = if self.is_whole_storage() {
            self.view.storage().to_pinned()?
        } else {
            self.view.contiguous()?.to_pinned()?
        };
        Tensor::from_storage(pinned, self.shape())
    }

    /// A contiguous copy on `device` that does not wait for the transfer when it can
    /// (PyTorch's `to(device, non_blocking=True)`): from pinned host memory to a CUDA device
    /// the copy is queued on the device's current stream and this returns at once; work
    /// queued later on that stream sees the data, the host once it synchronises (e.g.
    /// [`crate::cuda::synchronize`] or the stream's `synchronize`). The source is kept alive
    /// until the copy completes, so it may be dropped at once; writing to it before then
    /// changes what is copied, as in PyTorch. Every other copy (pageable memory, to the host,
    /// between devices) is [`Tensor::to`]'s, synchronous: a copy to the host completes before
    /// the host may read it.
    #[track_caller]
    pub fn to_non_blocking(&self, device: Device) -> Result<Tensor> {
        if crate::autograd::wants(&[self]) {
            // A recorded copy (the gradient goes back to this tensor's device).
            return self.to(device);
        }
        #[cfg(feature = "cuda")]
        if let Device::Cuda(ordinal) = device
            && self.is_pinned()
            && self.numel() > 0
        {
            use std::sync::Arc;
            let src = if self.is_whole_storage() {
                Arc::clone(self.view.storage())
            } else {
                Arc::new(self.view.contiguous()?.to_pinned()?)
            };
            let stream = match genesis_storage::cuda::current_stream(ordinal) {
                Some(s) => s,
                None => Arc::new(genesis_cuda::Stream::legacy(&genesis_cuda::Context::get(
                    ordinal,
                )?)),
            };
            let mut dst = Storage::empty(src.len(), self.dtype(), device)?;
            dst.copy_from_async_detached(&src, &stream)?;
            return Tensor::from_storage(dst, self.shape());
        }
        self.to(device)
    }
}
