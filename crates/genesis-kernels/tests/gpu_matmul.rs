//! The matmul kernels against f64 references (and the CPU twin against the same references):
//! every input and output type, every operand layout (row-major or transposed, padded leading
//! dimensions, misaligned starts), odd and degenerate shapes (0, 1, primes, k = 0, m = 1 and
//! n = 1: the matrix-vector kernels),
//! batched and broadcast batches. The bound is the f32 accumulation bound plus one rounding to
//! the output type: |got - want| <= (k + 2) 2^-24 sum |a||b| + eps(out) |want|. Outputs are
//! poisoned with NaN first, so an element the kernel did not write fails.

use genesis_kernels::MatmulElement;
use genesis_kernels::matmul::{
    MatmulLayout, MatmulOutput, MatmulShape, MatrixLayout, matmul_strided,
};
use half::{bf16, f16};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// (m, n, k)
const SHAPES: &[(usize, usize, usize)] = &[
    (0, 5, 3),
    (5, 0, 3),
    (4, 5, 0),
    (1, 1, 1),
    (1, 257, 64),
    (1, 130, 131),
    (1, 1100, 700),
    (97, 1, 300),
    (1000, 1, 64),
    (2, 3, 1000),
    (127, 129, 31),
    (128, 128, 32),
    (131, 67, 263),
    (257, 130, 1),
    (64, 200, 96),
    (300, 257, 77),
];

/// One test problem: the operands' layouts (transposed, extra elements per row, elements
/// before the first), batch and batch strides.
#[derive(Debug, Clone, Copy)]
struct Case {
    m: usize,
    n: usize,
    k: usize,
    ta: bool,
    tb: bool,
    pad: usize,
    offset: usize,
    batch: usize,
    /// 0: each operand its own matrices; 1: A broadcast; 2: B broadcast.
    broadcast: u8,
}

fn unit(x: f64) -> f64 {
    2f64.powi(-(x as i32))
}

/// Rounding to the output type: relative half-ulp, and the absolute half-spacing of its
/// subnormals.
trait Out: MatmulElement {
    const EPS: f64;
    const TINY: f64;
}
impl Out for f32 {
    const EPS: f64 = 5.97e-8;
    const TINY: f64 = 1e-30;
}
impl Out for f16 {
    const EPS: f64 = 4.89e-4;
    const TINY: f64 = 2.99e-8;
}
impl Out for bf16 {
    const EPS: f64 = 3.91e-3;
    const TINY: f64 = 1e-30;
}

struct Problem<T> {
    shape: MatmulShape,
    layout: MatmulLayout,
    a: Vec<T>,
    b: Vec<T>,
    want: Vec<f64>,
    scale: Vec<f64>,
}

fn problem<T: MatmulElement>(c: Case, rng: &mut SmallRng) -> Problem<T> {
    let Case {
        m,
        n,
        k,
        ta,
        tb,
        pad,
        offset,
        batch,
        broadcast,
    } = c;
    let la = MatrixLayout {
        transposed: ta,
        ld: if ta { m } else { k } + pad,
    };
    let lb = MatrixLayout {
        transposed: tb,
        ld: if tb { k } else { n } + pad,
    };
    let one_a = la.span(m, k).unwrap();
    let one_b = lb.span(k, n).unwrap();
    let sa = if broadcast == 1 { 0 } else { one_a + pad };
    let sb = if broadcast == 2 { 0 } else { one_b + pad };
    let shape = MatmulShape {
        batch,
        m,
        n,
        k,
        a_batch_stride: sa,
        b_batch_stride: sb,
    };
    let layout = MatmulLayout { a: la, b: lb };
    let len_a = offset + layout.a_len(&shape).unwrap();
    let len_b = offset + layout.b_len(&shape).unwrap();
    let mut gen_vals = |len: usize| -> Vec<T> {
        (0..len)
            .map(|_| T::from_f32(rng.random_range(-1.0f32..1.0)))
            .collect()
    };
    let a = gen_vals(len_a);
    let b = gen_vals(len_b);
    let (mut want, mut scale) = (Vec::new(), Vec::new());
    for bi in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut t) = (0f64, 0f64);
                for p in 0..k {
                    let ia = offset + bi * sa + if ta { p * la.ld + i } else { i * la.ld + p };
                    let ib = offset + bi * sb + if tb { j * lb.ld + p } else { p * lb.ld + j };
                    let x = f64::from(a[ia].to_f32()) * f64::from(b[ib].to_f32());
                    s += x;
                    t += x.abs();
                }
                want.push(s);
                scale.push(t);
            }
        }
    }
    Problem {
        shape,
        layout,
        a,
        b,
        want,
        scale,
    }
}

fn check<O: Out>(got: &[O], p: &Problem<impl MatmulElement>, what: &str) {
    assert_eq!(got.len(), p.want.len(), "{what}");
    let k = p.shape.k as f64;
    for (i, ((g, w), s)) in got.iter().zip(&p.want).zip(&p.scale).enumerate() {
        let g = f64::from(g.to_f32());
        let tol = (k + 2.0) * unit(24.0) * s + O::EPS * w.abs() + O::TINY;
        assert!(
            (g - w).abs() <= tol,
            "{what}: element {i} of {}: {g} vs {w} (tolerance {tol})",
            got.len()
        );
    }
}

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (si, &(m, n, k)) in SHAPES.iter().enumerate() {
        for ta in [false, true] {
            for tb in [false, true] {
                // Rotate the padding, misalignment and batching over the shapes so every
                // layout meets each of them.
                let r = si + 2 * usize::from(ta) + usize::from(tb);
                v.push(Case {
                    m,
                    n,
                    k,
                    ta,
                    tb,
                    pad: [0, 8, 3, 0][r % 4],
                    offset: [0, 0, 0, 1][(r / 2) % 4],
                    batch: [1, 3, 1, 2][r % 4],
                    broadcast: [0, 0, 1, 2][(r / 3) % 4],
                });
            }
        }
    }
    v
}

fn cpu_case<T: MatmulElement, O: MatmulOutput<T> + Out>(c: Case, rng: &mut SmallRng) {
    let p = problem::<T>(c, rng);
    let mut got = vec![O::from_f32(f32::NAN); p.shape.c_len().unwrap()];
    matmul_strided(
        p.shape,
        p.layout,
        &p.a[c.offset..],
        &p.b[c.offset..],
        &mut got,
    )
    .unwrap();
    check(&got, &p, &format!("cpu {c:?}"));
}

#[test]
fn cpu_twin_matches_f64_references() {
    let mut rng = SmallRng::seed_from_u64(7);
    for c in cases() {
        cpu_case::<f32, f32>(c, &mut rng);
        cpu_case::<f16, f16>(c, &mut rng);
        cpu_case::<bf16, bf16>(c, &mut rng);
        cpu_case::<bf16, f32>(c, &mut rng);
    }
}

#[cfg(feature = "cuda")]
mod gpu {
    use super::*;
    use genesis_cuda::{Context, DeviceBuffer, Stream, skip_without_gpu};
    use genesis_kernels::matmul::gpu_matmul_strided;
    use std::sync::Arc;

    fn bytes<T: Copy>(v: &[T]) -> &[u8] {
        // SAFETY: plain element types without padding, read as bytes.
        unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
    }

    fn gpu_case<T: MatmulElement, O: MatmulOutput<T> + Out>(
        ctx: &Arc<Context>,
        stream: &Stream,
        c: Case,
        rng: &mut SmallRng,
    ) {
        let p = problem::<T>(c, rng);
        let a = DeviceBuffer::from_host(ctx, bytes(&p.a)).unwrap();
        let b = DeviceBuffer::from_host(ctx, bytes(&p.b)).unwrap();
        let len = p.shape.c_len().unwrap();
        let poison = vec![O::from_f32(f32::NAN); len];
        let mut out = DeviceBuffer::from_host(ctx, bytes(&poison)).unwrap();
        gpu_matmul_strided::<T, O>(
            stream,
            p.shape,
            p.layout,
            a.as_span::<T>().unwrap().slice(c.offset..).unwrap(),
            b.as_span::<T>().unwrap().slice(c.offset..).unwrap(),
            out.as_span_mut::<O>().unwrap(),
        )
        .unwrap();
        stream.synchronize().unwrap();
        let mut got = vec![O::from_f32(0.0); len];
        // SAFETY: as in `bytes`: any bit pattern is a value of these types.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(
                got.as_mut_ptr().cast::<u8>(),
                std::mem::size_of_val(&got[..]),
            )
        };
        out.copy_to_host(dst).unwrap();
        check(&got, &p, &format!("gpu {} -> {} {c:?}", T::NAME, O::NAME));
    }

    #[test]
    fn kernels_match_f64_references() {
        if skip_without_gpu("kernels_match_f64_references") {
            return;
        }
        let ctx = Context::get(0).unwrap();
        let stream = Stream::new(&ctx).unwrap();
        let mut rng = SmallRng::seed_from_u64(11);
        for c in cases() {
            gpu_case::<f32, f32>(&ctx, &stream, c, &mut rng);
            gpu_case::<f16, f16>(&ctx, &stream, c, &mut rng);
            gpu_case::<f16, f32>(&ctx, &stream, c, &mut rng);
            gpu_case::<bf16, bf16>(&ctx, &stream, c, &mut rng);
            gpu_case::<bf16, f32>(&ctx, &stream, c, &mut rng);
        }
    }

    #[test]
    fn large_square_and_irregular_products() {
        if skip_without_gpu("large_square_and_irregular_products") {
            return;
        }
        let ctx = Context::get(0).unwrap();
        let stream = Stream::new(&ctx).unwrap();
        let mut rng = SmallRng::seed_from_u64(12);
        // Many k slices through the pipeline, every layout, aligned and not.
        for (m, n, k) in [(512, 384, 1024), (255, 513, 1023)] {
            for ta in [false, true] {
                for tb in [false, true] {
                    let c = Case {
                        m,
                        n,
                        k,
                        ta,
                        tb,
                        pad: 0,
                        offset: 0,
                        batch: 1,
                        broadcast: 0,
                    };
                    gpu_case::<bf16, bf16>(&ctx, &stream, c, &mut rng);
                    gpu_case::<f16, f32>(&ctx, &stream, c, &mut rng);
                    gpu_case::<f32, f32>(&ctx, &stream, c, &mut rng);
                }
            }
        }
    }
}
