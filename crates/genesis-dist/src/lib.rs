//! Genesis on many GPUs: [`ProcessGroup`] and the collectives on [`genesis::Tensor`]s
//! (`all_reduce`, `broadcast`, `reduce`, `all_gather`, `reduce_scatter_tensor`, `send`,
//! `recv`, [`group`]; see [`mod@comm`]), and what runs around them:
//!
//! - [`nccl`]: NCCL loaded at run time (building needs no NCCL): from an explicit path, a copy
//!   the process already loaded, the `nvidia-nccl` Python wheel, or the system; its version
//!   checked; a typed error naming every place looked in when none is found.
//! - [`store`]: a TCP key-value store for the processes of a group to meet (the unique id of a
//!   communicator, barriers), as `torchrun`'s: `set`, `get` (waiting), `add`, `wait`, each with
//!   a timeout that ends in a typed error, never a hang.
//! - [`mod@env`]: a process's place in its group from the environment (`RANK`, `WORLD_SIZE`,
//!   `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`), as `torchrun` sets it.
//! - [`mod@launch`]: starting one process per GPU with that environment (the `genesis-launch`
//!   binary), stopping the others when one fails.
//!
//! - [`mod@ddp`]: data-parallel training: [`DistributedDataParallel`] (gradients reduced in
//!   buckets of one flat buffer from hooks during backward) and [`ZeroAdamW`] (ZeRO-1), over
//!   any [`Collectives`]: a [`ProcessGroup`], or a [`HostGroup`] of threads.
//!
//! Without a GPU or NCCL everything here builds and its tests run (loading NCCL then reports
//! where it looked).

pub mod comm;
pub mod ddp;
pub mod env;
mod error;
mod host;
pub mod launch;
pub mod nccl;
pub mod store;

pub use comm::{
    Collectives, DEFAULT_TIMEOUT, GroupOptions, ProcessGroup, ReduceOp, Work, group,
    init_process_group, nccl_types, shared_nccl,
};
pub use ddp::{
    Bucket, BucketLayout, DEFAULT_BUCKET_CAP_BYTES, Ddp, DdpOptions, DistributedDataParallel,
    ZeroAdamW,
};
pub use env::GroupEnv;
pub use error::{Error, Result};
pub use host::HostGroup;
pub use launch::{Launch, launch};
pub use nccl::Nccl;
pub use store::{StoreClient, StoreServer};
