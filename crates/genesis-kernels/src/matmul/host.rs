//! The host matmul: the CPU twin's arithmetic and the dtypes only the host runs.
//!
//! f32 and f64 products run on the `gemm` crate (packed, blocked, SIMD micro-kernels with fused
//! multiply-adds, threads from rayon's pool), reading each operand in place through its row and
//! column strides. f16 and bf16 operands (and f32 ones truncated to TF32) are first widened to
//! f32 in their own major order, multiplied by the f32 `gemm`, and rounded once to the output
//! type: the same f32 accumulation as the GPU kernels, within the bound of the module's docs.
//! A batch of small products (attention's) is split over the threads product by product, a
//! large product over every thread; the bits are the same either way. Integers (u8, i8, i16,
//! i32, i64) are exact modulo 2^bits (wrapping, as PyTorch's CPU matmul), by rows on scoped
//! threads.

use super::{MatmulElement, MatmulLayout, MatmulOutput, MatmulShape, MatrixLayout};
use gemm::Parallelism;

/// Multiply-adds of one product from which `gemm` is given rayon's threads, and the integer
/// loop scoped threads (`gemm`'s own threading threshold, `48 * 48 * 256`): below it a thread
/// costs more than it saves.
const THREADED_MACS: usize = 48 * 48 * 256;

/// Multiply-adds of one product below which a batch of several products is split over rayon's
/// threads by product, each product on one thread, rather than each product over every thread:
/// a product this small (attention's `[T, d] @ [d, T]` with a head dimension of 32 to 128)
/// spends much of a threaded `gemm` call packing and waking threads. Each product is the same
/// `gemm` call either way, so the bits do not depend on it.
const BATCHED_MACS: usize = 1 << 24;

/// Whether a batch of `batch` products of `macs` multiply-adds each runs product by product on
/// rayon's threads (see [`BATCHED_MACS`]).
fn by_product(batch: usize, macs: usize) -> bool {
    batch > 1 && macs < BATCHED_MACS && rayon::current_num_threads() > 1
}

/// `(row stride, column stride)` of `l` for a `[rows, cols]` matrix, as `gemm` takes them.
/// A stride over a dimension of one element never multiplies a non-zero index and may be any
/// value (`ld` is not bounded then); it is clamped to `isize::MAX`. Otherwise `(count - 1) * ld`
/// lies inside a slice, so `ld` fits.
fn strides(l: MatrixLayout, rows: usize, cols: usize) -> (isize, isize) {
    let ld = isize::try_from(l.ld).unwrap_or(isize::MAX);
    let (rs, cs) = if l.transposed { (1, ld) } else { (ld, 1) };
    debug_assert!(l.transposed || rows <= 1 || rs == l.ld as isize);
    debug_assert!(!l.transposed || cols <= 1 || cs == l.ld as isize);
    (rs, cs)
}

/// The element types of `gemm` that the host path multiplies: f32 and f64 (implemented for
/// nothing else: `gemm` panics on other types).
pub(super) trait GemmFloat: Copy + Default + Send + Sync + 'static {
    const ONE: Self;
}
impl GemmFloat for f32 {
    const ONE: Self = 1.0;
}
impl GemmFloat for f64 {
    const ONE: Self = 1.0;
}

/// `c = a @ b` for one `[m, k] @ [k, n]` product into the contiguous row-major `c [m, n]`,
/// overwriting it (`c` is not read: an uninitialised or NaN output is fine). `m`, `n` and `k`
/// are positive.
///
/// # Panics
///
/// When an operand is shorter than its layout's span (the callers check this first).
fn gemm_one<F: GemmFloat>(
    (m, n, k): (usize, usize, usize),
    a: &[F],
    la: MatrixLayout,
    b: &[F],
    lb: MatrixLayout,
    c: &mut [F],
    alone: bool,
) {
    assert!(m > 0 && n > 0 && k > 0);
    assert!(la.span(m, k).is_some_and(|s| s <= a.len()));
    assert!(lb.span(k, n).is_some_and(|s| s <= b.len()));
    assert!(m.checked_mul(n).is_some_and(|s| s <= c.len()));
    let (a_rs, a_cs) = strides(la, m, k);
    let (b_rs, b_cs) = strides(lb, k, n);
    let n_stride = isize::try_from(n).expect("n fits: m * n elements are in a slice");
    let macs = m.saturating_mul(n).saturating_mul(k);
    let parallelism = if macs >= THREADED_MACS && !alone {
        Parallelism::Rayon(0)
    } else {
        Parallelism::None
    };
    // SAFETY: `F` is f32 or f64, types `gemm` takes. `gemm` reads `a` at `i * a_rs + p * a_cs`
    // for `i < m`, `p < k`: at most the span of `la` checked above, inside `a` (and `b`
    // likewise). It writes `c` at `i * n + j < m * n <= c.len()`, and reads it not at all
    // (`read_dst` false). `c` is a unique borrow, so it aliases neither operand.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n_stride,
            false,
            a.as_ptr(),
            a_cs,
            a_rs,
            b.as_ptr(),
            b_cs,
            b_rs,
            F::default(),
            F::ONE,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// `src`'s `[rows, cols]` matrix in layout `l`, widened by `widen` into `dst` in the same
/// layout (the gaps between lines zero): `gemm` then runs the very call it runs on f32
/// operands read in place (same strides, so the same kernels and order), which makes a
/// product of TF32-truncated inputs the same bits as the full-precision product of those
/// inputs.
fn widen_into<T: Copy>(
    src: &[T],
    l: MatrixLayout,
    (rows, cols): (usize, usize),
    widen: fn(T) -> f32,
    dst: &mut Vec<f32>,
) {
    let (outer, inner) = if l.transposed {
        (cols, rows)
    } else {
        (rows, cols)
    };
    let span = l.span(rows, cols).expect("checked by the caller");
    dst.clear();
    dst.resize(span, 0.0);
    for o in 0..outer {
        let line = o * l.ld..o * l.ld + inner;
        for (d, &x) in dst[line.clone()].iter_mut().zip(&src[line]) {
            *d = widen(x);
        }
    }
}

/// The f32-accumulated product of f32, f16 or bf16 operands (`widen` applied to every input:
/// `None` reads f32 operands as they are), rounded once to `O`. `shape` and `layout` are
/// checked against the slices, and `m`, `n`, `k` and `batch` are positive.
pub(super) fn f32_accumulated<T: MatmulElement, O: MatmulOutput<T>>(
    shape: MatmulShape,
    layout: MatmulLayout,
    widen: Option<fn(T) -> f32>,
    a: &[T],
    b: &[T],
    c: &mut [O],
) {
    let MatmulShape { m, n, k, .. } = shape;
    // The operands read in place when they are f32 and used as they are.
    let (direct_a, direct_b) = match widen {
        None => (T::as_f32s(a), T::as_f32s(b)),
        Some(_) => (None, None),
    };
    let widen = widen.unwrap_or(T::to_f32);
    let (la, lb) = (layout.a, layout.b);
    let mn = m * n;
    let alone = by_product(shape.batch, mn.saturating_mul(k));
    // An operand shared by every product (batch stride 0) is widened once, up front.
    let shared = |x: &[T], direct: Option<&[f32]>, stride: usize, l, rows_cols| {
        let mut w = Vec::new();
        if direct.is_none() && stride == 0 {
            widen_into(x, l, rows_cols, widen, &mut w);
        }
        w
    };
    let shared_a = shared(a, direct_a, shape.a_batch_stride, la, (m, k));
    let shared_b = shared(b, direct_b, shape.b_batch_stride, lb, (k, n));
    // Product `bi` into `c`, with `w` the scratch of the thread running it.
    let product = |bi: usize, c: &mut [O], w: &mut [Vec<f32>; 3]| {
        let [wa, wb, wc] = w;
        let a_at = bi * shape.a_batch_stride;
        let b_at = bi * shape.b_batch_stride;
        let a: &[f32] = match direct_a {
            Some(a) => &a[a_at..],
            None if shape.a_batch_stride == 0 => &shared_a,
            None => {
                widen_into(&a[a_at..], la, (m, k), widen, wa);
                wa
            }
        };
        let b: &[f32] = match direct_b {
            Some(b) => &b[b_at..],
            None if shape.b_batch_stride == 0 => &shared_b,
            None => {
                widen_into(&b[b_at..], lb, (k, n), widen, wb);
                wb
            }
        };
        match O::as_f32s_mut(c) {
            Some(c) => gemm_one((m, n, k), a, la, b, lb, c, alone),
            None => {
                wc.resize(mn, 0f32);
                gemm_one((m, n, k), a, la, b, lb, wc, alone);
                for (d, &s) in c.iter_mut().zip(wc.iter()) {
                    *d = O::from_f32(s);
                }
            }
        }
    };
    let end = (shape.batch * mn).min(c.len());
    let c = &mut c[..end];
    if alone {
        use rayon::prelude::*;
        c.par_chunks_exact_mut(mn)
            .enumerate()
            .for_each_init(<[Vec<f32>; 3]>::default, |w, (bi, c)| product(bi, c, w));
    } else {
        let mut w = <[Vec<f32>; 3]>::default();
        for (bi, c) in c.chunks_exact_mut(mn).enumerate() {
            product(bi, c, &mut w);
        }
    }
}

/// The f64 product (accumulated in f64 by `gemm`). Checked as [`f32_accumulated`]'s.
pub(super) fn f64_product(
    shape: MatmulShape,
    layout: MatmulLayout,
    a: &[f64],
    b: &[f64],
    c: &mut [f64],
) {
    let MatmulShape { m, n, k, .. } = shape;
    let mn = m * n;
    let alone = by_product(shape.batch, mn.saturating_mul(k));
    let product = |bi: usize, c: &mut [f64]| {
        let a = &a[bi * shape.a_batch_stride..];
        let b = &b[bi * shape.b_batch_stride..];
        gemm_one((m, n, k), a, layout.a, b, layout.b, c, alone);
    };
    let end = (shape.batch * mn).min(c.len());
    let c = &mut c[..end];
    if alone {
        use rayon::prelude::*;
        c.par_chunks_exact_mut(mn)
            .enumerate()
            .for_each(|(bi, c)| product(bi, c));
    } else {
        for (bi, c) in c.chunks_exact_mut(mn).enumerate() {
            product(bi, c);
        }
    }
}

/// Integers of the host matmul: wrapping multiply-add.
pub(super) trait WrappingInt: Copy + Default + Send + Sync + 'static {
    /// `self + x * y`, wrapping.
    fn mul_add_wrapping(self, x: Self, y: Self) -> Self;
}

macro_rules! wrapping_int {
    ($($t:ty),*) => {$(
        impl WrappingInt for $t {
            #[inline(always)]
            fn mul_add_wrapping(self, x: Self, y: Self) -> Self {
                self.wrapping_add(x.wrapping_mul(y))
            }
        }
    )*};
}
wrapping_int!(u8, i8, i16, i32, i64);

/// The exact product modulo 2^bits (wrapping; any order of the sum gives these bits). Each row
/// of `C` is `sum_p A[i, p] * B[p, :]` over a row-major `B` (copied compact when `B` is
/// transposed), which the compiler vectorises; rows are split over scoped threads for large
/// products. Checked as [`f32_accumulated`]'s.
pub(super) fn int_product<T: WrappingInt>(
    shape: MatmulShape,
    layout: MatmulLayout,
    a: &[T],
    b: &[T],
    c: &mut [T],
) {
    let MatmulShape { m, n, k, .. } = shape;
    let threads = if m.saturating_mul(n).saturating_mul(k) >= THREADED_MACS {
        std::thread::available_parallelism().map_or(1, |t| t.get().min(m))
    } else {
        1
    };
    let mut compact = Vec::new();
    for (bi, c) in c.chunks_exact_mut(m * n).take(shape.batch).enumerate() {
        let a = &a[bi * shape.a_batch_stride..];
        let b = &b[bi * shape.b_batch_stride..];
        let (b, ldb): (&[T], usize) = if layout.b.transposed {
            if bi == 0 || shape.b_batch_stride != 0 {
                compact.clear();
                compact.extend((0..k * n).map(|x| b[(x % n) * layout.b.ld + x / n]));
            }
            (&compact, n)
        } else {
            (b, layout.b.ld)
        };
        let la = layout.a;
        let rows = |first: usize, c: &mut [T]| {
            for (r, row) in c.chunks_exact_mut(n).enumerate() {
                let i = first + r;
                row.fill(T::default());
                for p in 0..k {
                    let x = a[la.at(i, p)];
                    for (d, &y) in row.iter_mut().zip(&b[p * ldb..p * ldb + n]) {
                        *d = d.mul_add_wrapping(x, y);
                    }
                }
            }
        };
        if threads <= 1 {
            rows(0, c);
        } else {
            let per = m.div_ceil(threads);
            std::thread::scope(|s| {
                for (t, part) in c.chunks_mut(per * n).enumerate() {
                    let rows = &rows;
                    s.spawn(move || rows(t * per, part));
                }
            });
        }
    }
}
