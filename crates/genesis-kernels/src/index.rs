//! The advanced-indexing kernels (`kernels/index.cu`): their descriptors, their launchers on
//! device spans (behind the `cuda` feature) and their CPU twins ([`cpu`]).
//!
//! The gathers and scatters read and write at offsets computed from index values that live on
//! the device, which no host check sees: those launchers are `unsafe`, with the promise that
//! the values are in range (normalised by [`normalise`](cpu::normalise), or checked when the
//! plan was made). Every other extent is checked against the spans. The twins check every
//! offset and return [`Error::IndexOutOfRange`] for one outside their slices.

#[cfg(feature = "cuda")]
use std::ffi::c_void;

#[cfg(feature = "cuda")]
use genesis_cuda::{DeviceSpan, DeviceSpanMut, Kernel, LaunchConfig, Stream};

#[cfg(feature = "cuda")]
use crate::{DType, images};
use crate::{Error, Result};

pub mod cpu;

/// `Err(LengthMismatch)` when `got < need`.
fn at_least(op: &'static str, need: usize, got: usize) -> Result<()> {
    if got < need {
        return Err(Error::LengthMismatch {
            op,
            expected: need,
            got,
        });
    }
    Ok(())
}

impl IndexDesc {
    /// Index values the descriptor reads: `n_adv * nb`.
    pub fn index_len(&self) -> usize {
        (self.n_adv.max(0) as usize).saturating_mul(self.nb.max(0) as usize)
    }

    /// Checks that the descriptor is well formed, and returns its number of result elements:
    /// `rank` and `n_adv` at most [`MAX_INDEX_DIMS`], the index dimensions `pos..pos + k`
    /// inside the result's, sizes not negative, `nb` the product of the index dimensions'
    /// sizes, and the result's element count representable.
    pub fn check(&self) -> Result<usize> {
        let bad = |reason: String| Error::Unsupported {
            op: "index descriptor",
            reason,
        };
        let (rank, pos, k, n_adv) = (self.rank, self.pos, self.k, self.n_adv);
        if !(0..=MAX_INDEX_DIMS as i32).contains(&rank)
            || !(0..=MAX_INDEX_DIMS as i32).contains(&n_adv)
        {
            return Err(bad(format!(
                "rank {rank} or {n_adv} index arrays past {MAX_INDEX_DIMS}"
            )));
        }
        if pos < 0 || k < 0 || pos + k > rank {
            return Err(bad(format!(
                "index dimensions {pos}..{} outside rank {rank}",
                pos + k
            )));
        }
        let shape = &self.res_shape[..rank as usize];
        if shape.iter().any(|&s| s < 0) || self.nb < 0 {
            return Err(bad("negative size".into()));
        }
        let nb = shape[pos as usize..(pos + k) as usize]
            .iter()
            .try_fold(1usize, |a, &s| a.checked_mul(s as usize));
        if nb != Some(self.nb as usize) {
            return Err(bad(format!(
                "nb {} is not the index dimensions' product",
                self.nb
            )));
        }
        shape
            .iter()
            .try_fold(1usize, |a, &s| a.checked_mul(s as usize))
            .ok_or_else(|| bad("result size overflows".into()))
    }
}

/// Most result dimensions, and most index arrays, a kernel handles.
pub const MAX_INDEX_DIMS: usize = 8;

/// How result elements map to source offsets (`GxIndex`): see `kernels/index.cu`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexDesc {
    /// Result shape (first `rank`).
    pub res_shape: [i64; MAX_INDEX_DIMS],
    /// Source stride of each result dimension outside the index dimensions.
    pub res_stride: [i64; MAX_INDEX_DIMS],
    /// Source stride of each indexed dimension.
    pub adv_stride: [i64; MAX_INDEX_DIMS],
    /// Offset of the view's first element.
    pub base: i64,
    /// Number of index positions (product of the broadcast index shape).
    pub nb: i64,
    /// Result rank.
    pub rank: i32,
    /// First result dimension of the index dimensions.
    pub pos: i32,
    /// Number of index dimensions in the result.
    pub k: i32,
    /// Number of index arrays.
    pub n_adv: i32,
}

#[cfg(feature = "cuda")]
fn launch_config(stream: &Stream, n: usize) -> LaunchConfig {
    let cap = u64::from(stream.context().multiprocessors().max(1)) * 16;
    LaunchConfig::linear((n as u64).div_ceil(256).clamp(1, cap) as u32, 256)
}

#[cfg(feature = "cuda")]
fn by_size(prefix: &'static str, elem: usize) -> Result<&'static str> {
    Ok(match (prefix, elem) {
        ("gather", 1) => "index_gather_e1",
        ("gather", 2) => "index_gather_e2",
        ("gather", 4) => "index_gather_e4",
        ("gather", 8) => "index_gather_e8",
        ("scatter", 1) => "index_scatter_e1",
        ("scatter", 2) => "index_scatter_e2",
        ("scatter", 4) => "index_scatter_e4",
        ("scatter", 8) => "index_scatter_e8",
        _ => {
            return Err(Error::Unsupported {
                op: prefix,
                reason: format!("element size {elem}"),
            });
        }
    })
}

/// Queues `dst[i] = src[offset(i)]` for the `dst.len() / elem` result elements (`src` and
/// `dst` as bytes, `idx` the `n_adv * nb` index values).
///
/// # Safety
///
/// Every offset the descriptor and the index values reach lies in `src` (the values normalised
/// and in range).
#[cfg(feature = "cuda")]
pub unsafe fn gather(
    stream: &Stream,
    elem: usize,
    src: DeviceSpan<'_, u8>,
    dst: DeviceSpanMut<'_, u8>,
    desc: &IndexDesc,
    idx: DeviceSpan<'_, i64>,
) -> Result<()> {
    let n = dst.len() / elem.max(1);
    if n == 0 {
        return Ok(());
    }
    at_least("index gather", desc.index_len(), idx.len())?;
    let (src, dst, idx) = (src.addr(), dst.addr(), idx.addr());
    let kernel = Kernel::get(stream.context(), &images::INDEX, by_size("gather", elem)?)?;
    let (mut s, mut d, mut n64, mut de, mut ix) = (src, dst, n as u64, *desc, idx);
    let mut params: [*mut c_void; 5] = [
        (&raw mut s).cast(),
        (&raw mut d).cast(),
        (&raw mut n64).cast(),
        (&raw mut de).cast(),
        (&raw mut ix).cast(),
    ];
    // SAFETY: the parameters match `index_gather_eN(const T*, T*, uint64_t, GxIndex, const
    // int64_t*)`; `dst` holds `n` elements and `idx` the index values (checked); the caller
    // vouches that every offset read lies in `src`.
    unsafe { kernel.launch(stream, launch_config(stream, n), &mut params)? };
    Ok(())
}

/// Queues `dst[offset(i)] = vals[i]` for the `vals.len() / elem` result elements whose index
/// position is not marked in `dead` (one byte per position: later positions with the same
/// index tuple win).
///
/// # Safety
///
/// As [`gather`], for `dst`; the live positions write distinct offsets.
#[cfg(feature = "cuda")]
pub unsafe fn scatter(
    stream: &Stream,
    elem: usize,
    dst: DeviceSpanMut<'_, u8>,
    vals: DeviceSpan<'_, u8>,
    desc: &IndexDesc,
    idx: DeviceSpan<'_, i64>,
    dead: DeviceSpan<'_, u8>,
) -> Result<()> {
    let n = vals.len() / elem.max(1);
    if n == 0 {
        return Ok(());
    }
    at_least("index scatter", desc.index_len(), idx.len())?;
    at_least("index scatter", desc.nb.max(0) as usize, dead.len())?;
    let (dst, vals, idx, dead) = (dst.addr(), vals.addr(), idx.addr(), dead.addr());
    let kernel = Kernel::get(stream.context(), &images::INDEX, by_size("scatter", elem)?)?;
    let (mut d, mut v, mut n64, mut de, mut ix, mut dd) = (dst, vals, n as u64, *desc, idx, dead);
    let mut params: [*mut c_void; 6] = [
        (&raw mut d).cast(),
        (&raw mut v).cast(),
        (&raw mut n64).cast(),
        (&raw mut de).cast(),
        (&raw mut ix).cast(),
        (&raw mut dd).cast(),
    ];
    // SAFETY: the parameters match `index_scatter_eN(T*, const T*, uint64_t, GxIndex, const
    // int64_t*, const uint8_t*)`; `vals`, `idx` and `dead` hold what is read (checked); the
    // caller vouches for the offsets written.
    unsafe { kernel.launch(stream, launch_config(stream, n), &mut params)? };
    Ok(())
}

/// The accumulate groups: for each representative index position `b`, its members (positions
/// with the same index tuple, in order) are `members[start[b] .. start[b] + len[b]]`.
#[cfg(feature = "cuda")]
#[derive(Debug, Clone, Copy)]
pub struct Groups<'a> {
    /// `nb` bytes: non-zero for positions that are not their group's representative.
    pub dead: DeviceSpan<'a, u8>,
    /// `nb` i64: where each group starts in `members`.
    pub start: DeviceSpan<'a, i64>,
    /// `nb` i64: each group's length.
    pub len: DeviceSpan<'a, i64>,
    /// `nb` i64: the positions, grouped.
    pub members: DeviceSpan<'a, i64>,
}

/// Queues `dst[offset] += vals[...]` summing each group's contributions in index order
/// (deterministic), for elements of type `scalar`.
///
/// # Safety
///
/// As [`scatter`], with `groups` describing the `nb` positions (starts and lengths within
/// `members`, member positions below `nb`).
#[cfg(feature = "cuda")]
pub unsafe fn scatter_add(
    stream: &Stream,
    scalar: DType,
    dst: DeviceSpanMut<'_, u8>,
    vals: DeviceSpan<'_, u8>,
    desc: &IndexDesc,
    idx: DeviceSpan<'_, i64>,
    groups: Groups<'_>,
) -> Result<()> {
    let n = vals.len() / scalar.size();
    if n == 0 {
        return Ok(());
    }
    let nb = desc.nb.max(0) as usize;
    at_least("index scatter_add", desc.index_len(), idx.len())?;
    at_least("index scatter_add", nb, groups.dead.len())?;
    at_least("index scatter_add", nb, groups.start.len())?;
    at_least("index scatter_add", nb, groups.len.len())?;
    let (dst, vals, idx) = (dst.addr(), vals.addr(), idx.addr());
    let name: &'static str = match scalar {
        DType::Bool => "index_scatter_add_bool",
        DType::U8 => "index_scatter_add_u8",
        DType::I8 => "index_scatter_add_i8",
        DType::I16 => "index_scatter_add_i16",
        DType::I32 => "index_scatter_add_i32",
        DType::I64 => "index_scatter_add_i64",
        DType::F16 => "index_scatter_add_f16",
        DType::BF16 => "index_scatter_add_bf16",
        DType::F32 => "index_scatter_add_f32",
        DType::F64 => "index_scatter_add_f64",
    };
    let kernel = Kernel::get(stream.context(), &images::INDEX, name)?;
    let (mut d, mut v, mut n64, mut de, mut ix) = (dst, vals, n as u64, *desc, idx);
    let (mut dd, mut st, mut ln, mut mb) = (
        groups.dead.addr(),
        groups.start.addr(),
        groups.len.addr(),
        groups.members.addr(),
    );
    let mut params: [*mut c_void; 9] = [
        (&raw mut d).cast(),
        (&raw mut v).cast(),
        (&raw mut n64).cast(),
        (&raw mut de).cast(),
        (&raw mut ix).cast(),
        (&raw mut dd).cast(),
        (&raw mut st).cast(),
        (&raw mut ln).cast(),
        (&raw mut mb).cast(),
    ];
    // SAFETY: the parameters match `index_scatter_add_<T>(T*, const T*, uint64_t, GxIndex,
    // const int64_t*, const uint8_t*, const int64_t* x3)`; the spans hold what is read
    // (checked); the caller vouches for the offsets written and the groups.
    unsafe { kernel.launch(stream, launch_config(stream, n), &mut params)? };
    Ok(())
}

/// A row copy in 16-byte units: `nrows` rows of `row_units` units, source rows `stride_units`
/// apart from `base_units` (see `index_gather_rows16`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rows16 {
    /// Number of index positions (rows).
    pub nrows: usize,
    /// 16-byte units per row.
    pub row_units: usize,
    /// Offset of the view's first element, in units.
    pub base_units: usize,
    /// Distance between source rows, in units.
    pub stride_units: usize,
}

#[cfg(feature = "cuda")]
fn rows_config(_stream: &Stream, r: &Rows16) -> LaunchConfig {
    // A block per (row, chunk of 8 x 256 units): `RW_UNROLL` in `index.cu`. A block per row
    // rather than resident blocks looping over rows: each block's loads are independent, so
    // more of them are in flight.
    let gx = r.row_units.div_ceil(256 * 8).clamp(1, 65_535);
    let gy = r.nrows.clamp(1, 65_535);
    LaunchConfig {
        grid: (gx as u32, gy as u32, 1),
        block: (256, 1, 1),
        shared_bytes: 0,
    }
}

/// Queues a row gather: `dst[r] = src[base + idx[r] * stride]` row by row, 16 bytes at a time.
///
/// # Safety
///
/// The rows the index values name lie in `src` (values in range); `src` and `dst` are 16-byte
/// aligned.
#[cfg(feature = "cuda")]
pub unsafe fn gather_rows16(
    stream: &Stream,
    src: DeviceSpan<'_, u8>,
    dst: DeviceSpanMut<'_, u8>,
    idx: DeviceSpan<'_, i64>,
    rows: &Rows16,
) -> Result<()> {
    if rows.nrows == 0 || rows.row_units == 0 {
        return Ok(());
    }
    at_least("gather_rows16", rows.nrows, idx.len())?;
    at_least("gather_rows16", rows.nrows * rows.row_units * 16, dst.len())?;
    let (src, dst, idx) = (src.addr(), dst.addr(), idx.addr());
    let kernel = Kernel::get(stream.context(), &images::INDEX, "index_gather_rows16")?;
    let (mut s, mut d, mut i) = (src, dst, idx);
    let (mut n, mut ru, mut bu, mut su) = (
        rows.nrows as i64,
        rows.row_units as i64,
        rows.base_units as i64,
        rows.stride_units as i64,
    );
    let mut params: [*mut c_void; 7] = [
        (&raw mut s).cast(),
        (&raw mut d).cast(),
        (&raw mut i).cast(),
        (&raw mut n).cast(),
        (&raw mut ru).cast(),
        (&raw mut bu).cast(),
        (&raw mut su).cast(),
    ];
    // SAFETY: the parameters match `index_gather_rows16`; `dst` holds the rows and `idx` the
    // values (checked); the caller vouches for the rows read.
    unsafe { kernel.launch(stream, rows_config(stream, rows), &mut params)? };
    Ok(())
}

/// Queues a row scatter: `dst[base + idx[r] * stride] = vals[r]` for rows not marked in `dead`.
///
/// # Safety
///
/// As [`gather_rows16`], for the rows written in `dst`; the live rows are distinct.
#[cfg(feature = "cuda")]
pub unsafe fn scatter_rows16(
    stream: &Stream,
    dst: DeviceSpanMut<'_, u8>,
    vals: DeviceSpan<'_, u8>,
    idx: DeviceSpan<'_, i64>,
    dead: DeviceSpan<'_, u8>,
    rows: &Rows16,
) -> Result<()> {
    if rows.nrows == 0 || rows.row_units == 0 {
        return Ok(());
    }
    at_least("scatter_rows16", rows.nrows, idx.len())?;
    at_least("scatter_rows16", rows.nrows, dead.len())?;
    at_least(
        "scatter_rows16",
        rows.nrows * rows.row_units * 16,
        vals.len(),
    )?;
    let (dst, vals, idx, dead) = (dst.addr(), vals.addr(), idx.addr(), dead.addr());
    let kernel = Kernel::get(stream.context(), &images::INDEX, "index_scatter_rows16")?;
    let (mut d, mut v, mut i, mut dd) = (dst, vals, idx, dead);
    let (mut n, mut ru, mut bu, mut su) = (
        rows.nrows as i64,
        rows.row_units as i64,
        rows.base_units as i64,
        rows.stride_units as i64,
    );
    let mut params: [*mut c_void; 8] = [
        (&raw mut d).cast(),
        (&raw mut v).cast(),
        (&raw mut i).cast(),
        (&raw mut dd).cast(),
        (&raw mut n).cast(),
        (&raw mut ru).cast(),
        (&raw mut bu).cast(),
        (&raw mut su).cast(),
    ];
    // SAFETY: the parameters match `index_scatter_rows16`; `vals`, `idx` and `dead` hold what
    // is read (checked); the caller vouches for the rows written.
    unsafe { kernel.launch(stream, rows_config(stream, rows), &mut params)? };
    Ok(())
}

/// A device index array as it is: its values (as bytes, from the first), whether they are int32
/// (else int64), the distance between them in elements, and the size of the dimension they
/// index.
#[cfg(feature = "cuda")]
#[derive(Debug, Clone, Copy)]
pub struct RawIndex<'a> {
    /// The values, from the first.
    pub values: DeviceSpan<'a, u8>,
    /// int32 values (else int64).
    pub i32: bool,
    /// Distance between values, in elements.
    pub stride: i64,
    /// Size of the indexed dimension.
    pub size: usize,
    /// Whether negative values count from the end (`x[idx]`, NumPy's rule); when false a
    /// negative value is out of range (PyTorch's `index_select`).
    pub wrap: bool,
}

/// Index arrays of at most this many values get an early verdict from
/// `gather_rows16_checked` (one block checks them all before copying: about 2 µs for 4096).
pub const EARLY_VERDICT_MAX_ROWS: usize = 16 << 10;

/// Queues a row gather reading a raw device index array ([`RawIndex`]): negative values wrap
/// when `idx.wrap` (else they are out of range); a row whose value is out of range is not
/// copied and sets the int32 at `bad` to 1.
///
/// Returns whether the kernel also gives an early verdict (at most
/// [`EARLY_VERDICT_MAX_ROWS`] rows, and a kernel queued): one block first checks every index,
/// sets the int32 at `bad` to 1 if one is out of range, and then the int32 at `bad + 4` to 1,
/// behind a system-wide fence. Once the host sees the second int32 set, the first is final when
/// it is 0 (no block writes it later); when it is 1, other blocks may still write it.
///
/// Every value is checked against `idx.size` on the device, so the rows read lie in `src`
/// when it holds `size` rows.
///
/// # Safety
///
/// `src` holds `idx.size` rows of the layout `rows` describes; `bad` is 8 bytes the device may
/// write (device memory, or page-locked host memory under unified addressing), valid until
/// the kernel completes (after an early verdict of 0, until the verdict was read).
#[cfg(feature = "cuda")]
pub unsafe fn gather_rows16_checked(
    stream: &Stream,
    src: DeviceSpan<'_, u8>,
    dst: DeviceSpanMut<'_, u8>,
    idx: &RawIndex<'_>,
    bad: u64,
    rows: &Rows16,
) -> Result<bool> {
    if rows.nrows == 0 || rows.row_units == 0 {
        return Ok(false);
    }
    let vsize = if idx.i32 { 4 } else { 8 };
    let reach = (rows.nrows - 1) * idx.stride.max(0) as usize * vsize + vsize;
    at_least("gather_rows16_checked", reach, idx.values.len())?;
    at_least(
        "gather_rows16_checked",
        rows.nrows * rows.row_units * 16,
        dst.len(),
    )?;
    let (src, dst) = (src.addr(), dst.addr());
    let early = rows.nrows <= EARLY_VERDICT_MAX_ROWS;
    let kernel = Kernel::get(
        stream.context(),
        &images::INDEX,
        "index_gather_rows16_checked",
    )?;
    let (mut s, mut d, mut i, mut b) = (src, dst, idx.values.addr(), bad);
    let (mut i32f, mut istr, mut size) = (i32::from(idx.i32), idx.stride, idx.size as i64);
    let (mut n, mut ru, mut bu, mut su) = (
        rows.nrows as i64,
        rows.row_units as i64,
        rows.base_units as i64,
        rows.stride_units as i64,
    );
    // The kernel's flags: bit 0 an early verdict, bit 1 no wrapping of negative values.
    let mut e = i32::from(early) | (i32::from(!idx.wrap) << 1);
    let mut params: [*mut c_void; 12] = [
        (&raw mut s).cast(),
        (&raw mut d).cast(),
        (&raw mut i).cast(),
        (&raw mut i32f).cast(),
        (&raw mut istr).cast(),
        (&raw mut size).cast(),
        (&raw mut b).cast(),
        (&raw mut n).cast(),
        (&raw mut ru).cast(),
        (&raw mut bu).cast(),
        (&raw mut su).cast(),
        (&raw mut e).cast(),
    ];
    // SAFETY: the parameters match `index_gather_rows16_checked(const uint4*, uint4*, const
    // void*, i32, i64, i64, i32*, i64, i64, i64, i64, i32)`; `dst` and the index values are
    // in their spans (checked); the caller vouches for `src`'s rows and `bad`.
    unsafe { kernel.launch(stream, rows_config(stream, rows), &mut params)? };
    Ok(early)
}

/// A strided read of an index array (`GxStrided`): element `b` (row-major over `shape`) is at
/// `offset + sum(coord[r] * stride[r])`; strides of 0 broadcast.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Strided {
    /// Shape (first `rank`).
    pub shape: [i64; MAX_INDEX_DIMS],
    /// Stride of each dimension, in elements.
    pub stride: [i64; MAX_INDEX_DIMS],
    /// Offset of the first element, in elements.
    pub offset: i64,
    /// Rank.
    pub rank: i32,
}

impl Strided {
    /// One past the last element the layout reaches (0 when empty); negative strides are
    /// treated as reaching nothing below the offset, as the layouts here have none (a layout
    /// with one is rejected by the twins and by `genesis-storage`).
    pub fn reach(&self) -> usize {
        let dims = 0..self.rank.max(0) as usize;
        if dims.clone().any(|r| self.shape[r] == 0) {
            return 0;
        }
        let hi: i64 = dims
            .map(|r| (self.shape[r] - 1) * self.stride[r].max(0))
            .sum();
        (self.offset + hi + 1).max(0) as usize
    }

    /// Checks what the twins and the storage layer need of a layout: rank at most
    /// [`MAX_INDEX_DIMS`], sizes, strides and offset not negative.
    pub fn check(&self) -> Result<()> {
        let rank = usize::try_from(self.rank)
            .ok()
            .filter(|&r| r <= MAX_INDEX_DIMS);
        let ok = rank.is_some_and(|r| {
            self.offset >= 0
                && self.shape[..r].iter().all(|&s| s >= 0)
                && self.stride[..r].iter().all(|&s| s >= 0)
        });
        if !ok {
            return Err(Error::Unsupported {
                op: "index layout",
                reason: format!("{self:?}"),
            });
        }
        Ok(())
    }

    /// The layout `shape` / `stride` from `offset`; `None` past [`MAX_INDEX_DIMS`] dimensions.
    pub fn new(shape: &[usize], stride: &[isize], offset: usize) -> Option<Strided> {
        if shape.len() > MAX_INDEX_DIMS || stride.len() != shape.len() {
            return None;
        }
        let mut s = Strided {
            shape: [1; MAX_INDEX_DIMS],
            stride: [0; MAX_INDEX_DIMS],
            offset: offset as i64,
            rank: shape.len() as i32,
        };
        for (r, (&d, &st)) in shape.iter().zip(stride).enumerate() {
            s.shape[r] = d as i64;
            s.stride[r] = st as i64;
        }
        Some(s)
    }
}

/// Index tuples as keys (`GxKeys`): key = sum of `idx[a] * mul[a]` over the `n_adv` arrays.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keys {
    /// Multiplier of each index array (row-major over the indexed sizes).
    pub mul: [i64; MAX_INDEX_DIMS],
    /// Number of index arrays.
    pub n_adv: i32,
}

/// Launches `name` over `n` elements.
///
/// # Safety
///
/// `params` match the kernel's parameter list, and the memory they point to is valid for what
/// the kernel reads and writes until it completes.
#[cfg(feature = "cuda")]
unsafe fn launch(
    stream: &Stream,
    name: &'static str,
    n: usize,
    params: &mut [*mut c_void],
) -> Result<()> {
    let kernel = Kernel::get(stream.context(), &images::INDEX, name)?;
    // SAFETY: forwarded contract.
    unsafe { kernel.launch(stream, launch_config(stream, n), params)? };
    Ok(())
}

/// Queues the normalisation of a device index array: `out[b]` = the value at position `b` of
/// `src` (int32 when `i32`, else int64) read through `layout`, wrapped when negative; a value
/// outside `0..size` is written as 0 and the smallest such `b` lands in `*bad` (atomic min; the
/// caller initialises it to `u64::MAX`).
///
/// `src` holds the values as bytes; `out` receives `nb` int64.
#[cfg(feature = "cuda")]
pub fn normalise(
    stream: &Stream,
    i32: bool,
    src: DeviceSpan<'_, u8>,
    layout: &Strided,
    size: usize,
    out: DeviceSpanMut<'_, i64>,
    bad: DeviceSpanMut<'_, u64>,
) -> Result<()> {
    let nb = out.len();
    if nb == 0 {
        return Ok(());
    }
    at_least("index normalise", 1, bad.len())?;
    at_least(
        "index normalise",
        layout.reach().saturating_mul(if i32 { 4 } else { 8 }),
        src.len(),
    )?;
    let (src, out, bad) = (src.addr(), out.addr(), bad.addr());
    let name = if i32 {
        "index_normalise_i32"
    } else {
        "index_normalise_i64"
    };
    let (mut s, mut l, mut n64, mut sz, mut o, mut b) =
        (src, *layout, nb as u64, size as i64, out, bad);
    let mut params: [*mut c_void; 6] = [
        (&raw mut s).cast(),
        (&raw mut l).cast(),
        (&raw mut n64).cast(),
        (&raw mut sz).cast(),
        (&raw mut o).cast(),
        (&raw mut b).cast(),
    ];
    // SAFETY: the parameters match `index_normalise_*(const I*, GxStrided, u64, i64, i64*,
    // u64*)`; every offset the layout reaches lies in `src`, `out` holds `nb` values and `bad`
    // one word (checked).
    unsafe { launch(stream, name, nb, &mut params) }
}

/// Queues the dead-position marks of an assignment through `n_adv` normalised index arrays of
/// `nb` positions at `idx`: `winner` (one zeroed u64 per key, keys below the product of the
/// indexed sizes) receives each key's last position; `dead[b]` is 1 unless `b` is its key's
/// last position, and 1 everywhere when any of the `nbad` words at `bad` was set by
/// [`normalise`].
///
/// # Safety
///
/// The index values are in range, so that every key lies in `winner`.
#[cfg(feature = "cuda")]
pub unsafe fn dead_positions(
    stream: &Stream,
    idx: DeviceSpan<'_, i64>,
    keys: &Keys,
    winner: DeviceSpanMut<'_, u64>,
    bad: DeviceSpan<'_, u64>,
    dead: DeviceSpanMut<'_, u8>,
) -> Result<()> {
    let nb = dead.len();
    if nb == 0 {
        return Ok(());
    }
    let nbad = bad.len();
    at_least(
        "index dead_positions",
        (keys.n_adv.max(0) as usize).saturating_mul(nb),
        idx.len(),
    )?;
    let (idx, winner, bad, dead) = (idx.addr(), winner.addr(), bad.addr(), dead.addr());
    let (mut ix, mut n64, mut k, mut w) = (idx, nb as u64, *keys, winner);
    let mut params: [*mut c_void; 4] = [
        (&raw mut ix).cast(),
        (&raw mut n64).cast(),
        (&raw mut k).cast(),
        (&raw mut w).cast(),
    ];
    // SAFETY: the parameters match `index_winner(const i64*, u64, GxKeys, u64*)`; `idx` holds
    // the values (checked) and the caller vouches that every key lies in `winner`.
    unsafe { launch(stream, "index_winner", nb, &mut params)? };
    let (mut b, mut nbd, mut d) = (bad, nbad as i32, dead);
    let mut params: [*mut c_void; 7] = [
        (&raw mut ix).cast(),
        (&raw mut n64).cast(),
        (&raw mut k).cast(),
        (&raw mut w).cast(),
        (&raw mut b).cast(),
        (&raw mut nbd).cast(),
        (&raw mut d).cast(),
    ];
    // SAFETY: the parameters match `index_dead(const i64*, u64, GxKeys, const u64*, const
    // u64*, i32, u8*)`; `bad` holds `nbad` words and `dead` `nb` bytes (checked).
    unsafe { launch(stream, "index_dead", nb, &mut params) }
}

/// Queues the coordinates of the row-major positions `lin` over `shape`: coordinate `d` of
/// `lin[i]` at `out[i * rank + d]` when `rows` (`[n, rank]`), else at `out[d * n + i]`; over `shape`
/// (the `rank` entries of a [`Strided`]; strides unused).
///
/// Each output position depends only on `i`, so any values are safe (positions at or past
/// the shape's product give meaningless coordinates).
#[cfg(feature = "cuda")]
pub fn unravel(
    stream: &Stream,
    lin: DeviceSpan<'_, i64>,
    shape: &Strided,
    rows: bool,
    out: DeviceSpanMut<'_, i64>,
) -> Result<()> {
    let n = lin.len();
    if n == 0 {
        return Ok(());
    }
    at_least(
        "index unravel",
        (shape.rank.max(0) as usize).saturating_mul(n),
        out.len(),
    )?;
    let (lin, out) = (lin.addr(), out.addr());
    let (mut l, mut n64, mut s, mut o, mut r) = (lin, n as u64, *shape, out, i32::from(rows));
    let mut params: [*mut c_void; 5] = [
        (&raw mut l).cast(),
        (&raw mut n64).cast(),
        (&raw mut s).cast(),
        (&raw mut o).cast(),
        (&raw mut r).cast(),
    ];
    // SAFETY: the parameters match `index_unravel(const i64*, u64, GxStrided, i64*, int)`; `lin`
    // holds `n` values and `out` `rank * n` (checked).
    unsafe { launch(stream, "index_unravel", n, &mut params) }
}
