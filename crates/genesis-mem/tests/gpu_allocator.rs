//! The caching allocator on a real GPU: trace patterns through the CUDA backends with every
//! block written, statistics against `cuMemGetInfo`, the out-of-memory path for real, streams,
//! and the pinned host pool. Each test skips without a CUDA device.
#![cfg(feature = "cuda")]

use std::collections::HashMap;
use std::path::PathBuf;

use genesis_cuda::{Context, Stream, raw, skip_without_gpu};
use genesis_mem::cuda::{device_allocator, pinned_allocator};
use genesis_mem::trace::{Trace, TraceEvent};
use genesis_mem::{Config, Error};

const GIB: usize = 1 << 30;

/// The tests compare against `cuMemGetInfo` and fill the device: one at a time.
static DEVICE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn device_lock() -> std::sync::MutexGuard<'static, ()> {
    DEVICE.lock().unwrap_or_else(|p| p.into_inner())
}

fn trace(name: &str) -> Trace {
    let root = std::env::var_os("GENESIS_REPO_ROOT")
        .map(|r| PathBuf::from(r).join("crates/genesis-mem"))
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    Trace::read(&root.join("corpus").join(format!("{name}.trace.gz"))).unwrap()
}

/// Replays `name` on the device, writing a distinct byte into every block and checking a
/// sample of them before they are freed.
fn replay_on_device(name: &str, vmm: bool) {
    replay_on_device_with(
        name,
        Config {
            use_vmm: vmm,
            ..Config::default()
        },
    );
}

fn replay_on_device_with(name: &str, cfg: Config) {
    let vmm = cfg.use_vmm;
    let ctx = Context::get(0).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    ctx.synchronize().unwrap();
    let (free_before, _) = ctx.mem_info().unwrap();
    let a = device_allocator(&ctx, cfg).unwrap();
    let t = trace(name);
    let mut live = HashMap::new();
    let mut checked = 0;
    for (i, ev) in t.events.iter().enumerate() {
        match *ev {
            TraceEvent::Alloc { id, size, .. } => {
                let x = a.alloc(size, stream.id()).unwrap();
                let tag = (id % 251) as u8;
                // SAFETY: the block is mapped device memory of this context, x.size() long.
                unsafe { raw::memset_d8(&stream, x.ptr(), tag, x.size()).unwrap() };
                live.insert(id, (x, tag));
            }
            TraceEvent::Free { id } => {
                if let Some((x, tag)) = live.remove(&id) {
                    if i % 97 == 0 {
                        stream.synchronize().unwrap();
                        let mut host = vec![0u8; x.size().min(4096)];
                        // SAFETY: the block is still allocated and at least host.len() long.
                        unsafe {
                            raw::copy_to_host(
                                &ctx,
                                x.ptr() + (x.size() - host.len()) as u64,
                                &mut host,
                            )
                            .unwrap()
                        };
                        assert!(
                            host.iter().all(|&b| b == tag),
                            "{name}: block of id {id} was overwritten"
                        );
                        checked += 1;
                    }
                    a.free(x).unwrap();
                }
            }
        }
    }
    stream.synchronize().unwrap();
    a.check_invariants().unwrap();
    let s = a.stats();
    let (free_now, total) = ctx.mem_info().unwrap();
    let reserved = s.reserved_bytes.all().current as i64;
    let used = free_before as i64 - free_now as i64;
    eprintln!(
        "{name} vmm={vmm}: reserved {reserved}, device used {used}, peak reserved {}, checked {checked} blocks, calls {}",
        s.reserved_bytes.all().peak,
        a.driver_calls().total()
    );
    assert!(checked > 10);
    // The driver's own bookkeeping adds a little; nothing else on the device changed.
    assert!(
        used >= reserved - (64 << 20) && used <= reserved + (256 << 20),
        "used {used} reserved {reserved} of {total}"
    );
    for (_, (x, _)) in live.drain() {
        a.free(x).unwrap();
    }
    a.empty_cache().unwrap();
    assert_eq!(a.stats().reserved_bytes.all().current, 0);
    ctx.synchronize().unwrap();
    let (free_after, _) = ctx.mem_info().unwrap();
    assert!(
        (free_before as i64 - free_after as i64).abs() <= 64 << 20,
        "memory given back: {free_before} vs {free_after}"
    );
}

#[test]
fn vmm_replays_resnet_with_real_memory() {
    if skip_without_gpu("vmm_replays_resnet_with_real_memory") {
        return;
    }
    let _one_at_a_time = device_lock();
    replay_on_device("resnet50_train", true);
}

#[test]
fn vmm_replays_gpt2_with_real_memory() {
    if skip_without_gpu("vmm_replays_gpt2_with_real_memory") {
        return;
    }
    let _one_at_a_time = device_lock();
    // Large blocks on handles of their own, handles moved and mapped into holes.
    replay_on_device("gpt2_train", true);
    replay_on_device("gpt2_generate", true);
}

#[test]
fn memory_first_replays_variable_batch_inference_with_real_memory() {
    if skip_without_gpu("memory_first_replays_variable_batch_inference_with_real_memory") {
        return;
    }
    let _one_at_a_time = device_lock();
    // Large blocks on four handles each, pieces moved under new large blocks every batch.
    replay_on_device_with("resnet18_infer_varbatch_bf16_cl", Config::memory_first());
}

#[test]
fn plain_segments_replay_gpt2_train() {
    if skip_without_gpu("plain_segments_replay_gpt2_train") {
        return;
    }
    let _one_at_a_time = device_lock();
    replay_on_device("gpt2_train", false);
}

#[test]
fn out_of_memory_for_real_then_recover() {
    if skip_without_gpu("out_of_memory_for_real_then_recover") {
        return;
    }
    let _one_at_a_time = device_lock();
    let ctx = Context::get(0).unwrap();
    let a = device_allocator(&ctx, Config::default()).unwrap();
    let mut held = Vec::new();
    let err = loop {
        match a.alloc(8 * GIB, 0) {
            Ok(x) => held.push(x),
            Err(e) => break e,
        }
        assert!(held.len() < 64, "the device never ran out");
    };
    match &err {
        Error::OutOfMemory {
            requested,
            device_total,
            allocated,
            ..
        } => {
            assert_eq!(*requested, 8 * GIB);
            assert_eq!(*device_total, ctx.total_memory());
            assert_eq!(*allocated, held.len() * 8 * GIB);
        }
        e => panic!("expected OutOfMemory, got {e}"),
    }
    eprintln!("OOM after {} x 8 GiB: {err}", held.len());
    assert_eq!(a.stats().num_ooms, 1);
    // Free two and allocate a larger block: the cache is reorganised, not leaked.
    let x = held.pop().unwrap();
    let y = held.pop().unwrap();
    a.free(x).unwrap();
    a.free(y).unwrap();
    let z = a.alloc(12 * GIB, 0).unwrap();
    a.free(z).unwrap();
    for x in held {
        a.free(x).unwrap();
    }
    a.empty_cache().unwrap();
    a.check_invariants().unwrap();
    assert_eq!(a.stats().reserved_bytes.all().current, 0);
}

#[test]
fn streams_and_pinned_pool() {
    if skip_without_gpu("streams_and_pinned_pool") {
        return;
    }
    let _one_at_a_time = device_lock();
    let ctx = Context::get(0).unwrap();
    let s1 = Stream::new(&ctx).unwrap();
    let s2 = Stream::new(&ctx).unwrap();
    let a = device_allocator(&ctx, Config::default()).unwrap();
    let x = a.alloc(64 << 20, s1.id()).unwrap();
    let p = x.ptr();
    // SAFETY: x is 64 MiB of mapped memory.
    unsafe { raw::memset_d8(&s2, p, 7, x.size()).unwrap() };
    a.record_stream(&x, s2.id()).unwrap();
    a.free(x).unwrap();
    s2.synchronize().unwrap();
    let y = a.alloc(64 << 20, s1.id()).unwrap();
    assert_eq!(y.ptr(), p, "reused once stream 2's work is done");
    a.free(y).unwrap();

    let pinned = pinned_allocator(&ctx, 1 << 30).unwrap();
    let h = pinned.alloc(1 << 20, 0).unwrap();
    assert!(pinned.owns(h.ptr()) && !pinned.owns(12345));
    // SAFETY: h is 1 MiB of pinned host memory owned by us.
    let bytes = unsafe { std::slice::from_raw_parts_mut(h.ptr() as usize as *mut u8, h.size()) };
    bytes.fill(0x5a);
    assert!(bytes.iter().all(|&b| b == 0x5a));
    pinned.free(h).unwrap();
    pinned.empty_cache().unwrap();
    assert_eq!(pinned.stats().reserved_bytes.all().current, 0);
}
