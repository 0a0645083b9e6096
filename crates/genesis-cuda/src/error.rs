//! The error type of the runtime wrapper and the static table of driver error codes.
//!
//! `Display` never calls the driver: every message comes from [`code_name`] and
//! [`code_message`], two `match`es over the codes of `cuda.h`.

/// Errors of the CUDA runtime wrapper.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A driver entry point returned a code other than `CUDA_SUCCESS`.
    #[error("CUDA driver call `{call}` failed with {} ({code}): {}", code_name(*code), code_message(*code))]
    Driver {
        /// The entry point, e.g. `cuMemAlloc`.
        call: &'static str,
        /// The raw `CUresult` value.
        code: i32,
    },
    /// No CUDA device was found (no driver, a stub driver, or no GPU).
    #[error("no CUDA device found")]
    NoDevice,
    /// A device ordinal outside `0..count`.
    #[error("CUDA device {ordinal} does not exist: {count} device(s) present")]
    InvalidDevice {
        /// The ordinal that was asked for.
        ordinal: usize,
        /// How many devices the driver reports.
        count: usize,
    },
    /// A kernel image holds no machine code for the device and no PTX it can JIT.
    #[error(
        "kernel image `{image}` has no code for {arch} (it holds {targets}); add {arch} to the \
         targets in xtask and run `cargo xtask build-kernels`"
    )]
    NoBinaryForArch {
        /// The image's name (its `.cu` source without the extension).
        image: &'static str,
        /// The device architecture, as `sm_XY`.
        arch: String,
        /// The targets the image was built for.
        targets: String,
    },
    /// The crate was built without the `cuda` feature.
    #[error("Genesis was built without CUDA support: rebuild with `--features cuda`")]
    NotCompiled,
    /// A launch configuration or argument the wrapper refuses before calling the driver.
    #[error("invalid argument to {op}: {reason}")]
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// Why it was refused.
        reason: String,
    },
    /// An error that happened in a `Drop` (which cannot return it) and was kept until the next
    /// fallible call on the same context.
    #[error("an earlier release on this CUDA context failed: {0}")]
    Deferred(Box<Error>),
}

impl Error {
    /// The raw driver code, when the error came from the driver.
    pub fn driver_code(&self) -> Option<i32> {
        match self {
            Error::Driver { code, .. } => Some(*code),
            Error::Deferred(inner) => inner.driver_code(),
            _ => None,
        }
    }

    /// Whether this is the driver's `CUDA_ERROR_OUT_OF_MEMORY`.
    pub fn is_out_of_memory(&self) -> bool {
        self.driver_code() == Some(2)
    }
}

/// Result type of the runtime wrapper.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The symbolic name of a `CUresult` code (`"CUDA_ERROR_OUT_OF_MEMORY"`), from a static table.
pub fn code_name(code: i32) -> &'static str {
    code_entry(code).0
}

/// A one-line description of a `CUresult` code, from a static table.
pub fn code_message(code: i32) -> &'static str {
    code_entry(code).1
}

fn code_entry(code: i32) -> (&'static str, &'static str) {
    match code {
        0 => ("CUDA_SUCCESS", "no error"),
        1 => (
            "CUDA_ERROR_INVALID_VALUE",
            "an argument is out of the range of accepted values",
        ),
        2 => (
            "CUDA_ERROR_OUT_OF_MEMORY",
            "the device cannot allocate enough memory",
        ),
        3 => (
            "CUDA_ERROR_NOT_INITIALIZED",
            "the driver has not been initialised with cuInit",
        ),
        4 => ("CUDA_ERROR_DEINITIALIZED", "the driver is shutting down"),
        5 => ("CUDA_ERROR_PROFILER_DISABLED", "the profiler is disabled"),
        34 => (
            "CUDA_ERROR_STUB_LIBRARY",
            "the loaded libcuda is a stub, not a real driver",
        ),
        46 => (
            "CUDA_ERROR_DEVICE_UNAVAILABLE",
            "the device is busy or unavailable",
        ),
        100 => ("CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"),
        101 => (
            "CUDA_ERROR_INVALID_DEVICE",
            "the device ordinal is not a valid CUDA device",
        ),
        102 => (
            "CUDA_ERROR_DEVICE_NOT_LICENSED",
            "the device is not licensed",
        ),
        200 => ("CUDA_ERROR_INVALID_IMAGE", "the kernel image is invalid"),
        201 => ("CUDA_ERROR_INVALID_CONTEXT", "no valid context is current"),
        202 => (
            "CUDA_ERROR_CONTEXT_ALREADY_CURRENT",
            "the context is already current",
        ),
        205 => (
            "CUDA_ERROR_MAP_FAILED",
            "a map or register operation failed",
        ),
        206 => (
            "CUDA_ERROR_UNMAP_FAILED",
            "an unmap or unregister operation failed",
        ),
        207 => ("CUDA_ERROR_ARRAY_IS_MAPPED", "the array is mapped"),
        208 => (
            "CUDA_ERROR_ALREADY_MAPPED",
            "the resource is already mapped",
        ),
        209 => (
            "CUDA_ERROR_NO_BINARY_FOR_GPU",
            "the image has no kernel code for this GPU",
        ),
        210 => (
            "CUDA_ERROR_ALREADY_ACQUIRED",
            "the resource has already been acquired",
        ),
        211 => ("CUDA_ERROR_NOT_MAPPED", "the resource is not mapped"),
        214 => (
            "CUDA_ERROR_ECC_UNCORRECTABLE",
            "an uncorrectable ECC error was detected",
        ),
        215 => (
            "CUDA_ERROR_UNSUPPORTED_LIMIT",
            "the limit is not supported by the device",
        ),
        216 => (
            "CUDA_ERROR_CONTEXT_ALREADY_IN_USE",
            "the context is already in use by another thread",
        ),
        217 => (
            "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
            "peer access is not supported between these devices",
        ),
        218 => ("CUDA_ERROR_INVALID_PTX", "PTX JIT compilation failed"),
        219 => (
            "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT",
            "invalid graphics context",
        ),
        220 => (
            "CUDA_ERROR_NVLINK_UNCORRECTABLE",
            "an uncorrectable NVLink error was detected",
        ),
        221 => (
            "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
            "the PTX JIT compiler library was not found",
        ),
        222 => (
            "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
            "the PTX was built by a newer toolkit than the driver supports",
        ),
        223 => (
            "CUDA_ERROR_JIT_COMPILATION_DISABLED",
            "PTX JIT compilation is disabled",
        ),
        224 => (
            "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY",
            "the execution affinity is not supported",
        ),
        300 => (
            "CUDA_ERROR_INVALID_SOURCE",
            "the device kernel source is invalid",
        ),
        301 => ("CUDA_ERROR_FILE_NOT_FOUND", "the file was not found"),
        302 => (
            "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND",
            "a shared object symbol was not found",
        ),
        303 => (
            "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED",
            "a shared object failed to initialise",
        ),
        304 => (
            "CUDA_ERROR_OPERATING_SYSTEM",
            "an operating system call failed",
        ),
        400 => ("CUDA_ERROR_INVALID_HANDLE", "a resource handle is invalid"),
        401 => (
            "CUDA_ERROR_ILLEGAL_STATE",
            "the resource is in an illegal state for this operation",
        ),
        500 => ("CUDA_ERROR_NOT_FOUND", "a named symbol was not found"),
        600 => (
            "CUDA_ERROR_NOT_READY",
            "asynchronous work has not completed yet",
        ),
        700 => (
            "CUDA_ERROR_ILLEGAL_ADDRESS",
            "a kernel accessed an illegal memory address",
        ),
        701 => (
            "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
            "the launch asked for more resources than available",
        ),
        702 => (
            "CUDA_ERROR_LAUNCH_TIMEOUT",
            "the kernel ran past the watchdog timeout",
        ),
        703 => (
            "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING",
            "incompatible texturing mode",
        ),
        704 => (
            "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
            "peer access is already enabled",
        ),
        705 => (
            "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
            "peer access has not been enabled",
        ),
        708 => (
            "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
            "the primary context is already active",
        ),
        709 => (
            "CUDA_ERROR_CONTEXT_IS_DESTROYED",
            "the context has been destroyed",
        ),
        710 => ("CUDA_ERROR_ASSERT", "a device-side assertion failed"),
        711 => ("CUDA_ERROR_TOO_MANY_PEERS", "too many peer mappings"),
        712 => (
            "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
            "the host memory is already registered",
        ),
        713 => (
            "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
            "the host memory is not registered",
        ),
        714 => (
            "CUDA_ERROR_HARDWARE_STACK_ERROR",
            "a device stack error occurred",
        ),
        715 => (
            "CUDA_ERROR_ILLEGAL_INSTRUCTION",
            "a kernel executed an illegal instruction",
        ),
        716 => (
            "CUDA_ERROR_MISALIGNED_ADDRESS",
            "a kernel accessed a misaligned address",
        ),
        717 => (
            "CUDA_ERROR_INVALID_ADDRESS_SPACE",
            "an instruction used an invalid address space",
        ),
        718 => (
            "CUDA_ERROR_INVALID_PC",
            "the program counter became invalid",
        ),
        719 => (
            "CUDA_ERROR_LAUNCH_FAILED",
            "the kernel failed during execution",
        ),
        720 => (
            "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
            "the cooperative launch is too large",
        ),
        800 => ("CUDA_ERROR_NOT_PERMITTED", "the operation is not permitted"),
        801 => (
            "CUDA_ERROR_NOT_SUPPORTED",
            "the operation is not supported on this system or device",
        ),
        802 => ("CUDA_ERROR_SYSTEM_NOT_READY", "the system is not ready"),
        803 => (
            "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
            "the driver and kernel module versions do not match",
        ),
        804 => (
            "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
            "forward compatibility is not supported on this device",
        ),
        900 => (
            "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
            "the operation is not permitted while the stream is capturing",
        ),
        901 => (
            "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
            "the stream capture was invalidated",
        ),
        999 => ("CUDA_ERROR_UNKNOWN", "an unknown internal error occurred"),
        _ => (
            "CUDA_ERROR_UNRECOGNISED",
            "a code this table does not know (a newer driver?)",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_uses_the_static_table() {
        let e = Error::Driver {
            call: "cuMemAlloc",
            code: 2,
        };
        let s = e.to_string();
        assert!(s.contains("cuMemAlloc"), "{s}");
        assert!(s.contains("CUDA_ERROR_OUT_OF_MEMORY"), "{s}");
        assert!(e.is_out_of_memory());
    }

    #[test]
    fn unknown_codes_do_not_panic() {
        for code in [-1, 6, 12345, i32::MAX, i32::MIN] {
            let e = Error::Driver {
                call: "cuInit",
                code,
            };
            assert!(e.to_string().contains("UNRECOGNISED"));
        }
    }

    #[test]
    fn no_binary_message_names_arch_and_rebuild() {
        let e = Error::NoBinaryForArch {
            image: "elementwise",
            arch: "sm_75".into(),
            targets: "sm_80, sm_90".into(),
        };
        let s = e.to_string();
        assert!(
            s.contains("sm_75") && s.contains("cargo xtask build-kernels"),
            "{s}"
        );
    }

    #[test]
    fn deferred_keeps_the_code() {
        let e = Error::Deferred(Box::new(Error::Driver {
            call: "cuMemFree",
            code: 700,
        }));
        assert_eq!(e.driver_code(), Some(700));
        assert!(e.to_string().contains("CUDA_ERROR_ILLEGAL_ADDRESS"));
    }
}
