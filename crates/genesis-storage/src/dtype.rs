use std::fmt;

use half::{bf16, f16};

/// The element type of a storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// `bool`, one byte, 0 or 1.
    Bool,
    /// `u8`.
    U8,
    /// `i8`.
    I8,
    /// `i16`.
    I16,
    /// `i32`.
    I32,
    /// `i64`.
    I64,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    BF16,
    /// IEEE binary32.
    F32,
    /// IEEE binary64.
    F64,
}

impl DType {
    /// Every dtype.
    pub const ALL: [DType; 10] = [
        DType::Bool,
        DType::U8,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    /// PyTorch-style name (`"float32"`).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }

    /// Whether this is a floating-point dtype.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

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
/// kernels support, and evaluates `$otherwise` for the rest. The one place a dtype becomes a
/// type for kernels.
#[macro_export]
#[doc(hidden)]
macro_rules! dispatch_kernel_dtype {
    ($dtype:expr, $T:ident => $body:expr, _ => $otherwise:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F16 => {
                type $T = half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            $crate::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::DType::I64 => {
                type $T = i64;
                $body
            }
            _ => $otherwise,
        }
    };
}

/// Runs `$body` with `$T` bound to the Rust type of `$dtype`, for every dtype with a
/// [`WithDType`] type (all but `Bool`).
#[macro_export]
#[doc(hidden)]
macro_rules! dispatch_dtype {
    ($dtype:expr, $T:ident => $body:expr, bool => $b:expr) => {
        match $dtype {
            $crate::DType::U8 => {
                type $T = u8;
                $body
            }
            $crate::DType::I8 => {
                type $T = i8;
                $body
            }
            $crate::DType::I16 => {
                type $T = i16;
                $body
            }
            $crate::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::DType::F16 => {
                type $T = half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::DType::Bool => $b,
        }
    };
}

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
            let size = dispatch_dtype!(d, T => size_of::<T>(), bool => 1);
            assert_eq!(size, d.size(), "{d}");
        }
    }
}
