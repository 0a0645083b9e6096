//! Random storages from the counter-based generator of `genesis_kernels::random`.

use super::{MemMut, Storage, byte_len};
use crate::compute::Compute;
use crate::{DType, Device, Error, Result};
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
        byte_len(len, dtype)?;
        let unsupported = Error::UnsupportedDType {
            op: "random",
            dtype,
        };
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64, I32, I64], T => check::<T>(sampler, dtype)?, _ => return Err(unsupported));
        let mut out = Storage::uninit(len, dtype, device)?;
        match out.mem_mut("random")? {
            MemMut::Host(o) => o.random(dtype, sampler, seed, offset, len)?,
            MemMut::Cuda(o) => o.random(dtype, sampler, seed, offset, len)?,
        }
        // Integers drawn in `[low, low + range)`: bounds known without reading them back.
        if let Sampler::Int { low, range } = sampler
            && !dtype.is_float()
            && let Ok(hi) = i64::try_from(i128::from(low) + i128::from(range) - 1)
        {
            out.note_known_bounds(low, hi);
        }
        Ok(out)
    }

    /// Philox blocks a [`Storage::random`] call of `len` elements of `dtype` consumes.
    pub fn random_blocks(sampler: Sampler, len: usize, dtype: DType) -> u64 {
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64, I32, I64], T => sampler.blocks::<T>(len), _ => (len as u64).div_ceil(2))
    }
}
