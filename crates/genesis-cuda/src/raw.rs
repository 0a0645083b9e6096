//! Raw memory calls for allocators: plain device allocations, the virtual-memory API
//! (reserve / create / map / unmap), pinned host memory and memsets on raw addresses.
//!
//! These are what `genesis-mem`'s CUDA backends call; nothing here caches or tracks.

use std::ffi::c_void;
use std::sync::Arc;

use crate::context::{Context, check};
use crate::error::{Error, Result};
use crate::sys;

fn prop(ctx: &Context) -> sys::MemAllocationProp {
    prop_with(ctx, sys::CU_MEM_HANDLE_TYPE_NONE)
}

fn prop_with(ctx: &Context, handle_types: u32) -> sys::MemAllocationProp {
    sys::MemAllocationProp {
        type_: sys::CU_MEM_ALLOCATION_TYPE_PINNED,
        requested_handle_types: handle_types,
        location: sys::MemLocation {
            type_: sys::CU_MEM_LOCATION_TYPE_DEVICE,
            id: ctx.ordinal() as i32,
        },
        win32_handle_meta_data: std::ptr::null_mut(),
        alloc_flags: [0; 8],
    }
}

/// The minimum physical granularity of the VMM API on this device (2 MiB on current GPUs).
pub fn vmm_granularity(ctx: &Arc<Context>) -> Result<usize> {
    ctx.bind()?;
    let p = prop(ctx);
    let mut g = 0usize;
    // SAFETY: `p` is a valid property struct and `g` a valid out-pointer.
    check("cuMemGetAllocationGranularity", unsafe {
        sys::cuMemGetAllocationGranularity(&mut g, &p, sys::CU_MEM_ALLOC_GRANULARITY_MINIMUM)
    })?;
    Ok(g)
}

/// `cuMemAlloc`: `bytes` of device memory.
pub fn mem_alloc(ctx: &Arc<Context>, bytes: usize) -> Result<u64> {
    ctx.bind()?;
    let mut p = 0u64;
    // SAFETY: the context is current and `p` is a valid out-pointer.
    check("cuMemAlloc", unsafe { sys::cuMemAlloc(&mut p, bytes) })?;
    Ok(p)
}

/// `cuMemFree`.
///
/// # Safety
///
/// `ptr` must come from [`mem_alloc`] on this context and not be freed yet, and no queued work
/// may still use it.
pub unsafe fn mem_free(ctx: &Arc<Context>, ptr: u64) -> Result<()> {
    ctx.bind()?;
    // SAFETY: the caller guarantees `ptr` is a live cuMemAlloc allocation.
    check("cuMemFree", unsafe { sys::cuMemFree(ptr) })
}

/// `cuMemAddressReserve`: `bytes` of address space, aligned to `align`.
pub fn reserve_address_space(ctx: &Arc<Context>, bytes: usize, align: usize) -> Result<u64> {
    ctx.bind()?;
    let mut va = 0u64;
    // SAFETY: valid out-pointer; no fixed address is requested.
    check("cuMemAddressReserve", unsafe {
        sys::cuMemAddressReserve(&mut va, bytes, align, 0, 0)
    })?;
    Ok(va)
}

/// `cuMemAddressFree`.
///
/// # Safety
///
/// `va`/`bytes` must be a reservation from [`reserve_address_space`] with nothing mapped in it.
pub unsafe fn free_address_space(ctx: &Arc<Context>, va: u64, bytes: usize) -> Result<()> {
    ctx.bind()?;
    // SAFETY: guaranteed by the caller.
    check("cuMemAddressFree", unsafe {
        sys::cuMemAddressFree(va, bytes)
    })
}

/// `cuMemCreate`: a physical allocation of `bytes` (a multiple of the granularity) on the
/// context's device. Returns the handle.
pub fn create_physical(ctx: &Arc<Context>, bytes: usize) -> Result<u64> {
    ctx.bind()?;
    let p = prop(ctx);
    let mut h = 0u64;
    // SAFETY: valid property struct and out-pointer.
    check("cuMemCreate", unsafe {
        sys::cuMemCreate(&mut h, bytes, &p, 0)
    })?;
    Ok(h)
}

/// [`create_physical`] of memory that [`export_physical_fd`] can hand to another process
/// (`requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`). Devices that do not
/// support it ([`Context::supports_posix_fd_handles`]) refuse it.
pub fn create_physical_exportable(ctx: &Arc<Context>, bytes: usize) -> Result<u64> {
    ctx.bind()?;
    let p = prop_with(ctx, sys::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    let mut h = 0u64;
    // SAFETY: valid property struct and out-pointer.
    check("cuMemCreate", unsafe {
        sys::cuMemCreate(&mut h, bytes, &p, 0)
    })?;
    Ok(h)
}

/// `cuMemExportToShareableHandle`: a new file descriptor for the physical memory `handle`,
/// which another process turns back into a handle with [`import_physical_fd`]. The memory
/// stays allocated while any handle, mapping or such descriptor of it exists, in any process.
/// Only memory created by [`create_physical_exportable`] can be exported.
#[cfg(unix)]
pub fn export_physical_fd(ctx: &Arc<Context>, handle: u64) -> Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    ctx.bind()?;
    let mut fd: std::ffi::c_int = -1;
    // SAFETY: for the POSIX file descriptor type the driver writes an `int` through the
    // pointer; an unknown or non-exportable handle is an error code, not undefined behaviour.
    check("cuMemExportToShareableHandle", unsafe {
        sys::cuMemExportToShareableHandle(
            (&raw mut fd).cast(),
            handle,
            sys::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            0,
        )
    })?;
    if fd < 0 {
        return Err(Error::InvalidArgument {
            op: "export_physical_fd",
            reason: format!("the driver returned file descriptor {fd}"),
        });
    }
    // SAFETY: the driver created `fd` for us; nothing else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// `cuMemImportFromShareableHandle`: the physical memory behind a file descriptor that
/// [`export_physical_fd`] made (in this or another process), as a handle of this process to
/// map with [`map`] and give back with [`release_physical`]. The descriptor stays the
/// caller's (it may be closed once this returns).
#[cfg(unix)]
pub fn import_physical_fd(ctx: &Arc<Context>, fd: std::os::fd::BorrowedFd<'_>) -> Result<u64> {
    use std::os::fd::AsRawFd;
    ctx.bind()?;
    let mut h = 0u64;
    // SAFETY: for the POSIX file descriptor type the shareable handle is the descriptor itself,
    // passed as a pointer-sized integer; the driver checks that it names exported memory.
    check("cuMemImportFromShareableHandle", unsafe {
        sys::cuMemImportFromShareableHandle(
            &mut h,
            fd.as_raw_fd() as isize as *mut c_void,
            sys::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        )
    })?;
    Ok(h)
}

/// `cuMemGetAddressRange`: the base and length of the allocation that holds device address
/// `ptr` (for [`mem_alloc`] memory: the whole `cuMemAlloc` segment).
pub fn address_range(ctx: &Arc<Context>, ptr: u64) -> Result<(u64, usize)> {
    ctx.bind()?;
    let (mut base, mut len) = (0u64, 0usize);
    // SAFETY: valid out-pointers; an address the driver does not know is an error code.
    check("cuMemGetAddressRange", unsafe {
        sys::cuMemGetAddressRange(&mut base, &mut len, ptr)
    })?;
    Ok((base, len))
}

/// `cuIpcGetMemHandle`: 64 bytes naming the `cuMemAlloc` segment at `base`, which another
/// process opens with [`ipc_open`]. The handle does not keep the memory alive: it stays valid
/// only while the segment is allocated here (and this process lives).
pub fn ipc_mem_handle(ctx: &Arc<Context>, base: u64) -> Result<[u8; 64]> {
    ctx.bind()?;
    let mut h = sys::IpcHandle { reserved: [0; 64] };
    // SAFETY: valid out-pointer; memory the driver cannot share is an error code.
    check("cuIpcGetMemHandle", unsafe {
        sys::cuIpcGetMemHandle(&mut h, base)
    })?;
    Ok(h.reserved)
}

/// `cuIpcOpenMemHandle` (peer access enabled lazily): the address at which this process sees
/// the segment another process named with [`ipc_mem_handle`]. Fails in the exporting
/// process itself, and for a handle this context has already opened.
pub fn ipc_open(ctx: &Arc<Context>, handle: [u8; 64]) -> Result<u64> {
    ctx.bind()?;
    let mut p = 0u64;
    // SAFETY: valid out-pointer; the handle is plain bytes the driver validates.
    check("cuIpcOpenMemHandle", unsafe {
        sys::cuIpcOpenMemHandle(
            &mut p,
            sys::IpcHandle { reserved: handle },
            sys::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
        )
    })?;
    Ok(p)
}

/// `cuIpcCloseMemHandle`.
///
/// # Safety
///
/// `ptr` must come from [`ipc_open`] on this context, be closed once, and no queued work may
/// still use it.
pub unsafe fn ipc_close(ctx: &Arc<Context>, ptr: u64) -> Result<()> {
    ctx.bind()?;
    // SAFETY: guaranteed by the caller.
    check("cuIpcCloseMemHandle", unsafe {
        sys::cuIpcCloseMemHandle(ptr)
    })
}

/// `cuMemRelease`.
///
/// # Safety
///
/// `handle` must come from [`create_physical`] and be released once; it may still be mapped
/// (the memory is freed when the last mapping goes).
pub unsafe fn release_physical(ctx: &Arc<Context>, handle: u64) -> Result<()> {
    ctx.bind()?;
    // SAFETY: guaranteed by the caller.
    check("cuMemRelease", unsafe { sys::cuMemRelease(handle) })
}

/// `cuMemMap` of the whole of `handle` (`bytes` long) at `va`. The driver maps whole handles
/// only: a part of one, at any offset, is refused with `CUDA_ERROR_NOT_SUPPORTED`.
///
/// # Safety
///
/// `[va, va + bytes)` must lie inside a reservation with nothing mapped there, and `handle` must
/// be a live physical allocation of exactly `bytes`.
pub unsafe fn map(ctx: &Arc<Context>, va: u64, bytes: usize, handle: u64) -> Result<()> {
    ctx.bind()?;
    // SAFETY: guaranteed by the caller.
    check("cuMemMap", unsafe {
        sys::cuMemMap(va, bytes, 0, handle, 0)
    })
}

/// `cuMemSetAccess`: makes `[va, va + bytes)` readable and writable from the context's device
/// and from each device ordinal in `peers` (devices that can reach this one peer-to-peer; VMM
/// mappings are not covered by `cuCtxEnablePeerAccess`).
///
/// # Safety
///
/// The range must be fully mapped.
pub unsafe fn set_access(ctx: &Arc<Context>, va: u64, bytes: usize, peers: &[usize]) -> Result<()> {
    ctx.bind()?;
    let desc = |ordinal: usize| sys::MemAccessDesc {
        location: sys::MemLocation {
            type_: sys::CU_MEM_LOCATION_TYPE_DEVICE,
            id: ordinal as i32,
        },
        flags: sys::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    let mut descs = vec![desc(ctx.ordinal())];
    descs.extend(
        peers
            .iter()
            .filter(|&&p| p != ctx.ordinal())
            .map(|&p| desc(p)),
    );
    // SAFETY: the caller guarantees the range is mapped; `descs` holds `descs.len()` valid
    // descriptors.
    check("cuMemSetAccess", unsafe {
        sys::cuMemSetAccess(va, bytes, descs.as_ptr(), descs.len())
    })
}

/// Whether device `peer` can access memory of device `device` peer-to-peer.
pub fn can_access_peer(device: usize, peer: usize) -> Result<bool> {
    crate::context::init()?;
    let (mut d, mut p) = (0, 0);
    // SAFETY: the driver is initialised; out-pointers are valid.
    check("cuDeviceGet", unsafe {
        sys::cuDeviceGet(&mut d, device as i32)
    })?;
    // SAFETY: as above.
    check("cuDeviceGet", unsafe {
        sys::cuDeviceGet(&mut p, peer as i32)
    })?;
    let mut can = 0;
    // SAFETY: valid device handles and out-pointer.
    check("cuDeviceCanAccessPeer", unsafe {
        sys::cuDeviceCanAccessPeer(&mut can, p, d)
    })?;
    Ok(can != 0)
}

/// `cuMemUnmap`.
///
/// # Safety
///
/// `[va, va + bytes)` must be exactly one or more whole mappings, and no queued work may still
/// use it.
pub unsafe fn unmap(ctx: &Arc<Context>, va: u64, bytes: usize) -> Result<()> {
    ctx.bind()?;
    // SAFETY: guaranteed by the caller.
    check("cuMemUnmap", unsafe { sys::cuMemUnmap(va, bytes) })
}

/// `cuMemHostAlloc` (portable): `bytes` of page-locked host memory.
pub fn host_alloc_pinned(ctx: &Arc<Context>, bytes: usize) -> Result<*mut u8> {
    if bytes == 0 {
        return Err(Error::InvalidArgument {
            op: "host_alloc_pinned",
            reason: "zero bytes".into(),
        });
    }
    ctx.bind()?;
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-pointer; the context is current.
    check("cuMemHostAlloc", unsafe {
        sys::cuMemHostAlloc(&mut p, bytes, sys::CU_MEMHOSTALLOC_PORTABLE)
    })?;
    Ok(p.cast())
}

/// `cuMemFreeHost`.
///
/// # Safety
///
/// `p` must come from [`host_alloc_pinned`] and not be freed yet; nothing may use it after.
pub unsafe fn host_free_pinned(ctx: &Arc<Context>, p: *mut u8) -> Result<()> {
    ctx.bind()?;
    // SAFETY: guaranteed by the caller.
    check("cuMemFreeHost", unsafe { sys::cuMemFreeHost(p.cast()) })
}

/// Sets `bytes` bytes at device address `ptr` to `value`, ordered on `stream`.
///
/// # Safety
///
/// `[ptr, ptr + bytes)` must be mapped device memory of the stream's context.
pub unsafe fn memset_d8(stream: &crate::Stream, ptr: u64, value: u8, bytes: usize) -> Result<()> {
    stream.context().bind()?;
    // SAFETY: guaranteed by the caller.
    check("cuMemsetD8Async", unsafe {
        sys::cuMemsetD8Async(ptr, value, bytes, stream.raw_unflushed())
    })
}

/// Copies `dst.len()` bytes from device address `src` to the host, synchronously.
///
/// # Safety
///
/// `[src, src + dst.len())` must be mapped device memory of the context.
pub unsafe fn copy_to_host(ctx: &Arc<Context>, src: u64, dst: &mut [u8]) -> Result<()> {
    ctx.bind()?;
    // SAFETY: guaranteed by the caller; `dst` is writable for its length.
    check("cuMemcpyDtoH", unsafe {
        sys::cuMemcpyDtoH(dst.as_mut_ptr().cast(), src, dst.len())
    })
}

/// Copies `src` to device address `dst`, complete for every stream when it returns.
///
/// # Safety
///
/// `[dst, dst + src.len())` must be device memory of the context.
pub unsafe fn copy_from_host(ctx: &Arc<Context>, dst: u64, src: &[u8]) -> Result<()> {
    if src.is_empty() {
        return Ok(());
    }
    ctx.bind()?;
    // SAFETY: guaranteed by the caller; `src` is readable for its length.
    check("cuMemcpyHtoD", unsafe {
        sys::cuMemcpyHtoD(dst, src.as_ptr().cast(), src.len())
    })?;
    // Pageable sources may still be in flight (staged DMA): wait on the legacy stream.
    // SAFETY: no preconditions.
    check("cuStreamSynchronize", unsafe {
        sys::cuStreamSynchronize(std::ptr::null_mut())
    })
}

/// Queues a copy of `bytes` from `src` to `dst` (both device memory of the stream's context).
///
/// # Safety
///
/// Both ranges must be device memory of the context, valid until the copy completes.
pub unsafe fn copy_device_async(
    stream: &crate::Stream,
    dst: u64,
    src: u64,
    bytes: usize,
) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    stream.context().bind()?;
    // SAFETY: guaranteed by the caller.
    check("cuMemcpyDtoDAsync", unsafe {
        sys::cuMemcpyDtoDAsync(dst, src, bytes, stream.raw_unflushed())
    })
}

/// Queues a copy of `bytes` from `src` on `src_ctx`'s device to `dst` on `dst_ctx`'s device,
/// ordered on `stream` (of the destination context). The driver uses peer access when it is
/// enabled and stages through host memory otherwise.
///
/// # Safety
///
/// Both ranges must be device memory of their contexts, valid until the copy completes.
pub unsafe fn copy_peer_async(
    stream: &crate::Stream,
    dst_ctx: &Arc<Context>,
    dst: u64,
    src_ctx: &Arc<Context>,
    src: u64,
    bytes: usize,
) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    // The source may be written by small operations still pending on its own context.
    src_ctx.flush_batch()?;
    dst_ctx.bind()?;
    // SAFETY: guaranteed by the caller; both contexts are retained.
    check("cuMemcpyPeerAsync", unsafe {
        sys::cuMemcpyPeerAsync(
            dst,
            dst_ctx.raw(),
            src,
            src_ctx.raw(),
            bytes,
            stream.raw_unflushed(),
        )
    })
}

/// Queues a copy of `src.len()` bytes from pinned host memory to the device, on `stream`.
///
/// # Safety
///
/// `src` must be page-locked host memory (from [`host_alloc_pinned`]) that stays valid and
/// unmodified until the copy completes; `[dst, dst + src.len())` device memory of the context.
pub unsafe fn copy_from_pinned_async(stream: &crate::Stream, dst: u64, src: &[u8]) -> Result<()> {
    if src.is_empty() {
        return Ok(());
    }
    stream.context().bind()?;
    // SAFETY: guaranteed by the caller.
    check("cuMemcpyHtoDAsync", unsafe {
        sys::cuMemcpyHtoDAsync(dst, src.as_ptr().cast(), src.len(), stream.raw_unflushed())
    })
}

/// Queues a copy of `dst.len()` bytes from the device into pinned host memory, on `stream`.
///
/// # Safety
///
/// `dst` must be page-locked host memory that stays valid (and is not read) until the copy
/// completes; `[src, src + dst.len())` device memory of the context.
pub unsafe fn copy_to_pinned_async(stream: &crate::Stream, src: u64, dst: &mut [u8]) -> Result<()> {
    if dst.is_empty() {
        return Ok(());
    }
    stream.context().bind()?;
    // SAFETY: guaranteed by the caller.
    check("cuMemcpyDtoHAsync", unsafe {
        sys::cuMemcpyDtoHAsync(
            dst.as_mut_ptr().cast(),
            src,
            dst.len(),
            stream.raw_unflushed(),
        )
    })
}

/// One side of a 2-D copy: host or device memory, and the distance between rows in bytes.
#[derive(Debug, Clone, Copy)]
pub enum Pitched {
    /// Host memory starting at this address.
    Host(*const u8),
    /// Device memory starting at this address.
    Device(u64),
}

/// Queues a 2-D copy of `height` rows of `width` bytes, rows `src_pitch` / `dst_pitch` bytes
/// apart, on `stream` (`cuMemcpy2DAsync`; the copy engines do the strides).
///
/// # Safety
///
/// Both sides must cover `(height - 1) * pitch + width` bytes of valid memory (device memory of
/// the stream's context, or host memory; pageable host memory is copied before the call
/// returns, pinned memory must stay valid until the copy completes), and the destination must
/// not overlap the source.
pub unsafe fn copy_2d_async(
    stream: &crate::Stream,
    dst: Pitched,
    dst_pitch: usize,
    src: Pitched,
    src_pitch: usize,
    width: usize,
    height: usize,
) -> Result<()> {
    if width == 0 || height == 0 {
        return Ok(());
    }
    stream.context().bind()?;
    let mut c = sys::Memcpy2D {
        src_x_in_bytes: 0,
        src_y: 0,
        src_memory_type: 0,
        src_host: std::ptr::null(),
        src_device: 0,
        src_array: std::ptr::null_mut(),
        src_pitch,
        dst_x_in_bytes: 0,
        dst_y: 0,
        dst_memory_type: 0,
        dst_host: std::ptr::null_mut(),
        dst_device: 0,
        dst_array: std::ptr::null_mut(),
        dst_pitch,
        width_in_bytes: width,
        height,
    };
    match src {
        Pitched::Host(p) => {
            c.src_memory_type = sys::CU_MEMORYTYPE_HOST;
            c.src_host = p.cast();
        }
        Pitched::Device(d) => {
            c.src_memory_type = sys::CU_MEMORYTYPE_DEVICE;
            c.src_device = d;
        }
    }
    match dst {
        Pitched::Host(p) => {
            c.dst_memory_type = sys::CU_MEMORYTYPE_HOST;
            c.dst_host = p.cast_mut().cast();
        }
        Pitched::Device(d) => {
            c.dst_memory_type = sys::CU_MEMORYTYPE_DEVICE;
            c.dst_device = d;
        }
    }
    // SAFETY: `c` describes ranges the caller guarantees; the struct matches CUDA_MEMCPY2D.
    check("cuMemcpy2DAsync", unsafe {
        sys::cuMemcpy2DAsync(&c, stream.raw_unflushed())
    })
}

/// Queues a copy of `src` (pageable host memory) to device address `dst` on `stream`. The
/// driver stages the bytes before returning, so `src` may be reused at once; work queued on
/// `stream` afterwards sees the data.
///
/// # Safety
///
/// `[dst, dst + src.len())` must be device memory of the stream's context, valid until the copy
/// completes. `src` must not be page-locked memory that is modified before the copy completes
/// (pinned memory is not staged).
pub unsafe fn copy_from_host_async(stream: &crate::Stream, dst: u64, src: &[u8]) -> Result<()> {
    if src.is_empty() {
        return Ok(());
    }
    stream.context().bind()?;
    // SAFETY: guaranteed by the caller.
    check("cuMemcpyHtoDAsync", unsafe {
        sys::cuMemcpyHtoDAsync(dst, src.as_ptr().cast(), src.len(), stream.raw_unflushed())
    })
}
