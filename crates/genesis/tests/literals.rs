//! Nested literals: `tensor!` with PyTorch's default dtypes and the dtype and device
//! options, `item::<T>()`, `to_vec2` / `to_vec3`.

#[allow(dead_code)]
mod common;

use genesis::{DType, Device, Error, Tensor, bf16, f16, tensor};

fn devices() -> Vec<Device> {
    let mut d = vec![Device::Cpu];
    if genesis::cuda::is_available() {
        d.push(Device::Cuda(0));
    }
    d
}

#[test]
fn nested_literals_with_pytorch_default_dtypes() {
    let _release = common::Release;
    let a = tensor!([[1., 2.], [3., 4.]]).unwrap();
    assert_eq!(
        (a.shape(), a.dtype(), a.device()),
        (&[2, 2][..], DType::F32, Device::Cpu)
    );
    assert_eq!(a.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0]);
    let i = tensor!([[1, -2, 3]]).unwrap();
    assert_eq!((i.shape(), i.dtype()), (&[1, 3][..], DType::I64));
    assert_eq!(i.to_vec::<i64>().unwrap(), [1, -2, 3]);
    let b = tensor!([true, false]).unwrap();
    assert_eq!(b.dtype(), DType::Bool);
    assert_eq!(b.to_bool_vec().unwrap(), [true, false]);
    let s = tensor!(21.).unwrap();
    assert_eq!((s.dim(), s.dtype()), (0, DType::F32));
    assert_eq!(tensor!(-7).unwrap().item::<i64>().unwrap(), -7);
    let cube = tensor!([[[1, 2], [3, 4]], [[5, 6], [7, 8]]]).unwrap();
    assert_eq!(cube.shape(), &[2, 2, 2]);
    assert_eq!(
        cube.to_vec3::<i64>().unwrap(),
        [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]
    );
    // Typed half elements keep their dtype; f32/f64 floats give float32 as Python floats do.
    let h = tensor!([f16::from_f32(1.5), f16::from_f32(-2.0)]).unwrap();
    assert_eq!(h.dtype(), DType::F16);
    assert_eq!(tensor!([bf16::ONE]).unwrap().dtype(), DType::BF16);
    assert_eq!(tensor!([1.5f64]).unwrap().dtype(), DType::F32);
    // Any expression of nested data: vectors, slices, variables.
    let v = vec![vec![1.0f32, 2.0], vec![3.0, 4.0]];
    assert_eq!(tensor!(v).unwrap().to_vec2::<f32>().unwrap(), v);
    let rows: &[[i32; 2]] = &[[1, 2], [3, 4], [5, 6]];
    assert_eq!(tensor!(rows).unwrap().shape(), &[3, 2]);
    let empty: Vec<f32> = Vec::new();
    let e = tensor!(empty).unwrap();
    assert_eq!((e.shape(), e.dtype()), (&[0][..], DType::F32));
    // Rows of different lengths are an error (arrays make them a compile error).
    let ragged = vec![vec![1, 2], vec![3]];
    assert!(matches!(
        tensor!(ragged),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn dtype_and_device_options() {
    let _release = common::Release;
    for dev in devices() {
        let d = tensor!([0.1, 0.2], dtype = DType::F64, device = dev).unwrap();
        assert_eq!((d.dtype(), d.device()), (DType::F64, dev));
        assert_eq!(
            d.to_vec::<f64>().unwrap(),
            [0.1, 0.2],
            "no trip through f32"
        );
        let h = tensor!([[1., 2.5]], device = dev, dtype = DType::BF16).unwrap();
        assert_eq!(
            h.to_vec::<bf16>().unwrap(),
            [bf16::from_f32(1.0), bf16::from_f32(2.5)]
        );
        let f = tensor!([1, 2], dtype = DType::F32, device = dev).unwrap();
        assert_eq!(f.to_vec::<f32>().unwrap(), [1.0, 2.0]);
        let t = tensor!([1.9, -1.9], dtype = DType::I32, device = dev).unwrap();
        assert_eq!(
            t.to_vec::<i32>().unwrap(),
            [1, -1],
            "floats truncate, as in PyTorch"
        );
        let m = tensor!([0, 2, 0], dtype = DType::Bool, device = dev).unwrap();
        assert_eq!(m.to_bool_vec().unwrap(), [false, true, false]);
        let u = tensor!([255], dtype = DType::U8, device = dev).unwrap();
        assert_eq!(u.to_vec::<u8>().unwrap(), [255]);
    }
    // Exact integers: 2^62 + 1 is not rounded through f64.
    let big = (1i64 << 62) + 1;
    assert_eq!(tensor!([big]).unwrap().to_vec::<i64>().unwrap(), [big]);
    // Out of the dtype's range: an error.
    assert!(matches!(
        tensor!([256], dtype = DType::U8),
        Err(Error::ScalarOutOfRange { .. })
    ));
    assert!(tensor!([1e39], dtype = DType::F32).is_err());
    assert!(
        tensor!([f64::INFINITY, f64::NAN]).is_ok(),
        "non-finite values are values"
    );
    assert!(tensor!([1.], device = Device::Cuda(genesis::cuda::device_count())).is_err());
}

#[test]
fn item_and_nested_vectors() {
    let _release = common::Release;
    for dev in devices() {
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3], dev).unwrap();
        assert_eq!(x.sum().unwrap().item::<f32>().unwrap(), 21.0);
        assert_eq!(x.i(&genesis::s![1, 2]).unwrap().item::<f32>().unwrap(), 6.0);
        // One element of any shape, as in PyTorch.
        assert_eq!(
            x.narrow(1, 1, 1)
                .unwrap()
                .narrow(0, 1, 1)
                .unwrap()
                .item::<f32>()
                .unwrap(),
            5.0
        );
        assert!(x.item::<f32>().is_err(), "six elements");
        assert!(matches!(
            x.sum().unwrap().item::<f64>(),
            Err(Error::WrongElementType { op: "item", .. })
        ));
        assert_eq!(
            x.to_vec2::<f32>().unwrap(),
            [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
        );
        assert_eq!(
            x.t().unwrap().to_vec2::<f32>().unwrap(),
            [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]],
            "strided views read in row-major order"
        );
        assert!(x.to_vec3::<f32>().is_err());
        assert!(x.ravel().unwrap().to_vec2::<f32>().is_err());
        let ints = Tensor::from_slice(&[1i32, 2, 3], [3], dev).unwrap();
        assert_eq!(
            ints.sum().unwrap().item::<i64>().unwrap(),
            6,
            "integer sums are i64"
        );
        assert!(x.gt(3).unwrap().to_vec2::<bool>().unwrap()[1][0]);
        let none = Tensor::zeros([0, 3], DType::F32, dev).unwrap();
        assert_eq!(none.to_vec2::<f32>().unwrap(), Vec::<Vec<f32>>::new());
        assert_eq!(
            Tensor::zeros([2, 0, 1], DType::I64, dev)
                .unwrap()
                .to_vec3::<i64>()
                .unwrap(),
            [Vec::<Vec<i64>>::new(), Vec::new()]
        );
    }
}
