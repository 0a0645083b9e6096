//! One million cached alloc + free pairs of one size: a target for profilers
//! (`valgrind --tool=callgrind target/release/examples/hot_pair`).

use genesis_mem::{CachingAllocator, Config, SimBackend};

fn main() -> Result<(), genesis_mem::Error> {
    let a = CachingAllocator::new(
        SimBackend::new(1 << 34, true),
        Config {
            record_sites: false,
            ..Config::default()
        },
    )?;
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let t = std::time::Instant::now();
    for _ in 0..n {
        let x = a.alloc(4096, 0)?;
        a.free(std::hint::black_box(x))?;
    }
    println!(
        "{:.1} ns per pair",
        t.elapsed().as_nanos() as f64 / n as f64
    );
    Ok(())
}
