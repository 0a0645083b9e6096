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
    /// An indexing error (out of range, bad step, shapes that do not broadcast, ...).
    #[error(transparent)]
    Index(#[from] genesis_index::Error),
    /// An error of the caching allocator.
    #[error(transparent)]
    Memory(#[from] genesis_mem::Error),
    /// An error of the storage layer (devices, CUDA, kernels).
    #[error(transparent)]
    Storage(#[from] genesis_storage::Error),
}

/// Result type of the facade.
pub type Result<T, E = Error> = std::result::Result<T, E>;
