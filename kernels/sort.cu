// Sorting along the last axis of a contiguous [rows, r] array: values and int64 indices, for
// f64, f32, f16, bf16, i32, i64; ascending or descending; stable (equal values keep their order).
//
// Built by `cargo xtask build-kernels` into crates/genesis-kernels/images/sort.fatbin. The CPU
// twin is `sort` in crates/genesis-kernels/src/sort.rs; the two agree exactly.
//
// Keys: each value becomes an unsigned 64-bit key whose order is the sort order: floats by
// their bits (sign flipped for positives, all bits for negatives; every NaN first made the
// canonical positive NaN, so NaN sorts after +inf, as PyTorch, and -0.0 made +0.0, an equal
// value), integers with the sign bit flipped; descending inverts the key. The values written
// are the input's, read back at the sorted positions (bits kept). A key and the element's position in its row sort as a
// pair (key, position), so the order is total and equal values keep their order: the result
// is the stable sort's, whatever the network.
//
// Rows of at most SO_SMEM elements (`sort_rows_*`): one block a row, a bitonic network over
// the row padded to a power of two (padding keys sort last) in shared memory. Fast: the row
// is read once and written once.
//
// Longer rows: `sort_prep_*` writes the keys and positions of every row, padded to a power of
// two `npad`, into a workspace; `sort_step` runs one compare-exchange stage (j, k) of the
// bitonic network over every row (log2(npad) * (log2(npad) + 1) / 2 launches, each touching
// the whole workspace); `sort_finish_*` writes the values and indices back. Correct for any
// length, and far slower than a radix sort for long rows.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define SO_SMEM 2048
#define SO_THREADS 512

typedef unsigned long long u64;

template <typename T> struct Key;
template <> struct Key<double> {
    static __device__ __forceinline__ u64 to(double x) {
        u64 b = (u64)__double_as_longlong(x);
        if (x != x) b = 0x7ff8000000000000ull;
        if (b == 0x8000000000000000ull) b = 0;
        return (b & 0x8000000000000000ull) ? ~b : (b | 0x8000000000000000ull);
    }
};
template <> struct Key<float> {
    static __device__ __forceinline__ u64 to(float x) {
        uint32_t b = __float_as_uint(x);
        if (x != x) b = 0x7fc00000u;
        if (b == 0x80000000u) b = 0;
        b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
        return b;
    }
};
template <> struct Key<__half> {
    static __device__ __forceinline__ u64 to(__half x) {
        uint16_t b = __half_as_ushort(x);
        if ((b & 0x7c00u) == 0x7c00u && (b & 0x03ffu)) b = 0x7e00u;
        if (b == 0x8000u) b = 0;
        b = (b & 0x8000u) ? (uint16_t)~b : (uint16_t)(b | 0x8000u);
        return b;
    }
};
template <> struct Key<__nv_bfloat16> {
    static __device__ __forceinline__ u64 to(__nv_bfloat16 x) {
        uint16_t b = __bfloat16_as_ushort(x);
        if ((b & 0x7f80u) == 0x7f80u && (b & 0x007fu)) b = 0x7fc0u;
        if (b == 0x8000u) b = 0;
        b = (b & 0x8000u) ? (uint16_t)~b : (uint16_t)(b | 0x8000u);
        return b;
    }
};
template <> struct Key<int32_t> {
    static __device__ __forceinline__ u64 to(int32_t x) { return (uint32_t)x ^ 0x80000000u; }
};
template <> struct Key<int64_t> {
    static __device__ __forceinline__ u64 to(int64_t x) { return (u64)x ^ 0x8000000000000000ull; }
};

// The mask that inverts a key for a descending sort: the key's width only, so that a padding
// key (all ones, position all ones) still sorts last.
template <typename T> __device__ __forceinline__ u64 width_mask() {
    return sizeof(T) == 8 ? ~0ull : ((1ull << (8 * sizeof(T))) - 1);
}

// (ka, ia) after (kb, ib)?
__device__ __forceinline__ bool after(u64 ka, uint32_t ia, u64 kb, uint32_t ib) {
    return ka > kb || (ka == kb && ia > ib);
}

template <typename T>
__device__ __forceinline__ void rows_impl(const T *in, T *out, int64_t *out_idx, uint64_t r, uint32_t npad, int desc) {
    extern __shared__ u64 smem[];
    u64 *key = smem;
    uint32_t *pos = reinterpret_cast<uint32_t *>(smem + npad);
    const uint64_t row = blockIdx.x;
    const T *p = in + row * r;
    const u64 inv = desc ? width_mask<T>() : 0;
    for (uint32_t i = threadIdx.x; i < npad; i += blockDim.x) {
        if (i < r) {
            key[i] = Key<T>::to(p[i]) ^ inv;
            pos[i] = i;
        } else {
            key[i] = ~0ull;
            pos[i] = 0xffffffffu;
        }
    }
    __syncthreads();
    // Each stage: npad / 2 pairs (i, i + j), i with bit j clear; thread t takes pair t.
    for (uint32_t k = 2; k <= npad; k <<= 1) {
        for (uint32_t j = k >> 1; j > 0; j >>= 1) {
            for (uint32_t t = threadIdx.x; t < npad / 2; t += blockDim.x) {
                const uint32_t i = ((t & ~(j - 1)) << 1) | (t & (j - 1));
                const uint32_t l = i + j;
                const bool up = (i & k) == 0;
                const u64 ki = key[i], kl = key[l];
                const uint32_t pi = pos[i], pl = pos[l];
                if (after(ki, pi, kl, pl) == up) {
                    key[i] = kl;
                    key[l] = ki;
                    pos[i] = pl;
                    pos[l] = pi;
                }
            }
            __syncthreads();
        }
    }
    T *q = out + row * r;
    int64_t *qi = out_idx + row * r;
    for (uint32_t i = threadIdx.x; i < r; i += blockDim.x) {
        q[i] = p[pos[i]];
        qi[i] = pos[i];
    }
}

template <typename T>
__device__ __forceinline__ void prep_impl(const T *in, u64 *key, uint32_t *pos, uint64_t rows, uint64_t r, uint64_t npad,
                                          int desc) {
    const u64 inv = desc ? width_mask<T>() : 0;
    const uint64_t n = rows * npad, stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += stride) {
        const uint64_t row = t / npad, i = t % npad;
        if (i < r) {
            key[t] = Key<T>::to(in[row * r + i]) ^ inv;
            pos[t] = (uint32_t)i;
        } else {
            key[t] = ~0ull;
            pos[t] = 0xffffffffu;
        }
    }
}

template <typename T>
__device__ __forceinline__ void finish_impl(const T *in, const uint32_t *pos, T *out, int64_t *out_idx, uint64_t rows,
                                            uint64_t r, uint64_t npad) {
    const uint64_t n = rows * r, stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += stride) {
        const uint64_t row = t / r, i = t % r;
        const uint32_t at = pos[row * npad + i];
        out[t] = in[row * r + at];
        out_idx[t] = at;
    }
}

// One stage (j, k) of the bitonic network over every row of `npad` keys.
extern "C" __global__ void sort_step(u64 *key, uint32_t *pos, uint64_t rows, uint64_t npad, uint64_t j, uint64_t k) {
    const uint64_t n = rows * npad, stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += stride) {
        const uint64_t i = t % npad, l = i ^ j;
        if (l > i) {
            const uint64_t a = t, b = t - i + l;
            const bool up = (i & k) == 0;
            const u64 ka = key[a], kb = key[b];
            const uint32_t pa = pos[a], pb = pos[b];
            if (after(ka, pa, kb, pb) == up) {
                key[a] = kb;
                key[b] = ka;
                pos[a] = pb;
                pos[b] = pa;
            }
        }
    }
}

#define SO_KERNELS(NAME, T)                                                                              \
    extern "C" __global__ void __launch_bounds__(SO_THREADS)                                             \
        sort_rows_##NAME(const T *in, T *out, int64_t *out_idx, uint64_t r, uint32_t npad, int desc) {   \
        rows_impl<T>(in, out, out_idx, r, npad, desc);                                                   \
    }                                                                                                    \
    extern "C" __global__ void sort_prep_##NAME(const T *in, u64 *key, uint32_t *pos, uint64_t rows,     \
                                                uint64_t r, uint64_t npad, int desc) {                   \
        prep_impl<T>(in, key, pos, rows, r, npad, desc);                                                 \
    }                                                                                                    \
    extern "C" __global__ void sort_finish_##NAME(const T *in, const uint32_t *pos, T *out,              \
                                                  int64_t *out_idx, uint64_t rows, uint64_t r,           \
                                                  uint64_t npad) {                                       \
        finish_impl<T>(in, pos, out, out_idx, rows, r, npad);                                            \
    }

SO_KERNELS(f64, double)
SO_KERNELS(f32, float)
SO_KERNELS(f16, __half)
SO_KERNELS(bf16, __nv_bfloat16)
SO_KERNELS(i32, int32_t)
SO_KERNELS(i64, int64_t)
