// Gradient kernels of Genesis for ops whose composed backward would take several passes and
// temporaries: activations (`act_grad_<op>_<T>`: dx = g * f'(x)) and softmax / log_softmax
// along the last dimension (`sm_grad_<T>`). T is f32, f16, bf16 (computed in f32, rounded
// once to T) or f64 (computed in f64).
//
// Built by `cargo xtask build-kernels` into crates/genesis-kernels/images/grad.fatbin. The CPU
// twins are in crates/genesis-kernels/src/grad.rs.
//
// Activations, with f'(x):
//   gelu (erf):  Φ(x) + x φ(x) = 0.5 (1 + erf(x / √2)) + x e^(-x²/2) / √(2π)
//   gelu (tanh): 0.5 (1 + t) + 0.5 x (1 - t²) k (1 + 3 c x²),  t = tanh(k (x + c x³)),
//                k = √(2/π), c = 0.044715; computed as s + 2 x s (1 - s) k (1 + 3 c x²) with
//                s = (1 + t) / 2 = 1 / (1 + e^(-2k (x + c x³))) (see GeluTanh)
//   silu:        s (1 + x (1 - s)),  s = 1 / (1 + e^-x)
// The twin uses Rust's (libm's) erf, tanh and exp: results agree within a few ulp of the
// terms (CUDA's erff, tanhf and expf are within 2 ulp; gelu (tanh) in f32 takes the fast
// exponential, within a few ulp).
//
// Softmax along rows of n (y the forward's output, g the output's gradient):
//   softmax:     dx = y (g - Σ g y)
//   log_softmax: dx = g - e^y Σ g
// A block of 256 threads per row (grid-stride over rows): each thread adds its elements'
// terms (i, i + 256, ...) in order (g y by fused multiply-adds), the block's 256 partial sums
// in a fixed tree (xor-shuffles within each warp, then the 8 warps' sums in order), then each
// thread writes its elements (log_softmax: one fused multiply-add). The twin adds in the same
// order: results agree bit for bit but for e^y (CUDA's expf against Rust's).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "ptx.cuh"

typedef unsigned long long u64;

template <typename T> struct G;
template <> struct G<double> {
    typedef double A;
    static __device__ __forceinline__ double load(double x) { return x; }
    static __device__ __forceinline__ double store(double a) { return a; }
    static __device__ __forceinline__ double erf_(double a) { return erf(a); }
    static __device__ __forceinline__ double tanh_(double a) { return tanh(a); }
    static __device__ __forceinline__ double exp_(double a) { return exp(a); }
    static __device__ __forceinline__ double fma_(double a, double b, double c) { return __fma_rn(a, b, c); }
};
struct GF32 {
    typedef float A;
    static __device__ __forceinline__ float erf_(float a) { return erff(a); }
    static __device__ __forceinline__ float tanh_(float a) { return tanhf(a); }
    static __device__ __forceinline__ float exp_(float a) { return expf(a); }
    static __device__ __forceinline__ float fma_(float a, float b, float c) { return __fmaf_rn(a, b, c); }
};
template <> struct G<float> : GF32 {
    static __device__ __forceinline__ float load(float x) { return x; }
    static __device__ __forceinline__ float store(float a) { return a; }
};
template <> struct G<__half> : GF32 {
    static __device__ __forceinline__ float load(__half x) { return __half2float(x); }
    static __device__ __forceinline__ __half store(float a) { return __float2half_rn(a); }
};
template <> struct G<__nv_bfloat16> : GF32 {
    static __device__ __forceinline__ float load(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __device__ __forceinline__ __nv_bfloat16 store(float a) { return __float2bfloat16_rn(a); }
};

// f'(x) of each activation, in A.
template <typename T> struct Gelu {
    typedef typename G<T>::A A;
    static __device__ __forceinline__ A d(A x) {
        const A cdf = A(0.5) * (A(1) + G<T>::erf_(x * A(0.7071067811865476)));
        const A pdf = G<T>::exp_(A(-0.5) * (x * x)) * A(0.3989422804014327);
        return cdf + x * pdf;
    }
};
// Through s = sigmoid(2u) = (1 + t) / 2 (t = tanh u, u = k (x + c x^3)): f' = s + 2 x s (1 - s)
// k (1 + 3 c x^2), with 1 - s taken as e s (e = e^(-2u)) where s is near 1: no cancellation for
// either sign of x (where 1 + t and 1 - t^2 would lose digits). f32 takes the fast exponential.
template <typename T> struct GeluTanh {
    typedef typename G<T>::A A;
    static __device__ __forceinline__ A d(A x) {
        const A k = A(0.7978845608028654), c = A(0.044715);
        const A x2 = x * x;
        const A u = k * (x + c * (x2 * x));
        A e;
        if constexpr (sizeof(A) == 4)
            e = __expf(-2.0f * u);
        else
            e = G<T>::exp_(A(-2) * u);
        const A s = A(1) / (A(1) + e);
        const A oms = s < A(0.5) ? A(1) - s : e * s;
        return s + ((A(2) * x) * (s * oms)) * (k * (A(1) + (A(3) * c) * x2));
    }
};
template <typename T> struct Silu {
    typedef typename G<T>::A A;
    static __device__ __forceinline__ A d(A x) {
        const A s = A(1) / (A(1) + G<T>::exp_(-x));
        return s * (A(1) + x * (A(1) - s));
    }
};

// 16 bytes of elements, loaded and stored whole.
template <typename T> union GxVec16 {
    uint4 raw;
    T v[16 / sizeof(T)];
};

// Grid-stride over 16-byte vectors when the three arrays start on 16 bytes (the tail, and
// unaligned arrays, element by element).
template <typename T, typename F>
__device__ __forceinline__ void gx_act_grad(const T* g, const T* x, T* dx, u64 n) {
    typedef typename G<T>::A A;
    constexpr int V = 16 / sizeof(T);
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x, stride = (u64)gridDim.x * blockDim.x;
    u64 done = 0;
    if ((((uintptr_t)g | (uintptr_t)x | (uintptr_t)dx) & 15) == 0) {
        const u64 nv = n / V;
        for (u64 i = tid; i < nv; i += stride) {
            GxVec16<T> gv, xv, ov;
            gv.raw = reinterpret_cast<const uint4*>(g)[i];
            xv.raw = reinterpret_cast<const uint4*>(x)[i];
#pragma unroll
            for (int j = 0; j < V; ++j) ov.v[j] = G<T>::store(G<T>::load(gv.v[j]) * F::d(G<T>::load(xv.v[j])));
            st_global_v4(reinterpret_cast<uint4*>(dx) + i, ov.raw.x, ov.raw.y, ov.raw.z, ov.raw.w);
        }
        done = nv * V;
    }
    for (u64 i = done + tid; i < n; i += stride) {
        const A gi = G<T>::load(g[i]);
        dx[i] = G<T>::store(gi * F::d(G<T>::load(x[i])));
    }
}

#define GX_ACT(op, F, name, T)                                                                     \
    extern "C" __global__ void __launch_bounds__(256)                                              \
        act_grad_##op##_##name(const T* g, const T* x, T* dx, u64 n) {                             \
        gx_act_grad<T, F<T>>(g, x, dx, n);                                                         \
    }
#define GX_ACTS(name, T) GX_ACT(gelu, Gelu, name, T) GX_ACT(gelu_tanh, GeluTanh, name, T) GX_ACT(silu, Silu, name, T)
GX_ACTS(f32, float)
GX_ACTS(f64, double)
GX_ACTS(f16, __half)
GX_ACTS(bf16, __nv_bfloat16)

// The block's sum of each thread's `v` (256 threads): warp shuffles (xor 16, 8, 4, 2, 1), then
// the 8 warps' sums added in order by every thread.
template <typename A> __device__ __forceinline__ A gx_block_sum(A v, A* shared) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x >> 5;
    __syncthreads();
    if ((threadIdx.x & 31) == 0) shared[warp] = v;
    __syncthreads();
    A s = shared[0];
    for (int w = 1; w < 8; w++) s += shared[w];
    return s;
}

template <typename T>
__device__ __forceinline__ void gx_sm_grad(const T* y, const T* g, T* dx, u64 rows, u64 n, int log) {
    typedef typename G<T>::A A;
    __shared__ A shared[8];
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* yr = y + r * n;
        const T* gr = g + r * n;
        T* dr = dx + r * n;
        A s = A(0);
        for (u64 i = threadIdx.x; i < n; i += 256) {
            const A gi = G<T>::load(gr[i]);
            s = log ? s + gi : G<T>::fma_(gi, G<T>::load(yr[i]), s);
        }
        s = gx_block_sum<A>(s, shared);
        for (u64 i = threadIdx.x; i < n; i += 256) {
            const A gi = G<T>::load(gr[i]), yi = G<T>::load(yr[i]);
            dr[i] = G<T>::store(log ? G<T>::fma_(-G<T>::exp_(yi), s, gi) : yi * (gi - s));
        }
    }
}

#define GX_SM_GRAD(name, T)                                                                        \
    extern "C" __global__ void __launch_bounds__(256)                                              \
        sm_grad_##name(const T* y, const T* g, T* dx, u64 rows, u64 n, int log) {                  \
        gx_sm_grad<T>(y, g, dx, rows, n, log);                                                     \
    }
GX_SM_GRAD(f32, float)
GX_SM_GRAD(f64, double)
GX_SM_GRAD(f16, __half)
GX_SM_GRAD(bf16, __nv_bfloat16)

// ---- Activation gradients with their column sums: act_grad_cols_<op>_<T> writes dx as
// act_grad does and, for rows of `cols` elements, each column's sum of dx (the values as
// rounded to T) over the rows: a linear layer's bias gradient when the activation reads its
// output (GPT-2's MLP), without a second pass over dx. Blocks of 32 x 8 threads, grid (column
// tiles, splits): thread x owns V adjacent columns (one 16-byte vector when `vec`: the host
// passes it when cols % V == 0 and the arrays start on 16 bytes; else V = 1), thread y the
// rows y, y + 8, ... of the split's `chunk` rows, in order; the 8 threads of a column add
// their sums in order of y into part[split][column] (A: f32, f64 for f64).
// act_grad_cols_final_<T> adds each column's splits: 8 threads a column (32 columns a
// block), thread y the splits y, y + 8, ... in order, then the 8 in order of y; rounded once
// to T. A fixed order throughout, and the splits depend on the shape only: the sums are the
// same bits run to run and device to device.
template <typename T, typename F, int V>
__device__ __forceinline__ void gx_cols(const T* g, const T* x, T* dx, typename G<T>::A* part, u64 rows,
                                        u64 cols, u64 chunk) {
    typedef typename G<T>::A A;
    __shared__ A sm[8][32 * V + 1];
    const u64 c0 = ((u64)blockIdx.x * 32 + threadIdx.x) * V;
    const u64 splits = (rows + chunk - 1) / chunk;
    // Splits past the grid's y extent: grid-stride (at least one split, for no rows).
    for (u64 split = blockIdx.y; split < max(splits, (u64)1); split += gridDim.y) {
        const u64 r0 = split * chunk, r1 = min(rows, r0 + chunk);
        A s[V];
#pragma unroll
        for (int e = 0; e < V; ++e) s[e] = A(0);
        if (c0 < cols) {
            for (u64 r = r0 + threadIdx.y; r < r1; r += 8) {
                const u64 at = r * cols + c0;
                if (V > 1) {
                    GxVec16<T> gv, xv, ov;
                    gv.raw = *reinterpret_cast<const uint4*>(g + at);
                    xv.raw = *reinterpret_cast<const uint4*>(x + at);
#pragma unroll
                    for (int e = 0; e < V; ++e) {
                        ov.v[e] = G<T>::store(G<T>::load(gv.v[e]) * F::d(G<T>::load(xv.v[e])));
                        s[e] += G<T>::load(ov.v[e]);
                    }
                    st_global_v4(dx + at, ov.raw.x, ov.raw.y, ov.raw.z, ov.raw.w);
                } else {
                    const T d = G<T>::store(G<T>::load(g[at]) * F::d(G<T>::load(x[at])));
                    dx[at] = d;
                    s[0] += G<T>::load(d);
                }
            }
        }
#pragma unroll
        for (int e = 0; e < V; ++e) sm[threadIdx.y][threadIdx.x * V + e] = s[e];
        __syncthreads();
        if (threadIdx.y == 0) {
#pragma unroll
            for (int e = 0; e < V; ++e) {
                A t = s[e];
                for (int y = 1; y < 8; ++y) t += sm[y][threadIdx.x * V + e];
                if (c0 + e < cols) part[split * cols + c0 + e] = t;
            }
        }
        __syncthreads();
    }
}

template <typename T>
__device__ __forceinline__ void gx_cols_final(const typename G<T>::A* part, T* out, u64 splits, u64 cols) {
    typedef typename G<T>::A A;
    __shared__ A sm[8][33];
    const u64 c = (u64)blockIdx.x * 32 + threadIdx.x;
    A t = A(0);
    if (c < cols)
        for (u64 p = threadIdx.y; p < splits; p += 8) t += part[p * cols + c];
    sm[threadIdx.y][threadIdx.x] = t;
    __syncthreads();
    if (threadIdx.y != 0 || c >= cols) return;
    for (int y = 1; y < 8; ++y) t += sm[y][threadIdx.x];
    out[c] = G<T>::store(t);
}

#define GX_COLS(op, F, name, T)                                                                    \
    extern "C" __global__ void __launch_bounds__(256) act_grad_cols_##op##_##name(                 \
        const T* g, const T* x, T* dx, G<T>::A* part, u64 rows, u64 cols, u64 chunk, int vec) {    \
        if (vec)                                                                                   \
            gx_cols<T, F<T>, 16 / sizeof(T)>(g, x, dx, part, rows, cols, chunk);                   \
        else                                                                                       \
            gx_cols<T, F<T>, 1>(g, x, dx, part, rows, cols, chunk);                                \
    }
#define GX_COLS_ALL(name, T)                                                                       \
    GX_COLS(gelu, Gelu, name, T) GX_COLS(gelu_tanh, GeluTanh, name, T) GX_COLS(silu, Silu, name, T) \
    extern "C" __global__ void __launch_bounds__(256)                                              \
        act_grad_cols_final_##name(const G<T>::A* part, T* out, u64 splits, u64 cols) {            \
        gx_cols_final<T>(part, out, splits, cols);                                                 \
    }
GX_COLS_ALL(f32, float)
GX_COLS_ALL(f64, double)
GX_COLS_ALL(f16, __half)
GX_COLS_ALL(bf16, __nv_bfloat16)
