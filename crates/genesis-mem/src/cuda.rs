//! CUDA backends: device memory (virtual-memory arena or plain `cuMemAlloc` segments) and
//! pinned host memory (`cuMemHostAlloc`). The driver calls themselves live in
//! `genesis_cuda::raw`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use genesis_cuda::{Context, Event, Stream, raw};

use crate::backend::{Backend, BackendError, CallCounts, EventId, PhysHandle, StreamId};
use crate::{CachingAllocator, Config, Error};

fn backend_error(call: &'static str, e: genesis_cuda::Error) -> BackendError {
    if e.is_out_of_memory() {
        BackendError::OutOfMemory
    } else {
        BackendError::Failed {
            call,
            message: e.to_string(),
        }
    }
}

/// Events recorded for the allocator, reused from a pool.
#[derive(Debug, Default)]
struct EventPool {
    live: HashMap<EventId, Event>,
    spare: Vec<Event>,
    next: EventId,
}

impl EventPool {
    fn record(&mut self, ctx: &Arc<Context>, stream: StreamId) -> Result<EventId, BackendError> {
        let event = match self.spare.pop() {
            Some(e) => e,
            None => Event::new(ctx, false).map_err(|e| backend_error("cuEventCreate", e))?,
        };
        // SAFETY: stream ids handed to the allocator are streams of this context (the
        // allocator's contract, see `CudaBackend`), alive while work is queued on them.
        let s = unsafe { Stream::borrowed(ctx, stream) };
        event
            .record(&s)
            .map_err(|e| backend_error("cuEventRecord", e))?;
        self.next += 1;
        self.live.insert(self.next, event);
        Ok(self.next)
    }

    fn get(&self, id: EventId) -> Result<&Event, BackendError> {
        self.live.get(&id).ok_or(BackendError::Failed {
            call: "event",
            message: "unknown event".into(),
        })
    }

    fn destroy(&mut self, id: EventId) {
        if let Some(e) = self.live.remove(&id) {
            self.spare.push(e);
        }
    }
}

/// The stream and event methods both CUDA backends share (they differ only in memory calls).
macro_rules! stream_and_event_methods {
    () => {
        fn synchronize(&mut self, stream: StreamId) -> Result<(), BackendError> {
            // SAFETY: stream ids given to this allocator are streams of this context.
            let s = unsafe { Stream::borrowed(&self.ctx, stream) };
            s.synchronize()
                .map_err(|e| backend_error("cuStreamSynchronize", e))
        }

        fn record_event(&mut self, stream: StreamId) -> Result<EventId, BackendError> {
            self.events.record(&self.ctx, stream)
        }

        fn event_complete(&mut self, event: EventId) -> Result<bool, BackendError> {
            self.events
                .get(event)?
                .is_complete()
                .map_err(|e| backend_error("cuEventQuery", e))
        }

        fn wait_event(&mut self, event: EventId) -> Result<(), BackendError> {
            self.events
                .get(event)?
                .synchronize()
                .map_err(|e| backend_error("cuEventSynchronize", e))
        }

        fn destroy_event(&mut self, event: EventId) {
            self.events.destroy(event);
        }

        fn counts(&self) -> CallCounts {
            self.counts
        }
    };
}

/// Device memory of one GPU through the CUDA driver.
///
/// Stream ids given to an allocator over this backend are raw `CUstream` handles as integers:
/// `Stream::id()` of streams of the same context, 0 for the legacy stream, or streams created
/// outside Genesis on the same context — a CUDA runtime `cudaStream_t` is the same handle, so a
/// caller such as PyTorch (through `genesis-mem-capi`) passes its streams as they are, and
/// `cudaStreamLegacy` / `cudaStreamPerThread` (1 and 2) are the driver's special handles. The
/// backend synchronises and records events on the stream the id names (`Stream::borrowed`,
/// never destroyed here), so a stream must stay alive as long as the allocator holds memory
/// allocated on it or recorded for it.
#[derive(Debug)]
pub struct CudaBackend {
    ctx: Arc<Context>,
    /// Devices that can reach this one peer-to-peer: VMM mappings grant them access too.
    peers: Vec<usize>,
    vmm: bool,
    /// Whether new physical handles are created exportable as POSIX file descriptors.
    exportable: bool,
    granularity: usize,
    counts: CallCounts,
    events: EventPool,
}

impl CudaBackend {
    /// A backend for `ctx`'s device; `vmm` selects the virtual-memory arena (when the device
    /// supports it) over plain segments.
    pub fn new(ctx: &Arc<Context>, vmm: bool) -> Result<CudaBackend, genesis_cuda::Error> {
        let (granularity, vmm) = match raw::vmm_granularity(ctx) {
            Ok(g) if vmm => (g.max(2 << 20), true),
            _ => (2 << 20, false),
        };
        let count = genesis_cuda::device_count()?;
        let me = ctx.ordinal();
        let peers = (0..count)
            .filter(|&p| p != me && raw::can_access_peer(me, p).unwrap_or(false))
            .collect();
        Ok(CudaBackend {
            ctx: Arc::clone(ctx),
            peers,
            vmm,
            exportable: vmm && ctx.supports_posix_fd_handles(),
            granularity,
            counts: CallCounts::default(),
            events: EventPool::default(),
        })
    }

    /// The context.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Whether the physical handles this backend creates can be exported to other processes
    /// as POSIX file descriptors (`genesis_cuda::raw::export_physical_fd`). They are when the
    /// device supports it, unless the driver refused such a handle once (a container may
    /// forbid them): from then on handles are created plain, and this is `false`.
    pub fn exportable(&self) -> bool {
        self.exportable
    }
}

impl Backend for CudaBackend {
    fn granularity(&self) -> usize {
        self.granularity
    }

    fn supports_vmm(&self) -> bool {
        self.vmm
    }

    fn mem_info(&mut self) -> Result<(usize, usize), BackendError> {
        self.ctx
            .mem_info()
            .map_err(|e| backend_error("cuMemGetInfo", e))
    }

    fn alloc(&mut self, bytes: usize) -> Result<u64, BackendError> {
        self.counts.alloc += 1;
        timed(&mut self.counts.nanos, "cuMemAlloc", || {
            raw::mem_alloc(&self.ctx, bytes)
        })
    }

    fn free(&mut self, addr: u64, _bytes: usize) -> Result<(), BackendError> {
        self.counts.free += 1;
        // SAFETY: the allocator frees only segments it allocated, once, when no block in them
        // is in use and no pending event refers to them.
        timed(&mut self.counts.nanos, "cuMemFree", || unsafe {
            raw::mem_free(&self.ctx, addr)
        })
    }

    fn reserve(&mut self, bytes: usize) -> Result<u64, BackendError> {
        self.counts.reserve += 1;
        timed(&mut self.counts.nanos, "cuMemAddressReserve", || {
            raw::reserve_address_space(&self.ctx, bytes, self.granularity)
        })
    }

    fn unreserve(&mut self, va: u64, bytes: usize) -> Result<(), BackendError> {
        self.counts.unreserve += 1;
        // SAFETY: the allocator unreserves only its own empty reservations.
        timed(&mut self.counts.nanos, "cuMemAddressFree", || unsafe {
            raw::free_address_space(&self.ctx, va, bytes)
        })
    }

    fn create(&mut self, bytes: usize) -> Result<PhysHandle, BackendError> {
        self.counts.alloc += 1;
        if self.exportable {
            let started = Instant::now();
            let r = raw::create_physical_exportable(&self.ctx, bytes);
            self.counts.nanos = self
                .counts
                .nanos
                .saturating_add(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX));
            match r {
                Ok(h) => return Ok(h),
                Err(e) if e.is_out_of_memory() => return Err(backend_error("cuMemCreate", e)),
                Err(e) => {
                    tracing::info!(error = %e, "exportable physical memory refused; creating plain handles");
                    self.exportable = false;
                }
            }
        }
        timed(&mut self.counts.nanos, "cuMemCreate", || {
            raw::create_physical(&self.ctx, bytes)
        })
    }

    fn release(&mut self, handle: PhysHandle, _bytes: usize) -> Result<(), BackendError> {
        self.counts.free += 1;
        // SAFETY: the allocator releases each handle it created once, after unmapping it
        // wherever it is mapped.
        timed(&mut self.counts.nanos, "cuMemRelease", || unsafe {
            raw::release_physical(&self.ctx, handle)
        })
    }

    fn map(&mut self, va: u64, bytes: usize, handle: PhysHandle) -> Result<(), BackendError> {
        self.counts.map += 1;
        // SAFETY: the allocator maps a live handle of exactly `bytes` at addresses of one of
        // its reservations where nothing is mapped (the end of a region, or a hole whose
        // stale mappings it unmapped first).
        timed(&mut self.counts.nanos, "cuMemMap", || unsafe {
            raw::map(&self.ctx, va, bytes, handle)
        })?;
        self.counts.set_access += 1;
        // SAFETY: the range was just mapped.
        let granted = timed(&mut self.counts.nanos, "cuMemSetAccess", || unsafe {
            raw::set_access(&self.ctx, va, bytes, &self.peers)
        });
        if granted.is_err() {
            // SAFETY: undo the mapping made above; nothing uses it yet.
            let _ = unsafe { raw::unmap(&self.ctx, va, bytes) };
            self.counts.unmap += 1;
        }
        granted
    }

    fn unmap(&mut self, va: u64, bytes: usize) -> Result<(), BackendError> {
        self.counts.unmap += 1;
        // SAFETY: the allocator unmaps one whole mapping that lies under free memory or a
        // stale range (no block in it allocated or pending) after synchronising the stream of
        // the region it lies in, so no queued work uses it.
        timed(&mut self.counts.nanos, "cuMemUnmap", || unsafe {
            raw::unmap(&self.ctx, va, bytes)
        })
    }

    stream_and_event_methods!();
}

/// Page-locked host memory (`cuMemHostAlloc`), for fast asynchronous transfers.
///
/// Addresses are host pointers. Served as plain segments; the pool's limit is host memory.
#[derive(Debug)]
pub struct PinnedHostBackend {
    ctx: Arc<Context>,
    counts: CallCounts,
    events: EventPool,
    total: usize,
}

impl PinnedHostBackend {
    /// A pinned-host backend registered with `ctx`, allowing up to `limit` bytes.
    pub fn new(ctx: &Arc<Context>, limit: usize) -> PinnedHostBackend {
        PinnedHostBackend {
            ctx: Arc::clone(ctx),
            counts: CallCounts::default(),
            events: EventPool::default(),
            total: limit,
        }
    }
}

/// Runs the driver call `name`, adding its wall time to `nanos` ([`CallCounts::nanos`]), its
/// error as a [`BackendError`].
fn timed<R>(
    nanos: &mut u64,
    name: &'static str,
    call: impl FnOnce() -> Result<R, genesis_cuda::Error>,
) -> Result<R, BackendError> {
    let started = Instant::now();
    let r = call();
    *nanos = nanos.saturating_add(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX));
    r.map_err(|e| backend_error(name, e))
}

fn unsupported(call: &'static str) -> BackendError {
    BackendError::Failed {
        call,
        message: "not supported for pinned host memory".into(),
    }
}

impl Backend for PinnedHostBackend {
    fn granularity(&self) -> usize {
        2 << 20
    }

    fn supports_vmm(&self) -> bool {
        false
    }

    fn mem_info(&mut self) -> Result<(usize, usize), BackendError> {
        Ok((self.total, self.total))
    }

    fn alloc(&mut self, bytes: usize) -> Result<u64, BackendError> {
        self.counts.alloc += 1;
        raw::host_alloc_pinned(&self.ctx, bytes)
            .map(|p| p as u64)
            .map_err(|e| backend_error("cuMemHostAlloc", e))
    }

    fn free(&mut self, addr: u64, _bytes: usize) -> Result<(), BackendError> {
        self.counts.free += 1;
        // SAFETY: the allocator frees each segment it allocated once, when nothing in it is in
        // use.
        unsafe { raw::host_free_pinned(&self.ctx, addr as usize as *mut u8) }
            .map_err(|e| backend_error("cuMemFreeHost", e))
    }

    fn reserve(&mut self, _bytes: usize) -> Result<u64, BackendError> {
        Err(unsupported("reserve"))
    }

    fn unreserve(&mut self, _va: u64, _bytes: usize) -> Result<(), BackendError> {
        Err(unsupported("unreserve"))
    }

    fn create(&mut self, _bytes: usize) -> Result<PhysHandle, BackendError> {
        Err(unsupported("create"))
    }

    fn release(&mut self, _handle: PhysHandle, _bytes: usize) -> Result<(), BackendError> {
        Err(unsupported("release"))
    }

    fn map(&mut self, _va: u64, _bytes: usize, _handle: PhysHandle) -> Result<(), BackendError> {
        Err(unsupported("map"))
    }

    fn unmap(&mut self, _va: u64, _bytes: usize) -> Result<(), BackendError> {
        Err(unsupported("unmap"))
    }

    stream_and_event_methods!();
}

/// A caching allocator over device `ctx` (VMM arena when supported).
pub fn device_allocator(
    ctx: &Arc<Context>,
    config: Config,
) -> Result<CachingAllocator<CudaBackend>, Error> {
    let backend = CudaBackend::new(ctx, config.use_vmm)
        .map_err(|e| Error::Backend(backend_error("CudaBackend::new", e)))?;
    let total = ctx.total_memory();
    let config = Config {
        region_bytes: config
            .region_bytes
            .min(total.saturating_mul(4))
            .max(1 << 30),
        ..config
    };
    CachingAllocator::new(backend, config)
}

/// A caching pool of pinned host memory registered with `ctx`, up to `limit` bytes.
pub fn pinned_allocator(
    ctx: &Arc<Context>,
    limit: usize,
) -> Result<CachingAllocator<PinnedHostBackend>, Error> {
    CachingAllocator::new(
        PinnedHostBackend::new(ctx, limit),
        Config {
            use_vmm: false,
            ..Config::default()
        },
    )
}
