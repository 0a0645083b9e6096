//! Comparisons to bools, `where`, `pow`, and the `_out` forms that write into a given tensor.

use genesis_storage::{BinaryRhs, Layout, Storage};

use crate::args::checked_scalar;
use crate::operand::where_type;
use crate::promote::has_kernels;
use crate::tensor::broadcast_shape;
use crate::{
    BinaryOp, CompareOp, DType, Device, Error, Operand, OperandRef, Result, Scalar, Tensor, UnaryOp,
};

/// Generates a named comparison against a tensor and against a scalar.
macro_rules! comparisons {
    ($($op:ident, $scalar:ident, $variant:ident, $doc:literal;)*) => {
        impl Tensor {
            $(
                #[doc = concat!("`self ", $doc, " other` elementwise, broadcast, as a `Bool` tensor; `other` is a tensor or a scalar (see [`Tensor::compare`]).")]
                #[track_caller]
                pub fn $op(&self, other: impl Operand) -> Result<Tensor> {
                    self.compare_operand(CompareOp::$variant, other.operand())
                }

                #[doc = concat!("`self ", $doc, " scalar` elementwise as a `Bool` tensor (see [`Tensor::compare_scalar`]).")]
                #[track_caller]
                pub fn $scalar(&self, scalar: impl Scalar) -> Result<Tensor> {
                    self.compare_scalar(CompareOp::$variant, scalar)
                }
            )*
        }
    };
}

comparisons! {
    eq, eq_scalar, Eq, "==";
    ne, ne_scalar, Ne, "!=";
    lt, lt_scalar, Lt, "<";
    le, le_scalar, Le, "<=";
    gt, gt_scalar, Gt, ">";
    ge, ge_scalar, Ge, ">=";
}

impl Tensor {
    /// `op(self, other)` elementwise with NumPy broadcasting, as a new `Bool` tensor. Both
    /// operands must be on one device; they are compared in their promoted dtype
    /// ([`result_type`](crate::result_type)), any dtype, on every device.
    /// Comparisons are IEEE's: NaN is unequal to everything, including itself.
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1.0f32, 5.0, 3.0, f32::NAN], &[4], Device::Cpu)?;
    /// let y = Tensor::from_slice(&[3.0f32], &[1], Device::Cpu)?;
    /// let m = x.lt(&y)?;
    /// assert_eq!(m.dtype(), DType::Bool);
    /// assert_eq!(m.to_bool_vec()?, [true, false, false, false]);
    /// assert_eq!(x.ne(&x)?.to_bool_vec()?, [false, false, false, true]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn compare(&self, op: CompareOp, other: &Tensor) -> Result<Tensor> {
        if let Some((a, b)) = crate::tensor::host_scalar_moved(self, other)? {
            return a.compare(op, &b);
        }
        if self.dtype() != other.dtype() || !has_kernels(self.dtype()) {
            return self.compare_promoted(op, OperandRef::Tensor(other));
        }
        let name = op.name();
        self.check_operands(name, other)?;
        let shape = broadcast_shape(name, self.shape(), other.shape())?;
        // Both operands are read in place through their layouts (stride 0 where broadcast).
        let (la, lb) = (
            self.layout().expand(&shape)?,
            other.layout().expand(&shape)?,
        );
        let out = self.view.storage().compare_strided(
            op,
            &la,
            BinaryRhs::Tensor(other.view.storage(), &lb),
        )?;
        Tensor::from_storage(out, &shape)
    }

    /// `op(self, other)` for a tensor or a scalar (promoted as PyTorch does).
    #[track_caller]
    pub(crate) fn compare_operand(&self, op: CompareOp, other: OperandRef<'_>) -> Result<Tensor> {
        match other {
            OperandRef::Tensor(t) => self.compare(op, t),
            OperandRef::Scalar(_) => self.compare_promoted(op, other),
        }
    }

    /// `op(self, scalar)` elementwise as a `Bool` tensor. The two compare in their promoted
    /// dtype: `self`'s, unless the scalar's category is higher (an integer tensor against
    /// `0.5` compares in float32); the scalar must be representable in it (otherwise
    /// [`Error::ScalarOutOfRange`]).
    #[track_caller]
    pub fn compare_scalar(&self, op: CompareOp, scalar: impl Scalar) -> Result<Tensor> {
        self.compare_operand(op, OperandRef::Scalar(scalar.value()))
    }

    /// `cond ? a : b` elementwise, the three broadcast together (PyTorch's `torch.where`).
    /// `cond` must be `Bool`; `a` and `b` are tensors or scalars, promoted to their common
    /// dtype ([`result_type`](crate::result_type)); tensors must be on `cond`'s device.
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[-2.0f32, 3.0, -1.0, 4.0], &[2, 2], Device::Cpu)?;
    /// let y = Tensor::where_cond(&x.gt(0)?, &x, 0)?; // relu
    /// assert_eq!(y.to_vec::<f32>()?, [0.0, 3.0, 0.0, 4.0]);
    /// let i = Tensor::from_slice(&[1i32, 2], &[2], Device::Cpu)?;
    /// let mixed = Tensor::where_cond(&i.gt(1)?, &i, 0.5)?; // int32 and a float: float32
    /// assert_eq!(mixed.dtype(), DType::F32);
    /// assert_eq!(mixed.to_vec::<f32>()?, [0.5, 2.0]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn where_cond(cond: &Tensor, a: impl Operand, b: impl Operand) -> Result<Tensor> {
        let (a, b) = (a.operand(), b.operand());
        let requires = |o: OperandRef<'_>| matches!(o, OperandRef::Tensor(t) if t.requires_grad());
        if !(crate::autograd::is_grad_enabled() && (requires(a) || requires(b))) {
            return Tensor::where_raw(cond, a, b);
        }
        let tensors: Vec<&Tensor> = [a, b]
            .iter()
            .filter_map(|o| match o {
                OperandRef::Tensor(t) => Some(*t),
                OperandRef::Scalar(_) => None,
            })
            .collect();
        let out = crate::no_grad(|| Tensor::where_raw(cond, a, b))?;
        // The condition routes the gradient: to `a` where it holds, to `b` elsewhere.
        let c = crate::autograd::Saved::new("where", cond);
        let meta = tensors
            .iter()
            .map(|t| (t.shape().to_vec(), t.dtype()))
            .collect::<Vec<_>>();
        let a_is_tensor = matches!(a, OperandRef::Tensor(_));
        let back = move |g: &Tensor, needs: &[bool]| -> Result<Vec<Option<Tensor>>> {
            use crate::autograd::{cast_grad, sum_to};
            let c = c.get()?;
            let mut out = Vec::with_capacity(needs.len());
            for (i, (shape, dtype)) in meta.iter().enumerate() {
                if !needs[i] {
                    out.push(None);
                    continue;
                }
                let for_a = i == 0 && a_is_tensor;
                let d = if for_a {
                    Tensor::where_cond(&c, g, 0.0)?
                } else {
                    Tensor::where_cond(&c, 0.0, g)?
                };
                out.push(Some(cast_grad(sum_to(&d, shape)?, *dtype)?));
            }
            Ok(out)
        };
        Ok(crate::autograd::record(
            "where",
            &tensors,
            out,
            Box::new(back),
        ))
    }

    fn where_raw(cond: &Tensor, a: OperandRef<'_>, b: OperandRef<'_>) -> Result<Tensor> {
        let name = "where";
        if cond.dtype() != DType::Bool {
            return Err(Error::InvalidArgument {
                op: name,
                reason: format!("the condition must be a bool tensor, not {}", cond.dtype()),
            });
        }
        let r = where_type(a, b);
        // A tensor value in the result dtype, or a scalar as one host element of it (passed to
        // the kernel as an argument).
        let value = |o: OperandRef<'_>| -> Result<WhereValue> {
            match o {
                OperandRef::Tensor(t) => {
                    // A 0-d host value joins a condition on another device (as in PyTorch).
                    if t.device() != cond.device() && t.dim() == 0 && t.device() == Device::Cpu {
                        return Ok(WhereValue::Tensor(t.cast_to(r)?.to(cond.device())?));
                    }
                    if t.device() != cond.device() {
                        return Err(Error::DeviceMismatch {
                            op: name,
                            lhs: cond.device(),
                            rhs: t.device(),
                        });
                    }
                    Ok(WhereValue::Tensor(t.cast_to(r)?))
                }
                OperandRef::Scalar(v) => Ok(WhereValue::Scalar(checked_scalar(name, r, v)?)),
            }
        };
        let (a, b) = (value(a)?, value(b)?);
        let shape = broadcast_shape(name, a.shape(), b.shape())?;
        let shape = broadcast_shape(name, cond.shape(), &shape)?;
        // Everything is read in place through its layout (stride 0 where broadcast).
        let (la, lb) = (a.layout(&shape)?, b.layout(&shape)?);
        let out = genesis_storage::Storage::select_strided(
            (cond.view.storage(), &cond.layout().expand(&shape)?),
            a.rhs(la.as_ref()),
            b.rhs(lb.as_ref()),
        )?;
        Tensor::from_storage(out, &shape)
    }

    /// `self ^ exponent` elementwise, broadcast, in the promoted dtype (PyTorch's `pow`; an
    /// integer tensor to a float power is float32). Floats are computed in f32 with CUDA's
    /// `powf` on the GPU and Rust's on the CPU, within a few ulp of the exact value; float64 in
    /// `f64` (CUDA's `pow`, Rust's `powf`).
    ///
    /// Integers (uint8, int8, int16, int32, int64) are exact and wrap as repeated
    /// multiplication in the result dtype does. An integer tensor to a negative integer scalar
    /// is an [`Error::InvalidArgument`] ("Integers to negative integer powers are not
    /// allowed."), while negative elements of an integer exponent tensor give 0, except 1 for a
    /// base of 1 and -1 or 1 (odd or even exponent) for a base of -1, as in PyTorch. A bool
    /// result (bool to a bool power) is [`genesis_storage::Error::UnsupportedDType`].
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[2i32, -3, 1, -1], [4], Device::Cpu)?;
    /// assert_eq!(x.pow(3)?.to_vec::<i32>()?, [8, -27, 1, -1]);
    /// assert_eq!(x.pow(31)?.to_vec::<i32>()?[0], i32::MIN); // wraps
    /// let e = Tensor::from_slice(&[-1i32, -1, -2, -3], [4], Device::Cpu)?;
    /// assert_eq!(x.pow(&e)?.to_vec::<i32>()?, [0, 0, 1, -1]);
    /// assert!(x.pow(-1).is_err());
    /// assert_eq!(x.pow(0.5)?.dtype(), genesis::DType::F32);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn pow(&self, exponent: impl Operand) -> Result<Tensor> {
        self.binary_operand(BinaryOp::Pow, exponent.operand())
    }

    /// `self ^ exponent` elementwise with a scalar exponent: [`Tensor::pow`] with a scalar.
    #[track_caller]
    pub fn pow_scalar(&self, exponent: impl Scalar) -> Result<Tensor> {
        self.binary_operand(BinaryOp::Pow, OperandRef::Scalar(exponent.value()))
    }

    /// `base ^ exponent` elementwise for a scalar base (PyTorch's `torch.pow(Scalar, Tensor)`):
    /// the result has `exponent`'s shape and the dtype PyTorch's promotion gives the pair
    /// (`2 ^ int32 tensor` is int32, `2.0 ^ int32 tensor` float32). As for [`Tensor::pow`],
    /// integers wrap and negative integer exponents give 0 (but 1 for base 1, +-1 for -1).
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let e = Tensor::from_slice(&[0i64, 1, 10, -1], [4], Device::Cpu)?;
    /// assert_eq!(Tensor::scalar_pow(2, &e)?.to_vec::<i64>()?, [1, 2, 1024, 0]);
    /// assert_eq!(Tensor::scalar_pow(2.0, &e)?.to_vec::<f32>()?, [1.0, 2.0, 1024.0, 0.5]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn scalar_pow(base: impl Scalar, exponent: &Tensor) -> Result<Tensor> {
        Tensor::scalar_binary(base.value(), BinaryOp::Pow, exponent)
    }

    /// Writes `op(self, other)` into `out`, which must already have the broadcast shape and
    /// the operands' device (PyTorch's `out=`; `out` is not resized). `out` may be any
    /// tensor, a view of a larger one included; the write is seen by every tensor that shares
    /// its storage. The operands promote as for [`Tensor::binary`]; the result is converted to
    /// `out`'s dtype when PyTorch's `can_cast` allows it ([`can_cast`](crate::can_cast): a
    /// float result does not go into an integer or bool `out`, an
    /// [`Error::InvalidArgument`]). Nothing is allocated when operands and `out` share one
    /// kernel dtype, `out` is contiguous and shares no storage with the operands, and both
    /// operands are contiguous at its shape; otherwise the result is computed first and copied
    /// in. On error `out` is unchanged.
    ///
    /// ```
    /// use genesis::{BinaryOp, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], Device::Cpu)?;
    /// let mut out = Tensor::zeros_like(&a)?;
    /// a.binary_out(BinaryOp::Mul, &a, &mut out)?;
    /// assert_eq!(out.to_vec::<f32>()?, [1.0, 4.0, 9.0]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn binary_out(&self, op: BinaryOp, other: &Tensor, out: &mut Tensor) -> Result<()> {
        crate::autograd::refuse_out(op.name(), &[self, other, out])?;
        let name = op.name();
        if let Some((a, b)) = crate::tensor::host_scalar_moved(self, other)? {
            return a.binary_out(op, &b, out);
        }
        let same = self.dtype() == other.dtype() && other.dtype() == out.dtype();
        if !same || !has_kernels(self.dtype()) || (op.float_only() && !self.dtype().is_float()) {
            // Mixed dtypes, a dtype without kernels (computed wider), or an op of float
            // results (true division, atan2, hypot) of integers: the op promotes as PyTorch's
            // does, and its result is cast into `out` when PyTorch's `can_cast` allows it.
            self.check_device(name, other)?;
            let shape = broadcast_shape(name, self.shape(), other.shape())?;
            check_out_shape_device(name, self, &shape, out)?;
            let r = self.binary(op, other)?;
            crate::promote::check_cast(name, r.dtype(), out.dtype())?;
            return out.copy_(&r);
        }
        self.check_operands(name, other)?;
        let shape = broadcast_shape(name, self.shape(), other.shape())?;
        check_out_shape(name, self, &shape, out)?;
        if !out.is_contiguous() || out.shares_storage(self) || out.shares_storage(other) {
            return out.copy_(&self.binary(op, other)?);
        }
        let out_start = out.first_element();
        let (a, a_start) = self.dense_operand(&shape)?;
        let (b, b_start) = other.dense_operand(&shape)?;
        let n = out.numel();
        out.write_storage(name, &[&a, &b], |dst| {
            Ok(a.binary_into(op, a_start, &b, b_start, dst, out_start, n)?)
        })
    }

    /// Writes `op(self)` into `out` (same shape and device; any tensor, as for
    /// [`Tensor::binary_out`]): the result of [`Tensor::unary`], converted to `out`'s dtype
    /// when PyTorch's `can_cast` allows it (`exp` of an integer tensor is float32, which does
    /// not go into an integer `out`).
    #[track_caller]
    pub fn unary_out(&self, op: UnaryOp, out: &mut Tensor) -> Result<()> {
        crate::autograd::refuse_out(op.name(), &[self, out])?;
        let name = op.name();
        if self.dtype() != out.dtype()
            || !has_kernels(self.dtype())
            || (op.float_only() && !self.dtype().is_float())
        {
            // The op's own result dtype, cast into `out` when PyTorch's `can_cast` allows it.
            check_out_shape_device(name, self, self.shape(), out)?;
            let r = self.unary(op)?;
            crate::promote::check_cast(name, r.dtype(), out.dtype())?;
            return out.copy_(&r);
        }
        check_out_shape(name, self, self.shape(), out)?;
        if !out.is_contiguous() || out.shares_storage(self) {
            return out.copy_(&self.unary(op)?);
        }
        let out_start = out.first_element();
        let (a, a_start) = self.dense_operand(self.shape())?;
        let n = out.numel();
        out.write_storage(name, &[&a], |dst| {
            Ok(a.unary_into(op, a_start, dst, out_start, n)?)
        })
    }

    /// `out = self + other` (see [`Tensor::binary_out`]).
    #[track_caller]
    pub fn add_out(&self, other: &Tensor, out: &mut Tensor) -> Result<()> {
        self.binary_out(BinaryOp::Add, other, out)
    }

    /// `out = self - other` (see [`Tensor::binary_out`]).
    #[track_caller]
    pub fn sub_out(&self, other: &Tensor, out: &mut Tensor) -> Result<()> {
        self.binary_out(BinaryOp::Sub, other, out)
    }

    /// `out = self * other` (see [`Tensor::binary_out`]).
    #[track_caller]
    pub fn mul_out(&self, other: &Tensor, out: &mut Tensor) -> Result<()> {
        self.binary_out(BinaryOp::Mul, other, out)
    }

    /// `out = self / other` (float dtypes; see [`Tensor::binary_out`]).
    #[track_caller]
    pub fn div_out(&self, other: &Tensor, out: &mut Tensor) -> Result<()> {
        self.binary_out(BinaryOp::Div, other, out)
    }

    /// `out = e^self` (float dtypes; see [`Tensor::unary_out`]).
    #[track_caller]
    pub fn exp_out(&self, out: &mut Tensor) -> Result<()> {
        self.unary_out(UnaryOp::Exp, out)
    }
}

/// Checks an `_out` destination against the result it is to hold (as [`check_out_shape`]);
/// returns its first element, for destinations that must be contiguous.
pub(crate) fn check_out(
    op: &'static str,
    like: &Tensor,
    shape: &[usize],
    out: &Tensor,
) -> Result<usize> {
    check_out_shape(op, like, shape, out)?;
    out.in_place_start(op)
}

/// Checks an `_out` destination against the result it is to hold: its shape, dtype and
/// device (it may be any view).
/// `out` of the result's `shape`, on `like`'s device (any dtype).
fn check_out_shape_device(
    op: &'static str,
    like: &Tensor,
    shape: &[usize],
    out: &Tensor,
) -> Result<()> {
    if out.shape() != shape {
        return Err(Error::InvalidArgument {
            op,
            reason: format!(
                "the result has shape {shape:?} but `out` has shape {:?} (`out` is not resized)",
                out.shape()
            ),
        });
    }
    like.check_device(op, out)
}

/// `out` of the result's `shape`, with `like`'s dtype and device.
pub(crate) fn check_out_shape(
    op: &'static str,
    like: &Tensor,
    shape: &[usize],
    out: &Tensor,
) -> Result<()> {
    check_out_shape_device(op, like, shape, out)?;
    like.check_operands(op, out)
}

/// A value of [`Tensor::where_cond`]: a tensor in the result dtype or a scalar as one host
/// element of it.
enum WhereValue {
    Tensor(Tensor),
    Scalar(Storage),
}

impl WhereValue {
    fn shape(&self) -> &[usize] {
        match self {
            WhereValue::Tensor(t) => t.shape(),
            WhereValue::Scalar(_) => &[],
        }
    }

    /// A tensor's layout expanded to `shape` (`None` for a scalar).
    fn layout(&self, shape: &[usize]) -> Result<Option<Layout>> {
        Ok(match self {
            WhereValue::Tensor(t) => Some(t.layout().expand(shape)?),
            WhereValue::Scalar(_) => None,
        })
    }

    fn rhs<'a>(&'a self, layout: Option<&'a Layout>) -> BinaryRhs<'a> {
        match (self, layout) {
            (WhereValue::Tensor(t), Some(l)) => BinaryRhs::Tensor(t.view.storage(), l),
            (WhereValue::Tensor(t), None) => BinaryRhs::Tensor(t.view.storage(), t.layout()),
            (WhereValue::Scalar(s), _) => BinaryRhs::Scalar(s),
        }
    }
}
