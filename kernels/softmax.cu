// Softmax kernels of Genesis: `softmax`, `log_softmax` and `logsumexp` (kernels `sm_*`) along one
// axis of a contiguous array seen as [outer, n, inner], for f64 (computed in f64), f32, f16 and
// bf16 (computed in f32, each result rounded once to the input type). `op` (a kernel argument):
// 0 softmax, 1 log_softmax (both write [outer, n, inner]), 2 logsumexp (writes [outer, inner]).
//
// Built by `cargo xtask build-kernels` into crates/genesis-kernels/images/softmax.fatbin. The CPU
// twin is `softmax` in crates/genesis-kernels/src/softmax.rs.
//
// Each line of n values x reduces to its statistics (m, s): m = max x (NaN when any x is NaN)
// and s = sum exp(x - m). Then, when m is finite,
//   softmax = exp(x - m) * (1 / s),  log_softmax = (x - m) - log(s),  logsumexp = m + log(s);
// when m is not finite (a NaN, +inf, or a line of -inf or of no elements), softmax and
// log_softmax are NaN and logsumexp is m (PyTorch's: it does not subtract an infinite max, so
// -inf lines give -inf and a +inf gives +inf; a NaN anywhere gives NaN). exp(x - m) <= 1 never
// overflows. Streaming paths build (m, s) online: a running state takes x by
//   x > m:  s = s * exp(m - x) + 1, m = x;   x <= m: s += (x == m ? 1 : exp(x - m));
//   otherwise (x or m NaN): m = s = NaN
// and two states merge the same way (the -inf state counts its -inf values, which the first
// finite value multiplies by exp(-inf) = 0). The twin computes m, then s in order: results agree
// within the rounding of s's terms and sum (the kernels add in a tree, online paths rescale) and
// of CUDA's expf/logf (2 and 1 ulp) against Rust's; see the twin's documentation for the bound.
//
// Paths (the launcher, `SoftmaxPlan` in softmax.rs, picks one):
// - `sm_warp_<T>_<ITEMS>` (inner == 1, n <= 32 * ITEMS <= 1024): a warp a row, 4 rows a block;
//   lane l holds elements l, l + 32, ... in registers (read from global memory once, coalesced),
//   the max and the sum of exp(x - m) are butterfly shuffles, then the lane writes its elements.
// - `sm_block_<T>[_v]` (inner == 1, the row fits in shared memory): a block a row (grid-stride);
//   the row is copied into dynamic shared memory while each thread takes the max of its
//   elements (16-byte vector loads in the `_v` kernels, used when every row is 16-byte aligned);
//   the block's max, then its sum of exp(x - m) over the cached row, then the outputs written
//   from the cache (vector stores): global memory is read once and written once.
// - `sm_long_<T>[_v]` (inner == 1, long rows, many of them): a block a row; an online pass reads
//   the row for (m, s), the block merges the states, a second pass reads it again and writes.
// - `sm_cstats_<T>[_v]` + `sm_cwrite_<T>[_v]` (inner == 1, few long rows): each row is cut into
//   `chunks` chunks of `chunk` elements (a multiple of 8); block b takes the online state of chunk
//   b % chunks of row b / chunks into the workspace (2 accumulators a chunk), then each block of
//   the second kernel merges its row's states (in chunk order) and writes its chunk
//   (logsumexp: one block a row writes the row's value).
// - `sm_cols_<T>` (inner > 1): blocks of 32 x BY threads; the 32 threads of a warp take 32
//   adjacent columns (o, c) of the flattened [outer, inner] (coalesced loads along c), the BY
//   threads of a column take every BY-th element along n in an online state, the BY states of a
//   column merge in shared memory (in order of ty), and a second pass writes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define SM_SOFTMAX 0
#define SM_LOG_SOFTMAX 1
#define SM_LOGSUMEXP 2

typedef unsigned long long u64;

template <typename T> struct Sm;
template <> struct Sm<double> {
    typedef double A;
    static __device__ __forceinline__ double load(double x) { return x; }
    static __device__ __forceinline__ double store(double a) { return a; }
    static __device__ __forceinline__ double ex(double a) { return exp(a); }
    static __device__ __forceinline__ double lg(double a) { return log(a); }
    static __device__ __forceinline__ double inf() { return __longlong_as_double(0x7ff0000000000000ll); }
    static __device__ __forceinline__ double nan() { return __longlong_as_double(0x7ff8000000000000ll); }
};
struct SmF32 {
    typedef float A;
    static __device__ __forceinline__ float ex(float a) { return expf(a); }
    static __device__ __forceinline__ float lg(float a) { return logf(a); }
    static __device__ __forceinline__ float inf() { return __int_as_float(0x7f800000); }
    static __device__ __forceinline__ float nan() { return __int_as_float(0x7fc00000); }
};
template <> struct Sm<float> : SmF32 {
    static __device__ __forceinline__ float load(float x) { return x; }
    static __device__ __forceinline__ float store(float a) { return a; }
};
template <> struct Sm<__half> : SmF32 {
    static __device__ __forceinline__ float load(__half x) { return __half2float(x); }
    static __device__ __forceinline__ __half store(float a) { return __float2half_rn(a); }
};
template <> struct Sm<__nv_bfloat16> : SmF32 {
    static __device__ __forceinline__ float load(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __device__ __forceinline__ __nv_bfloat16 store(float a) { return __float2bfloat16_rn(a); }
};

// 16 bytes of T, for vector loads and stores.
template <typename T> struct __align__(16) Vec {
    static const int N = 16 / sizeof(T);
    T v[N];
};

// The max of a and b, NaN when either is NaN.
template <typename A> __device__ __forceinline__ A nanmax(A a, A b) { return (a > b || a != a) ? a : b; }

// The online state (m, s) of a line (see the top of the file).
template <typename T> struct St {
    typedef typename Sm<T>::A A;
    A m, s;
    __device__ __forceinline__ void init() {
        m = -Sm<T>::inf();
        s = 0;
    }
    __device__ __forceinline__ void push(A x) {
        if (x > m) {
            s = s * Sm<T>::ex(m - x) + (A)1;
            m = x;
        } else if (x <= m) {
            s += x == m ? (A)1 : Sm<T>::ex(x - m);
        } else {
            m = Sm<T>::nan();
            s = m;
        }
    }
    __device__ __forceinline__ void merge(A m2, A s2) {
        if (m2 > m) {
            s = s * Sm<T>::ex(m - m2) + s2;
            m = m2;
        } else if (m2 <= m) {
            s += m2 == m ? s2 : s2 * Sm<T>::ex(m2 - m);
        } else {
            m = Sm<T>::nan();
            s = m;
        }
    }
    // Merges the states of the warp's lanes (butterfly: every lane gets the total).
    __device__ __forceinline__ void warp_merge() {
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) {
            const A m2 = __shfl_xor_sync(0xffffffffu, m, d), s2 = __shfl_xor_sync(0xffffffffu, s, d);
            merge(m2, s2);
        }
    }
};

// The per-element outputs, given a line's statistics: `c` is 1 / s (softmax) or log(s)
// (log_softmax); `ok` says whether m is finite.
template <typename T>
__device__ __forceinline__ T out_of(int op, typename Sm<T>::A x, typename Sm<T>::A m, typename Sm<T>::A c, bool ok) {
    typedef typename Sm<T>::A A;
    A y;
    if (!ok) y = Sm<T>::nan();
    else if (op == SM_SOFTMAX) y = Sm<T>::ex(x - m) * c;
    else y = (x - m) - c;
    return Sm<T>::store(y);
}

template <typename A> __device__ __forceinline__ bool is_fin(A m) { return m - m == (A)0; }

// The per-line constant of out_of, from the statistics.
template <typename T>
__device__ __forceinline__ typename Sm<T>::A const_of(int op, typename Sm<T>::A s) {
    typedef typename Sm<T>::A A;
    return op == SM_SOFTMAX ? (A)1 / s : Sm<T>::lg(s);
}

// logsumexp from the statistics.
template <typename T> __device__ __forceinline__ T lse_of(typename Sm<T>::A m, typename Sm<T>::A s) {
    return Sm<T>::store(is_fin(m) ? m + Sm<T>::lg(s) : m);
}

// ---- sm_warp: a warp a row, ITEMS values a lane in registers.
template <typename T, int ITEMS>
__device__ __forceinline__ void warp_impl(const T *in, T *out, u64 outer, u64 n, int op) {
    typedef typename Sm<T>::A A;
    const int lane = threadIdx.x & 31;
    const u64 per = blockDim.x >> 5;
    for (u64 row = (u64)blockIdx.x * per + (threadIdx.x >> 5); row < outer; row += (u64)gridDim.x * per) {
        const T *p = in + row * n;
        A v[ITEMS];
        A m = -Sm<T>::inf();
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const u64 k = (u64)i * 32 + lane;
            v[i] = k < n ? Sm<T>::load(p[k]) : -Sm<T>::inf();
            m = nanmax(m, v[i]);
        }
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) m = nanmax(m, __shfl_xor_sync(0xffffffffu, m, d));
        const bool ok = is_fin(m);
        A s = 0;
        if (ok) {
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) s += Sm<T>::ex(v[i] - m);
#pragma unroll
            for (int d = 16; d > 0; d >>= 1) s += __shfl_xor_sync(0xffffffffu, s, d);
        }
        if (op == SM_LOGSUMEXP) {
            if (lane == 0) out[row] = lse_of<T>(m, s);
            continue;
        }
        const A c = const_of<T>(op, s);
        T *q = out + row * n;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const u64 k = (u64)i * 32 + lane;
            if (k < n) q[k] = out_of<T>(op, v[i], m, c, ok);
        }
    }
}

// Block-wide reductions through `red` (32 entries); every thread gets the result. They begin
// with a barrier, so `red` may be reused from one call to the next.
template <typename A> __device__ __forceinline__ A block_max(A v, A *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v = nanmax(v, __shfl_xor_sync(0xffffffffu, v, d));
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = red[0];
    for (int w = 1; w < warps; ++w) v = nanmax(v, red[w]);
    return v;
}
template <typename A> __device__ __forceinline__ A block_sum(A v, A *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = red[0];
    for (int w = 1; w < warps; ++w) v += red[w];
    return v;
}
// Merges the states of the block's threads (in warp order); every thread gets the total.
template <typename T> __device__ __forceinline__ void block_merge(St<T> &st, typename Sm<T>::A *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    st.warp_merge();
    __syncthreads();
    if (lane == 0) {
        red[warp] = st.m;
        red[32 + warp] = st.s;
    }
    __syncthreads();
    st.m = red[0];
    st.s = red[32];
    for (int w = 1; w < warps; ++w) st.merge(red[w], red[32 + w]);
}

// ---- sm_block: a block a row, the row cached in shared memory.
template <typename T, bool VEC>
__device__ __forceinline__ void block_impl(const T *in, T *out, u64 outer, u64 n, int op) {
    typedef typename Sm<T>::A A;
    typedef Vec<T> V;
    extern __shared__ __align__(16) unsigned char sm_raw[];
    __shared__ A red[64];
    T *row_s = reinterpret_cast<T *>(sm_raw);
    const u64 nv = VEC ? n / V::N : n;
    for (u64 row = blockIdx.x; row < outer; row += gridDim.x) {
        const T *p = in + row * n;
        A m = -Sm<T>::inf();
#pragma unroll 4
        for (u64 j = threadIdx.x; j < nv; j += blockDim.x) {
            if (VEC) {
                const V v = reinterpret_cast<const V *>(p)[j];
                reinterpret_cast<V *>(row_s)[j] = v;
#pragma unroll
                for (int e = 0; e < V::N; ++e) m = nanmax(m, Sm<T>::load(v.v[e]));
            } else {
                const T x = p[j];
                row_s[j] = x;
                m = nanmax(m, Sm<T>::load(x));
            }
        }
        m = block_max(m, red);
        const bool ok = is_fin(m);
        // Each thread reads back only the elements it wrote: no barrier needed before.
        A s = 0;
        if (ok) {
            for (u64 j = threadIdx.x; j < nv; j += blockDim.x) {
                if (VEC) {
                    const V v = reinterpret_cast<const V *>(row_s)[j];
#pragma unroll
                    for (int e = 0; e < V::N; ++e) s += Sm<T>::ex(Sm<T>::load(v.v[e]) - m);
                } else {
                    s += Sm<T>::ex(Sm<T>::load(row_s[j]) - m);
                }
            }
        }
        s = block_sum(s, red);
        if (op == SM_LOGSUMEXP) {
            if (threadIdx.x == 0) out[row] = lse_of<T>(m, s);
        } else {
            const A c = const_of<T>(op, s);
            T *q = out + row * n;
            for (u64 j = threadIdx.x; j < nv; j += blockDim.x) {
                if (VEC) {
                    const V v = reinterpret_cast<const V *>(row_s)[j];
                    V o;
#pragma unroll
                    for (int e = 0; e < V::N; ++e) o.v[e] = out_of<T>(op, Sm<T>::load(v.v[e]), m, c, ok);
                    reinterpret_cast<V *>(q)[j] = o;
                } else {
                    q[j] = out_of<T>(op, Sm<T>::load(row_s[j]), m, c, ok);
                }
            }
        }
        // The next row overwrites the cache: every thread must be done reading it.
        __syncthreads();
    }
}

// The block's merged online state of elements [begin, end) of the row at p (begin and end
// multiples of the vector width when VEC).
template <typename T, bool VEC>
__device__ __forceinline__ St<T> range_state(const T *p, u64 begin, u64 end, typename Sm<T>::A *red) {
    typedef Vec<T> V;
    St<T> st;
    st.init();
    if (VEC) {
        const V *pv = reinterpret_cast<const V *>(p);
#pragma unroll 4
        for (u64 j = begin / V::N + threadIdx.x; j < end / V::N; j += blockDim.x) {
            const V v = pv[j];
#pragma unroll
            for (int e = 0; e < V::N; ++e) st.push(Sm<T>::load(v.v[e]));
        }
    } else {
#pragma unroll 4
        for (u64 k = begin + threadIdx.x; k < end; k += blockDim.x) st.push(Sm<T>::load(p[k]));
    }
    block_merge(st, red);
    return st;
}

// Writes the outputs of elements [begin, end) of the row at p into q.
template <typename T, bool VEC>
__device__ __forceinline__ void range_write(const T *p, T *q, u64 begin, u64 end, int op, St<T> st) {
    typedef typename Sm<T>::A A;
    typedef Vec<T> V;
    const bool ok = is_fin(st.m);
    const A c = const_of<T>(op, st.s);
    if (VEC) {
        const V *pv = reinterpret_cast<const V *>(p);
        V *qv = reinterpret_cast<V *>(q);
        for (u64 j = begin / V::N + threadIdx.x; j < end / V::N; j += blockDim.x) {
            const V v = pv[j];
            V o;
#pragma unroll
            for (int e = 0; e < V::N; ++e) o.v[e] = out_of<T>(op, Sm<T>::load(v.v[e]), st.m, c, ok);
            qv[j] = o;
        }
    } else {
        for (u64 k = begin + threadIdx.x; k < end; k += blockDim.x)
            q[k] = out_of<T>(op, Sm<T>::load(p[k]), st.m, c, ok);
    }
}

// ---- sm_long: a block a row, two passes over global memory.
template <typename T, bool VEC>
__device__ __forceinline__ void long_impl(const T *in, T *out, u64 outer, u64 n, int op) {
    __shared__ typename Sm<T>::A red[64];
    for (u64 row = blockIdx.x; row < outer; row += gridDim.x) {
        const T *p = in + row * n;
        const St<T> st = range_state<T, VEC>(p, 0, n, red);
        if (op == SM_LOGSUMEXP) {
            if (threadIdx.x == 0) out[row] = lse_of<T>(st.m, st.s);
        } else {
            range_write<T, VEC>(p, out + row * n, 0, n, op, st);
        }
    }
}

// ---- sm_cstats / sm_cwrite: chunks of few long rows.
template <typename T, bool VEC>
__device__ __forceinline__ void cstats_impl(const T *in, typename Sm<T>::A *ws, u64 outer, u64 n, u64 chunks,
                                            u64 chunk) {
    __shared__ typename Sm<T>::A red[64];
    for (u64 b = blockIdx.x; b < outer * chunks; b += gridDim.x) {
        const u64 row = b / chunks, part = b % chunks;
        const u64 begin = part * chunk, end = min(n, begin + chunk);
        const St<T> st = range_state<T, VEC>(in + row * n, begin, end, red);
        if (threadIdx.x == 0) {
            ws[2 * b] = st.m;
            ws[2 * b + 1] = st.s;
        }
    }
}

template <typename T, bool VEC>
__device__ __forceinline__ void cwrite_impl(const T *in, T *out, const typename Sm<T>::A *ws, u64 outer, u64 n,
                                            u64 chunks, u64 chunk, int op) {
    __shared__ typename Sm<T>::A red[64];
    const u64 parts = op == SM_LOGSUMEXP ? 1 : chunks;
    for (u64 b = blockIdx.x; b < outer * parts; b += gridDim.x) {
        const u64 row = b / parts, part = b % parts;
        // The row's chunk states, merged in chunk order by each thread over its share, then
        // across the block.
        St<T> st;
        st.init();
        for (u64 k = threadIdx.x; k < chunks; k += blockDim.x) st.merge(ws[2 * (row * chunks + k)], ws[2 * (row * chunks + k) + 1]);
        block_merge(st, red);
        if (op == SM_LOGSUMEXP) {
            if (threadIdx.x == 0) out[row] = lse_of<T>(st.m, st.s);
        } else {
            const u64 begin = part * chunk, end = min(n, begin + chunk);
            range_write<T, VEC>(in + row * n, out + row * n, begin, end, op, st);
        }
    }
}

// ---- sm_cols: inner > 1, blocks of 32 x BY threads over columns.
template <typename T>
__device__ __forceinline__ void cols_impl(const T *in, T *out, u64 outer, u64 n, u64 inner, int op) {
    typedef typename Sm<T>::A A;
    __shared__ A sm_m[32][33], sm_s[32][33];
    const int tx = threadIdx.x, ty = threadIdx.y, by = blockDim.y;
    const u64 cols = outer * inner;
    for (u64 tile = blockIdx.x; tile * 32 < cols; tile += gridDim.x) {
        const u64 t = tile * 32 + tx;
        const bool live = t < cols;
        const u64 o = live ? t / inner : 0, c = live ? t % inner : 0;
        const T *p = in + o * n * inner + c;
        St<T> st;
        st.init();
        if (live) {
#pragma unroll 4
            for (u64 k = ty; k < n; k += by) st.push(Sm<T>::load(p[k * inner]));
        }
        sm_m[ty][tx] = st.m;
        sm_s[ty][tx] = st.s;
        __syncthreads();
        if (ty == 0) {
            for (int y = 1; y < by; ++y) st.merge(sm_m[y][tx], sm_s[y][tx]);
            sm_m[0][tx] = st.m;
            sm_s[0][tx] = st.s;
        }
        __syncthreads();
        st.m = sm_m[0][tx];
        st.s = sm_s[0][tx];
        // Everyone has read the merged state before the next tile writes the arrays.
        __syncthreads();
        if (!live) continue;
        if (op == SM_LOGSUMEXP) {
            if (ty == 0) out[t] = lse_of<T>(st.m, st.s);
            continue;
        }
        const bool ok = is_fin(st.m);
        const A cst = const_of<T>(op, st.s);
        T *q = out + o * n * inner + c;
#pragma unroll 4
        for (u64 k = ty; k < n; k += by) q[k * inner] = out_of<T>(op, Sm<T>::load(p[k * inner]), st.m, cst, ok);
    }
}

#define SM_WARP(NAME, T, ITEMS)                                                                          \
    extern "C" __global__ void __launch_bounds__(128)                                                    \
        sm_warp_##NAME##_##ITEMS(const T *in, T *out, u64 outer, u64 n, int op) {                        \
        warp_impl<T, ITEMS>(in, out, outer, n, op);                                                      \
    }
#define SM_VEC(NAME, SUFFIX, T, VEC)                                                                     \
    extern "C" __global__ void __launch_bounds__(1024)                                                   \
        sm_block_##NAME##SUFFIX(const T *in, T *out, u64 outer, u64 n, int op) {                         \
        block_impl<T, VEC>(in, out, outer, n, op);                                                       \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(1024)                                                   \
        sm_long_##NAME##SUFFIX(const T *in, T *out, u64 outer, u64 n, int op) {                          \
        long_impl<T, VEC>(in, out, outer, n, op);                                                        \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(1024)                                                   \
        sm_cstats_##NAME##SUFFIX(const T *in, Sm<T>::A *ws, u64 outer, u64 n, u64 chunks, u64 chunk) {   \
        cstats_impl<T, VEC>(in, ws, outer, n, chunks, chunk);                                            \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(1024) sm_cwrite_##NAME##SUFFIX(                         \
        const T *in, T *out, const Sm<T>::A *ws, u64 outer, u64 n, u64 chunks, u64 chunk, int op) {      \
        cwrite_impl<T, VEC>(in, out, ws, outer, n, chunks, chunk, op);                                   \
    }
#define SM_ALL(NAME, T)                                                                                  \
    SM_WARP(NAME, T, 1)                                                                                  \
    SM_WARP(NAME, T, 2)                                                                                  \
    SM_WARP(NAME, T, 4)                                                                                  \
    SM_WARP(NAME, T, 8)                                                                                  \
    SM_WARP(NAME, T, 16)                                                                                 \
    SM_WARP(NAME, T, 32)                                                                                 \
    SM_VEC(NAME, , T, false)                                                                             \
    SM_VEC(NAME, _v, T, true)                                                                            \
    extern "C" __global__ void __launch_bounds__(1024)                                                   \
        sm_cols_##NAME(const T *in, T *out, u64 outer, u64 n, u64 inner, int op) {                       \
        cols_impl<T>(in, out, outer, n, inner, op);                                                      \
    }

SM_ALL(f64, double)
SM_ALL(f32, float)
SM_ALL(f16, __half)
SM_ALL(bf16, __nv_bfloat16)
