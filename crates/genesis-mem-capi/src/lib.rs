//! The Genesis caching allocator as a C library (`libgenesis_mem_capi.so`), for PyTorch's
//! `torch.cuda.memory.CUDAPluggableAllocator` and for any C or C++ program.
//!
//! ```text
//! void*       genesis_malloc(size_t size, int device, cudaStream_t stream);
//! void        genesis_free(void* ptr, size_t size, int device, cudaStream_t stream);
//! int         genesis_record_stream(void* ptr, int device, cudaStream_t stream);
//! char*       genesis_memory_stats_json(int device);                 /* free with genesis_free_buffer */
//! uint8_t*    genesis_memory_snapshot_pickle(int device, size_t* len); /* likewise */
//! void        genesis_free_buffer(void* buffer);  /* only a live buffer of ours is freed */
//! int         genesis_empty_cache(int device);                 /* device < 0: all in use */
//! int         genesis_set_memory_fraction(double fraction, int device);
//! int         genesis_reset_peak_stats(int device);            /* device < 0: all in use */
//! int         genesis_guard_all_streams(int device, int on);   /* device < 0: all, and later */
//! int         genesis_register_stream(int device, cudaStream_t stream);
//! const char* genesis_last_error(void);       /* this thread's last failure, or NULL */
//! int         genesis_last_error_code(void);  /* 0 none, 1 out of memory, 2 other */
//! ```
//!
//! Functions returning `int` return 0 on success and -1 on failure; pointer-returning ones
//! return NULL on failure; either way [`genesis_last_error`] then says why.
//!
//! # Devices, contexts, streams
//!
//! One allocator per device, created on first use on the device's **primary context**
//! (`cuDevicePrimaryCtxRetain`, the context the CUDA runtime and so PyTorch use), with the
//! virtual-memory arena (set `GENESIS_CAPI_VMM=0` for plain `cuMemAlloc` segments,
//! `GENESIS_CAPI_MEMORY_FIRST=1` for [`genesis_mem::Config::memory_first`]: less memory, more
//! driver calls, and `GENESIS_CAPI_MAX_HANDLE=SIZE`, such as `128MiB`, for another
//! [`genesis_mem::Config::max_handle_bytes`]). The calling thread's current context is put back
//! after a call that had to make another device's context current, so the caller's current
//! device never changes under it.
//!
//! A `cudaStream_t` is a `CUstream`: its value is the allocator's [`genesis_mem::StreamId`]
//! (NULL is the legacy default stream; `cudaStreamLegacy` and `cudaStreamPerThread` pass
//! through as the driver's special handles). The allocator synchronises and records events on
//! these streams itself, so a stream must stay alive as long as the allocator holds memory
//! allocated on it (PyTorch's streams come from pools that live for the process; an
//! `ExternalStream` must outlive its tensors and the next `empty_cache`).
//!
//! # Errors, panics, out of memory
//!
//! No panic unwinds across the C boundary: every body runs under
//! [`std::panic::catch_unwind`], and a panic becomes a NULL / -1 result with the message in
//! [`genesis_last_error`]. Out of memory (after the allocator has released its cache and
//! retried) returns NULL with [`genesis_last_error_code`] 1; the allocator stays usable.
//! PyTorch's `CUDAPluggableAllocator` does **not** check the pointer it gets: a NULL would
//! become a tensor at address 0. The Python module `genesis_torch` therefore loads a
//! five-line C++ wrapper, built once against the installed PyTorch, that raises PyTorch's own
//! `torch.OutOfMemoryError` (a `c10::OutOfMemoryError`) when `genesis_malloc` returns NULL.
//!
//! # What a pluggable allocator cannot see: streams
//!
//! PyTorch tells a pluggable allocator the stream of each allocation (its current stream at
//! the time) and gives that same stream back at the free. It does **not** forward
//! `Tensor.record_stream(s)` through the C ABI (`CUDAPluggableAllocator` has a record-stream
//! hook only in C++, and `torch.cuda.memory.CUDAPluggableAllocator` never sets it), so
//! `record_stream` is silently a no-op. A tensor allocated on stream A, used by kernels on a
//! side stream B, and freed (its last reference dropped) while B's work is still queued would
//! have its block handed out again on A at once, and new work on A could overwrite it while
//! B still reads it. That is the same hazard as PyTorch's own allocator without
//! `record_stream`, but here `record_stream` cannot repair it. What the library does:
//!
//! - blocks are reused only on the stream they were freed on (stream order makes that safe);
//!   memory is unmapped, returned, or moved to another stream's addresses only after that
//!   stream is synchronised;
//! - a free on a stream other than the allocation's records an event on it, and the block is
//!   reused only after that event completes (genesis-mem's cross-stream rule);
//! - [`genesis_record_stream`] is the missing hook: `genesis_torch.record_stream(tensor,
//!   stream)` instead of `tensor.record_stream(stream)`;
//! - [`genesis_guard_all_streams`] (`genesis_torch.install(guard_streams=True)` or
//!   `GENESIS_CAPI_GUARD_STREAMS=1`) makes every free wait for events on every stream the
//!   device's allocator has seen (or that [`genesis_register_stream`] named), not only its own:
//!   safe without any change to the program, at one `cuEventRecord` per other stream per free.
//!
//! What the program must otherwise do, as PyTorch's CUDA semantics notes ask for side streams:
//! before the last reference to a tensor used on a side stream goes away, make the allocation
//! stream wait for the side stream (`torch.cuda.current_stream().wait_stream(side)`), or keep
//! the tensor alive until the side stream has been synchronised.
//!
//! Also unsupported through the C ABI: CUDA graph memory pools, `torch.cuda.memory_stats()`,
//! `memory_snapshot()`, `empty_cache()` and `set_per_process_memory_fraction()` (PyTorch's
//! own functions raise or do nothing for a pluggable allocator: use `genesis_torch`'s).
//!
//! # Without the `cuda` feature
//!
//! Every function fails cleanly: NULL / -1 and "built without the `cuda` feature".
#![warn(missing_docs)]

use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

pub mod registry;

pub use registry::{Registry, RegistryError};

use genesis_mem::StreamId;

/// [`genesis_last_error_code`]: no failure recorded on this thread.
pub const ERROR_NONE: c_int = 0;
/// [`genesis_last_error_code`]: the device is out of memory.
pub const ERROR_OUT_OF_MEMORY: c_int = 1;
/// [`genesis_last_error_code`]: any other failure (no device, bad argument, driver error,
/// panic).
pub const ERROR_OTHER: c_int = 2;

thread_local! {
    static LAST_ERROR: RefCell<(c_int, Option<CString>)> = const { RefCell::new((ERROR_NONE, None)) };
}

/// A failure on its way to the C caller.
#[derive(Debug)]
struct Failure {
    code: c_int,
    message: String,
}

impl Failure {
    fn other(message: impl Into<String>) -> Failure {
        Failure {
            code: ERROR_OTHER,
            message: message.into(),
        }
    }
}

impl From<RegistryError> for Failure {
    fn from(e: RegistryError) -> Failure {
        Failure {
            code: if e.is_out_of_memory() {
                ERROR_OUT_OF_MEMORY
            } else {
                ERROR_OTHER
            },
            message: e.to_string(),
        }
    }
}

fn set_last_error(code: c_int, message: &str) {
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    // `try_with`: a call from a thread-local destructor must not panic either.
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = (code, Some(c)));
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".into()
    }
}

/// Runs `body` with panics caught: its value, or `fallback` with the failure recorded.
fn guarded<T>(fallback: T, body: impl FnOnce() -> Result<T, Failure>) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(f)) => {
            set_last_error(f.code, &f.message);
            fallback
        }
        Err(p) => {
            set_last_error(
                ERROR_OTHER,
                &format!("panic in genesis-mem-capi: {}", panic_message(&*p)),
            );
            fallback
        }
    }
}

fn stream_id(stream: *mut c_void) -> StreamId {
    stream as usize as StreamId
}

/// The allocators of the devices (one per device, on its primary context).
#[cfg(feature = "cuda")]
mod devices {
    use std::ffi::c_int;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Mutex, OnceLock};

    use genesis_cuda::Context;
    use genesis_mem::Config;
    use genesis_mem::cuda::CudaBackend;

    use super::Failure;
    use crate::Registry;

    /// One device's allocator and its context.
    #[derive(Debug)]
    pub(crate) struct Device {
        pub(crate) registry: Registry<CudaBackend>,
        ctx_handle: usize,
        multi_device: bool,
    }

    impl Device {
        /// Runs `f` and then makes the thread's previous context current again if it was
        /// another device's (a primary context that the caller's runtime retains).
        pub(crate) fn with_context<R>(&self, f: impl FnOnce() -> R) -> R {
            if !self.multi_device {
                return f();
            }
            let prev = Context::thread_current().unwrap_or(0);
            let _restore = Restore {
                prev: if prev != self.ctx_handle { prev } else { 0 },
            };
            f()
        }
    }

    struct Restore {
        prev: usize,
    }

    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: `prev` was current on this thread when the call began, so it was a live
            // context retained by the caller; the call made no release of it.
            let _ = unsafe { Context::set_thread_current(self.prev) };
        }
    }

    struct Devices {
        cells: Box<[OnceLock<&'static Device>]>,
        create: Mutex<()>,
    }

    /// The all-streams guard for allocators created from now on.
    pub(crate) static GUARD_DEFAULT: AtomicBool = AtomicBool::new(false);

    fn devices() -> Result<&'static Devices, Failure> {
        static DEVICES: OnceLock<Result<Devices, String>> = OnceLock::new();
        DEVICES
            .get_or_init(|| {
                if std::env::var("GENESIS_CAPI_GUARD_STREAMS").is_ok_and(|v| v == "1") {
                    GUARD_DEFAULT.store(true, Ordering::Relaxed);
                }
                match genesis_cuda::device_count() {
                    Ok(0) => Err("no CUDA device found".to_string()),
                    Ok(n) => Ok(Devices {
                        cells: (0..n).map(|_| OnceLock::new()).collect(),
                        create: Mutex::new(()),
                    }),
                    Err(e) => Err(format!("CUDA is not usable: {e}")),
                }
            })
            .as_ref()
            .map_err(|e| Failure::other(e.clone()))
    }

    /// Every device allocator created so far.
    pub(crate) fn created() -> Vec<&'static Device> {
        match devices() {
            Ok(d) => d.cells.iter().filter_map(|c| c.get().copied()).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// The allocator of `device`, created on first use.
    pub(crate) fn get(device: c_int) -> Result<&'static Device, Failure> {
        let devs = devices()?;
        let n = devs.cells.len();
        let cell = usize::try_from(device)
            .ok()
            .and_then(|d| devs.cells.get(d))
            .ok_or_else(|| {
                Failure::other(format!(
                    "invalid device {device}: {n} CUDA device(s) present"
                ))
            })?;
        if let Some(d) = cell.get() {
            return Ok(d);
        }
        let _creating = devs.create.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = cell.get() {
            return Ok(d);
        }
        let ordinal = device as usize;
        let prev = if n > 1 {
            Context::thread_current().unwrap_or(0)
        } else {
            0
        };
        let created = create(ordinal, n > 1);
        if prev != 0 {
            // SAFETY: `prev` was current on this thread a moment ago: a live context.
            let _ = unsafe { Context::set_thread_current(prev) };
        }
        let dev: &'static Device = Box::leak(Box::new(created?));
        let _ = cell.set(dev);
        Ok(dev)
    }

    fn create(ordinal: usize, multi_device: bool) -> Result<Device, Failure> {
        let ctx =
            Context::get(ordinal).map_err(|e| Failure::other(format!("device {ordinal}: {e}")))?;
        let mut config = Config {
            use_vmm: std::env::var("GENESIS_CAPI_VMM").map_or(true, |v| v != "0"),
            // Every call site would be this crate's: PyTorch's stack is not ours to see.
            record_sites: false,
            ..Config::default()
        };
        if std::env::var("GENESIS_CAPI_MEMORY_FIRST").is_ok_and(|v| v == "1") {
            config = config.with_memory_first();
        }
        if let Ok(v) = std::env::var("GENESIS_CAPI_MAX_HANDLE") {
            let bytes = genesis_mem::parse_size(&v)
                .map_err(|e| Failure::other(format!("GENESIS_CAPI_MAX_HANDLE={v}: {e}")))?;
            config.max_handle_bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        }
        let allocator = genesis_mem::cuda::device_allocator(&ctx, config)
            .map_err(|e| Failure::other(format!("device {ordinal}: {e}")))?;
        let registry = Registry::new(allocator);
        registry.set_guard_all_streams(GUARD_DEFAULT.load(Ordering::Relaxed));
        Ok(Device {
            registry,
            ctx_handle: ctx.handle(),
            multi_device,
        })
    }
}

/// Without the `cuda` feature there is no device: every lookup fails.
#[cfg(not(feature = "cuda"))]
mod devices {
    use std::ffi::c_int;
    use std::sync::atomic::AtomicBool;

    use genesis_mem::SimBackend;

    use super::Failure;
    use crate::Registry;

    #[derive(Debug)]
    pub(crate) struct Device {
        pub(crate) registry: Registry<SimBackend>,
    }

    impl Device {
        pub(crate) fn with_context<R>(&self, f: impl FnOnce() -> R) -> R {
            f()
        }
    }

    pub(crate) static GUARD_DEFAULT: AtomicBool = AtomicBool::new(false);

    pub(crate) fn created() -> Vec<&'static Device> {
        Vec::new()
    }

    pub(crate) fn get(_device: c_int) -> Result<&'static Device, Failure> {
        Err(Failure::other(
            "genesis-mem-capi was built without the `cuda` feature: no CUDA device can be used \
             (build with `cargo build --release -p genesis-mem-capi --features cuda`)",
        ))
    }
}

/// Allocates `size` bytes on `device` for work queued on `stream`; NULL when out of memory or
/// on any other failure (see [`genesis_last_error`]), and NULL without failure for `size == 0`.
/// The signature PyTorch's `CUDAPluggableAllocator` loads.
///
/// # Safety
///
/// `stream` must be NULL, `cudaStreamLegacy`, `cudaStreamPerThread`, or a stream of `device`'s
/// primary context that stays alive while the allocator holds memory allocated on it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn genesis_malloc(
    size: usize,
    device: c_int,
    stream: *mut c_void,
) -> *mut c_void {
    let stream = stream_id(stream);
    guarded(std::ptr::null_mut(), || {
        let dev = devices::get(device)?;
        let ptr = dev.with_context(|| dev.registry.malloc(size, stream))?;
        Ok(ptr as usize as *mut c_void)
    })
}

/// Frees `ptr` (from [`genesis_malloc`] on `device`); `stream` is the stream the free is
/// ordered on (PyTorch passes the allocation's). `size` is not needed. NULL is a no-op; an
/// address the allocator does not know is recorded as an error and otherwise ignored.
///
/// # Safety
///
/// `ptr` must be NULL or an address [`genesis_malloc`] returned for `device` and not freed
/// since. Work queued on `stream` before the free may still use the block (it is reused only
/// by work ordered after it); work on other streams must be finished or ordered before the
/// free, or announced with [`genesis_record_stream`]. `stream` is as for [`genesis_malloc`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn genesis_free(
    ptr: *mut c_void,
    size: usize,
    device: c_int,
    stream: *mut c_void,
) {
    let _ = size;
    let stream = stream_id(stream);
    let ptr = ptr as usize as u64;
    guarded((), || {
        if ptr == 0 {
            return Ok(());
        }
        let dev = devices::get(device)?;
        dev.with_context(|| dev.registry.free(ptr, stream))?;
        Ok(())
    })
}

/// Marks the block at `ptr` as used by work on `stream` (the `Tensor.record_stream` PyTorch
/// does not forward): when it is freed, an event is recorded on `stream` and the block is
/// reused only after it completes. 0, or -1 on failure.
///
/// # Safety
///
/// `stream` is as for [`genesis_malloc`] and must stay alive until the block is freed and the
/// event recorded then has completed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn genesis_record_stream(
    ptr: *mut c_void,
    device: c_int,
    stream: *mut c_void,
) -> c_int {
    let stream = stream_id(stream);
    let ptr = ptr as usize as u64;
    guarded(-1, || {
        let dev = devices::get(device)?;
        dev.with_context(|| dev.registry.record_stream(ptr, stream))?;
        Ok(0)
    })
}

/// Turns the all-streams guard on (`on != 0`) or off for `device`, or for every device
/// (present and future) when `device < 0`: every free then waits for events on all streams the
/// allocator has seen allocations on. 0, or -1 on failure.
#[unsafe(no_mangle)]
pub extern "C" fn genesis_guard_all_streams(device: c_int, on: c_int) -> c_int {
    guarded(-1, || {
        if device < 0 {
            devices::GUARD_DEFAULT.store(on != 0, std::sync::atomic::Ordering::Relaxed);
            for d in devices::created() {
                d.registry.set_guard_all_streams(on != 0);
            }
        } else {
            devices::get(device)?
                .registry
                .set_guard_all_streams(on != 0);
        }
        Ok(0)
    })
}

/// Adds `stream` to the streams the all-streams guard of `device` waits for (a stream that uses
/// tensors but allocates none). 0, or -1 on failure.
///
/// # Safety
///
/// `stream` is as for [`genesis_malloc`], and must stay alive as long as the allocator.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn genesis_register_stream(device: c_int, stream: *mut c_void) -> c_int {
    let stream = stream_id(stream);
    guarded(-1, || {
        devices::get(device)?.registry.register_stream(stream);
        Ok(0)
    })
}

/// The buffers handed to the caller and not yet freed, by the address of their first byte.
/// [`genesis_free_buffer`] frees only an address found here, so a pointer that is not one of
/// ours (foreign, freed already, or inside a buffer) is refused without being read.
fn live_buffers() -> std::sync::MutexGuard<'static, std::collections::HashMap<usize, Box<[u8]>>> {
    static LIVE: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<usize, Box<[u8]>>>,
    > = std::sync::OnceLock::new();
    LIVE.get_or_init(Default::default)
        .lock()
        // A panic while the map was held left it whole (inserts and removes are single
        // calls): keep using it.
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Copies `data` into a buffer for the caller, NUL-terminated (for strings), registers it as
/// live and returns a pointer to its first byte.
fn export_buffer(data: &[u8]) -> *mut u8 {
    let mut v = Vec::with_capacity(data.len() + 1);
    v.extend_from_slice(data);
    v.push(0);
    let mut buffer = v.into_boxed_slice();
    let ptr = buffer.as_mut_ptr();
    // The heap block does not move when the box moves into the map.
    live_buffers().insert(ptr as usize, buffer);
    ptr
}

/// The statistics of `device` as a JSON object with PyTorch's `torch.cuda.memory_stats()` key
/// names, NUL-terminated; free it with [`genesis_free_buffer`]. NULL on failure.
#[unsafe(no_mangle)]
pub extern "C" fn genesis_memory_stats_json(device: c_int) -> *mut c_char {
    guarded(std::ptr::null_mut(), || {
        let dev = devices::get(device)?;
        let json = dev.with_context(|| dev.registry.stats_json());
        Ok(export_buffer(json.as_bytes()) as *mut c_char)
    })
}

/// The allocator state of `device` as a PyTorch memory-snapshot pickle (what
/// `torch.cuda.memory._snapshot()` returns, pickled); its length goes to `*len`. Free it with
/// [`genesis_free_buffer`]. NULL on failure.
///
/// # Safety
///
/// `len` must be NULL or point to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn genesis_memory_snapshot_pickle(device: c_int, len: *mut usize) -> *mut u8 {
    guarded(std::ptr::null_mut(), || {
        let dev = devices::get(device)?;
        let bytes = dev.with_context(|| dev.registry.snapshot_pickle(device as usize));
        if !len.is_null() {
            // SAFETY: the caller vouches that a non-null `len` points to a writable size_t.
            unsafe { len.write(bytes.len()) };
        }
        Ok(export_buffer(&bytes))
    })
}

/// Frees a buffer returned by [`genesis_memory_stats_json`] or
/// [`genesis_memory_snapshot_pickle`]. NULL is a no-op. Any other pointer (foreign, already
/// freed, or inside a buffer) is refused and left alone: the library looks it up in its
/// registry of live buffers and never reads through it, and [`genesis_last_error`] says so.
///
/// # Safety
///
/// None beyond the C ABI: the pointer is only compared, never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn genesis_free_buffer(buffer: *mut c_void) {
    if buffer.is_null() {
        return;
    }
    guarded((), || {
        let freed = live_buffers().remove(&(buffer as usize));
        match freed {
            Some(b) => {
                drop(b);
                Ok(())
            }
            None => Err(Failure::other(
                "genesis_free_buffer: not a live buffer of this library (left alone)",
            )),
        }
    })
}

/// The devices a call names: `device`, or for `device < 0` every device whose allocator exists
/// (no allocator, and no context, is created for a device the program has not used).
fn devices_named(device: c_int) -> Result<Vec<&'static devices::Device>, Failure> {
    if device < 0 {
        Ok(devices::created())
    } else {
        Ok(vec![devices::get(device)?])
    }
}

/// Gives every cached byte of `device` (every device in use when `device < 0`) back to the
/// driver; blocks in use stay. 0, or -1.
#[unsafe(no_mangle)]
pub extern "C" fn genesis_empty_cache(device: c_int) -> c_int {
    guarded(-1, || {
        for dev in devices_named(device)? {
            dev.with_context(|| dev.registry.empty_cache())?;
        }
        Ok(0)
    })
}

/// Limits the memory `device`'s allocator reserves to `fraction` (in (0, 1]) of the device.
/// 0, or -1.
#[unsafe(no_mangle)]
pub extern "C" fn genesis_set_memory_fraction(fraction: f64, device: c_int) -> c_int {
    guarded(-1, || {
        let dev = devices::get(device)?;
        dev.with_context(|| dev.registry.set_memory_fraction(fraction))?;
        Ok(0)
    })
}

/// Resets every peak statistic of `device` (every device in use when `device < 0`) to its
/// current value. 0, or -1.
#[unsafe(no_mangle)]
pub extern "C" fn genesis_reset_peak_stats(device: c_int) -> c_int {
    guarded(-1, || {
        for dev in devices_named(device)? {
            dev.with_context(|| dev.registry.reset_peak_stats());
        }
        Ok(0)
    })
}

/// The message of the last failed call on this thread, or NULL when none failed. Valid until
/// the next failing call on this thread.
#[unsafe(no_mangle)]
pub extern "C" fn genesis_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|e| {
            e.borrow()
                .1
                .as_ref()
                .map_or(std::ptr::null(), |c| c.as_ptr())
        })
        .unwrap_or(std::ptr::null())
}

/// What the last failed call on this thread was: [`ERROR_NONE`] (0), [`ERROR_OUT_OF_MEMORY`]
/// (1) or [`ERROR_OTHER`] (2).
#[unsafe(no_mangle)]
pub extern "C" fn genesis_last_error_code() -> c_int {
    LAST_ERROR.try_with(|e| e.borrow().0).unwrap_or(ERROR_OTHER)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message() -> String {
        let p = genesis_last_error();
        assert!(!p.is_null());
        // SAFETY: non-null: this thread's NUL-terminated message.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_an_error_value() {
        let r: c_int = guarded(-1, || panic!("boom {}", 42));
        assert_eq!(r, -1);
        assert!(message().contains("boom 42"), "{}", message());
        assert_eq!(genesis_last_error_code(), ERROR_OTHER);
        let p: *mut c_void = guarded(std::ptr::null_mut(), || panic!("static str"));
        assert!(p.is_null());
        assert!(message().contains("static str"));
    }

    #[test]
    fn failures_keep_their_code_and_nul_bytes_do_not_break_messages() {
        let r: c_int = guarded(-1, || {
            Err(Failure {
                code: ERROR_OUT_OF_MEMORY,
                message: "out\0of memory".into(),
            })
        });
        assert_eq!(r, -1);
        assert_eq!(genesis_last_error_code(), ERROR_OUT_OF_MEMORY);
        assert_eq!(message(), "out of memory");
        assert_eq!(guarded(-1, || Ok(3)), 3);
    }

    /// The second page of a fresh two-page mapping whose first page has no access rights: a
    /// pointer whose preceding bytes cannot be read.
    fn guarded_page() -> *mut c_void {
        // SAFETY: `sysconf` has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * page,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        // SAFETY: `base + page` is the second page of the mapping just made (left mapped for
        // the rest of the test process).
        let second = unsafe { base.cast::<u8>().add(page) };
        // SAFETY: the second page lies in the mapping.
        let r = unsafe { libc::mprotect(second.cast(), page, libc::PROT_READ | libc::PROT_WRITE) };
        assert_eq!(r, 0);
        second.cast()
    }

    #[test]
    fn buffers_round_trip() {
        let p = export_buffer(b"{\"a\": 1}");
        // SAFETY: export_buffer NUL-terminates.
        let s = unsafe { std::ffi::CStr::from_ptr(p as *const c_char) };
        assert_eq!(s.to_str().unwrap(), "{\"a\": 1}");
        // SAFETY: from export_buffer, freed once.
        unsafe { genesis_free_buffer(p.cast()) };
        let bin = [0u8, 1, 0, 2];
        let p = export_buffer(&bin);
        // SAFETY: the buffer holds bin.len() bytes at p.
        assert_eq!(unsafe { std::slice::from_raw_parts(p, bin.len()) }, &bin);
        // SAFETY: as above.
        unsafe { genesis_free_buffer(p.cast()) };
        // Pointers that are not live buffers of ours are refused without being read: one inside
        // a buffer, a freed one, and the first byte of a page mapped without access (reading
        // 16 bytes before it would fault).
        let p = export_buffer(&[0u8; 64]);
        // SAFETY: p + 32 lies in the same 64-byte buffer; the call only compares it.
        unsafe { genesis_free_buffer(p.add(32).cast()) };
        assert!(message().contains("not a live buffer"));
        let q = export_buffer(b"x");
        // SAFETY: from export_buffer, freed once; the second call passes a dangling pointer,
        // which is only compared.
        unsafe { genesis_free_buffer(q.cast()) };
        // SAFETY: as above.
        unsafe { genesis_free_buffer(q.cast()) };
        assert!(message().contains("not a live buffer"));
        let page = guarded_page();
        // SAFETY: the call only compares the pointer.
        unsafe { genesis_free_buffer(page) };
        assert!(message().contains("not a live buffer"));
        // SAFETY: from export_buffer, freed once.
        unsafe { genesis_free_buffer(p.cast()) };
    }
}
