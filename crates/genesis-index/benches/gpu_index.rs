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
mod gpu {
    use std::sync::Arc;

    use genesis_cuda::{Event, Stream};
    use genesis_index::{IndexTensor, Value, get, s, set};
    use genesis_storage::{DType, Device, Layout, Storage, View};

    type BoxResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

    fn time(
        ctx: &std::sync::Arc<genesis_cuda::Context>,
        mut f: impl FnMut() -> BoxResult,
    ) -> BoxResult<f64> {
        let s = Stream::legacy(ctx);
        for _ in 0..3 {
            f()?;
        }
        s.synchronize()?;
        let (a, b) = (Event::new(ctx, true)?, Event::new(ctx, true)?);
        let mut ms = Vec::new();
        for _ in 0..30 {
            a.record(&s)?;
            f()?;
            b.record(&s)?;
            b.synchronize()?;
            ms.push(f64::from(b.elapsed_ms(&a)?));
        }
        ms.sort_by(f64::total_cmp);
        Ok(ms[ms.len() / 2])
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
