//! [`DType`], the one element-type enum of every Genesis layer, and [`dispatch_dtype!`], the one
//! place a runtime dtype becomes a Rust type.

use std::fmt;

/// The element type of a storage, a kernel operand or a cast.
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
    /// Every dtype, in the order of the cast kernels' tables.
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

    /// The name used in kernel names (`"bf16"`).
    pub fn kernel_name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
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

/// The Rust type of a [`DType`] variant name (`Bool` is its byte, `u8`).
#[macro_export]
#[doc(hidden)]
macro_rules! dtype_rust_type {
    (Bool) => {
        u8
    };
    (U8) => {
        u8
    };
    (I8) => {
        i8
    };
    (I16) => {
        i16
    };
    (I32) => {
        i32
    };
    (I64) => {
        i64
    };
    (F16) => {
        $crate::__half::f16
    };
    (BF16) => {
        $crate::__half::bf16
    };
    (F32) => {
        f32
    };
    (F64) => {
        f64
    };
}

/// Runs `$body` with `$T` bound to the Rust type of `$dtype` when `$dtype` is one of the
/// listed variants, and evaluates `$otherwise` for the rest: the one place a runtime dtype
/// becomes a type. The lists name what each family of kernels supports, e.g.
/// `dispatch_dtype!(d, [F32, F16, BF16], T => run::<T>(), _ => Err(..))`.
#[macro_export]
macro_rules! dispatch_dtype {
    ($dtype:expr, [$($d:ident),+ $(,)?], $T:ident => $body:expr, _ => $otherwise:expr) => {{
        #[allow(unreachable_patterns)]
        match $dtype {
            $(
                $crate::DType::$d => {
                    type $T = $crate::dtype_rust_type!($d);
                    $body
                }
            )+
            _ => $otherwise,
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_rust_types() {
        for d in DType::ALL {
            let size = crate::dispatch_dtype!(
                d,
                [Bool, U8, I8, I16, I32, I64, F16, BF16, F32, F64],
                T => size_of::<T>(),
                _ => unreachable!()
            );
            assert_eq!(size, d.size(), "{d}");
        }
        let float = crate::dispatch_dtype!(DType::I32, [F32], _T => true, _ => false);
        assert!(!float);
    }
}
