//! The float classes, `isnan`, `isinf`, `isfinite` (bool bytes out), and `nan_to_num` (NaN and
//! the infinities replaced by values of the type): one pass each over the floating types,
//! `kernels/elementwise.cu` on the GPU, [`classify`] and [`nan_to_num`] here on the CPU (bit
//! for bit the same: comparisons and selections only).

use crate::{Element, Error, Result};

/// A class test of float elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FloatClass {
    /// NaN.
    IsNan,
    /// +inf or -inf.
    IsInf,
    /// Neither NaN nor an infinity.
    IsFinite,
}

impl FloatClass {
    /// The test's name (`"isnan"`), PyTorch's, also the prefix of its kernels.
    pub const fn name(self) -> &'static str {
        match self {
            FloatClass::IsNan => "isnan",
            FloatClass::IsInf => "isinf",
            FloatClass::IsFinite => "isfinite",
        }
    }

    /// The test of one value (as f64: exact for every float type).
    pub fn test(self, x: f64) -> bool {
        match self {
            FloatClass::IsNan => x.is_nan(),
            FloatClass::IsInf => x.is_infinite(),
            FloatClass::IsFinite => x.is_finite(),
        }
    }
}

fn float_only<T: Element>(op: &'static str) -> Result<()> {
    if T::IS_FLOAT {
        Ok(())
    } else {
        Err(Error::Unsupported {
            op,
            reason: format!("element type {}", T::NAME),
        })
    }
}

fn same_len(op: &'static str, expected: usize, got: usize) -> Result<()> {
    if expected == got {
        Ok(())
    } else {
        Err(Error::LengthMismatch { op, expected, got })
    }
}

/// `out[i] = op(a[i])` as 0 or 1 (float types only).
pub fn classify<T: Element>(op: FloatClass, a: &[T], out: &mut [u8]) -> Result<()> {
    float_only::<T>(op.name())?;
    same_len(op.name(), a.len(), out.len())?;
    for (o, &x) in out.iter_mut().zip(a) {
        *o = u8::from(op.test(x.to_f64()));
    }
    Ok(())
}

/// `out[i] = a[i]` with NaN replaced by `nan`, +inf by `posinf` and -inf by `neginf` (float
/// types only).
pub fn nan_to_num<T: Element>(a: &[T], [nan, posinf, neginf]: [T; 3], out: &mut [T]) -> Result<()> {
    float_only::<T>("nan_to_num")?;
    same_len("nan_to_num", a.len(), out.len())?;
    for (o, &x) in out.iter_mut().zip(a) {
        let f = x.to_f64();
        *o = if f.is_nan() {
            nan
        } else if f == f64::INFINITY {
            posinf
        } else if f == f64::NEG_INFINITY {
            neginf
        } else {
            x
        };
    }
    Ok(())
}

#[cfg(feature = "cuda")]
mod gpu {
    use std::ffi::c_void;

    use genesis_cuda::{DeviceSpan, DeviceSpanMut, Kernel, Stream};

    use super::{FloatClass, float_only, same_len};
    use crate::{Element, Result, images};

    fn kernel_name(prefix: &str, t: &str) -> &'static str {
        match (prefix, t) {
            ("isnan", "f64") => "isnan_f64",
            ("isnan", "f32") => "isnan_f32",
            ("isnan", "f16") => "isnan_f16",
            ("isnan", "bf16") => "isnan_bf16",
            ("isinf", "f64") => "isinf_f64",
            ("isinf", "f32") => "isinf_f32",
            ("isinf", "f16") => "isinf_f16",
            ("isinf", "bf16") => "isinf_bf16",
            ("isfinite", "f64") => "isfinite_f64",
            ("isfinite", "f32") => "isfinite_f32",
            ("isfinite", "f16") => "isfinite_f16",
            ("isfinite", "bf16") => "isfinite_bf16",
            (_, "f64") => "nan_to_num_f64",
            (_, "f32") => "nan_to_num_f32",
            (_, "f16") => "nan_to_num_f16",
            _ => "nan_to_num_bf16",
        }
    }

    /// Queues `out[i] = op(a[i])` (0 or 1) on `stream` (float types only).
    pub fn gpu_classify<T: Element>(
        stream: &Stream,
        op: FloatClass,
        a: DeviceSpan<'_, T>,
        out: DeviceSpanMut<'_, u8>,
    ) -> Result<()> {
        float_only::<T>(op.name())?;
        same_len(op.name(), a.len(), out.len())?;
        let n = a.len();
        if n == 0 {
            return Ok(());
        }
        let kernel = Kernel::get(
            stream.context(),
            &images::ELEMENTWISE,
            kernel_name(op.name(), T::NAME),
        )?;
        let (mut pa, mut po) = (a.addr(), out.addr());
        let flags_per_vector = (16 / size_of::<T>()) as u64;
        let vec_ok = pa % 16 == 0 && po % flags_per_vector == 0;
        let config = crate::gpu::elementwise_config(stream, n, size_of::<T>(), vec_ok);
        let (mut n64, mut v) = (n as u64, i32::from(vec_ok));
        let mut params: [*mut c_void; 4] = [
            (&raw mut pa).cast(),
            (&raw mut po).cast(),
            (&raw mut n64).cast(),
            (&raw mut v).cast(),
        ];
        // SAFETY: the parameters match `<op>_<T>(const T*, uint8_t*, uint64_t, int)`; both
        // spans hold `n` elements (checked).
        unsafe { kernel.launch(stream, config, &mut params)? };
        Ok(())
    }

    /// Queues [`super::nan_to_num`] on `stream` (float types only).
    pub fn gpu_nan_to_num<T: Element>(
        stream: &Stream,
        a: DeviceSpan<'_, T>,
        values: [T; 3],
        out: DeviceSpanMut<'_, T>,
    ) -> Result<()> {
        float_only::<T>("nan_to_num")?;
        same_len("nan_to_num", a.len(), out.len())?;
        let n = a.len();
        if n == 0 {
            return Ok(());
        }
        let kernel = Kernel::get(
            stream.context(),
            &images::ELEMENTWISE,
            kernel_name("nan_to_num", T::NAME),
        )?;
        let (mut pa, mut po) = (a.addr(), out.addr());
        let vec_ok = pa % 16 == 0 && po % 16 == 0;
        let config = crate::gpu::elementwise_config(stream, n, size_of::<T>(), vec_ok);
        let (mut n64, mut v) = (n as u64, i32::from(vec_ok));
        let [mut nan, mut pos, mut neg] = values;
        let mut params: [*mut c_void; 7] = [
            (&raw mut pa).cast(),
            (&raw mut po).cast(),
            (&raw mut n64).cast(),
            (&raw mut v).cast(),
            (&raw mut nan).cast(),
            (&raw mut pos).cast(),
            (&raw mut neg).cast(),
        ];
        // SAFETY: the parameters match `nan_to_num_<T>(const T*, T*, uint64_t, int, T, T, T)`;
        // both spans hold `n` elements (checked).
        unsafe { kernel.launch(stream, config, &mut params)? };
        Ok(())
    }
}

#[cfg(feature = "cuda")]
pub use gpu::{gpu_classify, gpu_nan_to_num};

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    #[test]
    fn classes_and_replacements() {
        let a = [f32::NAN, f32::INFINITY, -f32::INFINITY, -0.0, 2.5];
        let mut out = [9u8; 5];
        classify(FloatClass::IsNan, &a, &mut out).unwrap();
        assert_eq!(out, [1, 0, 0, 0, 0]);
        classify(FloatClass::IsInf, &a, &mut out).unwrap();
        assert_eq!(out, [0, 1, 1, 0, 0]);
        classify(FloatClass::IsFinite, &a, &mut out).unwrap();
        assert_eq!(out, [0, 0, 0, 1, 1]);
        let mut y = [0f32; 5];
        nan_to_num(&a, [7.0, 8.0, 9.0], &mut y).unwrap();
        assert_eq!(y, [7.0, 8.0, 9.0, -0.0, 2.5]);
        assert_eq!(y[3].to_bits(), (-0.0f32).to_bits());
        let h = [f16::NAN, f16::NEG_INFINITY];
        let mut hy = [f16::ZERO; 2];
        nan_to_num(&h, [f16::ONE, f16::MAX, f16::MIN], &mut hy).unwrap();
        assert_eq!(hy, [f16::ONE, f16::MIN]);
        assert!(classify(FloatClass::IsNan, &[1i32], &mut [0u8]).is_err());
        assert!(classify(FloatClass::IsNan, &[1f32; 2], &mut [0u8]).is_err());
    }
}
