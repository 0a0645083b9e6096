// Optimiser kernels of Genesis over many tensors at once (multi-tensor launches, as PyTorch's
// fused optimisers): `adam_<T>` (Adam and AdamW), `sumsq_<T>` + `clip_coef` (the global 2-norm
// of many gradients and the clipping factor) and `scale_<T>` (every gradient times the factor,
// read from device memory: no synchronisation). T is f32, f16, bf16 (computed in f32, rounded
// once to T) or f64 (computed in f64).
//
// Built by `cargo xtask build-kernels` into crates/genesis-kernels/images/optim.fatbin. The CPU
// twins are in crates/genesis-kernels/src/optim.rs.
//
// A launch takes a `MtBatch` by value (kernel parameter space): up to GX_MT tensors, each a
// parameter `p`, gradient `g` and the two moments `m`, `v` (only `g` for the norm and scale
// kernels) of `n` elements, and `first[t]`, the first block of tensor t (`first[count]` is the
// grid). Block b works on tensor t with first[t] <= b < first[t + 1], on elements
// [(b - first[t]) * GX_CHUNK, + GX_CHUNK) of it; each thread takes every 256th element of the
// chunk (coalesced), 4 at a time with every load issued before the arithmetic.
//
// Adam, per element (PyTorch's fused Adam(W), hyper-parameters precomputed on the host):
//   decoupled decay (AdamW): p = p - lr_wd * p           (lr_wd = lr * weight_decay)
//   L2 decay (Adam):          g = g + wd * p
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   p = p - step_size * (m / (sqrt(v) / bc2_sqrt + eps))  (step_size = lr / (1 - beta1^t),
//                                                          bc2_sqrt = sqrt(1 - beta2^t))
// with every multiply-add written as one fused multiply-add (`fma`), sqrt and division
// correctly rounded (nvcc's defaults), so that the twin (Rust's `mul_add`, `sqrt`, `/`) gives
// the same bits.
//
// Norm: `sumsq_<T>` writes one partial sum of squares per block (in f64, each thread's terms
// added in f32 (f64 for f64) in order, then the block's threads in a fixed tree);
// `clip_coef` (one block) adds the partials in a fixed tree and writes norm = sqrt(sum) and
// coef = min(max_norm / (norm + 1e-6), 1) in f64 (PyTorch's `clip_grad_norm_`). The twin
// follows the same chunks and trees: the results agree bit for bit.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

typedef unsigned long long u64;

#define GX_MT 32
#define GX_THREADS 256
#define GX_CHUNK 4096

struct MtBatch {
    u64 p[GX_MT];
    u64 g[GX_MT];
    u64 m[GX_MT];
    u64 v[GX_MT];
    u64 n[GX_MT];
    unsigned first[GX_MT + 1];
    int count;
};

template <typename T> struct Op;
template <> struct Op<float> {
    typedef float A;
    static __device__ __forceinline__ float load(float x) { return x; }
    static __device__ __forceinline__ float store(float a) { return a; }
    static __device__ __forceinline__ float fma_(float a, float b, float c) { return __fmaf_rn(a, b, c); }
    static __device__ __forceinline__ float sqrt_(float a) { return __fsqrt_rn(a); }
    static __device__ __forceinline__ float div_(float a, float b) { return __fdiv_rn(a, b); }
    static __device__ __forceinline__ float mul_(float a, float b) { return __fmul_rn(a, b); }
    static __device__ __forceinline__ float add_(float a, float b) { return __fadd_rn(a, b); }
};
template <> struct Op<double> {
    typedef double A;
    static __device__ __forceinline__ double load(double x) { return x; }
    static __device__ __forceinline__ double store(double a) { return a; }
    static __device__ __forceinline__ double fma_(double a, double b, double c) { return __fma_rn(a, b, c); }
    static __device__ __forceinline__ double sqrt_(double a) { return __dsqrt_rn(a); }
    static __device__ __forceinline__ double div_(double a, double b) { return __ddiv_rn(a, b); }
    static __device__ __forceinline__ double mul_(double a, double b) { return __dmul_rn(a, b); }
    static __device__ __forceinline__ double add_(double a, double b) { return __dadd_rn(a, b); }
};
template <> struct Op<__half> : Op<float> {
    static __device__ __forceinline__ float load(__half x) { return __half2float(x); }
    static __device__ __forceinline__ __half store(float a) { return __float2half_rn(a); }
};
template <> struct Op<__nv_bfloat16> : Op<float> {
    static __device__ __forceinline__ float load(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __device__ __forceinline__ __nv_bfloat16 store(float a) { return __float2bfloat16_rn(a); }
};

// The tensor of block b (first[t] <= b < first[t + 1]).
__device__ __forceinline__ int gx_tensor_of(const MtBatch& batch, unsigned b) {
    int t = 0;
    while (t + 1 < batch.count && batch.first[t + 1] <= b) t++;
    return t;
}

// Hyper-parameters of one Adam step, in the compute type of T (A).
template <typename A> struct AdamHyper {
    A beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, bc2_sqrt, eps, wd, lr_wd;
    int decoupled;
};

template <typename T>
__device__ __forceinline__ void gx_adam(const MtBatch& batch, const AdamHyper<typename Op<T>::A>& h) {
    typedef Op<T> O;
    typedef typename O::A A;
    const unsigned b = blockIdx.x;
    const int t = gx_tensor_of(batch, b);
    T* P = (T*)batch.p[t];
    const T* G = (const T*)batch.g[t];
    T* M = (T*)batch.m[t];
    T* V = (T*)batch.v[t];
    const u64 n = batch.n[t];
    const u64 base = (u64)(b - batch.first[t]) * GX_CHUNK;
    const u64 end = min(n, base + GX_CHUNK);
    for (u64 i0 = base + threadIdx.x; i0 < end; i0 += 4 * GX_THREADS) {
        A p[4], g[4], m[4], v[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const u64 i = i0 + (u64)k * GX_THREADS;
            if (i < end) {
                p[k] = O::load(P[i]);
                g[k] = O::load(G[i]);
                m[k] = O::load(M[i]);
                v[k] = O::load(V[i]);
            }
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const u64 i = i0 + (u64)k * GX_THREADS;
            if (i < end) {
                A pk = p[k], gk = g[k];
                if (h.decoupled) {
                    pk = O::fma_(-h.lr_wd, pk, pk);
                } else {
                    gk = O::fma_(h.wd, pk, gk);
                }
                const A mk = O::fma_(h.beta1, m[k], O::mul_(h.one_minus_beta1, gk));
                const A vk = O::fma_(h.beta2, v[k], O::mul_(O::mul_(h.one_minus_beta2, gk), gk));
                const A denom = O::add_(O::div_(O::sqrt_(vk), h.bc2_sqrt), h.eps);
                pk = O::fma_(-h.step_size, O::div_(mk, denom), pk);
                P[i] = O::store(pk);
                M[i] = O::store(mk);
                V[i] = O::store(vk);
            }
        }
    }
}

// Sum of squares of block b's chunk (in A, in order per thread), the block's threads added in
// a fixed tree in f64; thread 0 writes partials[b].
template <typename T>
__device__ __forceinline__ void gx_sumsq(const MtBatch& batch, double* partials) {
    typedef Op<T> O;
    typedef typename O::A A;
    __shared__ double tree[GX_THREADS];
    const unsigned b = blockIdx.x;
    const int t = gx_tensor_of(batch, b);
    const T* G = (const T*)batch.g[t];
    const u64 n = batch.n[t];
    const u64 base = (u64)(b - batch.first[t]) * GX_CHUNK;
    const u64 end = min(n, base + GX_CHUNK);
    A s = 0;
    for (u64 i = base + threadIdx.x; i < end; i += GX_THREADS) {
        const A x = O::load(G[i]);
        s = O::fma_(x, x, s);
    }
    tree[threadIdx.x] = (double)s;
    __syncthreads();
    for (int w = GX_THREADS / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) tree[threadIdx.x] = __dadd_rn(tree[threadIdx.x], tree[threadIdx.x + w]);
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[b] = tree[0];
}

// g = g * coef[0] over block b's chunk (the factor rounded to A first); nothing when the factor
// is 1 (gradients within the norm: every value would stay as it is), which spares a read and
// a write of every gradient.
template <typename T>
__device__ __forceinline__ void gx_scale(const MtBatch& batch, const double* coef) {
    typedef Op<T> O;
    typedef typename O::A A;
    const unsigned b = blockIdx.x;
    const int t = gx_tensor_of(batch, b);
    T* G = (T*)batch.g[t];
    const u64 n = batch.n[t];
    const u64 base = (u64)(b - batch.first[t]) * GX_CHUNK;
    const u64 end = min(n, base + GX_CHUNK);
    const A c = (A)coef[0];
    if (c == A(1)) return;
    for (u64 i = base + threadIdx.x; i < end; i += GX_THREADS) {
        G[i] = O::store(O::mul_(O::load(G[i]), c));
    }
}

#define GX_OPTIM(name, T)                                                                          \
    extern "C" __global__ void __launch_bounds__(GX_THREADS)                                       \
        adam_##name(const MtBatch batch, const AdamHyper<Op<T>::A> h) {                             \
        gx_adam<T>(batch, h);                                                                      \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(GX_THREADS)                                       \
        sumsq_##name(const MtBatch batch, double* partials) {                                      \
        gx_sumsq<T>(batch, partials);                                                              \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(GX_THREADS)                                       \
        scale_##name(const MtBatch batch, const double* coef) {                                     \
        gx_scale<T>(batch, coef);                                                                  \
    }

GX_OPTIM(f32, float)
GX_OPTIM(f64, double)
GX_OPTIM(f16, __half)
GX_OPTIM(bf16, __nv_bfloat16)

// One block: the partials' sum in a fixed tree (thread i adds partials i, i + 256, ... in
// order, then the tree), then out[0] = norm = sqrt(sum) and out[1] = the clipping factor
// min(max_norm / (norm + 1e-6), 1) (PyTorch's `clip_grad_norm_`; NaN stays NaN), in f64.
extern "C" __global__ void __launch_bounds__(GX_THREADS)
    clip_coef(const double* partials, u64 count, double max_norm, double* out) {
    __shared__ double tree[GX_THREADS];
    double s = 0.0;
    for (u64 i = threadIdx.x; i < count; i += GX_THREADS) s = __dadd_rn(s, partials[i]);
    tree[threadIdx.x] = s;
    __syncthreads();
    for (int w = GX_THREADS / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) tree[threadIdx.x] = __dadd_rn(tree[threadIdx.x], tree[threadIdx.x + w]);
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        const double norm = __dsqrt_rn(tree[0]);
        double coef = __ddiv_rn(max_norm, __dadd_rn(norm, 1e-6));
        if (coef >= 1.0) coef = 1.0;
        out[0] = norm;
        out[1] = coef;
    }
}
