//! Property tests of invariants that need no oracle: a layout that passes `check_bounds` never
//! reaches outside its storage; views read what a copy reads; basic and advanced indexing agree;
//! an assignment that fails leaves the tensor unchanged, one that succeeds reads back.

use std::sync::Arc;

use genesis_index::{IndexItem, IndexTensor, Value, get, set};
use genesis_storage::{Device, Layout, Storage, View};
use proptest::prelude::*;

fn arange_view(shape: &[usize]) -> View {
    let n: usize = shape.iter().product();
    let data: Vec<i32> = (0..n as i32).collect();
    View::with_layout(
        Arc::new(Storage::from_slice(&data, Device::Cpu).unwrap()),
        Layout::contiguous(shape),
    )
    .unwrap()
}

fn values(v: &View) -> Vec<i32> {
    let l = v.layout();
    let all = v.storage().to_vec::<i32>().unwrap();
    l.indices().map(|i| all[i]).collect()
}

fn shape_strategy() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..5, 0..5)
}

/// A random basic item for a dimension of `size` (or a new axis / an ellipsis).
fn item_strategy() -> impl Strategy<Value = IndexItem> {
    prop_oneof![
        (-6i64..6).prop_map(IndexItem::Int),
        (
            prop::option::of(-7i64..7),
            prop::option::of(-7i64..7),
            prop::option::of(-2i64..4)
        )
            .prop_map(|(start, stop, step)| IndexItem::Slice { start, stop, step }),
        Just(IndexItem::NewAxis),
        Just(IndexItem::Ellipsis),
    ]
}

fn index_strategy() -> impl Strategy<Value = Vec<IndexItem>> {
    prop::collection::vec(
        prop_oneof![
            4 => item_strategy(),
            1 => (prop::collection::vec(-6i64..6, 0..4), 0usize..2).prop_map(|(d, r)| {
                let n = d.len();
                let shape = if r == 0 { vec![n] } else { vec![1, n] };
                IndexItem::Tensor(IndexTensor::i64(&shape, d))
            }),
        ],
        0..5,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// `check_bounds` is exact, whatever the strides and offset (huge,
    /// negative, wrapping): every element index of a layout it accepts is inside the storage.
    #[test]
    fn check_bounds_is_sound(
        shape in prop::collection::vec(0usize..4, 0..4),
        strides in prop::collection::vec(
            prop_oneof![-8isize..8, Just(isize::MIN), Just(isize::MAX), Just((1 << 62) + 1), Just(-(1 << 62))],
            4,
        ),
        offset in prop_oneof![0usize..64, Just(usize::MAX), Just(usize::MAX / 2)],
        len in 0usize..128,
    ) {
        let l = Layout::new(&shape, &strides[..shape.len()], offset);
        if l.check_bounds(len).is_ok() {
            for i in l.indices() {
                prop_assert!(i < len, "{l:?} reaches {i} of {len}");
            }
        }
    }

    /// A basic index gives a view that reads what the same index reads from a permuted copy
    /// made contiguous (and made back to the same logical tensor).
    #[test]
    fn views_read_what_copies_read(shape in shape_strategy(), items in prop::collection::vec(item_strategy(), 0..5)) {
        let x = arange_view(&shape);
        // A contiguous copy of x, reached through a transposed layout of another storage.
        let rank = shape.len();
        let rev: Vec<usize> = (0..rank).rev().collect();
        let t = x.layout().permute(&rev).unwrap();
        let dense_t: Vec<i32> = {
            let all = x.storage().to_vec::<i32>().unwrap();
            t.indices().map(|i| all[i]).collect()
        };
        let y = View::with_layout(
            Arc::new(Storage::from_slice(&dense_t, Device::Cpu).unwrap()),
            Layout::contiguous(t.shape()).permute(&rev).unwrap(),
        ).unwrap();
        prop_assert_eq!(values(&y), values(&x));
        match (get(&x, &items), get(&y, &items)) {
            (Ok(a), Ok(b)) => {
                prop_assert!(a.shares_storage(&x));
                prop_assert_eq!(a.layout().shape(), b.layout().shape());
                prop_assert_eq!(values(&a), values(&b));
            }
            (Err(a), Err(b)) => prop_assert_eq!(a.kind(), b.kind()),
            (a, b) => prop_assert!(false, "{a:?} vs {b:?}"),
        }
    }

    /// A slice and the index array of the positions it selects read the same elements.
    #[test]
    fn slices_agree_with_index_arrays(
        shape in prop::collection::vec(1usize..5, 1..4),
        dim in 0usize..3,
        start in prop::option::of(-5i64..5),
        stop in prop::option::of(-5i64..5),
        step in 1i64..3,
    ) {
        let dim = dim % shape.len();
        let x = arange_view(&shape);
        let mut basic = vec![IndexItem::full(); dim];
        basic.push(IndexItem::Slice { start, stop, step: Some(step) });
        let v = get(&x, &basic).unwrap();
        // The positions that slice selects, as an index array.
        let size = shape[dim] as i64;
        let norm = |b: i64| if b < 0 { (b + size).max(0) } else { b.min(size) };
        let (a, b) = (start.map_or(0, norm), stop.map_or(size, norm));
        let pos: Vec<i64> = (a..b.max(a)).step_by(step as usize).collect();
        let mut adv = vec![IndexItem::full(); dim];
        adv.push(IndexItem::Tensor(IndexTensor::i64(&[pos.len()], pos)));
        let g = get(&x, &adv).unwrap();
        prop_assert_eq!(v.layout().shape(), g.layout().shape());
        prop_assert_eq!(values(&v), values(&g));
    }

    /// An assignment either succeeds, and then reads back where the index has no duplicates,
    /// or fails and leaves every element as it was.
    #[test]
    fn failed_assignments_change_nothing(
        shape in shape_strategy(),
        items in index_strategy(),
        vshape in prop::collection::vec(0usize..4, 0..4),
        accumulate in any::<bool>(),
    ) {
        let x = arange_view(&shape);
        let mut target = x.storage().try_clone().unwrap();
        let before = target.to_vec::<i32>().unwrap();
        let n: usize = vshape.iter().product();
        let vdata: Vec<i32> = (0..n as i32).map(|i| 1000 + i).collect();
        let v = View::with_layout(
            Arc::new(Storage::from_slice(&vdata, Device::Cpu).unwrap()),
            Layout::contiguous(&vshape),
        ).unwrap();
        match set(&mut target, x.layout(), &items, Value::Tensor(&v), accumulate) {
            Err(_) => prop_assert_eq!(target.to_vec::<i32>().unwrap(), before),
            Ok(()) => {
                // Without duplicates and without accumulate, reading back gives the value
                // broadcast to the indexed shape.
                let dup = items.iter().any(|i| match i {
                    IndexItem::Tensor(t) => {
                        let mut d = t.data.clone();
                        d.sort_unstable();
                        d.windows(2).any(|w| w[0] == w[1]) || t.data.iter().any(|&k| k < 0)
                    }
                    _ => false,
                });
                let tensors = items.iter().filter(|i| matches!(i, IndexItem::Tensor(_))).count();
                if !accumulate && !dup && tensors <= 1 {
                    let after = View::with_layout(Arc::new(target), x.layout().clone()).unwrap();
                    let read = get(&after, &items).unwrap();
                    let want = genesis_index::plan(x.layout(), &items, true).unwrap();
                    let vl = want.broadcast_value(v.layout()).unwrap();
                    let expected: Vec<i32> = vl.indices().map(|i| vdata[i]).collect();
                    prop_assert_eq!(values(&read), expected);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// The compacted plan (for executors with a rank limit) visits the same elements in the
    /// same order.
    #[test]
    fn compacted_plans_visit_the_same_elements(
        shape in prop::collection::vec(1usize..4, 0..6),
        items in index_strategy(),
        assign in any::<bool>(),
    ) {
        let l = Layout::contiguous(&shape);
        if let Ok(p) = genesis_index::plan(&l, &items, assign) {
            let c = p.compacted();
            prop_assert!(c.result_shape.len() <= p.result_shape.len());
            prop_assert_eq!(
                c.result_shape.iter().product::<usize>(),
                p.result_shape.iter().product::<usize>()
            );
            prop_assert_eq!(c.source_offsets().unwrap(), p.source_offsets().unwrap());
        }
    }
}
