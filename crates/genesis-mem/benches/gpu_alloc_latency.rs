//! Host latency of a cached allocation + free pair through the CUDA backend (and the simulated
//! one), one thread, and throughput with 8 threads. `gpu_alloc_latency [--json PATH]`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use genesis_mem::{Backend, CachingAllocator, Config, SimBackend};

fn pairs<B: Backend>(a: &CachingAllocator<B>, size: usize, n: usize) -> f64 {
    let x = a.alloc(size, 0).unwrap();
    a.free(x).unwrap();
    let mut samples = Vec::new();
    for _ in 0..21 {
        let t = Instant::now();
        for _ in 0..n {
            let x = a.alloc(size, 0).unwrap();
            a.free(std::hint::black_box(x)).unwrap();
        }
        samples.push(t.elapsed().as_nanos() as f64 / n as f64);
    }
    samples.sort_by(f64::total_cmp);
    eprintln!(
        "  (min {:.1} ns, max {:.1} ns)",
        samples[0],
        samples[samples.len() - 1]
    );
    samples[samples.len() / 2]
}

/// [`pairs`] while another thread reads the statistics every millisecond (each read revokes
/// the lock's bias, which the allocating thread then earns back).
fn pairs_with_reader<B: Backend + 'static>(
    a: &Arc<CachingAllocator<B>>,
    size: usize,
    n: usize,
) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (a, stop) = (Arc::clone(a), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) {
                std::hint::black_box(a.stats());
                reads += 1;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            reads
        })
    };
    let ns = pairs(a, size, n);
    stop.store(true, Ordering::Relaxed);
    let reads = reader.join().unwrap();
    eprintln!("  ({reads} statistics reads meanwhile)");
    ns
}

fn threads<B: Backend>(a: &Arc<CachingAllocator<B>>, n_threads: usize, n: usize) -> f64 {
    let t = Instant::now();
    let hs: Vec<_> = (0..n_threads)
        .map(|i| {
            let a = Arc::clone(a);
            std::thread::spawn(move || {
                let size = 4096 * (i + 1);
                for _ in 0..n {
                    let x = a.alloc(size, 0).unwrap();
                    a.free(std::hint::black_box(x)).unwrap();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    (n_threads * n) as f64 / t.elapsed().as_secs_f64()
}

fn run<B: Backend + 'static>(label: &str, a: CachingAllocator<B>, rows: &mut Vec<String>) {
    let a = Arc::new(a);
    for size in [512usize, 1 << 20, 64 << 20] {
        let ns = pairs(&a, size, 200_000);
        println!("{label:<10} alloc+free pair {size:>9} B: {ns:>7.1} ns (median of 21 x 200k)");
        rows.push(format!(
            "{{\"backend\":\"{label}\",\"bytes\":{size},\"ns_per_pair\":{ns}}}"
        ));
    }
    let ns = pairs_with_reader(&a, 4096, 200_000);
    println!(
        "{label:<10} alloc+free pair      4096 B: {ns:>7.1} ns, another thread reading the stats every 1 ms"
    );
    rows.push(format!(
        "{{\"backend\":\"{label}\",\"bytes\":4096,\"stats_reader_ms\":1,\"ns_per_pair\":{ns}}}"
    ));
    let per_s = threads(&a, 8, 200_000);
    println!("{label:<10} 8 threads: {:.1} M pairs/s", per_s / 1e6);
    rows.push(format!(
        "{{\"backend\":\"{label}\",\"threads\":8,\"pairs_per_s\":{per_s}}}"
    ));
}

fn main() {
    let json = std::env::args().skip_while(|a| a != "--json").nth(1);
    let mut rows = Vec::new();
    let cfg = Config {
        record_sites: false,
        ..Config::default()
    };
    run(
        "sim",
        CachingAllocator::new(SimBackend::new(1 << 40, true), cfg.clone()).unwrap(),
        &mut rows,
    );
    #[cfg(feature = "cuda")]
    if !genesis_cuda::skip_without_gpu("gpu_alloc_latency (cuda)") {
        let ctx = genesis_cuda::Context::get(0).unwrap();
        run(
            "cuda-vmm",
            genesis_mem::cuda::device_allocator(&ctx, cfg.clone()).unwrap(),
            &mut rows,
        );
        let sited = Config {
            record_sites: true,
            ..cfg
        };
        run(
            "cuda+site",
            genesis_mem::cuda::device_allocator(&ctx, sited).unwrap(),
            &mut rows,
        );
    }
    // The simulated backend again, after the CUDA runs: whether the order of the runs (the
    // machine warming up, the driver's threads) moves the figures.
    #[cfg(feature = "cuda")]
    run(
        "sim-after",
        CachingAllocator::new(SimBackend::new(1 << 40, true), cfg).unwrap(),
        &mut rows,
    );
    if let Some(p) = json {
        std::fs::write(p, format!("{{\"results\":[{}]}}\n", rows.join(","))).unwrap();
    }
}
