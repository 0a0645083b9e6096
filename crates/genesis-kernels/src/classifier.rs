//! The fused classifier (`kernels/classifier.cu`): cross-entropy of logits `[N, V]` against
//! int64 targets, PyTorch's `F.cross_entropy(logits, target, ignore_index, reduction)`, with
//! its backward, the two fused in one kernel as llm.c does for GPT-2 training
//! ([`gpu_cross_entropy_fused`]), and their CPU twins.
//!
//! **Semantics.** Row `n` of `V` logits `x` (rows `stride` elements apart) with target `t`:
//! `m = max x` (NaN when any is), `s = sum exp(x - m)`, `lse = m + ln s` when `m` is finite
//! (else NaN, as PyTorch's `log_softmax`, whose `x - m` is NaN at an infinite maximum: a row
//! holding `+inf`, or only `-inf`, has a NaN loss and gradient), `loss = lse - x[t]`, and the gradient `dlogits_j = (p_j - [j == t]) g` with
//! `p_j = exp(x_j - lse)` (NaN when `lse` is not finite) and `g` the row's scale: `dloss[n]`
//! ([`Reduction::None`]), `dloss` ([`Reduction::Sum`]) or `dloss / count`
//! ([`Reduction::Mean`], `count` the rows whose target is not `ignore_index`). A row whose
//! target is `ignore_index` has loss 0 and gradient exactly 0; `Mean` of no such row is NaN
//! (0 / 0, as PyTorch). The twins refuse a target outside `[0, V)` (other than
//! `ignore_index`) with [`Error::IndexOutOfRange`] before writing anything; the kernels never
//! read it: they write NaN loss and gradient for the row and the smallest such row index into
//! a status word (an i64 the caller initialises to -1). `lse` (f32 on the GPU) is written for
//! every row and is what the backward reads. f64 computes in f64 (twins only), f32, f16 and
//! bf16 in f32; each gradient is rounded once to the logits' type.
//!
//! **In place.** The backward and the fused kernel may write the gradient over the logits
//! (llm.c's trick: the logits are not needed again): [`LogitsGrad::InPlace`] on the GPU,
//! [`cross_entropy_backward_in_place`] and [`cross_entropy_fused_in_place`] on the CPU. The
//! kernels finish reading a row before writing its gradient, and each element is read and
//! written by one thread.
//!
//! **Twin bound.** The twins take `m`, then sum `s` in order in f64 (rounded once to the
//! accumulator); the kernels build `(m, s)` online and merge the states in a tree, with CUDA's
//! `exp2f`/`expf`/`logf` (2, 2 and 1 ulp; `exp(x - m)` as `exp2f(fma(x, log2 e, -m log2 e))`,
//! whose argument rounds once: within the bound's `|m|` term; the statistics take `exp2f`'s
//! instruction alone, which gives 0 where `exp2f` gives a subnormal, less than `2^-126` added
//! to a sum of at least 1). With `u = 2^-24` and `k = 8 + 2 sqrt(V)`, `lse` (and the
//! loss) agree within `d = k u (1 + |m| + |ln s|)` (the softmax bound of `softmax.rs`); a
//! gradient within `|g| (p (d + 4u) + u |p - [j == t]|)` before its rounding to `T`, and one
//! ulp of `T` after; `Sum`/`Mean` are summed in f64 on both sides (the kernel in a tree), so
//! they agree within the per-row bound plus one f32 rounding. Special values agree exactly.
//! `tests/gpu_classifier.rs` checks this bound; `tests/emu/fused_run.sh` runs the kernels' source
//! on the CPU (threads for CUDA threads, under AddressSanitizer) against an f64 reference.
//!
//! **Speed.** A block a row, of up to 512 threads (four 16-byte chunks a thread, at least a
//! warp: `row_threads`); the statistics take one multiply-add and one
//! `exp2f` an element (the running maximum moves once a 16-byte chunk, four independent
//! states a thread, eight chunks loaded at once); the fused kernel reads a row twice and
//! writes it once, with 16-byte vectors when the buffers and row
//! strides are 16-byte aligned (any `V`: a partial last chunk goes element by element); rows
//! that are not aligned (an odd `V` of 16-bit logits) fold element by element (the same
//! chunks, so the same bits), and write the gradient's aligned middle as vectors where the
//! logits and the gradient are equally misaligned (the rest one by one, consecutive elements
//! to consecutive threads).
//! `Mean` adds a one-block count of the targets before the gradient (`ce_count`).
//!
//! **Reproducibility.** Every kernel folds a row's elements in the same order whatever the
//! alignment (16-byte chunks, each thread its own chunks), so the forward, the backward from
//! its `lse`, the fused kernel, in place or not, give the same bits for a row; two runs give
//! the same bits (the count is an integer, the sum a fixed tree).

#[cfg(feature = "cuda")]
use crate::Element;
use crate::{Error, Result};

const OP: &str = "cross_entropy";

fn unsupported(reason: impl Into<String>) -> Error {
    Error::Unsupported {
        op: OP,
        reason: reason.into(),
    }
}

/// PyTorch's default `ignore_index`.
pub const IGNORE_INDEX: i64 = -100;

pub use crate::real::{FusedElement, Real};

/// How the per-row losses combine (PyTorch's `reduction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// One loss a row; `dloss` has one value a row.
    None,
    /// The sum of the rows' losses; `dloss` is one value.
    Sum,
    /// The sum over the count of rows whose target is not `ignore_index`; `dloss` is one value.
    Mean,
}

impl Reduction {
    /// The kernels' `mode`.
    #[cfg(feature = "cuda")]
    const fn code(self) -> i32 {
        match self {
            Reduction::None => 0,
            Reduction::Sum => 1,
            Reduction::Mean => 2,
        }
    }

    /// Values of `dloss` for `rows` rows.
    pub const fn dloss_len(self, rows: usize) -> usize {
        match self {
            Reduction::None => rows,
            _ => 1,
        }
    }
}

/// The problem: `rows` rows of `classes` logits, `stride` elements apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClassifierShape {
    /// Rows (`N`).
    pub rows: usize,
    /// Logits a row (`V`, at least 1).
    pub classes: usize,
    /// Elements from a row of the logits to the next (at least `classes`).
    pub stride: usize,
    /// The target value whose rows are skipped.
    pub ignore_index: i64,
}

impl ClassifierShape {
    /// Contiguous rows, `ignore_index = -100`.
    pub const fn new(rows: usize, classes: usize) -> ClassifierShape {
        ClassifierShape {
            rows,
            classes,
            stride: classes,
            ignore_index: IGNORE_INDEX,
        }
    }

    /// Elements a buffer of these rows `stride` apart spans: `(rows - 1) stride + classes`.
    pub fn span_len(&self, stride: usize) -> Result<usize> {
        if self.rows == 0 {
            return Ok(0);
        }
        (self.rows - 1)
            .checked_mul(stride)
            .and_then(|v| v.checked_add(self.classes))
            .ok_or_else(|| unsupported("shape overflows"))
    }

    /// Checks the shape (`classes >= 1`, strides at least `classes`) and the lengths of the
    /// logits (rows `stride` apart), an output of rows `out_stride` apart, and the targets.
    fn check(&self, logits: usize, out: Option<(usize, usize)>, targets: usize) -> Result<()> {
        if self.classes == 0 {
            return Err(unsupported("no classes (V = 0)"));
        }
        let strides = std::iter::once(self.stride).chain(out.map(|o| o.0));
        if let Some(s) = strides.clone().find(|&s| s < self.classes) {
            return Err(unsupported(format!(
                "row stride {s} is less than the {} classes (rows overlap)",
                self.classes
            )));
        }
        let mut need = vec![(self.span_len(self.stride)?, logits)];
        if let Some((stride, len)) = out {
            need.push((self.span_len(stride)?, len));
        }
        need.push((self.rows, targets));
        short(&need)
    }
}

/// [`Error::LengthMismatch`] for the first `(needed, got)` with `got < needed`.
fn short(need: &[(usize, usize)]) -> Result<()> {
    match need.iter().find(|(n, g)| g < n) {
        Some(&(expected, got)) => Err(Error::LengthMismatch {
            op: OP,
            expected,
            got,
        }),
        None => Ok(()),
    }
}

/// What a row's target says: a class, ignored, or [`Error::IndexOutOfRange`] for the first bad
/// row.
fn check_targets(shape: &ClassifierShape, targets: &[i64]) -> Result<()> {
    for (n, &t) in targets[..shape.rows].iter().enumerate() {
        if t != shape.ignore_index && (t < 0 || t as u64 >= shape.classes as u64) {
            return Err(Error::IndexOutOfRange {
                op: OP,
                position: n,
                value: t,
                size: shape.classes as i64,
            });
        }
    }
    Ok(())
}

/// The larger of `a` and `b`, NaN when either is NaN.
#[inline]
fn nanmax<A: Real>(a: A, b: A) -> A {
    #[allow(clippy::eq_op)]
    let a_nan = a != a;
    if a > b || a_nan { a } else { b }
}

/// The twins' `lse` of a row: `m`, then the sum of `exp(x - m)` in order in f64.
fn row_lse<T: FusedElement>(row: &[T]) -> T::Acc {
    let m = row.iter().fold(T::Acc::of_f64(f64::NEG_INFINITY), |a, &x| {
        nanmax(a, x.acc())
    });
    if !m.finite() {
        return T::Acc::of_f64(f64::NAN);
    }
    let s: f64 = row.iter().map(|&x| (x.acc() - m).exp().to_f64()).sum();
    m + T::Acc::of_f64(s).ln()
}

/// The rows' gradient scales `g` (NaN never: targets are checked first).
fn scales<A: Real>(
    shape: &ClassifierShape,
    reduction: Reduction,
    targets: &[i64],
    dloss: &[A],
) -> Result<Vec<A>> {
    short(&[(reduction.dloss_len(shape.rows), dloss.len())])?;
    let count = targets[..shape.rows]
        .iter()
        .filter(|&&t| t != shape.ignore_index)
        .count();
    Ok((0..shape.rows)
        .map(|n| match reduction {
            Reduction::None => dloss[n],
            Reduction::Sum => dloss[0],
            Reduction::Mean => dloss[0] / A::of_f64(count as f64),
        })
        .collect())
}

/// Writes the gradient of `row` (target `t`, `lse`, scale `g`) into `out` (may be `row`'s
/// own storage: each element is read before it is written).
#[inline]
fn grad_row<T: FusedElement>(
    x: impl Fn(usize) -> T,
    mut put: impl FnMut(usize, T),
    classes: usize,
    t: i64,
    ignore: i64,
    lse: T::Acc,
    g: T::Acc,
) {
    let zero = T::Acc::of_f64(0.0);
    for j in 0..classes {
        let d = if t == ignore {
            zero
        } else {
            let p = if lse.finite() {
                (x(j).acc() - lse).exp()
            } else {
                T::Acc::of_f64(f64::NAN)
            };
            let oh = T::Acc::of_f64(if j as i64 == t { 1.0 } else { 0.0 });
            (p - oh) * g
        };
        put(j, T::of_acc(d));
    }
}

/// CPU twin of `ce_fwd_<T>`: each row's loss (0 for an ignored row) and `lse` (see the module
/// documentation). `loss` and `lse` hold `rows` values. Nothing is written on error.
pub fn cross_entropy_forward<T: FusedElement>(
    shape: &ClassifierShape,
    logits: &[T],
    targets: &[i64],
    loss: &mut [T::Acc],
    lse: &mut [T::Acc],
) -> Result<()> {
    shape.check(logits.len(), None, targets.len())?;
    short(&[(shape.rows, loss.len()), (shape.rows, lse.len())])?;
    check_targets(shape, targets)?;
    for n in 0..shape.rows {
        let row = &logits[n * shape.stride..][..shape.classes];
        let l = row_lse(row);
        lse[n] = l;
        let t = targets[n];
        loss[n] = if t == shape.ignore_index {
            T::Acc::default()
        } else {
            l - row[t as usize].acc()
        };
    }
    Ok(())
}

/// CPU twin of `ce_reduce`: the `Sum` or `Mean` of per-row losses (ignored rows hold 0),
/// summed in f64 in order, divided by the count of rows not ignored (`Mean`), rounded once.
/// `Reduction::None` is refused.
pub fn cross_entropy_reduce<A: Real>(
    shape: &ClassifierShape,
    reduction: Reduction,
    loss: &[A],
    targets: &[i64],
) -> Result<A> {
    short(&[(shape.rows, loss.len()), (shape.rows, targets.len())])?;
    let s: f64 = loss[..shape.rows].iter().map(|v| v.to_f64()).sum();
    let count = targets[..shape.rows]
        .iter()
        .filter(|&&t| t != shape.ignore_index)
        .count();
    match reduction {
        Reduction::None => Err(unsupported("reduce with reduction none")),
        Reduction::Sum => Ok(A::of_f64(s)),
        Reduction::Mean => Ok(A::of_f64(s / count as f64)),
    }
}

/// CPU twin of `ce_bwd_<T>`: the gradient of the logits from the forward's `lse`, into
/// `dlogits` (rows `out_stride` apart; elements between rows are not written). `dloss` holds
/// [`Reduction::dloss_len`] values. Nothing is written on error.
#[allow(clippy::too_many_arguments)]
pub fn cross_entropy_backward<T: FusedElement>(
    shape: &ClassifierShape,
    reduction: Reduction,
    logits: &[T],
    targets: &[i64],
    lse: &[T::Acc],
    dloss: &[T::Acc],
    dlogits: &mut [T],
    out_stride: usize,
) -> Result<()> {
    shape.check(
        logits.len(),
        Some((out_stride, dlogits.len())),
        targets.len(),
    )?;
    short(&[(shape.rows, lse.len())])?;
    check_targets(shape, targets)?;
    let g = scales(shape, reduction, targets, dloss)?;
    for n in 0..shape.rows {
        let row = &logits[n * shape.stride..][..shape.classes];
        let out = &mut dlogits[n * out_stride..][..shape.classes];
        grad_row(
            |j| row[j],
            |j, v| out[j] = v,
            shape.classes,
            targets[n],
            shape.ignore_index,
            lse[n],
            g[n],
        );
    }
    Ok(())
}

/// [`cross_entropy_backward`] writing the gradient over the logits.
pub fn cross_entropy_backward_in_place<T: FusedElement>(
    shape: &ClassifierShape,
    reduction: Reduction,
    logits: &mut [T],
    targets: &[i64],
    lse: &[T::Acc],
    dloss: &[T::Acc],
) -> Result<()> {
    shape.check(logits.len(), None, targets.len())?;
    short(&[(shape.rows, lse.len())])?;
    check_targets(shape, targets)?;
    let g = scales(shape, reduction, targets, dloss)?;
    for n in 0..shape.rows {
        let row = &mut logits[n * shape.stride..][..shape.classes];
        let cell: &[std::cell::Cell<T>] = std::cell::Cell::from_mut(row).as_slice_of_cells();
        grad_row(
            |j| cell[j].get(),
            |j, v| cell[j].set(v),
            shape.classes,
            targets[n],
            shape.ignore_index,
            lse[n],
            g[n],
        );
    }
    Ok(())
}

/// CPU twin of `ce_fused_<T>`: [`cross_entropy_forward`] and [`cross_entropy_backward`] in one
/// call (the same values).
#[allow(clippy::too_many_arguments)]
pub fn cross_entropy_fused<T: FusedElement>(
    shape: &ClassifierShape,
    reduction: Reduction,
    logits: &[T],
    targets: &[i64],
    dloss: &[T::Acc],
    loss: &mut [T::Acc],
    lse: &mut [T::Acc],
    dlogits: &mut [T],
    out_stride: usize,
) -> Result<()> {
    shape.check(
        logits.len(),
        Some((out_stride, dlogits.len())),
        targets.len(),
    )?;
    short(&[(reduction.dloss_len(shape.rows), dloss.len())])?;
    cross_entropy_forward(shape, logits, targets, loss, lse)?;
    cross_entropy_backward(
        shape, reduction, logits, targets, lse, dloss, dlogits, out_stride,
    )
}

/// [`cross_entropy_fused`] writing the gradient over the logits.
pub fn cross_entropy_fused_in_place<T: FusedElement>(
    shape: &ClassifierShape,
    reduction: Reduction,
    logits: &mut [T],
    targets: &[i64],
    dloss: &[T::Acc],
    loss: &mut [T::Acc],
    lse: &mut [T::Acc],
) -> Result<()> {
    short(&[(reduction.dloss_len(shape.rows), dloss.len())])?;
    cross_entropy_forward(shape, logits, targets, loss, lse)?;
    cross_entropy_backward_in_place(shape, reduction, logits, targets, lse, dloss)
}

// ---------------------------------------------------------------------------------------------
// Launchers.

/// Bytes of device workspace the backward and fused launchers need (the target count of
/// `Mean`), 8-byte aligned.
pub const WORKSPACE_BYTES: usize = 8;

/// The most threads a block of the row kernels (`CE_THREADS`).
#[cfg(feature = "cuda")]
const THREADS: u32 = 512;

/// Threads a block of the row kernels for rows of `classes` elements of `elem` bytes: enough
/// for four 16-byte chunks a thread, from one warp to [`THREADS`]. A short row on a large block
/// leaves most threads idle through the block's merges (4,096 rows of 1,000 f32 took a 512-
/// thread block each); shorter blocks let more rows run at once. A function of the shape
/// alone, so the forward and the fused kernel fold a row in the same order.
#[cfg(feature = "cuda")]
fn row_threads(classes: u64, elem: u64) -> u32 {
    let chunks = classes.div_ceil(16 / elem.max(1));
    chunks
        .div_ceil(4)
        .next_power_of_two()
        .clamp(32, u64::from(THREADS)) as u32
}
/// The largest grid (blocks stride over the other rows).
#[cfg(feature = "cuda")]
const MAX_GRID: usize = 1 << 20;

/// The gradient's destination on the GPU.
#[cfg(feature = "cuda")]
#[derive(Debug)]
pub enum LogitsGrad<'a, T> {
    /// Read `logits` (rows [`ClassifierShape::stride`] apart), write `dlogits` (rows
    /// `out_stride` apart, at least `classes`; elements between rows are not written).
    Separate {
        /// The logits.
        logits: genesis_cuda::DeviceSpan<'a, T>,
        /// The gradient.
        dlogits: genesis_cuda::DeviceSpanMut<'a, T>,
        /// Elements between rows of `dlogits`.
        out_stride: usize,
    },
    /// The gradient overwrites the logits (same rows, same stride).
    InPlace(genesis_cuda::DeviceSpanMut<'a, T>),
}

/// The loss's gradient on the GPU: one value for every row (`Sum`, `Mean`; `None`: each row
/// gets it), or f32 on the device ([`Reduction::dloss_len`] values).
#[cfg(feature = "cuda")]
#[derive(Debug, Clone, Copy)]
pub enum LossGrad<'a> {
    /// A host value (1.0 for `loss.backward()` of a `Mean` or `Sum`).
    Value(f32),
    /// Device values.
    Device(genesis_cuda::DeviceSpan<'a, f32>),
}

/// The kernels' argument block (`CeArgs` in `kernels/classifier.cu`, field by field).
#[cfg(feature = "cuda")]
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Args {
    logits: u64,
    dlogits: u64,
    targets: u64,
    loss: u64,
    lse: u64,
    dloss: u64,
    count: u64,
    status: u64,
    out: u64,
    rows: u64,
    classes: u64,
    in_stride: u64,
    out_stride: u64,
    ignore: i64,
    dloss_value: f32,
    mode: i32,
}

#[cfg(feature = "cuda")]
const _: () = assert!(size_of::<Args>() == 120, "CeArgs is 120 bytes");

#[cfg(feature = "cuda")]
impl Args {
    fn new(shape: &ClassifierShape) -> Args {
        Args {
            rows: shape.rows as u64,
            classes: shape.classes as u64,
            in_stride: shape.stride as u64,
            out_stride: shape.stride as u64,
            ignore: shape.ignore_index,
            ..Args::default()
        }
    }

    /// Launches `name` on `blocks` blocks of `threads`.
    fn launch(
        &mut self,
        stream: &genesis_cuda::Stream,
        name: &'static str,
        blocks: usize,
        threads: u32,
    ) -> Result<()> {
        use genesis_cuda::{Kernel, LaunchConfig};
        let kernel = Kernel::get(stream.context(), &crate::images::CLASSIFIER, name)?;
        let mut params: [*mut std::ffi::c_void; 1] = [(&raw mut *self).cast()];
        let config = LaunchConfig::linear(blocks.clamp(1, MAX_GRID) as u32, threads);
        // SAFETY: every `ce_*` kernel takes one `CeArgs`, which `Args` mirrors; the launchers
        // check every span against the shape before calling this.
        unsafe { kernel.launch(stream, config, &mut params)? };
        Ok(())
    }

    /// Launches the row kernel `ce_<kind>_<T>[_v]`: `_v` when every row of the logits (and of
    /// the gradient when `grad`) starts 16-byte aligned.
    fn launch_rows<T: Element>(
        &mut self,
        stream: &genesis_cuda::Stream,
        kind: usize,
        grad: bool,
    ) -> Result<()> {
        let elem = size_of::<T>() as u64;
        let aligned =
            |addr: u64, stride: u64| addr.is_multiple_of(16) && (stride * elem).is_multiple_of(16);
        let vec = aligned(self.logits, self.in_stride)
            && (!grad || aligned(self.dlogits, self.out_stride));
        let names: [[&'static str; 6]; 3] = [
            [
                "ce_fwd_f32",
                "ce_fwd_f32_v",
                "ce_fwd_f16",
                "ce_fwd_f16_v",
                "ce_fwd_bf16",
                "ce_fwd_bf16_v",
            ],
            [
                "ce_bwd_f32",
                "ce_bwd_f32_v",
                "ce_bwd_f16",
                "ce_bwd_f16_v",
                "ce_bwd_bf16",
                "ce_bwd_bf16_v",
            ],
            [
                "ce_fused_f32",
                "ce_fused_f32_v",
                "ce_fused_f16",
                "ce_fused_f16_v",
                "ce_fused_bf16",
                "ce_fused_bf16_v",
            ],
        ];
        let t = match T::DTYPE {
            crate::DType::F32 => 0,
            crate::DType::F16 => 1,
            crate::DType::BF16 => 2,
            _ => unreachable!("checked by gpu_dtype"),
        };
        let threads = row_threads(self.classes, elem);
        self.launch(
            stream,
            names[kind][2 * t + usize::from(vec)],
            self.rows as usize,
            threads,
        )
    }
}

#[cfg(feature = "cuda")]
fn gpu_dtype<T: Element>() -> Result<()> {
    if matches!(
        T::DTYPE,
        crate::DType::F32 | crate::DType::F16 | crate::DType::BF16
    ) {
        Ok(())
    } else {
        Err(unsupported(format!(
            "element type {} on the GPU (f32, f16, bf16)",
            T::NAME
        )))
    }
}

/// Checks the status word, the workspace and the loss's gradient; fills them into `a`.
#[cfg(feature = "cuda")]
fn common_args(
    a: &mut Args,
    shape: &ClassifierShape,
    reduction: Reduction,
    dloss: Option<LossGrad<'_>>,
    workspace: Option<&genesis_cuda::DeviceSpanMut<'_, u8>>,
    status: &genesis_cuda::DeviceSpanMut<'_, i64>,
) -> Result<()> {
    short(&[(1, status.len())])?;
    a.status = status.addr();
    a.mode = reduction.code();
    match dloss {
        Some(LossGrad::Value(v)) => a.dloss_value = v,
        Some(LossGrad::Device(d)) => {
            short(&[(reduction.dloss_len(shape.rows), d.len())])?;
            a.dloss = d.addr();
        }
        None => {}
    }
    if let Some(ws) = workspace {
        short(&[(WORKSPACE_BYTES, ws.len())])?;
        if !ws.addr().is_multiple_of(8) {
            return Err(unsupported("the workspace is not 8-byte aligned"));
        }
        a.count = ws.addr();
    }
    Ok(())
}

/// Queues the forward on `stream`: each row's loss and `lse` (f32, `rows` each) of the logits
/// (rows `shape.stride` apart), bad targets into `status[0]` (see the module documentation;
/// the caller sets it to -1 and reads it after the stream). Combine the losses with
/// [`gpu_cross_entropy_reduce`]. f32, f16, bf16.
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
pub fn gpu_cross_entropy_forward<T: Element>(
    stream: &genesis_cuda::Stream,
    shape: &ClassifierShape,
    logits: genesis_cuda::DeviceSpan<'_, T>,
    targets: genesis_cuda::DeviceSpan<'_, i64>,
    loss: genesis_cuda::DeviceSpanMut<'_, f32>,
    lse: genesis_cuda::DeviceSpanMut<'_, f32>,
    status: genesis_cuda::DeviceSpanMut<'_, i64>,
) -> Result<()> {
    gpu_dtype::<T>()?;
    shape.check(logits.len(), None, targets.len())?;
    short(&[(shape.rows, loss.len()), (shape.rows, lse.len())])?;
    let mut a = Args::new(shape);
    common_args(&mut a, shape, Reduction::None, None, None, &status)?;
    if shape.rows == 0 {
        return Ok(());
    }
    (a.logits, a.targets, a.loss, a.lse) = (logits.addr(), targets.addr(), loss.addr(), lse.addr());
    a.launch_rows::<T>(stream, 0, false)
}

/// Queues the `Sum` or `Mean` of the per-row losses (`rows` f32, as the forward writes them)
/// into `out[0]` on `stream` (one block; see [`cross_entropy_reduce`]). `None` is refused.
#[cfg(feature = "cuda")]
pub fn gpu_cross_entropy_reduce(
    stream: &genesis_cuda::Stream,
    shape: &ClassifierShape,
    reduction: Reduction,
    loss: genesis_cuda::DeviceSpan<'_, f32>,
    targets: genesis_cuda::DeviceSpan<'_, i64>,
    out: genesis_cuda::DeviceSpanMut<'_, f32>,
) -> Result<()> {
    if reduction == Reduction::None {
        return Err(unsupported("reduce with reduction none"));
    }
    short(&[
        (shape.rows, loss.len()),
        (shape.rows, targets.len()),
        (1, out.len()),
    ])?;
    let mut a = Args::new(shape);
    a.mode = reduction.code();
    (a.loss, a.targets, a.out) = (loss.addr(), targets.addr(), out.addr());
    a.launch(stream, "ce_reduce", 1, 1024)
}

/// Fills the logits' and gradient's addresses of `grad` into `a` after checking their lengths.
#[cfg(feature = "cuda")]
fn grad_args<T>(
    a: &mut Args,
    shape: &ClassifierShape,
    grad: &LogitsGrad<'_, T>,
    targets: usize,
) -> Result<()> {
    match grad {
        LogitsGrad::Separate {
            logits,
            dlogits,
            out_stride,
        } => {
            shape.check(logits.len(), Some((*out_stride, dlogits.len())), targets)?;
            (a.logits, a.dlogits, a.out_stride) =
                (logits.addr(), dlogits.addr(), *out_stride as u64);
        }
        LogitsGrad::InPlace(x) => {
            shape.check(x.len(), None, targets)?;
            (a.logits, a.dlogits) = (x.addr(), x.addr());
        }
    }
    Ok(())
}

/// Queues the backward on `stream`: the gradient of the logits from the forward's `lse`
/// (`rows` f32), into `grad`'s destination (see [`LogitsGrad`]); `Mean` first counts the
/// targets into `workspace` ([`WORKSPACE_BYTES`]). Bad targets go into `status[0]`.
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
pub fn gpu_cross_entropy_backward<T: Element>(
    stream: &genesis_cuda::Stream,
    shape: &ClassifierShape,
    reduction: Reduction,
    grad: LogitsGrad<'_, T>,
    targets: genesis_cuda::DeviceSpan<'_, i64>,
    lse: genesis_cuda::DeviceSpan<'_, f32>,
    dloss: LossGrad<'_>,
    workspace: genesis_cuda::DeviceSpanMut<'_, u8>,
    status: genesis_cuda::DeviceSpanMut<'_, i64>,
) -> Result<()> {
    gpu_dtype::<T>()?;
    let mut a = Args::new(shape);
    grad_args(&mut a, shape, &grad, targets.len())?;
    short(&[(shape.rows, lse.len())])?;
    common_args(
        &mut a,
        shape,
        reduction,
        Some(dloss),
        Some(&workspace),
        &status,
    )?;
    if shape.rows == 0 {
        return Ok(());
    }
    (a.targets, a.lse) = (targets.addr(), lse.addr());
    if reduction == Reduction::Mean {
        a.launch(stream, "ce_count", 1, 1024)?;
    }
    a.launch_rows::<T>(stream, 1, true)
}

/// Queues the fused forward and backward on `stream` (training): each row's loss and `lse`
/// (f32) and the gradient of the logits into `grad`'s destination ([`LogitsGrad::InPlace`]
/// as llm.c), in one kernel (after a one-block count of the targets into `workspace` for
/// `Mean`). The same values as [`gpu_cross_entropy_forward`] then
/// [`gpu_cross_entropy_backward`]; the scalar loss is [`gpu_cross_entropy_reduce`] of `loss`.
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
pub fn gpu_cross_entropy_fused<T: Element>(
    stream: &genesis_cuda::Stream,
    shape: &ClassifierShape,
    reduction: Reduction,
    grad: LogitsGrad<'_, T>,
    targets: genesis_cuda::DeviceSpan<'_, i64>,
    dloss: LossGrad<'_>,
    loss: genesis_cuda::DeviceSpanMut<'_, f32>,
    lse: genesis_cuda::DeviceSpanMut<'_, f32>,
    workspace: genesis_cuda::DeviceSpanMut<'_, u8>,
    status: genesis_cuda::DeviceSpanMut<'_, i64>,
) -> Result<()> {
    gpu_dtype::<T>()?;
    let mut a = Args::new(shape);
    grad_args(&mut a, shape, &grad, targets.len())?;
    short(&[(shape.rows, loss.len()), (shape.rows, lse.len())])?;
    common_args(
        &mut a,
        shape,
        reduction,
        Some(dloss),
        Some(&workspace),
        &status,
    )?;
    if shape.rows == 0 {
        return Ok(());
    }
    (a.targets, a.loss, a.lse) = (targets.addr(), loss.addr(), lse.addr());
    if reduction == Reduction::Mean {
        a.launch(stream, "ce_count", 1, 1024)?;
    }
    a.launch_rows::<T>(stream, 2, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// PyTorch's definition, naively in f64: log_softmax, then nll.
    fn naive(shape: &ClassifierShape, x: &[f64], targets: &[i64]) -> (Vec<f64>, Vec<f64>) {
        let mut loss = vec![0.0; shape.rows];
        let mut lse = vec![0.0; shape.rows];
        for n in 0..shape.rows {
            let row = &x[n * shape.stride..][..shape.classes];
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            lse[n] = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
            if targets[n] != shape.ignore_index {
                loss[n] = lse[n] - row[targets[n] as usize];
            }
        }
        (loss, lse)
    }

    fn case(
        rng: &mut SmallRng,
        rows: usize,
        v: usize,
        stride: usize,
    ) -> (ClassifierShape, Vec<f64>, Vec<i64>) {
        let shape = ClassifierShape {
            stride,
            ..ClassifierShape::new(rows, v)
        };
        let x: Vec<f64> = (0..shape.span_len(stride).unwrap())
            .map(|_| rng.random_range(-4.0..4.0))
            .collect();
        let targets = (0..rows)
            .map(|n| {
                if n % 5 == 2 {
                    IGNORE_INDEX
                } else {
                    rng.random_range(0..v as i64)
                }
            })
            .collect();
        (shape, x, targets)
    }

    #[test]
    fn forward_matches_naive() {
        let mut rng = SmallRng::seed_from_u64(1);
        for (rows, v, stride) in [(1, 1, 1), (7, 3, 3), (9, 50, 64), (4, 1000, 1001)] {
            let (shape, x, targets) = case(&mut rng, rows, v, stride);
            let (want_loss, want_lse) = naive(&shape, &x, &targets);
            let (mut loss, mut lse) = (vec![0.0; rows], vec![0.0; rows]);
            cross_entropy_forward(&shape, &x, &targets, &mut loss, &mut lse).unwrap();
            for n in 0..rows {
                assert!((loss[n] - want_loss[n]).abs() < 1e-12, "{n}");
                assert!((lse[n] - want_lse[n]).abs() < 1e-12, "{n}");
            }
            // f32, f16, bf16 widen exactly and compute in f32.
            let xf: Vec<f32> = x.iter().map(|&v| v as f32).collect();
            let (mut lf, mut sf) = (vec![0f32; rows], vec![0f32; rows]);
            cross_entropy_forward(&shape, &xf, &targets, &mut lf, &mut sf).unwrap();
            let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f64(v)).collect();
            let (mut lb, mut sb) = (vec![0f32; rows], vec![0f32; rows]);
            cross_entropy_forward(&shape, &xb, &targets, &mut lb, &mut sb).unwrap();
            for n in 0..rows {
                assert!((f64::from(lf[n]) - want_loss[n]).abs() < 1e-5);
                assert!((f64::from(lb[n]) - want_loss[n]).abs() < 0.1);
            }
            let s = cross_entropy_reduce(&shape, Reduction::Sum, &loss, &targets).unwrap();
            let m = cross_entropy_reduce(&shape, Reduction::Mean, &loss, &targets).unwrap();
            let count = targets.iter().filter(|&&t| t != IGNORE_INDEX).count();
            assert!((s - want_loss.iter().sum::<f64>()).abs() < 1e-9);
            assert!((m - s / count as f64).abs() < 1e-12 || count == 0);
        }
    }

    /// The twins' gradient against central differences of the f64 loss (all reductions,
    /// ignored rows, strided rows, in place and not).
    #[test]
    fn gradient_check() {
        let mut rng = SmallRng::seed_from_u64(2);
        for (rows, v, stride) in [(6, 5, 7), (5, 17, 17)] {
            let (shape, x, targets) = case(&mut rng, rows, v, stride);
            for reduction in [Reduction::None, Reduction::Sum, Reduction::Mean] {
                let dloss: Vec<f64> = (0..reduction.dloss_len(rows))
                    .map(|_| rng.random_range(0.5..2.0))
                    .collect();
                // The scalar L = sum_n w_n loss_n whose gradient the backward computes.
                let total = |x: &[f64]| -> f64 {
                    let (mut loss, mut lse) = (vec![0.0; rows], vec![0.0; rows]);
                    cross_entropy_forward(&shape, x, &targets, &mut loss, &mut lse).unwrap();
                    match reduction {
                        Reduction::None => loss.iter().zip(&dloss).map(|(l, g)| l * g).sum(),
                        _ => {
                            dloss[0]
                                * cross_entropy_reduce(&shape, reduction, &loss, &targets).unwrap()
                        }
                    }
                };
                let (mut loss, mut lse) = (vec![0.0; rows], vec![0.0; rows]);
                let mut dx = vec![7.0; x.len()];
                cross_entropy_fused(
                    &shape, reduction, &x, &targets, &dloss, &mut loss, &mut lse, &mut dx, stride,
                )
                .unwrap();
                let mut inplace = x.clone();
                let (mut loss2, mut lse2) = (vec![0.0; rows], vec![0.0; rows]);
                cross_entropy_fused_in_place(
                    &shape,
                    reduction,
                    &mut inplace,
                    &targets,
                    &dloss,
                    &mut loss2,
                    &mut lse2,
                )
                .unwrap();
                assert_eq!(loss, loss2);
                for (n, &tn) in targets.iter().enumerate() {
                    for j in 0..stride {
                        let at = n * stride + j;
                        if at >= x.len() {
                            continue;
                        }
                        if j >= v {
                            // Gaps between rows are not written.
                            assert_eq!(dx[at], 7.0);
                            assert_eq!(inplace[at], x[at]);
                            continue;
                        }
                        let h = 1e-6;
                        let (mut a, mut b) = (x.clone(), x.clone());
                        a[at] += h;
                        b[at] -= h;
                        let numeric = (total(&a) - total(&b)) / (2.0 * h);
                        assert!(
                            (dx[at] - numeric).abs() < 1e-7,
                            "{reduction:?} ({n}, {j}): {} vs {numeric}",
                            dx[at]
                        );
                        assert_eq!(inplace[at], dx[at]);
                        if tn == IGNORE_INDEX {
                            assert_eq!(dx[at], 0.0);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn special_values_and_mean_of_nothing() {
        let shape = ClassifierShape::new(3, 2);
        let x = [
            f32::NAN,
            0.0,
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
            1.0,
            2.0,
        ];
        let t = [0, 1, IGNORE_INDEX];
        let (mut loss, mut lse) = ([0f32; 3], [0f32; 3]);
        cross_entropy_forward(&shape, &x, &t, &mut loss, &mut lse).unwrap();
        assert!(loss[0].is_nan() && lse[0].is_nan());
        // Only -inf, and (below) a +inf: NaN, as PyTorch's log_softmax.
        assert!(loss[1].is_nan() && lse[1].is_nan());
        assert_eq!(loss[2], 0.0);
        let inf = [f32::INFINITY, 0.0];
        let s1 = ClassifierShape::new(1, 2);
        for target in [0, 1] {
            let (mut l1, mut e1) = ([0f32; 1], [0f32; 1]);
            cross_entropy_forward(&s1, &inf, &[target], &mut l1, &mut e1).unwrap();
            assert!(
                l1[0].is_nan() && e1[0].is_nan(),
                "+inf row, target {target}"
            );
        }
        let mut dx = [1f32; 6];
        cross_entropy_backward(&shape, Reduction::Sum, &x, &t, &lse, &[1.0], &mut dx, 2).unwrap();
        assert!(dx[..4].iter().all(|v| v.is_nan()));
        assert_eq!(&dx[4..], &[0.0, 0.0]);
        let all_ignored = [IGNORE_INDEX; 3];
        cross_entropy_forward(&shape, &x, &all_ignored, &mut loss, &mut lse).unwrap();
        let m = cross_entropy_reduce(&shape, Reduction::Mean, &loss, &all_ignored).unwrap();
        assert!(m.is_nan());
        let g: Vec<f16> = vec![f16::from_f32(1.0); 4];
        let mut dg = vec![f16::ZERO; 4];
        let s2 = ClassifierShape::new(2, 2);
        let (mut l2, mut e2) = ([0f32; 2], [0f32; 2]);
        cross_entropy_fused(
            &s2,
            Reduction::Mean,
            &g,
            &[0, 1],
            &[1.0],
            &mut l2,
            &mut e2,
            &mut dg,
            2,
        )
        .unwrap();
        // p = 1/2 each: (0.5 - 1) / 2 and 0.5 / 2.
        assert_eq!(dg[0].to_f32(), -0.25);
        assert_eq!(dg[1].to_f32(), 0.25);
        assert!((l2[0] - std::f32::consts::LN_2).abs() < 1e-6);
    }

    #[test]
    fn bad_input() {
        let shape = ClassifierShape::new(2, 3);
        let x = [0f32; 6];
        let (mut loss, mut lse) = ([0f32; 2], [0f32; 2]);
        let mut fwd = |shape: &ClassifierShape, x: &[f32], t: &[i64]| {
            cross_entropy_forward(shape, x, t, &mut loss, &mut lse)
        };
        assert!(fwd(&shape, &x, &[0, 1]).is_ok());
        assert!(matches!(
            fwd(&shape, &x, &[0, 3]),
            Err(Error::IndexOutOfRange {
                position: 1,
                value: 3,
                size: 3,
                ..
            })
        ));
        assert!(fwd(&shape, &x, &[-1, 0]).is_err());
        assert!(fwd(&shape, &x[..5], &[0, 1]).is_err());
        assert!(fwd(&shape, &x, &[0]).is_err());
        assert!(fwd(&ClassifierShape::new(2, 0), &x, &[0, 0]).is_err());
        let strided = ClassifierShape { stride: 2, ..shape };
        assert!(fwd(&strided, &x, &[0, 1]).is_err());
        let huge = ClassifierShape {
            stride: usize::MAX,
            ..shape
        };
        assert!(fwd(&huge, &x, &[0, 1]).is_err());
        // Nothing written on error.
        let mut dx = [5f32; 6];
        assert!(
            cross_entropy_backward(
                &shape,
                Reduction::Sum,
                &x,
                &[0, 9],
                &lse,
                &[1.0],
                &mut dx,
                3
            )
            .is_err()
        );
        assert_eq!(dx, [5.0; 6]);
        assert!(
            cross_entropy_backward(
                &shape,
                Reduction::None,
                &x,
                &[0, 1],
                &lse,
                &[1.0],
                &mut dx,
                3
            )
            .is_err()
        );
        assert!(
            cross_entropy_backward(
                &shape,
                Reduction::Sum,
                &x,
                &[0, 1],
                &lse,
                &[1.0],
                &mut dx,
                2
            )
            .is_err()
        );
        assert!(cross_entropy_reduce(&shape, Reduction::None, &loss, &[0, 1]).is_err());
        // Empty problems are fine.
        let empty = ClassifierShape::new(0, 3);
        assert!(cross_entropy_forward::<f32>(&empty, &[], &[], &mut [], &mut []).is_ok());
    }
}
