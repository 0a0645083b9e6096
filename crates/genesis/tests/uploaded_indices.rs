//! Index tensors uploaded from host memory: on CUDA an integer tensor copied from the host (or
//! drawn by `randint`) carries its values' bounds, and `cross_entropy`, `gather`,
//! `scatter_add_`, advanced indexing and integer division skip reading their device-side
//! check back when those bounds rule every bad value out. Whatever writes the tensor
//! afterwards (in place, through a view, by a copy) must bring the check back: random targets,
//! indices and divisors, written or not after the upload, give on every device what the CPU
//! gives for the same final values, errors included.

use genesis::{Reduction, Tensor};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod common;
use common::{Release, devices};

/// The ways a test writes an uploaded index in place.
#[derive(Debug, Clone, Copy)]
enum Write {
    None,
    Fill(i64),
    AddScalar(i64),
    CopyFrom,
    ViewFill(i64),
    ReshapedFill(i64),
}

fn random_write(rng: &mut SmallRng, hi: i64) -> Write {
    let v = rng.random_range(-3..hi + 3);
    match rng.random_range(0..7) {
        0 | 1 => Write::None,
        2 => Write::Fill(v),
        3 => Write::AddScalar(rng.random_range(-2..4)),
        4 => Write::CopyFrom,
        5 => Write::ViewFill(v),
        _ => Write::ReshapedFill(v),
    }
}

/// Applies `w` to `t` (1-D int64), `other` the values a copy writes.
fn apply(w: Write, t: &Tensor, other: &[i64]) {
    let dev = t.device();
    match w {
        Write::None => {}
        Write::Fill(v) => t.fill_(v).unwrap(),
        Write::AddScalar(v) => t.add_(v).unwrap(),
        Write::CopyFrom => t
            .copy_(&Tensor::from_slice(other, [other.len()], dev).unwrap())
            .unwrap(),
        Write::ViewFill(v) => {
            let n = t.shape()[0];
            t.narrow(0, n / 2, n - n / 2).unwrap().fill_(v).unwrap()
        }
        Write::ReshapedFill(v) => t.reshape([-1, 1]).unwrap().fill_(v).unwrap(),
    }
}

/// Random values in `lo..hi`, now and then one `ignore` among them.
fn values(rng: &mut SmallRng, n: usize, lo: i64, hi: i64, ignore: Option<i64>) -> Vec<i64> {
    (0..n)
        .map(|_| match ignore {
            Some(i) if rng.random_range(0..8) == 0 => i,
            _ => rng.random_range(lo..hi),
        })
        .collect()
}

/// The outcome of an op as values or an error's message.
fn outcome(r: genesis::Result<Tensor>) -> Result<Vec<f32>, String> {
    r.and_then(|t| t.to_vec::<f32>()).map_err(|e| e.to_string())
}

fn same(a: &Result<Vec<f32>, String>, b: &Result<Vec<f32>, String>, what: &str) {
    match (a, b) {
        (Ok(x), Ok(y)) => {
            assert_eq!(x.len(), y.len(), "{what}");
            for (p, q) in x.iter().zip(y) {
                assert!(
                    (p - q).abs() <= 1e-5 * (1.0 + q.abs()),
                    "{what}: {x:?} vs {y:?}"
                );
            }
        }
        // Both refused (the devices may name another bad position).
        (Err(_), Err(_)) => {}
        _ => panic!("{what}: {a:?} against the CPU's {b:?}"),
    }
}

type Outcome = Result<Vec<f32>, String>;

/// The first device's (the CPU's) outcomes of a case, which the other devices' must match.
#[derive(Default)]
struct Expected {
    first: Option<Vec<Outcome>>,
    /// Refusals on the first device, over all cases.
    refused: usize,
}

impl Expected {
    /// Keeps `got` as the case's outcomes when it is the first device's, else compares.
    fn check(&mut self, got: Vec<Outcome>, what: &str) {
        match &self.first {
            None => {
                self.refused += got.iter().filter(|r| r.is_err()).count();
                self.first = Some(got);
            }
            Some(w0) => {
                for (k, (a, b)) in got.iter().zip(w0).enumerate() {
                    same(a, b, &format!("{what} op {k}"));
                }
            }
        }
    }

    /// Starts the next case.
    fn next(&mut self) {
        self.first = None;
    }
}

/// A range of `size` values around `0..size`: mostly it, sometimes one value further below
/// (`below`) or above.
fn range_of(rng: &mut SmallRng, size: i64, below: i64) -> (i64, i64) {
    match rng.random_range(0..4) {
        0 => (below - 1, size),
        1 => (below, size + 1),
        _ => (below, size),
    }
}

/// The index `idx` uploaded to `dev` as int64, or as int32 converted on the device (`narrow`).
fn upload_index(idx: &[i64], narrow: bool, dev: genesis::Device) -> Tensor {
    if narrow {
        let i32s: Vec<i32> = idx.iter().map(|&v| v as i32).collect();
        let t = Tensor::from_slice(&i32s, [idx.len()], dev).unwrap();
        t.to_dtype(genesis::DType::I64).unwrap()
    } else {
        Tensor::from_slice(idx, [idx.len()], dev).unwrap()
    }
}

#[test]
fn cross_entropy_by_uploaded_targets_matches_the_cpu() {
    let _release = Release;
    let mut rng = SmallRng::seed_from_u64(11);
    let mut want = Expected::default();
    for case in 0..300 {
        let (n, c) = (rng.random_range(1..40), rng.random_range(1..12i64));
        // Mostly in range; sometimes a value just outside, or the ignored -100.
        let (lo, hi) = range_of(&mut rng, c, 0);
        let ignore = rng.random_bool(0.3).then_some(-100);
        let t = values(&mut rng, n, lo, hi, ignore);
        let other = values(&mut rng, n, -1, c + 1, None);
        let w = random_write(&mut rng, c);
        let logits: Vec<f32> = (0..n * c as usize)
            .map(|_| rng.random_range(-4.0..4.0))
            .collect();
        want.next();
        for dev in devices() {
            let target = Tensor::from_slice(&t, [n], dev).unwrap();
            apply(w, &target, &other);
            let x = Tensor::from_slice(&logits, [n, c as usize], dev).unwrap();
            let got = [Reduction::Mean, Reduction::None]
                .map(|red| outcome(x.cross_entropy(&target, ignore, red)));
            want.check(got.to_vec(), &format!("case {case} {dev:?} {w:?} {t:?}"));
        }
    }
    // Both outcomes were reached.
    let refused = want.refused;
    assert!((50..550).contains(&refused), "{refused} of 600 refused");
}

#[test]
fn selection_by_uploaded_indices_matches_the_cpu() {
    let _release = Release;
    let mut rng = SmallRng::seed_from_u64(12);
    let mut want = Expected::default();
    for case in 0..300 {
        let (rows, cols, n) = (
            rng.random_range(1..9i64),
            rng.random_range(1..5usize),
            rng.random_range(1..30),
        );
        let (lo, hi) = range_of(&mut rng, rows, 0);
        let idx = values(&mut rng, n, lo, hi, None);
        let other = values(&mut rng, n, -1, rows + 1, None);
        let w = random_write(&mut rng, rows);
        let table: Vec<f32> = (0..rows as usize * cols).map(|i| i as f32).collect();
        let src: Vec<f32> = (0..n * cols).map(|_| rng.random_range(-4.0..4.0)).collect();
        // Uploaded as int64, or as int32 and converted on the device.
        let narrow = rng.random_bool(0.3);
        want.next();
        for dev in devices() {
            let index = upload_index(&idx, narrow, dev);
            apply(w, &index, &other);
            let tab = Tensor::from_slice(&table, [rows as usize, cols], dev).unwrap();
            let by_rows = outcome(tab.index_select(0, &index));
            // gather along dimension 0 with the index repeated over the columns.
            // (A view of the index: its storage is the upload's.)
            let g = index.reshape([-1, 1]).unwrap().expand([n, cols]).unwrap();
            let gathered = outcome(tab.gather(0, &g));
            // scatter_add_ of rows into a zeroed table.
            let acc = Tensor::zeros([rows as usize, cols], genesis::DType::F32, dev).unwrap();
            let vals = Tensor::from_slice(&src, [n, cols], dev).unwrap();
            let scattered = outcome(acc.scatter_add_(0, &g, &vals).map(|()| acc.clone()));
            let what = format!("case {case} {dev:?} {w:?} {narrow} {idx:?}");
            want.check(vec![by_rows, gathered, scattered], &what);
        }
    }
    // Both outcomes were reached.
    let refused = want.refused;
    assert!((100..800).contains(&refused), "{refused} of 900 refused");
}

/// Integer division whose divisors were uploaded or drawn by `randint` (whose known bounds may
/// rule zero out, sparing the check for zeros its read-back), written afterwards or not: on
/// every device what the CPU gives for the same final values, a zero divisor an error.
#[test]
fn integer_division_by_uploaded_or_drawn_divisors_matches_the_cpu() {
    use genesis::{DType, RoundingMode};
    let _release = Release;
    let mut rng = SmallRng::seed_from_u64(13);
    let mut want = Expected::default();
    for case in 0..200 {
        let n = rng.random_range(1..40);
        let a = values(&mut rng, n, -1000, 1000, None);
        // Divisors: a range that may hold zero, uploaded or drawn on the device.
        let (lo, hi) = match rng.random_range(0..4) {
            0 => (-5, 6),
            1 => (-9, -1),
            _ => (1, 50),
        };
        let drawn = rng.random_bool(0.5);
        let host_b = values(&mut rng, n, lo, hi, None);
        let w = match rng.random_range(0..4) {
            0 => Write::ViewFill(0),
            1 => Write::AddScalar(rng.random_range(-2..3)),
            _ => Write::None,
        };
        // Drawn on the last device: that device divides by the drawn tensor itself, the
        // others by copies of its values.
        let last = *devices().last().unwrap();
        let drawn_t = drawn.then(|| Tensor::randint(lo, hi, [n], DType::I64, last).unwrap());
        let start = match &drawn_t {
            Some(t) => t.to_vec::<i64>().unwrap(),
            None => host_b.clone(),
        };
        want.next();
        for dev in devices() {
            let b = match &drawn_t {
                Some(t) if dev == last => t.clone(),
                _ => Tensor::from_slice(&start, [n], dev).unwrap(),
            };
            apply(w, &b, &host_b);
            let x = Tensor::from_slice(&a, [n], dev).unwrap();
            let as_f32 =
                |r: genesis::Result<Tensor>| outcome(r.and_then(|t| t.to_dtype(DType::F32)));
            let got = vec![
                as_f32(x.remainder(&b)),
                as_f32(x.floor_divide(&b)),
                as_f32(x.div_mode(&b, RoundingMode::Trunc)),
            ];
            want.check(got, &format!("case {case} {dev:?} {w:?} drawn {drawn}"));
        }
    }
    let refused = want.refused;
    assert!((30..500).contains(&refused), "{refused} of 600 refused");
}

/// Advanced indexing by uploaded index tensors (negative values wrap, some out of range),
/// written afterwards or not: reads through columns and rows, and assignments with and
/// without accumulation, give on every device what the CPU gives.
#[test]
fn advanced_indexing_by_uploaded_tensors_matches_the_cpu() {
    use genesis::s;
    let _release = Release;
    let mut rng = SmallRng::seed_from_u64(14);
    let mut want = Expected::default();
    for case in 0..200 {
        let (rows, cols, n) = (
            rng.random_range(1..7i64),
            rng.random_range(1..7i64),
            rng.random_range(1..12),
        );
        let size = rows.min(cols);
        let (lo, hi) = range_of(&mut rng, size, -size);
        let idx = values(&mut rng, n, lo, hi, None);
        let other = values(&mut rng, n, -size - 1, size + 1, None);
        let w = random_write(&mut rng, size);
        let narrow = rng.random_bool(0.3);
        let table: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
        want.next();
        for dev in devices() {
            let index = upload_index(&idx, narrow, dev);
            apply(w, &index, &other);
            let x = Tensor::from_slice(&table, [rows as usize, cols as usize], dev).unwrap();
            let by_cols = outcome(x.i(&s![.., @&index]));
            let by_rows = outcome(x.i(&s![@&index]));
            let put = |accumulate: bool| {
                let t = x.clone().contiguous().unwrap().mul(1.0).unwrap();
                let v = Tensor::full([0usize; 0], 100.0f32, dev).unwrap();
                outcome(t.index_put_(&s![.., @&index], &v, accumulate).map(|()| t))
            };
            let got = vec![by_cols, by_rows, put(false), put(true)];
            want.check(got, &format!("case {case} {dev:?} {w:?} {narrow} {idx:?}"));
        }
    }
    let refused = want.refused;
    assert!((50..700).contains(&refused), "{refused} of 800 refused");
}
