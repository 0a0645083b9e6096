//! Limits the facade checks: host out-of-memory, huge `arange`, checked element counts,
//! exact scalar conversion (also `index_fill`), no silent infinities or saturation, and the
//! arguments `t()` and `arange` refuse. Each asserts a typed error and no panic.

use genesis::{DType, Device, Error, IndexItem, Tensor, s};

fn is_oom(e: &Error) -> bool {
    e.is_out_of_memory()
        && matches!(
            e,
            Error::OutOfMemory(genesis_storage::Error::HostOutOfMemory { .. })
        )
}

/// Creation and materialisation beyond the host's memory return `HostOutOfMemory`.
#[test]
fn host_out_of_memory_is_an_error() {
    let cpu = Device::Cpu;
    let huge = [1usize << 40];
    let errs = [
        Tensor::zeros(huge, DType::F32, cpu).unwrap_err(),
        Tensor::empty(huge, DType::F32, cpu).unwrap_err(),
        Tensor::full(huge, 1.0f32, cpu).unwrap_err(),
        Tensor::ones(huge, DType::F32, cpu).unwrap_err(),
        Tensor::rand(huge, DType::F32, cpu).unwrap_err(),
        Tensor::randn(huge, DType::F32, cpu).unwrap_err(),
        Tensor::randint(0, 5, huge, DType::I64, cpu).unwrap_err(),
    ];
    for e in &errs {
        assert!(is_oom(e), "{e:?}");
    }
    let one = Tensor::zeros([1], DType::F32, cpu).unwrap();
    let wide = one.expand([1 << 20, 1 << 20]).unwrap();
    assert!(is_oom(&wide.contiguous().unwrap_err()));
    assert!(is_oom(&wide.to_dtype(DType::F64).unwrap_err()));
    assert!(is_oom(&wide.add(&wide).unwrap_err()));
    assert!(is_oom(&wide.full_like(1.0).unwrap_err()));
    assert!(is_oom(&wide.zeros_like().unwrap_err()));
    let m = Tensor::zeros([1, 1], DType::F32, cpu)
        .unwrap()
        .expand([1 << 20, 1 << 10, 1 << 10])
        .unwrap();
    let r = m.matmul(&m);
    assert!(r.is_err(), "batched matmul of a huge broadcast view");
    // Display prints the first elements without materialising the view.
    let shown = format!("{wide}");
    assert!(
        shown.starts_with("tensor([[0., 0., 0.,  ..., 0., 0., 0.],\n        [0., 0., 0.,"),
        "{shown}"
    );
    assert!(shown.contains("...,\n"), "{shown}");
}

/// `arange` with a huge count is a typed error, neither a panic nor an abort.
#[test]
fn arange_with_huge_counts() {
    let cpu = Device::Cpu;
    assert!(Tensor::arange(0., 1e20, 1., DType::F32, cpu).is_err());
    let e = Tensor::arange(0., 1e12, 1., DType::F64, cpu).unwrap_err();
    assert!(is_oom(&e), "{e:?}");
    assert!(Tensor::arange(0., f64::MAX, 1e-300, DType::F32, cpu).is_err());
    let t = Tensor::arange(0., 5., 2., DType::I32, cpu).unwrap();
    assert_eq!(t.to_vec::<i32>().unwrap(), vec![0, 2, 4]);
}

/// Every shape goes through one checked element count, in debug and release.
#[test]
fn element_counts_are_checked() {
    let cpu = Device::Cpu;
    let empty = Tensor::zeros([0], DType::F32, cpu).unwrap();
    assert!(empty.reshape([1isize << 32, 1 << 32]).is_err());
    assert!(empty.view([1isize << 32, 1 << 32]).is_err());
    let one = Tensor::zeros([1], DType::F32, cpu).unwrap();
    assert!(one.expand([1usize << 40, 1 << 40]).is_err());
    let six = Tensor::zeros([6], DType::F32, cpu).unwrap();
    assert!(
        six.reshape([3, 2, (1isize << 62) + 1, (1 << 62) + 1])
            .is_err()
    );
    assert!(six.reshape([-1, 1isize << 40, 1 << 40]).is_err());
    for shape in [&[1usize << 32, 1 << 32][..], &[usize::MAX, 2], &[1 << 63]] {
        assert!(Tensor::zeros(shape, DType::U8, cpu).is_err());
        assert!(Tensor::empty(shape, DType::U8, cpu).is_err());
        assert!(Tensor::full(shape, 1u8, cpu).is_err());
        assert!(Tensor::ones(shape, DType::U8, cpu).is_err());
        assert!(Tensor::rand(shape, DType::F32, cpu).is_err());
        assert!(Tensor::from_slice::<u8>(&[], shape, cpu).is_err());
    }
    // A batch broadcast whose count would overflow but for an empty matrix: no elements, a
    // valid result (as in PyTorch).
    let a = Tensor::zeros([1usize << 40, 1, 0, 1], DType::F32, cpu).unwrap();
    let b = Tensor::zeros([1, 1usize << 40, 1, 0], DType::F32, cpu).unwrap();
    assert_eq!(a.matmul(&b).unwrap().shape(), [1 << 40, 1 << 40, 0, 0]);
    // A zero size makes the count 0 whatever the others.
    let z = Tensor::zeros([1usize << 40, 1 << 40, 0], DType::F32, cpu).unwrap();
    assert_eq!(z.numel(), 0);
}

/// A scalar goes through one exact conversion (2^63 is not an i64). An integer scalar
/// keeps an int64 tensor's dtype and must fit it; a float scalar promotes it to float32
/// (PyTorch's rule), where 2^63 is a value.
#[test]
fn scalars_are_exact() {
    let cpu = Device::Cpu;
    let two63 = 9_223_372_036_854_775_808.0;
    let two63_int = 1u64 << 63;
    let x = Tensor::from_slice(&[7i64], [1], cpu).unwrap();
    assert!(matches!(
        (&x + two63_int).unwrap_err(),
        Error::ScalarOutOfRange { .. }
    ));
    assert_eq!(
        (&x + two63).unwrap().to_vec::<f32>().unwrap(),
        [two63 as f32]
    );
    let m = Tensor::from_slice(&[i64::MAX], [1], cpu).unwrap();
    assert!(matches!(
        m.eq_scalar(two63_int).unwrap_err(),
        Error::ScalarOutOfRange { .. }
    ));
    assert!(m.full_like(two63).is_err());
    assert!((&x + i64::MIN).is_ok());
    let b = Tensor::from_slice(&[1u8], [1], cpu).unwrap();
    assert!(
        b.masked_fill(&Tensor::from_bools(&[true], [1], cpu).unwrap(), 256.0)
            .is_err()
    );
}

/// `index_put_scalar_` and `index_fill` check their scalar as `masked_fill` does.
#[test]
fn index_fill_checks_its_scalar() {
    let cpu = Device::Cpu;
    let mut u = Tensor::zeros([3], DType::U8, cpu).unwrap();
    let mut i = Tensor::zeros([3], DType::I32, cpu).unwrap();
    let mut j = Tensor::zeros([3], DType::I32, cpu).unwrap();
    let idx: Vec<IndexItem> = s![..];
    // PyTorch's checked conversion: out of range or NaN is refused (a fraction is dropped).
    for (t, v) in [(&mut u, 300.0), (&mut i, f64::NAN), (&mut j, 3e9)] {
        assert!(matches!(
            t.index_put_scalar_(&idx, v).unwrap_err(),
            Error::ScalarOutOfRange {
                op: "index_put_scalar_",
                ..
            }
        ));
        let at = Tensor::from_slice(&[0i64], [1], cpu).unwrap();
        assert!(matches!(
            t.index_fill_(0, &at, v).unwrap_err(),
            Error::ScalarOutOfRange {
                op: "index_fill_",
                ..
            }
        ));
    }
    assert_eq!(
        u.to_vec::<u8>().unwrap(),
        vec![0, 0, 0],
        "unchanged on error"
    );
    u.index_put_scalar_(&idx, 255.0).unwrap();
    assert_eq!(u.to_vec::<u8>().unwrap(), vec![255; 3]);
    // The index layer checks a scalar too, whatever calls it.
    let mut raw = genesis_storage::Storage::zeros(3, DType::U8, cpu).unwrap();
    let l = genesis_storage::Layout::contiguous(&[3]);
    assert!(
        genesis_index::set(
            &mut raw,
            &l,
            &idx,
            genesis_index::Value::Scalar(300.0),
            false
        )
        .is_err()
    );
}

/// No silent infinity or saturation in `randint`, `full_like`, `arange`.
#[test]
fn no_silent_infinities_or_saturation() {
    let cpu = Device::Cpu;
    assert!(Tensor::randint(0, 1 << 40, [4], DType::F16, cpu).is_err());
    let h = Tensor::zeros([2], DType::F16, cpu).unwrap();
    assert!(matches!(
        h.full_like(1e6).unwrap_err(),
        Error::ScalarOutOfRange { .. }
    ));
    assert!(
        h.full_like(f64::INFINITY).is_ok(),
        "an infinity given is kept"
    );
    assert!(Tensor::arange(3e9, 3e9 + 3., 1., DType::I32, cpu).is_err());
    assert!(Tensor::arange(0., 70000., 1000., DType::F16, cpu).is_err());
    let u = Tensor::randint(0, 256, [64], DType::U8, cpu).unwrap();
    assert_eq!(u.dtype(), DType::U8);
    assert!(Tensor::randint(0, 257, [4], DType::U8, cpu).is_err());
    assert!(Tensor::randint(-3, 3, [8], DType::I8, cpu).is_ok());
    assert!(Tensor::randint(0, i64::MAX, [2], DType::I64, cpu).is_ok());
}

/// Bad-input sweep: `t()` on more than 2 dimensions is an error, as in PyTorch; 0-d and 1-d
/// tensors are returned as they are.
#[test]
fn t_rejects_more_than_two_dims() {
    let cpu = Device::Cpu;
    let e = Tensor::zeros([2, 3, 4], DType::F32, cpu)
        .unwrap()
        .t()
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { op: "t", .. }), "{e:?}");
    let s = Tensor::zeros(&[] as &[usize], DType::F32, cpu).unwrap();
    assert_eq!(s.t().unwrap().shape(), &[] as &[usize]);
    let v = Tensor::zeros([5], DType::F32, cpu).unwrap();
    assert_eq!(v.t().unwrap().shape(), &[5]);
    let m = Tensor::zeros([2, 3], DType::F32, cpu).unwrap();
    assert_eq!(m.t().unwrap().shape(), &[3, 2]);
}

/// Bad-input sweep: `arange` whose step points away from `end` is an error (PyTorch: "upper
/// bound and larger bound inconsistent with step sign"), as is a zero step; `start == end`
/// is empty for either sign.
#[test]
fn arange_rejects_inconsistent_step_sign() {
    let cpu = Device::Cpu;
    for (start, end, step) in [(0., 4., -1.), (4., 0., 1.), (0., 4., 0.), (0., 0., 0.)] {
        let e = Tensor::arange(start, end, step, DType::F32, cpu).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { op: "arange", .. }),
            "arange({start}, {end}, {step}): {e:?}"
        );
    }
    for step in [1., -1.] {
        assert_eq!(
            Tensor::arange(2., 2., step, DType::F32, cpu)
                .unwrap()
                .shape(),
            &[0]
        );
    }
    let down = Tensor::arange(4., 0., -1.5, DType::F64, cpu).unwrap();
    assert_eq!(down.to_vec::<f64>().unwrap(), vec![4.0, 2.5, 1.0]);
}

/// Bad-input sweep: `arange` is not implemented for bool, as in PyTorch.
#[test]
fn arange_rejects_bool() {
    let cpu = Device::Cpu;
    for (start, end) in [(0., 2.), (0., 0.)] {
        let e = Tensor::arange(start, end, 1., DType::Bool, cpu).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { op: "arange", .. }),
            "{e:?}"
        );
    }
}
