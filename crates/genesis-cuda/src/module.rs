//! Embedded kernel images and kernel launches.

use std::ffi::c_void;
use std::sync::Arc;

use crate::context::{Context, check};
use crate::error::{Error, Result};
use crate::stream::Stream;
use crate::sys;

/// A fatbin embedded in the binary, with the targets it was built for.
#[derive(Debug, Clone, Copy)]
pub struct KernelImage {
    /// The image's name: its `.cu` source without the extension.
    pub name: &'static str,
    /// The fatbin bytes.
    pub image: &'static [u8],
    /// Machine-code targets (`sm_90`) and PTX targets (`compute_80`) in the image.
    pub targets: &'static [&'static str],
}

/// Whether an image built for `targets` can run on a device of compute capability `cc`: it
/// holds machine code for exactly that architecture (`sm_90`, or the architecture-specific
/// `sm_90a`, which runs only on compute capability 9.0), or portable PTX for one at or below it
/// (which the driver compiles just in time; architecture-specific PTX such as `compute_90a`
/// never qualifies another architecture).
pub fn image_supports(targets: &[&str], cc: (u32, u32)) -> bool {
    let arch = format!("sm_{}{}", cc.0, cc.1);
    let cc = cc.0 * 10 + cc.1;
    targets
        .iter()
        .any(|t| *t == arch || t.strip_suffix('a') == Some(arch.as_str()))
        || targets.iter().any(|t| {
            t.strip_prefix("compute_")
                .and_then(|v| v.parse::<u32>().ok())
                .is_some_and(|v| v <= cc)
        })
}

/// Grid and block dimensions of a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in x, y, z.
    pub grid: (u32, u32, u32),
    /// Threads per block in x, y, z.
    pub block: (u32, u32, u32),
    /// Dynamic shared memory in bytes.
    pub shared_bytes: u32,
}

impl LaunchConfig {
    /// A one-dimensional launch of `blocks` blocks of `threads` threads.
    pub fn linear(blocks: u32, threads: u32) -> LaunchConfig {
        LaunchConfig {
            grid: (blocks, 1, 1),
            block: (threads, 1, 1),
            shared_bytes: 0,
        }
    }
}

/// A kernel function of a loaded image. Holds its context, so the module stays loaded.
pub struct Kernel {
    ctx: Arc<Context>,
    raw: sys::CUfunction,
    name: &'static str,
}

// SAFETY: a CUfunction handle is immutable and valid while its module is loaded, which the held
// context guarantees (modules are unloaded only in Context::drop).
unsafe impl Send for Kernel {}
// SAFETY: as above.
unsafe impl Sync for Kernel {}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.name)
            .field("device", &self.ctx.ordinal())
            .finish()
    }
}

impl Kernel {
    /// Looks up kernel `name` in `image` on `ctx`, loading the image on first use.
    pub fn get(ctx: &Arc<Context>, image: &KernelImage, name: &'static str) -> Result<Kernel> {
        let raw = ctx.function(image, name)?;
        Ok(Kernel {
            ctx: Arc::clone(ctx),
            raw,
            name,
        })
    }

    /// The kernel's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The context the kernel is loaded in.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    pub(crate) fn raw(&self) -> sys::CUfunction {
        self.raw
    }

    /// Allows launches of the kernel with up to `bytes` of dynamic shared memory
    /// (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`; a launch above 48 KiB fails without
    /// it). The setting belongs to the function in its context, so it holds for every later
    /// [`Kernel::get`] of the same kernel. The context remembers it: a call that asks for no
    /// more than the function already allows makes no driver call (launch paths call this
    /// before every launch). Fails when the device cannot give a block that much.
    pub fn set_max_dynamic_shared_bytes(&self, bytes: u32) -> Result<()> {
        let value = i32::try_from(bytes).map_err(|_| Error::InvalidArgument {
            op: "Kernel::set_max_dynamic_shared_bytes",
            reason: format!("{bytes} bytes of shared memory"),
        })?;
        if self.ctx.dynamic_shared(self.raw) >= bytes {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: the function belongs to the current context; the attribute takes an int.
        check("cuFuncSetAttribute", unsafe {
            sys::cuFuncSetAttribute(
                self.raw,
                sys::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                value,
            )
        })?;
        self.ctx.set_dynamic_shared(self.raw, bytes);
        Ok(())
    }

    /// Queues the kernel on `stream` as [`Self::launch`] does, allowing it to start while the
    /// kernel queued just before it on the stream is still running (programmatic dependent
    /// launch, compute capability 9.0 and newer; elsewhere, and with `GENESIS_NO_PDL` set, a
    /// plain launch). The kernel must execute `griddepcontrol.wait` before it touches anything
    /// the earlier kernel writes (or that later work of the earlier kernel reads); the earlier
    /// kernel may run `griddepcontrol.launch_dependents` to let this one be scheduled early.
    /// Work queued after this kernel waits for it as usual.
    ///
    /// The wait covers the kernel just before on the stream, and through it everything before
    /// that, as long as that kernel itself completed after its predecessors (a plain launch, or
    /// a dependent one that waits): Genesis queues its dependent kernels right behind the kernel
    /// they read, and its own dependent launches always wait. A stream shared with another
    /// thread queuing dependent launches that do not wait could break the chain.
    ///
    /// # Safety
    ///
    /// As [`Self::launch`], and the kernel must wait as above.
    pub unsafe fn launch_dependent(
        &self,
        stream: &Stream,
        config: LaunchConfig,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let off = *OFF.get_or_init(|| std::env::var_os("GENESIS_NO_PDL").is_some());
        if off || self.ctx.compute_capability().0 < 9 {
            // SAFETY: as the caller vouches.
            return unsafe { self.launch(stream, config, params) };
        }
        self.check_launch(stream, &config)?;
        self.ctx.bind()?;
        let mut attr = sys::CUlaunchAttribute {
            id: sys::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            value: [1, 0, 0, 0, 0, 0, 0, 0],
        };
        let cfg = sys::CUlaunchConfig {
            grid: [config.grid.0, config.grid.1, config.grid.2],
            block: [config.block.0, config.block.1, config.block.2],
            shared_bytes: config.shared_bytes,
            stream: stream.raw_unflushed(),
            attrs: &raw mut attr,
            num_attrs: 1,
        };
        // SAFETY: `cfg` and the attribute it points to live across the call; the function
        // belongs to the current context; the caller vouches for `params` and the memory.
        check("cuLaunchKernelEx", unsafe {
            sys::cuLaunchKernelEx(
                &raw const cfg,
                self.raw,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
    }

    /// The checks every launch makes: the stream's context, a non-empty grid and block.
    fn check_launch(&self, stream: &Stream, config: &LaunchConfig) -> Result<()> {
        if !Arc::ptr_eq(&self.ctx, stream.context()) {
            return Err(Error::InvalidArgument {
                op: "Kernel::launch",
                reason: format!(
                    "kernel `{}` is on device {} but the stream is on device {}",
                    self.name,
                    self.ctx.ordinal(),
                    stream.context().ordinal()
                ),
            });
        }
        let (gx, gy, gz) = config.grid;
        let (bx, by, bz) = config.block;
        if gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 {
            return Err(Error::InvalidArgument {
                op: "Kernel::launch",
                reason: format!("empty launch {config:?} of `{}`", self.name),
            });
        }
        Ok(())
    }

    /// Queues the kernel on `stream`.
    ///
    /// # Safety
    ///
    /// `params` must hold one pointer per kernel parameter, each pointing to a value of exactly
    /// the parameter's type, and every device address passed must be valid for the accesses the
    /// kernel makes until the launch has completed.
    pub unsafe fn launch(
        &self,
        stream: &Stream,
        config: LaunchConfig,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        self.check_launch(stream, &config)?;
        let (gx, gy, gz) = config.grid;
        let (bx, by, bz) = config.block;
        self.ctx.bind()?;
        // SAFETY: the function belongs to the current context; the caller guarantees `params`
        // matches the kernel's signature and that the memory it names stays valid.
        check("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                self.raw,
                gx,
                gy,
                gz,
                bx,
                by,
                bz,
                config.shared_bytes,
                stream.raw_unflushed(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::image_supports;

    #[test]
    fn arch_support() {
        let t = ["sm_80", "sm_86", "sm_89", "sm_90", "compute_80"];
        assert!(image_supports(&t, (9, 0)));
        assert!(image_supports(&t, (10, 0)), "JIT from compute_80");
        assert!(!image_supports(&t, (7, 5)), "nothing for sm_75");
        assert!(
            !image_supports(&["sm_80"], (9, 0)),
            "sm_80 SASS does not run on sm_90"
        );
        assert!(image_supports(&["sm_80"], (8, 0)));
        // Architecture-specific machine code runs on its own architecture only.
        assert!(image_supports(&["sm_90a"], (9, 0)));
        for cc in [(8, 0), (8, 9), (10, 0), (12, 0)] {
            assert!(!image_supports(&["sm_90a"], cc), "{cc:?}");
        }
        assert!(!image_supports(&["compute_90a"], (10, 0)));
    }
}
