//! Small elementwise ops on the GPU are batched (`genesis::cuda::set_batching`): the results are
//! those of one launch per op, and memory released while ops are still queued on the host is
//! never touched by them (run under compute-sanitizer by the GPU bundle).
#![cfg(feature = "cuda")]

#[allow(dead_code)]
mod common;

use genesis::{DType, Device, Tensor};

/// A chain of dependent small ops mixing adds, products, maxima, relu and scalar ops, from a
/// host vector of `n` small integers: every result is an exact small integer in f32.
fn chain(dev: Device, n: usize) -> Vec<f32> {
    let v: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
    let a = Tensor::from_slice(&v, [n], dev).unwrap();
    let mut x = Tensor::zeros([n], DType::F32, dev).unwrap();
    for k in 0..200 {
        x = match k % 5 {
            0 => x.add(&a).unwrap(),
            1 => x.maximum(&a).unwrap(),
            2 => (&x * 2.0).unwrap().sub(&a).unwrap(),
            3 => x.relu().unwrap(),
            _ => (&x - 1.0).unwrap(),
        };
        if k % 3 == 0 {
            x.add_(&a).unwrap();
        }
        // Keep the values small (and exact).
        x = x.minimum(&(&a + 8.0).unwrap()).unwrap();
    }
    x.to_vec::<f32>().unwrap()
}

/// One test: batching is a switch of the device, so the parts run in turn.
#[test]
fn batching() {
    if genesis_cuda::skip_without_gpu("batching") {
        return;
    }
    let _release = common::Release;
    batched_ops_give_the_results_of_one_launch_each();
    memory_released_under_queued_ops_is_not_touched();
}

fn batched_ops_give_the_results_of_one_launch_each() {
    let gpu = Device::Cuda(0);
    for n in [1usize, 5, 1000, 2048, 2049] {
        let want = chain(Device::Cpu, n);
        genesis::cuda::set_batching(0, false).unwrap();
        assert!(!genesis::cuda::batching(0).unwrap());
        let unbatched = chain(gpu, n);
        genesis::cuda::set_batching(0, true).unwrap();
        assert!(genesis::cuda::batching(0).unwrap());
        let batched = chain(gpu, n);
        assert_eq!(unbatched, want, "n = {n}: one launch per op vs the CPU");
        assert_eq!(batched, want, "n = {n}: batched vs the CPU");
    }
}

fn memory_released_under_queued_ops_is_not_touched() {
    genesis::cuda::set_batching(0, true).unwrap();
    let gpu = Device::Cuda(0);
    for round in 0..4 {
        // 16 MiB source: its pages are given back by empty_cache once it is dropped. The small
        // op reading its first 1000 elements is queued on the host until something reaches the
        // driver, which empty_cache does before unmapping anything.
        let big = Tensor::full([4 << 20], 3.0f32, gpu).unwrap();
        let head = big.narrow(0, 0, 1000).unwrap();
        let y = head
            .add(&Tensor::full([1000], round as f32, gpu).unwrap())
            .unwrap();
        drop(head);
        drop(big);
        genesis::cuda::empty_cache().unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![3.0 + round as f32; 1000]);
    }
}
