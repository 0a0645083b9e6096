//! A small lock for the allocator's state, biased to the thread that uses it.
//!
//! An uncontended `std::sync::Mutex` costs two atomic read-modify-writes (lock and unlock). The
//! plain form of this lock costs one (a compare-exchange to lock, a release store to unlock).
//! That one is still the largest single cost of a cached allocation + free pair on the GPU
//! machines' Intel hosts: two compare-exchange + store pairs take 21-23 ns there (3-4 ns on the
//! AMD development VM), against ~50 ns for the whole allocation + free pair.
//!
//! So the lock is *biased*. When one thread has taken the lock many times in a row, the lock
//! records that thread's slot (a per-thread word) as its owner. The owner then enters with no
//! read-modify-write at all: it writes the lock's address in its slot, keeps the compiler from
//! reordering, and checks that it is still the owner; it leaves by clearing its slot. Any other
//! thread takes the plain lock and revokes the bias: it clears the owner, runs Linux's
//! `membarrier` (every running thread of the process passes a full memory barrier), then waits
//! until the owner's slot no longer names this lock. This is the asymmetric form of Dekker's
//! handshake: either the owner's store to its slot is visible to the revoker after the
//! barrier, or the owner's check after that store sees that it is no longer the owner. A revocation costs a system call (microseconds), so the number of
//! acquisitions in a row that earns a thread the bias doubles after every revocation of a bias
//! held less than 250 µs, and goes back to 64 after one held longer: a lock shared by threads
//! taking turns settles on the plain protocol, and one mostly used by one thread (another
//! reading the statistics now and then) stays biased.
//!
//! Without `membarrier` (other systems, or a kernel or sandbox that refuses it) the lock never
//! biases and every thread takes the plain path. Waiters spin with exponential backoff and then
//! yield, so contention degrades gracefully. A panic while the lock is held releases it (no
//! poisoning): the allocator's operations leave the state consistent at every early return,
//! and refusing all later service would be worse.

use std::cell::{Cell, UnsafeCell};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering, compiler_fence};
use std::sync::{Mutex, OnceLock};

/// Longest spin (in `spin_loop` hints) between two tries before waiters start yielding.
const MAX_BACKOFF: u32 = 1 << 10;

/// Plain-path acquisitions in a row by one thread that bias the lock to it, at first.
const FIRST_BIAS_RUN: u32 = 64;

/// The most that run can grow to (it doubles after every revocation of a short-lived bias).
const MAX_BIAS_RUN: u32 = 1 << 20;

/// A bias revoked after holding at least this long was worth its revocation (a `membarrier`
/// costs a few microseconds; a biased pair saves ~15 ns on the hosts measured, thousands of
/// pairs in this time): the run that earns the next one goes back to [`FIRST_BIAS_RUN`].
const LONG_BIAS: std::time::Duration = std::time::Duration::from_micros(250);

/// A thread's flag: the address of the lock it holds through a bias, 0 when none. Slots are
/// never freed (a revoker may read the flag of a thread that has since exited); an exiting
/// thread gives its slot back to [`FREE_SLOTS`] for the next new thread. A cache line each, so
/// that owners on different threads do not share one.
///
/// A thread holds at most one lock through a bias: while it holds one, it takes any other on
/// the plain path. So a revoker waiting for a flag to leave *its* lock never waits on a thread
/// that is waiting for it.
#[repr(align(64))]
struct Slot {
    inside: AtomicUsize,
}

static FREE_SLOTS: Mutex<Vec<&'static Slot>> = Mutex::new(Vec::new());

/// Gives the thread's slot back when the thread exits.
struct SlotReturn(Cell<Option<&'static Slot>>);

impl Drop for SlotReturn {
    fn drop(&mut self) {
        if let Some(slot) = self.0.take() {
            let _ = SLOT.try_with(|s| s.set(std::ptr::null()));
            FREE_SLOTS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(slot);
        }
    }
}

thread_local! {
    /// The thread's slot (null until first needed): constant-initialised with no destructor,
    /// so reading it is one load.
    static SLOT: Cell<*const Slot> = const { Cell::new(std::ptr::null()) };
    static SLOT_RETURN: SlotReturn = const { SlotReturn(Cell::new(None)) };
}

/// The calling thread's slot, or `None` while the thread is being torn down.
#[inline(always)]
fn my_slot() -> Option<&'static Slot> {
    let p = SLOT.get();
    if p.is_null() {
        return new_slot();
    }
    // SAFETY: slots are leaked `Box`es, never freed.
    Some(unsafe { &*p })
}

#[cold]
fn new_slot() -> Option<&'static Slot> {
    let slot = FREE_SLOTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .pop()
        .unwrap_or_else(|| {
            Box::leak(Box::new(Slot {
                inside: AtomicUsize::new(0),
            }))
        });
    // A thread whose destructors have started gets no slot (and keeps to the plain path).
    match SLOT_RETURN.try_with(|r| r.0.set(Some(slot))) {
        Ok(()) => {
            SLOT.set(slot);
            Some(slot)
        }
        Err(_) => {
            FREE_SLOTS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(slot);
            None
        }
    }
}

/// Whether this process may bias locks: `membarrier`'s private expedited command registered.
fn bias_supported() -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED.get_or_init(membarrier::register)
}

#[cfg(target_os = "linux")]
mod membarrier {
    // From <linux/membarrier.h> (kernel ABI, stable since Linux 4.14).
    const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    fn call(cmd: libc::c_long) -> bool {
        // SAFETY: `membarrier(cmd, flags = 0, cpu_id = 0)` reads and writes no user memory.
        unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                cmd,
                0 as libc::c_long,
                0 as libc::c_long,
            ) == 0
        }
    }

    pub(super) fn register() -> bool {
        std::env::var_os("GENESIS_NO_BIASED_LOCK").is_none() && call(CMD_REGISTER_PRIVATE_EXPEDITED)
    }

    /// Every running thread of this process passes a full memory barrier before this returns.
    /// After a successful registration the kernel does not refuse the command (its errors are
    /// an unknown command and a missing registration; the registration is inherited by fork).
    pub(super) fn barrier() -> bool {
        call(CMD_PRIVATE_EXPEDITED)
    }
}

#[cfg(not(target_os = "linux"))]
mod membarrier {
    pub(super) fn register() -> bool {
        false
    }
    pub(super) fn barrier() -> bool {
        false
    }
}

/// Bookkeeping of the plain path (read and written only while `locked` is held).
struct Run {
    /// The slot (address) of the thread that took the plain path last, and how many times in
    /// a row it did.
    slot: usize,
    count: u32,
    /// The run that biases the lock.
    needed: u32,
    /// When the current bias was granted.
    granted: Option<std::time::Instant>,
    /// [`LONG_BIAS`] (tests change it).
    long_bias: std::time::Duration,
    /// Tests turn biasing off for one lock, as `GENESIS_NO_BIASED_LOCK` does for all.
    #[cfg(test)]
    never_bias: bool,
}

pub(crate) struct Lock<T> {
    locked: AtomicBool,
    /// The address of the owner's [`Slot`], or 0 when the lock is biased to no thread. Changed
    /// only while `locked` is held.
    bias: AtomicUsize,
    run: UnsafeCell<Run>,
    value: UnsafeCell<T>,
}

// SAFETY: access to `value` and `run` is serialised: `run` by `locked`, `value` by `locked` or,
// for the owner of the bias, by its slot's flag and the handshake described in the module docs
// (the owner's entry and exit are acquire/release on `bias` and its flag; a revoker waits for
// the slot with acquire after clearing `bias`).
unsafe impl<T: Send> Sync for Lock<T> {}
// SAFETY: the lock owns its value.
unsafe impl<T: Send> Send for Lock<T> {}

impl<T> Lock<T> {
    pub(crate) fn new(value: T) -> Lock<T> {
        Lock {
            locked: AtomicBool::new(false),
            bias: AtomicUsize::new(0),
            run: UnsafeCell::new(Run {
                slot: 0,
                count: 0,
                needed: FIRST_BIAS_RUN,
                granted: None,
                long_bias: LONG_BIAS,
                #[cfg(test)]
                never_bias: false,
            }),
            value: UnsafeCell::new(value),
        }
    }

    #[inline]
    pub(crate) fn lock(&self) -> Guard<'_, T> {
        if let Some(slot) = my_slot() {
            let me = slot as *const Slot as usize;
            if self.bias.load(Ordering::Relaxed) == me && slot.inside.load(Ordering::Relaxed) == 0 {
                slot.inside.store(self.addr(), Ordering::Relaxed);
                // The store above and the load below may still be reordered by the CPU; a
                // revoker's `membarrier` orders them for it (module docs).
                compiler_fence(Ordering::SeqCst);
                if self.bias.load(Ordering::Acquire) == me {
                    return Guard {
                        lock: self,
                        slot: Some(slot),
                        _not_send: std::marker::PhantomData,
                    };
                }
                slot.inside.store(0, Ordering::Release);
            }
        }
        self.lock_slow()
    }

    fn addr(&self) -> usize {
        self as *const Self as usize
    }

    /// The plain path: takes `locked`, then revokes the bias if a thread has it.
    #[cold]
    fn lock_slow(&self) -> Guard<'_, T> {
        self.acquire_locked();
        let owner = self.bias.load(Ordering::Relaxed);
        if owner != 0 {
            self.bias.store(0, Ordering::Relaxed);
            // A thread revoking its own bias (it holds another lock through a bias) needs no
            // barrier: its own slot's stores are in order for it.
            let mine = my_slot().is_some_and(|s| s as *const Slot as usize == owner);
            if !mine && !membarrier::barrier() {
                // Unreachable after a successful registration (`membarrier::barrier`); should
                // it happen, let the owner's store buffer drain before looking.
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            // SAFETY: `bias` holds only addresses of slots, which are never freed.
            let slot = unsafe { &*(owner as *const Slot) };
            // For the owner itself this waits only if it is already inside this lock (taking
            // it again): that deadlocks, as the plain lock does, rather than letting two
            // guards alias.
            let mut backoff = 1u32;
            while slot.inside.load(Ordering::Acquire) == self.addr() {
                backoff = Self::wait(backoff);
            }
            // SAFETY: `run` is accessed only while `locked` is held, which it is.
            let run = unsafe { &mut *self.run.get() };
            // Biases revoked soon after they were granted (threads taking turns) make the next
            // one harder to earn; one that held long enough paid for its revocation.
            let held_long = run
                .granted
                .take()
                .is_some_and(|t| t.elapsed() >= run.long_bias);
            run.needed = if held_long {
                FIRST_BIAS_RUN
            } else {
                run.needed.saturating_mul(2).min(MAX_BIAS_RUN)
            };
        }
        Guard {
            lock: self,
            slot: None,
            _not_send: std::marker::PhantomData,
        }
    }

    /// Takes `locked` with exponential backoff: a waiter reads the lock's line less and less
    /// often, so the holder (and the next owner) do not fight every waiter for it. After the
    /// backoff reaches its cap, waiters yield the CPU between tries.
    fn acquire_locked(&self) {
        let mut backoff = 1u32;
        loop {
            if !self.locked.load(Ordering::Relaxed)
                && self
                    .locked
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            backoff = Self::wait(backoff);
        }
    }

    fn wait(backoff: u32) -> u32 {
        if backoff <= MAX_BACKOFF {
            for _ in 0..backoff {
                std::hint::spin_loop();
            }
            backoff * 2
        } else {
            std::thread::yield_now();
            backoff
        }
    }

    /// Leaves the plain path; after a long enough run of this thread, biases the lock to it.
    #[cold]
    fn unlock_slow(&self) {
        if let Some(slot) = my_slot() {
            let me = slot as *const Slot as usize;
            // SAFETY: `run` is accessed only while `locked` is held, which it is.
            let run = unsafe { &mut *self.run.get() };
            if run.slot == me {
                // Saturating: without biasing nothing else resets the run, and a panic here
                // (overflow checks) would leave `locked` set forever.
                run.count = run.count.saturating_add(1);
            } else {
                run.slot = me;
                run.count = 1;
            }
            if run.count >= run.needed {
                // A run that has earned the bias starts again whether or not the bias is
                // granted, so the count stays below `needed` (at most `MAX_BIAS_RUN`).
                run.count = 0;
                if self.may_bias(run) {
                    run.granted = Some(std::time::Instant::now());
                    // Release: the owner's first biased entry (an acquire load of `bias`)
                    // sees everything done under `locked` before.
                    self.bias.store(me, Ordering::Release);
                }
            }
        }
        self.locked.store(false, Ordering::Release);
    }

    /// Whether this lock may be biased (the process supports it; tests may refuse it).
    fn may_bias(&self, run: &Run) -> bool {
        #[cfg(test)]
        if run.never_bias {
            return false;
        }
        let _ = run;
        bias_supported()
    }

    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    /// Whether the lock is biased to the calling thread (for tests).
    #[cfg(test)]
    fn biased_to_me(&self) -> bool {
        my_slot().is_some_and(|s| self.bias.load(Ordering::Relaxed) == s as *const Slot as usize)
    }
}

pub(crate) struct Guard<'a, T> {
    lock: &'a Lock<T>,
    /// The owner's slot when it entered through the bias; `None` on the plain path.
    slot: Option<&'static Slot>,
    /// `!Send`, as `std::sync::MutexGuard`: the guard is released on the thread that took it
    /// (a biased guard clears that thread's slot; the plain path counts that thread's run).
    _not_send: std::marker::PhantomData<*const ()>,
}

// SAFETY: a shared `&Guard` gives only `&T` (`Deref`), so sharing the guard between threads
// shares `&T`, which needs exactly `T: Sync` (as `std::sync::MutexGuard`). The raw-pointer
// marker above only removes the automatic `Send`/`Sync`.
unsafe impl<T: Sync> Sync for Guard<'_, T> {}

impl<T> Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while this thread holds the lock.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard exists only while this thread holds the lock, so the access is
        // exclusive.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        match self.slot {
            Some(slot) => slot.inside.store(0, Ordering::Release),
            None => self.lock.unlock_slow(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn serialises_threads() {
        let l = Arc::new(Lock::new(0u64));
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let l = Arc::clone(&l);
                std::thread::spawn(move || {
                    for _ in 0..100_000 {
                        *l.lock() += 1;
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(*l.lock(), 800_000);
    }

    /// One thread does most of the work (and earns the bias, over and over); others come in
    /// now and then and revoke it. A non-atomic read-modify-write of two words under the lock
    /// loses updates or tears if two threads are ever inside at once.
    #[test]
    fn bias_revocation_keeps_mutual_exclusion() {
        let l = Arc::new(Lock::new((0u64, 0u64)));
        let owner = {
            let l = Arc::clone(&l);
            std::thread::spawn(move || {
                let mut biased = 0u32;
                for _ in 0..400_000 {
                    let mut g = l.lock();
                    biased += u32::from(g.slot.is_some());
                    let v = g.0;
                    g.0 = v + 1;
                    g.1 = v + 1;
                }
                biased
            })
        };
        let others: Vec<_> = (0..3)
            .map(|_| {
                let l = Arc::clone(&l);
                std::thread::spawn(move || {
                    for i in 0..2_000 {
                        {
                            let mut g = l.lock();
                            assert_eq!(g.0, g.1, "two holders at once");
                            let v = g.0;
                            g.0 = v + 1;
                            g.1 = v + 1;
                        }
                        if i % 64 == 0 {
                            std::thread::sleep(std::time::Duration::from_micros(50));
                        }
                    }
                })
            })
            .collect();
        let biased = owner.join().unwrap();
        for h in others {
            h.join().unwrap();
        }
        let g = l.lock();
        assert_eq!(*g, (406_000, 406_000));
        if bias_supported() {
            assert!(biased > 0, "the busy thread never held the bias");
        }
    }

    #[test]
    fn a_long_run_biases_the_lock_and_another_thread_revokes_it() {
        let l = Arc::new(Lock::new(0u32));
        for _ in 0..FIRST_BIAS_RUN + 1 {
            *l.lock() += 1;
        }
        assert_eq!(l.biased_to_me(), bias_supported());
        let l2 = Arc::clone(&l);
        std::thread::spawn(move || *l2.lock() += 1).join().unwrap();
        assert!(!l.biased_to_me());
        assert_eq!(*l.lock(), FIRST_BIAS_RUN + 2);
    }

    /// A thread holding one lock through its bias takes a second on the plain path (revoking
    /// its own bias there), while other threads revoke both biases: no deadlock, no lost update.
    #[test]
    fn nested_locks_with_biases() {
        let l1 = Arc::new(Lock::new(0u64));
        let l2 = Arc::new(Lock::new(0u64));
        let nester = {
            let (l1, l2) = (Arc::clone(&l1), Arc::clone(&l2));
            std::thread::spawn(move || {
                for i in 0..200_000u32 {
                    if i % 3 == 0 {
                        let mut a = l1.lock();
                        let mut b = l2.lock();
                        *a += 1;
                        *b += 1;
                    } else {
                        *l2.lock() += 1;
                        *l1.lock() += 1;
                    }
                }
            })
        };
        let others: Vec<_> = [Arc::clone(&l1), Arc::clone(&l2)]
            .into_iter()
            .map(|l| {
                std::thread::spawn(move || {
                    for _ in 0..1_000 {
                        *l.lock() += 1;
                        std::thread::sleep(std::time::Duration::from_micros(20));
                    }
                })
            })
            .collect();
        nester.join().unwrap();
        for h in others {
            h.join().unwrap();
        }
        assert_eq!((*l1.lock(), *l2.lock()), (201_000, 201_000));
    }

    /// Revocations soon after the grant double the run that earns the bias; a bias that held
    /// long brings it back to the first run.
    #[test]
    fn the_run_that_earns_the_bias_adapts() {
        if !bias_supported() {
            return;
        }
        let l = Arc::new(Lock::new(0u32));
        // `run` is touched only under `locked`; the tests below read and set it while no other
        // thread uses the lock.
        let needed = |l: &Lock<u32>| {
            let _g = l.lock();
            // SAFETY: no other thread uses the lock now.
            unsafe { (*l.run.get()).needed }
        };
        let set_long = |l: &Lock<u32>, d: std::time::Duration| {
            let _g = l.lock();
            // SAFETY: as above.
            unsafe { (*l.run.get()).long_bias = d }
        };
        set_long(&l, std::time::Duration::from_secs(3600));
        let revoke = |l: &Arc<Lock<u32>>| {
            let l2 = Arc::clone(l);
            std::thread::spawn(move || *l2.lock() += 1).join().unwrap();
        };
        for _ in 0..FIRST_BIAS_RUN {
            *l.lock() += 1;
        }
        assert!(l.biased_to_me());
        revoke(&l);
        assert_eq!(needed(&l), 2 * FIRST_BIAS_RUN);
        for _ in 0..2 * FIRST_BIAS_RUN {
            *l.lock() += 1;
        }
        assert!(l.biased_to_me());
        set_long(&l, std::time::Duration::ZERO);
        revoke(&l);
        assert_eq!(needed(&l), FIRST_BIAS_RUN);
    }

    /// Without biasing nothing resets the run of one thread; 2^32 acquisitions must neither
    /// overflow the counter (a panic in the guard's drop, with overflow checks, would leave the
    /// lock held forever) nor stop the lock from working. The run starts near the limit.
    #[test]
    fn the_run_counter_survives_u32_max_acquisitions_without_bias() {
        let l = Lock::new(0u64);
        {
            let _g = l.lock();
            // SAFETY: `run` is accessed only while `locked` is held; the guard above holds it
            // (plain path: the lock is new, so not biased).
            let run = unsafe { &mut *l.run.get() };
            run.never_bias = true;
            run.needed = u32::MAX;
            run.slot = my_slot().map_or(0, |s| s as *const Slot as usize);
            run.count = u32::MAX - 3;
        }
        for _ in 0..16 {
            *l.lock() += 1;
        }
        assert!(!l.biased_to_me());
        // Taken and released from another thread too: the lock was never left held.
        let l = Arc::new(l);
        let l2 = Arc::clone(&l);
        std::thread::spawn(move || *l2.lock() += 1).join().unwrap();
        assert_eq!(*l.lock(), 17);
        let _g = l.lock();
        // SAFETY: as above.
        let count = unsafe { (*l.run.get()).count };
        assert!(count < u32::MAX, "count {count}");
    }

    /// With biasing on, a run reaching `needed` starts again, biased or not.
    #[test]
    fn the_run_counter_restarts_when_it_earns_the_bias() {
        let l = Lock::new(0u32);
        {
            let _g = l.lock();
            // SAFETY: as in the test above.
            unsafe { (*l.run.get()).never_bias = true };
        }
        for _ in 0..3 * FIRST_BIAS_RUN {
            *l.lock() += 1;
        }
        let _g = l.lock();
        // SAFETY: as above.
        let count = unsafe { (*l.run.get()).count };
        assert!(count < FIRST_BIAS_RUN, "count {count}");
    }

    /// The guard is `Sync` only for a `Sync` value and never `Send` (as `MutexGuard`).
    /// Inherent constants win over the trait's when their bounds hold (the `impls` trick).
    #[test]
    fn guard_auto_traits_match_mutex_guard() {
        use std::marker::PhantomData;
        trait Fallback {
            const SEND: bool = false;
            const SYNC: bool = false;
        }
        struct IsSend<T: ?Sized>(PhantomData<T>);
        impl<T: ?Sized + Send> IsSend<T> {
            const SEND: bool = true;
        }
        impl<T: ?Sized> Fallback for IsSend<T> {}
        struct IsSync<T: ?Sized>(PhantomData<T>);
        impl<T: ?Sized + Sync> IsSync<T> {
            const SYNC: bool = true;
        }
        impl<T: ?Sized> Fallback for IsSync<T> {}
        const { assert!(!<IsSend<Guard<'static, u32>>>::SEND) };
        const { assert!(<IsSync<Guard<'static, u32>>>::SYNC) };
        const { assert!(!<IsSync<Guard<'static, Cell<u32>>>>::SYNC) };
        // std's guard, for comparison.
        const { assert!(!<IsSend<std::sync::MutexGuard<'static, u32>>>::SEND) };
        const { assert!(!<IsSync<std::sync::MutexGuard<'static, Cell<u32>>>>::SYNC) };
        // The lock itself stays Send + Sync for a Send value.
        const { assert!(<IsSync<Lock<Cell<u32>>>>::SYNC) };
        const { assert!(<IsSend<Lock<Cell<u32>>>>::SEND) };
    }

    #[test]
    fn a_panic_releases_the_lock() {
        let l = Arc::new(Lock::new(1));
        for _ in 0..FIRST_BIAS_RUN + 1 {
            drop(l.lock());
        }
        let l2 = Arc::clone(&l);
        let _ = std::thread::spawn(move || {
            let _g = l2.lock();
            panic!("while locked");
        })
        .join();
        assert_eq!(*l.lock(), 1);
        // And with the bias held by the panicking thread.
        let l3 = Arc::clone(&l);
        let _ = std::thread::spawn(move || {
            for _ in 0..4 * FIRST_BIAS_RUN {
                drop(l3.lock());
            }
            let _g = l3.lock();
            panic!("while locked (biased)");
        })
        .join();
        assert_eq!(*l.lock(), 1);
    }
}
