//! Index expressions: what a user writes between the brackets.

use genesis_storage::{DType, View};

/// The element type of an index tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexDType {
    /// 64-bit integers.
    I64,
    /// 32-bit integers.
    I32,
    /// Booleans (a mask).
    Bool,
}

/// An index tensor given on the host: its dtype, shape and values (bools as 0 / 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexTensor {
    /// Element type.
    pub dtype: IndexDType,
    /// Shape.
    pub shape: Vec<usize>,
    /// Row-major values.
    pub data: Vec<i64>,
}

impl IndexTensor {
    /// An int64 index tensor.
    pub fn i64(shape: &[usize], data: Vec<i64>) -> IndexTensor {
        IndexTensor {
            dtype: IndexDType::I64,
            shape: shape.to_vec(),
            data,
        }
    }

    /// A boolean mask.
    pub fn mask(shape: &[usize], data: &[bool]) -> IndexTensor {
        IndexTensor {
            dtype: IndexDType::Bool,
            shape: shape.to_vec(),
            data: data.iter().map(|&b| i64::from(b)).collect(),
        }
    }
}

/// An index tensor held in a storage, on any device: int64, int32 or a bool mask. A CUDA one
/// stays on its device: its values are wrapped and checked there when the plan runs (an
/// out-of-range value is still reported as [`Error::IndexOutOfRange`](crate::Error), and an
/// assignment then writes nothing), and a CUDA mask is turned into coordinates there.
#[derive(Debug, Clone)]
pub struct StoredIndex {
    /// The tensor: a view of its storage.
    pub view: View,
    /// Its element type.
    pub dtype: IndexDType,
}

impl PartialEq for StoredIndex {
    /// The same storage seen through the same layout.
    fn eq(&self, other: &StoredIndex) -> bool {
        self.dtype == other.dtype
            && std::sync::Arc::ptr_eq(self.view.storage(), other.view.storage())
            && self.view.layout() == other.view.layout()
    }
}

impl Eq for StoredIndex {}

impl StoredIndex {
    /// The tensor's shape.
    pub fn shape(&self) -> &[usize] {
        self.view.layout().shape()
    }

    /// Whether its storage is on the host (its values can be read while planning).
    pub fn on_host(&self) -> bool {
        self.view.storage().host_bytes().is_some()
    }

    /// Its values as a host [`IndexTensor`] (a copy; from the device when it is there).
    pub fn to_host(&self) -> Result<IndexTensor, genesis_storage::Error> {
        let dense = self.view.contiguous()?;
        let data: Vec<i64> = match self.dtype {
            IndexDType::I64 => dense.to_vec::<i64>()?,
            IndexDType::I32 => dense.to_vec::<i32>()?.into_iter().map(i64::from).collect(),
            IndexDType::Bool => dense
                .to_bytes()?
                .into_iter()
                .map(|b| i64::from(b != 0))
                .collect(),
        };
        Ok(IndexTensor {
            dtype: self.dtype,
            shape: self.shape().to_vec(),
            data,
        })
    }
}

/// A boolean mask as coordinates: for a mask of `mask_shape`, one int64 array of `selected`
/// positions per mask dimension (NumPy's `nonzero`), in row-major order of the mask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaskCoords {
    /// The mask's shape.
    pub mask_shape: Vec<usize>,
    /// Set elements.
    pub selected: usize,
    /// One coordinate array (shape `[selected]`) per mask dimension.
    pub coords: Vec<StoredIndex>,
}

/// One item of an index expression (`x[1:5:2, ..., None, idx]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexItem {
    /// An integer (negative counts from the end).
    Int(i64),
    /// `start:stop:step`, each optional.
    Slice {
        /// First element (default 0).
        start: Option<i64>,
        /// One past the last (default: the end).
        stop: Option<i64>,
        /// Step (default 1; must be positive).
        step: Option<i64>,
    },
    /// `None` / `np.newaxis`: a new dimension of size 1.
    NewAxis,
    /// `...`: as many full slices as needed.
    Ellipsis,
    /// An index tensor given on the host (integers, or a boolean mask).
    Tensor(IndexTensor),
    /// An index tensor in a storage, on any device (see [`IndexItem::stored`]).
    Stored(StoredIndex),
    /// A boolean mask already turned into coordinates on its device (what
    /// [`resolve_masks`](crate::resolve_masks) makes of a device mask).
    Nonzero(MaskCoords),
    /// A tensor of a dtype that cannot index (floats): always an error, kept so the planner can
    /// say so.
    BadTensor(&'static str),
}

impl IndexItem {
    /// `start..stop` with step 1.
    pub fn range(start: i64, stop: i64) -> IndexItem {
        IndexItem::Slice {
            start: Some(start),
            stop: Some(stop),
            step: None,
        }
    }

    /// An index tensor in a storage, on any device: `I64`, `I32` or `Bool` (a mask); any
    /// other dtype gives [`IndexItem::BadTensor`], which planning rejects.
    pub fn stored(view: View) -> IndexItem {
        let dtype = match view.storage().dtype() {
            DType::I64 => IndexDType::I64,
            DType::I32 => IndexDType::I32,
            DType::Bool => IndexDType::Bool,
            other => return IndexItem::BadTensor(other.name()),
        };
        IndexItem::Stored(StoredIndex { view, dtype })
    }

    /// `::` (everything).
    pub fn full() -> IndexItem {
        IndexItem::Slice {
            start: None,
            stop: None,
            step: None,
        }
    }
}

/// What can stand as an index tensor in [`s!`](crate::s)'s `@t` form: a host [`IndexTensor`], a
/// [`StoredIndex`], a storage [`View`] (any device), or an [`IndexItem`] itself.
pub trait ToIndex {
    /// The index item.
    fn to_index_item(self) -> IndexItem;
}

impl ToIndex for IndexItem {
    fn to_index_item(self) -> IndexItem {
        self
    }
}

impl ToIndex for IndexTensor {
    fn to_index_item(self) -> IndexItem {
        IndexItem::Tensor(self)
    }
}

impl ToIndex for StoredIndex {
    fn to_index_item(self) -> IndexItem {
        IndexItem::Stored(self)
    }
}

impl ToIndex for View {
    fn to_index_item(self) -> IndexItem {
        IndexItem::stored(self)
    }
}

impl ToIndex for &View {
    fn to_index_item(self) -> IndexItem {
        IndexItem::stored(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::s;

    #[test]
    fn macro_reads_like_python() {
        let t = IndexTensor::i64(&[2], vec![0, 1]);
        let items = s![1, 2..5, ..;2, 1..;3, ..4, NEW, ELLIPSIS, -1, @t.clone()];
        assert_eq!(items.len(), 9);
        assert_eq!(items[0], IndexItem::Int(1));
        assert_eq!(
            items[1],
            IndexItem::Slice {
                start: Some(2),
                stop: Some(5),
                step: None
            }
        );
        assert_eq!(
            items[2],
            IndexItem::Slice {
                start: None,
                stop: None,
                step: Some(2)
            }
        );
        assert_eq!(
            items[3],
            IndexItem::Slice {
                start: Some(1),
                stop: None,
                step: Some(3)
            }
        );
        assert_eq!(
            items[4],
            IndexItem::Slice {
                start: None,
                stop: Some(4),
                step: None
            }
        );
        assert_eq!(items[5], IndexItem::NewAxis);
        assert_eq!(items[6], IndexItem::Ellipsis);
        assert_eq!(items[7], IndexItem::Int(-1));
        assert_eq!(items[8], IndexItem::Tensor(t));
    }
}
