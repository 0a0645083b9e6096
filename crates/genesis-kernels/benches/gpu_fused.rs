//! GPU timings of the fused GPT-2 training kernels (device events, warm-up, median of many
//! runs), in bf16 and f32:
//!
//! - `ce_*_fused`: the classifier's training step on logits `[N, 50304]` for N = 8192 and
//!   32768 rows: `gpu_cross_entropy_fused` in place (llm.c's: the gradient overwrites the
//!   logits), `Mean`, then `gpu_cross_entropy_reduce` for the scalar loss;
//!   `ce_*_fwd`: evaluation, `gpu_cross_entropy_forward` then the reduce.
//! - `ln_*_fwd`: LayerNorm of `h = x + r` (`[32768, 768]`, weight and bias, `h` written);
//!   `ln_*_bwd`: its backward with `dh` accumulated and `dw`, `db` (both kernels).
//! - `gelu_tanh_*_fwd`: GELU (tanh) of `[32768, 3072]` bf16 (GPT-2's MLP activation);
//!   `gelu_tanh_*_bwd`: its one-pass backward `dx = g gelu'(x)`; `gelu_tanh_*_bwd_colsum`: the
//!   same with the column sums of `dx` (the MLP's first bias gradient) from that pass.
//! - `ln_*_f32_to_{f32,bf16}_fwd`: LayerNorm of f32 rows without the residual, `y` in f32 or
//!   bf16 (autocast's norm before a product); `ln_*_f32_dy_{f32,bf16}_bwd`: its backward
//!   with `dy` in f32 or bf16, `dh` accumulated, `dw` and `db`;
//!   `ln_*_f32_r_bf16_to_bf16_fwd`: LayerNorm of `h = x + r` with f32 `x`, bf16 `r` and `y`,
//!   `h` written in f32 (autocast's residual stream and the norm that reads it).
//!
//! GB/s counts the least traffic each needs: the fused classifier reads and writes the logits
//! once (`2 N V` elements; the kernel reads them twice), the forward reads them once; the
//! LayerNorm forward reads `x`, `r` and writes `h`, `y` (`4 N C`), the backward reads `dy`,
//! `h`, `dh` and writes `dh` (`4 N C`), each element of its own size (the rows without the
//! residual: `x` and `y`; `dy`, `h`, `dh` twice); targets, statistics and parameters are left
//! out.
//! `xtask/gpu/torch_fused.py` prints the same table for PyTorch (`F.cross_entropy`,
//! `F.layer_norm` of `x + r`).
//!
//! `gpu_fused [--json PATH]`: prints a table and, with `--json`, writes the figures. Without a
//! GPU (or without the `cuda` feature) it says so and exits successfully.

#[cfg(not(feature = "cuda"))]
fn main() {
    println!("gpu_fused: skipped: built without the `cuda` feature");
}

#[cfg(feature = "cuda")]
fn main() {
    if let Err(e) = gpu::run() {
        eprintln!("gpu_fused: error: {e}");
        std::process::exit(1);
    }
}

#[cfg(feature = "cuda")]
#[path = "../../genesis-cuda/benches/support/timing.rs"]
#[allow(dead_code, unreachable_pub)]
mod timing;

#[cfg(feature = "cuda")]
mod gpu {
    use std::sync::Arc;

    use genesis_cuda::{Context, DeviceBuffer, Stream};
    use genesis_kernels::Element;
    use genesis_kernels::classifier::{
        self, ClassifierShape, LogitsGrad, LossGrad, Reduction, WORKSPACE_BYTES,
    };
    use genesis_kernels::layernorm::{self, Accumulate, LayerNormShape};
    use half::bf16;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    use super::timing::{self, BoxResult, Timing};

    const WARMUP: usize = 5;
    const RUNS: usize = 30;
    const VOCAB: usize = 50_304;
    const CE_ROWS: [usize; 2] = [8 * 1024, 32 * 1024];
    const LN_ROWS: usize = 32 * 1024;
    const LN_COLS: usize = 768;
    const GELU_ROWS: usize = 32 * 1024;
    const GELU_COLS: usize = 3072;

    /// `n` random elements in `[-lo, lo)` on the device.
    fn random<T: Element>(
        ctx: &Arc<Context>,
        rng: &mut SmallRng,
        n: usize,
        lo: f64,
    ) -> BoxResult<DeviceBuffer> {
        let v: Vec<T> = (0..n)
            .map(|_| T::from_f64(rng.random_range(-lo..lo)))
            .collect();
        // SAFETY: the element types are plain-old-data.
        let bytes =
            unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), n * size_of::<T>()) };
        Ok(DeviceBuffer::from_host(ctx, bytes)?)
    }

    struct Row {
        name: String,
        t: Timing,
        bytes: f64,
    }

    fn classifier<T: Element>(
        ctx: &Arc<Context>,
        stream: &Stream,
        rng: &mut SmallRng,
        rows: usize,
        out: &mut Vec<Row>,
    ) -> BoxResult {
        let shape = ClassifierShape::new(rows, VOCAB);
        let mut logits = random::<T>(ctx, rng, rows * VOCAB, 4.0)?;
        let targets: Vec<i64> = (0..rows)
            .map(|_| rng.random_range(0..VOCAB as i64))
            .collect();
        // SAFETY: i64 is plain-old-data.
        let tb = unsafe { std::slice::from_raw_parts(targets.as_ptr().cast::<u8>(), rows * 8) };
        let dt = DeviceBuffer::from_host(ctx, tb)?;
        let (mut loss, mut lse) = (
            DeviceBuffer::alloc(ctx, rows * 4)?,
            DeviceBuffer::alloc(ctx, rows * 4)?,
        );
        let mut ws = DeviceBuffer::alloc(ctx, WORKSPACE_BYTES)?;
        let mut status = DeviceBuffer::from_host(ctx, &(-1i64).to_ne_bytes())?;
        let mut total = DeviceBuffer::alloc(ctx, 4)?;
        let elem = size_of::<T>() as f64;
        let nv = (rows * VOCAB) as f64;
        let fwd = timing::events(stream, WARMUP, RUNS, || {
            classifier::gpu_cross_entropy_forward::<T>(
                stream,
                &shape,
                logits.as_span()?,
                dt.as_span()?,
                loss.as_span_mut()?,
                lse.as_span_mut()?,
                status.as_span_mut()?,
            )?;
            classifier::gpu_cross_entropy_reduce(
                stream,
                &shape,
                Reduction::Mean,
                loss.as_span()?,
                dt.as_span()?,
                total.as_span_mut()?,
            )?;
            Ok(())
        })?;
        // In place, as training does (the logits are overwritten by gradients, whose own
        // softmax the next run takes: the same work).
        let fused = timing::events(stream, WARMUP, RUNS, || {
            classifier::gpu_cross_entropy_fused::<T>(
                stream,
                &shape,
                Reduction::Mean,
                LogitsGrad::InPlace(logits.as_span_mut()?),
                dt.as_span()?,
                LossGrad::Value(1.0),
                loss.as_span_mut()?,
                lse.as_span_mut()?,
                ws.as_span_mut()?,
                status.as_span_mut()?,
            )?;
            classifier::gpu_cross_entropy_reduce(
                stream,
                &shape,
                Reduction::Mean,
                loss.as_span()?,
                dt.as_span()?,
                total.as_span_mut()?,
            )?;
            Ok(())
        })?;
        let base = format!("ce_n{rows}_v{VOCAB}_{}", T::NAME);
        out.push(Row {
            name: format!("{base}_fused"),
            t: fused,
            bytes: 2.0 * nv * elem,
        });
        out.push(Row {
            name: format!("{base}_fwd"),
            t: fwd,
            bytes: nv * elem,
        });
        Ok(())
    }

    fn layernorm<T: Element>(
        ctx: &Arc<Context>,
        stream: &Stream,
        rng: &mut SmallRng,
        out: &mut Vec<Row>,
    ) -> BoxResult {
        let shape = LayerNormShape::new(LN_ROWS, LN_COLS);
        let n = LN_ROWS * LN_COLS;
        let (x, r, dy) = (
            random::<T>(ctx, rng, n, 2.0)?,
            random::<T>(ctx, rng, n, 2.0)?,
            random::<T>(ctx, rng, n, 1.0)?,
        );
        let (w, b) = (
            random::<T>(ctx, rng, LN_COLS, 1.0)?,
            random::<T>(ctx, rng, LN_COLS, 1.0)?,
        );
        let elem = size_of::<T>();
        let (mut h, mut y, mut dh) = (
            DeviceBuffer::alloc(ctx, n * elem)?,
            DeviceBuffer::alloc(ctx, n * elem)?,
            random::<T>(ctx, rng, n, 1.0)?,
        );
        let (mut dw, mut db) = (
            DeviceBuffer::alloc(ctx, LN_COLS * elem)?,
            DeviceBuffer::alloc(ctx, LN_COLS * elem)?,
        );
        let (mut mean, mut rstd) = (
            DeviceBuffer::alloc(ctx, LN_ROWS * 4)?,
            DeviceBuffer::alloc(ctx, LN_ROWS * 4)?,
        );
        let mut ws = DeviceBuffer::alloc(ctx, layernorm::backward_workspace_bytes(&shape))?;
        let fwd = timing::events(stream, WARMUP, RUNS, || {
            layernorm::gpu_layer_norm_forward::<T, T>(
                stream,
                &shape,
                x.as_span()?,
                Some((r.as_span()?, h.as_span_mut()?)),
                Some(w.as_span()?),
                Some(b.as_span()?),
                y.as_span_mut()?,
                mean.as_span_mut()?,
                rstd.as_span_mut()?,
            )?;
            Ok(())
        })?;
        let bwd = timing::events(stream, WARMUP, RUNS, || {
            layernorm::gpu_layer_norm_backward::<T, T>(
                stream,
                &shape,
                dy.as_span()?,
                h.as_span()?,
                Some(w.as_span()?),
                mean.as_span()?,
                rstd.as_span()?,
                dh.as_span_mut()?,
                Some(dw.as_span_mut()?),
                Some(db.as_span_mut()?),
                Accumulate {
                    dh: true,
                    params: false,
                },
                ws.as_span_mut()?,
            )?;
            Ok(())
        })?;
        let base = format!("ln_n{LN_ROWS}_c{LN_COLS}_{}", T::NAME);
        let bytes = 4.0 * (n * elem) as f64;
        out.push(Row {
            name: format!("{base}_fwd"),
            t: fwd,
            bytes,
        });
        out.push(Row {
            name: format!("{base}_bwd"),
            t: bwd,
            bytes,
        });
        Ok(())
    }

    /// f32 rows without the residual, `y` (and the backward's `dy`) in `O`.
    fn layernorm_narrow<O: Element>(
        ctx: &Arc<Context>,
        stream: &Stream,
        rng: &mut SmallRng,
        out: &mut Vec<Row>,
    ) -> BoxResult {
        let shape = LayerNormShape::new(LN_ROWS, LN_COLS);
        let n = LN_ROWS * LN_COLS;
        let (x, dy) = (
            random::<f32>(ctx, rng, n, 2.0)?,
            random::<O>(ctx, rng, n, 1.0)?,
        );
        let (w, b) = (
            random::<f32>(ctx, rng, LN_COLS, 1.0)?,
            random::<f32>(ctx, rng, LN_COLS, 1.0)?,
        );
        let (mut y, mut dh) = (
            DeviceBuffer::alloc(ctx, n * size_of::<O>())?,
            random::<f32>(ctx, rng, n, 1.0)?,
        );
        let (mut dw, mut db) = (
            DeviceBuffer::alloc(ctx, LN_COLS * 4)?,
            DeviceBuffer::alloc(ctx, LN_COLS * 4)?,
        );
        let (mut mean, mut rstd) = (
            DeviceBuffer::alloc(ctx, LN_ROWS * 4)?,
            DeviceBuffer::alloc(ctx, LN_ROWS * 4)?,
        );
        let mut ws = DeviceBuffer::alloc(ctx, layernorm::backward_workspace_bytes(&shape))?;
        let fwd = timing::events(stream, WARMUP, RUNS, || {
            layernorm::gpu_layer_norm_forward::<f32, O>(
                stream,
                &shape,
                x.as_span()?,
                None,
                Some(w.as_span()?),
                Some(b.as_span()?),
                y.as_span_mut()?,
                mean.as_span_mut()?,
                rstd.as_span_mut()?,
            )?;
            Ok(())
        })?;
        let bwd = timing::events(stream, WARMUP, RUNS, || {
            layernorm::gpu_layer_norm_backward::<f32, O>(
                stream,
                &shape,
                dy.as_span()?,
                x.as_span()?,
                Some(w.as_span()?),
                mean.as_span()?,
                rstd.as_span()?,
                dh.as_span_mut()?,
                Some(dw.as_span_mut()?),
                Some(db.as_span_mut()?),
                Accumulate {
                    dh: true,
                    params: false,
                },
                ws.as_span_mut()?,
            )?;
            Ok(())
        })?;
        // The residual stream under autocast: f32 rows plus a residual in `O`, `h` in f32.
        let r = random::<O>(ctx, rng, n, 1.0)?;
        let mut h = DeviceBuffer::alloc(ctx, n * 4)?;
        let add = timing::events(stream, WARMUP, RUNS, || {
            layernorm::gpu_add_layer_norm_forward::<f32, O, O>(
                stream,
                &shape,
                x.as_span()?,
                r.as_span()?,
                h.as_span_mut()?,
                Some(w.as_span()?),
                Some(b.as_span()?),
                y.as_span_mut()?,
                mean.as_span_mut()?,
                rstd.as_span_mut()?,
            )?;
            Ok(())
        })?;
        let (base, o) = (format!("ln_n{LN_ROWS}_c{LN_COLS}_f32"), size_of::<O>());
        if O::NAME != "f32" {
            out.push(Row {
                name: format!("{base}_r_{}_to_{}_fwd", O::NAME, O::NAME),
                t: add,
                bytes: (2 * (4 + o) * n) as f64,
            });
        }
        out.push(Row {
            name: format!("{base}_to_{}_fwd", O::NAME),
            t: fwd,
            bytes: ((4 + o) * n) as f64,
        });
        out.push(Row {
            name: format!("{base}_dy_{}_bwd", O::NAME),
            t: bwd,
            bytes: ((o + 4 + 8) * n) as f64,
        });
        Ok(())
    }

    /// GELU (tanh) forward and its one-pass backward over GPT-2's MLP activations.
    fn gelu(
        ctx: &Arc<Context>,
        stream: &Stream,
        rng: &mut SmallRng,
        out: &mut Vec<Row>,
    ) -> BoxResult {
        use genesis_kernels::grad::{ActGrad, gpu_act_grad};
        use genesis_kernels::{UnaryOp, gpu};
        let n = GELU_ROWS * GELU_COLS;
        let (x, g) = (
            random::<bf16>(ctx, rng, n, 2.0)?,
            random::<bf16>(ctx, rng, n, 1.0)?,
        );
        let (mut y, mut dx) = (
            DeviceBuffer::alloc(ctx, n * 2)?,
            DeviceBuffer::alloc(ctx, n * 2)?,
        );
        let fwd = timing::events(stream, WARMUP, RUNS, || {
            gpu::unary::<bf16>(stream, UnaryOp::GeluTanh, x.as_span()?, y.as_span_mut()?)?;
            Ok(())
        })?;
        let bwd = timing::events(stream, WARMUP, RUNS, || {
            gpu_act_grad::<bf16>(
                stream,
                ActGrad::GeluTanh,
                g.as_span()?,
                x.as_span()?,
                dx.as_span_mut()?,
            )?;
            Ok(())
        })?;
        // With the bias gradient's column sums from the same pass (GPT-2's MLP).
        let mut sums = DeviceBuffer::alloc(ctx, GELU_COLS * 2)?;
        let ws_len =
            genesis_kernels::grad::act_grad_cols_workspace_bytes::<bf16>(GELU_ROWS, GELU_COLS);
        let mut ws = DeviceBuffer::alloc(ctx, ws_len.max(8))?;
        let cols = timing::events(stream, WARMUP, RUNS, || {
            genesis_kernels::grad::gpu_act_grad_cols::<bf16>(
                stream,
                ActGrad::GeluTanh,
                g.as_span()?,
                x.as_span()?,
                dx.as_span_mut()?,
                GELU_COLS,
                sums.as_span_mut()?,
                ws.as_span_mut()?,
            )?;
            Ok(())
        })?;
        let base = format!("gelu_tanh_n{GELU_ROWS}_c{GELU_COLS}_bf16");
        out.push(Row {
            name: format!("{base}_bwd_colsum"),
            t: cols,
            bytes: (3 * n * 2) as f64,
        });
        out.push(Row {
            name: format!("{base}_fwd"),
            t: fwd,
            bytes: (2 * n * 2) as f64,
        });
        out.push(Row {
            name: format!("{base}_bwd"),
            t: bwd,
            bytes: (3 * n * 2) as f64,
        });
        Ok(())
    }

    pub(crate) fn run() -> BoxResult {
        if genesis_cuda::skip_without_gpu("gpu_fused") {
            return Ok(());
        }
        let json_path = std::env::args().skip_while(|a| a != "--json").nth(1);
        let ctx = Context::get(0)?;
        let stream = Stream::new(&ctx)?;
        let mut rng = SmallRng::seed_from_u64(42);
        println!(
            "device: {} ({}), median of {RUNS} after {WARMUP} warm-up",
            ctx.name(),
            ctx.arch()
        );
        println!("{:<32} {:>9} {:>9} {:>9}", "case", "ms", "min ms", "GB/s");
        let mut rows = Vec::new();
        for n in CE_ROWS {
            classifier::<bf16>(&ctx, &stream, &mut rng, n, &mut rows)?;
            classifier::<f32>(&ctx, &stream, &mut rng, n, &mut rows)?;
        }
        layernorm::<bf16>(&ctx, &stream, &mut rng, &mut rows)?;
        layernorm::<f32>(&ctx, &stream, &mut rng, &mut rows)?;
        layernorm_narrow::<f32>(&ctx, &stream, &mut rng, &mut rows)?;
        layernorm_narrow::<bf16>(&ctx, &stream, &mut rng, &mut rows)?;
        gelu(&ctx, &stream, &mut rng, &mut rows)?;
        let mut json = Vec::new();
        for r in &rows {
            let gbs = r.bytes / (r.t.median_ms * 1e-3) / 1e9;
            println!(
                "{:<32} {:>9.3} {:>9.3} {:>9.1}",
                r.name, r.t.median_ms, r.t.min_ms, gbs
            );
            json.push(format!(
                "{{\"name\":\"{}\",\"median_ms\":{},\"min_ms\":{},\"gbps\":{gbs}}}",
                r.name, r.t.median_ms, r.t.min_ms
            ));
        }
        if let Some(p) = json_path {
            let text = format!(
                "{{\"device\":\"{}\",\"arch\":\"{}\",\"runs\":{RUNS},\"results\":[{}]}}\n",
                ctx.name(),
                ctx.arch(),
                json.join(",")
            );
            std::fs::write(&p, text)?;
        }
        Ok(())
    }
}
