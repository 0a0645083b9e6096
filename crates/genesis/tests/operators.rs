//! Operators and arguments: scalars of every numeric type on either side of the
//! operators and in the named and in-place ops, one dims argument type everywhere (arrays,
//! slices, vectors, -1 and negative dims where PyTorch takes them, 0-d tensors taking dim 0
//! and -1), and `s!` with bounds that are variables.

#[allow(dead_code)]
mod common;

use genesis::{DType, Device, Error, Tensor, bf16, f16, s};

fn cpu() -> Device {
    Device::Cpu
}

fn devices() -> Vec<Device> {
    let mut d = vec![Device::Cpu];
    if genesis::cuda::is_available() {
        d.push(Device::Cuda(0));
    }
    d
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

#[test]
fn scalars_of_every_numeric_type_on_either_side() {
    let _release = common::Release;
    for dev in devices() {
        let a = Tensor::from_slice(&[1.0f32, 2.0, 4.0], [3], dev).unwrap();
        assert_eq!(f32s(&(2.0 * &a).unwrap()), [2.0, 4.0, 8.0]);
        assert_eq!(f32s(&(&a * 2.0f32).unwrap()), [2.0, 4.0, 8.0]);
        assert_eq!(f32s(&(&a + 1).unwrap()), [2.0, 3.0, 5.0]);
        assert_eq!(f32s(&(1 - &a).unwrap()), [0.0, -1.0, -3.0]);
        assert_eq!(f32s(&(8 / &a).unwrap()), [8.0, 4.0, 2.0]);
        assert_eq!(f32s(&(&a - 1i64).unwrap()), [0.0, 1.0, 3.0]);
        assert_eq!(f32s(&(a.clone() / 2usize).unwrap()), [0.5, 1.0, 2.0]);
        assert_eq!(f32s(&(0.5 * a.clone()).unwrap()), [0.5, 1.0, 2.0]);
        assert_eq!(f32s(&(&a + bf16::from_f32(1.0)).unwrap()), [2.0, 3.0, 5.0]);
        assert_eq!(f32s(&(3i64 - a.clone()).unwrap()), [2.0, 1.0, -1.0]);
        for t in [
            (&a + 1u16).unwrap(),
            (&a + 1u32).unwrap(),
            (&a + 1u64).unwrap(),
            (&a + 1i16).unwrap(),
            (&a + 1i32).unwrap(),
            (&a + 1isize).unwrap(),
            (&a + 1.0f64).unwrap(),
            (1i64 + &a).unwrap(),
            (1.0f64 + &a).unwrap(),
            (&a + f16::from_f32(1.0)).unwrap(),
            (&a + 1u8).unwrap(),
            (&a + 1i8).unwrap(),
            (&a + 1usize).unwrap(),
            (&a + 1.0f32).unwrap(),
        ] {
            assert_eq!(f32s(&t), [2.0, 3.0, 5.0]);
        }
        // The named ops take a tensor or a scalar.
        assert_eq!(f32s(&a.add(1).unwrap()), [2.0, 3.0, 5.0]);
        assert_eq!(f32s(&a.sub(&a).unwrap()), [0.0, 0.0, 0.0]);
        assert_eq!(f32s(&a.mul(&a.clone()).unwrap()), [1.0, 4.0, 16.0]);
        assert_eq!(f32s(&a.div(4.0f32).unwrap()), [0.25, 0.5, 1.0]);
        assert_eq!(f32s(&a.maximum(2).unwrap()), [2.0, 2.0, 4.0]);
        assert_eq!(f32s(&a.minimum(2.0).unwrap()), [1.0, 2.0, 2.0]);
        assert_eq!(f32s(&a.pow(2).unwrap()), [1.0, 4.0, 16.0]);
        assert_eq!(a.gt(1).unwrap().to_bool_vec().unwrap(), [false, true, true]);
        assert_eq!(
            a.eq(2.0).unwrap().to_bool_vec().unwrap(),
            [false, true, false]
        );
        assert_eq!(a.le(&a).unwrap().to_bool_vec().unwrap(), [true, true, true]);
        // In place, named and compound.
        let mut y = (&a + 0).unwrap();
        y.add_(2.0).unwrap();
        assert_eq!(f32s(&y), [3.0, 4.0, 6.0]);
        y.mul_(2).unwrap();
        y.sub_(&a).unwrap();
        y.div_(0.5f32).unwrap();
        assert_eq!(f32s(&y), [10.0, 12.0, 16.0]);
        y += 1;
        y -= 0.5;
        y *= 2u8;
        y /= 3.0f32;
        assert_eq!(f32s(&y), [7.0, 25.0 / 3.0, 11.0]);
    }
}

#[test]
fn integer_scalars_stay_exact_and_are_checked() {
    let _release = common::Release;
    for dev in devices() {
        let big = (1i64 << 62) + 1;
        let z = Tensor::zeros([2], DType::I64, dev).unwrap();
        assert_eq!((&z + big).unwrap().to_vec::<i64>().unwrap(), [big, big]);
        assert_eq!((big - &z).unwrap().to_vec::<i64>().unwrap(), [big, big]);
        assert_eq!(
            z.eq(big).unwrap().to_bool_vec().unwrap(),
            [false, false],
            "compared exactly, not through f64"
        );
        let w = z.clone();
        drop(z);
        w.add_(big).unwrap();
        assert_eq!(w.eq(big).unwrap().to_bool_vec().unwrap(), [true, true]);
        // Representable scalars run; integer arithmetic wraps.
        assert_eq!(
            (&w + i64::MAX).unwrap().to_vec::<i64>().unwrap(),
            [big.wrapping_add(i64::MAX); 2]
        );
        let bytes = Tensor::from_slice(&[1u8, 2], [2], dev).unwrap();
        // An int scalar does not promote uint8; it wraps into it, as PyTorch's wrapped number.
        assert_eq!((&bytes + 256).unwrap().to_vec::<u8>().unwrap(), [1, 2]);
        assert_eq!((&bytes + -1).unwrap().to_vec::<u8>().unwrap(), [0, 1]);
        // Beyond int64 no Python int exists: refused.
        assert!(matches!(
            bytes.add(u64::MAX).unwrap_err(),
            Error::ScalarOutOfRange { .. }
        ));
        let ints = Tensor::from_slice(&[1i32, 2], [2], dev).unwrap();
        assert_eq!(
            (&ints + 0.5).unwrap().to_vec::<f32>().unwrap(),
            [1.5, 2.5],
            "a float scalar promotes an integer tensor to float32, as in PyTorch"
        );
        assert_eq!((&ints * 3u64).unwrap().to_vec::<i32>().unwrap(), [3, 6]);
        assert_eq!(
            (&ints + i32::MAX).unwrap().to_vec::<i32>().unwrap(),
            [i32::MIN, i32::MIN + 1]
        );
        // Wrapping as PyTorch's wrapped number: 2^31 is i32::MIN in int32.
        assert_eq!(
            (&ints + (i64::from(i32::MAX) + 1))
                .unwrap()
                .to_vec::<i32>()
                .unwrap(),
            [i32::MIN + 1, i32::MIN + 2]
        );
    }
}

#[test]
fn fills_and_scalar_comparisons_take_any_scalar_exactly() {
    let _release = common::Release;
    let big = (1i64 << 62) + 1;
    for dev in devices() {
        let z = Tensor::zeros([3], DType::I64, dev).unwrap();
        let f = z.full_like(big).unwrap();
        assert_eq!(f.to_vec::<i64>().unwrap(), [big; 3]);
        assert_eq!(f.eq_scalar(big).unwrap().to_bool_vec().unwrap(), [true; 3]);
        assert_eq!(
            f.eq_scalar(big - 1).unwrap().to_bool_vec().unwrap(),
            [false; 3]
        );
        let mask = Tensor::from_bools(&[true, false, true], [3], dev).unwrap();
        let m = z.masked_fill(&mask, big).unwrap();
        assert_eq!(m.to_vec::<i64>().unwrap(), [big, 0, big]);
        let w = z.masked_fill(&mask, 7u8).unwrap();
        assert_eq!(w.to_vec::<i64>().unwrap(), [7, 0, 7]);
        w.index_put_scalar_(&s![1..], big).unwrap();
        assert_eq!(w.to_vec::<i64>().unwrap(), [7, big, big]);
        w.index_put_scalar_(&s![0], -3i32).unwrap();
        assert_eq!(w.to_vec::<i64>().unwrap(), [-3, big, big]);
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], [3], dev).unwrap();
        assert_eq!(f32s(&x.pow_scalar(2).unwrap()), [1.0, 4.0, 9.0]);
        assert_eq!(f32s(&x.full_like(0.5f32).unwrap()), [0.5; 3]);
        assert_eq!(
            x.lt_scalar(2u8).unwrap().to_bool_vec().unwrap(),
            [true, false, false]
        );
        assert!(x.masked_fill(&mask, 1e39).is_err(), "overflows float32");
    }
}

#[test]
fn one_dims_type_for_shapes_and_dimension_lists() {
    let _release = common::Release;
    let a = Tensor::zeros([2, 3], DType::F32, cpu()).unwrap();
    let dims64 = vec![2i64, 3];
    let shapes: Vec<Tensor> = vec![
        Tensor::zeros([2, 3], DType::F32, cpu()).unwrap(),
        Tensor::zeros(vec![2usize, 3], DType::F32, cpu()).unwrap(),
        Tensor::zeros(&dims64, DType::F32, cpu()).unwrap(),
        Tensor::zeros(a.shape(), DType::F32, cpu()).unwrap(),
        Tensor::ones(&[2isize, 3][..], DType::F32, cpu()).unwrap(),
        Tensor::full([2u32, 3], 1.5f32, cpu()).unwrap(),
        Tensor::empty([2u64, 3], DType::F32, cpu()).unwrap(),
        Tensor::rand([2, 3], DType::F32, cpu()).unwrap(),
        Tensor::randn(vec![2, 3], DType::F32, cpu()).unwrap(),
        Tensor::randint(0, 5, [2, 3], DType::I64, cpu()).unwrap(),
        Tensor::from_slice(&[0.0f32; 6], [2, 3], cpu()).unwrap(),
        Tensor::from_bools(&[true; 6], vec![2, 3], cpu()).unwrap(),
    ];
    for t in &shapes {
        assert_eq!(t.shape(), &[2, 3]);
    }
    assert_eq!(Tensor::zeros(5, DType::F32, cpu()).unwrap().shape(), &[5]);
    assert_eq!(Tensor::zeros((), DType::F32, cpu()).unwrap().dim(), 0);
    assert!(Tensor::zeros([2, -3], DType::F32, cpu()).is_err());
    // view/reshape: any of them, -1 inferred.
    assert_eq!(a.reshape([-1]).unwrap().shape(), &[6]);
    assert_eq!(a.reshape(-1).unwrap().shape(), &[6]);
    assert_eq!(a.view(vec![3isize, -1]).unwrap().shape(), &[3, 2]);
    assert_eq!(
        a.reshape(shapes[0].t().unwrap().shape()).unwrap().shape(),
        &[3, 2]
    );
    assert_eq!(a.view([1, 6]).unwrap().shape(), &[1, 6]);
    assert!(a.reshape([-1, -1]).is_err());
    // expand: -1 keeps a size.
    let col = Tensor::zeros([3, 1], DType::F32, cpu()).unwrap();
    assert_eq!(col.expand([2, -1, 4]).unwrap().shape(), &[2, 3, 4]);
    assert_eq!(col.expand(vec![3usize, 5]).unwrap().shape(), &[3, 5]);
    assert!(col.expand([-1, 3, 4]).is_err(), "-1 for a new dimension");
    // Dimension lists: negative counts from the end.
    let x = Tensor::arange(0.0, 24.0, 1.0, DType::F32, cpu())
        .unwrap()
        .reshape([2, 3, 4])
        .unwrap();
    assert_eq!(x.permute([-1, 0, 1]).unwrap().shape(), &[4, 2, 3]);
    assert_eq!(x.permute([2, 0, 1]).unwrap().shape(), &[4, 2, 3]);
    assert!(x.permute([-4, 0, 1]).is_err());
    assert!(x.permute([0, 0, 1]).is_err());
    assert_eq!(x.sum_dim(-1, false).unwrap().shape(), &[2, 3]);
    assert_eq!(x.sum_dim([0, -1], true).unwrap().shape(), &[1, 3, 1]);
    assert_eq!(x.mean_dim(vec![1], false).unwrap().shape(), &[2, 4]);
    assert_eq!(x.amax([-2, -3], false).unwrap().shape(), &[4]);
    assert_eq!(x.amin(2usize, false).unwrap().shape(), &[2, 3]);
    assert_eq!(x.narrow(-1, 1, 2).unwrap().shape(), &[2, 3, 2]);
    assert_eq!(x.transpose(-1, 0).unwrap().shape(), &[4, 3, 2]);
    // Single dimensions: any integer type, negative from the end.
    let (d, last) = (1usize, -1i64);
    assert_eq!(x.transpose(d, last).unwrap().shape(), &[2, 4, 3]);
    assert_eq!(
        x.unsqueeze(d).unwrap().squeeze(d).unwrap().shape(),
        &[2, 3, 4]
    );
    assert_eq!(x.max_dim(last, false).unwrap().0.shape(), &[2, 3]);
    assert_eq!(x.argmin_dim(d, true).unwrap().shape(), &[2, 1, 4]);
    assert_eq!(Tensor::cat(&[&x, &x], last).unwrap().shape(), &[2, 3, 8]);
    assert_eq!(Tensor::stack(&[&x, &x], d).unwrap().shape(), &[2, 2, 3, 4]);
    // narrow: a negative start counts from the end too.
    let row = Tensor::arange(0.0, 5.0, 1.0, DType::F32, cpu()).unwrap();
    assert_eq!(f32s(&row.narrow(0, -2, 2).unwrap()), [3.0, 4.0]);
    assert_eq!(f32s(&row.narrow(-1, 1usize, 2).unwrap()), [1.0, 2.0]);
    assert!(row.narrow(0, -6, 1).is_err());
    assert!(row.narrow(0, -2, 3).is_err());
}

#[test]
fn zero_dimensional_tensors_take_dim_zero_and_minus_one() {
    let _release = common::Release;
    let s = Tensor::full((), 21.0f32, cpu()).unwrap();
    for d in [0isize, -1] {
        assert_eq!(f32s(&s.sum_dim(d, false).unwrap()), [21.0]);
        assert_eq!(s.sum_dim(d, true).unwrap().dim(), 0);
        assert_eq!(f32s(&s.mean_dim([d], false).unwrap()), [21.0]);
        assert_eq!(f32s(&s.amax(d, false).unwrap()), [21.0]);
        let (v, i) = s.max_dim(d, false).unwrap();
        assert_eq!(
            (f32s(&v), i.to_vec::<i64>().unwrap()),
            (vec![21.0], vec![0])
        );
        assert_eq!(s.argmin_dim(d, true).unwrap().to_vec::<i64>().unwrap(), [0]);
        assert_eq!(s.squeeze(d).unwrap().dim(), 0);
        assert_eq!(s.transpose(d, 0).unwrap().dim(), 0);
    }
    assert_eq!(s.unsqueeze(-1).unwrap().shape(), &[1]);
    for d in [1isize, -2] {
        assert!(s.sum_dim(d, false).is_err());
        assert!(s.max_dim(d, false).is_err());
        assert!(s.squeeze(d).is_err());
        assert!(s.transpose(0, d).is_err());
    }
    assert!(
        s.narrow(0, 0, 1).is_err(),
        "narrow has no 0-d form in PyTorch"
    );
}

#[test]
fn index_expressions_with_variable_bounds() {
    let _release = common::Release;
    let m = Tensor::arange(0.0, 20.0, 1.0, DType::F32, cpu())
        .unwrap()
        .reshape([4, 5])
        .unwrap();
    let (lo, hi) = (1usize, 3usize);
    let rows = m.i(&s![lo..hi]).unwrap();
    assert_eq!(rows.shape(), &[2, 5]);
    assert_eq!(
        f32s(&rows),
        f32s(&m.i(&s![1..3]).unwrap()),
        "variables read as literals do"
    );
    let (a, b, step) = (-4i64, -1i64, 2);
    assert_eq!(
        f32s(&m.i(&s![a..b, ..;step]).unwrap()),
        f32s(&m.i(&s![0..3, 0..5;2]).unwrap())
    );
    let last = m.shape()[1] - 1;
    assert_eq!(f32s(&m.i(&s![0, last]).unwrap()), [4.0]);
    assert_eq!(f32s(&m.i(&s![0, lo + 1..]).unwrap()), [2.0, 3.0, 4.0]);
    assert_eq!(f32s(&m.i(&s![0, ..=hi]).unwrap()), [0.0, 1.0, 2.0, 3.0]);
    let end = -1;
    assert_eq!(
        f32s(&m.i(&s![0, 2..=end]).unwrap()),
        [2.0, 3.0, 4.0],
        "..=-1: to the end"
    );
    assert_eq!(f32s(&m.i(&s![1, ..lo + 1;hi - 2]).unwrap()), [5.0, 6.0]);
    assert_eq!(m.i(&s![NEW, ELLIPSIS, lo]).unwrap().shape(), &[1, 4]);
    let idx = Tensor::from_slice(&[3i64, 0], [2], cpu()).unwrap();
    assert_eq!(f32s(&m.i(&s![@&idx, 0]).unwrap()), [15.0, 0.0]);
    assert_eq!(
        f32s(&m.i(&s![&idx, 0]).unwrap()),
        [15.0, 0.0],
        "no @ needed"
    );
    assert!(
        m.i(&s![0, 1..5;-1]).is_err(),
        "a negative step is PyTorch's error"
    );
}
