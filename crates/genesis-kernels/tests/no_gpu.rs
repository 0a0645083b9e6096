//! What a build with the `cuda` feature does on a machine with no GPU.
#![cfg(feature = "cuda")]

#[test]
fn context_without_device_is_a_typed_error() {
    match genesis_cuda::device_count() {
        Ok(0) => {
            assert!(!genesis_cuda::is_available());
            let e = genesis_cuda::Context::get(0).unwrap_err();
            assert_eq!(e, genesis_cuda::Error::NoDevice);
            eprintln!("no CUDA device found: checked the no-device path");
        }
        Ok(n) => {
            let e = genesis_cuda::Context::get(n + 5).unwrap_err();
            assert_eq!(
                e,
                genesis_cuda::Error::InvalidDevice {
                    ordinal: n + 5,
                    count: n
                }
            );
        }
        Err(e) => panic!("device_count failed: {e}"),
    }
}
