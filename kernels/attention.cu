// Flash attention of Genesis (FlashAttention-2): forward `attn_fwd_<T>_d<D>` and backward
// (`attn_bwd_dot_<T>_d<D>`, `attn_bwd_dkdv_<T>_d<D>`, `attn_bwd_dq_<T>_d<D>`) for T = bf16, f16
// and head dims D = 64, 128. Inputs and outputs are T; products accumulate in f32 through
// `mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}` (sm_80 and newer).
//
// Built by `cargo xtask build-kernels` into crates/genesis-kernels/images/attention.fatbin. The
// CPU twins are `attention_forward` and `attention_backward` in
// crates/genesis-kernels/src/attention.rs, which also checks every argument (`AttentionShape::
// check`): the kernels trust it.
//
// Semantics (per batch b and head h; q [Tq, D], k and v [Tk, D], x = scale * q k^T):
//   key j is visible to query i unless causal and j > i (PyTorch's is_causal: top-left aligned);
//   lse_i = log sum_{j visible} exp(x_ij)  (natural log; -inf when no key is visible)
//   o_i   = sum_j exp(x_ij - lse_i) v_j    (0 when no key is visible)
// Backward, given o, lse (the forward's) and do = dL/do:
//   p_ij = exp(x_ij - lse_i) (0 when invisible or lse_i = -inf), d_i = sum_c do_ic o_ic,
//   dp_ij = do_i . v_j, ds_ij = p_ij (dp_ij - d_i),
//   dv_j = sum_i p_ij do_i, dk_j = scale sum_i ds_ij q_i, dq_i = scale sum_j ds_ij k_j.
//
// Layouts. Every tensor is a base address plus element strides for batch, head and sequence
// (the last dim contiguous): element (b, h, t, c) at base + b sb + h sh + t st + c. All of them
// are passed in one `AttnArgs` (mirrored by `#[repr(C)] Args` in attention.rs). The launcher
// requires 16-byte aligned bases and strides that are multiples of 8 elements, so every row of
// D elements is whole 16-byte chunks (GPT-2's q/k/v inside [B, T, 3C] qualify). lse and the
// backward's d are f32 [B, H, Tq] contiguous.
//
// Forward (`attn_fwd`): a block of 4 warps takes BQ = 64 MT query rows of one (b, h), a warp MT
// m tiles of 16 rows (rows 64 mt + 16 w), so a K or V fragment read from shared memory feeds MT
// mma (blocks over query tiles in grid.x, heaviest causal tile first; (b, h) in grid.y,
// strided). D = 64: MT = 2, BK = 32; D = 128: MT = 1, BK = 64 (what fits in 255 registers).
//   * The Q tile is copied to shared memory by cp.async, then kept in registers as mma A
//     fragments (MT D/16 of them). K and V tiles of BK keys go through a 2-stage ring of shared
//     memory filled by 16-byte cp.async (the copies of tile j + 1 are in flight while tile j is
//     used; rows past Tk are zero-filled).
//   * Per key tile: S = Q K^T (B fragments by ldmatrix from K stored [key][d]); x = S * scale *
//     log2(e) (so exp2 gives exp); masked entries (key >= Tk, or causal and key > query) are
//     -inf (only tiles that can hold one test); the running row max m, the rescale
//     alpha = exp2(m_old - m_new), p = exp2(x - m_new), the running sum l += p (thread
//     partials, the quad's reduced at the end) and O = alpha O + P V, where P (rounded to T) is
//     reused from the accumulator registers as the A fragment and V's B fragments come from
//     `ldmatrix.trans` (V stored [key][d]). A row with m_new = -inf uses 0 in its place (no
//     NaN from -inf - -inf). m moves lazily: only when a row of the warp meets a score more
//     than RESCALE (2^8) above it, so that O and l are rarely rescaled (p <= 2^8 meanwhile).
//   * Causal blocks visit keys below min(Tk, q0 + BQ) only: fully masked tiles are skipped.
//     (Within the last tiles a row may see no key of a tile; its max stays, its p are 0.)
//   * End: O / l rounded to T (0 when l = 0), lse = (m + log2 l) ln 2 (-inf when l = 0).
// Backward:
//   * `attn_bwd_dot`: d_i = sum_c do_ic o_ic in f32 (D / 8 lanes a row, 16 bytes a lane),
//     into the workspace.
//   * `attn_bwd_dkdv`: a block of 4 warps owns BK = 64 keys (a warp 16), K and V in shared
//     memory, and walks the query tiles of BQ rows (64 for D = 64, 32 for D = 128) that can see
//     them (causal: from the tile holding query j0), Q, dO, lse and d double-buffered by
//     cp.async. Per tile it computes S^T = K Q^T and dP^T = V dO^T (keys as mma rows), P^T and
//     dS^T in registers, then dV += P^T dO and dK += dS^T Q (P^T, dS^T rounded to T as A
//     fragments; dO and Q as B fragments by ldmatrix.trans). dK, dV stay in registers and are
//     written once (dK times scale): no atomics.
//   * `attn_bwd_dq`: a block of 4 warps owns BQ = 64 queries (a warp 16), Q and dO in shared
//     memory, lse and d in registers, and walks the key tiles of BK = 64 (causal: those below
//     q0 + BQ), K and V double-buffered: S = Q K^T, dP = dO V^T, dS, dQ += dS K (K's B fragments
//     by ldmatrix.trans); dQ written once times scale.
//   Determinism: every output element is owned by one thread of one block, which adds its
//   terms in a fixed order (the dQ kernel recomputes S and dP instead of accumulating dQ across
//   the dK/dV blocks with float atomics), so the backward is bit-reproducible.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with 16-bit inputs; lane = 4 g + t):
//   A (16 x 16, row): a0 (g, 2t..2t+1), a1 (g + 8, 2t..), a2 (g, 2t + 8..), a3 (g + 8, 2t + 8..)
//   B (16 x 8, col):  b0 (k = 2t..2t+1, n = g), b1 (k = 2t + 8.., n = g)
//   C (16 x 8):       c0, c1 (g, 2t), (g, 2t + 1); c2, c3 (g + 8, 2t), (g + 8, 2t + 1)
// (each 32-bit register holds two 16-bit values, the lower index in the low half). ldmatrix.x4:
// lanes 8i..8i+7 give the row addresses of 8 x 8 matrix i, and lane l receives register i =
// row l / 4, columns 2 (l % 4), +1 of matrix i (.trans: rows 2 (l % 4), +1, column l / 4). Hence
// the three address patterns used (tiles in shared memory are [row][D], rows of 16-byte
// chunks):
//   A from [m][k]:            row m0 + (l & 15), chunk 2 ks + (l >> 4)        -> a0 a1 a2 a3
//   B from [n][k] (k inner):  row n0 + (l & 7) + ((l >> 4) << 3), chunk 2 ks + ((l >> 3) & 1)
//                             -> b0 b1 of n tile n0, b0 b1 of n tile n0 + 8
//   B from [k][n] (n inner, .trans): row k0 + (l & 15), chunk n0 / 8 + (l >> 4)
//                             -> b0 b1 of n tile n0, b0 b1 of n tile n0 + 8
// A C tile pair (n tiles 2kk, 2kk + 1 of a 16-row strip) is the A fragment of k slice kk:
// a0 = (c0, c1) of tile 2kk, a1 = (c2, c3) of 2kk, a2 = (c0, c1) of 2kk + 1, a3 = (c2, c3) of 2kk + 1.
//
// Shared memory is swizzled: chunk c of row r of a tile sits at chunk r * (D / 8) + (c ^ (r & 7))
// (D / 8 >= 8 chunks a row), so the 8 rows one ldmatrix phase reads (8 consecutive rows, one
// logical chunk) hit 8 different bank groups, and a warp's cp.async writes cover whole rows.
//
// Numerical contract (see attention.rs): S, dP and the products accumulate in f32 in the tensor
// cores' order; P and dS are rounded to T before their products (FlashAttention-2 does the
// same); exp2 is `ex2.approx.ftz` (exp2f's value where the result is normal, 0 below 2^-126),
// log2f CUDA's (1 ulp). The twin computes in f32 without rounding P or dS, so results differ
// by about the unit roundoff of T relative to the sums of the absolute terms, plus the
// output's own rounding.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "ptx.cuh"

typedef unsigned long long u64;

// The arguments of every attention kernel (`Args` in attention.rs mirrors it, field by field).
struct AttnArgs {
    u64 q, k, v, o, dout, dq, dk, dv;  // device addresses of T elements (forward: o is written)
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
#define POS_INF __int_as_float(0x7f800000)

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

template <typename T> struct Ty;
template <> struct Ty<__nv_bfloat16> {
    static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    // Two floats rounded to nearest-even, lo in the low half.
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&v);
    }
    static __device__ __forceinline__ float2 unpack(uint32_t x) {
        __nv_bfloat162 v = *reinterpret_cast<__nv_bfloat162*>(&x);
        return __bfloat1622float2(v);
    }
};
template <> struct Ty<__half> {
    static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&v);
    }
    static __device__ __forceinline__ float2 unpack(uint32_t x) {
        __half2 v = *reinterpret_cast<__half2*>(&x);
        return __half22float2(v);
    }
};

// Byte offset of chunk c (8 elements) of row r in a swizzled tile of rows of D elements.
template <int D>
__device__ __forceinline__ uint32_t swz(int r, int c) {
    return (uint32_t)(r * (D / 8) + (c ^ (r & 7))) * 16u;
}
// This lane's ldmatrix addresses (see the top of the file).
template <int D>
__device__ __forceinline__ uint32_t off_a(int lane, int m0, int ks) {
    return swz<D>(m0 + (lane & 15), 2 * ks + (lane >> 4));
}
template <int D>
__device__ __forceinline__ uint32_t off_bn(int lane, int n0, int ks) {
    return swz<D>(n0 + (lane & 7) + ((lane >> 4) << 3), 2 * ks + ((lane >> 3) & 1));
}
template <int D>
__device__ __forceinline__ uint32_t off_bt(int lane, int k0, int n0) {
    return swz<D>(k0 + (lane & 15), n0 / 8 + (lane >> 4));
}

// Queues the copy of rows row0 .. row0 + ROWS - 1 of a [*, D] operand (row r at base + r st)
// into the swizzled tile at `tile`; rows at or past `limit` are zero-filled. Thread tid copies
// chunk tid % (D / 8) of rows tid / (D / 8) + i * THREADS / (D / 8).
template <int D, int ROWS, int THREADS>
__device__ __forceinline__ void load_tile(uint32_t tile, const uint16_t* base, u64 st, int row0, int limit,
                                          int tid) {
    constexpr int CPR = D / 8, RSTEP = THREADS / CPR;
    static_assert(THREADS % CPR == 0 && ROWS % RSTEP == 0, "tile shape");
    const int r = tid / CPR, c = tid % CPR;
    const uint16_t* p = base + (u64)(row0 + r) * st + c * 8;
    const u64 step = (u64)RSTEP * st;
#pragma unroll
    for (int i = 0; i < ROWS / RSTEP; ++i) {
        const bool ok = row0 + r + i * RSTEP < limit;
        cp_async16(tile + swz<D>(r + i * RSTEP, c), ok ? p : base, ok ? 16 : 0);
        p += step;
    }
}
// Queues the copy of n f32 values base[i0 .. i0 + n) into `dst` (zeros past `limit`).
__device__ __forceinline__ void load_vec(uint32_t dst, const float* base, int i0, int limit, int n, int tid) {
    if (tid < n) {
        const bool ok = i0 + tid < limit;
        cp_async4(dst + 4 * tid, ok ? base + i0 + tid : base, ok ? 4 : 0);
    }
}

template <typename T>
__device__ __forceinline__ const uint16_t* in_ptr(u64 addr, const u64 (&s)[3], u64 b, u64 h) {
    return reinterpret_cast<const uint16_t*>(addr) + b * s[0] + h * s[1];
}
template <typename T>
__device__ __forceinline__ uint16_t* out_ptr(u64 addr, const u64 (&s)[3], u64 b, u64 h) {
    return reinterpret_cast<uint16_t*>(addr) + b * s[0] + h * s[1];
}

// Writes a warp's 16 x D f32 accumulator strip (rows row0 + g, row0 + g + 8) times `mul` to
// rows < limit of `dst` (row r at dst + r st), rounded to T.
template <typename T, int D>
__device__ __forceinline__ void store_strip(uint16_t* dst, u64 st, int row0, int limit, const float (&acc)[D / 8][4],
                                            float mul, int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = row0 + g + 8 * h;
        if (r >= limit) continue;
        uint16_t* p = dst + (u64)r * st + 2 * t;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
            *reinterpret_cast<uint32_t*>(p + dt * 8) = Ty<T>::pack(acc[dt][2 * h] * mul, acc[dt][2 * h + 1] * mul);
    }
}

// ---------------------------------------------------------------------------------------------
// Forward.

// MT m tiles of 16 rows a warp: the block takes BQ = 64 MT query rows, warp w rows
// 64 mt + 16 w (mt < MT), so each K and V fragment read from shared memory serves MT mma;
// key tiles of BK_ rows.
template <int D, int MT, int BK_> struct Fwd {
    static constexpr int WARPS = 4, THREADS = 128, BQ = 64 * MT, BK = BK_;
    static constexpr int Q_BYTES = BQ * D * 2, KV_BYTES = BK * D * 2;
    static constexpr int SMEM = Q_BYTES + 4 * KV_BYTES;  // Q, then 2 stages of (K, V)
};

// The forward's lazy rescaling threshold (log2 units, see attn_fwd): probabilities up to 2^8
// before the final division by l.
constexpr float RESCALE = 8.f;

template <typename T, int D, int MT, int BK_>
__device__ __forceinline__ void attn_fwd(const AttnArgs& a) {
    typedef Fwd<D, MT, BK_> C;
    constexpr int BQ = C::BQ, BK = C::BK, THREADS = C::THREADS;
    extern __shared__ uint4 smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const uint32_t sq = smem_addr(smem), skv = sq + C::Q_BYTES;
    const int tq = (int)a.tq, tk = (int)a.tk;  // below 2^30 (checked)
    const int ntq = (tq + BQ - 1) / BQ;
    const int q0 = (ntq - 1 - (int)blockIdx.x) * BQ;  // the heaviest causal tiles first
    const u64 bhs = a.batch * a.heads;
    const float sl2 = a.scale_log2;
    // The key range of this query tile: causal rows q0 .. q0 + BQ - 1 see keys below q0 + BQ.
    const int kv_end = a.causal ? min(tk, q0 + BQ) : tk;
    const int n_tiles = (kv_end + BK - 1) / BK;

    for (u64 bh = blockIdx.y; bh < bhs; bh += gridDim.y) {
        const u64 b = bh / a.heads, h = bh % a.heads;
        const uint16_t* q = in_ptr<T>(a.q, a.st[S_Q], b, h);
        const uint16_t* k = in_ptr<T>(a.k, a.st[S_K], b, h);
        const uint16_t* v = in_ptr<T>(a.v, a.st[S_V], b, h);
        const u64 kst = a.st[S_K][2], vst = a.st[S_V][2];

        load_tile<D, BQ, THREADS>(sq, q, a.st[S_Q][2], q0, tq, tid);
        if (n_tiles > 0) {
            load_tile<D, BK, THREADS>(skv, k, kst, 0, tk, tid);
            load_tile<D, BK, THREADS>(skv + C::KV_BYTES, v, vst, 0, tk, tid);
        }
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        uint32_t qf[MT][D / 16][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int ks = 0; ks < D / 16; ++ks) ldsm_x4(qf[mt][ks], sq + off_a<D>(lane, mt * 64 + warp * 16, ks));

        float o[MT][D / 8][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int i = 0; i < D / 8; ++i)
#pragma unroll
                for (int e = 0; e < 4; ++e) o[mt][i][e] = 0.f;
        float m[MT][2], l[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                m[mt][hh] = NEG_INF;
                l[mt][hh] = 0.f;
            }

        for (int j = 0; j < n_tiles; ++j) {
            if (j + 1 < n_tiles) {
                const uint32_t nxt = skv + ((j + 1) & 1) * 2 * C::KV_BYTES;
                load_tile<D, BK, THREADS>(nxt, k, kst, (j + 1) * BK, tk, tid);
                load_tile<D, BK, THREADS>(nxt + C::KV_BYTES, v, vst, (j + 1) * BK, tk, tid);
            }
            cp_async_commit();
            cp_async_wait<1>();
            __syncthreads();
            const uint32_t sk = skv + (j & 1) * 2 * C::KV_BYTES, sv = sk + C::KV_BYTES;
            const int k0 = j * BK;

            // S = Q K^T: 16 x BK an m tile.
            float s[MT][BK / 8][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int i = 0; i < BK / 8; ++i)
#pragma unroll
                    for (int e = 0; e < 4; ++e) s[mt][i][e] = 0.f;
#pragma unroll
            for (int ks = 0; ks < D / 16; ++ks)
#pragma unroll
                for (int np = 0; np < BK / 16; ++np) {
                    uint32_t bf[4];
                    ldsm_x4(bf, sk + off_bn<D>(lane, np * 16, ks));
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        Ty<T>::mma(s[mt][2 * np], qf[mt][ks], bf[0], bf[1]);
                        Ty<T>::mma(s[mt][2 * np + 1], qf[mt][ks], bf[2], bf[3]);
                    }
                }

            // Mask (and scale to log2 units unless the scale is positive), online softmax; P overwrites S. x =
            // s * mul is in log2 units; m is kept in them. The running maximum moves, and O
            // and l are rescaled, only when a row of the warp meets a score more than RESCALE
            // above it (or its first visible key): p stays at most 2^RESCALE, O / l is the
            // same up to rounding (O and l are f32).
            //
            // With a positive scale a row's maximum of x is its maximum of s times scale_log2
            // (rounding is monotonic) and p = 2^(s * scale_log2 - m) is one fused multiply-add
            // and an ex2; otherwise x is formed first (one code path: a uniform branch).
            const bool pos = sl2 > 0.f;
            const float mul = pos ? sl2 : 1.f;
            const bool need_mask = k0 + BK > tk || (a.causal && k0 + BK - 1 > q0);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int row_w = q0 + mt * 64 + warp * 16;  // the m tile's first row
                if (!pos) {
#pragma unroll
                    for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
                        for (int e = 0; e < 4; ++e) s[mt][nt][e] *= sl2;
                }
                if (need_mask) {
                    // Column k0 + 8 nt + 2 t + e % 2 is visible to row r when below tk and,
                    // causal, at most r: when 8 nt + e % 2 <= last[e / 2].
                    int last[2];
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh)
                        last[hh] = (a.causal ? min(tk - 1, row_w + g + 8 * hh) : tk - 1) - k0 - 2 * t;
#pragma unroll
                    for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            if (nt * 8 + (e & 1) > last[e >> 1]) s[mt][nt][e] = NEG_INF;
                }
                float mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
                for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) mx[e >> 1] = fmaxf(mx[e >> 1], s[mt][nt][e]);
                bool move = false;
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 1));
                    mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 2));
                    mx[hh] *= mul;
                    move |= mx[hh] > m[mt][hh] + RESCALE;
                }
                if (__any_sync(0xffffffffu, move)) {
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh) {
                        const float mn = fmaxf(m[mt][hh], mx[hh]);
                        const float alpha = ex2(m[mt][hh] - (mn == NEG_INF ? 0.f : mn));
                        m[mt][hh] = mn;
                        l[mt][hh] *= alpha;
#pragma unroll
                        for (int dt = 0; dt < D / 8; ++dt) {
                            o[mt][dt][2 * hh] *= alpha;
                            o[mt][dt][2 * hh + 1] *= alpha;
                        }
                    }
                }
                float nm[2];
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) nm[hh] = m[mt][hh] == NEG_INF ? 0.f : -m[mt][hh];
#pragma unroll
                for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const float p = ex2(fmaf(s[mt][nt][e], mul, nm[e >> 1]));
                        s[mt][nt][e] = p;
                        l[mt][e >> 1] += p;
                    }
            }

            // O += P V.
#pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk) {
                uint32_t pa[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    pa[mt][0] = Ty<T>::pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                    pa[mt][1] = Ty<T>::pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                    pa[mt][2] = Ty<T>::pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                    pa[mt][3] = Ty<T>::pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
                }
#pragma unroll
                for (int dp = 0; dp < D / 16; ++dp) {
                    uint32_t bf[4];
                    ldsm_x4_t(bf, sv + off_bt<D>(lane, kk * 16, dp * 16));
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        Ty<T>::mma(o[mt][2 * dp], pa[mt], bf[0], bf[1]);
                        Ty<T>::mma(o[mt][2 * dp + 1], pa[mt], bf[2], bf[3]);
                    }
                }
            }
            __syncthreads();  // the stage is refilled two tiles on
        }

        // Normalise and write O and lse.
        uint16_t* out = out_ptr<T>(a.o, a.st[S_O], b, h);
        float* lse = reinterpret_cast<float*>(a.lse) + bh * a.tq;  // u64 product
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            const int row_w = q0 + mt * 64 + warp * 16;
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                float ls = l[mt][hh];
                ls += __shfl_xor_sync(0xffffffffu, ls, 1);
                ls += __shfl_xor_sync(0xffffffffu, ls, 2);
                const float inv = ls > 0.f ? 1.f / ls : 0.f;
#pragma unroll
                for (int dt = 0; dt < D / 8; ++dt) {
                    o[mt][dt][2 * hh] *= inv;
                    o[mt][dt][2 * hh + 1] *= inv;
                }
                const int row = row_w + g + 8 * hh;
                if (t == 0 && row < tq)
                    lse[row] = ls > 0.f ? (m[mt][hh] + log2f(ls)) * 0.69314718055994531f : NEG_INF;
            }
            store_strip<T, D>(out, a.st[S_O][2], row_w, tq, o[mt], 1.f, lane);
        }
        __syncthreads();  // Q's tile is refilled for the next (b, h)
    }
}

// ---------------------------------------------------------------------------------------------
// Backward: d = rowsum(dO o).

template <typename T, int D>
__device__ __forceinline__ void attn_bwd_dot(const AttnArgs& a) {
    // L = D / 8 lanes a row, each one 16-byte chunk (8 elements) of o and of do: a warp takes
    // 32 / L rows at once, two such groups a pass, so that a thread has four 16-byte loads in
    // flight: enough bytes in flight on a multiprocessor to cover the memory's latency.
    constexpr int L = D / 8, RW = 32 / L, G = 2;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int sub = lane / L, c = (lane % L) * 8;
    const u64 rows = a.batch * a.heads * a.tq;
    const u64 stride = (u64)gridDim.x * warps * RW;
    float* dsum = reinterpret_cast<float*>(a.dsum);
    // Every lane of a warp runs the same passes (the shuffles take the whole warp).
    for (u64 r0 = ((u64)blockIdx.x * warps + warp) * RW + sub; r0 - sub < rows; r0 += G * stride) {
        uint4 x[G], y[G];
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const u64 r = r0 + g * stride;
            x[g] = y[g] = make_uint4(0, 0, 0, 0);
            if (r < rows) {
                const u64 bh = r / a.tq, i = r % a.tq, b = bh / a.heads, h = bh % a.heads;
                x[g] = *reinterpret_cast<const uint4*>(in_ptr<T>(a.o, a.st[S_O], b, h) + i * a.st[S_O][2] + c);
                y[g] = *reinterpret_cast<const uint4*>(in_ptr<T>(a.dout, a.st[S_DO], b, h) + i * a.st[S_DO][2] + c);
            }
        }
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const uint32_t xs[4] = {x[g].x, x[g].y, x[g].z, x[g].w};
            const uint32_t ys[4] = {y[g].x, y[g].y, y[g].z, y[g].w};
            float s = 0.f;
#pragma unroll
            for (int w = 0; w < 4; ++w) {
                const float2 u = Ty<T>::unpack(xs[w]), v = Ty<T>::unpack(ys[w]);
                s = fmaf(u.x, v.x, s);
                s = fmaf(u.y, v.y, s);
            }
            // The L lanes of a row are consecutive: xor offsets below L stay within them.
#pragma unroll
            for (int o = L / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            const u64 r = r0 + g * stride;
            if (lane % L == 0 && r < rows) dsum[r] = s;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Backward: dK and dV, a block per key tile.

template <int D> struct Bkv {
    static constexpr int WARPS = 4, THREADS = 128, BK = 64, BQ = D == 64 ? 64 : 32;
    static constexpr int KV_BYTES = BK * D * 2, Q_BYTES = BQ * D * 2;
    // K, V; then 2 stages of (Q, dO, lse, d).
    static constexpr int STAGE = 2 * Q_BYTES + 2 * BQ * 4;
    static constexpr int SMEM = 2 * KV_BYTES + 2 * STAGE;
};

template <typename T, int D>
__device__ __forceinline__ void attn_bwd_dkdv(const AttnArgs& a) {
    typedef Bkv<D> C;
    constexpr int BQ = C::BQ, BK = C::BK, THREADS = C::THREADS;
    extern __shared__ uint4 smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const uint32_t sk = smem_addr(smem), sv = sk + C::KV_BYTES, sst = sk + 2 * C::KV_BYTES;
    const float* fsm = reinterpret_cast<const float*>(smem);
    const int tq = (int)a.tq, tk = (int)a.tk;
    const int j0 = (int)blockIdx.x * BK;  // causal: the first key tiles see the most queries
    const u64 bhs = a.batch * a.heads;
    const float sl2 = a.scale_log2;
    const int ntq = (tq + BQ - 1) / BQ;
    const int it0 = a.causal ? j0 / BQ : 0;  // queries below j0 see none of these keys
    const int n_it = it0 < ntq ? ntq - it0 : 0;
    const int key_w = j0 + warp * 16;  // the warp's first key

    for (u64 bh = blockIdx.y; bh < bhs; bh += gridDim.y) {
        const u64 b = bh / a.heads, h = bh % a.heads;
        const uint16_t* q = in_ptr<T>(a.q, a.st[S_Q], b, h);
        const uint16_t* dout = in_ptr<T>(a.dout, a.st[S_DO], b, h);
        const float* lse = reinterpret_cast<const float*>(a.lse) + bh * a.tq;
        const float* dsum = reinterpret_cast<const float*>(a.dsum) + bh * a.tq;
        const u64 qst = a.st[S_Q][2], dst = a.st[S_DO][2];
        auto load_stage = [&](int it, int stage) {
            const uint32_t base = sst + stage * C::STAGE;
            const int i0 = (it0 + it) * BQ;
            load_tile<D, BQ, THREADS>(base, q, qst, i0, tq, tid);
            load_tile<D, BQ, THREADS>(base + C::Q_BYTES, dout, dst, i0, tq, tid);
            load_vec(base + 2 * C::Q_BYTES, lse, i0, tq, BQ, tid);
            load_vec(base + 2 * C::Q_BYTES + 4 * BQ, dsum, i0, tq, BQ, tid);
        };

        load_tile<D, BK, THREADS>(sk, in_ptr<T>(a.k, a.st[S_K], b, h), a.st[S_K][2], j0, tk, tid);
        load_tile<D, BK, THREADS>(sv, in_ptr<T>(a.v, a.st[S_V], b, h), a.st[S_V][2], j0, tk, tid);
        if (n_it > 0) load_stage(0, 0);
        cp_async_commit();

        float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
        for (int i = 0; i < D / 8; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) dk[i][e] = dv[i][e] = 0.f;

        for (int it = 0; it < n_it; ++it) {
            if (it + 1 < n_it) load_stage(it + 1, (it + 1) & 1);
            cp_async_commit();
            cp_async_wait<1>();
            __syncthreads();
            const uint32_t stq = sst + (it & 1) * C::STAGE, sto = stq + C::Q_BYTES;
            const float* slse = fsm + (2 * C::KV_BYTES + (it & 1) * C::STAGE + 2 * C::Q_BYTES) / 4;
            const float* sds = slse + BQ;
            const int i0 = (it0 + it) * BQ;

            // S^T = K Q^T and dP^T = V dO^T: 16 keys x BQ queries a warp.
            float s[BQ / 8][4], dp[BQ / 8][4];
#pragma unroll
            for (int i = 0; i < BQ / 8; ++i)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[i][e] = dp[i][e] = 0.f;
#pragma unroll
            for (int ks = 0; ks < D / 16; ++ks) {
                uint32_t ka[4], va[4];
                ldsm_x4(ka, sk + off_a<D>(lane, warp * 16, ks));
                ldsm_x4(va, sv + off_a<D>(lane, warp * 16, ks));
#pragma unroll
                for (int np = 0; np < BQ / 16; ++np) {
                    uint32_t bf[4];
                    ldsm_x4(bf, stq + off_bn<D>(lane, np * 16, ks));
                    Ty<T>::mma(s[2 * np], ka, bf[0], bf[1]);
                    Ty<T>::mma(s[2 * np + 1], ka, bf[2], bf[3]);
                    ldsm_x4(bf, sto + off_bn<D>(lane, np * 16, ks));
                    Ty<T>::mma(dp[2 * np], va, bf[0], bf[1]);
                    Ty<T>::mma(dp[2 * np + 1], va, bf[2], bf[3]);
                }
            }

            // P^T and dS^T (element e of n tile nt: key key_w + g + 8 (e >> 1), query
            // i0 + 8 nt + 2 t + (e & 1)).
            const bool need_mask = i0 + BQ > tq || (a.causal && i0 < j0 + BK - 1);
#pragma unroll
            for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int ci = nt * 8 + 2 * t + (e & 1);
                    float lq = slse[ci] * 1.44269504088896341f;
                    lq = lq == NEG_INF ? POS_INF : lq;
                    float p = ex2(fmaf(s[nt][e], sl2, -lq));
                    if (need_mask) {
                        const int i = i0 + ci, j = key_w + g + 8 * (e >> 1);
                        if (i >= tq || (a.causal && j > i)) p = 0.f;
                    }
                    s[nt][e] = p;
                    dp[nt][e] = p * (dp[nt][e] - sds[ci]);
                }

            // dV += P^T dO, dK += dS^T Q (queries as k).
#pragma unroll
            for (int kq = 0; kq < BQ / 16; ++kq) {
                uint32_t pa[4], da[4];
                pa[0] = Ty<T>::pack(s[2 * kq][0], s[2 * kq][1]);
                pa[1] = Ty<T>::pack(s[2 * kq][2], s[2 * kq][3]);
                pa[2] = Ty<T>::pack(s[2 * kq + 1][0], s[2 * kq + 1][1]);
                pa[3] = Ty<T>::pack(s[2 * kq + 1][2], s[2 * kq + 1][3]);
                da[0] = Ty<T>::pack(dp[2 * kq][0], dp[2 * kq][1]);
                da[1] = Ty<T>::pack(dp[2 * kq][2], dp[2 * kq][3]);
                da[2] = Ty<T>::pack(dp[2 * kq + 1][0], dp[2 * kq + 1][1]);
                da[3] = Ty<T>::pack(dp[2 * kq + 1][2], dp[2 * kq + 1][3]);
#pragma unroll
                for (int dd = 0; dd < D / 16; ++dd) {
                    uint32_t bf[4];
                    ldsm_x4_t(bf, sto + off_bt<D>(lane, kq * 16, dd * 16));
                    Ty<T>::mma(dv[2 * dd], pa, bf[0], bf[1]);
                    Ty<T>::mma(dv[2 * dd + 1], pa, bf[2], bf[3]);
                    ldsm_x4_t(bf, stq + off_bt<D>(lane, kq * 16, dd * 16));
                    Ty<T>::mma(dk[2 * dd], da, bf[0], bf[1]);
                    Ty<T>::mma(dk[2 * dd + 1], da, bf[2], bf[3]);
                }
            }
            __syncthreads();  // the stage is refilled two tiles on
        }
        cp_async_wait<0>();  // K and V's copies, when no query tile waited for them

        store_strip<T, D>(out_ptr<T>(a.dk, a.st[S_DK], b, h), a.st[S_DK][2], key_w, tk, dk, a.scale, lane);
        store_strip<T, D>(out_ptr<T>(a.dv, a.st[S_DV], b, h), a.st[S_DV][2], key_w, tk, dv, 1.f, lane);
        __syncthreads();  // K and V are refilled for the next (b, h)
    }
}

// ---------------------------------------------------------------------------------------------
// Backward: dQ, a block per query tile.

template <int D> struct Bq {
    static constexpr int WARPS = 4, THREADS = 128, BQ = 64, BK = 64;
    static constexpr int Q_BYTES = BQ * D * 2, KV_BYTES = BK * D * 2;
    static constexpr int SMEM = 2 * Q_BYTES + 4 * KV_BYTES;  // Q, dO; 2 stages of (K, V)
};

template <typename T, int D>
__device__ __forceinline__ void attn_bwd_dq(const AttnArgs& a) {
    typedef Bq<D> C;
    constexpr int BQ = C::BQ, BK = C::BK, THREADS = C::THREADS;
    extern __shared__ uint4 smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const uint32_t sq = smem_addr(smem), so = sq + C::Q_BYTES, skv = so + C::Q_BYTES;
    const int tq = (int)a.tq, tk = (int)a.tk;
    const int ntq = (tq + BQ - 1) / BQ;
    const int q0 = (ntq - 1 - (int)blockIdx.x) * BQ;
    const u64 bhs = a.batch * a.heads;
    const float sl2 = a.scale_log2;
    const int kv_end = a.causal ? min(tk, q0 + BQ) : tk;
    const int n_tiles = (kv_end + BK - 1) / BK;
    const int row_w = q0 + warp * 16;

    for (u64 bh = blockIdx.y; bh < bhs; bh += gridDim.y) {
        const u64 b = bh / a.heads, h = bh % a.heads;
        const uint16_t* k = in_ptr<T>(a.k, a.st[S_K], b, h);
        const uint16_t* v = in_ptr<T>(a.v, a.st[S_V], b, h);
        const u64 kst = a.st[S_K][2], vst = a.st[S_V][2];

        load_tile<D, BQ, THREADS>(sq, in_ptr<T>(a.q, a.st[S_Q], b, h), a.st[S_Q][2], q0, tq, tid);
        load_tile<D, BQ, THREADS>(so, in_ptr<T>(a.dout, a.st[S_DO], b, h), a.st[S_DO][2], q0, tq, tid);
        if (n_tiles > 0) {
            load_tile<D, BK, THREADS>(skv, k, kst, 0, tk, tid);
            load_tile<D, BK, THREADS>(skv + C::KV_BYTES, v, vst, 0, tk, tid);
        }
        cp_async_commit();

        // The rows' lse (in log2 units; -inf, a row that saw no key, as +inf: p = 0) and d.
        float lq[2], dr[2];
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int row = row_w + g + 8 * hh;
            const bool ok = row < tq;
            const float x = ok ? reinterpret_cast<const float*>(a.lse)[bh * a.tq + row] * 1.44269504088896341f : 0.f;
            lq[hh] = x == NEG_INF ? POS_INF : x;
            dr[hh] = ok ? reinterpret_cast<const float*>(a.dsum)[bh * a.tq + row] : 0.f;
        }

        float dq[D / 8][4];
#pragma unroll
        for (int i = 0; i < D / 8; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) dq[i][e] = 0.f;

        for (int j = 0; j < n_tiles; ++j) {
            if (j + 1 < n_tiles) {
                const uint32_t nxt = skv + ((j + 1) & 1) * 2 * C::KV_BYTES;
                load_tile<D, BK, THREADS>(nxt, k, kst, (j + 1) * BK, tk, tid);
                load_tile<D, BK, THREADS>(nxt + C::KV_BYTES, v, vst, (j + 1) * BK, tk, tid);
            }
            cp_async_commit();
            cp_async_wait<1>();
            __syncthreads();
            const uint32_t stk = skv + (j & 1) * 2 * C::KV_BYTES, stv = stk + C::KV_BYTES;
            const int k0 = j * BK;

            // S = Q K^T and dP = dO V^T: 16 x BK a warp.
            float s[BK / 8][4], dp[BK / 8][4];
#pragma unroll
            for (int i = 0; i < BK / 8; ++i)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[i][e] = dp[i][e] = 0.f;
#pragma unroll
            for (int ks = 0; ks < D / 16; ++ks) {
                uint32_t qa[4], oa[4];
                ldsm_x4(qa, sq + off_a<D>(lane, warp * 16, ks));
                ldsm_x4(oa, so + off_a<D>(lane, warp * 16, ks));
#pragma unroll
                for (int np = 0; np < BK / 16; ++np) {
                    uint32_t bf[4];
                    ldsm_x4(bf, stk + off_bn<D>(lane, np * 16, ks));
                    Ty<T>::mma(s[2 * np], qa, bf[0], bf[1]);
                    Ty<T>::mma(s[2 * np + 1], qa, bf[2], bf[3]);
                    ldsm_x4(bf, stv + off_bn<D>(lane, np * 16, ks));
                    Ty<T>::mma(dp[2 * np], oa, bf[0], bf[1]);
                    Ty<T>::mma(dp[2 * np + 1], oa, bf[2], bf[3]);
                }
            }

            const bool need_mask = k0 + BK > tk || (a.causal && k0 + BK - 1 > q0);
#pragma unroll
            for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float p = ex2(fmaf(s[nt][e], sl2, -lq[e >> 1]));
                    if (need_mask) {
                        const int col = k0 + nt * 8 + 2 * t + (e & 1), row = row_w + g + 8 * (e >> 1);
                        if (col >= tk || (a.causal && col > row)) p = 0.f;
                    }
                    dp[nt][e] = p * (dp[nt][e] - dr[e >> 1]);
                }

            // dQ += dS K (keys as k).
#pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk) {
                uint32_t da[4];
                da[0] = Ty<T>::pack(dp[2 * kk][0], dp[2 * kk][1]);
                da[1] = Ty<T>::pack(dp[2 * kk][2], dp[2 * kk][3]);
                da[2] = Ty<T>::pack(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
                da[3] = Ty<T>::pack(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
#pragma unroll
                for (int dd = 0; dd < D / 16; ++dd) {
                    uint32_t bf[4];
                    ldsm_x4_t(bf, stk + off_bt<D>(lane, kk * 16, dd * 16));
                    Ty<T>::mma(dq[2 * dd], da, bf[0], bf[1]);
                    Ty<T>::mma(dq[2 * dd + 1], da, bf[2], bf[3]);
                }
            }
            __syncthreads();
        }
        cp_async_wait<0>();

        store_strip<T, D>(out_ptr<T>(a.dq, a.st[S_DQ], b, h), a.st[S_DQ][2], row_w, tq, dq, a.scale, lane);
        __syncthreads();  // Q and dO are refilled for the next (b, h)
    }
}

// ---------------------------------------------------------------------------------------------
// Entry points. Forward (query tiles of BQ) and dQ (of 64): grid (query tiles, min(B H, 65535));
// dK/dV: grid (key tiles of 64, min(B H, 65535)); 128 threads and the dynamic shared memory of
// the kernel's traits (`Fwd`, `Bkv`, `Bq`). Dot: any grid of 256-thread blocks.

#define ATTN_KERNELS(NAME, T, D, FWD_MT, FWD_BK, FWD_MIN, BWD_MIN)                                             \
    extern "C" __global__ void __launch_bounds__(128, FWD_MIN) attn_fwd_##NAME##_d##D(const AttnArgs a) {      \
        attn_fwd<T, D, FWD_MT, FWD_BK>(a);                                                                     \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(256) attn_bwd_dot_##NAME##_d##D(const AttnArgs a) {           \
        attn_bwd_dot<T, D>(a);                                                                                 \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(128, BWD_MIN) attn_bwd_dkdv_##NAME##_d##D(const AttnArgs a) { \
        attn_bwd_dkdv<T, D>(a);                                                                                \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(128, BWD_MIN) attn_bwd_dq_##NAME##_d##D(const AttnArgs a) {   \
        attn_bwd_dq<T, D>(a);                                                                                  \
    }

// Forward: D = 64 takes 128 query rows a block (2 m tiles a warp) against 32-key tiles, D = 128
// 64 rows (1 m tile a warp) against 64-key tiles (what fits in 255 registers without spilling);
// `shared_bytes` and the grids in attention.rs follow.
ATTN_KERNELS(bf16, __nv_bfloat16, 64, 2, 32, 2, 2)
ATTN_KERNELS(bf16, __nv_bfloat16, 128, 1, 64, 2, 2)
ATTN_KERNELS(f16, __half, 64, 2, 32, 2, 2)
ATTN_KERNELS(f16, __half, 128, 1, 64, 2, 2)
