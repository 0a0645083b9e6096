//! genesis-nn's optimisers and `clip_grad_norm_` against PyTorch on random cases
//! (`tests/gen_optim_cases.py` wrote them with PyTorch in float64; see its docstring): the
//! parameters after every step, and the norm clipping returns, in float64 and float32; a typed
//! error where PyTorch refuses the hyper-parameters. `data/optim-heldout.json.gz` was generated
//! with another seed and not looked at while the first set's failures were fixed.

mod common;

use common::{assert_all, far, floats, tensor, values};
use genesis::{DType, Device, Tensor};
use genesis_nn::optim::{Adam, Optimizer, Sgd, clip_grad_norm_};
use serde_json::Value;

const FORMAT: &str = "genesis-optim-cases v1";

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
            .map(|p| tensor(p, dtype, Device::Cpu).requires_grad_(true).unwrap())
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
                let g = (!g.is_null()).then(|| tensor(g, dtype, Device::Cpu));
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
                if let Some(i) = far(&got, &want, rtol, atol) {
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

fn check(name: &str, dtype: DType) {
    assert_all(name, FORMAT, &dtype.to_string(), |cases| run(cases, dtype));
}

#[test]
fn optimisers_match_pytorch_in_f64() {
    check("optim-cases.json.gz", DType::F64);
    check("optim-heldout.json.gz", DType::F64);
}

#[test]
fn optimisers_match_pytorch_in_f32() {
    check("optim-cases.json.gz", DType::F32);
    check("optim-heldout.json.gz", DType::F32);
}
