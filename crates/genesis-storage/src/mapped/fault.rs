//! Keeps a mapping whose file shrinks under it from killing the process.
//!
//! A mapped file (or shared-memory segment) can be truncated by any process that can open it,
//! and a later access to a page past the new end raises `SIGBUS`, whose default action kills
//! the process. No lock prevents it (`flock` is advisory, Linux has no mandatory locks, and a
//! lease only delays the writer), and a private mapping does not either: truncation removes
//! private pages too. Copying the file would give up zero-copy. So Genesis does what the JVM
//! does for `MappedByteBuffer`s and Firefox for its mapped archives: it handles the fault.
//!
//! Every mapping registers its address range here. A process-wide `SIGBUS` handler (installed
//! with the first mapping, chaining to the handler it replaces) looks the faulting address up;
//! when it lies in a registered range, the handler maps zeroed anonymous pages over the range
//! from the faulting page to the end of the mapping, marks the registration as faulted and
//! returns, so the access completes (reading zeros; a write goes to the anonymous page). The
//! storage then reports [`Error::MappingTruncated`](crate::Error::MappingTruncated) from
//! `flush` and `check_mapping`. A fault elsewhere goes to the previous handler (or the default
//! action). The same covers a read error of the file (`EIO`) and a write to an unreserved page
//! of a full `tmpfs`, which also raise `SIGBUS`.
//!
//! The handler runs only async-signal-safe code: atomic loads of a table of slots (chunks
//! that are never freed, each slot read under a sequence count) and `mmap`.
//!
//! Linux only; elsewhere registration is a no-op and the caveat is documented on
//! [`Storage::map_file`](crate::Storage::map_file).

/// A registered range; unregisters when dropped (drop it before unmapping the range).
#[derive(Debug)]
pub(crate) struct Registration {
    #[cfg(target_os = "linux")]
    slot: &'static imp::Slot,
}

impl Registration {
    /// Whether an access faulted in the range (and zeroed pages replaced the rest of it).
    pub(crate) fn faulted(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            self.slot.faulted()
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }
}

/// Registers the `len` bytes at `ptr` (a mapping this process owns) with the fault handler.
pub(crate) fn register(
    ptr: *const u8,
    len: usize,
    writable: bool,
) -> std::io::Result<Registration> {
    #[cfg(target_os = "linux")]
    {
        imp::install()?;
        Ok(Registration {
            slot: imp::claim(ptr as usize, len, writable),
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (ptr, len, writable);
        Ok(Registration {})
    }
}

#[cfg(target_os = "linux")]
impl Drop for Registration {
    fn drop(&mut self) {
        self.slot.release();
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering, fence};

    const CHUNK: usize = 64;

    /// One registered range. Written only by the thread that claimed it (`claimed`), between
    /// two increments of `seq` (odd while being written); read by the handler.
    pub(crate) struct Slot {
        claimed: AtomicBool,
        seq: AtomicUsize,
        active: AtomicBool,
        start: AtomicUsize,
        end: AtomicUsize,
        writable: AtomicBool,
        faulted: AtomicBool,
    }

    impl std::fmt::Debug for Slot {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Slot")
                .field("start", &self.start.load(Ordering::Relaxed))
                .field("end", &self.end.load(Ordering::Relaxed))
                .field("faulted", &self.faulted())
                .finish()
        }
    }

    impl Slot {
        const fn new() -> Slot {
            Slot {
                claimed: AtomicBool::new(false),
                seq: AtomicUsize::new(0),
                active: AtomicBool::new(false),
                start: AtomicUsize::new(0),
                end: AtomicUsize::new(0),
                writable: AtomicBool::new(false),
                faulted: AtomicBool::new(false),
            }
        }

        pub(crate) fn faulted(&self) -> bool {
            self.faulted.load(Ordering::Acquire)
        }

        fn write(&self, f: impl FnOnce()) {
            self.seq.fetch_add(1, Ordering::Relaxed);
            fence(Ordering::Release);
            f();
            self.seq.fetch_add(1, Ordering::Release);
        }

        pub(crate) fn release(&self) {
            self.write(|| self.active.store(false, Ordering::Relaxed));
            self.claimed.store(false, Ordering::Release);
        }

        /// The range `(start, end, writable)` if the slot is active and was read whole.
        fn read(&self) -> Option<(usize, usize, bool)> {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 % 2 == 1 {
                // Being written: by a registration or release, never of the range that
                // faulted (its owner is accessing it, not registering or dropping it).
                return None;
            }
            let active = self.active.load(Ordering::Relaxed);
            let start = self.start.load(Ordering::Relaxed);
            let end = self.end.load(Ordering::Relaxed);
            let writable = self.writable.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            (active && self.seq.load(Ordering::Relaxed) == s1).then_some((start, end, writable))
        }
    }

    struct Chunk {
        slots: [Slot; CHUNK],
        next: *const Chunk,
    }

    /// The newest chunk; chunks are leaked, so the handler may walk them at any time.
    static HEAD: AtomicPtr<Chunk> = AtomicPtr::new(std::ptr::null_mut());

    fn chunks() -> impl Iterator<Item = &'static Chunk> {
        let mut p = HEAD.load(Ordering::Acquire).cast_const();
        std::iter::from_fn(move || {
            // SAFETY: chunks are leaked boxes, never freed; `next` is written before the chunk
            // is published (release CAS on HEAD, acquire load above).
            let c = unsafe { p.as_ref() }?;
            p = c.next;
            Some(c)
        })
    }

    pub(crate) fn claim(start: usize, len: usize, writable: bool) -> &'static Slot {
        let slot = loop {
            if let Some(s) = chunks().flat_map(|c| c.slots.iter()).find(|s| {
                s.claimed
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            }) {
                break s;
            }
            let chunk = Box::leak(Box::new(Chunk {
                slots: [const { Slot::new() }; CHUNK],
                next: std::ptr::null(),
            }));
            let mut head = HEAD.load(Ordering::Acquire);
            loop {
                chunk.next = head;
                match HEAD.compare_exchange_weak(head, chunk, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => break,
                    Err(h) => head = h,
                }
            }
        };
        slot.write(|| {
            slot.start.store(start, Ordering::Relaxed);
            slot.end.store(start.saturating_add(len), Ordering::Relaxed);
            slot.writable.store(writable, Ordering::Relaxed);
            slot.faulted.store(false, Ordering::Relaxed);
            slot.active.store(true, Ordering::Relaxed);
        });
        slot
    }

    /// The handler this one replaced, and the page size.
    struct Prev {
        action: libc::sigaction,
        page: usize,
    }

    // SAFETY: a plain C struct of integers, a signal mask and a function pointer; written once
    // before the handler is installed and only read afterwards.
    unsafe impl Sync for Prev {}
    // SAFETY: as above.
    unsafe impl Send for Prev {}

    static PREV: OnceLock<Prev> = OnceLock::new();
    static INSTALLED: OnceLock<Result<(), i32>> = OnceLock::new();

    pub(crate) fn install() -> std::io::Result<()> {
        let r = INSTALLED.get_or_init(|| {
            // SAFETY: sigaction with a null new action only reads the current one into `old`,
            // a zeroed sigaction (a valid value of the C struct).
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            if unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) } != 0 {
                return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
            }
            // SAFETY: sysconf has no preconditions.
            let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
                .ok()
                .filter(|p| p.is_power_of_two())
                .unwrap_or(4096);
            let _ = PREV.set(Prev { action: old, page });
            // SAFETY: zeroed is a valid sigaction; the fields are filled below.
            let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
            new.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
            new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
            // SAFETY: `sa_mask` is a valid sigset_t to initialise.
            unsafe { libc::sigemptyset(&mut new.sa_mask) };
            // SAFETY: installs a handler with the signature SA_SIGINFO requires.
            if unsafe { libc::sigaction(libc::SIGBUS, &new, std::ptr::null_mut()) } != 0 {
                return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
            }
            Ok(())
        });
        r.map_err(std::io::Error::from_raw_os_error)
    }

    /// Maps zeroed pages over a registered range from the faulting page on; `false` when the
    /// address is in no registered range (or the mapping failed).
    fn recover(addr: usize) -> bool {
        let Some(page) = PREV.get().map(|p| p.page) else {
            return false;
        };
        for slot in chunks().flat_map(|c| c.slots.iter()) {
            let Some((start, end, writable)) = slot.read() else {
                continue;
            };
            if addr < start || addr >= end {
                continue;
            }
            let from = addr & !(page - 1);
            // The mapping covers whole pages: up to the page boundary after `end`.
            let to = end.next_multiple_of(page);
            let prot = if writable {
                libc::PROT_READ | libc::PROT_WRITE
            } else {
                libc::PROT_READ
            };
            // SAFETY: `from..to` lies inside a mapping this process made and still owns (the
            // range is registered until just before it is unmapped, and the faulting thread is
            // accessing it): replacing its pages with fresh anonymous ones changes only the
            // bytes the storage holds, which were lost with the file's truncation.
            let r = unsafe {
                libc::mmap(
                    from as *mut libc::c_void,
                    to - from,
                    prot,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if r == libc::MAP_FAILED {
                return false;
            }
            slot.faulted.store(true, Ordering::Release);
            return true;
        }
        false
    }

    extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
        let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
        // SAFETY: errno is thread-local; saved and restored around `mmap`.
        let errno = unsafe { *libc::__errno_location() };
        // Faults have a positive code; kill/sigqueue (user-sent) do not.
        let recovered = code > 0 && recover(addr);
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
        if recovered {
            return;
        }
        chain(sig, info, ctx);
    }

    /// Hands the signal to the handler this one replaced, or takes the default action.
    fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        let prev = PREV.get().map(|p| &p.action);
        match prev {
            Some(a) if a.sa_sigaction != libc::SIG_DFL && a.sa_sigaction != libc::SIG_IGN => {
                if a.sa_flags & libc::SA_SIGINFO != 0 {
                    // SAFETY: the previous handler was installed with SA_SIGINFO, so it has
                    // this signature.
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        unsafe { std::mem::transmute(a.sa_sigaction) };
                    f(sig, info, ctx);
                } else {
                    // SAFETY: a plain handler takes the signal number.
                    let f: extern "C" fn(libc::c_int) =
                        unsafe { std::mem::transmute(a.sa_sigaction) };
                    f(sig);
                }
            }
            _ => {
                // The default action: restore it; a fault re-executes the access and dies of
                // it, a sent signal is raised again (delivered when this handler returns).
                // SAFETY: zeroed is a valid sigaction (SIG_DFL, empty mask).
                let mut dfl: libc::sigaction = unsafe { std::mem::zeroed() };
                dfl.sa_sigaction = libc::SIG_DFL;
                // SAFETY: sigaction and raise are async-signal-safe.
                unsafe {
                    libc::sigaction(sig, &dfl, std::ptr::null_mut());
                    // SAFETY: as above.
                    if (*info).si_code <= 0 {
                        libc::raise(sig);
                    }
                }
            }
        }
    }
}
