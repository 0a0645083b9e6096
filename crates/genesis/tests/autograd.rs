//! Reverse-mode autograd: every recorded op's gradient against central finite differences in
//! f64 on generated inputs (shapes, broadcasts, views), and the engine's semantics (leaves,
//! accumulation, `no_grad`, retained graphs, hooks, saved tensors modified in place, the
//! functional `grad`).

use genesis::{DType, Device, Error, Generator, Result, Tensor, autograd, no_grad, s};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const CPU: Device = Device::Cpu;

/// A named op of one tensor, and of two.
type Unary = (&'static str, fn(&Tensor) -> Result<Tensor>);
mod common;
use common::{Release, devices};

type Binary = (&'static str, fn(&Tensor, &Tensor) -> Result<Tensor>);
type Case = (&'static str, Box<dyn Fn(&Tensor) -> Result<Tensor>>);

/// A random f64 tensor of `shape` (normal values), or positive ones (`positive`).
fn input(g: &Generator, shape: &[usize], positive: bool) -> Tensor {
    let x = g.randn(shape, DType::F64, CPU).unwrap();
    if positive {
        x.abs().unwrap().add(0.5).unwrap()
    } else {
        x
    }
}

/// Checks the gradients of `f` at `inputs` (f64, contiguous) against central differences of
/// the scalar `sum(f(inputs) * w)` for random weights `w`.
fn gradcheck(name: &str, inputs: &[Tensor], f: &dyn Fn(&[Tensor]) -> Result<Tensor>) {
    let g = Generator::new(99);
    let leaves: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.detach().requires_grad_(true).unwrap())
        .collect();
    let out = f(&leaves).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(
        out.requires_grad(),
        "{name}: the output does not require grad"
    );
    let w = g.randn(out.shape(), DType::F64, CPU).unwrap();
    out.mul(&w).unwrap().sum().unwrap().backward().unwrap();
    let loss_at =
        |xs: &[Tensor]| -> f64 { no_grad(|| f(xs)?.mul(&w)?.sum()?.item::<f64>()).unwrap() };
    for (k, leaf) in leaves.iter().enumerate() {
        let base = inputs[k].to_vec::<f64>().unwrap();
        let analytic = match leaf.grad() {
            Some(gr) => {
                assert_eq!(gr.shape(), leaf.shape(), "{name}: gradient {k}'s shape");
                assert_eq!(gr.dtype(), DType::F64, "{name}: gradient {k}'s dtype");
                gr.contiguous().unwrap().to_vec::<f64>().unwrap()
            }
            None => vec![0.0; base.len()],
        };
        let eps = 1e-6;
        for i in 0..base.len() {
            let at = |delta: f64| {
                let mut v = base.clone();
                v[i] += delta;
                let mut xs = inputs.to_vec();
                xs[k] = Tensor::from_slice(&v, inputs[k].shape(), CPU).unwrap();
                loss_at(&xs)
            };
            let numeric = (at(eps) - at(-eps)) / (2.0 * eps);
            let a = analytic[i];
            assert!(
                (a - numeric).abs() <= 1e-6 + 1e-5 * numeric.abs().max(a.abs()),
                "{name}: d/d input {k}[{i}]: autograd {a}, finite differences {numeric}"
            );
        }
    }
}

/// A random shape of rank 0..=3, sizes 1..=4.
fn shape(rng: &mut SmallRng) -> Vec<usize> {
    let rank = rng.random_range(0..=3);
    (0..rank).map(|_| rng.random_range(1..=4)).collect()
}

/// `shape` with some sizes made 1 and some leading dimensions dropped: broadcasts to it.
fn broadcastable(rng: &mut SmallRng, shape: &[usize]) -> Vec<usize> {
    let drop = rng.random_range(0..=shape.len());
    shape[drop..]
        .iter()
        .map(|&n| if rng.random_bool(0.3) { 1 } else { n })
        .collect()
}

#[test]
fn binary_ops_broadcast_their_gradients_back() {
    let g = Generator::new(1);
    let mut rng = SmallRng::seed_from_u64(1);
    for case in 0..60 {
        let a_shape = shape(&mut rng);
        let b_shape = broadcastable(&mut rng, &a_shape);
        let (a_shape, b_shape) = if rng.random_bool(0.5) {
            (a_shape, b_shape)
        } else {
            (b_shape, a_shape)
        };
        let a = input(&g, &a_shape, true);
        let b = input(&g, &b_shape, true);
        let ops: [Binary; 7] = [
            ("add", |a, b| a.add(b)),
            ("sub", |a, b| a.sub(b)),
            ("mul", |a, b| a.mul(b)),
            ("div", |a, b| a.div(b)),
            ("pow", |a, b| a.pow(b)),
            ("maximum", |a, b| a.maximum(b)),
            ("minimum", |a, b| a.minimum(b)),
        ];
        for (name, op) in ops {
            let label = format!("case {case}: {name} {a_shape:?} {b_shape:?}");
            gradcheck(&label, &[a.clone(), b.clone()], &|x| op(&x[0], &x[1]));
        }
    }
}

#[test]
fn scalar_operands_on_either_side() {
    let g = Generator::new(2);
    let x = input(&g, &[3, 2], true);
    let cases: [Unary; 12] = [
        ("x + 2", |x| x.add(2.0)),
        ("x - 2", |x| x.sub(2)),
        ("x * 3", |x| x.mul(3.0)),
        ("x / 4", |x| x.div(4.0)),
        ("x ^ 2.5", |x| x.pow(2.5)),
        ("2 - x", |x| 2.0 - x),
        ("2 / x", |x| 2.0 / x),
        ("3 * x", |x| 3.0 * x),
        ("2 ^ x", |x| Tensor::scalar_pow(2.0, x)),
        ("x.pow_scalar(3)", |x| x.pow_scalar(3)),
        ("x.binary_scalar(div, 4)", |x| {
            x.binary_scalar(genesis::BinaryOp::Div, 4.0)
        }),
        ("max(x, 1)", |x| x.maximum(1.0)),
    ];
    for (name, f) in cases {
        gradcheck(name, std::slice::from_ref(&x), &|xs| f(&xs[0]));
    }
}

#[test]
fn unary_ops_of_the_table() {
    use genesis::UnaryOp::*;
    let g = Generator::new(3);
    let mut rng = SmallRng::seed_from_u64(3);
    for op in [
        Neg, Abs, Relu, Exp, Log, Sqrt, Tanh, Sigmoid, Sin, Cos, Tan, Erf, Erfc, Rsqrt, Reciprocal,
        Square, Log1p, Expm1, Log2, Log10, Gelu, GeluTanh, Silu, Softplus, Asin, Acos, Atan, Sinh,
        Cosh, Asinh, Acosh, Atanh,
    ] {
        let sh = shape(&mut rng);
        // Domains: positive for the logarithms and roots (above 1 for acosh), small for tan,
        // inside (-0.8, 0.8) for asin, acos and atanh.
        let positive = matches!(
            op,
            Log | Sqrt | Rsqrt | Log2 | Log10 | Reciprocal | Log1p | Acosh
        );
        let x = input(&g, &sh, positive);
        let x = match op {
            Tan => x.mul(0.3).unwrap(),
            Acosh => x.add(1.0).unwrap(),
            Asin | Acos | Atanh => x.tanh().unwrap().mul(0.8).unwrap(),
            _ => x,
        };
        gradcheck(&format!("{} {sh:?}", op.name()), &[x], &|xs| {
            xs[0].unary(op)
        });
    }
    // Flat ops: no gradient flows (zero).
    let x = input(&g, &[4], false).requires_grad_(true).unwrap();
    x.floor()
        .unwrap()
        .mul(2.0)
        .unwrap()
        .sum()
        .unwrap()
        .backward()
        .unwrap();
    assert!(
        x.grad()
            .is_none_or(|g| g.to_vec::<f64>().unwrap() == [0.0; 4])
    );
}

#[test]
fn matmul_of_every_rank_pair() {
    let g = Generator::new(4);
    for (a, b) in [
        (vec![3], vec![3]),
        (vec![3], vec![3, 2]),
        (vec![2, 3], vec![3]),
        (vec![2, 3], vec![3, 4]),
        (vec![2, 2, 3], vec![3, 4]),
        (vec![3], vec![2, 3, 4]),
        (vec![2, 1, 2, 3], vec![3, 3, 2]),
    ] {
        let (x, y) = (input(&g, &a, false), input(&g, &b, false));
        gradcheck(&format!("matmul {a:?} {b:?}"), &[x, y], &|t| {
            t[0].matmul(&t[1])
        });
    }
}

#[test]
fn reductions_views_and_selection() {
    let g = Generator::new(5);
    let x = input(&g, &[2, 3, 4], false);
    let cases: Vec<Case> = vec![
        ("sum", Box::new(|x| x.sum())),
        ("mean", Box::new(|x| x.mean())),
        ("sum_dim 1", Box::new(|x| x.sum_dim([1], false))),
        (
            "sum_dim -1 0 keepdim",
            Box::new(|x| x.sum_dim([-1, 0], true)),
        ),
        ("mean_dim 2", Box::new(|x| x.mean_dim([2], false))),
        ("softmax 1", Box::new(|x| x.softmax(1))),
        ("softmax -1", Box::new(|x| x.softmax(-1))),
        ("log_softmax 0", Box::new(|x| x.log_softmax(0))),
        ("logsumexp 2", Box::new(|x| x.logsumexp([2], false))),
        (
            "logsumexp 0 1 keepdim",
            Box::new(|x| x.logsumexp([0, 1], true)),
        ),
        (
            "reshape",
            Box::new(|x| x.reshape([4, -1])?.mul(&x.reshape([4, 6])?)),
        ),
        ("transpose", Box::new(|x| x.transpose(0, 2)?.contiguous())),
        ("permute", Box::new(|x| x.permute([2, 0, 1])?.mul(2.0))),
        (
            "unsqueeze squeeze",
            Box::new(|x| x.unsqueeze(1)?.squeeze(1)?.exp()),
        ),
        ("expand", Box::new(|x| x.narrow(1, 0, 1)?.expand([2, 5, 4]))),
        ("narrow", Box::new(|x| x.narrow(2, 1, 2)?.square())),
        ("slice", Box::new(|x| x.i(&s![.., 1.., ..;2])?.mul(3.0))),
        (
            "index by tensor",
            Box::new(|x| {
                let idx = Tensor::from_slice(&[2i64, 0, 2], [3], CPU)?;
                x.i(&s![1, idx])
            }),
        ),
        (
            "index_select",
            Box::new(|x| {
                let idx = Tensor::from_slice(&[3i64, 1, 3], [3], CPU)?;
                x.index_select(2, &idx)
            }),
        ),
        (
            "gather",
            Box::new(|x| {
                let idx = Tensor::from_slice(&[0i64, 2, 2, 1, 0, 0], [1, 2, 3], CPU)?;
                x.gather(1, &idx.expand([2, 2, 3])?.contiguous()?)
            }),
        ),
        (
            "cat",
            Box::new(|x| Tensor::cat(&[x, &x.mul(2.0)?, &x.narrow(1, 0, 1)?], 1)),
        ),
        ("stack", Box::new(|x| Tensor::stack(&[x, &x.exp()?], 0))),
        (
            "split",
            Box::new(|x| {
                let parts = x.split(2, 2)?;
                parts[0].mul(&parts[1])
            }),
        ),
        (
            "where",
            Box::new(|x| {
                let c = x.gt_scalar(0.0)?;
                Tensor::where_cond(&c, x, &x.mul(-2.0)?)
            }),
        ),
        (
            "chunk",
            Box::new(|x| {
                let parts = x.chunk(3, 1)?;
                parts[2].sub(&parts[0])
            }),
        ),
        ("flip", Box::new(|x| x.flip([0, 2])?.mul(x))),
        ("roll", Box::new(|x| x.roll(&[1, -3], &[1, 2]))),
        ("repeat", Box::new(|x| x.repeat([2, 1, 1, 2]))),
        ("tile", Box::new(|x| x.narrow(0, 0, 1)?.tile([3]))),
        (
            "repeat_interleave",
            Box::new(|x| {
                x.repeat_interleave(2, Some(1))?
                    .mul(&x.repeat_interleave(2, Some(1))?)
            }),
        ),
        (
            "repeat_interleave flat",
            Box::new(|x| x.repeat_interleave(3, None)),
        ),
        (
            "mm",
            Box::new(|x| x.reshape([6, 4])?.mm(&x.reshape([4, 6])?)),
        ),
        (
            "addmm",
            Box::new(|x| {
                let m1 = x.reshape([3, 8])?.narrow(1, 0, 6)?;
                let bias = x.reshape([24])?.narrow(0, 0, 4)?;
                bias.addmm(&m1, &x.reshape([6, 4])?, 0.5, -2.0)
            }),
        ),
        (
            "baddbmm",
            Box::new(|x| {
                x.narrow(2, 0, 3)?
                    .baddbmm(x, &x.transpose(1, 2)?, -1.5, 0.25)
            }),
        ),
        (
            "kron",
            Box::new(|x| {
                x.narrow(0, 0, 1)?
                    .narrow(1, 0, 2)?
                    .kron(&x.narrow(2, 0, 2)?)
            }),
        ),
        (
            "take_along_dim",
            Box::new(|x| {
                let idx = Tensor::from_slice(&[3i64, 0, 3, 1, 2, 2], [1, 3, 2], CPU)?;
                x.take_along_dim(&idx, Some(2))
            }),
        ),
        (
            "movedim rot90 unbind",
            Box::new(|x| {
                let y = x.movedim(0, 2)?.rot90(1, [0, 1])?;
                let parts = y.unbind(2)?;
                parts[0].mul(&parts[1])
            }),
        ),
        (
            "tensordot hstack vstack",
            Box::new(|x| {
                let t = x.tensordot(&x.exp()?, [1, 2], [1, 2])?;
                let h = Tensor::hstack(&[&t, &t.sin()?])?;
                Tensor::vstack(&[&h, &h.mul(2.0)?])
            }),
        ),
        (
            "logaddexp var_mean std_mean aminmax",
            Box::new(|x| {
                let l = x.logaddexp(&x.mul(-2.0)?)?;
                let (v, m) = x.var_mean([2], 1.0, true)?;
                let (sd, _) = x.std_mean([0, 1], 0.0, false)?;
                let (lo, hi) = x.aminmax(Some(1), true)?;
                l.add(&v)?.add(&m)?.add(&sd)?.add(&lo)?.add(&hi)
            }),
        ),
        (
            "pad constant reflect replicate circular",
            Box::new(|x| {
                use genesis::PadMode::*;
                let c = x.pad(&[1, -1, 2, 0], Constant, 0.5)?;
                let r = x.pad(&[2, 1], Reflect, 0.0)?;
                let p = x.pad(&[1, 2, 1, 0], Replicate, 0.0)?;
                let q = x.pad(&[-1, 2], Circular, 0.0)?;
                c.sum()?.add(
                    &r.mul(&r)?
                        .sum()?
                        .add(&p.sin()?.sum()?)?
                        .add(&q.exp()?.sum()?)?,
                )
            }),
        ),
        (
            "normalize cosine_similarity",
            Box::new(|x| {
                let n = x.normalize(2.0, 1, 1e-12)?;
                let c = x.cosine_similarity(&x.exp()?, -1, 1e-8)?;
                n.sum_dim([2], false)?.mul(&c)
            }),
        ),
        (
            "logaddexp2 xlogy sinc logit dist inner fliplr flipud deg2rad frac",
            Box::new(|x| {
                let a = x.logaddexp2(&x.mul(-2.0)?)?;
                let b = x.exp()?.xlogy(&x.exp()?.add(0.5)?)?;
                let s = x.mul(0.3)?.add(0.1)?.sinc()?;
                let l = x.sigmoid()?.logit(None)?;
                let f = x.mul(1.7)?.frac()?.add(&x.deg2rad()?)?;
                let d = x.dist(&x.sin()?, 3.0)?;
                let i = x.inner(&x.cos()?)?.sum()?;
                a.add(&b)?
                    .add(&s)?
                    .add(&l)?
                    .add(&f)?
                    .fliplr()?
                    .flipud()?
                    .mul(&x.cos()?)?
                    .sum()?
                    .add(&d)?
                    .add(&i)
            }),
        ),
        (
            "diag diag_embed diagflat",
            Box::new(|x| {
                let e = x.diag_embed(1, 0, -1)?.sin()?.sum()?;
                let m = x.narrow(0, 0, 1)?.reshape([3, 4])?;
                let d = m.diag(1)?.exp()?.sum()?;
                let v = x.narrow(1, 0, 1)?.reshape([-1isize])?;
                let f = v.diag(-1)?.mul(&v.diagflat(-1)?)?.sum()?;
                e.add(&d)?.add(&f)
            }),
        ),
        (
            "block_diag cartesian_prod trapezoid vander matrix_power renorm",
            Box::new(|x| {
                let a = x.narrow(0, 0, 1)?.reshape([3, 4])?;
                let b = Tensor::block_diag(&[&a, &a.narrow(0, 0, 2)?.sin()?])?
                    .exp()?
                    .sum()?;
                let v = a.narrow(0, 0, 1)?.reshape([4])?;
                let c = Tensor::cartesian_prod(&[&v, &v.cos()?])?.prod()?;
                let t = x.trapezoid(0.5, 1)?.sum()?;
                let s = Tensor::linspace(0.0, 2.0, 3, x.dtype(), CPU)?;
                let tx = x.trapezoid_x(&s, 1)?.sum()?;
                let vd = v.vander(Some(3), true)?.sum()?;
                let m = a.narrow(1, 0, 3)?.mul(0.5)?;
                let p = m.matrix_power(3)?.sum()?;
                let r = x.renorm(2.0, 0, 1.0)?.sum()?;
                b.add(&c)?.add(&t)?.add(&tx)?.add(&vd)?.add(&p)?.add(&r)
            }),
        ),
        (
            "cummax cummin logcumsumexp",
            Box::new(|x| {
                let (mx, _) = x.cummax(1)?;
                let (mn, _) = x.cummin(-1)?;
                let l = x.logcumsumexp(2)?;
                mx.add(&mn.exp()?)?.add(&l)
            }),
        ),
        (
            "atan2 hypot",
            Box::new(|x| {
                let a = x.atan2(&x.cos()?.add(0.5)?)?;
                a.add(&x.hypot(&x.exp()?)?)?
                    .add(&x.atan2(0.7)?)?
                    .add(&x.hypot(-1.5)?)
            }),
        ),
        (
            "remainder fmod",
            Box::new(|x| {
                let r = x.mul(3.0)?.remainder(&x.exp()?.add(0.25)?)?;
                r.add(&x.mul(5.0)?.fmod(&x.cos()?.add(1.5)?)?)
            }),
        ),
        (
            "floor_divide (zero gradient)",
            Box::new(|x| x.floor_divide(&x.exp()?)?.add(x)),
        ),
        (
            "index_add",
            Box::new(|x| {
                let idx = Tensor::from_slice(&[2i64, 0, 2], [3], CPU)?;
                x.index_add(1, &idx, &x.exp()?, 2.0)
            }),
        ),
        (
            "index_copy",
            Box::new(|x| {
                let idx = Tensor::from_slice(&[3i64, 0], [2], CPU)?;
                x.index_copy(2, &idx, &x.narrow(2, 1, 2)?.sin()?)
            }),
        ),
        (
            "index_fill",
            Box::new(|x| {
                let idx = Tensor::from_slice(&[-1i64], [1], CPU)?;
                x.index_fill(0, &idx, 0.5)?.mul(x)
            }),
        ),
        (
            "index_add_ index_copy_ index_fill_ in place",
            Box::new(|x| {
                let y = x.mul(3.0)?;
                let idx = Tensor::from_slice(&[1i64, 1], [2], CPU)?;
                y.index_add_(2, &idx, &x.narrow(2, 0, 2)?.cos()?, -1)?;
                y.index_copy_(
                    0,
                    &Tensor::from_slice(&[0i64], [1], CPU)?,
                    &x.narrow(0, 1, 1)?,
                )?;
                y.index_fill_(1, &Tensor::from_slice(&[2i64], [1], CPU)?, 1.0)?;
                Ok(y)
            }),
        ),
        (
            "einsum batched",
            Box::new(|x| Tensor::einsum("bij,bkj->bik", &[x, &x.exp()?])),
        ),
        (
            "einsum diagonal",
            Box::new(|x| Tensor::einsum("iji->j", &[&x.narrow(2, 0, 2)?])),
        ),
        (
            "einsum ellipsis",
            Box::new(|x| {
                let v = x.narrow(0, 0, 1)?.narrow(1, 0, 1)?.reshape([4])?;
                Tensor::einsum("...j,j->...", &[x, &v])
            }),
        ),
        (
            "mv dot trace",
            Box::new(|x| {
                let m = x.reshape([6, 4])?;
                let v = x.reshape([24])?.narrow(0, 0, 4)?;
                let col = m.narrow(1, 0, 1)?.reshape([6])?;
                m.mv(&v)?.dot(&col)?.add(&m.narrow(0, 0, 4)?.trace()?)
            }),
        ),
        (
            "repeat_interleave counts",
            Box::new(|x| {
                let counts = Tensor::from_slice(&[2i64, 0, 1, 3], [4], CPU)?;
                x.repeat_interleave_tensor(&counts, Some(-1))
            }),
        ),
        ("diagonal", Box::new(|x| x.diagonal(1, 1, 2))),
        ("tril triu", Box::new(|x| x.tril(0)?.add(&x.triu(2)?))),
        (
            "flatten unflatten",
            Box::new(|x| x.flatten(0, 1)?.unflatten(0, &[3, 2])?.sin()),
        ),
        (
            "transpose then view",
            Box::new(|x| x.transpose(1, 2)?.reshape([2, 12])),
        ),
        ("clone", Box::new(|x| x.deep_clone())),
        ("max", Box::new(|x| x.max())),
        ("amin 0 2", Box::new(|x| x.amin([0, 2], false))),
        ("amax keepdim", Box::new(|x| x.amax([1], true))),
        ("max_dim", Box::new(|x| Ok(x.max_dim(1, false)?.0))),
        ("min_dim keepdim", Box::new(|x| Ok(x.min_dim(-1, true)?.0))),
        ("sort", Box::new(|x| Ok(x.sort(2, true)?.0))),
        ("topk", Box::new(|x| Ok(x.topk(2, 1, true, true)?.0))),
        ("var", Box::new(|x| x.var(1.0))),
        ("var_dim", Box::new(|x| x.var_dim([2], 0.0, true))),
        ("std_dim", Box::new(|x| x.std_dim([0, 1], 1.0, false))),
        ("cumsum", Box::new(|x| x.cumsum(1))),
        ("clamp", Box::new(|x| x.clamp(Some(-0.5), Some(0.7)))),
        ("clamp_min", Box::new(|x| x.clamp_min(0.1))),
        (
            "masked_fill",
            Box::new(|x| x.masked_fill(&x.gt_scalar(0.3)?, 2.0)),
        ),
        (
            "masked_select",
            Box::new(|x| x.masked_select(&x.lt_scalar(0.0)?)),
        ),
        (
            "masked_select broadcast",
            Box::new(|x| {
                let m = Tensor::from_bools(&[true, false, true, true], [4], CPU)?;
                x.masked_select(&m)
            }),
        ),
        ("nan_to_num", Box::new(|x| x.nan_to_num(0.0, None, None))),
        ("prod", Box::new(|x| x.narrow(1, 0, 2)?.prod())),
        ("cumprod", Box::new(|x| x.cumprod(2))),
        ("cumprod dim 0", Box::new(|x| x.cumprod(0))),
        ("prod_dim", Box::new(|x| x.prod_dim(2, false))),
        ("prod_dim keepdim", Box::new(|x| x.prod_dim(0, true))),
        (
            "scatter",
            Box::new(|x| {
                let idx = Tensor::from_slice(&[2i64, 0, 1, 3, 1, 0], [1, 2, 3], CPU)?;
                x.mul(2.0)?
                    .scatter(2, &idx.expand([2, 2, 3])?.contiguous()?, &x.exp()?)
            }),
        ),
        (
            "scatter_add",
            Box::new(|x| {
                let idx = Tensor::from_slice(&[1i64, 1, 0, 2, 0, 1], [1, 2, 3], CPU)?;
                x.scatter_add(1, &idx.expand([2, 2, 3])?.contiguous()?, &x.sin()?)
            }),
        ),
        ("softplus_with", Box::new(|x| x.softplus_with(2.0, 1.0))),
    ];
    for (name, f) in cases {
        gradcheck(name, std::slice::from_ref(&x), &|xs| f(&xs[0]));
    }
}

#[test]
fn a_composed_network_matches_finite_differences() {
    // A two-layer perceptron with a cross entropy, as the MLP example builds it.
    let g = Generator::new(6);
    let x = input(&g, &[5, 4], false);
    let w1 = input(&g, &[4, 6], false);
    let b1 = input(&g, &[6], false);
    let w2 = input(&g, &[6, 3], false);
    let labels = Tensor::from_slice(&[0i64, 2, 1, 1, 0], [5, 1], CPU).unwrap();
    gradcheck("mlp", &[x, w1, b1, w2], &|t| {
        let h = t[0].matmul(&t[1])?.add(&t[2])?.gelu()?;
        let logits = h.matmul(&t[3])?;
        let logp = logits.log_softmax(1)?;
        logp.gather(1, &labels)?.mean()?.neg()
    });
}

#[test]
fn float32_gradients_agree_with_float64() {
    let g = Generator::new(7);
    let x = input(&g, &[3, 4], false);
    let w = input(&g, &[4, 2], false);
    let grads = |dtype: DType| {
        let x = x.to_dtype(dtype).unwrap().requires_grad_(true).unwrap();
        let w = w.to_dtype(dtype).unwrap().requires_grad_(true).unwrap();
        let y = x.matmul(&w).unwrap().tanh().unwrap().softmax(1).unwrap();
        y.mul(&y).unwrap().sum().unwrap().backward().unwrap();
        let gx = x.grad().unwrap();
        assert_eq!(gx.dtype(), dtype);
        gx.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
    };
    for (a, b) in grads(DType::F32).iter().zip(grads(DType::F64)) {
        assert!((a - b).abs() < 1e-5, "{a} vs {b}");
    }
}

#[test]
fn casts_send_the_gradient_back_in_the_input_dtype() {
    let x = Tensor::from_slice(&[1.5f64, -2.0], [2], CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let y = x.to_dtype(DType::F32).unwrap().mul(3.0).unwrap();
    assert_eq!(y.dtype(), DType::F32);
    y.to_dtype(DType::BF16)
        .unwrap()
        .sum()
        .unwrap()
        .backward()
        .unwrap();
    let g = x.grad().unwrap();
    assert_eq!(g.dtype(), DType::F64);
    assert_eq!(g.to_vec::<f64>().unwrap(), [3.0, 3.0]);
    // A cast to an integer dtype ends the graph.
    assert!(!x.to_dtype(DType::I64).unwrap().requires_grad());
}

#[test]
fn leaves_accumulate_and_zero_grad_resets() {
    let w = Tensor::from_slice(&[1.0f32, -2.0], [2], CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    assert!(w.is_leaf() && w.requires_grad() && w.grad().is_none());
    for _ in 0..2 {
        w.mul(&w).unwrap().sum().unwrap().backward().unwrap();
    }
    assert_eq!(w.grad().unwrap().to_vec::<f32>().unwrap(), [4.0, -8.0]);
    w.zero_grad();
    assert!(w.grad().is_none());
    // A tensor used twice gets both contributions.
    let y = w.mul(3.0).unwrap().add(&w).unwrap().sum().unwrap();
    assert_eq!(y.grad_fn_name(), Some("sum"));
    y.backward().unwrap();
    assert_eq!(w.grad().unwrap().to_vec::<f32>().unwrap(), [4.0, 4.0]);
    // Printing says what PyTorch's repr says.
    assert_eq!(w.to_string(), "tensor([ 1., -2.], requires_grad=True)");
    assert_eq!(
        w.log_softmax(0).unwrap().to_string(),
        "tensor([-0.0486, -3.0486], grad_fn=<LogSoftmaxBackward0>)"
    );
    // Clones share the leaf's gradient.
    let same = w.clone();
    assert_eq!(same.grad().unwrap().to_vec::<f32>().unwrap(), [4.0, 4.0]);
}

#[test]
fn no_grad_records_nothing_and_detach_cuts_the_graph() {
    let w = Tensor::ones([3], DType::F32, CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let y = no_grad(|| w.mul(2.0)).unwrap();
    assert!(!y.requires_grad() && y.grad_fn_name().is_none());
    {
        let _guard = genesis::NoGradGuard::new();
        assert!(!autograd::is_grad_enabled());
        assert!(!w.exp().unwrap().requires_grad());
        assert!(autograd::enable_grad(|| w.exp().unwrap().requires_grad()));
    }
    assert!(autograd::is_grad_enabled());
    let d = w.mul(2.0).unwrap().detach();
    assert!(!d.requires_grad() && d.is_leaf());
    // Integer results (comparisons, indices) never require grad.
    assert!(!w.gt_scalar(0.0).unwrap().requires_grad());
    assert!(!w.argmax().unwrap().requires_grad());
}

#[test]
fn misuse_is_a_typed_error() {
    let w = Tensor::ones([2], DType::F32, CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    // In place on a leaf that requires grad; allowed under no_grad (an optimiser's step).
    assert!(matches!(w.add_(1.0), Err(Error::Autograd { .. })));
    assert!(matches!(w.fill_(1.0), Err(Error::Autograd { .. })));
    no_grad(|| w.sub_(0.5)).unwrap();
    assert_eq!(w.to_vec::<f32>().unwrap(), [0.5, 0.5]);
    // Integer tensors cannot require grad.
    let i = Tensor::from_slice(&[1i64], [1], CPU).unwrap();
    assert!(matches!(
        i.requires_grad_(true),
        Err(Error::Autograd { .. })
    ));
    // A non-scalar backward needs its gradient; a plain tensor has no graph.
    let v = w.mul(2.0).unwrap();
    assert!(matches!(v.backward(), Err(Error::Autograd { .. })));
    v.backward_with(Some(&Tensor::ones([2], DType::F32, CPU).unwrap()), false)
        .unwrap();
    assert_eq!(w.grad().unwrap().to_vec::<f32>().unwrap(), [2.0, 2.0]);
    let plain = Tensor::ones([1], DType::F32, CPU).unwrap();
    assert!(matches!(plain.backward(), Err(Error::Autograd { .. })));
    // Only a leaf stops requiring grad.
    assert!(matches!(
        w.mul(1.0).unwrap().requires_grad_(false),
        Err(Error::Autograd { .. })
    ));
    // In-place ops with an operand that requires grad, and ops without a gradient yet.
    let plain = Tensor::zeros([2], DType::F32, CPU).unwrap();
    assert!(matches!(plain.add_(&w), Err(Error::Autograd { .. })));
    assert!(matches!(plain.copy_(&w), Err(Error::Autograd { .. })));
    no_grad(|| plain.copy_(&w)).unwrap();
    // The general reduce has no gradient (its named forms do); a move to a device records.
    assert!(matches!(
        w.reduce(genesis::ReduceOp::Sum, None, false),
        Err(Error::Autograd { .. })
    ));
    assert!(w.argmax().is_ok() && w.any().is_ok());
    let moved = w.to(CPU).unwrap();
    assert_eq!(moved.grad_fn_name(), Some("to"));
    // out= forms refuse inputs that require grad.
    let mut out = Tensor::zeros([2], DType::F32, CPU).unwrap();
    assert!(matches!(
        w.add_out(&w, &mut out),
        Err(Error::Autograd { .. })
    ));
}

#[test]
fn a_saved_tensor_modified_in_place_fails_backward_naming_the_op() {
    let x = Tensor::from_slice(&[1.0f32, 2.0], [2], CPU).unwrap();
    let w = Tensor::from_slice(&[3.0f32, 4.0], [2], CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let y = w.mul(&x).unwrap().sum().unwrap();
    x.add_(1.0).unwrap(); // x was saved by mul for w's gradient
    match y.backward() {
        Err(Error::SavedTensorModified { op, .. }) => assert_eq!(op, "mul"),
        other => panic!("expected SavedTensorModified, got {other:?}"),
    }
}

#[test]
fn graphs_are_freed_unless_retained() {
    let w = Tensor::from_slice(&[2.0f64], [1], CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let y = w.exp().unwrap().sum().unwrap();
    y.backward_with(None, true).unwrap();
    y.backward().unwrap(); // the retained graph runs again, then is freed
    assert!((w.grad().unwrap().item::<f64>().unwrap() - 2.0 * 2f64.exp()).abs() < 1e-12);
    assert!(matches!(y.backward(), Err(Error::Autograd { .. })));
}

#[test]
fn hooks_see_and_replace_gradients() {
    use std::sync::{Arc, Mutex};
    let w = Tensor::from_slice(&[1.0f32, 2.0], [2], CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let h = w.mul(3.0).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    h.register_hook(move |g| {
        s2.lock().unwrap().push(g.to_vec::<f32>()?);
        Ok(Some(g.mul(10.0)?)) // the gradient flowing on is replaced
    })
    .unwrap();
    h.retain_grad().unwrap();
    let posts = Arc::new(Mutex::new(0));
    let p2 = posts.clone();
    w.register_post_accumulate_grad_hook(move |_| {
        *p2.lock().unwrap() += 1;
        Ok(())
    })
    .unwrap();
    h.sum().unwrap().backward().unwrap();
    assert_eq!(*seen.lock().unwrap(), [vec![1.0f32, 1.0]]);
    assert_eq!(h.grad().unwrap().to_vec::<f32>().unwrap(), [10.0, 10.0]);
    assert_eq!(w.grad().unwrap().to_vec::<f32>().unwrap(), [30.0, 30.0]);
    assert_eq!(*posts.lock().unwrap(), 1);
    assert!(h.register_post_accumulate_grad_hook(|_| Ok(())).is_err());
    // A hook that returns a gradient of another shape is an error, not a corrupted gradient.
    let v = Tensor::ones([3], DType::F32, CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    v.register_hook(|g| Ok(Some(g.sum()?))).unwrap();
    assert!(matches!(
        v.sum().unwrap().backward(),
        Err(Error::Autograd { .. })
    ));
    assert!(v.grad().is_none());
}

#[test]
fn functional_grad_accumulates_nothing() {
    let x = Tensor::from_slice(&[1.0f64, 2.0, 3.0], [3], CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let h = x.square().unwrap();
    let y = h.sum().unwrap();
    let gs = autograd::grad(&[&y], &[&x, &h], &[None], false).unwrap();
    assert_eq!(
        gs[0].as_ref().unwrap().to_vec::<f64>().unwrap(),
        [2.0, 4.0, 6.0]
    );
    assert_eq!(
        gs[1].as_ref().unwrap().to_vec::<f64>().unwrap(),
        [1.0, 1.0, 1.0]
    );
    assert!(x.grad().is_none());
}

/// On a GPU, the gradients of a composed network (matmul, broadcasting, GELU, log_softmax,
/// gather, views, reductions, max, cat) agree with the CPU's.
#[test]
fn cuda_gradients_agree_with_the_cpu() {
    let _release = Release;
    if devices().len() < 2 {
        return;
    }
    let g = Generator::new(8);
    let host: Vec<Tensor> = [vec![6, 5], vec![5, 7], vec![7], vec![7, 3]]
        .iter()
        .map(|s| g.randn(&s[..], DType::F32, CPU).unwrap())
        .collect();
    let labels = [0i64, 2, 1, 1, 0, 2];
    let run = |dev: Device| -> Vec<Vec<f32>> {
        let p: Vec<Tensor> = host
            .iter()
            .map(|t| t.to(dev).unwrap().requires_grad_(true).unwrap())
            .collect();
        let y = Tensor::from_slice(&labels, [6, 1], dev).unwrap();
        let h = p[0]
            .matmul(&p[1])
            .unwrap()
            .add(&p[2])
            .unwrap()
            .gelu()
            .unwrap();
        let h = Tensor::cat(&[&h, &h.flip([1]).unwrap()], 0).unwrap();
        let logits = h.matmul(&p[3]).unwrap().narrow(0, 0, 6).unwrap();
        let nll = logits
            .log_softmax(1)
            .unwrap()
            .gather(1, &y)
            .unwrap()
            .mean()
            .unwrap();
        let loss = nll
            .neg()
            .unwrap()
            .add(&logits.amax([1], false).unwrap().sum().unwrap())
            .unwrap();
        loss.backward().unwrap();
        p.iter()
            .map(|t| t.grad().unwrap().to_vec::<f32>().unwrap())
            .collect()
    };
    let (cpu, gpu) = (run(CPU), run(Device::Cuda(0)));
    for (k, (a, b)) in cpu.iter().zip(&gpu).enumerate() {
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-5 * (1.0 + x.abs()),
                "param {k}[{i}]: cpu {x}, cuda {y}"
            );
        }
    }
}

/// Operands that are views (transposes, stepped slices, broadcast columns) read in place by
/// the ops: their gradients land in the viewed elements only.
#[test]
fn strided_operands_get_their_gradients() {
    let g = Generator::new(9);
    let a = input(&g, &[4, 3], true);
    let b = input(&g, &[3, 8], true);
    let ops: [Binary; 5] = [
        ("add", |a, b| a.add(b)),
        ("mul", |a, b| a.mul(b)),
        ("div", |a, b| a.div(b)),
        ("pow", |a, b| a.pow(b)),
        ("maximum", |a, b| a.maximum(b)),
    ];
    for (name, op) in ops {
        gradcheck(
            &format!("{name} of a transpose and a stepped slice"),
            &[a.clone(), b.clone()],
            &|x| op(&x[0].t()?, &x[1].i(&s![.., ..;2])?),
        );
        gradcheck(
            &format!("{name} of a column broadcast"),
            &[a.clone(), b.clone()],
            &|x| op(&x[0].narrow(1, 0, 1)?, &x[1].i(&s![.., 1..5])?.t()?),
        );
    }
    gradcheck("matmul of transposes", &[a, b], &|x| {
        x[1].t()?.matmul(&x[0].t()?)
    });
}

/// Half-precision leaves get half-precision gradients close to the float64 ones.
#[test]
fn half_precision_gradients() {
    let g = Generator::new(10);
    let x = input(&g, &[4, 6], false);
    let w = input(&g, &[6, 3], false);
    // d/dw of sum(sum_0(softmax(gelu(x w)))²), the same chain in each dtype.
    let chain = |x: &Tensor, w: &Tensor| {
        x.matmul(w)
            .unwrap()
            .gelu()
            .unwrap()
            .softmax(1)
            .unwrap()
            .sum_dim([0], false)
            .unwrap()
            .square()
            .unwrap()
            .sum()
            .unwrap()
            .backward()
            .unwrap();
    };
    let reference = {
        let (x, w) = (
            x.clone().requires_grad_(true).unwrap(),
            w.clone().requires_grad_(true).unwrap(),
        );
        chain(&x, &w);
        w.grad().unwrap().to_vec::<f64>().unwrap()
    };
    for dtype in [DType::F16, DType::BF16] {
        let xh = x.to_dtype(dtype).unwrap().requires_grad_(true).unwrap();
        let wh = w.to_dtype(dtype).unwrap().requires_grad_(true).unwrap();
        chain(&xh, &wh);
        let gw = wh.grad().unwrap();
        assert_eq!(gw.dtype(), dtype);
        let got = gw.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
        let tol = if dtype == DType::F16 { 2e-2 } else { 8e-2 };
        for (a, b) in got.iter().zip(&reference) {
            assert!(
                (a - b).abs() <= tol * (1.0 + b.abs()),
                "{dtype}: {a} vs {b}"
            );
        }
    }
}

/// A checkpointed function keeps nothing for the backward and gives the same gradients, to
/// its inputs and to the tensors it captures (also when no input requires grad).
#[test]
fn checkpoint_recomputes_and_gives_the_same_gradients() {
    let g = Generator::new(12);
    let w = g
        .randn([4, 4], DType::F64, CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let x = g.randn([3, 4], DType::F64, CPU).unwrap();
    let body = |x: &Tensor, w: &Tensor| x.matmul(w)?.gelu()?.softmax(1)?.matmul(w);
    for input_requires_grad in [true, false] {
        let xi = if input_requires_grad {
            x.clone().requires_grad_(true).unwrap()
        } else {
            x.clone()
        };
        body(&xi, &w)
            .unwrap()
            .square()
            .unwrap()
            .sum()
            .unwrap()
            .backward()
            .unwrap();
        let (want_w, want_x) = (w.grad().unwrap(), xi.grad());
        w.zero_grad();
        xi.zero_grad();
        let w2 = w.clone();
        let y = autograd::checkpoint(&[&xi], move |t| body(&t[0], &w2)).unwrap();
        assert_eq!(y.grad_fn_name(), Some("checkpoint"));
        y.square().unwrap().sum().unwrap().backward().unwrap();
        assert_eq!(
            w.grad().unwrap().to_vec::<f64>().unwrap(),
            want_w.to_vec::<f64>().unwrap()
        );
        assert_eq!(
            xi.grad().map(|g| g.to_vec::<f64>().unwrap()),
            want_x.map(|g| g.to_vec::<f64>().unwrap())
        );
        w.zero_grad();
    }
    // Without grad mode it is a plain call.
    let y = no_grad(|| autograd::checkpoint(&[&x], |t| t[0].exp())).unwrap();
    assert!(!y.requires_grad());
}

/// A graph of a long chain of ops is walked and freed without recursion (no stack overflow),
/// after a backward and without one.
#[test]
fn deep_graphs_are_walked_and_freed_without_recursion() {
    let n = 100_000;
    let x = Tensor::ones([1], DType::F32, CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let mut y = x.clone();
    for _ in 0..n {
        y = y.add(1.0).unwrap();
    }
    y.backward().unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f32>().unwrap(), [1.0]);
    let mut z = x.clone();
    for _ in 0..n {
        z = z.mul(1.0).unwrap();
    }
    drop(z);
}

/// The gradient of a product is exact when elements are zero (one zero: only it gets the
/// product of the others; two: nothing does).
#[test]
fn products_with_zeros_have_exact_gradients() {
    let x = Tensor::from_slice(&[2.0f64, 0.0, 3.0, 0.0, 5.0, 4.0], [2, 3], CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    x.prod_dim(1, false)
        .unwrap()
        .sum()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(
        x.grad().unwrap().to_vec::<f64>().unwrap(),
        [0.0, 6.0, 0.0, 20.0, 0.0, 0.0]
    );
    x.zero_grad();
    x.prod().unwrap().backward().unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f64>().unwrap(), [0.0; 6]);
    // cumprod with zeros, against central differences (the function is polynomial: exact).
    let base = [
        2.0f64, 0.0, 3.0, 0.0, 5.0, 1.5, -1.0, 0.0, 0.5, 2.0, 3.0, 0.7,
    ];
    gradcheck(
        "cumprod with zeros",
        &[Tensor::from_slice(&base, [2, 6], CPU).unwrap()],
        &|t| t[0].cumprod(1),
    );
}

/// No public op on a tensor that requires grad silently drops the gradient: each result
/// requires grad, or the op is a typed error.
#[test]
fn no_op_silently_cuts_the_graph() {
    let g = Generator::new(13);
    let x = g
        .randn([3, 4], DType::F32, CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let idx = Tensor::from_slice(&[2i64, 0, 1], [3, 1], CPU).unwrap();
    let rows = Tensor::from_slice(&[1i64, 0], [2], CPU).unwrap();
    let mask = x.gt_scalar(0.0).unwrap();
    let mut ops: Vec<Case> = vec![
        ("clamp", Box::new(|x| x.clamp(Some(-1.0), Some(1.0)))),
        ("linear", Box::new(|x| x.linear(x, None))),
        (
            "layer_norm",
            Box::new(|x| x.layer_norm(&[4], None, None, 1e-5)),
        ),
        ("rms_norm", Box::new(|x| x.rms_norm(&[4], None, 1e-6))),
        (
            "index_put",
            Box::new(|x| x.index_put(&s![0], &x.i(&s![1])?, false)),
        ),
        ("softplus_with", Box::new(|x| x.softplus_with(2.0, 10.0))),
        ("nan_to_num", Box::new(|x| x.nan_to_num(0.0, None, None))),
        ("cumsum", Box::new(|x| x.cumsum(1))),
        ("cumprod", Box::new(|x| x.cumprod(0))),
        ("sort", Box::new(|x| Ok(x.sort(1, false)?.0))),
        ("topk", Box::new(|x| Ok(x.topk(2, 1, true, true)?.0))),
        ("max_dim", Box::new(|x| Ok(x.max_dim(0, true)?.0))),
        ("gather", Box::new(move |x| x.gather(1, &idx))),
        ("index_select", Box::new(move |x| x.index_select(0, &rows))),
        ("masked_fill", Box::new(move |x| x.masked_fill(&mask, 0.0))),
        ("matmul", Box::new(|x| x.matmul(&x.t()?))),
        (
            "bmm",
            Box::new(|x| x.unsqueeze(0)?.bmm(&x.t()?.unsqueeze(0)?)),
        ),
        ("var", Box::new(|x| x.var_dim([1], 1.0, false))),
        ("std", Box::new(|x| x.std(1.0))),
        ("prod", Box::new(|x| x.prod_dim(1, false))),
        ("logsumexp", Box::new(|x| x.logsumexp([1], false))),
        ("softmax", Box::new(|x| x.softmax(0))),
        ("repeat", Box::new(|x| x.repeat([2, 1]))),
        ("tile", Box::new(|x| x.tile([2]))),
        ("flip", Box::new(|x| x.flip([0]))),
        ("roll", Box::new(|x| x.roll(&[1], &[0]))),
        ("tril", Box::new(|x| x.tril(0))),
        ("diagonal", Box::new(|x| x.diagonal(0, 0, 1))),
        ("flatten", Box::new(|x| x.flatten(0, 1))),
        ("ravel", Box::new(|x| x.ravel())),
        ("unflatten", Box::new(|x| x.unflatten(1, &[2, 2]))),
        ("split", Box::new(|x| Ok(x.split(2, 1)?.remove(0)))),
        (
            "split_sizes",
            Box::new(|x| Ok(x.split_sizes(&[1, 3], 1)?.remove(1))),
        ),
        ("chunk", Box::new(|x| Ok(x.chunk(2, 0)?.remove(1)))),
        ("expand", Box::new(|x| x.unsqueeze(0)?.expand([2, 3, 4]))),
        ("view", Box::new(|x| x.view([12]))),
        ("permute", Box::new(|x| x.permute([1, 0]))),
        ("squeeze", Box::new(|x| x.unsqueeze(0)?.squeeze(0))),
        ("contiguous", Box::new(|x| x.t()?.contiguous())),
        ("to_dtype", Box::new(|x| x.to_dtype(DType::F64))),
        ("to", Box::new(|x| x.to(CPU))),
        ("deep_clone", Box::new(|x| x.deep_clone())),
        ("index", Box::new(|x| x.i(&s![.., 1..3]))),
        ("cat", Box::new(|x| Tensor::cat(&[x, x], 0))),
        ("stack", Box::new(|x| Tensor::stack(&[x, x], 0))),
        (
            "where",
            Box::new(|x| Tensor::where_cond(&x.gt_scalar(0.0)?, x, 0.0)),
        ),
        (
            "masked_select",
            Box::new(|x| x.masked_select(&x.gt_scalar(0.0)?)),
        ),
        (
            "scatter",
            Box::new(|x| x.scatter(1, &Tensor::from_slice(&[0i64], [1, 1], CPU)?, x)),
        ),
        ("amax", Box::new(|x| x.amax([0], false))),
        ("mean", Box::new(|x| x.mean())),
        ("pow_scalar", Box::new(|x| x.pow_scalar(2))),
        ("maximum", Box::new(|x| x.maximum(0.0))),
        ("unique", Box::new(|x| Ok(x.unique(true, false, false)?.0))),
    ];
    for op in genesis::UnaryOp::ALL {
        ops.push((op.name(), Box::new(move |x: &Tensor| x.unary(op))));
    }
    for (name, f) in ops {
        match f(&x) {
            Ok(y) => {
                assert!(
                    y.requires_grad() || !y.dtype().is_float(),
                    "{name}: the result does not require grad"
                )
            }
            Err(e) => assert!(matches!(e, Error::Autograd { .. }), "{name}: {e}"),
        }
    }
}

/// Tensors (with their autograd state) still cross threads: a graph built on one thread is
/// walked on another.
#[test]
fn tensors_that_require_grad_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Tensor>();
    let w = Tensor::from_slice(&[2.0f32], [1], CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let y = w.mul(&w).unwrap().sum().unwrap();
    std::thread::spawn(move || y.backward().unwrap())
        .join()
        .unwrap();
    assert_eq!(w.grad().unwrap().to_vec::<f32>().unwrap(), [4.0]);
}

#[test]
fn normalisations_match_finite_differences() {
    let g = Generator::new(21);
    for shape in [vec![5], vec![3, 4], vec![2, 3, 4]] {
        let last = shape.len() - 1;
        for k in 1..=shape.len().min(2) {
            let norm = &shape[shape.len() - k..];
            let x = input(&g, &shape, false);
            let (w, b) = (input(&g, norm, false), input(&g, norm, false));
            let name = format!("layer_norm {shape:?} over {norm:?}");
            gradcheck(&name, &[x.clone(), w.clone(), b.clone()], &|t| {
                t[0].layer_norm(norm, Some(&t[1]), Some(&t[2]), 1e-5)
            });
            gradcheck(
                &format!("{name} without affine"),
                std::slice::from_ref(&x),
                &|t| t[0].layer_norm(norm, None, None, 1e-5),
            );
            gradcheck(
                &format!("rms_norm {shape:?} over {norm:?}"),
                &[x, w],
                &|t| t[0].rms_norm(norm, Some(&t[1]), 1e-6),
            );
        }
        // Against the composed definition.
        let x = input(&g, &shape, false);
        let d = [last as isize];
        let mean = x.mean_dim(&d[..], true).unwrap();
        let var = x
            .sub(&mean)
            .unwrap()
            .square()
            .unwrap()
            .mean_dim(&d[..], true)
            .unwrap();
        let want = x
            .sub(&mean)
            .unwrap()
            .div(&var.add(1e-5).unwrap().sqrt().unwrap())
            .unwrap();
        let got = x.layer_norm(&shape[last..], None, None, 1e-5).unwrap();
        let diff = got.sub(&want).unwrap().abs().unwrap().sum().unwrap();
        assert!(diff.item::<f64>().unwrap() < 1e-12);
    }
    let x = input(&g, &[2, 3], false);
    assert!(
        x.layer_norm(&[2], None, None, 1e-5).is_err(),
        "not the trailing dims"
    );
    let w = input(&g, &[2], false);
    assert!(
        x.layer_norm(&[3], Some(&w), None, 1e-5).is_err(),
        "weight shape"
    );
}

#[test]
fn split_pieces_send_their_gradients_to_their_slices() {
    // The view gradient writes through the piece's layout (no scatter): pieces of a
    // transposed input, with gaps (only two of three pieces used).
    let g = Generator::new(5);
    let x = input(&g, &[4, 6], false);
    gradcheck("split of a transpose", &[x], &|t| {
        let p = t[0].t()?.split(2, 0)?;
        p[0].mul(&p[2])
    });
    let y = input(&g, &[2, 9, 3], false);
    gradcheck("chunk, diagonal and a stepped slice", &[y], &|t| {
        let c = t[0].chunk(3, 1)?;
        c[1].diagonal(0, 1, 2)?
            .add(&c[2].i(&genesis::s![.., 0..3;2, 1])?.sum_dim([1], true)?)
    });
}

#[test]
fn linear_matches_finite_differences() {
    let g = Generator::new(33);
    for xs in [vec![4], vec![3, 4], vec![2, 3, 4]] {
        let x = input(&g, &xs, false);
        let (w, b) = (input(&g, &[5, 4], false), input(&g, &[5], false));
        gradcheck(
            &format!("linear {xs:?}"),
            &[x.clone(), w.clone(), b],
            &|t| t[0].linear(&t[1], Some(&t[2])),
        );
        gradcheck(
            &format!("linear {xs:?} without bias"),
            &[x.clone(), w.clone()],
            &|t| t[0].linear(&t[1], None),
        );
        let want = x.matmul(&w.t().unwrap()).unwrap();
        let got = x.linear(&w, None).unwrap();
        assert_eq!(got.to_vec::<f64>().unwrap(), want.to_vec::<f64>().unwrap());
    }
    let x = input(&g, &[3, 4], false);
    assert!(
        x.linear(&input(&g, &[4], false), None).is_err(),
        "1-D weight"
    );
    let w = input(&g, &[5, 4], false);
    assert!(
        x.linear(&w, Some(&input(&g, &[4], false))).is_err(),
        "bias shape"
    );
}

/// The one-pass backward kernels (activations, softmax and log_softmax along the last
/// dimension) on CUDA against their CPU twins, every floating dtype, rows from 1 to past a
/// block's 256 threads.
#[test]
fn cuda_one_pass_backwards_agree_with_the_cpu() {
    let _release = Release;
    if devices().len() < 2 {
        return;
    }
    let g = Generator::new(17);
    type Op = (&'static str, fn(&Tensor) -> Result<Tensor>);
    let ops: [Op; 5] = [
        ("gelu", |x| x.gelu()),
        ("gelu_tanh", |x| x.gelu_tanh()),
        ("silu", |x| x.silu()),
        ("softmax", |x| x.softmax(-1)),
        ("log_softmax", |x| x.log_softmax(-1)),
    ];
    for shape in [vec![1usize], vec![3, 7], vec![5, 300], vec![2, 3, 1031]] {
        let x64 = g
            .randn(&shape[..], DType::F64, CPU)
            .unwrap()
            .mul(3.0)
            .unwrap();
        let w64 = g.randn(&shape[..], DType::F64, CPU).unwrap();
        for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            for (name, f) in &ops {
                let run = |dev: Device| -> Vec<f64> {
                    let x = x64.to_dtype(dtype).unwrap().to(dev).unwrap();
                    let x = x.requires_grad_(true).unwrap();
                    let w = w64.to_dtype(dtype).unwrap().to(dev).unwrap();
                    f(&x)
                        .unwrap()
                        .mul(&w)
                        .unwrap()
                        .sum()
                        .unwrap()
                        .backward()
                        .unwrap();
                    let gr = x.grad().unwrap();
                    gr.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
                };
                let (c, d) = (run(CPU), run(Device::Cuda(0)));
                let eps = match dtype {
                    DType::F64 => 1e-12,
                    DType::F32 => 1e-5,
                    DType::F16 => 2e-3,
                    _ => 1.6e-2,
                };
                let scale = c.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-3);
                for (i, (a, b)) in c.iter().zip(&d).enumerate() {
                    assert!(
                        (a - b).abs() <= eps * (a.abs() + scale * 1e-2),
                        "{name} {shape:?} {dtype:?}[{i}]: cpu {a}, cuda {b}"
                    );
                }
            }
        }
    }
}

#[test]
fn out_of_place_index_put_sends_gradients_to_both_sides() {
    let g = Generator::new(44);
    let x = input(&g, &[4, 5], false);
    for accumulate in [false, true] {
        // Advanced indices (with a repeat when accumulating: without, which of the repeated
        // writes lands is unspecified, as in PyTorch), a broadcast value row.
        let rows: &[i64] = if accumulate { &[2, 0, 2] } else { &[2, 0, 3] };
        let idx = Tensor::from_slice(rows, [3], CPU).unwrap();
        let v = input(&g, &[1, 5], false);
        gradcheck(
            &format!("index_put rows (accumulate {accumulate})"),
            &[x.clone(), v],
            &|t| t[0].index_put(&genesis::s![&idx], &t[1], accumulate),
        );
        // Basic indexing, values with an extra leading size-1 dimension.
        let v = input(&g, &[1, 2, 2], false);
        gradcheck(
            &format!("index_put block (accumulate {accumulate})"),
            &[x.clone(), v],
            &|t| t[0].index_put(&genesis::s![1..3, 2..4], &t[1], accumulate),
        );
    }
    // The input is not written; the in-place form refuses a value that requires grad.
    let before = x.to_vec::<f64>().unwrap();
    let v = input(&g, &[5], false).requires_grad_(true).unwrap();
    let y = x.index_put(&genesis::s![0], &v, false).unwrap();
    assert!(y.requires_grad());
    assert_eq!(x.to_vec::<f64>().unwrap(), before);
    assert!(x.index_put_(&genesis::s![0], &v, false).is_err());
}

#[test]
fn in_place_ops_on_non_leaves_rebase_the_graph() {
    let g = Generator::new(61);
    let x = input(&g, &[3, 4], false);
    let w = input(&g, &[3, 4], false);
    // In place on results, as PyTorch records them: y = x * w; y += w; y *= 2; relu_;
    // y[0] = w[1]; y.masked_fill_(...); y.copy_ of part of itself is refused (shared).
    gradcheck(
        "add_, mul_, unary_ on a non-leaf",
        &[x.clone(), w.clone()],
        &|t| {
            let y = t[0].mul(&t[1])?;
            y.add_(&t[1])?;
            y.mul_(2.0)?;
            y.tanh_()?;
            let z = y.add(1.0)?;
            z.sub_(&t[0])?;
            Ok(z)
        },
    );
    gradcheck(
        "index_put_ and masked_fill_ on a non-leaf",
        &[x.clone(), w.clone()],
        &|t| {
            let y = t[0].exp()?.mul(1.0)?;
            y.index_put_(&s![0], &t[1].i(&s![1])?, false)?;
            let m = t[1].gt_scalar(0.0)?;
            y.masked_fill_(&m, 0.5)?;
            y.fill_(0.0).and(Ok(()))?;
            y.add_(&t[1].square()?)?;
            Ok(y)
        },
    );
    gradcheck("copy_ into a non-leaf", &[x.clone(), w.clone()], &|t| {
        let y = t[0].mul(3.0)?;
        y.copy_(&t[1].i(&s![0])?)?;
        y.mul(&t[0])
    });
    // The name of the latest op; a clone sees the rebase; a shared memory is refused.
    let xr = x.detach().requires_grad_(true).unwrap();
    let y = xr.mul(2.0).unwrap();
    let alias = y.clone();
    assert!(
        matches!(y.add_(1.0), Err(Error::Autograd { .. })),
        "a clone shares it"
    );
    drop(alias);
    y.add_(1.0).unwrap();
    assert_eq!(y.grad_fn_name(), Some("add"));
    let view = y.i(&s![0]).unwrap();
    assert!(
        matches!(y.mul_(2.0), Err(Error::Autograd { .. })),
        "a view shares it"
    );
    drop(view);
    // exp saves its output: modifying it in place is refused before backward can go wrong.
    let e = xr.exp().unwrap();
    assert!(matches!(e.add_(1.0), Err(Error::Autograd { .. })));
    // Leaves still refuse; under no_grad everything goes.
    assert!(matches!(xr.add_(1.0), Err(Error::Autograd { .. })));
    no_grad(|| y.add_(1.0)).unwrap();
}

/// Views of one recorded tensor (narrows along any dimension, overlapping or not, `split`
/// pieces, some views not used, the tensor also used whole, a transposed tensor as the base)
/// give the gradient of the same function written with `index_select` (whose gradient is a
/// scatter-add, not a view's): the engine adds views' gradients into their input's pending
/// gradient in place.
#[test]
fn gradients_of_many_views_of_one_tensor_add_up() {
    let mut rng = SmallRng::seed_from_u64(7);
    let g = Generator::new(31);
    for case in 0..60 {
        let dims = rng.random_range(1..=3);
        let shape: Vec<usize> = (0..dims).map(|_| rng.random_range(1..=6)).collect();
        let transposed = dims >= 2 && rng.random_bool(0.3);
        let whole = rng.random_bool(0.3);
        // (dim, start, len) of each view; `split` pieces in some cases.
        let mut views: Vec<(usize, usize, usize)> = Vec::new();
        if rng.random_bool(0.4) {
            let d = rng.random_range(0..dims);
            let size = rng.random_range(1..=shape[d]);
            let mut at = 0;
            while at < shape[d] {
                views.push((d, at, size.min(shape[d] - at)));
                at += size;
            }
        } else {
            for _ in 0..rng.random_range(1..=4) {
                let d = rng.random_range(0..dims);
                let start = rng.random_range(0..shape[d]);
                let len = rng.random_range(0..=shape[d] - start);
                views.push((d, start, len));
            }
        }
        let used: Vec<bool> = views.iter().map(|_| rng.random_bool(0.85)).collect();
        let base = input(&g, &shape, false);
        let weights: Vec<Tensor> = views
            .iter()
            .map(|&(d, _, len)| {
                let mut s = shape.clone();
                s[d] = len;
                input(&g, &s, false)
            })
            .collect();
        let w_whole = input(&g, &shape, false);
        let grad_of = |by_index: bool| -> Vec<f64> {
            let leaf = base.detach().requires_grad_(true).unwrap();
            // A recorded (non-leaf) tensor of `shape`, possibly read transposed.
            let x = if transposed {
                leaf.mul(2.0)
                    .unwrap()
                    .transpose(0, 1)
                    .unwrap()
                    .contiguous()
                    .unwrap()
                    .transpose(0, 1)
                    .unwrap()
            } else {
                leaf.mul(2.0).unwrap()
            };
            let mut total = if whole {
                x.mul(&w_whole).unwrap().sum().unwrap()
            } else {
                Tensor::zeros([0usize; 0], DType::F64, CPU).unwrap()
            };
            for (i, &(d, start, len)) in views.iter().enumerate() {
                if !used[i] {
                    continue;
                }
                let piece = if by_index {
                    let at =
                        Tensor::arange(start as f64, (start + len) as f64, 1.0, DType::I64, CPU)
                            .unwrap();
                    x.index_select(d, &at).unwrap()
                } else {
                    x.narrow(d, start, len).unwrap()
                };
                total = total
                    .add(&piece.mul(&weights[i]).unwrap().sum().unwrap())
                    .unwrap();
            }
            if !total.requires_grad() {
                return vec![0.0; base.numel()];
            }
            total.backward().unwrap();
            leaf.grad().unwrap().to_vec::<f64>().unwrap()
        };
        let (got, want) = (grad_of(false), grad_of(true));
        for (a, b) in got.iter().zip(&want) {
            assert!(
                (a - b).abs() <= 1e-12 * (1.0 + b.abs()),
                "case {case}: shape {shape:?} transposed {transposed} whole {whole} views \
                 {views:?} used {used:?}: {got:?} against {want:?}"
            );
        }
    }
}

/// `index_select`'s gradient along dimension 0 (an embedding's) sums each source row's
/// gradients in the order of the positions that chose it, in f32, without atomics: on every
/// device within the rounding of f32 sums of an f64 reference, the same bits on the CPU and
/// the GPU and from run to run (f32 and bf16 rows; repeated, absent and hot indices; rows of
/// one and many columns; an empty index).
#[test]
fn index_select_gradient_along_rows_is_deterministic() {
    let _release = Release;
    let g = Generator::new(41);
    let mut rng = SmallRng::seed_from_u64(41);
    for case in 0..10 {
        let v = rng.random_range(1..300usize);
        let n = if case == 9 {
            0
        } else {
            rng.random_range(1..2000usize)
        };
        let hot = if case % 3 == 0 { 3.min(v) } else { v };
        let rest: Vec<usize> = match case % 4 {
            0 => vec![1],
            1 => vec![37],
            2 => vec![3, 5],
            _ => vec![768],
        };
        let idx: Vec<i64> = (0..n).map(|_| rng.random_range(0..hot) as i64).collect();
        let cols: usize = rest.iter().product();
        let gshape: Vec<usize> = [vec![n], rest.clone()].concat();
        let xshape: Vec<usize> = [vec![v], rest.clone()].concat();
        let gy64 = g.randn(&gshape[..], DType::F64, CPU).unwrap();
        for dtype in [DType::F32, DType::BF16] {
            let mut results: Vec<Vec<f64>> = Vec::new();
            for dev in devices() {
                for _run in 0..2 {
                    let x = Tensor::zeros(&xshape[..], dtype, dev)
                        .unwrap()
                        .requires_grad_(true)
                        .unwrap();
                    let index = Tensor::from_slice(&idx, [n], dev).unwrap();
                    let gy = gy64.to_dtype(dtype).unwrap().to(dev).unwrap();
                    x.index_select(0, &index)
                        .unwrap()
                        .mul(&gy)
                        .unwrap()
                        .sum()
                        .unwrap()
                        .backward()
                        .unwrap();
                    let got = x.grad().unwrap().to_dtype(DType::F64).unwrap();
                    results.push(got.to_vec::<f64>().unwrap());
                }
            }
            // Within the rounding of the sums of the rounded gradients.
            let gyr = gy64
                .to_dtype(dtype)
                .unwrap()
                .to_dtype(DType::F64)
                .unwrap()
                .to_vec::<f64>()
                .unwrap();
            let mut abs = vec![0f64; v * cols];
            let mut exact = vec![0f64; v * cols];
            for (i, &k) in idx.iter().enumerate() {
                for c in 0..cols {
                    abs[k as usize * cols + c] += gyr[i * cols + c].abs();
                    exact[k as usize * cols + c] += gyr[i * cols + c];
                }
            }
            let unit = if dtype == DType::F32 { 1e-7 } else { 8e-3 };
            for (j, got) in results[0].iter().enumerate() {
                let tol = abs[j] * 2e-7 * (n as f64).max(1.0) + exact[j].abs() * unit + 1e-30;
                assert!(
                    (got - exact[j]).abs() <= tol,
                    "case {case} {dtype}: element {j} {got} against {} (tol {tol})",
                    exact[j]
                );
            }
            for (r, other) in results.iter().enumerate().skip(1) {
                let same = other
                    .iter()
                    .zip(&results[0])
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "case {case} {dtype}: result {r} differs in its bits");
            }
        }
    }
}

#[test]
fn a_leaf_used_twice_gets_its_gradients_summed_then_delivered_once() {
    use std::sync::{Arc, Mutex};
    // A tied weight: used by two ops, as GPT-2's token embedding and head.
    let w = Tensor::from_slice(&[1.0f32, 2.0], [2], CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let pre = Arc::new(Mutex::new(Vec::new()));
    let p2 = pre.clone();
    w.register_hook(move |g| {
        p2.lock().unwrap().push(g.to_vec::<f32>()?);
        Ok(None)
    })
    .unwrap();
    let posts = Arc::new(Mutex::new(Vec::new()));
    let q2 = posts.clone();
    w.register_post_accumulate_grad_hook(move |g| {
        q2.lock().unwrap().push(g.to_vec::<f32>()?);
        Ok(())
    })
    .unwrap();
    let loss = w
        .mul(3.0)
        .unwrap()
        .sum()
        .unwrap()
        .add(&w.square().unwrap().sum().unwrap())
        .unwrap();
    loss.backward().unwrap();
    // 3 + 2w, summed before the hooks see it.
    assert_eq!(*pre.lock().unwrap(), [vec![5.0f32, 7.0]]);
    assert_eq!(*posts.lock().unwrap(), [vec![5.0f32, 7.0]]);
    // A second backward accumulates into the gradient, and the hook sees the total once more.
    let loss = w
        .mul(3.0)
        .unwrap()
        .sum()
        .unwrap()
        .add(&w.sum().unwrap())
        .unwrap();
    loss.backward().unwrap();
    assert_eq!(posts.lock().unwrap().last().unwrap(), &vec![9.0f32, 11.0]);
    assert_eq!(posts.lock().unwrap().len(), 2);
}

/// `increment_version` counts as an in-place write: the version goes up by one, and a backward
/// that saved the tensor (here `exp`'s output) then refuses to run, naming the op.
#[test]
fn increment_version_marks_a_saved_tensor_as_modified() {
    let x = Tensor::from_slice(&[0.5f32, -1.0], [2], CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let y = x.exp().unwrap();
    let v = y.version();
    autograd::increment_version(&y).unwrap();
    assert_eq!(y.version(), v + 1);
    let e = y.sum().unwrap().backward().unwrap_err();
    assert!(e.to_string().contains("exp"), "{e}");
    // Untouched, the same graph runs.
    let z = x.exp().unwrap();
    z.sum().unwrap().backward().unwrap();
}

/// Generated graphs that use intermediate tensors more than once (`a + a`, `a.sum() +
/// a.sum()`, a tensor in two `stack`s, in views, splits and chunks, in a layer norm and a
/// product, ...), against central differences: every use's gradient reaches the tensor, also
/// when two uses' gradients share one buffer (the two inputs of an add).
#[test]
fn intermediates_used_more_than_once() {
    let mut rng = SmallRng::seed_from_u64(2024);
    let g = Generator::new(5);
    for case in 0..300 {
        let x = input(&g, &[2, 3], false);
        let y = input(&g, &[2, 3], false);
        // A program: the pool starts with x, y and grows by ops on random members (reused).
        let ops: Vec<(usize, usize, usize)> = (0..rng.random_range(2..7))
            .map(|k| {
                (
                    rng.random_range(0..16),
                    rng.random_range(0..k + 2),
                    rng.random_range(0..k + 2),
                )
            })
            .collect();
        let program = ops.clone();
        let f = move |xs: &[Tensor]| -> Result<Tensor> {
            let mut pool: Vec<Tensor> = vec![xs[0].clone(), xs[1].clone()];
            for &(op, a, b) in &program {
                let (a, b) = (&pool[a].clone(), &pool[b].clone());
                let t = match op {
                    0 => a.add(b)?,
                    1 => a.add(a)?,
                    2 => a.mul(b)?,
                    3 => a.sum()?.add(&a.sum()?)?.add(b)?,
                    4 => Tensor::stack(&[a, b], 0)?.sum_dim([0isize], false)?,
                    5 => Tensor::stack(&[a], 0)?
                        .squeeze(0)?
                        .add(&Tensor::stack(&[a, a], 0)?.mean_dim([0isize], false)?)?,
                    6 => a
                        .reshape([6])?
                        .add(&a.reshape([3, 2])?.reshape([6])?)?
                        .reshape([2, 3])?,
                    7 => a.tanh()?.add(&a.mul(0.5)?)?,
                    8 => a.t()?.t()?.sub(b)?,
                    9 => Tensor::cat(&[a, a], 0)?.narrow(0, 1, 2)?.add(a)?,
                    10 => a.mean()?.mul(b)?.add(&a.sum_dim([1isize], true)?)?,
                    11 => a
                        .unsqueeze(0)?
                        .expand([2, 2, 3])?
                        .sum_dim([0isize], false)?
                        .sub(a)?,
                    12 => {
                        let p = a.split_sizes(&[1, 1], 0)?;
                        Tensor::cat(&[&p[1], &p[0]], 0)?.add(&p[0].sum()?)?
                    }
                    13 => {
                        let c = a.chunk(3, 1)?;
                        Tensor::cat(&[&c[0], &c[0], &c[2]], 1)?.add(&c[1].mean()?)?
                    }
                    14 => a.softmax(1)?.add(&a.mul(0.1)?)?,
                    // Layer norm's backward adds into the pending gradient it is handed.
                    _ => a.layer_norm(&[3], None, None, 1e-5)?.add(a)?.mul(b)?,
                };
                pool.push(t);
            }
            Ok(pool.last().expect("ops made one").clone())
        };
        gradcheck(&format!("case {case} {ops:?}"), &[x, y], &f);
    }
}
