//! Type promotion by PyTorch's rules (`result_type`, [`promote_types`]): pure dtype rules, no
//! tensor. The dispatch that makes every binary op, comparison and `where` follow them is in
//! `operand.rs`.
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

use genesis_storage::DType;

use crate::args::ScalarValue;
use crate::{Error, Result};

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
pub(crate) fn compute_dtype(r: DType) -> DType {
    match r {
        DType::U8 | DType::I8 | DType::I16 | DType::Bool => DType::I32,
        d => d,
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

impl crate::Tensor {
    /// `self` in float32 when it is float16 or bfloat16, else itself: the precision PyTorch's
    /// kernels compute those two in (their "opmath" type), for ops that round once at the end.
    pub(crate) fn in_opmath(&self) -> crate::Result<crate::Tensor> {
        match self.dtype() {
            DType::F16 | DType::BF16 => self.to_dtype(DType::F32),
            _ => Ok(self.clone()),
        }
    }
}
