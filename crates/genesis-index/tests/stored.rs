//! Index tensors held in storages (`IndexItem::Stored`) and mask coordinates
//! (`IndexItem::Nonzero`), on the host: they plan exactly like the same values given as host
//! index tensors, and malformed ones give typed errors.

use std::sync::Arc;

use genesis_index::{
    Error, IndexArray, IndexItem, IndexTensor, MaskCoords, MaskStrategy, StoredIndex, get, plan,
    resolve_masks, s,
};
use genesis_storage::{DType, Device, Layout, Storage, View};

fn view<T: genesis_storage::WithDType>(data: &[T], shape: &[usize]) -> View {
    View::with_layout(
        Arc::new(Storage::from_slice(data, Device::Cpu).unwrap()),
        Layout::contiguous(shape),
    )
    .unwrap()
}

fn bools(data: &[bool], shape: &[usize]) -> View {
    let bytes: Vec<u8> = data.iter().map(|&b| u8::from(b)).collect();
    View::with_layout(
        Arc::new(Storage::from_bytes(&bytes, DType::Bool, Device::Cpu).unwrap()),
        Layout::contiguous(shape),
    )
    .unwrap()
}

#[test]
fn stored_host_indices_plan_like_host_index_tensors() {
    let layout = Layout::contiguous(&[5, 6]);
    let idx = [4i64, -1, 0, 2];
    for (stored, host) in [
        (
            s![@view(&idx, &[4])],
            s![@IndexTensor::i64(&[4], idx.to_vec())],
        ),
        (
            s![.., @view(&[3i32, -6, 5], &[3])],
            s![.., @IndexTensor::i64(&[3], vec![3, -6, 5])],
        ),
        (
            s![@bools(&[true, false, true, true, false], &[5])],
            s![@IndexTensor::mask(&[5], &[true, false, true, true, false])],
        ),
    ] {
        let a = plan(&layout, &stored, false).unwrap();
        let b = plan(&layout, &host, false).unwrap();
        assert_eq!(a, b);
        assert!(
            a.advanced
                .as_ref()
                .unwrap()
                .indices
                .iter()
                .all(|i| matches!(i, IndexArray::Host(_)))
        );
    }
    // Out of range, through a stored tensor: the same typed error as on the host.
    assert_eq!(
        plan(&layout, &s![@view(&[0i64, 5], &[2])], false).unwrap_err(),
        Error::IndexOutOfRange {
            dim: 0,
            index: 5,
            size: 5
        }
    );
    // A float tensor cannot index.
    assert!(matches!(
        IndexItem::stored(view(&[0.0f32], &[1])),
        IndexItem::BadTensor("float32")
    ));
    assert!(matches!(
        plan(&layout, &[IndexItem::stored(view(&[0.0f32], &[1]))], false),
        Err(Error::InvalidIndex { .. })
    ));
}

#[test]
fn masks_record_their_measured_density() {
    let layout = Layout::contiguous(&[2, 3]);
    let bits = [true, false, true, true, true, false];
    let p = plan(&layout, &s![@IndexTensor::mask(&[2, 3], &bits)], false).unwrap();
    let m = p.mask.unwrap();
    assert_eq!(m.strategy, MaskStrategy::FullCompaction);
    assert_eq!((m.selected, m.total), (4, 6));
    assert!((m.density() - 4.0 / 6.0).abs() < 1e-12);
    let p = plan(
        &layout,
        &s![@IndexTensor::mask(&[2], &[false, true])],
        false,
    )
    .unwrap();
    let m = p.mask.unwrap();
    assert_eq!(m.strategy, MaskStrategy::RowIndices);
    assert_eq!((m.selected, m.total), (1, 2));
    assert!(!m.uploads_mask(), "row masks always become row indices");
    // A mask over the whole tensor is sent as its bytes at every density, empty included.
    let n = 64;
    let layout = Layout::contiguous(&[n]);
    for set in [0, 1, 3, 4, 5, 8, 9, 32, 64] {
        let bits: Vec<bool> = (0..n).map(|i| i < set).collect();
        let m = plan(&layout, &s![@IndexTensor::mask(&[n], &bits)], false)
            .unwrap()
            .mask
            .unwrap();
        assert_eq!(m.strategy, MaskStrategy::FullCompaction);
        assert_eq!((m.selected, m.total), (set, n), "{set} of {n}");
        assert!(m.uploads_mask(), "{set} of {n}");
    }
    // Host masks need no resolution: the items come back as they are.
    let items = s![@bools(&[true, false], &[2])];
    assert!(matches!(
        resolve_masks(&items).unwrap(),
        std::borrow::Cow::Borrowed(_)
    ));
}

#[test]
fn mask_coordinates_are_checked_against_the_indexed_dimensions() {
    let x = view(&(0..12).collect::<Vec<i32>>(), &[3, 4]);
    // Coordinates of the mask [[F, T, F, F], [F, F, F, F], [T, F, F, T]].
    let coords = |rows: &[i64], cols: &[i64]| MaskCoords {
        mask_shape: vec![3, 4],
        selected: rows.len(),
        coords: vec![
            StoredIndex {
                view: view(rows, &[rows.len()]),
                dtype: genesis_index::IndexDType::I64,
            },
            StoredIndex {
                view: view(cols, &[cols.len()]),
                dtype: genesis_index::IndexDType::I64,
            },
        ],
    };
    let ok = coords(&[0, 2, 2], &[1, 0, 3]);
    // On the CPU, coordinates held in host storages are read like the mask's nonzero.
    let p = plan(x.layout(), &[IndexItem::Nonzero(ok.clone())], false).unwrap();
    assert_eq!(p.result_shape, vec![3]);
    assert_eq!(p.mask.unwrap().selected, 3);
    let got = get(&x, &[IndexItem::Nonzero(ok.clone())]).unwrap();
    assert_eq!(
        got.contiguous().unwrap().to_vec::<i32>().unwrap(),
        vec![1, 8, 11]
    );
    // A coordinate outside its dimension.
    let far = coords(&[0, 3], &[1, 0]);
    assert_eq!(
        plan(x.layout(), &[IndexItem::Nonzero(far)], false).unwrap_err(),
        Error::IndexOutOfRange {
            dim: 0,
            index: 3,
            size: 3
        }
    );
    // A mask shape that does not match the dimensions.
    let mut wrong = ok.clone();
    wrong.mask_shape = vec![4, 3];
    assert!(matches!(
        plan(x.layout(), &[IndexItem::Nonzero(wrong)], false),
        Err(Error::ShapeMismatch { .. })
    ));
    // Coordinate arrays of the wrong length, or the wrong number of them.
    let mut short = ok.clone();
    short.selected = 2;
    assert!(matches!(
        plan(x.layout(), &[IndexItem::Nonzero(short)], false),
        Err(Error::InvalidIndex { .. })
    ));
    let mut one = ok;
    one.coords.pop();
    assert!(matches!(
        plan(x.layout(), &[IndexItem::Nonzero(one)], false),
        Err(Error::InvalidIndex { .. })
    ));
    // Reading through host-stored indices gives the values.
    let got = get(&x, &s![@view(&[2i64, 0], &[2]), 1]).unwrap();
    assert_eq!(
        got.contiguous().unwrap().to_vec::<i32>().unwrap(),
        vec![9, 1]
    );
}

#[test]
fn whole_host_masks_take_one_pass_with_the_planned_results() {
    // x[mask] and x[mask] = v for a host mask of a contiguous host tensor's whole shape (a view
    // with an offset) give what planning gives, for masks as index tensors and as storages.
    let shape = [7, 13];
    let n = 7 * 13;
    let data: Vec<f32> = (0..n + 3).map(|i| i as f32 - 20.0).collect();
    let x = View::with_layout(
        Arc::new(Storage::from_slice(&data, Device::Cpu).unwrap()),
        Layout::new(&shape, &[13, 1], 3),
    )
    .unwrap();
    for every in [1, 2, 5, n + 1] {
        let bits: Vec<bool> = (0..n).map(|i| i % every == 0 && every <= n).collect();
        for items in [
            s![@IndexTensor::mask(&shape, &bits)],
            s![@bools(&bits, &shape)],
        ] {
            let want = genesis_index::execute_get(&x, &plan(x.layout(), &items, false).unwrap())
                .unwrap()
                .contiguous()
                .unwrap()
                .to_vec::<f32>()
                .unwrap();
            let got = get(&x, &items).unwrap();
            assert_eq!(got.layout().shape(), &[want.len()]);
            assert_eq!(
                got.contiguous().unwrap().to_vec::<f32>().unwrap(),
                want,
                "one in {every}"
            );
            let mut target = Storage::from_slice(&data, Device::Cpu).unwrap();
            genesis_index::set(
                &mut target,
                x.layout(),
                &items,
                genesis_index::Value::Scalar(0.5),
                false,
            )
            .unwrap();
            let filled = target.to_vec::<f32>().unwrap();
            for (i, (&f, &d)) in filled.iter().zip(&data).enumerate() {
                let set = i >= 3 && bits[i - 3];
                assert_eq!(f, if set { 0.5 } else { d }, "element {i}, one in {every}");
            }
        }
    }
    // A layout reaching past the storage is an error, and nothing is written.
    let mut short = Storage::from_slice(&data[..n], Device::Cpu).unwrap();
    let bits = vec![true; n];
    assert!(
        genesis_index::set(
            &mut short,
            &Layout::new(&shape, &[13, 1], 3),
            &s![@IndexTensor::mask(&shape, &bits)],
            genesis_index::Value::Scalar(0.5),
            false,
        )
        .is_err()
    );
    assert_eq!(short.to_vec::<f32>().unwrap(), &data[..n]);
}
