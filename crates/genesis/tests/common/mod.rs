//! Helpers shared by the facade's integration tests.

use genesis::Device;

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
