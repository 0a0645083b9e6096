//! Index expressions on tensors: `NEW`, `ELLIPSIS`, and [`IndexArg`] for tensors (the `s!`
//! macro and its traits are `genesis-index`'s).

use genesis_index::{IndexArg, IndexItem};

use crate::Tensor;

/// Python's `None` (`np.newaxis`) as an index item: a new dimension of size 1. In [`s!`](crate::s!)
/// the bare word `NEW` needs no import; elsewhere, `use genesis::NEW`.
///
/// ```
/// use genesis::{DType, Device, ELLIPSIS, IndexItem, NEW, Tensor, s};
/// # fn main() -> genesis::Result<()> {
/// let t = Tensor::zeros(&[2, 3], DType::F32, Device::Cpu)?;
/// // PyTorch's `t[None, ..., 0]`.
/// let items = [NEW, ELLIPSIS, IndexItem::Int(0)];
/// assert_eq!(t.i(&items)?.shape(), &[1, 2]);
/// assert_eq!(t.i(&s![NEW, ELLIPSIS, 0])?.shape(), &[1, 2]);
/// assert_eq!(t.i(&[ELLIPSIS, NEW])?.shape(), &[2, 3, 1]);
/// # Ok(())
/// # }
/// ```
pub const NEW: IndexItem = IndexItem::NewAxis;

/// Python's `...` as an index item: as many full slices as the other items leave dimensions.
/// In [`s!`](crate::s!) the bare word `ELLIPSIS` needs no import; elsewhere, `use genesis::ELLIPSIS`
/// (see [`NEW`]).
pub const ELLIPSIS: IndexItem = IndexItem::Ellipsis;

impl IndexArg for &Tensor {
    fn index_item(self) -> IndexItem {
        genesis_index::ToIndex::to_index_item(self)
    }
}

impl IndexArg for Tensor {
    fn index_item(self) -> IndexItem {
        genesis_index::ToIndex::to_index_item(self)
    }
}

/// An index expression, read like Python's, as a `Vec<IndexItem>` for [`Tensor::i`] and the
/// assignments:
///
/// - an integer: `s![2]`, `s![-1]`, `s![i]`, `s![n - 1]`;
/// - a slice: `s![1..3]`, `s![..]`, `s![lo..hi]`, `s![..=k]`, with a step after `;`:
///   `s![..;2]`, `s![lo..;step]`;
/// - `NEW` (Python's `None`) and `ELLIPSIS` (`...`);
/// - `@t` for an index tensor: a host [`IndexTensor`](crate::IndexTensor) or a [`Tensor`] of dtype `I64`, `I32` or
///   `Bool` on any device (`s![@&idx]`, `s![@mask]`).
///
/// Items are separated by commas; bounds are any Rust expression (variables, arithmetic,
/// calls).
///
/// ```
/// use genesis::{DType, Device, Tensor, s};
/// # fn main() -> genesis::Result<()> {
/// let m = Tensor::arange(0.0, 20.0, 1.0, DType::F32, Device::Cpu)?.reshape(&[4, 5])?;
/// let (lo, hi, step) = (1, 3, 2usize);
/// assert_eq!(m.i(&s![lo..hi, ..;step])?.shape(), &[2, 3]);
/// assert_eq!(m.i(&s![lo..hi, ..;2])?.to_vec::<f32>()?, m.i(&s![1..3, 0..5;2])?.to_vec::<f32>()?);
/// assert_eq!(m.i(&s![-1, ..=2])?.to_vec::<f32>()?, [15.0, 16.0, 17.0]);
/// assert_eq!(m.i(&s![m.shape()[0] - 1, NEW, ELLIPSIS])?.shape(), &[1, 5]);
/// // Assignment, PyTorch's `m[1:3, ::2] = 0` and `m[:, 0] = -1`: through a view, or in place.
/// m.i(&s![1..3, ..;2])?.fill_(0.0)?;
/// m.index_put_scalar_(&s![.., 0], -1.0)?;
/// assert_eq!(m.i(&s![1])?.to_vec::<f32>()?, [-1.0, 6.0, 0.0, 8.0, 0.0]);
/// # Ok(())
/// # }
/// ```
#[doc(inline)]
pub use genesis_index::s;
