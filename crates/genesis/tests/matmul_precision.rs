//! The precision switch of f32 matrix products (`genesis::backends`): full f32 by default on
//! every device, TF32 on CUDA once `"high"` is set, and back. The switch is one setting for the
//! process, so this file holds a single test.

use genesis::{DType, Device, Error, Generator, Tensor, backends};

mod common;
use common::{Release, devices};

/// `[4, 8] @ [8, 4]` of `1 + 2^-20` by ones: `8 + 2^-17` in f32 (every partial sum is exact),
/// `8` when the inputs are truncated to TF32 (10 mantissa bits).
fn probe(dev: Device) -> f32 {
    let x = 1.0f32 + 2f32.powi(-20);
    let a = Tensor::full([4, 8], x, dev).unwrap();
    let b = Tensor::full([8, 4], 1.0f32, dev).unwrap();
    let c = a.matmul(&b).unwrap().to_vec::<f32>().unwrap();
    assert!(c.iter().all(|&v| v == c[0]), "{c:?}");
    c[0]
}

const EXACT: f32 = 8.0 + 1.0 / 131072.0;

#[test]
fn float32_matmul_precision_is_highest_by_default_and_high_uses_tf32_on_cuda() {
    let _release = Release;
    assert_eq!(backends::float32_matmul_precision(), "highest");
    assert!(!backends::allow_tf32());
    assert!(matches!(
        backends::set_float32_matmul_precision("fastest"),
        Err(Error::InvalidArgument {
            op: "set_float32_matmul_precision",
            ..
        })
    ));
    assert_eq!(backends::float32_matmul_precision(), "highest");
    for dev in devices() {
        assert_eq!(probe(dev), EXACT, "default precision on {dev}");
    }

    backends::set_float32_matmul_precision("high").unwrap();
    assert_eq!(backends::float32_matmul_precision(), "high");
    assert!(backends::allow_tf32());
    for dev in devices() {
        let want = if dev == Device::Cpu { EXACT } else { 8.0 };
        assert_eq!(probe(dev), want, "\"high\" on {dev}");
        // Random products within the TF32 bound (each input truncated, off by less than 2^-10
        // of itself, so each product by less than 2^-9 of itself):
        // one whole, one with few output tiles and a long k (split over k on CUDA).
        let g = Generator::new(9);
        for (m, n, k) in [(67, 130, 300), (50, 260, 1500)] {
            let a = g.randn([m, k], DType::F32, Device::Cpu).unwrap();
            let b = g.randn([k, n], DType::F32, Device::Cpu).unwrap();
            let va = a.to_vec::<f32>().unwrap();
            let vb = b.to_vec::<f32>().unwrap();
            let got = a
                .to(dev)
                .unwrap()
                .matmul(&b.to(dev).unwrap())
                .unwrap()
                .to_vec::<f32>()
                .unwrap();
            for i in 0..m {
                for j in 0..n {
                    let (mut s, mut t) = (0f64, 0f64);
                    for p in 0..k {
                        let x = f64::from(va[i * k + p]) * f64::from(vb[p * n + j]);
                        s += x;
                        t += x.abs();
                    }
                    let tol = (2f64.powi(-9) + (k as f64 + 2.0) * 2f64.powi(-24)) * t + 1e-30;
                    let g = f64::from(got[i * n + j]);
                    assert!(
                        (g - s).abs() <= tol,
                        "{dev} [{m}, {k}] @ [{k}, {n}] ({i}, {j}): {g} vs {s} (tolerance {tol})"
                    );
                }
            }
        }
    }
    backends::set_allow_tf32(false);
    assert_eq!(backends::float32_matmul_precision(), "highest");
    backends::set_float32_matmul_precision("medium").unwrap();
    assert!(backends::allow_tf32());
    backends::set_float32_matmul_precision("highest").unwrap();
    for dev in devices() {
        assert_eq!(probe(dev), EXACT, "\"highest\" again on {dev}");
    }
}
