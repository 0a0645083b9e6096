//! What the PyTorch-oracle case tests (`loss_cases`, `optim_cases`, `module_cases`) share: the
//! gzipped case files of `gen_*_cases.py`, their tensor encoding (`gen_cases.enc`), and the
//! comparison.

use std::io::Read;

use genesis::{DType, Device, Tensor};
use serde_json::Value;

/// The cases of `tests/data/{name}`, whose format must be `format`.
pub(crate) fn load(name: &str, format: &str) -> Vec<Value> {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&path).expect("the cases"))
        .read_to_string(&mut text)
        .expect("gzip");
    let doc: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(doc["format"], format, "{name}");
    doc["cases"].as_array().expect("cases").clone()
}

/// A float of the encoding: a JSON number, or "nan", "inf", "-inf".
fn num(v: &Value) -> f64 {
    match v {
        Value::String(s) => match s.as_str() {
            "nan" => f64::NAN,
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            other => panic!("number {other}"),
        },
        v => v.as_f64().expect("a number"),
    }
}

/// A tensor's shape.
pub(crate) fn shape(t: &Value) -> Vec<usize> {
    let sh = t["sh"].as_array().expect("shape");
    sh.iter()
        .map(|d| d.as_u64().expect("dim") as usize)
        .collect()
}

/// A float tensor's data.
pub(crate) fn floats(t: &Value) -> Vec<f64> {
    t["d"].as_array().expect("data").iter().map(num).collect()
}

/// The tensor `t` on `device`: int64 as it is, floats in `dtype`.
pub(crate) fn tensor(t: &Value, dtype: DType, device: Device) -> Tensor {
    let sh = shape(t);
    if t["dt"] == "i64" {
        let d: Vec<i64> = t["d"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        return Tensor::from_slice(&d, &sh[..], device).unwrap();
    }
    Tensor::from_slice(&floats(t), &sh[..], device)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

/// `t`'s values as f64.
pub(crate) fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

/// The first element of `got` off `want` (or `usize::MAX` for another length): NaN must meet
/// NaN, an infinity itself, and a finite value be within `rtol |want| + atol`.
pub(crate) fn far(got: &[f64], want: &[f64], rtol: f64, atol: f64) -> Option<usize> {
    if got.len() != want.len() {
        return Some(usize::MAX);
    }
    let ok = |g: f64, w: f64| {
        if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= rtol * w.abs() + atol
        }
    };
    (0..got.len()).find(|&i| !ok(got[i], want[i]))
}

/// Asserts that `run` finds no failure in the cases of `name` (of `format`); `what` names the
/// run (dtype, device) in the message, which shows the first failures.
pub(crate) fn assert_all(
    name: &str,
    format: &str,
    what: &str,
    run: impl Fn(&[Value]) -> Vec<String>,
) {
    let cases = load(name, format);
    let failures = run(&cases);
    assert!(
        failures.is_empty(),
        "{} of {} cases of {name} ({what}) fail; the first:\n{}",
        failures.len(),
        cases.len(),
        failures
            .iter()
            .take(12)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
