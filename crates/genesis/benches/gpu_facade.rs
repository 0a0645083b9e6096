//! GPU timings through the `genesis` facade: the host cost of a small op (1000 dependent adds
//! on 1-element tensors, wall clock), whole-path reductions, broadcast and scalar adds, `cat`,
//! masks, matmul and the ops of convolutional networks (output allocation included).
//!
//! `gpu_facade [--json PATH]`: prints a table and, with `--json`, writes the figures. Without a
//! GPU (or without the `cuda` feature) it says so and exits successfully.

#[cfg(not(feature = "cuda"))]
fn main() {
    println!("gpu_facade: skipped: built without the `cuda` feature");
}

#[cfg(feature = "cuda")]
fn main() {
    if let Err(e) = gpu::run() {
        eprintln!("gpu_facade: error: {e}");
        std::process::exit(1);
    }
}

#[cfg(feature = "cuda")]
#[path = "../../genesis-cuda/benches/support/timing.rs"]
#[allow(dead_code, unreachable_pub)]
mod timing;

#[cfg(feature = "cuda")]
mod gpu {
    use std::time::Instant;

    use genesis::{DType, Device, Tensor};

    use super::timing;
    use timing::BoxResult;

    struct Row {
        name: String,
        bytes: usize,
        median_ms: f64,
        min_ms: f64,
        note: String,
    }

    /// A row for `ops` ops timed together: the note gives the time per op.
    fn per_op(name: String, (median_ms, min_ms): (f64, f64), ops: usize) -> Row {
        Row {
            name,
            bytes: 0,
            median_ms,
            min_ms,
            note: format!("{:.2} us per op", median_ms * 1e3 / ops as f64),
        }
    }

    fn median_min(v: Vec<f64>) -> (f64, f64) {
        let t = timing::Timing::of(v);
        (t.median_ms, t.min_ms)
    }

    /// Wall time of `f` (synchronised), median and min over `runs` after warm-up.
    fn wall(runs: usize, f: impl FnMut() -> BoxResult) -> BoxResult<(f64, f64)> {
        let t = timing::wall(3, runs, || Ok(genesis::cuda::synchronize(0)?), f)?;
        Ok((t.median_ms, t.min_ms))
    }

    /// One row per case (name, bytes, op): its wall clock over `runs` synchronised calls, output
    /// allocation included, as `torch_ref.py` times PyTorch's.
    fn wall_rows(
        rows: &mut Vec<Row>,
        runs: usize,
        cases: &[(&str, usize, &dyn Fn() -> BoxResult)],
    ) -> BoxResult {
        for &(name, bytes, f) in cases {
            let (med, min) = wall(runs, f)?;
            rows.push(Row {
                name: name.into(),
                bytes,
                median_ms: med,
                min_ms: min,
                note: "wall clock incl. output allocation, as torch_ref".into(),
            });
        }
        Ok(())
    }

    /// Device time of `f` between two events on the legacy stream (where the facade queues
    /// by default): 5 warm-up runs, median and min of 50. (`torch_ref.py` times these ops
    /// with the wall clock, as [`wall`] does: the rows it compares are the wall-clock ones.)
    fn events(f: impl FnMut() -> BoxResult) -> BoxResult<(f64, f64)> {
        let ctx = genesis_cuda::Context::get(0)?;
        events_on(&genesis_cuda::Stream::legacy(&ctx), f)
    }

    /// [`events`] on stream `s`.
    fn events_on(s: &genesis_cuda::Stream, f: impl FnMut() -> BoxResult) -> BoxResult<(f64, f64)> {
        let t = timing::events(s, 5, 50, f)?;
        Ok((t.median_ms, t.min_ms))
    }

    pub(crate) fn run() -> BoxResult {
        if !genesis::cuda::is_available() {
            println!("gpu_facade: skipped: no CUDA device found");
            return Ok(());
        }
        let json_path = std::env::args().skip_while(|a| a != "--json").nth(1);
        let dev = Device::Cuda(0);
        let mut rows = Vec::new();

        // Host cost of a small op: 1000 dependent adds on 1-element tensors, with small ops
        // batched (the default: one launch runs up to 127 of them, see genesis_cuda::batch) and
        // with batching off (one launch an op).
        const ADDS: usize = 1000;
        let ctx = genesis_cuda::Context::get(0)?;
        let one = Tensor::full([1], 1.0f32, dev)?;
        for (batching, suffix) in [(true, ""), (false, "_unbatched")] {
            ctx.set_batching(batching)?;
            let mut result = 0.0f32;
            let (med, min) = wall(21, || {
                let mut x = Tensor::zeros([1], DType::F32, dev)?;
                for _ in 0..ADDS {
                    x = x.add(&one)?;
                }
                result = x.to_vec::<f32>()?[0];
                Ok(())
            })?;
            if result != ADDS as f32 {
                return Err(format!("1000 adds gave {result}").into());
            }
            // The host's share: time to queue the 1000 adds (before synchronising).
            let mut host = Vec::new();
            for _ in 0..21 {
                let mut x = Tensor::zeros([1], DType::F32, dev)?;
                genesis::cuda::synchronize(0)?;
                let t = Instant::now();
                for _ in 0..ADDS {
                    x = x.add(&one)?;
                }
                host.push(t.elapsed().as_secs_f64() * 1e3);
                genesis::cuda::synchronize(0)?;
            }
            let (hmed, hmin) = median_min(host);
            rows.push(Row {
                name: format!("add_1elem_x1000_host{suffix}"),
                bytes: 0,
                median_ms: hmed,
                min_ms: hmin,
                note: format!(
                    "{:.2} us per op queued (host only)",
                    hmed * 1e3 / ADDS as f64
                ),
            });
            rows.push(per_op(format!("add_1elem_x1000{suffix}"), (med, min), ADDS));
        }
        // In place: 1000 dependent adds of 1, 256 and 2048 (the largest batched size) f32,
        // batched and not: what the GPU's time per op becomes when one block runs each
        // batched op.
        for n in [1usize, 256, genesis_kernels::gpu::BATCH_MAX_ELEMS] {
            let y = Tensor::full([n], 1.0f32, dev)?;
            for (batching, suffix) in [(true, ""), (false, "_unbatched")] {
                ctx.set_batching(batching)?;
                let x = Tensor::zeros([n], DType::F32, dev)?;
                let (med, min) = wall(21, || {
                    for _ in 0..ADDS {
                        x.add_(&y)?;
                    }
                    Ok(())
                })?;
                // 3 warm-up runs and 21 timed runs of ADDS adds of 1.
                if x.to_vec::<f32>()?[n - 1] != 24.0 * ADDS as f32 {
                    return Err(format!("{n}-element in-place adds went wrong").into());
                }
                rows.push(per_op(
                    format!("add_inplace_{n}elem_x1000{suffix}"),
                    (med, min),
                    ADDS,
                ));
            }
        }
        // The driver's floor: bare kernel launches (no tensors, no allocation, batching off)
        // on the legacy stream and on a stream of our own.
        ctx.set_batching(false)?;
        let mut buf = genesis_cuda::DeviceBuffer::alloc(&ctx, 256)?;
        let (head, mut tail) = buf.as_span_mut::<f32>()?.split_at_mut(32)?;
        let x = head.as_span().slice(..1)?;
        for (label, stream) in [
            (
                "raw_launch_legacy_x1000",
                genesis_cuda::Stream::legacy(&ctx),
            ),
            ("raw_launch_stream_x1000", genesis_cuda::Stream::new(&ctx)?),
        ] {
            let mut host = Vec::new();
            let mut walls = Vec::new();
            for _ in 0..21 {
                stream.synchronize()?;
                let t = Instant::now();
                for _ in 0..ADDS {
                    // One element of `buf` read twice, another one written.
                    let out = tail.slice_mut(..1)?;
                    genesis_kernels::gpu::add::<f32>(&stream, x, x, out)?;
                }
                host.push(t.elapsed().as_secs_f64() * 1e3);
                stream.synchronize()?;
                walls.push(t.elapsed().as_secs_f64() * 1e3);
            }
            let (hmed, _) = median_min(host);
            let (wmed, wmin) = median_min(walls);
            rows.push(Row {
                name: label.into(),
                bytes: 0,
                median_ms: wmed,
                min_ms: wmin,
                note: format!(
                    "{:.2} us per launch wall, {:.2} us host",
                    wmed * 1e3 / ADDS as f64,
                    hmed * 1e3 / ADDS as f64
                ),
            });
        }
        ctx.set_batching(true)?;

        // Whole-path reductions of 64 Mi f32 (8192 x 8192), output allocation included.
        let side = 8192usize;
        let n = side * side;
        let data: Vec<f32> = (0..n)
            .map(|i| ((i * 2_654_435_761) % 1000) as f32 * 1e-3)
            .collect();
        let m = Tensor::from_slice(&data, [side, side], dev)?;
        type Case<'a> = (&'a str, Box<dyn Fn() -> genesis::Result<Tensor> + 'a>);
        let cases: Vec<Case<'_>> = vec![
            ("t_sum_f32", Box::new(|| m.sum())),
            ("t_mean_f32", Box::new(|| m.mean())),
            ("t_max_f32", Box::new(|| m.max())),
            ("t_sum_dim1_f32", Box::new(|| m.sum_dim([1], false))),
            ("t_sum_dim0_f32", Box::new(|| m.sum_dim([0], false))),
            ("t_max_dim1_f32", Box::new(|| Ok(m.max_dim(1, false)?.0))),
        ];
        for (name, f) in &cases {
            let (med, min) = wall(30, || {
                f()?;
                Ok(())
            })?;
            rows.push(Row {
                name: (*name).into(),
                bytes: n * 4,
                median_ms: med,
                min_ms: min,
                note: "wall clock incl. launch + sync, as torch_ref".into(),
            });
            let (med, min) = events(|| {
                f()?;
                Ok(())
            })?;
            rows.push(Row {
                name: format!("{name}_events"),
                bytes: n * 4,
                median_ms: med,
                min_ms: min,
                note: "device time between events around the op".into(),
            });
        }

        // The facade's sum over all elements against the same reduction launched directly: on
        // pool (VMM arena) memory or a cuMemAlloc buffer, on the legacy stream or a stream of
        // our own; and the facade's sum on a stream of our own. Differences between these rows
        // are the facade's own cost, the memory's or the stream's.
        {
            let pool =
                genesis_storage::Storage::from_slice(&data, genesis_storage::Device::Cuda(0))?;
            let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
            let plain = genesis_cuda::DeviceBuffer::from_host(&ctx, &bytes)?;
            let shape = genesis_kernels::ReduceShape {
                outer: 1,
                r: n,
                inner: 1,
            };
            let plan =
                genesis_kernels::reduce::ReducePlan::new(shape, ctx.multiprocessors() as usize, 4);
            let ws_len = plan
                .workspace_bytes::<f32>(genesis_kernels::ReduceOp::Sum)
                .max(1);
            let mut ws = genesis_cuda::DeviceBuffer::alloc(&ctx, ws_len)?;
            let mut out = genesis_cuda::DeviceBuffer::alloc(&ctx, 8)?;
            let own = genesis_cuda::Stream::new(&ctx)?;
            let legacy = genesis_cuda::Stream::legacy(&ctx);
            // SAFETY: `pool` holds n f32 on device 0 and outlives every launch below (each is
            // synchronised by its events before the next row); nothing writes it meanwhile.
            let pooled = unsafe {
                genesis_cuda::DeviceSpan::<f32>::from_raw(pool.device_ptr().unwrap_or(0), n)
            };
            let plain_span = plain.as_span::<f32>()?;
            for (label, input, stream) in [
                ("k_sum_f32_pool_legacy", pooled, &legacy),
                ("k_sum_f32_cumemalloc_legacy", plain_span, &legacy),
                ("k_sum_f32_pool_own_stream", pooled, &own),
                ("k_sum_f32_cumemalloc_own_stream", plain_span, &own),
            ] {
                let (med, min) = events_on(stream, || {
                    genesis_kernels::reduce::gpu_reduce::<f32>(
                        stream,
                        genesis_kernels::ReduceOp::Sum,
                        input,
                        shape,
                        out.as_span_mut()?,
                        None,
                        ws.as_span_mut()?,
                    )?;
                    Ok(())
                })?;
                rows.push(Row {
                    name: label.into(),
                    bytes: n * 4,
                    median_ms: med,
                    min_ms: min,
                    note: "kernels alone, events".into(),
                });
            }
            let s = genesis::cuda::Stream::new(0)?;
            // SAFETY: `s` is a stream of device 0's context and outlives `raw`.
            let raw = unsafe { genesis_cuda::Stream::borrowed(&ctx, s.id()) };
            let (med, min) = genesis::cuda::with_stream(&s, || {
                events_on(&raw, || {
                    m.sum()?;
                    Ok(())
                })
            })?;
            rows.push(Row {
                name: "t_sum_f32_events_own_stream".into(),
                bytes: n * 4,
                median_ms: med,
                min_ms: min,
                note: "facade sum on a stream of our own, events".into(),
            });
            // The wall clock's parts: the host's time in `m.sum()` (queuing, no wait), and a
            // synchronisation with nothing queued.
            let mut host = Vec::with_capacity(30);
            let mut idle = Vec::with_capacity(30);
            for _ in 0..30 {
                genesis::cuda::synchronize(0)?;
                let t = Instant::now();
                genesis::cuda::synchronize(0)?;
                idle.push(t.elapsed().as_secs_f64() * 1e3);
                let t = Instant::now();
                let r = m.sum()?;
                host.push(t.elapsed().as_secs_f64() * 1e3);
                genesis::cuda::synchronize(0)?;
                drop(r);
            }
            for (name, v, note) in [
                (
                    "t_sum_f32_host_only",
                    host,
                    "host time in m.sum() (queuing only)",
                ),
                (
                    "synchronize_idle",
                    idle,
                    "genesis::cuda::synchronize with nothing queued",
                ),
            ] {
                let (med, min) = median_min(v);
                rows.push(Row {
                    name: name.into(),
                    bytes: 0,
                    median_ms: med,
                    min_ms: min,
                    note: note.into(),
                });
            }
        }
        drop(cases);
        drop(m);
        // Boolean masks on the device: select 50% of 64 Mi f32 (x[mask]), and masked_fill_.
        let g = genesis::Generator::new(7);
        let x = g.rand([n], DType::F32, dev)?;
        let mask = g.rand([n], DType::F32, dev)?.lt_scalar(0.5)?;
        // Bytes: data read once, mask read twice, half the data written.
        let select_bytes = n * 4 + 2 * n + n * 2;
        let (med, min) = wall(30, || {
            x.masked_select(&mask)?;
            Ok(())
        })?;
        rows.push(Row {
            name: "masked_select_50pct_64Mi_f32".into(),
            bytes: select_bytes,
            median_ms: med,
            min_ms: min,
            note: "wall clock incl. count readback, as torch_ref".into(),
        });
        let (med, min) = events(|| {
            x.masked_select(&mask)?;
            Ok(())
        })?;
        rows.push(Row {
            name: "masked_select_50pct_64Mi_f32_events".into(),
            bytes: select_bytes,
            median_ms: med,
            min_ms: min,
            note: "device time between events around the op".into(),
        });
        let y = (&x * 1.0)?; // a copy of its own
        // Bytes as torch_ref counts them: data and mask read, half the data written.
        let fill_bytes = n * 4 + n + n * 2;
        let (med, min) = wall(30, || {
            y.masked_fill_(&mask, 1.5)?;
            Ok(())
        })?;
        rows.push(Row {
            name: "masked_fill_50pct_64Mi_f32".into(),
            bytes: fill_bytes,
            median_ms: med,
            min_ms: min,
            note: "wall clock incl. launch + sync, as torch_ref".into(),
        });
        let (med, min) = events(|| {
            y.masked_fill_(&mask, 1.5)?;
            Ok(())
        })?;
        rows.push(Row {
            name: "masked_fill_50pct_64Mi_f32_events".into(),
            bytes: fill_bytes,
            median_ms: med,
            min_ms: min,
            note: "device time between events around the op".into(),
        });
        drop((x, mask, y));

        // Broadcast and scalar operands read in place, and cat as strided copies, on 8192^2
        // f32 (output allocation included; wall clock, as torch_ref).
        let g = genesis::Generator::new(3);
        let x = g.rand([8192, 8192], DType::F32, dev)?;
        let bias = g.rand([8192], DType::F32, dev)?;
        let (n2, row) = (8192 * 8192usize, 8192usize);
        let halves = [
            g.rand([4096, 8192], DType::F32, dev)?,
            g.rand([4096, 8192], DType::F32, dev)?,
        ];
        let cases: [(&str, usize, &dyn Fn() -> BoxResult); 4] = [
            ("add_bias_8192x8192_f32", 2 * n2 * 4 + row * 4, &|| {
                (&x + &bias)?;
                Ok(())
            }),
            ("add_scalar_8192x8192_f32", 2 * n2 * 4, &|| {
                (&x + 1.0)?;
                Ok(())
            }),
            ("cat_2x4096x8192_f32", 2 * n2 * 4, &|| {
                Tensor::cat(&[&halves[0], &halves[1]], 0)?;
                Ok(())
            }),
            ("cat_dim1_2x4096x8192_f32", 2 * n2 * 4, &|| {
                Tensor::cat(&[&halves[0], &halves[1]], 1)?;
                Ok(())
            }),
        ];
        wall_rows(&mut rows, 30, &cases)?;
        drop((x, bias, halves));

        // The everyday ops on 8192^2 f32 (64 Mi elements; any of 64 Mi bools), output
        // allocation included; wall clock, as torch_ref. Bytes: input plus output.
        let g = genesis::Generator::new(4);
        let x = g.rand([8192, 8192], DType::F32, dev)?;
        let flags = g.rand([8192 * 8192], DType::F32, dev)?.lt_scalar(0.5)?;
        let (n2, row) = (8192 * 8192usize, 8192usize);
        let idx = g
            .rand([8192, 8192], DType::F32, dev)?
            .mul(8191.0)?
            .to_dtype(DType::I64)?;
        let picks = g
            .rand([4096], DType::F32, dev)?
            .mul(8191.0)?
            .to_dtype(DType::I64)?;
        let narrow = g.rand([8192, 1024], DType::F32, dev)?;
        let wide = g.rand([8192, 4096], DType::F32, dev)?;
        // 256 MiB of f32 in pinned host memory, for the transfer to the device.
        let pinned = g
            .rand([8192, 8192], DType::F32, Device::Cpu)?
            .pin_memory()?;
        let cases: &[(&str, usize, &dyn Fn() -> BoxResult)] = &[
            ("sort_8192x1024_f32", 8192 * 1024 * (4 + 4 + 8), &|| {
                narrow.sort(1, false)?;
                Ok(())
            }),
            ("sort_8192x4096_f32", 8192 * 4096 * (4 + 4 + 8), &|| {
                wide.sort(1, false)?;
                Ok(())
            }),
            (
                "topk16_8192x1024_f32",
                8192 * 1024 * 4 + 8192 * 16 * 12,
                &|| {
                    narrow.topk(16, 1, true, true)?;
                    Ok(())
                },
            ),
            ("cumsum_dim1_8192x8192_f32", 2 * n2 * 4, &|| {
                x.cumsum(1)?;
                Ok(())
            }),
            ("gather_dim1_8192x8192_f32", 2 * n2 * 4 + n2 * 8, &|| {
                x.gather(1, &idx)?;
                Ok(())
            }),
            (
                "index_select_4096_rows_8192_f32",
                2 * 4096 * row * 4,
                &|| {
                    x.index_select(0, &picks)?;
                    Ok(())
                },
            ),
            (
                "scatter_add_dim0_8192x8192_f32",
                3 * n2 * 4 + n2 * 8,
                &|| {
                    x.scatter_add(0, &idx, &x)?;
                    Ok(())
                },
            ),
            ("sin_8192x8192_f32", 2 * n2 * 4, &|| {
                x.sin()?;
                Ok(())
            }),
            ("clamp_8192x8192_f32", 2 * n2 * 4, &|| {
                x.clamp(Some(0.25), Some(0.75))?;
                Ok(())
            }),
            // The unary table's ops (one kernel each) and the ops built on comparisons.
            ("erf_8192x8192_f32", 2 * n2 * 4, &|| {
                x.erf()?;
                Ok(())
            }),
            ("gelu_8192x8192_f32", 2 * n2 * 4, &|| {
                x.gelu()?;
                Ok(())
            }),
            ("gelu_tanh_8192x8192_f32", 2 * n2 * 4, &|| {
                x.gelu_tanh()?;
                Ok(())
            }),
            ("silu_8192x8192_f32", 2 * n2 * 4, &|| {
                x.silu()?;
                Ok(())
            }),
            ("round_8192x8192_f32", 2 * n2 * 4, &|| {
                x.round()?;
                Ok(())
            }),
            ("isnan_8192x8192_f32", n2 * 5, &|| {
                x.isnan()?;
                Ok(())
            }),
            ("nan_to_num_8192x8192_f32", 2 * n2 * 4, &|| {
                x.nan_to_num(0.0, None, None)?;
                Ok(())
            }),
            ("prod_dim1_8192x8192_f32", n2 * 4 + row * 4, &|| {
                x.prod_dim(1, false)?;
                Ok(())
            }),
            ("var_dim1_8192x8192_f32", n2 * 4 + row * 4, &|| {
                x.var_dim(1, 1.0, false)?;
                Ok(())
            }),
            ("var_dim0_8192x8192_f32", n2 * 4 + row * 4, &|| {
                x.var_dim(0, 1.0, false)?;
                Ok(())
            }),
            // Reductions of short rows (a thread a row).
            ("sum_rows_of_8_8192x8192_f32", n2 * 4 + n2 / 2, &|| {
                x.reshape([n2 / 8, 8])?.sum_dim(1isize, false)?;
                Ok(())
            }),
            ("argmax_rows_of_4_8192x8192_f32", n2 * 4 + n2 * 2, &|| {
                x.reshape([n2 / 4, 4])?.argmax_dim(1isize, false)?;
                Ok(())
            }),
            ("any_64Mi_bool", n2, &|| {
                flags.any()?;
                Ok(())
            }),
            // Conversions and transfers where users call them (bytes: read plus written).
            ("to_dtype_bf16_8192x8192_f32", n2 * 6, &|| {
                x.to_dtype(DType::BF16)?;
                Ok(())
            }),
            ("to_cuda_pinned_8192x8192_f32", n2 * 8, &|| {
                pinned.to(dev)?;
                Ok(())
            }),
            ("to_cpu_8192x8192_f32", n2 * 8, &|| {
                x.to(Device::Cpu)?;
                Ok(())
            }),
        ];
        wall_rows(&mut rows, 30, cases)?;
        drop((x, flags, idx, picks, narrow, wide, pinned));

        // Floor division, remainder and the bitwise ops on 8192^2 (output allocation included;
        // wall clock, as torch_ref). Integer divisions check the divisor for zeros first (one
        // more read of it and a synchronisation; PyTorch's CUDA does not check). Bytes: inputs
        // plus output.
        let x = g.rand([8192, 8192], DType::F32, dev)?;
        let y = g.rand([8192, 8192], DType::F32, dev)?.add(0.5)?;
        let a = g.randint(-1000, 1000, [8192, 8192], DType::I64, dev)?;
        let b = g.randint(1, 50, [8192, 8192], DType::I64, dev)?;
        let (ai, bi) = (a.to_dtype(DType::I32)?, b.to_dtype(DType::I32)?);
        let cases: [(&str, usize, &dyn Fn() -> BoxResult); 4] = [
            ("floor_divide_8192x8192_f32", 3 * n2 * 4, &|| {
                x.floor_divide(&y)?;
                Ok(())
            }),
            ("remainder_scalar_8192x8192_f32", 2 * n2 * 4, &|| {
                (&x % 0.3)?;
                Ok(())
            }),
            ("remainder_8192x8192_i64", 3 * n2 * 8, &|| {
                (&a % &b)?;
                Ok(())
            }),
            ("bitwise_and_8192x8192_i32", 3 * n2 * 4, &|| {
                (&ai & &bi)?;
                Ok(())
            }),
        ];
        wall_rows(&mut rows, 30, &cases)?;
        drop((x, y, a, b, ai, bi));

        // The softmax family on 8192^2 (f32 and bf16), output allocation included; wall clock,
        // as torch_ref. Bytes: input plus output.
        let x = g.randn([8192, 8192], DType::F32, dev)?;
        let xb = g.randn([8192, 8192], DType::BF16, dev)?;
        let cases: [(&str, usize, &dyn Fn() -> BoxResult); 6] = [
            ("softmax_dim1_8192x8192_f32", 2 * n2 * 4, &|| {
                x.softmax(1)?;
                Ok(())
            }),
            ("log_softmax_dim1_8192x8192_f32", 2 * n2 * 4, &|| {
                x.log_softmax(1)?;
                Ok(())
            }),
            ("softmax_dim1_8192x8192_bf16", 2 * n2 * 2, &|| {
                xb.softmax(1)?;
                Ok(())
            }),
            ("log_softmax_dim1_8192x8192_bf16", 2 * n2 * 2, &|| {
                xb.log_softmax(1)?;
                Ok(())
            }),
            ("logsumexp_dim1_8192x8192_f32", n2 * 4 + row * 4, &|| {
                x.logsumexp(1, false)?;
                Ok(())
            }),
            ("softmax_dim0_8192x8192_f32", 2 * n2 * 4, &|| {
                x.softmax(0)?;
                Ok(())
            }),
        ];
        wall_rows(&mut rows, 30, &cases)?;
        drop((x, xb));

        // The ops of convolutional networks on a ResNet stage's shape ([32, 64, 56, 56]),
        // output allocation included; wall clock, as torch_ref. The convolution is an im2col
        // copy and one matmul (PyTorch: cuDNN, which may use TF32 for float32); its backward
        // row runs the forward and the backward of a weight that requires grad. Bytes: input
        // plus output (the convolutions: 0, they are compute-bound).
        let x = g.randn([32, 64, 56, 56], DType::F32, dev)?;
        let xb = x.to_dtype(DType::BF16)?;
        let w = g.randn([64, 64, 3, 3], DType::F32, dev)?.mul(0.05)?;
        let wb = w.to_dtype(DType::BF16)?;
        let wg = wb.detach().requires_grad_(true)?;
        let (rm, rv) = (
            Tensor::zeros([64], DType::F32, dev)?,
            Tensor::ones([64], DType::F32, dev)?,
        );
        let (bn_w, bn_b) = (
            Tensor::ones([64], DType::F32, dev)?,
            Tensor::zeros([64], DType::F32, dev)?,
        );
        let n_img = 32 * 64 * 56 * 56usize;
        let same = genesis::ConvOptions::new().padding(1);
        let cases: [(&str, usize, &dyn Fn() -> BoxResult); 10] = [
            ("conv2d_3x3_64c_56x56_n32_f32", 0, &|| {
                x.conv2d(&w, None, same)?;
                Ok(())
            }),
            ("conv2d_3x3_64c_56x56_n32_bf16", 0, &|| {
                xb.conv2d(&wb, None, same)?;
                Ok(())
            }),
            ("conv2d_fwd_bwd_3x3_64c_56x56_n32_bf16", 0, &|| {
                xb.conv2d(&wg, None, same)?.sum()?.backward()?;
                wg.zero_grad();
                Ok(())
            }),
            (
                "max_pool2d_3x3_s2_64c_56x56_n32_f32",
                n_img * 4 + n_img,
                &|| {
                    x.max_pool2d(3, genesis::PoolOptions::new().stride(2).padding(1))?;
                    Ok(())
                },
            ),
            (
                "avg_pool2d_2x2_64c_56x56_n32_f32",
                n_img * 4 + n_img,
                &|| {
                    x.avg_pool2d(2, genesis::PoolOptions::new())?;
                    Ok(())
                },
            ),
            ("batch_norm_train_64c_56x56_n32_f32", 2 * n_img * 4, &|| {
                x.batch_norm(
                    Some(&rm),
                    Some(&rv),
                    Some(&bn_w),
                    Some(&bn_b),
                    true,
                    0.1,
                    1e-5,
                )?;
                Ok(())
            }),
            (
                "interpolate_bilinear_2x_64c_56x56_n32_f32",
                5 * n_img * 4,
                &|| {
                    x.interpolate(
                        &[112, 112],
                        genesis::Interpolation::Linear {
                            align_corners: false,
                        },
                    )?;
                    Ok(())
                },
            ),
            (
                "permute_nhwc_contiguous_64c_56x56_n32_f32",
                2 * n_img * 4,
                &|| {
                    x.permute([0usize, 2, 3, 1])?.contiguous()?;
                    Ok(())
                },
            ),
            (
                "permute_nhwc_contiguous_64c_56x56_n32_bf16",
                2 * n_img * 2,
                &|| {
                    xb.permute([0usize, 2, 3, 1])?.contiguous()?;
                    Ok(())
                },
            ),
            (
                "pad_1_64c_56x56_n32_f32",
                n_img * 4 + 32 * 64 * 58 * 58 * 4,
                &|| {
                    x.pad(&[1, 1, 1, 1], genesis::PadMode::Constant, 0.0)?;
                    Ok(())
                },
            ),
        ];
        wall_rows(&mut rows, 10, &cases)?;
        drop((x, xb, w, wb, wg, rm, rv, bn_w, bn_b));

        // Shape and selection ops, output allocation included; wall clock, as torch_ref.
        // Bytes: input plus output (nonzero and unique: their outputs).
        let x = g.rand([8192, 8192], DType::F32, dev)?;
        let half = g.rand([4096, 4096], DType::F32, dev)?;
        let flags = g.rand([8192, 8192], DType::F32, dev)?.lt_scalar(0.5)?;
        let values = g.randint(0, 1_000_000, [1 << 24], DType::I64, dev)?;
        let classes = g.randint(0, 100, [1 << 20], DType::I64, dev)?;
        let cases: [(&str, usize, &dyn Fn() -> BoxResult); 8] = [
            ("flip_dim1_8192x8192_f32", 2 * n2 * 4, &|| {
                x.flip(1)?;
                Ok(())
            }),
            ("roll_dim1_8192x8192_f32", 2 * n2 * 4, &|| {
                x.roll(&[1000], &[1])?;
                Ok(())
            }),
            ("repeat_2x2_4096x4096_f32", 5 * (n2 / 4) * 4, &|| {
                half.repeat([2, 2])?;
                Ok(())
            }),
            ("tril_8192x8192_f32", 2 * n2 * 4, &|| {
                x.tril(0)?;
                Ok(())
            }),
            ("nonzero_50pct_8192x8192_bool", n2 + n2 / 2 * 16, &|| {
                flags.nonzero()?;
                Ok(())
            }),
            ("unique_16Mi_i64", (1 << 24) * 8 * 2, &|| {
                values.unique(true, true, true)?;
                Ok(())
            }),
            ("one_hot_1Mi_100_i64", (1 << 20) * 8 * 101, &|| {
                classes.one_hot(Some(100))?;
                Ok(())
            }),
            ("chunk_cat_dim1_8192x8192_f32", 2 * n2 * 4, &|| {
                let parts = x.chunk(4, 1)?;
                let refs: Vec<&Tensor> = parts.iter().collect();
                Tensor::cat(&refs, 1)?;
                Ok(())
            }),
        ];
        wall_rows(&mut rows, 10, &cases)?;
        drop((x, half, flags, values, classes));

        // Sorts of one long row (the radix passes), unique of values with every byte varying
        // (no radix pass skipped), and the elementwise families not above: comparison,
        // where, pow, cumprod and the random draws. Wall clock, as torch_ref.
        let x = g.rand([8192, 8192], DType::F32, dev)?;
        let y = g.rand([8192, 8192], DType::F32, dev)?;
        let cond = g.rand([8192, 8192], DType::F32, dev)?.lt_scalar(0.5)?;
        let long = g.rand([1 << 24], DType::F32, dev)?;
        let wide = g.randint(-(1 << 62), (1 << 62) - 1, [1 << 24], DType::I64, dev)?;
        let cases: [(&str, usize, &dyn Fn() -> BoxResult); 10] = [
            ("sort_16Mi_f32", (1 << 24) * (4 + 4 + 8), &|| {
                long.sort(0, false)?;
                Ok(())
            }),
            ("sort_16Mi_i64_wide", (1 << 24) * (8 + 8 + 8), &|| {
                wide.sort(0, false)?;
                Ok(())
            }),
            ("unique_16Mi_i64_wide", (1 << 24) * 8 * 2, &|| {
                wide.unique(true, true, true)?;
                Ok(())
            }),
            ("lt_8192x8192_f32", n2 * (4 + 4 + 1), &|| {
                x.lt(&y)?;
                Ok(())
            }),
            ("where_8192x8192_f32", n2 * (1 + 4 + 4 + 4), &|| {
                Tensor::where_cond(&cond, &x, &y)?;
                Ok(())
            }),
            ("pow_8192x8192_f32", n2 * 12, &|| {
                x.pow(&y)?;
                Ok(())
            }),
            ("cumprod_dim1_8192x8192_f32", n2 * 8, &|| {
                x.cumprod(1)?;
                Ok(())
            }),
            ("rand_8192x8192_f32", n2 * 4, &|| {
                g.rand([8192, 8192], DType::F32, dev)?;
                Ok(())
            }),
            ("randn_8192x8192_f32", n2 * 4, &|| {
                g.randn([8192, 8192], DType::F32, dev)?;
                Ok(())
            }),
            ("randint_16Mi_i64", (1 << 24) * 8, &|| {
                g.randint(0, 1_000_000, [1 << 24], DType::I64, dev)?;
                Ok(())
            }),
        ];
        wall_rows(&mut rows, 10, &cases)?;
        drop((x, y, cond, long, wide));

        // matmul at 4096 (f32, bf16 and f64), output allocation included.
        let side = 4096usize;
        let g = genesis::Generator::new(1);
        for (dtype, label) in [
            (DType::F32, "f32"),
            (DType::BF16, "bf16"),
            (DType::F64, "f64"),
        ] {
            let a = g.randn([side, side], dtype, dev)?;
            let b = g.randn([side, side], dtype, dev)?;
            let (med, min) = wall(10, || {
                a.matmul(&b)?;
                Ok(())
            })?;
            let flops = 2.0 * (side as f64).powi(3);
            rows.push(Row {
                name: format!("matmul_4096_{label}"),
                bytes: 0,
                median_ms: med,
                min_ms: min,
                note: format!("{:.1} TFLOP/s", flops / (med * 1e-3) / 1e12),
            });
        }

        // The optimiser step of GPT-2 124M (nanoGPT's parameter shapes, vocabulary 50,304,
        // f32): fused AdamW over the 148 parameters, and global-norm clipping of their
        // gradients. Bytes: AdamW reads p, g, m, v and writes p, m, v; clipping reads the
        // gradients twice and writes them once.
        {
            let mut shapes: Vec<Vec<usize>> = vec![vec![50304, 768], vec![1024, 768]];
            for _ in 0..12 {
                for s in [
                    &[768][..],
                    &[768],
                    &[2304, 768],
                    &[2304],
                    &[768, 768],
                    &[768],
                    &[768],
                    &[768],
                    &[3072, 768],
                    &[3072],
                    &[768, 3072],
                    &[768],
                ] {
                    shapes.push(s.to_vec());
                }
            }
            shapes.extend([vec![768], vec![768]]);
            let n: usize = shapes.iter().map(|s| s.iter().product::<usize>()).sum();
            let make = |scale: f64| -> BoxResult<Vec<Tensor>> {
                shapes
                    .iter()
                    .map(|s| Ok(g.randn(&s[..], DType::F32, dev)?.mul(scale)?))
                    .collect()
            };
            let (p, gr, m) = (make(0.02)?, make(1e-3)?, make(1e-4)?);
            let v: Vec<Tensor> = make(1e-4)?
                .iter()
                .map(|t| t.square())
                .collect::<genesis::Result<_>>()?;
            let mut step = 0u64;
            let (med, min) = wall(20, || {
                step += 1;
                let h = genesis::fused::AdamStep {
                    lr: 6e-4,
                    beta1: 0.9,
                    beta2: 0.95,
                    eps: 1e-8,
                    weight_decay: 0.1,
                    decoupled: true,
                    step,
                };
                genesis::fused::adam_(&p, &gr, &m, &v, &h)?;
                Ok(())
            })?;
            rows.push(Row {
                name: "adamw_step_gpt2_124m_f32".into(),
                bytes: n * 28,
                median_ms: med,
                min_ms: min,
                note: "wall clock of one fused step, as torch_ref (AdamW fused=True)".into(),
            });
            let (med, min) = wall(20, || {
                genesis::fused::clip_grad_norm_(&gr, 1e9)?;
                Ok(())
            })?;
            rows.push(Row {
                name: "clip_grad_norm_gpt2_124m_f32".into(),
                bytes: n * 12,
                median_ms: med,
                min_ms: min,
                note: "wall clock, as torch_ref (clip_grad_norm_, foreach)".into(),
            });
        }

        // The MLP forward step of the matmul issue, f32, end to end:
        // relu([64, 1024] @ [1024, 4096] + bias) @ [4096, 1024], summed.
        {
            let x = g.randn([64, 1024], DType::F32, dev)?;
            let w1 = g.randn([1024, 4096], DType::F32, dev)?;
            let b1 = g.randn([4096], DType::F32, dev)?;
            let w2 = g.randn([4096, 1024], DType::F32, dev)?;
            let (med, min) = wall(50, || {
                x.matmul(&w1)?.add(&b1)?.relu()?.matmul(&w2)?.sum()?;
                Ok(())
            })?;
            let flops = 2.0 * 64.0 * 1024.0 * 4096.0 * 2.0;
            rows.push(Row {
                name: "mlp_step_f32".into(),
                bytes: 0,
                median_ms: med,
                min_ms: min,
                note: format!("{:.1} TFLOP/s", flops / (med * 1e-3) / 1e12),
            });
        }

        println!(
            "device: {}, wall clock (Instant + synchronize), median",
            genesis::cuda::get_device_name(0)?
        );
        println!(
            "{:<24} {:>10} {:>10} {:>9}  note",
            "case", "median ms", "min ms", "GB/s"
        );
        let mut json = Vec::new();
        for r in &rows {
            let gbs = r.bytes as f64 / (r.median_ms * 1e-3) / 1e9;
            println!(
                "{:<24} {:>10.4} {:>10.4} {:>9.1}  {}",
                r.name, r.median_ms, r.min_ms, gbs, r.note
            );
            json.push(format!(
                "{{\"name\":\"{}\",\"bytes\":{},\"median_ms\":{},\"min_ms\":{},\"gb_per_s\":{}}}",
                r.name, r.bytes, r.median_ms, r.min_ms, gbs
            ));
        }
        if let Some(p) = json_path {
            std::fs::write(&p, format!("{{\"results\":[{}]}}\n", json.join(",")))?;
        }
        Ok(())
    }
}
