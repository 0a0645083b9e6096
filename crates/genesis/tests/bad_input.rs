//! The facade's public entry points called with the invalid inputs a user can pass, each under
//! `catch_unwind`: a panic fails the test with the call named, and the call must return an error.
//! `checked_limits.rs` holds the tests of the checked limits (host out-of-memory, huge `arange`,
//! element counts, exact scalars, `index_fill`, silent infinities); this sweep covers the rest of
//! the surface: creation with bad shapes, lengths, devices and dtypes; views with dims out of
//! range; elementwise ops, comparisons, `where`, reductions, matmul, masks, cat/stack, indexing,
//! `_out` and in-place forms with mismatched or shared outputs; wrong `to_vec` types; random
//! tensors; safetensors bytes and files; the shape and selection ops (split, chunk, flatten,
//! unflatten, repeat, tile, flip, roll, tril, triu, diagonal, one_hot, repeat_interleave,
//! take_along_dim, kron, einsum, mm, mv, dot, trace, addmm, baddbmm, index_add, index_copy,
//! index_fill); attention and cross
//! entropy with mismatched shapes, dtypes, targets and scales.

use std::panic::{AssertUnwindSafe, catch_unwind};

use genesis::{DType, Device, Error, IndexItem, Tensor, s};

#[derive(Default)]
struct Sweep {
    failures: Vec<String>,
    calls: usize,
}

impl Sweep {
    /// The call must return an error, without panicking.
    fn err<T: std::fmt::Debug>(&mut self, name: &str, f: impl FnOnce() -> Result<T, Error>) {
        self.calls += 1;
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(Err(_)) => {}
            Ok(Ok(v)) => {
                let shown: String = format!("{v:?}").chars().take(200).collect();
                self.failures.push(format!("{name}: accepted: {shown}"));
            }
            Err(p) => {
                let m = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                self.failures.push(format!("{name}: panicked: {m}"));
            }
        }
    }

    fn finish(self) {
        assert!(
            self.failures.is_empty(),
            "{} of {} calls failed:\n{}",
            self.failures.len(),
            self.calls,
            self.failures.join("\n")
        );
    }
}

const CPU: Device = Device::Cpu;

fn t(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|i| i as f32).collect();
    Tensor::from_slice(&v, shape.to_vec(), CPU).unwrap()
}

fn mask(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_bools(&vec![true; n], shape.to_vec(), CPU).unwrap()
}

const DTYPES: [DType; 10] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::I8,
    DType::I16,
    DType::Bool,
];

#[test]
fn creation() {
    let mut s = Sweep::default();
    let bad_shapes: Vec<Vec<i64>> = vec![
        vec![-1],
        vec![2, -3],
        vec![i64::MIN],
        vec![i64::MAX, i64::MAX],
        vec![1 << 32, 1 << 32],
    ];
    for shape in &bad_shapes {
        for dtype in DTYPES {
            s.err(&format!("zeros({shape:?}, {dtype})"), || {
                Tensor::zeros(shape, dtype, CPU)
            });
            s.err(&format!("ones({shape:?}, {dtype})"), || {
                Tensor::ones(shape, dtype, CPU)
            });
            s.err(&format!("empty({shape:?}, {dtype})"), || {
                Tensor::empty(shape, dtype, CPU)
            });
        }
        s.err(&format!("full({shape:?})"), || {
            Tensor::full(shape, 1.0f32, CPU)
        });
        s.err(&format!("from_slice({shape:?})"), || {
            Tensor::from_slice(&[1.0f32; 6], shape, CPU)
        });
        s.err(&format!("from_bools({shape:?})"), || {
            Tensor::from_bools(&[true; 6], shape, CPU)
        });
        s.err(&format!("rand({shape:?})"), || {
            Tensor::rand(shape, DType::F32, CPU)
        });
        s.err(&format!("randn({shape:?})"), || {
            Tensor::randn(shape, DType::F32, CPU)
        });
        s.err(&format!("randint({shape:?})"), || {
            Tensor::randint(0, 10, shape, DType::I64, CPU)
        });
    }
    // Lengths that do not match the shape.
    s.err("from_slice(6 values, [2, 2])", || {
        Tensor::from_slice(&[1.0f32; 6], [2usize, 2], CPU)
    });
    s.err("from_slice(0 values, [1])", || {
        Tensor::from_slice::<f32>(&[], &[1usize], CPU)
    });
    s.err("from_bools(3 values, [2])", || {
        Tensor::from_bools(&[true; 3], [2usize], CPU)
    });
    // Devices that do not exist here.
    for device in [Device::Cuda(4096), Device::Cuda(usize::MAX)] {
        s.err(&format!("zeros on {device}"), || {
            Tensor::zeros([2usize], DType::F32, device)
        });
        s.err(&format!("from_slice on {device}"), || {
            Tensor::from_slice(&[1.0f32], [1usize], device)
        });
        s.err(&format!("to({device})"), || t(&[2]).to(device));
        s.err(&format!("to_non_blocking({device})"), || {
            t(&[2]).to_non_blocking(device)
        });
        s.err(&format!("arange on {device}"), || {
            Tensor::arange(0.0, 4.0, 1.0, DType::F32, device)
        });
    }
    // arange with steps and ends that are not numbers.
    for (start, end, step) in [
        (0.0, 4.0, 0.0),
        (f64::NAN, 4.0, 1.0),
        (0.0, f64::NAN, 1.0),
        (0.0, 4.0, f64::NAN),
        (0.0, f64::INFINITY, 1.0),
        (f64::NEG_INFINITY, 0.0, 1.0),
    ] {
        s.err(&format!("arange({start}, {end}, {step})"), || {
            Tensor::arange(start, end, step, DType::F32, CPU)
        });
    }
    // Random tensors of dtypes that cannot hold them, and empty integer ranges.
    for dtype in [DType::I32, DType::U8, DType::Bool] {
        s.err(&format!("rand({dtype})"), || {
            Tensor::rand([4usize], dtype, CPU)
        });
        s.err(&format!("randn({dtype})"), || {
            Tensor::randn([4usize], dtype, CPU)
        });
    }
    for (low, high, dtype) in [
        (5, 5, DType::I64),
        (5, 0, DType::I64),
        (0, 1 << 40, DType::I32),
        (-1, 10, DType::U8),
        (0, 2, DType::Bool),
        (i64::MIN, i64::MAX, DType::I8),
    ] {
        s.err(&format!("randint({low}, {high}, {dtype})"), || {
            Tensor::randint(low, high, [4usize], dtype, CPU)
        });
    }
    // Like-constructors with values the dtype does not hold.
    let i = Tensor::zeros([2usize], DType::I32, CPU).unwrap();
    // (A fraction is dropped, as PyTorch's checked conversion does: not an error.)
    for v in [f64::NAN, 1e12, -2.5e9, f64::INFINITY] {
        s.err(&format!("full_like(i32, {v})"), || i.full_like(v));
    }
    s.err("rand_like(i32)", || i.rand_like());
    s.err("randn_like(i32)", || i.randn_like());
    s.finish();
}

#[test]
fn views_and_shapes() {
    let mut s = Sweep::default();
    let x = t(&[2, 3, 4]);
    for d in [3isize, -4, isize::MAX, isize::MIN] {
        s.err(&format!("transpose(0, {d})"), || x.transpose(0, d));
        s.err(&format!("squeeze({d})"), || x.squeeze(d));
        s.err(&format!("narrow({d}, 0, 1)"), || x.narrow(d, 0, 1));
        s.err(&format!("cat(dim {d})"), || Tensor::cat(&[&x, &x], d));
        s.err(&format!("sum_dim({d})"), || x.sum_dim([d], false));
        s.err(&format!("max_dim({d})"), || x.max_dim(d, false));
        s.err(&format!("argmin_dim({d})"), || x.argmin_dim(d, true));
    }
    for d in [4isize, -5, isize::MAX, isize::MIN] {
        s.err(&format!("unsqueeze({d})"), || x.unsqueeze(d));
        s.err(&format!("stack(dim {d})"), || Tensor::stack(&[&x, &x], d));
    }
    for (start, len) in [(2usize, 1usize), (0, 3), (usize::MAX, 1), (1, usize::MAX)] {
        s.err(&format!("narrow(0, {start}, {len})"), || {
            x.narrow(0, start, len)
        });
    }
    for perm in [
        vec![0i64, 1],
        vec![0, 1, 1],
        vec![0, 1, 3],
        vec![-1, 0, 1, 2],
    ] {
        s.err(&format!("permute({perm:?})"), || x.permute(&perm));
    }
    for shape in [
        vec![25i64],
        vec![-1, -1],
        vec![-2, 12],
        vec![5, -1],
        vec![0, -1],
        vec![1 << 32, 1 << 32],
        vec![i64::MAX, 2],
    ] {
        s.err(&format!("view({shape:?})"), || x.view(&shape));
        s.err(&format!("reshape({shape:?})"), || x.reshape(&shape));
    }
    for shape in [
        vec![2i64, 3],
        vec![3, 3, 4],
        vec![-1, 2, 3, 4],
        vec![1 << 40, 1 << 40, 2, 3, 4],
    ] {
        s.err(&format!("expand({shape:?})"), || x.expand(&shape));
    }
    // cat/stack of nothing, of shapes and ranks that differ (dtypes promote).
    s.err("cat([])", || Tensor::cat(&[], 0));
    s.err("stack([])", || Tensor::stack(&[], 0));
    let y = t(&[2, 3, 5]);
    s.err("cat(shapes differ off the dim)", || {
        Tensor::cat(&[&x, &y], 0)
    });
    s.err("cat(ranks differ)", || Tensor::cat(&[&x, &t(&[2, 3])], 0));
    s.err("stack(shapes differ)", || Tensor::stack(&[&x, &y], 0));
    s.finish();
}

#[test]
fn shape_and_selection_ops() {
    let mut s = Sweep::default();
    let x = t(&[2, 3, 4]);
    let scalar = t(&[]);
    let v = t(&[5]);
    for d in [3isize, -4, isize::MAX, isize::MIN] {
        s.err(&format!("split(1, {d})"), || x.split(1, d));
        s.err(&format!("split_sizes([2], {d})"), || x.split_sizes(&[2], d));
        s.err(&format!("chunk(2, {d})"), || x.chunk(2, d));
        s.err(&format!("flatten({d}, -1)"), || x.flatten(d, -1));
        s.err(&format!("flatten(0, {d})"), || x.flatten(0, d));
        s.err(&format!("unflatten({d}, [1, -1])"), || {
            x.unflatten(d, &[1, -1])
        });
        s.err(&format!("flip([{d}])"), || x.flip([d]));
        s.err(&format!("roll([1], [{d}])"), || x.roll(&[1], &[d]));
        s.err(&format!("diagonal(0, 0, {d})"), || x.diagonal(0, 0, d));
        s.err(&format!("diagonal(0, {d}, 1)"), || x.diagonal(0, d, 1));
    }
    // repeat_interleave, take_along_dim, kron, einsum and the ranked products.
    for d in [3isize, -4, isize::MAX, isize::MIN] {
        s.err(&format!("repeat_interleave(2, {d})"), || {
            x.repeat_interleave(2, Some(d))
        });
        s.err(&format!("take_along_dim(dim {d})"), || {
            x.take_along_dim(&x.to_dtype(DType::I64)?, Some(d))
        });
    }
    s.err("repeat_interleave(usize::MAX)", || {
        x.repeat_interleave(usize::MAX, Some(0))
    });
    s.err("repeat_interleave of 0-d along 0", || {
        scalar.repeat_interleave(2, Some(0))
    });
    for (name, counts) in [
        ("negative", vec![1i64, -1]),
        ("too many", vec![1, 1, 1]),
        ("huge", vec![i64::MAX, i64::MAX]),
        ("past the host", vec![1 << 57, 1 << 57]),
    ] {
        let counts = Tensor::from_slice(&counts, [counts.len()], Device::Cpu).unwrap();
        s.err(&format!("repeat_interleave_tensor({name})"), || {
            x.repeat_interleave_tensor(&counts, Some(0))
        });
    }
    s.err("repeat_interleave_tensor(float counts)", || {
        x.repeat_interleave_tensor(&t(&[2]), Some(0))
    });
    s.err("repeat_interleave_tensor(2-d counts)", || {
        x.repeat_interleave_tensor(&t(&[2, 1]).to_dtype(DType::I64)?, Some(0))
    });
    let idx =
        |v: &[i64], shape: &[usize]| Tensor::from_slice(v, shape.to_vec(), Device::Cpu).unwrap();
    s.err("take_along_dim(out of range)", || {
        x.take_along_dim(&idx(&[4], &[1, 1, 1]), Some(2))
    });
    s.err("take_along_dim(negative)", || {
        x.take_along_dim(&idx(&[-1], &[1, 1, 1]), Some(2))
    });
    s.err("take_along_dim(rank)", || {
        x.take_along_dim(&idx(&[0], &[1]), Some(0))
    });
    s.err("take_along_dim(shapes)", || {
        x.take_along_dim(&idx(&[0; 3], &[3, 1, 1]), Some(2))
    });
    s.err("take_along_dim(float indices)", || {
        x.take_along_dim(&t(&[1, 1, 1]), Some(2))
    });
    s.err("take_along_dim(0-d with a dim)", || {
        scalar.take_along_dim(&idx(&[0], &[]), Some(0))
    });
    // movedim, rot90, tensordot, unbind, hstack with bad dimensions and sizes.
    s.err("movedim(repeated)", || x.movedim([0, 0], [1, 2]));
    s.err("movedim(lengths)", || x.movedim([0, 1], [2]));
    s.err("movedim(out of range)", || x.movedim(3, 0));
    s.err("rot90(one dim)", || x.rot90(1, [0]));
    s.err("rot90(same dims)", || x.rot90(1, [1, -2]));
    s.err("rot90(1-d)", || t(&[3]).rot90(1, [0, 0]));
    s.err("tensordot(sizes)", || x.tensordot(&x, [0], [1]));
    s.err("tensordot(counts)", || x.tensordot(&x, [0, 1], [0]));
    s.err("tensordot(dtypes)", || {
        x.tensordot(&x.to_dtype(DType::F64)?, [0], [0])
    });
    s.err("unbind(0-d)", || scalar.unbind(0));
    s.err("unbind(dim)", || x.unbind(5));
    s.err("hstack(none)", || Tensor::hstack(&[]));
    s.err("vstack(shapes)", || Tensor::vstack(&[&x, &t(&[5])]));
    s.err("aminmax(empty)", || t(&[0]).aminmax(None, false));
    s.err("searchsorted(0-d sequence)", || {
        Tensor::searchsorted(&scalar, &x, false)
    });
    s.err("searchsorted(leading dims)", || {
        Tensor::searchsorted(&t(&[2, 3]), &t(&[3, 2]), false)
    });
    s.err("bucketize(2-d boundaries)", || {
        x.bucketize(&t(&[2, 2]), false)
    });
    s.err("triu_indices(too large)", || {
        Tensor::triu_indices(1 << 20, 1 << 20, 0, CPU)
    });
    s.err("tril_indices(overflow)", || {
        Tensor::tril_indices(usize::MAX, 2, 0, CPU)
    });
    use genesis::PadMode::*;
    for (name, pads, mode) in [
        ("odd", vec![1i64], Constant),
        ("too many pairs", vec![1; 8], Constant),
        ("crop past the size", vec![-5, 0], Constant),
        ("crop past both", vec![-2, -3], Constant),
        ("huge", vec![i64::MAX, 1], Constant),
        ("reflect past the size", vec![4, 0], Reflect),
        ("circular twice around", vec![5, 0], Circular),
        ("reflect 4 pairs", vec![1; 8], Reflect),
    ] {
        s.err(&format!("pad({name})"), || x.pad(&pads, mode, 0.0));
    }
    s.err("pad(reflect of 1-d)", || t(&[3]).pad(&[1, 1], Reflect, 0.0));
    s.err("pad(replicate of bools)", || {
        x.gt_scalar(0.0)?.pad(&[1, 1], Replicate, 0.0)
    });
    s.err("pad(int8 value 300)", || {
        x.to_dtype(DType::I8)?.pad(&[1, 1], Constant, 300.0)
    });
    // Integer divisions by zero, bitwise ops of floats, divisions of bools.
    let ints = idx(&[6, -7, 0], &[3]);
    let zero = idx(&[1, 0, 2], &[3]);
    for (name, r) in [
        ("floor_divide", ints.floor_divide(&zero)),
        ("remainder", ints.remainder(&zero)),
        ("fmod", ints.fmod(&zero)),
        (
            "div trunc",
            ints.div_mode(&zero, genesis::RoundingMode::Trunc),
        ),
        ("remainder by 0", ints.remainder(0)),
        ("% 0", &ints % 0),
        ("bitwise_and of floats", x.bitwise_and(&x)),
        ("| of floats", &x | &x),
        ("bitwise_xor float scalar", ints.bitwise_xor(2.5)),
        (
            "floor_divide of bools",
            ints.gt_scalar(0).and_then(|b| b.floor_divide(&b)),
        ),
        (
            "remainder of bools",
            ints.gt_scalar(0).and_then(|b| b.remainder(true)),
        ),
        ("hypot of integers", ints.hypot(&zero)),
        ("atan2 shapes", x.atan2(&t(&[5]))),
    ] {
        s.err(name, || r);
    }
    let before = ints.to_vec::<i64>().unwrap();
    s.err("remainder_ by 0 in place", || {
        ints.binary_(genesis::BinaryOp::Remainder, &zero)
    });
    assert_eq!(ints.to_vec::<i64>().unwrap(), before, "unchanged on error");
    // index_add, index_copy, index_fill: dims, index ranks, dtypes and values, sources.
    let src = t(&[2, 2, 4]);
    for d in [3isize, -4, isize::MAX, isize::MIN] {
        s.err(&format!("index_add(dim {d})"), || {
            x.index_add(d, &idx(&[0, 1], &[2]), &src, 1)
        });
        s.err(&format!("index_copy(dim {d})"), || {
            x.index_copy(d, &idx(&[0, 1], &[2]), &src)
        });
        s.err(&format!("index_fill(dim {d})"), || {
            x.index_fill(d, &idx(&[0], &[1]), 1.0)
        });
    }
    for (name, v) in [
        ("too large", vec![0i64, 3]),
        ("negative", vec![-1, 0]),
        ("huge", vec![i64::MAX, 0]),
        ("most negative", vec![i64::MIN, 0]),
    ] {
        s.err(&format!("index_add({name})"), || {
            x.index_add_(
                1,
                &idx(&v, &[2]),
                &src.transpose(0, 1)?.reshape([2, 2, 4])?,
                1,
            )
        });
        s.err(&format!("index_copy({name})"), || {
            x.index_copy_(1, &idx(&v, &[2]), &src)
        });
    }
    for v in [3i64, -4, i64::MAX, i64::MIN] {
        s.err(&format!("index_fill({v})"), || {
            x.index_fill_(1, &idx(&[v], &[1]), 1.0)
        });
    }
    s.err("index_add(2-d index)", || {
        x.index_add(1, &idx(&[0, 1], &[1, 2]), &src, 1)
    });
    s.err("index_add(float index)", || {
        x.index_add(1, &t(&[2]), &src, 1)
    });
    s.err("index_copy(int32 index)", || {
        x.index_copy(1, &idx(&[0, 1], &[2]).to_dtype(DType::I32)?, &src)
    });
    s.err("index_fill(int32 index)", || {
        x.index_fill(1, &idx(&[0], &[1]).to_dtype(DType::I32)?, 1.0)
    });
    s.err("index_add(source dtype)", || {
        x.index_add(1, &idx(&[0, 1], &[2]), &src.to_dtype(DType::F64)?, 1)
    });
    s.err("index_add(source shape)", || {
        x.index_add(1, &idx(&[0, 1], &[2]), &t(&[2, 3, 4]), 1)
    });
    s.err("index_copy(source rank)", || {
        x.index_copy(1, &idx(&[0, 1], &[2]), &t(&[2, 4]))
    });
    s.err("index_add(0-d self, two indices)", || {
        scalar.index_add(0, &idx(&[0, 0], &[2]), &t(&[2]), 1)
    });
    s.err("index_add(integer, alpha past i64)", || {
        x.to_dtype(DType::I32)?
            .index_add(1, &idx(&[0, 1], &[2]), &src.to_dtype(DType::I32)?, 1e30)
    });
    s.err("index_fill(int8, 300)", || {
        x.to_dtype(DType::I8)?.index_fill(1, &idx(&[0], &[1]), 300)
    });
    s.err("kron(a size past usize)", || {
        let big = x.narrow(0, 0, 1)?.expand([1usize << 40, 3, 4])?;
        big.kron(&big)
    });
    for eq in [
        "",
        "ij",
        "ijk,",
        "i..j",
        "i....",
        "ij->k",
        "ijk->ii",
        "é",
        "ij,jk->ik",
        "ijk->ijk->",
        "iij",
    ] {
        s.err(&format!("einsum({eq:?})"), || Tensor::einsum(eq, &[&x]));
    }
    s.err("einsum(no operands)", || Tensor::einsum("->", &[]));
    s.err("einsum(sizes)", || {
        Tensor::einsum("ij,ij->", &[&t(&[2, 3]), &t(&[3, 2])])
    });
    s.err("einsum(dtypes)", || {
        Tensor::einsum(
            "ij,jk->ik",
            &[&t(&[2, 3]), &t(&[3, 2]).to_dtype(DType::F64)?],
        )
    });
    s.err("mm of 1-d", || v.mm(&v));
    s.err("mm(sizes)", || t(&[2, 3]).mm(&t(&[2, 3])));
    s.err("mv of 2-d", || t(&[2, 3]).mv(&t(&[3, 1])));
    s.err("dot(lengths)", || v.dot(&t(&[4])));
    s.err("dot(dtypes)", || v.dot(&v.to_dtype(DType::F64)?));
    s.err("trace of 3-d", || x.trace());
    s.err("trace of bools", || t(&[2, 2]).gt(0.0)?.trace());
    s.err("addmm(broadcast)", || {
        t(&[3]).addmm(&t(&[2, 2]), &t(&[2, 2]), 1.0, 1.0)
    });
    s.err("addmm(dtypes)", || {
        t(&[2, 2])
            .to_dtype(DType::F64)?
            .addmm(&t(&[2, 2]), &t(&[2, 2]), 1.0, 1.0)
    });
    s.err("baddbmm(ranks)", || {
        t(&[2, 2]).baddbmm(&t(&[2, 2]), &t(&[2, 2]), 1.0, 1.0)
    });
    // 0-d tensors: no dimension to split, unflatten, roll, take a triangle or a diagonal of.
    s.err("split of 0-d", || scalar.split(1, 0));
    s.err("split_sizes of 0-d", || scalar.split_sizes(&[1], 0));
    s.err("chunk of 0-d", || scalar.chunk(1, 0));
    s.err("unflatten of 0-d", || scalar.unflatten(0, &[1]));
    s.err("roll of 0-d along 0", || scalar.roll(&[1], &[0]));
    s.err("tril of 0-d", || scalar.tril(0));
    s.err("triu of 1-d", || v.triu(0));
    s.err("diagonal of 1-d", || v.diagonal(0, 0, -1));
    s.err("diagonal of 0-d", || scalar.diagonal(0, 0, -1));
    // Sizes.
    s.err("split(0) of a non-empty dim", || x.split(0, 1));
    for sizes in [
        vec![],
        vec![1],
        vec![2, 2],
        vec![usize::MAX, 4],
        vec![3, usize::MAX],
    ] {
        s.err(&format!("split_sizes({sizes:?})"), || {
            x.split_sizes(&sizes, 1)
        });
    }
    s.err("chunk(0)", || x.chunk(0, 0));
    s.err("flatten(2, 1)", || x.flatten(2, 1));
    s.err("flatten(-1, 0)", || x.flatten(-1, 0));
    for sizes in [
        vec![],
        vec![-1, -1],
        vec![2, 2],
        vec![5, -1],
        vec![0, -1],
        vec![-2, -2],
        vec![isize::MAX, isize::MAX],
        vec![isize::MIN, 1],
    ] {
        s.err(&format!("unflatten(1, {sizes:?})"), || {
            x.unflatten(1, &sizes)
        });
    }
    // Repeats.
    for reps in [vec![], vec![2i64, 2], vec![1, 1, -1], vec![-1, 1, 1, 1]] {
        s.err(&format!("repeat({reps:?})"), || x.repeat(&reps));
    }
    for reps in [
        vec![-1i64],
        vec![1i64 << 40, 1 << 40, 1],
        vec![i64::MAX, 2, 2, 2],
    ] {
        s.err(&format!("tile({reps:?})"), || x.tile(&reps));
        s.err(&format!("repeat({reps:?} ++)"), || {
            x.repeat([reps.clone(), vec![1; 3]].concat())
        });
    }
    // Flips and rolls.
    s.err("flip([0, 0])", || x.flip([0, 0]));
    s.err("flip([1, -2])", || x.flip([1, -2]));
    s.err("flip of 0-d ([0, -1])", || scalar.flip([0, -1]));
    s.err("roll([], [])", || x.roll(&[], &[]));
    s.err("roll([1, 2], [])", || x.roll(&[1, 2], &[]));
    s.err("roll([1], [0, 1])", || x.roll(&[1], &[0, 1]));
    s.err("roll([], [0])", || x.roll(&[], &[0]));
    // Diagonals.
    s.err("diagonal(0, 1, 1)", || x.diagonal(0, 1, 1));
    s.err("diagonal(0, 1, -2)", || x.diagonal(0, 1, -2));
    // Selection: one_hot takes int64 classes below `num_classes`.
    let labels = Tensor::from_slice(&[0i64, 3, 1], [3], CPU).unwrap();
    for dtype in DTYPES.into_iter().filter(|&d| d != DType::I64) {
        let y = labels.to_dtype(dtype).unwrap();
        s.err(&format!("one_hot of {dtype}"), || y.one_hot(Some(4)));
    }
    s.err("one_hot(Some(3)) of 3", || labels.one_hot(Some(3)));
    s.err("one_hot(Some(0))", || labels.one_hot(Some(0)));
    let negative = Tensor::from_slice(&[0i64, -1], [2], CPU).unwrap();
    s.err("one_hot of -1", || negative.one_hot(None));
    s.err("one_hot(Some(5)) of -1", || negative.one_hot(Some(5)));
    let empty = Tensor::zeros([0, 2], DType::I64, CPU).unwrap();
    s.err("one_hot(None) of nothing", || empty.one_hot(None));
    s.err("one_hot(Some(0)) of nothing", || empty.one_hot(Some(0)));
    let huge = Tensor::from_slice(&[i64::MAX], [1], CPU).unwrap();
    s.err("one_hot(None) of i64::MAX", || huge.one_hot(None));
    s.finish();
}

#[test]
fn operations() {
    let mut s = Sweep::default();
    let a = t(&[2, 3]);
    let b = t(&[4]);
    let f64s = Tensor::zeros([2usize, 3], DType::F64, CPU).unwrap();
    let bools = mask(&[2, 3]);
    let ints = Tensor::zeros([2usize, 3], DType::I32, CPU).unwrap();
    s.err("add(shapes that do not broadcast)", || a.add(&b));
    s.err("sub(shapes that do not broadcast)", || a.sub(&b));
    s.err("mul(shapes that do not broadcast)", || a.mul(&b));
    s.err("div(shapes that do not broadcast)", || a.div(&b));
    s.err("maximum(shapes that do not broadcast)", || a.maximum(&b));
    s.err("pow(shapes that do not broadcast)", || a.pow(&b));
    s.err("compare(shapes that do not broadcast)", || {
        a.compare(genesis::CompareOp::Lt, &b)
    });
    s.err("where_cond(cond not bool)", || {
        Tensor::where_cond(&a, &a, &a)
    });
    s.err("where_cond(shapes)", || {
        Tensor::where_cond(&mask(&[4]), &a, &a)
    });
    s.err("where_cond(scalar out of the result dtype)", || {
        Tensor::where_cond(&bools, &ints, 1u64 << 40)
    });
    // Bools have no neg/abs/relu; a float result does not go into an integer tensor in place.
    for (name, r) in [
        ("neg", bools.neg()),
        ("abs", bools.abs()),
        ("relu", bools.relu()),
    ] {
        s.err(&format!("{name}(unsupported dtype)"), || r);
    }
    s.err("exp_(bool)", || bools.to_dtype(DType::Bool)?.exp_());
    s.err("sqrt in place (i32)", || {
        ints.to_dtype(DType::I32)?.unary_(genesis::UnaryOp::Sqrt)
    });
    s.err("exp_out(i32)", || {
        let mut out = ints.zeros_like()?;
        ints.exp_out(&mut out)
    });
    // A number in an elementwise op converts as C++ does (wrapping, overflowing to inf), as
    // PyTorch's; beyond int64 no Python int exists, and bounds, fills and `pow`'s exponent
    // are checked.
    s.err("i32 + u64::MAX", || ints.add(u64::MAX));
    s.err("i32 == u64::MAX", || ints.eq(u64::MAX));
    s.err("f16 ** 1e300", || ints.to_dtype(DType::F16)?.pow(1e300));
    s.err("clamp_max(i32, 2^40)", || ints.clamp_max(1i64 << 40));
    s.err("where(bool, i32, -1e300)", || {
        Tensor::where_cond(&bools, &ints, -1e300)
    });
    s.err("i32 + 0.5 in place", || {
        ints.to_dtype(DType::I32)?.add_(0.5)
    });
    s.err("bool - bool", || bools.sub(&bools));
    s.err("bool + 1 in place", || bools.to_dtype(DType::Bool)?.add_(1));
    s.err("bool - true", || bools.sub(true));
    s.err("i32 ** -2", || ints.pow_scalar(-2));
    s.err("bool ** -1", || bools.pow(-1));
    s.err("f32 - true", || t(&[2]).sub(true));
    s.err("i32 ** u64::MAX", || ints.pow(u64::MAX));
    s.err("i32 **= -1 in place", || {
        ints.to_dtype(DType::I32)?.pow_(-1)
    });
    s.err("i32 /= 2", || ints.to_dtype(DType::I32)?.div_(2));
    s.err("mean(bool)", || bools.mean());
    s.err("where(bool, i32, 2^40)", || {
        Tensor::where_cond(&bools, &ints, 1i64 << 40)
    });
    // Pinned memory needs CUDA.
    if !genesis::cuda::is_available() {
        s.err("pin_memory without CUDA", || a.pin_memory());
        s.err("enable_pinned_memory(true) without CUDA", || {
            genesis::cpu::enable_pinned_memory(true)
        });
    }
    for v in [f64::NAN, 2.5e9, 1e12, -1e300] {
        s.err(&format!("masked_fill(i32, {v})"), || {
            ints.masked_fill(&bools, v)
        });
    }
    // _out forms: outputs of the wrong shape, dtype, or shared with an input.
    let mut out_shape = t(&[3, 2]);
    s.err("add_out(out shape)", || a.add_out(&a, &mut out_shape));
    // A float result does not go into an integer `out` (PyTorch's `can_cast`).
    let mut out_dtype = Tensor::zeros(a.shape(), DType::I64, CPU).unwrap();
    s.err("mul_out(out dtype)", || a.mul_out(&a, &mut out_dtype));
    let mut out_small = t(&[2]);
    s.err("exp_out(out shape)", || a.exp_out(&mut out_small));
    let mut out_mm = t(&[5, 5]);
    s.err("matmul_out(out shape)", || {
        t(&[2, 3]).matmul_out(&t(&[3, 2]), &mut out_mm)
    });
    // In-place ops where the result does not fit, or the tensor is a shared broadcast view.
    let small = t(&[3]);
    s.err("add_(broadcast would grow self)", || small.add_(&a));
    let expanded = t(&[1, 3]).expand([4usize, 3]).unwrap();
    s.err("add_(stride-0 view)", || expanded.add_(1.0f32));
    let expanded2 = t(&[1, 3]).expand([4usize, 3]).unwrap();
    s.err("masked_fill_(stride-0 view)", || {
        expanded2.masked_fill_(&mask(&[4, 3]), 0.0)
    });
    let ints_mut = ints.clone();
    s.err("exp_(i32)", || ints_mut.exp_());
    s.err("div_(i32, f32 tensor)", || ints_mut.div_(&a));
    // Reductions.
    let empty = Tensor::zeros([0usize, 3], DType::F32, CPU).unwrap();
    s.err("max(empty)", || empty.max());
    s.err("argmin(empty)", || empty.argmin());
    s.err("amax(empty dim 0)", || empty.amax([0i64], false));
    s.err("min_dim(empty dim 0)", || empty.min_dim(0, false));
    s.err("mean(i32)", || ints.mean());
    s.err("sum_dim(repeated dims)", || a.sum_dim([0i64, 0], false));
    s.err("mean_dim(dim out of range)", || a.mean_dim([5i64], true));
    // matmul.
    for (l, r) in [
        (vec![2usize, 3], vec![2usize, 3]),
        (vec![3], vec![4]),
        (vec![2, 2, 3], vec![3, 3, 2]),
        (vec![], vec![3]),
    ] {
        s.err(&format!("matmul({l:?} x {r:?})"), || t(&l).matmul(&t(&r)));
    }
    s.err("matmul(dtypes differ)", || a.matmul(&f64s.t().unwrap()));
    s.err("matmul(bool)", || bools.matmul(&mask(&[3, 2])));
    s.err("bmm(rank 2)", || a.bmm(&t(&[3, 2])));
    s.err("bmm(batches differ)", || t(&[2, 2, 3]).bmm(&t(&[3, 3, 2])));
    // Masks.
    s.err("masked_select(mask not bool)", || a.masked_select(&a));
    s.err("masked_select(mask shape)", || a.masked_select(&mask(&[4])));
    s.err("masked_fill(mask shape)", || {
        a.masked_fill(&mask(&[4]), 0.0)
    });
    // Wrong element types out.
    s.err("to_vec::<f64>(f32)", || a.to_vec::<f64>());
    s.err("to_vec::<i32>(f32)", || a.to_vec::<i32>());
    s.err("to_vec::<u8>(bool)", || bools.to_vec::<u8>());
    s.err("to_bool_vec(f32)", || a.to_bool_vec());
    s.finish();
}

#[test]
fn softmax_family() {
    let mut s = Sweep::default();
    let a = t(&[2, 3]);
    let ints = Tensor::zeros([2usize, 3], DType::I64, CPU).unwrap();
    let bools = mask(&[2, 3]);
    let scalar = Tensor::from_slice(&[1.0f32], &[] as &[usize], CPU).unwrap();
    s.err("softmax(dim 2 of 2)", || a.softmax(2));
    s.err("softmax(dim -3 of 2)", || a.softmax(-3));
    s.err("log_softmax(dim 2 of 2)", || a.log_softmax(2));
    s.err("softmax(0-d, dim 1)", || scalar.softmax(1));
    s.err("logsumexp(dim 2 of 2)", || a.logsumexp(2, false));
    s.err("logsumexp(dims [0, 0])", || a.logsumexp([0, 0], false));
    s.err("logsumexp(0-d, dim -2)", || scalar.logsumexp(-2, true));
    s.err("softmax(i64)", || ints.softmax(0));
    s.err("log_softmax(bool)", || bools.log_softmax(-1));
    s.finish();
    // The errors are typed: a dimension out of range, and PyTorch's "not implemented for
    // 'Long'" as UnsupportedDType.
    assert!(matches!(
        a.softmax(2),
        Err(Error::DimOutOfRange {
            dim: 2,
            rank: 2,
            ..
        })
    ));
    assert!(format!("{:?}", a.logsumexp(-3, false)).contains("DimOutOfRange"));
    assert!(matches!(
        ints.softmax(0),
        Err(Error::Storage(genesis_storage::Error::UnsupportedDType {
            dtype: DType::I64,
            ..
        }))
    ));
    assert!(matches!(
        bools.log_softmax(0),
        Err(Error::Storage(genesis_storage::Error::UnsupportedDType {
            dtype: DType::Bool,
            ..
        }))
    ));
}

#[test]
fn attention_and_cross_entropy() {
    use genesis::Reduction;
    let mut s = Sweep::default();
    let q = t(&[2, 3, 4]);
    let ints = Tensor::zeros([2usize, 3, 4], DType::I64, CPU).unwrap();
    let halfs = q.to_dtype(DType::F16).unwrap();
    s.err("sdpa(rank 1)", || {
        t(&[4]).scaled_dot_product_attention(&t(&[4]), &t(&[4]), false, None)
    });
    s.err("sdpa(key of other E)", || {
        q.scaled_dot_product_attention(&t(&[2, 3, 5]), &q, false, None)
    });
    s.err("sdpa(value of other S)", || {
        q.scaled_dot_product_attention(&q, &t(&[2, 4, 4]), false, None)
    });
    s.err("sdpa(other batch)", || {
        q.scaled_dot_product_attention(&t(&[3, 3, 4]), &t(&[3, 3, 4]), false, None)
    });
    // Ranks that differ broadcast, as PyTorch's: [2, 3, 4] with [1, 2, 3, 4] is [1, 2, 3, 4].
    assert_eq!(
        q.scaled_dot_product_attention(&t(&[1, 2, 3, 4]), &q, false, None)
            .unwrap()
            .shape(),
        &[1, 2, 3, 4]
    );
    s.err("sdpa(int64)", || {
        ints.scaled_dot_product_attention(&ints, &ints, true, None)
    });
    s.err("sdpa(f32 and f16)", || {
        q.scaled_dot_product_attention(&halfs, &q, false, None)
    });
    s.err("sdpa(scale NaN)", || {
        q.scaled_dot_product_attention(&q, &q, false, Some(f64::NAN))
    });
    s.err("sdpa(scale inf)", || {
        q.scaled_dot_product_attention(&q, &q, false, Some(f64::INFINITY))
    });
    let logits = t(&[4, 5]);
    let target = |v: &[i64]| Tensor::from_slice(v, [v.len()], CPU).unwrap();
    s.err("cross_entropy(target 5 of 5)", || {
        logits.cross_entropy(&target(&[0, 1, 2, 5]), None, Reduction::Mean)
    });
    s.err("cross_entropy(target -1)", || {
        logits.cross_entropy(&target(&[0, -1, 2, 3]), None, Reduction::Sum)
    });
    s.err("cross_entropy(-100 not ignored)", || {
        logits.cross_entropy(&target(&[0, -100, 2, 3]), None, Reduction::None)
    });
    s.err("cross_entropy(target of 3 rows)", || {
        logits.cross_entropy(&target(&[0, 1, 2]), None, Reduction::Mean)
    });
    s.err("cross_entropy(f32 target)", || {
        logits.cross_entropy(&t(&[4]), None, Reduction::Mean)
    });
    s.err("cross_entropy(1-d logits)", || {
        t(&[5]).cross_entropy(&target(&[1]), None, Reduction::Mean)
    });
    s.err("cross_entropy(3-d logits)", || {
        t(&[2, 2, 5]).cross_entropy(&target(&[1, 1]), None, Reduction::Mean)
    });
    s.err("cross_entropy(no classes)", || {
        t(&[4, 0]).cross_entropy(&target(&[0, 0, 0, 0]), None, Reduction::Mean)
    });
    s.err("cross_entropy(int logits)", || {
        Tensor::zeros([4usize, 5], DType::I64, CPU)
            .unwrap()
            .cross_entropy(&target(&[0, 1, 2, 3]), None, Reduction::Mean)
    });
    s.finish();
}

#[test]
fn indexing() {
    let mut s = Sweep::default();
    let x = t(&[3, 4]);
    for items in [
        vec![IndexItem::Int(3i64)],
        vec![IndexItem::Int(-4i64)],
        vec![
            IndexItem::Int(0i64),
            IndexItem::Int(0i64),
            IndexItem::Int(0i64),
        ],
        vec![IndexItem::Int(i64::MAX)],
        vec![IndexItem::Int(i64::MIN)],
    ] {
        s.err(&format!("i({items:?})"), || x.i(&items));
        let y = x.clone().contiguous().unwrap();
        s.err(&format!("index_fill({items:?})"), || {
            y.index_put_scalar_(&items, 0.0)
        });
    }
    s.err("i(step 0)", || x.i(&s![.., 0..4;0]));
    s.err("i(negative step)", || x.i(&s![.., 0..4;-1]));
    let y = t(&[3, 4]);
    s.err("index_put(value shape)", || {
        y.index_put_(&s![0], &t(&[5]), false)
    });
    // `x[i] += v`: a float value does not go into an integer tensor.
    s.err("index_add(value dtype)", || {
        Tensor::zeros([3usize, 4], DType::I32, CPU)
            .unwrap()
            .index_put_(
                &s![0],
                &Tensor::zeros([4usize], DType::F64, CPU).unwrap(),
                true,
            )
    });
    s.err("index_add(value shape)", || {
        y.index_put_(&s![.., 0], &t(&[4]), true)
    });
    s.finish();
}

#[test]
fn safetensors() {
    let mut s = Sweep::default();
    let good = genesis::serialize_safetensors(&[("x", &t(&[2, 2]))], None).unwrap();
    let mut cases: Vec<(String, Vec<u8>)> = vec![
        ("empty".into(), Vec::new()),
        ("7 bytes".into(), vec![0; 7]),
        (
            "header length u64::MAX".into(),
            u64::MAX.to_le_bytes().to_vec(),
        ),
        ("header length past the end".into(), {
            let mut v = 1000u64.to_le_bytes().to_vec();
            v.extend_from_slice(b"{}");
            v
        }),
        ("header not JSON".into(), {
            let mut v = 4u64.to_le_bytes().to_vec();
            v.extend_from_slice(b"nope");
            v
        }),
        ("truncated data".into(), good[..good.len() - 1].to_vec()),
    ];
    let header = |json: &str| {
        let mut v = (json.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(json.as_bytes());
        v.extend_from_slice(&[0u8; 16]);
        v
    };
    for json in [
        r#"{"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}}"#,
        r#"{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}}"#,
        r#"{"x":{"dtype":"F32","shape":[4],"data_offsets":[8,0]}}"#,
        r#"{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,18446744073709551615]}}"#,
        r#"{"x":{"dtype":"Q4","shape":[4],"data_offsets":[0,16]}}"#,
        r#"{"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,16]}}"#,
    ] {
        cases.push((format!("header {json}"), header(json)));
    }
    for (name, bytes) in &cases {
        s.err(&format!("deserialize_safetensors({name})"), || {
            genesis::deserialize_safetensors(bytes, CPU)
        });
    }
    s.err("serialize_safetensors(duplicate names)", || {
        genesis::serialize_safetensors(&[("x", &t(&[1])), ("x", &t(&[1]))], None)
    });
    s.err("load_safetensors(missing file)", || {
        genesis::load_safetensors("/nonexistent/genesis.safetensors", CPU)
    });
    s.err("load_safetensors(a directory)", || {
        genesis::load_safetensors(std::env::temp_dir(), CPU)
    });
    s.err("save_safetensors(into a missing directory)", || {
        genesis::save_safetensors(&[("x", &t(&[1]))], "/nonexistent/dir/x.safetensors")
    });
    s.finish();
}
