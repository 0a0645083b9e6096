//! Helpers shared by the facade's integration tests.

use genesis::Device;

pub(crate) mod files;

/// The CPU, and CUDA device 0 when one is present (saying so on stderr when it is not).
pub(crate) fn devices() -> Vec<Device> {
    let mut d = vec![Device::Cpu];
    if genesis::cuda::is_available() {
        d.push(Device::Cuda(0));
    } else {
        eprintln!("CUDA part skipped: no CUDA device found");
    }
    d
}

/// A dtype by the short name the PyTorch fixtures use (`"bool"`, `"u8"`, ..., `"bf16"`, `"f64"`).
#[allow(dead_code)] // not every test binary reads PyTorch fixtures
pub(crate) fn short_dtype(name: &str) -> genesis::DType {
    use genesis::DType;
    match name {
        "bool" => DType::Bool,
        "u8" => DType::U8,
        "i8" => DType::I8,
        "i16" => DType::I16,
        "i32" => DType::I32,
        "i64" => DType::I64,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        "f32" => DType::F32,
        "f64" => DType::F64,
        _ => panic!("unknown dtype {name}"),
    }
}

/// Any tensor's values as f64 on the host (through the cast: exact for every value of the
/// integer dtypes up to 2^53 and of every float dtype).
#[allow(dead_code)] // not every test binary compares values this way
pub(crate) fn f64_values(t: &genesis::Tensor) -> Vec<f64> {
    t.to(Device::Cpu)
        .unwrap()
        .to_dtype(genesis::DType::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap()
}

/// Runs the corpus `file` on every device ([`devices`]) through `run_file`, which returns the
/// report lines of its failing cases, and fails listing them all.
#[allow(dead_code)] // the corpus-driven test binaries
pub(crate) fn run_corpus(file: &str, run_file: impl Fn(&str, Device) -> Vec<String>) {
    let _release = Release;
    let mut failures = Vec::new();
    for device in devices() {
        failures.extend(run_file(file, device));
    }
    assert!(
        failures.is_empty(),
        "{} failing cases of {file}:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Gives cached device memory back when a test ends (even by panicking), so nothing is held
/// at exit (compute-sanitizer's leak check).
pub(crate) struct Release;

impl Drop for Release {
    fn drop(&mut self) {
        #[cfg(feature = "cuda")]
        if genesis::cuda::is_available() {
            genesis::cuda::empty_cache().unwrap();
        }
    }
}
