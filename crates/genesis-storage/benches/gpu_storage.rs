//! GPU timings of storage transfers and `contiguous` (device events on the legacy stream,
//! warm-up, median of 30). `gpu_storage [--json PATH]`.

#[cfg(not(feature = "cuda"))]
fn main() {
    println!("gpu_storage: skipped: built without the `cuda` feature");
}

#[cfg(feature = "cuda")]
fn main() {
    if let Err(e) = gpu::run() {
        eprintln!("gpu_storage: error: {e}");
        std::process::exit(1);
    }
}

#[cfg(feature = "cuda")]
#[path = "../../genesis-cuda/benches/support/timing.rs"]
#[allow(dead_code, unreachable_pub)]
mod timing;

#[cfg(feature = "cuda")]
mod gpu {
    use genesis_cuda::{Context, Stream};
    use genesis_storage::{DType, Device, Layout, Storage};

    use super::timing;
    use timing::BoxResult;

    /// Device time of `f` on the legacy stream: 3 warm-up runs, median of 30.
    fn time(ctx: &std::sync::Arc<Context>, f: impl FnMut() -> BoxResult) -> BoxResult<f64> {
        Ok(timing::events(&Stream::legacy(ctx), 3, 30, f)?.median_ms)
    }

    pub(crate) fn run() -> BoxResult {
        if genesis_cuda::skip_without_gpu("gpu_storage") {
            return Ok(());
        }
        let json = std::env::args().skip_while(|a| a != "--json").nth(1);
        let ctx = Context::get(0)?;
        let n = 64 << 20; // f32 elements: 256 MiB
        let bytes: Vec<u8> = (0..n * 4).map(|i| (i * 7 + 3) as u8).collect();
        let host = Storage::from_bytes(&bytes, DType::F32, Device::Cpu)?;
        let pinned = host.to_pinned()?;
        let mut dev = Storage::zeros(n, DType::F32, Device::Cuda(0))?;
        let mut dev2 = Storage::zeros(n, DType::F32, Device::Cuda(0))?;
        let mut pinned_out = Storage::zeros_pinned(n, DType::F32)?;
        let mut rows: Vec<(String, usize, f64)> = Vec::new();
        let t = time(&ctx, || Ok(dev.copy_from(&pinned)?))?;
        rows.push(("pinned_h2d_256MiB".into(), n * 4, t));
        let t = time(&ctx, || Ok(pinned_out.copy_from(&dev)?))?;
        rows.push(("pinned_d2h_256MiB".into(), n * 4, t));
        let t = time(&ctx, || Ok(dev.copy_from(&host)?))?;
        rows.push(("pageable_h2d_256MiB".into(), n * 4, t));
        let t = time(&ctx, || Ok(dev2.copy_from(&dev)?))?;
        rows.push(("storage_d2d_256MiB".into(), 2 * n * 4, t));
        let m = 8192;
        let tl = Layout::contiguous(&[m, m]).transpose(0, 1)?;
        let t = time(&ctx, || {
            let c = dev.contiguous(&tl)?;
            drop(c);
            Ok(())
        })?;
        rows.push(("contiguous_t_8192_f32".into(), 2 * m * m * 4, t));
        // Batched copies: 4 host -> device and 4 device -> host of 32 MiB, sequential and
        // spread over 4 streams (copies in both directions can overlap).
        let chunk = 8 << 20; // f32 elements: 32 MiB
        let up: Vec<Storage> = (0..4)
            .map(|_| Storage::zeros_pinned(chunk, DType::F32))
            .collect::<Result<_, _>>()?;
        let mut up_dst: Vec<Storage> = (0..4)
            .map(|_| Storage::zeros(chunk, DType::F32, Device::Cuda(0)))
            .collect::<Result<_, _>>()?;
        let down: Vec<Storage> = (0..4)
            .map(|_| Storage::zeros(chunk, DType::F32, Device::Cuda(0)))
            .collect::<Result<_, _>>()?;
        let mut down_dst: Vec<Storage> = (0..4)
            .map(|_| Storage::zeros_pinned(chunk, DType::F32))
            .collect::<Result<_, _>>()?;
        let mut run = |streams: usize| -> BoxResult<f64> {
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t = std::time::Instant::now();
                let mut pairs: Vec<(&mut Storage, &Storage)> = Vec::new();
                for (d, s) in up_dst.iter_mut().zip(&up) {
                    pairs.push((d, s));
                }
                for (d, s) in down_dst.iter_mut().zip(&down) {
                    pairs.push((d, s));
                }
                if streams == 0 {
                    for (d, s) in pairs {
                        d.copy_from(s)?;
                    }
                } else {
                    genesis_storage::batched_copy(&mut pairs, streams)?;
                }
                best = best.min(t.elapsed().as_secs_f64() * 1e3);
            }
            Ok(best)
        };
        if genesis_cuda::device_count()? > 1 {
            let mut other = Storage::zeros(n, DType::F32, Device::Cuda(1))?;
            let t = time(&ctx, || Ok(other.copy_from(&dev)?))?;
            rows.push(("peer_0_to_1_256MiB".into(), n * 4, t));
            let t = time(&ctx, || Ok(dev.copy_from(&other)?))?;
            rows.push(("peer_1_to_0_256MiB".into(), n * 4, t));
        }
        let seq = run(0)?;
        let batched = run(4)?;
        rows.push(("copies_8x32MiB_sequential".into(), 8 * chunk * 4, seq));
        rows.push(("copies_8x32MiB_4streams".into(), 8 * chunk * 4, batched));
        let mut out = Vec::new();
        println!("{:<24} {:>10} {:>10}", "case", "median ms", "GB/s");
        for (name, b, ms) in &rows {
            let gbs = *b as f64 / (ms * 1e-3) / 1e9;
            println!("{name:<24} {ms:>10.4} {gbs:>10.1}");
            out.push(format!("{{\"name\":\"{name}\",\"bytes\":{b},\"median_ms\":{ms},\"min_ms\":{ms},\"gb_per_s\":{gbs}}}"));
        }
        if let Some(p) = json {
            std::fs::write(
                p,
                format!(
                    "{{\"device\":\"{}\",\"results\":[{}]}}\n",
                    ctx.name(),
                    out.join(",")
                ),
            )?;
        }
        Ok(())
    }
}
