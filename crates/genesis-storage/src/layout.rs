use smallvec::SmallVec;

/// Shape, strides (in elements) and offset of a view over a storage.
///
/// A plain value: view operations return new layouts. The full set of view operations and the
/// strided-blocks classifier come with the storage issue; today only contiguous layouts are
/// made.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layout {
    shape: SmallVec<[usize; 6]>,
    strides: SmallVec<[isize; 6]>,
    offset: usize,
}

impl Layout {
    /// The row-major contiguous layout of `shape`.
    pub fn contiguous(shape: &[usize]) -> Layout {
        let mut strides: SmallVec<[isize; 6]> = SmallVec::from_elem(0, shape.len());
        let mut s: isize = 1;
        for (i, &d) in shape.iter().enumerate().rev() {
            strides[i] = s;
            s = s.saturating_mul(d.max(1) as isize);
        }
        Layout {
            shape: shape.into(),
            strides,
            offset: 0,
        }
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[isize] {
        &self.strides
    }

    /// Offset of the first element, in elements.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Number of elements (1 for a scalar, 0 if any dimension is 0).
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the elements are laid out row-major with no gaps (dimensions of size 1 and empty
    /// shapes are contiguous whatever their strides).
    pub fn is_contiguous(&self) -> bool {
        if self.numel() == 0 {
            return true;
        }
        let mut expected: isize = 1;
        for (&d, &s) in self.shape.iter().zip(&self.strides).rev() {
            if d != 1 {
                if s != expected {
                    return false;
                }
                expected *= d as isize;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_strides() {
        let l = Layout::contiguous(&[2, 3, 4]);
        assert_eq!(l.strides(), &[12, 4, 1]);
        assert_eq!(l.numel(), 24);
        assert!(l.is_contiguous());
        assert_eq!(Layout::contiguous(&[]).numel(), 1);
        assert_eq!(Layout::contiguous(&[3, 0]).numel(), 0);
    }
}
