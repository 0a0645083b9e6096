//! The float classes (`isnan`, `isinf`, `isfinite`) and `nan_to_num`, one pass each.

use genesis_kernels::classify::FloatClass;

use super::{Mem, MemMut, Storage, check_float_only, mixed};
use crate::compute::Compute;
use crate::{DType, Result};

impl Storage {
    /// `op(self[start + i])` for `i < len` as a new bool storage on the same device (f64, f32,
    /// f16, bf16), reading the operand where it is.
    #[track_caller]
    pub fn classify_at(&self, op: FloatClass, start: usize, len: usize) -> Result<Storage> {
        let (name, dtype) = (op.name(), self.dtype);
        self.check_range(name, start, len)?;
        check_float_only(name, true, dtype)?;
        let mut out = Storage::uninit(len, DType::Bool, self.device())?;
        match (self.read(name)?.mem(), out.mem_mut(name)?) {
            (Mem::Host(a), MemMut::Host(o)) => Compute::classify(a, op, dtype, start, len, o)?,
            (Mem::Cuda(a), MemMut::Cuda(o)) => Compute::classify(a, op, dtype, start, len, o)?,
            _ => return Err(mixed(name)),
        }
        Ok(out)
    }

    /// `self[start + i]` for `i < len` with NaN, +inf and -inf replaced by `nan`, `posinf`
    /// and `neginf` (each rounded to the dtype, a value beyond its range becoming an
    /// infinity), as a new storage on the same device (f64, f32, f16, bf16).
    #[track_caller]
    pub fn nan_to_num_at(
        &self,
        start: usize,
        len: usize,
        [nan, posinf, neginf]: [f64; 3],
    ) -> Result<Storage> {
        let (name, dtype) = ("nan_to_num", self.dtype);
        self.check_range(name, start, len)?;
        check_float_only(name, true, dtype)?;
        let values = [nan, posinf, neginf];
        let mut out = Storage::uninit(len, dtype, self.device())?;
        match (self.read(name)?.mem(), out.mem_mut(name)?) {
            (Mem::Host(x), MemMut::Host(o)) => {
                Compute::nan_to_num(x, dtype, start, len, values, o)?
            }
            (Mem::Cuda(x), MemMut::Cuda(o)) => {
                Compute::nan_to_num(x, dtype, start, len, values, o)?
            }
            _ => return Err(mixed(name)),
        }
        Ok(out)
    }
}
