//! CUDA memory for storages: one caching allocator (`genesis-mem`) per device, and a pool of
//! pinned host memory.

use std::sync::{Arc, OnceLock};

use genesis_cuda::{Context, DeviceSpan, DeviceSpanMut};
use genesis_mem::cuda::{CudaBackend, PinnedHostBackend, device_allocator, pinned_allocator};
use genesis_mem::{Allocation, CachingAllocator, Config};

use crate::{Error, Result};

mod index;
#[cfg(unix)]
mod ipc;
mod ops;
mod transfer;

pub(crate) use genesis_cuda::Event;
#[cfg(unix)]
pub use ipc::{CudaExport, CudaImport};
pub(crate) use transfer::batched_copy;
pub use transfer::release_completed_copies;

/// The caching allocator of one device, with its context.
#[derive(Debug)]
pub struct DevicePool {
    ctx: Arc<Context>,
    allocator: CachingAllocator<CudaBackend>,
}

impl DevicePool {
    /// The device's context.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The device's caching allocator (statistics, snapshots, limits).
    pub fn allocator(&self) -> &CachingAllocator<CudaBackend> {
        &self.allocator
    }
}

fn pools() -> &'static Vec<OnceLock<DevicePool>> {
    static POOLS: OnceLock<Vec<OnceLock<DevicePool>>> = OnceLock::new();
    POOLS.get_or_init(|| {
        let n = genesis_cuda::device_count().unwrap_or(0);
        (0..n).map(|_| OnceLock::new()).collect()
    })
}

/// The caching allocator of device `ordinal`, created on first use and kept for the process.
/// It maps virtual memory where the device supports it, plain `cuMemAlloc` segments when
/// `GENESIS_NO_VMM` is set (to anything but `0`) or the device has no virtual memory.
pub fn device_pool(ordinal: usize) -> Result<&'static DevicePool> {
    let pools = pools();
    let missing = if pools.is_empty() {
        genesis_cuda::Error::NoDevice
    } else {
        genesis_cuda::Error::InvalidDevice {
            ordinal,
            count: pools.len(),
        }
    };
    let Some(slot) = pools.get(ordinal) else {
        return Err(Error::Cuda(missing));
    };
    if let Some(p) = slot.get() {
        return Ok(p);
    }
    let ctx = Context::get(ordinal)?;
    let config = Config {
        use_vmm: std::env::var_os("GENESIS_NO_VMM").is_none_or(|v| v.is_empty() || v == "0"),
        ..Config::default()
    };
    let allocator = device_allocator(&ctx, config)?;
    // Another thread may have won the race: its pool is kept and ours dropped (which gives its
    // empty cache back).
    Ok(slot.get_or_init(|| DevicePool { ctx, allocator }))
}

/// The pinned host memory pool (registered with device 0), created on first use. Its limit is
/// the host's memory ([`crate::cpu::host_memory_limit`]): the driver may report success for a
/// page-locked request far beyond it (seen on a host that overcommits memory) and hand back
/// less than was asked, so such requests never reach it.
pub fn pinned_pool() -> Result<&'static CachingAllocator<PinnedHostBackend>> {
    static PINNED: OnceLock<CachingAllocator<PinnedHostBackend>> = OnceLock::new();
    if let Some(p) = PINNED.get() {
        return Ok(p);
    }
    let ctx = Context::get(0)?;
    let limit = crate::cpu::host_memory_limit().unwrap_or(usize::MAX / 2);
    let pool = pinned_allocator(&ctx, limit.min(usize::MAX / 2))?;
    Ok(PINNED.get_or_init(|| pool))
}

impl crate::Storage {
    /// The device memory of a CUDA storage as elements of `T` (its dtype's type, or `u8` for
    /// its bytes), for launching kernels on it; an error for other kinds of storage.
    ///
    /// A span is a device address and a length, borrowed from the storage (which keeps the
    /// memory allocated); device memory is written only by work queued in stream order, so
    /// the span may be used while tensors that share the storage write it: the writes are
    /// ordered with kernels launched on the span by their streams.
    ///
    /// Handing the address out drops [`Storage::known_bounds`](crate::Storage::known_bounds)
    /// for good: a kernel of the caller's may write through it.
    pub fn cuda_span<T: Copy>(&self) -> Result<DeviceSpan<'_, T>> {
        self.mark_addressed();
        let n = self.nbytes() / size_of::<T>().max(1);
        if n * size_of::<T>() != self.nbytes() {
            return Err(Error::LengthMismatch {
                op: "cuda_span",
                lhs: self.nbytes(),
                rhs: size_of::<T>(),
            });
        }
        self.cuda_span_of("cuda_span", n)
    }

    /// `len` elements of `T` from the start of a CUDA storage's memory (read under the lock;
    /// the span itself is address data that borrows the storage).
    pub(crate) fn cuda_span_of<T>(
        &self,
        op: &'static str,
        len: usize,
    ) -> Result<DeviceSpan<'_, T>> {
        match &*self.read(op)? {
            crate::storage::Inner::Cuda(m) => {
                let span = m.span::<T>(len)?;
                // SAFETY: the span's memory belongs to this storage, which the returned span
                // borrows, so it stays allocated for the span's lifetime; the lock only guards
                // the `CudaMem` handle read here.
                Ok(unsafe { DeviceSpan::from_raw(span.addr(), span.len()) })
            }
            _ => Err(Error::NotOnDevice {
                op,
                device: self.device(),
            }),
        }
    }
}

/// One past the last byte of `rows` rows of `width` bytes, `pitch` apart from byte `at`.
fn rows_end(at: usize, pitch: usize, width: usize, rows: usize) -> Result<usize> {
    if rows == 0 || width == 0 {
        return Ok(at);
    }
    let end = (rows - 1)
        .checked_mul(pitch)
        .and_then(|b| b.checked_add(at)?.checked_add(width))
        .filter(|_| pitch >= width);
    end.ok_or(Error::LengthMismatch {
        op: "copy_2d",
        lhs: pitch,
        rhs: width,
    })
}

/// The host bytes of `rows` rows of `width` bytes, `pitch` apart from byte `at` of `host`.
fn host_rows(host: &[u8], at: usize, pitch: usize, width: usize, rows: usize) -> Result<&[u8]> {
    let end = rows_end(at, pitch, width, rows)?;
    host.get(at..end).ok_or(Error::LengthMismatch {
        op: "copy_2d",
        lhs: end,
        rhs: host.len(),
    })
}

/// Device memory from a device's pool, given back on drop, or mapped from another process.
#[derive(Debug)]
pub(crate) struct CudaMem {
    alloc: Option<Allocation>,
    pool: &'static DevicePool,
    /// Memory another process exported ([`crate::Storage::import_cuda`]), unmapped on drop;
    /// `alloc` is then `None`.
    #[cfg(unix)]
    imported: Option<Box<ipc::Imported>>,
}

impl CudaMem {
    /// `nbytes` of uninitialised memory on device `ordinal`, stream-ordered on this thread's
    /// current stream of that device (the legacy stream unless one was set).
    #[track_caller]
    pub(crate) fn new(ordinal: usize, nbytes: usize) -> Result<CudaMem> {
        let pool = device_pool(ordinal)?;
        let alloc = if nbytes == 0 {
            None
        } else {
            Some(pool.allocator.alloc(nbytes, current_stream_id(ordinal))?)
        };
        Ok(CudaMem {
            alloc,
            pool,
            #[cfg(unix)]
            imported: None,
        })
    }

    pub(crate) fn ptr(&self) -> u64 {
        #[cfg(unix)]
        if let Some(i) = &self.imported {
            return i.ptr();
        }
        self.alloc.as_ref().map_or(0, Allocation::ptr)
    }

    pub(crate) fn ctx(&self) -> &Arc<Context> {
        &self.pool.ctx
    }

    /// Tells the pool that work queued on `stream` (a raw `CUstream` of this device, 0 for
    /// the legacy stream) uses this memory: once freed, it is reused only after that work is
    /// done. Memory of another process is left alone (its exporter keeps it).
    pub(crate) fn record_stream(&self, stream: u64) -> Result<()> {
        if let Some(a) = &self.alloc {
            self.pool.allocator.record_stream(a, stream)?;
        }
        Ok(())
    }

    /// The memory as `len` elements of `T`, for kernels that read it; an error when the
    /// allocation holds fewer bytes.
    pub(crate) fn span<T>(&self, len: usize) -> Result<DeviceSpan<'_, T>> {
        let bytes = self.checked_bytes::<T>(len)?;
        // SAFETY: the allocation holds at least `bytes` bytes (checked) and is only given back
        // to the pool when this `CudaMem` drops, which the borrow prevents; the pool reuses it
        // in the order of its stream, after the work queued on it. Alignment: pool blocks are
        // 512-byte aligned.
        Ok(unsafe { DeviceSpan::from_raw(self.ptr(), bytes / size_of::<T>().max(1)) })
    }

    /// Elements `at..at + len` of `T`, for kernels that read them: empty when `len` is 0,
    /// wherever `at` lies (an empty view's offset need not lie inside its storage, which may
    /// be an allocation of 0 bytes).
    pub(crate) fn range<T>(&self, at: usize, len: usize) -> Result<DeviceSpan<'_, T>> {
        if len == 0 {
            return self.span::<T>(0);
        }
        let end = at.saturating_add(len);
        Ok(self.span::<T>(end)?.slice(at..)?)
    }

    /// [`CudaMem::range`], for kernels that write the elements.
    pub(crate) fn range_mut<T>(&mut self, at: usize, len: usize) -> Result<DeviceSpanMut<'_, T>> {
        if len == 0 {
            return self.span_mut::<T>(0);
        }
        let end = at.saturating_add(len);
        Ok(self.span_mut::<T>(end)?.into_slice(at..)?)
    }

    /// The memory as `len` elements of `T`, for kernels that write it.
    pub(crate) fn span_mut<T>(&mut self, len: usize) -> Result<DeviceSpanMut<'_, T>> {
        let bytes = self.checked_bytes::<T>(len)?;
        // SAFETY: as for `span`; the exclusive borrow keeps every other span of it away.
        Ok(unsafe { DeviceSpanMut::from_raw(self.ptr(), bytes / size_of::<T>().max(1)) })
    }

    /// Sets the first `bytes` bytes to zero, queued on the thread's current stream.
    pub(crate) fn zero(&mut self, bytes: usize) -> Result<()> {
        let stream = self.queue();
        let dst = self.span_mut::<u8>(bytes)?;
        // SAFETY: `dst` is `bytes` bytes of this allocation (checked), released only in stream
        // order after the memset.
        unsafe { genesis_cuda::raw::memset_d8(&stream, dst.addr(), 0, bytes)? };
        Ok(())
    }

    /// Copies `host` (pageable memory, which the driver stages before returning) to the start
    /// of this memory, queued on the thread's current stream.
    pub(crate) fn upload_pageable(&mut self, host: &crate::CpuStorage) -> Result<()> {
        let bytes = host.as_bytes();
        let stream = self.queue();
        let dst = self.span_mut::<u8>(bytes.len())?;
        // SAFETY: `dst` holds the bytes (checked); a `CpuStorage` is pageable memory, so the
        // driver has read it by the time the call returns.
        unsafe { genesis_cuda::raw::copy_from_host_async(&stream, dst.addr(), bytes)? };
        Ok(())
    }

    /// Copies `host` to byte `at` of this memory, synchronously.
    pub(crate) fn write_from_host(&mut self, at: usize, host: &[u8]) -> Result<()> {
        let dst = self.range_mut::<u8>(at, host.len())?.addr();
        // SAFETY: `dst` holds `host.len()` bytes (checked); the copy completes before return.
        unsafe { genesis_cuda::raw::copy_from_host(self.ctx(), dst, host)? };
        Ok(())
    }

    /// Copies `host.len()` bytes from byte `at` of this memory to `host`, synchronously (after
    /// the work queued before it on the legacy stream).
    pub(crate) fn read_to_host(&self, at: usize, host: &mut [u8]) -> Result<()> {
        let src = self.range::<u8>(at, host.len())?;
        // SAFETY: `src` holds `host.len()` bytes (checked); the copy completes before return.
        unsafe { genesis_cuda::raw::copy_to_host(self.ctx(), src.addr(), host)? };
        Ok(())
    }

    /// Copies `bytes` bytes from byte `src_at` of `src` to byte `dst_at` of this memory and
    /// waits for the copy: on this device's current stream, or, from another device, a peer
    /// copy once the source's pending writes are done (peer access enabled on first use).
    pub(crate) fn copy_from_device(
        &mut self,
        dst_at: usize,
        src: &CudaMem,
        src_at: usize,
        bytes: usize,
    ) -> Result<()> {
        let stream = self.queue();
        if self.ordinal() != src.ordinal() {
            queue_on(src.ctx()).synchronize()?;
            genesis_cuda::Stream::legacy(src.ctx()).synchronize()?;
            ensure_peer_access(self.ctx(), src.ctx());
        }
        self.copy_from_device_on(&stream, dst_at, src, src_at, bytes)?;
        stream.synchronize()?;
        Ok(())
    }

    /// Queues a copy of `bytes` bytes from byte `src_at` of `src` (on this device) to byte
    /// `dst_at` of this memory on the thread's current stream, without waiting for it.
    pub(crate) fn copy_within_device(
        &mut self,
        dst_at: usize,
        src: &CudaMem,
        src_at: usize,
        bytes: usize,
    ) -> Result<()> {
        let stream = self.queue();
        self.copy_from_device_on(&stream, dst_at, src, src_at, bytes)
    }

    fn copy_from_device_on(
        &mut self,
        stream: &genesis_cuda::Stream,
        dst_at: usize,
        src: &CudaMem,
        src_at: usize,
        bytes: usize,
    ) -> Result<()> {
        let dst = self.range_mut::<u8>(dst_at, bytes)?.addr();
        let from = src.range::<u8>(src_at, bytes)?.addr();
        if self.ordinal() == src.ordinal() {
            // SAFETY: both ranges lie in live allocations of this device (checked); they are
            // released only in stream order after the copy.
            unsafe { genesis_cuda::raw::copy_device_async(stream, dst, from, bytes)? };
        } else {
            // SAFETY: as above, on two devices.
            unsafe {
                genesis_cuda::raw::copy_peer_async(stream, self.ctx(), dst, src.ctx(), from, bytes)?
            };
        }
        Ok(())
    }

    /// Queues a 2-D copy of `rows` rows of `width` bytes, rows `pitch` bytes apart on each side,
    /// from `src` (on this device) starting at its byte `src_at` to this memory at byte `dst_at`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn copy_2d_from_device(
        &mut self,
        (dst_at, dst_pitch): (usize, usize),
        src: &CudaMem,
        (src_at, src_pitch): (usize, usize),
        width: usize,
        rows: usize,
    ) -> Result<()> {
        let stream = self.queue();
        let dst = self.rows_mut(dst_at, dst_pitch, width, rows)?.addr();
        let from = src.rows(src_at, src_pitch, width, rows)?.addr();
        // SAFETY: both row sets lie in live allocations of this device (checked), released
        // only in stream order after the copy.
        unsafe {
            genesis_cuda::raw::copy_2d_async(
                &stream,
                genesis_cuda::raw::Pitched::Device(dst),
                dst_pitch,
                genesis_cuda::raw::Pitched::Device(from),
                src_pitch,
                width,
                rows,
            )?
        };
        Ok(())
    }

    /// [`CudaMem::copy_2d_from_device`] from host bytes (`src_at` an offset into `host`); waits
    /// for the copy before returning.
    pub(crate) fn copy_2d_from_host(
        &mut self,
        (dst_at, dst_pitch): (usize, usize),
        host: &[u8],
        (src_at, src_pitch): (usize, usize),
        width: usize,
        rows: usize,
    ) -> Result<()> {
        let stream = self.queue();
        let dst = self.rows_mut(dst_at, dst_pitch, width, rows)?.addr();
        let src = host_rows(host, src_at, src_pitch, width, rows)?;
        // SAFETY: the device rows lie in a live allocation (checked) and the host rows in
        // `host` (checked), which stays borrowed until the synchronisation below.
        unsafe {
            genesis_cuda::raw::copy_2d_async(
                &stream,
                genesis_cuda::raw::Pitched::Device(dst),
                dst_pitch,
                genesis_cuda::raw::Pitched::Host(src.as_ptr()),
                src_pitch,
                width,
                rows,
            )?
        };
        stream.synchronize()?;
        Ok(())
    }

    /// A 2-D copy from this memory to host bytes (`dst_at` an offset into `host`); waits for
    /// the copy before returning.
    pub(crate) fn copy_2d_to_host(
        &self,
        host: &mut [u8],
        (dst_at, dst_pitch): (usize, usize),
        (src_at, src_pitch): (usize, usize),
        width: usize,
        rows: usize,
    ) -> Result<()> {
        let stream = self.queue();
        let from = self.rows(src_at, src_pitch, width, rows)?.addr();
        let len = host_rows(host, dst_at, dst_pitch, width, rows)?.len();
        let dst = host[dst_at..dst_at + len].as_mut_ptr().cast_const();
        // SAFETY: the device rows lie in a live allocation (checked) and the host rows in
        // `host` (checked), which stays borrowed mutably until the synchronisation below.
        unsafe {
            genesis_cuda::raw::copy_2d_async(
                &stream,
                genesis_cuda::raw::Pitched::Host(dst),
                dst_pitch,
                genesis_cuda::raw::Pitched::Device(from),
                src_pitch,
                width,
                rows,
            )?
        };
        stream.synchronize()?;
        Ok(())
    }

    /// The bytes `rows` rows of `width` bytes, `pitch` apart from byte `at`, reach.
    fn rows(
        &self,
        at: usize,
        pitch: usize,
        width: usize,
        rows: usize,
    ) -> Result<DeviceSpan<'_, u8>> {
        let end = rows_end(at, pitch, width, rows)?;
        self.range::<u8>(at, end - at)
    }

    fn rows_mut(
        &mut self,
        at: usize,
        pitch: usize,
        width: usize,
        rows: usize,
    ) -> Result<DeviceSpanMut<'_, u8>> {
        let end = rows_end(at, pitch, width, rows)?;
        self.range_mut::<u8>(at, end - at)
    }

    /// Bytes of the allocation (at least the bytes asked for).
    pub(crate) fn capacity(&self) -> usize {
        #[cfg(unix)]
        if let Some(i) = &self.imported {
            return i.nbytes();
        }
        self.alloc.as_ref().map_or(0, Allocation::size)
    }

    /// The figures of this memory's pool (none for memory of another process).
    pub(crate) fn pool_info(&self) -> Option<crate::PoolInfo> {
        #[cfg(unix)]
        if self.imported.is_some() {
            return None;
        }
        let st = self.pool.allocator().stats();
        Some(crate::PoolInfo {
            allocated_bytes: st.allocated_bytes.all().current as u64,
            reserved_bytes: st.reserved_bytes.all().current as u64,
            fragmentation: st.fragmentation(),
        })
    }

    /// Copies the `desc.numel()` elements of `size` bytes that `desc` maps from `src` (of
    /// `src_bytes` bytes, on this device) into this memory (of `dst_bytes`): the tiled
    /// transpose when `transpose` gives `(rows, cols, ld, src_offset, dst_offset)` of a 2-D
    /// transpose into a dense destination, the strided-copy kernel otherwise.
    pub(crate) fn strided_copy_from(
        &mut self,
        src: &CudaMem,
        (src_bytes, dst_bytes, size): (usize, usize, usize),
        desc: &genesis_kernels::StridedCopy,
        transpose: Option<(usize, usize, usize, usize, usize)>,
    ) -> Result<()> {
        let stream = self.queue();
        let (sp, dp) = (src.span::<u8>(src_bytes)?, self.span_mut::<u8>(dst_bytes)?);
        if let Some((rows, cols, ld, so, dof)) = transpose {
            genesis_kernels::gpu::transpose(
                &stream,
                size,
                sp.slice(so * size..)?,
                dp.into_slice(dof * size..)?,
                1,
                rows,
                cols,
                ld,
                0,
                0,
            )?;
        } else {
            genesis_kernels::gpu::strided_copy(&stream, size, sp, dp, desc)?;
        }
        Ok(())
    }

    fn checked_bytes<T>(&self, len: usize) -> Result<usize> {
        let have = self.capacity();
        match len.checked_mul(size_of::<T>()) {
            Some(b) if b <= have => Ok(b),
            _ => Err(Error::Cuda(genesis_cuda::Error::InvalidArgument {
                op: "CudaMem::span",
                reason: format!(
                    "{len} elements of {} bytes in an allocation of {have}",
                    size_of::<T>()
                ),
            })),
        }
    }

    pub(crate) fn ordinal(&self) -> usize {
        self.pool.ctx.ordinal()
    }
}

impl Drop for CudaMem {
    fn drop(&mut self) {
        if let Some(a) = self.alloc.take()
            && let Err(e) = self.pool.allocator.free(a)
        {
            tracing::error!(error = %e, "returning device memory to the pool failed");
        }
    }
}

/// Pinned host memory from the pinned pool, given back on drop.
#[derive(Debug)]
pub(crate) struct PinnedMem {
    alloc: Option<Allocation>,
    nbytes: usize,
}

impl PinnedMem {
    #[track_caller]
    pub(crate) fn new(nbytes: usize) -> Result<PinnedMem> {
        // More than the host has is refused before the pool or the driver sees it.
        crate::cpu::check_host_bytes(nbytes)?;
        let alloc = if nbytes == 0 {
            None
        } else {
            Some(pinned_pool()?.alloc(nbytes, 0)?)
        };
        Ok(PinnedMem { alloc, nbytes })
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        match &self.alloc {
            // SAFETY: the allocation is `nbytes` (rounded up) of pinned host memory owned by
            // this value until drop.
            Some(a) => unsafe {
                std::slice::from_raw_parts(a.ptr() as usize as *const u8, self.nbytes)
            },
            None => &[],
        }
    }

    pub(crate) fn as_bytes_mut(&mut self) -> &mut [u8] {
        match &self.alloc {
            // SAFETY: as in `as_bytes`, with a unique borrow of `self`.
            Some(a) => unsafe {
                std::slice::from_raw_parts_mut(a.ptr() as usize as *mut u8, self.nbytes)
            },
            None => &mut [],
        }
    }
}

impl Drop for PinnedMem {
    fn drop(&mut self) {
        if let Some(a) = self.alloc.take()
            && let Ok(pool) = pinned_pool()
            && let Err(e) = pool.free(a)
        {
            tracing::error!(error = %e, "returning pinned memory to the pool failed");
        }
    }
}

/// Gives the cached (unused) memory of every device pool and of the pinned pool back to the
/// driver. Memory of live storages is untouched.
pub fn empty_caches() -> Result<()> {
    for slot in pools() {
        if let Some(p) = slot.get() {
            // Work queued on any stream may still use memory freed in its order: let it finish
            // before the pages go back to the driver.
            p.ctx.synchronize()?;
            p.allocator.empty_cache()?;
        }
    }
    if let Ok(p) = pinned_pool() {
        p.empty_cache()?;
    }
    Ok(())
}

/// Enables peer access between two devices once per pair (both directions); failures only
/// mean the driver stages the copies, so they are logged, not returned.
pub(crate) fn ensure_peer_access(a: &Arc<Context>, b: &Arc<Context>) {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static DONE: Mutex<Option<HashSet<(usize, usize)>>> = Mutex::new(None);
    let key = (a.ordinal().min(b.ordinal()), a.ordinal().max(b.ordinal()));
    let mut done = DONE.lock().unwrap_or_else(|p| p.into_inner());
    if !done.get_or_insert_with(HashSet::new).insert(key) {
        return;
    }
    for (x, y) in [(a, b), (b, a)] {
        match x.enable_peer_access(y) {
            Ok(true) => {
                tracing::debug!(from = x.ordinal(), to = y.ordinal(), "peer access enabled")
            }
            Ok(false) => tracing::info!(
                from = x.ordinal(),
                to = y.ordinal(),
                "no peer access: copies are staged"
            ),
            Err(e) => tracing::warn!(error = %e, "enabling peer access failed: copies are staged"),
        }
    }
}

thread_local! {
    /// The streams this thread has made current, per device (none: the legacy stream).
    static CURRENT_STREAMS: std::cell::RefCell<Vec<(usize, Arc<genesis_cuda::Stream>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The stream this thread queues device `ordinal`'s work on, when one was set with
/// [`set_current_stream`]; `None` means the legacy default stream.
pub fn current_stream(ordinal: usize) -> Option<Arc<genesis_cuda::Stream>> {
    CURRENT_STREAMS.with(|c| {
        c.borrow()
            .iter()
            .find(|(o, _)| *o == ordinal)
            .map(|(_, s)| Arc::clone(s))
    })
}

/// Makes `stream` the stream this thread queues device `ordinal`'s work on (`None`: back to
/// the legacy default stream); returns the previous one. Storages allocated while a stream is
/// current belong to it in the device's pool (their memory is reused in that stream's order).
///
/// The stream should be a blocking one ([`genesis_cuda::Stream::new_blocking`]): the legacy
/// stream, which transfers and the pool's other users order their work on, then waits for it.
pub fn set_current_stream(
    ordinal: usize,
    stream: Option<Arc<genesis_cuda::Stream>>,
) -> Option<Arc<genesis_cuda::Stream>> {
    CURRENT_STREAMS.with(|c| {
        let mut v = c.borrow_mut();
        let old = v
            .iter()
            .position(|(o, _)| *o == ordinal)
            .map(|i| v.swap_remove(i).1);
        if let Some(s) = stream {
            v.push((ordinal, s));
        }
        old
    })
}

/// A handle of the stream to queue work on (see [`queue_on`]); it keeps a user stream alive.
#[derive(Debug)]
pub struct Queue {
    stream: genesis_cuda::Stream,
    _keep: Option<Arc<genesis_cuda::Stream>>,
}

impl std::ops::Deref for Queue {
    type Target = genesis_cuda::Stream;
    fn deref(&self) -> &genesis_cuda::Stream {
        &self.stream
    }
}

/// The stream to queue work on `ctx`'s device: this thread's current stream, or the legacy one.
pub fn queue_on(ctx: &Arc<Context>) -> Queue {
    match current_stream(ctx.ordinal()) {
        Some(s) => Queue {
            // SAFETY: `_keep` holds the stream alive as long as the handle exists.
            stream: unsafe { genesis_cuda::Stream::borrowed(ctx, s.id()) },
            _keep: Some(s),
        },
        None => Queue {
            stream: genesis_cuda::Stream::legacy(ctx),
            _keep: None,
        },
    }
}

/// The allocator's stream id for new memory on device `ordinal` (the current stream's).
fn current_stream_id(ordinal: usize) -> u64 {
    current_stream(ordinal).map_or(0, |s| s.id())
}

/// Blocking streams per device in the stream pool.
pub const STREAMS_PER_DEVICE: usize = 32;

/// A stream of device `ordinal` from its pool of [`STREAMS_PER_DEVICE`] blocking streams, handed
/// out round-robin (PyTorch's stream pool). Pooled streams live as long as the process, so the
/// device's memory pool, which keys blocks by stream, never meets a destroyed stream.
pub fn pooled_stream(ordinal: usize) -> Result<Arc<genesis_cuda::Stream>> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    type Pool = Mutex<Vec<Arc<genesis_cuda::Stream>>>;
    static POOLS: OnceLock<Vec<(Pool, AtomicUsize)>> = OnceLock::new();
    let pools = POOLS.get_or_init(|| {
        (0..pools().len())
            .map(|_| (Mutex::new(Vec::new()), AtomicUsize::new(0)))
            .collect()
    });
    let pool = device_pool(ordinal)?;
    let (streams, next) = &pools[ordinal];
    let i = next.fetch_add(1, Ordering::Relaxed) % STREAMS_PER_DEVICE;
    let mut v = streams.lock().unwrap_or_else(|p| p.into_inner());
    while v.len() <= i {
        v.push(Arc::new(genesis_cuda::Stream::new_blocking(
            pool.context(),
        )?));
    }
    Ok(Arc::clone(&v[i]))
}

/// Reads the bytes of `src` into `out` (of the same length) once the work queued on `stream`
/// before it has run: one asynchronous copy into pinned memory of the host pool and one
/// synchronisation (for counts and flags that kernels leave on the device).
pub fn read_back(
    stream: &genesis_cuda::Stream,
    src: DeviceSpan<'_, u8>,
    out: &mut [u8],
) -> Result<()> {
    if src.len() != out.len() {
        return Err(Error::LengthMismatch {
            op: "read_back",
            lhs: src.len(),
            rhs: out.len(),
        });
    }
    let mut staging = PinnedMem::new(out.len())?;
    // SAFETY: `staging` is page-locked, not read until the synchronisation below; `src` is
    // live device memory for as long as it is borrowed, which covers the synchronisation.
    unsafe { genesis_cuda::raw::copy_to_pinned_async(stream, src.addr(), staging.as_bytes_mut())? };
    stream.synchronize()?;
    out.copy_from_slice(&staging.as_bytes()[..out.len()]);
    Ok(())
}
