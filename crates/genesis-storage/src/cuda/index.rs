//! Advanced-indexing execution on CUDA storages: the `index.cu` kernels on spans of them, for
//! the executor of `genesis-index` (which plans and calls these; it launches nothing itself).
//!
//! The gathers and scatters read and write at offsets computed from index values on the
//! device: they are `unsafe`, with the promise that the values are in range (normalised by
//! [`Storage::index_normalise`], or checked when the plan was made).

use genesis_kernels::index::{self, Groups, IndexDesc, Keys, RawIndex, Rows16, Strided};

use crate::share::ReadGuard;
use crate::storage::Inner;
use crate::{DType, Error, Result, Storage};

use super::CudaMem;

/// The CUDA memory of `s` (an error for other kinds of storage), read-locked.
fn cuda<'a>(op: &'static str, s: &'a Storage) -> Result<ReadGuard<'a, Inner>> {
    let g = s.read(op)?;
    match &*g {
        Inner::Cuda(_) => Ok(g),
        _ => Err(Error::NotOnDevice {
            op,
            device: s.device(),
        }),
    }
}

/// The queue of the CUDA memory of `s`.
fn queue(op: &'static str, s: &Storage) -> Result<super::Queue> {
    match &*cuda(op, s)? {
        Inner::Cuda(m) => Ok(m.queue()),
        _ => unreachable!("checked by `cuda`"),
    }
}

/// [`cuda`], writable.
fn cuda_mut<'a>(op: &'static str, s: &'a mut Storage) -> Result<&'a mut CudaMem> {
    let device = s.device();
    match s.inner.get_mut() {
        Inner::Cuda(m) => Ok(m),
        _ => Err(Error::NotOnDevice { op, device }),
    }
}

/// The whole memory of `s` as elements of `T`.
fn all<'a, T>(op: &'static str, s: &'a Storage) -> Result<genesis_cuda::DeviceSpan<'a, T>> {
    s.cuda_span_of::<T>(op, s.nbytes() / size_of::<T>())
}

impl Storage {
    /// Gathers the `n` result elements that `desc` and the `n_adv * nb` normalised index
    /// values in `idx` (i64) map from this storage into a new one: row by row in 16-byte units
    /// when `rows` is given (and the output allows it), else element by element.
    ///
    /// # Safety
    ///
    /// Every index value is in range for its dimension, so that every offset read lies in this
    /// storage.
    pub unsafe fn index_gather(
        &self,
        desc: &IndexDesc,
        n: usize,
        idx: &Storage,
        rows: Option<&Rows16>,
    ) -> Result<Storage> {
        let op = "index gather";
        let mut out = Storage::empty(n, self.dtype(), self.device())?;
        let size = self.dtype().size();
        let (src, ip) = (all::<u8>(op, self)?, all::<i64>(op, idx)?);
        let stream = queue(op, self)?;
        let dst = cuda_mut(op, &mut out)?.span_mut::<u8>(n * size)?;
        match rows.filter(|_| dst.is_aligned_to(16) && src.is_aligned_to(16)) {
            // SAFETY: the caller vouches for the index values; the rows are 16-byte aligned.
            Some(r) => unsafe { index::gather_rows16(&stream, src, dst, ip, r)? },
            // SAFETY: as above.
            None => unsafe { index::gather(&stream, size, src, dst, desc, ip)? },
        }
        Ok(out)
    }

    /// Writes the result-shaped `values` through `desc` and the normalised index values in
    /// `idx` into this storage, skipping the positions marked in `dead` (one byte each):
    /// row by row when `rows` is given, else element by element.
    ///
    /// # Safety
    ///
    /// As [`Storage::index_gather`], for the offsets written; the live positions write distinct
    /// offsets.
    pub unsafe fn index_scatter(
        &mut self,
        values: &Storage,
        desc: &IndexDesc,
        idx: &Storage,
        dead: &Storage,
        rows: Option<&Rows16>,
    ) -> Result<()> {
        let op = "index scatter";
        let size = self.dtype().size();
        let (vals, ip, dp) = (
            all::<u8>(op, values)?,
            all::<i64>(op, idx)?,
            all::<u8>(op, dead)?,
        );
        let nbytes = self.nbytes();
        let mem = cuda_mut(op, self)?;
        let stream = mem.queue();
        let dst = mem.span_mut::<u8>(nbytes)?;
        match rows {
            // SAFETY: the caller vouches for the index values and distinct live rows.
            Some(r) => unsafe { index::scatter_rows16(&stream, dst, vals, ip, dp, r)? },
            // SAFETY: as above, element by element.
            None => unsafe { index::scatter(&stream, size, dst, vals, desc, ip, dp)? },
        }
        Ok(())
    }

    /// Adds the result-shaped `values` through `desc` and the normalised index values in `idx`
    /// into this storage, each group of equal index tuples summed in order by its
    /// representative: `groups` are `[dead, start, len, members]` (bytes, then i64).
    ///
    /// # Safety
    ///
    /// As [`Storage::index_scatter`], with groups that partition the `nb` positions.
    pub unsafe fn index_scatter_add(
        &mut self,
        values: &Storage,
        desc: &IndexDesc,
        idx: &Storage,
        groups: [&Storage; 4],
    ) -> Result<()> {
        let op = "index scatter_add";
        let dtype = self.dtype();
        let g = Groups {
            dead: all::<u8>(op, groups[0])?,
            start: all::<i64>(op, groups[1])?,
            len: all::<i64>(op, groups[2])?,
            members: all::<i64>(op, groups[3])?,
        };
        let (vals, ip) = (all::<u8>(op, values)?, all::<i64>(op, idx)?);
        let nbytes = self.nbytes();
        let mem = cuda_mut(op, self)?;
        let stream = mem.queue();
        let dst = mem.span_mut::<u8>(nbytes)?;
        // SAFETY: the caller vouches for the index values and the groups.
        unsafe { index::scatter_add(&stream, dtype, dst, vals, desc, ip, g) }?;
        Ok(())
    }

    /// Normalises the index array `src` (int32 or int64, read through `layout`) into `nb`
    /// int64 of this storage from element `at`: negative values wrap, a value outside
    /// `0..size` is written as 0 and the smallest such position lands in word `bad_at` of
    /// `bad` (which the caller set to all ones).
    #[allow(clippy::too_many_arguments)]
    pub fn index_normalise(
        &mut self,
        at: usize,
        nb: usize,
        src: &Storage,
        layout: &Strided,
        size: usize,
        bad: &mut Storage,
        bad_at: usize,
    ) -> Result<()> {
        let op = "index normalise";
        let i32 = src.dtype() == DType::I32;
        let values = all::<u8>(op, src)?;
        let bad_len = bad.len();
        let bad = cuda_mut(op, bad)?
            .span_mut::<u64>(bad_len)?
            .into_slice(bad_at..bad_at + 1)?;
        let len = self.len();
        let mem = cuda_mut(op, self)?;
        let stream = mem.queue();
        let out = mem.span_mut::<i64>(len)?.into_slice(at..at + nb)?;
        index::normalise(&stream, i32, values, layout, size, out, bad)?;
        Ok(())
    }

    /// Marks in `dead` (`nb` bytes) the index positions whose tuple repeats at a later
    /// position, through a table `winner` of one zeroed word per key (`keys` of the normalised
    /// values in this storage); every position is dead when a word of `bad` is set.
    ///
    /// # Safety
    ///
    /// The index values are in range, so that every key lies in `winner`.
    pub unsafe fn index_dead_positions(
        &self,
        keys: &Keys,
        winner: &mut Storage,
        bad: &Storage,
        dead: &mut Storage,
        nb: usize,
    ) -> Result<()> {
        let op = "index dead_positions";
        let (idx, bad) = (all::<i64>(op, self)?, all::<u64>(op, bad)?);
        let stream = queue(op, self)?;
        let wlen = winner.len();
        let winner = cuda_mut(op, winner)?.span_mut::<u64>(wlen)?;
        let dead = cuda_mut(op, dead)?.span_mut::<u8>(nb)?;
        // SAFETY: the caller vouches for the index values.
        unsafe { index::dead_positions(&stream, idx, keys, winner, bad, dead) }?;
        Ok(())
    }

    /// Splits the row-major positions in this storage (i64) over the `rank` dimensions of
    /// `shape` into `out`: coordinate `d` of position `i` at `out[d * n + i]`.
    pub fn index_unravel(&self, shape: &Strided, out: &mut Storage) -> Result<()> {
        let op = "index unravel";
        let lin = all::<i64>(op, self)?;
        let stream = queue(op, self)?;
        let olen = out.len();
        let dst = cuda_mut(op, out)?.span_mut::<i64>(olen)?;
        index::unravel(&stream, lin, shape, dst)?;
        Ok(())
    }

    /// `x[idx]` of whole rows with a raw 1-D device index array: one kernel reads the values
    /// as they are (`values` int32 or int64, from element `offset`, `stride` apart), checks
    /// each against `size` (the source's rows), and copies the rows of the good ones. `None`
    /// when a value is out of range (the result is then incomplete and dropped).
    ///
    /// For short arrays the kernel's first block checks them all before copying and posts its
    /// verdict to page-locked host memory: the host waits for that verdict (microseconds after
    /// the kernel starts) rather than for the copy, and returns while the copy runs. Otherwise,
    /// and on a bad value, the host synchronises the stream and reads the flag.
    pub fn index_gather_rows_checked(
        &self,
        rows: &Rows16,
        values: &Storage,
        (offset, stride): (usize, i64),
        size: usize,
        n: usize,
    ) -> Result<Option<Storage>> {
        let op = "index gather_rows_checked";
        let i32 = values.dtype() == DType::I32;
        let es = if i32 { 4 } else { 8 };
        let raw = RawIndex {
            values: all::<u8>(op, values)?.slice(offset * es..)?,
            i32,
            stride,
            size,
        };
        let mut out = Storage::empty(n, self.dtype(), self.device())?;
        let flag = Storage::zeros_pinned(2, DType::I32)?;
        let fp = flag.host_bytes_for(op)?.as_ptr().cast::<i32>();
        let src = all::<u8>(op, self)?;
        let stream = queue(op, self)?;
        let dst = cuda_mut(op, &mut out)?.span_mut::<u8>(n * self.dtype().size())?;
        if rows.nrows > 0 && !(src.is_aligned_to(16) && dst.is_aligned_to(16)) {
            return Err(Error::Kernel(genesis_kernels::Error::Unsupported {
                op,
                reason: "rows not 16-byte aligned".into(),
            }));
        }
        // SAFETY: the kernel checks every value against `size`, the source's row count, before
        // reading a row; `flag` is 8 bytes of page-locked host memory, which the device
        // addresses by the same pointer (unified addressing); it lives until the
        // synchronisation below, or until the early verdict says no block writes it again.
        let early =
            unsafe { index::gather_rows16_checked(&stream, src, dst, &raw, fp as u64, rows)? };
        // SAFETY: `fp` points at the pinned storage's two int32, alive for this call.
        let clean = early && unsafe { early_verdict_clean(fp) };
        if !clean {
            stream.synchronize()?;
            // SAFETY: the kernel has completed (the stream is synchronised); `fp` points at the
            // pinned storage's 4 bytes, which the device may have written behind Rust's back.
            let bad = unsafe { fp.read_volatile() };
            if bad != 0 {
                return Ok(None);
            }
        }
        Ok(Some(out))
    }
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
