//! `Layout`: shape, strides (in elements) and offset, as a plain value. View operations return
//! new layouts or a typed error; nothing here touches memory.
//!
//! A shape has at most [`MAX_RANK`] dimensions (NumPy's limit, 64): every checked path that
//! makes or changes a shape refuses more with [`LayoutError::RankTooLarge`], so code that
//! walks dimensions (printing, kernels' descriptors, index plans) meets a bounded rank.

use smallvec::SmallVec;

/// Dimensions and strides of a layout (inline up to 6 dimensions).
pub type Dims = SmallVec<[usize; 6]>;
/// Strides in elements (negative strides are allowed in layouts, never produced by views here).
pub type Strides = SmallVec<[isize; 6]>;

/// The most dimensions a shape may have (NumPy's limit). [`checked_numel`], which every
/// shape a storage, view or tensor is made with goes through, refuses more with
/// [`LayoutError::RankTooLarge`]; [`Layout::check_bounds`] therefore refuses a layout of more
/// dimensions for every storage, and no tensor of more dimensions exists.
pub const MAX_RANK: usize = 64;

/// [`LayoutError::RankTooLarge`] when `rank` exceeds [`MAX_RANK`].
pub fn check_rank(rank: usize) -> Result<(), LayoutError> {
    if rank > MAX_RANK {
        Err(LayoutError::RankTooLarge {
            rank,
            max: MAX_RANK,
        })
    } else {
        Ok(())
    }
}

/// Why a view operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// A reshape or view to a shape that cannot hold the elements: another element count, or
    /// sizes whose product does not divide it when one size is `-1` (PyTorch's message).
    #[error("shape '{shape:?}' is invalid for input of size {numel}")]
    ElementCount {
        /// The shape asked for, as given (`-1` for the inferred size).
        shape: Vec<isize>,
        /// The element count of the input.
        numel: usize,
    },
    /// A shape with more than one `-1`.
    #[error("only one dimension can be inferred (shape '{shape:?}')")]
    MultipleInferred {
        /// The shape asked for, as given.
        shape: Vec<isize>,
    },
    /// A shape with a negative size other than `-1`.
    #[error("invalid shape dimension {size} in shape '{shape:?}'")]
    NegativeSize {
        /// The shape asked for, as given.
        shape: Vec<isize>,
        /// The first negative size other than `-1`.
        size: isize,
    },
    /// A `-1` among sizes whose product is 0, for an input of no elements: any size fits.
    #[error(
        "cannot reshape tensor of 0 elements into shape '{shape:?}' because the unspecified dimension size -1 can be any value and is ambiguous"
    )]
    AmbiguousInferred {
        /// The shape asked for, as given.
        shape: Vec<isize>,
    },
    /// A view (no copy) that the strides do not allow; `reshape` copies instead.
    #[error(
        "view of shape {shape:?} with strides {strides:?} as {to:?} needs a copy: use reshape or contiguous"
    )]
    NotViewable {
        /// The current shape.
        shape: Vec<usize>,
        /// The current strides.
        strides: Vec<isize>,
        /// The shape asked for.
        to: Vec<usize>,
    },
    /// A dimension index outside the rank.
    #[error("dimension {dim} is out of range for a tensor of {rank} dimension(s)")]
    DimOutOfRange {
        /// The dimension given (may be negative).
        dim: isize,
        /// The rank.
        rank: usize,
    },
    /// A permutation that is not one.
    #[error("{perm:?} is not a permutation of 0..{rank}")]
    BadPermutation {
        /// The permutation given.
        perm: Vec<usize>,
        /// The rank.
        rank: usize,
    },
    /// A range outside a dimension.
    #[error("range {start}..{end} is out of bounds for dimension {dim} of size {size}")]
    RangeOutOfBounds {
        /// The dimension.
        dim: usize,
        /// Range start.
        start: usize,
        /// Range end.
        end: usize,
        /// The dimension's size.
        size: usize,
    },
    /// A zero step (negative steps are not views in Genesis, as in PyTorch).
    #[error("step must be positive, got {step}")]
    BadStep {
        /// The step given.
        step: isize,
    },
    /// An expand to a shape the layout does not broadcast to.
    #[error("cannot expand shape {from:?} to {to:?}")]
    BadExpand {
        /// The current shape.
        from: Vec<usize>,
        /// The shape asked for.
        to: Vec<usize>,
    },
    /// A layout that reaches outside its storage.
    #[error("layout reaches element {needed} but the storage holds {len}")]
    OutOfStorage {
        /// One past the largest element index the layout touches.
        needed: usize,
        /// The storage's length in elements.
        len: usize,
    },
    /// A shape whose element count is not representable: the product of its sizes exceeds
    /// `isize::MAX` (no storage can hold that many elements, whatever their size).
    #[error("shape {shape:?} has too many elements (the product of its sizes exceeds isize::MAX)")]
    TooManyElements {
        /// The shape.
        shape: Vec<usize>,
    },
    /// A layout whose strides reach before the storage's first element, or whose reach
    /// (offset plus `(size - 1) * stride` over the dimensions) is not representable.
    #[error(
        "layout of shape {shape:?}, strides {strides:?} and offset {offset} reaches outside any storage"
    )]
    BadStrides {
        /// The shape.
        shape: Vec<usize>,
        /// The strides.
        strides: Vec<isize>,
        /// The offset.
        offset: usize,
    },
    /// A shape of more dimensions than [`MAX_RANK`].
    #[error("a shape of {rank} dimensions exceeds the maximum rank of {max}")]
    RankTooLarge {
        /// The rank asked for.
        rank: usize,
        /// The maximum, [`MAX_RANK`].
        max: usize,
    },
    /// A layout given a different number of strides than dimensions.
    #[error("{strides} stride(s) for {rank} dimension(s)")]
    StrideCount {
        /// Dimensions.
        rank: usize,
        /// Strides given.
        strides: usize,
    },
}

/// The number of elements of `shape`, checked: the one element count every shape goes through
/// (views, reshapes, expansions, creation). [`LayoutError::RankTooLarge`] for more than
/// [`MAX_RANK`] dimensions; otherwise 0 when a size is 0 (whatever the others), and
/// [`LayoutError::TooManyElements`] when the product exceeds `isize::MAX`, so that every
/// element index and stride of a contiguous layout of the shape fits an `isize`.
pub fn checked_numel(shape: &[usize]) -> Result<usize, LayoutError> {
    check_rank(shape.len())?;
    if shape.contains(&0) {
        return Ok(0);
    }
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| LayoutError::TooManyElements {
            shape: shape.to_vec(),
        })
}

/// How the elements of a layout lie in memory, for copies: one block (a `memcpy`), uniform
/// blocks (a 2-D copy), or general strides (a kernel).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StridedBlocks {
    /// All elements are contiguous, starting at `start` (elements).
    Single {
        /// First element.
        start: usize,
        /// Number of elements.
        len: usize,
    },
    /// `count` blocks of `len` contiguous elements, block `i` starting at `start + i * pitch`.
    Uniform {
        /// First element of the first block.
        start: usize,
        /// Elements per block.
        len: usize,
        /// Number of blocks.
        count: usize,
        /// Distance between block starts, in elements.
        pitch: usize,
    },
    /// Anything else.
    General,
}

/// Shape, strides in elements, and the offset of the first element.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layout {
    shape: Dims,
    strides: Strides,
    offset: usize,
}

fn contiguous_strides(shape: &[usize]) -> Strides {
    let mut strides: Strides = SmallVec::from_elem(0, shape.len());
    let mut s: isize = 1;
    for (i, &d) in shape.iter().enumerate().rev() {
        strides[i] = s;
        s = s.saturating_mul(d.max(1) as isize);
    }
    strides
}

impl Layout {
    /// The row-major contiguous layout of `shape`. A shape with too many elements or more than
    /// [`MAX_RANK`] dimensions gives a layout that [`Layout::check_bounds`] refuses for every
    /// storage (its [`Layout::numel`] is `usize::MAX`); [`Layout::try_contiguous`] says so up
    /// front.
    pub fn contiguous(shape: &[usize]) -> Layout {
        Layout {
            shape: shape.into(),
            strides: contiguous_strides(shape),
            offset: 0,
        }
    }

    /// The row-major contiguous layout of `shape`, or [`LayoutError::TooManyElements`] or
    /// [`LayoutError::RankTooLarge`].
    pub fn try_contiguous(shape: &[usize]) -> Result<Layout, LayoutError> {
        checked_numel(shape)?;
        Ok(Layout::contiguous(shape))
    }

    /// A layout from parts, not checked: [`Layout::check_bounds`] (which every storage
    /// operation runs on the layouts it is given) refuses one that reaches outside a storage,
    /// whose element count or reach overflows, whose rank exceeds [`MAX_RANK`], or whose
    /// stride count differs from its rank.
    pub fn new(shape: &[usize], strides: &[isize], offset: usize) -> Layout {
        Layout {
            shape: shape.into(),
            strides: strides.into(),
            offset,
        }
    }

    /// [`Layout::new`], checked now: at most [`MAX_RANK`] dimensions, one stride per dimension,
    /// a representable element count, and a reach that starts at element 0 or later and is
    /// representable.
    pub fn try_new(
        shape: &[usize],
        strides: &[isize],
        offset: usize,
    ) -> Result<Layout, LayoutError> {
        let l = Layout::new(shape, strides, offset);
        l.span()?;
        Ok(l)
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

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements (1 for a scalar, 0 if any dimension is 0), through
    /// [`checked_numel`]; `usize::MAX` for a shape whose count is not representable or whose
    /// rank exceeds [`MAX_RANK`] (such a layout fits no storage: [`Layout::check_bounds`]
    /// refuses it). [`Layout::try_numel`]
    /// gives the error instead.
    pub fn numel(&self) -> usize {
        checked_numel(&self.shape).unwrap_or(usize::MAX)
    }

    /// Number of elements, or [`LayoutError::TooManyElements`].
    pub fn try_numel(&self) -> Result<usize, LayoutError> {
        checked_numel(&self.shape)
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
                // Overflow means more elements than any storage holds: not contiguous.
                let Some(e) = isize::try_from(d)
                    .ok()
                    .and_then(|d| expected.checked_mul(d))
                else {
                    return false;
                };
                expected = e;
            }
        }
        true
    }

    /// The layout as runs: `(run, count, pitch)` when its elements are `count` runs of `run`
    /// consecutive indices, the runs `pitch` apart (`pitch >= run`, or `count == 1`): the
    /// dimensions of more than one element, by increasing stride, merged where one continues
    /// the other. `None` for other layouts (negative or zero strides, more than two levels).
    fn runs(&self) -> Option<(usize, usize, usize)> {
        let mut dims: Vec<(usize, usize)> = Vec::new();
        for (&d, &st) in self.shape.iter().zip(&self.strides) {
            if d > 1 {
                dims.push((d, usize::try_from(st).ok().filter(|&s| s > 0)?));
            }
        }
        dims.sort_by_key(|&(_, st)| st);
        let mut merged: Vec<(usize, usize)> = Vec::new();
        for (d, st) in dims {
            match merged.last_mut() {
                Some((n, s)) if n.checked_mul(*s) == Some(st) => *n *= d,
                _ => merged.push((d, st)),
            }
        }
        match merged[..] {
            [] => Some((1, 1, 1)),
            [(n, 1)] => Some((n, 1, n)),
            [(c, p)] => Some((1, c, p)),
            [(r, 1), (c, p)] if p >= r => Some((r, c, p)),
            _ => None,
        }
    }

    /// Whether no element index of `self` is one of `other`'s, when that can be shown cheaply:
    /// their spans do not meet, or both are the same runs (see `runs`) at offsets whose runs
    /// interleave without meeting (the pieces of a `split` along the last dimension). `false`
    /// when they share an index or it cannot be shown.
    pub fn disjoint_from(&self, other: &Layout) -> bool {
        let (Ok(a), Ok(b)) = (self.span(), other.span()) else {
            return false;
        };
        let (Some((alo, ahi)), Some((blo, bhi))) = (a, b) else {
            return true;
        };
        if ahi <= blo || bhi <= alo {
            return true;
        }
        let (Some(ra), Some(rb)) = (self.runs(), other.runs()) else {
            return false;
        };
        if ra != rb {
            return false;
        }
        let (run, count, pitch) = ra;
        let d = self.offset.abs_diff(other.offset);
        if count == 1 {
            return d >= run;
        }
        // The runs i of one and j of the other meet when |d + (j - i) pitch| < run.
        let (q, rem) = (d / pitch, d % pitch);
        let meets_below = rem < run && q < count;
        let meets_above = pitch - rem < run && q + 1 < count;
        !(meets_below || meets_above)
    }

    /// The smallest and one-past-largest element index the layout touches (`None` if empty),
    /// computed exactly: [`LayoutError::BadStrides`] when the layout reaches before element 0
    /// or its reach is not representable, [`LayoutError::TooManyElements`] and
    /// [`LayoutError::StrideCount`] for those faults.
    pub fn span(&self) -> Result<Option<(usize, usize)>, LayoutError> {
        if self.shape.len() != self.strides.len() {
            return Err(LayoutError::StrideCount {
                rank: self.shape.len(),
                strides: self.strides.len(),
            });
        }
        if checked_numel(&self.shape)? == 0 {
            return Ok(None);
        }
        let bad = || LayoutError::BadStrides {
            shape: self.shape.to_vec(),
            strides: self.strides.to_vec(),
            offset: self.offset,
        };
        // In i128: `(d - 1) * s` is below 2^127 in magnitude for one dimension; the sums are
        // checked.
        let (mut lo, mut hi) = (self.offset as i128, self.offset as i128);
        for (&d, &s) in self.shape.iter().zip(&self.strides) {
            let reach = (d as i128 - 1).checked_mul(s as i128).ok_or_else(bad)?;
            if reach < 0 {
                lo = lo.checked_add(reach).ok_or_else(bad)?;
            } else {
                hi = hi.checked_add(reach).ok_or_else(bad)?;
            }
        }
        // Every element index must be an `isize` too (offsets are walked in `isize`).
        if lo < 0 || hi >= isize::MAX as i128 {
            return Err(bad());
        }
        Ok(Some((lo as usize, hi as usize + 1)))
    }

    /// Checks that every element lies inside a storage of `len` elements, with exact
    /// arithmetic: a layout reaching before element 0, one whose element count or reach
    /// overflows, or one with a stride count other than its rank is refused too.
    pub fn check_bounds(&self, len: usize) -> Result<(), LayoutError> {
        match self.span()? {
            Some((_, end)) if end > len => Err(LayoutError::OutOfStorage { needed: end, len }),
            _ => Ok(()),
        }
    }

    /// Normalises a possibly negative dimension index.
    pub fn dim(&self, dim: isize) -> Result<usize, LayoutError> {
        self.check_stride_count()?;
        let rank = self.rank() as isize;
        let d = if dim < 0 {
            dim.saturating_add(rank)
        } else {
            dim
        };
        if (0..rank).contains(&d) {
            Ok(d as usize)
        } else {
            Err(LayoutError::DimOutOfRange {
                dim,
                rank: self.rank(),
            })
        }
    }

    /// [`LayoutError::StrideCount`] for a layout (from [`Layout::new`]) whose stride count
    /// differs from its rank: every method that walks the dimensions checks it first.
    fn check_stride_count(&self) -> Result<(), LayoutError> {
        if self.strides.len() == self.shape.len() {
            Ok(())
        } else {
            Err(LayoutError::StrideCount {
                rank: self.shape.len(),
                strides: self.strides.len(),
            })
        }
    }

    /// A view with `shape` and the same elements, when the strides allow it (PyTorch's
    /// `view`); when it fails, copy with `Storage::contiguous` first (what `reshape` does).
    pub fn view(&self, shape: &[usize]) -> Result<Layout, LayoutError> {
        self.check_stride_count()?;
        let (from_numel, to_numel) = (self.try_numel()?, checked_numel(shape)?);
        if from_numel != to_numel {
            return Err(LayoutError::ElementCount {
                shape: shape
                    .iter()
                    .map(|&d| isize::try_from(d).unwrap_or(isize::MAX))
                    .collect(),
                numel: from_numel,
            });
        }
        if self.is_contiguous() {
            return Ok(Layout {
                shape: shape.into(),
                strides: contiguous_strides(shape),
                offset: self.offset,
            });
        }
        // Compute strides as PyTorch's `computeStride`: walk chunks of the old shape that are
        // contiguous among themselves and split them into the new dimensions.
        let not_viewable = || LayoutError::NotViewable {
            shape: self.shape.to_vec(),
            strides: self.strides.to_vec(),
            to: shape.to_vec(),
        };
        if from_numel == 0 {
            return Ok(Layout {
                shape: shape.into(),
                strides: contiguous_strides(shape),
                offset: self.offset,
            });
        }
        let mut new_strides: Strides = SmallVec::from_elem(0, shape.len());
        let old_shape = &self.shape;
        let old_strides = &self.strides;
        let mut view_d = shape.len() as isize - 1;
        let mut chunk_base_stride = *old_strides.last().unwrap_or(&1);
        let mut tensor_numel: usize = 1;
        let mut view_numel: usize = 1;
        // Element counts below are partial products of a checked count (no overflow); the
        // strides are products of a count and a stride of `self`, checked.
        for tensor_d in (0..old_shape.len()).rev() {
            tensor_numel *= old_shape[tensor_d];
            let at_chunk_end = tensor_d == 0
                || (old_shape[tensor_d - 1] != 1
                    && Some(old_strides[tensor_d - 1])
                        != (tensor_numel as isize).checked_mul(chunk_base_stride));
            if at_chunk_end {
                while view_d >= 0 && (view_numel < tensor_numel || shape[view_d as usize] == 1) {
                    new_strides[view_d as usize] = (view_numel as isize)
                        .checked_mul(chunk_base_stride)
                        .ok_or_else(not_viewable)?;
                    view_numel *= shape[view_d as usize];
                    view_d -= 1;
                }
                if view_numel != tensor_numel {
                    return Err(not_viewable());
                }
                if tensor_d > 0 {
                    chunk_base_stride = old_strides[tensor_d - 1];
                    tensor_numel = 1;
                    view_numel = 1;
                }
            }
        }
        if view_d != -1 {
            return Err(not_viewable());
        }
        Ok(Layout {
            shape: shape.into(),
            strides: new_strides,
            offset: self.offset,
        })
    }

    /// `shape` with at most one `-1` replaced by the size that keeps the element count
    /// (PyTorch's `infer_size`): [`LayoutError::MultipleInferred`] for a second `-1`,
    /// [`LayoutError::NegativeSize`] for another negative size,
    /// [`LayoutError::AmbiguousInferred`] for a `-1` among sizes of product 0 when there are
    /// no elements, and [`LayoutError::ElementCount`] (naming `shape` as given) when the sizes
    /// cannot hold the elements.
    pub fn infer_shape(&self, shape: &[isize]) -> Result<Dims, LayoutError> {
        check_rank(shape.len())?;
        let numel = self.try_numel()?;
        let mut out: Dims = SmallVec::new();
        let mut infer = None;
        // The product of the given sizes: 0 when one is 0, however large the others (their
        // product may overflow then, as in PyTorch's `empty(0).reshape(2**40, 2**40, 0)`).
        let mut known = Some(1usize);
        let mut zero = false;
        let too_many = |out: &[isize]| LayoutError::TooManyElements {
            shape: out.iter().map(|&x| x.max(0) as usize).collect(),
        };
        for (i, &d) in shape.iter().enumerate() {
            if d == -1 {
                if infer.is_some() {
                    return Err(LayoutError::MultipleInferred {
                        shape: shape.to_vec(),
                    });
                }
                infer = Some(i);
                out.push(0);
            } else if d < 0 {
                return Err(LayoutError::NegativeSize {
                    shape: shape.to_vec(),
                    size: d,
                });
            } else {
                zero |= d == 0;
                known = known.and_then(|k| k.checked_mul(d as usize));
                out.push(d as usize);
            }
        }
        let known = match known {
            _ if zero => 0,
            Some(k) => k,
            None => return Err(too_many(shape)),
        };
        let invalid = || LayoutError::ElementCount {
            shape: shape.to_vec(),
            numel,
        };
        match infer {
            None => {
                if checked_numel(&out)? != numel {
                    return Err(invalid());
                }
            }
            Some(_) if known > isize::MAX as usize => return Err(too_many(shape)),
            Some(_) if known == 0 && numel == 0 => {
                return Err(LayoutError::AmbiguousInferred {
                    shape: shape.to_vec(),
                });
            }
            Some(_) if known == 0 || !numel.is_multiple_of(known) => return Err(invalid()),
            Some(i) => out[i] = numel / known,
        }
        Ok(out)
    }

    /// Swaps two dimensions.
    pub fn transpose(&self, a: isize, b: isize) -> Result<Layout, LayoutError> {
        let (a, b) = (self.dim(a)?, self.dim(b)?);
        let mut l = self.clone();
        l.shape.swap(a, b);
        l.strides.swap(a, b);
        Ok(l)
    }

    /// Reorders the dimensions: dimension `i` of the result is dimension `perm[i]` of `self`.
    pub fn permute(&self, perm: &[usize]) -> Result<Layout, LayoutError> {
        self.check_stride_count()?;
        let rank = self.rank();
        let mut seen = vec![false; rank];
        if perm.len() != rank
            || perm
                .iter()
                .any(|&p| p >= rank || std::mem::replace(&mut seen[p], true))
        {
            return Err(LayoutError::BadPermutation {
                perm: perm.to_vec(),
                rank,
            });
        }
        Ok(Layout {
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        })
    }

    /// Elements `start..start + len` of dimension `dim`.
    pub fn narrow(&self, dim: isize, start: usize, len: usize) -> Result<Layout, LayoutError> {
        self.slice(dim, start, start.saturating_add(len), 1)
    }

    /// Elements `start..end` of dimension `dim`, every `step`-th (`step > 0`).
    pub fn slice(
        &self,
        dim: isize,
        start: usize,
        end: usize,
        step: isize,
    ) -> Result<Layout, LayoutError> {
        let d = self.dim(dim)?;
        if step <= 0 {
            return Err(LayoutError::BadStep { step });
        }
        let size = self.shape[d];
        if start > end || end > size {
            return Err(LayoutError::RangeOutOfBounds {
                dim: d,
                start,
                end,
                size,
            });
        }
        let mut l = self.clone();
        let n = (end - start).div_ceil(step as usize);
        let bad = || LayoutError::BadStrides {
            shape: self.shape.to_vec(),
            strides: self.strides.to_vec(),
            offset: self.offset,
        };
        // A layout with no elements (a 0 in another dimension) is never walked: its offset and
        // strides stay as they are (its other sizes may be huge, `[0, 2^32, 2^32]`, making
        // them unrepresentable, and PyTorch takes such slices).
        let empty = self.shape.contains(&0);
        if n > 0 && !empty {
            // Exact: a layout that fits a storage gives an offset inside it; anything else is
            // refused here rather than wrapped.
            let off = (start as i128)
                .checked_mul(self.strides[d] as i128)
                .and_then(|x| x.checked_add(l.offset as i128))
                .filter(|&o| (0..=isize::MAX as i128).contains(&o))
                .ok_or_else(bad)?;
            l.offset = off as usize;
        }
        l.shape[d] = n;
        l.strides[d] = if n > 1 && !empty {
            self.strides[d].checked_mul(step).ok_or_else(bad)?
        } else {
            // The stride of a dimension of size 0 or 1, or of an empty layout, is never walked.
            self.strides[d].wrapping_mul(step)
        };
        Ok(l)
    }

    /// Broadcasts to `shape` (new leading dimensions, and size-1 dimensions stretched), with
    /// stride 0 where elements repeat.
    pub fn expand(&self, shape: &[usize]) -> Result<Layout, LayoutError> {
        self.check_stride_count()?;
        let bad = || LayoutError::BadExpand {
            from: self.shape.to_vec(),
            to: shape.to_vec(),
        };
        if shape.len() < self.rank() {
            return Err(bad());
        }
        checked_numel(shape)?;
        let lead = shape.len() - self.rank();
        let mut strides: Strides = SmallVec::from_elem(0, shape.len());
        for (i, &target) in shape.iter().enumerate() {
            if i < lead {
                continue;
            }
            let (d, s) = (self.shape[i - lead], self.strides[i - lead]);
            strides[i] = if d == target {
                s
            } else if d == 1 {
                0
            } else {
                return Err(bad());
            };
        }
        Ok(Layout {
            shape: shape.into(),
            strides,
            offset: self.offset,
        })
    }

    /// Removes dimension `dim` if it has size 1 (otherwise returns the layout unchanged, as
    /// PyTorch does).
    pub fn squeeze(&self, dim: isize) -> Result<Layout, LayoutError> {
        let d = self.dim(dim)?;
        let mut l = self.clone();
        if l.shape[d] == 1 {
            l.shape.remove(d);
            l.strides.remove(d);
        }
        Ok(l)
    }

    /// Removes every dimension of size 1 (with its stride; of a layout whose stride count
    /// differs from its rank, which [`Layout::check_bounds`] refuses, the strides past the
    /// rank are kept).
    pub fn squeeze_all(&self) -> Layout {
        let keep = |i: usize| self.shape.get(i).is_none_or(|&d| d != 1);
        Layout {
            shape: self.shape.iter().copied().filter(|&d| d != 1).collect(),
            strides: (0..self.strides.len())
                .filter(|&i| keep(i))
                .map(|i| self.strides[i])
                .collect(),
            offset: self.offset,
        }
    }

    /// Inserts a dimension of size 1 at `dim` (which may equal the rank);
    /// [`LayoutError::RankTooLarge`] when the layout already has [`MAX_RANK`] dimensions.
    pub fn unsqueeze(&self, dim: isize) -> Result<Layout, LayoutError> {
        self.check_stride_count()?;
        check_rank(self.rank().saturating_add(1))?;
        let rank = self.rank() as isize + 1;
        let d = if dim < 0 {
            dim.saturating_add(rank)
        } else {
            dim
        };
        if !(0..rank).contains(&d) {
            return Err(LayoutError::DimOutOfRange {
                dim,
                rank: self.rank(),
            });
        }
        let d = d as usize;
        // The stride of a size-1 dimension is never walked: wrapping is harmless there.
        let stride = if d < self.rank() {
            self.strides[d].wrapping_mul(self.shape[d] as isize)
        } else {
            1
        };
        let mut l = self.clone();
        l.shape.insert(d, 1);
        l.strides.insert(d, stride);
        Ok(l)
    }

    /// Merges adjacent dimensions that are contiguous with each other and drops size-1
    /// dimensions: the same elements in the same order with the fewest dimensions. A layout
    /// whose stride count differs from its rank comes back as it is.
    pub fn coalesced(&self) -> Layout {
        if self.check_stride_count().is_err() {
            return self.clone();
        }
        let mut shape: Dims = SmallVec::new();
        let mut strides: Strides = SmallVec::new();
        for (&d, &s) in self.shape.iter().zip(&self.strides) {
            if d == 1 {
                continue;
            }
            if let (Some(last_d), Some(last_s)) = (shape.last_mut(), strides.last_mut())
                && Some(*last_s) == s.checked_mul(d as isize)
                && let Some(merged) = last_d.checked_mul(d)
            {
                *last_d = merged;
                *last_s = s;
                continue;
            }
            shape.push(d);
            strides.push(s);
        }
        if self.numel() == 0 {
            return Layout {
                shape: SmallVec::from_slice(&[0]),
                strides: SmallVec::from_slice(&[1]),
                offset: self.offset,
            };
        }
        Layout {
            shape,
            strides,
            offset: self.offset,
        }
    }

    /// How the elements lie in memory (see [`StridedBlocks`]).
    pub fn strided_blocks(&self) -> StridedBlocks {
        // A count that overflows, or strides that do not match the shape: no storage holds
        // such a layout (`check_bounds` refuses it); `General` promises nothing about it.
        let Ok(n) = self.try_numel() else {
            return StridedBlocks::General;
        };
        if self.strides.len() != self.shape.len() {
            return StridedBlocks::General;
        }
        if n == 0 {
            return StridedBlocks::Single {
                start: self.offset,
                len: 0,
            };
        }
        let c = self.coalesced();
        match c.rank() {
            0 => StridedBlocks::Single {
                start: self.offset,
                len: 1,
            },
            1 if c.strides[0] == 1 => StridedBlocks::Single {
                start: self.offset,
                len: n,
            },
            1 if c.strides[0] > 0 => StridedBlocks::Uniform {
                start: self.offset,
                len: 1,
                count: n,
                pitch: c.strides[0] as usize,
            },
            2 if c.strides[1] == 1 && c.strides[0] > 0 => StridedBlocks::Uniform {
                start: self.offset,
                len: c.shape[1],
                count: c.shape[0],
                pitch: c.strides[0] as usize,
            },
            _ => StridedBlocks::General,
        }
    }

    /// The storage index of every element, in row-major order (for CPU copies and tests).
    /// A layout whose stride count differs from its rank (which [`Layout::check_bounds`]
    /// refuses) has no elements to walk: it yields none.
    pub fn indices(&self) -> impl Iterator<Item = usize> + '_ {
        let rank = self.rank();
        let n = if self.check_stride_count().is_ok() {
            self.numel()
        } else {
            0
        };
        let mut idx: Dims = SmallVec::from_elem(0, rank);
        let mut pos = self.offset as isize;
        let mut k = 0usize;
        std::iter::from_fn(move || {
            if k >= n {
                return None;
            }
            let out = pos as usize;
            k += 1;
            // Wrapping: the positions yielded are in range for a layout that passed
            // `check_bounds`; only the intermediate step past a dimension's end may not be.
            for d in (0..rank).rev() {
                idx[d] += 1;
                pos = pos.wrapping_add(self.strides[d]);
                if idx[d] < self.shape[d] {
                    break;
                }
                pos = pos.wrapping_sub(self.strides[d].wrapping_mul(self.shape[d] as isize));
                idx[d] = 0;
            }
            Some(out)
        })
    }
}

#[cfg(test)]
mod tests {
    /// `disjoint_from` against the index sets of generated layouts: never `true` when they
    /// share an index, and `true` for the pieces of splits along the last dimension.
    #[test]
    fn disjoint_from_never_claims_a_shared_index() {
        use std::collections::HashSet;
        let indices = |l: &Layout| -> HashSet<usize> {
            let mut out = HashSet::new();
            let n = l.numel();
            for flat in 0..n {
                let (mut rem, mut at) = (flat, l.offset() as isize);
                for (&d, &s) in l.shape().iter().zip(l.strides()).rev() {
                    at += (rem % d) as isize * s;
                    rem /= d;
                }
                out.insert(at as usize);
            }
            out
        };
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % m as u64) as usize
        };
        let mut shown = 0;
        for _ in 0..4000 {
            // A [B, T, P * C] tensor's pieces, some of them transposed or narrowed.
            let (b, t, c, p) = (1 + next(3), 1 + next(4), 1 + next(5), 1 + next(4));
            let whole = Layout::contiguous(&[b, t, p * c]);
            let piece = |k: usize, w: usize| whole.narrow(2, k, w).unwrap();
            let (k1, k2) = (next(p * c), next(p * c));
            let (w1, w2) = (1 + next(p * c - k1), 1 + next(p * c - k2));
            let kind = next(3);
            let (mut x, mut y) = if kind == 0 {
                (piece(k1, w1), piece(k2, w2))
            } else if kind == 1 {
                // Runs at any offsets: [count, run] with rows `pitch` apart.
                let (run, count) = (1 + next(5), 1 + next(4));
                let pitch = run + next(6);
                let at = |o: usize| Layout::new(&[count, run], &[pitch as isize, 1], o);
                (at(next(3 * pitch)), at(next(3 * pitch)))
            } else {
                let w = 1 + next(c);
                let (i, j) = (next(p), next(p));
                (piece(i * c, w.min(c)), piece(j * c, w.min(c)))
            };
            if next(3) == 0 {
                x = x.transpose(0, 1).unwrap();
                y = y.transpose(0, 1).unwrap();
            }
            let share = !indices(&x).is_disjoint(&indices(&y));
            let claim = x.disjoint_from(&y);
            assert!(!(claim && share), "{x:?} {y:?}");
            assert_eq!(claim, y.disjoint_from(&x), "{x:?} {y:?}");
            shown += usize::from(claim);
        }
        assert!(shown > 500, "{shown}");
        // GPT-2's q, k and v: the thirds of [32, 1024, 2304] as [B, H, T, D] views.
        let qkv = Layout::contiguous(&[32, 1024, 2304]);
        let head = |k: usize| {
            let l = qkv.narrow(2, k * 768, 768).unwrap();
            Layout::new(
                &[32, 12, 1024, 64],
                &[l.strides()[0], 64, l.strides()[1], 1],
                l.offset(),
            )
        };
        let (q, k, v) = (head(0), head(1), head(2));
        assert!(q.disjoint_from(&k) && k.disjoint_from(&v) && q.disjoint_from(&v));
        assert!(!q.disjoint_from(&q));
    }

    use super::*;

    fn idx(l: &Layout) -> Vec<usize> {
        l.indices().collect()
    }

    #[test]
    fn contiguous_strides() {
        let l = Layout::contiguous(&[2, 3, 4]);
        assert_eq!(l.strides(), &[12, 4, 1]);
        assert_eq!(l.numel(), 24);
        assert!(l.is_contiguous());
        assert_eq!(Layout::contiguous(&[]).numel(), 1);
        assert_eq!(Layout::contiguous(&[3, 0]).numel(), 0);
        assert_eq!(idx(&Layout::contiguous(&[2, 2])), vec![0, 1, 2, 3]);
    }

    #[test]
    fn transpose_permute_and_indices() {
        let l = Layout::contiguous(&[2, 3]);
        let t = l.transpose(0, 1).unwrap();
        assert_eq!(t.shape(), &[3, 2]);
        assert_eq!(idx(&t), vec![0, 3, 1, 4, 2, 5]);
        assert!(!t.is_contiguous());
        let p = Layout::contiguous(&[2, 3, 4]).permute(&[2, 0, 1]).unwrap();
        assert_eq!(p.shape(), &[4, 2, 3]);
        assert_eq!(p.strides(), &[1, 12, 4]);
        assert!(matches!(
            l.permute(&[0, 0]),
            Err(LayoutError::BadPermutation { .. })
        ));
        assert!(matches!(
            l.permute(&[0]),
            Err(LayoutError::BadPermutation { .. })
        ));
        assert!(matches!(
            l.transpose(0, 2),
            Err(LayoutError::DimOutOfRange { dim: 2, rank: 2 })
        ));
        assert_eq!(l.transpose(-1, -2).unwrap(), t);
    }

    #[test]
    fn slices_and_narrow() {
        let l = Layout::contiguous(&[4, 6]);
        let s = l.slice(0, 1, 4, 2).unwrap().slice(1, 0, 6, 3).unwrap();
        assert_eq!(s.shape(), &[2, 2]);
        assert_eq!(idx(&s), vec![6, 9, 18, 21]);
        let n = l.narrow(1, 2, 3).unwrap();
        assert_eq!(idx(&n), vec![2, 3, 4, 8, 9, 10, 14, 15, 16, 20, 21, 22]);
        assert!(matches!(
            l.slice(0, 0, 4, 0),
            Err(LayoutError::BadStep { step: 0 })
        ));
        assert!(matches!(
            l.slice(0, 0, 4, -1),
            Err(LayoutError::BadStep { .. })
        ));
        assert!(matches!(
            l.narrow(1, 4, 3),
            Err(LayoutError::RangeOutOfBounds { .. })
        ));
        assert_eq!(l.slice(0, 2, 2, 1).unwrap().numel(), 0);
    }

    #[test]
    fn view_follows_pytorch() {
        let l = Layout::contiguous(&[2, 3, 4]);
        assert_eq!(l.view(&[6, 4]).unwrap().strides(), &[4, 1]);
        let t = l.transpose(1, 2).unwrap(); // [2,4,3] strides [12,1,4]
        assert!(matches!(
            t.view(&[8, 3]),
            Err(LayoutError::NotViewable { .. })
        ));
        assert_eq!(
            t.view(&[2, 12])
                .err()
                .map(|e| matches!(e, LayoutError::NotViewable { .. })),
            Some(true)
        );
        // Splitting the first (contiguous) dimension of a transposed tensor works.
        let u = Layout::contiguous(&[4, 3]).transpose(0, 1).unwrap(); // [3,4] strides [1,3]
        let v = u.view(&[3, 2, 2]).unwrap();
        assert_eq!(v.strides(), &[1, 6, 3]);
        assert_eq!(idx(&v), idx(&u));
        assert!(matches!(
            l.view(&[5, 5]),
            Err(LayoutError::ElementCount { numel: 24, .. })
        ));
        assert_eq!(l.infer_shape(&[-1, 4]).unwrap().as_slice(), &[6, 4]);
        assert_eq!(
            l.infer_shape(&[-1, 5]),
            Err(LayoutError::ElementCount {
                shape: vec![-1, 5],
                numel: 24
            })
        );
        assert_eq!(
            l.infer_shape(&[-1, -1]),
            Err(LayoutError::MultipleInferred {
                shape: vec![-1, -1]
            })
        );
        assert_eq!(
            l.infer_shape(&[-2, 12]),
            Err(LayoutError::NegativeSize {
                shape: vec![-2, 12],
                size: -2
            })
        );
        assert_eq!(
            Layout::contiguous(&[0, 3]).infer_shape(&[-1, 0]),
            Err(LayoutError::AmbiguousInferred { shape: vec![-1, 0] })
        );
        assert_eq!(
            Layout::contiguous(&[0, 3])
                .infer_shape(&[-1, 3, 2])
                .unwrap()
                .as_slice(),
            &[0, 3, 2]
        );
    }

    #[test]
    fn expand_squeeze_unsqueeze() {
        let l = Layout::contiguous(&[3, 1]);
        let e = l.expand(&[2, 3, 4]).unwrap();
        assert_eq!(e.strides(), &[0, 1, 0]);
        assert_eq!(idx(&e)[..5], [0, 0, 0, 0, 1]);
        assert!(matches!(
            l.expand(&[2, 2]),
            Err(LayoutError::BadExpand { .. })
        ));
        let u = l.unsqueeze(0).unwrap();
        assert_eq!(u.shape(), &[1, 3, 1]);
        assert_eq!(u.squeeze(0).unwrap(), l);
        assert_eq!(l.squeeze(1).unwrap().shape(), &[3]);
        assert_eq!(
            l.squeeze(0).unwrap().shape(),
            &[3, 1],
            "size 3 is not squeezed"
        );
        assert_eq!(Layout::contiguous(&[1, 2, 1]).squeeze_all().shape(), &[2]);
        assert_eq!(l.unsqueeze(2).unwrap().shape(), &[3, 1, 1]);
        assert!(l.unsqueeze(4).is_err());
    }

    #[test]
    fn classifier() {
        let l = Layout::contiguous(&[8, 8]);
        assert_eq!(
            l.strided_blocks(),
            StridedBlocks::Single { start: 0, len: 64 }
        );
        let rows = l.narrow(1, 2, 4).unwrap();
        assert_eq!(
            rows.strided_blocks(),
            StridedBlocks::Uniform {
                start: 2,
                len: 4,
                count: 8,
                pitch: 8
            }
        );
        let band = l.narrow(0, 2, 3).unwrap();
        assert_eq!(
            band.strided_blocks(),
            StridedBlocks::Single { start: 16, len: 24 }
        );
        assert_eq!(
            l.transpose(0, 1).unwrap().strided_blocks(),
            StridedBlocks::General
        );
        let every_other = Layout::contiguous(&[10]).slice(0, 0, 10, 2).unwrap();
        assert_eq!(
            every_other.strided_blocks(),
            StridedBlocks::Uniform {
                start: 0,
                len: 1,
                count: 5,
                pitch: 2
            }
        );
        assert!(matches!(
            l.expand(&[2, 8, 8]).unwrap().strided_blocks(),
            StridedBlocks::General
        ));
    }

    #[test]
    fn bounds() {
        let l = Layout::new(&[2, 2], &[4, 1], 1);
        assert_eq!(l.span(), Ok(Some((1, 7))));
        assert!(l.check_bounds(7).is_ok());
        assert_eq!(
            l.check_bounds(6),
            Err(LayoutError::OutOfStorage { needed: 7, len: 6 })
        );
    }

    /// Layouts whose reach wraps or starts before element 0 are refused.
    #[test]
    fn bounds_are_exact() {
        let refused = |l: Layout, len: usize| {
            let r = l.check_bounds(len);
            assert!(r.is_err(), "{l:?} passed check_bounds({len})");
        };
        refused(Layout::new(&[2], &[1], usize::MAX), 2);
        refused(Layout::new(&[2], &[(1 << 62) + 1], 0), 2);
        refused(Layout::new(&[3], &[(1 << 62) + 1], 0), 4);
        refused(Layout::new(&[2, 2], &[isize::MIN, -8], 0), 2);
        refused(Layout::new(&[2, 2], &[isize::MIN, -8], 16), 32);
        refused(Layout::new(&[2], &[-1], 0), 2);
        refused(Layout::new(&[2, 2], &[1], 0), 4);
        refused(Layout::new(&[1 << 32, 1 << 32], &[0, 0], 0), 1);
        refused(Layout::contiguous(&[1 << 32, 1 << 32]), usize::MAX);
        refused(Layout::new(&[2], &[isize::MAX], 0), usize::MAX);
        // Negative strides that stay inside are fine.
        assert!(Layout::new(&[2], &[-1], 1).check_bounds(2).is_ok());
        assert_eq!(Layout::new(&[3, 2], &[-2, 1], 4).span(), Ok(Some((0, 6))));
        // A size-1 dimension's stride is never walked.
        assert!(
            Layout::new(&[1, 2], &[isize::MAX, 1], 0)
                .check_bounds(2)
                .is_ok()
        );
        assert!(matches!(
            Layout::try_new(&[2], &[1, 1], 0),
            Err(LayoutError::StrideCount {
                rank: 1,
                strides: 2
            })
        ));
    }

    /// Element counts are checked, in debug and release.
    #[test]
    fn element_counts_are_checked() {
        assert_eq!(Layout::contiguous(&[1 << 32, 1 << 32]).numel(), usize::MAX);
        assert!(matches!(
            Layout::contiguous(&[1 << 32, 1 << 32]).try_numel(),
            Err(LayoutError::TooManyElements { .. })
        ));
        assert!(Layout::try_contiguous(&[1 << 32, 1 << 32]).is_err());
        assert_eq!(checked_numel(&[1 << 32, 1 << 32, 0]), Ok(0));
        assert_eq!(checked_numel(&[]), Ok(1));
        assert!(checked_numel(&[1 << 62, 2]).is_err());
        assert_eq!(checked_numel(&[1 << 62, 1]), Ok(1 << 62));
        let empty = Layout::contiguous(&[0]);
        assert!(matches!(
            empty.view(&[1 << 32, 1 << 32]),
            Err(LayoutError::TooManyElements { .. })
        ));
        let six = Layout::contiguous(&[6]);
        assert!(six.view(&[3, 2, (1 << 62) + 1, (1 << 62) + 1]).is_err());
        assert!(
            six.infer_shape(&[3, 2, (1 << 62) + 1, (1 << 62) + 1])
                .is_err()
        );
        assert!(six.infer_shape(&[-1, 1 << 40, 1 << 40]).is_err());
        // Sizes whose product overflows before a 0 among them: no elements, as PyTorch's
        // `empty(0).reshape(2**40, 2**40, 0)`.
        let huge = [1 << 40, 1 << 40, 0];
        assert_eq!(
            empty.infer_shape(&huge).unwrap().as_slice(),
            &[1 << 40, 1 << 40, 0]
        );
        assert_eq!(
            empty.view(&[1 << 40, 1 << 40, 0]).unwrap().shape(),
            &[1 << 40, 1 << 40, 0]
        );
        assert!(matches!(
            empty.infer_shape(&[-1, 1 << 40, 1 << 40, 0]),
            Err(LayoutError::AmbiguousInferred { .. })
        ));
        assert!(matches!(
            six.infer_shape(&[1 << 40, 1 << 40, 0]),
            Err(LayoutError::ElementCount { .. })
        ));
        assert!(matches!(
            Layout::contiguous(&[1]).expand(&[1 << 40, 1 << 40]),
            Err(LayoutError::TooManyElements { .. })
        ));
        assert!(six.slice(0, 0, 6, isize::MAX).is_ok());
        assert!(Layout::new(&[3], &[1 << 62], 0).slice(0, 2, 3, 1).is_err());
    }
}
