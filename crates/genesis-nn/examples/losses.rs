//! Prints the training losses of the PyTorch comparisons as JSON, on the CPU or a GPU, for
//! the twin scripts' output to be compared with in the same device call:
//!
//! ```text
//! cargo run --release -p genesis-nn [--features cuda] --example losses -- mlp|gpt2|gpt2-bf16 [cpu|cuda] [STEPS]
//! ```

use genesis::Device;

fn main() -> genesis::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let which = args.first().map_or("mlp", String::as_str);
    let device = match args.get(1).map(String::as_str) {
        Some("cuda") => Device::Cuda(0),
        _ => Device::Cpu,
    };
    let losses = match which {
        "gpt2" | "gpt2-bf16" => {
            let steps = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(50);
            let autocast = (which == "gpt2-bf16").then_some(genesis::DType::BF16);
            genesis_nn::train::gpt2_tiny_losses_with(steps, device, autocast)?
        }
        _ => {
            let steps = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(100);
            genesis_nn::train::comparison_losses(0, steps, device)?
        }
    };
    let list: Vec<String> = losses.iter().map(|l| format!("{l}")).collect();
    println!(
        "{{\"genesis\": \"{which}\", \"device\": \"{device:?}\", \"losses\": [{}]}}",
        list.join(", ")
    );
    Ok(())
}
