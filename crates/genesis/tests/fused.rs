//! The fused optimiser steps (`genesis::fused`): Adam / AdamW and global-norm clipping over
//! many tensors, against an f64 reference of PyTorch's update on generated cases (shapes from
//! empty to several blocks, every floating dtype, more tensors than one launch takes, views
//! into one storage), their refusals (nothing written), and CUDA against the CPU bit for bit.

use genesis::fused::{AdamStep, adam_, clip_grad_norm_};
use genesis::{DType, Device, Tensor, no_grad};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod common;
use common::{Release, devices};

const FLOATS: [DType; 4] = [DType::F32, DType::F16, DType::BF16, DType::F64];

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

fn tensor(vals: &[f64], dtype: DType, dev: Device) -> Tensor {
    Tensor::from_slice(vals, [vals.len()], Device::Cpu)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
        .to(dev)
        .unwrap()
}

fn random(rng: &mut SmallRng, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..n).map(|_| rng.random_range(lo..hi)).collect()
}

/// PyTorch's Adam update of one element in f64: `(p, m, v)` after the step.
fn reference(h: &AdamStep, p: f64, g: f64, m: f64, v: f64) -> (f64, f64, f64) {
    let t = h.step as i32;
    let (mut p, mut g) = (p, g);
    if h.decoupled {
        p -= h.lr * h.weight_decay * p;
    } else {
        g += h.weight_decay * p;
    }
    let m = h.beta1 * m + (1.0 - h.beta1) * g;
    let v = h.beta2 * v + (1.0 - h.beta2) * g * g;
    let denom = v.sqrt() / (1.0 - h.beta2.powi(t)).sqrt() + h.eps;
    (p - h.lr / (1.0 - h.beta1.powi(t)) * m / denom, m, v)
}

/// The spacing of `dtype`'s subnormals (float16's are coarse: 2^-24).
fn tiny(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-24),
        DType::BF16 => 2f64.powi(-133),
        _ => 0.0,
    }
}

/// The spacing of `dtype`'s values at 1.
fn eps(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 2f64.powi(-52),
        DType::F32 => 2f64.powi(-23),
        DType::F16 => 2f64.powi(-10),
        _ => 2f64.powi(-7),
    }
}

struct Case {
    params: Vec<Tensor>,
    grads: Vec<Tensor>,
    m: Vec<Tensor>,
    v: Vec<Tensor>,
}

/// `count` tensors of random lengths (some empty, some over several 4096-element blocks) and
/// dtypes, with moments as after a few steps.
fn case(seed: u64, count: usize, dev: Device) -> Case {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut c = Case {
        params: Vec::new(),
        grads: Vec::new(),
        m: Vec::new(),
        v: Vec::new(),
    };
    for i in 0..count {
        let n = match i % 5 {
            0 => 0,
            1 => rng.random_range(1..40),
            2 => 4096 * rng.random_range(1..3) + rng.random_range(0..3),
            _ => rng.random_range(1..9000),
        };
        let dtype = FLOATS[rng.random_range(0..4)];
        c.params
            .push(tensor(&random(&mut rng, n, -2.0, 2.0), dtype, dev));
        c.grads
            .push(tensor(&random(&mut rng, n, -1.0, 1.0), dtype, dev));
        c.m.push(tensor(&random(&mut rng, n, -0.1, 0.1), dtype, dev));
        c.v.push(tensor(&random(&mut rng, n, 0.0, 0.05), dtype, dev));
    }
    c
}

fn hyper(decoupled: bool, step: u64) -> AdamStep {
    AdamStep {
        lr: 1e-2,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: if decoupled { 0.1 } else { 0.01 },
        decoupled,
        step,
    }
}

#[test]
fn adam_follows_pytorchs_update_on_generated_cases() {
    let _release = Release;
    for seed in 0..6u64 {
        let decoupled = seed % 2 == 0;
        let h = hyper(decoupled, 1 + seed * 3);
        let c = case(seed, 45, Device::Cpu);
        let before: Vec<[Vec<f64>; 4]> = (0..c.params.len())
            .map(|i| [&c.params[i], &c.grads[i], &c.m[i], &c.v[i]].map(f64s))
            .collect();
        adam_(&c.params, &c.grads, &c.m, &c.v, &h).unwrap();
        for (i, [p0, g0, m0, v0]) in before.iter().enumerate() {
            let dtype = c.params[i].dtype();
            let (p1, m1, v1) = (f64s(&c.params[i]), f64s(&c.m[i]), f64s(&c.v[i]));
            assert_eq!(f64s(&c.grads[i]), *g0, "the gradient is read only");
            for k in 0..p0.len() {
                let (p, m, v) = reference(&h, p0[k], g0[k], m0[k], v0[k]);
                // Each result is rounded once to the dtype; for f32 and f64 the few roundings
                // of the compute type add a few ulps (the update divides by a small
                // denominator, which the tolerance of `p` scales by).
                let e = eps(dtype) * 4.0;
                let step = (p - p0[k]).abs() + 1e-300;
                let ok =
                    |got: f64, want: f64, scale: f64| (got - want).abs() <= e * scale + tiny(dtype);
                // m and v: relative to their terms (the sum may cancel).
                let m_terms = (h.beta1 * m0[k]).abs() + ((1.0 - h.beta1) * g0[k]).abs();
                let v_terms = (h.beta2 * v0[k]).abs() + (1.0 - h.beta2) * g0[k] * g0[k];
                assert!(
                    ok(m1[k], m, m_terms + 1e-300) && ok(v1[k], v, v_terms + 1e-300),
                    "seed {seed} tensor {i} ({dtype:?}) element {k}: m {} vs {m}, v {} vs {v}",
                    m1[k],
                    v1[k]
                );
                assert!(
                    ok(p1[k], p, p.abs() + step * 64.0),
                    "seed {seed} tensor {i} ({dtype:?}) element {k}: p {} vs {p}",
                    p1[k]
                );
            }
        }
    }
}

#[test]
fn adam_through_the_nn_path_and_by_tensor_ops_agree() {
    // The fused step against the same update written with tensor ops in f64.
    let h = hyper(true, 2);
    let c = case(99, 12, Device::Cpu);
    let wide: Vec<[Tensor; 4]> = (0..c.params.len())
        .map(|i| {
            [&c.params[i], &c.grads[i], &c.m[i], &c.v[i]].map(|t| t.to_dtype(DType::F64).unwrap())
        })
        .collect();
    adam_(&c.params, &c.grads, &c.m, &c.v, &h).unwrap();
    for (i, [p, g, m, v]) in wide.iter().enumerate() {
        let p = p.mul(1.0 - h.lr * h.weight_decay).unwrap();
        let m = m
            .mul(h.beta1)
            .unwrap()
            .add(&g.mul(1.0 - h.beta1).unwrap())
            .unwrap();
        let v = v
            .mul(h.beta2)
            .unwrap()
            .add(&g.square().unwrap().mul(1.0 - h.beta2).unwrap())
            .unwrap();
        let denom = v
            .sqrt()
            .unwrap()
            .div((1.0 - h.beta2.powi(2)).sqrt())
            .unwrap()
            .add(h.eps)
            .unwrap();
        let p = p
            .sub(
                &m.div(&denom)
                    .unwrap()
                    .mul(h.lr / (1.0 - h.beta1.powi(2)))
                    .unwrap(),
            )
            .unwrap();
        let dtype = c.params[i].dtype();
        for (got, want) in f64s(&c.params[i]).iter().zip(f64s(&p)) {
            assert!(
                (got - want).abs() <= 64.0 * eps(dtype) * (want.abs() + 1e-2),
                "tensor {i} ({dtype:?}): {got} vs {want}"
            );
        }
    }
}

#[test]
fn views_into_one_storage_are_separate_tensors() {
    // Parameters and moments as disjoint views of one allocation each (a flat buffer).
    let flat = tensor(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], DType::F32, Device::Cpu);
    let grads = tensor(&[0.5; 6], DType::F32, Device::Cpu);
    let m = Tensor::zeros([6], DType::F32, Device::Cpu).unwrap();
    let v = Tensor::zeros([6], DType::F32, Device::Cpu).unwrap();
    let parts = |t: &Tensor| vec![t.narrow(0, 0, 2).unwrap(), t.narrow(0, 2, 4).unwrap()];
    let h = hyper(false, 1);
    let version = flat.version();
    adam_(&parts(&flat), &parts(&grads), &parts(&m), &parts(&v), &h).unwrap();
    assert!(flat.version() > version, "the write is counted");
    let (mut p, mut mm, mut vv) = (
        vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0],
        vec![0f32; 6],
        vec![0f32; 6],
    );
    let g = vec![0.5f32; 6];
    genesis_kernels_twin(&h, &mut p, &g, &mut mm, &mut vv);
    assert_eq!(flat.to_vec::<f32>().unwrap(), p);
    assert_eq!(m.to_vec::<f32>().unwrap(), mm);
}

/// The update of the f32 twin written out (what the kernels compute, fused multiply-adds).
fn genesis_kernels_twin(h: &AdamStep, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) {
    let t = h.step as i32;
    let f = |x: f64| x as f32;
    let (b1, b2) = (f(h.beta1), f(h.beta2));
    let step_size = f(h.lr / (1.0 - h.beta1.powi(t)));
    let bc2 = f((1.0 - h.beta2.powi(t)).sqrt());
    for i in 0..p.len() {
        let gi = f(h.weight_decay).mul_add(p[i], g[i]);
        m[i] = b1.mul_add(m[i], f(1.0 - h.beta1) * gi);
        v[i] = b2.mul_add(v[i], f(1.0 - h.beta2) * gi * gi);
        let denom = v[i].sqrt() / bc2 + f(h.eps);
        p[i] = (-step_size).mul_add(m[i] / denom, p[i]);
    }
}

#[test]
fn adam_refuses_bad_input_and_writes_nothing() {
    let dev = Device::Cpu;
    let p = tensor(&[1.0, 2.0, 3.0, 4.0], DType::F32, dev);
    let g = tensor(&[0.1; 4], DType::F32, dev);
    let m = Tensor::zeros([4], DType::F32, dev).unwrap();
    let v = Tensor::zeros([4], DType::F32, dev).unwrap();
    let h = hyper(true, 1);
    let one = |t: &Tensor| vec![t.clone()];
    let check = |r: genesis::Result<()>, what: &str| {
        let e = r.expect_err(what);
        assert!(!e.to_string().is_empty());
        assert_eq!(
            p.to_vec::<f32>().unwrap(),
            [1.0, 2.0, 3.0, 4.0],
            "{what}: nothing written"
        );
    };
    check(adam_(&one(&p), &[], &one(&m), &one(&v), &h), "list lengths");
    let g3 = tensor(&[0.1; 3], DType::F32, dev);
    check(adam_(&one(&p), &one(&g3), &one(&m), &one(&v), &h), "shapes");
    let g16 = g.to_dtype(DType::F16).unwrap();
    check(
        adam_(&one(&p), &one(&g16), &one(&m), &one(&v), &h),
        "dtypes",
    );
    let pi = tensor(&[1.0; 4], DType::I32, dev);
    let mi = Tensor::zeros([4], DType::I32, dev).unwrap();
    check(
        adam_(
            &one(&pi),
            &one(&pi.clone()),
            &one(&mi),
            &one(&mi.clone()),
            &h,
        ),
        "integers",
    );
    check(
        adam_(&one(&p), &one(&g), &one(&p), &one(&v), &h),
        "param is exp_avg",
    );
    check(
        adam_(&one(&p), &one(&p), &one(&m), &one(&v), &h),
        "param is its grad",
    );
    let p2 = tensor(&[1.0, 2.0, 3.0, 4.0], DType::F32, dev)
        .reshape([2, 2])
        .unwrap();
    let (g2, m2, v2) = (
        g.reshape([2, 2]).unwrap(),
        m.reshape([2, 2]).unwrap(),
        v.reshape([2, 2]).unwrap(),
    );
    let pt = p2.t().unwrap();
    let e = adam_(
        &[pt],
        &[g2.t().unwrap()],
        &[m2.t().unwrap()],
        &[v2.t().unwrap()],
        &h,
    );
    assert!(e.unwrap_err().to_string().contains("contiguous"));
    for bad in [
        AdamStep { step: 0, ..h },
        AdamStep { beta2: 1.5, ..h },
        AdamStep { lr: -1.0, ..h },
    ] {
        check(
            adam_(&one(&p), &one(&g), &one(&m), &one(&v), &bad),
            "hyper-parameters",
        );
    }
    // Overlapping views of one parameter storage.
    let a = p.narrow(0, 0, 3).unwrap();
    let b = p.narrow(0, 1, 3).unwrap();
    let (ga, ma, va) = (
        g.narrow(0, 0, 3).unwrap(),
        Tensor::zeros([3], DType::F32, dev).unwrap(),
        Tensor::zeros([3], DType::F32, dev).unwrap(),
    );
    let (mb, vb) = (
        Tensor::zeros([3], DType::F32, dev).unwrap(),
        Tensor::zeros([3], DType::F32, dev).unwrap(),
    );
    check(
        adam_(&[a, b], &[ga.clone(), ga], &[ma, mb], &[va, vb], &h),
        "overlapping parameters",
    );
    // A parameter that requires grad, with grad mode on.
    let leaf = tensor(&[1.0, 2.0, 3.0, 4.0], DType::F32, dev)
        .requires_grad_(true)
        .unwrap();
    assert!(adam_(&one(&leaf), &one(&g), &one(&m), &one(&v), &h).is_err());
    no_grad(|| adam_(&one(&leaf), &one(&g), &one(&m), &one(&v), &h)).unwrap();
    assert_ne!(leaf.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn clipping_scales_by_pytorchs_factor() {
    let mut rng = SmallRng::seed_from_u64(7);
    for max_norm in [0.5, 1e9] {
        let grads: Vec<Tensor> = (0..40)
            .map(|i| {
                let n = [0, 1, 37, 4096, 5000][i % 5];
                tensor(&random(&mut rng, n, -1.0, 1.0), FLOATS[i % 4], Device::Cpu)
            })
            .collect();
        let before: Vec<Vec<f64>> = grads.iter().map(f64s).collect();
        let exact: f64 = before.iter().flatten().map(|x| x * x).sum::<f64>().sqrt();
        let norm = clip_grad_norm_(&grads, max_norm).unwrap().unwrap();
        assert_eq!(norm.dtype(), DType::F32);
        assert!(norm.shape().is_empty());
        let got = norm.item::<f32>().unwrap() as f64;
        assert!((got - exact).abs() <= 1e-6 * exact, "{got} vs {exact}");
        let coef = (max_norm / (exact + 1e-6)).min(1.0);
        for (g, b) in grads.iter().zip(&before) {
            let dtype = g.dtype();
            // The norm, and so the factor, is f32-accurate when f32 gradients are among them.
            if coef == 1.0 {
                // Within the norm: every gradient as it was, bit for bit.
                assert_eq!(&f64s(g), b, "{dtype:?}: changed within the norm");
            }
            for (x, y) in f64s(g).iter().zip(b) {
                let want = y * coef;
                assert!(
                    (x - want).abs() <= (eps(dtype) + 1e-6) * want.abs() + tiny(dtype),
                    "{dtype:?}: {x} vs {want}"
                );
            }
        }
    }
    assert!(clip_grad_norm_(&[], 1.0).unwrap().is_none());
    let g64 = tensor(&[3.0, 4.0], DType::F64, Device::Cpu);
    let n = clip_grad_norm_(std::slice::from_ref(&g64), 1.0)
        .unwrap()
        .unwrap();
    assert_eq!(n.dtype(), DType::F64);
    assert_eq!(n.item::<f64>().unwrap(), 5.0);
    assert!((g64.to_vec::<f64>().unwrap()[1] - 4.0 / (5.0 + 1e-6)).abs() < 1e-15);
    let nan = tensor(&[f64::NAN, 1.0], DType::F32, Device::Cpu);
    clip_grad_norm_(std::slice::from_ref(&nan), 1.0).unwrap();
    assert!(
        nan.to_vec::<f32>().unwrap()[1].is_nan(),
        "a NaN norm spreads, as PyTorch's"
    );
}

#[test]
fn cuda_steps_are_the_cpus_bit_for_bit() {
    let _release = Release;
    if devices().len() < 2 {
        return;
    }
    let gpu = Device::Cuda(0);
    for seed in 0..4u64 {
        let h = hyper(seed % 2 == 1, 5 + seed);
        // More tensors than one launch takes (32).
        let cpu = case(100 + seed, 70, Device::Cpu);
        let dev = case(100 + seed, 70, gpu);
        adam_(&cpu.params, &cpu.grads, &cpu.m, &cpu.v, &h).unwrap();
        adam_(&dev.params, &dev.grads, &dev.m, &dev.v, &h).unwrap();
        for i in 0..cpu.params.len() {
            for (a, b) in [
                (&cpu.params[i], &dev.params[i]),
                (&cpu.m[i], &dev.m[i]),
                (&cpu.v[i], &dev.v[i]),
            ] {
                let (a, b) = (f64s(a), f64s(b));
                assert!(
                    a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "seed {seed} tensor {i}: CUDA differs from the CPU"
                );
            }
        }
        let norm_c = clip_grad_norm_(&cpu.grads, 0.25).unwrap().unwrap();
        let norm_g = clip_grad_norm_(&dev.grads, 0.25).unwrap().unwrap();
        assert_eq!(
            norm_c.item::<f32>().unwrap().to_bits(),
            norm_g.item::<f32>().unwrap().to_bits(),
            "seed {seed}: norms"
        );
        for (a, b) in cpu.grads.iter().zip(&dev.grads) {
            assert_eq!(f64s(a), f64s(b), "seed {seed}: clipped gradients");
        }
        // Within the norm the factor is 1 and nothing changes, on either device.
        let before: Vec<Vec<f64>> = dev.grads.iter().map(f64s).collect();
        clip_grad_norm_(&cpu.grads, 1e9).unwrap();
        clip_grad_norm_(&dev.grads, 1e9).unwrap();
        for ((a, b), was) in cpu.grads.iter().zip(&dev.grads).zip(&before) {
            assert_eq!(&f64s(b), was, "seed {seed}: changed within the norm");
            assert_eq!(f64s(a), f64s(b), "seed {seed}: within the norm");
        }
    }
}
