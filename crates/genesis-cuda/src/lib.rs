//! The CUDA runtime wrapper of Genesis, written once and used by every other crate.
//!
//! - [`Context`]: the primary context of a device, retained once and shared through an `Arc`
//!   that every [`DeviceBuffer`], [`Stream`], [`Event`] and [`Kernel`] owns, so drop order is
//!   correct by construction.
//! - [`Error`]: driver errors with a static message table; `Display` never calls the driver.
//! - `Drop` never panics: a failing release is recorded on its context and returned by the
//!   next fallible call on that context ([`Error::Deferred`]).
//!
//! Everything that talks to the driver is behind the `cuda` feature. Without it the crate still
//! compiles: [`is_available`] is `false` and [`device_count`] is 0.
#![warn(missing_docs)]

mod error;
mod span;

pub use error::{Error, Result, code_message, code_name};
pub use span::{DeviceSpan, DeviceSpanMut};

#[cfg(feature = "cuda")]
pub mod batch;
#[cfg(feature = "cuda")]
mod context;
#[cfg(feature = "cuda")]
mod memory;
#[cfg(feature = "cuda")]
mod module;
#[cfg(feature = "cuda")]
pub mod raw;
#[cfg(feature = "cuda")]
mod stream;
#[cfg(feature = "cuda")]
mod sys;
#[cfg(feature = "cuda")]
mod tensor_map;

#[cfg(feature = "cuda")]
pub use context::{Context, device_count, device_uuid, driver_version, is_available};
#[cfg(feature = "cuda")]
pub use memory::DeviceBuffer;
#[cfg(feature = "cuda")]
pub use module::{Kernel, KernelImage, LaunchConfig, image_supports};
#[cfg(feature = "cuda")]
pub use stream::{Event, Stream};
#[cfg(feature = "cuda")]
pub use tensor_map::{TensorMap, TensorMapDataType, TensorMapSwizzle, TiledTensor};

/// Number of CUDA devices: always 0 in a build without the `cuda` feature.
#[cfg(not(feature = "cuda"))]
pub fn device_count() -> Result<usize> {
    Ok(0)
}

/// Whether a CUDA device can be used: always `false` without the `cuda` feature.
#[cfg(not(feature = "cuda"))]
pub fn is_available() -> bool {
    false
}

/// Says on stderr that a GPU test is skipped, and returns `true`, when no device is present.
///
/// GPU tests start with `if genesis_cuda::skip_without_gpu("name") { return; }`. The line goes
/// straight to the process's stderr (not through `eprintln!`, which the test harness captures),
/// so a run without a GPU shows which tests skipped. Test support, not part of the library's
/// API: it exists only with the `test-support` feature, which the workspace's crates enable for
/// their tests (a `dev-dependencies` entry).
#[cfg(feature = "test-support")]
pub fn skip_without_gpu(test: &str) -> bool {
    use std::io::Write;
    let reason = match device_count() {
        Ok(n) if n > 0 => return false,
        Ok(_) => String::new(),
        Err(e) => format!(" ({e})"),
    };
    let _ = writeln!(
        std::io::stderr().lock(),
        "{test}: skipped: no CUDA device found{reason}"
    );
    true
}
