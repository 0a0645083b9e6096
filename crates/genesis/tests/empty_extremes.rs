//! Tensors with no elements whose other dimensions are huge (`[0, 2^32, 2^32]`, `[2^31, 2^31,
//! 0]`, `[0, 2^62]`, ...): every facade op must give PyTorch's result shape (or PyTorch's error)
//! without panicking on an overflowing product of dimensions (these tests run in the debug
//! build, with overflow checks on), without spinning over the other dimensions, and without
//! sizing scratch memory by one of them. Generated: every shape below (ranks 1 to 6, the zero
//! in each position) times every dtype times every op, each under `catch_unwind`, the whole
//! sweep under a watchdog that names the probe that hangs.
//!
//! Also: the sum (and mean, `sum_dim`) of `-0.0` and of nothing is `+0.0`, as PyTorch's
//! (its sums start at `+0.0`); `argmax`/`argmin` of a bool tensor are errors, as PyTorch's.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use genesis::{CompareOp, DType, Device, Error, IndexItem, Tensor, UnaryOp, s};

mod common;
use common::{Release, devices};

/// Huge sizes: with a zero elsewhere they make no elements, without one they overflow.
const HUGE: [usize; 5] = [1 << 31, 1 << 32, 1 << 40, 1 << 62, (1 << 62) + 3];

/// The shapes: hand-picked ones from the issue, then, for ranks 1 to 6, a zero in each position
/// with the other sizes drawn (deterministically) from huge, small and 1.
fn shapes() -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = vec![
        vec![0],
        vec![0, 1 << 32, 1 << 32],
        vec![1 << 31, 1 << 31, 0],
        vec![1 << 40, 1 << 40, 0],
        vec![0, 1 << 62],
        vec![1 << 62, 0],
        vec![1 << 40, 0, 7],
        vec![7, 0, 1 << 40],
        vec![0, 0, 1 << 62],
        vec![2, 0, 3],
    ];
    let pool = [1usize, 2, 7, HUGE[0], HUGE[1], HUGE[2], HUGE[3], HUGE[4]];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for rank in 1..=6usize {
        for zero in 0..rank {
            for _ in 0..2 {
                let shape: Vec<usize> = (0..rank)
                    .map(|i| {
                        if i == zero {
                            return 0;
                        }
                        x = x
                            .wrapping_mul(6_364_136_223_846_793_005)
                            .wrapping_add(1_442_695_040_888_963_407);
                        pool[(x >> 33) as usize % pool.len()]
                    })
                    .collect();
                if !out.contains(&shape) {
                    out.push(shape);
                }
            }
        }
    }
    out
}

/// The element count of `shape` if it is representable (as PyTorch's `int64` sizes).
fn numel(shape: &[usize]) -> Option<usize> {
    if shape.contains(&0) {
        return Some(0);
    }
    shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= isize::MAX as usize)
}

/// Results this large are not made (a real allocation); only empty and small results are.
const SMALL: usize = 1 << 12;

fn small(shape: &[usize]) -> bool {
    numel(shape).is_some_and(|n| n <= SMALL)
}

/// What a probe expects.
enum Want {
    /// A result of this shape.
    Shape(Vec<usize>),
    /// A result of this shape, or an error when the same op on a small non-empty tensor of the
    /// dtype is one too (the dtype is not supported by the op).
    ShapeOrUnsupported(Vec<usize>),
    /// An error (PyTorch's too).
    Error,
    /// No panic; anything else goes.
    NoPanic,
    /// A result of this shape, too large to make: an error when its element count is not
    /// representable (PyTorch's too), otherwise the probe is not run (it would allocate).
    Large(Vec<usize>),
}

/// One probe: its name and what it runs.
type Probe<'a> = (
    String,
    Want,
    Box<dyn Fn() -> genesis::Result<Vec<usize>> + 'a>,
);

fn reduced(shape: &[usize], d: usize, keepdim: bool) -> Vec<usize> {
    let mut s = shape.to_vec();
    if keepdim {
        s[d] = 1;
    } else {
        s.remove(d);
    }
    s
}

fn shape_of(t: genesis::Result<Tensor>) -> genesis::Result<Vec<usize>> {
    t.map(|t| t.shape().to_vec())
}

/// The probes for `t` (of `shape` and `dtype`).
// One probe a statement, grouped by family with comments, reads better than one `vec![]`.
#[allow(clippy::vec_init_then_push)]
fn probes<'a>(t: &'a Tensor, shape: &'a [usize], dtype: DType) -> Vec<Probe<'a>> {
    let rank = shape.len();
    let same = || Want::Shape(shape.to_vec());
    let mut p: Vec<Probe<'a>> = Vec::new();
    // Elementwise with scalars and tensors, comparisons, where, masks.
    p.push((
        "add_scalar".into(),
        same(),
        Box::new(move || shape_of(t.add(1))),
    ));
    p.push((
        "mul_scalar".into(),
        same(),
        Box::new(move || shape_of(t.mul(2))),
    ));
    p.push(("add".into(), same(), Box::new(move || shape_of(t.add(t)))));
    p.push((
        "sub".into(),
        Want::NoPanic,
        Box::new(move || shape_of(t.sub(t))),
    ));
    p.push(("div".into(), same(), Box::new(move || shape_of(t.div(t)))));
    p.push((
        "maximum".into(),
        same(),
        Box::new(move || shape_of(t.maximum(t))),
    ));
    p.push((
        "neg".into(),
        Want::NoPanic,
        Box::new(move || shape_of(t.neg())),
    ));
    p.push(("abs".into(), same(), Box::new(move || shape_of(t.abs()))));
    p.push(("exp".into(), same(), Box::new(move || shape_of(t.exp()))));
    p.push(("sin".into(), same(), Box::new(move || shape_of(t.sin()))));
    p.push((
        "relu".into(),
        Want::NoPanic,
        Box::new(move || shape_of(t.relu())),
    ));
    p.push((
        "clamp".into(),
        Want::NoPanic,
        Box::new(move || shape_of(t.clamp(Some(0.0), Some(1.0)))),
    ));
    // Every op of the unary table, out of place and in place, and the float classes.
    for op in UnaryOp::ALL {
        p.push((
            op.name().into(),
            Want::NoPanic,
            Box::new(move || shape_of(t.unary(op))),
        ));
        p.push((
            format!("{}_", op.name()),
            Want::NoPanic,
            Box::new(move || {
                let own = t.deep_clone()?;
                own.unary_(op)?;
                Ok(own.shape().to_vec())
            }),
        ));
    }
    p.push((
        "isnan".into(),
        same(),
        Box::new(move || shape_of(t.isnan())),
    ));
    p.push((
        "isfinite".into(),
        same(),
        Box::new(move || shape_of(t.isfinite())),
    ));
    p.push((
        "nan_to_num".into(),
        same(),
        Box::new(move || shape_of(t.nan_to_num(0.0, None, Some(-1.0)))),
    ));
    p.push((
        "softmax(-1)".into(),
        Want::NoPanic,
        Box::new(move || shape_of(t.softmax(-1))),
    ));
    p.push((
        "logsumexp(all)".into(),
        Want::NoPanic,
        Box::new(move || shape_of(t.logsumexp((), false))),
    ));
    p.push(("eq".into(), same(), Box::new(move || shape_of(t.eq(t)))));
    p.push((
        "lt_scalar".into(),
        same(),
        Box::new(move || shape_of(t.lt(1))),
    ));
    p.push((
        "compare".into(),
        same(),
        Box::new(move || shape_of(t.compare(CompareOp::Ge, t))),
    ));
    p.push((
        "where".into(),
        same(),
        Box::new(move || shape_of(Tensor::where_cond(&t.eq(0)?, t, t))),
    ));
    p.push((
        "where_scalar".into(),
        same(),
        Box::new(move || shape_of(Tensor::where_cond(&t.eq(0)?, t, 1))),
    ));
    p.push((
        "masked_fill_".into(),
        same(),
        Box::new(move || {
            t.masked_fill_(&t.eq(0)?, 1)?;
            Ok(t.shape().to_vec())
        }),
    ));
    p.push((
        "masked_fill".into(),
        same(),
        Box::new(move || shape_of(t.masked_fill(&t.eq(0)?, 1))),
    ));
    p.push((
        "masked_select".into(),
        Want::Shape(vec![0]),
        Box::new(move || shape_of(t.masked_select(&t.eq(0)?))),
    ));
    p.push((
        "add_".into(),
        Want::NoPanic,
        Box::new(move || {
            t.add_(t)?;
            Ok(t.shape().to_vec())
        }),
    ));
    p.push((
        "fill_".into(),
        same(),
        Box::new(move || {
            t.fill_(1)?;
            Ok(t.shape().to_vec())
        }),
    ));
    p.push((
        "copy_".into(),
        same(),
        Box::new(move || {
            t.copy_(t)?;
            Ok(t.shape().to_vec())
        }),
    ));
    p.push((
        "to_dtype".into(),
        same(),
        Box::new(move || shape_of(t.to_dtype(DType::F64))),
    ));
    p.push((
        "to_vec".into(),
        Want::Shape(vec![0]),
        Box::new(move || Ok(vec![t.to_dtype(DType::F64)?.to_vec::<f64>()?.len()])),
    ));
    p.push((
        "zeros_like".into(),
        same(),
        Box::new(move || shape_of(t.zeros_like())),
    ));
    p.push((
        "full_like".into(),
        same(),
        Box::new(move || shape_of(t.full_like(3))),
    ));
    p.push((
        "deep_clone".into(),
        same(),
        Box::new(move || shape_of(t.deep_clone())),
    ));
    p.push((
        "contiguous".into(),
        same(),
        Box::new(move || shape_of(t.contiguous())),
    ));
    p.push((
        "flatten".into(),
        Want::Shape(vec![0]),
        Box::new(move || shape_of(t.flatten(0, -1))),
    ));
    p.push((
        "reshape".into(),
        Want::Shape(vec![0]),
        Box::new(move || shape_of(t.reshape(&[0i64][..]))),
    ));
    // Onto its own sizes, whose product may overflow before the 0 among them.
    let own: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    let own2 = own.clone();
    p.push((
        "reshape_own".into(),
        same(),
        Box::new(move || shape_of(t.reshape(&own[..]))),
    ));
    p.push((
        "view_own".into(),
        same(),
        Box::new(move || shape_of(t.view(&own2[..]))),
    ));
    p.push((
        "print".into(),
        Want::NoPanic,
        Box::new(move || {
            let _ = format!("{t}");
            let _ = format!("{t:?}");
            Ok(vec![])
        }),
    ));
    // Full reductions: the identity for sum/prod (and NaN for mean), an error for max/argmax.
    p.push((
        "sum".into(),
        Want::Shape(vec![]),
        Box::new(move || shape_of(t.sum())),
    ));
    p.push((
        "mean".into(),
        Want::ShapeOrUnsupported(vec![]),
        Box::new(move || shape_of(t.mean())),
    ));
    p.push((
        "prod".into(),
        Want::Shape(vec![]),
        Box::new(move || shape_of(t.prod())),
    ));
    p.push((
        "any".into(),
        Want::NoPanic,
        Box::new(move || shape_of(t.any())),
    ));
    p.push((
        "all".into(),
        Want::NoPanic,
        Box::new(move || shape_of(t.all())),
    ));
    p.push((
        "var".into(),
        Want::NoPanic,
        Box::new(move || shape_of(t.var(1.0))),
    ));
    p.push((
        "max".into(),
        Want::Error,
        Box::new(move || shape_of(t.max())),
    ));
    p.push((
        "min".into(),
        Want::Error,
        Box::new(move || shape_of(t.min())),
    ));
    p.push((
        "argmax".into(),
        Want::Error,
        Box::new(move || shape_of(t.argmax())),
    ));
    p.push((
        "argmin".into(),
        Want::Error,
        Box::new(move || shape_of(t.argmin())),
    ));
    p.push((
        "sort_flat".into(),
        Want::Shape(vec![0]),
        Box::new(move || shape_of(t.ravel()?.sort(0, false).map(|r| r.0))),
    ));
    // The shape and selection ops over the whole tensor.
    p.push((
        "ravel".into(),
        Want::Shape(vec![0]),
        Box::new(move || shape_of(t.ravel())),
    ));
    p.push((
        "flip_all".into(),
        same(),
        Box::new(move || shape_of(t.flip((0..rank as i64).collect::<Vec<_>>()))),
    ));
    p.push((
        "roll_flat".into(),
        same(),
        Box::new(move || shape_of(t.roll(&[3], &[]))),
    ));
    p.push((
        "repeat_ones".into(),
        same(),
        Box::new(move || shape_of(t.repeat(vec![1usize; rank]))),
    ));
    // Doubling each dimension: an error where a size passes i64 (PyTorch's sizes).
    let doubled: Option<Vec<usize>> = shape
        .iter()
        .map(|&d| d.checked_mul(2).filter(|&d| d <= isize::MAX as usize))
        .collect();
    p.push((
        "repeat_twos".into(),
        doubled.map_or(Want::Error, Want::Shape),
        Box::new(move || shape_of(t.repeat(vec![2usize; rank]))),
    ));
    p.push((
        "nonzero".into(),
        Want::Shape(vec![0, rank]),
        Box::new(move || shape_of(t.nonzero())),
    ));
    p.push((
        "argwhere".into(),
        Want::Shape(vec![0, rank]),
        Box::new(move || shape_of(t.argwhere())),
    ));
    p.push((
        "unique".into(),
        Want::Shape(vec![0]),
        Box::new(move || shape_of(t.unique(true, true, true).map(|r| r.0))),
    ));
    p.push((
        "unique_inverse".into(),
        same(),
        Box::new(move || shape_of(t.unique(true, true, false).map(|r| r.1.unwrap()))),
    ));
    p.push((
        "unique_counts".into(),
        Want::Shape(vec![0]),
        Box::new(move || shape_of(t.unique_consecutive(false, true).map(|r| r.2.unwrap()))),
    ));
    // one_hot: int64 only; with no elements the class count must be given.
    let mut hot = shape.to_vec();
    hot.push(3);
    p.push((
        "one_hot".into(),
        if dtype == DType::I64 {
            Want::Shape(hot)
        } else {
            Want::Error
        },
        Box::new(move || shape_of(t.one_hot(Some(3)))),
    ));
    p.push((
        "one_hot_inferred".into(),
        Want::Error,
        Box::new(move || shape_of(t.one_hot(None))),
    ));
    if rank >= 2 {
        p.push((
            "tril".into(),
            same(),
            Box::new(move || shape_of(t.tril(-1))),
        ));
        p.push(("triu".into(), same(), Box::new(move || shape_of(t.triu(2)))));
    } else {
        p.push((
            "tril".into(),
            Want::Error,
            Box::new(move || shape_of(t.tril(0))),
        ));
    }
    // Along each dimension.
    for d in 0..rank {
        let di = d as isize;
        for keepdim in [false, true] {
            let out = reduced(shape, d, keepdim);
            let ok_if_small = |s: Vec<usize>| {
                if small(&s) {
                    Want::Shape(s)
                } else {
                    Want::Large(s)
                }
            };
            let k = if keepdim { "k" } else { "" };
            p.push((
                format!("sum_dim{d}{k}"),
                ok_if_small(out.clone()),
                Box::new(move || shape_of(t.sum_dim(di, keepdim))),
            ));
            p.push((
                format!("prod_dim{d}{k}"),
                ok_if_small(out.clone()),
                Box::new(move || shape_of(t.prod_dim(di, keepdim))),
            ));
            let mean_want = if small(&out) {
                Want::ShapeOrUnsupported(out.clone())
            } else {
                Want::Large(out.clone())
            };
            p.push((
                format!("mean_dim{d}{k}"),
                mean_want,
                Box::new(move || shape_of(t.mean_dim(di, keepdim))),
            ));
            // max/min/argmax over an empty dimension are errors; over a non-empty one (the
            // tensor is still empty) the result has no elements.
            let arg_want = || {
                if shape[d] == 0 {
                    Want::Error
                } else {
                    Want::ShapeOrUnsupported(out.clone())
                }
            };
            p.push((
                format!("amax{d}{k}"),
                arg_want(),
                Box::new(move || shape_of(t.amax(di, keepdim))),
            ));
            p.push((
                format!("max_dim{d}{k}"),
                arg_want(),
                Box::new(move || shape_of(t.max_dim(di, keepdim).map(|r| r.0))),
            ));
            p.push((
                format!("min_dim{d}{k}"),
                arg_want(),
                Box::new(move || shape_of(t.min_dim(di, keepdim).map(|r| r.1))),
            ));
            p.push((
                format!("argmax_dim{d}{k}"),
                arg_want(),
                Box::new(move || shape_of(t.argmax_dim(di, keepdim))),
            ));
            p.push((
                format!("argmin_dim{d}{k}"),
                arg_want(),
                Box::new(move || shape_of(t.argmin_dim(di, keepdim))),
            ));
            p.push((
                format!("any_dim{d}{k}"),
                ok_if_small(out.clone()),
                Box::new(move || shape_of(t.any_dim(di, keepdim))),
            ));
        }
        p.push((
            format!("cumsum{d}"),
            same(),
            Box::new(move || shape_of(t.cumsum(di))),
        ));
        p.push((
            format!("cumprod{d}"),
            same(),
            Box::new(move || shape_of(t.cumprod(di))),
        ));
        p.push((
            format!("sort{d}"),
            same(),
            Box::new(move || shape_of(t.sort(di, false).map(|r| r.0))),
        ));
        p.push((
            format!("sort_desc{d}"),
            same(),
            Box::new(move || shape_of(t.sort(di, true).map(|r| r.1))),
        ));
        p.push((
            format!("argsort{d}"),
            same(),
            Box::new(move || shape_of(t.argsort(di, false))),
        ));
        let mut k0 = shape.to_vec();
        k0[d] = 0;
        p.push((
            format!("topk0_{d}"),
            Want::Shape(k0.clone()),
            Box::new(move || shape_of(t.topk(0, di, true, true).map(|r| r.0))),
        ));
        p.push((
            format!("topk0_smallest{d}"),
            Want::Shape(k0),
            Box::new(move || shape_of(t.topk(0, di, false, false).map(|r| r.1))),
        ));
        if shape[d] > 0 {
            let mut k1 = shape.to_vec();
            k1[d] = 1;
            p.push((
                format!("topk1_{d}"),
                Want::Shape(k1),
                Box::new(move || shape_of(t.topk(1, di, true, true).map(|r| r.0))),
            ));
        }
        // cat along d doubles the size (an error past i64), stack inserts a 2.
        let mut cat = shape.to_vec();
        cat[d] = cat[d].saturating_mul(2);
        let cat_want = if cat[d] <= isize::MAX as usize {
            Want::Shape(cat)
        } else {
            Want::NoPanic
        };
        p.push((
            format!("cat{d}"),
            cat_want,
            Box::new(move || shape_of(Tensor::cat(&[t, t], di))),
        ));
        let mut stack = shape.to_vec();
        stack.insert(d, 2);
        p.push((
            format!("stack{d}"),
            Want::Shape(stack),
            Box::new(move || shape_of(Tensor::stack(&[t, t], di))),
        ));
        let mut tr = shape.to_vec();
        tr.swap(0, d);
        p.push((
            format!("transpose0_{d}"),
            Want::Shape(tr.clone()),
            Box::new(move || shape_of(t.transpose(0, di))),
        ));
        p.push((
            format!("transpose_contiguous0_{d}"),
            Want::Shape(tr),
            Box::new(move || shape_of(t.transpose(0, di)?.contiguous())),
        ));
        let mut nar = shape.to_vec();
        nar[d] = 0;
        p.push((
            format!("narrow{d}"),
            Want::Shape(nar),
            Box::new(move || shape_of(t.narrow(di, 0, 0))),
        ));
        let mut unsq = shape.to_vec();
        unsq.insert(d, 1);
        p.push((
            format!("unsqueeze{d}"),
            Want::Shape(unsq),
            Box::new(move || shape_of(t.unsqueeze(di))),
        ));
        // The shape ops along d: one piece, two chunks, a split into [1, size], a flip, a
        // roll, a diagonal with dimension 0, a flatten of 0..=d.
        p.push((
            format!("split_whole{d}"),
            same(),
            Box::new(move || shape_of(t.split(shape[d].max(1), di).map(|v| v[0].clone()))),
        ));
        p.push((
            format!("split_sizes{d}"),
            same(),
            Box::new(move || shape_of(t.split_sizes(&[shape[d]], di).map(|v| v[0].clone()))),
        ));
        let mut half = shape.to_vec();
        half[d] = shape[d].div_ceil(2);
        p.push((
            format!("chunk2_{d}"),
            Want::Shape(half),
            Box::new(move || shape_of(t.chunk(2, di).map(|v| v[0].clone()))),
        ));
        let mut unf = shape.to_vec();
        unf.insert(d, 1);
        p.push((
            format!("unflatten{d}"),
            Want::Shape(unf),
            Box::new(move || shape_of(t.unflatten(di, &[1, -1]))),
        ));
        p.push((
            format!("flip{d}"),
            same(),
            Box::new(move || shape_of(t.flip([di]))),
        ));
        p.push((
            format!("roll{d}"),
            same(),
            Box::new(move || shape_of(t.roll(&[-5], &[di]))),
        ));
        if d > 0 {
            let mut diag: Vec<usize> = (1..rank).filter(|&k| k != d).map(|k| shape[k]).collect();
            diag.push(shape[0].min(shape[d]));
            p.push((
                format!("diagonal0_{d}"),
                Want::Shape(diag),
                Box::new(move || shape_of(t.diagonal(0, 0, di))),
            ));
        }
        let merged = numel(&shape[..=d]);
        let flat = merged.map(|m| {
            let mut f = vec![m];
            f.extend_from_slice(&shape[d + 1..]);
            f
        });
        p.push((
            format!("flatten0_{d}"),
            flat.map_or(Want::Error, Want::Shape),
            Box::new(move || shape_of(t.flatten(0, di))),
        ));
        // Indexing: a slice at d, an integer at d (when the dimension has one).
        let mut sl = shape.to_vec();
        sl[d] = sl[d].min(1);
        p.push((
            format!("index_slice{d}"),
            Want::Shape(sl),
            Box::new(move || {
                let mut items = vec![IndexItem::Ellipsis; 0];
                items.extend((0..d).map(|_| IndexItem::range(0, i64::MAX)));
                items.push(IndexItem::range(0, 1));
                shape_of(t.i(&items))
            }),
        ));
        if shape[d] > 0 {
            let mut int = shape.to_vec();
            int.remove(d);
            p.push((
                format!("index_int{d}"),
                Want::Shape(int),
                Box::new(move || {
                    let mut items: Vec<IndexItem> =
                        (0..d).map(|_| IndexItem::range(0, i64::MAX)).collect();
                    items.push(IndexItem::Int(-1));
                    shape_of(t.i(&items))
                }),
            ));
        }
    }
    p.push((
        "index_ellipsis".into(),
        same(),
        Box::new(move || shape_of(t.i(&s![ELLIPSIS]))),
    ));
    // Full sort of each dimension's extreme: argmax of a flattened empty tensor is an error.
    // Matmul: self @ self^T over the last two dimensions (batch dims broadcast), when the result
    // is empty or small.
    if rank >= 2 {
        let mut out = shape.to_vec();
        out[rank - 1] = shape[rank - 2];
        let want = if small(&out) {
            Want::ShapeOrUnsupported(out)
        } else {
            Want::Large(out)
        };
        p.push((
            "matmul".into(),
            want,
            Box::new(move || shape_of(t.matmul(&t.transpose(-1, -2)?))),
        ));
        let mut out = shape.to_vec();
        out[rank - 2] = shape[rank - 1];
        let want = if small(&out) {
            Want::ShapeOrUnsupported(out)
        } else {
            Want::Large(out)
        };
        p.push((
            "matmul_tn".into(),
            want,
            Box::new(move || shape_of(t.transpose(-1, -2)?.matmul(t))),
        ));
    }
    if rank == 3 {
        let out = vec![shape[0], shape[1], shape[1]];
        let want = if small(&out) {
            Want::ShapeOrUnsupported(out)
        } else {
            Want::Large(out)
        };
        p.push((
            "bmm".into(),
            want,
            Box::new(move || shape_of(t.bmm(&t.transpose(1, 2)?))),
        ));
    }
    if rank == 1 {
        p.push((
            "dot".into(),
            Want::ShapeOrUnsupported(vec![]),
            Box::new(move || shape_of(t.matmul(t))),
        ));
    }
    p.push((
        "broadcast_add_scalar_tensor".into(),
        same(),
        Box::new(move || {
            let one = Tensor::ones(&[1usize][..], dtype, t.device())?;
            shape_of(t.add(&one))
        }),
    ));
    p
}

/// Runs one probe; `None` when it behaves, a description otherwise.
fn check(
    name: &str,
    want: &Want,
    f: &dyn Fn() -> genesis::Result<Vec<usize>>,
    dtype: DType,
    device: Device,
) -> Option<String> {
    if let Want::Large(w) = want
        && numel(w).is_some()
    {
        return None;
    }
    let got = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(e) => {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let at = PANIC_AT.lock().unwrap().clone();
            return Some(format!("{name}: panicked at {at}: {msg}"));
        }
    };
    match (want, got) {
        (Want::Large(_), Err(_)) => None,
        (Want::Large(w), Ok(s)) => Some(format!("{name}: gave {s:?} for {w:?}, too large")),
        (Want::NoPanic, _) => None,
        (Want::Error, Err(_)) => None,
        (Want::Error, Ok(s)) => Some(format!("{name}: gave shape {s:?}, PyTorch raises")),
        (Want::Shape(w) | Want::ShapeOrUnsupported(w), Ok(s)) if &s == w => None,
        (Want::Shape(w) | Want::ShapeOrUnsupported(w), Ok(s)) => {
            Some(format!("{name}: shape {s:?}, want {w:?}"))
        }
        (Want::Shape(_) | Want::ShapeOrUnsupported(_), Err(e))
            if unsupported_small(name, dtype, device) =>
        {
            let _ = e;
            None
        }
        (Want::Shape(w) | Want::ShapeOrUnsupported(w), Err(e)) => {
            Some(format!("{name}: error {e} (want shape {w:?})"))
        }
    }
}

/// Whether the probe named `name` fails on a small non-empty tensor of `dtype` on `device`: the
/// op does not take the dtype there (matmul of f64 and integers: on the CPU only). Probes are
/// rebuilt for a small tensor of each rank a probe may be made for, and the first of that name
/// is run.
fn unsupported_small(name: &str, dtype: DType, device: Device) -> bool {
    for rank in [2, 3, 1, 4, 5, 6, 7, 8, 0] {
        let shape = vec![2usize; rank];
        let t = Tensor::zeros(&shape[..], dtype, device).unwrap();
        let found = probes(&t, &shape, dtype)
            .into_iter()
            .find(|(n, _, _)| n == name);
        if let Some((_, _, f)) = found {
            return f().is_err();
        }
    }
    false
}

/// Runs every probe of every shape and dtype on `device`, naming the current one in `current`.
fn sweep(device: Device, current: &Mutex<String>) -> Vec<String> {
    let mut failures = Vec::new();
    for shape in shapes() {
        for dtype in DType::ALL {
            let t = match Tensor::zeros(&shape[..], dtype, device) {
                Ok(t) => t,
                Err(e) => {
                    failures.push(format!("zeros {shape:?} {dtype}: {e}"));
                    continue;
                }
            };
            if t.shape() != &shape[..] || t.numel() != 0 {
                failures.push(format!("zeros {shape:?}: shape {:?}", t.shape()));
            }
            for (name, want, f) in probes(&t, &shape, dtype) {
                let tag = format!("{device:?} {shape:?} {dtype} {name}");
                *current.lock().unwrap() = tag.clone();
                if let Some(msg) = check(&name, &want, &*f, dtype, device) {
                    failures.push(format!("{device:?} {shape:?} {dtype} {msg}"));
                }
            }
        }
    }
    failures
}

/// Where the last caught panic was raised (the silenced hook records it).
static PANIC_AT: Mutex<String> = Mutex::new(String::new());

/// Runs `work` on a thread with panics silenced (each is caught and reported); fails naming
/// the probe in `current` if it takes over `limit`.
fn with_watchdog(
    limit: Duration,
    work: impl FnOnce(&Mutex<String>) -> Vec<String> + Send + 'static,
) {
    let current = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = mpsc::channel();
    let c = Arc::clone(&current);
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|info| {
        if let Some(l) = info.location() {
            *PANIC_AT.lock().unwrap() = l.to_string();
        }
    }));
    std::thread::spawn(move || {
        let _ = tx.send(work(&c));
    });
    let got = rx.recv_timeout(limit);
    std::panic::set_hook(hook);
    match got {
        Ok(failures) => {
            assert!(
                failures.is_empty(),
                "{} probe(s) failed:\n{}",
                failures.len(),
                failures.join("\n")
            );
        }
        Err(_) => panic!("hung (over {limit:?}) in {}", current.lock().unwrap()),
    }
}

#[test]
fn empty_tensors_with_huge_dimensions() {
    let _r = Release;
    for device in devices() {
        with_watchdog(Duration::from_secs(WATCHDOG_S), move |c| sweep(device, c));
    }
}

/// Seconds the whole sweep of one device may take (under a second on the CPU in the debug
/// build): past it, the probe that hangs is named.
const WATCHDOG_S: u64 = 120;

fn sign_positive_zero(t: &Tensor) -> bool {
    let v = t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
    v.iter().all(|x| *x == 0.0 && x.is_sign_positive())
}

#[test]
fn sums_of_negative_zero_and_of_nothing_are_positive_zero() {
    let _r = Release;
    for device in devices() {
        for dtype in [DType::F16, DType::BF16, DType::F32, DType::F64] {
            for n in [1usize, 2, 3, 17, 1000, 5000] {
                let t = Tensor::full(&[n][..], -0.0f64, device)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap();
                let s = t.sum().unwrap();
                assert!(
                    sign_positive_zero(&s),
                    "{device:?} {dtype} sum of {n} x -0.0"
                );
                let s = t.sum_dim(0, false).unwrap();
                assert!(
                    sign_positive_zero(&s),
                    "{device:?} {dtype} sum_dim of {n} x -0.0"
                );
                let m = t
                    .reshape(&[1i64, n as i64][..])
                    .unwrap()
                    .sum_dim(1, true)
                    .unwrap();
                assert!(
                    sign_positive_zero(&m),
                    "{device:?} {dtype} sum_dim(1) of {n} x -0.0"
                );
                let m = t.mean().unwrap();
                assert!(
                    sign_positive_zero(&m),
                    "{device:?} {dtype} mean of {n} x -0.0"
                );
                let m = t.mean_dim(0, false).unwrap();
                assert!(
                    sign_positive_zero(&m),
                    "{device:?} {dtype} mean_dim of {n} x -0.0"
                );
                // Along the outer dimension of a [n, 3] tensor (the strided reduction).
                let t2 = Tensor::full(&[n, 3][..], -0.0f64, device)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap();
                let s = t2.sum_dim(0, false).unwrap();
                assert!(
                    sign_positive_zero(&s),
                    "{device:?} {dtype} sum_dim(0) of [{n}, 3] -0.0"
                );
                // prod, max and min keep -0.0.
                let p = t
                    .max()
                    .unwrap()
                    .to_dtype(DType::F64)
                    .unwrap()
                    .to_vec::<f64>()
                    .unwrap();
                assert!(
                    p[0] == 0.0 && p[0].is_sign_negative(),
                    "{device:?} {dtype} max of -0.0"
                );
                let p = t
                    .min()
                    .unwrap()
                    .to_dtype(DType::F64)
                    .unwrap()
                    .to_vec::<f64>()
                    .unwrap();
                assert!(
                    p[0] == 0.0 && p[0].is_sign_negative(),
                    "{device:?} {dtype} min of -0.0"
                );
                if n == 1 {
                    let p = t
                        .prod()
                        .unwrap()
                        .to_dtype(DType::F64)
                        .unwrap()
                        .to_vec::<f64>()
                        .unwrap();
                    assert!(
                        p[0] == 0.0 && p[0].is_sign_negative(),
                        "{device:?} {dtype} prod of -0.0"
                    );
                }
            }
            for shape in [vec![0usize], vec![0, 3], vec![3, 0], vec![0, 1 << 40]] {
                let t = Tensor::zeros(&shape[..], dtype, device).unwrap();
                let s = t.sum().unwrap();
                assert!(
                    sign_positive_zero(&s),
                    "{device:?} {dtype} sum of {shape:?}"
                );
                let p = t
                    .prod()
                    .unwrap()
                    .to_dtype(DType::F64)
                    .unwrap()
                    .to_vec::<f64>()
                    .unwrap();
                assert_eq!(p, [1.0], "{device:?} {dtype} prod of {shape:?}");
                let m = t
                    .mean()
                    .unwrap()
                    .to_dtype(DType::F64)
                    .unwrap()
                    .to_vec::<f64>()
                    .unwrap();
                assert!(m[0].is_nan(), "{device:?} {dtype} mean of {shape:?}");
                if small(&reduced(&shape, 0, false)) {
                    let s = t.sum_dim(0, false).unwrap();
                    assert!(
                        sign_positive_zero(&s),
                        "{device:?} {dtype} sum_dim(0) of {shape:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn argmax_and_argmin_refuse_bool() {
    let _r = Release;
    for device in devices() {
        let t = Tensor::from_bools(&[true, false, true, false], &[2, 2][..], device).unwrap();
        let is_dtype_error = |r: genesis::Result<Tensor>| {
            matches!(
                r,
                Err(Error::Storage(
                    genesis_storage::Error::UnsupportedDType { .. }
                ))
            )
        };
        assert!(is_dtype_error(t.argmax()), "{device:?} argmax");
        assert!(is_dtype_error(t.argmin()), "{device:?} argmin");
        for d in [0isize, 1, -1] {
            for k in [false, true] {
                assert!(
                    is_dtype_error(t.argmax_dim(d, k)),
                    "{device:?} argmax_dim {d}"
                );
                assert!(
                    is_dtype_error(t.argmin_dim(d, k)),
                    "{device:?} argmin_dim {d}"
                );
            }
        }
        // max/min of bool stay (PyTorch has them).
        assert!(t.max().is_ok() && t.min().is_ok());
    }
}
