//! `cat` and `stack` on CPU and (when present) CUDA, against values built by hand; and what the
//! generated cases of the shape ops (`gen_shape_cases.py`) do not see: which results are views
//! of the input (writes through them reach it), which are new storages, strides, and inputs of
//! more dimensions than the copy kernel takes.

use genesis::{DType, Device, Error, Tensor};

mod common;
use common::{Release, devices};

fn seq(n: usize, from: i64, shape: &[usize], dev: Device) -> Tensor {
    let v: Vec<i64> = (0..n as i64).map(|i| from + i).collect();
    Tensor::from_slice(&v, shape, dev).unwrap()
}

#[test]
fn cat_along_each_dim() {
    let _release = Release;
    for dev in devices() {
        let a = seq(6, 0, &[2, 3], dev);
        let b = seq(3, 100, &[1, 3], dev);
        let c = Tensor::cat(&[&a, &b], 0).unwrap();
        assert_eq!(c.shape(), &[3, 3]);
        assert_eq!(
            c.to_vec::<i64>().unwrap(),
            vec![0, 1, 2, 3, 4, 5, 100, 101, 102]
        );
        let d = seq(4, 50, &[2, 2], dev);
        let c = Tensor::cat(&[&a, &d], -1).unwrap();
        assert_eq!(c.shape(), &[2, 5]);
        assert_eq!(
            c.to_vec::<i64>().unwrap(),
            vec![0, 1, 2, 50, 51, 3, 4, 5, 52, 53]
        );
        // Strided inputs and empty pieces.
        let e = Tensor::zeros([2, 0], DType::I64, dev).unwrap();
        let t = seq(6, 10, &[3, 2], dev).t().unwrap();
        let c = Tensor::cat(&[&e, &t, &e], 1).unwrap();
        assert_eq!(c.to_vec::<i64>().unwrap(), vec![10, 12, 14, 11, 13, 15]);
        let only_empty = Tensor::cat(&[&e, &e], 1).unwrap();
        assert_eq!(only_empty.shape(), &[2, 0]);
        // f16 and a 3-D middle dimension.
        let h = Tensor::ones([2, 1, 3], DType::F16, dev).unwrap();
        let z = Tensor::zeros([2, 2, 3], DType::F16, dev).unwrap();
        let c = Tensor::cat(&[&h, &z], 1).unwrap();
        assert_eq!(c.shape(), &[2, 3, 3]);
        let v = c.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(v.iter().filter(|&&x| x == 1.0).count(), 6);
        assert_eq!(&v[..3], &[1.0, 1.0, 1.0]);
        assert_eq!(&v[9..12], &[1.0, 1.0, 1.0]);
    }
}

#[test]
fn stack_inserts_a_dimension() {
    let _release = Release;
    for dev in devices() {
        let a = seq(3, 0, &[3], dev);
        let b = seq(3, 10, &[3], dev);
        let s0 = Tensor::stack(&[&a, &b], 0).unwrap();
        assert_eq!(s0.shape(), &[2, 3]);
        assert_eq!(s0.to_vec::<i64>().unwrap(), vec![0, 1, 2, 10, 11, 12]);
        let s1 = Tensor::stack(&[&a, &b], -1).unwrap();
        assert_eq!(s1.shape(), &[3, 2]);
        assert_eq!(s1.to_vec::<i64>().unwrap(), vec![0, 10, 1, 11, 2, 12]);
        assert_eq!(s1.device(), dev);
    }
}

#[test]
fn bad_inputs_are_typed_errors() {
    let a = Tensor::zeros([2, 3], DType::F32, Device::Cpu).unwrap();
    let b = Tensor::zeros([2, 4], DType::F32, Device::Cpu).unwrap();
    let e = Tensor::cat(&[&a, &b], 0).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "cat", .. }), "{e}");
    assert!(Tensor::cat(&[&a, &b], 1).is_ok());
    let i = Tensor::zeros([2, 3], DType::I32, Device::Cpu).unwrap();
    // Dtypes promote, as in `torch.cat`.
    assert_eq!(Tensor::cat(&[&a, &i], 0).unwrap().dtype(), DType::F32);
    assert!(Tensor::cat(&[], 0).is_err());
    assert!(Tensor::cat(&[&a], 2).is_err());
    let r1 = Tensor::zeros([3], DType::F32, Device::Cpu).unwrap();
    assert!(Tensor::cat(&[&a, &r1], 0).is_err());
    let scalar = Tensor::zeros((), DType::F32, Device::Cpu).unwrap();
    assert!(Tensor::cat(&[&scalar], 0).is_err());
    assert!(matches!(
        Tensor::stack(&[&a, &b], 0).unwrap_err(),
        Error::ShapeMismatch { op: "stack", .. }
    ));
    assert!(Tensor::stack(&[&a, &a], 3).is_err());
    assert_eq!(Tensor::stack(&[&scalar, &scalar], 0).unwrap().shape(), &[2]);
}

#[test]
fn splits_flattens_and_diagonals_are_views() {
    let _release = Release;
    for dev in devices() {
        let x = seq(24, 0, &[4, 6], dev);
        // split / chunk: narrow views, writes reach `x`.
        let parts = x.split(4, 1).unwrap();
        assert_eq!(parts.len(), 2);
        assert!(parts.iter().all(|p| p.shares_storage(&x)));
        parts[1].fill_(-1).unwrap();
        assert_eq!(
            x.i(&genesis::s![0]).unwrap().to_vec::<i64>().unwrap(),
            [0, 1, 2, 3, -1, -1]
        );
        let chunks = x.chunk(3, 0).unwrap();
        assert_eq!(chunks.len(), 2); // ceil(4 / 3) = 2 rows each
        assert!(chunks[1].shares_storage(&x));
        let pieces = x.split_sizes(&[1, 3], 0).unwrap();
        assert_eq!(pieces[1].strides(), &[6, 1]);
        // flatten / unflatten of a contiguous tensor: views.
        let f = x.flatten(0, 1).unwrap();
        assert!(f.shares_storage(&x));
        let u = f.unflatten(0, &[2, -1, 3]).unwrap();
        assert_eq!(u.shape(), &[2, 4, 3]);
        assert!(u.shares_storage(&x));
        // A transpose flattened is a copy (as PyTorch's reshape); ravel too.
        let t = x.t().unwrap();
        assert!(!t.flatten(0, 1).unwrap().shares_storage(&x));
        assert!(!t.ravel().unwrap().shares_storage(&x));
        assert_eq!(t.flatten(1, 1).unwrap().strides(), &[1, 6]); // start == end: itself
        // diagonal: strides added, the offset moved along the right dimension.
        let y = seq(24, 0, &[2, 3, 4], dev);
        let d = y.diagonal(1, 1, 2).unwrap();
        assert_eq!(d.shape(), &[2, 3]);
        assert_eq!(d.strides(), &[12, 5]);
        assert_eq!(d.to_vec::<i64>().unwrap(), [1, 6, 11, 13, 18, 23]);
        // Dims 2 and 0 below the diagonal: element [k, i] is y[i][k][i + 1].
        let d = y.diagonal(-1, 2, 0).unwrap();
        assert_eq!(d.shape(), &[3, 2]);
        assert_eq!(d.strides(), &[4, 13]);
        assert_eq!(d.to_vec::<i64>().unwrap(), [1, 14, 5, 18, 9, 22]);
        let e = y.diagonal(7, 0, 1).unwrap();
        assert_eq!(e.shape(), &[4, 0]);
        y.diagonal(0, -2, -1).unwrap().fill_(100).unwrap();
        assert_eq!(y.to_vec::<i64>().unwrap()[..6], [100, 1, 2, 3, 4, 100]);
    }
}

#[test]
fn copies_are_new_storages() {
    let _release = Release;
    for dev in devices() {
        let x = seq(6, 1, &[2, 3], dev);
        for (name, y) in [
            ("repeat", x.repeat([1, 1]).unwrap()),
            ("tile", x.tile([1]).unwrap()),
            ("flip", x.flip(()).unwrap()),
            ("roll", x.roll(&[3], &[1]).unwrap()),
            ("roll_flat", x.roll(&[0], &[]).unwrap()),
            ("tril", x.tril(5).unwrap()),
        ] {
            assert!(!y.shares_storage(&x), "{name}");
            assert!(y.is_contiguous(), "{name}");
            assert_eq!(y.to_vec::<i64>().unwrap(), [1, 2, 3, 4, 5, 6], "{name}");
        }
        // repeat of a strided input: rows of the transpose.
        let r = x.t().unwrap().repeat([2, 1, 2]).unwrap();
        assert_eq!(r.shape(), &[2, 3, 4]);
        assert_eq!(r.to_vec::<i64>().unwrap()[..8], [1, 4, 1, 4, 2, 5, 2, 5]);
    }
}

#[test]
fn many_dimensions_past_the_copy_kernel() {
    let _release = Release;
    for dev in devices() {
        // 10 dimensions of 2, reversed: no two merge, more than the copy kernel's 8.
        let x = seq(1024, 0, &[2; 10], dev);
        let perm: Vec<usize> = (0..10).rev().collect();
        let p = x.permute(perm.as_slice()).unwrap();
        let flat = p.ravel().unwrap().to_vec::<i64>().unwrap();
        // Element (i0..i9) of `p` is x[i9..i0]: its value reverses the bits of its position.
        let rev = |i: i64| (0..10).fold(0, |a, b| a | (((i >> b) & 1) << (9 - b)));
        assert!(flat.iter().enumerate().all(|(i, &v)| v == rev(i as i64)));
        let f = p.flip([0, 3, 9]).unwrap();
        assert_eq!(f.shape(), &[2; 10]);
        let r = p.repeat([1, 2, 1, 1, 1, 1, 1, 1, 1, 2]).unwrap();
        assert_eq!(r.numel(), 4096);
        let rolled = p.roll(&[1, 1, 1, 1], &[0, 2, 4, 9]).unwrap();
        assert_eq!(rolled.sum().unwrap().item::<i64>().unwrap(), 1023 * 512);
        let nz = p.nonzero().unwrap();
        assert_eq!(nz.shape(), &[1023, 10]);
        // Every position but the first holds a nonzero value; row `k` is position `k + 1`,
        // whose coordinates over [2; 10] are its bits, the most significant first (two unravel
        // passes: 7 dimensions, then the merged last 3).
        let coords = nz.to_vec::<i64>().unwrap();
        for (k, row) in coords.chunks(10).enumerate() {
            let pos = k as i64 + 1;
            let want: Vec<i64> = (0..10).map(|d| (pos >> (9 - d)) & 1).collect();
            assert_eq!(row, want.as_slice(), "row {k} on {dev}");
        }
        let cols = p.nonzero_tuple().unwrap();
        assert_eq!(cols.len(), 10);
        assert_eq!(cols[9].to_vec::<i64>().unwrap()[..3], [1, 0, 1]);
        let (u, inv, _) = p.unique(true, true, false).unwrap();
        assert_eq!(u.numel(), 1024);
        assert_eq!(inv.unwrap().ravel().unwrap().to_vec::<i64>().unwrap(), flat);
    }
}

#[test]
fn selection_on_every_device() {
    let _release = Release;
    for dev in devices() {
        // unique: NaNs are each their own value, -0.0 and 0.0 one.
        let x = Tensor::from_slice(
            &[f32::NAN, 0.0, -0.0, 2.0, f32::NAN, 2.0, f32::NEG_INFINITY],
            [7],
            dev,
        )
        .unwrap();
        let (v, inv, counts) = x.unique(false, true, true).unwrap();
        let v = v.to_vec::<f32>().unwrap();
        assert_eq!(v.len(), 5);
        assert_eq!(v[..3], [f32::NEG_INFINITY, 0.0, 2.0]);
        assert!(v[3].is_nan() && v[4].is_nan());
        assert_eq!(inv.unwrap().to_vec::<i64>().unwrap(), [3, 1, 1, 2, 4, 2, 0]);
        assert_eq!(counts.unwrap().to_vec::<i64>().unwrap(), [1, 2, 2, 1, 1]);
        // one_hot checks its classes on every device.
        let labels = Tensor::from_slice(&[1i64, 0, 3], [3], dev).unwrap();
        let negative = Tensor::from_slice(&[1i64, -2, 7], [3], dev).unwrap();
        for (x, classes, says) in [
            (&labels, Some(3), "smaller than num_classes"),
            (&labels, Some(0), "smaller than num_classes"),
            (&negative, Some(3), "non-negative"),
            (&negative, Some(9), "non-negative"),
            (&negative, None, "non-negative"),
        ] {
            match x.one_hot(classes).unwrap_err() {
                Error::InvalidArgument {
                    op: "one_hot",
                    reason,
                } => assert!(reason.contains(says), "{classes:?}: {reason}"),
                e => panic!("{classes:?}: {e}"),
            }
        }
        let h = labels.one_hot(Some(6)).unwrap();
        assert_eq!(
            h.to_vec::<i64>().unwrap(),
            [0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0]
        );
        // Many rows (several per warp of the kernel's grid), a strided view of the classes.
        let values: Vec<i64> = (0..10_000i64).map(|i| i * 7919 % 37).collect();
        let many = Tensor::from_slice(&values, [5000, 2], dev).unwrap();
        let column = many.i(&genesis::s![.., 1]).unwrap();
        let h = column.one_hot(Some(37)).unwrap();
        assert_eq!(h.shape(), &[5000, 37]);
        let rows = h.to_vec::<i64>().unwrap();
        for (r, row) in rows.chunks(37).enumerate() {
            let want = values[2 * r + 1] as usize;
            assert!(
                row.iter()
                    .enumerate()
                    .all(|(c, &v)| v == i64::from(c == want)),
                "row {r}"
            );
        }
        let h = labels.one_hot(None).unwrap();
        assert_eq!(h.device(), dev);
        assert_eq!(
            h.sum_dim([0], false).unwrap().to_vec::<i64>().unwrap(),
            [1, 1, 0, 1]
        );
        // nonzero of a bool mask and of a 0-d tensor.
        let m = Tensor::from_bools(&[true, false, true], [3], dev).unwrap();
        assert_eq!(m.nonzero().unwrap().to_vec::<i64>().unwrap(), [0, 2]);
        let s = Tensor::full((), 3.0f32, dev).unwrap();
        assert_eq!(s.nonzero().unwrap().shape(), &[1, 0]);
        assert_eq!(s.nonzero_tuple().unwrap()[0].to_vec::<i64>().unwrap(), [0]);
    }
}

/// `tril` / `triu` in one pass: large batched matrices of every element size (the kernel's
/// 16-byte path when rows allow it, the element path otherwise, a strided input), each element
/// against its index rule, on every device.
#[test]
fn triangles_of_large_batches() {
    let _release = Release;
    for dev in devices() {
        for (shape, k) in [
            (vec![3usize, 67, 128], 0i64),
            (vec![2, 64, 64], -5),
            (vec![5, 33], 7),
            (vec![4, 40, 9], 100),
            (vec![1, 9, 1000], -1000),
        ] {
            let n: usize = shape.iter().product();
            let (r, c) = (shape[shape.len() - 2], shape[shape.len() - 1]);
            let base = seq(n, 1, &shape, dev);
            for dtype in [DType::I64, DType::F32, DType::BF16, DType::U8, DType::Bool] {
                let x = base.to_dtype(dtype).unwrap();
                for lower in [true, false] {
                    let y = if lower { x.tril(k) } else { x.triu(k) }.unwrap();
                    assert_eq!(y.dtype(), dtype);
                    let got = y.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
                    let want = x.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
                    for (q, (g, w)) in got.iter().zip(&want).enumerate() {
                        let d = (q % c) as i64 - ((q / c) % r) as i64;
                        let keep = if lower { d <= k } else { d >= k };
                        let w = if keep { *w } else { 0.0 };
                        assert_eq!(
                            *g, w,
                            "{dtype} {shape:?} k={k} lower={lower} at {q} on {dev}"
                        );
                    }
                }
            }
            // A transposed (strided) input: the same as its contiguous copy.
            let t = base.transpose(-1, -2).unwrap();
            let tc = t.contiguous().unwrap();
            assert_eq!(
                t.tril(k).unwrap().to_vec::<i64>().unwrap(),
                tc.tril(k).unwrap().to_vec::<i64>().unwrap()
            );
        }
    }
}

/// Long inputs (the radix sort's rows): `sort` and `unique` on each device agree with the
/// CPU's exactly: floats with NaN, both zeros and repeats; integers of a small range (the
/// high bytes never vary) and of the whole range.
#[test]
fn long_sorts_and_unique_agree_with_the_cpu() {
    let _release = Release;
    let g = genesis::Generator::new(7);
    let n = 600_001;
    let mut floats = g
        .randint(-50, 50, [n], DType::I64, Device::Cpu)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .div(4.0)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    for (i, v) in floats.iter_mut().enumerate().step_by(97) {
        *v = [f32::NAN, -0.0, 0.0, f32::INFINITY][i % 4];
    }
    let cases = [
        Tensor::from_slice(&floats, [n], Device::Cpu).unwrap(),
        g.randint(0, 5000, [n], DType::I64, Device::Cpu).unwrap(),
        g.randint(-(1 << 62), 1 << 62, [n], DType::I64, Device::Cpu)
            .unwrap(),
        g.randint(-(1 << 30), 1 << 30, [3, n / 3], DType::I32, Device::Cpu)
            .unwrap(),
    ];
    for dev in devices().into_iter().filter(|d| *d != Device::Cpu) {
        for x in &cases {
            let y = x.to(dev).unwrap();
            for descending in [false, true] {
                let (v, i) = x.sort(-1, descending).unwrap();
                let (gv, gi) = y.sort(-1, descending).unwrap();
                assert_eq!(gi.to_vec::<i64>().unwrap(), i.to_vec::<i64>().unwrap());
                assert_eq!(bits(&gv), bits(&v));
            }
            let (v, inv, counts) = x.unique(true, true, true).unwrap();
            let (gv, ginv, gcounts) = y.unique(true, true, true).unwrap();
            assert_eq!(bits(&gv), bits(&v));
            assert_eq!(
                ginv.unwrap().to_vec::<i64>().unwrap(),
                inv.unwrap().to_vec::<i64>().unwrap()
            );
            assert_eq!(
                gcounts.unwrap().to_vec::<i64>().unwrap(),
                counts.unwrap().to_vec::<i64>().unwrap()
            );
        }
    }
}

/// The elements' bits, on the host (NaNs compare by payload).
fn bits(t: &Tensor) -> Vec<u64> {
    match t.dtype() {
        DType::F32 => t
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| u64::from(v.to_bits()))
            .collect(),
        DType::I32 => t
            .to_vec::<i32>()
            .unwrap()
            .iter()
            .map(|&v| v as u64)
            .collect(),
        _ => t
            .to_vec::<i64>()
            .unwrap()
            .iter()
            .map(|&v| v as u64)
            .collect(),
    }
}

/// `unique` (sorted, inverse, counts) and `unique_consecutive` of a 1-D f32 list, computed
/// directly: a stable sort with NaN last, runs of `==` neighbours (each NaN its own run).
fn unique_reference(x: &[f32]) -> [(Vec<u32>, Vec<i64>, Vec<i64>); 2] {
    let runs = |order: &[usize]| {
        let (mut values, mut inverse, mut counts) = (Vec::new(), vec![0i64; x.len()], Vec::new());
        for (k, &i) in order.iter().enumerate() {
            if k == 0 || x[i] != x[order[k - 1]] {
                values.push(x[i].to_bits());
                counts.push(0);
            }
            inverse[i] = values.len() as i64 - 1;
            *counts.last_mut().unwrap() += 1;
        }
        (values, inverse, counts)
    };
    let mut sorted: Vec<usize> = (0..x.len()).collect();
    sorted.sort_by(|&a, &b| match (x[a].is_nan(), x[b].is_nan()) {
        (false, false) => x[a].partial_cmp(&x[b]).unwrap(),
        (na, nb) => na.cmp(&nb),
    });
    let identity: Vec<usize> = (0..x.len()).collect();
    [runs(&sorted), runs(&identity)]
}

#[test]
fn unique_and_unique_consecutive_match_a_direct_computation_on_generated_lists() {
    let _release = Release;
    let g = genesis::Generator::new(11);
    for trial in 0..60usize {
        let n = 1 + (trial * 37) % 700;
        let distinct = 1 + (trial * 13) % 40;
        let mut x: Vec<f32> = g
            .randint(0, distinct as i64, [n], DType::I64, Device::Cpu)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .sub(distinct as f64 / 2.0)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        if trial % 3 == 0 {
            // Runs of one value, NaNs and both zeros.
            for (i, v) in x.iter_mut().enumerate().step_by(7) {
                *v = [f32::NAN, -0.0, 0.0][i % 3];
            }
            x.sort_by(|a, b| a.total_cmp(b).reverse());
            x.rotate_left(n / 3);
        }
        let [sorted, consecutive] = unique_reference(&x);
        for dev in devices() {
            let t = Tensor::from_slice(&x, [n], dev).unwrap();
            let got = |r: (Tensor, Option<Tensor>, Option<Tensor>)| {
                let v = r.0.to_vec::<f32>().unwrap();
                (
                    v.iter().map(|v| v.to_bits()).collect::<Vec<u32>>(),
                    r.1.unwrap().to_vec::<i64>().unwrap(),
                    r.2.unwrap().to_vec::<i64>().unwrap(),
                )
            };
            let u = got(t.unique(true, true, true).unwrap());
            assert_eq!(u.1, sorted.1, "unique inverse, trial {trial} on {dev}");
            assert_eq!(u.2, sorted.2, "unique counts, trial {trial} on {dev}");
            // Values compare as numbers: a run of zeros keeps either sign's first.
            let same = |a: &[u32], b: &[u32]| {
                a.len() == b.len()
                    && a.iter().zip(b).all(|(&p, &q)| {
                        let (p, q) = (f32::from_bits(p), f32::from_bits(q));
                        p == q || (p.is_nan() && q.is_nan())
                    })
            };
            assert!(
                same(&u.0, &sorted.0),
                "unique values, trial {trial} on {dev}"
            );
            let c = got(t.unique_consecutive(true, true).unwrap());
            assert_eq!(
                c.1, consecutive.1,
                "consecutive inverse, trial {trial} on {dev}"
            );
            assert_eq!(
                c.2, consecutive.2,
                "consecutive counts, trial {trial} on {dev}"
            );
            assert!(
                same(&c.0, &consecutive.0),
                "consecutive values, trial {trial} on {dev}"
            );
        }
    }
}

/// `unfold` against windows cut by hand on generated shapes, dimensions, sizes and steps:
/// the view's shape and values (also of a non-contiguous input) and the gradient, which
/// counts how many windows hold each element; the refusals PyTorch makes.
#[test]
fn unfold_takes_every_window() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(12);
    for case in 0..200 {
        let rank = rng.random_range(1..4);
        let shape: Vec<usize> = (0..rank).map(|_| rng.random_range(1..6)).collect();
        let d = rng.random_range(0..rank);
        let size = rng.random_range(0..=shape[d]);
        let step = rng.random_range(1..4);
        let numel: usize = shape.iter().product();
        let vals: Vec<f64> = (0..numel).map(|i| i as f64).collect();
        for device in devices() {
            let base = Tensor::from_slice(&vals, shape.as_slice(), device).unwrap();
            // A transposed copy read back through a transpose: a non-contiguous input.
            let x = if rank > 1 && case % 2 == 0 {
                base.transpose(0, rank - 1)
                    .unwrap()
                    .contiguous()
                    .unwrap()
                    .transpose(0, rank - 1)
                    .unwrap()
            } else {
                base.clone()
            }
            .requires_grad_(true)
            .unwrap();
            let u = x.unfold(d as isize, size, step).unwrap();
            let count = (shape[d] - size) / step + 1;
            let mut want_shape = shape.clone();
            want_shape[d] = count;
            want_shape.push(size);
            assert_eq!(u.shape(), want_shape.as_slice(), "case {case}");
            // Window w of dim d holds elements w·step .. w·step + size of that dimension.
            let mut want = Vec::new();
            let mut hits = vec![0.0; numel];
            let outer: usize = shape[..d].iter().product();
            let inner: usize = shape[d + 1..].iter().product();
            for o in 0..outer {
                for w in 0..count {
                    for i in 0..inner {
                        for k in 0..size {
                            let at = (o * shape[d] + w * step + k) * inner + i;
                            want.push(vals[at]);
                            hits[at] += 1.0;
                        }
                    }
                }
            }
            assert_eq!(u.to_vec::<f64>().unwrap(), want, "case {case}");
            u.sum().unwrap().backward().unwrap();
            assert_eq!(
                x.grad().unwrap().to_vec::<f64>().unwrap(),
                hits,
                "case {case} grad"
            );
        }
    }
    let x = Tensor::zeros([3usize, 4], DType::F32, Device::Cpu).unwrap();
    assert!(x.unfold(1, 5, 1).is_err());
    assert!(x.unfold(1, 2, 0).is_err());
    assert!(x.unfold(2, 1, 1).is_err());
    assert_eq!(x.unfold(-1, 4, usize::MAX).unwrap().shape(), [3, 1, 4]);
    let s = Tensor::full([0usize; 0], 2.0f32, Device::Cpu).unwrap();
    assert_eq!(s.unfold(0, 1, 1).unwrap().to_vec::<f32>().unwrap(), [2.0]);
    assert!(s.unfold(0, 2, 1).is_err());
}
