//! The everyday ops (clamp, prod, any/all, var/std, cumsum, cumprod, eye, linspace/logspace; sin/cos are in
//! `elementwise.rs` with the other unary ops) against f64 references computed here, on the CPU
//! and (when present) CUDA, for every dtype they take, over empty, 0-d, odd, strided and
//! permuted shapes with negative and multiple dimensions.

use genesis::{DType, Device, Error, Tensor};

mod common;
use common::{Release, devices};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const DTYPES: [DType; 6] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::F64,
    DType::I32,
    DType::I64,
];
const FLOATS: [DType; 4] = [DType::F32, DType::F16, DType::BF16, DType::F64];

/// Deterministic pseudo-random numbers in [0, 1).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A tensor of `dtype` holding `vals` (rounded to the dtype), and the values it really holds.
fn tensor(vals: &[f64], shape: &[usize], dtype: DType, dev: Device) -> (Tensor, Vec<f64>) {
    let t = Tensor::from_slice(vals, shape, Device::Cpu)
        .unwrap()
        .to_dtype(dtype)
        .unwrap();
    let held = t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
    (t.to(dev).unwrap(), held)
}

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

fn eps(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::EPSILON,
        DType::F32 => f32::EPSILON as f64,
        DType::F16 => 2f64.powi(-10),
        DType::BF16 => 2f64.powi(-7),
        _ => 0.0,
    }
}

const SHAPES: &[&[usize]] = &[
    &[],
    &[0],
    &[1],
    &[7],
    &[4, 5],
    &[3, 0, 2],
    &[2, 3, 4],
    &[5, 1, 6],
];

/// The tensors a case runs on: the tensor, and for rank >= 2 its transpose (a strided view),
/// each with its values in row-major order of the view.
fn views(t: &Tensor, held: &[f64]) -> Vec<(Tensor, Vec<f64>)> {
    let mut v = vec![(t.clone(), held.to_vec())];
    if t.dim() >= 2 {
        let tt = t.transpose(0, -1).unwrap();
        let values = f64s(&tt);
        v.push((tt, values));
    }
    v
}

/// Reduces `x` (row-major values of `shape`) over `dims` with `f`, as PyTorch lays out the
/// result (`keepdim` keeping size 1).
fn reduce_ref(
    x: &[f64],
    shape: &[usize],
    dims: &[usize],
    keepdim: bool,
    f: &dyn Fn(&[f64]) -> f64,
) -> (Vec<f64>, Vec<usize>) {
    let rank = shape.len();
    let red: Vec<bool> = (0..rank).map(|i| dims.contains(&i)).collect();
    let out_shape: Vec<usize> = (0..rank)
        .filter_map(|i| match (red[i], keepdim) {
            (false, _) => Some(shape[i]),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    let kept: Vec<usize> = (0..rank).filter(|&i| !red[i]).collect();
    let n_out: usize = kept.iter().map(|&i| shape[i]).product();
    let mut strides = vec![1usize; rank];
    for i in (0..rank.saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    let mut groups = vec![Vec::new(); n_out];
    let n: usize = shape.iter().product();
    for (flat, &v) in x.iter().enumerate().take(n) {
        let mut o = 0;
        for &k in &kept {
            o = o * shape[k] + (flat / strides[k]) % shape[k];
        }
        groups[o].push(v);
    }
    (groups.iter().map(|g| f(g)).collect(), out_shape)
}

/// The dims lists a shape's reductions are tested over: each single dimension (as a negative
/// index too), the first and last together, and none (every dimension).
fn dim_lists(rank: usize) -> Vec<Vec<isize>> {
    let mut d: Vec<Vec<isize>> = (0..rank as isize).map(|i| vec![i]).collect();
    if rank > 0 {
        d.push(vec![-1]);
    }
    if rank > 2 {
        d.push(vec![0, rank as isize - 1]);
    }
    d.push(vec![]);
    d
}

fn wrap(dims: &[isize], rank: usize) -> Vec<usize> {
    if dims.is_empty() {
        return (0..rank).collect();
    }
    dims.iter()
        .map(|&d| d.rem_euclid(rank.max(1) as isize) as usize)
        .collect()
}

#[test]
fn clamp_matches_the_reference_exactly() {
    let _release = Release;
    let mut rng = Lcg(1);
    for dev in devices() {
        for dtype in DTYPES {
            for shape in SHAPES {
                let n: usize = shape.iter().product();
                let vals: Vec<f64> = (0..n)
                    .map(|_| {
                        let v = (rng.next() - 0.5) * 40.0;
                        if dtype.is_float() { v } else { v.trunc() }
                    })
                    .collect();
                let (t, held) = tensor(&vals, shape, dtype, dev);
                let (lo, hi) = if dtype.is_float() {
                    (-3.5, 7.25)
                } else {
                    (-3.0, 7.0)
                };
                for (view, x) in views(&t, &held) {
                    for (min, max) in [
                        (Some(lo), Some(hi)),
                        (Some(lo), None),
                        (None, Some(hi)),
                        (Some(hi), Some(lo)),
                    ] {
                        // Integer tensors take integer bounds (float bounds would promote
                        // them to float32, as in PyTorch).
                        let got = if dtype.is_float() {
                            view.clamp(min, max).unwrap()
                        } else {
                            view.clamp(min.map(|v| v as i64), max.map(|v| v as i64))
                                .unwrap()
                        };
                        assert_eq!(got.shape(), view.shape());
                        assert_eq!(got.dtype(), dtype);
                        let want: Vec<f64> = x
                            .iter()
                            .map(|&v| {
                                let v = min.map_or(v, |m| v.max(m));
                                max.map_or(v, |m| v.min(m))
                            })
                            .collect();
                        assert_eq!(
                            f64s(&got),
                            want,
                            "{dev:?} {dtype} {shape:?} {min:?} {max:?}"
                        );
                    }
                }
            }
            // NaN stays NaN; clamp_min / clamp_max are the one-sided forms.
            if dtype.is_float() {
                let (t, _) = tensor(&[f64::NAN, -9.0, 9.0], &[3], dtype, dev);
                let got = f64s(&t.clamp(Some(-1.0), Some(1.0)).unwrap());
                assert!(got[0].is_nan());
                assert_eq!(&got[1..], &[-1.0, 1.0]);
                assert_eq!(f64s(&t.clamp_min(0.5).unwrap())[1..], [0.5, 9.0]);
                assert_eq!(f64s(&t.clamp_max(0.5).unwrap())[1..], [-9.0, 0.5]);
            }
        }
    }
}

#[test]
fn clamp_rejects_bad_bounds() {
    let t = Tensor::from_slice(&[1i32, 2], [2], Device::Cpu).unwrap();
    assert!(matches!(
        t.clamp::<i64>(None, None),
        Err(Error::InvalidArgument { .. })
    ));
    // An integer bound the dtype cannot hold is refused; a float bound promotes (PyTorch's).
    assert!(matches!(
        t.clamp(None, Some(1i64 << 40)),
        Err(Error::ScalarOutOfRange { .. })
    ));
    let promoted = t.clamp(Some(0.5), None).unwrap();
    assert_eq!(promoted.dtype(), DType::F32);
    assert_eq!(promoted.to_vec::<f32>().unwrap(), [1.0, 2.0]);
    // A NaN bound makes every element NaN.
    let f = Tensor::from_slice(&[1.0f32, -3.0], [2], Device::Cpu).unwrap();
    let nan = f.clamp(Some(f64::NAN), None).unwrap();
    assert!(nan.to_vec::<f32>().unwrap().iter().all(|v| v.is_nan()));
    assert!(
        f.to_dtype(DType::F16)
            .unwrap()
            .clamp(Some(1e6), None)
            .is_err()
    );
    let b = Tensor::from_bools(&[true], [1], Device::Cpu).unwrap();
    assert!(b.clamp(Some(true), None).is_err());
    assert_eq!(b.clamp(Some(0.5), None).unwrap().dtype(), DType::F32);
}

#[test]
fn prod_matches_the_f64_reference() {
    let _release = Release;
    let mut rng = Lcg(2);
    for dev in devices() {
        for dtype in DTYPES {
            for shape in SHAPES {
                let n: usize = shape.iter().product();
                let vals: Vec<f64> = (0..n)
                    .map(|_| {
                        if dtype.is_float() {
                            0.5 + rng.next()
                        } else {
                            (rng.next() * 7.0).trunc() - 3.0
                        }
                    })
                    .collect();
                let (t, held) = tensor(&vals, shape, dtype, dev);
                let out_dtype = if dtype.is_float() { dtype } else { DType::I64 };
                for (view, x) in views(&t, &held) {
                    let rank = view.dim();
                    for dims in dim_lists(rank) {
                        if dims.len() > 1 {
                            continue;
                        }
                        for keepdim in [false, true] {
                            let got = if dims.is_empty() {
                                if keepdim {
                                    continue;
                                }
                                view.prod().unwrap()
                            } else {
                                view.prod_dim(dims[0], keepdim).unwrap()
                            };
                            let (want, want_shape) =
                                reduce_ref(&x, view.shape(), &wrap(&dims, rank), keepdim, &|g| {
                                    g.iter().product()
                                });
                            assert_eq!(got.shape(), &want_shape[..]);
                            assert_eq!(got.dtype(), out_dtype);
                            for (g, w) in f64s(&got).iter().zip(&want) {
                                let tol = (x.len() as f64 * f32::EPSILON as f64 + 2.0 * eps(dtype))
                                    * w.abs();
                                assert!(
                                    (g - w).abs() <= tol,
                                    "{dev:?} {dtype} {shape:?} dims {dims:?}: {g} vs {w}"
                                );
                            }
                        }
                    }
                }
            }
        }
        // Integer products wrap in i64, as PyTorch's.
        let big = Tensor::from_slice(&[i64::MAX, 3], [2], dev).unwrap();
        assert_eq!(
            big.prod().unwrap().to_vec::<i64>().unwrap(),
            [i64::MAX.wrapping_mul(3)]
        );
    }
}

#[test]
fn any_and_all_match_the_reference() {
    let _release = Release;
    let mut rng = Lcg(3);
    for dev in devices() {
        for dtype in [DType::Bool, DType::F32, DType::BF16, DType::I32, DType::I64] {
            for shape in SHAPES {
                let n: usize = shape.iter().product();
                for density in [0.1, 0.9] {
                    let vals: Vec<f64> = (0..n)
                        .map(|_| {
                            let r = rng.next();
                            if r < density {
                                if dtype.is_float() && r < density / 4.0 {
                                    f64::NAN
                                } else {
                                    1.0 + (r * 5.0).trunc()
                                }
                            } else {
                                0.0
                            }
                        })
                        .collect();
                    let t = if dtype == DType::Bool {
                        let b: Vec<bool> = vals.iter().map(|&v| v != 0.0).collect();
                        Tensor::from_bools(&b, *shape, Device::Cpu)
                            .unwrap()
                            .to(dev)
                            .unwrap()
                    } else {
                        tensor(&vals, shape, dtype, dev).0
                    };
                    let truth: Vec<f64> = vals
                        .iter()
                        .map(|&v| f64::from(u8::from(v != 0.0)))
                        .collect();
                    let (t, truth) = (t.clone(), truth);
                    let mut cases = vec![(t.clone(), truth.clone())];
                    if t.dim() >= 2 {
                        let tt = t.transpose(0, -1).unwrap();
                        let (tb, _) = tensor(&truth, shape, DType::F64, Device::Cpu);
                        cases.push((tt, f64s(&tb.transpose(0, -1).unwrap())));
                    }
                    for (view, x) in cases {
                        let rank = view.dim();
                        for dims in dim_lists(rank) {
                            for keepdim in [false, true] {
                                for any in [true, false] {
                                    let got = match (dims.is_empty() && !keepdim, any) {
                                        (true, true) => view.any().unwrap(),
                                        (true, false) => view.all().unwrap(),
                                        (false, true) => view.any_dim(&dims[..], keepdim).unwrap(),
                                        (false, false) => view.all_dim(&dims[..], keepdim).unwrap(),
                                    };
                                    let f: &dyn Fn(&[f64]) -> f64 = if any {
                                        &|g| f64::from(u8::from(g.iter().any(|&v| v != 0.0)))
                                    } else {
                                        &|g| f64::from(u8::from(g.iter().all(|&v| v != 0.0)))
                                    };
                                    let (want, want_shape) = reduce_ref(
                                        &x,
                                        view.shape(),
                                        &wrap(&dims, rank),
                                        keepdim,
                                        f,
                                    );
                                    assert_eq!(got.dtype(), DType::Bool);
                                    assert_eq!(got.shape(), &want_shape[..]);
                                    let got: Vec<f64> = got
                                        .to_bool_vec()
                                        .unwrap()
                                        .iter()
                                        .map(|&b| f64::from(u8::from(b)))
                                        .collect();
                                    assert_eq!(
                                        got, want,
                                        "{dev:?} {dtype} {shape:?} dims {dims:?} keepdim {keepdim} any {any}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Two-pass f64 variance of `g` with `correction`.
fn var_ref(g: &[f64], correction: f64) -> f64 {
    let n = g.len() as f64;
    if g.is_empty() {
        return f64::NAN;
    }
    let mean = g.iter().sum::<f64>() / n;
    g.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - correction).max(0.0)
}

#[test]
fn var_and_std_match_the_f64_reference() {
    let _release = Release;
    let mut rng = Lcg(4);
    for dev in devices() {
        for dtype in FLOATS {
            for shape in SHAPES {
                let n: usize = shape.iter().product();
                // A mean far from 0 and a small spread: a one-pass formula without a shift would
                // lose every digit in f32.
                let vals: Vec<f64> = (0..n).map(|_| 50.0 + rng.next() * 2.0).collect();
                let (t, held) = tensor(&vals, shape, dtype, dev);
                for (view, x) in views(&t, &held) {
                    let rank = view.dim();
                    for dims in dim_lists(rank) {
                        for correction in [1.0, 0.0, 2.5] {
                            for keepdim in [false, true] {
                                for std in [false, true] {
                                    let got = match (dims.is_empty() && !keepdim, std) {
                                        (true, false) => view.var(correction).unwrap(),
                                        (true, true) => view.std(correction).unwrap(),
                                        (false, false) => {
                                            view.var_dim(&dims[..], correction, keepdim).unwrap()
                                        }
                                        (false, true) => {
                                            view.std_dim(&dims[..], correction, keepdim).unwrap()
                                        }
                                    };
                                    let f = |g: &[f64]| {
                                        let v = var_ref(g, correction);
                                        if std { v.sqrt() } else { v }
                                    };
                                    let (want, want_shape) = reduce_ref(
                                        &x,
                                        view.shape(),
                                        &wrap(&dims, rank),
                                        keepdim,
                                        &f,
                                    );
                                    assert_eq!(got.dtype(), dtype);
                                    assert_eq!(got.shape(), &want_shape[..]);
                                    // One rounding of the output type; float64 results
                                    // carry the rounding of the f64 sums themselves.
                                    let rel = if dtype == DType::F64 {
                                        1e-12
                                    } else {
                                        1.01 * eps(dtype)
                                    };
                                    for (g, w) in f64s(&got).iter().zip(&want) {
                                        let ok = (g.is_nan() && w.is_nan())
                                            || g == w
                                            || (g - w).abs() <= rel * w.abs();
                                        assert!(
                                            ok,
                                            "{dev:?} {dtype} {shape:?} dims {dims:?} correction \
                                             {correction} std {std}: {g} vs {w}"
                                        );
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        // One element with correction 1: 0 / 0.
        let one = Tensor::from_slice(&[3.0f32], [1], dev).unwrap();
        assert!(one.var(1.0).unwrap().to_vec::<f32>().unwrap()[0].is_nan());
        assert_eq!(one.var(0.0).unwrap().to_vec::<f32>().unwrap(), [0.0]);
    }
}

#[test]
fn var_rejects_bad_input() {
    let i = Tensor::from_slice(&[1i32, 2], [2], Device::Cpu).unwrap();
    assert!(matches!(i.var(1.0), Err(Error::InvalidArgument { .. })));
    let f = Tensor::from_slice(&[1.0f32, 2.0], [2], Device::Cpu).unwrap();
    assert!(matches!(
        f.var(f64::NAN),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(f.var_dim(2, 1.0, false).is_err());
    assert!(f.var_dim(&[0, 0][..], 1.0, false).is_err());
    assert_eq!(
        f.to_dtype(DType::F64)
            .unwrap()
            .std(0.0)
            .unwrap()
            .to_vec::<f64>()
            .unwrap(),
        [0.5],
        "float64 has a variance"
    );
    assert!(f.prod_dim(-2, false).is_err());
    assert!(f.any_dim(5, false).is_err());
}

#[test]
fn eye_linspace_and_logspace() {
    let _release = Release;
    for dev in devices() {
        for dtype in [
            DType::F32,
            DType::BF16,
            DType::I32,
            DType::I64,
            DType::Bool,
            DType::F64,
        ] {
            for (n, m) in [
                (0, None),
                (1, None),
                (3, None),
                (2, Some(4)),
                (4, Some(2)),
                (3, Some(0)),
            ] {
                let e = Tensor::eye(n, m, dtype, dev).unwrap();
                let cols = m.unwrap_or(n);
                assert_eq!(e.shape(), &[n, cols]);
                assert_eq!(e.dtype(), dtype);
                let want: Vec<f64> = (0..n * cols)
                    .map(|k| f64::from(u8::from(k / cols == k % cols)))
                    .collect();
                let got = if dtype == DType::Bool {
                    e.to_bool_vec()
                        .unwrap()
                        .iter()
                        .map(|&b| f64::from(u8::from(b)))
                        .collect()
                } else {
                    f64s(&e)
                };
                assert_eq!(got, want, "{dev:?} {dtype} {n} {m:?}");
            }
        }
        for (start, end, steps) in [
            (0.0, 1.0, 5),
            (-3.0, 7.0, 11),
            (2.0, -2.0, 4),
            (1.5, 1.5, 1),
            (0.0, 9.0, 0),
        ] {
            let x = Tensor::linspace(start, end, steps, DType::F32, dev).unwrap();
            let got = f64s(&x);
            assert_eq!(got.len(), steps);
            let step = if steps > 1 {
                (end - start) / (steps - 1) as f64
            } else {
                0.0
            };
            for (i, g) in got.iter().enumerate() {
                let w = start + step * i as f64;
                assert!(
                    (g - w).abs() <= 4.0 * f32::EPSILON as f64 * w.abs().max(1.0),
                    "{g} vs {w}"
                );
            }
            if steps > 1 {
                assert_eq!((got[0], got[steps - 1]), (start, end), "the ends are exact");
            }
        }
        let ints = Tensor::linspace(0.0, 10.0, 4, DType::I64, dev).unwrap();
        assert_eq!(ints.to_vec::<i64>().unwrap(), [0, 3, 6, 10]);
        let l = Tensor::logspace(-1.0, 2.0, 4, 10.0, DType::F64, dev).unwrap();
        let got = l.to_vec::<f64>().unwrap();
        for (g, w) in got.iter().zip([0.1, 1.0, 10.0, 100.0]) {
            assert!((g - w).abs() <= 1e-12 * w, "{g} vs {w}");
        }
        assert!(Tensor::linspace(0.0, f64::INFINITY, 3, DType::F32, dev).is_err());
        assert!(Tensor::linspace(0.0, 1.0, 3, DType::Bool, dev).is_err());
        assert!(Tensor::linspace(0.0, 1e10, 3, DType::I32, dev).is_err());
        assert!(Tensor::logspace(0.0, 1.0, 3, f64::NAN, DType::F32, dev).is_err());
    }
}

#[test]
fn sin_and_cos_of_known_angles() {
    let _release = Release;
    for dev in devices() {
        for dtype in FLOATS {
            let angles = [0.0, std::f64::consts::FRAC_PI_6, 1.0, -2.5, 10.0];
            let (t, held) = tensor(&angles, &[5], dtype, dev);
            for (got, f) in [
                (t.sin().unwrap(), f64::sin as fn(f64) -> f64),
                (t.cos().unwrap(), f64::cos),
            ] {
                for (g, x) in f64s(&got).iter().zip(&held) {
                    let w = f(*x);
                    assert!(
                        (g - w).abs() <= 2.0 * eps(dtype) * w.abs().max(f32::EPSILON as f64),
                        "{dtype} {x}: {g} vs {w}"
                    );
                }
            }
        }
        // Integers give float32, as in PyTorch.
        let i = Tensor::from_slice(&[1i32], [1], dev).unwrap();
        let (s, c) = (i.sin().unwrap(), i.cos().unwrap());
        assert_eq!((s.dtype(), c.dtype()), (DType::F32, DType::F32));
        assert!((f64::from(s.to_vec::<f32>().unwrap()[0]) - 1f64.sin()).abs() < 1e-6);
        assert!((f64::from(c.to_vec::<f32>().unwrap()[0]) - 1f64.cos()).abs() < 1e-6);
    }
}

#[test]
fn cumsum_matches_the_f64_reference() {
    let _release = Release;
    let mut rng = Lcg(5);
    for dev in devices() {
        for dtype in DTYPES {
            for shape in SHAPES {
                let n: usize = shape.iter().product();
                let vals: Vec<f64> = (0..n)
                    .map(|_| {
                        let v = (rng.next() - 0.5) * 20.0;
                        if dtype.is_float() { v } else { v.trunc() }
                    })
                    .collect();
                let (t, held) = tensor(&vals, shape, dtype, dev);
                let out_dtype = if dtype.is_float() { dtype } else { DType::I64 };
                for (view, x) in views(&t, &held) {
                    let rank = view.dim();
                    let dims: Vec<isize> = if rank == 0 {
                        vec![0, -1]
                    } else {
                        (-(rank as isize)..rank as isize).collect()
                    };
                    for dim in dims {
                        let got = view.cumsum(dim).unwrap();
                        assert_eq!(got.shape(), view.shape());
                        assert_eq!(got.dtype(), out_dtype);
                        let shp = view.shape().to_vec();
                        let d = if rank == 0 {
                            0
                        } else {
                            dim.rem_euclid(rank as isize) as usize
                        };
                        let (outer, r, inner) = if rank == 0 {
                            (1, 1, 1)
                        } else {
                            (
                                shp[..d].iter().product::<usize>(),
                                shp[d],
                                shp[d + 1..].iter().product::<usize>(),
                            )
                        };
                        let got = f64s(&got);
                        for o in 0..outer {
                            for c in 0..inner {
                                let (mut sum, mut abs) = (0.0, 0.0);
                                for k in 0..r {
                                    let at = (o * r + k) * inner + c;
                                    sum += x[at];
                                    abs += x[at].abs();
                                    // f32 running sums, then the output's rounding.
                                    let tol = (k + 1) as f64 * f32::EPSILON as f64 * abs
                                        + eps(dtype) * sum.abs();
                                    assert!(
                                        (got[at] - sum).abs() <= tol,
                                        "{dev:?} {dtype} {shape:?} dim {dim}: [{o}, {k}, {c}] {} vs {sum}",
                                        got[at]
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
        let t = Tensor::from_slice(&[1.0f32, 2.0], [2], dev).unwrap();
        assert!(t.cumsum(1).is_err() && t.cumsum(-2).is_err());
        let b = Tensor::from_bools(&[true], [1], dev).unwrap();
        assert!(b.cumsum(1).is_err());
    }
}

/// `cumprod` on every device against a reference computed here: integers (and the narrow
/// ones and bools, as int64) exactly, wrapping; floats near 1 in magnitude within the rounding
/// of f32 running products (f64: f64's) and the output's; every dimension, negative ones, 0-d,
/// empty, strided (transposed) views and long rows.
#[test]
fn cumprod_matches_the_reference() {
    let _release = Release;
    let mut rng = Lcg(21);
    let mut shapes: Vec<&[usize]> = SHAPES.to_vec();
    shapes.extend([&[3usize, 700][..], &[2, 2, 513][..]]);
    let narrow = [DType::U8, DType::I8, DType::I16, DType::Bool];
    for dev in devices() {
        for dtype in DTYPES.into_iter().chain(narrow) {
            for &shape in &shapes {
                let n: usize = shape.iter().product();
                let vals: Vec<f64> = (0..n)
                    .map(|_| {
                        let u = rng.next();
                        match dtype {
                            DType::Bool => (u * 1.1).trunc().min(1.0),
                            DType::U8 => (u * 4.0).trunc(),
                            d if d.is_float() => {
                                (0.8 + 0.4 * rng.next()) * if u < 0.5 { -1.0 } else { 1.0 }
                            }
                            _ => (u * 7.0).trunc() - 3.0,
                        }
                    })
                    .collect();
                let (t, held) = tensor(&vals, shape, dtype, dev);
                let out_dtype = if dtype.is_float() { dtype } else { DType::I64 };
                for (view, x) in views(&t, &held) {
                    let rank = view.dim();
                    let dims: Vec<isize> = if rank == 0 {
                        vec![0, -1]
                    } else {
                        (-(rank as isize)..rank as isize).collect()
                    };
                    for dim in dims {
                        let got = view.cumprod(dim).unwrap();
                        assert_eq!(got.shape(), view.shape());
                        assert_eq!(got.dtype(), out_dtype);
                        let shp = view.shape().to_vec();
                        let d = if rank == 0 {
                            0
                        } else {
                            dim.rem_euclid(rank as isize) as usize
                        };
                        let (outer, r, inner) = if rank == 0 {
                            (1, 1, 1)
                        } else {
                            (
                                shp[..d].iter().product::<usize>(),
                                shp[d],
                                shp[d + 1..].iter().product::<usize>(),
                            )
                        };
                        let ints = if dtype.is_float() {
                            Vec::new()
                        } else {
                            got.to_vec::<i64>().unwrap()
                        };
                        let floats = f64s(&got);
                        for o in 0..outer {
                            for c in 0..inner {
                                let (mut fp, mut ip) = (1.0f64, 1i64);
                                for k in 0..r {
                                    let at = (o * r + k) * inner + c;
                                    if dtype.is_float() {
                                        fp *= x[at];
                                        let acc = if dtype == DType::F64 {
                                            f64::EPSILON
                                        } else {
                                            f64::from(f32::EPSILON)
                                        };
                                        let tol =
                                            (2.0 * (k + 1) as f64 * acc + eps(dtype)) * fp.abs();
                                        assert!(
                                            (floats[at] - fp).abs() <= tol,
                                            "{dev:?} {dtype} {shape:?} dim {dim}: [{o}, {k}, {c}] {} vs {fp}",
                                            floats[at]
                                        );
                                    } else {
                                        ip = ip.wrapping_mul(x[at] as i64);
                                        assert_eq!(
                                            ints[at], ip,
                                            "{dev:?} {dtype} {shape:?} dim {dim}: [{o}, {k}, {c}]"
                                        );
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        let t = Tensor::from_slice(&[1.0f32, 2.0], [2], dev).unwrap();
        assert!(t.cumprod(1).is_err() && t.cumprod(-2).is_err());
        // 2^70 wraps to 0 in int64 and stays there.
        let twos = Tensor::full([72], 2i64, dev).unwrap();
        let p = twos.cumprod(0).unwrap().to_vec::<i64>().unwrap();
        assert_eq!((p[61], p[62], p[63], p[71]), (1 << 62, i64::MIN, 0, 0));
    }
}

/// Row-major coordinates of position `i` of `shape`.
fn coords(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut c = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        c[d] = i % shape[d];
        i /= shape[d];
    }
    c
}

fn flat(c: &[usize], shape: &[usize]) -> usize {
    c.iter().zip(shape).fold(0, |acc, (&x, &s)| acc * s + x)
}

const ALONG_SHAPES: &[&[usize]] = &[&[], &[5], &[4, 6], &[3, 4, 5], &[2, 0, 3]];

#[test]
fn gather_index_select_scatter_and_scatter_add_match_the_reference() {
    let _release = Release;
    let mut rng = Lcg(6);
    for dev in devices() {
        for dtype in DTYPES {
            for shape in ALONG_SHAPES {
                let rank = shape.len();
                let n: usize = shape.iter().product();
                // Whole numbers: exact sums in every dtype, whatever the order.
                let vals: Vec<f64> = (0..n).map(|_| (rng.next() * 16.0).trunc() - 8.0).collect();
                let (t, held) = tensor(&vals, shape, dtype, dev);
                let mut cases = vec![(t.clone(), held.clone(), shape.to_vec())];
                if rank >= 2 {
                    let tt = t.transpose(0, -1).unwrap();
                    let v = f64s(&tt);
                    cases.push((tt.clone(), v, tt.shape().to_vec()));
                }
                for (x, xv, xs) in cases {
                    let dims: Vec<isize> = if rank == 0 {
                        vec![0, -1]
                    } else {
                        (-(rank as isize)..rank as isize).collect()
                    };
                    for dim in dims {
                        let d = if rank == 0 {
                            0
                        } else {
                            dim.rem_euclid(rank as isize) as usize
                        };
                        let size = xs.get(d).copied().unwrap_or(1);
                        // An index no larger than x: one fewer along the other dims when it can.
                        let ishape: Vec<usize> = (0..rank)
                            .map(|k| {
                                if k == d {
                                    size + 2
                                } else {
                                    xs[k].saturating_sub(1).max(usize::from(xs[k] > 0))
                                }
                            })
                            .collect();
                        let ni: usize = ishape.iter().product();
                        let ivals: Vec<i64> = (0..ni)
                            .map(|_| {
                                if size == 0 {
                                    0
                                } else {
                                    (rng.next() * size as f64) as i64
                                }
                            })
                            .collect();
                        if size == 0 && ni > 0 {
                            continue;
                        }
                        let index = Tensor::from_slice(&ivals, &ishape[..], dev).unwrap();
                        // gather
                        let got = x.gather(dim, &index).unwrap();
                        assert_eq!(got.shape(), &ishape[..]);
                        let want: Vec<f64> = (0..ni)
                            .map(|i| {
                                let mut c = coords(i, &ishape);
                                if rank > 0 {
                                    c[d] = ivals[i] as usize;
                                }
                                xv[flat(&c, &xs)]
                            })
                            .collect();
                        assert_eq!(f64s(&got), want, "gather {dev:?} {dtype} {xs:?} dim {dim}");
                        // index_select with a 1-D index along d
                        if rank > 0 {
                            let sel: Vec<i64> = ivals.iter().take(size + 1).copied().collect();
                            let si = Tensor::from_slice(&sel, [sel.len()], dev).unwrap();
                            let got = x.index_select(dim, &si).unwrap();
                            let mut oshape = xs.clone();
                            oshape[d] = sel.len();
                            assert_eq!(got.shape(), &oshape[..]);
                            let no: usize = oshape.iter().product();
                            let want: Vec<f64> = (0..no)
                                .map(|i| {
                                    let mut c = coords(i, &oshape);
                                    c[d] = sel[c[d]] as usize;
                                    xv[flat(&c, &xs)]
                                })
                                .collect();
                            assert_eq!(
                                f64s(&got),
                                want,
                                "index_select {dev:?} {dtype} {xs:?} dim {dim}"
                            );
                            let si32 = si.to_dtype(DType::I32).unwrap();
                            assert_eq!(f64s(&x.index_select(dim, &si32).unwrap()), want);
                        }
                        // scatter_add of an index into a target of x's shape (repeats summed)
                        let src_vals: Vec<f64> =
                            (0..ni).map(|_| (rng.next() * 8.0).trunc()).collect();
                        let (src, src_held) = tensor(&src_vals, &ishape, dtype, dev);
                        let mut want = xv.clone();
                        for i in 0..ni {
                            let mut c = coords(i, &ishape);
                            if rank > 0 {
                                c[d] = ivals[i] as usize;
                            }
                            want[flat(&c, &xs)] += src_held[i];
                        }
                        let got = x.scatter_add(dim, &index, &src).unwrap();
                        assert_eq!(got.shape(), &xs[..]);
                        let got = f64s(&got);
                        // Small whole numbers: every partial sum is exact in every dtype.
                        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                            assert_eq!(g, w, "scatter_add {dev:?} {dtype} {xs:?} dim {dim} at {k}");
                        }
                        assert_eq!(f64s(&x), xv, "the target is unchanged");
                        // scatter with distinct targets: each line's index a permutation prefix
                        if rank > 0 && size > 0 {
                            let pshape: Vec<usize> = (0..rank)
                                .map(|k| if k == d { size } else { ishape[k] })
                                .collect();
                            let np: usize = pshape.iter().product();
                            let perm: Vec<i64> = (0..np)
                                .map(|i| {
                                    // A rotation of the line by the other coordinates:
                                    // distinct targets along `d` for every line.
                                    let c = coords(i, &pshape);
                                    let others: usize =
                                        (0..rank).filter(|&k| k != d).map(|k| c[k]).sum();
                                    ((c[d] + others) % size) as i64
                                })
                                .collect();
                            let pidx = Tensor::from_slice(&perm, &pshape[..], dev).unwrap();
                            let pv: Vec<f64> = (0..np).map(|i| i as f64 % 50.0).collect();
                            let (psrc, pheld) = tensor(&pv, &pshape, dtype, dev);
                            let mut want = xv.clone();
                            for i in 0..np {
                                let mut c = coords(i, &pshape);
                                c[d] = perm[i] as usize;
                                want[flat(&c, &xs)] = pheld[i];
                            }
                            let got = x.scatter(dim, &pidx, &psrc).unwrap();
                            assert_eq!(
                                f64s(&got),
                                want,
                                "scatter {dev:?} {dtype} {xs:?} dim {dim}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn index_ops_reject_bad_indices_and_shapes() {
    let _release = Release;
    for dev in devices() {
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3], dev).unwrap();
        let i = |v: &[i64], s: &[usize]| Tensor::from_slice(v, s, dev).unwrap();
        // Out of range (negative too), on the host and on the device.
        for bad in [3i64, -1, i64::MAX, i64::MIN] {
            let e = x.gather(1, &i(&[0, bad], &[1, 2])).unwrap_err();
            assert!(e.to_string().contains("out of bounds"), "{dev:?}: {e}");
            assert!(x.index_select(1, &i(&[bad], &[1])).is_err());
            assert!(x.index_select(0, &i(&[0, bad], &[2])).is_err());
            assert!(x.index_select(-2, &i(&[bad], &[1])).is_err());
            let src = Tensor::ones([1, 2], DType::F32, dev).unwrap();
            assert!(x.scatter(1, &i(&[bad, 0], &[1, 2]), &src).is_err());
            assert!(x.scatter_add(1, &i(&[0, bad], &[1, 2]), &src).is_err());
            assert_eq!(x.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        }
        // Wrong dtypes, ranks, shapes and dims.
        let f = Tensor::from_slice(&[0.0f32], [1, 1], dev).unwrap();
        assert!(x.gather(1, &f).is_err());
        assert!(x.gather(1, &i(&[0], &[1])).is_err());
        assert!(x.gather(1, &i(&[0; 3], &[3, 1])).is_err());
        assert!(x.gather(2, &i(&[0], &[1, 1])).is_err());
        assert!(x.index_select(0, &i(&[0; 4], &[2, 2])).is_err());
        assert!(x.index_select(0, &f).is_err());
        let src = Tensor::ones([1, 1], DType::F64, dev).unwrap();
        assert!(x.scatter(1, &i(&[0], &[1, 1]), &src).is_err());
        let small = Tensor::ones([1, 1], DType::F32, dev).unwrap();
        assert!(x.scatter(1, &i(&[0, 1], &[1, 2]), &small).is_err());
        let b = Tensor::from_bools(&[true, false], [2], dev).unwrap();
        let one = Tensor::from_bools(&[true], [1], dev).unwrap();
        // Bool sums are "or", as PyTorch's.
        assert_eq!(
            b.scatter_add(0, &i(&[1], &[1]), &one)
                .unwrap()
                .to_bool_vec()
                .unwrap(),
            [true, true]
        );
        assert_eq!(
            b.scatter(0, &i(&[1], &[1]), &one)
                .unwrap()
                .to_bool_vec()
                .unwrap(),
            [true, true]
        );
    }
}

/// The stable order of `g` (ascending or descending), NaN after every number, -0.0 == +0.0.
fn sorted_positions(g: &[f64], descending: bool) -> Vec<usize> {
    let key = |v: f64| if v.is_nan() { (1, 0.0) } else { (0, v) };
    let mut p: Vec<usize> = (0..g.len()).collect();
    p.sort_by(|&a, &b| {
        let (x, y) = if descending {
            (key(g[b]), key(g[a]))
        } else {
            (key(g[a]), key(g[b]))
        };
        x.partial_cmp(&y).unwrap()
    });
    p
}

#[test]
fn sort_argsort_and_topk_match_the_reference() {
    let _release = Release;
    let mut rng = Lcg(7);
    let shapes: &[&[usize]] = &[
        &[],
        &[0],
        &[1],
        &[9],
        &[4, 7],
        &[3, 0],
        &[2, 3, 5],
        &[2, 3000],
        &[3, 2049],
        // Three merge passes on the GPU (runs of 2048 merged up to 16384).
        &[2, 9000],
    ];
    for dev in devices() {
        for dtype in DTYPES {
            for shape in shapes {
                let n: usize = shape.iter().product();
                // Few distinct values (ties), NaNs and signed zeros for floats.
                let vals: Vec<f64> = (0..n)
                    .map(|_| {
                        let r = rng.next();
                        if dtype.is_float() && r < 0.05 {
                            f64::NAN
                        } else if dtype.is_float() && r < 0.1 {
                            -0.0
                        } else {
                            ((r * 12.0).trunc() - 6.0) * if dtype.is_float() { 0.5 } else { 1.0 }
                        }
                    })
                    .collect();
                let (t, _) = tensor(&vals, shape, dtype, dev);
                for (x, xv) in views(&t, &vals) {
                    let xs = x.shape().to_vec();
                    let rank = xs.len();
                    let dims: Vec<isize> = if rank == 0 {
                        vec![0]
                    } else {
                        (-(rank as isize)..rank as isize).collect()
                    };
                    for dim in dims {
                        for descending in [false, true] {
                            let (v, i) = x.sort(dim, descending).unwrap();
                            assert_eq!(v.shape(), &xs[..]);
                            assert_eq!(i.dtype(), DType::I64);
                            let (gv, gi) = (f64s(&v), i.to_vec::<i64>().unwrap());
                            let d = if rank == 0 {
                                0
                            } else {
                                dim.rem_euclid(rank as isize) as usize
                            };
                            let size = xs.get(d).copied().unwrap_or(1);
                            let stride: usize = xs.get(d + 1..).map_or(1, |s| s.iter().product());
                            // Each line along d: its values and positions.
                            for line in 0..n / size.max(1) {
                                let (o, c) = (line / stride, line % stride);
                                let at = |k: usize| (o * size + k) * stride + c;
                                let g: Vec<f64> = (0..size).map(|k| xv[at(k)]).collect();
                                let want = sorted_positions(&g, descending);
                                for (k, &p) in want.iter().enumerate() {
                                    assert_eq!(
                                        gi[at(k)],
                                        p as i64,
                                        "{dev:?} {dtype} {xs:?} dim {dim} desc {descending}"
                                    );
                                    let (a, b) = (gv[at(k)], g[p]);
                                    assert!(
                                        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
                                    );
                                }
                            }
                            assert_eq!(
                                x.argsort(dim, descending).unwrap().to_vec::<i64>().unwrap(),
                                gi
                            );
                            if rank > 0 {
                                let k = size.min(3);
                                let (tv, ti) = x.topk(k, dim, descending, true).unwrap();
                                let want_v = v.narrow(d as isize, 0, k).unwrap();
                                let want_i = i.narrow(d as isize, 0, k).unwrap();
                                assert_eq!(
                                    ti.to_vec::<i64>().unwrap(),
                                    want_i.to_vec::<i64>().unwrap()
                                );
                                assert_eq!(tv.shape(), want_v.shape());
                                assert!(x.topk(size + 1, dim, true, true).is_err());
                            }
                        }
                    }
                }
            }
        }
        let b = Tensor::from_bools(&[true, false], [2], dev).unwrap();
        assert!(b.sort(1, false).is_err());
        let f = Tensor::from_slice(&[1.0f32, 2.0], [2], dev).unwrap();
        assert!(f.sort(1, false).is_err() && f.topk(1, -2, true, true).is_err());
    }
}

/// The wrapping of an integer `v` into `dtype`'s range (two's complement), as a cast does.
fn wrap_int(v: i64, dtype: DType) -> i64 {
    match dtype {
        DType::U8 => v.rem_euclid(256),
        DType::I8 => (v + 128).rem_euclid(256) - 128,
        DType::I16 => (v + 32768).rem_euclid(65536) - 32768,
        DType::Bool => i64::from(v != 0),
        _ => v,
    }
}

#[test]
fn narrow_integers_and_bools_cumsum_sort_clamp_and_scatter_add() {
    // uint8, int8, int16 (and bool for cumsum and sort) have no kernels of their own for these
    // ops; they compute exactly in a wider integer dtype, with PyTorch's result dtypes.
    let _release = Release;
    let mut rng = Lcg(11);
    for dev in devices() {
        for dtype in [DType::U8, DType::I8, DType::I16, DType::Bool] {
            let (lo, hi) = match dtype {
                DType::U8 => (0.0, 255.0),
                DType::I8 => (-128.0, 127.0),
                DType::I16 => (-32768.0, 32767.0),
                _ => (0.0, 1.0),
            };
            // The extremes often (ties, wrapping sums), otherwise anything in range.
            let draw = |rng: &mut Lcg| {
                let r = rng.next();
                if r < 0.2 {
                    lo
                } else if r < 0.4 {
                    hi
                } else {
                    (lo + (rng.next() * (hi - lo + 1.0)).floor()).min(hi)
                }
            };
            let shape = [3usize, 37];
            let vals: Vec<f64> = (0..111).map(|_| draw(&mut rng)).collect();
            let (t, held) = tensor(&vals, &shape, dtype, dev);
            for (x, xv) in views(&t, &held) {
                let xs = x.shape().to_vec();
                for dim in [0isize, 1, -1] {
                    let d = dim.rem_euclid(2) as usize;
                    let stride = if d == 0 { xs[1] } else { 1 };
                    let size = xs[d];
                    let lines = 111 / size;
                    let at = |line: usize, k: usize| {
                        let (o, c) = (line / stride, line % stride);
                        (o * size + k) * stride + c
                    };
                    // cumsum: int64 running sums.
                    let got = x.cumsum(dim).unwrap();
                    assert_eq!(got.dtype(), DType::I64, "{dev:?} {dtype} cumsum");
                    let got = got.to_vec::<i64>().unwrap();
                    for line in 0..lines {
                        let mut sum = 0i64;
                        for k in 0..size {
                            sum += xv[at(line, k)] as i64;
                            assert_eq!(
                                got[at(line, k)],
                                sum,
                                "{dev:?} {dtype} {xs:?} cumsum {dim}"
                            );
                        }
                    }
                    // sort: stable positions and the values in the dtype.
                    for descending in [false, true] {
                        let (v, i) = x.sort(dim, descending).unwrap();
                        assert_eq!(v.dtype(), dtype);
                        let (gv, gi) = (f64s(&v), i.to_vec::<i64>().unwrap());
                        for line in 0..lines {
                            let g: Vec<f64> = (0..size).map(|k| xv[at(line, k)]).collect();
                            for (k, &p) in sorted_positions(&g, descending).iter().enumerate() {
                                assert_eq!(
                                    gi[at(line, k)],
                                    p as i64,
                                    "{dev:?} {dtype} {xs:?} sort {dim} {descending}"
                                );
                                assert_eq!(gv[at(line, k)], g[p]);
                            }
                        }
                        let (tv, ti) = x.topk(2, dim, descending, true).unwrap();
                        assert_eq!(tv.dtype(), dtype);
                        assert_eq!(
                            ti.to_vec::<i64>().unwrap(),
                            i.narrow(d as isize, 0, 2).unwrap().to_vec::<i64>().unwrap()
                        );
                    }
                }
                if dtype == DType::Bool {
                    continue;
                }
                // clamp: exact, bounds in the dtype's range; beyond it an error.
                let (mn, mx) = ((lo + hi) / 2.0 - 7.0, (lo + hi) / 2.0 + 30.0);
                let (mn, mx) = (mn.floor(), mx.floor());
                let got = x.clamp(Some(mn as i64), Some(mx as i64)).unwrap();
                assert_eq!(got.dtype(), dtype);
                let want: Vec<f64> = xv.iter().map(|v| v.max(mn).min(mx)).collect();
                assert_eq!(f64s(&got), want, "{dev:?} {dtype} clamp");
                assert_eq!(f64s(&x.clamp_max(lo as i64).unwrap()), vec![lo; 111]);
                assert!(matches!(
                    x.clamp(None, Some(hi as i64 + 1)),
                    Err(Error::ScalarOutOfRange { .. })
                ));
            }
            if dtype == DType::Bool {
                continue;
            }
            // scatter_add along each dim: sums that wrap in the dtype.
            for dim in [0usize, 1] {
                let ishape = if dim == 0 { [9usize, 37] } else { [3, 90] };
                let ni = ishape[0] * ishape[1];
                let idx: Vec<i64> = (0..ni)
                    .map(|_| (rng.next() * shape[dim] as f64) as i64)
                    .collect();
                let src_vals: Vec<f64> = (0..ni).map(|_| draw(&mut rng)).collect();
                let (src, sv) = tensor(&src_vals, &ishape, dtype, dev);
                let index = Tensor::from_slice(&idx, ishape, dev).unwrap();
                let got = t.scatter_add(dim as isize, &index, &src).unwrap();
                assert_eq!(got.dtype(), dtype);
                let mut want: Vec<i64> = held.iter().map(|&v| v as i64).collect();
                for p in 0..ni {
                    let (i, j) = (p / ishape[1], p % ishape[1]);
                    let target = if dim == 0 {
                        idx[p] as usize * shape[1] + j
                    } else {
                        i * shape[1] + idx[p] as usize
                    };
                    want[target] += sv[p] as i64;
                }
                let want: Vec<f64> = want.iter().map(|&v| wrap_int(v, dtype) as f64).collect();
                assert_eq!(f64s(&got), want, "{dev:?} {dtype} scatter_add dim {dim}");
            }
        }
        let b = Tensor::from_bools(&[true, false, true], [3], dev).unwrap();
        assert_eq!(b.cumsum(0).unwrap().to_vec::<i64>().unwrap(), [1, 1, 2]);
        let (v, i) = b.sort(0, false).unwrap();
        assert_eq!(v.to_bool_vec().unwrap(), [false, true, true]);
        assert_eq!(i.to_vec::<i64>().unwrap(), [1, 0, 2]);
    }
}

/// `index_select` against a reference, on every device: every dtype (each element width),
/// dims 0, 1 and the last, int64 and int32 index tensors (strided ones too), rows that take the
/// one-pass row kernel (whole 16-byte rows) and rows that do not, empty and 0-d indices; a
/// negative or too large value is an error that names it (PyTorch's rule: `index_select` does
/// not count negative positions from the end), and returns no result.
#[test]
fn index_select_rejects_negative_positions_and_matches_the_reference() {
    let _release = Release;
    let mut rng = Lcg(20);
    let shapes: &[&[usize]] = &[&[7, 8], &[9, 3], &[5, 4, 4], &[6, 16], &[3, 2, 8, 2], &[11]];
    for dev in devices() {
        for dtype in DType::ALL {
            for &shape in shapes {
                let n: usize = shape.iter().product();
                let vals: Vec<f64> = (0..n)
                    .map(|_| {
                        if dtype == DType::Bool {
                            (rng.next() * 2.0).trunc()
                        } else {
                            (rng.next() * 100.0).trunc()
                        }
                    })
                    .collect();
                let (x, xv) = tensor(&vals, shape, dtype, dev);
                let rank = shape.len();
                for dim in [0, 1, rank - 1] {
                    if dim >= rank {
                        continue;
                    }
                    let size = shape[dim];
                    for (len, i32, stride) in
                        [(0, false, 1), (1, true, 1), (5, false, 2), (13, true, 3)]
                    {
                        let sel: Vec<i64> = (0..len)
                            .map(|_| (rng.next() * size as f64) as i64)
                            .collect();
                        // Every `stride`-th element of a longer index tensor.
                        let mut spread = vec![0i64; len * stride];
                        for (k, &v) in sel.iter().enumerate() {
                            spread[k * stride] = v;
                        }
                        let full = Tensor::from_slice(&spread, [spread.len()], dev).unwrap();
                        let full = if i32 {
                            full.to_dtype(DType::I32).unwrap()
                        } else {
                            full
                        };
                        let idx = full.i(&genesis::s![..;stride as i64]).unwrap();
                        let got = x.index_select(dim as isize, &idx).unwrap();
                        let mut oshape = shape.to_vec();
                        oshape[dim] = len;
                        assert_eq!(got.shape(), &oshape[..]);
                        assert_eq!(got.dtype(), dtype);
                        let want: Vec<f64> = (0..oshape.iter().product::<usize>())
                            .map(|i| {
                                let mut c = coords(i, &oshape);
                                c[dim] = sel[c[dim]] as usize;
                                xv[flat(&c, shape)]
                            })
                            .collect();
                        assert_eq!(
                            f64s(&got),
                            want,
                            "{dev:?} {dtype} {shape:?} dim {dim} {sel:?}"
                        );
                        // The same with one bad value: negative, or the size.
                        if len > 0 {
                            for bad in [-1i64, -(size as i64), size as i64, i64::from(i32::MIN)] {
                                let mut b = sel.clone();
                                b[len / 2] = bad;
                                let bi = Tensor::from_slice(&b, [len], dev).unwrap();
                                let bi = if i32 {
                                    bi.to_dtype(DType::I32).unwrap()
                                } else {
                                    bi
                                };
                                let e = x.index_select(dim as isize, &bi).unwrap_err();
                                assert!(
                                    e.to_string().contains(&format!("index {bad} ")),
                                    "{dev:?} {dtype} {shape:?} dim {dim}: {e}"
                                );
                            }
                        }
                    }
                }
                // A 0-d index selects one slice, keeping the dimension.
                let zero_d = Tensor::from_slice(&[1i64], (), dev).unwrap();
                let got = x.index_select(0, &zero_d).unwrap();
                assert_eq!(got.shape()[0], 1);
                assert_eq!(f64s(&got), f64s(&x.narrow(0, 1, 1).unwrap()));
            }
        }
    }
}

#[test]
fn isclose_and_allclose_match_their_definition_on_generated_pairs() {
    let _release = Release;
    let mut s = SmallRng::seed_from_u64(5);
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0];
    for trial in 0..40 {
        let n = 1 + s.random_range(0..60) as usize;
        let a: Vec<f32> = (0..n)
            .map(|_| match s.random_range(0..8) {
                0 => specials[s.random_range(0..5) as usize],
                _ => s.random_range(-100.0..100.0) as f32,
            })
            .collect();
        // Partners: the same value, a nearby one, a far one, or a special.
        let b: Vec<f32> = a
            .iter()
            .map(|&v| match s.random_range(0..5) {
                0 => v,
                1 => v * (1.0 + s.random_range(-1e-5..1e-5) as f32),
                2 => v + s.random_range(-1e-3..1e-3) as f32,
                3 => specials[s.random_range(0..5) as usize],
                _ => s.random_range(-100.0..100.0) as f32,
            })
            .collect();
        let (rtol, atol) = (
            s.random_range(0.0..1e-4),
            [0.0, 1e-8, 1e-3][s.random_range(0..3) as usize],
        );
        let equal_nan = trial % 2 == 0;
        let want: Vec<bool> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| {
                let allowed = (y * rtol as f32).abs() + atol as f32;
                let actual = (x - y).abs();
                x == y
                    || (equal_nan && x.is_nan() && y.is_nan())
                    || (rtol + atol > 0.0 && actual.is_finite() && actual <= allowed)
            })
            .collect();
        for dev in devices() {
            let ta = Tensor::from_slice(&a, [n], dev).unwrap();
            let tb = Tensor::from_slice(&b, [n], dev).unwrap();
            let got = ta.isclose(&tb, rtol, atol, equal_nan).unwrap();
            assert_eq!(got.to_bool_vec().unwrap(), want, "trial {trial} on {dev}");
            let all = ta.allclose(&tb, rtol, atol, equal_nan).unwrap();
            assert_eq!(
                all,
                want.iter().all(|&c| c),
                "allclose, trial {trial} on {dev}"
            );
        }
    }
    // Integers: the allowed error in float32, as PyTorch's.
    let a = Tensor::from_slice(&[100i64, 100, 7, -5], [4], Device::Cpu).unwrap();
    let b = Tensor::from_slice(&[101i64, 110, 7, 5], [4], Device::Cpu).unwrap();
    let got = a
        .isclose(&b, 0.01, 0.0, false)
        .unwrap()
        .to_bool_vec()
        .unwrap();
    assert_eq!(got, [true, false, true, false]);
    // PyTorch's errors: two dtypes, a negative tolerance.
    let f = Tensor::from_slice(&[1.0f64], [1], Device::Cpu).unwrap();
    assert!(matches!(
        a.isclose(&f, 1e-5, 1e-8, false),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        f.isclose(&f, -1.0, 0.0, false),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn lerp_outer_and_diff_match_direct_computations() {
    let _release = Release;
    let mut s = SmallRng::seed_from_u64(9);
    for trial in 0..30 {
        let n = 1 + s.random_range(0..40) as usize;
        let a: Vec<f32> = (0..n).map(|_| s.random_range(-10.0..10.0) as f32).collect();
        let e: Vec<f32> = (0..n).map(|_| s.random_range(-10.0..10.0) as f32).collect();
        let w: Vec<f32> = (0..n).map(|_| s.random_range(-1.0..2.0) as f32).collect();
        let lerp = |x: f32, y: f32, t: f32| {
            if t.abs() < 0.5 {
                x + t * (y - x)
            } else {
                y - (y - x) * (1.0 - t)
            }
        };
        let ws = w[0];
        for dev in devices() {
            let (ta, te, tw) = (
                Tensor::from_slice(&a, [n], dev).unwrap(),
                Tensor::from_slice(&e, [n], dev).unwrap(),
                Tensor::from_slice(&w, [n], dev).unwrap(),
            );
            let got = ta
                .lerp(&te, f64::from(ws))
                .unwrap()
                .to_vec::<f32>()
                .unwrap();
            let want: Vec<f32> = a.iter().zip(&e).map(|(&x, &y)| lerp(x, y, ws)).collect();
            assert_eq!(got, want, "lerp, trial {trial} on {dev}");
            let got = ta.lerp_tensor(&te, &tw).unwrap().to_vec::<f32>().unwrap();
            let want: Vec<f32> = (0..n).map(|i| lerp(a[i], e[i], w[i])).collect();
            assert_eq!(got, want, "lerp_tensor, trial {trial} on {dev}");
            // Weight 1 is `end` exactly.
            assert_eq!(ta.lerp(&te, 1.0).unwrap().to_vec::<f32>().unwrap(), e);
        }
        // outer and diff on integers: exact.
        let (r, c) = (
            1 + s.random_range(0..5) as usize,
            1 + s.random_range(0..6) as usize,
        );
        let x: Vec<i64> = (0..r * c)
            .map(|_| s.random_range(0..200) as i64 - 100)
            .collect();
        let v: Vec<i64> = (0..c).map(|_| s.random_range(0..20) as i64 - 10).collect();
        let order = s.random_range(0..4) as usize;
        let dim = s.random_range(0..2) as usize;
        let with_edges = trial % 3 == 0;
        // The reference: the joined rows or columns, differenced `order` times.
        let mut lines: Vec<Vec<i64>> = if dim == 1 {
            (0..r).map(|i| x[i * c..(i + 1) * c].to_vec()).collect()
        } else {
            (0..c)
                .map(|j| (0..r).map(|i| x[i * c + j]).collect())
                .collect()
        };
        // No difference (order 0) is the input itself: the edges are not joined.
        if with_edges && order > 0 {
            for l in &mut lines {
                l.insert(0, 1000);
                l.push(-1000);
            }
        }
        for _ in 0..order {
            for l in &mut lines {
                *l = l.windows(2).map(|p| p[1] - p[0]).collect();
            }
        }
        for dev in devices() {
            let t = Tensor::from_slice(&x, [r, c], dev).unwrap();
            let tv = Tensor::from_slice(&v, [c], dev).unwrap();
            let o = tv.outer(&tv).unwrap().to_vec::<i64>().unwrap();
            let want: Vec<i64> = v
                .iter()
                .flat_map(|&p| v.iter().map(move |&q| p * q))
                .collect();
            assert_eq!(o, want, "outer, trial {trial} on {dev}");
            let edge_shape = if dim == 1 { [r, 1] } else { [1, c] };
            let pre = Tensor::full(edge_shape, 1000i64, dev).unwrap();
            let app = Tensor::full(edge_shape, -1000i64, dev).unwrap();
            let (p, q) = if with_edges {
                (Some(&pre), Some(&app))
            } else {
                (None, None)
            };
            let got = t.diff(order, dim as isize, p, q).unwrap();
            let len = lines[0].len();
            let want: Vec<i64> = if dim == 1 {
                lines.concat()
            } else {
                (0..len)
                    .flat_map(|i| lines.iter().map(move |l| l[i]))
                    .collect()
            };
            assert_eq!(
                got.to_vec::<i64>().unwrap(),
                want,
                "diff, trial {trial} on {dev}"
            );
        }
    }
    let b = Tensor::from_bools(&[true, true, false, true], [4], Device::Cpu).unwrap();
    let d = b.diff(1, 0, None, None).unwrap();
    assert_eq!(
        (d.dtype(), d.to_bool_vec().unwrap()),
        (DType::Bool, vec![false, true, true])
    );
    let m = Tensor::zeros([2, 2], DType::F32, Device::Cpu).unwrap();
    assert!(matches!(m.outer(&m), Err(Error::InvalidArgument { .. })));
    let i = Tensor::zeros([2], DType::I64, Device::Cpu).unwrap();
    assert!(matches!(
        i.lerp(&i, 0.5),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn vector_norm_matches_its_definition_and_has_a_zero_gradient_at_zero() {
    let _release = Release;
    let mut s = SmallRng::seed_from_u64(13);
    for trial in 0..24 {
        let (r, c) = (
            1 + s.random_range(0..6) as usize,
            1 + s.random_range(0..7) as usize,
        );
        let x: Vec<f64> = (0..r * c)
            .map(|_| {
                if s.random_range(0..5) == 0 {
                    0.0
                } else {
                    s.random_range(-5.0..5.0)
                }
            })
            .collect();
        let ord = [2.0, 1.0, f64::INFINITY, f64::NEG_INFINITY, 0.0, 3.0, 0.5][trial % 7];
        let norm = |v: &[f64]| -> f64 {
            let a: Vec<f64> = v.iter().map(|x| x.abs()).collect();
            if ord == f64::INFINITY {
                a.iter().cloned().fold(f64::NEG_INFINITY, f64::max)
            } else if ord == f64::NEG_INFINITY {
                a.iter().cloned().fold(f64::INFINITY, f64::min)
            } else if ord == 0.0 {
                a.iter().filter(|&&x| x != 0.0).count() as f64
            } else {
                a.iter().map(|x| x.powf(ord)).sum::<f64>().powf(1.0 / ord)
            }
        };
        let rows: Vec<f64> = (0..r).map(|i| norm(&x[i * c..(i + 1) * c])).collect();
        for dev in devices() {
            let t = Tensor::from_slice(&x, [r, c], dev).unwrap();
            let all = t.vector_norm(ord, (), false).unwrap();
            assert_eq!(all.shape(), &[] as &[usize]);
            let want = norm(&x);
            let got = all.item::<f64>().unwrap();
            assert!(
                (got - want).abs() <= 1e-12 * want.abs().max(1.0),
                "{ord}: {got} vs {want}"
            );
            let per_row = t.vector_norm(ord, 1, true).unwrap();
            assert_eq!(per_row.shape(), &[r, 1]);
            for (g, w) in per_row.to_vec::<f64>().unwrap().iter().zip(&rows) {
                assert!(
                    (g - w).abs() <= 1e-12 * w.abs().max(1.0),
                    "{ord} row: {g} vs {w}"
                );
            }
        }
    }
    // The gradient of the 2-norm: x / |x|, and 0 (not NaN) at the zero vector.
    for dev in devices() {
        let x = Tensor::from_slice(&[3.0f64, 4.0, 0.0, 0.0], [2, 2], dev)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        x.vector_norm(2.0, 1, false)
            .unwrap()
            .sum()
            .unwrap()
            .backward()
            .unwrap();
        let g = x.grad().unwrap().to_vec::<f64>().unwrap();
        assert!(
            (g[0] - 0.6).abs() < 1e-15 && (g[1] - 0.8).abs() < 1e-15,
            "{g:?} on {dev}"
        );
        assert_eq!(g[2..], [0.0, 0.0], "the zero row's gradient on {dev}");
    }
    let b = Tensor::from_slice(&[1.0f32, -2.0, 2.0], [3], Device::Cpu)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    assert_eq!(b.vector_norm(2.0, (), false).unwrap().dtype(), DType::BF16);
    let i = Tensor::zeros([3], DType::I64, Device::Cpu).unwrap();
    assert!(matches!(
        i.vector_norm(2.0, (), false),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn logical_ops_nan_reductions_median_and_bincount_match_direct_computations() {
    let _release = Release;
    let mut s = SmallRng::seed_from_u64(21);
    for trial in 0..30 {
        let n = 1 + s.random_range(0..50) as usize;
        let pick = |s: &mut SmallRng| match s.random_range(0..6) {
            0 => 0.0f32,
            1 => f32::NAN,
            2 => -0.0,
            _ => s.random_range(-3.0..3.0) as f32,
        };
        let a: Vec<f32> = (0..n).map(|_| pick(&mut s)).collect();
        let b: Vec<f32> = (0..n).map(|_| pick(&mut s)).collect();
        let t = |v: &f32| *v != 0.0;
        let and: Vec<bool> = a.iter().zip(&b).map(|(x, y)| t(x) && t(y)).collect();
        let or: Vec<bool> = a.iter().zip(&b).map(|(x, y)| t(x) || t(y)).collect();
        let xor: Vec<bool> = a.iter().zip(&b).map(|(x, y)| t(x) != t(y)).collect();
        let not: Vec<bool> = a.iter().map(|x| !t(x)).collect();
        let kept: Vec<f64> = a
            .iter()
            .filter(|x| !x.is_nan())
            .map(|&x| f64::from(x))
            .collect();
        let nansum: f64 = kept.iter().sum();
        let median = if a.iter().any(|x| x.is_nan()) {
            f32::NAN
        } else {
            let mut v = a.clone();
            v.sort_by(|x, y| x.partial_cmp(y).unwrap());
            v[(n - 1) / 2]
        };
        let ints: Vec<i64> = (0..n).map(|_| s.random_range(0..12) as i64).collect();
        let minlength = s.random_range(0..20) as usize;
        let bins = (ints.iter().max().unwrap() + 1).max(minlength as i64) as usize;
        let mut counts = vec![0i64; bins];
        for &i in &ints {
            counts[i as usize] += 1;
        }
        for dev in devices() {
            let (ta, tb) = (
                Tensor::from_slice(&a, [n], dev).unwrap(),
                Tensor::from_slice(&b, [n], dev).unwrap(),
            );
            let bools = |r: genesis::Result<Tensor>| r.unwrap().to_bool_vec().unwrap();
            assert_eq!(
                bools(ta.logical_and(&tb)),
                and,
                "and, trial {trial} on {dev}"
            );
            assert_eq!(bools(ta.logical_or(&tb)), or, "or, trial {trial} on {dev}");
            assert_eq!(
                bools(ta.logical_xor(&tb)),
                xor,
                "xor, trial {trial} on {dev}"
            );
            assert_eq!(bools(ta.logical_not()), not, "not, trial {trial} on {dev}");
            let nz = ta.count_nonzero(()).unwrap().item::<i64>().unwrap();
            assert_eq!(nz, a.iter().filter(|x| t(x)).count() as i64);
            let got = f64::from(ta.nansum((), false).unwrap().item::<f32>().unwrap());
            assert!((got - nansum).abs() <= 1e-4, "nansum {got} vs {nansum}");
            let mean = ta.nanmean((), false).unwrap().item::<f32>().unwrap();
            if kept.is_empty() {
                assert!(mean.is_nan());
            } else {
                let want = nansum / kept.len() as f64;
                assert!(
                    (f64::from(mean) - want).abs() <= 1e-4,
                    "nanmean {mean} vs {want}"
                );
            }
            let m = ta.median().unwrap();
            assert_eq!(m.dim(), 0);
            let m = m.item::<f32>().unwrap();
            assert!(
                m == median || (m.is_nan() && median.is_nan()),
                "median {m} vs {median}"
            );
            let ti = Tensor::from_slice(&ints, [n], dev).unwrap();
            let got = ti.bincount(minlength).unwrap().to_vec::<i64>().unwrap();
            assert_eq!(got, counts, "bincount, trial {trial} on {dev}");
        }
    }
    let neg = Tensor::from_slice(&[1i64, -1], [2], Device::Cpu).unwrap();
    assert!(matches!(
        neg.bincount(0),
        Err(Error::InvalidArgument { .. })
    ));
    let f = Tensor::from_slice(&[1.0f32], [1], Device::Cpu).unwrap();
    assert!(matches!(f.bincount(0), Err(Error::InvalidArgument { .. })));
    let empty = Tensor::zeros([0], DType::I64, Device::Cpu).unwrap();
    assert_eq!(
        empty.bincount(3).unwrap().to_vec::<i64>().unwrap(),
        [0, 0, 0]
    );
    assert!(matches!(
        empty.to_dtype(DType::F32).unwrap().median(),
        Err(Error::InvalidArgument { .. })
    ));
    let i = Tensor::from_slice(&[1i64, 2], [2], Device::Cpu).unwrap();
    assert!(matches!(
        i.nanmean((), false),
        Err(Error::InvalidArgument { .. })
    ));
    assert_eq!(i.nansum((), false).unwrap().item::<i64>().unwrap(), 3);
}

#[test]
fn meshgrid_cross_addcmul_and_addcdiv_match_direct_computations() {
    let _release = Release;
    let mut s = SmallRng::seed_from_u64(33);
    for trial in 0..20 {
        let (n, m) = (
            1 + s.random_range(0..5) as usize,
            1 + s.random_range(0..4) as usize,
        );
        let x: Vec<i64> = (0..n).map(|_| s.random_range(0..100) as i64).collect();
        let y: Vec<i64> = (0..m).map(|_| s.random_range(0..100) as i64).collect();
        // Cross products of rows of 3 (a batch broadcast against one vector).
        let rows = 1 + s.random_range(0..4) as usize;
        let a: Vec<i64> = (0..rows * 3)
            .map(|_| s.random_range(0..21) as i64 - 10)
            .collect();
        let b: Vec<i64> = (0..3).map(|_| s.random_range(0..21) as i64 - 10).collect();
        let want_cross: Vec<i64> = a
            .chunks(3)
            .flat_map(|u| {
                [
                    u[1] * b[2] - u[2] * b[1],
                    u[2] * b[0] - u[0] * b[2],
                    u[0] * b[1] - u[1] * b[0],
                ]
            })
            .collect();
        let k = 1 + s.random_range(0..30) as usize;
        let f = |s: &mut SmallRng| -> Vec<f32> {
            (0..k).map(|_| s.random_range(-4.0..4.0) as f32).collect()
        };
        let (p, t1, t2) = (f(&mut s), f(&mut s), f(&mut s));
        let value = s.random_range(-2.0..2.0);
        let v = value as f32;
        let want_mul: Vec<f32> = (0..k).map(|i| p[i] + v * t1[i] * t2[i]).collect();
        let want_div: Vec<f32> = (0..k).map(|i| p[i] + v * t1[i] / t2[i]).collect();
        for dev in devices() {
            let (tx, ty) = (
                Tensor::from_slice(&x, [n], dev).unwrap(),
                Tensor::from_slice(&y, [m], dev).unwrap(),
            );
            let ij = Tensor::meshgrid(&[&tx, &ty], "ij").unwrap();
            let xy = Tensor::meshgrid(&[&tx, &ty], "xy").unwrap();
            assert_eq!((ij[0].shape(), xy[0].shape()), (&[n, m][..], &[m, n][..]));
            let flat = |t: &Tensor| t.contiguous().unwrap().to_vec::<i64>().unwrap();
            let want: Vec<i64> = x.iter().flat_map(|&v| std::iter::repeat_n(v, m)).collect();
            assert_eq!(flat(&ij[0]), want, "meshgrid ij, trial {trial} on {dev}");
            let want: Vec<i64> = (0..n).flat_map(|_| y.iter().copied()).collect();
            assert_eq!(flat(&ij[1]), want);
            let want: Vec<i64> = (0..m).flat_map(|_| x.iter().copied()).collect();
            assert_eq!(flat(&xy[0]), want, "meshgrid xy, trial {trial} on {dev}");
            let ta = Tensor::from_slice(&a, [rows, 3], dev).unwrap();
            let tb = Tensor::from_slice(&b, [1, 3], dev).unwrap();
            let got = ta.cross(&tb, 1).unwrap();
            assert_eq!(got.shape(), &[rows, 3]);
            assert_eq!(
                got.to_vec::<i64>().unwrap(),
                want_cross,
                "cross, trial {trial} on {dev}"
            );
            let t = |v: &[f32]| Tensor::from_slice(v, [k], dev).unwrap();
            let got = t(&p).addcmul(&t(&t1), &t(&t2), value).unwrap();
            assert_eq!(
                got.to_vec::<f32>().unwrap(),
                want_mul,
                "addcmul, trial {trial} on {dev}"
            );
            let got = t(&p).addcdiv(&t(&t1), &t(&t2), value).unwrap();
            assert_eq!(
                got.to_vec::<f32>().unwrap(),
                want_div,
                "addcdiv, trial {trial} on {dev}"
            );
        }
    }
    let cpu = Device::Cpu;
    let m2 = Tensor::zeros([2, 2], DType::I64, cpu).unwrap();
    let v = Tensor::zeros([2], DType::I64, cpu).unwrap();
    let f = Tensor::zeros([2], DType::F32, cpu).unwrap();
    assert!(matches!(
        Tensor::meshgrid(&[&m2], "ij"),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        Tensor::meshgrid(&[&v, &f], "ij"),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        Tensor::meshgrid(&[&v], "ab"),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        m2.cross(&m2, 1),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        v.addcdiv(&v, &v, 1.0),
        Err(Error::InvalidArgument { .. })
    ));
}
