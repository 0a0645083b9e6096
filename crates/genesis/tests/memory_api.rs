//! `genesis::cuda`'s memory API on every build: without a usable GPU (no `cuda` feature, or no
//! device) it reports zeros and an empty snapshot, checks its arguments, and the calls about
//! one device say that it does not exist; with a GPU it reports the pool.

use genesis::{DType, Device, Tensor};

#[test]
fn the_memory_api_compiles_and_answers_on_every_build() {
    // Arguments are checked whatever the build.
    assert!(genesis::cuda::set_memory_fraction(1.5, 0).is_err());
    assert!(genesis::cuda::set_memory_fraction(0.0, 0).is_err());
    assert!(genesis::cuda::set_cache_size("two gigabytes", 0).is_err());
    let stats = genesis::cuda::memory_stats(0).unwrap();
    assert!(stats.contains_key("allocated_bytes.all.peak"), "{stats:?}");
    assert!(genesis::cuda::memory_summary(0).unwrap().contains("cuda:0"));
    if genesis::cuda::is_available() {
        return gpu();
    }
    assert_eq!(genesis::cuda::device_count(), 0);
    for f in [
        genesis::cuda::memory_allocated,
        genesis::cuda::max_memory_allocated,
        genesis::cuda::memory_reserved,
        genesis::cuda::max_memory_reserved,
        genesis::cuda::memory_cached,
    ] {
        assert_eq!(f(0).unwrap(), 0);
        assert_eq!(
            f(3).unwrap(),
            0,
            "any ordinal, as PyTorch before CUDA is initialised"
        );
    }
    assert!(stats.values().all(|&v| v == 0), "{stats:?}");
    let snap = genesis::cuda::memory_snapshot(0).unwrap();
    assert!(snap.segments.is_empty());
    assert_eq!(snap.device_total, 0);
    genesis::cuda::reset_peak_memory_stats(0).unwrap();
    genesis::cuda::set_memory_fraction(0.5, 0).unwrap();
    genesis::cuda::set_cache_size("2GB", 0).unwrap();
    genesis::cuda::record_memory_history(0, 100).unwrap();
    assert!(genesis::cuda::take_memory_history(0).unwrap().is_none());
    genesis::cuda::empty_cache().unwrap();
    // Calls about one device: the device does not exist.
    assert!(genesis::cuda::get_device_name(0).is_err());
    assert!(genesis::cuda::get_device_capability(0).is_err());
    assert!(genesis::cuda::get_device_properties(0).is_err());
    assert!(genesis::cuda::synchronize(0).is_err());
    assert!(genesis::cuda::set_batching(0, false).is_err());
    assert!(genesis::cuda::batching(0).is_err());
    assert!(Tensor::zeros([2], DType::F32, Device::Cuda(0)).is_err());
}

fn gpu() {
    let before = genesis::cuda::memory_allocated(0).unwrap();
    let t = Tensor::zeros([1 << 20], DType::F32, Device::Cuda(0)).unwrap();
    assert!(genesis::cuda::memory_allocated(0).unwrap() >= before + (4 << 20));
    assert!(genesis::cuda::max_memory_reserved(0).unwrap() >= 4 << 20);
    assert!(
        !genesis::cuda::memory_snapshot(0)
            .unwrap()
            .segments
            .is_empty()
    );
    assert!(genesis::cuda::get_device_name(0).is_ok());
    genesis::cuda::synchronize(0).unwrap();
    drop(t);
    genesis::cuda::empty_cache().unwrap();
}
