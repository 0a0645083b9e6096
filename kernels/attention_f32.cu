// Flash attention of Genesis in float32 (FlashAttention-2's algorithm on the CUDA cores):
// forward `attn_fwd_f32_d64` and backward (`attn_bwd_dot_f32_d64`, `attn_bwd_dkdv_f32_d64`,
// `attn_bwd_dq_f32_d64`) for head dim 64. Inputs, outputs and every product are f32 (fused
// multiply-adds, no tensor cores): the precision of PyTorch's float32 attention, without the
// [Tq, Tk] scores in memory.
//
// Built by `cargo xtask build-kernels` into crates/genesis-kernels/images/attention_f32.fatbin.
// The semantics, the argument block `AttnArgs`, the layouts and the launcher's checks are
// attention.cu's (read its header); the CPU twins are `attention_forward` and
// `attention_backward` in crates/genesis-kernels/src/attention.rs.
//
// Threads: every kernel runs 256 threads as a 16 x 16 grid (ty = thread / 16, tx = thread %
// 16); a warp is two rows of the grid, so the 16 threads of a row of the grid reduce with
// `shfl.xor` over offsets 8, 4, 2, 1. A 64 x N tile of products gives thread (ty, tx) rows
// 4 ty .. 4 ty + 3 and columns N/16 tx .. N/16 tx + N/16 - 1; a 64 x 64 tile of head-dim outputs
// gives it the same rows and columns 4 tx .. 4 tx + 3.
//
// Shared memory: an operand that is the second factor of a product over the head dim (q k^T,
// do v^T) is stored transposed, [D][rows] (`load_t`), so that a thread reads 4 of its rows as
// one float4 and the 16 threads of a grid row read 16 consecutive float4 (no bank conflict);
// an operand that is summed over its rows (p v, ds q, ds k) is stored row-major [rows][D]
// (`load_r`); p and ds are written row-major with rows of N + 4 floats, so that the two grid
// rows of a warp, 4 rows apart, read different banks. Rows past the extent are zeros.
//
// Forward: a block owns 64 query rows of one (b, h) (query tiles in grid.x, the heaviest causal
// tile first; (b, h) in grid.y, strided) and walks the key tiles of 64 (causal: those below
// q0 + 64): S = Q K^T, x = S scale log2(e), masked entries -inf (only in tiles that can hold
// one), the running row max m, alpha = exp2(m_old - m_new), p = exp2(x - m_new) (a row whose max
// is still -inf uses 0 in its place), l = alpha l + rowsum(p) (thread partials, reduced at the
// end), O = alpha O + P V. End: O / l (0 when l = 0), lse = (m + log2 l) ln 2 (-inf when l = 0).
// Shared memory: Q^T, K^T, V, P: 66,560 bytes.
// Backward: `attn_bwd_dot` d_i = sum_c do_ic o_ic (a warp a row). `attn_bwd_dkdv`: a block owns
// 64 keys (K^T and V^T in shared memory) and walks the query tiles of 64 that can see them
// (causal: from the tile of query k0), Q^T and dO^T in shared memory: S^T = K Q^T,
// dP^T = V dO^T, P^T = exp2(S^T scale log2 e - lse log2 e) (0 where masked or lse = -inf),
// dS^T = P^T (dP^T - d), then dV^T += dO^T P and dK^T += Q^T dS (P and dS through shared
// memory, their 16-byte chunks swizzled by row so that a thread's four rows hit four banks);
// written once, transposed back (dK times scale). Shared memory 100,864 bytes.
// `attn_bwd_dq`: a block owns 64 queries (Q^T, dO^T, lse, d; the heaviest causal tile first)
// and walks the key tiles of 64 (causal: below q0 + 64): S, dP, dS as above, dQ += dS K;
// written once times scale. Shared memory 99,840 bytes. Every output element is summed by one
// thread in a fixed order: the backward is deterministic.
// Every kernel fits the 99 KiB of a block on compute capability 8.6 and 8.9.
//
// Numerics: products and sums in f32 in the order above; exp2f (2 ulp) of x log2(e) where the
// twin uses exp of x. The results differ from the twin's by a few f32 roundings of the sums
// involved (|gpu - twin| <= 2^-18 (|twin| + S), S the sum of the magnitudes of the terms:
// `tests/gpu_attention.rs`).
#include <stdint.h>

namespace {

typedef unsigned long long u64;

// attention.cu's `AttnArgs`, field by field (`Args` in attention.rs mirrors it).
struct AttnArgs {
    u64 q, k, v, o, dout, dq, dk, dv;  // device addresses of f32 elements (forward: o is written)
    u64 lse, dsum;                     // f32 [B, H, Tq]: lse (forward writes it), d (workspace)
    u64 st[8][3];  // element strides (batch, head, seq) of q, k, v, o, dout, dq, dk, dv
    u64 batch, heads, tq, tk;
    float scale;       // multiplies q . k
    float scale_log2;  // scale * log2(e)
    int causal;
    int pad_;
};

enum { S_Q = 0, S_K, S_V, S_O, S_DO, S_DQ, S_DK, S_DV };

#define NEG_INF __int_as_float(0xff800000)

constexpr int THREADS = 256;
constexpr int D = 64;
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

__device__ __forceinline__ const float* in_ptr(u64 base, const u64 (&st)[3], u64 b, u64 h) {
    return reinterpret_cast<const float*>(base) + b * st[0] + h * st[1];
}
__device__ __forceinline__ float* out_ptr(u64 base, const u64 (&st)[3], u64 b, u64 h) {
    return reinterpret_cast<float*>(base) + b * st[0] + h * st[1];
}

__device__ __forceinline__ float get(const float4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

__device__ __forceinline__ float row_max(float x) {
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
__device__ __forceinline__ float row_sum(float x) {
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// Rows [r0, r0 + R) of an operand (rows `st` floats apart, `rows` of them) into dst[d * LD + r],
// zeros past `rows`. Lanes take consecutive rows, so the stores hit consecutive banks.
template <int R, int LD = R>
__device__ __forceinline__ void load_t(float* dst, const float* src, u64 st, u64 r0, u64 rows) {
    constexpr int PER = THREADS / R;  // threads on one row
    const int r = threadIdx.x % R;
    const bool ok = r0 + r < rows;
    const float* row = src + (r0 + r) * st;
    for (int c4 = threadIdx.x / R; c4 < D / 4; c4 += PER) {
        const float4 x = ok ? *reinterpret_cast<const float4*>(row + 4 * c4) : make_float4(0.f, 0.f, 0.f, 0.f);
        dst[(4 * c4 + 0) * LD + r] = x.x;
        dst[(4 * c4 + 1) * LD + r] = x.y;
        dst[(4 * c4 + 2) * LD + r] = x.z;
        dst[(4 * c4 + 3) * LD + r] = x.w;
    }
}

// Rows [r0, r0 + R) into dst[r * D + c], zeros past `rows`.
template <int R>
__device__ __forceinline__ void load_r(float* dst, const float* src, u64 st, u64 r0, u64 rows) {
    for (int i = threadIdx.x; i < R * D / 4; i += THREADS) {
        const int r = i / (D / 4), c4 = i % (D / 4);
        const float4 x = r0 + r < rows ? *reinterpret_cast<const float4*>(src + (r0 + r) * st + 4 * c4)
                                       : make_float4(0.f, 0.f, 0.f, 0.f);
        *reinterpret_cast<float4*>(dst + r * D + 4 * c4) = x;
    }
}

// acc[i][j] += sum_d at[d][4 ty + i] * bt[d][N/16 tx + j]: at holds 64 rows (lines of LDA
// floats), bt N (lines of LDB).
template <int N, int LDA = 64, int LDB = N>
__device__ __forceinline__ void product_t(float (&acc)[4][N / 16], const float* at, const float* bt, int ty, int tx) {
    constexpr int JN = N / 16;
#pragma unroll 8
    for (int d = 0; d < D; ++d) {
        const float4 a = *reinterpret_cast<const float4*>(at + d * LDA + 4 * ty);
        float bv[JN];
        if constexpr (JN == 4) {
            const float4 b = *reinterpret_cast<const float4*>(bt + d * LDB + 4 * tx);
            bv[0] = b.x, bv[1] = b.y, bv[2] = b.z, bv[3] = b.w;
        } else {
            const float2 b = *reinterpret_cast<const float2*>(bt + d * LDB + 2 * tx);
            bv[0] = b.x, bv[1] = b.y;
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < JN; ++j) acc[i][j] = fmaf(get(a, i), bv[j], acc[i][j]);
    }
}

// The 16-byte chunk that holds chunk `c` of row `r` of a swizzled [rows][64] tile: rows four
// apart (the rows one thread writes) put a chunk in different banks.
__device__ __forceinline__ int swizzle(int c, int r) { return c ^ ((r >> 2) & 7); }

// acc[i][e] += sum_c m[4 ty + i][c] * b[c][4 tx + e] over c < N: m row-major with rows of LDM
// floats (N + 4: the two grid rows of a warp, 4 rows apart, read other banks), b row-major with
// rows of LDB (SWZ: a swizzled [N][64] tile).
template <int N, int LDM = N + 4, int LDB = D, bool SWZ = false>
__device__ __forceinline__ void product_r(float (&acc)[4][4], const float* m, const float* b, int ty, int tx) {
#pragma unroll 2
    for (int c = 0; c < N; c += 4) {
        float4 mv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) mv[i] = *reinterpret_cast<const float4*>(m + (4 * ty + i) * LDM + c);
#pragma unroll
        for (int cc = 0; cc < 4; ++cc) {
            const int chunk = SWZ ? swizzle(tx, c + cc) : tx;
            const float4 bv = *reinterpret_cast<const float4*>(b + (c + cc) * LDB + 4 * chunk);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float x = get(mv[i], cc);
                acc[i][0] = fmaf(x, bv.x, acc[i][0]);
                acc[i][1] = fmaf(x, bv.y, acc[i][1]);
                acc[i][2] = fmaf(x, bv.z, acc[i][2]);
                acc[i][3] = fmaf(x, bv.w, acc[i][3]);
            }
        }
    }
}

// Rows 4 ty + i of a 64-row tile starting at r0 (those below `rows`), columns 4 tx .. 4 tx + 3,
// times `mul`.
__device__ __forceinline__ void store_rows(float* base, u64 st, u64 r0, u64 rows, const float (&acc)[4][4], float mul, int ty, int tx) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const u64 r = r0 + 4 * ty + i;
        if (r < rows) {
            *reinterpret_cast<float4*>(base + r * st + 4 * tx) =
                make_float4(acc[i][0] * mul, acc[i][1] * mul, acc[i][2] * mul, acc[i][3] * mul);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Forward.

constexpr int FWD_SMEM = (2 * D * 64 + 64 * D + 64 * 68) * 4;

__device__ __forceinline__ void attn_fwd(const AttnArgs& a) {
    extern __shared__ __align__(16) float smem[];
    float* qt = smem;          // [D][64]
    float* kt = qt + D * 64;   // [D][64]
    float* vr = kt + D * 64;   // [64][D]
    float* ps = vr + 64 * D;   // [64][68]
    const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
    const u64 tq = a.tq, tk = a.tk, bhn = a.batch * a.heads;
    const u64 tiles = (tq + 63) / 64;
    const u64 q0 = (a.causal ? tiles - 1 - blockIdx.x : blockIdx.x) * 64;
    const u64 kend = a.causal ? (q0 + 64 < tk ? q0 + 64 : tk) : tk;
    float* lse = reinterpret_cast<float*>(a.lse);
    for (u64 bh = blockIdx.y; bh < bhn; bh += gridDim.y) {
        const u64 b = bh / a.heads, h = bh % a.heads;
        load_t<64>(qt, in_ptr(a.q, a.st[S_Q], b, h), a.st[S_Q][2], q0, tq);
        float o[4][4] = {};
        float m[4], l[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) m[i] = NEG_INF, l[i] = 0.f;
        for (u64 k0 = 0; k0 < kend; k0 += 64) {
            __syncthreads();  // the previous tile's K, V and P are read (and Q is written)
            load_t<64>(kt, in_ptr(a.k, a.st[S_K], b, h), a.st[S_K][2], k0, tk);
            load_r<64>(vr, in_ptr(a.v, a.st[S_V], b, h), a.st[S_V][2], k0, tk);
            __syncthreads();
            float s[4][4] = {};
            product_t<64>(s, qt, kt, ty, tx);
            const bool edge = k0 + 64 > tk || (a.causal && k0 + 63 > q0);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const u64 qi = q0 + 4 * ty + i;
                float mx = NEG_INF;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const u64 kj = k0 + 4 * tx + j;
                    float x = s[i][j] * a.scale_log2;
                    if (edge && (kj >= tk || (a.causal && kj > qi))) x = NEG_INF;
                    s[i][j] = x;
                    mx = fmaxf(mx, x);
                }
                const float mn = fmaxf(m[i], row_max(mx));
                const float use = mn == NEG_INF ? 0.f : mn;
                const float alpha = exp2f(m[i] - use);
                m[i] = mn;
                float sum = 0.f;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    s[i][j] = exp2f(s[i][j] - use);
                    sum += s[i][j];
                }
                l[i] = l[i] * alpha + sum;
#pragma unroll
                for (int e = 0; e < 4; ++e) o[i][e] *= alpha;
                *reinterpret_cast<float4*>(ps + (4 * ty + i) * 68 + 4 * tx) = make_float4(s[i][0], s[i][1], s[i][2], s[i][3]);
            }
            __syncthreads();
            product_r<64>(o, ps, vr, ty, tx);
        }
        float* out = out_ptr(a.o, a.st[S_O], b, h);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float li = row_sum(l[i]);
            const u64 qi = q0 + 4 * ty + i;
            float inv = li > 0.f ? 1.f / li : 0.f;
            if (qi < tq) {
                *reinterpret_cast<float4*>(out + qi * a.st[S_O][2] + 4 * tx) =
                    make_float4(o[i][0] * inv, o[i][1] * inv, o[i][2] * inv, o[i][3] * inv);
                if (tx == 0) lse[bh * tq + qi] = li > 0.f ? (m[i] + log2f(li)) * LN2 : NEG_INF;
            }
        }
        __syncthreads();  // Q is reloaded for the next (b, h)
    }
}

// ---------------------------------------------------------------------------------------------
// Backward: d = rowsum(dO o).

__device__ __forceinline__ void attn_bwd_dot(const AttnArgs& a) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const u64 rows = a.batch * a.heads * a.tq;
    float* dsum = reinterpret_cast<float*>(a.dsum);
    for (u64 r = (u64)blockIdx.x * warps + warp; r < rows; r += (u64)gridDim.x * warps) {
        const u64 bh = r / a.tq, i = r % a.tq, b = bh / a.heads, h = bh % a.heads;
        const float* o = in_ptr(a.o, a.st[S_O], b, h) + i * a.st[S_O][2];
        const float* d = in_ptr(a.dout, a.st[S_DO], b, h) + i * a.st[S_DO][2];
        const float2 x = *reinterpret_cast<const float2*>(o + 2 * lane);
        const float2 y = *reinterpret_cast<const float2*>(d + 2 * lane);
        float s = fmaf(x.y, y.y, x.x * y.x);
#pragma unroll
        for (int k = 16; k > 0; k >>= 1) s += __shfl_xor_sync(0xffffffffu, s, k);
        if (lane == 0) dsum[r] = s;
    }
}

// ---------------------------------------------------------------------------------------------
// Backward: dK and dV, a block per 64 keys, query tiles of 64. The sums over the queries run
// transposed (dV^T = dO^T P, dK^T = Q^T dS, thread (ty, tx) holding head-dim rows 4 ty .. and
// keys 4 tx ..), so that Q and dO are needed only as Q^T and dO^T.

constexpr int DKDV_SMEM = (2 * D * 64 + 2 * D * 68 + 2 * 64 * 64 + 2 * 64) * 4;

__device__ __forceinline__ void attn_bwd_dkdv(const AttnArgs& a) {
    extern __shared__ __align__(16) float smem[];
    float* kt = smem;          // K^T [D][64]
    float* vt = kt + D * 64;   // V^T [D][64]
    float* qt = vt + D * 64;   // Q^T [D][68]
    float* gt = qt + D * 68;   // dO^T [D][68]
    float* ps = gt + D * 68;   // P [64 queries][64 keys], swizzled
    float* ds = ps + 64 * 64;  // dS [64][64], swizzled
    float* ls = ds + 64 * 64;  // lse [64]
    float* dd = ls + 64;       // d [64]
    const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
    const u64 tq = a.tq, tk = a.tk, bhn = a.batch * a.heads;
    const u64 k0 = (u64)blockIdx.x * 64;
    const float* lse = reinterpret_cast<const float*>(a.lse);
    const float* dsum = reinterpret_cast<const float*>(a.dsum);
    for (u64 bh = blockIdx.y; bh < bhn; bh += gridDim.y) {
        const u64 b = bh / a.heads, h = bh % a.heads;
        load_t<64>(kt, in_ptr(a.k, a.st[S_K], b, h), a.st[S_K][2], k0, tk);
        load_t<64>(vt, in_ptr(a.v, a.st[S_V], b, h), a.st[S_V][2], k0, tk);
        float dkt[4][4] = {}, dvt[4][4] = {};
        // Causal: query i sees key j only when i >= j, so the tiles from query k0 on.
        for (u64 q0 = a.causal ? k0 : 0; q0 < tq; q0 += 64) {
            __syncthreads();  // the previous tile is read (and K, V are written)
            load_t<64, 68>(qt, in_ptr(a.q, a.st[S_Q], b, h), a.st[S_Q][2], q0, tq);
            load_t<64, 68>(gt, in_ptr(a.dout, a.st[S_DO], b, h), a.st[S_DO][2], q0, tq);
            if (threadIdx.x < 64) {
                const u64 i = q0 + threadIdx.x;
                ls[threadIdx.x] = i < tq ? lse[bh * tq + i] : NEG_INF;
                dd[threadIdx.x] = i < tq ? dsum[bh * tq + i] : 0.f;
            }
            __syncthreads();
            // S^T and dP^T: keys 4 ty + r, queries 4 tx + c.
            float s[4][4] = {}, dp[4][4] = {};
            product_t<64, 64, 68>(s, kt, qt, ty, tx);
            product_t<64, 64, 68>(dp, vt, gt, ty, tx);
            const bool edge = k0 + 64 > tk || (a.causal && k0 + 63 > q0);
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const int il = 4 * tx + c;
                const u64 qi = q0 + il;
                const float li = ls[il], di = dd[il];
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const u64 kj = k0 + 4 * ty + r;
                    float p = exp2f(s[r][c] * a.scale_log2 - li * LOG2E);
                    if (li == NEG_INF || (edge && (kj >= tk || (a.causal && kj > qi)))) p = 0.f;
                    s[r][c] = p;
                    dp[r][c] = p * (dp[r][c] - di);
                }
                const int chunk = swizzle(ty, il);
                *reinterpret_cast<float4*>(ps + il * 64 + 4 * chunk) = make_float4(s[0][c], s[1][c], s[2][c], s[3][c]);
                *reinterpret_cast<float4*>(ds + il * 64 + 4 * chunk) = make_float4(dp[0][c], dp[1][c], dp[2][c], dp[3][c]);
            }
            __syncthreads();
            product_r<64, 68, 64, true>(dvt, gt, ps, ty, tx);
            product_r<64, 68, 64, true>(dkt, qt, ds, ty, tx);
        }
        // dK[j][4 ty ..] = scale dK^T[4 ty ..][j] for keys j = k0 + 4 tx + e.
        float* dk = out_ptr(a.dk, a.st[S_DK], b, h);
        float* dv = out_ptr(a.dv, a.st[S_DV], b, h);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const u64 kj = k0 + 4 * tx + e;
            if (kj < tk) {
                *reinterpret_cast<float4*>(dk + kj * a.st[S_DK][2] + 4 * ty) =
                    make_float4(dkt[0][e] * a.scale, dkt[1][e] * a.scale, dkt[2][e] * a.scale, dkt[3][e] * a.scale);
                *reinterpret_cast<float4*>(dv + kj * a.st[S_DV][2] + 4 * ty) =
                    make_float4(dvt[0][e], dvt[1][e], dvt[2][e], dvt[3][e]);
            }
        }
        __syncthreads();  // K and V are reloaded for the next (b, h)
    }
}

// ---------------------------------------------------------------------------------------------
// Backward: dQ, a block per 64 queries, key tiles of 64.

constexpr int DQ_SMEM = (4 * D * 64 + 64 * D + 64 * 68 + 2 * 64) * 4;

__device__ __forceinline__ void attn_bwd_dq(const AttnArgs& a) {
    extern __shared__ __align__(16) float smem[];
    float* qt = smem;          // [D][64]
    float* gt = qt + D * 64;   // dO^T [D][64]
    float* kt = gt + D * 64;   // [D][64]
    float* vt = kt + D * 64;   // [D][64]
    float* kr = vt + D * 64;   // [64][D]
    float* ds = kr + 64 * D;   // [64][68]
    float* ls = ds + 64 * 68;  // lse [64]
    float* dd = ls + 64;       // d [64]
    const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
    const u64 tq = a.tq, tk = a.tk, bhn = a.batch * a.heads;
    // Causal: the heaviest query tile (the last) first.
    const u64 tiles = (tq + 63) / 64;
    const u64 q0 = (a.causal ? tiles - 1 - blockIdx.x : blockIdx.x) * 64;
    const u64 kend = a.causal ? (q0 + 64 < tk ? q0 + 64 : tk) : tk;
    const float* lse = reinterpret_cast<const float*>(a.lse);
    const float* dsum = reinterpret_cast<const float*>(a.dsum);
    for (u64 bh = blockIdx.y; bh < bhn; bh += gridDim.y) {
        const u64 b = bh / a.heads, h = bh % a.heads;
        load_t<64>(qt, in_ptr(a.q, a.st[S_Q], b, h), a.st[S_Q][2], q0, tq);
        load_t<64>(gt, in_ptr(a.dout, a.st[S_DO], b, h), a.st[S_DO][2], q0, tq);
        if (threadIdx.x < 64) {
            const u64 i = q0 + threadIdx.x;
            ls[threadIdx.x] = i < tq ? lse[bh * tq + i] : NEG_INF;
            dd[threadIdx.x] = i < tq ? dsum[bh * tq + i] : 0.f;
        }
        float dq[4][4] = {};
        for (u64 k0 = 0; k0 < kend; k0 += 64) {
            __syncthreads();  // the previous tile is read (and Q, dO, lse, d are written)
            load_t<64>(kt, in_ptr(a.k, a.st[S_K], b, h), a.st[S_K][2], k0, tk);
            load_t<64>(vt, in_ptr(a.v, a.st[S_V], b, h), a.st[S_V][2], k0, tk);
            load_r<64>(kr, in_ptr(a.k, a.st[S_K], b, h), a.st[S_K][2], k0, tk);
            __syncthreads();
            float s[4][4] = {}, dp[4][4] = {};
            product_t<64>(s, qt, kt, ty, tx);
            product_t<64>(dp, gt, vt, ty, tx);
            const bool edge = k0 + 64 > tk || (a.causal && k0 + 63 > q0);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int il = 4 * ty + i;
                const u64 qi = q0 + il;
                const float li = ls[il], di = dd[il];
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const u64 kj = k0 + 4 * tx + j;
                    float p = exp2f(s[i][j] * a.scale_log2 - li * LOG2E);
                    if (li == NEG_INF || (edge && (kj >= tk || (a.causal && kj > qi)))) p = 0.f;
                    dp[i][j] = p * (dp[i][j] - di);
                }
                *reinterpret_cast<float4*>(ds + il * 68 + 4 * tx) = make_float4(dp[i][0], dp[i][1], dp[i][2], dp[i][3]);
            }
            __syncthreads();
            product_r<64>(dq, ds, kr, ty, tx);
        }
        store_rows(out_ptr(a.dq, a.st[S_DQ], b, h), a.st[S_DQ][2], q0, tq, dq, a.scale, ty, tx);
        __syncthreads();  // Q, dO, lse and d are reloaded for the next (b, h)
    }
}

static_assert(FWD_SMEM == 66560, "attention.rs: f32_shared_bytes");
static_assert(DKDV_SMEM == 100864, "attention.rs: f32_shared_bytes");
static_assert(DKDV_SMEM <= 99 * 1024, "a block's shared memory on compute capability 8.6 and 8.9");
static_assert(DQ_SMEM == 99840, "attention.rs: f32_shared_bytes");
static_assert(DQ_SMEM <= 99 * 1024, "a block's shared memory on compute capability 8.6 and 8.9");

}  // namespace

// Entry points: forward and dQ grid (query tiles of 64, min(B H, 65535)), dK/dV grid (key tiles
// of 64, min(B H, 65535)), 256 threads and the dynamic shared memory above; dot: any grid of
// 256-thread blocks.
extern "C" __global__ void __launch_bounds__(THREADS, 2) attn_fwd_f32_d64(const AttnArgs a) { attn_fwd(a); }
extern "C" __global__ void __launch_bounds__(THREADS) attn_bwd_dot_f32_d64(const AttnArgs a) { attn_bwd_dot(a); }
extern "C" __global__ void __launch_bounds__(THREADS, 2) attn_bwd_dkdv_f32_d64(const AttnArgs a) { attn_bwd_dkdv(a); }
extern "C" __global__ void __launch_bounds__(THREADS, 2) attn_bwd_dq_f32_d64(const AttnArgs a) { attn_bwd_dq(a); }
