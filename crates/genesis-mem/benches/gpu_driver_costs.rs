//! What the VMM driver calls cost on this GPU by handle size: `cuMemCreate`, `cuMemMap` with
//! its `cuMemSetAccess`, `cuMemUnmap` and `cuMemRelease`, each timed on the host around the
//! call, for handles of 2 MiB to 1 GiB (median of 15 rounds after 2 warm-up ones), with the
//! cost per 2 MiB: the growth with size that `CallPrices::SIZE_SCALE` records.
//! `gpu_driver_costs [--json PATH]`; without the `cuda` feature it says so and stops.

#[cfg(feature = "cuda")]
fn main() {
    use genesis_mem::Backend;
    use std::time::Instant;

    let json_path = std::env::args().skip_while(|a| a != "--json").nth(1);
    let ctx = genesis_cuda::Context::get(0).unwrap();
    let mut b = genesis_mem::cuda::CudaBackend::new(&ctx, true).unwrap();
    if !b.supports_vmm() {
        println!("skipped: the device has no virtual memory management");
        return;
    }
    println!(
        "{:>10} {:>10} {:>14} {:>10} {:>10} {:>12}",
        "handle", "create us", "map+access us", "unmap us", "release us", "all us/2MiB"
    );
    let mut rows = Vec::new();
    for mib in [2usize, 4, 8, 16, 32, 64, 128, 256, 512, 1024] {
        let bytes = mib << 20;
        let va = b.reserve(bytes).unwrap();
        let mut t = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
        for round in 0..17 {
            let s = Instant::now();
            let h = b.create(bytes).unwrap();
            let c = s.elapsed();
            let s = Instant::now();
            b.map(va, bytes, h).unwrap();
            let m = s.elapsed();
            let s = Instant::now();
            b.unmap(va, bytes).unwrap();
            let u = s.elapsed();
            let s = Instant::now();
            b.release(h, bytes).unwrap();
            let r = s.elapsed();
            if round >= 2 {
                for (v, d) in t.iter_mut().zip([c, m, u, r]) {
                    v.push(d.as_secs_f64() * 1e6);
                }
            }
        }
        b.unreserve(va, bytes).unwrap();
        let med = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let [c, m, u, r] = t.each_mut().map(med);
        let per = (c + m + u + r) / (mib as f64 / 2.0);
        println!(
            "{:>7} MiB {c:>10.1} {m:>14.1} {u:>10.1} {r:>10.1} {per:>12.2}",
            mib
        );
        rows.push(format!(
            "{{\"mib\":{mib},\"create_us\":{c},\"map_access_us\":{m},\"unmap_us\":{u},\"release_us\":{r}}}"
        ));
    }
    if let Some(p) = json_path {
        std::fs::write(&p, format!("[{}]\n", rows.join(","))).unwrap();
    }
}

#[cfg(not(feature = "cuda"))]
fn main() {
    println!("skipped: built without the `cuda` feature");
}
