//! Optimiser steps over many tensors at once (`kernels/optim.cu`): Adam / AdamW
//! ([`adam`]), the global 2-norm of many gradients with PyTorch's clipping factor
//! ([`sum_squares`], [`clip_coef`]) and the gradients scaled by it ([`scale`]). One launch
//! covers up to [`MAX_TENSORS`] tensors of one dtype (f32, f16, bf16: computed in f32; f64 in
//! f64). The functions here are the CPU twins, bit for bit: every multiply-add is one fused
//! multiply-add on both sides, square roots and divisions are correctly rounded, and the sums
//! follow the kernels' chunks and trees.

use crate::{Element, Error, Result, float_only, same_len};

/// Tensors of one launch (the kernels' `GX_MT`).
pub const MAX_TENSORS: usize = 32;
/// Elements of a tensor one block works on (`GX_CHUNK`).
pub const CHUNK: usize = 4096;
/// Threads of a block (`GX_THREADS`).
const THREADS: usize = 256;

/// One step of Adam (PyTorch's `Adam`, or `AdamW` with `decoupled`), its hyper-parameters
/// and the step number (1 for the first step), from which the bias corrections follow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamStep {
    /// Learning rate.
    pub lr: f64,
    /// `β1`.
    pub beta1: f64,
    /// `β2`.
    pub beta2: f64,
    /// Added to the denominator.
    pub eps: f64,
    /// Weight decay: L2 (added to the gradient) or, with `decoupled`, the parameter shrunk by
    /// `lr * weight_decay` first (AdamW).
    pub weight_decay: f64,
    /// AdamW's decoupled weight decay.
    pub decoupled: bool,
    /// The step number, from 1.
    pub step: u64,
}

/// The hyper-parameters as the kernels take them (`AdamHyper<A>`), computed in f64 on the host
/// and rounded once to the compute type.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamHyper<A> {
    beta1: A,
    one_minus_beta1: A,
    beta2: A,
    one_minus_beta2: A,
    step_size: A,
    bc2_sqrt: A,
    eps: A,
    wd: A,
    lr_wd: A,
    decoupled: i32,
}

impl AdamStep {
    /// Checks the hyper-parameters (PyTorch's checks: `0 <= lr`, `0 <= eps`, `0 <= β < 1`,
    /// `0 <= weight_decay`, all finite) and the step (at least 1).
    pub fn check(&self) -> Result<()> {
        let bad = |reason: String| Err(Error::Unsupported { op: "adam", reason });
        for (name, v) in [
            ("lr", self.lr),
            ("eps", self.eps),
            ("weight_decay", self.weight_decay),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return bad(format!("invalid {name}: {v}"));
            }
        }
        for (name, b) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            if !(0.0..1.0).contains(&b) {
                return bad(format!("invalid {name}: {b} (must be in [0, 1))"));
            }
        }
        if self.step == 0 {
            return bad("the step number starts at 1".into());
        }
        Ok(())
    }

    fn hyper<A: Acc>(&self) -> AdamHyper<A> {
        let t = i32::try_from(self.step).unwrap_or(i32::MAX);
        let bc1 = 1.0 - self.beta1.powi(t);
        let bc2 = 1.0 - self.beta2.powi(t);
        AdamHyper {
            beta1: A::of64(self.beta1),
            one_minus_beta1: A::of64(1.0 - self.beta1),
            beta2: A::of64(self.beta2),
            one_minus_beta2: A::of64(1.0 - self.beta2),
            step_size: A::of64(self.lr / bc1),
            bc2_sqrt: A::of64(bc2.sqrt()),
            eps: A::of64(self.eps),
            wd: A::of64(self.weight_decay),
            lr_wd: A::of64(self.lr * self.weight_decay),
            decoupled: i32::from(self.decoupled),
        }
    }
}

/// The compute type: f32, or f64 for f64.
pub trait Acc: Copy + PartialEq + std::fmt::Debug + 'static {
    /// `x` rounded once to this type.
    fn of64(x: f64) -> Self;
    /// `x` widened (exactly).
    fn of<T: Element>(x: T) -> Self;
    /// This value rounded once to `T`.
    fn to<T: Element>(self) -> T;
    /// `a * b + c`, rounded once.
    fn fma(a: Self, b: Self, c: Self) -> Self;
    /// Correctly rounded arithmetic.
    fn add(a: Self, b: Self) -> Self;
    /// `a * b`.
    fn mul(a: Self, b: Self) -> Self;
    /// `a / b`.
    fn div(a: Self, b: Self) -> Self;
    /// `√a`.
    fn sqrt(a: Self) -> Self;
    /// `-a`.
    fn neg(a: Self) -> Self;
    /// Widened to f64 (exact).
    fn wide(self) -> f64;
}

macro_rules! acc {
    ($t:ty) => {
        impl Acc for $t {
            #[inline]
            fn of64(x: f64) -> Self {
                x as $t
            }
            #[inline]
            fn of<T: Element>(x: T) -> Self {
                x.to_f64() as $t
            }
            #[inline]
            fn to<T: Element>(self) -> T {
                T::from_f64(f64::from(self))
            }
            #[inline]
            fn fma(a: Self, b: Self, c: Self) -> Self {
                a.mul_add(b, c)
            }
            #[inline]
            fn add(a: Self, b: Self) -> Self {
                a + b
            }
            #[inline]
            fn mul(a: Self, b: Self) -> Self {
                a * b
            }
            #[inline]
            fn div(a: Self, b: Self) -> Self {
                a / b
            }
            #[inline]
            fn sqrt(a: Self) -> Self {
                a.sqrt()
            }
            #[inline]
            fn neg(a: Self) -> Self {
                -a
            }
            #[inline]
            fn wide(self) -> f64 {
                f64::from(self)
            }
        }
    };
}
acc!(f32);
acc!(f64);

/// The CPU twin of one tensor's Adam step (see `kernels/optim.cu` for the update): `p`, `m`
/// and `v` updated in place from `g`. Nothing is written on error.
pub fn adam<T: Element>(
    h: &AdamStep,
    p: &mut [T],
    g: &[T],
    m: &mut [T],
    v: &mut [T],
) -> Result<()> {
    float_only::<T>("adam")?;
    h.check()?;
    same_len("adam", p.len(), &[g.len(), m.len(), v.len()])?;
    if size_of::<T>() == 8 {
        adam_in::<T, f64>(&h.hyper(), p, g, m, v);
    } else {
        adam_in::<T, f32>(&h.hyper(), p, g, m, v);
    }
    Ok(())
}

fn adam_in<T: Element, A: Acc>(h: &AdamHyper<A>, p: &mut [T], g: &[T], m: &mut [T], v: &mut [T]) {
    for i in 0..p.len() {
        let (mut pk, mut gk) = (A::of(p[i]), A::of(g[i]));
        if h.decoupled != 0 {
            pk = A::fma(A::neg(h.lr_wd), pk, pk);
        } else {
            gk = A::fma(h.wd, pk, gk);
        }
        let mk = A::fma(h.beta1, A::of(m[i]), A::mul(h.one_minus_beta1, gk));
        let vk = A::fma(
            h.beta2,
            A::of(v[i]),
            A::mul(A::mul(h.one_minus_beta2, gk), gk),
        );
        let denom = A::add(A::div(A::sqrt(vk), h.bc2_sqrt), h.eps);
        pk = A::fma(A::neg(h.step_size), A::div(mk, denom), pk);
        p[i] = pk.to();
        m[i] = mk.to();
        v[i] = vk.to();
    }
}

/// Blocks (partial sums) of a tensor of `n` elements.
pub fn blocks_of(n: usize) -> usize {
    n.div_ceil(CHUNK)
}

/// The CPU twin of `sumsq_<T>`: one partial sum of squares per chunk of [`CHUNK`] elements
/// of `g`, appended to `partials` (each of 256 lanes adds its elements' squares in order by
/// fused multiply-adds in f32 (f64 for f64), then the lanes in a fixed tree in f64).
pub fn sum_squares<T: Element>(g: &[T], partials: &mut Vec<f64>) -> Result<()> {
    float_only::<T>("sum_squares")?;
    for chunk in g.chunks(CHUNK) {
        let mut lanes = [0f64; THREADS];
        if size_of::<T>() == 8 {
            lane_sums::<T, f64>(chunk, &mut lanes);
        } else {
            lane_sums::<T, f32>(chunk, &mut lanes);
        }
        partials.push(tree(&mut lanes));
    }
    Ok(())
}

fn lane_sums<T: Element, A: Acc>(chunk: &[T], lanes: &mut [f64; THREADS]) {
    for (lane, out) in lanes.iter_mut().enumerate() {
        let mut s = A::of64(0.0);
        for x in chunk.iter().skip(lane).step_by(THREADS) {
            let x = A::of(*x);
            s = A::fma(x, x, s);
        }
        *out = s.wide();
    }
}

/// The kernels' tree over 256 values: width 128, 64, ..., 1, `a[i] += a[i + w]`.
fn tree(a: &mut [f64; THREADS]) -> f64 {
    let mut w = THREADS / 2;
    while w > 0 {
        for i in 0..w {
            a[i] += a[i + w];
        }
        w /= 2;
    }
    a[0]
}

/// The CPU twin of `clip_coef`: the partials added as the kernel does (lane `i` adds partials
/// `i, i + 256, ...` in order, then the tree), `norm = √sum` and the clipping factor
/// `min(max_norm / (norm + 1e-6), 1)` (NaN stays NaN), as `[norm, coef]`.
pub fn clip_coef(partials: &[f64], max_norm: f64) -> [f64; 2] {
    let mut lanes = [0f64; THREADS];
    for (lane, out) in lanes.iter_mut().enumerate() {
        *out = partials
            .iter()
            .skip(lane)
            .step_by(THREADS)
            .fold(0.0, |s, x| s + x);
    }
    let norm = tree(&mut lanes).sqrt();
    let mut coef = max_norm / (norm + 1e-6);
    if coef >= 1.0 {
        coef = 1.0;
    }
    [norm, coef]
}

/// The CPU twin of `scale_<T>`: `g *= coef` (the factor rounded to f32, or f64 for f64; nothing
/// when that is 1).
pub fn scale<T: Element>(g: &mut [T], coef: f64) -> Result<()> {
    float_only::<T>("scale")?;
    if size_of::<T>() == 8 {
        scale_in::<T, f64>(g, coef);
    } else {
        scale_in::<T, f32>(g, coef);
    }
    Ok(())
}

fn scale_in<T: Element, A: Acc>(g: &mut [T], coef: f64) {
    let c = A::of64(coef);
    // As the kernel: a factor of 1 leaves every value as it is (NaN payloads included).
    if c == A::of64(1.0) {
        return;
    }
    for x in g {
        *x = A::mul(A::of(*x), c).to();
    }
}

/// The kernels' `MtBatch`.
#[cfg(feature = "cuda")]
#[repr(C)]
#[derive(Clone, Copy)]
struct MtBatch {
    p: [u64; MAX_TENSORS],
    g: [u64; MAX_TENSORS],
    m: [u64; MAX_TENSORS],
    v: [u64; MAX_TENSORS],
    n: [u64; MAX_TENSORS],
    first: [u32; MAX_TENSORS + 1],
    count: i32,
}

#[cfg(feature = "cuda")]
impl MtBatch {
    fn new() -> MtBatch {
        MtBatch {
            p: [0; MAX_TENSORS],
            g: [0; MAX_TENSORS],
            m: [0; MAX_TENSORS],
            v: [0; MAX_TENSORS],
            n: [0; MAX_TENSORS],
            first: [0; MAX_TENSORS + 1],
            count: 0,
        }
    }

    /// Adds a tensor of `n` elements (none when empty); false when the batch is full.
    fn push(&mut self, p: u64, g: u64, m: u64, v: u64, n: usize) -> bool {
        let c = self.count as usize;
        if c == MAX_TENSORS {
            return false;
        }
        if n == 0 {
            return true;
        }
        // The grid's x dimension is below 2^31.
        let end = u32::try_from(blocks_of(n))
            .ok()
            .and_then(|b| self.first[c].checked_add(b))
            .filter(|&end| end <= i32::MAX as u32);
        let Some(end) = end else {
            return false;
        };
        (self.p[c], self.g[c], self.m[c], self.v[c], self.n[c]) = (p, g, m, v, n as u64);
        self.first[c + 1] = end;
        self.count += 1;
        true
    }

    fn blocks(&self) -> u32 {
        self.first[self.count as usize]
    }
}

/// One Adam tensor on the device: the parameter, its gradient and the two moments, of one
/// length.
#[cfg(feature = "cuda")]
#[derive(Debug)]
pub struct AdamTensor<'a, T> {
    /// The parameter (updated).
    pub p: genesis_cuda::DeviceSpanMut<'a, T>,
    /// Its gradient.
    pub g: genesis_cuda::DeviceSpan<'a, T>,
    /// The first moment (updated).
    pub m: genesis_cuda::DeviceSpanMut<'a, T>,
    /// The second moment (updated).
    pub v: genesis_cuda::DeviceSpanMut<'a, T>,
}

/// Launches `name` over `batches`, each with the extra parameter `extra`.
#[cfg(feature = "cuda")]
fn launch_batches<E>(
    stream: &genesis_cuda::Stream,
    name: &'static str,
    batches: &[MtBatch],
    mut extra: impl FnMut(&MtBatch) -> E,
) -> Result<()> {
    use genesis_cuda::{Kernel, LaunchConfig};
    use std::ffi::c_void;
    let kernel = Kernel::get(stream.context(), &crate::images::OPTIM, name)?;
    for b in batches {
        if b.blocks() == 0 {
            continue;
        }
        let mut batch = *b;
        let mut e = extra(b);
        let mut params: [*mut c_void; 2] = [(&raw mut batch).cast(), (&raw mut e).cast()];
        let config = LaunchConfig {
            grid: (b.blocks(), 1, 1),
            block: (THREADS as u32, 1, 1),
            shared_bytes: 0,
        };
        // SAFETY: the parameters match `<name>(MtBatch, E)` (`MtBatch` is the kernels'
        // layout, `E` their second parameter); every address of the batch names `n[t]`
        // elements of the kernel's type in memory the callers' spans borrow.
        unsafe { kernel.launch(stream, config, &mut params)? };
    }
    Ok(())
}

/// The kernels of `T`: `[adam, sumsq, scale]`.
#[cfg(feature = "cuda")]
fn kernel_names<T: Element>(op: &'static str) -> Result<[&'static str; 3]> {
    Ok(match T::DTYPE {
        crate::DType::F32 => ["adam_f32", "sumsq_f32", "scale_f32"],
        crate::DType::F64 => ["adam_f64", "sumsq_f64", "scale_f64"],
        crate::DType::F16 => ["adam_f16", "sumsq_f16", "scale_f16"],
        crate::DType::BF16 => ["adam_bf16", "sumsq_bf16", "scale_bf16"],
        _ => {
            return Err(Error::Unsupported {
                op,
                reason: format!("element type {} (floating types only)", T::NAME),
            });
        }
    })
}

/// Splits tensors of `lens` elements into launches of at most [`MAX_TENSORS`] tensors.
#[cfg(feature = "cuda")]
fn batches(addrs: impl Iterator<Item = ([u64; 4], usize)>) -> Result<Vec<MtBatch>> {
    let mut out = vec![MtBatch::new()];
    for ([p, g, m, v], n) in addrs {
        if !out.last_mut().expect("one batch").push(p, g, m, v, n) {
            let mut b = MtBatch::new();
            if !b.push(p, g, m, v, n) {
                return Err(Error::Unsupported {
                    op: "optim",
                    reason: format!("a tensor of {n} elements is too long for one launch"),
                });
            }
            out.push(b);
        }
    }
    Ok(out)
}

/// Queues one Adam step of every tensor on `stream` (see [`adam`]).
#[cfg(feature = "cuda")]
pub fn gpu_adam<T: Element>(
    stream: &genesis_cuda::Stream,
    h: &AdamStep,
    tensors: &mut [AdamTensor<'_, T>],
) -> Result<()> {
    float_only::<T>("adam")?;
    h.check()?;
    for t in tensors.iter() {
        same_len("adam", t.p.len(), &[t.g.len(), t.m.len(), t.v.len()])?;
    }
    let list = batches(
        tensors
            .iter()
            .map(|t| ([t.p.addr(), t.g.addr(), t.m.addr(), t.v.addr()], t.p.len())),
    )?;
    let [name, _, _] = kernel_names::<T>("adam")?;
    if size_of::<T>() == 8 {
        launch_batches(stream, name, &list, |_| h.hyper::<f64>())
    } else {
        launch_batches(stream, name, &list, |_| h.hyper::<f32>())
    }
}

/// Queues the partial sums of squares of every gradient into `partials` (one per block:
/// [`blocks_of`] of each gradient's length, in order; see [`sum_squares`]).
#[cfg(feature = "cuda")]
pub fn gpu_sum_squares<T: Element>(
    stream: &genesis_cuda::Stream,
    grads: &[genesis_cuda::DeviceSpan<'_, T>],
    partials: genesis_cuda::DeviceSpanMut<'_, f64>,
) -> Result<()> {
    float_only::<T>("sum_squares")?;
    let need: usize = grads.iter().map(|g| blocks_of(g.len())).sum();
    same_len("sum_squares", need, &[partials.len()])?;
    let list = batches(grads.iter().map(|g| ([0, g.addr(), 0, 0], g.len())))?;
    let mut at = partials.addr();
    let [_, name, _] = kernel_names::<T>("sum_squares")?;
    launch_batches(stream, name, &list, |b| {
        let here = at;
        at += u64::from(b.blocks()) * 8;
        here
    })
}

/// Queues `clip_coef`: `out = [norm, coef]` from `partials` (see [`clip_coef`]).
#[cfg(feature = "cuda")]
pub fn gpu_clip_coef(
    stream: &genesis_cuda::Stream,
    partials: genesis_cuda::DeviceSpan<'_, f64>,
    max_norm: f64,
    out: genesis_cuda::DeviceSpanMut<'_, f64>,
) -> Result<()> {
    use genesis_cuda::{Kernel, LaunchConfig};
    use std::ffi::c_void;
    same_len("clip_coef", 2, &[out.len()])?;
    let kernel = Kernel::get(stream.context(), &crate::images::OPTIM, "clip_coef")?;
    let (mut p, mut n, mut mx, mut o) =
        (partials.addr(), partials.len() as u64, max_norm, out.addr());
    let mut params: [*mut c_void; 4] = [
        (&raw mut p).cast(),
        (&raw mut n).cast(),
        (&raw mut mx).cast(),
        (&raw mut o).cast(),
    ];
    let config = LaunchConfig {
        grid: (1, 1, 1),
        block: (THREADS as u32, 1, 1),
        shared_bytes: 0,
    };
    // SAFETY: the parameters match `clip_coef(const double*, u64, double, double*)`; the
    // spans hold `n` and 2 doubles.
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

/// Queues `g *= coef[1]` over every gradient (`coef` is [`gpu_clip_coef`]'s output).
#[cfg(feature = "cuda")]
pub fn gpu_scale<T: Element>(
    stream: &genesis_cuda::Stream,
    grads: &mut [genesis_cuda::DeviceSpanMut<'_, T>],
    coef: genesis_cuda::DeviceSpan<'_, f64>,
) -> Result<()> {
    float_only::<T>("scale")?;
    same_len("scale", 2, &[coef.len()])?;
    let list = batches(grads.iter().map(|g| ([0, g.addr(), 0, 0], g.len())))?;
    let c = coef.addr() + 8;
    let [_, _, name] = kernel_names::<T>("scale")?;
    launch_batches(stream, name, &list, |_| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step() -> AdamStep {
        AdamStep {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.1,
            decoupled: true,
            step: 3,
        }
    }

    #[test]
    fn adam_follows_the_update_rule() {
        let h = step();
        let (mut p, g, mut m, mut v) = (vec![1.0f64], vec![0.5], vec![0.2], vec![0.01]);
        adam(&h, &mut p, &g, &mut m, &mut v).unwrap();
        let p0 = 1.0 - 1e-3 * 0.1;
        let m1 = 0.9 * 0.2 + 0.1 * 0.5;
        let v1: f64 = 0.999 * 0.01 + 0.001 * 0.25;
        let bc1 = 1.0 - 0.9f64.powi(3);
        let bc2 = 1.0 - 0.999f64.powi(3);
        let want = p0 - 1e-3 / bc1 * m1 / (v1.sqrt() / bc2.sqrt() + 1e-8);
        assert!((p[0] - want).abs() < 1e-15, "{} vs {want}", p[0]);
        assert!((m[0] - m1).abs() < 1e-16 && (v[0] - v1).abs() < 1e-16);
    }

    #[test]
    fn adam_refuses_bad_input() {
        let (mut p, g, mut m, mut v) = (vec![1.0f32; 3], vec![0.5; 3], vec![0.0; 3], vec![0.0; 2]);
        assert!(adam(&step(), &mut p, &g, &mut m, &mut v).is_err());
        let mut v = vec![0.0; 3];
        for bad in [
            AdamStep { step: 0, ..step() },
            AdamStep {
                beta1: 1.0,
                ..step()
            },
            AdamStep {
                lr: f64::NAN,
                ..step()
            },
            AdamStep {
                eps: -1.0,
                ..step()
            },
        ] {
            assert!(adam(&bad, &mut p, &g, &mut m, &mut v).is_err());
        }
        assert_eq!(p, [1.0; 3], "nothing written");
        let (mut pi, gi, mut mi, mut vi) = (vec![1i32], vec![1], vec![0], vec![0]);
        assert!(adam(&step(), &mut pi, &gi, &mut mi, &mut vi).is_err());
    }

    #[test]
    fn the_norm_is_the_square_root_of_the_sum_of_squares() {
        let g: Vec<f32> = (0..10_000).map(|i| ((i % 7) as f32 - 3.0) * 0.25).collect();
        let mut partials = Vec::new();
        sum_squares(&g, &mut partials).unwrap();
        assert_eq!(partials.len(), blocks_of(g.len()));
        let exact: f64 = g.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
        let [norm, coef] = clip_coef(&partials, 1.0);
        assert!((norm - exact.sqrt()).abs() < 1e-9 * exact.sqrt());
        assert!((coef - 1.0 / (norm + 1e-6)).abs() < 1e-15);
        assert_eq!(clip_coef(&partials, 1e9)[1], 1.0);
        assert!(clip_coef(&[f64::NAN], 1.0)[1].is_nan());
        let mut h = vec![half::bf16::from_f32(3.0); 5];
        scale(&mut h, 0.5).unwrap();
        assert_eq!(h[4].to_f32(), 1.5);
    }
}
