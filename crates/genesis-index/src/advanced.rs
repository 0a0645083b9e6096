//! The executor of advanced plans (gathers and scatters through index arrays) on any device: a
//! plan turned into the storage layer's indexing operations (`Storage::index_*`: descriptors of
//! the `index.cu` kernels, index arrays normalised on the device, duplicate positions), which
//! run the kernels on CUDA memory and their CPU twins on host memory. This module launches
//! nothing and holds no device address.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use genesis_kernels::index::{IndexDesc, Keys, MAX_INDEX_DIMS, Strided};
use genesis_storage::{DType, Device, Layout, Storage, View};

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
        nb: adv.index_shape.iter().product::<usize>() as i64,
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
/// then reads them as one index array over one result dimension of stride 1 from offset 0, one
/// position per result element, in row-major result order, so that the last of duplicate
/// offsets wins as in NumPy.
struct Flat {
    desc: IndexDesc,
    /// The source offsets, on the device.
    idx: Storage,
    /// The same, on the host (for the scatter's duplicates).
    offsets: Vec<i64>,
}

fn flat(p: &IndexPlan, adv: &Advanced, device: Device) -> Result<Flat> {
    let ix = prepare_indices(adv, device)?;
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
    let idx = if n == 0 {
        Storage::upload(&[0i64], device)?
    } else {
        Storage::upload(&offsets, device)?
    };
    Ok(Flat { desc, idx, offsets })
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
    let row_bytes = row.numel() * size;
    let (base_bytes, stride_bytes) = (view.offset() * size, strides[0].max(0) as usize * size);
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

/// The normalised index arrays of a plan, concatenated (`n_adv * nb` int64), on the device,
/// and what is needed to report a bad value of a device array afterwards.
struct Indices {
    idx: Storage,
    /// One word per index array, all ones unless the normalisation of a device array met an
    /// out-of-range value (then: its smallest position).
    bad: Option<Storage>,
}

fn layout_desc(v: &View) -> Result<Strided> {
    let l = v.layout();
    Strided::new(l.shape(), l.strides(), l.offset()).ok_or_else(|| Error::InvalidIndex {
        reason: format!("index tensors of more than {MAX_INDEX_DIMS} dimensions"),
    })
}

/// Host arrays uploaded (one copy), device arrays normalised and checked on the device (no
/// synchronisation: [`check_bad`] reads the result after the work that uses it is queued).
fn prepare_indices(adv: &Advanced, device: Device) -> Result<Indices> {
    let nb: usize = adv.index_shape.iter().product();
    let on_device = adv
        .indices
        .iter()
        .any(|a| matches!(a, IndexArray::Device { .. }));
    if !on_device {
        let mut flat: Vec<i64> = Vec::with_capacity(adv.indices.len() * nb);
        for a in &adv.indices {
            flat.extend_from_slice(a.host().expect("host arrays"));
        }
        if flat.is_empty() {
            flat.push(0);
        }
        return Ok(Indices {
            idx: Storage::upload(&flat, device)?,
            bad: None,
        });
    }
    let total = (adv.indices.len() * nb).max(1);
    let mut idx = if adv.indices.iter().all(|a| a.host().is_none()) {
        Storage::empty(total, DType::I64, device)?
    } else {
        let mut flat = vec![0i64; total];
        for (a, arr) in adv.indices.iter().enumerate() {
            if let Some(h) = arr.host() {
                flat[a * nb..(a + 1) * nb].copy_from_slice(h);
            }
        }
        Storage::upload(&flat, device)?
    };
    let mut bad = Storage::full::<i64>(adv.indices.len(), -1, device)?;
    for (a, arr) in adv.indices.iter().enumerate() {
        let IndexArray::Device { index, size, dim } = arr else {
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
        match layout_desc(&index.view) {
            Ok(layout) => idx.index_normalise(a * nb, nb, src, &layout, *size, &mut bad, a)?,
            Err(_) => {
                // An index tensor of more than MAX_INDEX_DIMS dimensions (rare): its values
                // read on the host through its layout, checked there, and normalised on the
                // device as one dense array (normalising normalised values changes nothing).
                let values = wide_index_values(index)?;
                let s = *size as i64;
                if let Some(&v) = values.iter().find(|&&v| {
                    let w = if v < 0 { v + s } else { v };
                    w < 0 || w >= s
                }) {
                    return Err(Error::IndexOutOfRange {
                        dim: *dim,
                        index: v,
                        size: *size,
                    });
                }
                let dense = Storage::upload(&values, device)?;
                let layout = Strided::new(&[nb], &[1], 0).expect("one dimension");
                idx.index_normalise(a * nb, nb, &dense, &layout, *size, &mut bad, a)?;
            }
        }
    }
    Ok(Indices {
        idx,
        bad: Some(bad),
    })
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
fn check_bad(adv: &Advanced, ix: &Indices) -> Result<()> {
    let Some(bad) = &ix.bad else { return Ok(()) };
    let words = bad.to_vec::<i64>()?;
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
fn host_indices<'a>(adv: &'a Advanced, ix: &Indices) -> Result<Vec<Cow<'a, [i64]>>> {
    let nb: usize = adv.index_shape.iter().product();
    if ix.bad.is_none() {
        return Ok(adv
            .indices
            .iter()
            .map(|a| Cow::Borrowed(a.host().expect("host arrays")))
            .collect());
    }
    let flat = ix.idx.to_vec::<i64>()?;
    Ok((0..adv.indices.len())
        .map(|a| Cow::Owned(flat[a * nb..(a + 1) * nb].to_vec()))
        .collect())
}

/// Gathers a plan's result from a view on any device.
pub(crate) fn gather(input: &View, p: &IndexPlan) -> Result<View> {
    let adv = p
        .advanced
        .as_ref()
        .expect("a gather plan has an advanced part");
    let src = input.storage();
    check_host_target(src, adv)?;
    let size = src.dtype().size();
    let n: usize = p.result_shape.iter().product();
    if n == 0 {
        // Nothing to read (an empty view's offset need not lie in its storage, so no span of
        // it is taken); device index values are still checked (an out-of-range one is an error).
        if adv.index_shape.iter().product::<usize>() > 0 {
            let ix = prepare_indices(adv, src.device())?;
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
        let f = flat(p, adv, src.device())?;
        // SAFETY: every offset is one of the view (index values checked and normalised),
        // which fits its storage.
        let out = unsafe { src.index_gather(&f.desc, &f.idx, None)? };
        return Ok(View::with_layout(
            Arc::new(out),
            Layout::contiguous(&p.result_shape),
        )?);
    };
    let ix = prepare_indices(adv, src.device())?;
    // SAFETY: every index value is in range: checked by planning (host arrays) or normalised
    // on the device (device arrays: a bad value reads as 0 and is reported below), and the
    // view fits its storage.
    let out = unsafe { src.index_gather(&d, &ix.idx, rows.as_ref())? };
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
    let n: usize = p.result_shape.iter().product();
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
    let n: usize = shape.iter().product();
    if nrows > 0 && size == 0 {
        return Err(first_out_of_range(&stored, 0, 0, false));
    }
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

/// The index tuple of position `b` packed for hashing: the value itself for one index array.
fn tuple_key(indices: &[Cow<'_, [i64]>], b: usize) -> smallvec::SmallVec<[i64; 2]> {
    indices.iter().map(|ix| ix[b]).collect()
}

/// The index tuples' keys (row-major over `sizes`, the sizes of the indexed dimensions) and
/// their count, when a table of one entry per key is small next to the positions (at most
/// [`MAX_TABLE_KEYS`] or four per position); `None` otherwise (the tuples are hashed). The
/// values are normalised (in range), else `None` too.
fn table_keys(
    indices: &[Cow<'_, [i64]>],
    sizes: &[usize],
    nb: usize,
) -> Option<(Vec<usize>, usize)> {
    let mut count = 1usize;
    let mut mul = vec![0usize; sizes.len()];
    for a in (0..sizes.len()).rev() {
        mul[a] = count;
        count = count.checked_mul(sizes[a])?;
    }
    if count > MAX_TABLE_KEYS.max(nb.saturating_mul(4)) {
        return None;
    }
    let mut keys = Vec::with_capacity(nb);
    for b in 0..nb {
        let mut key = 0usize;
        for (ix, (&m, &size)) in indices.iter().zip(mul.iter().zip(sizes)) {
            let v = usize::try_from(ix[b]).ok().filter(|&v| v < size)?;
            key += v * m;
        }
        keys.push(key);
    }
    Some((keys, count))
}

/// Most keys a host key table holds regardless of the number of positions.
const MAX_TABLE_KEYS: usize = 1 << 16;

/// Marks the index positions whose tuple repeats at a later position (1: skip it, a later
/// position writes the same elements; the last one wins). `sizes`: the indexed dimensions'.
fn dead_positions(indices: &[Cow<'_, [i64]>], sizes: &[usize], nb: usize) -> Vec<u8> {
    let mut dead = vec![0u8; nb];
    if let Some((keys, count)) = table_keys(indices, sizes, nb) {
        let mut last = vec![usize::MAX; count];
        for (b, &k) in keys.iter().enumerate() {
            last[k] = b;
        }
        for (b, (d, &k)) in dead.iter_mut().zip(&keys).enumerate() {
            *d = u8::from(last[k] != b);
        }
    } else if let [only] = indices {
        let mut seen = std::collections::HashSet::with_capacity(nb);
        for b in (0..nb).rev() {
            dead[b] = u8::from(!seen.insert(only[b]));
        }
    } else {
        let mut seen = std::collections::HashSet::with_capacity(nb);
        for b in (0..nb).rev() {
            dead[b] = u8::from(!seen.insert(tuple_key(indices, b)));
        }
    }
    dead
}

/// The accumulate groups of equal index tuples, for `Storage::index_scatter_add`: `dead` (1
/// for positions that are not their group's representative, the group's last position), and
/// for each representative `b` its members (positions in order) `members[start[b] ..
/// start[b] + len[b]]`.
struct Groups {
    dead: Vec<u8>,
    start: Vec<i64>,
    len: Vec<i64>,
    members: Vec<i64>,
}

/// The [`Groups`] of the index tuples: by a counting sort over the keys when a key table is
/// small ([`table_keys`]), else by hashing the tuples.
fn groups(indices: &[Cow<'_, [i64]>], sizes: &[usize], nb: usize) -> Groups {
    let mut g = Groups {
        dead: vec![1u8; nb],
        start: vec![0i64; nb],
        len: vec![0i64; nb],
        members: Vec::with_capacity(nb),
    };
    if let Some((keys, count)) = table_keys(indices, sizes, nb) {
        // Where each key's members start, then the positions placed in order.
        let mut at = vec![0usize; count + 1];
        for &k in &keys {
            at[k + 1] += 1;
        }
        for k in 0..count {
            at[k + 1] += at[k];
        }
        let mut last = vec![0usize; count];
        g.members.resize(nb, 0);
        let mut next = at.clone();
        for (b, &k) in keys.iter().enumerate() {
            g.members[next[k]] = b as i64;
            next[k] += 1;
            last[k] = b;
        }
        for k in 0..count {
            let n = at[k + 1] - at[k];
            if n > 0 {
                let rep = last[k];
                g.dead[rep] = 0;
                g.start[rep] = at[k] as i64;
                g.len[rep] = n as i64;
            }
        }
        return g;
    }
    let mut by_tuple: HashMap<smallvec::SmallVec<[i64; 2]>, Vec<usize>> = HashMap::new();
    for b in 0..nb {
        by_tuple.entry(tuple_key(indices, b)).or_default().push(b);
    }
    for positions in by_tuple.values() {
        let rep = *positions.last().expect("groups are non-empty");
        g.dead[rep] = 0;
        g.start[rep] = g.members.len() as i64;
        g.len[rep] = positions.len() as i64;
        g.members.extend(positions.iter().map(|&b| b as i64));
    }
    g
}

/// [`Groups`] on `device`, for `Storage::index_scatter_add`.
fn upload_groups(g: &Groups, device: Device) -> Result<[Storage; 4]> {
    // A storage of at least one element each (an empty upload is still a valid operand).
    fn up<T: genesis_storage::WithDType + Default>(v: &[T], device: Device) -> Result<Storage> {
        Ok(if v.is_empty() {
            Storage::upload(&[T::default()], device)?
        } else {
            Storage::upload(v, device)?
        })
    }
    Ok([
        up(&g.dead, device)?,
        up(&g.start, device)?,
        up(&g.len, device)?,
        up(&g.members, device)?,
    ])
}

/// `dst[k] += values[k]` for every element of `dst` (`values` of its dtype and device, at
/// least as long), as the indexing kernels add (integers wrap, half types round once from f32,
/// bool is a logical or), for every dtype: one scatter-add through a descriptor of no index
/// arrays (one index position, whose group is itself) over the dense elements.
pub(crate) fn add_in_place(dst: &mut Storage, values: &Storage) -> Result<()> {
    let n = dst.len();
    if n == 0 {
        return Ok(());
    }
    let mut desc = IndexDesc {
        res_shape: [1; MAX_INDEX_DIMS],
        res_stride: [0; MAX_INDEX_DIMS],
        adv_stride: [0; MAX_INDEX_DIMS],
        base: 0,
        nb: 1,
        rank: 1,
        pos: 0,
        k: 0,
        n_adv: 0,
    };
    desc.res_shape[0] = n as i64;
    desc.res_stride[0] = 1;
    let dev = dst.device();
    let idx = Storage::zeros(1, DType::I64, dev)?;
    let one = Groups {
        dead: vec![0],
        start: vec![0],
        len: vec![1],
        members: vec![0],
    };
    let [dead, st, ln, mb] = upload_groups(&one, dev)?;
    // SAFETY: no index values: the offsets are 0..n, inside `dst`; the one position is its
    // group's only member.
    unsafe { dst.index_scatter_add(values, &desc, &idx, [&dead, &st, &ln, &mb])? };
    Ok(())
}

/// Writes dense `values` (result-shaped, same device) through an advanced plan.
pub(crate) fn scatter(
    target: &mut Storage,
    p: &IndexPlan,
    values: &Storage,
    accumulate: bool,
) -> Result<()> {
    let adv = p
        .advanced
        .as_ref()
        .expect("a scatter plan has an advanced part");
    check_host_target(target, adv)?;
    let n: usize = p.result_shape.iter().product();
    if n == 0 {
        return Ok(());
    }
    let Some(d) = desc(p, adv) else {
        return scatter_flat(target, p, adv, values, accumulate);
    };
    let dev = target.device();
    let nb: usize = adv.index_shape.iter().product();
    let ix = prepare_indices(adv, dev)?;
    let idx = &ix.idx;
    // Duplicate tuples: on the device when the arrays are there and their keys are few enough;
    // else (accumulate, or many keys) on the host, after checking the device arrays.
    let keys = ix
        .bad
        .as_ref()
        .filter(|_| !accumulate)
        .and_then(|bad| device_keys(p, adv).map(|k| (k, bad)));
    let size = target.dtype().size();
    if let Some(((keys, nkeys), bad)) = keys {
        let mut winner = Storage::zeros(nkeys.max(1), DType::I64, dev)?;
        let mut dead = Storage::empty(nb.max(1), DType::U8, dev)?;
        // SAFETY: `idx` holds the normalised arrays (bad values as 0: in range), so every key
        // lies in `winner`.
        unsafe { idx.index_dead_positions(&keys, &mut winner, bad, &mut dead, nb)? };
        // SAFETY: as in `gather`; live positions have distinct index tuples, so they write
        // distinct offsets.
        unsafe { target.index_scatter(values, &d, idx, &dead, rows16(p, adv, size).as_ref())? };
        // With a bad device index every position was dead: nothing was written.
        return check_bad(adv, &ix);
    }
    check_bad(adv, &ix)?;
    let host = host_indices(adv, &ix)?;
    let sizes: Vec<usize> = adv.dims.iter().map(|&d| p.view.shape()[d]).collect();
    if accumulate {
        let [dead, st, ln, mb] = upload_groups(&groups(&host, &sizes, nb), dev)?;
        // SAFETY: as in `gather`; only group representatives write, each to its own offsets.
        unsafe { target.index_scatter_add(values, &d, idx, [&dead, &st, &ln, &mb])? };
    } else {
        let dead = Storage::upload(&dead_positions(&host, &sizes, nb), dev)?;
        // SAFETY: as in `gather`; live positions have distinct index tuples, so they write
        // distinct offsets.
        unsafe { target.index_scatter(values, &d, idx, &dead, rows16(p, adv, size).as_ref())? };
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
    let dev = target.device();
    let Flat { desc, idx, offsets } = flat(p, adv, dev)?;
    let n = offsets.len();
    let one = [Cow::Owned(offsets)];
    let sizes = [target.len()];
    if accumulate {
        let [dead, st, ln, mb] = upload_groups(&groups(&one, &sizes, n), dev)?;
        // SAFETY: every offset is one of the view (index values checked and normalised), which
        // fits its storage; only group representatives write, each its own offset.
        unsafe { target.index_scatter_add(values, &desc, &idx, [&dead, &st, &ln, &mb])? };
    } else {
        let dead = Storage::upload(&dead_positions(&one, &sizes, n), dev)?;
        // SAFETY: as above; live positions have distinct offsets.
        unsafe { target.index_scatter(values, &desc, &idx, &dead, None)? };
    }
    Ok(())
}

/// Most keys (index tuples) the device deduplicates with a table of one word per key.
const MAX_DEVICE_KEYS: usize = 1 << 22;

/// The keys of the plan's index tuples (row-major over the indexed sizes) and their count,
/// when a table of them is small enough for the device.
fn device_keys(p: &IndexPlan, adv: &Advanced) -> Option<(Keys, usize)> {
    let nb: usize = adv.index_shape.iter().product();
    let mut keys = Keys {
        mul: [0; MAX_INDEX_DIMS],
        n_adv: adv.dims.len() as i32,
    };
    let mut count = 1usize;
    for (a, &dim) in adv.dims.iter().enumerate().rev() {
        keys.mul[a] = count as i64;
        count = count.checked_mul(p.view.shape()[dim])?;
    }
    (count <= MAX_DEVICE_KEYS.max(nb.saturating_mul(4))).then_some((keys, count))
}

/// Turns the masks on a CUDA device among `items` into coordinates there ([`MaskCoords`]):
/// a count (read by the host: one synchronisation), one pass writing the set positions in
/// order, and for a mask of several dimensions one pass splitting them into coordinates.
pub(crate) fn resolve_mask(mask: &StoredIndex) -> Result<IndexItem> {
    let v = &mask.view;
    let shape = v.layout().shape().to_vec();
    let len: usize = shape.iter().product();
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
