//! The compute types of the CPU twins of the fused kernels (attention, classifier, layer
//! norm): f32, f16 and bf16 elements compute in f32, f64 in f64 (for gradient checks).

use crate::Element;

/// The compute type of the fused kernels' twins: f32, or f64 for f64.
pub trait Real:
    Copy
    + PartialOrd
    + std::fmt::Debug
    + Default
    + Send
    + Sync
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
    + sealed::Sealed
    + 'static
{
    /// The value of `x`, rounded.
    fn of_f64(x: f64) -> Self;
    /// The value as f64 (exact).
    fn to_f64(self) -> f64;
    /// `e^self`.
    fn exp(self) -> Self;
    /// `ln self`.
    fn ln(self) -> Self;
    /// The square root, correctly rounded.
    fn sqrt(self) -> Self;
    /// `self * b + c` with one rounding.
    fn fma(self, b: Self, c: Self) -> Self;
    /// Whether the value is finite.
    fn finite(self) -> bool;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

macro_rules! real {
    ($t:ty) => {
        impl Real for $t {
            #[inline]
            fn of_f64(x: f64) -> Self {
                x as $t
            }
            #[inline]
            fn to_f64(self) -> f64 {
                f64::from(self)
            }
            #[inline]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline]
            fn fma(self, b: Self, c: Self) -> Self {
                self.mul_add(b, c)
            }
            #[inline]
            fn finite(self) -> bool {
                <$t>::is_finite(self)
            }
        }
    };
}
real!(f32);
real!(f64);

/// An element type of the fused kernels' twins (classifier, layer norm): f32, f16, bf16
/// (computed in f32) and f64 (in f64, for gradient checks; the kernels take the other three).
pub trait FusedElement: Element + sealed::Sealed {
    /// The compute type.
    type Acc: Real;
    /// The value widened (exact).
    #[inline]
    fn acc(self) -> Self::Acc {
        Self::Acc::of_f64(self.to_f64())
    }
    /// `x` rounded once to the type.
    #[inline]
    fn of_acc(x: Self::Acc) -> Self {
        // f32 -> f64 is exact, so the value is rounded once.
        Self::from_f64(x.to_f64())
    }
}
impl FusedElement for f32 {
    type Acc = f32;
}
impl FusedElement for f64 {
    type Acc = f64;
}
impl FusedElement for half::f16 {
    type Acc = f32;
}
impl FusedElement for half::bf16 {
    type Acc = f32;
}
