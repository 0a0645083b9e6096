//! Comparisons to bools, `where` selection, and elementwise ops written into a given storage
//! (the facade's `_out` forms).

use super::{Mem, MemMut, Storage, check_float_only, check_kernel_dtype, mixed};
use crate::compute::Compute;
use crate::{DType, Error, Result};
use genesis_kernels::{BinaryOp, CompareOp, UnaryOp};

impl Storage {
    /// `self[a_start + i] op other[b_start + i]` for `i < len` as a new `Bool` storage (f32,
    /// f16, bf16, i32, i64; IEEE comparisons, NaN unequal to everything).
    #[track_caller]
    pub fn compare_at(
        &self,
        op: CompareOp,
        a_start: usize,
        other: &Storage,
        b_start: usize,
        len: usize,
    ) -> Result<Storage> {
        let name = op.name();
        self.check_binary_types(name, other)?;
        self.check_range(name, a_start, len)?;
        other.check_range(name, b_start, len)?;
        let dtype = self.dtype;
        check_kernel_dtype(name, dtype)?;
        let mut out = Storage::uninit(len, DType::Bool, self.device())?;
        match (
            self.read(name)?.mem(),
            other.read(name)?.mem(),
            out.mem_mut(name)?,
        ) {
            (Mem::Host(a), Mem::Host(b), MemMut::Host(o)) => {
                a.compare(op, dtype, a_start, b, b_start, o, len)?
            }
            (Mem::Cuda(a), Mem::Cuda(b), MemMut::Cuda(o)) => {
                a.compare(op, dtype, a_start, b, b_start, o, len)?
            }
            _ => return Err(mixed(name)),
        }
        Ok(out)
    }

    /// `cond[c_start + i] ? a[a_start + i] : b[b_start + i]` for `i < len` as a new storage of
    /// `a`'s dtype (any dtype; `cond` must be `Bool`, all on one device).
    #[track_caller]
    pub fn select_at(
        cond: (&Storage, usize),
        a: (&Storage, usize),
        b: (&Storage, usize),
        len: usize,
    ) -> Result<Storage> {
        let name = "where";
        let ((c, cs), (a, as_), (b, bs)) = (cond, a, b);
        if c.dtype != DType::Bool {
            return Err(Error::UnsupportedDType {
                op: name,
                dtype: c.dtype,
            });
        }
        a.check_binary_types(name, b)?;
        if c.device() != a.device() {
            return Err(Error::DeviceMismatch {
                op: name,
                lhs: c.device(),
                rhs: a.device(),
            });
        }
        c.check_range(name, cs, len)?;
        a.check_range(name, as_, len)?;
        b.check_range(name, bs, len)?;
        let dtype = a.dtype;
        let es = dtype.size();
        let mut out = Storage::uninit(len, dtype, a.device())?;
        match (
            c.read(name)?.mem(),
            a.read(name)?.mem(),
            b.read(name)?.mem(),
            out.mem_mut(name)?,
        ) {
            (Mem::Host(cm), Mem::Host(am), Mem::Host(bm), MemMut::Host(o)) => {
                cm.select(es, cs, am, as_, bm, bs, o, len)?
            }
            (Mem::Cuda(cm), Mem::Cuda(am), Mem::Cuda(bm), MemMut::Cuda(o)) => {
                cm.select(es, cs, am, as_, bm, bs, o, len)?
            }
            _ => return Err(mixed(name)),
        }
        Ok(out)
    }

    /// `out[out_start + i] = op(self[a_start + i], other[b_start + i])` for `i < len`: writes
    /// into an existing storage (allocates nothing). `out` may not be `self` or `other` (the
    /// borrow rules see to it); it must have their dtype and device.
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    pub fn binary_into(
        &self,
        op: BinaryOp,
        a_start: usize,
        other: &Storage,
        b_start: usize,
        out: &mut Storage,
        out_start: usize,
        len: usize,
    ) -> Result<()> {
        let name = op.name();
        self.check_binary_types(name, other)?;
        self.check_binary_types(name, out)?;
        self.check_range(name, a_start, len)?;
        other.check_range(name, b_start, len)?;
        out.check_range(name, out_start, len)?;
        let dtype = self.dtype;
        check_float_only(name, op.float_only(), dtype)?;
        check_kernel_dtype(name, dtype)?;
        match (
            self.read(name)?.mem(),
            other.read(name)?.mem(),
            out.mem_mut(name)?,
        ) {
            (Mem::Host(a), Mem::Host(b), MemMut::Host(o)) => {
                a.binary(op, dtype, a_start, b, b_start, o, out_start, len)
            }
            (Mem::Cuda(a), Mem::Cuda(b), MemMut::Cuda(o)) => {
                a.binary(op, dtype, a_start, b, b_start, o, out_start, len)
            }
            _ => Err(mixed(name)),
        }
    }

    /// `out[out_start + i] = op(self[start + i])` for `i < len`, into an existing storage.
    #[track_caller]
    pub fn unary_into(
        &self,
        op: UnaryOp,
        start: usize,
        out: &mut Storage,
        out_start: usize,
        len: usize,
    ) -> Result<()> {
        let name = op.name();
        self.check_binary_types(name, out)?;
        self.check_range(name, start, len)?;
        out.check_range(name, out_start, len)?;
        let dtype = self.dtype;
        check_float_only(name, op.float_only(), dtype)?;
        check_kernel_dtype(name, dtype)?;
        match (self.read(name)?.mem(), out.mem_mut(name)?) {
            (Mem::Host(a), MemMut::Host(o)) => a.unary(op, dtype, start, o, out_start, len),
            (Mem::Cuda(a), MemMut::Cuda(o)) => a.unary(op, dtype, start, o, out_start, len),
            _ => Err(mixed(name)),
        }
    }
}
