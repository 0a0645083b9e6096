// Fused classifier of Genesis: cross-entropy of logits [N, V] (rows `in_stride` elements apart,
// V up to ~100k) against int64 targets [N], PyTorch's `F.cross_entropy(logits, target,
// ignore_index, reduction)`, for T = f32, f16, bf16 (computed in f32). Kernels:
//   ce_fwd_<T>[_v]    loss and logsumexp of each row (evaluation; the backward's saved lse)
//   ce_bwd_<T>[_v]    dlogits from the saved lse (one read of the logits)
//   ce_fused_<T>[_v]  loss, lse and dlogits in one kernel (training, llm.c's fused classifier):
//                     the row is read twice (statistics, then the gradient)
//   ce_count          the number of rows whose target is not ignore_index ('mean')
//   ce_reduce         'sum' or 'mean' of the per-row losses into one f32
// A row is cut into chunks of N = 16 / sizeof(T) elements (the last may be partial). The `_v`
// kernels load and store whole chunks as 16-byte vectors (the launcher picks them when both
// buffers and both row strides are 16-byte aligned); the others element by element. Both
// visit the same chunks in the same order, so every kernel and path gives the same bits.
//
// Built by `cargo xtask build-kernels` into crates/genesis-kernels/images/classifier.fatbin.
// The CPU twins are in crates/genesis-kernels/src/classifier.rs, which checks every argument
// (the kernels trust it) and documents the twin bound.
//
// Semantics, per row n with target t = targets[n] and logits x:
//   m = max x (NaN when any x is NaN), s = sum exp(x - m),
//   lse = m + log(s) when m is finite, else NaN (PyTorch's log_softmax: x - m is NaN at an
//   infinite maximum, so a row holding +inf, or only -inf, has a NaN loss and gradient),
//   loss = lse - x[t], p_j = exp(x_j - lse) when lse is finite, else NaN,
//   dlogits_j = (p_j - [j == t]) g, rounded once to T, with g the row's gradient scale:
//   dloss[n] ('none'), dloss[0] ('sum'), dloss[0] / count ('mean'; count = rows whose
//   target is not ignore_index), or `dloss_value` instead of dloss[.] when dloss is null.
//   A row whose target is ignore_index has loss 0 and dlogits exactly 0 (whatever its logits).
//   A target outside [0, V) that is not ignore_index is never used as an address: the row's
//   loss and gradient are NaN and the smallest such row index goes into the status word (an
//   i64 the caller sets to -1; an unsigned atomicMin, so -1 = 2^64 - 1 loses to every row).
//   lse is written for every row (ignored ones too).
//
// Algorithm: a block of 512 threads a row (grid-stride over rows). Pass 1 (fwd, fused):
// thread 0 reads x[t]; thread j folds chunks j, j + 512, ... into four online states (m, s)
// (chunk j + 512 i into state i % 4; merged in order at the end): a chunk's maximum c first
// (c > m: s = s exp(m - c), m = c), then its elements in order into one partial sum of
// exp(x - m), as exp2(x log2(e) - m log2(e)) while m is finite (1 where x = m when it is not,
// so infinities count once each), added to s; a NaN makes s NaN, and lse NaN. One multiply-add
// and one exp2 (`ex2.approx.ftz`, see ptx.cuh's ex2) an element, no branch per element; a thread's
// aligned chunks are loaded eight at a time, all in flight before the first is folded. The warp merges the states by
// xor-shuffles, the 16 warp states merge in warp order through shared memory (all threads get
// the row's (m, s)). Pass 2 (fused, bwd): each thread reads its elements again and writes
// their gradient. The barriers of the block merge separate every read of a row from the first
// write of its gradient, and each element is read and written by the same thread, so dlogits
// may be the logits themselves (in place, same pointer and stride). Per-row outputs (loss,
// lse) are written by thread 0.
// ce_count and ce_reduce are one block of 1024 threads: integer counts (order-free), and the
// losses summed in f64 (thread t takes rows t, t + 1024, ... in order, then a fixed tree),
// rounded once to f32 after the division by the count.
//
// Numerical contract: f32 throughout with CUDA's exp2f (ex2.approx.ftz: the same values but
// 0 for subnormal results) / expf / logf (2, 2 and 1 ulp; the
// exp2 argument's multiply-add rounds once, an error within the twin bound's |m| term); the state merges
// add in a tree (the twin sums in order, in f64): see classifier.rs for the bound.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "ptx.cuh"

typedef unsigned long long u64;
typedef long long i64;

#define CE_THREADS 512
#define CE_NONE 0
#define CE_SUM 1
#define CE_MEAN 2

// The arguments of every ce kernel (`Args` in classifier.rs mirrors it, field by field).
struct CeArgs {
    u64 logits;   // const T*, rows in_stride apart
    u64 dlogits;  // T*, rows out_stride apart (may equal logits, with the same stride)
    u64 targets;  // const i64* [rows]
    u64 loss;     // float* [rows] (ce_reduce: the per-row losses read)
    u64 lse;      // float* [rows] (written by fwd and fused, read by bwd)
    u64 dloss;    // const float*: [rows] ('none') or [1]; null: dloss_value
    u64 count;    // u64*: ce_count writes it, 'mean' gradients read it
    u64 status;   // i64* [1]: smallest row with a bad target (the caller sets -1)
    u64 out;      // float* [1]: ce_reduce's result
    u64 rows, classes, in_stride, out_stride;
    i64 ignore;
    float dloss_value;
    int mode;     // CE_NONE, CE_SUM, CE_MEAN
};
static_assert(sizeof(CeArgs) == 120, "classifier.rs mirrors CeArgs");

template <typename T> struct Ce;
template <> struct Ce<float> {
    static __device__ __forceinline__ float load(float x) { return x; }
    static __device__ __forceinline__ float store(float a) { return a; }
};
template <> struct Ce<__half> {
    static __device__ __forceinline__ float load(__half x) { return __half2float(x); }
    static __device__ __forceinline__ __half store(float a) { return __float2half_rn(a); }
};
template <> struct Ce<__nv_bfloat16> {
    static __device__ __forceinline__ float load(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __device__ __forceinline__ __nv_bfloat16 store(float a) { return __float2bfloat16_rn(a); }
};

// 16 bytes of T.
template <typename T> struct __align__(16) Vec {
    static const int N = 16 / sizeof(T);
    T v[N];
};

#define F_NAN __int_as_float(0x7fc00000)
#define CE_LOG2E 1.44269504088896340736f
#define F_INF __int_as_float(0x7f800000)

__device__ __forceinline__ bool is_fin(float a) { return a - a == 0.0f; }

// The online state (m, s) of a row (see the top of the file; softmax.cu's `St`).
struct CeSt {
    float m, s;
    __device__ __forceinline__ void init() {
        m = -F_INF;
        s = 0.0f;
    }
    // Folds the first `cnt` values of a chunk (all N when FULL): the state moves to the
    // chunk's maximum c once (c > m: s = s exp(m - c), m = c), then each value adds
    // exp(x - m): for a finite m as exp2(x log2(e) - m log2(e)) (one fused multiply-add and
    // one exp2 a value), for an infinite m as exp(x - m), exactly 1 where x = m. A NaN value
    // makes s NaN (m, a maximum by fmaxf, skips NaN; ce_lse reads NaN from s).
    template <bool FULL, int N> __device__ __forceinline__ void push_chunk(const float (&v)[N], int cnt) {
        float cm = -F_INF;
#pragma unroll
        for (int e = 0; e < N; ++e)
            if (FULL || e < cnt) cm = fmaxf(cm, v[e]);
        if (cm > m) {
            s *= expf(m - cm);
            m = cm;
        }
        float add = 0.0f;
        if (is_fin(m)) {
            const float ml = m * CE_LOG2E;
#pragma unroll
            for (int e = 0; e < N; ++e)
                if (FULL || e < cnt) add += ex2(fmaf(v[e], CE_LOG2E, -ml));
        } else {
#pragma unroll
            for (int e = 0; e < N; ++e)
                if (FULL || e < cnt) add += v[e] == m ? 1.0f : expf(v[e] - m);
        }
        s += add;
    }
    __device__ __forceinline__ void merge(float m2, float s2) {
        if (m2 > m) {
            s = s * expf(m - m2) + s2;
            m = m2;
        } else if (m2 <= m) {
            s += m2 == m ? s2 : s2 * expf(m2 - m);
        } else {
            m = F_NAN;
            s = F_NAN;
        }
    }
};

// Merges the states of the block's threads; every thread gets the total (lane 0's state of
// each warp after the xor-shuffles, the warps' states in warp order). `red` (64 floats) may be
// reused by the next call (the first barrier), and every thread's reads of the row happen
// before any thread goes on (the second).
__device__ __forceinline__ void ce_block_merge(CeSt &st, float *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, st.m, d), s2 = __shfl_xor_sync(0xffffffffu, st.s, d);
        st.merge(m2, s2);
    }
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

// Records `row` as a row with a bad target (the smallest one wins).
__device__ __forceinline__ void ce_report(u64 status, u64 row) {
    atomicMin(reinterpret_cast<unsigned long long *>(status), (unsigned long long)row);
}

// The row's target and what it says: 0 valid, 1 ignored, 2 bad (reported by thread 0).
__device__ __forceinline__ int ce_kind(const CeArgs &a, u64 row, i64 &t) {
    t = reinterpret_cast<const i64 *>(a.targets)[row];
    if (t == a.ignore) return 1;
    if (t < 0 || (u64)t >= a.classes) {
        if (threadIdx.x == 0) ce_report(a.status, row);
        return 2;
    }
    return 0;
}

// Loads chunk j of the row at p (elements j N .. j N + N - 1 below n; N = 16 / sizeof(T)) as
// floats: a vector when VEC and the chunk is whole, else element by element. Gives the count.
template <typename T, bool VEC>
__device__ __forceinline__ int ce_load(const T *p, u64 j, u64 n, float (&v)[Vec<T>::N]) {
    typedef Vec<T> V;
    const u64 k0 = j * V::N;
    if (VEC && k0 + V::N <= n) {
        const V c = reinterpret_cast<const V *>(p)[j];
#pragma unroll
        for (int e = 0; e < V::N; ++e) v[e] = Ce<T>::load(c.v[e]);
        return V::N;
    }
    const int m = (int)min((u64)V::N, n - k0);
#pragma unroll
    for (int e = 0; e < V::N; ++e) v[e] = e < m ? Ce<T>::load(p[k0 + e]) : 0.0f;
    return m;
}

// The block's merged state of the row at p: thread t folds chunks t, t + B, ... (B threads)
// in order into four independent states (chunk t + B i into state i % 4, so the four
// dependency chains overlap), merged in state order, then across the block. The same order on
// every path, so every kernel gets the same bits for a row.
template <typename T, bool VEC>
__device__ __forceinline__ CeSt ce_row_state(const T *p, u64 n, float *red) {
    typedef Vec<T> V;
    CeSt st[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) st[i].init();
    const u64 chunks = (n + V::N - 1) / V::N, step = blockDim.x;
    // Whole chunks eight at a time (as raw vectors: all eight loads in flight, converted as
    // they are folded; chunk j + step i into state i % 4, as below), then four at a time,
    // then the rest (the last chunk may be partial).
    const u64 whole = n / V::N;
    u64 j = threadIdx.x;
    if (VEC) {
        for (; j + 7 * step < whole; j += 8 * step) {
            V raw[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) raw[i] = reinterpret_cast<const V *>(p)[j + step * i];
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                float v[V::N];
#pragma unroll
                for (int e = 0; e < V::N; ++e) v[e] = Ce<T>::load(raw[i].v[e]);
                st[i % 4].template push_chunk<true>(v, V::N);
            }
        }
    }
    for (; j + 3 * step < whole; j += 4 * step) {
        float v[4][V::N];
#pragma unroll
        for (int i = 0; i < 4; ++i) ce_load<T, VEC>(p, j + step * i, n, v[i]);
#pragma unroll
        for (int i = 0; i < 4; ++i) st[i].template push_chunk<true>(v[i], V::N);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
        if (j + step * i < chunks) {
            float v[V::N];
            const int m = ce_load<T, VEC>(p, j + step * i, n, v);
            st[i].template push_chunk<false>(v, m);
        }
#pragma unroll
    for (int i = 1; i < 4; ++i) st[0].merge(st[i].m, st[i].s);
    ce_block_merge(st[0], red);
    return st[0];
}

// lse = m + log(s) for a finite m, else NaN; NaN when a value was NaN (s is then NaN).
__device__ __forceinline__ float ce_lse(const CeSt &st) {
    return st.s != st.s || !is_fin(st.m) ? F_NAN : st.m + logf(st.s);
}

// The gradient of element k: (p - [k == t]) g; exactly 0 for an ignored row (kind 1).
__device__ __forceinline__ float ce_grad(float x, float lse, bool fin, u64 k, i64 t, float g, int kind) {
    if (kind == 1) return 0.0f;
    const float p = fin ? expf(x - lse) : F_NAN;
    const float oh = (i64)k == t ? 1.0f : 0.0f;
    return (p - oh) * g;
}

// The row's gradient scale g (see the top of the file): NaN for a bad target (kind 2).
__device__ __forceinline__ float ce_scale(const CeArgs &a, u64 row, int kind) {
    if (kind == 2) return F_NAN;
    const float *dl = reinterpret_cast<const float *>(a.dloss);
    float g = dl ? dl[a.mode == CE_NONE ? row : 0] : a.dloss_value;
    if (a.mode == CE_MEAN) g = g / (float)(*reinterpret_cast<const u64 *>(a.count));
    return g;
}

// Pass 2: writes the gradient of the row at p into q, after the block's merge barriers (so q
// may be p: each element is read and written by one thread). Where p and q are equally
// misaligned (aligned rows, in place, or rows of one stride) the row's 16-byte-aligned middle
// goes as vectors (thread `first` of `step` takes vectors first, first + step, ...), and the
// elements before and after it, or the whole row otherwise, one by one (elements first,
// first + step, ...), so that a warp's loads and stores cover consecutive elements (whole
// sectors). An element's gradient does not depend on who computes it: the same bits either way.
template <typename T>
__device__ __forceinline__ void ce_row_grad(const T *p, T *q, u64 n, float lse, i64 t, float g, int kind,
                                            u64 first, u64 step) {
    typedef Vec<T> V;
    const bool fin = is_fin(lse);
    const u64 ap = reinterpret_cast<u64>(p) & 15, aq = reinterpret_cast<u64>(q) & 15;
    u64 head = n, body = 0;
    if (ap == aq) {
        head = min(n, ((16 - ap) & 15) / sizeof(T));
        body = (n - head) / V::N;
    }
    const u64 tail = head + body * V::N;
    for (u64 k = first; k < head; k += step) q[k] = Ce<T>::store(ce_grad(Ce<T>::load(p[k]), lse, fin, k, t, g, kind));
    for (u64 k = tail + first; k < n; k += step) q[k] = Ce<T>::store(ce_grad(Ce<T>::load(p[k]), lse, fin, k, t, g, kind));
    const V *pv = reinterpret_cast<const V *>(p + head);
    V *qv = reinterpret_cast<V *>(q + head);
#pragma unroll 2
    for (u64 j = first; j < body; j += step) {
        const V c = pv[j];
        V o;
        const u64 k0 = head + j * V::N;
#pragma unroll
        for (int e = 0; e < V::N; ++e) o.v[e] = Ce<T>::store(ce_grad(Ce<T>::load(c.v[e]), lse, fin, k0 + e, t, g, kind));
        qv[j] = o;
    }
}

// ---- ce_fwd: loss and lse a row.
template <typename T, bool VEC>
__device__ __forceinline__ void fwd_impl(const CeArgs &a) {
    __shared__ float red[64];
    const T *base = reinterpret_cast<const T *>(a.logits);
    for (u64 row = blockIdx.x; row < a.rows; row += gridDim.x) {
        const T *p = base + row * a.in_stride;
        i64 t;
        const int kind = ce_kind(a, row, t);
        const float xt = (threadIdx.x == 0 && kind == 0) ? Ce<T>::load(p[t]) : 0.0f;
        const CeSt st = ce_row_state<T, VEC>(p, a.classes, red);
        if (threadIdx.x == 0) {
            const float lse = ce_lse(st);
            reinterpret_cast<float *>(a.lse)[row] = lse;
            reinterpret_cast<float *>(a.loss)[row] = kind == 0 ? lse - xt : kind == 1 ? 0.0f : F_NAN;
        }
    }
}

// ---- ce_bwd: dlogits from the saved lse.
template <typename T, bool VEC>
__device__ __forceinline__ void bwd_impl(const CeArgs &a) {
    const T *base = reinterpret_cast<const T *>(a.logits);
    T *obase = reinterpret_cast<T *>(a.dlogits);
    for (u64 row = blockIdx.x; row < a.rows; row += gridDim.x) {
        i64 t;
        const int kind = ce_kind(a, row, t);
        const float lse = reinterpret_cast<const float *>(a.lse)[row];
        const float g = ce_scale(a, row, kind);
        ce_row_grad<T>(base + row * a.in_stride, obase + row * a.out_stride, a.classes, lse, t, g, kind,
                            threadIdx.x, blockDim.x);
    }
}

// ---- ce_fused: loss, lse and dlogits, the row read twice.
template <typename T, bool VEC>
__device__ __forceinline__ void fused_impl(const CeArgs &a) {
    __shared__ float red[64];
    const T *base = reinterpret_cast<const T *>(a.logits);
    T *obase = reinterpret_cast<T *>(a.dlogits);
    for (u64 row = blockIdx.x; row < a.rows; row += gridDim.x) {
        const T *p = base + row * a.in_stride;
        i64 t;
        const int kind = ce_kind(a, row, t);
        // Read before the merge's barriers: in place, pass 2 overwrites x[t].
        const float xt = (threadIdx.x == 0 && kind == 0) ? Ce<T>::load(p[t]) : 0.0f;
        const CeSt st = ce_row_state<T, VEC>(p, a.classes, red);
        const float lse = ce_lse(st);
        if (threadIdx.x == 0) {
            reinterpret_cast<float *>(a.lse)[row] = lse;
            reinterpret_cast<float *>(a.loss)[row] = kind == 0 ? lse - xt : kind == 1 ? 0.0f : F_NAN;
        }
        const float g = ce_scale(a, row, kind);
        ce_row_grad<T>(p, obase + row * a.out_stride, a.classes, lse, t, g, kind, threadIdx.x, blockDim.x);
    }
}

// ---- ce_count and ce_reduce: one block of 1024 threads.
template <typename A> __device__ __forceinline__ A ce_block_sum(A v, A *red) {
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

// Rows whose target is not ignore_index, into *count; bad targets reported.
extern "C" __global__ void __launch_bounds__(1024) ce_count(const CeArgs a) {
    __shared__ u64 red[32];
    const i64 *tg = reinterpret_cast<const i64 *>(a.targets);
    u64 c = 0;
    for (u64 row = threadIdx.x; row < a.rows; row += blockDim.x) {
        const i64 t = tg[row];
        if (t == a.ignore) continue;
        if (t < 0 || (u64)t >= a.classes) ce_report(a.status, row);
        ++c;
    }
    c = ce_block_sum<u64>(c, red);
    if (threadIdx.x == 0) *reinterpret_cast<u64 *>(a.count) = c;
}

// 'sum' or 'mean' of the per-row losses (ignored rows hold 0) into *out.
extern "C" __global__ void __launch_bounds__(1024) ce_reduce(const CeArgs a) {
    __shared__ double red[32];
    __shared__ u64 redc[32];
    const i64 *tg = reinterpret_cast<const i64 *>(a.targets);
    const float *loss = reinterpret_cast<const float *>(a.loss);
    double s = 0.0;
    u64 c = 0;
    for (u64 row = threadIdx.x; row < a.rows; row += blockDim.x) {
        s += (double)loss[row];
        c += tg[row] != a.ignore;
    }
    s = ce_block_sum<double>(s, red);
    c = ce_block_sum<u64>(c, redc);
    if (threadIdx.x == 0) *reinterpret_cast<float *>(a.out) = (float)(a.mode == CE_MEAN ? s / (double)c : s);
}

#define CE_KERNELS(NAME, SUFFIX, T, VEC)                                                                 \
    extern "C" __global__ void __launch_bounds__(CE_THREADS) ce_fwd_##NAME##SUFFIX(const CeArgs a) { \
        fwd_impl<T, VEC>(a);                                                                             \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(CE_THREADS) ce_bwd_##NAME##SUFFIX(const CeArgs a) {     \
        bwd_impl<T, VEC>(a);                                                                             \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(CE_THREADS) ce_fused_##NAME##SUFFIX(const CeArgs a) { \
        fused_impl<T, VEC>(a);                                                                           \
    }
#define CE_ALL(NAME, T)                                                                                  \
    CE_KERNELS(NAME, , T, false)                                                                         \
    CE_KERNELS(NAME, _v, T, true)

CE_ALL(f32, float)
CE_ALL(f16, __half)
CE_ALL(bf16, __nv_bfloat16)
