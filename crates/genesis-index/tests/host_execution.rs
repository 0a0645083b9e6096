//! Advanced indexing on host storages, which runs through the storage layer's host backend (the
//! CPU twins of the indexing kernels), against each plan's source offsets
//! (`IndexPlan::source_offsets`, the definition of which element each result element is):
//! random index expressions on padded (non-contiguous) and contiguous layouts of up to ten
//! dimensions, so that some results have more than eight dimensions (the executor's flat
//! path), with duplicate index tuples, for `get`, `set` (the last duplicate wins) and `set`
//! with `accumulate` (every duplicate adds, integers wrapping); and basic accumulation in every
//! dtype.

use std::sync::Arc;

use genesis_index::{IndexItem, IndexTensor, Value, get, plan, set};
use genesis_storage::{Device, Layout, Storage, View, WithDType};
use proptest::prelude::*;

/// An index expression over `shape`: per dimension a full slice, an integer, a range, or an
/// index array (all arrays of one length, some of length 1 to broadcast; values of either
/// sign, in range, repeating).
fn items_strategy(shape: Vec<usize>) -> impl Strategy<Value = (Vec<usize>, Vec<IndexItem>)> {
    let per_dim: Vec<_> = shape
        .iter()
        .map(|&size| {
            let s = size as i64;
            (
                0u8..4,
                -s..s,
                prop::collection::vec(-s..s, 5),
                any::<bool>(),
            )
        })
        .collect();
    (per_dim, 1usize..=5).prop_map(move |(dims, len)| {
        let mut items = Vec::with_capacity(dims.len());
        let mut arrays = 0;
        for (d, (kind, int, values, one)) in dims.into_iter().enumerate() {
            let size = shape[d] as i64;
            items.push(match kind {
                0 => IndexItem::full(),
                1 => IndexItem::Int(int),
                2 => IndexItem::range(int.rem_euclid(size), size),
                _ => {
                    arrays += 1;
                    let n = if one { 1 } else { len };
                    IndexItem::Tensor(IndexTensor::i64(&[n], values[..n].to_vec()))
                }
            });
        }
        if arrays == 0 {
            // At least one index array: the last dimension's.
            let size = *shape.last().expect("rank >= 1") as i64;
            let last = items.last_mut().expect("rank >= 1");
            *last = IndexItem::Tensor(IndexTensor::i64(&[3], vec![size - 1, -1, 0]));
        }
        (shape.clone(), items)
    })
}

/// A shape of 1 to 10 dimensions of sizes 1 to 3 (at most 4096 elements), an expression over
/// it, and whether the layout is padded.
fn case_strategy() -> impl Strategy<Value = (Vec<usize>, Vec<IndexItem>, bool)> {
    prop::collection::vec(1usize..=3, 1..=10)
        .prop_filter("at most 4096 elements", |s| {
            s.iter().product::<usize>() <= 4096
        })
        .prop_flat_map(items_strategy)
        .prop_flat_map(|(shape, items)| (Just(shape), Just(items), any::<bool>()))
}

/// The layout of `shape`: contiguous, or each dimension's stride that of a one-larger
/// dimension, from offset 1 (no two dimensions merge); and the storage length it needs.
fn layout_of(shape: &[usize], padded: bool) -> (Layout, usize) {
    if !padded {
        let l = Layout::contiguous(shape);
        let n = l.numel();
        return (l, n);
    }
    let mut strides = vec![0isize; shape.len()];
    let mut s = 1isize;
    for d in (0..shape.len()).rev() {
        strides[d] = s;
        s *= shape[d] as isize + 1;
    }
    (Layout::new(shape, &strides, 1), 1 + s as usize)
}

fn host<T: WithDType>(data: &[T]) -> Arc<Storage> {
    Arc::new(Storage::from_slice(data, Device::Cpu).unwrap())
}

/// Checks `get`, `set` and `set` with `accumulate` of `items` on a storage holding `data`
/// through `layout`, with `vals(k)` the value assigned to result element `k` and `add` the
/// accumulation.
fn check<T: WithDType + PartialEq + std::fmt::Debug>(
    layout: &Layout,
    items: &[IndexItem],
    data: &[T],
    vals: impl Fn(usize) -> T,
    add: impl Fn(T, T) -> T,
) -> Result<(), TestCaseError> {
    let offsets = plan(layout, items, false)
        .unwrap()
        .source_offsets()
        .unwrap();
    let view = View::with_layout(host(data), layout.clone()).unwrap();
    let got = get(&view, items).unwrap();
    let want: Vec<T> = offsets.iter().map(|&o| data[o]).collect();
    prop_assert_eq!(got.contiguous().unwrap().to_vec::<T>().unwrap(), want);

    let shape = got.layout().shape().to_vec();
    let v: Vec<T> = (0..offsets.len()).map(&vals).collect();
    let value = View::with_layout(host(&v), Layout::contiguous(&shape)).unwrap();
    let offsets = plan(layout, items, true).unwrap().source_offsets().unwrap();
    for accumulate in [false, true] {
        let mut target = Storage::from_slice(data, Device::Cpu).unwrap();
        set(
            &mut target,
            layout,
            items,
            Value::Tensor(&value),
            accumulate,
        )
        .unwrap();
        let mut want = data.to_vec();
        for (k, &o) in offsets.iter().enumerate() {
            want[o] = if accumulate { add(want[o], v[k]) } else { v[k] };
        }
        prop_assert_eq!(
            target.to_vec::<T>().unwrap(),
            want,
            "accumulate {}",
            accumulate
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn host_indexing_follows_the_source_offsets((shape, items, padded) in case_strategy()) {
        let (layout, len) = layout_of(&shape, padded);
        let data: Vec<f32> = (0..len).map(|i| i as f32).collect();
        check(&layout, &items, &data, |k| -(k as f32) - 1.0, |a, b| a + b)?;
        // Integers that wrap when duplicates add up.
        let data: Vec<i16> = (0..len).map(|i| (i as i16).wrapping_mul(7919)).collect();
        check(
            &layout,
            &items,
            &data,
            |k| 30_000i16.wrapping_add(k as i16),
            i16::wrapping_add,
        )?;
    }
}

/// A result of nine dimensions that no compaction shortens, with duplicate rows: the
/// executor's flat path (one position per result element), against the source offsets.
#[test]
fn results_past_eight_dimensions_follow_the_source_offsets() {
    let shape = [3usize, 2, 2, 2, 2, 2, 2, 2, 2];
    let (layout, len) = layout_of(&shape, true);
    let items = [
        IndexItem::full(),
        IndexItem::Tensor(IndexTensor::i64(&[4], vec![1, -1, 0, 1])),
    ];
    let p = plan(&layout, &items, false).unwrap();
    assert_eq!(p.result_shape.len(), 9);
    let data: Vec<f32> = (0..len).map(|i| i as f32).collect();
    check(
        &layout,
        &items,
        &data,
        |k| k as f32 * 0.5 + 1.0,
        |a, b| a + b,
    )
    .unwrap();
}

/// `x[1:, ::2] += v` (a basic plan: the sum of the view and the values, written back) in every
/// dtype, on a padded layout: integers and floats add (int8 wrapping), bool is a logical or.
#[test]
fn basic_accumulate_adds_in_every_dtype() {
    let (layout, len) = layout_of(&[3, 5], true);
    let items = [
        IndexItem::Slice {
            start: Some(1),
            stop: None,
            step: None,
        },
        IndexItem::Slice {
            start: None,
            stop: None,
            step: Some(2),
        },
    ];
    let offsets = plan(&layout, &items, true)
        .unwrap()
        .source_offsets()
        .unwrap();
    assert_eq!(offsets.len(), 6);
    for dtype in genesis_storage::DType::ALL {
        let small = |i: usize| match dtype {
            genesis_storage::DType::Bool => (i % 2) as f64,
            genesis_storage::DType::U8 => (i % 8) as f64,
            _ => (i % 8) as f64 - 4.0,
        };
        let data: Vec<f64> = (0..len).map(small).collect();
        let vals: Vec<f64> = (0..offsets.len()).map(|k| small(3 * k + 1)).collect();
        let of = |v: &[f64]| {
            Storage::from_slice(v, Device::Cpu)
                .unwrap()
                .to_dtype(dtype)
                .unwrap()
        };
        let mut target = of(&data);
        let value = View::with_layout(Arc::new(of(&vals)), Layout::contiguous(&[2, 3])).unwrap();
        set(&mut target, &layout, &items, Value::Tensor(&value), true).unwrap();
        let mut want = data.clone();
        for (k, &o) in offsets.iter().enumerate() {
            want[o] = if dtype == genesis_storage::DType::Bool {
                f64::from(want[o] != 0.0 || vals[k] != 0.0)
            } else {
                want[o] + vals[k]
            };
        }
        assert_eq!(target.to_f64_vec().unwrap(), want, "{dtype}");
    }
    // int8 wraps: 100 + 100 = -56.
    let mut target = Storage::from_slice(&[100i8; 4], Device::Cpu).unwrap();
    let value = View::with_layout(host(&[100i8, 27]), Layout::contiguous(&[2])).unwrap();
    let items = [IndexItem::range(1, 3)];
    set(
        &mut target,
        &Layout::contiguous(&[4]),
        &items,
        Value::Tensor(&value),
        true,
    )
    .unwrap();
    assert_eq!(target.to_vec::<i8>().unwrap(), [100, -56, 127, 100]);
}

/// What the storage layer checks of an advanced plan before any kernel runs, whatever the
/// plan holds (its fields are public): host index values out of range and a view reaching
/// outside its storage are typed errors, and a scatter through a layout that repeats elements
/// (stride 0) is refused without writing, while a gather through it reads the repeats.
#[test]
fn plans_the_storage_layer_refuses_are_typed_errors() {
    let data: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let src = View::with_layout(host(&data), Layout::contiguous(&[3, 4])).unwrap();
    let items = [IndexItem::Tensor(IndexTensor::i64(&[2], vec![2, 0]))];
    let good = plan(src.layout(), &items, false).unwrap();
    let got = genesis_index::execute_get(&src, &good).unwrap();
    assert_eq!(
        got.contiguous().unwrap().to_vec::<f32>().unwrap()[..4],
        data[8..]
    );
    // A host index value past its dimension.
    let mut far = good.clone();
    if let Some(adv) = far.advanced.as_mut() {
        adv.indices[0] = genesis_index::IndexArray::Host(vec![3, 0]);
    }
    let e = genesis_index::execute_get(&src, &far).unwrap_err();
    assert!(
        matches!(
            e,
            genesis_index::Error::Storage(genesis_storage::Error::IndexValueOutOfRange { .. })
        ),
        "{e}"
    );
    // A view larger than the storage.
    let mut wide = good.clone();
    wide.view = Layout::new(&[3, 4], &[5, 1], 0);
    let e = genesis_index::execute_get(&src, &wide).unwrap_err();
    assert!(
        matches!(
            e,
            genesis_index::Error::Storage(genesis_storage::Error::IndexOutsideStorage { .. })
        ),
        "{e}"
    );
    // Through an expanded layout: four rows that are one row of the storage.
    let expanded = Layout::new(&[4, 3], &[0, 1], 0);
    let one = View::with_layout(host(&[1.0f32, 2.0, 3.0]), expanded.clone()).unwrap();
    let rows = [IndexItem::Tensor(IndexTensor::i64(&[2], vec![3, 0]))];
    let got = get(&one, &rows).unwrap();
    assert_eq!(
        got.contiguous().unwrap().to_vec::<f32>().unwrap(),
        [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]
    );
    let cols = [
        IndexItem::Slice {
            start: None,
            stop: None,
            step: None,
        },
        IndexItem::Tensor(IndexTensor::i64(&[1], vec![1])),
    ];
    for (items, accumulate) in [(&rows[..], false), (&rows[..], true), (&cols[..], false)] {
        let mut target = Storage::from_slice(&[1.0f32, 2.0, 3.0], Device::Cpu).unwrap();
        let e = set(
            &mut target,
            &expanded,
            items,
            Value::Scalar(9.0),
            accumulate,
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                genesis_index::Error::Storage(genesis_storage::Error::IndexRefused { .. })
            ),
            "{e}"
        );
        assert_eq!(target.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0]);
    }
}
