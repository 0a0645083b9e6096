//! The lock of a storage's memory: how tensors that share one storage read and write it
//! soundly (PyTorch's view semantics).
//!
//! # The aliasing model
//!
//! A [`Storage`](crate::Storage) is shared by `Arc` between every view of it; writes through
//! any view are seen by all of them. Its memory (`Inner`: host bytes, or the handle of device
//! memory) lives in a [`ShareCell`], a reader–writer lock:
//!
//! - every operation that reads the memory through `&Storage` holds a read lock for as long
//!   as it uses it; accessors that hand out host bytes return a guard ([`HostBytes`],
//!   [`HostSlice`]) that holds the read lock, so no `&[u8]` outlives it;
//! - a write through `&Storage` (`Storage::with_exclusive` and the `*_shared` operations)
//!   holds the write lock, which excludes every reader and writer, and bumps the storage's
//!   version counter;
//! - `&mut Storage` (a storage nobody else holds) needs no lock: Rust's borrow already
//!   excludes everyone else.
//!
//! Deadlock freedom. Readers never wait for a writer that is only waiting, so a thread may
//! take nested read locks of one storage (`a + a`). An operation takes at most one write lock,
//! and takes it together with its read locks in address order. A thread that already reads or
//! writes a storage and asks to write it, or writes it and asks to read it, gets
//! [`Error::Aliased`] instead of waiting for itself; the operations here detect that case
//! first (source and destination in one storage) and copy the source before writing, which
//! also gives PyTorch's answer for overlapping views.
//!
//! Device memory is written only by queued kernels and copies, in stream order; the lock
//! orders the host-side launches (and the `CudaMem` handle), not the device's execution. Work
//! of threads on one stream (the legacy stream by default) runs in the order it was queued;
//! across streams, events order it, as in PyTorch.
//! The lock orders the threads of this process: a shared-memory or mapped storage may also be
//! written by other processes, as with any memory shared between processes.

use std::cell::{RefCell, UnsafeCell};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use crate::{Error, Result};

/// The writer bit of [`ShareCell`]'s state; the other bits count readers.
const WRITER: usize = 1 << (usize::BITS - 1);

thread_local! {
    /// The cells this thread holds read locks of (one entry per lock held), so that a write
    /// request on one of them is refused instead of waiting forever.
    static READING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    /// A per-thread address, the thread's identity for [`ShareCell`]'s writer.
    static ME: u8 = const { 0 };
}

fn me() -> usize {
    ME.with(|m| m as *const u8 as usize)
}

/// A value behind a reader–writer lock whose readers never wait for waiting writers (nested
/// reads in one thread are fine) and whose self-deadlocks are errors (see the module
/// documentation).
pub(crate) struct ShareCell<T> {
    /// `WRITER` when written, else the number of readers.
    state: AtomicUsize,
    /// The writing thread ([`me`]), 0 when none.
    writer: AtomicUsize,
    /// Threads waiting for the state to change.
    waiters: AtomicUsize,
    park: Mutex<()>,
    wake: Condvar,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through the lock (`&T` under a read lock, shared with
// other readers, so `T: Sync`; `&mut T` under the write lock or through `&mut self`, so
// `T: Send`), as `std::sync::RwLock` requires.
unsafe impl<T: Send + Sync> Sync for ShareCell<T> {}
// SAFETY: the cell owns its value.
unsafe impl<T: Send> Send for ShareCell<T> {}

impl<T: std::fmt::Debug> std::fmt::Debug for ShareCell<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShareCell")
            .field("state", &self.state.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<T> ShareCell<T> {
    pub(crate) fn new(value: T) -> ShareCell<T> {
        ShareCell {
            state: AtomicUsize::new(0),
            writer: AtomicUsize::new(0),
            waiters: AtomicUsize::new(0),
            park: Mutex::new(()),
            wake: Condvar::new(),
            value: UnsafeCell::new(value),
        }
    }

    /// The value, through an exclusive borrow of the cell (no lock).
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    /// The value's address (for `Storage::with_exclusive`, which moves it in and out).
    pub(crate) fn value_ptr(&self) -> *mut T {
        self.value.get()
    }

    fn key(&self) -> usize {
        self as *const Self as usize
    }

    fn try_read(&self) -> bool {
        let s = self.state.load(Ordering::SeqCst);
        s & WRITER == 0
            && self
                .state
                .compare_exchange(s, s + 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
    }

    fn try_write(&self) -> bool {
        self.state
            .compare_exchange(0, WRITER, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// Waits until `attempt` succeeds (it is retried after every release).
    fn wait_for(&self, attempt: impl Fn() -> bool) {
        for _ in 0..64 {
            if attempt() {
                return;
            }
            std::hint::spin_loop();
        }
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let mut g = self.park.lock().unwrap_or_else(|e| e.into_inner());
        while !attempt() {
            g = self.wake.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        drop(g);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    fn notify(&self) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            drop(self.park.lock().unwrap_or_else(|e| e.into_inner()));
            self.wake.notify_all();
        }
    }

    /// A read lock (shared with other readers); [`Error::Aliased`] when this thread holds the
    /// write lock.
    pub(crate) fn read(&self, op: &'static str) -> Result<ReadGuard<'_, T>> {
        if !self.try_read() {
            if self.writer.load(Ordering::SeqCst) == me() {
                return Err(Error::Aliased { op });
            }
            self.wait_for(|| self.try_read());
        }
        READING.with(|r| r.borrow_mut().push(self.key()));
        Ok(ReadGuard {
            cell: self,
            _thread: std::marker::PhantomData,
        })
    }

    /// The write lock (exclusive); [`Error::Aliased`] when this thread already reads or
    /// writes the cell.
    pub(crate) fn write(&self, op: &'static str) -> Result<WriteGuard<'_, T>> {
        let key = self.key();
        if self.writer.load(Ordering::SeqCst) == me() || READING.with(|r| r.borrow().contains(&key))
        {
            return Err(Error::Aliased { op });
        }
        if !self.try_write() {
            self.wait_for(|| self.try_write());
        }
        self.writer.store(me(), Ordering::SeqCst);
        Ok(WriteGuard {
            cell: self,
            _thread: std::marker::PhantomData,
        })
    }
}

/// A read lock of a [`ShareCell`]: the value, shared. Not `Send`: it is released by the
/// thread that took it (whose record of the locks it holds it updates).
pub(crate) struct ReadGuard<'a, T> {
    cell: &'a ShareCell<T>,
    _thread: std::marker::PhantomData<*const ()>,
}

impl<T> std::ops::Deref for ReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: a read lock is held: no writer exists until it is released.
        unsafe { &*self.cell.value.get() }
    }
}

impl<T> Drop for ReadGuard<'_, T> {
    fn drop(&mut self) {
        let key = self.cell.key();
        READING.with(|r| {
            let mut r = r.borrow_mut();
            if let Some(i) = r.iter().rposition(|&k| k == key) {
                r.swap_remove(i);
            }
        });
        self.cell.state.fetch_sub(1, Ordering::SeqCst);
        self.cell.notify();
    }
}

/// The write lock of a [`ShareCell`]: the value, exclusively. Not `Send`, as [`ReadGuard`].
pub(crate) struct WriteGuard<'a, T> {
    cell: &'a ShareCell<T>,
    _thread: std::marker::PhantomData<*const ()>,
}

impl<T> WriteGuard<'_, T> {
    /// The value's address, for moving it out and back in while the lock is held.
    pub(crate) fn as_ptr(&self) -> *mut T {
        self.cell.value.get()
    }
}

impl<T> std::ops::Deref for WriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the write lock is held: no other reference to the value exists.
        unsafe { &*self.cell.value.get() }
    }
}

impl<T> std::ops::DerefMut for WriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and this guard is borrowed uniquely.
        unsafe { &mut *self.cell.value.get() }
    }
}

impl<T> Drop for WriteGuard<'_, T> {
    fn drop(&mut self) {
        self.cell.writer.store(0, Ordering::SeqCst);
        self.cell.state.store(0, Ordering::SeqCst);
        self.cell.notify();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn nested_reads_and_self_deadlocks_are_errors() {
        let c = ShareCell::new(5);
        let a = c.read("t").unwrap();
        let b = c.read("t").unwrap();
        assert_eq!(*a + *b, 10);
        assert!(matches!(c.write("t"), Err(Error::Aliased { op: "t" })));
        drop((a, b));
        let mut w = c.write("t").unwrap();
        *w = 6;
        assert!(matches!(c.read("t"), Err(Error::Aliased { .. })));
        assert!(matches!(c.write("t"), Err(Error::Aliased { .. })));
        drop(w);
        assert_eq!(*c.read("t").unwrap(), 6);
    }

    #[test]
    fn writers_exclude_each_other_across_threads() {
        let c = Arc::new(ShareCell::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        let mut w = c.write("t").unwrap();
                        // A read-modify-write that a race would lose increments of.
                        let v = *w;
                        std::hint::black_box(&v);
                        *w = v + 1;
                        drop(w);
                        let r = c.read("t").unwrap();
                        assert!(*r > 0);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*c.read("t").unwrap(), 8000);
    }
}
