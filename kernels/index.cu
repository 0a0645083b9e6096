// Advanced-indexing kernels of Genesis: gather, scatter (last write wins, deterministically)
// and scatter-add (contributions summed in index order, deterministically).
//
// The CPU twins are genesis-kernels' `index::cpu` (src/index/cpu.rs), one per launcher.
//
// A result element i (row-major over the result shape) decomposes into result coordinates. The
// result dimensions [pos, pos + k) are the broadcast index dimensions: their coordinates form
// the index position b (row-major over those k sizes, nb positions in all). The other result
// dimensions step through the source by `res_stride`. The indexed source dimensions add
// idx[a * nb + b] * adv_stride[a] for each index array a.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define GX_MAX_DIMS 8
#define GX_MAX_ADV 8

struct GxIndex {
    int64_t res_shape[GX_MAX_DIMS];
    int64_t res_stride[GX_MAX_DIMS];
    int64_t adv_stride[GX_MAX_ADV];
    int64_t base;
    int64_t nb;
    int32_t rank;
    int32_t pos;
    int32_t k;
    int32_t n_adv;
};

// Source offset of result element i; also its index position b and the "before" / "after"
// coordinates (result dims before pos, and after pos + k, each row-major) for value lookups.
__device__ __forceinline__ int64_t gx_offset(const GxIndex &d, const int64_t *idx, uint64_t i, int64_t *b_out,
                                             uint64_t *before_out, uint64_t *after_out, uint64_t *after_size_out) {
    uint64_t rem = i;
    int64_t off = d.base, b = 0, bmul = 1;
    uint64_t after = 0, amul = 1, before = 0, befmul = 1;
    for (int r = d.rank - 1; r >= 0; --r) {
        const uint64_t sz = (uint64_t)d.res_shape[r];
        uint64_t c;
        if (((rem | sz) >> 32) == 0) {
            // 32-bit division is several times cheaper than the 64-bit one.
            const uint32_t r32 = (uint32_t)rem, s32 = (uint32_t)sz;
            c = r32 % s32;
            rem = r32 / s32;
        } else {
            c = rem % sz;
            rem /= sz;
        }
        if (r >= d.pos && r < d.pos + d.k) {
            b += (int64_t)c * bmul;
            bmul *= (int64_t)sz;
        } else {
            off += (int64_t)c * d.res_stride[r];
            if (r >= d.pos + d.k) {
                after += c * amul;
                amul *= sz;
            } else {
                before += c * befmul;
                befmul *= sz;
            }
        }
    }
    for (int a = 0; a < d.n_adv; ++a) off += idx[(int64_t)a * d.nb + b] * d.adv_stride[a];
    *b_out = b;
    *before_out = before;
    *after_out = after;
    *after_size_out = amul;
    return off;
}

template <typename T>
__device__ __forceinline__ void gather_impl(const T *src, T *dst, uint64_t n, const GxIndex &d, const int64_t *idx) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t b;
        uint64_t be, af, as;
        dst[i] = src[gx_offset(d, idx, i, &b, &be, &af, &as)];
    }
}

// dead[b] != 0: a later index position writes the same elements; skip (the last one wins).
template <typename T>
__device__ __forceinline__ void scatter_impl(T *dst, const T *vals, uint64_t n, const GxIndex &d, const int64_t *idx,
                                             const uint8_t *dead) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t b;
        uint64_t be, af, as;
        const int64_t off = gx_offset(d, idx, i, &b, &be, &af, &as);
        if (!dead[b]) dst[off] = vals[i];
    }
}

template <typename T> struct GxAdd {
    static __device__ __forceinline__ T add(T a, T b) { return a + b; }
};
template <> struct GxAdd<float> {
    static __device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
};
template <> struct GxAdd<double> {
    static __device__ __forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }
};
template <> struct GxAdd<__half> {
    static __device__ __forceinline__ __half add(__half a, __half b) {
        return __float2half_rn(__fadd_rn(__half2float(a), __half2float(b)));
    }
};
template <> struct GxAdd<__nv_bfloat16> {
    static __device__ __forceinline__ __nv_bfloat16 add(__nv_bfloat16 a, __nv_bfloat16 b) {
        return __float2bfloat16_rn(__fadd_rn(__bfloat162float(a), __bfloat162float(b)));
    }
};
template <> struct GxAdd<uint8_t> {
    static __device__ __forceinline__ uint8_t add(uint8_t a, uint8_t b) { return (uint8_t)(a + b); }
};
template <> struct GxAdd<int8_t> {
    static __device__ __forceinline__ int8_t add(int8_t a, int8_t b) { return (int8_t)(uint8_t)((uint8_t)a + (uint8_t)b); }
};
template <> struct GxAdd<int16_t> {
    static __device__ __forceinline__ int16_t add(int16_t a, int16_t b) { return (int16_t)(uint16_t)((uint16_t)a + (uint16_t)b); }
};
template <> struct GxAdd<int32_t> {
    static __device__ __forceinline__ int32_t add(int32_t a, int32_t b) { return (int32_t)((uint32_t)a + (uint32_t)b); }
};
template <> struct GxAdd<int64_t> {
    static __device__ __forceinline__ int64_t add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
};
template <> struct GxAdd<bool> {
    static __device__ __forceinline__ bool add(bool a, bool b) { return a || b; }
};

// Accumulate: only representative positions (the last of each group of equal index tuples)
// run; each adds its group's values in index order: members[start[b] .. start[b] + len[b]).
template <typename T>
__device__ __forceinline__ void scatter_add_impl(T *dst, const T *vals, uint64_t n, const GxIndex &d,
                                                 const int64_t *idx, const uint8_t *dead, const int64_t *start,
                                                 const int64_t *len, const int64_t *members) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t b;
        uint64_t before, after, after_size;
        const int64_t off = gx_offset(d, idx, i, &b, &before, &after, &after_size);
        if (dead[b]) continue;
        T acc = dst[off];
        for (int64_t m = start[b]; m < start[b] + len[b]; ++m) {
            const uint64_t vi = ((before * (uint64_t)d.nb) + (uint64_t)members[m]) * after_size + after;
            acc = GxAdd<T>::add(acc, vals[vi]);
        }
        dst[off] = acc;
    }
}

#define GX_MOVE(E, T)                                                                                       \
    extern "C" __global__ void index_gather_e##E(const T *src, T *dst, uint64_t n, GxIndex d, const int64_t *idx) { \
        gather_impl<T>(src, dst, n, d, idx);                                                                \
    }                                                                                                       \
    extern "C" __global__ void index_scatter_e##E(T *dst, const T *vals, uint64_t n, GxIndex d, const int64_t *idx, \
                                                  const uint8_t *dead) {                                   \
        scatter_impl<T>(dst, vals, n, d, idx, dead);                                                        \
    }
GX_MOVE(1, uint8_t)
GX_MOVE(2, uint16_t)
GX_MOVE(4, uint32_t)
GX_MOVE(8, uint64_t)

#define GX_ADD(NAME, T)                                                                                     \
    extern "C" __global__ void index_scatter_add_##NAME(T *dst, const T *vals, uint64_t n, GxIndex d,       \
                                                        const int64_t *idx, const uint8_t *dead,            \
                                                        const int64_t *start, const int64_t *len,           \
                                                        const int64_t *members) {                           \
        scatter_add_impl<T>(dst, vals, n, d, idx, dead, start, len, members);                               \
    }
GX_ADD(bool, bool)
GX_ADD(u8, uint8_t)
GX_ADD(i8, int8_t)
GX_ADD(i16, int16_t)
GX_ADD(i32, int32_t)
GX_ADD(i64, int64_t)
GX_ADD(f16, __half)
GX_ADD(bf16, __nv_bfloat16)
GX_ADD(f32, float)
GX_ADD(f64, double)

// Row fast path: one index array over the leading dimension of a view whose rows are
// contiguous (x[idx] for a row-major matrix): each index position copies a whole row in 16-byte
// units. Rows are `row_units` units long, `stride_units` apart in the source, starting at
// `base_units`. blockIdx.y strides over rows; blockIdx.x picks a chunk of RW_UNROLL * blockDim.x
// units of the row, and each thread issues its RW_UNROLL loads before its stores (several
// 16-byte requests in flight per thread).
// Blocks are RW_THREADS threads (the launcher's block size). A chunk that lies wholly inside
// the row (every chunk of a long row but the last) is copied without bounds checks through
// 32-bit offsets from one base pointer; the checked gather (the x[idx] fast path) then needs 44
// registers and is bounded to five resident blocks an SM (68 registers before: three). The
// unchecked kernels keep their 72 registers: bounding them made ptxas spill.
#define RW_UNROLL 8
#define RW_THREADS 256

__device__ __forceinline__ void copy_row_chunk(uint4 *d, const uint4 *s, int64_t row_units) {
    const int64_t first = (int64_t)blockIdx.x * (RW_THREADS * RW_UNROLL) + threadIdx.x;
    const uint4 *sp = s + first;
    uint4 *dp = d + first;
    const int64_t left = row_units - first;
    uint4 v[RW_UNROLL];
    if (left > (RW_UNROLL - 1) * RW_THREADS) {
#pragma unroll
        for (int q = 0; q < RW_UNROLL; ++q) v[q] = sp[q * RW_THREADS];
#pragma unroll
        for (int q = 0; q < RW_UNROLL; ++q) dp[q * RW_THREADS] = v[q];
        return;
    }
#pragma unroll
    for (int q = 0; q < RW_UNROLL; ++q)
        if (q * RW_THREADS < left) v[q] = sp[q * RW_THREADS];
#pragma unroll
    for (int q = 0; q < RW_UNROLL; ++q)
        if (q * RW_THREADS < left) dp[q * RW_THREADS] = v[q];
}

extern "C" __global__ void index_gather_rows16(const uint4 *src, uint4 *dst, const int64_t *idx, int64_t nrows,
                                               int64_t row_units, int64_t base_units, int64_t stride_units) {
#pragma unroll 1
    for (int64_t r = blockIdx.y; r < nrows; r += gridDim.y)
        copy_row_chunk(dst + r * row_units, src + base_units + idx[r] * stride_units, row_units);
}

// The assignment twin: rows whose position is marked dead (a later position writes the same
// row) are skipped, so exactly one writer per row.
extern "C" __global__ void index_scatter_rows16(uint4 *dst, const uint4 *vals, const int64_t *idx, const uint8_t *dead,
                                                int64_t nrows, int64_t row_units, int64_t base_units,
                                                int64_t stride_units) {
#pragma unroll 1
    for (int64_t r = blockIdx.y; r < nrows; r += gridDim.y) {
        if (dead[r]) continue;
        copy_row_chunk(dst + base_units + idx[r] * stride_units, vals + r * row_units, row_units);
    }
}

// Index arrays that live on the device: `index_normalise_*` reads array values through a
// (broadcast) layout, wraps negative values, checks them against the dimension's size and
// writes the normalised int64 array the kernels above read. An out-of-range value is written as
// 0 (a safe address) and the smallest such position lands in *bad (initialised to all ones by
// the host, which reads it back to report the error).
struct GxStrided {
    int64_t shape[GX_MAX_DIMS];
    int64_t stride[GX_MAX_DIMS];
    int64_t offset;
    int32_t rank;
};

template <typename I>
__device__ __forceinline__ void normalise_impl(const I *src, const GxStrided &l, uint64_t nb, int64_t size,
                                               int64_t *out, unsigned long long *bad) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t b = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; b < nb; b += stride) {
        uint64_t rem = b;
        int64_t off = l.offset;
        for (int r = l.rank - 1; r >= 0; --r) {
            const uint64_t sz = (uint64_t)l.shape[r];
            off += (int64_t)(rem % sz) * l.stride[r];
            rem /= sz;
        }
        int64_t v = (int64_t)src[off];
        if (v < 0) v += size;
        if (v < 0 || v >= size) {
            atomicMin(bad, (unsigned long long)b);
            v = 0;
        }
        out[b] = v;
    }
}

extern "C" __global__ void index_normalise_i64(const int64_t *src, GxStrided l, uint64_t nb, int64_t size,
                                               int64_t *out, unsigned long long *bad) {
    normalise_impl<int64_t>(src, l, nb, size, out, bad);
}
extern "C" __global__ void index_normalise_i32(const int32_t *src, GxStrided l, uint64_t nb, int64_t size,
                                               int64_t *out, unsigned long long *bad) {
    normalise_impl<int32_t>(src, l, nb, size, out, bad);
}

// Duplicate index tuples on the device, for assignment (the last position wins, as on the
// host): every position b writes b + 1 into winner[key] with atomicMax (key: the tuple as a
// row-major number over the indexed sizes); a position is dead unless it is its key's winner.
// Every position is dead when any normalisation reported a bad index, so that the scatter
// after it writes nothing and the target stays unchanged.
struct GxKeys {
    int64_t mul[GX_MAX_ADV];
    int32_t n_adv;
};

__device__ __forceinline__ int64_t gx_key(const int64_t *idx, uint64_t nb, uint64_t b, const GxKeys &k) {
    int64_t key = 0;
    for (int a = 0; a < k.n_adv; ++a) key += idx[(uint64_t)a * nb + b] * k.mul[a];
    return key;
}

extern "C" __global__ void index_winner(const int64_t *idx, uint64_t nb, GxKeys k, unsigned long long *winner) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t b = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; b < nb; b += stride)
        atomicMax(winner + gx_key(idx, nb, b, k), (unsigned long long)(b + 1));
}

extern "C" __global__ void index_dead(const int64_t *idx, uint64_t nb, GxKeys k, const unsigned long long *winner,
                                      const unsigned long long *bad, int32_t nbad, uint8_t *dead) {
    bool err = false;
    for (int a = 0; a < nbad; ++a) err |= bad[a] != ~0ull;
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t b = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; b < nb; b += stride)
        dead[b] = (err || winner[gx_key(idx, nb, b, k)] != b + 1) ? 1 : 0;
}

// Flat row-major positions (a mask's nonzero) to their coordinates over `shape` (first `rank`
// entries): with `rows`, `[n, rank]` (nonzero's layout), out[i * rank + d]; without, one
// array per dimension, out[d * n + i] (the index items of a device mask).
extern "C" __global__ void index_unravel(const int64_t *lin, uint64_t n, GxStrided s, int64_t *out, int rows) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    const uint64_t rank = (uint64_t)s.rank;
    const uint64_t step_i = rows ? rank : 1, step_d = rows ? 1 : n;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        uint64_t rem = (uint64_t)lin[i];
        for (int r = s.rank - 1; r >= 0; --r) {
            const uint64_t sz = (uint64_t)s.shape[r];
            out[i * step_i + (uint64_t)r * step_d] = (int64_t)(rem % sz);
            rem /= sz;
        }
    }
}

// The row gather reading a device index array as it is (int32 or int64, `idx_stride` elements
// apart): each row's index is wrapped (negative values count from the end, as in x[idx]) and
// checked by the blocks copying it; an out-of-range row is not copied and sets bad[0]
// (host-mapped pinned memory; every writer stores the same value). The host then finds the
// first bad value to report; the result is dropped.
// `flags` bit 0 (RC_EARLY): block (0, 0) first checks every index, stores bad[0] = 1 if one is
// out of range and then bad[1] = 1 (after a system-wide fence): the host learns the verdict a
// few microseconds after the kernel starts instead of waiting for the copy to finish.
// `flags` bit 1 (RC_NO_WRAP): values are not wrapped; a negative one is out of range (PyTorch's
// index_select).
#define RC_EARLY 1
#define RC_NO_WRAP 2
extern "C" __global__ void __launch_bounds__(RW_THREADS, 5) index_gather_rows16_checked(const uint4 *src, uint4 *dst, const void *idx, int32_t idx_i32,
                                                       int64_t idx_stride, int64_t size, int32_t *bad, int64_t nrows,
                                                       int64_t row_units, int64_t base_units, int64_t stride_units,
                                                       int32_t flags) {
    const bool wrap = !(flags & RC_NO_WRAP);
    if ((flags & RC_EARLY) && blockIdx.x == 0 && blockIdx.y == 0) {
        int any = 0;
        for (int64_t r = threadIdx.x; r < nrows; r += blockDim.x) {
            int64_t v = idx_i32 ? (int64_t)((const int32_t *)idx)[r * idx_stride] : ((const int64_t *)idx)[r * idx_stride];
            if (wrap && v < 0) v += size;
            any |= (v < 0 || v >= size);
        }
        any = __syncthreads_or(any);
        if (threadIdx.x == 0) {
            if (any) *(volatile int32_t *)bad = 1;
            __threadfence_system();
            *(volatile int32_t *)(bad + 1) = 1;
        }
    }
    for (int64_t r = blockIdx.y; r < nrows; r += gridDim.y) {
        int64_t v = idx_i32 ? (int64_t)((const int32_t *)idx)[r * idx_stride] : ((const int64_t *)idx)[r * idx_stride];
        if (wrap && v < 0) v += size;
        if (v < 0 || v >= size) {
            if (threadIdx.x == 0) *(volatile int32_t *)bad = 1;
            continue;
        }
        copy_row_chunk(dst + r * row_units, src + base_units + v * stride_units, row_units);
    }
}
