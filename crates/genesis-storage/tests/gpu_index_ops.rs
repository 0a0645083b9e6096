//! The advanced-indexing methods of `Storage` on CUDA against the host backend (the kernels of
//! `kernels/index.cu` against their CPU twins) on random cases: gathers (element and row
//! paths), scatters, scatter-adds of every dtype (also through no index arrays), normalisation,
//! dead positions, unravel and the checked row gather. Results must be bit-identical.
#![cfg(feature = "cuda")]

mod common;

use common::{Case, dead_ref, random_bytes, random_case, random_index_layout};
use genesis_cuda::skip_without_gpu;
use genesis_kernels::index::{IndexDesc, MAX_INDEX_DIMS, Rows16, Strided};
use genesis_storage::{AddGroups, DType, DeadMask, Device, IndexSource, IndexValues, Storage};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const CPU: Device = Device::Cpu;
const GPU: Device = Device::Cuda(0);

struct Release;

impl Drop for Release {
    fn drop(&mut self) {
        if genesis_cuda::is_available() {
            let _ = genesis_storage::cuda::empty_caches();
        }
    }
}

/// `bytes` as a storage of `dtype` on `device` (one element when empty).
fn on(device: Device, bytes: &[u8], dtype: DType) -> Storage {
    if bytes.is_empty() {
        return Storage::zeros(1, dtype, device).unwrap();
    }
    Storage::from_bytes(bytes, dtype, CPU)
        .unwrap()
        .to_device(device)
        .unwrap()
}

/// The index values of a case on `device`: host arrays, or (`stored`) the same values
/// normalised from a storage there.
fn values_of(c: &Case, device: Device, stored: bool) -> IndexValues {
    let nb = c.desc.nb as usize;
    let all = on(device, &i64_bytes(&c.idx), DType::I64);
    let layouts: Vec<Strided> = (0..c.sizes.len())
        .map(|a| Strided::new(&[nb], &[1], a * nb).unwrap())
        .collect();
    let arrays: Vec<(IndexSource<'_>, usize)> = c
        .sizes
        .iter()
        .enumerate()
        .map(|(a, &s)| {
            let src = if stored {
                IndexSource::Stored {
                    values: &all,
                    layout: &layouts[a],
                }
            } else {
                IndexSource::Host(&c.idx[a * nb..(a + 1) * nb])
            };
            (src, s)
        })
        .collect();
    IndexValues::new(device, nb, &arrays).unwrap()
}

fn i64_bytes(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Valid random bytes of `dtype` (bools 0/1; floats from small integers and halves, so that
/// sums are exact or rounded the same way on both sides, and no NaN payloads differ).
fn values(rng: &mut SmallRng, dtype: DType, n: usize) -> Vec<u8> {
    let v: Vec<f64> = (0..n)
        .map(|_| match dtype {
            DType::Bool => f64::from(rng.random_range(0..2u8)),
            DType::U8 => f64::from(rng.random_range(0..=255u8)),
            DType::I8 => f64::from(rng.random_range(-128i16..=127)),
            _ if dtype.is_float() => rng.random_range(-1000i32..1000) as f64 / 8.0,
            _ => rng.random_range(-100_000i64..100_000) as f64,
        })
        .collect();
    Storage::from_slice(&v, CPU)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
        .to_bytes()
        .unwrap()
}

#[test]
fn gathers_and_scatters_match_the_host() {
    let _release = Release;
    if skip_without_gpu("gathers_and_scatters_match_the_host") {
        return;
    }
    let mut rng = SmallRng::seed_from_u64(41);
    for round in 0..200 {
        let c = random_case(&mut rng);
        let dtype = DType::ALL[round % DType::ALL.len()];
        let src = values(&mut rng, dtype, c.src_len);
        let vals = values(&mut rng, dtype, c.n);
        let dead = dead_ref(&c);
        let mut outs = Vec::new();
        for device in [CPU, GPU] {
            let s = on(device, &src, dtype);
            let idx = values_of(&c, device, round % 2 == 0);
            let g = s.index_gather(&c.desc, &idx, None).unwrap();
            let mut t = on(device, &src, dtype);
            let d = DeadMask::new(&idx).unwrap();
            assert_eq!(d.to_vec().unwrap(), dead);
            t.index_scatter(&on(device, &vals, dtype), &c.desc, &idx, &d, None)
                .unwrap();
            outs.push((g.to_bytes().unwrap(), t.to_bytes().unwrap()));
        }
        assert_eq!(outs[0], outs[1], "{dtype} {c:?}");
    }
}

#[test]
fn scatter_add_matches_the_host_for_every_dtype() {
    let _release = Release;
    if skip_without_gpu("scatter_add_matches_the_host_for_every_dtype") {
        return;
    }
    let mut rng = SmallRng::seed_from_u64(42);
    for round in 0..300 {
        let c = random_case(&mut rng);
        let dtype = DType::ALL[round % DType::ALL.len()];
        let dst = values(&mut rng, dtype, c.src_len);
        let vals = values(&mut rng, dtype, c.n);
        let mut outs = Vec::new();
        for device in [CPU, GPU] {
            let mut t = on(device, &dst, dtype);
            let idx = values_of(&c, device, round % 2 == 0);
            let g = AddGroups::new(&idx).unwrap();
            t.index_scatter_add(&on(device, &vals, dtype), &c.desc, &idx, &g)
                .unwrap();
            outs.push(t.to_bytes().unwrap());
        }
        assert_eq!(outs[0], outs[1], "{dtype} {c:?}");
    }
}

#[test]
fn index_preparation_matches_the_host() {
    let _release = Release;
    if skip_without_gpu("index_preparation_matches_the_host") {
        return;
    }
    let mut rng = SmallRng::seed_from_u64(43);
    for round in 0..200 {
        // Normalisation of int32 and int64 arrays through broadcast layouts, some values bad.
        let rank = rng.random_range(0..=3usize);
        let shape: Vec<usize> = (0..rank).map(|_| rng.random_range(1..=6usize)).collect();
        let nb: usize = shape.iter().product();
        let (layout, len) = random_index_layout(&mut rng, &shape);
        let size = rng.random_range(1..=9i64);
        let spread = if round % 3 == 0 { 2 * size } else { size };
        let raw: Vec<i64> = (0..len)
            .map(|_| rng.random_range(-spread..spread))
            .collect();
        let i32 = round % 2 == 0;
        let bytes: Vec<u8> = if i32 {
            raw.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect()
        } else {
            i64_bytes(&raw)
        };
        let mut outs = Vec::new();
        for device in [CPU, GPU] {
            let src = on(device, &bytes, if i32 { DType::I32 } else { DType::I64 });
            let mut out = Storage::zeros(nb + 1, DType::I64, device).unwrap();
            let mut bad = Storage::full::<i64>(2, -1, device).unwrap();
            out.index_normalise(1, nb, &src, &layout, size as usize, &mut bad, 1)
                .unwrap();
            outs.push((out.to_vec::<i64>().unwrap(), bad.to_vec::<i64>().unwrap()));
        }
        assert_eq!(outs[0], outs[1], "{layout:?} {raw:?}");

        // Dead positions of random index tuples through a table, with and without a reported
        // bad value (the last array's last value out of range).
        let mut c = random_case(&mut rng);
        let nb = c.desc.nb as usize;
        if round % 4 == 0 && nb > 0 {
            *c.idx.last_mut().unwrap() = *c.sizes.last().unwrap() as i64;
        }
        let mut outs = Vec::new();
        for device in [CPU, GPU] {
            let idx = values_of(&c, device, true);
            let dead = DeadMask::by_table(&idx).unwrap();
            outs.push((
                dead.to_vec().unwrap(),
                idx.bad_positions().unwrap(),
                idx.to_vec().unwrap(),
            ));
        }
        assert_eq!(outs[0], outs[1], "{c:?}");

        // Unravel of random positions.
        let rank = rng.random_range(1..=MAX_INDEX_DIMS);
        let shape: Vec<usize> = (0..rank).map(|_| rng.random_range(1..=4usize)).collect();
        let total: usize = shape.iter().product();
        let n = rng.random_range(1..50usize);
        let lin: Vec<i64> = (0..n).map(|_| rng.random_range(0..total) as i64).collect();
        let s = Strided::new(&shape, &vec![0; rank], 0).unwrap();
        for rows in [false, true] {
            let mut outs = Vec::new();
            for device in [CPU, GPU] {
                let mut out = Storage::zeros(rank * n, DType::I64, device).unwrap();
                on(device, &i64_bytes(&lin), DType::I64)
                    .index_unravel(&s, rows, &mut out)
                    .unwrap();
                outs.push(out.to_vec::<i64>().unwrap());
            }
            assert_eq!(outs[0], outs[1], "rows {rows}");
        }
    }
}

#[test]
fn row_paths_match_the_host() {
    let _release = Release;
    if skip_without_gpu("row_paths_match_the_host") {
        return;
    }
    let mut rng = SmallRng::seed_from_u64(44);
    for round in 0..100 {
        let rows = rng.random_range(1..40usize);
        let cols = 4 * rng.random_range(1..70usize);
        let base = rng.random_range(0..3usize);
        let nrows = rng.random_range(1..30usize);
        let src = random_bytes(&mut rng, (rows + base) * cols, 4);
        let idx: Vec<i64> = (0..nrows)
            .map(|_| rng.random_range(0..rows) as i64)
            .collect();
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
        let dead: Vec<u8> = (0..nrows)
            .map(|b| u8::from(idx[b + 1..].contains(&idx[b])))
            .collect();
        let vals = random_bytes(&mut rng, nrows * cols, 4);
        // Raw int32 values two apart, negative ones wrapping; every third round one is bad.
        let mut raw: Vec<i32> = idx
            .iter()
            .flat_map(|&v| {
                [
                    if v % 2 == 0 {
                        v as i32 - rows as i32
                    } else {
                        v as i32
                    },
                    -7,
                ]
            })
            .collect();
        if round % 3 == 0 {
            raw[2 * rng.random_range(0..nrows)] = rows as i32 + 1;
        }
        let raw_bytes: Vec<u8> = raw.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut outs = Vec::new();
        for device in [CPU, GPU] {
            let s = on(device, &src, DType::F32);
            let ix = IndexValues::new(device, nrows, &[(IndexSource::Host(&idx), rows)]).unwrap();
            let g = s.index_gather(&d, &ix, Some(&r)).unwrap();
            let mut t = on(device, &src, DType::F32);
            let mask = DeadMask::new(&ix).unwrap();
            assert_eq!(mask.to_vec().unwrap(), dead);
            t.index_scatter(&on(device, &vals, DType::F32), &d, &ix, &mask, Some(&r))
                .unwrap();
            let checked = |wrap| {
                s.index_gather_rows_checked(
                    &r,
                    &on(device, &raw_bytes, DType::I32),
                    (0, 2),
                    rows,
                    wrap,
                    nrows * cols,
                )
                .unwrap()
                .map(|o| o.to_bytes().unwrap())
            };
            outs.push((
                g.to_bytes().unwrap(),
                t.to_bytes().unwrap(),
                checked(true),
                checked(false),
            ));
        }
        assert_eq!(outs[0], outs[1], "round {round}");
        assert_eq!(outs[0].2.is_none(), round % 3 == 0);
        // Without wrapping a negative value is out of range too.
        let negative = raw.iter().step_by(2).any(|&v| v < 0);
        assert_eq!(outs[0].3.is_none(), round % 3 == 0 || negative);
    }
}

/// `index_accumulate` (a scatter-add through a descriptor of no index arrays: one index
/// position whose group is itself), which `genesis-index` uses to add dense values in every
/// dtype, CUDA against the host.
#[test]
fn accumulate_matches_the_host() {
    let _release = Release;
    if skip_without_gpu("accumulate_matches_the_host") {
        return;
    }
    let mut rng = SmallRng::seed_from_u64(46);
    for (round, dtype) in DType::ALL.into_iter().cycle().take(40).enumerate() {
        let len = rng.random_range(1..2000usize);
        let dst = values(&mut rng, dtype, len);
        let vals = values(&mut rng, dtype, len + round % 3);
        let mut outs = Vec::new();
        for device in [CPU, GPU] {
            let mut t = on(device, &dst, dtype);
            t.index_accumulate(&on(device, &vals, dtype)).unwrap();
            outs.push(t.to_bytes().unwrap());
        }
        assert_eq!(outs[0], outs[1], "{dtype} round {round}");
    }
}

/// The scatter-add of a descriptor with no index arrays (`n_adv` and `k` 0: one index position
/// whose group is itself), which `genesis-index` uses to add dense values in every dtype: over
/// a strided view of two dimensions (every other column from an offset), CUDA against the host.
#[test]
fn scatter_add_without_index_arrays_matches_the_host() {
    let _release = Release;
    if skip_without_gpu("scatter_add_without_index_arrays_matches_the_host") {
        return;
    }
    let mut rng = SmallRng::seed_from_u64(45);
    for (round, dtype) in DType::ALL.into_iter().cycle().take(40).enumerate() {
        let (rows, cols) = (rng.random_range(1..20usize), rng.random_range(1..40usize));
        let base = rng.random_range(0..5usize);
        let len = base + rows * 2 * cols;
        let mut d = IndexDesc {
            res_shape: [1; MAX_INDEX_DIMS],
            res_stride: [0; MAX_INDEX_DIMS],
            adv_stride: [0; MAX_INDEX_DIMS],
            base: base as i64,
            nb: 1,
            rank: 2,
            pos: round as i32 % 3,
            k: 0,
            n_adv: 0,
        };
        d.res_shape[0] = rows as i64;
        d.res_shape[1] = cols as i64;
        d.res_stride[0] = 2 * cols as i64;
        d.res_stride[1] = 2;
        let dst = values(&mut rng, dtype, len);
        let vals = values(&mut rng, dtype, rows * cols);
        let mut outs = Vec::new();
        for device in [CPU, GPU] {
            let mut t = on(device, &dst, dtype);
            let idx = IndexValues::new(device, 1, &[]).unwrap();
            let g = AddGroups::new(&idx).unwrap();
            t.index_scatter_add(&on(device, &vals, dtype), &d, &idx, &g)
                .unwrap();
            outs.push(t.to_bytes().unwrap());
        }
        assert_eq!(outs[0], outs[1], "{dtype} round {round}");
        // Elements outside the view are unchanged.
        let unchanged = (0..len).filter(|&o| o < base || (o - base) % 2 == 1);
        let es = dtype.size();
        for o in unchanged {
            assert_eq!(
                outs[1][o * es..(o + 1) * es],
                dst[o * es..(o + 1) * es],
                "{dtype}"
            );
        }
    }
}
