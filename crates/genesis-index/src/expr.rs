//! `s!`, the index expression macro, and the traits it reads its items through: bounds are
//! any integer expression (`s![lo..hi;step]`), items any [`IndexArg`].

use std::ops::{Range, RangeFrom, RangeFull, RangeInclusive, RangeTo, RangeToInclusive};

use crate::{IndexItem, IndexTensor};

/// One item of an index expression, as [`s!`](crate::s) reads an item without `@`: an
/// integer (negative counts from the end), a range of integers (`a..b`, `a..`, `..b`, `..`,
/// `a..=b`, `..=b`), an [`IndexItem`], or an index tensor.
pub trait IndexArg {
    /// The item.
    fn index_item(self) -> IndexItem;
}

/// A range with a step (`s![a..b;2]`).
pub trait SliceArg {
    /// The slice with `step` (positive; a negative step is an error when indexing).
    fn with_step(self, step: impl IndexInt) -> IndexItem;
}

/// An integer usable as an index or a bound.
pub trait IndexInt: Copy {
    /// The value as `i64` (values beyond `i64::MAX` saturate: they are out of range anyway).
    fn to_i64(self) -> i64;
}

macro_rules! index_ints {
    ($($t:ty),*) => {$(
        impl IndexInt for $t {
            fn to_i64(self) -> i64 {
                i64::try_from(self).unwrap_or(i64::MAX)
            }
        }
        impl IndexArg for $t {
            fn index_item(self) -> IndexItem {
                IndexItem::Int(self.to_i64())
            }
        }
    )*};
}

index_ints!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);

fn slice(start: Option<i64>, stop: Option<i64>, step: Option<i64>) -> IndexItem {
    IndexItem::Slice { start, stop, step }
}

/// The stop of an inclusive range: one past `end`, or the end of the dimension for -1.
fn inclusive_stop(end: i64) -> Option<i64> {
    (end != -1).then(|| end.saturating_add(1))
}

impl<T: IndexInt> SliceArg for Range<T> {
    fn with_step(self, step: impl IndexInt) -> IndexItem {
        slice(
            Some(self.start.to_i64()),
            Some(self.end.to_i64()),
            Some(step.to_i64()),
        )
    }
}

impl<T: IndexInt> SliceArg for RangeFrom<T> {
    fn with_step(self, step: impl IndexInt) -> IndexItem {
        slice(Some(self.start.to_i64()), None, Some(step.to_i64()))
    }
}

impl<T: IndexInt> SliceArg for RangeTo<T> {
    fn with_step(self, step: impl IndexInt) -> IndexItem {
        slice(None, Some(self.end.to_i64()), Some(step.to_i64()))
    }
}

impl<T: IndexInt> SliceArg for RangeInclusive<T> {
    fn with_step(self, step: impl IndexInt) -> IndexItem {
        slice(
            Some(self.start().to_i64()),
            inclusive_stop(self.end().to_i64()),
            Some(step.to_i64()),
        )
    }
}

impl<T: IndexInt> SliceArg for RangeToInclusive<T> {
    fn with_step(self, step: impl IndexInt) -> IndexItem {
        slice(None, inclusive_stop(self.end.to_i64()), Some(step.to_i64()))
    }
}

impl SliceArg for RangeFull {
    fn with_step(self, step: impl IndexInt) -> IndexItem {
        slice(None, None, Some(step.to_i64()))
    }
}

macro_rules! ranges_without_step {
    ($($r:ty),*) => {$(
        impl<T: IndexInt> IndexArg for $r {
            fn index_item(self) -> IndexItem {
                match self.with_step(1i64) {
                    IndexItem::Slice { start, stop, .. } => slice(start, stop, None),
                    other => other,
                }
            }
        }
    )*};
}

ranges_without_step!(
    Range<T>,
    RangeFrom<T>,
    RangeTo<T>,
    RangeInclusive<T>,
    RangeToInclusive<T>
);

impl IndexArg for RangeFull {
    fn index_item(self) -> IndexItem {
        slice(None, None, None)
    }
}

impl IndexArg for IndexItem {
    fn index_item(self) -> IndexItem {
        self
    }
}

impl IndexArg for IndexTensor {
    fn index_item(self) -> IndexItem {
        IndexItem::Tensor(self)
    }
}

/// An index expression, read like Python's, as a `Vec<IndexItem>`:
///
/// - an integer: `s![2]`, `s![-1]`, `s![i]`, `s![n - 1]`;
/// - a slice: `s![1..3]`, `s![..]`, `s![lo..hi]`, `s![..=k]`, with a step after `;`:
///   `s![..;2]`, `s![lo..;step]`;
/// - `NEW` (Python's `None`) and `ELLIPSIS` (`...`);
/// - an index tensor after `@`: `s![@idx]` (anything [`ToIndex`](crate::ToIndex): a host
///   [`IndexTensor`], a tensor on any device), or any [`IndexArg`] value.
///
/// ```
/// use genesis_index::{IndexItem, s};
/// let (lo, hi) = (1, 3);
/// assert_eq!(
///     s![lo..hi, ..;2, NEW, ELLIPSIS, -1],
///     vec![
///         IndexItem::Slice { start: Some(1), stop: Some(3), step: None },
///         IndexItem::Slice { start: None, stop: None, step: Some(2) },
///         IndexItem::NewAxis,
///         IndexItem::Ellipsis,
///         IndexItem::Int(-1),
///     ]
/// );
/// assert_eq!(s![..=2], vec![IndexItem::Slice { start: None, stop: Some(3), step: None }]);
/// ```
#[macro_export]
macro_rules! s {
    (@item [] NEW) => { $crate::IndexItem::NewAxis };
    (@item [] ELLIPSIS) => { $crate::IndexItem::Ellipsis };
    (@item [] @ $($t:tt)+) => { $crate::ToIndex::to_index_item($($t)+) };
    (@item [$($r:tt)+] ; $($step:tt)+) => {
        $crate::SliceArg::with_step(($($r)+), $($step)+)
    };
    (@item [$($r:tt)*] $t:tt $($rest:tt)*) => { $crate::s!(@item [$($r)* $t] $($rest)*) };
    (@item [$($r:tt)+]) => { $crate::IndexArg::index_item(($($r)+)) };
    // Split the input at top-level commas, one item at a time.
    (@split [$($done:expr),*] [$($cur:tt)*] , $($rest:tt)*) => {
        $crate::s!(@split [$($done,)* $crate::s!(@item [] $($cur)*)] [] $($rest)*)
    };
    (@split [$($done:expr),*] [$($cur:tt)*] $t:tt $($rest:tt)*) => {
        $crate::s!(@split [$($done),*] [$($cur)* $t] $($rest)*)
    };
    (@split [$($done:expr),*] []) => { ::std::vec::Vec::<$crate::IndexItem>::from([$($done),*]) };
    (@split [$($done:expr),*] [$($cur:tt)+]) => {
        ::std::vec::Vec::<$crate::IndexItem>::from([$($done,)* $crate::s!(@item [] $($cur)+)])
    };
    () => { ::std::vec::Vec::<$crate::IndexItem>::new() };
    ($($t:tt)+) => { $crate::s!(@split [] [] $($t)+) };
}
