//! The executor of advanced plans (gathers and scatters through index arrays) on any device: a
//! plan turned into the storage layer's indexing operations (`Storage::index_*`: descriptors of
//! the `index.cu` kernels, index arrays normalised on the device, duplicate positions), which
//! run the kernels on CUDA memory and their CPU twins on host memory. This module launches
//! nothing, holds no device address and has no `unsafe`: index values reach the storage layer
//! as its `IndexValues` (in range by construction), duplicates as its `DeadMask` and
//! `AddGroups`, and the storage layer checks every offset a descriptor may reach.

use std::borrow::Cow;
use std::sync::Arc;

use genesis_kernels::index::{IndexDesc, MAX_INDEX_DIMS, Strided};
use genesis_storage::{
    AddGroups, DType, DeadMask, Device, IndexSource, IndexValues, Layout, Storage, View,
};

use crate::plan::{Advanced, IndexArray, IndexPlan};
use crate::spec::{IndexDType, IndexItem, MaskCoords, StoredIndex};
use crate::{Error, Result};

/// The kernels' descriptor of a plan; `None` when it does not fit (more than
/// [`MAX_INDEX_DIMS`] result dimensions after compaction, or index arrays): see [`flat`].
fn desc(p: &IndexPlan, adv: &Advanced) -> Option<IndexDesc> {
    // The same elements in the same order with size-1 and mergeable basic dimensions removed,
    // so that high-rank views fit the kernel's dimensions (the advanced part is unchanged).
    let compact = p.compacted();
    let (p, adv) = (&compact, compact.advanced.as_ref().unwrap_or(adv));
    let rank = p.result_shape.len();
    if rank > MAX_INDEX_DIMS || adv.dims.len() > MAX_INDEX_DIMS {
        return None;
    }
    let k = adv.index_shape.len();
    let (vshape, vstrides) = (p.view.shape(), p.view.strides());
    let rest: Vec<usize> = (0..vshape.len())
        .filter(|d| !adv.dims.contains(d))
        .collect();
    let mut d = IndexDesc {
        res_shape: [1; MAX_INDEX_DIMS],
        res_stride: [0; MAX_INDEX_DIMS],
        adv_stride: [0; MAX_INDEX_DIMS],
        base: p.view.offset() as i64,
        nb: crate::numel(&adv.index_shape) as i64,
        rank: rank as i32,
        pos: adv.position as i32,
        k: k as i32,
        n_adv: adv.dims.len() as i32,
    };
    let mut r = 0;
    for (i, &s) in p.result_shape.iter().enumerate() {
        d.res_shape[i] = s as i64;
        if i < adv.position || i >= adv.position + k {
            d.res_stride[i] = vstrides[rest[r]] as i64;
            r += 1;
        }
    }
    for (a, &dim) in adv.dims.iter().enumerate() {
        d.adv_stride[a] = vstrides[dim] as i64;
    }
    Some(d)
}

/// A plan too wide for [`desc`] (the rare case), made exact another way: the index arrays are
/// normalised and checked (on the device for device arrays), read back, and every result
/// element's source offset computed on the host (`IndexPlan::source_offsets`). The descriptor
/// then reads them as one index array (over the `len` elements of the storage) over one result
/// dimension of stride 1 from offset 0, one position per result element, in row-major result
/// order, so that the last of duplicate offsets wins as in NumPy.
struct Flat {
    desc: IndexDesc,
    /// The source offsets, on the device.
    idx: IndexValues,
}

fn flat(p: &IndexPlan, adv: &Advanced, device: Device, len: usize) -> Result<Flat> {
    let ix = prepare_indices(adv, &p.view, device)?;
    check_bad(adv, &ix)?;
    let host = host_indices(adv, &ix)?;
    let mut hp = p.clone();
    hp.advanced = Some(Advanced {
        indices: host
            .into_iter()
            .map(|a| IndexArray::Host(a.into_owned()))
            .collect(),
        ..adv.clone()
    });
    let offsets: Vec<i64> = hp.source_offsets()?.into_iter().map(|o| o as i64).collect();
    let n = offsets.len();
    let mut desc = IndexDesc {
        res_shape: [1; MAX_INDEX_DIMS],
        res_stride: [0; MAX_INDEX_DIMS],
        adv_stride: [0; MAX_INDEX_DIMS],
        base: 0,
        nb: n as i64,
        rank: 1,
        pos: 0,
        k: 1,
        n_adv: 1,
    };
    desc.res_shape[0] = n as i64;
    desc.adv_stride[0] = 1;
    let idx = IndexValues::new(device, n, &[(IndexSource::Host(&offsets), len)])?;
    Ok(Flat { desc, idx })
}

/// The row fast path applies: one 1-D index array over the view's leading dimension, whose
/// remaining dimensions are contiguous rows, everything a multiple of 16 bytes.
fn rows16(p: &IndexPlan, adv: &Advanced, size: usize) -> Option<genesis_kernels::index::Rows16> {
    if adv.dims != [0] || adv.index_shape.len() != 1 || adv.position != 0 {
        return None;
    }
    rows16_of(&p.view, adv.index_shape[0], size)
}

/// The rows of `view` (`nrows` of them read, elements of `size` bytes) for the row kernels: its
/// dimensions after the first contiguous, a positive leading stride, and rows, offset and
/// stride multiples of 16 bytes; `None` otherwise.
fn rows16_of(view: &Layout, nrows: usize, size: usize) -> Option<genesis_kernels::index::Rows16> {
    let (shape, strides) = (view.shape(), view.strides());
    if shape.is_empty() {
        return None;
    }
    let row = Layout::contiguous(&shape[1..]);
    let rest_contiguous = shape[1..]
        .iter()
        .zip(&strides[1..])
        .zip(row.strides())
        .all(|((&d, &s), &c)| d == 1 || s == c);
    // Products that overflow (an empty view's other sizes and strides may be huge: it is never
    // walked) take the general path.
    let row_bytes = row.try_numel().ok()?.checked_mul(size)?;
    let base_bytes = view.offset().checked_mul(size)?;
    let stride_bytes = (strides[0].max(0) as usize).checked_mul(size)?;
    let ok = rest_contiguous
        && strides[0] > 0
        && row_bytes.is_multiple_of(16)
        && base_bytes.is_multiple_of(16)
        && stride_bytes.is_multiple_of(16);
    ok.then_some(genesis_kernels::index::Rows16 {
        nrows,
        row_units: row_bytes / 16,
        base_units: base_bytes / 16,
        stride_units: stride_bytes / 16,
    })
}

/// An index array on a device indexing a host storage: an error (the values would have to be
/// read back first), as planning reports it for the plans it executes itself.
fn check_host_target(target: &Storage, adv: &Advanced) -> Result<()> {
    if target.device().is_cuda() {
        return Ok(());
    }
    for a in &adv.indices {
        if let IndexArray::Device { index, .. } = a {
            return Err(Error::UnsupportedDevice {
                op: "indexing a host tensor with a device index tensor",
                device: index.view.storage().device(),
            });
        }
    }
    Ok(())
}

fn layout_desc(v: &View) -> Result<Strided> {
    let l = v.layout();
    Strided::new(l.shape(), l.strides(), l.offset()).ok_or_else(|| Error::InvalidIndex {
        reason: format!("index tensors of more than {MAX_INDEX_DIMS} dimensions"),
    })
}

/// The normalised index arrays of a plan on `device` (`view`: the plan's view, whose sizes the
/// host arrays index): host arrays uploaded (one copy), device arrays normalised and checked on
/// the device (no synchronisation: [`check_bad`] reads the result after the work that uses it
/// is queued).
fn prepare_indices(adv: &Advanced, view: &Layout, device: Device) -> Result<IndexValues> {
    let nb = crate::numel(&adv.index_shape);
    // Per device array: its layout for the normalisation, or, for an index tensor of more than
    // MAX_INDEX_DIMS dimensions (rare), its values read on the host through its layout, checked
    // there and wrapped.
    let mut reads: Vec<Option<std::result::Result<Strided, Vec<i64>>>> = Vec::new();
    for arr in &adv.indices {
        let IndexArray::Device { index, size, dim } = arr else {
            reads.push(None);
            continue;
        };
        let src = index.view.storage();
        if src.device() != device {
            return Err(Error::Storage(genesis_storage::Error::DeviceMismatch {
                op: "indexing",
                lhs: device,
                rhs: src.device(),
            }));
        }
        if nb > 0 && *size == 0 {
            // Every value is out of range: report the first without running anything.
            return Err(first_out_of_range(index, 0, *dim, true));
        }
        reads.push(Some(match layout_desc(&index.view) {
            Ok(layout) => Ok(layout),
            Err(_) => {
                let s = *size as i64;
                let mut values = wide_index_values(index)?;
                for v in &mut values {
                    let w = if *v < 0 { *v + s } else { *v };
                    if w < 0 || w >= s {
                        return Err(Error::IndexOutOfRange {
                            dim: *dim,
                            index: *v,
                            size: *size,
                        });
                    }
                    *v = w;
                }
                Err(values)
            }
        }));
    }
    let sources: Vec<(IndexSource<'_>, usize)> = adv
        .indices
        .iter()
        .zip(&reads)
        .zip(&adv.dims)
        .map(|((arr, read), &dim)| match (arr, read) {
            (IndexArray::Device { index, size, .. }, Some(Ok(layout))) => (
                IndexSource::Stored {
                    values: index.view.storage(),
                    layout,
                },
                *size,
            ),
            (IndexArray::Device { size, .. }, Some(Err(values))) => {
                (IndexSource::Host(values), *size)
            }
            (arr, _) => (
                IndexSource::Host(arr.host().unwrap_or(&[])),
                view.shape()[dim],
            ),
        })
        .collect();
    Ok(IndexValues::new(device, nb, &sources)?)
}

/// The values of a device index tensor, row-major over its layout, read on the host from its
/// whole storage (no strided copy on the device, which any rank takes).
fn wide_index_values(index: &StoredIndex) -> Result<Vec<i64>> {
    let storage = index.view.storage();
    let all: Vec<i64> = match index.dtype {
        IndexDType::I64 => storage.to_vec::<i64>()?,
        IndexDType::I32 => storage
            .to_vec::<i32>()?
            .into_iter()
            .map(i64::from)
            .collect(),
        IndexDType::Bool => storage
            .to_bytes()?
            .into_iter()
            .map(|b| i64::from(b != 0))
            .collect(),
    };
    Ok(index.view.layout().indices().map(|o| all[o]).collect())
}

/// Reads the normalisation's reports (one synchronisation): the first bad value, as an error.
fn check_bad(adv: &Advanced, ix: &IndexValues) -> Result<()> {
    let Some(words) = ix.bad_positions()? else {
        return Ok(());
    };
    // A word names the array's first bad position; the error reads the array back to name its
    // value (the same first one, in row-major order).
    for (arr, &w) in adv.indices.iter().zip(&words) {
        if let (IndexArray::Device { index, size, dim }, true) = (arr, w != -1) {
            return Err(first_out_of_range(index, *size, *dim, true));
        }
    }
    Ok(())
}

/// The normalised index arrays, read back to the host (after [`check_bad`]).
fn host_indices<'a>(adv: &'a Advanced, ix: &IndexValues) -> Result<Vec<Cow<'a, [i64]>>> {
    let nb = crate::numel(&adv.index_shape);
    if let Some(host) = adv
        .indices
        .iter()
        .map(IndexArray::host)
        .collect::<Option<Vec<_>>>()
    {
        return Ok(host.into_iter().map(Cow::Borrowed).collect());
    }
    let flat = ix.to_vec()?;
    Ok((0..adv.indices.len())
        .map(|a| Cow::Owned(flat[a * nb..(a + 1) * nb].to_vec()))
        .collect())
}

/// Gathers a plan's result from a view on any device.
pub(crate) fn gather(input: &View, p: &IndexPlan) -> Result<View> {
    let Some(adv) = p.advanced.as_ref() else {
        return Err(Error::InvalidIndex {
            reason: "a gather plan without an advanced part".into(),
        });
    };
    let src = input.storage();
    check_host_target(src, adv)?;
    let size = src.dtype().size();
    let n = crate::numel(&p.result_shape);
    if n == 0 {
        // Nothing to read (an empty view's offset need not lie in its storage, so no span of
        // it is taken); device index values are still checked (an out-of-range one is an error).
        if crate::numel(&adv.index_shape) > 0 {
            let ix = prepare_indices(adv, &p.view, src.device())?;
            check_bad(adv, &ix)?;
        }
        return Ok(View::with_layout(
            Arc::new(Storage::empty(0, src.dtype(), src.device())?),
            Layout::contiguous(&p.result_shape),
        )?);
    }
    let rows = rows16(p, adv, size);
    if let (Some(rows), [IndexArray::Device { index, size, dim }]) = (rows, adv.indices.as_slice())
        && index.view.storage().device() == src.device()
        && index.view.layout().rank() == 1
    {
        return gather_rows_raw(p, src, index, *size, *dim, &rows);
    }
    let Some(d) = desc(p, adv) else {
        let f = flat(p, adv, src.device(), src.len())?;
        let out = src.index_gather(&f.desc, &f.idx, None)?;
        return Ok(View::with_layout(
            Arc::new(out),
            Layout::contiguous(&p.result_shape),
        )?);
    };
    let ix = prepare_indices(adv, &p.view, src.device())?;
    let out = src.index_gather(&d, &ix, rows.as_ref())?;
    // Device arrays were checked by their normalisation (bad values read as 0, in range):
    // report one now; the result is then dropped.
    check_bad(adv, &ix)?;
    Ok(View::with_layout(
        Arc::new(out),
        Layout::contiguous(&p.result_shape),
    )?)
}

/// `x[idx]` for whole rows with one 1-D index tensor on the device: one kernel reads the index
/// values as they are (no normalisation pass) and checks them
/// (`Storage::index_gather_rows_checked`).
fn gather_rows_raw(
    p: &IndexPlan,
    src: &Storage,
    index: &StoredIndex,
    size: usize,
    dim: usize,
    rows: &genesis_kernels::index::Rows16,
) -> Result<View> {
    let n = crate::numel(&p.result_shape);
    if rows.nrows > 0 && size == 0 {
        return Err(first_out_of_range(index, 0, dim, true));
    }
    let l = index.view.layout();
    let layout = (l.offset(), l.strides()[0] as i64);
    let Some(out) =
        src.index_gather_rows_checked(rows, index.view.storage(), layout, size, true, n)?
    else {
        return Err(first_out_of_range(index, size, dim, true));
    };
    Ok(View::with_layout(
        Arc::new(out),
        Layout::contiguous(&p.result_shape),
    )?)
}

/// PyTorch's `index_select(0, index)` of whole rows in one pass, on any device: the rows of
/// `input` (rank at least 1) named by the 1-D int64 or int32 `index` (on `input`'s device), in
/// its order; the result is contiguous, of `input`'s shape with `index.len()` rows. Unlike
/// `x[idx]` ([`get`](crate::get)) a negative value is out of range, not counted from the end.
/// Each value is checked where it lives (on the device for a CUDA index, by the kernel that
/// copies the rows): a bad one is [`Error::IndexOutOfRange`] naming the first bad value, and
/// no result is returned.
///
/// `Ok(None)` when this path does not apply and the caller must gather another way: `input`'s
/// dimensions after the first are not contiguous rows of a multiple of 16 bytes (nor its
/// offset and leading stride), or `index` is not a 1-D int64/int32 tensor on `input`'s
/// device.
///
/// ```
/// use genesis_index::select_rows;
/// use genesis_storage::{Device, Storage, View};
///
/// let x = View::new(Storage::from_slice(&(0..16).collect::<Vec<i32>>(), Device::Cpu)?);
/// let m = x.relayout(x.layout().view(&[4, 4]).unwrap()).unwrap();
/// let idx = View::new(Storage::from_slice(&[3i64, 0, 3], Device::Cpu)?);
/// let rows = select_rows(&m, &idx)?.expect("16-byte rows");
/// assert_eq!(rows.contiguous()?.to_vec::<i32>()?, [12, 13, 14, 15, 0, 1, 2, 3, 12, 13, 14, 15]);
/// let bad = View::new(Storage::from_slice(&[-1i64], Device::Cpu)?);
/// assert!(select_rows(&m, &bad).is_err());
/// # Ok::<(), genesis_index::Error>(())
/// ```
pub fn select_rows(input: &View, index: &View) -> Result<Option<View>> {
    let src = input.storage();
    let dtype = match index.storage().dtype() {
        DType::I64 => IndexDType::I64,
        DType::I32 => IndexDType::I32,
        _ => return Ok(None),
    };
    let l = index.layout();
    if l.rank() != 1 || index.storage().device() != src.device() {
        return Ok(None);
    }
    let stored = StoredIndex {
        view: index.clone(),
        dtype,
    };
    let nrows = l.shape()[0];
    let Some(rows) = rows16_of(input.layout(), nrows, src.dtype().size()) else {
        return Ok(None);
    };
    let mut shape = input.layout().shape().to_vec();
    let size = shape[0];
    shape[0] = nrows;
    if nrows > 0 && size == 0 {
        return Err(first_out_of_range(&stored, 0, 0, false));
    }
    // The rows of an empty input may be huge: `nrows` of them may be too many to count.
    let n = genesis_storage::checked_numel(&shape)?;
    let layout = (l.offset(), l.strides()[0] as i64);
    let Some(out) =
        src.index_gather_rows_checked(&rows, index.storage(), layout, size, false, n)?
    else {
        return Err(first_out_of_range(&stored, size, 0, false));
    };
    Ok(Some(View::with_layout(
        Arc::new(out),
        Layout::contiguous(&shape),
    )?))
}

/// The out-of-range error for the first bad value (row-major) of an index array in a storage
/// (negative values counted from the end when `wrap`): reads the array back (the error path
/// only).
fn first_out_of_range(index: &StoredIndex, size: usize, dim: usize, wrap: bool) -> Error {
    let values = match index.to_host() {
        Ok(t) => t.data,
        Err(e) => return e.into(),
    };
    let s = size as i64;
    let value = values
        .into_iter()
        .find(|&v| {
            let w = if wrap && v < 0 { v + s } else { v };
            w < 0 || w >= s
        })
        .unwrap_or(i64::MIN);
    Error::IndexOutOfRange {
        dim,
        index: value,
        size,
    }
}

/// `dst[k] += values[k]` for every element of `dst` (`values` of its dtype and device, at
/// least as long), as the indexing kernels add (integers wrap, half types round once from f32,
/// bool is a logical or), for every dtype: `Storage::index_accumulate`.
pub(crate) fn add_in_place(dst: &mut Storage, values: &Storage) -> Result<()> {
    Ok(dst.index_accumulate(values)?)
}

/// Writes dense `values` (result-shaped, same device) through an advanced plan.
pub(crate) fn scatter(
    target: &mut Storage,
    p: &IndexPlan,
    values: &Storage,
    accumulate: bool,
) -> Result<()> {
    let Some(adv) = p.advanced.as_ref() else {
        return Err(Error::InvalidIndex {
            reason: "a scatter plan without an advanced part".into(),
        });
    };
    check_host_target(target, adv)?;
    let n = crate::numel(&p.result_shape);
    if n == 0 {
        return Ok(());
    }
    let Some(d) = desc(p, adv) else {
        return scatter_flat(target, p, adv, values, accumulate);
    };
    let dev = target.device();
    let nb = crate::numel(&adv.index_shape);
    let ix = prepare_indices(adv, &p.view, dev)?;
    let rows = rows16(p, adv, target.dtype().size());
    // Duplicate tuples: on the device when the arrays are there and their keys are few enough;
    // else (accumulate, or many keys) on the host, after checking the device arrays.
    let on_device = !accumulate
        && ix.checks_on_device()
        && ix
            .key_count()
            .is_some_and(|c| c <= MAX_DEVICE_KEYS.max(nb.saturating_mul(4)));
    if on_device {
        let dead = DeadMask::by_table(&ix)?;
        target.index_scatter(values, &d, &ix, &dead, rows.as_ref())?;
        // With a bad device index every position was dead: nothing was written.
        return check_bad(adv, &ix);
    }
    check_bad(adv, &ix)?;
    if accumulate {
        target.index_scatter_add(values, &d, &ix, &AddGroups::new(&ix)?)?;
    } else {
        target.index_scatter(values, &d, &ix, &DeadMask::new(&ix)?, rows.as_ref())?;
    }
    Ok(())
}

/// [`scatter`] for a plan too wide for [`desc`], through [`flat`]: one position per result
/// element, duplicates (equal offsets) resolved on the host in row-major result order.
fn scatter_flat(
    target: &mut Storage,
    p: &IndexPlan,
    adv: &Advanced,
    values: &Storage,
    accumulate: bool,
) -> Result<()> {
    let Flat { desc, idx } = flat(p, adv, target.device(), target.len())?;
    if accumulate {
        target.index_scatter_add(values, &desc, &idx, &AddGroups::new(&idx)?)?;
    } else {
        target.index_scatter(values, &desc, &idx, &DeadMask::new(&idx)?, None)?;
    }
    Ok(())
}

/// Most keys (index tuples) the device deduplicates with a table of one word per key.
const MAX_DEVICE_KEYS: usize = 1 << 22;

/// Turns the masks on a CUDA device among `items` into coordinates there ([`MaskCoords`]):
/// a count (read by the host: one synchronisation), one pass writing the set positions in
/// order, and for a mask of several dimensions one pass splitting them into coordinates.
pub(crate) fn resolve_mask(mask: &StoredIndex) -> Result<IndexItem> {
    let v = &mask.view;
    let shape = v.layout().shape().to_vec();
    let len = crate::numel(&shape);
    let dense;
    let (storage, start) = if v.layout().is_contiguous() {
        (v.storage().as_ref(), v.layout().offset())
    } else {
        dense = v.contiguous()?;
        (&dense, 0)
    };
    let positions = Arc::new(storage.nonzero_at(start, len)?);
    let n = positions.len();
    let k = shape.len();
    let coords_storage = if k <= 1 {
        positions
    } else if k > MAX_INDEX_DIMS {
        // Past the unravel kernel's dimensions (rare): split the positions on the host.
        let flat = positions.to_vec::<i64>()?;
        let mut coords = vec![0i64; k * n];
        for (j, &f) in flat.iter().enumerate() {
            let mut rem = f as usize;
            for d in (0..k).rev() {
                coords[d * n + j] = (rem % shape[d]) as i64;
                rem /= shape[d];
            }
        }
        Arc::new(if coords.is_empty() {
            Storage::empty(0, DType::I64, storage.device())?
        } else {
            Storage::upload(&coords, storage.device())?
        })
    } else {
        let mut out = Storage::empty(k * n, DType::I64, storage.device())?;
        let desc = Strided::new(&shape, &vec![0; k], 0).ok_or_else(|| Error::InvalidIndex {
            reason: format!("masks of more than {MAX_INDEX_DIMS} dimensions"),
        })?;
        positions.index_unravel(&desc, false, &mut out)?;
        Arc::new(out)
    };
    let mut coords = Vec::with_capacity(k);
    for d in 0..k {
        let layout = Layout::new(&[n], &[1], d * n);
        coords.push(StoredIndex {
            view: View::with_layout(Arc::clone(&coords_storage), layout)?,
            dtype: IndexDType::I64,
        });
    }
    Ok(IndexItem::Nonzero(MaskCoords {
        mask_shape: shape,
        selected: n,
        coords,
    }))
}
