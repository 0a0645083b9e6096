//! Reductions of storages (`Storage::reduce`), on the CPU twin or the CUDA kernels.

use genesis_kernels::{ReduceOp, ReduceShape};

use super::{Mem, MemMut, Storage, byte_len, check_float_only};
use crate::compute::Compute;
use crate::{DType, Error, Result};

/// What [`Storage::reduce`] gives: the reduced values and, for argmax/argmin, their indices
/// (i64).
#[derive(Debug)]
pub struct Reduced {
    /// The values (`[outer, inner]`): the input's dtype, i64 for sums of integers.
    pub values: Storage,
    /// Indices along the reduced axis (i64), for [`ReduceOp::ArgMax`] and [`ReduceOp::ArgMin`].
    pub indices: Option<Storage>,
}

/// The dtype of the values `op` gives for `dtype`: i64 for sums and products of integers,
/// bool for `any` and `all`, otherwise `dtype`.
pub fn reduce_dtype(op: ReduceOp, dtype: DType) -> DType {
    if op.bool_only() {
        DType::Bool
    } else if matches!(op, ReduceOp::Sum | ReduceOp::Prod) && !dtype.is_float() {
        DType::I64
    } else {
        dtype
    }
}

impl Storage {
    /// Reduces `shape.input_len()` contiguous elements starting at `start`, seen as
    /// `[outer, r, inner]`, over `r` (f64, f32, f16, bf16, i32, i64; `any` and `all` take bool and
    /// only bool; see [`genesis_kernels::reduce`] for the semantics). The results are new storages on the
    /// same device.
    #[track_caller]
    pub fn reduce(&self, op: ReduceOp, start: usize, shape: ReduceShape) -> Result<Reduced> {
        let name = op.name();
        let dtype = self.dtype;
        let n = shape.input_len().ok_or(Error::SizeOverflow {
            len: usize::MAX,
            dtype,
        })?;
        self.check_range(name, start, n)?;
        check_float_only(name, op.float_only(), dtype)?;
        if op.needs_elements() && shape.r == 0 && shape.output_len() > 0 {
            return Err(Error::EmptyReduction { op: name });
        }
        let out_len = shape.output_len();
        let vdtype = reduce_dtype(op, dtype);
        byte_len(out_len, vdtype)?;
        if op.bool_only() != (dtype == DType::Bool) {
            return Err(Error::UnsupportedDType { op: name, dtype });
        }
        if !op.bool_only() {
            super::check_kernel_dtype(name, dtype)?;
        }
        let mut values = Storage::uninit(out_len, vdtype, self.device())?;
        let mut indices = if op.has_indices() {
            Some(Storage::uninit(out_len, DType::I64, self.device())?)
        } else {
            None
        };
        let ix = match indices.as_mut() {
            Some(s) => Some(s.mem_mut(name)?),
            None => None,
        };
        match (self.read(name)?.mem(), values.mem_mut(name)?, ix) {
            (Mem::Host(a), MemMut::Host(v), None) => a.reduce(op, dtype, start, shape, v, None)?,
            (Mem::Host(a), MemMut::Host(v), Some(MemMut::Host(i))) => {
                a.reduce(op, dtype, start, shape, v, Some(i))?
            }
            (Mem::Cuda(a), MemMut::Cuda(v), None) => a.reduce(op, dtype, start, shape, v, None)?,
            (Mem::Cuda(a), MemMut::Cuda(v), Some(MemMut::Cuda(i))) => {
                a.reduce(op, dtype, start, shape, v, Some(i))?
            }
            _ => return Err(super::mixed(name)),
        }
        Ok(Reduced { values, indices })
    }
}
