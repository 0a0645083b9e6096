//! Random storages from the counter-based generator of `genesis_kernels::random`.

#[cfg(feature = "cuda")]
use super::{Inner, queue};
use super::{Storage, byte_len};
use crate::{CpuStorage, DType, Device, Error, Result};
use genesis_kernels::random::{RandomElement, Sampler};

fn check<T: RandomElement>(sampler: Sampler, dtype: DType) -> Result<()> {
    sampler.check::<T>().map_err(|_| Error::UnsupportedDType {
        op: match sampler {
            Sampler::Uniform => "rand",
            Sampler::Normal => "randn",
            _ => "randint",
        },
        dtype,
    })
}

impl Storage {
    /// `len` elements of `dtype` on `device` drawn by `sampler` from the Philox stream
    /// `(seed, offset)`: the same values on every device. The caller advances its offset by
    /// [`Storage::random_blocks`] to draw fresh values next time.
    #[track_caller]
    pub fn random(
        sampler: Sampler,
        len: usize,
        dtype: DType,
        device: Device,
        seed: u64,
        offset: u64,
    ) -> Result<Storage> {
        let nbytes = byte_len(len, dtype)?;
        let unsupported = Error::UnsupportedDType {
            op: "random",
            dtype,
        };
        match device {
            Device::Cpu => {
                genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64, I32, I64], T => {
                check::<T>(sampler, dtype)?;
                let mut out = CpuStorage::zeroed(nbytes)?;
                genesis_kernels::random::sample::<T>(sampler, seed, offset, out.as_mut_slice::<T>())?;
                Ok(Storage::cpu(out, dtype, len))
            }, _ => Err(unsupported))
            }
            #[cfg(feature = "cuda")]
            Device::Cuda(i) => {
                genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64, I32, I64], T => {
                check::<T>(sampler, dtype)?;
                let mut mem = crate::cuda::CudaMem::new(i, nbytes)?;
                let stream = queue(&mem);
                genesis_kernels::random::gpu_sample::<T>(&stream, sampler, seed, offset, mem.span_mut::<T>(len)?)?;
                Ok(Storage::make(Inner::Cuda(mem), dtype, len))
            }, _ => Err(unsupported))
            }
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => Err(Error::CudaNotCompiled { device }),
        }
    }

    /// Philox blocks a [`Storage::random`] call of `len` elements of `dtype` consumes.
    pub fn random_blocks(sampler: Sampler, len: usize, dtype: DType) -> u64 {
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64, I32, I64], T => sampler.blocks::<T>(len), _ => (len as u64).div_ceil(2))
    }
}
