//! The fused classifier kernels (`genesis_kernels::classifier`) against their CPU twins, for
//! f32, f16 and bf16: rows of 1 to 100 000 logits (odd `V`, GPT-2's 50 257 and padded 50 304),
//! contiguous and strided rows, aligned (16-byte vectors) and misaligned buffers, ignored rows,
//! special rows (a NaN, a -inf entry, a +inf entry, a +1000 offset), every reduction, the
//! loss's gradient from the device or a host value. Forward (`loss`, `lse`), reduce, fused (out of place into rows
//! with gaps, and in place), the backward from the forward's `lse`, run twice (determinism);
//! bad targets set the status word.
//!
//! Tolerances (the module documentation's bound): with `u = 2^-24`, `k = 8 + 2 sqrt(V)` and the
//! row's `m`, `s` computed here in f64, `lse` and `loss` within `d = k u (1 + |m| + |ln s|)`
//! (the kernel's tree of online states against the twin's ordered f64 sum, CUDA's `expf`/`logf`
//! within 2 and 1 ulp). The gradient is compared with the twin's fed the GPU's `lse`, so what
//! is left is `expf` against Rust's `exp` (2 + 1 ulp, `x - lse` being the same operation on
//! both sides) and the products' rounding: `|g| (8 u p + u |p - onehot|)`, plus one rounding to `T` of either side (`2 u_T |twin|`)
//! and the spacing of `T`'s subnormals (f16's gradients of tiny `p` are subnormal). A wrong
//! index, scale or target moves values by far more. Elements between output rows keep their
//! sentinel. The forward, the fused kernel and the backward must agree bit for bit (every path
//! folds a row in one order), and so must the fused kernel in place and out of place.
#![cfg(feature = "cuda")]

use std::sync::Arc;

use genesis_cuda::{Context, DeviceBuffer, Stream, skip_without_gpu};
use genesis_kernels::Error;
use genesis_kernels::classifier::{
    self, ClassifierShape, FusedElement, IGNORE_INDEX, LogitsGrad, LossGrad, Reduction,
    WORKSPACE_BYTES,
};
use half::{bf16, f16};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod common;
use common::{bytes_of, from_bytes};

const U: f64 = 1.0 / (1u64 << 24) as f64;

trait Float: FusedElement<Acc = f32> + Default {
    /// Unit roundoff.
    const EPS: f64;
    /// Spacing of the subnormals.
    const TINY: f64;
}
impl Float for f32 {
    const EPS: f64 = U;
    const TINY: f64 = 1e-45;
}
impl Float for f16 {
    const EPS: f64 = 1.0 / 2048.0;
    const TINY: f64 = 1.0 / (1u64 << 24) as f64;
}
impl Float for bf16 {
    const EPS: f64 = 1.0 / 256.0;
    const TINY: f64 = 1e-40;
}

/// `(rows, classes, stride)`.
const SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (5, 3, 3),
    (33, 1000, 1000),
    (24, 777, 784),
    (13, 1003, 1010),
    (64, 50_257, 50_257),
    (17, 50_304, 50_304),
    (3, 100_000, 100_003),
    (700, 64, 64),
];

fn close(g: f64, w: f64, tol: f64) -> bool {
    if w.is_nan() {
        g.is_nan()
    } else if w.is_infinite() {
        g == w
    } else {
        (g - w).abs() <= tol
    }
}

struct Data<T> {
    x: Vec<T>,
    targets: Vec<i64>,
    /// Per row: the tolerance `d` of lse.
    tol: Vec<f64>,
}

fn data<T: Float>(rng: &mut SmallRng, shape: &ClassifierShape) -> Data<T> {
    let len = shape.span_len(shape.stride).unwrap();
    let (rows, v, st) = (shape.rows, shape.classes, shape.stride);
    let mut x: Vec<T> = (0..len)
        .map(|_| T::from_f64(rng.random_range(-6.0..6.0)))
        .collect();
    if rows > 6 {
        x[3 * st + v / 2] = T::from_f64(f64::NAN);
        x[4 * st] = T::from_f64(f64::NEG_INFINITY);
        // A row holding +inf: NaN loss and gradient (PyTorch's log_softmax).
        x[6 * st + v - 1] = T::from_f64(f64::INFINITY);
        for k in 0..v {
            x[5 * st + k] = T::from_f64(x[5 * st + k].to_f64() + 1000.0);
        }
    }
    let targets: Vec<i64> = (0..rows)
        .map(|n| {
            if n % 7 == 2 {
                IGNORE_INDEX
            } else {
                rng.random_range(0..v as i64)
            }
        })
        .collect();
    let tol = (0..rows)
        .map(|n| {
            let row: Vec<f64> = x[n * st..][..v].iter().map(|e| e.to_f64()).collect();
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = row.iter().map(|e| (e - m).exp()).sum();
            let ls = if s > 0.0 && s.is_finite() {
                s.ln().abs()
            } else {
                0.0
            };
            (8.0 + 2.0 * (v as f64).sqrt())
                * U
                * (1.0 + if m.is_finite() { m.abs() } else { 0.0 } + ls)
        })
        .collect();
    Data { x, targets, tol }
}

fn upload<E: Copy>(ctx: &Arc<Context>, v: &[E], offset: usize, fill: E) -> DeviceBuffer {
    let mut h = vec![fill; offset];
    h.extend_from_slice(v);
    DeviceBuffer::from_host(ctx, bytes_of(&h).to_vec().as_slice()).unwrap()
}

fn download<E: Copy + Default>(b: &DeviceBuffer, offset: usize, n: usize) -> Vec<E> {
    let all: Vec<E> = from_bytes(&b.to_host_vec().unwrap());
    all[offset..offset + n].to_vec()
}

fn minus_one(ctx: &Arc<Context>) -> DeviceBuffer {
    DeviceBuffer::from_host(ctx, bytes_of(&[-1i64])).unwrap()
}

#[allow(clippy::too_many_lines)]
fn check<T: Float>(ctx: &Arc<Context>, rng: &mut SmallRng) {
    let stream = Stream::new(ctx).unwrap();
    for &(rows, v, stride) in SHAPES {
        for offset in [0usize, 1] {
            let shape = ClassifierShape {
                stride,
                ..ClassifierShape::new(rows, v)
            };
            let what = format!(
                "{} rows {rows} V {v} stride {stride} offset {offset}",
                T::NAME
            );
            let d = data::<T>(rng, &shape);
            let len = d.x.len();
            let dx = upload(ctx, &d.x, offset, T::default());
            let dt = upload(ctx, &d.targets, 0, 0i64);
            let x_span = || {
                dx.as_span::<T>()
                    .unwrap()
                    .slice(offset..offset + len)
                    .unwrap()
            };
            // Forward.
            let (mut dloss, mut dlse) = (
                DeviceBuffer::alloc(ctx, rows * 4).unwrap(),
                DeviceBuffer::alloc(ctx, rows * 4).unwrap(),
            );
            let mut status = minus_one(ctx);
            classifier::gpu_cross_entropy_forward::<T>(
                &stream,
                &shape,
                x_span(),
                dt.as_span().unwrap(),
                dloss.as_span_mut().unwrap(),
                dlse.as_span_mut().unwrap(),
                status.as_span_mut().unwrap(),
            )
            .unwrap();
            stream.synchronize().unwrap();
            let (loss, lse): (Vec<f32>, Vec<f32>) =
                (download(&dloss, 0, rows), download(&dlse, 0, rows));
            assert_eq!(download::<i64>(&status, 0, 1), [-1], "{what}: status");
            let (mut want_loss, mut want_lse) = (vec![0f32; rows], vec![0f32; rows]);
            classifier::cross_entropy_forward(
                &shape,
                &d.x,
                &d.targets,
                &mut want_loss,
                &mut want_lse,
            )
            .unwrap();
            for n in 0..rows {
                for (name, g, w) in [
                    ("lse", lse[n], want_lse[n]),
                    ("loss", loss[n], want_loss[n]),
                ] {
                    assert!(
                        close(f64::from(g), f64::from(w), d.tol[n]),
                        "{what}: {name} of row {n}: gpu {g} twin {w} (tol {})",
                        d.tol[n]
                    );
                }
            }
            // Sum and mean of the GPU's losses.
            for reduction in [Reduction::Sum, Reduction::Mean] {
                let mut out = DeviceBuffer::alloc(ctx, 4).unwrap();
                classifier::gpu_cross_entropy_reduce(
                    &stream,
                    &shape,
                    reduction,
                    dloss.as_span().unwrap(),
                    dt.as_span().unwrap(),
                    out.as_span_mut().unwrap(),
                )
                .unwrap();
                stream.synchronize().unwrap();
                let g = download::<f32>(&out, 0, 1)[0];
                let w =
                    classifier::cross_entropy_reduce(&shape, reduction, &loss, &d.targets).unwrap();
                assert!(
                    close(f64::from(g), f64::from(w), 2.0 * U * f64::from(w.abs())),
                    "{what}: {reduction:?}: gpu {g} twin {w}"
                );
            }
            for reduction in [Reduction::None, Reduction::Sum, Reduction::Mean] {
                let what = format!("{what} {reduction:?}");
                let dl: Vec<f32> = (0..reduction.dloss_len(rows))
                    .map(|_| rng.random_range(0.5f32..2.0))
                    .collect();
                let ddl = DeviceBuffer::from_host(ctx, bytes_of(&dl)).unwrap();
                // The device gradient for None and Mean, a host value for Sum.
                let value = reduction == Reduction::Sum;
                let grad_of = || {
                    if value {
                        LossGrad::Value(1.25)
                    } else {
                        LossGrad::Device(ddl.as_span().unwrap())
                    }
                };
                let twin_dl = if value { vec![1.25] } else { dl.clone() };
                // Fused, out of place into rows stride + 3 apart (gaps hold a sentinel).
                let ostride = stride + 3;
                let olen = shape.span_len(ostride).unwrap();
                let sentinel = T::from_f64(12345.0);
                let run_fused = || -> (Vec<T>, Vec<f32>, Vec<f32>) {
                    let mut out = upload(ctx, &vec![sentinel; olen], offset, sentinel);
                    let (mut l2, mut s2) = (
                        DeviceBuffer::alloc(ctx, rows * 4).unwrap(),
                        DeviceBuffer::alloc(ctx, rows * 4).unwrap(),
                    );
                    let mut ws = DeviceBuffer::alloc(ctx, WORKSPACE_BYTES).unwrap();
                    let mut status = minus_one(ctx);
                    classifier::gpu_cross_entropy_fused::<T>(
                        &stream,
                        &shape,
                        reduction,
                        LogitsGrad::Separate {
                            logits: x_span(),
                            dlogits: out
                                .as_span_mut::<T>()
                                .unwrap()
                                .into_slice(offset..offset + olen)
                                .unwrap(),
                            out_stride: ostride,
                        },
                        dt.as_span().unwrap(),
                        grad_of(),
                        l2.as_span_mut().unwrap(),
                        s2.as_span_mut().unwrap(),
                        ws.as_span_mut().unwrap(),
                        status.as_span_mut().unwrap(),
                    )
                    .unwrap();
                    stream.synchronize().unwrap();
                    assert_eq!(download::<i64>(&status, 0, 1), [-1], "{what}: status");
                    (
                        download(&out, offset, olen),
                        download(&l2, 0, rows),
                        download(&s2, 0, rows),
                    )
                };
                let (got, l2, s2) = run_fused();
                assert_eq!(
                    bytes_of(&l2),
                    bytes_of(&loss),
                    "{what}: fused loss == forward"
                );
                assert_eq!(
                    bytes_of(&s2),
                    bytes_of(&lse),
                    "{what}: fused lse == forward"
                );
                let again = run_fused();
                assert_eq!(
                    bytes_of(&again.0),
                    bytes_of(&got),
                    "{what}: fused twice, bit for bit"
                );
                // The twin from the GPU's lse.
                let mut want = vec![sentinel; olen];
                classifier::cross_entropy_backward(
                    &shape, reduction, &d.x, &d.targets, &lse, &twin_dl, &mut want, ostride,
                )
                .unwrap();
                let count = d.targets.iter().filter(|&&t| t != IGNORE_INDEX).count();
                let mut bad = Vec::new();
                for n in 0..rows {
                    let g = f64::from(match reduction {
                        Reduction::None => twin_dl[n],
                        Reduction::Sum => twin_dl[0],
                        Reduction::Mean => twin_dl[0] / count as f32,
                    });
                    for j in 0..ostride {
                        let at = n * ostride + j;
                        if at >= olen {
                            break;
                        }
                        let (gv, wv) = (got[at].to_f64(), want[at].to_f64());
                        let tol = if j >= v || d.targets[n] == IGNORE_INDEX {
                            0.0
                        } else {
                            let p = (d.x[n * stride + j].to_f64() - f64::from(lse[n])).exp();
                            let oh = if j as i64 == d.targets[n] { 1.0 } else { 0.0 };
                            g.abs() * (8.0 * U * p + U * (p - oh).abs())
                                + 2.0 * T::EPS * wv.abs()
                                + T::TINY
                        };
                        if !close(gv, wv, tol) && bad.len() < 5 {
                            bad.push(format!("({n}, {j}): gpu {gv:e} twin {wv:e} (tol {tol:e})"));
                        }
                    }
                }
                assert!(bad.is_empty(), "{what}: dlogits\n{}", bad.join("\n"));
                // The backward from the forward's lse: the same bits.
                let mut out = upload(ctx, &vec![sentinel; olen], offset, sentinel);
                let mut ws = DeviceBuffer::alloc(ctx, WORKSPACE_BYTES).unwrap();
                let mut status = minus_one(ctx);
                classifier::gpu_cross_entropy_backward::<T>(
                    &stream,
                    &shape,
                    reduction,
                    LogitsGrad::Separate {
                        logits: x_span(),
                        dlogits: out
                            .as_span_mut::<T>()
                            .unwrap()
                            .into_slice(offset..offset + olen)
                            .unwrap(),
                        out_stride: ostride,
                    },
                    dt.as_span().unwrap(),
                    dlse.as_span().unwrap(),
                    grad_of(),
                    ws.as_span_mut().unwrap(),
                    status.as_span_mut().unwrap(),
                )
                .unwrap();
                stream.synchronize().unwrap();
                let b: Vec<T> = download(&out, offset, olen);
                assert_eq!(bytes_of(&b), bytes_of(&got), "{what}: backward == fused");
                // In place: the logits become the gradient, gaps untouched.
                let mut xin = upload(ctx, &d.x, offset, T::default());
                let (mut l3, mut s3) = (
                    DeviceBuffer::alloc(ctx, rows * 4).unwrap(),
                    DeviceBuffer::alloc(ctx, rows * 4).unwrap(),
                );
                classifier::gpu_cross_entropy_fused::<T>(
                    &stream,
                    &shape,
                    reduction,
                    LogitsGrad::InPlace(
                        xin.as_span_mut::<T>()
                            .unwrap()
                            .into_slice(offset..offset + len)
                            .unwrap(),
                    ),
                    dt.as_span().unwrap(),
                    grad_of(),
                    l3.as_span_mut().unwrap(),
                    s3.as_span_mut().unwrap(),
                    ws.as_span_mut().unwrap(),
                    status.as_span_mut().unwrap(),
                )
                .unwrap();
                stream.synchronize().unwrap();
                let ip: Vec<T> = download(&xin, offset, len);
                for n in 0..rows {
                    for j in 0..stride {
                        let at = n * stride + j;
                        if at >= len {
                            break;
                        }
                        let w = if j < v { got[n * ostride + j] } else { d.x[at] };
                        assert!(
                            bytes_of(&[ip[at]]) == bytes_of(&[w]),
                            "{what}: in place at ({n}, {j})"
                        );
                    }
                }
                assert_eq!(
                    bytes_of(&download::<f32>(&l3, 0, rows)),
                    bytes_of(&loss),
                    "{what}: in-place loss"
                );
            }
        }
    }
}

#[test]
fn classifier_kernels_match_the_cpu_twins() {
    if skip_without_gpu("classifier") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let mut rng = SmallRng::seed_from_u64(0x0c1a_55e5);
    check::<f32>(&ctx, &mut rng);
    check::<bf16>(&ctx, &mut rng);
    check::<f16>(&ctx, &mut rng);
}

/// Bad targets: the smallest bad row in the status word, NaN loss and gradient for bad rows,
/// other rows as usual; the twin refuses the same row.
#[test]
fn bad_targets_set_the_status() {
    if skip_without_gpu("classifier status") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    let shape = ClassifierShape::new(40, 100);
    let x: Vec<f32> = (0..4000).map(|i| (i % 17) as f32 * 0.1).collect();
    let mut targets: Vec<i64> = (0..40).map(|n| n % 100).collect();
    targets[31] = 100;
    targets[17] = -5;
    targets[3] = IGNORE_INDEX;
    let dx = DeviceBuffer::from_host(&ctx, bytes_of(&x)).unwrap();
    let dt = DeviceBuffer::from_host(&ctx, bytes_of(&targets)).unwrap();
    let mut out = DeviceBuffer::alloc(&ctx, 4000 * 4).unwrap();
    let (mut l, mut s) = (
        DeviceBuffer::alloc(&ctx, 160).unwrap(),
        DeviceBuffer::alloc(&ctx, 160).unwrap(),
    );
    let mut ws = DeviceBuffer::alloc(&ctx, WORKSPACE_BYTES).unwrap();
    let mut status = minus_one(&ctx);
    classifier::gpu_cross_entropy_fused::<f32>(
        &stream,
        &shape,
        Reduction::Mean,
        LogitsGrad::Separate {
            logits: dx.as_span().unwrap(),
            dlogits: out.as_span_mut().unwrap(),
            out_stride: 100,
        },
        dt.as_span().unwrap(),
        LossGrad::Value(1.0),
        l.as_span_mut().unwrap(),
        s.as_span_mut().unwrap(),
        ws.as_span_mut().unwrap(),
        status.as_span_mut().unwrap(),
    )
    .unwrap();
    stream.synchronize().unwrap();
    assert_eq!(download::<i64>(&status, 0, 1), [17]);
    let loss: Vec<f32> = download(&l, 0, 40);
    let grad: Vec<f32> = download(&out, 0, 4000);
    for n in 0..40 {
        let row = &grad[n * 100..][..100];
        match n {
            17 | 31 => assert!(loss[n].is_nan() && row.iter().all(|v| v.is_nan()), "{n}"),
            3 => assert!(loss[n] == 0.0 && row.iter().all(|&v| v == 0.0)),
            _ => assert!(loss[n].is_finite() && row.iter().all(|v| v.is_finite())),
        }
    }
    let err =
        classifier::cross_entropy_forward(&shape, &x, &targets, &mut [0f32; 40], &mut [0f32; 40]);
    assert!(matches!(
        err,
        Err(Error::IndexOutOfRange {
            position: 17,
            value: -5,
            ..
        })
    ));
}

#[test]
fn short_spans_are_errors() {
    if skip_without_gpu("classifier spans") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    let shape = ClassifierShape::new(4, 10);
    let dx = DeviceBuffer::alloc(&ctx, 40 * 4).unwrap();
    let dt = DeviceBuffer::from_host(&ctx, bytes_of(&[0i64; 4])).unwrap();
    let (mut l, mut s) = (
        DeviceBuffer::alloc(&ctx, 16).unwrap(),
        DeviceBuffer::alloc(&ctx, 16).unwrap(),
    );
    let mut status = minus_one(&ctx);
    let short_logits = classifier::gpu_cross_entropy_forward::<f32>(
        &stream,
        &shape,
        dx.as_span::<f32>().unwrap().slice(..39).unwrap(),
        dt.as_span().unwrap(),
        l.as_span_mut().unwrap(),
        s.as_span_mut().unwrap(),
        status.as_span_mut().unwrap(),
    );
    assert!(short_logits.is_err());
    let ints = classifier::gpu_cross_entropy_forward::<i32>(
        &stream,
        &shape,
        dx.as_span::<i32>().unwrap(),
        dt.as_span().unwrap(),
        l.as_span_mut().unwrap(),
        s.as_span_mut().unwrap(),
        status.as_span_mut().unwrap(),
    );
    assert!(ints.is_err());
    let no_classes = classifier::gpu_cross_entropy_forward::<f32>(
        &stream,
        &ClassifierShape::new(4, 0),
        dx.as_span::<f32>().unwrap(),
        dt.as_span().unwrap(),
        l.as_span_mut().unwrap(),
        s.as_span_mut().unwrap(),
        status.as_span_mut().unwrap(),
    );
    assert!(no_classes.is_err());
    let mut ws = DeviceBuffer::alloc(&ctx, WORKSPACE_BYTES).unwrap();
    let mut x = DeviceBuffer::alloc(&ctx, 40 * 4).unwrap();
    let one = DeviceBuffer::from_host(&ctx, bytes_of(&[1f32])).unwrap();
    let none_scalar = classifier::gpu_cross_entropy_fused::<f32>(
        &stream,
        &shape,
        Reduction::None,
        LogitsGrad::InPlace(x.as_span_mut().unwrap()),
        dt.as_span().unwrap(),
        LossGrad::Device(one.as_span().unwrap()),
        l.as_span_mut().unwrap(),
        s.as_span_mut().unwrap(),
        ws.as_span_mut().unwrap(),
        status.as_span_mut().unwrap(),
    );
    assert!(none_scalar.is_err(), "None needs a gradient a row");
}
