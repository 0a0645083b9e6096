// Scan kernels of Genesis: the inclusive prefix sum (`cumsum`, kernels `scan_*`) and product
// (`cumprod`, kernels `cumprod_*`) along one axis of a contiguous array seen as
// [outer, r, inner], for f64 (accumulated in f64), f32, f16, bf16 (accumulated in f32, written in
// the input type) and i32, i64 (accumulated in i64 with wrapping, written as i64: PyTorch's
// rule). The algorithm below is written for the sum; the product is the same with `*` for `+`
// and 1 for 0 (ScOp).
//
// Built by `cargo xtask build-kernels` into crates/genesis-kernels/images/scan.fatbin. The CPU
// twins are `cumsum` and `cumprod` in crates/genesis-kernels/src/scan.rs. Integers are exact
// (wrapping addition and multiplication are associative). `cumsum`'s twin sums floats in f64,
// `cumprod`'s multiplies in the accumulator type, in order: the twins agree within the rounding
// of a running sum or product in the accumulator (f32, or f64 for f64), whose order differs.
//
// inner == 1 (`scan_rows_*`): each row is cut into `chunks` chunks of `chunk` elements; block b
// scans chunk b % chunks of row b / chunks in tiles of SC_THREADS * SC_ITEMS elements: a
// coalesced load of the tile into shared memory (padded against bank conflicts), a sequential
// scan of SC_ITEMS consecutive
// values per thread, a warp scan (shuffles) of the thread totals and a scan of the warp totals,
// then a coalesced store; the running total carries from tile to tile. One chunk a row (many
// rows: the launcher's choice when there are rows for every multiprocessor) reads the input
// once and writes the output once. With several chunks a row (few long rows), `scan_sums_*`
// first sums each chunk, `scan_carry` turns each row's chunk sums into exclusive prefix sums
// (one block a row), and the scan starts each chunk from its carry: the input is read twice.
//
// inner > 1 (`scan_cols_*`): a thread per column (o, c), in order along r; the threads of a warp
// read adjacent columns (coalesced). Fast when outer * inner fills the device; a few long
// columns are slow (one thread each).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define SC_THREADS 256
#define SC_WARPS (SC_THREADS / 32)
#define SC_ITEMS 8
#define SC_TILE (SC_THREADS * SC_ITEMS)
// Shared-memory slot of tile element i: one pad word every 32, so that the threads of a warp
// reading SC_ITEMS consecutive elements each hit distinct banks.
#define SC_PAD(i) ((i) + ((i) >> 5))

typedef long long i64;

template <typename T> struct Sc;
template <> struct Sc<double> {
    typedef double A;
    typedef double O;
    static __device__ __forceinline__ double load(double x) { return x; }
    static __device__ __forceinline__ double store(double a) { return a; }
    static __device__ __forceinline__ double add(double a, double b) { return a + b; }
    static __device__ __forceinline__ double mul(double a, double b) { return a * b; }
};
template <> struct Sc<float> {
    typedef float A;
    typedef float O;
    static __device__ __forceinline__ float load(float x) { return x; }
    static __device__ __forceinline__ float store(float a) { return a; }
    static __device__ __forceinline__ float add(float a, float b) { return a + b; }
    static __device__ __forceinline__ float mul(float a, float b) { return a * b; }
};
template <> struct Sc<__half> {
    typedef float A;
    typedef __half O;
    static __device__ __forceinline__ float load(__half x) { return __half2float(x); }
    static __device__ __forceinline__ __half store(float a) { return __float2half_rn(a); }
    static __device__ __forceinline__ float add(float a, float b) { return a + b; }
    static __device__ __forceinline__ float mul(float a, float b) { return a * b; }
};
template <> struct Sc<__nv_bfloat16> {
    typedef float A;
    typedef __nv_bfloat16 O;
    static __device__ __forceinline__ float load(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __device__ __forceinline__ __nv_bfloat16 store(float a) { return __float2bfloat16_rn(a); }
    static __device__ __forceinline__ float add(float a, float b) { return a + b; }
    static __device__ __forceinline__ float mul(float a, float b) { return a * b; }
};
template <> struct Sc<int32_t> {
    typedef i64 A;
    typedef int64_t O;
    static __device__ __forceinline__ i64 load(int32_t x) { return x; }
    static __device__ __forceinline__ int64_t store(i64 a) { return a; }
    static __device__ __forceinline__ i64 add(i64 a, i64 b) {
        return (i64)((unsigned long long)a + (unsigned long long)b);
    }
    static __device__ __forceinline__ i64 mul(i64 a, i64 b) {
        return (i64)((unsigned long long)a * (unsigned long long)b);
    }
};
template <> struct Sc<int64_t> {
    typedef i64 A;
    typedef int64_t O;
    static __device__ __forceinline__ i64 load(int64_t x) { return x; }
    static __device__ __forceinline__ int64_t store(i64 a) { return a; }
    static __device__ __forceinline__ i64 add(i64 a, i64 b) {
        return (i64)((unsigned long long)a + (unsigned long long)b);
    }
    static __device__ __forceinline__ i64 mul(i64 a, i64 b) {
        return (i64)((unsigned long long)a * (unsigned long long)b);
    }
};

// The scan's operation on accumulators: a sum (PROD false) or a product, and its identity.
template <typename T, bool PROD> struct ScOp {
    typedef typename Sc<T>::A A;
    static __device__ __forceinline__ A f(A a, A b) { return PROD ? Sc<T>::mul(a, b) : Sc<T>::add(a, b); }
    static __device__ __forceinline__ A id() { return PROD ? (A)1 : (A)0; }
};

// Exclusive scan of `v` over the block's threads (in thread order): returns the sum of the
// values of the threads before this one and sets `total` to the block's sum. Uses `warp_tot`
// (SC_WARPS entries).
template <typename T, bool PROD>
__device__ __forceinline__ typename Sc<T>::A block_scan(typename Sc<T>::A v, typename Sc<T>::A *warp_tot,
                                                       typename Sc<T>::A &total) {
    typedef typename Sc<T>::A A;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const A o = __shfl_up_sync(0xffffffffu, v, d);
        if (lane >= d) v = ScOp<T, PROD>::f(o, v);
    }
    A excl = __shfl_up_sync(0xffffffffu, v, 1);
    if (lane == 0) excl = ScOp<T, PROD>::id();
    if (lane == 31) warp_tot[warp] = v;
    __syncthreads();
    A before = ScOp<T, PROD>::id();
    total = ScOp<T, PROD>::id();
#pragma unroll
    for (int w = 0; w < SC_WARPS; ++w) {
        const A t = warp_tot[w];
        if (w < warp) before = ScOp<T, PROD>::f(before, t);
        total = ScOp<T, PROD>::f(total, t);
    }
    __syncthreads();
    return ScOp<T, PROD>::f(before, excl);
}

// Block b scans chunk b % chunks of row b / chunks, starting from carry[b] (when `carry` is
// not null).
template <typename T, bool PROD>
__device__ __forceinline__ void rows_impl(const T *in, typename Sc<T>::O *out, const typename Sc<T>::A *carry,
                                          uint64_t r, uint64_t chunks, uint64_t chunk) {
    typedef typename Sc<T>::A A;
    __shared__ A tile[SC_PAD(SC_TILE)];
    __shared__ A warp_tot[SC_WARPS];
    const uint64_t row = blockIdx.x / chunks, part = blockIdx.x % chunks;
    const uint64_t begin = part * chunk;
    const uint64_t end = min(r, begin + chunk);
    const T *p = in + row * r;
    typename Sc<T>::O *q = out + row * r;
    A run = carry ? carry[blockIdx.x] : ScOp<T, PROD>::id();
    for (uint64_t base = begin; base < end; base += SC_TILE) {
        const uint64_t n = min((uint64_t)SC_TILE, end - base);
#pragma unroll
        for (int k = 0; k < SC_ITEMS; ++k) {
            const uint64_t i = (uint64_t)k * SC_THREADS + threadIdx.x;
            tile[SC_PAD(i)] = i < n ? Sc<T>::load(p[base + i]) : ScOp<T, PROD>::id();
        }
        __syncthreads();
        A v[SC_ITEMS];
        A sum = ScOp<T, PROD>::id();
#pragma unroll
        for (int k = 0; k < SC_ITEMS; ++k) {
            sum = ScOp<T, PROD>::f(sum, tile[SC_PAD(threadIdx.x * SC_ITEMS + k)]);
            v[k] = sum;
        }
        A total;
        const A offset = ScOp<T, PROD>::f(run, block_scan<T, PROD>(sum, warp_tot, total));
#pragma unroll
        for (int k = 0; k < SC_ITEMS; ++k) tile[SC_PAD(threadIdx.x * SC_ITEMS + k)] = ScOp<T, PROD>::f(offset, v[k]);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < SC_ITEMS; ++k) {
            const uint64_t i = (uint64_t)k * SC_THREADS + threadIdx.x;
            if (i < n) q[base + i] = Sc<T>::store(tile[SC_PAD(i)]);
        }
        run = ScOp<T, PROD>::f(run, total);
        __syncthreads();
    }
}

// The sum of each chunk (block b: chunk b % chunks of row b / chunks), in the accumulator type.
template <typename T, bool PROD>
__device__ __forceinline__ void sums_impl(const T *in, typename Sc<T>::A *sums, uint64_t r, uint64_t chunks,
                                          uint64_t chunk) {
    typedef typename Sc<T>::A A;
    __shared__ A warp_tot[SC_WARPS];
    const uint64_t row = blockIdx.x / chunks, part = blockIdx.x % chunks;
    const uint64_t begin = part * chunk;
    const uint64_t end = min(r, begin + chunk);
    const T *p = in + row * r;
    A s = ScOp<T, PROD>::id();
    for (uint64_t i = begin + threadIdx.x; i < end; i += SC_THREADS) s = ScOp<T, PROD>::f(s, Sc<T>::load(p[i]));
    A total;
    block_scan<T, PROD>(s, warp_tot, total);
    if (threadIdx.x == 0) sums[blockIdx.x] = total;
}

// Each row's chunk sums become exclusive prefix sums (block b: row b, SC_THREADS sums at a
// time, each round's block scan starting from the rounds before).
template <typename T, bool PROD>
__device__ __forceinline__ void carry_impl(typename Sc<T>::A *sums, uint64_t outer, uint64_t chunks) {
    typedef typename Sc<T>::A A;
    __shared__ A warp_tot[SC_WARPS];
    const uint64_t row = blockIdx.x;
    if (row >= outer) return;
    A run = ScOp<T, PROD>::id();
    for (uint64_t base = 0; base < chunks; base += SC_THREADS) {
        const uint64_t c = base + threadIdx.x;
        A *at = sums + row * chunks + c;
        A total;
        const A before = block_scan<T, PROD>(c < chunks ? *at : ScOp<T, PROD>::id(), warp_tot, total);
        if (c < chunks) *at = ScOp<T, PROD>::f(run, before);
        run = ScOp<T, PROD>::f(run, total);
    }
}

// inner > 1: thread t scans column t % inner of line t / inner.
template <typename T, bool PROD>
__device__ __forceinline__ void cols_impl(const T *in, typename Sc<T>::O *out, uint64_t outer, uint64_t r,
                                          uint64_t inner) {
    typedef typename Sc<T>::A A;
    const uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= outer * inner) return;
    const uint64_t o = t / inner, c = t % inner;
    const T *p = in + o * r * inner + c;
    typename Sc<T>::O *q = out + o * r * inner + c;
    A run = ScOp<T, PROD>::id();
#pragma unroll 4
    for (uint64_t k = 0; k < r; ++k) {
        run = ScOp<T, PROD>::f(run, Sc<T>::load(p[k * inner]));
        q[k * inner] = Sc<T>::store(run);
    }
}

#define SC_KERNELS(PREFIX, PROD, NAME, T)                                                                \
    extern "C" __global__ void __launch_bounds__(SC_THREADS)                                             \
        PREFIX##_rows_##NAME(const T *in, Sc<T>::O *out, const Sc<T>::A *carry, uint64_t r, uint64_t chunks, \
                             uint64_t chunk) {                                                          \
        rows_impl<T, PROD>(in, out, carry, r, chunks, chunk);                                           \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(SC_THREADS)                                             \
        PREFIX##_sums_##NAME(const T *in, Sc<T>::A *sums, uint64_t r, uint64_t chunks, uint64_t chunk) { \
        sums_impl<T, PROD>(in, sums, r, chunks, chunk);                                                 \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(SC_THREADS)                                             \
        PREFIX##_carry_##NAME(Sc<T>::A *sums, uint64_t outer, uint64_t chunks) {                         \
        carry_impl<T, PROD>(sums, outer, chunks);                                                       \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(SC_THREADS)                                             \
        PREFIX##_cols_##NAME(const T *in, Sc<T>::O *out, uint64_t outer, uint64_t r, uint64_t inner) {   \
        cols_impl<T, PROD>(in, out, outer, r, inner);                                                   \
    }
#define SC_BOTH(NAME, T)                                                                                 \
    SC_KERNELS(scan, false, NAME, T)                                                                     \
    SC_KERNELS(cumprod, true, NAME, T)

SC_BOTH(f64, double)
SC_BOTH(f32, float)
SC_BOTH(f16, __half)
SC_BOTH(bf16, __nv_bfloat16)
SC_BOTH(i32, int32_t)
SC_BOTH(i64, int64_t)
