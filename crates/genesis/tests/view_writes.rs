//! PyTorch's view semantics: writes through any view of a storage (in-place ops, `fill_`,
//! `zero_`, `copy_`, `masked_fill_`, `scatter_`, `scatter_add_`, index assignment, `+=`) are seen through every other view,
//! on strided views too; overlapping source and destination give the answer of the values
//! before the write; every write bumps the storage's version; `deep_clone` does not alias;
//! threads may read and write views of one storage.
//!
//! The generated cases build a random view (slices with steps, narrows, transposes,
//! permutes, selections) of a random tensor, apply a random in-place op to it, and compare the
//! whole storage with a reference: the op computed out of place on an independent deep copy,
//! scattered into the copy's elements through the view's layout.

use genesis::{BinaryOp, DType, Device, IndexItem, IndexTensor, Tensor, s};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod common;
use common::{Release, devices};

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

#[test]
fn writes_through_everyday_views_reach_the_base() {
    let _release = Release;
    for dev in devices() {
        // The guide's `contiguous()` + `masked_fill_`: a contiguous tensor's `contiguous()`
        // is the tensor itself (as in PyTorch), and the fill is seen through both.
        let x = Tensor::from_slice(&[1.0f32, -2.0, 3.0, -4.0], [2, 2], dev).unwrap();
        let y = x.contiguous().unwrap();
        let mask = y.lt_scalar(0.0).unwrap();
        y.masked_fill_(&mask, 0.0).unwrap();
        assert_eq!(f32s(&x), [1.0, 0.0, 3.0, 0.0], "{dev}");
        // m[2:5, 3:7] = 0 through a view.
        let m = Tensor::ones([6, 8], DType::F32, dev).unwrap();
        m.i(&s![2..5, 3..7]).unwrap().fill_(0.0).unwrap();
        let want: Vec<f32> = (0..48)
            .map(|k| {
                let (r, c) = (k / 8, k % 8);
                if (2..5).contains(&r) && (3..7).contains(&c) {
                    0.0
                } else {
                    1.0
                }
            })
            .collect();
        assert_eq!(f32s(&m), want, "{dev}");
        // In-place ops through a view held alongside its base.
        let row = m.i(&s![0]).unwrap();
        row.add_(1.0).unwrap();
        assert_eq!(f32s(&m.i(&s![0]).unwrap()), [2.0; 8]);
        // Assignment into a slice of a view: the base sees it.
        let v = m.i(&s![1..4]).unwrap();
        v.index_put_scalar_(&s![.., 0..2], 9.0).unwrap();
        v.i(&s![2, 6..]).unwrap().zero_().unwrap();
        assert_eq!(f32s(&m.i(&s![1..4, 0]).unwrap()), [9.0; 3]);
        assert_eq!(f32s(&m.i(&s![3, 6..]).unwrap()), [0.0, 0.0]);
        // A deep copy exists (no more `(&m + 0.0)`), and `clone` stays a handle.
        let deep = m.deep_clone().unwrap();
        let handle = m.clone();
        assert!(!deep.shares_storage(&m) && handle.shares_storage(&m));
        m.zero_().unwrap();
        assert_eq!(f32s(&handle), vec![0.0; 48]);
        assert_eq!(f32s(&deep)[..8], [2.0; 8]);
        assert_eq!(deep.version(), 0, "a deep copy has its own counter");
        // copy_ into a strided view from another device and dtype, broadcast.
        let src = Tensor::from_slice(&[1.5f64, -2.0, 8.0], [3, 1], Device::Cpu).unwrap();
        let h = Tensor::zeros([4, 3], DType::F16, dev).unwrap();
        h.t()
            .unwrap()
            .i(&s![.., 1..3])
            .unwrap()
            .copy_(&src)
            .unwrap();
        assert_eq!(
            h.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(),
            [0.0, 0.0, 0.0, 1.5, -2.0, 8.0, 1.5, -2.0, 8.0, 0.0, 0.0, 0.0],
            "{dev}"
        );
        assert!(
            h.copy_(&Tensor::zeros([5], DType::F16, dev).unwrap())
                .is_err()
        );
        // `+=` on a view.
        let mut col = m.t().unwrap().i(&s![7]).unwrap();
        col += &Tensor::full([6], 3.0f32, dev).unwrap();
        assert_eq!(f32s(&m.i(&s![.., 7]).unwrap()), [3.0; 6]);
    }
}

/// One write of the version test.
type Write<'a> = Box<dyn Fn() -> genesis::Result<()> + 'a>;

#[test]
fn every_write_bumps_the_shared_version() {
    let _release = Release;
    for dev in devices() {
        let x = Tensor::zeros([4, 4], DType::F32, dev).unwrap();
        let v = x.i(&s![1..3]).unwrap();
        assert_eq!((x.version(), v.version()), (0, 0));
        let ones = Tensor::ones([2, 4], DType::F32, dev).unwrap();
        let mask = Tensor::from_bools(&[true, false, true, false], [4], dev).unwrap();
        let writes: Vec<(&str, Write<'_>)> = vec![
            ("add_", Box::new(|| v.add_(&ones))),
            ("sub_", Box::new(|| v.sub_(1.0))),
            ("mul_", Box::new(|| x.mul_(2.0))),
            ("div_", Box::new(|| x.div_(2.0))),
            ("exp_", Box::new(|| v.exp_())),
            ("relu_", Box::new(|| x.relu_())),
            ("binary_", Box::new(|| v.binary_(BinaryOp::Maximum, &ones))),
            ("unary_", Box::new(|| v.unary_(genesis::UnaryOp::Neg))),
            ("fill_", Box::new(|| v.t()?.fill_(5.0))),
            ("zero_", Box::new(|| x.zero_())),
            ("copy_", Box::new(|| v.copy_(&x.i(&s![2..])?))),
            ("masked_fill_", Box::new(|| x.masked_fill_(&mask, 1.0))),
            (
                "index_put",
                Box::new(|| x.index_put_(&s![0], &mask.to_dtype(DType::F32)?, false)),
            ),
            (
                "index_add",
                Box::new(|| v.index_put_(&s![.., 1], &ones.i(&s![.., 0])?, true)),
            ),
            (
                "index_fill",
                Box::new(|| x.index_put_scalar_(&s![.., 3], 4.0)),
            ),
            ("mul_out", Box::new(|| v.mul_out(&ones, &mut v.clone()))),
        ];
        for (k, (name, write)) in writes.iter().enumerate() {
            write().unwrap_or_else(|e| panic!("{name} on {dev}: {e}"));
            assert_eq!(x.version(), k as u64 + 1, "{name} on {dev}");
            assert_eq!(v.version(), x.version());
        }
        // Reads, views and out-of-place ops do not count; failed writes may.
        let before = x.version();
        let _ = (
            x.sum().unwrap(),
            f32s(&v),
            x.t().unwrap(),
            (&x + 1.0).unwrap(),
        );
        assert_eq!(x.version(), before);
        assert_eq!((&x + 1.0).unwrap().version(), 0);
    }
}

#[test]
fn overlapping_views_read_before_the_write() {
    let _release = Release;
    for dev in devices() {
        let x = Tensor::arange(0.0, 6.0, 1.0, DType::F32, dev).unwrap();
        // x[1:] += x[:-1]: PyTorch's add_ sees the values before the write.
        x.i(&s![1..])
            .unwrap()
            .add_(&x.i(&s![..5]).unwrap())
            .unwrap();
        assert_eq!(f32s(&x), [0.0, 1.0, 3.0, 5.0, 7.0, 9.0]);
        // A transpose of a square matrix copied onto itself.
        let m = Tensor::arange(0.0, 9.0, 1.0, DType::F32, dev)
            .unwrap()
            .reshape([3, 3])
            .unwrap();
        m.copy_(&m.t().unwrap()).unwrap();
        assert_eq!(f32s(&m), [0.0, 3.0, 6.0, 1.0, 4.0, 7.0, 2.0, 5.0, 8.0]);
        // A mask and index values that live in the storage being written.
        let b = Tensor::from_bools(&[true, false, false, true], [4], dev).unwrap();
        b.masked_fill_(&b, 0).unwrap();
        assert_eq!(b.to_bool_vec().unwrap(), [false; 4]);
        let ix = Tensor::from_slice(&[2i64, 0, 1, 3], [4], dev).unwrap();
        // ix[ix] = ix.flip(0): the positions and values are read before the write.
        ix.index_put_(&s![@&ix], &flip(&ix), false).unwrap();
        assert_eq!(ix.to_vec::<i64>().unwrap(), [1, 0, 3, 2]);
        // A destination that repeats elements is refused and writes nothing.
        let e = Tensor::zeros([1, 3], DType::F32, dev)
            .unwrap()
            .expand([4usize, 3])
            .unwrap();
        assert!(e.fill_(1.0).is_err());
        assert!(e.add_(1.0).is_err());
        assert_eq!(f32s(&e), vec![0.0; 12]);
    }
}

/// `t.flip(0)` (a copy, by advanced indexing; a negative step is an error, as in PyTorch).
fn flip(t: &Tensor) -> Tensor {
    let n = t.shape()[0];
    let idx: Vec<i64> = (0..n as i64).rev().collect();
    t.i(&s![@IndexTensor::i64(&[n], idx)]).unwrap()
}

/// One step of a random view chain.
#[derive(Debug, Clone)]
enum Step {
    Slice(usize, i64, i64, i64),
    Narrow(usize, usize, usize),
    Transpose(usize, usize),
    Permute(Vec<usize>),
    Select(usize, i64),
}

fn apply(t: &Tensor, steps: &[Step]) -> Tensor {
    let mut t = t.clone();
    for step in steps {
        t = match step {
            Step::Slice(d, a, b, st) => {
                let mut items = vec![
                    IndexItem::Slice {
                        start: None,
                        stop: None,
                        step: None
                    };
                    *d
                ];
                items.push(IndexItem::Slice {
                    start: Some(*a),
                    stop: Some(*b),
                    step: Some(*st),
                });
                t.i(&items).unwrap()
            }
            Step::Narrow(d, a, n) => t.narrow(*d as isize, *a as isize, *n).unwrap(),
            Step::Transpose(a, b) => t.transpose(*a as isize, *b as isize).unwrap(),
            Step::Permute(p) => t.permute(p.as_slice()).unwrap(),
            Step::Select(d, i) => {
                let mut items = vec![
                    IndexItem::Slice {
                        start: None,
                        stop: None,
                        step: None
                    };
                    *d
                ];
                items.push(IndexItem::Int(*i));
                t.i(&items).unwrap()
            }
        };
    }
    t
}

/// A random chain of 1 to 3 view steps for a tensor of `shape` (every view non-empty).
fn random_steps(rng: &mut SmallRng, shape: &[usize]) -> Vec<Step> {
    let mut shape = shape.to_vec();
    let mut steps = Vec::new();
    for _ in 0..rng.random_range(1..=3) {
        let rank = shape.len();
        if rank == 0 {
            break;
        }
        let d = rng.random_range(0..rank);
        let n = shape[d];
        let step = match rng.random_range(0..5) {
            0 => {
                let a = rng.random_range(0..n);
                let b = rng.random_range(a + 1..=n);
                let st = rng.random_range(1..=3usize);
                shape[d] = (b - a).div_ceil(st);
                Step::Slice(d, a as i64, b as i64, st as i64)
            }
            1 => {
                let a = rng.random_range(0..n);
                let len = rng.random_range(1..=n - a);
                shape[d] = len;
                Step::Narrow(d, a, len)
            }
            2 if rank >= 2 => {
                let e = (d + 1 + rng.random_range(0..rank - 1)) % rank;
                shape.swap(d, e);
                Step::Transpose(d, e)
            }
            3 if rank >= 2 => {
                let mut p: Vec<usize> = (0..rank).collect();
                for i in (1..rank).rev() {
                    p.swap(i, rng.random_range(0..=i));
                }
                shape = p.iter().map(|&i| shape[i]).collect();
                Step::Permute(p)
            }
            4 if rank >= 2 => {
                shape.remove(d);
                Step::Select(
                    d,
                    rng.random_range(0..n) as i64 - if rng.random_bool(0.3) { n as i64 } else { 0 },
                )
            }
            _ => continue,
        };
        steps.push(step);
    }
    steps
}

fn ints(rng: &mut SmallRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-5..=5) as f32).collect()
}

/// Runs `cases` generated cases on `dev`, each checked against its deep-copy reference;
/// returns each case's final storage.
fn generated_cases(dev: Device, seed: u64, cases: usize) -> Vec<Vec<f32>> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut finals = Vec::new();
    // How many cases each op had, and how many views were strided.
    let (mut ops, mut strided) = ([0usize; 14], 0usize);
    for case in 0..cases {
        let rank = rng.random_range(2..=3);
        let shape: Vec<usize> = (0..rank).map(|_| rng.random_range(1..=5)).collect();
        let n: usize = shape.iter().product();
        let base = Tensor::from_slice(&ints(&mut rng, n), shape.as_slice(), dev).unwrap();
        let steps = random_steps(&mut rng, &shape);
        let view = apply(&base, &steps);
        // The reference's inputs: the same view of an independent deep copy.
        let deep = base.deep_clone().unwrap();
        let view_d = apply(&deep, &steps);
        let vshape = view.shape().to_vec();
        let vn = view.numel();
        // Another view of the same storage with the view's shape (overlapping it, or not).
        let at = rng.random_range(0..=n - vn);
        let other = |b: &Tensor| {
            b.reshape([-1])
                .unwrap()
                .narrow(0, at as isize, vn)
                .unwrap()
                .reshape(vshape.as_slice())
                .unwrap()
        };
        let rhs = Tensor::from_slice(&ints(&mut rng, vn), vshape.as_slice(), dev).unwrap();
        let op = rng.random_range(0..14);
        ops[op] += 1;
        strided += usize::from(!view.is_contiguous());
        let what = format!("case {case} on {dev}: {shape:?} {steps:?} op {op}");
        let expected: Tensor = match op {
            0 => {
                view.fill_(7.5).unwrap();
                view_d.full_like(7.5).unwrap()
            }
            1 => {
                view.zero_().unwrap();
                view_d.zeros_like().unwrap()
            }
            2 => {
                view.add_(&rhs).unwrap();
                view_d.add(&rhs).unwrap()
            }
            3 => {
                view.mul_(-2).unwrap();
                view_d.mul(-2).unwrap()
            }
            4 => {
                view.sub_(&other(&base)).unwrap();
                view_d.sub(&other(&deep)).unwrap()
            }
            5 => {
                view.copy_(&other(&base)).unwrap();
                other(&deep).deep_clone().unwrap()
            }
            6 => {
                view.relu_().unwrap();
                view_d.relu().unwrap()
            }
            7 => {
                let mask = rhs.gt_scalar(0.0).unwrap();
                view.masked_fill_(&mask, -9.0).unwrap();
                view_d.masked_fill(&mask, -9.0).unwrap()
            }
            8 if !vshape.is_empty() => {
                let i = rng.random_range(0..vshape[0]) as i64;
                view.index_put_scalar_(&s![i], 3.0).unwrap();
                let fresh = view_d.deep_clone().unwrap();
                fresh.index_put_scalar_(&s![i], 3.0).unwrap();
                fresh
            }
            9 if !vshape.is_empty() => {
                let row = rhs
                    .reshape([-1])
                    .unwrap()
                    .narrow(0, 0, *vshape.last().unwrap())
                    .unwrap();
                view.binary_(BinaryOp::Maximum, &row).unwrap();
                view_d.maximum(&row).unwrap()
            }
            10 => {
                let mut v = view.clone();
                v -= &rhs;
                view_d.sub(&rhs).unwrap()
            }
            12 | 13 => {
                // scatter_ (distinct targets along each line: a permutation prefix) or
                // scatter_add_ (repeats allowed) along a random dimension of the view.
                let vr = vshape.len();
                let d = rng.random_range(0..vr);
                let size = vshape[d];
                let mut ishape = vshape.clone();
                ishape[d] = rng.random_range(1..=size);
                let mut perm: Vec<i64> = (0..size as i64).collect();
                for i in (1..size).rev() {
                    perm.swap(i, rng.random_range(0..=i));
                }
                let ni: usize = ishape.iter().product();
                let inner: usize = ishape[d + 1..].iter().product();
                let idx: Vec<i64> = (0..ni)
                    .map(|k| {
                        if op == 12 {
                            perm[(k / inner) % ishape[d]]
                        } else {
                            rng.random_range(0..size as i64)
                        }
                    })
                    .collect();
                let idx = Tensor::from_slice(&idx, ishape.as_slice(), dev).unwrap();
                if op == 12 {
                    view.scatter_(d, &idx, &rhs).unwrap();
                    view_d.scatter(d, &idx, &rhs).unwrap()
                } else {
                    view.scatter_add_(d, &idx, &rhs).unwrap();
                    view_d.scatter_add(d, &idx, &rhs).unwrap()
                }
            }
            _ => {
                view.exp_().unwrap();
                view_d.exp().unwrap()
            }
        };
        // The reference: the deep copy's elements, the view's positions overwritten.
        let mut want = f32s(&deep);
        for (k, v) in view.layout().indices().zip(f32s(&expected)) {
            want[k] = v;
        }
        let got = f32s(&base);
        assert_eq!(got, want, "{what}");
        assert_eq!(f32s(&view), f32s(&expected), "{what}: the view");
        assert!(base.version() >= 1, "{what}: version");
        finals.push(got);
    }
    assert!(
        ops.iter().all(|&k| k >= cases / 24) && strided >= cases / 4,
        "coverage: ops {ops:?}, {strided} strided views of {cases}"
    );
    finals
}

#[test]
fn generated_writes_through_views_match_a_deep_copy_reference() {
    let _release = Release;
    generated_cases(Device::Cpu, 7, 400);
}

#[test]
fn generated_writes_on_cuda_match_the_cpu() {
    let _release = Release;
    if !genesis::cuda::is_available() {
        eprintln!("skipped: no CUDA device found");
        return;
    }
    let cpu = generated_cases(Device::Cpu, 11, 300);
    let gpu = generated_cases(Device::Cuda(0), 11, 300);
    for (k, (c, g)) in cpu.iter().zip(&gpu).enumerate() {
        // exp is within a few ulp of the CPU twin; everything else is exact.
        let close = c
            .iter()
            .zip(g)
            .all(|(a, b)| a == b || (a - b).abs() <= 1e-5 * a.abs().max(1.0));
        assert!(close, "case {k}: cpu {c:?} gpu {g:?}");
    }
}

#[test]
fn threads_read_and_write_views_of_one_storage() {
    let _release = Release;
    for dev in devices() {
        let (rows, cols, rounds) = (8usize, 64usize, 200);
        let m = Tensor::zeros([rows, cols], DType::F32, dev).unwrap();
        let writers = 4usize;
        let barrier = std::sync::Barrier::new(writers);
        std::thread::scope(|scope| {
            for w in 0..writers {
                let band = m.i(&s![w..w + 4]).unwrap();
                let col = m.i(&s![.., w]).unwrap();
                let barrier = &barrier;
                scope.spawn(move || {
                    // Overlapping bands of rows (contiguous views): each add_ is one locked
                    // read-modify-write, so no increment is lost.
                    for _ in 0..rounds {
                        band.add_(1.0).unwrap();
                    }
                    barrier.wait();
                    // Then each thread doubles its own column (a strided view: computed and
                    // copied back), which no other thread writes.
                    col.mul_(2.0).unwrap();
                });
            }
            // Readers, meanwhile: whole numbers, never more than the final maximum.
            for _ in 0..2 {
                let m = m.clone();
                scope.spawn(move || {
                    for _ in 0..50 {
                        let v = m.to_vec::<f32>().unwrap();
                        assert!(v.iter().all(|x| x.fract() == 0.0 && *x <= 8.0 * 200.0));
                        let _ = m.i(&s![..;2, 1..]).unwrap().sum().unwrap();
                    }
                });
            }
        });
        let got = f32s(&m);
        for r in 0..rows {
            let bands = (0..writers).filter(|w| (*w..w + 4).contains(&r)).count() as f32;
            for c in 0..cols {
                let want = bands * rounds as f32 * if c < writers { 2.0 } else { 1.0 };
                assert_eq!(got[r * cols + c], want, "{dev} ({r}, {c})");
            }
        }
        let writes = writers * (rounds + 1);
        assert_eq!(m.version(), writes as u64, "{dev}: every write counted");
    }
}

#[test]
fn a_guard_held_by_this_thread_makes_a_write_an_error_not_a_deadlock() {
    // Host bytes are lent under the storage's read lock; a write from the same thread
    // meanwhile is refused (waiting would never end), and succeeds once the guard is gone.
    let s = genesis_storage::Storage::from_slice(&[1.0f32, 2.0], Device::Cpu).unwrap();
    let g = s.as_slice::<f32>().unwrap();
    let one = genesis_storage::Storage::scalar(5.0, DType::F32).unwrap();
    let e = s.fill_shared(&genesis::Layout::contiguous(&[2]), &one);
    assert!(
        matches!(e, Err(genesis_storage::Error::Aliased { .. })),
        "{e:?}"
    );
    assert_eq!(g, [1.0, 2.0]);
    drop(g);
    s.fill_shared(&genesis::Layout::contiguous(&[2]), &one)
        .unwrap();
    assert_eq!(s.to_vec::<f32>().unwrap(), [5.0, 5.0]);
    assert_eq!(s.version(), 1);
}

#[test]
fn threads_that_write_each_others_sources_finish() {
    // Each op takes its sources' read locks and its destination's write lock in address
    // order, so two threads copying between two storages in opposite directions (and index
    // assignments reading the other storage) cannot wait for each other forever.
    let _release = Release;
    for dev in devices() {
        let a = Tensor::zeros([64], DType::F32, dev).unwrap();
        let b = Tensor::ones([64], DType::F32, dev).unwrap();
        let idx = Tensor::from_slice(&[0i64, 5, 9], [3], dev).unwrap();
        std::thread::scope(|scope| {
            for t in 0..4 {
                let (x, y, idx) = if t % 2 == 0 {
                    (a.clone(), b.clone(), idx.clone())
                } else {
                    (b.clone(), a.clone(), idx.clone())
                };
                scope.spawn(move || {
                    for k in 0..100 {
                        match k % 4 {
                            0 => x.copy_(&y).unwrap(),
                            1 => x.add_(&y.i(&s![..;1]).unwrap()).unwrap(),
                            2 => x
                                .index_put_(&s![@&idx], &y.i(&s![1..4]).unwrap(), false)
                                .unwrap(),
                            _ => y.sub_out(&y, &mut x.clone()).unwrap(),
                        }
                    }
                });
            }
        });
        assert!(f32s(&a).iter().chain(&f32s(&b)).all(|v| v.is_finite()));
        assert_eq!(a.version() + b.version(), 400, "{dev}");
    }
}

#[test]
fn an_in_place_scatter_with_a_bad_index_writes_nothing() {
    let _release = Release;
    for dev in devices() {
        let base = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3], dev).unwrap();
        let view = base.transpose(0, 1).unwrap();
        let src = Tensor::from_slice(&[9.0f32; 6], [3, 2], dev).unwrap();
        for bad in [2i64, -1, 7] {
            let idx = Tensor::from_slice(&[0i64, 1, 1, bad], [2, 2], dev).unwrap();
            let before = base.version();
            assert!(view.scatter_(1, &idx, &src).is_err(), "{dev} {bad}");
            assert!(view.scatter_add_(1, &idx, &src).is_err(), "{dev} {bad}");
            assert_eq!(f32s(&base), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "{dev} {bad}");
            assert_eq!(base.version(), before, "{dev} {bad}");
        }
        // Mismatched dtypes, devices and shapes are errors too, and write nothing.
        let idx = Tensor::from_slice(&[0i64, 1], [1, 2], dev).unwrap();
        let ints = Tensor::from_slice(&[1i32, 2], [1, 2], dev).unwrap();
        assert!(view.scatter_(1, &idx, &ints).is_err());
        let wide = Tensor::from_slice(&[0i64, 1, 0], [1, 3], dev).unwrap();
        assert!(view.scatter_(1, &wide, &src).is_err());
        assert!(view.scatter_(2, &idx, &src).is_err());
        if dev != Device::Cpu {
            let host = Tensor::from_slice(&[0i64, 1], [1, 2], Device::Cpu).unwrap();
            assert!(view.scatter_(1, &host, &src).is_err());
        }
        assert_eq!(f32s(&base), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "{dev}");
        // A good index writes through the view and bumps the version.
        let before = base.version();
        view.scatter_(1, &idx, &src).unwrap();
        assert_eq!(f32s(&base), [9.0, 2.0, 3.0, 9.0, 5.0, 6.0], "{dev}");
        assert!(base.version() > before, "{dev}");
    }
}

#[test]
fn an_in_place_scatter_reads_its_own_storage_before_the_write() {
    let _release = Release;
    for dev in devices() {
        // x.scatter_add_(0, idx, x): every addend is a value from before the write.
        let x = Tensor::from_slice(&[1i64, 2, 3, 4], [4], dev).unwrap();
        let idx = Tensor::from_slice(&[3i64, 3, 0, 1], [4], dev).unwrap();
        x.scatter_add_(0, &idx, &x).unwrap();
        assert_eq!(
            x.to_vec::<i64>().unwrap(),
            [1 + 3, 2 + 4, 3, 4 + 1 + 2],
            "{dev}"
        );
        // An index living in the target's own storage.
        let y = Tensor::from_slice(&[2i64, 0, 1], [3], dev).unwrap();
        let vals = Tensor::from_slice(&[7i64, 8, 9], [3], dev).unwrap();
        y.scatter_(0, &y, &vals).unwrap();
        assert_eq!(y.to_vec::<i64>().unwrap(), [8, 9, 7], "{dev}");
    }
}

#[test]
fn scatter_of_a_scalar_matches_scatter_of_a_full_tensor() {
    let _release = Release;
    let mut rng = SmallRng::seed_from_u64(23);
    for dev in devices() {
        for case in 0..60 {
            let rank = rng.random_range(1..=3);
            let shape: Vec<usize> = (0..rank).map(|_| rng.random_range(1..=5)).collect();
            let n: usize = shape.iter().product();
            let base = Tensor::from_slice(&ints(&mut rng, n), shape.as_slice(), dev).unwrap();
            let steps = random_steps(&mut rng, &shape);
            let view = apply(&base, &steps);
            let vshape = view.shape().to_vec();
            let d = rng.random_range(0..vshape.len());
            let mut ishape = vshape.clone();
            ishape[d] = rng.random_range(1..=vshape[d]);
            let ni: usize = ishape.iter().product();
            let idx: Vec<i64> = (0..ni)
                .map(|_| rng.random_range(0..vshape[d] as i64))
                .collect();
            let idx = Tensor::from_slice(&idx, ishape.as_slice(), dev).unwrap();
            let what = format!("case {case} on {dev}: {shape:?} {steps:?} dim {d}");
            let full = Tensor::full(ishape.as_slice(), -7.0f32, dev).unwrap();
            let want = view.scatter(d, &idx, &full).unwrap();
            assert_eq!(
                f32s(&view.scatter_scalar(d, &idx, -7).unwrap()),
                f32s(&want),
                "{what}"
            );
            let deep = base.deep_clone().unwrap();
            view.scatter_scalar_(d, &idx, -7.0).unwrap();
            assert_eq!(f32s(&view), f32s(&want), "{what}");
            // Elements outside the view are untouched.
            let mut outside = f32s(&deep);
            for (k, v) in view.layout().indices().zip(f32s(&want)) {
                outside[k] = v;
            }
            assert_eq!(f32s(&base), outside, "{what}");
        }
        // A value the dtype cannot hold, and a bad index, write nothing.
        let x = Tensor::zeros([2, 3], DType::I32, dev).unwrap();
        let idx = Tensor::from_slice(&[0i64, 5], [1, 2], dev).unwrap();
        assert!(
            x.scatter_scalar_(1, &idx.narrow(1, 0, 1).unwrap(), 2.5e10)
                .is_err()
        );
        assert!(x.scatter_scalar_(1, &idx, 1).is_err());
        assert_eq!(x.to_vec::<i32>().unwrap(), [0; 6], "{dev}");
    }
}
