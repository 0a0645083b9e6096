//! GPU timings of the flash attention kernels (device events, warm-up, median of many runs):
//! forward and backward (the three launches of `gpu_attention_backward`) in bf16 for GPT-2's
//! `B=8, H=12, T=1024, D=64` causal (and batch 32), and `B=4, H=16, T=2048, D=128` causal and
//! not, and in f32 (rows `attn_f32_...`) for GPT-2's shape, causal and not, in TFLOP/s: the
//! forward does `4 B H Tq Tk D` flops (halved when causal), the backward 2.5 times that
//! (FlashAttention's convention). `xtask/gpu/torch_attention.py` prints the same table for
//! PyTorch's flash and cuDNN backends (bf16) and its memory-efficient and math ones (f32).
//!
//! The batch-32 GPT-2 case runs again as GPT-2's training lays it out (`..._packed`): q, k and
//! v the thirds of one `[B, T, 3, H, D]` projection (rows 3 H D apart), the output and its
//! gradient `[B, T, H, D]`, and the three gradients written into one buffer laid out as the
//! projection (`gpu_attention_backward_packed`).
//!
//! `gpu_attention [--json PATH]`: prints a table and, with `--json`, writes the figures. With
//! `GENESIS_SOAK_MS=N` the packed case is also timed sustained (`timing::sustained`; the
//! PyTorch script does the same with the variable set).
//! Without a GPU (or without the `cuda` feature) it says so and exits successfully.

#[cfg(not(feature = "cuda"))]
fn main() {
    println!("gpu_attention: skipped: built without the `cuda` feature");
}

#[cfg(feature = "cuda")]
fn main() {
    if let Err(e) = gpu::run() {
        eprintln!("gpu_attention: error: {e}");
        std::process::exit(1);
    }
}

#[cfg(feature = "cuda")]
#[path = "../../genesis-cuda/benches/support/timing.rs"]
#[allow(dead_code, unreachable_pub)]
mod timing;

#[cfg(feature = "cuda")]
mod gpu {
    use genesis_cuda::{Context, DeviceBuffer, Stream};
    use genesis_kernels::Element;
    use genesis_kernels::attention::{
        self, AttentionShape, BackwardStrides, ForwardStrides, Strides,
    };
    use half::bf16;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    use super::timing::{self, BoxResult};

    const WARMUP: usize = 5;
    const RUNS: usize = 30;

    /// `(batch, heads, t, head_dim, causal)`.
    pub(crate) const CASES: [(usize, usize, usize, usize, bool); 4] = [
        (8, 12, 1024, 64, true),
        (32, 12, 1024, 64, true),
        (4, 16, 2048, 128, true),
        (4, 16, 2048, 128, false),
    ];

    /// The f32 cases (head dim 64 only).
    pub(crate) const F32_CASES: [(usize, usize, usize, usize, bool); 2] =
        [(8, 12, 1024, 64, true), (8, 12, 1024, 64, false)];

    fn random<T: Element>(
        ctx: &std::sync::Arc<Context>,
        rng: &mut SmallRng,
        n: usize,
    ) -> BoxResult<DeviceBuffer> {
        let v: Vec<T> = (0..n)
            .map(|_| T::from_f64(rng.random_range(-1.0..1.0)))
            .collect();
        // SAFETY: the element types are plain-old-data.
        let bytes =
            unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), n * size_of::<T>()) };
        Ok(DeviceBuffer::from_host(ctx, bytes)?)
    }

    /// Times one case in `T`, printing its row and pushing its JSON object to `json`; with
    /// `packed`, in GPT-2's training layout (see the module documentation).
    fn case<T: Element>(
        ctx: &std::sync::Arc<Context>,
        stream: &Stream,
        rng: &mut SmallRng,
        (b, h, t, d, causal): (usize, usize, usize, usize, bool),
        prefix: &str,
        packed: bool,
        json: &mut Vec<String>,
    ) -> BoxResult {
        let sh = AttentionShape::new(b, h, t, t, d, causal);
        let n = b * h * t * d;
        // Contiguous [B, H, T, D] operands, or q, k, v at 0, H D and 2 H D of one
        // [B, T, 3, H, D] buffer with the output [B, T, H, D].
        let (qkv_s, o_s, at) = if packed {
            let s = Strides {
                batch: t * 3 * h * d,
                head: d,
                seq: 3 * h * d,
            };
            (s, Strides::bthd(h, t, d), [0, h * d, 2 * h * d])
        } else {
            let s = Strides::bhtd(h, t, d);
            (s, s, [0, n, 2 * n])
        };
        let fs = ForwardStrides {
            q: qkv_s,
            k: qkv_s,
            v: qkv_s,
            o: o_s,
        };
        let bs = BackwardStrides::of(fs);
        let (qkv, dout) = (random::<T>(ctx, rng, 3 * n)?, random::<T>(ctx, rng, n)?);
        let part = |i: usize| qkv.as_span::<T>().and_then(|s| s.slice(at[i]..));
        let mut o = DeviceBuffer::alloc(ctx, n * size_of::<T>())?;
        let mut lse = DeviceBuffer::alloc(ctx, b * h * t * 4)?;
        let mut dqkv = DeviceBuffer::alloc(ctx, 3 * n * size_of::<T>())?;
        let mut ws = DeviceBuffer::alloc(ctx, attention::backward_workspace_bytes(&sh))?;
        // One forward into `o` and `lse`, one backward from them (each timing below runs one).
        let run_fwd = |o: &mut DeviceBuffer, lse: &mut DeviceBuffer| -> BoxResult {
            attention::gpu_attention_forward::<T>(
                stream,
                &sh,
                &fs,
                part(0)?,
                part(1)?,
                part(2)?,
                o.as_span_mut()?,
                lse.as_span_mut()?,
            )?;
            Ok(())
        };
        let run_bwd = |o: &DeviceBuffer,
                       lse: &DeviceBuffer,
                       dqkv: &mut DeviceBuffer,
                       ws: &mut DeviceBuffer|
         -> BoxResult {
            attention::gpu_attention_backward_packed::<T>(
                stream,
                &sh,
                &bs,
                part(0)?,
                part(1)?,
                part(2)?,
                o.as_span()?,
                dout.as_span()?,
                lse.as_span()?,
                dqkv.as_span_mut()?,
                at,
                ws.as_span_mut()?,
                None,
            )?;
            Ok(())
        };
        let mut forward = |sm80: bool| {
            attention::force_sm80_attention_on_thread(sm80);
            let t = timing::events(stream, WARMUP, RUNS, || run_fwd(&mut o, &mut lse));
            attention::force_sm80_attention_on_thread(false);
            t
        };
        // On Hopper, bf16 and f16 run the wgmma kernels; the mma.sync ones (what Ampere and
        // Ada run) are timed beside them.
        let sm80 = ctx.compute_capability() == (9, 0) && T::NAME != "f32" && !packed;
        let sm80_fwd = if sm80 { Some(forward(true)?) } else { None };
        let fwd = forward(false)?;
        let mut backward = |sm80: bool| {
            attention::force_sm80_attention_on_thread(sm80);
            let t = timing::events(stream, WARMUP, RUNS, || {
                run_bwd(&o, &lse, &mut dqkv, &mut ws)
            });
            attention::force_sm80_attention_on_thread(false);
            t
        };
        let sm80_bwd = if sm80 { Some(backward(true)?) } else { None };
        let bwd = backward(false)?;
        if let Some(ms) = timing::soak_ms().filter(|_| packed) {
            let fwd = timing::sustained(stream, ms, &mut || run_fwd(&mut o, &mut lse))?;
            let bwd = timing::sustained(stream, ms, &mut || run_bwd(&o, &lse, &mut dqkv, &mut ws))?;
            println!(
                "sustained {prefix}b{b}_h{h}_t{t}_d{d} packed: forward {fwd:.4} ms, backward {bwd:.4} ms"
            );
        }
        let mut flops = 4.0 * (b * h * t * t * d) as f64;
        if causal {
            flops /= 2.0;
        }
        let tf = |fl: f64, ms: f64| fl / (ms * 1e-3) / 1e12;
        let name = format!(
            "attn_{prefix}b{b}_h{h}_t{t}_d{d}{}{}",
            if causal { "_causal" } else { "" },
            if packed { "_packed" } else { "" }
        );
        let (ft, bt) = (tf(flops, fwd.median_ms), tf(2.5 * flops, bwd.median_ms));
        println!(
            "{:<28} {:>9.3} {:>9.1} {:>9.3} {:>9.1}",
            name, fwd.median_ms, ft, bwd.median_ms, bt
        );
        if let (Some(f), Some(bk)) = (&sm80_fwd, &sm80_bwd) {
            println!(
                "{:<28} {:>9.3} {:>9.1} {:>9.3} {:>9.1}",
                format!("{name} mma.sync"),
                f.median_ms,
                tf(flops, f.median_ms),
                bk.median_ms,
                tf(2.5 * flops, bk.median_ms)
            );
        }
        json.push(format!(
            "{{\"name\":\"{name}\",\"fwd_median_ms\":{},\"fwd_min_ms\":{},\"fwd_tflops\":{ft},\
             \"bwd_median_ms\":{},\"bwd_min_ms\":{},\"bwd_tflops\":{bt}}}",
            fwd.median_ms, fwd.min_ms, bwd.median_ms, bwd.min_ms
        ));
        Ok(())
    }

    pub(crate) fn run() -> BoxResult {
        if genesis_cuda::skip_without_gpu("gpu_attention") {
            return Ok(());
        }
        let json_path = std::env::args().skip_while(|a| a != "--json").nth(1);
        let ctx = Context::get(0)?;
        let stream = Stream::new(&ctx)?;
        let mut rng = SmallRng::seed_from_u64(42);
        println!(
            "device: {} ({}), bf16 (rows attn_f32_: f32), [B, H, T, D] contiguous, median of {RUNS} after {WARMUP} warm-up",
            ctx.name(),
            ctx.arch()
        );
        println!(
            "{:<28} {:>9} {:>9} {:>9} {:>9}",
            "case", "fwd ms", "fwd TF/s", "bwd ms", "bwd TF/s"
        );
        let mut json = Vec::new();
        for c in CASES {
            case::<bf16>(&ctx, &stream, &mut rng, c, "", false, &mut json)?;
        }
        case::<bf16>(&ctx, &stream, &mut rng, CASES[1], "", true, &mut json)?;
        for c in F32_CASES {
            case::<f32>(&ctx, &stream, &mut rng, c, "f32_", false, &mut json)?;
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
