//! Launchers for the CUDA kernels, on raw device addresses.
//!
//! Every launcher is `unsafe`: the caller vouches that the addresses are live device memory of
//! the stream's device, large enough for `n` elements, and kept alive until the work completes.

use std::ffi::c_void;

use genesis_cuda::{Kernel, LaunchConfig, Stream};

use crate::{Element, Result, images};

/// Threads per block of the elementwise kernels (`GX_THREADS` in `elementwise.cu`).
pub const ELEMENTWISE_THREADS: u32 = 256;
/// 16-byte vectors per thread per tile (`GX_UNROLL` in `elementwise.cu`).
pub const ELEMENTWISE_UNROLL: u64 = 4;

fn elementwise_config(stream: &Stream, n: usize, elem_bytes: usize, vec_ok: bool) -> LaunchConfig {
    let threads = u64::from(ELEMENTWISE_THREADS);
    let blocks = if vec_ok {
        let nvec = (n / (16 / elem_bytes)) as u64;
        nvec.div_ceil(threads * ELEMENTWISE_UNROLL)
    } else {
        // Grid-stride loop: enough blocks to fill the device a few times over.
        let cap = u64::from(stream.context().multiprocessors().max(1)) * 32;
        (n as u64).div_ceil(threads).min(cap)
    };
    LaunchConfig::linear(blocks.clamp(1, (1 << 31) - 1) as u32, ELEMENTWISE_THREADS)
}

fn aligned16(ptrs: &[u64]) -> bool {
    ptrs.iter().all(|p| p % 16 == 0)
}

/// Queues `out[i] = a[i] + b[i]` for `i < n` on `stream`. `out` may be `a` or `b` (in place).
///
/// # Safety
///
/// `a`, `b` and `out` must be device addresses on the stream's device, each valid for `n`
/// elements of `T` (and suitably aligned for `T`) until the launch completes.
pub unsafe fn add<T: Element>(stream: &Stream, a: u64, b: u64, out: u64, n: usize) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let kernel = Kernel::get(stream.context(), &images::ELEMENTWISE, T::ADD_KERNEL)?;
    let vec_ok = aligned16(&[a, b, out]);
    let config = elementwise_config(stream, n, size_of::<T>(), vec_ok);
    let (mut a, mut b, mut out, mut n64, mut v) = (a, b, out, n as u64, i32::from(vec_ok));
    let mut params: [*mut c_void; 5] = [
        (&raw mut a).cast(),
        (&raw mut b).cast(),
        (&raw mut out).cast(),
        (&raw mut n64).cast(),
        (&raw mut v).cast(),
    ];
    // SAFETY: the parameters match `add_<T>(const T*, const T*, T*, uint64_t, int)`; the caller
    // guarantees the addresses.
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

/// Queues `out[i] = value` for `i < n` on `stream`.
///
/// # Safety
///
/// `out` must be a device address on the stream's device valid for `n` elements of `T` until
/// the launch completes.
pub unsafe fn fill<T: Element>(stream: &Stream, out: u64, value: T, n: usize) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let kernel = Kernel::get(stream.context(), &images::ELEMENTWISE, T::FILL_KERNEL)?;
    let vec_ok = aligned16(&[out]);
    let config = elementwise_config(stream, n, size_of::<T>(), vec_ok);
    let (mut out, mut value, mut n64, mut v) = (out, value, n as u64, i32::from(vec_ok));
    let mut params: [*mut c_void; 4] = [
        (&raw mut out).cast(),
        (&raw mut value).cast(),
        (&raw mut n64).cast(),
        (&raw mut v).cast(),
    ];
    // SAFETY: the parameters match `fill_<T>(T*, T, uint64_t, int)` (`T` has the same size and
    // layout as the kernel's element type); the caller guarantees the address.
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}
