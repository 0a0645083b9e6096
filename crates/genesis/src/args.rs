//! The argument types of the facade: shapes and lists of dimensions ([`Dims`]) and scalars of
//! every numeric type ([`Scalar`]), with the conversions of a number to a dtype. No tensor
//! here: the right-hand operands that are a tensor or a scalar (`Operand`) are in `operand.rs`.

use genesis_storage::{DType, Storage};

use crate::{Error, Result};

/// A shape or a list of dimensions, as every function of the facade takes them: a reference
/// to an array (`&[2, 3]`), a slice or a vector of `usize`, `isize`, `i32`, `i64`, `u32` or
/// `u64`; a single integer (one dimension); or `()` (no dimensions: a 0-d shape). Arrays and
/// vectors are taken by reference only, so that `&[2, 3]` and `&v` are the one spelling
/// (clippy's `needless_borrows_for_generic_args` would flag the borrow otherwise).
///
/// Negative entries mean what they mean in PyTorch: a dimension counted from the end
/// (`permute(&[-1, 0])`, `sum_dim(-1, false)`), the one inferred size of `view`/`reshape`
/// (`reshape(&[-1, 3])`), or "keep this size" in `expand`. A shape that makes a tensor
/// (`zeros`, `full`, ...) must be non-negative.
///
/// An empty literal `&[]` has no element type: write `()` (or `&[0usize; 0]`) for a 0-d
/// shape.
///
/// ```
/// use genesis::{DType, Device, Tensor};
/// # fn main() -> genesis::Result<()> {
/// let a = Tensor::zeros([2, 3], DType::F32, Device::Cpu)?;    // an array (or `&[2, 3]`)
/// let b = Tensor::zeros(&vec![2usize, 3], DType::F32, Device::Cpu)?; // a vector
/// let c = Tensor::zeros(a.shape(), DType::F32, Device::Cpu)?; // a slice
/// let s = Tensor::zeros((), DType::F32, Device::Cpu)?;        // 0-d
/// assert_eq!(a.reshape(&[-1])?.shape(), &[6]);
/// assert_eq!(a.reshape(b.shape())?.shape(), c.shape());
/// assert_eq!(a.permute(&[-1, 0])?.shape(), &[3, 2]);
/// assert_eq!(a.sum_dim(-1, false)?.shape(), &[2]);
/// assert_eq!(s.shape(), &[] as &[usize]);
/// # Ok(())
/// # }
/// ```
pub trait Dims {
    /// The entries as `i64` (values beyond `i64::MAX` saturate: no tensor is that large).
    fn to_dims(&self) -> Vec<i64>;
}

macro_rules! dims_impls {
    ($($t:ty),*) => {$(
        impl Dims for [$t] {
            fn to_dims(&self) -> Vec<i64> {
                self.iter().map(|&d| i64::try_from(d).unwrap_or(i64::MAX)).collect()
            }
        }
        impl<const N: usize> Dims for [$t; N] {
            fn to_dims(&self) -> Vec<i64> {
                self[..].to_dims()
            }
        }
        impl Dims for Vec<$t> {
            fn to_dims(&self) -> Vec<i64> {
                self[..].to_dims()
            }
        }
        impl Dims for $t {
            fn to_dims(&self) -> Vec<i64> {
                [*self][..].to_dims()
            }
        }
    )*};
}

dims_impls!(usize, isize, i32, i64, u32, u64);

impl Dims for () {
    fn to_dims(&self) -> Vec<i64> {
        Vec::new()
    }
}

impl<D: Dims + ?Sized> Dims for &D {
    fn to_dims(&self) -> Vec<i64> {
        (**self).to_dims()
    }
}

/// One dimension (or a position along one), as the facade takes it: any integer type
/// (`isize`, `i32`, `i64`, `usize`, `u32`, `u64`), negative counting from the end where PyTorch
/// allows it (`transpose(0, -1)`, `max_dim(-1, false)`, `narrow(-1, -2, 2)`).
pub trait Dim: Copy {
    /// The value as `isize` (saturating: such a dimension is out of range anyway).
    fn to_dim(self) -> isize;
}

macro_rules! dim_impls {
    ($($t:ty),*) => {$(
        impl Dim for $t {
            fn to_dim(self) -> isize {
                isize::try_from(self).unwrap_or(if self as i128 > 0 { isize::MAX } else { isize::MIN })
            }
        }
    )*};
}

dim_impls!(isize, i32, i64, usize, u32, u64);

/// The sizes of a shape that makes a tensor: every entry non-negative.
pub(crate) fn sizes(op: &'static str, dims: &(impl Dims + ?Sized)) -> Result<Vec<usize>> {
    dims.to_dims()
        .into_iter()
        .map(|d| {
            usize::try_from(d).map_err(|_| Error::InvalidArgument {
                op,
                reason: format!("negative size {d} in shape {:?}", dims.to_dims()),
            })
        })
        .collect()
}

/// A shape for `view`/`reshape` (one entry may be -1) as `isize`s.
pub(crate) fn shape_spec(dims: &(impl Dims + ?Sized)) -> Vec<isize> {
    dims.to_dims()
        .into_iter()
        .map(|d| isize::try_from(d).unwrap_or(isize::MAX))
        .collect()
}

/// Dimension `dim` of a tensor of rank `rank`, negative counting from the end, with PyTorch's
/// rule for 0-d tensors: they take dimension 0 or -1 as if they had one dimension (`None` is
/// returned for them).
pub(crate) fn wrap_dim(op: &'static str, dim: i64, rank: usize) -> Result<Option<usize>> {
    let r = rank.max(1) as i64;
    if dim < -r || dim >= r {
        return Err(Error::DimOutOfRange { op, dim, rank });
    }
    Ok((rank > 0).then(|| dim.rem_euclid(r) as usize))
}

/// A scalar operand as the facade reads it: a float, or an integer kept exact (an `i64` of
/// 2^62 + 1 added to an int64 tensor is not rounded through `f64`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScalarValue {
    /// A floating-point scalar.
    Float(f64),
    /// An integer scalar.
    Int(i128),
    /// A boolean scalar (promotes as PyTorch's Python `bool`: it never changes a tensor's
    /// dtype; as a number it is 0 or 1).
    Bool(bool),
}

impl ScalarValue {
    /// The value as `f64` (rounded for integers beyond 2^53).
    pub fn to_f64(self) -> f64 {
        match self {
            ScalarValue::Float(f) => f,
            ScalarValue::Int(i) => i as f64,
            ScalarValue::Bool(b) => f64::from(u8::from(b)),
        }
    }

    /// The value as a number: a `Bool` becomes the integer 0 or 1, the rest is unchanged.
    pub fn as_number(self) -> ScalarValue {
        match self {
            ScalarValue::Bool(b) => ScalarValue::Int(i128::from(b)),
            v => v,
        }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust number usable as a scalar operand: `f64`, `f32`, `f16`, `bf16`, `i8`, `i16`, `i32`,
/// `i64`, `isize`, `u8`, `u16`, `u32`, `u64`, `usize`, and `bool`. Any of them goes on the right of
/// `+ - * /` and `+= -= *= /=` and into the named ops (`&a * 2.0f32`, `a.add(1)?`,
/// `y.add_(0.5)?`, `a.gt(0)?`); on the left, `f64` and `i64`, which unsuffixed literals become
/// (`2.0 * &a`, `1 - &a`).
///
/// The op's dtype follows PyTorch's type promotion ([`result_type`](crate::result_type)):
/// a Rust integer promotes as a Python `int`, a float as a Python `float`, a `bool` as a
/// Python `bool`, so a scalar changes a tensor's dtype only when its category is higher
/// (`int32 tensor + 2` is int32, `int32 tensor + 0.5` is float32). The scalar then becomes a
/// value of that dtype by PyTorch's rules: in arithmetic and comparisons as a "wrapped
/// number" (integers wrap, `uint8 + 300` adds 44; floats round and overflow to infinity; a
/// float16/bfloat16 result computes in float32 when the dtype does not hold the number), and
/// as a fill value, bound or `where` branch by PyTorch's checked conversion (a value the dtype
/// cannot hold is [`Error::ScalarOutOfRange`]). Integers stay exact (an `i64` is not rounded
/// through `f64`); an integer beyond `i64` (a `u64` above `i64::MAX`) is refused.
pub trait Scalar: Copy + sealed::Sealed {
    /// The value.
    fn value(self) -> ScalarValue;
}

macro_rules! scalar_impls {
    (float: $($f:ty),*; int: $($i:ty),*) => {
        $(
            impl sealed::Sealed for $f {}
            impl Scalar for $f {
                fn value(self) -> ScalarValue {
                    ScalarValue::Float(f64::from(self))
                }
            }
        )*
        $(
            impl sealed::Sealed for $i {}
            impl Scalar for $i {
                fn value(self) -> ScalarValue {
                    ScalarValue::Int(self as i128)
                }
            }
        )*
    };
}

scalar_impls!(float: f64, f32, half::f16, half::bf16; int: i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);

impl sealed::Sealed for bool {}
impl Scalar for bool {
    fn value(self) -> ScalarValue {
        ScalarValue::Bool(self)
    }
}

fn is_integer(dtype: DType) -> bool {
    !dtype.is_float() && dtype != DType::Bool
}

/// [`Error::ScalarOutOfRange`] unless integer `dtype` holds `i` exactly.
pub(crate) fn check_int_range(op: &'static str, dtype: DType, i: i128) -> Result<()> {
    let (lo, hi) = int_range(dtype);
    if (lo..=hi).contains(&i) {
        return Ok(());
    }
    Err(Error::ScalarOutOfRange {
        op,
        value: i as f64,
        dtype,
    })
}

/// The range of an integer dtype.
fn int_range(dtype: DType) -> (i128, i128) {
    match dtype {
        DType::U8 => (0, u8::MAX.into()),
        DType::I8 => (i8::MIN.into(), i8::MAX.into()),
        DType::I16 => (i16::MIN.into(), i16::MAX.into()),
        DType::I32 => (i32::MIN.into(), i32::MAX.into()),
        _ => (i64::MIN.into(), i64::MAX.into()),
    }
}

/// `v` reduced modulo the width of integer `dtype` (two's complement, as C's conversions).
fn wrap_int(v: i64, dtype: DType) -> i64 {
    match dtype {
        DType::U8 => i64::from(v as u8),
        DType::I8 => i64::from(v as i8),
        DType::I16 => i64::from(v as i16),
        DType::I32 => i64::from(v as i32),
        _ => v,
    }
}

/// One element `v` (in range) of integer `dtype` as a host storage.
fn int_element(dtype: DType, v: i64) -> Result<Storage> {
    let cpu = genesis_storage::Device::Cpu;
    Ok(match dtype {
        DType::U8 => Storage::from_slice(&[v as u8], cpu)?,
        DType::I8 => Storage::from_slice(&[v as i8], cpu)?,
        DType::I16 => Storage::from_slice(&[v as i16], cpu)?,
        DType::I32 => Storage::from_slice(&[v as i32], cpu)?,
        _ => Storage::from_slice(&[v], cpu)?,
    })
}

/// One element of float `dtype` holding `f` rounded to it (overflow gives an infinity). A
/// narrow float is rounded through `f32`, as C++'s `Half(float(x))` in PyTorch.
fn float_element(dtype: DType, f: f64) -> Result<Storage> {
    let cpu = genesis_storage::Device::Cpu;
    Ok(match dtype {
        DType::F64 => Storage::from_slice(&[f], cpu)?,
        DType::F32 => Storage::from_slice(&[f as f32], cpu)?,
        DType::F16 => Storage::from_slice(&[half::f16::from_f32(f as f32)], cpu)?,
        _ => Storage::from_slice(&[half::bf16::from_f32(f as f32)], cpu)?,
    })
}

/// One element of float `dtype` holding the integer `i` (rounded once to `f32` for the
/// 32-bit and narrower floats, as C++'s `float(int64_t)`).
fn float_element_of_int(dtype: DType, i: i64) -> Result<Storage> {
    match dtype {
        DType::F64 => float_element(dtype, i as f64),
        d => float_element(d, f64::from(i as f32)),
    }
}

fn bool_element(b: bool) -> Result<Storage> {
    Ok(Storage::from_bytes(
        &[u8::from(b)],
        DType::Bool,
        genesis_storage::Device::Cpu,
    )?)
}

/// The largest finite value of float `dtype`.
fn float_max(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => half::f16::MAX.to_f64(),
        DType::BF16 => half::bf16::MAX.to_f64(),
        DType::F32 => f64::from(f32::MAX),
        _ => f64::MAX,
    }
}

/// A number as an operand of an elementwise op, PyTorch's "wrapped number": converted to the
/// op's dtype as C++ converts (an integer wraps into a narrower integer dtype, `300` in
/// `uint8` is `44`; a float rounds, overflowing to an infinity; anything is `true` in `bool`
/// when non-zero). Only an integer beyond `int64` (a Rust `u64` above `i64::MAX`, which no
/// Python int reaching PyTorch can be) is [`Error::ScalarOutOfRange`].
pub(crate) fn wrapped_scalar(
    op: &'static str,
    dtype: DType,
    value: ScalarValue,
) -> Result<Storage> {
    let beyond = || Error::ScalarOutOfRange {
        op,
        value: value.to_f64(),
        dtype,
    };
    match value {
        _ if dtype == DType::Bool => bool_element(value.to_f64() != 0.0),
        ScalarValue::Bool(b) if is_integer(dtype) => int_element(dtype, i64::from(b)),
        ScalarValue::Bool(b) => float_element(dtype, f64::from(u8::from(b))),
        ScalarValue::Int(i) => {
            let v = i64::try_from(i).map_err(|_| beyond())?;
            if is_integer(dtype) {
                int_element(dtype, wrap_int(v, dtype))
            } else {
                float_element_of_int(dtype, v)
            }
        }
        // A float reaches an integer dtype only through an explicit conversion: as checked.
        ScalarValue::Float(_) if is_integer(dtype) => checked_scalar(op, dtype, value),
        ScalarValue::Float(f) => float_element(dtype, f),
    }
}

/// A number as the value of a fill, a bound or a `where` branch (`fill_`, `full_like`,
/// `masked_fill`, `index_fill`, `clamp`, `where`): converted to `dtype` as PyTorch's
/// `Scalar::to` (`checked_convert`) does. A finite value beyond a float dtype's range, NaN or
/// an infinity into an integer dtype, and an integer outside the integer dtype's range are
/// [`Error::ScalarOutOfRange`]; a float into an integer dtype must lie in its range and drops
/// its fraction; `uint8` also takes the integers -255..=-1, wrapping (PyTorch's allowance for
/// unsigned types); `bool` takes anything, non-zero (NaN included) being `true`.
pub(crate) fn checked_scalar(
    op: &'static str,
    dtype: DType,
    value: ScalarValue,
) -> Result<Storage> {
    let refuse = || Error::ScalarOutOfRange {
        op,
        value: value.to_f64(),
        dtype,
    };
    let int_in_range = |i: i128| -> Result<Storage> {
        let (lo, hi) = int_range(dtype);
        let lo = if dtype == DType::U8 { -hi } else { lo };
        if !(lo..=hi).contains(&i) {
            return Err(refuse());
        }
        int_element(dtype, wrap_int(i as i64, dtype))
    };
    match value {
        _ if dtype == DType::Bool => {
            let f = value.to_f64();
            bool_element(f != 0.0 || f.is_nan())
        }
        ScalarValue::Bool(b) if is_integer(dtype) => int_element(dtype, i64::from(b)),
        ScalarValue::Bool(b) => float_element(dtype, f64::from(u8::from(b))),
        ScalarValue::Int(i) if is_integer(dtype) => int_in_range(i),
        ScalarValue::Int(i) => {
            let v = i64::try_from(i).map_err(|_| refuse())?;
            if (v as f64).abs() > float_max(dtype) {
                return Err(refuse());
            }
            float_element_of_int(dtype, v)
        }
        ScalarValue::Float(f) if is_integer(dtype) => {
            if !f.is_finite() {
                return Err(refuse());
            }
            // The value itself must lie in the dtype's range (no unsigned allowance for floats:
            // -0.5 is refused by uint8); the fraction is then dropped.
            let (lo, hi) = int_range(dtype);
            if f < lo as f64 || f >= hi as f64 + 1.0 {
                return Err(refuse());
            }
            int_element(dtype, f.trunc() as i64)
        }
        ScalarValue::Float(f) => {
            if f.is_finite() && f.abs() > float_max(dtype) {
                return Err(refuse());
            }
            float_element(dtype, f)
        }
    }
}

/// Whether float `dtype` holds `value` exactly (NaN and the infinities count as held).
pub(crate) fn holds_exactly(dtype: DType, value: ScalarValue) -> bool {
    let f = match value {
        ScalarValue::Bool(_) => return true,
        ScalarValue::Float(f) => f,
        ScalarValue::Int(i) => {
            let f = i as f64;
            if f as i128 != i {
                return false;
            }
            f
        }
    };
    if !f.is_finite() {
        return true;
    }
    let back = match dtype {
        DType::F16 => half::f16::from_f64(f).to_f64(),
        DType::BF16 => half::bf16::from_f64(f).to_f64(),
        DType::F32 => f64::from(f as f32),
        _ => f,
    };
    back == f
}
