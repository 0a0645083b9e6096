// Batched f64 matrix multiplication: C[b] = A[b] @ B[b], A [m, k], B [k, n], C [m, n]
// contiguous, accumulated in f64 (PyTorch's float64 matmul on a GPU). The operands are read in
// place in either major order, with any leading dimension, batch stride (0 broadcasts one
// matrix to every batch) or alignment, as the f32 kernels of `matmul.cu` take them (the same
// launch contract and parameter list). Kernel names end in the two layouts:
// `matmul_f64_<a><b>`, "n" row-major, "t" column-major (a transposed view); `_v_` kernels
// copy operands in 16-byte pairs (both operands starting on 16 bytes, even leading
// dimensions and batch strides), the others element by element.
//
//   * A block of 128 threads (4 warps as 2 x 2) computes a 64 x 64 tile of C, each warp a
//     32 x 32 sub-tile (`matmul_f64_<a><b>`), or a block of 256 threads (4 x 2 warps) a
//     128 x 128 tile, each warp 32 x 64 (`matmul_f64_big_<a><b>`: half the operand copies a
//     product, for products of enough tiles), on the f64 tensor cores through `mma.sync`: on
//     sm_90 products m16n8k8 a k step of 8, before it m8n8k4 a k step of 4; 32 or 64 f64
//     accumulators a thread.
//   * K advances in slices of 16 through a 3-stage ring of shared tiles (60 or 120 KiB of
//     dynamic shared memory, `F64_TILES` in the launcher): the 8-byte `cp.async` copies of
//     slices t + 1 and t + 2 are in flight while slice t is multiplied (16-byte copies of
//     element pairs in the `_v_` kernels); one barrier a slice. A
//     slice of an operand whose k is contiguous in memory is kept as rows of 16 k values
//     padded to 20, else as rows of 64 (128) m or n values padded to 68 (132), so the copies of consecutive threads
//     are consecutive in both memories and the fragment loads meet no bank conflict. Each
//     thread copies 8 elements of each operand a slice; elements past m, n or k are
//     zero-filled (nothing read).
//   * Each output is accumulated in f64 over k in increasing steps of 4; the CPU twin
//     (`matmul_host` for f64) accumulates in f64 in another order, so the two agree within
//     the f64 accumulation bound (k * 2^-53 * sum |a||b|), not bit for bit.
//   * Tiles are ordered in groups of 8 tile rows (`tile_of`), blocks stride over the batch by
//     gridDim.y. `kslice` is accepted for the shared parameter list and must be >= k (the
//     launcher never splits f64 products).
#include <stdint.h>

#include "cp_async.cuh"
#include "matmul_f32.cuh"

namespace {

constexpr int BK = 16, STAGES = 3;
// An operand's slice in shared memory: rows of k values padded to 20 when k is contiguous in
// memory (`[BM][20]`), else rows of BM m or n values padded to BM + 4 (`[16][BM + 4]`). Either
// way a fragment load (k = lane % 4 + c, m or n = lane / 4 + c') of a half-warp touches 16
// different pairs of banks (BM + 4 is 4 modulo 16), and rows stay on 16 bytes.
constexpr int KROW = BK + 4;

// A tile shape: BM x BM outputs a block of THREADS threads, the warps as (BM / 32) x WARPS_N,
// each warp 32 rows by WN columns (J products 8 wide).
template <int BM_, int THREADS_>
struct Tile {
    static constexpr int BM = BM_, THREADS = THREADS_;
    static constexpr int WARPS_M = BM / 32, WARPS_N = THREADS / 32 / WARPS_M;
    static constexpr int WN = BM / WARPS_N, J = WN / 8;
    static constexpr int LOADS = BM * BK / THREADS;  // elements of each operand a thread copies
    static constexpr int MROW = BM + 4;
    static constexpr int TILE = BM * KROW > BK * MROW ? BM * KROW : BK * MROW;  // doubles a slice
    static constexpr int SMEM_BYTES = STAGES * 2 * TILE * 8;
    static_assert(WARPS_M * WARPS_N * 32 == THREADS && J * 8 * WARPS_N == BM, "tile shape");
};
// 64 x 64 on 4 warps of 32 x 32 (60 KiB of shared memory); 128 x 128 on 8 warps of 32 x 64
// (half the operand traffic a product, 1.5 fragment loads a tensor-core product instead of 2;
// 120 KiB). The launcher's `F64_TILES` holds the same shapes.
using Small = Tile<64, 128>;
using Big = Tile<128, 256>;

// Offset of element (r, k) of a slice (r along m or n) in its shared tile.
template <typename T, bool KCONT>
__device__ __forceinline__ int at(int r, int k) {
    return KCONT ? r * KROW + k : k * T::MROW + r;
}

// Queues the copies of one operand's slice (k in [k0, k0 + BK), rows [r0, r0 + BM)) into the
// shared tile `s`: element e = threadIdx.x + THREADS i, consecutive threads along the
// operand's contiguous dimension; zeros past `rows` or K. KCONT: k is the contiguous
// dimension (row-major A, column-major B).
template <typename T, bool KCONT, bool PAIRS>
__device__ __forceinline__ void copy_slice(const double* X, uint64_t ld, uint64_t r0,
                                           uint64_t rows, uint64_t k0, uint64_t K, double* s) {
    if constexpr (PAIRS) {
        // 16-byte copies of two elements consecutive in memory (the launcher checked that the
        // operand starts on 16 bytes with an even leading dimension and batch stride, so every
        // pair is aligned; in shared memory rows stay on 16 bytes): a pair half past the
        // operand's edge is one 8-byte copy and a zero, wholly past it zeros.
        constexpr int HALF_ROW = KCONT ? BK / 2 : T::BM / 2;
#pragma unroll
        for (int i = 0; i < T::LOADS / 2; ++i) {
            const int e = threadIdx.x + T::THREADS * i;
            const int r = KCONT ? e / HALF_ROW : 2 * (e % HALF_ROW);
            const int kk = KCONT ? 2 * (e % HALF_ROW) : e / HALF_ROW;
            const uint64_t gr = r0 + r, gk = k0 + kk;
            const bool in = gr < rows && gk < K;
            const bool in2 = KCONT ? gk + 1 < K : gr + 1 < rows;
            const double* src = in ? X + (KCONT ? gr * ld + gk : gk * ld + gr) : X;
            double* dst = s + at<T, KCONT>(r, kk);
            if (in2 || !in) {
                cp_async16(smem_addr(dst), src, in ? 16 : 0);
            } else {
                // The operand's last element of a row or column: an 8-byte copy and a zero
                // (no 16-byte access reaches past the operand, which may end the allocation).
                cp_async8(smem_addr(dst), src, 8);
                cp_async8(smem_addr(dst + 1), src, 0);
            }
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < T::LOADS; ++i) {
        const int e = threadIdx.x + T::THREADS * i;
        const int r = KCONT ? e / BK : e % T::BM;
        const int kk = KCONT ? e % BK : e / T::BM;
        const uint64_t gr = r0 + r, gk = k0 + kk;
        const bool in = gr < rows && gk < K;
        const double* src = in ? X + (KCONT ? gr * ld + gk : gk * ld + gr) : X;
        cp_async8(smem_addr(s + at<T, KCONT>(r, kk)), src, in ? 8 : 0);
    }
}

// d += a b over one 8 x 8 x 4 step on the f64 tensor cores: a is element (lane / 4, lane % 4)
// of the 8 x 4 A fragment, b element (lane % 4, lane / 4) of the 4 x 8 B fragment, d[0..2]
// elements (lane / 4, 2 (lane % 4) + {0, 1}) of the 8 x 8 product.
__device__ __forceinline__ void dmma(double (&d)[2], double a, double b) {
    asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
        : "+d"(d[0]), "+d"(d[1])
        : "d"(a), "d"(b));
}

#if __CUDA_ARCH__ >= 900
// d += a b over one 16 x 8 x 8 step (sm_90's f64 tensor-core shape, a quarter of the
// instructions of m8n8k4 for the same work): a[0..4] are elements (g, q), (g + 8, q),
// (g, q + 4), (g + 8, q + 4) of the 16 x 8 A fragment, b[0..2] (q, g) and (q + 4, g) of the
// 8 x 8 B fragment, d[0..4] (g, 2q + {0, 1}) and (g + 8, 2q + {0, 1}) of the product, with
// g = lane / 4 and q = lane % 4.
__device__ __forceinline__ void dmma16(double (&d)[4], const double (&a)[4], const double (&b)[2]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
        : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
}
#endif

template <typename T, bool TA, bool TB, bool PAIRS>
__device__ __forceinline__ void gemm_f64(const double* A, const double* B, double* C,
                                         uint64_t batch, uint64_t M, uint64_t N, uint64_t K,
                                         uint64_t lda, uint64_t ldb, uint64_t sa, uint64_t sb) {
    constexpr int BM = T::BM, BN = T::BM, J = T::J, TILE = T::TILE;
    extern __shared__ __align__(16) double smem[];
    const uint64_t tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    uint64_t tm, tn;
    tile_of(blockIdx.x, tiles_m, tiles_n, tm, tn);
    const uint64_t m0 = tm * BM, n0 = tn * BN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // The warp's 32 x WN sub-tile.
    const int wm = (warp / T::WARPS_N) * 32, wn = (warp % T::WARPS_N) * T::WN;
    const int g = lane / 4, q = lane % 4;
    // Row-major A has k contiguous; column-major B (TB) has k contiguous.
    constexpr bool AK = !TA, BKC = TB;
    const uint64_t slices = (K + BK - 1) / BK;
    for (uint64_t b = blockIdx.y; b < batch; b += gridDim.y) {
        const double* a = A + b * sa;
        const double* bb = B + b * sb;
        // acc[i][j]: the 16 x 8 product tile (i, j) of the warp's sub-tile (elements as
        // dmma16's d; the m8n8k4 path keeps rows g in [0..2] and rows g + 8 in [2..4]).
        double acc[2][J][4];
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < J; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0;
        // Slices 0 .. STAGES - 2 in flight; one commit group a slice (empty past the last).
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {
            if (s < slices) {
                double* st = smem + s * 2 * TILE;
                copy_slice<T, AK, PAIRS>(a, lda, m0, M, s * BK, K, st);
                copy_slice<T, BKC, PAIRS>(bb, ldb, n0, N, s * BK, K, st + TILE);
            }
            cp_async_commit();
        }
        for (uint64_t s = 0; s < slices; ++s) {
            // Slice s has landed (at most STAGES - 2 later groups pending), and every warp is
            // done with the stage the copies below overwrite (slice s - 1's).
            cp_async_wait<STAGES - 2>();
            __syncthreads();
            const uint64_t next = s + STAGES - 1;
            if (next < slices) {
                double* st = smem + (next % STAGES) * 2 * TILE;
                copy_slice<T, AK, PAIRS>(a, lda, m0, M, next * BK, K, st);
                copy_slice<T, BKC, PAIRS>(bb, ldb, n0, N, next * BK, K, st + TILE);
            }
            cp_async_commit();
            const double* As = smem + (s % STAGES) * 2 * TILE;
            const double* Bs = As + TILE;
#if __CUDA_ARCH__ >= 900
#pragma unroll
            for (int kk = 0; kk < BK; kk += 8) {
                double fa[2][4], fb[J][2];
#pragma unroll
                for (int i = 0; i < 2; ++i)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        fa[i][e] = As[at<T, AK>(wm + 16 * i + g + 8 * (e & 1), kk + q + 4 * (e >> 1))];
#pragma unroll
                for (int j = 0; j < J; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) fb[j][e] = Bs[at<T, BKC>(wn + 8 * j + g, kk + q + 4 * e)];
#pragma unroll
                for (int i = 0; i < 2; ++i)
#pragma unroll
                    for (int j = 0; j < J; ++j) dmma16(acc[i][j], fa[i], fb[j]);
            }
#else
#pragma unroll
            for (int kk = 0; kk < BK; kk += 4) {
                double fa[4], fb[J];
#pragma unroll
                for (int i = 0; i < 4; ++i) fa[i] = As[at<T, AK>(wm + 8 * i + g, kk + q)];
#pragma unroll
                for (int j = 0; j < J; ++j) fb[j] = Bs[at<T, BKC>(wn + 8 * j + g, kk + q)];
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int j = 0; j < J; ++j) {
                        double (&d)[2] = *reinterpret_cast<double(*)[2]>(&acc[i >> 1][j][2 * (i & 1)]);
                        dmma(d, fa[i], fb[j]);
                    }
            }
#endif
        }
        // Every copy landed and every warp done with the tiles before the next batch's copies.
        cp_async_wait<0>();
        __syncthreads();
        double* c = C + b * M * N;
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const uint64_t gr = m0 + wm + 16 * i + 8 * h + g;
                if (gr >= M) continue;
#pragma unroll
                for (int j = 0; j < J; ++j) {
                    const uint64_t gc = n0 + wn + 8 * j + 2 * q;
                    if (gc < N) c[gr * N + gc] = acc[i][j][2 * h];
                    if (gc + 1 < N) c[gr * N + gc + 1] = acc[i][j][2 * h + 1];
                }
            }
    }
}

}  // namespace

#define F64(name, T, MIN_BLOCKS, TA, TB, PAIRS)                                                \
    extern "C" __global__ void __launch_bounds__(T::THREADS, MIN_BLOCKS)                      \
        name(const double* A, const double* B, double* C, uint64_t batch, uint64_t m,          \
             uint64_t n, uint64_t k, uint64_t lda, uint64_t ldb, uint64_t sa, uint64_t sb,     \
             uint64_t kslice) {                                                                \
        (void)kslice;                                                                          \
        gemm_f64<T, TA, TB, PAIRS>(A, B, C, batch, m, n, k, lda, ldb, sa, sb);                 \
    }
#define F64_LAYOUTS(prefix, T, MIN_BLOCKS, PAIRS)                                              \
    F64(prefix##nn, T, MIN_BLOCKS, false, false, PAIRS)                                        \
    F64(prefix##nt, T, MIN_BLOCKS, false, true, PAIRS)                                         \
    F64(prefix##tn, T, MIN_BLOCKS, true, false, PAIRS)                                         \
    F64(prefix##tt, T, MIN_BLOCKS, true, true, PAIRS)
F64_LAYOUTS(matmul_f64_, Small, 3, false)
F64_LAYOUTS(matmul_f64_big_, Big, 1, false)
F64_LAYOUTS(matmul_f64_v_, Small, 3, true)
F64_LAYOUTS(matmul_f64_big_v_, Big, 1, true)
