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
// Every kernel writes the first `kout` elements of each sorted row (`kout == r` for a whole
// sort, fewer for a top-k), rows of `kout` in the outputs.
//
// Rows of at most SO_SMEM elements: one block a row, a bitonic network over the row padded to
// a power of two (padding keys sort last). Fast: the row is read once and written once. Keys
// of at most 32 bits in rows padded to RG_MIN or more run in registers (`sort_rows8_*`, below);
// the others in shared memory (`sort_rows_*`).
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
__device__ __forceinline__ void rows_impl(const T *in, T *out, int64_t *out_idx, uint64_t r, uint32_t npad, int desc,
                                          uint64_t kout) {
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
    T *q = out + row * kout;
    int64_t *qi = out_idx + row * kout;
    for (uint32_t i = threadIdx.x; i < kout; i += blockDim.x) {
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
                                            uint64_t r, uint64_t npad, uint64_t kout) {
    const uint64_t n = rows * kout, stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += stride) {
        const uint64_t row = t / kout, i = t % kout;
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


// Rows of RG_MIN..SO_SMEM elements whose keys fit 32 bits (f32, f16, bf16, i32): the same
// network with each key packed with its position into one 64-bit word (key << 32 | position:
// the pair's order is the word's), RG_E consecutive words a thread, in registers. A stage
// with partners in the same thread swaps registers; partners in other lanes of the warp are
// exchanged by shuffles; only partners in other warps (j >= 32 * RG_E) go through shared
// memory, so a 1024-element row needs three block-wide barriers instead of 55.
#define RG_E 8
#define RG_MIN (32 * RG_E)

// The word of a key and its position: 64 bits for 32-bit keys, 32 bits for 16-bit keys (a
// position below SO_SMEM fits the low 16 bits), so that half-precision rows move half the bytes.
template <typename T> struct Word {
    typedef u64 W;
    static const int SHIFT = 32;
};
template <> struct Word<__half> {
    typedef uint32_t W;
    static const int SHIFT = 16;
};
template <> struct Word<__nv_bfloat16> {
    typedef uint32_t W;
    static const int SHIFT = 16;
};

template <typename W> __device__ __forceinline__ W rg_min(W a, W b) { return a < b ? a : b; }
template <typename W> __device__ __forceinline__ W rg_max(W a, W b) { return a < b ? b : a; }

// Stage (j, k) for j < RG_E: the partners are registers e and e + J of one thread.
template <uint32_t J, typename W> __device__ __forceinline__ void rg_local(W (&v)[RG_E], uint32_t base, uint32_t k) {
#pragma unroll
    for (uint32_t e = 0; e < RG_E; e++) {
        if ((e & J) == 0) {
            const bool up = ((base + e) & k) == 0;
            const W a = v[e], b = v[e + J];
            v[e] = up ? rg_min(a, b) : rg_max(a, b);
            v[e + J] = up ? rg_max(a, b) : rg_min(a, b);
        }
    }
}

template <typename T>
__device__ __forceinline__ void rows_reg_impl(const T *in, T *out, int64_t *out_idx, uint64_t r, uint32_t npad,
                                              int desc, uint64_t kout) {
    typedef typename Word<T>::W W;
    __shared__ W sm[SO_SMEM];
    const uint32_t t = threadIdx.x, base = t * RG_E;
    const uint64_t row = blockIdx.x;
    const T *p = in + row * r;
    const uint32_t inv = desc ? (uint32_t)width_mask<T>() : 0u;
    W v[RG_E];
#pragma unroll
    for (uint32_t e = 0; e < RG_E; e++) {
        const uint32_t i = base + e;
        v[e] = i < r ? ((W)((uint32_t)Key<T>::to(p[i]) ^ inv) << Word<T>::SHIFT) | i : ~(W)0;
    }
    for (uint32_t k = 2; k <= npad; k <<= 1) {
        for (uint32_t j = k >> 1; j > 0; j >>= 1) {
            if (j >= 32 * RG_E) {
#pragma unroll
                for (uint32_t e = 0; e < RG_E; e++) sm[base + e] = v[e];
                __syncthreads();
#pragma unroll
                for (uint32_t e = 0; e < RG_E; e++) {
                    const uint32_t i = base + e;
                    const W o = sm[i ^ j];
                    const bool keep_min = ((i & j) == 0) == ((i & k) == 0);
                    v[e] = keep_min ? rg_min(v[e], o) : rg_max(v[e], o);
                }
                __syncthreads();
            } else if (j >= RG_E) {
                const uint32_t lanes = j / RG_E;
#pragma unroll
                for (uint32_t e = 0; e < RG_E; e++) {
                    const uint32_t i = base + e;
                    const W o = __shfl_xor_sync(0xffffffffu, v[e], lanes);
                    const bool keep_min = ((i & j) == 0) == ((i & k) == 0);
                    v[e] = keep_min ? rg_min(v[e], o) : rg_max(v[e], o);
                }
            } else if (j == 4) {
                rg_local<4>(v, base, k);
            } else if (j == 2) {
                rg_local<2>(v, base, k);
            } else {
                rg_local<1>(v, base, k);
            }
        }
    }
    T *q = out + row * kout;
    int64_t *qi = out_idx + row * kout;
#pragma unroll
    for (uint32_t e = 0; e < RG_E; e++) {
        const uint32_t i = base + e;
        if (i < kout) {
            const uint32_t at = (uint32_t)(v[e] & (((W)1 << Word<T>::SHIFT) - 1));
            q[i] = p[at];
            qi[i] = at;
        }
    }
}

#define SO_REG_KERNEL(NAME, T)                                                                           \
    extern "C" __global__ void __launch_bounds__(SO_SMEM / RG_E)                                         \
        sort_rows8_##NAME(const T *in, T *out, int64_t *out_idx, uint64_t r, uint32_t npad, int desc,    \
                          uint64_t kout) {                                                               \
        rows_reg_impl<T>(in, out, out_idx, r, npad, desc, kout);                                         \
    }

SO_REG_KERNEL(f32, float)
SO_REG_KERNEL(f16, __half)
SO_REG_KERNEL(bf16, __nv_bfloat16)
SO_REG_KERNEL(i32, int32_t)

#define SO_KERNELS(NAME, T)                                                                              \
    extern "C" __global__ void __launch_bounds__(SO_THREADS)                                             \
        sort_rows_##NAME(const T *in, T *out, int64_t *out_idx, uint64_t r, uint32_t npad, int desc,     \
                         uint64_t kout) {                                                                \
        rows_impl<T>(in, out, out_idx, r, npad, desc, kout);                                             \
    }                                                                                                    \
    extern "C" __global__ void sort_prep_##NAME(const T *in, u64 *key, uint32_t *pos, uint64_t rows,     \
                                                uint64_t r, uint64_t npad, int desc) {                   \
        prep_impl<T>(in, key, pos, rows, r, npad, desc);                                                 \
    }                                                                                                    \
    extern "C" __global__ void sort_finish_##NAME(const T *in, const uint32_t *pos, T *out,              \
                                                  int64_t *out_idx, uint64_t rows, uint64_t r,           \
                                                  uint64_t npad, uint64_t kout) {                        \
        finish_impl<T>(in, pos, out, out_idx, rows, r, npad, kout);                                      \
    }

SO_KERNELS(f64, double)
SO_KERNELS(f32, float)
SO_KERNELS(f16, __half)
SO_KERNELS(bf16, __nv_bfloat16)
SO_KERNELS(i32, int32_t)
SO_KERNELS(i64, int64_t)
