//! `softmax`, `log_softmax` and `logsumexp` along one axis (`kernels/softmax.cu`), and their
//! CPU twin [`softmax`].
//!
//! A contiguous array is seen as `[outer, n, inner]` (as the reductions see it); softmax and
//! log_softmax write the input's shape, logsumexp `[outer, inner]`. f64 computes in f64, f32,
//! f16 and bf16 in f32, each result rounded once to the input type. A line's statistics are
//! `m = max x` (NaN when any element is NaN) and `s = sum exp(x - m)`; when `m` is finite,
//! `softmax = exp(x - m) * (1 / s)`, `log_softmax = (x - m) - log(s)` and
//! `logsumexp = m + log(s)` (no `exp` overflows: `x - m <= 0`); otherwise softmax and
//! log_softmax are NaN and logsumexp is `m` (PyTorch's results: a line of -inf, or of no
//! elements, gives -inf, a +inf gives +inf, a NaN gives NaN).
//!
//! **Twin bound.** The twin takes `m`, then sums `s` in order along the line in f64 (rounded to
//! the accumulator type once); the kernels add in
//! a tree (lanes, warps, chunks) and the streaming paths build `(m, s)` online (rescaling a
//! running sum by `exp(m_old - m_new)`), and CUDA's `expf`/`logf` (2 and 1 ulp; `exp`/`log` for
//! f64) differ from Rust's; `x - m` is the same operation on both. With `u` the accumulator's
//! unit roundoff (2^-24, f64 2^-53) and `k = 8 + 2 sqrt(n)` for a line of `n` elements (the
//! rounding of the two sums, in practice; not a worst case), the results agree within:
//! softmax, a relative `k u` (and the smallest normal number of the type, where `exp`
//! underflows); log_softmax, `k u (1 + |log s| + |x - m|)`; logsumexp, `k u (1 + |m| + |log s|)`;
//! f16 and bf16 results within that and one ulp of their type (the f32 values round to
//! neighbours). Special values (NaN, infinities) are identical. `tests/gpu_softmax.rs` checks
//! this bound.
//!
//! Speed: along the last axis a warp takes a row of up to 1024 elements in registers, and a
//! block a row of up to 96 KiB in shared memory: the input is read once and the output written
//! once (16-byte vectors when rows are aligned). Longer rows are read twice (statistics, then
//! outputs), a row a block, or in chunks of several blocks when there are few of them. Along
//! another axis, 32 adjacent columns a warp row, each column's elements shared by up to 32
//! threads, read twice.

use crate::{Element, Error, ReduceShape, Result};

/// An operation of the softmax kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SoftmaxOp {
    /// `exp(x - m) / s` along the axis.
    Softmax,
    /// `(x - m) - log(s)` along the axis.
    LogSoftmax,
    /// `m + log(s)`: the axis reduced.
    LogSumExp,
}

impl SoftmaxOp {
    /// Every operation, for tests.
    pub const ALL: [SoftmaxOp; 3] = [
        SoftmaxOp::Softmax,
        SoftmaxOp::LogSoftmax,
        SoftmaxOp::LogSumExp,
    ];

    /// The operation's name (`"softmax"`, `"log_softmax"`, `"logsumexp"`).
    pub const fn name(self) -> &'static str {
        match self {
            SoftmaxOp::Softmax => "softmax",
            SoftmaxOp::LogSoftmax => "log_softmax",
            SoftmaxOp::LogSumExp => "logsumexp",
        }
    }

    /// Whether the operation reduces the axis (logsumexp) rather than keeping the shape.
    pub const fn reduces(self) -> bool {
        matches!(self, SoftmaxOp::LogSumExp)
    }

    /// Elements of the output for `shape` (`None` when the input's count overflows).
    pub fn output_len(self, shape: ReduceShape) -> Option<usize> {
        if self.reduces() {
            Some(shape.output_len())
        } else {
            shape.input_len()
        }
    }

    /// The kernels' `op` argument.
    #[cfg(feature = "cuda")]
    const fn code(self) -> i32 {
        match self {
            SoftmaxOp::Softmax => 0,
            SoftmaxOp::LogSoftmax => 1,
            SoftmaxOp::LogSumExp => 2,
        }
    }
}

/// The accumulator of the twin: f32, or f64 for f64.
trait Acc:
    Copy
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
{
    const NEG_INF: Self;
    const NAN: Self;
    const ZERO: Self;
    const ONE: Self;
    fn of<T: Element>(x: T) -> Self;
    fn to<T: Element>(self) -> T;
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn finite(self) -> bool;
}

macro_rules! acc {
    ($t:ty) => {
        impl Acc for $t {
            const NEG_INF: Self = <$t>::NEG_INFINITY;
            const NAN: Self = <$t>::NAN;
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            #[inline]
            fn of<T: Element>(x: T) -> Self {
                // Exact: every f16, bf16 and f32 is an f32.
                x.to_f64() as $t
            }
            #[inline]
            fn to<T: Element>(self) -> T {
                // f32 -> f64 is exact, so the value is rounded once, to T.
                T::from_f64(f64::from(self))
            }
            #[inline]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline]
            fn finite(self) -> bool {
                <$t>::is_finite(self)
            }
        }
    };
}
acc!(f32);
acc!(f64);

/// The larger of `a` and `b`, NaN when either is NaN (the kernels' `nanmax`).
#[inline]
fn nanmax<A: Acc>(a: A, b: A) -> A {
    #[allow(clippy::eq_op)]
    let a_nan = a != a;
    if a > b || a_nan { a } else { b }
}

/// Checks the type and lengths of `op` over `s`; gives the input's element count.
fn check<T: Element>(
    op: SoftmaxOp,
    s: ReduceShape,
    input_len: usize,
    out_len: usize,
) -> Result<usize> {
    let name = op.name();
    if !T::IS_FLOAT {
        return Err(Error::Unsupported {
            op: name,
            reason: format!("element type {} (floating types only)", T::NAME),
        });
    }
    let overflow = || Error::Unsupported {
        op: name,
        reason: "shape overflows".into(),
    };
    let n = s.input_len().ok_or_else(overflow)?;
    let o = op.output_len(s).ok_or_else(overflow)?;
    for (expected, got) in [(n, input_len), (o, out_len)] {
        if expected != got {
            return Err(Error::LengthMismatch {
                op: name,
                expected,
                got,
            });
        }
    }
    Ok(n)
}

/// CPU twin: `op` of `input` (`[outer, n, inner]`, contiguous) along `n` into `out` (the
/// input's length, or `[outer, inner]` for logsumexp), of the floating type `T`. Computes in
/// f32 (f64 for f64): each line's max, then the sum of `exp(x - m)` in order (in f64), then the outputs
/// (see the module documentation). Nothing is written on error.
pub fn softmax<T: Element>(
    op: SoftmaxOp,
    input: &[T],
    s: ReduceShape,
    out: &mut [T],
) -> Result<()> {
    check::<T>(op, s, input.len(), out.len())?;
    // Nothing to write: no lines, or (softmax and log_softmax) lines of no elements, however
    // many (`outer` may be huge when `r` is 0).
    if s.outer == 0 || s.inner == 0 || out.is_empty() {
        return Ok(());
    }
    if size_of::<T>() == 8 {
        lines::<T, f64>(op, input, s, out);
    } else {
        lines::<T, f32>(op, input, s, out);
    }
    Ok(())
}

/// Elements below which a CPU twin runs its rows on the calling thread (rayon's pool above).
pub(crate) const PARALLEL_MIN: usize = 1 << 15;

/// Rows (`inner == 1`, the common case: the last dimension): each row as [`lines`] computes a
/// line of one element per step (the same operations in the same order, so the same bits),
/// the rows spread over rayon's threads when there are many elements.
fn rows<T: Element, A: Acc>(op: SoftmaxOp, input: &[T], n: usize, out: &mut [T]) {
    use rayon::prelude::*;
    // The row's max (NaN when any element is), and its sum of exp(x - m) (in f64, in order)
    // as `A`.
    let max_of = |line: &[T]| line.iter().fold(A::NEG_INF, |m, &x| nanmax(m, A::of(x)));
    let stats = |line: &[T]| -> (A, A) {
        let m = max_of(line);
        let mut total = 0f64;
        if m.finite() {
            for &x in line {
                total += (A::of(x) - m).exp().to::<f64>();
            }
        }
        (m, A::of(total))
    };
    // Softmax keeps each exp(x - m) of the sum's pass in `e` (the same value the output
    // multiplies by 1 / s) instead of computing it twice.
    let write = |e: &mut Vec<A>, line: &[T], dst: &mut [T]| {
        let m = max_of(line);
        if !m.finite() {
            for d in dst.iter_mut() {
                *d = A::NAN.to();
            }
            return;
        }
        let mut total = 0f64;
        if op == SoftmaxOp::Softmax {
            e.clear();
            for &x in line {
                let v = (A::of(x) - m).exp();
                e.push(v);
                total += v.to::<f64>();
            }
            let c = A::ONE / A::of(total);
            for (d, &v) in dst.iter_mut().zip(e.iter()) {
                *d = (v * c).to();
            }
        } else {
            for &x in line {
                total += (A::of(x) - m).exp().to::<f64>();
            }
            let c = A::of(total).ln();
            for (d, &x) in dst.iter_mut().zip(line) {
                *d = ((A::of(x) - m) - c).to();
            }
        }
    };
    let lse = |line: &[T], d: &mut T| {
        let (m, sum) = stats(line);
        *d = if m.finite() { m + sum.ln() } else { m }.to();
    };
    let parallel = input.len() >= PARALLEL_MIN;
    match (op, parallel) {
        (SoftmaxOp::LogSumExp, true) => input
            .par_chunks(n)
            .zip(out.par_iter_mut())
            .for_each(|(l, d)| lse(l, d)),
        (SoftmaxOp::LogSumExp, false) => {
            input
                .chunks(n)
                .zip(out.iter_mut())
                .for_each(|(l, d)| lse(l, d));
        }
        (_, true) => input
            .par_chunks(n)
            .zip(out.par_chunks_mut(n))
            .for_each_init(Vec::new, |e, (l, d)| write(e, l, d)),
        (_, false) => {
            let mut e = Vec::new();
            input
                .chunks(n)
                .zip(out.chunks_mut(n))
                .for_each(|(l, d)| write(&mut e, l, d));
        }
    }
}

fn lines<T: Element, A: Acc>(op: SoftmaxOp, input: &[T], s: ReduceShape, out: &mut [T]) {
    let (n, inner) = (s.r, s.inner);
    if inner == 1 && n > 0 {
        return rows::<T, A>(op, input, n, out);
    }
    let mut m = vec![A::NEG_INF; inner];
    // The sums in f64: the twin's own rounding stays far below the kernels' (a tree of f32
    // partial sums), so the bound above measures the kernels.
    let mut total = vec![0f64; inner];
    let mut sum = vec![A::ZERO; inner];
    for o in 0..s.outer {
        let base = o * n * inner;
        m.fill(A::NEG_INF);
        total.fill(0.0);
        for k in 0..n {
            let line = &input[base + k * inner..][..inner];
            for (mc, &x) in m.iter_mut().zip(line) {
                *mc = nanmax(*mc, A::of(x));
            }
        }
        for k in 0..n {
            let line = &input[base + k * inner..][..inner];
            for ((tc, &mc), &x) in total.iter_mut().zip(&m).zip(line) {
                if mc.finite() {
                    *tc += (A::of(x) - mc).exp().to::<f64>();
                }
            }
        }
        for (sc, &tc) in sum.iter_mut().zip(&total) {
            *sc = A::of(tc);
        }
        if op == SoftmaxOp::LogSumExp {
            for c in 0..inner {
                let v = if m[c].finite() {
                    m[c] + sum[c].ln()
                } else {
                    m[c]
                };
                out[o * inner + c] = v.to();
            }
            continue;
        }
        // The per-line constant: 1 / s or log(s).
        for sc in &mut sum {
            *sc = if op == SoftmaxOp::Softmax {
                A::ONE / *sc
            } else {
                sc.ln()
            };
        }
        for k in 0..n {
            let at = base + k * inner;
            let (line, dst) = (&input[at..][..inner], &mut out[at..][..inner]);
            for c in 0..inner {
                let (x, mc) = (A::of(line[c]), m[c]);
                let y = if !mc.finite() {
                    A::NAN
                } else if op == SoftmaxOp::Softmax {
                    (x - mc).exp() * sum[c]
                } else {
                    (x - mc) - sum[c]
                };
                dst[c] = y.to();
            }
        }
    }
}

/// Rows of at most this many elements go a warp a row (`sm_warp_*`, 32 registers a lane).
pub const WARP_MAX: usize = 1024;
/// Rows of at most this many bytes go a block a row with the row in shared memory
/// (`sm_block_*`).
pub const SHARED_ROW_MAX: usize = 96 << 10;
/// Chunks of the chunked path hold at least this many elements.
const MIN_CHUNK: usize = 8192;
/// The largest grid the launcher makes (the kernels loop over the rest).
#[cfg(feature = "cuda")]
const MAX_GRID: usize = 1 << 20;

/// How the kernels cover the lines (see `kernels/softmax.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SoftmaxPath {
    /// `inner == 1`, `n <= 1024`: a warp a row, `items` (a power of two) elements a lane.
    Warp {
        /// Elements a lane: `n <= 32 * items`.
        items: usize,
    },
    /// `inner == 1`, the row fits in shared memory: a block of `threads` a row.
    Block {
        /// Threads a block.
        threads: usize,
    },
    /// `inner == 1`, long rows and many of them: a block a row, two passes.
    Long,
    /// `inner == 1`, few long rows: `chunks` chunks of `chunk` elements a row.
    Chunked {
        /// Chunks a row (at least 2).
        chunks: usize,
        /// Elements a chunk (a multiple of 8).
        chunk: usize,
    },
    /// `inner > 1`: blocks of 32 columns by `by` threads along the axis.
    Cols {
        /// Threads along the axis a column (a power of two, at most 32).
        by: usize,
    },
}

/// The launch plan of a softmax: the shape and the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SoftmaxPlan {
    /// The lines.
    pub shape: ReduceShape,
    /// How the kernels cover them.
    pub path: SoftmaxPath,
}

impl SoftmaxPlan {
    /// The plan for `shape` with elements of `elem` bytes on a device with `sms`
    /// multiprocessors.
    pub fn new(shape: ReduceShape, elem: usize, sms: usize) -> SoftmaxPlan {
        let sms = sms.max(1);
        let n = shape.r;
        let path = if shape.inner > 1 {
            let cols = shape.output_len().max(1);
            let want = (sms * 2048).div_ceil(cols).next_power_of_two();
            SoftmaxPath::Cols {
                by: want.min(32).min(n.max(1).next_power_of_two()),
            }
        } else if n <= WARP_MAX {
            SoftmaxPath::Warp {
                items: n.div_ceil(32).max(1).next_power_of_two(),
            }
        } else if n.saturating_mul(elem) <= SHARED_ROW_MAX {
            SoftmaxPath::Block {
                threads: (n * elem).div_ceil(64).next_power_of_two().clamp(128, 1024),
            }
        } else if shape.outer >= 2 * sms {
            SoftmaxPath::Long
        } else {
            let want = (4 * sms)
                .div_ceil(shape.outer.max(1))
                .min(n.div_ceil(MIN_CHUNK))
                .max(1);
            let chunk = n.div_ceil(want).next_multiple_of(8);
            let chunks = n.div_ceil(chunk);
            if chunks > 1 {
                SoftmaxPath::Chunked { chunks, chunk }
            } else {
                SoftmaxPath::Long
            }
        };
        SoftmaxPlan { shape, path }
    }

    /// Bytes of device workspace the plan needs for elements of `elem` bytes: two accumulators
    /// (f32, f64 for f64) a chunk on the chunked path, none otherwise.
    pub fn workspace_bytes(&self, elem: usize) -> usize {
        match self.path {
            SoftmaxPath::Chunked { chunks, .. } => self
                .shape
                .outer
                .saturating_mul(chunks)
                .saturating_mul(2 * elem.max(4)),
            _ => 0,
        }
    }
}

/// The kernel `sm_<kind>_<T><suffix>`, its name made once.
#[cfg(feature = "cuda")]
fn kernel_name(kind: &str, t: &str, suffix: &str) -> &'static str {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static NAMES: OnceLock<Mutex<HashMap<String, &'static str>>> = OnceLock::new();
    let name = format!("sm_{kind}_{t}{suffix}");
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    names
        .entry(name)
        .or_insert_with_key(|k| Box::leak(k.clone().into_boxed_str()))
}

/// Queues `op` of `input` (`shape`, contiguous) along its axis into `out` (the input's length,
/// `[outer, inner]` for logsumexp) on `stream`, using `workspace`
/// ([`SoftmaxPlan::workspace_bytes`] of `SoftmaxPlan::new(shape, size_of::<T>(), sms)`).
/// f64, f32, f16, bf16. Every span is checked before anything is launched.
#[cfg(feature = "cuda")]
pub fn gpu_softmax<T: Element>(
    stream: &genesis_cuda::Stream,
    op: SoftmaxOp,
    input: genesis_cuda::DeviceSpan<'_, T>,
    shape: ReduceShape,
    out: genesis_cuda::DeviceSpanMut<'_, T>,
    workspace: genesis_cuda::DeviceSpanMut<'_, u8>,
) -> Result<()> {
    use genesis_cuda::{Kernel, LaunchConfig};
    use std::ffi::c_void;

    let name = op.name();
    if !matches!(T::NAME, "f32" | "f16" | "bf16" | "f64") {
        return Err(Error::Unsupported {
            op: name,
            reason: format!("element type {}", T::NAME),
        });
    }
    let overflow = || Error::Unsupported {
        op: name,
        reason: "shape overflows".into(),
    };
    let n_in = shape.input_len().ok_or_else(overflow)?;
    let n_out = op.output_len(shape).ok_or_else(overflow)?;
    let short = |expected: usize, got: usize| Error::LengthMismatch {
        op: name,
        expected,
        got,
    };
    if input.len() < n_in {
        return Err(short(n_in, input.len()));
    }
    if out.len() < n_out {
        return Err(short(n_out, out.len()));
    }
    let elem = size_of::<T>();
    let ctx = stream.context();
    let plan = SoftmaxPlan::new(shape, elem, ctx.multiprocessors() as usize);
    let need = plan.workspace_bytes(elem);
    if workspace.len() < need {
        return Err(short(need, workspace.len()));
    }
    if n_out == 0 {
        return Ok(());
    }
    let (mut pin, mut pout, mut pws) = (input.addr(), out.addr(), workspace.addr());
    let (mut outer, mut n, mut inner) = (shape.outer as u64, shape.r as u64, shape.inner as u64);
    let mut code = op.code();
    // 16-byte vectors when every row starts 16-byte aligned in the input and the output.
    let vec =
        pin.is_multiple_of(16) && pout.is_multiple_of(16) && (shape.r * elem).is_multiple_of(16);
    let suffix = if vec { "_v" } else { "" };
    let grid = |blocks: usize| blocks.clamp(1, MAX_GRID) as u32;
    let t = T::NAME;
    match plan.path {
        SoftmaxPath::Cols { by } => {
            let kernel = Kernel::get(ctx, &crate::images::SOFTMAX, kernel_name("cols", t, ""))?;
            let mut params: [*mut c_void; 6] = [
                (&raw mut pin).cast(),
                (&raw mut pout).cast(),
                (&raw mut outer).cast(),
                (&raw mut n).cast(),
                (&raw mut inner).cast(),
                (&raw mut code).cast(),
            ];
            let config = LaunchConfig {
                grid: (grid(shape.output_len().div_ceil(32)), 1, 1),
                block: (32, by as u32, 1),
                shared_bytes: 0,
            };
            // SAFETY: the parameters match `sm_cols_<T>`; input and output hold the shape's
            // elements (checked).
            unsafe { kernel.launch(stream, config, &mut params)? };
        }
        SoftmaxPath::Warp { items } => {
            let kname = kernel_name("warp", t, &format!("_{items}"));
            let kernel = Kernel::get(ctx, &crate::images::SOFTMAX, kname)?;
            let mut params: [*mut c_void; 5] = [
                (&raw mut pin).cast(),
                (&raw mut pout).cast(),
                (&raw mut outer).cast(),
                (&raw mut n).cast(),
                (&raw mut code).cast(),
            ];
            // SAFETY: the parameters match `sm_warp_<T>_<items>` (n <= 32 * items); input and
            // output hold the shape's elements (checked).
            unsafe {
                kernel.launch(
                    stream,
                    LaunchConfig::linear(grid(shape.outer.div_ceil(4)), 128),
                    &mut params,
                )?
            };
        }
        SoftmaxPath::Block { threads } => {
            let kernel = Kernel::get(
                ctx,
                &crate::images::SOFTMAX,
                kernel_name("block", t, suffix),
            )?;
            let smem = (shape.r * elem).next_multiple_of(16) as u32;
            if smem > 48 << 10 {
                kernel.set_max_dynamic_shared_bytes(smem)?;
            }
            let mut params: [*mut c_void; 5] = [
                (&raw mut pin).cast(),
                (&raw mut pout).cast(),
                (&raw mut outer).cast(),
                (&raw mut n).cast(),
                (&raw mut code).cast(),
            ];
            let config = LaunchConfig {
                grid: (grid(shape.outer), 1, 1),
                block: (threads as u32, 1, 1),
                shared_bytes: smem,
            };
            // SAFETY: the parameters match `sm_block_<T>[_v]`; the dynamic shared memory holds
            // a row; input and output hold the shape's elements (checked) and are 16-byte
            // aligned a row for `_v`.
            unsafe { kernel.launch(stream, config, &mut params)? };
        }
        SoftmaxPath::Long => {
            let kernel = Kernel::get(ctx, &crate::images::SOFTMAX, kernel_name("long", t, suffix))?;
            let mut params: [*mut c_void; 5] = [
                (&raw mut pin).cast(),
                (&raw mut pout).cast(),
                (&raw mut outer).cast(),
                (&raw mut n).cast(),
                (&raw mut code).cast(),
            ];
            // SAFETY: the parameters match `sm_long_<T>[_v]`; input and output hold the
            // shape's elements (checked), 16-byte aligned a row for `_v`.
            unsafe {
                kernel.launch(
                    stream,
                    LaunchConfig::linear(grid(shape.outer), 512),
                    &mut params,
                )?
            };
        }
        SoftmaxPath::Chunked { chunks, chunk } => {
            let (mut c, mut cs) = (chunks as u64, chunk as u64);
            let stats = Kernel::get(
                ctx,
                &crate::images::SOFTMAX,
                kernel_name("cstats", t, suffix),
            )?;
            let mut params: [*mut c_void; 6] = [
                (&raw mut pin).cast(),
                (&raw mut pws).cast(),
                (&raw mut outer).cast(),
                (&raw mut n).cast(),
                (&raw mut c).cast(),
                (&raw mut cs).cast(),
            ];
            // SAFETY: the parameters match `sm_cstats_<T>[_v]`; the workspace holds two
            // accumulators a chunk (checked); chunk boundaries are multiples of 8 elements.
            unsafe {
                stats.launch(
                    stream,
                    LaunchConfig::linear(grid(shape.outer * chunks), 512),
                    &mut params,
                )?
            };
            let write = Kernel::get(
                ctx,
                &crate::images::SOFTMAX,
                kernel_name("cwrite", t, suffix),
            )?;
            let mut params: [*mut c_void; 8] = [
                (&raw mut pin).cast(),
                (&raw mut pout).cast(),
                (&raw mut pws).cast(),
                (&raw mut outer).cast(),
                (&raw mut n).cast(),
                (&raw mut c).cast(),
                (&raw mut cs).cast(),
                (&raw mut code).cast(),
            ];
            let parts = if op.reduces() { 1 } else { chunks };
            // SAFETY: the parameters match `sm_cwrite_<T>[_v]` over the states written above;
            // input and output hold the shape's elements (checked).
            unsafe {
                write.launch(
                    stream,
                    LaunchConfig::linear(grid(shape.outer * parts), 512),
                    &mut params,
                )?
            };
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The row path (last dimension, rows over rayon's threads when many) gives the bits of
    /// the general path on the same lines laid out as columns, for every op, f32 and bf16,
    /// rows with NaN, infinities and all `-inf`, serial and parallel sizes.
    #[test]
    fn rows_are_the_general_lines_bit_for_bit() {
        use super::*;
        for (rows, n) in [(7usize, 5usize), (300, 256), (2, 40000)] {
            let mut x: Vec<f32> = (0..rows * n)
                .map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 0.013)
                .collect();
            x[3] = f32::NAN;
            x[n + 1] = f32::INFINITY;
            if rows > 2 {
                for v in &mut x[2 * n..3 * n] {
                    *v = f32::NEG_INFINITY;
                }
            }
            let t: Vec<f32> = (0..rows * n)
                .map(|i| x[(i % rows) * n + i / rows])
                .collect();
            for op in [
                SoftmaxOp::Softmax,
                SoftmaxOp::LogSoftmax,
                SoftmaxOp::LogSumExp,
            ] {
                let per = if op == SoftmaxOp::LogSumExp { 1 } else { n };
                let mut got = vec![0f32; rows * per];
                rows_f32(op, &x, n, &mut got);
                let mut want = vec![0f32; rows * per];
                let cols = ReduceShape {
                    outer: 1,
                    r: n,
                    inner: rows,
                };
                lines::<f32, f32>(op, &t, cols, &mut want);
                // `want` holds line r's element k at k * rows + r.
                for r in 0..rows {
                    for k in 0..per {
                        let (a, b) = (got[r * per + k], want[k * rows + r]);
                        assert!(
                            a.to_bits() == b.to_bits(),
                            "{op:?} {rows}x{n} [{r}, {k}]: {a} against {b}"
                        );
                    }
                }
            }
        }
    }

    fn rows_f32(op: super::SoftmaxOp, x: &[f32], n: usize, out: &mut [f32]) {
        super::rows::<f32, f32>(op, x, n, out);
    }
    use super::*;

    fn rows(outer: usize, r: usize) -> ReduceShape {
        ReduceShape { outer, r, inner: 1 }
    }

    #[test]
    fn rows_and_columns() {
        let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut out = [0f32; 6];
        softmax(SoftmaxOp::Softmax, &x, rows(2, 3), &mut out).unwrap();
        let e = [1f32.exp(), 2f32.exp(), 3f32.exp()];
        let s = e[0] + e[1] + e[2];
        for (i, v) in out.iter().enumerate() {
            assert!((v - e[i % 3] / s).abs() < 1e-6, "{out:?}");
        }
        let mut lse = [0f32; 3];
        let cols = ReduceShape {
            outer: 1,
            r: 2,
            inner: 3,
        };
        softmax(SoftmaxOp::LogSumExp, &x, cols, &mut lse).unwrap();
        assert!((lse[0] - (1f32.exp() + 4f32.exp()).ln()).abs() < 1e-6);
        softmax(SoftmaxOp::LogSoftmax, &x, cols, &mut out).unwrap();
        assert!((out[3] - (4.0 - lse[0])).abs() < 1e-6, "{out:?}");
    }

    #[test]
    fn special_values() {
        let inf = f64::INFINITY;
        let mut out = [0f64; 2];
        let mut one = [0f64; 1];
        for (x, lse) in [
            ([-inf, -inf], -inf),
            ([inf, 1.0], inf),
            ([f64::NAN, 1.0], f64::NAN),
            ([-inf, inf], inf),
        ] {
            softmax(SoftmaxOp::Softmax, &x, rows(1, 2), &mut out).unwrap();
            assert!(out.iter().all(|v| v.is_nan()), "{x:?}: {out:?}");
            softmax(SoftmaxOp::LogSoftmax, &x, rows(1, 2), &mut out).unwrap();
            assert!(out.iter().all(|v| v.is_nan()), "{x:?}: {out:?}");
            softmax(SoftmaxOp::LogSumExp, &x, rows(1, 2), &mut one).unwrap();
            assert!(
                one[0] == lse || (lse.is_nan() && one[0].is_nan()),
                "{x:?}: {one:?}"
            );
        }
        // -inf among finite values: probability 0, log-probability -inf.
        softmax(SoftmaxOp::Softmax, &[-inf, 0.0], rows(1, 2), &mut out).unwrap();
        assert_eq!(out, [0.0, 1.0]);
        softmax(SoftmaxOp::LogSoftmax, &[-inf, 0.0], rows(1, 2), &mut out).unwrap();
        assert_eq!(out, [-inf, 0.0]);
        // Large magnitudes do not overflow.
        softmax(
            SoftmaxOp::LogSumExp,
            &[1e4f32, 1e4],
            rows(1, 2),
            &mut [0f32][..],
        )
        .unwrap();
        // An empty axis: logsumexp -inf.
        let mut e = [0f32; 2];
        softmax(SoftmaxOp::LogSumExp, &[], rows(2, 0), &mut e).unwrap();
        assert_eq!(e, [f32::NEG_INFINITY; 2]);
        // bf16 rounds the f32 result once.
        let h = [half::bf16::from_f32(0.0); 4];
        let mut ho = [half::bf16::ZERO; 4];
        softmax(SoftmaxOp::Softmax, &h, rows(1, 4), &mut ho).unwrap();
        assert!(ho.iter().all(|v| v.to_f32() == 0.25));
    }

    #[test]
    fn bad_input() {
        assert!(softmax(SoftmaxOp::Softmax, &[1i32], rows(1, 1), &mut [0i32]).is_err());
        assert!(softmax(SoftmaxOp::Softmax, &[1f32], rows(1, 1), &mut [0f32; 2]).is_err());
        assert!(
            softmax(
                SoftmaxOp::LogSumExp,
                &[1f32, 2.0],
                rows(1, 2),
                &mut [0f32; 2]
            )
            .is_err()
        );
    }

    #[test]
    fn plans() {
        let p = |outer, r, inner, elem| {
            SoftmaxPlan::new(ReduceShape { outer, r, inner }, elem, 132).path
        };
        assert_eq!(p(8192, 1000, 1, 4), SoftmaxPath::Warp { items: 32 });
        assert_eq!(p(8192, 3, 1, 4), SoftmaxPath::Warp { items: 1 });
        assert_eq!(p(4, 0, 1, 4), SoftmaxPath::Warp { items: 1 });
        assert_eq!(p(8192, 8192, 1, 4), SoftmaxPath::Block { threads: 512 });
        assert_eq!(p(8192, 8192, 1, 2), SoftmaxPath::Block { threads: 256 });
        assert_eq!(p(8192, 100_000, 1, 4), SoftmaxPath::Long);
        let SoftmaxPath::Chunked { chunks, chunk } = p(2, 100_000, 1, 4) else {
            panic!("few long rows go in chunks");
        };
        assert!(chunk % 8 == 0 && chunks * chunk >= 100_000 && (chunks - 1) * chunk < 100_000);
        assert_eq!(p(1, 8192, 8192, 4), SoftmaxPath::Cols { by: 32 });
        assert_eq!(p(8192, 3, 8192, 4), SoftmaxPath::Cols { by: 1 });
        assert_eq!(p(1, 3, 64, 4), SoftmaxPath::Cols { by: 4 });
        let plan = SoftmaxPlan::new(rows(2, 100_000), 4, 132);
        assert!(plan.workspace_bytes(4) > 0);
        assert_eq!(SoftmaxPlan::new(rows(2, 10), 4, 132).workspace_bytes(4), 0);
    }
}
