//! Driver initialisation and the per-device primary context.

use std::collections::HashMap;
use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::error::{Error, Result};
use crate::sys;

/// Turns a driver return code into a `Result`.
pub(crate) fn check(call: &'static str, code: c_int) -> Result<()> {
    if code == sys::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Driver { call, code })
    }
}

/// Calls `cuInit` once per process; later calls return the first outcome.
pub(crate) fn init() -> Result<()> {
    static INIT: OnceLock<Result<()>> = OnceLock::new();
    INIT.get_or_init(|| {
        // SAFETY: cuInit takes a flags word (must be 0) and has no other preconditions.
        let code = unsafe { sys::cuInit(0) };
        match code {
            sys::CUDA_SUCCESS => Ok(()),
            sys::CUDA_ERROR_NO_DEVICE | sys::CUDA_ERROR_STUB_LIBRARY => Err(Error::NoDevice),
            code => Err(Error::Driver {
                call: "cuInit",
                code,
            }),
        }
    })
    .clone()
}

/// Number of CUDA devices; 0 when there is no driver or no device.
pub fn device_count() -> Result<usize> {
    match init() {
        Ok(()) => {}
        Err(Error::NoDevice) => return Ok(0),
        Err(e) => return Err(e),
    }
    let mut n: c_int = 0;
    // SAFETY: the driver is initialised and `n` is a valid out-pointer.
    check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut n) })?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// The UUID of device `ordinal` (see [`Context::uuid`]), without retaining its context.
pub fn device_uuid(ordinal: usize) -> Result<[u8; 16]> {
    let count = device_count()?;
    if ordinal >= count {
        return Err(Error::InvalidDevice { ordinal, count });
    }
    let mut device: sys::CUdevice = 0;
    // SAFETY: the driver is initialised (device_count succeeded); valid out-pointer.
    check("cuDeviceGet", unsafe {
        sys::cuDeviceGet(&mut device, ordinal as c_int)
    })?;
    let mut uuid = sys::Uuid::default();
    // SAFETY: valid device handle and out-pointer.
    check("cuDeviceGetUuid", unsafe {
        sys::cuDeviceGetUuid(&mut uuid, device)
    })?;
    Ok(uuid.bytes)
}

/// Whether at least one CUDA device can be used.
pub fn is_available() -> bool {
    matches!(device_count(), Ok(n) if n > 0)
}

/// The CUDA driver version as `(major, minor)`, e.g. `(13, 0)`.
pub fn driver_version() -> Result<(u32, u32)> {
    init()?;
    let mut v: c_int = 0;
    // SAFETY: the driver is initialised and `v` is a valid out-pointer.
    check("cuDriverGetVersion", unsafe {
        sys::cuDriverGetVersion(&mut v)
    })?;
    let v = u32::try_from(v).unwrap_or(0);
    Ok((v / 1000, (v % 1000) / 10))
}

/// Errors recorded by `Drop` implementations whose context was already gone, surfaced by the next
/// [`Context::get`].
static ORPHAN_ERRORS: Mutex<Vec<Error>> = Mutex::new(Vec::new());

fn registry() -> &'static Mutex<Vec<Weak<Context>>> {
    static REG: Mutex<Vec<Weak<Context>>> = Mutex::new(Vec::new());
    &REG
}

/// The primary context of one device, retained once and shared through an `Arc`.
///
/// Every buffer, stream, event and kernel handle owns an `Arc<Context>`, so the context is
/// released only after the last of them is gone: drop order is correct by construction. Kernel
/// modules are loaded into the context once and unloaded when it is dropped.
pub struct Context {
    ordinal: usize,
    device: sys::CUdevice,
    raw: sys::CUcontext,
    name: String,
    capability: (u32, u32),
    multiprocessors: u32,
    total_memory: usize,
    uuid: [u8; 16],
    posix_fd_handles: bool,
    modules: Mutex<HashMap<&'static str, sys::CUmodule>>,
    functions: Mutex<HashMap<(&'static str, &'static str), sys::CUfunction>>,
    /// The dynamic shared memory each function (by address) is allowed, once raised
    /// ([`crate::Kernel::set_max_dynamic_shared_bytes`]).
    dynamic_shared: Mutex<HashMap<usize, u32>>,
    has_pending: AtomicBool,
    pending: Mutex<Vec<Error>>,
    /// Whether `batch` holds records (see `crate::batch`).
    pub(crate) has_batch: AtomicBool,
    pub(crate) batching: AtomicBool,
    pub(crate) batch: Mutex<crate::batch::Batch>,
    /// Records pushed and batch launches made, for [`Context::batch_counts`].
    pub(crate) batch_records: AtomicU64,
    pub(crate) batch_launches: AtomicU64,
}

// SAFETY: a CUcontext handle may be used from any thread (the driver API is thread-safe and
// `bind` makes it current on the calling thread before use); the mutable state is behind mutexes
// and atomics.
unsafe impl Send for Context {}
// SAFETY: as above; shared access only reads immutable fields or goes through the mutexes.
unsafe impl Sync for Context {}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("ordinal", &self.ordinal)
            .field("name", &self.name)
            .field("capability", &self.capability)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// The primary context of device `ordinal`, retained on first use and shared afterwards.
    pub fn get(ordinal: usize) -> Result<Arc<Context>> {
        if let Some(e) = ORPHAN_ERRORS.lock().map(|mut v| v.pop()).unwrap_or(None) {
            return Err(Error::Deferred(Box::new(e)));
        }
        let count = device_count()?;
        if count == 0 {
            return Err(Error::NoDevice);
        }
        if ordinal >= count {
            return Err(Error::InvalidDevice { ordinal, count });
        }
        let mut reg = registry().lock().unwrap_or_else(|p| p.into_inner());
        if reg.len() < count {
            reg.resize_with(count, Weak::new);
        }
        if let Some(ctx) = reg[ordinal].upgrade() {
            return Ok(ctx);
        }
        let ctx = Arc::new(Self::retain(ordinal)?);
        reg[ordinal] = Arc::downgrade(&ctx);
        tracing::debug!(ordinal, name = %ctx.name, "retained CUDA primary context");
        Ok(ctx)
    }

    fn retain(ordinal: usize) -> Result<Context> {
        let ord =
            c_int::try_from(ordinal).map_err(|_| Error::InvalidDevice { ordinal, count: 0 })?;
        let mut device: sys::CUdevice = 0;
        // SAFETY: the driver is initialised (device_count succeeded) and the out-pointer is valid.
        check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut device, ord) })?;
        let attr = |a: c_int, call| -> Result<u32> {
            let mut v: c_int = 0;
            // SAFETY: `device` is a valid device handle and `v` a valid out-pointer.
            check(call, unsafe {
                sys::cuDeviceGetAttribute(&mut v, a, device)
            })?;
            Ok(u32::try_from(v).unwrap_or(0))
        };
        let major = attr(sys::ATTR_COMPUTE_CAPABILITY_MAJOR, "cuDeviceGetAttribute")?;
        let minor = attr(sys::ATTR_COMPUTE_CAPABILITY_MINOR, "cuDeviceGetAttribute")?;
        let multiprocessors = attr(sys::ATTR_MULTIPROCESSOR_COUNT, "cuDeviceGetAttribute")?;
        let mut buf = [0 as c_char; 256];
        // SAFETY: `buf` has room for 256 bytes, the length we pass.
        check("cuDeviceGetName", unsafe {
            sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, device)
        })?;
        // SAFETY: the driver wrote a NUL-terminated string into `buf` (it was zeroed, and the
        // driver truncates to the length given).
        let name = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let mut total_memory = 0usize;
        // SAFETY: valid device handle and out-pointer.
        check("cuDeviceTotalMem", unsafe {
            sys::cuDeviceTotalMem(&mut total_memory, device)
        })?;
        let mut uuid = sys::Uuid::default();
        // SAFETY: valid device handle and out-pointer.
        check("cuDeviceGetUuid", unsafe {
            sys::cuDeviceGetUuid(&mut uuid, device)
        })?;
        // A driver that does not know the attribute cannot export handles either.
        let posix_fd_handles = attr(
            sys::ATTR_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
            "cuDeviceGetAttribute",
        )
        .is_ok_and(|v| v != 0);
        let mut raw: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: valid device handle and out-pointer; the matching release is in Drop.
        check("cuDevicePrimaryCtxRetain", unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut raw, device)
        })?;
        Ok(Context {
            ordinal,
            device,
            raw,
            name,
            capability: (major, minor),
            multiprocessors,
            total_memory,
            uuid: uuid.bytes,
            posix_fd_handles,
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
            dynamic_shared: Mutex::new(HashMap::new()),
            has_pending: AtomicBool::new(false),
            pending: Mutex::new(Vec::new()),
            has_batch: AtomicBool::new(false),
            batching: AtomicBool::new(std::env::var_os("GENESIS_NO_BATCH").is_none()),
            batch: Mutex::new(crate::batch::Batch::new()),
            batch_records: AtomicU64::new(0),
            batch_launches: AtomicU64::new(0),
        })
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The device's name, e.g. `"NVIDIA H200"`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Compute capability `(major, minor)`.
    pub fn compute_capability(&self) -> (u32, u32) {
        self.capability
    }

    /// The architecture name, e.g. `"sm_90"`.
    pub fn arch(&self) -> String {
        format!("sm_{}{}", self.capability.0, self.capability.1)
    }

    /// Number of streaming multiprocessors.
    pub fn multiprocessors(&self) -> u32 {
        self.multiprocessors
    }

    /// Total device memory in bytes.
    pub fn total_memory(&self) -> usize {
        self.total_memory
    }

    /// The device's UUID: the same device has the same UUID in every process, whatever its
    /// ordinal there (`CUDA_VISIBLE_DEVICES` renumbers devices).
    pub fn uuid(&self) -> [u8; 16] {
        self.uuid
    }

    /// Whether physical memory of this device can be created exportable as a POSIX file
    /// descriptor (`CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED`).
    pub fn supports_posix_fd_handles(&self) -> bool {
        self.posix_fd_handles
    }

    /// Makes this context current on the calling thread, after launching the pending batch of
    /// small operations (see [`crate::batch`]) and surfacing any error a `Drop` left.
    pub fn bind(&self) -> Result<()> {
        self.flush_batch()?;
        self.check_pending()?;
        // SAFETY: `raw` is a retained primary context, alive as long as `self`.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(self.raw) })
    }

    /// Waits for all work on the device to finish.
    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        // SAFETY: the context is current on this thread.
        check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
    }

    /// `(free, total)` device memory in bytes, as the driver reports it.
    pub fn mem_info(&self) -> Result<(usize, usize)> {
        self.bind()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: the context is current and both out-pointers are valid.
        check("cuMemGetInfo", unsafe {
            sys::cuMemGetInfo(&mut free, &mut total)
        })?;
        Ok((free, total))
    }

    /// Keeps an error that a `Drop` could not return; the next fallible call returns it.
    pub fn record_error(&self, error: Error) {
        tracing::error!(ordinal = self.ordinal, %error, "CUDA error in a release, deferred");
        let mut p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        p.push(error);
        self.has_pending.store(true, Ordering::Release);
    }

    /// Returns (and clears) the oldest error recorded by a `Drop`.
    pub fn check_pending(&self) -> Result<()> {
        if !self.has_pending.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let first = if p.is_empty() {
            None
        } else {
            Some(p.remove(0))
        };
        if p.is_empty() {
            self.has_pending.store(false, Ordering::Release);
        }
        match first {
            Some(e) => Err(Error::Deferred(Box::new(e))),
            None => Ok(()),
        }
    }

    /// Lets kernels and copies of this context reach `peer`'s memory directly (NVLink or
    /// PCIe peer-to-peer). Returns `false` when the devices cannot (copies between them are
    /// then staged by the driver); enabling twice is fine.
    pub fn enable_peer_access(&self, peer: &Context) -> Result<bool> {
        if self.ordinal == peer.ordinal {
            return Ok(true);
        }
        let mut can: c_int = 0;
        // SAFETY: both device handles are valid; `can` is a valid out-pointer.
        check("cuDeviceCanAccessPeer", unsafe {
            sys::cuDeviceCanAccessPeer(&mut can, self.device, peer.device)
        })?;
        if can == 0 {
            return Ok(false);
        }
        self.bind()?;
        // SAFETY: `peer.raw` is a retained context; flags must be 0.
        match unsafe { sys::cuCtxEnablePeerAccess(peer.raw, 0) } {
            sys::CUDA_SUCCESS | 704 => Ok(true), // 704: already enabled
            code => Err(Error::Driver {
                call: "cuCtxEnablePeerAccess",
                code,
            }),
        }
    }

    pub(crate) fn raw(&self) -> sys::CUcontext {
        self.raw
    }

    /// The context handle as an opaque integer, comparable with [`Context::thread_current`].
    pub fn handle(&self) -> usize {
        self.raw as usize
    }

    /// The calling thread's current driver context as an opaque integer (0 when none), whoever
    /// made it current (Genesis, the CUDA runtime, another library).
    ///
    /// [`Context::bind`] changes the thread's current context; code called by another library on
    /// that library's threads (a C ABI allocator called by PyTorch) saves the context with this
    /// and puts it back with [`Context::set_thread_current`], so that the caller's notion of the
    /// current device does not change under it.
    pub fn thread_current() -> Result<usize> {
        init()?;
        let mut raw: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: the driver is initialised and `raw` is a valid out-pointer.
        check("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut raw) })?;
        Ok(raw as usize)
    }

    /// Makes `handle` (a value [`Context::thread_current`] returned) the calling thread's current
    /// context again. 0 leaves the current context as it is (a thread with none keeps the one
    /// it has now: unbinding would only make the next caller bind again).
    ///
    /// # Safety
    ///
    /// `handle` must be 0 or a context that is still alive (for a primary context: still
    /// retained by someone, as the CUDA runtime retains the primary contexts it uses).
    pub unsafe fn set_thread_current(handle: usize) -> Result<()> {
        if handle == 0 {
            return Ok(());
        }
        // SAFETY: the caller vouches that `handle` is a live context.
        check("cuCtxSetCurrent", unsafe {
            sys::cuCtxSetCurrent(handle as sys::CUcontext)
        })
    }

    /// The loaded module for `image`, loading it on first use.
    ///
    /// `targets` lists what the image holds (`sm_80`, ..., `compute_80`); when the device's
    /// architecture is neither among the machine-code targets nor reachable by JIT from a PTX
    /// target, the error says so and how to rebuild, before the driver is asked.
    pub(crate) fn module(
        &self,
        image_name: &'static str,
        image: &'static [u8],
        targets: &[&str],
    ) -> Result<sys::CUmodule> {
        let mut modules = self.modules.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = modules.get(image_name) {
            return Ok(*m);
        }
        let arch = self.arch();
        let no_binary = || Error::NoBinaryForArch {
            image: image_name,
            arch: arch.clone(),
            targets: targets.join(", "),
        };
        if !crate::module::image_supports(targets, self.capability) {
            return Err(no_binary());
        }
        self.bind()?;
        let mut m: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: the context is current; `image` is a complete fatbin embedded in the binary
        // (static lifetime), which is what cuModuleLoadData expects.
        let code = unsafe { sys::cuModuleLoadData(&mut m, image.as_ptr().cast()) };
        match code {
            sys::CUDA_SUCCESS => {}
            sys::CUDA_ERROR_NO_BINARY_FOR_GPU
            | sys::CUDA_ERROR_INVALID_PTX
            | sys::CUDA_ERROR_UNSUPPORTED_PTX_VERSION => return Err(no_binary()),
            code => {
                return Err(Error::Driver {
                    call: "cuModuleLoadData",
                    code,
                });
            }
        }
        modules.insert(image_name, m);
        Ok(m)
    }

    /// The dynamic shared memory function `f` was allowed (0 when never raised).
    pub(crate) fn dynamic_shared(&self, f: sys::CUfunction) -> u32 {
        let map = self
            .dynamic_shared
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        map.get(&(f as usize)).copied().unwrap_or(0)
    }

    /// Records that function `f` is allowed `bytes` of dynamic shared memory.
    pub(crate) fn set_dynamic_shared(&self, f: sys::CUfunction, bytes: u32) {
        let mut map = self
            .dynamic_shared
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        map.insert(f as usize, bytes);
    }

    /// The function `name` of `image`, loading the image on first use.
    pub(crate) fn function(
        &self,
        image: &crate::KernelImage,
        name: &'static str,
    ) -> Result<sys::CUfunction> {
        let key = (image.name, name);
        if let Some(f) = self
            .functions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(*f);
        }
        let module = self.module(image.name, image.image, image.targets)?;
        let cname = std::ffi::CString::new(name).map_err(|_| Error::InvalidArgument {
            op: "Kernel::get",
            reason: format!("kernel name {name:?} contains a NUL byte"),
        })?;
        self.bind()?;
        let mut f: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: `module` is loaded in this (current) context and `cname` is NUL-terminated.
        check("cuModuleGetFunction", unsafe {
            sys::cuModuleGetFunction(&mut f, module, cname.as_ptr())
        })?;
        self.functions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, f);
        Ok(f)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        let mut errors = Vec::new();
        // Records still pending reference memory of this context: queue them before the
        // modules go (the release of the primary context below waits for them).
        if let Err(e) = self.flush_batch() {
            errors.push(e);
        }
        // SAFETY: `raw` is still retained here; making it current lets us unload the modules.
        let code = unsafe { sys::cuCtxSetCurrent(self.raw) };
        if let Err(e) = check("cuCtxSetCurrent", code) {
            errors.push(e);
        }
        let modules = std::mem::take(self.modules.get_mut().unwrap_or_else(|p| p.into_inner()));
        for (_, m) in modules {
            // SAFETY: every module in the map was loaded into this context and is unloaded once.
            if let Err(e) = check("cuModuleUnload", unsafe { sys::cuModuleUnload(m) }) {
                errors.push(e);
            }
        }
        // SAFETY: balances the single cuDevicePrimaryCtxRetain in `retain`.
        let code = unsafe { sys::cuDevicePrimaryCtxRelease(self.device) };
        if let Err(e) = check("cuDevicePrimaryCtxRelease", code) {
            errors.push(e);
        }
        let pending = std::mem::take(self.pending.get_mut().unwrap_or_else(|p| p.into_inner()));
        errors.extend(pending);
        if !errors.is_empty() {
            for e in &errors {
                tracing::error!(ordinal = self.ordinal, error = %e, "error while releasing a CUDA context");
            }
            let mut orphans = ORPHAN_ERRORS.lock().unwrap_or_else(|p| p.into_inner());
            orphans.extend(errors);
        }
    }
}
