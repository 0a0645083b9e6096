//! The backward formulas, written with the facade's own ops (run with recording off).

use crate::{BinaryOp, DType, Result, Tensor, UnaryOp};

/// `g` summed down to `shape` (the shape of an operand `g`'s op broadcast to `g.shape()`):
/// over the leading dimensions `shape` lacks and where `shape` has a 1 and `g` does not.
pub(crate) fn sum_to(g: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if g.shape() == shape {
        return Ok(g.clone());
    }
    let lead = g.dim() - shape.len();
    let dims: Vec<isize> = (0..g.dim())
        .filter(|&d| d < lead || (shape[d - lead] == 1 && g.shape()[d] != 1))
        .map(|d| d as isize)
        .collect();
    let summed = if dims.is_empty() {
        g.clone()
    } else {
        g.sum_dim(dims, true)?
    };
    summed.reshape(shape)
}

/// `g` converted to `dtype` when it differs (the gradient of an operand that was promoted).
pub(crate) fn cast_to(g: Tensor, dtype: DType) -> Result<Tensor> {
    if g.dtype() == dtype {
        Ok(g)
    } else {
        g.to_dtype(dtype)
    }
}

/// What the backward of unary `op` reads: `(the input, the output)`. The output serves where
/// the derivative is a function of it (exp, tanh, sigmoid, ...), so the input need not stay.
pub(crate) fn unary_saves(op: UnaryOp) -> (bool, bool) {
    use UnaryOp::*;
    match op {
        Neg | Sign | Floor | Ceil | Round | Trunc => (false, false),
        Exp | Sqrt | Tanh | Sigmoid | Tan | Rsqrt | Reciprocal | Expm1 => (false, true),
        _ => (true, false),
    }
}

/// The gradient of `op(x)` (giving `out`; each given when [`unary_saves`] says) for the
/// output gradient `g`, in `g`'s dtype (the input's); `None` where the op is flat (sign,
/// floor, ceil, round, trunc: zero almost everywhere).
pub(crate) fn unary(
    op: UnaryOp,
    x: Option<&Tensor>,
    out: Option<&Tensor>,
    g: &Tensor,
) -> Result<Option<Tensor>> {
    use std::f64::consts::{FRAC_2_SQRT_PI, LN_2, LN_10, PI};
    let missing = || crate::Error::Autograd {
        reason: format!("{}: the backward lacks a saved tensor", op.name()),
    };
    let (xv, ov);
    let (x, out) = match unary_saves(op) {
        (true, _) => {
            xv = x.ok_or_else(missing)?.clone();
            (&xv, &xv)
        }
        (_, true) => {
            ov = out.ok_or_else(missing)?.clone();
            (&ov, &ov)
        }
        _ => (g, g),
    };
    let fused = match op {
        UnaryOp::Gelu => Some(genesis_storage::ActGrad::Gelu),
        UnaryOp::GeluTanh => Some(genesis_storage::ActGrad::GeluTanh),
        UnaryOp::Silu => Some(genesis_storage::ActGrad::Silu),
        _ => None,
    };
    if let Some(f) = fused
        && x.shape() == g.shape()
        && x.dtype() == g.dtype()
        && x.dtype().is_float()
        && x.is_contiguous()
        && g.is_contiguous()
    {
        // One pass: dx = g f'(x) (genesis_kernels::grad).
        let d = genesis_storage::Storage::act_grad(
            f,
            g.view.storage(),
            g.first_element(),
            x.view.storage(),
            x.first_element(),
            g.numel(),
        )?;
        return Ok(Some(Tensor::from_storage(d, g.shape())?));
    }
    let d = match op {
        UnaryOp::Neg => g.neg()?,
        UnaryOp::Abs => g.mul(&x.sign()?)?,
        // 0 where x <= 0 (PyTorch's threshold backward): a NaN input passes the gradient.
        UnaryOp::Relu => Tensor::where_cond(&x.le_scalar(0.0)?, 0.0, g)?,
        UnaryOp::Exp => g.mul(out)?,
        UnaryOp::Log => g.div(x)?,
        UnaryOp::Sqrt => g.div(&out.mul(2.0)?)?,
        UnaryOp::Tanh => g.mul(&out.square()?.neg()?.add(1.0)?)?,
        UnaryOp::Sigmoid => g.mul(&out.mul(&out.neg()?.add(1.0)?)?)?,
        UnaryOp::Sin => g.mul(&x.cos()?)?,
        UnaryOp::Cos => g.mul(&x.sin()?.neg()?)?,
        UnaryOp::Tan => g.mul(&out.square()?.add(1.0)?)?,
        UnaryOp::Erf => g.mul(&x.square()?.neg()?.exp()?.mul(FRAC_2_SQRT_PI)?)?,
        UnaryOp::Erfc => g.mul(&x.square()?.neg()?.exp()?.mul(-FRAC_2_SQRT_PI)?)?,
        UnaryOp::Rsqrt => g.mul(&out.mul(out)?.mul(out)?.mul(-0.5)?)?,
        UnaryOp::Reciprocal => g.mul(&out.square()?.neg()?)?,
        UnaryOp::Square => g.mul(&x.mul(2.0)?)?,
        UnaryOp::Sign | UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc => {
            return Ok(None);
        }
        UnaryOp::Log1p => g.div(&x.add(1.0)?)?,
        UnaryOp::Expm1 => g.mul(&out.add(1.0)?)?,
        UnaryOp::Log2 => g.div(&x.mul(LN_2)?)?,
        UnaryOp::Log10 => g.div(&x.mul(LN_10)?)?,
        UnaryOp::Gelu => {
            // Φ(x) + x φ(x).
            let cdf = x
                .mul(std::f64::consts::FRAC_1_SQRT_2)?
                .erf()?
                .add(1.0)?
                .mul(0.5)?;
            let pdf = x.square()?.mul(-0.5)?.exp()?.mul(1.0 / (2.0 * PI).sqrt())?;
            g.mul(&cdf.add(&x.mul(&pdf)?)?)?
        }
        UnaryOp::GeluTanh => {
            // 0.5 (1 + t) + 0.5 x (1 - t²) k (1 + 3 c x²), t = tanh(k (x + c x³)).
            let (k, c) = ((2.0 / PI).sqrt(), 0.044715);
            let inner = x.add(&x.mul(x)?.mul(x)?.mul(c)?)?.mul(k)?;
            let t = inner.tanh()?;
            let left = t.add(1.0)?.mul(0.5)?;
            let slope = x.square()?.mul(3.0 * c)?.add(1.0)?.mul(k)?;
            let right = x
                .mul(0.5)?
                .mul(&t.square()?.neg()?.add(1.0)?)?
                .mul(&slope)?;
            g.mul(&left.add(&right)?)?
        }
        UnaryOp::Silu => {
            // s (1 + x (1 - s)), s = sigmoid(x).
            let s = x.sigmoid()?;
            let d = x.mul(&s.neg()?.add(1.0)?)?.add(1.0)?.mul(&s)?;
            g.mul(&d)?
        }
        UnaryOp::Asin => g.mul(&x.square()?.neg()?.add(1.0)?.rsqrt()?)?,
        UnaryOp::Acos => g.mul(&x.square()?.neg()?.add(1.0)?.rsqrt()?.neg()?)?,
        UnaryOp::Atan => g.div(&x.square()?.add(1.0)?)?,
        UnaryOp::Sinh => g.mul(&x.cosh()?)?,
        UnaryOp::Cosh => g.mul(&x.sinh()?)?,
        UnaryOp::Asinh => g.mul(&x.square()?.add(1.0)?.rsqrt()?)?,
        UnaryOp::Acosh => g.mul(&x.square()?.sub(1.0)?.rsqrt()?)?,
        UnaryOp::Atanh => g.div(&x.square()?.neg()?.add(1.0)?)?,
        UnaryOp::Softplus => {
            // sigmoid(x), 1 above the threshold (20) where softplus is x.
            let s = x.sigmoid()?;
            let above = x.gt_scalar(20.0)?;
            g.mul(&Tensor::where_cond(&above, 1.0, &s)?)?
        }
        _ => {
            return Err(crate::Error::Autograd {
                reason: format!("{}: no gradient formula", op.name()),
            });
        }
    };
    Ok(Some(cast_to(d, g.dtype())?))
}

/// The gradients of `op(a, b)` (giving `out`) for the output gradient `g`, each summed to
/// its operand's shape and converted to its dtype; `b` is `None` for a scalar operand
/// `scalar`. `needs` says which are wanted.
pub(crate) fn binary(
    op: BinaryOp,
    a: &Tensor,
    b: Operand2<'_>,
    out: &Tensor,
    g: &Tensor,
    needs: [bool; 2],
) -> Result<[Option<Tensor>; 2]> {
    // d out / d a and d out / d b, elementwise (broadcast), times g.
    let (ga, gb): (Option<Tensor>, Option<Tensor>) = match op {
        BinaryOp::Add => (Some(g.clone()), Some(g.clone())),
        BinaryOp::Sub => (Some(g.clone()), Some(g.neg()?)),
        BinaryOp::Mul => (
            Some(match b {
                Operand2::Tensor(b) => g.mul(b)?,
                Operand2::Scalar(s) => g.mul(s)?,
            }),
            match b {
                Operand2::Tensor(_) if needs[1] => Some(g.mul(a)?),
                _ => None,
            },
        ),
        BinaryOp::Div => (
            Some(match b {
                Operand2::Tensor(b) => g.div(b)?,
                Operand2::Scalar(s) => g.div(s)?,
            }),
            match b {
                // -g a / b² = -g out / b
                Operand2::Tensor(b) if needs[1] => Some(g.mul(out)?.div(b)?.neg()?),
                _ => None,
            },
        ),
        BinaryOp::Maximum | BinaryOp::Minimum => {
            // Each operand takes the gradient unless it loses (is smaller for maximum, larger
            // for minimum); ties split it in halves. As PyTorch's: where a NaN makes every
            // comparison false, both operands take it.
            let (a_loses, b_loses, ties) = match (op, b) {
                (BinaryOp::Maximum, Operand2::Tensor(b)) => (a.lt(b)?, a.gt(b)?, a.eq(b)?),
                (_, Operand2::Tensor(b)) => (a.gt(b)?, a.lt(b)?, a.eq(b)?),
                (BinaryOp::Maximum, Operand2::Scalar(s)) => {
                    (a.lt_scalar(s)?, a.gt_scalar(s)?, a.eq_scalar(s)?)
                }
                (_, Operand2::Scalar(s)) => (a.gt_scalar(s)?, a.lt_scalar(s)?, a.eq_scalar(s)?),
            };
            let dt = g.dtype();
            let half_ties = ties.to_dtype(dt)?.mul(0.5)?;
            // 1 - loses - ties / 2
            let keep = |loses: &Tensor| -> Result<Tensor> {
                loses.to_dtype(dt)?.add(&half_ties)?.neg()?.add(1.0)
            };
            let ga = g.mul(&keep(&a_loses)?)?;
            let gb = match b {
                Operand2::Tensor(_) if needs[1] => Some(g.mul(&keep(&b_loses)?)?),
                _ => None,
            };
            (Some(ga), gb)
        }
        BinaryOp::Pow => {
            // d/da = b a^(b-1), 0 where b == 0 (also at a == 0, where the formula is 0 * inf);
            // d/db = out ln(a) (0 where a == 0 and b >= 0), as PyTorch.
            let ga = match b {
                Operand2::Tensor(b) => {
                    let d = b.mul(&a.pow(&b.sub(1.0)?)?)?;
                    g.mul(&Tensor::where_cond(&b.eq_scalar(0.0)?, 0.0, &d)?)?
                }
                Operand2::Scalar(0.0) => g.mul(0.0)?,
                Operand2::Scalar(s) => g.mul(&a.pow(s - 1.0)?.mul(s)?)?,
            };
            let gb = match b {
                Operand2::Tensor(b) if needs[1] => {
                    let d = out.mul(&a.log()?)?;
                    let d0 = Tensor::where_cond(&b.ge_scalar(0.0)?, 0.0, &d)?;
                    let d = Tensor::where_cond(&a.eq_scalar(0.0)?, &d0, &d)?;
                    Some(g.mul(&d)?)
                }
                _ => None,
            };
            (Some(ga), gb)
        }
        // a - q b for the quotient q rounded down (remainder) or toward zero (fmod): d/da = 1,
        // d/db = -q, as PyTorch's.
        BinaryOp::Remainder | BinaryOp::Fmod => {
            let gb = match b {
                Operand2::Tensor(b) if needs[1] => {
                    let q = if op == BinaryOp::Remainder {
                        a.floor_divide(b)?
                    } else {
                        a.div_mode(b, crate::RoundingMode::Trunc)?
                    };
                    Some(g.mul(&q)?.neg()?)
                }
                _ => None,
            };
            (Some(g.clone()), gb)
        }
        // atan2(a, b): d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2).
        // Both 0 at the origin, where a^2 + b^2 is 0 (PyTorch's, not 0 / 0).
        BinaryOp::Atan2 => {
            let recip = |r2: Tensor| -> Result<Tensor> {
                Tensor::where_cond(&r2.eq_scalar(0.0)?, 0.0, &r2.reciprocal()?)
            };
            let (ga, gb) = match b {
                Operand2::Tensor(b) => {
                    let k = recip(a.mul(a)?.add(&b.mul(b)?)?)?;
                    let gb = needs[1].then(|| g.mul(a)?.mul(&k)?.neg()).transpose()?;
                    (g.mul(b)?.mul(&k)?, gb)
                }
                Operand2::Scalar(s) => (g.mul(s)?.mul(&recip(a.mul(a)?.add(s * s)?)?)?, None),
            };
            (Some(ga), gb)
        }
        // hypot(a, b): d/da = a / h, d/db = b / h, h recomputed (the callers save the output
        // for pow and div only).
        BinaryOp::Hypot => {
            let h = match b {
                Operand2::Tensor(b) => a.hypot(b)?,
                Operand2::Scalar(s) => a.hypot(s)?,
            };
            let gb = match b {
                Operand2::Tensor(b) if needs[1] => Some(g.mul(b)?.div(&h)?),
                _ => None,
            };
            (Some(g.mul(a)?.div(&h)?), gb)
        }
        // Piecewise constant (and the bitwise ops are of integers): zero, as PyTorch's.
        BinaryOp::FloorDivide
        | BinaryOp::TruncDivide
        | BinaryOp::BitwiseAnd
        | BinaryOp::BitwiseOr
        | BinaryOp::BitwiseXor => {
            let z = g.mul(0.0)?;
            (Some(z.clone()), Some(z))
        }
    };
    let ga = match ga {
        Some(x) if needs[0] => Some(cast_to(sum_to(&x, a.shape())?, a.dtype())?),
        _ => None,
    };
    let gb = match (gb, b) {
        (Some(x), Operand2::Tensor(b)) if needs[1] => {
            Some(cast_to(sum_to(&x, b.shape())?, b.dtype())?)
        }
        _ => None,
    };
    Ok([ga, gb])
}

/// The second operand of a binary op: a tensor, or a number.
#[derive(Clone, Copy)]
pub(crate) enum Operand2<'a> {
    Tensor(&'a Tensor),
    Scalar(f64),
}

/// The gradient of `x` in `op(s, x)` for a number `s` on the left (giving `out`).
pub(crate) fn scalar_lhs(
    op: BinaryOp,
    s: f64,
    x: &Tensor,
    out: &Tensor,
    g: &Tensor,
) -> Result<Tensor> {
    let d = match op {
        BinaryOp::Add => g.clone(),
        BinaryOp::Sub => g.neg()?,
        BinaryOp::Mul => g.mul(s)?,
        // d (s / x) = -s / x² = -out / x
        BinaryOp::Div => g.mul(out)?.div(x)?.neg()?,
        // d s^x = s^x ln(s)
        BinaryOp::Pow => g.mul(&out.mul(s.ln())?)?,
        BinaryOp::Maximum | BinaryOp::Minimum => {
            return binary(op, x, Operand2::Scalar(s), out, g, [true, false])
                .map(|[gx, _]| gx.unwrap_or_else(|| g.clone()));
        }
        // `s op x` as `full(s) op x`, the gradient its second operand's.
        _ => {
            let lhs = x.full_like(s)?;
            let [_, gx] = binary(op, &lhs, Operand2::Tensor(x), out, g, [false, true])?;
            return Ok(gx.unwrap_or(g.mul(0.0)?));
        }
    };
    cast_to(sum_to(&d, x.shape())?, x.dtype())
}

/// The dimensions of `x` a reduction over `dims` reduces (`None` or an empty list: all),
/// sorted, negative ones wrapped. A 0-d tensor has none (its dimension 0 or -1 is itself).
pub(crate) fn reduced_dims(x: &Tensor, dims: Option<&[isize]>) -> Result<Vec<usize>> {
    let rank = x.dim();
    let mut out = match dims {
        None | Some([]) => (0..rank).collect::<Vec<_>>(),
        Some(ds) => ds
            .iter()
            .map(|&d| crate::args::wrap_dim("sum", d as i64, rank))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .flatten()
            .collect(),
    };
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The gradient `g` of a reduction of a tensor of `shape` over `reduced` (sorted), spread
/// back over those dimensions (a broadcast view).
pub(crate) fn spread(
    g: &Tensor,
    shape: &[usize],
    reduced: &[usize],
    keepdim: bool,
) -> Result<Tensor> {
    let mut kept = g.clone();
    if !keepdim {
        let mut with_ones: Vec<usize> = shape.to_vec();
        for &d in reduced {
            with_ones[d] = 1;
        }
        kept = kept.reshape(&with_ones[..])?;
    }
    kept.expand(shape_as_dims(shape))
}

fn shape_as_dims(shape: &[usize]) -> Vec<isize> {
    shape.iter().map(|&n| n as isize).collect()
}

/// The gradients of `a @ b` (PyTorch's `matmul`: 1-D operands promoted, batch dimensions
/// broadcast) for the output gradient `g`.
pub(crate) fn matmul(
    a: &Tensor,
    b: &Tensor,
    g: &Tensor,
    needs: &[bool],
) -> Result<(Option<Tensor>, Option<Tensor>)> {
    // 1-D operands as matrices: a row [1, k] on the left, a column [k, 1] on the right; the
    // output's gradient gets the dimensions the product dropped.
    let a2 = if a.dim() == 1 {
        a.unsqueeze(0)?
    } else {
        a.clone()
    };
    let b2 = if b.dim() == 1 {
        b.unsqueeze(-1)?
    } else {
        b.clone()
    };
    let mut g2 = g.clone();
    if a.dim() == 1 {
        g2 = g2.unsqueeze(if b.dim() == 1 { 0 } else { -2 })?;
    }
    if b.dim() == 1 {
        g2 = g2.unsqueeze(-1)?;
    }
    let ga = if needs[0] {
        let d = g2.matmul(&b2.transpose(-1, -2)?)?;
        Some(cast_to(
            sum_to(&d, a2.shape())?.reshape(a.shape())?,
            a.dtype(),
        )?)
    } else {
        None
    };
    let gb = if needs[1] {
        let d = a2.transpose(-1, -2)?.matmul(&g2)?;
        Some(cast_to(
            sum_to(&d, b2.shape())?.reshape(b.shape())?,
            b.dtype(),
        )?)
    } else {
        None
    };
    Ok((ga, gb))
}

/// The gradient of a gather along `dim` from a tensor of `shape` and `dtype` at `index` (the
/// output's shape): `g` added back at the positions it was read from (repeats add up).
pub(crate) fn scatter_back(
    shape: &[usize],
    dtype: DType,
    dim: isize,
    index: &Tensor,
    g: &Tensor,
) -> Result<Tensor> {
    let z = Tensor::zeros(shape, dtype, g.device())?;
    z.scatter_add_(dim, &index.contiguous()?, &g.contiguous()?)?;
    Ok(z)
}

/// For each element of `x` along `dim`, the product of the other elements of its line (exact
/// with zeros: the products before it times the products after it), the gradient of a product.
pub(crate) fn product_of_others(x: &Tensor, dim: usize) -> Result<Tensor> {
    let n = x.shape()[dim];
    let d = dim as isize;
    if n <= 1 {
        return Tensor::ones(x.shape(), x.dtype(), x.device());
    }
    // Exclusive prefix products: 1, x0, x0 x1, ...; the same from the other end.
    let exclusive = |t: &Tensor| -> Result<Tensor> {
        let mut one_shape = t.shape().to_vec();
        one_shape[dim] = 1;
        let one = Tensor::ones(&one_shape[..], t.dtype(), t.device())?;
        Tensor::cat(&[&one, &t.cumprod(d)?.narrow(d, 0, n - 1)?], d)
    };
    let before = exclusive(x)?;
    let after = exclusive(&x.flip([d])?)?.flip([d])?;
    before.mul(&after)
}

/// The gradient of `out = cumprod(x)` along `dim` for the output gradient `g`, exact with
/// zeros. Along a line with its first zero at `z1` (or none): before `z1` it is the
/// reversed prefix sum of `g * out` over the elements before `z1`, divided by `x`; at `z1` it
/// is the product of the elements before `z1` times the sum over `j >= z1` of `g_j` times the
/// product of the elements after `z1` up to `j` (zero from the next zero on); after `z1`,
/// every product a `g_j` multiplies holds the zero: 0.
pub(crate) fn cumprod_grad(x: &Tensor, out: &Tensor, g: &Tensor, dim: isize) -> Result<Tensor> {
    if x.dim() == 0 || x.numel() == 0 {
        return Ok(g.clone());
    }
    let d = crate::args::wrap_dim("cumprod", dim as i64, x.dim())?.unwrap_or(0) as isize;
    let dtype = x.dtype();
    let is_zero = x.eq_scalar(0.0)?;
    let zeros_so_far = is_zero.to_dtype(DType::I64)?.cumsum(d)?;
    let before_first = zeros_so_far.eq_scalar(0)?;
    let first_zero = zeros_so_far.eq_scalar(1)?.mul(&is_zero)?.ne_scalar(0)?;
    let reversed_sum = |t: &Tensor| -> Result<Tensor> { t.flip([d])?.cumsum(d)?.flip([d]) };
    // Before the first zero.
    let fb = before_first.to_dtype(dtype)?;
    let safe_x = Tensor::where_cond(&before_first, x, 1.0)?;
    let part_a = reversed_sum(&g.mul(out)?.mul(&fb)?)?
        .div(&safe_x)?
        .mul(&fb)?;
    // At the first zero.
    let up_to_first = before_first
        .to_dtype(DType::I64)?
        .add(&first_zero.to_dtype(DType::I64)?)?
        .ne_scalar(0)?;
    let after = Tensor::where_cond(&up_to_first, 1.0, x)?.cumprod(d)?;
    let from_first = zeros_so_far.ge_scalar(1)?.to_dtype(dtype)?;
    let s = g.mul(&after)?.mul(&from_first)?.sum_dim([d], true)?;
    let before = safe_x.prod_dim(d, true)?;
    let part_b = first_zero.to_dtype(dtype)?.mul(&before)?.mul(&s)?;
    part_a.add(&part_b)
}
