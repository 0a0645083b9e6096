//! NCCL, loaded at run time so that building Genesis needs no NCCL.
//!
//! [`Nccl::load`] looks, in order, at an explicit path (the argument, else the
//! `GENESIS_NCCL_LIBRARY` environment variable), a copy the process has already loaded
//! (`libnccl.so.2`, e.g. by PyTorch), the `nvidia-nccl` Python wheel
//! (`nvidia/nccl/lib/libnccl.so.2` beside `python3`'s `nvidia` package), and the system's
//! loader path; the first that loads, exports the symbols Genesis calls and is at least
//! [`MIN_VERSION`] wins. When none does, [`Error::NcclNotFound`] lists every place and why.
//!
//! The function table covers communicators (unique id, init by rank with a configuration for
//! non-blocking communicators, abort, async error, destroy) and the collectives (all-reduce,
//! broadcast, reduce, all-gather, reduce-scatter, send, recv, group calls); the typed calls on
//! tensors build on it.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// The oldest NCCL taken (non-blocking communicators and `ncclCommInitRankConfig`).
pub const MIN_VERSION: (u32, u32, u32) = (2, 18, 0);

/// NCCL's `ncclResult_t`.
pub type NcclResult = c_int;
/// NCCL's opaque communicator (`ncclComm_t`).
pub type NcclComm = *mut c_void;
/// A CUDA stream (`cudaStream_t`, the driver's `CUstream`).
pub type CudaStream = *mut c_void;

/// NCCL's `ncclUniqueId`: 128 bytes that rank 0 makes and every rank receives (through the
/// store) to join one communicator.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId {
    /// The bytes.
    pub internal: [u8; 128],
}

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UniqueId({:02x?}..)", &self.internal[..8])
    }
}

/// NCCL's data types (`ncclDataType_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum DataType {
    /// `ncclInt8`.
    I8 = 0,
    /// `ncclUint8`.
    U8 = 1,
    /// `ncclInt32`.
    I32 = 2,
    /// `ncclUint32`.
    U32 = 3,
    /// `ncclInt64`.
    I64 = 4,
    /// `ncclUint64`.
    U64 = 5,
    /// `ncclFloat16`.
    F16 = 6,
    /// `ncclFloat32`.
    F32 = 7,
    /// `ncclFloat64`.
    F64 = 8,
    /// `ncclBfloat16`.
    BF16 = 9,
}

/// `ncclInProgress`: a call on a non-blocking communicator is still running (poll
/// `ncclCommGetAsyncError`).
pub const IN_PROGRESS: NcclResult = 7;

/// `NCCL_CONFIG_UNDEF_INT`: a configuration field left to NCCL.
const UNDEF_INT: c_int = c_int::MIN;

/// NCCL's `ncclConfig_t` as of 2.18 (`MIN_VERSION`). NCCL reads `size` bytes of it and keeps
/// its defaults for the fields of later versions, so this prefix is valid for every NCCL
/// Genesis loads.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Config {
    size: usize,
    magic: u32,
    version: u32,
    /// 0: non-blocking (calls may return [`IN_PROGRESS`]); 1: blocking.
    pub blocking: c_int,
    cga_cluster_size: c_int,
    min_ctas: c_int,
    max_ctas: c_int,
    net_name: *const c_char,
    split_share: c_int,
}

impl Config {
    /// `NCCL_CONFIG_INITIALIZER` (every field NCCL's default) with `blocking` set.
    pub fn new(blocking: bool) -> Config {
        Config {
            size: size_of::<Config>(),
            magic: 0xcafe_beef,
            version: 21800,
            blocking: c_int::from(blocking),
            cga_cluster_size: UNDEF_INT,
            min_ctas: UNDEF_INT,
            max_ctas: UNDEF_INT,
            net_name: std::ptr::null(),
            split_share: UNDEF_INT,
        }
    }

    /// The most thread blocks (CTAs) NCCL runs a collective of this communicator with
    /// (`maxCTAs`); `None` leaves NCCL's default. Values NCCL does not take (0, more than its
    /// channels) are refused by the communicator's creation.
    pub fn with_max_ctas(mut self, max_ctas: Option<u32>) -> Config {
        if let Some(m) = max_ctas {
            self.max_ctas = c_int::try_from(m).unwrap_or(c_int::MAX);
        }
        self
    }
}

/// Sets NCCL's environment defaults that Genesis relies on, each unless the user set it;
/// called before every communicator is created (NCCL reads its environment when it creates
/// its first one):
///
/// - `NCCL_NVLS_ENABLE=0`: NVLink multicast off, the setting Genesis's machines need and its
///   reference figures were measured with;
/// - `NCCL_RUNTIME_CONNECT=0`: a communicator connects its peers for the collectives while it
///   is created, not at the first collective of each kind, so that a collective on the
///   blocking communicator (see [`crate::comm`]) never waits on the host for a peer.
pub fn set_env_defaults() {
    use std::sync::Mutex;
    static LOCK: Mutex<bool> = Mutex::new(false);
    let mut done = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    if *done {
        return;
    }
    *done = true;
    for (var, value) in [("NCCL_NVLS_ENABLE", "0"), ("NCCL_RUNTIME_CONNECT", "0")] {
        if std::env::var_os(var).is_none() {
            // SAFETY: `set_var` races with other threads reading the environment through
            // libc. Genesis itself reads it only at start-up and under this lock here; NCCL
            // reads it while creating a communicator, which happens after this call on this
            // thread.
            unsafe { std::env::set_var(var, value) };
        }
    }
}

/// NCCL's reductions (`ncclRedOp_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum RedOp {
    /// `ncclSum`.
    Sum = 0,
    /// `ncclProd`.
    Prod = 1,
    /// `ncclMax`.
    Max = 2,
    /// `ncclMin`.
    Min = 3,
    /// `ncclAvg`.
    Avg = 4,
}

type GetVersion = unsafe extern "C" fn(*mut c_int) -> NcclResult;
type GetUniqueId = unsafe extern "C" fn(*mut UniqueId) -> NcclResult;
type CommInitRank = unsafe extern "C" fn(*mut NcclComm, c_int, UniqueId, c_int) -> NcclResult;
type CommInitRankConfig =
    unsafe extern "C" fn(*mut NcclComm, c_int, UniqueId, c_int, *mut Config) -> NcclResult;
type CommOp = unsafe extern "C" fn(NcclComm) -> NcclResult;
type CommGetAsyncError = unsafe extern "C" fn(NcclComm, *mut NcclResult) -> NcclResult;
type GetErrorString = unsafe extern "C" fn(NcclResult) -> *const c_char;
type GroupOp = unsafe extern "C" fn() -> NcclResult;
type AllReduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    NcclComm,
    CudaStream,
) -> NcclResult;
type Broadcast = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    NcclComm,
    CudaStream,
) -> NcclResult;
type Reduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    c_int,
    NcclComm,
    CudaStream,
) -> NcclResult;
type AllGather = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    NcclComm,
    CudaStream,
) -> NcclResult;
type ReduceScatter = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    NcclComm,
    CudaStream,
) -> NcclResult;
type SendRecv =
    unsafe extern "C" fn(*const c_void, usize, c_int, c_int, NcclComm, CudaStream) -> NcclResult;

/// The NCCL functions Genesis calls, resolved from one loaded library.
#[derive(Debug)]
#[allow(missing_docs)]
pub struct Functions {
    pub get_unique_id: GetUniqueId,
    pub comm_init_rank: CommInitRank,
    pub comm_init_rank_config: CommInitRankConfig,
    pub comm_destroy: CommOp,
    pub comm_abort: CommOp,
    pub comm_get_async_error: CommGetAsyncError,
    pub get_error_string: GetErrorString,
    pub group_start: GroupOp,
    pub group_end: GroupOp,
    pub all_reduce: AllReduce,
    pub broadcast: Broadcast,
    pub reduce: Reduce,
    pub all_gather: AllGather,
    pub reduce_scatter: ReduceScatter,
    pub send: SendRecv,
    pub recv: SendRecv,
}

/// A loaded NCCL: the library (kept loaded while this lives), where it came from, its
/// version and its functions.
#[derive(Debug)]
pub struct Nccl {
    _lib: libloading::Library,
    path: String,
    version: (u32, u32, u32),
    /// The functions.
    pub fns: Functions,
}

/// Where [`Nccl::load`] looks, in order, for `explicit` (the argument) and the environment
/// `var` (a variable's value by name).
pub fn candidates(explicit: Option<&Path>, var: impl Fn(&str) -> Option<String>) -> Vec<Candidate> {
    let mut c = Vec::new();
    if let Some(p) = explicit {
        c.push(Candidate::Path(p.to_path_buf()));
    } else if let Some(p) = var("GENESIS_NCCL_LIBRARY").filter(|p| !p.is_empty()) {
        c.push(Candidate::Path(PathBuf::from(p)));
    }
    c.push(Candidate::AlreadyLoaded);
    c.push(Candidate::PythonWheel);
    c.push(Candidate::System("libnccl.so.2".into()));
    c.push(Candidate::System("libnccl.so".into()));
    c
}

/// A place [`Nccl::load`] looks in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Candidate {
    /// A file.
    Path(PathBuf),
    /// A copy of `libnccl.so.2` the process already loaded.
    AlreadyLoaded,
    /// The `nvidia-nccl` wheel of the `python3` on the path.
    PythonWheel,
    /// A name for the system's loader.
    System(String),
}

impl Candidate {
    fn describe(&self) -> String {
        match self {
            Candidate::Path(p) => p.display().to_string(),
            Candidate::AlreadyLoaded => "libnccl.so.2 already loaded in this process".into(),
            Candidate::PythonWheel => "the nvidia-nccl Python wheel (python3)".into(),
            Candidate::System(n) => format!("{n} on the system's library path"),
        }
    }

    /// Opens the library this candidate names.
    fn open(&self) -> std::result::Result<(libloading::Library, String), String> {
        // SAFETY (for each `Library::new`/`open`): loading runs the library's initialisers;
        // NCCL's only set up its own state.
        match self {
            Candidate::Path(p) => {
                if !p.exists() {
                    return Err("no such file".into());
                }
                // SAFETY: see above.
                unsafe { libloading::Library::new(p) }
                    .map(|l| (l, p.display().to_string()))
                    .map_err(|e| e.to_string())
            }
            Candidate::AlreadyLoaded => {
                #[cfg(unix)]
                {
                    use libloading::os::unix::{Library, RTLD_LAZY};
                    // SAFETY: see above; RTLD_NOLOAD only finds a copy already loaded.
                    unsafe { Library::open(Some("libnccl.so.2"), RTLD_LAZY | libc::RTLD_NOLOAD) }
                        .map(|l| (l.into(), "libnccl.so.2 (already loaded)".to_string()))
                        .map_err(|_| "not loaded".into())
                }
                #[cfg(not(unix))]
                {
                    Err("not supported on this platform".into())
                }
            }
            Candidate::PythonWheel => {
                let dir = wheel_dir()?;
                let p = dir.join("libnccl.so.2");
                if !p.exists() {
                    return Err(format!("{} does not exist", p.display()));
                }
                // SAFETY: see above.
                unsafe { libloading::Library::new(&p) }
                    .map(|l| (l, p.display().to_string()))
                    .map_err(|e| e.to_string())
            }
            Candidate::System(name) => {
                // SAFETY: see above.
                unsafe { libloading::Library::new(name) }
                    .map(|l| (l, name.clone()))
                    .map_err(|e| e.to_string())
            }
        }
    }
}

/// The `lib` directory of the `nvidia-nccl` wheel of the `python3` on the path.
fn wheel_dir() -> std::result::Result<PathBuf, String> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])",
        ])
        .stderr(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("python3 could not run: {e}"))?;
    if !out.status.success() {
        return Err("python3 has no nvidia.nccl package".into());
    }
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Ok(PathBuf::from(dir).join("lib"))
}

/// `ncclGetVersion`'s code as `(major, minor, patch)` (codes of 2.9 and later).
pub fn decode_version(code: i32) -> (u32, u32, u32) {
    let c = code.max(0) as u32;
    if c >= 10000 {
        (c / 10000, (c % 10000) / 100, c % 100)
    } else {
        (c / 1000, (c % 1000) / 100, c % 100)
    }
}

impl Nccl {
    /// Loads NCCL from the first of [`candidates`] that works (see the module documentation).
    pub fn load(explicit: Option<&Path>) -> Result<Nccl> {
        Nccl::load_from(&candidates(explicit, |n| std::env::var(n).ok()))
    }

    /// Loads NCCL from the first of `places` that loads, exports every function and is at
    /// least [`MIN_VERSION`].
    pub fn load_from(places: &[Candidate]) -> Result<Nccl> {
        let mut tried = Vec::new();
        for c in places {
            match c.open() {
                Ok((lib, path)) => match Nccl::from_library(lib, path) {
                    Ok(n) => return Ok(n),
                    Err(e) => tried.push((c.describe(), e.to_string())),
                },
                Err(why) => tried.push((c.describe(), why)),
            }
        }
        Err(Error::NcclNotFound { tried })
    }

    fn from_library(lib: libloading::Library, path: String) -> Result<Nccl> {
        fn sym<T: Copy>(lib: &libloading::Library, path: &str, name: &'static str) -> Result<T> {
            let c = format!("{name}\0");
            // SAFETY: `T` is the C signature NCCL's headers give `name` (the type aliases
            // above); the pointer is used only while the library stays loaded (it lives in
            // the same `Nccl`).
            unsafe { lib.get::<T>(c.as_bytes()) }
                .map(|s| *s)
                .map_err(|e| Error::NcclSymbol {
                    path: path.to_string(),
                    symbol: name,
                    reason: e.to_string(),
                })
        }
        let get_version: GetVersion = sym(&lib, &path, "ncclGetVersion")?;
        let mut code: c_int = 0;
        // SAFETY: `ncclGetVersion` writes one int.
        let r = unsafe { get_version(&mut code) };
        if r != 0 {
            return Err(Error::Nccl {
                call: "ncclGetVersion",
                code: r,
                message: "(no message)".into(),
            });
        }
        let version = decode_version(code);
        if version < MIN_VERSION {
            let v = |t: (u32, u32, u32)| format!("{}.{}.{}", t.0, t.1, t.2);
            return Err(Error::NcclVersion {
                path,
                found: v(version),
                needed: v(MIN_VERSION),
            });
        }
        let fns = Functions {
            get_unique_id: sym(&lib, &path, "ncclGetUniqueId")?,
            comm_init_rank: sym(&lib, &path, "ncclCommInitRank")?,
            comm_init_rank_config: sym(&lib, &path, "ncclCommInitRankConfig")?,
            comm_destroy: sym(&lib, &path, "ncclCommDestroy")?,
            comm_abort: sym(&lib, &path, "ncclCommAbort")?,
            comm_get_async_error: sym(&lib, &path, "ncclCommGetAsyncError")?,
            get_error_string: sym(&lib, &path, "ncclGetErrorString")?,
            group_start: sym(&lib, &path, "ncclGroupStart")?,
            group_end: sym(&lib, &path, "ncclGroupEnd")?,
            all_reduce: sym(&lib, &path, "ncclAllReduce")?,
            broadcast: sym(&lib, &path, "ncclBroadcast")?,
            reduce: sym(&lib, &path, "ncclReduce")?,
            all_gather: sym(&lib, &path, "ncclAllGather")?,
            reduce_scatter: sym(&lib, &path, "ncclReduceScatter")?,
            send: sym(&lib, &path, "ncclSend")?,
            recv: sym(&lib, &path, "ncclRecv")?,
        };
        Ok(Nccl {
            _lib: lib,
            path,
            version,
            fns,
        })
    }

    /// Where the library was loaded from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Its version, `(major, minor, patch)`.
    pub fn version(&self) -> (u32, u32, u32) {
        self.version
    }

    /// `result` as a typed error of `call` (`Ok` for `ncclSuccess`).
    pub fn check(&self, call: &'static str, result: NcclResult) -> Result<()> {
        if result == 0 {
            return Ok(());
        }
        // SAFETY: `ncclGetErrorString` returns a static string for any code.
        let p = unsafe { (self.fns.get_error_string)(result) };
        let message = if p.is_null() {
            "(no message)".to_string()
        } else {
            // SAFETY: non-null, NUL-terminated, static (see above).
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        };
        Err(Error::Nccl {
            call,
            code: result,
            message,
        })
    }

    /// A new unique id (rank 0 makes it; the store carries it to the others).
    pub fn unique_id(&self) -> Result<UniqueId> {
        let mut id = UniqueId { internal: [0; 128] };
        // SAFETY: writes the 128-byte id.
        let r = unsafe { (self.fns.get_unique_id)(&mut id) };
        self.check("ncclGetUniqueId", r)?;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_is_nccl_2_18s_layout() {
        // size_t, 2 x unsigned, 4 x int, a pointer, an int (padded): 48 bytes on 64-bit.
        assert_eq!(size_of::<Config>(), 48);
        let c = Config::new(false);
        assert_eq!((c.size, c.magic, c.blocking), (48, 0xcafe_beef, 0));
        assert_eq!(Config::new(true).blocking, 1);
    }

    #[test]
    fn versions_decode_both_encodings() {
        assert_eq!(decode_version(22803), (2, 28, 3));
        assert_eq!(decode_version(21806), (2, 18, 6));
        assert_eq!(decode_version(2708), (2, 7, 8));
        assert!(decode_version(21800) >= MIN_VERSION);
        assert!(decode_version(21703) < MIN_VERSION);
    }

    #[test]
    fn candidates_put_the_explicit_path_first() {
        let none = |_: &str| None;
        let env = |n: &str| (n == "GENESIS_NCCL_LIBRARY").then(|| "/opt/nccl.so".to_string());
        let c = candidates(Some(Path::new("/x/libnccl.so.2")), env);
        assert_eq!(c[0], Candidate::Path("/x/libnccl.so.2".into()));
        assert_eq!(
            candidates(None, env)[0],
            Candidate::Path("/opt/nccl.so".into())
        );
        assert_eq!(candidates(None, none)[0], Candidate::AlreadyLoaded);
        assert_eq!(candidates(None, none).len(), 4);
    }

    #[test]
    fn a_missing_library_is_a_typed_error_naming_each_place() {
        let places = [
            Candidate::Path("/nonexistent/libnccl.so.2".into()),
            Candidate::System("libgenesis_no_such_nccl.so".into()),
        ];
        match Nccl::load_from(&places) {
            Err(Error::NcclNotFound { tried }) => {
                assert_eq!(tried.len(), 2);
                assert!(tried[0].0.contains("/nonexistent/libnccl.so.2"));
                assert!(tried[0].1.contains("no such file"));
                let msg = Error::NcclNotFound { tried }.to_string();
                assert!(msg.contains("libgenesis_no_such_nccl.so"), "{msg}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_library_without_nccl_symbols_is_refused() {
        // libc loads, but is no NCCL: the missing symbol is named.
        let places = [Candidate::System("libc.so.6".into())];
        match Nccl::load_from(&places) {
            Err(Error::NcclNotFound { tried }) => {
                assert!(tried[0].1.contains("ncclGetVersion"), "{tried:?}");
            }
            other => panic!("{other:?}"),
        }
    }

    /// Wherever NCCL is installed (the wheel PyTorch brings, the system), it loads and is
    /// recent; where it is not, the error lists the places.
    #[test]
    fn load_finds_nccl_or_says_where_it_looked() {
        match Nccl::load(None) {
            Ok(n) => {
                assert!(n.version() >= MIN_VERSION);
                eprintln!("NCCL {:?} from {}", n.version(), n.path());
            }
            Err(Error::NcclNotFound { tried }) => {
                assert!(tried.len() >= 4, "{tried:?}");
                eprintln!("skipped: no NCCL here ({} places)", tried.len());
            }
            Err(e) => panic!("{e}"),
        }
    }
}
