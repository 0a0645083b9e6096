//! GPT-2 (genesis-nn's `gpt2_train`: nanoGPT's layout, byte tokens, AdamW with GPT-2's
//! hyper-parameters, clipping at 1) trained data-parallel: started by `genesis-launch` (or
//! `torchrun`) with `WORLD_SIZE` > 1, each rank takes its slice of the global batch `--batch`
//! and, with `--ddp`, its gradients are reduced in buckets during backward
//! ([`DistributedDataParallel`]); `--zero1` shards the optimiser ([`ZeroAdamW`]). Rank 0
//! prints each step's loss (the mean over ranks), step time and the group's tokens per
//! second, and at the end every rank's peak memory. Without `--ddp` it trains alone on the
//! whole batch (the one-GPU baseline). `xtask/gpu/torch_gpt2_ddp.py` is PyTorch DDP's twin.
//!
//! `--nproc N` starts the N ranks itself ([`Launch`], as `genesis-launch --nproc N` would);
//! `--init PATH` writes the initial parameters (for the PyTorch twin). `--phases` adds, on
//! CUDA, rank 0's device time of each step's parts (CUDA events on the training's stream):
//! forward and backward, the wait for the gradients' reductions after backward (what the
//! overlap did not hide), and clipping with the optimiser step; the median over the steps
//! after warm-up at the end. `--dump-grads DIR --dump-step N` writes rank 0's parameters and
//! gradients (reduced over the group with `--ddp`; not with `--zero1`, whose ranks hold parts)
//! at step N, before its optimiser step (see `dump`). `GENESIS_PROFILE=events` prints the
//! per-op device times of the steps after warm-up.
//!
//! ```text
//! target/release/examples/gpt2_ddp --nproc 4 --ddp [--zero1] \
//!     --config 124m --batch 32 --seq 1024 --steps 20 [--bf16] [--text DIR] [--bucket-mb 25]
//! target/release/examples/gpt2_ddp --config 124m --batch 32 --seq 1024 --steps 20 [--init PATH]
//!     [--dump-grads DIR --dump-step N]
//! ```

use std::sync::Arc;

use clap::{Arg, ArgAction, Command};
use genesis::{DType, Device, Generator, Tensor};
use genesis_dist::{
    Collectives, DdpOptions, DistributedDataParallel, GroupEnv, Launch, ProcessGroup, ReduceOp,
    ZeroAdamW,
};
use genesis_nn::Module;
use genesis_nn::gpt2::{Gpt2, Gpt2Config};
use genesis_nn::optim::{Adam, Optimizer, clip_grad_norm_};
use genesis_nn::train::{python_sources, window_batch};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

#[path = "../../genesis-nn/examples/common/gpt2_args.rs"]
mod gpt2_args;
use gpt2_args::{count, gpt2_args, positive};

fn main() -> Res<()> {
    let m = gpt2_args(Command::new("gpt2_ddp"), "8", "cuda")
        .arg(count("bucket-mb", "25"))
        .arg(Arg::new("ddp").long("ddp").action(ArgAction::SetTrue))
        .arg(Arg::new("zero1").long("zero1").action(ArgAction::SetTrue))
        .arg(Arg::new("bf16").long("bf16").action(ArgAction::SetTrue))
        .arg(Arg::new("text").long("text"))
        .arg(Arg::new("init").long("init"))
        .arg(Arg::new("nproc").long("nproc").value_parser(positive))
        .arg(Arg::new("phases").long("phases").action(ArgAction::SetTrue))
        .arg(Arg::new("dump-grads").long("dump-grads"))
        .arg(
            Arg::new("dump-step")
                .long("dump-step")
                .value_parser(clap::value_parser!(usize))
                .default_value("0"),
        )
        .get_matches();
    let get = |k: &str| m.get_one::<String>(k).cloned().unwrap_or_default();
    // Checked by clap (`gpt2_args::positive`).
    let num = |k: &str| get(k).parse::<usize>().unwrap_or(1);
    let config = Gpt2Config::named(&get("config")).ok_or("--config: tiny, small or 124m")?;
    if let Some(n) = m.get_one::<String>("nproc")
        && std::env::var_os("RANK").is_none()
    {
        // The ranks: this program again, without --nproc, one process a GPU.
        let mut args: Vec<String> = Vec::new();
        let mut it = std::env::args().skip(1);
        while let Some(a) = it.next() {
            if a == "--nproc" {
                it.next();
            } else if !a.starts_with("--nproc=") {
                args.push(a);
            }
        }
        Launch::new(std::env::current_exe()?, n.parse()?)
            .args(args)
            .run()?;
        return Ok(());
    }
    let (global, t, steps) = (num("batch"), num("seq"), num("steps"));
    let zero1 = m.get_flag("zero1");
    // `--dump-grads DIR --dump-step N`: where and at which step.
    let dump_at = m.get_one::<String>("dump-grads").map(|d| {
        let at = m.get_one::<usize>("dump-step").copied().unwrap_or(0);
        (std::path::PathBuf::from(d), at)
    });
    if zero1 && dump_at.is_some() {
        return Err("--dump-grads: ZeRO-1's ranks hold parts of the gradients; use --ddp".into());
    }
    let ddp_on = m.get_flag("ddp") || zero1;
    let env = if ddp_on {
        Some(GroupEnv::from_env()?)
    } else {
        None
    };
    let (rank, world, local) = env
        .as_ref()
        .map_or((0, 1, 0), |e| (e.rank, e.world_size, e.local_rank));
    if !global.is_multiple_of(world) {
        return Err(format!("--batch {global} is not a multiple of WORLD_SIZE {world}").into());
    }
    let b = global / world;
    let device = if get("device") == "cpu" {
        Device::Cpu
    } else {
        genesis::cuda::set_device(local)?;
        Device::Cuda(local)
    };
    // Peak (allocated, reserved) bytes on this rank's GPU.
    let peak = || -> Res<(f64, f64)> {
        Ok(match device {
            Device::Cuda(i) => (
                genesis::cuda::max_memory_allocated(i)? as f64,
                genesis::cuda::max_memory_reserved(i)? as f64,
            ),
            _ => (0.0, 0.0),
        })
    };
    let group: Option<Arc<ProcessGroup>> = match &env {
        Some(e) => Some(Arc::new(ProcessGroup::new(
            e,
            genesis_dist::DEFAULT_TIMEOUT,
        )?)),
        None => None,
    };
    // The work on a pooled stream rather than the legacy one, which would wait for the
    // collectives' side stream (pooled streams are blocking ones) and undo the overlap.
    let compute = match device {
        Device::Cuda(d) => Some(genesis::cuda::Stream::new(d)?),
        Device::Cpu => None,
    };
    let _compute = compute.as_ref().map(genesis::cuda::StreamGuard::new);
    let text = match m.get_one::<String>("text") {
        Some(d) => python_sources(std::path::Path::new(d))?,
        None => genesis_nn::train::gpt2_tiny_text().to_vec(),
    };
    let model = Gpt2::new(config, &Generator::new(0), device)?;
    if let Some(path) = m.get_one::<String>("init")
        && rank == 0
    {
        model.save_safetensors(path)?;
        println!("wrote the initial parameters to {path}");
    }
    let ddp = match &group {
        Some(g) => Some(DistributedDataParallel::new(
            model.parameters(),
            Arc::clone(g) as Arc<dyn Collectives>,
            DdpOptions {
                bucket_cap_bytes: num("bucket-mb") << 20,
                shard: zero1,
                ..DdpOptions::default()
            },
        )?),
        None => None,
    };
    let (mut zero, mut adam) = if zero1 {
        let mut o = ZeroAdamW::new(ddp.as_ref().expect("made above"), 6e-4)?;
        o.betas = (0.9, 0.95);
        o.weight_decay = 0.1;
        (Some(o), None)
    } else {
        let mut o = Adam::adamw(model.parameters(), 6e-4);
        o.betas = (0.9, 0.95);
        o.weight_decay = 0.1;
        (None, Some(o))
    };
    let autocast = m.get_flag("bf16").then_some(DType::BF16);
    if rank == 0 {
        println!(
            "gpt2 {config:?}, batch {global} x {t} ({world} ranks of {b}{}), {} bytes of text{}",
            if zero1 {
                ", ZeRO-1"
            } else if ddp_on {
                ", DDP"
            } else {
                ""
            },
            text.len(),
            if autocast.is_some() {
                ", bf16 autocast"
            } else {
                ""
            }
        );
    }
    let mut times = Vec::new();
    // `--phases`: events on the training's stream at the step's start, after backward, after
    // the reductions and after the optimiser; the three spans of each step.
    let phases = match (m.get_flag("phases"), &compute) {
        (true, Some(s)) => Some(s),
        _ => None,
    };
    let mut spans: Vec<[f32; 5]> = Vec::new();
    let mark = |s: &genesis::cuda::Stream| -> Res<genesis::cuda::Event> {
        let e = genesis::cuda::Event::new(s.device(), true)?;
        e.record(s)?;
        Ok(e)
    };
    // Throughput (and the op profile) after warm-up: the first 3 steps left out when there are
    // more than 5.
    let skip = if steps > 5 { 3 } else { 0 };
    for step in 0..steps {
        if step == skip {
            genesis::autograd::profile::reset();
        }
        let (x, y) = window_batch(&text, step, global, t, 7919, device)?;
        let (x, y) = (x.narrow(0, rank * b, b)?, y.narrow(0, rank * b, b)?);
        let start = std::time::Instant::now();
        let e0 = phases.map(mark).transpose()?;
        match (&ddp, &adam) {
            (Some(d), _) => d.zero_grad()?,
            (None, Some(o)) => o.zero_grad(),
            (None, None) => unreachable!("one optimiser"),
        }
        let loss = match autocast {
            Some(d) => genesis::autograd::autocast(d, || model.loss(&x, &y))?,
            None => model.loss(&x, &y)?,
        };
        let host_fwd = start.elapsed();
        loss.backward()?;
        let host_bwd = start.elapsed();
        let e1 = phases.map(mark).transpose()?;
        if let Some(d) = &ddp {
            d.finish()?;
        }
        if let Some((dir, at)) = &dump_at
            && step == *at
            && rank == 0
        {
            dump(&model, dir)?;
        }
        let e2 = phases.map(mark).transpose()?;
        if let Some(o) = &mut zero {
            o.clip_grad_norm_(1.0)?;
            o.step()?;
        }
        if let Some(o) = &mut adam {
            clip_grad_norm_(o.params(), 1.0)?;
            o.step()?;
        }
        // The mean of the ranks' losses (each the mean over its slice).
        let l = loss.detach().to_dtype(DType::F32)?.reshape([1usize])?;
        if let Some(g) = &group {
            g.all_reduce(&l, ReduceOp::Avg)?;
        }
        let e3 = phases.map(mark).transpose()?;
        let l = l.to_vec::<f32>()?[0]; // synchronises
        let ms = start.elapsed().as_secs_f64() * 1e3;
        times.push(ms);
        if let (Some(e0), Some(e1), Some(e2), Some(e3)) = (e0, e1, e2, e3) {
            e3.synchronize()?;
            let host = |d: std::time::Duration| d.as_secs_f32() * 1e3;
            spans.push([
                e1.elapsed_ms(&e0)?,
                e2.elapsed_ms(&e1)?,
                e3.elapsed_ms(&e2)?,
                host(host_fwd),
                host(host_bwd),
            ]);
        }
        if rank == 0 {
            let (a, r) = peak()?;
            println!(
                "step {step:4}  loss {l:.6}  {ms:.2} ms  {:.0} tokens/s, peak allocated {:.1} MiB, reserved {:.1} MiB",
                (global * t) as f64 / (ms / 1e3),
                a / 1048576.0,
                r / 1048576.0
            );
        }
    }
    let mut tail: Vec<f64> = times[skip..].to_vec();
    tail.sort_by(f64::total_cmp);
    let median = tail.get(tail.len() / 2).copied().unwrap_or(f64::NAN);
    // Every rank's peak memory, gathered to every rank.
    let (a, r) = peak()?;
    let mine = Tensor::from_slice(&[a, r], [2usize], device)?;
    let peaks = match &group {
        Some(g) => {
            let all = Tensor::zeros([2 * world], DType::F64, device)?;
            g.all_gather_into_tensor(&all, &mine)?;
            all.to_vec::<f64>()?
        }
        None => mine.to_vec::<f64>()?,
    };
    if rank == 0 {
        println!(
            "median step {median:.2} ms, {:.0} tokens/s for the group of {world}",
            (global * t) as f64 / (median / 1e3)
        );
        if spans.len() > skip {
            let med = |i: usize| {
                let mut v: Vec<f32> = spans[skip..].iter().map(|s| s[i]).collect();
                v.sort_by(f32::total_cmp);
                v[v.len() / 2]
            };
            println!(
                "device time a step (medians): forward and backward {:.2} ms, waiting for the \
                 reductions after backward {:.2} ms, clipping and the optimiser {:.2} ms; the \
                 host returned from forward at {:.2} ms and from backward at {:.2} ms",
                med(0),
                med(1),
                med(2),
                med(3),
                med(4)
            );
        }
        for r in 0..world {
            println!(
                "rank {r}: peak allocated {:.1} MiB, reserved {:.1} MiB{}",
                peaks[2 * r] / 1048576.0,
                peaks[2 * r + 1] / 1048576.0,
                match &zero {
                    Some(o) => format!(
                        " (optimiser state {:.1} MiB a rank)",
                        o.state_bytes() as f64 / 1048576.0
                    ),
                    None => String::new(),
                }
            );
        }
        if genesis::autograd::profile::is_enabled() {
            println!(
                "time by op (GENESIS_PROFILE)\n{}",
                genesis::autograd::profile::report()
            );
        }
    }
    Ok(())
}

/// Writes each parameter (`NAME.param`) and its gradient (`NAME.grad`, once reduced) as raw
/// little-endian f32 into `dir`: `xtask/gpu/gpt2_grad_error.py` compares them with PyTorch's
/// gradients in f32 and f64 from the same parameters and batch.
fn dump(model: &Gpt2, dir: &std::path::Path) -> Res<()> {
    std::fs::create_dir_all(dir)?;
    let raw = |t: &Tensor| -> Res<Vec<u8>> {
        let v = t
            .detach()
            .to_dtype(DType::F32)?
            .contiguous()?
            .to_vec::<f32>()?;
        Ok(v.iter().flat_map(|x| x.to_le_bytes()).collect())
    };
    for (name, p) in model.named_parameters() {
        std::fs::write(dir.join(format!("{name}.param")), raw(&p)?)?;
        if let Some(g) = p.grad() {
            std::fs::write(dir.join(format!("{name}.grad")), raw(&g)?)?;
        }
    }
    Ok(())
}
