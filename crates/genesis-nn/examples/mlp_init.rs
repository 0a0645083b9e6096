//! Writes the initial parameters of the PyTorch comparison's model (`train::digits_mlp`, seed
//! 0) to a safetensors file, with PyTorch's names: `tests/torch_mlp.py` loads them into the
//! same `nn.Sequential`.
//!
//! ```text
//! cargo run -p genesis-nn --example mlp_init -- /tmp/init.safetensors
//! python3 crates/genesis-nn/tests/torch_mlp.py /tmp/init.safetensors cpu > losses.json
//! ```

use genesis::Device;
use genesis_nn::Module;

fn main() -> genesis::Result<()> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "init.safetensors".into());
    genesis_nn::train::digits_mlp(0, Device::Cpu)?.save_safetensors(&path)?;
    println!("wrote {path}");
    Ok(())
}
