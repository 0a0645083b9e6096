//! Gradients against PyTorch's autograd: random cases of the differentiable ops (unary math,
//! broadcasting arithmetic, reductions with ties, sorts, scans, norms and moments, clamp,
//! `where`, indexing and the composite ops), with float64 inputs (and float32, float16 or
//! bfloat16 ones, whose gradients are compared within that dtype's rounding and must come in
//! it) drawn to land where a gradient is a convention rather than a limit (zeros, ties, the
//! bounds of `clamp`, `-inf`, NaN, a single element under a correction, repeated positions),
//! written with PyTorch's gradients of `(out * w).sum()` by `tests/gen_grad_cases.py` and
//! committed as `tests/data/grad-cases.json.gz`, plus an independently seeded held-out set
//! (`grad-heldout.json.gz`). Each case runs the op through the same interpreter as the
//! forward corpora, on the CPU and, when a device is present, on CUDA device 0, and compares
//! every input's gradient with PyTorch's.
//!
//! Regenerate (needs PyTorch, its CPU build will do, and NumPy):
//!
//! ```sh
//! cd crates/genesis/tests
//! python3 gen_grad_cases.py --seed 71 --count 8000 --out data/grad-cases.json.gz
//! python3 gen_grad_cases.py --seed 1071 --count 2500 --out data/grad-heldout.json.gz
//! ```

mod common;
// The interpreter's comparison of forward results is not used here.
#[allow(dead_code)]
#[path = "common/facade.rs"]
mod facade;

use std::collections::BTreeMap;

use genesis::{DType, Device, Tensor};
use serde_json::Value;

/// Whether `got` is `want` within float64's rounding of a short computation: NaN only for NaN,
/// infinities exactly, the sign of a zero not compared.
fn close(got: f64, want: f64, dtype: DType) -> bool {
    if got.is_nan() || want.is_nan() {
        return got.is_nan() && want.is_nan();
    }
    if got.is_infinite() || want.is_infinite() {
        return got == want;
    }
    let (atol, rtol) = match dtype {
        DType::F64 => (1e-10, 1e-8),
        DType::F32 => (1e-6, 1e-5),
        DType::F16 => (2e-3, 2e-2),
        _ => (2e-2, 5e-2),
    };
    (got - want).abs() <= atol + rtol * want.abs()
}

fn values(t: &Tensor) -> Result<Vec<f64>, String> {
    t.to_dtype(DType::F64)
        .and_then(|t| t.to_vec::<f64>())
        .map_err(|e| format!("reading a gradient: {e}"))
}

fn run_case(case: &Value, device: Device) -> Result<(), String> {
    let leaves: Vec<Tensor> = facade::inputs(case, device)
        .and_then(|ts| {
            ts.into_iter()
                .map(|t| {
                    if t.dtype().is_float() {
                        t.requires_grad_(true)
                    } else {
                        Ok(t)
                    }
                })
                .collect()
        })
        .map_err(|e| format!("inputs: {e}"))?;
    let out = facade::run_with(case, &leaves, device).map_err(|e| format!("forward: {e}"))?;
    let w = facade::tensor(&case["w"], device).map_err(|e| format!("weight: {e}"))?;
    out[0]
        .mul(&w)
        .and_then(|p| p.sum())
        .and_then(|l| l.backward())
        .map_err(|e| format!("backward: {e}"))?;
    // With a narrower float operand PyTorch forms parts of a float64 operand's gradient in
    // the narrower dtype too (pow's `log(base)` of a float32 base): every gradient is then
    // compared at the narrowest operand's tolerance.
    let looseness = |d: DType| {
        [DType::F64, DType::F32, DType::F16, DType::BF16]
            .iter()
            .position(|&x| x == d)
    };
    let tol_dtype = leaves
        .iter()
        .map(|t| t.dtype())
        .filter(|&d| looseness(d).is_some())
        .max_by_key(|&d| looseness(d))
        .unwrap_or(DType::F64);
    let wants = case["grads"].as_array().expect("grads");
    let mut diffs = Vec::new();
    for (i, (leaf, want)) in leaves.iter().zip(wants).enumerate() {
        let want = match want {
            Value::Null => None,
            w => Some(values(
                &facade::tensor(w, Device::Cpu).map_err(|e| format!("expected: {e}"))?,
            )?),
        };
        let got = leaf.grad().map(|g| values(&g)).transpose()?;
        match (got, want) {
            (None, None) => {}
            (Some(g), None) | (None, Some(g)) if g.iter().all(|&v| v == 0.0) => {}
            (Some(g), None) => diffs.push(format!("input {i}: gradient {g:?}, PyTorch none")),
            (None, Some(w)) => diffs.push(format!("input {i}: no gradient, PyTorch {w:?}")),
            (Some(g), Some(w)) => {
                let dtype = leaf.dtype();
                let gd = leaf.grad().map(|g| g.dtype());
                if gd != Some(dtype) {
                    diffs.push(format!(
                        "input {i}: gradient of dtype {gd:?} for a {dtype} input"
                    ));
                }
                if g.len() != w.len() || g.iter().zip(&w).any(|(&a, &b)| !close(a, b, tol_dtype)) {
                    diffs.push(format!("input {i}: gradient {g:?}\n      PyTorch  {w:?}"));
                }
            }
        }
    }
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(diffs.join("\n    "))
    }
}

fn run_file(file: &str, device: Device) -> Vec<String> {
    let cases = facade::load_format(file, "genesis-grad-cases v1");
    let mut failures = Vec::new();
    let mut tally: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for case in &cases {
        let t = tally.entry(facade::family(case).to_string()).or_default();
        t.0 += 1;
        match run_case(case, device) {
            Ok(()) => t.1 += 1,
            Err(diff) => failures.push(format!(
                "{} [{device}] {} args {}\n    {}",
                facade::id(case),
                facade::describe(case),
                case["args"],
                diff
            )),
        }
    }
    let (n, ok): (usize, usize) = tally.values().fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    eprintln!("{file} on {device}: {ok} of {n} cases pass");
    for (fam, (n, ok)) in &tally {
        if ok != n {
            eprintln!("    {fam:<18} {ok:>5} / {n}");
        }
    }
    failures
}

fn run_all(file: &str) {
    common::run_corpus(file, run_file);
}

#[test]
fn gradients_match_pytorch() {
    run_all("grad-cases.json.gz");
}

#[test]
fn held_out_gradients_match_pytorch() {
    run_all("grad-heldout.json.gz");
}
