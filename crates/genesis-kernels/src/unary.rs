//! The unary elementwise ops, each defined once.
//!
//! [`unary_ops!`](crate::unary_ops) is the table: per op its enum variant and name, whether it
//! takes every element type (`any`) or only the floating ones (`float`: integers and bools
//! compute in float32, PyTorch's rule), how the GPU kernel and the CPU twin agree ([`Twin`]:
//! bit for bit, or within a few ulp of the result or of the input, CUDA's math library against
//! Rust's `libm`), and
//! its CPU definition: a float body written once for f32 and f64 (f16 and bf16 compute in f32
//! and round once) and, for `any` ops, an integer body (wrapping). Everything else follows from
//! the table: [`UnaryOp`], its names and kernel names, the CPU twins, the facade's methods
//! (`Tensor::erf`, `Tensor::erf_`), which the facade generates by calling the same macro.
//!
//! The GPU side is `kernels/elementwise.cu`: a functor per op and one line in its
//! `GX_UNARY_OPS` list, in the order of this table (the batched "tape" kernel dispatches on
//! the position).
//!
//! Adding an op (`erf`): one line here, with its CPU body; one functor and one list line in
//! `elementwise.cu`; `cargo xtask build-kernels`.

use crate::DType;

/// Calls `$callback!` with the table of unary ops (see the [module docs](crate::unary)).
///
/// Each row: doc comments, then `Variant name name_: kind twin |x| float_body [, |i| int_body];`
/// (`name_` names the in-place form)
/// where `kind` is `any` or `float` and `twin` is `exact`, `ulps`, `ulps8` or `input_ulps`
/// ([`Twin`]). The float body computes
/// on `x: R` for `R: Real` (f32 and f64); the integer body on `i: I` for `I: Int` (i32, i64).
#[macro_export]
macro_rules! unary_ops {
    ($callback:ident) => {
        $callback! {
            /// `-x` (integers wrap).
            Neg neg neg_: any exact |x| -x, |i| i.wrapping_neg();
            /// `|x|` (integers wrap: the most negative value stays itself).
            Abs abs abs_: any exact |x| x.abs(), |i| i.wrapping_abs();
            /// `max(x, 0)`; NaN stays NaN.
            Relu relu relu_: any exact |x| if x.is_nan() || x > R::c(0.0) { x } else { R::c(0.0) },
                |i| i.max(I::ZERO);
            /// `e^x`.
            Exp exp exp_: float ulps |x| x.exp();
            /// The natural logarithm.
            Log log log_: float ulps |x| x.ln();
            /// The square root, correctly rounded.
            Sqrt sqrt sqrt_: float exact |x| x.sqrt();
            /// The hyperbolic tangent.
            Tanh tanh tanh_: float ulps |x| x.tanh();
            /// The logistic function `1 / (1 + e^-x)`.
            Sigmoid sigmoid sigmoid_: float ulps |x| R::c(1.0) / (R::c(1.0) + (-x).exp());
            /// The sine of radians.
            Sin sin sin_: float ulps |x| x.sin();
            /// The cosine of radians.
            Cos cos cos_: float ulps |x| x.cos();
            /// The tangent of radians.
            Tan tan tan_: float ulps8 |x| x.tan();
            /// The Gauss error function.
            Erf erf erf_: float ulps |x| x.erf();
            /// The complementary error function `1 - erf(x)`, accurate where `erf(x)` is near 1.
            Erfc erfc erfc_: float ulps8 |x| x.erfc();
            /// `1 / sqrt(x)`.
            Rsqrt rsqrt rsqrt_: float ulps |x| R::c(1.0) / x.sqrt();
            /// `1 / x`, correctly rounded.
            Reciprocal reciprocal reciprocal_: float exact |x| R::c(1.0) / x;
            /// `x * x` (integers wrap).
            Square square square_: any exact |x| x * x, |i| i.wrapping_mul(i);
            /// -1, 0 or 1 by the sign of `x` (PyTorch's `sign`: NaN gives 0, and so do both
            /// zeros, as `+0`).
            Sign sign sign_: any exact |x| if x > R::c(0.0) {
                R::c(1.0)
            } else if x < R::c(0.0) {
                R::c(-1.0)
            } else {
                R::c(0.0)
            }, |i| i.signum();
            /// The largest integer not above `x` (integers: unchanged).
            Floor floor floor_: any exact |x| x.floor(), |i| i;
            /// The smallest integer not below `x` (integers: unchanged).
            Ceil ceil ceil_: any exact |x| x.ceil(), |i| i;
            /// `x` rounded to the nearest integer, halves to even (PyTorch's `round`;
            /// integers: unchanged).
            Round round round_: any exact |x| x.round_ties_even(), |i| i;
            /// `x` rounded toward zero (integers: unchanged).
            Trunc trunc trunc_: any exact |x| x.trunc(), |i| i;
            /// `ln(1 + x)`, accurate for small `x`.
            Log1p log1p log1p_: float ulps |x| x.ln_1p();
            /// `e^x - 1`, accurate for small `x`.
            Expm1 expm1 expm1_: float ulps |x| x.exp_m1();
            /// The base-2 logarithm.
            Log2 log2 log2_: float ulps |x| x.log2();
            /// The base-10 logarithm.
            Log10 log10 log10_: float ulps |x| x.log10();
            /// The exact GELU, `x * 0.5 * (1 + erf(x / sqrt(2)))` (PyTorch's `gelu` with
            /// `approximate='none'`).
            Gelu gelu gelu_: float input_ulps |x| x * R::c(0.5)
                * (R::c(1.0) + (x * R::c(std::f64::consts::FRAC_1_SQRT_2)).erf());
            /// The tanh approximation of GELU, `0.5 * x * (1 + tanh(sqrt(2 / pi) * (x +
            /// 0.044715 * x^3)))` (PyTorch's `gelu` with `approximate='tanh'`, GPT-2's),
            /// computed as the same function `x / (1 + e^(-2u))`, `u` the tanh's argument (no
            /// cancellation in `1 + tanh u` for negative `x`).
            GeluTanh gelu_tanh gelu_tanh_: float input_ulps |x| x / (R::c(1.0)
                + (R::c(-2.0) * (R::c(0.797_884_560_802_865_4)
                    * (x + R::c(0.044715) * x * x * x))).exp());
            /// SiLU (swish), `x / (1 + e^-x)`.
            Silu silu silu_: float ulps |x| x / (R::c(1.0) + (-x).exp());
            /// `ln(1 + e^x)`, and `x` itself above 20 (PyTorch's `softplus` with `beta=1`,
            /// `threshold=20`).
            Softplus softplus softplus_: float ulps |x| if x > R::c(20.0) { x } else { x.exp().ln_1p() };
            /// The arcsine, in radians (NaN outside `[-1, 1]`).
            Asin asin asin_: float ulps |x| x.asin();
            /// The arccosine, in radians (NaN outside `[-1, 1]`).
            Acos acos acos_: float ulps |x| x.acos();
            /// The arctangent, in radians.
            Atan atan atan_: float ulps |x| x.atan();
            /// The hyperbolic sine.
            Sinh sinh sinh_: float ulps8 |x| x.sinh();
            /// The hyperbolic cosine.
            Cosh cosh cosh_: float ulps |x| x.cosh();
            /// The inverse hyperbolic sine.
            Asinh asinh asinh_: float ulps8 |x| x.asinh();
            /// The inverse hyperbolic cosine (NaN below 1).
            Acosh acosh acosh_: float ulps8 |x| x.acosh();
            /// The inverse hyperbolic tangent (infinite at `±1`, NaN beyond).
            Atanh atanh atanh_: float ulps8 |x| x.atanh();
        }
    };
}

/// The real arithmetic the float bodies of [`unary_ops!`](crate::unary_ops) use, for f32 and
/// f64: IEEE operations and the functions of Rust's standard library and `libm`.
pub trait Real:
    Copy
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
{
    /// The constant `v` rounded to the type (the same rounding as a CUDA `float` literal).
    fn c(v: f64) -> Self;
    /// Whether the value is NaN.
    fn is_nan(self) -> bool;
    /// `|x|`.
    fn abs(self) -> Self;
    /// `e^x`.
    fn exp(self) -> Self;
    /// `e^x - 1`.
    fn exp_m1(self) -> Self;
    /// `ln x`.
    fn ln(self) -> Self;
    /// `ln(1 + x)`.
    fn ln_1p(self) -> Self;
    /// `log2 x`.
    fn log2(self) -> Self;
    /// `log10 x`.
    fn log10(self) -> Self;
    /// `sqrt x`, correctly rounded.
    fn sqrt(self) -> Self;
    /// `tanh x`.
    fn tanh(self) -> Self;
    /// `sin x`.
    fn sin(self) -> Self;
    /// `cos x`.
    fn cos(self) -> Self;
    /// `tan x`.
    fn tan(self) -> Self;
    /// `erf x`.
    fn erf(self) -> Self;
    /// `erfc x`.
    fn erfc(self) -> Self;
    /// `asin x`.
    fn asin(self) -> Self;
    /// `acos x`.
    fn acos(self) -> Self;
    /// `atan x`.
    fn atan(self) -> Self;
    /// `sinh x`.
    fn sinh(self) -> Self;
    /// `cosh x`.
    fn cosh(self) -> Self;
    /// `asinh x`.
    fn asinh(self) -> Self;
    /// `acosh x`.
    fn acosh(self) -> Self;
    /// `atanh x`.
    fn atanh(self) -> Self;
    /// Rounded down.
    fn floor(self) -> Self;
    /// Rounded up.
    fn ceil(self) -> Self;
    /// Rounded to nearest, halves to even.
    fn round_ties_even(self) -> Self;
    /// Rounded toward zero.
    fn trunc(self) -> Self;
}

/// libm's f32 functions under the f64 names, for [`real!`].
mod f32_lib {
    pub(super) use libm::{
        acosf as acos, acoshf as acosh, asinf as asin, asinhf as asinh, atanf as atan,
        atanhf as atanh, coshf as cosh, sinhf as sinh,
    };
}

/// libm's f64 functions, for [`real!`].
mod f64_lib {
    pub(super) use libm::{acos, acosh, asin, asinh, atan, atanh, cosh, sinh};
}

// `$lib`: libm's functions of the type (musl's: `std`'s `asinh` and `acosh` of f32 overflow
// to infinity for inputs above about 1e19, where the result is finite).
macro_rules! real {
    ($t:ty, $erf:path, $erfc:path, $lib:ident) => {
        impl Real for $t {
            #[inline]
            fn c(v: f64) -> Self {
                v as $t
            }
            #[inline]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            #[inline]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline]
            fn exp_m1(self) -> Self {
                <$t>::exp_m1(self)
            }
            #[inline]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline]
            fn ln_1p(self) -> Self {
                <$t>::ln_1p(self)
            }
            #[inline]
            fn log2(self) -> Self {
                <$t>::log2(self)
            }
            #[inline]
            fn log10(self) -> Self {
                <$t>::log10(self)
            }
            #[inline]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline]
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            #[inline]
            fn sin(self) -> Self {
                <$t>::sin(self)
            }
            #[inline]
            fn cos(self) -> Self {
                <$t>::cos(self)
            }
            #[inline]
            fn tan(self) -> Self {
                <$t>::tan(self)
            }
            #[inline]
            fn erf(self) -> Self {
                $erf(self)
            }
            #[inline]
            fn erfc(self) -> Self {
                $erfc(self)
            }
            #[inline]
            fn asin(self) -> Self {
                $lib::asin(self)
            }
            #[inline]
            fn acos(self) -> Self {
                $lib::acos(self)
            }
            #[inline]
            fn atan(self) -> Self {
                $lib::atan(self)
            }
            #[inline]
            fn sinh(self) -> Self {
                $lib::sinh(self)
            }
            #[inline]
            fn cosh(self) -> Self {
                $lib::cosh(self)
            }
            #[inline]
            fn asinh(self) -> Self {
                $lib::asinh(self)
            }
            #[inline]
            fn acosh(self) -> Self {
                // musl's acosh gives a value below -1 (the formula's mirror); the function
                // is undefined below 1.
                if self < 1.0 {
                    <$t>::NAN
                } else {
                    $lib::acosh(self)
                }
            }
            #[inline]
            fn atanh(self) -> Self {
                $lib::atanh(self)
            }
            #[inline]
            fn floor(self) -> Self {
                <$t>::floor(self)
            }
            #[inline]
            fn ceil(self) -> Self {
                <$t>::ceil(self)
            }
            #[inline]
            fn round_ties_even(self) -> Self {
                <$t>::round_ties_even(self)
            }
            #[inline]
            fn trunc(self) -> Self {
                <$t>::trunc(self)
            }
        }
    };
}

real!(f32, libm::erff, libm::erfcf, f32_lib);
real!(f64, libm::erf, libm::erfc, f64_lib);

/// The integer arithmetic the integer bodies of [`unary_ops!`](crate::unary_ops) use, for i32
/// and i64 (wrapping where the result would overflow).
pub trait Int: Copy + Ord {
    /// Zero.
    const ZERO: Self;
    /// `-x`, wrapping.
    fn wrapping_neg(self) -> Self;
    /// `|x|`, wrapping.
    fn wrapping_abs(self) -> Self;
    /// `x * y`, wrapping.
    fn wrapping_mul(self, y: Self) -> Self;
    /// -1, 0 or 1.
    fn signum(self) -> Self;
}

macro_rules! int {
    ($t:ty) => {
        impl Int for $t {
            const ZERO: Self = 0;
            #[inline]
            fn wrapping_neg(self) -> Self {
                <$t>::wrapping_neg(self)
            }
            #[inline]
            fn wrapping_abs(self) -> Self {
                <$t>::wrapping_abs(self)
            }
            #[inline]
            fn wrapping_mul(self, y: Self) -> Self {
                <$t>::wrapping_mul(self, y)
            }
            #[inline]
            fn signum(self) -> Self {
                <$t>::signum(self)
            }
        }
    };
}

int!(i32);
int!(i64);

/// Whether a kind of the table is float-only.
macro_rules! float_only {
    (any) => {
        false
    };
    (float) => {
        true
    };
}

/// How the GPU kernel of an op and its CPU twin agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Twin {
    /// The same bits (NaN payloads aside).
    Exact,
    /// Within [`Twin::ULPS`] ulp of the result type: both use their math library (CUDA's,
    /// Rust's `libm`), each within 2 ulp of the exact value.
    Ulps,
    /// Within twice [`Twin::ULPS`] ulp: CUDA's function is within 4 or 5 ulp (`tanf`, `erfc`, CUDA C
    /// Programming Guide, "Mathematical Functions").
    WideUlps,
    /// Within [`Twin::ULPS`] ulp of the input's magnitude: the formula subtracts nearly equal
    /// values (`1 + erf(x)` of GELU at large negative `x`), which magnifies the library
    /// functions' differences relative to a small result.
    InputUlps,
}

impl Twin {
    /// The ulp bound of [`Twin::Ulps`] and [`Twin::InputUlps`].
    pub const ULPS: u64 = 4;
}

/// The [`Twin`] of a twin column of the table.
macro_rules! twin {
    (exact) => {
        Twin::Exact
    };
    (ulps) => {
        Twin::Ulps
    };
    (ulps8) => {
        Twin::WideUlps
    };
    (input_ulps) => {
        Twin::InputUlps
    };
}

/// The integer body of a row, or `i` itself for a float-only op (never called: the callers
/// check [`UnaryOp::float_only`] first).
macro_rules! int_body {
    ($x:ident;) => {
        $x
    };
    ($x:ident; $i:ident => $body:expr) => {{
        let $i = $x;
        $body
    }};
}

/// Expands the table into [`UnaryOp`] and its CPU definitions.
macro_rules! define_unary_ops {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident $name:ident $inplace:ident: $kind:ident $twin:ident |$x:ident| $float:expr
            $(, |$i:ident| $int:expr)?;
    )*) => {
        /// A unary elementwise operation (the table in [`unary_ops!`](crate::unary_ops)).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum UnaryOp {
            $($(#[doc = $doc])* $variant,)*
        }

        /// Kernel names by op and [`Element::TYPE_CODE`](crate::Element::TYPE_CODE) (f32, f16,
        /// bf16, i32, i64, f64); the integer names of float-only ops are never launched.
        const KERNELS: [[&str; 6]; UnaryOp::COUNT] = [$([
            concat!(stringify!($name), "_f32"),
            concat!(stringify!($name), "_f16"),
            concat!(stringify!($name), "_bf16"),
            concat!(stringify!($name), "_i32"),
            concat!(stringify!($name), "_i64"),
            concat!(stringify!($name), "_f64"),
        ],)*];

        impl UnaryOp {
            /// How many ops there are.
            pub const COUNT: usize = [$(stringify!($variant)),*].len();

            /// Every operation, in the table's order (the kernels' op codes), for tests and
            /// dispatch tables.
            pub const ALL: [UnaryOp; UnaryOp::COUNT] = [$(UnaryOp::$variant),*];

            /// The operation's name (`"erf"`), PyTorch's, also the prefix of its kernels.
            pub const fn name(self) -> &'static str {
                match self {
                    $(UnaryOp::$variant => stringify!($name),)*
                }
            }

            /// The op of a name (`"erf"`), as [`UnaryOp::name`] gives it.
            pub fn from_name(name: &str) -> Option<UnaryOp> {
                UnaryOp::ALL.into_iter().find(|op| op.name() == name)
            }

            /// Whether only the floating types support the operation (integers and bools
            /// compute it in float32).
            pub const fn float_only(self) -> bool {
                match self {
                    $(UnaryOp::$variant => float_only!($kind),)*
                }
            }

            /// How the GPU kernel and the CPU twin agree ([`Twin`]).
            pub const fn twin(self) -> Twin {
                match self {
                    $(UnaryOp::$variant => twin!($twin),)*
                }
            }

            /// Whether the GPU kernel and the CPU twin give identical bits.
            pub const fn exact_twin(self) -> bool {
                matches!(self.twin(), Twin::Exact)
            }

            /// The name of the op's kernel for `dtype`; `None` for a dtype without one
            /// (integers for float-only ops; the types without elementwise kernels).
            pub fn kernel_name(self, dtype: DType) -> Option<&'static str> {
                let code = match dtype {
                    DType::F32 => 0,
                    DType::F16 => 1,
                    DType::BF16 => 2,
                    DType::I32 if !self.float_only() => 3,
                    DType::I64 if !self.float_only() => 4,
                    DType::F64 => 5,
                    _ => return None,
                };
                Some(KERNELS[self as usize][code])
            }

            /// `op(x)` in a float type, as the CPU twins define it.
            #[inline]
            pub fn apply_real<R: Real>(self, x: R) -> R {
                match self {
                    $(UnaryOp::$variant => {
                        let $x = x;
                        $float
                    })*
                }
            }

            /// `op(x)` in an integer type, wrapping; a float-only op returns `x` (the callers
            /// refuse it first).
            #[inline]
            pub fn apply_int<I: Int>(self, x: I) -> I {
                match self {
                    $(UnaryOp::$variant => int_body!(x; $($i => $int)?),)*
                }
            }
        }
    };
}

unary_ops!(define_unary_ops);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_kernels_follow_the_kind() {
        for op in UnaryOp::ALL {
            assert_eq!(UnaryOp::from_name(op.name()), Some(op));
            assert_eq!(
                op.kernel_name(DType::I32).is_none(),
                op.float_only(),
                "{op:?}"
            );
            assert!(op.kernel_name(DType::F64).unwrap().ends_with("_f64"));
        }
        assert_eq!(UnaryOp::Erf.kernel_name(DType::BF16), Some("erf_bf16"));
        assert_eq!(UnaryOp::GeluTanh.name(), "gelu_tanh");
        assert_eq!(UnaryOp::Square.kernel_name(DType::I64), Some("square_i64"));
        assert_eq!(UnaryOp::Sqrt.kernel_name(DType::U8), None);
    }

    #[test]
    fn float_bodies_match_pytorch_values() {
        use UnaryOp::*;
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1.0);
        assert!(close(Erf.apply_real(0.5f64), 0.520_499_877_813_046_5));
        assert!(close(Erfc.apply_real(3.0f64), 2.209_049_699_858_544e-5));
        assert!(close(Gelu.apply_real(1.0f64), 0.841_344_746_068_542_9));
        assert!(close(GeluTanh.apply_real(1.0f64), 0.841_191_990_607_477_2));
        assert!(close(Silu.apply_real(2.0f64), 1.761_594_155_955_764_9));
        assert!(close(Softplus.apply_real(1.0f64), 1.313_261_687_518_222_8));
        assert_eq!(Softplus.apply_real(30.0f64), 30.0);
        assert_eq!(Round.apply_real(2.5f32), 2.0);
        assert_eq!(Round.apply_real(-3.5f32), -4.0);
        assert_eq!(Sign.apply_real(f32::NAN), 0.0);
        assert_eq!(Sign.apply_real(-0.0f64).to_bits(), 0.0f64.to_bits());
        assert_eq!(Sign.apply_real(-7.0f64), -1.0);
        assert!(close(Expm1.apply_real(1e-10f64), 1.000_000_000_05e-10));
        assert!(close(Log1p.apply_real(1e-10f64), 9.999_999_999_5e-11));
        assert_eq!(Reciprocal.apply_real(0.0f32), f32::INFINITY);
        assert_eq!(Rsqrt.apply_real(4.0f64), 0.5);
        assert_eq!(Log2.apply_real(8.0f64), 3.0);
        assert_eq!(Log10.apply_real(1000.0f64), 3.0);
    }

    #[test]
    fn integer_bodies_wrap() {
        use UnaryOp::*;
        assert_eq!(Square.apply_int(i32::MAX), 1);
        assert_eq!(Sign.apply_int(-9i64), -1);
        assert_eq!(Neg.apply_int(i64::MIN), i64::MIN);
        assert_eq!(Floor.apply_int(-3i32), -3);
        assert_eq!(Relu.apply_int(-3i32), 0);
    }
}
