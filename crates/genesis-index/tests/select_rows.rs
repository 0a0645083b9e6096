//! `select_rows` (PyTorch's `index_select(0, index)` of whole 16-byte rows in one pass): on the
//! host against a reference written here, and on CUDA against the host (bit for bit, the same
//! errors). Every element width, int64 and int32 index tensors (strided ones too), views with
//! an offset, empty indices, negative and too large values (errors naming the first bad value),
//! and the layouts the path declines (`None`).

use std::sync::Arc;

use genesis_index::{Error, select_rows};
use genesis_storage::{DType, Device, Layout, Storage, View};

/// A small xorshift generator: the cases are reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// `rows + skip` rows of `row_bytes` random bytes as a storage of `dtype` on `device`, seen as
/// `[rows, row_bytes / size]` from row `skip` (a view with an offset).
fn matrix(bytes: &[u8], dtype: DType, rows: usize, skip: usize, device: Device) -> View {
    let size = dtype.size();
    let row = bytes.len() / (rows + skip) / size;
    let s = Storage::from_bytes(bytes, dtype, device).unwrap();
    View::with_layout(
        Arc::new(s),
        Layout::new(&[rows, row], &[row as isize, 1], skip * row),
    )
    .unwrap()
}

/// A 1-D index view of `values` (int32 when `i32`), every `stride`-th element of a storage that
/// holds filler between them.
fn index(values: &[i64], i32: bool, stride: usize, device: Device) -> View {
    let n = values.len();
    let mut spread = vec![-99i64; (n.max(1) - 1) * stride + 1];
    for (k, &v) in values.iter().enumerate() {
        spread[k * stride] = v;
    }
    let s = if i32 {
        let v: Vec<i32> = spread.iter().map(|&v| v as i32).collect();
        Storage::from_slice(&v, device).unwrap()
    } else {
        Storage::from_slice(&spread, device).unwrap()
    };
    View::with_layout(Arc::new(s), Layout::new(&[n], &[stride as isize], 0)).unwrap()
}

/// The reference: the rows of `bytes` (after `skip` rows) named by `values`, or the first
/// value outside `0..rows`.
fn reference(bytes: &[u8], rows: usize, skip: usize, values: &[i64]) -> Result<Vec<u8>, i64> {
    let w = bytes.len() / (rows + skip);
    let mut out = Vec::new();
    for &v in values {
        if v < 0 || v as usize >= rows {
            return Err(v);
        }
        let r = skip + v as usize;
        out.extend_from_slice(&bytes[r * w..(r + 1) * w]);
    }
    Ok(out)
}

/// `select_rows` read back as bytes, or the bad value of its out-of-range error.
fn run(input: &View, idx: &View) -> Result<Vec<u8>, i64> {
    match select_rows(input, idx) {
        Ok(Some(v)) => Ok(v.contiguous().unwrap().to_bytes().unwrap()),
        Ok(None) => panic!("16-byte rows take the row path"),
        Err(Error::IndexOutOfRange { index, dim: 0, .. }) => Err(index),
        Err(e) => panic!("unexpected error {e}"),
    }
}

const DTYPES: [DType; 10] = DType::ALL;

/// Random cases on `device`: each compared with the reference, and returned (for the CUDA
/// test to compare with the host's).
fn random_cases(device: Device, seed: u64) -> Vec<Result<Vec<u8>, i64>> {
    let mut rng = Rng(seed);
    let mut results = Vec::new();
    for round in 0..120 {
        let dtype = DTYPES[round % DTYPES.len()];
        // Rows of 16 to 256 bytes; up to 40 rows after up to 3 skipped.
        let row_bytes = 16 * (1 + rng.below(16));
        let (rows, skip) = (1 + rng.below(40), rng.below(4));
        let mut bytes: Vec<u8> = (0..(rows + skip) * row_bytes)
            .map(|_| rng.next() as u8)
            .collect();
        if dtype == DType::Bool {
            bytes.iter_mut().for_each(|b| *b &= 1);
        }
        let n = rng.below(70);
        let mut values: Vec<i64> = (0..n).map(|_| rng.below(rows) as i64).collect();
        // A third of the rounds have one bad value: negative, the row count, or far out.
        if round % 3 == 0 && n > 0 {
            let bad = [
                -1,
                -(rows as i64),
                rows as i64,
                i64::from(i32::MIN),
                1 << 20,
            ];
            values[rng.below(n)] = bad[rng.below(bad.len())];
        }
        let (i32, stride) = (round % 2 == 1, 1 + rng.below(3));
        let input = matrix(&bytes, dtype, rows, skip, device);
        let got = run(&input, &index(&values, i32, stride, device));
        let want = reference(&bytes, rows, skip, &values);
        assert_eq!(
            got, want,
            "round {round}: {dtype} {rows} rows (skip {skip}), {values:?} (i32 {i32}, stride {stride})"
        );
        results.push(got);
    }
    results
}

#[test]
fn rows_match_the_reference_and_bad_values_are_errors_on_the_host() {
    random_cases(Device::Cpu, 7);
}

#[test]
fn negative_and_too_large_values_name_the_first_bad_one() {
    let bytes: Vec<u8> = (0..4 * 16).map(|i| i as u8).collect();
    let x = matrix(&bytes, DType::F32, 4, 0, Device::Cpu);
    for i32 in [false, true] {
        // Negative values are not counted from the end (unlike x[idx]).
        assert_eq!(run(&x, &index(&[0, -1, 9], i32, 1, Device::Cpu)), Err(-1));
        assert_eq!(run(&x, &index(&[3, 4, -1], i32, 1, Device::Cpu)), Err(4));
        assert_eq!(run(&x, &index(&[-4], i32, 2, Device::Cpu)), Err(-4));
        let e = select_rows(&x, &index(&[1, -2], i32, 1, Device::Cpu)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "index -2 is out of bounds for dimension 0 with size 4"
        );
        // In range: both kinds give the same rows.
        assert_eq!(
            run(&x, &index(&[3, 0, 3], i32, 1, Device::Cpu)),
            reference(&bytes, 4, 0, &[3, 0, 3])
        );
    }
    // An empty index selects nothing; an empty input with an empty index too, while any value
    // into zero rows is out of range.
    assert_eq!(run(&x, &index(&[], false, 1, Device::Cpu)), Ok(vec![]));
    let zero_rows =
        View::with_layout(Arc::clone(x.storage()), Layout::contiguous(&[0, 4])).unwrap();
    let empty = select_rows(&zero_rows, &index(&[], true, 1, Device::Cpu))
        .unwrap()
        .unwrap();
    assert_eq!(empty.layout().shape(), &[0, 4]);
    assert_eq!(run(&zero_rows, &index(&[0], false, 1, Device::Cpu)), Err(0));
    // The result's shape: the index's length, then the row.
    let got = select_rows(&x, &index(&[2, 2], false, 1, Device::Cpu))
        .unwrap()
        .unwrap();
    assert_eq!(got.layout().shape(), &[2, 4]);
}

#[test]
fn layouts_without_whole_16_byte_rows_are_declined() {
    let data: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let s = Arc::new(Storage::from_slice(&data, Device::Cpu).unwrap());
    let idx = index(&[0], false, 1, Device::Cpu);
    let view = |shape: &[usize], strides: &[isize], offset| {
        View::with_layout(Arc::clone(&s), Layout::new(shape, strides, offset)).unwrap()
    };
    // Rows of 12 bytes, a transposed matrix, an offset of one element, a 0-d input.
    for v in [
        view(&[8, 3], &[3, 1], 0),
        view(&[4, 6], &[1, 4], 0),
        view(&[5, 4], &[4, 1], 1),
        view(&[], &[], 0),
    ] {
        assert!(select_rows(&v, &idx).unwrap().is_none(), "{:?}", v.layout());
    }
    // Index tensors that are not 1-D int64/int32.
    let x = view(&[6, 4], &[4, 1], 0);
    let two_d = View::with_layout(
        Arc::new(Storage::from_slice(&[0i64, 1], Device::Cpu).unwrap()),
        Layout::contiguous(&[1, 2]),
    )
    .unwrap();
    let floats = View::new(Storage::from_slice(&[0.0f32], Device::Cpu).unwrap());
    let bools = View::new(Storage::from_bytes(&[1], DType::Bool, Device::Cpu).unwrap());
    for i in [two_d, floats, bools] {
        assert!(select_rows(&x, &i).unwrap().is_none());
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::*;

    #[test]
    fn cuda_rows_and_errors_match_the_host() {
        if genesis_cuda::skip_without_gpu("cuda_rows_and_errors_match_the_host") {
            return;
        }
        let _release = Release;
        // The same seed: the same cases on both devices, each also checked against the
        // reference.
        assert_eq!(
            random_cases(Device::Cuda(0), 11),
            random_cases(Device::Cpu, 11)
        );
        // Long indices (no early verdict: the whole kernel decides) with one bad value at the
        // end, negative or too large; and every dtype width of a wide row.
        let rows = 300;
        let bytes: Vec<u8> = (0..rows * 64).map(|i| (i * 7) as u8).collect();
        let n = genesis_kernels::index::EARLY_VERDICT_MAX_ROWS + 5;
        for bad in [-1i64, rows as i64] {
            for i32 in [false, true] {
                let mut values: Vec<i64> = (0..n).map(|k| (k * 13 % rows) as i64).collect();
                *values.last_mut().unwrap() = bad;
                let good = &values[..n - 1];
                for device in [Device::Cpu, Device::Cuda(0)] {
                    let x = matrix(&bytes, DType::I16, rows, 0, device);
                    assert_eq!(run(&x, &index(&values, i32, 1, device)), Err(bad));
                    assert_eq!(
                        run(&x, &index(good, i32, 1, device)),
                        reference(&bytes, rows, 0, good)
                    );
                }
            }
        }
        for dtype in DType::ALL {
            let mut per_device = Vec::new();
            for device in [Device::Cpu, Device::Cuda(0)] {
                // Bool bytes must be 0 or 1.
                let part: Vec<u8> = bytes[..8 * 64]
                    .iter()
                    .map(|&b| if dtype == DType::Bool { b & 1 } else { b })
                    .collect();
                let x = matrix(&part, dtype, 8, 0, device);
                per_device.push(run(&x, &index(&[7, 0, 3, 3], false, 1, device)));
            }
            assert_eq!(per_device[0], per_device[1], "{dtype}");
            assert!(per_device[0].is_ok());
        }
    }

    /// Gives the pools' cached memory back after everything of the test is dropped.
    struct Release;

    impl Drop for Release {
        fn drop(&mut self) {
            let _ = genesis_storage::cuda::empty_caches();
        }
    }
}
