//! The Genesis storage layer: dtypes, devices, layouts, and byte storages on CPU and CUDA.
//!
//! A [`Storage`] is a flat run of elements of one [`DType`] on one [`Device`]. CPU storages are
//! 64-byte aligned host memory; CUDA storages are device memory on any device id (today plain
//! `cuMemAlloc`; the caching allocator of `genesis-mem` takes over in its own issue).
//! Elementwise work runs through `genesis-kernels`: the CUDA kernels on the GPU, their CPU twins
//! on the CPU.
//!
//! A storage may be shared (`Arc<Storage>`) and written through any handle
//! ([`Storage::with_exclusive`], [`Storage::copy_strided_from_shared`],
//! [`Storage::fill_shared`], ...): its memory is behind a reader–writer lock, host bytes are
//! lent only under guards ([`HostBytes`], [`HostSlice`]) that hold it, and each write through
//! a shared handle bumps [`Storage::version`].
//!
//! Shapes have at most [`MAX_RANK`] (64) dimensions: [`checked_numel`], the one element count
//! every storage, view and tensor shape goes through, refuses more
//! ([`LayoutError::RankTooLarge`]).
#![warn(missing_docs)]

mod compute;
mod cpu;
// The CUDA backend, or without the `cuda` feature a stub whose memory cannot exist: the one
// place the storage layer depends on the feature.
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(not(feature = "cuda"))]
#[path = "cuda_stub.rs"]
mod cuda;
mod device;
mod dtype;
mod error;
// The wire protocol; without the `cuda` feature only its tests use it.
#[cfg(unix)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
mod ipc;
mod layout;
mod mapped;
mod scalar;
mod share;
mod storage;
pub mod tracker;
mod transfer;
mod view;

pub use cpu::{
    CpuStorage, DEFAULT_ALIGN, check_host_bytes, host_memory_limit, set_host_memory_limit,
};
/// The two sides of a CUDA storage shared between processes ([`Storage::export_cuda`],
/// [`Storage::import_cuda`]).
#[cfg(unix)]
pub use cuda::{CudaExport, CudaImport};
pub use device::{Device, current_cuda_device, set_current_cuda_device};
pub use dtype::{DType, WithDType};
pub use error::{Error, Result};
/// An activation of [`Storage::act_grad`].
pub use genesis_kernels::grad::ActGrad;
/// Where a matmul's operands lie ([`Storage::matmul_layout_with`]).
pub use genesis_kernels::matmul::{MatmulLayout, MatrixLayout};
/// One Adam step's hyper-parameters ([`Storage::adam_step`]).
pub use genesis_kernels::optim::AdamStep;
/// The elementwise operations ([`Storage::binary`], [`Storage::unary`]).
pub use genesis_kernels::{
    BinaryOp, CompareOp, MatmulPrecision, MatmulShape, ReduceOp, ReduceShape, Sampler, Twin,
    UnaryOp,
};
pub use layout::{
    Dims, Layout, LayoutError, MAX_RANK, StridedBlocks, Strides, check_rank, checked_numel,
};
pub use mapped::{DEFAULT_SHARED_MODE, MapMode, regular_file_len};
pub use storage::{
    AddGroups, AttentionOperand, BOUNDS_MAX_LEN, BinaryRhs, DeadMask, HostBytes, HostSlice,
    IndexSource, IndexValues, LayerNormGrads, PoolInfo, Reduced, Storage, StorageInfo,
    StorageRange, ViewInfo, reduce_dtype,
};
pub use transfer::{PendingCopy, batched_copy};
pub use view::View;
