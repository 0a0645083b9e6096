//! Asynchronous transfers on a stream, and batched copies spread over several streams (the
//! stream work itself is the CUDA backend's: `cuda/transfer.rs`).

use std::marker::PhantomData;

use crate::{Result, Storage};

/// A copy queued on a stream. [`PendingCopy::wait`] blocks until it is done; dropping it waits
/// too, so the storages it borrows cannot be touched or freed while the device uses them.
#[derive(Debug)]
#[must_use = "a pending copy is waited for when dropped"]
pub struct PendingCopy<'a> {
    pub(crate) event: Option<crate::cuda::Event>,
    pub(crate) _borrows: PhantomData<&'a mut Storage>,
}

impl PendingCopy<'_> {
    /// Whether the copy has completed, without blocking.
    pub fn is_done(&self) -> Result<bool> {
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

/// Copies every `(destination, source)` pair, spreading them round-robin over `streams` new
/// streams of each destination's (or, for device → host, source's) device so that copies
/// overlap, and returns when all are done. Pairs the streams cannot speed up (pageable host
/// memory) are copied synchronously.
pub fn batched_copy(pairs: &mut [(&mut Storage, &Storage)], streams: usize) -> Result<()> {
    crate::cuda::batched_copy(pairs, streams)
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
