//! NumPy's indexing edge cases on the CPU executor: a value's leading size-1 dimensions, an
//! empty ellipsis between advanced indices, assignment into views of many dimensions, empty
//! and huge index broadcasts.

use std::sync::Arc;

use genesis_index::{Error, IndexItem, IndexTensor, Value, get, plan, s, set};
use genesis_storage::{DType, Device, Layout, Storage, View};

fn arange(shape: &[usize]) -> (Storage, Layout) {
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
    (
        Storage::from_slice(&data, Device::Cpu).unwrap(),
        Layout::contiguous(shape),
    )
}

fn value(shape: &[usize], data: &[f32]) -> View {
    View::with_layout(
        Arc::new(Storage::from_slice(data, Device::Cpu).unwrap()),
        Layout::contiguous(shape),
    )
    .unwrap()
}

fn idx(shape: &[usize], data: Vec<i64>) -> IndexItem {
    IndexItem::Tensor(IndexTensor::i64(shape, data))
}

/// A value with extra leading size-1 dimensions is accepted (they are dropped).
#[test]
fn leading_one_dimensions_of_a_value_are_dropped() {
    // x[:] = value[1, 2]
    let (mut x, l) = arange(&[2]);
    set(
        &mut x,
        &l,
        &s![..],
        Value::Tensor(&value(&[1, 2], &[7., 8.])),
        false,
    )
    .unwrap();
    assert_eq!(x.to_vec::<f32>().unwrap(), vec![7., 8.]);
    // x[0] = value[1, 4]
    let (mut x, l) = arange(&[3, 4]);
    let v = value(&[1, 4], &[1., 2., 3., 4.]);
    set(&mut x, &l, &s![0], Value::Tensor(&v), false).unwrap();
    assert_eq!(&x.to_vec::<f32>().unwrap()[..5], &[1., 2., 3., 4., 4.]);
    // x[[0, 2]] = value[1, 2, 4], then += with accumulate
    let (mut x, l) = arange(&[3, 4]);
    let v = value(&[1, 1, 2, 4], &[10.; 8]);
    set(
        &mut x,
        &l,
        &[idx(&[2], vec![0, 2])],
        Value::Tensor(&v),
        false,
    )
    .unwrap();
    set(
        &mut x,
        &l,
        &[idx(&[2], vec![0, 2])],
        Value::Tensor(&v),
        true,
    )
    .unwrap();
    let got = x.to_vec::<f32>().unwrap();
    assert_eq!(&got[..4], &[20.; 4]);
    assert_eq!(&got[4..8], &[4., 5., 6., 7.]);
    assert_eq!(&got[8..], &[20.; 4]);
    // Leading dimensions that are not 1 are still refused, and nothing is written.
    let (mut x, l) = arange(&[2]);
    let r = set(
        &mut x,
        &l,
        &s![..],
        Value::Tensor(&value(&[2, 2], &[1.; 4])),
        false,
    );
    assert!(matches!(r, Err(Error::ShapeMismatch { .. })));
    assert_eq!(x.to_vec::<f32>().unwrap(), vec![0., 1.]);
}

/// An ellipsis of zero dimensions between advanced indices separates them (the
/// broadcast dimensions go first).
#[test]
fn an_empty_ellipsis_separates_advanced_indices() {
    let l = Layout::contiguous(&[2, 2]);
    let items = [
        IndexItem::NewAxis,
        idx(&[2], vec![0, 1]),
        IndexItem::Ellipsis,
        idx(&[2], vec![0, 1]),
    ];
    assert_eq!(plan(&l, &items, false).unwrap().result_shape, vec![2, 1]);
    let l = Layout::contiguous(&[2, 2, 3]);
    let items = [
        IndexItem::NewAxis,
        IndexItem::Int(1),
        IndexItem::Ellipsis,
        idx(&[2], vec![0, 1]),
        idx(&[1], vec![0]),
    ];
    assert_eq!(plan(&l, &items, false).unwrap().result_shape, vec![2, 1]);
    // Without the ellipsis they stay in place.
    let items = [
        IndexItem::NewAxis,
        IndexItem::Int(1),
        idx(&[2], vec![0, 1]),
        IndexItem::full(),
    ];
    assert_eq!(plan(&l, &items, false).unwrap().result_shape, vec![1, 2, 3]);
}

/// Assignment through a view of more than eight dimensions.
#[test]
fn assignment_into_views_of_many_dimensions() {
    let (mut x, l) = arange(&[2]);
    let mut items: Vec<IndexItem> = vec![IndexItem::NewAxis; 8];
    items.push(IndexItem::full());
    set(&mut x, &l, &items, Value::Scalar(1.0), false).unwrap();
    assert_eq!(x.to_vec::<f32>().unwrap(), vec![1., 1.]);
    // 63 new axes: the 64 dimensions NumPy allows.
    let mut items: Vec<IndexItem> = vec![IndexItem::NewAxis; 63];
    items.push(IndexItem::full());
    set(
        &mut x,
        &l,
        &items,
        Value::Tensor(&value(&[2], &[3., 4.])),
        true,
    )
    .unwrap();
    assert_eq!(x.to_vec::<f32>().unwrap(), vec![4., 5.]);
    let base = View::with_layout(Arc::new(x), l).unwrap();
    let v = get(&base, &items).unwrap();
    assert_eq!(v.layout().rank(), 64);
    // Ten dimensions that do not merge: x[::2, ::2, ...] of a [3; 10] tensor, set and read.
    let (mut y, l) = arange(&[3; 10]);
    let items = vec![
        IndexItem::Slice {
            start: None,
            stop: None,
            step: Some(2)
        };
        10
    ];
    set(&mut y, &l, &items, Value::Scalar(-1.0), false).unwrap();
    let got = y.to_vec::<f32>().unwrap();
    assert_eq!(got.iter().filter(|&&v| v == -1.0).count(), 1 << 10);
    set(
        &mut y,
        &l,
        &items,
        Value::Tensor(&value(&[2], &[5., 6.])),
        true,
    )
    .unwrap();
    let got = y.to_vec::<f32>().unwrap();
    assert_eq!(got[0], 4.0);
    assert_eq!(got[2], 5.0);
}

/// An index array whose broadcast shape is empty is not bounds-checked; an integer
/// (or a 0-d index array) still is.
#[test]
fn empty_broadcasts_are_not_bounds_checked() {
    let (x, l) = arange(&[2, 3]);
    let base = View::with_layout(Arc::new(x), l.clone()).unwrap();
    let r = get(&base, &[idx(&[0], vec![]), idx(&[1], vec![5])]).unwrap();
    assert_eq!(r.layout().shape(), &[0]);
    let r = get(&base, &[idx(&[0, 1], vec![]), idx(&[1], vec![-9])]).unwrap();
    assert_eq!(r.layout().shape(), &[0, 1]);
    assert!(matches!(
        get(&base, &[idx(&[0], vec![]), IndexItem::Int(5)]),
        Err(Error::IndexOutOfRange { .. })
    ));
    assert!(matches!(
        get(&base, &[idx(&[0], vec![]), idx(&[], vec![5])]),
        Err(Error::IndexOutOfRange { .. })
    ));
    // Broadcast mismatch is reported before bounds (as NumPy does).
    assert!(matches!(
        get(&base, &[idx(&[0], vec![]), idx(&[2], vec![7, 8])]),
        Err(Error::ShapeMismatch { .. })
    ));
    // Assignment: nothing to write, no error.
    let (mut x, l) = arange(&[2, 3]);
    set(
        &mut x,
        &l,
        &[idx(&[0], vec![]), idx(&[1], vec![5])],
        Value::Scalar(9.0),
        false,
    )
    .unwrap();
    assert_eq!(
        x.to_vec::<f32>().unwrap(),
        (0..6).map(|i| i as f32).collect::<Vec<_>>()
    );
    let _ = DType::F32;
}

/// Index arrays that broadcast to more values than the host holds: a typed error, no abort.
#[test]
fn huge_index_broadcasts_are_errors() {
    let l = Layout::contiguous(&[4, 4]);
    let a = idx(&[1 << 20, 1], vec![0; 1 << 20]);
    let b = idx(&[1, 1 << 20], vec![0; 1 << 20]);
    // 2^40 positions: the plan's arrays alone need 16 TiB.
    let r = plan(&l, &[a, b], false);
    assert!(r.is_err(), "{:?}", r.map(|p| p.result_shape));
    let c = idx(&[1 << 31, 1], vec![]);
    assert!(plan(&l, &[c], false).is_err(), "data length checked first");
}
