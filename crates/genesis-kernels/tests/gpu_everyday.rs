//! The everyday kernels against their CPU twins: prod, any/all, var/std over full, row and
//! column reductions of odd and large shapes, aligned and misaligned, cumsum and cumprod along
//! rows (one pass and chunked) and columns, gather/scatter/scatter_add, sort (one block a row,
//! and chunks merged for long rows; exact), and clamp over random bit patterns (exact). sin/cos
//! are in `gpu_elementwise` (`UnaryOp::ALL`).
#![cfg(feature = "cuda")]

use std::sync::Arc;

use genesis_cuda::{Context, DeviceBuffer, Stream, skip_without_gpu};
use genesis_kernels::reduce::{self, ReducePlan};
use genesis_kernels::scan::{self, ScanOp, ScanPlan};
use genesis_kernels::{Element, ReduceOp, ReduceShape, cpu, gpu};
use half::{bf16, f16};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod common;
use common::{Random, bytes_of, from_bytes};

const SHAPES: &[(usize, usize, usize)] = &[
    (1, 0, 1),
    (1, 1, 1),
    (1, 31, 1),
    (1, 1025, 1),
    (1, (1 << 20) + 3, 1),
    (7, 5000, 1),
    (1000, 33, 1),
    (3, 1000, 7),
    (2, 4097, 100),
    (1, 3, 70_000),
    (66_000, 2, 3),
    (0, 5, 3),
    (4, 0, 3),
    (5, 7000, 32),
];

/// Values for products (near 1 in magnitude, so that long lines stay finite) and variances.
trait Gen: Element + Default {
    fn near_one(rng: &mut SmallRng) -> Self;
    /// Unit roundoff of the type (0 for integers).
    const EPS: f64;
    /// The epsilon of the kernels' accumulator: f32's for the floats, f64's for f64.
    const ACC_EPS: f64 = f32::EPSILON as f64;
}
impl Gen for f64 {
    fn near_one(rng: &mut SmallRng) -> Self {
        rng.random_range(0.999..1.001) * if rng.random_bool(0.5) { 1.0 } else { -1.0 }
    }
    const EPS: f64 = f64::EPSILON;
    const ACC_EPS: f64 = f64::EPSILON;
}
impl Gen for f32 {
    fn near_one(rng: &mut SmallRng) -> Self {
        rng.random_range(0.999..1.001) * if rng.random_bool(0.5) { 1.0 } else { -1.0 }
    }
    const EPS: f64 = f32::EPSILON as f64;
}
impl Gen for f16 {
    fn near_one(rng: &mut SmallRng) -> Self {
        f16::from_f32(rng.random_range(0.999..1.001))
    }
    const EPS: f64 = 0.000_976_562_5;
}
impl Gen for bf16 {
    fn near_one(rng: &mut SmallRng) -> Self {
        bf16::from_f32(rng.random_range(0.999..1.001))
    }
    const EPS: f64 = 0.007_812_5;
}
impl Gen for i32 {
    fn near_one(rng: &mut SmallRng) -> Self {
        // Mostly +-1, sometimes larger, so that products wrap.
        if rng.random_bool(0.99) {
            if rng.random_bool(0.5) { 1 } else { -1 }
        } else {
            rng.random_range(-100..100)
        }
    }
    const EPS: f64 = 0.0;
}
impl Gen for i64 {
    fn near_one(rng: &mut SmallRng) -> Self {
        i64::from(i32::near_one(rng))
    }
    const EPS: f64 = 0.0;
}

fn offsets(n: usize) -> &'static [usize] {
    if n > 1 << 22 { &[0] } else { &[0, 1] }
}

fn gpu_prod<T: Gen, O: Element + Default>(
    ctx: &Arc<Context>,
    x: &[T],
    offset: usize,
    shape: ReduceShape,
) -> Vec<O> {
    let n_out = shape.output_len();
    let dx = DeviceBuffer::from_host(ctx, bytes_of(x)).unwrap();
    let mut dv = DeviceBuffer::from_host(ctx, &vec![0xA5u8; (n_out * 8).max(8)]).unwrap();
    let plan = ReducePlan::new(shape, ctx.multiprocessors() as usize, size_of::<T>());
    let ws_len = plan.workspace_bytes::<T>(ReduceOp::Prod).max(1);
    let mut ws = DeviceBuffer::from_host(ctx, &vec![0x5Au8; ws_len]).unwrap();
    let s = Stream::new(ctx).unwrap();
    reduce::gpu_reduce::<T>(
        &s,
        ReduceOp::Prod,
        dx.as_span::<T>().unwrap().slice(offset..).unwrap(),
        shape,
        dv.as_span_mut().unwrap(),
        None,
        ws.as_span_mut().unwrap(),
    )
    .unwrap();
    s.synchronize().unwrap();
    from_bytes(&dv.to_host_vec().unwrap()[..n_out * size_of::<O>()])
}

fn check_prod<T: Gen, O: Element + Default>(ctx: &Arc<Context>, rng: &mut SmallRng) {
    for &(outer, r, inner) in SHAPES {
        let shape = ReduceShape { outer, r, inner };
        let n = outer * r * inner;
        for &offset in offsets(n) {
            let x: Vec<T> = (0..n + offset).map(|_| T::near_one(rng)).collect();
            let mut want = vec![O::default(); shape.output_len()];
            reduce::reduce::<T, O>(ReduceOp::Prod, &x[offset..], shape, Some(&mut want), None)
                .unwrap();
            let got = gpu_prod::<T, O>(ctx, &x, offset, shape);
            for (t, (g, w)) in got.iter().zip(&want).enumerate() {
                let (gf, wf) = (g.to_f64(), w.to_f64());
                // f32 products: a relative error of about r ulps of f32, then the output's
                // rounding.
                let ok = if T::EPS == 0.0 {
                    O::same(*g, *w)
                } else {
                    (gf - wf).abs() <= (r as f64 * T::ACC_EPS + 2.0 * T::EPS) * wf.abs() + 1e-30
                };
                assert!(
                    ok,
                    "prod_{} {shape:?} offset {offset}: output {t}: gpu {g:?} cpu {w:?}",
                    T::NAME
                );
            }
        }
    }
}

#[test]
fn prod_matches_the_cpu_twin() {
    if skip_without_gpu("prod") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let mut rng = SmallRng::seed_from_u64(0x5eed_0101);
    check_prod::<f32, f32>(&ctx, &mut rng);
    check_prod::<f16, f16>(&ctx, &mut rng);
    check_prod::<bf16, bf16>(&ctx, &mut rng);
    check_prod::<i32, i64>(&ctx, &mut rng);
    check_prod::<i64, i64>(&ctx, &mut rng);
    check_prod::<f64, f64>(&ctx, &mut rng);
}

#[test]
fn any_and_all_match_the_cpu_twin() {
    if skip_without_gpu("any/all") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let s = Stream::new(&ctx).unwrap();
    let mut rng = SmallRng::seed_from_u64(0x5eed_0102);
    for &(outer, r, inner) in SHAPES {
        let shape = ReduceShape { outer, r, inner };
        let n = outer * r * inner;
        // Sparse trues (any mostly false on short lines), dense trues (all mostly true), and
        // bytes other than 0 and 1 (true).
        for density in [0.001, 0.999] {
            for &offset in offsets(n) {
                let x: Vec<u8> = (0..n + offset)
                    .map(|_| {
                        if rng.random_bool(density) {
                            rng.random_range(1..=255)
                        } else {
                            0
                        }
                    })
                    .collect();
                for op in [ReduceOp::Any, ReduceOp::All] {
                    let mut want = vec![0u8; shape.output_len()];
                    reduce::reduce_bool(op, &x[offset..], shape, &mut want).unwrap();
                    let dx = DeviceBuffer::from_host(&ctx, &x).unwrap();
                    let mut dv =
                        DeviceBuffer::from_host(&ctx, &vec![0xA5u8; want.len().max(1)]).unwrap();
                    let plan = ReducePlan::new(shape, ctx.multiprocessors() as usize, 1);
                    let mut ws =
                        DeviceBuffer::alloc(&ctx, plan.workspace_bytes_bool().max(1)).unwrap();
                    reduce::gpu_reduce_bool(
                        &s,
                        op,
                        dx.as_span::<u8>().unwrap().slice(offset..).unwrap(),
                        shape,
                        dv.as_span_mut().unwrap(),
                        ws.as_span_mut().unwrap(),
                    )
                    .unwrap();
                    s.synchronize().unwrap();
                    let got = dv.to_host_vec().unwrap();
                    assert_eq!(
                        &got[..want.len()],
                        &want[..],
                        "{} {shape:?} density {density} offset {offset}",
                        op.name()
                    );
                }
            }
        }
    }
}

fn check_var<T: Gen + Random>(ctx: &Arc<Context>, rng: &mut SmallRng) {
    let s = Stream::new(ctx).unwrap();
    for &(outer, r, inner) in SHAPES {
        let shape = ReduceShape { outer, r, inner };
        let n = outer * r * inner;
        for &offset in offsets(n) {
            // A large mean and a small spread: the shift by the first element matters.
            let x: Vec<T> = (0..n + offset)
                .map(|_| T::from_f64(100.0 + rng.random_range(-1.0..1.0)))
                .collect();
            for (correction, std) in [(1.0, false), (0.0, true), (2.5, false)] {
                let mut want = vec![T::default(); shape.output_len()];
                reduce::var::<T>(&x[offset..], shape, correction, std, &mut want).unwrap();
                let dx = DeviceBuffer::from_host(ctx, bytes_of(&x)).unwrap();
                let mut dv = DeviceBuffer::from_host(
                    ctx,
                    &vec![0xA5u8; (want.len() * size_of::<T>()).max(8)],
                )
                .unwrap();
                let plan = ReducePlan::new(shape, ctx.multiprocessors() as usize, size_of::<T>());
                let mut ws = DeviceBuffer::alloc(ctx, plan.workspace_bytes_var().max(1)).unwrap();
                reduce::gpu_var::<T>(
                    &s,
                    dx.as_span::<T>().unwrap().slice(offset..).unwrap(),
                    shape,
                    correction,
                    std,
                    dv.as_span_mut().unwrap(),
                    ws.as_span_mut().unwrap(),
                )
                .unwrap();
                s.synchronize().unwrap();
                let got: Vec<T> =
                    from_bytes(&dv.to_host_vec().unwrap()[..want.len() * size_of::<T>()]);
                // f64 sums in another order, rounded once: at most one ulp of a narrower type
                // apart; for f64 the sums' own rounding shows (r terms each, and a cancellation
                // below 8x for these values).
                let rel = if size_of::<T>() == 8 {
                    8.0 * (r.max(1) as f64) * f64::EPSILON
                } else {
                    1.01 * T::EPS
                };
                for (t, (g, w)) in got.iter().zip(&want).enumerate() {
                    let (gf, wf) = (g.to_f64(), w.to_f64());
                    let ok = (gf.is_nan() && wf.is_nan())
                        || gf == wf
                        || (gf - wf).abs() <= rel * wf.abs();
                    assert!(
                        ok,
                        "var_{} {shape:?} offset {offset} correction {correction} std {std}: \
                         output {t}: gpu {g:?} cpu {w:?}",
                        T::NAME
                    );
                }
            }
        }
    }
}

#[test]
fn var_matches_the_cpu_twin() {
    if skip_without_gpu("var") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let mut rng = SmallRng::seed_from_u64(0x5eed_0103);
    check_var::<f32>(&ctx, &mut rng);
    check_var::<f16>(&ctx, &mut rng);
    check_var::<bf16>(&ctx, &mut rng);
    check_var::<f64>(&ctx, &mut rng);
}

fn check_clamp<T: Random>(ctx: &Arc<Context>, rng: &mut SmallRng) {
    let s = Stream::new(ctx).unwrap();
    for n in [0usize, 1, 7, 1000, 4099, (1 << 20) + 5] {
        for offset in [0usize, 1] {
            let x: Vec<T> = (0..n + offset).map(|_| T::random(rng)).collect();
            let (a, b) = (T::random(rng), T::random(rng));
            let nan = |v: T| v.to_f64().is_nan();
            if nan(a) || nan(b) {
                continue;
            }
            for (lo, hi) in [(Some(a), Some(b)), (Some(a), None), (None, Some(b))] {
                let mut want = vec![T::default(); n];
                cpu::clamp::<T>(&x[offset..], lo, hi, &mut want).unwrap();
                let dx = DeviceBuffer::from_host(ctx, bytes_of(&x)).unwrap();
                let mut dout = DeviceBuffer::alloc(ctx, (n * size_of::<T>()).max(16)).unwrap();
                gpu::clamp::<T>(
                    &s,
                    dx.as_span::<T>().unwrap().slice(offset..).unwrap(),
                    lo,
                    hi,
                    dout.as_span_mut::<T>().unwrap().into_slice(..n).unwrap(),
                )
                .unwrap();
                s.synchronize().unwrap();
                let got: Vec<T> = from_bytes(&dout.to_host_vec().unwrap()[..n * size_of::<T>()]);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        T::same(*g, *w),
                        "clamp_{} n {n} offset {offset} {lo:?}..{hi:?}: element {i}: gpu {g:?} \
                         cpu {w:?}",
                        T::NAME
                    );
                }
            }
        }
    }
}

#[test]
fn clamp_matches_the_cpu_twin_exactly() {
    if skip_without_gpu("clamp") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let mut rng = SmallRng::seed_from_u64(0x5eed_0104);
    check_clamp::<f32>(&ctx, &mut rng);
    check_clamp::<f16>(&ctx, &mut rng);
    check_clamp::<bf16>(&ctx, &mut rng);
    check_clamp::<i32>(&ctx, &mut rng);
    check_clamp::<i64>(&ctx, &mut rng);
    check_clamp::<f64>(&ctx, &mut rng);
}

#[test]
fn bad_requests_fail_before_launch() {
    if skip_without_gpu("everyday errors") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let s = Stream::new(&ctx).unwrap();
    let input = DeviceBuffer::alloc(&ctx, 1000 * 4).unwrap();
    let mut out = DeviceBuffer::alloc(&ctx, 64).unwrap();
    let mut ws = DeviceBuffer::alloc(&ctx, 1 << 20).unwrap();
    let shape = ReduceShape {
        outer: 1,
        r: 1000,
        inner: 1,
    };
    // Variance of integers, a NaN correction, an input shorter than the shape, no workspace.
    let var_i32 = reduce::gpu_var::<i32>(
        &s,
        input.as_span().unwrap(),
        shape,
        1.0,
        false,
        out.as_span_mut().unwrap(),
        ws.as_span_mut().unwrap(),
    );
    assert!(var_i32.is_err());
    let var = |correction: f64,
               r: usize,
               ws_len: usize,
               out: &mut DeviceBuffer,
               ws: &mut DeviceBuffer| {
        reduce::gpu_var::<f32>(
            &s,
            input.as_span().unwrap(),
            ReduceShape {
                outer: 1,
                r,
                inner: 1,
            },
            correction,
            false,
            out.as_span_mut().unwrap(),
            ws.as_span_mut::<u8>()
                .unwrap()
                .into_slice(..ws_len)
                .unwrap(),
        )
    };
    assert!(var(f64::NAN, 1000, 1 << 20, &mut out, &mut ws).is_err());
    assert!(var(1.0, 3000, 1 << 20, &mut out, &mut ws).is_err());
    assert!(var(1.0, 1000, 0, &mut out, &mut ws).is_err());
    // any of something that is not any/all; clamp into a shorter output.
    assert!(
        reduce::gpu_reduce_bool(
            &s,
            ReduceOp::Sum,
            input.as_span().unwrap(),
            shape,
            out.as_span_mut().unwrap(),
            ws.as_span_mut().unwrap(),
        )
        .is_err()
    );
    assert!(
        gpu::clamp::<f32>(
            &s,
            input.as_span().unwrap(),
            Some(0.0),
            None,
            out.as_span_mut().unwrap(),
        )
        .is_err()
    );
    // Prod with the indices of an arg op.
    let mut idx = DeviceBuffer::alloc(&ctx, 64).unwrap();
    assert!(
        reduce::gpu_reduce::<f32>(
            &s,
            ReduceOp::Prod,
            input.as_span().unwrap(),
            shape,
            out.as_span_mut().unwrap(),
            Some(idx.as_span_mut().unwrap()),
            ws.as_span_mut().unwrap(),
        )
        .is_err()
    );
}

fn check_cumsum<T: Gen + Random, O: Element + Default>(ctx: &Arc<Context>, rng: &mut SmallRng) {
    let s = Stream::new(ctx).unwrap();
    let shapes: &[(usize, usize, usize)] = &[
        (1, 0, 1),
        (1, 1, 1),
        (1, 2047, 1),
        (1, 2049, 1),
        (1, (1 << 22) + 3, 1),
        (3, 100_003, 1),
        (1000, 33, 1),
        (600, 5000, 1),
        (3, 1000, 7),
        (2, 4097, 100),
        (1, 3, 70_000),
        (0, 5, 3),
    ];
    for &(outer, r, inner) in shapes {
        let shape = ReduceShape { outer, r, inner };
        let n = outer * r * inner;
        for &offset in offsets(n) {
            let x: Vec<T> = (0..n + offset)
                .map(|_| {
                    if T::IS_FLOAT {
                        T::from_f64(rng.random_range(-1.0..1.0))
                    } else {
                        T::random(rng)
                    }
                })
                .collect();
            let mut want = vec![O::default(); n];
            scan::cumsum::<T, O>(&x[offset..], shape, &mut want).unwrap();
            let dx = DeviceBuffer::from_host(ctx, bytes_of(&x)).unwrap();
            let mut dout = DeviceBuffer::alloc(ctx, (n * size_of::<O>()).max(16)).unwrap();
            let plan = ScanPlan::new(shape, ctx.multiprocessors() as usize);
            let mut ws = DeviceBuffer::alloc(ctx, plan.workspace_bytes::<T>().max(16)).unwrap();
            scan::gpu_cumsum::<T>(
                &s,
                dx.as_span::<T>().unwrap().slice(offset..).unwrap(),
                shape,
                dout.as_span_mut().unwrap(),
                ws.as_span_mut().unwrap(),
            )
            .unwrap();
            s.synchronize().unwrap();
            let got: Vec<O> = from_bytes(&dout.to_host_vec().unwrap()[..n * size_of::<O>()]);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let ok = if T::IS_FLOAT {
                    // Running sums (f32, or f64 for f64) of values in [-1, 1]: at most (k + 1)
                    // ulps of the accumulator of the sum of magnitudes, then the output's
                    // rounding.
                    let k = (i / inner) % r.max(1);
                    let tol = (k + 1) as f64 * T::ACC_EPS + 2.0 * T::EPS * w.to_f64().abs();
                    (g.to_f64() - w.to_f64()).abs() <= tol
                } else {
                    O::same(*g, *w)
                };
                assert!(
                    ok,
                    "cumsum_{} {shape:?} offset {offset} {plan:?}: element {i}: gpu {g:?} cpu {w:?}",
                    T::NAME
                );
            }
        }
    }
}

/// `cumprod` of every kernel type against its twin over the shapes of [`check_cumsum`]: floats
/// near +-1 (running products stay near 1 in magnitude), integers odd (never 0, wrapping).
fn check_cumprod<T: Gen + Random, O: Element + Default>(ctx: &Arc<Context>, rng: &mut SmallRng) {
    let s = Stream::new(ctx).unwrap();
    let shapes: &[(usize, usize, usize)] = &[
        (1, 0, 1),
        (1, 1, 1),
        (1, 2049, 1),
        (1, (1 << 22) + 3, 1),
        (3, 100_003, 1),
        (1000, 33, 1),
        (600, 5000, 1),
        (3, 1000, 7),
        (1, 3, 70_000),
        (0, 5, 3),
    ];
    for &(outer, r, inner) in shapes {
        let shape = ReduceShape { outer, r, inner };
        let n = outer * r * inner;
        for &offset in offsets(n) {
            let x: Vec<T> = (0..n + offset)
                .map(|_| {
                    if T::IS_FLOAT {
                        T::near_one(rng)
                    } else if rng.random_bool(0.9) {
                        T::from_i64(rng.random_range(-4i64..4) * 2 + 1)
                    } else {
                        T::from_i64(T::random(rng).to_i64() | 1)
                    }
                })
                .collect();
            let mut want = vec![O::default(); n];
            scan::cumprod::<T, O>(&x[offset..], shape, &mut want).unwrap();
            let dx = DeviceBuffer::from_host(ctx, bytes_of(&x)).unwrap();
            let mut dout = DeviceBuffer::alloc(ctx, (n * size_of::<O>()).max(16)).unwrap();
            let plan = ScanPlan::new(shape, ctx.multiprocessors() as usize);
            let mut ws = DeviceBuffer::alloc(ctx, plan.workspace_bytes::<T>().max(16)).unwrap();
            scan::gpu_scan::<T>(
                &s,
                ScanOp::Prod,
                dx.as_span::<T>().unwrap().slice(offset..).unwrap(),
                shape,
                dout.as_span_mut().unwrap(),
                ws.as_span_mut().unwrap(),
            )
            .unwrap();
            s.synchronize().unwrap();
            let got: Vec<O> = from_bytes(&dout.to_host_vec().unwrap()[..n * size_of::<O>()]);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let ok = if T::IS_FLOAT {
                    // Running products of k + 1 factors, each side rounding once a factor in
                    // the accumulator (in different orders), then the output's rounding.
                    let k = (i / inner) % r.max(1);
                    let rel = 2.0 * (k + 1) as f64 * T::ACC_EPS + 2.0 * T::EPS;
                    (g.to_f64() - w.to_f64()).abs() <= rel * w.to_f64().abs()
                } else {
                    O::same(*g, *w)
                };
                assert!(
                    ok,
                    "cumprod_{} {shape:?} offset {offset} {plan:?}: element {i}: gpu {g:?} cpu {w:?}",
                    T::NAME
                );
            }
        }
    }
}

#[test]
fn cumprod_matches_the_cpu_twin() {
    if skip_without_gpu("cumprod") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let mut rng = SmallRng::seed_from_u64(0x5eed_0106);
    check_cumprod::<f32, f32>(&ctx, &mut rng);
    check_cumprod::<f16, f16>(&ctx, &mut rng);
    check_cumprod::<bf16, bf16>(&ctx, &mut rng);
    check_cumprod::<i32, i64>(&ctx, &mut rng);
    check_cumprod::<i64, i64>(&ctx, &mut rng);
    check_cumprod::<f64, f64>(&ctx, &mut rng);
}

#[test]
fn cumsum_matches_the_cpu_twin() {
    if skip_without_gpu("cumsum") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let mut rng = SmallRng::seed_from_u64(0x5eed_0105);
    check_cumsum::<f32, f32>(&ctx, &mut rng);
    check_cumsum::<f16, f16>(&ctx, &mut rng);
    check_cumsum::<bf16, bf16>(&ctx, &mut rng);
    check_cumsum::<i32, i64>(&ctx, &mut rng);
    check_cumsum::<i64, i64>(&ctx, &mut rng);
    check_cumsum::<f64, f64>(&ctx, &mut rng);
}

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

#[test]
fn gather_and_scatter_match_the_cpu_twins() {
    use genesis_kernels::DType;
    use genesis_kernels::gather::{self, Along};
    if skip_without_gpu("gather/scatter") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let s = Stream::new(&ctx).unwrap();
    let mut rng = SmallRng::seed_from_u64(0x5eed_0106);
    // (target shape, index shape, dim)
    let cases: &[(&[usize], &[usize], usize)] = &[
        (&[1000], &[3000], 0),
        (&[300, 200], &[300, 200], 0),
        (&[300, 200], &[250, 500], 1),
        (&[7, 9, 11], &[6, 20, 10], 1),
        (&[2048, 1024], &[2048, 1024], 1),
        // Along the last dimension in groups of four (`along_gather4_*`), rank 3.
        (&[7, 9, 12], &[6, 9, 8], 2),
        (&[5, 3], &[0, 3], 0),
    ];
    for &(tshape, ishape, dim) in cases {
        let size = tshape[dim];
        let nt: usize = tshape.iter().product();
        let ni: usize = ishape.iter().product();
        let idx: Vec<i64> = (0..ni).map(|_| rng.random_range(0..size as i64)).collect();
        let d = Along::new(
            ishape,
            dim,
            &strides(ishape),
            &strides(ishape),
            &strides(tshape),
            size,
        )
        .unwrap();
        let src: Vec<f32> = (0..nt).map(|_| rng.random_range(-4..4) as f32).collect();
        let vals: Vec<f32> = (0..ni).map(|_| rng.random_range(-4..4) as f32).collect();
        let didx = DeviceBuffer::from_host(&ctx, bytes_of(&idx)).unwrap();
        let dsrc = DeviceBuffer::from_host(&ctx, bytes_of(&src)).unwrap();
        let dvals = DeviceBuffer::from_host(&ctx, bytes_of(&vals)).unwrap();
        let mut bad = DeviceBuffer::from_host(&ctx, &u64::MAX.to_le_bytes()).unwrap();
        let idx_span = || didx.as_span::<i64>().unwrap().slice(..ni).unwrap();
        // gather: d's val strides are unused.
        let mut want = vec![0f32; ni];
        gather::gather(&src, &idx, &d, &mut want).unwrap();
        let mut dout = DeviceBuffer::alloc(&ctx, (ni * 4).max(16)).unwrap();
        gather::gpu_gather(
            &s,
            4,
            dsrc.as_span::<u8>().unwrap().slice(..nt * 4).unwrap(),
            idx_span(),
            &d,
            dout.as_span_mut::<u8>().unwrap(),
            bad.as_span_mut().unwrap(),
        )
        .unwrap();
        s.synchronize().unwrap();
        let got: Vec<f32> = from_bytes(&dout.to_host_vec().unwrap()[..ni * 4]);
        assert_eq!(got, want, "gather {tshape:?} {ishape:?} dim {dim}");
        // scatter_add (whole numbers: exact in any order) and, with distinct targets, scatter.
        let mut want = src.clone();
        gather::scatter_add::<f32>(&mut want, &idx, &vals, &d).unwrap();
        let mut dt = DeviceBuffer::from_host(&ctx, bytes_of(&src)).unwrap();
        gather::gpu_scatter(
            &s,
            DType::F32,
            true,
            dt.as_span_mut::<u8>()
                .unwrap()
                .into_slice(..nt * 4)
                .unwrap(),
            idx_span(),
            dvals.as_span::<u8>().unwrap().slice(..ni * 4).unwrap(),
            &d,
            bad.as_span_mut().unwrap(),
        )
        .unwrap();
        s.synchronize().unwrap();
        let got: Vec<f32> = from_bytes(&dt.to_host_vec().unwrap()[..nt * 4]);
        assert_eq!(got, want, "scatter_add {tshape:?} {ishape:?} dim {dim}");
        assert_eq!(
            from_bytes::<u64>(&bad.to_host_vec().unwrap()),
            [u64::MAX],
            "no bad index"
        );
    }
    // Distinct targets for scatter: index i of each line is (i + line) % size, over a full line.
    let (tshape, dim) = ([64usize, 96], 1);
    let size = tshape[dim];
    let idx: Vec<i64> = (0..64 * 96)
        .map(|i| ((i % 96 + i / 96) % size) as i64)
        .collect();
    let d = Along::new(
        &tshape,
        dim,
        &strides(&tshape),
        &strides(&tshape),
        &strides(&tshape),
        size,
    )
    .unwrap();
    let vals: Vec<i64> = (0..64 * 96).map(|i| i as i64 * 7 - 100).collect();
    let mut want = vec![0i64; 64 * 96];
    gather::scatter(&mut want, &idx, &vals, &d).unwrap();
    let didx = DeviceBuffer::from_host(&ctx, bytes_of(&idx)).unwrap();
    let dvals = DeviceBuffer::from_host(&ctx, bytes_of(&vals)).unwrap();
    let mut dt = DeviceBuffer::from_host(&ctx, &vec![0u8; 64 * 96 * 8]).unwrap();
    let mut bad = DeviceBuffer::from_host(&ctx, &u64::MAX.to_le_bytes()).unwrap();
    gather::gpu_scatter(
        &s,
        DType::I64,
        false,
        dt.as_span_mut::<u8>().unwrap(),
        didx.as_span::<i64>().unwrap(),
        dvals.as_span::<u8>().unwrap(),
        &d,
        bad.as_span_mut().unwrap(),
    )
    .unwrap();
    s.synchronize().unwrap();
    assert_eq!(from_bytes::<i64>(&dt.to_host_vec().unwrap()), want);
    // A bad value: the first bad position is reported and nothing is written out of range.
    let mut idx = vec![0i64; 1000];
    idx[700] = -5;
    idx[300] = 96;
    let d = Along::new(&[1000], 0, &[1], &[1], &[1], 96).unwrap();
    let didx = DeviceBuffer::from_host(&ctx, bytes_of(&idx)).unwrap();
    let dsrc = DeviceBuffer::from_host(&ctx, &vec![1u8; 96 * 4]).unwrap();
    let mut dout = DeviceBuffer::alloc(&ctx, 1000 * 4).unwrap();
    let mut bad = DeviceBuffer::from_host(&ctx, &u64::MAX.to_le_bytes()).unwrap();
    gather::gpu_gather(
        &s,
        4,
        dsrc.as_span::<u8>().unwrap(),
        didx.as_span::<i64>().unwrap(),
        &d,
        dout.as_span_mut::<u8>().unwrap(),
        bad.as_span_mut().unwrap(),
    )
    .unwrap();
    s.synchronize().unwrap();
    assert_eq!(from_bytes::<u64>(&bad.to_host_vec().unwrap()), [300]);
}

/// Sorts `x` (`rows` rows of `r`) on the GPU keeping the first `k` of each row, for every `k`
/// of `ks` and both directions, and compares values and indices with the CPU twin exactly.
/// With `poison`, the workspace starts as garbage (0xa5 bytes), so that a merge that read
/// words no step wrote would show.
#[allow(clippy::too_many_arguments)]
fn sort_case<T: Random>(
    ctx: &Arc<Context>,
    s: &Stream,
    x: &[T],
    rows: usize,
    r: usize,
    ks: &[usize],
    poison: bool,
    what: &str,
) {
    use genesis_kernels::sort::{self, SortPlan};
    let n = rows * r;
    assert_eq!(x.len(), n);
    let plan = SortPlan::new(rows, r).unwrap();
    let ws_len = plan.workspace_bytes::<T>().unwrap().max(16);
    let dx = DeviceBuffer::from_host(ctx, bytes_of(x)).unwrap();
    for descending in [false, true] {
        // The twin's whole sort; the first k of each of its rows is its top-k (the twin's k
        // itself is checked by the unit tests).
        let (mut all_v, mut all_i) = (vec![T::default(); n], vec![0i64; n]);
        sort::sort::<T>(x, rows, r, r, descending, &mut all_v, &mut all_i).unwrap();
        for &k in ks {
            let kept = rows * k;
            let mut want_v = Vec::with_capacity(kept);
            let mut want_i = Vec::with_capacity(kept);
            for row in 0..rows {
                want_v.extend_from_slice(&all_v[row * r..row * r + k]);
                want_i.extend_from_slice(&all_i[row * r..row * r + k]);
            }
            let mut dv = DeviceBuffer::alloc(ctx, (kept * size_of::<T>()).max(16)).unwrap();
            let mut di = DeviceBuffer::alloc(ctx, (kept * 8).max(16)).unwrap();
            let mut ws = if poison {
                DeviceBuffer::from_host(ctx, &vec![0xa5u8; ws_len]).unwrap()
            } else {
                DeviceBuffer::alloc(ctx, ws_len).unwrap()
            };
            sort::gpu_sort::<T>(
                s,
                dx.as_span::<T>().unwrap().slice(..n).unwrap(),
                rows,
                r,
                k,
                descending,
                dv.as_span_mut::<T>().unwrap(),
                di.as_span_mut::<i64>().unwrap(),
                ws.as_span_mut().unwrap(),
            )
            .unwrap();
            s.synchronize().unwrap();
            let got_i: Vec<i64> = from_bytes(&di.to_host_vec().unwrap()[..kept * 8]);
            let got_v: Vec<T> = from_bytes(&dv.to_host_vec().unwrap()[..kept * size_of::<T>()]);
            if let Some(at) = (0..kept).find(|&at| got_i[at] != want_i[at]) {
                panic!(
                    "sort_{} {what} {rows}x{r} k {k} descending {descending}: index {at} (row {}, \
                     place {}) is {}, the twin's {}",
                    T::NAME,
                    at / k,
                    at % k,
                    got_i[at],
                    want_i[at]
                );
            }
            assert!(
                got_v.iter().zip(&want_v).all(|(g, w)| T::same(*g, *w)),
                "sort_{} {what} {rows}x{r} k {k} descending {descending}: values",
                T::NAME
            );
        }
    }
}

/// `n` values drawn from `pool` (repeats everywhere: equal keys test the stability).
fn from_pool<T: Copy>(rng: &mut SmallRng, pool: &[T], n: usize) -> Vec<T> {
    (0..n)
        .map(|_| pool[rng.random_range(0..pool.len())])
        .collect()
}

/// Random values and the special ones: NaN (twice: distinct payloads for the floats), both
/// zeros, both infinities (integers: 0 and their extremes).
fn sort_pool<T: Random>(rng: &mut SmallRng, random: usize) -> Vec<T> {
    let mut pool: Vec<T> = (0..random).map(|_| T::random(rng)).collect();
    pool.extend(
        [
            f64::NAN,
            -f64::NAN,
            -0.0,
            0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1.0,
        ]
        .map(T::from_f64),
    );
    pool
}

fn check_sort<T: Random>(ctx: &Arc<Context>, rng: &mut SmallRng) {
    let s = Stream::new(ctx).unwrap();
    // Shared-memory rows (below 256 padded), register rows (256..=2048, keys up to 32 bits),
    // and longer rows (chunks and merges); each kept whole, and its first k (top-k).
    for &(rows, r) in &[
        (1usize, 1usize),
        (3, 7),
        (100, 1000),
        (8192, 64),
        (5, 2048),
        (7, 129),
        (9, 256),
        (11, 257),
        (6, 511),
        (4, 1500),
        (3, 2049),
        (2, 70_000),
        (0, 5),
        (4, 0),
    ] {
        // Random bits (NaN, signed zeros, infinities), with many repeats for the stability.
        let pool = sort_pool::<T>(rng, 16);
        let x = from_pool(rng, &pool, rows * r);
        let ks = [r, r.min(1), r.min(16), r / 3];
        sort_case(ctx, &s, &x, rows, r, &ks, false, "rows");
    }
}

/// Rows longer than 2048 (on chip up to 8192 for keys of at most 32 bits, else sorted chunks
/// merged through the workspace): lengths below, at and
/// above powers of two and a prime, several rows, a few distinct values (long runs of equal
/// keys), mostly distinct values, and top-k of every size from 1 to a whole tile and beyond.
fn check_long_sort<T: Random>(ctx: &Arc<Context>, rng: &mut SmallRng) {
    use genesis_kernels::sort::SortPlan;
    let s = Stream::new(ctx).unwrap();
    for &(rows, r) in &[
        (3usize, 2049usize),
        (5, 3000),
        (2, 4096),
        (3, 4097),
        (2, 8191),
        (3, 8192),
        (2, 65536),
        (2, 100_003),
    ] {
        // Keys of at most 32 bits stay on chip up to 8192 (the long register-row kernel).
        let on_chip = size_of::<T>() <= 4 && r <= 8192;
        assert_eq!(SortPlan::new(rows, r).unwrap().on_chip::<T>(), on_chip);
        let mut ks: Vec<usize> = [r, 1, 16, 2047, 2048, 2049, r / 3, r - 1]
            .into_iter()
            .filter(|&k| k <= r)
            .collect();
        ks.sort_unstable();
        ks.dedup();
        // Few distinct values (every key repeated hundreds of times), then mostly distinct.
        let few = sort_pool::<T>(rng, 3);
        let x = from_pool(rng, &few, rows * r);
        sort_case(ctx, &s, &x, rows, r, &ks, true, "few values");
        let many = sort_pool::<T>(rng, 4096);
        let x = from_pool(rng, &many, rows * r);
        sort_case(ctx, &s, &x, rows, r, &ks, true, "many values");
    }
    // Already sorted and reversed rows (every merge takes one run whole, then the other).
    let r = 20_000;
    let up: Vec<T> = (0..2 * r)
        .map(|i| T::from_f64((i % r) as f64 / 8.0))
        .collect();
    let down: Vec<T> = up.iter().rev().copied().collect();
    sort_case(ctx, &s, &up, 2, r, &[r, 100], true, "ascending input");
    sort_case(ctx, &s, &down, 2, r, &[r, 100], true, "descending input");
    // One very long row: nine merge passes.
    let r = 1 << 20;
    let pool = sort_pool::<T>(rng, 1000);
    let x = from_pool(rng, &pool, r);
    sort_case(ctx, &s, &x, 1, r, &[r, 5, 3000], false, "one row");
}

#[test]
fn scatter_add_of_f64_matches_the_cpu_twin() {
    use genesis_kernels::DType;
    use genesis_kernels::gather::{self, Along};
    if skip_without_gpu("scatter_add f64") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let s = Stream::new(&ctx).unwrap();
    let mut rng = SmallRng::seed_from_u64(0x5eed_0108);
    // (target shape, index shape, dim); many contributions to each target.
    let cases: &[(&[usize], &[usize], usize)] =
        &[(&[100], &[30_000], 0), (&[7, 9, 11], &[6, 20, 10], 1)];
    for &(tshape, ishape, dim) in cases {
        let size = tshape[dim];
        let nt: usize = tshape.iter().product();
        let ni: usize = ishape.iter().product();
        let idx: Vec<i64> = (0..ni).map(|_| rng.random_range(0..size as i64)).collect();
        let d = Along::new(
            ishape,
            dim,
            &strides(ishape),
            &strides(ishape),
            &strides(tshape),
            size,
        )
        .unwrap();
        // Multiples of 2^-20 below 2^10: sums exact in f64 (not in f32) in any order.
        let whole =
            |rng: &mut SmallRng| rng.random_range(-(1i64 << 30)..(1 << 30)) as f64 / 1048576.0;
        let src: Vec<f64> = (0..nt).map(|_| whole(&mut rng)).collect();
        let vals: Vec<f64> = (0..ni).map(|_| whole(&mut rng)).collect();
        let mut want = src.clone();
        gather::scatter_add::<f64>(&mut want, &idx, &vals, &d).unwrap();
        let didx = DeviceBuffer::from_host(&ctx, bytes_of(&idx)).unwrap();
        let dvals = DeviceBuffer::from_host(&ctx, bytes_of(&vals)).unwrap();
        let mut dt = DeviceBuffer::from_host(&ctx, bytes_of(&src)).unwrap();
        let mut bad = DeviceBuffer::from_host(&ctx, &u64::MAX.to_le_bytes()).unwrap();
        gather::gpu_scatter(
            &s,
            DType::F64,
            true,
            dt.as_span_mut::<u8>()
                .unwrap()
                .into_slice(..nt * 8)
                .unwrap(),
            didx.as_span::<i64>().unwrap().slice(..ni).unwrap(),
            dvals.as_span::<u8>().unwrap().slice(..ni * 8).unwrap(),
            &d,
            bad.as_span_mut().unwrap(),
        )
        .unwrap();
        s.synchronize().unwrap();
        let got: Vec<f64> = from_bytes(&dt.to_host_vec().unwrap()[..nt * 8]);
        assert_eq!(got, want, "scatter_add f64 {tshape:?} {ishape:?} dim {dim}");
        assert_eq!(
            from_bytes::<u64>(&bad.to_host_vec().unwrap()),
            [u64::MAX],
            "no bad index"
        );
    }
}

#[test]
fn sort_matches_the_cpu_twin_exactly() {
    if skip_without_gpu("sort") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let mut rng = SmallRng::seed_from_u64(0x5eed_0107);
    check_sort::<f32>(&ctx, &mut rng);
    check_sort::<f16>(&ctx, &mut rng);
    check_sort::<bf16>(&ctx, &mut rng);
    check_sort::<i32>(&ctx, &mut rng);
    check_sort::<i64>(&ctx, &mut rng);
    check_sort::<f64>(&ctx, &mut rng);
}

/// Every sort path on a few rows (small enough to run under compute-sanitizer's racecheck):
/// the shared-memory network (64-bit keys), register rows of 256..2048 and of 4096..8192
/// (dynamic shared memory), chunks merged through the workspace, and the radix passes.
#[test]
fn every_sort_path_on_a_few_rows() {
    if skip_without_gpu("every sort path") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let s = Stream::new(&ctx).unwrap();
    let mut rng = SmallRng::seed_from_u64(0x5eed_0110);
    for &(rows, r) in &[
        (2usize, 100usize),
        (2, 1500),
        (2, 3000),
        (1, 8192),
        (1, 10_000),
    ] {
        let pool = sort_pool::<f32>(&mut rng, 500);
        let x = from_pool(&mut rng, &pool, rows * r);
        sort_case(&ctx, &s, &x, rows, r, &[r, 7], true, "f32 paths");
        let pool = sort_pool::<f16>(&mut rng, 500);
        let x = from_pool(&mut rng, &pool, rows * r);
        sort_case(&ctx, &s, &x, rows, r, &[r], true, "f16 paths");
        let pool = sort_pool::<i64>(&mut rng, 500);
        let x = from_pool(&mut rng, &pool, rows * r);
        sort_case(&ctx, &s, &x, rows, r, &[r], true, "i64 paths");
    }
    // The radix passes: one row of keys of 32 bits, two of 64.
    let r = genesis_kernels::sort::RADIX_MIN_32;
    let pool = sort_pool::<f32>(&mut rng, 5000);
    let x = from_pool(&mut rng, &pool, r);
    sort_case(&ctx, &s, &x, 1, r, &[r], true, "f32 radix");
    let r = genesis_kernels::sort::RADIX_MIN_64;
    let x: Vec<i64> = (0..2 * r).map(|_| i64::random(&mut rng)).collect();
    sort_case(&ctx, &s, &x, 2, r, &[r], true, "i64 radix");
}

/// Rows the radix passes sort (at least `RADIX_MIN_*` elements): few and many distinct values,
/// integers of a small range (the high bytes never vary: those passes are skipped), a row of
/// one value (every pass skipped), full-range integers (no pass skipped), whole sorts and
/// top-k of at least a quarter (radix) and below (merges), several rows whose skipped passes
/// differ, lengths off the tile size.
fn check_radix_sort<T: Random>(ctx: &Arc<Context>, rng: &mut SmallRng) {
    use genesis_kernels::sort::{RADIX_MIN_32, RADIX_MIN_64, SortPlan};
    let s = Stream::new(ctx).unwrap();
    let min = if size_of::<T>() <= 4 {
        RADIX_MIN_32
    } else {
        RADIX_MIN_64
    };
    for &(rows, r) in &[(1usize, min), (3, min + 2047), (2, min * 2 + 1)] {
        let plan = SortPlan::new(rows, r).unwrap();
        assert!(plan.radix::<T>(r) && plan.radix::<T>(r.div_ceil(4)));
        assert!(!plan.radix::<T>(r / 4 - 1));
        let ks = [r, r / 2, r.div_ceil(4), 10];
        let few = sort_pool::<T>(rng, 3);
        let x = from_pool(rng, &few, rows * r);
        sort_case(ctx, &s, &x, rows, r, &ks, true, "radix, few values");
        let many = sort_pool::<T>(rng, 100_000);
        let x = from_pool(rng, &many, rows * r);
        sort_case(ctx, &s, &x, rows, r, &ks[..2], true, "radix, many values");
        // Row 0 small non-negative integers, row 1 one value, the rest wide random bits.
        let mut x: Vec<T> = (0..rows * r).map(|_| T::random(rng)).collect();
        for v in &mut x[..r] {
            *v = T::from_f64(rng.random_range(0..1000) as f64);
        }
        if rows > 1 {
            x[r..2 * r].fill(T::from_f64(-3.0));
        }
        sort_case(
            ctx,
            &s,
            &x,
            rows,
            r,
            &ks[..1],
            true,
            "radix, skipped passes",
        );
    }
}

#[test]
fn radix_sort_matches_the_cpu_twin_exactly() {
    if skip_without_gpu("radix sort") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let mut rng = SmallRng::seed_from_u64(0x5eed_0111);
    check_radix_sort::<f32>(&ctx, &mut rng);
    check_radix_sort::<f16>(&ctx, &mut rng);
    check_radix_sort::<bf16>(&ctx, &mut rng);
    check_radix_sort::<i32>(&ctx, &mut rng);
    check_radix_sort::<i64>(&ctx, &mut rng);
    check_radix_sort::<f64>(&ctx, &mut rng);
}

#[test]
fn long_row_sort_matches_the_cpu_twin_exactly() {
    if skip_without_gpu("sort of long rows") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let mut rng = SmallRng::seed_from_u64(0x5eed_0109);
    check_long_sort::<f32>(&ctx, &mut rng);
    check_long_sort::<f16>(&ctx, &mut rng);
    check_long_sort::<bf16>(&ctx, &mut rng);
    check_long_sort::<i32>(&ctx, &mut rng);
    check_long_sort::<i64>(&ctx, &mut rng);
    check_long_sort::<f64>(&ctx, &mut rng);
}

/// One `rows_by_key` case: `n` keys below `v` (of which `hot` occur), rows of `cols`; the
/// kernel against the twin, bit for bit, the output first filled with a marker that rows no key
/// names keep.
fn rows_by_key_case<
    T: Random + genesis_kernels::real::FusedElement + PartialEq + std::fmt::Debug,
>(
    ctx: &Arc<Context>,
    stream: &Stream,
    rng: &mut SmallRng,
    (n, cols, v, hot): (usize, usize, usize, usize),
) {
    use genesis_kernels::gather::{
        RowsByKey, gpu_rows_by_key, rows_by_key, rows_by_key_workspace_bytes,
    };
    let idx: Vec<i64> = (0..n).map(|_| rng.random_range(0..hot) as i64).collect();
    let mut perm: Vec<i64> = (0..n as i64).collect();
    perm.sort_by_key(|&p| idx[p as usize]);
    let keys: Vec<i64> = perm.iter().map(|&p| idx[p as usize]).collect();
    let rows: Vec<T> = (0..n * cols)
        .map(|_| T::from_f64(rng.random_range(-3.0..3.0)))
        .collect();
    let marker = T::from_f64(7.0);
    let shape = RowsByKey {
        n,
        cols,
        in_rows: n,
        out_rows: v,
    };
    let mut want = vec![marker; v * cols];
    rows_by_key(&shape, &keys, &perm, &rows, &mut want).unwrap();
    let (gk, gp, gr) = (
        DeviceBuffer::from_host(ctx, bytes_of(&keys)).unwrap(),
        DeviceBuffer::from_host(ctx, bytes_of(&perm)).unwrap(),
        DeviceBuffer::from_host(ctx, bytes_of(&rows)).unwrap(),
    );
    let mut go = DeviceBuffer::from_host(ctx, bytes_of(&vec![marker; v * cols])).unwrap();
    let mut ws = DeviceBuffer::alloc(
        ctx,
        rows_by_key_workspace_bytes(&shape, size_of::<T>()).max(8),
    )
    .unwrap();
    gpu_rows_by_key::<T>(
        stream,
        &shape,
        gk.as_span().unwrap(),
        gp.as_span().unwrap(),
        gr.as_span().unwrap(),
        go.as_span_mut().unwrap(),
        ws.as_span_mut().unwrap(),
    )
    .unwrap();
    stream.synchronize().unwrap();
    let got: Vec<T> = from_bytes(&go.to_host_vec().unwrap());
    assert!(
        bytes_of(&got) == bytes_of(&want),
        "{} n {n} cols {cols} v {v} hot {hot}: differs from the twin",
        T::NAME
    );
}

/// The sum of rows by sorted key (embedding backward) on the GPU gives the twin's bits: runs
/// that cross chunks (a hot key over thousands of positions), one key for everything, every
/// key once, columns past a tile, GPT-2's shape; bad keys and positions are skipped, never
/// read or written through.
#[test]
fn rows_by_key_matches_the_cpu_twin() {
    if skip_without_gpu("rows_by_key") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    let mut rng = SmallRng::seed_from_u64(0x0e3b);
    let cases = [
        (1, 1, 1, 1),
        (100, 3, 10, 1),
        (1000, 5, 2000, 2000),
        (777, 300, 50, 7),
        (5000, 257, 300, 300),
        (32_768, 768, 50_304, 50_304),
        (32_768, 768, 50_304, 200),
        (32_768, 64, 50_304, 2),
        (0, 4, 3, 1),
    ];
    for &c in &cases {
        rows_by_key_case::<f32>(&ctx, &stream, &mut rng, c);
        rows_by_key_case::<bf16>(&ctx, &stream, &mut rng, c);
        rows_by_key_case::<f16>(&ctx, &stream, &mut rng, c);
        rows_by_key_case::<f64>(&ctx, &stream, &mut rng, c);
    }
    // Keys and positions out of range: skipped (the rows they name stay as they were).
    use genesis_kernels::gather::{RowsByKey, gpu_rows_by_key, rows_by_key_workspace_bytes};
    let shape = RowsByKey {
        n: 4,
        cols: 2,
        in_rows: 4,
        out_rows: 3,
    };
    let keys = [-5i64, 0, 1, 1 << 40];
    let perm = [0i64, 9, 2, 1];
    let rows = [1f32, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0];
    let (gk, gp, gr) = (
        DeviceBuffer::from_host(&ctx, bytes_of(&keys)).unwrap(),
        DeviceBuffer::from_host(&ctx, bytes_of(&perm)).unwrap(),
        DeviceBuffer::from_host(&ctx, bytes_of(&rows)).unwrap(),
    );
    let mut go = DeviceBuffer::from_host(&ctx, bytes_of(&[9f32; 6])).unwrap();
    let mut ws = DeviceBuffer::alloc(&ctx, rows_by_key_workspace_bytes(&shape, 4)).unwrap();
    gpu_rows_by_key::<f32>(
        &stream,
        &shape,
        gk.as_span().unwrap(),
        gp.as_span().unwrap(),
        gr.as_span().unwrap(),
        go.as_span_mut().unwrap(),
        ws.as_span_mut().unwrap(),
    )
    .unwrap();
    stream.synchronize().unwrap();
    let got: Vec<f32> = from_bytes(&go.to_host_vec().unwrap());
    // Key 0 from position 9 (skipped): 0; key 1 from position 2: row 2; key 2 untouched.
    assert_eq!(got, [0.0, 0.0, 3.0, 3.0, 9.0, 9.0]);
}
