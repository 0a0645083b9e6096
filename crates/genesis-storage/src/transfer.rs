//! Asynchronous transfers on a stream, and batched copies spread over several streams.

#[cfg(feature = "cuda")]
use std::marker::PhantomData;

#[cfg(feature = "cuda")]
use crate::{Device, Error, storage::Inner};
use crate::{Result, Storage};

/// A copy queued on a stream. [`PendingCopy::wait`] blocks until it is done; dropping it waits
/// too, so the storages it borrows cannot be touched or freed while the device uses them.
#[derive(Debug)]
#[must_use = "a pending copy is waited for when dropped"]
pub struct PendingCopy<'a> {
    #[cfg(feature = "cuda")]
    event: Option<genesis_cuda::Event>,
    #[cfg(feature = "cuda")]
    _borrows: PhantomData<&'a mut Storage>,
    #[cfg(not(feature = "cuda"))]
    _borrows: std::marker::PhantomData<&'a mut Storage>,
}

impl PendingCopy<'_> {
    /// Whether the copy has completed, without blocking.
    pub fn is_done(&self) -> Result<bool> {
        #[cfg(feature = "cuda")]
        if let Some(e) = &self.event {
            return Ok(e.is_complete()?);
        }
        Ok(true)
    }

    /// Blocks until the copy has completed.
    pub fn wait(mut self) -> Result<()> {
        self.wait_inner()
    }

    fn wait_inner(&mut self) -> Result<()> {
        #[cfg(feature = "cuda")]
        if let Some(e) = self.event.take() {
            e.synchronize()?;
        }
        Ok(())
    }
}

impl Drop for PendingCopy<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.wait_inner() {
            tracing::error!(error = %e, "waiting for an asynchronous copy failed");
        }
    }
}

#[cfg(feature = "cuda")]
fn done<'a>() -> PendingCopy<'a> {
    PendingCopy {
        event: None,
        _borrows: PhantomData,
    }
}

impl Storage {
    /// Queues a copy of all of `src` into this storage on `stream` and returns at once.
    ///
    /// Asynchronous for device ↔ device and pinned host ↔ device copies (the stream must
    /// belong to the device involved: the destination's, or the source's for device → host);
    /// other pairs (pageable host memory) are copied synchronously and return a completed
    /// copy. Work queued earlier on the legacy stream (how Genesis's synchronous operations
    /// run) is ordered before the copy.
    #[cfg(feature = "cuda")]
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
        match (&mut self.inner, &src.inner) {
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
            }
            _ => {
                self.copy_from(src)?;
                return Ok(done());
            }
        }
        let event = genesis_cuda::Event::new(stream.context(), false)?;
        event.record(stream)?;
        Ok(PendingCopy {
            event: Some(event),
            _borrows: PhantomData,
        })
    }
}

/// Copies every `(destination, source)` pair, spreading them round-robin over `streams` new
/// streams of each destination's (or, for device → host, source's) device so that copies
/// overlap, and returns when all are done. Pairs the streams cannot speed up (pageable host
/// memory) are copied synchronously.
pub fn batched_copy(pairs: &mut [(&mut Storage, &Storage)], streams: usize) -> Result<()> {
    #[cfg(feature = "cuda")]
    {
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
    #[cfg(not(feature = "cuda"))]
    {
        let _ = streams;
        for (dst, src) in pairs.iter_mut() {
            dst.copy_from(src)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Device, Error};

    #[test]
    fn batched_host_copies() {
        let srcs: Vec<Storage> = (0..5)
            .map(|i| Storage::full(100, i as f32, Device::Cpu).unwrap())
            .collect();
        let mut dsts: Vec<Storage> = (0..5)
            .map(|_| Storage::zeros(100, DType::F32, Device::Cpu).unwrap())
            .collect();
        let mut pairs: Vec<(&mut Storage, &Storage)> = dsts.iter_mut().zip(srcs.iter()).collect();
        batched_copy(&mut pairs, 3).unwrap();
        for (i, d) in dsts.iter().enumerate() {
            assert_eq!(d.to_vec::<f32>().unwrap(), vec![i as f32; 100]);
        }
        let mut bad = Storage::zeros(3, DType::F32, Device::Cpu).unwrap();
        let mut pairs: Vec<(&mut Storage, &Storage)> = vec![(&mut bad, &srcs[0])];
        assert!(matches!(
            batched_copy(&mut pairs, 2),
            Err(Error::LengthMismatch { .. })
        ));
    }
}
