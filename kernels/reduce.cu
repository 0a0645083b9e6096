// Reduction kernels of Genesis: sum (and mean), prod, max, min, argmax, argmin over one axis of
// a contiguous array seen as [outer, r, inner], for f64, f32, f16, bf16, i32, i64; any and all of
// bool bytes (`_b8`); and the variance (`var_*`, with PyTorch's correction; std is its root)
// of the floating types.
//
// Built by `cargo xtask build-kernels` into crates/genesis-kernels/images/reduce.fatbin. The
// CPU twin is crates/genesis-kernels/src/reduce.rs.
//
// Accumulation: f64 in f64, the other floating types in f32 (f16/bf16 widened exactly), integers
// in i64 (sums and products wrap; the sum and product of i32 are i64). any/all read a byte as
// true when it is not zero and write 0 or 1; any of nothing is false, all of nothing true.
// max/min propagate NaN; argmax/argmin return the index of the first maximum (minimum), a NaN
// counting as larger (smaller) than everything, so the first NaN wins: PyTorch's rules. The
// combine step of max/min/argmax/argmin is associative and commutative (ties broken by the
// smaller index), so those results do not depend on the launch shape and equal the CPU twin
// (a NaN maximum of f32/f16/bf16 is the canonical NaN: `max.NaN` does not keep payloads; -0.0 and
// +0.0 are equal values and either may be returned); sums are computed in a different order
// than the twin's and agree within rounding.
//
// Speed: float max/min are one `max.NaN`/`min.NaN` instruction (sm_80+), and each thread keeps
// several independent accumulators, so the dependent chain per element is one instruction
// long and the loads stay in flight. The arg ops accumulate with `step`, which relies on the
// indices a thread sees only growing: a strictly better value (or the first NaN) takes the
// place, so no index comparison is needed.
//
// Two passes (see src/reduce.rs for the launch plan):
//   1. `reduce_rows_*` (inner == 1) or `reduce_cols_*` (inner > 1) reduce `splits` chunks of
//      each reduced line into partial states [outer, splits, inner] (values in the accumulator
//      type, indices in i64 for the arg ops);
//   2. `reduce_final_*` combines the splits of each output and writes it in the output type
//      (sum of integers: i64; mean: sum / r).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "pdl.cuh"

#define RD_THREADS 256
#define RD_WARPS (RD_THREADS / 32)
#define RD_UNROLL 4
#define RD_COLS_X 32
#define RD_COLS_Y 8
// Threads an output of the final pass (not in warp mode) combines its splits with.
#define RD_FINAL_Y (RD_THREADS / 32)

typedef long long i64;

template <typename T> struct Tr;
template <> struct Tr<double> {
    typedef double A;
    static __device__ __forceinline__ double load(double x) { return x; }
    static __device__ __forceinline__ double store(double a) { return a; }
};
template <> struct Tr<float> {
    typedef float A;
    static __device__ __forceinline__ float load(float x) { return x; }
    static __device__ __forceinline__ float store(float a) { return a; }
};
template <> struct Tr<__half> {
    typedef float A;
    static __device__ __forceinline__ float load(__half x) { return __half2float(x); }
    static __device__ __forceinline__ __half store(float a) { return __float2half_rn(a); }
};
template <> struct Tr<__nv_bfloat16> {
    typedef float A;
    static __device__ __forceinline__ float load(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __device__ __forceinline__ __nv_bfloat16 store(float a) { return __float2bfloat16_rn(a); }
};
template <> struct Tr<int32_t> {
    typedef i64 A;
    static __device__ __forceinline__ i64 load(int32_t x) { return x; }
    static __device__ __forceinline__ int32_t store(i64 a) { return (int32_t)a; }
};
template <> struct Tr<int64_t> {
    typedef i64 A;
    static __device__ __forceinline__ i64 load(int64_t x) { return x; }
    static __device__ __forceinline__ int64_t store(i64 a) { return a; }
};
// Bool bytes: any byte but 0 is true.
template <> struct Tr<uint8_t> {
    typedef i64 A;
    static __device__ __forceinline__ i64 load(uint8_t x) { return x != 0; }
    static __device__ __forceinline__ uint8_t store(i64 a) { return a != 0; }
};

// The first pass lets the final pass be scheduled while it runs (`pdl_trigger`); the final
// pass waits for it (`pdl_wait`) before reading the partial states (pdl.cuh).

template <typename A> struct St {
    A v;
    i64 i;
};

__device__ __forceinline__ bool isnan_(float x) { return x != x; }
__device__ __forceinline__ bool isnan_(double x) { return x != x; }
__device__ __forceinline__ double lowest(double) { return -__longlong_as_double(0x7ff0000000000000LL); }
__device__ __forceinline__ double highest(double) { return __longlong_as_double(0x7ff0000000000000LL); }
__device__ __forceinline__ double add_(double a, double b) { return a + b; }
__device__ __forceinline__ double mul_(double a, double b) { return a * b; }
// NaN-propagating max/min of f64 (PTX has no max.NaN.f64): a NaN operand is returned as is.
__device__ __forceinline__ double max_(double a, double b) { return a != a ? a : (b != b ? b : fmax(a, b)); }
__device__ __forceinline__ double min_(double a, double b) { return a != a ? a : (b != b ? b : fmin(a, b)); }
__device__ __forceinline__ bool isnan_(i64) { return false; }
__device__ __forceinline__ float lowest(float) { return -__int_as_float(0x7f800000); }
__device__ __forceinline__ float highest(float) { return __int_as_float(0x7f800000); }
__device__ __forceinline__ i64 lowest(i64) { return (i64)(-9223372036854775807LL - 1); }
__device__ __forceinline__ i64 highest(i64) { return 9223372036854775807LL; }
__device__ __forceinline__ float add_(float a, float b) { return a + b; }
// NaN-propagating max/min: one instruction on sm_80+.
__device__ __forceinline__ float max_(float a, float b) {
    float d;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}
__device__ __forceinline__ float min_(float a, float b) {
    float d;
    asm("min.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}
__device__ __forceinline__ i64 max_(i64 a, i64 b) { return a > b ? a : b; }
__device__ __forceinline__ i64 min_(i64 a, i64 b) { return a < b ? a : b; }
__device__ __forceinline__ i64 add_(i64 a, i64 b) { return (i64)((unsigned long long)a + (unsigned long long)b); }
__device__ __forceinline__ float mul_(float a, float b) { return a * b; }
__device__ __forceinline__ i64 mul_(i64 a, i64 b) { return (i64)((unsigned long long)a * (unsigned long long)b); }

// Each op has `combine` (any two states) and `step` (a state and the value at index k, where
// k is larger than every index the state has seen and the state is not the identity).
struct RSum {
    static const bool IDX = false;
    template <typename A> static __device__ __forceinline__ St<A> id() { return St<A>{(A)0, 0}; }
    template <typename A> static __device__ __forceinline__ St<A> combine(St<A> a, St<A> b) {
        return St<A>{add_(a.v, b.v), 0};
    }
    template <typename A> static __device__ __forceinline__ St<A> step(St<A> s, A x, i64) {
        return St<A>{add_(s.v, x), 0};
    }
    template <typename A> static __device__ __forceinline__ bool take(A, A) { return false; }
};
struct RProd {
    static const bool IDX = false;
    template <typename A> static __device__ __forceinline__ St<A> id() { return St<A>{(A)1, 0}; }
    template <typename A> static __device__ __forceinline__ St<A> combine(St<A> a, St<A> b) {
        return St<A>{mul_(a.v, b.v), 0};
    }
    template <typename A> static __device__ __forceinline__ St<A> step(St<A> s, A x, i64) {
        return St<A>{mul_(s.v, x), 0};
    }
    template <typename A> static __device__ __forceinline__ bool take(A, A) { return false; }
};
// any/all of values already 0 or 1 (Tr<uint8_t>::load): the maximum and minimum, with the
// identities 0 and 1.
struct RAny {
    static const bool IDX = false;
    template <typename A> static __device__ __forceinline__ St<A> id() { return St<A>{(A)0, 0}; }
    template <typename A> static __device__ __forceinline__ St<A> combine(St<A> a, St<A> b) {
        return St<A>{max_(a.v, b.v), 0};
    }
    template <typename A> static __device__ __forceinline__ St<A> step(St<A> s, A x, i64) {
        return St<A>{max_(s.v, x), 0};
    }
    template <typename A> static __device__ __forceinline__ bool take(A, A) { return false; }
};
struct RAll {
    static const bool IDX = false;
    template <typename A> static __device__ __forceinline__ St<A> id() { return St<A>{(A)1, 0}; }
    template <typename A> static __device__ __forceinline__ St<A> combine(St<A> a, St<A> b) {
        return St<A>{min_(a.v, b.v), 0};
    }
    template <typename A> static __device__ __forceinline__ St<A> step(St<A> s, A x, i64) {
        return St<A>{min_(s.v, x), 0};
    }
    template <typename A> static __device__ __forceinline__ bool take(A, A) { return false; }
};
struct RMax {
    static const bool IDX = false;
    template <typename A> static __device__ __forceinline__ St<A> id() { return St<A>{lowest(A()), 0}; }
    template <typename A> static __device__ __forceinline__ St<A> combine(St<A> a, St<A> b) {
        return St<A>{max_(a.v, b.v), 0};
    }
    template <typename A> static __device__ __forceinline__ St<A> step(St<A> s, A x, i64) {
        return St<A>{max_(s.v, x), 0};
    }
    template <typename A> static __device__ __forceinline__ bool take(A, A) { return false; }
};
struct RMin {
    static const bool IDX = false;
    template <typename A> static __device__ __forceinline__ St<A> id() { return St<A>{highest(A()), 0}; }
    template <typename A> static __device__ __forceinline__ St<A> combine(St<A> a, St<A> b) {
        return St<A>{min_(a.v, b.v), 0};
    }
    template <typename A> static __device__ __forceinline__ St<A> step(St<A> s, A x, i64) {
        return St<A>{min_(s.v, x), 0};
    }
    template <typename A> static __device__ __forceinline__ bool take(A, A) { return false; }
};
// The arg ops: the better value wins, NaN beating everything; equal values (or two NaNs): the
// smaller index.
struct RArgMax {
    static const bool IDX = true;
    template <typename A> static __device__ __forceinline__ St<A> id() {
        return St<A>{lowest(A()), highest(i64())};
    }
    template <typename A> static __device__ __forceinline__ St<A> combine(St<A> a, St<A> b) {
        bool an = isnan_(a.v), bn = isnan_(b.v);
        if (an || bn) return (an && bn) ? (a.i <= b.i ? a : b) : (an ? a : b);
        if (a.v != b.v) return a.v > b.v ? a : b;
        return a.i <= b.i ? a : b;
    }
    // Later index: only a strictly larger value, or a NaN over a number, takes the place.
    template <typename A> static __device__ __forceinline__ bool take(A x, A cur) {
        return !(x <= cur) && !isnan_(cur);
    }
    template <typename A> static __device__ __forceinline__ St<A> step(St<A> s, A x, i64 k) {
        return take(x, s.v) ? St<A>{x, k} : s;
    }
};
struct RArgMin {
    static const bool IDX = true;
    template <typename A> static __device__ __forceinline__ St<A> id() {
        return St<A>{highest(A()), highest(i64())};
    }
    template <typename A> static __device__ __forceinline__ St<A> combine(St<A> a, St<A> b) {
        bool an = isnan_(a.v), bn = isnan_(b.v);
        if (an || bn) return (an && bn) ? (a.i <= b.i ? a : b) : (an ? a : b);
        if (a.v != b.v) return a.v < b.v ? a : b;
        return a.i <= b.i ? a : b;
    }
    template <typename A> static __device__ __forceinline__ bool take(A x, A cur) {
        return !(x >= cur) && !isnan_(cur);
    }
    template <typename A> static __device__ __forceinline__ St<A> step(St<A> s, A x, i64 k) {
        return take(x, s.v) ? St<A>{x, k} : s;
    }
};

template <typename Op, typename A> __device__ __forceinline__ St<A> warp_reduce(St<A> s) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) {
        St<A> o;
        o.v = __shfl_down_sync(0xffffffffu, s.v, d);
        o.i = __shfl_down_sync(0xffffffffu, s.i, d);
        s = Op::combine(s, o);
    }
    return s;
}

template <typename Op, typename A> __device__ __forceinline__ St<A> block_reduce(St<A> s) {
    __shared__ A sv[RD_WARPS];
    __shared__ i64 si[RD_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    s = warp_reduce<Op, A>(s);
    if (lane == 0) {
        sv[warp] = s.v;
        si[warp] = s.i;
    }
    __syncthreads();
    if (warp == 0) {
        s = lane < RD_WARPS ? St<A>{sv[lane], si[lane]} : Op::template id<A>();
        s = warp_reduce<Op, A>(s);
    }
    return s;
}

template <typename T> union Vec16 {
    uint4 raw;
    T v[16 / sizeof(T)];
};

// inner == 1. Block mode (warp_mode == 0): block b reduces chunk b % splits of row b / splits.
// Warp mode (warp_mode == 1, splits == 1, short rows): each warp reduces one row. Thread mode
// (warp_mode == 2, splits == 1, rows of a few elements, which would leave most of a warp's lanes
// idle): each thread reduces one row in order. vec_ok: every chunk starts 16-byte aligned.
template <typename Op, typename T>
__device__ __forceinline__ void rows_impl(const T *in, typename Tr<T>::A *pv, i64 *pi, uint64_t outer,
                                          uint64_t r, uint64_t splits, uint64_t chunk, int vec_ok,
                                          int warp_mode) {
    typedef typename Tr<T>::A A;
    if (warp_mode == 2) {
        const uint64_t row = (uint64_t)blockIdx.x * RD_THREADS + threadIdx.x;
        if (row >= outer) return;
        const T *p = in + row * r;
        St<A> s = Op::template id<A>();
        for (uint64_t k = 0; k < r; ++k) s = Op::combine(s, St<A>{Tr<T>::load(p[k]), (i64)k});
        pv[row] = s.v;
        if (Op::IDX) pi[row] = s.i;
        return;
    }
    if (warp_mode) {
        const uint64_t row = (uint64_t)blockIdx.x * RD_WARPS + (threadIdx.x >> 5);
        if (row >= outer) return;
        const int lane = threadIdx.x & 31;
        const T *p = in + row * r;
        St<A> s = Op::template id<A>();
        for (uint64_t k = lane; k < r; k += 32) s = Op::combine(s, St<A>{Tr<T>::load(p[k]), (i64)k});
        s = warp_reduce<Op, A>(s);
        if (lane == 0) {
            pv[row] = s.v;
            if (Op::IDX) pi[row] = s.i;
        }
        return;
    }
    const uint64_t row = blockIdx.x / splits, part = blockIdx.x % splits;
    const uint64_t begin = part * chunk;
    const uint64_t end = min(r, begin + chunk);
    const T *p = in + row * r;
    // One accumulator per unrolled load: RD_UNROLL independent chains.
    St<A> acc[RD_UNROLL];
#pragma unroll
    for (int u = 0; u < RD_UNROLL; ++u) acc[u] = Op::template id<A>();
    uint64_t k0 = begin;
    if (vec_ok && begin < end) {
        constexpr int V = 16 / sizeof(T);
        const uint64_t nvec = (end - begin) / V;
        const uint4 *p4 = reinterpret_cast<const uint4 *>(p + begin);
        uint64_t j = threadIdx.x;
        for (; j + (RD_UNROLL - 1) * RD_THREADS < nvec; j += RD_UNROLL * RD_THREADS) {
            Vec16<T> x[RD_UNROLL];
#pragma unroll
            for (int u = 0; u < RD_UNROLL; ++u) x[u].raw = p4[j + u * RD_THREADS];
#pragma unroll
            for (int u = 0; u < RD_UNROLL; ++u)
#pragma unroll
                for (int e = 0; e < V; ++e)
                    acc[u] = Op::combine(acc[u], St<A>{Tr<T>::load(x[u].v[e]), (i64)(begin + (j + u * RD_THREADS) * V + e)});
        }
        for (; j < nvec; j += RD_THREADS) {
            Vec16<T> x;
            x.raw = p4[j];
#pragma unroll
            for (int e = 0; e < V; ++e) acc[0] = Op::combine(acc[0], St<A>{Tr<T>::load(x.v[e]), (i64)(begin + j * V + e)});
        }
        k0 = begin + nvec * V;
    }
    for (uint64_t k = k0 + threadIdx.x; k < end; k += RD_THREADS)
        acc[RD_UNROLL - 1] = Op::combine(acc[RD_UNROLL - 1], St<A>{Tr<T>::load(p[k]), (i64)k});
    St<A> s = acc[0];
#pragma unroll
    for (int u = 1; u < RD_UNROLL; ++u) s = Op::combine(s, acc[u]);
    s = block_reduce<Op, A>(s);
    if (threadIdx.x == 0) {
        pv[blockIdx.x] = s.v;
        if (Op::IDX) pi[blockIdx.x] = s.i;
    }
}

// V adjacent values of a row, widened to the accumulator type: one 16-byte load when V > 1.
template <typename T, int V> struct RowVals {
    Vec16<T> x;
    __device__ __forceinline__ explicit RowVals(const T *p) { x.raw = *reinterpret_cast<const uint4 *>(p); }
    __device__ __forceinline__ typename Tr<T>::A get(int e) const { return Tr<T>::load(x.v[e]); }
};
template <typename T> struct RowVals<T, 1> {
    T x;
    __device__ __forceinline__ explicit RowVals(const T *p) : x(*p) {}
    __device__ __forceinline__ typename Tr<T>::A get(int) const { return Tr<T>::load(x); }
};

// inner > 1. Blocks of 32 x 8 threads: x over columns (coalesced), y over the chunk's rows;
// grid (column tiles, outer (strided), splits). Each thread owns V adjacent columns: with
// V = 16 / sizeof(T) it reads them with one 16-byte load (the host passes vec_ok only when
// inner % V == 0 and the input is 16-byte aligned).
template <typename Op, typename T, int V>
__device__ __forceinline__ void cols_v(const T *in, typename Tr<T>::A *pv, i64 *pi, uint64_t outer, uint64_t r,
                                       uint64_t inner, uint64_t splits, uint64_t chunk) {
    typedef typename Tr<T>::A A;
    __shared__ A sv[RD_COLS_Y][RD_COLS_X * V];
    __shared__ i64 si[Op::IDX ? RD_COLS_Y : 1][Op::IDX ? RD_COLS_X * V : 1];
    const uint64_t c0 = ((uint64_t)blockIdx.x * RD_COLS_X + threadIdx.x) * V;
    const uint64_t part = blockIdx.z;
    const uint64_t begin = part * chunk;
    const uint64_t end = min(r, begin + chunk);
    for (uint64_t o = blockIdx.y; o < outer; o += gridDim.y) {
        St<A> s[V];
#pragma unroll
        for (int e = 0; e < V; ++e) s[e] = Op::template id<A>();
        uint64_t k = begin + threadIdx.y;
        if (Op::IDX && c0 < inner && k < end) {
            // The arg ops keep values and 32-bit row offsets from the thread's first row (the
            // plan keeps chunks below 2^31 rows): fewer registers and selects than i64 states.
            const T *p = in + o * r * inner + c0;
            A bv[V];
            uint32_t bi[V];
            const uint64_t k0 = k;
            {
                const RowVals<T, V> x(p + k * inner);
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    bv[e] = x.get(e);
                    bi[e] = 0;
                }
            }
            uint32_t rel = RD_COLS_Y;
#pragma unroll 4
            for (k += RD_COLS_Y; k < end; k += RD_COLS_Y, rel += RD_COLS_Y) {
                const RowVals<T, V> x(p + k * inner);
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    const A v = x.get(e);
                    const bool t = Op::take(v, bv[e]);
                    bv[e] = t ? v : bv[e];
                    bi[e] = t ? rel : bi[e];
                }
            }
#pragma unroll
            for (int e = 0; e < V; ++e) s[e] = St<A>{bv[e], (i64)(k0 + bi[e])};
        } else if (c0 < inner && k < end) {
            // The first row sets the state (no identity in `step`), then rows in order.
            const T *p = in + o * r * inner + c0;
            if (V > 1) {
                Vec16<T> x;
                x.raw = *reinterpret_cast<const uint4 *>(p + k * inner);
#pragma unroll
                for (int e = 0; e < V; ++e) s[e] = St<A>{Tr<T>::load(x.v[e % (16 / sizeof(T))]), (i64)k};
#pragma unroll 4
                for (k += RD_COLS_Y; k < end; k += RD_COLS_Y) {
                    x.raw = *reinterpret_cast<const uint4 *>(p + k * inner);
#pragma unroll
                    for (int e = 0; e < V; ++e) s[e] = Op::step(s[e], Tr<T>::load(x.v[e % (16 / sizeof(T))]), (i64)k);
                }
            } else {
                s[0] = St<A>{Tr<T>::load(p[k * inner]), (i64)k};
                for (k += RD_COLS_Y; k < end; k += RD_COLS_Y)
                    s[0] = Op::step(s[0], Tr<T>::load(p[k * inner]), (i64)k);
            }
        }
#pragma unroll
        for (int e = 0; e < V; ++e) {
            sv[threadIdx.y][threadIdx.x * V + e] = s[e].v;
            if (Op::IDX) si[threadIdx.y][threadIdx.x * V + e] = s[e].i;
        }
        __syncthreads();
        if (threadIdx.y == 0) {
#pragma unroll
            for (int e = 0; e < V; ++e) {
                St<A> t = s[e];
                const int col = threadIdx.x * V + e;
#pragma unroll 1
                for (int y = 1; y < RD_COLS_Y; ++y)
                    t = Op::combine(t, St<A>{sv[y][col], Op::IDX ? si[y][col] : 0});
                if (c0 + e < inner) {
                    const uint64_t at = (o * splits + part) * inner + c0 + e;
                    pv[at] = t.v;
                    if (Op::IDX) pi[at] = t.i;
                }
            }
        }
        __syncthreads();
    }
}

template <typename Op, typename T>
__device__ __forceinline__ void cols_impl(const T *in, typename Tr<T>::A *pv, i64 *pi, uint64_t outer,
                                          uint64_t r, uint64_t inner, uint64_t splits, uint64_t chunk,
                                          int vec_ok) {
    if (vec_ok)
        cols_v<Op, T, 16 / sizeof(T)>(in, pv, pi, outer, r, inner, splits, chunk);
    else
        cols_v<Op, T, 1>(in, pv, pi, outer, r, inner, splits, chunk);
}

template <typename Op, typename T> struct OutOf { typedef T O; };
template <> struct OutOf<RSum, int32_t> { typedef int64_t O; };
template <> struct OutOf<RProd, int32_t> { typedef int64_t O; };
template <typename T> __device__ __forceinline__ T store_out(typename Tr<T>::A a) { return Tr<T>::store(a); }

// The mean of a sum of r values: in the accumulator's precision (f32 or f64).
// The value an output takes from its combined state: a sum gets +0.0 added, so that a sum of
// -0.0s, or of nothing, is +0.0 (PyTorch's sum starts from +0.0; the first element seeds the
// state here). Other ops keep the state's value.
template <typename Op> struct Fin {
    template <typename A> static __device__ __forceinline__ A go(A v) { return v; }
};
template <> struct Fin<RSum> {
    template <typename A> static __device__ __forceinline__ A go(A v) { return add_(v, (A)0); }
};

__device__ __forceinline__ float mean_of(float v, uint64_t r) { return v / (float)r; }
__device__ __forceinline__ double mean_of(double v, uint64_t r) { return v / (double)r; }
__device__ __forceinline__ i64 mean_of(i64 v, uint64_t r) { return (i64)((float)v / (float)r); }

// Output t = (o, c) combines partials (o, 0..splits, c). warp_mode: a warp per output (many
// splits, inner == 1), else a thread per output. mean: the value is divided by r.
template <typename Op, typename T>
__device__ __forceinline__ void final_impl(const typename Tr<T>::A *pv, const i64 *pi,
                                           typename OutOf<Op, T>::O *out, i64 *out_idx, uint64_t outer,
                                           uint64_t splits, uint64_t inner, uint64_t r, int mean,
                                           int warp_mode) {
    typedef typename Tr<T>::A A;
    typedef typename OutOf<Op, T>::O O;
    pdl_wait();
    const uint64_t total = outer * inner;
    uint64_t t;
    St<A> s = Op::template id<A>();
    if (warp_mode) {
        t = (uint64_t)blockIdx.x * RD_WARPS + (threadIdx.x >> 5);
        if (t >= total) return;
        const int lane = threadIdx.x & 31;
        for (uint64_t p = lane; p < splits; p += 32)
            s = Op::combine(s, St<A>{pv[t * splits + p], Op::IDX ? pi[t * splits + p] : 0});
        s = warp_reduce<Op, A>(s);
        if (lane != 0) return;
    } else {
        // 32 outputs a block (consecutive: a row of partials' columns read together), 8
        // threads each: thread y combines splits y, y + 8, ... in order, then the 8 states in
        // order of y. Eight lines of loads in flight per output, not one: a column reduction's
        // few outputs (768 columns) would otherwise be 3 blocks walking every split.
        __shared__ A fv[RD_FINAL_Y][33];
        __shared__ i64 fi[Op::IDX ? RD_FINAL_Y : 1][33];
        const int x = threadIdx.x & 31, y = threadIdx.x >> 5;
        t = (uint64_t)blockIdx.x * 32 + x;
        if (t < total) {
            const uint64_t o = t / inner, c = t % inner;
#pragma unroll 4
            for (uint64_t p = y; p < splits; p += RD_FINAL_Y) {
                const uint64_t at = (o * splits + p) * inner + c;
                s = Op::combine(s, St<A>{pv[at], Op::IDX ? pi[at] : 0});
            }
        }
        fv[y][x] = s.v;
        if (Op::IDX) fi[y][x] = s.i;
        __syncthreads();
        if (y != 0 || t >= total) return;
        for (int k = 1; k < RD_FINAL_Y; ++k) s = Op::combine(s, St<A>{fv[k][x], Op::IDX ? fi[k][x] : 0});
    }
    A v = Fin<Op>::go(s.v);
    if (mean) v = mean_of(v, r);
    if (out) out[t] = (O)Tr<O>::store((typename Tr<O>::A)v);
    if (Op::IDX && out_idx) out_idx[t] = s.i;
}

#define RD_KERNELS(OPNAME, OP, NAME, T)                                                                  \
    extern "C" __global__ void __launch_bounds__(RD_THREADS)                                              \
        reduce_rows_##OPNAME##_##NAME(const T *in, Tr<T>::A *pv, i64 *pi, uint64_t outer, uint64_t r,    \
                                      uint64_t splits, uint64_t chunk, int vec_ok, int warp_mode) {      \
        pdl_trigger();                                                                                    \
        rows_impl<OP, T>(in, pv, pi, outer, r, splits, chunk, vec_ok, warp_mode);                        \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(RD_COLS_X * RD_COLS_Y)                                   \
        reduce_cols_##OPNAME##_##NAME(const T *in, Tr<T>::A *pv, i64 *pi, uint64_t outer, uint64_t r,    \
                                      uint64_t inner, uint64_t splits, uint64_t chunk, int vec_ok) {     \
        pdl_trigger();                                                                                    \
        cols_impl<OP, T>(in, pv, pi, outer, r, inner, splits, chunk, vec_ok);                            \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(RD_THREADS) reduce_final_##OPNAME##_##NAME(              \
        const Tr<T>::A *pv, const i64 *pi, OutOf<OP, T>::O *out, i64 *out_idx, uint64_t outer,           \
        uint64_t splits, uint64_t inner, uint64_t r, int mean, int warp_mode) {                          \
        final_impl<OP, T>(pv, pi, out, out_idx, outer, splits, inner, r, mean, warp_mode);               \
    }

#define RD_ALL(NAME, T)                                                                                  \
    RD_KERNELS(sum, RSum, NAME, T)                                                                        \
    RD_KERNELS(prod, RProd, NAME, T)                                                                      \
    RD_KERNELS(max, RMax, NAME, T)                                                                        \
    RD_KERNELS(min, RMin, NAME, T)                                                                        \
    RD_KERNELS(argmax, RArgMax, NAME, T)                                                                  \
    RD_KERNELS(argmin, RArgMin, NAME, T)

RD_ALL(f64, double)
RD_ALL(f32, float)
RD_ALL(f16, __half)
RD_ALL(bf16, __nv_bfloat16)
RD_ALL(i32, int32_t)
RD_ALL(i64, int64_t)

RD_KERNELS(any, RAny, b8, uint8_t)
RD_KERNELS(all, RAll, b8, uint8_t)

// ---------------------------------------------------------------------------------------------
// Variance over the same [outer, r, inner] view and split plan (f64, f32, f16, bf16). Each
// reduced line is shifted by its first element K, and the partial states are (sum, sum of
// squares) of x - K in f64, the values widened exactly. The final pass combines the splits of
// each output and gives (Q - S^2 / n) / max(0, n - correction), clamped at 0 (NaN kept: a
// line holding a NaN or an infinity gives NaN, as PyTorch), and its square
// root for std, rounded once to the output type. With the shift and f64 sums the cancellation
// costs about 2^-53 * (1 + ((K - mean) / std)^2) relative: far below the rounding of f32 for
// any line whose first element lies within 10^6 standard deviations of its mean; an f64 result
// carries the rounding of the f64 sums themselves (in another order than the CPU twin's). n = 0
// gives NaN; n <= correction gives NaN or inf (a division by zero), as PyTorch.
template <typename T>
__device__ __forceinline__ void var_block_reduce(double &s, double &q) {
    __shared__ double ss[RD_WARPS], sq[RD_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) {
        s += __shfl_down_sync(0xffffffffu, s, d);
        q += __shfl_down_sync(0xffffffffu, q, d);
    }
    if (lane == 0) {
        ss[warp] = s;
        sq[warp] = q;
    }
    __syncthreads();
    if (warp == 0) {
        s = lane < RD_WARPS ? ss[lane] : 0.0;
        q = lane < RD_WARPS ? sq[lane] : 0.0;
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) {
            s += __shfl_down_sync(0xffffffffu, s, d);
            q += __shfl_down_sync(0xffffffffu, q, d);
        }
    }
}

__device__ __forceinline__ void var_acc(double &s, double &q, double x, double k) {
    const double d = (double)x - k;
    s += d;
    q = fma(d, d, q);
}

// inner == 1: as rows_impl (block mode: block b does chunk b % splits of row b / splits; warp
// mode: a warp a row).
template <typename T>
__device__ __forceinline__ void var_rows_impl(const T *in, double2 *part, uint64_t outer, uint64_t r,
                                              uint64_t splits, uint64_t chunk, int vec_ok, int warp_mode) {
    if (warp_mode) {
        const uint64_t row = (uint64_t)blockIdx.x * RD_WARPS + (threadIdx.x >> 5);
        if (row >= outer) return;
        const int lane = threadIdx.x & 31;
        const T *p = in + row * r;
        const double k = Tr<T>::load(p[0]);
        double s = 0.0, q = 0.0;
        for (uint64_t j = lane; j < r; j += 32) var_acc(s, q, Tr<T>::load(p[j]), k);
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) {
            s += __shfl_down_sync(0xffffffffu, s, d);
            q += __shfl_down_sync(0xffffffffu, q, d);
        }
        if (lane == 0) part[row] = make_double2(s, q);
        return;
    }
    const uint64_t row = blockIdx.x / splits, piece = blockIdx.x % splits;
    const uint64_t begin = piece * chunk;
    const uint64_t end = min(r, begin + chunk);
    const T *p = in + row * r;
    const double k = Tr<T>::load(p[0]);
    double s[RD_UNROLL], q[RD_UNROLL];
#pragma unroll
    for (int u = 0; u < RD_UNROLL; ++u) s[u] = q[u] = 0.0;
    uint64_t k0 = begin;
    if (vec_ok && begin < end) {
        constexpr int V = 16 / sizeof(T);
        const uint64_t nvec = (end - begin) / V;
        const uint4 *p4 = reinterpret_cast<const uint4 *>(p + begin);
        uint64_t j = threadIdx.x;
        for (; j + (RD_UNROLL - 1) * RD_THREADS < nvec; j += RD_UNROLL * RD_THREADS) {
            Vec16<T> x[RD_UNROLL];
#pragma unroll
            for (int u = 0; u < RD_UNROLL; ++u) x[u].raw = p4[j + u * RD_THREADS];
#pragma unroll
            for (int u = 0; u < RD_UNROLL; ++u)
#pragma unroll
                for (int e = 0; e < V; ++e) var_acc(s[u], q[u], Tr<T>::load(x[u].v[e]), k);
        }
        for (; j < nvec; j += RD_THREADS) {
            Vec16<T> x;
            x.raw = p4[j];
#pragma unroll
            for (int e = 0; e < V; ++e) var_acc(s[0], q[0], Tr<T>::load(x.v[e]), k);
        }
        k0 = begin + nvec * V;
    }
    for (uint64_t j = k0 + threadIdx.x; j < end; j += RD_THREADS)
        var_acc(s[RD_UNROLL - 1], q[RD_UNROLL - 1], Tr<T>::load(p[j]), k);
#pragma unroll
    for (int u = 1; u < RD_UNROLL; ++u) {
        s[0] += s[u];
        q[0] += q[u];
    }
    var_block_reduce<T>(s[0], q[0]);
    if (threadIdx.x == 0) part[blockIdx.x] = make_double2(s[0], q[0]);
}

// inner > 1: blocks of 32 x 8 threads, x over columns, y over the chunk's rows; grid (column
// tiles, outer (strided), splits). A column's shift is its value in the line's first row. Each
// thread owns V adjacent columns, read with one 16-byte load a row when V = 16 / sizeof(T) (the
// host passes vec_ok only when inner % V == 0 and the input is 16-byte aligned), as `cols_v`.
template <typename T, int V>
__device__ __forceinline__ void var_cols_v(const T *in, double2 *part, uint64_t outer, uint64_t r,
                                           uint64_t inner, uint64_t splits, uint64_t chunk) {
    __shared__ double ss[RD_COLS_Y][RD_COLS_X * V], sq[RD_COLS_Y][RD_COLS_X * V];
    const uint64_t c0 = ((uint64_t)blockIdx.x * RD_COLS_X + threadIdx.x) * V;
    const uint64_t piece = blockIdx.z;
    const uint64_t begin = piece * chunk;
    const uint64_t end = min(r, begin + chunk);
    for (uint64_t o = blockIdx.y; o < outer; o += gridDim.y) {
        double s[V], q[V];
#pragma unroll
        for (int e = 0; e < V; ++e) s[e] = q[e] = 0.0;
        if (c0 < inner) {
            const T *p = in + o * r * inner + c0;
            double k[V];
            if (V > 1) {
                Vec16<T> x;
                x.raw = *reinterpret_cast<const uint4 *>(p);
#pragma unroll
                for (int e = 0; e < V; ++e) k[e] = Tr<T>::load(x.v[e % (16 / sizeof(T))]);
#pragma unroll 4
                for (uint64_t j = begin + threadIdx.y; j < end; j += RD_COLS_Y) {
                    x.raw = *reinterpret_cast<const uint4 *>(p + j * inner);
#pragma unroll
                    for (int e = 0; e < V; ++e) var_acc(s[e], q[e], Tr<T>::load(x.v[e % (16 / sizeof(T))]), k[e]);
                }
            } else {
                k[0] = Tr<T>::load(p[0]);
#pragma unroll 4
                for (uint64_t j = begin + threadIdx.y; j < end; j += RD_COLS_Y)
                    var_acc(s[0], q[0], Tr<T>::load(p[j * inner]), k[0]);
            }
        }
#pragma unroll
        for (int e = 0; e < V; ++e) {
            ss[threadIdx.y][threadIdx.x * V + e] = s[e];
            sq[threadIdx.y][threadIdx.x * V + e] = q[e];
        }
        __syncthreads();
        if (threadIdx.y == 0) {
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const int col = threadIdx.x * V + e;
                double ts = s[e], tq = q[e];
#pragma unroll
                for (int y = 1; y < RD_COLS_Y; ++y) {
                    ts += ss[y][col];
                    tq += sq[y][col];
                }
                if (c0 + e < inner) part[(o * splits + piece) * inner + c0 + e] = make_double2(ts, tq);
            }
        }
        __syncthreads();
    }
}

template <typename T>
__device__ __forceinline__ void var_final_impl(const double2 *part, T *out, uint64_t outer, uint64_t splits,
                                               uint64_t inner, uint64_t r, double correction, int root) {
    pdl_wait();
    const uint64_t t = (uint64_t)blockIdx.x * RD_THREADS + threadIdx.x;
    if (t >= outer * inner) return;
    const uint64_t o = t / inner, c = t % inner;
    double s = 0.0, q = 0.0;
    for (uint64_t p = 0; p < splits; ++p) {
        const double2 v = part[(o * splits + p) * inner + c];
        s += v.x;
        q += v.y;
    }
    const double n = (double)r;
    // Clamped at 0, NaN kept (fmax would turn the NaN of a line holding a NaN or an infinity
    // into 0).
    double m2 = q - s * (s / n);
    if (m2 < 0.0) m2 = 0.0;
    double v = m2 / fmax(n - correction, 0.0);
    if (r == 0) v = __longlong_as_double(0x7ff8000000000000LL);
    if (root) v = sqrt(v);
    out[t] = Tr<T>::store((typename Tr<T>::A)v);
}

#define VAR_KERNELS(NAME, T)                                                                               \
    extern "C" __global__ void __launch_bounds__(RD_THREADS)                                               \
        var_rows_##NAME(const T *in, double2 *part, uint64_t outer, uint64_t r, uint64_t splits,          \
                        uint64_t chunk, int vec_ok, int warp_mode) {                                      \
        pdl_trigger();                                                                                     \
        var_rows_impl<T>(in, part, outer, r, splits, chunk, vec_ok, warp_mode);                           \
    }                                                                                                      \
    extern "C" __global__ void __launch_bounds__(RD_COLS_X * RD_COLS_Y)                                    \
        var_cols_##NAME(const T *in, double2 *part, uint64_t outer, uint64_t r, uint64_t inner,           \
                        uint64_t splits, uint64_t chunk, int vec_ok) {                                    \
        pdl_trigger();                                                                                     \
        if (vec_ok)                                                                                        \
            var_cols_v<T, 16 / sizeof(T)>(in, part, outer, r, inner, splits, chunk);                      \
        else                                                                                               \
            var_cols_v<T, 1>(in, part, outer, r, inner, splits, chunk);                                    \
    }                                                                                                      \
    extern "C" __global__ void __launch_bounds__(RD_THREADS)                                               \
        var_final_##NAME(const double2 *part, T *out, uint64_t outer, uint64_t splits, uint64_t inner,    \
                         uint64_t r, double correction, int root) {                                       \
        var_final_impl<T>(part, out, outer, splits, inner, r, correction, root);                          \
    }

VAR_KERNELS(f64, double)
VAR_KERNELS(f32, float)
VAR_KERNELS(f16, __half)
VAR_KERNELS(bf16, __nv_bfloat16)
