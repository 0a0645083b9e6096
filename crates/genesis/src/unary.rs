//! The unary elementwise ops: one method per row of the op table
//! ([`genesis_kernels::unary_ops!`]), out of place (`x.erf()`) and in place (`x.erf_()`), all
//! through [`Tensor::unary`] and [`Tensor::unary_`]; and the ops built on them and on the
//! comparisons: `isnan`, `isinf`, `isfinite`, `nan_to_num`, `softplus_with`.
//!
//! ```
//! use genesis::{DType, Device, Tensor};
//! # fn main() -> genesis::Result<()> {
//! let x = Tensor::from_slice(&[-1.5f32, 0.0, 2.5], &[3], Device::Cpu)?;
//! assert_eq!(x.round()?.to_vec::<f32>()?, [-2.0, 0.0, 2.0]); // halves to even
//! assert_eq!(x.sign()?.to_vec::<f32>()?, [-1.0, 0.0, 1.0]);
//! let g = x.gelu()?; // exact GELU; x.gelu_tanh() is GPT-2's approximation
//! assert!((g.to_vec::<f32>()?[2] - 2.48448).abs() < 1e-4);
//! // Integers take the float ops in float32, as in PyTorch.
//! let i = Tensor::from_slice(&[0i64, 1], &[2], Device::Cpu)?;
//! assert_eq!(i.erf()?.dtype(), DType::F32);
//! # Ok(())
//! # }
//! ```

use genesis_kernels::classify::FloatClass;
use genesis_storage::{CompareOp, DType, UnaryOp};

use crate::{Result, Tensor};

/// The dtype rule of a row of the table, for its method's documentation.
macro_rules! kind_doc {
    (any) => {
        "Every dtype the elementwise ops take keeps its dtype (integers wrap; uint8, int8 and \
         int16 compute in int32 and convert back); bools are \
         [`UnsupportedDType`](genesis_storage::Error::UnsupportedDType)."
    };
    (float) => {
        "Floats keep their dtype (f16 and bf16 compute in f32 and round once, f64 in f64); \
         integers and bools give float32, as in PyTorch."
    };
}

/// The accuracy of a row of the table, for its method's documentation.
macro_rules! twin_doc {
    (exact) => {
        "Exact: the CPU and CUDA give the same bits."
    };
    (ulps) => {
        "CUDA's math library on the GPU and Rust's `libm` on the CPU, each within a few ulp of \
         the exact value."
    };
    (ulps8) => {
        "CUDA's math library on the GPU (within 5 ulp) and Rust's `libm` on the CPU."
    };
    (input_ulps) => {
        "CUDA's math library on the GPU and Rust's `libm` on the CPU; the formula cancels where \
         the result is small against `x`, so the two agree within a few ulp of `|x|`."
    };
}

/// One out-of-place and one in-place method per row of the table.
macro_rules! unary_methods {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident $name:ident $inplace:ident: $kind:ident $twin:ident |$x:ident| $float:expr
            $(, |$i:ident| $int:expr)?;
    )*) => {
        impl Tensor {
            $(
                $(#[doc = $doc])*
                ///
                #[doc = kind_doc!($kind)]
                #[doc = twin_doc!($twin)]
                #[doc = concat!(
                    "A new contiguous tensor of the same shape and device ([`UnaryOp::",
                    stringify!($variant),
                    "`] through [`Tensor::unary`])."
                )]
                #[track_caller]
                pub fn $name(&self) -> Result<Tensor> {
                    self.unary(UnaryOp::$variant)
                }

                #[doc = concat!(
                    "In place: `self = self.", stringify!($name), "()` (see [`Tensor::",
                    stringify!($name), "`] and [`Tensor::unary_`]; a float result into an \
                     integer or bool tensor is an error, as in PyTorch)."
                )]
                #[track_caller]
                pub fn $inplace(&self) -> Result<()> {
                    self.unary_(UnaryOp::$variant)
                }
            )*
        }
    };
}

genesis_kernels::unary_ops!(unary_methods);

impl Tensor {
    /// Whether each element is NaN, as a bool tensor of the same shape (integers and bools:
    /// all false). PyTorch's `isnan`.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1.0f32, f32::NAN, f32::INFINITY], &[3], Device::Cpu)?;
    /// assert_eq!(x.isnan()?.to_bool_vec()?, [false, true, false]);
    /// assert_eq!(x.isinf()?.to_bool_vec()?, [false, false, true]);
    /// assert_eq!(x.isfinite()?.to_bool_vec()?, [true, false, false]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn isnan(&self) -> Result<Tensor> {
        self.classify(FloatClass::IsNan)
    }

    /// Whether each element is an infinity of either sign, as a bool tensor (integers and
    /// bools: all false). PyTorch's `isinf`.
    #[track_caller]
    pub fn isinf(&self) -> Result<Tensor> {
        self.classify(FloatClass::IsInf)
    }

    /// Whether each element is finite (neither NaN nor an infinity), as a bool tensor
    /// (integers and bools: all true). PyTorch's `isfinite`.
    #[track_caller]
    pub fn isfinite(&self) -> Result<Tensor> {
        self.classify(FloatClass::IsFinite)
    }

    /// `op` of each element as a bool tensor, in one pass over a float tensor's elements
    /// (read in place when contiguous); integers and bools are never NaN or infinite.
    #[track_caller]
    fn classify(&self, op: FloatClass) -> Result<Tensor> {
        if !self.dtype().is_float() {
            return if op == FloatClass::IsFinite {
                Tensor::ones(self.shape(), DType::Bool, self.device())
            } else {
                Tensor::zeros(self.shape(), DType::Bool, self.device())
            };
        }
        let (a, start) = self.dense_operand(self.shape())?;
        Tensor::from_storage(a.classify_at(op, start, self.numel())?, self.shape())
    }

    /// NaN, +inf and -inf replaced by `nan`, `posinf` and `neginf` in one pass (PyTorch's
    /// `nan_to_num`):
    /// the infinities default to the dtype's largest and lowest finite values. Each value is
    /// rounded to the dtype as PyTorch's `static_cast` does (beyond its range: an infinity).
    /// Integers and bools are returned as a copy. A new contiguous tensor.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[f32::NAN, f32::INFINITY, -f32::INFINITY, 1.5], &[4], Device::Cpu)?;
    /// assert_eq!(x.nan_to_num(0.0, None, None)?.to_vec::<f32>()?, [0.0, f32::MAX, f32::MIN, 1.5]);
    /// assert_eq!(x.nan_to_num(-1.0, Some(9.0), Some(-9.0))?.to_vec::<f32>()?, [-1.0, 9.0, -9.0, 1.5]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn nan_to_num(&self, nan: f64, posinf: Option<f64>, neginf: Option<f64>) -> Result<Tensor> {
        crate::autograd::op(
            "nan_to_num",
            &[self],
            || self.nan_to_num_raw(nan, posinf, neginf),
            |_| {
                // Replaced elements (NaN, ±inf) take no gradient.
                let x = crate::autograd::Saved::new("nan_to_num", self);
                Box::new(move |g, _| {
                    Ok(vec![Some(Tensor::where_cond(
                        &x.get()?.isfinite()?,
                        g,
                        0.0,
                    )?)])
                })
            },
        )
    }

    fn nan_to_num_raw(&self, nan: f64, posinf: Option<f64>, neginf: Option<f64>) -> Result<Tensor> {
        let d = self.dtype();
        if !d.is_float() {
            return self.deep_clone();
        }
        let (lowest, highest) = finite_range(d);
        let values = [nan, posinf.unwrap_or(highest), neginf.unwrap_or(lowest)];
        let (a, start) = self.dense_operand(self.shape())?;
        Tensor::from_storage(a.nan_to_num_at(start, self.numel(), values)?, self.shape())
    }

    /// `ln(1 + e^(beta x)) / beta`, and `x` itself where `beta * x > threshold` (PyTorch's
    /// `softplus` with its `beta` and `threshold`; [`Tensor::softplus`] is `beta = 1`,
    /// `threshold = 20` in one kernel). Float dtypes keep theirs; integers and bools give
    /// float32.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[0.0f64, 10.0], &[2], Device::Cpu)?;
    /// let y = x.softplus_with(2.0, 15.0)?.to_vec::<f64>()?;
    /// assert!((y[0] - std::f64::consts::LN_2 / 2.0).abs() < 1e-15);
    /// assert_eq!(y[1], 10.0);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn softplus_with(&self, beta: f64, threshold: f64) -> Result<Tensor> {
        if !self.dtype().is_float() {
            return self.to_dtype(DType::F32)?.softplus_with(beta, threshold);
        }
        if beta == 1.0 && threshold == 20.0 {
            return self.softplus();
        }
        // Half precision computes in f32, as PyTorch's (exp(beta x) overflows f16 from x ~ 11 /
        // beta), rounded once at the end.
        if matches!(self.dtype(), DType::F16 | DType::BF16) {
            return self
                .to_dtype(DType::F32)?
                .softplus_with(beta, threshold)?
                .to_dtype(self.dtype());
        }
        let bx = self.mul(beta)?;
        let soft = bx.exp()?.log1p()?.div(beta)?;
        Tensor::where_cond(&bx.compare_scalar(CompareOp::Gt, threshold)?, self, &soft)
    }
}

/// The lowest and highest finite values of a float dtype.
fn finite_range(d: DType) -> (f64, f64) {
    let max = match d {
        DType::F16 => f64::from(half::f16::MAX),
        DType::BF16 => f64::from(half::bf16::MAX),
        DType::F32 => f64::from(f32::MAX),
        _ => f64::MAX,
    };
    (-max, max)
}
