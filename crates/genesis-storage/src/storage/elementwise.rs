//! Elementwise binary and unary ops on contiguous runs of storages, in place or into new
//! storages (the broadcast and strided forms are in `nd.rs`, the `_into` forms in
//! `select.rs`).

use super::{Mem, MemMut, Storage, check_float_only, check_kernel_dtype, mixed};
use crate::compute::Compute;
use crate::{DType, Error, Result};
use genesis_kernels::{BinaryOp, UnaryOp};

impl Storage {
    /// Elementwise `self + other` into a new storage on the same device.
    #[track_caller]
    pub fn add(&self, other: &Storage) -> Result<Storage> {
        self.binary(BinaryOp::Add, other)
    }

    /// In place: `self[start + i] = op(self[start + i], other[other_start + i])` for
    /// `i < len`. Allocates nothing; on CUDA the kernel is queued on the legacy stream. Fails,
    /// writing nothing, on a dtype or device mismatch, a range past the end, an unsupported
    /// dtype, or a read-only mapping.
    #[track_caller]
    pub fn binary_assign(
        &mut self,
        op: BinaryOp,
        start: usize,
        other: &Storage,
        other_start: usize,
        len: usize,
    ) -> Result<()> {
        let name = op.name();
        self.check_binary_types(name, other)?;
        let dtype = self.dtype;
        self.check_range(name, start, len)?;
        other.check_range(name, other_start, len)?;
        check_float_only(name, op.float_only(), dtype)?;
        check_kernel_dtype(name, dtype)?;
        match (self.mem_mut(name)?, other.read(name)?.mem()) {
            (MemMut::Host(a), Mem::Host(b)) => {
                a.binary_assign(op, dtype, start, b, other_start, len)
            }
            (MemMut::Cuda(a), Mem::Cuda(b)) => {
                a.binary_assign(op, dtype, start, b, other_start, len)
            }
            _ => Err(mixed(name)),
        }
    }

    /// In place: `self[i] = op(self[i])` for `start <= i < start + len`. Allocates nothing.
    #[track_caller]
    pub fn unary_assign(&mut self, op: UnaryOp, start: usize, len: usize) -> Result<()> {
        let name = op.name();
        let dtype = self.dtype;
        self.check_range(name, start, len)?;
        check_float_only(name, op.float_only(), dtype)?;
        check_kernel_dtype(name, dtype)?;
        match self.mem_mut(name)? {
            MemMut::Host(a) => a.unary_assign(op, dtype, start, len),
            MemMut::Cuda(a) => a.unary_assign(op, dtype, start, len),
        }
    }

    /// Elementwise `op(self)` into a new storage on the same device (neg, abs, relu for f32,
    /// f16, bf16, i32, i64; the transcendental ops for the floating types only).
    #[track_caller]
    pub fn unary(&self, op: UnaryOp) -> Result<Storage> {
        self.unary_at(op, 0, self.len)
    }

    /// Elementwise `op(self[start + i])` for `i < len` into a new storage of `len` elements,
    /// reading the operand where it is.
    #[track_caller]
    pub fn unary_at(&self, op: UnaryOp, start: usize, len: usize) -> Result<Storage> {
        let name = op.name();
        let dtype = self.dtype;
        self.check_range(name, start, len)?;
        check_float_only(name, op.float_only(), dtype)?;
        check_kernel_dtype(name, dtype)?;
        let mut out = Storage::uninit(len, dtype, self.device())?;
        self.unary_into(op, start, &mut out, 0, len)?;
        Ok(out)
    }

    /// Elementwise `op(self, other)` into a new storage on the same device (f64, f32, f16, bf16,
    /// i32, i64; `Div` for the floating types only).
    #[track_caller]
    pub fn binary(&self, op: BinaryOp, other: &Storage) -> Result<Storage> {
        self.check_binary(op.name(), other)?;
        self.binary_at(op, 0, other, 0, self.len)
    }

    /// `op(self[a_start + i], other[b_start + i])` for `i < len` (operands swapped when
    /// `swap`) into a new f32 storage, `self` f32 and `other` f16 or bf16 (widened exactly):
    /// PyTorch's promotion of the pair to f32 in one pass. Add, sub and mul; both on one
    /// device.
    #[track_caller]
    pub fn binary_mixed_at(
        &self,
        op: BinaryOp,
        a_start: usize,
        other: &Storage,
        b_start: usize,
        len: usize,
        swap: bool,
    ) -> Result<Storage> {
        let name = op.name();
        if self.dtype != DType::F32 || !matches!(other.dtype, DType::F16 | DType::BF16) {
            return Err(Error::DTypeMismatch {
                op: name,
                lhs: self.dtype,
                rhs: other.dtype,
            });
        }
        self.check_range(name, a_start, len)?;
        other.check_range(name, b_start, len)?;
        let mut out = Storage::uninit(len, DType::F32, self.device())?;
        let b_dtype = other.dtype;
        match (
            self.read(name)?.mem(),
            other.read(name)?.mem(),
            out.mem_mut(name)?,
        ) {
            (Mem::Host(a), Mem::Host(b), MemMut::Host(o)) => {
                a.binary_mixed(op, b_dtype, a_start, b, b_start, o, 0, len, swap)?
            }
            (Mem::Cuda(a), Mem::Cuda(b), MemMut::Cuda(o)) => {
                a.binary_mixed(op, b_dtype, a_start, b, b_start, o, 0, len, swap)?
            }
            _ => return Err(mixed(name)),
        }
        Ok(out)
    }

    /// Elementwise `op(self[a_start + i], other[b_start + i])` for `i < len`, into a new
    /// storage of `len` elements on the same device. Reads the operands where they are (no
    /// copies): the path for contiguous views into larger storages.
    #[track_caller]
    pub fn binary_at(
        &self,
        op: BinaryOp,
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
        check_float_only(name, op.float_only(), dtype)?;
        check_kernel_dtype(name, dtype)?;
        let mut out = Storage::uninit(len, dtype, self.device())?;
        self.binary_into(op, a_start, other, b_start, &mut out, 0, len)?;
        Ok(out)
    }
}
