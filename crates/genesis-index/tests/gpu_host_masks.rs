//! Host masks indexing CUDA tensors: a mask crosses the bus as bytes and is compacted on the
//! device (`MaskPlan::uploads_mask`), or, forced through `get_routed`, as the positions of its
//! set elements, gathered on the device. Both routes must give the
//! CPU executor's results, for reads and for scalar assignment, including on views with an
//! offset.
#![cfg(feature = "cuda")]

mod common;

use std::sync::Arc;

use common::{Release, get_f32};
use genesis_index::{IndexItem, IndexTensor, Value, plan, s, set};
use genesis_storage::{DType, Device, Layout, Storage, View};

/// A mask of `shape` with about one element in `every` set (xorshift).
fn mask(shape: &[usize], every: u64, seed: u64) -> Vec<bool> {
    let n: usize = shape.iter().product();
    let mut state = seed;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.is_multiple_of(every)
        })
        .collect()
}

fn data(n: usize, device: Device) -> Storage {
    let v: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 7.0).collect();
    Storage::from_slice(&v, device).unwrap()
}

#[test]
fn dense_and_sparse_host_masks_match_the_cpu() {
    if genesis_cuda::skip_without_gpu("dense_and_sparse_host_masks_match_the_cpu") {
        return;
    }
    let _release = Release;
    let shape = [37, 129];
    let n = 37 * 129;
    // Offset views: the tensor starts 5 elements into its storage.
    let layout = Layout::new(&shape, &[129, 1], 5);
    // Every other, every third, one in 64, none.
    for every in [2, 3, 64, 0] {
        let bits = if every == 0 {
            vec![false; n]
        } else {
            mask(&shape, every, 0x9e37_79b9 + every)
        };
        let m = IndexTensor::mask(&shape, &bits);
        // A mask over the whole tensor goes as its bytes at every density.
        let p = plan(&layout, &s![@m.clone()], false).unwrap();
        assert!(
            p.mask.expect("a mask plan").uploads_mask(),
            "density {}",
            p.mask.unwrap().density()
        );
        // As an index tensor, and as a host storage.
        let stored = IndexItem::stored(
            View::with_layout(
                Arc::new(
                    Storage::from_bytes(
                        &bits.iter().map(|&b| u8::from(b)).collect::<Vec<_>>(),
                        DType::Bool,
                        Device::Cpu,
                    )
                    .unwrap(),
                ),
                Layout::contiguous(&shape),
            )
            .unwrap(),
        );
        for items in [s![@m.clone()], vec![stored]] {
            let cpu =
                View::with_layout(Arc::new(data(n + 5, Device::Cpu)), layout.clone()).unwrap();
            let gpu =
                View::with_layout(Arc::new(data(n + 5, Device::Cuda(0))), layout.clone()).unwrap();
            let want = get_f32(&cpu, &items);
            let got = get_f32(&gpu, &items);
            assert_eq!(got, want, "x[mask], one in {every}");
            assert_eq!(want.len(), bits.iter().filter(|&&b| b).count());
            // x[mask] = 2.5, in place, the elements before the view untouched.
            let mut results = Vec::new();
            for device in [Device::Cpu, Device::Cuda(0)] {
                let mut target = data(n + 5, device);
                set(&mut target, &layout, &items, Value::Scalar(2.5), false).unwrap();
                results.push(target.to_vec::<f32>().unwrap());
            }
            assert_eq!(results[0], results[1], "x[mask] = 2.5, one in {every}");
            assert_eq!(
                &results[1][..5],
                &(0..5).map(|i| i as f32 * 0.5 - 7.0).collect::<Vec<_>>()[..]
            );
        }
    }
    // A mask of the wrong shape is an error on the upload route too, and writes nothing.
    let bits = mask(&[37, 128], 2, 7);
    let m = IndexTensor::mask(&[37, 128], &bits);
    let mut target = data(n, Device::Cuda(0));
    let before = target.to_vec::<f32>().unwrap();
    assert!(
        set(
            &mut target,
            &Layout::contiguous(&shape),
            &s![@m],
            Value::Scalar(1.0),
            false
        )
        .is_err()
    );
    assert_eq!(target.to_vec::<f32>().unwrap(), before);
}
