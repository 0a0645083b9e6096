//! Ops between a tensor and a number against PyTorch: `tests/data/scalar-cases.json.gz`
//! (written by `gen_scalar_cases.py` from PyTorch on the CPU and on CUDA) holds, for every
//! dtype, Python bools, ints and floats in and out of each dtype's range and each op that takes
//! a number (arithmetic both ways round, `pow`, comparisons, `maximum`/`minimum`,
//! `clamp_min`/`clamp_max`, `where`, `masked_fill`, `full_like`, and the in-place forms),
//! PyTorch's result dtype and values or its refusal. Every case runs on the CPU and on CUDA
//! device 0 when there is one.
//!
//! Where PyTorch's two devices disagree (its CUDA division by a number multiplies by the
//! reciprocal; its CPU refuses a float16 bound its CUDA kernels take as infinity), either answer
//! is accepted. Values must be bit-equal (NaN payloads aside; the sign of zero counts), but for
//! `pow` of floats, which may differ in the last bits (the kernels' documented bound), and a
//! number divided by a tensor, which PyTorch computes as `t.reciprocal() * s` and Genesis as
//! one correctly rounded division.

#[allow(dead_code)]
mod common;

use std::collections::BTreeMap;
use std::io::Read;

use genesis::{DType, Device, Result, Scalar, Tensor};
use serde_json::Value;

fn cases() -> Value {
    let gz = include_bytes!("data/scalar-cases.json.gz");
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .unwrap();
    serde_json::from_str(&text).unwrap()
}

use common::short_dtype as dtype;

fn float(v: &Value) -> f64 {
    match v {
        Value::String(s) if s == "nan" => f64::NAN,
        Value::String(s) if s == "inf" => f64::INFINITY,
        Value::String(s) if s == "-inf" => f64::NEG_INFINITY,
        v => v.as_f64().unwrap(),
    }
}

/// A number as PyTorch's Python number: `int` as `i64`, `float` as `f64`, `bool` as `bool`.
#[derive(Debug, Clone, Copy)]
enum Number {
    Int(i64),
    Float(f64),
    Bool(bool),
}

fn number(v: &Value) -> Number {
    if let Some(b) = v.get("bool") {
        Number::Bool(b.as_bool().unwrap())
    } else if let Some(i) = v.get("int") {
        Number::Int(i.as_i64().unwrap())
    } else {
        Number::Float(float(&v["float"]))
    }
}

/// The case's input tensor, made exactly in its dtype on `device`.
fn input(case: &Value, device: Device) -> Tensor {
    let d = dtype(case["dtype"].as_str().unwrap());
    let vals = case["input"].as_array().unwrap();
    let t = match d {
        DType::Bool => {
            let b: Vec<bool> = vals.iter().map(|v| v.as_bool().unwrap()).collect();
            Tensor::from_bools(&b, [b.len()], Device::Cpu).unwrap()
        }
        d if d.is_float() => {
            let f: Vec<f64> = vals.iter().map(float).collect();
            Tensor::from_slice(&f, [f.len()], Device::Cpu)
                .unwrap()
                .to_dtype(d)
                .unwrap()
        }
        d => {
            let i: Vec<i64> = vals.iter().map(|v| v.as_i64().unwrap()).collect();
            Tensor::from_slice(&i, [i.len()], Device::Cpu)
                .unwrap()
                .to_dtype(d)
                .unwrap()
        }
    };
    t.to(device).unwrap()
}

fn mask(device: Device) -> Tensor {
    let m = [true, false, true, true, false, false, true, false];
    Tensor::from_bools(&m, [8], device).unwrap()
}

/// `op(t, s)` through the facade, as the generator's `OPS` define them.
fn apply<S: Scalar>(op: &str, t: &Tensor, s: S) -> Option<Result<Tensor>> {
    let in_place = |r: Result<()>| r.map(|()| t.clone());
    let m = mask(t.device());
    Some(match op {
        "add" => t.add(s),
        "sub" => t.sub(s),
        "mul" => t.mul(s),
        "div" => t.div(s),
        "pow" => t.pow(s),
        "eq" => t.eq(s),
        "ne" => t.ne(s),
        "lt" => t.lt(s),
        "le" => t.le(s),
        "gt" => t.gt(s),
        "ge" => t.ge(s),
        "maximum" => t.maximum(s),
        "minimum" => t.minimum(s),
        "clamp_min" => t.clamp_min(s),
        "clamp_max" => t.clamp_max(s),
        "where_a" => Tensor::where_cond(&m, t, s),
        "where_b" => Tensor::where_cond(&m, s, t),
        "masked_fill" => t.masked_fill(&m, s),
        "full_like" => t.full_like(s),
        "add_" => in_place(t.add_(s)),
        "sub_" => in_place(t.sub_(s)),
        "mul_" => in_place(t.mul_(s)),
        "div_" => in_place(t.div_(s)),
        "fill_" => in_place(t.fill_(s)),
        "masked_fill_" => in_place(t.masked_fill_(&m, s)),
        _ => return None,
    })
}

/// A number on the left: only `f64` and `i64` have operators there (`2.0 - &t`).
fn apply_left(op: &str, t: &Tensor, n: Number) -> Option<Result<Tensor>> {
    Some(match (op, n) {
        ("rsub", Number::Int(i)) => i - t,
        ("rsub", Number::Float(f)) => f - t,
        ("radd", Number::Int(i)) => i + t,
        ("radd", Number::Float(f)) => f + t,
        ("rmul", Number::Int(i)) => i * t,
        ("rmul", Number::Float(f)) => f * t,
        ("rdiv", Number::Int(i)) => i / t,
        ("rdiv", Number::Float(f)) => f / t,
        _ => return None,
    })
}

fn run(op: &str, t: &Tensor, n: Number) -> Option<Result<Tensor>> {
    if op.starts_with('r') {
        return apply_left(op, t, n);
    }
    match n {
        Number::Int(i) => apply(op, t, i),
        Number::Float(f) => apply(op, t, f),
        Number::Bool(b) => apply(op, t, b),
    }
}

/// The result as PyTorch's case writes it: its dtype's name and its values.
fn observed(t: &Tensor) -> (DType, Vec<Value>) {
    let d = t.dtype();
    let cpu = t.to(Device::Cpu).unwrap();
    let vals = match d {
        DType::Bool => cpu
            .to_bool_vec()
            .unwrap()
            .into_iter()
            .map(Value::from)
            .collect(),
        d if d.is_float() => cpu
            .to_dtype(DType::F64)
            .unwrap()
            .to_vec::<f64>()
            .unwrap()
            .into_iter()
            .map(|f| {
                if f.is_nan() {
                    Value::from("nan")
                } else if f.is_infinite() {
                    Value::from(if f > 0.0 { "inf" } else { "-inf" })
                } else {
                    Value::from(f)
                }
            })
            .collect(),
        _ => cpu
            .to_dtype(DType::I64)
            .unwrap()
            .to_vec::<i64>()
            .unwrap()
            .into_iter()
            .map(Value::from)
            .collect(),
    };
    (d, vals)
}

/// Whether `got` is PyTorch's `want` (values bit-equal, but within a few units in the last
/// place of the dtype for float `pow`).
fn matches(op: &str, got: &Result<Tensor>, want: &Value) -> bool {
    let (t, want_vals) = match (got, want.get("error")) {
        (Err(_), Some(_)) => return true,
        (Ok(_), Some(_)) | (Err(_), None) => return false,
        (Ok(t), None) => (t, want["values"].as_array().unwrap()),
    };
    let want_dtype = dtype(want["dtype"].as_str().unwrap());
    let (d, vals) = observed(t);
    if d != want_dtype || vals.len() != want_vals.len() {
        return false;
    }
    vals.iter().zip(want_vals).all(|(g, w)| {
        if !d.is_float() {
            return g == w;
        }
        let (g, w) = (float(g), float(w));
        if g.is_nan() || w.is_nan() {
            return g.is_nan() && w.is_nan();
        }
        if g.to_bits() == w.to_bits() {
            return true;
        }
        // PyTorch computes `s / t` as `t.reciprocal() * s` (two roundings); Genesis divides
        // once, correctly rounded: they differ in the last bits.
        if (op == "pow" || op == "rdiv") && g.is_finite() && w.is_finite() {
            let eps = match d {
                DType::F16 => 2f64.powi(-10),
                DType::BF16 => 2f64.powi(-7),
                DType::F32 => 2f64.powi(-23),
                _ => 2f64.powi(-52),
            };
            return (g - w).abs() <= 4.0 * eps * w.abs().max(f64::MIN_POSITIVE);
        }
        false
    })
}

fn check_device(device: Device) {
    let doc = cases();
    let mut failures: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let mut ran = 0;
    for case in doc["cases"].as_array().unwrap() {
        let op = case["op"].as_str().unwrap();
        let n = number(&case["scalar"]);
        let t = input(case, device);
        let Some(got) = run(op, &t, n) else {
            continue;
        };
        ran += 1;
        let ok = matches(op, &got, &case["expected"])
            || case
                .get("expected_cuda")
                .is_some_and(|w| matches(op, &got, w));
        if !ok {
            let kind = match n {
                Number::Int(_) => "int",
                Number::Float(_) => "float",
                Number::Bool(_) => "bool",
            };
            let key = format!("{op} {} {kind}", case["dtype"].as_str().unwrap());
            let shown = match &got {
                Ok(t) => format!("{:?} {:?}", t.dtype(), observed(t).1),
                Err(e) => format!("error {e}"),
            };
            let e = failures.entry(key).or_insert((0, String::new()));
            if e.0 == 0 {
                e.1 = format!(
                    "scalar {n:?} input {} -> got {shown}, PyTorch {}",
                    case["input"], case["expected"]
                );
            }
            e.0 += 1;
        }
    }
    assert!(ran > 20_000, "only {ran} cases ran");
    let report: Vec<String> = failures
        .iter()
        .map(|(k, (n, first))| format!("{k}: {n} cases, e.g. {first}"))
        .collect();
    assert!(
        failures.is_empty(),
        "{} kinds of case differ from PyTorch on {device}:\n{}",
        failures.len(),
        report.join("\n")
    );
}

#[test]
fn numbers_follow_pytorch_on_the_cpu() {
    check_device(Device::Cpu);
}

#[test]
fn numbers_follow_pytorch_on_cuda() {
    let _release = common::Release;
    if common::devices().len() > 1 {
        check_device(Device::Cuda(0));
    }
}
