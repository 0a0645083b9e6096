//! The CUDA executor: advanced-indexing kernels driven by a plan.

use std::collections::HashMap;
use std::sync::Arc;

use genesis_kernels::index::{Groups, IndexDesc, MAX_INDEX_DIMS};
use genesis_storage::{Device, Layout, Storage, View};

use crate::plan::{Advanced, IndexPlan};
use crate::{Error, Result};

fn desc(p: &IndexPlan, adv: &Advanced) -> Result<IndexDesc> {
    let rank = p.result_shape.len();
    if rank > MAX_INDEX_DIMS || adv.dims.len() > MAX_INDEX_DIMS {
        return Err(Error::InvalidIndex {
            reason: format!("more than {MAX_INDEX_DIMS} result dimensions or index arrays"),
        });
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
    Ok(d)
}

/// The row fast path applies: one 1-D index array over the view's leading dimension, whose
/// remaining dimensions are contiguous rows, everything a multiple of 16 bytes.
fn rows16(p: &IndexPlan, adv: &Advanced, size: usize) -> Option<genesis_kernels::index::Rows16> {
    if adv.dims != [0] || adv.index_shape.len() != 1 || adv.position != 0 {
        return None;
    }
    let (shape, strides) = (p.view.shape(), p.view.strides());
    let row = Layout::contiguous(&shape[1..]);
    let rest_contiguous = shape[1..]
        .iter()
        .zip(&strides[1..])
        .zip(row.strides())
        .all(|((&d, &s), &c)| d == 1 || s == c);
    let row_bytes = row.numel() * size;
    let (base_bytes, stride_bytes) = (p.view.offset() * size, strides[0].max(0) as usize * size);
    let ok = rest_contiguous
        && strides[0] > 0
        && row_bytes.is_multiple_of(16)
        && base_bytes.is_multiple_of(16)
        && stride_bytes.is_multiple_of(16);
    ok.then(|| genesis_kernels::index::Rows16 {
        nrows: adv.index_shape[0],
        row_units: row_bytes / 16,
        base_units: base_bytes / 16,
        stride_units: stride_bytes / 16,
    })
}

fn ordinal(s: &Storage) -> Result<usize> {
    match s.device() {
        Device::Cuda(i) => Ok(i),
        d => Err(Error::UnsupportedDevice {
            op: "gpu indexing",
            device: d,
        }),
    }
}

/// The stream to queue work on: this thread's current stream of `device`, or the legacy one.
fn queue(device: usize) -> Result<genesis_storage::cuda::Queue> {
    let pool = genesis_storage::cuda::device_pool(device)?;
    Ok(genesis_storage::cuda::queue_on(pool.context()))
}

/// The normalised index arrays, concatenated, on the device.
fn upload_indices(adv: &Advanced, device: Device) -> Result<Storage> {
    let flat: Vec<i64> = adv.indices.iter().flatten().copied().collect();
    let flat = if flat.is_empty() { vec![0] } else { flat };
    Ok(Storage::upload(&flat, device)?)
}

/// Gathers a plan's result from a CUDA view.
pub(crate) fn gather(input: &View, p: &IndexPlan) -> Result<View> {
    let adv = p
        .advanced
        .as_ref()
        .expect("a gather plan has an advanced part");
    let src = input.storage();
    let device = ordinal(src)?;
    let n: usize = p.result_shape.iter().product();
    let d = desc(p, adv)?;
    let idx = upload_indices(adv, src.device())?;
    let out = Storage::empty(n, src.dtype(), src.device())?;
    let stream = queue(device)?;
    let (sp, op, ip) = (
        src.device_ptr().unwrap_or(0),
        out.device_ptr().unwrap_or(0),
        idx.device_ptr().unwrap_or(0),
    );
    let size = src.dtype().size();
    if let Some(rows) = rows16(p, adv, size).filter(|_| sp % 16 == 0 && op % 16 == 0) {
        // SAFETY: planning checked every index against the view and the view against the
        // storage; the rows are 16-byte aligned; `out` holds the result's rows; all live until
        // the stream has run the kernel (the pool reuses memory in stream order).
        unsafe { genesis_kernels::index::gather_rows16(&stream, sp, op, ip, &rows)? };
    } else {
        // SAFETY: planning checked every index against the view, and the view against the
        // storage; `out` holds n elements; all three live until the stream has run the kernel
        // (the pool reuses memory in stream order).
        unsafe { genesis_kernels::index::gather(&stream, size, sp, op, n, &d, ip)? };
    }
    Ok(View::with_layout(
        Arc::new(out),
        Layout::contiguous(&p.result_shape),
    )?)
}

/// The index tuple of position `b` packed for hashing: the value itself for one index array.
fn tuple_key(adv: &Advanced, b: usize) -> smallvec::SmallVec<[i64; 2]> {
    adv.indices.iter().map(|ix| ix[b]).collect()
}

/// Marks the index positions whose tuple repeats at a later position (1: skip it, a later
/// position writes the same elements; the last one wins).
fn dead_positions(adv: &Advanced) -> Vec<u8> {
    let nb: usize = adv.index_shape.iter().product();
    let mut dead = vec![0u8; nb];
    if let [only] = adv.indices.as_slice() {
        let mut seen = std::collections::HashSet::with_capacity(nb);
        for b in (0..nb).rev() {
            dead[b] = u8::from(!seen.insert(only[b]));
        }
    } else {
        let mut seen = std::collections::HashSet::with_capacity(nb);
        for b in (0..nb).rev() {
            dead[b] = u8::from(!seen.insert(tuple_key(adv, b)));
        }
    }
    dead
}

/// Which index positions repeat an index tuple of a later position, and the groups of equal
/// tuples in order.
fn groups(adv: &Advanced) -> (Vec<u8>, Vec<i64>, Vec<i64>, Vec<i64>) {
    let nb: usize = adv.index_shape.iter().product();
    let mut by_tuple: HashMap<smallvec::SmallVec<[i64; 2]>, Vec<usize>> = HashMap::new();
    for b in 0..nb {
        by_tuple.entry(tuple_key(adv, b)).or_default().push(b);
    }
    let mut dead = vec![1u8; nb];
    let (mut start, mut len, mut members) =
        (vec![0i64; nb], vec![0i64; nb], Vec::with_capacity(nb));
    for positions in by_tuple.values() {
        let rep = *positions.last().expect("groups are non-empty");
        dead[rep] = 0;
        start[rep] = members.len() as i64;
        len[rep] = positions.len() as i64;
        members.extend(positions.iter().map(|&b| b as i64));
    }
    (dead, start, len, members)
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
    let device = ordinal(target)?;
    let n: usize = p.result_shape.iter().product();
    if n == 0 {
        return Ok(());
    }
    let d = desc(p, adv)?;
    let dev = target.device();
    let idx = upload_indices(adv, dev)?;
    let (dead, start, len, members) = if accumulate {
        groups(adv)
    } else {
        (dead_positions(adv), Vec::new(), Vec::new(), Vec::new())
    };
    let dead_s = Storage::upload(&dead, dev)?;
    let stream = queue(device)?;
    let (tp, vp, ip, dp) = (
        target.device_ptr().unwrap_or(0),
        values.device_ptr().unwrap_or(0),
        idx.device_ptr().unwrap_or(0),
        dead_s.device_ptr().unwrap_or(0),
    );
    let size = target.dtype().size();
    if accumulate {
        let (st, ln, mb) = (
            Storage::upload(&start, dev)?,
            Storage::upload(&len, dev)?,
            Storage::upload(&members, dev)?,
        );
        let g = Groups {
            dead: dp,
            start: st.device_ptr().unwrap_or(0),
            len: ln.device_ptr().unwrap_or(0),
            members: mb.device_ptr().unwrap_or(0),
        };
        let scalar = genesis_storage::scalar(target.dtype());
        // SAFETY: as in `gather`, with `values` holding n elements and the groups nb entries;
        // only group representatives write, each to its own offsets.
        unsafe { genesis_kernels::index::scatter_add(&stream, scalar, tp, vp, n, &d, ip, g)? };
    } else if let Some(rows) = rows16(p, adv, size) {
        // SAFETY: as in `gather`, on 16-byte aligned rows; live rows are distinct.
        unsafe { genesis_kernels::index::scatter_rows16(&stream, tp, vp, ip, dp, &rows)? };
    } else {
        // SAFETY: as in `gather`; live positions have distinct index tuples, so they write
        // distinct offsets.
        unsafe { genesis_kernels::index::scatter(&stream, size, tp, vp, n, &d, ip, dp)? };
    }
    Ok(())
}
