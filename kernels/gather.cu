// Indexing along one dimension with int64 index tensors: `gather` (and `index_select`, a gather
// whose index is broadcast over the other dimensions), `scatter` and `scatter_add`, by element
// size (scatter_add by type: f64, f32, f16, bf16, i32, i64).
//
// Built by `cargo xtask build-kernels` into crates/genesis-kernels/images/gather.fatbin. The CPU
// twins are in crates/genesis-kernels/src/gather.rs.
//
// A `GxAlong` descriptor gives the iteration shape (rank <= 8; the gather's output, the
// scatter's index), the element strides over it of the index, of the other operand (gather:
// the source; scatter: the values) and of the target of the index (gather: the source;
// scatter: the output), the dimension `dim` and that target's size along it. Position i is split
// into coordinates (32-bit divisions while they fit); the index value v at the index's offset
// must satisfy 0 <= v < size.
//
// Bad index values never reach memory: a gather writes 0 for them (the output is new memory),
// a scatter skips them, and the smallest position holding one lands in *bad (atomicMin; the
// host initialises it to all ones and reads it back to report the error, discarding the
// result). The output of a scatter is a new copy of the target, so nothing the caller holds is
// written before the error is known.
//
// scatter: when several positions write one element, which value lands is unspecified (as in
// PyTorch). scatter_add: atomic adds (f16/bf16 in their own precision, as PyTorch's), so float
// sums depend on the order of arrival; integers wrap.
//
// rows_by_key (index_select's backward along dim 0, the embedding's): `out[keys[j]] = sum of
// rows[perm[j]]` over each run of equal keys, for keys sorted ascending (a stable sort: `perm`
// ascending within equal keys), with no atomics, in f32 (f64 for f64). The sorted positions
// are cut into chunks of RK_CHUNK: pass 1 (block x = chunk, a thread a column) sums each run's
// piece inside the chunk in order; a run wholly inside writes its row, a piece of a run that
// crosses a chunk boundary goes to the workspace (slot 0: the chunk's first piece, continuing
// a run from before; slot 1: its last piece, starting a run that goes on). Pass 2: the chunk
// where such a run starts adds its slot 1 and the following chunks' slot 0 in order and writes
// the row. A hot key (a frequent token) is summed by many blocks at once, not by one thread.
// Rows no key names are left as they are (the caller zeroes `out`). Deterministic: every output
// element is one fixed sequence of additions, the CPU twin's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define GA_MAX_DIMS 8
#define GA_THREADS 256

struct GxAlong {
    int64_t shape[GA_MAX_DIMS];
    int64_t idx_stride[GA_MAX_DIMS];
    int64_t val_stride[GA_MAX_DIMS];
    int64_t tgt_stride[GA_MAX_DIMS];
    int64_t size;
    int32_t rank;
    int32_t dim;
};

// Offsets of position i: into the index, the other operand, and the target without the
// indexed dimension's term.
__device__ __forceinline__ void ga_offsets(const GxAlong &d, uint64_t i, int64_t &oi, int64_t &ov, int64_t &ot) {
    uint64_t rem = i;
    oi = ov = ot = 0;
    for (int r = d.rank - 1; r >= 0; --r) {
        const uint64_t sz = (uint64_t)d.shape[r];
        uint64_t c;
        if (((rem | sz) >> 32) == 0) {
            const uint32_t r32 = (uint32_t)rem, s32 = (uint32_t)sz;
            c = r32 % s32;
            rem = r32 / s32;
        } else {
            c = rem % sz;
            rem /= sz;
        }
        oi += (int64_t)c * d.idx_stride[r];
        ov += (int64_t)c * d.val_stride[r];
        if (r != d.dim) ot += (int64_t)c * d.tgt_stride[r];
    }
}

template <typename T>
__device__ __forceinline__ void gather_impl(const T *src, T *out, const int64_t *idx, uint64_t n, GxAlong d,
                                            unsigned long long *bad) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t oi, ov, ot;
        ga_offsets(d, i, oi, ov, ot);
        const int64_t v = idx[oi];
        if (v < 0 || v >= d.size) {
            atomicMin(bad, (unsigned long long)i);
            out[i] = T();
        } else {
            out[i] = src[ot + v * d.tgt_stride[d.dim]];
        }
    }
}

// Four consecutive positions of one row a thread, for a gather along the last dimension
// (its size a multiple of 4) with a contiguous index: the offsets are split once for the four,
// the index read in two 16-byte loads and the four values stored at once. The caller checks
// the layout and that `idx` is 16-byte aligned and `out` aligned to four elements.
template <typename T> struct alignas(4 * sizeof(T)) Quad {
    T v[4];
};

template <typename T>
__device__ __forceinline__ void gather4_impl(const T *src, T *out, const int64_t *idx, uint64_t n4, GxAlong d,
                                             unsigned long long *bad) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    const int64_t ts = d.tgt_stride[d.dim];
    for (uint64_t g = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; g < n4; g += stride) {
        const uint64_t i = g * 4;
        int64_t oi, ov, ot;
        ga_offsets(d, i, oi, ov, ot);
        const longlong2 lo = *reinterpret_cast<const longlong2 *>(idx + oi);
        const longlong2 hi = *reinterpret_cast<const longlong2 *>(idx + oi + 2);
        const int64_t v[4] = {lo.x, lo.y, hi.x, hi.y};
        Quad<T> q;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (v[k] < 0 || v[k] >= d.size) {
                atomicMin(bad, (unsigned long long)(i + k));
                q.v[k] = T();
            } else {
                q.v[k] = src[ot + v[k] * ts];
            }
        }
        *reinterpret_cast<Quad<T> *>(out + i) = q;
    }
}

template <typename T>
__device__ __forceinline__ void scatter_impl(T *out, const T *vals, const int64_t *idx, uint64_t n, GxAlong d,
                                             unsigned long long *bad) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t oi, ov, ot;
        ga_offsets(d, i, oi, ov, ot);
        const int64_t v = idx[oi];
        if (v < 0 || v >= d.size)
            atomicMin(bad, (unsigned long long)i);
        else
            out[ot + v * d.tgt_stride[d.dim]] = vals[ov];
    }
}

__device__ __forceinline__ void atomic_add(double *p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(float *p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(__half *p, __half v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(__nv_bfloat16 *p, __nv_bfloat16 v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int32_t *p, int32_t v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int64_t *p, int64_t v) {
    atomicAdd(reinterpret_cast<unsigned long long *>(p), (unsigned long long)v);
}

template <typename T>
__device__ __forceinline__ void scatter_add_impl(T *out, const T *vals, const int64_t *idx, uint64_t n, GxAlong d,
                                                 unsigned long long *bad) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t oi, ov, ot;
        ga_offsets(d, i, oi, ov, ot);
        const int64_t v = idx[oi];
        if (v < 0 || v >= d.size)
            atomicMin(bad, (unsigned long long)i);
        else
            atomic_add(out + ot + v * d.tgt_stride[d.dim], vals[ov]);
    }
}

#define GA_BY_SIZE(E, T)                                                                                  \
    extern "C" __global__ void __launch_bounds__(GA_THREADS)                                              \
        along_gather_e##E(const T *src, T *out, const int64_t *idx, uint64_t n, const __grid_constant__ GxAlong d, \
                          unsigned long long *bad) {                                                      \
        gather_impl<T>(src, out, idx, n, d, bad);                                                         \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(GA_THREADS)                                              \
        along_gather4_e##E(const T *src, T *out, const int64_t *idx, uint64_t n4, const __grid_constant__ GxAlong d, \
                           unsigned long long *bad) {                                                     \
        gather4_impl<T>(src, out, idx, n4, d, bad);                                                       \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(GA_THREADS)                                              \
        along_scatter_e##E(T *out, const T *vals, const int64_t *idx, uint64_t n, const __grid_constant__ GxAlong d, \
                           unsigned long long *bad) {                                                     \
        scatter_impl<T>(out, vals, idx, n, d, bad);                                                       \
    }
GA_BY_SIZE(1, uint8_t)
GA_BY_SIZE(2, uint16_t)
GA_BY_SIZE(4, uint32_t)
GA_BY_SIZE(8, unsigned long long)

#define GA_ADD(NAME, T)                                                                                   \
    extern "C" __global__ void __launch_bounds__(GA_THREADS)                                              \
        along_scatter_add_##NAME(T *out, const T *vals, const int64_t *idx, uint64_t n,                   \
                                 const __grid_constant__ GxAlong d, unsigned long long *bad) {            \
        scatter_add_impl<T>(out, vals, idx, n, d, bad);                                                   \
    }
GA_ADD(f64, double)
GA_ADD(f32, float)
GA_ADD(f16, __half)
GA_ADD(bf16, __nv_bfloat16)
GA_ADD(i32, int32_t)
GA_ADD(i64, int64_t)


// ---- rows_by_key. Keys outside 0..out_rows and positions outside 0..in_rows are skipped
// (never read or written through), so a bad argument cannot reach memory; the caller's keys
// come from its own sort.
#define RK_CHUNK 32
template <typename T> struct RkAcc { typedef float A; };
template <> struct RkAcc<double> { typedef double A; };
__device__ __forceinline__ float rk_load(float v) { return v; }
__device__ __forceinline__ double rk_load(double v) { return v; }
__device__ __forceinline__ float rk_load(__half v) { return __half2float(v); }
__device__ __forceinline__ float rk_load(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void rk_store(float *p, float a) { *p = a; }
__device__ __forceinline__ void rk_store(double *p, double a) { *p = a; }
__device__ __forceinline__ void rk_store(__half *p, float a) { *p = __float2half_rn(a); }
__device__ __forceinline__ void rk_store(__nv_bfloat16 *p, float a) { *p = __float2bfloat16_rn(a); }

struct RkArgs {
    const int64_t *keys, *perm;
    const void *rows;
    void *out, *ws;  // ws: A [chunks][2][cols]
    uint64_t n, cols, in_rows, out_rows;
};

template <typename T>
__device__ __forceinline__ void rk_pass1(const RkArgs &a) {
    typedef typename RkAcc<T>::A A;
    const uint64_t c = (uint64_t)blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= a.cols) return;
    const uint64_t chunk = blockIdx.x, j0 = chunk * RK_CHUNK, j1 = min(a.n, j0 + RK_CHUNK);
    const T *rows = reinterpret_cast<const T *>(a.rows);
    A *ws = reinterpret_cast<A *>(a.ws) + chunk * 2 * a.cols;
    uint64_t j = j0;
    while (j < j1) {
        const int64_t k = a.keys[j];
        const bool starts = j == 0 || a.keys[j - 1] != k;
        A acc = 0;
        do {
            const int64_t p = a.perm[j];
            if (p >= 0 && (uint64_t)p < a.in_rows) acc += (A)rk_load(rows[(uint64_t)p * a.cols + c]);
            ++j;
        } while (j < j1 && a.keys[j] == k);
        const bool ends = j == a.n || a.keys[j] != k;
        if (!starts)
            ws[c] = acc;  // the chunk's first piece, of a run from an earlier chunk
        else if (!ends)
            ws[a.cols + c] = acc;  // the chunk's last piece, of a run going on
        else if (k >= 0 && (uint64_t)k < a.out_rows)
            rk_store(reinterpret_cast<T *>(a.out) + (uint64_t)k * a.cols + c, acc);
    }
}

template <typename T>
__device__ __forceinline__ void rk_pass2(const RkArgs &a) {
    typedef typename RkAcc<T>::A A;
    const uint64_t c = (uint64_t)blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= a.cols) return;
    const uint64_t chunk = blockIdx.x, j0 = chunk * RK_CHUNK, j1 = min(a.n, j0 + RK_CHUNK);
    // Does a run start in this chunk and go on past it?
    if (j1 >= a.n || a.keys[j1 - 1] != a.keys[j1]) return;
    const int64_t k = a.keys[j1 - 1];
    if (j0 > 0 && a.keys[j0 - 1] == k) return;  // it started before: another chunk's run
    const A *ws = reinterpret_cast<const A *>(a.ws);
    A acc = ws[(chunk * 2 + 1) * a.cols + c];
    for (uint64_t q = chunk + 1;; ++q) {
        acc += ws[q * 2 * a.cols + c];
        const uint64_t end = min(a.n, (q + 1) * RK_CHUNK);
        if (end == a.n || a.keys[end] != k) break;
    }
    if (k >= 0 && (uint64_t)k < a.out_rows) rk_store(reinterpret_cast<T *>(a.out) + (uint64_t)k * a.cols + c, acc);
}

#define RK(NAME, T)                                                                                       \
    extern "C" __global__ void __launch_bounds__(GA_THREADS) rows_by_key1_##NAME(const RkArgs a) {        \
        rk_pass1<T>(a);                                                                                   \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(GA_THREADS) rows_by_key2_##NAME(const RkArgs a) {        \
        rk_pass2<T>(a);                                                                                   \
    }
RK(f64, double)
RK(f32, float)
RK(f16, __half)
RK(bf16, __nv_bfloat16)
