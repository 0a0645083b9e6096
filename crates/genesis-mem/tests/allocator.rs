//! The caching allocator on the simulated backend: behaviour, invariants, faults, streams,
//! limits and threads.

use std::collections::BTreeMap;
use std::sync::Arc;

use genesis_mem::{
    Allocation, BackendError, CachingAllocator, CallCounts, Config, Error, FaultPoint, SimBackend,
    parse_size,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const MIB: usize = 1 << 20;

fn allocator(total: usize, vmm: bool) -> CachingAllocator<SimBackend> {
    CachingAllocator::new(SimBackend::new(total, vmm), Config::default()).unwrap()
}

#[test]
fn rounds_aligns_and_reuses() {
    for vmm in [true, false] {
        let a = allocator(1 << 30, vmm);
        let x = a.alloc(1, 0).unwrap();
        assert_eq!(x.size(), 512);
        assert_eq!(x.ptr() % 512, 0);
        let p = x.ptr();
        a.free(x).unwrap();
        let y = a.alloc(300, 0).unwrap();
        assert_eq!(y.ptr(), p, "the cached block is reused");
        let s = a.stats();
        assert_eq!(s.num_cache_hits, 1);
        assert_eq!(s.allocated_bytes.all().current, 512);
        assert_eq!(s.requested_bytes.all().current, 300);
        a.free(y).unwrap();
        a.check_invariants().unwrap();
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let a = allocator(1 << 30, true);
    assert_eq!(a.alloc(0, 0).unwrap_err(), Error::ZeroSize);
    assert!(matches!(
        a.alloc(2 << 30, 0).unwrap_err(),
        Error::TooLarge { .. }
    ));
    assert!(matches!(
        a.alloc(usize::MAX, 0).unwrap_err(),
        Error::TooLarge { .. }
    ));
    for f in [0.0, -0.5, 1.5, f64::NAN] {
        assert!(
            matches!(a.set_memory_fraction(f), Err(Error::InvalidFraction(_))),
            "{f}"
        );
    }
    assert!(matches!(a.set_cache_size("lots"), Err(Error::Size(_))));
    assert!(
        CachingAllocator::new(
            SimBackend::new(1 << 30, true),
            Config {
                memory_fraction: 0.0,
                ..Config::default()
            }
        )
        .is_err()
    );
    // An allocation from another allocator is refused, and stays valid where it belongs.
    let b = allocator(1 << 30, true);
    let x = b.alloc(1024, 0).unwrap();
    let ptr = x.ptr();
    let e = a.free(x).unwrap_err();
    assert_eq!(e, Error::ForeignAllocation { ptr });
    assert_eq!(b.stats().allocation.all().current, 1);
}

/// Adds the range of `x` to the live ranges `ranges` (start -> end), asserting it overlaps none.
fn insert_disjoint(ranges: &mut BTreeMap<u64, u64>, x: &Allocation, when: &str) {
    let (start, end) = (x.ptr(), x.ptr() + x.size() as u64);
    if let Some((&s, &e)) = ranges.range(..end).next_back() {
        assert!(
            e <= start || s >= end,
            "{when}: [{start:#x},{end:#x}) overlaps live [{s:#x},{e:#x})"
        );
    }
    ranges.insert(start, end);
}

/// Random alloc/free sequences; after every step: invariants, no overlap, stats equal a recount.
fn random_ops(seed: u64, ops: usize, vmm: bool, max_handle: usize) {
    let cfg = Config {
        max_handle_bytes: max_handle,
        ..Config::default()
    };
    random_ops_with(seed, ops, vmm, cfg, false);
}

/// Random allocations and frees on two streams, checking the invariants after each; `large`
/// adds large blocks (64 to 192 MiB, one request in 20) on an 8 GiB device.
fn random_ops_with(seed: u64, ops: usize, vmm: bool, cfg: Config, large: bool) {
    let total = if large { 8usize << 30 } else { 4 << 30 };
    let a = CachingAllocator::new(SimBackend::new(total, vmm), cfg).unwrap();
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut live: Vec<Allocation> = Vec::new();
    let mut ranges: BTreeMap<u64, u64> = BTreeMap::new();
    let mut requested = 0usize;
    for step in 0..ops {
        let grow = live.len() < 8 || (live.len() < 96 && rng.random_bool(0.55));
        if grow {
            let size = match rng.random_range(0..10) {
                _ if large && rng.random_range(0..20) == 0 => rng.random_range(64 * MIB..192 * MIB),
                0..=5 => rng.random_range(1..4096),
                6..=8 => rng.random_range(4096..4 * MIB),
                _ => rng.random_range(4 * MIB..64 * MIB),
            };
            let stream = rng.random_range(0..2u64);
            let x = a.alloc(size, stream).unwrap();
            insert_disjoint(&mut ranges, &x, &format!("step {step}"));
            requested += size;
            live.push(x);
        } else {
            let i = rng.random_range(0..live.len());
            let x = live.swap_remove(i);
            ranges.remove(&x.ptr());
            requested -= x.requested();
            a.free(x).unwrap();
        }
        if step % 64 == 0 && rng.random_bool(0.02) {
            a.empty_cache().unwrap();
        }
        a.check_invariants()
            .unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
        assert_eq!(a.stats().requested_bytes.all().current as usize, requested);
    }
    for x in live {
        a.free(x).unwrap();
    }
    a.empty_cache().unwrap();
    a.check_invariants().unwrap();
    let s = a.stats();
    assert_eq!(s.reserved_bytes.all().current, 0, "everything given back");
    assert_eq!(a.with_backend(|b| b.used()), 0);
}

#[test]
fn property_vmm_large_handles() {
    for seed in 0..4 {
        random_ops(seed, 100_000, true, 1 << 40);
    }
}

#[test]
fn property_vmm_memory_first_with_large_blocks() {
    for seed in 0..3 {
        random_ops_with(seed, 60_000, true, Config::memory_first(), true);
    }
    random_ops_with(7, 30_000, true, Config::default(), true);
}

/// With a freed large block on several handles, the part a smaller block does not reuse can
/// move to serve a bigger request; on one handle it stays pinned.
#[test]
fn large_blocks_on_pieces_move_what_a_smaller_one_leaves() {
    let run = |cfg: Config| {
        let a = CachingAllocator::new(SimBackend::new(4 << 30, true), cfg).unwrap();
        let x = a.alloc(256 * MIB, 0).unwrap();
        a.free(x).unwrap();
        let y = a.alloc(128 * MIB, 0).unwrap();
        let z = a.alloc(384 * MIB, 0).unwrap();
        a.check_invariants().unwrap();
        let reserved = a.stats().reserved_bytes.all().current as usize;
        a.free(y).unwrap();
        a.free(z).unwrap();
        a.empty_cache().unwrap();
        assert_eq!(a.with_backend(|b| b.used()), 0);
        reserved
    };
    // One 256 MiB handle: the 128 MiB block pins it, the 384 MiB block needs all new memory.
    let one = Config {
        large_handle_pieces: 1,
        ..large_path()
    };
    assert_eq!(run(one), 640 * MIB);
    // Two 128 MiB handles, or (without the large path) handles of at most 32 MiB (memory
    // first) or 80 MiB (the default): what the 128 MiB block leaves of them moves under the
    // 384 MiB block.
    assert_eq!(run(large_path()), 512 * MIB);
    assert_eq!(run(Config::memory_first()), 512 * MIB);
    assert_eq!(run(Config::default()), 512 * MIB);
}

/// Settings with the large-block path: a request of 64 MiB or more starts at a handle
/// boundary, its new memory two equal handles however large.
fn large_path() -> Config {
    Config {
        large_bytes: 64 * MIB,
        large_handle_pieces: 2,
        max_handle_bytes: 1 << 40,
        ..Config::default()
    }
}

/// A 256 MiB block on two 128 MiB handles and a small block after it; the large one is freed,
/// a 128 MiB block takes its first handle, and a 384 MiB block on `stream` moves the second
/// (between two live blocks) under it. Returns the allocator, the live blocks, the calls and
/// synchronisations the 384 MiB block cost, and the bytes it added to reserved memory.
fn one_move(
    stream: u64,
) -> (
    CachingAllocator<SimBackend>,
    Vec<Allocation>,
    CallCounts,
    u64,
    usize,
) {
    let a = CachingAllocator::new(SimBackend::new(4 << 30, true), large_path()).unwrap();
    let x = a.alloc(256 * MIB, 1).unwrap();
    let t = a.alloc(MIB, 1).unwrap();
    a.free(x).unwrap();
    let y = a.alloc(128 * MIB, 1).unwrap();
    let (before, syncs) = (a.driver_calls(), a.with_backend(|b| b.synchronizations()));
    let reserved = a.stats().reserved_bytes.all().current as usize;
    let z = a.alloc(384 * MIB, stream).unwrap();
    a.check_invariants().unwrap();
    let added = a.stats().reserved_bytes.all().current as usize - reserved;
    let after = a.driver_calls();
    let cost = CallCounts {
        alloc: after.alloc - before.alloc,
        map: after.map - before.map,
        unmap: after.unmap - before.unmap,
        free: after.free - before.free,
        ..CallCounts::default()
    };
    let syncs = a.with_backend(|b| b.synchronizations()) - syncs;
    (a, vec![t, y, z], cost, syncs, added)
}

fn mappings(a: &CachingAllocator<SimBackend>) -> usize {
    a.with_backend(|b| b.live_objects().1)
}

#[test]
fn a_move_is_one_map_and_its_old_mapping_goes_when_the_addresses_are_needed() {
    let (a, live, cost, syncs, added) = one_move(1);
    // The free 128 MiB handle moves (one map, nothing unmapped, no wait: the same stream
    // orders the old addresses' work before the new ones'); 256 MiB more are two new handles.
    assert_eq!((cost.alloc, cost.map, cost.unmap, syncs), (2, 3, 0, 0));
    assert_eq!(added, 256 * MIB);
    // One mapping more than handles: the moved one is still mapped at its old addresses.
    let handles = a.with_backend(|b| b.live_objects().0);
    assert_eq!(mappings(&a), handles + 1);
    // A 60 MiB block fits the hole the move left (between two live blocks): its stale mapping
    // is unmapped, after its stream is synchronised, before new memory goes there.
    let before = a.driver_calls();
    let syncs = a.with_backend(|b| b.synchronizations());
    let w = a.alloc(60 * MIB, 1).unwrap();
    a.check_invariants().unwrap();
    let after = a.driver_calls();
    assert_eq!((after.unmap - before.unmap, after.map - before.map), (1, 1));
    assert_eq!(a.with_backend(|b| b.synchronizations()) - syncs, 1);
    assert_eq!(mappings(&a), handles + 1);
    assert_eq!(a.with_backend(|b| b.live_objects().0), handles + 1);
    for x in live.into_iter().chain([w]) {
        a.free(x).unwrap();
    }
    a.empty_cache().unwrap();
    assert_eq!(a.with_backend(|b| (b.used(), b.live_objects().0)), (0, 0));
    assert_eq!(mappings(&a), 0);
}

#[test]
fn a_move_to_another_stream_waits_for_the_old_one_and_release_unmaps_every_mapping() {
    let (a, live, cost, syncs, added) = one_move(2);
    assert_eq!((cost.map, cost.unmap, syncs, added), (3, 0, 1, 256 * MIB));
    // Emptying the cache with the blocks live keeps their memory; freeing them and emptying
    // it again unmaps the stale mapping with the rest.
    a.empty_cache().unwrap();
    a.check_invariants().unwrap();
    for x in live {
        a.free(x).unwrap();
    }
    a.empty_cache().unwrap();
    a.check_invariants().unwrap();
    assert_eq!(a.with_backend(|b| (b.used(), b.live_objects().0)), (0, 0));
    assert_eq!(mappings(&a), 0);
}

#[test]
fn dropping_the_allocator_releases_a_moved_handle_mapped_twice() {
    let (a, mut live, _, _, _) = one_move(1);
    let probe = a.with_backend(|b| b.probe());
    // The 128 MiB block stays live: its handle stays, and so does its reservation. The moved
    // handle, mapped at two addresses, is released (the simulated device refuses to release a
    // handle that is still mapped anywhere).
    let _kept = live.remove(1);
    for x in live {
        a.free(x).unwrap();
    }
    drop(a);
    // 128 MiB held by the leaked block, plus one reservation.
    assert_eq!(
        probe.load(std::sync::atomic::Ordering::Relaxed),
        128 * MIB + 1
    );
}

#[test]
fn property_vmm_small_handles() {
    for seed in 10..14 {
        random_ops(seed, 100_000, true, 8 * MIB);
    }
}

#[test]
fn property_plain_segments() {
    for seed in 20..22 {
        random_ops(seed, 100_000, false, 1 << 40);
    }
}

#[test]
fn faults_never_panic_leak_or_corrupt() {
    for (vmm, seed) in [(true, 1u64), (false, 2), (true, 3)] {
        let a = allocator(512 * MIB, vmm);
        a.with_backend(|b| b.inject_faults(0.2, &[FaultPoint::Alloc, FaultPoint::Map], seed));
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut live = Vec::new();
        let (mut ok, mut failed) = (0, 0);
        for _ in 0..20_000 {
            if live.len() < 40 && rng.random_bool(0.6) {
                match a.alloc(rng.random_range(1..16 * MIB), 0) {
                    Ok(x) => {
                        ok += 1;
                        live.push(x)
                    }
                    Err(Error::OutOfMemory { requested, .. }) => {
                        assert!(requested > 0);
                        failed += 1
                    }
                    Err(Error::Backend(BackendError::Failed { .. })) => failed += 1,
                    Err(e) => panic!("unexpected error {e}"),
                }
            } else if !live.is_empty() {
                let x = live.swap_remove(rng.random_range(0..live.len()));
                a.free(x).unwrap();
            }
            if rng.random_bool(0.05) {
                // Give memory back so the backend (and its faults) are asked again.
                a.empty_cache().unwrap();
            }
            a.check_invariants().unwrap();
        }
        assert!(ok > 1000 && failed > 50, "ok {ok} failed {failed}");
        a.with_backend(|b| b.inject_faults(0.0, &[], 0));
        for x in live {
            a.free(x).unwrap();
        }
        a.empty_cache().unwrap();
        assert_eq!(a.with_backend(|b| b.used()), 0, "no physical memory leaked");
        let (handles, mapped, segments, _) = a.with_backend(|b| b.live_objects());
        assert_eq!((handles, mapped, segments), (0, 0, 0));
    }
}

#[test]
fn out_of_memory_recovers() {
    for vmm in [true, false] {
        let a = allocator(64 * MIB, vmm);
        let mut live = Vec::new();
        let err = loop {
            match a.alloc(10 * MIB, 0) {
                Ok(x) => live.push(x),
                Err(e) => break e,
            }
        };
        match &err {
            Error::OutOfMemory {
                requested,
                allocated,
                device_total,
                top_allocations,
                ..
            } => {
                assert_eq!(*requested, 10 * MIB);
                assert_eq!(*allocated, live.len() * 10 * MIB);
                assert_eq!(*device_total, 64 * MIB);
                assert!(!top_allocations.is_empty());
                assert!(
                    top_allocations[0].1.contains("allocator.rs"),
                    "{:?}",
                    top_allocations
                );
            }
            e => panic!("expected OutOfMemory, got {e}"),
        }
        let msg = err.to_string();
        assert!(
            msg.contains("out of memory") && msg.contains("largest live allocations"),
            "{msg}"
        );
        let s = a.stats();
        assert_eq!(s.num_ooms, 1);
        assert_eq!(s.num_alloc_retries, 1);
        for x in live.drain(..) {
            a.free(x).unwrap();
        }
        // Cached memory of other sizes is released and reused for a larger request.
        let big = a.alloc(60 * MIB, 0).unwrap();
        a.free(big).unwrap();
        a.check_invariants().unwrap();
    }
}

#[test]
fn memory_fraction_and_cache_limit() {
    let a = CachingAllocator::new(
        SimBackend::new(256 * MIB, true),
        Config {
            max_handle_bytes: 2 * MIB,
            ..Config::default()
        },
    )
    .unwrap();
    a.set_memory_fraction(0.25).unwrap();
    let x = a.alloc(60 * MIB, 0).unwrap();
    let e = a.alloc(10 * MIB, 0).unwrap_err();
    assert!(
        matches!(e, Error::OutOfMemory { limit: Some(l), .. } if l == 64 * MIB),
        "{e}"
    );
    a.free(x).unwrap();
    a.set_memory_fraction(1.0).unwrap();
    let xs: Vec<_> = (0..8).map(|_| a.alloc(8 * MIB, 0).unwrap()).collect();
    a.set_cache_size("4MiB").unwrap();
    for x in xs {
        a.free(x).unwrap();
    }
    let s = a.stats();
    let cached = s.reserved_bytes.all().current - s.active_bytes.all().current;
    assert!(cached <= 4 * MIB as i64, "cached {cached}");
    assert_eq!(parse_size("4MiB").unwrap(), 4 * MIB as u64);
    a.check_invariants().unwrap();
}

#[test]
fn blocks_used_on_other_streams_wait_for_their_events() {
    let a = allocator(1 << 30, true);
    a.with_backend(|b| b.set_auto_complete_events(false));
    let x = a.alloc(MIB, 1).unwrap();
    let p = x.ptr();
    a.record_stream(&x, 2).unwrap();
    a.free(x).unwrap();
    let s = a.stats();
    assert_eq!(s.allocated_bytes.all().current, 0);
    assert_eq!(
        s.active_bytes.all().current,
        MIB as i64,
        "still active until the event"
    );
    let y = a.alloc(MIB, 1).unwrap();
    assert_ne!(y.ptr(), p, "not reused while stream 2 may still use it");
    a.with_backend(|b| b.complete_events());
    let z = a.alloc(MIB, 1).unwrap();
    assert_eq!(z.ptr(), p, "reused once the event completed");
    a.free(y).unwrap();
    a.free(z).unwrap();
    // A block of stream 1 is never handed to stream 3.
    let w = a.alloc(MIB, 3).unwrap();
    assert_ne!(w.ptr(), p);
    a.free(w).unwrap();
    a.check_invariants().unwrap();
}

#[test]
fn eight_threads() {
    let a = Arc::new(allocator(8 << 30, true));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let a = Arc::clone(&a);
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t);
                let mut live = Vec::new();
                for _ in 0..50_000 {
                    if live.len() < 32 && rng.random_bool(0.55) {
                        live.push(a.alloc(rng.random_range(1..2 * MIB), t % 3).unwrap());
                    } else if let Some(x) = live.pop() {
                        a.free(x).unwrap();
                    }
                }
                for x in live {
                    a.free(x).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    a.check_invariants().unwrap();
    let s = a.stats();
    assert_eq!(s.allocation.all().current, 0);
    assert_eq!(s.allocation.all().allocated, s.allocation.all().freed);
}

#[test]
fn snapshot_history_leaks_summary() {
    let a = allocator(1 << 30, true);
    a.record_history(1000);
    let keep = a.alloc(3 * MIB, 0).unwrap();
    let scope = a.leak_scope();
    let leaked = a.alloc(5000, 0).unwrap();
    let freed = a.alloc(7000, 0).unwrap();
    a.free(freed).unwrap();
    let report = scope.check(&a);
    assert_eq!(report.leaks.len(), 1);
    assert_eq!(report.leaks[0].requested, 5000);
    assert!(
        report.to_string().contains("tests/allocator.rs"),
        "{report}"
    );
    assert_eq!(a.large_allocations(MIB).len(), 1);

    let snap = a.snapshot();
    let json: serde_json::Value = serde_json::from_str(&snap.to_json()).unwrap();
    let blocks = json["segments"][0]["blocks"].as_array().unwrap();
    assert!(
        blocks
            .iter()
            .any(|b| b["state"] == "active_allocated" && b["requested_size"] == 5000)
    );
    assert!(blocks.iter().any(|b| b["state"] == "inactive"));

    let h = a.take_history().unwrap();
    assert!(h.records().count() >= 5);
    assert!(h.summary().contains("allocations: 3"), "{}", h.summary());
    let svg = h.timeline_svg();
    assert!(svg.starts_with("<svg") && svg.contains("reserved"));
    let table = a.stats().summary("sim");
    assert!(table.contains("Allocated memory") && table.contains("GPU reserved memory"));
    a.free(keep).unwrap();
    a.free(leaked).unwrap();
    assert!(scope.check(&a).is_clean());
}

#[test]
fn dropping_the_allocator_returns_its_cache() {
    for vmm in [true, false] {
        let backend = SimBackend::new(1 << 30, vmm);
        let probe = backend.probe();
        let a = CachingAllocator::new(backend, Config::default()).unwrap();
        let x = a.alloc(5 * MIB, 0).unwrap();
        let y = a.alloc(100, 1).unwrap();
        a.free(x).unwrap();
        a.free(y).unwrap();
        assert!(probe.load(std::sync::atomic::Ordering::Relaxed) > 0);
        drop(a);
        assert_eq!(
            probe.load(std::sync::atomic::Ordering::Relaxed),
            0,
            "vmm={vmm}: memory and reservations returned"
        );
    }
}

#[test]
fn pytorch_snapshot_pickle_has_the_viewer_structure() {
    let a = allocator(1 << 30, true);
    a.record_history(100);
    let x = a.alloc(3 * MIB, 0).unwrap();
    let y = a.alloc(1000, 0).unwrap();
    let z = a.alloc(40 * MIB, 0).unwrap();
    a.free(y).unwrap();
    let bytes = a.pytorch_snapshot(0);
    assert_eq!(&bytes[..2], b"\x80\x02", "pickle protocol 2");
    assert_eq!(bytes.last(), Some(&b'.'));
    let path = std::env::temp_dir().join(format!("genesis-snapshot-{}.pickle", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let check = r#"
import pickle, sys
d = pickle.load(open(sys.argv[1], 'rb'))
assert set(['segments', 'device_traces']) <= set(d), d.keys()
segs = d['segments']
assert len(segs) >= 1
for s in segs:
    for k in ['device', 'address', 'total_size', 'allocated_size', 'active_size', 'requested_size', 'stream', 'segment_type', 'blocks', 'frames']:
        assert k in s, k
    addr = s['address']
    for b in s['blocks']:
        assert b['address'] == addr, (b['address'], addr)
        assert b['state'] in ('active_allocated', 'active_pending_free', 'inactive'), b['state']
        assert isinstance(b['frames'], list)
        addr += b['size']
    assert addr == s['address'] + s['total_size']
alloc = [b for s in segs for b in s['blocks'] if b['state'] == 'active_allocated']
assert sorted(b['requested_size'] for b in alloc) == [3 << 20, 40 << 20], alloc
assert any(f['filename'].endswith('allocator.rs') for b in alloc for f in b['frames'])
tr = d['device_traces'][0]
assert [t['action'] for t in tr].count('alloc') == 3 and any(t['action'] == 'free_completed' for t in tr)
assert all(set(['action', 'addr', 'size', 'stream', 'time_us', 'frames']) <= set(t) for t in tr)
print('ok', len(segs), 'segments', len(tr), 'trace entries')
"#;
    match std::process::Command::new("python3")
        .arg("-c")
        .arg(check)
        .arg(&path)
        .output()
    {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "python rejected the pickle: {text}");
            assert!(text.starts_with("ok"), "{text}");
        }
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "pickle structure check skipped: no python3 ({e})"
            );
        }
    }
    let _ = std::fs::remove_file(&path);
    a.free(x).unwrap();
    a.free(z).unwrap();
}

#[test]
fn garbage_collection_releases_idle_memory() {
    for vmm in [true, false] {
        let a = CachingAllocator::new(
            SimBackend::new(1 << 30, vmm),
            Config {
                max_handle_bytes: 2 * MIB,
                ..Config::default()
            },
        )
        .unwrap();
        let x = a.alloc(16 * MIB, 0).unwrap();
        let keep = a.alloc(4 * MIB, 0).unwrap();
        a.free(x).unwrap();
        // Not idle long enough: nothing released.
        assert_eq!(
            a.garbage_collect(std::time::Duration::from_secs(3600))
                .unwrap(),
            0
        );
        std::thread::sleep(std::time::Duration::from_millis(30));
        let released = a
            .garbage_collect(std::time::Duration::from_millis(10))
            .unwrap();
        assert!(released >= 16 * MIB, "vmm={vmm}: released {released}");
        a.check_invariants().unwrap();
        assert_eq!(
            a.stats().reserved_bytes.all().current as usize,
            4 * MIB,
            "only the live block's memory stays"
        );
        a.free(keep).unwrap();
    }
}

/// Compaction: with a threshold, a free that leaves fragmentation above it gives back the
/// physical memory under free ranges (with VMM, the live blocks keep their addresses); without
/// one the cache stays until asked (`trim_cache`, `empty_cache`).
#[test]
fn compaction_past_the_threshold_and_on_demand() {
    for (vmm, threshold) in [(true, Some(0.3)), (true, None), (false, Some(0.3))] {
        let a = CachingAllocator::new(
            SimBackend::new(1 << 30, vmm),
            Config {
                max_handle_bytes: 2 * MIB,
                compact_threshold: threshold,
                ..Config::default()
            },
        )
        .unwrap();
        let blocks: Vec<_> = (0..64).map(|_| a.alloc(2 * MIB, 0).unwrap()).collect();
        let reserved = |a: &CachingAllocator<SimBackend>| a.stats().reserved_bytes.all().current;
        assert_eq!(reserved(&a), 128 * MIB as i64, "vmm={vmm}");
        let (kept, freed): (Vec<_>, Vec<_>) = blocks
            .into_iter()
            .enumerate()
            .partition(|(i, _)| i % 2 == 0);
        let kept: Vec<_> = kept.into_iter().map(|(_, b)| b).collect();
        let addresses: Vec<u64> = kept.iter().map(Allocation::ptr).collect();
        for (_, b) in freed {
            a.free(b).unwrap();
        }
        a.check_invariants().unwrap();
        let s = a.stats();
        let after = s.reserved_bytes.all().current;
        match threshold {
            Some(t) => {
                // Fragmentation passed the threshold on the way: the free memory went back.
                assert!(
                    after < 128 * MIB as i64 && s.fragmentation() <= t,
                    "vmm={vmm}: reserved {after}, fragmentation {}",
                    s.fragmentation()
                );
            }
            None => {
                assert_eq!(after, 128 * MIB as i64, "no threshold: the cache stays");
                assert!((s.fragmentation() - 0.5).abs() < 1e-9);
                // 64 MiB free in 2 MiB holes between live blocks.
                assert_eq!(s.largest_free_block, 2 * MIB as u64);
                assert!((s.external_fragmentation() - (1.0 - 2.0 / 64.0)).abs() < 1e-9);
                // On demand: everything cached goes back, live blocks stay where they are.
                a.trim_cache(0).unwrap();
                assert_eq!(reserved(&a), 64 * MIB as i64);
            }
        }
        assert_eq!(
            kept.iter().map(Allocation::ptr).collect::<Vec<_>>(),
            addresses
        );
        a.check_invariants().unwrap();
        for b in kept {
            a.free(b).unwrap();
        }
    }
}

/// Warm-up fills the cache: the sizes it was given are then served with no driver call, and
/// the hit rate counts them.
#[test]
fn warm_up_then_hits() {
    for vmm in [true, false] {
        let a = allocator(1 << 30, vmm);
        let sizes = [4 * MIB, MIB, 512, 70_000];
        a.warm_up(&sizes, 0).unwrap();
        let s = a.stats();
        assert_eq!(s.allocation.all().current, 0);
        assert!(s.reserved_bytes.all().current >= (5 * MIB + 70_000 + 512) as i64);
        let (hits, misses) = (s.num_cache_hits, s.num_cache_misses);
        let calls = a.driver_calls().total();
        let held: Vec<_> = sizes.iter().map(|&n| a.alloc(n, 0).unwrap()).collect();
        assert_eq!(
            a.driver_calls().total(),
            calls,
            "vmm={vmm}: warmed sizes made calls"
        );
        let s = a.stats();
        assert_eq!(s.num_cache_hits, hits + sizes.len() as u64);
        assert_eq!(s.num_cache_misses, misses);
        let rate = s.num_cache_hits as f64 / (s.num_cache_hits + s.num_cache_misses) as f64;
        assert!((s.cache_hit_rate() - rate).abs() < 1e-12);
        for x in held {
            a.free(x).unwrap();
        }
        // A request larger than the device fails the warm-up with its error, holding nothing.
        assert!(matches!(
            a.warm_up(&[MIB, 2 << 30], 0),
            Err(Error::TooLarge { .. })
        ));
        assert_eq!(a.stats().allocation.all().current, 0);
        a.check_invariants().unwrap();
    }
}

#[test]
fn large_blocks_come_back_whole() {
    let a = allocator(4 << 30, true);
    // A large block starts at a handle boundary, on handles of its own.
    let big = a.alloc(100 * MIB + 12_345, 0).unwrap();
    let p = big.ptr();
    assert_eq!(p % (2 * MIB) as u64, 0);
    assert_eq!(big.size(), (100 * MIB + 12_345).next_multiple_of(512));
    let small = a.alloc(3 * MIB, 0).unwrap();
    a.free(small).unwrap();
    a.free(big).unwrap();
    // A smaller request does not cut into the free large block's handle while other free
    // memory fits it...
    let medium = a.alloc(2 * MIB, 0).unwrap();
    assert!(
        medium.ptr() >= p + 100 * MIB as u64,
        "placed at {:#x}, in the free large block at {p:#x}",
        medium.ptr()
    );
    // ...so the next large request of about that size gets the same handles, with no driver
    // call.
    let calls = a.driver_calls().total();
    let again = a.alloc(96 * MIB, 0).unwrap();
    assert_eq!(again.ptr(), p);
    assert_eq!(a.driver_calls().total(), calls);
    a.check_invariants().unwrap();
    a.free(again).unwrap();
    a.free(medium).unwrap();
    a.empty_cache().unwrap();
    assert_eq!(a.with_backend(|b| b.used()), 0);
}

#[test]
fn bursts_of_growth_make_few_driver_calls() {
    let a = allocator(4 << 30, true);
    // 200 blocks of 3 MiB in a row: one growth per block would make ~600 calls.
    let held: Vec<_> = (0..200).map(|_| a.alloc(3 * MIB, 0).unwrap()).collect();
    let calls = a.driver_calls().total();
    assert!(calls < 200, "{calls} driver calls");
    let s = a.stats();
    let (allocated, reserved) = (
        s.allocated_bytes.all().current,
        s.reserved_bytes.all().current,
    );
    assert!(
        reserved <= allocated + allocated / 32 + 16 * MIB as i64,
        "reserved {reserved} for {allocated} allocated"
    );
    // Far from the burst, a growth maps only what the request lacks.
    for _ in 0..100 {
        let x = a.alloc(3 * MIB, 0).unwrap();
        a.free(x).unwrap();
    }
    let tail = a.alloc(3 * MIB, 0).unwrap();
    let before = a.stats().reserved_bytes.all().current;
    let lone = a.alloc(40 * MIB, 0).unwrap();
    let grown = a.stats().reserved_bytes.all().current - before;
    assert!(grown <= 40 * MIB as i64, "grew by {grown}");
    a.check_invariants().unwrap();
    for x in held.into_iter().chain([tail, lone]) {
        a.free(x).unwrap();
    }
}

#[test]
fn small_requests_go_first_fit_others_best_fit() {
    let a = allocator(1 << 30, true);
    let x1 = a.alloc(2 * MIB, 0).unwrap();
    let y = a.alloc(MIB, 0).unwrap();
    let x2 = a.alloc(MIB, 0).unwrap();
    let z = a.alloc(MIB, 0).unwrap();
    let (p1, p2) = (x1.ptr(), x2.ptr());
    a.free(x1).unwrap();
    a.free(x2).unwrap();
    // Holes: 2 MiB at the lowest address, 1 MiB above it, and the free end of the region.
    let small = a.alloc(4096, 0).unwrap();
    assert_eq!(
        small.ptr(),
        p1,
        "a small request takes the lowest address that fits"
    );
    let medium = a.alloc(512 << 10, 0).unwrap();
    assert_eq!(
        medium.ptr(),
        p2,
        "a larger one takes the smallest block that fits"
    );
    a.check_invariants().unwrap();
    for b in [y, z, small, medium] {
        a.free(b).unwrap();
    }
}

/// The hot paths of `alloc` and `free` (a cached block of the size looked up last) against the
/// general paths on the same sequence: an allocator recording history takes the general paths
/// only. Sizes repeat and frees are mostly of the newest allocation, so that most operations
/// take the hot paths and many undo the one just before (where the hot paths leave the peaks
/// alone); stream uses, peak resets and cache releases come in between. Every address and,
/// at checkpoints, every statistic (peaks included) must be equal, and the allocation,
/// allocated-bytes and requested-bytes figures must match a model kept by the test.
#[test]
fn hot_paths_match_the_general_paths() {
    for (seed, vmm) in [(40u64, true), (41, true), (42, false)] {
        let fast = allocator(4 << 30, vmm);
        let general = allocator(4 << 30, vmm);
        general.record_history(16);
        let mut rng = SmallRng::seed_from_u64(seed);
        let sizes = [512usize, 700, 4096, 4000, 96 << 10, 3 * MIB];
        let mut live: Vec<(Allocation, Allocation)> = Vec::new();
        let mut hits = 0u64;
        // An independent model of three statistics (both paths share the code that counts):
        // current values from the live allocations, peaks as their running maxima.
        let (mut cur, mut peak) = ([0i64; 3], [0i64; 3]);
        for step in 0..200_000u32 {
            if live.len() < 2 || (live.len() < 24 && rng.random_bool(0.5)) {
                let size = sizes[rng.random_range(0..sizes.len())] - rng.random_range(0..3);
                let stream = u64::from(rng.random_range(0..8u32) == 0);
                let x = fast.alloc(size, stream).unwrap();
                let y = general.alloc(size, stream).unwrap();
                assert_eq!(
                    (x.ptr(), x.size()),
                    (y.ptr(), y.size()),
                    "seed {seed} step {step}"
                );
                cur[0] += 1;
                cur[1] += x.size() as i64;
                cur[2] += x.requested() as i64;
                for k in 0..3 {
                    peak[k] = peak[k].max(cur[k]);
                }
                live.push((x, y));
            } else {
                let i = if rng.random_bool(0.8) {
                    live.len() - 1
                } else {
                    rng.random_range(0..live.len())
                };
                let (x, y) = live.swap_remove(i);
                cur[0] -= 1;
                cur[1] -= x.size() as i64;
                cur[2] -= x.requested() as i64;
                if rng.random_range(0..50) == 0 {
                    fast.record_stream(&x, 7).unwrap();
                    general.record_stream(&y, 7).unwrap();
                }
                fast.free(x).unwrap();
                general.free(y).unwrap();
            }
            match rng.random_range(0..4000) {
                0 => {
                    fast.reset_peak_stats();
                    general.reset_peak_stats();
                    peak = cur;
                }
                1 => {
                    fast.empty_cache().unwrap();
                    general.empty_cache().unwrap();
                }
                2..=4 => {
                    let (s, t) = (fast.stats(), general.stats());
                    assert_eq!(s, t, "seed {seed} step {step}");
                    hits = s.num_cache_hits;
                    let got = [&s.allocation, &s.allocated_bytes, &s.requested_bytes]
                        .map(|a| (a.all().current, a.all().peak));
                    let want = [0, 1, 2].map(|k| (cur[k], peak[k]));
                    assert_eq!(got, want, "seed {seed} step {step}: against the model");
                }
                _ => {}
            }
        }
        for (x, y) in live {
            fast.free(x).unwrap();
            general.free(y).unwrap();
        }
        assert_eq!(fast.stats(), general.stats(), "seed {seed} at the end");
        assert!(hits > 50_000, "the hot paths were taken: {hits} cache hits");
        fast.check_invariants().unwrap();
        general.check_invariants().unwrap();
    }
}

/// Threads that allocate, pass blocks to each other and free them (as PyTorch's main thread
/// and its autograd thread do), with settings that move handles: no two live blocks ever
/// overlap. A block's range leaves the shared map before it is freed and enters it after it is
/// allocated, so an overlap found is one the allocator handed out.
#[test]
fn threads_passing_blocks_never_share_memory() {
    use std::sync::Mutex;
    use std::sync::mpsc;
    for cfg in [
        Config::memory_first(),
        Config {
            max_handle_bytes: 4 * MIB,
            ..Config::default()
        },
    ] {
        let a = Arc::new(CachingAllocator::new(SimBackend::new(8 << 30, true), cfg).unwrap());
        let ranges = Arc::new(Mutex::new(BTreeMap::<u64, u64>::new()));
        const THREADS: u64 = 4;
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..THREADS)
            .map(|_| mpsc::sync_channel::<Allocation>(8))
            .unzip();
        // After its loop a thread keeps freeing what arrives until every thread has finished
        // its loop, then keeps what is left in its inbox: by then nothing more is sent.
        let finished = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let threads: Vec<_> = receivers
            .into_iter()
            .enumerate()
            .map(|(t, inbox)| {
                let a = Arc::clone(&a);
                let ranges = Arc::clone(&ranges);
                let next = senders[(t + 1) % THREADS as usize].clone();
                let finished = Arc::clone(&finished);
                std::thread::spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(t as u64);
                    let mut live = Vec::new();
                    let free = |x: Allocation| {
                        ranges.lock().unwrap().remove(&x.ptr());
                        a.free(x).unwrap();
                    };
                    for _ in 0..50_000 {
                        while let Ok(x) = inbox.try_recv() {
                            free(x);
                        }
                        if live.len() < 48 && rng.random_bool(0.55) {
                            let size = match rng.random_range(0..20) {
                                0 => rng.random_range(64 * MIB..160 * MIB),
                                1..=10 => rng.random_range(1..8192),
                                _ => rng.random_range(8192..24 * MIB),
                            };
                            let x = a.alloc(size, 0).unwrap();
                            insert_disjoint(&mut ranges.lock().unwrap(), &x, "threads");
                            live.push(x);
                        } else if !live.is_empty() {
                            let x = live.swap_remove(rng.random_range(0..live.len()));
                            // One block in three is freed by the next thread (here, when its
                            // inbox is full).
                            if rng.random_range(0..3) == 0 {
                                if let Err(mpsc::TrySendError::Full(x)) = next.try_send(x) {
                                    free(x);
                                }
                            } else {
                                free(x);
                            }
                        }
                    }
                    finished.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    while finished.load(std::sync::atomic::Ordering::SeqCst) < THREADS {
                        while let Ok(x) = inbox.try_recv() {
                            free(x);
                        }
                        std::thread::yield_now();
                    }
                    live.extend(inbox.try_iter());
                    live
                })
            })
            .collect();
        drop(senders);
        let mut left = Vec::new();
        for t in threads {
            left.extend(t.join().unwrap());
        }
        for x in left {
            a.free(x).unwrap();
        }
        a.check_invariants().unwrap();
        let s = a.stats();
        assert_eq!(s.allocation.all().current, 0);
        assert!(s.num_device_alloc > 0);
        // A move maps a handle that already exists.
        let c = a.driver_calls();
        assert!(c.map > c.alloc, "the test moves handles");
    }
}

/// The simulated backend maps whole handles only, as the CUDA driver does (it refuses part of
/// a handle with `CUDA_ERROR_NOT_SUPPORTED`), so a policy that would need a partial map fails
/// in replay as it would on a GPU.
#[test]
fn the_simulated_backend_maps_whole_handles_only() {
    use genesis_mem::Backend;
    let mut b = SimBackend::new(1 << 30, true);
    let g = b.granularity();
    let va = b.reserve(8 * g).unwrap();
    let h = b.create(4 * g).unwrap();
    for part in [g, 2 * g, 3 * g] {
        let e = b.map(va, part, h).unwrap_err();
        assert!(
            e.to_string().contains("not a live handle of that size"),
            "{e}"
        );
    }
    b.map(va, 4 * g, h).unwrap();
    // The same handle mapped whole at a second address (what a move does) is allowed.
    b.map(va + 4 * g as u64, 4 * g, h).unwrap();
    b.unmap(va, 4 * g).unwrap();
    b.unmap(va + 4 * g as u64, 4 * g).unwrap();
    b.release(h, 4 * g).unwrap();
}
