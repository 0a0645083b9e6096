//! The pointer-keyed registry behind the C functions, on the simulated device: address map,
//! stream mapping, cross-stream frees, the all-streams guard, statistics JSON, out of memory.

use genesis_mem::{CachingAllocator, Config, SimBackend};
use genesis_mem_capi::{Registry, RegistryError};

fn registry(total: usize) -> Registry<SimBackend> {
    let alloc = CachingAllocator::new(
        SimBackend::new(total, true),
        Config {
            record_sites: false,
            ..Config::default()
        },
    )
    .unwrap();
    Registry::new(alloc)
}

fn stats(r: &Registry<SimBackend>) -> serde_json::Value {
    serde_json::from_str(&r.stats_json()).expect("valid JSON")
}

#[test]
fn malloc_free_by_address() {
    let r = registry(1 << 30);
    let a = r.malloc(1000, 0).unwrap();
    let b = r.malloc(3 << 20, 0).unwrap();
    assert_ne!(a, 0);
    assert_ne!(a, b);
    assert_eq!(a % 512, 0);
    assert_eq!(r.live_count(), 2);
    let s = stats(&r);
    assert_eq!(s["allocated_bytes.all.current"], 1024 + (3 << 20));
    assert_eq!(s["requested_bytes.all.current"], 1000 + (3 << 20));
    assert_eq!(s["allocation.all.current"], 2);
    assert_eq!(s["genesis.live_pointers"], 2);
    r.free(a, 0).unwrap();
    r.free(b, 0).unwrap();
    assert_eq!(r.live_count(), 0);
    assert_eq!(stats(&r)["allocated_bytes.all.current"], 0);
    // The same request again comes from the cache, at the same address.
    let c = r.malloc(1000, 0).unwrap();
    assert_eq!(c, a);
    r.free(c, 0).unwrap();
    r.allocator().check_invariants().unwrap();
}

#[test]
fn zero_size_and_null() {
    let r = registry(1 << 30);
    assert_eq!(r.malloc(0, 0).unwrap(), 0);
    r.free(0, 0).unwrap();
    assert_eq!(r.live_count(), 0);
    assert_eq!(stats(&r)["allocation.all.allocated"], 0);
}

#[test]
fn unknown_and_double_frees_are_errors_not_corruption() {
    let r = registry(1 << 30);
    let a = r.malloc(4096, 0).unwrap();
    assert_eq!(
        r.free(a + 512, 0),
        Err(RegistryError::UnknownPointer { ptr: a + 512 })
    );
    r.free(a, 0).unwrap();
    let e = r.free(a, 0).unwrap_err();
    assert!(e.to_string().contains("not a live allocation"), "{e}");
    assert!(!e.is_out_of_memory());
    assert_eq!(r.unknown_frees(), 2);
    assert_eq!(stats(&r)["genesis.unknown_frees"], 2);
    r.allocator().check_invariants().unwrap();
}

#[test]
fn streams_are_the_handles_and_blocks_stay_on_theirs() {
    let r = registry(1 << 30);
    // Two "cudaStream_t" values: the legacy stream (NULL) and a handle.
    let side = 0x5555_0000u64;
    let a = r.malloc(1 << 20, 0).unwrap();
    r.free(a, 0).unwrap();
    // A request of the same size on the other stream does not get the block freed on stream 0.
    let b = r.malloc(1 << 20, side).unwrap();
    assert_ne!(a, b);
    // ... but the same stream does.
    let c = r.malloc(1 << 20, 0).unwrap();
    assert_eq!(a, c);
    r.free(b, side).unwrap();
    r.free(c, 0).unwrap();
    r.allocator().check_invariants().unwrap();
}

/// A free on another stream than the allocation's (or a recorded stream) makes reuse wait for
/// an event on it.
#[test]
fn cross_stream_free_and_record_stream_wait_for_events() {
    for how in ["free on other stream", "record_stream", "guard"] {
        let r = registry(1 << 30);
        r.allocator()
            .with_backend(|b| b.set_auto_complete_events(false));
        let side = 0x7777_0000u64;
        if how == "guard" {
            // The side stream allocates once (before the guard is on), so the guard knows it.
            let s = r.malloc(512, side).unwrap();
            r.free(s, side).unwrap();
            r.set_guard_all_streams(true);
            assert!(r.guard_all_streams());
        }
        let a = r.malloc(1 << 20, 0).unwrap();
        match how {
            "free on other stream" => r.free(a, side).unwrap(),
            "record_stream" => {
                r.record_stream(a, side).unwrap();
                r.free(a, 0).unwrap();
            }
            _ => r.free(a, 0).unwrap(),
        }
        // The event on the side stream has not completed: the block is not reused.
        let b = r.malloc(1 << 20, 0).unwrap();
        assert_ne!(
            a, b,
            "{how}: reused before the side stream's event completed"
        );
        r.free(b, 0).unwrap();
        r.allocator().with_backend(|b| b.complete_events());
        let c = r.malloc(1 << 20, 0).unwrap();
        let d = r.malloc(1 << 20, 0).unwrap();
        assert!(c == a || d == a, "{how}: reused once the event completed");
        r.free(c, 0).unwrap();
        r.free(d, 0).unwrap();
        r.allocator().check_invariants().unwrap();
    }
}

#[test]
fn without_guard_a_same_stream_free_is_reused_at_once() {
    let r = registry(1 << 30);
    r.allocator()
        .with_backend(|b| b.set_auto_complete_events(false));
    let side = 0x7777_0000u64;
    let s = r.malloc(512, side).unwrap();
    r.free(s, side).unwrap();
    let a = r.malloc(1 << 20, 0).unwrap();
    r.free(a, 0).unwrap();
    assert_eq!(r.malloc(1 << 20, 0).unwrap(), a);
}

#[test]
fn register_stream_adds_a_stream_to_the_guard() {
    let r = registry(1 << 30);
    r.allocator()
        .with_backend(|b| b.set_auto_complete_events(false));
    r.set_guard_all_streams(true);
    r.register_stream(0x9999_0000);
    let a = r.malloc(1 << 20, 0).unwrap();
    r.free(a, 0).unwrap();
    let b = r.malloc(1 << 20, 0).unwrap();
    assert_ne!(a, b);
    r.free(b, 0).unwrap();
}

#[test]
fn record_stream_of_unknown_pointer() {
    let r = registry(1 << 30);
    assert_eq!(
        r.record_stream(0x1234_0000, 5),
        Err(RegistryError::UnknownPointer { ptr: 0x1234_0000 })
    );
}

#[test]
fn out_of_memory_then_usable() {
    let r = registry(64 << 20);
    let a = r.malloc(40 << 20, 0).unwrap();
    let e = r.malloc(40 << 20, 0).unwrap_err();
    assert!(e.is_out_of_memory(), "{e}");
    assert!(e.to_string().contains("out of memory"), "{e}");
    let e = r.malloc(1 << 40, 0).unwrap_err();
    assert!(e.is_out_of_memory(), "larger than the device: {e}");
    // A request larger than the device is refused up front; only the first counts as an OOM.
    assert_eq!(stats(&r)["num_ooms"], 1);
    r.free(a, 0).unwrap();
    let b = r.malloc(40 << 20, 0).unwrap();
    r.free(b, 0).unwrap();
    r.empty_cache().unwrap();
    assert_eq!(stats(&r)["reserved_bytes.all.current"], 0);
    r.allocator().check_invariants().unwrap();
}

#[test]
fn fraction_and_peaks() {
    let r = registry(1 << 30);
    assert!(r.set_memory_fraction(0.0).is_err());
    assert!(r.set_memory_fraction(1.5).is_err());
    r.set_memory_fraction(0.25).unwrap();
    let e = r.malloc(300 << 20, 0).unwrap_err();
    assert!(e.is_out_of_memory(), "{e}");
    r.set_memory_fraction(1.0).unwrap();
    let a = r.malloc(300 << 20, 0).unwrap();
    r.free(a, 0).unwrap();
    assert!(stats(&r)["allocated_bytes.all.peak"].as_i64().unwrap() >= 300 << 20);
    r.reset_peak_stats();
    assert_eq!(stats(&r)["allocated_bytes.all.peak"], 0);
}

/// Every key PyTorch's `torch.cuda.memory_stats()` has for the statistics genesis-mem keeps.
#[test]
fn stats_json_has_pytorch_keys() {
    let r = registry(1 << 30);
    let s = stats(&r);
    for name in [
        "allocation",
        "segment",
        "active",
        "inactive_split",
        "allocated_bytes",
        "reserved_bytes",
        "active_bytes",
        "inactive_split_bytes",
        "requested_bytes",
    ] {
        for pool in ["all", "small_pool", "large_pool"] {
            for field in ["current", "peak", "allocated", "freed"] {
                let key = format!("{name}.{pool}.{field}");
                assert!(s.get(&key).is_some(), "missing {key}");
            }
        }
    }
    for key in [
        "num_alloc_retries",
        "num_ooms",
        "num_device_alloc",
        "num_device_free",
    ] {
        assert!(s.get(key).is_some(), "missing {key}");
    }
}

#[test]
fn snapshot_is_a_pickle() {
    let r = registry(1 << 30);
    let a = r.malloc(5 << 20, 0).unwrap();
    let p = r.snapshot_pickle(0);
    assert_eq!(p.first(), Some(&0x80), "PROTO opcode");
    assert_eq!(p.last(), Some(&b'.'), "STOP opcode");
    r.free(a, 0).unwrap();
}

/// Many threads allocating and freeing through the shared map.
#[test]
fn threads_share_the_map() {
    let r = std::sync::Arc::new(registry(4 << 30));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let r = std::sync::Arc::clone(&r);
            std::thread::spawn(move || {
                let stream = t % 3;
                let mut held = Vec::new();
                for i in 0..2000u64 {
                    let size = 512 * (1 + (i * 7 + t * 13) % 300) as usize;
                    held.push(r.malloc(size, stream).unwrap());
                    if i % 3 == 2 {
                        let p = held.swap_remove((i as usize * 31) % held.len());
                        r.free(p, stream).unwrap();
                    }
                }
                for p in held {
                    r.free(p, stream).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(r.live_count(), 0);
    assert_eq!(stats(&r)["allocated_bytes.all.current"], 0);
    r.allocator().check_invariants().unwrap();
}
