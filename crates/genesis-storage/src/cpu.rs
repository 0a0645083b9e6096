//! Aligned host memory.

use std::alloc::Layout as AllocLayout;
use std::ptr::NonNull;

use crate::{DType, Error, Result, WithDType};

/// The default alignment of CPU storages: one cache line (and any SIMD width in use).
pub const DEFAULT_ALIGN: usize = 64;

/// The most bytes one host allocation may ask for: the least of the machine's physical memory
/// plus swap (Linux, read once with `sysinfo`), the memory limit of the process's control
/// group plus its swap limit (Linux cgroup v2 `memory.max` + `memory.swap.max`, v1
/// `memory.limit_in_bytes` or `memory.memsw.limit_in_bytes`, read once; a container's limit),
/// and the cap [`set_host_memory_limit`] sets; `None` (no limit but the allocator's) when none
/// of them is known. A host that overcommits memory grants larger requests and kills the
/// process when they are touched (zeroed), so they are refused up front.
pub fn host_memory_limit() -> Option<usize> {
    static LIMIT: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let machine =
        *LIMIT.get_or_init(
            || match (read_host_memory_limit(), read_cgroup_memory_limit()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        );
    let cap = USER_CAP.load(std::sync::atomic::Ordering::Relaxed);
    match (machine, cap) {
        (m, 0) => m,
        (Some(m), c) => Some(m.min(c)),
        (None, c) => Some(c),
    }
}

/// The cap of [`set_host_memory_limit`] (0: none).
static USER_CAP: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Caps what one host allocation may ask for below what the machine has (`None` removes the
/// cap): a larger request is then refused with [`Error::HostOutOfMemory`] before any memory is
/// touched, as one beyond the machine is. For processes that share a machine, or tests that
/// should never take a large share of it. Process-wide; it does not free or move anything
/// already allocated.
pub fn set_host_memory_limit(bytes: Option<usize>) {
    USER_CAP.store(
        bytes.map_or(0, |b| b.max(1)),
        std::sync::atomic::Ordering::Relaxed,
    );
}

#[cfg(target_os = "linux")]
fn read_host_memory_limit() -> Option<usize> {
    // SAFETY: `sysinfo` only writes the zero-initialised struct it is given.
    let mut info: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a valid, writable `struct sysinfo`.
    if unsafe { libc::sysinfo(&mut info) } != 0 {
        return None;
    }
    let unit = u128::from(info.mem_unit.max(1));
    #[allow(clippy::unnecessary_cast)] // the field types differ between targets
    let total = (info.totalram as u128 + info.totalswap as u128) * unit;
    Some(usize::try_from(total).unwrap_or(usize::MAX))
}

#[cfg(not(target_os = "linux"))]
fn read_host_memory_limit() -> Option<usize> {
    None
}

/// The memory limit of this process's control group, plus its swap limit (see
/// [`host_memory_limit`]); `None` when there is none or it cannot be read.
#[cfg(target_os = "linux")]
fn read_cgroup_memory_limit() -> Option<usize> {
    let groups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let read = |path: String| std::fs::read_to_string(path).ok();
    for line in groups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = path.trim_end_matches('/');
        // cgroup v2 (the unified hierarchy, no controllers named) or v1's memory controller:
        // the directory, its memory and swap files, and whether it is v1.
        let (dir, [mem, swap], v1) = if controllers.is_empty() {
            let files = ["memory.max", "memory.swap.max"];
            (format!("/sys/fs/cgroup{path}"), files, false)
        } else if controllers.split(',').any(|c| c == "memory") {
            let files = ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"];
            (format!("/sys/fs/cgroup/memory{path}"), files, true)
        } else {
            continue;
        };
        if let Some(mem) = read(format!("{dir}/{mem}")) {
            return cgroup_limit(&mem, read(format!("{dir}/{swap}")).as_deref(), v1);
        }
    }
    None
}

#[cfg(not(target_os = "linux"))]
fn read_cgroup_memory_limit() -> Option<usize> {
    None
}

/// The limit of a control group from its memory file's text and its swap file's (`None`: no
/// such file): v2 (`v1` false) gives `memory.max` and `memory.swap.max`, each `max` or bytes,
/// the sum the limit; v1 gives `memory.limit_in_bytes` and `memory.memsw.limit_in_bytes`
/// (memory and swap together), the larger the limit. Values of 2^62 bytes and more (v1's
/// "unlimited" is 2^63 rounded down to a page) and unreadable text are no limit.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn cgroup_limit(mem: &str, swap: Option<&str>, v1: bool) -> Option<usize> {
    let bytes = |s: &str| {
        s.trim()
            .parse::<u64>()
            .ok()
            .filter(|&b| b < 1 << 62)
            .and_then(|b| usize::try_from(b).ok())
    };
    let mem = bytes(mem)?;
    let swap = swap.map(bytes);
    if v1 {
        // memsw counts memory and swap together; "unlimited" swap leaves the memory limit.
        Some(match swap {
            Some(Some(both)) => both.max(mem),
            _ => mem,
        })
    } else {
        match swap {
            // `max`: swap as the machine has it, which `sysinfo` bounds.
            Some(None) => None,
            Some(Some(s)) => Some(mem.saturating_add(s)),
            None => Some(mem),
        }
    }
}

/// [`Error::HostOutOfMemory`] when `bytes` exceed [`host_memory_limit`]: the check every host
/// allocation sized from user input makes before asking the allocator (touching nothing).
pub fn check_host_bytes(bytes: usize) -> Result<()> {
    match host_memory_limit() {
        Some(limit) if bytes > limit => Err(Error::HostOutOfMemory { bytes }),
        _ => Ok(()),
    }
}

/// Zeroed host memory of `nbytes`, aligned to a chosen power of two (64 by default).
pub struct CpuStorage {
    ptr: NonNull<u8>,
    nbytes: usize,
    align: usize,
}

// SAFETY: the buffer is uniquely owned plain memory; no thread affinity.
unsafe impl Send for CpuStorage {}
// SAFETY: shared access only reads through `&self`.
unsafe impl Sync for CpuStorage {}

impl std::fmt::Debug for CpuStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuStorage")
            .field("nbytes", &self.nbytes)
            .field("align", &self.align)
            .finish()
    }
}

impl CpuStorage {
    /// A copy of this buffer (same size and alignment); [`Error::HostOutOfMemory`] when the
    /// host cannot hold it.
    pub fn try_clone(&self) -> Result<CpuStorage> {
        let mut c = CpuStorage::zeroed_aligned(self.nbytes, self.align)?;
        c.as_bytes_mut().copy_from_slice(self.as_bytes());
        Ok(c)
    }

    /// `nbytes` zeroed bytes, 64-byte aligned; [`Error::HostOutOfMemory`] when the host cannot
    /// provide them (never a panic or an abort).
    pub fn zeroed(nbytes: usize) -> Result<CpuStorage> {
        CpuStorage::zeroed_aligned(nbytes, DEFAULT_ALIGN)
    }

    /// `nbytes` zeroed bytes aligned to `align` (a power of two; at least 16 is used, which
    /// every element type needs).
    pub fn zeroed_aligned(nbytes: usize, align: usize) -> Result<CpuStorage> {
        if !align.is_power_of_two() {
            return Err(Error::BadAlignment { align });
        }
        let align = align.max(16);
        // An alignment beyond the size takes that much address space (and more) too.
        check_host_bytes(nbytes.max(align))?;
        // `from_size_align` refuses sizes that overflow `isize` once rounded up to `align`:
        // that is a request no host can satisfy, so it is out of memory, not a bad alignment
        // (the alignment was checked above).
        let layout = AllocLayout::from_size_align(nbytes.max(1), align)
            .map_err(|_| Error::HostOutOfMemory { bytes: nbytes })?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(Error::HostOutOfMemory { bytes: nbytes })?;
        Ok(CpuStorage { ptr, nbytes, align })
    }

    /// A copy of `data` ([`Error::HostOutOfMemory`] when the host cannot hold it).
    pub fn from_slice<T: WithDType>(data: &[T]) -> Result<CpuStorage> {
        let mut s = CpuStorage::zeroed(std::mem::size_of_val(data))?;
        s.as_mut_slice::<T>().copy_from_slice(data);
        Ok(s)
    }

    /// A copy of raw bytes ([`Error::HostOutOfMemory`] when the host cannot hold them).
    pub fn from_bytes(bytes: &[u8]) -> Result<CpuStorage> {
        let mut s = CpuStorage::zeroed(bytes.len())?;
        s.as_bytes_mut().copy_from_slice(bytes);
        Ok(s)
    }

    /// Size in bytes.
    pub fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// The alignment of the first byte.
    pub fn align(&self) -> usize {
        self.align
    }

    /// Address of the first byte.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: `ptr` owns `nbytes` initialised (zeroed, then written) bytes; the slice
        // borrows `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.nbytes) }
    }

    /// The bytes, mutably.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_bytes`, with a unique borrow of `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.nbytes) }
    }

    /// The elements as `T`; the length is `nbytes / size_of::<T>()`.
    pub fn as_slice<T: WithDType>(&self) -> &[T] {
        assert!(
            self.align >= align_of::<T>()
                || (self.ptr.as_ptr() as usize).is_multiple_of(align_of::<T>()),
            "misaligned for T"
        );
        let n = self.nbytes / size_of::<T>();
        // SAFETY: the memory is aligned for `T` (checked above), holds at least
        // `n * size_of::<T>()` initialised bytes, and every bit pattern is a valid `T`
        // (WithDType is sealed to plain-old-data types).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<T>(), n) }
    }

    /// The elements as `T`, mutably.
    pub fn as_mut_slice<T: WithDType>(&mut self) -> &mut [T] {
        assert!(
            self.align >= align_of::<T>()
                || (self.ptr.as_ptr() as usize).is_multiple_of(align_of::<T>()),
            "misaligned for T"
        );
        let n = self.nbytes / size_of::<T>();
        // SAFETY: as in `as_slice`, with a unique borrow of `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().cast::<T>(), n) }
    }
}

impl Drop for CpuStorage {
    fn drop(&mut self) {
        // Cannot fail: `zeroed_aligned`, the only constructor, built this very layout with
        // `from_size_align(nbytes.max(1), align)` and returned an error when that failed; the
        // fields are private and never changed after, so the same call succeeds again here.
        let layout = AllocLayout::from_size_align(self.nbytes.max(1), self.align)
            .expect("validated at allocation");
        // SAFETY: `ptr` was allocated with exactly this layout and is freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
    }
}

pub(crate) fn byte_len(len: usize, dtype: DType) -> Result<usize> {
    len.checked_mul(dtype.size())
        .ok_or(Error::SizeOverflow { len, dtype })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_round_trips() {
        let s = CpuStorage::from_slice(&[1.0f64, 2.0, 3.0]).unwrap();
        assert_eq!(s.as_ptr() as usize % 64, 0);
        assert_eq!(s.nbytes(), 24);
        assert_eq!(s.as_slice::<f64>(), &[1.0, 2.0, 3.0]);
        let empty = CpuStorage::zeroed(0).unwrap();
        assert!(empty.as_slice::<f32>().is_empty());
        let page = CpuStorage::zeroed_aligned(10_000, 4096).unwrap();
        assert_eq!(page.as_ptr() as usize % 4096, 0);
        assert!(page.as_bytes().iter().all(|&b| b == 0));
        assert_eq!(page.try_clone().unwrap().align(), 4096);
        assert!(matches!(
            CpuStorage::zeroed_aligned(8, 3),
            Err(Error::BadAlignment { align: 3 })
        ));
    }

    #[test]
    fn requests_beyond_physical_memory_and_swap_are_refused_untouched() {
        let Some(limit) = host_memory_limit() else {
            return;
        };
        assert!(limit > 0);
        // One byte more than the machine has: refused before the allocator is asked (a host
        // that overcommits would grant it and be killed zeroing it).
        assert!(matches!(
            CpuStorage::zeroed(limit.saturating_add(1)),
            Err(Error::HostOutOfMemory { bytes }) if bytes == limit.saturating_add(1)
        ));
        assert!(matches!(
            check_host_bytes(limit.saturating_add(1)),
            Err(Error::HostOutOfMemory { .. })
        ));
        assert!(matches!(
            CpuStorage::zeroed_aligned(4, (limit.saturating_add(1)).next_power_of_two()),
            Err(Error::HostOutOfMemory { .. })
        ));
        assert!(check_host_bytes(limit).is_ok());
        assert_eq!(host_memory_limit(), Some(limit), "read once");
    }

    #[test]
    fn control_group_limits_parse_as_the_kernel_writes_them() {
        let gib = 1usize << 30;
        // v2: memory.max plus memory.swap.max; `max` is no limit of its own.
        assert_eq!(
            cgroup_limit("4294967296\n", Some("0\n"), false),
            Some(4 * gib)
        );
        assert_eq!(
            cgroup_limit("4294967296\n", Some("1073741824"), false),
            Some(5 * gib)
        );
        assert_eq!(cgroup_limit("4294967296\n", Some("max\n"), false), None);
        assert_eq!(cgroup_limit("4294967296\n", None, false), Some(4 * gib));
        assert_eq!(cgroup_limit("max\n", Some("0"), false), None);
        // v1: the larger of memory and memory plus swap; "unlimited" is 2^63 less a page.
        let unlimited = "9223372036854771712\n";
        assert_eq!(
            cgroup_limit("2147483648\n", Some("3221225472\n"), true),
            Some(3 * gib)
        );
        assert_eq!(
            cgroup_limit("2147483648\n", Some(unlimited), true),
            Some(2 * gib)
        );
        assert_eq!(cgroup_limit("2147483648\n", None, true), Some(2 * gib));
        assert_eq!(cgroup_limit(unlimited, Some(unlimited), true), None);
        assert_eq!(cgroup_limit("garbage", None, true), None);
        assert_eq!(cgroup_limit("", Some(""), false), None);
    }

    #[test]
    fn host_out_of_memory_is_an_error() {
        // More than any host has, and more than `isize::MAX`.
        assert!(matches!(
            CpuStorage::zeroed(1 << 50),
            Err(Error::HostOutOfMemory { .. })
        ));
        assert!(matches!(
            CpuStorage::zeroed(usize::MAX),
            Err(Error::HostOutOfMemory { .. })
        ));
        assert!(matches!(
            CpuStorage::zeroed_aligned(isize::MAX as usize, 4096),
            Err(Error::HostOutOfMemory { .. })
        ));
    }
}
