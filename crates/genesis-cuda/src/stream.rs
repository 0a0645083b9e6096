//! Streams and events.

use std::sync::Arc;

use crate::context::{Context, check};
use crate::error::Result;
use crate::sys;

/// A CUDA stream of one context. [`Stream::legacy`] is the context's default (NULL) stream.
pub struct Stream {
    ctx: Arc<Context>,
    raw: sys::CUstream,
    owned: bool,
}

// SAFETY: a CUstream handle may be used from any thread once its context is current (every use
// goes through `Context::bind` first).
unsafe impl Send for Stream {}
// SAFETY: as above; the handle is never mutated after creation.
unsafe impl Sync for Stream {}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("device", &self.ctx.ordinal())
            .field("raw", &self.raw)
            .finish()
    }
}

impl Stream {
    /// A new non-blocking stream.
    pub fn new(ctx: &Arc<Context>) -> Result<Stream> {
        Stream::create(ctx, sys::CU_STREAM_NON_BLOCKING)
    }

    /// A new blocking stream: work on it is ordered after earlier work on the legacy default
    /// stream, and later legacy work waits for it (CUDA's `CU_STREAM_DEFAULT` flag).
    pub fn new_blocking(ctx: &Arc<Context>) -> Result<Stream> {
        Stream::create(ctx, sys::CU_STREAM_DEFAULT)
    }

    fn create(ctx: &Arc<Context>, flags: std::ffi::c_uint) -> Result<Stream> {
        ctx.bind()?;
        let mut raw: sys::CUstream = std::ptr::null_mut();
        // SAFETY: the context is current and `raw` is a valid out-pointer.
        check("cuStreamCreate", unsafe {
            sys::cuStreamCreate(&mut raw, flags)
        })?;
        Ok(Stream {
            ctx: Arc::clone(ctx),
            raw,
            owned: true,
        })
    }

    /// The context's legacy default stream (it synchronises with every blocking stream).
    pub fn legacy(ctx: &Arc<Context>) -> Stream {
        Stream {
            ctx: Arc::clone(ctx),
            raw: std::ptr::null_mut(),
            owned: false,
        }
    }

    /// A non-owning handle for a stream created elsewhere (e.g. by another library).
    ///
    /// # Safety
    ///
    /// `raw` must be a stream of `ctx` (or 0 for the legacy stream) that stays alive as long as
    /// the returned value is used; it is not destroyed on drop.
    pub unsafe fn borrowed(ctx: &Arc<Context>, raw: u64) -> Stream {
        Stream {
            ctx: Arc::clone(ctx),
            raw: raw as usize as sys::CUstream,
            owned: false,
        }
    }

    /// The stream as an integer id (the raw handle; 0 for the legacy stream).
    pub fn id(&self) -> u64 {
        self.raw as usize as u64
    }

    /// The context the stream belongs to.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The raw handle (null for the legacy stream), for work queued outside this crate.
    ///
    /// Launches the context's pending batch of small operations first (see [`crate::batch`]),
    /// so that work queued through the handle runs after everything queued before; an error of
    /// that launch is recorded on the context and returned by its next fallible call.
    pub fn raw(&self) -> sys::CUstream {
        if let Err(e) = self.ctx.flush_batch() {
            self.ctx.record_error(e);
        }
        self.raw
    }

    /// The raw handle, without launching the pending batch: for calls made right after
    /// [`Context::bind`] (which launched it).
    pub(crate) fn raw_unflushed(&self) -> sys::CUstream {
        self.raw
    }

    /// Blocks until all work queued on the stream has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: the handle is valid for the stream's lifetime and its context is current.
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(self.raw)
        })
    }

    /// Whether all queued work has finished, without blocking.
    pub fn is_idle(&self) -> Result<bool> {
        self.ctx.bind()?;
        // SAFETY: as in `synchronize`.
        match unsafe { sys::cuStreamQuery(self.raw) } {
            sys::CUDA_SUCCESS => Ok(true),
            sys::CUDA_ERROR_NOT_READY => Ok(false),
            code => Err(crate::Error::Driver {
                call: "cuStreamQuery",
                code,
            }),
        }
    }

    /// Makes later work on this stream wait for `event`.
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: both handles are alive and belong to current contexts.
        check("cuStreamWaitEvent", unsafe {
            sys::cuStreamWaitEvent(self.raw, event.raw, 0)
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // Work still queued finishes first: memory pools key their blocks by the stream handle,
        // and a new stream may get the same handle once this one is gone.
        let result = self.ctx.bind().and_then(|()| {
            // SAFETY: the stream was created by cuStreamCreate in this context and is alive.
            check("cuStreamSynchronize", unsafe {
                sys::cuStreamSynchronize(self.raw)
            })?;
            // SAFETY: the stream is alive and destroyed once, here.
            check("cuStreamDestroy", unsafe { sys::cuStreamDestroy(self.raw) })
        });
        if let Err(e) = result {
            self.ctx.record_error(e);
        }
    }
}

/// A CUDA event, for ordering between streams and for timing.
pub struct Event {
    ctx: Arc<Context>,
    raw: sys::CUevent,
}

// SAFETY: event handles are usable from any thread once their context is current.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event")
            .field("device", &self.ctx.ordinal())
            .finish_non_exhaustive()
    }
}

impl Event {
    /// A new event; `timing` enables [`Event::elapsed_ms`].
    pub fn new(ctx: &Arc<Context>, timing: bool) -> Result<Event> {
        ctx.bind()?;
        let flags = if timing {
            sys::CU_EVENT_DEFAULT
        } else {
            sys::CU_EVENT_DISABLE_TIMING
        };
        let mut raw: sys::CUevent = std::ptr::null_mut();
        // SAFETY: the context is current and `raw` is a valid out-pointer.
        check("cuEventCreate", unsafe {
            sys::cuEventCreate(&mut raw, flags)
        })?;
        Ok(Event {
            ctx: Arc::clone(ctx),
            raw,
        })
    }

    /// A new event that other processes can open ([`Event::ipc_handle`], [`Event::open_ipc`]):
    /// `CU_EVENT_INTERPROCESS`, without timing.
    pub fn new_interprocess(ctx: &Arc<Context>) -> Result<Event> {
        ctx.bind()?;
        let mut raw: sys::CUevent = std::ptr::null_mut();
        // SAFETY: the context is current and `raw` is a valid out-pointer.
        check("cuEventCreate", unsafe {
            sys::cuEventCreate(
                &mut raw,
                sys::CU_EVENT_INTERPROCESS | sys::CU_EVENT_DISABLE_TIMING,
            )
        })?;
        Ok(Event {
            ctx: Arc::clone(ctx),
            raw,
        })
    }

    /// `cuIpcGetEventHandle`: 64 bytes naming this event (made by
    /// [`Event::new_interprocess`]) for another process.
    pub fn ipc_handle(&self) -> Result<[u8; 64]> {
        self.ctx.bind()?;
        let mut h = sys::IpcHandle { reserved: [0; 64] };
        // SAFETY: the event is alive; valid out-pointer.
        check("cuIpcGetEventHandle", unsafe {
            sys::cuIpcGetEventHandle(&mut h, self.raw)
        })?;
        Ok(h.reserved)
    }

    /// `cuIpcOpenEventHandle`: the event of another process named by `handle`
    /// ([`Event::ipc_handle`]), on `ctx`'s device. Both processes may record it and wait on it.
    pub fn open_ipc(ctx: &Arc<Context>, handle: [u8; 64]) -> Result<Event> {
        ctx.bind()?;
        let mut raw: sys::CUevent = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the handle is plain bytes the driver validates.
        check("cuIpcOpenEventHandle", unsafe {
            sys::cuIpcOpenEventHandle(&mut raw, sys::IpcHandle { reserved: handle })
        })?;
        Ok(Event {
            ctx: Arc::clone(ctx),
            raw,
        })
    }

    /// Records the event at the current end of `stream`.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: both handles are alive; the stream's context is current.
        check("cuEventRecord", unsafe {
            sys::cuEventRecord(self.raw, stream.raw_unflushed())
        })
    }

    /// Blocks until the recorded work has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: the handle is alive.
        check("cuEventSynchronize", unsafe {
            sys::cuEventSynchronize(self.raw)
        })
    }

    /// Whether the recorded work has finished, without blocking.
    pub fn is_complete(&self) -> Result<bool> {
        self.ctx.bind()?;
        // SAFETY: the handle is alive.
        match unsafe { sys::cuEventQuery(self.raw) } {
            sys::CUDA_SUCCESS => Ok(true),
            sys::CUDA_ERROR_NOT_READY => Ok(false),
            code => Err(crate::Error::Driver {
                call: "cuEventQuery",
                code,
            }),
        }
    }

    /// Milliseconds between `start` and `self`, both recorded and complete.
    pub fn elapsed_ms(&self, start: &Event) -> Result<f32> {
        self.ctx.bind()?;
        let mut ms = 0f32;
        // SAFETY: both handles are alive timing events; `ms` is a valid out-pointer.
        check("cuEventElapsedTime", unsafe {
            sys::cuEventElapsedTime(&mut ms, start.raw, self.raw)
        })?;
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: the event was created in this context and is destroyed once.
        let result = self
            .ctx
            .bind()
            .and_then(|()| check("cuEventDestroy", unsafe { sys::cuEventDestroy(self.raw) }));
        if let Err(e) = result {
            self.ctx.record_error(e);
        }
    }
}
