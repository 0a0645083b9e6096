use half::{bf16, f16};

mod sealed {
    pub trait Sealed {}
}

/// An element type the elementwise kernels support: `f32`, `f16`, `bf16`, `i32`, `i64`.
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
    /// `a + b` as the kernel computes it: round-to-nearest-even for floats (f16 and bf16 through
    /// f32, which is exact for one addition), wrapping for integers.
    fn add(a: Self, b: Self) -> Self;
    /// Whether two values are the same result: equal bits, or both NaN.
    fn same(a: Self, b: Self) -> bool;
}

macro_rules! element {
    ($t:ty, $name:literal, |$a:ident, $b:ident| $add:expr, |$x:ident, $y:ident| $same:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const NAME: &'static str = $name;
            const ADD_KERNEL: &'static str = concat!("add_", $name);
            const FILL_KERNEL: &'static str = concat!("fill_", $name);
            #[inline]
            fn add($a: Self, $b: Self) -> Self {
                $add
            }
            #[inline]
            fn same($x: Self, $y: Self) -> bool {
                $same
            }
        }
    };
}

element!(f32, "f32", |a, b| a + b, |x, y| x.to_bits() == y.to_bits()
    || (x.is_nan() && y.is_nan()));
element!(
    f16,
    "f16",
    |a, b| f16::from_f32(a.to_f32() + b.to_f32()),
    |x, y| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
);
element!(
    bf16,
    "bf16",
    |a, b| bf16::from_f32(a.to_f32() + b.to_f32()),
    |x, y| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
);
element!(i32, "i32", |a, b| a.wrapping_add(b), |x, y| x == y);
element!(i64, "i64", |a, b| a.wrapping_add(b), |x, y| x == y);

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
    fn same_treats_nans_alike() {
        assert!(f32::same(f32::NAN, -f32::NAN));
        assert!(!f32::same(0.0, -0.0));
    }
}
