//! Gradient kernels (`kernels/grad.cu`) of ops whose composed backward would take several
//! passes and temporaries: activations ([`act_grad`]: `dx = g f'(x)`) and softmax or
//! log_softmax along rows ([`softmax_grad`]). f32, f16 and bf16 compute in f32 and round
//! once; f64 in f64. The functions here are the CPU twins: the softmax gradient bit for bit
//! (but for `e^y` of log_softmax, CUDA's `expf` against Rust's), the activations within a few
//! ulp of their terms (CUDA's `erff`, `tanhf`, `expf` against Rust's).

use crate::{Element, Error, Result, float_only, same_len};

/// An activation whose gradient the kernels compute in one pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActGrad {
    /// GELU with the exact (erf) form.
    Gelu,
    /// GELU with the tanh approximation.
    GeluTanh,
    /// SiLU (`x sigmoid(x)`).
    Silu,
}

impl ActGrad {
    /// `f'(x)` as the kernels compute it.
    fn d<A: Real>(self, x: A) -> A {
        let c = A::c;
        match self {
            ActGrad::Gelu => {
                let cdf = c(0.5) * (c(1.0) + (x * c(std::f64::consts::FRAC_1_SQRT_2)).erf());
                let pdf = (c(-0.5) * (x * x)).exp() * c(0.398_942_280_401_432_7);
                cdf + x * pdf
            }
            ActGrad::GeluTanh => {
                // s = (1 + tanh u) / 2 = sigmoid(2u): f' = s + 2 x s (1 - s) k (1 + 3 c x^2),
                // 1 - s as e s where s is near 1 (no cancellation for either sign of x).
                let (k, cc) = (c(0.797_884_560_802_865_4), c(0.044715));
                let x2 = x * x;
                let u = k * (x + cc * (x2 * x));
                let e = (c(-2.0) * u).exp();
                let s = c(1.0) / (c(1.0) + e);
                let oms = if s < c(0.5) { c(1.0) - s } else { e * s };
                s + ((c(2.0) * x) * (s * oms)) * (k * (c(1.0) + (c(3.0) * cc) * x2))
            }
            ActGrad::Silu => {
                let s = c(1.0) / (c(1.0) + (-x).exp());
                s * (c(1.0) + x * (c(1.0) - s))
            }
        }
    }
}

/// The compute type: f32, or f64 for f64.
trait Real:
    Copy
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
{
    fn c(x: f64) -> Self;
    fn of<T: Element>(x: T) -> Self;
    fn to<T: Element>(self) -> T;
    fn erf(self) -> Self;
    fn exp(self) -> Self;
    fn fma(self, b: Self, c: Self) -> Self;
}

macro_rules! real {
    ($t:ty, $erf:path) => {
        impl Real for $t {
            fn c(x: f64) -> Self {
                x as $t
            }
            fn of<T: Element>(x: T) -> Self {
                x.to_f64() as $t
            }
            fn to<T: Element>(self) -> T {
                T::from_f64(f64::from(self))
            }
            fn erf(self) -> Self {
                $erf(self)
            }
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            fn fma(self, b: Self, c: Self) -> Self {
                self.mul_add(b, c)
            }
        }
    };
}
real!(f32, libm::erff);
real!(f64, libm::erf);

/// The CPU twin of `act_grad_<op>_<T>`: `dx[i] = g[i] f'(x[i])`.
pub fn act_grad<T: Element>(op: ActGrad, g: &[T], x: &[T], dx: &mut [T]) -> Result<()> {
    float_only::<T>("act_grad")?;
    same_len("act_grad", g.len(), &[x.len(), dx.len()])?;
    fn run<T: Element, A: Real>(op: ActGrad, g: &[T], x: &[T], dx: &mut [T]) {
        crate::cpu::chunks2(dx, g, x, |dx, g, x| {
            for ((d, &gi), &xi) in dx.iter_mut().zip(g).zip(x) {
                *d = (A::of(gi) * op.d(A::of(xi))).to();
            }
        });
    }
    if size_of::<T>() == 8 {
        run::<T, f64>(op, g, x, dx);
    } else {
        run::<T, f32>(op, g, x, dx);
    }
    Ok(())
}

const THREADS: usize = 256;

/// The CPU twin of `sm_grad_<T>`: for each row of `n` elements of the softmax (`log`: the
/// log_softmax) output `y` and its gradient `g`, `dx = y (g - Σ g y)` (`dx = g - e^y Σ g`),
/// the sums in the kernels' order (see `kernels/grad.cu`). `n` must divide the lengths
/// (`n == 0` only for empty operands).
pub fn softmax_grad<T: Element>(log: bool, y: &[T], g: &[T], n: usize, dx: &mut [T]) -> Result<()> {
    float_only::<T>("softmax_grad")?;
    same_len("softmax_grad", y.len(), &[g.len(), dx.len()])?;
    if n == 0 || !y.len().is_multiple_of(n) {
        return if y.is_empty() {
            Ok(())
        } else {
            Err(Error::Unsupported {
                op: "softmax_grad",
                reason: format!("rows of {n} do not divide {} elements", y.len()),
            })
        };
    }
    fn run<T: Element, A: Real>(log: bool, y: &[T], g: &[T], n: usize, dx: &mut [T]) {
        use rayon::prelude::*;
        let row = |((yr, gr), dr): ((&[T], &[T]), &mut [T])| {
            let mut lanes = [A::c(0.0); THREADS];
            for (t, lane) in lanes.iter_mut().enumerate() {
                for i in (t..n).step_by(THREADS) {
                    let gi = A::of(gr[i]);
                    *lane = if log {
                        *lane + gi
                    } else {
                        gi.fma(A::of(yr[i]), *lane)
                    };
                }
            }
            // xor-shuffles within each warp (lane 0's value: the tree of its butterfly, lane
            // i + o's partner sums being lane i's by commutativity), then the warps in order.
            let warp_sum = |warp: &[A]| {
                let mut v = [A::c(0.0); 16];
                for i in 0..16 {
                    v[i] = warp[i] + warp[i + 16];
                }
                for o in [8, 4, 2, 1] {
                    for i in 0..o {
                        v[i] = v[i] + v[i + o];
                    }
                }
                v[0]
            };
            let mut s = warp_sum(&lanes[..32]);
            for w in 1..THREADS / 32 {
                s = s + warp_sum(&lanes[32 * w..32 * w + 32]);
            }
            for i in 0..n {
                let (gi, yi) = (A::of(gr[i]), A::of(yr[i]));
                dr[i] = if log {
                    (-yi.exp()).fma(s, gi)
                } else {
                    yi * (gi - s)
                }
                .to();
            }
        };
        // Rows are independent: over rayon's threads when there are many elements.
        if y.len() >= crate::softmax::PARALLEL_MIN {
            y.par_chunks(n)
                .zip(g.par_chunks(n))
                .zip(dx.par_chunks_mut(n))
                .for_each(row);
        } else {
            y.chunks(n)
                .zip(g.chunks(n))
                .zip(dx.chunks_mut(n))
                .for_each(row);
        }
    }
    if size_of::<T>() == 8 {
        run::<T, f64>(log, y, g, n, dx);
    } else {
        run::<T, f32>(log, y, g, n, dx);
    }
    Ok(())
}

#[cfg(feature = "cuda")]
fn kernel_name<T: Element>(table: [&'static str; 4]) -> Result<&'static str> {
    Ok(match T::DTYPE {
        crate::DType::F32 => table[0],
        crate::DType::F64 => table[1],
        crate::DType::F16 => table[2],
        crate::DType::BF16 => table[3],
        _ => {
            return Err(Error::Unsupported {
                op: "grad",
                reason: format!("element type {} (floating types only)", T::NAME),
            });
        }
    })
}

/// Queues `dx = g f'(x)` on `stream` (see [`act_grad`]).
#[cfg(feature = "cuda")]
pub fn gpu_act_grad<T: Element>(
    stream: &genesis_cuda::Stream,
    op: ActGrad,
    g: genesis_cuda::DeviceSpan<'_, T>,
    x: genesis_cuda::DeviceSpan<'_, T>,
    dx: genesis_cuda::DeviceSpanMut<'_, T>,
) -> Result<()> {
    use genesis_cuda::{Kernel, LaunchConfig};
    use std::ffi::c_void;
    float_only::<T>("act_grad")?;
    same_len("act_grad", g.len(), &[x.len(), dx.len()])?;
    let n = g.len();
    if n == 0 {
        return Ok(());
    }
    let name = kernel_name::<T>(match op {
        ActGrad::Gelu => [
            "act_grad_gelu_f32",
            "act_grad_gelu_f64",
            "act_grad_gelu_f16",
            "act_grad_gelu_bf16",
        ],
        ActGrad::GeluTanh => [
            "act_grad_gelu_tanh_f32",
            "act_grad_gelu_tanh_f64",
            "act_grad_gelu_tanh_f16",
            "act_grad_gelu_tanh_bf16",
        ],
        ActGrad::Silu => [
            "act_grad_silu_f32",
            "act_grad_silu_f64",
            "act_grad_silu_f16",
            "act_grad_silu_bf16",
        ],
    })?;
    let kernel = Kernel::get(stream.context(), &crate::images::GRAD, name)?;
    let sms = u64::from(stream.context().multiprocessors());
    let blocks = (n as u64).div_ceil(256).clamp(1, sms * 16);
    let (mut pg, mut px, mut pd, mut n64) = (g.addr(), x.addr(), dx.addr(), n as u64);
    let mut params: [*mut c_void; 4] = [
        (&raw mut pg).cast(),
        (&raw mut px).cast(),
        (&raw mut pd).cast(),
        (&raw mut n64).cast(),
    ];
    let config = LaunchConfig {
        grid: (blocks as u32, 1, 1),
        block: (256, 1, 1),
        shared_bytes: 0,
    };
    // SAFETY: the parameters match `act_grad_<op>_<T>(const T*, const T*, T*, u64)`; the three
    // spans hold `n` elements of `T` (checked).
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

/// Queues the softmax (`log`: log_softmax) gradient of rows of `n` on `stream` (see
/// [`softmax_grad`]).
#[cfg(feature = "cuda")]
pub fn gpu_softmax_grad<T: Element>(
    stream: &genesis_cuda::Stream,
    log: bool,
    y: genesis_cuda::DeviceSpan<'_, T>,
    g: genesis_cuda::DeviceSpan<'_, T>,
    n: usize,
    dx: genesis_cuda::DeviceSpanMut<'_, T>,
) -> Result<()> {
    use genesis_cuda::{Kernel, LaunchConfig};
    use std::ffi::c_void;
    float_only::<T>("softmax_grad")?;
    same_len("softmax_grad", y.len(), &[g.len(), dx.len()])?;
    if y.is_empty() {
        return Ok(());
    }
    if n == 0 || !y.len().is_multiple_of(n) {
        return Err(Error::Unsupported {
            op: "softmax_grad",
            reason: format!("rows of {n} do not divide {} elements", y.len()),
        });
    }
    let name = kernel_name::<T>(["sm_grad_f32", "sm_grad_f64", "sm_grad_f16", "sm_grad_bf16"])?;
    let kernel = Kernel::get(stream.context(), &crate::images::GRAD, name)?;
    let rows = (y.len() / n) as u64;
    let sms = u64::from(stream.context().multiprocessors());
    let blocks = rows.clamp(1, sms * 32);
    let (mut py, mut pg, mut pd) = (y.addr(), g.addr(), dx.addr());
    let (mut r, mut n64, mut lg) = (rows, n as u64, i32::from(log));
    let mut params: [*mut c_void; 6] = [
        (&raw mut py).cast(),
        (&raw mut pg).cast(),
        (&raw mut pd).cast(),
        (&raw mut r).cast(),
        (&raw mut n64).cast(),
        (&raw mut lg).cast(),
    ];
    let config = LaunchConfig {
        grid: (blocks as u32, 1, 1),
        block: (256, 1, 1),
        shared_bytes: 0,
    };
    // SAFETY: the parameters match `sm_grad_<T>(const T*, const T*, T*, u64, u64, int)`; the
    // three spans hold `rows * n` elements of `T` (checked).
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

/// Rows a split of [`gpu_act_grad_cols`] takes (16 a thread): the shape alone decides, not
/// the device, so the column sums are the same bits on every GPU. At `[32768, 3072]` bf16
/// (GPT-2's MLP) 128-row splits ran the pass in 0.188 ms on an H200, 256 in 0.192, 512 in
/// 0.228 (the one-pass gradient without the sums: 0.155).
pub const COLS_SPLIT_ROWS: usize = 128;

/// Bytes of device workspace [`gpu_act_grad_cols`] needs for `rows` rows of `cols` (its
/// per-split column sums, in the compute type).
pub fn act_grad_cols_workspace_bytes<T: Element>(rows: usize, cols: usize) -> usize {
    let splits = rows.div_ceil(COLS_SPLIT_ROWS).max(1);
    let acc = if size_of::<T>() == 8 { 8 } else { 4 };
    splits.saturating_mul(cols).saturating_mul(acc)
}

/// The CPU twin of `act_grad_cols_<op>_<T>` and `act_grad_cols_final_<T>`: [`act_grad`], and
/// `sums[c]` the sum over the rows of `dx`'s column `c` (rows of `cols` elements; the values as
/// rounded to `T`, added in f64 in order, rounded once to `T`). The kernels add in f32 (f64 for
/// f64) in a fixed order of row splits: within `(2 + sqrt(rows)) u sum |dx|` of the twin per
/// column (`u` the compute type's unit roundoff) before the final rounding.
pub fn act_grad_cols<T: Element>(
    op: ActGrad,
    g: &[T],
    x: &[T],
    dx: &mut [T],
    cols: usize,
    sums: &mut [T],
) -> Result<()> {
    cols_shape("act_grad_cols", g.len(), cols, sums.len())?;
    act_grad(op, g, x, dx)?;
    let mut acc = vec![0f64; cols];
    for row in dx.chunks(cols) {
        for (a, v) in acc.iter_mut().zip(row) {
            *a += v.to_f64();
        }
    }
    for (o, a) in sums.iter_mut().zip(acc) {
        *o = T::from_f64(a);
    }
    Ok(())
}

/// Checks `len` elements as rows of `cols` (at least 1) and `sums` of `cols`.
fn cols_shape(op: &'static str, len: usize, cols: usize, sums: usize) -> Result<()> {
    if cols == 0 || !len.is_multiple_of(cols) {
        return Err(Error::Unsupported {
            op,
            reason: format!("rows of {cols} do not divide {len} elements"),
        });
    }
    if sums != cols {
        return Err(Error::LengthMismatch {
            op,
            expected: cols,
            got: sums,
        });
    }
    Ok(())
}

/// Queues `dx = g f'(x)` and the column sums of `dx` over rows of `cols` on `stream` (see
/// [`act_grad_cols`]), through `workspace` ([`act_grad_cols_workspace_bytes`], 8-byte
/// aligned). Deterministic (no atomics; the splits depend on the shape only).
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
pub fn gpu_act_grad_cols<T: Element>(
    stream: &genesis_cuda::Stream,
    op: ActGrad,
    g: genesis_cuda::DeviceSpan<'_, T>,
    x: genesis_cuda::DeviceSpan<'_, T>,
    dx: genesis_cuda::DeviceSpanMut<'_, T>,
    cols: usize,
    sums: genesis_cuda::DeviceSpanMut<'_, T>,
    workspace: genesis_cuda::DeviceSpanMut<'_, u8>,
) -> Result<()> {
    use genesis_cuda::{Kernel, LaunchConfig};
    use std::ffi::c_void;
    let op_name = "act_grad_cols";
    float_only::<T>(op_name)?;
    same_len(op_name, g.len(), &[x.len(), dx.len()])?;
    cols_shape(op_name, g.len(), cols, sums.len())?;
    let rows = g.len() / cols;
    let need = act_grad_cols_workspace_bytes::<T>(rows, cols);
    if workspace.len() < need || !workspace.addr().is_multiple_of(8) {
        return Err(Error::LengthMismatch {
            op: "act_grad_cols workspace (8-byte aligned)",
            expected: need,
            got: workspace.len(),
        });
    }
    let name = kernel_name::<T>(match op {
        ActGrad::Gelu => [
            "act_grad_cols_gelu_f32",
            "act_grad_cols_gelu_f64",
            "act_grad_cols_gelu_f16",
            "act_grad_cols_gelu_bf16",
        ],
        ActGrad::GeluTanh => [
            "act_grad_cols_gelu_tanh_f32",
            "act_grad_cols_gelu_tanh_f64",
            "act_grad_cols_gelu_tanh_f16",
            "act_grad_cols_gelu_tanh_bf16",
        ],
        ActGrad::Silu => [
            "act_grad_cols_silu_f32",
            "act_grad_cols_silu_f64",
            "act_grad_cols_silu_f16",
            "act_grad_cols_silu_bf16",
        ],
    })?;
    let final_name = kernel_name::<T>([
        "act_grad_cols_final_f32",
        "act_grad_cols_final_f64",
        "act_grad_cols_final_f16",
        "act_grad_cols_final_bf16",
    ])?;
    let elem = size_of::<T>();
    let v = 16 / elem;
    let aligned = [g.addr(), x.addr(), dx.addr()]
        .iter()
        .all(|a| a.is_multiple_of(16));
    let vec = aligned && cols.is_multiple_of(v);
    let split = COLS_SPLIT_ROWS;
    let splits = rows.div_ceil(split).max(1);
    let tiles = cols.div_ceil(32 * if vec { v } else { 1 });
    if tiles > i32::MAX as usize {
        return Err(Error::Unsupported {
            op: op_name,
            reason: format!("rows of {cols} in one launch"),
        });
    }
    let ctx = stream.context();
    let kernel = Kernel::get(ctx, &crate::images::GRAD, name)?;
    let (mut pg, mut px, mut pd, mut pw) = (g.addr(), x.addr(), dx.addr(), workspace.addr());
    let (mut r64, mut c64, mut chunk, mut vec_i) =
        (rows as u64, cols as u64, split as u64, i32::from(vec));
    let mut params: [*mut c_void; 8] = [
        (&raw mut pg).cast(),
        (&raw mut px).cast(),
        (&raw mut pd).cast(),
        (&raw mut pw).cast(),
        (&raw mut r64).cast(),
        (&raw mut c64).cast(),
        (&raw mut chunk).cast(),
        (&raw mut vec_i).cast(),
    ];
    let config = LaunchConfig {
        // Splits past the y extent are taken grid-stride by the kernel.
        grid: (tiles as u32, splits.min(65535) as u32, 1),
        block: (32, 8, 1),
        shared_bytes: 0,
    };
    // SAFETY: the parameters match `act_grad_cols_<op>_<T>`; g, x and dx hold rows * cols
    // elements (checked), the workspace splits * cols partial sums (checked).
    unsafe { kernel.launch(stream, config, &mut params)? };
    let kernel = Kernel::get(ctx, &crate::images::GRAD, final_name)?;
    let (mut pw, mut ps, mut sp) = (workspace.addr(), sums.addr(), splits as u64);
    let mut params: [*mut c_void; 4] = [
        (&raw mut pw).cast(),
        (&raw mut ps).cast(),
        (&raw mut sp).cast(),
        (&raw mut c64).cast(),
    ];
    let config = LaunchConfig {
        grid: (cols.div_ceil(32) as u32, 1, 1),
        block: (32, 8, 1),
        shared_bytes: 0,
    };
    // SAFETY: the parameters match `act_grad_cols_final_<T>`; the sums hold `cols` elements.
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The softmax gradient's row sum (lane 0's tree of each warp's xor butterfly, then the
    /// warps in order) is the full 32-lane butterfly's, bit for bit: rows of 1 to 1000
    /// elements, log and not, f32.
    #[test]
    fn softmax_grad_sums_are_the_butterflys() {
        fn butterfly(lanes: &mut [f32]) -> f32 {
            for warp in lanes.chunks_mut(32) {
                for o in [16, 8, 4, 2, 1] {
                    let before = warp.to_vec();
                    for (i, v) in warp.iter_mut().enumerate() {
                        *v = before[i] + before[i ^ o];
                    }
                }
            }
            let mut s = lanes[0];
            for w in 1..lanes.len() / 32 {
                s += lanes[32 * w];
            }
            s
        }
        for n in [1usize, 7, 256, 300, 1000] {
            for log in [false, true] {
                let y: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32) * 0.0123).collect();
                let g: Vec<f32> = (0..n)
                    .map(|i| ((i * 53 % 97) as f32 - 48.0) * 0.731)
                    .collect();
                let mut dx = vec![0f32; n];
                softmax_grad(log, &y, &g, n, &mut dx).unwrap();
                let mut lanes = vec![0f32; THREADS];
                for (t, lane) in lanes.iter_mut().enumerate() {
                    for i in (t..n).step_by(THREADS) {
                        *lane = if log {
                            *lane + g[i]
                        } else {
                            g[i].mul_add(y[i], *lane)
                        };
                    }
                }
                let s = butterfly(&mut lanes);
                for i in 0..n {
                    let want = if log {
                        (-y[i].exp()).mul_add(s, g[i])
                    } else {
                        y[i] * (g[i] - s)
                    };
                    assert_eq!(dx[i].to_bits(), want.to_bits(), "n {n} log {log} [{i}]");
                }
            }
        }
    }

    #[test]
    fn activation_gradients_are_the_derivatives() {
        let xs: Vec<f64> = (-40..=40).map(|i| f64::from(i) * 0.1).collect();
        let g = vec![1.0f64; xs.len()];
        for (op, f) in [
            (
                ActGrad::Gelu,
                (|x: f64| 0.5 * x * (1.0 + libm::erf(x / 2f64.sqrt()))) as fn(f64) -> f64,
            ),
            (ActGrad::GeluTanh, |x: f64| {
                let k = (2.0 / std::f64::consts::PI).sqrt();
                0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
            }),
            (ActGrad::Silu, |x: f64| x / (1.0 + (-x).exp())),
        ] {
            let mut dx = vec![0.0; xs.len()];
            act_grad(op, &g, &xs, &mut dx).unwrap();
            for (&x, &d) in xs.iter().zip(&dx) {
                let h = 1e-6;
                let numeric = (f(x + h) - f(x - h)) / (2.0 * h);
                assert!(
                    (d - numeric).abs() < 1e-8,
                    "{op:?} at {x}: {d} vs {numeric}"
                );
            }
        }
        let mut dx = vec![0.0f32; 2];
        assert!(act_grad(ActGrad::Gelu, &[1.0f32; 2], &[1.0f32; 3], &mut dx).is_err());
    }

    #[test]
    fn softmax_gradients_follow_the_formulas() {
        let y = [0.1f64, 0.2, 0.7, 0.5, 0.25, 0.25];
        let g = [1.0f64, -2.0, 0.5, 0.0, 1.0, 3.0];
        let mut dx = [0.0f64; 6];
        softmax_grad(false, &y, &g, 3, &mut dx).unwrap();
        for r in 0..2 {
            let s: f64 = (0..3).map(|i| g[3 * r + i] * y[3 * r + i]).sum();
            for i in 0..3 {
                let want = y[3 * r + i] * (g[3 * r + i] - s);
                assert!((dx[3 * r + i] - want).abs() < 1e-15);
            }
        }
        softmax_grad(true, &y, &g, 3, &mut dx).unwrap();
        let s: f64 = g[..3].iter().sum();
        assert!((dx[1] - (g[1] - y[1].exp() * s)).abs() < 1e-15);
        assert!(softmax_grad(false, &y, &g, 4, &mut dx).is_err());
        assert!(softmax_grad::<f32>(false, &[], &[], 0, &mut []).is_ok());
    }
}
