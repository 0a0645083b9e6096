//! A shape has at most `MAX_RANK` dimensions, on every path that makes or changes a
//! shape, for generated shapes of every rank around the limit and far beyond it.

use std::sync::Arc;

use genesis_storage::{
    DType, Device, Layout, LayoutError, MAX_RANK, Storage, View, check_rank, checked_numel,
};

/// Shapes of `rank` dimensions: all ones, a few twos among ones, and ones with a zero.
fn shapes(rank: usize) -> Vec<Vec<usize>> {
    let mut out = vec![vec![1; rank]];
    if rank > 0 {
        let mut twos = vec![1; rank];
        for i in (0..rank).step_by(7) {
            twos[i] = 2;
        }
        out.push(twos);
        let mut zero = vec![1; rank];
        zero[rank / 2] = 0;
        out.push(zero);
    }
    out
}

fn too_large(e: LayoutError, rank: usize) {
    assert_eq!(
        e,
        LayoutError::RankTooLarge {
            rank,
            max: MAX_RANK
        }
    );
}

#[test]
fn the_limit_is_numpys() {
    assert_eq!(MAX_RANK, 64);
    assert!(check_rank(64).is_ok());
    too_large(check_rank(65).unwrap_err(), 65);
    too_large(check_rank(usize::MAX).unwrap_err(), usize::MAX);
}

#[test]
fn every_checked_constructor_refuses_more_dimensions() {
    for rank in (0..=MAX_RANK + 6).chain([100, 1000, 100_000]) {
        for shape in shapes(rank) {
            let ok = rank <= MAX_RANK;
            let strides: Vec<isize> = Layout::contiguous(&shape).strides().to_vec();
            let results = [
                checked_numel(&shape).map(|_| ()),
                Layout::try_contiguous(&shape).map(|_| ()),
                Layout::try_new(&shape, &strides, 0).map(|_| ()),
                Layout::contiguous(&shape).try_numel().map(|_| ()),
                Layout::contiguous(&shape).span().map(|_| ()),
                Layout::contiguous(&shape)
                    .check_bounds(usize::MAX)
                    .map(|_| ()),
                Layout::new(&shape, &strides, 0)
                    .check_bounds(1 << 40)
                    .map(|_| ()),
                Layout::contiguous(&[1]).expand(&shape).map(|_| ()),
                Layout::contiguous(&[1]).view(&shape).map(|_| ()),
                Layout::contiguous(&[]).view(&shape).map(|_| ()),
                Layout::contiguous(&[1])
                    .infer_shape(&shape.iter().map(|&d| d as isize).collect::<Vec<_>>())
                    .map(|_| ()),
            ];
            for (i, r) in results.into_iter().enumerate() {
                if ok {
                    // Some of these refuse a shape for its element count (a zero among ones
                    // does not view a one-element layout): only the rank error is checked.
                    if let Err(e) = r {
                        assert!(
                            !matches!(e, LayoutError::RankTooLarge { .. }),
                            "rank {rank}, case {i}: {e}"
                        );
                    }
                } else {
                    too_large(r.expect_err(&format!("rank {rank}, case {i} passed")), rank);
                }
            }
            // An unchecked layout of too many dimensions counts no element a storage holds.
            if !ok {
                assert_eq!(Layout::contiguous(&shape).numel(), usize::MAX);
            }
        }
    }
}

#[test]
fn unsqueeze_stops_at_the_limit() {
    for start in [0, 1, 5, MAX_RANK - 1] {
        let mut l = Layout::contiguous(&vec![1; start]);
        for _ in start..MAX_RANK {
            l = l.unsqueeze(0).unwrap();
        }
        assert_eq!(l.rank(), MAX_RANK);
        for dim in [0, -1, MAX_RANK as isize] {
            too_large(l.unsqueeze(dim).unwrap_err(), MAX_RANK + 1);
        }
        // Dimensions that keep the rank still work.
        assert_eq!(l.transpose(0, -1).unwrap().rank(), MAX_RANK);
        assert_eq!(l.squeeze(0).unwrap().rank(), MAX_RANK - 1);
    }
}

#[test]
fn no_view_of_more_dimensions_exists() {
    let base = Arc::new(Storage::zeros(4, DType::F32, Device::Cpu).unwrap());
    for rank in [MAX_RANK - 1, MAX_RANK, MAX_RANK + 1, 10_000] {
        let mut shape = vec![1; rank];
        shape[0] = 4;
        let r = View::with_layout(Arc::clone(&base), Layout::contiguous(&shape));
        assert_eq!(r.is_ok(), rank <= MAX_RANK, "rank {rank}");
        if let Err(e) = r {
            assert!(
                matches!(
                    e,
                    genesis_storage::Error::Layout(LayoutError::RankTooLarge { .. })
                ),
                "{e}"
            );
        }
    }
}

#[test]
fn storage_operations_refuse_layouts_of_more_dimensions() {
    let mut s = Storage::zeros(4, DType::F32, Device::Cpu).unwrap();
    let src = Storage::zeros(4, DType::F32, Device::Cpu).unwrap();
    for rank in [MAX_RANK + 1, 1000] {
        let deep = Layout::contiguous(&vec![1; rank]);
        let e = s.contiguous(&deep).unwrap_err();
        assert!(
            matches!(
                e,
                genesis_storage::Error::Layout(LayoutError::RankTooLarge { .. })
            ),
            "{e}"
        );
        let e = s.copy_strided_from(&deep, &src, &deep).unwrap_err();
        assert!(
            matches!(
                e,
                genesis_storage::Error::Layout(LayoutError::RankTooLarge { .. })
            ),
            "{e}"
        );
    }
}
