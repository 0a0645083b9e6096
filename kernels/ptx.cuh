// Single PTX instructions that plain C++ does not compile to as wanted, for the kernels that
// need them (`#include "ptx.cuh"`; build-kernels passes -I kernels). The CPU emulations of
// crates/genesis-kernels/tests/emu compile this header too: they take the `#else` branches.
#pragma once

#include <stdint.h>

// 2^a by the multifunction unit alone (`ex2.approx.ftz`): exp2f's value wherever 2^a is a
// normal float (exp2f is this instruction plus the scaling that keeps subnormal results, three
// more instructions an element), and 0 below 2^-126, where exp2f gives a subnormal. The
// callers' exponents are at most a few units above a running maximum, so what is flushed is
// below 2^-126 of the largest term it is summed with.
__device__ __forceinline__ float ex2(float a) {
#ifdef __CUDA_ARCH__
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
    return r;
#else
    const float r = exp2f(a);
    return r < 1.17549435e-38f ? 0.f : r;
#endif
}

// One 16-byte store of four words to global memory at p + BYTES (16-byte aligned; BYTES an
// immediate offset). From a plain `uint4` store the compiler sometimes emits four 4-byte
// stores, which write a line's sectors in pieces (Nsight Compute showed a third of the matmul
// epilogue's C sectors in excess, and the f32 activation gradients' stores split in PTX).
template <int BYTES = 0>
__device__ __forceinline__ void st_global_v4(const void* p, uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
    asm volatile("st.global.v4.b32 [%0 + %5], {%1, %2, %3, %4};\n" ::"l"(p), "r"(w0), "r"(w1), "r"(w2), "r"(w3),
                 "n"(BYTES));
}
