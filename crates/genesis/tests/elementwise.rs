//! Binary elementwise ops with broadcasting, against f64 references computed here, on CPU and
//! (when present) CUDA, for every kernel dtype, with odd, empty, broadcast and strided shapes.

use genesis::{BinaryOp, CompareOp, DType, Device, Error, Tensor, UnaryOp, broadcast_shape};

mod common;
use common::{Release, devices};

const DTYPES: [DType; 5] = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64];

/// The tests of this file run one at a time: one of them counts the device pool's allocations,
/// which the others would move from their threads.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Deterministic values in [-40, 40] with fractional parts (whole numbers for integers), zeros
/// included so that division meets 0/0 and x/0.
fn values(n: usize, seed: u64, dtype: DType) -> Vec<f64> {
    let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let k = ((x >> 33) % 641) as f64 - 320.0;
            if dtype.is_float() {
                k / 8.0 + k / 1000.0
            } else {
                (k / 8.0).trunc()
            }
        })
        .collect()
}

/// A tensor of `dtype` from f64 values (rounded to the dtype), and the values it really holds.
fn tensor(vals: &[f64], shape: &[usize], dtype: DType, dev: Device) -> (Tensor, Vec<f64>) {
    let t = Tensor::from_slice(vals, shape, Device::Cpu)
        .unwrap()
        .to_dtype(dtype)
        .unwrap();
    let held = t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
    (t.to(dev).unwrap(), held)
}

/// `x` rounded to `dtype` as a correctly rounded kernel result would be.
fn round_to(x: f64, dtype: DType) -> f64 {
    match dtype {
        DType::F32 => x as f32 as f64,
        DType::F16 => genesis::f16::from_f64(x).to_f64(),
        DType::BF16 => genesis::bf16::from_f64(x).to_f64(),
        DType::I32 => (x as i64) as i32 as f64,
        DType::I64 => x,
        _ => unreachable!(),
    }
}

fn reference(op: BinaryOp, x: f64, y: f64) -> f64 {
    match op {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
        BinaryOp::Maximum => x.max(y),
        BinaryOp::Minimum => x.min(y),
        BinaryOp::Pow => x.powf(y),
        BinaryOp::Atan2 => x.atan2(y),
        BinaryOp::Hypot => x.hypot(y),
        // Covered by the PyTorch corpus (integer zero divisors are errors there).
        _ => unreachable!("{} is not in these tests", op.name()),
    }
}

/// Row-major index of the operand element that broadcasts to output multi-index `idx`.
fn source_index(idx: &[usize], shape: &[usize]) -> usize {
    let lead = idx.len() - shape.len();
    shape.iter().enumerate().fold(0, |acc, (d, &n)| {
        acc * n + if n == 1 { 0 } else { idx[lead + d] }
    })
}

fn expected(op: BinaryOp, a: (&[f64], &[usize]), b: (&[f64], &[usize]), dtype: DType) -> Vec<f64> {
    let out = broadcast_shape("test", a.1, b.1).unwrap();
    let n: usize = out.iter().product();
    let mut idx = vec![0usize; out.len()];
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let (x, y) = (a.0[source_index(&idx, a.1)], b.0[source_index(&idx, b.1)]);
        v.push(if op == BinaryOp::Pow && !dtype.is_float() {
            // Integer pow: exact and wrapping in the dtype.
            let bits = if dtype == DType::I32 { 32 } else { 64 };
            int_pow_reference(x as i64, y as i64, bits, true) as f64
        } else {
            round_to(reference(op, x, y), dtype)
        });
        for d in (0..out.len()).rev() {
            idx[d] += 1;
            if idx[d] < out[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    v
}

fn same(got: &[f64], want: &[f64]) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()) || g == w)
}

/// Within 4 units in the last place of `dtype` (ops computed through the math library), or
/// both NaN, or the same infinity. Subnormal results get the smallest normal's spacing.
fn close(got: &[f64], want: &[f64], dtype: DType) -> bool {
    let (eps, tiny) = match dtype {
        DType::F32 => (f64::from(f32::EPSILON), f64::from(f32::MIN_POSITIVE)),
        DType::F16 => (
            genesis::f16::EPSILON.to_f64(),
            genesis::f16::MIN_POSITIVE.to_f64(),
        ),
        DType::BF16 => (
            genesis::bf16::EPSILON.to_f64(),
            genesis::bf16::MIN_POSITIVE.to_f64(),
        ),
        _ => (0.0, 0.0),
    };
    got.len() == want.len()
        && got.iter().zip(want).all(|(&g, &w)| {
            g == w || (g.is_nan() && w.is_nan()) || (g - w).abs() <= 4.0 * eps * w.abs().max(tiny)
        })
}

const SHAPES: &[(&[usize], &[usize])] = &[
    (&[7], &[7]),
    (&[3, 1, 5], &[4, 1]),
    (&[], &[2, 3]),
    (&[2, 3], &[]),
    (&[1], &[17, 1]),
    (&[0, 3], &[1, 3]),
    (&[2, 1], &[1, 0]),
    (&[33, 65], &[65]),
    (&[1000, 3], &[1000, 1]),
    // Wide rows: the broadcast operand is read in 16-byte groups.
    (&[64, 256], &[256]),
    (&[64, 256], &[64, 1]),
];

#[test]
fn binary_ops_broadcast_and_match_f64_references() {
    let _serial = serial();
    let _release = Release;
    for dev in devices() {
        for dtype in DTYPES {
            for op in BinaryOp::ALL {
                if (op.float_only() && !dtype.is_float()) || op.divides() || op.int_only() {
                    continue;
                }
                for (k, &(sa, sb)) in SHAPES.iter().enumerate() {
                    let na: usize = sa.iter().product();
                    let nb: usize = sb.iter().product();
                    let (a, va) = tensor(&values(na, k as u64, dtype), sa, dtype, dev);
                    let (b, vb) = tensor(&values(nb, 100 + k as u64, dtype), sb, dtype, dev);
                    let got = a.binary(op, &b).unwrap();
                    assert_eq!(
                        got.shape(),
                        broadcast_shape("t", sa, sb).unwrap().as_slice()
                    );
                    assert_eq!((got.dtype(), got.device()), (dtype, dev));
                    let got = got.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
                    let want = expected(op, (&va, sa), (&vb, sb), dtype);
                    let ok = if op.exact_twin() {
                        same(&got, &want)
                    } else {
                        close(&got, &want, dtype)
                    };
                    assert!(
                        ok,
                        "{} {dtype} {sa:?} {sb:?} on {dev}:\n got {:?}\nwant {:?}",
                        op.name(),
                        &got[..got.len().min(8)],
                        &want[..want.len().min(8)]
                    );
                }
            }
        }
    }
}

#[test]
fn scalar_operands_on_views_match_f64_references() {
    let _serial = serial();
    let _release = Release;
    for dev in devices() {
        for dtype in DTYPES {
            let scalar = if dtype.is_float() { 2.5 } else { 3.0 };
            for op in BinaryOp::ALL {
                if (op.float_only() && !dtype.is_float()) || op.divides() || op.int_only() {
                    continue;
                }
                for (rows, cols) in [(5usize, 7usize), (48, 64), (1, 1)] {
                    let n = rows * cols;
                    let (m, vm) = tensor(&values(n + 3, 9, dtype), &[n + 3], dtype, dev);
                    // The whole run at an offset, and its transpose: contiguous and strided.
                    let shape = [rows as isize, cols as isize];
                    let flat = m.narrow(0, 3, n).unwrap().reshape(shape).unwrap();
                    let views = [(flat.clone(), false), (flat.t().unwrap(), true)];
                    for (view, transposed) in views {
                        let got = view.binary_scalar(op, scalar).unwrap();
                        assert_eq!(got.shape(), view.shape());
                        let got = got.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
                        let want: Vec<f64> = (0..n)
                            .map(|i| {
                                let src = if transposed {
                                    (i % rows) * cols + i / rows
                                } else {
                                    i
                                };
                                round_to(reference(op, vm[3 + src], scalar), dtype)
                            })
                            .collect();
                        let ok = if op.exact_twin() {
                            same(&got, &want)
                        } else {
                            close(&got, &want, dtype)
                        };
                        assert!(
                            ok,
                            "{} {dtype} {rows}x{cols} transposed={transposed} on {dev}:\n got {:?}\nwant {:?}",
                            op.name(),
                            &got[..got.len().min(8)],
                            &want[..want.len().min(8)]
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn strided_operands_and_operators() {
    let _serial = serial();
    let _release = Release;
    for dev in devices() {
        let (m, vm) = tensor(&values(12, 7, DType::F32), &[3, 4], DType::F32, dev);
        let mt = m.t().unwrap(); // [4, 3], not contiguous
        let (r, vr) = tensor(&values(3, 8, DType::F32), &[3], DType::F32, dev);
        let got = (&mt * &r).unwrap().to_vec::<f32>().unwrap();
        let want: Vec<f32> = (0..12)
            .map(|i| (vm[(i % 3) * 4 + i / 3] * vr[i % 3]) as f32)
            .collect();
        assert_eq!(got, want, "{dev}");
        // Owned operands, references, scalars.
        let sum = (mt.clone() + &mt).unwrap();
        let twice = (&mt * 2.0).unwrap();
        assert_eq!(sum.to_vec::<f32>().unwrap(), twice.to_vec::<f32>().unwrap());
        let halves = (mt.clone() / 2.0).unwrap();
        let back = (halves - (&mt * 0.5).unwrap()).unwrap();
        assert!(back.to_vec::<f32>().unwrap().iter().all(|&x| x == 0.0));
        // Contiguous views at an offset are read in place.
        let v = Tensor::arange(0.0, 10.0, 1.0, DType::F32, dev).unwrap();
        let mid = v.narrow(0, 3, 4).unwrap();
        assert_eq!(
            (&mid + &mid).unwrap().to_vec::<f32>().unwrap(),
            vec![6.0, 8.0, 10.0, 12.0]
        );
        assert_eq!(
            mid.neg().unwrap().to_vec::<f32>().unwrap(),
            vec![-3.0, -4.0, -5.0, -6.0]
        );
        let ints = Tensor::from_slice(&[5i32, -7, 9], [3], dev).unwrap();
        assert_eq!(
            (&ints - 10).unwrap().to_vec::<i32>().unwrap(),
            vec![-5, -17, -1]
        );
        assert_eq!(
            (&ints - 10.0).unwrap().to_vec::<f32>().unwrap(),
            vec![-5.0, -17.0, -1.0]
        );
        assert_eq!(
            ints.maximum(&Tensor::from_slice(&[0i32], [1], dev).unwrap())
                .unwrap()
                .to_vec::<i32>()
                .unwrap(),
            vec![5, 0, 9]
        );
    }
}

#[test]
fn nan_propagates_through_maximum_and_minimum() {
    let _serial = serial();
    let _release = Release;
    for dev in devices() {
        let a = Tensor::from_slice(&[f32::NAN, 1.0, 2.0, f32::NAN], [4], dev).unwrap();
        let b = Tensor::from_slice(&[0.0f32, f32::NAN, 1.0, f32::NAN], [4], dev).unwrap();
        for got in [a.maximum(&b).unwrap(), a.minimum(&b).unwrap()] {
            let v = got.to_vec::<f32>().unwrap();
            assert!(
                v[0].is_nan() && v[1].is_nan() && v[3].is_nan(),
                "{v:?} on {dev}"
            );
        }
        assert_eq!(a.maximum(&b).unwrap().to_vec::<f32>().unwrap()[2], 2.0);
        assert_eq!(a.minimum(&b).unwrap().to_vec::<f32>().unwrap()[2], 1.0);
    }
}

#[test]
fn bad_operands_are_typed_errors_that_name_the_op() {
    let _serial = serial();
    let a = Tensor::zeros([3], DType::F32, Device::Cpu).unwrap();
    let b = Tensor::zeros([4], DType::F32, Device::Cpu).unwrap();
    let e = a.mul(&b).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "mul", .. }), "{e}");
    assert_eq!(e.to_string(), "mul: shape mismatch between [3] and [4]");
    let i = Tensor::zeros([3], DType::I32, Device::Cpu).unwrap();
    let b = Tensor::zeros([3], DType::Bool, Device::Cpu).unwrap();
    let e = b.sub(&b).unwrap_err();
    assert!(e.to_string().contains("sub"), "{e}");
    let e = i.pow(-1).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { op: "pow", .. }), "{e}");
    assert!(
        e.to_string()
            .contains("Integers to negative integer powers are not allowed.")
    );
    let e = (&i + u64::MAX).unwrap_err();
    assert!(matches!(e, Error::ScalarOutOfRange { .. }), "{e}");
    let h = Tensor::zeros([3], DType::F16, Device::Cpu).unwrap();
    let e = h.pow(1e10).unwrap_err();
    assert!(matches!(e, Error::ScalarOutOfRange { .. }), "{e}");
    // Unsupported ops are refused, not miscomputed.
    let u = Tensor::zeros([2], DType::Bool, Device::Cpu).unwrap();
    assert!(u.neg().is_err());
    // Shapes that do not broadcast.
    assert!(broadcast_shape("t", &[2, 3], &[3, 2]).is_err());
    assert_eq!(
        broadcast_shape("t", &[5, 1, 3], &[4, 1]).unwrap(),
        vec![5, 4, 3]
    );
}

/// The exact value of the first ten ops of the table; the others are checked against NumPy by
/// the `unary_math` corpus of `tests/differential.rs`.
fn unary_reference(op: UnaryOp, x: f64) -> Option<f64> {
    Some(match op {
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Relu => {
            if x.is_nan() || x > 0.0 {
                x
            } else {
                0.0
            }
        }
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        _ => return None,
    })
}

/// Relative spacing of the dtype's values near 1 (one ulp, relative).
fn eps(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => f32::EPSILON as f64,
        DType::F16 => 2f64.powi(-10),
        DType::BF16 => 2f64.powi(-7),
        _ => 0.0,
    }
}

#[test]
fn unary_ops_match_f64_references() {
    let _serial = serial();
    let _release = Release;
    for dev in devices() {
        for dtype in DTYPES {
            for op in UnaryOp::ALL {
                let float_only = op.float_only();
                for shape in [&[0usize][..], &[1], &[7, 3], &[4, 33, 2]] {
                    let n: usize = shape.iter().product();
                    let (t, held) = tensor(&values(n, 7 + n as u64, dtype), shape, dtype, dev);
                    if float_only && !dtype.is_float() {
                        // Integers compute the float ops in float32, as PyTorch.
                        let got = t.unary(op).unwrap();
                        let want = t.to_dtype(DType::F32).unwrap().unary(op).unwrap();
                        assert_eq!(got.dtype(), DType::F32);
                        let bits = |t: &Tensor| -> Vec<u32> {
                            t.to_vec::<f32>()
                                .unwrap()
                                .iter()
                                .map(|x| x.to_bits())
                                .collect()
                        };
                        assert_eq!(bits(&got), bits(&want), "{op:?} of {dtype}");
                        continue;
                    }
                    // A strided view: the op reads through it.
                    let t = if shape.len() == 2 { t.t().unwrap() } else { t };
                    let got = t.unary(op).unwrap();
                    assert_eq!(got.shape(), t.shape());
                    let got = got.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
                    let inputs = t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
                    if shape.len() != 2 {
                        assert_eq!(inputs, held);
                    }
                    for (x, g) in inputs.iter().zip(&got) {
                        let Some(w) = unary_reference(op, *x) else {
                            break;
                        };
                        let w = round_to(w, dtype);
                        let ok = if g.is_nan() || w.is_nan() {
                            g.is_nan() && w.is_nan()
                        } else if op.exact_twin() || !dtype.is_float() || g == &w {
                            g == &w
                        } else {
                            // Within 4 ulp (relative) of the rounded exact value.
                            (g - w).abs() <= 4.0 * eps(dtype) * w.abs().max(f64::MIN_POSITIVE)
                        };
                        assert!(ok, "{}({x}) {dtype} on {dev}: got {g}, want {w}", op.name());
                    }
                }
            }
        }
        let x = Tensor::from_slice(&[1.5f32, -2.0], [2], dev).unwrap();
        assert_eq!((-&x).unwrap().to_vec::<f32>().unwrap(), vec![-1.5, 2.0]);
        assert_eq!(
            (-x).unwrap().relu().unwrap().to_vec::<f32>().unwrap(),
            vec![0.0, 2.0]
        );
    }
}

#[test]
fn in_place_ops_match_out_of_place_and_allocate_nothing() {
    let _serial = serial();
    let _release = Release;
    for dev in devices() {
        for dtype in [DType::F32, DType::BF16, DType::I64] {
            let (a, _) = tensor(&values(1000, 3, dtype), &[10, 100], dtype, dev);
            let (b, _) = tensor(&values(1000, 4, dtype), &[10, 100], dtype, dev);
            let (row, _) = tensor(&values(100, 5, dtype), &[100], dtype, dev);
            let mut ops = vec![
                BinaryOp::Add,
                BinaryOp::Sub,
                BinaryOp::Mul,
                BinaryOp::Maximum,
            ];
            if dtype.is_float() {
                ops.push(BinaryOp::Div);
            }
            for op in ops {
                let want = f64s(&a.binary(op, &b).unwrap());
                let x = a.deep_clone().unwrap(); // a fresh storage of its own
                let x_copy = x.to(Device::Cpu).unwrap(); // keep the data, not the storage
                let before = allocations(dev);
                x.binary_(op, &b).unwrap();
                assert_eq!(
                    allocations(dev),
                    before,
                    "{} {dtype} on {dev} allocated",
                    op.name()
                );
                assert_eq!(f64s(&x), want, "{} {dtype} on {dev}", op.name());
                // A broadcast operand, read in place (nothing allocated either), and a
                // transposed one.
                let y = x_copy.to(dev).unwrap();
                let before = allocations(dev);
                y.binary_(op, &row).unwrap();
                assert_eq!(
                    allocations(dev),
                    before,
                    "{} {dtype} on {dev} allocated for a broadcast operand",
                    op.name()
                );
                let want = x_copy.to(dev).unwrap().binary(op, &row).unwrap();
                assert_eq!(f64s(&y), f64s(&want));
                let t = b.t().unwrap().contiguous().unwrap().t().unwrap();
                let z = x_copy.to(dev).unwrap();
                z.binary_(op, &t).unwrap();
                assert_eq!(f64s(&z), f64s(&a.binary(op, &b).unwrap()));
            }
            let r = a.deep_clone().unwrap();
            let before = allocations(dev);
            r.relu_().unwrap();
            if dtype.is_float() {
                r.exp_().unwrap();
            }
            assert_eq!(
                allocations(dev),
                before,
                "unary in place on {dev} allocated"
            );
            let mut want = a.relu().unwrap();
            if dtype.is_float() {
                want = want.exp().unwrap();
            }
            assert_eq!(f64s(&r), f64s(&want));
        }
        // A view into the middle of a storage: only the view's elements change, and the base
        // sees them (PyTorch's view semantics).
        let base = Tensor::arange(0.0, 12.0, 1.0, DType::F32, dev).unwrap();
        let mid = base.narrow(0, 4, 4).unwrap();
        let ones = Tensor::ones([4], DType::F32, dev).unwrap();
        mid.add_(&ones).unwrap();
        assert_eq!(mid.to_vec::<f32>().unwrap(), vec![5.0, 6.0, 7.0, 8.0]);
        let want: Vec<f32> = (0..12)
            .map(|i| i as f32 + if (4..8).contains(&i) { 1.0 } else { 0.0 })
            .collect();
        assert_eq!(base.to_vec::<f32>().unwrap(), want);
    }
    // A strided view is written in place through its layout.
    let m = Tensor::zeros([3, 4], DType::F32, Device::Cpu).unwrap();
    let t = m.t().unwrap();
    t.add_(
        &Tensor::arange(0.0, 12.0, 1.0, DType::F32, Device::Cpu)
            .unwrap()
            .reshape([4, 3])
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        m.to_vec::<f32>().unwrap(),
        [0.0, 3.0, 6.0, 9.0, 1.0, 4.0, 7.0, 10.0, 2.0, 5.0, 8.0, 11.0]
    );
    // Errors: shape that would grow, dtype mismatch.
    let v = Tensor::zeros([3], DType::F32, Device::Cpu).unwrap();
    let e = v
        .add_(&Tensor::zeros([2, 3], DType::F32, Device::Cpu).unwrap())
        .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "add", .. }), "{e}");
    let w = Tensor::zeros([3], DType::I32, Device::Cpu).unwrap();
    assert!(
        w.mul_(&Tensor::zeros([3], DType::F32, Device::Cpu).unwrap())
            .is_err(),
        "a float result does not go into an int32 tensor"
    );
    let i = Tensor::zeros([3], DType::I32, Device::Cpu).unwrap();
    assert!(i.exp_().is_err());
    assert_eq!(
        v.to_vec::<f32>().unwrap(),
        vec![0.0; 3],
        "failed ops write nothing"
    );
}

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

/// Allocations made so far by the device's pool (0 on the CPU, which has no pool).
fn allocations(dev: Device) -> i64 {
    match dev {
        #[cfg(feature = "cuda")]
        Device::Cuda(i) => genesis::cuda::memory_stats(i).unwrap()["allocation.all.allocated"],
        _ => 0,
    }
}

fn compare_reference(op: CompareOp, x: f64, y: f64) -> bool {
    match op {
        CompareOp::Eq => x == y,
        CompareOp::Ne => x != y,
        CompareOp::Lt => x < y,
        CompareOp::Le => x <= y,
        CompareOp::Gt => x > y,
        CompareOp::Ge => x >= y,
    }
}

/// `f(x, y)` over the broadcast of two operands, against the f64 values they hold.
fn broadcast_map<R>(
    a: (&[f64], &[usize]),
    b: (&[f64], &[usize]),
    f: impl Fn(f64, f64) -> R,
) -> Vec<R> {
    let out = broadcast_shape("test", a.1, b.1).unwrap();
    let n: usize = out.iter().product();
    let mut idx = vec![0usize; out.len()];
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(f(
            a.0[source_index(&idx, a.1)],
            b.0[source_index(&idx, b.1)],
        ));
        for d in (0..out.len()).rev() {
            idx[d] += 1;
            if idx[d] < out[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    v
}

#[test]
fn comparisons_broadcast_to_bools_and_match_f64_references() {
    let _serial = serial();
    let _release = Release;
    for dev in devices() {
        for dtype in DTYPES {
            for op in CompareOp::ALL {
                for (k, &(sa, sb)) in SHAPES.iter().enumerate() {
                    let na: usize = sa.iter().product();
                    let nb: usize = sb.iter().product();
                    // Few distinct values, so that equality is met often.
                    let small = |v: Vec<f64>| {
                        v.into_iter()
                            .map(|x| (x / 16.0).round())
                            .collect::<Vec<_>>()
                    };
                    let (a, va) = tensor(&small(values(na, k as u64, dtype)), sa, dtype, dev);
                    let (b, vb) = tensor(&small(values(nb, 50 + k as u64, dtype)), sb, dtype, dev);
                    let got = a.compare(op, &b).unwrap();
                    assert_eq!((got.dtype(), got.device()), (DType::Bool, dev));
                    assert_eq!(
                        got.shape(),
                        broadcast_shape("t", sa, sb).unwrap().as_slice()
                    );
                    let want =
                        broadcast_map((&va, sa), (&vb, sb), |x, y| compare_reference(op, x, y));
                    assert_eq!(
                        got.to_bool_vec().unwrap(),
                        want,
                        "{} {dtype} {sa:?} {sb:?} on {dev}",
                        op.name()
                    );
                }
            }
        }
        // NaN compares unequal to everything, itself included; scalars convert to the dtype.
        let x = Tensor::from_slice(&[1.0f32, f32::NAN, 3.0], [3], dev).unwrap();
        assert_eq!(
            x.eq(&x).unwrap().to_bool_vec().unwrap(),
            [true, false, true]
        );
        assert_eq!(
            x.ne(&x).unwrap().to_bool_vec().unwrap(),
            [false, true, false]
        );
        assert_eq!(
            x.ge_scalar(1.0).unwrap().to_bool_vec().unwrap(),
            [true, false, true]
        );
        assert_eq!(
            x.lt_scalar(2.0).unwrap().to_bool_vec().unwrap(),
            [true, false, false]
        );
        let i = Tensor::from_slice(&[1i64, 2, 3], [3], dev).unwrap();
        assert_eq!(
            i.gt_scalar(1.0).unwrap().to_bool_vec().unwrap(),
            [false, true, true]
        );
        assert_eq!(
            i.le_scalar(2.0).unwrap().to_bool_vec().unwrap(),
            [true, true, false]
        );
        assert_eq!(
            i.lt_scalar(1.5).unwrap().to_bool_vec().unwrap(),
            [true, false, false],
            "compared in float32, as PyTorch"
        );
        // Strided operands.
        let m = Tensor::arange(0.0, 6.0, 1.0, DType::F32, dev)
            .unwrap()
            .reshape([2, 3])
            .unwrap();
        let mt = m.t().unwrap();
        assert_eq!(
            mt.gt_scalar(2.0).unwrap().to_bool_vec().unwrap(),
            [false, true, false, true, false, true]
        );
        // Dtypes promote (int64 against float32 compares in float32); shapes must broadcast.
        let f = Tensor::zeros([3], DType::F32, dev).unwrap();
        assert_eq!(f.lt(&i).unwrap().to_bool_vec().unwrap(), [true, true, true]);
        let g = Tensor::zeros([2], DType::F32, dev).unwrap();
        assert!(matches!(
            f.lt(&g),
            Err(Error::ShapeMismatch { op: "lt", .. })
        ));
        let b = f.eq(&f).unwrap();
        assert_eq!(
            b.eq(&b).unwrap().to_bool_vec().unwrap(),
            [true; 3],
            "bools compare"
        );
    }
}

#[test]
fn where_selects_with_three_way_broadcasting_for_every_dtype() {
    let _serial = serial();
    let _release = Release;
    for dev in devices() {
        for dtype in [
            DType::F32,
            DType::F16,
            DType::BF16,
            DType::I32,
            DType::I64,
            DType::F64,
            DType::U8,
        ] {
            // cond [2, 1, 3], a [4, 1], b [] -> [2, 4, 3]
            let cbits = [true, false, true, false, false, true];
            let cond = Tensor::from_bools(&cbits, [2, 1, 3], dev).unwrap();
            let va = [1.0, 2.0, 3.0, 4.0];
            let a = Tensor::from_slice(&va, [4, 1], dev)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            let b = Tensor::full((), 9.0f64, dev)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            let got = Tensor::where_cond(&cond, &a, &b).unwrap();
            assert_eq!(got.shape(), [2, 4, 3]);
            assert_eq!((got.dtype(), got.device()), (dtype, dev));
            let mut want = Vec::new();
            for i in 0..2 {
                for &aj in &va {
                    for k in 0..3 {
                        want.push(if cbits[i * 3 + k] { aj } else { 9.0 });
                    }
                }
            }
            assert_eq!(f64s(&got), want, "{dtype} on {dev}");
        }
        // Conditions from comparisons; empty shapes; odd lengths.
        let n = 1001;
        let vx = values(n, 3, DType::F32);
        let (x, vx) = tensor(&vx, &[n], DType::F32, dev);
        let zero = Tensor::zeros((), DType::F32, dev).unwrap();
        let relu = Tensor::where_cond(&x.gt_scalar(0.0).unwrap(), &x, &zero).unwrap();
        let want: Vec<f64> = vx.iter().map(|&v| if v > 0.0 { v } else { 0.0 }).collect();
        assert_eq!(f64s(&relu), want);
        let e = Tensor::zeros([0, 3], DType::F32, dev).unwrap();
        let ec = e.gt(&e).unwrap();
        assert_eq!(Tensor::where_cond(&ec, &e, &e).unwrap().shape(), [0, 3]);
        // Errors: a non-bool condition, mismatched values, shapes that do not broadcast.
        assert!(matches!(
            Tensor::where_cond(&x, &x, &x),
            Err(Error::InvalidArgument { op: "where", .. })
        ));
        let xi = x.to_dtype(DType::I32).unwrap();
        let c = x.gt_scalar(0.0).unwrap();
        assert_eq!(
            Tensor::where_cond(&c, &x, &xi).unwrap().dtype(),
            x.dtype(),
            "promoted"
        );
        let short = Tensor::zeros([2], DType::F32, dev).unwrap();
        assert!(matches!(
            Tensor::where_cond(&c, &x, &short),
            Err(Error::ShapeMismatch { .. })
        ));
    }
}

#[test]
fn pow_with_tensor_and_scalar_exponents() {
    let _serial = serial();
    let _release = Release;
    for dev in devices() {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let base = [0.5, 2.0, 3.0, 10.0, 0.0, 1.5];
            let (x, vx) = tensor(&base, &[2, 3], dtype, dev);
            let got = f64s(&x.pow_scalar(2.0).unwrap());
            let want: Vec<f64> = vx.iter().map(|v| round_to(v * v, dtype)).collect();
            assert!(
                close(&got, &want, dtype),
                "{dtype} on {dev}: {got:?} vs {want:?}"
            );
            let (e, ve) = tensor(&[0.5, -1.0, 3.0], &[3], dtype, dev);
            let got = f64s(&x.pow(&e).unwrap());
            let want = broadcast_map((&vx, &[2, 3]), (&ve, &[3]), |a, b| {
                round_to(a.powf(b), dtype)
            });
            assert!(
                close(&got, &want, dtype),
                "{dtype} on {dev}: {got:?} vs {want:?}"
            );
        }
        let i = Tensor::from_slice(&[2i32], [1], dev).unwrap();
        assert_eq!(i.pow_scalar(2).unwrap().to_vec::<i32>().unwrap(), [4]);
        assert!(
            i.pow_scalar(-2).is_err(),
            "negative integer scalar exponent"
        );
        assert_eq!(i.pow_scalar(2.0).unwrap().dtype(), DType::F32, "promoted");
    }
}

#[test]
fn out_forms_write_into_the_given_tensor_and_allocate_nothing() {
    let _serial = serial();
    let _release = Release;
    for dev in devices() {
        for dtype in DTYPES {
            let n = 4097;
            let (a, va) = tensor(&values(n, 1, dtype), &[n], dtype, dev);
            let (b, vb) = tensor(&values(n, 2, dtype), &[n], dtype, dev);
            let mut out = Tensor::zeros([n], dtype, dev).unwrap();
            for op in BinaryOp::ALL {
                if (op.float_only() && !dtype.is_float()) || op.divides() || op.int_only() {
                    continue;
                }
                let before = allocations(dev);
                a.binary_out(op, &b, &mut out).unwrap();
                assert_eq!(
                    allocations(dev),
                    before,
                    "{} {dtype} on {dev} allocated",
                    op.name()
                );
                let want = expected(op, (&va, &[n]), (&vb, &[n]), dtype);
                let got = f64s(&out);
                let ok = if op.exact_twin() {
                    same(&got, &want)
                } else {
                    close(&got, &want, dtype)
                };
                assert!(ok, "{}_out {dtype} on {dev}", op.name());
                assert!(same(&f64s(&out), &f64s(&a.binary(op, &b).unwrap())));
            }
            if dtype.is_float() {
                let before = allocations(dev);
                a.exp_out(&mut out).unwrap();
                assert_eq!(
                    allocations(dev),
                    before,
                    "exp_out {dtype} on {dev} allocated"
                );
                assert_eq!(f64s(&out), f64s(&a.exp().unwrap()));
            }
            a.unary_out(UnaryOp::Neg, &mut out).unwrap();
            assert_eq!(f64s(&out), va.iter().map(|v| -v).collect::<Vec<_>>());
        }
        // Broadcast operands and an out at an offset inside a larger tensor.
        let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3], dev).unwrap();
        let row = Tensor::from_slice(&[10.0f32, 20.0, 30.0], [3], dev).unwrap();
        let mut out = Tensor::zeros([2, 3], DType::F32, dev).unwrap();
        a.add_out(&row, &mut out).unwrap();
        assert_eq!(
            out.to_vec::<f32>().unwrap(),
            [11.0, 22.0, 33.0, 14.0, 25.0, 36.0]
        );
        a.mul_out(&row, &mut out).unwrap();
        assert_eq!(
            out.to_vec::<f32>().unwrap(),
            [10.0, 40.0, 90.0, 40.0, 100.0, 180.0]
        );
        let mut tail = Tensor::zeros([8], DType::F32, dev)
            .unwrap()
            .narrow(0, 5, 3)
            .unwrap();
        row.sub_out(&row, &mut tail).unwrap();
        row.div_out(&row, &mut tail).unwrap();
        assert_eq!(tail.to_vec::<f32>().unwrap(), [1.0, 1.0, 1.0]);
        // Refused: wrong shape (no resizing), dtype, device, non-contiguous or shared out; out
        // is left unchanged.
        let keep = out.to_vec::<f32>().unwrap();
        let mut small = Tensor::zeros([3], DType::F32, dev).unwrap();
        assert!(matches!(
            a.add_out(&row, &mut small),
            Err(Error::InvalidArgument { op: "add", .. })
        ));
        // An out of another dtype takes the result when PyTorch's `can_cast` allows it
        // (f32 into f16: rounded), not a float result into an integer tensor.
        let mut half = Tensor::zeros([2, 3], DType::F16, dev).unwrap();
        a.add_out(&a, &mut half).unwrap();
        assert_eq!(
            half.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(),
            a.add(&a).unwrap().to_vec::<f32>().unwrap()
        );
        let mut wrong = Tensor::zeros([2, 3], DType::I64, dev).unwrap();
        assert!(matches!(
            a.add_out(&a, &mut wrong),
            Err(Error::InvalidArgument { .. })
        ));
        assert_eq!(wrong.to_vec::<i64>().unwrap(), [0; 6]);
        assert_eq!(out.to_vec::<f32>().unwrap(), keep);
        // A strided out, and an out that shares its storage with an operand, are written
        // (through a temporary), as in PyTorch.
        let base = Tensor::zeros([3, 2], DType::F32, dev).unwrap();
        let mut strided = base.t().unwrap();
        a.add_out(&a, &mut strided).unwrap();
        assert_eq!(
            base.to_vec::<f32>().unwrap(),
            [2.0, 8.0, 4.0, 10.0, 6.0, 12.0]
        );
        let mut same = a.deep_clone().unwrap();
        let alias = same.clone();
        alias.mul_out(&same.clone(), &mut same).unwrap();
        assert_eq!(
            alias.to_vec::<f32>().unwrap(),
            [1.0, 4.0, 9.0, 16.0, 25.0, 36.0]
        );
        if dev != Device::Cpu {
            let mut host = Tensor::zeros([2, 3], DType::F32, Device::Cpu).unwrap();
            assert!(matches!(
                a.add_out(&a, &mut host),
                Err(Error::DeviceMismatch { .. })
            ));
        }
    }
}

#[test]
fn compound_assignment_operators_work_in_place_and_allocate_nothing() {
    let _serial = serial();
    let _release = Release;
    for dev in devices() {
        let a: Vec<f32> = (0..1000).map(|i| i as f32 * 0.25 - 40.0).collect();
        let b: Vec<f32> = (0..1000).map(|i| (i % 7) as f32 + 1.0).collect();
        let mut x = Tensor::from_slice(&a, [10, 100], dev).unwrap();
        let y = Tensor::from_slice(&b, [10, 100], dev).unwrap();
        let before = allocations(dev);
        x += &y;
        x *= &y;
        x -= &y;
        x /= &y;
        assert_eq!(
            allocations(dev),
            before,
            "compound assignment allocated on {dev}"
        );
        let want: Vec<f32> = a
            .iter()
            .zip(&b)
            .map(|(&p, &q)| (((p + q) * q) - q) / q)
            .collect();
        assert_eq!(x.to_vec::<f32>().unwrap(), want, "on {dev}");
        // A broadcast right-hand side (a row), taken by value.
        x += Tensor::from_slice(&b[..100], [100], dev).unwrap();
        let want: Vec<f32> = want
            .iter()
            .enumerate()
            .map(|(i, &v)| v + b[i % 100])
            .collect();
        assert_eq!(x.to_vec::<f32>().unwrap(), want);
        // Bad input panics with the error's message and writes nothing.
        let held = x.to_vec::<f32>().unwrap();
        let wrong = Tensor::from_slice(&[1.0f32; 3], [3], dev).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| x += &wrong));
        let msg = r.unwrap_err();
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("add"), "{msg}");
        assert_eq!(x.to_vec::<f32>().unwrap(), held);
    }
}

/// `a ** b` in an integer dtype of `bits` bits (signed or not), PyTorch's rule: for `b >= 0`
/// the product of `b` factors `a` reduced modulo 2^bits (in u128, whose wrapping products are
/// exact modulo 2^128 and so modulo 2^bits, reducing after each square-and-multiply step,
/// which keeps the residue); for `b < 0`, 0 but 1 for `a == 1` and +-1 for `a == -1`.
fn int_pow_reference(a: i64, b: i64, bits: u32, signed: bool) -> i64 {
    if b < 0 {
        return match a {
            1 => 1,
            -1 if b % 2 != 0 => -1,
            -1 => 1,
            _ => 0,
        };
    }
    let m = 1u128 << bits;
    let (mut r, mut base, mut e) = (1u128, i128::from(a).rem_euclid(m as i128) as u128, b);
    while e > 0 {
        if e & 1 == 1 {
            r = r.wrapping_mul(base) % m;
        }
        base = base.wrapping_mul(base) % m;
        e >>= 1;
    }
    if signed && r >= m / 2 {
        (r as i128 - m as i128) as i64
    } else {
        r as i64
    }
}

/// A random value of an integer dtype: small magnitudes (where powers stay exact for a while)
/// half of the time, anything in range otherwise.
fn random_int(x: &mut u64, dtype: DType) -> i64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    let (lo, hi): (i128, i128) = match dtype {
        DType::U8 => (0, 255),
        DType::I8 => (-128, 127),
        DType::I16 => (-(1 << 15), (1 << 15) - 1),
        DType::I32 => (i128::from(i32::MIN), i128::from(i32::MAX)),
        _ => (i128::from(i64::MIN), i128::from(i64::MAX)),
    };
    let v = if *x & 1 == 0 {
        i128::from((*x >> 8) % 7) - 3
    } else {
        lo + i128::from(*x >> 1) % (hi - lo + 1)
    };
    v.clamp(lo, hi) as i64
}

fn ints_of(values: &[i64], dtype: DType, dev: Device) -> Tensor {
    Tensor::from_slice(values, [values.len()], dev)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

fn as_i64s(t: &Tensor) -> Vec<i64> {
    t.to_dtype(DType::I64).unwrap().to_vec::<i64>().unwrap()
}

#[test]
fn integer_pow_wraps_exactly_in_every_integer_dtype_on_every_device() {
    let _serial = serial();
    let _release = Release;
    let widths = [
        (DType::U8, 8, false),
        (DType::I8, 8, true),
        (DType::I16, 16, true),
        (DType::I32, 32, true),
        (DType::I64, 64, true),
    ];
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for dev in devices() {
        for (dtype, bits, signed) in widths {
            let n = 257;
            let base: Vec<i64> = (0..n).map(|_| random_int(&mut x, dtype)).collect();
            // Exponents: small ones (negative where the dtype has them), and any in range.
            let exps: Vec<i64> = (0..n)
                .map(|i| match i % 3 {
                    0 => random_int(&mut x, dtype),
                    _ => {
                        let e = (random_int(&mut x, DType::I64).rem_euclid(80)) - 8;
                        if signed { e } else { e.abs() }
                    }
                })
                .collect();
            let (tb, te) = (ints_of(&base, dtype, dev), ints_of(&exps, dtype, dev));
            let got = tb.pow(&te).unwrap();
            assert_eq!(got.dtype(), dtype);
            let want: Vec<i64> = base
                .iter()
                .zip(&exps)
                .map(|(&a, &b)| int_pow_reference(a, b, bits, signed))
                .collect();
            assert_eq!(as_i64s(&got), want, "{dtype} ** {dtype} on {dev}");
            // A strided (every other element) base against a broadcast 0-d exponent tensor.
            let every_other = tb.i(&genesis::s![..;2]).unwrap();
            let e0 = ints_of(&[exps[5]], dtype, dev).reshape(()).unwrap();
            let want: Vec<i64> = base
                .iter()
                .step_by(2)
                .map(|&a| int_pow_reference(a, exps[5], bits, signed))
                .collect();
            assert_eq!(
                as_i64s(&every_other.pow(&e0).unwrap()),
                want,
                "{dtype} strided on {dev}"
            );
            // Scalar exponents keep the dtype; scalar bases take it from the tensor.
            let max = if signed {
                (1i128 << (bits - 1)) - 1
            } else {
                (1 << bits) - 1
            };
            for e in [
                0i64,
                1,
                2,
                3,
                7,
                8,
                15,
                16,
                31,
                32,
                63,
                64,
                65,
                1000,
                1 << 40,
            ] {
                if i128::from(e) > max {
                    // The exponent must fit the dtype (PyTorch converts it to the dtype).
                    let err = tb.pow(e).unwrap_err();
                    assert!(matches!(err, Error::ScalarOutOfRange { .. }), "{err}");
                    continue;
                }
                let got = tb.pow(e).unwrap();
                assert_eq!(got.dtype(), dtype);
                let want: Vec<i64> = base
                    .iter()
                    .map(|&a| int_pow_reference(a, e, bits, signed))
                    .collect();
                assert_eq!(as_i64s(&got), want, "{dtype} ** {e} on {dev}");
            }
            for a in [0i64, 1, 2, 3] {
                let got = Tensor::scalar_pow(a, &te).unwrap();
                assert_eq!(got.dtype(), dtype);
                let want: Vec<i64> = exps
                    .iter()
                    .map(|&b| int_pow_reference(a, b, bits, signed))
                    .collect();
                assert_eq!(as_i64s(&got), want, "{a} ** {dtype} on {dev}");
            }
            // In place, and into an `out=` of the dtype.
            let t = tb.deep_clone().unwrap();
            t.pow_(&te).unwrap();
            assert_eq!(as_i64s(&t), as_i64s(&tb.pow(&te).unwrap()));
            let mut out = Tensor::zeros([n], dtype, dev).unwrap();
            tb.binary_out(BinaryOp::Pow, &te, &mut out).unwrap();
            assert_eq!(as_i64s(&out), as_i64s(&tb.pow(&te).unwrap()));
            // A negative integer scalar exponent is an error, the tensor unchanged.
            let e = tb.pow(-1).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument { op: "pow", .. }), "{e}");
            assert!(t.pow_(-3).is_err());
            assert_eq!(as_i64s(&t), as_i64s(&tb.pow(&te).unwrap()));
            // A float exponent promotes to float32.
            assert_eq!(tb.pow(0.5).unwrap().dtype(), DType::F32);
        }
        // Mixed integer dtypes compute in the promoted one: int8 ** int64 is int64.
        let (b8, e64) = (
            ints_of(&[2, -2, 3, -1], DType::I8, dev),
            ints_of(&[62, 63, 39, -7], DType::I64, dev),
        );
        let got = b8.pow(&e64).unwrap();
        assert_eq!(got.dtype(), DType::I64);
        assert_eq!(
            got.to_vec::<i64>().unwrap(),
            [1 << 62, i64::MIN, 4052555153018976267, -1]
        );
        // uint8 ** int8 is int16: 200 ** 2 wraps in 16 bits.
        let (u, s) = (
            ints_of(&[200, 2], DType::U8, dev),
            ints_of(&[2, -1], DType::I8, dev),
        );
        let got = u.pow(&s).unwrap();
        assert_eq!(got.dtype(), DType::I16);
        assert_eq!(as_i64s(&got), [(40_000i64 - 65_536), 0]);
        // bool ** int scalar is int64; bool ** bool is bool (x ** false is true), as PyTorch.
        let b = Tensor::from_bools(&[true, false], [2], dev).unwrap();
        assert_eq!(b.pow(3).unwrap().to_vec::<i64>().unwrap(), [1, 0]);
        let e = Tensor::from_bools(&[false, false], [2], dev).unwrap();
        assert_eq!(b.pow(&e).unwrap().to_bool_vec().unwrap(), [true, true]);
        assert_eq!(b.pow(&b).unwrap().to_bool_vec().unwrap(), [true, true]);
    }
}
