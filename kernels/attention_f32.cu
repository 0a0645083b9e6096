// Flash attention of Genesis in float32 (FlashAttention-2's algorithm): forward
// `attn_fwd_f32_d64` and backward (`attn_bwd_dot_f32_d64`, `attn_bwd_dkdv_f32_d64`,
// `attn_bwd_dq_f32_d64`) for head dim 64. Inputs and outputs are f32; every product runs on
// the tensor cores as three TF32 products (`mma.sync.m16n8k8`, "3xTF32"): an f32 value x is
// split into big = tf32(x) and small = tf32(x - big), and a b is taken as
// a_small b_big + a_big b_big + a_big b_small with f32 accumulation (a_small b_small, about
// 2^-22 |a b|, is left out). That is the arithmetic of PyTorch's float32 attention on compute
// capability 8.0 and newer (its memory-efficient kernels' `OpMultiplyAddFastF32`): f32
// accuracy up to a few units of 2^-22 a product, without the [Tq, Tk] scores in memory.
//
// Built by `cargo xtask build-kernels` into crates/genesis-kernels/images/attention_f32.fatbin.
// The semantics, the argument block `AttnArgs`, the layouts and the launcher's checks (16-byte
// aligned rows) are attention.cu's (read its header); the CPU twins are `attention_forward` and
// `attention_backward` in crates/genesis-kernels/src/attention.rs.
//
// Threads: 128 a block, 4 warps; a block owns 64 rows (queries, or keys for dK/dV), warp w the
// 16 rows 16 w .. 16 w + 15. In a warp g = lane / 4, t = lane % 4, and the m16n8k8 fragments
// are: A (16 x 8) a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4); B (8 x 8, k x n)
// b0 (t, g), b1 (t + 4, g); C (16 x 8) c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t),
// c3 (g + 8, 2t + 1). A product's C tile becomes the next product's A operand (P for P V, dS
// for dS K) without shared memory by numbering k inside each group of 8 as 0, 4, 1, 5, 2, 6,
// 3, 7: A's (g, t) is C's (g, 2t) and A's (g, t + 4) is C's (g, 2t + 1); the B operand of that
// product then reads rows 2t and 2t + 1 of its group (a sum's order changes, not its terms).
//
// Shared memory: every tile is 64 rows of D = 64 floats, rows LD = 68 floats apart, staged by
// 16-byte `cp.async` copies (zeros past the extent). With LD = 68 (4 mod 32 banks) each
// fragment read of a warp, (row g, col t) or (row 2t, col g), touches 32 different banks.
//
// Forward: a block owns 64 queries of one (b, h) (query tiles in grid.x, the heaviest causal
// tile first; (b, h) in grid.y, strided) and walks the key tiles of 64 (causal: those below
// q0 + 64), each staged as its tf32 parts (`stage_split`: a value split once a block, not once
// a warp; the next tile's reads issued before the barrier that frees the planes):
// S = Q K^T (Q's split fragments kept in registers),
// x = S scale log2(e), masked entries -inf (only in tiles that can hold one), the running row
// max m, alpha = exp2(m_old - m_new), p = exp2(x - m_new) (a row whose max is still -inf uses
// 0 in its place), l = alpha l + rowsum(p) (thread partials, reduced at the end),
// O = alpha O + P V. End: O / l (0 when l = 0), lse = (m + log2 l) ln 2 (-inf when l = 0).
// Shared memory: Q, the parts of K and V: 87,040 bytes.
// Backward: `attn_bwd_dot` d_i = sum_c do_ic o_ic (a warp a row). `attn_bwd_dkdv`: a block owns
// 64 keys (K, V) and walks the query tiles of 64 that can see them (causal: from the tile of
// query k0), with their lse and d: S^T = K Q^T, dP^T = V dO^T, P^T = exp2(S^T scale log2 e -
// lse log2 e) (0 where masked or lse = -inf), dS^T = P^T (dP^T - d), dV += P^T dO and
// dK += dS^T Q; written once (dK times scale). Shared memory 70,144 bytes.
// `attn_bwd_dq`: a block owns 64 queries (Q, dO; lse and d in registers; the heaviest causal
// tile first) and walks the key tiles of 64 (causal: below q0 + 64): S, dP, dS as above,
// dQ += dS K; written once times scale. Shared memory 69,632 bytes. Every output element is
// summed by one thread in a fixed order: the backward is deterministic.
// Every kernel fits the 99 KiB of a block on compute capability 8.6 and 8.9.
//
// Numerics: 3xTF32 products (above) accumulated in f32 in the tensor cores' order; exp2f
// (2 ulp) of x log2(e) where the twin uses exp of x. `tests/gpu_attention.rs` bounds the
// difference to the twin by a few units of 2^-20 of the sums of the magnitudes involved.
#include <stdint.h>

#include "cp_async.cuh"

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

constexpr int THREADS = 128;
constexpr int D = 64;
constexpr int LD = D + 4;      // floats a row of a tile in shared memory
constexpr int TILE = 64 * LD;  // floats a tile
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

__device__ __forceinline__ const float* in_ptr(u64 base, const u64 (&st)[3], u64 b, u64 h) {
    return reinterpret_cast<const float*>(base) + b * st[0] + h * st[1];
}
__device__ __forceinline__ float* out_ptr(u64 base, const u64 (&st)[3], u64 b, u64 h) {
    return reinterpret_cast<float*>(base) + b * st[0] + h * st[1];
}

// Rows [r0, r0 + 64) of an operand (rows `st` floats apart, `rows` of them, 16-byte aligned)
// into dst[r * LD + c] by cp.async (the caller commits); zeros past `rows`.
__device__ __forceinline__ void load_tile(float* dst, const float* src, u64 st, u64 r0, u64 rows) {
#pragma unroll
    for (int i = 0; i < 64 * D / 4 / THREADS; ++i) {
        const int e = threadIdx.x + THREADS * i;
        const int r = e / (D / 4), c = (e % (D / 4)) * 4;
        const bool ok = r0 + r < rows;
        cp_async16(smem_addr(dst + r * LD + c), ok ? src + (r0 + r) * st + c : src, ok ? 16 : 0);
    }
}

// x as the tf32 values big (rounded to nearest, ties away) and small (the rest, rounded):
// x = big + small within 2^-22 |x|. `cvt` to tf32 leaves the low 13 bits zero, so big is
// also the f32 value subtracted.
__device__ __forceinline__ void split(float x, uint32_t& big, uint32_t& small) {
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(big) : "f"(x));
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(small) : "f"(x - __uint_as_float(big)));
}

__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8 x 4 blocks of f32 (8 x 8 of b16 to `ldmatrix`): lane l gives the address of row l % 8
// of block l / 8 (16 bytes), and register m of thread (g, t) is element (g, t) of block m: a
// B fragment's b0 or b1 read from rows of the tile.
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const float* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// An A operand split in two (`big`, `small`).
struct FragA {
    uint32_t big[4], small[4];
};

// A B operand's tile in shared memory: raw f32 values, split as they are read.
struct RawTile {
    const float* p;
    __device__ __forceinline__ void get(int at, uint32_t& big, uint32_t& small) const { split(p[at], big, small); }
};

// A B operand's tile split once when staged (`stage_split`): the tf32 parts in two planes.
struct SplitTile {
    const float* big;
    const float* small;
    __device__ __forceinline__ void get(int at, uint32_t& b, uint32_t& s) const {
        b = __float_as_uint(big[at]);
        s = __float_as_uint(small[at]);
    }
};

// The A fragment of rows r .. r + 15 (the thread's g, g + 8 given as `row`) and k columns
// k0 .. k0 + 7 of a tile.
__device__ __forceinline__ FragA frag_a(const float* tile, int row, int k0) {
    // One `ldmatrix` (`ldsm4`): blocks (rows r .. r + 7 | r + 8 .. r + 15) x (columns k0 ..
    // k0 + 3 | k0 + 4 .. k0 + 7) are a0, a1, a2, a3.
    const int lane = threadIdx.x & 31, m = lane >> 3;
    const int r = row - (lane >> 2) + 8 * (m & 1) + (lane & 7);
    uint32_t x[4];
    ldsm4(x, tile + r * LD + k0 + 4 * (m >> 1));
    FragA f;
#pragma unroll
    for (int i = 0; i < 4; ++i) split(__uint_as_float(x[i]), f.big[i], f.small[i]);
    return f;
}

// A C tile (c0 .. c3) as an A operand with k numbered 0, 4, 1, 5, ... (see the top).
__device__ __forceinline__ FragA frag_c(const float (&c)[4]) {
    FragA f;
    split(c[0], f.big[0], f.small[0]);
    split(c[2], f.big[1], f.small[1]);
    split(c[1], f.big[2], f.small[2]);
    split(c[3], f.big[3], f.small[3]);
    return f;
}

// The three passes of 3xTF32 over 8 accumulators sharing the A operand: a_small b_big and
// a_big b_big over the 8 (the big parts of the 8 B fragments held), then a_big b_small over the
// 8, so that consecutive products write different accumulators (one accumulator's three would
// wait on each other). `at(i)`: the offset of value i (0 b0, 1 b1) of fragment n in the tile.
template <class B, class At>
__device__ __forceinline__ void product8(float (&acc)[8][4], const FragA& a, const B& tile, At at) {
    uint32_t bb[8][2];
#pragma unroll
    for (int n = 0; n < 8; ++n) {
        uint32_t unused;
        tile.get(at(n, 0), bb[n][0], unused);
        tile.get(at(n, 1), bb[n][1], unused);
        mma(acc[n], a.small, bb[n][0], bb[n][1]);
    }
#pragma unroll
    for (int n = 0; n < 8; ++n) mma(acc[n], a.big, bb[n][0], bb[n][1]);
#pragma unroll
    for (int n = 0; n < 8; ++n) {
        uint32_t unused, bs0, bs1;
        tile.get(at(n, 0), unused, bs0);
        tile.get(at(n, 1), unused, bs1);
        mma(acc[n], a.big, bs0, bs1);
    }
}

// acc[j] += A B_j over k0 .. k0 + 7 where B_j's column n is row 8 j + n of `tile` (k along
// the tile's columns): S = Q K^T and its kind.
template <class B>
__device__ __forceinline__ void product_rows(float (&acc)[8][4], const FragA& a, const B& tile, int k0, int g, int t) {
    product8(acc, a, tile, [=](int j, int i) { return (8 * j + g) * LD + k0 + t + 4 * i; });
}

// `product_rows` from staged parts: each plane's 8 fragments by 4 `ldmatrix` (fragments j and
// j + 1 by one: rows 8 j .. 8 j + 15, columns k0 .. k0 + 3 and k0 + 4 .. k0 + 7), the passes as
// `product8`'s.
__device__ __forceinline__ void product_rows(float (&acc)[8][4], const FragA& a, const SplitTile& tile, int k0, int g, int t) {
    const int lane = 4 * g + t, m = lane >> 3;
    const int at = (8 * (m >> 1) + (lane & 7)) * LD + k0 + 4 * (m & 1);
    uint32_t bb[8][2];
#pragma unroll
    for (int jp = 0; jp < 4; ++jp) {
        uint32_t x[4];
        ldsm4(x, tile.big + at + 16 * jp * LD);
        bb[2 * jp][0] = x[0], bb[2 * jp][1] = x[1], bb[2 * jp + 1][0] = x[2], bb[2 * jp + 1][1] = x[3];
        mma(acc[2 * jp], a.small, x[0], x[1]);
        mma(acc[2 * jp + 1], a.small, x[2], x[3]);
    }
#pragma unroll
    for (int n = 0; n < 8; ++n) mma(acc[n], a.big, bb[n][0], bb[n][1]);
#pragma unroll
    for (int jp = 0; jp < 4; ++jp) {
        uint32_t x[4];
        ldsm4(x, tile.small + at + 16 * jp * LD);
        mma(acc[2 * jp], a.big, x[0], x[1]);
        mma(acc[2 * jp + 1], a.big, x[2], x[3]);
    }
}

// acc[n] += A B_n where A comes from C tile j (k = rows 8 j .. 8 j + 7 of `tile` in the order of
// `frag_c`) and B_n's column is tile column 8 n + g: O += P V and its kind.
template <class B>
__device__ __forceinline__ void product_cols(float (&acc)[8][4], const FragA& a, const B& tile, int j, int g, int t) {
    product8(acc, a, tile, [=](int n, int i) { return (8 * j + 2 * t + i) * LD + 8 * n + g; });
}

// The B operand tile at p: its staged parts (planes at p and p + TILE) when PLANES, else its
// raw values.
template <bool PLANES>
__device__ __forceinline__ auto b_tile(const float* p) {
    if constexpr (PLANES) return SplitTile{p, p + TILE};
    else return RawTile{p};
}

// The backward's two score products of a tile pair: s = A1 B1^T and dp = A2 B2^T over the head
// dim (A1, A2 the raw tiles of the block's rows; S^T and dP^T in dK/dV, S and dP in dQ).
template <class B>
__device__ __forceinline__ void scores(float (&s)[8][4], float (&dp)[8][4], const float* a1, const B& b1,
                                       const float* a2, const B& b2, int row, int g, int t) {
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
        product_rows(s, frag_a(a1, row, 8 * kk), b1, 8 * kk, g, t);
        product_rows(dp, frag_a(a2, row, 8 * kk), b2, 8 * kk, g, t);
    }
}

// Rows [r0, r0 + 64) of an operand (as `load_tile`) read into registers: `stage_split` stores
// them. Read before the barrier that frees the planes, so that the reads' latency overlaps
// the wait.
struct Staged {
    float4 x[64 * D / 4 / THREADS];
};
__device__ __forceinline__ Staged stage_read(const float* src, u64 st, u64 r0, u64 rows) {
    Staged v;
#pragma unroll
    for (int i = 0; i < 64 * D / 4 / THREADS; ++i) {
        const int e = threadIdx.x + THREADS * i;
        const int r = e / (D / 4), c = (e % (D / 4)) * 4;
        v.x[i] = r0 + r < rows ? *reinterpret_cast<const float4*>(src + (r0 + r) * st + c)
                               : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    return v;
}
// The staged rows' tf32 parts into the planes big[r * LD + c] and small[r * LD + c].
__device__ __forceinline__ void stage_split(float* big, float* small, const Staged& v) {
#pragma unroll
    for (int i = 0; i < 64 * D / 4 / THREADS; ++i) {
        const int e = threadIdx.x + THREADS * i;
        const int at = e / (D / 4) * LD + (e % (D / 4)) * 4;
        uint32_t b[4], s[4];
        split(v.x[i].x, b[0], s[0]);
        split(v.x[i].y, b[1], s[1]);
        split(v.x[i].z, b[2], s[2]);
        split(v.x[i].w, b[3], s[3]);
        *reinterpret_cast<uint4*>(big + at) = make_uint4(b[0], b[1], b[2], b[3]);
        *reinterpret_cast<uint4*>(small + at) = make_uint4(s[0], s[1], s[2], s[3]);
    }
}

__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Rows `row` and `row + 8` (C layout, below `rows`) of a 64-column result from r0, times `mul`.
__device__ __forceinline__ void store_c(float* base, u64 st, u64 row, u64 rows, const float (&acc)[8][4], float mul, int t) {
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
        const u64 r = row + 8 * hi;
        if (r < rows) {
#pragma unroll
            for (int n = 0; n < 8; ++n) {
                *reinterpret_cast<float2*>(base + r * st + 8 * n + 2 * t) =
                    make_float2(acc[n][2 * hi] * mul, acc[n][2 * hi + 1] * mul);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Forward.

constexpr int FWD_SMEM = 5 * TILE * 4;

__device__ __forceinline__ void attn_fwd(const AttnArgs& a) {
    extern __shared__ __align__(16) float smem[];
    float* qs = smem;         // Q
    float* ks = qs + TILE;    // K's tf32 parts: big, then small
    float* vs = ks + 2 * TILE;  // V's, as K's
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const u64 tq = a.tq, tk = a.tk, bhn = a.batch * a.heads;
    const u64 tiles = (tq + 63) / 64;
    const u64 q0 = (a.causal ? tiles - 1 - blockIdx.x : blockIdx.x) * 64;
    const u64 kend = a.causal ? (q0 + 64 < tk ? q0 + 64 : tk) : tk;
    const int row = 16 * w + g;  // the thread's rows: row and row + 8 of the tile
    const SplitTile kt{ks, ks + TILE}, vt{vs, vs + TILE};
    float* lse = reinterpret_cast<float*>(a.lse);
    for (u64 bh = blockIdx.y; bh < bhn; bh += gridDim.y) {
        const u64 b = bh / a.heads, h = bh % a.heads;
        const float* kp = in_ptr(a.k, a.st[S_K], b, h);
        const float* vp = in_ptr(a.v, a.st[S_V], b, h);
        load_tile(qs, in_ptr(a.q, a.st[S_Q], b, h), a.st[S_Q][2], q0, tq);
        cp_async_commit();
        FragA qf[8];
        float o[8][4] = {};
        float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};
        for (u64 k0 = 0; k0 < kend; k0 += 64) {
            const Staged xk = stage_read(kp, a.st[S_K][2], k0, tk);
            const Staged xv = stage_read(vp, a.st[S_V][2], k0, tk);
            __syncthreads();  // the previous tile is read
            stage_split(ks, ks + TILE, xk);
            stage_split(vs, vs + TILE, xv);
            cp_async_wait<0>();
            __syncthreads();
            if (k0 == 0) {
#pragma unroll
                for (int kk = 0; kk < 8; ++kk) qf[kk] = frag_a(qs, row, 8 * kk);
            }
            float s[8][4] = {};
#pragma unroll
            for (int kk = 0; kk < 8; ++kk) product_rows(s, qf[kk], kt, 8 * kk, g, t);
            const bool edge = k0 + 64 > tk || (a.causal && k0 + 63 > q0);
            float use[2], alpha[2], mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
            for (int j = 0; j < 8; ++j) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const u64 qi = q0 + row + 8 * (e >> 1), kj = k0 + 8 * j + 2 * t + (e & 1);
                    float x = s[j][e] * a.scale_log2;
                    if (edge && (kj >= tk || (a.causal && kj > qi))) x = NEG_INF;
                    s[j][e] = x;
                    mx[e >> 1] = fmaxf(mx[e >> 1], x);
                }
            }
#pragma unroll
            for (int hi = 0; hi < 2; ++hi) {
                const float mn = fmaxf(m[hi], quad_max(mx[hi]));
                use[hi] = mn == NEG_INF ? 0.f : mn;
                alpha[hi] = exp2f(m[hi] - use[hi]);
                m[hi] = mn;
                l[hi] *= alpha[hi];
            }
#pragma unroll
            for (int j = 0; j < 8; ++j) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    s[j][e] = exp2f(s[j][e] - use[e >> 1]);
                    l[e >> 1] += s[j][e];
                    o[j][e] *= alpha[e >> 1];
                }
            }
#pragma unroll
            for (int j = 0; j < 8; ++j) product_cols(o, frag_c(s[j]), vt, j, g, t);
        }
        cp_async_wait<0>();  // (no key tiles: Q's copies)
        float* out = out_ptr(a.o, a.st[S_O], b, h);
        float inv[2];
#pragma unroll
        for (int hi = 0; hi < 2; ++hi) {
            const float li = quad_sum(l[hi]);
            inv[hi] = li > 0.f ? 1.f / li : 0.f;
            const u64 qi = q0 + row + 8 * hi;
            if (t == 0 && qi < tq) lse[bh * tq + qi] = li > 0.f ? (m[hi] + log2f(li)) * LN2 : NEG_INF;
        }
#pragma unroll
        for (int n = 0; n < 8; ++n) {
            o[n][0] *= inv[0], o[n][1] *= inv[0], o[n][2] *= inv[1], o[n][3] *= inv[1];
        }
        store_c(out, a.st[S_O][2], q0 + row, tq, o, 1.f, t);
        __syncthreads();  // Q and the planes are refilled for the next (b, h)
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
// Backward: dK and dV, a block per 64 keys, query tiles of 64. PLANES: Q and dO staged as
// their tf32 parts (`stage_split`: each value split once a block, not once a warp), for
// devices whose blocks take the 104,960 bytes; else raw f32 staged by cp.async.

template <bool PLANES>
constexpr int dkdv_smem() { return ((PLANES ? 6 : 4) * TILE + 2 * 64) * 4; }

template <bool PLANES>
__device__ __forceinline__ void attn_bwd_dkdv(const AttnArgs& a) {
    extern __shared__ __align__(16) float smem[];
    float* ks = smem;         // K
    float* vs = ks + TILE;    // V
    float* qs = vs + TILE;    // Q (PLANES: its big parts, then its small parts)
    float* gs = qs + (PLANES ? 2 : 1) * TILE;  // dO, as Q
    float* ls = gs + (PLANES ? 2 : 1) * TILE;  // lse [64]
    float* dd = ls + 64;      // d [64]
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const u64 tq = a.tq, tk = a.tk, bhn = a.batch * a.heads;
    const u64 k0 = (u64)blockIdx.x * 64;
    const int row = 16 * w + g;  // the thread's keys: k0 + row and k0 + row + 8
    const float* lse = reinterpret_cast<const float*>(a.lse);
    const float* dsum = reinterpret_cast<const float*>(a.dsum);
    for (u64 bh = blockIdx.y; bh < bhn; bh += gridDim.y) {
        const u64 b = bh / a.heads, h = bh % a.heads;
        const float* qp = in_ptr(a.q, a.st[S_Q], b, h);
        const float* gp = in_ptr(a.dout, a.st[S_DO], b, h);
        load_tile(ks, in_ptr(a.k, a.st[S_K], b, h), a.st[S_K][2], k0, tk);
        load_tile(vs, in_ptr(a.v, a.st[S_V], b, h), a.st[S_V][2], k0, tk);
        cp_async_commit();
        float dk[8][4] = {}, dv[8][4] = {};
        // Causal: query i sees key j only when i >= j, so the tiles from query k0 on.
        for (u64 q0 = a.causal ? k0 : 0; q0 < tq; q0 += 64) {
            if constexpr (PLANES) {
                const Staged xq = stage_read(qp, a.st[S_Q][2], q0, tq);
                const Staged xg = stage_read(gp, a.st[S_DO][2], q0, tq);
                __syncthreads();  // the previous tile is read
                stage_split(qs, qs + TILE, xq);
                stage_split(gs, gs + TILE, xg);
            } else {
                __syncthreads();  // the previous tile is read
                load_tile(qs, qp, a.st[S_Q][2], q0, tq);
                load_tile(gs, gp, a.st[S_DO][2], q0, tq);
                cp_async_commit();
            }
            if (threadIdx.x < 64) {
                const u64 i = q0 + threadIdx.x;
                ls[threadIdx.x] = i < tq ? lse[bh * tq + i] : NEG_INF;
                dd[threadIdx.x] = i < tq ? dsum[bh * tq + i] : 0.f;
            }
            cp_async_wait<0>();
            __syncthreads();
            const auto qt = b_tile<PLANES>(qs), gt = b_tile<PLANES>(gs);
            // S^T and dP^T: keys k0 + row (+ 8), queries q0 + 8 j + 2 t (+ 1).
            float s[8][4] = {}, dp[8][4] = {};
            scores(s, dp, ks, qt, vs, gt, row, g, t);
            const bool edge = k0 + 64 > tk || (a.causal && k0 + 63 > q0);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int il = 8 * j + 2 * t + (e & 1);
                    const u64 qi = q0 + il, kj = k0 + row + 8 * (e >> 1);
                    const float li = ls[il], di = dd[il];
                    float p = exp2f(s[j][e] * a.scale_log2 - li * LOG2E);
                    if (li == NEG_INF || (edge && (kj >= tk || (a.causal && kj > qi)))) p = 0.f;
                    s[j][e] = p;
                    dp[j][e] = p * (dp[j][e] - di);
                }
            }
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                product_cols(dv, frag_c(s[j]), gt, j, g, t);
                product_cols(dk, frag_c(dp[j]), qt, j, g, t);
            }
        }
        cp_async_wait<0>();  // (no query tiles: K's and V's copies)
        store_c(out_ptr(a.dk, a.st[S_DK], b, h), a.st[S_DK][2], k0 + row, tk, dk, a.scale, t);
        store_c(out_ptr(a.dv, a.st[S_DV], b, h), a.st[S_DV][2], k0 + row, tk, dv, 1.f, t);
        __syncthreads();  // K and V are reloaded for the next (b, h)
    }
}

// ---------------------------------------------------------------------------------------------
// Backward: dQ, a block per 64 queries, key tiles of 64. PLANES: K and V staged as their tf32
// parts (104,448 bytes); else raw.

template <bool PLANES>
constexpr int dq_smem() { return (PLANES ? 6 : 4) * TILE * 4; }

template <bool PLANES>
__device__ __forceinline__ void attn_bwd_dq(const AttnArgs& a) {
    extern __shared__ __align__(16) float smem[];
    float* qs = smem;         // Q
    float* gs = qs + TILE;    // dO
    float* ks = gs + TILE;    // K (PLANES: its big parts, then its small parts)
    float* vs = ks + (PLANES ? 2 : 1) * TILE;  // V, as K
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const u64 tq = a.tq, tk = a.tk, bhn = a.batch * a.heads;
    // Causal: the heaviest query tile (the last) first.
    const u64 tiles = (tq + 63) / 64;
    const u64 q0 = (a.causal ? tiles - 1 - blockIdx.x : blockIdx.x) * 64;
    const u64 kend = a.causal ? (q0 + 64 < tk ? q0 + 64 : tk) : tk;
    const int row = 16 * w + g;  // the thread's queries: q0 + row and q0 + row + 8
    const float* lse = reinterpret_cast<const float*>(a.lse);
    const float* dsum = reinterpret_cast<const float*>(a.dsum);
    for (u64 bh = blockIdx.y; bh < bhn; bh += gridDim.y) {
        const u64 b = bh / a.heads, h = bh % a.heads;
        const float* kp = in_ptr(a.k, a.st[S_K], b, h);
        const float* vp = in_ptr(a.v, a.st[S_V], b, h);
        load_tile(qs, in_ptr(a.q, a.st[S_Q], b, h), a.st[S_Q][2], q0, tq);
        load_tile(gs, in_ptr(a.dout, a.st[S_DO], b, h), a.st[S_DO][2], q0, tq);
        cp_async_commit();
        float li[2], di[2];
#pragma unroll
        for (int hi = 0; hi < 2; ++hi) {
            const u64 i = q0 + row + 8 * hi;
            li[hi] = i < tq ? lse[bh * tq + i] : NEG_INF;
            di[hi] = i < tq ? dsum[bh * tq + i] : 0.f;
        }
        float dq[8][4] = {};
        for (u64 k0 = 0; k0 < kend; k0 += 64) {
            if constexpr (PLANES) {
                const Staged xk = stage_read(kp, a.st[S_K][2], k0, tk);
                const Staged xv = stage_read(vp, a.st[S_V][2], k0, tk);
                __syncthreads();  // the previous tile is read
                stage_split(ks, ks + TILE, xk);
                stage_split(vs, vs + TILE, xv);
            } else {
                __syncthreads();  // the previous tile is read
                load_tile(ks, kp, a.st[S_K][2], k0, tk);
                load_tile(vs, vp, a.st[S_V][2], k0, tk);
                cp_async_commit();
            }
            cp_async_wait<0>();
            __syncthreads();
            const auto kt = b_tile<PLANES>(ks), vt = b_tile<PLANES>(vs);
            float s[8][4] = {}, dp[8][4] = {};
            scores(s, dp, qs, kt, gs, vt, row, g, t);
            const bool edge = k0 + 64 > tk || (a.causal && k0 + 63 > q0);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int hi = e >> 1;
                    const u64 qi = q0 + row + 8 * hi, kj = k0 + 8 * j + 2 * t + (e & 1);
                    float p = exp2f(s[j][e] * a.scale_log2 - li[hi] * LOG2E);
                    if (li[hi] == NEG_INF || (edge && (kj >= tk || (a.causal && kj > qi)))) p = 0.f;
                    dp[j][e] = p * (dp[j][e] - di[hi]);
                }
            }
#pragma unroll
            for (int j = 0; j < 8; ++j) product_cols(dq, frag_c(dp[j]), kt, j, g, t);
        }
        cp_async_wait<0>();  // (no key tiles: Q's and dO's copies)
        store_c(out_ptr(a.dq, a.st[S_DQ], b, h), a.st[S_DQ][2], q0 + row, tq, dq, a.scale, t);
        __syncthreads();  // Q and dO are reloaded for the next (b, h)
    }
}

static_assert(FWD_SMEM == 87040, "attention.rs: family");
static_assert(dkdv_smem<false>() == 70144 && dkdv_smem<true>() == 104960, "attention.rs: family");
static_assert(dq_smem<false>() == 69632 && dq_smem<true>() == 104448, "attention.rs: family");
static_assert(FWD_SMEM <= 99 * 1024 && dkdv_smem<false>() <= 99 * 1024,
              "a block's shared memory on compute capability 8.6 and 8.9");

}  // namespace

// Entry points: forward and dQ grid (query tiles of 64, min(B H, 65535)), dK/dV grid (key tiles
// of 64, min(B H, 65535)), 128 threads and the dynamic shared memory above; dot: any grid of
// blocks of whole warps. `_planes`: the dK/dV and dQ kernels with staged tf32 parts, for
// compute capability 8.0 and 9.0 (whose blocks take over 99 KiB).
extern "C" __global__ void __launch_bounds__(THREADS, 2) attn_fwd_f32_d64(const AttnArgs a) { attn_fwd(a); }
extern "C" __global__ void __launch_bounds__(256) attn_bwd_dot_f32_d64(const AttnArgs a) { attn_bwd_dot(a); }
extern "C" __global__ void __launch_bounds__(THREADS, 2) attn_bwd_dkdv_f32_d64(const AttnArgs a) { attn_bwd_dkdv<false>(a); }
extern "C" __global__ void __launch_bounds__(THREADS, 2) attn_bwd_dq_f32_d64(const AttnArgs a) { attn_bwd_dq<false>(a); }
extern "C" __global__ void __launch_bounds__(THREADS, 2) attn_bwd_dkdv_planes_f32_d64(const AttnArgs a) { attn_bwd_dkdv<true>(a); }
extern "C" __global__ void __launch_bounds__(THREADS, 2) attn_bwd_dq_planes_f32_d64(const AttnArgs a) { attn_bwd_dq<true>(a); }
