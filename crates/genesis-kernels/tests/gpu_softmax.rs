//! The softmax kernels (`softmax`, `log_softmax`, `logsumexp`) against their CPU twin within the
//! bound `genesis_kernels::softmax` documents, for f32, f16, bf16 and f64 over every path: a
//! warp a row (rows of up to 1024), a block a row in shared memory (up to 96 KiB, above 48 KiB
//! too), long rows a block each, few long rows in chunks, and columns (inner > 1); aligned
//! (16-byte vectors) and misaligned inputs; lines of -inf, NaN and +inf; empty axes.
#![cfg(feature = "cuda")]

use std::sync::Arc;

use genesis_cuda::{Context, DeviceBuffer, Stream, skip_without_gpu};
use genesis_kernels::softmax::{self, SoftmaxOp, SoftmaxPlan};
use genesis_kernels::{Element, ReduceShape};
use half::{bf16, f16};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod common;
use common::{bytes_of, from_bytes};

const SHAPES: &[(usize, usize, usize)] = &[
    (1, 0, 1),
    (3, 0, 1),
    (1, 1, 1),
    (5, 31, 1),
    (7, 32, 1),
    (1000, 33, 1),
    (33, 1000, 1),
    (4, 1025, 1),
    (64, 8192, 1),
    (3, 12_289, 1),
    (3, 30_000, 1),
    (300, 30_000, 1),
    (2, (1 << 20) + 3, 1),
    (3, 1000, 7),
    (1, 3, 70_000),
    (66_000, 2, 3),
    (5, 7000, 32),
    (1, 100_000, 2),
    (0, 5, 3),
    (4, 0, 3),
];

/// The element types, with their unit roundoff and smallest normal number.
trait Float: Element + Default {
    fn of(x: f64) -> Self;
    /// Half an ulp, relative, of the type.
    const EPS: f64;
    /// The accumulator's unit roundoff.
    const ACC: f64 = 1.0 / (1u64 << 24) as f64;
    const TINY: f64;
}
impl Float for f32 {
    fn of(x: f64) -> Self {
        x as f32
    }
    const EPS: f64 = 1.0 / (1u64 << 24) as f64;
    const TINY: f64 = f32::MIN_POSITIVE as f64;
}
impl Float for f64 {
    fn of(x: f64) -> Self {
        x
    }
    const EPS: f64 = 1.0 / (1u64 << 53) as f64;
    const ACC: f64 = 1.0 / (1u64 << 53) as f64;
    const TINY: f64 = f64::MIN_POSITIVE;
}
impl Float for f16 {
    fn of(x: f64) -> Self {
        f16::from_f64(x)
    }
    const EPS: f64 = 1.0 / 2048.0;
    const TINY: f64 = 1.0 / 16384.0;
}
impl Float for bf16 {
    fn of(x: f64) -> Self {
        bf16::from_f64(x)
    }
    const EPS: f64 = 1.0 / 256.0;
    const TINY: f64 = f32::MIN_POSITIVE as f64;
}

/// Random values of magnitude up to 8, with special lines: every 7th line holds a NaN, every
/// 11th is all -inf, every 13th holds a +inf, and 1% of the elements are -inf.
fn data<T: Float>(rng: &mut SmallRng, s: ReduceShape, offset: usize) -> Vec<T> {
    let n = s.outer * s.r * s.inner;
    let mut x: Vec<f64> = (0..n)
        .map(|_| {
            if rng.random_bool(0.01) {
                f64::NEG_INFINITY
            } else {
                rng.random_range(-8.0..8.0)
            }
        })
        .collect();
    for o in 0..s.outer {
        for c in 0..s.inner {
            let line = o * s.inner + c;
            let at = |k: usize| (o * s.r + k) * s.inner + c;
            if s.r == 0 {
                continue;
            }
            let k = line % s.r;
            if line % 7 == 3 {
                x[at(k)] = f64::NAN;
            } else if line % 11 == 5 {
                for k in 0..s.r {
                    x[at(k)] = f64::NEG_INFINITY;
                }
            } else if line % 13 == 6 {
                x[at(k)] = f64::INFINITY;
            }
        }
    }
    let mut v = vec![T::of(0.5); offset];
    v.extend(x.into_iter().map(T::of));
    v
}

/// Checks the kernel's results `got` against the twin's `want` for input `x` within the bound.
fn compare<T: Float>(op: SoftmaxOp, x: &[T], s: ReduceShape, got: &[T], want: &[T], what: &str) {
    let k = 8.0 + 2.0 * (s.r as f64).sqrt();
    let mut bad = Vec::new();
    for o in 0..s.outer {
        for c in 0..s.inner {
            let line: Vec<f64> = (0..s.r)
                .map(|j| x[(o * s.r + j) * s.inner + c].to_f64())
                .collect();
            let m = line.iter().fold(f64::NEG_INFINITY, |a, &b| {
                if a.is_nan() || b.is_nan() {
                    f64::NAN
                } else {
                    a.max(b)
                }
            });
            let ls = if m.is_finite() {
                line.iter().map(|&v| (v - m).exp()).sum::<f64>().ln()
            } else {
                0.0
            };
            let positions: Vec<(usize, f64)> = if op.reduces() {
                vec![(o * s.inner + c, m)]
            } else {
                (0..s.r)
                    .map(|j| ((o * s.r + j) * s.inner + c, line[j]))
                    .collect()
            };
            for (at, xv) in positions {
                let (g, w) = (got[at].to_f64(), want[at].to_f64());
                let ulp = 2.0 * T::EPS * w.abs().max(g.abs());
                let tol = match op {
                    SoftmaxOp::Softmax => k * T::ACC * w.abs().max(g.abs()) + T::TINY,
                    SoftmaxOp::LogSoftmax => k * T::ACC * (1.0 + ls.abs() + (xv - m).abs()),
                    SoftmaxOp::LogSumExp => k * T::ACC * (1.0 + m.abs() + ls.abs()),
                } + if T::EPS > T::ACC { ulp } else { 0.0 };
                let ok = if w.is_nan() || g.is_nan() {
                    w.is_nan() && g.is_nan()
                } else if w.is_infinite() || g.is_infinite() {
                    w == g
                } else {
                    (g - w).abs() <= tol
                };
                if !ok && bad.len() < 5 {
                    bad.push(format!("at {at}: gpu {g:e} cpu {w:e} (tol {tol:e})"));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{what}:\n{}", bad.join("\n"));
}

fn check<T: Float>(ctx: &Arc<Context>, rng: &mut SmallRng) {
    let stream = Stream::new(ctx).unwrap();
    let sms = ctx.multiprocessors() as usize;
    for &(outer, r, inner) in SHAPES {
        let s = ReduceShape { outer, r, inner };
        let n = outer * r * inner;
        for offset in [0usize, 1] {
            let x = data::<T>(rng, s, offset);
            let dx = DeviceBuffer::from_host(ctx, bytes_of(&x)).unwrap();
            for op in SoftmaxOp::ALL {
                let what = format!("{}_{} {s:?} offset {offset}", op.name(), T::NAME);
                let out_len = op.output_len(s).unwrap();
                let mut want = vec![T::default(); out_len];
                softmax::softmax::<T>(op, &x[offset..], s, &mut want).unwrap();
                let mut dout =
                    DeviceBuffer::from_host(ctx, &vec![0xA5u8; (out_len * size_of::<T>()).max(16)])
                        .unwrap();
                let plan = SoftmaxPlan::new(s, size_of::<T>(), sms);
                let ws_len = plan.workspace_bytes(size_of::<T>());
                let mut ws = DeviceBuffer::alloc(ctx, ws_len.max(1)).unwrap();
                softmax::gpu_softmax::<T>(
                    &stream,
                    op,
                    dx.as_span::<T>()
                        .unwrap()
                        .slice(offset..offset + n)
                        .unwrap(),
                    s,
                    dout.as_span_mut::<T>()
                        .unwrap()
                        .into_slice(..out_len)
                        .unwrap(),
                    ws.as_span_mut::<u8>()
                        .unwrap()
                        .into_slice(..ws_len)
                        .unwrap(),
                )
                .unwrap();
                stream.synchronize().unwrap();
                let got: Vec<T> =
                    from_bytes(&dout.to_host_vec().unwrap()[..out_len * size_of::<T>()]);
                compare(op, &x[offset..], s, &got, &want, &what);
            }
        }
    }
}

#[test]
fn softmax_kernels_match_the_cpu_twin() {
    if skip_without_gpu("softmax") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let mut rng = SmallRng::seed_from_u64(0x5eed_50f7);
    check::<f32>(&ctx, &mut rng);
    check::<f16>(&ctx, &mut rng);
    check::<bf16>(&ctx, &mut rng);
    check::<f64>(&ctx, &mut rng);
}

#[test]
fn short_workspace_and_output_are_errors() {
    if skip_without_gpu("softmax spans") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    let s = ReduceShape {
        outer: 2,
        r: 100_000,
        inner: 1,
    };
    let dx = DeviceBuffer::alloc(&ctx, 200_000 * 4).unwrap();
    let mut dout = DeviceBuffer::alloc(&ctx, 200_000 * 4).unwrap();
    let mut ws = DeviceBuffer::alloc(&ctx, 16).unwrap();
    let sms = ctx.multiprocessors() as usize;
    assert!(SoftmaxPlan::new(s, 4, sms).workspace_bytes(4) > 0);
    let err = softmax::gpu_softmax::<f32>(
        &stream,
        SoftmaxOp::Softmax,
        dx.as_span::<f32>().unwrap(),
        s,
        dout.as_span_mut::<f32>().unwrap(),
        ws.as_span_mut::<u8>().unwrap().into_slice(..0).unwrap(),
    );
    assert!(err.is_err(), "no workspace for the chunked path");
    let err = softmax::gpu_softmax::<f32>(
        &stream,
        SoftmaxOp::Softmax,
        dx.as_span::<f32>().unwrap(),
        s,
        dout.as_span_mut::<f32>().unwrap().into_slice(..10).unwrap(),
        ws.as_span_mut::<u8>().unwrap(),
    );
    assert!(err.is_err(), "a short output");
    let err = softmax::gpu_softmax::<i32>(
        &stream,
        SoftmaxOp::LogSumExp,
        dx.as_span::<i32>().unwrap(),
        s,
        dout.as_span_mut::<i32>().unwrap(),
        ws.as_span_mut::<u8>().unwrap(),
    );
    assert!(err.is_err(), "integers");
}
