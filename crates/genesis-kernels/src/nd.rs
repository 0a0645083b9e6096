//! Binary ops, comparisons and `where` over operands read in place through their layouts
//! (`<op>_nd_<T>`, `<cmp>_nd_<T>`, `where_nd_e<N>` in `elementwise.cu`): the descriptors and
//! their CPU twins.
//!
//! Each operand has a stride per output dimension (0 where it is broadcast) and an offset; the
//! right operand may be a scalar instead. The output is contiguous. The descriptor merges
//! adjacent dimensions that both operands walk contiguously and drops dimensions of size 1, so
//! a contiguous operand is one dimension and a row broadcast `[n, c] + [c]` is two.

use crate::copy::magic_divider;
use crate::{BinaryOp, CompareOp, Element, Error, Result};

/// Most dimensions of a [`BinaryNd`] (`GX_ND_DIMS`).
pub const ND_DIMS: usize = 8;

/// Output dimensions and operand strides of an `_nd` kernel (`GxBinaryNd`, same layout).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BinaryNd {
    size: [u32; ND_DIMS],
    magic: [u32; ND_DIMS],
    shift: [u32; ND_DIMS],
    a_strides: [i64; ND_DIMS],
    b_strides: [i64; ND_DIMS],
    a_offset: i64,
    b_offset: i64,
    rank: i32,
    vec: i32,
}

/// The right operand of a binary op: elements read through the descriptor's strides, or one
/// value for every position.
#[derive(Debug, Clone, Copy)]
pub enum Rhs<S, T> {
    /// Elements of a buffer (a host slice or a device span).
    Tensor(S),
    /// One value, passed to the kernel as an argument.
    Scalar(T),
}

/// The elements of an iteration over `shape`: 0 when a size is 0 (whatever the others), else
/// their product, which one launch must index in 32 bits (under 2^31).
fn launch_numel(op: &'static str, shape: &[usize]) -> Result<usize> {
    if shape.contains(&0) {
        return Ok(0);
    }
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .filter(|&n| n < 1 << 31)
        .ok_or_else(|| Error::Unsupported {
            op,
            reason: format!("{shape:?} has 2^31 elements or more"),
        })
}

impl BinaryNd {
    /// The descriptor of an output of `shape` (fewer than 2^31 elements) with operand `a` at
    /// `a_strides` from element `a_offset`, and `b` likewise (`None`: a scalar). Strides are in
    /// elements, one per dimension of `shape`.
    pub fn new(
        shape: &[usize],
        a_strides: &[isize],
        a_offset: usize,
        b: Option<(&[isize], usize)>,
    ) -> Result<BinaryNd> {
        let unsupported = |reason: String| Error::Unsupported {
            op: "binary_nd",
            reason,
        };
        let rank = shape.len();
        let b_strides = b.map(|(s, _)| s);
        if a_strides.len() != rank || b_strides.is_some_and(|s| s.len() != rank) {
            return Err(unsupported(format!(
                "one stride per dimension of {shape:?}"
            )));
        }
        // No elements (a 0 among the sizes, the others whatever they are): one dimension of
        // size 0, nothing merged or multiplied.
        let empty = shape.contains(&0);
        let numel = launch_numel("binary_nd", shape)?;
        // (size, a stride, b stride) from the innermost dimension out, merged.
        let mut dims: Vec<(usize, i64, i64)> = Vec::with_capacity(rank);
        for k in (0..rank).rev() {
            if empty {
                break;
            }
            let (size, sa) = (shape[k], a_strides[k] as i64);
            let sb = b_strides.map_or(0, |s| s[k] as i64);
            if size == 1 {
                continue;
            }
            match dims.last_mut() {
                Some((inner, ia, ib)) if sa == *ia * *inner as i64 && sb == *ib * *inner as i64 => {
                    *inner *= size;
                }
                _ => dims.push((size, sa, sb)),
            }
        }
        if dims.is_empty() {
            dims.push((numel, 0, 0));
        }
        if dims.len() > ND_DIMS {
            return Err(unsupported(format!(
                "{} dimensions after merging (at most {ND_DIMS})",
                dims.len()
            )));
        }
        let mut d = BinaryNd {
            size: [1; ND_DIMS],
            magic: [0; ND_DIMS],
            shift: [0; ND_DIMS],
            a_strides: [0; ND_DIMS],
            b_strides: [0; ND_DIMS],
            a_offset: a_offset as i64,
            b_offset: b.map_or(0, |(_, o)| o as i64),
            rank: dims.len() as i32,
            vec: 0,
        };
        for (k, &(size, sa, sb)) in dims.iter().rev().enumerate() {
            let size = size as u32;
            let (m, s) = magic_divider(size);
            d.size[k] = size;
            d.magic[k] = m;
            d.shift[k] = s;
            d.a_strides[k] = sa;
            d.b_strides[k] = sb;
        }
        Ok(d)
    }

    /// Number of output elements.
    pub fn numel(&self) -> usize {
        self.dims().map(|k| self.size[k] as usize).product()
    }

    /// Number of dimensions after merging.
    pub fn rank(&self) -> usize {
        self.rank as usize
    }

    fn dims(&self) -> std::ops::Range<usize> {
        0..self.rank as usize
    }

    /// The lowest and one past the highest element of `a` (`false`) or `b` (`true`) read.
    fn reach(&self, b: bool) -> (i64, i64) {
        let (strides, offset) = if b {
            (&self.b_strides, self.b_offset)
        } else {
            (&self.a_strides, self.a_offset)
        };
        if self.numel() == 0 {
            return (offset, offset);
        }
        let (mut lo, mut hi) = (offset, offset);
        for k in self.dims() {
            let span = (i64::from(self.size[k]) - 1) * strides[k];
            if span < 0 {
                lo += span;
            } else {
                hi += span;
            }
        }
        (lo, hi + 1)
    }

    /// Checks that every element read lies in operands of `a_len` and `b_len` elements
    /// (`None`: a scalar `b`) and that the output holds `out_len` elements.
    pub fn check(&self, a_len: usize, b_len: Option<usize>, out_len: usize) -> Result<()> {
        let fits = |(lo, hi): (i64, i64), len: usize| lo >= 0 && hi <= len as i64;
        let n = self.numel();
        if out_len != n {
            return Err(Error::LengthMismatch {
                op: "binary_nd",
                expected: n,
                got: out_len,
            });
        }
        if n == 0 {
            return Ok(());
        }
        let bad = |len: usize, (lo, hi): (i64, i64)| Error::Unsupported {
            op: "binary_nd",
            reason: format!("reads elements {lo}..{hi} of an operand of {len}"),
        };
        if !fits(self.reach(false), a_len) {
            return Err(bad(a_len, self.reach(false)));
        }
        if let Some(b_len) = b_len
            && !fits(self.reach(true), b_len)
        {
            return Err(bad(b_len, self.reach(true)));
        }
        Ok(())
    }

    /// Whether the kernel may work in groups of 16 bytes for elements of `elem` bytes, given
    /// whether each operand's first element and the output are 16-byte aligned (`b_aligned`
    /// `None` for a scalar): the innermost size is a multiple of the group, every operand's
    /// innermost stride is 0 or 1, and an operand read with stride 1 starts every group on a
    /// 16-byte boundary.
    pub fn vector_ok(
        &self,
        elem: usize,
        a_aligned: bool,
        b_aligned: Option<bool>,
        out_aligned: bool,
    ) -> bool {
        let v = (16 / elem) as i64;
        let inner = self.rank as usize - 1;
        let operand_ok = |strides: &[i64; ND_DIMS], offset: i64, aligned: bool| match strides[inner]
        {
            0 => true,
            1 => {
                aligned && offset % v == 0 && self.dims().all(|k| strides[k] % v == 0 || k == inner)
            }
            _ => false,
        };
        out_aligned
            && i64::from(self.size[inner]) % v == 0
            && operand_ok(&self.a_strides, self.a_offset, a_aligned)
            && b_aligned.is_none_or(|al| operand_ok(&self.b_strides, self.b_offset, al))
    }

    /// Sets the kernel's vector mode (see [`BinaryNd::vector_ok`]).
    pub fn set_vector(&mut self, on: bool) {
        self.vec = i32::from(on);
    }

    /// Whether both operands are contiguous runs in output order (one dimension, stride 1; a
    /// scalar `b` counts as contiguous): the form of the plain kernels.
    pub fn contiguous(&self) -> Option<(usize, Option<usize>)> {
        let flat = |s: i64| s == 1 || self.size[0] == 1;
        (self.rank == 1 && flat(self.a_strides[0])).then_some(())?;
        let b = if flat(self.b_strides[0]) {
            Some(self.b_offset as usize)
        } else {
            None
        };
        Some((self.a_offset as usize, b))
    }

    /// Whether `a` is read at the output's own positions (offset 0, row-major strides): then
    /// the output may be `a` itself, each element read and written by one thread.
    pub fn a_is_output(&self) -> bool {
        if self.numel() == 0 {
            return true;
        }
        let mut expected = 1i64;
        for k in self.dims().rev() {
            if self.size[k] > 1 && self.a_strides[k] != expected {
                return false;
            }
            expected *= i64::from(self.size[k]);
        }
        self.a_offset == 0
    }

    /// Visits `(output index, a offset, b offset)` in output order.
    pub fn for_each(&self, f: impl FnMut(usize, usize, usize)) {
        let rows = self.numel() / self.inner().max(1);
        self.for_each_rows(0, rows, f);
    }

    /// Elements of the innermost dimension (1 for a 0-d descriptor): a row.
    fn inner(&self) -> usize {
        match self.rank as usize {
            0 => 1,
            r => self.size[r - 1] as usize,
        }
    }

    /// `f(r0, r1, block)` for blocks of whole rows of `out` (the output, contiguous, `numel`
    /// elements): one block on this thread when small, else blocks of about 16 Ki elements on
    /// rayon's threads. Every element is computed as alone: the same bits either way.
    fn for_row_blocks<T: Send>(&self, out: &mut [T], f: impl Fn(usize, usize, &mut [T]) + Sync) {
        use rayon::prelude::*;
        let (n, inner) = (self.numel(), self.inner().max(1));
        let rows = n / inner;
        if n < crate::softmax::PARALLEL_MIN || rows < 2 {
            f(0, rows, out);
            return;
        }
        let per = (16384 / inner).max(1);
        out[..n]
            .par_chunks_mut(per * inner)
            .enumerate()
            .for_each(|(c, block)| {
                let r0 = c * per;
                f(r0, r0 + block.len() / inner, block)
            });
    }

    /// [`BinaryNd::for_each`] over rows `r0..r1` only (positions `r0 * inner ..`): the
    /// offsets of row `r0` from its multi-index, then the same walk.
    fn for_each_rows(&self, r0: usize, r1: usize, mut f: impl FnMut(usize, usize, usize)) {
        let n = self.numel();
        let rank = self.rank as usize;
        if n == 0 || r0 >= r1 {
            return;
        }
        // Row by row: the innermost dimension is a plain loop, the others advance once a row.
        let inner = if rank == 0 {
            1
        } else {
            self.size[rank - 1] as usize
        };
        let (sa, sb) = if rank == 0 {
            (0, 0)
        } else {
            (self.a_strides[rank - 1], self.b_strides[rank - 1])
        };
        let outer = rank.saturating_sub(1);
        let mut idx = [0u32; ND_DIMS];
        let (mut oa, mut ob) = (self.a_offset, self.b_offset);
        // Row r0's multi-index over the outer dimensions (row-major).
        let mut rest = r0;
        for k in (0..outer).rev() {
            let size = self.size[k] as usize;
            idx[k] = (rest % size) as u32;
            rest /= size;
            oa += self.a_strides[k] * i64::from(idx[k]);
            ob += self.b_strides[k] * i64::from(idx[k]);
        }
        let mut i = r0 * inner;
        let end = (r1 * inner).min(n);
        while i < end {
            let (mut a, mut b) = (oa, ob);
            for j in 0..inner {
                f(i + j, a as usize, b as usize);
                a += sa;
                b += sb;
            }
            i += inner;
            for k in (0..outer).rev() {
                idx[k] += 1;
                oa += self.a_strides[k];
                ob += self.b_strides[k];
                if idx[k] < self.size[k] {
                    break;
                }
                oa -= self.a_strides[k] * i64::from(self.size[k]);
                ob -= self.b_strides[k] * i64::from(self.size[k]);
                idx[k] = 0;
            }
        }
    }
}

/// The CPU twin of `<op>_nd_<T>`: `out[i] = op(a[offset_a(i)], b[offset_b(i)] or the scalar)`.
pub fn binary_nd<T: Element>(
    op: BinaryOp,
    desc: &BinaryNd,
    a: &[T],
    b: Rhs<&[T], T>,
    out: &mut [T],
) -> Result<()> {
    crate::cpu::supports::<T>(op)?;
    let b_len = match b {
        Rhs::Tensor(s) => Some(s.len()),
        Rhs::Scalar(_) => None,
    };
    desc.check(a.len(), b_len, out.len())?;
    // One loop per op, the op a constant in it (no per-element dispatch).
    fn run<T: Element>(
        desc: &BinaryNd,
        a: &[T],
        b: Rhs<&[T], T>,
        out: &mut [T],
        f: impl Fn(T, T) -> T + Sync,
    ) {
        // Blocks of whole rows (the output is contiguous), over rayon's threads when many.
        desc.for_row_blocks(out, |r0, r1, out| {
            let base = r0 * desc.inner();
            match b {
                Rhs::Tensor(b) => {
                    desc.for_each_rows(r0, r1, |i, ia, ib| out[i - base] = f(a[ia], b[ib]))
                }
                Rhs::Scalar(s) => {
                    desc.for_each_rows(r0, r1, |i, ia, _| out[i - base] = f(a[ia], s))
                }
            }
        });
    }
    match op {
        BinaryOp::Add => run(desc, a, b, out, |x, y| T::binary(BinaryOp::Add, x, y)),
        BinaryOp::Sub => run(desc, a, b, out, |x, y| T::binary(BinaryOp::Sub, x, y)),
        BinaryOp::Mul => run(desc, a, b, out, |x, y| T::binary(BinaryOp::Mul, x, y)),
        BinaryOp::Div => run(desc, a, b, out, |x, y| T::binary(BinaryOp::Div, x, y)),
        other => run(desc, a, b, out, |x, y| T::binary(other, x, y)),
    }
    Ok(())
}

/// The CPU twin of an `_nd` kernel run in place: `a_out[i] = op(a_out[i], b[b(i)] or the
/// scalar)`, for a descriptor whose `a` is the output ([`BinaryNd::a_is_output`]).
pub fn binary_nd_assign<T: Element>(
    op: BinaryOp,
    desc: &BinaryNd,
    a_out: &mut [T],
    b: Rhs<&[T], T>,
) -> Result<()> {
    crate::cpu::supports::<T>(op)?;
    if !desc.a_is_output() {
        return Err(Error::Unsupported {
            op: "binary_nd_assign",
            reason: "the left operand is not read at the output's positions".into(),
        });
    }
    let b_len = match b {
        Rhs::Tensor(s) => Some(s.len()),
        Rhs::Scalar(_) => None,
    };
    desc.check(a_out.len(), b_len, a_out.len())?;
    desc.for_row_blocks(a_out, |r0, r1, out| {
        let base = r0 * desc.inner();
        match b {
            Rhs::Tensor(b) => desc.for_each_rows(r0, r1, |i, _, ib| {
                out[i - base] = T::binary(op, out[i - base], b[ib])
            }),
            Rhs::Scalar(s) => desc.for_each_rows(r0, r1, |i, _, _| {
                out[i - base] = T::binary(op, out[i - base], s)
            }),
        }
    });
    Ok(())
}

/// The CPU twin of `<cmp>_nd_<T>`: `out[i] = a[offset_a(i)] op (b[offset_b(i)] or the
/// scalar)` as a bool byte (0 or 1), the comparison of [`Element::compare`].
pub fn compare_nd<T: Element>(
    op: CompareOp,
    desc: &BinaryNd,
    a: &[T],
    b: Rhs<&[T], T>,
    out: &mut [u8],
) -> Result<()> {
    let b_len = match b {
        Rhs::Tensor(s) => Some(s.len()),
        Rhs::Scalar(_) => None,
    };
    desc.check(a.len(), b_len, out.len())?;
    match b {
        Rhs::Tensor(b) => {
            desc.for_each(|i, ia, ib| out[i] = u8::from(T::compare(op, a[ia], b[ib])));
        }
        Rhs::Scalar(s) => desc.for_each(|i, ia, _| out[i] = u8::from(T::compare(op, a[ia], s))),
    }
    Ok(())
}

/// Output dimensions and operand strides of `where_nd_e<N>` (`GxWhereNd`, same layout): the
/// condition and both values read in place through their strides (0 where broadcast), merged
/// like a [`BinaryNd`]'s; the output is contiguous.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WhereNd {
    size: [u32; ND_DIMS],
    magic: [u32; ND_DIMS],
    shift: [u32; ND_DIMS],
    c_strides: [i64; ND_DIMS],
    a_strides: [i64; ND_DIMS],
    b_strides: [i64; ND_DIMS],
    c_offset: i64,
    a_offset: i64,
    b_offset: i64,
    rank: i32,
    pad: i32,
}

impl WhereNd {
    /// The descriptor of an output of `shape` (fewer than 2^31 elements) with the condition at
    /// `cond` (strides, offset) and the values at `a` and `b` (`None`: a scalar, whose strides
    /// count as 0). Strides are in elements, one per dimension of `shape`.
    pub fn new(
        shape: &[usize],
        cond: (&[isize], usize),
        a: Option<(&[isize], usize)>,
        b: Option<(&[isize], usize)>,
    ) -> Result<WhereNd> {
        let unsupported = |reason: String| Error::Unsupported {
            op: "where_nd",
            reason,
        };
        let rank = shape.len();
        let strides_of = |o: Option<(&[isize], usize)>, k: usize| o.map_or(0, |(s, _)| s[k] as i64);
        if cond.0.len() != rank
            || a.is_some_and(|(s, _)| s.len() != rank)
            || b.is_some_and(|(s, _)| s.len() != rank)
        {
            return Err(unsupported(format!(
                "one stride per dimension of {shape:?}"
            )));
        }
        // No elements: one dimension of size 0, as `BinaryNd::new`.
        let empty = shape.contains(&0);
        let numel = launch_numel("where_nd", shape)?;
        // (size, [cond, a, b] strides) from the innermost dimension out, merged.
        let mut dims: Vec<(usize, [i64; 3])> = Vec::with_capacity(rank);
        for k in (0..rank).rev() {
            if empty {
                break;
            }
            let size = shape[k];
            let st = [cond.0[k] as i64, strides_of(a, k), strides_of(b, k)];
            if size == 1 {
                continue;
            }
            match dims.last_mut() {
                Some((inner, is)) if (0..3).all(|j| st[j] == is[j] * *inner as i64) => {
                    *inner *= size;
                }
                _ => dims.push((size, st)),
            }
        }
        if dims.is_empty() {
            dims.push((numel, [0; 3]));
        }
        if dims.len() > ND_DIMS {
            return Err(unsupported(format!(
                "{} dimensions after merging (at most {ND_DIMS})",
                dims.len()
            )));
        }
        let mut d = WhereNd {
            size: [1; ND_DIMS],
            magic: [0; ND_DIMS],
            shift: [0; ND_DIMS],
            c_strides: [0; ND_DIMS],
            a_strides: [0; ND_DIMS],
            b_strides: [0; ND_DIMS],
            c_offset: cond.1 as i64,
            a_offset: a.map_or(0, |(_, o)| o as i64),
            b_offset: b.map_or(0, |(_, o)| o as i64),
            rank: dims.len() as i32,
            pad: 0,
        };
        for (k, &(size, st)) in dims.iter().rev().enumerate() {
            let size = size as u32;
            let (m, s) = magic_divider(size);
            d.size[k] = size;
            d.magic[k] = m;
            d.shift[k] = s;
            d.c_strides[k] = st[0];
            d.a_strides[k] = st[1];
            d.b_strides[k] = st[2];
        }
        Ok(d)
    }

    /// Number of output elements.
    pub fn numel(&self) -> usize {
        (0..self.rank as usize)
            .map(|k| self.size[k] as usize)
            .product()
    }

    /// The lowest and one past the highest element read through `strides` from `offset`.
    fn reach(&self, strides: &[i64; ND_DIMS], offset: i64) -> (i64, i64) {
        if self.numel() == 0 {
            return (offset, offset);
        }
        let (mut lo, mut hi) = (offset, offset);
        let rank = self.rank as usize;
        for (size, stride) in self.size[..rank].iter().zip(&strides[..rank]) {
            let span = (i64::from(*size) - 1) * stride;
            if span < 0 {
                lo += span;
            } else {
                hi += span;
            }
        }
        (lo, hi + 1)
    }

    /// Checks that every element read lies in a condition of `c_len` elements and values of
    /// `a_len` and `b_len` (`None`: a scalar), and that the output holds `out_len`.
    pub fn check(
        &self,
        c_len: usize,
        a_len: Option<usize>,
        b_len: Option<usize>,
        out_len: usize,
    ) -> Result<()> {
        let n = self.numel();
        if out_len != n {
            return Err(Error::LengthMismatch {
                op: "where_nd",
                expected: n,
                got: out_len,
            });
        }
        if n == 0 {
            return Ok(());
        }
        let operands = [
            (Some(c_len), &self.c_strides, self.c_offset),
            (a_len, &self.a_strides, self.a_offset),
            (b_len, &self.b_strides, self.b_offset),
        ];
        for (len, strides, offset) in operands {
            let Some(len) = len else { continue };
            let (lo, hi) = self.reach(strides, offset);
            if lo < 0 || hi > len as i64 {
                return Err(Error::Unsupported {
                    op: "where_nd",
                    reason: format!("reads elements {lo}..{hi} of an operand of {len}"),
                });
            }
        }
        Ok(())
    }

    /// Visits `(output index, cond offset, a offset, b offset)` in output order.
    pub fn for_each(&self, mut f: impl FnMut(usize, usize, usize, usize)) {
        let rows = self.numel() / self.inner().max(1);
        self.for_each_rows(0, rows, |i, [c, a, b]| {
            f(i, c as usize, a as usize, b as usize)
        });
    }

    /// Elements of the innermost dimension (1 for a 0-d descriptor): a row.
    fn inner(&self) -> usize {
        match self.rank as usize {
            0 => 1,
            r => self.size[r - 1] as usize,
        }
    }

    /// [`WhereNd::for_each`] over rows `r0..r1` only (positions `r0 * inner ..`): the offsets
    /// of row `r0` from its multi-index, then row by row, the innermost dimension a plain loop
    /// and the others advanced once a row.
    fn for_each_rows(&self, r0: usize, r1: usize, mut f: impl FnMut(usize, [i64; 3])) {
        let rank = self.rank as usize;
        if self.numel() == 0 || r0 >= r1 {
            return;
        }
        let inner = self.inner();
        let step = match rank {
            0 => [0; 3],
            r => [
                self.c_strides[r - 1],
                self.a_strides[r - 1],
                self.b_strides[r - 1],
            ],
        };
        let outer = rank.saturating_sub(1);
        let mut idx = [0u32; ND_DIMS];
        let mut o = [self.c_offset, self.a_offset, self.b_offset];
        let mut rest = r0;
        for k in (0..outer).rev() {
            let size = self.size[k] as usize;
            idx[k] = (rest % size) as u32;
            rest /= size;
            let st = [self.c_strides[k], self.a_strides[k], self.b_strides[k]];
            for (o, s) in o.iter_mut().zip(st) {
                *o += s * i64::from(idx[k]);
            }
        }
        for r in r0..r1 {
            let mut at = o;
            for j in 0..inner {
                f(r * inner + j, at);
                for (a, s) in at.iter_mut().zip(step) {
                    *a += s;
                }
            }
            for k in (0..outer).rev() {
                idx[k] += 1;
                let st = [self.c_strides[k], self.a_strides[k], self.b_strides[k]];
                for (o, s) in o.iter_mut().zip(st) {
                    *o += s;
                }
                if idx[k] < self.size[k] {
                    break;
                }
                for (o, s) in o.iter_mut().zip(st) {
                    *o -= s * i64::from(self.size[k]);
                }
                idx[k] = 0;
            }
        }
    }
}

/// The CPU twin of `where_nd_e<N>`: `out[i] = cond[c(i)] != 0 ? a[a(i)] : b[b(i)]`, a scalar
/// value standing for every position of its side.
pub fn where_nd<T: Copy + Send + Sync>(
    desc: &WhereNd,
    cond: &[u8],
    a: Rhs<&[T], T>,
    b: Rhs<&[T], T>,
    out: &mut [T],
) -> Result<()> {
    let len = |r: &Rhs<&[T], T>| match r {
        Rhs::Tensor(s) => Some(s.len()),
        Rhs::Scalar(_) => None,
    };
    desc.check(cond.len(), len(&a), len(&b), out.len())?;
    let pick = |r: &Rhs<&[T], T>, at: usize| match r {
        Rhs::Tensor(s) => s[at],
        Rhs::Scalar(v) => *v,
    };
    // Blocks of whole rows of the (contiguous) output, over rayon's threads when many; each
    // element is picked alone, so the result does not depend on the split.
    use rayon::prelude::*;
    let (n, inner) = (desc.numel(), desc.inner().max(1));
    let rows = n / inner;
    let block = |r0: usize, r1: usize, out: &mut [T]| {
        let base = r0 * inner;
        desc.for_each_rows(r0, r1, |i, [ic, ia, ib]| {
            out[i - base] = if cond[ic as usize] != 0 {
                pick(&a, ia as usize)
            } else {
                pick(&b, ib as usize)
            };
        });
    };
    if n < crate::softmax::PARALLEL_MIN || rows < 2 {
        block(0, rows, out);
    } else {
        let per = (16384 / inner).max(1);
        out[..n]
            .par_chunks_mut(per * inner)
            .enumerate()
            .for_each(|(c, chunk)| {
                let r0 = c * per;
                block(r0, r0 + chunk.len() / inner, chunk)
            });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Broadcast and strided binary ops of many elements (row blocks over rayon's threads),
    /// out of place and in place, against each output's operands found by its multi-index.
    #[test]
    fn row_blocks_read_every_position_right() {
        // (shape, a strides, b strides): a transposed `a` against a broadcast row, a
        // broadcast column against a contiguous `b`, a 4-d mix with an odd inner size.
        let cases: [(&[usize], &[isize], &[isize]); 3] = [
            (&[300, 257], &[1, 300], &[0, 1]),
            (&[257, 300], &[1, 0], &[300, 1]),
            (
                &[3, 7, 41, 53],
                &[7 * 41 * 53, 41 * 53, 53, 1],
                &[0, 41, 1, 0],
            ),
        ];
        for (shape, sa, sb) in cases {
            let n: usize = shape.iter().product();
            let span = |st: &[isize]| -> usize {
                1 + shape
                    .iter()
                    .zip(st)
                    .map(|(&d, &s)| (d - 1) * s as usize)
                    .sum::<usize>()
            };
            let a: Vec<f32> = (0..span(sa) + 3)
                .map(|i| (i % 97) as f32 * 0.5 - 20.0)
                .collect();
            let b: Vec<f32> = (0..span(sb) + 1)
                .map(|i| (i % 89) as f32 * 0.25 + 1.0)
                .collect();
            let desc = BinaryNd::new(shape, sa, 3, Some((sb, 1))).unwrap();
            let mut out = vec![0f32; n];
            binary_nd(BinaryOp::Sub, &desc, &a, Rhs::Tensor(&b[..]), &mut out).unwrap();
            let at = |i: usize, st: &[isize], off: usize| -> usize {
                let mut rest = i;
                let mut o = off;
                for (&d, &s) in shape.iter().zip(st).rev() {
                    o += (rest % d) * s as usize;
                    rest /= d;
                }
                o
            };
            for i in 0..n {
                let want = a[at(i, sa, 3)] - b[at(i, sb, 1)];
                assert_eq!(out[i].to_bits(), want.to_bits(), "{shape:?} at {i}");
            }
            // In place: `a` the output itself (contiguous), `b` broadcast.
            let contiguous: Vec<isize> = {
                let mut st = vec![1isize; shape.len()];
                for k in (0..shape.len() - 1).rev() {
                    st[k] = st[k + 1] * shape[k + 1] as isize;
                }
                st
            };
            let desc = BinaryNd::new(shape, &contiguous, 0, Some((sb, 1))).unwrap();
            let mut io: Vec<f32> = (0..n).map(|i| (i % 13) as f32).collect();
            let before = io.clone();
            binary_nd_assign(BinaryOp::Mul, &desc, &mut io, Rhs::Tensor(&b[..])).unwrap();
            for i in 0..n {
                let want = before[i] * b[at(i, sb, 1)];
                assert_eq!(io[i].to_bits(), want.to_bits(), "{shape:?} in place at {i}");
            }
        }
    }

    #[test]
    fn compare_and_where_read_operands_in_place() {
        // [3, 4] against a [4] row (broadcast) and a scalar, then where over a column
        // condition [3, 1] with a transposed value and a scalar.
        let a: Vec<f32> = (0..12).map(|x| x as f32).collect();
        let row = [1.0f32, 5.0, f32::NAN, 11.0];
        let d = BinaryNd::new(&[3, 4], &[4, 1], 0, Some((&[0, 1], 0))).unwrap();
        let mut out = vec![9u8; 12];
        compare_nd(CompareOp::Lt, &d, &a, Rhs::Tensor(&row[..]), &mut out).unwrap();
        let want: Vec<u8> = (0..12).map(|i| u8::from(a[i] < row[i % 4])).collect();
        assert_eq!(out, want);
        let d = BinaryNd::new(&[3, 4], &[4, 1], 0, None).unwrap();
        compare_nd(CompareOp::Ge, &d, &a, Rhs::Scalar(6.5), &mut out).unwrap();
        assert_eq!(
            out,
            (0..12)
                .map(|i| u8::from(i as f32 >= 6.5))
                .collect::<Vec<_>>()
        );

        let cond = [1u8, 0, 1];
        let t: Vec<i64> = (0..12).collect(); // read as the transpose of a [4, 3]
        let w = WhereNd::new(&[3, 4], (&[1, 0], 0), Some((&[1, 3], 0)), None).unwrap();
        let mut got = vec![0i64; 12];
        where_nd(&w, &cond, Rhs::Tensor(&t[..]), Rhs::Scalar(-1), &mut got).unwrap();
        let want: Vec<i64> = (0..12)
            .map(|i| {
                if cond[i / 4] != 0 {
                    t[(i % 4) * 3 + i / 4]
                } else {
                    -1
                }
            })
            .collect();
        assert_eq!(got, want);
        // A read past an operand is refused before anything is written.
        let bad = WhereNd::new(&[3, 4], (&[1, 0], 1), None, None).unwrap();
        assert!(where_nd::<i64>(&bad, &cond, Rhs::Scalar(0), Rhs::Scalar(1), &mut got).is_err());
        // Contiguous operands merge into one dimension.
        let flat = WhereNd::new(
            &[2, 3],
            (&[3, 1], 0),
            Some((&[3, 1], 2)),
            Some((&[3, 1], 0)),
        )
        .unwrap();
        assert_eq!(flat.rank, 1);
    }

    /// `where_nd` (row blocks, over rayon's threads when large) against each output's
    /// operands found by its multi-index, on generated layouts: broadcast, permuted and offset
    /// conditions and values, scalar sides, small and large outputs.
    #[test]
    fn where_rows_pick_what_each_multi_index_names() {
        use rand::rngs::SmallRng;
        use rand::{Rng, SeedableRng};
        let mut rng = SmallRng::seed_from_u64(12);
        for case in 0..200 {
            let rank = rng.random_range(0..=4usize);
            let big = case % 5 == 0;
            let shape: Vec<usize> = (0..rank)
                .map(|k| {
                    if big && k + 2 >= rank {
                        rng.random_range(100..300)
                    } else {
                        [1usize, 2, 3, 5][rng.random_range(0..4)]
                    }
                })
                .collect();
            // Strides of a dense buffer in a random dimension order, some broadcast (0).
            let layout = |rng: &mut SmallRng| -> (Vec<isize>, usize) {
                let mut order: Vec<usize> = (0..rank).collect();
                for i in (1..rank).rev() {
                    order.swap(i, rng.random_range(0..=i));
                }
                let mut st = vec![0isize; rank];
                let mut step = 1isize;
                for &k in order.iter().rev() {
                    st[k] = if rng.random_range(0..4) == 0 { 0 } else { step };
                    step *= shape[k] as isize;
                }
                (st, rng.random_range(0..3))
            };
            let (cs, co) = layout(&mut rng);
            let (as_, ao) = layout(&mut rng);
            let (bs, bo) = layout(&mut rng);
            let scalar_b = rng.random_bool(0.3);
            let w = WhereNd::new(
                &shape,
                (&cs, co),
                Some((&as_, ao)),
                (!scalar_b).then_some((&bs[..], bo)),
            )
            .unwrap();
            let n: usize = shape.iter().product();
            let len = n + 3;
            let cond: Vec<u8> = (0..len).map(|_| rng.random_range(0..2)).collect();
            let a: Vec<i32> = (0..len as i32).collect();
            let b: Vec<i32> = (0..len as i32).map(|x| -x - 1).collect();
            let rb = if scalar_b {
                Rhs::Scalar(-7)
            } else {
                Rhs::Tensor(&b[..])
            };
            // Each output's operands from its own multi-index.
            let at = |i: usize, st: &[isize], off: usize| -> usize {
                let mut rest = i;
                let mut o = off as isize;
                for (&d, &s) in shape.iter().zip(st).rev() {
                    o += (rest % d) as isize * s;
                    rest /= d;
                }
                o as usize
            };
            let want: Vec<i32> = (0..n)
                .map(|i| {
                    if cond[at(i, &cs, co)] != 0 {
                        a[at(i, &as_, ao)]
                    } else if scalar_b {
                        -7
                    } else {
                        b[at(i, &bs, bo)]
                    }
                })
                .collect();
            let mut got = vec![0i32; n];
            where_nd(&w, &cond, Rhs::Tensor(&a[..]), rb, &mut got).unwrap();
            assert_eq!(got, want, "case {case}: {shape:?}");
        }
    }

    #[test]
    fn merges_contiguous_and_broadcast_dimensions() {
        // [4, 6] + [6]: two dimensions, b broadcast over rows.
        let d = BinaryNd::new(&[4, 6], &[6, 1], 0, Some((&[0, 1], 0))).unwrap();
        assert_eq!(d.rank(), 2);
        assert_eq!(d.numel(), 24);
        assert!(!d.vector_ok(4, true, Some(false), true));
        // f32 rows of 6 are not a whole number of 16-byte groups.
        assert!(!d.vector_ok(4, true, Some(true), true));
        let d = BinaryNd::new(&[4, 8], &[8, 1], 0, Some((&[0, 1], 0))).unwrap();
        assert!(d.vector_ok(4, true, Some(true), true));
        // A contiguous [2, 3, 4] with a scalar is one dimension.
        let d = BinaryNd::new(&[2, 3, 4], &[12, 4, 1], 5, None).unwrap();
        assert_eq!(d.rank(), 1);
        assert_eq!(d.contiguous(), Some((5, None)));
        assert!(
            !d.vector_ok(4, true, None, true),
            "offset 5 is not a group boundary"
        );
        // A transposed operand keeps two dimensions and is not vectorised.
        let d = BinaryNd::new(&[3, 4], &[1, 3], 0, Some((&[4, 1], 0))).unwrap();
        assert_eq!(d.rank(), 2);
        assert!(!d.vector_ok(4, true, Some(true), true));
        assert!(d.contiguous().is_none());
        // Size-1 dimensions vanish; an empty shape is one element.
        assert_eq!(
            BinaryNd::new(&[1, 5, 1], &[0, 1, 0], 0, None)
                .unwrap()
                .rank(),
            1
        );
        assert_eq!(BinaryNd::new(&[], &[], 0, None).unwrap().numel(), 1);
        assert!(BinaryNd::new(&[1 << 16, 1 << 15], &[1 << 15, 1], 0, None).is_err());
    }

    #[test]
    fn in_place_needs_the_output_layout() {
        let d = BinaryNd::new(&[3, 4], &[4, 1], 0, Some((&[0, 1], 0))).unwrap();
        assert!(d.a_is_output());
        let mut x: Vec<f32> = (0..12).map(|v| v as f32).collect();
        let bias = [1.0f32, 2.0, 3.0, 4.0];
        binary_nd_assign(BinaryOp::Add, &d, &mut x, Rhs::Tensor(&bias[..])).unwrap();
        assert_eq!(x[5], 5.0 + 2.0);
        let transposed = BinaryNd::new(&[3, 4], &[1, 3], 0, None).unwrap();
        assert!(!transposed.a_is_output());
        assert!(binary_nd_assign(BinaryOp::Add, &transposed, &mut x, Rhs::Scalar(1.0)).is_err());
        assert!(!BinaryNd::new(&[4], &[1], 2, None).unwrap().a_is_output());
        // Nothing to read or write: any layout will do.
        let empty = BinaryNd::new(&[2, 0, 3], &[0, 3, 1], 0, None).unwrap();
        assert!(empty.a_is_output());
        binary_nd_assign(BinaryOp::Add, &empty, &mut [0.0f32; 0], Rhs::Scalar(1.0)).unwrap();
    }

    #[test]
    fn the_twin_reads_through_strides_and_checks_bounds() {
        let a: Vec<f32> = (0..12).map(|x| x as f32).collect();
        let bias = [100.0f32, 200.0, 300.0, 400.0];
        let d = BinaryNd::new(&[3, 4], &[4, 1], 0, Some((&[0, 1], 0))).unwrap();
        let mut out = vec![0.0f32; 12];
        binary_nd(BinaryOp::Add, &d, &a, Rhs::Tensor(&bias[..]), &mut out).unwrap();
        assert_eq!(out[5], 5.0 + 200.0);
        // a transposed: out[i][j] = a[j][i] * 2 for a 4x3 `a`.
        let d = BinaryNd::new(&[3, 4], &[1, 3], 0, None).unwrap();
        binary_nd(BinaryOp::Mul, &d, &a, Rhs::Scalar(2.0), &mut out).unwrap();
        assert_eq!(out[1], 2.0 * 3.0);
        assert_eq!(out[4], 2.0 * 1.0);
        // Reaching past the end of an operand is an error, not a panic.
        let d = BinaryNd::new(&[3, 4], &[4, 1], 1, None).unwrap();
        assert!(binary_nd(BinaryOp::Add, &d, &a, Rhs::Scalar(0.0), &mut out).is_err());
        assert!(binary_nd(BinaryOp::Div, &d, &[1i32; 13], Rhs::Scalar(1), &mut [0; 12]).is_err());
    }
}
