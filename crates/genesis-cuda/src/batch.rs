//! Batched launches of tiny operations.
//!
//! A kernel launch costs the host 2-4 µs, far more than the GPU needs for an operation on a few
//! elements. A *batch kernel* takes one parameter block of [`BATCH_PARAM_BYTES`] bytes: a record
//! count (a `u32` at offset 0) and, from offset [`BATCH_HEADER_BYTES`], up to
//! [`batch_capacity`] fixed-size records, which one block executes in order. The context keeps
//! one pending batch: [`Context::batch_push`] appends a record to it instead of launching, and
//! the batch is launched (one `cuLaunchKernel` for every record) before anything else reaches
//! the driver through this context.
//!
//! # Ordering
//!
//! Every call in this crate that talks to the driver goes through [`Context::bind`], and `bind`
//! launches the pending batch first; so do [`Stream::raw`] (for work queued by other
//! libraries), [`Context::flush_batch`] and dropping the context. The batch is therefore queued
//! on its stream before any later launch, copy, event, synchronisation, query or release of
//! memory in the context, and the GPU sees the same order as with one launch per record: the
//! batching is invisible except in timing. The flag that says a batch is pending is cleared only
//! after the batch's launch has been queued, under the batch lock, so a thread that sees no
//! pending batch also sees its launch ordered before its own work.
//!
//! A batch whose launch fails loses its records: the error is returned by the call that
//! triggered the launch, as an asynchronous kernel error would be.

use std::ffi::c_void;
use std::sync::atomic::Ordering;

use crate::context::{Context, check};
use crate::error::{Error, Result};
use crate::module::Kernel;
use crate::stream::Stream;
use crate::sys;

/// Bytes of the parameter block of a batch kernel (the classic kernel parameter limit).
pub const BATCH_PARAM_BYTES: usize = 4096;
/// Bytes before the first record: the record count as a `u32`, then padding.
pub const BATCH_HEADER_BYTES: usize = 16;

/// How many records of `record_bytes` bytes one batch holds.
pub const fn batch_capacity(record_bytes: usize) -> usize {
    match (BATCH_PARAM_BYTES - BATCH_HEADER_BYTES).checked_div(record_bytes) {
        Some(n) => n,
        None => 0,
    }
}

/// The batch a context holds until something else reaches the driver.
pub(crate) struct Batch {
    /// 8-byte aligned parameter block.
    buf: Box<[u64; BATCH_PARAM_BYTES / 8]>,
    pending: Option<Pending>,
}

#[derive(Clone, Copy)]
struct Pending {
    func: sys::CUfunction,
    stream: sys::CUstream,
    threads: u32,
    record_bytes: usize,
    count: u32,
}

impl Batch {
    pub(crate) fn new() -> Batch {
        Batch {
            buf: Box::new([0u64; BATCH_PARAM_BYTES / 8]),
            pending: None,
        }
    }
}

impl Context {
    /// Appends `record` to the context's pending batch for `kernel` on `stream`, launching the
    /// batch when it is full. A pending batch of another kernel, stream, block size or record
    /// size is launched first. See the [module docs](crate::batch) for when batches launch.
    ///
    /// # Safety
    ///
    /// `kernel` must be a batch kernel whose parameter block holds records of exactly
    /// `record.len()` bytes in the layout the kernel reads, run by one block of `threads`
    /// threads; every device address in the record must stay valid for the accesses the kernel
    /// makes until the batch has completed (as for [`Kernel::launch`]).
    pub unsafe fn batch_push(
        &self,
        stream: &Stream,
        kernel: &Kernel,
        threads: u32,
        record: &[u8],
    ) -> Result<()> {
        let cap = batch_capacity(record.len());
        if cap == 0 || !record.len().is_multiple_of(8) || threads == 0 {
            return Err(Error::InvalidArgument {
                op: "Context::batch_push",
                reason: format!(
                    "records of {} bytes for {threads} threads (need a non-zero multiple of 8 \
                     bytes, at most {} bytes, and at least one thread)",
                    record.len(),
                    BATCH_PARAM_BYTES - BATCH_HEADER_BYTES
                ),
            });
        }
        if !std::ptr::eq(self, &**stream.context()) || !std::ptr::eq(self, &**kernel.context()) {
            return Err(Error::InvalidArgument {
                op: "Context::batch_push",
                reason: format!(
                    "kernel `{}` (device {}) and the stream (device {}) must both be on device {}",
                    kernel.name(),
                    kernel.context().ordinal(),
                    stream.context().ordinal(),
                    self.ordinal()
                ),
            });
        }
        let mut b = self.batch.lock().unwrap_or_else(|p| p.into_inner());
        let want = (kernel.raw(), stream.raw_unflushed(), threads, record.len());
        if let Some(p) = b.pending
            && (p.func, p.stream, p.threads, p.record_bytes) != want
        {
            self.launch_batch(&mut b)?;
        }
        let p = b.pending.get_or_insert(Pending {
            func: want.0,
            stream: want.1,
            threads,
            record_bytes: record.len(),
            count: 0,
        });
        let at = BATCH_HEADER_BYTES + p.count as usize * record.len();
        p.count += 1;
        self.batch_records.fetch_add(1, Ordering::Relaxed);
        let full = p.count as usize == cap;
        // SAFETY: `at + record.len() <= BATCH_PARAM_BYTES` (count < capacity before the push),
        // and the buffer is BATCH_PARAM_BYTES bytes of plain integers.
        unsafe {
            std::ptr::copy_nonoverlapping(
                record.as_ptr(),
                b.buf.as_mut_ptr().cast::<u8>().add(at),
                record.len(),
            );
        }
        if full {
            self.launch_batch(&mut b)
        } else {
            self.has_batch.store(true, Ordering::Release);
            Ok(())
        }
    }

    /// Launches the pending batch, if any (see the [module docs](crate::batch)).
    pub fn flush_batch(&self) -> Result<()> {
        if !self.has_batch.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut b = self.batch.lock().unwrap_or_else(|p| p.into_inner());
        self.launch_batch(&mut b)
    }

    /// Whether small operations may be batched on this context (on unless the environment
    /// variable `GENESIS_NO_BATCH` was set when the context was first retained).
    pub fn batching(&self) -> bool {
        self.batching.load(Ordering::Relaxed)
    }

    /// `(records, launches)`: how many records were pushed onto this context's batches and how
    /// many batch launches ran them, since the context was retained.
    pub fn batch_counts(&self) -> (u64, u64) {
        (
            self.batch_records.load(Ordering::Relaxed),
            self.batch_launches.load(Ordering::Relaxed),
        )
    }

    /// Turns batching of small operations on or off; turning it off launches the pending batch.
    pub fn set_batching(&self, on: bool) -> Result<()> {
        self.batching.store(on, Ordering::Relaxed);
        if on { Ok(()) } else { self.flush_batch() }
    }

    /// Queues the batch `b` holds. The caller holds the batch lock; the pending flag is cleared
    /// after the launch has been queued (see the module docs).
    fn launch_batch(&self, b: &mut Batch) -> Result<()> {
        let Some(p) = b.pending.take() else {
            self.has_batch.store(false, Ordering::Release);
            return Ok(());
        };
        // The record count, in the header.
        b.buf[0] = u64::from(p.count).to_le();
        let mut param: *mut c_void = b.buf.as_mut_ptr().cast();
        // SAFETY: `raw` is a retained primary context. Not `bind`, which would flush (and take
        // the batch lock this thread holds).
        let result = check("cuCtxSetCurrent", unsafe {
            sys::cuCtxSetCurrent(self.raw())
        })
        .and_then(|()| {
            // SAFETY: `func` is a batch kernel of this context whose single parameter is the
            // BATCH_PARAM_BYTES block (the contract of `batch_push`); the records' addresses
            // are valid until completion by the same contract.
            check("cuLaunchKernel", unsafe {
                sys::cuLaunchKernel(
                    p.func,
                    1,
                    1,
                    1,
                    p.threads,
                    1,
                    1,
                    0,
                    p.stream,
                    &mut param,
                    std::ptr::null_mut(),
                )
            })
        });
        self.has_batch.store(false, Ordering::Release);
        self.batch_launches.fetch_add(1, Ordering::Relaxed);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_fills_the_parameter_block() {
        assert_eq!(batch_capacity(32), 127);
        assert_eq!(BATCH_HEADER_BYTES + 127 * 32, 4080);
        assert_eq!(batch_capacity(8), (4096 - 16) / 8);
        assert_eq!(batch_capacity(4080), 1);
        assert_eq!(
            batch_capacity(4081),
            0,
            "a record larger than the block fits none"
        );
        assert_eq!(batch_capacity(0), 0);
    }
}
