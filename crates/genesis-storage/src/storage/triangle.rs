//! The triangles of matrices (`tril`, `triu`): one pass, output allocated here.

use genesis_kernels::triangle::Triangle;

use super::{Mem, MemMut, Storage, mixed};
use crate::Result;
use crate::compute::Compute;

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
