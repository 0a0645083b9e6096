//! The row fast path of the CUDA executor (rows that are multiples of 16 bytes) against the CPU
//! executor: gathers from views with an offset, and assignments with duplicate rows.
#![cfg(feature = "cuda")]

mod common;

use std::sync::Arc;

use common::{Release, get_f32};
use genesis_index::{IndexTensor, Value, get, s, set};
use genesis_storage::{Device, Layout, Storage, View};

fn matrix(device: Device) -> View {
    let data: Vec<f32> = (0..64 * 8).map(|i| i as f32).collect();
    View::with_layout(
        Arc::new(Storage::from_slice(&data, device).unwrap()),
        Layout::contiguous(&[64, 8]),
    )
    .unwrap()
}

#[test]
fn row_gathers_and_assignments_match_the_cpu() {
    if genesis_cuda::skip_without_gpu("row_gathers_and_assignments_match_the_cpu") {
        return;
    }
    let _release = Release;
    let rows = IndexTensor::i64(&[6], vec![5, 0, 63, -1, 5, 17]);
    let (cpu, gpu) = (matrix(Device::Cpu), matrix(Device::Cuda(0)));
    // x[idx] and x[2:][idx] (a view with an offset of 2 rows).
    for items in [s![@rows.clone()], s![2.., ..]] {
        let want = get_f32(&cpu, &items);
        let got = get_f32(&gpu, &items);
        assert_eq!(got, want);
    }
    let shifted_cpu = get(&cpu, &s![2..]).unwrap();
    let shifted_gpu = get(&gpu, &s![2..]).unwrap();
    let idx = IndexTensor::i64(&[3], vec![0, 61, 7]);
    let want = get_f32(&shifted_cpu, &s![@idx.clone()]);
    let got = get_f32(&shifted_gpu, &s![@idx]);
    assert_eq!(got, want);
    // x[idx] = v with duplicate rows: the last one wins on both.
    let vals: Vec<f32> = (0..6 * 8).map(|i| -(i as f32)).collect();
    let mut results = Vec::new();
    for device in [Device::Cpu, Device::Cuda(0)] {
        let mut target =
            Storage::from_slice(&(0..64 * 8).map(|i| i as f32).collect::<Vec<_>>(), device)
                .unwrap();
        let v = View::with_layout(
            Arc::new(Storage::from_slice(&vals, device).unwrap()),
            Layout::contiguous(&[6, 8]),
        )
        .unwrap();
        set(
            &mut target,
            &Layout::contiguous(&[64, 8]),
            &s![@rows.clone()],
            Value::Tensor(&v),
            false,
        )
        .unwrap();
        results.push(target.to_vec::<f32>().unwrap());
    }
    assert_eq!(results[0], results[1]);
    assert_eq!(
        &results[0][5 * 8..6 * 8],
        &vals[4 * 8..5 * 8],
        "row 5 takes its last value"
    );
    let _ = genesis_storage::cuda::empty_caches();
}
