//! Views, reshapes, indexing and assignment through the facade, on CPU and (when present) CUDA.

use genesis::{DType, Error, IndexTensor, Tensor, s};

mod common;
use common::{Release, devices};

#[test]
fn views_share_storage_and_copies_do_not() {
    let _release = Release;
    for dev in devices() {
        let x = Tensor::arange(0.0, 24.0, 1.0, DType::I64, dev).unwrap();
        let m = x.view([4, -1]).unwrap();
        assert_eq!(m.shape(), &[4, 6]);
        assert!(m.shares_storage(&x));
        let t = m.t().unwrap();
        assert!(t.shares_storage(&x) && !t.is_contiguous());
        assert!(
            matches!(t.view([24]), Err(Error::Storage(_))),
            "a transposed view cannot be flattened without a copy"
        );
        let flat = t.reshape([24]).unwrap();
        assert!(!flat.shares_storage(&x) && flat.is_contiguous());
        assert_eq!(flat.to_vec::<i64>().unwrap()[..6], [0, 6, 12, 18, 1, 7]);
        let n = m.narrow(1, 2, 3).unwrap().unsqueeze(0).unwrap();
        assert_eq!(n.shape(), &[1, 4, 3]);
        assert_eq!(
            n.squeeze(0).unwrap().to_vec::<i64>().unwrap(),
            vec![2, 3, 4, 8, 9, 10, 14, 15, 16, 20, 21, 22]
        );
        let p = x.view([2, 3, 4]).unwrap().permute([2, 0, 1]).unwrap();
        assert_eq!(p.shape(), &[4, 2, 3]);
        assert_eq!(
            p.contiguous().unwrap().to_vec::<i64>().unwrap()[..4],
            [0, 4, 8, 12]
        );
        let e = Tensor::arange(0.0, 3.0, 1.0, DType::F32, dev)
            .unwrap()
            .unsqueeze(1)
            .unwrap()
            .expand([3, 2])
            .unwrap();
        assert_eq!(
            e.to_vec::<f32>().unwrap(),
            vec![0.0, 0.0, 1.0, 1.0, 2.0, 2.0]
        );
        assert_eq!(x.to_dtype(DType::F16).unwrap().dtype(), DType::F16);
        assert_eq!(
            Tensor::ones([2, 2], DType::BF16, dev)
                .unwrap()
                .to_dtype(DType::F32)
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            vec![1.0; 4]
        );
    }
}

#[test]
fn indexing_and_assignment() {
    let _release = Release;
    for dev in devices() {
        let m = Tensor::arange(0.0, 20.0, 1.0, DType::F32, dev)
            .unwrap()
            .reshape([4, 5])
            .unwrap();
        let v = m.i(&s![1..3, ..;2]).unwrap();
        assert!(v.shares_storage(&m));
        assert_eq!(
            v.to_vec::<f32>().unwrap(),
            vec![5.0, 7.0, 9.0, 10.0, 12.0, 14.0]
        );
        let rows = m.i(&s![@IndexTensor::i64(&[2], vec![3, -4])]).unwrap();
        assert!(!rows.shares_storage(&m));
        assert_eq!(
            rows.to_vec::<f32>().unwrap(),
            vec![15.0, 16.0, 17.0, 18.0, 19.0, 0.0, 1.0, 2.0, 3.0, 4.0]
        );
        let mask = IndexTensor::mask(&[4], &[true, false, false, true]);
        assert_eq!(
            m.i(&s![@mask, 4]).unwrap().to_vec::<f32>().unwrap(),
            vec![4.0, 19.0]
        );
        assert!(
            matches!(m.i(&s![4]), Err(Error::Index(genesis_index_error)) if genesis_index_error.kind() == "index_out_of_range")
        );

        let x = Tensor::zeros([3, 4], DType::F32, dev).unwrap();
        x.index_put_scalar_(&s![1], 7.0).unwrap();
        let row = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], [4], dev).unwrap();
        x.index_put_(&s![@IndexTensor::i64(&[2], vec![0, 2])], &row, false)
            .unwrap();
        x.index_put_(&s![@IndexTensor::i64(&[2], vec![2, 2])], &row, true)
            .unwrap();
        assert_eq!(
            x.to_vec::<f32>().unwrap(),
            vec![1.0, 2.0, 3.0, 4.0, 7.0, 7.0, 7.0, 7.0, 3.0, 6.0, 9.0, 12.0]
        );
        let bad = Tensor::from_slice(&[1.0f32, 2.0, 3.0], [3], dev).unwrap();
        let before = x.to_vec::<f32>().unwrap();
        assert!(x.index_put_(&s![..], &bad, false).is_err());
        assert_eq!(
            x.to_vec::<f32>().unwrap(),
            before,
            "unchanged after a failed assignment"
        );
        // Assignment writes the shared storage: a view sees it, and assignment through a
        // view is seen by its base (PyTorch's `x[0][1:3] = ...`).
        let view = x.i(&s![0]).unwrap();
        x.index_put_scalar_(&s![0], 1.0).unwrap();
        assert_eq!(view.to_vec::<f32>().unwrap(), [1.0; 4]);
        view.index_put_scalar_(&s![1..3], -2.0).unwrap();
        assert_eq!(
            x.i(&s![0]).unwrap().to_vec::<f32>().unwrap(),
            [1.0, -2.0, -2.0, 1.0]
        );
    }
}

#[cfg(feature = "cuda")]
#[test]
fn memory_api_reports_the_pool() {
    let _release = Release;
    if !genesis::cuda::is_available() {
        return;
    }
    // Other tests of this binary allocate and free concurrently: only `t`'s own 4 MiB are
    // certain to be counted while it lives.
    let t = Tensor::zeros([1 << 20], DType::F32, genesis::Device::Cuda(0)).unwrap();
    assert!(genesis::cuda::memory_allocated(0).unwrap() >= 4 << 20);
    assert!(
        genesis::cuda::memory_reserved(0).unwrap() >= genesis::cuda::memory_allocated(0).unwrap()
    );
    assert_eq!(
        genesis::cuda::memory_cached(0).unwrap(),
        genesis::cuda::memory_reserved(0).unwrap()
    );
    assert!(genesis::cuda::max_memory_allocated(0).unwrap() >= 4 << 20);
    let stats = genesis::cuda::memory_stats(0).unwrap();
    assert!(stats["allocated_bytes.all.current"] >= 4 << 20);
    assert!(
        genesis::cuda::memory_summary(0)
            .unwrap()
            .contains("Allocated memory")
    );
    assert!(
        !genesis::cuda::memory_snapshot(0)
            .unwrap()
            .segments
            .is_empty()
    );
    assert!(genesis::cuda::set_memory_fraction(1.5, 0).is_err());
    assert!(genesis::cuda::set_cache_size("lots", 0).is_err());
    drop(t);
    genesis::cuda::reset_peak_memory_stats(0).unwrap();
}
