//! GPU timings of the matmul kernels (xtask/gpu/torch_matmul.py times the same rows with
//! `torch.matmul`): square products in f32, TF32, bf16 and f16, thin and irregular shapes, and
//! transposed operands read in place. Device time between events (median after warm-up), and
//! for the seed's small f32 sizes the wall clock of a launch and a synchronisation.
//!
//! Every row runs the plan the storage layer makes (`MatmulPlan::new_for` with the device's SM
//! count: split-k for thin products), with its workspace allocated once before timing; rows
//! named `..._s1` force one slice (the same product without split-k), for comparison. Rows of
//! dtype `tf32` are f32 products at `MatmulPrecision::High` (PyTorch's side sets
//! `allow_tf32 = True` for them only). Rows named `..._sm80` force the `mma.sync` kernels of
//! `kernels/matmul.cu` where the Hopper kernels would run (`force_sm80_matmul_on_thread`);
//! the `kernel` column names the kernel each row ran.
//!
//! `gpu_matmul [--json PATH] [--only TEXT]`: prints a table and, with `--json`, writes the
//! figures; `--only` times just the rows whose name contains `TEXT` (for a profiler run).
//! With `GENESIS_SOAK_MS=N` each row is also timed sustained: after N ms of the product back
//! to back, batches of 30 queued back to back (`torch_matmul.py` does the same with the
//! variable set), the speed a training step gets once the GPU runs at its power limit.
//! Without a GPU (or without the `cuda` feature) it says so and exits successfully.

#[cfg(not(feature = "cuda"))]
fn main() {
    println!("gpu_matmul: skipped: built without the `cuda` feature");
}

#[cfg(feature = "cuda")]
fn main() {
    if let Err(e) = gpu::run() {
        eprintln!("gpu_matmul: error: {e}");
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
    use genesis_kernels::MatmulElement;
    use genesis_kernels::matmul::{
        MatmulLayout, MatmulOutput, MatmulPlan, MatmulPrecision, MatmulShape, MatrixLayout,
        force_sm80_matmul_on_thread, gpu_matmul_planned, last_matmul_kernel,
    };
    use half::{bf16, f16};
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    use super::timing;
    use timing::BoxResult;

    /// One row: `[batch] [m, k] @ [k, n]` with A and/or B transposed in memory.
    #[derive(Clone, Copy)]
    struct Case {
        dtype: &'static str,
        m: usize,
        n: usize,
        k: usize,
        ta: bool,
        tb: bool,
        /// Wall clock of launch + synchronize instead of device time.
        wall: bool,
        /// Never split k (`_s1` rows).
        unsplit: bool,
        /// Force the `sm_80` kernels (`_sm80` rows).
        sm80: bool,
        /// Products in the batch (`_b{batch}` rows when more than one), each operand its own
        /// matrices.
        batch: usize,
        /// A forced plan (`--sweep`): the `64 x 64` SIMT tiles or not, and the splits.
        force: Option<(bool, usize)>,
        /// A forced Hopper tile (`--sweep-sm90`): 0 (`128 x 256`) or 1 (`128 x 128`).
        tile: Option<usize>,
    }

    const fn case(dtype: &'static str, m: usize, n: usize, k: usize) -> Case {
        Case {
            dtype,
            m,
            n,
            k,
            ta: false,
            tb: false,
            wall: false,
            unsplit: false,
            sm80: false,
            batch: 1,
            force: None,
            tile: None,
        }
    }

    fn cases() -> Vec<Case> {
        let mut v = Vec::new();
        for s in [100, 500, 1000, 2000] {
            v.push(Case {
                wall: true,
                ..case("f32", s, s, s)
            });
        }
        for d in ["f32", "tf32", "bf16", "f16"] {
            v.push(case(d, 4096, 4096, 4096));
            v.push(case(d, 8192, 8192, 8192));
        }
        for d in ["f32", "bf16"] {
            v.push(case(d, 64, 4096, 1024));
            v.push(case(d, 1, 11008, 4096));
            // The same with `B` a transposed view: `x @ W.T` of a `Linear` layer's weight.
            v.push(Case {
                tb: true,
                ..case(d, 1, 11008, 4096)
            });
            v.push(case(d, 4095, 4097, 1023));
            v.push(case(d, 8192, 64, 8192));
            for (ta, tb) in [(false, true), (true, false), (true, true)] {
                v.push(Case {
                    ta,
                    tb,
                    ..case(d, 4096, 4096, 4096)
                });
            }
        }
        // The thin products again without split-k, and in TF32.
        for d in ["f32", "bf16"] {
            for (m, n, k) in [(64, 4096, 1024), (8192, 64, 8192)] {
                v.push(Case {
                    unsplit: true,
                    ..case(d, m, n, k)
                });
            }
        }
        // The Hopper rows again on the sm_80 kernels (TF32: the `mma.sync` kernel reads a
        // row-major B in place, where the Hopper kernel first copies it k-major).
        for d in ["bf16", "f16", "tf32"] {
            for s in [4096, 8192] {
                v.push(Case {
                    sm80: true,
                    ..case(d, s, s, s)
                });
            }
        }
        // A batch of small products: [64, 512, 64] @ [64, 64, 512].
        for d in ["f32", "tf32", "bf16", "f16"] {
            v.push(Case {
                batch: 64,
                ..case(d, 512, 512, 64)
            });
        }
        v.push(case("tf32", 64, 4096, 1024));
        v.push(case("tf32", 8192, 64, 8192));
        v.push(Case {
            ta: true,
            tb: true,
            ..case("tf32", 4096, 4096, 4096)
        });
        // GPT-2 124M's linear layers at batch 32 x 1024 tokens in bf16, and at 8 x 1024 in
        // full-precision f32 (GPT-2 trained in float32).
        for (dtype, tokens) in [("bf16", 32768), ("f32", 8192)] {
            for (m, n, k, ta, tb) in gpt2_products(tokens) {
                v.push(Case {
                    ta,
                    tb,
                    ..case(dtype, m, n, k)
                });
            }
        }
        v
    }

    /// GPT-2 124M's layers (`in -> out`) of the product tables.
    const GPT2_LAYERS: [(usize, usize); 5] = [
        (768, 2304),
        (768, 768),
        (768, 3072),
        (3072, 768),
        (768, 50304),
    ];

    /// The products of each GPT-2 layer at `tokens` rows: the forward `x @ Wᵀ`, and the
    /// backward `g @ W` and `gᵀ @ x`, each operand read in place: `(m, n, k, ta, tb)`.
    fn gpt2_products(tokens: usize) -> Vec<(usize, usize, usize, bool, bool)> {
        GPT2_LAYERS
            .iter()
            .flat_map(|&(i, o)| {
                [
                    (tokens, o, i, false, true),
                    (tokens, i, o, false, false),
                    (o, i, tokens, true, false),
                ]
            })
            .collect()
    }

    /// The layout of packed `m x k` and `k x n` operands, each read transposed (column-major)
    /// when `ta` or `tb`.
    fn packed_layout(m: usize, n: usize, k: usize, ta: bool, tb: bool) -> MatmulLayout {
        MatmulLayout {
            a: if ta {
                MatrixLayout::col_major(m)
            } else {
                MatrixLayout::row_major(k)
            },
            b: if tb {
                MatrixLayout::col_major(k)
            } else {
                MatrixLayout::row_major(n)
            },
        }
    }

    fn name(c: &Case) -> String {
        format!(
            "mm_{}_{}x{}x{}_{}{}{}{}{}",
            c.dtype,
            c.m,
            c.n,
            c.k,
            if c.ta { 't' } else { 'n' },
            if c.tb { 't' } else { 'n' },
            if c.unsplit { "_s1" } else { "" },
            if c.sm80 { "_sm80" } else { "" },
            if c.batch > 1 {
                format!("_b{}", c.batch)
            } else {
                String::new()
            }
        )
    }

    fn upload<T: MatmulElement>(
        ctx: &Arc<Context>,
        len: usize,
        rng: &mut SmallRng,
    ) -> BoxResult<DeviceBuffer> {
        let v: Vec<T> = (0..len)
            .map(|_| T::from_f32(rng.random_range(-1.0f32..1.0)))
            .collect();
        // SAFETY: plain element types without padding, read as bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(&v[..]))
        };
        Ok(DeviceBuffer::from_host(ctx, bytes)?)
    }

    fn time_case<T: MatmulOutput<T>>(
        ctx: &Arc<Context>,
        stream: &Stream,
        c: &Case,
        rng: &mut SmallRng,
    ) -> BoxResult<(timing::Timing, MatmulPlan, &'static str)> {
        let shape = MatmulShape {
            batch: c.batch,
            m: c.m,
            n: c.n,
            k: c.k,
            a_batch_stride: if c.batch > 1 { c.m * c.k } else { 0 },
            b_batch_stride: if c.batch > 1 { c.k * c.n } else { 0 },
        };
        let layout = packed_layout(c.m, c.n, c.k, c.ta, c.tb);
        let a = upload::<T>(ctx, c.batch * c.m * c.k, rng)?;
        let b = upload::<T>(ctx, c.batch * c.k * c.n, rng)?;
        let mut out = DeviceBuffer::alloc(ctx, c.batch * c.m * c.n * std::mem::size_of::<T>())?;
        let precision = if c.dtype == "tf32" {
            MatmulPrecision::High
        } else {
            MatmulPrecision::Highest
        };
        let mut plan = MatmulPlan::new_for_device::<T>(
            shape,
            ctx.multiprocessors() as usize,
            ctx.compute_capability(),
            precision,
        );
        if c.unsplit {
            plan = plan.with_splits(1);
        }
        if let Some((small, splits)) = c.force {
            plan = plan.with_splits(splits).with_small_tiles(small);
        }
        if let Some(tile) = c.tile {
            plan = plan.with_sm90_tile(tile);
        }
        let ws_len = plan.workspace_bytes_for(
            &layout,
            std::mem::size_of::<T>(),
            ctx.compute_capability(),
            (0, 0),
        );
        let mut ws = DeviceBuffer::alloc(ctx, ws_len.max(16))?;
        let flops = 2.0 * (c.batch * c.m * c.n * c.k) as f64;
        let (warmup, runs) = if flops > 2e11 { (3, 10) } else { (5, 30) };
        let mut f = || -> BoxResult {
            gpu_matmul_planned::<T, T>(
                stream,
                &plan,
                layout,
                a.as_span()?,
                b.as_span()?,
                out.as_span_mut()?,
                ws.as_span_mut()?,
            )?;
            Ok(())
        };
        force_sm80_matmul_on_thread(Some(c.sm80));
        let t = if c.wall {
            timing::wall(warmup, runs, || Ok(stream.synchronize()?), &mut f)
        } else {
            timing::events(stream, warmup, runs, &mut f)
        };
        if let Some(ms) = timing::soak_ms() {
            println!(
                "sustained {}: {:.4} ms a product",
                name(c),
                timing::sustained(stream, ms, &mut f)?
            );
        }
        force_sm80_matmul_on_thread(None);
        Ok((t?, plan, last_matmul_kernel().unwrap_or("-")))
    }

    pub(crate) fn run() -> BoxResult {
        if genesis_cuda::device_count().unwrap_or(0) == 0 {
            println!("gpu_matmul: skipped: no CUDA device");
            return Ok(());
        }
        let json = std::env::args().skip_while(|a| a != "--json").nth(1);
        let only = std::env::args().skip_while(|a| a != "--only").nth(1);
        let ctx = Context::get(0)?;
        let stream = Stream::new(&ctx)?;
        let mut rng = SmallRng::seed_from_u64(5);
        if std::env::args().any(|a| a == "--sweep") {
            return sweep(&ctx, &stream, &mut rng);
        }
        if std::env::args().any(|a| a == "--sweep-sm90") {
            return sweep_sm90(&ctx, &stream, &mut rng);
        }
        let mut rows = Vec::new();
        println!("device: {} ({} SMs)", ctx.name(), ctx.multiprocessors());
        println!(
            "{:<38} {:>10} {:>10} {:>9} {:>6}  {:<6}  kernel",
            "case", "median ms", "min ms", "TFLOP/s", "splits", "clock"
        );
        for c in cases() {
            if only.as_deref().is_some_and(|o| !name(&c).contains(o)) {
                continue;
            }
            let (t, plan, kernel) = match c.dtype {
                "f32" | "tf32" => time_case::<f32>(&ctx, &stream, &c, &mut rng)?,
                "bf16" => time_case::<bf16>(&ctx, &stream, &c, &mut rng)?,
                _ => time_case::<f16>(&ctx, &stream, &c, &mut rng)?,
            };
            let splits = plan.splits();
            let tflops = 2.0 * (c.batch * c.m * c.n * c.k) as f64 / (t.median_ms * 1e-3) / 1e12;
            let clock = if c.wall { "wall" } else { "device" };
            println!(
                "{:<38} {:>10.4} {:>10.4} {:>9.1} {splits:>6}  {clock:<6}  {kernel}",
                name(&c),
                t.median_ms,
                t.min_ms,
                tflops
            );
            rows.push(serde_json::json!({
                "name": name(&c),
                "median_ms": t.median_ms,
                "min_ms": t.min_ms,
                "tflops": tflops,
                "clock": clock,
                "splits": splits,
                "kernel": kernel,
            }));
        }
        if let Some(path) = json {
            let doc = serde_json::json!({ "device": ctx.name(), "results": rows });
            std::fs::write(path, serde_json::to_string_pretty(&doc)?)?;
        }
        Ok(())
    }

    /// `--sweep-sm90 [--pp-only] [--tile N] [--splits N] [--only MxNxK]`: bf16 products on the Hopper
    /// kernels, each tile (`128 x 256`, `128 x 128`, unsplit the ping-pong `128 x 128`, `128 x
    /// 192` and `192 x 96`, tiles 3 to 5, and `192 x 192`, tile 6) and
    /// split in turn (device time), next to the plan `MatmulPlan::new_for_device`
    /// makes, for fitting and checking its cost model: GPT-2's linear layers (the fit) and
    /// other shapes (the check). Lines `sweep_sm90 m n k batch layout tile splits median_ms
    /// chosen`.
    fn sweep_sm90(ctx: &Arc<Context>, stream: &Stream, rng: &mut SmallRng) -> BoxResult {
        let mut shapes: Vec<(usize, usize, usize, usize, bool, bool)> = Vec::new();
        // The first four layers' products (the head's are not part of the fit).
        for (m, n, k, ta, tb) in gpt2_products(32768).into_iter().take(12) {
            shapes.push((m, n, k, 1, ta, tb));
        }
        shapes.extend([
            (4096, 4096, 4096, 1, false, false),
            (2048, 2048, 8192, 1, false, false),
            (1024, 1024, 16384, 1, true, false),
            (8192, 1024, 4096, 1, false, true),
            (6144, 1536, 1024, 1, false, false),
            (4095, 4097, 1023, 1, false, false),
            (512, 512, 64, 64, false, false),
            (1536, 640, 20000, 1, true, false),
            (16384, 4096, 512, 1, false, true),
            (50304, 768, 32768, 1, true, false),
        ]);
        let sms = ctx.multiprocessors() as usize;
        let cc = ctx.compute_capability();
        // `--only MxNxK`: the shapes whose extents read so.
        let only = std::env::args().skip_while(|a| a != "--only").nth(1);
        for (m, n, k, batch, ta, tb) in shapes {
            if only
                .as_deref()
                .is_some_and(|o| !format!("{m}x{n}x{k}").contains(o))
            {
                continue;
            }
            let shape = MatmulShape {
                batch,
                m,
                n,
                k,
                a_batch_stride: m * k,
                b_batch_stride: k * n,
            };
            let chosen =
                MatmulPlan::new_for_device::<bf16>(shape, sms, cc, MatmulPrecision::Highest);
            // `--pp-only`: the ping-pong tiles alone (unsplit).
            let pp_only = std::env::args().any(|a| a == "--pp-only");
            // `--tile N`: that tile alone.
            let one = std::env::args()
                .skip_while(|a| a != "--tile")
                .nth(1)
                .and_then(|t| t.parse::<usize>().ok());
            let tiles: &[usize] = if let Some(t) = one.as_ref() {
                std::slice::from_ref(t)
            } else if pp_only {
                &[3, 4, 5]
            } else {
                &[0, 1, 3, 4, 5, 6]
            };
            for &tile in tiles {
                let mut seen = Vec::new();
                let splits: &[usize] = if (3..=5).contains(&tile) {
                    &[1]
                } else {
                    &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 16]
                };
                // `--splits N`: that split alone.
                let want = std::env::args()
                    .skip_while(|a| a != "--splits")
                    .nth(1)
                    .and_then(|t| t.parse::<usize>().ok());
                for &s in splits {
                    if want.is_some_and(|w| w != s) {
                        continue;
                    }
                    let c = Case {
                        batch,
                        ta,
                        tb,
                        force: Some((false, s)),
                        tile: Some(tile),
                        ..case("bf16", m, n, k)
                    };
                    if seen.contains(
                        &MatmulPlan::new(shape, sms, MatmulPrecision::Highest)
                            .with_splits(s)
                            .splits(),
                    ) {
                        continue;
                    }
                    let (t, plan, _) = time_case::<bf16>(ctx, stream, &c, rng)?;
                    seen.push(plan.splits());
                    let is_chosen =
                        plan.splits() == chosen.splits() && chosen.sm90_tile() == Some(tile);
                    println!(
                        "sweep_sm90 {m} {n} {k} {batch} {}{} {tile} {} {:.4} {}",
                        if ta { 't' } else { 'n' },
                        if tb { 't' } else { 'n' },
                        plan.splits(),
                        t.median_ms,
                        u8::from(is_chosen)
                    );
                }
            }
        }
        Ok(())
    }

    /// `--sweep`: full-precision f32 products of every SIMT tile choice and split in turn
    /// (device time), next to the plan `MatmulPlan::new_for` makes, for fitting and checking
    /// its cost model. Lines `sweep m n k batch small splits kslice median_ms chosen`.
    fn sweep(ctx: &Arc<Context>, stream: &Stream, rng: &mut SmallRng) -> BoxResult {
        let shapes: [(usize, usize, usize, usize); 30] = [
            (100, 100, 100, 1),
            (200, 200, 200, 1),
            (300, 300, 300, 1),
            (500, 500, 500, 1),
            (700, 700, 700, 1),
            (1000, 1000, 1000, 1),
            (256, 1024, 512, 1),
            (1024, 256, 1024, 1),
            (128, 512, 2048, 1),
            (384, 384, 4096, 1),
            (128, 128, 128, 8),
            (64 + 1, 200, 3000, 1),
            (150, 150, 150, 1),
            (400, 400, 400, 1),
            (600, 600, 600, 1),
            (800, 800, 800, 1),
            (1200, 1200, 1200, 1),
            (300, 900, 700, 1),
            (512, 768, 300, 1),
            (200, 2000, 200, 1),
            (96, 1000, 1000, 1),
            (300, 300, 300, 3),
            (640, 320, 1500, 1),
            (250, 250, 8000, 1),
            (8192, 64, 8192, 1),
            (64, 4096, 1024, 1),
            (64, 1024, 4096, 1),
            (3000, 50, 2000, 1),
            (40, 300, 2000, 2),
            (1000, 64, 500, 1),
        ];
        // `--sweep --gpt2`: GPT-2 124M's f32 products at batch 8 x 1024 instead (layouts as in
        // `cases`).
        let mut shapes: Vec<(usize, usize, usize, usize, bool, bool)> = shapes
            .iter()
            .map(|&(m, n, k, b)| (m, n, k, b, false, false))
            .collect();
        if std::env::args().any(|a| a == "--gpt2") {
            shapes = gpt2_products(8192)
                .into_iter()
                .map(|(m, n, k, ta, tb)| (m, n, k, 1, ta, tb))
                .collect();
        }
        let sms = ctx.multiprocessors() as usize;
        for (m, n, k, batch, ta, tb) in shapes {
            let chosen = MatmulPlan::new_for::<f32>(
                MatmulShape {
                    batch,
                    m,
                    n,
                    k,
                    a_batch_stride: m * k,
                    b_batch_stride: k * n,
                },
                sms,
                MatmulPrecision::Highest,
            );
            let mut seen = Vec::new();
            // The products of n <= 64 or m <= 64 < n run on the 256 x 64 tiles whatever `small`.
            let narrow = n <= 64 || m <= 64;
            for small in [false, true] {
                if small && narrow {
                    continue;
                }
                for s in [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 20, 24, 32] {
                    let c = Case {
                        batch,
                        ta,
                        tb,
                        force: Some((small, s)),
                        ..case("f32", m, n, k)
                    };
                    let (t, plan, _) = time_case::<f32>(ctx, stream, &c, rng)?;
                    if seen.contains(&(small, plan.splits())) {
                        continue;
                    }
                    seen.push((small, plan.splits()));
                    let is_chosen = plan.splits() == chosen.splits()
                        && plan.small_tiles() == chosen.small_tiles();
                    println!(
                        "sweep {m} {n} {k} {batch}{} {} {} {} {:.4} {}",
                        if ta || tb {
                            format!(
                                " {}{}",
                                if ta { 't' } else { 'n' },
                                if tb { 't' } else { 'n' }
                            )
                        } else {
                            String::new()
                        },
                        u8::from(small),
                        plan.splits(),
                        plan.kslice(),
                        t.median_ms,
                        u8::from(is_chosen)
                    );
                }
            }
        }
        Ok(())
    }
}
