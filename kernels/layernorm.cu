// LayerNorm of Genesis with a fused residual add, for GPT-2 training (llm.c's layernorm and
// fused residual kernels), T = f32, f16, bf16, statistics and arithmetic in f32:
//   ln_fwd_<T>[_v]     h = x + r (when a residual is given; h written, rounded to T), then
//                      y = (h - mean) rstd w + b, mean and rstd (f32 [N]) saved
//   ln_bwd_<T>[_v]     dh (written, or added to dh's contents) and per-block partial sums of
//                      dw and db (f32) into a workspace; with dr, dh's final value also
//                      rounded to dy's type (a residual stream's gradient for the narrow
//                      branch that was added to it: autocast's, without a conversion pass);
//                      with ds, per-block partial sums of dh's final value as stored (in dr
//                      when given, else in dh): the column sums of the branch's gradient,
//                      which are its bias's gradient when the branch is a linear layer
//   ln_params_<T>      dw, db (and ds, of type ds_type): the partial sums of every block,
//                      added in block order
//   ln_fwd_f32_<O>[_v] ln_fwd_f32 with y stored as O = f16, bf16 (one rounding from f32)
//   ln_fwd_f32_<O>_r[_v] ln_fwd_f32_<O> with the residual r of type O too (autocast's
//                      f32 residual stream plus a half-precision branch: h = x + float(r),
//                      as PyTorch's mixed add computes it)
//   ln_bwd_f32_<G>[_v] ln_bwd_f32 reading dy as G = f16, bf16
//
// Built by `cargo xtask build-kernels` into crates/genesis-kernels/images/layernorm.fatbin. The
// CPU twins are in crates/genesis-kernels/src/layernorm.rs, which checks every argument (the
// kernels trust it) and documents the twin bound.
//
// Semantics (PyTorch's F.layer_norm over the last dim of C, rows contiguous [N, C]):
//   mean = h0 + sum (h - h0) / C with h0 the row's first h (a row of equal values has its
//   mean exactly), var = sum (h - mean)^2 / C (biased), rstd = 1 / sqrt(var + eps),
//   n = (h - mean) rstd, y = n w + b (w, b of [C] in T, each optional: 1 and 0).
// Backward, given dy, h, w, mean and rstd: dn = dy w,
//   dh = rstd ((dn - sum dn / C) - n (sum dn n / C))   (+ dh's old value when accumulating),
//   dw = sum_rows dy n, db = sum_rows dy                (+ old values when accumulating).
//
// Layout of the work. A row is cut into chunks of W = 16 / sizeof(T) elements (one 16-byte
// vector; the last may be partial); thread t of a block owns chunks t, t + T, ... of every
// row it sees (T = the block's threads, chosen by the launcher from C: ~4 chunks a thread
// in the forward, ~2 in the backward).
// The `_v` kernels load whole chunks as vectors (the launcher picks them when every operand
// is 16-byte aligned and C is a multiple of W); the others load the same chunks element by
// element, so both add in the same order.
//   * ln_fwd: a block a row (grid-stride). Pass 1 reads x (and r), forms h, keeps it in
//     dynamic shared memory (C floats; each thread reads back only what it wrote) and adds
//     the thread's h - h0 (every thread reads the row's first element for h0); a block sum
//     (xor-shuffles in each warp, then the warps' sums in order) times 1 / C plus h0 (one
//     fused multiply-add) gives mean; pass 2 adds (h - mean)^2 (fused multiply-adds) for var; pass 3 writes y.
//     Global memory is read once and written once.
//   * ln_bwd: block g owns rows [g R, (g + 1) R) (R from the launcher: the split depends on
//     N only, not on the device). Per row, pass 1 reads dy and h, adds dn and dn n for the two
//     block sums and each element's dy n and dy into the thread's columns of two shared f32
//     arrays (dw, db partials: only the owner thread touches a column, in row order); pass 2
//     reads dy and h again (L1/L2), writes dh and (with ds) adds each value as stored into a
//     third array. At the end the block writes its partials to workspace rows [P g] (dw),
//     [P g + 1] (db) and [P g + 2] (ds), each of C floats (P = 3 with ds, else 2).
//   * ln_params: blocks of 32 x 32 threads; column c = 32 blockIdx.x + threadIdx.x, thread y
//     adds the partials of blocks y, y + 32, ... in order, the 32 sums of a column are added
//     in order of y (shared memory), rounded once to T (after adding the old value when
//     accumulating).
// No float atomics: every output is a fixed sequence of f32 operations, so the results are
// bit-reproducible run to run (and across devices: nothing depends on the SM count).
//
// Numerical contract: the sums are f32 (trees across threads); the twin sums in order in
// f64. sqrtf and the divisions are IEEE (nvcc's defaults), products that the twin fuses are
// written as __fmaf_rn. See layernorm.rs for the bound.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

typedef unsigned long long u64;

// The arguments of every ln kernel (`Args` in layernorm.rs mirrors it, field by field).
struct LnArgs {
    u64 x, r, h, y, w, b;  // T*: forward input, residual (or 0), h (written when r), y; w, b or 0
    u64 mean, rstd;        // float* [rows]
    u64 dy, dh;            // T*: backward input, dh (written or accumulated)
    u64 dw, db;            // T* [cols] or 0
    u64 ws;                // float* [2 blocks][cols]: the backward's partial sums
    u64 dr;                // G* or 0: dh (its final value) also rounded to dy's type G
    u64 ds;                // [cols] of type ds_type, or 0: column sums of dh as stored
    u64 rows, cols;
    u64 rows_per_block;    // ln_bwd's R
    u64 blocks;            // ln_bwd's blocks (ln_params reads their partials)
    float eps;
    int accumulate;        // dh += instead of dh =
    int accumulate_params; // dw, db += instead of =
    int ds_type;           // ds's type: 0 f32, 1 f16, 2 bf16
};
static_assert(sizeof(LnArgs) == 168, "layernorm.rs mirrors LnArgs");

template <typename T> struct Ln;
template <> struct Ln<float> {
    static __device__ __forceinline__ float load(float x) { return x; }
    static __device__ __forceinline__ float store(float a) { return a; }
};
template <> struct Ln<__half> {
    static __device__ __forceinline__ float load(__half x) { return __half2float(x); }
    static __device__ __forceinline__ __half store(float a) { return __float2half_rn(a); }
};
template <> struct Ln<__nv_bfloat16> {
    static __device__ __forceinline__ float load(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __device__ __forceinline__ __nv_bfloat16 store(float a) { return __float2bfloat16_rn(a); }
};

// N elements of T loaded or stored as one vector (N sizeof(T) bytes: 16 for a chunk of the
// rows' type, 8 for a chunk of f32 rows read or written as 16-bit values).
template <typename T, int N> struct alignas(sizeof(T) * N) LnVec {
    T v[N];
};

// A chunk of a row: W = 16 / sizeof(T) elements of the rows' type T (one 16-byte vector).
template <typename T> struct Chunk {
    static const int W = 16 / sizeof(T);
};

// Loads chunk j of a row (elements j W .. j W + W - 1 that are < cols) as floats; the rest 0.
// E is the stored type, W the chunk's width (the rows' type's, which E may be narrower than).
template <typename E, int W, bool VEC>
__device__ __forceinline__ void load_chunk(const E *row, u64 j, u64 cols, float (&out)[W]) {
    if (VEC) {
        const LnVec<E, W> c = reinterpret_cast<const LnVec<E, W> *>(row)[j];
#pragma unroll
        for (int e = 0; e < W; ++e) out[e] = Ln<E>::load(c.v[e]);
    } else {
#pragma unroll
        for (int e = 0; e < W; ++e) {
            const u64 k = j * W + e;
            out[e] = k < cols ? Ln<E>::load(row[k]) : 0.0f;
        }
    }
}

// Stores chunk j of a row from floats (rounded to E), elements < cols only.
template <typename E, int W, bool VEC>
__device__ __forceinline__ void store_chunk(E *row, u64 j, u64 cols, const float (&in)[W]) {
    if (VEC) {
        LnVec<E, W> c;
#pragma unroll
        for (int e = 0; e < W; ++e) c.v[e] = Ln<E>::store(in[e]);
        reinterpret_cast<LnVec<E, W> *>(row)[j] = c;
    } else {
#pragma unroll
        for (int e = 0; e < W; ++e) {
            const u64 k = j * W + e;
            if (k < cols) row[k] = Ln<E>::store(in[e]);
        }
    }
}

// The block's sum of each thread's v: xor-shuffles in each warp, then the warps' sums in
// order; every thread gets it. Begins with a barrier, so `red` (32 floats) may be reused.
__device__ __forceinline__ float ln_block_sum(float v, float *red) {
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

// ---- ln_fwd: a block a row, h cached in shared memory; y of type O, the residual of R.
template <typename T, typename O, typename R, bool VEC>
__device__ __forceinline__ void fwd_impl(const LnArgs &a) {
    const int W = Chunk<T>::W;
    extern __shared__ __align__(16) float hs[];
    __shared__ float red[32];
    const u64 cols = a.cols, nch = (cols + W - 1) / W;
    const float inv_c = 1.0f / (float)cols;
    const T *wp = reinterpret_cast<const T *>(a.w), *bp = reinterpret_cast<const T *>(a.b);
    for (u64 row = blockIdx.x; row < a.rows; row += gridDim.x) {
        const u64 off = row * cols;
        // The row's first h (every thread reads it; the same arithmetic as pass 1's): the
        // sum is of h - h0, so that a row of equal values has its mean exactly (a sum of the
        // values themselves, rounded to f32, would land ulps off their value, which the
        // variance would take for spread).
        float h0 = Ln<T>::load(reinterpret_cast<const T *>(a.x)[off]);
        if (a.r) h0 = Ln<T>::load(Ln<T>::store(h0 + Ln<R>::load(reinterpret_cast<const R *>(a.r)[off])));
        float sum = 0.0f;
        for (u64 j = threadIdx.x; j < nch; j += blockDim.x) {
            float v[W];
            load_chunk<T, W, VEC>(reinterpret_cast<const T *>(a.x) + off, j, cols, v);
            if (a.r) {
                float rv[W];
                load_chunk<R, W, VEC>(reinterpret_cast<const R *>(a.r) + off, j, cols, rv);
                // h is rounded to T (it is the residual stream), and normalised as rounded.
#pragma unroll
                for (int e = 0; e < W; ++e) v[e] = Ln<T>::load(Ln<T>::store(v[e] + rv[e]));
                store_chunk<T, W, VEC>(reinterpret_cast<T *>(a.h) + off, j, cols, v);
            }
#pragma unroll
            for (int e = 0; e < W; ++e) {
                if (j * W + e < cols) {
                    hs[j * W + e] = v[e];
                    sum += v[e] - h0;
                }
            }
        }
        const float mean = __fmaf_rn(ln_block_sum(sum, red), inv_c, h0);
        float sq = 0.0f;
        for (u64 j = threadIdx.x; j < nch; j += blockDim.x) {
#pragma unroll
            for (int e = 0; e < W; ++e) {
                if (j * W + e < cols) {
                    const float d = hs[j * W + e] - mean;
                    sq = __fmaf_rn(d, d, sq);
                }
            }
        }
        const float var = ln_block_sum(sq, red) * inv_c;
        const float rstd = 1.0f / sqrtf(var + a.eps);
        if (threadIdx.x == 0) {
            reinterpret_cast<float *>(a.mean)[row] = mean;
            reinterpret_cast<float *>(a.rstd)[row] = rstd;
        }
        for (u64 j = threadIdx.x; j < nch; j += blockDim.x) {
            float wv[W], bv[W], o[W];
            if (wp) load_chunk<T, W, VEC>(wp, j, cols, wv);
            if (bp) load_chunk<T, W, VEC>(bp, j, cols, bv);
#pragma unroll
            for (int e = 0; e < W; ++e) {
                const u64 k = j * W + e;
                const float n = k < cols ? (hs[k] - mean) * rstd : 0.0f;
                o[e] = wp ? (bp ? __fmaf_rn(n, wv[e], bv[e]) : n * wv[e]) : (bp ? n + bv[e] : n);
            }
            store_chunk<O, W, VEC>(reinterpret_cast<O *>(a.y) + off, j, cols, o);
        }
        // The next row overwrites hs: every thread reads only its own entries, so no barrier
        // is needed; `red` is protected by the block sums' leading barriers.
    }
}

// ---- ln_bwd: R rows a block, dh, partial dw and db; dy of type G.
template <typename T, typename G, bool VEC>
__device__ __forceinline__ void bwd_impl(const LnArgs &a) {
    const int W = Chunk<T>::W;
    extern __shared__ __align__(16) float part[];  // dw partials [cols], db [cols], ds [cols]
    __shared__ float red[32];
    const u64 cols = a.cols, nch = (cols + W - 1) / W;
    const float inv_c = 1.0f / (float)cols;
    const T *wp = reinterpret_cast<const T *>(a.w);
    float *dwp = part, *dbp = part + cols, *dsp = part + 2 * cols;
    const u64 parts = a.ds ? 3 : 2;
    for (u64 g = blockIdx.x; g < a.blocks; g += gridDim.x) {
        for (u64 k = threadIdx.x * W; k < cols; k += (u64)blockDim.x * W) {
#pragma unroll
            for (int e = 0; e < W; ++e) {
                if (k + e < cols) {
                    dwp[k + e] = 0.0f;
                    dbp[k + e] = 0.0f;
                    if (a.ds) dsp[k + e] = 0.0f;
                }
            }
        }
        const u64 r0 = g * a.rows_per_block, r1 = min(a.rows, r0 + a.rows_per_block);
        for (u64 row = r0; row < r1; ++row) {
            const u64 off = row * cols;
            const float mean = reinterpret_cast<const float *>(a.mean)[row];
            const float rstd = reinterpret_cast<const float *>(a.rstd)[row];
            float s1 = 0.0f, s2 = 0.0f;
            for (u64 j = threadIdx.x; j < nch; j += blockDim.x) {
                float dyv[W], hv[W], wv[W];
                load_chunk<G, W, VEC>(reinterpret_cast<const G *>(a.dy) + off, j, cols, dyv);
                load_chunk<T, W, VEC>(reinterpret_cast<const T *>(a.h) + off, j, cols, hv);
                if (wp) load_chunk<T, W, VEC>(wp, j, cols, wv);
#pragma unroll
                for (int e = 0; e < W; ++e) {
                    const u64 k = j * W + e;
                    if (k < cols) {
                        const float n = (hv[e] - mean) * rstd;
                        const float dn = wp ? dyv[e] * wv[e] : dyv[e];
                        s1 += dn;
                        s2 = __fmaf_rn(dn, n, s2);
                        dwp[k] = __fmaf_rn(dyv[e], n, dwp[k]);
                        dbp[k] += dyv[e];
                    }
                }
            }
            const float ma = ln_block_sum(s1, red) * inv_c;
            const float mb = ln_block_sum(s2, red) * inv_c;
            for (u64 j = threadIdx.x; j < nch; j += blockDim.x) {
                float dyv[W], hv[W], wv[W], old[W], o[W];
                load_chunk<G, W, VEC>(reinterpret_cast<const G *>(a.dy) + off, j, cols, dyv);
                load_chunk<T, W, VEC>(reinterpret_cast<const T *>(a.h) + off, j, cols, hv);
                if (wp) load_chunk<T, W, VEC>(wp, j, cols, wv);
                if (a.accumulate) load_chunk<T, W, VEC>(reinterpret_cast<const T *>(a.dh) + off, j, cols, old);
#pragma unroll
                for (int e = 0; e < W; ++e) {
                    const float n = (hv[e] - mean) * rstd;
                    const float dn = wp ? dyv[e] * wv[e] : dyv[e];
                    float d = __fmaf_rn(-n, mb, dn - ma) * rstd;
                    if (a.accumulate) d += old[e];
                    o[e] = d;
                }
                store_chunk<T, W, VEC>(reinterpret_cast<T *>(a.dh) + off, j, cols, o);
                if (a.dr) store_chunk<G, W, VEC>(reinterpret_cast<G *>(a.dr) + off, j, cols, o);
                if (a.ds) {
                    // The value as stored: rounded to dr's type, else to dh's.
#pragma unroll
                    for (int e = 0; e < W; ++e) {
                        const u64 k = j * W + e;
                        if (k < cols) {
                            dsp[k] += a.dr ? Ln<G>::load(Ln<G>::store(o[e]))
                                           : Ln<T>::load(Ln<T>::store(o[e]));
                        }
                    }
                }
            }
        }
        float *wsr = reinterpret_cast<float *>(a.ws) + parts * g * cols;
        for (u64 k = threadIdx.x * W; k < cols; k += (u64)blockDim.x * W) {
#pragma unroll
            for (int e = 0; e < W; ++e) {
                if (k + e < cols) {
                    wsr[k + e] = dwp[k + e];
                    wsr[cols + k + e] = dbp[k + e];
                    if (a.ds) wsr[2 * cols + k + e] = dsp[k + e];
                }
            }
        }
        // The partials of the next g start from 0: every thread touches only its own
        // columns, so no barrier is needed.
    }
}

// ---- ln_params: dw, db and ds from the partials, blocks of 32 x 32.
template <typename T>
__device__ __forceinline__ void params_impl(const LnArgs &a) {
    __shared__ float sw[32][33], sb[32][33], sd[32][33];
    const u64 c = (u64)blockIdx.x * 32 + threadIdx.x;
    const int y = threadIdx.y;
    const u64 parts = a.ds ? 3 : 2;
    float w = 0.0f, b = 0.0f, d = 0.0f;
    if (c < a.cols) {
        const float *ws = reinterpret_cast<const float *>(a.ws);
        for (u64 g = y; g < a.blocks; g += 32) {
            w += ws[parts * g * a.cols + c];
            b += ws[(parts * g + 1) * a.cols + c];
            if (a.ds) d += ws[(parts * g + 2) * a.cols + c];
        }
    }
    sw[y][threadIdx.x] = w;
    sb[y][threadIdx.x] = b;
    sd[y][threadIdx.x] = d;
    __syncthreads();
    if (y != 0 || c >= a.cols) return;
    w = sw[0][threadIdx.x];
    b = sb[0][threadIdx.x];
    d = sd[0][threadIdx.x];
    for (int i = 1; i < 32; ++i) {
        w += sw[i][threadIdx.x];
        b += sb[i][threadIdx.x];
        d += sd[i][threadIdx.x];
    }
    T *dw = reinterpret_cast<T *>(a.dw), *db = reinterpret_cast<T *>(a.db);
    if (dw) dw[c] = Ln<T>::store(a.accumulate_params ? Ln<T>::load(dw[c]) + w : w);
    if (db) db[c] = Ln<T>::store(a.accumulate_params ? Ln<T>::load(db[c]) + b : b);
    if (a.ds) {
        if (a.ds_type == 1) {
            reinterpret_cast<__half *>(a.ds)[c] = Ln<__half>::store(d);
        } else if (a.ds_type == 2) {
            reinterpret_cast<__nv_bfloat16 *>(a.ds)[c] = Ln<__nv_bfloat16>::store(d);
        } else {
            reinterpret_cast<float *>(a.ds)[c] = d;
        }
    }
}

#define LN_FWD_R(NAME, T, O, R)                                                                          \
    extern "C" __global__ void __launch_bounds__(512) ln_fwd_##NAME(const LnArgs a) { fwd_impl<T, O, R, false>(a); } \
    extern "C" __global__ void __launch_bounds__(512) ln_fwd_##NAME##_v(const LnArgs a) { fwd_impl<T, O, R, true>(a); }
#define LN_FWD(NAME, T, O) LN_FWD_R(NAME, T, O, T)
#define LN_BWD(NAME, T, G)                                                                               \
    extern "C" __global__ void __launch_bounds__(512) ln_bwd_##NAME(const LnArgs a) { bwd_impl<T, G, false>(a); } \
    extern "C" __global__ void __launch_bounds__(512) ln_bwd_##NAME##_v(const LnArgs a) { bwd_impl<T, G, true>(a); }
#define LN_ALL(NAME, T)                                                                                  \
    LN_FWD(NAME, T, T)                                                                                   \
    LN_BWD(NAME, T, T)                                                                                   \
    extern "C" __global__ void __launch_bounds__(1024) ln_params_##NAME(const LnArgs a) { params_impl<T>(a); }

LN_ALL(f32, float)
LN_ALL(f16, __half)
LN_ALL(bf16, __nv_bfloat16)
// f32 rows whose y (forward) or dy (backward) is f16 or bf16: autocast's layer norm feeding a
// half-precision product, without a separate conversion.
LN_FWD(f32_f16, float, __half)
LN_FWD(f32_bf16, float, __nv_bfloat16)
LN_FWD_R(f32_f16_r, float, __half, __half)
LN_FWD_R(f32_bf16_r, float, __nv_bfloat16, __nv_bfloat16)
LN_BWD(f32_f16, float, __half)
LN_BWD(f32_bf16, float, __nv_bfloat16)
