//! Helpers shared by the GPU integration tests of `genesis-index`.

use genesis_index::{IndexItem, get};
use genesis_storage::View;

/// Gives the pools' cached memory back after everything of the test is dropped.
pub(crate) struct Release;

impl Drop for Release {
    fn drop(&mut self) {
        let _ = genesis_storage::cuda::empty_caches();
    }
}

/// `input[items]` read back as f32 values, in row-major order.
pub(crate) fn get_f32(input: &View, items: &[IndexItem]) -> Vec<f32> {
    get(input, items)
        .unwrap()
        .contiguous()
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
}
