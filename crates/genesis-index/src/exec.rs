//! Executing plans: `get` and `set` on any device. Views and basic assignments are strided
//! copies of the storage layer; advanced plans run in [`crate::advanced`] through the storage
//! layer's indexing operations; a host mask over a whole contiguous tensor is a masked select
//! or fill.

use std::borrow::Cow;
use std::sync::Arc;

use genesis_storage::{DType, Device, Layout, Storage, View};

use crate::plan::{IndexPlan, PlanKind, plan};
use crate::spec::{IndexDType, IndexItem};
use crate::{Error, Result};

/// The right-hand side of an assignment.
#[derive(Debug)]
pub enum Value<'a> {
    /// One value for every indexed element (converted to the target's dtype).
    Scalar(f64),
    /// A tensor broadcast to the indexed shape: a view of a storage of the target's dtype.
    Tensor(&'a View),
}

/// `input[items]`: a view sharing the storage for basic indexing, a new contiguous storage
/// otherwise.
pub fn get(input: &View, items: &[IndexItem]) -> Result<View> {
    get_routed(input, items, None)
}

/// [`get`], with the route of a host mask over a whole contiguous CUDA tensor forced: `Some(true)`
/// sends the mask's bytes, `Some(false)` the positions of its set elements, `None` takes [`get`]'s
/// route (the bytes: [`MaskPlan::uploads_mask`](crate::MaskPlan)). For measuring the routes;
/// anything else indexes as [`get`] does.
pub fn get_routed(input: &View, items: &[IndexItem], upload_mask: Option<bool>) -> Result<View> {
    if let Some(v) = full_mask_select(input, items)? {
        return Ok(v);
    }
    if let Some((route, n)) = host_mask_route(input.storage(), input.layout(), items, upload_mask)?
    {
        let l = input.layout();
        return match route {
            HostMaskRoute::Bytes(mask) => {
                let (m, m0) = mask.parts();
                let out = input.storage().masked_select_at(l.offset(), m, m0, n)?;
                let k = out.len();
                Ok(View::with_layout(Arc::new(out), Layout::contiguous(&[k]))?)
            }
            HostMaskRoute::Positions(pos) => {
                let flat = View::with_layout(
                    Arc::clone(input.storage()),
                    Layout::new(&[n], &[1], l.offset()),
                )?;
                get(&flat, &[pos])
            }
        };
    }
    let items = resolve_masks(items)?;
    let p = plan(input.layout(), &items, false)?;
    execute_checked_get(input, &p)
}

/// `x[mask]` for a device mask of `x`'s whole shape, both contiguous: the single-pass
/// compaction (a count, a scan, one ordered pass over the data), no coordinates.
fn full_mask_select(input: &View, items: &[IndexItem]) -> Result<Option<View>> {
    let [IndexItem::Stored(m)] = items else {
        return Ok(None);
    };
    let (l, ml) = (input.layout(), m.view.layout());
    if m.dtype != IndexDType::Bool
        || m.on_host()
        || m.view.storage().device() != input.storage().device()
        || ml.shape() != l.shape()
        || !l.is_contiguous()
        || !ml.is_contiguous()
    {
        return Ok(None);
    }
    let out =
        input
            .storage()
            .masked_select_at(l.offset(), m.view.storage(), ml.offset(), l.numel())?;
    let n = out.len();
    Ok(Some(View::with_layout(
        Arc::new(out),
        Layout::contiguous(&[n]),
    )?))
}

/// A host mask over the whole of a contiguous layout: a contiguous range of a host `Bool`
/// storage, or bytes gathered from elsewhere (0 or 1).
enum HostMask<'a> {
    Stored(&'a Storage, usize, usize),
    Owned(Vec<u8>),
}

/// The bytes of a [`HostMask`]; a stored mask's storage is read-locked while they live.
enum MaskBytes<'a> {
    Stored(genesis_storage::HostBytes<'a>, usize, usize),
    Owned(&'a [u8]),
}

impl std::ops::Deref for MaskBytes<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            MaskBytes::Stored(b, offset, len) => &b[*offset..offset + len],
            MaskBytes::Owned(v) => v,
        }
    }
}

impl HostMask<'_> {
    fn bytes(&self) -> Result<MaskBytes<'_>> {
        Ok(match self {
            HostMask::Stored(s, offset, len) => {
                let b = host_bytes(s, "boolean mask")?;
                if offset.saturating_add(*len) > b.len() {
                    return Err(genesis_storage::Error::OutOfBounds {
                        op: "boolean mask",
                        start: *offset,
                        len: *len,
                        storage_len: b.len(),
                    }
                    .into());
                }
                MaskBytes::Stored(b, *offset, *len)
            }
            HostMask::Owned(v) => MaskBytes::Owned(v),
        })
    }
}

/// The host mask over the whole of a contiguous `layout` that `items` is (that mask alone);
/// `None` for anything else.
fn host_mask<'a>(layout: &Layout, items: &'a [IndexItem]) -> Result<Option<HostMask<'a>>> {
    if !layout.is_contiguous() || layout.rank() == 0 {
        return Ok(None);
    }
    Ok(Some(match items {
        // (A mask whose values do not match its shape goes to planning, which refuses it.)
        [IndexItem::Tensor(t)]
            if t.dtype == IndexDType::Bool
                && t.shape == layout.shape()
                && t.data.len() == layout.numel() =>
        {
            HostMask::Owned(t.data.iter().map(|&v| u8::from(v != 0)).collect())
        }
        [IndexItem::Stored(t)]
            if t.dtype == IndexDType::Bool
                && t.on_host()
                && t.view.layout().shape() == layout.shape() =>
        {
            let ml = t.view.layout();
            if ml.is_contiguous() {
                HostMask::Stored(t.view.storage(), ml.offset(), ml.numel())
            } else {
                HostMask::Owned(t.view.contiguous()?.to_bytes()?)
            }
        }
        _ => return Ok(None),
    }))
}

/// A `Bool` storage on the tensor's device holding the mask from an offset.
enum MaskStorage<'a> {
    Borrowed(&'a Storage, usize),
    Owned(Box<Storage>),
}

impl MaskStorage<'_> {
    fn parts(&self) -> (&Storage, usize) {
        match self {
            MaskStorage::Borrowed(s, offset) => (s, *offset),
            MaskStorage::Owned(s) => (s, 0),
        }
    }
}

/// How a host mask reaches the tensor it indexes.
enum HostMaskRoute<'a> {
    /// The mask as a `Bool` storage on the tensor's device, for the compaction or the masked
    /// fill (`masked_select_at`, `masked_fill_at`).
    Bytes(MaskStorage<'a>),
    /// The int64 positions of its set elements on the device, as an index into the flattened
    /// tensor.
    Positions(IndexItem),
}

/// A host mask over the whole of a contiguous tensor (`items` is that mask alone), with the
/// number of elements it covers: on the host, one pass over the mask itself; on a CUDA device,
/// sent as its bytes ([`MaskPlan::uploads_mask`](crate::MaskPlan)), or as the positions of its
/// set elements when `upload_mask` is `Some(false)`. `None` for anything else (planning
/// handles it).
fn host_mask_route<'a>(
    storage: &Storage,
    layout: &Layout,
    items: &'a [IndexItem],
    upload_mask: Option<bool>,
) -> Result<Option<(HostMaskRoute<'a>, usize)>> {
    let on_host = storage.host_bytes().is_some();
    if !on_host && !storage.device().is_cuda() {
        return Ok(None);
    }
    let Some(mask) = host_mask(layout, items)? else {
        return Ok(None);
    };
    let bytes = mask.bytes()?;
    let total = bytes.len();
    if total == 0 {
        return Ok(None);
    }
    if on_host {
        drop(bytes);
        let m = match mask {
            HostMask::Stored(s, offset, _) => MaskStorage::Borrowed(s, offset),
            HostMask::Owned(v) => MaskStorage::Owned(Box::new(Storage::from_bytes(
                &v,
                DType::Bool,
                storage.device(),
            )?)),
        };
        return Ok(Some((HostMaskRoute::Bytes(m), total)));
    }
    let upload = upload_mask.unwrap_or(true);
    let route = if upload {
        let m = Storage::from_bytes(&bytes, DType::Bool, storage.device())?;
        HostMaskRoute::Bytes(MaskStorage::Owned(Box::new(m)))
    } else {
        let pos: Vec<i64> = bytes
            .iter()
            .enumerate()
            .filter(|&(_, &b)| b != 0)
            .map(|(i, _)| i as i64)
            .collect();
        let k = pos.len();
        HostMaskRoute::Positions(IndexItem::stored(View::with_layout(
            Arc::new(Storage::from_slice(&pos, storage.device())?),
            Layout::contiguous(&[k]),
        )?))
    };
    Ok(Some((route, total)))
}

/// Turns the boolean masks held on a device among `items` into coordinates on that device
/// ([`IndexItem::Nonzero`]), so that [`plan`] can size the result; everything else is kept.
/// Each such mask costs a count that the host reads (one synchronisation) and one pass.
pub fn resolve_masks(items: &[IndexItem]) -> Result<Cow<'_, [IndexItem]>> {
    let device_mask = |i: &IndexItem| matches!(i, IndexItem::Stored(t) if t.dtype == IndexDType::Bool && !t.on_host());
    if !items.iter().any(device_mask) {
        return Ok(Cow::Borrowed(items));
    }
    let mut out = Vec::with_capacity(items.len());
    for it in items {
        out.push(match it {
            IndexItem::Stored(t) if device_mask(it) => crate::advanced::resolve_mask(t)?,
            other => other.clone(),
        });
    }
    Ok(Cow::Owned(out))
}

/// Executes a read plan made for `input`'s layout. A plan whose parts do not agree (built or
/// edited by hand: [`IndexPlan::check`]) is an error.
pub fn execute_get(input: &View, p: &IndexPlan) -> Result<View> {
    p.check()?;
    execute_checked_get(input, p)
}

/// [`execute_get`] of a plan known to hold together (one [`plan`] made).
fn execute_checked_get(input: &View, p: &IndexPlan) -> Result<View> {
    match p.kind {
        PlanKind::View => Ok(input.relayout(p.view.clone())?),
        PlanKind::Gather => crate::advanced::gather(input, p),
        k => Err(Error::InvalidIndex {
            reason: format!("a {k:?} plan is for assignment, not reading"),
        }),
    }
}

/// The bytes of a host storage; [`Error::UnsupportedDevice`] for a device storage.
fn host_bytes<'a>(s: &'a Storage, op: &'static str) -> Result<genesis_storage::HostBytes<'a>> {
    s.host_bytes().ok_or(Error::UnsupportedDevice {
        op,
        device: s.device(),
    })
}

/// `target[items] = value` (with `accumulate`, `+=` that adds at duplicate indices). The
/// target is left unchanged when anything is wrong (every check runs before the first write).
/// Duplicate indices without `accumulate`: the last value in row-major order wins.
pub fn set(
    target: &mut Storage,
    layout: &Layout,
    items: &[IndexItem],
    value: Value<'_>,
    accumulate: bool,
) -> Result<()> {
    if let (Value::Scalar(x), false) = (&value, accumulate)
        && let Some((route, n)) = host_mask_route(target, layout, items, None)?
    {
        return match route {
            HostMaskRoute::Bytes(mask) => {
                // Ranges are checked by `masked_fill_at` before it writes.
                let one = scalar_as(*x, target.dtype())?;
                let bytes = host_bytes(&one, "set")?.to_vec();
                let (m, m0) = mask.parts();
                target.masked_fill_at(layout.offset(), m, m0, n, &bytes)?;
                Ok(())
            }
            HostMaskRoute::Positions(pos) => set(
                target,
                &Layout::new(&[n], &[1], layout.offset()),
                &[pos],
                Value::Scalar(*x),
                false,
            ),
        };
    }
    let items = resolve_masks(items)?;
    let mut p = plan(layout, &items, true)?;
    if p.kind == PlanKind::Copy && matches!(value, Value::Scalar(_)) {
        p.kind = PlanKind::Fill;
    }
    execute_set(target, &p, value, accumulate)
}

/// A scalar as one element of `dtype` in a CPU storage, through the one exact conversion
/// ([`Storage::scalar`]: a value the dtype does not represent is an error, not saturated).
fn scalar_as(x: f64, dtype: DType) -> Result<Storage> {
    Ok(Storage::scalar(x, dtype)?)
}

/// The value broadcast to the plan's result shape, dense, on `device`.
fn dense_values(
    p: &IndexPlan,
    value: Value<'_>,
    dtype: DType,
    device: Device,
) -> Result<Arc<Storage>> {
    let (storage, layout) = match value {
        Value::Scalar(x) => {
            let one = scalar_as(x, dtype)?.to_device(device)?;
            (Arc::new(one), Layout::contiguous(&[]))
        }
        Value::Tensor(v) => {
            if v.storage().dtype() != dtype {
                return Err(Error::DTypeMismatch {
                    target: dtype,
                    value: v.storage().dtype(),
                });
            }
            (Arc::clone(v.storage()), v.layout().clone())
        }
    };
    // NumPy's broadcast of the value (leading size-1 dimensions dropped first).
    let expanded = p.broadcast_value(&layout)?;
    let vshape = layout.shape();
    // Already the dense result on the right device (contiguous from the storage's first
    // element, nothing more): read where it is.
    let n = crate::numel(&p.result_shape);
    if storage.device() == device
        && layout.is_contiguous()
        && layout.offset() == 0
        && vshape == p.result_shape.as_slice()
        && storage.len() == n
    {
        return Ok(storage);
    }
    let dense = storage.contiguous(&expanded)?;
    Ok(Arc::new(if dense.device() == device {
        dense
    } else {
        dense.to_device(device)?
    }))
}

/// Executes an assignment plan made for the target's layout: an advanced plan through
/// [`crate::advanced::scatter`], any other as a strided copy (with `accumulate`, of the sum).
fn execute_set(
    target: &mut Storage,
    p: &IndexPlan,
    value: Value<'_>,
    accumulate: bool,
) -> Result<()> {
    let values = dense_values(p, value, target.dtype(), target.device())?;
    match p.kind {
        PlanKind::Scatter => crate::advanced::scatter(target, p, &values, accumulate),
        _ => {
            let dense = Layout::contiguous(&p.result_shape);
            // Any rank: the storage layer's strided copies reduce the layouts, and loop over
            // what still has more dimensions than their kernel takes.
            if accumulate {
                let current = target.contiguous(&p.view)?;
                let sum = add_dense(current, &values)?;
                target.copy_strided_from(&p.view, &sum, &dense)?;
            } else {
                target.copy_strided_from(&p.view, &values, &dense)?;
            }
            Ok(())
        }
    }
}

/// `current + values` (dense, same shape and device): the elementwise addition for the dtypes
/// it adds; the others (int8, uint8, int16, float64, and bool, whose accumulation is a logical
/// or) by the indexing kernels' scatter-add ([`crate::advanced::add_in_place`]). Every position
/// of a basic plan is distinct, so this is PyTorch's `index_put_(accumulate=True)`.
fn add_dense(mut current: Storage, values: &Storage) -> Result<Storage> {
    match current.add(values) {
        Err(genesis_storage::Error::UnsupportedDType { .. }) => {}
        done => return Ok(done?),
    }
    crate::advanced::add_in_place(&mut current, values)?;
    Ok(current)
}
