//! CUDA C kernels of Genesis and their CPU twins.
//!
//! The kernels are written in `kernels/*.cu` at the workspace root and compiled by
//! `cargo xtask build-kernels` into fatbins (machine code for sm_80, sm_86, sm_89, sm_90 and PTX
//! for compute_80) that this crate embeds with `include_bytes!`; nobody needs nvcc to build.
//! Every kernel has a CPU twin in [`cpu`] that gives bit-identical results (NaN payloads aside),
//! and the GPU tests compare the two.
//!
//! Kernels are launched on raw device addresses ([`gpu`], behind the `cuda` feature); typed
//! storages live in `genesis-storage`.
#![warn(missing_docs)]

pub mod attention;
pub mod classifier;
pub mod classify;
pub mod copy;
pub mod cpu;
mod dtype;
mod element;
pub mod gather;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod grad;
pub mod images;
pub mod index;
pub mod layernorm;
pub mod mask;
pub mod matmul;
pub mod nd;
pub mod optim;
pub mod random;
pub mod real;
pub mod reduce;
pub mod scan;
pub mod softmax;
pub mod sort;
pub mod triangle;
pub mod unary;

pub use copy::{MAX_DIMS, StridedCopy, StridedCopy32};
pub use dtype::DType;
pub use element::{BinaryOp, CompareOp, Element, UnaryOp};
#[doc(hidden)]
pub use half as __half;
pub use matmul::{HostMatmul, MatmulElement, MatmulPrecision, MatmulShape};
pub use nd::{BinaryNd, Rhs, WhereNd};
pub use random::{RandomElement, Sampler};
pub use reduce::{ReduceOp, ReduceShape};
pub use unary::Twin;

/// Errors of kernel launches and their CPU twins.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Operands of different lengths.
    #[error("{op}: operand lengths differ ({expected} vs {got} elements)")]
    LengthMismatch {
        /// The kernel.
        op: &'static str,
        /// Length of the first operand.
        expected: usize,
        /// Length of the operand that differs.
        got: usize,
    },
    /// A request the kernels do not handle.
    #[error("{op}: unsupported: {reason}")]
    Unsupported {
        /// The kernel.
        op: &'static str,
        /// Why.
        reason: String,
    },
    /// An index value outside `0..size` (`gather`, `scatter`, `index_select`).
    #[error("{op}: index {value} at position {position} is out of bounds for size {size}")]
    IndexOutOfRange {
        /// The kernel.
        op: &'static str,
        /// The first position (row-major over the index) holding a bad value.
        position: usize,
        /// The value.
        value: i64,
        /// The size of the indexed dimension.
        size: i64,
    },
    /// An error from the CUDA runtime (launch, module load, ...).
    #[error(transparent)]
    Cuda(#[from] genesis_cuda::Error),
}

impl Error {
    /// Whether the error is the driver running out of device memory.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, Error::Cuda(e) if e.is_out_of_memory())
    }
}

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// [`Error::Unsupported`] unless `T` is a floating type.
pub(crate) fn float_only<T: Element>(op: &'static str) -> Result<()> {
    if T::IS_FLOAT {
        Ok(())
    } else {
        Err(Error::Unsupported {
            op,
            reason: format!("element type {} (floating types only)", T::NAME),
        })
    }
}

/// [`Error::LengthMismatch`] for the first of `lens` that is not `expected`.
pub(crate) fn same_len(op: &'static str, expected: usize, lens: &[usize]) -> Result<()> {
    match lens.iter().find(|&&l| l != expected) {
        Some(&got) => Err(Error::LengthMismatch { op, expected, got }),
        None => Ok(()),
    }
}
