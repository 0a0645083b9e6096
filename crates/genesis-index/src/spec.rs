//! Index expressions: what a user writes between the brackets.

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
    /// An index tensor (integers, or a boolean mask).
    Tensor(IndexTensor),
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

    /// `::` (everything).
    pub fn full() -> IndexItem {
        IndexItem::Slice {
            start: None,
            stop: None,
            step: None,
        }
    }
}

/// Builds a `Vec<IndexItem>` reading close to Python: `s![1, 2..5, ..;2, NEW, ELLIPSIS]`.
///
/// Items: an integer expression; a range `a..b` (either end optional); a range with a step
/// `a..b;step` or `..;step`; `NEW` for `None`; `ELLIPSIS` for `...`; `@t` for an index tensor
/// expression `t` (an [`IndexTensor`]).
#[macro_export]
macro_rules! s {
    (@item NEW) => { $crate::IndexItem::NewAxis };
    (@item ELLIPSIS) => { $crate::IndexItem::Ellipsis };
    (@item @ $t:expr) => { $crate::IndexItem::Tensor($t) };
    (@item .. ; $step:expr) => { $crate::IndexItem::Slice { start: None, stop: None, step: Some($step) } };
    (@item ..) => { $crate::IndexItem::Slice { start: None, stop: None, step: None } };
    (@item $a:literal .. $b:literal ; $step:expr) => { $crate::IndexItem::Slice { start: Some($a), stop: Some($b), step: Some($step) } };
    (@item $a:literal .. ; $step:expr) => { $crate::IndexItem::Slice { start: Some($a), stop: None, step: Some($step) } };
    (@item .. $b:literal ; $step:expr) => { $crate::IndexItem::Slice { start: None, stop: Some($b), step: Some($step) } };
    (@item $a:literal .. $b:literal) => { $crate::IndexItem::Slice { start: Some($a), stop: Some($b), step: None } };
    (@item $a:literal ..) => { $crate::IndexItem::Slice { start: Some($a), stop: None, step: None } };
    (@item .. $b:literal) => { $crate::IndexItem::Slice { start: None, stop: Some($b), step: None } };
    (@item $i:expr) => { $crate::IndexItem::Int($i) };
    // Split the input at top-level commas, one item at a time.
    (@split [$($done:expr),*] [$($cur:tt)*] , $($rest:tt)*) => {
        $crate::s!(@split [$($done,)* $crate::s!(@item $($cur)*)] [] $($rest)*)
    };
    (@split [$($done:expr),*] [$($cur:tt)*] $t:tt $($rest:tt)*) => {
        $crate::s!(@split [$($done),*] [$($cur)* $t] $($rest)*)
    };
    (@split [$($done:expr),*] []) => { ::std::vec::Vec::<$crate::IndexItem>::from([$($done),*]) };
    (@split [$($done:expr),*] [$($cur:tt)+]) => {
        ::std::vec::Vec::<$crate::IndexItem>::from([$($done,)* $crate::s!(@item $($cur)+)])
    };
    () => { Vec::<$crate::IndexItem>::new() };
    ($($t:tt)+) => { $crate::s!(@split [] [] $($t)+) };
}

#[cfg(test)]
mod tests {
    use super::*;

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
