//! Genesis indexing: index expressions ([`IndexItem`], the [`s!`] macro), planning into an
//! inspectable [`IndexPlan`] with NumPy's semantics (and PyTorch's rule that a negative step is
//! an error), and execution.
//!
//! ```
//! use genesis_index::{get, s};
//! use genesis_storage::{Device, Storage, View};
//!
//! let x = View::new(Storage::from_slice(&(0..20).collect::<Vec<i32>>(), Device::Cpu)?);
//! let m = x.relayout(x.layout().view(&[4, 5]).unwrap()).unwrap();
//! let v = get(&m, &s![1..3, ..;2]).unwrap();           // x[1:3, ::2], a view
//! assert!(v.shares_storage(&m));
//! assert_eq!(v.contiguous()?.to_vec::<i32>()?, vec![5, 7, 9, 10, 12, 14]);
//! # Ok::<(), genesis_storage::Error>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod advanced;
mod exec;
mod expr;
mod plan;
mod spec;

pub use advanced::select_rows;
pub use exec::{Value, execute_get, get, get_routed, resolve_masks, set};
pub use expr::{IndexArg, IndexInt, SliceArg};
pub use genesis_storage::Layout;
pub use plan::{
    Advanced, IndexArray, IndexPlan, MaskPlan, MaskStrategy, PlanKind, broadcast_shapes, plan,
};
pub use spec::{IndexDType, IndexItem, IndexTensor, MaskCoords, StoredIndex, ToIndex};

use genesis_storage::{DType, Device};

/// Errors of indexing. [`Error::kind`] gives the conformance corpus's name for each.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An integer or index-tensor value outside its dimension.
    #[error("index {index} is out of bounds for dimension {dim} with size {size}")]
    IndexOutOfRange {
        /// The input dimension.
        dim: usize,
        /// The index given.
        index: i64,
        /// The dimension's size.
        size: usize,
    },
    /// More indices than dimensions.
    #[error("too many indices: {given} given for a tensor of {ndim} dimension(s)")]
    TooManyIndices {
        /// Dimensions the index consumes.
        given: usize,
        /// The tensor's rank.
        ndim: usize,
    },
    /// An index that is not one (two ellipses, a float index tensor).
    #[error("invalid index: {reason}")]
    InvalidIndex {
        /// Why.
        reason: String,
    },
    /// A zero or negative slice step.
    #[error("slice step must be positive, got {step}")]
    InvalidStep {
        /// The step given.
        step: i64,
    },
    /// Shapes that do not fit: a mask, index arrays that do not broadcast, a value that does
    /// not broadcast to the indexed shape.
    #[error("shape mismatch: {what}")]
    ShapeMismatch {
        /// What did not fit.
        what: String,
    },
    /// An assigned value of another dtype.
    #[error("cannot assign a {value} value to a {target} tensor")]
    DTypeMismatch {
        /// The target's dtype.
        target: DType,
        /// The value's dtype.
        value: DType,
    },
    /// An operation not available on that device yet.
    #[error("{op} is not available for storages on {device}")]
    UnsupportedDevice {
        /// The operation.
        op: &'static str,
        /// The device.
        device: Device,
    },
    /// An error of the storage layer.
    #[error(transparent)]
    Storage(#[from] genesis_storage::Error),
}

impl From<genesis_storage::LayoutError> for Error {
    fn from(e: genesis_storage::LayoutError) -> Error {
        Error::Storage(e.into())
    }
}

impl From<genesis_kernels::Error> for Error {
    fn from(e: genesis_kernels::Error) -> Error {
        Error::Storage(e.into())
    }
}

impl From<genesis_cuda::Error> for Error {
    fn from(e: genesis_cuda::Error) -> Error {
        Error::Storage(e.into())
    }
}

impl Error {
    /// Whether memory ran out in the storage layer (device or host).
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, Error::Storage(e) if e.is_out_of_memory())
    }

    /// The conformance corpus's name of this error: `index_out_of_range`, `too_many_indices`,
    /// `invalid_index`, `invalid_step` or `shape_mismatch` (other errors: `other`).
    pub fn kind(&self) -> &'static str {
        match self {
            Error::IndexOutOfRange { .. } => "index_out_of_range",
            Error::TooManyIndices { .. } => "too_many_indices",
            Error::InvalidIndex { .. } => "invalid_index",
            Error::InvalidStep { .. } => "invalid_step",
            Error::ShapeMismatch { .. } => "shape_mismatch",
            _ => "other",
        }
    }
}

/// The element count of `shape`: 0 when a size is 0, whatever the others (an empty layout's
/// may be huge, their product overflowing), else the product, `usize::MAX` when it is not
/// representable (no storage holds that many elements).
pub(crate) fn numel(shape: &[usize]) -> usize {
    genesis_storage::checked_numel(shape).unwrap_or(usize::MAX)
}

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
