//! Memory-mapped files and named shared memory as host storages (zero-copy), through
//! `memmap2`.
//!
//! Shared memory is a file in `/dev/shm` (POSIX shared memory is exactly that on Linux; other
//! systems use the temporary directory): `create_shared` makes it (and fails if the name
//! exists), `attach_shared` maps an existing one, `unlink_shared` removes the name (mappings
//! stay valid until dropped).
//!
//! - `map_file` maps only a regular file (symbolic links followed): a FIFO, a device, a
//!   directory or a socket is [`Error::NotRegularFile`], found before any read, and the file
//!   is opened non-blocking so that a FIFO swapped in meanwhile cannot make the open wait.
//! - A new segment is mode 0600 unless asked (`create_shared_mode`), and its bytes are
//!   reserved with `posix_fallocate`: a segment larger than the free space of `/dev/shm` is
//!   [`Error::SharedNoSpace`], not a process killed by `SIGBUS` at its first write to a page
//!   `tmpfs` cannot supply. A failed create removes the name it made.
//! - `attach_shared` opens the name with `O_NOFOLLOW` and maps it only if it is a regular file
//!   owned by the effective user: a symbolic link (or a file of another user) planted at the
//!   name is [`Error::SharedRefused`], as `shm_open` refuses links.
//! - A file (or segment) truncated by another process while mapped does not kill this one: the
//!   `fault` module's `SIGBUS` handler replaces the lost pages with zeroed ones, and
//!   [`Storage::check_mapping`] and [`Storage::flush`] report [`Error::MappingTruncated`].

use std::fs::{File, OpenOptions};
#[cfg(unix)]
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use memmap2::{Mmap, MmapMut, MmapOptions};

use crate::{DType, Error, Result, Storage};

mod fault;

/// The mode of a new shared-memory segment unless asked otherwise: the owner only.
pub const DEFAULT_SHARED_MODE: u32 = 0o600;

/// How a file is mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapMode {
    /// Read only: writes through the storage are refused.
    ReadOnly,
    /// Read and write, shared with the file (`flush` writes back).
    ReadWrite,
}

#[derive(Debug)]
pub(crate) enum Map {
    Ro(Mmap),
    Rw(MmapMut),
}

/// A mapped region and where it came from.
#[derive(Debug)]
pub(crate) struct Mapped {
    /// The fault handler's registration of `map`'s bytes. Declared before `map`: fields drop
    /// in order, so the range is unregistered before it is unmapped.
    guard: fault::Registration,
    pub(crate) map: Map,
    /// The file, kept open to compare its length with the mapping's end.
    file: File,
    /// Byte offset of the mapping in the file.
    offset: usize,
    pub(crate) path: PathBuf,
    pub(crate) shared_name: Option<String>,
}

impl Mapped {
    pub(crate) fn bytes(&self) -> &[u8] {
        match &self.map {
            Map::Ro(m) => m,
            Map::Rw(m) => m,
        }
    }

    pub(crate) fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        match &mut self.map {
            Map::Ro(_) => None,
            Map::Rw(m) => Some(m),
        }
    }

    pub(crate) fn flush(&self) -> Result<()> {
        self.check()?;
        match &self.map {
            Map::Ro(_) => Ok(()),
            Map::Rw(m) => m.flush().map_err(|e| io(&self.path, e)),
        }
    }

    /// Whether the mapping still has its file behind every byte: no access faulted, and the
    /// file is not shorter than the mapping's end now.
    pub(crate) fn check(&self) -> Result<()> {
        let truncated = || Error::MappingTruncated {
            path: self.path.display().to_string(),
        };
        if self.guard.faulted() {
            return Err(truncated());
        }
        let len = self.file.metadata().map_err(|e| io(&self.path, e))?.len();
        let end = self.offset as u64 + self.bytes().len() as u64;
        if len < end {
            return Err(truncated());
        }
        Ok(())
    }

    fn new(
        map: Map,
        file: File,
        offset: usize,
        path: PathBuf,
        shared_name: Option<String>,
    ) -> Result<Mapped> {
        let (ptr, len, writable) = match &map {
            Map::Ro(m) => (m.as_ptr(), m.len(), false),
            Map::Rw(m) => (m.as_ptr(), m.len(), true),
        };
        let guard = fault::register(ptr, len, writable).map_err(|e| io(&path, e))?;
        Ok(Mapped {
            guard,
            map,
            file,
            offset,
            path,
            shared_name,
        })
    }
}

impl Storage {
    /// Checks that a mapped or shared storage still has its file behind every byte (`Ok` for
    /// other storages).
    ///
    /// Another process may truncate a mapped file (or shared-memory segment) at any time. On
    /// Linux, Genesis handles the `SIGBUS` that an access past the new end raises: the lost
    /// part of the mapping reads as zeros from then on and writes to it are discarded, and
    /// this method (and [`Storage::flush`]) returns [`Error::MappingTruncated`]. It also
    /// reports a truncation no access has met yet. Check it after reading a mapping that
    /// others may change, before trusting what was read.
    pub fn check_mapping(&self) -> Result<()> {
        match &*self.read("check_mapping")? {
            crate::storage::Inner::Mapped(m) => m.check(),
            _ => Ok(()),
        }
    }

    /// [`Storage::create_shared`] with the permission bits `mode` (at most `0o777`; the
    /// default is [`DEFAULT_SHARED_MODE`], 0600), set exactly (the umask does not apply).
    #[track_caller]
    pub fn create_shared_mode(name: &str, dtype: DType, len: usize, mode: u32) -> Result<Storage> {
        let m = create_shared_mode(name, dtype, len, mode)?;
        Ok(Storage::make(crate::storage::Inner::Mapped(m), dtype, len))
    }
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// What `meta` describes when it is not a regular file (`None` for a regular file).
fn not_regular(meta: &std::fs::Metadata) -> Option<&'static str> {
    let t = meta.file_type();
    if t.is_file() {
        return None;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return Some("a FIFO");
        }
        if t.is_char_device() {
            return Some("a character device");
        }
        if t.is_block_device() {
            return Some("a block device");
        }
        if t.is_socket() {
            return Some("a socket");
        }
    }
    Some(if t.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    })
}

fn refuse_irregular(path: &Path, meta: &std::fs::Metadata) -> Result<()> {
    match not_regular(meta) {
        None => Ok(()),
        Some(kind) => Err(Error::NotRegularFile {
            path: path.display().to_string(),
            kind,
        }),
    }
}

/// The length in bytes of the regular file at `path` (symbolic links followed), found
/// without opening it; [`Error::NotRegularFile`] for anything else (a FIFO, whose open or
/// read may wait forever; a device such as `/dev/zero` or `/dev/urandom`, which never ends;
/// a directory; a socket), [`Error::Io`] when it cannot be examined.
///
/// Readers of untrusted paths call it before reading, and bound what they read by the
/// length: [`Storage::map_file`] does, and `genesis::load_safetensors` maps the file through
/// it.
pub fn regular_file_len(path: impl AsRef<Path>) -> Result<u64> {
    let path = path.as_ref();
    let meta = std::fs::metadata(path).map_err(|e| io(path, e))?;
    refuse_irregular(path, &meta)?;
    Ok(meta.len())
}

/// Opens the regular file at `path` (symbolic links followed) for `mode`, refusing anything
/// else: it is examined before the open (a device is never opened), opened non-blocking (a
/// FIFO put in its place meanwhile does not wait for a writer) and examined again through the
/// descriptor (what was opened is what is mapped). Returns the file and its length.
fn open_regular(path: &Path, mode: MapMode) -> Result<(File, u64)> {
    regular_file_len(path)?;
    let mut opts = OpenOptions::new();
    opts.read(true).write(mode == MapMode::ReadWrite);
    #[cfg(unix)]
    opts.custom_flags(libc::O_NONBLOCK);
    let file = opts.open(path).map_err(|e| io(path, e))?;
    let meta = file.metadata().map_err(|e| io(path, e))?;
    refuse_irregular(path, &meta)?;
    Ok((file, meta.len()))
}

/// Maps `len` elements of `dtype` at byte `offset` of the regular file at `path`
/// ([`Error::NotRegularFile`] for anything else).
pub(crate) fn map_file(
    path: &Path,
    dtype: DType,
    offset: usize,
    len: usize,
    mode: MapMode,
) -> Result<Mapped> {
    if !offset.is_multiple_of(dtype.size()) {
        return Err(Error::MisalignedOffset {
            offset,
            align: dtype.size(),
        });
    }
    let nbytes = crate::cpu::byte_len(len, dtype)?;
    if nbytes == 0 {
        return Err(Error::EmptyMapping);
    }
    let (file, file_len) = open_regular(path, mode)?;
    let file_len = usize::try_from(file_len).unwrap_or(usize::MAX);
    let end = offset
        .checked_add(nbytes)
        .ok_or(Error::SizeOverflow { len, dtype })?;
    if end > file_len {
        return Err(Error::FileTooShort {
            path: path.display().to_string(),
            needed: end,
            len: file_len,
        });
    }
    let map = map_region(&file, path, offset, nbytes, mode)?;
    Mapped::new(map, file, offset, path.to_path_buf(), None)
}

fn map_region(
    file: &File,
    path: &Path,
    offset: usize,
    nbytes: usize,
    mode: MapMode,
) -> Result<Map> {
    let mut opts = MmapOptions::new();
    opts.offset(offset as u64).len(nbytes);
    // SAFETY: the mapping aliases the file. If another process truncates it, an access past
    // the new end raises SIGBUS, which the `fault` handler turns into zeroed pages and an
    // error (`Mapped::new` registers the range before any access); another process writing
    // the file changes the bytes under the storage, which is what sharing them means (the
    // values stay valid: every dtype is plain data). Within the process, the storage owns the
    // only Rust view of the bytes.
    let map = unsafe {
        match mode {
            MapMode::ReadOnly => opts.map(file).map(Map::Ro),
            MapMode::ReadWrite => opts.map_mut(file).map(Map::Rw),
        }
    };
    map.map_err(|e| io(path, e))
}

fn shm_dir() -> PathBuf {
    #[cfg(test)]
    if let Some(dir) = tests::SHM_DIR.with(|d| d.borrow().clone()) {
        return dir;
    }
    let dev_shm = Path::new("/dev/shm");
    if dev_shm.is_dir() {
        dev_shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// The file behind shared memory `name`, after checking the name.
pub(crate) fn shm_path(name: &str) -> Result<PathBuf> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.starts_with('.');
    if !ok {
        return Err(Error::BadSharedName {
            name: name.to_string(),
        });
    }
    Ok(shm_dir().join(format!("genesis-{name}")))
}

/// Removes a file this call created unless disarmed (a failed create leaves no name).
struct RemoveOnError<'a>(Option<&'a Path>);

impl Drop for RemoveOnError<'_> {
    fn drop(&mut self) {
        if let Some(path) = self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Creates shared memory `name` of `len` zeroed elements, mode [`DEFAULT_SHARED_MODE`].
pub(crate) fn create_shared(name: &str, dtype: DType, len: usize) -> Result<Mapped> {
    create_shared_mode(name, dtype, len, DEFAULT_SHARED_MODE)
}

/// Creates shared memory `name` of `len` zeroed elements with permission bits `mode`, its
/// bytes reserved; fails if the name exists.
fn create_shared_mode(name: &str, dtype: DType, len: usize, mode: u32) -> Result<Mapped> {
    let path = shm_path(name)?;
    if mode > 0o777 {
        return Err(Error::BadSharedMode { mode });
    }
    let nbytes = crate::cpu::byte_len(len, dtype)?;
    if nbytes == 0 {
        return Err(Error::EmptyMapping);
    }
    let mut opts = OpenOptions::new();
    opts.read(true).write(true).create_new(true);
    #[cfg(unix)]
    opts.mode(mode).custom_flags(libc::O_NOFOLLOW);
    let file = opts.open(&path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            Error::SharedExists {
                name: name.to_string(),
            }
        } else {
            io(&path, e)
        }
    })?;
    let mut created = RemoveOnError(Some(&path));
    #[cfg(unix)]
    file.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(|e| io(&path, e))?;
    reserve(&file, &path, name, nbytes)?;
    let map = map_region(&file, &path, 0, nbytes, MapMode::ReadWrite)?;
    let mapped = Mapped::new(map, file, 0, path.clone(), Some(name.to_string()))?;
    created.0 = None;
    Ok(mapped)
}

/// Gives `file` `nbytes` bytes, reserved: on Linux `posix_fallocate`, so that no later write
/// meets a full file system (`tmpfs` raises SIGBUS there); where the file system cannot
/// reserve, a plain length (the fault handler still keeps a write there from killing us).
fn reserve(file: &File, path: &Path, name: &str, nbytes: usize) -> Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let no_space = |message: String| Error::SharedNoSpace {
            name: name.to_string(),
            bytes: nbytes,
            message,
        };
        let len = libc::off_t::try_from(nbytes)
            .map_err(|_| no_space("larger than the largest file".to_string()))?;
        // SAFETY: `file` is an open descriptor for the call's duration; the call reads and
        // writes no memory of ours.
        let r = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
        match r {
            0 => return Ok(()),
            libc::ENOSPC | libc::EFBIG | libc::ENOMEM => {
                return Err(no_space(std::io::Error::from_raw_os_error(r).to_string()));
            }
            libc::EOPNOTSUPP | libc::EINVAL => {}
            _ => return Err(io(path, std::io::Error::from_raw_os_error(r))),
        }
    }
    let _ = name;
    file.set_len(nbytes as u64).map_err(|e| io(path, e))
}

/// Attaches to existing shared memory `name`; its length must be a whole number of elements.
/// The name must be a regular file owned by this process's effective user, reached without
/// following a symbolic link.
pub(crate) fn attach_shared(name: &str, dtype: DType) -> Result<(Mapped, usize)> {
    let path = shm_path(name)?;
    let refused = |reason: &'static str| Error::SharedRefused {
        name: name.to_string(),
        reason,
    };
    let mut opts = OpenOptions::new();
    opts.read(true).write(true);
    // Non-blocking: opening a FIFO planted at the name must not wait for a writer.
    #[cfg(unix)]
    opts.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    let file = opts.open(&path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::SharedNotFound {
                name: name.to_string(),
            }
        } else if e.raw_os_error() == Some(ELOOP) {
            refused("it is a symbolic link")
        } else {
            io(&path, e)
        }
    })?;
    let meta = file.metadata().map_err(|e| io(&path, e))?;
    if !meta.is_file() {
        return Err(refused("it is not a regular file"));
    }
    #[cfg(unix)]
    {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if meta.uid() != unsafe { libc::geteuid() } {
            return Err(refused("it is owned by another user"));
        }
    }
    let nbytes = usize::try_from(meta.len()).unwrap_or(usize::MAX);
    if nbytes == 0 {
        return Err(Error::EmptyMapping);
    }
    if !nbytes.is_multiple_of(dtype.size()) {
        return Err(Error::LengthMismatch {
            op: "attach_shared",
            lhs: nbytes,
            rhs: dtype.size(),
        });
    }
    let map = map_region(&file, &path, 0, nbytes, MapMode::ReadWrite)?;
    let mapped = Mapped::new(map, file, 0, path, Some(name.to_string()))?;
    Ok((mapped, nbytes / dtype.size()))
}

/// The error of `O_NOFOLLOW` meeting a symbolic link.
#[cfg(unix)]
const ELOOP: i32 = libc::ELOOP;
#[cfg(not(unix))]
const ELOOP: i32 = -1;

/// Removes the name of shared memory `name`; existing mappings stay valid.
pub(crate) fn unlink_shared(name: &str) -> Result<()> {
    let path = shm_path(name)?;
    std::fs::remove_file(&path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::SharedNotFound {
                name: name.to_string(),
            }
        } else {
            io(&path, e)
        }
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::process::Command;

    thread_local! {
        /// The shared-memory directory of this test thread (`None`: the real one).
        pub(crate) static SHM_DIR: RefCell<Option<PathBuf>> = const { RefCell::new(None) };
    }

    fn unique(tag: &str) -> String {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("ut{}-{tag}-{n}", std::process::id())
    }

    fn temp_path(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!("genesis-{}", unique(tag)))
    }

    /// Runs the ignored test `name` of this binary in a child process with `env` set; its
    /// output and status.
    fn run_child(name: &str, env: (&str, &str)) -> std::process::Output {
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                name,
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(env.0, env.1)
            .output()
            .unwrap()
    }

    /// Truncates `path` to `len` bytes from a second process (`sh`, the redirection's
    /// `O_TRUNC` when `len` is 0, else `truncate`), or from a second thread with its own file
    /// handle where those are missing.
    fn truncate_elsewhere(path: &Path, len: u64) {
        let quoted = format!("'{}'", path.display());
        let script = if len == 0 {
            format!(": > {quoted}")
        } else {
            format!("truncate -s {len} {quoted}")
        };
        let by_process = Command::new("sh")
            .args(["-c", &script])
            .status()
            .is_ok_and(|s| s.success());
        if !by_process {
            let path = path.to_path_buf();
            std::thread::spawn(move || {
                OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_len(len)
                    .unwrap()
            })
            .join()
            .unwrap();
        }
        assert_eq!(std::fs::metadata(path).unwrap().len(), len);
    }

    fn is_truncated(r: Result<()>) -> bool {
        matches!(r, Err(Error::MappingTruncated { .. }))
    }

    /// A reader whose file another process truncates reads zeros past the
    /// new end (no SIGBUS) and is told.
    #[test]
    fn a_file_truncated_under_a_read_only_mapping_reads_zeros_and_reports_it() {
        let path = temp_path("trunc-ro");
        let n = 64 * 1024 / 4;
        let data: Vec<u8> = (0..n)
            .flat_map(|i| (i as f32 + 1.0).to_le_bytes())
            .collect();
        std::fs::write(&path, &data).unwrap();
        let s = Storage::map_file(&path, DType::F32, 0, n, MapMode::ReadOnly).unwrap();
        assert_eq!(s.as_slice::<f32>().unwrap()[0], 1.0);
        s.check_mapping().unwrap();
        truncate_elsewhere(&path, 0);
        // Reported before any access meets the end: the file is shorter than the mapping.
        assert!(is_truncated(s.check_mapping()));
        let v = s.to_vec::<f32>().unwrap();
        assert!(v.iter().all(|&x| x == 0.0), "the lost bytes read as zeros");
        assert!(is_truncated(s.check_mapping()));
        assert!(is_truncated(s.flush()));
        drop(s);
        std::fs::remove_file(&path).unwrap();
    }

    /// A writer keeps what lies before the new end; writes past it are discarded, reported.
    #[test]
    fn a_file_truncated_under_a_read_write_mapping_keeps_the_rest() {
        let path = temp_path("trunc-rw");
        let n = 16 * 4096;
        std::fs::write(&path, vec![7u8; n]).unwrap();
        let mut s =
            Storage::map_file(&path, DType::U8, 4096, n - 4096, MapMode::ReadWrite).unwrap();
        truncate_elsewhere(&path, 8 * 4096);
        s.as_mut_slice::<u8>().unwrap().fill(9);
        let v = s.to_vec::<u8>().unwrap();
        // The file's remaining pages took the writes; those past its end were replaced.
        assert!(v[..7 * 4096].iter().all(|&b| b == 9));
        assert!(is_truncated(s.check_mapping()));
        assert!(is_truncated(s.flush()));
        drop(s);
        let on_disk = std::fs::read(&path).unwrap();
        assert_eq!(on_disk.len(), 8 * 4096);
        assert!(on_disk[4096..].iter().all(|&b| b == 9));
        std::fs::remove_file(&path).unwrap();
    }

    /// Shared memory shrunk by another process: the same.
    #[test]
    fn a_shared_segment_truncated_by_another_process_is_reported() {
        let name = unique("trunc-shm");
        let mut s = Storage::create_shared(&name, DType::I64, 8192).unwrap();
        let other = Storage::attach_shared(&name, DType::I64).unwrap();
        truncate_elsewhere(&shm_path(&name).unwrap(), 4096);
        s.as_mut_slice::<i64>().unwrap().fill(-1);
        assert_eq!(other.as_slice::<i64>().unwrap()[..512], [-1; 512]);
        assert!(
            other.as_slice::<i64>().unwrap()[512..]
                .iter()
                .all(|&x| x == 0)
        );
        assert!(is_truncated(s.check_mapping()));
        assert!(is_truncated(other.check_mapping()));
        Storage::unlink_shared(&name).unwrap();
    }

    /// The handler hands faults outside Genesis's mappings on: the process still dies of them.
    #[test]
    #[ignore = "run by foreign_faults_still_kill in a child process"]
    fn foreign_fault_child() {
        let Ok(path) = std::env::var("GENESIS_FOREIGN_FAULT") else {
            return;
        };
        let path = PathBuf::from(path);
        std::fs::write(&path, vec![1u8; 8192]).unwrap();
        // A Genesis mapping installs the handler.
        let s = Storage::map_file(&path, DType::U8, 0, 8192, MapMode::ReadOnly).unwrap();
        let file = File::open(&path).unwrap();
        // SAFETY: the test truncates the file under this mapping on purpose: the access below
        // must raise SIGBUS, which must kill this (child) process.
        let raw = unsafe { MmapOptions::new().len(8192).map(&file) }.unwrap();
        truncate_elsewhere(&path, 0);
        println!("GENESIS_BEFORE_FAULT");
        let b = std::hint::black_box(&raw[4096..])[0];
        println!("GENESIS_SURVIVED {b} {}", s.len());
    }

    #[test]
    fn foreign_faults_still_kill() {
        let path = temp_path("foreign");
        let out = run_child(
            "mapped::tests::foreign_fault_child",
            ("GENESIS_FOREIGN_FAULT", path.to_str().unwrap()),
        );
        let _ = std::fs::remove_file(&path);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("GENESIS_BEFORE_FAULT"), "{out:?}");
        assert!(!stdout.contains("GENESIS_SURVIVED"), "{out:?}");
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(out.status.signal(), Some(libc::SIGBUS), "{out:?}");
        }
    }

    /// New segments are the owner's only unless asked, and reserved.
    #[cfg(unix)]
    #[test]
    fn new_segments_are_owner_only_and_reserved() {
        let name = unique("mode");
        let nbytes = 3 * 4096 + 8;
        let s = Storage::create_shared(&name, DType::U8, nbytes).unwrap();
        let meta = std::fs::metadata(shm_path(&name).unwrap()).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o600);
        assert_eq!(meta.len(), nbytes as u64);
        #[cfg(target_os = "linux")]
        assert!(
            meta.blocks() * 512 >= nbytes as u64,
            "the bytes are reserved, not a sparse file: {} blocks",
            meta.blocks()
        );
        drop(s);
        Storage::unlink_shared(&name).unwrap();

        let s = Storage::create_shared_mode(&name, DType::U8, 16, 0o640).unwrap();
        let meta = std::fs::metadata(shm_path(&name).unwrap()).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o640);
        drop(s);
        Storage::unlink_shared(&name).unwrap();

        let e = Storage::create_shared_mode(&name, DType::U8, 16, 0o4700).unwrap_err();
        assert!(matches!(e, Error::BadSharedMode { mode: 0o4700 }), "{e}");
        assert!(!shm_path(&name).unwrap().exists());
    }

    /// A symbolic link, a directory, a FIFO or another user's file planted
    /// at the name is refused, and what it points to is untouched.
    #[cfg(unix)]
    #[test]
    fn attach_refuses_what_is_not_our_regular_file() {
        let name = unique("planted");
        let at = shm_path(&name).unwrap();
        let victim = temp_path("victim");
        std::fs::write(&victim, [5u8; 64]).unwrap();
        std::os::unix::fs::symlink(&victim, &at).unwrap();
        let e = Storage::attach_shared(&name, DType::U8).unwrap_err();
        assert!(matches!(e, Error::SharedRefused { .. }), "{e}");
        // Creating over the link does not follow it either.
        let e = Storage::create_shared(&name, DType::U8, 64).unwrap_err();
        assert!(matches!(e, Error::SharedExists { .. }), "{e}");
        assert_eq!(std::fs::read(&victim).unwrap(), [5u8; 64]);
        Storage::unlink_shared(&name).unwrap();
        assert!(
            victim.exists(),
            "unlinking removed the link, not its target"
        );

        std::fs::create_dir(&at).unwrap();
        let e = Storage::attach_shared(&name, DType::U8).unwrap_err();
        assert!(
            matches!(e, Error::SharedRefused { .. } | Error::Io { .. }),
            "{e}"
        );
        std::fs::remove_dir(&at).unwrap();

        let fifo = std::ffi::CString::new(at.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string; mkfifo reads it only.
        if unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) } == 0 {
            let e = Storage::attach_shared(&name, DType::U8).unwrap_err();
            assert!(matches!(e, Error::SharedRefused { .. }), "{e}");
            std::fs::remove_file(&at).unwrap();
        }

        // Another user's file: only root can make one to test with.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::fs::write(&at, [0u8; 64]).unwrap();
            std::os::unix::fs::chown(&at, Some(65534), Some(65534)).unwrap();
            let e = Storage::attach_shared(&name, DType::U8).unwrap_err();
            assert!(matches!(e, Error::SharedRefused { .. }), "{e}");
            std::fs::remove_file(&at).unwrap();
        } else {
            println!("skipped the other-owner case: not root, cannot chown a file");
        }
        std::fs::remove_file(&victim).unwrap();
    }

    /// The half of `segments_larger_than_free_space_are_errors` that runs in a private mount
    /// namespace with a 1 MiB tmpfs at `GENESIS_SMALL_TMPFS`.
    #[test]
    #[ignore = "run by segments_larger_than_free_space_are_errors in a child process"]
    fn small_tmpfs_child() {
        let Ok(dir) = std::env::var("GENESIS_SMALL_TMPFS") else {
            return;
        };
        let dir = PathBuf::from(dir);
        SHM_DIR.with(|d| *d.borrow_mut() = Some(dir.clone()));
        let names = || {
            let mut v: Vec<String> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        // Larger than the whole file system, then larger than what is left.
        let e = Storage::create_shared("big", DType::F32, 1 << 20).unwrap_err();
        assert!(matches!(e, Error::SharedNoSpace { .. }), "{e}");
        assert_eq!(
            names(),
            Vec::<String>::new(),
            "a failed create leaves no name"
        );
        let mut fits = Storage::create_shared("fits", DType::U8, 640 << 10).unwrap();
        fits.as_mut_slice::<u8>().unwrap().fill(3);
        let e = Storage::create_shared("second", DType::U8, 640 << 10).unwrap_err();
        assert!(matches!(e, Error::SharedNoSpace { .. }), "{e}");
        assert_eq!(names(), ["genesis-fits"]);
        fits.check_mapping().unwrap();
        fits.flush().unwrap();
        // A sparse segment made by someone else (no reservation) on the full file system: a
        // write to a page tmpfs cannot supply is SIGBUS, handled and reported.
        let sparse = dir.join("genesis-sparse");
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&sparse)
            .unwrap()
            .set_len(640 << 10)
            .unwrap();
        let mut s = Storage::attach_shared("sparse", DType::U8).unwrap();
        s.as_mut_slice::<u8>().unwrap().fill(1);
        assert!(is_truncated(s.check_mapping()));
        println!("GENESIS_SMALL_TMPFS_DONE");
    }

    /// A full file system: in a 1 MiB tmpfs mounted in a private mount namespace (`unshare -rm`,
    /// or `unshare -m` as root); skipped, saying why, where no namespace can be made.
    #[test]
    fn segments_larger_than_free_space_are_errors() {
        let dir = temp_path("tmpfs");
        std::fs::create_dir(&dir).unwrap();
        let exe = std::env::current_exe().unwrap();
        let script = format!(
            "mount -t tmpfs -o size=1m genesis-test '{}' || exit 77; exec \"$0\" --exact \
             mapped::tests::small_tmpfs_child --ignored --nocapture --test-threads=1",
            dir.display()
        );
        let mut why = Vec::new();
        for flags in ["-rm", "-m"] {
            let out = Command::new("unshare")
                .args([flags, "sh", "-c", &script])
                .arg(&exe)
                .env("GENESIS_SMALL_TMPFS", &dir)
                .output();
            let out = match out {
                Ok(o) => o,
                Err(e) => {
                    why.push(format!("unshare: {e}"));
                    break;
                }
            };
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            if out.status.success() && stdout.contains("GENESIS_SMALL_TMPFS_DONE") {
                std::fs::remove_dir(&dir).unwrap();
                return;
            }
            let ran = stdout.contains("running 1 test");
            assert!(!ran, "the child test failed:\n{stdout}\n{stderr}");
            why.push(format!("unshare {flags}: {} {}", out.status, stderr.trim()));
        }
        std::fs::remove_dir(&dir).unwrap();
        println!(
            "skipped segments_larger_than_free_space_are_errors: no private mount namespace \
             with a tmpfs ({})",
            why.join("; ")
        );
    }
}
