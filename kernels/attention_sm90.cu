// Flash attention of Genesis on Hopper (sm_90a only): the forward `attn_fwd_sm90_<T>_d<D>` and
// the backward's dK/dV and dQ kernels `attn_bwd_dkdv_sm90_<T>_d<D>`, `attn_bwd_dq_sm90_<T>_d<D>`
// for T = bf16, f16 and head dims D = 64 and 128, on `wgmma` (warpgroup tensor-core products,
// twice the `mma.sync` rate of attention.cu's kernels on this architecture). Semantics,
// arguments (`AttnArgs`), layouts and the numerical contract are attention.cu's (read its
// header); the launcher (src/attention.rs) takes these kernels on compute capability 9.0, and
// attention.cu's elsewhere (and for the backward's row sums d).
//
// Head dim 128: every tile row is two 64-column panels (each its own 128-byte swizzled tile,
// `PANEL` bytes apart), so that each product over the head dim is 8 k steps, four a panel, and
// each product whose columns are the head dim (O, dQ, dK, dV) two m64n64 accumulators, one a
// panel. The text below gives head dim 64's sizes; `Cfg<D>` gives both (two blocks a
// multiprocessor of each kernel for 128, two dK/dV stages).
//
// Every kernel's block is one warpgroup (128 threads) running on its own: several blocks share
// a multiprocessor, so that one's softmax, copies and barriers run beside another's products.
//
// Forward: a block takes BQ = 64 query rows of one (b, h) (grid and order as attention.cu's
// forward: query tiles in grid.x, heaviest causal tile first; (b, h) in grid.y, strided).
//   * Shared memory: the Q tile (64 x 64) and 2-stage rings of K and of V tiles of BK = 64 keys,
//     each row 128 bytes with chunk c of row r at chunk c ^ (r % 8) (attention.cu's swizzle,
//     which for 64-wide rows is the 128-byte swizzle that wgmma reads), every tile 1 KiB
//     aligned. Filled by 16-byte cp.async from all threads (rows past Tq or Tk zero-filled),
//     then made visible to the tensor cores' asynchronous proxy by `fence.proxy.async` before
//     the block barrier.
//   * Per key tile: S = Q K^T as `wgmma m64n64k16` (4 k steps, both operands k-major from
//     shared memory); the online softmax of attention.cu on the accumulators (x = S * scale *
//     log2 e, masked entries -inf, running max m, alpha = exp2(m_old - m_new), p = exp2(x -
//     m_new)); then O = alpha O + P V as `wgmma m64n64k16` with P from registers (the
//     accumulator layout is the A fragment layout, pairs rounded to T) and V mn-major from
//     shared memory (4 k steps of 16 keys). The kernel is bound by instruction issue, so the
//     softmax is lean: with a positive scale the row maximum is taken on S itself and p is one
//     fused multiply-add and one `ex2.approx.ftz` an element (ptx.cuh's `ex2`); the running
//     maximum moves, and O and l are rescaled, only when a row of the warp meets a score more
//     than RESCALE (2^8) above it, so p stays at most 2^8 (O and l are f32; O / l is the same up
//     to rounding); whole key tiles are copied without row checks, and the mask is formed
//     only on the tiles that need it.
//   * The copies of tile j + 1 are queued, each tile its own cp.async group, right after the
//     barrier that starts tile j, into the stage tile j - 1 used: past that barrier no thread
//     reads it (each waited for its products), so one barrier a tile serves both (the
//     backward's kernels likewise). Four blocks a multiprocessor (108 registers a thread,
//     41 KiB of shared memory each).
//   * Head dim 128 (two blocks a multiprocessor, whose products are twice as long) overlaps
//     the softmax with the tensor cores inside the block: step j queues S of tile j, then
//     O += P V of tile j - 1, waits for S only, forms P of tile j while P V runs, then waits
//     for it and rescales O (which then holds tile j - 1's values at the former maximum). Its
//     copies are K of tile j + 1 and V of tile j, into the stages K of tile j - 1 and V of
//     tile j - 2 used.
//   * End: O / l rounded to T, lse = (m + log2 l) ln 2 (-inf, and O 0, when l = 0).
//
// dK/dV: a block owns 64 keys (K and V loaded once), and walks the query tiles of 64 that can
// see them (causal: from the tile holding its first key) through a 3-stage ring of (Q, dO,
// lse, d). Per query tile: S^T = K Q^T and dP^T = V dO^T (keys as rows), P^T and dS^T in
// registers, then dV += P^T dO and dK += dS^T Q with P^T, dS^T rounded to T as A fragments
// and dO, Q read mn-major (queries as k). dK (times scale) and dV are written once. Three
// blocks a multiprocessor (166 registers a thread, 68 KiB of shared memory each).
//
// dQ: the forward's blocks and tiles with the dO tile beside Q and a 2-stage ring of (K, V).
// Per key tile: S = Q K^T and dP = dO V^T (8 `wgmma m64n64k16`, one commit group), P =
// exp2(S * scale * log2 e - lse log2 e) (0 where masked; a row of lse -inf has P 0), dS = P
// (dP - d) rounded to T as A fragments, dQ += dS K with K read mn-major (keys as k). dQ times
// scale is written once: the backward stays deterministic. Four blocks a multiprocessor (122
// registers a thread, 49 KiB of shared memory each: the block waits on its products and
// barriers, so more blocks beside it keep the tensor cores fed).
//
// Column sums (`csum`, optional): with q, k and v the thirds of one packed projection, the
// gradient that projection receives has per column the sum over rows of dQ, dK or dV as
// stored, its bias's gradient. Each dQ and dK/dV block adds its tile's rows of each output
// (the values rounded to T, as stored; rows past tq or tk left out): a thread its two rows,
// then the lanes of a column by xor-shuffles (halving: each lane ends with two columns'
// sums), then the four warps in order through shared memory, and writes the tile's D sums to `csum` (f32) at [b][tile][which][h][D], `which`
// 0 for dQ, 1 dK and 2 dV (the launcher asks only with tq == tk, so the tiles line up): a row
// of `csum` per tile, laid out as the packed projection's row. The launcher adds the rows in
// order: deterministic, no atomics.
//
// Accumulator layout (m64nNk16, f32): register i of lane l of warp w holds
// row 16 w + l / 4 + 8 ((i / 2) % 2), column 8 (i / 4) + 2 (l % 4) + i % 2. Register pairs
// (8 kk + 2 e, + 1), e = 0..3, rounded and packed, are the A fragment of k slice kk.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "ptx.cuh"
#include "cp_async.cuh"

typedef unsigned long long u64;

// attention.cu's `AttnArgs`, field by field (`Args` in attention.rs mirrors both).
struct AttnArgs {
    u64 q, k, v, o, dout, dq, dk, dv;
    u64 lse, dsum;
    u64 st[8][3];
    u64 batch, heads, tq, tk;
    float scale;
    float scale_log2;
    int causal;
    int pad_;
    u64 csum;  // f32 tile column sums, or 0 (see above); attention.cu's kernels stop before it
};

enum { S_Q = 0, S_K, S_V, S_O, S_DO, S_DQ, S_DK, S_DV };

#define NEG_INF __int_as_float(0xff800000)

namespace {

// A block is one warpgroup: 64 query rows (forward, dQ) or 64 keys (dK/dV).
constexpr int BQ = 64, BK = 64, THREADS = 128;
// Every tile has 64 rows, stored as D / 64 panels of 64 columns (128-byte rows, the 128-byte
// swizzle wgmma reads), panel p of a tile PANEL p bytes past its start.
constexpr int PANEL = 64 * 128;
// The forward's lazy rescaling threshold (log2 units, see attn_fwd_sm90): probabilities up to
// 2^8 before the final division by l.
constexpr float RESCALE = 8.f;

// Shared memory of the kernels for head dim D (`sm90_kernel` in attention.rs mirrors it); each
// begins with 1 KiB of alignment slack.
template <int D>
struct Cfg {
    static constexpr int P = D / 64;          // panels a row
    static constexpr int TILE = P * PANEL;    // a 64-row tile of T
    static constexpr int FWD_STAGES = 2;      // forward: Q, then stages of (K, V)
    static constexpr int FWD_SMEM = 1024 + TILE + FWD_STAGES * 2 * TILE;
    static constexpr int DQ_STAGES = 2;       // dQ: Q and dO, then stages of (K, V)
    static constexpr int DQ_SMEM = 1024 + 2 * TILE + DQ_STAGES * 2 * TILE;
    // dK/dV: K and V, then stages of (Q, dO, lse, d) of BQK = 64 queries, each 1 KiB aligned.
    static constexpr int KV_STAGES = D == 64 ? 3 : 2;
    static constexpr int KV_STAGE = 2 * TILE + 2 * 64 * 4;
    static constexpr int KV_STAGE_STRIDE = (KV_STAGE + 1023) / 1024 * 1024;
    static constexpr int DKDV_SMEM = 1024 + 2 * TILE + KV_STAGES * KV_STAGE_STRIDE;
};
// Blocks a multiprocessor (with the static `red` of the column sums and the 1 KiB the
// hardware reserves a block): head dim 64 four forward and dQ blocks and three dK/dV ones,
// 128 two of each.
static_assert(Cfg<64>::FWD_SMEM == 41984 && 4 * (Cfg<64>::FWD_SMEM + 1024) <= 228 * 1024, "fwd d64");
static_assert(Cfg<64>::DQ_SMEM == 50176 && 4 * (Cfg<64>::DQ_SMEM + 1024 + 1024) <= 228 * 1024, "dq d64");
static_assert(Cfg<64>::DKDV_SMEM == 69632 && 3 * (Cfg<64>::DKDV_SMEM + 2048 + 1024) <= 228 * 1024, "dkdv d64");
static_assert(Cfg<128>::FWD_SMEM == 82944 && 2 * (Cfg<128>::FWD_SMEM + 1024) <= 228 * 1024, "fwd d128");
static_assert(Cfg<128>::DQ_SMEM == 99328 && 2 * (Cfg<128>::DQ_SMEM + 2048 + 1024) <= 228 * 1024, "dq d128");
static_assert(Cfg<128>::DKDV_SMEM == 101376 && 2 * (Cfg<128>::DKDV_SMEM + 4096 + 1024) <= 228 * 1024, "dkdv d128");

// Orders this thread's generic-proxy writes of shared memory (the cp.async copies, complete)
// before the tensor cores' asynchronous-proxy reads that follow the next barrier.
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accesses of `x` across the asynchronous wgmma window.
__device__ __forceinline__ void pin(float& x) { asm volatile("" : "+f"(x)::"memory"); }

// A shared-memory matrix descriptor with 128-byte swizzle (matmul_sm90.cu's): start address,
// leading and stride byte offsets (>> 4) in bits 0-13, 16-29 and 32-45, layout type 1 in bits
// 62-63, base offset 0 (tiles 1 KiB aligned).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}
// k step kk (16 elements) of a k-major tile of 128-byte rows (+32 bytes) and of an mn-major
// tile of 64 mn values a row, one row per k (+16 rows).
// A step moves the start address (bits 0-13, in 16 bytes) by 32 and 2048 bytes: added to the
// tile's descriptor, which cannot carry out of the field (shared memory ends below 2^18).
__device__ __forceinline__ uint64_t kmajor(uint32_t tile, int kk) { return sw128_desc(tile, 16, 1024) + 2 * kk; }
__device__ __forceinline__ uint64_t mnmajor(uint32_t tile, int kk) { return sw128_desc(tile, 8192, 1024) + 128 * kk; }

template <int TB>
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int scale_d,
                                            __nv_bfloat16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB));
}

__device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], uint64_t da, uint64_t db, int scale_d,
                                            __nv_bfloat16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], uint64_t da, uint64_t db, int scale_d,
                                            __half) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(scale_d));
}

template <int TB>
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int scale_d,
                                            __half) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB));
}

// d = A B (d's registers only written): wgmma_ss_n64 with scale-d false and d as outputs.
#define GENESIS_WGMMA_SS_NEW(TYPE, PTXT)                                                                     \
    __device__ __forceinline__ void wgmma_ss_n64_new(float (&d)[32], uint64_t da, uint64_t db, TYPE) {       \
        asm volatile(                                                                                        \
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                     \
            "wgmma.mma_async.sync.aligned.m64n64k16.f32." PTXT "." PTXT " {"                                 \
            "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
            "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"                                          \
            "}, %32, %33, p, 1, 1, 0, 0;\n}\n"                                                              \
            : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),           \
              "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]),       \
              "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]),    \
              "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]),    \
              "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31])                                             \
            : "l"(da), "l"(db), "r"(0));                                                                     \
    }
GENESIS_WGMMA_SS_NEW(__nv_bfloat16, "bf16")
GENESIS_WGMMA_SS_NEW(__half, "f16")
#undef GENESIS_WGMMA_SS_NEW

__device__ __forceinline__ uint32_t pack2(float lo, float hi, __nv_bfloat16) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pack2(float lo, float hi, __half) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// The accumulators x (32 registers a panel) kept out of the compiler's reordering across the
// asynchronous wgmma window.
__device__ __forceinline__ void pin_all(float (&x)[32]) {
#pragma unroll
    for (int i = 0; i < 32; ++i) pin(x[i]);
}
template <int P>
__device__ __forceinline__ void pin_all(float (&x)[P][32]) {
#pragma unroll
    for (int p = 0; p < P; ++p) pin_all(x[p]);
}

// Queues d = A B^T over the D-deep head dim (D / 16 k steps, four a panel), A's 64 rows and
// B's 64 rows k-major tiles at `a` and `b`. The first k step only writes d (its registers need
// no zeroing before).
template <int D, typename T>
__device__ __forceinline__ void queue_abt(float (&d)[32], uint32_t a, uint32_t b, T tag) {
    wgmma_ss_n64_new(d, kmajor(a, 0), kmajor(b, 0), tag);
#pragma unroll
    for (int kk = 1; kk < D / 16; ++kk) {
        const uint32_t off = (kk / 4) * PANEL;
        wgmma_ss_n64(d, kmajor(a + off, kk % 4), kmajor(b + off, kk % 4), 1, tag);
    }
}

// Queues d += F B over 64 k values (4 k slices): F the A fragments in registers, B the k x D
// tile at `b`, mn-major (its panel p gives d[p], columns 64 p .. 64 p + 63).
template <int P, typename T>
__device__ __forceinline__ void queue_fb(float (&d)[P][32], const uint32_t (&f)[4][4], uint32_t b, T tag) {
#pragma unroll
    for (int p = 0; p < P; ++p)
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) wgmma_rs_n64<1>(d[p], f[kk], mnmajor(b + p * PANEL, kk), 1, tag);
}

// Writes a warpgroup's 64 x 64 accumulators (this thread's rows row_t and row_t + 8, times
// mul[0] and mul[1]) rounded to T into rows below `limit` of `out` (row r at out + r st).
template <typename T>
__device__ __forceinline__ void store_rows(uint16_t* out, u64 st, int row_t, int limit, const float (&acc)[32],
                                           const float (&mul)[2], int lane, T tag) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const int row = row_t + 8 * hh;
        if (row >= limit) continue;
        uint16_t* p = out + (u64)row * st + 2 * (lane % 4);
#pragma unroll
        for (int g = 0; g < 8; ++g)
            *reinterpret_cast<uint32_t*>(p + 8 * g) = pack2(acc[4 * g + 2 * hh] * mul[hh], acc[4 * g + 2 * hh + 1] * mul[hh], tag);
    }
}

__device__ __forceinline__ float rounded(float x, __nv_bfloat16) { return __bfloat162float(__float2bfloat16_rn(x)); }
__device__ __forceinline__ float rounded(float x, __half) { return __half2float(__float2half_rn(x)); }

// The column sums of this warp's 16 rows of what store_rows writes (the same rows, values
// and rounding) into red[0 .. 64) (shared memory; see "Column sums" above). The 8 lanes of a
// column pair (the same lane % 4) hold 16 partial sums each; three xor-shuffle steps halve
// them (each lane keeps one half, adds its partner's copy of it), leaving each lane 2 sums.
// Every lane of the warp must call it.
template <typename T>
__device__ __forceinline__ void warp_col_sums(float* red, int row_t, int limit, const float (&acc)[32],
                                              const float (&mul)[2], int lane, T tag) {
    float s[16];
#pragma unroll
    for (int g = 0; g < 8; ++g)
#pragma unroll
        for (int x = 0; x < 2; ++x) {
            float v = 0.f;
#pragma unroll
            for (int hh = 0; hh < 2; ++hh)
                if (row_t + 8 * hh < limit) v += rounded(acc[4 * g + 2 * hh + x] * mul[hh], tag);
            s[2 * g + x] = v;
        }
    // Lane bit 4 picks the half of s (8 values) it keeps, then bit 3 a half of that, bit 2 a
    // half again: the lane's two sums are s[base], s[base + 1] of the original order.
    const bool b4 = lane & 16, b3 = lane & 8, b2 = lane & 4;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const float mine = b4 ? s[8 + i] : s[i], other = __shfl_xor_sync(0xffffffffu, b4 ? s[i] : s[8 + i], 16);
        s[i] = mine + other;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float mine = b3 ? s[4 + i] : s[i], other = __shfl_xor_sync(0xffffffffu, b3 ? s[i] : s[4 + i], 8);
        s[i] = mine + other;
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const float mine = b2 ? s[2 + i] : s[i], other = __shfl_xor_sync(0xffffffffu, b2 ? s[i] : s[2 + i], 4);
        s[i] = mine + other;
    }
    const int base = (b4 ? 8 : 0) + (b3 ? 4 : 0) + (b2 ? 2 : 0);  // s index 2 g + x
    const int col = 8 * (base / 2) + 2 * (lane % 4);
    red[col] = s[0];
    red[col + 1] = s[1];
}

// out[c] for column c of the four warps' sums in red[w * D + c], added in order of w.
template <int D>
__device__ __forceinline__ void add_warp_sums(float* out, const float* red, int c) {
    out[c] = ((red[c] + red[D + c]) + red[2 * D + c]) + red[3 * D + c];
}

// Byte offset of chunk c (8 elements) of row r in a swizzled tile of 64-wide rows.
__device__ __forceinline__ uint32_t swz(int r, int c) { return (uint32_t)(r * 8 + (c ^ (r & 7))) * 16u; }

// Queues the copy of rows row0 .. row0 + ROWS - 1 of a [*, D] operand (row r at base + r st)
// into the swizzled tile at `tile` (chunk c of a row in panel c / 8); rows at or past `limit`
// are zero-filled (a whole tile below `limit` takes no row checks).
template <int ROWS, int D>
__device__ __forceinline__ void load_tile(uint32_t tile, const uint16_t* base, u64 st, int row0, int limit, int tid) {
    constexpr int CPR = D / 8, RSTEP = THREADS / CPR;  // chunks a row; rows a pass (a multiple of 8)
    static_assert(RSTEP % 8 == 0 && ROWS % RSTEP == 0, "row steps keep the swizzle");
    const int r = tid / CPR, c = tid % CPR;
    const uint32_t panel = tile + (c / 8) * (ROWS * 128);
    const uint16_t* p = base + (u64)(row0 + r) * st + c * 8;
    if (row0 + ROWS <= limit) {
        // Row r + i RSTEP sits i RSTEP rows (of 128 bytes) past row r: the same swizzle.
        const uint32_t dst = panel + swz(r, c % 8);
#pragma unroll
        for (int i = 0; i < ROWS / RSTEP; ++i) {
            cp_async16(dst + i * RSTEP * 128, p, 16);
            p += (u64)RSTEP * st;
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < ROWS / RSTEP; ++i) {
        const bool ok = row0 + r + i * RSTEP < limit;
        cp_async16(panel + swz(r + i * RSTEP, c % 8), ok ? p : base, ok ? 16 : 0);
        p += (u64)RSTEP * st;
    }
}

// Queues the copy of n f32 values base[i0 .. i0 + n) into `dst` (zeros past `limit`).
__device__ __forceinline__ void load_vec(uint32_t dst, const float* base, int i0, int limit, int n, int tid) {
    if (tid < n) {
        const bool ok = i0 + tid < limit;
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst + 4 * tid), "l"(ok ? base + i0 + tid : base),
                     "r"(ok ? 4 : 0));
    }
}

// The mask (and the scale to log2 units unless it is positive), online softmax and P (A
// fragments rounded to T) of the key tile at k0 from its scores s, this thread's rows row_t
// and row_t + 8: x = s * mul is in log2 units, and m is kept in them. With a positive scale a
// row's maximum of x is its maximum of s times scale_log2 (rounding is monotonic) and
// p = 2^(s * scale_log2 - m) is one fused multiply-add and an ex2; otherwise x is formed first
// (one code path: a uniform branch). The running maximum m moves only when some row of the
// warp sees one more than RESCALE above it (or its first visible key): until then
// p = 2^(x - m) <= 2^RESCALE and O and l need no rescaling (the result is the same up to
// rounding; l and O are f32). When it moves, l is scaled here and the function returns true
// with alpha the factor O takes.
template <typename T>
__device__ __forceinline__ bool online_softmax(float (&s)[32], int k0, int tk, int q0, int row_t, int lane, bool causal,
                                               float sl2, float (&m)[2], float (&l)[2], uint32_t (&pf)[BK / 16][4],
                                               float (&alpha)[2], T tag) {
    const bool pos = sl2 > 0.f;
    const float mul = pos ? sl2 : 1.f;
    if (!pos) {
#pragma unroll
        for (int i = 0; i < 32; ++i) s[i] *= sl2;
    }
    if (k0 + BK > tk || (causal && k0 + BK - 1 > q0)) {
        // Column k0 + 8 (i / 4) + 2 (lane % 4) + i % 2 is visible to row r when below tk
        // and, causal, at most r: when 8 (i / 4) + i % 2 <= last[(i / 2) % 2].
        int last[2];
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) last[hh] = (causal ? min(tk - 1, row_t + 8 * hh) : tk - 1) - k0 - 2 * (lane % 4);
#pragma unroll
        for (int i = 0; i < 32; ++i)
            if (8 * (i / 4) + (i & 1) > last[(i >> 1) & 1]) s[i] = NEG_INF;
    }
    float mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
    for (int i = 0; i < 32; ++i) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
    bool move = false;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 1));
        mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 2));
        mx[hh] *= mul;
        move |= mx[hh] > m[hh] + RESCALE;
    }
    const bool rescale = __any_sync(0xffffffffu, move);
    if (rescale) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const float mn = fmaxf(m[hh], mx[hh]);
            alpha[hh] = ex2(m[hh] - (mn == NEG_INF ? 0.f : mn));
            m[hh] = mn;
            l[hh] *= alpha[hh];
        }
    }
    float mu[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) mu[hh] = m[hh] == NEG_INF ? 0.f : m[hh];
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int i = 8 * kk + 2 * e;
            const float nm = -mu[e & 1];
            const float p0 = ex2(fmaf(s[i], mul, nm)), p1 = ex2(fmaf(s[i + 1], mul, nm));
            l[e & 1] += p0 + p1;
            pf[kk][e] = pack2(p0, p1, tag);
        }
    return rescale;
}

template <int P>
__device__ __forceinline__ void rescale_rows(float (&o)[P][32], const float (&alpha)[2]) {
#pragma unroll
    for (int p = 0; p < P; ++p)
#pragma unroll
        for (int i = 0; i < 32; ++i) o[p][i] *= alpha[(i >> 1) & 1];
}

// The forward's end for one (b, h): O / l rounded to T into rows below tq of `out` (row r at
// out + r st), lse = (m + log2 l) ln 2 (-inf, and O 0, when l = 0).
template <int P, typename T>
__device__ __forceinline__ void finish_forward(const float (&o)[P][32], const float (&m)[2], const float (&l)[2],
                                               float* lse, uint16_t* out, u64 st, int row_t, int tq, int lane,
                                               T tag) {
    float inv[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        float ls = l[hh];
        ls += __shfl_xor_sync(0xffffffffu, ls, 1);
        ls += __shfl_xor_sync(0xffffffffu, ls, 2);
        inv[hh] = ls > 0.f ? 1.f / ls : 0.f;
        const int row = row_t + 8 * hh;
        if (row < tq && lane % 4 == 0) lse[row] = ls > 0.f ? (m[hh] + log2f(ls)) * 0.69314718055994531f : NEG_INF;
    }
#pragma unroll
    for (int p = 0; p < P; ++p) store_rows(out + 64 * p, st, row_t, tq, o[p], inv, lane, tag);
}

template <int D, typename T>
__device__ __forceinline__ void attn_fwd_sm90(const AttnArgs& a) {
    using C = Cfg<D>;
    constexpr int P = C::P, TILE = C::TILE;
    static_assert(C::FWD_STAGES == 2, "two-stage rings of K and V");
    extern __shared__ uint8_t smem_raw[];
    // Q, then K's ring of two stages, then V's.
    const uint32_t sq = (smem_addr(smem_raw) + 1023) & ~1023u, sk0 = sq + TILE, sv0 = sk0 + 2 * TILE;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid / 32;
    const int tq = (int)a.tq, tk = (int)a.tk;  // below 2^30 (checked)
    const int ntq = (tq + BQ - 1) / BQ;
    const int q0 = (ntq - 1 - (int)blockIdx.x) * BQ;  // the heaviest causal tiles first
    const int row_t = q0 + 16 * warp + lane / 4;       // this thread's rows: row_t, row_t + 8
    const u64 bhs = a.batch * a.heads;
    const float sl2 = a.scale_log2;
    const int kv_end = a.causal ? min(tk, q0 + BQ) : tk;
    const int n_tiles = (kv_end + BK - 1) / BK;
    const T tag{};

    for (u64 bh = blockIdx.y; bh < bhs; bh += gridDim.y) {
        const u64 b = bh / a.heads, h = bh % a.heads;
        const uint16_t* q = reinterpret_cast<const uint16_t*>(a.q) + b * a.st[S_Q][0] + h * a.st[S_Q][1];
        const uint16_t* k = reinterpret_cast<const uint16_t*>(a.k) + b * a.st[S_K][0] + h * a.st[S_K][1];
        const uint16_t* v = reinterpret_cast<const uint16_t*>(a.v) + b * a.st[S_V][0] + h * a.st[S_V][1];
        const u64 kst = a.st[S_K][2], vst = a.st[S_V][2];
        // K and V of tile j at stage j % 2 of their rings.
        auto sk_of = [&](int j) { return sk0 + (j & 1) * TILE; };
        auto sv_of = [&](int j) { return sv0 + (j & 1) * TILE; };
        auto load_k = [&](int j) { load_tile<BK, D>(sk_of(j), k, kst, j * BK, tk, tid); };
        auto load_v = [&](int j) { load_tile<BK, D>(sv_of(j), v, vst, j * BK, tk, tid); };

        float o[P][32];
#pragma unroll
        for (int p = 0; p < P; ++p)
#pragma unroll
            for (int i = 0; i < 32; ++i) o[p][i] = 0.f;
        float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};

        // The copies of a step are complete at the next step's barrier, and past that barrier
        // no thread reads the stages the step before used (each waited for its products on
        // them): one barrier a tile. `copies(f)` waits for the pending copies, passes the
        // barrier, then queues f's copies as one commit group.
        auto copies = [&](auto&& f) {
            cp_async_wait<0>();
            fence_proxy_async();
            __syncthreads();
            f();
            cp_async_commit();
        };
        load_tile<BQ, D>(sq, q, a.st[S_Q][2], q0, tq, tid);
        if constexpr (D == 64) {
            // Step j: S = Q K^T of tile j, the softmax, O += P V; tile j + 1's copies queued
            // at its start.
            if (n_tiles > 0) {
                load_k(0);
                load_v(0);
            }
            cp_async_commit();
            for (int j = 0; j < n_tiles; ++j) {
                copies([&] {
                    if (j + 1 < n_tiles) {
                        load_k(j + 1);
                        load_v(j + 1);
                    }
                });
                float s[32];
                wgmma_fence();
                queue_abt<D>(s, sq, sk_of(j), tag);
                wgmma_commit();
                wgmma_wait<0>();
                pin_all(s);
                uint32_t pa[BK / 16][4];
                float alpha[2];
                if (online_softmax(s, j * BK, tk, q0, row_t, lane, a.causal, sl2, m, l, pa, alpha, tag))
                    rescale_rows(o, alpha);
                pin_all(o);
                wgmma_fence();
                queue_fb(o, pa, sv_of(j), tag);
                wgmma_commit();
                wgmma_wait<0>();
                pin_all(o);
            }
        } else {
            // Step j queues S = Q K^T of tile j before O += P V of tile j - 1, so that one
            // tile's softmax runs while the tensor cores take the next tile's scores and the
            // previous tile's values; its copies are K of tile j + 1 and V of tile j (into the
            // stages of K of tile j - 1 and V of tile j - 2).
            if (n_tiles > 0) load_k(0);
            cp_async_commit();
            uint32_t pa[BK / 16][4];  // P of the previous tile
            if (n_tiles > 0) {
                copies([&] {
                    if (1 < n_tiles) load_k(1);
                    load_v(0);
                });
                float s[32], alpha[2];
                wgmma_fence();
                queue_abt<D>(s, sq, sk0, tag);
                wgmma_commit();
                wgmma_wait<0>();
                pin_all(s);
                online_softmax(s, 0, tk, q0, row_t, lane, a.causal, sl2, m, l, pa, alpha, tag);  // O is 0
            }
            for (int j = 1; j < n_tiles; ++j) {
                copies([&] {
                    if (j + 1 < n_tiles) load_k(j + 1);
                    load_v(j);
                });
                float s[32], alpha[2];
                uint32_t pn[BK / 16][4];
                pin_all(o);
                wgmma_fence();
                queue_abt<D>(s, sq, sk_of(j), tag);
                wgmma_commit();
                queue_fb(o, pa, sv_of(j - 1), tag);
                wgmma_commit();
                wgmma_wait<1>();
                pin_all(s);
                const bool rescale = online_softmax(s, j * BK, tk, q0, row_t, lane, a.causal, sl2, m, l, pn, alpha, tag);
                // The previous tile's P V is done: O (which holds it at the former maximum)
                // is rescaled, and this tile's P takes the fragments' place.
                wgmma_wait<0>();
                pin_all(o);
#pragma unroll
                for (int kk = 0; kk < BK / 16; ++kk)
#pragma unroll
                    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(pa[kk][e])::"memory");
                if (rescale) rescale_rows(o, alpha);
#pragma unroll
                for (int kk = 0; kk < BK / 16; ++kk)
#pragma unroll
                    for (int e = 0; e < 4; ++e) pa[kk][e] = pn[kk][e];
            }
            if (n_tiles > 0) {
                // The last tile's P V.
                copies([] {});
                pin_all(o);
                wgmma_fence();
                queue_fb(o, pa, sv_of(n_tiles - 1), tag);
                wgmma_commit();
                wgmma_wait<0>();
                pin_all(o);
            }
        }
        cp_async_wait<0>();
        finish_forward(o, m, l, reinterpret_cast<float*>(a.lse) + bh * a.tq,
                       reinterpret_cast<uint16_t*>(a.o) + b * a.st[S_O][0] + h * a.st[S_O][1], a.st[S_O][2], row_t, tq,
                       lane, tag);
        __syncthreads();  // Q's tile is refilled for the next (b, h)
    }
}

// ---------------------------------------------------------------------------------------------
// Backward: dQ, a block per query tile (attention.cu's `attn_bwd_dq` on wgmma).

// Dynamic shared memory (`sm90_kernel` in attention.rs): alignment slack, Q and dO, then
// DQ_STAGES stages of (K, V); four blocks a multiprocessor.
template <int D, typename T>
__device__ __forceinline__ void attn_bwd_dq_sm90(const AttnArgs& a) {
    using C = Cfg<D>;
    constexpr int STAGES = C::DQ_STAGES, P = C::P, KV_BYTES = C::TILE;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t sq = (smem_addr(smem_raw) + 1023) & ~1023u, so = sq + C::TILE, skv = so + C::TILE;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid / 32;
    const int tq = (int)a.tq, tk = (int)a.tk;
    const int ntq = (tq + BQ - 1) / BQ;
    const int q0 = (ntq - 1 - (int)blockIdx.x) * BQ;
    const int row_t = q0 + 16 * warp + lane / 4;
    const u64 bhs = a.batch * a.heads;
    const float sl2 = a.scale_log2;
    const int kv_end = a.causal ? min(tk, q0 + BQ) : tk;
    const int n_tiles = (kv_end + BK - 1) / BK;
    const T tag{};

    for (u64 bh = blockIdx.y; bh < bhs; bh += gridDim.y) {
        const u64 b = bh / a.heads, h = bh % a.heads;
        const uint16_t* k = reinterpret_cast<const uint16_t*>(a.k) + b * a.st[S_K][0] + h * a.st[S_K][1];
        const uint16_t* v = reinterpret_cast<const uint16_t*>(a.v) + b * a.st[S_V][0] + h * a.st[S_V][1];
        const u64 kst = a.st[S_K][2], vst = a.st[S_V][2];
        auto load_kv = [&](int j) {
            const uint32_t st = skv + (j % STAGES) * 2 * KV_BYTES;
            load_tile<BK, D>(st, k, kst, j * BK, tk, tid);
            load_tile<BK, D>(st + KV_BYTES, v, vst, j * BK, tk, tid);
        };
        load_tile<BQ, D>(sq, reinterpret_cast<const uint16_t*>(a.q) + b * a.st[S_Q][0] + h * a.st[S_Q][1], a.st[S_Q][2], q0,
                      tq, tid);
        load_tile<BQ, D>(so, reinterpret_cast<const uint16_t*>(a.dout) + b * a.st[S_DO][0] + h * a.st[S_DO][1],
                      a.st[S_DO][2], q0, tq, tid);
#pragma unroll
        for (int j = 0; j < STAGES - 1; ++j) {
            if (j < n_tiles) load_kv(j);
            cp_async_commit();
        }

        // The rows' lse (in log2 units; -inf, a row that saw no key, as +inf: p = 0) and d.
        float lq[2], dr[2];
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int row = row_t + 8 * hh;
            const bool ok = row < tq;
            const float x = ok ? reinterpret_cast<const float*>(a.lse)[bh * a.tq + row] * 1.44269504088896341f : 0.f;
            lq[hh] = x == NEG_INF ? __int_as_float(0x7f800000) : x;
            dr[hh] = ok ? reinterpret_cast<const float*>(a.dsum)[bh * a.tq + row] : 0.f;
        }

        float dq[P][32];
#pragma unroll
        for (int p = 0; p < P; ++p)
#pragma unroll
            for (int i = 0; i < 32; ++i) dq[p][i] = 0.f;

        for (int j = 0; j < n_tiles; ++j) {
            // As the forward's: one barrier a tile, the stage of tile j - 1 refilled past it.
            cp_async_wait<STAGES - 2>();
            fence_proxy_async();
            __syncthreads();
            if (j + STAGES - 1 < n_tiles) load_kv(j + STAGES - 1);
            cp_async_commit();
            const uint32_t sk = skv + (j % STAGES) * 2 * KV_BYTES, sv = sk + KV_BYTES;
            const int k0 = j * BK;

            // S = Q K^T and dP = dO V^T (64 rows x BK keys).
            float s[32], dp[32];
            wgmma_fence();
            queue_abt<D>(s, sq, sk, tag);
            queue_abt<D>(dp, so, sv, tag);
            wgmma_commit();
            wgmma_wait<0>();
            pin_all(s);
            pin_all(dp);

            // dS = P (dP - d), rounded to T as A fragments.
            const bool need_mask = k0 + BK > tk || (a.causal && k0 + BK - 1 > q0);
            uint32_t da[BK / 16][4];
#pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float ds[2];
#pragma unroll
                    for (int x = 0; x < 2; ++x) {
                        const int i = 8 * kk + 2 * e + x;
                        float p = ex2(fmaf(s[i], sl2, -lq[e & 1]));
                        if (need_mask) {
                            const int col = k0 + 8 * (i / 4) + 2 * (lane % 4) + (i & 1), row = row_t + 8 * (e & 1);
                            if (col >= tk || (a.causal && col > row)) p = 0.f;
                        }
                        ds[x] = p * (dp[i] - dr[e & 1]);
                    }
                    da[kk][e] = pack2(ds[0], ds[1], tag);
                }

            // dQ += dS K (keys as k: K mn-major).
            pin_all(dq);
            wgmma_fence();
            queue_fb(dq, da, sk, tag);
            wgmma_commit();
            wgmma_wait<0>();
            pin_all(dq);
        }
        cp_async_wait<0>();

        // dQ times scale, rounded to T.
        uint16_t* out = reinterpret_cast<uint16_t*>(a.dq) + b * a.st[S_DQ][0] + h * a.st[S_DQ][1];
        const float mul[2] = {a.scale, a.scale};
#pragma unroll
        for (int p = 0; p < P; ++p) store_rows(out + 64 * p, a.st[S_DQ][2], row_t, tq, dq[p], mul, lane, tag);
        if (a.csum) {
            // The previous (b, h)'s readers of `red` passed the loop's last barrier.
            __shared__ float red[4 * D];
#pragma unroll
            for (int p = 0; p < P; ++p) warp_col_sums(red + D * warp + 64 * p, row_t, tq, dq[p], mul, lane, tag);
            __syncthreads();
            if (tid < D)
                add_warp_sums<D>(reinterpret_cast<float*>(a.csum) + ((b * ntq + q0 / BQ) * 3 * a.heads + h) * D, red,
                                 tid);
        }
        __syncthreads();  // Q and dO are refilled for the next (b, h)
    }
}

// ---------------------------------------------------------------------------------------------
// Backward: dK and dV, a block (one warpgroup) per 64 keys (attention.cu's `attn_bwd_dkdv` on
// wgmma, keys as the products' rows).

// A stage (Cfg's KV_STAGE): the Q and dO tiles of BQK = 64 queries, then their lse and d (f32).
constexpr int BQK = 64;

template <int D, typename T>
__device__ __forceinline__ void attn_bwd_dkdv_sm90(const AttnArgs& a) {
    using C = Cfg<D>;
    constexpr int KV_STAGES = C::KV_STAGES, KV_STAGE_STRIDE = C::KV_STAGE_STRIDE, P = C::P;
    constexpr int KV_BYTES = C::TILE, QK_BYTES = C::TILE;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t sk = (smem_addr(smem_raw) + 1023) & ~1023u, sv = sk + KV_BYTES, sst = sv + KV_BYTES;
    const uint8_t* gen = smem_raw + (sk - smem_addr(smem_raw));  // sk as a generic pointer
    const int tid = threadIdx.x, lane = tid & 31, warp = tid / 32;
    const int tq = (int)a.tq, tk = (int)a.tk;
    const int j0 = (int)blockIdx.x * BK;  // causal: the first key blocks see the most queries
    const int key_t = j0 + 16 * warp + lane / 4;  // this thread's keys: key_t, key_t + 8
    const u64 bhs = a.batch * a.heads;
    const float sl2 = a.scale_log2;
    const int ntq = (tq + BQK - 1) / BQK;
    const int it0 = a.causal ? j0 / BQK : 0;  // queries below j0 see none of these keys
    const int n_it = it0 < ntq ? ntq - it0 : 0;
    const T tag{};

    for (u64 bh = blockIdx.y; bh < bhs; bh += gridDim.y) {
        const u64 b = bh / a.heads, h = bh % a.heads;
        const uint16_t* q = reinterpret_cast<const uint16_t*>(a.q) + b * a.st[S_Q][0] + h * a.st[S_Q][1];
        const uint16_t* dout = reinterpret_cast<const uint16_t*>(a.dout) + b * a.st[S_DO][0] + h * a.st[S_DO][1];
        const float* lse = reinterpret_cast<const float*>(a.lse) + bh * a.tq;
        const float* dsum = reinterpret_cast<const float*>(a.dsum) + bh * a.tq;
        const u64 qst = a.st[S_Q][2], dst = a.st[S_DO][2];
        auto load_stage = [&](int it) {
            const uint32_t base = sst + (it % KV_STAGES) * KV_STAGE_STRIDE;
            const int i0 = (it0 + it) * BQK;
            load_tile<BQK, D>(base, q, qst, i0, tq, tid);
            load_tile<BQK, D>(base + QK_BYTES, dout, dst, i0, tq, tid);
            // Threads 0..63 copy the lse, 64..127 the d.
            if (tid < BQK)
                load_vec(base + 2 * QK_BYTES, lse, i0, tq, BQK, tid);
            else
                load_vec(base + 2 * QK_BYTES + 4 * BQK, dsum, i0, tq, BQK, tid - BQK);
        };

        // K, V and the first KV_STAGES - 1 query tiles, a commit group each (K and V's with
        // the first).
        load_tile<BK, D>(sk, reinterpret_cast<const uint16_t*>(a.k) + b * a.st[S_K][0] + h * a.st[S_K][1],
                                  a.st[S_K][2], j0, tk, tid);
        load_tile<BK, D>(sv, reinterpret_cast<const uint16_t*>(a.v) + b * a.st[S_V][0] + h * a.st[S_V][1],
                                  a.st[S_V][2], j0, tk, tid);
#pragma unroll
        for (int it = 0; it < KV_STAGES - 1; ++it) {
            if (it < n_it) load_stage(it);
            cp_async_commit();
        }

        float dk[P][32], dv[P][32];
#pragma unroll
        for (int p = 0; p < P; ++p)
#pragma unroll
            for (int i = 0; i < 32; ++i) dk[p][i] = dv[p][i] = 0.f;

        for (int it = 0; it < n_it; ++it) {
            // As the forward's: one barrier a tile, the stage of query tile it - 1 (its Q,
            // dO, lse and d) refilled past it.
            cp_async_wait<KV_STAGES - 2>();
            fence_proxy_async();
            __syncthreads();
            if (it + KV_STAGES - 1 < n_it) load_stage(it + KV_STAGES - 1);
            cp_async_commit();
            const int so = (it % KV_STAGES) * KV_STAGE_STRIDE;
            const uint32_t stq = sst + so, sto = stq + QK_BYTES;
            const float* slse = reinterpret_cast<const float*>(gen + 2 * KV_BYTES + so + 2 * QK_BYTES);
            const float* sds = slse + BQK;
            const int i0 = (it0 + it) * BQK;

            // S^T = K Q^T and dP^T = V dO^T (64 keys x 64 queries).
            float st[32], dp[32];
            wgmma_fence();
            queue_abt<D>(st, sk, stq, tag);
            queue_abt<D>(dp, sv, sto, tag);
            wgmma_commit();
            wgmma_wait<0>();
            pin_all(st);
            pin_all(dp);

            // P^T and dS^T (register i: key key_t + 8 ((i / 2) % 2), query i0 + 8 (i / 4) +
            // 2 (lane % 4) + i % 2), rounded to T as A fragments (queries as k).
            const bool need_mask = i0 + BQK > tq || (a.causal && i0 < j0 + BK - 1);
            uint32_t pf[BQK / 16][4], df[BQK / 16][4];
#pragma unroll
            for (int kq = 0; kq < BQK / 16; ++kq)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float p2[2], d2[2];
#pragma unroll
                    for (int x = 0; x < 2; ++x) {
                        const int i = 8 * kq + 2 * e + x;
                        const int ci = 8 * (i / 4) + 2 * (lane % 4) + x;
                        float lq = slse[ci] * 1.44269504088896341f;
                        lq = lq == NEG_INF ? __int_as_float(0x7f800000) : lq;
                        float p = ex2(fmaf(st[i], sl2, -lq));
                        if (need_mask) {
                            const int qi = i0 + ci, kj = key_t + 8 * (e & 1);
                            if (qi >= tq || (a.causal && kj > qi)) p = 0.f;
                        }
                        p2[x] = p;
                        d2[x] = p * (dp[i] - sds[ci]);
                    }
                    pf[kq][e] = pack2(p2[0], p2[1], tag);
                    df[kq][e] = pack2(d2[0], d2[1], tag);
                }

            // dV += P^T dO, dK += dS^T Q (queries as k: dO and Q mn-major).
            pin_all(dk);
            pin_all(dv);
            wgmma_fence();
            queue_fb(dv, pf, sto, tag);
            queue_fb(dk, df, stq, tag);
            wgmma_commit();
            wgmma_wait<0>();
            pin_all(dk);
            pin_all(dv);
        }
        cp_async_wait<0>();  // K and V's copies, when no query tile waited for them

        // dK times scale and dV, rounded to T (rows below tk).
        const float ks[2] = {a.scale, a.scale}, one[2] = {1.f, 1.f};
        uint16_t* odk = reinterpret_cast<uint16_t*>(a.dk) + b * a.st[S_DK][0] + h * a.st[S_DK][1];
        uint16_t* odv = reinterpret_cast<uint16_t*>(a.dv) + b * a.st[S_DV][0] + h * a.st[S_DV][1];
#pragma unroll
        for (int p = 0; p < P; ++p) {
            store_rows(odk + 64 * p, a.st[S_DK][2], key_t, tk, dk[p], ks, lane, tag);
            store_rows(odv + 64 * p, a.st[S_DV][2], key_t, tk, dv[p], one, lane, tag);
        }
        if (a.csum) {
            // dK's sums in red[0], dV's in red[1]; the previous (b, h)'s readers passed the
            // loop's last barrier. Thread t adds column (t mod D) of dK's and dV's sums.
            __shared__ float red[2][4 * D];
#pragma unroll
            for (int p = 0; p < P; ++p) {
                warp_col_sums(red[0] + D * warp + 64 * p, key_t, tk, dk[p], ks, lane, tag);
                warp_col_sums(red[1] + D * warp + 64 * p, key_t, tk, dv[p], one, lane, tag);
            }
            __syncthreads();
            const u64 ntk = (tk + BK - 1) / BK;
            float* cs = reinterpret_cast<float*>(a.csum) + ((b * ntk + j0 / BK) * 3 * a.heads + a.heads + h) * D;
            for (int idx = tid; idx < 2 * D; idx += THREADS)
                add_warp_sums<D>(cs + (idx / D) * a.heads * D, red[idx / D], idx % D);
        }
        __syncthreads();  // K and V are refilled for the next (b, h)
    }
}

}  // namespace

// Head dim 64: four forward and four dQ blocks a multiprocessor (at most 128 registers a
// thread), three dK/dV blocks (at most 170). Head dim 128: two of each (at most 255).
#define GENESIS_ATTN_SM90(D, NAME, TYPE, FWD_MIN, DQ_MIN, DKDV_MIN)                                        \
    extern "C" __global__ void __launch_bounds__(THREADS, FWD_MIN) attn_fwd_sm90_##NAME##_d##D(const AttnArgs a) { \
        attn_fwd_sm90<D, TYPE>(a);                                                                         \
    }                                                                                                      \
    extern "C" __global__ void __launch_bounds__(THREADS, DQ_MIN) attn_bwd_dq_sm90_##NAME##_d##D(const AttnArgs a) { \
        attn_bwd_dq_sm90<D, TYPE>(a);                                                                      \
    }                                                                                                      \
    extern "C" __global__ void __launch_bounds__(THREADS, DKDV_MIN)                                        \
        attn_bwd_dkdv_sm90_##NAME##_d##D(const AttnArgs a) {                                               \
        attn_bwd_dkdv_sm90<D, TYPE>(a);                                                                    \
    }
GENESIS_ATTN_SM90(64, bf16, __nv_bfloat16, 4, 4, 3)
GENESIS_ATTN_SM90(64, f16, __half, 4, 4, 3)
GENESIS_ATTN_SM90(128, bf16, __nv_bfloat16, 2, 2, 2)
GENESIS_ATTN_SM90(128, f16, __half, 2, 2, 2)
#undef GENESIS_ATTN_SM90
