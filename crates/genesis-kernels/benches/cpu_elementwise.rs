//! Host-side criterion benchmarks of the CPU twins.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use half::bf16;

fn bench(c: &mut Criterion) {
    let n = 1 << 20;
    let a: Vec<f32> = (0..n).map(|i| (i % 977) as f32 * 0.25).collect();
    let b: Vec<f32> = (0..n).map(|i| (i % 631) as f32 * -0.5).collect();
    let mut out = vec![0f32; n];
    let mut g = c.benchmark_group("cpu_add");
    g.throughput(Throughput::Bytes((3 * n * 4) as u64));
    g.bench_function("f32_1Mi", |bch| {
        bch.iter(|| genesis_kernels::cpu::add(&a, &b, &mut out).unwrap())
    });
    let ah: Vec<bf16> = a.iter().map(|&x| bf16::from_f32(x)).collect();
    let bh: Vec<bf16> = b.iter().map(|&x| bf16::from_f32(x)).collect();
    let mut oh = vec![bf16::ZERO; n];
    g.throughput(Throughput::Bytes((3 * n * 2) as u64));
    g.bench_function("bf16_1Mi", |bch| {
        bch.iter(|| genesis_kernels::cpu::add(&ah, &bh, &mut oh).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
