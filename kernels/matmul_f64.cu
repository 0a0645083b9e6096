// Batched f64 matrix multiplication: C[b] = A[b] @ B[b], A [m, k], B [k, n], C [m, n]
// contiguous, accumulated in f64 (PyTorch's float64 matmul on a GPU). The operands are read in
// place in either major order, with any leading dimension, batch stride (0 broadcasts one
// matrix to every batch) or alignment, as the f32 kernels of `matmul.cu` take them (the same
// launch contract and parameter list). Kernel names end in the two layouts:
// `matmul_f64_<a><b>`, "n" row-major, "t" column-major (a transposed view).
//
//   * A block of 128 threads (4 warps as 2 x 2) computes a 64 x 64 tile of C; each warp a
//     32 x 32 sub-tile as 4 x 4 tensor-core products `mma.sync.aligned.m8n8k4` of f64 (sm_80
//     and newer): 32 f64 accumulators a thread, 8 fragment loads from shared memory for 16
//     instructions a k step of 4.
//   * K advances in slices of 16 through two shared tiles per operand, k-major (As[k][m],
//     Bs[k][n], rows padded to 68 values; 34 KiB in all): the global loads of slice t + 1 go
//     to registers before slice t is multiplied and are stored to the other buffer after it;
//     one barrier per slice. Each thread loads 8 elements of each operand a slice,
//     consecutive threads consecutive addresses along the operand's contiguous dimension,
//     bounds-checked (zeros past m, n or k).
//   * Each output is accumulated in f64 over k in increasing steps of 4; the CPU twin
//     (`matmul_host` for f64) accumulates in f64 in another order, so the two agree within
//     the f64 accumulation bound (k * 2^-53 * sum |a||b|), not bit for bit.
//   * Tiles are ordered in groups of 8 tile rows (`tile_of`), blocks stride over the batch by
//     gridDim.y. `kslice` is accepted for the shared parameter list and must be >= k (the
//     launcher never splits f64 products).
#include <stdint.h>

#include "matmul_f32.cuh"

namespace {

constexpr int BM = 64, BN = 64, BK = 16, THREADS = 128;
// Shared rows of 68 values (64 and 4 of padding): a fragment load (k = lane % 4, m or n =
// lane / 4 + const) of a half-warp then touches 16 different pairs of banks, and rows stay on
// 16 bytes.
constexpr int PAD = BM + 4;
constexpr int LOADS = BM * BK / THREADS;  // elements of each operand a thread loads a slice

// Loads of one operand's slice into registers: element e = threadIdx.x + THREADS i of the
// `[64, BK]` tile (rows along m or n), consecutive threads along the contiguous dimension.
// KCONT: k is the contiguous dimension (row-major A, column-major B).
template <bool KCONT>
__device__ __forceinline__ void load_slice(const double* X, uint64_t ld, uint64_t r0,
                                           uint64_t rows, uint64_t k0, uint64_t K,
                                           double (&v)[LOADS]) {
#pragma unroll
    for (int i = 0; i < LOADS; ++i) {
        const int e = threadIdx.x + THREADS * i;
        const int r = KCONT ? e / BK : e % BM;
        const int kk = KCONT ? e % BK : e / BM;
        const uint64_t gr = r0 + r, gk = k0 + kk;
        v[i] = (gr < rows && gk < K) ? X[KCONT ? gr * ld + gk : gk * ld + gr] : 0.0;
    }
}

template <bool KCONT>
__device__ __forceinline__ void store_slice(double (*s)[PAD], const double (&v)[LOADS]) {
#pragma unroll
    for (int i = 0; i < LOADS; ++i) {
        const int e = threadIdx.x + THREADS * i;
        const int r = KCONT ? e / BK : e % BM;
        const int kk = KCONT ? e % BK : e / BM;
        s[kk][r] = v[i];
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

template <bool TA, bool TB>
__device__ __forceinline__ void gemm_f64(const double* A, const double* B, double* C,
                                         uint64_t batch, uint64_t M, uint64_t N, uint64_t K,
                                         uint64_t lda, uint64_t ldb, uint64_t sa, uint64_t sb) {
    __shared__ __align__(16) double As[2][BK][PAD];
    __shared__ __align__(16) double Bs[2][BK][PAD];
    const uint64_t tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    uint64_t tm, tn;
    tile_of(blockIdx.x, tiles_m, tiles_n, tm, tn);
    const uint64_t m0 = tm * BM, n0 = tn * BN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;  // the warp's 32 x 32 sub-tile
    const int g = lane / 4, q = lane % 4;
    // Row-major A has k contiguous; column-major B (TB) has k contiguous.
    constexpr bool AK = !TA, BKC = TB;
    for (uint64_t b = blockIdx.y; b < batch; b += gridDim.y) {
        const double* a = A + b * sa;
        const double* bb = B + b * sb;
        // acc[i][j]: the 16 x 8 product tile (i, j) of the warp's 32 x 32 (elements as dmma16's d;
        // the m8n8k4 path keeps rows g in [0..2] and rows g + 8 in [2..4]).
        double acc[2][4][4];
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0;
        double va[LOADS], vb[LOADS];
        load_slice<AK>(a, lda, m0, M, 0, K, va);
        load_slice<BKC>(bb, ldb, n0, N, 0, K, vb);
        store_slice<AK>(As[0], va);
        store_slice<BKC>(Bs[0], vb);
        __syncthreads();
        const uint64_t slices = (K + BK - 1) / BK;
        for (uint64_t s = 0; s < slices; ++s) {
            const int cur = s & 1;
            const bool more = s + 1 < slices;
            if (more) {
                load_slice<AK>(a, lda, m0, M, (s + 1) * BK, K, va);
                load_slice<BKC>(bb, ldb, n0, N, (s + 1) * BK, K, vb);
            }
#if __CUDA_ARCH__ >= 900
#pragma unroll
            for (int kk = 0; kk < BK; kk += 8) {
                double fa[2][4], fb[4][2];
#pragma unroll
                for (int i = 0; i < 2; ++i)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        fa[i][e] = As[cur][kk + q + 4 * (e >> 1)][wm + 16 * i + g + 8 * (e & 1)];
#pragma unroll
                for (int j = 0; j < 4; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) fb[j][e] = Bs[cur][kk + q + 4 * e][wn + 8 * j + g];
#pragma unroll
                for (int i = 0; i < 2; ++i)
#pragma unroll
                    for (int j = 0; j < 4; ++j) dmma16(acc[i][j], fa[i], fb[j]);
            }
#else
#pragma unroll
            for (int kk = 0; kk < BK; kk += 4) {
                double fa[4], fb[4];
#pragma unroll
                for (int i = 0; i < 4; ++i) fa[i] = As[cur][kk + q][wm + 8 * i + g];
#pragma unroll
                for (int j = 0; j < 4; ++j) fb[j] = Bs[cur][kk + q][wn + 8 * j + g];
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        double (&d)[2] = *reinterpret_cast<double(*)[2]>(&acc[i >> 1][j][2 * (i & 1)]);
                        dmma(d, fa[i], fb[j]);
                    }
            }
#endif
            if (more) {
                store_slice<AK>(As[cur ^ 1], va);
                store_slice<BKC>(Bs[cur ^ 1], vb);
            }
            __syncthreads();
        }
        double* c = C + b * M * N;
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const uint64_t gr = m0 + wm + 16 * i + 8 * h + g;
                if (gr >= M) continue;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const uint64_t gc = n0 + wn + 8 * j + 2 * q;
                    if (gc < N) c[gr * N + gc] = acc[i][j][2 * h];
                    if (gc + 1 < N) c[gr * N + gc + 1] = acc[i][j][2 * h + 1];
                }
            }
    }
}

}  // namespace

#define F64(name, TA, TB)                                                                      \
    extern "C" __global__ void __launch_bounds__(THREADS)                                     \
        name(const double* A, const double* B, double* C, uint64_t batch, uint64_t m,          \
             uint64_t n, uint64_t k, uint64_t lda, uint64_t ldb, uint64_t sa, uint64_t sb,     \
             uint64_t kslice) {                                                                \
        (void)kslice;                                                                          \
        gemm_f64<TA, TB>(A, B, C, batch, m, n, k, lda, ldb, sa, sb);                           \
    }
F64(matmul_f64_nn, false, false)
F64(matmul_f64_nt, false, true)
F64(matmul_f64_tn, true, false)
F64(matmul_f64_tt, true, true)
