//! 64-byte aligned host memory.

use crate::{DType, Error, Result, WithDType};

/// One cache line: the unit of a [`CpuStorage`]'s allocation, which makes it 64-byte aligned.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// Host memory holding `len` elements of one dtype, 64-byte aligned (so any element type, and
/// SIMD loads, are aligned).
#[derive(Clone)]
pub struct CpuStorage {
    lines: Vec<Line>,
    nbytes: usize,
}

impl std::fmt::Debug for CpuStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuStorage")
            .field("nbytes", &self.nbytes)
            .finish()
    }
}

impl CpuStorage {
    /// `nbytes` zeroed bytes.
    pub fn zeroed(nbytes: usize) -> CpuStorage {
        CpuStorage {
            lines: vec![Line([0; 64]); nbytes.div_ceil(64)],
            nbytes,
        }
    }

    /// A copy of `data`.
    pub fn from_slice<T: WithDType>(data: &[T]) -> CpuStorage {
        let mut s = CpuStorage::zeroed(std::mem::size_of_val(data));
        s.as_mut_slice::<T>().copy_from_slice(data);
        s
    }

    /// A copy of raw bytes.
    pub fn from_bytes(bytes: &[u8]) -> CpuStorage {
        let mut s = CpuStorage::zeroed(bytes.len());
        s.as_bytes_mut().copy_from_slice(bytes);
        s
    }

    /// Size in bytes.
    pub fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// Address of the first byte (64-byte aligned).
    pub fn as_ptr(&self) -> *const u8 {
        self.lines.as_ptr().cast()
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: `lines` owns at least `nbytes` initialised bytes (`Line` is a plain byte
        // array), and the returned slice borrows `self`.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<u8>(), self.nbytes) }
    }

    /// The bytes, mutably.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_bytes`, with a unique borrow of `self`.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<u8>(), self.nbytes) }
    }

    /// The elements as `T`; the length is `nbytes / size_of::<T>()`.
    pub fn as_slice<T: WithDType>(&self) -> &[T] {
        let n = self.nbytes / size_of::<T>();
        // SAFETY: the memory is 64-byte aligned (>= align_of::<T>() for every WithDType type),
        // holds at least `n * size_of::<T>()` initialised bytes, and every bit pattern is a valid
        // `T` (WithDType is sealed to plain-old-data types).
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<T>(), n) }
    }

    /// The elements as `T`, mutably.
    pub fn as_mut_slice<T: WithDType>(&mut self) -> &mut [T] {
        let n = self.nbytes / size_of::<T>();
        // SAFETY: as in `as_slice`, with a unique borrow of `self`.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<T>(), n) }
    }
}

pub(crate) fn byte_len(len: usize, dtype: DType) -> Result<usize> {
    len.checked_mul(dtype.size())
        .ok_or(Error::SizeOverflow { len, dtype })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_round_trips() {
        let s = CpuStorage::from_slice(&[1.0f64, 2.0, 3.0]);
        assert_eq!(s.as_ptr() as usize % 64, 0);
        assert_eq!(s.nbytes(), 24);
        assert_eq!(s.as_slice::<f64>(), &[1.0, 2.0, 3.0]);
        let empty = CpuStorage::zeroed(0);
        assert!(empty.as_slice::<f32>().is_empty());
    }
}
