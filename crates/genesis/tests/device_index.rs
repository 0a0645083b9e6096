//! Index tensors and masks held in tensors (`s![@&idx]`), on every device: the result equals the
//! one with the same indices given on the host (the CPU executor, checked by the conformance
//! corpus), for int64 and int32 indices, negative values, broadcasting, strided index tensors,
//! masks over leading and all dimensions, assignment with duplicates (last wins) and
//! accumulation; out-of-range values are typed errors and leave the target unchanged.

use genesis::{DType, Device, Error, IndexTensor, Tensor, s};

mod common;
use common::{Release, devices};

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

fn host_index(data: &[i64], shape: &[usize]) -> IndexTensor {
    IndexTensor::i64(shape, data.to_vec())
}

fn matrix(rows: usize, cols: usize, dev: Device) -> Tensor {
    Tensor::arange(0.0, (rows * cols) as f64, 1.0, DType::F32, dev)
        .unwrap()
        .reshape([rows as isize, cols as isize])
        .unwrap()
}

#[test]
fn gathers_with_index_tensors_on_their_device() {
    let _release = Release;
    for dev in devices() {
        let x = matrix(37, 12, dev);
        let xc = matrix(37, 12, Device::Cpu);
        let rows = [3i64, -1, 0, 36, 3, -37];
        let cols = [11i64, 0, -2, 5];
        for dtype in [DType::I64, DType::I32] {
            let r = Tensor::from_slice(&rows, [rows.len()], dev)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            let c = Tensor::from_slice(&cols, [cols.len()], dev)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            let cases: Vec<(Vec<genesis::IndexItem>, Vec<genesis::IndexItem>)> = vec![
                // Rows (the row kernel on the GPU), columns, a 0-d integer among tensors.
                (s![@&r], s![@host_index(&rows, &[6])]),
                (s![.., @&c], s![.., @host_index(&cols, &[4])]),
                (s![2, @&c], s![2, @host_index(&cols, &[4])]),
                // Two arrays broadcast together: [6, 1] with [4].
                (
                    s![@r.reshape([6, 1]).unwrap(), @&c],
                    s![@host_index(&rows, &[6, 1]), @host_index(&cols, &[4])],
                ),
                // Separated by a slice: the index dimensions go first.
                (s![@&r, 1..3], s![@host_index(&rows, &[6]), 1..3]),
            ];
            for (on_device, on_host) in cases {
                let got = x.i(&on_device).unwrap();
                let want = xc.i(&on_host).unwrap();
                assert_eq!(got.device(), dev);
                assert_eq!(got.shape(), want.shape(), "{dtype} on {dev}");
                assert_eq!(f32s(&got), f32s(&want), "{dtype} on {dev}");
            }
        }
        // A 1-D index tensor with a stride and an offset (the row kernel reads it as it is).
        for dtype in [DType::I64, DType::I32] {
            let every_other = Tensor::from_slice(&[7i64, 5, 0, 2, 9, -1, 3], [7], dev)
                .unwrap()
                .to_dtype(dtype)
                .unwrap()
                .i(&s![1..;2])
                .unwrap();
            let got = x.i(&s![@&every_other]).unwrap();
            let want = xc.i(&s![@host_index(&[5, 2, -1], &[3])]).unwrap();
            assert_eq!(f32s(&got), f32s(&want), "{dtype} on {dev}");
        }
        // A strided index tensor (a transposed view): read through its layout.
        let idx2 = Tensor::from_slice(&[0i64, 1, 2, 3, 4, 5], [2, 3], dev)
            .unwrap()
            .t()
            .unwrap();
        let got = x.i(&s![@&idx2]).unwrap();
        let want = xc
            .i(&s![@host_index(&[0, 3, 1, 4, 2, 5], &[3, 2])])
            .unwrap();
        assert_eq!(got.shape(), [3, 2, 12]);
        assert_eq!(f32s(&got), f32s(&want));
    }
}

#[test]
fn out_of_range_device_indices_are_typed_errors_and_write_nothing() {
    let _release = Release;
    for dev in devices() {
        let x = matrix(5, 4, dev);
        let before = f32s(&x);
        for (bad, want) in [([0i64, 5, 1], 5i64), ([0, 1, -6], -6)] {
            let idx = Tensor::from_slice(&bad, [3], dev).unwrap();
            let e = x.i(&s![@&idx]).unwrap_err();
            let Error::Index(genesis_index::Error::IndexOutOfRange { dim, index, size }) = e else {
                panic!("unexpected {e:?} on {dev}");
            };
            assert_eq!((dim, index, size), (0, want, 5), "on {dev}");
            // Columns: dimension 1 of size 4.
            let e = x.i(&s![.., @&idx]).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::Index(genesis_index::Error::IndexOutOfRange {
                        dim: 1,
                        size: 4,
                        ..
                    })
                ),
                "{e:?}"
            );
            let v = Tensor::full([3, 4], 7.0f32, dev).unwrap();
            assert!(x.index_put_(&s![@&idx], &v, false).is_err());
            assert!(x.index_put_(&s![@&idx], &v, true).is_err());
            assert!(x.index_put_scalar_(&s![@&idx], 9.0).is_err());
            assert_eq!(f32s(&x), before, "target changed on {dev}");
        }
        // Float index tensors are rejected.
        let f = Tensor::from_slice(&[0.0f32], [1], dev).unwrap();
        assert!(matches!(
            x.i(&s![@&f]),
            Err(Error::Index(genesis_index::Error::InvalidIndex { .. }))
        ));
    }
}

#[test]
fn assignment_through_device_indices_matches_the_host() {
    let _release = Release;
    for dev in devices() {
        // Duplicates: the last write wins (put), contributions add up (add).
        let rows = [4i64, 1, 4, -1, 0, 1];
        let idx = Tensor::from_slice(&rows, [6], dev).unwrap();
        let vals: Vec<f32> = (0..6 * 8).map(|v| v as f32 * 0.5 - 3.0).collect();
        let v = Tensor::from_slice(&vals, [6, 8], dev).unwrap();
        let vc = Tensor::from_slice(&vals, [6, 8], Device::Cpu).unwrap();
        for accumulate in [false, true] {
            let x = matrix(9, 8, dev);
            let xc = matrix(9, 8, Device::Cpu);
            if accumulate {
                x.index_put_(&s![@&idx], &v, true).unwrap();
                xc.index_put_(&s![@host_index(&rows, &[6])], &vc, true)
                    .unwrap();
            } else {
                x.index_put_(&s![@&idx], &v, false).unwrap();
                xc.index_put_(&s![@host_index(&rows, &[6])], &vc, false)
                    .unwrap();
            }
            assert_eq!(f32s(&x), f32s(&xc), "accumulate={accumulate} on {dev}");
        }
        // Two index arrays (element keys), a scalar fill, and a 16-byte row that does not
        // divide: the general kernels.
        let x = matrix(9, 7, dev);
        let xc = matrix(9, 7, Device::Cpu);
        let (a, b) = ([8i64, 0, 8, 3], [6i64, 6, 6, -7]);
        let ta = Tensor::from_slice(&a, [4], dev).unwrap();
        let tb = Tensor::from_slice(&b, [4], dev)
            .unwrap()
            .to_dtype(DType::I32)
            .unwrap();
        let val = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], [4], dev).unwrap();
        let valc = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], [4], Device::Cpu).unwrap();
        x.index_put_(&s![@&ta, @&tb], &val, false).unwrap();
        xc.index_put_(
            &s![@host_index(&a, &[4]), @host_index(&b, &[4])],
            &valc,
            false,
        )
        .unwrap();
        x.index_put_scalar_(&s![@&ta], -1.0).unwrap();
        xc.index_put_scalar_(&s![@host_index(&a, &[4])], -1.0)
            .unwrap();
        assert_eq!(f32s(&x), f32s(&xc), "on {dev}");
    }
}

#[test]
fn masks_on_their_device_select_and_assign() {
    let _release = Release;
    for dev in devices() {
        let x = Tensor::arange(0.0, 60.0, 1.0, DType::F32, dev)
            .unwrap()
            .reshape([3, 4, 5])
            .unwrap();
        let bits: Vec<bool> = (0..60).map(|i| (i * 7) % 3 == 0).collect();
        let rows = [true, false, true];
        let plane: Vec<bool> = (0..12).map(|i| i % 5 < 2).collect();
        let full = Tensor::from_bools(&bits, [3, 4, 5], dev).unwrap();
        let lead = Tensor::from_bools(&rows, [3], dev).unwrap();
        let two = Tensor::from_bools(&plane, [3, 4], dev).unwrap();
        let cases: Vec<(Vec<genesis::IndexItem>, Vec<genesis::IndexItem>)> = vec![
            (s![@&full], s![@IndexTensor::mask(&[3, 4, 5], &bits)]),
            (s![@&lead], s![@IndexTensor::mask(&[3], &rows)]),
            (s![@&two], s![@IndexTensor::mask(&[3, 4], &plane)]),
            (
                s![@&two, 1..4],
                s![@IndexTensor::mask(&[3, 4], &plane), 1..4],
            ),
            (
                s![1, @&two.i(&s![0]).unwrap()],
                s![1, @IndexTensor::mask(&[4], &plane[..4])],
            ),
            // A strided (transposed) mask: coordinates of the view, row-major.
            (
                s![.., @&two.t().unwrap()],
                s![.., @IndexTensor::mask(&[4, 3], &transpose(&plane, 3, 4))],
            ),
        ];
        for (k, (on_device, on_host)) in cases.into_iter().enumerate() {
            let src = if k == 5 {
                x.i(&s![.., 0..4, 0..3]).unwrap()
            } else {
                x.clone()
            };
            let src_c = src.to(Device::Cpu).unwrap();
            let got = src.i(&on_device).unwrap();
            let want = src_c.i(&on_host).unwrap();
            assert_eq!(got.shape(), want.shape(), "case {k} on {dev}");
            assert_eq!(f32s(&got), f32s(&want), "case {k} on {dev}");
            // Assignment through the same mask.
            let y = Tensor::from_slice(&f32s(&src), src.shape(), dev).unwrap();
            let yc = Tensor::from_slice(&f32s(&src), src.shape(), Device::Cpu).unwrap();
            y.index_put_scalar_(&on_device, -5.0).unwrap();
            yc.index_put_scalar_(&on_host, -5.0).unwrap();
            assert_eq!(f32s(&y), f32s(&yc), "fill case {k} on {dev}");
        }
        // A mask of the wrong shape.
        let wrong = Tensor::from_bools(&[true, false], [2], dev).unwrap();
        assert!(matches!(
            x.i(&s![@&wrong]),
            Err(Error::Index(genesis_index::Error::ShapeMismatch { .. }))
        ));
        // The plan shows the mask's strategy and measured density (host masks are counted
        // while planning; `resolve_masks` counts device masks on their device).
        let items = genesis_index::resolve_masks(&s![@&two])
            .unwrap()
            .into_owned();
        let p = genesis_index::plan(x.layout(), &items, false).unwrap();
        let m = p.mask.unwrap();
        assert_eq!(m.strategy, genesis_index::MaskStrategy::RowIndices);
        assert_eq!(
            (m.selected, m.total),
            (plane.iter().filter(|b| **b).count(), 12)
        );
    }
}

fn transpose(v: &[bool], rows: usize, cols: usize) -> Vec<bool> {
    (0..cols)
        .flat_map(|c| (0..rows).map(move |r| (r, c)))
        .map(|(r, c)| v[r * cols + c])
        .collect()
}

/// A row gather with a device index tensor learns early whether every index is in range (the
/// kernel's first block checks them and posts the verdict) and returns while the copy runs;
/// queued behind long work the verdict comes late and the host synchronises instead. Both ways
/// a bad index is a typed error and good ones give the rows.
#[test]
fn device_index_row_gathers_check_early_or_behind_long_work() {
    let _release = Release;
    for dev in devices() {
        if dev == Device::Cpu {
            continue;
        }
        let x = matrix(64, 4, dev);
        let xc = matrix(64, 4, Device::Cpu);
        let a = Tensor::ones([2048, 2048], DType::F32, dev).unwrap();
        for behind_long_work in [false, true] {
            for (idx, bad) in [([3i64, -1, 0], None), ([3, 64, 0], Some(64i64))] {
                let i = Tensor::from_slice(&idx, [3], dev).unwrap();
                // A 2048² matmul (about a millisecond) queued next delays the gather's start.
                let busy = behind_long_work.then(|| a.matmul(&a).unwrap());
                match (x.i(&s![@&i]), bad) {
                    (Ok(got), None) => {
                        let want = xc.i(&s![@host_index(&idx, &[3])]).unwrap();
                        assert_eq!(f32s(&got), f32s(&want), "behind work: {behind_long_work}");
                    }
                    (Err(e), Some(v)) => assert!(
                        matches!(
                            e,
                            Error::Index(genesis_index::Error::IndexOutOfRange {
                                dim: 0,
                                index,
                                size: 64
                            }) if index == v
                        ),
                        "{e:?}"
                    ),
                    (r, _) => panic!("{idx:?} behind work {behind_long_work}: {r:?}"),
                }
                drop(busy);
            }
        }
    }
}
