//! Binary ops whose operands are read in place through their layouts: broadcast (stride 0)
//! and strided operands, and scalar operands passed to the kernel as an argument.

use super::{Mem, MemMut, Storage, check_float_only, check_kernel_dtype, mixed};
use crate::backend::Backend;
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
        // The scalar's bytes (a host storage, checked above).
        let scalar = match rhs {
            BinaryRhs::Scalar(s) => s.host_bytes(),
            BinaryRhs::Tensor(..) => None,
        };
        let tensor = match rhs {
            BinaryRhs::Tensor(o, _) => Some(o.mem()),
            BinaryRhs::Scalar(_) => None,
        };
        match (self.mem(), tensor, scalar, out.mem_mut(name)?) {
            (Mem::Host(a), Some(Mem::Host(b)), _, MemMut::Host(o)) => {
                a.binary_nd(op, dtype, &desc, Rhs::Tensor(b), o)?
            }
            (Mem::Host(a), None, Some(s), MemMut::Host(o)) => {
                a.binary_nd(op, dtype, &desc, Rhs::Scalar(s), o)?
            }
            (Mem::Cuda(a), Some(Mem::Cuda(b)), _, MemMut::Cuda(o)) => {
                a.binary_nd(op, dtype, &desc, Rhs::Tensor(b), o)?
            }
            (Mem::Cuda(a), None, Some(s), MemMut::Cuda(o)) => {
                a.binary_nd(op, dtype, &desc, Rhs::Scalar(s), o)?
            }
            _ => return Err(mixed(name)),
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
