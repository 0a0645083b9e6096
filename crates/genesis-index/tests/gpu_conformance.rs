//! The conformance corpora on the CUDA executor: every case must pass as it does on the CPU.
#![cfg(feature = "cuda")]

use genesis_storage::Device;

mod corpus;

fn run(file: &str) {
    if genesis_cuda::skip_without_gpu(&format!("gpu conformance {file}")) {
        return;
    }
    let doc = corpus::load(file);
    let report = corpus::runner::run_corpus(&doc, Device::Cuda(0)).unwrap();
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

#[test]
fn numpy_random_cases_on_cuda() {
    run("random-cases.json.gz");
}

#[test]
fn numpy_heldout_cases_on_cuda() {
    run("heldout-cases.json.gz");
}
