//! Dense linear algebra on square matrices: [`Tensor::inverse`], [`Tensor::det`],
//! [`Tensor::slogdet`], [`Tensor::logdet`] and [`Tensor::linalg_solve`] (PyTorch's
//! `linalg.inv`, `linalg.det`, `linalg.slogdet`, `logdet` and `linalg.solve`), for float32 and
//! float64 batches of matrices, differentiable.
//!
//! Each matrix is factored as LAPACK's `getrf` factors it: `P A = L U` by Gaussian elimination
//! with partial pivoting (the first row of largest magnitude in each column; a zero column
//! below the diagonal is left as it is), in the matrix's own precision. The inverse and the
//! solution then come from forward and back substitution (`getrs`), the determinant from the
//! product of `U`'s diagonal. A tensor on a CUDA device is factored on the host (its matrices
//! copied there and the result copied back): these ops have no GPU kernels.

use crate::autograd::{Saved, sum_to};
use crate::compose::bad;
use crate::{DType, Device, Error, Result, Tensor};

/// The arithmetic the factorisation needs: `f32` and `f64` ([`genesis_kernels::real::Real`],
/// the fused kernels' compute types) that tensors hold.
trait Real: genesis_kernels::real::Real + genesis_storage::WithDType {
    fn zero() -> Self {
        Self::of_f64(0.0)
    }
    fn one() -> Self {
        Self::of_f64(1.0)
    }
    /// `|self|` (NaN stays NaN).
    fn magnitude(self) -> Self {
        if self < Self::zero() { -self } else { self }
    }
    fn is_nan(self) -> bool {
        self.partial_cmp(&self).is_none()
    }
}

impl Real for f32 {}
impl Real for f64 {}

/// One `m x m` matrix (row-major) factored in place as `getrf` does: `piv[k]` is the row
/// swapped with row `k` at step `k`. Returns the first zero pivot (0-based), if any; the
/// factorisation goes on past it, as LAPACK's.
fn lu_in_place<T: Real>(a: &mut [T], m: usize, piv: &mut [usize]) -> Option<usize> {
    let mut singular = None;
    for k in 0..m {
        // The first row of largest magnitude (`isamax`); NaN never compares larger.
        let mut p = k;
        let mut best = a[k * m + k].magnitude();
        for i in k + 1..m {
            let v = a[i * m + k].magnitude();
            if v > best {
                best = v;
                p = i;
            }
        }
        piv[k] = p;
        if a[p * m + k] == T::zero() {
            singular.get_or_insert(k);
            continue;
        }
        if p != k {
            for j in 0..m {
                a.swap(k * m + j, p * m + j);
            }
        }
        // The multipliers by division (not by the pivot's reciprocal, which reference
        // `getf2` uses): two equal rows then give a multiplier of exactly 1 and an exactly
        // singular factor, as PyTorch's LAPACK (MKL) gives on small matrices.
        let pivot = a[k * m + k];
        for i in k + 1..m {
            let l = a[i * m + k] / pivot;
            a[i * m + k] = l;
            if l != T::zero() {
                for j in k + 1..m {
                    a[i * m + j] = a[i * m + j] - l * a[k * m + j];
                }
            }
        }
    }
    singular
}

/// Solves `A X = B` for the `m x k` block `b` (row-major) from `lu_in_place`'s factors.
fn lu_solve<T: Real>(lu: &[T], piv: &[usize], m: usize, b: &mut [T], k: usize) {
    for (i, &p) in piv.iter().enumerate() {
        if p != i {
            for j in 0..k {
                b.swap(i * k + j, p * k + j);
            }
        }
    }
    // L y = P b (unit diagonal), then U x = y, each element's updates in the order `trsm`
    // applies them.
    for i in 0..m {
        for r in 0..i {
            let l = lu[i * m + r];
            if l != T::zero() {
                for j in 0..k {
                    b[i * k + j] = b[i * k + j] - l * b[r * k + j];
                }
            }
        }
    }
    for i in (0..m).rev() {
        for r in (i + 1..m).rev() {
            let u = lu[i * m + r];
            if u != T::zero() {
                for j in 0..k {
                    b[i * k + j] = b[i * k + j] - u * b[r * k + j];
                }
            }
        }
        let d = lu[i * m + i];
        for j in 0..k {
            b[i * k + j] = b[i * k + j] / d;
        }
    }
}

/// `a`'s matrices must be square, of float32 or float64 (PyTorch's messages; see
/// [`check_float`] for `empty_ok`).
fn check_square(op: &'static str, a: &Tensor, empty_ok: bool) -> Result<usize> {
    let r = a.dim();
    if r < 2 {
        return Err(bad(
            op,
            format!(
                "The input tensor A must have at least 2 dimensions, got {} dimensions",
                r
            ),
        ));
    }
    let (rows, cols) = (a.shape()[r - 2], a.shape()[r - 1]);
    if rows != cols {
        return Err(bad(
            op,
            format!("A must be batches of square matrices, but they are {rows} by {cols} matrices"),
        ));
    }
    check_float(op, a.dtype(), empty_ok && a.numel() == 0)?;
    Ok(rows)
}

/// Float32 and float64 are factored. Float16 and bfloat16 are refused, but by `det` and
/// `solve` (`empty_ok`) only where there is something to factor (PyTorch's `linalg.det` and
/// `linalg.solve` refuse them in their LAPACK kernels, which no elements never reach; its
/// `linalg.inv` and `linalg.slogdet` check first). Other dtypes always.
fn check_float(op: &'static str, dtype: DType, empty_ok: bool) -> Result<()> {
    match dtype {
        DType::F32 | DType::F64 => Ok(()),
        DType::F16 | DType::BF16 if empty_ok => Ok(()),
        DType::F16 | DType::BF16 => Err(bad(
            op,
            format!("Low precision dtypes not supported. Got {dtype}"),
        )),
        _ => Err(bad(
            op,
            format!("Expected a floating point or complex tensor as input. Got {dtype}"),
        )),
    }
}

/// The matrices of `a` (`[..., m, m]`, contiguous on the host) factored one by one by `f`,
/// which gets each matrix's factors, pivots and first zero pivot.
fn each_lu<T: Real>(
    a: &Tensor,
    m: usize,
    mut f: impl FnMut(usize, &[T], &[usize], Option<usize>) -> Result<()>,
) -> Result<()> {
    // No matrices (an empty batch, or empty matrices): nothing to factor, and no work buffer
    // of a huge empty matrix's size.
    let batch = m
        .checked_mul(m)
        .and_then(|mm| a.numel().checked_div(mm))
        .unwrap_or(0);
    if batch == 0 {
        return Ok(());
    }
    let data = a.to_vec::<T>()?;
    let mut work = vec![T::zero(); m * m];
    let mut piv = vec![0; m];
    for b in 0..batch {
        work.copy_from_slice(&data[b * m * m..(b + 1) * m * m]);
        let zero = lu_in_place(&mut work, m, &mut piv);
        f(b, &work, &piv, zero)?;
    }
    Ok(())
}

/// The message PyTorch gives for a singular matrix in `op`, with its batch element when
/// there are several matrices.
fn singular(op: &'static str, batched: bool, b: usize, k: usize) -> Error {
    let at = if batched {
        format!("(Batch element {b}): ")
    } else {
        String::new()
    };
    bad(
        op,
        format!(
            "{at}The diagonal element {} is zero, the inversion could not be completed because \
             the input matrix is singular.",
            k + 1
        ),
    )
}

/// `a` on the host, contiguous, in float32 if it is float16 or bfloat16 (then it has no
/// elements: see [`check_float`]).
fn host(a: &Tensor) -> Result<Tensor> {
    a.to(Device::Cpu)?.contiguous()?.in_opmath()
}

/// A result computed on the host moved to `like`'s device and dtype.
fn back(t: Tensor, like: &Tensor) -> Result<Tensor> {
    t.to_dtype(like.dtype())?.to(like.device())
}

/// `A⁻¹ B` for the host tensors `a` (`[..., m, m]`) and `b` (`[..., m, k]`, the same batch
/// shape), in `a`'s dtype; errors for a singular matrix.
fn solve_host<T: Real>(op: &'static str, a: &Tensor, b: &Tensor, inverse: bool) -> Result<Tensor> {
    let m = a.shape()[a.dim() - 1];
    let k = b.shape()[b.dim() - 1];
    let mut out = b.to_vec::<T>()?;
    let batched = a.numel() > m.saturating_mul(m);
    each_lu::<T>(a, m, |i, lu, piv, zero| {
        if let Some(z) = zero {
            return Err(if inverse {
                singular(op, batched, i, z)
            } else {
                bad(
                    op,
                    "The solver failed because the input matrix is singular.",
                )
            });
        }
        lu_solve(lu, piv, m, &mut out[i * m * k..(i + 1) * m * k], k);
        Ok(())
    })?;
    Tensor::from_slice(&out, b.shape(), Device::Cpu)
}

/// `A⁻¹ B` of `a` and `b` on the host (see [`solve_host`]), dispatched on the dtype.
fn solve_any(op: &'static str, a: &Tensor, b: &Tensor, inverse: bool) -> Result<Tensor> {
    match a.dtype() {
        DType::F64 => solve_host::<f64>(op, a, b, inverse),
        _ => solve_host::<f32>(op, a, b, inverse),
    }
}

/// (sign, log |det|) of each matrix of the host tensor `a`, as two tensors of its batch shape
/// in its dtype; the sign is 0 and the log -inf for a singular matrix.
fn slogdet_host<T: Real>(a: &Tensor, m: usize) -> Result<(Tensor, Tensor)> {
    let batch_shape = &a.shape()[..a.dim() - 2];
    // The results' size checked before their buffers (a batch of 2^40 empty matrices).
    let batch = crate::tensor::check_result_size(batch_shape, a.dtype())?;
    let (mut sign, mut log) = (vec![T::one(); batch], vec![T::zero(); batch]);
    each_lu::<T>(a, m, |i, lu, piv, zero| {
        if zero.is_some() {
            sign[i] = T::zero();
            log[i] = -(T::one() / T::zero());
            return Ok(());
        }
        let mut s = T::one();
        let mut l = T::zero();
        for (k, &p) in piv.iter().enumerate() {
            let d = lu[k * m + k];
            if (p != k) != (d < T::zero()) {
                s = -s;
            }
            // A NaN pivot has sign 0 (PyTorch's `sgn`), and its log NaN.
            if d.is_nan() {
                s = T::zero();
            }
            l = l + d.magnitude().ln();
        }
        sign[i] = s;
        log[i] = l;
        Ok(())
    })?;
    Ok((
        Tensor::from_slice(&sign, batch_shape, Device::Cpu)?,
        Tensor::from_slice(&log, batch_shape, Device::Cpu)?,
    ))
}

/// The determinant of each matrix of the host tensor `a`: the product of `U`'s diagonal, in
/// the order `getrf` leaves it, signed by the row swaps (0 for a singular matrix).
fn det_host<T: Real>(a: &Tensor, m: usize) -> Result<Tensor> {
    let batch_shape = &a.shape()[..a.dim() - 2];
    // The result's size checked before its buffer (a batch of 2^40 empty matrices).
    let batch = crate::tensor::check_result_size(batch_shape, a.dtype())?;
    let mut det = vec![T::one(); batch];
    each_lu::<T>(a, m, |i, lu, piv, _| {
        let mut d = T::one();
        for (k, &p) in piv.iter().enumerate() {
            d = d * lu[k * m + k];
            if p != k {
                d = -d;
            }
        }
        det[i] = d;
        Ok(())
    })?;
    Tensor::from_slice(&det, batch_shape, Device::Cpu)
}

/// `t` with two trailing dimensions of size 1 (a batch of scalars as 1 x 1 matrices).
fn as_matrices(t: &Tensor) -> Result<Tensor> {
    t.unsqueeze(-1)?.unsqueeze(-1)
}

impl Tensor {
    /// The inverse of each square matrix of `self` (`[..., m, m]`, float32 or float64;
    /// PyTorch's `linalg.inv` and `inverse`): `P A = L U` with partial pivoting (LAPACK's
    /// `getrf`), then `L U X = P I`. A singular matrix (a zero pivot) is an error naming it,
    /// as PyTorch's. Differentiable: the gradient is `-A⁻ᵀ G A⁻ᵀ`. Computed on the host: a
    /// CUDA tensor's matrices are copied there and the result back (as for [`Tensor::det`],
    /// [`Tensor::slogdet`] and [`Tensor::linalg_solve`]; Genesis has no GPU factorisation).
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let a = Tensor::from_slice(&[4.0f64, 2.0, 2.0, 4.0], &[2, 2], Device::Cpu)?;
    /// let inv = a.inverse()?;
    /// assert_eq!(inv.to_vec::<f64>()?, [1.0 / 3.0, -1.0 / 6.0, -1.0 / 6.0, 1.0 / 3.0]);
    /// assert!(Tensor::zeros([2, 2], genesis::DType::F32, Device::Cpu)?.inverse().is_err());
    /// # Ok(())
    /// # }
    /// ```
    #[doc(alias = "linalg_inv")]
    #[track_caller]
    pub fn inverse(&self) -> Result<Tensor> {
        let op = "linalg.inv";
        let m = check_square(op, self, false)?;
        crate::autograd::op(
            op,
            &[self],
            || {
                let a = host(self)?;
                if a.numel() == 0 {
                    // No matrices, or empty ones: the empty result, without an identity of
                    // the (maybe huge) matrix size.
                    return back(a, self);
                }
                let eye = Tensor::eye(m, None, a.dtype(), Device::Cpu)?
                    .expand(a.shape())?
                    .contiguous()?;
                back(solve_any(op, &a, &eye, true)?, self)
            },
            |y| {
                let y = Saved::new(op, y);
                Box::new(move |g, _| {
                    let yt = y.get()?.transpose(-2, -1)?;
                    Ok(vec![Some(yt.matmul(g)?.matmul(&yt)?.neg()?)])
                })
            },
        )
    }

    /// The determinant of each square matrix of `self` (`[..., m, m]` to `[...]`, float32 or
    /// float64; PyTorch's `linalg.det` and `det`): the product of the pivots of `P A = L U`
    /// (LAPACK's `getrf`), signed by the row swaps; 0 for a singular matrix, 1 for 0 x 0 ones.
    /// Differentiable where the matrix is invertible (`G det(A) A⁻ᵀ`); the gradient at a
    /// singular matrix is an error (PyTorch's comes from a singular value decomposition,
    /// which Genesis lacks).
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let a = Tensor::from_slice(&[1.0f64, 2.0, 3.0, 4.0], &[2, 2], Device::Cpu)?;
    /// assert_eq!(a.det()?.item::<f64>()?, -2.0);
    /// # Ok(())
    /// # }
    /// ```
    #[doc(alias = "linalg_det")]
    #[track_caller]
    pub fn det(&self) -> Result<Tensor> {
        let op = "linalg.det";
        let m = check_square(op, self, true)?;
        crate::autograd::op(
            op,
            &[self],
            || {
                let a = host(self)?;
                let d = match a.dtype() {
                    DType::F64 => det_host::<f64>(&a, m),
                    _ => det_host::<f32>(&a, m),
                }?;
                back(d, self)
            },
            |d| {
                let (a, d) = (Saved::new(op, self), Saved::new(op, d));
                Box::new(move |g, _| {
                    let inv_t = a.get()?.inverse()?.transpose(-2, -1)?;
                    let scale = as_matrices(&g.mul(&d.get()?)?)?;
                    Ok(vec![Some(inv_t.mul(&scale)?)])
                })
            },
        )
    }

    /// The sign and the natural logarithm of the absolute value of each matrix's
    /// determinant (PyTorch's `linalg.slogdet` and `slogdet`): `(sign, logabsdet)`, each of
    /// the batch shape `[...]` in `self`'s dtype; a singular matrix gives `(0, -inf)`. The
    /// log stays finite where the determinant itself would overflow or underflow. The
    /// logarithm is differentiable where the matrix is invertible (`G A⁻ᵀ`); the sign has no
    /// gradient.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let a = Tensor::from_slice(&[0.0f64, 2.0, 3.0, 0.0], &[2, 2], Device::Cpu)?;
    /// let (sign, log) = a.slogdet()?;
    /// assert_eq!(sign.item::<f64>()?, -1.0);
    /// assert!((log.item::<f64>()? - 6f64.ln()).abs() < 1e-15);
    /// # Ok(())
    /// # }
    /// ```
    #[doc(alias = "linalg_slogdet")]
    #[track_caller]
    pub fn slogdet(&self) -> Result<(Tensor, Tensor)> {
        let op = "linalg.slogdet";
        let m = check_square(op, self, false)?;
        let a = host(self)?;
        let (sign, log) = match a.dtype() {
            DType::F64 => slogdet_host::<f64>(&a, m),
            _ => slogdet_host::<f32>(&a, m),
        }?;
        let (sign, log) = (back(sign, self)?, back(log, self)?);
        let log = crate::autograd::op(
            op,
            &[self],
            || Ok(log),
            |_| {
                let a = Saved::new(op, self);
                Box::new(move |g, _| {
                    let inv_t = a.get()?.inverse()?.transpose(-2, -1)?;
                    Ok(vec![Some(inv_t.mul(&as_matrices(g)?)?)])
                })
            },
        )?;
        Ok((sign, log))
    }

    /// The natural logarithm of each matrix's determinant (PyTorch's `logdet`): `log|det|`
    /// where the determinant is positive, NaN where it is negative, -inf where it is 0.
    /// Differentiable as [`Tensor::slogdet`]'s logarithm.
    #[track_caller]
    pub fn logdet(&self) -> Result<Tensor> {
        let (sign, log) = self.slogdet()?;
        let nan = Tensor::zeros([0usize; 0], log.dtype(), log.device())?.add(f64::NAN)?;
        Tensor::where_cond(&sign.lt(0.0)?, &nan, &log)
    }

    /// The solution `X` of `A X = B` for each square matrix `A` of `self` (PyTorch's
    /// `linalg.solve(A, B)`): `b` is a batch of vectors `[..., m]` when it has one dimension or
    /// is of `self`'s shape without its last dimension, otherwise a batch of matrices `[...,
    /// m, k]`; the batch dimensions broadcast. Float32 or float64, one dtype for both. A
    /// singular matrix is an error, as PyTorch's. Differentiable: `G_B = A⁻ᵀ G`, `G_A = -G_B
    /// Xᵀ`.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let a = Tensor::from_slice(&[3.0f64, 1.0, 1.0, 2.0], &[2, 2], Device::Cpu)?;
    /// let b = Tensor::from_slice(&[9.0f64, 8.0], &[2], Device::Cpu)?;
    /// assert_eq!(a.linalg_solve(&b)?.to_vec::<f64>()?, [2.0, 3.0]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn linalg_solve(&self, b: &Tensor) -> Result<Tensor> {
        let op = "linalg.solve";
        let m = check_square(op, self, self.numel() == 0)?;
        check_float(op, b.dtype(), self.numel() == 0 || b.numel() == 0)?;
        if b.dtype() != self.dtype() {
            return Err(bad(
                op,
                format!(
                    "Expected A and B to have the same dtype, but found A of type {} and B of \
                     type {} instead",
                    self.dtype(),
                    b.dtype()
                ),
            ));
        }
        if b.device() != self.device() {
            return Err(Error::DeviceMismatch {
                op,
                lhs: self.device(),
                rhs: b.device(),
            });
        }
        let a_batch = &self.shape()[..self.dim() - 2];
        let vector = b.dim() == 1
            || (b.dim() + 1 == self.dim() && b.shape() == &self.shape()[..self.dim() - 1]);
        let bm = if vector { b.unsqueeze(-1)? } else { b.clone() };
        if bm.dim() < 2 || bm.shape()[bm.dim() - 2] != m {
            return Err(bad(
                op,
                format!(
                    "Incompatible shapes of A and B for the equation AX = B ({:?} and {:?})",
                    self.shape(),
                    b.shape()
                ),
            ));
        }
        let k = bm.shape()[bm.dim() - 1];
        let batch = crate::tensor::broadcast_shape(op, a_batch, &bm.shape()[..bm.dim() - 2])?;
        let shape_of =
            |tail: &[usize]| -> Vec<usize> { batch.iter().chain(tail).copied().collect() };
        let a = self.expand(shape_of(&[m, m]).as_slice())?;
        let bx = bm.expand(shape_of(&[m, k]).as_slice())?;
        let x = crate::autograd::op(
            op,
            &[self, &bm],
            || back(solve_any(op, &host(&a)?, &host(&bx)?, false)?, self),
            |x| {
                let (a, x) = (Saved::new(op, self), Saved::new(op, x));
                let (a_shape, b_shape) = (self.shape().to_vec(), bm.shape().to_vec());
                Box::new(move |g, needs| {
                    let (a, x) = (a.get()?, x.get()?);
                    let gb = a.transpose(-2, -1)?.linalg_solve(g)?;
                    let ga = if needs[0] {
                        Some(sum_to(&gb.matmul(&x.transpose(-2, -1)?)?.neg()?, &a_shape)?)
                    } else {
                        None
                    };
                    let gb = if needs[1] {
                        Some(sum_to(&gb, &b_shape)?)
                    } else {
                        None
                    };
                    Ok(vec![ga, gb])
                })
            },
        )?;
        if vector { x.squeeze(-1) } else { Ok(x) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: &[f64], shape: &[usize]) -> Tensor {
        Tensor::from_slice(v, shape, Device::Cpu).unwrap()
    }

    #[test]
    fn inverse_times_matrix_is_identity_in_a_batch() {
        let a = t(
            &[
                2.0, 1.0, 0.0, 1.0, 3.0, 1.0, 0.0, 1.0, 4.0, 0.0, 2.0, 1.0, 1.0, 0.0, 3.0, 4.0,
                1.0, 0.0,
            ],
            &[2, 3, 3],
        );
        let p = a
            .matmul(&a.inverse().unwrap())
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        for (i, v) in p.iter().enumerate() {
            let want = if i % 9 % 4 == 0 { 1.0 } else { 0.0 };
            assert!((v - want).abs() < 1e-14, "{i}: {v}");
        }
    }

    #[test]
    fn singular_matrices_are_named() {
        let a = t(&[1.0, 2.0, 2.0, 4.0], &[2, 2]);
        let e = a.inverse().unwrap_err().to_string();
        assert!(e.contains("The diagonal element 2 is zero"), "{e}");
        let b = t(&[1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0], &[2, 2, 2]);
        let e = b.inverse().unwrap_err().to_string();
        assert!(
            e.contains("(Batch element 1): The diagonal element 1"),
            "{e}"
        );
        assert_eq!(a.det().unwrap().item::<f64>().unwrap(), 0.0);
        let (s, l) = a.slogdet().unwrap();
        assert_eq!(s.item::<f64>().unwrap(), 0.0);
        assert_eq!(l.item::<f64>().unwrap(), f64::NEG_INFINITY);
        assert!(a.linalg_solve(&t(&[1.0, 1.0], &[2])).is_err());
    }

    #[test]
    fn dtypes_and_shapes_are_checked() {
        let i = Tensor::from_slice(&[1i64, 0, 0, 1], [2, 2], Device::Cpu).unwrap();
        assert!(i.inverse().unwrap_err().to_string().contains("Got int64"));
        let h = i.to_dtype(DType::F16).unwrap();
        assert!(h.det().unwrap_err().to_string().contains("Low precision"));
        let r = t(&[1.0; 6], &[2, 3]);
        assert!(r.inverse().unwrap_err().to_string().contains("2 by 3"));
        assert!(t(&[1.0], &[1]).det().is_err());
        // Empty: no matrices, or 0 x 0 ones (their determinant is 1).
        let e = Tensor::zeros([0, 2, 2], DType::F32, Device::Cpu).unwrap();
        assert_eq!(e.inverse().unwrap().shape(), &[0, 2, 2]);
        let z = Tensor::zeros([3, 0, 0], DType::F64, Device::Cpu).unwrap();
        assert_eq!(z.det().unwrap().to_vec::<f64>().unwrap(), [1.0; 3]);
        assert_eq!(z.inverse().unwrap().shape(), &[3, 0, 0]);
    }

    #[test]
    fn determinants_follow_the_row_swaps() {
        // Pivots from the second and third rows (two swaps).
        let a = t(&[0.0, 2.0, 1.0, 3.0, 0.0, 1.0, 1.0, 1.0, 1.0], &[3, 3]);
        // Cofactor expansion along the first row: 0 - 2 (3 - 1) + 1 (3 - 0) = -1.
        let d = a.det().unwrap().item::<f64>().unwrap();
        assert!((d + 1.0).abs() < 1e-15, "{d}");
        let (s, l) = a.slogdet().unwrap();
        assert_eq!(s.item::<f64>().unwrap(), -1.0);
        assert!(l.item::<f64>().unwrap().abs() < 1e-15);
        assert!(a.logdet().unwrap().item::<f64>().unwrap().is_nan());
        let f = a.to_dtype(DType::F32).unwrap();
        assert!((f.det().unwrap().item::<f32>().unwrap() + 1.0).abs() < 1e-6);
        // A swap changes the sign, a positive determinant has a logdet.
        let p = t(&[0.0, 1.0, 1.0, 0.0], &[2, 2]);
        assert_eq!(p.det().unwrap().item::<f64>().unwrap(), -1.0);
        let q = t(&[0.0, 2.0, -3.0, 0.0], &[2, 2]);
        assert_eq!(q.det().unwrap().item::<f64>().unwrap(), 6.0);
        assert!((q.logdet().unwrap().item::<f64>().unwrap() - 6f64.ln()).abs() < 1e-15);
    }

    /// NaN spreads (the sign of a NaN determinant is 0, as PyTorch's), an infinite pivot
    /// gives an infinite determinant, a transposed view is read as it is, 0 x 0 systems
    /// solve to nothing.
    #[test]
    fn special_values_and_views() {
        let n = t(&[1.0, f64::NAN, 2.0, 3.0], &[2, 2]);
        assert!(
            n.inverse()
                .unwrap()
                .to_vec::<f64>()
                .unwrap()
                .iter()
                .all(|v| v.is_nan())
        );
        assert!(n.det().unwrap().item::<f64>().unwrap().is_nan());
        let (s, l) = n.slogdet().unwrap();
        assert_eq!(s.item::<f64>().unwrap(), 0.0);
        assert!(l.item::<f64>().unwrap().is_nan());
        let i = t(&[f64::INFINITY, 1.0, 1.0, 1.0], &[2, 2]);
        assert_eq!(i.det().unwrap().item::<f64>().unwrap(), f64::INFINITY);
        let a = t(&[2.0, 1.0, 1.0, 3.0], &[2, 2]).t().unwrap();
        let inv = a.inverse().unwrap().to_vec::<f64>().unwrap();
        let want = [0.6, -0.2, -0.2, 0.4];
        assert!(
            inv.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-15),
            "{inv:?}"
        );
        let z = Tensor::zeros([0, 0], DType::F64, Device::Cpu).unwrap();
        let v = Tensor::zeros([0], DType::F64, Device::Cpu).unwrap();
        assert_eq!(z.linalg_solve(&v).unwrap().shape(), &[0]);
    }

    #[test]
    fn solve_broadcasts_and_takes_vectors() {
        let a = t(&[3.0, 1.0, 1.0, 2.0], &[2, 2]);
        // A batch of two right-hand sides as matrices [2, 2, 1] against one A.
        let b = t(&[9.0, 8.0, 4.0, 3.0], &[2, 2, 1]);
        let x = a.linalg_solve(&b).unwrap();
        assert_eq!(x.shape(), &[2, 2, 1]);
        assert_eq!(x.to_vec::<f64>().unwrap(), [2.0, 3.0, 1.0, 1.0]);
        // A's shape without its last dimension: vectors.
        let a2 = a.unsqueeze(0).unwrap().expand([2, 2, 2]).unwrap();
        let v = t(&[9.0, 8.0, 4.0, 3.0], &[2, 2]);
        let y = a2.linalg_solve(&v).unwrap();
        assert_eq!(y.shape(), &[2, 2]);
        assert_eq!(y.to_vec::<f64>().unwrap(), [2.0, 3.0, 1.0, 1.0]);
        assert!(a.linalg_solve(&t(&[1.0; 3], &[3])).is_err());
    }

    /// The gradients against central differences.
    #[test]
    fn gradients_match_finite_differences() {
        let a0 = [2.0, 1.0, 0.5, 1.0, 3.0, 1.0, 0.0, 1.0, 4.0];
        let b0 = [1.0, -2.0, 0.5, 3.0, 1.0, 2.0];
        let f = |a: &Tensor, b: &Tensor| -> Tensor {
            let inv = a.inverse().unwrap();
            let w = t(&[0.3, -0.7, 1.1, 0.2, 0.9, -0.4, 0.6, 0.1, -1.3], &[3, 3]);
            let s1 = inv.mul(&w).unwrap().sum().unwrap();
            let s2 = a.det().unwrap();
            let s3 = a.slogdet().unwrap().1;
            let s4 = a
                .linalg_solve(b)
                .unwrap()
                .mul(&t(&[1.0, 2.0, -1.0, 0.5, 0.3, 0.7], &[3, 2]))
                .unwrap()
                .sum()
                .unwrap();
            s1.add(&s2).unwrap().add(&s3).unwrap().add(&s4).unwrap()
        };
        let a = t(&a0, &[3, 3]).requires_grad_(true).unwrap();
        let b = t(&b0, &[3, 2]).requires_grad_(true).unwrap();
        f(&a, &b).backward().unwrap();
        let ga = a.grad().unwrap().to_vec::<f64>().unwrap();
        let gb = b.grad().unwrap().to_vec::<f64>().unwrap();
        let value =
            |av: &[f64], bv: &[f64]| f(&t(av, &[3, 3]), &t(bv, &[3, 2])).item::<f64>().unwrap();
        let h = 1e-6;
        for i in 0..9 {
            let (mut p, mut q) = (a0, a0);
            p[i] += h;
            q[i] -= h;
            let fd = (value(&p, &b0) - value(&q, &b0)) / (2.0 * h);
            assert!(
                (fd - ga[i]).abs() < 1e-6 * (1.0 + fd.abs()),
                "dA[{i}]: {fd} vs {}",
                ga[i]
            );
        }
        for i in 0..6 {
            let (mut p, mut q) = (b0, b0);
            p[i] += h;
            q[i] -= h;
            let fd = (value(&a0, &p) - value(&a0, &q)) / (2.0 * h);
            assert!(
                (fd - gb[i]).abs() < 1e-6 * (1.0 + fd.abs()),
                "dB[{i}]: {fd} vs {}",
                gb[i]
            );
        }
    }
}
