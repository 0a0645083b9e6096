//! Trains GPT-2 (nanoGPT's layout) on byte tokens (of the Python files in `--text DIR`, else of
//! the crate's `data/corpus.txt`) and prints, per step, the loss, the step time, tokens per
//! second and (on a GPU) the allocator's peak. `tests/torch_gpt2_train.py` is the PyTorch twin: the same initial parameters (written
//! with `--init`), the same batches, the same optimiser.
//!
//! ```text
//! cargo run --release -p genesis-nn [--features cuda] --example gpt2_train -- \
//!     --config tiny|small|124m --batch 4 --seq 64 --steps 20 [--device cuda] [--bf16] \
//!     [--recompute] [--text DIR] [--init PATH] [--warmup N] [--memory-trace PATH]
//! ```
//!
//! The learning rate is 6e-4 throughout, or with `--warmup N` llm.c's schedule: a linear
//! warm-up over `N` steps, then a cosine down to a tenth at the last step.

use clap::{Arg, ArgAction, Command};
use genesis::{DType, Device, Generator, Result};
use genesis_nn::Module;
use genesis_nn::gpt2::{Gpt2, Gpt2Config};
use genesis_nn::optim::{Adam, CosineWithWarmup, Optimizer, Schedule, clip_grad_norm_};
use genesis_nn::train::{python_sources, window_batch};

#[path = "common/gpt2_args.rs"]
mod gpt2_args;
use gpt2_args::gpt2_args;

fn main() -> Result<()> {
    let m = gpt2_args(Command::new("gpt2_train"), "4", "cpu")
        .arg(Arg::new("bf16").long("bf16").action(ArgAction::SetTrue))
        .arg(
            Arg::new("recompute")
                .long("recompute")
                .action(ArgAction::SetTrue),
        )
        .arg(
            Arg::new("phases")
                .long("phases")
                .help("print when each phase of a step returned to the host (ms from the start)")
                .action(ArgAction::SetTrue),
        )
        .arg(Arg::new("text").long("text"))
        .arg(Arg::new("memory-trace").long("memory-trace").help(
            "on a GPU: write the run's allocations to this genesis-trace file \
             (`genesis-mem replay` replays it)",
        ))
        .arg(Arg::new("init").long("init"))
        .arg(
            Arg::new("warmup")
                .long("warmup")
                .value_parser(gpt2_args::positive)
                .help("warm the learning rate up linearly over N steps, then a cosine to a tenth"),
        )
        .get_matches();
    let get = |k: &str| m.get_one::<String>(k).cloned().unwrap_or_default();
    // Checked by clap (`gpt2_args::positive`).
    let num = |k: &str| get(k).parse::<usize>().unwrap_or(1);
    let Some(config) = Gpt2Config::named(&get("config")) else {
        eprintln!("--config: tiny, small or 124m");
        std::process::exit(2);
    };
    let device = if get("device") == "cuda" {
        Device::Cuda(0)
    } else {
        Device::Cpu
    };
    let (b, t, steps) = (num("batch"), num("seq"), num("steps"));
    // The *.py files of --text (the Python standard library's folder, say), else the crate's
    // own small text.
    let text = match m.get_one::<String>("text") {
        Some(d) => python_sources(std::path::Path::new(d))?,
        None => genesis_nn::train::gpt2_tiny_text().to_vec(),
    };
    let trace = m.get_one::<String>("memory-trace");
    if let (Some(_), Device::Cuda(i)) = (trace, device) {
        genesis::cuda::record_memory_history(i, 16 << 20)?;
    }
    let mut model = Gpt2::new(config, &Generator::new(0), device)?;
    model.recompute = m.get_flag("recompute");
    if let Some(path) = m.get_one::<String>("init") {
        model.save_safetensors(path)?;
        println!("wrote the initial parameters to {path}");
    }
    const LR: f64 = 6e-4;
    let schedule = m.get_one::<String>("warmup").map(|w| CosineWithWarmup {
        warmup: w.parse().unwrap_or(1),
        total: steps,
        min_factor: 0.1,
    });
    let mut opt = Adam::adamw(model.parameters(), LR);
    opt.betas = (0.9, 0.95);
    opt.weight_decay = 0.1;
    let autocast = m.get_flag("bf16").then_some(DType::BF16);
    println!(
        "gpt2 {config:?}, batch {b} x {t}, {} bytes of text, {device:?}{}",
        text.len(),
        if autocast.is_some() {
            ", bf16 autocast"
        } else {
            ""
        }
    );
    for step in 0..steps {
        let (x, y) = window_batch(&text, step, b, t, 7919, device)?;
        let start = std::time::Instant::now();
        if let Some(s) = &schedule {
            s.apply(&mut opt, LR, step);
        }
        opt.zero_grad();
        let loss = match autocast {
            Some(d) => genesis::autograd::autocast(d, || model.loss(&x, &y))?,
            None => model.loss(&x, &y)?,
        };
        let forward = start.elapsed();
        loss.backward()?;
        let backward = start.elapsed();
        clip_grad_norm_(opt.params(), 1.0)?;
        let clip = start.elapsed();
        opt.step()?;
        let stepped = start.elapsed();
        let l = loss.item::<f32>()?; // synchronises
        let ms = start.elapsed().as_secs_f64() * 1e3;
        if m.get_flag("phases") {
            let at = |d: std::time::Duration| d.as_secs_f64() * 1e3;
            let driver = match device {
                Device::Cuda(i) => {
                    let s = genesis::cuda::memory_stats(i)?;
                    let get = |k: &str| s.get(k).copied().unwrap_or(0);
                    format!(
                        "; allocator so far: {} device allocations, {} frees, {} cache misses",
                        get("num_device_alloc"),
                        get("num_device_free"),
                        get("num_cache_misses")
                    )
                }
                _ => String::new(),
            };
            println!(
                "host returned from forward at {:.2} ms, backward {:.2}, clip {:.2}, step {:.2}{driver}",
                at(forward),
                at(backward),
                at(clip),
                at(stepped)
            );
        }
        let peak = match device {
            Device::Cuda(i) => format!(
                ", peak allocated {:.1} MiB, reserved {:.1} MiB",
                genesis::cuda::max_memory_allocated(i)? as f64 / 1048576.0,
                genesis::cuda::max_memory_reserved(i)? as f64 / 1048576.0
            ),
            _ => String::new(),
        };
        println!(
            "step {step:4}  loss {l:.6}  {ms:.2} ms  {:.0} tokens/s{peak}",
            (b * t) as f64 / (ms / 1e3)
        );
    }
    if let (Some(path), Device::Cuda(i)) = (trace, device)
        && let Some(h) = genesis::cuda::take_memory_history(i)?
    {
        let name = format!("genesis_gpt2_{}_b{b}", get("config"));
        std::fs::write(path, h.to_trace(&name)).map_err(|e| genesis::Error::InvalidArgument {
            op: "gpt2_train",
            reason: format!("--memory-trace {path}: {e}"),
        })?;
        println!("wrote the allocation trace to {path}");
    }
    if genesis::autograd::profile::is_enabled() {
        println!(
            "time by op (GENESIS_PROFILE)\n{}",
            genesis::autograd::profile::report()
        );
    }
    Ok(())
}
