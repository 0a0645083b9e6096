//! The driver entry points this crate calls, declared with an integer result.
//!
//! `cust_raw` types every entry point as returning `CUresult`, a Rust `enum` of the CUDA 11.4
//! codes. A newer driver can return a code outside that enum, and a Rust enum holding an unlisted
//! value is undefined behaviour. So the entry points we call are declared here returning
//! `c_int`; `cust_raw` still provides the handle types and the link to `libcuda` (its build
//! script finds the library, or the stub that `cargo xtask` generates).
#![allow(non_snake_case, dead_code)]

use std::ffi::{c_char, c_int, c_uint, c_void};

pub(crate) use cust_raw::{
    CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUmodule, CUstream,
};

pub(crate) const CUDA_SUCCESS: c_int = 0;
pub(crate) const CUDA_ERROR_NOT_READY: c_int = 600;
pub(crate) const CUDA_ERROR_NO_DEVICE: c_int = 100;
pub(crate) const CUDA_ERROR_STUB_LIBRARY: c_int = 34;
pub(crate) const CUDA_ERROR_NO_BINARY_FOR_GPU: c_int = 209;
pub(crate) const CUDA_ERROR_INVALID_PTX: c_int = 218;
pub(crate) const CUDA_ERROR_UNSUPPORTED_PTX_VERSION: c_int = 222;

pub(crate) const ATTR_MULTIPROCESSOR_COUNT: c_int = 16;
pub(crate) const ATTR_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
pub(crate) const ATTR_COMPUTE_CAPABILITY_MINOR: c_int = 76;
pub(crate) const ATTR_MAX_THREADS_PER_MULTIPROCESSOR: c_int = 39;
/// `CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED`.
pub(crate) const ATTR_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: c_int = 103;

/// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`.
pub(crate) const CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: c_int = 8;

/// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION` (CUDA 12.0+, compute 9.0+).
pub(crate) const CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: c_int = 6;

/// `CUlaunchAttribute` (cuda.h): an id padded to 8 bytes and a 64-byte value union, of which
/// only the leading `int` is used here.
#[repr(C)]
pub(crate) struct CUlaunchAttribute {
    pub(crate) id: c_int,
    pub(crate) pad: [u8; 4],
    pub(crate) value: [u64; 8],
}

/// `CUlaunchConfig` (cuda.h).
#[repr(C)]
pub(crate) struct CUlaunchConfig {
    pub(crate) grid: [c_uint; 3],
    pub(crate) block: [c_uint; 3],
    pub(crate) shared_bytes: c_uint,
    pub(crate) stream: CUstream,
    pub(crate) attrs: *mut CUlaunchAttribute,
    pub(crate) num_attrs: c_uint,
}

pub(crate) const CU_STREAM_NON_BLOCKING: c_uint = 1;
pub(crate) const CU_STREAM_DEFAULT: c_uint = 0;
pub(crate) const CU_EVENT_DEFAULT: c_uint = 0;
pub(crate) const CU_EVENT_DISABLE_TIMING: c_uint = 2;
pub(crate) const CU_EVENT_INTERPROCESS: c_uint = 4;
pub(crate) const CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: c_uint = 1;

pub(crate) const CU_MEM_ALLOCATION_TYPE_PINNED: u32 = 1;
pub(crate) const CU_MEM_HANDLE_TYPE_NONE: u32 = 0;
pub(crate) const CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: u32 = 1;
pub(crate) const CU_MEM_LOCATION_TYPE_DEVICE: u32 = 1;
pub(crate) const CU_MEM_ACCESS_FLAGS_PROT_READWRITE: u32 = 3;
pub(crate) const CU_MEM_ALLOC_GRANULARITY_MINIMUM: u32 = 0;
pub(crate) const CU_MEMHOSTALLOC_PORTABLE: c_uint = 1;

pub(crate) const CU_MEMORYTYPE_HOST: u32 = 1;
pub(crate) const CU_MEMORYTYPE_DEVICE: u32 = 2;

/// `CUDA_MEMCPY2D` (v2).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Memcpy2D {
    pub(crate) src_x_in_bytes: usize,
    pub(crate) src_y: usize,
    pub(crate) src_memory_type: u32,
    pub(crate) src_host: *const c_void,
    pub(crate) src_device: CUdeviceptr,
    pub(crate) src_array: *mut c_void,
    pub(crate) src_pitch: usize,
    pub(crate) dst_x_in_bytes: usize,
    pub(crate) dst_y: usize,
    pub(crate) dst_memory_type: u32,
    pub(crate) dst_host: *mut c_void,
    pub(crate) dst_device: CUdeviceptr,
    pub(crate) dst_array: *mut c_void,
    pub(crate) dst_pitch: usize,
    pub(crate) width_in_bytes: usize,
    pub(crate) height: usize,
}

/// `CUipcMemHandle` and `CUipcEventHandle`: 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct IpcHandle {
    pub(crate) reserved: [u8; 64],
}

/// `CUuuid`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Uuid {
    pub(crate) bytes: [u8; 16],
}

/// `CUmemLocation`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct MemLocation {
    pub(crate) type_: u32,
    pub(crate) id: c_int,
}

/// `CUmemAllocationProp` (32 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct MemAllocationProp {
    pub(crate) type_: u32,
    pub(crate) requested_handle_types: u32,
    pub(crate) location: MemLocation,
    pub(crate) win32_handle_meta_data: *mut c_void,
    pub(crate) alloc_flags: [u8; 8],
}

/// `CUmemAccessDesc` (12 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct MemAccessDesc {
    pub(crate) location: MemLocation,
    pub(crate) flags: u32,
}

#[link(name = "cuda")]
unsafe extern "C" {
    pub(crate) fn cuInit(flags: c_uint) -> c_int;
    pub(crate) fn cuDriverGetVersion(version: *mut c_int) -> c_int;
    pub(crate) fn cuDeviceGetCount(count: *mut c_int) -> c_int;
    pub(crate) fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> c_int;
    pub(crate) fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> c_int;
    pub(crate) fn cuDeviceGetAttribute(pi: *mut c_int, attrib: c_int, dev: CUdevice) -> c_int;
    #[link_name = "cuDeviceTotalMem_v2"]
    pub(crate) fn cuDeviceTotalMem(bytes: *mut usize, dev: CUdevice) -> c_int;
    pub(crate) fn cuDevicePrimaryCtxRetain(ctx: *mut CUcontext, dev: CUdevice) -> c_int;
    #[link_name = "cuDevicePrimaryCtxRelease_v2"]
    pub(crate) fn cuDevicePrimaryCtxRelease(dev: CUdevice) -> c_int;
    pub(crate) fn cuCtxSetCurrent(ctx: CUcontext) -> c_int;
    pub(crate) fn cuCtxGetCurrent(ctx: *mut CUcontext) -> c_int;
    pub(crate) fn cuCtxSynchronize() -> c_int;
    #[link_name = "cuMemGetInfo_v2"]
    pub(crate) fn cuMemGetInfo(free: *mut usize, total: *mut usize) -> c_int;
    #[link_name = "cuMemAlloc_v2"]
    pub(crate) fn cuMemAlloc(dptr: *mut CUdeviceptr, bytes: usize) -> c_int;
    #[link_name = "cuMemFree_v2"]
    pub(crate) fn cuMemFree(dptr: CUdeviceptr) -> c_int;
    #[link_name = "cuMemcpyHtoD_v2"]
    pub(crate) fn cuMemcpyHtoD(dst: CUdeviceptr, src: *const c_void, bytes: usize) -> c_int;
    #[link_name = "cuMemcpyDtoH_v2"]
    pub(crate) fn cuMemcpyDtoH(dst: *mut c_void, src: CUdeviceptr, bytes: usize) -> c_int;
    #[link_name = "cuMemcpyDtoD_v2"]
    pub(crate) fn cuMemcpyDtoD(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize) -> c_int;
    #[link_name = "cuMemcpyHtoDAsync_v2"]
    pub(crate) fn cuMemcpyHtoDAsync(
        dst: CUdeviceptr,
        src: *const c_void,
        bytes: usize,
        stream: CUstream,
    ) -> c_int;
    #[link_name = "cuMemcpyDtoHAsync_v2"]
    pub(crate) fn cuMemcpyDtoHAsync(
        dst: *mut c_void,
        src: CUdeviceptr,
        bytes: usize,
        stream: CUstream,
    ) -> c_int;
    #[link_name = "cuMemcpyDtoDAsync_v2"]
    pub(crate) fn cuMemcpyDtoDAsync(
        dst: CUdeviceptr,
        src: CUdeviceptr,
        bytes: usize,
        stream: CUstream,
    ) -> c_int;
    pub(crate) fn cuMemsetD8Async(dst: CUdeviceptr, value: u8, n: usize, stream: CUstream)
    -> c_int;
    pub(crate) fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) -> c_int;
    pub(crate) fn cuModuleUnload(module: CUmodule) -> c_int;
    pub(crate) fn cuModuleGetFunction(
        func: *mut CUfunction,
        module: CUmodule,
        name: *const c_char,
    ) -> c_int;
    pub(crate) fn cuLaunchKernel(
        f: CUfunction,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        shared_bytes: c_uint,
        stream: CUstream,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> c_int;
    pub(crate) fn cuLaunchKernelEx(
        config: *const CUlaunchConfig,
        f: CUfunction,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> c_int;
    pub(crate) fn cuStreamCreate(stream: *mut CUstream, flags: c_uint) -> c_int;
    #[link_name = "cuStreamDestroy_v2"]
    pub(crate) fn cuStreamDestroy(stream: CUstream) -> c_int;
    pub(crate) fn cuStreamSynchronize(stream: CUstream) -> c_int;
    pub(crate) fn cuStreamQuery(stream: CUstream) -> c_int;
    pub(crate) fn cuStreamWaitEvent(stream: CUstream, event: CUevent, flags: c_uint) -> c_int;
    pub(crate) fn cuEventCreate(event: *mut CUevent, flags: c_uint) -> c_int;
    #[link_name = "cuEventDestroy_v2"]
    pub(crate) fn cuEventDestroy(event: CUevent) -> c_int;
    pub(crate) fn cuEventRecord(event: CUevent, stream: CUstream) -> c_int;
    pub(crate) fn cuEventSynchronize(event: CUevent) -> c_int;
    pub(crate) fn cuEventQuery(event: CUevent) -> c_int;
    pub(crate) fn cuEventElapsedTime(ms: *mut f32, start: CUevent, end: CUevent) -> c_int;
    pub(crate) fn cuMemGetAllocationGranularity(
        granularity: *mut usize,
        prop: *const MemAllocationProp,
        option: u32,
    ) -> c_int;
    pub(crate) fn cuMemAddressReserve(
        ptr: *mut CUdeviceptr,
        size: usize,
        alignment: usize,
        addr: CUdeviceptr,
        flags: u64,
    ) -> c_int;
    pub(crate) fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) -> c_int;
    pub(crate) fn cuMemCreate(
        handle: *mut u64,
        size: usize,
        prop: *const MemAllocationProp,
        flags: u64,
    ) -> c_int;
    pub(crate) fn cuMemRelease(handle: u64) -> c_int;
    pub(crate) fn cuMemMap(
        ptr: CUdeviceptr,
        size: usize,
        offset: usize,
        handle: u64,
        flags: u64,
    ) -> c_int;
    pub(crate) fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> c_int;
    pub(crate) fn cuMemSetAccess(
        ptr: CUdeviceptr,
        size: usize,
        desc: *const MemAccessDesc,
        count: usize,
    ) -> c_int;
    pub(crate) fn cuMemcpyPeerAsync(
        dst: CUdeviceptr,
        dst_ctx: CUcontext,
        src: CUdeviceptr,
        src_ctx: CUcontext,
        bytes: usize,
        stream: CUstream,
    ) -> c_int;
    pub(crate) fn cuDeviceCanAccessPeer(can: *mut c_int, dev: CUdevice, peer: CUdevice) -> c_int;
    pub(crate) fn cuCtxEnablePeerAccess(peer: CUcontext, flags: c_uint) -> c_int;
    #[link_name = "cuMemcpy2DAsync_v2"]
    pub(crate) fn cuMemcpy2DAsync(copy: *const Memcpy2D, stream: CUstream) -> c_int;
    pub(crate) fn cuMemHostAlloc(pp: *mut *mut c_void, bytes: usize, flags: c_uint) -> c_int;
    pub(crate) fn cuMemFreeHost(p: *mut c_void) -> c_int;
    #[link_name = "cuDeviceGetUuid_v2"]
    pub(crate) fn cuDeviceGetUuid(uuid: *mut Uuid, dev: CUdevice) -> c_int;
    pub(crate) fn cuMemExportToShareableHandle(
        shareable: *mut c_void,
        handle: u64,
        handle_type: u32,
        flags: u64,
    ) -> c_int;
    pub(crate) fn cuMemImportFromShareableHandle(
        handle: *mut u64,
        shareable: *mut c_void,
        handle_type: u32,
    ) -> c_int;
    #[link_name = "cuMemGetAddressRange_v2"]
    pub(crate) fn cuMemGetAddressRange(
        base: *mut CUdeviceptr,
        size: *mut usize,
        ptr: CUdeviceptr,
    ) -> c_int;
    pub(crate) fn cuIpcGetMemHandle(handle: *mut IpcHandle, ptr: CUdeviceptr) -> c_int;
    #[link_name = "cuIpcOpenMemHandle_v2"]
    pub(crate) fn cuIpcOpenMemHandle(
        ptr: *mut CUdeviceptr,
        handle: IpcHandle,
        flags: c_uint,
    ) -> c_int;
    pub(crate) fn cuIpcCloseMemHandle(ptr: CUdeviceptr) -> c_int;
    pub(crate) fn cuIpcGetEventHandle(handle: *mut IpcHandle, event: CUevent) -> c_int;
    pub(crate) fn cuIpcOpenEventHandle(event: *mut CUevent, handle: IpcHandle) -> c_int;
    pub(crate) fn cuFuncSetAttribute(f: CUfunction, attrib: c_int, value: c_int) -> c_int;
    pub(crate) fn cuTensorMapEncodeTiled(
        map: *mut [u64; 16],
        data_type: c_int,
        rank: c_uint,
        address: *mut c_void,
        dims: *const u64,
        strides: *const u64,
        box_dims: *const c_uint,
        element_strides: *const c_uint,
        interleave: c_int,
        swizzle: c_int,
        l2_promotion: c_int,
        oob_fill: c_int,
    ) -> c_int;
}
