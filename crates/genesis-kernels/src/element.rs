use half::{bf16, f16};

use crate::DType;

/// The comparison kernel of `op` for the type named `$name` (`"lt_f32"`).
macro_rules! compare_kernel_name {
    ($op:expr, $name:literal) => {
        match $op {
            CompareOp::Eq => concat!("eq_", $name),
            CompareOp::Ne => concat!("ne_", $name),
            CompareOp::Lt => concat!("lt_", $name),
            CompareOp::Le => concat!("le_", $name),
            CompareOp::Gt => concat!("gt_", $name),
            CompareOp::Ge => concat!("ge_", $name),
        }
    };
}

mod sealed {
    pub trait Sealed {}
}

/// A binary elementwise operation of the `elementwise` kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b` (floating types only).
    Div,
    /// The larger of `a` and `b`; NaN if either is NaN.
    Maximum,
    /// The smaller of `a` and `b`; NaN if either is NaN.
    Minimum,
    /// `a` to the power `b`. Integers: exact and wrapping (the bits of `b` repeated wrapping
    /// multiplications, by squaring); a negative `b` gives 0, except 1 for `a == 1` and `-1` or
    /// `1` (odd or even `b`) for `a == -1` (PyTorch's integer `pow`).
    Pow,
    /// `floor(a / b)` (Python's `//`, PyTorch's `floor_divide`). Floats as PyTorch's
    /// `div_floor_floating`: `(a - fmod(a, b)) / b`, one less when the remainder and `b` differ
    /// in sign, rounded to the nearest integer (IEEE `a / b` when `b` is 0); integers exact, the
    /// truncated quotient less one when the signs differ and the remainder is not 0 (`MIN // -1`
    /// wraps to `MIN`).
    FloorDivide,
    /// `trunc(a / b)` (PyTorch's `div(rounding_mode="trunc")`): floats the truncated IEEE
    /// quotient (f16 and bf16: the quotient rounded to the type, then truncated, as PyTorch's);
    /// integers C's division (`MIN / -1` wraps to `MIN`).
    TruncDivide,
    /// `a - floor(a / b) * b` with the sign of `b` (Python's `%`, PyTorch's `remainder`): floats
    /// `fmod(a, b)`, plus `b` when it is not 0 and its sign differs from `b`'s; integers likewise.
    Remainder,
    /// C's `fmod`: the remainder of the truncated quotient, with the sign of `a` (exact).
    Fmod,
    /// `a & b` (integers only; bools compute as integers).
    BitwiseAnd,
    /// `a | b` (integers only).
    BitwiseOr,
    /// `a ^ b` (integers only).
    BitwiseXor,
    /// The angle of the point `(b, a)`, in `(-pi, pi]` (C's `atan2(a, b)`; floats, integers
    /// computed as float32 as PyTorch's).
    Atan2,
    /// `sqrt(a^2 + b^2)` without overflow or underflow in between (C's `hypot`; floats).
    Hypot,
}

impl BinaryOp {
    /// Every operation, for tests and dispatch tables.
    pub const ALL: [BinaryOp; 16] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
        BinaryOp::Pow,
        BinaryOp::FloorDivide,
        BinaryOp::TruncDivide,
        BinaryOp::Remainder,
        BinaryOp::Fmod,
        BinaryOp::BitwiseAnd,
        BinaryOp::BitwiseOr,
        BinaryOp::BitwiseXor,
        BinaryOp::Atan2,
        BinaryOp::Hypot,
    ];

    /// Whether only the floating types support the operation (true division).
    pub const fn float_only(self) -> bool {
        matches!(self, BinaryOp::Div | BinaryOp::Atan2 | BinaryOp::Hypot)
    }

    /// Whether only the integer types support the operation (the bitwise ones).
    pub const fn int_only(self) -> bool {
        matches!(
            self,
            BinaryOp::BitwiseAnd | BinaryOp::BitwiseOr | BinaryOp::BitwiseXor
        )
    }

    /// Whether an integer operation divides by `b` (a zero `b` is the caller's to refuse).
    pub const fn divides(self) -> bool {
        matches!(
            self,
            BinaryOp::FloorDivide | BinaryOp::TruncDivide | BinaryOp::Remainder | BinaryOp::Fmod
        )
    }

    /// Whether the GPU kernel and the CPU twin give identical bits: all but `pow`, which uses
    /// CUDA's `powf` on the GPU and Rust's on the CPU (both within 2 ulp, so the twins agree
    /// within 4 ulp of the result type), and `atan2` and `hypot` (CUDA's within 2 and 3 ulp,
    /// Rust's within 1: also 4). Integer `pow` is exact on both.
    pub const fn exact_twin(self) -> bool {
        !matches!(self, BinaryOp::Pow | BinaryOp::Atan2 | BinaryOp::Hypot)
    }

    /// The operation's name (`"add"`), also the prefix of its kernels.
    pub const fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
            BinaryOp::Pow => "pow",
            BinaryOp::FloorDivide => "floor_divide",
            BinaryOp::TruncDivide => "trunc_divide",
            BinaryOp::Remainder => "remainder",
            BinaryOp::Fmod => "fmod",
            BinaryOp::BitwiseAnd => "bitwise_and",
            BinaryOp::BitwiseOr => "bitwise_or",
            BinaryOp::BitwiseXor => "bitwise_xor",
            BinaryOp::Atan2 => "atan2",
            BinaryOp::Hypot => "hypot",
        }
    }
}

/// A comparison of the `elementwise` kernels, giving bools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompareOp {
    /// `a == b` (NaN is unequal to everything).
    Eq,
    /// `a != b`.
    Ne,
    /// `a < b`.
    Lt,
    /// `a <= b`.
    Le,
    /// `a > b`.
    Gt,
    /// `a >= b`.
    Ge,
}

impl CompareOp {
    /// Every comparison, for tests and dispatch tables.
    pub const ALL: [CompareOp; 6] = [
        CompareOp::Eq,
        CompareOp::Ne,
        CompareOp::Lt,
        CompareOp::Le,
        CompareOp::Gt,
        CompareOp::Ge,
    ];

    /// The comparison's name (`"lt"`), also the prefix of its kernels.
    pub const fn name(self) -> &'static str {
        match self {
            CompareOp::Eq => "eq",
            CompareOp::Ne => "ne",
            CompareOp::Lt => "lt",
            CompareOp::Le => "le",
            CompareOp::Gt => "gt",
            CompareOp::Ge => "ge",
        }
    }

    /// `a op b` for any partially ordered values.
    #[inline]
    pub fn apply<V: PartialOrd>(self, a: V, b: V) -> bool {
        match self {
            CompareOp::Eq => a == b,
            CompareOp::Ne => a != b,
            CompareOp::Lt => a < b,
            CompareOp::Le => a <= b,
            CompareOp::Gt => a > b,
            CompareOp::Ge => a >= b,
        }
    }
}

use crate::unary::Twin;
pub use crate::unary::UnaryOp;

impl Twin {
    /// Whether `gpu` and `cpu`, two results of an op with this agreement for input `x`, agree.
    pub fn agree<T: Element>(self, x: T, gpu: T, cpu: T) -> bool {
        let d = T::ulps_apart(gpu, cpu);
        match self {
            Twin::Exact => d == 0,
            _ if !T::IS_FLOAT => d == 0,
            Twin::Ulps => d <= Twin::ULPS,
            Twin::WideUlps => d <= 2 * Twin::ULPS,
            Twin::InputUlps => {
                d <= Twin::ULPS
                    || (gpu.to_f64() - cpu.to_f64()).abs()
                        <= Twin::ULPS as f64 * T::EPSILON * x.to_f64().abs()
            }
        }
    }
}

/// An element type the elementwise kernels support: `f64`, `f32`, `f16`, `bf16`, `i32`, `i64`.
///
/// The arithmetic here is the CPU twin's definition of each kernel's operation.
pub trait Element:
    Copy + PartialEq + Send + Sync + std::fmt::Debug + 'static + sealed::Sealed
{
    /// Short name used in kernel names (`"f32"`).
    const NAME: &'static str;
    /// Name of the `add` kernel for this type.
    const ADD_KERNEL: &'static str;
    /// Name of the `fill` kernel for this type.
    const FILL_KERNEL: &'static str;
    /// Whether this is a floating-point type.
    const IS_FLOAT: bool;
    /// The type's index in the kernels' type tables: f32 0, f16 1, bf16 2, i32 3, i64 4, f64 5.
    const TYPE_CODE: u32;
    /// The type's [`DType`].
    const DTYPE: DType;
    /// The spacing of the type's values at 1 (0 for integers).
    const EPSILON: f64;
    /// Name of the kernel of `op` for this type; `None` when the type does not support it
    /// (integer division).
    fn binary_kernel(op: BinaryOp) -> Option<&'static str>;
    /// `op(a, b)` as the kernel computes it: f64 in f64, the other floats in f32, with
    /// round-to-nearest-even (f16 and bf16 widened, computed once, rounded back: the correctly
    /// rounded result), integers wrap. Integer division is not an operation of the kernels;
    /// here it gives 0 for a zero or overflowing divisor, and the callers reject it before any
    /// element is computed.
    fn binary(op: BinaryOp, a: Self, b: Self) -> Self;
    /// Name of the comparison kernel of `op` for this type.
    fn compare_kernel(op: CompareOp) -> &'static str;
    /// `a op b` as the comparison kernel computes it (IEEE comparisons for floats).
    fn compare(op: CompareOp, a: Self, b: Self) -> bool;
    /// Name of the kernel of unary `op` for this type; `None` when the type does not support
    /// it (transcendental ops on integers).
    fn unary_kernel(op: UnaryOp) -> Option<&'static str> {
        op.kernel_name(Self::DTYPE)
    }
    /// `op(x)` on the CPU: f64 in f64, the other floats in f32 (halves widened and rounded
    /// back once), integers wrapping. Integer float-only ops are rejected by the callers;
    /// here they return `x`.
    fn unary(op: UnaryOp, x: Self) -> Self;
    /// How many representable values lie between `a` and `b` (0 when [`Element::same`]);
    /// `u64::MAX` when exactly one is NaN.
    fn ulps_apart(a: Self, b: Self) -> u64;
    /// `a + b` as the kernel computes it.
    fn add(a: Self, b: Self) -> Self {
        Self::binary(BinaryOp::Add, a, b)
    }
    /// Whether two values are the same result: equal bits, or both NaN.
    fn same(a: Self, b: Self) -> bool;
    /// The value as f64 (exact for every type but large i64).
    fn to_f64(self) -> f64;
    /// The value as i64 (floats: truncated, saturating).
    fn to_i64(self) -> i64;
    /// `x` rounded to nearest-even (integers: truncated, saturating).
    fn from_f64(x: f64) -> Self;
    /// `x` converted (integers: wrapping; floats: rounded).
    fn from_i64(x: i64) -> Self;
}

/// The CPU twins' definition of the binary ops in one float type (`f32`: f32, f16
/// and bf16 widened; `f64`): IEEE arithmetic; maximum and minimum as the kernels compute them
/// (NaN from either side wins, then the plain comparison); `relu` keeps NaN; `sigmoid` as
/// `1 / (1 + e^-x)`.
macro_rules! float_ops {
    ($binary:ident, $t:ty) => {
        #[inline]
        fn $binary(op: BinaryOp, x: $t, y: $t) -> $t {
            match op {
                BinaryOp::Add => x + y,
                BinaryOp::Sub => x - y,
                BinaryOp::Mul => x * y,
                BinaryOp::Div => x / y,
                BinaryOp::Maximum => {
                    if x.is_nan() {
                        x
                    } else if y.is_nan() || y >= x {
                        y
                    } else {
                        x
                    }
                }
                BinaryOp::Minimum => {
                    if x.is_nan() {
                        x
                    } else if y.is_nan() || y <= x {
                        y
                    } else {
                        x
                    }
                }
                BinaryOp::Pow => x.powf(y),
                BinaryOp::FloorDivide => {
                    if y == 0.0 {
                        return x / y;
                    }
                    let m = x % y;
                    let mut d = (x - m) / y;
                    if m != 0.0 && ((y < 0.0) != (m < 0.0)) {
                        d -= 1.0;
                    }
                    if d != 0.0 {
                        let f = d.floor();
                        if d - f > 0.5 { f + 1.0 } else { f }
                    } else {
                        (0.0 as $t).copysign(x / y)
                    }
                }
                BinaryOp::TruncDivide => (x / y).trunc(),
                BinaryOp::Remainder => {
                    let m = x % y;
                    if m != 0.0 && ((y < 0.0) != (m < 0.0)) {
                        m + y
                    } else {
                        m
                    }
                }
                BinaryOp::Fmod => x % y,
                // Not defined for floats (the launchers refuse them).
                BinaryOp::BitwiseAnd | BinaryOp::BitwiseOr | BinaryOp::BitwiseXor => <$t>::NAN,
                BinaryOp::Atan2 => x.atan2(y),
                BinaryOp::Hypot => x.hypot(y),
            }
        }
    };
}

float_ops!(f32_op, f32);
float_ops!(f64_op, f64);

/// Position of a float's bits on a line where adjacent representable values are adjacent
/// integers (sign-magnitude to two's complement).
#[inline]
fn ordered(bits: u64, sign: u64) -> i128 {
    if bits & sign != 0 {
        -((bits & !sign) as i128)
    } else {
        bits as i128
    }
}

macro_rules! float_element {
    ($t:ty, $name:literal, $code:literal, $dt:ident, $eps:expr, |$v:ident| $to:expr, |$f:ident| $from:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const NAME: &'static str = $name;
            const TYPE_CODE: u32 = $code;
            const DTYPE: DType = DType::$dt;
            const EPSILON: f64 = $eps;
            const ADD_KERNEL: &'static str = concat!("add_", $name);
            const FILL_KERNEL: &'static str = concat!("fill_", $name);
            const IS_FLOAT: bool = true;
            fn binary_kernel(op: BinaryOp) -> Option<&'static str> {
                Some(match op {
                    BinaryOp::Add => concat!("add_", $name),
                    BinaryOp::Sub => concat!("sub_", $name),
                    BinaryOp::Mul => concat!("mul_", $name),
                    BinaryOp::Div => concat!("div_", $name),
                    BinaryOp::Maximum => concat!("maximum_", $name),
                    BinaryOp::Minimum => concat!("minimum_", $name),
                    BinaryOp::Pow => concat!("pow_", $name),
                    BinaryOp::FloorDivide => concat!("floor_divide_", $name),
                    BinaryOp::TruncDivide => concat!("trunc_divide_", $name),
                    BinaryOp::Remainder => concat!("remainder_", $name),
                    BinaryOp::Fmod => concat!("fmod_", $name),
                    BinaryOp::Atan2 => concat!("atan2_", $name),
                    BinaryOp::Hypot => concat!("hypot_", $name),
                    BinaryOp::BitwiseAnd | BinaryOp::BitwiseOr | BinaryOp::BitwiseXor => {
                        return None;
                    }
                })
            }
            fn compare_kernel(op: CompareOp) -> &'static str {
                compare_kernel_name!(op, $name)
            }
            #[inline]
            fn compare(op: CompareOp, a: Self, b: Self) -> bool {
                let to = |$v: Self| -> f32 { $to };
                op.apply(to(a), to(b))
            }
            #[inline]
            fn unary(op: UnaryOp, x: Self) -> Self {
                let to = |$v: Self| -> f32 { $to };
                let $f = op.apply_real(to(x));
                $from
            }
            fn ulps_apart(a: Self, b: Self) -> u64 {
                if Self::same(a, b) {
                    return 0;
                }
                if a.is_nan() || b.is_nan() {
                    return u64::MAX;
                }
                let sign = 1u64 << (8 * size_of::<Self>() - 1);
                let (x, y) = (
                    ordered(u64::from(a.to_bits()), sign),
                    ordered(u64::from(b.to_bits()), sign),
                );
                (x - y).unsigned_abs().min(u128::from(u64::MAX)) as u64
            }
            #[inline]
            fn binary(op: BinaryOp, a: Self, b: Self) -> Self {
                let to = |$v: Self| -> f32 { $to };
                if op == BinaryOp::TruncDivide {
                    // The quotient rounded to this type first, then truncated (PyTorch's
                    // `trunc(a / b)` in the operands' type): exact after the rounding.
                    let q = {
                        let $f = to(a) / to(b);
                        $from
                    };
                    let $f = to(q).trunc();
                    return $from;
                }
                let $f = f32_op(op, to(a), to(b));
                $from
            }
            #[inline]
            fn same(x: Self, y: Self) -> bool {
                x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
            }
            #[inline]
            fn to_f64(self) -> f64 {
                let $v = self;
                f64::from($to)
            }
            #[inline]
            fn to_i64(self) -> i64 {
                self.to_f64() as i64
            }
            #[inline]
            fn from_f64(x: f64) -> Self {
                <$t>::from_f64_rounded(x)
            }
            #[inline]
            fn from_i64(x: i64) -> Self {
                Self::from_f64(x as f64)
            }
        }
    };
}

/// `a ** b` for integers of one type, as the `pow` kernels compute it: for `b >= 0` the bits of
/// repeated wrapping multiplication (by squaring); for `b < 0`, 0 but for `a` 1 (1) and -1 (-1
/// when `b` is odd, else 1).
macro_rules! int_pow {
    ($a:expr, $b:expr) => {{
        let (a, b) = ($a, $b);
        if b < 0 {
            match a {
                1 => 1,
                -1 if b & 1 != 0 => -1,
                -1 => 1,
                _ => 0,
            }
        } else {
            let (mut r, mut base, mut e) = (1, a, b);
            while e != 0 {
                if e & 1 != 0 {
                    r = base.wrapping_mul(r);
                }
                base = base.wrapping_mul(base);
                e >>= 1;
            }
            r
        }
    }};
}

macro_rules! int_element {
    ($t:ty, $name:literal, $code:literal, $dt:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const NAME: &'static str = $name;
            const TYPE_CODE: u32 = $code;
            const DTYPE: DType = DType::$dt;
            const EPSILON: f64 = 0.0;
            const ADD_KERNEL: &'static str = concat!("add_", $name);
            const FILL_KERNEL: &'static str = concat!("fill_", $name);
            const IS_FLOAT: bool = false;
            fn binary_kernel(op: BinaryOp) -> Option<&'static str> {
                Some(match op {
                    BinaryOp::Add => concat!("add_", $name),
                    BinaryOp::Sub => concat!("sub_", $name),
                    BinaryOp::Mul => concat!("mul_", $name),
                    BinaryOp::Div => return None,
                    BinaryOp::Pow => concat!("pow_", $name),
                    BinaryOp::Maximum => concat!("maximum_", $name),
                    BinaryOp::Minimum => concat!("minimum_", $name),
                    BinaryOp::FloorDivide => concat!("floor_divide_", $name),
                    BinaryOp::TruncDivide => concat!("trunc_divide_", $name),
                    BinaryOp::Remainder => concat!("remainder_", $name),
                    BinaryOp::Fmod => concat!("fmod_", $name),
                    BinaryOp::BitwiseAnd => concat!("bitwise_and_", $name),
                    BinaryOp::BitwiseOr => concat!("bitwise_or_", $name),
                    BinaryOp::BitwiseXor => concat!("bitwise_xor_", $name),
                    BinaryOp::Atan2 | BinaryOp::Hypot => return None,
                })
            }
            fn compare_kernel(op: CompareOp) -> &'static str {
                compare_kernel_name!(op, $name)
            }
            #[inline]
            fn compare(op: CompareOp, a: Self, b: Self) -> bool {
                op.apply(a, b)
            }
            #[inline]
            fn unary(op: UnaryOp, x: Self) -> Self {
                op.apply_int(x)
            }
            fn ulps_apart(a: Self, b: Self) -> u64 {
                (i128::from(a) - i128::from(b)).unsigned_abs() as u64
            }
            #[inline]
            fn binary(op: BinaryOp, a: Self, b: Self) -> Self {
                match op {
                    BinaryOp::Add => a.wrapping_add(b),
                    BinaryOp::Sub => a.wrapping_sub(b),
                    BinaryOp::Mul => a.wrapping_mul(b),
                    BinaryOp::Div => a.checked_div(b).unwrap_or(0),
                    BinaryOp::Maximum => a.max(b),
                    BinaryOp::Minimum => a.min(b),
                    BinaryOp::Pow => int_pow!(a, b),
                    // A zero `b` gives 0 (the facade refuses it first, as PyTorch's CPU).
                    BinaryOp::FloorDivide => {
                        if b == 0 {
                            return 0;
                        }
                        let (q, r) = (a.wrapping_div(b), a.wrapping_rem(b));
                        if r != 0 && ((a < 0) != (b < 0)) {
                            q.wrapping_sub(1)
                        } else {
                            q
                        }
                    }
                    BinaryOp::TruncDivide => {
                        if b == 0 {
                            0
                        } else {
                            a.wrapping_div(b)
                        }
                    }
                    BinaryOp::Remainder => {
                        if b == 0 {
                            return 0;
                        }
                        let r = a.wrapping_rem(b);
                        if r != 0 && ((r < 0) != (b < 0)) {
                            r.wrapping_add(b)
                        } else {
                            r
                        }
                    }
                    BinaryOp::Fmod => {
                        if b == 0 {
                            0
                        } else {
                            a.wrapping_rem(b)
                        }
                    }
                    BinaryOp::BitwiseAnd => a & b,
                    BinaryOp::BitwiseOr => a | b,
                    BinaryOp::BitwiseXor => a ^ b,
                    // Float-only (integers are converted first).
                    BinaryOp::Atan2 | BinaryOp::Hypot => 0,
                }
            }
            #[inline]
            fn same(x: Self, y: Self) -> bool {
                x == y
            }
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn to_i64(self) -> i64 {
                i64::from(self)
            }
            #[inline]
            fn from_f64(x: f64) -> Self {
                x as Self
            }
            #[inline]
            fn from_i64(x: i64) -> Self {
                x as Self
            }
        }
    };
}

/// Rounding from f64 to nearest-even.
trait FromF64 {
    fn from_f64_rounded(x: f64) -> Self;
}
impl FromF64 for f32 {
    fn from_f64_rounded(x: f64) -> f32 {
        x as f32
    }
}
// Through f32 rounded to odd, which makes the second rounding exact (`half`'s own
// `bf16::from_f64` drops the bits below a tie: 0x3F808001 as f64 gives 0x3F80, not 0x3F81).
impl FromF64 for f16 {
    fn from_f64_rounded(x: f64) -> f16 {
        f16::from_f32(crate::copy::f64_to_f32_round_odd(x))
    }
}
impl FromF64 for bf16 {
    fn from_f64_rounded(x: f64) -> bf16 {
        bf16::from_f32(crate::copy::f64_to_f32_round_odd(x))
    }
}

float_element!(f32, "f32", 0, F32, f32::EPSILON as f64, |v| v, |r| r);
float_element!(f16, "f16", 1, F16, 0.000_976_562_5, |v| v.to_f32(), |r| {
    f16::from_f32(r)
});
float_element!(bf16, "bf16", 2, BF16, 0.007_812_5, |v| v.to_f32(), |r| {
    bf16::from_f32(r)
});
int_element!(i32, "i32", 3, I32);
int_element!(i64, "i64", 4, I64);

impl sealed::Sealed for f64 {}
impl Element for f64 {
    const NAME: &'static str = "f64";
    const TYPE_CODE: u32 = 5;
    const DTYPE: DType = DType::F64;
    const EPSILON: f64 = f64::EPSILON;
    const ADD_KERNEL: &'static str = "add_f64";
    const FILL_KERNEL: &'static str = "fill_f64";
    const IS_FLOAT: bool = true;
    fn binary_kernel(op: BinaryOp) -> Option<&'static str> {
        Some(match op {
            BinaryOp::Add => "add_f64",
            BinaryOp::Sub => "sub_f64",
            BinaryOp::Mul => "mul_f64",
            BinaryOp::Div => "div_f64",
            BinaryOp::Maximum => "maximum_f64",
            BinaryOp::Minimum => "minimum_f64",
            BinaryOp::Pow => "pow_f64",
            BinaryOp::FloorDivide => "floor_divide_f64",
            BinaryOp::TruncDivide => "trunc_divide_f64",
            BinaryOp::Remainder => "remainder_f64",
            BinaryOp::Fmod => "fmod_f64",
            BinaryOp::Atan2 => "atan2_f64",
            BinaryOp::Hypot => "hypot_f64",
            BinaryOp::BitwiseAnd | BinaryOp::BitwiseOr | BinaryOp::BitwiseXor => return None,
        })
    }
    fn compare_kernel(op: CompareOp) -> &'static str {
        compare_kernel_name!(op, "f64")
    }
    #[inline]
    fn compare(op: CompareOp, a: Self, b: Self) -> bool {
        op.apply(a, b)
    }
    #[inline]
    fn unary(op: UnaryOp, x: Self) -> Self {
        op.apply_real(x)
    }
    fn ulps_apart(a: Self, b: Self) -> u64 {
        if Self::same(a, b) {
            return 0;
        }
        if a.is_nan() || b.is_nan() {
            return u64::MAX;
        }
        let sign = 1u64 << 63;
        let (x, y) = (ordered(a.to_bits(), sign), ordered(b.to_bits(), sign));
        (x - y).unsigned_abs().min(u128::from(u64::MAX)) as u64
    }
    #[inline]
    fn binary(op: BinaryOp, a: Self, b: Self) -> Self {
        f64_op(op, a, b)
    }
    #[inline]
    fn same(x: Self, y: Self) -> bool {
        x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
    }
    #[inline]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline]
    fn to_i64(self) -> i64 {
        self as i64
    }
    #[inline]
    fn from_f64(x: f64) -> Self {
        x
    }
    #[inline]
    fn from_i64(x: i64) -> Self {
        x as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_add_is_correctly_rounded() {
        // 1 + 2^-11 is a tie between 1 and 1 + 2^-10 in f16: nearest-even gives 1.
        let one = f16::from_f32(1.0);
        let half_ulp = f16::from_f32(2f32.powi(-11));
        assert_eq!(f16::add(one, half_ulp), one);
        // 1 + 3 * 2^-11 rounds up to 1 + 2^-9.
        let three = f16::from_f32(3.0 * 2f32.powi(-11));
        assert_eq!(f16::add(one, three).to_f32(), 1.0 + 2f32.powi(-9));
        assert_eq!(f16::add(f16::MAX, f16::MAX), f16::INFINITY);
        assert!(bf16::add(bf16::INFINITY, bf16::NEG_INFINITY).is_nan());
    }

    #[test]
    fn integers_wrap() {
        assert_eq!(i32::add(i32::MAX, 1), i32::MIN);
        assert_eq!(i64::add(i64::MIN, -1), i64::MAX);
    }

    #[test]
    fn binary_ops_follow_their_definitions() {
        use BinaryOp::*;
        assert_eq!(f32::binary(Sub, 1.0, 3.0), -2.0);
        assert_eq!(f32::binary(Mul, 1.5, -2.0), -3.0);
        assert_eq!(f32::binary(Div, 1.0, 0.0), f32::INFINITY);
        assert!(f32::binary(Maximum, f32::NAN, 1.0).is_nan());
        assert!(f32::binary(Minimum, 1.0, f32::NAN).is_nan());
        assert_eq!(f32::binary(Maximum, -1.0, 2.0), 2.0);
        assert_eq!(f32::binary(Minimum, -1.0, 2.0), -1.0);
        // Just above a bf16 tie: rounds up (half's bf16::from_f64 gives 0x3F80 here).
        let above = f64::from(f32::from_bits(0x3F80_8001));
        assert_eq!(<bf16 as Element>::from_f64(above).to_bits(), 0x3F81);
        assert_eq!(<bf16 as Element>::from_f64(-above).to_bits(), 0xBF81);
        let tie = f64::from(f32::from_bits(0x3F80_8000));
        assert_eq!(<bf16 as Element>::from_f64(tie).to_bits(), 0x3F80);
        // 1/3 in bf16 is the correctly rounded quotient.
        let q = bf16::binary(Div, bf16::from_f32(1.0), bf16::from_f32(3.0));
        assert_eq!(q, bf16::from_f64(1.0 / 3.0));
        assert_eq!(i32::binary(Mul, i32::MAX, 2), -2);
        assert_eq!(i64::binary(Sub, i64::MIN, 1), i64::MAX);
        assert_eq!(i32::binary(Maximum, -5, 3), 3);
        assert_eq!(i64::binary(Minimum, -5, 3), -5);
        assert_eq!(i32::binary_kernel(Div), None);
        assert_eq!(f16::binary_kernel(Maximum), Some("maximum_f16"));
    }

    /// `a ** b` wrapped to `bits` bits, by repeated multiplication in i128 reduced modulo
    /// 2^bits at each step (the definition of wrapping pow), PyTorch's rule for `b < 0`.
    fn pow_reference(a: i64, b: i64, bits: u32) -> i64 {
        if b < 0 {
            return match a {
                1 => 1,
                -1 => {
                    if b % 2 != 0 {
                        -1
                    } else {
                        1
                    }
                }
                _ => 0,
            };
        }
        let m = 1i128 << bits;
        let wrap = |x: i128| {
            let r = x.rem_euclid(m);
            if r >= m / 2 { r - m } else { r }
        };
        // Repeated squaring of the exponent's bits, each product exact in i128 before reduction.
        let (mut r, mut base, mut e) = (1i128, wrap(i128::from(a)), b);
        while e > 0 {
            if e & 1 == 1 {
                r = wrap(r * base);
            }
            base = wrap(base * base);
            e >>= 1;
        }
        r as i64
    }

    #[test]
    fn integer_pow_wraps_like_repeated_multiplication() {
        use BinaryOp::Pow;
        // Small exponents: plain repeated multiplication in i128, reduced once at the end.
        for a in -7i64..=7 {
            for b in 0i64..=40 {
                let exact = (0..b).fold(1i128, |r, _| r * i128::from(a));
                let m32 = exact.rem_euclid(1 << 32) as u32 as i32;
                let m64 = exact.rem_euclid(1 << 64) as u64 as i64;
                assert_eq!(i32::binary(Pow, a as i32, b as i32), m32, "{a} ** {b}");
                assert_eq!(i64::binary(Pow, a, b), m64, "{a} ** {b}");
            }
        }
        // Negative exponents: 0, but 1 ** b = 1 and (-1) ** b = +-1.
        for b in [-1i64, -2, -3, i64::MIN, i64::MIN + 1] {
            assert_eq!(i64::binary(Pow, 1, b), 1);
            assert_eq!(i64::binary(Pow, -1, b), if b % 2 != 0 { -1 } else { 1 });
            assert_eq!(i64::binary(Pow, 2, b), 0);
            assert_eq!(i64::binary(Pow, 0, b), 0);
            assert_eq!(i64::binary(Pow, i64::MIN, b), 0);
        }
        assert_eq!(i32::binary(Pow, -1, i32::MIN), 1);
        assert_eq!(i32::binary(Pow, 0, 0), 1);
        assert_eq!(i32::binary(Pow, 2, 31), i32::MIN);
        assert_eq!(i32::binary(Pow, 2, 32), 0);
        assert_eq!(i64::binary(Pow, 3, 40), 12157665459056928801i128 as i64);
        // Random bases and exponents of every size against the i128 reference.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let (a, b) = (
                next() as i64 >> (next() % 64),
                next() as i64 >> (next() % 64),
            );
            assert_eq!(
                i64::binary(Pow, a, b),
                pow_reference(a, b, 64),
                "{a} ** {b}"
            );
            let (a, b) = (a as i32, b as i32);
            assert_eq!(
                i64::from(i32::binary(Pow, a, b)),
                pow_reference(i64::from(a), i64::from(b), 32),
                "{a} ** {b}"
            );
        }
        assert_eq!(i32::binary_kernel(Pow), Some("pow_i32"));
        assert_eq!(i64::binary_kernel(Pow), Some("pow_i64"));
    }

    #[test]
    fn unary_ops_and_ulp_distance() {
        use UnaryOp::*;
        assert_eq!(f32::unary(Relu, -0.0).to_bits(), 0.0f32.to_bits());
        assert!(f32::unary(Relu, f32::NAN).is_nan());
        assert_eq!(f32::unary(Sqrt, 2.0), std::f32::consts::SQRT_2);
        assert_eq!(bf16::unary(Neg, bf16::ONE), bf16::NEG_ONE);
        assert_eq!(i32::unary(Abs, i32::MIN), i32::MIN);
        assert_eq!(i64::unary(Relu, -3), 0);
        assert_eq!(i32::unary_kernel(Exp), None);
        assert_eq!(
            f32::ulps_apart(1.0, f32::from_bits(1.0f32.to_bits() + 3)),
            3
        );
        assert_eq!(f32::ulps_apart(-0.0, 0.0), 0);
        assert_eq!(f32::ulps_apart(f32::from_bits(1), -f32::from_bits(1)), 2);
        assert_eq!(f16::ulps_apart(f16::NAN, f16::ONE), u64::MAX);
        assert_eq!(bf16::ulps_apart(bf16::NAN, bf16::NAN), 0);
    }

    #[test]
    fn f64_computes_in_f64() {
        use BinaryOp::*;
        // 1 + 2^-40 is lost in f32 and kept in f64.
        let tiny = 2f64.powi(-40);
        assert_eq!(f64::binary(Add, 1.0, tiny), 1.0 + tiny);
        assert_eq!(f64::binary(Div, 1.0, 3.0), 1.0 / 3.0);
        assert!(f64::binary(Maximum, 1.0, f64::NAN).is_nan());
        assert_eq!(f64::binary(Minimum, -0.5, 2.0), -0.5);
        assert_eq!(f64::unary(UnaryOp::Sqrt, 2.0), std::f64::consts::SQRT_2);
        assert_eq!(f64::unary(UnaryOp::Relu, -0.0).to_bits(), 0.0f64.to_bits());
        assert_eq!(f64::binary_kernel(Pow), Some("pow_f64"));
        assert_eq!(f64::compare_kernel(CompareOp::Ge), "ge_f64");
        assert_eq!(
            f64::ulps_apart(1.0, f64::from_bits(1.0f64.to_bits() + 2)),
            2
        );
        assert_eq!(f64::ulps_apart(-0.0, 0.0), 0);
        assert_eq!(f64::from_i64(1 << 53), 9007199254740992.0);
    }

    #[test]
    fn same_treats_nans_alike() {
        assert!(f32::same(f32::NAN, -f32::NAN));
        assert!(!f32::same(0.0, -0.0));
    }
}
