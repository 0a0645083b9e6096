//! CPU matmul speed through `Tensor::matmul`, against NumPy figures given on the command line.
//!
//! ```text
//! python3 crates/genesis/examples/cpu_matmul_numpy.py            # prints NumPy's medians
//! cargo run --release -p genesis --example cpu_matmul_bench -- [--reps N] [NAME=MS ...]
//! ```
//!
//! Each case (`f32-256`, `f32-1000`, `f32-2000`, `f64-1000`, ...) is a square `n x n @ n x n`
//! product of uniform values (`f32t`: the left operand a transposed view, `a.t() @ b`); the figure is the median of `N` timed runs (after one warm-up).
//! `NAME=MS` pairs (as the Python script prints them) add NumPy's median and the ratio (NumPy's
//! time over ours, `docs/benchmarks.md`'s convention: above 1, ours is faster). Threads
//! come from rayon's pool: `RAYON_NUM_THREADS` sets their number (NumPy's: `OMP_NUM_THREADS`).

use std::collections::HashMap;
use std::time::Instant;

use genesis::{DType, Device, Tensor};

const CASES: [(&str, DType, usize); 8] = [
    ("f32-256", DType::F32, 256),
    ("f32-1000", DType::F32, 1000),
    ("f32t-1000", DType::F32, 1000),
    ("f32-2000", DType::F32, 2000),
    ("f64-256", DType::F64, 256),
    ("f64-1000", DType::F64, 1000),
    ("f64-2000", DType::F64, 2000),
    ("i64-1000", DType::I64, 1000),
];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> genesis::Result<()> {
    let mut reps = 11usize;
    let mut numpy = HashMap::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--reps" {
            reps = args.next().and_then(|r| r.parse().ok()).expect("--reps N");
        } else if let Some((name, ms)) = a.split_once('=') {
            numpy.insert(name.to_string(), ms.parse::<f64>().expect("NAME=MS"));
        } else {
            panic!("unknown argument {a}");
        }
    }
    genesis::manual_seed(0);
    println!(
        "{:<10} {:>10} {:>10} {:>7}",
        "case", "ours ms", "numpy ms", "ratio"
    );
    for (name, dtype, n) in CASES {
        let (a, b) = if dtype == DType::I64 {
            let r = |s: f64| {
                Tensor::rand(&[n, n][..], DType::F64, Device::Cpu)?
                    .mul(s)?
                    .to_dtype(DType::I64)
            };
            (r(100.0)?, r(100.0)?)
        } else {
            (
                Tensor::rand(&[n, n][..], dtype, Device::Cpu)?,
                Tensor::rand(&[n, n][..], dtype, Device::Cpu)?,
            )
        };
        // Fewer runs of the large products: each is long enough to time on its own.
        let reps = if n >= 2000 { reps.div_ceil(2) } else { reps };
        let a = if name.starts_with("f32t") { a.t()? } else { a };
        a.matmul(&b)?;
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t = Instant::now();
            std::hint::black_box(a.matmul(&b)?);
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let ours = median(times);
        match numpy.get(name) {
            Some(np) => println!("{name:<10} {ours:>10.2} {np:>10.2} {:>7.2}", np / ours),
            None => println!("{name:<10} {ours:>10.2} {:>10} {:>7}", "-", "-"),
        }
    }
    Ok(())
}
