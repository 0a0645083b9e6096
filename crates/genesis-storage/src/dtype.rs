use std::fmt;

use half::{bf16, f16};

pub use genesis_kernels::DType;

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that is the element type of a [`DType`].
///
/// # Safety of the byte views
///
/// Implementors are plain-old-data with no padding and no invalid bit patterns, so a storage's
/// bytes can be viewed as a slice of them. The trait is sealed for that reason.
pub trait WithDType:
    Copy + Send + Sync + fmt::Debug + PartialEq + 'static + sealed::Sealed
{
    /// The matching dtype.
    const DTYPE: DType;
    /// Converts to `f64` (exactly, except `i64` beyond 2^53), for display and references.
    fn to_f64(self) -> f64;
}

macro_rules! with_dtype {
    ($t:ty, $d:ident, |$x:ident| $to:expr) => {
        impl sealed::Sealed for $t {}
        impl WithDType for $t {
            const DTYPE: DType = DType::$d;
            #[inline]
            fn to_f64(self) -> f64 {
                let $x = self;
                $to
            }
        }
    };
}

with_dtype!(u8, U8, |x| f64::from(x));
with_dtype!(i8, I8, |x| f64::from(x));
with_dtype!(i16, I16, |x| f64::from(x));
with_dtype!(i32, I32, |x| f64::from(x));
with_dtype!(i64, I64, |x| x as f64);
with_dtype!(f16, F16, |x| x.to_f64());
with_dtype!(bf16, BF16, |x| x.to_f64());
with_dtype!(f32, F32, |x| f64::from(x));
with_dtype!(f64, F64, |x| x);

/// Runs `$body` with `$T` bound to the Rust type of `$dtype` for the dtypes the elementwise
/// kernels support (f64, f32, f16, bf16, i32, i64), and evaluates `$otherwise` for the rest
/// (through [`genesis_kernels::dispatch_dtype!`]).
macro_rules! dispatch_kernel_dtype {
    ($dtype:expr, $T:ident => $body:expr, _ => $otherwise:expr) => {
        genesis_kernels::dispatch_dtype!($dtype, [F32, F16, BF16, I32, I64, F64], $T => $body, _ => $otherwise)
    };
}
pub(crate) use dispatch_kernel_dtype;

/// Runs `$body` with `$T` bound to the Rust type of the rows' dtype and `$O` to a second
/// operand's (`$types`: the two dtypes; a layer norm's output or output gradient): the same
/// type for each of `[$($same),*]`, or f16 or bf16 for f32 rows; evaluates `$otherwise` for
/// the rest.
macro_rules! dispatch_narrowing {
    ($types:expr, [$($same:ident),*], ($T:ident, $O:ident) => $body:expr, _ => $otherwise:expr) => {{
        use $crate::DType;
        match $types {
            (DType::F32, DType::F16) => {
                type $T = f32;
                type $O = half::f16;
                $body
            }
            (DType::F32, DType::BF16) => {
                type $T = f32;
                type $O = half::bf16;
                $body
            }
            (rows, other) if rows == other => {
                genesis_kernels::dispatch_dtype!(rows, [$($same),*], $T => {
                    type $O = $T;
                    $body
                }, _ => $otherwise)
            }
            _ => $otherwise,
        }
    }};
}
pub(crate) use dispatch_narrowing;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_rust_types() {
        assert_eq!(DType::F32.size(), size_of::<f32>());
        assert_eq!(DType::BF16.size(), size_of::<bf16>());
        assert_eq!(DType::I64.size(), size_of::<i64>());
        assert_eq!(<f16 as WithDType>::DTYPE, DType::F16);
        for d in DType::ALL {
            let size = genesis_kernels::dispatch_dtype!(
                d,
                [U8, I8, I16, I32, I64, F16, BF16, F32, F64],
                T => size_of::<T>(),
                _ => 1
            );
            assert_eq!(size, d.size(), "{d}");
        }
    }
}
