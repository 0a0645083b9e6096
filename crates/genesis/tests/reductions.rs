//! Reductions (sum, mean, max, min, argmax, argmin; all elements or given dims, keepdim)
//! against f64 references computed here, on CPU and (when present) CUDA, for every kernel
//! dtype, with odd, empty, 0-d and non-contiguous inputs.

use genesis::{DType, Device, Error, ReduceOp, Tensor};

mod common;
use common::{Release, devices};

const DTYPES: [DType; 5] = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64];

/// Quarter steps in [-8, 8] (floats) or whole numbers in [-40, 40]: every partial sum of the
/// test shapes is exact in every dtype, so sums compare exactly; ties are frequent.
fn values(n: usize, seed: u64, dtype: DType) -> Vec<f64> {
    let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(7);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let k = ((x >> 33) % 65) as f64 - 32.0;
            if dtype.is_float() {
                k / 4.0
            } else {
                k + ((x >> 40) % 9) as f64
            }
        })
        .collect()
}

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

fn round_to(x: f64, dtype: DType) -> f64 {
    match dtype {
        DType::F32 => x as f32 as f64,
        DType::F16 => genesis::f16::from_f64(x).to_f64(),
        DType::BF16 => genesis::bf16::from_f64(x).to_f64(),
        _ => x,
    }
}

/// Reference of `op` over `dims` (None: all) of row-major `data` of `shape`: values and (for
/// the arg ops) indices, with the output shape.
fn reference(
    op: ReduceOp,
    data: &[f64],
    shape: &[usize],
    dims: Option<&[usize]>,
    keepdim: bool,
) -> (Vec<f64>, Vec<i64>, Vec<usize>) {
    let rank = shape.len();
    let reduced: Vec<bool> = (0..rank)
        .map(|i| dims.is_none_or(|d| d.is_empty() || d.contains(&i)))
        .collect();
    let out_shape: Vec<usize> = (0..rank)
        .filter_map(|i| match (reduced[i], keepdim) {
            (false, _) => Some(shape[i]),
            (true, true) => Some(1),
            _ => None,
        })
        .collect();
    let kept: Vec<usize> = (0..rank).filter(|&i| !reduced[i]).collect();
    let red: Vec<usize> = (0..rank).filter(|&i| reduced[i]).collect();
    let n_out: usize = kept.iter().map(|&i| shape[i]).product();
    let n_red: usize = red.iter().map(|&i| shape[i]).product();
    let strides: Vec<usize> = (0..rank).map(|i| shape[i + 1..].iter().product()).collect();
    let unravel = |mut k: usize, axes: &[usize], idx: &mut [usize]| {
        for &a in axes.iter().rev() {
            idx[a] = k % shape[a];
            k /= shape[a];
        }
    };
    let mut vals = Vec::new();
    let mut inds = Vec::new();
    for o in 0..n_out {
        let mut idx = vec![0usize; rank];
        unravel(o, &kept, &mut idx);
        let mut acc = 0.0f64;
        let mut best: Option<(f64, i64)> = None;
        for k in 0..n_red {
            unravel(k, &red, &mut idx);
            let x = data[idx.iter().zip(&strides).map(|(i, s)| i * s).sum::<usize>()];
            acc += x;
            let better = match best {
                None => true,
                Some((b, _)) if b.is_nan() => false,
                Some(_) if x.is_nan() => true,
                Some((b, _)) => match op {
                    ReduceOp::Max | ReduceOp::ArgMax => x > b,
                    _ => x < b,
                },
            };
            if better {
                best = Some((x, k as i64));
            }
        }
        match op {
            ReduceOp::Sum => vals.push(acc),
            ReduceOp::Mean => vals.push(acc / n_red as f64),
            _ => {
                let (v, i) = best.unwrap();
                vals.push(v);
                inds.push(i);
            }
        }
    }
    (vals, inds, out_shape)
}

fn check(op: ReduceOp, x: &Tensor, held: &[f64], dims: Option<&[usize]>, keepdim: bool) {
    let dtype = x.dtype();
    let what = format!(
        "{} {dtype} {:?} dims {dims:?} keepdim {keepdim} on {}",
        op.name(),
        x.shape(),
        x.device()
    );
    let idims: Option<Vec<isize>> = dims.map(|d| d.iter().map(|&i| i as isize).collect());
    let (values, indices) = x.reduce(op, idims.as_deref(), keepdim).unwrap();
    let (want, want_i, shape) = reference(op, held, x.shape(), dims, keepdim);
    assert_eq!(values.shape(), &shape[..], "{what}: shape");
    let vdtype = if op == ReduceOp::Sum && !dtype.is_float() {
        DType::I64
    } else {
        dtype
    };
    assert_eq!(values.dtype(), vdtype, "{what}: dtype");
    let got = f64s(&values);
    for (g, w) in got.iter().zip(&want) {
        let w = round_to(*w, dtype);
        let ok = if op == ReduceOp::Mean {
            // f32 division then rounding to the dtype: within one ulp of the dtype.
            let ulp = match dtype {
                DType::F16 => 2f64.powi(-10),
                DType::BF16 => 2f64.powi(-7),
                _ => 2f64.powi(-23),
            };
            (g - w).abs() <= ulp * w.abs() || (g.is_nan() && w.is_nan())
        } else {
            g == &w || (g.is_nan() && w.is_nan())
        };
        assert!(ok, "{what}: got {got:?}, want {want:?}");
    }
    if op.has_indices() {
        let ind = indices.expect("indices");
        assert_eq!(ind.dtype(), DType::I64);
        assert_eq!(ind.to_vec::<i64>().unwrap(), want_i, "{what}: indices");
    } else {
        assert!(indices.is_none());
    }
}

#[test]
fn reductions_match_f64_references() {
    let _release = Release;
    let shapes: &[&[usize]] = &[
        &[],
        &[1],
        &[7],
        &[3, 5],
        &[2, 3, 4],
        &[4, 1, 33],
        &[0, 3],
        &[5, 300],
    ];
    let dim_sets: &[&[usize]] = &[&[], &[0], &[1], &[2], &[0, 1], &[1, 2], &[0, 2], &[0, 1, 2]];
    for dev in devices() {
        for dtype in DTYPES {
            for (si, shape) in shapes.iter().enumerate() {
                let n = shape.iter().product();
                let data = values(n, si as u64, dtype);
                let x = Tensor::from_slice(&data, shape, Device::Cpu)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap()
                    .to(dev)
                    .unwrap();
                let held = f64s(&x);
                for op in ReduceOp::ALL {
                    if op.float_only() && !dtype.is_float() {
                        assert!(x.reduce(op, None, false).is_err());
                        continue;
                    }
                    let empty = n == 0;
                    if !(empty && op.needs_elements()) {
                        check(op, &x, &held, None, false);
                    }
                    for dims in dim_sets {
                        if dims.iter().any(|&d| d >= shape.len()) {
                            continue;
                        }
                        if op.has_indices() && dims.len() != 1 {
                            continue;
                        }
                        let reduces_empty =
                            dims.is_empty() && empty || dims.iter().any(|&d| shape[d] == 0);
                        for keepdim in [false, true] {
                            if op.needs_elements() && reduces_empty {
                                let d: Vec<isize> = dims.iter().map(|&i| i as isize).collect();
                                assert!(x.reduce(op, Some(&d), keepdim).is_err());
                            } else {
                                check(op, &x, &held, Some(dims), keepdim);
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn non_contiguous_inputs_and_nan() {
    let _release = Release;
    for dev in devices() {
        let data: Vec<f32> = (0..24).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
        let x = Tensor::from_slice(&data, [2, 3, 4], dev).unwrap();
        let t = x.permute([2, 0, 1]).unwrap(); // [4, 2, 3], not contiguous
        let c = t.contiguous().unwrap();
        for dims in [&[0isize][..], &[1], &[2], &[0, 2], &[-1, 0]] {
            for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Mean] {
                let a = t.reduce(op, Some(dims), false).unwrap().0;
                let b = c.reduce(op, Some(dims), false).unwrap().0;
                assert_eq!(f64s(&a), f64s(&b), "{} {dims:?} on {dev}", op.name());
            }
        }
        assert_eq!(
            t.argmax().unwrap().to_vec::<i64>().unwrap(),
            c.argmax().unwrap().to_vec::<i64>().unwrap()
        );
        // A narrowed view at an offset, read in place.
        let row = x.narrow(0, 1, 1).unwrap();
        assert_eq!(
            f64s(&row.sum().unwrap()),
            vec![data[12..].iter().map(|&v| f64::from(v)).sum::<f64>()]
        );
        // NaN wins max/min and is the arg; the first NaN.
        let v = Tensor::from_slice(&[1.0f32, f32::NAN, 9.0, f32::NAN], [4], dev).unwrap();
        assert!(f64s(&v.max().unwrap())[0].is_nan());
        assert_eq!(v.argmin().unwrap().to_vec::<i64>().unwrap(), vec![1]);
        // 0-d results and integer sums as i64.
        let i = Tensor::from_slice(&[i32::MAX, i32::MAX], [2], dev).unwrap();
        let s = i.sum().unwrap();
        assert_eq!((s.shape(), s.dtype()), (&[][..], DType::I64));
        assert_eq!(s.to_vec::<i64>().unwrap(), vec![2 * i64::from(i32::MAX)]);
        // mean of nothing is NaN, sum of nothing 0.
        let e = Tensor::zeros([0], DType::F32, dev).unwrap();
        assert!(f64s(&e.mean().unwrap())[0].is_nan());
        assert_eq!(f64s(&e.sum().unwrap()), vec![0.0]);
    }
}

#[test]
fn bad_arguments_are_typed_errors() {
    let x = Tensor::zeros([2, 3], DType::F32, Device::Cpu).unwrap();
    assert!(matches!(x.sum_dim([2], false), Err(Error::Storage(_))));
    assert!(matches!(
        x.sum_dim([0, -2], false),
        Err(Error::InvalidArgument { .. })
    ));
    let x3 = Tensor::zeros([2, 3, 4], DType::F32, Device::Cpu).unwrap();
    assert!(matches!(
        x3.reduce(ReduceOp::ArgMax, Some(&[0, 1]), false),
        Err(Error::InvalidArgument { .. })
    ));
    let e = Tensor::zeros([2, 0], DType::F32, Device::Cpu).unwrap();
    let err = e.max_dim(1, false).unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
    assert!(
        e.max_dim(0, false).is_ok(),
        "reducing a non-empty dim of an empty tensor"
    );
    let i = Tensor::zeros([3], DType::I32, Device::Cpu).unwrap();
    assert!(i.mean().is_err());
    let u = Tensor::zeros([3], DType::U8, Device::Cpu).unwrap();
    assert!(u.mean().is_err(), "mean is for floats, as in PyTorch");
    assert_eq!(u.sum().unwrap().dtype(), DType::I64);
}
