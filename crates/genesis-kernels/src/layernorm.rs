//! LayerNorm with a fused residual add (`kernels/layernorm.cu`), as GPT-2 training uses it
//! (llm.c's `fused_residual_forward` and `layernorm_backward`), and its CPU twins.
//!
//! **Semantics** (PyTorch's `F.layer_norm` over the last dim, rows contiguous `[N, C]`): the
//! forward optionally first forms the residual stream `h = x + r` (rounded to `T`, written
//! out: the backward and the next block read it), then `mean = h0 + sum (h - h0) / C` (`h0`
//! the row's first `h`: a row of equal values has its mean exactly, where `sum h` rounded to
//! f32 would land ulps off and the variance take them for spread),
//! `var = sum (h - mean)^2 / C` (biased), `rstd = 1 / sqrt(var + eps)`,
//! `y = (h - mean) rstd w + b` (`w`, `b` of `[C]` in `T`, each optional), and saves `mean` and
//! `rstd` (f32 `[N]` on the GPU). The backward takes `dy`, `h`, `w`, `mean`, `rstd`:
//! `n = (h - mean) rstd`, `dn = dy w`,
//! `dh = rstd ((dn - sum dn / C) - n sum (dn n) / C)`, `dw = sum_rows dy n`, `db = sum_rows dy`.
//!
//! **Accumulation** ([`Accumulate`]): `dh` may be added to the buffer's contents instead of
//! overwriting it (llm.c's residual gradient: the residual stream's gradient arrives from
//! both the block's output and the layer norm), and `dw`, `db` likewise (gradient
//! accumulation over micro-batches). The addition is in f32, rounded once to `T`.
//!
//! **Determinism.** `dw` and `db` are summed without atomics: the backward's block `g` owns a
//! fixed run of rows (the split depends on `N` only: [`backward_rows_per_block`]) and writes
//! its f32 partial sums to a workspace ([`backward_workspace_bytes`]); a second kernel adds
//! the partials in block order. Every result is bit-reproducible.
//!
//! **Twin bound.** f32, f16 and bf16 compute in f32 (f64 in f64, twins only); the twins sum in
//! order in f64 (rounded once to the accumulator), the kernels in f32 trees. With `u = 2^-24`
//! and `k = 8 + 2 sqrt(C)`: `mean` within `k u mean|h - h0| + u |mean|`, `rstd` relatively
//! within `2 k u` (plus the effect of `mean`'s error on `var`), `y` within `|w| (|n| 2 k u +
//! rstd (k u mean|h - h0| + u |mean|))` before its rounding to `T` (one ulp of `T` after); `dh` within
//! `rstd (k u (mean|dn| + |n| mean|dn n|) + |n| 2 k u |mean(dn n)|) + |dh| 2 k u` before
//! rounding; `dw`, `db` within `(8 + 2 sqrt(N)) u sum_rows |dy n|` (`|dy|`). `h` is the same
//! single rounding on both sides: identical. `tests/gpu_layernorm.rs` checks this bound (with
//! a factor of safety); `tests/emu/fused_run.sh` runs the kernels' source on the CPU (threads
//! for CUDA threads, under AddressSanitizer) against an f64 reference.
//!
//! **Speed.** Forward: a block a row, `h` cached in shared memory, global memory read once
//! and written once (16-byte vectors when every operand is 16-byte aligned and `C` is a
//! multiple of `16 / size`). Backward: `dy` and `h` read twice (the second time mostly from
//! L1), `dh` written once, the partials `2 C` floats (`3 C` with the column sums) a block of
//! [`backward_rows_per_block`] rows. `C` up to [`MAX_COLS`].

#[cfg(feature = "cuda")]
use crate::Element;
use crate::real::{FusedElement, Real};
use crate::{Error, Result};

const OP: &str = "layer_norm";

fn unsupported(reason: impl Into<String>) -> Error {
    Error::Unsupported {
        op: OP,
        reason: reason.into(),
    }
}

/// The largest `C` the kernels take (the backward keeps `2 C` f32 partials in 96 KiB of
/// shared memory).
pub const MAX_COLS: usize = 12 * 1024;

/// The most columns whose sums [`gpu_layer_norm_backward_copy`] forms alongside (its three
/// rows of partials in shared memory: 96 KiB, within every supported GPU's limit).
pub const MAX_SUM_COLS: usize = 8 * 1024;

/// The problem: `rows` rows of `cols` elements, contiguous.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerNormShape {
    /// Rows (`N`).
    pub rows: usize,
    /// Elements a row (`C`, at least 1).
    pub cols: usize,
    /// Added to the variance inside the square root (the kernels take it as f32).
    pub eps: f64,
}

impl LayerNormShape {
    /// `rows` rows of `cols` with PyTorch's default `eps = 1e-5`.
    pub const fn new(rows: usize, cols: usize) -> LayerNormShape {
        LayerNormShape {
            rows,
            cols,
            eps: 1e-5,
        }
    }

    /// Elements of `[rows, cols]`; refuses `cols == 0`, overflow and a negative or non-finite
    /// `eps`.
    pub fn numel(&self) -> Result<usize> {
        if self.cols == 0 {
            return Err(unsupported("no columns (C = 0)"));
        }
        if !(self.eps >= 0.0 && self.eps.is_finite()) {
            return Err(unsupported(format!("eps {} (finite, >= 0)", self.eps)));
        }
        self.rows
            .checked_mul(self.cols)
            .ok_or_else(|| unsupported("shape overflows"))
    }
}

/// Which gradients the backward adds to their buffers instead of overwriting them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Accumulate {
    /// `dh += ...` (llm.c's residual gradient).
    pub dh: bool,
    /// `dw += ...`, `db += ...`.
    pub params: bool,
}

/// [`Error::LengthMismatch`] for the first `(needed, got)` with `got != needed`.
fn exact(need: &[(usize, usize)]) -> Result<()> {
    match need.iter().find(|(n, g)| g != n) {
        Some(&(expected, got)) => Err(Error::LengthMismatch {
            op: OP,
            expected,
            got,
        }),
        None => Ok(()),
    }
}

/// `sum` (f64, in order) as the accumulator, times `1 / C` as the kernels do.
#[inline]
fn mean_of<A: Real>(sum: f64, inv_c: A) -> A {
    A::of_f64(sum) * inv_c
}

/// CPU twin of `ln_fwd_<T>` (and `ln_fwd_f32_<O>`): `y`, `mean`, `rstd` of `x`
/// (`[rows, cols]`), or of `h = x + r` when `residual` is `(r, h)` (then `h` is written). `w`,
/// `b` hold `cols` values. `y` may be of a narrower type `O` than the rows (f32 rows, f16 or
/// bf16 `y`: rounded once from the f32 value). Nothing is written on error.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_forward<T: FusedElement, O: FusedElement<Acc = T::Acc>>(
    shape: &LayerNormShape,
    x: &[T],
    residual: Option<(&[T], &mut [T])>,
    w: Option<&[T]>,
    b: Option<&[T]>,
    y: &mut [O],
    mean: &mut [T::Acc],
    rstd: &mut [T::Acc],
) -> Result<()> {
    forward_twin(shape, x, residual, w, b, y, mean, rstd)
}

/// CPU twin of `ln_fwd_<T>` with a residual (and `ln_fwd_f32_<O>_r`): `h = x + r` written
/// (`r` of the rows' type or, for f32 rows, of `y`'s narrower type, widened exactly before
/// the f32 add: PyTorch's mixed-dtype add), then `y`, `mean`, `rstd` of `h` as
/// [`layer_norm_forward`]. Nothing is written on error.
#[allow(clippy::too_many_arguments)]
pub fn add_layer_norm_forward<T, O, R>(
    shape: &LayerNormShape,
    x: &[T],
    r: &[R],
    h: &mut [T],
    w: Option<&[T]>,
    b: Option<&[T]>,
    y: &mut [O],
    mean: &mut [T::Acc],
    rstd: &mut [T::Acc],
) -> Result<()>
where
    T: FusedElement,
    O: FusedElement<Acc = T::Acc>,
    R: FusedElement<Acc = T::Acc>,
{
    forward_twin(shape, x, Some((r, h)), w, b, y, mean, rstd)
}

#[allow(clippy::too_many_arguments)]
fn forward_twin<T, O, R>(
    shape: &LayerNormShape,
    x: &[T],
    residual: Option<(&[R], &mut [T])>,
    w: Option<&[T]>,
    b: Option<&[T]>,
    y: &mut [O],
    mean: &mut [T::Acc],
    rstd: &mut [T::Acc],
) -> Result<()>
where
    T: FusedElement,
    O: FusedElement<Acc = T::Acc>,
    R: FusedElement<Acc = T::Acc>,
{
    let len = shape.numel()?;
    let (rows, c) = (shape.rows, shape.cols);
    let mut need = vec![
        (len, x.len()),
        (len, y.len()),
        (rows, mean.len()),
        (rows, rstd.len()),
    ];
    if let Some((r, h)) = &residual {
        need.extend([(len, r.len()), (len, h.len())]);
    }
    need.extend(w.map(|w| (c, w.len())));
    need.extend(b.map(|b| (c, b.len())));
    exact(&need)?;
    let one = T::Acc::of_f64(1.0);
    let inv_c = one / T::Acc::of_f64(c as f64);
    let eps = T::Acc::of_f64(shape.eps);
    // One row: `x` (and `r`, writing `h = x + r`) in, `y`, its mean and rstd out.
    let row = |hs: &mut Vec<T::Acc>,
               x: &[T],
               res: Option<(&[R], &mut [T])>,
               y: &mut [O],
               mean: &mut T::Acc,
               rstd: &mut T::Acc| {
        hs.clear();
        match res {
            Some((r, h)) => {
                for k in 0..c {
                    let v = T::of_acc(x[k].acc() + r[k].acc());
                    h[k] = v;
                    hs.push(v.acc());
                }
            }
            None => hs.extend(x.iter().map(|v| v.acc())),
        }
        // Shifted by the first value, as the kernels: a row of equal values has its mean
        // exactly.
        let h0 = hs.first().copied().unwrap_or(T::Acc::of_f64(0.0));
        let m = T::Acc::of_f64(hs.iter().map(|&v| (v - h0).to_f64()).sum()).fma(inv_c, h0);
        let var = mean_of(
            hs.iter()
                .map(|&v| {
                    let d = (v - m).to_f64();
                    d * d
                })
                .sum(),
            inv_c,
        );
        let r = one / (var + eps).sqrt();
        *mean = m;
        *rstd = r;
        for k in 0..c {
            let nv = (hs[k] - m) * r;
            let v = match (w, b) {
                (Some(w), Some(b)) => nv.fma(w[k].acc(), b[k].acc()),
                (Some(w), None) => nv * w[k].acc(),
                (None, Some(b)) => nv + b[k].acc(),
                (None, None) => nv,
            };
            y[k] = O::of_acc(v);
        }
    };
    // Rows are independent: over rayon's threads when there are many elements.
    use rayon::prelude::*;
    if len >= crate::softmax::PARALLEL_MIN {
        let stats = mean.par_iter_mut().zip(rstd.par_iter_mut());
        let rows = x.par_chunks(c).zip(y.par_chunks_mut(c)).zip(stats);
        match residual {
            Some((r, h)) => rows
                .zip(r.par_chunks(c).zip(h.par_chunks_mut(c)))
                .for_each_init(Vec::new, |hs, (((x, y), (m, s)), (r, h))| {
                    row(hs, x, Some((r, h)), y, m, s)
                }),
            None => rows.for_each_init(Vec::new, |hs, ((x, y), (m, s))| row(hs, x, None, y, m, s)),
        }
    } else {
        let mut hs = Vec::new();
        let rows = x
            .chunks(c)
            .zip(y.chunks_mut(c))
            .zip(mean.iter_mut().zip(rstd.iter_mut()));
        match residual {
            Some((r, h)) => {
                for (((x, y), (m, s)), (r, h)) in rows.zip(r.chunks(c).zip(h.chunks_mut(c))) {
                    row(&mut hs, x, Some((r, h)), y, m, s);
                }
            }
            None => {
                for ((x, y), (m, s)) in rows {
                    row(&mut hs, x, None, y, m, s);
                }
            }
        }
    }
    Ok(())
}

/// CPU twin of `ln_bwd_<T>` (and `ln_bwd_f32_<G>`) and `ln_params_<T>`: `dh` from `dy`, `h`,
/// `w` and the forward's `mean` and `rstd`, and `dw`, `db` when given (`cols` values each),
/// overwriting or adding to them as `acc` says. `dy` may be of a narrower type `G` than the
/// rows (f32 rows, f16 or bf16 `dy`). Nothing is written on error.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_backward<T: FusedElement, G: FusedElement<Acc = T::Acc>>(
    shape: &LayerNormShape,
    dy: &[G],
    h: &[T],
    w: Option<&[T]>,
    mean: &[T::Acc],
    rstd: &[T::Acc],
    dh: &mut [T],
    dw: Option<&mut [T]>,
    db: Option<&mut [T]>,
    acc: Accumulate,
) -> Result<()> {
    let len = shape.numel()?;
    let (rows, c) = (shape.rows, shape.cols);
    let mut need = vec![
        (len, dy.len()),
        (len, h.len()),
        (len, dh.len()),
        (rows, mean.len()),
        (rows, rstd.len()),
    ];
    need.extend(w.map(|w| (c, w.len())));
    need.extend(dw.as_ref().map(|v| (c, v.len())));
    need.extend(db.as_ref().map(|v| (c, v.len())));
    exact(&need)?;
    let inv_c = T::Acc::of_f64(1.0) / T::Acc::of_f64(c as f64);
    use rayon::prelude::*;
    let parallel = len >= crate::softmax::PARALLEL_MIN;
    // The input's gradient, row by row (rows over rayon's threads when many).
    let row = |sc: &mut (Vec<T::Acc>, Vec<T::Acc>),
               dy: &[G],
               h: &[T],
               dh: &mut [T],
               (m, r): (T::Acc, T::Acc)| {
        let (ns, dns) = sc;
        ns.clear();
        dns.clear();
        let (mut s1, mut s2) = (0f64, 0f64);
        for k in 0..c {
            let dyv = dy[k].acc();
            let n = (h[k].acc() - m) * r;
            let dn = match w {
                Some(w) => dyv * w[k].acc(),
                None => dyv,
            };
            ns.push(n);
            dns.push(dn);
            s1 += dn.to_f64();
            s2 += dn.to_f64() * n.to_f64();
        }
        let (ma, mb) = (mean_of(s1, inv_c), mean_of(s2, inv_c));
        for k in 0..c {
            let mut d = (-ns[k]).fma(mb, dns[k] - ma) * r;
            if acc.dh {
                d = d + dh[k].acc();
            }
            dh[k] = T::of_acc(d);
        }
    };
    let stats = |i: usize| (mean[i], rstd[i]);
    if parallel {
        dy.par_chunks(c)
            .zip(h.par_chunks(c))
            .zip(dh.par_chunks_mut(c))
            .enumerate()
            .for_each_init(
                || (Vec::new(), Vec::new()),
                |sc, (i, ((dy, h), dh))| row(sc, dy, h, dh, stats(i)),
            );
    } else {
        let mut sc = (Vec::new(), Vec::new());
        for (i, ((dy, h), dh)) in dy
            .chunks(c)
            .zip(h.chunks(c))
            .zip(dh.chunks_mut(c))
            .enumerate()
        {
            row(&mut sc, dy, h, dh, stats(i));
        }
    }
    // The parameters' gradients: each column summed over the rows in order (columns over
    // rayon's threads when many).
    let (mut sw, mut sb) = (vec![0f64; c], vec![0f64; c]);
    if dw.is_some() || db.is_some() {
        let column = |k: usize, (sw, sb): (&mut f64, &mut f64)| {
            for i in 0..rows {
                let dyv = dy[i * c + k].acc();
                let n = (h[i * c + k].acc() - mean[i]) * rstd[i];
                *sw += dyv.to_f64() * n.to_f64();
                *sb += dyv.to_f64();
            }
        };
        if parallel {
            sw.par_iter_mut()
                .zip(sb.par_iter_mut())
                .enumerate()
                .for_each(|(k, s)| column(k, s));
        } else {
            sw.iter_mut()
                .zip(sb.iter_mut())
                .enumerate()
                .for_each(|(k, s)| column(k, s));
        }
    }
    for (out, sums) in [(dw, &sw), (db, &sb)] {
        if let Some(out) = out {
            for (o, &s) in out.iter_mut().zip(sums) {
                let v = T::Acc::of_f64(s);
                *o = T::of_acc(if acc.params { o.acc() + v } else { v });
            }
        }
    }
    Ok(())
}

/// Rows a block of the backward owns: at least 8, and at most 2048 blocks. A block works on
/// its rows one after another (two block-wide sums a row), so the device needs many blocks
/// at once: at 8,192 rows of 768, runs of 8 rows (1,024 blocks) take 0.049 ms where runs of
/// 32 (256 blocks: two a multiprocessor on an H200) took 0.109 (figures in
/// `docs/benchmarks.md`, "Fused classifier and layer norm").
pub const fn backward_rows_per_block(rows: usize) -> usize {
    let r = rows.div_ceil(BWD_MAX_BLOCKS);
    if r > BWD_MIN_RUN { r } else { BWD_MIN_RUN }
}

/// The backward's most blocks, and the fewest rows a block owns.
const BWD_MAX_BLOCKS: usize = 2048;
const BWD_MIN_RUN: usize = 8;

/// Blocks of the backward: `rows / backward_rows_per_block(rows)`, rounded up.
pub const fn backward_blocks(rows: usize) -> usize {
    rows.div_ceil(backward_rows_per_block(rows))
}

/// CPU twin of the backward's `copy` ([`gpu_layer_norm_backward_copy`]): `dh` rounded to `G`,
/// `dy`'s type (one rounding of the kernel's f32 value: `G` is `T`, or narrower than f32 rows).
pub fn narrow_copy<T: FusedElement, G: FusedElement<Acc = T::Acc>>(
    dh: &[T],
    copy: &mut [G],
) -> Result<()> {
    exact(&[(dh.len(), copy.len())])?;
    for (o, v) in copy.iter_mut().zip(dh) {
        *o = G::of_acc(v.acc());
    }
    Ok(())
}

/// CPU twin of the backward's `sums` ([`gpu_layer_norm_backward_copy`]): the column sums of
/// `rows` (contiguous rows of `sums.len()` values: the gradient as the backward stored it),
/// each summed in order in f64 and rounded once to `S`. The kernels sum in f32 trees: within
/// `(8 + 2 sqrt(N)) u sum_rows |v|` before the rounding, as `db`.
pub fn column_sums<V: FusedElement, S: FusedElement>(rows: &[V], sums: &mut [S]) -> Result<()> {
    let c = sums.len();
    if c == 0 || !rows.len().is_multiple_of(c) {
        return Err(unsupported(format!(
            "{} values are not rows of {c} columns",
            rows.len()
        )));
    }
    let mut acc = vec![0f64; c];
    for row in rows.chunks(c) {
        for (a, v) in acc.iter_mut().zip(row) {
            *a += v.acc().to_f64();
        }
    }
    for (o, a) in sums.iter_mut().zip(acc) {
        *o = S::of_acc(S::Acc::of_f64(a));
    }
    Ok(())
}

/// Bytes of device workspace [`gpu_layer_norm_backward`] and
/// [`gpu_layer_norm_backward_copy`] need: three rows of `cols` f32 partial sums a block (the
/// weight's, the bias's and, when asked for, the column sums').
pub fn backward_workspace_bytes(shape: &LayerNormShape) -> usize {
    backward_blocks(shape.rows)
        .saturating_mul(shape.cols)
        .saturating_mul(12)
}

/// Threads a block of the backward for `rows` rows of `cols` elements of `elem` bytes, a power
/// of two in `32..=512`: about two 16-byte chunks of a row a thread, or the threads that
/// about four a thread need where the grid has its 2,048 blocks (`rows` at least 16,384) and
/// those threads divide a row's chunks evenly (768 f32 columns: 64 threads of 3). Four chunks
/// a thread are faster only with the full grid and an even split (figures in
/// `docs/benchmarks.md`, "Fused classifier and layer norm"). Only the rows' count and width
/// decide, so the partial sums' order, hence the bits, are the same on every device.
pub fn threads(rows: usize, cols: usize, elem: usize) -> u32 {
    let four = chunk_threads(cols, elem, 4);
    let full_grid = rows >= BWD_MAX_BLOCKS * BWD_MIN_RUN;
    if full_grid && row_chunks(cols, elem).is_multiple_of(four as usize) {
        four
    } else {
        chunk_threads(cols, elem, 2)
    }
}

/// Threads a block of the forward (a block a row): about four 16-byte chunks a thread, a power
/// of two in `32..=512`: fewer threads a row make its block sums cheaper (the backward's rule
/// is [`threads`]; figures in `docs/benchmarks.md`, "Fused classifier and layer norm").
pub fn forward_threads(cols: usize, elem: usize) -> u32 {
    chunk_threads(cols, elem, 4)
}

/// 16-byte chunks of a row of `cols` elements of `elem` bytes (the last may be partial).
fn row_chunks(cols: usize, elem: usize) -> usize {
    cols.div_ceil(16 / elem.max(1))
}

fn chunk_threads(cols: usize, elem: usize, per_thread: usize) -> u32 {
    row_chunks(cols, elem)
        .div_ceil(per_thread)
        .next_power_of_two()
        .clamp(32, 512) as u32
}

// ---------------------------------------------------------------------------------------------
// Launchers.

/// The kernels' argument block (`LnArgs` in `kernels/layernorm.cu`, field by field).
#[cfg(feature = "cuda")]
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Args {
    x: u64,
    r: u64,
    h: u64,
    y: u64,
    w: u64,
    b: u64,
    mean: u64,
    rstd: u64,
    dy: u64,
    dh: u64,
    dw: u64,
    db: u64,
    ws: u64,
    dr: u64,
    ds: u64,
    rows: u64,
    cols: u64,
    rows_per_block: u64,
    blocks: u64,
    eps: f32,
    accumulate: i32,
    accumulate_params: i32,
    ds_type: i32,
}

#[cfg(feature = "cuda")]
const _: () = assert!(size_of::<Args>() == 168, "LnArgs is 168 bytes");

/// The largest grid (blocks stride over the rest).
#[cfg(feature = "cuda")]
const MAX_GRID: usize = 1 << 20;

#[cfg(feature = "cuda")]
impl Args {
    /// Launches `name` with `smem` bytes of dynamic shared memory.
    fn launch(
        &mut self,
        stream: &genesis_cuda::Stream,
        name: &'static str,
        grid: (usize, u32),
        block: (u32, u32),
        smem: u32,
    ) -> Result<()> {
        use genesis_cuda::{Kernel, LaunchConfig};
        let kernel = Kernel::get(stream.context(), &crate::images::LAYERNORM, name)?;
        // The default limit, 48 KiB, counts the kernels' static shared memory too.
        if smem > 32 << 10 {
            kernel.set_max_dynamic_shared_bytes(smem)?;
        }
        let mut params: [*mut std::ffi::c_void; 1] = [(&raw mut *self).cast()];
        let config = LaunchConfig {
            grid: (grid.0.clamp(1, MAX_GRID) as u32, grid.1, 1),
            block: (block.0, block.1, 1),
            shared_bytes: smem,
        };
        // SAFETY: every `ln_*` kernel takes one `LnArgs`, which `Args` mirrors; the launchers
        // check every span against the shape before calling this.
        unsafe { kernel.launch(stream, config, &mut params)? };
        Ok(())
    }
}

/// The kernel `ln_<kind>_<T>` (`kind`: fwd, bwd, params), or `ln_<kind>_f32_<O>` for f32 rows
/// whose `y` (fwd) or `dy` (bwd) is `O`; `_v` when `vec`.
#[cfg(feature = "cuda")]
fn kernel_name<T: Element, O: Element>(kind: &str, vec: bool) -> Result<&'static str> {
    use crate::DType;
    // Each kind's kernels by type pair (f32, f16, bf16, f32 rows with f16, with bf16), the
    // scalar kernel then the `_v` one.
    const FWD: [&str; 10] = [
        "ln_fwd_f32",
        "ln_fwd_f32_v",
        "ln_fwd_f16",
        "ln_fwd_f16_v",
        "ln_fwd_bf16",
        "ln_fwd_bf16_v",
        "ln_fwd_f32_f16",
        "ln_fwd_f32_f16_v",
        "ln_fwd_f32_bf16",
        "ln_fwd_f32_bf16_v",
    ];
    const BWD: [&str; 10] = [
        "ln_bwd_f32",
        "ln_bwd_f32_v",
        "ln_bwd_f16",
        "ln_bwd_f16_v",
        "ln_bwd_bf16",
        "ln_bwd_bf16_v",
        "ln_bwd_f32_f16",
        "ln_bwd_f32_f16_v",
        "ln_bwd_f32_bf16",
        "ln_bwd_f32_bf16_v",
    ];
    const PARAMS: [&str; 3] = ["ln_params_f32", "ln_params_f16", "ln_params_bf16"];
    let pair = match (T::DTYPE, O::DTYPE) {
        (DType::F32, DType::F32) => 0,
        (DType::F16, DType::F16) => 1,
        (DType::BF16, DType::BF16) => 2,
        (DType::F32, DType::F16) if kind != "params" => 3,
        (DType::F32, DType::BF16) if kind != "params" => 4,
        _ => {
            return Err(unsupported(format!(
                "{} rows with {} {} on the GPU (f32, f16 or bf16, the same type, or f32 rows \
                 with f16 or bf16)",
                T::NAME,
                O::NAME,
                if kind == "bwd" { "gradient" } else { "output" }
            )));
        }
    };
    Ok(match kind {
        "fwd" => FWD[2 * pair + usize::from(vec)],
        "bwd" => BWD[2 * pair + usize::from(vec)],
        _ => PARAMS[pair],
    })
}

/// Checks the GPU's limits on the shape: `cols <= MAX_COLS`; gives `rows * cols`.
#[cfg(feature = "cuda")]
fn gpu_len<T: Element, O: Element>(kind: &str, shape: &LayerNormShape) -> Result<usize> {
    let len = shape.numel()?;
    kernel_name::<T, O>(kind, false)?;
    if shape.cols > MAX_COLS {
        return Err(unsupported(format!(
            "{} columns on the GPU (at most {MAX_COLS})",
            shape.cols
        )));
    }
    Ok(len)
}

/// [`Error::LengthMismatch`] for the first `(needed, got)` with `got < needed`.
#[cfg(feature = "cuda")]
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

/// Whether rows are whole chunks (16 bytes of the rows' `elem`-byte type) and every operand's
/// address (0: an absent one) is aligned to its chunk: `(address, its element's bytes)`.
#[cfg(feature = "cuda")]
fn vectorised(addrs: &[(u64, usize)], cols: usize, elem: usize) -> bool {
    let w = (16 / elem) as u64;
    addrs.iter().all(|&(a, e)| a.is_multiple_of(w * e as u64)) && (cols * elem).is_multiple_of(16)
}

/// Queues the forward on `stream` (see [`layer_norm_forward`]): `y`, `mean`, `rstd` (f32,
/// `rows` each) of `x`, or of `h = x + r` when `residual` is `(r, h)` (then `h` is written).
/// f32, f16, bf16, `y` of the same type or, for f32 rows, f16 or bf16; `cols <= MAX_COLS`;
/// no operand may overlap another.
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
pub fn gpu_layer_norm_forward<T: Element, O: Element>(
    stream: &genesis_cuda::Stream,
    shape: &LayerNormShape,
    x: genesis_cuda::DeviceSpan<'_, T>,
    residual: Option<(
        genesis_cuda::DeviceSpan<'_, T>,
        genesis_cuda::DeviceSpanMut<'_, T>,
    )>,
    w: Option<genesis_cuda::DeviceSpan<'_, T>>,
    b: Option<genesis_cuda::DeviceSpan<'_, T>>,
    y: genesis_cuda::DeviceSpanMut<'_, O>,
    mean: genesis_cuda::DeviceSpanMut<'_, f32>,
    rstd: genesis_cuda::DeviceSpanMut<'_, f32>,
) -> Result<()> {
    gpu_forward(stream, shape, x, residual, w, b, y, mean, rstd)
}

/// Queues the forward with a residual on `stream` (see [`add_layer_norm_forward`]): `h = x +
/// r` written, then `y`, `mean`, `rstd` of `h`. `r` of the rows' type or, for f32 rows, of
/// `y`'s f16 or bf16 (`ln_fwd_f32_<O>_r`); otherwise as [`gpu_layer_norm_forward`].
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
pub fn gpu_add_layer_norm_forward<T: Element, O: Element, R: Element>(
    stream: &genesis_cuda::Stream,
    shape: &LayerNormShape,
    x: genesis_cuda::DeviceSpan<'_, T>,
    r: genesis_cuda::DeviceSpan<'_, R>,
    h: genesis_cuda::DeviceSpanMut<'_, T>,
    w: Option<genesis_cuda::DeviceSpan<'_, T>>,
    b: Option<genesis_cuda::DeviceSpan<'_, T>>,
    y: genesis_cuda::DeviceSpanMut<'_, O>,
    mean: genesis_cuda::DeviceSpanMut<'_, f32>,
    rstd: genesis_cuda::DeviceSpanMut<'_, f32>,
) -> Result<()> {
    gpu_forward(stream, shape, x, Some((r, h)), w, b, y, mean, rstd)
}

/// The forward's kernel for rows of `T`, `y` of `O` and a residual of `R` (`R = T`: none or
/// of the rows' type); `_v` when `vec`.
#[cfg(feature = "cuda")]
fn forward_kernel<T: Element, O: Element, R: Element>(vec: bool) -> Result<&'static str> {
    use crate::DType;
    if R::DTYPE == T::DTYPE {
        return kernel_name::<T, O>("fwd", vec);
    }
    Ok(match (T::DTYPE, O::DTYPE, R::DTYPE, vec) {
        (DType::F32, DType::F16, DType::F16, false) => "ln_fwd_f32_f16_r",
        (DType::F32, DType::F16, DType::F16, true) => "ln_fwd_f32_f16_r_v",
        (DType::F32, DType::BF16, DType::BF16, false) => "ln_fwd_f32_bf16_r",
        (DType::F32, DType::BF16, DType::BF16, true) => "ln_fwd_f32_bf16_r_v",
        _ => {
            return Err(unsupported(format!(
                "{} rows with a {} residual and {} output on the GPU (a residual of the rows' \
                 type, or f32 rows with an f16 or bf16 residual and output of that type)",
                T::NAME,
                R::NAME,
                O::NAME
            )));
        }
    })
}

#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
fn gpu_forward<T: Element, O: Element, R: Element>(
    stream: &genesis_cuda::Stream,
    shape: &LayerNormShape,
    x: genesis_cuda::DeviceSpan<'_, T>,
    residual: Option<(
        genesis_cuda::DeviceSpan<'_, R>,
        genesis_cuda::DeviceSpanMut<'_, T>,
    )>,
    w: Option<genesis_cuda::DeviceSpan<'_, T>>,
    b: Option<genesis_cuda::DeviceSpan<'_, T>>,
    y: genesis_cuda::DeviceSpanMut<'_, O>,
    mean: genesis_cuda::DeviceSpanMut<'_, f32>,
    rstd: genesis_cuda::DeviceSpanMut<'_, f32>,
) -> Result<()> {
    let len = gpu_len::<T, O>("fwd", shape)?;
    forward_kernel::<T, O, R>(false)?;
    let (rows, c) = (shape.rows, shape.cols);
    let mut need = vec![
        (len, x.len()),
        (len, y.len()),
        (rows, mean.len()),
        (rows, rstd.len()),
    ];
    if let Some((r, h)) = &residual {
        need.extend([(len, r.len()), (len, h.len())]);
    }
    need.extend(w.map(|w| (c, w.len())));
    need.extend(b.map(|b| (c, b.len())));
    short(&need)?;
    if rows == 0 {
        return Ok(());
    }
    let mut a = Args {
        x: x.addr(),
        y: y.addr(),
        w: w.map_or(0, |s| s.addr()),
        b: b.map_or(0, |s| s.addr()),
        mean: mean.addr(),
        rstd: rstd.addr(),
        rows: rows as u64,
        cols: c as u64,
        eps: shape.eps as f32,
        ..Args::default()
    };
    if let Some((r, h)) = &residual {
        (a.r, a.h) = (r.addr(), h.addr());
    }
    let elem = size_of::<T>();
    let ops = [a.x, a.h, a.w, a.b].map(|p| (p, elem));
    let vec = vectorised(&ops, c, elem)
        && vectorised(&[(a.y, size_of::<O>()), (a.r, size_of::<R>())], c, elem);
    let smem = (c * 4) as u32;
    let name = forward_kernel::<T, O, R>(vec)?;
    a.launch(stream, name, (rows, 1), (forward_threads(c, elem), 1), smem)
}

/// Queues the backward on `stream` (see [`layer_norm_backward`]): `dh` (written, or added to
/// when `acc.dh`) from `dy`, `h`, `w` and the forward's f32 `mean` and `rstd`, and `dw`, `db`
/// when given (overwritten, or added to when `acc.params`), through `workspace`
/// ([`backward_workspace_bytes`], 4-byte aligned). `dy` of the rows' type or, for f32 rows,
/// f16 or bf16. Deterministic (no atomics).
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
pub fn gpu_layer_norm_backward<T: Element, G: Element>(
    stream: &genesis_cuda::Stream,
    shape: &LayerNormShape,
    dy: genesis_cuda::DeviceSpan<'_, G>,
    h: genesis_cuda::DeviceSpan<'_, T>,
    w: Option<genesis_cuda::DeviceSpan<'_, T>>,
    mean: genesis_cuda::DeviceSpan<'_, f32>,
    rstd: genesis_cuda::DeviceSpan<'_, f32>,
    dh: genesis_cuda::DeviceSpanMut<'_, T>,
    dw: Option<genesis_cuda::DeviceSpanMut<'_, T>>,
    db: Option<genesis_cuda::DeviceSpanMut<'_, T>>,
    acc: Accumulate,
    workspace: genesis_cuda::DeviceSpanMut<'_, u8>,
) -> Result<()> {
    gpu_layer_norm_backward_copy(
        stream, shape, dy, h, w, mean, rstd, dh, None, None, dw, db, acc, workspace,
    )
}

/// [`gpu_layer_norm_backward`] that also writes `dh`'s final value rounded to `dy`'s type
/// into `copy` when given (twin: [`narrow_copy`] after [`layer_norm_backward`]): the residual
/// stream's gradient for a branch of `dy`'s type that was added to it (autocast's), without a
/// conversion pass. With `sums` (`cols` values of `dy`'s type), also the column sums of that
/// gradient as stored (of `copy` when given, else of `dh`, when `dy`'s type is `T`), each
/// rounded once (twin: [`column_sums`]): the bias gradient of a linear branch, without reading
/// the gradient again. `copy` and `sums` may not overlap another operand.
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
pub fn gpu_layer_norm_backward_copy<T: Element, G: Element>(
    stream: &genesis_cuda::Stream,
    shape: &LayerNormShape,
    dy: genesis_cuda::DeviceSpan<'_, G>,
    h: genesis_cuda::DeviceSpan<'_, T>,
    w: Option<genesis_cuda::DeviceSpan<'_, T>>,
    mean: genesis_cuda::DeviceSpan<'_, f32>,
    rstd: genesis_cuda::DeviceSpan<'_, f32>,
    dh: genesis_cuda::DeviceSpanMut<'_, T>,
    copy: Option<genesis_cuda::DeviceSpanMut<'_, G>>,
    sums: Option<genesis_cuda::DeviceSpanMut<'_, G>>,
    dw: Option<genesis_cuda::DeviceSpanMut<'_, T>>,
    db: Option<genesis_cuda::DeviceSpanMut<'_, T>>,
    acc: Accumulate,
    workspace: genesis_cuda::DeviceSpanMut<'_, u8>,
) -> Result<()> {
    let len = gpu_len::<T, G>("bwd", shape)?;
    let (rows, c) = (shape.rows, shape.cols);
    let mut need = vec![
        (len, dy.len()),
        (len, h.len()),
        (len, dh.len()),
        (rows, mean.len()),
        (rows, rstd.len()),
        (backward_workspace_bytes(shape), workspace.len()),
    ];
    need.extend(copy.as_ref().map(|v| (len, v.len())));
    need.extend(sums.as_ref().map(|v| (c, v.len())));
    need.extend(w.map(|w| (c, w.len())));
    need.extend(dw.as_ref().map(|v| (c, v.len())));
    need.extend(db.as_ref().map(|v| (c, v.len())));
    short(&need)?;
    if !workspace.addr().is_multiple_of(4) {
        return Err(unsupported("the workspace is not 4-byte aligned"));
    }
    if sums.is_some() && c > MAX_SUM_COLS {
        return Err(unsupported(format!(
            "column sums of {c} columns (at most {MAX_SUM_COLS})"
        )));
    }
    if sums.is_some() && copy.is_none() && T::DTYPE != G::DTYPE {
        return Err(unsupported(format!(
            "column sums of {} rows in {} without a copy in that type",
            T::NAME,
            G::NAME
        )));
    }
    let ds_type = match G::DTYPE {
        crate::DType::F16 => 1,
        crate::DType::BF16 => 2,
        _ => 0,
    };
    let blocks = backward_blocks(rows);
    let mut a = Args {
        dy: dy.addr(),
        h: h.addr(),
        w: w.map_or(0, |s| s.addr()),
        mean: mean.addr(),
        rstd: rstd.addr(),
        dh: dh.addr(),
        dw: dw.as_ref().map_or(0, |s| s.addr()),
        db: db.as_ref().map_or(0, |s| s.addr()),
        ws: workspace.addr(),
        dr: copy.as_ref().map_or(0, |s| s.addr()),
        ds: sums.as_ref().map_or(0, |s| s.addr()),
        ds_type,
        rows: rows as u64,
        cols: c as u64,
        rows_per_block: backward_rows_per_block(rows) as u64,
        blocks: blocks as u64,
        accumulate: i32::from(acc.dh),
        accumulate_params: i32::from(acc.params),
        ..Args::default()
    };
    let elem = size_of::<T>();
    if blocks > 0 {
        let ops = [a.h, a.w, a.dh].map(|p| (p, elem));
        let narrow = [(a.dy, size_of::<G>()), (a.dr, size_of::<G>())];
        let vec = vectorised(&ops, c, elem) && vectorised(&narrow, c, elem);
        let smem = (c * if a.ds != 0 { 12 } else { 8 }) as u32;
        let name = kernel_name::<T, G>("bwd", vec)?;
        a.launch(stream, name, (blocks, 1), (threads(rows, c, elem), 1), smem)?;
    }
    if a.dw != 0 || a.db != 0 || a.ds != 0 {
        let name = kernel_name::<T, T>("params", false)?;
        a.launch(stream, name, (c.div_ceil(32), 1), (32, 32), 0)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// The backward over rayon's threads (rows for the input's gradient, columns for the
    /// parameters') gives the bits of one pass over the rows in order, accumulating or not.
    #[test]
    fn parallel_backward_is_the_serial_pass() {
        let (rows, c) = (300, 130);
        let mut rng = SmallRng::seed_from_u64(5);
        let mut v =
            |n: usize| -> Vec<f32> { (0..n).map(|_| rng.random_range(-3.0f32..3.0)).collect() };
        let (dy, h, w, prior) = (v(rows * c), v(rows * c), v(c), v(rows * c));
        let (mean, rstd): (Vec<f32>, Vec<f32>) = (0..rows)
            .map(|i| (i as f32 * 0.01 - 1.0, 0.5 + i as f32 * 0.003))
            .unzip();
        let shape = LayerNormShape {
            rows,
            cols: c,
            eps: 1e-5,
        };
        for accumulate in [false, true] {
            let acc = Accumulate {
                dh: accumulate,
                params: accumulate,
            };
            let (mut dh, mut dw, mut db) = (prior.clone(), v(c), v(c));
            let (dw0, db0) = (dw.clone(), db.clone());
            layer_norm_backward(
                &shape,
                &dy,
                &h,
                Some(&w),
                &mean,
                &rstd,
                &mut dh,
                Some(&mut dw),
                Some(&mut db),
                acc,
            )
            .unwrap();
            // One pass over the rows in order, as the twin defines it.
            let inv_c = 1.0f32 / c as f32;
            let (mut sw, mut sb) = (vec![0f64; c], vec![0f64; c]);
            let mut want = prior.clone();
            for i in 0..rows {
                let (m, r) = (mean[i], rstd[i]);
                let (mut s1, mut s2) = (0f64, 0f64);
                let mut ns = vec![0f32; c];
                let mut dns = vec![0f32; c];
                for k in 0..c {
                    let (dyv, n) = (dy[i * c + k], (h[i * c + k] - m) * r);
                    let dn = dyv * w[k];
                    (ns[k], dns[k]) = (n, dn);
                    s1 += f64::from(dn);
                    s2 += f64::from(dn) * f64::from(n);
                    sw[k] += f64::from(dyv) * f64::from(n);
                    sb[k] += f64::from(dyv);
                }
                let (ma, mb) = (mean_of::<f32>(s1, inv_c), mean_of::<f32>(s2, inv_c));
                for k in 0..c {
                    let mut d = (-ns[k]).mul_add(mb, dns[k] - ma) * r;
                    if accumulate {
                        d += want[i * c + k];
                    }
                    want[i * c + k] = d;
                }
            }
            assert!(dh == want, "dh, accumulate {accumulate}");
            for k in 0..c {
                let (ew, eb) = (sw[k] as f32, sb[k] as f32);
                let (ew, eb) = if accumulate {
                    (dw0[k] + ew, db0[k] + eb)
                } else {
                    (ew, eb)
                };
                assert!(
                    dw[k] == ew && db[k] == eb,
                    "column {k}, accumulate {accumulate}"
                );
            }
        }
    }

    /// Many rows at once (rows over rayon's threads) give the bits of each row alone, with and
    /// without the residual add, f32 and bf16.
    #[test]
    fn parallel_rows_are_the_rows_alone() {
        fn check<T: FusedElement>(from: fn(f32) -> T) {
            let (rows, c) = (300, 130);
            let mut rng = SmallRng::seed_from_u64(4);
            let mut v = |n: usize| -> Vec<T> {
                (0..n)
                    .map(|_| from(rng.random_range(-3.0f32..3.0)))
                    .collect()
            };
            let (x, r, w, b) = (v(rows * c), v(rows * c), v(c), v(c));
            for residual in [false, true] {
                let shape = LayerNormShape {
                    rows,
                    cols: c,
                    eps: 1e-5,
                };
                let (mut y, mut h) = (vec![from(0.0); rows * c], vec![from(0.0); rows * c]);
                let (mut m, mut s) = (vec![T::Acc::default(); rows], vec![T::Acc::default(); rows]);
                let res = residual.then_some((&r[..], &mut h[..]));
                layer_norm_forward(&shape, &x, res, Some(&w), Some(&b), &mut y, &mut m, &mut s)
                    .unwrap();
                for n in 0..rows {
                    let one = LayerNormShape {
                        rows: 1,
                        cols: c,
                        eps: 1e-5,
                    };
                    let at = n * c..(n + 1) * c;
                    let (mut y1, mut h1) = (vec![from(0.0); c], vec![from(0.0); c]);
                    let (mut m1, mut s1) = ([T::Acc::default()], [T::Acc::default()]);
                    let res = residual.then_some((&r[at.clone()], &mut h1[..]));
                    layer_norm_forward(
                        &one,
                        &x[at.clone()],
                        res,
                        Some(&w),
                        Some(&b),
                        &mut y1,
                        &mut m1,
                        &mut s1,
                    )
                    .unwrap();
                    assert!(
                        y1 == y[at.clone()] && m1[0] == m[n] && s1[0] == s[n],
                        "row {n}"
                    );
                    if residual {
                        assert!(h1 == h[at], "row {n} (h)");
                    }
                }
            }
        }
        check::<f32>(|v| v);
        check::<bf16>(bf16::from_f32);
    }

    fn random(rng: &mut SmallRng, n: usize) -> Vec<f64> {
        (0..n).map(|_| rng.random_range(-2.0..2.0)).collect()
    }

    /// PyTorch's definition, naively in f64.
    #[test]
    fn forward_matches_naive() {
        let mut rng = SmallRng::seed_from_u64(3);
        for (rows, c) in [(1, 1), (3, 5), (4, 768), (2, 1601)] {
            let shape = LayerNormShape::new(rows, c);
            let (x, r) = (random(&mut rng, rows * c), random(&mut rng, rows * c));
            let (w, b) = (random(&mut rng, c), random(&mut rng, c));
            let (mut h, mut y) = (vec![0.0; rows * c], vec![0.0; rows * c]);
            let (mut mean, mut rstd) = (vec![0.0; rows], vec![0.0; rows]);
            layer_norm_forward(
                &shape,
                &x,
                Some((&r, &mut h)),
                Some(&w),
                Some(&b),
                &mut y,
                &mut mean,
                &mut rstd,
            )
            .unwrap();
            for n in 0..rows {
                let hr: Vec<f64> = (0..c).map(|k| x[n * c + k] + r[n * c + k]).collect();
                let m = hr.iter().sum::<f64>() / c as f64;
                let var = hr.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / c as f64;
                let rs = 1.0 / (var + 1e-5).sqrt();
                assert!((mean[n] - m).abs() < 1e-12 && (rstd[n] - rs).abs() < 1e-9 * rs);
                for k in 0..c {
                    assert_eq!(h[n * c + k], hr[k]);
                    let want = (hr[k] - m) * rs * w[k] + b[k];
                    assert!((y[n * c + k] - want).abs() < 1e-9, "{n} {k}");
                }
            }
            // bf16: h is x + r rounded once; y close to the f64 values.
            let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f64(v)).collect();
            let rb: Vec<bf16> = r.iter().map(|&v| bf16::from_f64(v)).collect();
            let (mut hb, mut yb) = (vec![bf16::ZERO; rows * c], vec![bf16::ZERO; rows * c]);
            let (mut mb, mut sb) = (vec![0f32; rows], vec![0f32; rows]);
            layer_norm_forward(
                &shape,
                &xb,
                Some((&rb, &mut hb)),
                None,
                None,
                &mut yb,
                &mut mb,
                &mut sb,
            )
            .unwrap();
            for i in 0..rows * c {
                assert_eq!(hb[i], bf16::from_f32(xb[i].to_f32() + rb[i].to_f32()));
            }
        }
    }

    /// The twin's backward against central differences of `L = sum y g` in f64, with and
    /// without weights, bias and accumulation.
    #[test]
    fn gradient_check() {
        let mut rng = SmallRng::seed_from_u64(4);
        for (rows, c, affine) in [(3, 7, true), (2, 16, false), (1, 1, true)] {
            let shape = LayerNormShape::new(rows, c);
            let x = random(&mut rng, rows * c);
            let g = random(&mut rng, rows * c);
            let (w, b) = (random(&mut rng, c), random(&mut rng, c));
            let (wo, bo) = if affine {
                (Some(&w[..]), Some(&b[..]))
            } else {
                (None, None)
            };
            let loss = |x: &[f64], w: &[f64], b: &[f64]| -> f64 {
                let mut y = vec![0.0; rows * c];
                let (mut m, mut r) = (vec![0.0; rows], vec![0.0; rows]);
                let (wo, bo) = if affine {
                    (Some(w), Some(b))
                } else {
                    (None, None)
                };
                layer_norm_forward(&shape, x, None, wo, bo, &mut y, &mut m, &mut r).unwrap();
                y.iter().zip(&g).map(|(a, b)| a * b).sum()
            };
            let mut y = vec![0.0; rows * c];
            let (mut m, mut r) = (vec![0.0; rows], vec![0.0; rows]);
            layer_norm_forward(&shape, &x, None, wo, bo, &mut y, &mut m, &mut r).unwrap();
            let mut dh = vec![0.5; rows * c];
            let (mut dw, mut db) = (vec![0.25; c], vec![0.125; c]);
            layer_norm_backward(
                &shape,
                &g,
                &x,
                wo,
                &m,
                &r,
                &mut dh,
                Some(&mut dw),
                Some(&mut db),
                Accumulate {
                    dh: true,
                    params: true,
                },
            )
            .unwrap();
            let step = 1e-6;
            let num = |f: &dyn Fn(f64) -> f64| (f(step) - f(-step)) / (2.0 * step);
            for i in 0..rows * c {
                let d = num(&|e| {
                    let mut xp = x.clone();
                    xp[i] += e;
                    loss(&xp, &w, &b)
                });
                // With C = 1 the output is constant (b) and dh = 0.
                assert!(
                    (dh[i] - 0.5 - d).abs() < 1e-7,
                    "dh {i}: {} vs {d}",
                    dh[i] - 0.5
                );
            }
            for k in 0..c {
                let dwn = num(&|e| {
                    let mut wp = w.clone();
                    wp[k] += e;
                    loss(&x, &wp, &b)
                });
                let dbn = num(&|e| {
                    let mut bp = b.clone();
                    bp[k] += e;
                    loss(&x, &w, &bp)
                });
                if affine {
                    assert!((dw[k] - 0.25 - dwn).abs() < 1e-7, "dw {k}");
                    assert!((db[k] - 0.125 - dbn).abs() < 1e-7, "db {k}");
                }
            }
            // Overwriting gives the same values without the old contents.
            let mut dh2 = vec![9.0; rows * c];
            let mut dw2 = vec![9.0; c];
            layer_norm_backward(
                &shape,
                &g,
                &x,
                wo,
                &m,
                &r,
                &mut dh2,
                Some(&mut dw2),
                None,
                Accumulate::default(),
            )
            .unwrap();
            for i in 0..rows * c {
                assert!((dh2[i] + 0.5 - dh[i]).abs() < 1e-12);
            }
            for k in 0..c {
                assert!((dw2[k] + 0.25 - dw[k]).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn bad_input() {
        let shape = LayerNormShape::new(2, 3);
        let x = [1f32; 6];
        let (mut y, mut m, mut r) = ([0f32; 6], [0f32; 2], [0f32; 2]);
        let mut fwd = |s: &LayerNormShape, x: &[f32], w: Option<&[f32]>| {
            layer_norm_forward(s, x, None, w, None, &mut y, &mut m, &mut r)
        };
        assert!(fwd(&shape, &x, None).is_ok());
        assert!(fwd(&shape, &x[..5], None).is_err());
        assert!(fwd(&shape, &x, Some(&[1.0; 2])).is_err());
        assert!(fwd(&LayerNormShape::new(2, 0), &x, None).is_err());
        assert!(fwd(&LayerNormShape::new(usize::MAX, 2), &x, None).is_err());
        let neg = LayerNormShape { eps: -1.0, ..shape };
        assert!(fwd(&neg, &x, None).is_err());
        let nan = LayerNormShape {
            eps: f64::NAN,
            ..shape
        };
        assert!(fwd(&nan, &x, None).is_err());
        let mut h = [0f32; 5];
        assert!(
            layer_norm_forward(
                &shape,
                &x,
                Some((&x, &mut h)),
                None,
                None,
                &mut y,
                &mut m,
                &mut r
            )
            .is_err()
        );
        let mut dh = [3f32; 6];
        assert!(
            layer_norm_backward(
                &shape,
                &x,
                &x,
                None,
                &m,
                &r[..1],
                &mut dh,
                None,
                None,
                Accumulate::default()
            )
            .is_err()
        );
        assert!(
            layer_norm_backward(
                &shape,
                &x,
                &x,
                None,
                &m,
                &r,
                &mut dh,
                Some(&mut [0f32; 4]),
                None,
                Accumulate::default()
            )
            .is_err()
        );
        assert_eq!(dh, [3.0; 6]);
        // A constant row: var 0, rstd 1 / sqrt(eps), y = b.
        let (mut y, mut m, mut r) = ([0f32; 6], [0f32; 2], [0f32; 2]);
        layer_norm_forward(
            &shape,
            &x,
            None,
            None,
            Some(&[2.0; 3]),
            &mut y,
            &mut m,
            &mut r,
        )
        .unwrap();
        assert_eq!(y, [2.0; 6]);
        // No rows: dw and db are 0.
        let empty = LayerNormShape::new(0, 3);
        let mut dw = [5f32; 3];
        layer_norm_backward::<f32, f32>(
            &empty,
            &[],
            &[],
            None,
            &[],
            &[],
            &mut [],
            Some(&mut dw),
            None,
            Accumulate::default(),
        )
        .unwrap();
        assert_eq!(dw, [0.0; 3]);
    }

    /// f32 rows with a bf16 or f16 output: each value the f32 output rounded once; the
    /// backward on a narrow `dy`: the f32 backward on `dy` widened, bit for bit; over
    /// generated shapes, with and without the affine parameters and accumulation.
    #[test]
    fn narrow_output_and_gradient_are_the_f32_results_rounded_and_widened() {
        fn check<O: FusedElement<Acc = f32> + Copy + PartialEq + std::fmt::Debug>(seed: u64) {
            let mut rng = SmallRng::seed_from_u64(seed);
            for case in 0..24 {
                let rows = rng.random_range(1..40);
                let cols = rng.random_range(1..300);
                let shape = LayerNormShape {
                    rows,
                    cols,
                    eps: 1e-5,
                };
                let len = rows * cols;
                let mut v = |n: usize, s: f32| -> Vec<f32> {
                    (0..n).map(|_| rng.random_range(-2.0f32..2.0) + s).collect()
                };
                let (x, w, b, dh0) = (v(len, 1.0), v(cols, 0.0), v(cols, 0.0), v(len, 0.0));
                let dy_o: Vec<O> = v(len, 0.0).into_iter().map(O::of_acc).collect();
                let dy_f: Vec<f32> = dy_o.iter().map(|d| d.acc()).collect();
                let (wo, bo) = (
                    (case % 2 == 0).then_some(&w[..]),
                    (case % 3 != 0).then_some(&b[..]),
                );
                let (mut y, mut m, mut r) = (vec![0f32; len], vec![0f32; rows], vec![0f32; rows]);
                layer_norm_forward(&shape, &x, None, wo, bo, &mut y, &mut m, &mut r).unwrap();
                let mut yo = vec![O::of_acc(0.0); len];
                let (mut m2, mut r2) = (vec![0f32; rows], vec![0f32; rows]);
                layer_norm_forward(&shape, &x, None, wo, bo, &mut yo, &mut m2, &mut r2).unwrap();
                let rounded: Vec<O> = y.iter().map(|&e| O::of_acc(e)).collect();
                assert_eq!(yo, rounded, "case {case}: y");
                assert_eq!((m2, r2), (m.clone(), r.clone()), "case {case}: statistics");
                let acc = Accumulate {
                    dh: case % 4 < 2,
                    params: false,
                };
                let run = |narrow: bool| {
                    let (mut dh, mut dw, mut db) =
                        (dh0.clone(), vec![0f32; cols], vec![0f32; cols]);
                    if narrow {
                        layer_norm_backward(
                            &shape,
                            &dy_o,
                            &x,
                            wo,
                            &m,
                            &r,
                            &mut dh,
                            Some(&mut dw),
                            Some(&mut db),
                            acc,
                        )
                    } else {
                        layer_norm_backward(
                            &shape,
                            &dy_f,
                            &x,
                            wo,
                            &m,
                            &r,
                            &mut dh,
                            Some(&mut dw),
                            Some(&mut db),
                            acc,
                        )
                    }
                    .unwrap();
                    (dh, dw, db)
                };
                assert_eq!(run(true), run(false), "case {case}: gradients");
            }
        }
        check::<bf16>(11);
        check::<half::f16>(12);
    }

    /// Each kind and type pair names its kernel; pairs without one are errors.
    #[cfg(feature = "cuda")]
    #[test]
    fn kernel_names_by_kind_and_types() {
        use half::f16;
        assert_eq!(
            kernel_name::<f32, f32>("fwd", true).unwrap(),
            "ln_fwd_f32_v"
        );
        assert_eq!(kernel_name::<f16, f16>("fwd", false).unwrap(), "ln_fwd_f16");
        assert_eq!(
            kernel_name::<f32, bf16>("fwd", true).unwrap(),
            "ln_fwd_f32_bf16_v"
        );
        assert_eq!(
            kernel_name::<f32, f16>("bwd", false).unwrap(),
            "ln_bwd_f32_f16"
        );
        assert_eq!(
            kernel_name::<bf16, bf16>("bwd", true).unwrap(),
            "ln_bwd_bf16_v"
        );
        assert_eq!(
            kernel_name::<bf16, bf16>("params", true).unwrap(),
            "ln_params_bf16"
        );
        assert!(kernel_name::<bf16, f32>("fwd", false).is_err());
        assert!(kernel_name::<f32, bf16>("params", false).is_err());
        assert!(kernel_name::<f64, f64>("fwd", false).is_err());
    }

    #[test]
    fn plans() {
        assert_eq!(threads(8192, 768, 2), 64);
        assert_eq!(threads(8192, 768, 4), 128);
        // From 16,384 rows, four chunks a thread where they divide a row evenly.
        assert_eq!(threads(16383, 768, 4), 128);
        assert_eq!(threads(16384, 768, 4), 64);
        assert_eq!(threads(32768, 768, 2), 32);
        assert_eq!(threads(32768, 4096, 4), 256);
        assert_eq!(threads(32768, 1600, 4), 256);
        assert_eq!(threads(32768, 1600, 2), 128);
        assert_eq!(forward_threads(768, 2), 32);
        assert_eq!(forward_threads(768, 4), 64);
        assert_eq!(forward_threads(MAX_COLS, 4), 512);
        assert_eq!(threads(1, 1, 4), 32);
        assert_eq!(threads(1, MAX_COLS, 4), 512);
        assert_eq!(threads(1 << 20, MAX_COLS, 4), 512);
        assert_eq!(backward_rows_per_block(32 * 1024), 16);
        assert_eq!(backward_blocks(32 * 1024), 2048);
        assert_eq!(backward_rows_per_block(8 * 1024), 8);
        assert_eq!(backward_blocks(8 * 1024), 1024);
        assert_eq!(backward_rows_per_block(1 << 20), 512);
        assert_eq!(backward_blocks(0), 0);
        assert_eq!(backward_blocks(33), 5);
        assert_eq!(
            backward_workspace_bytes(&LayerNormShape::new(32 * 1024, 768)),
            2048 * 768 * 12
        );
    }
}
