//! GPU timings of indexing (device events on the legacy stream, warm-up, median of 30):
//! gathering 4096 random rows of an 8192 x 8192 f32 matrix, and assigning 4096 rows, with the
//! row indices in a device tensor (as PyTorch holds them) and, for comparison, on the host.
//! `gpu_index [--json PATH]`.

#[cfg(not(feature = "cuda"))]
fn main() {
    println!("gpu_index: skipped: built without the `cuda` feature");
}

#[cfg(feature = "cuda")]
fn main() {
    if let Err(e) = gpu::run() {
        eprintln!("gpu_index: error: {e}");
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

    use genesis_cuda::Stream;
    use genesis_index::{IndexTensor, Value, get, s, set};
    use genesis_storage::{DType, Device, Layout, Storage, View};

    use super::timing;
    use timing::BoxResult;

    /// Median of 30 timings of `f` on the legacy stream after 3 warm-up runs: between two
    /// events around it (`events`), or on the wall clock to a synchronisation after it.
    fn measure(
        ctx: &std::sync::Arc<genesis_cuda::Context>,
        events: bool,
        f: impl FnMut() -> BoxResult,
    ) -> BoxResult<f64> {
        let s = Stream::legacy(ctx);
        let t = if events {
            timing::events(&s, 3, 30, f)?
        } else {
            timing::wall(3, 30, || Ok(s.synchronize()?), f)?
        };
        Ok(t.median_ms)
    }

    /// Device time of `f` between events ([`measure`]).
    fn time(
        ctx: &std::sync::Arc<genesis_cuda::Context>,
        f: impl FnMut() -> BoxResult,
    ) -> BoxResult<f64> {
        measure(ctx, true, f)
    }

    /// A writable span over a CUDA storage the bench owns: the kernel-only rows write scratch
    /// storages (workspaces, outputs) that nothing else reads or writes meanwhile.
    fn scratch<T>(s: &Storage) -> genesis_cuda::DeviceSpanMut<'_, T> {
        let n = s.nbytes() / size_of::<T>();
        // SAFETY: the storage's device memory holds `nbytes` bytes while it is borrowed, every
        // launch on the span is synchronised by the timing events before the storage drops, and
        // no other span of a scratch storage is alive during a launch.
        unsafe { genesis_cuda::DeviceSpanMut::from_raw(s.device_ptr().unwrap_or(0), n) }
    }

    /// Wall clock of `f` and a synchronisation ([`measure`]).
    fn wall(
        ctx: &std::sync::Arc<genesis_cuda::Context>,
        f: impl FnMut() -> BoxResult,
    ) -> BoxResult<f64> {
        measure(ctx, false, f)
    }

    pub(crate) fn run() -> BoxResult {
        if genesis_cuda::skip_without_gpu("gpu_index") {
            return Ok(());
        }
        let json = std::env::args().skip_while(|a| a != "--json").nth(1);
        let ctx = genesis_storage::cuda::device_pool(0)?.context().clone();
        let m = 8192usize;
        let data: Vec<f32> = (0..m * m).map(|i| (i % 1009) as f32 * 0.5).collect();
        let x = View::with_layout(
            Arc::new(Storage::from_slice(&data, Device::Cuda(0))?),
            Layout::contiguous(&[m, m]),
        )?;
        // 4096 distinct random rows (a seeded shuffle).
        let mut rows: Vec<i64> = (0..m as i64).collect();
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        for i in (1..rows.len()).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            rows.swap(i, (state % (i as u64 + 1)) as usize);
        }
        rows.truncate(4096);
        let idx = IndexTensor::i64(&[4096], rows.clone());
        // The same indices in a device tensor (as PyTorch's benchmark holds them).
        let didx = View::new(Storage::from_slice(&rows, Device::Cuda(0))?);
        let mut out = Vec::new();
        let t = time(&ctx, || {
            let r = get(&x, &s![@&didx])?;
            drop(r);
            Ok(())
        })?;
        out.push(("gather_4096_rows_8192_f32", 2 * 4096 * m * 4, t));
        // The same on the wall clock, to the result being ready (a synchronisation after the
        // op, as torch_ref's `wall`): the op waits for its index check, so events around it
        // also count the host's return and the second event's queuing.
        let t = wall(&ctx, || {
            let r = get(&x, &s![@&didx])?;
            drop(r);
            Ok(())
        })?;
        out.push(("gather_4096_rows_8192_f32_wall", 2 * 4096 * m * 4, t));
        let t = time(&ctx, || {
            let r = get(&x, &s![@idx.clone()])?;
            drop(r);
            Ok(())
        })?;
        out.push(("gather_4096_rows_8192_f32_host_idx", 2 * 4096 * m * 4, t));
        let vals = View::with_layout(
            Arc::new(Storage::zeros(4096 * m, DType::F32, Device::Cuda(0))?),
            Layout::contiguous(&[4096, m]),
        )?;
        let mut target = Storage::from_slice(&data, Device::Cuda(0))?;
        let t = time(&ctx, || {
            Ok(set(
                &mut target,
                &Layout::contiguous(&[m, m]),
                &s![@&didx],
                Value::Tensor(&vals),
                false,
            )?)
        })?;
        out.push(("index_put_4096_rows_8192_f32", 2 * 4096 * m * 4, t));
        let t = time(&ctx, || {
            Ok(set(
                &mut target,
                &Layout::contiguous(&[m, m]),
                &s![@idx.clone()],
                Value::Tensor(&vals),
                false,
            )?)
        })?;
        out.push(("index_put_4096_rows_8192_f32_host_idx", 2 * 4096 * m * 4, t));
        // Breakdown: the row kernel alone (indices already normalised on the device, output
        // allocated once), to separate kernel time from the launches and the check around it.
        let out_rows = Storage::empty(4096 * m, DType::F32, Device::Cuda(0))?;
        let legacy = Stream::legacy(&ctx);
        let rows16 = genesis_kernels::index::Rows16 {
            nrows: 4096,
            row_units: m * 4 / 16,
            base_units: 0,
            stride_units: m * 4 / 16,
        };
        let t = time(&ctx, || {
            // SAFETY: every index is a row of `x`.
            unsafe {
                genesis_kernels::index::gather_rows16(
                    &legacy,
                    x.storage().cuda_span::<u8>()?,
                    scratch(&out_rows),
                    didx.storage().cuda_span::<i64>()?,
                    &rows16,
                )?
            };
            Ok(())
        })?;
        out.push(("gather_rows16_kernel_only", 2 * 4096 * m * 4, t));
        // The checked row kernel alone (the one `x[idx]` runs: raw int64 indices, the flag in
        // device memory here).
        let flag = Storage::zeros(2, DType::I32, Device::Cuda(0))?;
        let t = time(&ctx, || {
            let raw = genesis_kernels::index::RawIndex {
                values: didx.storage().cuda_span::<u8>()?,
                i32: false,
                stride: 1,
                size: 8192,
                wrap: true,
            };
            // SAFETY: `x` holds `size` rows; `flag` holds 8 bytes of device memory that live
            // until the closure is timed to completion.
            let _early = unsafe {
                genesis_kernels::index::gather_rows16_checked(
                    &legacy,
                    x.storage().cuda_span::<u8>()?,
                    scratch(&out_rows),
                    &raw,
                    flag.device_ptr().unwrap_or(0),
                    &rows16,
                )?
            };
            Ok(())
        })?;
        out.push(("gather_rows16_checked_kernel_only", 2 * 4096 * m * 4, t));
        // Masks: 50 % of 64 Mi f32, the storage-level select (count, read-back, compaction) and
        // its kernels alone.
        let n = 64usize << 20;
        let mut bits = vec![0u8; n];
        for b in bits.iter_mut() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *b = (state & 1) as u8;
        }
        let mask = Storage::from_bytes(&bits, DType::Bool, Device::Cuda(0))?;
        let big = Storage::zeros(n, DType::F32, Device::Cuda(0))?;
        let t = time(&ctx, || {
            drop(big.masked_select_at(0, &mask, 0, n)?);
            Ok(())
        })?;
        out.push(("masked_select_storage_50pct_64Mi", n * 4 + 2 * n + n * 2, t));
        let ws = Storage::empty(
            genesis_kernels::mask::compaction_workspace_bytes(n),
            DType::U8,
            Device::Cuda(0),
        )?;
        let sel = Storage::empty(n, DType::F32, Device::Cuda(0))?;
        let mp = mask.cuda_span::<u8>()?;
        let t = time(&ctx, || {
            genesis_kernels::mask::count_and_scan(&legacy, mp, scratch(&ws))?;
            Ok(())
        })?;
        out.push(("mask_count_scan_kernels_64Mi", n, t));
        // The compaction kernel alone, after a count_and_scan of the mask into `wp`.
        let compact_ms = || {
            time(&ctx, || {
                // SAFETY: after count_and_scan on the workspace; `sel` holds n f32.
                unsafe {
                    genesis_kernels::mask::compact(
                        &legacy,
                        4,
                        big.cuda_span::<u8>()?,
                        ws.cuda_span::<u8>()?,
                        scratch(&sel),
                    )?
                };
                Ok(())
            })
        };
        out.push((
            "mask_compact_50pct_64Mi_f32",
            n * 4 + n / 8 + n * 2,
            compact_ms()?,
        ));
        // masked_fill with the mask at `mask_ptr`: the kernel alone, and ten launches back to
        // back between the events (the time of one without the gap before the first;
        // torch_ref times PyTorch's kernel the same way).
        let fill = |mask: genesis_cuda::DeviceSpan<'_, u8>| -> BoxResult {
            genesis_kernels::mask::fill(&legacy, scratch(&sel), mask, &1.5f32.to_le_bytes())?;
            Ok(())
        };
        let ten = |mask_ptr: genesis_cuda::DeviceSpan<'_, u8>| -> BoxResult<f64> {
            Ok(time(&ctx, || {
                for _ in 0..10 {
                    fill(mask_ptr)?;
                }
                Ok(())
            })? / 10.0)
        };
        out.push((
            "mask_fill_50pct_64Mi_f32",
            n * 4 + n + n * 2,
            time(&ctx, || fill(mp))?,
        ));
        out.push(("mask_fill_x10_50pct_64Mi_f32", n * 4 + n + n * 4, ten(mp)?));

        // A sparse mask (1 in 32): the compaction skips the data of threads whose bits are
        // clear.
        for (i, b) in bits.iter_mut().enumerate() {
            *b = u8::from(i % 32 == 7);
        }
        let sparse = Storage::from_bytes(&bits, DType::Bool, Device::Cuda(0))?;
        genesis_kernels::mask::count_and_scan(&legacy, sparse.cuda_span()?, scratch(&ws))?;
        out.push((
            "mask_compact_3pct_64Mi_f32",
            n * 2 + n / 8 + n / 8,
            compact_ms()?,
        ));
        out.push((
            "mask_fill_x10_3pct_64Mi_f32",
            n * 4 + n + n * 4,
            ten(sparse.cuda_span()?)?,
        ));

        drop((big, sel, mask, sparse));
        // Host masks over a 16 Mi f32 CUDA tensor: the route the density picks (the mask's
        // bytes at 1/2 and 1/8, positions at 1/32) against the positions route (plan, then
        // the gather of int64 positions) and each route of `get_routed` forced, at each density.
        let n16 = 16usize << 20;
        let x16 = View::with_layout(
            Arc::new(Storage::zeros(n16, DType::F32, Device::Cuda(0))?),
            Layout::contiguous(&[n16]),
        )?;
        for (every, names) in [
            (
                2usize,
                [
                    "host_mask_50pct_16Mi_chosen",
                    "host_mask_50pct_16Mi_positions",
                    "host_mask_50pct_16Mi_bytes",
                    "host_mask_50pct_16Mi_device_positions",
                ],
            ),
            (
                8,
                [
                    "host_mask_12pct_16Mi_chosen",
                    "host_mask_12pct_16Mi_positions",
                    "host_mask_12pct_16Mi_bytes",
                    "host_mask_12pct_16Mi_device_positions",
                ],
            ),
            (
                32,
                [
                    "host_mask_3pct_16Mi_chosen",
                    "host_mask_3pct_16Mi_positions",
                    "host_mask_3pct_16Mi_bytes",
                    "host_mask_3pct_16Mi_device_positions",
                ],
            ),
            (
                256,
                [
                    "host_mask_0.4pct_16Mi_chosen",
                    "host_mask_0.4pct_16Mi_positions",
                    "host_mask_0.4pct_16Mi_bytes",
                    "host_mask_0.4pct_16Mi_device_positions",
                ],
            ),
        ] {
            let hb: Vec<u8> = (0..n16)
                .map(|i| {
                    let h = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
                    u8::from(h.is_multiple_of(every as u64))
                })
                .collect();
            let hm = genesis_index::IndexItem::stored(View::with_layout(
                Arc::new(Storage::from_bytes(&hb, DType::Bool, Device::Cpu)?),
                Layout::contiguous(&[n16]),
            )?);
            let items = vec![hm];
            let t = time(&ctx, || {
                get(&x16, &items)?;
                Ok(())
            })?;
            out.push((names[0], n16 * 4, t));
            let t = time(&ctx, || {
                let p = genesis_index::plan(x16.layout(), &items, false)?;
                genesis_index::execute_get(&x16, &p)?;
                Ok(())
            })?;
            out.push((names[1], n16 * 4, t));
            // Each route forced (the same code as the chosen one).
            let t = time(&ctx, || {
                genesis_index::get_routed(&x16, &items, Some(true))?;
                Ok(())
            })?;
            out.push((names[2], n16 * 4, t));
            let t = time(&ctx, || {
                genesis_index::get_routed(&x16, &items, Some(false))?;
                Ok(())
            })?;
            out.push((names[3], n16 * 4, t));
        }
        println!("{:<30} {:>10} {:>10}", "case", "median ms", "GB/s");
        let mut rows_json = Vec::new();
        for (name, bytes, ms) in &out {
            let gbs = *bytes as f64 / (ms * 1e-3) / 1e9;
            println!("{name:<30} {ms:>10.4} {gbs:>10.1}");
            rows_json.push(format!("{{\"name\":\"{name}\",\"bytes\":{bytes},\"median_ms\":{ms},\"min_ms\":{ms},\"gb_per_s\":{gbs}}}"));
        }
        if let Some(p) = json {
            std::fs::write(p, format!("{{\"results\":[{}]}}\n", rows_json.join(",")))?;
        }
        Ok(())
    }
}
