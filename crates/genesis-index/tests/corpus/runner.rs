//! The conformance corpus format (`genesis-index-cases v1`) and a runner for it: the same
//! corpus runs against every executor. A dev tool, not library API: the CPU and CUDA
//! conformance tests (through `tests/corpus/mod.rs`) and `examples/conformance.rs` (through
//! `#[path]`) include this file.

use std::sync::Arc;

use genesis_index::{IndexDType, IndexItem, IndexTensor, Value, get, set};
use genesis_storage::{DType, Device, Layout, Storage, View};

/// One failed case: its id and what went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    /// The case's id.
    pub(crate) id: String,
    /// What differed.
    pub(crate) message: String,
}

/// Result of running a corpus.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Report {
    /// Cases that passed.
    pub(crate) passed: usize,
    /// Cases that failed.
    pub(crate) failures: Vec<Failure>,
}

fn dtype_of(name: &str) -> Option<DType> {
    Some(match name {
        "bool" => DType::Bool,
        "uint8" => DType::U8,
        "int8" => DType::I8,
        "int16" => DType::I16,
        "int32" => DType::I32,
        "int64" => DType::I64,
        "float16" => DType::F16,
        "bfloat16" => DType::BF16,
        "float32" => DType::F32,
        "float64" => DType::F64,
        _ => return None,
    })
}

fn shape_of(v: &serde_json::Value) -> Result<Vec<usize>, String> {
    v.as_array()
        .ok_or("shape must be a list")?
        .iter()
        .map(|d| {
            d.as_u64()
                .map(|d| d as usize)
                .ok_or_else(|| "shape entries must be integers".to_string())
        })
        .collect()
}

fn number(v: &serde_json::Value) -> Result<f64, String> {
    match v {
        serde_json::Value::Bool(b) => Ok(f64::from(u8::from(*b))),
        v => v.as_f64().ok_or_else(|| format!("{v} is not a number")),
    }
}

/// A storage of `dtype` holding `values` (converted from f64).
fn storage_of(values: &[f64], dtype: DType) -> Result<Storage, String> {
    let s = Storage::from_slice(values, Device::Cpu).map_err(|e| e.to_string())?;
    s.to_dtype(dtype).map_err(|e| e.to_string())
}

fn parse_item(v: &serde_json::Value) -> Result<IndexItem, String> {
    let o = v.as_object().ok_or("index items are objects")?;
    if let Some(i) = o.get("int") {
        return i
            .as_i64()
            .map(IndexItem::Int)
            .ok_or_else(|| "int must be an integer".into());
    }
    if let Some(s) = o.get("slice") {
        let a = s.as_array().ok_or("slice is [start, stop, step]")?;
        let get = |k: usize| a.get(k).and_then(serde_json::Value::as_i64);
        return Ok(IndexItem::Slice {
            start: get(0),
            stop: get(1),
            step: get(2),
        });
    }
    if o.contains_key("none") {
        return Ok(IndexItem::NewAxis);
    }
    if o.contains_key("ellipsis") {
        return Ok(IndexItem::Ellipsis);
    }
    if let Some(t) = o.get("tensor") {
        let shape = shape_of(&t["shape"])?;
        let data = t["data"].as_array().ok_or("tensor data must be a list")?;
        return Ok(match t["dtype"].as_str().unwrap_or("") {
            "int64" | "int32" => {
                let dt = if t["dtype"] == "int32" {
                    IndexDType::I32
                } else {
                    IndexDType::I64
                };
                let vals = data
                    .iter()
                    .map(|x| x.as_i64().ok_or("index values must be integers"))
                    .collect::<Result<Vec<_>, _>>()?;
                IndexItem::Tensor(IndexTensor {
                    dtype: dt,
                    shape,
                    data: vals,
                })
            }
            "bool" => {
                let vals = data
                    .iter()
                    .map(|x| {
                        x.as_bool()
                            .map(i64::from)
                            .ok_or("mask values must be booleans")
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                IndexItem::Tensor(IndexTensor {
                    dtype: IndexDType::Bool,
                    shape,
                    data: vals,
                })
            }
            "float32" => IndexItem::BadTensor("float32"),
            "float64" => IndexItem::BadTensor("float64"),
            other => return Err(format!("unknown index tensor dtype {other:?}")),
        });
    }
    Err(format!("unknown index item {v}"))
}

/// The elements of a view in row-major order, read on the host by walking its layout over the
/// whole storage (any rank; independent of the executor's copies).
fn read_view(v: &View) -> Result<Vec<f64>, genesis_storage::Error> {
    let all = v.storage().to_f64_vec()?;
    let layout = v.layout();
    let (shape, strides) = (layout.shape(), layout.strides());
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..n {
        let at = idx
            .iter()
            .zip(strides)
            .fold(layout.offset() as isize, |a, (&i, &s)| a + i as isize * s);
        out.push(all[at as usize]);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(out)
}

/// Runs one case on `device`; `Ok(())` if it behaved as expected.
fn run_case(case: &serde_json::Value, device: Device) -> Result<(), String> {
    let input = &case["input"];
    let shape = shape_of(&input["shape"])?;
    let dtype = dtype_of(input["dtype"].as_str().unwrap_or("")).ok_or("unknown input dtype")?;
    let n: usize = shape.iter().product();
    let values: Vec<f64> = (0..n)
        .map(|i| {
            if dtype == DType::Bool {
                f64::from(u8::from(i % 3 == 0))
            } else {
                i as f64
            }
        })
        .collect();
    let storage = storage_of(&values, dtype)?
        .to_device(device)
        .map_err(|e| e.to_string())?;
    let items = case["index"]
        .as_array()
        .ok_or("index must be a list")?
        .iter()
        .map(parse_item)
        .collect::<Result<Vec<_>, _>>()?;
    let expected_error = case.get("error").and_then(serde_json::Value::as_str);
    let layout = Layout::contiguous(&shape);
    let outcome: Result<(Vec<usize>, Vec<f64>, bool), genesis_index::Error> =
        match case["op"].as_str() {
            Some("get") => {
                let base = View::with_layout(Arc::new(storage), layout.clone())
                    .map_err(|e| e.to_string())?;
                get(&base, &items).and_then(|v| {
                    let shares = v.shares_storage(&base);
                    let data = read_view(&v)?;
                    Ok((v.layout().shape().to_vec(), data, shares))
                })
            }
            Some("set") => {
                let mut target = storage;
                let value_spec = &case["value"];
                let accumulate = case
                    .get("accumulate")
                    .and_then(serde_json::Value::as_bool)
                    .unwrap_or(false);
                let before = target.to_f64_vec().map_err(|e| e.to_string())?;
                let r = if let Some(x) = value_spec.get("scalar") {
                    set(
                        &mut target,
                        &layout,
                        &items,
                        Value::Scalar(number(x)?),
                        accumulate,
                    )
                } else {
                    let vshape = shape_of(&value_spec["shape"])?;
                    let vdata = value_spec["data"]
                        .as_array()
                        .ok_or("value data must be a list")?
                        .iter()
                        .map(number)
                        .collect::<Result<Vec<_>, _>>()?;
                    let vs = storage_of(&vdata, dtype)?
                        .to_device(device)
                        .map_err(|e| e.to_string())?;
                    let v = View::with_layout(Arc::new(vs), Layout::contiguous(&vshape))
                        .map_err(|e| e.to_string())?;
                    set(&mut target, &layout, &items, Value::Tensor(&v), accumulate)
                };
                let after = target.to_f64_vec().map_err(|e| e.to_string())?;
                if r.is_err() && after != before {
                    return Err("the target changed although the assignment failed".into());
                }
                r.map(|()| (shape.clone(), after, false))
            }
            other => return Err(format!("unknown op {other:?}")),
        };
    match (outcome, expected_error) {
        (Err(e), Some(kind)) if e.kind() == kind => Ok(()),
        (Err(e), Some(kind)) => Err(format!("expected error {kind}, got {} ({e})", e.kind())),
        (Err(e), None) => Err(format!("unexpected error: {e}")),
        (Ok(_), Some(kind)) => Err(format!("expected error {kind}, got a result")),
        (Ok((shape, data, shares)), None) => {
            let exp = &case["expected"];
            let eshape = shape_of(&exp["shape"])?;
            let edata = exp["data"]
                .as_array()
                .ok_or("expected data must be a list")?
                .iter()
                .map(number)
                .collect::<Result<Vec<_>, _>>()?;
            if shape != eshape {
                return Err(format!("shape {shape:?}, expected {eshape:?}"));
            }
            if data != edata {
                return Err(format!("data {data:?}, expected {edata:?}"));
            }
            if case.get("view").and_then(serde_json::Value::as_bool) == Some(true) && !shares {
                return Err("expected a view sharing the input's storage".into());
            }
            Ok(())
        }
    }
}

/// Runs every case of a corpus document on `device`.
pub(crate) fn run_corpus(doc: &serde_json::Value, device: Device) -> Result<Report, String> {
    let cases = doc
        .get("cases")
        .and_then(serde_json::Value::as_array)
        .ok_or("a corpus has a `cases` list")?;
    let mut report = Report::default();
    for (i, case) in cases.iter().enumerate() {
        let id = case
            .get("id")
            .and_then(serde_json::Value::as_str)
            .map_or_else(|| format!("#{i}"), str::to_string);
        match run_case(case, device) {
            Ok(()) => report.passed += 1,
            Err(message) => report.failures.push(Failure { id, message }),
        }
    }
    Ok(report)
}
