//! The conformance corpora (the shared one and extra cases generated with NumPy as the oracle,
//! `tests/gen_extra_cases.py`) on the CPU executor.

use genesis_storage::Device;

fn run(file: &str) {
    // The GPU bundle runs this binary away from the source tree: GENESIS_REPO_ROOT says where
    // the repository is (as for the other data-reading tests).
    let path = std::env::var_os("GENESIS_REPO_ROOT")
        .map(|r| std::path::PathBuf::from(r).join("crates/genesis-index"))
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .join("tests/data")
        .join(file);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let report = genesis_index::conformance::run_corpus(&doc, Device::Cpu).unwrap();
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
    let report = genesis_index::conformance::run_corpus(&doc, Device::Cpu).unwrap();
    assert_eq!(report.passed, 1);
    let ids: Vec<&str> = report.failures.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(ids, vec!["wrong", "weird"]);
}
