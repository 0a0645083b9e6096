//! Indexing along one dimension with int64 index tensors (`kernels/gather.cu`): `gather`,
//! `index_select` (a gather with the index broadcast over the other dimensions), `scatter` and
//! `scatter_add`, and their CPU twins.
//!
//! An [`Along`] describes the iteration: its shape (the gather's output, the scatter's index),
//! the strides over it of the index, of the other operand and of the indexed target, the
//! dimension and the target's size along it. Index values must lie in `0..size` (no negative
//! wrapping, as PyTorch's `gather`/`scatter`/`index_select`); a bad value is
//! [`Error::IndexOutOfRange`] and never reaches memory: the twins check every value before
//! writing anything, the kernels write 0 (gather) or skip (scatter) and report the first bad
//! position through a device word that the caller reads back before using the result.
//!
//! `scatter` with repeated target elements: the twin's last write wins, the kernels' is
//! unspecified (as PyTorch's). `scatter_add` sums repeated targets: the twin in position order,
//! the kernels with atomic adds in the type (f16/bf16 in their own precision, as PyTorch's), so
//! float results agree within the rounding of the sums.
//!
//! [`rows_by_key`] is the deterministic sum of rows by key that `index_select`'s backward along
//! dimension 0 (an embedding's) needs: with the keys sorted (stably), each run of equal keys is
//! summed in f32 (f64 for f64) in pieces of at most [`ROWS_BY_KEY_CHUNK`] sorted positions (in
//! parallel, so that a frequent key is not one thread's long loop), the pieces added in order,
//! without atomics: the twin and the kernels give the same bits on any device.

use crate::real::{FusedElement, Real};
use crate::{Element, Error, Result};

/// Most dimensions of an [`Along`] (`GA_MAX_DIMS`).
pub const ALONG_MAX_DIMS: usize = 8;

/// The iteration of an op along one dimension (`GxAlong` in `gather.cu`, same layout).
///
/// Its fields are private: a value comes only from [`Along::new`], which checks the rank, the
/// dimension and that every offset fits, so no `Along` can describe an out-of-range launch.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Along {
    /// The iteration shape (the first `rank` entries).
    shape: [i64; ALONG_MAX_DIMS],
    /// Element strides of the index over the shape.
    idx_stride: [i64; ALONG_MAX_DIMS],
    /// Element strides of the other operand (gather: the source; scatter: the values).
    val_stride: [i64; ALONG_MAX_DIMS],
    /// Element strides of the indexed target (gather: the source; scatter: the output).
    tgt_stride: [i64; ALONG_MAX_DIMS],
    /// The target's size along `dim`: index values lie in `0..size`.
    size: i64,
    /// Dimensions.
    rank: i32,
    /// The indexed dimension.
    dim: i32,
}

/// An iteration of more dimensions than [`ALONG_MAX_DIMS`] with fewer: dimensions of size 1
/// (but `dim`) dropped, and each dimension merged into the one before it (neither `dim`) where
/// all three operands step over the pair as over one dimension, so that the positions keep
/// their row-major order (PyTorch's `TensorIterator` collapses dimensions the same way). An
/// iteration with no positions becomes one dimension of size 0.
struct Coalesced {
    shape: Vec<usize>,
    dim: usize,
    strides: [Vec<usize>; 3],
}

impl Coalesced {
    fn new(shape: &[usize], dim: usize, strides: [&[usize]; 3]) -> Coalesced {
        if shape.contains(&0) {
            return Coalesced {
                shape: vec![0],
                dim: 0,
                strides: [vec![0], vec![0], vec![0]],
            };
        }
        let mut c = Coalesced {
            shape: Vec::new(),
            dim: 0,
            strides: [Vec::new(), Vec::new(), Vec::new()],
        };
        // Whether the last kept dimension may take more (it is not `dim`).
        let mut open = false;
        for (r, &n) in shape.iter().enumerate() {
            if r != dim && n == 1 {
                continue;
            }
            let mergeable = open
                && r != dim
                && strides.iter().zip(&c.strides).all(|(st, kept)| {
                    let last = kept.len() - 1;
                    st[r].checked_mul(n) == Some(kept[last])
                });
            if mergeable {
                let last = c.shape.len() - 1;
                c.shape[last] *= n;
                for (kept, st) in c.strides.iter_mut().zip(strides) {
                    kept[last] = st[r];
                }
                continue;
            }
            if r == dim {
                c.dim = c.shape.len();
            }
            c.shape.push(n);
            for (kept, st) in c.strides.iter_mut().zip(strides) {
                kept.push(st[r]);
            }
            open = r != dim;
        }
        c
    }
}

impl Along {
    /// The descriptor of an iteration over `shape` along `dim`; every stride list has one
    /// non-negative entry per dimension. A 0-d iteration is one element (`dim` 0 with a size
    /// given by `size`). More than [`ALONG_MAX_DIMS`] dimensions are merged where the strides
    /// allow (see `Coalesced`); what still has more is [`Error::Unsupported`].
    pub fn new(
        shape: &[usize],
        dim: usize,
        idx_stride: &[usize],
        val_stride: &[usize],
        tgt_stride: &[usize],
        size: usize,
    ) -> Result<Along> {
        let bad = |reason: String| Error::Unsupported {
            op: "along",
            reason,
        };
        let rank = shape.len();
        if (rank > 0 && dim >= rank) || (rank == 0 && dim != 0) {
            return Err(bad(format!("dimension {dim} of {rank}")));
        }
        if [idx_stride.len(), val_stride.len(), tgt_stride.len()]
            .iter()
            .any(|&l| l != rank)
        {
            return Err(bad("a stride list of another rank".into()));
        }
        // The positions must be countable (`numel`): an empty shape may have huge other sizes.
        if !shape.contains(&0)
            && shape
                .iter()
                .try_fold(1usize, |n, &s| n.checked_mul(s))
                .is_none()
        {
            return Err(bad(format!("{shape:?}: the count of positions overflows")));
        }
        if rank > ALONG_MAX_DIMS {
            let c = Coalesced::new(shape, dim, [idx_stride, val_stride, tgt_stride]);
            if c.shape.len() > ALONG_MAX_DIMS {
                return Err(bad(format!(
                    "{rank} dimensions that merge to {} (at most {ALONG_MAX_DIMS})",
                    c.shape.len()
                )));
            }
            let [i, v, t] = &c.strides;
            return Along::new(&c.shape, c.dim, i, v, t, size);
        }
        let mut d = Along {
            shape: [1; ALONG_MAX_DIMS],
            idx_stride: [0; ALONG_MAX_DIMS],
            val_stride: [0; ALONG_MAX_DIMS],
            tgt_stride: [0; ALONG_MAX_DIMS],
            size: i64::try_from(size).map_err(|_| bad("size".into()))?,
            rank: rank as i32,
            dim: dim as i32,
        };
        let to = |v: usize| i64::try_from(v).map_err(|_| bad("a size or stride past i64".into()));
        for r in 0..rank {
            d.shape[r] = to(shape[r])?;
            d.idx_stride[r] = to(idx_stride[r])?;
            d.val_stride[r] = to(val_stride[r])?;
            d.tgt_stride[r] = to(tgt_stride[r])?;
        }
        if rank == 0 {
            // One element; the "indexed dimension" is a virtual one of stride 0.
            d.rank = 0;
        }
        d.reach()?;
        Ok(d)
    }

    /// The target's size along the indexed dimension: index values lie in `0..size`.
    pub fn size(&self) -> i64 {
        self.size
    }

    /// Whether positions group by four within rows along the last dimension with a contiguous
    /// index (the layout of `along_gather4_*`): `dim` is the last dimension, its size a
    /// multiple of 4, and the index's strides those of a row-major array of the shape.
    pub fn rows_of_four(&self) -> bool {
        let rank = self.rank as usize;
        if rank == 0 || self.dim as usize != rank - 1 || self.shape[rank - 1] % 4 != 0 {
            return false;
        }
        let mut expect = 1i64;
        for r in (0..rank).rev() {
            if self.shape[r] != 1 && self.idx_stride[r] != expect {
                return false;
            }
            expect = expect.saturating_mul(self.shape[r]);
        }
        true
    }

    /// Positions of the iteration.
    pub fn numel(&self) -> usize {
        let shape = &self.shape[..self.rank as usize];
        if shape.contains(&0) {
            return 0;
        }
        // Checked in `new`; saturating all the same.
        shape
            .iter()
            .try_fold(1usize, |n, &s| n.checked_mul(s as usize))
            .unwrap_or(usize::MAX)
    }

    /// Elements each operand must hold: (index, other operand, target), 0 when there are no
    /// positions. The target's reach counts `size - 1` along `dim`.
    pub fn reach(&self) -> Result<(usize, usize, usize)> {
        if self.numel() == 0 {
            return Ok((0, 0, 0));
        }
        let over = || Error::Unsupported {
            op: "along",
            reason: "offsets overflow".into(),
        };
        let end = |strides: &[i64; ALONG_MAX_DIMS], dim_extent: Option<i64>| -> Result<usize> {
            let mut last = 0i64;
            let rank = self.rank as usize;
            for (r, (&stride, &len)) in strides.iter().zip(&self.shape).take(rank).enumerate() {
                // Along `dim`, the target reaches `size - 1`; elsewhere the shape's extent.
                let extent = match dim_extent {
                    Some(e) if r as i32 == self.dim => e,
                    _ => len - 1,
                };
                last = extent
                    .checked_mul(stride)
                    .and_then(|x| last.checked_add(x))
                    .ok_or_else(over)?;
            }
            last.checked_add(1)
                .and_then(|end| usize::try_from(end).ok())
                .ok_or_else(over)
        };
        let tgt = if self.size == 0 {
            0
        } else {
            end(&self.tgt_stride, Some(self.size - 1))?
        };
        Ok((
            end(&self.idx_stride, None)?,
            end(&self.val_stride, None)?,
            tgt,
        ))
    }

    /// Offsets of position `i`: into the index, the other operand, and the target without the
    /// indexed dimension's term.
    fn offsets(&self, i: usize) -> (usize, usize, usize) {
        let (mut rem, mut oi, mut ov, mut ot) = (i, 0i64, 0i64, 0i64);
        for r in (0..self.rank as usize).rev() {
            let sz = self.shape[r] as usize;
            let c = (rem % sz) as i64;
            rem /= sz;
            oi += c * self.idx_stride[r];
            ov += c * self.val_stride[r];
            if r as i32 != self.dim {
                ot += c * self.tgt_stride[r];
            }
        }
        (oi as usize, ov as usize, ot as usize)
    }

    /// The target offset of position `i` for index value `v`.
    fn target(&self, base: usize, v: i64) -> usize {
        let stride = if self.rank == 0 {
            0
        } else {
            self.tgt_stride[self.dim as usize]
        };
        base + (v * stride) as usize
    }

    /// The index element read at position `i` (row-major over the shape).
    pub fn index_offset(&self, i: usize) -> usize {
        self.offsets(i).0
    }

    /// The first position whose index value is outside `0..size`, with the value.
    pub fn first_bad(&self, idx: &[i64]) -> Option<(usize, i64)> {
        (0..self.numel()).find_map(|i| {
            let v = idx[self.offsets(i).0];
            (v < 0 || v >= self.size).then_some((i, v))
        })
    }

    fn check_lens(&self, op: &'static str, idx: usize, val: usize, tgt: usize) -> Result<()> {
        let (ni, nv, nt) = self.reach()?;
        for (need, got) in [(ni, idx), (nv, val), (nt, tgt)] {
            if got < need {
                return Err(Error::LengthMismatch {
                    op,
                    expected: need,
                    got,
                });
            }
        }
        Ok(())
    }

    fn check_values(&self, op: &'static str, idx: &[i64]) -> Result<()> {
        match self.first_bad(idx) {
            Some((position, value)) => Err(Error::IndexOutOfRange {
                op,
                position,
                value,
                size: self.size,
            }),
            None => Ok(()),
        }
    }
}

/// CPU twin of `gather`: `out[i] = src[target(i, idx[i])]` over the iteration (`out`
/// contiguous in its shape; `src` is the target). Nothing is written on error.
pub fn gather<T: Copy>(src: &[T], idx: &[i64], d: &Along, out: &mut [T]) -> Result<()> {
    d.check_lens("gather", idx.len(), usize::MAX, src.len())?;
    if out.len() != d.numel() {
        return Err(Error::LengthMismatch {
            op: "gather",
            expected: d.numel(),
            got: out.len(),
        });
    }
    d.check_values("gather", idx)?;
    for (i, o) in out.iter_mut().enumerate() {
        let (oi, _, ot) = d.offsets(i);
        *o = src[d.target(ot, idx[oi])];
    }
    Ok(())
}

/// CPU twin of `scatter`: `out[target(i, idx[i])] = vals[i]` over the iteration, in position
/// order (the last write wins). Nothing is written on error.
pub fn scatter<T: Copy>(out: &mut [T], idx: &[i64], vals: &[T], d: &Along) -> Result<()> {
    d.check_lens("scatter", idx.len(), vals.len(), out.len())?;
    d.check_values("scatter", idx)?;
    for i in 0..d.numel() {
        let (oi, ov, ot) = d.offsets(i);
        out[d.target(ot, idx[oi])] = vals[ov];
    }
    Ok(())
}

/// CPU twin of `scatter_add`: `out[target(i, idx[i])] += vals[i]` in position order (floats
/// in the type's arithmetic, integers wrapping). Nothing is written on error.
pub fn scatter_add<T: Element>(out: &mut [T], idx: &[i64], vals: &[T], d: &Along) -> Result<()> {
    d.check_lens("scatter_add", idx.len(), vals.len(), out.len())?;
    d.check_values("scatter_add", idx)?;
    for i in 0..d.numel() {
        let (oi, ov, ot) = d.offsets(i);
        let at = d.target(ot, idx[oi]);
        out[at] = T::add(out[at], vals[ov]);
    }
    Ok(())
}

/// The shape of a [`rows_by_key`]: `n` sorted keys and positions, rows of `cols` elements, an
/// input of `in_rows` rows and an output of `out_rows`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowsByKey {
    /// Keys (and positions).
    pub n: usize,
    /// Elements a row.
    pub cols: usize,
    /// Rows of the input (`perm`'s values lie below this).
    pub in_rows: usize,
    /// Rows of the output (the keys lie below this).
    pub out_rows: usize,
}

impl RowsByKey {
    /// Checks the spans' lengths: `n` keys and positions, the input's and output's rows.
    fn check(&self, keys: usize, perm: usize, rows: usize, out: usize) -> Result<()> {
        let op = "rows_by_key";
        let need = |rows: usize| {
            rows.checked_mul(self.cols)
                .ok_or_else(|| Error::Unsupported {
                    op,
                    reason: format!("{rows} rows of {} elements overflow", self.cols),
                })
        };
        for (expected, got) in [
            (self.n, keys),
            (self.n, perm),
            (need(self.in_rows)?, rows),
            (need(self.out_rows)?, out),
        ] {
            if got != expected {
                return Err(Error::LengthMismatch { op, expected, got });
            }
        }
        Ok(())
    }
}

/// CPU twin of the `rows_by_key` kernels: for `keys` sorted ascending and `perm` (each run of
/// equal keys in ascending positions, as a stable sort gives), `out[k] = sum of rows[perm[j]]`
/// over the run of key `k`, in `T::Acc`: each piece of the run between multiples of
/// [`ROWS_BY_KEY_CHUNK`] summed in order from zero, the pieces added in order, rounded once;
/// rows no key names are left as they are. A key outside `0..out_rows`, a position outside `0..in_rows`
/// ([`Error::IndexOutOfRange`]) or keys out of order ([`Error::Unsupported`]): an error, with
/// `out` untouched.
pub fn rows_by_key<T: FusedElement>(
    shape: &RowsByKey,
    keys: &[i64],
    perm: &[i64],
    rows: &[T],
    out: &mut [T],
) -> Result<()> {
    shape.check(keys.len(), perm.len(), rows.len(), out.len())?;
    let op = "rows_by_key";
    let bad = |position: usize, value: i64, size: usize| Error::IndexOutOfRange {
        op,
        position,
        value,
        size: size as i64,
    };
    for (j, (&k, &p)) in keys.iter().zip(perm).enumerate() {
        if k < 0 || k as usize >= shape.out_rows {
            return Err(bad(j, k, shape.out_rows));
        }
        if p < 0 || p as usize >= shape.in_rows {
            return Err(bad(j, p, shape.in_rows));
        }
        if j > 0 && keys[j - 1] > k {
            return Err(Error::Unsupported {
                op,
                reason: format!("keys out of order at position {j}"),
            });
        }
    }
    if keys.is_empty() {
        // No row to add: `out` stays as it is (and `cols`, which an empty input does not
        // bound, sizes no accumulator).
        return Ok(());
    }
    let c = shape.cols;
    let zero = T::Acc::of_f64(0.0);
    let (mut total, mut piece) = (vec![zero; c], vec![zero; c]);
    let mut j = 0;
    while j < keys.len() {
        // One run of equal keys, summed piece by piece (the pieces cut at multiples of
        // ROWS_BY_KEY_CHUNK, as the kernels' chunks), the pieces added in order.
        let k = keys[j];
        let mut first = true;
        while j < keys.len() && keys[j] == k {
            piece.iter_mut().for_each(|a| *a = zero);
            let end = (j / ROWS_BY_KEY_CHUNK + 1) * ROWS_BY_KEY_CHUNK;
            while j < keys.len() && j < end && keys[j] == k {
                let row = &rows[perm[j] as usize * c..][..c];
                for (a, v) in piece.iter_mut().zip(row) {
                    *a = *a + v.acc();
                }
                j += 1;
            }
            if first {
                total.copy_from_slice(&piece);
                first = false;
            } else {
                for (t, p) in total.iter_mut().zip(&piece) {
                    *t = *t + *p;
                }
            }
        }
        for (o, a) in out[k as usize * c..][..c].iter_mut().zip(&total) {
            *o = T::of_acc(*a);
        }
    }
    Ok(())
}

/// Sorted positions a chunk of `rows_by_key` holds (`RK_CHUNK` in `gather.cu`): a run of
/// equal keys is summed in pieces cut at multiples of this, the pieces added in order.
pub const ROWS_BY_KEY_CHUNK: usize = 32;

/// Bytes of device workspace [`gpu_rows_by_key`] needs for `shape` with elements of `elem`
/// bytes: two rows of partial sums (f32; f64 for f64) a chunk.
pub fn rows_by_key_workspace_bytes(shape: &RowsByKey, elem: usize) -> usize {
    let acc = if elem == 8 { 8 } else { 4 };
    shape
        .n
        .div_ceil(ROWS_BY_KEY_CHUNK)
        .saturating_mul(2)
        .saturating_mul(shape.cols)
        .saturating_mul(acc)
}

/// Queues `rows_by_key` on `stream` (see [`rows_by_key`]; the same bits), through
/// `workspace` ([`rows_by_key_workspace_bytes`], 8-byte aligned). The kernels trust neither the
/// keys nor the positions with memory: a key outside `0..out_rows` or a position outside
/// `0..in_rows` is skipped, so the caller must pass keys it sorted itself, in range, for the
/// result to mean anything. f64, f32, f16, bf16.
#[cfg(feature = "cuda")]
pub fn gpu_rows_by_key<T: Element>(
    stream: &genesis_cuda::Stream,
    shape: &RowsByKey,
    keys: genesis_cuda::DeviceSpan<'_, i64>,
    perm: genesis_cuda::DeviceSpan<'_, i64>,
    rows: genesis_cuda::DeviceSpan<'_, T>,
    out: genesis_cuda::DeviceSpanMut<'_, T>,
    workspace: genesis_cuda::DeviceSpanMut<'_, u8>,
) -> Result<()> {
    use crate::DType;
    use genesis_cuda::{Kernel, LaunchConfig};
    use std::ffi::c_void;
    let op = "rows_by_key";
    shape.check(keys.len(), perm.len(), rows.len(), out.len())?;
    let ws_len = rows_by_key_workspace_bytes(shape, size_of::<T>());
    if workspace.len() < ws_len || !workspace.addr().is_multiple_of(8) {
        return Err(Error::LengthMismatch {
            op,
            expected: ws_len,
            got: workspace.len(),
        });
    }
    let names = match T::DTYPE {
        DType::F64 => ["rows_by_key1_f64", "rows_by_key2_f64"],
        DType::F32 => ["rows_by_key1_f32", "rows_by_key2_f32"],
        DType::F16 => ["rows_by_key1_f16", "rows_by_key2_f16"],
        DType::BF16 => ["rows_by_key1_bf16", "rows_by_key2_bf16"],
        _ => {
            return Err(Error::Unsupported {
                op,
                reason: format!("element type {} (floating types only)", T::NAME),
            });
        }
    };
    if shape.n == 0 || shape.cols == 0 {
        return Ok(());
    }
    let chunks = shape.n.div_ceil(ROWS_BY_KEY_CHUNK);
    let tiles = shape.cols.div_ceil(256);
    if chunks > u32::MAX as usize || tiles > 65_535 {
        return Err(Error::Unsupported {
            op,
            reason: format!("{} keys of {} columns in one launch", shape.n, shape.cols),
        });
    }
    let mut args = RkArgs {
        keys: keys.addr(),
        perm: perm.addr(),
        rows: rows.addr(),
        out: out.addr(),
        ws: workspace.addr(),
        n: shape.n as u64,
        cols: shape.cols as u64,
        in_rows: shape.in_rows as u64,
        out_rows: shape.out_rows as u64,
    };
    let config = LaunchConfig {
        grid: (chunks as u32, tiles as u32, 1),
        block: (256, 1, 1),
        shared_bytes: 0,
    };
    for name in names {
        let kernel = Kernel::get(stream.context(), &crate::images::GATHER, name)?;
        let mut params: [*mut c_void; 1] = [(&raw mut args).cast()];
        // SAFETY: `rows_by_key{1,2}_<T>` take one `RkArgs`, which `RkArgs` here mirrors; the
        // spans hold `n` keys and positions, `in_rows` and `out_rows` rows of `cols` and the
        // workspace's partial rows (checked), and the kernels read and write rows only at
        // keys and positions they checked to lie below those counts.
        unsafe { kernel.launch(stream, config, &mut params)? };
    }
    Ok(())
}

/// The argument block of the `rows_by_key` kernels (`RkArgs` in `gather.cu`, field by field).
#[cfg(feature = "cuda")]
#[repr(C)]
struct RkArgs {
    keys: u64,
    perm: u64,
    rows: u64,
    out: u64,
    ws: u64,
    n: u64,
    cols: u64,
    in_rows: u64,
    out_rows: u64,
}

/// Queues `gather` on `stream`: `out[i] = src[target(i, idx[i])]` for elements of `elem`
/// bytes (`src` and `out` as bytes). A bad index value writes 0 and its position lands in
/// `bad[0]` (atomic minimum: initialise it to `u64::MAX` and read it back before using `out`).
/// The spans are checked against the descriptor's reach before launching.
#[cfg(feature = "cuda")]
pub fn gpu_gather(
    stream: &genesis_cuda::Stream,
    elem: usize,
    src: genesis_cuda::DeviceSpan<'_, u8>,
    idx: genesis_cuda::DeviceSpan<'_, i64>,
    d: &Along,
    out: genesis_cuda::DeviceSpanMut<'_, u8>,
    bad: genesis_cuda::DeviceSpanMut<'_, u64>,
) -> Result<()> {
    let elems = |b: usize| b / elem.max(1);
    d.check_lens("gather", idx.len(), usize::MAX, elems(src.len()))?;
    if elems(out.len()) < d.numel() {
        return Err(Error::LengthMismatch {
            op: "gather",
            expected: d.numel(),
            got: elems(out.len()),
        });
    }
    let [one, four] = match elem {
        1 => ["along_gather_e1", "along_gather4_e1"],
        2 => ["along_gather_e2", "along_gather4_e2"],
        4 => ["along_gather_e4", "along_gather4_e4"],
        8 => ["along_gather_e8", "along_gather4_e8"],
        _ => return Err(elem_error("gather", elem)),
    };
    let ptrs = [src.addr(), out.addr(), idx.addr()];
    if d.rows_of_four() && idx.addr() % 16 == 0 && out.addr() % (4 * elem as u64) == 0 {
        return launch(stream, four, ptrs, d, d.numel() / 4, bad);
    }
    launch(stream, one, ptrs, d, d.numel(), bad)
}

/// Queues `scatter` (or, with `add`, `scatter_add`) of `dtype` elements on `stream`:
/// `out[target(i, idx[i])] = vals[i]` (`+=`), `out` and `vals` as bytes. `scatter` takes any
/// dtype, `scatter_add` f64, f32, f16, bf16, i32, i64. A bad index value is skipped and its
/// position lands in `bad[0]` (as [`gpu_gather`]); `out` is then incomplete and must be
/// discarded.
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
pub fn gpu_scatter(
    stream: &genesis_cuda::Stream,
    dtype: crate::DType,
    add: bool,
    out: genesis_cuda::DeviceSpanMut<'_, u8>,
    idx: genesis_cuda::DeviceSpan<'_, i64>,
    vals: genesis_cuda::DeviceSpan<'_, u8>,
    d: &Along,
    bad: genesis_cuda::DeviceSpanMut<'_, u64>,
) -> Result<()> {
    use crate::DType;
    let op = if add { "scatter_add" } else { "scatter" };
    let elem = dtype.size();
    d.check_lens(op, idx.len(), vals.len() / elem, out.len() / elem)?;
    let name = if add {
        match dtype {
            DType::F64 => "along_scatter_add_f64",
            DType::F32 => "along_scatter_add_f32",
            DType::F16 => "along_scatter_add_f16",
            DType::BF16 => "along_scatter_add_bf16",
            DType::I32 => "along_scatter_add_i32",
            DType::I64 => "along_scatter_add_i64",
            _ => {
                return Err(Error::Unsupported {
                    op,
                    reason: format!("element type {dtype}"),
                });
            }
        }
    } else {
        match elem {
            1 => "along_scatter_e1",
            2 => "along_scatter_e2",
            4 => "along_scatter_e4",
            8 => "along_scatter_e8",
            e => return Err(elem_error(op, e)),
        }
    };
    launch(
        stream,
        name,
        [out.addr(), vals.addr(), idx.addr()],
        d,
        d.numel(),
        bad,
    )
}

#[cfg(feature = "cuda")]
fn elem_error(op: &'static str, elem: usize) -> Error {
    Error::Unsupported {
        op,
        reason: format!("{elem}-byte elements"),
    }
}

/// Launches a `gather.cu` kernel over `n` threads' work (the descriptor's positions, or groups
/// of four of them) with pointers `(a, b, idx)` (gather: src, out; scatter: out, vals), the
/// descriptor and `bad`.
#[cfg(feature = "cuda")]
fn launch(
    stream: &genesis_cuda::Stream,
    name: &'static str,
    [a, b, idx]: [u64; 3],
    d: &Along,
    n: usize,
    bad: genesis_cuda::DeviceSpanMut<'_, u64>,
) -> Result<()> {
    use genesis_cuda::{Kernel, LaunchConfig};
    use std::ffi::c_void;

    if n == 0 {
        return Ok(());
    }
    if bad.is_empty() {
        return Err(Error::LengthMismatch {
            op: "along bad word",
            expected: 1,
            got: 0,
        });
    }
    let kernel = Kernel::get(stream.context(), &crate::images::GATHER, name)?;
    let cap = u64::from(stream.context().multiprocessors().max(1)) * 32;
    let config = LaunchConfig::linear((n as u64).div_ceil(256).clamp(1, cap) as u32, 256);
    let (mut pa, mut pb, mut pi, mut n64, mut desc, mut pbad) =
        (a, b, idx, n as u64, *d, bad.addr());
    let mut params: [*mut c_void; 6] = [
        (&raw mut pa).cast(),
        (&raw mut pb).cast(),
        (&raw mut pi).cast(),
        (&raw mut n64).cast(),
        (&raw mut desc).cast(),
        (&raw mut pbad).cast(),
    ];
    // SAFETY: the parameters match `along_<kind>_*(T*, T*, const int64_t*, uint64_t, GxAlong,
    // unsigned long long*)` (`Along` has `GxAlong`'s layout); the callers checked that the
    // index, the other operand and the output hold every offset the descriptor reaches, and the
    // kernels read or write the target only at index values they checked to lie in `0..size`.
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sorted keys of `idx` and the positions a stable sort gives.
    fn sorted(idx: &[i64]) -> (Vec<i64>, Vec<i64>) {
        let mut perm: Vec<i64> = (0..idx.len() as i64).collect();
        perm.sort_by_key(|&p| idx[p as usize]);
        (perm.iter().map(|&p| idx[p as usize]).collect(), perm)
    }

    /// The reference sum by key: the sorted positions grouped by (key, chunk of
    /// `ROWS_BY_KEY_CHUNK`), each group summed from zero in order in f32, a key's groups added
    /// in order, then rounded by `round`.
    fn grouped<T: Copy>(
        keys: &[i64],
        perm: &[i64],
        rows: &[f32],
        cols: usize,
        out: &mut [T],
        round: impl Fn(f32) -> T,
    ) {
        let mut groups: Vec<((i64, usize), Vec<f32>)> = Vec::new();
        for (j, (&k, &p)) in keys.iter().zip(perm).enumerate() {
            let id = (k, j / ROWS_BY_KEY_CHUNK);
            if groups.last().map(|g| g.0) != Some(id) {
                groups.push((id, vec![0.0; cols]));
            }
            let g = &mut groups.last_mut().unwrap().1;
            for c in 0..cols {
                g[c] += rows[p as usize * cols + c];
            }
        }
        let mut i = 0;
        while i < groups.len() {
            let k = groups[i].0.0;
            let mut total = groups[i].1.clone();
            i += 1;
            while i < groups.len() && groups[i].0.0 == k {
                for (t, x) in total.iter_mut().zip(&groups[i].1) {
                    *t += x;
                }
                i += 1;
            }
            for c in 0..cols {
                out[k as usize * cols + c] = round(total[c]);
            }
        }
    }

    /// The sum by key is the sum of each key's chunk-pieces, each in position order from zero
    /// in f32, the pieces in order: the same bits as the grouped reference over generated
    /// indices (repeats, hot keys whose runs cross many chunks, absent keys), f32 and bf16;
    /// rows no key names are left as they were; bad keys, positions and an unsorted order are
    /// errors that write nothing.
    #[test]
    fn rows_by_key_sums_each_key_by_pieces_in_order() {
        use half::bf16;
        use rand::rngs::SmallRng;
        use rand::{Rng, SeedableRng};
        let mut rng = SmallRng::seed_from_u64(9);
        for case in 0..40 {
            let (n, cols, v) = (
                rng.random_range(0..400usize),
                rng.random_range(1..40usize),
                rng.random_range(1..60usize),
            );
            let hot = rng.random_range(1..=v);
            let idx: Vec<i64> = (0..n).map(|_| rng.random_range(0..hot) as i64).collect();
            let rows32: Vec<f32> = (0..n * cols).map(|_| rng.random_range(-3.0..3.0)).collect();
            let (keys, perm) = sorted(&idx);
            let shape = RowsByKey {
                n,
                cols,
                in_rows: n,
                out_rows: v,
            };
            let mut want = vec![7f32; v * cols];
            grouped(&keys, &perm, &rows32, cols, &mut want, |x| x);
            let mut out = vec![7f32; v * cols];
            rows_by_key(&shape, &keys, &perm, &rows32, &mut out).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&out), bits(&want), "case {case}: f32");
            let rows16: Vec<bf16> = rows32.iter().map(|&x| bf16::from_f32(x)).collect();
            let widened: Vec<f32> = rows16.iter().map(|x| x.to_f32()).collect();
            let mut want16 = vec![bf16::ZERO; v * cols];
            grouped(&keys, &perm, &widened, cols, &mut want16, bf16::from_f32);
            let mut out16 = vec![bf16::ZERO; v * cols];
            rows_by_key(&shape, &keys, &perm, &rows16, &mut out16).unwrap();
            assert_eq!(out16, want16, "case {case}: bf16");
        }
        // Errors: nothing written.
        let shape = RowsByKey {
            n: 2,
            cols: 1,
            in_rows: 2,
            out_rows: 3,
        };
        let rows = [1f32, 2.0];
        for (keys, perm) in [
            ([0i64, 3], [0i64, 1]),
            ([0, 1], [0, 2]),
            ([2, 1], [0, 1]),
            ([-1, 0], [0, 1]),
        ] {
            let mut out = [5f32; 3];
            assert!(rows_by_key(&shape, &keys, &perm, &rows, &mut out).is_err());
            assert_eq!(out, [5.0; 3]);
        }
        let mut short = [0f32; 2];
        assert!(rows_by_key(&shape, &[0, 1], &[0, 1], &rows, &mut short).is_err());
    }

    fn contiguous(shape: &[usize]) -> Vec<usize> {
        let mut s = vec![1; shape.len()];
        for i in (0..shape.len().saturating_sub(1)).rev() {
            s[i] = s[i + 1] * shape[i + 1];
        }
        s
    }

    #[test]
    fn groups_of_four_need_the_last_dimension_and_a_contiguous_index() {
        let four = |shape: &[usize], dim: usize, idx: &[usize]| {
            let s = contiguous(shape);
            Along::new(shape, dim, idx, &s, &s, 9)
                .unwrap()
                .rows_of_four()
        };
        assert!(four(&[3, 8], 1, &[8, 1]));
        assert!(
            four(&[1, 4], 1, &[99, 1]),
            "a size-1 dimension's stride is free"
        );
        assert!(!four(&[3, 8], 0, &[8, 1]), "not the last dimension");
        assert!(!four(&[3, 6], 1, &[6, 1]), "6 is not a multiple of 4");
        assert!(!four(&[3, 8], 1, &[16, 1]), "rows of the index apart");
        assert!(!four(&[3, 8], 1, &[8, 2]), "index strided along the row");
        assert!(!Along::new(&[], 0, &[], &[], &[], 1).unwrap().rows_of_four());
    }

    #[test]
    fn gather_scatter_and_scatter_add_along_a_dimension() {
        // src [2, 3]; gather along dim 1 with index [[2, 0], [1, 1]].
        let src = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let idx = [2i64, 0, 1, 1];
        let shape = [2, 2];
        let d = Along::new(&shape, 1, &contiguous(&shape), &[0, 0], &[3, 1], 3).unwrap();
        let mut out = [0f32; 4];
        gather(&src, &idx, &d, &mut out).unwrap();
        assert_eq!(out, [3.0, 1.0, 5.0, 5.0]);
        // scatter the values [10, 20, 30, 40] into zeros [2, 3] along dim 1.
        let vals = [10.0f32, 20.0, 30.0, 40.0];
        let s = Along::new(
            &shape,
            1,
            &contiguous(&shape),
            &contiguous(&shape),
            &[3, 1],
            3,
        )
        .unwrap();
        let mut tgt = [0f32; 6];
        scatter(&mut tgt, &idx, &vals, &s).unwrap();
        assert_eq!(tgt, [20.0, 0.0, 10.0, 0.0, 40.0, 0.0], "last write wins");
        let mut sum = [0f32; 6];
        scatter_add(&mut sum, &idx, &vals, &s).unwrap();
        assert_eq!(sum, [20.0, 0.0, 10.0, 0.0, 70.0, 0.0]);
        // A bad value: an error naming it, nothing written.
        let mut untouched = [7f32; 6];
        let e = scatter(&mut untouched, &[0, 3, 0, 0], &vals, &s).unwrap_err();
        assert!(
            matches!(
                e,
                Error::IndexOutOfRange {
                    position: 1,
                    value: 3,
                    size: 3,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(untouched, [7.0; 6]);
        assert!(gather(&src, &[-1, 0, 0, 0], &d, &mut out).is_err());
        // Short operands are errors, not panics.
        assert!(gather(&src[..4], &idx, &d, &mut out).is_err());
        assert!(scatter(&mut tgt, &idx[..3], &vals, &s).is_err());
    }

    #[test]
    fn descriptors_are_checked() {
        assert!(Along::new(&[2; 9], 0, &[1; 9], &[1; 9], &[1; 9], 2).is_err());
        assert!(Along::new(&[2, 2], 2, &[2, 1], &[2, 1], &[2, 1], 2).is_err());
        assert!(Along::new(&[2, 2], 0, &[2], &[2, 1], &[2, 1], 2).is_err());
        let d = Along::new(&[3, 4], 0, &[4, 1], &[0, 0], &[4, 1], 5).unwrap();
        assert_eq!(d.reach().unwrap(), (12, 1, 20));
        let e = Along::new(&[0, 4], 0, &[4, 1], &[4, 1], &[4, 1], 5).unwrap();
        assert_eq!(e.reach().unwrap(), (0, 0, 0));
    }
}
