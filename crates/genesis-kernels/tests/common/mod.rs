//! Helpers shared by the kernels' GPU tests: element bytes to and from the device, and random
//! bit patterns of every elementwise type (NaN, infinities and subnormals included).
#![allow(dead_code)]

use genesis_kernels::Element;
use half::{bf16, f16};
use rand::Rng;
use rand::rngs::SmallRng;

/// The bytes of a slice of plain-old-data elements.
pub(crate) fn bytes_of<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: the element types used here are plain-old-data without padding.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
}

/// Elements from bytes (a whole number of them).
pub(crate) fn from_bytes<T: Copy + Default>(b: &[u8]) -> Vec<T> {
    let mut v = vec![T::default(); b.len() / size_of::<T>()];
    // SAFETY: `v` has exactly `b.len()` bytes of plain-old-data storage.
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), v.as_mut_ptr().cast::<u8>(), b.len()) };
    v
}

/// Random bit patterns of an elementwise type.
pub(crate) trait Random: Element + Default {
    fn random(rng: &mut SmallRng) -> Self;
    /// Magnitude below f32's smallest normal (where a 2-ulp difference in an intermediate
    /// `exp` or `pow` can move a result between 0 and a subnormal).
    fn tiny(self) -> bool {
        false
    }
}
impl Random for f32 {
    fn random(rng: &mut SmallRng) -> Self {
        f32::from_bits(rng.random())
    }
    fn tiny(self) -> bool {
        self.abs() < f32::MIN_POSITIVE
    }
}
impl Random for f64 {
    fn random(rng: &mut SmallRng) -> Self {
        f64::from_bits(rng.random())
    }
    fn tiny(self) -> bool {
        self.abs() < f64::MIN_POSITIVE
    }
}
impl Random for f16 {
    fn random(rng: &mut SmallRng) -> Self {
        f16::from_bits(rng.random())
    }
}
impl Random for bf16 {
    fn random(rng: &mut SmallRng) -> Self {
        bf16::from_bits(rng.random())
    }
    fn tiny(self) -> bool {
        self.to_f32().abs() < f32::MIN_POSITIVE
    }
}
impl Random for i32 {
    fn random(rng: &mut SmallRng) -> Self {
        rng.random()
    }
}
impl Random for i64 {
    fn random(rng: &mut SmallRng) -> Self {
        rng.random()
    }
}
