//! genesis-nn's optimisers and `clip_grad_norm_` against PyTorch on random cases
//! (`tests/gen_optim_cases.py` wrote them with PyTorch in float64; see its docstring): the
//! parameters after every step, and the norm clipping returns, in float64 and float32; a typed
//! error where PyTorch refuses the hyper-parameters. `data/optim-heldout.json.gz` was generated
//! with another seed and not looked at while the first set's failures were fixed.

use std::io::Read;

use genesis::{DType, Device, Tensor};
use genesis_nn::optim::{Adam, Optimizer, Sgd, clip_grad_norm_};
use serde_json::Value;

fn load(name: &str) -> Vec<Value> {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&path).expect("the cases"))
        .read_to_string(&mut text)
        .expect("gzip");
    let doc: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(doc["format"], "genesis-optim-cases v1");
    doc["cases"].as_array().expect("cases").clone()
}

fn shape(t: &Value) -> Vec<usize> {
    let sh = t["sh"].as_array().expect("shape");
    sh.iter()
        .map(|d| d.as_u64().expect("dim") as usize)
        .collect()
}

fn floats(t: &Value) -> Vec<f64> {
    let d = t["d"].as_array().expect("data");
    d.iter().map(|v| v.as_f64().expect("a number")).collect()
}

fn tensor(t: &Value, dtype: DType) -> Tensor {
    Tensor::from_slice(&floats(t), &shape(t)[..], Device::Cpu)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

/// The case's optimiser over `params`.
fn optimiser(case: &Value, params: Vec<Tensor>) -> Box<dyn Optimizer> {
    let hp = &case["hp"];
    let f = |k: &str| hp[k].as_f64().expect(k);
    match case["opt"].as_str().expect("opt") {
        "sgd" => {
            let mut o = Sgd::new(params, f("lr"));
            o.momentum = f("momentum");
            o.dampening = f("dampening");
            o.weight_decay = f("weight_decay");
            o.nesterov = hp["nesterov"].as_bool().expect("nesterov");
            Box::new(o)
        }
        name => {
            let mut o = if name == "adam" {
                Adam::new(params, f("lr"))
            } else {
                Adam::adamw(params, f("lr"))
            };
            let b = hp["betas"].as_array().expect("betas");
            o.betas = (b[0].as_f64().unwrap(), b[1].as_f64().unwrap());
            o.eps = f("eps");
            o.weight_decay = f("weight_decay");
            Box::new(o)
        }
    }
}

fn close(got: &[f64], want: &[f64], rtol: f64, atol: f64) -> Option<usize> {
    if got.len() != want.len() {
        return Some(usize::MAX);
    }
    // Written so that NaN fails.
    let within = |i: usize| (got[i] - want[i]).abs() <= rtol * want[i].abs() + atol;
    (0..got.len()).find(|&i| !within(i))
}

/// Runs every case in `dtype`; the failures, described.
fn run(cases: &[Value], dtype: DType) -> Vec<String> {
    let (rtol, atol) = match dtype {
        DType::F64 => (1e-10, 1e-12),
        _ => (1e-5, 1e-6),
    };
    let mut failures = Vec::new();
    for case in cases {
        let id = case["id"].as_str().unwrap();
        let params: Vec<Tensor> = case["params"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| tensor(p, dtype).requires_grad_(true).unwrap())
            .collect();
        let mut opt = optimiser(case, params.clone());
        if let Some(why) = case.get("err") {
            for p in &params {
                p.set_grad(Some(p.zeros_like().unwrap())).unwrap();
            }
            if opt.step().is_ok() {
                failures.push(format!("{id}: PyTorch refuses ({why}); the step ran"));
            }
            continue;
        }
        let clip = case["clip"].as_f64();
        'steps: for (s, step) in case["steps"].as_array().unwrap().iter().enumerate() {
            for (p, g) in params.iter().zip(step["grads"].as_array().unwrap()) {
                let g = (!g.is_null()).then(|| tensor(g, dtype));
                p.set_grad(g).unwrap();
            }
            if let Some(max) = clip {
                let norm = clip_grad_norm_(&params, max).unwrap();
                let want = step["norm"].as_f64();
                let got = norm.map(|n| values(&n)[0]);
                let ok = match (got, want) {
                    (Some(g), Some(w)) => (g - w).abs() <= rtol * w.abs() + atol,
                    (None, None) => true,
                    _ => false,
                };
                if !ok {
                    failures.push(format!("{id} step {s}: norm {got:?} want {want:?}"));
                    break 'steps;
                }
            }
            if let Err(e) = opt.step() {
                failures.push(format!("{id} step {s}: {e}"));
                break 'steps;
            }
            for (k, (p, want)) in params
                .iter()
                .zip(step["after"].as_array().unwrap())
                .enumerate()
            {
                let (got, want) = (values(p), floats(want));
                if let Some(i) = close(&got, &want, rtol, atol) {
                    failures.push(format!(
                        "{id} step {s} param {k}[{i}]: {:?} want {:?}",
                        got.get(i),
                        want.get(i)
                    ));
                    break 'steps;
                }
            }
        }
    }
    failures
}

fn assert_all(name: &str, dtype: DType) {
    let cases = load(name);
    let failures = run(&cases, dtype);
    assert!(
        failures.is_empty(),
        "{} of {} cases of {name} ({dtype}) fail; the first:\n{}",
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

#[test]
fn optimisers_match_pytorch_in_f64() {
    assert_all("optim-cases.json.gz", DType::F64);
    assert_all("optim-heldout.json.gz", DType::F64);
}

#[test]
fn optimisers_match_pytorch_in_f32() {
    assert_all("optim-cases.json.gz", DType::F32);
    assert_all("optim-heldout.json.gz", DType::F32);
}
