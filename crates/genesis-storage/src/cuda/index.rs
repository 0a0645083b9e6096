//! The CUDA backend's advanced indexing: the `index.cu` kernels on spans of device memory, for
//! the index methods of [`Compute`](crate::compute::Compute) (`ops.rs` calls these; the
//! operands were checked by `Storage`).
//!
//! The gathers and scatters read and write at offsets computed from index values on the
//! device: they are `unsafe`, with the promise that the values are in range, which
//! `Storage`'s safe methods keep through `IndexValues` and their descriptor checks.

use genesis_kernels::index::{self, Groups, IndexDesc, Keys, RawIndex, Rows16, Strided};

use super::CudaMem;
use crate::{DType, Error, Result};

/// [`Compute::index_gather`](crate::compute::Compute::index_gather) on CUDA memory.
///
/// # Safety
///
/// As the trait method's.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gather(
    src: &CudaMem,
    elem: usize,
    len: usize,
    desc: &IndexDesc,
    idx: &CudaMem,
    rows: Option<&Rows16>,
    out: &mut CudaMem,
    n: usize,
) -> Result<()> {
    let stream = src.queue();
    let s = src.span::<u8>(len.saturating_mul(elem))?;
    let ip = idx.span::<i64>(desc.index_len())?;
    let dst = out.span_mut::<u8>(n.saturating_mul(elem))?;
    match rows.filter(|_| dst.is_aligned_to(16) && s.is_aligned_to(16)) {
        // SAFETY: the caller vouches for the index values; the rows are 16-byte aligned.
        Some(r) => unsafe { index::gather_rows16(&stream, s, dst, ip, r)? },
        // SAFETY: as above.
        None => unsafe { index::gather(&stream, elem, s, dst, desc, ip)? },
    }
    Ok(())
}

/// [`Compute::index_scatter`](crate::compute::Compute::index_scatter) on CUDA memory.
///
/// # Safety
///
/// As the trait method's.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scatter(
    dst: &mut CudaMem,
    elem: usize,
    len: usize,
    values: &CudaMem,
    desc: &IndexDesc,
    idx: &CudaMem,
    dead: &CudaMem,
    rows: Option<&Rows16>,
    n: usize,
) -> Result<()> {
    let vals = values.span::<u8>(n.saturating_mul(elem))?;
    let ip = idx.span::<i64>(desc.index_len())?;
    let dp = dead.span::<u8>(desc.nb.max(0) as usize)?;
    let stream = dst.queue();
    let d = dst.span_mut::<u8>(len.saturating_mul(elem))?;
    match rows.filter(|_| d.is_aligned_to(16) && vals.is_aligned_to(16)) {
        // SAFETY: the caller vouches for the index values and distinct live rows; the rows
        // are 16-byte aligned.
        Some(r) => unsafe { index::scatter_rows16(&stream, d, vals, ip, dp, r)? },
        // SAFETY: as above, element by element.
        None => unsafe { index::scatter(&stream, elem, d, vals, desc, ip, dp)? },
    }
    Ok(())
}

/// [`Compute::index_scatter_add`](crate::compute::Compute::index_scatter_add) on CUDA memory.
///
/// # Safety
///
/// As the trait method's.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scatter_add(
    dst: &mut CudaMem,
    dtype: DType,
    len: usize,
    values: &CudaMem,
    desc: &IndexDesc,
    idx: &CudaMem,
    groups: [&CudaMem; 4],
    members: usize,
    n: usize,
) -> Result<()> {
    let nb = desc.nb.max(0) as usize;
    let g = Groups {
        dead: groups[0].span::<u8>(nb)?,
        start: groups[1].span::<i64>(nb)?,
        len: groups[2].span::<i64>(nb)?,
        members: groups[3].span::<i64>(members)?,
    };
    let es = dtype.size();
    let vals = values.span::<u8>(n.saturating_mul(es))?;
    let ip = idx.span::<i64>(desc.index_len())?;
    let stream = dst.queue();
    let d = dst.span_mut::<u8>(len.saturating_mul(es))?;
    // SAFETY: the caller vouches for the index values and the groups.
    unsafe { index::scatter_add(&stream, dtype, d, vals, desc, ip, g) }?;
    Ok(())
}

/// [`Compute::index_normalise`](crate::compute::Compute::index_normalise) on CUDA memory.
#[allow(clippy::too_many_arguments)]
pub(super) fn normalise(
    out: &mut CudaMem,
    at: usize,
    nb: usize,
    src: &CudaMem,
    i32: bool,
    layout: &Strided,
    size: usize,
    bad: &mut CudaMem,
    bad_at: usize,
) -> Result<()> {
    let vsize = if i32 { 4 } else { 8 };
    let values = src.span::<u8>(layout.reach().saturating_mul(vsize))?;
    let bad = bad.range_mut::<u64>(bad_at, 1)?;
    let stream = out.queue();
    let out = out.range_mut::<i64>(at, nb)?;
    index::normalise(&stream, i32, values, layout, size, out, bad)?;
    Ok(())
}

/// [`Compute::index_dead_positions`](crate::compute::Compute::index_dead_positions) on CUDA
/// memory.
///
/// # Safety
///
/// As the trait method's.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn dead_positions(
    idx: &CudaMem,
    nb: usize,
    keys: &Keys,
    winner: &mut CudaMem,
    nwinner: usize,
    bad: &CudaMem,
    nbad: usize,
    dead: &mut CudaMem,
) -> Result<()> {
    let n_adv = keys.n_adv.max(0) as usize;
    let ip = idx.span::<i64>(n_adv.saturating_mul(nb))?;
    let bad = bad.span::<u64>(nbad)?;
    let stream = idx.queue();
    let winner = winner.span_mut::<u64>(nwinner)?;
    let dead = dead.span_mut::<u8>(nb)?;
    // SAFETY: the caller vouches that every key lies in `winner`.
    unsafe { index::dead_positions(&stream, ip, keys, winner, bad, dead) }?;
    Ok(())
}

/// [`Compute::index_unravel`](crate::compute::Compute::index_unravel) on CUDA memory.
pub(super) fn unravel(
    lin: &CudaMem,
    n: usize,
    shape: &Strided,
    rows: bool,
    out: &mut CudaMem,
) -> Result<()> {
    let rank = shape.rank.max(0) as usize;
    let l = lin.span::<i64>(n)?;
    let stream = lin.queue();
    let dst = out.span_mut::<i64>(rank.saturating_mul(n))?;
    index::unravel(&stream, l, shape, rows, dst)?;
    Ok(())
}

/// [`Compute::index_gather_rows_checked`](crate::compute::Compute::index_gather_rows_checked)
/// on CUDA memory: one kernel reads the index values as they are, wraps negative ones when
/// `wrap`, checks each against `size` and copies the rows of the good ones.
///
/// For short arrays the kernel's first block checks them all before copying and posts its
/// verdict to page-locked host memory: the host waits for that verdict (microseconds after
/// the kernel starts) rather than for the copy, and returns while the copy runs. Otherwise,
/// and on a bad value, the host synchronises the stream and reads the flag.
#[allow(clippy::too_many_arguments)]
pub(super) fn gather_rows_checked(
    src: &CudaMem,
    rows: &Rows16,
    values: &CudaMem,
    i32: bool,
    offset: usize,
    stride: usize,
    size: usize,
    wrap: bool,
    out: &mut CudaMem,
) -> Result<bool> {
    let op = "index gather_rows_checked";
    let es = if i32 { 4 } else { 8 };
    // The values read: the first at `offset`, the last `(nrows - 1) * stride` after it.
    let span = match rows.nrows {
        0 => 0,
        r => (r - 1) * stride + 1,
    };
    let raw = RawIndex {
        values: values.range::<u8>(offset * es, span * es)?,
        i32,
        stride: stride as i64,
        size,
        wrap,
    };
    let row_bytes = rows.nrows * rows.row_units * 16;
    let src_bytes = if size == 0 {
        0
    } else {
        (rows.base_units + (size - 1) * rows.stride_units + rows.row_units) * 16
    };
    let flag = crate::Storage::zeros_pinned(2, DType::I32)?;
    let fp = flag.host_bytes_for(op)?.as_ptr().cast::<i32>();
    let s = src.span::<u8>(src_bytes)?;
    let stream = src.queue();
    let dst = out.span_mut::<u8>(row_bytes)?;
    if rows.nrows > 0 && !(s.is_aligned_to(16) && dst.is_aligned_to(16)) {
        return Err(Error::Kernel(genesis_kernels::Error::Unsupported {
            op,
            reason: "rows not 16-byte aligned".into(),
        }));
    }
    // SAFETY: the kernel checks every value against `size` before reading a row, and `s`
    // holds `size` rows of the layout (checked by its span); `flag` is 8 bytes of page-locked
    // host memory, which the device addresses by the same pointer (unified addressing); it
    // lives until the synchronisation below, or until the early verdict says no block writes
    // it again.
    let early = unsafe { index::gather_rows16_checked(&stream, s, dst, &raw, fp as u64, rows)? };
    // SAFETY: `fp` points at the pinned storage's two int32, alive for this call.
    let clean = early && unsafe { early_verdict_clean(fp) };
    if !clean {
        stream.synchronize()?;
        // SAFETY: the kernel has completed (the stream is synchronised); `fp` points at the
        // pinned storage's 4 bytes, which the device may have written behind Rust's back.
        let bad = unsafe { fp.read_volatile() };
        if bad != 0 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Waits (spinning, at most [`VERDICT_SPIN`]) for the early verdict of `gather_rows16_checked`
/// at `fp[1]`; true when it came and says every index is in range. False otherwise (a bad
/// index, or no verdict in time because earlier work holds the stream): the caller then
/// synchronises the stream and reads `fp[0]`.
///
/// # Safety
///
/// `fp` must point at two int32 of page-locked host memory that a queued kernel may write.
unsafe fn early_verdict_clean(fp: *const i32) -> bool {
    let start = std::time::Instant::now();
    let mut spins = 0u32;
    loop {
        // SAFETY: as the caller vouches; the device writes the verdict behind Rust's back.
        if unsafe { fp.add(1).read_volatile() } != 0 {
            // The device stored fp[0] before fp[1] behind a system-wide fence.
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            // SAFETY: as above.
            return unsafe { fp.read_volatile() } == 0;
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(64) && start.elapsed() > VERDICT_SPIN {
            return false;
        }
        std::hint::spin_loop();
    }
}

/// How long the host spins for an early verdict before it synchronises the stream instead.
const VERDICT_SPIN: std::time::Duration = std::time::Duration::from_micros(200);
