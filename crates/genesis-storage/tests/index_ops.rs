//! The advanced-indexing methods of `Storage` (`index_gather`, `index_scatter`,
//! `index_scatter_add`, `index_accumulate`, `index_normalise`, `index_unravel`,
//! `index_gather_rows_checked`) and their typed operands (`IndexValues`, `DeadMask`,
//! `AddGroups`) on host storages: random cases against a reference written from
//! `kernels/index.cu`'s definitions, and bad input giving typed errors, never a panic.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};

use common::{
    Case, dead_ref, gather_ref, normalise_ref, random_bytes, random_case, random_index_layout,
    scatter_add_ref, scatter_ref,
};
use genesis_kernels::index::{IndexDesc, MAX_INDEX_DIMS, Rows16, Strided};
use genesis_storage::{
    AddGroups, DType, DeadMask, Device, Error, IndexSource, IndexValues, Storage,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const CPU: Device = Device::Cpu;

fn i64s(v: &[i64]) -> Storage {
    if v.is_empty() {
        return Storage::zeros(1, DType::I64, CPU).unwrap();
    }
    Storage::from_slice(v, CPU).unwrap()
}

fn bytes(v: &[u8], dtype: DType) -> Storage {
    Storage::from_bytes(v, dtype, CPU).unwrap()
}

/// The index values of a case (host arrays) on `device`.
fn values_of(c: &Case, device: Device) -> IndexValues {
    let nb = c.desc.nb as usize;
    let arrays: Vec<(IndexSource<'_>, usize)> = c
        .sizes
        .iter()
        .enumerate()
        .map(|(a, &s)| (IndexSource::Host(&c.idx[a * nb..(a + 1) * nb]), s))
        .collect();
    IndexValues::new(device, nb, &arrays).unwrap()
}

/// Small integer values of `dtype` (bool 0/1; sums of up to 17 of them stay exact and in range
/// in every dtype), and their f64 values.
fn small_values(rng: &mut SmallRng, dtype: DType, n: usize) -> (Vec<u8>, Vec<f64>) {
    let vals: Vec<f64> = (0..n)
        .map(|_| match dtype {
            DType::Bool => f64::from(rng.random_range(0..2u8)),
            DType::U8 => f64::from(rng.random_range(0..8u8)),
            _ => f64::from(rng.random_range(-4i8..4)),
        })
        .collect();
    let s = Storage::from_slice(&vals, CPU)
        .unwrap()
        .to_dtype(dtype)
        .unwrap();
    (s.to_bytes().unwrap(), vals)
}

#[test]
fn gathers_and_scatters_match_the_reference() {
    let mut rng = SmallRng::seed_from_u64(17);
    for _ in 0..300 {
        let c = random_case(&mut rng);
        let elem = [1, 2, 4, 8][rng.random_range(0..4)];
        let dtype = match elem {
            1 => DType::U8,
            2 => DType::I16,
            4 => DType::F32,
            _ => DType::I64,
        };
        let src = random_bytes(&mut rng, c.src_len, elem);
        let s = bytes(&src, dtype);
        let idx = values_of(&c, CPU);
        assert_eq!(idx.to_vec().unwrap(), c.idx);
        let got = s.index_gather(&c.desc, &idx, None).unwrap();
        assert_eq!(got.len(), c.n);
        assert_eq!(got.to_bytes().unwrap(), gather_ref(&c, &src, elem), "{c:?}");

        let vals = random_bytes(&mut rng, c.n, elem);
        let dead = dead_ref(&c);
        let mut want = src.clone();
        scatter_ref(&c, &mut want, &vals, &dead, elem);
        let mut t = bytes(&src, dtype);
        let d = DeadMask::new(&idx).unwrap();
        assert_eq!(d.to_vec().unwrap(), dead);
        t.index_scatter(&bytes(&vals, dtype), &c.desc, &idx, &d, None)
            .unwrap();
        assert_eq!(t.to_bytes().unwrap(), want, "{c:?}");
    }
}

#[test]
fn scatter_add_matches_the_reference_for_every_dtype() {
    let mut rng = SmallRng::seed_from_u64(18);
    for round in 0..200 {
        let c = random_case(&mut rng);
        let dtype = DType::ALL[round % DType::ALL.len()];
        let (dst, mut want) = small_values(&mut rng, dtype, c.src_len);
        let (vals, v) = small_values(&mut rng, dtype, c.n);
        scatter_add_ref(&c, &mut want, &v);
        if dtype == DType::Bool {
            want.iter_mut()
                .for_each(|x| *x = f64::from(u8::from(*x != 0.0)));
        }
        let mut t = bytes(&dst, dtype);
        let idx = values_of(&c, CPU);
        let g = AddGroups::new(&idx).unwrap();
        t.index_scatter_add(&bytes(&vals, dtype), &c.desc, &idx, &g)
            .unwrap();
        let got = t.to_f64_vec().unwrap();
        // Integers wrap as the kernels add: compare through the dtype.
        let want = Storage::from_slice(&want, CPU)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
            .to_f64_vec()
            .unwrap();
        assert_eq!(got, want, "{dtype} {c:?}");
    }
}

#[test]
fn accumulate_adds_every_element_as_the_kernels_add() {
    let mut t = Storage::from_slice(&[1.0f32, 2.0, 3.0], CPU).unwrap();
    t.index_accumulate(&Storage::from_slice(&[0.5f32, -2.0, 1.0, 9.0], CPU).unwrap())
        .unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), [1.5, 0.0, 4.0]);
    let mut w = Storage::from_slice(&[127i8, -128], CPU).unwrap();
    w.index_accumulate(&Storage::from_slice(&[1i8, -1], CPU).unwrap())
        .unwrap();
    assert_eq!(w.to_vec::<i8>().unwrap(), [-128, 127], "integers wrap");
    let mut b = Storage::from_bytes(&[0, 1, 0], DType::Bool, CPU).unwrap();
    b.index_accumulate(&Storage::from_bytes(&[0, 1, 1], DType::Bool, CPU).unwrap())
        .unwrap();
    assert_eq!(b.to_bytes().unwrap(), [0, 1, 1], "bool is a logical or");
    let mut e = Storage::zeros(0, DType::F32, CPU).unwrap();
    e.index_accumulate(&Storage::zeros(0, DType::F32, CPU).unwrap())
        .unwrap();
}

#[test]
fn dead_positions_mark_all_but_the_last_of_each_tuple() {
    let mut rng = SmallRng::seed_from_u64(19);
    for _ in 0..200 {
        let c = random_case(&mut rng);
        let nb = c.desc.nb as usize;
        let idx = values_of(&c, CPU);
        assert!(!idx.checks_on_device());
        assert_eq!(idx.bad_positions().unwrap(), None);
        assert_eq!(idx.key_count(), Some(c.sizes.iter().product()));
        let dead = DeadMask::by_table(&idx).unwrap();
        assert_eq!(dead.to_vec().unwrap(), dead_ref(&c));
        // The same arrays normalised from storages: the same marks; a reported bad value (the
        // last array's last value out of range) kills every position.
        for bad in [false, true] {
            let mut raw = c.idx.clone();
            if bad && nb > 0 {
                *raw.last_mut().unwrap() = *c.sizes.last().unwrap() as i64;
            }
            let stored = Storage::from_slice(&raw, CPU).unwrap();
            let layouts: Vec<Strided> = (0..c.sizes.len())
                .map(|a| Strided::new(&[nb], &[1], a * nb).unwrap())
                .collect();
            let arrays: Vec<(IndexSource<'_>, usize)> = c
                .sizes
                .iter()
                .zip(&layouts)
                .map(|(&s, layout)| {
                    let src = IndexSource::Stored {
                        values: &stored,
                        layout,
                    };
                    (src, s)
                })
                .collect();
            let idx = IndexValues::new(CPU, nb, &arrays).unwrap();
            assert!(idx.checks_on_device());
            let words = idx.bad_positions().unwrap().unwrap();
            let reported = bad && nb > 0;
            assert_eq!(words.iter().any(|&w| w != -1), reported);
            let got = DeadMask::by_table(&idx).unwrap().to_vec().unwrap();
            if reported {
                assert!(got.iter().all(|&d| d == 1));
            } else {
                assert_eq!(got, dead_ref(&c));
            }
        }
    }
}

#[test]
fn normalise_wraps_and_reports_the_first_bad_position() {
    let mut rng = SmallRng::seed_from_u64(20);
    for round in 0..200 {
        let rank = rng.random_range(0..=3usize);
        let shape: Vec<usize> = (0..rank).map(|_| rng.random_range(1..=4usize)).collect();
        let nb: usize = shape.iter().product();
        let (layout, len) = random_index_layout(&mut rng, &shape);
        let size = rng.random_range(1..=6i64);
        let spread = if round % 3 == 0 { 2 * size } else { size };
        let values: Vec<i64> = (0..len)
            .map(|_| rng.random_range(-spread..spread))
            .collect();
        let (want, want_bad) = normalise_ref(&values, &layout, nb, size);
        for i32 in [false, true] {
            let src = if i32 {
                let v: Vec<i32> = values.iter().map(|&v| v as i32).collect();
                Storage::from_slice(&v, CPU).unwrap()
            } else {
                Storage::from_slice(&values, CPU).unwrap()
            };
            let mut out = Storage::zeros(nb + 2, DType::I64, CPU).unwrap();
            let mut bad = Storage::full::<i64>(3, -1, CPU).unwrap();
            out.index_normalise(1, nb, &src, &layout, size as usize, &mut bad, 2)
                .unwrap();
            let got = out.to_vec::<i64>().unwrap();
            assert_eq!(&got[1..=nb], want.as_slice());
            assert_eq!((got[0], got[nb + 1]), (0, 0), "nothing outside the range");
            assert_eq!(bad.to_vec::<i64>().unwrap(), vec![-1, -1, want_bad]);
        }
    }
}

#[test]
fn unravel_splits_positions_into_coordinates() {
    let mut rng = SmallRng::seed_from_u64(21);
    for _ in 0..100 {
        let rank = rng.random_range(1..=MAX_INDEX_DIMS);
        let shape: Vec<usize> = (0..rank).map(|_| rng.random_range(1..=4usize)).collect();
        let total: usize = shape.iter().product();
        let n = rng.random_range(1..20usize);
        let lin: Vec<i64> = (0..n).map(|_| rng.random_range(0..total) as i64).collect();
        let s = Strided::new(&shape, &vec![0; rank], 0).unwrap();
        // One array per dimension, then `[n, rank]` rows.
        for rows in [false, true] {
            let mut out = Storage::zeros(rank * n, DType::I64, CPU).unwrap();
            i64s(&lin).index_unravel(&s, rows, &mut out).unwrap();
            let got = out.to_vec::<i64>().unwrap();
            for (i, &l) in lin.iter().enumerate() {
                let mut rem = l as usize;
                for d in (0..rank).rev() {
                    let at = if rows { i * rank + d } else { d * n + i };
                    assert_eq!(got[at], (rem % shape[d]) as i64);
                    rem /= shape[d];
                }
            }
        }
    }
}

/// The row copy and the descriptor of `x[idx]` for `nrows` index values over an f32 matrix of
/// `cols` columns (a multiple of 4) from row `base`.
fn rows_case(cols: usize, base: usize, nrows: usize) -> (Rows16, IndexDesc) {
    let r = Rows16 {
        nrows,
        row_units: cols / 4,
        base_units: base * cols / 4,
        stride_units: cols / 4,
    };
    let mut d = IndexDesc {
        res_shape: [1; MAX_INDEX_DIMS],
        res_stride: [0; MAX_INDEX_DIMS],
        adv_stride: [0; MAX_INDEX_DIMS],
        base: (base * cols) as i64,
        nb: nrows as i64,
        rank: 2,
        pos: 0,
        k: 1,
        n_adv: 1,
    };
    d.res_shape[0] = nrows as i64;
    d.res_shape[1] = cols as i64;
    d.res_stride[1] = 1;
    d.adv_stride[0] = cols as i64;
    (r, d)
}

#[test]
fn row_copies_match_the_element_path() {
    let mut rng = SmallRng::seed_from_u64(22);
    for _ in 0..50 {
        let (rows, cols, base) = (
            rng.random_range(1..20usize),
            4 * rng.random_range(1..5usize),
            rng.random_range(0..3usize),
        );
        let nrows = rng.random_range(1..10usize);
        let data: Vec<f32> = (0..(rows + base) * cols).map(|i| i as f32).collect();
        let s = Storage::from_slice(&data, CPU).unwrap();
        let idx: Vec<i64> = (0..nrows)
            .map(|_| rng.random_range(0..rows) as i64)
            .collect();
        let (r, d) = rows_case(cols, base, nrows);
        let ix = IndexValues::new(CPU, nrows, &[(IndexSource::Host(&idx), rows)]).unwrap();
        let (a, b) = (
            s.index_gather(&d, &ix, Some(&r)).unwrap(),
            s.index_gather(&d, &ix, None).unwrap(),
        );
        assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
        // The checked row gather, from raw int32 values 2 apart with negative ones wrapping.
        let raw: Vec<i32> = idx
            .iter()
            .flat_map(|&v| {
                [
                    if v % 2 == 0 {
                        v as i32 - rows as i32
                    } else {
                        v as i32
                    },
                    99,
                ]
            })
            .collect();
        let vals = Storage::from_slice(&raw, CPU).unwrap();
        let got = s
            .index_gather_rows_checked(&r, &vals, (0, 2), rows, true, nrows * cols)
            .unwrap()
            .expect("every value in range");
        assert_eq!(got.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
        let mut bad = raw.clone();
        bad[2 * (nrows - 1)] = rows as i32;
        let bad = Storage::from_slice(&bad, CPU).unwrap();
        assert!(
            s.index_gather_rows_checked(&r, &bad, (0, 2), rows, true, nrows * cols)
                .unwrap()
                .is_none()
        );
        // Without wrapping (index_select): the same values in 0..rows give the same rows, and
        // a negative one is out of range.
        let plain: Vec<i32> = idx.iter().flat_map(|&v| [v as i32, -99]).collect();
        let plain = Storage::from_slice(&plain, CPU).unwrap();
        let strict = s
            .index_gather_rows_checked(&r, &plain, (0, 2), rows, false, nrows * cols)
            .unwrap()
            .expect("every value in range");
        assert_eq!(strict.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
        let wrapped = idx.iter().any(|&v| v % 2 == 0);
        assert_eq!(
            s.index_gather_rows_checked(&r, &vals, (0, 2), rows, false, nrows * cols)
                .unwrap()
                .is_none(),
            wrapped,
            "a negative value is out of range without wrapping"
        );
        // The row scatter writes what the element scatter writes.
        let dead: Vec<u8> = (0..nrows)
            .map(|b| u8::from(idx[b + 1..].contains(&idx[b])))
            .collect();
        let mask = DeadMask::new(&ix).unwrap();
        assert_eq!(mask.to_vec().unwrap(), dead);
        let vals: Vec<f32> = (0..nrows * cols).map(|i| -(i as f32)).collect();
        let vals = Storage::from_slice(&vals, CPU).unwrap();
        let mut outs = Vec::new();
        for rows16 in [Some(&r), None] {
            let mut t = Storage::from_slice(&data, CPU).unwrap();
            t.index_scatter(&vals, &d, &ix, &mask, rows16).unwrap();
            outs.push(t.to_vec::<f32>().unwrap());
        }
        assert_eq!(outs[0], outs[1]);
    }
}

/// Runs `f`, failing the test with `what` if it panics; returns its error.
fn err<T: std::fmt::Debug>(what: &str, f: impl FnOnce() -> genesis_storage::Result<T>) -> Error {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => panic!("{what}: expected an error, got {v:?}"),
        Ok(Err(e)) => e,
        Err(_) => panic!("{what}: panicked"),
    }
}

fn is_refused(e: &Error) -> bool {
    matches!(e, Error::IndexRefused { .. })
}

fn is_outside(e: &Error) -> bool {
    matches!(e, Error::IndexOutsideStorage { .. })
}

#[test]
fn bad_input_gives_typed_errors() {
    let mut rng = SmallRng::seed_from_u64(23);
    let c: Case = loop {
        let c = random_case(&mut rng);
        if c.n > 1 && c.desc.nb > 0 && c.sizes[0] > 1 {
            break c;
        }
    };
    let nb = c.desc.nb as usize;
    let src = Storage::zeros(c.src_len, DType::F32, CPU).unwrap();
    let idx = values_of(&c, CPU);
    let vals = Storage::zeros(c.n, DType::F32, CPU).unwrap();
    // Host values out of range (past the size, negative), of the wrong length; a stored array
    // indexing a dimension of size 0.
    for value in [c.sizes[0] as i64, -1, 1 << 40] {
        let mut far = c.idx[..nb].to_vec();
        far[nb - 1] = value;
        let e = err("value out of range", || {
            IndexValues::new(CPU, nb, &[(IndexSource::Host(&far), c.sizes[0])])
        });
        assert!(
            matches!(e, Error::IndexValueOutOfRange { array: 0, value: v, .. } if v == value),
            "{e}"
        );
    }
    let e = err("short host array", || {
        IndexValues::new(
            CPU,
            nb,
            &[(IndexSource::Host(&c.idx[..nb - 1]), c.sizes[0])],
        )
    });
    assert!(is_refused(&e), "{e}");
    let stored = i64s(&c.idx);
    let l = Strided::new(&[nb], &[1], 0).unwrap();
    let e = err("stored array of size 0", || {
        let src = IndexSource::Stored {
            values: &stored,
            layout: &l,
        };
        IndexValues::new(CPU, nb, &[(src, 0)])
    });
    assert!(is_refused(&e), "{e}");
    // Values of another shape than the descriptor's.
    let e = err("gather other nb", || {
        let other = IndexValues::new(CPU, 1, &[(IndexSource::Host(&[0]), 1)]).unwrap();
        src.index_gather(&c.desc, &other, None)
    });
    assert!(is_refused(&e), "{e}");
    // Descriptors whose offsets reach outside the storage for values in range: past its end,
    // before its start (a negative stride), through an index array's stride.
    let mut past = c.desc;
    past.base = c.src_len as i64;
    let mut before = c.desc;
    before.adv_stride[0] = -1;
    before.base = 0;
    let mut through = c.desc;
    through.adv_stride[0] = c.src_len as i64;
    let mut huge = c.desc;
    huge.adv_stride[0] = i64::MAX;
    for (what, bad) in [
        ("past", past),
        ("before", before),
        ("through", through),
        ("huge", huge),
    ] {
        let e = err(what, || src.index_gather(&bad, &idx, None));
        assert!(is_outside(&e), "{what}: {e}");
        let mut t = Storage::zeros(c.src_len, DType::F32, CPU).unwrap();
        let dead = DeadMask::new(&idx).unwrap();
        let e = err(what, || t.index_scatter(&vals, &bad, &idx, &dead, None));
        assert!(is_outside(&e), "{what}: {e}");
        let g = AddGroups::new(&idx).unwrap();
        let e = err(what, || t.index_scatter_add(&vals, &bad, &idx, &g));
        assert!(is_outside(&e), "{what}: {e}");
    }
    // Malformed descriptors.
    for bad in [
        IndexDesc { rank: 9, ..c.desc },
        IndexDesc { rank: -1, ..c.desc },
        IndexDesc { n_adv: 9, ..c.desc },
        IndexDesc {
            pos: c.desc.rank,
            k: 1,
            ..c.desc
        },
        IndexDesc {
            nb: c.desc.nb + 1,
            ..c.desc
        },
    ] {
        let e = err("gather bad descriptor", || {
            src.index_gather(&bad, &idx, None)
        });
        assert!(matches!(e, Error::Kernel(_)), "{e}");
    }
    // Scatter: values of another dtype or too few, dead marks of other values (the same
    // contents), a target that writes an element twice, rows that do not move the result.
    let mut t = Storage::zeros(c.src_len, DType::F32, CPU).unwrap();
    let dead = DeadMask::new(&idx).unwrap();
    let i32_vals = Storage::zeros(c.n, DType::I32, CPU).unwrap();
    let e = err("scatter i32 values", || {
        t.index_scatter(&i32_vals, &c.desc, &idx, &dead, None)
    });
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
    let few = Storage::zeros(c.n - 1, DType::F32, CPU).unwrap();
    let e = err("scatter few values", || {
        t.index_scatter(&few, &c.desc, &idx, &dead, None)
    });
    assert!(matches!(e, Error::OutOfBounds { .. }), "{e}");
    let twin = values_of(&c, CPU);
    let e = err("scatter other values' marks", || {
        t.index_scatter(&vals, &c.desc, &twin, &dead, None)
    });
    assert!(is_refused(&e), "{e}");
    let e = err("scatter_add other values' groups", || {
        t.index_scatter_add(&vals, &c.desc, &twin, &AddGroups::new(&idx).unwrap())
    });
    assert!(is_refused(&e), "{e}");
    // A target that may write an element twice: `t[base + 3 rows at s0][idx at s1]` for an
    // index array of 2 positions over a dimension of 3 (stride 0, equal strides, strides that
    // interleave), refused before anything is written; strides that keep the elements apart
    // (also negative ones) are taken, and a gather may read an element twice.
    let mut two = IndexDesc {
        res_shape: [1; MAX_INDEX_DIMS],
        res_stride: [0; MAX_INDEX_DIMS],
        adv_stride: [0; MAX_INDEX_DIMS],
        base: 0,
        nb: 2,
        rank: 2,
        pos: 1,
        k: 1,
        n_adv: 1,
    };
    two.res_shape[..2].copy_from_slice(&[3, 2]);
    let ix2 = IndexValues::new(CPU, 2, &[(IndexSource::Host(&[2, 0]), 3)]).unwrap();
    let (dead2, groups2) = (DeadMask::new(&ix2).unwrap(), AddGroups::new(&ix2).unwrap());
    let v6 = Storage::from_slice(&[1.0f32; 6], CPU).unwrap();
    let s16 = Storage::zeros(16, DType::F32, CPU).unwrap();
    for (base, s0, s1, ok) in [
        (0, 0, 1, false),
        (0, 1, 0, false),
        (0, 1, 1, false),
        (0, 2, 1, false),
        (0, 1, 2, false),
        (0, 3, 1, true),
        (0, 1, 3, true),
        (6, -3, 1, true),
        (6, 1, -3, true),
    ] {
        let mut d = two;
        d.base = base;
        d.res_stride[0] = s0;
        d.adv_stride[0] = s1;
        let mut t = Storage::zeros(16, DType::F32, CPU).unwrap();
        s16.index_gather(&d, &ix2, None).unwrap();
        let set = t.index_scatter(&v6, &d, &ix2, &dead2, None);
        let add = t.index_scatter_add(&v6, &d, &ix2, &groups2);
        if ok {
            set.unwrap();
            add.unwrap();
            assert_eq!(t.to_f64_vec().unwrap().iter().sum::<f64>(), 12.0);
        } else {
            assert!(set.is_err_and(|e| is_refused(&e)), "{d:?}");
            assert!(add.is_err_and(|e| is_refused(&e)), "{d:?}");
            assert_eq!(t.to_f64_vec().unwrap(), vec![0.0; 16], "nothing written");
        }
    }
    let wrong_rows = Rows16 {
        nrows: 1,
        row_units: 1,
        base_units: 0,
        stride_units: 1,
    };
    if c.n * 4 != 16 {
        let e = err("scatter rows", || {
            t.index_scatter(&vals, &c.desc, &idx, &dead, Some(&wrong_rows))
        });
        assert!(matches!(e, Error::Kernel(_)), "{e}");
    }
    // Dead positions through a table: more index arrays than the kernels take.
    let nine: Vec<(IndexSource<'_>, usize)> =
        (0..9).map(|_| (IndexSource::Host(&[0]), 1)).collect();
    let e = err("dead nine arrays", || {
        DeadMask::by_table(&IndexValues::new(CPU, 1, &nine).unwrap())
    });
    assert!(is_refused(&e), "{e}");
    // Rows: past the storage for a value in range, over other index values, overlapping.
    let m = Storage::zeros(8 * 4, DType::F32, CPU).unwrap();
    let (r, d) = rows_case(4, 0, 2);
    let ix = IndexValues::new(CPU, 2, &[(IndexSource::Host(&[0, 1]), 9)]).unwrap();
    let e = err("rows past the storage", || {
        m.index_gather(&d, &ix, Some(&r))
    });
    assert!(is_outside(&e), "{e}");
    let ix = IndexValues::new(CPU, 2, &[(IndexSource::Host(&[0, 1]), 8)]).unwrap();
    let far = Rows16 { base_units: 1, ..r };
    let e = err("rows from past", || m.index_gather(&d, &ix, Some(&far)));
    assert!(is_outside(&e), "{e}");
    let mut t = Storage::zeros(8 * 4, DType::F32, CPU).unwrap();
    let v = Storage::zeros(8, DType::F32, CPU).unwrap();
    let mask = DeadMask::new(&ix).unwrap();
    let close = Rows16 {
        stride_units: 0,
        ..r
    };
    let e = err("overlapping rows", || {
        t.index_scatter(&v, &d, &ix, &mask, Some(&close))
    });
    assert!(is_refused(&e), "{e}");
    let (r3, d3) = rows_case(4, 0, 3);
    let ix3 = IndexValues::new(CPU, 3, &[(IndexSource::Host(&[0, 1, 2]), 8)]).unwrap();
    let e = err("rows over other values", || {
        m.index_gather(&d3, &ix, Some(&r3))
    });
    assert!(is_refused(&e) || matches!(e, Error::Kernel(_)), "{e}");
    m.index_gather(&d3, &ix3, Some(&r3)).unwrap();
    // Accumulating values of another dtype or too few.
    let mut acc = Storage::zeros(4, DType::F32, CPU).unwrap();
    let e = err("accumulate i32", || {
        acc.index_accumulate(&Storage::zeros(4, DType::I32, CPU).unwrap())
    });
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
    let e = err("accumulate few", || {
        acc.index_accumulate(&Storage::zeros(3, DType::F32, CPU).unwrap())
    });
    assert!(matches!(e, Error::OutOfBounds { .. }), "{e}");
    // Normalise: wrong dtypes, a layout reaching past its storage, negative strides, ranges.
    let l = Strided::new(&[4], &[1], 0).unwrap();
    let mut out = Storage::zeros(4, DType::I64, CPU).unwrap();
    let mut bad = Storage::full::<i64>(1, -1, CPU).unwrap();
    let f32_src = Storage::zeros(4, DType::F32, CPU).unwrap();
    let e = err("normalise f32", || {
        out.index_normalise(0, 4, &f32_src, &l, 3, &mut bad, 0)
    });
    assert!(matches!(e, Error::UnsupportedDType { .. }), "{e}");
    let short = Storage::zeros(3, DType::I64, CPU).unwrap();
    let e = err("normalise short source", || {
        out.index_normalise(0, 4, &short, &l, 3, &mut bad, 0)
    });
    assert!(matches!(e, Error::OutOfBounds { .. }), "{e}");
    let src = Storage::zeros(4, DType::I64, CPU).unwrap();
    let e = err("normalise past out", || {
        out.index_normalise(1, 4, &src, &l, 3, &mut bad, 0)
    });
    assert!(matches!(e, Error::OutOfBounds { .. }), "{e}");
    let e = err("normalise past bad", || {
        out.index_normalise(0, 4, &src, &l, 3, &mut bad, 1)
    });
    assert!(matches!(e, Error::OutOfBounds { .. }), "{e}");
    let neg = Strided {
        stride: [-1; MAX_INDEX_DIMS],
        offset: 3,
        ..l
    };
    let e = err("normalise negative stride", || {
        out.index_normalise(0, 4, &src, &neg, 3, &mut bad, 0)
    });
    assert!(matches!(e, Error::Kernel(_)), "{e}");
    let mut f32_out = Storage::zeros(4, DType::F32, CPU).unwrap();
    let e = err("normalise f32 out", || {
        f32_out.index_normalise(0, 4, &src, &l, 3, &mut bad, 0)
    });
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
    // Unravel: sizes of 0, too short an output, a rank past the kernels'.
    let lin = Storage::from_slice(&[0i64, 5], CPU).unwrap();
    let zero = Strided::new(&[2, 0], &[0, 0], 0).unwrap();
    let mut coords = Storage::zeros(4, DType::I64, CPU).unwrap();
    let e = err("unravel size 0", || {
        lin.index_unravel(&zero, false, &mut coords)
    });
    assert!(matches!(e, Error::Kernel(_)), "{e}");
    let wide = Strided {
        rank: 9,
        ..Strided::new(&[2, 3], &[0, 0], 0).unwrap()
    };
    let e = err("unravel rank 9", || {
        lin.index_unravel(&wide, false, &mut coords)
    });
    assert!(matches!(e, Error::Kernel(_)), "{e}");
    let three = Strided::new(&[2, 3, 4], &[0, 0, 0], 0).unwrap();
    let e = err("unravel short output", || {
        lin.index_unravel(&three, false, &mut coords)
    });
    assert!(matches!(e, Error::OutOfBounds { .. }), "{e}");
    // The checked row gather: rows past the source, values past their storage, a negative
    // stride, float values, `n` that is not the rows'.
    let m = Storage::zeros(8 * 4, DType::F32, CPU).unwrap();
    let r = Rows16 {
        nrows: 2,
        row_units: 1,
        base_units: 0,
        stride_units: 1,
    };
    let v = Storage::from_slice(&[0i64, 1], CPU).unwrap();
    let e = err("rows past source", || {
        m.index_gather_rows_checked(&r, &v, (0, 1), 9, true, 8)
    });
    assert!(matches!(e, Error::Kernel(_)), "{e}");
    let e = err("values past storage", || {
        m.index_gather_rows_checked(&r, &v, (1, 1), 8, true, 8)
    });
    assert!(matches!(e, Error::OutOfBounds { .. }), "{e}");
    let e = err("negative stride", || {
        m.index_gather_rows_checked(&r, &v, (1, -1), 8, true, 8)
    });
    assert!(matches!(e, Error::Kernel(_)), "{e}");
    let fv = Storage::zeros(2, DType::F32, CPU).unwrap();
    let e = err("float values", || {
        m.index_gather_rows_checked(&r, &fv, (0, 1), 8, true, 8)
    });
    assert!(matches!(e, Error::UnsupportedDType { .. }), "{e}");
    let e = err("n not the rows'", || {
        m.index_gather_rows_checked(&r, &v, (0, 1), 8, true, 7)
    });
    assert!(matches!(e, Error::Kernel(_)), "{e}");
}

#[test]
fn mismatched_devices_are_typed_errors() {
    // A CUDA storage cannot exist without a device: the CUDA operand of each call is made
    // where it can be, else the device check is exercised through `Device::Cuda` operands
    // that fail to be created with their own typed error.
    let Ok(dev_idx) = Storage::zeros(4, DType::I64, Device::Cuda(0)) else {
        let e = Storage::zeros(4, DType::I64, Device::Cuda(0)).unwrap_err();
        assert!(
            matches!(e, Error::CudaNotCompiled { .. } | Error::Cuda(_)),
            "{e}"
        );
        return;
    };
    let src = Storage::zeros(16, DType::F32, CPU).unwrap();
    let l = Strided::new(&[4], &[1], 0).unwrap();
    let mut d = IndexDesc {
        res_shape: [1; MAX_INDEX_DIMS],
        res_stride: [0; MAX_INDEX_DIMS],
        adv_stride: [0; MAX_INDEX_DIMS],
        base: 0,
        nb: 4,
        rank: 1,
        pos: 0,
        k: 1,
        n_adv: 1,
    };
    d.res_shape[0] = 4;
    d.adv_stride[0] = 1;
    let on_dev = IndexValues::new(
        Device::Cuda(0),
        4,
        &[(IndexSource::Host(&[0, 1, 2, 3]), 16)],
    )
    .unwrap();
    let e = err("gather across devices", || {
        src.index_gather(&d, &on_dev, None)
    });
    assert!(matches!(e, Error::DeviceMismatch { .. }), "{e}");
    let l4 = Strided::new(&[4], &[1], 0).unwrap();
    let e = err("stored values on another device", || {
        let s = IndexSource::Stored {
            values: &dev_idx,
            layout: &l4,
        };
        IndexValues::new(CPU, 4, &[(s, 4)])
    });
    assert!(matches!(e, Error::DeviceMismatch { .. }), "{e}");
    let mut out = Storage::zeros(4, DType::I64, CPU).unwrap();
    let mut bad = Storage::full::<i64>(1, -1, CPU).unwrap();
    let e = err("normalise across devices", || {
        out.index_normalise(0, 4, &dev_idx, &l, 4, &mut bad, 0)
    });
    assert!(matches!(e, Error::DeviceMismatch { .. }), "{e}");
    let mut coords = Storage::zeros(4, DType::I64, Device::Cuda(0)).unwrap();
    let lin = Storage::zeros(4, DType::I64, CPU).unwrap();
    let e = err("unravel across devices", || {
        lin.index_unravel(&l, false, &mut coords)
    });
    assert!(matches!(e, Error::DeviceMismatch { .. }), "{e}");
    // The pool's cached memory goes back to the driver, so nothing is held at exit.
    drop((dev_idx, coords, on_dev));
    #[cfg(feature = "cuda")]
    genesis_storage::cuda::empty_caches().unwrap();
}
