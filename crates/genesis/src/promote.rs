//! Type promotion by PyTorch's rules ([`result_type`], [`promote_types`]) and the dispatch
//! that makes every binary op, comparison and `where` follow them.
//!
//! # The rules (PyTorch's `torch.result_type`)
//!
//! Dtypes fall in three ordered categories: bool < integer < floating. The operands of an op
//! are of three priorities: tensors with at least one dimension, 0-d tensors, and scalars (a
//! Rust `bool`, integer or float, PyTorch's Python scalars). Within each priority the dtypes
//! combine by [`promote_types`] (a scalar counts as `bool`, `int64` or the default float
//! dtype, `float32`). A lower priority changes the result only when its category is higher:
//! `int32 tensor + 0-d int64 tensor` is int32, `int32 tensor + 0.5` is float32, `float16
//! tensor + 0-d float64 tensor` is float16, `bool tensor + 1` is int64.
//!
//! True division (`div`) of integers or bools gives the default float dtype (float32), and a
//! sum of integers or bools is int64.
//!
//! # How the ops compute
//!
//! Operands are converted to the result dtype (the cast kernels) and the op runs in it, on
//! every device: `float64` has kernels (and CPU twins) of its own and computes in `f64`, never
//! in float32. The dtypes without kernels compute exactly in a wider one: `uint8`, `int8`,
//! `int16` and `bool` through `int32` (integer add, sub and mul wrap, so the wrapping cast back
//! gives PyTorch's result; bool add is "or", mul "and").

use genesis_storage::{BinaryOp, CompareOp, DType, Device, UnaryOp};

use crate::args::{Operand, OperandRef, ScalarValue, wrapped_scalar};
use crate::tensor::broadcast_shape;
use crate::{Error, Result, Tensor};

/// The category of a dtype: 0 bool, 1 integer, 2 floating.
fn category(d: DType) -> u8 {
    match d {
        DType::Bool => 0,
        d if d.is_float() => 2,
        _ => 1,
    }
}

/// The smallest dtype both `a` and `b` convert to without losing their category or range
/// (PyTorch's `torch.promote_types`): bool gives way to anything; `uint8` with a signed
/// integer is the signed type that holds both (`int16` for `int8`); an integer with a float is
/// the float; `float16` with `bfloat16` is `float32`; otherwise the larger of the two.
///
/// ```
/// use genesis::{DType, promote_types};
/// assert_eq!(promote_types(DType::U8, DType::I8), DType::I16);
/// assert_eq!(promote_types(DType::F16, DType::BF16), DType::F32);
/// assert_eq!(promote_types(DType::I64, DType::F16), DType::F16);
/// assert_eq!(promote_types(DType::Bool, DType::I32), DType::I32);
/// ```
pub fn promote_types(a: DType, b: DType) -> DType {
    use DType::*;
    if a == b {
        return a;
    }
    match (category(a), category(b)) {
        (0, _) => b,
        (_, 0) => a,
        (1, 2) => b,
        (2, 1) => a,
        (1, 1) => match (a, b) {
            (U8, I8) | (I8, U8) => I16,
            (U8, x) | (x, U8) => x,
            _ => {
                if a.size() >= b.size() {
                    a
                } else {
                    b
                }
            }
        },
        _ => match (a, b) {
            (F16, BF16) | (BF16, F16) => F32,
            _ => {
                if a.size() >= b.size() {
                    a
                } else {
                    b
                }
            }
        },
    }
}

/// One operand of an op as promotion sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Participant {
    /// A tensor of this dtype and rank.
    Tensor(DType, usize),
    /// A scalar.
    Scalar(ScalarValue),
}

impl Participant {
    pub(crate) fn of(operand: OperandRef<'_>) -> Participant {
        match operand {
            OperandRef::Tensor(t) => Participant::Tensor(t.dtype(), t.dim()),
            OperandRef::Scalar(v) => Participant::Scalar(v),
        }
    }
}

/// The dtype a scalar promotes as: bool, int64, or the default float dtype (float32).
pub(crate) fn scalar_dtype(v: ScalarValue) -> DType {
    match v {
        ScalarValue::Bool(_) => DType::Bool,
        ScalarValue::Int(_) => DType::I64,
        ScalarValue::Float(_) => DType::F32,
    }
}

/// PyTorch's `combine_categories`: the higher-priority result, unless the lower one is of a
/// higher category.
fn combine(higher: Option<DType>, lower: Option<DType>) -> Option<DType> {
    match (higher, lower) {
        (None, l) => l,
        (h, None) => h,
        (Some(h), Some(l)) => {
            if h.is_float() {
                Some(h)
            } else if h == DType::Bool || l.is_float() {
                Some(promote_types(h, l))
            } else {
                Some(h)
            }
        }
    }
}

/// The result dtype of an op over `operands` (at least one), by PyTorch's rules.
pub(crate) fn result_type_of(operands: &[Participant]) -> DType {
    let (mut dim, mut zero, mut scalar) = (None, None, None);
    let add = |slot: &mut Option<DType>, d: DType| {
        *slot = Some(slot.map_or(d, |s| promote_types(s, d)));
    };
    for p in operands {
        match *p {
            Participant::Tensor(d, rank) if rank > 0 => add(&mut dim, d),
            Participant::Tensor(d, _) => add(&mut zero, d),
            Participant::Scalar(v) => add(&mut scalar, scalar_dtype(v)),
        }
    }
    combine(dim, combine(zero, scalar)).unwrap_or(DType::F32)
}

/// The dtype of `torch.result_type(a, b)`: what a binary op or a comparison of `a` and `b`
/// computes in (comparisons then give `Bool`). `b` is a tensor or a [`Scalar`](crate::Scalar)
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
        Participant::of(b.operand()),
    ])
}

/// The dtype of a true division of operands promoting to `r`: `r` if floating, else float32.
pub(crate) fn div_type(r: DType) -> DType {
    if r.is_float() { r } else { DType::F32 }
}

/// Whether the kernels (and their CPU twins) compute in `d` directly.
pub(crate) fn has_kernels(d: DType) -> bool {
    matches!(
        d,
        DType::F64 | DType::F32 | DType::F16 | DType::BF16 | DType::I32 | DType::I64
    )
}

/// The dtype the kernels compute an op whose result dtype is `r` in: `r`, or `int32` for the
/// narrow integers and bool.
fn compute_dtype(r: DType) -> DType {
    match r {
        DType::U8 | DType::I8 | DType::I16 | DType::Bool => DType::I32,
        d => d,
    }
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
            Participant::of(rhs),
        ]);
        let bool_operand = self.dtype() == DType::Bool
            || match rhs {
                OperandRef::Tensor(t) => t.dtype() == DType::Bool,
                OperandRef::Scalar(v) => matches!(v, ScalarValue::Bool(_)),
            };
        match op {
            BinaryOp::Div => Ok(div_type(r)),
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
            Participant::of(other),
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

/// Whether a value of dtype `from` may be written into a tensor of dtype `to` by an in-place
/// op (PyTorch's `can_cast`): not a float into an integer or bool, not an integer into a bool.
pub fn can_cast(from: DType, to: DType) -> bool {
    category(from) <= category(to)
}

/// A result of dtype `from` may be written into a tensor of dtype `to` ([`can_cast`]), else
/// the [`Error::InvalidArgument`] PyTorch raises.
pub(crate) fn check_cast(op: &'static str, from: DType, to: DType) -> Result<()> {
    if can_cast(from, to) {
        return Ok(());
    }
    Err(Error::InvalidArgument {
        op,
        reason: format!("result type {from} can't be cast to the desired output type {to}"),
    })
}

/// The result dtype of `where(cond, a, b)`: the promotion of `a` and `b` (the condition takes
/// no part).
pub(crate) fn where_type(a: OperandRef<'_>, b: OperandRef<'_>) -> DType {
    result_type_of(&[Participant::of(a), Participant::of(b)])
}
