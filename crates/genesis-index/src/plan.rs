//! Planning: an index expression and a layout become an [`IndexPlan`]. Pure data: no device
//! calls, no data read except the host-side index tensors.

use std::borrow::Cow;

use genesis_storage::Layout;

use crate::spec::{IndexDType, IndexItem, StoredIndex};
use crate::{Error, Result};

/// What executing a plan does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanKind {
    /// A zero-copy view: the result shares the input's storage.
    View,
    /// Advanced indexing: gather elements into a new storage.
    Gather,
    /// Assignment through advanced indexing.
    Scatter,
    /// Assignment of a tensor into a basic view (a strided copy).
    Copy,
    /// Assignment of a scalar into a basic view.
    Fill,
}

/// How a boolean mask is turned into indices (chosen by what the mask covers; its measured
/// density is in [`MaskPlan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaskStrategy {
    /// A mask over every dimension of the tensor: its set positions in one ordered pass (on a
    /// CUDA device: a count, a scan and one pass writing positions), then a gather of single
    /// elements. [`get`](crate::get) with a device mask over a whole contiguous tensor skips the
    /// positions and compacts the elements themselves in that one pass; a host mask over a
    /// whole contiguous CUDA tensor is sent as its bytes and takes that pass too
    /// ([`MaskPlan::uploads_mask`]).
    FullCompaction,
    /// A mask over leading dimensions: the selected row indices, then a gather of whole rows.
    RowIndices,
}

/// A boolean mask in a plan: how it becomes indices, and its measured density.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaskPlan {
    /// How the mask is turned into indices.
    pub strategy: MaskStrategy,
    /// Set elements of the mask (counted on the host, or on the device for a CUDA mask).
    pub selected: usize,
    /// Elements of the mask.
    pub total: usize,
}

impl MaskPlan {
    /// The fraction of the mask that is set (0 for an empty mask).
    pub fn density(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.selected as f64 / self.total as f64
        }
    }

    /// Whether a host mask over a whole contiguous CUDA tensor is sent to the device as its
    /// bytes and compacted there (every [`MaskStrategy::FullCompaction`] mask, at any density):
    /// one byte an element over the bus and one pass on the device, where sending positions
    /// costs a host pass to build them and eight bytes a set element. A mask over leading
    /// dimensions becomes row indices instead.
    pub fn uploads_mask(&self) -> bool {
        self.strategy == MaskStrategy::FullCompaction
    }
}

/// One index array of a plan, broadcast to the plan's index shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexArray {
    /// Values on the host, row-major over the index shape, normalised to `0..size`.
    Host(Vec<i64>),
    /// Values in a device storage, read through a layout broadcast to the index shape; they are
    /// wrapped and checked against `size` on the device when the plan runs.
    Device {
        /// The values (the view's layout has the index shape; broadcast dimensions have stride 0).
        index: StoredIndex,
        /// Size of the dimension it indexes.
        size: usize,
        /// The input dimension it indexes (for error messages).
        dim: usize,
    },
}

impl IndexArray {
    /// The host values, if they are on the host.
    pub fn host(&self) -> Option<&[i64]> {
        match self {
            IndexArray::Host(v) => Some(v),
            IndexArray::Device { .. } => None,
        }
    }
}

/// The advanced (tensor) part of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advanced {
    /// Dimensions of the basic view indexed by tensors, in order.
    pub dims: Vec<usize>,
    /// The broadcast shape of the index tensors.
    pub index_shape: Vec<usize>,
    /// One index array per entry of `dims`, broadcast to `index_shape`.
    pub indices: Vec<IndexArray>,
    /// Where the broadcast dimensions go in the result: at `dims[0]`'s place when the indexed
    /// dimensions are adjacent, else at the front.
    pub position: usize,
}

/// An inspectable plan for `x[index]` or `x[index] = value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexPlan {
    /// What execution does.
    pub kind: PlanKind,
    /// The basic-indexing view of the input (integers, slices, new axes applied; dimensions
    /// indexed by tensors kept whole).
    pub view: Layout,
    /// The advanced part, if any index is a tensor.
    pub advanced: Option<Advanced>,
    /// Shape of the result (for assignment: the shape the value broadcasts to).
    pub result_shape: Vec<usize>,
    /// Whether a boolean mask is compacted into indices, how, and its density.
    pub mask: Option<MaskPlan>,
    /// Bytes of temporary memory execution needs on a device (the index arrays, normalised).
    pub temp_bytes: usize,
}

/// Where an advanced index's values are while planning.
enum Src {
    /// Values already wrapped and checked (integers, mask coordinates).
    Host(Vec<i64>),
    /// Values of a host index array of one or more dimensions, not yet checked: they are
    /// wrapped and checked against `size` (input dimension `dim`) once the broadcast shape is
    /// known, and only if it has elements (NumPy and PyTorch check no value of an index array
    /// whose broadcast is empty).
    Unchecked(Vec<i64>, usize, usize),
    /// A device array, the size of the dimension it indexes, and that input dimension.
    Device(StoredIndex, usize, usize),
}

/// Index tensors in host storages read into host index tensors; everything else as given.
fn host_items(items: &[IndexItem]) -> Result<Cow<'_, [IndexItem]>> {
    if !items
        .iter()
        .any(|i| matches!(i, IndexItem::Stored(t) if t.on_host()))
    {
        return Ok(Cow::Borrowed(items));
    }
    let mut out = Vec::with_capacity(items.len());
    for it in items {
        out.push(match it {
            IndexItem::Stored(t) if t.on_host() => IndexItem::Tensor(t.to_host()?),
            other => other.clone(),
        });
    }
    Ok(Cow::Owned(out))
}

/// An error unless the `mask_shape.len()` dimensions of `input` from `dim` have the mask's
/// shape.
fn mask_covers(input: &Layout, dim: usize, mask_shape: &[usize]) -> Result<()> {
    let covered = &input.shape()[dim..dim + mask_shape.len()];
    if covered != mask_shape {
        return Err(Error::ShapeMismatch {
            what: format!(
                "mask of shape {mask_shape:?} does not match the indexed dimensions {covered:?} (from dimension {dim})"
            ),
        });
    }
    Ok(())
}

/// A mask over `k` of `ndim` dimensions, `selected` of `total` set: a mask over every
/// dimension is compacted in one row-major pass; a mask over leading dimensions selects rows,
/// then gathers them.
pub(crate) fn mask_plan(k: usize, ndim: usize, selected: usize, total: usize) -> MaskPlan {
    MaskPlan {
        strategy: if k == ndim {
            MaskStrategy::FullCompaction
        } else {
            MaskStrategy::RowIndices
        },
        selected,
        total,
    }
}

/// Integer index `i` along a dimension of `size`, wrapped if negative. Exact for every size
/// (in `i128`: an empty layout's other sizes may exceed `i64::MAX`).
fn wrap(i: i64, size: usize, dim: usize) -> Result<usize> {
    let s = size as i128;
    let j = if i < 0 { i as i128 + s } else { i as i128 };
    if j < 0 || j >= s {
        return Err(Error::IndexOutOfRange {
            dim,
            index: i,
            size,
        });
    }
    Ok(j as usize)
}

/// [`wrap`] for every value of a host index array (a wrapped value past `i64::MAX`, only
/// possible in a dimension larger than any tensor's, is out of range too).
fn wrap_all(values: &[i64], size: usize, dim: usize) -> Result<Vec<i64>> {
    values
        .iter()
        .map(|&i| {
            wrap(i, size, dim).and_then(|j| {
                i64::try_from(j).map_err(|_| Error::IndexOutOfRange {
                    dim,
                    index: i,
                    size,
                })
            })
        })
        .collect()
}

/// NumPy's slice bounds for a positive step: `(start, stop)` clamped to `0..=size` (exact, in
/// `i128`, for every size).
fn slice_bounds(start: Option<i64>, stop: Option<i64>, size: usize) -> (usize, usize) {
    let s = size as i128;
    let clamp = |v: i64| -> i128 {
        let v = v as i128;
        let v = if v < 0 { v + s } else { v };
        v.clamp(0, s)
    };
    let a = start.map_or(0, clamp);
    let b = stop.map_or(s, clamp);
    (a as usize, b.max(a) as usize)
}

/// Broadcasts shapes NumPy's way; `None` if they do not broadcast.
pub fn broadcast_shapes(shapes: &[&[usize]]) -> Option<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for s in shapes {
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[rank - s.len() + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return None;
            }
        }
    }
    Some(out)
}

/// Expands `data` of `shape` to `target` (row-major), repeating along broadcast dimensions;
/// [`genesis_storage::Error::HostOutOfMemory`] when the host cannot hold the result (index
/// arrays can broadcast to far more values than they hold).
fn broadcast_to(data: &[i64], shape: &[usize], target: &[usize]) -> Result<Vec<i64>> {
    let n = genesis_storage::checked_numel(target)?;
    let lead = target.len() - shape.len();
    let mut strides = vec![0usize; target.len()];
    let mut acc = 1;
    for i in (0..shape.len()).rev() {
        strides[lead + i] = if shape[i] == 1 { 0 } else { acc };
        acc *= shape[i];
    }
    let mut out = Vec::new();
    genesis_storage::check_host_bytes(n.saturating_mul(8))?;
    out.try_reserve_exact(n)
        .map_err(|_| genesis_storage::Error::HostOutOfMemory {
            bytes: n.saturating_mul(8),
        })?;
    let mut idx = vec![0usize; target.len()];
    for _ in 0..n {
        let off: usize = idx.iter().zip(&strides).map(|(i, s)| i * s).sum();
        out.push(data[off]);
        for d in (0..target.len()).rev() {
            idx[d] += 1;
            if idx[d] < target[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(out)
}

/// Plans `input[items]` (a read when `assign` is false).
///
/// Index tensors on the host ([`IndexItem::Tensor`], or [`IndexItem::Stored`] in a host storage)
/// are read and checked here. Integer index tensors on a device stay there: the plan refers to
/// them and execution checks them. A boolean mask on a device must first be turned into
/// coordinates with [`resolve_masks`](crate::resolve_masks) (its count decides the result's
/// shape); [`get`](crate::get) and [`set`](crate::set) do that themselves.
pub fn plan(input: &Layout, items: &[IndexItem], assign: bool) -> Result<IndexPlan> {
    genesis_storage::check_rank(input.rank())?;
    // A layout no storage can hold (strides of another count, an element count or a reach
    // that overflows) has no elements to index.
    input.span()?;
    let items = host_items(items)?;
    let items: &[IndexItem] = &items;
    let ndim = input.rank();
    // Validate items and count the input dimensions they consume.
    let mut ellipses = 0;
    let mut consumed = 0;
    for it in items {
        // A host index tensor (integer or mask) must hold one value per element of its shape.
        if let IndexItem::Tensor(t) = it
            && Some(t.data.len()) != t.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
        {
            return Err(Error::InvalidIndex {
                reason: format!(
                    "index tensor of shape {:?} holds {} values",
                    t.shape,
                    t.data.len()
                ),
            });
        }
        match it {
            IndexItem::Int(_) | IndexItem::Slice { .. } => consumed += 1,
            IndexItem::Tensor(t) if t.dtype == IndexDType::Bool => consumed += t.shape.len(),
            IndexItem::Nonzero(m) => consumed += m.mask_shape.len(),
            IndexItem::Stored(t) if t.dtype == IndexDType::Bool => {
                return Err(Error::InvalidIndex {
                    reason: format!(
                        "a boolean mask on {} must be turned into coordinates on its device first \
                         (genesis_index::resolve_masks): its count decides the result's shape",
                        t.view.storage().device()
                    ),
                });
            }
            IndexItem::Stored(_) => consumed += 1,
            IndexItem::Tensor(_) => consumed += 1,
            IndexItem::NewAxis => {}
            IndexItem::Ellipsis => ellipses += 1,
            IndexItem::BadTensor(dtype) => {
                return Err(Error::InvalidIndex {
                    reason: format!("tensors used as indices must be integer or bool, got {dtype}"),
                });
            }
        }
    }
    if ellipses > 1 {
        return Err(Error::InvalidIndex {
            reason: "an index can only have a single ellipsis ('...')".into(),
        });
    }
    if consumed > ndim {
        return Err(Error::TooManyIndices {
            given: consumed,
            ndim,
        });
    }
    // NumPy's limit on the result's rank, checked (as NumPy does) after the index count and
    // before masks and broadcasting: the dimensions of slices, new axes and the ellipsis (or
    // the trailing dimensions no item indexes), plus the largest rank of an index array (a
    // mask gives one array of coordinates per dimension it covers, each of rank 1).
    let new_dims = items
        .iter()
        .filter(|it| matches!(it, IndexItem::Slice { .. } | IndexItem::NewAxis))
        .count()
        + (ndim - consumed);
    let fancy_dims = items
        .iter()
        .map(|it| match it {
            IndexItem::Tensor(t) if t.dtype == IndexDType::Bool => 1,
            IndexItem::Tensor(t) => t.shape.len(),
            IndexItem::Stored(t) => t.view.layout().rank(),
            IndexItem::Nonzero(_) => 1,
            _ => 0,
        })
        .max()
        .unwrap_or(0);
    genesis_storage::check_rank(new_dims.saturating_add(fancy_dims))?;
    // Every mask's shape is checked before any integer's bounds, as NumPy does: a mask covers
    // input dimensions, whatever new axes and slices stand before it.
    let mut d = 0usize;
    for it in items {
        match it {
            IndexItem::Ellipsis => d += ndim - consumed,
            IndexItem::NewAxis => {}
            IndexItem::Tensor(t) if t.dtype == IndexDType::Bool => {
                mask_covers(input, d, &t.shape)?;
                d += t.shape.len();
            }
            IndexItem::Nonzero(m) => {
                mask_covers(input, d, &m.mask_shape)?;
                d += m.mask_shape.len();
            }
            _ => d += 1,
        }
    }
    let any_tensor = items.iter().any(|i| {
        matches!(
            i,
            IndexItem::Tensor(_) | IndexItem::Stored(_) | IndexItem::Nonzero(_)
        )
    });
    // Walk the items, building the basic view; advanced indices are recorded against the
    // dimension of the view they index (kept whole there).
    let mut view = input.clone();
    let mut vdim = 0usize; // current dimension of `view`
    let mut in_dim = 0usize; // current dimension of the input (for error messages)
    let mut adv: Vec<(usize, Vec<usize>, Src)> = Vec::new(); // (view dim, shape, values)
    // The item each entry of `adv` comes from: advanced indices are adjacent when their items
    // are, whatever lies between them in dimensions (NumPy: an ellipsis standing for no
    // dimension still separates them).
    let mut adv_items: Vec<usize> = Vec::new();
    let mut mask = None;
    for (item, it) in items.iter().enumerate() {
        match it {
            IndexItem::Ellipsis => {
                let skip = ndim - consumed;
                vdim += skip;
                in_dim += skip;
            }
            IndexItem::NewAxis => {
                // Not `Layout::unsqueeze`, which refuses a rank above `MAX_RANK`: while the
                // dimensions that advanced indices replace are still whole, the view may have
                // more (the result's rank was checked above).
                let (mut shape, mut strides) = (view.shape().to_vec(), view.strides().to_vec());
                // The stride of a size-1 dimension is never walked: wrapping is harmless.
                let stride = match (shape.get(vdim), strides.get(vdim)) {
                    (Some(&d), Some(&s)) => s.wrapping_mul(d as isize),
                    _ => 1,
                };
                shape.insert(vdim, 1);
                strides.insert(vdim, stride);
                view = Layout::new(&shape, &strides, view.offset());
                vdim += 1;
            }
            IndexItem::Int(i) => {
                let size = view.shape()[vdim];
                let j = wrap(*i, size, in_dim)?;
                if any_tensor {
                    // With advanced indices present, integers are 0-d index arrays.
                    adv.push((vdim, vec![], Src::Host(wrap_all(&[*i], size, in_dim)?)));
                    vdim += 1;
                } else {
                    view = view.narrow(vdim as isize, j, 1)?.squeeze(vdim as isize)?;
                }
                in_dim += 1;
            }
            IndexItem::Slice { start, stop, step } => {
                let step = step.unwrap_or(1);
                if step <= 0 {
                    return Err(Error::InvalidStep { step });
                }
                let size = view.shape()[vdim];
                let (a, b) = slice_bounds(*start, *stop, size);
                view = view.slice(vdim as isize, a, b, step as isize)?;
                vdim += 1;
                in_dim += 1;
            }
            IndexItem::Tensor(t) if t.dtype == IndexDType::Bool => {
                // Its shape was checked before the walk.
                let k = t.shape.len();
                // nonzero(): one index array per mask dimension, in row-major order.
                let mut coords: Vec<Vec<i64>> = vec![Vec::new(); k];
                let mut idx = vec![0usize; k];
                for &v in &t.data {
                    if v != 0 {
                        for d in 0..k {
                            coords[d].push(idx[d] as i64);
                        }
                    }
                    for d in (0..k).rev() {
                        idx[d] += 1;
                        if idx[d] < t.shape[d] {
                            break;
                        }
                        idx[d] = 0;
                    }
                }
                // A 0-d mask: set when its one value is (nonzero, as `coords` counts values).
                let n = coords.first().map_or(
                    usize::from(t.data.first().is_some_and(|&v| v != 0)),
                    Vec::len,
                );
                if k == 0 {
                    // A 0-d mask: a new axis of size 1 (true) or 0 (false), indexed.
                    view = view.unsqueeze(vdim as isize)?;
                    adv.push((vdim, vec![n], Src::Host(vec![0; n])));
                    vdim += 1;
                } else {
                    for (d, c) in coords.into_iter().enumerate() {
                        adv.push((vdim + d, vec![n], Src::Host(c)));
                    }
                    vdim += k;
                }
                mask = Some(mask_plan(k, ndim, n, t.data.len()));
                in_dim += k;
            }
            IndexItem::Nonzero(m) => {
                let k = m.mask_shape.len();
                // Its shape was checked before the walk: it is the shape of the dimensions it
                // covers.
                let covered = &m.mask_shape;
                let n = m.selected;
                // A mask selects at most its elements (a 0-d one has one).
                let total = genesis_storage::checked_numel(covered)?;
                if n > total {
                    return Err(Error::InvalidIndex {
                        reason: format!(
                            "mask coordinates: {n} selected of a mask of shape {covered:?}"
                        ),
                    });
                }
                if k != 0 && m.coords.len() != k {
                    return Err(Error::InvalidIndex {
                        reason: format!(
                            "mask coordinates: {} arrays for a mask of {k} dimension(s)",
                            m.coords.len()
                        ),
                    });
                }
                if k == 0 {
                    view = view.unsqueeze(vdim as isize)?;
                    adv.push((vdim, vec![n], Src::Host(vec![0; n])));
                    vdim += 1;
                } else {
                    for (d, c) in m.coords.iter().enumerate() {
                        if c.shape() != [n] || c.dtype == IndexDType::Bool {
                            return Err(Error::InvalidIndex {
                                reason: format!(
                                    "mask coordinates must be {n} integers, got {:?} of shape {:?}",
                                    c.dtype,
                                    c.shape()
                                ),
                            });
                        }
                        let src = if c.on_host() {
                            // Coordinates in a host storage: read and checked like any host
                            // index array.
                            Src::Host(wrap_all(&c.to_host()?.data, covered[d], in_dim + d)?)
                        } else {
                            Src::Device(c.clone(), covered[d], in_dim + d)
                        };
                        adv.push((vdim + d, vec![n], src));
                    }
                    vdim += k;
                }
                mask = Some(mask_plan(k, ndim, n, total));
                in_dim += k;
            }
            IndexItem::Stored(t) => {
                // An integer index tensor on a device (host ones became `Tensor` above).
                let size = view.shape()[vdim];
                adv.push((
                    vdim,
                    t.shape().to_vec(),
                    Src::Device(t.clone(), size, in_dim),
                ));
                vdim += 1;
                in_dim += 1;
            }
            IndexItem::Tensor(t) => {
                let size = view.shape()[vdim];
                let src = if t.shape.is_empty() {
                    // A 0-d index array is an integer: checked now, as NumPy does.
                    Src::Host(wrap_all(&t.data, size, in_dim)?)
                } else {
                    Src::Unchecked(t.data.clone(), size, in_dim)
                };
                adv.push((vdim, t.shape.clone(), src));
                vdim += 1;
                in_dim += 1;
            }
            IndexItem::BadTensor(dtype) => {
                // Rejected by the validation pass above; kept as an error, not a panic.
                return Err(Error::InvalidIndex {
                    reason: format!("tensors used as indices must be integer or bool, got {dtype}"),
                });
            }
        }
        adv_items.resize(adv.len(), item);
    }
    let value_kind =
        |assign_kind: PlanKind, read_kind: PlanKind| if assign { assign_kind } else { read_kind };
    if adv.is_empty() {
        let result_shape = view.shape().to_vec();
        return Ok(IndexPlan {
            kind: value_kind(PlanKind::Copy, PlanKind::View),
            view,
            advanced: None,
            result_shape,
            mask: None,
            temp_bytes: 0,
        });
    }
    let shapes: Vec<&[usize]> = adv.iter().map(|(_, s, _)| s.as_slice()).collect();
    let index_shape = broadcast_shapes(&shapes).ok_or_else(|| Error::ShapeMismatch {
        what: format!("indexing arrays of shapes {shapes:?} could not be broadcast together"),
    })?;
    genesis_storage::checked_numel(&index_shape)?;
    let index_numel = crate::numel(&index_shape);
    let dims: Vec<usize> = adv.iter().map(|(d, _, _)| *d).collect();
    let mut indices = Vec::with_capacity(adv.len());
    for (_, s, src) in &adv {
        indices.push(match src {
            Src::Host(data) => IndexArray::Host(broadcast_to(data, s, &index_shape)?),
            Src::Unchecked(_, _, _) if index_numel == 0 => IndexArray::Host(Vec::new()),
            Src::Unchecked(data, size, dim) => {
                let data = wrap_all(data, *size, *dim)?;
                IndexArray::Host(broadcast_to(&data, s, &index_shape)?)
            }
            Src::Device(t, size, dim) => {
                let layout = t.view.layout().expand(&index_shape)?;
                IndexArray::Device {
                    index: StoredIndex {
                        view: t.view.relayout(layout)?,
                        dtype: t.dtype,
                    },
                    size: *size,
                    dim: *dim,
                }
            }
        });
    }
    // NumPy's rule: the broadcast dimensions replace the indexed ones where they are when the
    // advanced items are consecutive in the index (integers count as advanced here), else go
    // first. An item between them separates them even when it stands for no dimension (an
    // ellipsis of zero dimensions).
    let adjacent = adv_items.windows(2).all(|w| w[1] <= w[0] + 1);
    let position = if adjacent { dims[0] } else { 0 };
    let mut result_shape: Vec<usize> = view
        .shape()
        .iter()
        .enumerate()
        .filter(|(d, _)| !dims.contains(d))
        .map(|(_, &s)| s)
        .collect();
    for (k, &s) in index_shape.iter().enumerate() {
        result_shape.insert(position + k, s);
    }
    // The view and the index arrays each have at most `MAX_RANK` dimensions (new axes are
    // `unsqueeze`s, which check it), and each a representable element count; their
    // combination may have more of either.
    genesis_storage::check_rank(result_shape.len())?;
    genesis_storage::checked_numel(&result_shape)?;
    let temp_bytes = indices.len().saturating_mul(index_numel).saturating_mul(8);
    Ok(IndexPlan {
        kind: value_kind(PlanKind::Scatter, PlanKind::Gather),
        view,
        advanced: Some(Advanced {
            dims,
            index_shape,
            indices,
            position,
        }),
        result_shape,
        mask,
        temp_bytes,
    })
}

impl IndexPlan {
    /// Checks that the parts of the plan agree, as they do in every plan [`plan`] makes: a
    /// view that fits some storage (one stride per dimension, its element count and reach
    /// representable); for a view, copy or fill, no advanced part and the view's shape as the
    /// result's; for a gather or scatter, an advanced part whose dimensions are the view's,
    /// each named once, with one index array each (host values, one per element of the index
    /// shape; device arrays of the index shape, for a dimension of their size), and the
    /// result's shape the view's without those dimensions, with the index shape at `position`.
    /// The index values themselves are not read here: execution checks each against its
    /// dimension (and each offset against the storage), [`IndexPlan::source_offsets`] too.
    ///
    /// [`execute_get`](crate::execute_get) and [`IndexPlan::source_offsets`] check it first: a
    /// plan built or edited by hand that does not hold gives [`Error::InvalidIndex`] there,
    /// never a panic or a walk of a view the result does not describe.
    pub fn check(&self) -> Result<()> {
        let bad = |reason: String| {
            Err(Error::InvalidIndex {
                reason: format!("inconsistent index plan: {reason}"),
            })
        };
        if self.view.strides().len() != self.view.rank() {
            return bad(format!(
                "a view of {} dimensions with {} strides",
                self.view.rank(),
                self.view.strides().len()
            ));
        }
        // The view's dimensions of size 1 (new axes: a plan's view may have more than
        // `MAX_RANK` with them while the result has not) reach nothing.
        self.view.squeeze_all().span()?;
        genesis_storage::checked_numel(&self.result_shape)?;
        let shape = self.view.shape();
        let basic = matches!(self.kind, PlanKind::View | PlanKind::Copy | PlanKind::Fill);
        let Some(adv) = &self.advanced else {
            if !basic {
                return bad(format!("a {:?} plan without an advanced part", self.kind));
            }
            if self.result_shape != shape {
                return bad(format!(
                    "result shape {:?} for a view of shape {shape:?}",
                    self.result_shape
                ));
            }
            return Ok(());
        };
        if basic {
            return bad(format!("a {:?} plan with an advanced part", self.kind));
        }
        let index_numel = genesis_storage::checked_numel(&adv.index_shape)?;
        if adv.dims.is_empty() || adv.indices.len() != adv.dims.len() {
            return bad(format!(
                "{} index array(s) for the dimensions {:?}",
                adv.indices.len(),
                adv.dims
            ));
        }
        for (a, &d) in adv.dims.iter().enumerate() {
            if d >= shape.len() || adv.dims[..a].contains(&d) {
                return bad(format!(
                    "indexed dimensions {:?} of a view of rank {}",
                    adv.dims,
                    shape.len()
                ));
            }
        }
        let rest = shape.len() - adv.dims.len();
        if adv.position > rest {
            return bad(format!(
                "the index dimensions at {} among {rest} others",
                adv.position
            ));
        }
        let mut want: Vec<usize> = shape
            .iter()
            .enumerate()
            .filter(|(d, _)| !adv.dims.contains(d))
            .map(|(_, &s)| s)
            .collect();
        for (k, &s) in adv.index_shape.iter().enumerate() {
            want.insert(adv.position + k, s);
        }
        if want != self.result_shape {
            return bad(format!(
                "result shape {:?}, the view and the index give {want:?}",
                self.result_shape
            ));
        }
        for (a, arr) in adv.indices.iter().enumerate() {
            let size = shape[adv.dims[a]];
            match arr {
                IndexArray::Host(v) => {
                    if v.len() != index_numel {
                        return bad(format!(
                            "{} values in a host index array of shape {:?}",
                            v.len(),
                            adv.index_shape
                        ));
                    }
                }
                IndexArray::Device { index, size: s, .. } => {
                    if index.shape() != adv.index_shape.as_slice() || *s != size {
                        return bad(format!(
                            "a device index array of shape {:?} for a dimension of size {s}, \
                             the index shape is {:?} and the dimension's size {size}",
                            index.shape(),
                            adv.index_shape
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// The layout of an assigned value (`value`: its layout) broadcast to the indexed shape,
    /// NumPy's and PyTorch's way: leading dimensions of size 1 beyond the indexed shape's rank
    /// are dropped, then the value broadcasts (aligned at the last dimension, sizes equal or
    /// 1). [`Error::ShapeMismatch`] otherwise.
    ///
    /// With advanced indices (other than one mask over every dimension), NumPy reshapes a value
    /// of higher rank to its last dimensions, which also succeeds when those hold no element
    /// (a value of shape [5, 0, 3] for an indexed shape [0, 3]): such a value is taken as an
    /// empty one of those dimensions, and the assignment writes nothing.
    pub fn broadcast_value(&self, value: &Layout) -> Result<Layout> {
        let target = self.result_shape.as_slice();
        let vshape = value.shape();
        let mismatch = || Error::ShapeMismatch {
            what: format!(
                "value of shape {vshape:?} cannot be broadcast to the indexed shape {target:?}"
            ),
        };
        let extra = vshape.len().saturating_sub(target.len());
        let mut l = value.clone();
        // Only leading size-1 dimensions may be dropped (PyTorch's rule; NumPy also drops
        // leading dimensions of an empty value in advanced assignment, which PyTorch refuses).
        if vshape[..extra].iter().any(|&d| d != 1) {
            return Err(mismatch());
        }
        for _ in 0..extra {
            l = l.squeeze(0)?;
        }
        if broadcast_shapes(&[l.shape(), target]).as_deref() != Some(target) {
            return Err(mismatch());
        }
        Ok(l.expand(target)?)
    }

    /// An equivalent plan for executors with a rank limit: the same result elements in the same
    /// order, with the basic (non-advanced) dimensions of size 1 dropped and neighbouring basic
    /// dimensions that are contiguous with each other merged; the advanced part (index shape
    /// and arrays) is unchanged. Its `result_shape` is the reduced one: allocate outputs with
    /// the original plan's. Plans without an advanced part, and plans whose parts do not agree
    /// ([`IndexPlan::check`]), come back unchanged.
    pub fn compacted(&self) -> IndexPlan {
        let Some(adv) = &self.advanced else {
            return self.clone();
        };
        if self.check().is_err() {
            return self.clone();
        }
        if self.result_shape.contains(&0) {
            return self.clone();
        }
        let (shape, strides) = (self.view.shape(), self.view.strides());
        // (size, stride, advanced entry, whether a basic dimension stands before the index
        // dimensions in the result) of the kept view dimensions. Basic dimensions on either
        // side of the index dimensions never merge.
        let mut kept: Vec<(usize, isize, Option<usize>, bool)> = Vec::new();
        let mut basic = 0;
        for d in 0..shape.len() {
            let a = adv.dims.iter().position(|&x| x == d);
            let before = a.is_none() && basic < adv.position;
            if a.is_none() {
                basic += 1;
            }
            if a.is_none() && shape[d] == 1 {
                continue;
            }
            if a.is_none()
                && let Some(last) = kept.last_mut()
                && last.2.is_none()
                && last.3 == before
                && Some(last.1) == strides[d].checked_mul(shape[d] as isize)
                && let Some(merged) = last.0.checked_mul(shape[d])
            {
                last.0 = merged;
                last.1 = strides[d];
                continue;
            }
            kept.push((shape[d], strides[d], a, before));
        }
        let vshape: Vec<usize> = kept.iter().map(|k| k.0).collect();
        let vstrides: Vec<isize> = kept.iter().map(|k| k.1).collect();
        let mut dims = vec![0usize; adv.dims.len()];
        for (d, k) in kept.iter().enumerate() {
            if let Some(a) = k.2 {
                dims[a] = d;
            }
        }
        // The index dimensions go after the kept basic dimensions that stood before them.
        let position = kept.iter().filter(|k| k.2.is_none() && k.3).count();
        let mut result_shape: Vec<usize> =
            kept.iter().filter(|k| k.2.is_none()).map(|k| k.0).collect();
        for (j, &s) in adv.index_shape.iter().enumerate() {
            result_shape.insert(position + j, s);
        }
        IndexPlan {
            kind: self.kind,
            view: Layout::new(&vshape, &vstrides, self.view.offset()),
            advanced: Some(Advanced {
                dims,
                index_shape: adv.index_shape.clone(),
                indices: adv.indices.clone(),
                position,
            }),
            result_shape,
            mask: self.mask,
            temp_bytes: self.temp_bytes,
        }
    }

    /// The view offset (in elements) of every result element, row-major: where `result[i]`
    /// comes from (or, for assignment, goes to).
    ///
    /// Host plans only: index arrays on a device give [`Error::UnsupportedDevice`]. A plan whose
    /// parts do not agree is an error ([`IndexPlan::check`]).
    pub fn source_offsets(&self) -> Result<Vec<usize>> {
        self.check()?;
        let n = genesis_storage::checked_numel(&self.result_shape)?;
        let mut out = Vec::new();
        genesis_storage::check_host_bytes(n.saturating_mul(size_of::<usize>()))?;
        out.try_reserve_exact(n)
            .map_err(|_| genesis_storage::Error::HostOutOfMemory {
                bytes: n.saturating_mul(size_of::<usize>()),
            })?;
        let (shape, strides, base) = (
            self.view.shape(),
            self.view.strides(),
            self.view.offset() as isize,
        );
        let Some(adv) = &self.advanced else {
            out.extend(self.view.indices());
            return Ok(out);
        };
        let mut host = Vec::with_capacity(adv.indices.len());
        for (a, arr) in adv.indices.iter().enumerate() {
            match arr {
                IndexArray::Host(v) => {
                    // Normalised values (as `plan` makes them): a plan edited by hand may
                    // hold others.
                    let (dim, size) = (adv.dims[a], shape[adv.dims[a]]);
                    if let Some(&i) = v.iter().find(|&&i| i < 0 || i as u64 >= size as u64) {
                        return Err(Error::IndexOutOfRange {
                            dim,
                            index: i,
                            size,
                        });
                    }
                    host.push(v.as_slice());
                }
                IndexArray::Device { index, .. } => {
                    return Err(Error::UnsupportedDevice {
                        op: "indexing a host tensor with a device index tensor",
                        device: index.view.storage().device(),
                    });
                }
            }
        }
        let k = adv.index_shape.len();
        let rest_dims: Vec<usize> = (0..shape.len()).filter(|d| !adv.dims.contains(d)).collect();
        let mut idx = vec![0usize; self.result_shape.len()];
        // When the result's last dimension is a basic one (x[idx] over rows, and most gathers),
        // each line's first offset is computed and the line stepped along; else every element
        // is a line of one.
        let rank = self.result_shape.len();
        let last_basic = rank > 0 && (rank - 1 < adv.position || rank > adv.position + k);
        // A basic last dimension is the last of `rest_dims`; were there none, lines of one
        // element (the general walk) are still right.
        let (line, step, outer_rank) = match rest_dims.last() {
            Some(&d) if last_basic => (self.result_shape[rank - 1], strides[d], rank - 1),
            _ => (1, 0, rank),
        };
        if n == 0 {
            return Ok(out);
        }
        for _ in 0..n / line {
            // Position within the broadcast index shape.
            let mut b = 0usize;
            for j in 0..k {
                b = b * adv.index_shape[j] + idx[adv.position + j];
            }
            let mut off = base;
            for (a, &d) in adv.dims.iter().enumerate() {
                off += host[a][b] as isize * strides[d];
            }
            let mut r = 0;
            for (p, &i) in idx.iter().enumerate() {
                if p >= adv.position && p < adv.position + k {
                    continue;
                }
                off += i as isize * strides[rest_dims[r]];
                r += 1;
            }
            out.extend((0..line as isize).map(|i| (off + i * step) as usize));
            for d in (0..outer_rank).rev() {
                idx[d] += 1;
                if idx[d] < self.result_shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::s;
    use crate::spec::IndexTensor;

    fn offsets(shape: &[usize], items: &[IndexItem]) -> (Vec<usize>, Vec<usize>, PlanKind) {
        let p = plan(&Layout::contiguous(shape), items, false).unwrap();
        (p.result_shape.clone(), p.source_offsets().unwrap(), p.kind)
    }

    #[test]
    fn basic_indexing_is_a_view() {
        let (shape, offs, kind) = offsets(&[4, 5], &s![1..3, ..;2]);
        assert_eq!(kind, PlanKind::View);
        assert_eq!(shape, vec![2, 3]);
        assert_eq!(offs, vec![5, 7, 9, 10, 12, 14]);
        let (shape, _, _) = offsets(&[2, 3, 4], &s![ELLIPSIS, 1, NEW]);
        assert_eq!(shape, vec![2, 3, 1]);
    }

    #[test]
    fn advanced_placement_follows_numpy() {
        // Adjacent advanced indices stay in place.
        let (shape, _, kind) = offsets(
            &[3, 4, 5, 6],
            &s![.., @IndexTensor::i64(&[2], vec![0, 2]), @IndexTensor::i64(&[2], vec![1, 3]), ..],
        );
        assert_eq!((shape, kind), (vec![3, 2, 6], PlanKind::Gather));
        // Separated ones go to the front.
        let (shape, _, _) = offsets(
            &[3, 4, 5],
            &s![@IndexTensor::i64(&[2], vec![0, 2]), .., @IndexTensor::i64(&[2], vec![1, 3])],
        );
        assert_eq!(shape, vec![2, 4]);
        // An integer among tensors is a 0-d index array (adjacent here).
        let (shape, offs, _) = offsets(&[3, 4, 5], &s![.., 1, @IndexTensor::i64(&[2], vec![4, 0])]);
        assert_eq!(shape, vec![3, 2]);
        assert_eq!(&offs[..2], &[9, 5]);
    }

    #[test]
    fn errors_are_typed() {
        let l = Layout::contiguous(&[4, 5]);
        assert!(matches!(
            plan(&l, &s![4], false),
            Err(Error::IndexOutOfRange {
                dim: 0,
                index: 4,
                size: 4
            })
        ));
        assert!(matches!(
            plan(&l, &s![0, 0, 0], false),
            Err(Error::TooManyIndices { given: 3, ndim: 2 })
        ));
        assert!(matches!(
            plan(&l, &s![ELLIPSIS, ELLIPSIS], false),
            Err(Error::InvalidIndex { .. })
        ));
        assert!(matches!(
            plan(&l, &s![..;0], false),
            Err(Error::InvalidStep { step: 0 })
        ));
        assert!(matches!(
            plan(&l, &[IndexItem::BadTensor("float32")], false),
            Err(Error::InvalidIndex { .. })
        ));
        let a = IndexTensor::i64(&[2], vec![0, 1]);
        let b = IndexTensor::i64(&[3], vec![0, 1, 2]);
        assert!(matches!(
            plan(&l, &s![@a, @b], false),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(matches!(
            plan(
                &l,
                &s![@IndexTensor::mask(&[3], &[true, false, true])],
                false
            ),
            Err(Error::ShapeMismatch { .. })
        ));
    }

    /// A value may lose only leading size-1 dimensions (PyTorch's rule), also when nothing is
    /// selected: NumPy's advanced assignment also drops leading dimensions of an empty value,
    /// PyTorch refuses it.
    #[test]
    fn a_value_loses_only_leading_size_one_dimensions() {
        let l = Layout::contiguous(&[2, 3]);
        let empty = IndexTensor::i64(&[0], vec![]);
        let p = plan(&l, &s![@empty.clone()], true).unwrap();
        assert_eq!(p.result_shape, vec![0, 3]);
        assert!(p.broadcast_value(&Layout::contiguous(&[5, 0, 3])).is_err());
        assert!(p.broadcast_value(&Layout::contiguous(&[5, 1, 3])).is_err());
        assert!(p.broadcast_value(&Layout::contiguous(&[5, 0, 2])).is_err());
        let v = p.broadcast_value(&Layout::contiguous(&[1, 1, 3])).unwrap();
        assert_eq!(v.shape(), &[0, 3]);
        let basic = plan(&l, &s![0..0], true).unwrap();
        assert!(
            basic
                .broadcast_value(&Layout::contiguous(&[5, 0, 3]))
                .is_err()
        );
        let mask = IndexTensor::mask(&[2, 3], &[false; 6]);
        let full = plan(&l, &s![@mask], true).unwrap();
        assert!(full.broadcast_value(&Layout::contiguous(&[5, 0])).is_err());
        assert!(full.broadcast_value(&Layout::contiguous(&[2])).is_err());
    }

    /// NumPy checks mask shapes before integer bounds and before slice steps, wherever the
    /// mask stands in the index.
    #[test]
    fn a_mask_of_the_wrong_shape_is_reported_before_a_bad_integer() {
        let l = Layout::contiguous(&[2, 1, 3]);
        let mask = IndexTensor::mask(&[2], &[true, false]);
        assert!(matches!(
            plan(&l, &s![0, 1, @mask.clone()], false),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(matches!(
            plan(&l, &s![NEW, ..;0, 7, @mask.clone()], false),
            Err(Error::ShapeMismatch { .. })
        ));
        // With the mask's shape right, the integer is the error.
        let good = IndexTensor::mask(&[3], &[true, false, true]);
        assert!(matches!(
            plan(&l, &s![0, 1, @good], false),
            Err(Error::IndexOutOfRange { dim: 1, .. })
        ));
    }
}
