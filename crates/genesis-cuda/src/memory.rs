//! Plain device allocations (`cuMemAlloc`) and synchronous / stream-ordered copies.

use std::ffi::c_void;
use std::sync::Arc;

use crate::context::{Context, check};
use crate::error::Result;
use crate::span::{DeviceSpan, DeviceSpanMut};
use crate::stream::Stream;
use crate::sys;

/// A device allocation of `len` bytes, freed on drop.
///
/// It owns an `Arc` of its [`Context`], so the context outlives it. A zero-length buffer holds no
/// device memory and makes no driver call.
pub struct DeviceBuffer {
    ctx: Arc<Context>,
    ptr: u64,
    len: usize,
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("device", &self.ctx.ordinal())
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .finish()
    }
}

impl DeviceBuffer {
    /// Allocates `len` bytes of uninitialised device memory.
    pub fn alloc(ctx: &Arc<Context>, len: usize) -> Result<DeviceBuffer> {
        ctx.bind()?;
        let mut ptr: sys::CUdeviceptr = 0;
        if len > 0 {
            // SAFETY: the context is current and `ptr` is a valid out-pointer.
            check("cuMemAlloc", unsafe { sys::cuMemAlloc(&mut ptr, len) })?;
        }
        Ok(DeviceBuffer {
            ctx: Arc::clone(ctx),
            ptr,
            len,
        })
    }

    /// Allocates and copies `data` in.
    pub fn from_host(ctx: &Arc<Context>, data: &[u8]) -> Result<DeviceBuffer> {
        let mut b = Self::alloc(ctx, data.len())?;
        b.copy_from_host(data)?;
        Ok(b)
    }

    /// The context the memory belongs to.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The device address (0 for an empty buffer).
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The buffer as elements of `T` (its length a whole number of `T`s), for reading.
    pub fn as_span<T: Copy>(&self) -> Result<DeviceSpan<'_, T>> {
        // SAFETY: the buffer's `len` bytes are allocated for as long as it is borrowed, and its
        // `Drop` (`cuMemFree`) waits for the work queued on them.
        unsafe { DeviceSpan::<u8>::from_raw(self.ptr, self.len) }.cast::<T>()
    }

    /// The buffer as elements of `T` (its length a whole number of `T`s), for writing.
    pub fn as_span_mut<T: Copy>(&mut self) -> Result<DeviceSpanMut<'_, T>> {
        // SAFETY: as for `as_span`; the exclusive borrow keeps other spans of it away.
        unsafe { DeviceSpanMut::<u8>::from_raw(self.ptr, self.len) }.cast::<T>()
    }

    /// Copies `src` (exactly `self.len()` bytes) from the host, synchronously.
    pub fn copy_from_host(&mut self, src: &[u8]) -> Result<()> {
        length_check("DeviceBuffer::copy_from_host", self.len, src.len())?;
        if self.len == 0 {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: `ptr` is a live allocation of `len` bytes and `src` holds `len` readable bytes.
        check("cuMemcpyHtoD", unsafe {
            sys::cuMemcpyHtoD(self.ptr, src.as_ptr().cast::<c_void>(), self.len)
        })?;
        // From pageable memory, cuMemcpyHtoD may return once the data is staged, before the DMA
        // lands; work on non-blocking streams is not ordered after it. Wait for it here so the
        // copy is complete for every stream when this returns.
        // SAFETY: synchronising the legacy stream of the current context has no preconditions.
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(std::ptr::null_mut())
        })
    }

    /// Copies the whole buffer into `dst` (exactly `self.len()` bytes), synchronously.
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<()> {
        length_check("DeviceBuffer::copy_to_host", self.len, dst.len())?;
        if self.len == 0 {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: `ptr` is a live allocation of `len` bytes and `dst` has `len` writable bytes.
        check("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH(dst.as_mut_ptr().cast::<c_void>(), self.ptr, self.len)
        })
    }

    /// Copies the whole buffer into a new `Vec<u8>`.
    pub fn to_host_vec(&self) -> Result<Vec<u8>> {
        let mut v = vec![0u8; self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }

    /// Copies all of `src` (same length, same device) into this buffer, ordered on `stream`.
    pub fn copy_from_device(&mut self, src: &DeviceBuffer, stream: &Stream) -> Result<()> {
        length_check("DeviceBuffer::copy_from_device", self.len, src.len)?;
        if self.len == 0 {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: both are live allocations of `len` bytes; the stream belongs to this context.
        check("cuMemcpyDtoDAsync", unsafe {
            sys::cuMemcpyDtoDAsync(self.ptr, src.ptr, self.len, stream.raw_unflushed())
        })
    }

    /// Sets every byte to `value`, ordered on `stream`.
    pub fn memset(&mut self, value: u8, stream: &Stream) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: live allocation of `len` bytes; the stream belongs to this context.
        check("cuMemsetD8Async", unsafe {
            sys::cuMemsetD8Async(self.ptr, value, self.len, stream.raw_unflushed())
        })
    }
}

fn length_check(op: &'static str, expected: usize, got: usize) -> Result<()> {
    if expected == got {
        Ok(())
    } else {
        Err(crate::Error::InvalidArgument {
            op,
            reason: format!("the buffer holds {expected} bytes but the other side holds {got}"),
        })
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        // SAFETY: the context is alive (we hold an Arc); `ptr` came from cuMemAlloc in it and is
        // freed exactly once, here.
        let result = self
            .ctx
            .bind()
            .and_then(|()| check("cuMemFree", unsafe { sys::cuMemFree(self.ptr) }));
        if let Err(e) = result {
            self.ctx.record_error(e);
        }
    }
}
