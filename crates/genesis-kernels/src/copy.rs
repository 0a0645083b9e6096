//! Descriptors and CPU twins of the copy kernels (`kernels/copy.cu`): strided copies and dtype
//! casts.

use half::{bf16, f16};

use crate::{DType, Error, Result};

/// Most dimensions a strided copy handles (`GX_MAX_DIMS`).
pub const MAX_DIMS: usize = 8;

/// Source and destination layouts of a strided copy, as the kernel takes them (`GxStrided`).
/// Strides and offsets are in elements.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StridedCopy {
    /// Sizes of the dimensions (the first `rank`).
    pub shape: [i64; MAX_DIMS],
    /// Source strides.
    pub src_strides: [i64; MAX_DIMS],
    /// Destination strides.
    pub dst_strides: [i64; MAX_DIMS],
    /// Source offset.
    pub src_offset: i64,
    /// Destination offset.
    pub dst_offset: i64,
    /// Number of dimensions.
    pub rank: i32,
    pad: i32,
}

impl StridedCopy {
    /// A descriptor; fails when the rank exceeds [`MAX_DIMS`], the slices disagree, or a side
    /// with elements to copy reaches below its start (a negative stride walking past the
    /// offset) or past `i64::MAX`.
    pub fn new(
        shape: &[usize],
        src_strides: &[isize],
        src_offset: usize,
        dst_strides: &[isize],
        dst_offset: usize,
    ) -> Result<StridedCopy> {
        let rank = shape.len();
        if rank > MAX_DIMS || src_strides.len() != rank || dst_strides.len() != rank {
            return Err(Error::Unsupported {
                op: "strided_copy",
                reason: format!("rank {rank} (at most {MAX_DIMS}, one stride per dimension)"),
            });
        }
        let mut d = StridedCopy {
            shape: [1; MAX_DIMS],
            src_strides: [0; MAX_DIMS],
            dst_strides: [0; MAX_DIMS],
            src_offset: src_offset as i64,
            dst_offset: dst_offset as i64,
            rank: rank as i32,
            pad: 0,
        };
        for i in 0..rank {
            d.shape[i] = shape[i] as i64;
            d.src_strides[i] = src_strides[i] as i64;
            d.dst_strides[i] = dst_strides[i] as i64;
        }
        // `extents` marks a side that reaches below its start or past i64::MAX.
        let (src_reach, dst_reach) = d.extents();
        for (side, reach, strides, offset) in [
            ("source", src_reach, src_strides, src_offset),
            ("destination", dst_reach, dst_strides, dst_offset),
        ] {
            if reach == usize::MAX {
                return Err(Error::Unsupported {
                    op: "strided_copy",
                    reason: format!(
                        "the {side} layout (shape {shape:?}, strides {strides:?}, offset \
                         {offset}) reaches below its start or past i64::MAX"
                    ),
                });
            }
        }
        Ok(d)
    }

    /// Number of elements copied.
    pub fn numel(&self) -> usize {
        self.shape[..self.rank as usize].iter().product::<i64>() as usize
    }

    /// Visits every (source index, destination index) pair in row-major order.
    pub fn for_each(&self, mut f: impl FnMut(usize, usize)) {
        let rank = self.rank as usize;
        let n = self.numel();
        let mut idx = [0i64; MAX_DIMS];
        let (mut s, mut d) = (self.src_offset, self.dst_offset);
        for _ in 0..n {
            f(s as usize, d as usize);
            self.advance(rank, &mut idx, &mut s, &mut d);
        }
    }

    /// Steps the index `idx` over the first `dims` dimensions (row-major, the last fastest)
    /// by one, moving the source and destination positions `s` and `d` with it.
    fn advance(&self, dims: usize, idx: &mut [i64; MAX_DIMS], s: &mut i64, d: &mut i64) {
        for k in (0..dims).rev() {
            idx[k] += 1;
            *s += self.src_strides[k];
            *d += self.dst_strides[k];
            if idx[k] < self.shape[k] {
                return;
            }
            *s -= self.src_strides[k] * self.shape[k];
            *d -= self.dst_strides[k] * self.shape[k];
            idx[k] = 0;
        }
    }

    /// The same copy with adjacent dimensions merged where both sides walk them contiguously,
    /// and elements widened to the largest of 16, 8, 4 or 2 bytes that the layout allows (the
    /// innermost dimension contiguous on both sides and every stride, offset, size and base
    /// address divisible accordingly): a copy of rows moves 16 bytes an access instead of one
    /// element. Returns the descriptor and its element size; the bytes copied are the same.
    pub fn widened(&self, elem_bytes: usize, src_addr: u64, dst_addr: u64) -> (StridedCopy, usize) {
        let mut d = self.merged();
        let inner = d.rank as usize - 1;
        if d.src_strides[inner] != 1 || d.dst_strides[inner] != 1 {
            return (d, elem_bytes);
        }
        for wide in [16usize, 8, 4, 2] {
            if wide <= elem_bytes || wide % elem_bytes != 0 {
                continue;
            }
            let f = (wide / elem_bytes) as i64;
            let ok = d.shape[inner] % f == 0
                && d.src_offset % f == 0
                && d.dst_offset % f == 0
                && src_addr.is_multiple_of(wide as u64)
                && dst_addr.is_multiple_of(wide as u64)
                && (0..inner).all(|k| d.src_strides[k] % f == 0 && d.dst_strides[k] % f == 0);
            if ok {
                d.shape[inner] /= f;
                for k in 0..inner {
                    d.src_strides[k] /= f;
                    d.dst_strides[k] /= f;
                }
                d.src_offset /= f;
                d.dst_offset /= f;
                return (d, wide);
            }
        }
        (d, elem_bytes)
    }

    /// The same copy in 16-byte vectors when its innermost dimension runs backwards through
    /// the source and forwards through the destination (source stride -1, destination stride
    /// 1, as `flip` makes) and the layout allows (elements of 1, 2, 4 or 8 bytes; the
    /// innermost size, every other stride, the destination's offset and the source's offset
    /// plus one multiples of the vector's elements; both addresses 16-byte aligned): the
    /// descriptor walks vectors (source stride -1 innermost), and the `strided_copy_rev_e*`
    /// kernels write each vector's elements in reverse order. `None` otherwise.
    pub fn reversed_rows(
        &self,
        elem_bytes: usize,
        src_addr: u64,
        dst_addr: u64,
    ) -> Option<StridedCopy> {
        let mut d = self.merged();
        let inner = d.rank as usize - 1;
        if !matches!(elem_bytes, 1 | 2 | 4 | 8)
            || d.src_strides[inner] != -1
            || d.dst_strides[inner] != 1
        {
            return None;
        }
        let f = (16 / elem_bytes) as i64;
        let ok = d.shape[inner] % f == 0
            && (d.src_offset + 1) % f == 0
            && d.dst_offset % f == 0
            && src_addr.is_multiple_of(16)
            && dst_addr.is_multiple_of(16)
            && (0..inner).all(|k| d.src_strides[k] % f == 0 && d.dst_strides[k] % f == 0);
        if !ok {
            return None;
        }
        d.shape[inner] /= f;
        for k in 0..inner {
            d.src_strides[k] /= f;
            d.dst_strides[k] /= f;
        }
        // The vector holding source elements offset - f + 1 ..= offset.
        d.src_offset = (d.src_offset + 1) / f - 1;
        d.dst_offset /= f;
        Some(d)
    }

    /// The same copy with size-1 dimensions dropped and each dimension folded into the next
    /// inner one when both sides step over it by exactly the inner extent.
    fn merged(&self) -> StridedCopy {
        let mut d = *self;
        // Merge: drop size-1 dimensions, then fold each dimension into the next inner one when
        // both sides step over it by exactly the inner extent.
        let mut k = 0usize;
        let mut out = 0usize;
        let rank = d.rank as usize;
        while k < rank {
            if d.shape[k] == 1 && rank > 1 {
                k += 1;
                continue;
            }
            d.shape[out] = d.shape[k];
            d.src_strides[out] = d.src_strides[k];
            d.dst_strides[out] = d.dst_strides[k];
            if out > 0 {
                let p = out - 1;
                if d.src_strides[p] == d.src_strides[out] * d.shape[out]
                    && d.dst_strides[p] == d.dst_strides[out] * d.shape[out]
                {
                    d.shape[p] *= d.shape[out];
                    d.src_strides[p] = d.src_strides[out];
                    d.dst_strides[p] = d.dst_strides[out];
                    k += 1;
                    continue;
                }
            }
            out += 1;
            k += 1;
        }
        let rank = out.max(1);
        if out == 0 {
            d.shape[0] = 1;
            d.src_strides[0] = 1;
            d.dst_strides[0] = 1;
        }
        d.rank = rank as i32;
        for k in rank..MAX_DIMS {
            d.shape[k] = 1;
            d.src_strides[k] = 0;
            d.dst_strides[k] = 0;
        }
        d
    }

    /// The largest source and destination index touched (+1), to check bounds; `usize::MAX`
    /// for a side that reaches below its start or past `i64::MAX` (the public fields can be
    /// set after [`StridedCopy::new`] checked them), which no buffer holds.
    pub fn extents(&self) -> (usize, usize) {
        if self.numel() == 0 {
            return (0, 0);
        }
        let rank = self.rank as usize;
        let reach = |strides: &[i64], off: i64| {
            let (mut low, mut high) = (off as i128, off as i128);
            for (&n, &st) in self.shape[..rank].iter().zip(strides) {
                let span = (n as i128 - 1) * st as i128;
                low += span.min(0);
                high += span.max(0);
            }
            if low < 0 || high >= i64::MAX as i128 {
                usize::MAX
            } else {
                (high + 1) as usize
            }
        };
        (
            reach(&self.src_strides, self.src_offset),
            reach(&self.dst_strides, self.dst_offset),
        )
    }
}

/// The 32-bit form of a [`StridedCopy`] (`GxStrided32`): dimension sizes with the magic
/// numbers that turn division into a multiply-high and a shift.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StridedCopy32 {
    size: [u32; MAX_DIMS],
    magic: [u32; MAX_DIMS],
    shift: [u32; MAX_DIMS],
    src_strides: [i64; MAX_DIMS],
    dst_strides: [i64; MAX_DIMS],
    src_offset: i64,
    dst_offset: i64,
    rank: i32,
    pad: i32,
}

/// Magic number and shift for dividing 31-bit values by `d` (as PyTorch's `IntDivider`).
pub fn magic_divider(d: u32) -> (u32, u32) {
    let d = d.max(1);
    let mut shift = 0u32;
    while (1u64 << shift) < u64::from(d) {
        shift += 1;
    }
    let magic = ((1u64 << 32) * ((1u64 << shift) - u64::from(d))) / u64::from(d) + 1;
    (magic as u32, shift)
}

impl StridedCopy {
    /// The 32-bit form, when every index fits (fewer than 2^31 elements and dimensions).
    pub fn to_32(&self) -> Option<StridedCopy32> {
        if self.numel() >= 1 << 31 {
            return None;
        }
        let mut d = StridedCopy32 {
            size: [1; MAX_DIMS],
            magic: [0; MAX_DIMS],
            shift: [0; MAX_DIMS],
            src_strides: self.src_strides,
            dst_strides: self.dst_strides,
            src_offset: self.src_offset,
            dst_offset: self.dst_offset,
            rank: self.rank,
            pad: 0,
        };
        for k in 0..self.rank as usize {
            let size = u32::try_from(self.shape[k]).ok()?;
            let (m, s) = magic_divider(size);
            d.size[k] = size;
            d.magic[k] = m;
            d.shift[k] = s;
        }
        Some(d)
    }
}

/// How `strided_copy32_rows_e*` walks a copy: a thread a run of `16 / elem` consecutive
/// elements of the innermost dimension, `chunks` runs a row, `items` runs in all (the last run
/// of a row may be short); `magic` and `shift` divide a run's index by `chunks`. With `vec`
/// every whole run is stored as one 16-byte vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowRuns {
    /// Runs in all (rows times `chunks`).
    pub items: u32,
    /// Runs a row.
    pub chunks: u32,
    /// Magic number dividing by `chunks`.
    pub magic: u32,
    /// Shift dividing by `chunks`.
    pub shift: u32,
    /// Whole runs stored as 16-byte vectors: the destination's innermost stride 1, its offset,
    /// every outer stride and its base address aligned to the vector.
    pub vec: bool,
}

impl StridedCopy {
    /// The run-at-a-time walk of this copy for elements of `elem_bytes` (1, 2, 4 or 8) into a
    /// destination at `dst_addr`: `None` when runs do not pay (an innermost dimension shorter
    /// than one run) or the run count does not fit the 31-bit index.
    pub fn row_runs(&self, elem_bytes: usize, dst_addr: u64) -> Option<RowRuns> {
        if !matches!(elem_bytes, 1 | 2 | 4 | 8) || self.rank < 1 {
            return None;
        }
        let v = (16 / elem_bytes) as i64;
        let rank = self.rank as usize;
        let inner = self.shape[rank - 1];
        let n = self.numel() as i64;
        if inner < v || n == 0 {
            return None;
        }
        let chunks = (inner + v - 1) / v;
        let items = (n / inner).checked_mul(chunks)?;
        if items >= 1 << 31 {
            return None;
        }
        let (magic, shift) = magic_divider(chunks as u32);
        let vec = self.dst_strides[rank - 1] == 1
            && dst_addr.is_multiple_of(16)
            && self.dst_offset % v == 0
            && self.dst_strides[..rank - 1].iter().all(|s| s % v == 0);
        Some(RowRuns {
            items: items as u32,
            chunks: chunks as u32,
            magic,
            shift,
            vec,
        })
    }
}

/// The CPU twin of `strided_copy_e*`: `dst[dst_index(i)] = src[src_index(i)]`.
pub fn strided_copy<T: Copy>(src: &[T], dst: &mut [T], desc: &StridedCopy) -> Result<()> {
    let (se, de) = desc.extents();
    if se > src.len() || de > dst.len() {
        return Err(Error::LengthMismatch {
            op: "strided_copy",
            expected: se.max(de),
            got: src.len().min(dst.len()),
        });
    }
    if desc.numel() == 0 {
        return Ok(());
    }
    // Line by line over the merged dimensions: the innermost dimension as one slice copy when
    // it is contiguous on both sides, else a strided loop; the outer index advanced once a
    // line. The same element pairs as `for_each`, in the same order.
    let d = desc.merged();
    let inner = d.rank as usize - 1;
    let (n, ss, ds) = (d.shape[inner], d.src_strides[inner], d.dst_strides[inner]);
    let lines = d.numel() / n as usize;
    let mut idx = [0i64; MAX_DIMS];
    let (mut s, mut t) = (d.src_offset, d.dst_offset);
    for _ in 0..lines {
        if ss == 1 && ds == 1 {
            let (s, t, n) = (s as usize, t as usize, n as usize);
            dst[t..t + n].copy_from_slice(&src[s..s + n]);
        } else {
            for i in 0..n {
                dst[(t + i * ds) as usize] = src[(s + i * ss) as usize];
            }
        }
        d.advance(inner, &mut idx, &mut s, &mut t);
    }
    Ok(())
}

/// The CPU twin of `transpose_e*`: `out[c * rows + r] = input[r * ld_in + c]`.
pub fn transpose<T: Copy>(
    input: &[T],
    out: &mut [T],
    rows: usize,
    cols: usize,
    ld_in: usize,
) -> Result<()> {
    if rows * cols > out.len() || (rows > 0 && (rows - 1) * ld_in + cols > input.len()) {
        return Err(Error::LengthMismatch {
            op: "transpose",
            expected: rows * cols,
            got: out.len(),
        });
    }
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = input[r * ld_in + c];
        }
    }
    Ok(())
}

/// A value on its way through a cast: integers (and bool) as i64, f16/bf16/f32 as f32, f64 as
/// f64, exactly as the kernel's carriers.
#[derive(Debug, Clone, Copy)]
enum Carrier {
    I(i64),
    F(f32),
    D(f64),
}

/// `b` is one element of `kind` (the caller slices `kind`'s size in bytes), so the fixed-size
/// conversions below cannot fail.
fn read(kind: DType, b: &[u8]) -> Carrier {
    match kind {
        DType::Bool => Carrier::I(i64::from(b[0] != 0)),
        DType::U8 => Carrier::I(i64::from(b[0])),
        DType::I8 => Carrier::I(i64::from(b[0] as i8)),
        DType::I16 => Carrier::I(i64::from(i16::from_le_bytes([b[0], b[1]]))),
        DType::I32 => Carrier::I(i64::from(i32::from_le_bytes(
            b[..4].try_into().expect("4 bytes"),
        ))),
        DType::I64 => Carrier::I(i64::from_le_bytes(b[..8].try_into().expect("8 bytes"))),
        DType::F16 => Carrier::F(f16::from_le_bytes([b[0], b[1]]).to_f32()),
        DType::BF16 => Carrier::F(bf16::from_le_bytes([b[0], b[1]]).to_f32()),
        DType::F32 => Carrier::F(f32::from_le_bytes(b[..4].try_into().expect("4 bytes"))),
        DType::F64 => Carrier::D(f64::from_le_bytes(b[..8].try_into().expect("8 bytes"))),
    }
}

/// `x` rounded to f32 with round-to-odd: truncate toward zero and set the last bit when
/// inexact. A second rounding of that to f16 / bf16 (nearest-even) is then correctly rounded,
/// which rounding to nearest first would not be (double rounding).
pub fn f64_to_f32_round_odd(x: f64) -> f32 {
    if !x.is_finite() {
        return x as f32;
    }
    let mut f = x as f32;
    if f64::from(f) == x {
        return f;
    }
    if f.is_infinite() || f64::from(f).abs() > x.abs() {
        // Step one ulp toward zero (for inf this gives MAX).
        f = f32::from_bits(f.to_bits() - 1);
    }
    f32::from_bits(f.to_bits() | 1)
}

fn write(kind: DType, v: Carrier, out: &mut [u8]) {
    // Rust's `as` from floats to integers truncates, saturates and maps NaN to 0; between
    // integers it wraps; from i64 to floats it rounds to nearest-even: the kernel's semantics.
    match kind {
        DType::Bool => {
            out[0] = u8::from(match v {
                Carrier::I(x) => x != 0,
                Carrier::F(x) => x != 0.0,
                Carrier::D(x) => x != 0.0,
            })
        }
        DType::U8 => {
            out[0] = match v {
                Carrier::I(x) => x as u8,
                Carrier::F(x) => x as u8,
                Carrier::D(x) => x as u8,
            }
        }
        DType::I8 => {
            out[0] = (match v {
                Carrier::I(x) => x as i8,
                Carrier::F(x) => x as i8,
                Carrier::D(x) => x as i8,
            }) as u8
        }
        DType::I16 => out[..2].copy_from_slice(
            &(match v {
                Carrier::I(x) => x as i16,
                Carrier::F(x) => x as i16,
                Carrier::D(x) => x as i16,
            })
            .to_le_bytes(),
        ),
        DType::I32 => out[..4].copy_from_slice(
            &(match v {
                Carrier::I(x) => x as i32,
                Carrier::F(x) => x as i32,
                Carrier::D(x) => x as i32,
            })
            .to_le_bytes(),
        ),
        DType::I64 => out[..8].copy_from_slice(
            &(match v {
                Carrier::I(x) => x,
                Carrier::F(x) => x as i64,
                Carrier::D(x) => x as i64,
            })
            .to_le_bytes(),
        ),
        DType::F16 => out[..2].copy_from_slice(
            &(match v {
                Carrier::I(x) => f16::from_f32(x as f32),
                Carrier::F(x) => f16::from_f32(x),
                Carrier::D(x) => f16::from_f32(f64_to_f32_round_odd(x)),
            })
            .to_le_bytes(),
        ),
        DType::BF16 => out[..2].copy_from_slice(
            &(match v {
                Carrier::I(x) => bf16::from_f32(x as f32),
                Carrier::F(x) => bf16::from_f32(x),
                Carrier::D(x) => bf16::from_f32(f64_to_f32_round_odd(x)),
            })
            .to_le_bytes(),
        ),
        DType::F32 => out[..4].copy_from_slice(
            &(match v {
                Carrier::I(x) => x as f32,
                Carrier::F(x) => x,
                Carrier::D(x) => x as f32,
            })
            .to_le_bytes(),
        ),
        DType::F64 => out[..8].copy_from_slice(
            &(match v {
                Carrier::I(x) => x as f64,
                Carrier::F(x) => f64::from(x),
                Carrier::D(x) => x,
            })
            .to_le_bytes(),
        ),
    }
}

/// The CPU twin of `cast_<src>_<dst>` on raw little-endian bytes: `n` elements.
pub fn cast(src_kind: DType, src: &[u8], dst_kind: DType, dst: &mut [u8], n: usize) -> Result<()> {
    let (ss, ds) = (src_kind.size(), dst_kind.size());
    if src.len() < n * ss || dst.len() < n * ds {
        return Err(Error::LengthMismatch {
            op: "cast",
            expected: n,
            got: (src.len() / ss).min(dst.len() / ds),
        });
    }
    for i in 0..n {
        let v = read(src_kind, &src[i * ss..(i + 1) * ss]);
        write(dst_kind, v, &mut dst[i * ds..(i + 1) * ds]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The (source, destination) pairs `strided_copy32_rows_e*` visits, walked as the kernel
    /// walks them (magic divisions included).
    fn run_pairs(d: &StridedCopy, elem: usize, runs: &RowRuns) -> Vec<(i64, i64)> {
        let d32 = d.to_32().unwrap();
        let v = (16 / elem) as u32;
        let rank = d.rank as usize;
        let inner = d.shape[rank - 1] as u32;
        let div = |n: u32, m: u32, s: u32| ((((n as u64 * m as u64) >> 32) + n as u64) >> s) as u32;
        let mut out = vec![];
        for it in 0..runs.items {
            let mut row = div(it, runs.magic, runs.shift);
            let k0 = (it - row * runs.chunks) * v;
            let (mut so, mut doff) = (d.src_offset, d.dst_offset);
            for k in (0..rank - 1).rev() {
                let q = div(row, d32.magic[k], d32.shift[k]);
                let idx = (row - q * d32.size[k]) as i64;
                row = q;
                so += idx * d.src_strides[k];
                doff += idx * d.dst_strides[k];
            }
            for e in 0..v {
                if k0 + e < inner {
                    let k = (k0 + e) as i64;
                    out.push((
                        so + k * d.src_strides[rank - 1],
                        doff + k * d.dst_strides[rank - 1],
                    ));
                }
            }
        }
        out
    }

    #[test]
    fn row_runs_visit_every_element_once() {
        let cases = [
            (
                vec![2usize, 4, 3, 3, 56, 56],
                vec![13_456isize, 3364, 58, 1, 58, 1],
                0usize,
            ),
            (vec![4, 5, 6, 7], vec![1, 4, 20, 120], 3),
            (vec![3, 17], vec![40, 2], 1),
            (vec![2, 9, 33], vec![0, 33, 1], 0),
            (vec![1000], vec![3], 0),
        ];
        for (shape, src_strides, off) in cases {
            let mut dst_strides = vec![0isize; shape.len()];
            let mut step = 1isize;
            for k in (0..shape.len()).rev() {
                dst_strides[k] = step;
                step *= shape[k] as isize;
            }
            let d = StridedCopy::new(&shape, &src_strides, off, &dst_strides, 0).unwrap();
            for elem in [1usize, 2, 4, 8] {
                let (w, we) = d.widened(elem, 0, 0);
                let Some(runs) = w.row_runs(we, 0) else {
                    continue;
                };
                let mut want = vec![];
                w.for_each(|s, t| want.push((s as i64, t as i64)));
                assert_eq!(run_pairs(&w, we, &runs), want, "{shape:?} elem {elem}");
            }
        }
    }

    fn cast1(s: DType, bytes: &[u8], d: DType) -> Vec<u8> {
        let mut out = vec![0u8; d.size()];
        cast(s, bytes, d, &mut out, 1).unwrap();
        out
    }

    #[test]
    fn float_to_int_truncates_saturates_and_zeroes_nan() {
        let f = |x: f32| x.to_le_bytes();
        assert_eq!(
            cast1(DType::F32, &f(-2.7), DType::I32),
            (-2i32).to_le_bytes()
        );
        assert_eq!(
            cast1(DType::F32, &f(1e20), DType::I32),
            i32::MAX.to_le_bytes()
        );
        assert_eq!(
            cast1(DType::F32, &f(f32::NAN), DType::I64),
            0i64.to_le_bytes()
        );
        assert_eq!(cast1(DType::F32, &f(300.0), DType::U8), [255]);
        assert_eq!(cast1(DType::F32, &f(-1.0), DType::U8), [0]);
        assert_eq!(
            cast1(DType::I32, &300i32.to_le_bytes(), DType::U8),
            [44],
            "integers wrap"
        );
        assert_eq!(cast1(DType::F32, &f(f32::NAN), DType::Bool), [1]);
        assert_eq!(cast1(DType::Bool, &[1], DType::F64), 1f64.to_le_bytes());
    }

    #[test]
    fn half_rounding_is_nearest_even() {
        // 2049 is a tie between 2048 and 2050 in f16: even mantissa wins (2048).
        let h = cast1(DType::I32, &2049i32.to_le_bytes(), DType::F16);
        assert_eq!(f16::from_le_bytes([h[0], h[1]]).to_f32(), 2048.0);
        let b = cast1(
            DType::F64,
            &(1.0f64 + 2f64.powi(-8) + 2f64.powi(-30)).to_le_bytes(),
            DType::BF16,
        );
        assert_eq!(
            bf16::from_le_bytes([b[0], b[1]]).to_f64(),
            1.0 + 2f64.powi(-7),
            "above the tie rounds up"
        );
    }

    #[test]
    fn round_odd_gives_correct_double_rounding() {
        // Exhaustive over the f16 grid's ties neighbourhood: compare with exact rounding done in
        // integer arithmetic on the f64 mantissa for values in [1, 2).
        for k in 0..1024u64 {
            for delta in [-1i64, 0, 1] {
                // x = 1 + (2k + 1) / 2^11 + delta * 2^-40: around each f16 tie in [1, 2).
                let x = 1.0 + (2 * k + 1) as f64 / 2048.0 + delta as f64 * 2f64.powi(-40);
                let got = f16::from_f32(f64_to_f32_round_odd(x)).to_f64();
                let lo = 1.0 + k as f64 / 1024.0;
                let hi = lo + 1.0 / 1024.0;
                let want = match delta {
                    -1 => lo,
                    1 => hi,
                    _ => {
                        if k % 2 == 0 {
                            lo
                        } else {
                            hi
                        }
                    }
                };
                assert_eq!(got, want, "x = {x}");
            }
        }
        assert_eq!(
            f64_to_f32_round_odd(1e300),
            f32::from_bits(f32::MAX.to_bits())
        );
        assert_eq!(f64_to_f32_round_odd(-0.0).to_bits(), (-0.0f32).to_bits());
        assert!(f64_to_f32_round_odd(f64::NAN).is_nan());
    }

    #[test]
    fn magic_division_is_exact() {
        for d in [
            1u32,
            2,
            3,
            5,
            7,
            10,
            31,
            32,
            33,
            100,
            1000,
            4095,
            8192,
            65537,
            1 << 20,
            (1 << 31) - 1,
        ] {
            let (m, s) = magic_divider(d);
            for n in [
                0u32,
                1,
                2,
                d - 1,
                d,
                d + 1,
                12345,
                999_999,
                (1 << 31) - 1,
                (1 << 31) - 2,
            ] {
                let q = ((u64::from(n) * u64::from(m)) >> 32) as u32;
                let q = (u64::from(q) + u64::from(n)) >> s;
                assert_eq!(q, u64::from(n / d), "{n} / {d}");
            }
        }
    }

    #[test]
    fn widened_copies_move_the_same_bytes() {
        use rand::{Rng, SeedableRng};
        // Copies `desc` of `elem`-byte elements between byte buffers.
        fn copy_bytes(desc: &StridedCopy, elem: usize, src: &[u8], dst: &mut [u8]) {
            desc.for_each(|s, d| {
                dst[d * elem..(d + 1) * elem].copy_from_slice(&src[s * elem..(s + 1) * elem])
            });
        }
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut widened_some = 0;
        for _ in 0..2000 {
            let elem = [1usize, 2, 4, 8][rng.random_range(0..4)];
            let rank = rng.random_range(1..=4);
            let shape: Vec<usize> = (0..rank)
                .map(|_| [1, 2, 3, 4, 8, 16][rng.random_range(0..6)])
                .collect();
            // Each side is a view into a larger row-major parent, its dimensions possibly
            // permuted: strides and an offset in elements.
            let side = |rng: &mut rand::rngs::SmallRng| {
                let parent: Vec<usize> = shape
                    .iter()
                    .map(|&n| n + [0, 0, 1, 4][rng.random_range(0..4)])
                    .collect();
                let mut order: Vec<usize> = (0..rank).collect();
                if rng.random_bool(0.3) {
                    order.swap(0, rank - 1);
                }
                let mut strides = vec![0isize; rank];
                let mut acc = 1usize;
                for &k in order.iter().rev() {
                    strides[k] = acc as isize;
                    acc *= parent[k];
                }
                let offset = rng.random_range(0..4) * [1, 2, 4][rng.random_range(0..3)];
                (strides, offset, acc + offset)
            };
            let (ss, so, slen) = side(&mut rng);
            let (ds, dof, dlen) = side(&mut rng);
            let desc = StridedCopy::new(&shape, &ss, so, &ds, dof).unwrap();
            let src: Vec<u8> = (0..slen * elem).map(|_| rng.random()).collect();
            let mut want = vec![0u8; dlen * elem];
            copy_bytes(&desc, elem, &src, &mut want);
            let align = [1u64, 16, 32][rng.random_range(0..3)];
            let (w, wide) = desc.widened(elem, align * 4096, 4096);
            assert_eq!(w.numel() * wide, desc.numel() * elem, "{desc:?} -> {w:?}");
            widened_some += usize::from(wide > elem);
            let mut got = vec![0u8; dlen * elem];
            copy_bytes(&w, wide, &src, &mut got);
            assert_eq!(got, want, "{desc:?} ({elem} B) -> {w:?} ({wide} B)");
        }
        assert!(widened_some > 200, "only {widened_some} cases widened");
    }

    #[test]
    fn reversed_rows_move_the_same_bytes() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
        let mut reversed = 0;
        for _ in 0..2000 {
            let elem = [1usize, 2, 4, 8][rng.random_range(0..4)];
            let rank = rng.random_range(1..=3);
            let shape: Vec<usize> = (0..rank)
                .map(|_| [1, 2, 3, 8, 16, 32, 48][rng.random_range(0..7)])
                .collect();
            // The source: a row-major parent (rows padded), flipped along the innermost
            // dimension and maybe others; the destination: row-major from an offset.
            let parent: Vec<usize> = shape
                .iter()
                .map(|&n| n + [0, 0, 1, 16][rng.random_range(0..4)])
                .collect();
            let mut ss = vec![0isize; rank];
            let mut acc = 1usize;
            for k in (0..rank).rev() {
                ss[k] = acc as isize;
                acc *= parent[k];
            }
            let base = [0usize, 1, 16, 17][rng.random_range(0..4)];
            let mut so = base as isize;
            for k in 0..rank {
                if k == rank - 1 || rng.random_bool(0.3) {
                    so += (shape[k] as isize - 1) * ss[k];
                    ss[k] = -ss[k];
                }
            }
            let dof = [0usize, 3, 16][rng.random_range(0..3)];
            let mut ds = vec![0isize; rank];
            let mut dacc = 1usize;
            for k in (0..rank).rev() {
                ds[k] = dacc as isize;
                dacc *= shape[k];
            }
            let desc = StridedCopy::new(&shape, &ss, so as usize, &ds, dof).unwrap();
            let src: Vec<u8> = (0..(acc + base) * elem).map(|_| rng.random()).collect();
            let mut want = vec![0u8; (dacc + dof) * elem];
            desc.for_each(|s, d| {
                want[d * elem..(d + 1) * elem].copy_from_slice(&src[s * elem..(s + 1) * elem])
            });
            let align = [1u64, 16][rng.random_range(0..2)];
            let Some(r) = desc.reversed_rows(elem, align * 4096, 4096) else {
                continue;
            };
            reversed += 1;
            assert_eq!(r.numel() * 16, desc.numel() * elem, "{desc:?} -> {r:?}");
            // As the kernel: each 16-byte vector read, its elements reversed, written.
            let mut got = vec![0u8; want.len()];
            r.for_each(|s, d| {
                let v = &src[s * 16..(s + 1) * 16];
                for (j, e) in v.chunks(elem).rev().enumerate() {
                    got[d * 16 + j * elem..d * 16 + (j + 1) * elem].copy_from_slice(e);
                }
            });
            assert_eq!(got, want, "{desc:?} ({elem} B) -> {r:?}");
        }
        assert!(reversed > 200, "only {reversed} cases reversed in vectors");
    }

    #[test]
    fn strided_copy_and_transpose() {
        let src: Vec<u32> = (0..12).collect();
        let mut dst = vec![0u32; 12];
        // [3,4] read transposed as [4,3].
        let d = StridedCopy::new(&[4, 3], &[1, 4], 0, &[3, 1], 0).unwrap();
        strided_copy(&src, &mut dst, &d).unwrap();
        assert_eq!(dst, vec![0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]);
        let mut t = vec![0u32; 12];
        transpose(&src, &mut t, 3, 4, 4).unwrap();
        assert_eq!(t, dst);
        assert!(StridedCopy::new(&[1; 9], &[1; 9], 0, &[1; 9], 0).is_err());
        let too_far = StridedCopy::new(&[4], &[4], 0, &[1], 0).unwrap();
        assert!(strided_copy(&src, &mut dst, &too_far).is_err());
        // Negative strides may not walk below the start, on either side.
        assert!(StridedCopy::new(&[4], &[-1], 3, &[1], 0).is_ok());
        assert!(StridedCopy::new(&[4], &[-1], 2, &[1], 0).is_err());
        assert!(StridedCopy::new(&[2, 3], &[3, 1], 0, &[1, -2], 3).is_err());
        assert!(StridedCopy::new(&[0, 3], &[-5, 1], 0, &[1, 1], 0).is_ok());
        assert!(StridedCopy::new(&[3], &[isize::MAX], 0, &[1], 0).is_err());
    }

    /// The line-by-line copy against the element-by-element walk (`for_each`) on generated
    /// layouts: permuted, sliced, broadcast (stride 0) and reversed (negative stride) sources,
    /// permuted and padded destinations, dimensions of 0 and 1.
    #[test]
    fn strided_copy_moves_what_the_element_walk_moves() {
        use rand::rngs::SmallRng;
        use rand::{Rng, SeedableRng};
        let mut rng = SmallRng::seed_from_u64(3);
        for case in 0..400 {
            let rank = rng.random_range(1..=5usize);
            let shape: Vec<usize> = (0..rank)
                .map(|_| [0usize, 1, 1, 2, 3, 4, 7][rng.random_range(0..7)])
                .collect();
            // A dense source of padded extents, read through a permutation, with some
            // dimensions broadcast or reversed.
            let mut order: Vec<usize> = (0..rank).collect();
            for i in (1..rank).rev() {
                order.swap(i, rng.random_range(0..=i));
            }
            let mut src_strides = vec![0isize; rank];
            let mut step = 1isize;
            for &k in order.iter().rev() {
                src_strides[k] = step;
                step *= shape[k] as isize + rng.random_range(0..2i64) as isize;
            }
            let mut src_offset = rng.random_range(0..3usize);
            for k in 0..rank {
                match rng.random_range(0..6) {
                    0 => src_strides[k] = 0,
                    1 if shape[k] > 0 => {
                        src_offset += (shape[k] - 1) * src_strides[k] as usize;
                        src_strides[k] = -src_strides[k];
                    }
                    _ => {}
                }
            }
            let mut dst_strides = vec![0isize; rank];
            let mut step = 1isize;
            for k in (0..rank).rev() {
                dst_strides[k] = step;
                step *= shape[k] as isize + rng.random_range(0..2i64) as isize;
            }
            let dst_offset = rng.random_range(0..3usize);
            let d = StridedCopy::new(&shape, &src_strides, src_offset, &dst_strides, dst_offset)
                .unwrap();
            let (se, de) = d.extents();
            let src: Vec<u32> = (0..se as u32).map(|x| x.wrapping_mul(2654435761)).collect();
            let mut want = vec![7u32; de + 2];
            d.for_each(|s, t| want[t] = src[s]);
            let mut got = vec![7u32; de + 2];
            strided_copy(&src, &mut got, &d).unwrap();
            assert_eq!(
                got, want,
                "case {case}: {shape:?} {src_strides:?} {dst_strides:?}"
            );
        }
    }
}
