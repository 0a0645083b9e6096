//! Reductions of storages (`Storage::reduce`), on the CPU twin or the CUDA kernels.

#[cfg(feature = "cuda")]
use super::Inner;
use genesis_kernels::reduce;
#[cfg(feature = "cuda")]
use genesis_kernels::reduce::ReducePlan;
use genesis_kernels::{ReduceOp, ReduceShape};

use super::{Storage, byte_len, check_float_only};
use crate::{CpuStorage, DType, Error, Result};

/// What [`Storage::reduce`] gives: the reduced values and, for argmax/argmin, their indices
/// (i64).
#[derive(Debug)]
pub struct Reduced {
    /// The values (`[outer, inner]`): the input's dtype, i64 for sums of integers.
    pub values: Storage,
    /// Indices along the reduced axis (i64), for [`ReduceOp::ArgMax`] and [`ReduceOp::ArgMin`].
    pub indices: Option<Storage>,
}

/// The dtype of the values `op` gives for `dtype`.
pub fn reduce_dtype(op: ReduceOp, dtype: DType) -> DType {
    if op == ReduceOp::Sum && !dtype.is_float() {
        DType::I64
    } else {
        dtype
    }
}

impl Storage {
    /// Reduces `shape.input_len()` contiguous elements starting at `start`, seen as
    /// `[outer, r, inner]`, over `r` (f32, f16, bf16, i32, i64; see
    /// [`genesis_kernels::reduce`] for the semantics). The results are new storages on the
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
        let vbytes = byte_len(out_len, vdtype)?;
        let ibytes = byte_len(out_len, DType::I64)?;
        match &self.inner {
            #[cfg(feature = "cuda")]
            Inner::Cuda(a) => {
                use crate::cuda::CudaMem;
                crate::dispatch_kernel_dtype!(dtype, T => {
                    let ordinal = a.ordinal();
                    let mut values = CudaMem::new(ordinal, vbytes)?;
                    let mut indices = if op.has_indices() { Some(CudaMem::new(ordinal, ibytes)?) } else { None };
                    let plan = ReducePlan::new(shape, a.ctx().multiprocessors() as usize, size_of::<T>());
                    let ws_len = plan.workspace_bytes::<T>(op);
                    let mut ws = CudaMem::new(ordinal, ws_len)?;
                    reduce::gpu_reduce::<T>(
                        &super::queue(a),
                        op,
                        a.span::<T>(self.len)?.slice(start..start + n)?,
                        shape,
                        values.span_mut::<u8>(vbytes)?,
                        indices.as_mut().map(|m| m.span_mut::<i64>(out_len)).transpose()?,
                        ws.span_mut::<u8>(ws_len)?,
                    )?;
                    Ok(Reduced {
                        values: Storage::make(Inner::Cuda(values), vdtype, out_len),
                        indices: indices.map(|m| Storage::make(Inner::Cuda(m), DType::I64, out_len)),
                    })
                }, _ => Err(Error::UnsupportedDType { op: name, dtype }))
            }
            _ => {
                crate::dispatch_kernel_dtype!(dtype, T => {
                    let input = &self.as_slice::<T>()?[start..start + n];
                    let mut idx = op.has_indices().then(|| CpuStorage::zeroed(ibytes)).transpose()?;
                    let mut vals = CpuStorage::zeroed(vbytes)?;
                    let islice = idx.as_mut().map(|s| s.as_mut_slice::<i64>());
                    if vdtype == dtype {
                        reduce::reduce::<T, T>(op, input, shape, Some(vals.as_mut_slice::<T>()), islice)?;
                    } else {
                        reduce::reduce::<T, i64>(op, input, shape, Some(vals.as_mut_slice::<i64>()), islice)?;
                    }
                    Ok(Reduced {
                        values: Storage::cpu(vals, vdtype, out_len),
                        indices: idx.map(|s| Storage::cpu(s, DType::I64, out_len)),
                    })
                }, _ => Err(Error::UnsupportedDType { op: name, dtype }))
            }
        }
    }
}
