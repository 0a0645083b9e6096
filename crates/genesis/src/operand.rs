//! The right-hand operands of the binary ops, comparisons and in-place ops ([`Operand`]: a
//! tensor or a [`Scalar`]) and the dispatch that makes them follow PyTorch's rules: type
//! promotion (the dtype rules of `promote.rs`) and the conversions of a number (`args.rs`).
//! This module sits above `tensor.rs`, which knows no operand.

use genesis_storage::{BinaryOp, BinaryRhs, CompareOp, DType, UnaryOp};

use crate::args::{Scalar, ScalarValue, checked_scalar, holds_exactly, wrapped_scalar};
use crate::promote::{
    Participant, check_cast, compute_dtype, div_type, has_kernels, result_type_of,
};
use crate::tensor::{broadcast_shape, host_scalar_moved, numel_of};
use crate::{Device, Error, Result, Tensor};

/// The right-hand side of a binary op, a comparison or an in-place op: a `&Tensor` or a
/// [`Scalar`]. (Tensors are taken by reference only, so that clippy's
/// `needless_borrows_for_generic_args` does not flag `a.add(&b)`.)
pub trait Operand {
    /// The operand.
    fn operand(&self) -> OperandRef<'_>;
}

/// What an [`Operand`] is.
#[derive(Debug, Clone, Copy)]
pub enum OperandRef<'a> {
    /// A tensor.
    Tensor(&'a Tensor),
    /// A scalar.
    Scalar(ScalarValue),
}

impl Operand for &Tensor {
    fn operand(&self) -> OperandRef<'_> {
        OperandRef::Tensor(self)
    }
}

impl<S: Scalar> Operand for S {
    fn operand(&self) -> OperandRef<'_> {
        OperandRef::Scalar(self.value())
    }
}

/// An operand as promotion sees it.
pub(crate) fn participant_of(operand: OperandRef<'_>) -> Participant {
    match operand {
        OperandRef::Tensor(t) => Participant::Tensor(t.dtype(), t.dim()),
        OperandRef::Scalar(v) => Participant::Scalar(v),
    }
}

/// The dtype of `torch.result_type(a, b)`: what a binary op or a comparison of `a` and `b`
/// computes in (comparisons then give `Bool`). `b` is a tensor or a [`Scalar`]
/// (a Rust integer is a Python int, a float a Python float, a `bool` a Python bool).
///
/// ```
/// use genesis::{DType, Device, Tensor, result_type};
/// # fn main() -> genesis::Result<()> {
/// let i = Tensor::zeros(&[2], DType::I32, Device::Cpu)?;
/// let h = Tensor::zeros(&[2], DType::F16, Device::Cpu)?;
/// let d = Tensor::zeros((), DType::F64, Device::Cpu)?; // 0-d
/// assert_eq!(result_type(&i, &h), DType::F16);
/// assert_eq!(result_type(&i, 7), DType::I32);    // an int scalar keeps the tensor's dtype
/// assert_eq!(result_type(&i, 0.5), DType::F32);  // a float scalar lifts an integer tensor
/// assert_eq!(result_type(&h, &d), DType::F16);   // a 0-d tensor of the same category too
/// assert_eq!(result_type(&i, &d), DType::F64);   // ... unless its category is higher
/// # Ok(())
/// # }
/// ```
pub fn result_type(a: &Tensor, b: impl Operand) -> DType {
    result_type_of(&[
        Participant::Tensor(a.dtype(), a.dim()),
        participant_of(b.operand()),
    ])
}

/// The result dtype of `where(cond, a, b)`: the promotion of `a` and `b` (the condition takes
/// no part).
pub(crate) fn where_type(a: OperandRef<'_>, b: OperandRef<'_>) -> DType {
    result_type_of(&[participant_of(a), participant_of(b)])
}

impl Tensor {
    /// Elementwise `self + other`, broadcasting NumPy-style, promoting as PyTorch does. `other`
    /// is a tensor or a [`Scalar`](crate::Scalar) (PyTorch's rules for a number): `a.add(1)`.
    #[track_caller]
    pub fn add(&self, other: impl Operand) -> Result<Tensor> {
        self.binary_operand(BinaryOp::Add, other.operand())
    }

    /// Elementwise `self - other`, broadcasting.
    #[track_caller]
    pub fn sub(&self, other: impl Operand) -> Result<Tensor> {
        self.binary_operand(BinaryOp::Sub, other.operand())
    }

    /// Elementwise `self * other`, broadcasting.
    #[track_caller]
    pub fn mul(&self, other: impl Operand) -> Result<Tensor> {
        self.binary_operand(BinaryOp::Mul, other.operand())
    }

    /// Elementwise `self / other` (IEEE division), broadcasting; floating dtypes only.
    #[track_caller]
    pub fn div(&self, other: impl Operand) -> Result<Tensor> {
        self.binary_operand(BinaryOp::Div, other.operand())
    }

    /// Elementwise maximum, broadcasting; NaN if either element is NaN (like `torch.maximum`).
    #[track_caller]
    pub fn maximum(&self, other: impl Operand) -> Result<Tensor> {
        self.binary_operand(BinaryOp::Maximum, other.operand())
    }

    /// Elementwise minimum, broadcasting; NaN if either element is NaN.
    #[track_caller]
    pub fn minimum(&self, other: impl Operand) -> Result<Tensor> {
        self.binary_operand(BinaryOp::Minimum, other.operand())
    }

    /// Elementwise `floor(self / other)`, broadcasting (Python's `//`, PyTorch's
    /// `floor_divide` and `div(rounding_mode="floor")`), in the promoted dtype: integers stay
    /// integers (exact; a zero divisor is an error, as PyTorch's CPU says `ZeroDivisionError`:
    /// on CUDA a check with one synchronisation, skipped for divisors known to hold no zero,
    /// copied from host memory or drawn by `randint` and not written since),
    /// floats as PyTorch computes them (`(a - fmod(a, b)) / b` corrected toward the floor; a
    /// zero divisor gives IEEE's `a / b`). Bools are refused. Differentiable (zero gradient).
    ///
    /// ```
    /// use genesis::{tensor, Tensor};
    /// let a = tensor!([7i64, -7, 7, -7])?;
    /// let b = tensor!([2i64, 2, -2, -2])?;
    /// assert_eq!(a.floor_divide(&b)?.to_vec::<i64>()?, [3, -4, -4, 3]);
    /// assert_eq!(a.remainder(&b)?.to_vec::<i64>()?, [1, 1, -1, -1]);
    /// assert_eq!(a.fmod(&b)?.to_vec::<i64>()?, [1, -1, 1, -1]);
    /// assert_eq!((&a % 3)?.to_vec::<i64>()?, [1, 2, 1, 2]);
    /// # Ok::<(), genesis::Error>(())
    /// ```
    #[track_caller]
    pub fn floor_divide(&self, other: impl Operand) -> Result<Tensor> {
        self.binary_operand(BinaryOp::FloorDivide, other.operand())
    }

    /// Elementwise `self / other` rounded as `mode` says (PyTorch's `div(a, b,
    /// rounding_mode=...)`): [`RoundingMode::Floor`] is [`Tensor::floor_divide`],
    /// [`RoundingMode::Trunc`] the quotient rounded toward zero (integers: C's division, a
    /// zero divisor an error; floats: `trunc(a / b)`). The true division is [`Tensor::div`].
    #[track_caller]
    pub fn div_mode(&self, other: impl Operand, mode: RoundingMode) -> Result<Tensor> {
        let op = match mode {
            RoundingMode::Floor => BinaryOp::FloorDivide,
            RoundingMode::Trunc => BinaryOp::TruncDivide,
        };
        self.binary_operand(op, other.operand())
    }

    /// Elementwise remainder with the sign of the divisor (Python's `%`, PyTorch's
    /// `remainder`): `self - floor(self / other) * other`, broadcasting, in the promoted
    /// dtype; an integer zero divisor is an error (checked as for [`Tensor::floor_divide`]), a
    /// float one gives NaN. Also the `%` operator. Differentiable
    /// (`d/d other = -floor(self / other)`).
    #[track_caller]
    pub fn remainder(&self, other: impl Operand) -> Result<Tensor> {
        self.binary_operand(BinaryOp::Remainder, other.operand())
    }

    /// Elementwise C `fmod`: the remainder with the sign of `self` (PyTorch's `fmod`),
    /// broadcasting, exact; an integer zero divisor is an error, a float one gives NaN.
    /// Differentiable (`d/d other = -trunc(self / other)`).
    #[track_caller]
    pub fn fmod(&self, other: impl Operand) -> Result<Tensor> {
        self.binary_operand(BinaryOp::Fmod, other.operand())
    }

    /// Elementwise `atan2(self, other)`: the angle of the point `(other, self)` in `(-pi, pi]`,
    /// broadcasting (PyTorch's `atan2`); integers and bools compute in float32. Within 2 ulp
    /// on the GPU (CUDA's `atan2f`), 1 on the CPU. Differentiable.
    #[track_caller]
    pub fn atan2(&self, other: impl Operand) -> Result<Tensor> {
        self.binary_operand(BinaryOp::Atan2, other.operand())
    }

    /// Elementwise `sqrt(self^2 + other^2)` without overflow or underflow in between,
    /// broadcasting (PyTorch's `hypot`); float dtypes (integers and bools are refused, as
    /// PyTorch's). Within 3 ulp on the GPU (CUDA's
    /// `hypotf`), 1 on the CPU. Differentiable.
    #[track_caller]
    pub fn hypot(&self, other: impl Operand) -> Result<Tensor> {
        self.binary_operand(BinaryOp::Hypot, other.operand())
    }

    /// Elementwise `self & other` of integers or bools (PyTorch's `bitwise_and`, the `&`
    /// operator), broadcasting, in the promoted dtype; floats are refused.
    #[track_caller]
    pub fn bitwise_and(&self, other: impl Operand) -> Result<Tensor> {
        self.binary_operand(BinaryOp::BitwiseAnd, other.operand())
    }

    /// Elementwise `self | other` of integers or bools (the `|` operator); as
    /// [`Tensor::bitwise_and`].
    #[track_caller]
    pub fn bitwise_or(&self, other: impl Operand) -> Result<Tensor> {
        self.binary_operand(BinaryOp::BitwiseOr, other.operand())
    }

    /// Elementwise `self ^ other` of integers or bools (the `^` operator); as
    /// [`Tensor::bitwise_and`].
    #[track_caller]
    pub fn bitwise_xor(&self, other: impl Operand) -> Result<Tensor> {
        self.binary_operand(BinaryOp::BitwiseXor, other.operand())
    }

    /// In place: `self = op(self, other)`, `other` broadcast to `self`'s shape. `self` may be
    /// any tensor, a strided view included: the write goes to its storage, and every tensor
    /// that shares the storage sees it (PyTorch's in-place semantics). A contiguous `self` is
    /// written by the in-place kernel (nothing allocated; a broadcast or strided `other` is
    /// read through its layout); a strided one is computed into a temporary and copied back.
    /// An `other` that shares `self`'s storage is read before the write, so overlapping views
    /// give the answer of the values before it. When `other` has another dtype the op computes
    /// in the promoted dtype ([`result_type`]) and the result is converted
    /// to `self`'s dtype, which must be one it can be cast to (a float result into an integer
    /// tensor is an error, as in PyTorch). Bumps [`Tensor::version`].
    ///
    /// ```
    /// use genesis::{BinaryOp, DType, Device, Tensor, s};
    /// # fn main() -> genesis::Result<()> {
    /// let m = Tensor::arange(0.0, 6.0, 1.0, DType::F32, Device::Cpu)?.reshape(&[2, 3])?;
    /// let col = m.i(&s![.., 1])?; // a strided view: column 1
    /// col.binary_(BinaryOp::Mul, &Tensor::full(&[2], 10.0f32, Device::Cpu)?)?;
    /// assert_eq!(m.to_vec::<f32>()?, [0.0, 10.0, 2.0, 3.0, 40.0, 5.0]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn binary_(&self, op: BinaryOp, other: &Tensor) -> Result<()> {
        if self.in_place_recorded(op.name(), &[other], |x| x.binary(op, other))? {
            return Ok(());
        }
        if other.device() != self.device() && other.dim() == 0 && other.device() == Device::Cpu {
            return self.binary_(op, &other.to(self.device())?);
        }
        if self.needs_promotion(op, OperandRef::Tensor(other)) {
            return self.binary_promoted_(op, OperandRef::Tensor(other));
        }
        let name = op.name();
        self.check_operands(name, other)?;
        let shape = broadcast_shape(name, self.shape(), other.shape())?;
        check_divisor(op, other, self.numel() > 0)?;
        if shape != self.shape() {
            return Err(Error::ShapeMismatch {
                op: name,
                lhs: self.shape().to_vec(),
                rhs: other.shape().to_vec(),
            });
        }
        if op == BinaryOp::TruncDivide && trunc_div_in_f32(self, other, self.dtype()) {
            return self.copy_(&self.binary_raw(op, other)?);
        }
        // A broadcast or strided operand is read in place through its layout.
        let layout = other.layout().expand(self.shape())?;
        self.view.storage().binary_assign_shared(
            op,
            self.layout(),
            BinaryRhs::Tensor(other.view.storage(), &layout),
        )?;
        Ok(())
    }

    /// In place `self += other`, a tensor or a [`Scalar`](crate::Scalar) (see [`Tensor::binary_`]).
    #[track_caller]
    pub fn add_(&self, other: impl Operand) -> Result<()> {
        self.binary_operand_(BinaryOp::Add, other.operand())
    }

    /// In place `self -= other`.
    #[track_caller]
    pub fn sub_(&self, other: impl Operand) -> Result<()> {
        self.binary_operand_(BinaryOp::Sub, other.operand())
    }

    /// In place `self *= other`.
    #[track_caller]
    pub fn mul_(&self, other: impl Operand) -> Result<()> {
        self.binary_operand_(BinaryOp::Mul, other.operand())
    }

    /// In place `self /= other` (float dtypes).
    #[track_caller]
    pub fn div_(&self, other: impl Operand) -> Result<()> {
        self.binary_operand_(BinaryOp::Div, other.operand())
    }

    /// In place `self = self ^ exponent`, a tensor or a [`Scalar`](crate::Scalar) (PyTorch's
    /// `pow_`; the values of [`Tensor::pow`], converted to `self`'s dtype when it can hold the
    /// promoted result: an integer tensor to a float power is an error here).
    #[track_caller]
    pub fn pow_(&self, exponent: impl Operand) -> Result<()> {
        self.binary_operand_(BinaryOp::Pow, exponent.operand())
    }

    /// `op(self, other)` elementwise with NumPy broadcasting: the shapes are aligned at their
    /// last dimension and each pair of sizes must be equal or contain a 1. Both operands must
    /// be on one device; their dtypes promote by PyTorch's rules
    /// ([`result_type`]; `Div` of integers gives float32). The result is
    /// a new contiguous tensor.
    ///
    /// Operands that are not contiguous, or that are broadcast, are read in place through
    /// their strides (stride 0 along broadcast dimensions): no temporary is made.
    ///
    /// ```
    /// use genesis::{BinaryOp, DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], Device::Cpu)?;
    /// let row = Tensor::from_slice(&[10.0f32, 20.0, 30.0], &[3], Device::Cpu)?;
    /// let y = ((&x * &row)? - 1.0)?; // [2, 3] * [3] broadcasts
    /// assert_eq!(y.to_vec::<f32>()?, [9.0, 39.0, 89.0, 39.0, 99.0, 179.0]);
    /// let m = x.binary(BinaryOp::Maximum, &Tensor::full(&[1], 3.5f32, Device::Cpu)?)?;
    /// assert_eq!(m.to_vec::<f32>()?, [3.5, 3.5, 3.5, 4.0, 5.0, 6.0]);
    /// assert!(x.mul(&Tensor::zeros(&[2], DType::F32, Device::Cpu)?).is_err());
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn binary(&self, op: BinaryOp, other: &Tensor) -> Result<Tensor> {
        use crate::autograd::{Operand2, Saved, SavedOrMeta, binary_grad};
        if matches!(op, BinaryOp::Add | BinaryOp::Sub) {
            // The gradients need only the operands' shapes and dtypes.
            let factory = |_: &Tensor| -> Box<crate::autograd::BackwardFn> {
                let (sa, da) = (self.shape().to_vec(), self.dtype());
                let (sb, db) = (other.shape().to_vec(), other.dtype());
                Box::new(
                    move |g: &Tensor, needs: &[bool]| -> Result<Vec<Option<Tensor>>> {
                        use crate::autograd::{cast_grad, sum_to};
                        let ga = if needs[0] {
                            Some(cast_grad(sum_to(g, &sa)?, da)?)
                        } else {
                            None
                        };
                        let gb = if needs[1] {
                            let g = if op == BinaryOp::Sub {
                                g.neg()?
                            } else {
                                g.clone()
                            };
                            Some(cast_grad(sum_to(&g, &sb)?, db)?)
                        } else {
                            None
                        };
                        Ok(vec![ga, gb])
                    },
                )
            };
            return crate::autograd::op(
                op.name(),
                &[self, other],
                || self.binary_raw(op, other),
                factory,
            );
        }
        crate::autograd::op(
            op.name(),
            &[self, other],
            || self.binary_raw(op, other),
            |out| {
                // Saved only where a gradient reads it: `a * b` needs `b` for `a`'s gradient and
                // `a` for `b`'s; a quotient `b` (and its output for `b`'s gradient); the others
                // both. An operand not saved lends its shape and dtype.
                let (na, nb) = (self.requires_grad(), other.requires_grad());
                let (keep_a, keep_b) = match op {
                    BinaryOp::Mul => (nb, na),
                    BinaryOp::Div => (false, true),
                    _ => (true, true),
                };
                let (a, b) = (
                    SavedOrMeta::new(op.name(), self, keep_a),
                    SavedOrMeta::new(op.name(), other, keep_b),
                );
                let y = (op == BinaryOp::Pow || (op == BinaryOp::Div && nb))
                    .then(|| Saved::new(op.name(), out));
                Box::new(move |g, needs| {
                    let (a, b) = (a.get(g)?, b.get(g)?);
                    let y = y.as_ref().map(Saved::get).transpose()?;
                    let out = y.as_ref().unwrap_or(g);
                    let [ga, gb] =
                        binary_grad(op, &a, Operand2::Tensor(&b), out, g, [needs[0], needs[1]])?;
                    Ok(vec![ga, gb])
                })
            },
        )
    }

    /// [`Tensor::binary`] without recording.
    fn binary_raw(&self, op: BinaryOp, other: &Tensor) -> Result<Tensor> {
        if op == BinaryOp::TruncDivide {
            let r = self.binary_result_type(op, OperandRef::Tensor(other))?;
            if trunc_div_in_f32(self, other, r) {
                let wide = |t: &Tensor| t.cast_to(DType::F32);
                return wide(self)?.binary_raw(op, &wide(other)?)?.cast_to(r);
            }
        }
        if let Some((a, b)) = host_scalar_moved(self, other)? {
            return a.binary(op, &b);
        }
        if self.needs_promotion(op, OperandRef::Tensor(other)) {
            if let Some(out) = self.binary_mixed(op, other)? {
                return Ok(out);
            }
            return self.binary_promoted(op, OperandRef::Tensor(other));
        }
        let name = op.name();
        self.check_operands(name, other)?;
        let shape = broadcast_shape(name, self.shape(), other.shape())?;
        check_divisor(op, other, !shape.contains(&0))?;
        let dense = |t: &Tensor| t.shape() == shape && t.is_contiguous();
        if dense(self) && dense(other) {
            let (a, a_start) = self.dense_operand(&shape)?;
            let (b, b_start) = other.dense_operand(&shape)?;
            let n = numel_of(name, &shape)?;
            return Tensor::from_storage(a.binary_at(op, a_start, &b, b_start, n)?, &shape);
        }
        let expand = |t: &Tensor| t.layout().expand(&shape).map_err(Error::from);
        let (a, b) = (expand(self)?, expand(other)?);
        let out = self.view.storage().binary_strided(
            op,
            &a,
            BinaryRhs::Tensor(other.view.storage(), &b),
        )?;
        Tensor::from_storage(out, &shape)
    }
}

impl Tensor {
    /// `op(self, other)` of an f32 tensor and an f16 or bf16 one of the same shape, both
    /// contiguous on one device (a residual stream plus a half-precision layer's output under
    /// autocast): the f32 result of the promotion in one pass, without converting the half
    /// operand first. `None` for anything else (add, sub and mul only).
    fn binary_mixed(&self, op: BinaryOp, other: &Tensor) -> Result<Option<Tensor>> {
        let half = |d: DType| matches!(d, DType::F16 | DType::BF16);
        let (f, h, swap) = match (self.dtype(), other.dtype()) {
            (DType::F32, d) if half(d) => (self, other, false),
            (d, DType::F32) if half(d) => (other, self, true),
            _ => return Ok(None),
        };
        if !matches!(op, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul)
            || self.shape() != other.shape()
            || self.device() != other.device()
            || !self.is_contiguous()
            || !other.is_contiguous()
            || self.binary_result_type(op, OperandRef::Tensor(other))? != DType::F32
        {
            return Ok(None);
        }
        let n = numel_of(op.name(), self.shape())?;
        let (fs, f0) = f.dense_operand(self.shape())?;
        let (hs, h0) = h.dense_operand(self.shape())?;
        let out = fs.binary_mixed_at(op, f0, &hs, h0, n, swap)?;
        Ok(Some(Tensor::from_storage(out, self.shape())?))
    }

    /// A 0-d tensor of `value` in this tensor's dtype, on its device, converted as a fill value
    /// ([`checked_scalar`]).
    pub(crate) fn scalar_tensor_like(
        &self,
        op: &'static str,
        value: ScalarValue,
    ) -> Result<Tensor> {
        let host = checked_scalar(op, self.dtype(), value)?;
        Tensor::from_storage(host.to_device(self.device())?, &[])
    }

    /// `op(self, value)` by PyTorch's rules for a Python number: the result dtype by promotion,
    /// the number converted to it as C++ converts ([`wrapped_scalar`]), and a float16 or
    /// bfloat16 result computed in float32 with the number as a float32 (PyTorch's "opmath")
    /// when the narrow dtype does not hold the number exactly (`bf16 144 * 0.1` is `14.375`,
    /// not `144 * bf16(0.1)`). `maximum`/`minimum` with a number are `clamp_min`/`clamp_max`.
    pub(crate) fn binary_scalar_value(&self, op: BinaryOp, value: ScalarValue) -> Result<Tensor> {
        check_int_pow(op, self.dtype(), value)?;
        match op {
            BinaryOp::Maximum => return self.clamp_scalars("maximum", Some(value), None),
            BinaryOp::Minimum => return self.clamp_scalars("minimum", None, Some(value)),
            _ => {}
        }
        let r = self.binary_result_type(op, OperandRef::Scalar(value))?;
        if op.divides() && !r.is_float() && value.to_f64() == 0.0 && self.numel() > 0 {
            return Err(zero_division(op));
        }
        if op == BinaryOp::Pow {
            // PyTorch's `pow(Tensor, Scalar)` takes the exponent by checked conversion.
            checked_scalar(op.name(), r, value)?;
        }
        // A number divisor of a truncating division is one value (see `trunc_div_in_f32`).
        let trunc_one = op == BinaryOp::TruncDivide && matches!(r, DType::F16 | DType::BF16);
        if needs_opmath(r, value) || trunc_one {
            return self
                .cast_to(DType::F32)?
                .binary_scalar_value(op, value)?
                .cast_to(r);
        }
        let d = self.dtype();
        if r != d || !has_kernels(d) || (op.float_only() && !d.is_float()) {
            return self.binary_promoted(op, OperandRef::Scalar(value));
        }
        let s = wrapped_scalar(op.name(), d, value)?;
        self.binary_scalar_storage(op, &s)
    }

    /// `op(self, rhs)` for a tensor or a scalar.
    #[track_caller]
    pub(crate) fn binary_operand(&self, op: BinaryOp, rhs: OperandRef<'_>) -> Result<Tensor> {
        match rhs {
            OperandRef::Tensor(t) => self.binary(op, t),
            OperandRef::Scalar(v) => {
                use crate::autograd::{Operand2, SavedOrMeta, binary_grad};
                let s = v.to_f64();
                crate::autograd::op(
                    op.name(),
                    &[self],
                    || self.binary_scalar_value(op, v),
                    |_| {
                        // A product or quotient by a number needs only `a`'s shape and dtype.
                        let keep = !matches!(op, BinaryOp::Mul | BinaryOp::Div);
                        let a = SavedOrMeta::new(op.name(), self, keep);
                        Box::new(move |g, _| {
                            let a = a.get(g)?;
                            let [ga, _] =
                                binary_grad(op, &a, Operand2::Scalar(s), g, g, [true, false])?;
                            Ok(vec![ga])
                        })
                    },
                )
            }
        }
    }

    /// `op(value, self)`: a scalar on the left, as a 0-d tensor of the promoted dtype (in
    /// float32 for a float16 or bfloat16 result the narrow dtype cannot hold the number in, as
    /// [`Tensor::binary_scalar_value`]).
    #[track_caller]
    pub(crate) fn scalar_binary(value: ScalarValue, op: BinaryOp, rhs: &Tensor) -> Result<Tensor> {
        use crate::autograd::Saved;
        let s = value.to_f64();
        crate::autograd::op(
            op.name(),
            &[rhs],
            || Tensor::scalar_binary_raw(value, op, rhs),
            |out| {
                let (x, y) = (Saved::new(op.name(), rhs), Saved::new(op.name(), out));
                Box::new(move |g, _| {
                    let gx = crate::autograd::scalar_lhs_grad(op, s, &x.get()?, &y.get()?, g)?;
                    Ok(vec![Some(gx)])
                })
            },
        )
    }

    /// [`Tensor::scalar_binary`] without recording.
    fn scalar_binary_raw(value: ScalarValue, op: BinaryOp, rhs: &Tensor) -> Result<Tensor> {
        // The result dtype of `op(rhs, value)` is that of `op(value, rhs)`.
        let r = rhs.binary_result_type(op, OperandRef::Scalar(value))?;
        if needs_opmath(r, value) {
            return Tensor::scalar_binary(value, op, &rhs.cast_to(DType::F32)?)?.cast_to(r);
        }
        let lhs = Tensor::scalar_on(op.name(), r, value, rhs.device())?;
        lhs.binary(op, rhs)
    }

    /// In place `self = op(self, rhs)` for a tensor or a scalar (see [`Tensor::binary_`]).
    #[track_caller]
    pub(crate) fn binary_operand_(&self, op: BinaryOp, rhs: OperandRef<'_>) -> Result<()> {
        let operands: Vec<&Tensor> = match rhs {
            OperandRef::Tensor(t) => vec![t],
            OperandRef::Scalar(_) => Vec::new(),
        };
        if self.in_place_recorded(op.name(), &operands, |x| x.binary_operand(op, rhs))? {
            return Ok(());
        }
        if let OperandRef::Tensor(t) = rhs {
            // A 0-d host value joins an in-place op on another device (as in PyTorch).
            if t.device() != self.device() && t.dim() == 0 && t.device() == Device::Cpu {
                return self.binary_operand_(op, OperandRef::Tensor(&t.to(self.device())?));
            }
        }
        if let OperandRef::Scalar(v) = rhs {
            check_int_pow(op, self.dtype(), v)?;
            // Computed out of place by the scalar rules (float32 for a narrow float, clamp for
            // maximum/minimum), then written back: the result dtype must cast to `self`'s.
            let r = self.binary_result_type(op, rhs)?;
            if op == BinaryOp::Pow {
                checked_scalar(op.name(), r, v)?;
            }
            if needs_opmath(r, v) || matches!(op, BinaryOp::Maximum | BinaryOp::Minimum) {
                crate::promote::check_cast(op.name(), r, self.dtype())?;
                let out = self.binary_scalar_value(op, v)?;
                return self.copy_(&out.cast_to(self.dtype())?);
            }
        }
        if self.needs_promotion(op, rhs) {
            return self.binary_promoted_(op, rhs);
        }
        match rhs {
            OperandRef::Tensor(t) => self.binary_(op, t),
            OperandRef::Scalar(v) => {
                let host = wrapped_scalar(op.name(), self.dtype(), v)?;
                let s = Tensor::from_storage(host.to_device(self.device())?, &[])?;
                self.binary_(op, &s)
            }
        }
    }
}

/// Whether an op with a number and a result of dtype `r` computes in float32: `r` is float16
/// or bfloat16 and does not hold the number exactly (PyTorch computes these dtypes in float32,
/// the number taken as a float32; with a number the narrow dtype holds the kernels' own
/// rounding is the same, since they compute in float32 too).
fn needs_opmath(r: DType, value: ScalarValue) -> bool {
    matches!(r, DType::F16 | DType::BF16) && !holds_exactly(r, value)
}

/// Whether PyTorch computes `trunc(a / b)` of a float16 or bfloat16 result `r` in float32,
/// rounding once: when the divisor is one value, a one-element tensor on the CPU (its CPU
/// kernel's `is_scalar` path) or a 0-d CPU tensor beside a CUDA one (its CUDA kernel's CPU
/// scalar). Otherwise it rounds the quotient to `r` before truncating (`trunc(-3 / 0.30078125)`
/// in bfloat16 is -10 from a tensor of divisors, -9 from a single one), as the kernels do.
fn trunc_div_in_f32(a: &Tensor, b: &Tensor, r: DType) -> bool {
    matches!(r, DType::F16 | DType::BF16)
        && b.numel() == 1
        && b.device() == Device::Cpu
        && (a.device() == Device::Cpu || b.dim() == 0)
}

/// For an integer division with results (`computes`: the result is not empty), an error when
/// the divisor `other` holds a zero (one comparison, a reduction and a synchronisation;
/// PyTorch's CPU checks, its CUDA does not), unless the divisor's storage's known bounds
/// exclude zero (`Storage::known_bounds`: uploaded from the host, or drawn by `randint`).
fn check_divisor(op: BinaryOp, other: &Tensor, computes: bool) -> Result<()> {
    let nonzero = || {
        other
            .view
            .storage()
            .known_bounds()
            .is_some_and(|(lo, hi)| lo > 0 || hi < 0)
    };
    if op.divides()
        && !other.dtype().is_float()
        && computes
        && !nonzero()
        && other.eq_scalar(0)?.any()?.item::<bool>()?
    {
        return Err(zero_division(op));
    }
    Ok(())
}

/// An integer division by zero (PyTorch's CPU: `ZeroDivisionError`).
fn zero_division(op: BinaryOp) -> Error {
    Error::InvalidArgument {
        op: op.name(),
        reason: "ZeroDivisionError: integer division by zero".into(),
    }
}

/// How [`Tensor::div_mode`] rounds the quotient (PyTorch's `rounding_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoundingMode {
    /// Toward zero (`"trunc"`).
    Trunc,
    /// Toward negative infinity (`"floor"`, Python's `//`).
    Floor,
}

/// PyTorch's rule for an integer (or bool) tensor to the power of an integer scalar: a
/// negative exponent is an error (NumPy's), while a tensor of negative exponents gives 0 (1 and
/// +-1 for bases 1 and -1).
fn check_int_pow(op: BinaryOp, base: DType, exponent: ScalarValue) -> Result<()> {
    if op == BinaryOp::Pow && !base.is_float() && matches!(exponent, ScalarValue::Int(e) if e < 0) {
        return Err(Error::InvalidArgument {
            op: op.name(),
            reason: "Integers to negative integer powers are not allowed.".into(),
        });
    }
    Ok(())
}

impl Tensor {
    /// This tensor in `dtype`: itself (shared) when it already is, else a converted copy.
    pub(crate) fn cast_to(&self, dtype: DType) -> Result<Tensor> {
        if self.dtype() == dtype {
            Ok(self.clone())
        } else {
            self.to_dtype(dtype)
        }
    }

    /// This tensor converted to the result dtype `r` (its values as `r` holds them: an int64
    /// 0-d operand of a uint8 result wraps), then to the dtype `c` the kernels compute `r` in.
    fn cast_via(&self, r: DType, c: DType) -> Result<Tensor> {
        if self.dtype() == r || r == c {
            self.cast_to(c)
        } else {
            self.cast_to(r)?.cast_to(c)
        }
    }

    /// The result dtype of `op(self, rhs)`: PyTorch's promotion, float32 for a true division
    /// of integers. Errors where PyTorch has no such op (bool subtraction, `pow` of bools).
    pub(crate) fn binary_result_type(&self, op: BinaryOp, rhs: OperandRef<'_>) -> Result<DType> {
        let r = result_type_of(&[
            Participant::Tensor(self.dtype(), self.dim()),
            participant_of(rhs),
        ]);
        let bool_operand = self.dtype() == DType::Bool
            || match rhs {
                OperandRef::Tensor(t) => t.dtype() == DType::Bool,
                OperandRef::Scalar(v) => matches!(v, ScalarValue::Bool(_)),
            };
        let refuse = |dtype| {
            Err(Error::Storage(genesis_storage::Error::UnsupportedDType {
                op: op.name(),
                dtype,
            }))
        };
        match op {
            BinaryOp::Hypot if !r.is_float() => refuse(r),
            BinaryOp::Div | BinaryOp::Atan2 | BinaryOp::Hypot => Ok(div_type(r)),
            _ if op.divides() && r == DType::Bool => refuse(r),
            _ if op.int_only() && r.is_float() => refuse(r),
            BinaryOp::Sub if bool_operand => Err(Error::InvalidArgument {
                op: op.name(),
                reason: "subtraction with a bool operand is not supported (use logical \
                         operations on masks, as in PyTorch)"
                    .into(),
            }),
            _ => Ok(r),
        }
    }

    /// Whether `op(self, rhs)` needs the promoting path: the operands differ in dtype, the
    /// result dtype differs from `self`'s, or the kernels lack it.
    pub(crate) fn needs_promotion(&self, op: BinaryOp, rhs: OperandRef<'_>) -> bool {
        let same = match rhs {
            OperandRef::Tensor(t) => t.dtype() == self.dtype(),
            OperandRef::Scalar(v) => {
                result_type_of(&[
                    Participant::Tensor(self.dtype(), self.dim()),
                    Participant::Scalar(v),
                ]) == self.dtype()
            }
        };
        !same || !has_kernels(self.dtype()) || (op.float_only() && !self.dtype().is_float())
    }

    /// `op(self, rhs)` with PyTorch's type promotion (see the module documentation).
    #[track_caller]
    pub(crate) fn binary_promoted(&self, op: BinaryOp, rhs: OperandRef<'_>) -> Result<Tensor> {
        let name = op.name();
        if let OperandRef::Tensor(t) = rhs {
            self.check_device(name, t)?;
            broadcast_shape(name, self.shape(), t.shape())?;
        }
        let r = self.binary_result_type(op, rhs)?;
        let c = compute_dtype(r);
        // A true division converts integers straight to float (PyTorch's
        // `promote_integer_inputs_to_float`); the other ops through the result dtype.
        let a = self.cast_via(r, c)?;
        let out = match rhs {
            OperandRef::Tensor(t) => a.binary(op, &t.cast_via(r, c)?)?,
            OperandRef::Scalar(v) => {
                // A number becomes an element of the result dtype as C++ converts it (wrapping
                // into a narrower integer), then of the dtype the kernels compute in.
                let s = wrapped_scalar(name, r, v)?;
                a.binary_scalar_storage(op, &if c == r { s } else { s.to_dtype(c)? })?
            }
        };
        out.cast_to(r)
    }

    /// In place `self = op(self, rhs)` with PyTorch's rule: the op computes in the promoted
    /// dtype and the result is converted to `self`'s, which must be a dtype it can be cast to
    /// (no float into an integer tensor, nothing but bool into a bool tensor).
    #[track_caller]
    pub(crate) fn binary_promoted_(&self, op: BinaryOp, rhs: OperandRef<'_>) -> Result<()> {
        let name = op.name();
        let r = self.binary_result_type(op, rhs)?;
        check_cast(name, r, self.dtype())?;
        if let OperandRef::Tensor(t) = rhs {
            let shape = broadcast_shape(name, self.shape(), t.shape())?;
            if shape != self.shape() {
                return Err(Error::ShapeMismatch {
                    op: name,
                    lhs: self.shape().to_vec(),
                    rhs: t.shape().to_vec(),
                });
            }
        }
        let out = self.binary_promoted(op, rhs)?.cast_to(self.dtype())?;
        self.copy_(&out)
    }

    /// `op(self, other)` as a `Bool` tensor, the operands promoted to their common dtype.
    #[track_caller]
    pub(crate) fn compare_promoted(&self, op: CompareOp, other: OperandRef<'_>) -> Result<Tensor> {
        let name = op.name();
        let r = result_type_of(&[
            Participant::Tensor(self.dtype(), self.dim()),
            participant_of(other),
        ]);
        let rhs = match other {
            OperandRef::Tensor(t) => {
                self.check_device(name, t)?;
                broadcast_shape(name, self.shape(), t.shape())?;
                t.clone()
            }
            OperandRef::Scalar(v) => Tensor::scalar_on(name, r, v, self.device())?,
        };
        let c = compute_dtype(r);
        self.cast_via(r, c)?.compare(op, &rhs.cast_via(r, c)?)
    }

    /// `op(self)` for the dtypes and ops the kernels lack: the float ops (exp, log, sqrt,
    /// tanh, sigmoid) of integers and bools compute in float32 (PyTorch's rule for them);
    /// the other ops of uint8/int8/int16 in int32, converted back (wrapping as PyTorch's).
    /// Of bools, `sign` is a copy and `square` int64 (PyTorch's); the other ops are
    /// [`genesis_storage::Error::UnsupportedDType`].
    #[track_caller]
    pub(crate) fn unary_promoted(&self, op: UnaryOp) -> Result<Tensor> {
        let d = self.dtype();
        if op.float_only() && !d.is_float() {
            return self.to_dtype(DType::F32)?.unary(op);
        }
        if d == DType::Bool {
            // PyTorch's sign of bools is the bools; square is pow(x, 2): int64.
            return match op {
                UnaryOp::Sign => self.deep_clone(),
                UnaryOp::Square => self.to_dtype(DType::I64)?.unary(op),
                _ => Err(Error::Storage(genesis_storage::Error::UnsupportedDType {
                    op: op.name(),
                    dtype: d,
                })),
            };
        }
        self.cast_to(compute_dtype(d))?.unary(op)?.cast_to(d)
    }

    /// In place `self = op(self)` through [`Tensor::unary_promoted`]: the result is converted
    /// to `self`'s dtype, which must hold it (a float result into an integer or bool tensor
    /// is an error, as in PyTorch).
    #[track_caller]
    pub(crate) fn unary_promoted_(&self, op: UnaryOp) -> Result<()> {
        let name = op.name();
        let out = self.unary_promoted(op)?;
        check_cast(name, out.dtype(), self.dtype())?;
        self.copy_(&out.cast_to(self.dtype())?)
    }

    /// A 0-d tensor of `value` in `dtype` on `device`, converted as an operand of an
    /// elementwise op ([`wrapped_scalar`](crate::args::wrapped_scalar)).
    pub(crate) fn scalar_on(
        op: &'static str,
        dtype: DType,
        value: ScalarValue,
        device: Device,
    ) -> Result<Tensor> {
        let host = wrapped_scalar(op, dtype, value)?;
        Tensor::from_storage(
            if device == Device::Cpu {
                host
            } else {
                host.to_device(device)?
            },
            &[],
        )
    }
}

/// `std::ops` operators on tensors and references; they return `Result<Tensor>` because an
/// operation can fail (shapes, dtypes, devices, out of memory): `(&a + &b)?`.
macro_rules! tensor_operator {
    ($trait:ident, $method:ident, $op:expr) => {
        impl std::ops::$trait<&Tensor> for &Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                self.binary($op, rhs)
            }
        }
        impl std::ops::$trait<Tensor> for Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                self.binary($op, &rhs)
            }
        }
        impl std::ops::$trait<&Tensor> for Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                self.binary($op, rhs)
            }
        }
        impl<S: Scalar> std::ops::$trait<S> for &Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: S) -> Result<Tensor> {
                self.binary_scalar_value($op, rhs.value())
            }
        }
        impl<S: Scalar> std::ops::$trait<S> for Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: S) -> Result<Tensor> {
                self.binary_scalar_value($op, rhs.value())
            }
        }
    };
}

impl std::ops::Neg for &Tensor {
    type Output = Result<Tensor>;
    #[track_caller]
    fn neg(self) -> Result<Tensor> {
        self.unary(UnaryOp::Neg)
    }
}

impl std::ops::Neg for Tensor {
    type Output = Result<Tensor>;
    #[track_caller]
    fn neg(self) -> Result<Tensor> {
        self.unary(UnaryOp::Neg)
    }
}

tensor_operator!(Add, add, BinaryOp::Add);
tensor_operator!(Sub, sub, BinaryOp::Sub);
tensor_operator!(Mul, mul, BinaryOp::Mul);
tensor_operator!(Div, div, BinaryOp::Div);
tensor_operator!(Rem, rem, BinaryOp::Remainder);
tensor_operator!(BitAnd, bitand, BinaryOp::BitwiseAnd);
tensor_operator!(BitOr, bitor, BinaryOp::BitwiseOr);
tensor_operator!(BitXor, bitxor, BinaryOp::BitwiseXor);

macro_rules! tensor_assign_operator {
    ($trait:ident, $method:ident, $op:expr, $fallible:literal) => {
        /// In place, `self` op= `rhs` (`rhs` broadcast to `self`'s shape): the compound
        /// assignment form of
        #[doc = concat!("[`Tensor::", $fallible, "`],")]
        /// on any view (the write is seen through every tensor sharing the storage),
        /// allocating nothing when `self` is contiguous.
        ///
        /// # Panics
        ///
        /// When the in-place op fails (shapes that do not broadcast to `self`'s, another dtype
        /// or device, a `self` that repeats elements, as an `expand` does): Rust's compound
        /// assignment cannot return an error, so the error's message becomes the panic's,
        /// and nothing is written. Use
        #[doc = concat!("[`Tensor::", $fallible, "`]")]
        /// to get the error as a value.
        impl std::ops::$trait<&Tensor> for Tensor {
            #[track_caller]
            fn $method(&mut self, rhs: &Tensor) {
                if let Err(e) = self.binary_($op, rhs) {
                    panic!("{e}");
                }
            }
        }
        /// As the form taking `&Tensor`.
        impl std::ops::$trait<Tensor> for Tensor {
            #[track_caller]
            fn $method(&mut self, rhs: Tensor) {
                if let Err(e) = self.binary_($op, &rhs) {
                    panic!("{e}");
                }
            }
        }
        /// As the form taking `&Tensor`, with a scalar converted to `self`'s dtype.
        impl<S: Scalar> std::ops::$trait<S> for Tensor {
            #[track_caller]
            fn $method(&mut self, rhs: S) {
                if let Err(e) = self.binary_operand_($op, rhs.operand()) {
                    panic!("{e}");
                }
            }
        }
    };
}

tensor_assign_operator!(AddAssign, add_assign, BinaryOp::Add, "add_");
tensor_assign_operator!(SubAssign, sub_assign, BinaryOp::Sub, "sub_");
tensor_assign_operator!(MulAssign, mul_assign, BinaryOp::Mul, "mul_");
tensor_assign_operator!(DivAssign, div_assign, BinaryOp::Div, "div_");

/// `scalar op tensor` with an `f64` or an `i64` on the left: `2.0 * &a`, `1 - a`. Only these
/// two: with a second float (or integer) type on the left, an unsuffixed literal there would
/// have no type Rust can infer before `?` or `.unwrap()` needs it (`(2.0 * &a)?` would not
/// compile). Other scalar types go on the right (`&a * x`), or through `f64::from`.
macro_rules! scalar_lhs_operators {
    ($($s:ty),*) => {$(
        scalar_lhs_operators!(@one $s, Add, add, BinaryOp::Add);
        scalar_lhs_operators!(@one $s, Sub, sub, BinaryOp::Sub);
        scalar_lhs_operators!(@one $s, Mul, mul, BinaryOp::Mul);
        scalar_lhs_operators!(@one $s, Div, div, BinaryOp::Div);
    )*};
    (@one $s:ty, $trait:ident, $method:ident, $op:expr) => {
        impl std::ops::$trait<&Tensor> for $s {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::scalar_binary(self.value(), $op, rhs)
            }
        }
        impl std::ops::$trait<Tensor> for $s {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                Tensor::scalar_binary(self.value(), $op, &rhs)
            }
        }
    };
}

scalar_lhs_operators!(f64, i64);
