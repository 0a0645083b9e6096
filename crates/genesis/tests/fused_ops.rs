//! The ops with fused kernels on the GPU. `scaled_dot_product_attention`: the composed path
//! against a reference written out and finite differences on the CPU; on a GPU, flash
//! attention (bf16, f16 with head dims 64 and 128, f32 with 64; causal and not; GPT-2's packed
//! projection read in place) against the composed ops on the same operands in float32 on the
//! CPU, forward and gradients.
//! `layer_norm`: the one-kernel CUDA path against the composed ops in float64.

use genesis::{DType, Device, Error, Generator, Tensor, no_grad};

mod common;
use common::{Release, devices};

const CPU: Device = Device::Cpu;

/// softmax(q kᵀ scale + mask) v for `[n, l, e]` f64 tensors, written out.
fn reference(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    dims: [usize; 4],
    causal: bool,
    scale: f64,
) -> Vec<f64> {
    let [n, l, s, e] = dims;
    let mut out = vec![0.0; n * l * e];
    for b in 0..n {
        for i in 0..l {
            let seen = if causal { s.min(i + 1) } else { s };
            let x: Vec<f64> = (0..seen)
                .map(|j| {
                    (0..e)
                        .map(|c| q[(b * l + i) * e + c] * k[(b * s + j) * e + c])
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = x.iter().map(|&t| (t - m).exp()).collect();
            let z: f64 = w.iter().sum();
            for c in 0..e {
                out[(b * l + i) * e + c] = (0..seen)
                    .map(|j| w[j] * v[(b * s + j) * e + c])
                    .sum::<f64>()
                    / z;
            }
        }
    }
    out
}

#[test]
fn composed_path_matches_the_definition_and_its_gradients() {
    let g = Generator::new(5);
    // Head dim 3: the scale goes on the query where s >= 3 and on the scores otherwise.
    for (l, s, causal) in [
        (5, 5, true),
        (4, 7, false),
        (6, 3, true),
        (4, 2, true),
        (1, 1, false),
    ] {
        let q = g.randn([2, l, 3], DType::F64, CPU).unwrap();
        let k = g.randn([2, s, 3], DType::F64, CPU).unwrap();
        let v = g.randn([2, s, 3], DType::F64, CPU).unwrap();
        let y = q
            .scaled_dot_product_attention(&k, &v, causal, Some(0.7))
            .unwrap();
        let want = reference(
            &q.to_vec::<f64>().unwrap(),
            &k.to_vec::<f64>().unwrap(),
            &v.to_vec::<f64>().unwrap(),
            [2, l, s, 3],
            causal,
            0.7,
        );
        for (a, b) in y.to_vec::<f64>().unwrap().iter().zip(&want) {
            assert!((a - b).abs() < 1e-12, "l {l} s {s}: {a} against {b}");
        }
        // Gradients against central differences of sum(y * w).
        let leaves: Vec<Tensor> = [&q, &k, &v]
            .iter()
            .map(|t| t.detach().requires_grad_(true).unwrap())
            .collect();
        let w = g.randn(y.shape(), DType::F64, CPU).unwrap();
        let f = |xs: &[Tensor]| -> f64 {
            no_grad(|| {
                xs[0]
                    .scaled_dot_product_attention(&xs[1], &xs[2], causal, Some(0.7))?
                    .mul(&w)?
                    .sum()?
                    .item::<f64>()
            })
            .unwrap()
        };
        leaves[0]
            .scaled_dot_product_attention(&leaves[1], &leaves[2], causal, Some(0.7))
            .unwrap()
            .mul(&w)
            .unwrap()
            .sum()
            .unwrap()
            .backward()
            .unwrap();
        let base: Vec<Tensor> = vec![q.clone(), k.clone(), v.clone()];
        for (i, leaf) in leaves.iter().enumerate() {
            let grad = leaf
                .grad()
                .unwrap()
                .contiguous()
                .unwrap()
                .to_vec::<f64>()
                .unwrap();
            let x0 = base[i].to_vec::<f64>().unwrap();
            for (j, &gj) in grad.iter().enumerate() {
                let at = |d: f64| {
                    let mut x = x0.clone();
                    x[j] += d;
                    let mut xs = base.clone();
                    xs[i] = Tensor::from_slice(&x, base[i].shape(), CPU).unwrap();
                    f(&xs)
                };
                let numeric = (at(1e-6) - at(-1e-6)) / 2e-6;
                assert!(
                    (gj - numeric).abs() < 1e-6 + 1e-5 * numeric.abs(),
                    "operand {i}[{j}]: {gj} against {numeric}"
                );
            }
        }
    }
}

#[test]
fn bad_operands_are_typed_errors() {
    let x = Tensor::zeros([2, 3, 4], DType::F32, CPU).unwrap();
    let y = Tensor::zeros([2, 3, 5], DType::F32, CPU).unwrap();
    let z = Tensor::zeros([3, 3, 4], DType::F32, CPU).unwrap();
    let v = Tensor::zeros([4], DType::F32, CPU).unwrap();
    for (k, val) in [(&y, &x), (&z, &z), (&v, &v)] {
        assert!(matches!(
            x.scaled_dot_product_attention(k, val, false, None),
            Err(Error::InvalidArgument { .. })
        ));
    }
    assert!(
        x.scaled_dot_product_attention(&x, &x, false, Some(f64::NAN))
            .is_err()
    );
    // Value's last dimension may differ from the queries'.
    let w = Tensor::zeros([2, 3, 6], DType::F32, CPU).unwrap();
    assert_eq!(
        x.scaled_dot_product_attention(&x, &w, true, None)
            .unwrap()
            .shape(),
        &[2, 3, 6]
    );
    // add_layer_norm: a residual that does not broadcast, a normalised shape that is not the
    // trailing dimensions, affine parameters of another shape.
    assert!(matches!(
        x.add_layer_norm(&y, &[4], None, None, 1e-5),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(x.add_layer_norm(&x, &[3], None, None, 1e-5).is_err());
    assert!(matches!(
        x.add_layer_norm(&x, &[4], Some(&w), None, 1e-5),
        Err(Error::ShapeMismatch { .. })
    ));
}

/// Largest |a - b| / (1 + |b|) over two tensors of one shape (any layout), in f64.
fn worst(a: &Tensor, b: &Tensor) -> f64 {
    let f = |t: &Tensor| {
        t.to_dtype(DType::F64)
            .unwrap()
            .contiguous()
            .unwrap()
            .to(CPU)
            .unwrap()
            .to_vec::<f64>()
            .unwrap()
    };
    f(a).iter()
        .zip(f(b))
        .map(|(x, y)| (x - y).abs() / (1.0 + y.abs()))
        .fold(0.0, f64::max)
}

#[test]
fn flash_attention_matches_the_composed_ops() {
    let _release = Release;
    let Some(&dev) = devices().iter().find(|d| matches!(d, Device::Cuda(_))) else {
        eprintln!("skipped: no CUDA device");
        return;
    };
    let g = Generator::new(11);
    for dtype in [DType::BF16, DType::F16, DType::F32] {
        let tol = match dtype {
            DType::BF16 => 2e-2,
            DType::F16 => 4e-3,
            _ => 1e-5,
        };
        for (b, h, t, d, causal, packed) in [
            (2, 3, 100, 64, true, false),
            (1, 2, 257, 128, false, false),
            (2, 4, 128, 64, true, true),
            (1, 12, 1024, 64, true, true),
            (2, 2, 300, 64, false, true),
        ] {
            // f32 runs flash attention at head dim 64 only.
            if dtype == DType::F32 && d != 64 {
                continue;
            }
            // q, k, v: views of a [B, T, 3C] projection (GPT-2's), or separate tensors.
            let (q, k, v) = if packed {
                let c = h * d;
                let qkv = g.randn([b, t, 3 * c], dtype, dev).unwrap();
                let parts = qkv.split(c, 2).unwrap();
                let heads = |z: &Tensor| {
                    z.reshape([b as isize, t as isize, h as isize, d as isize])
                        .unwrap()
                        .transpose(1, 2)
                        .unwrap()
                };
                (heads(&parts[0]), heads(&parts[1]), heads(&parts[2]))
            } else {
                let r = || g.randn([b, h, t, d], dtype, dev).unwrap();
                (r(), r(), r())
            };
            let leaves = |to: DType, on: Device| -> Vec<Tensor> {
                [&q, &k, &v]
                    .iter()
                    .map(|x| {
                        x.to_dtype(to)
                            .unwrap()
                            .to(on)
                            .unwrap()
                            .detach()
                            .requires_grad_(true)
                            .unwrap()
                    })
                    .collect()
            };
            // The reference: the composed ops in float32 on the CPU.
            let (fl, rf) = (leaves(dtype, dev), leaves(DType::F32, CPU));
            let y = fl[0]
                .scaled_dot_product_attention(&fl[1], &fl[2], causal, None)
                .unwrap();
            // The flash path returns a [B, H, T, D] view of [B, T, H, D].
            assert_eq!(y.shape(), &[b, h, t, d]);
            assert!(
                y.transpose(1, 2).unwrap().is_contiguous(),
                "flash output layout"
            );
            let want = rf[0]
                .scaled_dot_product_attention(&rf[1], &rf[2], causal, None)
                .unwrap();
            let e = worst(&y, &want);
            assert!(
                e < tol,
                "{dtype} {b}x{h}x{t}x{d} causal {causal}: output off by {e}"
            );
            let w = g.randn(y.shape(), DType::F32, dev).unwrap();
            y.to_dtype(DType::F32)
                .unwrap()
                .mul(&w)
                .unwrap()
                .sum()
                .unwrap()
                .backward()
                .unwrap();
            let w = w.to(CPU).unwrap();
            want.mul(&w).unwrap().sum().unwrap().backward().unwrap();
            for (i, name) in ["dq", "dk", "dv"].iter().enumerate() {
                let (a, r) = (fl[i].grad().unwrap(), rf[i].grad().unwrap());
                assert_eq!(a.dtype(), dtype);
                let e = worst(&a, &r);
                assert!(
                    e < 4.0 * tol,
                    "{dtype} {b}x{h}x{t}x{d} causal {causal}: {name} off by {e}"
                );
            }
        }
    }
}

/// The fused layer norm (CUDA: one kernel forward, one backward) against the composed ops on
/// the CPU in float64, forward and the three gradients, for f32, bf16 and f16, with and
/// without the affine parameters, over widths that take the vector and the scalar paths.
#[test]
fn fused_layer_norm_matches_the_composed_ops() {
    let _release = Release;
    let Some(&dev) = devices().iter().find(|d| matches!(d, Device::Cuda(_))) else {
        eprintln!("skipped: no CUDA device");
        return;
    };
    let g = Generator::new(3);
    for (dtype, tol) in [(DType::F32, 1e-5), (DType::BF16, 2e-2), (DType::F16, 3e-3)] {
        for (rows, cols, affine) in [
            (64, 768, true),
            (33, 1000, true),
            (7, 37, false),
            (4096, 768, true),
        ] {
            let x64 = g
                .randn([rows, cols], DType::F64, CPU)
                .unwrap()
                .mul(3.0)
                .unwrap()
                .add(1.0)
                .unwrap();
            let (w64, b64) = (
                g.randn([cols], DType::F64, CPU).unwrap(),
                g.randn([cols], DType::F64, CPU).unwrap(),
            );
            // The device operands, and the float64 reference from the same rounded values.
            let on = |t: &Tensor| {
                t.to_dtype(dtype)
                    .unwrap()
                    .to(dev)
                    .unwrap()
                    .detach()
                    .requires_grad_(true)
                    .unwrap()
            };
            let back = |t: &Tensor| {
                t.to_dtype(dtype)
                    .unwrap()
                    .to_dtype(DType::F64)
                    .unwrap()
                    .detach()
                    .requires_grad_(true)
                    .unwrap()
            };
            let (x, w, b) = (on(&x64), on(&w64), on(&b64));
            let (xr, wr, br) = (back(&x64), back(&w64), back(&b64));
            let (wo, bo) = if affine {
                (Some(&w), Some(&b))
            } else {
                (None, None)
            };
            let (wro, bro) = if affine {
                (Some(&wr), Some(&br))
            } else {
                (None, None)
            };
            let y = x.layer_norm(&[cols], wo, bo, 1e-5).unwrap();
            let want = xr.layer_norm(&[cols], wro, bro, 1e-5).unwrap();
            assert_eq!(y.dtype(), dtype);
            let e = worst(&y, &want);
            assert!(e < tol * 4.0, "{dtype} {rows}x{cols}: y off by {e}");
            let gy = g.randn([rows, cols], DType::F64, CPU).unwrap();
            y.to_dtype(DType::F64)
                .unwrap()
                .to(CPU)
                .unwrap()
                .mul(&gy)
                .unwrap()
                .sum()
                .unwrap()
                .backward()
                .unwrap();
            want.mul(&gy.to_dtype(dtype).unwrap().to_dtype(DType::F64).unwrap())
                .unwrap()
                .sum()
                .unwrap()
                .backward()
                .unwrap();
            let e = worst(&x.grad().unwrap(), &xr.grad().unwrap());
            assert!(e < tol * 8.0, "{dtype} {rows}x{cols}: dx off by {e}");
            if affine {
                for (name, a, r) in [("dw", &w, &wr), ("db", &b, &br)] {
                    let (ga, gr) = (a.grad().unwrap(), r.grad().unwrap());
                    let scale = gr
                        .abs()
                        .unwrap()
                        .max()
                        .unwrap()
                        .item::<f64>()
                        .unwrap()
                        .max(1.0);
                    let e = worst(&ga, &gr) / scale.sqrt();
                    assert!(e < tol * 32.0, "{dtype} {rows}x{cols}: {name} off by {e}");
                }
            }
        }
    }
}

/// The fused cross entropy (CUDA: float32 logits, and bfloat16 ones under autocast) against
/// the composed ops on the CPU in float64: every reduction, ignored rows, a strided row layout,
/// the loss and the logits' gradient; a bad target is an index error on both paths.
#[test]
fn fused_cross_entropy_matches_the_composed_ops() {
    use genesis::Reduction;
    let _release = Release;
    let g = Generator::new(8);
    let t_cpu = Tensor::from_slice(&[3i64, 9], [2], CPU).unwrap();
    let l_cpu = Tensor::zeros([2, 5], DType::F32, CPU).unwrap();
    assert!(l_cpu.cross_entropy(&t_cpu, None, Reduction::Mean).is_err());
    let Some(&dev) = devices().iter().find(|d| matches!(d, Device::Cuda(_))) else {
        eprintln!("skipped: no CUDA device");
        return;
    };
    assert!(
        l_cpu
            .to(dev)
            .unwrap()
            .cross_entropy(&t_cpu.to(dev).unwrap(), None, Reduction::Mean)
            .is_err(),
        "a bad target on the device"
    );
    for (dtype, tol) in [(DType::F32, 1e-5), (DType::BF16, 1e-4)] {
        for (rows, classes, strided) in [(64, 50304, false), (37, 1000, true), (5, 3, false)] {
            for (ignore, reduction) in [
                (None, Reduction::Mean),
                (Some(-100), Reduction::Mean),
                (Some(2), Reduction::Sum),
                (Some(-100), Reduction::None),
            ] {
                let x64 = g
                    .randn([rows, classes + 8], DType::F64, CPU)
                    .unwrap()
                    .mul(3.0)
                    .unwrap();
                let x64 = if strided {
                    x64.narrow(1, 4, classes).unwrap()
                } else {
                    x64.narrow(1, 0, classes).unwrap().contiguous().unwrap()
                };
                // Every seventh row holds the ignored value (when there is one).
                let t: Vec<i64> = (0..rows)
                    .map(|i| match ignore {
                        Some(ig) if i % 7 == 3 => ig,
                        _ => ((i * 31 + 5) % classes) as i64,
                    })
                    .collect();
                let t_cpu = Tensor::from_slice(&t, [rows], CPU).unwrap();
                let t_dev = t_cpu.to(dev).unwrap();
                // The device logits (a strided view when `strided`), and the float64 reference
                // from the same rounded values.
                let xd = x64.to_dtype(dtype).unwrap().to(dev).unwrap();
                let xd = if strided {
                    xd
                } else {
                    xd.contiguous().unwrap()
                };
                let xd = xd.detach().requires_grad_(true).unwrap();
                let xr = x64
                    .to_dtype(dtype)
                    .unwrap()
                    .to_dtype(DType::F64)
                    .unwrap()
                    .detach()
                    .requires_grad_(true)
                    .unwrap();
                let ig = ignore;
                let loss = if dtype == DType::F32 {
                    xd.cross_entropy(&t_dev, ig, reduction).unwrap()
                } else {
                    genesis::autograd::autocast(DType::BF16, || {
                        xd.cross_entropy(&t_dev, ig, reduction)
                    })
                    .unwrap()
                };
                let want = xr.cross_entropy(&t_cpu, ig, reduction).unwrap();
                assert_eq!(loss.dtype(), DType::F32);
                let e = worst(&loss, &want);
                assert!(
                    e < tol,
                    "{dtype} {rows}x{classes} {reduction:?}: loss off by {e}"
                );
                let w = g.randn(loss.shape(), DType::F64, CPU).unwrap();
                loss.mul(&w.to_dtype(DType::F32).unwrap().to(dev).unwrap())
                    .unwrap()
                    .sum()
                    .unwrap()
                    .backward()
                    .unwrap();
                want.mul(
                    &w.to_dtype(DType::F32)
                        .unwrap()
                        .to_dtype(DType::F64)
                        .unwrap(),
                )
                .unwrap()
                .sum()
                .unwrap()
                .backward()
                .unwrap();
                let (gd, gr) = (xd.grad().unwrap(), xr.grad().unwrap());
                assert_eq!(gd.dtype(), dtype);
                let gtol = if dtype == DType::BF16 { 1e-2 } else { 1e-5 };
                let e = worst(&gd, &gr);
                assert!(
                    e < gtol,
                    "{dtype} {rows}x{classes} {reduction:?}: dlogits off by {e}"
                );
            }
        }
    }
}

/// Edge cases of the new entry points are values or typed errors, never panics: empty
/// sequences and batches, a zero head dim, no rows, no classes, bad and ignored targets.
#[test]
fn edge_cases_are_values_or_typed_errors() {
    use genesis::Reduction;
    let z = |s: &[usize]| Tensor::zeros(s, DType::F32, CPU).unwrap();
    // Attention over empty query, key or batch dimensions, and a zero head dim.
    for (q, k, v) in [
        ([2, 0, 4], [2, 3, 4], [2, 3, 4]),
        ([2, 3, 4], [2, 0, 4], [2, 0, 4]),
        ([0, 3, 4], [0, 3, 4], [0, 3, 4]),
        ([2, 3, 0], [2, 3, 0], [2, 3, 0]),
    ] {
        for causal in [false, true] {
            let r = z(&q).scaled_dot_product_attention(&z(&k), &z(&v), causal, None);
            if let Ok(y) = r {
                assert_eq!(y.shape(), &[q[0], q[1], v[2]]);
            }
        }
    }
    // Cross entropy: no rows, no classes, a bad target, every row ignored.
    let t0 = Tensor::zeros([0], DType::I64, CPU).unwrap();
    for red in [Reduction::Mean, Reduction::Sum, Reduction::None] {
        let _ = z(&[0, 5]).cross_entropy(&t0, None, red).unwrap();
    }
    assert!(
        z(&[3, 0])
            .cross_entropy(
                &Tensor::zeros([3], DType::I64, CPU).unwrap(),
                None,
                Reduction::Mean
            )
            .is_err()
    );
    let bad = Tensor::from_slice(&[-1i64, 7], [2], CPU).unwrap();
    assert!(
        z(&[2, 5])
            .cross_entropy(&bad, None, Reduction::Sum)
            .is_err()
    );
    let ignored = Tensor::from_slice(&[-100i64, -100], [2], CPU).unwrap();
    let m = z(&[2, 5])
        .cross_entropy(&ignored, Some(-100), Reduction::Mean)
        .unwrap();
    assert!(
        m.item::<f32>().unwrap().is_nan(),
        "the mean over no counted rows (PyTorch: nan)"
    );
    assert!(
        z(&[2, 5])
            .cross_entropy(
                &Tensor::zeros([2], DType::F32, CPU).unwrap(),
                None,
                Reduction::Sum
            )
            .is_err()
    );
    assert!(
        z(&[2, 5])
            .cross_entropy(
                &Tensor::zeros([3], DType::I64, CPU).unwrap(),
                None,
                Reduction::Sum
            )
            .is_err()
    );
    assert!(
        z(&[5])
            .cross_entropy(
                &Tensor::zeros([1], DType::I64, CPU).unwrap(),
                None,
                Reduction::Sum
            )
            .is_err()
    );
    // Layer norm over no rows.
    assert_eq!(
        z(&[0, 8])
            .layer_norm(&[8], None, None, 1e-5)
            .unwrap()
            .shape(),
        &[0, 8]
    );
}

/// The fused cross entropy's backward writes the logits' gradient over the logits when no one
/// else holds them and the graph is not retained: the same gradients, bit for bit, as when the
/// caller keeps the logits (which then stay untouched), and as two retained backwards (each
/// the same, the second adding to the first).
#[test]
fn cross_entropy_gradient_in_place_of_unheld_logits() {
    use genesis::Reduction;
    let _release = Release;
    let Some(&dev) = devices().iter().find(|d| matches!(d, Device::Cuda(_))) else {
        eprintln!("skipped: no CUDA device");
        return;
    };
    let g = Generator::new(12);
    let (n, k, c) = (48, 32, 1000);
    let x0 = g.randn([n, k], DType::F32, dev).unwrap();
    let w0 = g.randn([k, c], DType::F32, dev).unwrap();
    let t: Vec<i64> = (0..n).map(|i| ((i * 37 + 3) % c) as i64).collect();
    let t = Tensor::from_slice(&t, [n], CPU).unwrap().to(dev).unwrap();
    let bits = |x: &Tensor| {
        x.to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    };
    // (keep the logits, retain the graph): the gradients of x and w, and the kept logits
    // before and after the backward.
    let run = |keep: bool, retain: bool| {
        let x = x0.detach().requires_grad_(true).unwrap();
        let w = w0.detach().requires_grad_(true).unwrap();
        let logits = x.matmul(&w).unwrap();
        let before = keep.then(|| bits(&logits));
        let loss = logits.cross_entropy(&t, None, Reduction::Mean).unwrap();
        let kept = if keep { Some(logits) } else { None };
        loss.backward_with(None, retain).unwrap();
        if retain {
            loss.backward_with(None, false).unwrap();
        }
        if let (Some(l), Some(b)) = (&kept, &before) {
            assert_eq!(&bits(l), b, "kept logits changed by the backward");
        }
        (bits(&x.grad().unwrap()), bits(&w.grad().unwrap()))
    };
    let alone = run(false, false);
    let kept = run(true, false);
    assert_eq!(alone, kept, "in-place and separate gradients differ");
    // Twice retained: each backward the same gradient, the second added to the first.
    let twice = run(false, true);
    let doubled = |v: &[u32]| -> Vec<u32> {
        v.iter()
            .map(|&b| (f32::from_bits(b) * 2.0).to_bits())
            .collect()
    };
    assert_eq!(twice.0, doubled(&alone.0), "retained backwards of x");
    assert_eq!(twice.1, doubled(&alone.1), "retained backwards of w");
}

/// Layer norm's backward adds the input's gradient into the one gathered so far when the
/// engine alone holds it (the residual stream's), and makes a new one when another holder
/// shares that buffer: either way the input's gradient is the sum of each use's gradient,
/// each computed on its own (generated shapes, with and without weight and bias, the other
/// use before or after the norm, and uses whose gradients share one buffer).
#[test]
fn layer_norm_gradient_added_into_the_residual_streams_matches_each_use_on_its_own() {
    let _release = Release;
    let g = Generator::new(11);
    for dev in devices() {
        for case in 0..24usize {
            let rows = 1 + case % 7;
            let cols = [1, 3, 8, 37, 64][case % 5];
            let affine = case % 3 != 0;
            let dtype = if case % 4 == 3 {
                DType::F64
            } else {
                DType::F32
            };
            let leaf = |t: Tensor| t.to(dev).unwrap().detach().requires_grad_(true).unwrap();
            let x0 = g.randn([rows, cols], dtype, CPU).unwrap();
            let w = g.randn([cols], dtype, CPU).unwrap().to(dev).unwrap();
            let b = g.randn([cols], dtype, CPU).unwrap().to(dev).unwrap();
            let a = g.randn([rows, cols], dtype, CPU).unwrap().to(dev).unwrap();
            let c = g.randn([rows, cols], dtype, CPU).unwrap().to(dev).unwrap();
            let ln = |x: &Tensor| {
                let (w, b) = if affine {
                    (Some(&w), Some(&b))
                } else {
                    (None, None)
                };
                x.layer_norm(&[cols], w, b, 1e-5).unwrap()
            };
            // The norm's gradient on its own.
            let xn = leaf(x0.clone());
            ln(&xn).mul(&a).unwrap().sum().unwrap().backward().unwrap();
            let norm_grad = xn.grad().unwrap();
            // 0: x * c + ln(x) (the product's gradient, a buffer of its own, gathered first);
            // 1: ln(x) + x * c written the other way round; 2: x + ln(x) (the sum hands one
            // buffer to both inputs); 3: ln(x) twice over one residual (x + ln(x) + ln(x)).
            let pattern = case % 4;
            // A recorded tensor (its gradient gathered by the engine, as the residual stream's
            // is), not a leaf.
            let x_leaf = leaf(x0.clone());
            let x = x_leaf.mul(1.0).unwrap();
            let y = match pattern {
                0 => x.mul(&c).unwrap().add(&ln(&x).mul(&a).unwrap()).unwrap(),
                1 => ln(&x).mul(&a).unwrap().add(&x.mul(&c).unwrap()).unwrap(),
                2 => x.mul(&a).unwrap().add(&ln(&x).mul(&a).unwrap()).unwrap(),
                _ => x
                    .mul(&c)
                    .unwrap()
                    .add(&ln(&x).mul(&a).unwrap())
                    .unwrap()
                    .add(&ln(&x).mul(&a).unwrap())
                    .unwrap(),
            };
            y.sum().unwrap().backward().unwrap();
            let other = if pattern == 2 { &a } else { &c };
            let mut want = other.add(&norm_grad).unwrap();
            if pattern == 3 {
                want = want.add(&norm_grad).unwrap();
            }
            let err = worst(&x_leaf.grad().unwrap(), &want);
            let tol = if dtype == DType::F64 { 1e-12 } else { 2e-6 };
            assert!(
                err <= tol,
                "{dev:?} case {case} (pattern {pattern}, {rows}x{cols}, affine {affine}, \
                 {dtype}): {err:e}"
            );
        }
    }
}

/// The gradient of GPT-2's packed projection through flash attention: q, k and v are the
/// thirds of one `[B, T, 3C]` tensor that requires grad, so the backward writes their
/// gradients into one buffer laid out as that tensor and the engine takes it as the tensor's
/// gradient; against the composed ops on a float32 copy (also with a fourth use of the
/// projection, whose gradient is added to the buffer's, and with only part of it read).
#[test]
fn flash_attention_gradient_of_a_packed_projection() {
    let _release = Release;
    let Some(&dev) = devices().iter().find(|d| matches!(d, Device::Cuda(_))) else {
        eprintln!("skipped: no CUDA device");
        return;
    };
    let g = Generator::new(17);
    for (b, h, t, d, extra) in [
        (2, 4, 128, 64, false),
        (1, 3, 200, 64, true),
        (2, 2, 64, 128, false),
    ] {
        let c = h * d;
        let x0 = g.randn([b, t, 3 * c], DType::BF16, dev).unwrap();
        let w = g.randn([b, h, t, d], DType::F32, dev).unwrap();
        let grad_of = |dtype: DType| -> Tensor {
            let x = x0
                .to_dtype(dtype)
                .unwrap()
                .detach()
                .requires_grad_(true)
                .unwrap();
            let parts = x.split(c, 2).unwrap();
            let heads = |z: &Tensor| {
                z.reshape([b as isize, t as isize, h as isize, d as isize])
                    .unwrap()
                    .transpose(1, 2)
                    .unwrap()
            };
            let y = heads(&parts[0])
                .scaled_dot_product_attention(&heads(&parts[1]), &heads(&parts[2]), true, None)
                .unwrap();
            let mut loss = y
                .to_dtype(DType::F32)
                .unwrap()
                .mul(&w)
                .unwrap()
                .sum()
                .unwrap();
            if extra {
                let s = x
                    .to_dtype(DType::F32)
                    .unwrap()
                    .mul(0.5)
                    .unwrap()
                    .sum()
                    .unwrap();
                loss = loss.add(&s).unwrap();
            }
            loss.backward().unwrap();
            x.grad().unwrap()
        };
        let (got, want) = (grad_of(DType::BF16), grad_of(DType::F32));
        assert_eq!(got.dtype(), DType::BF16);
        let e = worst(&got, &want);
        assert!(
            e < 8e-2,
            "{b}x{h}x{t}x{d} extra {extra}: the projection's gradient off by {e}"
        );
    }
}

/// `layer_norm_to` gives `layer_norm(..).to_dtype(..)`: the values and the three gradients bit
/// for bit, on every device (CUDA and the CPU twin: f32 rows written in bf16 or f16 by the norm
/// itself, the gradient read in that dtype), over generated shapes, with and without the affine
/// parameters; and where the fused path does not apply (non-contiguous rows, a half input, an
/// output of the input's dtype) the composed ops' results.
#[test]
fn layer_norm_to_a_narrower_dtype_is_the_norm_then_the_conversion() {
    let _release = Release;
    let g = Generator::new(17);
    let mut seed = 7u64;
    let mut next = |n: usize| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize % n
    };
    for dev in devices() {
        for case in 0..12 {
            let (rows, cols) = (1 + next(70), 1 + next(900));
            let (out, input, transposed) = match case % 6 {
                0 | 3 => (DType::BF16, DType::F32, false),
                1 | 4 => (DType::F16, DType::F32, false),
                2 => (DType::BF16, DType::F32, true),
                _ => (DType::F32, DType::BF16, false),
            };
            let affine = case % 4 != 1;
            let leaf = |shape: &[usize], scale: f64| {
                let t = g.randn(shape, DType::F32, CPU).unwrap().mul(scale).unwrap();
                let t = t.to_dtype(input).unwrap().to(dev).unwrap();
                (
                    t.detach().requires_grad_(true).unwrap(),
                    t.detach().requires_grad_(true).unwrap(),
                )
            };
            // Two copies of each leaf: one for each side.
            let (xa, xb) = if transposed {
                leaf(&[cols, rows], 2.0)
            } else {
                leaf(&[rows, cols], 2.0)
            };
            let ((wa, wb), (ba, bb)) = (leaf(&[cols], 1.0), leaf(&[cols], 1.0));
            let rowsof = |x: &Tensor| {
                if transposed {
                    x.t().unwrap()
                } else {
                    x.clone()
                }
            };
            let (wo, bo) = if affine {
                (Some(&wa), Some(&ba))
            } else {
                (None, None)
            };
            let (wq, bq) = if affine {
                (Some(&wb), Some(&bb))
            } else {
                (None, None)
            };
            let ya = rowsof(&xa)
                .layer_norm_to(&[cols], wo, bo, 1e-5, out)
                .unwrap();
            let yb = rowsof(&xb)
                .layer_norm(&[cols], wq, bq, 1e-5)
                .unwrap()
                .to_dtype(out)
                .unwrap();
            let ctx = format!("{dev:?} case {case}: {rows}x{cols} {input} -> {out}");
            assert_eq!(ya.dtype(), out, "{ctx}");
            let bits = |t: &Tensor| t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
            assert_eq!(bits(&ya), bits(&yb), "{ctx}: values");
            let gy = g
                .randn([rows, cols], DType::F32, CPU)
                .unwrap()
                .to_dtype(out)
                .unwrap()
                .to(dev)
                .unwrap();
            ya.mul(&gy).unwrap().sum().unwrap().backward().unwrap();
            yb.mul(&gy).unwrap().sum().unwrap().backward().unwrap();
            let grad = |t: &Tensor| bits(&t.grad().expect("a gradient"));
            assert_eq!(grad(&xa), grad(&xb), "{ctx}: input gradient");
            if affine {
                assert_eq!(grad(&wa), grad(&wb), "{ctx}: weight gradient");
                assert_eq!(grad(&ba), grad(&bb), "{ctx}: bias gradient");
            }
        }
    }
}

/// `add_layer_norm(_to)` gives `(x + r, layer_norm(x + r))` as the two ops compute them: the
/// sum, the normalised rows and the four gradients bit for bit, on every device, over generated
/// shapes: the fused pass (a residual of the rows' dtype; float32 rows with a bfloat16 or
/// float16 residual and output, autocast's residual stream), with and without the affine
/// parameters, the loss reading both the sum and the rows (the norm's gradient added into the
/// sum's); and where the fused pass does not apply (a broadcast or transposed residual, one
/// that promotes the rows, float64, two normalised dimensions) the composed ops' results.
#[test]
fn add_layer_norm_is_the_add_then_the_norm() {
    let _release = Release;
    let g = Generator::new(29);
    let mut seed = 3u64;
    let mut next = |n: usize| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize % n
    };
    for dev in devices() {
        for case in 0..16 {
            let (rows, cols) = (1 + next(40), 1 + next(700));
            // (rows, residual, output or None for add_layer_norm, residual layout)
            let (input, resid, out, layout) = match case % 8 {
                0 => (DType::F32, DType::BF16, Some(DType::BF16), 0),
                1 => (DType::F32, DType::F16, Some(DType::F16), 0),
                2 => (DType::F32, DType::F32, None, 0),
                3 => (DType::BF16, DType::BF16, None, 0),
                4 => (DType::F32, DType::BF16, Some(DType::BF16), 1),
                5 => (DType::F32, DType::BF16, Some(DType::BF16), 2),
                6 => (DType::BF16, DType::F32, None, 0),
                _ => (DType::F64, DType::F64, None, 0),
            };
            let affine = case % 3 != 2;
            let leaf = |shape: &[usize], dtype: DType, scale: f64| {
                let t = g.randn(shape, DType::F32, CPU).unwrap().mul(scale).unwrap();
                let t = t.to_dtype(dtype).unwrap().to(dev).unwrap();
                (
                    t.detach().requires_grad_(true).unwrap(),
                    t.detach().requires_grad_(true).unwrap(),
                )
            };
            let (xa, xb) = leaf(&[rows, cols], input, 2.0);
            // 0: the rows' shape; 1: broadcast over the rows; 2: transposed.
            let (ra, rb) = match layout {
                1 => leaf(&[cols], resid, 1.0),
                2 => leaf(&[cols, rows], resid, 1.0),
                _ => leaf(&[rows, cols], resid, 1.0),
            };
            let rview = |r: &Tensor| {
                if layout == 2 {
                    r.t().unwrap()
                } else {
                    r.clone()
                }
            };
            let ((wa, wb), (ba, bb)) = (leaf(&[cols], input, 1.0), leaf(&[cols], input, 1.0));
            let (wo, bo, wq, bq) = if affine {
                (Some(&wa), Some(&ba), Some(&wb), Some(&bb))
            } else {
                (None, None, None, None)
            };
            // Recorded tensors, not leaves (the residual stream's gradient is gathered).
            let (x1, x2) = (xa.mul(1.0).unwrap(), xb.mul(1.0).unwrap());
            let (ha, ya) = match out {
                Some(d) => x1.add_layer_norm_to(&rview(&ra), &[cols], wo, bo, 1e-5, d),
                None => x1.add_layer_norm(&rview(&ra), &[cols], wo, bo, 1e-5),
            }
            .unwrap();
            let hb = x2.add(&rview(&rb)).unwrap();
            let yb = match out {
                Some(d) => hb.layer_norm_to(&[cols], wq, bq, 1e-5, d),
                None => hb.layer_norm(&[cols], wq, bq, 1e-5),
            }
            .unwrap();
            let ctx = format!("{dev:?} case {case}: {rows}x{cols} {input} + {resid} -> {out:?}");
            assert_eq!((ha.dtype(), ya.dtype()), (hb.dtype(), yb.dtype()), "{ctx}");
            let bits = |t: &Tensor| t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
            assert_eq!(bits(&ha), bits(&hb), "{ctx}: sum");
            assert_eq!(bits(&ya), bits(&yb), "{ctx}: rows");
            let gy = g.randn([rows, cols], DType::F32, CPU).unwrap();
            let gh = g.randn([rows, cols], DType::F32, CPU).unwrap();
            let loss = |h: &Tensor, y: &Tensor| {
                let gy = gy.to_dtype(y.dtype()).unwrap().to(dev).unwrap();
                let gh = gh.to_dtype(h.dtype()).unwrap().to(dev).unwrap();
                let s = y
                    .mul(&gy)
                    .unwrap()
                    .sum()
                    .unwrap()
                    .to_dtype(DType::F64)
                    .unwrap();
                s.add(
                    &h.mul(&gh)
                        .unwrap()
                        .sum()
                        .unwrap()
                        .to_dtype(DType::F64)
                        .unwrap(),
                )
                .unwrap()
            };
            loss(&ha, &ya).backward().unwrap();
            loss(&hb, &yb).backward().unwrap();
            let grad = |t: &Tensor| bits(&t.grad().expect("a gradient"));
            assert_eq!(grad(&xa), grad(&xb), "{ctx}: input gradient");
            assert_eq!(grad(&ra), grad(&rb), "{ctx}: residual gradient");
            assert_eq!(ra.grad().unwrap().dtype(), resid, "{ctx}");
            if affine {
                assert_eq!(grad(&wa), grad(&wb), "{ctx}: weight gradient");
                assert_eq!(grad(&ba), grad(&bb), "{ctx}: bias gradient");
            }
        }
    }
}

/// A linear branch added to the residual stream before a layer norm (a transformer's output
/// projection) takes its bias's gradient from the norm's backward, which sums the branch's
/// gradient by columns as it writes it: on the CPU the twin's sums (in order in f64, rounded
/// once), bit for bit the column sums of the branch's gradient so computed; on a GPU within
/// the kernel's bound (f32 trees). The other gradients are those of the add and the norm
/// apart (the test above).
#[test]
fn a_linear_branch_takes_its_bias_gradient_from_the_layer_norms_backward() {
    let _release = Release;
    let g = Generator::new(31);
    for dev in devices() {
        // (residual stream, branch, norm output or None for add_layer_norm)
        for (case, (stream, branch, out)) in [
            (DType::F32, DType::F32, None),
            (DType::F32, DType::BF16, Some(DType::BF16)),
            (DType::F32, DType::F16, Some(DType::F16)),
            (DType::BF16, DType::BF16, None),
        ]
        .into_iter()
        .enumerate()
        {
            let (rows, k, cols) = (96 + 37 * case, 24, 40 + 8 * case);
            let leaf = |shape: &[usize], dtype: DType| {
                g.randn(shape, DType::F32, CPU)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap()
                    .to(dev)
                    .unwrap()
                    .requires_grad_(true)
                    .unwrap()
            };
            let (x, z) = (leaf(&[rows, cols], stream), leaf(&[rows, k], branch));
            let (w, b) = (leaf(&[cols, k], branch), leaf(&[cols], branch));
            let (nw, nb) = (leaf(&[cols], stream), leaf(&[cols], stream));
            let y_branch = z.linear(&w, Some(&b)).unwrap();
            y_branch.retain_grad().unwrap();
            // A recorded residual (not a leaf), so that its gradient is gathered.
            let x1 = x.mul(1.0).unwrap();
            let (h, y) = match out {
                Some(d) => x1.add_layer_norm_to(&y_branch, &[cols], Some(&nw), Some(&nb), 1e-5, d),
                None => x1.add_layer_norm(&y_branch, &[cols], Some(&nw), Some(&nb), 1e-5),
            }
            .unwrap();
            let gy = g.randn([rows, cols], DType::F32, CPU).unwrap();
            let gh = g.randn([rows, cols], DType::F32, CPU).unwrap();
            let term = |t: &Tensor, w: &Tensor| {
                let w = w.to_dtype(t.dtype()).unwrap().to(dev).unwrap();
                t.mul(&w)
                    .unwrap()
                    .sum()
                    .unwrap()
                    .to_dtype(DType::F64)
                    .unwrap()
            };
            term(&y, &gy)
                .add(&term(&h, &gh))
                .unwrap()
                .backward()
                .unwrap();
            let ctx = format!("{dev:?} {stream} + {branch} branch -> {out:?}");
            let gb = y_branch.grad().expect("the branch's gradient");
            assert_eq!(gb.dtype(), branch, "{ctx}");
            let vals = gb.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
            let (mut sums, mut abs) = (vec![0f64; cols], vec![0f64; cols]);
            for (i, v) in vals.iter().enumerate() {
                sums[i % cols] += v;
                abs[i % cols] += v.abs();
            }
            let want = Tensor::from_slice(&sums, [cols], CPU)
                .unwrap()
                .to_dtype(branch)
                .unwrap()
                .to_dtype(DType::F64)
                .unwrap()
                .to_vec::<f64>()
                .unwrap();
            let got = b.grad().expect("the bias's gradient");
            assert_eq!(got.dtype(), branch, "{ctx}");
            let got = got.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
            let unit = match branch {
                DType::BF16 => 2f64.powi(-8),
                DType::F16 => 2f64.powi(-11),
                _ => 2f64.powi(-24),
            };
            for c in 0..cols {
                if dev == CPU {
                    assert_eq!(got[c], want[c], "{ctx}: column {c}");
                } else {
                    let tol = (8.0 + 2.0 * (rows as f64).sqrt()) * 2f64.powi(-24) * abs[c]
                        + 2.0 * unit * sums[c].abs();
                    assert!(
                        (got[c] - sums[c]).abs() <= tol,
                        "{ctx}: column {c}: {} against {} (tolerance {tol})",
                        got[c],
                        sums[c]
                    );
                }
            }
        }
    }
}

/// A layer norm over two trailing dimensions normalises each `[4, 8]` block as one row (the
/// fused kernels take the block's 32 contiguous values), and its affine gradients keep the
/// parameters' shape: against the float64 composed ops, with and without a residual.
#[test]
fn layer_norm_over_two_dimensions_normalises_the_whole_block() {
    let _release = Release;
    let g = Generator::new(5);
    for dev in devices() {
        let x64 = g.randn([3, 4, 8], DType::F64, CPU).unwrap();
        let r64 = g.randn([3, 4, 8], DType::F64, CPU).unwrap();
        let w64 = g.randn([4, 8], DType::F64, CPU).unwrap();
        let b64 = g.randn([4, 8], DType::F64, CPU).unwrap();
        let on = |t: &Tensor, d: DType, dev: Device| {
            t.to_dtype(d)
                .unwrap()
                .to(dev)
                .unwrap()
                .detach()
                .requires_grad_(true)
                .unwrap()
        };
        for residual in [false, true] {
            let [x, r, w, b] = [&x64, &r64, &w64, &b64].map(|t| on(t, DType::F32, dev));
            // The reference: the composed ops in float64 on the CPU.
            let [xr, rr, wr, br] = [&x64, &r64, &w64, &b64].map(|t| on(t, DType::F64, CPU));
            let (y, want) = if residual {
                let y = x
                    .add_layer_norm(&r, &[4, 8], Some(&w), Some(&b), 1e-5)
                    .unwrap()
                    .1;
                let want = xr
                    .add(&rr)
                    .unwrap()
                    .layer_norm(&[4, 8], Some(&wr), Some(&br), 1e-5);
                (y, want.unwrap())
            } else {
                let y = x.layer_norm(&[4, 8], Some(&w), Some(&b), 1e-5).unwrap();
                (
                    y,
                    xr.layer_norm(&[4, 8], Some(&wr), Some(&br), 1e-5).unwrap(),
                )
            };
            let e = worst(&y, &want);
            assert!(e < 1e-5, "{dev:?} residual {residual}: y off by {e}");
            let gy = g.randn([3, 4, 8], DType::F64, CPU).unwrap();
            let cpu = |t: &Tensor| t.to_dtype(DType::F64).unwrap().to(CPU).unwrap();
            cpu(&y).mul(&gy).unwrap().sum().unwrap().backward().unwrap();
            want.mul(&gy).unwrap().sum().unwrap().backward().unwrap();
            for (name, a, e) in [("dx", &x, &xr), ("dw", &w, &wr), ("db", &b, &br)] {
                let (ga, ge) = (a.grad().unwrap(), e.grad().unwrap());
                assert_eq!(ga.shape(), ge.shape(), "{dev:?} {name}");
                let err = worst(&ga, &ge);
                assert!(
                    err < 1e-4,
                    "{dev:?} residual {residual}: {name} off by {err}"
                );
            }
            if residual {
                let err = worst(&r.grad().unwrap(), &rr.grad().unwrap());
                assert!(err < 1e-4, "{dev:?}: dr off by {err}");
            }
        }
    }
}

/// `linear_gelu(_tanh)` gives `linear` then the GELU: the values, the input's and the weight's
/// gradients bit for bit (the same kernels on the same activation gradient), the bias's within
/// rounding of the composed sum (its column sums come from the activation gradient's pass, in
/// another order), on every device, for 2-D and 3-D inputs, with a bias that needs a gradient,
/// one that does not, and none, in float32 and under bf16 autocast.
#[test]
fn linear_gelu_is_the_linear_then_the_gelu() {
    let _release = Release;
    let g = Generator::new(41);
    for dev in devices() {
        for case in 0..12 {
            let tanh = case % 2 == 0;
            let shape: Vec<usize> = if case % 3 == 0 {
                vec![2, 5, 24]
            } else {
                vec![37, 24]
            };
            let bias_mode = case % 4; // 0, 1: a bias needing a gradient; 2: not needing one; 3: none
            let autocast = case >= 8;
            let leaf = |s: &[usize], scale: f64| {
                let t = g
                    .randn(s, DType::F32, CPU)
                    .unwrap()
                    .mul(scale)
                    .unwrap()
                    .to(dev)
                    .unwrap();
                (
                    t.detach().requires_grad_(true).unwrap(),
                    t.detach().requires_grad_(true).unwrap(),
                )
            };
            let (xa, xb) = leaf(&shape, 1.0);
            let (wa, wb) = leaf(&[40, 24], 0.3);
            let (ba, bb) = leaf(&[40], 0.5);
            let (ba, bb) = match bias_mode {
                2 => (ba.detach(), bb.detach()),
                _ => (ba, bb),
            };
            let (bo, bq) = if bias_mode == 3 {
                (None, None)
            } else {
                (Some(&ba), Some(&bb))
            };
            let run = |f: &dyn Fn() -> Tensor| {
                if autocast {
                    genesis::autograd::autocast(DType::BF16, f)
                } else {
                    f()
                }
            };
            let ya = run(&|| {
                if tanh {
                    xa.linear_gelu_tanh(&wa, bo).unwrap()
                } else {
                    xa.linear_gelu(&wa, bo).unwrap()
                }
            });
            let yb = run(&|| {
                let p = xb.linear(&wb, bq).unwrap();
                if tanh { p.gelu_tanh() } else { p.gelu() }.unwrap()
            });
            let ctx = format!(
                "{dev:?} case {case}: {shape:?} tanh {tanh} bias {bias_mode} autocast {autocast}"
            );
            assert_eq!(ya.dtype(), yb.dtype(), "{ctx}");
            let bits = |t: &Tensor| t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
            assert_eq!(bits(&ya), bits(&yb), "{ctx}: values");
            let mut out_shape = shape.clone();
            *out_shape.last_mut().unwrap() = 40;
            let gy = g
                .randn(&out_shape, DType::F32, CPU)
                .unwrap()
                .to_dtype(ya.dtype())
                .unwrap()
                .to(dev)
                .unwrap();
            ya.mul(&gy).unwrap().sum().unwrap().backward().unwrap();
            yb.mul(&gy).unwrap().sum().unwrap().backward().unwrap();
            let grad = |t: &Tensor| bits(&t.grad().expect("a gradient"));
            assert_eq!(grad(&xa), grad(&xb), "{ctx}: input gradient");
            assert_eq!(grad(&wa), grad(&wb), "{ctx}: weight gradient");
            match bias_mode {
                2 | 3 => assert!(ba.grad().is_none(), "{ctx}: a bias gradient"),
                _ => {
                    let tol = if autocast { 1e-2 } else { 1e-5 };
                    let e = worst(&ba.grad().unwrap(), &bb.grad().unwrap());
                    assert!(e < tol, "{ctx}: bias gradient off by {e}");
                }
            }
        }
    }
}
