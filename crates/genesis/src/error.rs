use genesis_storage::{DType, Device};

/// The one error type of the facade.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Operands whose shapes do not fit the operation.
    #[error("{op}: shape mismatch between {lhs:?} and {rhs:?}")]
    ShapeMismatch {
        /// The operation.
        op: &'static str,
        /// The first operand's shape.
        lhs: Vec<usize>,
        /// The second operand's shape.
        rhs: Vec<usize>,
    },
    /// A matrix product whose inner sizes differ: the last dimension of the first operand and
    /// the second-to-last of the second (its only one when 1-D). For two matrices the message
    /// is PyTorch's, `mat1 and mat2 shapes cannot be multiplied (3x4 and 3x4)`.
    #[error("{op}: {}", inner_mismatch(.lhs, .rhs, *.lhs_inner, *.rhs_inner))]
    InnerDimMismatch {
        /// The operation.
        op: &'static str,
        /// The first operand's shape.
        lhs: Vec<usize>,
        /// The second operand's shape.
        rhs: Vec<usize>,
        /// The first operand's inner size (its last dimension).
        lhs_inner: usize,
        /// The second operand's inner size.
        rhs_inner: usize,
    },
    /// A dimension outside a tensor's rank (negative counts from the end; a 0-d tensor takes 0
    /// and -1).
    #[error(
        "{op}: dimension {dim} is out of range for a tensor of {rank} dimension(s) (expected \
         to be in range of [{}, {}])",
        -(*.rank.max(&1) as i64),
        *.rank.max(&1) as i64 - 1
    )]
    DimOutOfRange {
        /// The operation.
        op: &'static str,
        /// The dimension given.
        dim: i64,
        /// The tensor's rank.
        rank: usize,
    },
    /// A tensor read back to the host as a Rust type that is not its dtype's.
    #[error("{op}: the tensor holds {dtype}, not {requested}")]
    WrongElementType {
        /// The operation.
        op: &'static str,
        /// The tensor's dtype.
        dtype: DType,
        /// The dtype of the Rust type asked for.
        requested: DType,
    },
    /// Operands of different dtypes.
    #[error("{op}: dtype mismatch between {lhs} and {rhs}")]
    DTypeMismatch {
        /// The operation.
        op: &'static str,
        /// The first operand's dtype.
        lhs: DType,
        /// The second operand's dtype.
        rhs: DType,
    },
    /// Operands on different devices.
    #[error("{op}: device mismatch between {lhs} and {rhs}")]
    DeviceMismatch {
        /// The operation.
        op: &'static str,
        /// The first operand's device.
        lhs: Device,
        /// The second operand's device.
        rhs: Device,
    },
    /// Data whose length does not match the shape it is given.
    #[error("{op}: shape {shape:?} holds {expected} elements but {got} were given")]
    DataLength {
        /// The operation.
        op: &'static str,
        /// The shape asked for.
        shape: Vec<usize>,
        /// Elements the shape holds.
        expected: usize,
        /// Elements given.
        got: usize,
    },
    /// An argument the operation refuses.
    #[error("{op}: {reason}")]
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// Why.
        reason: String,
    },
    /// A print option out of its documented range (see
    /// [`PrintOptions::validate`](crate::PrintOptions::validate)).
    #[error("set_printoptions: {option} = {value} is out of range (allowed: {allowed})")]
    InvalidPrintOption {
        /// The field of [`PrintOptions`](crate::PrintOptions).
        option: &'static str,
        /// The value given.
        value: usize,
        /// The range allowed.
        allowed: &'static str,
    },
    /// A scalar operand that the tensor's dtype cannot represent exactly (a fraction or an
    /// out-of-range value for an integer dtype).
    #[error("{op}: scalar {value} is not representable in {dtype}")]
    ScalarOutOfRange {
        /// The operation.
        op: &'static str,
        /// The scalar.
        value: f64,
        /// The tensor's dtype.
        dtype: DType,
    },
    /// A tensor an op saved for its backward was modified in place before the backward
    /// (PyTorch's "one of the variables needed for gradient computation has been modified by
    /// an inplace operation").
    #[error(
        "backward of {op}: one of the tensors it saved for the gradient has been modified by \
         an in-place operation (its version is {version}; it was {saved_version} when saved)"
    )]
    SavedTensorModified {
        /// The op whose backward needed the tensor.
        op: &'static str,
        /// The storage's version when the op saved the tensor.
        saved_version: u64,
        /// Its version at the backward.
        version: u64,
    },
    /// A misuse of autograd: a backward from a tensor without a graph or from a non-scalar
    /// without a gradient, a second backward through a freed graph, an in-place op on a
    /// tensor that requires grad, `requires_grad` on an integer tensor, ...
    #[error("autograd: {reason}")]
    Autograd {
        /// What went wrong.
        reason: String,
    },
    /// Memory ran out, whichever layer found it: device memory (the caching allocator's report
    /// with its figures, or the driver's), or host memory. The storage-layer error says which.
    #[error(transparent)]
    OutOfMemory(genesis_storage::Error),
    /// An indexing error (out of range, bad step, shapes that do not broadcast, ...).
    #[error(transparent)]
    Index(genesis_index::Error),
    /// An error of the caching allocator (other than running out of memory).
    #[error(transparent)]
    Memory(genesis_mem::Error),
    /// An error of the storage layer (devices, CUDA, kernels) other than running out of
    /// memory.
    #[error(transparent)]
    Storage(genesis_storage::Error),
}

/// The message of [`Error::InnerDimMismatch`]: PyTorch's for two matrices, both shapes and
/// the inner sizes otherwise.
fn inner_mismatch(lhs: &[usize], rhs: &[usize], lhs_inner: usize, rhs_inner: usize) -> String {
    if let ([m, k], [kb, n]) = (lhs, rhs) {
        return format!("mat1 and mat2 shapes cannot be multiplied ({m}x{k} and {kb}x{n})");
    }
    let which = if rhs.len() == 1 {
        "size"
    } else {
        "second-to-last dimension"
    };
    format!(
        "shapes {lhs:?} and {rhs:?} cannot be multiplied: the last dimension of the first \
         ({lhs_inner}) differs from the {which} of the second ({rhs_inner})"
    )
}

impl Error {
    /// Whether memory ran out (device or host), as PyTorch's `torch.OutOfMemoryError`.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, Error::OutOfMemory(_))
    }
}

// The lower layers' errors are lifted here, once: `?` on any of them gives `Error`, and an
// out-of-memory condition from any layer becomes `Error::OutOfMemory`.

impl From<genesis_storage::Error> for Error {
    fn from(e: genesis_storage::Error) -> Error {
        if e.is_out_of_memory() {
            Error::OutOfMemory(e)
        } else {
            Error::Storage(e)
        }
    }
}

impl From<genesis_index::Error> for Error {
    fn from(e: genesis_index::Error) -> Error {
        match e {
            genesis_index::Error::Storage(s) if s.is_out_of_memory() => Error::OutOfMemory(s),
            e => Error::Index(e),
        }
    }
}

impl From<genesis_mem::Error> for Error {
    fn from(e: genesis_mem::Error) -> Error {
        match genesis_storage::Error::from(e) {
            s if s.is_out_of_memory() => Error::OutOfMemory(s),
            genesis_storage::Error::Memory(m) => Error::Memory(m),
            s => Error::Storage(s),
        }
    }
}

impl From<genesis_cuda::Error> for Error {
    fn from(e: genesis_cuda::Error) -> Error {
        genesis_storage::Error::from(e).into()
    }
}

impl From<genesis_kernels::Error> for Error {
    fn from(e: genesis_kernels::Error) -> Error {
        genesis_storage::Error::from(e).into()
    }
}

impl From<genesis_storage::LayoutError> for Error {
    fn from(e: genesis_storage::LayoutError) -> Error {
        genesis_storage::Error::from(e).into()
    }
}

/// Result type of the facade.
pub type Result<T, E = Error> = std::result::Result<T, E>;
