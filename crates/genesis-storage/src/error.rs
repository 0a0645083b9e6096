use crate::{DType, Device};

/// Errors of the storage layer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Two operands of different dtypes.
    #[error("{op}: dtype mismatch, {lhs} vs {rhs}")]
    DTypeMismatch {
        /// The operation.
        op: &'static str,
        /// The first operand's dtype.
        lhs: DType,
        /// The second operand's dtype.
        rhs: DType,
    },
    /// Two operands on different devices.
    #[error("{op}: device mismatch, {lhs} vs {rhs}")]
    DeviceMismatch {
        /// The operation.
        op: &'static str,
        /// The first operand's device.
        lhs: Device,
        /// The second operand's device.
        rhs: Device,
    },
    /// Two operands of different lengths.
    #[error("{op}: length mismatch, {lhs} vs {rhs} elements")]
    LengthMismatch {
        /// The operation.
        op: &'static str,
        /// The first operand's length.
        lhs: usize,
        /// The second operand's length.
        rhs: usize,
    },
    /// An operation that has no kernel for this dtype (with a hint where a conversion helps:
    /// a mean needs a floating-point input, as PyTorch's).
    #[error("{op} is not supported for dtype {dtype}{}", dtype_hint(.op, *.dtype))]
    UnsupportedDType {
        /// The operation.
        op: &'static str,
        /// The dtype.
        dtype: DType,
    },
    /// A device string that does not parse.
    #[error("invalid device {input:?}: expected \"cpu\", \"cuda\" or \"cuda:N\"")]
    InvalidDeviceString {
        /// The string given.
        input: String,
    },
    /// A CUDA device in a build without the `cuda` feature.
    #[error(
        "{device} requested, but Genesis was built without CUDA support: rebuild with `--features cuda`"
    )]
    CudaNotCompiled {
        /// The device asked for.
        device: Device,
    },
    /// A byte count that overflows `usize`.
    #[error("{len} elements of {dtype} do not fit in the address space")]
    SizeOverflow {
        /// Elements asked for.
        len: usize,
        /// Their dtype.
        dtype: DType,
    },
    /// Operands whose shapes differ.
    #[error("{op}: shape mismatch, {lhs:?} vs {rhs:?}")]
    ShapeMismatch {
        /// The operation.
        op: &'static str,
        /// The first operand's shape.
        lhs: Vec<usize>,
        /// The second operand's shape.
        rhs: Vec<usize>,
    },
    /// Host access to memory that lives on a device.
    #[error("{op} needs host memory, but the storage is on {device}")]
    NotOnHost {
        /// The operation.
        op: &'static str,
        /// Where the storage is.
        device: Device,
    },
    /// Device access to memory that lives on the host.
    #[error("{op} needs CUDA memory, but the storage is on {device}")]
    NotOnDevice {
        /// The operation.
        op: &'static str,
        /// Where the storage is.
        device: Device,
    },
    /// Bool data holding a byte other than 0 or 1.
    #[error("bool data must hold only 0 and 1")]
    InvalidBool,
    /// A copy whose destination layout repeats elements (stride 0).
    #[error("the destination of a copy has repeated elements (stride 0): writes would collide")]
    OverlappingDestination,
    /// A file or shared-memory operation failed.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// The operating system's message.
        message: String,
    },
    /// A path that names something other than a regular file (after following symbolic
    /// links): a FIFO, a device, a directory or a socket. Such a file has no fixed length to
    /// map or read (a FIFO's open or read may wait forever, `/dev/zero` never ends), so it is
    /// refused before it is read.
    #[error("{path} is {kind}, not a regular file")]
    NotRegularFile {
        /// The path given.
        path: String,
        /// What it is ("a FIFO", "a character device", "a block device", "a directory",
        /// "a socket", or "not a regular file").
        kind: &'static str,
    },
    /// A mapped file shorter than the storage asked for.
    #[error("{path} holds {len} bytes but the mapping needs {needed}")]
    FileTooShort {
        /// The file.
        path: String,
        /// Bytes needed (offset + length).
        needed: usize,
        /// The file's length.
        len: usize,
    },
    /// A mapping offset that is not a multiple of the element size.
    #[error("offset {offset} is not a multiple of the element size {align}")]
    MisalignedOffset {
        /// The offset given.
        offset: usize,
        /// The element size.
        align: usize,
    },
    /// A mapping of zero bytes.
    #[error("a mapped or shared storage must hold at least one element")]
    EmptyMapping,
    /// A shared-memory name with characters other than letters, digits, `-`, `_`, `.`.
    #[error("invalid shared-memory name {name:?}: use 1-200 letters, digits, '-', '_' or '.'")]
    BadSharedName {
        /// The name given.
        name: String,
    },
    /// Creating shared memory whose name exists.
    #[error("shared memory {name:?} already exists")]
    SharedExists {
        /// The name.
        name: String,
    },
    /// Attaching to (or unlinking) shared memory that does not exist.
    #[error("shared memory {name:?} does not exist")]
    SharedNotFound {
        /// The name.
        name: String,
    },
    /// Shared memory whose bytes the file system cannot reserve (`/dev/shm` is full or
    /// smaller than the segment); nothing is left at the name.
    #[error("shared memory {name:?}: cannot reserve {bytes} bytes: {message}")]
    SharedNoSpace {
        /// The name.
        name: String,
        /// Bytes asked for.
        bytes: usize,
        /// The operating system's message.
        message: String,
    },
    /// Shared memory whose name is not a regular file of this user (a symbolic link, another
    /// kind of file, or a file owned by another user): it is not attached.
    #[error("shared memory {name:?} refused: {reason}")]
    SharedRefused {
        /// The name.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// Permission bits for new shared memory above `0o777`.
    #[error("shared-memory mode {mode:#o} is not a set of permission bits (at most 0o777)")]
    BadSharedMode {
        /// The mode given.
        mode: u32,
    },
    /// A mapped file or shared-memory segment that another process truncated while it was
    /// mapped: the lost bytes read as zeros and writes to them are discarded
    /// ([`Storage::check_mapping`](crate::Storage::check_mapping)).
    #[error("{path} was truncated while mapped: the bytes past its end are lost")]
    MappingTruncated {
        /// The file.
        path: String,
    },
    /// An alignment that is not a power of two.
    #[error("alignment {align} is not a power of two")]
    BadAlignment {
        /// The alignment given.
        align: usize,
    },
    /// The host could not allocate memory.
    #[error("host out of memory allocating {bytes} bytes")]
    HostOutOfMemory {
        /// Bytes asked for.
        bytes: usize,
    },
    /// A scalar that the dtype does not represent as given (a fraction or an out-of-range
    /// value for an integer dtype, a finite value that would overflow to an infinity in a
    /// float dtype): see [`Storage::scalar`](crate::Storage::scalar).
    #[error("scalar {value} is not representable in {dtype}")]
    ScalarOutOfRange {
        /// The scalar.
        value: f64,
        /// The dtype.
        dtype: DType,
    },
    /// An element range past the end of a storage.
    #[error("{op}: elements {start}..{start}+{len} are outside a storage of {storage_len}")]
    OutOfBounds {
        /// The operation.
        op: &'static str,
        /// First element of the range.
        start: usize,
        /// Elements in the range.
        len: usize,
        /// Elements in the storage.
        storage_len: usize,
    },
    /// An index value outside the dimension it indexes, given on the host to build
    /// [`IndexValues`](crate::IndexValues).
    #[error("{op}: index {value} is out of range for index array {array} of size {size}")]
    IndexValueOutOfRange {
        /// The operation.
        op: &'static str,
        /// The index array.
        array: usize,
        /// The value.
        value: i64,
        /// The size of the dimension it indexes.
        size: usize,
    },
    /// An advanced index whose offsets, for index values in range, reach outside the storage
    /// (the smallest and largest offset a result element may touch).
    #[error("{op}: offsets {lo}..={hi} reach outside a storage of {storage_len} elements")]
    IndexOutsideStorage {
        /// The operation.
        op: &'static str,
        /// The smallest offset.
        lo: i128,
        /// The largest offset.
        hi: i128,
        /// Elements in the storage.
        storage_len: usize,
    },
    /// Advanced-indexing operands that do not belong together (index values, a descriptor,
    /// dead marks or groups made from other values), or a target whose layout may write an
    /// element twice.
    #[error("{op}: {reason}")]
    IndexRefused {
        /// The operation.
        op: &'static str,
        /// Why.
        reason: String,
    },
    /// max, min, argmax or argmin over an empty axis (they have no identity).
    #[error("{op}: cannot reduce an empty axis (the operation has no identity)")]
    EmptyReduction {
        /// The operation.
        op: &'static str,
    },
    /// A write to a storage that this thread is reading (or a read of one it is writing),
    /// which would wait for itself (see the aliasing model of `Storage`): for example a
    /// write while a [`HostBytes`](crate::HostBytes) guard of the same storage is alive.
    #[error(
        "{op}: the storage is already borrowed by this thread (a write while reading it, or a read while writing it); drop the guard first"
    )]
    Aliased {
        /// The operation.
        op: &'static str,
    },
    /// A write to a read-only storage.
    #[error("{op}: the storage is read-only")]
    ReadOnly {
        /// The operation.
        op: &'static str,
    },
    /// A storage that cannot be shared with another process: not CUDA memory of a device
    /// pool, empty, or on memory the driver cannot export.
    #[error("{op}: this storage cannot be shared with another process: {reason}")]
    NotShareable {
        /// The operation.
        op: &'static str,
        /// Why.
        reason: String,
    },
    /// A message of the CUDA storage sharing protocol that this process cannot accept.
    #[error("CUDA storage sharing: bad message from the other process: {reason}")]
    IpcProtocol {
        /// What was wrong with it.
        reason: String,
    },
    /// The other process of a shared CUDA storage closed the connection (or exited).
    #[error("CUDA storage sharing: the other process closed the connection")]
    IpcPeerGone,
    /// The importing process could not map an exported storage.
    #[error("CUDA storage sharing: the importing process refused the storage: {reason}")]
    IpcRefused {
        /// The importer's reason.
        reason: String,
    },
    /// An imported storage lies on a device this process does not see.
    #[error(
        "CUDA storage sharing: the storage is on device {ordinal} of the exporting process \
         (UUID {uuid}), which this process does not see"
    )]
    IpcDeviceNotFound {
        /// The device's UUID, in hexadecimal.
        uuid: String,
        /// Its ordinal in the exporting process.
        ordinal: u32,
    },
    /// No message came from the other process in time.
    #[error("CUDA storage sharing: {op} timed out after {millis} ms")]
    IpcTimeout {
        /// The operation.
        op: &'static str,
        /// How long it waited.
        millis: u64,
    },
    /// A view or layout error.
    #[error(transparent)]
    Layout(#[from] crate::LayoutError),
    /// An error of the caching allocator (out of memory, limits).
    #[error(transparent)]
    Memory(genesis_mem::Error),
    /// An error from the CUDA runtime.
    #[error(transparent)]
    Cuda(#[from] genesis_cuda::Error),
    /// An error from a kernel or its CPU twin.
    #[error(transparent)]
    Kernel(#[from] genesis_kernels::Error),
}

/// Result type of the storage layer.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What to do about an [`Error::UnsupportedDType`], when a conversion helps.
fn dtype_hint(op: &str, dtype: DType) -> &'static str {
    match op {
        "mean" if !dtype.is_float() => {
            ": the input dtype must be a floating point dtype; convert it first, e.g. with \
             `.to_dtype(DType::F32)`"
        }
        _ => "",
    }
}

impl Error {
    /// Whether memory ran out: the caching allocator's report (or a request larger than the
    /// device), the driver's `CUDA_ERROR_OUT_OF_MEMORY` (directly or from a kernel launch), or
    /// the host's allocator.
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            Error::Memory(
                genesis_mem::Error::OutOfMemory { .. }
                | genesis_mem::Error::TooLarge { .. }
                | genesis_mem::Error::Backend(genesis_mem::BackendError::OutOfMemory),
            )
            | Error::HostOutOfMemory { .. } => true,
            Error::Cuda(e) => e.is_out_of_memory(),
            Error::Kernel(e) => e.is_out_of_memory(),
            _ => false,
        }
    }
}

impl From<genesis_mem::Error> for Error {
    fn from(e: genesis_mem::Error) -> Error {
        Error::Memory(e)
    }
}
