//! Boolean-mask selection and fill (`genesis_kernels::mask`).

use super::{Mem, MemMut, Storage};
use crate::compute::Compute;
use crate::{DType, Error, Result};

impl Storage {
    fn check_mask(&self, op: &'static str, mask: &Storage) -> Result<()> {
        if mask.dtype != DType::Bool {
            return Err(Error::UnsupportedDType {
                op,
                dtype: mask.dtype,
            });
        }
        if mask.device() != self.device() {
            return Err(Error::DeviceMismatch {
                op,
                lhs: self.device(),
                rhs: mask.device(),
            });
        }
        Ok(())
    }

    /// The elements `self[start + i]` whose mask byte `mask[mask_start + i]` is set, for
    /// `i < len`, in order, as a new storage (any dtype; `mask` is `Bool` on the same device).
    /// On the GPU: a count, a scan, and a single compaction pass that keeps the order (the
    /// host reads the count in between to size the output).
    #[track_caller]
    pub fn masked_select_at(
        &self,
        start: usize,
        mask: &Storage,
        mask_start: usize,
        len: usize,
    ) -> Result<Storage> {
        let op = "masked_select";
        self.check_mask(op, mask)?;
        self.check_range(op, start, len)?;
        mask.check_range(op, mask_start, len)?;
        let es = self.dtype.size();
        let (inner, count) = match (self.read(op)?.mem(), mask.read(op)?.mem()) {
            (Mem::Host(a), Mem::Host(m)) => a.masked_select(es, start, m, mask_start, len)?,
            (Mem::Cuda(a), Mem::Cuda(m)) => a.masked_select(es, start, m, mask_start, len)?,
            _ => return Err(super::mixed(op)),
        };
        Ok(Storage::make(inner, self.dtype, count))
    }

    /// The positions `i < len` whose mask byte `self[start + i]` is set (`self` is `Bool`), in
    /// order, as a new `I64` storage on `self`'s device (NumPy's `flatnonzero`). On the GPU: a
    /// count, a scan and one pass writing positions (the host reads the count in between).
    #[track_caller]
    pub fn nonzero_at(&self, start: usize, len: usize) -> Result<Storage> {
        let op = "nonzero";
        self.check_mask(op, self)?;
        self.check_range(op, start, len)?;
        let (inner, count) = match self.read(op)?.mem() {
            Mem::Host(m) => m.nonzero(start, len)?,
            Mem::Cuda(m) => m.nonzero(start, len)?,
        };
        Ok(Storage::make(inner, DType::I64, count))
    }

    /// `self[start + i] = value` where `mask[mask_start + i]` is set, for `i < len`, in place
    /// (`value`'s bytes in `self`'s dtype; allocates nothing).
    #[track_caller]
    pub fn masked_fill_at(
        &mut self,
        start: usize,
        mask: &Storage,
        mask_start: usize,
        len: usize,
        value: &[u8],
    ) -> Result<()> {
        let op = "masked_fill";
        self.check_mask(op, mask)?;
        self.check_range(op, start, len)?;
        mask.check_range(op, mask_start, len)?;
        let es = self.dtype.size();
        if value.len() != es {
            return Err(Error::LengthMismatch {
                op,
                lhs: es,
                rhs: value.len(),
            });
        }
        match (self.mem_mut(op)?, mask.read(op)?.mem()) {
            (MemMut::Host(d), Mem::Host(m)) => d.masked_fill(start, m, mask_start, len, value),
            (MemMut::Cuda(d), Mem::Cuda(m)) => d.masked_fill(start, m, mask_start, len, value),
            _ => Err(super::mixed(op)),
        }
    }
}
