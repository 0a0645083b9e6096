//! Type promotion against PyTorch: `tests/data/promotion.json` (written by
//! `gen_promotion_table.py` from `torch.result_type`) checked through `genesis::result_type`
//! and through the output dtypes (and values) of the ops: add, sub, mul, maximum, div,
//! comparisons, `where`, sum. Then the dtypes that have no kernels (uint8, int8, int16, bool):
//! wrapping arithmetic, bool logic; float64 computed exactly in f64 on every device; and the
//! in-place rule. The table runs on the CPU; on a CUDA device a sample of it runs and must give
//! the CPU's dtypes and values (float64 included).

#[allow(dead_code)]
mod common;

use genesis::{DType, Device, Error, Operand, Tensor, promote_types, result_type};

fn table() -> serde_json::Value {
    serde_json::from_str(include_str!("data/promotion.json")).unwrap()
}

use common::f64_values as values;
use common::short_dtype as dtype;

fn field<'a>(e: &'a serde_json::Value, k: &str) -> &'a str {
    e[k].as_str().unwrap()
}

/// The operand of a table entry: 1-d `[3, 1]` (bool `[true, false]`) or 0-d `2` (bool `true`).
fn operand(d: DType, zero_d: bool, device: Device) -> Tensor {
    let values: &[f64] = match (d, zero_d) {
        (DType::Bool, false) => &[1.0, 0.0],
        (DType::Bool, true) => &[1.0],
        (_, false) => &[3.0, 1.0],
        (_, true) => &[2.0],
    };
    let shape: &[usize] = if zero_d { &[] } else { &[2] };
    Tensor::from_slice(values, shape, Device::Cpu)
        .unwrap()
        .to_dtype(d)
        .unwrap()
        .to(device)
        .unwrap()
}

/// `v` as the dtype `d` stores it: integers wrap, bools are `v != 0`.
fn wrap(v: f64, d: DType) -> f64 {
    let w = |bits: u32, signed: bool| {
        let m = 1i128 << bits;
        let r = (v as i128).rem_euclid(m);
        (if signed && r >= m / 2 { r - m } else { r }) as f64
    };
    match d {
        DType::Bool => f64::from(u8::from(v != 0.0)),
        DType::U8 => w(8, false),
        DType::I8 => w(8, true),
        DType::I16 => w(16, true),
        DType::I32 => w(32, true),
        DType::I64 => w(64, true),
        _ => v,
    }
}

/// `f` elementwise over `a` and `b` broadcast (1-d of 2 or 0-d).
fn expect(a: &[f64], b: &[f64], f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| f(a[i.min(a.len() - 1)], b[i.min(b.len() - 1)]))
        .collect()
}

/// Checks every op on one pair `a`, `b` (tensors or scalars as operands) against the result
/// dtype `r` PyTorch gives; `what` names the case in failures.
fn check_ops(what: &str, a: &Tensor, b_vals: &[f64], b: impl Operand + Copy, r: DType) {
    let av = values(a);
    let b_scalar = matches!(b.operand(), genesis::OperandRef::Scalar(_));
    let mut arith = vec![
        ("add", a.add(b), expect(&av, b_vals, |x, y| x + y)),
        ("mul", a.mul(b), expect(&av, b_vals, |x, y| x * y)),
    ];
    // `maximum`/`minimum` with a number are PyTorch's `clamp_min`/`clamp_max`, which have no
    // bool kernel.
    if b_scalar && r == DType::Bool {
        assert!(a.maximum(b).is_err() && a.minimum(b).is_err(), "{what}");
    } else {
        arith.push(("maximum", a.maximum(b), expect(&av, b_vals, f64::max)));
        arith.push(("minimum", a.minimum(b), expect(&av, b_vals, f64::min)));
    }
    for (op, got, want) in arith {
        let got = got.unwrap_or_else(|e| panic!("{what} {op}: {e}"));
        assert_eq!(got.dtype(), r, "{what} {op}");
        let want: Vec<f64> = want.into_iter().map(|v| wrap(v, r)).collect();
        assert_eq!(values(&got), want, "{what} {op}");
    }
    // Subtraction with a bool operand is an error, as in PyTorch; otherwise integers wrap.
    let sub = a.sub(b);
    let b_bool = match b.operand() {
        genesis::OperandRef::Tensor(t) => t.dtype() == DType::Bool,
        genesis::OperandRef::Scalar(v) => matches!(v, genesis::ScalarValue::Bool(_)),
    };
    if r == DType::Bool || a.dtype() == DType::Bool || b_bool {
        assert!(matches!(sub, Err(Error::InvalidArgument { .. })), "{what}");
    } else {
        let sub = sub.unwrap_or_else(|e| panic!("{what} sub: {e}"));
        assert_eq!(sub.dtype(), r, "{what} sub");
        let want: Vec<f64> = expect(&av, b_vals, |x, y| wrap(x - y, r));
        assert_eq!(values(&sub), want, "{what} sub");
    }
    // True division: float32 for integers and bools.
    let rd = if r.is_float() { r } else { DType::F32 };
    match a.div(b) {
        Ok(q) => {
            assert_eq!(q.dtype(), rd, "{what} div");
            let want = expect(&av, b_vals, |x, y| x / y);
            for (g, w) in values(&q).iter().zip(&want) {
                let tol = if rd == DType::F64 {
                    0.0
                } else {
                    1e-2 * w.abs()
                };
                assert!(
                    (g - w).abs() <= tol || (g.is_nan() && w.is_nan()) || g == w,
                    "{what} div: {g} vs {w}"
                );
            }
        }
        Err(e) => panic!("{what} div: {e}"),
    }
    // Comparisons: compared in the promoted dtype, as bools.
    let cmp = [
        (
            "eq",
            a.eq(b),
            expect(&av, b_vals, |x, y| f64::from(u8::from(x == y))),
        ),
        (
            "lt",
            a.lt(b),
            expect(&av, b_vals, |x, y| f64::from(u8::from(x < y))),
        ),
        (
            "ge",
            a.ge(b),
            expect(&av, b_vals, |x, y| f64::from(u8::from(x >= y))),
        ),
    ];
    for (op, got, want) in cmp {
        let got = got.unwrap_or_else(|e| panic!("{what} {op}: {e}"));
        assert_eq!(got.dtype(), DType::Bool, "{what} {op}");
        assert_eq!(values(&got), want, "{what} {op}");
    }
    // `where` selects without arithmetic: every dtype on every device.
    let cond = Tensor::from_bools(&[true, false], [2], a.device()).unwrap();
    let w = Tensor::where_cond(&cond, a, b).unwrap_or_else(|e| panic!("{what} where: {e}"));
    assert_eq!(w.dtype(), r, "{what} where");
    let want = expect(&av, b_vals, |x, _| x);
    let other = expect(&av, b_vals, |_, y| y);
    assert_eq!(
        values(&w),
        [want[0], other[1.min(other.len() - 1)]],
        "{what} where"
    );
}

#[test]
fn promote_types_is_symmetric_and_idempotent() {
    for &a in &DType::ALL {
        assert_eq!(promote_types(a, a), a);
        for &b in &DType::ALL {
            assert_eq!(promote_types(a, b), promote_types(b, a), "{a} {b}");
        }
    }
}

#[test]
fn result_type_matches_pytorch_for_every_pair() {
    let t = table();
    let pairs = t["tensor_tensor"].as_array().unwrap();
    assert_eq!(pairs.len(), 400);
    for e in pairs {
        let (da, db, r) = (
            dtype(field(e, "a")),
            dtype(field(e, "b")),
            dtype(field(e, "result")),
        );
        let (za, zb) = (e["a_0d"].as_bool().unwrap(), e["b_0d"].as_bool().unwrap());
        let (a, b) = (operand(da, za, Device::Cpu), operand(db, zb, Device::Cpu));
        assert_eq!(result_type(&a, &b), r, "{e}");
    }
}

#[test]
fn result_type_matches_pytorch_for_scalars() {
    let t = table();
    let rows = t["tensor_scalar"].as_array().unwrap();
    assert_eq!(rows.len(), 30);
    for e in rows {
        let (da, r) = (dtype(field(e, "a")), dtype(field(e, "result")));
        let a = operand(da, false, Device::Cpu);
        let got = match field(e, "scalar") {
            "bool" => result_type(&a, true),
            "int" => result_type(&a, 3),
            "float" => result_type(&a, 0.5),
            k => panic!("scalar kind {k}"),
        };
        assert_eq!(got, r, "{e}");
        // Every Rust integer type is a Python int, every float type a Python float.
        match field(e, "scalar") {
            "int" => {
                assert_eq!(result_type(&a, 3u8), r, "{e}");
                assert_eq!(result_type(&a, 3i16), r, "{e}");
                assert_eq!(result_type(&a, 3usize), r, "{e}");
            }
            "float" => {
                assert_eq!(result_type(&a, 0.5f32), r, "{e}");
                assert_eq!(result_type(&a, genesis::f16::from_f32(0.5)), r, "{e}");
            }
            _ => {}
        }
    }
}

/// The ops' output dtypes and values follow the table on `device` (every entry on the CPU,
/// every `step`-th on others).
fn ops_follow_table(device: Device, step: usize) {
    let t = table();
    for e in t["tensor_tensor"].as_array().unwrap().iter().step_by(step) {
        let (da, db, r) = (
            dtype(field(e, "a")),
            dtype(field(e, "b")),
            dtype(field(e, "result")),
        );
        let (za, zb) = (e["a_0d"].as_bool().unwrap(), e["b_0d"].as_bool().unwrap());
        // Two 0-d operands give a 0-d result; `where` with a 2-element condition still works.
        let (a, b) = (operand(da, za, device), operand(db, zb, device));
        let what = format!("{device} {e}");
        check_ops(&what, &a, &values(&b), &b, r);
    }
    for e in t["tensor_scalar"].as_array().unwrap().iter().step_by(step) {
        let (da, r) = (dtype(field(e, "a")), dtype(field(e, "result")));
        let a = operand(da, false, device);
        let what = format!("{device} {e}");
        match field(e, "scalar") {
            "bool" => check_ops(&what, &a, &[1.0], true, r),
            "int" => check_ops(&what, &a, &[3.0], 3, r),
            "float" => check_ops(&what, &a, &[0.5], 0.5, r),
            k => panic!("scalar kind {k}"),
        }
    }
    for e in t["div"].as_array().unwrap().iter().step_by(step.min(3)) {
        let (da, r) = (dtype(field(e, "a")), dtype(field(e, "result")));
        let a = operand(da, false, device);
        assert_eq!(a.div(&a).unwrap().dtype(), r, "{device} {e}");
    }
    for e in t["sum"].as_array().unwrap() {
        let (da, r) = (dtype(field(e, "a")), dtype(field(e, "result")));
        let a = operand(da, false, device);
        let s = a.sum().unwrap();
        assert_eq!(s.dtype(), r, "{device} {e}");
        let want = if da == DType::Bool { 1.0 } else { 4.0 };
        assert_eq!(values(&s), [want], "{device} {e}");
    }
}

#[test]
fn ops_follow_the_table_on_the_cpu() {
    ops_follow_table(Device::Cpu, 1);
}

#[test]
fn ops_follow_a_sample_of_the_table_on_cuda() {
    let _release = common::Release;
    if !genesis::cuda::is_available() {
        eprintln!("CUDA part skipped: no CUDA device found");
        return;
    }
    ops_follow_table(Device::Cuda(0), 7);
}

#[test]
fn narrow_integers_wrap_and_bools_are_logic() {
    let _release = common::Release;
    for dev in common::devices() {
        let u = Tensor::from_slice(&[250u8, 3], [2], dev).unwrap();
        assert_eq!((&u + 10).unwrap().to_vec::<u8>().unwrap(), [4, 13]);
        assert_eq!((&u * &u).unwrap().to_vec::<u8>().unwrap(), [36, 9]);
        assert_eq!(
            (3 - &u.to_dtype(DType::I64).unwrap()).unwrap().dtype(),
            DType::I64
        );
        let i = Tensor::from_slice(&[127i8, -128], [2], dev).unwrap();
        assert_eq!((&i + 1).unwrap().to_vec::<i8>().unwrap(), [-128, -127]);
        assert_eq!(
            i.neg().unwrap().to_vec::<i8>().unwrap(),
            [-127, -128],
            "wraps"
        );
        assert_eq!(
            i.abs().unwrap().to_vec::<i8>().unwrap(),
            [127, -128],
            "wraps"
        );
        assert_eq!(i.exp().unwrap().dtype(), DType::F32);
        let s = Tensor::from_slice(&[300i16, -2], [2], dev).unwrap();
        assert_eq!(
            (&s * 300).unwrap().to_vec::<i16>().unwrap(),
            [(300i16).wrapping_mul(300), -600]
        );
        // uint8 with int8 is int16, as PyTorch.
        let sum = u.add(&i).unwrap();
        assert_eq!(sum.dtype(), DType::I16);
        assert_eq!(sum.to_vec::<i16>().unwrap(), [377, -125]);
        // An int scalar wraps into the result dtype (PyTorch's wrapped number).
        assert_eq!(
            (&u + 256).unwrap().to_vec::<u8>().unwrap(),
            u.to_vec::<u8>().unwrap()
        );
        // Bools: add is "or", mul is "and", comparisons and sums work.
        let m = Tensor::from_bools(&[true, false, true, false], [4], dev).unwrap();
        let n = Tensor::from_bools(&[true, true, false, false], [4], dev).unwrap();
        assert_eq!(
            m.add(&n).unwrap().to_bool_vec().unwrap(),
            [true, true, true, false]
        );
        assert_eq!(
            m.mul(&n).unwrap().to_bool_vec().unwrap(),
            [true, false, false, false]
        );
        assert_eq!(
            m.eq(&n).unwrap().to_bool_vec().unwrap(),
            [true, false, false, true]
        );
        assert_eq!(
            m.ne(true).unwrap().to_bool_vec().unwrap(),
            [false, true, false, true]
        );
        assert!(matches!(m.sub(&n), Err(Error::InvalidArgument { .. })));
        let count = m.sum().unwrap();
        assert_eq!(count.dtype(), DType::I64);
        assert_eq!(count.to_vec::<i64>().unwrap(), [2]);
        assert_eq!(m.sum_dim(0, true).unwrap().shape(), &[1]);
        assert_eq!(m.max().unwrap().to_bool_vec().unwrap(), [true]);
        assert_eq!(m.min().unwrap().to_bool_vec().unwrap(), [false]);
        assert!(m.mean().is_err(), "mean is for floats only, as in PyTorch");
        // max/min/argmax of the narrow integers.
        let x = Tensor::from_slice(&[-5i8, 7, 7, -9], [2, 2], dev).unwrap();
        assert_eq!(x.max().unwrap().to_vec::<i8>().unwrap(), [7]);
        assert_eq!(x.min().unwrap().to_vec::<i8>().unwrap(), [-9]);
        assert_eq!(x.argmax().unwrap().to_vec::<i64>().unwrap(), [1]);
        let (v, ix) = x.max_dim(1, false).unwrap();
        assert_eq!(
            (v.to_vec::<i8>().unwrap(), ix.to_vec::<i64>().unwrap()),
            (vec![7, 7], vec![1, 0])
        );
        assert_eq!(
            x.sum_dim(0, false).unwrap().to_vec::<i64>().unwrap(),
            [2, -2]
        );
        assert_eq!(u.sum().unwrap().to_vec::<i64>().unwrap(), [253]);
    }
}

#[test]
fn division_and_fractional_pow_of_integers_give_float32() {
    let _release = common::Release;
    for dev in common::devices() {
        let a = Tensor::from_slice(&[7i32, -3], [2], dev).unwrap();
        let b = Tensor::from_slice(&[2i64, 4], [2], dev).unwrap();
        let q = a.div(&b).unwrap();
        assert_eq!(q.dtype(), DType::F32);
        assert_eq!(q.to_vec::<f32>().unwrap(), [3.5, -0.75]);
        assert_eq!((&a / 2).unwrap().to_vec::<f32>().unwrap(), [3.5, -1.5]);
        assert_eq!(
            (14 / &a).unwrap().to_vec::<f32>().unwrap(),
            [2.0, -14.0 / 3.0]
        );
        let p = a.pow(0.5).unwrap();
        assert_eq!(p.dtype(), DType::F32);
        assert_eq!(p.to_vec::<f32>().unwrap()[0], 7f32.sqrt());
        let p = a.pow(2).unwrap();
        assert_eq!(
            p.dtype(),
            DType::I32,
            "integer powers of integers stay integers"
        );
        assert_eq!(p.to_vec::<i32>().unwrap(), [49, 9]);
        assert!(a.pow(-2).is_err(), "integers to negative integer powers");
        // An integer tensor against a fraction compares in float32.
        assert_eq!(a.gt(0.5).unwrap().to_bool_vec().unwrap(), [true, false]);
        assert_eq!((&a + 0.5).unwrap().to_vec::<f32>().unwrap(), [7.5, -2.5]);
        // f16 with bf16 is f32.
        let h = Tensor::from_slice(&[genesis::f16::from_f32(1.5)], [1], dev).unwrap();
        let g = Tensor::from_slice(&[genesis::bf16::from_f32(2.0)], [1], dev).unwrap();
        assert_eq!(h.mul(&g).unwrap().to_vec::<f32>().unwrap(), [3.0]);
    }
}

#[test]
fn float64_is_exact_on_the_cpu() {
    let x = Tensor::from_slice(&[0.1f64, 1e-17, f64::NAN, 3.0], [4], Device::Cpu).unwrap();
    let y = Tensor::from_slice(&[0.2f64, 1.0, 1.0, -1.0], [4], Device::Cpu).unwrap();
    let s = (&x + &y).unwrap().to_vec::<f64>().unwrap();
    assert_eq!(s[0], 0.1 + 0.2, "computed in f64, not f32");
    assert_eq!(s[1], 1.0 + 1e-17);
    assert!(s[2].is_nan());
    assert_eq!((&x * 3).unwrap().to_vec::<f64>().unwrap()[0], 0.1 * 3.0);
    assert_eq!(x.div(&y).unwrap().to_vec::<f64>().unwrap()[0], 0.1 / 0.2);
    assert_eq!(x.pow(2.0).unwrap().to_vec::<f64>().unwrap()[3], 9.0);
    assert_eq!(
        x.lt(&y).unwrap().to_bool_vec().unwrap(),
        [true, true, false, false]
    );
    assert!(x.maximum(&y).unwrap().to_vec::<f64>().unwrap()[2].is_nan());
    // Promotions into float64 keep the other operand's values exactly.
    let big = Tensor::from_slice(&[(1i64 << 53) - 1], [1], Device::Cpu).unwrap();
    let d = Tensor::zeros([1], DType::F64, Device::Cpu).unwrap();
    assert_eq!(
        (&big + &d).unwrap().to_vec::<f64>().unwrap(),
        [((1i64 << 53) - 1) as f64]
    );
    // Reductions.
    let v: Vec<f64> = (0..1000).map(|i| 0.1 * i as f64).collect();
    let t = Tensor::from_slice(&v, [10, 100], Device::Cpu).unwrap();
    let want: f64 = v.iter().sum();
    assert_eq!(t.sum().unwrap().to_vec::<f64>().unwrap(), [want]);
    assert_eq!(t.mean().unwrap().to_vec::<f64>().unwrap(), [want / 1000.0]);
    let rows: Vec<f64> = (0..10)
        .map(|r| v[r * 100..(r + 1) * 100].iter().sum())
        .collect();
    assert_eq!(t.sum_dim(1, false).unwrap().to_vec::<f64>().unwrap(), rows);
    let cols = t.sum_dim(0, false).unwrap().to_vec::<f64>().unwrap();
    assert_eq!(cols[3], (0..10).map(|r| v[r * 100 + 3]).sum::<f64>());
    assert_eq!(t.max().unwrap().to_vec::<f64>().unwrap(), [v[999]]);
    assert_eq!(t.argmin().unwrap().to_vec::<i64>().unwrap(), [0]);
    let (m, i) = x.max_dim(0, false).unwrap();
    assert!(m.to_vec::<f64>().unwrap()[0].is_nan(), "NaN propagates");
    assert_eq!(i.to_vec::<i64>().unwrap(), [2], "the first NaN");
}

#[test]
fn float64_on_cuda_computes_in_f64() {
    let _release = common::Release;
    if !genesis::cuda::is_available() {
        eprintln!("CUDA part skipped: no CUDA device found");
        return;
    }
    let dev = Device::Cuda(0);
    let x = Tensor::from_slice(&[0.1f64, 1e-17, 3.0], [3], dev).unwrap();
    let y = Tensor::from_slice(&[0.2f64, 1.0, -1.0], [3], dev).unwrap();
    let s = (&x + &y).unwrap();
    assert_eq!(s.dtype(), DType::F64);
    assert_eq!(s.to_vec::<f64>().unwrap(), [0.1 + 0.2, 1.0 + 1e-17, 2.0]);
    assert_eq!(
        x.div(&y).unwrap().to_vec::<f64>().unwrap(),
        [0.1 / 0.2, 1e-17, -3.0]
    );
    assert_eq!(
        x.gt(1).unwrap().to_bool_vec().unwrap(),
        [false, false, true]
    );
    assert_eq!(
        (&x * 2.0).unwrap().to_vec::<f64>().unwrap(),
        [0.2, 2e-17, 6.0]
    );
    // A sum exact in f64 in any order (and not in f32).
    let t = Tensor::from_slice(&[0.5f64, 2f64.powi(-30), 3.0], [3], dev).unwrap();
    let sum = t.sum().unwrap();
    assert_eq!(sum.dtype(), DType::F64);
    assert_eq!(sum.to_vec::<f64>().unwrap(), [3.5 + 2f64.powi(-30)]);
    // Selection and conversion, as before.
    let c = Tensor::from_bools(&[true, false, true], [3], dev).unwrap();
    let w = Tensor::where_cond(&c, &x, 0).unwrap();
    assert_eq!(w.to_vec::<f64>().unwrap(), [0.1, 0.0, 3.0]);
}

#[test]
fn in_place_ops_cast_into_self_as_pytorch() {
    let _release = common::Release;
    for dev in common::devices() {
        let i = Tensor::from_slice(&[1i32, 2], [2], dev).unwrap();
        // An integer result goes into an int32 tensor (int64 wraps into int32).
        let l = Tensor::from_slice(&[(1i64 << 32) + 5, 1], [2], dev).unwrap();
        i.add_(&l).unwrap();
        assert_eq!(i.dtype(), DType::I32);
        assert_eq!(i.to_vec::<i32>().unwrap(), [6, 3]);
        // A float result does not go into an integer tensor, not even a whole one.
        for r in [
            i.add_(2.0),
            i.add_(&l.to_dtype(DType::F32).unwrap()),
            i.div_(2),
        ] {
            assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
        }
        assert_eq!(
            i.to_vec::<i32>().unwrap(),
            [6, 3],
            "unchanged by the failures"
        );
        // A float tensor takes an integer operand; f16 takes an f32 one (rounded once).
        let h = Tensor::from_slice(&[genesis::f16::from_f32(1.0)], [1], dev).unwrap();
        h.mul_(&Tensor::from_slice(&[3i64], [1], dev).unwrap())
            .unwrap();
        h.add_(&Tensor::from_slice(&[0.25f32], [1], dev).unwrap())
            .unwrap();
        assert_eq!(h.to_vec::<genesis::f16>().unwrap()[0].to_f32(), 3.25);
        // uint8 in place wraps; a bool tensor takes only bools.
        let mut u = Tensor::from_slice(&[255u8, 1], [2], dev).unwrap();
        u += 2;
        assert_eq!(u.to_vec::<u8>().unwrap(), [1, 3]);
        let m = Tensor::from_bools(&[true, false], [2], dev).unwrap();
        assert!(m.add_(1).is_err());
        m.add_(true).unwrap();
        assert_eq!(m.to_bool_vec().unwrap(), [true, true]);
        // The broadcast must give self's shape.
        let small = Tensor::zeros([2], DType::F32, dev).unwrap();
        let wide = Tensor::zeros([3, 2], DType::F16, dev).unwrap();
        assert!(matches!(
            small.add_(&wide),
            Err(Error::ShapeMismatch { .. })
        ));
    }
}

#[test]
fn cat_and_stack_promote_every_pair() {
    let _release = common::Release;
    for dev in common::devices() {
        for &a in &DType::ALL {
            for &b in &DType::ALL {
                let (x, y) = (operand(a, false, dev), operand(b, false, dev));
                let r = promote_types(a, b);
                let what = format!("{a} with {b} on {dev}");
                let c = Tensor::cat(&[&x, &y], 0).unwrap();
                assert_eq!(c.dtype(), r, "cat {what}");
                let want: Vec<f64> = [values(&x), values(&y)]
                    .concat()
                    .into_iter()
                    .map(|v| wrap(v, r))
                    .collect();
                assert_eq!(values(&c), want, "cat {what}");
                let s = Tensor::stack(&[&x, &y, &x], -1).unwrap();
                assert_eq!(s.dtype(), r, "stack {what}");
                assert_eq!(s.shape(), [2, 3], "stack {what}");
                let (vx, vy) = (values(&x), values(&y));
                let want: Vec<f64> = (0..2)
                    .flat_map(|i| [vx[i], vy[i], vx[i]])
                    .map(|v| wrap(v, r))
                    .collect();
                assert_eq!(values(&s), want, "stack {what}");
            }
        }
    }
}

#[test]
fn out_forms_cast_their_result_as_pytorch() {
    let _release = common::Release;
    for dev in common::devices() {
        for &a in &DType::ALL {
            for &b in &DType::ALL {
                let (x, y) = (operand(a, false, dev), operand(b, false, dev));
                for op in [genesis::BinaryOp::Add, genesis::BinaryOp::Div] {
                    let r = x.binary(op, &y).unwrap();
                    for &o in &DType::ALL {
                        let what = format!("{op:?} of {a} and {b} into {o} on {dev}");
                        let mut out = Tensor::zeros([2], o, dev).unwrap();
                        out.fill_(1).unwrap();
                        let got = x.binary_out(op, &y, &mut out);
                        if genesis::can_cast(r.dtype(), o) {
                            got.unwrap_or_else(|e| panic!("{what}: {e}"));
                            assert_eq!(out.dtype(), o, "{what}");
                            // NaN (0 / 0) compared as text.
                            let text = |v: Vec<f64>| format!("{v:?}");
                            let want = values(&r.to_dtype(o).unwrap());
                            assert_eq!(text(values(&out)), text(want), "{what}");
                        } else {
                            assert!(
                                matches!(got, Err(Error::InvalidArgument { .. })),
                                "{what}: {got:?}"
                            );
                            assert_eq!(values(&out), [1.0; 2], "{what}: unchanged");
                        }
                    }
                }
                // Unary ops: their own result dtype, cast into `out`.
                let r = x.unary(genesis::UnaryOp::Neg);
                let mut out = Tensor::zeros([2], DType::F64, dev).unwrap();
                if let Ok(r) = r {
                    x.unary_out(genesis::UnaryOp::Neg, &mut out).unwrap();
                    assert_eq!(values(&out), values(&r), "neg of {a} into f64 on {dev}");
                }
            }
        }
        // `out` on another device, or of another shape, is an error.
        let x = operand(DType::F32, false, dev);
        let mut wrong = Tensor::zeros([3], DType::F64, dev).unwrap();
        assert!(
            x.add_out(&x.to_dtype(DType::F16).unwrap(), &mut wrong)
                .is_err()
        );
        if dev != Device::Cpu {
            let mut host = Tensor::zeros([2], DType::F64, Device::Cpu).unwrap();
            assert!(matches!(
                x.add_out(&x.to_dtype(DType::F16).unwrap(), &mut host),
                Err(Error::DeviceMismatch { .. })
            ));
        }
    }
}

#[test]
fn index_assignment_converts_its_value_as_python() {
    let _release = common::Release;
    for dev in common::devices() {
        // x[1:3] = v converts v (floats truncate toward zero into integers).
        let x = Tensor::zeros([4], DType::I32, dev).unwrap();
        let v = Tensor::from_slice(&[2.75f64, -1.5], [2], dev).unwrap();
        x.index_put_(&genesis::s![1..3], &v, false).unwrap();
        assert_eq!(x.to_vec::<i32>().unwrap(), [0, 2, -1, 0], "{dev}");
        let f = Tensor::zeros([3], DType::F16, dev).unwrap();
        let i = Tensor::from_slice(&[7i64, 9], [2], dev).unwrap();
        f.index_put_(&genesis::s![..2], &i, false).unwrap();
        assert_eq!(values(&f), [7.0, 9.0, 0.0], "{dev}");
        // x[i] += v follows the in-place rule: an integer value into a float tensor is fine,
        // a float value into an integer tensor is an error that writes nothing.
        let idx = Tensor::from_slice(&[0i64, 0, 2], [3], dev).unwrap();
        let ones = Tensor::ones([3], DType::I64, dev).unwrap();
        f.index_put_(&genesis::s![@&idx], &ones, true).unwrap();
        assert_eq!(values(&f), [9.0, 9.0, 1.0], "{dev}");
        assert!(matches!(
            x.index_put_(
                &genesis::s![@&idx],
                &v.narrow(0, 0, 1).unwrap().expand([3]).unwrap(),
                true
            ),
            Err(Error::InvalidArgument { .. })
        ));
        assert_eq!(
            x.to_vec::<i32>().unwrap(),
            [0, 2, -1, 0],
            "{dev}: unchanged"
        );
    }
}

#[test]
fn a_zero_d_host_tensor_joins_ops_on_another_device() {
    let _release = common::Release;
    for dev in common::devices() {
        if dev == Device::Cpu {
            continue;
        }
        // Every pair of dtypes: the 0-d host operand promotes as a 0-d tensor (not as a Python
        // scalar), on either side, and the result lives on the device.
        for &a in &DType::ALL {
            for &b in &DType::ALL {
                let x = operand(a, false, dev);
                let host = operand(b, true, Device::Cpu);
                let moved = host.to(dev).unwrap();
                let what = format!("{a} on {dev} with a 0-d {b} on the host");
                for op in [
                    genesis::BinaryOp::Add,
                    genesis::BinaryOp::Mul,
                    genesis::BinaryOp::Div,
                ] {
                    let want = x.binary(op, &moved);
                    let got = x.binary(op, &host);
                    match (got, want) {
                        (Ok(g), Ok(w)) => {
                            assert_eq!(g.device(), dev, "{what}");
                            assert_eq!(g.dtype(), w.dtype(), "{op:?} {what}");
                            assert_eq!(format!("{:?}", values(&g)), format!("{:?}", values(&w)));
                        }
                        (Err(_), Err(_)) => {}
                        (g, w) => panic!("{op:?} {what}: {g:?} against {w:?}"),
                    }
                    let flipped = host.binary(op, &x).map(|t| (t.device(), t.dtype()));
                    let want = moved.binary(op, &x).map(|t| (t.device(), t.dtype()));
                    assert_eq!(flipped.ok(), want.ok(), "{op:?} flipped {what}");
                }
                let lt = x.compare(genesis::CompareOp::Lt, &host).unwrap();
                assert_eq!(
                    values(&lt),
                    values(&x.compare(genesis::CompareOp::Lt, &moved).unwrap()),
                    "lt {what}"
                );
            }
        }
        // In place, `where` and `out=`.
        let y = Tensor::from_slice(&[1.0f32, 2.0], [2], dev).unwrap();
        let two = Tensor::from_slice(&[2.0f64], (), Device::Cpu).unwrap();
        y.mul_(&two).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), [2.0, 4.0]);
        let cond = y.gt_scalar(3.0).unwrap();
        let w = Tensor::where_cond(&cond, &two, &y).unwrap();
        assert_eq!((w.device(), w.dtype()), (dev, DType::F32));
        assert_eq!(w.to_vec::<f32>().unwrap(), [2.0, 2.0]);
        let mut out = Tensor::zeros([2], DType::F32, dev).unwrap();
        y.add_out(&two, &mut out).unwrap();
        assert_eq!(out.to_vec::<f32>().unwrap(), [4.0, 6.0]);
        // A host tensor of one element that is not 0-d stays an error, as in PyTorch.
        let one = Tensor::from_slice(&[2.0f32], [1], Device::Cpu).unwrap();
        assert!(matches!(y.add(&one), Err(Error::DeviceMismatch { .. })));
    }
}

/// An f32 tensor with an f16 or bf16 one of the same shape (add, sub, mul, either order; the
/// mixed one-pass kernels on contiguous operands) gives exactly the promoted result: the half
/// operand converted to f32 first, then the f32 op; contiguous views that start off 16 bytes
/// and lengths with tails included, on every device.
#[test]
fn f32_with_half_operands_is_the_promoted_op_exactly() {
    let g = genesis::Generator::new(41);
    for dev in common::devices() {
        for half in [DType::F16, DType::BF16] {
            for n in [1usize, 7, 8, 1000, 4099] {
                let a = g.randn([n + 3], DType::F32, dev).unwrap();
                let b = g
                    .randn([n + 1], DType::F32, dev)
                    .unwrap()
                    .to_dtype(half)
                    .unwrap();
                for (a, b) in [
                    (a.narrow(0, 0, n).unwrap(), b.narrow(0, 0, n).unwrap()),
                    (a.narrow(0, 3, n).unwrap(), b.narrow(0, 1, n).unwrap()),
                ] {
                    let bf = b.to_dtype(DType::F32).unwrap();
                    let cases: [(&str, Tensor, Tensor); 6] = [
                        ("a + b", a.add(&b).unwrap(), a.add(&bf).unwrap()),
                        ("b + a", b.add(&a).unwrap(), bf.add(&a).unwrap()),
                        ("a - b", a.sub(&b).unwrap(), a.sub(&bf).unwrap()),
                        ("b - a", b.sub(&a).unwrap(), bf.sub(&a).unwrap()),
                        ("a * b", a.mul(&b).unwrap(), a.mul(&bf).unwrap()),
                        ("b * a", b.mul(&a).unwrap(), bf.mul(&a).unwrap()),
                    ];
                    for (what, got, want) in cases {
                        assert_eq!(got.dtype(), DType::F32, "{what}");
                        let (got, want) =
                            (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
                        let same = got
                            .iter()
                            .zip(&want)
                            .all(|(x, y)| x.to_bits() == y.to_bits());
                        assert!(
                            same,
                            "{what} {half} n {n} on {dev}: {got:?} against {want:?}"
                        );
                    }
                }
            }
        }
    }
}
