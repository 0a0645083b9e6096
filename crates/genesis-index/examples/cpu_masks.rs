//! Times `x[mask]` on the CPU for a host mask of a 16 Mi-element f32 tensor's whole shape, at
//! densities 1/2 and 1/32: `cargo run --release -p genesis-index --example cpu_masks`.

use std::sync::Arc;

use genesis_index::{IndexItem, get};
use genesis_storage::{DType, Device, Layout, Storage, View};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n = 16usize << 20;
    let x = View::with_layout(
        Arc::new(Storage::zeros(n, DType::F32, Device::Cpu)?),
        Layout::contiguous(&[n]),
    )?;
    for every in [2u64, 32] {
        let bits: Vec<u8> = (0..n)
            .map(|i| {
                let h = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
                u8::from(h.is_multiple_of(every))
            })
            .collect();
        let mask = IndexItem::stored(View::with_layout(
            Arc::new(Storage::from_bytes(&bits, DType::Bool, Device::Cpu)?),
            Layout::contiguous(&[n]),
        )?);
        let mut ms = Vec::new();
        let mut selected = 0;
        for _ in 0..5 {
            let t = std::time::Instant::now();
            selected = get(&x, std::slice::from_ref(&mask))?.layout().numel();
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        ms.sort_by(f64::total_cmp);
        println!(
            "x[mask], one in {every}: {selected} of {n} selected, median {:.1} ms (min {:.1})",
            ms[2], ms[0]
        );
    }
    Ok(())
}
