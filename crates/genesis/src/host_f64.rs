//! `float64` arithmetic, comparisons and reductions on the CPU, in Rust's `f64`: the kernels
//! (and their CPU twins) have no `float64` variant, and a float64 result must never be
//! computed in float32. Operands arrive converted to float64; the results are new CPU tensors.

use genesis_storage::{
    BinaryOp, CompareOp, DType, Device, ReduceOp, ReduceShape, Storage, UnaryOp,
};

use crate::args::OperandRef;
use crate::tensor::broadcast_shape;
use crate::{Result, Tensor};

/// `op(x, y)` in `f64`, with the kernels' semantics (`genesis_kernels`' element ops): IEEE
/// arithmetic, NaN-propagating maximum and minimum.
fn apply(op: BinaryOp, x: f64, y: f64) -> f64 {
    match op {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
        // The kernels' rule: NaN from either side (`x`'s first), `y` on ties (so -0.0 and 0.0
        // pick the second).
        BinaryOp::Maximum => {
            if x.is_nan() {
                x
            } else if y.is_nan() || y >= x {
                y
            } else {
                x
            }
        }
        BinaryOp::Minimum => {
            if x.is_nan() {
                x
            } else if y.is_nan() || y <= x {
                y
            } else {
                x
            }
        }
        BinaryOp::Pow => x.powf(y),
    }
}

/// The elements of `t` (float64) broadcast to `shape`, row-major.
fn values_at(t: &Tensor, shape: &[usize]) -> Result<Vec<f64>> {
    if t.shape() == shape {
        t.to_vec::<f64>()
    } else {
        t.expand(shape)?.to_vec::<f64>()
    }
}

/// `op(a, rhs)` for a float64 CPU tensor `a` and a tensor (converted to float64) or a scalar.
pub(crate) fn binary(op: BinaryOp, a: &Tensor, rhs: OperandRef<'_>) -> Result<Tensor> {
    let name = op.name();
    let out: Vec<f64>;
    let shape: Vec<usize>;
    match rhs {
        OperandRef::Tensor(t) => {
            let b = t.cast_to(DType::F64)?;
            shape = broadcast_shape(name, a.shape(), b.shape())?;
            let (x, y) = (values_at(a, &shape)?, values_at(&b, &shape)?);
            out = x.iter().zip(&y).map(|(&x, &y)| apply(op, x, y)).collect();
        }
        OperandRef::Scalar(v) => {
            shape = a.shape().to_vec();
            let y = v.to_f64();
            let x = a.to_vec::<f64>()?;
            out = if op == BinaryOp::Pow && y == 0.5 {
                // `x ** 0.5` is `sqrt(x)`, as for the other float dtypes (and PyTorch).
                x.iter().map(|x| x.sqrt()).collect()
            } else {
                x.iter().map(|&x| apply(op, x, y)).collect()
            };
        }
    }
    Tensor::from_slice(&out, &shape, Device::Cpu)
}

/// `op(a)` for a float64 CPU tensor (`relu` keeps NaN; `sigmoid` in the form that does not
/// overflow).
pub(crate) fn unary(op: UnaryOp, a: &Tensor) -> Result<Tensor> {
    let f = |x: f64| match op {
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Relu => {
            if x.is_nan() || x > 0.0 {
                x
            } else {
                0.0
            }
        }
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Sigmoid => {
            if x >= 0.0 {
                1.0 / (1.0 + (-x).exp())
            } else {
                let e = x.exp();
                e / (1.0 + e)
            }
        }
    };
    let out: Vec<f64> = a.to_vec::<f64>()?.into_iter().map(f).collect();
    Tensor::from_slice(&out, a.shape(), Device::Cpu)
}

/// `op(a, b)` for two float64 CPU tensors, broadcast, as a `Bool` tensor (IEEE comparisons).
pub(crate) fn compare(op: CompareOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let shape = broadcast_shape(op.name(), a.shape(), b.shape())?;
    let (x, y) = (values_at(a, &shape)?, values_at(b, &shape)?);
    let out: Vec<bool> = x
        .iter()
        .zip(&y)
        .map(|(&x, &y)| match op {
            CompareOp::Eq => x == y,
            CompareOp::Ne => x != y,
            CompareOp::Lt => x < y,
            CompareOp::Le => x <= y,
            CompareOp::Gt => x > y,
            CompareOp::Ge => x >= y,
        })
        .collect();
    Tensor::from_bools(&out, &shape, Device::Cpu)
}

/// Whether `x` replaces the running `best` of an arg reduction: the first NaN wins, then the
/// first strictly larger (ArgMax) or smaller (ArgMin) value.
fn better(op: ReduceOp, x: f64, best: f64) -> bool {
    if best.is_nan() {
        return false;
    }
    if x.is_nan() {
        return true;
    }
    match op {
        ReduceOp::Max | ReduceOp::ArgMax => x > best,
        _ => x < best,
    }
}

/// `op` over the middle axis of `shape.input_len()` float64 elements of a host storage from
/// `start`, seen as `[outer, r, inner]` (the semantics of [`Storage::reduce`]): the values
/// (float64) and, for argmax/argmin, the indices (int64).
pub(crate) fn reduce(
    storage: &Storage,
    op: ReduceOp,
    start: usize,
    shape: ReduceShape,
) -> Result<(Storage, Option<Storage>)> {
    let ReduceShape { outer, r, inner } = shape;
    let all = storage.as_slice::<f64>()?;
    let n = shape.input_len().unwrap_or(usize::MAX);
    let data = start
        .checked_add(n)
        .and_then(|end| all.get(start..end))
        .ok_or(genesis_storage::Error::OutOfBounds {
            op: op.name(),
            start,
            len: n,
            storage_len: all.len(),
        })?;
    let mut values = Vec::with_capacity(outer * inner);
    let mut indices = Vec::with_capacity(if op.has_indices() { outer * inner } else { 0 });
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| data[(o * r + k) * inner + i];
            match op {
                ReduceOp::Sum | ReduceOp::Mean => {
                    let s: f64 = (0..r).map(at).sum();
                    values.push(if op == ReduceOp::Mean {
                        s / r as f64
                    } else {
                        s
                    });
                }
                _ => {
                    // Non-empty: the facade refuses to reduce an empty axis without identity.
                    let (mut best, mut idx) = (at(0), 0usize);
                    for k in 1..r {
                        if better(op, at(k), best) {
                            (best, idx) = (at(k), k);
                        }
                    }
                    values.push(best);
                    if op.has_indices() {
                        indices.push(idx as i64);
                    }
                }
            }
        }
    }
    let values = Storage::from_slice(&values, Device::Cpu)?;
    let indices = if op.has_indices() {
        Some(Storage::from_slice(&indices, Device::Cpu)?)
    } else {
        None
    };
    Ok((values, indices))
}
