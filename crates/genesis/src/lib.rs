//! Genesis: a PyTorch-style [`Tensor`] over a Rust GPU memory, storage and indexing stack.
//!
//! ```
//! use genesis::{Device, Tensor};
//!
//! let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], Device::Cpu)?;
//! let b = Tensor::full(&[2, 2], 0.5f32, Device::Cpu)?;
//! let c = a.add(&b)?;
//! assert_eq!(c.to_vec::<f32>()?, vec![1.5, 2.5, 3.5, 4.5]);
//! # Ok::<(), genesis::Error>(())
//! ```
//!
//! With the `cuda` feature, `Device::Cuda(n)` puts tensors on GPU `n`; without it (the default)
//! asking for a CUDA device is a typed error.
//!
//! A tensor has at most [`MAX_RANK`] (64, NumPy's limit) dimensions: creation, views,
//! reshapes, indexing and loaded files refuse more with a typed error
//! ([`LayoutError::RankTooLarge`], inside [`Error::Storage`]).
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod activation;
mod args;
mod arrange;
mod attention;
pub mod autograd;
pub mod backends;
mod compose;
pub use compose::PadMode;
mod conv;
pub use conv::{ConvOptions, IntoPair, PoolOptions};
pub mod cpu;
mod einsum;
mod error;
mod everyday;
pub mod fused;
mod index;
mod index_along;
mod interop;
mod interpolate;
pub use interpolate::Interpolation;
mod linalg;
#[doc(hidden)]
pub mod literal;
mod loss;
mod mask;
mod matmul;
mod norm;
mod npy;
mod operand;
mod ops;
mod print;
mod promote;
mod random;
mod reduce;
mod select;
mod softmax;
mod tensor;
mod unary;

pub use args::{Dim, Dims, Scalar, ScalarValue};
pub use autograd::{NoGradGuard, no_grad};
pub use error::{Error, Result};
pub use genesis_index::{IndexArg, IndexInt, SliceArg};
pub use genesis_index::{IndexItem, IndexTensor, ToIndex};
pub use genesis_storage::{BinaryOp, CompareOp, ReduceOp, Twin, UnaryOp};
pub use genesis_storage::{DType, Device, Layout, LayoutError, MAX_RANK, WithDType};
pub use genesis_storage::{host_memory_limit, set_host_memory_limit};
pub use half::{bf16, f16};
pub use index::{ELLIPSIS, NEW, s};
pub use interop::{
    deserialize_safetensors, deserialize_safetensors_with_metadata, load_safetensors,
    load_safetensors_map, load_safetensors_with_metadata, save_safetensors,
    save_safetensors_with_metadata, serialize_safetensors,
};
pub use literal::{Element, TensorData};
pub use loss::Reduction;
pub use npy::{load_npy, load_npz, save_npy, save_npz};
pub use operand::{Operand, OperandRef, RoundingMode, result_type};
pub use print::{PrintOptions, printoptions, set_printoptions};
pub use promote::{can_cast, promote_types};
pub use random::{DEFAULT_SEED, Generator, default_generator, manual_seed};
pub use select::Unique;
pub use tensor::{Tensor, broadcast_shape};

pub mod cuda;

/// The snippets of `docs/guide.md`, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide.md")]
pub struct GuideDoctests;
