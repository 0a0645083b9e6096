//! `softmax`, `log_softmax` and `logsumexp` of storages along one axis, on the CPU twin or the
//! CUDA kernels (`genesis_kernels::softmax`).

use genesis_kernels::ReduceShape;
use genesis_kernels::softmax::SoftmaxOp;

use super::{Mem, MemMut, Storage, byte_len, check_float_only, mixed};
use crate::compute::Compute;
use crate::{Error, Result};

impl Storage {
    /// `op` along `r` of `shape.input_len()` contiguous elements from `start`, seen as
    /// `[outer, r, inner]`, into a new storage on the same device of the same dtype (f64, f32,
    /// f16, bf16; others are [`Error::UnsupportedDType`]): the input's length for softmax and
    /// log_softmax, `[outer, inner]` for logsumexp. Computed in f32 (f64 for f64) with the
    /// line's max subtracted; see [`genesis_kernels::softmax`] for the special values (a line
    /// of no elements gives logsumexp -inf).
    #[track_caller]
    pub fn softmax(&self, op: SoftmaxOp, start: usize, shape: ReduceShape) -> Result<Storage> {
        let (name, dtype) = (op.name(), self.dtype);
        let overflow = || Error::SizeOverflow {
            len: usize::MAX,
            dtype,
        };
        let n = shape.input_len().ok_or_else(overflow)?;
        let out_len = op.output_len(shape).ok_or_else(overflow)?;
        self.check_range(name, start, n)?;
        check_float_only(name, true, dtype)?;
        byte_len(out_len, dtype)?;
        let mut out = Storage::uninit(out_len, dtype, self.device())?;
        match (self.read(name)?.mem(), out.mem_mut(name)?) {
            (Mem::Host(a), MemMut::Host(o)) => a.softmax(op, dtype, start, shape, o)?,
            (Mem::Cuda(a), MemMut::Cuda(o)) => a.softmax(op, dtype, start, shape, o)?,
            _ => return Err(mixed(name)),
        }
        Ok(out)
    }
}
