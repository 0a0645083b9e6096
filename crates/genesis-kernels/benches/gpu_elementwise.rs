//! GPU timings of the elementwise kernels (device events, warm-up, median of many runs).
//!
//! `gpu_elementwise [--json PATH]`: prints a table and, with `--json`, writes the figures.
//! Without a GPU (or without the `cuda` feature) it says so and exits successfully.

#[cfg(not(feature = "cuda"))]
fn main() {
    println!("gpu_elementwise: skipped: built without the `cuda` feature");
}

#[cfg(feature = "cuda")]
fn main() {
    if let Err(e) = gpu::run() {
        eprintln!("gpu_elementwise: error: {e}");
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
    use genesis_kernels::reduce::{self, ReducePlan};
    use genesis_kernels::{BinaryOp, Element, ReduceOp, ReduceShape, UnaryOp, gpu};
    use half::{bf16, f16};
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    const N: usize = 64 << 20;
    const WARMUP: usize = 5;
    const RUNS: usize = 50;

    use super::timing;
    use timing::BoxResult;

    struct Row {
        name: String,
        bytes: usize,
        median_ms: f64,
        min_ms: f64,
    }

    /// Device time of `f` on `stream`: median and min of RUNS after WARMUP.
    fn time(
        stream: &Stream,
        _ctx: &Arc<Context>,
        f: impl FnMut() -> BoxResult,
    ) -> BoxResult<(f64, f64)> {
        let t = timing::events(stream, WARMUP, RUNS, f)?;
        Ok((t.median_ms, t.min_ms))
    }

    fn random_buffer<T: Element>(
        ctx: &Arc<Context>,
        rng: &mut SmallRng,
        conv: impl Fn(f32) -> T,
    ) -> BoxResult<DeviceBuffer> {
        let v: Vec<T> = (0..N)
            .map(|_| conv(rng.random_range(-100.0f32..100.0)))
            .collect();
        // SAFETY: Element types are plain-old-data.
        let bytes = unsafe {
            std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v.as_slice()))
        };
        Ok(DeviceBuffer::from_host(ctx, bytes)?)
    }

    fn bench_type<T: Element>(
        rows: &mut Vec<Row>,
        ctx: &Arc<Context>,
        stream: &Stream,
        rng: &mut SmallRng,
        conv: impl Fn(f32) -> T + Copy,
    ) -> BoxResult {
        let a = random_buffer::<T>(ctx, rng, conv)?;
        let b = random_buffer::<T>(ctx, rng, conv)?;
        let mut out = DeviceBuffer::alloc(ctx, N * size_of::<T>())?;
        let (pa, po) = (a.device_ptr(), out.device_ptr());
        for op in [BinaryOp::Add, BinaryOp::Mul, BinaryOp::Maximum] {
            if op == BinaryOp::Maximum && !T::IS_FLOAT {
                continue;
            }
            let (med, min) = time(stream, ctx, || {
                let (x, y) = (a.as_span::<T>()?, b.as_span::<T>()?);
                gpu::binary::<T>(stream, op, x, y, out.as_span_mut::<T>()?)?;
                Ok(())
            })?;
            rows.push(Row {
                name: format!("{}_{}", op.name(), T::NAME),
                bytes: 3 * N * size_of::<T>(),
                median_ms: med,
                min_ms: min,
            });
        }
        if T::IS_FLOAT {
            let (med, min) = time(stream, ctx, || {
                gpu::unary::<T>(stream, UnaryOp::Exp, a.as_span()?, out.as_span_mut()?)?;
                Ok(())
            })?;
            rows.push(Row {
                name: format!("exp_{}", T::NAME),
                bytes: 2 * N * size_of::<T>(),
                median_ms: med,
                min_ms: min,
            });
            // Launch-shape variants (vectors per thread per tile; one tile per block, or a
            // grid of 8 blocks per SM striding over the tiles). The default is one vector.
            let sms = u64::from(ctx.multiprocessors());
            let nvec = (N / (16 / size_of::<T>())) as u64;
            for (u, persistent) in [(2u64, false), (4, false), (8, false), (4, true)] {
                let name: &'static str = match (u, T::NAME) {
                    (2, "f32") => "exp_u2_f32",
                    (4, "f32") => "exp_u4_f32",
                    (8, "f32") => "exp_u8_f32",
                    (2, "bf16") => "exp_u2_bf16",
                    (4, "bf16") => "exp_u4_bf16",
                    (8, "bf16") => "exp_u8_bf16",
                    _ => continue,
                };
                let kernel =
                    genesis_cuda::Kernel::get(ctx, &genesis_kernels::images::ELEMENTWISE, name)?;
                let blocks = if persistent {
                    sms * 8
                } else {
                    nvec.div_ceil(256 * u)
                };
                let (med, min) = time(stream, ctx, || {
                    let (mut a, mut o, mut n, mut v) = (pa, po, N as u64, 1i32);
                    let mut params: [*mut std::ffi::c_void; 4] = [
                        (&raw mut a).cast(),
                        (&raw mut o).cast(),
                        (&raw mut n).cast(),
                        (&raw mut v).cast(),
                    ];
                    // SAFETY: `exp_*` take (const T*, T*, u64, int); both buffers hold N
                    // 16-byte aligned elements and outlive the timing loop.
                    unsafe {
                        kernel.launch(
                            stream,
                            genesis_cuda::LaunchConfig::linear(blocks as u32, 256),
                            &mut params,
                        )?
                    };
                    Ok(())
                })?;
                rows.push(Row {
                    name: format!(
                        "exp_{}_u{u}{}",
                        T::NAME,
                        if persistent { "_persistent" } else { "" }
                    ),
                    bytes: 2 * N * size_of::<T>(),
                    median_ms: med,
                    min_ms: min,
                });
            }
        }
        let v = conv(1.5);
        let (med, min) = time(stream, ctx, || {
            gpu::fill::<T>(stream, out.as_span_mut()?, v)?;
            Ok(())
        })?;
        rows.push(Row {
            name: format!("fill_{}", T::NAME),
            bytes: N * size_of::<T>(),
            median_ms: med,
            min_ms: min,
        });
        Ok(())
    }

    /// One reduction of `input` (`shape`, the plan the library picks), timed with both passes;
    /// values and indices written.
    fn bench_reduce<T: Element>(
        rows: &mut Vec<Row>,
        ctx: &Arc<Context>,
        stream: &Stream,
        input: &DeviceBuffer,
        name: &str,
        op: ReduceOp,
        shape: ReduceShape,
    ) -> BoxResult {
        let plan = ReducePlan::new(shape, ctx.multiprocessors() as usize, size_of::<T>());
        bench_reduce_plan::<T>(rows, ctx, stream, input, name, op, plan)
    }

    /// A row plan (`inner == 1`) splitting each line into about `blocks` chunks.
    fn row_blocks_plan(shape: ReduceShape, blocks: usize) -> ReducePlan {
        let chunk = shape.r.div_ceil(blocks).next_multiple_of(64);
        ReducePlan {
            shape,
            splits: shape.r.div_ceil(chunk),
            chunk,
            warp_rows: false,
        }
    }

    /// A plan with column chunks of at least `min_rows` rows.
    fn col_rows_plan<T: Element>(ctx: &Context, shape: ReduceShape, min_rows: usize) -> ReducePlan {
        ReducePlan::with_col_rows(
            shape,
            ctx.multiprocessors() as usize,
            size_of::<T>(),
            min_rows,
        )
    }

    /// [`bench_reduce`] with a given plan.
    fn bench_reduce_plan<T: Element>(
        rows: &mut Vec<Row>,
        ctx: &Arc<Context>,
        stream: &Stream,
        input: &DeviceBuffer,
        name: &str,
        op: ReduceOp,
        plan: ReducePlan,
    ) -> BoxResult {
        let shape = plan.shape;
        let ws_len = plan.workspace_bytes::<T>(op).max(1);
        let mut ws = DeviceBuffer::alloc(ctx, ws_len)?;
        let mut out = DeviceBuffer::alloc(ctx, shape.output_len() * 8)?;
        let mut idx = DeviceBuffer::alloc(ctx, shape.output_len() * 8)?;
        let (med, min) = time(stream, ctx, || {
            let pi = if op.has_indices() {
                Some(idx.as_span_mut::<i64>()?)
            } else {
                None
            };
            reduce::gpu_reduce_planned::<T>(
                stream,
                op,
                input.as_span()?,
                plan,
                out.as_span_mut()?,
                pi,
                ws.as_span_mut()?,
            )?;
            Ok(())
        })?;
        rows.push(Row {
            name: name.to_string(),
            bytes: shape.input_len().unwrap_or(0) * size_of::<T>(),
            median_ms: med,
            min_ms: min,
        });
        Ok(())
    }

    /// sum/mean/max over all 64 Mi elements (f32, bf16) and over each dim of 8192 x 8192 f32.
    fn bench_reductions(
        rows: &mut Vec<Row>,
        ctx: &Arc<Context>,
        stream: &Stream,
        rng: &mut SmallRng,
    ) -> BoxResult {
        let all = ReduceShape {
            outer: 1,
            r: N,
            inner: 1,
        };
        let x = random_buffer::<f32>(ctx, rng, |v| v)?;
        for (name, op) in [
            ("sum", ReduceOp::Sum),
            ("mean", ReduceOp::Mean),
            ("max", ReduceOp::Max),
        ] {
            bench_reduce::<f32>(rows, ctx, stream, &x, &format!("{name}_f32"), op, all)?;
        }
        let side = 8192;
        let rows_shape = ReduceShape {
            outer: side,
            r: side,
            inner: 1,
        };
        let cols_shape = ReduceShape {
            outer: 1,
            r: side,
            inner: side,
        };
        bench_reduce::<f32>(
            rows,
            ctx,
            stream,
            &x,
            "sum_dim1_f32",
            ReduceOp::Sum,
            rows_shape,
        )?;
        bench_reduce::<f32>(
            rows,
            ctx,
            stream,
            &x,
            "sum_dim0_f32",
            ReduceOp::Sum,
            cols_shape,
        )?;
        bench_reduce::<f32>(
            rows,
            ctx,
            stream,
            &x,
            "mean_dim0_f32",
            ReduceOp::Mean,
            cols_shape,
        )?;
        bench_reduce::<f32>(
            rows,
            ctx,
            stream,
            &x,
            "max_dim1_f32",
            ReduceOp::ArgMax,
            rows_shape,
        )?;
        bench_reduce::<f32>(
            rows,
            ctx,
            stream,
            &x,
            "max_dim0_f32",
            ReduceOp::ArgMax,
            cols_shape,
        )?;
        // Blocks of the whole-tensor row pass, per multiprocessor (the plan's choice: 4 for
        // f32, 2 for bf16).
        let sms = ctx.multiprocessors() as usize;
        for per_sm in [2usize, 3, 4, 5, 8] {
            let plan = row_blocks_plan(all, sms * per_sm);
            for (name, op) in [
                ("sum", ReduceOp::Sum),
                ("max", ReduceOp::Max),
                ("argmax", ReduceOp::ArgMax),
            ] {
                bench_reduce_plan::<f32>(
                    rows,
                    ctx,
                    stream,
                    &x,
                    &format!("{name}_f32_blocks{per_sm}x"),
                    op,
                    plan,
                )?;
            }
        }
        // Column chunk length sweep (tuning COL_MIN_ROWS).
        for min_rows in [128, 256] {
            for (name, op) in [("sum", ReduceOp::Sum), ("max", ReduceOp::ArgMax)] {
                bench_reduce_plan::<f32>(
                    rows,
                    ctx,
                    stream,
                    &x,
                    &format!("{name}_dim0_f32_rows{min_rows}"),
                    op,
                    col_rows_plan::<f32>(ctx, cols_shape, min_rows),
                )?;
            }
        }
        drop(x);
        let y = random_buffer::<bf16>(ctx, rng, bf16::from_f32)?;
        for (name, op) in [
            ("sum", ReduceOp::Sum),
            ("mean", ReduceOp::Mean),
            ("max", ReduceOp::Max),
        ] {
            bench_reduce::<bf16>(rows, ctx, stream, &y, &format!("{name}_bf16"), op, all)?;
        }
        for per_sm in [2usize, 3, 4, 5, 8] {
            let plan = row_blocks_plan(all, sms * per_sm);
            bench_reduce_plan::<bf16>(
                rows,
                ctx,
                stream,
                &y,
                &format!("sum_bf16_blocks{per_sm}x"),
                ReduceOp::Sum,
                plan,
            )?;
        }
        bench_reduce::<bf16>(
            rows,
            ctx,
            stream,
            &y,
            "sum_dim1_bf16",
            ReduceOp::Sum,
            rows_shape,
        )?;
        bench_reduce::<bf16>(
            rows,
            ctx,
            stream,
            &y,
            "sum_dim0_bf16",
            ReduceOp::Sum,
            cols_shape,
        )?;
        // A linear layer's bias gradient in GPT-2's training (batch 32 x 1024 rows, 768 and
        // 2048 columns; N elements hold no more): few columns, so many splits for the final
        // pass to combine.
        for inner in [768, 2048] {
            bench_reduce::<bf16>(
                rows,
                ctx,
                stream,
                &y,
                &format!("sum_dim0_bf16_32768x{inner}"),
                ReduceOp::Sum,
                ReduceShape {
                    outer: 1,
                    r: 32768,
                    inner,
                },
            )?;
        }
        for min_rows in [128, 256] {
            bench_reduce_plan::<bf16>(
                rows,
                ctx,
                stream,
                &y,
                &format!("sum_dim0_bf16_rows{min_rows}"),
                ReduceOp::Sum,
                col_rows_plan::<bf16>(ctx, cols_shape, min_rows),
            )?;
        }
        Ok(())
    }

    /// Transpose of 8192 x 8192 f32 to contiguous, `m[::2, ::3]` of it, and a cast to bf16.
    fn bench_copies(
        rows: &mut Vec<Row>,
        ctx: &Arc<Context>,
        stream: &Stream,
        rng: &mut SmallRng,
    ) -> BoxResult {
        const M: usize = 8192;
        let m = random_buffer::<f32>(ctx, rng, |x| x)?;
        let mut out = DeviceBuffer::alloc(ctx, M * M * 4)?;
        let (med, min) = time(stream, ctx, || {
            let (from, to) = (m.as_span()?, out.as_span_mut()?);
            gpu::transpose(stream, 4, from, to, 1, M, M, M, M * M, M * M)?;
            Ok(())
        })?;
        rows.push(Row {
            name: "transpose_8192_f32".into(),
            bytes: 2 * M * M * 4,
            median_ms: med,
            min_ms: min,
        });
        let (r, c) = (M.div_ceil(2), M.div_ceil(3));
        let desc = genesis_kernels::StridedCopy::new(
            &[r, c],
            &[2 * M as isize, 3],
            0,
            &[c as isize, 1],
            0,
        )?;
        let (med, min) = time(stream, ctx, || {
            gpu::strided_copy(stream, 4, m.as_span()?, out.as_span_mut()?, &desc)?;
            Ok(())
        })?;
        rows.push(Row {
            name: "slice_2_3_8192_f32".into(),
            bytes: 2 * r * c * 4,
            median_ms: med,
            min_ms: min,
        });
        let (med, min) = time(stream, ctx, || {
            gpu::cast(
                stream,
                genesis_kernels::DType::F32,
                m.as_span()?,
                genesis_kernels::DType::BF16,
                out.as_span_mut()?,
                M * M,
            )?;
            Ok(())
        })?;
        rows.push(Row {
            name: "cast_f32_bf16_64Mi".into(),
            bytes: M * M * 6,
            median_ms: med,
            min_ms: min,
        });
        Ok(())
    }

    pub(crate) fn run() -> BoxResult {
        if genesis_cuda::skip_without_gpu("gpu_elementwise") {
            return Ok(());
        }
        let json_path = std::env::args().skip_while(|a| a != "--json").nth(1);
        let ctx = Context::get(0)?;
        let stream = Stream::new(&ctx)?;
        let mut rng = SmallRng::seed_from_u64(42);
        let mut rows = Vec::new();
        bench_type::<f32>(&mut rows, &ctx, &stream, &mut rng, |x| x)?;
        bench_type::<bf16>(&mut rows, &ctx, &stream, &mut rng, bf16::from_f32)?;
        bench_type::<f16>(&mut rows, &ctx, &stream, &mut rng, f16::from_f32)?;
        bench_type::<i32>(&mut rows, &ctx, &stream, &mut rng, |x| x as i32)?;
        bench_type::<i64>(&mut rows, &ctx, &stream, &mut rng, |x| x as i64)?;
        bench_copies(&mut rows, &ctx, &stream, &mut rng)?;
        bench_reductions(&mut rows, &ctx, &stream, &mut rng)?;
        // The copy ceiling: a 256 MiB device-to-device copy, read + write counted.
        let src = random_buffer::<f32>(&ctx, &mut rng, |x| x)?;
        let mut dst = DeviceBuffer::alloc(&ctx, src.len())?;
        let (med, min) = time(&stream, &ctx, || Ok(dst.copy_from_device(&src, &stream)?))?;
        rows.push(Row {
            name: "copy_d2d_256MiB".into(),
            bytes: 2 * src.len(),
            median_ms: med,
            min_ms: min,
        });

        println!(
            "device: {} ({}), {} elements, median of {RUNS} after {WARMUP} warm-up",
            ctx.name(),
            ctx.arch(),
            N
        );
        println!(
            "{:<18} {:>10} {:>10} {:>10}",
            "case", "median ms", "min ms", "GB/s"
        );
        let mut json = Vec::new();
        for r in &rows {
            let gbs = r.bytes as f64 / (r.median_ms * 1e-3) / 1e9;
            println!(
                "{:<18} {:>10.4} {:>10.4} {:>10.1}",
                r.name, r.median_ms, r.min_ms, gbs
            );
            json.push(format!(
                "{{\"name\":\"{}\",\"bytes\":{},\"median_ms\":{},\"min_ms\":{},\"gb_per_s\":{}}}",
                r.name, r.bytes, r.median_ms, r.min_ms, gbs
            ));
        }
        if let Some(p) = json_path {
            let text = format!(
                "{{\"device\":\"{}\",\"arch\":\"{}\",\"elements\":{N},\"runs\":{RUNS},\"results\":[{}]}}\n",
                ctx.name(),
                ctx.arch(),
                json.join(",")
            );
            std::fs::write(&p, text)?;
        }
        Ok(())
    }
}
