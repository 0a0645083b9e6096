//! The unary ops beyond the NumPy corpus's reach: PyTorch's answers for bools and integers,
//! `nan_to_num` and `softplus_with`, on the CPU and, when present, CUDA device 0.

mod common;

use genesis::{DType, Device, Tensor, UnaryOp};

fn devices() -> Vec<Device> {
    common::devices()
}

/// Each test gives the device's cached memory back when it ends.
fn release() -> common::Release {
    common::Release
}

#[test]
fn bools_take_sign_and_square_as_pytorch() {
    let _release = release();
    for dev in devices() {
        let b = Tensor::from_bools(&[false, true, true], [3], dev).unwrap();
        let s = b.sign().unwrap();
        assert_eq!(s.dtype(), DType::Bool);
        assert_eq!(s.to_bool_vec().unwrap(), [false, true, true]);
        let q = b.square().unwrap();
        assert_eq!(q.dtype(), DType::I64);
        assert_eq!(q.to_vec::<i64>().unwrap(), [0, 1, 1]);
        for op in [UnaryOp::Floor, UnaryOp::Round, UnaryOp::Neg, UnaryOp::Abs] {
            let e = b.unary(op).unwrap_err();
            assert!(
                e.to_string().contains("Bool") || e.to_string().contains("bool"),
                "{e}"
            );
        }
        // Float ops of bools give float32.
        assert_eq!(
            b.rsqrt().unwrap().to_vec::<f32>().unwrap(),
            [f32::INFINITY, 1.0, 1.0]
        );
    }
}

#[test]
fn small_integers_keep_their_dtype() {
    let _release = release();
    for dev in devices() {
        let u = Tensor::from_slice(&[3u8, 0, 250], [3], dev).unwrap();
        assert_eq!(u.square().unwrap().to_vec::<u8>().unwrap(), [9, 0, 36]);
        assert_eq!(u.sign().unwrap().to_vec::<u8>().unwrap(), [1, 0, 1]);
        assert_eq!(u.round().unwrap().to_vec::<u8>().unwrap(), [3, 0, 250]);
        let i = Tensor::from_slice(&[-3i8, 0, 5], [3], dev).unwrap();
        assert_eq!(i.sign().unwrap().to_vec::<i8>().unwrap(), [-1, 0, 1]);
        assert_eq!(i.floor().unwrap().dtype(), DType::I8);
        let r = i.rsqrt().unwrap().to_vec::<f32>().unwrap();
        assert!(r[0].is_nan() && r[1] == f32::INFINITY);
        // In place: a float result does not go into an integer tensor.
        assert!(i.erf_().is_err());
        i.square_().unwrap();
        assert_eq!(i.to_vec::<i8>().unwrap(), [9, 0, 25]);
    }
}

#[test]
fn floats_follow_pytorch_at_the_edges() {
    let _release = release();
    for dev in devices() {
        let x = Tensor::from_slice(
            &[
                f32::NAN,
                -0.0,
                0.0,
                2.5,
                -2.5,
                0.5,
                f32::INFINITY,
                f32::NEG_INFINITY,
            ],
            [8],
            dev,
        )
        .unwrap();
        let bits = |t: Tensor| -> Vec<u32> {
            t.to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect()
        };
        let want = |v: &[f32]| -> Vec<u32> { v.iter().map(|v| v.to_bits()).collect() };
        assert_eq!(
            bits(x.sign().unwrap()),
            want(&[0.0, 0.0, 0.0, 1.0, -1.0, 1.0, 1.0, -1.0])
        );
        let r = x.round().unwrap().to_vec::<f32>().unwrap();
        assert!(r[0].is_nan());
        assert_eq!(
            bits(x.round().unwrap())[1..],
            want(&[-0.0, 0.0, 2.0, -2.0, 0.0, f32::INFINITY, f32::NEG_INFINITY])
        );
        let r = x.rsqrt().unwrap().to_vec::<f32>().unwrap();
        assert_eq!(r[1], f32::NEG_INFINITY);
        assert_eq!(r[6], 0.0);
        assert!(r[4].is_nan());
        assert_eq!(
            bits(x.nan_to_num(0.0, None, None).unwrap()),
            want(&[0.0, -0.0, 0.0, 2.5, -2.5, 0.5, f32::MAX, f32::MIN])
        );
        assert_eq!(
            x.isnan().unwrap().to_bool_vec().unwrap(),
            [true, false, false, false, false, false, false, false]
        );
        assert_eq!(
            x.isinf().unwrap().to_bool_vec().unwrap(),
            [false, false, false, false, false, false, true, true]
        );
        assert_eq!(
            x.isfinite().unwrap().to_bool_vec().unwrap(),
            [false, true, true, true, true, true, false, false]
        );
        // A replacement beyond the dtype's range rounds to an infinity, as PyTorch's cast.
        let h = x.to_dtype(DType::F16).unwrap();
        let y = h.nan_to_num(1.0, Some(1e10), None).unwrap();
        assert_eq!(y.dtype(), DType::F16);
        let y = y.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        assert_eq!((y[0], y[6], y[7]), (1.0, f32::INFINITY, -65504.0));
        // Integers: a copy.
        let i = Tensor::from_slice(&[1i32, -2], [2], dev).unwrap();
        assert_eq!(
            i.nan_to_num(0.0, None, None)
                .unwrap()
                .to_vec::<i32>()
                .unwrap(),
            [1, -2]
        );
        assert_eq!(i.isfinite().unwrap().to_bool_vec().unwrap(), [true, true]);
    }
}

#[test]
fn softplus_with_beta_and_threshold() {
    let _release = release();
    for dev in devices() {
        let x = Tensor::from_slice(&[-30.0f64, -1.0, 0.0, 1.0, 7.4, 7.6, 50.0], [7], dev).unwrap();
        let got = x.softplus_with(2.0, 15.0).unwrap().to_vec::<f64>().unwrap();
        for (v, g) in [-30.0f64, -1.0, 0.0, 1.0, 7.4, 7.6, 50.0].iter().zip(&got) {
            let want = if 2.0 * v > 15.0 {
                *v
            } else {
                (2.0 * v).exp().ln_1p() / 2.0
            };
            assert!(
                (g - want).abs() <= 1e-15 * want.abs().max(1e-300),
                "{v}: {g} vs {want}"
            );
        }
        // The defaults are the one-kernel softplus.
        let a = x.softplus_with(1.0, 20.0).unwrap().to_vec::<f64>().unwrap();
        assert_eq!(a, x.softplus().unwrap().to_vec::<f64>().unwrap());
        let i = Tensor::from_slice(&[0i32], [1], dev).unwrap();
        assert_eq!(i.softplus_with(2.0, 1.0).unwrap().dtype(), DType::F32);
    }
}

#[test]
fn every_table_op_has_both_methods_and_a_name() {
    let x = Tensor::from_slice(&[0.25f32, -0.5], [2], Device::Cpu).unwrap();
    for op in UnaryOp::ALL {
        assert_eq!(UnaryOp::from_name(op.name()), Some(op));
        let y = x.unary(op).unwrap();
        let z = x.deep_clone().unwrap();
        z.unary_(op).unwrap();
        // The same values, with the sign of zeros; NaN payloads aside.
        let bits = |t: &Tensor| -> Vec<u32> {
            let v = t.to_vec::<f32>().unwrap();
            v.iter()
                .map(|v| if v.is_nan() { 0x7fc0_0000 } else { v.to_bits() })
                .collect()
        };
        assert_eq!(bits(&y), bits(&z), "{op:?}");
    }
}

/// The activations of `activation.rs` against PyTorch's forward and derivative formulas in
/// float64, on generated values with each formula's boundary points among them; float32 and
/// bfloat16 within their rounding; the arguments refused.
#[test]
fn activations_follow_pytorchs_formulas_and_derivatives() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(21);
    let (sa, ss) = (1.673_263_242_354_377_3f64, 1.050_700_987_355_480_5f64);
    type F = Box<dyn Fn(f64) -> (f64, f64)>;
    let elu = |alpha: f64, scale: f64, input: f64| -> F {
        Box::new(move |x: f64| {
            let v = if x > 0.0 {
                scale * x
            } else {
                alpha * scale * (x * input).exp_m1()
            };
            let d = if x <= 0.0 {
                input * alpha * scale * (x * input).exp()
            } else {
                scale
            };
            (v, d)
        })
    };
    type Op = fn(&Tensor) -> genesis::Result<Tensor>;
    let cases: Vec<(&str, F, Op)> = vec![
        (
            "leaky_relu",
            Box::new(|x: f64| if x > 0.0 { (x, 1.0) } else { (0.01 * x, 0.01) }),
            |t| t.leaky_relu(0.01),
        ),
        ("elu", elu(1.5, 1.0, 1.0), |t| t.elu(1.5)),
        ("selu", elu(sa, ss, 1.0), |t| t.selu()),
        ("celu", elu(0.7, 1.0, 1.0 / 0.7), |t| t.celu(0.7)),
        (
            "hardtanh",
            Box::new(|x: f64| {
                (
                    x.clamp(-1.0, 2.0),
                    if x > -1.0 && x < 2.0 { 1.0 } else { 0.0 },
                )
            }),
            |t| t.hardtanh(-1.0, 2.0),
        ),
        (
            "relu6",
            Box::new(|x: f64| {
                (
                    x.clamp(0.0, 6.0),
                    if x > 0.0 && x < 6.0 { 1.0 } else { 0.0 },
                )
            }),
            |t| t.relu6(),
        ),
        (
            "hardsigmoid",
            Box::new(|x: f64| {
                let v = if x <= -3.0 {
                    0.0
                } else if x >= 3.0 {
                    1.0
                } else {
                    x / 6.0 + 0.5
                };
                (v, if x > -3.0 && x < 3.0 { 1.0 / 6.0 } else { 0.0 })
            }),
            |t| t.hardsigmoid(),
        ),
        (
            "hardswish",
            Box::new(|x: f64| {
                let v = if x <= -3.0 {
                    0.0
                } else if x >= 3.0 {
                    x
                } else {
                    x * (x + 3.0) / 6.0
                };
                let d = if x < -3.0 {
                    0.0
                } else if x <= 3.0 {
                    x / 3.0 + 0.5
                } else {
                    1.0
                };
                (v, d)
            }),
            |t| t.hardswish(),
        ),
        (
            "mish",
            Box::new(|x: f64| {
                let t = x.exp().ln_1p().tanh();
                let s = 1.0 / (1.0 + (-x).exp());
                (x * t, t + x * s * (1.0 - t * t))
            }),
            |t| t.mish(),
        ),
    ];
    let edges = [-3.0, 3.0, 0.0, -1.0, 2.0, 6.0, -0.0, 25.0, -25.0];
    for (name, rule, op) in &cases {
        let x: Vec<f64> = (0..64)
            .map(|i| {
                if i < edges.len() {
                    edges[i]
                } else {
                    rng.random_range(-8.0..8.0)
                }
            })
            .collect();
        let up: Vec<f64> = (0..64).map(|_| rng.random_range(-2.0..2.0)).collect();
        for device in devices() {
            let xt = Tensor::from_slice(&x, [64], device)
                .unwrap()
                .requires_grad_(true)
                .unwrap();
            let y = op(&xt).unwrap();
            let got = y.to_vec::<f64>().unwrap();
            y.mul(&Tensor::from_slice(&up, [64], device).unwrap())
                .unwrap()
                .sum()
                .unwrap()
                .backward()
                .unwrap();
            let grad = xt.grad().unwrap().to_vec::<f64>().unwrap();
            for i in 0..64 {
                let (v, d) = rule(x[i]);
                let tol = |w: f64| 1e-12 * (1.0 + w.abs());
                assert!(
                    (got[i] - v).abs() <= tol(v),
                    "{name}({}) = {} want {v}",
                    x[i],
                    got[i]
                );
                let dg = d * up[i];
                assert!(
                    (grad[i] - dg).abs() <= tol(dg),
                    "{name}'({}) = {} want {dg}",
                    x[i],
                    grad[i]
                );
            }
            // Lower precisions within their rounding, in their own dtype.
            for (dtype, tol) in [(DType::F32, 1e-6), (DType::BF16, 1e-2)] {
                let lo = op(&xt.detach().to_dtype(dtype).unwrap()).unwrap();
                assert_eq!(lo.dtype(), dtype);
                let lo = lo.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
                for i in 0..64 {
                    let v = rule(x[i]).0;
                    assert!(
                        (lo[i] - v).abs() <= tol * (1.0 + v.abs()),
                        "{name} {dtype} at {}",
                        x[i]
                    );
                }
            }
            // NaN stays NaN.
            let n = op(&Tensor::from_slice(&[f64::NAN], [1], device).unwrap()).unwrap();
            assert!(n.to_vec::<f64>().unwrap()[0].is_nan(), "{name}(NaN)");
        }
    }
    let x = Tensor::from_slice(&[1i64, 2], [2], genesis::Device::Cpu).unwrap();
    assert!(x.leaky_relu(0.1).is_err());
    let f = x.to_dtype(DType::F32).unwrap();
    assert!(f.celu(0.0).is_err());
    assert!(f.hardtanh(1.0, -1.0).is_err());
    assert!(f.hardtanh(f64::NAN, 1.0).is_err());
}
