//! The advanced-indexing methods of `Storage` (`index_gather`, `index_scatter`,
//! `index_scatter_add`, `index_normalise`, `index_dead_positions`, `index_unravel`,
//! `index_gather_rows_checked`) on host storages: random cases against a reference written
//! from `kernels/index.cu`'s definitions, and bad input giving typed errors, never a panic.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};

use common::{
    Case, dead_ref, gather_ref, groups_ref, keys_of, normalise_ref, random_bytes, random_case,
    random_index_layout, scatter_add_ref, scatter_ref,
};
use genesis_kernels::index::{IndexDesc, Keys, MAX_INDEX_DIMS, Rows16, Strided};
use genesis_storage::{DType, Device, Error, Storage};
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
        let idx = i64s(&c.idx);
        // SAFETY: the case's index values are in range for their dimensions.
        let got = unsafe { s.index_gather(&c.desc, &idx, None) }.unwrap();
        assert_eq!(got.len(), c.n);
        assert_eq!(got.to_bytes().unwrap(), gather_ref(&c, &src, elem), "{c:?}");

        let vals = random_bytes(&mut rng, c.n, elem);
        let dead = dead_ref(&c);
        let mut want = src.clone();
        scatter_ref(&c, &mut want, &vals, &dead, elem);
        let mut t = bytes(&src, dtype);
        let d = bytes(if dead.is_empty() { &[0] } else { &dead }, DType::U8);
        // SAFETY: as above; live positions have distinct tuples, so distinct offsets.
        unsafe { t.index_scatter(&bytes(&vals, dtype), &c.desc, &idx, &d, None) }.unwrap();
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
        let (dead, start, len, members) = groups_ref(&c);
        let mut t = bytes(&dst, dtype);
        let g = [
            bytes(if dead.is_empty() { &[0] } else { &dead }, DType::Bool),
            i64s(&start),
            i64s(&len),
            i64s(&members),
        ];
        // SAFETY: in-range values; the groups partition the positions.
        unsafe {
            t.index_scatter_add(
                &bytes(&vals, dtype),
                &c.desc,
                &i64s(&c.idx),
                [&g[0], &g[1], &g[2], &g[3]],
            )
        }
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
fn dead_positions_mark_all_but_the_last_of_each_tuple() {
    let mut rng = SmallRng::seed_from_u64(19);
    for _ in 0..200 {
        let c = random_case(&mut rng);
        let nb = c.desc.nb as usize;
        let (keys, count) = keys_of(&c);
        let mut winner = Storage::zeros(count, DType::I64, CPU).unwrap();
        let mut dead = Storage::zeros(nb.max(1), DType::U8, CPU).unwrap();
        let clean = Storage::full::<i64>(2, -1, CPU).unwrap();
        // SAFETY: in-range values: every key lies in `winner`.
        unsafe { i64s(&c.idx).index_dead_positions(&keys, &mut winner, &clean, &mut dead, nb) }
            .unwrap();
        assert_eq!(&dead.to_bytes().unwrap()[..nb], dead_ref(&c).as_slice());
        // A reported bad value kills every position.
        let bad = Storage::from_slice(&[-1i64, 3], CPU).unwrap();
        let mut winner = Storage::zeros(count, DType::I64, CPU).unwrap();
        // SAFETY: as above.
        unsafe { i64s(&c.idx).index_dead_positions(&keys, &mut winner, &bad, &mut dead, nb) }
            .unwrap();
        assert!(dead.to_bytes().unwrap()[..nb].iter().all(|&d| d == 1));
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
        // SAFETY: in-range values.
        let (a, b) = unsafe {
            (
                s.index_gather(&d, &i64s(&idx), Some(&r)).unwrap(),
                s.index_gather(&d, &i64s(&idx), None).unwrap(),
            )
        };
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
        let vals: Vec<f32> = (0..nrows * cols).map(|i| -(i as f32)).collect();
        let vals = Storage::from_slice(&vals, CPU).unwrap();
        let mut outs = Vec::new();
        for rows16 in [Some(&r), None] {
            let mut t = Storage::from_slice(&data, CPU).unwrap();
            // SAFETY: in-range values; live rows are distinct.
            unsafe {
                t.index_scatter(&vals, &d, &i64s(&idx), &bytes(&dead, DType::U8), rows16)
                    .unwrap()
            };
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

fn is_out_of_range(e: &Error) -> bool {
    matches!(
        e,
        Error::Kernel(genesis_kernels::Error::IndexOutOfRange { .. })
    )
}

#[test]
fn bad_input_gives_typed_errors() {
    let mut rng = SmallRng::seed_from_u64(23);
    let c: Case = loop {
        let c = random_case(&mut rng);
        if c.n > 0 && c.desc.nb > 0 {
            break c;
        }
    };
    let nb = c.desc.nb as usize;
    let src = Storage::zeros(c.src_len, DType::F32, CPU).unwrap();
    let idx = i64s(&c.idx);
    let dead = Storage::zeros(nb, DType::U8, CPU).unwrap();
    let vals = Storage::zeros(c.n, DType::F32, CPU).unwrap();
    // SAFETY: the host backend checks every offset of the calls below, so out-of-range values
    // are errors there, which is what is tested.
    unsafe {
        // Index values of the wrong dtype, too few, on a missing device.
        let e = err("gather i32 index", || {
            src.index_gather(
                &c.desc,
                &Storage::zeros(c.idx.len(), DType::I32, CPU).unwrap(),
                None,
            )
        });
        assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
        let short = Storage::zeros(c.idx.len() - 1, DType::I64, CPU).unwrap();
        let e = err("gather short index", || {
            src.index_gather(&c.desc, &short, None)
        });
        assert!(matches!(e, Error::OutOfBounds { .. }), "{e}");
        // An out-of-range offset: the host backend reports it.
        let mut far = c.idx.clone();
        far[0] = 1 << 40;
        let e = err("gather out of range", || {
            src.index_gather(&c.desc, &i64s(&far), None)
        });
        assert!(is_out_of_range(&e), "{e}");
        let mut neg = c.idx.clone();
        neg[0] = -(1 << 40);
        let e = err("gather negative", || {
            src.index_gather(&c.desc, &i64s(&neg), None)
        });
        assert!(is_out_of_range(&e), "{e}");
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
        // Scatter: values of another dtype or too few, dead marks of another dtype or too few.
        let mut t = Storage::zeros(c.src_len, DType::F32, CPU).unwrap();
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
        let i64_dead = Storage::zeros(nb, DType::I64, CPU).unwrap();
        let e = err("scatter i64 dead", || {
            t.index_scatter(&vals, &c.desc, &idx, &i64_dead, None)
        });
        assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
        let e = err("scatter out of range", || {
            t.index_scatter(&vals, &c.desc, &i64s(&far), &dead, None)
        });
        assert!(is_out_of_range(&e), "{e}");
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
        // Scatter-add: groups of the wrong dtypes, groups outside `members`.
        let (gd, gs, gl, gm) = groups_ref(&c);
        let g = [bytes(&gd, DType::U8), i64s(&gs), i64s(&gl), i64s(&gm)];
        let f32_start = Storage::zeros(nb, DType::F32, CPU).unwrap();
        let e = err("scatter_add f32 starts", || {
            t.index_scatter_add(&vals, &c.desc, &idx, [&g[0], &f32_start, &g[2], &g[3]])
        });
        assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
        let long: Vec<i64> = gl.iter().map(|&l| l + 100).collect();
        let long = i64s(&long);
        let e = err("scatter_add long groups", || {
            t.index_scatter_add(&vals, &c.desc, &idx, [&g[0], &g[1], &long, &g[3]])
        });
        assert!(is_out_of_range(&e), "{e}");
        let past: Vec<i64> = gm.iter().map(|_| nb as i64).collect();
        let past = i64s(&past);
        let e = err("scatter_add members past nb", || {
            t.index_scatter_add(&vals, &c.desc, &idx, [&g[0], &g[1], &g[2], &past])
        });
        assert!(is_out_of_range(&e), "{e}");
        // Dead positions: keys outside `winner`, wrong dtypes.
        let (keys, count) = keys_of(&c);
        let mut winner = Storage::zeros(count, DType::I64, CPU).unwrap();
        let mut d = Storage::zeros(nb, DType::U8, CPU).unwrap();
        let clean = Storage::full::<i64>(1, -1, CPU).unwrap();
        let e = err("dead far keys", || {
            i64s(&far).index_dead_positions(&keys, &mut winner, &clean, &mut d, nb)
        });
        assert!(is_out_of_range(&e), "{e}");
        let mut f32_winner = Storage::zeros(count, DType::F32, CPU).unwrap();
        let e = err("dead f32 winner", || {
            idx.index_dead_positions(&keys, &mut f32_winner, &clean, &mut d, nb)
        });
        assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
        let nine = Keys { n_adv: 9, ..keys };
        let e = err("dead nine arrays", || {
            idx.index_dead_positions(&nine, &mut winner, &clean, &mut d, nb)
        });
        assert!(matches!(e, Error::Kernel(_)), "{e}");
    }
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
    // SAFETY: the calls fail their device checks before any memory is read.
    let e = err("gather across devices", || unsafe {
        src.index_gather(&d, &dev_idx, None)
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
    drop((dev_idx, coords));
    #[cfg(feature = "cuda")]
    genesis_storage::cuda::empty_caches().unwrap();
}
