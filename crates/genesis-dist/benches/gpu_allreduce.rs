//! All-reduce bus bandwidth, f32 sum in place, from 1 MiB to 4 GiB (doubling), as
//! nccl-tests measures it: busbw = bytes / time x 2(n-1)/n, time the median of 20 runs after
//! 5 warm-up runs, each timed by device events on every GPU (the slowest GPU's time, over
//! every process); beside it, the median host time of the call that queues it.
//! `xtask/gpu/torch_allreduce.py` is PyTorch's side (same sizes, same formula).
//!
//! Two ways to run it:
//!
//! - one process per GPU: `gpu_allreduce --nproc N` (it starts its N ranks itself, as
//!   `genesis-launch --nproc N gpu_allreduce` would; the environment names each rank; rank 0
//!   prints);
//! - one process driving every GPU (or `GENESIS_DIST_GPUS` of them): run the binary alone.
//!
//! `GENESIS_BENCH_MAX_MIB` caps the largest size; the table goes to standard output and JSON
//! to `--json PATH` (as `xtask/gpu/run.sh` passes it), else `$OUT/gpu_allreduce.json` when
//! `OUT` is set. Prints
//! "skipped" without a GPU or NCCL. NCCL_NVLS_ENABLE=0 unless set (see `genesis_dist`).

use std::time::Duration;

use genesis::cuda::{Event, Stream};
use genesis::{DType, Tensor};
use genesis_dist::{GroupEnv, Launch, ProcessGroup, ReduceOp, Result, group, shared_nccl};

const WARMUP: usize = 5;
const RUNS: usize = 20;
const T: Duration = Duration::from_secs(300);

fn main() {
    if let Err(e) = run() {
        eprintln!("gpu_allreduce: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--nproc")
        && std::env::var_os("RANK").is_none()
    {
        let n: usize = args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
            .ok_or_else(|| genesis_dist::Error::InvalidArgument {
                op: "--nproc",
                reason: "takes a number of processes above 0".into(),
            })?;
        let rest = args[..i].iter().chain(args.iter().skip(i + 2)).cloned();
        let me = std::env::current_exe()
            .map_err(|e| genesis_dist::Error::Protocol(format!("this program's path: {e}")))?;
        return Launch::new(me, n).args(rest).run();
    }
    let gpus = genesis::cuda::device_count();
    if gpus == 0 {
        println!("gpu_allreduce: skipped (no CUDA device)");
        return Ok(());
    }
    if let Err(e) = shared_nccl() {
        println!("gpu_allreduce: skipped ({e})");
        return Ok(());
    }
    let pgs = if std::env::var_os("RANK").is_some() {
        vec![ProcessGroup::new(&GroupEnv::from_env()?, T)?]
    } else {
        let n = std::env::var("GENESIS_DIST_GPUS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(gpus, |g: usize| g.clamp(1, gpus));
        ProcessGroup::new_local(&(0..n).collect::<Vec<_>>(), T)?
    };
    let n = pgs[0].size();
    let lead = pgs[0].rank() == 0;
    let max_mib: usize = std::env::var("GENESIS_BENCH_MAX_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4096);
    let mode = if pgs.len() == 1 && n > 1 {
        "one process per GPU"
    } else {
        "one process, every GPU"
    };
    if lead {
        println!(
            "all_reduce f32 sum, {n} x {}, {mode}, NCCL {:?}, NCCL_NVLS_ENABLE={}",
            genesis::cuda::get_device_name(0).unwrap_or_default(),
            shared_nccl()?.version(),
            std::env::var("NCCL_NVLS_ENABLE").unwrap_or_default(),
        );
        println!(
            "{:>12} {:>12} {:>12} {:>12} {:>12}",
            "bytes", "time (us)", "algbw GB/s", "busbw GB/s", "call (us)"
        );
    }
    let mut rows = Vec::new();
    let mut mib = 1;
    while mib <= max_mib {
        let bytes = mib << 20;
        let elems = bytes / 4;
        let tensors: Vec<Tensor> = pgs
            .iter()
            .map(|pg| Tensor::rand([elems], DType::F32, pg.device()))
            .collect::<genesis::Result<_>>()?;
        let streams: Vec<Stream> = pgs
            .iter()
            .map(|pg| Stream::current(ordinal(pg)))
            .collect::<genesis::Result<_>>()?;
        let mut times = Vec::with_capacity(RUNS);
        let mut hosts = Vec::with_capacity(RUNS);
        for run in 0..WARMUP + RUNS {
            let mut marks = Vec::with_capacity(pgs.len());
            for (pg, s) in pgs.iter().zip(&streams) {
                let start = Event::new(ordinal(pg), true)?;
                start.record(s)?;
                marks.push(start);
            }
            let called = std::time::Instant::now();
            // One GPU a process: a plain call, as PyTorch's; every GPU of the process: one
            // NCCL group, as NCCL needs.
            let works = if pgs.len() == 1 {
                vec![pgs[0].all_reduce(&tensors[0], ReduceOp::Sum)?]
            } else {
                group(|| {
                    pgs.iter()
                        .zip(&tensors)
                        .map(|(pg, t)| pg.all_reduce(t, ReduceOp::Sum))
                        .collect::<Result<Vec<_>>>()
                })?
            };
            let host = called.elapsed().as_secs_f64();
            let mut ms = 0f32;
            for ((pg, s), start) in pgs.iter().zip(&streams).zip(&marks) {
                let end = Event::new(ordinal(pg), true)?;
                end.record(s)?;
                end.synchronize()?;
                ms = ms.max(end.elapsed_ms(start)?);
            }
            for w in &works {
                w.wait()?;
            }
            if pgs.len() == 1 && n > 1 {
                // One GPU a process: the slowest rank's time (outside the timed region).
                let t = Tensor::from_slice(&[ms], [1usize], pgs[0].device())?;
                pgs[0].all_reduce(&t, ReduceOp::Max)?.wait()?;
                ms = t.to_vec::<f32>()?[0];
            }
            if run >= WARMUP {
                times.push(f64::from(ms) * 1e-3);
                hosts.push(host);
            }
        }
        times.sort_by(f64::total_cmp);
        hosts.sort_by(f64::total_cmp);
        let t = times[times.len() / 2];
        let host = hosts[hosts.len() / 2];
        let algbw = bytes as f64 / t / 1e9;
        let busbw = algbw * 2.0 * (n as f64 - 1.0) / n as f64;
        if lead {
            println!(
                "{bytes:>12} {:>12.1} {algbw:>12.1} {busbw:>12.1} {:>12.1}",
                t * 1e6,
                host * 1e6
            );
        }
        rows.push((bytes, t, algbw, busbw));
        drop(tensors);
        mib *= 2;
    }
    if lead {
        write_json(n, mode, &rows);
    }
    Ok(())
}

fn ordinal(pg: &ProcessGroup) -> usize {
    match pg.device() {
        genesis::Device::Cuda(d) => d,
        genesis::Device::Cpu => 0,
    }
}

fn write_json(n: usize, mode: &str, rows: &[(usize, f64, f64, f64)]) {
    let mut args = std::env::args().skip_while(|a| a != "--json");
    let path = args.nth(1).or_else(|| {
        std::env::var("OUT")
            .ok()
            .map(|o| format!("{o}/gpu_allreduce.json"))
    });
    let Some(path) = path else {
        return;
    };
    let rows: Vec<String> = rows
        .iter()
        .map(|(b, t, a, bus)| {
            format!(
                "{{\"bytes\": {b}, \"time_s\": {t:e}, \"algbw_gbs\": {a:.3}, \"busbw_gbs\": {bus:.3}}}"
            )
        })
        .collect();
    let json = format!(
        "{{\"bench\": \"gpu_allreduce\", \"impl\": \"genesis\", \"gpus\": {n}, \"mode\": \"{mode}\", \"dtype\": \"float32\", \"rows\": [\n  {}\n]}}\n",
        rows.join(",\n  ")
    );
    if let Err(e) = std::fs::write(&path, json) {
        eprintln!("gpu_allreduce: writing {path}: {e}");
    }
}
