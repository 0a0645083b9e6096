//! Trains a two-layer perceptron on scikit-learn's handwritten digits (shipped with the crate)
//! and prints the loss and the held-out accuracy.
//!
//! ```text
//! cargo run --release -p genesis-nn --example mlp_digits            # on the CPU
//! cargo run --release -p genesis-nn --features cuda --example mlp_digits -- cuda
//! ```

use genesis::Device;

fn main() -> genesis::Result<()> {
    let device = match std::env::args().nth(1).as_deref() {
        Some("cuda") => Device::Cuda(0),
        _ => Device::Cpu,
    };
    let t = std::time::Instant::now();
    let run = genesis_nn::train::train_digits(device, 20, 0)?;
    println!("{}", run.summary(device, t.elapsed().as_secs_f64()));
    Ok(())
}
