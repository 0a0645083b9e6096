//! Genesis indexing: `IndexSpec` → `IndexPlan` planning (pure data) and plan execution.
//!
//! The planner and executors are built in the "genesis-index" issue; this crate currently only
//! fixes its place in the layering (it sits on `genesis-storage`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use genesis_storage::Layout;
