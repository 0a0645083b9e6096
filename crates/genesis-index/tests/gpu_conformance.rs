//! The conformance corpora on the CUDA executor: every case must pass as it does on the CPU.
#![cfg(feature = "cuda")]

use genesis_storage::Device;

fn run(file: &str) {
    if genesis_cuda::skip_without_gpu(&format!("gpu conformance {file}")) {
        return;
    }
    let root = std::env::var_os("GENESIS_REPO_ROOT")
        .map(|r| std::path::PathBuf::from(r).join("crates/genesis-index"))
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("tests/data").join(file)).unwrap())
            .unwrap();
    let report = genesis_index::conformance::run_corpus(&doc, Device::Cuda(0)).unwrap();
    for f in &report.failures {
        eprintln!("FAIL {}: {}", f.id, f.message);
    }
    assert!(
        report.failures.is_empty(),
        "{} cases failed on cuda:0 in {file}",
        report.failures.len()
    );
    let _ = genesis_storage::cuda::empty_caches();
}

#[test]
fn shared_corpus_on_cuda() {
    run("index-cases.json");
}

#[test]
fn numpy_generated_extra_cases_on_cuda() {
    run("extra-cases.json");
}
