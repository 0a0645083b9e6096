//! `cat` and `stack` on CPU and (when present) CUDA, against values built by hand.

use genesis::{DType, Device, Error, Tensor};

mod common;
use common::{Release, devices};

fn seq(n: usize, from: i64, shape: &[usize], dev: Device) -> Tensor {
    let v: Vec<i64> = (0..n as i64).map(|i| from + i).collect();
    Tensor::from_slice(&v, shape, dev).unwrap()
}

#[test]
fn cat_along_each_dim() {
    let _release = Release;
    for dev in devices() {
        let a = seq(6, 0, &[2, 3], dev);
        let b = seq(3, 100, &[1, 3], dev);
        let c = Tensor::cat(&[&a, &b], 0).unwrap();
        assert_eq!(c.shape(), &[3, 3]);
        assert_eq!(
            c.to_vec::<i64>().unwrap(),
            vec![0, 1, 2, 3, 4, 5, 100, 101, 102]
        );
        let d = seq(4, 50, &[2, 2], dev);
        let c = Tensor::cat(&[&a, &d], -1).unwrap();
        assert_eq!(c.shape(), &[2, 5]);
        assert_eq!(
            c.to_vec::<i64>().unwrap(),
            vec![0, 1, 2, 50, 51, 3, 4, 5, 52, 53]
        );
        // Strided inputs and empty pieces.
        let e = Tensor::zeros([2, 0], DType::I64, dev).unwrap();
        let t = seq(6, 10, &[3, 2], dev).t().unwrap();
        let c = Tensor::cat(&[&e, &t, &e], 1).unwrap();
        assert_eq!(c.to_vec::<i64>().unwrap(), vec![10, 12, 14, 11, 13, 15]);
        let only_empty = Tensor::cat(&[&e, &e], 1).unwrap();
        assert_eq!(only_empty.shape(), &[2, 0]);
        // f16 and a 3-D middle dimension.
        let h = Tensor::ones([2, 1, 3], DType::F16, dev).unwrap();
        let z = Tensor::zeros([2, 2, 3], DType::F16, dev).unwrap();
        let c = Tensor::cat(&[&h, &z], 1).unwrap();
        assert_eq!(c.shape(), &[2, 3, 3]);
        let v = c.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(v.iter().filter(|&&x| x == 1.0).count(), 6);
        assert_eq!(&v[..3], &[1.0, 1.0, 1.0]);
        assert_eq!(&v[9..12], &[1.0, 1.0, 1.0]);
    }
}

#[test]
fn stack_inserts_a_dimension() {
    let _release = Release;
    for dev in devices() {
        let a = seq(3, 0, &[3], dev);
        let b = seq(3, 10, &[3], dev);
        let s0 = Tensor::stack(&[&a, &b], 0).unwrap();
        assert_eq!(s0.shape(), &[2, 3]);
        assert_eq!(s0.to_vec::<i64>().unwrap(), vec![0, 1, 2, 10, 11, 12]);
        let s1 = Tensor::stack(&[&a, &b], -1).unwrap();
        assert_eq!(s1.shape(), &[3, 2]);
        assert_eq!(s1.to_vec::<i64>().unwrap(), vec![0, 10, 1, 11, 2, 12]);
        assert_eq!(s1.device(), dev);
    }
}

#[test]
fn bad_inputs_are_typed_errors() {
    let a = Tensor::zeros([2, 3], DType::F32, Device::Cpu).unwrap();
    let b = Tensor::zeros([2, 4], DType::F32, Device::Cpu).unwrap();
    let e = Tensor::cat(&[&a, &b], 0).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "cat", .. }), "{e}");
    assert!(Tensor::cat(&[&a, &b], 1).is_ok());
    let i = Tensor::zeros([2, 3], DType::I32, Device::Cpu).unwrap();
    // Dtypes promote, as in `torch.cat`.
    assert_eq!(Tensor::cat(&[&a, &i], 0).unwrap().dtype(), DType::F32);
    assert!(Tensor::cat(&[], 0).is_err());
    assert!(Tensor::cat(&[&a], 2).is_err());
    let r1 = Tensor::zeros([3], DType::F32, Device::Cpu).unwrap();
    assert!(Tensor::cat(&[&a, &r1], 0).is_err());
    let scalar = Tensor::zeros((), DType::F32, Device::Cpu).unwrap();
    assert!(Tensor::cat(&[&scalar], 0).is_err());
    assert!(matches!(
        Tensor::stack(&[&a, &b], 0).unwrap_err(),
        Error::ShapeMismatch { op: "stack", .. }
    ));
    assert!(Tensor::stack(&[&a, &a], 3).is_err());
    assert_eq!(Tensor::stack(&[&scalar, &scalar], 0).unwrap().shape(), &[2]);
}
