//! The one conversion of a scalar (given as `f64`) to an element of a dtype, exact: every
//! scalar operand of every layer goes through [`Storage::scalar`].

use crate::{DType, Device, Error, Result, Storage};

/// Whether `value` is an element of `dtype` as given, with no saturation or wrap:
///
/// - integer dtypes: a finite whole number in the dtype's range, compared exactly
///   (`2^63` is not an `i64`, although `i64::MAX as f64` rounds to it);
/// - `bool`: 0 or 1;
/// - float dtypes: any value but a finite one beyond the dtype's largest finite magnitude
///   (it would become an infinity); NaN and the infinities are themselves; other values round
///   to nearest-even.
///
/// `converted` is the value after rounding to `dtype` (for floats), to catch overflow.
fn representable(value: f64, dtype: DType, converted: f64) -> bool {
    // Powers of two and the small bounds are exact in f64.
    let int_range = |lo: f64, hi_exclusive: f64| {
        value.is_finite() && value.fract() == 0.0 && value >= lo && value < hi_exclusive
    };
    match dtype {
        DType::Bool => value == 0.0 || value == 1.0,
        DType::U8 => int_range(0.0, 256.0),
        DType::I8 => int_range(-128.0, 128.0),
        DType::I16 => int_range(-32768.0, 32768.0),
        DType::I32 => int_range(-2_147_483_648.0, 2_147_483_648.0),
        DType::I64 => int_range(-9_223_372_036_854_775_808.0, 9_223_372_036_854_775_808.0),
        DType::F16 | DType::BF16 | DType::F32 => !value.is_finite() || converted.is_finite(),
        DType::F64 => true,
    }
}

impl Storage {
    /// `value` as a one-element CPU storage of `dtype`, exactly: [`Error::ScalarOutOfRange`]
    /// unless `dtype` represents it (see the rules above: integers must be whole and in range,
    /// bool 0 or 1, a finite float must not overflow to an infinity; floats round to nearest).
    pub fn scalar(value: f64, dtype: DType) -> Result<Storage> {
        let one = Storage::from_slice(&[value], Device::Cpu)?;
        // Integer checks come first, so the conversion below never saturates.
        if !dtype.is_float() && !representable(value, dtype, value) {
            return Err(Error::ScalarOutOfRange { value, dtype });
        }
        let out = one.to_dtype(dtype)?;
        if dtype.is_float() {
            let back = out.to_f64_vec()?.first().copied().unwrap_or(f64::NAN);
            if !representable(value, dtype, back) {
                return Err(Error::ScalarOutOfRange { value, dtype });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(value: f64, dtype: DType) -> bool {
        Storage::scalar(value, dtype).is_ok()
    }

    /// Exact ranges, no saturation, no silent infinity.
    #[test]
    fn scalars_convert_exactly() {
        let two63 = 9_223_372_036_854_775_808.0;
        assert!(!ok(two63, DType::I64));
        assert!(ok(-two63, DType::I64));
        assert!(ok(9_223_372_036_854_774_784.0, DType::I64)); // the largest f64 below 2^63
        assert!(!ok(2_147_483_648.0, DType::I32));
        assert!(ok(-2_147_483_648.0, DType::I32));
        assert!(!ok(300.0, DType::U8));
        assert!(!ok(-1.0, DType::U8));
        assert!(ok(255.0, DType::U8));
        assert!(!ok(1.7, DType::I32));
        assert!(!ok(f64::NAN, DType::I32));
        assert!(!ok(f64::INFINITY, DType::I64));
        assert!(!ok(2.0, DType::Bool));
        assert!(ok(-0.0, DType::Bool));
        assert!(!ok(1e6, DType::F16));
        assert!(ok(65504.0, DType::F16));
        assert!(ok(65519.0, DType::F16)); // rounds down to 65504
        assert!(!ok(65520.0, DType::F16)); // rounds to infinity
        assert!(ok(1e38, DType::BF16));
        assert!(!ok(1e39, DType::F32));
        assert!(ok(f64::INFINITY, DType::F16));
        assert!(ok(f64::NAN, DType::BF16));
        assert!(ok(f64::MAX, DType::F64));
        let s = Storage::scalar(-7.0, DType::I8).unwrap();
        assert_eq!(s.to_vec::<i8>().unwrap(), vec![-7]);
        assert_eq!(
            Storage::scalar(two63, DType::I64).err(),
            Some(Error::ScalarOutOfRange {
                value: two63,
                dtype: DType::I64
            })
        );
    }
}
