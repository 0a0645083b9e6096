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

/// r16-1529's index (more than 8 index arrays: integers, tensors, a 2-D mask), with the index
/// tensors on the host or on the device.
fn wide_items(device: Device) -> Vec<genesis_index::IndexItem> {
    use genesis_index::IndexItem;
    let t = |data: Vec<i64>| {
        if device == Device::Cpu {
            IndexItem::Tensor(IndexTensor::i64(&[data.len()], data))
        } else {
            let n = data.len();
            IndexItem::stored(
                View::with_layout(
                    Arc::new(Storage::from_slice(&data, device).unwrap()),
                    Layout::contiguous(&[n]),
                )
                .unwrap(),
            )
        }
    };
    vec![
        IndexItem::Tensor(IndexTensor::mask(&[2, 1], &[true, false])),
        IndexItem::Int(-2),
        t(vec![-1, -1, 0]),
        IndexItem::Int(1),
        IndexItem::Int(1),
        IndexItem::NewAxis,
        IndexItem::Int(-2),
        IndexItem::range(0, 1),
        t(vec![1, 1, 1]),
        t(vec![0, -1, -1]),
    ]
}

/// `get`, `set` and `set` with `accumulate` on `layout` over `len` elements, CPU against CUDA.
fn same_as_cpu(
    len: usize,
    layout: &Layout,
    items: impl Fn(Device) -> Vec<genesis_index::IndexItem>,
) {
    let data: Vec<f32> = (0..len).map(|i| i as f32).collect();
    let view = |device| {
        View::with_layout(
            Arc::new(Storage::from_slice(&data, device).unwrap()),
            layout.clone(),
        )
        .unwrap()
    };
    let want = get_f32(&view(Device::Cpu), &items(Device::Cpu));
    let gpu = Device::Cuda(0);
    assert_eq!(get_f32(&view(gpu), &items(gpu)), want);
    let shape = get(&view(Device::Cpu), &items(Device::Cpu))
        .unwrap()
        .layout()
        .shape()
        .to_vec();
    let vals: Vec<f32> = (0..want.len()).map(|i| -1.5 * i as f32 - 1.0).collect();
    for accumulate in [false, true] {
        let mut results = Vec::new();
        for device in [Device::Cpu, Device::Cuda(0)] {
            let mut target = Storage::from_slice(&data, device).unwrap();
            let v = View::with_layout(
                Arc::new(Storage::from_slice(&vals, device).unwrap()),
                Layout::contiguous(&shape),
            )
            .unwrap();
            set(
                &mut target,
                layout,
                &items(device),
                Value::Tensor(&v),
                accumulate,
            )
            .unwrap();
            results.push(target.to_vec::<f32>().unwrap());
        }
        assert_eq!(results[0], results[1], "accumulate {accumulate}");
    }
}

#[test]
fn more_than_eight_index_arrays_or_result_dims_match_the_cpu() {
    if genesis_cuda::skip_without_gpu("more_than_eight_index_arrays_or_result_dims_match_the_cpu") {
        return;
    }
    let _release = Release;
    // r16-1529: a 10-D input, more than 8 index arrays, a [3, 1, 1] result.
    let shape = [2, 1, 2, 1, 2, 2, 2, 1, 2, 1];
    let layout = Layout::contiguous(&shape);
    same_as_cpu(layout.numel(), &layout, wide_items);
    let cpu = View::with_layout(
        Arc::new(Storage::from_slice(&vec![0f32; layout.numel()], Device::Cpu).unwrap()),
        layout.clone(),
    )
    .unwrap();
    assert_eq!(
        get(&cpu, &wide_items(Device::Cpu))
            .unwrap()
            .layout()
            .shape(),
        [3, 1, 1]
    );
    // A 9-D result no compaction shortens (each dimension 2 of a padded 3), with duplicate
    // rows: index arrays on the host and on the device.
    let shape = [3usize, 2, 2, 2, 2, 2, 2, 2, 2];
    let mut strides = vec![0isize; 9];
    let mut s = 1isize;
    for d in (0..9).rev() {
        strides[d] = s;
        s *= 3;
    }
    let padded = Layout::new(&shape, &strides, 1);
    let rows = vec![1i64, -1, 0, 1];
    same_as_cpu(3usize.pow(9) + 1, &padded, |device| {
        let idx = if device == Device::Cpu {
            genesis_index::IndexItem::Tensor(IndexTensor::i64(&[4], rows.clone()))
        } else {
            genesis_index::IndexItem::stored(
                View::with_layout(
                    Arc::new(Storage::from_slice(&rows, device).unwrap()),
                    Layout::contiguous(&[4]),
                )
                .unwrap(),
            )
        };
        vec![genesis_index::IndexItem::full(), idx]
    });
    let _ = genesis_storage::cuda::empty_caches();
}
