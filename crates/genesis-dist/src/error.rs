//! The crate's one error type.

use std::time::Duration;

/// An error of `genesis-dist`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No NCCL library could be loaded; `tried` names each place and why it failed.
    #[error("NCCL could not be loaded; looked in:\n{}", tried.iter().map(|(p, why)| format!("  {p}: {why}")).collect::<Vec<_>>().join("\n"))]
    NcclNotFound {
        /// Each place looked in, and the reason it failed.
        tried: Vec<(String, String)>,
    },
    /// A loaded NCCL is older than the one Genesis needs.
    #[error("NCCL {found} at {path} is older than {needed}")]
    NcclVersion {
        /// The library's path.
        path: String,
        /// Its version (`major.minor.patch`).
        found: String,
        /// The oldest version taken.
        needed: String,
    },
    /// A symbol NCCL should export is missing.
    #[error("NCCL at {path} lacks {symbol}: {reason}")]
    NcclSymbol {
        /// The library's path.
        path: String,
        /// The symbol.
        symbol: &'static str,
        /// The loader's message.
        reason: String,
    },
    /// An NCCL call failed.
    #[error("{call}: NCCL error {code} ({message})")]
    Nccl {
        /// The call.
        call: &'static str,
        /// NCCL's result code.
        code: i32,
        /// NCCL's description of it.
        message: String,
    },
    /// A variable of the group's environment is missing or malformed.
    #[error("environment variable {name}: {reason}")]
    Env {
        /// The variable.
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A store operation did not finish in time.
    #[error("store: {op} timed out after {after:?}")]
    Timeout {
        /// The operation (`get key`, `wait`, `connect`).
        op: String,
        /// The time it was given.
        after: Duration,
    },
    /// The store's peer sent something that is not the protocol, or closed the connection.
    #[error("store protocol: {0}")]
    Protocol(String),
    /// An I/O error (sockets, processes).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A launched process failed.
    #[error("rank {rank} exited with {status}")]
    ProcessFailed {
        /// The rank of the process.
        rank: usize,
        /// How it ended.
        status: String,
    },
    /// An NCCL call (communicator creation, a collective, its completion) did not finish in
    /// time: the communicator was aborted.
    #[error("{op}: NCCL did not finish within {after:?}; the communicator was aborted")]
    NcclTimeout {
        /// The call or collective.
        op: &'static str,
        /// The time it was given.
        after: Duration,
    },
    /// The communicator was aborted (after an error, a timeout, or [`crate::ProcessGroup::abort`]):
    /// it takes no more calls.
    #[error("{op}: the communicator was aborted ({reason})")]
    Aborted {
        /// The call refused.
        op: &'static str,
        /// Why it was aborted.
        reason: String,
    },
    /// A tensor that is not on a CUDA device.
    #[error("{op}: {what} is on {device}; collectives take CUDA tensors")]
    NotOnCuda {
        /// The collective.
        op: &'static str,
        /// Which argument.
        what: &'static str,
        /// Its device.
        device: genesis::Device,
    },
    /// A tensor on another device than the communicator's.
    #[error("{op}: {what} is on {found}, the communicator on {expected}")]
    WrongDevice {
        /// The collective.
        op: &'static str,
        /// Which argument.
        what: &'static str,
        /// The communicator's device.
        expected: genesis::Device,
        /// The tensor's.
        found: genesis::Device,
    },
    /// A tensor that is not contiguous (NCCL reads and writes one run of memory).
    #[error(
        "{op}: {what} is not contiguous (shape {shape:?}, strides {strides:?}); call .contiguous()"
    )]
    NotContiguous {
        /// The collective.
        op: &'static str,
        /// Which argument.
        what: &'static str,
        /// Its shape.
        shape: Vec<usize>,
        /// Its strides.
        strides: Vec<isize>,
    },
    /// A dtype NCCL has no type for (int16), or a reduction it cannot do on the dtype
    /// (average of bool).
    #[error("{op}: {reason}")]
    UnsupportedDType {
        /// The collective.
        op: &'static str,
        /// The dtype.
        dtype: genesis::DType,
        /// What is missing.
        reason: String,
    },
    /// Two tensors of one collective with different dtypes.
    #[error("{op}: {what} is {found}, expected {expected}")]
    DTypeMismatch {
        /// The collective.
        op: &'static str,
        /// Which argument.
        what: &'static str,
        /// The dtype needed.
        expected: genesis::DType,
        /// The dtype given.
        found: genesis::DType,
    },
    /// A tensor of the wrong number of elements for the collective.
    #[error("{op}: {what} has {found} elements, expected {expected}")]
    SizeMismatch {
        /// The collective.
        op: &'static str,
        /// Which argument.
        what: String,
        /// The count needed.
        expected: usize,
        /// The count given.
        found: usize,
    },
    /// An error of the tensor library (devices, streams, events).
    #[error(transparent)]
    Tensor(#[from] genesis::Error),
    /// Bad input.
    #[error("{op}: {reason}")]
    InvalidArgument {
        /// The function.
        op: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An [`Error::Io`] with its context.
pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}
