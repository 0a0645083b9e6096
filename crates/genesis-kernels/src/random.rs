//! Counter-based random numbers: Philox4x32-10 (Salmon et al., "Parallel random numbers: as
//! easy as 1, 2, 3", SC'11) feeding uniform, normal and integer samplers, on the GPU
//! (`kernels/random.cu`) and on the CPU ([`sample`]) with bit-identical results.
//!
//! Element `i` of a call is a pure function of `(seed, offset, i)`: it draws from Philox block
//! `offset + i / P` ([`Sampler::per_block`] elements per block). A generator that advances its
//! offset by [`Sampler::blocks`] after each call never reuses a block, and a sequence of calls
//! gives the same values on every device. See `kernels/random.cu` for the exact mappings; the
//! normal sampler is Box-Muller (in f32 for f32, f16 and bf16, in f64 for f64) with Genesis's
//! own `ln`, `cos` and `sin` (series evaluated with the same IEEE operations on both sides, so
//! no math library differences creep in).

use crate::{Error, Result};
use half::{bf16, f16};

mod sealed {
    pub trait Sealed {}
}

/// What to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Sampler {
    /// Uniform in `[0, 1)` (float types): the top `p` bits of a 32-bit word times `2^-p`, `p`
    /// the type's significand width (f64: 53 bits of a 64-bit word).
    Uniform,
    /// Standard normal (float types), computed in f64 and rounded to nearest-even (f16 and
    /// bf16 through f32).
    Normal,
    /// Integers uniform in `[low, low + range)` (integer types), `range >= 1`: `low + w mod
    /// range` for a 64-bit word `w` (bias at most `range / 2^64`).
    Int {
        /// The smallest value.
        low: i64,
        /// How many values.
        range: u64,
    },
}

impl Sampler {
    /// Elements one Philox block feeds for element type `T`.
    pub fn per_block<T: RandomElement>(self) -> u64 {
        match self {
            Sampler::Uniform | Sampler::Normal if T::UNIFORM_BITS <= 32 => 4,
            _ => 2,
        }
    }

    /// Philox blocks a call of `n` elements consumes: the generator's offset advance.
    pub fn blocks<T: RandomElement>(self, n: usize) -> u64 {
        (n as u64).div_ceil(self.per_block::<T>())
    }

    fn name(self) -> &'static str {
        match self {
            Sampler::Uniform => "rand",
            Sampler::Normal => "randn",
            Sampler::Int { .. } => "randint",
        }
    }

    /// Whether `T` can hold this sampler's values (floats for uniform and normal, integers
    /// with a non-empty range for `Int` whose every value `T` holds).
    pub fn check<T: RandomElement>(self) -> Result<()> {
        let fits = |low: i64, range: u64| {
            let (min, max) = T::INT_RANGE;
            let last = i128::from(low) + i128::from(range) - 1;
            i128::from(low) >= min && last <= max
        };
        let ok = match self {
            Sampler::Uniform | Sampler::Normal => T::IS_FLOAT,
            Sampler::Int { low, range } => !T::IS_FLOAT && range >= 1 && fits(low, range),
        };
        if ok {
            Ok(())
        } else {
            Err(Error::Unsupported {
                op: self.name(),
                reason: match self {
                    Sampler::Int { range: 0, .. } => "an empty range".into(),
                    Sampler::Int { low, range } if !T::IS_FLOAT => format!(
                        "[{low}, {low} + {range}) is not inside the range of element type {}",
                        T::NAME
                    ),
                    _ => format!("element type {}", T::NAME),
                },
            })
        }
    }
}

/// Element types the random kernels write: f32, f16, bf16, f64 (uniform, normal) and i32, i64
/// (integers).
pub trait RandomElement: Copy + Send + Sync + 'static + sealed::Sealed {
    /// Short name used in kernel names (`"f32"`).
    const NAME: &'static str;
    /// Whether this is a floating-point type.
    const IS_FLOAT: bool;
    /// Bits of a uniform draw (the significand width; 0 for integers).
    const UNIFORM_BITS: u32;
    /// The smallest and largest values of an integer type (unused for floats).
    const INT_RANGE: (i128, i128);
    /// `x` rounded to nearest-even (f32, f64; f16 and bf16 through f32, as the kernels do, so
    /// that no library's f64-to-half conversion can differ) or truncated (integers).
    fn from_f64(x: f64) -> Self;
    /// The low bits of `x` as this type (two's complement).
    fn from_wrapping(x: u64) -> Self;
}

macro_rules! random_float {
    ($t:ty, $name:literal, $bits:literal, |$x:ident| $conv:expr) => {
        impl sealed::Sealed for $t {}
        impl RandomElement for $t {
            const NAME: &'static str = $name;
            const IS_FLOAT: bool = true;
            const UNIFORM_BITS: u32 = $bits;
            const INT_RANGE: (i128, i128) = (0, -1);
            fn from_f64($x: f64) -> Self {
                $conv
            }
            fn from_wrapping(x: u64) -> Self {
                Self::from_f64(x as f64)
            }
        }
    };
}

random_float!(f32, "f32", 24, |x| x as f32);
random_float!(f16, "f16", 11, |x| f16::from_f32(x as f32));
random_float!(bf16, "bf16", 8, |x| bf16::from_f32(x as f32));
random_float!(f64, "f64", 53, |x| x);

macro_rules! random_int {
    ($t:ty, $name:literal) => {
        impl sealed::Sealed for $t {}
        impl RandomElement for $t {
            const NAME: &'static str = $name;
            const IS_FLOAT: bool = false;
            const UNIFORM_BITS: u32 = 0;
            const INT_RANGE: (i128, i128) = (<$t>::MIN as i128, <$t>::MAX as i128);
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            fn from_wrapping(x: u64) -> Self {
                x as $t
            }
        }
    };
}

random_int!(i32, "i32");
random_int!(i64, "i64");

/// The four 32-bit words of Philox4x32-10 block `block` under `seed`: counter
/// `(lo(block), hi(block), 0, 0)`, key `(lo(seed), hi(seed))`.
pub fn philox4x32_10(block: u64, seed: u64) -> [u32; 4] {
    philox(
        [block as u32, (block >> 32) as u32, 0, 0],
        [seed as u32, (seed >> 32) as u32],
    )
}

fn philox(mut c: [u32; 4], mut k: [u32; 2]) -> [u32; 4] {
    for _ in 0..10 {
        let p0 = u64::from(0xD251_1F53u32) * u64::from(c[0]);
        let p1 = u64::from(0xCD9E_8D57u32) * u64::from(c[2]);
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
        k = [
            k[0].wrapping_add(0x9E37_79B9),
            k[1].wrapping_add(0xBB67_AE85),
        ];
    }
    c
}

fn u64_of(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | (u64::from(hi) << 32)
}

/// 2^-53.
const INV_2_53: f64 = 1.110_223_024_625_156_5e-16;

/// `ln x` for `x` in `(0, 1]`, the same operations as `genesis_ln` in `random.cu`.
fn ln(x: f64) -> f64 {
    let bits = x.to_bits();
    let mut e = ((bits >> 52) & 0x7ff) as i32 - 1023;
    let mut m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
    if m > std::f64::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let mut p = 1.0 / 25.0;
    for k in (1..=23).rev().step_by(2) {
        p = p * s2 + 1.0 / f64::from(k);
    }
    let lnm = 2.0 * s * p;
    f64::from(e) * std::f64::consts::LN_2 + lnm
}

/// `(cos 2πu, sin 2πu)` for `u` in `[0, 1)`, the same operations as `genesis_cos_sin`.
fn cos_sin(u: f64) -> (f64, f64) {
    let t = u * 4.0;
    let q = t.floor();
    let phi = (t - q) * std::f64::consts::FRAC_PI_2;
    let p2 = phi * phi;
    let (mut cs, mut sn) = (1.0f64, 1.0f64);
    for k in (2..=22).rev().step_by(2) {
        cs = 1.0 + cs * (-p2 / f64::from(k * (k - 1)));
    }
    for k in (3..=21).rev().step_by(2) {
        sn = 1.0 + sn * (-p2 / f64::from(k * (k - 1)));
    }
    sn *= phi;
    match q as i32 {
        0 => (cs, sn),
        1 => (-sn, cs),
        2 => (-cs, -sn),
        _ => (sn, -cs),
    }
}

/// `ln x` for `x` in (0, 1], in f32: the kernels' `genesis_lnf`, operation for operation
/// (`mul_add` is the kernels' fused multiply-add: one rounding, on any processor).
#[inline(always)]
fn ln_f32(x: f32) -> f32 {
    let bits = x.to_bits();
    let mut e = ((bits >> 23) & 0xff) as i32 - 127;
    let mut m = f32::from_bits((bits & 0x007f_ffff) | 0x3f80_0000);
    if m > f32::from_bits(0x3fb5_04f3) {
        m *= 0.5;
        e += 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let mut p = 1.0f32 / 9.0;
    for k in [7.0f32, 5.0, 3.0, 1.0] {
        p = p.mul_add(s2, 1.0 / k);
    }
    let lnm = 2.0 * s * p;
    let ef = e as f32;
    ef.mul_add(
        f32::from_bits(0x3f31_7200),
        ef.mul_add(f32::from_bits(0x35bf_be8e), lnm),
    )
}

/// `(cos 2 pi u, sin 2 pi u)` in f32: the kernels' `genesis_cos_sinf`.
#[inline(always)]
fn cos_sin_f32(u: f32) -> (f32, f32) {
    let t = u * 8.0;
    let q = t.floor();
    let qi = q as i32;
    let mut f = t - q;
    if qi & 1 == 1 {
        f = 1.0 - f;
    }
    let phi = f * f32::from_bits(0x3f49_0fdb);
    let p2 = phi * phi;
    let mut cs = 1.0f32 / 3_628_800.0;
    for c in [-1.0f32 / 40320.0, 1.0 / 720.0, -1.0 / 24.0, 0.5] {
        cs = cs.mul_add(p2, c);
    }
    cs = cs.mul_add(-p2, 1.0);
    let mut sn = -1.0f32 / 39_916_800.0;
    for c in [
        1.0f32 / 362_880.0,
        -1.0 / 5040.0,
        1.0 / 120.0,
        -1.0 / 6.0,
        1.0,
    ] {
        sn = sn.mul_add(p2, c);
    }
    sn *= phi;
    match qi {
        0 => (cs, sn),
        1 => (sn, cs),
        2 => (-sn, cs),
        3 => (-cs, sn),
        4 => (-cs, -sn),
        5 => (-sn, -cs),
        6 => (sn, -cs),
        _ => (cs, -sn),
    }
}

/// Two f32 normals from two words (the kernels' `normals_f32`).
#[inline(always)]
fn normals_f32(a: u32, b: u32) -> [f32; 2] {
    let inv24 = 1.0f32 / 16_777_216.0;
    let u1 = ((a >> 8) + 1) as f32 * inv24;
    let u2 = (b >> 8) as f32 * inv24;
    let r = (-2.0 * ln_f32(u1)).sqrt();
    let (c, s) = cos_sin_f32(u2);
    [r * c, r * s]
}

/// The f32 normals of blocks `offset ..` into `out`, four a block.
#[inline(always)]
fn fill_normals_f32<T: RandomElement>(seed: u64, offset: u64, out: &mut [T]) {
    for (j, chunk) in out.chunks_mut(4).enumerate() {
        let w = philox4x32_10(offset.wrapping_add(j as u64), seed);
        let [z0, z1] = normals_f32(w[0], w[1]);
        let [z2, z3] = normals_f32(w[2], w[3]);
        for (o, z) in chunk.iter_mut().zip([z0, z1, z2, z3]) {
            // f32 to f32 is exact, to f16 and bf16 one rounding (the kernels' from_f32).
            *o = T::from_f64(f64::from(z));
        }
    }
}

/// [`fill_normals_f32`] compiled with FMA instructions (the same values: `mul_add` rounds
/// once either way; without them it is a library call).
///
/// # Safety
///
/// The processor has FMA (checked by the caller).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn fill_normals_f32_fma<T: RandomElement>(seed: u64, offset: u64, out: &mut [T]) {
    fill_normals_f32(seed, offset, out);
}

/// f32, f16 or bf16 normals: with FMA instructions where the processor has them.
fn normals_f32_into<T: RandomElement>(seed: u64, offset: u64, out: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the processor has FMA.
        unsafe { fill_normals_f32_fma(seed, offset, out) };
        return;
    }
    fill_normals_f32(seed, offset, out);
}

fn normals(block: u64, seed: u64) -> (f64, f64) {
    let w = philox4x32_10(block, seed);
    let u1 = ((u64_of(w[0], w[1]) >> 11) + 1) as f64 * INV_2_53;
    let u2 = (u64_of(w[2], w[3]) >> 11) as f64 * INV_2_53;
    let r = (-2.0 * ln(u1)).sqrt();
    let (c, s) = cos_sin(u2);
    (r * c, r * s)
}

/// The CPU twin of the random kernels: fills `out` with elements `0..out.len()` of the call
/// `(sampler, seed, offset)`.
pub fn sample<T: RandomElement>(
    sampler: Sampler,
    seed: u64,
    offset: u64,
    out: &mut [T],
) -> Result<()> {
    sampler.check::<T>()?;
    match sampler {
        Sampler::Normal if T::UNIFORM_BITS <= 32 => normals_f32_into(seed, offset, out),
        Sampler::Uniform if T::UNIFORM_BITS <= 32 => {
            let p = T::UNIFORM_BITS;
            let scale = 1.0 / f64::from(1u32 << p);
            for (j, chunk) in out.chunks_mut(4).enumerate() {
                // Wrapping, as the kernel's `uint64_t` addition: the exact twin.
                let w = philox4x32_10(offset.wrapping_add(j as u64), seed);
                for (o, &word) in chunk.iter_mut().zip(&w) {
                    *o = T::from_f64(f64::from(word >> (32 - p)) * scale);
                }
            }
        }
        _ => {
            for (j, chunk) in out.chunks_mut(2).enumerate() {
                let block = offset.wrapping_add(j as u64);
                let pair: [T; 2] = match sampler {
                    Sampler::Normal => {
                        let (z0, z1) = normals(block, seed);
                        [T::from_f64(z0), T::from_f64(z1)]
                    }
                    Sampler::Int { low, range } => {
                        let w = philox4x32_10(block, seed);
                        let v = |lo, hi| {
                            T::from_wrapping((low as u64).wrapping_add(u64_of(lo, hi) % range))
                        };
                        [v(w[0], w[1]), v(w[2], w[3])]
                    }
                    Sampler::Uniform => {
                        let w = philox4x32_10(block, seed);
                        let v = |lo, hi| T::from_f64((u64_of(lo, hi) >> 11) as f64 * INV_2_53);
                        [v(w[0], w[1]), v(w[2], w[3])]
                    }
                };
                for (o, v) in chunk.iter_mut().zip(pair) {
                    *o = v;
                }
            }
        }
    }
    Ok(())
}

/// The name of the kernel of `sampler` for `T`.
#[cfg(feature = "cuda")]
fn kernel_name<T: RandomElement>(sampler: Sampler) -> Option<&'static str> {
    Some(match (sampler, T::NAME) {
        (Sampler::Uniform, "f32") => "rand_f32",
        (Sampler::Uniform, "f16") => "rand_f16",
        (Sampler::Uniform, "bf16") => "rand_bf16",
        (Sampler::Uniform, "f64") => "rand_f64",
        (Sampler::Normal, "f32") => "randn_f32",
        (Sampler::Normal, "f16") => "randn_f16",
        (Sampler::Normal, "bf16") => "randn_bf16",
        (Sampler::Normal, "f64") => "randn_f64",
        (Sampler::Int { .. }, "i32") => "randint_i32",
        (Sampler::Int { .. }, "i64") => "randint_i64",
        _ => return None,
    })
}

/// Queues the random kernel of `sampler` filling `out`: the same values as [`sample`] with the
/// same `(seed, offset)`.
#[cfg(feature = "cuda")]
pub fn gpu_sample<T: RandomElement>(
    stream: &genesis_cuda::Stream,
    sampler: Sampler,
    seed: u64,
    offset: u64,
    out: genesis_cuda::DeviceSpanMut<'_, T>,
) -> Result<()> {
    let (n, out) = (out.len(), out.addr());
    use genesis_cuda::{Kernel, LaunchConfig};
    use std::ffi::c_void;

    sampler.check::<T>()?;
    let name = kernel_name::<T>(sampler).ok_or_else(|| Error::Unsupported {
        op: sampler.name(),
        reason: format!("element type {}", T::NAME),
    })?;
    if n == 0 {
        return Ok(());
    }
    let kernel = Kernel::get(stream.context(), &crate::images::RANDOM, name)?;
    let threads = 256u64;
    let cap = u64::from(stream.context().multiprocessors().max(1)) * 16;
    let grid = sampler.blocks::<T>(n).div_ceil(threads).clamp(1, cap) as u32;
    let (mut out, mut n64, mut seed, mut offset) = (out, n as u64, seed, offset);
    let (mut low, mut range) = match sampler {
        Sampler::Int { low, range } => (low, range),
        _ => (0, 1),
    };
    // floor(2^64 / range) for the kernel's remainder (0 for a range of one value).
    let mut magic = if range >= 2 {
        ((1u128 << 64) / u128::from(range)) as u64
    } else {
        0
    };
    let mut params: [*mut c_void; 7] = [
        (&raw mut out).cast(),
        (&raw mut n64).cast(),
        (&raw mut seed).cast(),
        (&raw mut offset).cast(),
        (&raw mut low).cast(),
        (&raw mut range).cast(),
        (&raw mut magic).cast(),
    ];
    let count = if matches!(sampler, Sampler::Int { .. }) {
        7
    } else {
        4
    };
    // SAFETY: the first `count` parameters match the kernel's signature
    // (`T*, uint64_t n, uint64_t seed, uint64_t offset[, int64_t low, uint64_t range,
    // uint64_t magic]`); the span holds the `n` elements written.
    unsafe {
        kernel.launch(
            stream,
            LaunchConfig::linear(grid, threads as u32),
            &mut params[..count],
        )?
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The kernels' remainder (`mod_range` in `kernels/random.cu`), written out: a
    /// multiply-high by floor(2^64 / range) and at most two corrections give `x % range`.
    #[test]
    fn the_kernels_remainder_is_exact() {
        let rem = |x: u64, range: u64| -> u64 {
            if range == 1 {
                return 0;
            }
            let magic = ((1u128 << 64) / u128::from(range)) as u64;
            let q = ((u128::from(x) * u128::from(magic)) >> 64) as u64;
            let mut r = x.wrapping_sub(q.wrapping_mul(range));
            for _ in 0..2 {
                if r >= range {
                    r -= range;
                }
            }
            r
        };
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let ranges = [
            1u64,
            2,
            3,
            7,
            10,
            1000,
            1 << 31,
            (1 << 32) + 5,
            (1 << 62) + 7,
            u64::MAX,
        ];
        for &range in &ranges {
            for extra in [0u64, 1, range - 1, u64::MAX, u64::MAX - range] {
                assert_eq!(rem(extra, range), extra % range, "{extra} mod {range}");
            }
            for _ in 0..20_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                assert_eq!(rem(x, range), x % range, "{x} mod {range}");
            }
        }
    }

    use super::*;

    /// Known-answer vectors of Random123 (`kat_vectors`, philox4x32_10).
    #[test]
    fn philox_matches_random123_known_answers() {
        assert_eq!(
            philox([0; 4], [0; 2]),
            [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]
        );
        assert_eq!(
            philox([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]
        );
        assert_eq!(
            philox(
                [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
                [0xa409_3822, 0x299f_31d0]
            ),
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1]
        );
    }

    #[test]
    fn own_ln_and_cos_sin_are_accurate() {
        for i in 1..=10_000u32 {
            let x = f64::from(i) / 10_000.0;
            assert!(
                (ln(x) - x.ln()).abs() <= 4.0 * f64::EPSILON * x.ln().abs().max(1e-300) + 1e-300,
                "ln {x}"
            );
            let u = (f64::from(i) - 1.0) / 10_000.0;
            let (c, s) = cos_sin(u);
            let a = 2.0 * std::f64::consts::PI * u;
            assert!(
                (c - a.cos()).abs() < 1e-15 && (s - a.sin()).abs() < 1e-15,
                "cos/sin {u}"
            );
        }
    }

    /// The f32 series against f64's `ln`, `cos` and `sin` over every u1 and u2 the f32 sampler
    /// can draw near the ends and a sweep between: within a few f32 ulps (absolute for cos/sin,
    /// whose values feed `r * c`).
    #[test]
    fn f32_ln_and_cos_sin_are_accurate() {
        let inv24 = 1.0f64 / 16_777_216.0;
        let draws = (1..=4096u32)
            .chain((0..4096).map(|i| (1 << 24) - i))
            .chain((1..=1 << 24).step_by(4093));
        for k in draws {
            let x = f64::from(k) * inv24;
            let got = f64::from(ln_f32(x as f32));
            assert!(
                (got - x.ln()).abs() <= 3e-7 * x.ln().abs() + 1e-7,
                "ln {x}: {got} against {}",
                x.ln()
            );
            let u = f64::from(k - 1) * inv24;
            let (c, s) = cos_sin_f32(u as f32);
            let a = 2.0 * std::f64::consts::PI * u;
            assert!(
                (f64::from(c) - a.cos()).abs() < 3e-7 && (f64::from(s) - a.sin()).abs() < 3e-7,
                "cos/sin {u}"
            );
        }
    }

    /// The f32 normals' moments, their bound, and f16 and bf16 as the f32 values rounded once.
    #[test]
    fn f32_normals_moments_and_narrow_types() {
        let mut z = vec![0f32; 400_003];
        sample(Sampler::Normal, 9, 4, &mut z).unwrap();
        let n = z.len() as f64;
        let mean = z.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        let var = z
            .iter()
            .map(|&x| (f64::from(x) - mean).powi(2))
            .sum::<f64>()
            / n;
        let kurt = z
            .iter()
            .map(|&x| (f64::from(x) - mean).powi(4))
            .sum::<f64>()
            / n
            / (var * var);
        assert!(mean.abs() < 0.01, "{mean}");
        assert!((var - 1.0).abs() < 0.01, "{var}");
        assert!((kurt - 3.0).abs() < 0.05, "{kurt}");
        assert!(z.iter().all(|x| x.abs() <= 5.8));
        let mut h = vec![f16::ZERO; 1001];
        let mut b = vec![bf16::ZERO; 1001];
        sample(Sampler::Normal, 9, 4, &mut h).unwrap();
        sample(Sampler::Normal, 9, 4, &mut b).unwrap();
        for i in 0..1001 {
            assert_eq!(h[i], f16::from_f32(z[i]));
            assert_eq!(b[i], bf16::from_f32(z[i]));
        }
        // The FMA instructions' values are the library's `fmaf`'s.
        let mut plain = vec![0f32; 4099];
        fill_normals_f32(9, 4, &mut plain);
        assert!(
            plain
                .iter()
                .zip(&z)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
        // Four values a block: the second part of a call equals a call at the advanced offset.
        let mut tail = vec![0f32; 1003];
        sample(Sampler::Normal, 9, 4 + 250, &mut tail).unwrap();
        assert_eq!(&z[1000..2003], &tail[..]);
    }

    #[test]
    fn uniform_in_unit_interval_and_offsets_compose() {
        let mut a = vec![0f32; 1001];
        sample(Sampler::Uniform, 7, 0, &mut a).unwrap();
        assert!(a.iter().all(|&x| (0.0..1.0).contains(&x)));
        let mean = a.iter().map(|&x| f64::from(x)).sum::<f64>() / a.len() as f64;
        assert!((mean - 0.5).abs() < 0.05, "{mean}");
        // The second half of a call equals a call at the advanced offset.
        let mut b = vec![0f32; 1001 - 500];
        sample(Sampler::Uniform, 7, 125, &mut b).unwrap();
        assert_eq!(&a[500..], &b[..]);
        let mut h = vec![f16::ZERO; 4096];
        sample(Sampler::Uniform, 1, 0, &mut h).unwrap();
        assert!(h.iter().all(|x| (0.0..1.0).contains(&x.to_f32())));
        let mut d = vec![0f64; 3];
        sample(Sampler::Uniform, 1, 0, &mut d).unwrap();
        assert!(d.iter().all(|x| (0.0..1.0).contains(x)));
    }

    #[test]
    fn normal_moments_and_integer_ranges() {
        let mut z = vec![0f64; 200_001];
        sample(Sampler::Normal, 3, 0, &mut z).unwrap();
        let n = z.len() as f64;
        let mean = z.iter().sum::<f64>() / n;
        let var = z.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
        assert!(
            mean.abs() < 0.01 && (var - 1.0).abs() < 0.01,
            "{mean} {var}"
        );
        let mut k = vec![0i32; 10_000];
        sample(Sampler::Int { low: -3, range: 7 }, 5, 0, &mut k).unwrap();
        assert!(k.iter().all(|&v| (-3..4).contains(&v)));
        for v in -3..4 {
            assert!(
                k.iter().filter(|&&x| x == v).count() > 1200,
                "value {v} rare"
            );
        }
        assert!(sample(Sampler::Int { low: 0, range: 0 }, 5, 0, &mut k).is_err());
        assert!(sample(Sampler::Normal, 5, 0, &mut k).is_err());
        assert!(sample(Sampler::Int { low: 0, range: 2 }, 5, 0, &mut z).is_err());
    }
}
