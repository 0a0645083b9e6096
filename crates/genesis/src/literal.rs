//! `tensor!` for nested literals, and reading a tensor back as a number or nested vectors
//! (`item`, `to_vec2`, `to_vec3`).

use genesis_storage::{DType, Device, Storage};
use half::{bf16, f16};

use crate::{Error, Result, Tensor};

mod sealed {
    pub trait Sealed {}
}

/// One element of a [`tensor!`](crate::tensor) literal, or of [`Tensor::item`] and
/// [`Tensor::to_vec2`]: `f64`, `f32`, `f16`, `bf16`, `i64`, `i32`, `i16`, `i8`, `u8` and
/// `bool`.
pub trait Element: Copy + sealed::Sealed {
    /// The dtype a literal of this type gets when `tensor!` is given none (PyTorch's defaults:
    /// float32 for floats, int64 for integers, bool for bools; f16 and bf16 keep theirs).
    const LITERAL_DTYPE: DType;
    /// The value, for the conversion to the tensor's dtype.
    #[doc(hidden)]
    fn literal(self) -> Literal;
    /// The tensor's elements as this type (its dtype must be this type's; `op` names the
    /// caller in the error otherwise).
    #[doc(hidden)]
    fn read(t: &Tensor, op: &'static str) -> Result<Vec<Self>>;
}

/// A literal element's value.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Literal {
    Float(f64),
    Int(i64),
    Bool(bool),
}

macro_rules! elements {
    ($($t:ty => $dt:ident, $lit:expr);* $(;)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const LITERAL_DTYPE: DType = DType::$dt;
            fn literal(self) -> Literal {
                #[allow(clippy::redundant_closure_call)]
                ($lit)(self)
            }
            fn read(t: &Tensor, op: &'static str) -> Result<Vec<Self>> {
                t.read_as::<$t>(op)
            }
        }
    )*};
}

elements! {
    f64 => F32, |x: f64| Literal::Float(x);
    f32 => F32, |x: f32| Literal::Float(f64::from(x));
    f16 => F16, |x: f16| Literal::Float(x.to_f64());
    bf16 => BF16, |x: bf16| Literal::Float(x.to_f64());
    i64 => I64, Literal::Int;
    i32 => I64, |x: i32| Literal::Int(i64::from(x));
    i16 => I64, |x: i16| Literal::Int(i64::from(x));
    i8 => I64, |x: i8| Literal::Int(i64::from(x));
    u8 => I64, |x: u8| Literal::Int(i64::from(x));
}

impl sealed::Sealed for bool {}
impl Element for bool {
    const LITERAL_DTYPE: DType = DType::Bool;
    fn literal(self) -> Literal {
        Literal::Bool(self)
    }
    fn read(t: &Tensor, op: &'static str) -> Result<Vec<Self>> {
        t.read_bools_as(op)
    }
}

/// Nested data for [`tensor!`](crate::tensor): an [`Element`], or an array, a slice or a
/// vector of nested data (rows of one length).
pub trait TensorData {
    /// The dtype of its elements when `tensor!` is given none.
    #[doc(hidden)]
    fn literal_dtype(&self) -> DType;
    /// Appends the shape (outermost first) and the elements (row-major); an error for rows of
    /// different lengths.
    #[doc(hidden)]
    fn flatten(&self, depth: usize, shape: &mut Vec<usize>, out: &mut Vec<Literal>) -> Result<()>;
}

impl<E: Element> TensorData for E {
    fn literal_dtype(&self) -> DType {
        E::LITERAL_DTYPE
    }
    fn flatten(&self, _: usize, _: &mut Vec<usize>, out: &mut Vec<Literal>) -> Result<()> {
        out.push(self.literal());
        Ok(())
    }
}

impl<T: TensorData> TensorData for [T] {
    fn literal_dtype(&self) -> DType {
        // An empty list of floats is float32 in PyTorch (`torch.tensor([])`).
        self.first().map_or(DType::F32, T::literal_dtype)
    }
    fn flatten(&self, depth: usize, shape: &mut Vec<usize>, out: &mut Vec<Literal>) -> Result<()> {
        if shape.len() == depth {
            shape.push(self.len());
        } else if shape[depth] != self.len() {
            return Err(Error::InvalidArgument {
                op: "tensor!",
                reason: format!(
                    "rows of different lengths at depth {depth}: {} and {}",
                    shape[depth],
                    self.len()
                ),
            });
        }
        for item in self {
            item.flatten(depth + 1, shape, out)?;
        }
        Ok(())
    }
}

impl<T: TensorData, const N: usize> TensorData for [T; N] {
    fn literal_dtype(&self) -> DType {
        self[..].literal_dtype()
    }
    fn flatten(&self, depth: usize, shape: &mut Vec<usize>, out: &mut Vec<Literal>) -> Result<()> {
        self[..].flatten(depth, shape, out)
    }
}

impl<T: TensorData> TensorData for Vec<T> {
    fn literal_dtype(&self) -> DType {
        self[..].literal_dtype()
    }
    fn flatten(&self, depth: usize, shape: &mut Vec<usize>, out: &mut Vec<Literal>) -> Result<()> {
        self[..].flatten(depth, shape, out)
    }
}

impl<T: TensorData> TensorData for &[T] {
    fn literal_dtype(&self) -> DType {
        (**self).literal_dtype()
    }
    fn flatten(&self, depth: usize, shape: &mut Vec<usize>, out: &mut Vec<Literal>) -> Result<()> {
        (**self).flatten(depth, shape, out)
    }
}

/// The options of [`tensor!`](crate::tensor): `dtype = ...`, `device = ...`.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default)]
pub struct LiteralOptions {
    dtype: Option<DType>,
    device: Option<Device>,
}

impl LiteralOptions {
    /// The dtype of the tensor.
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.dtype = Some(dtype);
        self
    }

    /// The device of the tensor.
    pub fn device(mut self, device: Device) -> Self {
        self.device = Some(device);
        self
    }
}

/// What `tensor!` expands to.
#[doc(hidden)]
pub fn from_literal(data: &(impl TensorData + ?Sized), options: LiteralOptions) -> Result<Tensor> {
    let op = "tensor!";
    let mut shape = Vec::new();
    let mut values = Vec::new();
    data.flatten(0, &mut shape, &mut values)?;
    let numel = shape.iter().product::<usize>();
    if numel != values.len() {
        // A number where a list was expected (or the reverse) at some depth.
        return Err(Error::InvalidArgument {
            op,
            reason: format!(
                "ragged nesting: shape {shape:?} holds {numel} elements, the literal has {}",
                values.len()
            ),
        });
    }
    let dtype = options.dtype.unwrap_or_else(|| data.literal_dtype());
    let device = options.device.unwrap_or(Device::Cpu);
    let host = if dtype.is_float() {
        let v: Vec<f64> = values
            .iter()
            .map(|l| match *l {
                Literal::Float(f) => f,
                Literal::Int(i) => i as f64,
                Literal::Bool(b) => f64::from(u8::from(b)),
            })
            .collect();
        for &x in &v {
            // Finite values that overflow the dtype are an error, as for every scalar.
            if x.is_finite() {
                crate::tensor::host_scalar(op, dtype, x)?;
            }
        }
        let s = Storage::from_slice(&v, Device::Cpu)?;
        if dtype == DType::F64 {
            s
        } else {
            s.to_dtype(dtype)?
        }
    } else if dtype == DType::Bool {
        let bytes: Vec<u8> = values
            .iter()
            .map(|l| match *l {
                Literal::Float(f) => u8::from(f != 0.0),
                Literal::Int(i) => u8::from(i != 0),
                Literal::Bool(b) => u8::from(b),
            })
            .collect();
        Storage::from_bytes(&bytes, DType::Bool, Device::Cpu)?
    } else {
        let mut v = Vec::with_capacity(values.len());
        for l in &values {
            let i = match *l {
                // PyTorch truncates floats given an integer dtype.
                Literal::Float(f) => {
                    let t = f.trunc();
                    if !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&t) {
                        return Err(Error::ScalarOutOfRange {
                            op,
                            value: f,
                            dtype,
                        });
                    }
                    t as i64
                }
                Literal::Int(i) => i,
                Literal::Bool(b) => i64::from(b),
            };
            // In range of the dtype, exactly.
            crate::args::check_int_range(op, dtype, i.into())?;
            v.push(i);
        }
        let s = Storage::from_slice(&v, Device::Cpu)?;
        if dtype == DType::I64 {
            s
        } else {
            s.to_dtype(dtype)?
        }
    };
    let on_device = if device == Device::Cpu {
        host
    } else {
        host.to_device(device)?
    };
    Tensor::from_storage(on_device, &shape)
}

/// A tensor from a nested literal, PyTorch's `torch.tensor(...)`: `tensor!([[1., 2.], [3.,
/// 4.]])`. Returns `Result<Tensor>`.
///
/// The data is a number, or an array (or slice, or vector) of numbers or of such arrays, rows
/// of one length; any Rust expression of such a type works (`tensor!(v)` for a `Vec<f32>`).
/// Without a dtype, floats give float32 and integers int64 (PyTorch's defaults; `f16`/`bf16`
/// elements keep their dtype) and bools bool. Options follow the data: `dtype = DType::F64`,
/// `device = Device::Cuda(0)`, in any order. Values are converted as PyTorch converts Python
/// numbers: floats through `f64` and rounded once, integers exactly (an error when out of the
/// dtype's range), floats into an integer dtype truncated.
///
/// ```
/// use genesis::{DType, Device, tensor};
/// # fn main() -> genesis::Result<()> {
/// let a = tensor!([[1., 2.], [3., 4.]])?;
/// assert_eq!((a.shape(), a.dtype()), (&[2, 2][..], DType::F32));
/// assert_eq!(a.to_vec2::<f32>()?, [[1.0, 2.0], [3.0, 4.0]]);
/// let i = tensor!([1, 2, 3])?;
/// assert_eq!(i.dtype(), DType::I64);
/// let h = tensor!([0.1, 0.2], dtype = DType::F64, device = Device::Cpu)?;
/// assert_eq!(h.to_vec::<f64>()?, [0.1, 0.2]);
/// let s = tensor!(21.)?;
/// assert_eq!((s.dim(), s.item::<f32>()?), (0, 21.0));
/// assert_eq!(tensor!([[true], [false]])?.to_vec2::<bool>()?, [[true], [false]]);
/// # Ok(())
/// # }
/// ```
#[macro_export]
macro_rules! tensor {
    ($data:expr $(, $key:ident = $value:expr)* $(,)?) => {
        $crate::literal::from_literal(
            &$data,
            $crate::literal::LiteralOptions::default()$(.$key($value))*,
        )
    };
}

impl Tensor {
    /// The value of a one-element tensor (of any shape), PyTorch's `item()`: `T` must be the
    /// dtype's type (`bool` for `Bool`). Copies that one element to the host.
    ///
    /// ```
    /// use genesis::tensor;
    /// # fn main() -> genesis::Result<()> {
    /// assert_eq!(tensor!([[1., 2.], [3., 4.]])?.sum()?.item::<f32>()?, 10.0);
    /// assert!(tensor!([1., 2.])?.item::<f32>().is_err()); // two elements
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn item<T: Element>(&self) -> Result<T> {
        if self.numel() != 1 {
            return Err(Error::InvalidArgument {
                op: "item",
                reason: format!(
                    "a tensor with {} elements (shape {:?}) cannot be converted to a number",
                    self.numel(),
                    self.shape()
                ),
            });
        }
        Ok(T::read(self, "item")?[0])
    }

    /// The elements of a 2-d tensor as rows, copied to the host (`T` the dtype's type).
    #[track_caller]
    pub fn to_vec2<T: Element>(&self) -> Result<Vec<Vec<T>>> {
        let [r, c] = self.rank_shape::<2>("to_vec2")?;
        let flat = T::read(self, "to_vec2")?;
        // One vector a row, counted like elements: an empty tensor may have 2^63 rows.
        let mut rows = crate::arrange::pieces(r)?;
        rows.extend((0..r).map(|i| flat[i * c..(i + 1) * c].to_vec()));
        Ok(rows)
    }

    /// The elements of a 3-d tensor as nested rows, copied to the host.
    #[track_caller]
    pub fn to_vec3<T: Element>(&self) -> Result<Vec<Vec<Vec<T>>>> {
        let [a, b, c] = self.rank_shape::<3>("to_vec3")?;
        let flat = T::read(self, "to_vec3")?;
        // One vector a row, counted like elements: an empty tensor may have 2^63 of them.
        let inner = a.saturating_mul(b);
        let bytes = inner.saturating_mul(std::mem::size_of::<Vec<T>>());
        genesis_storage::check_host_bytes(bytes)?;
        let mut out = crate::arrange::pieces(a)?;
        for i in 0..a {
            let mut rows = crate::arrange::pieces(b)?;
            rows.extend((0..b).map(|j| flat[(i * b + j) * c..(i * b + j + 1) * c].to_vec()));
            out.push(rows);
        }
        Ok(out)
    }

    fn rank_shape<const R: usize>(&self, op: &'static str) -> Result<[usize; R]> {
        <[usize; R]>::try_from(self.shape()).map_err(|_| Error::InvalidArgument {
            op,
            reason: format!(
                "needs a tensor of {R} dimensions, not of shape {:?}",
                self.shape()
            ),
        })
    }
}
