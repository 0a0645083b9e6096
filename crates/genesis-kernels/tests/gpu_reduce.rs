//! The reduction kernels against their CPU twin for every op and dtype, over full, row and
//! column reductions of odd and large shapes, aligned and misaligned. max/min/argmax/argmin
//! must agree exactly (random bit patterns: NaN, inf, ties); sums and means within rounding.
#![cfg(feature = "cuda")]

use std::sync::Arc;

use genesis_cuda::{Context, DeviceBuffer, Stream, skip_without_gpu};
use genesis_kernels::reduce::{self, ReducePlan};
use genesis_kernels::{Element, ReduceOp, ReduceShape};
use half::{bf16, f16};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod common;
use common::{bytes_of, from_bytes};

const SHAPES: &[(usize, usize, usize)] = &[
    (1, 0, 1),
    (1, 1, 1),
    (1, 31, 1),
    (1, 1000, 1),
    (1, 1025, 1),
    (1, 4097, 1),
    (1, (1 << 20) + 3, 1),
    (1, (1 << 24) + 5, 1),
    (7, 5000, 1),
    (1000, 33, 1),
    (1000, 9, 1),
    (70_000, 3, 1),
    (257, 16, 1),
    (300, 17, 1),
    (3, 1000, 7),
    (2, 4097, 100),
    (1, 3, 70_000),
    (66_000, 2, 3),
    (0, 5, 3),
    (4, 0, 3),
    (5, 70_000, 2),
];

trait Gen: Element + Default {
    /// Random bits (NaN, inf, subnormals), for the exact ops.
    fn bits(rng: &mut SmallRng) -> Self;
    /// A value in [-1, 1], or a small integer, for sums.
    fn small(rng: &mut SmallRng) -> Self;
    /// Unit roundoff of the type (0 for integers).
    const EPS: f64;
    /// The relative error of the kernels' sums per element summed: f32 accumulation, but f64
    /// for f64 (a sum of r terms in any order is within r ulp of the accumulator).
    const ACC_EPS: f64 = 1e-5;
}
impl Gen for f64 {
    fn bits(rng: &mut SmallRng) -> Self {
        f64::from_bits(rng.random())
    }
    fn small(rng: &mut SmallRng) -> Self {
        rng.random_range(-1.0..1.0)
    }
    const EPS: f64 = f64::EPSILON;
    const ACC_EPS: f64 = f64::EPSILON;
}
impl Gen for f32 {
    fn bits(rng: &mut SmallRng) -> Self {
        f32::from_bits(rng.random())
    }
    fn small(rng: &mut SmallRng) -> Self {
        rng.random_range(-1.0..1.0)
    }
    const EPS: f64 = f32::EPSILON as f64;
}
impl Gen for f16 {
    fn bits(rng: &mut SmallRng) -> Self {
        f16::from_bits(rng.random())
    }
    fn small(rng: &mut SmallRng) -> Self {
        f16::from_f32(rng.random_range(-1.0..1.0))
    }
    const EPS: f64 = 0.000_976_562_5;
}
impl Gen for bf16 {
    fn bits(rng: &mut SmallRng) -> Self {
        bf16::from_bits(rng.random())
    }
    fn small(rng: &mut SmallRng) -> Self {
        bf16::from_f32(rng.random_range(-1.0..1.0))
    }
    const EPS: f64 = 0.007_812_5;
}
impl Gen for i32 {
    fn bits(rng: &mut SmallRng) -> Self {
        // A narrow range, so that ties are common.
        rng.random_range(-50..50)
    }
    fn small(rng: &mut SmallRng) -> Self {
        rng.random()
    }
    const EPS: f64 = 0.0;
}
impl Gen for i64 {
    fn bits(rng: &mut SmallRng) -> Self {
        if rng.random_bool(0.5) {
            rng.random()
        } else {
            rng.random_range(-3..3)
        }
    }
    fn small(rng: &mut SmallRng) -> Self {
        rng.random()
    }
    const EPS: f64 = 0.0;
}

/// Runs `op` over `x[offset..]` seen as `shape` on the GPU; returns (values, indices).
fn gpu_run<T: Gen, O: Element + Default>(
    ctx: &Arc<Context>,
    op: ReduceOp,
    x: &[T],
    offset: usize,
    shape: ReduceShape,
) -> (Vec<O>, Vec<i64>) {
    let n_out = shape.output_len();
    let dx = DeviceBuffer::from_host(ctx, bytes_of(x)).unwrap();
    // At least one whole i64: an empty output still needs a (non-empty) buffer that casts to
    // the indices' i64.
    let poison = vec![0xA5u8; (n_out * 8).max(8)];
    let mut dv = DeviceBuffer::from_host(ctx, &poison).unwrap();
    let mut di = DeviceBuffer::from_host(ctx, &poison).unwrap();
    let plan = ReducePlan::new(shape, ctx.multiprocessors() as usize, size_of::<T>());
    let ws_len = plan.workspace_bytes::<T>(op).max(1);
    let mut ws = DeviceBuffer::from_host(ctx, &vec![0x5Au8; ws_len]).unwrap();
    let s = Stream::new(ctx).unwrap();
    let idx = if op.has_indices() {
        Some(di.as_span_mut::<i64>().unwrap())
    } else {
        None
    };
    reduce::gpu_reduce::<T>(
        &s,
        op,
        dx.as_span::<T>().unwrap().slice(offset..).unwrap(),
        shape,
        dv.as_span_mut().unwrap(),
        idx,
        ws.as_span_mut().unwrap(),
    )
    .unwrap();
    s.synchronize().unwrap();
    let v: Vec<O> = from_bytes(&dv.to_host_vec().unwrap()[..n_out * size_of::<O>()]);
    let i: Vec<i64> = from_bytes(&di.to_host_vec().unwrap()[..n_out * 8]);
    (v, i)
}

fn check<T: Gen, O: Element + Default>(ctx: &Arc<Context>, rng: &mut SmallRng, op: ReduceOp) {
    for &(outer, r, inner) in SHAPES {
        let shape = ReduceShape { outer, r, inner };
        if op.needs_elements() && r == 0 && shape.output_len() > 0 {
            continue;
        }
        // The biggest shapes once (aligned), the others aligned and one element in.
        let offsets: &[usize] = if outer * r * inner > 1 << 22 {
            &[0]
        } else {
            &[0, 1]
        };
        for &offset in offsets {
            let n = outer * r * inner;
            let exact = op.needs_elements();
            let x: Vec<T> = (0..n + offset)
                .map(|_| if exact { T::bits(rng) } else { T::small(rng) })
                .collect();
            let mut want = vec![O::default(); shape.output_len()];
            let mut want_i = vec![0i64; shape.output_len()];
            let wi = if op.has_indices() {
                Some(&mut want_i[..])
            } else {
                None
            };
            reduce::reduce::<T, O>(op, &x[offset..], shape, Some(&mut want), wi).unwrap();
            let (got, got_i) = gpu_run::<T, O>(ctx, op, &x, offset, shape);
            let what = format!("{}_{} {shape:?} offset {offset}", op.name(), T::NAME);
            if op.has_indices() {
                assert_eq!(got_i, want_i, "{what}: indices");
            }
            for (t, (g, w)) in got.iter().zip(&want).enumerate() {
                let (gf, wf) = (g.to_f64(), w.to_f64());
                let ok = if exact || T::EPS == 0.0 {
                    // Exact (-0.0 and +0.0 may swap in max/min: equal values; a NaN maximum
                    // is the GPU's canonical NaN, whatever the payload of the input's NaN).
                    O::same(*g, *w) || gf == wf || (wf.is_nan() && gf.is_nan())
                } else if wf.is_nan() {
                    gf.is_nan()
                } else {
                    // f32 accumulation error bound, then rounding to the output type.
                    let (o, c) = (t / inner, t % inner);
                    let abs: f64 = (0..r)
                        .map(|k| x[offset + (o * r + k) * inner + c].to_f64().abs())
                        .sum();
                    let scale = if op == ReduceOp::Mean {
                        1.0 / r as f64
                    } else {
                        1.0
                    };
                    let acc = if T::ACC_EPS < 1e-5 {
                        r as f64 * T::ACC_EPS
                    } else {
                        T::ACC_EPS
                    };
                    (gf - wf).abs() <= acc * abs * scale + 2.0 * T::EPS * wf.abs()
                };
                assert!(ok, "{what}: output {t}: gpu {g:?} cpu {w:?}");
            }
        }
    }
}

fn check_all<T: Gen>(ctx: &Arc<Context>, rng: &mut SmallRng) {
    for op in ReduceOp::ALL {
        if op.float_only() && !T::IS_FLOAT {
            continue;
        }
        if op == ReduceOp::Sum && !T::IS_FLOAT {
            check::<T, i64>(ctx, rng, op);
        } else {
            check::<T, T>(ctx, rng, op);
        }
    }
}

#[test]
fn reductions_match_the_cpu_twin() {
    if skip_without_gpu("reductions") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let mut rng = SmallRng::seed_from_u64(0x5eed_0003);
    check_all::<f32>(&ctx, &mut rng);
    check_all::<bf16>(&ctx, &mut rng);
    check_all::<f16>(&ctx, &mut rng);
    check_all::<i32>(&ctx, &mut rng);
    check_all::<i64>(&ctx, &mut rng);
    check_all::<f64>(&ctx, &mut rng);
}

#[test]
fn bad_requests_fail_before_launch() {
    if skip_without_gpu("reduction errors") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let s = Stream::new(&ctx).unwrap();
    let shape = ReduceShape {
        outer: 1,
        r: 1000,
        inner: 1,
    };
    let input = DeviceBuffer::alloc(&ctx, 1000 * 8).unwrap();
    let (mut out, mut idx) = (
        DeviceBuffer::alloc(&ctx, 64).unwrap(),
        DeviceBuffer::alloc(&ctx, 64).unwrap(),
    );
    let mut ws = DeviceBuffer::alloc(&ctx, 1 << 20).unwrap();
    let mut run = |op: ReduceOp, shape: ReduceShape, with_idx: bool, ws_len: usize, int: bool| {
        let ix = with_idx.then(|| idx.as_span_mut::<i64>().unwrap());
        let (o, w) = (
            out.as_span_mut::<u8>().unwrap(),
            ws.as_span_mut::<u8>()
                .unwrap()
                .into_slice(..ws_len)
                .unwrap(),
        );
        if int {
            reduce::gpu_reduce::<i32>(&s, op, input.as_span().unwrap(), shape, o, ix, w)
        } else {
            reduce::gpu_reduce::<f32>(&s, op, input.as_span().unwrap(), shape, o, ix, w)
        }
    };
    // Mean of integers; indices for a sum; no workspace; an empty axis for argmax; an arg op
    // without an index buffer; an input shorter than the shape.
    assert!(run(ReduceOp::Mean, shape, false, 1 << 20, true).is_err());
    assert!(run(ReduceOp::Sum, shape, true, 1 << 20, false).is_err());
    assert!(run(ReduceOp::Sum, shape, false, 0, false).is_err());
    let empty = ReduceShape {
        outer: 3,
        r: 0,
        inner: 1,
    };
    assert!(run(ReduceOp::ArgMax, empty, true, 1 << 20, false).is_err());
    assert!(run(ReduceOp::ArgMax, shape, false, 1 << 20, false).is_err());
    let long = ReduceShape {
        outer: 1,
        r: 3000,
        inner: 1,
    };
    assert!(run(ReduceOp::Sum, long, false, 1 << 20, false).is_err());
}
