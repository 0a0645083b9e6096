//! CPU twins of the advanced-indexing kernels (`kernels/index.cu`), with the kernels'
//! semantics on host slices: every function here is the twin of the launcher of the same name
//! in [`crate::index`].
//!
//! Where a kernel trusts its inputs (index values in range, groups that partition the
//! positions), the twin checks them and returns an error instead: an offset outside its slice
//! is [`Error::IndexOutOfRange`] (`position` the result element, `value` the offset, `size`
//! the slice's length in elements), a short slice [`Error::LengthMismatch`]. A twin that fails
//! may have written part of its output, as the kernel would have.
//!
//! The gathers and scatters walk the result in row-major order a line at a time: when the
//! result's last dimension is not an index dimension, a line is that dimension (one index
//! position, one source stride), copied as one block when the stride is 1.

use super::{IndexDesc, Keys, Rows16, Strided};
use crate::{Error, Result};

/// `Err(LengthMismatch)` when `got < need`.
fn at_least(op: &'static str, need: usize, got: usize) -> Result<()> {
    super::at_least(op, need, got)
}

fn out_of_range(op: &'static str, position: usize, value: i64, size: usize) -> Error {
    Error::IndexOutOfRange {
        op,
        position,
        value,
        size: size as i64,
    }
}

/// One line of result elements: `i0..i0 + len`, all at index position `b`, element `j` at
/// source offset `off + j * step`.
#[derive(Debug, Clone, Copy)]
struct Line {
    i0: usize,
    off: i64,
    b: usize,
    len: usize,
    step: i64,
}

impl Line {
    /// The offset of element `j`, checked against `0..size`.
    fn at(&self, op: &'static str, j: usize, size: usize) -> Result<usize> {
        let off = self.off.wrapping_add((j as i64).wrapping_mul(self.step));
        if off < 0 || off as u64 >= size as u64 {
            return Err(out_of_range(op, self.i0 + j, off, size));
        }
        Ok(off as usize)
    }

    /// The offsets of the whole line as one block, when its stride is 1 and it lies in
    /// `0..size`.
    fn block(&self, size: usize) -> Option<std::ops::Range<usize>> {
        let end = self.off.checked_add(self.len as i64)?;
        (self.step == 1 && self.off >= 0 && end as u64 <= size as u64)
            .then_some(self.off as usize..end as usize)
    }
}

/// Calls `f` for each line of the `desc.check()` result elements, in order (the kernels'
/// `gx_offset`, stepped rather than divided); `idx` holds the `n_adv * nb` index values.
fn walk_lines(
    op: &'static str,
    desc: &IndexDesc,
    idx: &[i64],
    mut f: impl FnMut(Line) -> Result<()>,
) -> Result<usize> {
    let n = desc.check()?;
    at_least(op, desc.index_len(), idx.len())?;
    if n == 0 {
        return Ok(0);
    }
    let rank = desc.rank as usize;
    let (pos, k) = (desc.pos as usize, desc.k as usize);
    let (nb, n_adv) = (desc.nb as usize, desc.n_adv as usize);
    let shape = |r: usize| desc.res_shape[r] as usize;
    let is_adv = |r: usize| r >= pos && r < pos + k;
    let mut bmul = [0usize; super::MAX_INDEX_DIMS];
    let mut m = 1usize;
    for r in (pos..pos + k).rev() {
        bmul[r] = m;
        m *= shape(r);
    }
    let (line, step, outer) = if rank > 0 && !is_adv(rank - 1) {
        (shape(rank - 1), desc.res_stride[rank - 1], rank - 1)
    } else {
        (1, 0, rank)
    };
    let mut coord = [0usize; super::MAX_INDEX_DIMS];
    let (mut base, mut b) = (desc.base, 0usize);
    for l in 0..n / line {
        let mut off = base;
        for a in 0..n_adv {
            let v = idx[a * nb + b];
            off = off.wrapping_add(v.wrapping_mul(desc.adv_stride[a]));
        }
        f(Line {
            i0: l * line,
            off,
            b,
            len: line,
            step,
        })?;
        for r in (0..outer).rev() {
            coord[r] += 1;
            if is_adv(r) {
                b += bmul[r];
            } else {
                base = base.wrapping_add(desc.res_stride[r]);
            }
            if coord[r] < shape(r) {
                break;
            }
            if is_adv(r) {
                b -= bmul[r] * shape(r);
            } else {
                base = base.wrapping_sub(desc.res_stride[r].wrapping_mul(shape(r) as i64));
            }
            coord[r] = 0;
        }
    }
    Ok(n)
}

/// `dst[i] = src[offset(i)]` for the `desc` result elements (`dst` holds at least the
/// result): the twin of [`gather`](crate::index), on elements of any type (the kernels move
/// elements of 1, 2, 4 or 8 bytes as unsigned integers).
pub fn gather<T: Copy>(src: &[T], dst: &mut [T], desc: &IndexDesc, idx: &[i64]) -> Result<()> {
    let op = "index gather";
    let size = src.len();
    let n = desc.check()?;
    at_least(op, n, dst.len())?;
    walk_lines(op, desc, idx, |line| {
        let out = &mut dst[line.i0..line.i0 + line.len];
        if let Some(r) = line.block(size) {
            out.copy_from_slice(&src[r]);
            return Ok(());
        }
        for (j, o) in out.iter_mut().enumerate() {
            *o = src[line.at(op, j, size)?];
        }
        Ok(())
    })?;
    Ok(())
}

/// `dst[offset(i)] = vals[i]` for the `desc` result elements whose index position is not
/// marked in `dead` (one byte per position), in order: the twin of
/// [`scatter`](crate::index), on elements of any type.
pub fn scatter<T: Copy>(
    dst: &mut [T],
    vals: &[T],
    desc: &IndexDesc,
    idx: &[i64],
    dead: &[u8],
) -> Result<()> {
    let op = "index scatter";
    let size = dst.len();
    let n = desc.check()?;
    at_least(op, n, vals.len())?;
    at_least(op, desc.nb as usize, dead.len())?;
    walk_lines(op, desc, idx, |line| {
        if dead[line.b] != 0 {
            return Ok(());
        }
        let v = &vals[line.i0..line.i0 + line.len];
        if let Some(r) = line.block(size) {
            dst[r].copy_from_slice(v);
            return Ok(());
        }
        for (j, &x) in v.iter().enumerate() {
            dst[line.at(op, j, size)?] = x;
        }
        Ok(())
    })?;
    Ok(())
}

/// An element type of [`scatter_add`]: the kernels' `GxAdd` (integers wrap; half types add in
/// f32 and round once; bool is a logical or on 0/1 bytes).
pub trait IndexAdd: Copy {
    /// `a + b` as the kernel adds.
    fn index_add(a: Self, b: Self) -> Self;
}

macro_rules! int_add {
    ($($t:ty),*) => {$(
        impl IndexAdd for $t {
            fn index_add(a: Self, b: Self) -> Self {
                a.wrapping_add(b)
            }
        }
    )*};
}
int_add!(i8, i16, i32, i64);

/// `u8` is also the carrier of bool: [`scatter_add`] takes a flag for the logical or.
impl IndexAdd for u8 {
    fn index_add(a: Self, b: Self) -> Self {
        a.wrapping_add(b)
    }
}

impl IndexAdd for f32 {
    fn index_add(a: Self, b: Self) -> Self {
        a + b
    }
}

impl IndexAdd for f64 {
    fn index_add(a: Self, b: Self) -> Self {
        a + b
    }
}

impl IndexAdd for half::f16 {
    fn index_add(a: Self, b: Self) -> Self {
        half::f16::from_f32(a.to_f32() + b.to_f32())
    }
}

impl IndexAdd for half::bf16 {
    fn index_add(a: Self, b: Self) -> Self {
        half::bf16::from_f32(a.to_f32() + b.to_f32())
    }
}

/// The accumulate groups on the host (see [`Groups`](crate::index)): for each representative
/// position `b` (`dead[b] == 0`), its members are `members[start[b] .. start[b] + len[b]]`.
#[derive(Debug, Clone, Copy)]
pub struct HostGroups<'a> {
    /// `nb` bytes: non-zero for positions that are not their group's representative.
    pub dead: &'a [u8],
    /// `nb` values: where each group starts in `members`.
    pub start: &'a [i64],
    /// `nb` values: each group's length.
    pub len: &'a [i64],
    /// The positions, grouped.
    pub members: &'a [i64],
}

/// `dst[offset] += vals[...]` for the `desc` result elements, each representative summing its
/// group's contributions in order onto the current value: the twin of
/// [`scatter_add`](crate::index) for every dtype but bool ([`scatter_add_bool`]).
pub fn scatter_add<T: IndexAdd>(
    dst: &mut [T],
    vals: &[T],
    desc: &IndexDesc,
    idx: &[i64],
    groups: HostGroups<'_>,
) -> Result<()> {
    scatter_add_with(dst, vals, desc, idx, groups, T::index_add)
}

/// [`scatter_add`] for bool bytes: the sum is a logical or, and every byte written is 0 or 1
/// (the kernel's `GxAdd<bool>`).
pub fn scatter_add_bool(
    dst: &mut [u8],
    vals: &[u8],
    desc: &IndexDesc,
    idx: &[i64],
    groups: HostGroups<'_>,
) -> Result<()> {
    scatter_add_with(dst, vals, desc, idx, groups, |a, b| {
        u8::from(a != 0 || b != 0)
    })
}

fn scatter_add_with<T: Copy>(
    dst: &mut [T],
    vals: &[T],
    desc: &IndexDesc,
    idx: &[i64],
    groups: HostGroups<'_>,
    add: impl Fn(T, T) -> T,
) -> Result<()> {
    let op = "index scatter_add";
    let n = desc.check()?;
    let nb = desc.nb as usize;
    at_least(op, n, vals.len())?;
    for g in [groups.start.len(), groups.len.len()] {
        at_least(op, nb, g)?;
    }
    at_least(op, nb, groups.dead.len())?;
    let (pos, k, rank) = (desc.pos as usize, desc.k as usize, desc.rank as usize);
    let after: usize = desc.res_shape[pos + k..rank]
        .iter()
        .map(|&s| s as usize)
        .product();
    let size = dst.len();
    walk_lines(op, desc, idx, |line| {
        if groups.dead[line.b] != 0 {
            return Ok(());
        }
        let (s, l) = (groups.start[line.b], groups.len[line.b]);
        let members = usize::try_from(s)
            .ok()
            .zip(usize::try_from(l).ok())
            .and_then(|(s, l)| groups.members.get(s..s.checked_add(l)?))
            .ok_or_else(|| out_of_range(op, line.b, s, groups.members.len()))?;
        for j in 0..line.len {
            let i = line.i0 + j;
            let o = line.at(op, j, size)?;
            let mut acc = dst[o];
            for &m in members {
                // The kernel's ((before * nb) + m) * after + a, which is i + (m - b) * after.
                let vi = usize::try_from(m)
                    .ok()
                    .filter(|&m| m < nb)
                    .and_then(|m| (i + m * after).checked_sub(line.b * after))
                    .filter(|&v| v < vals.len())
                    .ok_or_else(|| out_of_range(op, i, m, nb))?;
                acc = add(acc, vals[vi]);
            }
            dst[o] = acc;
        }
        Ok(())
    })?;
    Ok(())
}

/// The byte range of row `r` of `rows` at unit offset `units`, checked against `len` bytes.
fn row_bytes(
    op: &'static str,
    r: usize,
    units: i64,
    rows: &Rows16,
    len: usize,
) -> Result<std::ops::Range<usize>> {
    let bytes = rows.row_units.saturating_mul(16);
    usize::try_from(units)
        .ok()
        .and_then(|u| u.checked_mul(16))
        .and_then(|s| Some(s..s.checked_add(bytes)?))
        .filter(|range| range.end <= len)
        .ok_or_else(|| out_of_range(op, r, units, len / 16))
}

/// The source unit offset of the row at index value `v`.
fn row_units(rows: &Rows16, v: i64) -> i64 {
    (rows.base_units as i64).wrapping_add(v.wrapping_mul(rows.stride_units as i64))
}

/// Row `r` of `dst` is the source row at `idx[r]`, `rows.row_units` 16-byte units each: the
/// twin of [`gather_rows16`](crate::index).
pub fn gather_rows16(src: &[u8], dst: &mut [u8], idx: &[i64], rows: &Rows16) -> Result<()> {
    let op = "gather_rows16";
    if rows.nrows == 0 || rows.row_units == 0 {
        return Ok(());
    }
    at_least(op, rows.nrows, idx.len())?;
    let w = rows.row_units * 16;
    at_least(op, rows.nrows.saturating_mul(w), dst.len())?;
    for (r, out) in dst.chunks_exact_mut(w).take(rows.nrows).enumerate() {
        let s = row_bytes(op, r, row_units(rows, idx[r]), rows, src.len())?;
        out.copy_from_slice(&src[s]);
    }
    Ok(())
}

/// The row at `idx[r]` of `dst` is row `r` of `vals`, for the rows not marked in `dead`: the
/// twin of [`scatter_rows16`](crate::index).
pub fn scatter_rows16(
    dst: &mut [u8],
    vals: &[u8],
    idx: &[i64],
    dead: &[u8],
    rows: &Rows16,
) -> Result<()> {
    let op = "scatter_rows16";
    if rows.nrows == 0 || rows.row_units == 0 {
        return Ok(());
    }
    at_least(op, rows.nrows, idx.len())?;
    at_least(op, rows.nrows, dead.len())?;
    let w = rows.row_units * 16;
    at_least(op, rows.nrows.saturating_mul(w), vals.len())?;
    for (r, v) in vals.chunks_exact(w).take(rows.nrows).enumerate() {
        if dead[r] != 0 {
            continue;
        }
        let d = row_bytes(op, r, row_units(rows, idx[r]), rows, dst.len())?;
        dst[d].copy_from_slice(v);
    }
    Ok(())
}

/// A host index array as it is (the twin of [`RawIndex`](crate::index)): its values as bytes
/// from the first, int32 or int64, `stride` elements apart, indexing a dimension of `size`.
#[derive(Debug, Clone, Copy)]
pub struct HostRawIndex<'a> {
    /// The values, from the first.
    pub values: &'a [u8],
    /// int32 values (else int64).
    pub i32: bool,
    /// Distance between values, in elements (not negative).
    pub stride: i64,
    /// Size of the indexed dimension.
    pub size: usize,
    /// Whether negative values count from the end (`x[idx]`); when false a negative value is
    /// out of range (PyTorch's `index_select`).
    pub wrap: bool,
}

impl HostRawIndex<'_> {
    /// Value `r`, wrapped when negative and `wrap`; `None` when it is (then) outside
    /// `0..size`. An error when the array does not hold it.
    fn get(&self, r: usize) -> Result<Option<i64>> {
        let vsize = if self.i32 { 4 } else { 8 };
        let at = usize::try_from(self.stride)
            .ok()
            .and_then(|s| s.checked_mul(r)?.checked_mul(vsize));
        let bytes = at
            .and_then(|a| self.values.get(a..a.checked_add(vsize)?))
            .ok_or(Error::LengthMismatch {
                op: "gather_rows16_checked",
                expected: at.unwrap_or(usize::MAX).saturating_add(vsize),
                got: self.values.len(),
            })?;
        let mut v = if self.i32 {
            i64::from(i32::from_le_bytes(bytes.try_into().unwrap_or([0; 4])))
        } else {
            i64::from_le_bytes(bytes.try_into().unwrap_or([0; 8]))
        };
        let size = self.size as i64;
        if self.wrap && v < 0 {
            v += size;
        }
        Ok((0..size).contains(&v).then_some(v))
    }
}

/// Copies row `r` of `dst` from the source row at value `r` of `idx` (wrapped when negative
/// and `idx.wrap`) for every value in `0..idx.size`; returns whether every value was (a row whose value is
/// out of range is not copied): the twin of [`gather_rows16_checked`](crate::index), whose
/// flag is the negation of this result.
pub fn gather_rows16_checked(
    src: &[u8],
    dst: &mut [u8],
    idx: &HostRawIndex<'_>,
    rows: &Rows16,
) -> Result<bool> {
    let op = "gather_rows16_checked";
    if rows.nrows == 0 || rows.row_units == 0 {
        return Ok(true);
    }
    let w = rows.row_units * 16;
    at_least(op, rows.nrows.saturating_mul(w), dst.len())?;
    let mut clean = true;
    for (r, out) in dst.chunks_exact_mut(w).take(rows.nrows).enumerate() {
        let Some(v) = idx.get(r)? else {
            clean = false;
            continue;
        };
        let s = row_bytes(op, r, row_units(rows, v), rows, src.len())?;
        out.copy_from_slice(&src[s]);
    }
    Ok(clean)
}

/// `out[b]` = the value at position `b` of `src` (int32 when `i32`, else int64, as bytes) read
/// through `layout`, wrapped when negative; a value outside `0..size` is written as 0 and
/// `*bad` becomes the smallest such `b` if it is smaller as an unsigned word (the kernel's
/// `u64`, here in an `i64`: -1 is all ones, no position): the twin of
/// [`normalise`](crate::index) (`out.len()` positions).
pub fn normalise(
    i32: bool,
    src: &[u8],
    layout: &Strided,
    size: usize,
    out: &mut [i64],
    bad: &mut i64,
) -> Result<()> {
    let op = "index normalise";
    let nb = out.len();
    if nb == 0 {
        return Ok(());
    }
    layout.check()?;
    let rank = layout.rank as usize;
    let vsize = if i32 { 4 } else { 8 };
    let count: usize = layout.shape[..rank].iter().map(|&s| s as usize).product();
    at_least(op, nb, count)?;
    at_least(op, layout.reach().saturating_mul(vsize), src.len())?;
    let mut coord = [0i64; super::MAX_INDEX_DIMS];
    let mut off = layout.offset;
    let s = size as i64;
    for (b, o) in out.iter_mut().enumerate() {
        let at = off as usize * vsize;
        let bytes = &src[at..at + vsize];
        let mut v = if i32 {
            i64::from(i32::from_le_bytes(bytes.try_into().unwrap_or([0; 4])))
        } else {
            i64::from_le_bytes(bytes.try_into().unwrap_or([0; 8]))
        };
        if v < 0 {
            v += s;
        }
        if v < 0 || v >= s {
            if (*bad as u64) > b as u64 {
                *bad = b as i64;
            }
            v = 0;
        }
        *o = v;
        for r in (0..rank).rev() {
            coord[r] += 1;
            off += layout.stride[r];
            if coord[r] < layout.shape[r] {
                break;
            }
            off -= layout.stride[r] * layout.shape[r];
            coord[r] = 0;
        }
    }
    Ok(())
}

/// The dead-position marks of an assignment through `keys.n_adv` normalised index arrays of
/// `dead.len()` positions in `idx`: `winner` (one zeroed word per key) receives each key's last
/// position plus one; `dead[b]` is 1 unless `b` is its key's last position, and 1 everywhere
/// when a word of `bad` is set (not all ones, -1): the twin of [`dead_positions`](crate::index)
/// (the kernel's `u64` words, here `i64`).
pub fn dead_positions(
    idx: &[i64],
    keys: &Keys,
    winner: &mut [i64],
    bad: &[i64],
    dead: &mut [u8],
) -> Result<()> {
    let op = "index dead_positions";
    let nb = dead.len();
    if nb == 0 {
        return Ok(());
    }
    let n_adv = usize::try_from(keys.n_adv)
        .ok()
        .filter(|&a| a <= super::MAX_INDEX_DIMS)
        .ok_or_else(|| Error::Unsupported {
            op,
            reason: format!("{} index arrays", keys.n_adv),
        })?;
    at_least(op, n_adv.saturating_mul(nb), idx.len())?;
    let key = |b: usize| -> Result<usize> {
        let k = (0..n_adv).fold(0i64, |k, a| {
            k.wrapping_add(idx[a * nb + b].wrapping_mul(keys.mul[a]))
        });
        usize::try_from(k)
            .ok()
            .filter(|&k| k < winner.len())
            .ok_or_else(|| out_of_range(op, b, k, winner.len()))
    };
    let mut keyed = Vec::with_capacity(nb);
    for b in 0..nb {
        keyed.push(key(b)?);
    }
    for (b, &k) in keyed.iter().enumerate() {
        winner[k] = winner[k].max(b as i64 + 1);
    }
    let err = bad.iter().any(|&w| w != -1);
    for (b, (d, &k)) in dead.iter_mut().zip(&keyed).enumerate() {
        *d = u8::from(err || winner[k] != b as i64 + 1);
    }
    Ok(())
}

/// The coordinates of the row-major positions `lin` over `shape` (its `rank` sizes), `n =
/// lin.len()`: coordinate `d` of `lin[i]` at `out[i * rank + d]` when `rows` (`[n, rank]`),
/// else at `out[d * n + i]`; the twin of [`unravel`](crate::index). A size of 0 with
/// positions to split is an error (the kernel's division by zero).
pub fn unravel(lin: &[i64], shape: &Strided, rows: bool, out: &mut [i64]) -> Result<()> {
    let op = "index unravel";
    let n = lin.len();
    if n == 0 {
        return Ok(());
    }
    let rank = usize::try_from(shape.rank)
        .ok()
        .filter(|&r| r <= super::MAX_INDEX_DIMS)
        .ok_or_else(|| Error::Unsupported {
            op,
            reason: format!("rank {}", shape.rank),
        })?;
    at_least(op, rank.saturating_mul(n), out.len())?;
    if shape.shape[..rank].iter().any(|&s| s <= 0) {
        return Err(Error::Unsupported {
            op,
            reason: "a dimension of size 0".into(),
        });
    }
    for (i, &l) in lin.iter().enumerate() {
        let mut rem = l as u64;
        for r in (0..rank).rev() {
            let sz = shape.shape[r] as u64;
            out[if rows { i * rank + r } else { r * n + i }] = (rem % sz) as i64;
            rem /= sz;
        }
    }
    Ok(())
}
