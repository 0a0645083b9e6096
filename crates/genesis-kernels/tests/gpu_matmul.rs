//! The matmul kernels against f64 references (and the CPU twin against the same references):
//! every input and output type, every operand layout (row-major or transposed, padded leading
//! dimensions, misaligned starts), odd and degenerate shapes (0, 1, primes, k = 0, m = 1 and
//! n = 1: the matrix-vector kernels),
//! batched and broadcast batches. The bound is the f32 accumulation bound plus one rounding to
//! the output type: |got - want| <= (k + 2) 2^-24 sum |a||b| + eps(out) |want|. Outputs are
//! poisoned with NaN first, so an element the kernel did not write fails.
//!
//! Split-k (forced on small shapes through `MatmulPlan::with_splits`, the `tuning` hook, and
//! chosen by `MatmulPlan::new` on thin ones) is held to the same bound and must give the same
//! bits on every run; TF32 products to the TF32 bound, 2^-9 sum |a||b| more (each input
//! truncated, off by less than 2^-10 of itself), and to the CPU twin that truncates its inputs
//! the same way. On Hopper, TF32 products of at least one 128 x 64 tile run the wgmma kernel
//! (operands that are not k-major staged through the workspace; asserted), and the `mma.sync`
//! TF32 kernel when the workspace has no room for the staging or the `sm_80` kernels are forced.
//!
//! f16 and bf16 products on Hopper (`kernels/matmul_sm90.cu`) are held to the same bound on
//! squares up to 4096, non-multiples of the tiles, every layout, batches, broadcasts, thin
//! products of n < 128 (the 128 x 64 tile, split in k by the plan rule up to 8192 x 64 x 8192)
//! and split plans, through the Hopper kernels and again with the `sm_80` kernels forced; each
//! case asserts which kernel ran (`last_matmul_kernel`). Large outputs are checked on a grid of
//! sampled rows and columns (tile edges included) and for unwritten (NaN) elements.
//!
//! `GENESIS_MATMUL_TEST_MAX_MACS=N` skips those Hopper-shape cases of more than N multiply-adds
//! (the same layouts, edges and types stay): for compute-sanitizer's racecheck, which checks
//! every shared-memory access and would take hours on the 4096^3 products.

use genesis_kernels::MatmulElement;
use genesis_kernels::matmul::{
    MatmulLayout, MatmulOutput, MatmulPrecision, MatmulShape, MatrixLayout, matmul_strided,
    matmul_strided_precision, to_tf32,
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
    check_at(got, p, MatmulPrecision::Highest, what);
}

/// [`check`] at `precision`: at `High`, 2^-9 sum |a||b| more (TF32 inputs).
fn check_at<O: Out>(
    got: &[O],
    p: &Problem<impl MatmulElement>,
    precision: MatmulPrecision,
    what: &str,
) {
    assert_eq!(got.len(), p.want.len(), "{what}");
    let k = p.shape.k as f64;
    let inputs = match precision {
        MatmulPrecision::Highest => 0.0,
        MatmulPrecision::High => unit(9.0),
    };
    for (i, ((g, w), s)) in got.iter().zip(&p.want).zip(&p.scale).enumerate() {
        let g = f64::from(g.to_f32());
        let tol = ((k + 2.0) * unit(24.0) + inputs) * s + O::EPS * w.abs() + O::TINY;
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
fn tf32_truncation_keeps_ten_mantissa_bits_toward_zero() {
    let one = 1.0f32;
    let ulp = 2f32.powi(-10);
    assert_eq!(to_tf32(one + 2f32.powi(-11)), one);
    assert_eq!(to_tf32(-(one + 2f32.powi(-11))), -one);
    assert_eq!(to_tf32(one + ulp - 2f32.powi(-23)), one);
    assert_eq!(to_tf32(one + ulp), one + ulp);
    assert_eq!(to_tf32(-(one + ulp + 2f32.powi(-20))), -(one + ulp));
    assert_eq!(
        f64::from(to_tf32(f32::MAX)),
        f64::from(f32::MAX) - (2f64.powi(117) - 2f64.powi(104))
    );
    assert!(to_tf32(f32::NAN).is_nan());
    assert!(
        to_tf32(f32::from_bits(0x7f80_0001)).is_nan(),
        "a NaN stays NaN"
    );
    assert_eq!(to_tf32(f32::NEG_INFINITY), f32::NEG_INFINITY);
    assert_eq!(to_tf32(0.0).to_bits(), 0);
    assert_eq!(to_tf32(-0.0).to_bits(), (-0.0f32).to_bits());
    let mut rng = SmallRng::seed_from_u64(3);
    for _ in 0..10_000 {
        let x = f32::from_bits(rng.random::<u32>());
        if !x.is_finite() {
            continue;
        }
        let r = to_tf32(x);
        assert_eq!(r.to_bits() & 0x1fff, 0, "{x}");
        // Toward zero: no larger in magnitude, same sign, within one unit of the 10-bit
        // mantissa (2^-136 among the subnormals, whose spacing is 2^13 of 2^-149).
        assert!(
            r.abs() <= x.abs() && (r == 0.0 || r.signum() == x.signum()),
            "{x} -> {r}"
        );
        let unit_of_x = (f64::from(x).abs() * unit(10.0)).max(unit(136.0));
        assert!(f64::from(x - r).abs() < unit_of_x, "{x} -> {r}");
        // f16 and bf16 values are exact.
        let h = half::f16::from_f32(x).to_f32();
        assert!(!h.is_finite() || to_tf32(h) == h);
        let b = half::bf16::from_f32(x).to_f32();
        assert!(!b.is_finite() || to_tf32(b) == b);
    }
}

#[test]
fn cpu_tf32_twin_is_the_f32_product_of_truncated_inputs() {
    let mut rng = SmallRng::seed_from_u64(8);
    for c in cases() {
        let p = problem::<f32>(c, &mut rng);
        let len = p.shape.c_len().unwrap();
        let mut got = vec![f32::NAN; len];
        let (a, b) = (&p.a[c.offset..], &p.b[c.offset..]);
        let high = MatmulPrecision::High;
        matmul_strided_precision(p.shape, p.layout, high, a, b, &mut got).unwrap();
        check_at(&got, &p, high, &format!("cpu tf32 {c:?}"));
        let ra: Vec<f32> = a.iter().map(|&x| to_tf32(x)).collect();
        let rb: Vec<f32> = b.iter().map(|&x| to_tf32(x)).collect();
        let mut want = vec![f32::NAN; len];
        matmul_strided(p.shape, p.layout, &ra, &rb, &mut want).unwrap();
        assert_eq!(got, want, "{c:?}");
    }
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
    use genesis_kernels::matmul::{
        MatmulPlan, force_sm80_matmul_on_thread, gpu_matmul_planned, gpu_matmul_planned_bias,
        gpu_matmul_strided, last_matmul_kernel,
    };
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
        let got = run::<T, O>(ctx, stream, &p, c, None);
        check(&got, &p, &format!("gpu {} -> {} {c:?}", T::NAME, O::NAME));
    }

    /// The product of `p` on the GPU: by `gpu_matmul_strided` (`plan` None) or as `plan`
    /// says, into an output poisoned with NaN (and a workspace poisoned with NaN).
    fn run<T: MatmulElement, O: MatmulOutput<T>>(
        ctx: &Arc<Context>,
        stream: &Stream,
        p: &Problem<T>,
        c: Case,
        plan: Option<&MatmulPlan>,
    ) -> Vec<O> {
        let a = DeviceBuffer::from_host(ctx, bytes(&p.a)).unwrap();
        let b = DeviceBuffer::from_host(ctx, bytes(&p.b)).unwrap();
        let len = p.shape.c_len().unwrap();
        let poison = vec![O::from_f32(f32::NAN); len];
        let mut out = DeviceBuffer::from_host(ctx, bytes(&poison)).unwrap();
        let a_span = a.as_span::<T>().unwrap().slice(c.offset..).unwrap();
        let b_span = b.as_span::<T>().unwrap().slice(c.offset..).unwrap();
        match plan {
            None => gpu_matmul_strided::<T, O>(
                stream,
                p.shape,
                p.layout,
                a_span,
                b_span,
                out.as_span_mut::<O>().unwrap(),
            )
            .unwrap(),
            Some(plan) => {
                let ws_len = plan.workspace_bytes_for(
                    &p.layout,
                    std::mem::size_of::<T>(),
                    ctx.compute_capability(),
                    (a_span.addr(), b_span.addr()),
                );
                let ws_poison = vec![f32::NAN; ws_len.div_ceil(4).max(4)];
                let mut ws = DeviceBuffer::from_host(ctx, bytes(&ws_poison)).unwrap();
                gpu_matmul_planned::<T, O>(
                    stream,
                    plan,
                    p.layout,
                    a_span,
                    b_span,
                    out.as_span_mut::<O>().unwrap(),
                    ws.as_span_mut::<u8>().unwrap(),
                )
                .unwrap();
            }
        }
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
        got
    }

    /// Bits of an output, to compare runs.
    fn bits<O: MatmulElement>(v: &[O]) -> Vec<u8> {
        bytes(v).to_vec()
    }

    /// A product split into `splits` slices of k: within the bound, the same bits twice.
    fn split_case<T: MatmulElement, O: MatmulOutput<T> + Out>(
        ctx: &Arc<Context>,
        stream: &Stream,
        c: Case,
        splits: usize,
        precision: MatmulPrecision,
        rng: &mut SmallRng,
    ) {
        let p = problem::<T>(c, rng);
        let plan =
            MatmulPlan::new(p.shape, ctx.multiprocessors() as usize, precision).with_splits(splits);
        if c.m > 1 && c.n > 1 && c.k > 32 {
            assert!(plan.splits() >= 2, "{c:?} split {splits}: {plan:?}");
        }
        assert!(
            plan.kslice().is_multiple_of(32) || plan.splits() == 1,
            "{plan:?}"
        );
        let what = format!(
            "gpu split {} ({precision:?}) {} -> {} {c:?}",
            plan.splits(),
            T::NAME,
            O::NAME
        );
        let got = run::<T, O>(ctx, stream, &p, c, Some(&plan));
        check_at(&got, &p, precision, &what);
        let again = run::<T, O>(ctx, stream, &p, c, Some(&plan));
        assert!(bits(&got) == bits(&again), "{what}: two runs differ");
    }

    /// Shapes for split-k: odd and prime k, k not a multiple of the split, every layout,
    /// padded, misaligned and batched operands (the rotation of `cases`).
    fn split_cases() -> Vec<(Case, usize)> {
        let mut v = Vec::new();
        let shapes = [
            (2, 2, 33),
            (37, 41, 97),
            (128, 128, 256),
            (129, 131, 1000),
            (200, 64, 1021),
            (64, 300, 517),
            (5, 7, 4096),
        ];
        for (si, &(m, n, k)) in shapes.iter().enumerate() {
            for ta in [false, true] {
                for tb in [false, true] {
                    let r = si + 2 * usize::from(ta) + usize::from(tb);
                    let c = Case {
                        m,
                        n,
                        k,
                        ta,
                        tb,
                        pad: [0, 8, 3, 0][r % 4],
                        offset: [0, 0, 0, 1][(r / 2) % 4],
                        batch: [1, 3, 1, 2][r % 4],
                        broadcast: [0, 0, 1, 2][(r / 3) % 4],
                    };
                    v.push((c, [2, 3, 4, 7, 32][r % 5]));
                }
            }
        }
        v
    }

    /// Whether `gemv_wide_*` runs the matrix-vector product `c` of `T`: the outputs lie
    /// contiguous in the matrix (`B` row-major for `m == 1`, `A` column-major for `n == 1`),
    /// its k stride is not 1, and the output count, k stride, batch stride and first element
    /// fill whole 16-byte loads.
    fn runs_wide<T>(c: Case, shape: MatmulShape, layout: MatmulLayout) -> bool {
        let v = 16 / std::mem::size_of::<T>();
        let (outs, (so, sk), xb) = if c.m == 1 {
            let l = layout.b;
            let s = if l.transposed { (l.ld, 1) } else { (1, l.ld) };
            (c.n, s, shape.b_batch_stride)
        } else {
            let l = layout.a;
            let s = if l.transposed { (1, l.ld) } else { (l.ld, 1) };
            (c.m, s, shape.a_batch_stride)
        };
        so == 1
            && sk != 1
            && outs.is_multiple_of(v)
            && sk.is_multiple_of(v)
            && (c.batch == 1 || xb.is_multiple_of(v))
            && c.offset.is_multiple_of(v)
    }

    /// A matrix-vector product as the device's plan makes it and split into 1, 2 and 5
    /// slices: within the bound, the same bits twice, on `gemv_wide_*` exactly when
    /// [`runs_wide`] says so (returned).
    fn mv_case<T: MatmulElement, O: MatmulOutput<T> + Out>(
        ctx: &Arc<Context>,
        stream: &Stream,
        c: Case,
        rng: &mut SmallRng,
    ) -> bool {
        let p = problem::<T>(c, rng);
        let wide = runs_wide::<T>(c, p.shape, p.layout);
        let sms = ctx.multiprocessors() as usize;
        let full = MatmulPrecision::Highest;
        let plans = [
            MatmulPlan::new_for::<T>(p.shape, sms, full),
            MatmulPlan::new(p.shape, sms, full).with_splits(1),
            MatmulPlan::new(p.shape, sms, full).with_splits(2),
            MatmulPlan::new(p.shape, sms, full).with_splits(5),
        ];
        for plan in plans {
            let what = format!(
                "gpu {} -> {} {c:?}, {} slices",
                T::NAME,
                O::NAME,
                plan.splits()
            );
            let got = run::<T, O>(ctx, stream, &p, c, Some(&plan));
            check(&got, &p, &what);
            if c.batch > 0 {
                let ran = last_matmul_kernel().unwrap_or("");
                assert_eq!(ran.starts_with("gemv_wide_"), wide, "{what}: ran {ran}");
            }
            let again = run::<T, O>(ctx, stream, &p, c, Some(&plan));
            assert!(bits(&got) == bits(&again), "{what}: two runs differ");
        }
        wide
    }

    /// Matrix-vector products (`m` or `n` 1) generated at random: outputs contiguous in the
    /// matrix or not, output counts that fill 16-byte loads or not, k from 1 to past several
    /// slices, padded, misaligned, batched and broadcast operands, every element type.
    #[test]
    fn matrix_vector_products_split_or_whole_match_f64_references() {
        if skip_without_gpu("matrix_vector_products_split_or_whole_match_f64_references") {
            return;
        }
        let ctx = Context::get(0).unwrap();
        let stream = Stream::new(&ctx).unwrap();
        let mut rng = SmallRng::seed_from_u64(31);
        let mut wide = 0;
        for i in 0..60 {
            let outs = if rng.random_bool(0.7) {
                8 * rng.random_range(1..=160)
            } else {
                rng.random_range(2..1300)
            };
            let k = if rng.random_bool(0.3) {
                [1, 2, 31, 255, 256, 511, 512][rng.random_range(0..7)]
            } else {
                rng.random_range(1..2600)
            };
            let flat = rng.random_bool(0.5);
            // The layout whose outputs lie contiguous, three times in four.
            let contiguous = rng.random_bool(0.75);
            let c = Case {
                m: if flat { 1 } else { outs },
                n: if flat { outs } else { 1 },
                k,
                ta: !flat && contiguous,
                tb: flat && !contiguous,
                pad: [0, 0, 8, 3][rng.random_range(0..4)],
                offset: [0, 0, 8, 1][rng.random_range(0..4)],
                batch: rng.random_range(1..=3),
                broadcast: rng.random_range(0..3),
            };
            let ran_wide = match i % 5 {
                0 => mv_case::<f32, f32>(&ctx, &stream, c, &mut rng),
                1 => mv_case::<f16, f16>(&ctx, &stream, c, &mut rng),
                2 => mv_case::<f16, f32>(&ctx, &stream, c, &mut rng),
                3 => mv_case::<bf16, bf16>(&ctx, &stream, c, &mut rng),
                _ => mv_case::<bf16, f32>(&ctx, &stream, c, &mut rng),
            };
            wide += usize::from(ran_wide);
        }
        assert!(wide >= 15, "only {wide} cases on the wide kernel");
    }

    #[test]
    fn split_k_products_match_f64_references_and_repeat_bit_for_bit() {
        if skip_without_gpu("split_k_products_match_f64_references_and_repeat_bit_for_bit") {
            return;
        }
        let ctx = Context::get(0).unwrap();
        let stream = Stream::new(&ctx).unwrap();
        let mut rng = SmallRng::seed_from_u64(21);
        let full = MatmulPrecision::Highest;
        for (c, s) in split_cases() {
            split_case::<f32, f32>(&ctx, &stream, c, s, full, &mut rng);
            split_case::<f16, f16>(&ctx, &stream, c, s, full, &mut rng);
            split_case::<f16, f32>(&ctx, &stream, c, s, full, &mut rng);
            split_case::<bf16, bf16>(&ctx, &stream, c, s, full, &mut rng);
            split_case::<bf16, f32>(&ctx, &stream, c, s, full, &mut rng);
            split_case::<f32, f32>(&ctx, &stream, c, s, MatmulPrecision::High, &mut rng);
        }
    }

    #[test]
    fn thin_products_split_k_by_the_plan_rule() {
        if skip_without_gpu("thin_products_split_k_by_the_plan_rule") {
            return;
        }
        let ctx = Context::get(0).unwrap();
        let stream = Stream::new(&ctx).unwrap();
        let sms = ctx.multiprocessors() as usize;
        let mut rng = SmallRng::seed_from_u64(22);
        // [64, 1024] @ [1024, 4096] and [8192-ish, 8192] @ [8192, 64] made smaller in the
        // dimension that does not decide the split (so the f64 reference stays quick).
        for (m, n, k) in [(64, 512, 1024), (200, 64, 3001), (256, 100, 2048)] {
            for (ta, tb) in [(false, false), (true, true)] {
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
                let p = problem::<f32>(c, &mut rng);
                for precision in [MatmulPrecision::Highest, MatmulPrecision::High] {
                    let plan = MatmulPlan::new(p.shape, sms, precision);
                    assert!(plan.splits() >= 2, "{c:?}: {plan:?}");
                    let got = run::<f32, f32>(&ctx, &stream, &p, c, Some(&plan));
                    check_at(&got, &p, precision, &format!("plan {plan:?} {c:?}"));
                }
                let p = problem::<bf16>(c, &mut rng);
                let plan = MatmulPlan::new(p.shape, sms, MatmulPrecision::Highest);
                let got = run::<bf16, bf16>(&ctx, &stream, &p, c, Some(&plan));
                check(&got, &p, &format!("plan {plan:?} {c:?}"));
            }
        }
    }

    #[test]
    fn tf32_kernels_match_f64_references_and_the_cpu_twin() {
        if skip_without_gpu("tf32_kernels_match_f64_references_and_the_cpu_twin") {
            return;
        }
        let ctx = Context::get(0).unwrap();
        let stream = Stream::new(&ctx).unwrap();
        let mut rng = SmallRng::seed_from_u64(23);
        let high = MatmulPrecision::High;
        let mut more = cases();
        // Shapes of the Hopper kernel's tiles and their edges, every layout, padded and
        // misaligned operands (staged, or read in place when aligned), batches and broadcasts.
        for (i, (m, n, k)) in [
            (512, 384, 1024),
            (255, 513, 1023),
            (130, 64, 33),
            (257, 200, 100),
        ]
        .into_iter()
        .enumerate()
        {
            for ta in [false, true] {
                for tb in [false, true] {
                    more.push(Case {
                        m,
                        n,
                        k,
                        ta,
                        tb,
                        pad: [0, 0, 3, 4][i],
                        offset: [0, 1, 0, 4][i],
                        batch: [1, 1, 2, 3][i],
                        broadcast: [0, 0, 1, 2][i],
                    });
                }
            }
        }
        let hopper = ctx.compute_capability() == (9, 0);
        for c in more {
            let p = problem::<f32>(c, &mut rng);
            // Unsplit (a plan for a device of one multiprocessor never splits).
            let plan = MatmulPlan::new(p.shape, 1, high);
            assert_eq!(plan.splits(), 1);
            let got = run::<f32, f32>(&ctx, &stream, &p, c, Some(&plan));
            let what = format!("gpu tf32 {c:?}");
            check_at(&got, &p, high, &what);
            // On Hopper the wgmma kernel runs whatever the layout (an mn-major operand is
            // staged k-major), unless a k-major operand read in place does not start its
            // rows and batches on 16 bytes.
            let s = p.shape;
            let in_place = |k_major: bool, ld: usize, stride: usize, lines: usize| {
                !k_major
                    || (c.offset.is_multiple_of(4)
                        && ld.is_multiple_of(4)
                        && (s.batch == 1
                            || stride == 0
                            || (stride.is_multiple_of(4) && stride >= ld * lines)))
            };
            if hopper
                && c.m >= 128
                && c.n >= 64
                && c.k >= 32
                && in_place(!c.ta, p.layout.a.ld, s.a_batch_stride, c.m)
                && in_place(c.tb, p.layout.b.ld, s.b_batch_stride, c.n)
            {
                let ran = last_matmul_kernel().unwrap_or("");
                assert!(ran.starts_with("matmul_sm90_tf32_nt_"), "{what}: ran {ran}");
            }
            // Against the twin: the same rounded inputs, so the f32 accumulation bound of the
            // rounded problem (its scale is within 2^-10 of the original's). Matrix-vector
            // products (m or n 1) compute in full f32 at every precision: only the bound above.
            if c.m == 1 || c.n == 1 {
                continue;
            }
            let mut twin = vec![f32::NAN; got.len()];
            let (a, b) = (&p.a[c.offset..], &p.b[c.offset..]);
            matmul_strided_precision(p.shape, p.layout, high, a, b, &mut twin).unwrap();
            let k = c.k as f64;
            for (i, ((g, t), s)) in got.iter().zip(&twin).zip(&p.scale).enumerate() {
                let tol = 2.0 * (k + 2.0) * unit(24.0) * s * (1.0 + unit(9.0)) + 1e-30;
                let d = (f64::from(*g) - f64::from(*t)).abs();
                assert!(
                    d <= tol,
                    "{what}: element {i}: {g} vs twin {t} (tolerance {tol})"
                );
            }
            // And TF32 is not the full-precision kernel: some output differs from the f32 one
            // once k is long enough for the inputs' rounding to show.
            if c.k >= 64 && c.m > 1 && c.n > 1 && c.m * c.n >= 64 {
                let plain = run::<f32, f32>(&ctx, &stream, &p, c, None);
                assert!(bits(&plain) != bits(&got), "{what}: TF32 equals full f32");
            }
        }
    }

    /// Operands whose lines or batches do not start on 16 bytes are copied aligned into the
    /// workspace, and the 16-byte kernel runs: the Hopper kernel for f16 and bf16 on compute
    /// capability 9.0, the float4 f32 kernel (not `_any`) everywhere. Within the bound, every
    /// layout, odd leading dimensions, misaligned starts, batches and broadcasts, split and not.
    #[test]
    fn misaligned_operands_run_on_the_16_byte_kernels_after_an_aligned_copy() {
        if skip_without_gpu("misaligned_operands_run_on_the_16_byte_kernels_after_an_aligned_copy")
        {
            return;
        }
        let ctx = Context::get(0).unwrap();
        let stream = Stream::new(&ctx).unwrap();
        let mut rng = SmallRng::seed_from_u64(31);
        let hopper = ctx.compute_capability() == (9, 0);
        let sms = ctx.multiprocessors() as usize;
        let full = MatmulPrecision::Highest;
        for (i, (m, n, k)) in [(255, 129, 99), (131, 300, 77), (200, 65, 1023)]
            .into_iter()
            .enumerate()
        {
            for ta in [false, true] {
                for tb in [false, true] {
                    let c = Case {
                        m,
                        n,
                        k,
                        ta,
                        tb,
                        pad: [1, 3, 0][i],
                        offset: [1, 0, 3][i],
                        batch: [1, 3, 2][i],
                        broadcast: [0, 2, 1][i],
                    };
                    let p = problem::<f32>(c, &mut rng);
                    let plan = MatmulPlan::new(p.shape, sms, full);
                    let got = run::<f32, f32>(&ctx, &stream, &p, c, Some(&plan));
                    check(&got, &p, &format!("f32 aligned copy {c:?}"));
                    let ran = last_matmul_kernel().unwrap_or("");
                    assert!(
                        ran.starts_with("matmul_f32_") && !ran.ends_with("_any"),
                        "f32 {c:?}: ran {ran}"
                    );
                    let p = problem::<bf16>(c, &mut rng);
                    let plan = MatmulPlan::new(p.shape, sms, full);
                    let got = run::<bf16, bf16>(&ctx, &stream, &p, c, Some(&plan));
                    check(&got, &p, &format!("bf16 aligned copy {c:?}"));
                    let ran = last_matmul_kernel().unwrap_or("");
                    if hopper && m >= 128 && n >= 64 && k >= 64 {
                        assert!(ran.starts_with("matmul_sm90_bf16"), "bf16 {c:?}: ran {ran}");
                    }
                }
            }
        }
    }

    /// Each case `(m, n, k, pad, offset, batch, broadcast)` in every layout, within the bound,
    /// through each plan `plans` makes of its shape; `expect(case index, plan, kernel that
    /// ran, what)` then checks the kernel.
    fn f32_cases_with(
        seed: u64,
        cases: &[(usize, usize, usize, usize, usize, usize, u8)],
        plans: impl Fn(MatmulShape) -> Vec<MatmulPlan>,
        expect: impl Fn(usize, &MatmulPlan, &str, &str),
    ) {
        let ctx = Context::get(0).unwrap();
        let stream = Stream::new(&ctx).unwrap();
        let mut rng = SmallRng::seed_from_u64(seed);
        for (i, &(m, n, k, pad, offset, batch, broadcast)) in cases.iter().enumerate() {
            for ta in [false, true] {
                for tb in [false, true] {
                    let c = Case {
                        m,
                        n,
                        k,
                        ta,
                        tb,
                        pad,
                        offset,
                        batch,
                        broadcast,
                    };
                    let p = problem::<f32>(c, &mut rng);
                    for plan in plans(p.shape) {
                        let got = run::<f32, f32>(&ctx, &stream, &p, c, Some(&plan));
                        let what = format!(
                            "f32 {c:?}, {} slices, wide plan {}",
                            plan.splits(),
                            plan.wide_tiles()
                        );
                        check(&got, &p, &what);
                        expect(i, &plan, last_matmul_kernel().unwrap_or(""), &what);
                    }
                }
            }
        }
    }

    /// [`f32_cases_with`] through the device's plan, the rule of `MatmulPlan::new` and an
    /// unsplit plan, kept off the `128 x 256` tiles (with `small`: the plan of
    /// `MatmulPlan::new`, unsplit and split in 3, all forced onto the `64 x 64` tiles); the
    /// kernel that ran starts with `prefix`.
    fn f32_cases_on(
        seed: u64,
        cases: &[(usize, usize, usize, usize, usize, usize, u8)],
        prefix: &str,
        small: bool,
    ) {
        let sms = Context::get(0).unwrap().multiprocessors() as usize;
        let full = MatmulPrecision::Highest;
        let plans = |shape| {
            if small {
                [
                    MatmulPlan::new(shape, sms, full),
                    MatmulPlan::new(shape, 1, full),
                    MatmulPlan::new(shape, 1, full).with_splits(3),
                ]
                .map(|p| p.with_small_tiles(true))
                .to_vec()
            } else {
                // The 128 x 256 tiles have their own test.
                [
                    MatmulPlan::new_for::<f32>(shape, sms, full),
                    MatmulPlan::new(shape, sms, full),
                    MatmulPlan::new(shape, 1, full),
                ]
                .map(|p| p.with_wide_tiles(false))
                .to_vec()
            }
        };
        f32_cases_with(seed, cases, plans, |_, _, ran, what| {
            assert!(ran.starts_with(prefix), "{what}: ran {ran}");
        });
    }

    /// Full-precision f32 products on the `128 x 128` tiles with partial edge tiles: m and n
    /// multiples of 4 (an edge tile then reads whole k slices as float4, zeros past the edge),
    /// m and n that are not (a float4 of an m- or n-major operand would straddle the edge, so
    /// those tiles read element by element), a partial last slice, padded and misaligned
    /// operands, batches and broadcasts; batches large enough that every plan keeps these tiles.
    #[test]
    fn f32_edge_tiles_match_their_cpu_twin() {
        if skip_without_gpu("f32_edge_tiles_match_their_cpu_twin") {
            return;
        }
        let cases = [
            (260, 196, 72, 0, 0, 24, 0),
            (388, 1000, 40, 4, 0, 12, 1),
            (130, 258, 100, 0, 0, 33, 2),
            (131, 133, 64, 0, 1, 36, 0),
        ];
        f32_cases_on(47, &cases, "matmul_f32_", false);
    }

    /// Full-precision f32 products on the `128 x 256` tiles (`matmul_f32w_*`), every layout:
    /// edge tiles in m and n, one k slice and many, batches and broadcasts, planned by the cost
    /// model and forced, unsplit and split. Operands the wide kernel cannot read with float4 loads (m or n not a
    /// multiple of 4 where the operand is contiguous along it, padded rows or a start off 16
    /// bytes) run on the `128 x 128` tiles instead, with the same result.
    #[test]
    fn wide_f32_tiles_match_their_cpu_twin() {
        if skip_without_gpu("wide_f32_tiles_match_their_cpu_twin") {
            return;
        }
        let sms = Context::get(0).unwrap().multiprocessors() as usize;
        let full = MatmulPrecision::Highest;
        let cases = [
            (260, 196, 48, 0, 0, 3, 0),
            (388, 1000, 96, 0, 0, 2, 1),
            (128, 256, 16, 0, 0, 1, 0),
            (132, 516, 160, 0, 0, 5, 2),
            (640, 520, 256, 0, 0, 4, 0),
            (131, 133, 64, 0, 0, 2, 0),
            (260, 196, 48, 4, 0, 3, 0),
            (260, 196, 48, 0, 1, 3, 0),
            (256, 520, 8208, 0, 0, 1, 0),
        ];
        // The cases whose every layout suits the wide kernel.
        let all_wide = [true, true, true, true, true, false, false, false, true];
        // Split plans too: forced into 3 slices, and the cost model's for a GPU of 4
        // multiprocessors, which the long case fills, so that its k (past `SIMT_CHAIN`) is
        // split however full the GPU is.
        let plans = |shape: MatmulShape| {
            let few = MatmulPlan::new_for::<f32>(shape, 4, full);
            if shape.k > 8192 {
                assert!(few.splits() >= 2 && few.kslice() <= 8192, "{few:?}");
            }
            vec![
                MatmulPlan::new_for::<f32>(shape, sms, full),
                MatmulPlan::new(shape, sms, full).with_wide_tiles(true),
                MatmulPlan::new(shape, sms, full)
                    .with_splits(3)
                    .with_wide_tiles(true),
                few,
            ]
        };
        f32_cases_with(59, &cases, plans, |i, plan, ran, what| {
            if plan.wide_tiles() && all_wide[i] {
                assert!(ran.starts_with("matmul_f32w_"), "{what}: ran {ran}");
            } else if !plan.wide_tiles() {
                assert!(!ran.starts_with("matmul_f32w_"), "{what}: ran {ran}");
            }
        });
    }

    /// Full-precision f32 products of n <= 64 run on the `256 x 64` tiles: edges in m, n and
    /// k, padded operands, batches and broadcasts, split and not.
    #[test]
    fn narrow_f32_products_run_on_the_256_x_64_tiles() {
        if skip_without_gpu("narrow_f32_products_run_on_the_256_x_64_tiles") {
            return;
        }
        let cases = [
            (257, 64, 300, 0, 0, 1, 0),
            (130, 33, 1500, 4, 0, 2, 1),
            (1000, 2, 77, 1, 0, 3, 0),
            (600, 64, 2000, 0, 0, 1, 0),
        ];
        f32_cases_on(37, &cases, "matmul_f32n64_", false);
    }

    /// Full-precision f32 products of m <= 64 < n run as C^T = B^T A^T on the `256 x 64` tiles
    /// (C stored transposed): edges in m, n and k, padded and misaligned operands, batches and
    /// broadcasts, split and not.
    #[test]
    fn flat_f32_products_run_transposed_on_the_256_x_64_tiles() {
        if skip_without_gpu("flat_f32_products_run_transposed_on_the_256_x_64_tiles") {
            return;
        }
        let cases = [
            (64, 300, 1000, 0, 0, 1, 0),
            (37, 129, 77, 4, 0, 2, 1),
            (2, 1000, 300, 1, 1, 3, 2),
            (63, 65, 2, 3, 2, 2, 0),
        ];
        f32_cases_on(41, &cases, "matmul_f32n64ct_", false);
    }

    /// Full-precision f32 products on the `64 x 64` tiles: edges in m, n and k, padded and
    /// misaligned operands, batches and broadcasts, split and not.
    #[test]
    fn small_f32_products_run_on_the_64_x_64_tiles() {
        if skip_without_gpu("small_f32_products_run_on_the_64_x_64_tiles") {
            return;
        }
        let cases = [
            (100, 100, 100, 0, 0, 1, 0),
            (65, 129, 77, 4, 1, 2, 1),
            (200, 300, 1000, 0, 0, 3, 2),
            (127, 66, 17, 3, 0, 1, 0),
            (66, 640, 96, 1, 2, 2, 0),
        ];
        f32_cases_on(43, &cases, "matmul_f32s_", true);
        // The device's plan of a small square product is on the small tiles.
        let ctx = Context::get(0).unwrap();
        let s = MatmulShape {
            batch: 1,
            m: 100,
            n: 100,
            k: 100,
            a_batch_stride: 0,
            b_batch_stride: 0,
        };
        let p =
            MatmulPlan::new_for::<f32>(s, ctx.multiprocessors() as usize, MatmulPrecision::Highest);
        assert!(p.small_tiles(), "{p:?}");
    }

    #[test]
    fn split_plans_reject_a_short_or_misaligned_workspace_before_launching() {
        if skip_without_gpu("split_plans_reject_a_short_or_misaligned_workspace_before_launching") {
            return;
        }
        let ctx = Context::get(0).unwrap();
        let stream = Stream::new(&ctx).unwrap();
        let (m, n, k) = (8, 8, 256);
        let shape = MatmulShape {
            batch: 1,
            m,
            n,
            k,
            a_batch_stride: m * k,
            b_batch_stride: k * n,
        };
        let layout = MatmulLayout::contiguous(&shape);
        let plan = MatmulPlan::new(shape, 1, MatmulPrecision::Highest).with_splits(4);
        assert_eq!((plan.splits(), plan.workspace_bytes()), (4, 4 * m * n * 4));
        let a = DeviceBuffer::from_host(&ctx, bytes(&vec![1.0f32; m * k])).unwrap();
        let b = DeviceBuffer::from_host(&ctx, bytes(&vec![1.0f32; k * n])).unwrap();
        let mut out = DeviceBuffer::from_host(&ctx, bytes(&vec![f32::NAN; m * n])).unwrap();
        let mut ws = DeviceBuffer::alloc(&ctx, plan.workspace_bytes() + 16).unwrap();
        let launch = |out: &mut DeviceBuffer, ws: genesis_cuda::DeviceSpanMut<'_, u8>| {
            gpu_matmul_planned::<f32, f32>(
                &stream,
                &plan,
                layout,
                a.as_span::<f32>().unwrap(),
                b.as_span::<f32>().unwrap(),
                out.as_span_mut::<f32>().unwrap(),
                ws,
            )
        };
        let whole = plan.workspace_bytes();
        let short = ws
            .as_span_mut::<u8>()
            .unwrap()
            .into_slice(..whole - 1)
            .unwrap();
        assert!(matches!(
            launch(&mut out, short),
            Err(genesis_kernels::Error::LengthMismatch { .. })
        ));
        let shifted = ws.as_span_mut::<u8>().unwrap().into_slice(4..).unwrap();
        assert!(matches!(
            launch(&mut out, shifted),
            Err(genesis_kernels::Error::Unsupported { .. })
        ));
        // Nothing was written; then the whole workspace gives k in every output.
        stream.synchronize().unwrap();
        let mut got = vec![0.0f32; m * n];
        // SAFETY: any bit pattern is an f32.
        let dst =
            unsafe { std::slice::from_raw_parts_mut(got.as_mut_ptr().cast::<u8>(), 4 * got.len()) };
        out.copy_to_host(dst).unwrap();
        assert!(got.iter().all(|x| x.is_nan()), "a refused launch wrote");
        launch(&mut out, ws.as_span_mut::<u8>().unwrap()).unwrap();
        stream.synchronize().unwrap();
        // SAFETY: as above.
        let dst =
            unsafe { std::slice::from_raw_parts_mut(got.as_mut_ptr().cast::<u8>(), 4 * got.len()) };
        out.copy_to_host(dst).unwrap();
        assert!(got.iter().all(|&x| x == k as f32), "{got:?}");
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

    /// Every kernel family on few launches, sized for compute-sanitizer racecheck: each case of
    /// [`cases`] once, in one dtype pairing rotated over the cases, and the `sm_80` tensor-core
    /// kernels forced on odd edges, every layout, a thin tile and a split plan.
    #[test]
    fn every_kernel_family_on_a_few_products() {
        if skip_without_gpu("every_kernel_family_on_a_few_products") {
            return;
        }
        let ctx = Context::get(0).unwrap();
        let stream = Stream::new(&ctx).unwrap();
        let mut rng = SmallRng::seed_from_u64(13);
        for (i, c) in cases().into_iter().enumerate() {
            match i % 5 {
                0 => gpu_case::<f32, f32>(&ctx, &stream, c, &mut rng),
                1 => gpu_case::<f16, f16>(&ctx, &stream, c, &mut rng),
                2 => gpu_case::<f16, f32>(&ctx, &stream, c, &mut rng),
                3 => gpu_case::<bf16, bf16>(&ctx, &stream, c, &mut rng),
                _ => gpu_case::<bf16, f32>(&ctx, &stream, c, &mut rng),
            }
        }
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            let w = Wide {
                extra: if tb { 8 } else { 0 },
                batch: if ta { 2 } else { 1 },
                ..wide(129, 200, 72, ta, tb)
            };
            wide_case::<bf16, bf16>(&ctx, &stream, w, true, false, None, None, &mut rng);
            wide_case::<f16, f32>(&ctx, &stream, w, true, false, None, None, &mut rng);
        }
        let thin = wide(300, 64, 1000, false, true);
        wide_case::<bf16, bf16>(&ctx, &stream, thin, true, false, None, None, &mut rng);
        let split = wide(200, 130, 1500, true, false);
        wide_case::<f16, f32>(&ctx, &stream, split, true, true, None, None, &mut rng);
    }

    /// A Hopper-path problem: leading dimensions rounded up to multiples of 8 elements (plus
    /// `extra`), operands starting `offset` elements (a multiple of 8) into their buffers.
    #[derive(Debug, Clone, Copy)]
    struct Wide {
        m: usize,
        n: usize,
        k: usize,
        ta: bool,
        tb: bool,
        extra: usize,
        offset: usize,
        /// Elements C starts past an allocation's start: 1 leaves 16-bit and f32 outputs off
        /// 8 bytes, 4 leaves 16-bit outputs off 16 bytes.
        c_offset: usize,
        batch: usize,
        /// 0: each operand its own matrices; 1: A broadcast; 2: B broadcast.
        broadcast: u8,
    }

    fn wide(m: usize, n: usize, k: usize, ta: bool, tb: bool) -> Wide {
        Wide {
            m,
            n,
            k,
            ta,
            tb,
            extra: 0,
            offset: 0,
            c_offset: 0,
            batch: 1,
            broadcast: 0,
        }
    }

    /// Operands of a [`Wide`] problem without a full f64 reference (too slow for 4096^3):
    /// [`wide_check`] compares a grid of sampled rows and columns and checks that no output
    /// is left NaN.
    struct WideProblem<T> {
        shape: MatmulShape,
        layout: MatmulLayout,
        a: Vec<T>,
        b: Vec<T>,
    }

    fn wide_problem<T: MatmulElement>(w: Wide, rng: &mut SmallRng) -> WideProblem<T> {
        let up8 = |x: usize| x.div_ceil(8) * 8 + w.extra;
        let la = MatrixLayout {
            transposed: w.ta,
            ld: up8(if w.ta { w.m } else { w.k }),
        };
        let lb = MatrixLayout {
            transposed: w.tb,
            ld: up8(if w.tb { w.k } else { w.n }),
        };
        // Batch strides: whole matrices of ld-long lines, 8 elements apart when padded.
        let gap = if w.extra > 0 { 8 } else { 0 };
        let sa = if w.broadcast == 1 {
            0
        } else {
            la.ld * if w.ta { w.k } else { w.m } + gap
        };
        let sb = if w.broadcast == 2 {
            0
        } else {
            lb.ld * if w.tb { w.n } else { w.k } + gap
        };
        let shape = MatmulShape {
            batch: w.batch,
            m: w.m,
            n: w.n,
            k: w.k,
            a_batch_stride: sa,
            b_batch_stride: sb,
        };
        let layout = MatmulLayout { a: la, b: lb };
        let mut gen_vals = |len: usize| -> Vec<T> {
            (0..len)
                .map(|_| T::from_f32(rng.random_range(-1.0f32..1.0)))
                .collect()
        };
        let a = gen_vals(w.offset + layout.a_len(&shape).unwrap());
        let b = gen_vals(w.offset + layout.b_len(&shape).unwrap());
        WideProblem {
            shape,
            layout,
            a,
            b,
        }
    }

    /// Indices to check along an extent: every one up to 300, else the edges of the 128- and
    /// 256-wide tiles and a few random ones.
    fn samples(extent: usize, rng: &mut SmallRng) -> Vec<usize> {
        if extent <= 300 {
            return (0..extent).collect();
        }
        let mut v = vec![0, 1, 63, 64, 127, 128, 255, 256, extent - 2, extent - 1];
        let last = (extent - 1) / 128 * 128;
        v.extend([last.saturating_sub(1), last]);
        v.extend((0..12).map(|_| rng.random_range(0..extent)));
        v.sort_unstable();
        v.dedup();
        v
    }

    fn wide_check<T: MatmulElement, O: Out>(
        got: &[O],
        p: &WideProblem<T>,
        w: Wide,
        rng: &mut SmallRng,
        what: &str,
    ) {
        let s = p.shape;
        assert_eq!(got.len(), s.c_len().unwrap(), "{what}");
        if let Some(i) = got.iter().position(|x| x.to_f32().is_nan()) {
            panic!("{what}: element {i} was not written");
        }
        let (la, lb) = (p.layout.a, p.layout.b);
        let rows = samples(s.m, rng);
        let cols = samples(s.n, rng);
        let k = s.k as f64;
        for bi in 0..s.batch {
            let a0 = w.offset + bi * s.a_batch_stride;
            let b0 = w.offset + bi * s.b_batch_stride;
            for &i in &rows {
                for &j in &cols {
                    let (mut sum, mut scale) = (0f64, 0f64);
                    for q in 0..s.k {
                        let ia = a0
                            + if la.transposed {
                                q * la.ld + i
                            } else {
                                i * la.ld + q
                            };
                        let ib = b0
                            + if lb.transposed {
                                j * lb.ld + q
                            } else {
                                q * lb.ld + j
                            };
                        let x = f64::from(p.a[ia].to_f32()) * f64::from(p.b[ib].to_f32());
                        sum += x;
                        scale += x.abs();
                    }
                    let g = f64::from(got[(bi * s.m + i) * s.n + j].to_f32());
                    let tol = (k + 2.0) * unit(24.0) * scale + O::EPS * sum.abs() + O::TINY;
                    assert!(
                        (g - sum).abs() <= tol,
                        "{what}: batch {bi} ({i}, {j}): {g} vs {sum} (tolerance {tol})"
                    );
                }
            }
        }
    }

    /// Runs `w` as `T -> O` (unsplit, or by the plan rule when `planned`, or on the Hopper
    /// tile and split `forced` gives) and checks it; with `sm80` the `sm_80` kernels are
    /// forced on this thread. Asserts which kernel ran: a Hopper kernel (of `tile` when given,
    /// `256` or `128`; of the forced tile) on a compute capability 9.0 device unless forced, a
    /// `matmul.cu` kernel otherwise.
    #[allow(clippy::too_many_arguments)]
    fn wide_case<T: MatmulElement, O: MatmulOutput<T> + Out>(
        ctx: &Arc<Context>,
        stream: &Stream,
        w: Wide,
        sm80: bool,
        planned: bool,
        tile: Option<&str>,
        forced: Option<(usize, usize)>,
        rng: &mut SmallRng,
    ) {
        let macs = w.batch * w.m * w.n * w.k;
        if std::env::var("GENESIS_MATMUL_TEST_MAX_MACS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .is_some_and(|max| macs > max)
        {
            return;
        }
        let p = wide_problem::<T>(w, rng);
        let len = p.shape.c_len().unwrap();
        let a = DeviceBuffer::from_host(ctx, bytes(&p.a)).unwrap();
        let b = DeviceBuffer::from_host(ctx, bytes(&p.b)).unwrap();
        let mut out =
            DeviceBuffer::from_host(ctx, bytes(&vec![O::from_f32(f32::NAN); w.c_offset + len]))
                .unwrap();
        let a_span = a.as_span::<T>().unwrap().slice(w.offset..).unwrap();
        let b_span = b.as_span::<T>().unwrap().slice(w.offset..).unwrap();
        force_sm80_matmul_on_thread(Some(sm80));
        let mut plan = MatmulPlan::new(
            p.shape,
            ctx.multiprocessors() as usize,
            MatmulPrecision::Highest,
        );
        if let Some((t, splits)) = forced {
            plan = plan.with_splits(splits).with_sm90_tile(t);
        }
        let what = format!(
            "{} -> {} {w:?} sm80 {sm80} splits {}",
            T::NAME,
            O::NAME,
            if planned { plan.splits() } else { 1 }
        );
        if planned {
            let mut ws = DeviceBuffer::alloc(ctx, plan.workspace_bytes().max(16)).unwrap();
            gpu_matmul_planned::<T, O>(
                stream,
                &plan,
                p.layout,
                a_span,
                b_span,
                out.as_span_mut::<O>()
                    .unwrap()
                    .slice_mut(w.c_offset..)
                    .unwrap(),
                ws.as_span_mut::<u8>().unwrap(),
            )
            .unwrap();
            stream.synchronize().unwrap();
        } else {
            gpu_matmul_strided::<T, O>(
                stream,
                p.shape,
                p.layout,
                a_span,
                b_span,
                out.as_span_mut::<O>()
                    .unwrap()
                    .slice_mut(w.c_offset..)
                    .unwrap(),
            )
            .unwrap();
        }
        force_sm80_matmul_on_thread(None);
        let kernel = last_matmul_kernel().unwrap();
        if ctx.compute_capability() == (9, 0) && !sm80 {
            assert!(kernel.starts_with("matmul_sm90_"), "{what}: ran {kernel}");
            if let Some(t) = tile {
                assert!(kernel.ends_with(t), "{what}: ran {kernel}, not tile {t}");
            }
            // Forced tiles take products of n >= 128; the ping-pong kernels (tiles 3 to 5) run
            // 16-bit outputs of unsplit products, the 192 x 192 ones (tile 6) every output.
            if let Some((t, _)) =
                forced.filter(|&(t, _)| w.n >= 128 && (t == 6 || O::NAME == T::NAME))
            {
                let want = pingpong_suffix(t);
                assert!(
                    (t == 6 || kernel.contains("_pp_")) && kernel.ends_with(want),
                    "{what}: ran {kernel}, not the forced tile {t}"
                );
            }
        } else {
            assert!(
                kernel.starts_with("matmul_") && !kernel.starts_with("matmul_sm90"),
                "{what}: ran {kernel}"
            );
        }
        stream.synchronize().unwrap();
        let mut got = vec![O::from_f32(0.0); w.c_offset + len];
        // SAFETY: any bit pattern is a value of these types.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(
                got.as_mut_ptr().cast::<u8>(),
                std::mem::size_of_val(&got[..]),
            )
        };
        out.copy_to_host(dst).unwrap();
        assert!(
            got[..w.c_offset].iter().all(|x| x.to_f32().is_nan()),
            "{what}: wrote before C"
        );
        wide_check(&got[w.c_offset..], &p, w, rng, &what);
    }

    /// The Hopper shapes: squares, non-multiples of the tiles, every layout, batches and
    /// broadcasts, padded leading dimensions, shifted (16-byte aligned) operand starts and
    /// outputs shifted off 8 and 16 bytes.
    fn wide_cases() -> Vec<Wide> {
        let mut v = Vec::new();
        let shapes = [
            (128, 128, 128),
            (256, 256, 256),
            (512, 512, 512),
            (1000, 1000, 1000),
            (1024, 1024, 1024),
            (129, 200, 72),
            (300, 1000, 65),
            (4095, 4097, 1023),
        ];
        for (si, &(m, n, k)) in shapes.iter().enumerate() {
            for ta in [false, true] {
                for tb in [false, true] {
                    let r = si + 2 * usize::from(ta) + usize::from(tb);
                    let big = m * n * k > 1 << 30;
                    v.push(Wide {
                        extra: [0, 8, 0, 16][r % 4],
                        offset: [0, 8, 0, 0][(r / 2) % 4],
                        c_offset: [0, 0, 1, 4][(r + 1) % 4],
                        batch: if big { 1 } else { [1, 3, 1, 2][r % 4] },
                        broadcast: if big { 0 } else { [0, 0, 1, 2][(r / 3) % 4] },
                        ..wide(m, n, k, ta, tb)
                    });
                }
            }
        }
        v
    }

    fn wide_all_types(ctx: &Arc<Context>, stream: &Stream, sm80: bool, rng: &mut SmallRng) {
        for w in wide_cases() {
            wide_case::<bf16, bf16>(ctx, stream, w, sm80, false, None, None, rng);
            wide_case::<f16, f16>(ctx, stream, w, sm80, false, None, None, rng);
            wide_case::<bf16, f32>(ctx, stream, w, sm80, false, None, None, rng);
            wide_case::<f16, f32>(ctx, stream, w, sm80, false, None, None, rng);
        }
        // Large squares: the 128 x 256 tile.
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            let w = wide(4096, 4096, 4096, ta, tb);
            let t = Some("_256");
            wide_case::<bf16, bf16>(ctx, stream, w, sm80, false, t, None, rng);
            wide_case::<f16, f16>(ctx, stream, w, sm80, false, t, None, rng);
        }
        // Thin products split by the plan rule: slices of 256, 256, 320 (the last 220 long) and
        // 352 (not a multiple of the kernels' 64-deep stages; the last 296 long).
        for (m, n, k) in [
            (256, 256, 8192),
            (128, 384, 4096),
            (200, 130, 1500),
            (1000, 1000, 1000),
        ] {
            for (ta, tb) in [(false, false), (true, true)] {
                let w = wide(m, n, k, ta, tb);
                wide_case::<bf16, bf16>(ctx, stream, w, sm80, true, None, None, rng);
                wide_case::<f16, f32>(ctx, stream, w, sm80, true, None, None, rng);
            }
        }
        // Thin n: the 128 x 64 tile, unsplit (a partial last column tile at n = 72 and 120, a
        // single 64-deep stage at k = 64) and split by the plan rule (8192 x 64 x 8192: 5
        // slices of 1664; 2048 x 96 x 4096: 16 slices of 256).
        let thin = Some("_64");
        for (m, n, k) in [(300, 64, 1000), (1000, 72, 520), (129, 120, 64)] {
            for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                let w = Wide {
                    batch: if ta == tb { 1 } else { 2 },
                    broadcast: u8::from(ta && !tb),
                    extra: if tb { 8 } else { 0 },
                    ..wide(m, n, k, ta, tb)
                };
                wide_case::<bf16, bf16>(ctx, stream, w, sm80, false, thin, None, rng);
                wide_case::<f16, f32>(ctx, stream, w, sm80, false, thin, None, rng);
            }
        }
        for (m, n, k) in [(8192, 64, 8192), (2048, 96, 4096)] {
            for (ta, tb) in [(false, false), (true, true)] {
                let w = wide(m, n, k, ta, tb);
                wide_case::<bf16, bf16>(ctx, stream, w, sm80, true, thin, None, rng);
                wide_case::<f16, f32>(ctx, stream, w, sm80, true, thin, None, rng);
            }
        }
    }

    /// `A @ P` for a permutation matrix `P` (`P[p][j] = 1` when `j = (5 p + 3) mod k`, a
    /// permutation as k is not a multiple of 5) and small integers in A: every output is one
    /// element of A, exactly, in the input type.
    /// A wrong operand layout (descriptor, swizzle, transpose) shows as misplaced values, and
    /// the message names the first ones.
    fn permutation_case<T: MatmulOutput<T>>(
        ctx: &Arc<Context>,
        stream: &Stream,
        (m, n): (usize, usize),
        (ta, tb): (bool, bool),
        tile: &str,
    ) {
        let k = n;
        let perm = |p: usize| (5 * p + 3) % k;
        let av = |i: usize, p: usize| ((i * 31 + p * 7) % 61) as f32 - 30.0;
        let mut a = vec![T::from_f32(0.0); m * k];
        let mut b = vec![T::from_f32(0.0); k * n];
        for i in 0..m {
            for p in 0..k {
                a[if ta { p * m + i } else { i * k + p }] = T::from_f32(av(i, p));
            }
        }
        for p in 0..k {
            let j = perm(p);
            b[if tb { j * k + p } else { p * n + j }] = T::from_f32(1.0);
        }
        let shape = MatmulShape {
            batch: 1,
            m,
            n,
            k,
            a_batch_stride: 0,
            b_batch_stride: 0,
        };
        let layout = MatmulLayout {
            a: if ta {
                MatrixLayout::col_major(m)
            } else {
                MatrixLayout::row_major(k)
            },
            b: if tb {
                MatrixLayout::col_major(k)
            } else {
                MatrixLayout::row_major(n)
            },
        };
        let da = DeviceBuffer::from_host(ctx, bytes(&a)).unwrap();
        let db = DeviceBuffer::from_host(ctx, bytes(&b)).unwrap();
        let poison = vec![T::from_f32(f32::NAN); m * n];
        let mut out = DeviceBuffer::from_host(ctx, bytes(&poison)).unwrap();
        force_sm80_matmul_on_thread(Some(false));
        gpu_matmul_strided::<T, T>(
            stream,
            shape,
            layout,
            da.as_span::<T>().unwrap(),
            db.as_span::<T>().unwrap(),
            out.as_span_mut::<T>().unwrap(),
        )
        .unwrap();
        force_sm80_matmul_on_thread(None);
        let kernel = last_matmul_kernel().unwrap();
        let what = format!("{} {m}x{n}x{k} ta {ta} tb {tb}: {kernel}", T::NAME);
        if ctx.compute_capability() == (9, 0) {
            assert!(
                kernel.starts_with("matmul_sm90_") && kernel.ends_with(tile),
                "{what}"
            );
        }
        stream.synchronize().unwrap();
        let mut got = vec![T::from_f32(0.0); m * n];
        // SAFETY: any bit pattern is a value of these types.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(
                got.as_mut_ptr().cast::<u8>(),
                std::mem::size_of_val(&got[..]),
            )
        };
        out.copy_to_host(dst).unwrap();
        let mut wrong = Vec::new();
        for i in 0..m {
            for p in 0..k {
                let j = perm(p);
                let (g, w) = (got[i * n + j].to_f32(), av(i, p));
                if g != w {
                    wrong.push(format!("({i}, {j}): {g} not A[{i}][{p}] = {w}"));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "{what}: {} of {} outputs wrong, first {:?}",
            wrong.len(),
            m * n,
            &wrong[..wrong.len().min(8)]
        );
    }

    #[test]
    fn hopper_kernels_place_every_element_of_permuted_products() {
        if skip_without_gpu("hopper_kernels_place_every_element_of_permuted_products") {
            return;
        }
        let ctx = Context::get(0).unwrap();
        let stream = Stream::new(&ctx).unwrap();
        // One 128 x 128 tile; enough 128 x 256 tiles for every multiprocessor; one 128 x 64
        // tile (n = k = 64: one stage); and 128 x 64 tiles with a half-empty last column tile
        // and stage (n = k = 96).
        let sms = ctx.multiprocessors() as usize;
        for (shape, tile) in [
            ((128, 128), "_128"),
            ((128 * sms, 256), "_256"),
            ((128, 64), "_64"),
            ((256, 96), "_64"),
        ] {
            for layouts in [(false, false), (false, true), (true, false), (true, true)] {
                permutation_case::<bf16>(&ctx, &stream, shape, layouts, tile);
                permutation_case::<f16>(&ctx, &stream, shape, layouts, tile);
            }
        }
    }

    #[test]
    fn hopper_kernels_match_f64_references() {
        if skip_without_gpu("hopper_kernels_match_f64_references") {
            return;
        }
        let ctx = Context::get(0).unwrap();
        let stream = Stream::new(&ctx).unwrap();
        let mut rng = SmallRng::seed_from_u64(31);
        wide_all_types(&ctx, &stream, false, &mut rng);
    }

    /// The cooperative `192 x 192` tile (tile 6: three consumer warpgroups, 512 threads) on
    /// the Hopper shapes (squares, tile edges, every layout, batches, broadcasts, padded and
    /// shifted operands, outputs off 16 bytes) and long-k weight-gradient shapes: 16-bit and
    /// f32 outputs, unsplit and split in k (its f32 partials summed).
    #[test]
    fn square_tile_matches_f64_references() {
        if skip_without_gpu("square_tile_matches_f64_references") {
            return;
        }
        let ctx = Context::get(0).unwrap();
        if ctx.compute_capability() != (9, 0) {
            return;
        }
        let stream = Stream::new(&ctx).unwrap();
        let mut rng = SmallRng::seed_from_u64(61);
        let mut cases = wide_cases();
        for (m, n, k) in [
            (200, 400, 64),
            (385, 193, 1000),
            (3072, 768, 4096),
            (768, 200, 8200),
        ] {
            for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                cases.push(wide(m, n, k, ta, tb));
            }
        }
        for w in cases {
            for splits in [1, 3] {
                let tile = Some((6, splits));
                wide_case::<bf16, bf16>(&ctx, &stream, w, false, true, None, tile, &mut rng);
                wide_case::<f16, f32>(&ctx, &stream, w, false, true, None, tile, &mut rng);
            }
        }
    }

    /// The name ending of forced tile `tile`'s kernels (the ping-pong tiles 3 to 5 and the
    /// 192 x 192 tile 6).
    fn pingpong_suffix(tile: usize) -> &'static str {
        match tile {
            4 => "_192",
            5 => "_192x96",
            6 => "_192x192",
            _ => "_128",
        }
    }

    /// The ping-pong kernels (tiles 3 to 5: 128 x 128, 128 x 192, 192 x 96) on the Hopper shapes
    /// (squares, tile edges, every layout, batches, broadcasts, padded and shifted operands,
    /// outputs off 16 bytes), on GPT-2-like shapes of many units a block (odd and even unit
    /// counts, so that either consumer takes the last), and f32 outputs (which run the
    /// cooperative kernels instead).
    #[test]
    fn pingpong_kernels_match_f64_references() {
        if skip_without_gpu("pingpong_kernels_match_f64_references") {
            return;
        }
        let ctx = Context::get(0).unwrap();
        let stream = Stream::new(&ctx).unwrap();
        let mut rng = SmallRng::seed_from_u64(33);
        let sms = ctx.multiprocessors() as usize;
        for tile in [3, 4, 5] {
            let pp = Some((tile, 1));
            for w in wide_cases() {
                wide_case::<bf16, bf16>(&ctx, &stream, w, false, true, None, pp, &mut rng);
                wide_case::<f16, f16>(&ctx, &stream, w, false, true, None, pp, &mut rng);
            }
            for (m, n, k) in [
                (128 * sms * 2 + 128, 256, 768),
                (128 * sms, 384, 200),
                (128 * sms * 3, 576, 128),
                (3000, 640, 64),
            ] {
                for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                    let w = wide(m, n, k, ta, tb);
                    wide_case::<bf16, bf16>(&ctx, &stream, w, false, true, None, pp, &mut rng);
                    wide_case::<f16, f32>(&ctx, &stream, w, false, true, None, pp, &mut rng);
                }
            }
        }
    }

    /// The ping-pong kernels' bias (loaded before the k loop: into registers on the 128 x 128
    /// tile, shared memory on the 128 x 192 one; added before the one rounding): each output
    /// with the bias equals the output without it plus the bias, rounded, within the two
    /// roundings' bound; biases starting on 4 bytes and on 2 (read as single values), odd
    /// widths (a last column pair half past `n`), partial last tiles of 192, many units a
    /// consumer (its two bias buffers in turn), every layout.
    #[test]
    fn pingpong_kernels_add_the_bias_before_rounding() {
        if skip_without_gpu("pingpong_kernels_add_the_bias_before_rounding") {
            return;
        }
        let ctx = Context::get(0).unwrap();
        if ctx.compute_capability() != (9, 0) {
            return;
        }
        let stream = Stream::new(&ctx).unwrap();
        let mut rng = SmallRng::seed_from_u64(41);
        let sms = ctx.multiprocessors() as usize;
        let shapes = [
            (300, 200, 64),
            (260, 131, 96),
            (128 * sms + 64, 384, 768),
            (128 * sms * 2, 400, 192),
        ];
        for tile in [3, 4, 5] {
            for (m, n, k) in shapes {
                for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                    for start in [0usize, 1] {
                        let w = wide(m, n, k, ta, tb);
                        pingpong_bias_case::<bf16>(&ctx, &stream, w, tile, start, &mut rng);
                        pingpong_bias_case::<f16>(&ctx, &stream, w, tile, start, &mut rng);
                    }
                }
            }
        }
    }

    fn pingpong_bias_case<T: MatmulOutput<T> + Out>(
        ctx: &Arc<Context>,
        stream: &Stream,
        w: Wide,
        tile: usize,
        start: usize,
        rng: &mut SmallRng,
    ) {
        let p = wide_problem::<T>(w, rng);
        let len = p.shape.c_len().unwrap();
        let plan = MatmulPlan::new(
            p.shape,
            ctx.multiprocessors() as usize,
            MatmulPrecision::Highest,
        )
        .with_splits(1)
        .with_sm90_tile(tile);
        let bias: Vec<T> = (0..start + w.n)
            .map(|_| T::from_f32(rng.random_range(-4.0f32..4.0)))
            .collect();
        let a = DeviceBuffer::from_host(ctx, bytes(&p.a)).unwrap();
        let b = DeviceBuffer::from_host(ctx, bytes(&p.b)).unwrap();
        let bias_buf = DeviceBuffer::from_host(ctx, bytes(&bias)).unwrap();
        let mut ws = DeviceBuffer::alloc(ctx, plan.workspace_bytes().max(16)).unwrap();
        let mut outs = Vec::new();
        for with_bias in [false, true] {
            let mut out =
                DeviceBuffer::from_host(ctx, bytes(&vec![T::from_f32(f32::NAN); len])).unwrap();
            let (a_span, b_span) = (a.as_span::<T>().unwrap(), b.as_span::<T>().unwrap());
            let c = out.as_span_mut::<T>().unwrap();
            let wsp = ws.as_span_mut::<u8>().unwrap();
            if with_bias {
                let bspan = bias_buf.as_span::<T>().unwrap().slice(start..).unwrap();
                let added = gpu_matmul_planned_bias::<T, T>(
                    stream, &plan, p.layout, a_span, b_span, bspan, c, wsp,
                )
                .unwrap();
                assert!(added, "{w:?}: the kernel did not add the bias");
            } else {
                gpu_matmul_planned::<T, T>(stream, &plan, p.layout, a_span, b_span, c, wsp)
                    .unwrap();
            }
            stream.synchronize().unwrap();
            let want = pingpong_suffix(tile);
            let kernel = last_matmul_kernel().unwrap();
            assert!(
                kernel.contains("_pp_") && kernel.ends_with(want),
                "{w:?}: ran {kernel}, not the ping-pong tile {tile}"
            );
            let mut got = vec![T::from_f32(0.0); len];
            // SAFETY: any bit pattern is a value of these types.
            let dst = unsafe {
                std::slice::from_raw_parts_mut(
                    got.as_mut_ptr().cast::<u8>(),
                    std::mem::size_of_val(&got[..]),
                )
            };
            out.copy_to_host(dst).unwrap();
            outs.push(got);
        }
        // 16-bit rounding: 2^-8 (bf16) or 2^-11 (f16) relative, once without and once with.
        let u = if T::NAME == "bf16" {
            unit(8.0)
        } else {
            unit(11.0)
        };
        for (i, (plain, biased)) in outs[0].iter().zip(&outs[1]).enumerate() {
            let col = i % w.n;
            let (x, bv) = (
                f64::from(plain.to_f32()),
                f64::from(bias[start + col].to_f32()),
            );
            let y = f64::from(biased.to_f32());
            let tol = u * (x.abs() + (x + bv).abs() + bv.abs()) + 1e-30;
            assert!(
                (y - (x + bv)).abs() <= tol,
                "{} {w:?} bias from element {start}: [{}, {col}] {y} against {x} + {bv}",
                T::NAME,
                i / w.n
            );
        }
    }

    #[test]
    fn forced_sm80_kernels_match_f64_references_on_the_hopper_shapes() {
        if skip_without_gpu("forced_sm80_kernels_match_f64_references_on_the_hopper_shapes") {
            return;
        }
        let ctx = Context::get(0).unwrap();
        let stream = Stream::new(&ctx).unwrap();
        let mut rng = SmallRng::seed_from_u64(32);
        wide_all_types(&ctx, &stream, true, &mut rng);
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

    /// f64 products (`matmul_f64_*`, both tiles) against the CPU twin accumulated in f64:
    /// random shapes (empty, thin, edge tiles, k past many slices), every layout, padded leading dimensions,
    /// batches with broadcast operands and operands starting off 16 bytes, within the f64
    /// accumulation bound; outputs poisoned with NaN first, so an output never written fails.
    #[test]
    fn f64_products_match_the_cpu_twin() {
        if skip_without_gpu("f64_products_match_the_cpu_twin") {
            return;
        }
        use genesis_kernels::matmul::{gpu_matmul_f64, matmul_host};
        let ctx = Context::get(0).unwrap();
        let stream = Stream::new(&ctx).unwrap();
        let mut rng = SmallRng::seed_from_u64(64);
        let dims = [0usize, 1, 2, 5, 16, 63, 64, 65, 100, 129, 200];
        // The last cases have enough 128 x 128 tiles (at least twice the multiprocessors)
        // for the large tile (`matmul_f64_big_*`), edge tiles included.
        let big_dims = [640usize, 700, 777];
        let (mut big_runs, mut pair_runs) = (0, 0);
        for case in 0..172 {
            let big = case >= 160;
            let pick = |rng: &mut SmallRng| dims[rng.random_range(0..dims.len())];
            let pick_big = |rng: &mut SmallRng| big_dims[rng.random_range(0..big_dims.len())];
            let (m, n) = if big {
                (pick_big(&mut rng), pick_big(&mut rng))
            } else {
                (pick(&mut rng), pick(&mut rng))
            };
            let k = if case % 8 == 0 || big {
                rng.random_range(300..700)
            } else {
                pick(&mut rng)
            };
            let batch = if big {
                rng.random_range(6..14)
            } else {
                rng.random_range(1..4)
            };
            let (ta, tb) = (rng.random_bool(0.5), rng.random_bool(0.5));
            let pad = |rng: &mut SmallRng| {
                if rng.random_bool(0.3) {
                    rng.random_range(1..5)
                } else {
                    0
                }
            };
            // A third of the cases aligned for the 16-byte copies (`matmul_f64_*v_*`): even
            // leading dimensions and batch strides, no offset.
            let aligned = case % 3 == 0;
            let even = |x: usize| if aligned { x + x % 2 } else { x };
            let a_l = MatrixLayout {
                transposed: ta,
                ld: even(if ta { m } else { k } + pad(&mut rng)),
            };
            let b_l = MatrixLayout {
                transposed: tb,
                ld: even(if tb { k } else { n } + pad(&mut rng)),
            };
            let layout = MatmulLayout { a: a_l, b: b_l };
            let a_one = a_l.span(m, k).unwrap();
            let b_one = b_l.span(k, n).unwrap();
            let sa = if rng.random_bool(0.25) {
                0
            } else {
                even(a_one + rng.random_range(0..3))
            };
            let sb = if rng.random_bool(0.25) {
                0
            } else {
                even(b_one + rng.random_range(0..3))
            };
            let shape = MatmulShape {
                batch,
                m,
                n,
                k,
                a_batch_stride: sa,
                b_batch_stride: sb,
            };
            let offset = if aligned { 0 } else { rng.random_range(0..2) };
            let a_len = offset + layout.a_len(&shape).unwrap();
            let b_len = offset + layout.b_len(&shape).unwrap();
            let a: Vec<f64> = (0..a_len).map(|_| rng.random_range(-1.0..1.0)).collect();
            let b: Vec<f64> = (0..b_len).map(|_| rng.random_range(-1.0..1.0)).collect();
            let len = shape.c_len().unwrap();
            let mut want = vec![0.0f64; len];
            matmul_host(shape, layout, &a[offset..], &b[offset..], &mut want).unwrap();
            let da = DeviceBuffer::from_host(&ctx, bytes(&a)).unwrap();
            let db = DeviceBuffer::from_host(&ctx, bytes(&b)).unwrap();
            let mut out =
                DeviceBuffer::from_host(&ctx, bytes(&vec![f64::NAN; len.max(1)])).unwrap();
            gpu_matmul_f64(
                &stream,
                shape,
                layout,
                da.as_span::<f64>().unwrap().slice(offset..).unwrap(),
                db.as_span::<f64>().unwrap().slice(offset..).unwrap(),
                out.as_span_mut::<f64>().unwrap(),
            )
            .unwrap();
            if len > 0 {
                // The launcher's rule: the large tile where its tiles over the batch fill
                // every multiprocessor at least twice.
                let tiles = m.div_ceil(128) * n.div_ceil(128) * batch;
                let want_big = tiles >= 2 * ctx.multiprocessors() as usize;
                let ran = genesis_kernels::matmul::last_matmul_kernel().unwrap_or("");
                assert_eq!(
                    ran.starts_with("matmul_f64_big_"),
                    want_big,
                    "case {case}: {ran}"
                );
                big_runs += usize::from(want_big);
                pair_runs += usize::from(ran.contains("_v_"));
            }
            stream.synchronize().unwrap();
            let mut got = vec![0.0f64; len.max(1)];
            // SAFETY: any bit pattern is an f64.
            let dst = unsafe {
                std::slice::from_raw_parts_mut(got.as_mut_ptr().cast::<u8>(), got.len() * 8)
            };
            out.copy_to_host(dst).unwrap();
            // |a|, |b| <= 1: sum |a||b| <= k; the bound doubled for the two orders.
            let tol = 2.0 * (k as f64 + 1.0) * k as f64 * f64::EPSILON / 2.0 + f64::MIN_POSITIVE;
            for (i, (g, w)) in got[..len].iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= tol,
                    "case {case} {shape:?} {layout:?} offset {offset}: c[{i}] = {g}, want {w}"
                );
            }
        }
        assert!(big_runs >= 4, "the large tile ran {big_runs} times");
        // Both copy paths ran: every aligned case (a third, less the empty ones) and some
        // others take the 16-byte copies, the cases with an odd offset never.
        assert!(
            (40..150).contains(&pair_runs),
            "16-byte copies in {pair_runs} cases"
        );
        // A product of mismatched spans fails before launching.
        let shape = MatmulShape {
            batch: 1,
            m: 4,
            n: 4,
            k: 4,
            a_batch_stride: 16,
            b_batch_stride: 16,
        };
        let small = DeviceBuffer::from_host(&ctx, bytes(&[0.0f64; 15])).unwrap();
        let full = DeviceBuffer::from_host(&ctx, bytes(&[0.0f64; 16])).unwrap();
        let mut out = DeviceBuffer::from_host(&ctx, bytes(&[0.0f64; 16])).unwrap();
        assert!(
            gpu_matmul_f64(
                &stream,
                shape,
                MatmulLayout::contiguous(&shape),
                small.as_span::<f64>().unwrap(),
                full.as_span::<f64>().unwrap(),
                out.as_span_mut::<f64>().unwrap(),
            )
            .is_err()
        );
    }
}
