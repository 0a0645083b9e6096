//! Peak memory and step time of forward + backward, for comparison with PyTorch eager
//! (`tests/torch_train_memory.py` prints the same lines): a transformer block (attention and
//! MLP, batch 32 x 512 x 768, 12 heads) and an MLP (8192 x 1024 -> 4096 -> 1024, GELU tanh), f32,
//! loss `mean(out²)`; the peak is the device allocator's (`genesis::cuda::max_memory_allocated`)
//! over one step after a warm-up step, the time the median of 5 synchronised steps.
//!
//! ```text
//! cargo run --release -p genesis-nn --features cuda --example train_memory -- cuda [small]
//! ```
//! `small` shrinks both to run anywhere (batch 2 x 16 x 64, MLP 64 x 64 -> 256 -> 64).
//! With `GENESIS_PROFILE=1` each also prints its time by op
//! ([`genesis::autograd::profile`]).

use genesis::{DType, Device, Generator, Result, Tensor};
use genesis_nn::gpt2::Block;
use genesis_nn::{Gelu, Linear, Module, Sequential};

fn measure(
    name: &str,
    device: Device,
    params: &[Tensor],
    step: &dyn Fn() -> Result<()>,
) -> Result<()> {
    let sync = || -> Result<()> {
        if let Device::Cuda(i) = device {
            genesis::cuda::synchronize(i)?;
        }
        Ok(())
    };
    step()?;
    for p in params {
        p.zero_grad();
    }
    sync()?;
    if let Device::Cuda(i) = device {
        genesis::cuda::reset_peak_memory_stats(i)?;
    }
    let base = match device {
        Device::Cuda(i) => genesis::cuda::memory_allocated(i)?,
        _ => 0,
    };
    let mut times = Vec::new();
    for k in 0..5 {
        let t = std::time::Instant::now();
        step()?;
        sync()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        for p in params {
            p.zero_grad();
        }
        if let (0, Device::Cuda(i)) = (k, device) {
            let peak = genesis::cuda::max_memory_allocated(i)?;
            println!(
                "{name}: peak allocated {:.1} MiB (held before the step {:.1} MiB)",
                peak as f64 / 1048576.0,
                base as f64 / 1048576.0
            );
        }
    }
    times.sort_by(f64::total_cmp);
    println!("{name}: step {:.3} ms (median of 5)", times[2]);
    if genesis::autograd::profile::is_enabled() {
        println!(
            "{name}: time by op over 6 steps (GENESIS_PROFILE)\n{}",
            genesis::autograd::profile::report()
        );
        genesis::autograd::profile::reset();
    }
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let device = if args.iter().any(|a| a == "cuda") {
        Device::Cuda(0)
    } else {
        Device::Cpu
    };
    let small = args.iter().any(|a| a == "small");
    let (b, t, c, h) = if small {
        (2, 16, 64, 4)
    } else {
        (32, 512, 768, 12)
    };
    let (n, i, hidden) = if small {
        (64, 64, 256)
    } else {
        (8192, 1024, 4096)
    };
    let g = Generator::new(0);

    let block = Block::new(c, h, 12, &g, device)?;
    let x = g.randn([b, t, c], DType::F32, device)?;
    let params = block.parameters();
    measure("block", device, &params, &|| {
        block.forward(&x)?.square()?.mean()?.backward()
    })?;
    drop((block, x, params));

    let mlp = Sequential::new()
        .add(Linear::new(i, hidden, true, &g, device)?)
        .add(Gelu { tanh: true })
        .add(Linear::new(hidden, i, true, &g, device)?);
    let x = g.randn([n, i], DType::F32, device)?;
    let params = mlp.parameters();
    measure("mlp", device, &params, &|| {
        mlp.forward(&x)?.square()?.mean()?.backward()
    })?;
    Ok(())
}
