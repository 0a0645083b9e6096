//! CPU twins of the kernels: the reference the GPU results are checked against, and the CPU
//! execution path of the storages above.

use crate::{BinaryOp, CompareOp, Element, Error, Result, UnaryOp};

/// `out[i] = a[i] + b[i]`, as the `add` kernel computes it.
pub fn add<T: Element>(a: &[T], b: &[T], out: &mut [T]) -> Result<()> {
    same_len("add", a.len(), b.len())?;
    same_len("add", a.len(), out.len())?;
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = T::add(x, y);
    }
    Ok(())
}

/// `out[i] = op(a[i], b[i])`, as the kernel of `op` computes it. Nothing is written when the
/// lengths differ or `T` does not support `op` (integer division).
pub fn binary<T: Element>(op: BinaryOp, a: &[T], b: &[T], out: &mut [T]) -> Result<()> {
    supports::<T>(op)?;
    same_len(op.name(), a.len(), b.len())?;
    same_len(op.name(), a.len(), out.len())?;
    chunks2(out, a, b, |out, a, b| {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = T::binary(op, x, y);
        }
    });
    Ok(())
}

/// Whether `op` has a mixed-precision kernel (`mixed_<op>_f32_<h>`: f32 and f16/bf16
/// operands, an f32 result): add, sub and mul; its name for `H`.
pub fn mixed_kernel<H: Element>(op: BinaryOp) -> Result<&'static str> {
    let name = match (op, H::NAME) {
        (BinaryOp::Add, "f16") => "mixed_add_f32_f16",
        (BinaryOp::Add, "bf16") => "mixed_add_f32_bf16",
        (BinaryOp::Sub, "f16") => "mixed_sub_f32_f16",
        (BinaryOp::Sub, "bf16") => "mixed_sub_f32_bf16",
        (BinaryOp::Mul, "f16") => "mixed_mul_f32_f16",
        (BinaryOp::Mul, "bf16") => "mixed_mul_f32_bf16",
        _ => {
            return Err(Error::Unsupported {
                op: op.name(),
                reason: format!("no f32 x {} kernel for {}", H::NAME, op.name()),
            });
        }
    };
    Ok(name)
}

/// `out[i] = op(a[i], f32(b[i]))`, or `op(f32(b[i]), a[i])` when `swap`: an f32 operand and
/// an f16 or bf16 one (widened exactly), the f32 result of PyTorch's promotion in one pass
/// (the `mixed_<op>_f32_<h>` kernels; add, sub and mul).
pub fn binary_mixed<H: Element>(
    op: BinaryOp,
    a: &[f32],
    b: &[H],
    out: &mut [f32],
    swap: bool,
) -> Result<()> {
    mixed_kernel::<H>(op)?;
    same_len(op.name(), a.len(), b.len())?;
    same_len(op.name(), a.len(), out.len())?;
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        let y = y.to_f64() as f32;
        *o = if swap {
            f32::binary(op, y, x)
        } else {
            f32::binary(op, x, y)
        };
    }
    Ok(())
}

/// `a[i] = op(a[i], b[i])`, in place.
pub fn binary_assign<T: Element>(op: BinaryOp, a: &mut [T], b: &[T]) -> Result<()> {
    supports::<T>(op)?;
    same_len(op.name(), a.len(), b.len())?;
    for (x, &y) in a.iter_mut().zip(b) {
        *x = T::binary(op, *x, y);
    }
    Ok(())
}

/// `out[i] = op(a[i])`. Nothing is written when the lengths differ or `T` does not support
/// `op` (transcendental ops on integers).
pub fn unary<T: Element>(op: UnaryOp, a: &[T], out: &mut [T]) -> Result<()> {
    supports_unary::<T>(op)?;
    same_len(op.name(), a.len(), out.len())?;
    chunks1(out, a, |out, a| {
        for (o, &x) in out.iter_mut().zip(a) {
            *o = T::unary(op, x);
        }
    });
    Ok(())
}

/// `out[i] = min(max(a[i], lo), hi)` as the `clamp` kernel computes it: PyTorch's order (so
/// `lo > hi` gives `hi`), either bound optional, a NaN element kept; the result is always one
/// of the three values, bit for bit. Nothing is written when the lengths differ.
pub fn clamp<T: Element>(a: &[T], lo: Option<T>, hi: Option<T>, out: &mut [T]) -> Result<()> {
    same_len("clamp", a.len(), out.len())?;
    for (o, &x) in out.iter_mut().zip(a) {
        *o = clamp_one(x, lo, hi);
    }
    Ok(())
}

/// One element of [`clamp`].
#[inline]
pub fn clamp_one<T: Element>(x: T, lo: Option<T>, hi: Option<T>) -> T {
    let lt = |a: T, b: T| {
        if T::IS_FLOAT {
            a.to_f64() < b.to_f64()
        } else {
            a.to_i64() < b.to_i64()
        }
    };
    if T::IS_FLOAT && x.to_f64().is_nan() {
        return x;
    }
    let mut v = x;
    if let Some(lo) = lo
        && lt(v, lo)
    {
        v = lo;
    }
    if let Some(hi) = hi
        && lt(hi, v)
    {
        v = hi;
    }
    v
}

pub(crate) fn supports_unary<T: Element>(op: UnaryOp) -> Result<&'static str> {
    T::unary_kernel(op).ok_or_else(|| Error::Unsupported {
        op: op.name(),
        reason: format!("element type {}", T::NAME),
    })
}

pub(crate) fn supports<T: Element>(op: BinaryOp) -> Result<&'static str> {
    T::binary_kernel(op).ok_or_else(|| Error::Unsupported {
        op: op.name(),
        reason: format!("element type {}", T::NAME),
    })
}

/// `out[i] = a[i] op b[i]` as 0 or 1 (bools), as the comparison kernels compute it.
pub fn compare<T: Element>(op: CompareOp, a: &[T], b: &[T], out: &mut [u8]) -> Result<()> {
    same_len(op.name(), a.len(), b.len())?;
    same_len(op.name(), a.len(), out.len())?;
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = u8::from(T::compare(op, x, y));
    }
    Ok(())
}

/// `out[i] = if cond[i] != 0 { a[i] } else { b[i] }`, for any plain element type.
pub fn select<T: Copy + Send + Sync>(cond: &[u8], a: &[T], b: &[T], out: &mut [T]) -> Result<()> {
    same_len("where", cond.len(), a.len())?;
    same_len("where", cond.len(), b.len())?;
    same_len("where", cond.len(), out.len())?;
    use rayon::prelude::*;
    let run = |o: &mut [T], c: &[u8], x: &[T], y: &[T]| {
        for (((o, &c), &x), &y) in o.iter_mut().zip(c).zip(x).zip(y) {
            *o = if c != 0 { x } else { y };
        }
    };
    if out.len() >= crate::softmax::PARALLEL_MIN {
        out.par_chunks_mut(CHUNK)
            .zip(cond.par_chunks(CHUNK))
            .zip(a.par_chunks(CHUNK))
            .zip(b.par_chunks(CHUNK))
            .for_each(|(((o, c), x), y)| run(o, c, x, y));
    } else {
        run(out, cond, a, b);
    }
    Ok(())
}

/// `a[i] = a[i] + b[i]`, in place.
pub fn add_assign<T: Element>(a: &mut [T], b: &[T]) -> Result<()> {
    same_len("add", a.len(), b.len())?;
    for (x, &y) in a.iter_mut().zip(b) {
        *x = T::add(*x, y);
    }
    Ok(())
}

/// Sets every element of `out` to `value`.
pub fn fill<T: Element>(out: &mut [T], value: T) {
    out.fill(value);
}

fn same_len(op: &'static str, expected: usize, got: usize) -> Result<()> {
    if expected == got {
        Ok(())
    } else {
        Err(Error::LengthMismatch { op, expected, got })
    }
}

/// Elements a chunk of the parallel elementwise twins.
const CHUNK: usize = 1 << 14;

/// `f` over `out` and `a` in matching chunks, on rayon's threads when there are many elements
/// (each element computed as alone: the same bits either way).
pub(crate) fn chunks1<T: Send, U: Sync>(out: &mut [T], a: &[U], f: impl Fn(&mut [T], &[U]) + Sync) {
    use rayon::prelude::*;
    if out.len() >= crate::softmax::PARALLEL_MIN {
        out.par_chunks_mut(CHUNK)
            .zip(a.par_chunks(CHUNK))
            .for_each(|(o, a)| f(o, a));
    } else {
        f(out, a);
    }
}

/// [`chunks1`] with two inputs.
pub(crate) fn chunks2<T: Send, U: Sync, V: Sync>(
    out: &mut [T],
    a: &[U],
    b: &[V],
    f: impl Fn(&mut [T], &[U], &[V]) + Sync,
) {
    use rayon::prelude::*;
    if out.len() >= crate::softmax::PARALLEL_MIN {
        out.par_chunks_mut(CHUNK)
            .zip(a.par_chunks(CHUNK))
            .zip(b.par_chunks(CHUNK))
            .for_each(|((o, a), b)| f(o, a, b));
    } else {
        f(out, a, b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    #[test]
    fn add_matches_definition() {
        let a = [1.5f32, -2.0, 3.25];
        let b = [0.5f32, 2.0, 1e-8];
        let mut out = [0f32; 3];
        add(&a, &b, &mut out).unwrap();
        assert_eq!(out, [2.0, 0.0, 3.25 + 1e-8]);
    }

    #[test]
    fn add_rejects_mismatched_lengths() {
        let mut out = [0i64; 2];
        let err = add(&[1i64, 2], &[1i64], &mut out).unwrap_err();
        assert_eq!(
            err,
            Error::LengthMismatch {
                op: "add",
                expected: 2,
                got: 1
            }
        );
        assert_eq!(out, [0, 0], "nothing written on error");
    }

    #[test]
    fn fill_and_add_assign() {
        let mut v = vec![bf16::ZERO; 5];
        fill(&mut v, bf16::from_f32(1.5));
        add_assign(&mut v, &[bf16::from_f32(0.25); 5]).unwrap();
        assert!(v.iter().all(|x| x.to_f32() == 1.75));
    }
}
