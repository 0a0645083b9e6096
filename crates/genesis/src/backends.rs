//! Global switches of the compute backends, like PyTorch's `torch.backends`.
//!
//! The precision of f32 matrix products on CUDA ([`set_float32_matmul_precision`]), PyTorch's
//! `torch.set_float32_matmul_precision` and `torch.backends.cuda.matmul.allow_tf32`. It is
//! one setting for the process, read by every `matmul`, `bmm` and `matmul_out` when it queues
//! the product.
//!
//! Also the choice of f16/bf16 matrix-product kernels on Hopper ([`set_force_sm80_matmul`]).

use std::sync::atomic::{AtomicBool, Ordering};

use crate::{Error, Result};

pub use genesis_storage::MatmulPrecision;

/// Forces f16 and bf16 matrix products onto the portable `mma.sync` (`sm_80`) kernels even on
/// Hopper, where the `wgmma` kernels would run (see [`genesis_kernels::matmul`]); also set by
/// the environment variable `GENESIS_MATMUL_SM80=1`. For testing and comparing the two paths.
pub use genesis_kernels::matmul::{set_force_sm80_matmul, sm80_matmul_forced};

/// Whether f32 products may use TF32 (`false`: full f32, the default).
static ALLOW_TF32: AtomicBool = AtomicBool::new(false);

/// Sets the precision of f32 matrix products on CUDA, as PyTorch's
/// `torch.set_float32_matmul_precision`:
///
/// - `"highest"` (the default): full f32 inputs and accumulation.
/// - `"high"`: inputs truncated to TF32 (10 mantissa bits, as the tensor cores read f32
///   values), products on tensor cores accumulated in f32 — PyTorch's `allow_tf32 = True`.
///   Faster, with a relative error below `2^-10` per input instead of `2^-24`.
/// - `"medium"`: accepted as `"high"` (PyTorch may use bf16 there; Genesis uses TF32).
///
/// f16 and bf16 products, matrix-vector products (a dimension `m` or `n` of 1) and products
/// on the CPU are the same at every precision. Any other name is an
/// [`Error::InvalidArgument`] and changes nothing.
///
/// ```
/// genesis::backends::set_float32_matmul_precision("highest")?;
/// assert_eq!(genesis::backends::float32_matmul_precision(), "highest");
/// assert!(genesis::backends::set_float32_matmul_precision("fast").is_err());
/// # Ok::<(), genesis::Error>(())
/// ```
pub fn set_float32_matmul_precision(precision: &str) -> Result<()> {
    let p = match precision {
        "highest" => MatmulPrecision::Highest,
        "high" | "medium" => MatmulPrecision::High,
        _ => {
            return Err(Error::InvalidArgument {
                op: "set_float32_matmul_precision",
                reason: format!(
                    "unknown precision {precision:?} (expected \"highest\", \"high\" or \"medium\")"
                ),
            });
        }
    };
    set_matmul_precision(p);
    Ok(())
}

/// The precision of f32 matrix products as PyTorch's `torch.get_float32_matmul_precision`
/// names it: `"highest"` or `"high"`.
pub fn float32_matmul_precision() -> &'static str {
    match matmul_precision() {
        MatmulPrecision::Highest => "highest",
        MatmulPrecision::High => "high",
    }
}

/// Sets the precision of f32 matrix products on CUDA (the typed form of
/// [`set_float32_matmul_precision`]).
pub fn set_matmul_precision(precision: MatmulPrecision) {
    ALLOW_TF32.store(precision == MatmulPrecision::High, Ordering::Relaxed);
}

/// The precision of f32 matrix products on CUDA ([`MatmulPrecision::Highest`] unless set).
pub fn matmul_precision() -> MatmulPrecision {
    if ALLOW_TF32.load(Ordering::Relaxed) {
        MatmulPrecision::High
    } else {
        MatmulPrecision::Highest
    }
}

/// Allows TF32 for f32 matrix products on CUDA (`true`) or not (`false`, the default):
/// PyTorch's `torch.backends.cuda.matmul.allow_tf32 = ...`, the same switch as
/// [`set_float32_matmul_precision`] with `"high"` or `"highest"`.
pub fn set_allow_tf32(allow: bool) {
    ALLOW_TF32.store(allow, Ordering::Relaxed);
}

/// Whether f32 matrix products on CUDA may use TF32 (PyTorch's
/// `torch.backends.cuda.matmul.allow_tf32`).
pub fn allow_tf32() -> bool {
    ALLOW_TF32.load(Ordering::Relaxed)
}
