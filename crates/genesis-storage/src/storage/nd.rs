//! Binary ops whose operands are read in place through their layouts: broadcast (stride 0)
//! and strided operands, and scalar operands passed to the kernel as an argument.

#[cfg(feature = "cuda")]
use super::{Inner, queue};
use super::{Storage, check_float_only, check_kernel_dtype};
use crate::layout::Layout;
use crate::{Device, Error, Result};
use genesis_kernels::{BinaryNd, BinaryOp, Rhs};

/// The right operand of [`Storage::binary_strided`].
#[derive(Debug, Clone, Copy)]
pub enum BinaryRhs<'a> {
    /// A storage read through a layout of the result's shape (stride 0 where broadcast).
    Tensor(&'a Storage, &'a Layout),
    /// One value: a one-element host storage of the left operand's dtype.
    Scalar(&'a Storage),
}

impl Storage {
    /// `out[i] = op(self[a(i)], rhs[b(i)])` for every position `i` of `a`'s shape, into a new
    /// contiguous storage: `a` (and a tensor `rhs`'s layout, of the same shape) may broadcast
    /// (stride 0) or be any strided view; nothing is materialised first. A scalar `rhs` goes
    /// to the kernel as an argument. f32, f16, bf16, i32, i64 (`Div`, `Pow` for the floating
    /// types). Results of 2^31 elements or more, or layouts that do not merge to 8 dimensions,
    /// are computed from contiguous copies of the operands.
    #[track_caller]
    pub fn binary_strided(&self, op: BinaryOp, a: &Layout, rhs: BinaryRhs<'_>) -> Result<Storage> {
        let name = op.name();
        let dtype = self.dtype;
        let b = match rhs {
            BinaryRhs::Tensor(other, b) => {
                self.check_binary_types(name, other)?;
                if b.shape() != a.shape() {
                    return Err(Error::ShapeMismatch {
                        op: name,
                        lhs: a.shape().to_vec(),
                        rhs: b.shape().to_vec(),
                    });
                }
                b.check_bounds(other.len)?;
                Some((b.strides(), b.offset()))
            }
            BinaryRhs::Scalar(s) => {
                if s.dtype != dtype || s.len != 1 || s.device() != Device::Cpu {
                    return Err(Error::Kernel(genesis_kernels::Error::Unsupported {
                        op: name,
                        reason: format!(
                            "a scalar operand is one {dtype} element on the host, not {} of {} on {}",
                            s.len,
                            s.dtype,
                            s.device()
                        ),
                    }));
                }
                None
            }
        };
        a.check_bounds(self.len)?;
        check_float_only(name, op.float_only(), dtype)?;
        check_kernel_dtype(name, dtype)?;
        let Ok(desc) = BinaryNd::new(a.shape(), a.strides(), a.offset(), b) else {
            return self.binary_materialised(op, a, rhs);
        };
        let n = desc.numel();
        let mut out = Storage::uninit(n, dtype, self.device())?;
        let other = match rhs {
            BinaryRhs::Tensor(o, _) => o,
            BinaryRhs::Scalar(s) => s,
        };
        let scalar = matches!(rhs, BinaryRhs::Scalar(_));
        match (&self.inner, &other.inner, &mut out.inner) {
            #[cfg(feature = "cuda")]
            (Inner::Cuda(am), bm, Inner::Cuda(om)) => {
                crate::dispatch_kernel_dtype!(dtype, T => {
                    let b = match bm {
                        _ if scalar => Rhs::Scalar(other.as_slice::<T>()?[0]),
                        Inner::Cuda(bm) => Rhs::Tensor(bm.span::<T>(other.len)?),
                        _ => unreachable!("same device, checked above"),
                    };
                    genesis_kernels::gpu::binary_nd::<T>(
                        &queue(am),
                        op,
                        &desc,
                        am.span::<T>(self.len)?,
                        b,
                        om.span_mut::<T>(n)?,
                    )?;
                    Ok(())
                }, _ => Err(Error::UnsupportedDType { op: name, dtype }))?;
            }
            _ => {
                crate::dispatch_kernel_dtype!(dtype, T => {
                    let b = if scalar {
                        Rhs::Scalar(other.as_slice::<T>()?[0])
                    } else {
                        Rhs::Tensor(other.as_slice::<T>()?)
                    };
                    let av = self.as_slice::<T>()?;
                    genesis_kernels::nd::binary_nd::<T>(op, &desc, av, b, out.as_mut_slice::<T>()?)?;
                    Ok(())
                }, _ => Err(Error::UnsupportedDType { op: name, dtype }))?;
            }
        }
        Ok(out)
    }

    /// [`Storage::binary_strided`] through contiguous copies of the operands, for shapes the
    /// in-place kernels do not take.
    fn binary_materialised(&self, op: BinaryOp, a: &Layout, rhs: BinaryRhs<'_>) -> Result<Storage> {
        let n = a.try_numel()?;
        let lhs = self.contiguous(a)?;
        match rhs {
            BinaryRhs::Tensor(other, b) => lhs.binary_at(op, 0, &other.contiguous(b)?, 0, n),
            BinaryRhs::Scalar(s) => {
                let full = s.to_device(self.device())?.contiguous(&Layout::new(
                    a.shape(),
                    &vec![0; a.rank()],
                    0,
                ))?;
                lhs.binary_at(op, 0, &full, 0, n)
            }
        }
    }
}
