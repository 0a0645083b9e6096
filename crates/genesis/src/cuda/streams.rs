//! The current device, device properties, streams, events, and their scopes.

use genesis_storage::{current_cuda_device, set_current_cuda_device};

use crate::{Device, Error, Result};

/// This thread's current CUDA device (0 unless [`set_device`] or a [`DeviceGuard`] changed it):
/// what [`current`] and the `"cuda"` device string stand for.
pub fn current_device() -> usize {
    current_cuda_device()
}

/// This thread's current CUDA device as a [`Device`].
pub fn current() -> Device {
    Device::Cuda(current_device())
}

fn check_ordinal(op: &'static str, ordinal: usize) -> Result<()> {
    let count = super::device_count();
    if ordinal >= count {
        return Err(Error::InvalidArgument {
            op,
            reason: format!("device {ordinal} does not exist ({count} CUDA devices)"),
        });
    }
    Ok(())
}

/// Makes `ordinal` this thread's current device.
pub fn set_device(ordinal: usize) -> Result<()> {
    check_ordinal("set_device", ordinal)?;
    set_current_cuda_device(ordinal);
    Ok(())
}

/// Makes a device current until dropped, then restores the previous one (PyTorch's
/// `with torch.cuda.device(i):`).
#[derive(Debug)]
#[must_use = "the device is current only while the guard lives"]
pub struct DeviceGuard {
    previous: usize,
}

impl DeviceGuard {
    /// Makes `ordinal` current until the guard is dropped.
    pub fn new(ordinal: usize) -> Result<DeviceGuard> {
        let previous = current_device();
        set_device(ordinal)?;
        Ok(DeviceGuard { previous })
    }
}

impl Drop for DeviceGuard {
    fn drop(&mut self) {
        set_current_cuda_device(self.previous);
    }
}

/// Runs `f` with `ordinal` as the current device (restored afterwards, also on panic).
pub fn with_device<R>(ordinal: usize, f: impl FnOnce() -> R) -> Result<R> {
    let _guard = DeviceGuard::new(ordinal)?;
    Ok(f())
}

/// What a device is (PyTorch's `get_device_properties`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceProperties {
    /// The name, e.g. `"NVIDIA H100 80GB HBM3"`.
    pub name: String,
    /// Compute capability, major.
    pub major: u32,
    /// Compute capability, minor.
    pub minor: u32,
    /// Device memory in bytes.
    pub total_memory: usize,
    /// Streaming multiprocessors.
    pub multi_processor_count: u32,
}

/// The properties of device `ordinal` (an error when it does not exist, as always without
/// the `cuda` feature).
pub fn get_device_properties(ordinal: usize) -> Result<DeviceProperties> {
    check_ordinal("get_device_properties", ordinal)?;
    #[cfg(feature = "cuda")]
    {
        let ctx = genesis_cuda::Context::get(ordinal)?;
        let (major, minor) = ctx.compute_capability();
        Ok(DeviceProperties {
            name: ctx.name().to_string(),
            major,
            minor,
            total_memory: ctx.total_memory(),
            multi_processor_count: ctx.multiprocessors(),
        })
    }
    // No device passes `check_ordinal` without the `cuda` feature.
    #[cfg(not(feature = "cuda"))]
    Err(Error::InvalidArgument {
        op: "get_device_properties",
        reason: format!("device {ordinal} does not exist (built without the `cuda` feature)"),
    })
}

pub use imp::*;

#[cfg(feature = "cuda")]
mod imp {
    use std::sync::Arc;

    use super::check_ordinal;
    use crate::{Error, Result};

    fn context(ordinal: usize) -> Result<Arc<genesis_cuda::Context>> {
        Ok(genesis_cuda::Context::get(ordinal)?)
    }

    fn cuda<T>(r: std::result::Result<T, genesis_cuda::Error>) -> Result<T> {
        r.map_err(Error::from)
    }

    /// A CUDA stream of one device. Work queued while it is current ([`StreamGuard`],
    /// [`with_stream`]) runs on it, in order, concurrently with other streams' work; memory
    /// allocated meanwhile belongs to it in the device's pool.
    ///
    /// Streams are created blocking: work on them waits for earlier work on the default
    /// (legacy) stream, and later default-stream work, including transfers and reads to the
    /// host, waits for them. Two user streams do not wait for each other: order them with
    /// [`Stream::wait_stream`] or events when one uses the other's results. As in PyTorch, a
    /// tensor allocated under one stream and used under another must be kept alive until that
    /// use completes (synchronise before dropping it).
    ///
    /// Streams come from a per-device pool of 32 (as in PyTorch), so two `Stream` values may
    /// share a CUDA stream; their work is then ordered, which is always safe.
    #[derive(Debug, Clone)]
    pub struct Stream {
        inner: Arc<genesis_cuda::Stream>,
        device: usize,
    }

    impl Stream {
        /// A stream of device `ordinal` from its pool of 32, handed out round-robin (as
        /// PyTorch's `torch.cuda.Stream()` does): the 33rd call gives the first stream again.
        /// Pooled streams live as long as the process.
        pub fn new(ordinal: usize) -> Result<Stream> {
            check_ordinal("Stream::new", ordinal)?;
            Ok(Stream {
                inner: genesis_storage::cuda::pooled_stream(ordinal)?,
                device: ordinal,
            })
        }

        /// The default (legacy) stream of device `ordinal`.
        pub fn default_stream(ordinal: usize) -> Result<Stream> {
            check_ordinal("Stream::default_stream", ordinal)?;
            Ok(Stream {
                inner: Arc::new(genesis_cuda::Stream::legacy(&context(ordinal)?)),
                device: ordinal,
            })
        }

        /// The stream this thread queues device `ordinal`'s work on now.
        pub fn current(ordinal: usize) -> Result<Stream> {
            match genesis_storage::cuda::current_stream(ordinal) {
                Some(inner) => Ok(Stream {
                    inner,
                    device: ordinal,
                }),
                None => Stream::default_stream(ordinal),
            }
        }

        /// The device.
        pub fn device(&self) -> usize {
            self.device
        }

        /// The raw `CUstream` handle as an integer (0 for the default stream).
        pub fn id(&self) -> u64 {
            self.inner.id()
        }

        /// The raw `CUstream` handle (0 for the default stream), made ready for work another
        /// library (NCCL, cuBLAS) queues on it: the device's pending batch of small ops is
        /// launched first, so that it runs before that work, and the device's primary context
        /// is made current on this thread, the one the CUDA runtime inside such a library
        /// takes its device from. Work queued through the handle is ordered with Genesis's
        /// own on the stream; memory it uses on a stream other than its allocation's must be
        /// named with [`crate::Tensor::record_stream`].
        pub fn external_handle(&self) -> Result<u64> {
            cuda(self.inner.context().bind())?;
            Ok(self.inner.id())
        }

        /// Waits until all work queued on the stream has completed.
        pub fn synchronize(&self) -> Result<()> {
            cuda(self.inner.synchronize())
        }

        /// Whether all work queued on the stream has completed.
        pub fn query(&self) -> Result<bool> {
            cuda(self.inner.is_idle())
        }

        /// Makes later work on this stream wait for `event`.
        pub fn wait_event(&self, event: &Event) -> Result<()> {
            cuda(self.inner.wait_event(&event.inner))
        }

        /// Makes later work on this stream wait for the work queued on `other` so far.
        pub fn wait_stream(&self, other: &Stream) -> Result<()> {
            let e = other.record_event()?;
            self.wait_event(&e)
        }

        /// An event recorded on this stream now (completes when the work queued so far does).
        pub fn record_event(&self) -> Result<Event> {
            let e = Event::new(self.device, false)?;
            e.record(self)?;
            Ok(e)
        }
    }

    /// A CUDA event: a marker in a stream, for ordering and timing.
    #[derive(Debug)]
    pub struct Event {
        inner: genesis_cuda::Event,
    }

    impl Event {
        /// A new event on device `ordinal`; `timing` enables [`Event::elapsed_ms`].
        pub fn new(ordinal: usize, timing: bool) -> Result<Event> {
            check_ordinal("Event::new", ordinal)?;
            Ok(Event {
                inner: cuda(genesis_cuda::Event::new(&context(ordinal)?, timing))?,
            })
        }

        /// Records the event on `stream` (it completes when the work queued so far does).
        pub fn record(&self, stream: &Stream) -> Result<()> {
            cuda(self.inner.record(&stream.inner))
        }

        /// Waits until the event has completed.
        pub fn synchronize(&self) -> Result<()> {
            cuda(self.inner.synchronize())
        }

        /// Whether the event has completed.
        pub fn query(&self) -> Result<bool> {
            cuda(self.inner.is_complete())
        }

        /// Milliseconds from `start` to this event (both recorded with timing, both complete).
        pub fn elapsed_ms(&self, start: &Event) -> Result<f32> {
            cuda(self.inner.elapsed_ms(&start.inner))
        }
    }

    /// Makes a stream current on its device for this thread until dropped, then restores the
    /// previous one (PyTorch's `with torch.cuda.stream(s):`).
    #[derive(Debug)]
    #[must_use = "the stream is current only while the guard lives"]
    pub struct StreamGuard {
        device: usize,
        previous: Option<Arc<genesis_cuda::Stream>>,
    }

    impl StreamGuard {
        /// Makes `stream` current until the guard is dropped.
        pub fn new(stream: &Stream) -> StreamGuard {
            let inner = (stream.inner.id() != 0).then(|| Arc::clone(&stream.inner));
            StreamGuard {
                device: stream.device,
                previous: genesis_storage::cuda::set_current_stream(stream.device, inner),
            }
        }
    }

    impl Drop for StreamGuard {
        fn drop(&mut self) {
            genesis_storage::cuda::set_current_stream(self.device, self.previous.take());
        }
    }

    /// Runs `f` with `stream` current on its device (restored afterwards, also on panic).
    pub fn with_stream<R>(stream: &Stream, f: impl FnOnce() -> R) -> R {
        let _guard = StreamGuard::new(stream);
        f()
    }
}

/// Without the `cuda` feature there is no device, so no stream or event can be made: the
/// constructors return the "device does not exist" error and the types are uninhabited. The
/// API is the same as with the feature, so code using streams builds on every build.
#[cfg(not(feature = "cuda"))]
mod imp {
    use std::convert::Infallible;

    use crate::{Error, Result};

    fn no_device<T>(op: &'static str, ordinal: usize) -> Result<T> {
        Err(Error::InvalidArgument {
            op,
            reason: format!("device {ordinal} does not exist (built without the `cuda` feature)"),
        })
    }

    /// A CUDA stream of one device (none exists without the `cuda` feature).
    #[derive(Debug, Clone)]
    pub struct Stream {
        never: Infallible,
    }

    impl Stream {
        /// A pooled stream of device `ordinal`: an error without the `cuda` feature.
        pub fn new(ordinal: usize) -> Result<Stream> {
            no_device("Stream::new", ordinal)
        }

        /// The default stream of device `ordinal`: an error without the `cuda` feature.
        pub fn default_stream(ordinal: usize) -> Result<Stream> {
            no_device("Stream::default_stream", ordinal)
        }

        /// The current stream of device `ordinal`: an error without the `cuda` feature.
        pub fn current(ordinal: usize) -> Result<Stream> {
            Stream::default_stream(ordinal)
        }

        /// The device.
        pub fn device(&self) -> usize {
            match self.never {}
        }

        /// The raw `CUstream` handle as an integer.
        pub fn id(&self) -> u64 {
            match self.never {}
        }

        /// The raw `CUstream` handle, made ready for another library's work.
        pub fn external_handle(&self) -> Result<u64> {
            match self.never {}
        }

        /// Waits until all work queued on the stream has completed.
        pub fn synchronize(&self) -> Result<()> {
            match self.never {}
        }

        /// Whether all work queued on the stream has completed.
        pub fn query(&self) -> Result<bool> {
            match self.never {}
        }

        /// Makes later work on this stream wait for `event`.
        pub fn wait_event(&self, _event: &Event) -> Result<()> {
            match self.never {}
        }

        /// Makes later work on this stream wait for the work queued on `other` so far.
        pub fn wait_stream(&self, _other: &Stream) -> Result<()> {
            match self.never {}
        }

        /// An event recorded on this stream now.
        pub fn record_event(&self) -> Result<Event> {
            match self.never {}
        }
    }

    /// A CUDA event (none exists without the `cuda` feature).
    #[derive(Debug)]
    pub struct Event {
        never: Infallible,
    }

    impl Event {
        /// A new event on device `ordinal`: an error without the `cuda` feature.
        pub fn new(ordinal: usize, _timing: bool) -> Result<Event> {
            no_device("Event::new", ordinal)
        }

        /// Records the event on `stream`.
        pub fn record(&self, _stream: &Stream) -> Result<()> {
            match self.never {}
        }

        /// Waits until the event has completed.
        pub fn synchronize(&self) -> Result<()> {
            match self.never {}
        }

        /// Whether the event has completed.
        pub fn query(&self) -> Result<bool> {
            match self.never {}
        }

        /// Milliseconds from `start` to this event.
        pub fn elapsed_ms(&self, _start: &Event) -> Result<f32> {
            match self.never {}
        }
    }

    /// Makes a stream current until dropped (no stream exists without the `cuda` feature).
    #[derive(Debug)]
    #[must_use = "the stream is current only while the guard lives"]
    pub struct StreamGuard {
        never: Infallible,
    }

    impl StreamGuard {
        /// Makes `stream` current until the guard is dropped.
        pub fn new(stream: &Stream) -> StreamGuard {
            match stream.never {}
        }
    }

    /// Runs `f` with `stream` current on its device.
    pub fn with_stream<R>(stream: &Stream, _f: impl FnOnce() -> R) -> R {
        match stream.never {}
    }

    impl Drop for StreamGuard {
        fn drop(&mut self) {
            match self.never {}
        }
    }
}
