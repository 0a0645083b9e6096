//! Trains a tiny GPT-2 (byte-level, 2 layers, width 32) on the crate's text and prints the
//! loss, the step time and the tokens per second; with a path, first writes the initial
//! parameters there (safetensors, nanoGPT's names) for `tests/torch_gpt2.py`.
//!
//! ```text
//! cargo run --release -p genesis-nn --example gpt2_tiny [-- STEPS [INIT.safetensors]]
//! ```

use genesis::{Device, Generator};
use genesis_nn::Module;
use genesis_nn::train::{gpt2_tiny_config, gpt2_tiny_losses};

fn main() -> genesis::Result<()> {
    let mut args = std::env::args().skip(1);
    let steps: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(200);
    if let Some(path) = args.next() {
        genesis_nn::gpt2::Gpt2::new(gpt2_tiny_config(), &Generator::new(0), Device::Cpu)?
            .save_safetensors(&path)?;
        println!("wrote the initial parameters to {path}");
    }
    let t = std::time::Instant::now();
    let losses = gpt2_tiny_losses(steps, Device::Cpu)?;
    let secs = t.elapsed().as_secs_f64();
    for (i, l) in losses.iter().enumerate() {
        if i % (steps / 10).max(1) == 0 || i + 1 == steps {
            println!("step {i:4}  loss {l:.4}");
        }
    }
    let tokens = steps * 4 * 32;
    if steps == 0 {
        return Ok(());
    }
    println!(
        "{steps} steps: {:.2} ms a step, {:.0} tokens/s (CPU)",
        secs * 1e3 / steps as f64,
        tokens as f64 / secs
    );
    Ok(())
}
