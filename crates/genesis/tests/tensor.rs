//! The facade's minimal Tensor: creation, add, read-back and typed errors, on CPU and CUDA.

use genesis::{DType, Device, Error, Tensor, bf16, f16};

mod common;
use common::{Release, devices};

#[test]
fn add_reads_back_on_every_device() {
    let _release = Release;
    for dev in devices() {
        let a = Tensor::from_slice(&[1.0f32, -2.0, 3.5], [3], dev).unwrap();
        let b = Tensor::from_slice(&[0.5f32, 2.0, -0.25], [3], dev).unwrap();
        assert_eq!(
            a.add(&b).unwrap().to_vec::<f32>().unwrap(),
            vec![1.5, 0.0, 3.25],
            "{dev}"
        );
        let i = Tensor::from_slice(&[i64::MAX, 5], [2], dev).unwrap();
        assert_eq!(
            i.add(&i).unwrap().to_vec::<i64>().unwrap(),
            vec![-2, 10],
            "wraps on {dev}"
        );
        let h = Tensor::full([2, 2], f16::from_f32(0.1), dev).unwrap();
        let want = f16::from_f32(f16::from_f32(0.1).to_f32() * 2.0);
        assert_eq!(
            h.add(&h).unwrap().to_vec::<f16>().unwrap(),
            vec![want; 4],
            "{dev}"
        );
        let e = Tensor::from_slice::<bf16>(&[], &[0, 3], dev).unwrap();
        assert_eq!(e.add(&e).unwrap().numel(), 0);
        assert_eq!(a.device(), dev);
        assert_eq!(a.dtype(), DType::F32);
        assert!(a.is_contiguous());
    }
}

#[test]
fn cuda_matches_cpu_on_odd_shapes() {
    let _release = Release;
    if !genesis::cuda::is_available() {
        return;
    }
    let data: Vec<i32> = (0..(7 * 13 * 3)).map(|i| i * 7919 - 40_000).collect();
    let cpu = Tensor::from_slice(&data, [7, 13, 3], Device::Cpu).unwrap();
    let gpu = cpu.to(Device::Cuda(0)).unwrap();
    let want = cpu.add(&cpu).unwrap().to_vec::<i32>().unwrap();
    assert_eq!(gpu.add(&gpu).unwrap().to_vec::<i32>().unwrap(), want);
    assert_eq!(
        gpu.add(&gpu)
            .unwrap()
            .to(Device::Cpu)
            .unwrap()
            .to_vec::<i32>()
            .unwrap(),
        want
    );
}

#[test]
fn mismatches_are_typed_errors() {
    let _release = Release;
    for dev in devices() {
        let a = Tensor::full([2, 3], 1.0f32, dev).unwrap();
        let b = Tensor::full([3, 2], 1.0f32, dev).unwrap();
        let e = a.add(&b).unwrap_err();
        assert_eq!(
            e,
            Error::ShapeMismatch {
                op: "add",
                lhs: vec![2, 3],
                rhs: vec![3, 2]
            }
        );
        assert!(e.to_string().contains("[2, 3]") && e.to_string().contains("[3, 2]"));
        let c = Tensor::full([2, 3], 1i32, dev).unwrap();
        assert_eq!(a.add(&c).unwrap().dtype(), DType::F32, "promoted");
        assert!(matches!(
            a.to_vec::<f64>(),
            Err(Error::WrongElementType { op: "to_vec", .. })
        ));
        let short = Tensor::from_slice(&[1.0f32; 5], [2, 3], dev).unwrap_err();
        assert!(matches!(
            short,
            Error::DataLength {
                expected: 6,
                got: 5,
                ..
            }
        ));
        let u = Tensor::from_bools(&[true, false], [2], dev).unwrap();
        assert!(matches!(
            u.neg(),
            Err(Error::Storage(
                genesis_storage::Error::UnsupportedDType { .. }
            ))
        ));
    }
    if genesis::cuda::is_available() {
        let a = Tensor::full([2], 1.0f32, Device::Cpu).unwrap();
        let b = Tensor::full([2], 1.0f32, Device::Cuda(0)).unwrap();
        let e = a.add(&b).unwrap_err();
        assert_eq!(
            e,
            Error::DeviceMismatch {
                op: "add",
                lhs: Device::Cpu,
                rhs: Device::Cuda(0)
            }
        );
        let n = genesis::cuda::device_count();
        let e = Tensor::full([2], 1.0f32, Device::Cuda(n + 3)).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
    }
}

#[test]
fn cuda_device_without_gpu_is_a_typed_error() {
    let _release = Release;
    if genesis::cuda::is_available() {
        return;
    }
    let e = Tensor::full([2], 1.0f32, Device::Cuda(0)).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("no CUDA device") || msg.contains("--features cuda"),
        "{msg}"
    );
}

#[test]
fn like_constructors_keep_shape_dtype_and_device() {
    let _release = Release;
    for dev in devices() {
        let x = Tensor::zeros([2, 0, 3], DType::I32, dev).unwrap();
        for t in [
            x.zeros_like().unwrap(),
            x.ones_like().unwrap(),
            x.empty_like().unwrap(),
            x.full_like(7.0).unwrap(),
        ] {
            assert_eq!(
                (t.shape(), t.dtype(), t.device()),
                (x.shape(), x.dtype(), dev)
            );
        }
        let y = Tensor::zeros([3, 5], DType::BF16, dev).unwrap();
        let f = y.full_like(-2.5).unwrap();
        assert_eq!((f.shape(), f.dtype()), (&[3, 5][..], DType::BF16));
        assert!(
            f.to_dtype(DType::F32)
                .unwrap()
                .to_vec::<f32>()
                .unwrap()
                .iter()
                .all(|&v| v == -2.5)
        );
        assert_eq!(
            Tensor::zeros([2], DType::I64, dev)
                .unwrap()
                .full_like(-3.0)
                .unwrap()
                .to_vec::<i64>()
                .unwrap(),
            [-3, -3]
        );
        assert!(matches!(
            x.full_like(3e10),
            Err(Error::ScalarOutOfRange { .. })
        ));
    }
}
