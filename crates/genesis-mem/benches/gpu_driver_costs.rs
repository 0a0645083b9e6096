//! What the VMM driver calls cost on this GPU by handle size: `cuMemCreate`, `cuMemMap` with
//! its `cuMemSetAccess`, `cuMemUnmap` and `cuMemRelease`, each timed on the host around the
//! call, for handles of 2 MiB to 1 GiB (median of 15 rounds after 2 warm-up ones), with the
//! cost per 2 MiB: the growth with size that `CallPrices::SIZE_SCALE` records. A second table
//! maps several handles side by side and times `cuMemSetAccess` and `cuMemUnmap` once over
//! the whole range against once a handle.
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
    ranges(&ctx);
}

/// Several handles mapped side by side: `cuMemSetAccess` once over the whole range against
/// once a handle, and `cuMemUnmap` once over the range against once a handle (medians of 9
/// rounds after 2 warm-up ones, microseconds for all `k` handles).
#[cfg(feature = "cuda")]
fn ranges(ctx: &std::sync::Arc<genesis_cuda::Context>) {
    use genesis_cuda::raw;
    use std::time::Instant;

    println!(
        "\n{:>7} {:>3} {:>10} {:>12} {:>12} {:>12} {:>12}",
        "handle", "k", "map us", "access 1 us", "access k us", "unmap 1 us", "unmap k us"
    );
    let us = |s: Instant| s.elapsed().as_secs_f64() * 1e6;
    for mib in [2usize, 16, 32, 64] {
        for k in [1usize, 4, 16] {
            let h = mib << 20;
            let len = h * k;
            let va = raw::reserve_address_space(ctx, len, h).unwrap();
            let mut t = [Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new()];
            let mut whole_unmap_ok = true;
            for round in 0..11 {
                for whole in [true, false] {
                    let hs: Vec<u64> = (0..k)
                        .map(|_| raw::create_physical(ctx, h).unwrap())
                        .collect();
                    let s = Instant::now();
                    for (i, &p) in hs.iter().enumerate() {
                        // SAFETY: the handle is `h` bytes and `[va + i h, va + (i + 1) h)` lies
                        // in the reservation, unmapped.
                        unsafe { raw::map(ctx, va + (i * h) as u64, h, p).unwrap() };
                    }
                    let m = us(s);
                    let s = Instant::now();
                    if whole {
                        // SAFETY: the whole range is mapped.
                        unsafe { raw::set_access(ctx, va, len, &[]).unwrap() };
                    } else {
                        for i in 0..k {
                            // SAFETY: each handle's range is mapped.
                            unsafe { raw::set_access(ctx, va + (i * h) as u64, h, &[]).unwrap() };
                        }
                    }
                    let a = us(s);
                    let s = Instant::now();
                    // SAFETY: the range is mapped and nothing uses it.
                    let one = whole && unsafe { raw::unmap(ctx, va, len) }.is_ok();
                    if whole && !one {
                        whole_unmap_ok = false;
                    }
                    if !one {
                        for i in 0..k {
                            // SAFETY: each handle's range is mapped and unused.
                            unsafe { raw::unmap(ctx, va + (i * h) as u64, h).unwrap() };
                        }
                    }
                    let u = us(s);
                    for p in hs {
                        // SAFETY: the handle is unmapped.
                        unsafe { raw::release_physical(ctx, p).unwrap() };
                    }
                    if round >= 2 {
                        t[0].push(m);
                        t[if whole { 1 } else { 2 }].push(a);
                        t[if whole { 3 } else { 4 }].push(u);
                    }
                }
            }
            // SAFETY: nothing is mapped in the reservation.
            unsafe { raw::free_address_space(ctx, va, len).unwrap() };
            let med = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let [m, a1, ak, u1, uk] = t.each_mut().map(med);
            println!(
                "{:>4} MiB {k:>3} {m:>10.1} {a1:>12.1} {ak:>12.1} {:>12} {uk:>12.1}",
                mib,
                if whole_unmap_ok {
                    format!("{u1:.1}")
                } else {
                    "refused".into()
                }
            );
        }
    }
}

#[cfg(not(feature = "cuda"))]
fn main() {
    println!("skipped: built without the `cuda` feature");
}
