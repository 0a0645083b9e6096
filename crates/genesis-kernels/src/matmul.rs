//! Batched matrix multiplication: `kernels/matmul.cu` and its CPU twin.
//!
//! `C[b] = A[b] @ B[b]` for `A [m, k]`, `B [k, n]` and contiguous `C [batch, m, n]`. Each
//! operand is read where it lies: row-major or transposed (column-major, the layout of a
//! transposed view), with its own leading dimension and batch stride (0 broadcasts one matrix
//! to every batch) ([`MatmulLayout`]). f32, f16 and bf16; f16 and bf16 products can also be
//! written as f32 ([`gpu_matmul_strided`] with an f32 output). Products are accumulated in f32
//! and rounded once to the output type (the CPU in increasing `k`; the GPU fuses multiply-adds
//! and f16/bf16 run on tensor cores in their own order), so the two agree within the f32
//! rounding bound of the accumulation, not bit for bit.

use crate::{Element, Error, Result};
use half::{bf16, f16};

/// The problem: `batch` products of `[m, k] @ [k, n]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatmulShape {
    /// Number of products.
    pub batch: usize,
    /// Rows of `A` and `C`.
    pub m: usize,
    /// Columns of `B` and `C`.
    pub n: usize,
    /// Columns of `A`, rows of `B`.
    pub k: usize,
    /// Elements between consecutive `A` matrices (0: one `A` for every batch).
    pub a_batch_stride: usize,
    /// Elements between consecutive `B` matrices (0: one `B` for every batch).
    pub b_batch_stride: usize,
}

impl MatmulShape {
    /// Elements of `A` the problem reads (from its first element).
    pub fn a_len(&self) -> Option<usize> {
        span(self.batch, self.a_batch_stride, self.m.checked_mul(self.k)?)
    }

    /// Elements of `B` the problem reads.
    pub fn b_len(&self) -> Option<usize> {
        span(self.batch, self.b_batch_stride, self.k.checked_mul(self.n)?)
    }

    /// Elements of `C`.
    pub fn c_len(&self) -> Option<usize> {
        self.batch.checked_mul(self.m)?.checked_mul(self.n)
    }

    /// Multiply-adds of the problem (`batch * m * n * k`).
    pub fn macs(&self) -> u128 {
        self.batch as u128 * self.m as u128 * self.n as u128 * self.k as u128
    }
}

/// Where one operand's elements lie: element `(i, j)` of an `[r, c]` operand is at
/// `i * ld + j`, or at `j * ld + i` when `transposed` (a column-major matrix, as a transposed
/// view of a row-major one is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatrixLayout {
    /// Column-major (the operand is the transpose of the row-major matrix in memory).
    pub transposed: bool,
    /// Elements between consecutive rows (or columns, when `transposed`).
    pub ld: usize,
}

impl MatrixLayout {
    /// A contiguous row-major `[_, cols]` matrix.
    pub fn row_major(cols: usize) -> MatrixLayout {
        MatrixLayout {
            transposed: false,
            ld: cols,
        }
    }

    /// A contiguous column-major `[rows, _]` matrix (the transpose of a contiguous
    /// `[_, rows]` one).
    pub fn col_major(rows: usize) -> MatrixLayout {
        MatrixLayout {
            transposed: true,
            ld: rows,
        }
    }

    /// Elements one `[rows, cols]` matrix of this layout spans from its first element.
    pub fn span(&self, rows: usize, cols: usize) -> Option<usize> {
        if rows == 0 || cols == 0 {
            return Some(0);
        }
        let (outer, inner) = if self.transposed {
            (cols, rows)
        } else {
            (rows, cols)
        };
        (outer - 1).checked_mul(self.ld)?.checked_add(inner)
    }

    /// The offset of element `(i, j)`.
    fn at(&self, i: usize, j: usize) -> usize {
        if self.transposed {
            j * self.ld + i
        } else {
            i * self.ld + j
        }
    }
}

/// The layouts of the two operands of a [`MatmulShape`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatmulLayout {
    /// `A [m, k]`.
    pub a: MatrixLayout,
    /// `B [k, n]`.
    pub b: MatrixLayout,
}

impl MatmulLayout {
    /// Both operands contiguous and row-major (`lda = k`, `ldb = n`).
    pub fn contiguous(shape: &MatmulShape) -> MatmulLayout {
        MatmulLayout {
            a: MatrixLayout::row_major(shape.k),
            b: MatrixLayout::row_major(shape.n),
        }
    }

    /// Elements of `A` the problem reads (from its first element).
    pub fn a_len(&self, shape: &MatmulShape) -> Option<usize> {
        span(
            shape.batch,
            shape.a_batch_stride,
            self.a.span(shape.m, shape.k)?,
        )
    }

    /// Elements of `B` the problem reads.
    pub fn b_len(&self, shape: &MatmulShape) -> Option<usize> {
        span(
            shape.batch,
            shape.b_batch_stride,
            self.b.span(shape.k, shape.n)?,
        )
    }
}

fn span(batch: usize, stride: usize, one: usize) -> Option<usize> {
    if batch == 0 || one == 0 {
        return Some(0);
    }
    (batch - 1).checked_mul(stride)?.checked_add(one)
}

/// Element types of the matmul kernels.
pub trait MatmulElement: Element {
    /// The value widened to f32.
    fn to_f32(self) -> f32;
    /// `x` rounded to nearest-even.
    fn from_f32(x: f32) -> Self;
}

impl MatmulElement for f32 {
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(x: f32) -> Self {
        x
    }
}

impl MatmulElement for f16 {
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
}

impl MatmulElement for bf16 {
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
}

fn overflow() -> Error {
    Error::Unsupported {
        op: "matmul",
        reason: "shape overflows".into(),
    }
}

fn check(shape: &MatmulShape, layout: &MatmulLayout, a: usize, b: usize, c: usize) -> Result<()> {
    for (need, got) in [
        (layout.a_len(shape).ok_or_else(overflow)?, a),
        (layout.b_len(shape).ok_or_else(overflow)?, b),
        (shape.c_len().ok_or_else(overflow)?, c),
    ] {
        if got < need {
            return Err(Error::LengthMismatch {
                op: "matmul",
                expected: need,
                got,
            });
        }
    }
    Ok(())
}

/// The CPU twin: `c = a @ b` per batch for contiguous row-major operands, accumulated in f32
/// in increasing `k`.
pub fn matmul<T: MatmulOutput<T>>(shape: MatmulShape, a: &[T], b: &[T], c: &mut [T]) -> Result<()> {
    matmul_strided(shape, MatmulLayout::contiguous(&shape), a, b, c)
}

/// The CPU twin of [`gpu_matmul_strided`]: `c = a @ b` per batch with the operands where
/// `layout` says, accumulated in f32 in increasing `k` and rounded once to `O`.
pub fn matmul_strided<T: MatmulElement, O: MatmulOutput<T>>(
    shape: MatmulShape,
    layout: MatmulLayout,
    a: &[T],
    b: &[T],
    c: &mut [O],
) -> Result<()> {
    check(&shape, &layout, a.len(), b.len(), c.len())?;
    let MatmulShape { m, n, k, .. } = shape;
    if k == 0 {
        c[..shape.c_len().ok_or_else(overflow)?].fill(O::from_f32(0.0));
        return Ok(());
    }
    let mut acc = vec![0f32; n];
    // B of the current batch, widened and row-major.
    let mut bf = vec![0f32; k * n];
    for bi in 0..shape.batch {
        if m == 0 || n == 0 {
            break;
        }
        let a = &a[bi * shape.a_batch_stride..];
        if bi == 0 || shape.b_batch_stride != 0 {
            let b = &b[bi * shape.b_batch_stride..];
            for kk in 0..k {
                for (j, d) in bf[kk * n..(kk + 1) * n].iter_mut().enumerate() {
                    *d = b[layout.b.at(kk, j)].to_f32();
                }
            }
        }
        for i in 0..m {
            acc.fill(0.0);
            for kk in 0..k {
                let x = a[layout.a.at(i, kk)].to_f32();
                for (s, &y) in acc.iter_mut().zip(&bf[kk * n..(kk + 1) * n]) {
                    *s += x * y;
                }
            }
            for (d, &s) in c[(bi * m + i) * n..(bi * m + i + 1) * n]
                .iter_mut()
                .zip(&acc)
            {
                *d = O::from_f32(s);
            }
        }
    }
    Ok(())
}

/// Output types of a matmul of `T` operands: `T` itself, and f32 for f16 and bf16.
pub trait MatmulOutput<T: MatmulElement>: MatmulElement {
    /// The kernels, indexed by `[a transposed][b transposed][any]` (`any`: the kernel that
    /// reads operands of any alignment, element by element).
    const KERNELS: [[[&'static str; 2]; 2]; 2];
    /// The elements of a 16-byte vector of `T` (the fast kernels' alignment).
    const VECTOR: usize = 16 / std::mem::size_of::<T>();
    /// The matrix-vector kernels (m == 1 or n == 1): `[dot, axpy]`.
    const GEMV: [&'static str; 2];
}

macro_rules! kernels {
    ($t:ty => $o:ty, $p:literal, $g:literal) => {
        impl MatmulOutput<$t> for $o {
            const GEMV: [&'static str; 2] = [concat!("gemv_dot_", $g), concat!("gemv_axpy_", $g)];
            const KERNELS: [[[&'static str; 2]; 2]; 2] = [
                [
                    [concat!($p, "_nn"), concat!($p, "_nn_any")],
                    [concat!($p, "_nt"), concat!($p, "_nt_any")],
                ],
                [
                    [concat!($p, "_tn"), concat!($p, "_tn_any")],
                    [concat!($p, "_tt"), concat!($p, "_tt_any")],
                ],
            ];
        }
    };
}
kernels!(f32 => f32, "matmul_f32", "f32");
kernels!(f16 => f16, "matmul_f16", "f16");
kernels!(f16 => f32, "matmul_f16_f32out", "f16_f32out");
kernels!(bf16 => bf16, "matmul_bf16", "bf16");
kernels!(bf16 => f32, "matmul_bf16_f32out", "bf16_f32out");

/// Queues `c = a @ b` for contiguous row-major operands (see the module docs) on `stream`.
/// Fails before launching unless `a`, `b` and `c` hold at least [`MatmulShape::a_len`],
/// [`MatmulShape::b_len`] and [`MatmulShape::c_len`] elements.
#[cfg(feature = "cuda")]
pub fn gpu_matmul<T: MatmulOutput<T>>(
    stream: &genesis_cuda::Stream,
    shape: MatmulShape,
    a: genesis_cuda::DeviceSpan<'_, T>,
    b: genesis_cuda::DeviceSpan<'_, T>,
    c: genesis_cuda::DeviceSpanMut<'_, T>,
) -> Result<()> {
    gpu_matmul_strided(stream, shape, MatmulLayout::contiguous(&shape), a, b, c)
}

/// Block tile of every matmul kernel (`128 x 128` outputs).
#[cfg(feature = "cuda")]
const TILE: usize = 128;

/// Queues `c = a @ b` with the operands read where `layout` says (transposed views without a
/// copy) on `stream`, written as `O` (`T`, or f32 for f16 and bf16 operands). Fails before
/// launching unless `a`, `b` and `c` hold at least [`MatmulLayout::a_len`],
/// [`MatmulLayout::b_len`] and [`MatmulShape::c_len`] elements.
#[cfg(feature = "cuda")]
pub fn gpu_matmul_strided<T: MatmulElement, O: MatmulOutput<T>>(
    stream: &genesis_cuda::Stream,
    shape: MatmulShape,
    layout: MatmulLayout,
    a: genesis_cuda::DeviceSpan<'_, T>,
    b: genesis_cuda::DeviceSpan<'_, T>,
    c: genesis_cuda::DeviceSpanMut<'_, O>,
) -> Result<()> {
    use genesis_cuda::{Kernel, LaunchConfig};
    use std::ffi::c_void;

    let need = shape.c_len().ok_or_else(overflow)?;
    if need == 0 {
        return Ok(());
    }
    check(&shape, &layout, a.len(), b.len(), c.len())?;
    if shape.m == 1 || shape.n == 1 {
        return gemv(stream, shape, layout, a, b, c);
    }
    // The 16-byte kernels need every row and batch of both operands to start on 16 bytes.
    let v = O::VECTOR;
    let aligned = layout.a.ld.is_multiple_of(v)
        && layout.b.ld.is_multiple_of(v)
        && shape.a_batch_stride.is_multiple_of(v)
        && shape.b_batch_stride.is_multiple_of(v)
        && a.is_aligned_to(16)
        && b.is_aligned_to(16);
    let name = O::KERNELS[usize::from(layout.a.transposed)][usize::from(layout.b.transposed)]
        [usize::from(!aligned)];
    let kernel = Kernel::get(stream.context(), &crate::images::MATMUL, name)?;
    let tiles = shape.m.div_ceil(TILE).checked_mul(shape.n.div_ceil(TILE));
    let tiles = match tiles {
        Some(t) if t <= i32::MAX as usize => t as u32,
        _ => {
            return Err(Error::Unsupported {
                op: "matmul",
                reason: format!("{} x {} outputs per matrix", shape.m, shape.n),
            });
        }
    };
    let config = LaunchConfig {
        grid: (tiles, shape.batch.min(65535) as u32, 1),
        block: (256, 1, 1),
        shared_bytes: 0,
    };
    let (mut pa, mut pb, mut pc) = (a.addr(), b.addr(), c.addr());
    let mut dims = [
        shape.batch as u64,
        shape.m as u64,
        shape.n as u64,
        shape.k as u64,
        layout.a.ld as u64,
        layout.b.ld as u64,
        shape.a_batch_stride as u64,
        shape.b_batch_stride as u64,
    ];
    let [d0, d1, d2, d3, d4, d5, d6, d7] = &mut dims;
    let mut params: [*mut c_void; 11] = [
        (&raw mut pa).cast(),
        (&raw mut pb).cast(),
        (&raw mut pc).cast(),
        std::ptr::from_mut(d0).cast(),
        std::ptr::from_mut(d1).cast(),
        std::ptr::from_mut(d2).cast(),
        std::ptr::from_mut(d3).cast(),
        std::ptr::from_mut(d4).cast(),
        std::ptr::from_mut(d5).cast(),
        std::ptr::from_mut(d6).cast(),
        std::ptr::from_mut(d7).cast(),
    ];
    // SAFETY: the parameters match `matmul_<in>[_f32out]_<ab>[_any](const T*, const T*, O*,
    // u64 batch, u64 m, u64 n, u64 k, u64 lda, u64 ldb, u64 sa, u64 sb)`; the spans hold every
    // element the layout reads (checked), the `aligned` kernels are chosen only for operands
    // whose rows and batches start on 16 bytes, and `c` is borrowed exclusively, so it
    // overlaps neither input.
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

/// A product with `m == 1` or `n == 1` as a matrix-vector product (`gemv_*` in
/// `kernels/matmul.cu`): `out[b][o] = sum_p X[b][o][p] * v[b][p]`, where X is `B` read by
/// columns and v `A`'s row when `m == 1`, X is `A` and v `B`'s column otherwise. The caller
/// checked the spans against the layout.
#[cfg(feature = "cuda")]
fn gemv<T: MatmulElement, O: MatmulOutput<T>>(
    stream: &genesis_cuda::Stream,
    shape: MatmulShape,
    layout: MatmulLayout,
    a: genesis_cuda::DeviceSpan<'_, T>,
    b: genesis_cuda::DeviceSpan<'_, T>,
    c: genesis_cuda::DeviceSpanMut<'_, O>,
) -> Result<()> {
    use genesis_cuda::{Kernel, LaunchConfig};
    use std::ffi::c_void;

    // Strides of an operand's element (i, p) of a `[rows, k]` view: (per row, per p).
    let (la, lb) = (layout.a, layout.b);
    let a_strides = if la.transposed {
        (1, la.ld)
    } else {
        (la.ld, 1)
    };
    // B[p][j]: per column j and per p.
    let b_strides = if lb.transposed {
        (lb.ld, 1)
    } else {
        (1, lb.ld)
    };
    let (x, v, outs, (so, sk), sv, xb, vb) = if shape.m == 1 {
        (
            b,
            a,
            shape.n,
            b_strides,
            a_strides.1,
            shape.b_batch_stride,
            shape.a_batch_stride,
        )
    } else {
        (
            a,
            b,
            shape.m,
            a_strides,
            b_strides.1,
            shape.a_batch_stride,
            shape.b_batch_stride,
        )
    };
    let axpy = sk != 1 && so == 1;
    let per_block = if axpy { 32 } else { 8 };
    let blocks = outs.div_ceil(per_block);
    if blocks > i32::MAX as usize {
        return Err(Error::Unsupported {
            op: "matmul",
            reason: format!("{outs} outputs of a matrix-vector product"),
        });
    }
    let kernel = Kernel::get(
        stream.context(),
        &crate::images::MATMUL,
        O::GEMV[usize::from(axpy)],
    )?;
    let config = LaunchConfig {
        grid: (blocks as u32, shape.batch.min(65535) as u32, 1),
        block: (256, 1, 1),
        shared_bytes: 0,
    };
    let (mut px, mut pv, mut pc) = (x.addr(), v.addr(), c.addr());
    let mut dims = [
        shape.batch as u64,
        outs as u64,
        shape.k as u64,
        so as u64,
        sk as u64,
        sv as u64,
        xb as u64,
        vb as u64,
    ];
    let [d0, d1, d2, d3, d4, d5, d6, d7] = &mut dims;
    let mut params: [*mut c_void; 11] = [
        (&raw mut px).cast(),
        (&raw mut pv).cast(),
        (&raw mut pc).cast(),
        std::ptr::from_mut(d0).cast(),
        std::ptr::from_mut(d1).cast(),
        std::ptr::from_mut(d2).cast(),
        std::ptr::from_mut(d3).cast(),
        std::ptr::from_mut(d4).cast(),
        std::ptr::from_mut(d5).cast(),
        std::ptr::from_mut(d6).cast(),
        std::ptr::from_mut(d7).cast(),
    ];
    // SAFETY: the parameters match `gemv_<dot|axpy>_<in>[_f32out](const T*, const T*, O*, u64
    // batch, u64 outs, u64 k, u64 so, u64 sk, u64 sv, u64 xb, u64 vb)`; every element read,
    // X[b][o][p] and v[b][p] for b < batch, o < outs, p < k, is an element of A or B that the
    // layout reads (checked by the caller), and `c` holds batch * outs elements (its length
    // was checked against the shape) and is borrowed exclusively.
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_products_and_broadcast_batches() {
        // [2, 3] @ [3, 2]
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [7.0f32, 8.0, 9.0, 10.0, 11.0, 12.0];
        let mut c = [0f32; 4];
        let s = MatmulShape {
            batch: 1,
            m: 2,
            n: 2,
            k: 3,
            a_batch_stride: 6,
            b_batch_stride: 6,
        };
        matmul(s, &a, &b, &mut c).unwrap();
        assert_eq!(c, [58.0, 64.0, 139.0, 154.0]);
        // Two batches of A against one B.
        let a2: Vec<f32> = a.iter().chain(a.iter()).map(|x| x * 2.0).collect();
        let mut c2 = [0f32; 8];
        let s2 = MatmulShape {
            batch: 2,
            b_batch_stride: 0,
            ..s
        };
        matmul(s2, &a2, &b, &mut c2).unwrap();
        assert_eq!(c2, [116.0, 128.0, 278.0, 308.0, 116.0, 128.0, 278.0, 308.0]);
        // k = 0 gives zeros; short buffers are errors.
        let mut z = [1f32; 4];
        let s0 = MatmulShape { k: 0, ..s };
        matmul::<f32>(s0, &[], &[], &mut z).unwrap();
        assert_eq!(z, [0.0; 4]);
        assert!(matmul(s, &a[..5], &b, &mut c).is_err());
        let h: Vec<bf16> = a.iter().map(|&x| bf16::from_f32(x)).collect();
        let hb: Vec<bf16> = b.iter().map(|&x| bf16::from_f32(x)).collect();
        let mut hc = [bf16::ZERO; 4];
        matmul(s, &h, &hb, &mut hc).unwrap();
        assert_eq!(hc.map(|x| x.to_f32()), [58.0, 64.0, 139.0, 154.0]);
    }
}
