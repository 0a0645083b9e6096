//! Batched matrix multiplication: `kernels/matmul.cu` and its CPU twin.
//!
//! `C[b] = A[b] @ B[b]` for row-major `A [m, k]`, `B [k, n]`, contiguous `C [batch, m, n]`,
//! with per-operand batch strides (0 broadcasts one matrix to every batch). f32, f16 and bf16;
//! products are accumulated in f32 and rounded once to the element type (the CPU in increasing
//! `k`; the GPU fuses multiply-adds, and f16/bf16 run on tensor cores in their own order), so
//! the two agree within the f32 rounding bound of the accumulation, not bit for bit.

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

fn span(batch: usize, stride: usize, one: usize) -> Option<usize> {
    if batch == 0 || one == 0 {
        return Some(0);
    }
    (batch - 1).checked_mul(stride)?.checked_add(one)
}

/// Element types of the matmul kernels.
pub trait MatmulElement: Element {
    /// The kernel's name.
    const MATMUL_KERNEL: &'static str;
    /// The tensor-core kernel's name, for the types that have one (f16, bf16).
    const TENSOR_CORE_KERNEL: Option<&'static str>;
    /// The value widened to f32.
    fn to_f32(self) -> f32;
    /// `x` rounded to nearest-even.
    fn from_f32(x: f32) -> Self;
}

impl MatmulElement for f32 {
    const MATMUL_KERNEL: &'static str = "matmul_f32";
    const TENSOR_CORE_KERNEL: Option<&'static str> = None;
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(x: f32) -> Self {
        x
    }
}

impl MatmulElement for f16 {
    const MATMUL_KERNEL: &'static str = "matmul_f16";
    const TENSOR_CORE_KERNEL: Option<&'static str> = Some("matmul_tc_f16");
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
}

impl MatmulElement for bf16 {
    const MATMUL_KERNEL: &'static str = "matmul_bf16";
    const TENSOR_CORE_KERNEL: Option<&'static str> = Some("matmul_tc_bf16");
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
}

fn check(shape: &MatmulShape, a: usize, b: usize, c: usize) -> Result<()> {
    let overflow = || Error::Unsupported {
        op: "matmul",
        reason: "shape overflows".into(),
    };
    for (need, got) in [
        (shape.a_len().ok_or_else(overflow)?, a),
        (shape.b_len().ok_or_else(overflow)?, b),
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

/// The CPU twin: `c = a @ b` per batch, accumulated in f32 in increasing `k`.
pub fn matmul<T: MatmulElement>(shape: MatmulShape, a: &[T], b: &[T], c: &mut [T]) -> Result<()> {
    check(&shape, a.len(), b.len(), c.len())?;
    let MatmulShape { m, n, k, .. } = shape;
    let mut acc = vec![0f32; n];
    let mut bf = vec![0f32; k * n];
    for bi in 0..shape.batch {
        let a = &a[bi * shape.a_batch_stride..];
        if bi == 0 || shape.b_batch_stride != 0 {
            let b = &b[bi * shape.b_batch_stride..][..k * n];
            for (d, s) in bf.iter_mut().zip(b) {
                *d = s.to_f32();
            }
        }
        for i in 0..m {
            acc.fill(0.0);
            for kk in 0..k {
                let x = a[i * k + kk].to_f32();
                for (s, &y) in acc.iter_mut().zip(&bf[kk * n..(kk + 1) * n]) {
                    *s += x * y;
                }
            }
            for (d, &s) in c[(bi * m + i) * n..(bi * m + i + 1) * n]
                .iter_mut()
                .zip(&acc)
            {
                *d = T::from_f32(s);
            }
        }
    }
    Ok(())
}

/// Queues `c = a @ b` (see the module docs) on `stream`. Fails before launching unless `a`,
/// `b` and `c` hold at least [`MatmulShape::a_len`], [`MatmulShape::b_len`] and
/// [`MatmulShape::c_len`] elements.
#[cfg(feature = "cuda")]
pub fn gpu_matmul<T: MatmulElement>(
    stream: &genesis_cuda::Stream,
    shape: MatmulShape,
    a: genesis_cuda::DeviceSpan<'_, T>,
    b: genesis_cuda::DeviceSpan<'_, T>,
    c: genesis_cuda::DeviceSpanMut<'_, T>,
) -> Result<()> {
    use genesis_cuda::{Kernel, LaunchConfig};
    use std::ffi::c_void;

    let overflow = || Error::Unsupported {
        op: "matmul",
        reason: "shape overflows".into(),
    };
    let need = shape.c_len().ok_or_else(overflow)?;
    if need == 0 {
        return Ok(());
    }
    for (expected, got) in [
        (shape.a_len().ok_or_else(overflow)?, a.len()),
        (shape.b_len().ok_or_else(overflow)?, b.len()),
        (need, c.len()),
    ] {
        if got < expected {
            return Err(Error::LengthMismatch {
                op: "matmul",
                expected,
                got,
            });
        }
    }
    let (a, b, c) = (a.addr(), b.addr(), c.addr());
    // f16 and bf16 use tensor cores (every architecture the images target has them).
    let name = T::TENSOR_CORE_KERNEL.unwrap_or(T::MATMUL_KERNEL);
    let kernel = Kernel::get(stream.context(), &crate::images::MATMUL, name)?;
    let gx = shape.n.div_ceil(128);
    let gy = shape.m.div_ceil(128);
    if gx > u32::MAX as usize || gy > 65535 {
        return Err(Error::Unsupported {
            op: "matmul",
            reason: format!("{} x {} outputs per matrix", shape.m, shape.n),
        });
    }
    let config = LaunchConfig {
        grid: (gx as u32, gy as u32, shape.batch.min(65535) as u32),
        block: (256, 1, 1),
        shared_bytes: 0,
    };
    let (mut a, mut b, mut c) = (a, b, c);
    let mut dims = [
        shape.batch as u64,
        shape.m as u64,
        shape.n as u64,
        shape.k as u64,
        shape.a_batch_stride as u64,
        shape.b_batch_stride as u64,
    ];
    let [d0, d1, d2, d3, d4, d5] = &mut dims;
    let mut params: [*mut c_void; 9] = [
        (&raw mut a).cast(),
        (&raw mut b).cast(),
        (&raw mut c).cast(),
        std::ptr::from_mut(d0).cast(),
        std::ptr::from_mut(d1).cast(),
        std::ptr::from_mut(d2).cast(),
        std::ptr::from_mut(d3).cast(),
        std::ptr::from_mut(d4).cast(),
        std::ptr::from_mut(d5).cast(),
    ];
    // SAFETY: the parameters match `matmul_<T>(const T*, const T*, T*, u64 batch, u64 m,
    // u64 n, u64 k, u64 sa, u64 sb)`; the spans hold the shape's operands (checked), and `c`
    // is borrowed exclusively, so it overlaps neither input.
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
