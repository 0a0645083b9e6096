// Programmatic dependent launch (compute 9.0+). A kernel that the host queues with
// `Kernel::launch_dependent` may be scheduled while the kernel before it on the stream still
// runs: it calls `pdl_wait` before it reads anything the earlier kernel writes (the wait
// returns once that kernel has completed and its writes are visible). The earlier kernel calls
// `pdl_trigger` to let its dependent be scheduled early. Both are no-ops on older devices and
// when the dependent was queued by a plain launch.
#pragma once

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
