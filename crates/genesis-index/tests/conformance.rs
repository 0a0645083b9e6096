//! The conformance corpora (the shared one and extra cases generated with NumPy as the oracle,
//! `tests/gen_extra_cases.py`) on the CPU executor.

use genesis_storage::Device;

mod corpus;

fn run(file: &str) {
    let doc = corpus::load(file);
    let report = corpus::runner::run_corpus(&doc, Device::Cpu).unwrap();
    let n = doc["cases"].as_array().unwrap().len();
    assert!(n > 0);
    for f in &report.failures {
        eprintln!("FAIL {}: {}", f.id, f.message);
    }
    assert!(
        report.failures.is_empty(),
        "{} of {n} cases failed in {file}",
        report.failures.len()
    );
    assert_eq!(report.passed, n);
}

#[test]
fn shared_corpus_on_cpu() {
    run("index-cases.json");
}

#[test]
fn numpy_generated_extra_cases_on_cpu() {
    run("extra-cases.json");
}

/// Random cases with NumPy as the oracle (`tests/gen_random_cases.py --seed 16`): leading-1
/// values, empty ellipses between advanced indices, ranks up to 64, empty index arrays, every
/// dtype, zero-size dimensions, assignment with accumulate, and one injected fault in some.
#[test]
fn numpy_random_cases_on_cpu() {
    run("random-cases.json.gz");
}

/// The held-out set: generated independently (`--seed 1016`), not looked at while fixing.
#[test]
fn numpy_heldout_cases_on_cpu() {
    run("heldout-cases.json.gz");
}

#[test]
fn the_runner_reports_failures() {
    // A case with a wrong expectation must fail, and an unknown item must be reported.
    let doc = serde_json::json!({"cases": [
        {"id": "wrong", "input": {"shape": [3], "dtype": "float32"}, "op": "get", "index": [{"int": 1}],
         "expected": {"shape": [], "data": [2.0]}},
        {"id": "weird", "input": {"shape": [3], "dtype": "float32"}, "op": "get", "index": [{"what": 1}],
         "expected": {"shape": [], "data": [1.0]}},
        {"id": "ok", "input": {"shape": [3], "dtype": "int64"}, "op": "get", "index": [{"int": -1}],
         "expected": {"shape": [], "data": [2]}, "view": true}
    ]});
    let report = corpus::runner::run_corpus(&doc, Device::Cpu).unwrap();
    assert_eq!(report.passed, 1);
    let ids: Vec<&str> = report.failures.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(ids, vec!["wrong", "weird"]);
}
