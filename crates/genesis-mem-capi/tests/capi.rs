//! The exported C functions on a machine without a CUDA device (CI: no GPU; with the `cuda`
//! feature, the stub libcuda): every one fails cleanly with a message, none panics or unwinds,
//! and the buffer and error plumbing works. On a GPU machine the same calls succeed and are
//! checked for real.

use std::ffi::{CStr, c_void};

use genesis_mem_capi::*;

fn last_error() -> Option<String> {
    let p = genesis_last_error();
    if p.is_null() {
        None
    } else {
        // SAFETY: a non-null result is a NUL-terminated string owned by this thread's slot,
        // valid until the next failing call on this thread.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}

fn has_device() -> bool {
    genesis_cuda::device_count().is_ok_and(|n| n > 0)
}

#[test]
fn without_a_device_every_call_fails_with_a_message() {
    if has_device() {
        eprintln!("a CUDA device is present: the no-device test does not apply");
        return;
    }
    // SAFETY: a null stream is the legacy stream.
    let p = unsafe { genesis_malloc(1 << 20, 0, std::ptr::null_mut()) };
    assert!(p.is_null());
    let msg = last_error().expect("a message after a failed malloc");
    assert!(
        msg.contains("CUDA") || msg.contains("cuda"),
        "message names the missing CUDA: {msg}"
    );
    assert_eq!(genesis_last_error_code(), ERROR_OTHER);

    assert!(genesis_memory_stats_json(0).is_null());
    let mut len = 7usize;
    // SAFETY: `len` is a valid out-pointer.
    assert!(unsafe { genesis_memory_snapshot_pickle(0, &mut len) }.is_null());
    assert_eq!(len, 7, "len untouched on failure");
    assert_eq!(genesis_empty_cache(0), -1);
    assert_eq!(genesis_set_memory_fraction(0.5, 0), -1);
    assert_eq!(genesis_reset_peak_stats(0), -1);
    assert_eq!(genesis_guard_all_streams(0, 1), -1);
    // SAFETY: null stream and pointer; nothing is dereferenced.
    let r = unsafe { genesis_record_stream(std::ptr::null_mut(), 0, std::ptr::null_mut()) };
    assert_eq!(r, -1);
    // SAFETY: as above.
    let r = unsafe { genesis_register_stream(0, std::ptr::null_mut()) };
    assert_eq!(r, -1);
    // The all-devices forms act on the devices in use: none, so they succeed.
    assert_eq!(genesis_guard_all_streams(-1, 0), 0);
    assert_eq!(genesis_empty_cache(-1), 0);
    assert_eq!(genesis_reset_peak_stats(-1), 0);
    assert!(last_error().is_some());
}

#[test]
fn bad_devices_and_frees_never_panic() {
    for device in [-1, 1 << 20, i32::MIN, i32::MAX] {
        // SAFETY: null stream.
        let p = unsafe { genesis_malloc(512, device, std::ptr::null_mut()) };
        assert!(p.is_null(), "device {device}");
        assert!(last_error().is_some());
        assert_eq!(genesis_memory_stats_json(device), std::ptr::null_mut());
    }
    // SAFETY: freeing null is a no-op by contract.
    unsafe { genesis_free(std::ptr::null_mut(), 0, 0, std::ptr::null_mut()) };
    if !has_device() {
        // A pointer the library never handed out, on a machine with no device: reported, not
        // followed (no allocator exists to look it up in).
        // SAFETY: the library never dereferences a pointer it is asked to free.
        unsafe { genesis_free(0x1000 as *mut c_void, 512, 0, std::ptr::null_mut()) };
        assert!(last_error().is_some());
    }
    // SAFETY: null is a no-op.
    unsafe { genesis_free_buffer(std::ptr::null_mut()) };
}

#[test]
fn zero_size_is_null_without_error_on_a_device() {
    if !has_device() {
        return;
    }
    // SAFETY: null stream.
    let p = unsafe { genesis_malloc(0, 0, std::ptr::null_mut()) };
    assert!(p.is_null());
}

#[test]
fn errors_are_per_thread() {
    // SAFETY: null stream.
    let _ = unsafe { genesis_malloc(512, -5, std::ptr::null_mut()) };
    let here = last_error().expect("failed on this thread");
    assert!(here.contains("-5") || here.contains("CUDA"), "{here}");
    std::thread::spawn(|| {
        assert!(last_error().is_none(), "a new thread has no error yet");
        assert_eq!(genesis_last_error_code(), ERROR_NONE);
    })
    .join()
    .unwrap();
}

/// On a GPU machine: allocate, use the statistics and the snapshot, free, and run out of
/// memory and recover.
#[test]
fn gpu_round_trip() {
    if genesis_cuda::skip_without_gpu("gpu_round_trip") {
        return;
    }
    // SAFETY: null stream.
    let p = unsafe { genesis_malloc(3 << 20, 0, std::ptr::null_mut()) };
    assert!(!p.is_null(), "{:?}", last_error());
    let json = genesis_memory_stats_json(0);
    assert!(!json.is_null());
    // SAFETY: a non-null result is a NUL-terminated buffer of this library.
    let text = unsafe { CStr::from_ptr(json) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: returned by genesis_memory_stats_json, freed once.
    unsafe { genesis_free_buffer(json.cast()) };
    let stats: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(stats["allocated_bytes.all.current"], 3 << 20);
    assert_eq!(stats["genesis.live_pointers"], 1);
    let mut len = 0usize;
    // SAFETY: `len` is a valid out-pointer.
    let pickle = unsafe { genesis_memory_snapshot_pickle(0, &mut len) };
    assert!(!pickle.is_null() && len > 0);
    // SAFETY: `len` bytes were written; the buffer is this library's.
    assert_eq!(unsafe { *pickle }, 0x80, "a pickle starts with PROTO");
    // SAFETY: returned by genesis_memory_snapshot_pickle, freed once.
    unsafe { genesis_free_buffer(pickle.cast()) };
    // SAFETY: `p` came from genesis_malloc on device 0 and no work uses it.
    unsafe { genesis_free(p, 3 << 20, 0, std::ptr::null_mut()) };

    // More than the device has: NULL with the out-of-memory code, then usable again.
    // SAFETY: null stream.
    let huge = unsafe { genesis_malloc(1 << 50, 0, std::ptr::null_mut()) };
    assert!(huge.is_null());
    assert_eq!(genesis_last_error_code(), ERROR_OUT_OF_MEMORY);
    // SAFETY: null stream.
    let q = unsafe { genesis_malloc(1 << 20, 0, std::ptr::null_mut()) };
    assert!(!q.is_null());
    // SAFETY: from genesis_malloc, unused.
    unsafe { genesis_free(q, 1 << 20, 0, std::ptr::null_mut()) };
    assert_eq!(genesis_empty_cache(0), 0);
    assert_eq!(genesis_set_memory_fraction(2.0, 0), -1);
    assert_eq!(genesis_set_memory_fraction(0.9, 0), 0);
    assert_eq!(genesis_reset_peak_stats(0), 0);
}
