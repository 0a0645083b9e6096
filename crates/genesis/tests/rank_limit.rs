//! No tensor has more than `MAX_RANK` dimensions. Every facade path that makes a
//! shape (creation, views, reshapes, broadcasting, indexing with new axes) refuses more with
//! `LayoutError::RankTooLarge`, for generated shapes of every rank around the limit, and a
//! tensor of the maximum rank prints without recursing per dimension. Below the limit, ops
//! along a dimension take more dimensions than their kernels' iteration.

use genesis::{
    DType, Device, Error, IndexItem, IndexTensor, LayoutError, MAX_RANK, Tensor, broadcast_shape,
};

fn is_rank_error(e: &Error, rank: usize) -> bool {
    let inner = match e {
        Error::Storage(genesis_storage::Error::Layout(l)) => l,
        Error::Index(genesis_index::Error::Storage(genesis_storage::Error::Layout(l))) => l,
        _ => return false,
    };
    *inner
        == LayoutError::RankTooLarge {
            rank,
            max: MAX_RANK,
        }
}

/// `r` must succeed for a `rank` within the limit, and otherwise be `RankTooLarge` for
/// `rank` (or for `MAX_RANK + 1`, where dimensions are added one at a time).
fn check<T: std::fmt::Debug>(what: &str, rank: usize, r: Result<T, Error>) {
    if rank <= MAX_RANK {
        if let Err(e) = r {
            panic!("{what}, rank {rank}: {e}");
        }
    } else {
        match r {
            Err(e) if is_rank_error(&e, rank) || is_rank_error(&e, MAX_RANK + 1) => {}
            other => panic!("{what}, rank {rank}: {other:?}"),
        }
    }
}

fn ranks() -> impl Iterator<Item = usize> {
    (0..=MAX_RANK + 4).chain([100, 1000, 100_000])
}

/// Shapes of `rank` dimensions holding one or two elements (and, for the largest ranks, a
/// size-0 dimension: no element at all).
fn shapes(rank: usize) -> Vec<Vec<usize>> {
    let mut out = vec![vec![1; rank]];
    if rank > 0 {
        let mut two = vec![1; rank];
        two[rank - 1] = 2;
        out.push(two);
        let mut empty = vec![1; rank];
        empty[0] = 0;
        out.push(empty);
    }
    out
}

#[test]
fn creation_refuses_more_dimensions() {
    let dev = Device::Cpu;
    for rank in ranks() {
        for shape in shapes(rank) {
            let n: usize = shape.iter().product();
            let s = shape.as_slice();
            check("zeros", rank, Tensor::zeros(s, DType::F32, dev));
            check("ones", rank, Tensor::ones(s, DType::I64, dev));
            check("empty", rank, Tensor::empty(s, DType::U8, dev));
            check("full", rank, Tensor::full(s, 2.5f64, dev));
            check(
                "from_slice",
                rank,
                Tensor::from_slice(&vec![1i32; n], s, dev),
            );
            check(
                "from_bools",
                rank,
                Tensor::from_bools(&vec![true; n], s, dev),
            );
            check("randn", rank, Tensor::randn(s, DType::F32, dev));
            check("broadcast_shape", rank, broadcast_shape("test", s, &[1]));
        }
    }
}

#[test]
fn views_and_reshapes_refuse_more_dimensions() {
    let one = Tensor::from_slice(&[3.0f32], [1], Device::Cpu).unwrap();
    let two = Tensor::from_slice(&[3.0f32, 4.0], [2], Device::Cpu).unwrap();
    for rank in ranks() {
        let ones = vec![1usize; rank];
        let minus: Vec<isize> = vec![1; rank];
        check("view", rank, one.view(ones.as_slice()));
        check("reshape", rank, one.reshape(ones.as_slice()));
        if rank > 0 {
            let mut m = minus.clone();
            m[rank - 1] = -1;
            check("reshape -1", rank, two.reshape(m.as_slice()));
        }
        if rank > 0 {
            check("expand", rank, one.expand(ones.as_slice()));
            let mut wide = ones.clone();
            wide[0] = 2;
            check("expand wide", rank, one.expand(wide.as_slice()));
            check("view two", rank, two.view(wide.as_slice()));
        }
    }
}

#[test]
fn unsqueeze_and_stack_stop_at_the_limit() {
    let mut t = Tensor::from_slice(&[1.0f32, 2.0], [2], Device::Cpu).unwrap();
    for r in 1..MAX_RANK {
        t = t.unsqueeze(if r % 2 == 0 { 0 } else { -1 }).unwrap();
    }
    assert_eq!(t.dim(), MAX_RANK);
    for dim in [0isize, -1, MAX_RANK as isize] {
        let e = t.unsqueeze(dim).unwrap_err();
        assert!(is_rank_error(&e, MAX_RANK + 1), "{e}");
    }
    let e = Tensor::stack(&[&t, &t], 0).unwrap_err();
    assert!(
        matches!(e, Error::Storage(_) | Error::InvalidArgument { .. }),
        "{e}"
    );
    // Operations that keep the rank work, and so does printing.
    assert_eq!(t.add(&t).unwrap().dim(), MAX_RANK);
    assert_eq!(t.transpose(0, -1).unwrap().dim(), MAX_RANK);
    let s = t.to_string();
    assert!(
        s.starts_with(&format!("tensor({}", "[".repeat(MAX_RANK))),
        "{s}"
    );
    assert_eq!(s.matches('[').count(), s.matches(']').count(), "{s}");
    assert_eq!(
        (s.matches("1.").count(), s.matches("2.").count()),
        (1, 1),
        "{s}"
    );
}

#[test]
fn indexing_with_new_axes_stops_at_the_limit() {
    let x = Tensor::from_slice(&[1i64, 2, 3], [3], Device::Cpu).unwrap();
    for k in [
        0,
        1,
        MAX_RANK - 2,
        MAX_RANK - 1,
        MAX_RANK,
        MAX_RANK + 1,
        1000,
    ] {
        let items = vec![IndexItem::NewAxis; k];
        check("new axes", k + 1, x.i(&items));
    }
    // Advanced indices whose broadcast shape and the remaining dimensions together exceed the
    // limit.
    let deep = Tensor::zeros(vec![1usize; 40].as_slice(), DType::F32, Device::Cpu).unwrap();
    let idx = IndexTensor::i64(&[1; 40], vec![0]);
    let r = deep.i(&[IndexItem::Tensor(idx)]);
    check("advanced", 79, r);
    // Within the limit it works.
    let idx = IndexTensor::i64(&[1; 25], vec![0]);
    assert_eq!(deep.i(&[IndexItem::Tensor(idx)]).unwrap().dim(), 64);
    // NumPy's rule counts the result: the dimensions that advanced indices replace do not
    // count, even while new axes stand beside them (here 65 dimensions before the indices
    // apply, 64 after).
    let x = Tensor::from_slice(&[1i64, 2, 3, 4, 5, 6], [3, 2], Device::Cpu).unwrap();
    for axes in [62, 63, 64] {
        let mut items = vec![IndexItem::NewAxis; axes];
        items.push(IndexItem::Tensor(IndexTensor::i64(&[1], vec![2])));
        items.push(IndexItem::Int(1));
        let r = x.i(&items);
        check(
            "new axes and advanced",
            axes + 1,
            r.clone().map(|t| t.dim()),
        );
        if let Ok(t) = r {
            assert_eq!(t.dim(), axes + 1);
            assert_eq!(t.to_vec::<i64>().unwrap(), [6]);
        }
    }
}

#[test]
fn deep_tensors_print_on_a_small_stack() {
    for rank in [MAX_RANK - 1, MAX_RANK] {
        let mut shape = vec![1usize; rank];
        shape[0] = 2;
        shape[rank - 1] = 3;
        let t = Tensor::from_slice(&[1i32, 2, 3, 4, 5, 6], shape.as_slice(), Device::Cpu).unwrap();
        let s = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || t.to_string())
            .unwrap()
            .join()
            .unwrap();
        let open = "[".repeat(rank - 1);
        let close = "]".repeat(rank - 1);
        let sep = format!(",{}{}", "\n".repeat(rank - 1), " ".repeat(8));
        // The last line is longer than 80 characters: the suffix goes on a line of its own.
        let want = format!(
            "tensor([{}[1, 2, 3]{}{sep}{}[4, 5, 6]{}],\n       dtype=torch.int32)",
            &open[1..],
            &close[1..],
            &open[1..],
            &close[1..],
        );
        assert_eq!(s, want, "rank {rank}");
    }
}

#[cfg(feature = "ndarray")]
#[test]
fn ndarray_arrays_of_more_dimensions_are_refused() {
    use ndarray::{ArrayD, IxDyn};
    for rank in [0, 1, MAX_RANK - 1, MAX_RANK, MAX_RANK + 1, 200] {
        let mut shape = vec![1usize; rank];
        if rank > 0 {
            shape[rank - 1] = 2;
        }
        let a = ArrayD::<f32>::from_elem(IxDyn(&shape), 1.5);
        let r = Tensor::from_ndarray(&a, Device::Cpu);
        check("from_ndarray", rank, r.clone().map(|t| t.dim()));
        if let Ok(t) = r {
            let back = t.to_ndarray::<f32>().unwrap();
            assert_eq!(back.shape(), shape.as_slice());
        }
    }
}

/// The row-major position of `ix` in `shape`.
fn offset(ix: &[usize], shape: &[usize]) -> usize {
    ix.iter().zip(shape).fold(0, |o, (&i, &n)| o * n + i)
}

/// The index of row-major position `i` in `shape`.
fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut ix = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        ix[d] = i % shape[d];
        i /= shape[d];
    }
    ix
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

/// Ops along one dimension (`gather`, `index_select`, `take_along_dim`, `scatter_add`, its
/// in-place form, `index_add`) take tensors of more dimensions than the kernels' iteration
/// (eight), contiguous or permuted views, as PyTorch's do: against element-by-element
/// references over generated shapes, dimensions and indices, on the CPU and on CUDA.
#[test]
fn ops_along_a_dimension_take_tensors_of_many_dimensions() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: usize| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) as usize % n
    };
    let mut devices = vec![Device::Cpu];
    if genesis::cuda::is_available() {
        devices.push(Device::Cuda(0));
    }
    for case in 0..64 {
        let dev = devices[case % devices.len()];
        let on = |t: Tensor| t.to(dev).unwrap();
        let rank = 9 + case / 2 % 4;
        let base_shape: Vec<usize> = (0..rank).map(|_| 1 + next(3)).collect();
        let n: usize = base_shape.iter().product();
        let data: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let base = on(Tensor::from_slice(&data, base_shape.clone(), Device::Cpu).unwrap());
        // Odd cases: a permuted view, whose dimensions do not merge.
        let mut perm: Vec<usize> = (0..rank).collect();
        if case / 2 % 2 == 1 {
            for i in (1..rank).rev() {
                perm.swap(i, next(i + 1));
            }
        }
        let x = base.permute(&perm[..]).unwrap();
        let xs = x.shape().to_vec();
        let xv = values(&x.contiguous().unwrap());
        let dim = next(rank);
        let ctx = format!("case {case} on {dev:?}: shape {xs:?}, perm {perm:?}, dim {dim}");

        // gather / take_along_dim: an index no larger than x but along dim.
        let ishape: Vec<usize> = xs
            .iter()
            .enumerate()
            .map(|(d, &s)| if d == dim { 1 + next(3) } else { 1 + next(s) })
            .collect();
        let inum: usize = ishape.iter().product();
        let iv: Vec<i64> = (0..inum).map(|_| next(xs[dim]) as i64).collect();
        let idx = on(Tensor::from_slice(&iv, ishape.clone(), Device::Cpu).unwrap());
        let want: Vec<f64> = (0..inum)
            .map(|p| {
                let mut ix = unravel(p, &ishape);
                ix[dim] = iv[p] as usize;
                xv[offset(&ix, &xs)]
            })
            .collect();
        assert_eq!(values(&x.gather(dim, &idx).unwrap()), want, "{ctx}: gather");
        if ishape
            .iter()
            .enumerate()
            .all(|(d, &s)| d == dim || s == xs[d])
        {
            let t = x.take_along_dim(&idx, Some(dim as isize)).unwrap();
            assert_eq!(values(&t), want, "{ctx}: take_along_dim");
        }

        // scatter_add (and in place, into a permuted copy): values of the index's shape.
        let sv: Vec<f64> = (0..inum).map(|p| (p * 7 % 11) as f64).collect();
        let src = on(Tensor::from_slice(&sv, ishape.clone(), Device::Cpu).unwrap());
        let mut want = xv.clone();
        for p in 0..inum {
            let mut ix = unravel(p, &ishape);
            ix[dim] = iv[p] as usize;
            want[offset(&ix, &xs)] += sv[p];
        }
        let got = x.scatter_add(dim, &idx, &src).unwrap();
        assert_eq!(values(&got), want, "{ctx}: scatter_add");
        let y = base.deep_clone().unwrap().permute(&perm[..]).unwrap();
        y.scatter_add_(dim, &idx, &src).unwrap();
        assert_eq!(values(&y), want, "{ctx}: scatter_add_");

        // index_select / index_add: a 1-D index.
        let m = 1 + next(4);
        let jv: Vec<i64> = (0..m).map(|_| next(xs[dim]) as i64).collect();
        let j = on(Tensor::from_slice(&jv, [m], Device::Cpu).unwrap());
        let mut oshape = xs.clone();
        oshape[dim] = m;
        let onum: usize = oshape.iter().product();
        let want: Vec<f64> = (0..onum)
            .map(|p| {
                let mut ix = unravel(p, &oshape);
                ix[dim] = jv[ix[dim]] as usize;
                xv[offset(&ix, &xs)]
            })
            .collect();
        assert_eq!(
            values(&x.index_select(dim, &j).unwrap()),
            want,
            "{ctx}: index_select"
        );
        let source = on(Tensor::from_slice(&want, oshape.clone(), Device::Cpu).unwrap());
        let mut sum = xv.clone();
        for (p, &w) in want.iter().enumerate() {
            let mut ix = unravel(p, &oshape);
            ix[dim] = jv[ix[dim]] as usize;
            sum[offset(&ix, &xs)] += w;
        }
        let got = x.index_add(dim, &j, &source, 1.0).unwrap();
        assert_eq!(values(&got), sum, "{ctx}: index_add");
    }
}

/// Views of ten dimensions that do not merge (every stride reversed) through the facade's ops
/// (advanced indexing, index_put, along-a-dimension ops, reductions, scans, einsum, norms,
/// backwards): no op refuses them, and on CUDA each result equals the CPU's.
#[test]
fn views_of_ten_dimensions_through_the_ops() {
    type Outcome = Vec<(&'static str, Result<Vec<f64>, String>)>;
    fn run(dev: Device) -> Outcome {
        let n = 1024usize;
        let a = Tensor::arange(0.0, n as f64, 1.0, DType::F32, dev)
            .unwrap()
            .reshape(&[2i64; 10][..])
            .unwrap();
        let p = a.permute(&[9, 8, 7, 6, 5, 4, 3, 2, 1, 0][..]).unwrap();
        let i2 = Tensor::from_slice(&[1i64, 0], [2], dev).unwrap();
        let full = IndexItem::Slice {
            start: None,
            stop: None,
            step: None,
        };
        let zeros = Tensor::zeros(&[2usize; 10][..], DType::I64, dev).unwrap();
        // The gradient of `f(p).sum()` with respect to `p`.
        let grad = |f: &dyn Fn(&Tensor) -> genesis::Result<Tensor>| -> genesis::Result<Tensor> {
            let x = p.detach().requires_grad_(true)?;
            f(&x)?.sum()?.backward()?;
            Ok(x.grad().expect("a gradient"))
        };
        // `index_put_` of one value into a copy, accumulating or not.
        let index_put = |acc: bool| {
            let c = p.deep_clone().unwrap();
            c.index_put_(
                &[full.clone(), genesis::ToIndex::to_index_item(&i2)],
                &Tensor::from_slice(&[1.0f32], [1], dev).unwrap(),
                acc,
            )
            .map(|_| c)
        };
        let ops: Vec<(&str, genesis::Result<Tensor>)> = vec![
            (
                "i_tensor",
                p.i(&[full.clone(), genesis::ToIndex::to_index_item(&i2)]),
            ),
            (
                "i_tensor_mid",
                p.i(&[
                    full.clone(),
                    full.clone(),
                    full.clone(),
                    genesis::ToIndex::to_index_item(&i2),
                    full.clone(),
                    genesis::ToIndex::to_index_item(&i2),
                ]),
            ),
            (
                "i_mask",
                p.lt(&a)
                    .and_then(|m| p.i(&[genesis::ToIndex::to_index_item(&m)])),
            ),
            ("index_put", index_put(false)),
            ("index_put_acc", index_put(true)),
            ("index_copy", p.index_copy(4, &i2, &a)),
            ("index_fill", p.index_fill(4, &i2, 3.0)),
            ("diagonal", p.diagonal(0, 2, 5)),
            ("einsum", Tensor::einsum("abcdefghij->jihgfedcba", &[&p])),
            ("repeat_interleave", p.repeat_interleave(2, Some(3))),
            ("layer_norm", p.layer_norm(&[2, 2], None, None, 1e-5)),
            ("cumprod", p.cumprod(5)),
            (
                "cross",
                p.narrow(2, 0, 1)
                    .and_then(|x| x.expand(&[2i64, 2, 3, 2, 2, 2, 2, 2, 2, 2][..]))
                    .and_then(|x| x.cross(&x, 2)),
            ),
            ("median", p.median()),
            (
                "trace2d",
                p.reshape(&[32i64, 32][..]).and_then(|x| x.trace()),
            ),
            ("renorm", p.renorm(2.0, 1, 1.0)),
            (
                "bucketize",
                p.bucketize(
                    &Tensor::from_slice(&[1.0f32, 10.0, 100.0], [3], dev).unwrap(),
                    false,
                ),
            ),
            ("sum_backward", grad(&|x| x.mul(x))),
            ("softmax_backward", grad(&|x| x.softmax(3)?.mul(&a))),
            ("gather_backward", grad(&|x| x.gather(3, &zeros))),
            ("index_select_backward", grad(&|x| x.index_select(4, &i2))),
            ("max_backward", grad(&|x| Ok(x.max_dim(2, false)?.0))),
            ("sort_backward", grad(&|x| x.sort(6, false)?.0.mul(&a))),
            (
                "i_backward",
                grad(&|x| x.i(&[full.clone(), genesis::ToIndex::to_index_item(&i2)])),
            ),
            ("cummax_backward", grad(&|x| Ok(x.cummax(2)?.0))),
            ("topk_backward", grad(&|x| Ok(x.topk(1, 7, true, true)?.0))),
        ];
        ops.into_iter()
            .map(|(name, r)| {
                let v = r
                    .and_then(|t| t.to_dtype(DType::F64))
                    .and_then(|t| t.to_vec::<f64>())
                    .map_err(|e| e.to_string());
                (name, v)
            })
            .collect()
    }
    let cpu = run(Device::Cpu);
    for (name, r) in &cpu {
        assert!(r.is_ok(), "{name} on the CPU: {r:?}");
    }
    if genesis::cuda::is_available() {
        for ((name, want), (_, got)) in cpu.iter().zip(run(Device::Cuda(0))) {
            let (want, got) = (
                want.as_ref().unwrap(),
                got.unwrap_or_else(|e| panic!("{name} on CUDA: {e}")),
            );
            assert_eq!(want.len(), got.len(), "{name}");
            for (i, (w, g)) in want.iter().zip(&got).enumerate() {
                assert!(
                    (w - g).abs() <= 1e-5 * (1.0 + w.abs()),
                    "{name} on CUDA, element {i}: {g} against the CPU's {w}"
                );
            }
        }
    }
}
