//! Stream-ordered transfers of the CUDA backend: [`Storage::copy_from_async`],
//! [`Storage::copy_from_async_detached`] and the streams of [`crate::batched_copy`].

use std::marker::PhantomData;

use crate::storage::Inner;
use crate::transfer::PendingCopy;
use crate::{Device, Error, Result, Storage};

impl Storage {
    /// Queues a copy of all of `src` into this storage on `stream` and returns at once.
    ///
    /// Asynchronous for device ↔ device and pinned host ↔ device copies (the stream must
    /// belong to the device involved: the destination's, or the source's for device → host);
    /// other pairs (pageable host memory) are copied synchronously and return a completed
    /// copy. Work queued earlier on the legacy stream (how Genesis's synchronous operations
    /// run) is ordered before the copy. The source's lock is held only while the copy is
    /// queued: a write to pinned source memory through a tensor that shares it, before the
    /// copy completes, races with the copy engine (wait for the [`PendingCopy`] first).
    pub fn copy_from_async<'a>(
        &'a mut self,
        src: &'a Storage,
        stream: &genesis_cuda::Stream,
    ) -> Result<PendingCopy<'a>> {
        if self.dtype() != src.dtype() {
            return Err(Error::DTypeMismatch {
                op: "copy_from_async",
                lhs: self.dtype(),
                rhs: src.dtype(),
            });
        }
        if self.len() != src.len() {
            return Err(Error::LengthMismatch {
                op: "copy_from_async",
                lhs: self.len(),
                rhs: src.len(),
            });
        }
        let bytes = self.nbytes();
        let ordinal = stream.context().ordinal();
        let on = |d: Device| {
            if d == Device::Cuda(ordinal) {
                Ok(())
            } else {
                Err(Error::DeviceMismatch {
                    op: "copy_from_async (stream)",
                    lhs: d,
                    rhs: Device::Cuda(ordinal),
                })
            }
        };
        let order_after_legacy = |ctx: &std::sync::Arc<genesis_cuda::Context>| -> Result<()> {
            let e = genesis_cuda::Event::new(ctx, false)?;
            e.record(&genesis_cuda::Stream::legacy(ctx))?;
            stream.wait_event(&e)?;
            Ok(())
        };
        let src_inner = src.read("copy_from_async")?;
        let queued = match (self.inner_mut(), &*src_inner) {
            (Inner::Cuda(d), Inner::Cuda(s)) => {
                on(Device::Cuda(d.ordinal()))?;
                order_after_legacy(d.ctx())?;
                if d.ordinal() == s.ordinal() {
                    // SAFETY: both ranges are live allocations of this device, borrowed by the
                    // returned PendingCopy until the copy completes.
                    unsafe {
                        genesis_cuda::raw::copy_device_async(stream, d.ptr(), s.ptr(), bytes)?
                    };
                } else {
                    order_after_legacy(s.ctx())?;
                    // SAFETY: as above, on two devices.
                    unsafe {
                        genesis_cuda::raw::copy_peer_async(
                            stream,
                            d.ctx(),
                            d.ptr(),
                            s.ctx(),
                            s.ptr(),
                            bytes,
                        )?
                    };
                }
                true
            }
            (Inner::Cuda(d), Inner::Pinned(p)) => {
                on(Device::Cuda(d.ordinal()))?;
                order_after_legacy(d.ctx())?;
                // SAFETY: `p` is pinned memory borrowed (unmodified) until the copy completes.
                unsafe {
                    genesis_cuda::raw::copy_from_pinned_async(
                        stream,
                        d.ptr(),
                        &p.as_bytes()[..bytes],
                    )?
                };
                true
            }
            (Inner::Pinned(p), Inner::Cuda(s)) => {
                on(Device::Cuda(s.ordinal()))?;
                order_after_legacy(s.ctx())?;
                // SAFETY: `p` is pinned memory borrowed mutably until the copy completes.
                unsafe {
                    genesis_cuda::raw::copy_to_pinned_async(
                        stream,
                        s.ptr(),
                        &mut p.as_bytes_mut()[..bytes],
                    )?
                };
                true
            }
            _ => false,
        };
        drop(src_inner);
        if !queued {
            self.copy_from(src)?;
            return Ok(done());
        }
        let event = genesis_cuda::Event::new(stream.context(), false)?;
        event.record(stream)?;
        Ok(PendingCopy {
            event: Some(event),
            _borrows: PhantomData,
        })
    }
}

/// A copy that has already completed (made synchronously).
fn done<'a>() -> PendingCopy<'a> {
    PendingCopy {
        event: None,
        _borrows: PhantomData,
    }
}

/// [`crate::batched_copy`]: copies spread round-robin over `streams` new streams of each
/// pair's device.
pub(crate) fn batched_copy(pairs: &mut [(&mut Storage, &Storage)], streams: usize) -> Result<()> {
    use std::collections::HashMap;
    let streams = streams.max(1);
    let mut pools: HashMap<usize, Vec<genesis_cuda::Stream>> = HashMap::new();
    let mut pending = Vec::with_capacity(pairs.len());
    for (i, (dst, src)) in pairs.iter_mut().enumerate() {
        let device = match (dst.device(), src.device()) {
            (Device::Cuda(d), _) => Some(d),
            (_, Device::Cuda(s)) => Some(s),
            _ => None,
        };
        let Some(ordinal) = device else {
            dst.copy_from(src)?;
            continue;
        };
        if let std::collections::hash_map::Entry::Vacant(slot) = pools.entry(ordinal) {
            let ctx = genesis_cuda::Context::get(ordinal)?;
            let v = (0..streams)
                .map(|_| genesis_cuda::Stream::new(&ctx))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            slot.insert(v);
        }
        let stream = &pools[&ordinal][i % streams];
        pending.push(dst.copy_from_async(src, stream)?);
    }
    for p in pending {
        p.wait()?;
    }
    Ok(())
}

/// The pinned sources of copies queued by [`Storage::copy_from_async_detached`], each with an
/// event recorded after its copy: a source stays alive (its memory out of the pinned pool)
/// until its event completes.
static IN_FLIGHT: std::sync::Mutex<Vec<(genesis_cuda::Event, std::sync::Arc<Storage>)>> =
    std::sync::Mutex::new(Vec::new());

/// Drops the sources of completed detached copies (an event whose query fails is kept: its
/// copy may still run).
fn release_completed(list: &mut Vec<(genesis_cuda::Event, std::sync::Arc<Storage>)>) {
    list.retain(|(e, _)| !matches!(e.is_complete(), Ok(true)));
}

impl Storage {
    /// Queues a copy of all of `src`, pinned host memory, into this CUDA storage on `stream`
    /// and returns without waiting for it (PyTorch's `non_blocking=True` from pinned memory).
    /// Work queued later on `stream` sees the copied data; the host does not, until it
    /// synchronises with `stream`. `src` is held (its pinned memory not reused) until the copy
    /// has completed, so it may be dropped at once; writing to it before then changes what is
    /// copied, as in PyTorch. The stream must belong to this storage's device. Other pairs of
    /// storages are copied as [`Storage::copy_from_async`] copies them (pageable host memory
    /// synchronously), and the call returns when that is done.
    pub fn copy_from_async_detached(
        &mut self,
        src: &std::sync::Arc<Storage>,
        stream: &genesis_cuda::Stream,
    ) -> Result<()> {
        let detach = matches!(self.device(), Device::Cuda(_)) && src.is_pinned();
        let mut pending = self.copy_from_async(src, stream)?;
        if !detach {
            // A copy into host memory (or between devices) is waited for: the caller may read
            // or free the memory as soon as this returns.
            return pending.wait();
        }
        // Only the pinned source is still read by the device: it is kept with the event
        // recorded after the copy instead of being waited for.
        let event = pending.event.take();
        drop(pending);
        let mut list = IN_FLIGHT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        release_completed(&mut list);
        if let Some(e) = event {
            list.push((e, std::sync::Arc::clone(src)));
        }
        Ok(())
    }
}

/// Drops the sources of detached copies that have completed (they are also dropped as later
/// detached copies are queued). Returns how many copies are still in flight.
pub fn release_completed_copies() -> usize {
    let mut list = IN_FLIGHT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    release_completed(&mut list);
    list.len()
}
