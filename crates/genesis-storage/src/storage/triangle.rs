//! The triangles of matrices (`tril`, `triu`) and one-hot rows: one pass, output allocated
//! here.

use genesis_kernels::triangle::Triangle;

use super::{Mem, MemMut, Storage, mixed};
use crate::compute::Compute;
use crate::{DType, Error, Result};

impl Storage {
    /// `len` contiguous elements from `start`, seen as `[len / (rows * cols), rows, cols]`,
    /// with element `(b, i, j)` kept where `j - i <= diagonal` (`lower`, PyTorch's `tril`) or
    /// `j - i >= diagonal` (`triu`) and zeroed elsewhere, as a new storage on the same device
    /// (any dtype).
    #[track_caller]
    pub fn triangle_at(
        &self,
        start: usize,
        len: usize,
        [rows, cols]: [usize; 2],
        diagonal: i64,
        lower: bool,
    ) -> Result<Storage> {
        let (name, dtype) = ("triangle", self.dtype);
        let t = &Triangle {
            rows,
            cols,
            k: diagonal,
            lower,
        };
        self.check_range(name, start, len)?;
        let elem = dtype.size();
        let mut out = Storage::uninit(len, dtype, self.device())?;
        let (at, bytes) = (start * elem, len * elem);
        match (self.read(name)?.mem(), out.mem_mut(name)?) {
            (Mem::Host(x), MemMut::Host(o)) => Compute::triangle(x, t, elem, at, bytes, o)?,
            (Mem::Cuda(x), MemMut::Cuda(o)) => Compute::triangle(x, t, elem, at, bytes, o)?,
            _ => return Err(mixed(name)),
        }
        Ok(out)
    }
}

impl Storage {
    /// The one-hot rows of the `n` int64 classes from `start`: a new int64 storage of
    /// `n * classes` elements on the same device, row `r` 1 at column `self[start + r]`. A class
    /// outside `0..classes` is an index error naming the first (on CUDA after one
    /// synchronisation).
    #[track_caller]
    pub fn one_hot_at(&self, start: usize, n: usize, classes: usize) -> Result<Storage> {
        let name = "one_hot";
        if self.dtype != DType::I64 {
            return Err(Error::UnsupportedDType {
                op: name,
                dtype: self.dtype,
            });
        }
        self.check_range(name, start, n)?;
        let len = n.checked_mul(classes).ok_or(Error::SizeOverflow {
            len: usize::MAX,
            dtype: DType::I64,
        })?;
        crate::cpu::byte_len(len, DType::I64)?;
        let mut out = Storage::uninit(len, DType::I64, self.device())?;
        match (self.read(name)?.mem(), out.mem_mut(name)?) {
            (Mem::Host(x), MemMut::Host(o)) => x.one_hot(start, n, classes, o)?,
            (Mem::Cuda(x), MemMut::Cuda(o)) => x.one_hot(start, n, classes, o)?,
            _ => return Err(mixed(name)),
        }
        Ok(out)
    }
}
