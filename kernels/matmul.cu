// Batched matrix multiplication of Genesis: C[b] = A[b] @ B[b], A [m, k], B [k, n], C [m, n]
// contiguous (row-major, batch stride m * n). Each operand is read in place from its own layout:
// row-major ("n": A[i][p] at i * lda + p, B[p][j] at p * ldb + j) or column-major, i.e. a
// transposed view ("t": A[i][p] at p * lda + i, B[p][j] at j * ldb + p), and advances by its own
// batch stride (0 broadcasts one matrix to every batch). Kernel names end in the two layouts:
// matmul_<in>[_f32out]_<a><b>, e.g. matmul_bf16_nt. Products are accumulated in f32 and
// rounded once to the output type (the input type, or f32 for the _f32out kernels).
//
// f16 and bf16: tensor cores through `mma.sync.aligned.m16n8k16` (sm_80 and newer; on sm_90 the
// same instructions run, wgmma is not used here).
//   * A block of 256 threads (8 warps as 2 x 4) computes a 128 x 128 tile of C; each warp a
//     64 x 32 sub-tile: 4 x 4 mma tiles of 16 x 8, 64 f32 accumulators per thread.
//   * K advances in slices of 32 through a 3-stage ring of shared-memory tiles (48 KiB, the
//     static limit, so no launch attribute is needed) filled by `cp.async` 16-byte copies: the
//     copies of slice t + 2 are in flight while slice t is multiplied. One barrier per slice.
//   * Each operand tile is stored "k-major" (rows of 32 k values, 64 bytes, when k is the
//     contiguous dimension in memory) or "mn-major" (rows of 128 m or n values, 256 bytes, when
//     m or n is). Fragments come out with `ldmatrix` (k-major) or `ldmatrix.trans` (mn-major),
//     so a transposed operand costs nothing but the other instruction.
//   * Shared memory is swizzled: the 16-byte chunk c of row r is stored at chunk
//     c ^ ((r >> 1) & 3) (64-byte rows) or c ^ (r & 7) (256-byte rows), so the eight rows one
//     ldmatrix phase reads, and the chunks one cp.async phase writes, fall in eight different
//     bank groups.
//   * Edges are predicated: a chunk that runs past k (or m, n) is read element by element (zeros
//     past the edge); a chunk wholly outside is zero-filled by cp.async. When a
//     16-byte copy is not possible (leading dimension or batch stride not a multiple of 8
//     elements, or a base address not 16-byte aligned) the same tiles are filled by element
//     loads instead. The epilogue stores pairs where the row allows, single elements otherwise.
//   * Blocks are ordered in groups of 8 tile rows (consecutive blocks share B tiles and a small
//     band of A tiles, which stay in L2); blocks stride over the batch by gridDim.y.
//
// f32: CUDA cores, no TF32 (the default precision of PyTorch's matmul).
//   * A block of 256 threads computes a 128 x 128 tile of C. Its 8 warps tile it 4 (m) x 2 (n),
//     32 x 64 each; in a warp, 4 x 8 threads each own 8 x 8 outputs: rows r0 .. r0 + 3 and
//     r0 + 16 .. r0 + 19, and runs of 4 columns 32 apart, so every shared-memory read is a
//     float4 and a warp's reads of one k row of B cover 128 contiguous bytes. The lanes are
//     laid on the 4 x 8 grid interleaved in pairs (a quarter-warp covers 2 row runs and 4
//     column runs), which takes fewer shared-memory wavefronts than row-major order.
//   * K advances in slices of 16, double-buffered: the global loads (float4, two per thread
//     and operand of a 128 x 128 tile) of slice t + 1 are issued into registers before slice t
//     is multiplied and stored to the other shared buffer after it; one barrier per slice. Both tiles are kept k-major
//     in shared memory (A as As[k][m], rows padded by 4 floats: the transposing stores of a
//     warp meet at most two to a bank).
//   * Edge tiles read whole k slices as float4 too, zeros for rows or columns past m or n,
//     when no float4 straddles the edge; the last partial slice, such straddling edges and
//     unaligned operands are read element by element with bounds checks.
//   * Large products of aligned operands whose k is a multiple of 16 may run `matmul_f32w_*`
//     (`matmul_f32w.cu`): 128 x 256 tiles, 16 x 8 outputs a thread (the launcher's cost model
//     chooses by waves).
//   * Small products (too few 128 x 128 tiles to fill the device) may run `matmul_f32s_*`:
//     64 x 64 tiles, 4 x 4 outputs a thread, two blocks a multiprocessor (the launcher's
//     cost model chooses).
//   * Products of n <= 64 run `matmul_f32n64_*`: the same kernel on 256 x 64 tiles (warps 8 x 1),
//     so no tile computes 64 columns it then drops. Products of m <= 64 < n run
//     `matmul_f32n64ct_*`, the same kernels on C^T = B^T A^T (operands swapped, each read in
//     place in the opposite major order) storing C^T transposed, i.e. C row-major.
//
// The CPU twin (crates/genesis-kernels/src/matmul.rs) accumulates in f32 in increasing k; the
// kernels accumulate in another order (per k slice and tensor-core instruction) and fuse
// multiply-adds, so the two agree within the f32 accumulation bound (k * 2^-24 * sum |a||b|)
// plus one rounding to the output type, not bit for bit.
//
// f32 with TF32 (opt-in, `matmul_tf32_*`): tensor cores through `mma.sync.aligned.m16n8k8`
// with tf32 inputs and f32 accumulators (sm_80 and newer).
//   * Every input is truncated to tf32 (its low 13 mantissa bits cleared, NaN kept) once, when
//     it is stored to shared memory: what the Hopper kernel's wgmma does when it reads f32
//     operands, so both paths compute the same products. Products of tf32 values are exact in
//     f32 and are accumulated in f32, so the result is the f32 product of the truncated inputs
//     up to the f32 accumulation bound (the CPU twin `matmul_strided_precision` truncates the
//     same way).
//   * A block of 256 threads (8 warps as 2 x 4) computes a 128 x 128 tile; each warp 64 x 32 as
//     4 x 4 mma tiles of 16 x 8 (64 f32 accumulators per thread, the layout of the f16 kernel).
//   * K advances in slices of 32: each thread loads four float4 per operand of slice t + 1
//     into registers (the f32 kernel's bounds-checked loads) while slice t is multiplied from
//     shared memory, then stores them after a barrier. One buffer per operand (36 KiB).
//   * An operand whose k is contiguous in memory is kept as rows of 32 k values padded to 36
//     ([mn][36]); otherwise as rows of 128 m or n values padded to 136 ([k][136]). A fragment
//     load (lane: g = lane / 4, t = lane % 4) reads element (mn0 + g, k0 + t), at word
//     36 g + t or 136 t + g: 4 g + t and 8 t + g are 32 different banks in both cases, and
//     the float4 stores of 8 consecutive threads write 32 consecutive words.
//
// Split-k (every kernel above, `kslice` parameter): block z of the grid (blockIdx.z) computes
// the partial product over k in [z * kslice, min(k, (z + 1) * kslice)) and writes it to
// C + z * batch * m * n. It reads A and B from the slice's first k (A + k0 or A + k0 * lda,
// B + k0 * ldb or B + k0, by layout) with k set to the slice's length, so the kernels' loops
// and predicated edges are unchanged; the launcher keeps kslice a multiple of 32, so a
// slice's first k is as aligned as k = 0 for the 16-byte loads. With one slice (gridDim.z ==
// 1, kslice >= k) this is the plain product. The launcher gives split products a workspace of
// slices * batch * m * n f32 values and an f32-output kernel, then `splitk_sum_<O>` adds the
// slices' partials in the fixed order z = 0, 1, ... and rounds once to the output type: no
// atomics, the same bits on every run.
//
// Products with m == 1 or n == 1 go to the matrix-vector kernels at the end of the file.
//
// Aligned copies (`matmul_pad_copy_b16` / `_b32`): an operand whose rows or batches do not
// start on 16 bytes (a leading dimension or batch stride not a multiple of 16 bytes, an odd
// start) is copied by the launcher into its workspace with lines padded to a multiple of 16
// bytes, so the product runs on a 16-byte kernel (the Hopper kernel for f16 and bf16, the
// float4 loads for f32) instead of element loads. The copy keeps the operand's major order.
//
// Launch contract (src/matmul.rs): blocks of 256 threads, grid (ceil(m / 128) * ceil(n / 128)
// (ceil(m / 256) * ceil(n / 64) for `matmul_f32n64*`, ceil(m / 64) * ceil(n / 64) for
// `matmul_f32s_*`),
// min(batch, 65535), slices). Parameters: (A, B, C, batch, m, n, k, lda, ldb, batch stride of
// A, batch stride of B, kslice), every integer a u64, strides and leading dimensions in
// elements.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "cp_async.cuh"
#include "matmul_f32.cuh"

namespace {

constexpr int THREADS = 256;

// ---------------------------------------------------------------------------------------------
// Shared helpers.

__device__ __forceinline__ void store1(float* p, float x) { *p = x; }
__device__ __forceinline__ void store1(__half* p, float x) { *p = __float2half_rn(x); }
__device__ __forceinline__ void store1(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }
__device__ __forceinline__ void store2(float* p, float x, float y) {
    *reinterpret_cast<float2*>(p) = make_float2(x, y);
}
__device__ __forceinline__ void store2(__half* p, float x, float y) {
    *reinterpret_cast<__half2*>(p) = __floats2half2_rn(x, y);
}
__device__ __forceinline__ void store2(__nv_bfloat16* p, float x, float y) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
}

// ---------------------------------------------------------------------------------------------
// Tensor-core kernel (f16, bf16).

constexpr int TC_BM = 128, TC_BN = 128, TC_BK = 32, TC_STAGES = 3;
constexpr int TC_CHUNKS = TC_BM * TC_BK / 8;  // 16-byte chunks per operand tile (512)

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1, __nv_bfloat16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1, __half) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Chunk offsets (in 16-byte chunks) inside a swizzled tile.
// k-major: 128 rows (m or n) of 4 chunks (32 k values).
__device__ __forceinline__ int kmajor_chunk(int row, int c) { return row * 4 + (c ^ ((row >> 1) & 3)); }
// mn-major: 32 rows (k) of 16 chunks (128 m or n values).
__device__ __forceinline__ int mnmajor_chunk(int row, int c) { return row * 16 + (c ^ (row & 7)); }

// The loads of one thread into one operand's tiles: two 16-byte chunks per k slice. KMAJOR:
// element (mn, k) at base[mn * ld + k], else at base[k * ld + mn]; `extent` is m (A) or n (B).
// Chunk i of the thread is row (tid / 4 + 64 i) and chunk tid % 4 of a k-major tile, or row
// (tid / 16 + 16 i) and chunk tid % 16 of an mn-major one.
template <bool KMAJOR, bool VEC>
struct TileLoader {
    const uint16_t* src;  // the thread's first chunk at k slice 0
    uint64_t step;        // elements between consecutive k slices
    uint64_t next;        // elements between the thread's two chunks
    int64_t inner_left;   // KMAJOR: k values from the chunk's start to K at slice 0;
                          // else: m/n values from the chunk's start to the extent
    int64_t outer_left[2];  // KMAJOR: 1 if the row is inside the extent, else 0;
                            // else: k rows from the chunk's row to K at slice 0
    uint32_t dst[2];      // byte offsets of the two chunks in the tile

    __device__ __forceinline__ TileLoader(const uint16_t* base, uint64_t ld, uint64_t extent,
                                          uint64_t K, uint64_t mn0, int tid) {
        if (KMAJOR) {
            const int row = tid >> 2, c = tid & 3;
            src = base + (mn0 + row) * ld + c * 8;
            step = TC_BK;
            next = 64 * ld;
            inner_left = (int64_t)K - c * 8;
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                outer_left[i] = mn0 + row + 64 * i < extent;
                dst[i] = kmajor_chunk(row + 64 * i, c) * 16;
            }
        } else {
            const int row = tid >> 4, c = tid & 15;
            src = base + (uint64_t)row * ld + mn0 + c * 8;
            step = TC_BK * ld;
            next = 16 * ld;
            inner_left = (int64_t)extent - (int64_t)(mn0 + c * 8);
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                outer_left[i] = (int64_t)K - (row + 16 * i);
                dst[i] = mnmajor_chunk(row + 16 * i, c) * 16;
            }
        }
    }

    // Queues (VEC) or performs the loads of k slice `kt` into the tile at shared address `tile`.
    __device__ __forceinline__ void load(uint32_t tile, int kt) const {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            int valid;
            if (KMAJOR) {
                const int64_t left = inner_left - (int64_t)kt * TC_BK;
                valid = outer_left[i] ? (int)max((int64_t)0, min(left, (int64_t)8)) : 0;
            } else {
                valid = outer_left[i] - (int64_t)kt * TC_BK > 0
                            ? (int)max((int64_t)0, min(inner_left, (int64_t)8))
                            : 0;
            }
            const uint16_t* p = src + (uint64_t)kt * step + i * next;
            // A chunk that is whole, or wholly outside (zero-filled), is one 16-byte cp.async;
            // a chunk cut by an edge is read element by element, so no access reaches past
            // the last valid element.
            if (VEC && (valid == 8 || valid == 0)) {
                cp_async16(tile + dst[i], valid > 0 ? p : src, valid * 2);
            } else {
                uint16_t v[8];
#pragma unroll
                for (int e = 0; e < 8; ++e) v[e] = e < valid ? p[e] : (uint16_t)0;
                const uint32_t x = v[0] | ((uint32_t)v[1] << 16), y = v[2] | ((uint32_t)v[3] << 16);
                const uint32_t z = v[4] | ((uint32_t)v[5] << 16), w = v[6] | ((uint32_t)v[7] << 16);
                asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(tile + dst[i]), "r"(x),
                             "r"(y), "r"(z), "r"(w));
            }
        }
    }
};

constexpr int TC_TILE_BYTES = TC_CHUNKS * 16;               // one operand tile (8 KiB)
constexpr int TC_STAGE_BYTES = 2 * TC_TILE_BYTES;           // A and B tiles of one k slice
constexpr int TC_SMEM_BYTES = TC_STAGES * TC_STAGE_BYTES;   // 48 KiB

template <typename T, typename O, bool TA, bool TB, bool VEC>
__device__ __forceinline__ void gemm_tc(uint4* smem, const T* __restrict__ A,
                                        const T* __restrict__ B, O* __restrict__ C,
                                        uint64_t batch, uint64_t M, uint64_t N, uint64_t K,
                                        uint64_t lda, uint64_t ldb, uint64_t sa, uint64_t sb) {
    // A is k-major when row-major (not transposed); B is k-major when transposed.
    constexpr bool A_KMAJOR = !TA;
    constexpr bool B_KMAJOR = TB;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 2, wn = warp & 3;  // 2 x 4 warps, 64 x 32 each
    const uint64_t tiles_m = (M + TC_BM - 1) / TC_BM, tiles_n = (N + TC_BN - 1) / TC_BN;
    uint64_t tm, tn;
    tile_of(blockIdx.x, tiles_m, tiles_n, tm, tn);
    const uint64_t m0 = tm * TC_BM, n0 = tn * TC_BN;
    const int kt_n = (int)((K + TC_BK - 1) / TC_BK);
    const int q = lane >> 3, r8 = lane & 7;
    const uint32_t sbase = smem_addr(smem);

    // ldmatrix addresses (byte offsets in a stage) of this lane for the first m16 tile of A and
    // the first pair of n8 tiles of B at k step 0. The swizzle of a k-major row depends only on
    // the lane (tiles start on multiples of 16 rows), so the other tiles are 1 KiB further and
    // the second k step flips chunk bit 1; in an mn-major tile the tiles flip chunk bits 1-2 and
    // the second k step is 16 rows (4 KiB) further.
    const uint32_t la0 = 16 * (A_KMAJOR ? kmajor_chunk(wm * 64 + (q & 1) * 8 + r8, q >> 1)
                                        : mnmajor_chunk((q >> 1) * 8 + r8, wm * 8 + (q & 1)));
    const uint32_t lb0 = TC_TILE_BYTES +
                         16 * (B_KMAJOR ? kmajor_chunk(wn * 32 + (q >> 1) * 8 + r8, q & 1)
                                        : mnmajor_chunk((q & 1) * 8 + r8, wn * 4 + (q >> 1)));
    auto a_off = [&](int ks, int mi) -> uint32_t {
        return A_KMAJOR ? (la0 ^ (ks << 5)) + mi * 1024 : (la0 ^ (mi << 5)) + ks * 4096;
    };
    auto b_off = [&](int ks, int nj) -> uint32_t {
        return B_KMAJOR ? (lb0 ^ (ks << 5)) + nj * 1024 : (lb0 ^ (nj << 5)) + ks * 4096;
    };

    for (uint64_t b = blockIdx.y; b < batch; b += gridDim.y) {
        const TileLoader<A_KMAJOR, VEC> ga(reinterpret_cast<const uint16_t*>(A) + b * sa, lda, M, K,
                                           m0, tid);
        const TileLoader<B_KMAJOR, VEC> gb(reinterpret_cast<const uint16_t*>(B) + b * sb, ldb, N, K,
                                           n0, tid);
        float acc[4][4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
        for (int s = 0; s < TC_STAGES - 1; ++s) {
            if (s < kt_n) {
                ga.load(sbase + s * TC_STAGE_BYTES, s);
                gb.load(sbase + s * TC_STAGE_BYTES + TC_TILE_BYTES, s);
            }
            cp_async_commit();
        }

        int read = 0, write = TC_STAGES - 1;
        for (int kt = 0; kt < kt_n; ++kt) {
            cp_async_wait<TC_STAGES - 2>();
            __syncthreads();
            if (kt + TC_STAGES - 1 < kt_n) {
                ga.load(sbase + write * TC_STAGE_BYTES, kt + TC_STAGES - 1);
                gb.load(sbase + write * TC_STAGE_BYTES + TC_TILE_BYTES, kt + TC_STAGES - 1);
            }
            cp_async_commit();
            write = write == TC_STAGES - 1 ? 0 : write + 1;

            const uint32_t stage = sbase + read * TC_STAGE_BYTES;
            read = read == TC_STAGES - 1 ? 0 : read + 1;
#pragma unroll
            for (int ks = 0; ks < TC_BK / 16; ++ks) {
                uint32_t fb[4][2];
#pragma unroll
                for (int nj = 0; nj < 2; ++nj) {
                    uint32_t t[4];
                    if (B_KMAJOR)
                        ldmatrix_x4(t, stage + b_off(ks, nj));
                    else
                        ldmatrix_x4_trans(t, stage + b_off(ks, nj));
                    fb[nj * 2][0] = t[0];
                    fb[nj * 2][1] = t[1];
                    fb[nj * 2 + 1][0] = t[2];
                    fb[nj * 2 + 1][1] = t[3];
                }
#pragma unroll
                for (int mi = 0; mi < 4; ++mi) {
                    uint32_t fa[4];
                    if (A_KMAJOR)
                        ldmatrix_x4(fa, stage + a_off(ks, mi));
                    else
                        ldmatrix_x4_trans(fa, stage + a_off(ks, mi));
#pragma unroll
                    for (int nj = 0; nj < 4; ++nj) mma16816(acc[mi][nj], fa, fb[nj][0], fb[nj][1], T());
                }
            }
        }
        cp_async_wait<0>();
        __syncthreads();  // the ring is refilled by the next batch

        // Epilogue: thread (g = lane / 4, p = lane % 4) holds rows g and g + 8, columns 2p and
        // 2p + 1 of each 16 x 8 tile.
        O* c = C + b * M * N;
        const bool pairs = N % 2 == 0 && ((uintptr_t)C & (2 * sizeof(O) - 1)) == 0;
#pragma unroll
        for (int mi = 0; mi < 4; ++mi)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const uint64_t gr = m0 + wm * 64 + mi * 16 + h * 8 + (lane >> 2);
                if (gr >= M) continue;
#pragma unroll
                for (int nj = 0; nj < 4; ++nj) {
                    const uint64_t gc = n0 + wn * 32 + nj * 8 + (lane & 3) * 2;
                    O* p = c + gr * N + gc;
                    const float x = acc[mi][nj][h * 2], y = acc[mi][nj][h * 2 + 1];
                    if (pairs && gc + 1 < N) {
                        store2(p, x, y);
                    } else {
                        if (gc < N) store1(p, x);
                        if (gc + 1 < N) store1(p + 1, y);
                    }
                }
            }
    }
}

// ---------------------------------------------------------------------------------------------
// f32 kernel (CUDA cores).
//
// A block computes a 128 x 128 or 256 x 64 tile of C with 256 threads, k in slices of F_BK = 16
// staged through two shared-memory buffers: the next slice's global loads are in flight (in
// registers) while the current slice is multiplied. Shared tiles are k-major, s[k][mn], so
// that a thread reads its rows of A and columns of B as float4. Every warp computes 32 x 64
// outputs; in a warp, 4 x 8 threads each own 8 rows (r, r + 16: two runs of 4) and 8 columns
// (two runs of 4, 32 apart). A warp's float4 reads of a k row of B then cover 128 contiguous
// bytes and its reads of A four float4, which keeps shared-memory traffic per multiply-add
// low.

constexpr int F_BK = 16, F_PAD = 4;

// One thread's float4 loads of an operand's [mn0, mn0 + MN) x [k0, k0 + F_BK) tiles: float4 i
// is number idx = tid + 256 i of the tile. KMAJOR (element (mn, k) at base[mn * ld + k]): row
// mn0 + idx / 4, k values 4 (idx % 4) .. + 3 of the slice; else (element at base[k * ld + mn]):
// k row idx / (MN / 4) of the slice, mn values mn0 + 4 (idx % (MN / 4)) .. + 3. The pointers
// advance one slice per `next`.
template <bool KMAJOR, int MN>
struct F32Loader {
    static constexpr int NL = F_BK * MN / 4 / THREADS;  // float4 per thread and slice
    const float* p[NL];
    int mn[NL], kk[NL];
    uint64_t step;

    __device__ __forceinline__ F32Loader(const float* base, uint64_t ld, uint64_t mn0, int tid) {
#pragma unroll
        for (int i = 0; i < NL; ++i) {
            const int idx = tid + THREADS * i;
            if (KMAJOR) {
                mn[i] = idx / (F_BK / 4);
                kk[i] = (idx % (F_BK / 4)) * 4;
                p[i] = base + (mn0 + mn[i]) * ld + kk[i];
            } else {
                kk[i] = idx / (MN / 4);
                mn[i] = (idx % (MN / 4)) * 4;
                p[i] = base + (uint64_t)kk[i] * ld + mn0 + mn[i];
            }
        }
        step = KMAJOR ? F_BK : F_BK * ld;
    }

    // A whole slice of a tile whose float4 each lie wholly inside the operand or wholly past
    // its m or n edge (16-byte aligned): float4 loads, zeros for lines at or past `mn_left`.
    __device__ __forceinline__ void load_rows(float4 (&v)[NL], int64_t mn_left) const {
#pragma unroll
        for (int i = 0; i < NL; ++i)
            v[i] = mn[i] < mn_left ? __ldg(reinterpret_cast<const float4*>(p[i]))
                                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }

    // A slice wholly inside the operand, 16-byte aligned: float4 loads without checks.
    __device__ __forceinline__ void load_inside(float4 (&v)[NL]) const {
#pragma unroll
        for (int i = 0; i < NL; ++i) v[i] = __ldg(reinterpret_cast<const float4*>(p[i]));
    }

    // Any slice: `mn_left` values of m or n from mn0 and `k_left` values of k from the slice's
    // first are inside; zeros outside. A float4 wholly inside is one load when VEC.
    template <bool VEC>
    __device__ __forceinline__ void load_edge(float4 (&v)[NL], int64_t mn_left,
                                              int64_t k_left) const {
#pragma unroll
        for (int i = 0; i < NL; ++i) {
            const float* s = p[i];
            // KMAJOR: the float4 runs along k; else along m or n, one k row.
            const int64_t along = KMAJOR ? (mn[i] < mn_left ? k_left - kk[i] : 0)
                                         : (kk[i] < k_left ? mn_left - mn[i] : 0);
            if (VEC && along >= 4) {
                v[i] = __ldg(reinterpret_cast<const float4*>(s));
            } else {
                v[i].x = along > 0 ? s[0] : 0.0f;
                v[i].y = along > 1 ? s[1] : 0.0f;
                v[i].z = along > 2 ? s[2] : 0.0f;
                v[i].w = along > 3 ? s[3] : 0.0f;
            }
        }
    }

    __device__ __forceinline__ void next() {
#pragma unroll
        for (int i = 0; i < NL; ++i) p[i] += step;
    }

    // The loaded float4 into the k-major shared tile s[k][mn].
    __device__ __forceinline__ void store(float (*s)[MN + F_PAD], const float4 (&v)[NL]) const {
        store_kmajor<KMAJOR>(s, kk, mn, v);
    }
};

// The k loop of the SIMT kernels over one product: slices of F_BK, double-buffered. The
// loads of slice t + 1 go into registers before `mma(cur)` multiplies slice t from shared
// buffer `cur`, and are stored to the other buffer after it; one barrier per slice. `inside`:
// the tile lies wholly inside the operands (unchecked float4 loads while a whole slice
// remains); m_left, n_left: the tile's rows and columns inside them.
template <bool VEC, bool AK, int MA, bool BK, int MB, typename Mma>
__device__ __forceinline__ void f32_k_loop(const float* a, uint64_t lda, uint64_t m0,
                                           const float* b, uint64_t ldb, uint64_t n0,
                                           uint64_t K, bool inside, int64_t m_left,
                                           int64_t n_left, float (*As)[F_BK][MA + F_PAD],
                                           float (*Bs)[F_BK][MB + F_PAD], Mma&& mma) {
    const int tid = threadIdx.x;
    F32Loader<AK, MA> la(a, lda, m0, tid);
    F32Loader<BK, MB> lb(b, ldb, n0, tid);
    float4 va[F32Loader<AK, MA>::NL], vb[F32Loader<BK, MB>::NL];
    // An edge tile whose float4 along m or n (an operand stored m- or n-major) never straddle
    // the edge loads whole slices as `load_rows`: one predicate a float4 instead of the
    // element checks of `load_edge`.
    const bool rows = VEC && (AK || m_left >= MA || m_left % 4 == 0) &&
                      (BK || n_left >= MB || n_left % 4 == 0);
    const int kt_n = (int)((K + F_BK - 1) / F_BK);
    const auto load = [&](int kt) {
        const int64_t k_left = (int64_t)K - (int64_t)kt * F_BK;
        if (inside && k_left >= F_BK) {
            la.load_inside(va);
            lb.load_inside(vb);
        } else if (rows && k_left >= F_BK) {
            la.load_rows(va, m_left);
            lb.load_rows(vb, n_left);
        } else {
            la.template load_edge<VEC>(va, m_left, k_left);
            lb.template load_edge<VEC>(vb, n_left, k_left);
        }
        la.next();
        lb.next();
    };
    if (kt_n > 0) {
        load(0);
        la.store(As[0], va);
        lb.store(Bs[0], vb);
    }
    __syncthreads();
    for (int kt = 0; kt < kt_n; ++kt) {
        const int cur = kt & 1;
        const bool more = kt + 1 < kt_n;
        if (more) load(kt + 1);
        mma(cur);
        if (more) {
            la.store(As[cur ^ 1], va);
            lb.store(Bs[cur ^ 1], vb);
        }
        // Every read of this slice's buffer is done before the next iteration overwrites
        // it, and the other buffer is complete before it is read.
        __syncthreads();
    }
}

// The output tile of this block in a BM x BN tiling of the M x N product: its first row and
// column, how many rows and columns of it are inside the product, and whether all of it is
// (with VEC: unchecked float4 loads while a whole slice remains).
template <int BM, int BN>
struct F32Tile {
    uint64_t m0, n0;
    int64_t m_left, n_left;
    bool inside;

    __device__ __forceinline__ F32Tile(uint64_t M, uint64_t N, bool vec) {
        uint64_t tm, tn;
        tile_of(blockIdx.x, (M + BM - 1) / BM, (N + BN - 1) / BN, tm, tn);
        m0 = tm * BM;
        n0 = tn * BN;
        m_left = (int64_t)(M - m0);
        n_left = (int64_t)(N - n0);
        inside = vec && m0 + BM <= M && n0 + BN <= N;
    }
};

// BN: the tile's columns, 128 (a 128 x 128 tile, warps 4 x 2) or 64 (a 256 x 64 tile, warps
// 8 x 1, for n <= 64, where a 128-wide tile would compute as many columns again and drop them);
// every warp computes 32 x 64 outputs, every thread 8 x 8. VEC: leading dimensions and batch
// strides multiples of 4 and 16-byte aligned operands (float4 loads). CT: C is stored
// transposed (element (i, j) at C[j * M + i]), for a product of m <= 64 run as C^T = B^T A^T
// on the 256 x 64 tiles.
template <bool TA, bool TB, bool VEC, int BN = 128, bool CT = false>
__device__ __forceinline__ void gemm_f32(const float* __restrict__ A, const float* __restrict__ B,
                                         float* __restrict__ C, uint64_t batch, uint64_t M,
                                         uint64_t N, uint64_t K, uint64_t lda, uint64_t ldb,
                                         uint64_t sa, uint64_t sb) {
    constexpr bool A_KMAJOR = !TA;
    constexpr bool B_KMAJOR = TB;
    constexpr int NH = 2;               // runs of 4 columns of a thread, 32 apart
    constexpr int WN = BN / 64;         // warps along n
    constexpr int F_BM = 32 * 8 / WN;   // the tile's rows: 8 warps of 32 x 64
    __shared__ __align__(16) float As[2][F_BK][F_BM + F_PAD];
    __shared__ __align__(16) float Bs[2][F_BK][BN + F_PAD];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int r0 = (warp / WN) * 32 + lane_row_run(lane) * 4;
    const int c0 = (warp % WN) * 64 + lane_col_run(lane) * 4;
    const F32Tile<F_BM, BN> t(M, N, VEC);
    const uint64_t m0 = t.m0, n0 = t.n0;

    for (uint64_t b = blockIdx.y; b < batch; b += gridDim.y) {
        float* c = C + b * M * N;
        float acc[8][4 * NH];
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int j = 0; j < 4 * NH; ++j) acc[i][j] = 0.0f;
        f32_k_loop<VEC, A_KMAJOR, F_BM, B_KMAJOR, BN>(
            A + b * sa, lda, m0, B + b * sb, ldb, n0, K, t.inside, t.m_left, t.n_left, As, Bs,
            [&](int cur) {
#pragma unroll
                for (int k = 0; k < F_BK; ++k) {
                    const float4 a0 = *reinterpret_cast<const float4*>(&As[cur][k][r0]);
                    const float4 a1 = *reinterpret_cast<const float4*>(&As[cur][k][r0 + 16]);
                    float bv[4 * NH];
#pragma unroll
                    for (int h = 0; h < NH; ++h) {
                        const float4 b4 =
                            *reinterpret_cast<const float4*>(&Bs[cur][k][c0 + 32 * h]);
                        bv[4 * h] = b4.x;
                        bv[4 * h + 1] = b4.y;
                        bv[4 * h + 2] = b4.z;
                        bv[4 * h + 3] = b4.w;
                    }
                    const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
                    // Rows in turn, columns forward then backward: consecutive multiply-adds
                    // share an operand (the row's a, then at the turn the column's b).
#pragma unroll
                    for (int i = 0; i < 8; ++i)
#pragma unroll
                        for (int jj = 0; jj < 4 * NH; ++jj) {
                            const int j = (i & 1) ? 4 * NH - 1 - jj : jj;
                            acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
                        }
                }
            });

        if (CT) {
            // Rows r0 .. r0 + 3 and r0 + 16 .. r0 + 19 of a column are two runs of 4
            // consecutive values of the stored C^T.
            const bool quads = M % 4 == 0 && ((uintptr_t)C & 15) == 0;
#pragma unroll
            for (int j = 0; j < 4 * NH; ++j) {
                const uint64_t gc = n0 + c0 + 32 * (j >> 2) + (j & 3);
                if (gc >= N) continue;
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const uint64_t gr = m0 + r0 + 16 * half;
                    float* p = c + gc * M + gr;
                    if (quads && gr + 4 <= M) {
                        *reinterpret_cast<float4*>(p) =
                            make_float4(acc[4 * half][j], acc[4 * half + 1][j],
                                        acc[4 * half + 2][j], acc[4 * half + 3][j]);
                    } else {
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            if (gr + e < M) p[e] = acc[4 * half + e][j];
                    }
                }
            }
            continue;
        }
        const bool quads = N % 4 == 0 && ((uintptr_t)C & 15) == 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const uint64_t gr = m0 + r0 + (i & 3) + (i >> 2) * 16;
            if (gr >= M) continue;
#pragma unroll
            for (int h = 0; h < NH; ++h) {
                const uint64_t gc = n0 + c0 + 32 * h;
                const float v[4] = {acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2],
                                    acc[i][4 * h + 3]};
                store_row4(c + gr * N + gc, v, quads, gc, N);
            }
        }
    }
}

// The small-tile f32 kernel (`matmul_f32s_*`): a 64 x 64 tile per block of 256 threads as
// 16 x 16 threads of 4 x 4 outputs (rows 4 (tid / 16) .., columns 4 (tid % 16) ..), the same
// slices of 16, loads and double buffering as gemm_f32 (one float4 per thread and operand).
// Launched for two blocks a multiprocessor (about 120 registers a thread: the bound of four
// blocks, 64 registers, spills): for products whose 128 x 128 tiles are too few to fill the
// device, where the large tile would leave most multiprocessors idle and the rest
// latency-bound.
__device__ __forceinline__ void gemm_f32s_tile(const float (*As)[64 + F_PAD],
                                               const float (*Bs)[64 + F_PAD], int r0, int c0,
                                               float (&acc)[4][4]) {
#pragma unroll
    for (int k = 0; k < F_BK; ++k) {
        const float4 a = *reinterpret_cast<const float4*>(&As[k][r0]);
        const float4 b = *reinterpret_cast<const float4*>(&Bs[k][c0]);
        const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
}

template <bool TA, bool TB, bool VEC>
__device__ __forceinline__ void gemm_f32s(const float* __restrict__ A,
                                          const float* __restrict__ B, float* __restrict__ C,
                                          uint64_t batch, uint64_t M, uint64_t N, uint64_t K,
                                          uint64_t lda, uint64_t ldb, uint64_t sa, uint64_t sb) {
    constexpr int T = 64;
    __shared__ __align__(16) float As[2][F_BK][T + F_PAD];
    __shared__ __align__(16) float Bs[2][F_BK][T + F_PAD];
    // Threads own 4 x 4 outputs on a 16 x 16 grid of runs of 4; each warp a 4 x 8 block of it,
    // its lanes placed on the block as in gemm_f32 (lane_row_run, lane_col_run).
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int r0 = ((warp >> 1) * 4 + lane_row_run(lane)) * 4;
    const int c0 = ((warp & 1) * 8 + lane_col_run(lane)) * 4;
    const F32Tile<T, T> t(M, N, VEC);
    const uint64_t m0 = t.m0, n0 = t.n0;

    for (uint64_t b = blockIdx.y; b < batch; b += gridDim.y) {
        float* c = C + b * M * N;
        float acc[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
        f32_k_loop<VEC, !TA, T, TB, T>(A + b * sa, lda, m0, B + b * sb, ldb, n0, K, t.inside,
                                       t.m_left, t.n_left, As, Bs, [&](int cur) {
                                           gemm_f32s_tile(As[cur], Bs[cur], r0, c0, acc);
                                       });
        const bool quads = N % 4 == 0 && ((uintptr_t)C & 15) == 0;
        const uint64_t gc = n0 + c0;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint64_t gr = m0 + r0 + i;
            if (gr >= M) continue;
            store_row4(c + gr * N + gc, acc[i], quads, gc, N);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// f32 on tensor cores with TF32 inputs (opt-in).

constexpr int X_BM = 128, X_BN = 128, X_BK = 32;
constexpr int X_KSTRIDE = X_BK + 4;   // floats per row of a [mn][k] tile
constexpr int X_MNSTRIDE = X_BM + 8;  // floats per row of a [k][mn] tile
constexpr int X_TILE_FLOATS = X_BM * X_KSTRIDE;  // the larger of 128 x 36 and 32 x 136
static_assert(X_BK * X_MNSTRIDE <= X_TILE_FLOATS, "a [k][mn] tile fits the buffer");
static_assert(2 * X_TILE_FLOATS * 4 <= 48 * 1024, "static shared memory");

__device__ __forceinline__ float to_tf32(float x) {
    return x != x ? x : __uint_as_float(__float_as_uint(x) & 0xffffe000u);
}

__device__ __forceinline__ void mma1688(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The four float4 of one thread in the [mn0, mn0 + 128) x [k0, k0 + 32) tile of an operand:
// float4 i is number idx = tid + 256 i of the tile. KMAJOR (element (mn, k) at
// base[mn * ld + k]): row mn0 + idx / 8, k values k0 + 4 (idx % 8) ...; else (element at
// base[k * ld + mn]): k row k0 + idx / 32, mn values mn0 + 4 (idx % 32) .... A float4 that
// crosses an edge, or any float4 when !VEC, is read element by element with bounds checks
// (zeros outside).
template <bool KMAJOR, bool VEC>
__device__ __forceinline__ void x_load(float4 (&v)[4], const float* base, uint64_t ld,
                                       uint64_t extent, uint64_t K, uint64_t mn0, uint64_t k0,
                                       int tid) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int idx = tid + THREADS * i;
        uint64_t outer, inner, outer_n, inner_n;
        if (KMAJOR) {
            outer = mn0 + (idx >> 3);
            inner = k0 + (idx & 7) * 4;
            outer_n = extent;
            inner_n = K;
        } else {
            outer = k0 + (idx >> 5);
            inner = mn0 + (idx & 31) * 4;
            outer_n = K;
            inner_n = extent;
        }
        const float* src = base + outer * ld + inner;
        if (VEC && outer < outer_n && inner + 4 <= inner_n) {
            v[i] = __ldg(reinterpret_cast<const float4*>(src));
        } else {
            const bool row = outer < outer_n;
            v[i].x = row && inner + 0 < inner_n ? src[0] : 0.0f;
            v[i].y = row && inner + 1 < inner_n ? src[1] : 0.0f;
            v[i].z = row && inner + 2 < inner_n ? src[2] : 0.0f;
            v[i].w = row && inner + 3 < inner_n ? src[3] : 0.0f;
        }
    }
}

// Stores the float4 of `x_load`, rounded to tf32, at the same tile positions: [mn][36] when
// KMAJOR, else [k][136] (both strides multiples of 4 floats, so every float4 is 16-byte
// aligned).
template <bool KMAJOR>
__device__ __forceinline__ void x_store(float* s, const float4 (&v)[4], int tid) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int idx = tid + THREADS * i;
        const int at = KMAJOR ? (idx >> 3) * X_KSTRIDE + (idx & 7) * 4
                              : (idx >> 5) * X_MNSTRIDE + (idx & 31) * 4;
        *reinterpret_cast<float4*>(s + at) =
            make_float4(to_tf32(v[i].x), to_tf32(v[i].y), to_tf32(v[i].z), to_tf32(v[i].w));
    }
}

// Element (mn, k) of a tile in shared memory, as the bits of a tf32 register.
template <bool KMAJOR>
__device__ __forceinline__ uint32_t x_at(const float* s, int mn, int k) {
    return __float_as_uint(KMAJOR ? s[mn * X_KSTRIDE + k] : s[k * X_MNSTRIDE + mn]);
}

template <bool TA, bool TB, bool VEC>
__device__ __forceinline__ void gemm_tf32(const float* __restrict__ A,
                                          const float* __restrict__ B, float* __restrict__ C,
                                          uint64_t batch, uint64_t M, uint64_t N, uint64_t K,
                                          uint64_t lda, uint64_t ldb, uint64_t sa, uint64_t sb) {
    constexpr bool A_KMAJOR = !TA;
    constexpr bool B_KMAJOR = TB;
    __shared__ __align__(16) float As[X_TILE_FLOATS];
    __shared__ __align__(16) float Bs[X_TILE_FLOATS];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 2, wn = warp & 3;  // 2 x 4 warps, 64 x 32 each
    const int g = lane >> 2, t = lane & 3;
    const uint64_t tiles_m = (M + X_BM - 1) / X_BM, tiles_n = (N + X_BN - 1) / X_BN;
    uint64_t tm, tn;
    tile_of(blockIdx.x, tiles_m, tiles_n, tm, tn);
    const uint64_t m0 = tm * X_BM, n0 = tn * X_BN;
    const int kt_n = (int)((K + X_BK - 1) / X_BK);

    for (uint64_t b = blockIdx.y; b < batch; b += gridDim.y) {
        const float* a = A + b * sa;
        const float* bm = B + b * sb;
        float acc[4][4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

        float4 ra[4], rb[4];
        if (kt_n > 0) {
            x_load<A_KMAJOR, VEC>(ra, a, lda, M, K, m0, 0, tid);
            x_load<B_KMAJOR, VEC>(rb, bm, ldb, N, K, n0, 0, tid);
        }
        for (int kt = 0; kt < kt_n; ++kt) {
            // The previous slice's readers passed the barrier at the end of its iteration (or
            // of the previous batch), so the buffers are free.
            x_store<A_KMAJOR>(As, ra, tid);
            x_store<B_KMAJOR>(Bs, rb, tid);
            __syncthreads();
            if (kt + 1 < kt_n) {
                const uint64_t k0 = (uint64_t)(kt + 1) * X_BK;
                x_load<A_KMAJOR, VEC>(ra, a, lda, M, K, m0, k0, tid);
                x_load<B_KMAJOR, VEC>(rb, bm, ldb, N, K, n0, k0, tid);
            }
#pragma unroll
            for (int ks = 0; ks < X_BK / 8; ++ks) {
                const int k = ks * 8 + t;
                uint32_t fb[4][2];
#pragma unroll
                for (int nj = 0; nj < 4; ++nj) {
                    const int n = wn * 32 + nj * 8 + g;
                    fb[nj][0] = x_at<B_KMAJOR>(Bs, n, k);
                    fb[nj][1] = x_at<B_KMAJOR>(Bs, n, k + 4);
                }
#pragma unroll
                for (int mi = 0; mi < 4; ++mi) {
                    const int r = wm * 64 + mi * 16 + g;
                    // A fragment of m16n8k8.tf32: a0 (g, t), a1 (g + 8, t), a2 (g, t + 4),
                    // a3 (g + 8, t + 4); B: b0 (k t, n g), b1 (k t + 4, n g).
                    const uint32_t fa[4] = {x_at<A_KMAJOR>(As, r, k), x_at<A_KMAJOR>(As, r + 8, k),
                                            x_at<A_KMAJOR>(As, r, k + 4),
                                            x_at<A_KMAJOR>(As, r + 8, k + 4)};
#pragma unroll
                    for (int nj = 0; nj < 4; ++nj) mma1688(acc[mi][nj], fa, fb[nj][0], fb[nj][1]);
                }
            }
            __syncthreads();
        }

        // Epilogue (the accumulator layout of m16n8k16): thread (g, t) holds rows g and g + 8,
        // columns 2t and 2t + 1 of each 16 x 8 tile.
        float* c = C + b * M * N;
        const bool pairs = N % 2 == 0 && ((uintptr_t)C & 7) == 0;
#pragma unroll
        for (int mi = 0; mi < 4; ++mi)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const uint64_t gr = m0 + wm * 64 + mi * 16 + h * 8 + g;
                if (gr >= M) continue;
#pragma unroll
                for (int nj = 0; nj < 4; ++nj) {
                    const uint64_t gc = n0 + wn * 32 + nj * 8 + t * 2;
                    float* p = c + gr * N + gc;
                    const float x = acc[mi][nj][h * 2], y = acc[mi][nj][h * 2 + 1];
                    if (pairs && gc + 1 < N) {
                        store2(p, x, y);
                    } else {
                        if (gc < N) store1(p, x);
                        if (gc + 1 < N) store1(p + 1, y);
                    }
                }
            }
    }
}

// ---------------------------------------------------------------------------------------------
// Split-k: the sum of the slices' partials.

// out[i] = sum over z in 0..slices of ws[z * total + i], added in increasing z and rounded once
// to O. Four consecutive outputs a thread when total is a multiple of 4 and ws is 16-byte
// aligned (every slice then starts on 16 bytes), one otherwise; threads stride over the grid.
template <typename O>
__device__ __forceinline__ void splitk_sum(const float* __restrict__ ws, O* __restrict__ out,
                                           uint64_t total, uint64_t slices) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (total % 4 == 0 && ((uintptr_t)ws & 15) == 0) {
        const float4* w4 = reinterpret_cast<const float4*>(ws);
        const uint64_t quads = total / 4;
        for (uint64_t q = first; q < quads; q += stride) {
            float4 s = w4[q];
            for (uint64_t z = 1; z < slices; ++z) {
                const float4 v = w4[z * quads + q];
                s.x += v.x;
                s.y += v.y;
                s.z += v.z;
                s.w += v.w;
            }
            O* p = out + q * 4;
            store1(p, s.x);
            store1(p + 1, s.y);
            store1(p + 2, s.z);
            store1(p + 3, s.w);
        }
    } else {
        for (uint64_t i = first; i < total; i += stride) {
            float s = ws[i];
            for (uint64_t z = 1; z < slices; ++z) s += ws[z * total + i];
            store1(out + i, s);
        }
    }
}

}  // namespace

// 16-byte copies for an operand when its rows and batches start on 16-byte boundaries.
#define TC_VEC(X, ld, s) ((ld) % 8 == 0 && (s) % 8 == 0 && ((uintptr_t)(X) & 15) == 0)
// <name>: operands whose leading dimensions and batch strides are multiples of 8 elements and
// whose addresses are 16-byte aligned (16-byte cp.async); <name>_any: any operands.
#define TC(name, T, O, TA, TB)                                                                 \
    extern "C" __global__ void __launch_bounds__(THREADS, 2) name(PARAMS(T, O)) {             \
        __shared__ __align__(128) uint4 smem[TC_SMEM_BYTES / 16];                              \
        SPLIT(TA, TB)                                                                          \
        gemm_tc<T, O, TA, TB, true>(smem, ARGS);                                               \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(THREADS, 2) name##_any(PARAMS(T, O)) {       \
        __shared__ __align__(128) uint4 smem[TC_SMEM_BYTES / 16];                              \
        SPLIT(TA, TB)                                                                          \
        gemm_tc<T, O, TA, TB, false>(smem, ARGS);                                              \
    }
#define TC4(prefix, T, O)                                      \
    TC(prefix##_nn, T, O, false, false)                        \
    TC(prefix##_nt, T, O, false, true)                         \
    TC(prefix##_tn, T, O, true, false)                         \
    TC(prefix##_tt, T, O, true, true)

TC4(matmul_bf16, __nv_bfloat16, __nv_bfloat16)
TC4(matmul_bf16_f32out, __nv_bfloat16, float)
TC4(matmul_f16, __half, __half)
TC4(matmul_f16_f32out, __half, float)

// <name>: leading dimensions and batch strides multiples of 4, 16-byte aligned operands
// (float4 loads); <name>_any: any operands.
#define F32(name, gemm, TA, TB)                                                                \
    extern "C" __global__ void __launch_bounds__(THREADS, 1) name(PARAMS(float, float)) {     \
        SPLIT(TA, TB)                                                                          \
        gemm<TA, TB, true>(ARGS);                                                              \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(THREADS, 1) name##_any(PARAMS(float, float)) { \
        SPLIT(TA, TB)                                                                          \
        gemm<TA, TB, false>(ARGS);                                                             \
    }
F32(matmul_f32_nn, gemm_f32, false, false)
F32(matmul_f32_nt, gemm_f32, false, true)
F32(matmul_f32_tn, gemm_f32, true, false)
F32(matmul_f32_tt, gemm_f32, true, true)
// f32 with 64 x 64 tiles (small products), same contract but grid x ceil(m / 64) *
// ceil(n / 64), and two blocks a multiprocessor.
#define F32S(name, TA, TB)                                                                     \
    extern "C" __global__ void __launch_bounds__(THREADS, 2) name(PARAMS(float, float)) {     \
        SPLIT(TA, TB)                                                                          \
        gemm_f32s<TA, TB, true>(ARGS);                                                         \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(THREADS, 2) name##_any(PARAMS(float, float)) { \
        SPLIT(TA, TB)                                                                          \
        gemm_f32s<TA, TB, false>(ARGS);                                                        \
    }
F32S(matmul_f32s_nn, false, false)
F32S(matmul_f32s_nt, false, true)
F32S(matmul_f32s_tn, true, false)
F32S(matmul_f32s_tt, true, true)
// f32 with 256 x 64 tiles (n <= 64), same contract but grid x ceil(m / 256) * ceil(n / 64).
// CT (`matmul_f32n64ct_*`): products of m <= 64 < n as C^T = B^T A^T, C stored transposed: the
// kernel's M, N, A, B are the product's n, m, B^T, A^T (so C^T's M x N values are C's m x n,
// row-major).
#define F32N64(name, TA, TB, CT)                                                               \
    extern "C" __global__ void __launch_bounds__(THREADS, 1) name(PARAMS(float, float)) {     \
        SPLIT(TA, TB)                                                                          \
        gemm_f32<TA, TB, true, 64, CT>(ARGS);                                                  \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(THREADS, 1) name##_any(PARAMS(float, float)) { \
        SPLIT(TA, TB)                                                                          \
        gemm_f32<TA, TB, false, 64, CT>(ARGS);                                                 \
    }
F32N64(matmul_f32n64_nn, false, false, false)
F32N64(matmul_f32n64_nt, false, true, false)
F32N64(matmul_f32n64_tn, true, false, false)
F32N64(matmul_f32n64_tt, true, true, false)
F32N64(matmul_f32n64ct_nn, false, false, true)
F32N64(matmul_f32n64ct_nt, false, true, true)
F32N64(matmul_f32n64ct_tn, true, false, true)
F32N64(matmul_f32n64ct_tt, true, true, true)
// TF32 (f32 operands and output, same alignment rule as the f32 kernels).
F32(matmul_tf32_nn, gemm_tf32, false, false)
F32(matmul_tf32_nt, gemm_tf32, false, true)
F32(matmul_tf32_tn, gemm_tf32, true, false)
F32(matmul_tf32_tt, gemm_tf32, true, true)

// Split-k sums (see "Split-k" at the top): grid-stride, any grid; parameters (workspace,
// output, outputs, slices).
#define SPLITK_SUM(suffix, O)                                                                  \
    extern "C" __global__ void __launch_bounds__(THREADS)                                     \
        splitk_sum_##suffix(const float* ws, O* out, uint64_t total, uint64_t slices) {        \
        splitk_sum<O>(ws, out, total, slices);                                                 \
    }
// dst[b * dstride + line * dld + i] = src[b * sstride + line * ld + i] for i < inner, line <
// lines, b < copies (the bits of 2- or 4-byte elements). Grid (x over inner, y strided over
// lines, z copies), blocks of 256 threads; the pad of each destination line is not written.
template <typename E>
__device__ __forceinline__ void pad_copy(const E* __restrict__ src, E* __restrict__ dst, uint64_t lines,
                                         uint64_t inner, uint64_t ld, uint64_t sstride, uint64_t dld,
                                         uint64_t dstride) {
    const E* s = src + (uint64_t)blockIdx.z * sstride;
    E* d = dst + (uint64_t)blockIdx.z * dstride;
    for (uint64_t line = blockIdx.y; line < lines; line += gridDim.y)
        for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < inner;
             i += (uint64_t)gridDim.x * blockDim.x)
            d[line * dld + i] = s[line * ld + i];
}
#define PAD_COPY(suffix, E)                                                                    \
    extern "C" __global__ void __launch_bounds__(THREADS)                                     \
        matmul_pad_copy_##suffix(const E* src, E* dst, uint64_t lines, uint64_t inner,         \
                                 uint64_t ld, uint64_t sstride, uint64_t dld, uint64_t dstride) { \
        pad_copy<E>(src, dst, lines, inner, ld, sstride, dld, dstride);                        \
    }
PAD_COPY(b16, uint16_t)
PAD_COPY(b32, uint32_t)

SPLITK_SUM(f32, float)
SPLITK_SUM(f16, __half)
SPLITK_SUM(bf16, __nv_bfloat16)

// ---------------------------------------------------------------------------------------------
// Matrix-vector products: m == 1 or n == 1 (decode-style `[1, k] @ [k, n]`, or `[m, k] @ [k, 1]`).
// The launcher (src/matmul.rs) states the problem as out[b][o] = sum_p X[b][o][p] * v[b][p],
// with X[o][p] at b * xb + o * so + p * sk, v[p] at b * vb + p * sv and `out` contiguous
// [batch, outs] (the product's C, since one of its dimensions is 1). Reading X is the whole
// cost, so both kernels are built to stream it at the memory's rate:
//   * gemv_dot_* (X's k is contiguous, sk == 1, or neither stride is 1): a warp per output,
//     lanes striding over k with 16-byte loads when the row and v are 16-byte aligned (element
//     loads otherwise, and for the tail), then a butterfly sum over the warp.
//   * gemv_axpy_* (X's outputs are contiguous, so == 1): a block of 8 warps owns 32 consecutive
//     outputs, a lane each, so every load of a warp reads 32 neighbours; the warps split k
//     (rows p = warp, warp + 8, ...), issuing 64 rows' loads before using any, and sum their
//     partials in shared memory in a fixed order.
//   * gemv_axpy2_*: gemv_axpy with two neighbouring outputs a lane, read as one load of two
//     elements (a warp reads 64 neighbours: a whole 128-byte line of f16 or bf16), 32 rows in
//     flight. The launcher uses it for f16 and bf16 when outs and sk are even and X (with its
//     batch stride) starts on two elements (f32 lines are whole with one element a lane).
//   * gemv_wide_*: gemv_axpy with 16-byte loads, for outs, sk and xb multiples of
//     V = 16 / sizeof(T) and X on 16 bytes: a lane owns V neighbouring outputs and 8 lanes a
//     row (128 bytes), so one load of a warp reads 4 rows; a block of 8 warps covers 8V
//     outputs, 32 rows at a time, GEMV_WIDE_ROWS loads a lane in flight. gridDim.z slices k
//     (slice z: rows [z * kslice, min(K, (z + 1) * kslice))); with more than one slice each
//     writes its f32 partial sums to part[z][b][o] and splitk_sum_* adds the slices in order
//     (a product with few outputs has enough blocks to keep the memory busy only so).
// Accumulation is in f32 with fused multiply-adds; blocks stride over the batch by gridDim.y.
// Grid: (ceil(outs / 8), ceil(outs / 32), ceil(outs / 64) or ceil(outs / 8V) blocks,
// min(batch, 65535), the slices of k (1 but for gemv_wide)), blocks of 256 threads.
namespace {

__device__ __forceinline__ float tof(float x) { return x; }
__device__ __forceinline__ float tof(__half x) { return __half2float(x); }
__device__ __forceinline__ float tof(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T, typename O>
__device__ __forceinline__ void gemv_dot(const T* X, const T* v, O* out, uint64_t batch,
                                         uint64_t outs, uint64_t K, uint64_t so, uint64_t sk,
                                         uint64_t sv, uint64_t xb, uint64_t vb) {
    constexpr int V = 16 / sizeof(T);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint64_t o = (uint64_t)blockIdx.x * 8 + warp;
    if (o >= outs) return;  // the whole warp: no barrier below
    for (uint64_t b = blockIdx.y; b < batch; b += gridDim.y) {
        const T* row = X + b * xb + o * so;
        const T* vv = v + b * vb;
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        uint64_t done = 0;
        if (sk == 1 && sv == 1 && ((reinterpret_cast<uintptr_t>(row) | reinterpret_cast<uintptr_t>(vv)) & 15) == 0) {
            const uint4* r4 = reinterpret_cast<const uint4*>(row);
            const uint4* v4 = reinterpret_cast<const uint4*>(vv);
            const uint64_t nv = K / V;
#pragma unroll 4
            for (uint64_t q = lane; q < nv; q += 32) {
                const uint4 x = r4[q], y = v4[q];
                const T* xs = reinterpret_cast<const T*>(&x);
                const T* ys = reinterpret_cast<const T*>(&y);
#pragma unroll
                for (int e = 0; e < V; ++e) acc[e & 3] = fmaf(tof(xs[e]), tof(ys[e]), acc[e & 3]);
            }
            done = nv * V;
        }
        for (uint64_t p = done + lane; p < K; p += 32) acc[0] = fmaf(tof(row[p * sk]), tof(vv[p * sv]), acc[0]);
        float sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        if (lane == 0) store1(out + b * outs + o, sum);
    }
}

constexpr int GEMV_ROWS = 64;

template <typename T, typename O>
__device__ __forceinline__ void gemv_axpy(const T* X, const T* v, O* out, uint64_t batch,
                                          uint64_t outs, uint64_t K, uint64_t so, uint64_t sk,
                                          uint64_t sv, uint64_t xb, uint64_t vb) {
    __shared__ float part[8][33];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint64_t o = (uint64_t)blockIdx.x * 32 + lane;
    for (uint64_t b = blockIdx.y; b < batch; b += gridDim.y) {
        float acc = 0.f;
        if (o < outs) {
            const T* col = X + b * xb + o * so;
            const T* vv = v + b * vb;
            // GEMV_ROWS rows a warp in flight: all loads of a batch are issued before the first
            // multiply-add, so each warp keeps that many reads of 32 neighbours outstanding
            // (fewer leave the memory idle on a 1 x 4096 x 11008 product).
            uint64_t p = warp;
            for (; p + (GEMV_ROWS - 1) * 8 < K; p += GEMV_ROWS * 8) {
                T x[GEMV_ROWS], y[GEMV_ROWS];
#pragma unroll
                for (int u = 0; u < GEMV_ROWS; ++u) {
                    x[u] = col[(p + u * 8) * sk];
                    y[u] = vv[(p + u * 8) * sv];
                }
#pragma unroll
                for (int u = 0; u < GEMV_ROWS; ++u) acc = fmaf(tof(x[u]), tof(y[u]), acc);
            }
            for (; p < K; p += 8) acc = fmaf(tof(col[p * sk]), tof(vv[p * sv]), acc);
        }
        part[warp][lane] = acc;
        __syncthreads();
        if (warp == 0 && o < outs) {
            float sum = 0.f;
#pragma unroll
            for (int w = 0; w < 8; ++w) sum += part[w][lane];
            store1(out + b * outs + o, sum);
        }
        __syncthreads();
    }
}

template <typename T>
struct alignas(2 * sizeof(T)) Pair {
    T x, y;
};

template <typename T, typename O>
__device__ __forceinline__ void gemv_axpy2(const T* X, const T* v, O* out, uint64_t batch,
                                           uint64_t outs, uint64_t K, uint64_t so, uint64_t sk,
                                           uint64_t sv, uint64_t xb, uint64_t vb) {
    constexpr int R = GEMV_ROWS / 2;
    __shared__ float part[8][65];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint64_t o = (uint64_t)blockIdx.x * 64 + 2 * lane;  // and o + 1 (outs is even)
    for (uint64_t b = blockIdx.y; b < batch; b += gridDim.y) {
        float a0 = 0.f, a1 = 0.f;
        if (o < outs) {
            const Pair<T>* col = reinterpret_cast<const Pair<T>*>(X + b * xb + o);
            const T* vv = v + b * vb;
            const uint64_t skp = sk / 2;  // in pairs
            uint64_t p = warp;
            for (; p + (R - 1) * 8 < K; p += R * 8) {
                Pair<T> x[R];
                T y[R];
#pragma unroll
                for (int u = 0; u < R; ++u) {
                    x[u] = col[(p + u * 8) * skp];
                    y[u] = vv[(p + u * 8) * sv];
                }
#pragma unroll
                for (int u = 0; u < R; ++u) {
                    a0 = fmaf(tof(x[u].x), tof(y[u]), a0);
                    a1 = fmaf(tof(x[u].y), tof(y[u]), a1);
                }
            }
            for (; p < K; p += 8) {
                const Pair<T> x = col[p * skp];
                const float y = tof(vv[p * sv]);
                a0 = fmaf(tof(x.x), y, a0);
                a1 = fmaf(tof(x.y), y, a1);
            }
        }
        part[warp][2 * lane] = a0;
        part[warp][2 * lane + 1] = a1;
        __syncthreads();
        if (warp == 0 && o < outs) {
            float s0 = 0.f, s1 = 0.f;
#pragma unroll
            for (int w = 0; w < 8; ++w) {
                s0 += part[w][2 * lane];
                s1 += part[w][2 * lane + 1];
            }
            store1(out + b * outs + o, s0);
            store1(out + b * outs + o + 1, s1);
        }
        __syncthreads();
    }
}

constexpr int GEMV_WIDE_ROWS = 8;

template <typename T, typename O>
__device__ __forceinline__ void gemv_wide(const T* X, const T* v, O* out, float* part,
                                          uint64_t batch, uint64_t outs, uint64_t K,
                                          uint64_t kslice, uint64_t sk, uint64_t sv, uint64_t xb,
                                          uint64_t vb) {
    constexpr int V = 16 / sizeof(T), LANES = 8, ROWS = 8 * (32 / LANES), R = GEMV_WIDE_ROWS;
    __shared__ float sums[ROWS][LANES * V + 1];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row = warp * (32 / LANES) + lane / LANES;  // this lane's first row of a step
    const int first = V * (lane % LANES);                // its first output in the block
    const uint64_t o = (uint64_t)blockIdx.x * LANES * V + first;
    const uint64_t k0 = (uint64_t)blockIdx.z * kslice;
    const uint64_t k1 = k0 + kslice < K ? k0 + kslice : K;
    for (uint64_t b = blockIdx.y; b < batch; b += gridDim.y) {
        float acc[V];
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = 0.f;
        if (o < outs) {
            const T* col = X + b * xb + o;
            const T* vv = v + b * vb;
            uint64_t p = k0 + row;
            for (; p + (R - 1) * ROWS < k1; p += R * ROWS) {
                uint4 x[R];
                T y[R];
#pragma unroll
                for (int u = 0; u < R; ++u) {
                    x[u] = *reinterpret_cast<const uint4*>(col + (p + u * ROWS) * sk);
                    y[u] = vv[(p + u * ROWS) * sv];
                }
#pragma unroll
                for (int u = 0; u < R; ++u) {
                    const T* xs = reinterpret_cast<const T*>(&x[u]);
                    const float yu = tof(y[u]);
#pragma unroll
                    for (int e = 0; e < V; ++e) acc[e] = fmaf(tof(xs[e]), yu, acc[e]);
                }
            }
            for (; p < k1; p += ROWS) {
                const uint4 x = *reinterpret_cast<const uint4*>(col + p * sk);
                const T* xs = reinterpret_cast<const T*>(&x);
                const float yp = tof(vv[p * sv]);
#pragma unroll
                for (int e = 0; e < V; ++e) acc[e] = fmaf(tof(xs[e]), yp, acc[e]);
            }
        }
#pragma unroll
        for (int e = 0; e < V; ++e) sums[row][first + e] = acc[e];
        __syncthreads();
        if (threadIdx.x < LANES * V) {
            const uint64_t oo = (uint64_t)blockIdx.x * LANES * V + threadIdx.x;
            if (oo < outs) {
                float s = 0.f;
#pragma unroll
                for (int r = 0; r < ROWS; ++r) s += sums[r][threadIdx.x];
                if (gridDim.z == 1) {
                    store1(out + b * outs + oo, s);
                } else {
                    part[((uint64_t)blockIdx.z * batch + b) * outs + oo] = s;
                }
            }
        }
        __syncthreads();
    }
}

}  // namespace

#define GEMV_PARAMS(T, O)                                                                      \
    const T *X, const T *v, O *out, uint64_t batch, uint64_t outs, uint64_t K, uint64_t so,    \
        uint64_t sk, uint64_t sv, uint64_t xb, uint64_t vb
#define GEMV_ARGS X, v, out, batch, outs, K, so, sk, sv, xb, vb
#define GEMV(suffix, T, O)                                                                     \
    extern "C" __global__ void __launch_bounds__(THREADS) gemv_dot_##suffix(GEMV_PARAMS(T, O)) { \
        gemv_dot<T, O>(GEMV_ARGS);                                                             \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(THREADS) gemv_axpy_##suffix(GEMV_PARAMS(T, O)) { \
        gemv_axpy<T, O>(GEMV_ARGS);                                                            \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(THREADS)                                     \
        gemv_axpy2_##suffix(GEMV_PARAMS(T, O)) {                                               \
        gemv_axpy2<T, O>(GEMV_ARGS);                                                           \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(THREADS)                                     \
        gemv_wide_##suffix(const T *X, const T *v, O *out, float *part, uint64_t batch,          \
                           uint64_t outs, uint64_t K, uint64_t kslice, uint64_t sk, uint64_t sv, \
                           uint64_t xb, uint64_t vb) {                                         \
        gemv_wide<T, O>(X, v, out, part, batch, outs, K, kslice, sk, sv, xb, vb);              \
    }
GEMV(f32, float, float)
GEMV(f16, __half, __half)
GEMV(f16_f32out, __half, float)
GEMV(bf16, __nv_bfloat16, __nv_bfloat16)
GEMV(bf16_f32out, __nv_bfloat16, float)
