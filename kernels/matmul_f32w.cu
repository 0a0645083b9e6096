// f32 matrix multiplication on CUDA cores with wide tiles (`matmul_f32w_<a><b>`): the launch
// contract, layouts, split-k prologue and parameters of the f32 kernels of `matmul.cu` (see its
// top), for products whose operands suit 16-byte loads and whose k is a multiple of 16. A block
// of 256 threads computes a 128 x 256 tile of C, so it reads a third fewer operand bytes per
// multiply-add from shared memory and from L2 than the 128 x 128 tiles of `matmul.cu`, and each
// thread makes 128 multiply-adds per 24 values it reads from shared memory (64 per 16 there).
//
//   * 8 warps as 2 (m) x 4 (n), 64 x 64 each; in a warp, lanes on a 4 x 8 grid of (row run,
//     column run) interleaved in pairs (`lane_row_run`, `lane_col_run`), each owning 16 x 8
//     outputs: 4 runs of 4 rows 16 apart and 2 runs of 4 columns 32 apart, so every
//     shared-memory read is a float4.
//   * k advances in slices of 16, double-buffered in shared memory (2 x 16 x (132 + 260)
//     floats, 49 KiB: dynamic shared memory, which the launcher allows per kernel). The global
//     loads of slice t + 1 (float4, two per thread for A, four for B) are issued into
//     registers before slice t is multiplied and stored to the other buffer after it; one
//     barrier per slice. Both tiles are k-major in shared memory (A as As[k][m]), rows padded by
//     4 floats.
//   * Inside a slice the fragments of step k + 1 are read from shared memory into a second set
//     of registers while step k is multiplied.
//   * A float4 of an operand row or column past m or n reads zeros; outputs past m or n are not
//     stored. Each output is accumulated over k in increasing order by fused multiply-adds, as
//     in the f32 kernel of `matmul.cu`: the two give the same bits.
//
// Build: `cargo xtask build-kernels` compiles this file with `-Xptxas -O1`. At the default
// level ptxas schedules the fragment reads of step k + 1 after step k's multiply-adds instead
// of among them, and the kernel runs slower than the one of `matmul.cu`; at -O1 it keeps the
// order written here. The file holds only these kernels, so the flag touches no other kernel.
//
// Contract (the launcher keeps it): leading dimensions and batch strides multiples of 4,
// 16-byte aligned operands, k and kslice multiples of 16, the extent along which an operand is
// contiguous a multiple of 4 (n when B is row-major, m when A is column-major), m, n, k, the
// leading dimensions and each matrix's elements below 2^31, and batch at most 65535. Blocks of
// 256 threads with 50176 bytes of dynamic shared memory, grid (ceil(m / 128) * ceil(n / 256),
// batch, slices): block y multiplies matrix y of the batch.
#include <stdint.h>

#include "matmul_f32.cuh"

namespace {

constexpr int W_THREADS = 256, W_BM = 128, W_BN = 256, W_WN = 4, W_SK = 16, W_PAD = 4;
constexpr int W_TM = 16, W_TN = 8;  // outputs of a thread: rows, columns

// One thread's float4 loads of an operand's [mn0, mn0 + TILE) x [k0, k0 + 16) tile: float4 i
// is number idx = tid + 256 i of the tile. KMAJOR (element (mn, k) at base[mn * ld + k]): line
// idx / 4, k values 4 (idx % 4) .. + 3; else (element at base[k * ld + mn]): k line
// idx / (TILE / 4), mn values 4 (idx % (TILE / 4)) .. + 3. A float4 whose line lies past
// `extent` (m or n) reads zeros.
template <bool KMAJOR, int TILE>
struct WLoader {
    static constexpr int NL = W_SK * TILE / 4 / W_THREADS;
    const float* p[NL];
    int mn[NL], kk[NL];
    bool ok[NL];
    int step;

    __device__ __forceinline__ WLoader(const float* base, int ld, int mn0, int extent, int tid) {
#pragma unroll
        for (int i = 0; i < NL; ++i) {
            const int idx = tid + W_THREADS * i;
            mn[i] = KMAJOR ? idx / (W_SK / 4) : (idx % (TILE / 4)) * 4;
            kk[i] = KMAJOR ? (idx % (W_SK / 4)) * 4 : idx / (TILE / 4);
            ok[i] = mn0 + mn[i] < extent;
            const int line = ok[i] ? mn0 + mn[i] : 0;
            p[i] = KMAJOR ? base + (size_t)line * ld + kk[i] : base + (size_t)kk[i] * ld + line;
        }
        step = KMAJOR ? W_SK : W_SK * ld;
    }

    __device__ __forceinline__ void load(int kt, float4 (&v)[NL]) const {
#pragma unroll
        for (int i = 0; i < NL; ++i)
            v[i] = ok[i] ? __ldg(reinterpret_cast<const float4*>(p[i] + (size_t)kt * step))
                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }

    // Into the k-major shared tile s[k][mn].
    __device__ __forceinline__ void store(float (*s)[TILE + W_PAD], const float4 (&v)[NL]) const {
        store_kmajor<KMAJOR>(s, kk, mn, v);
    }
};

// One matrix of the batch: A, B, C its operands and output; every extent, leading dimension and
// offset inside them fits an int (the launcher's contract).
template <bool TA, bool TB>
__device__ __forceinline__ void gemm_f32w(const float* __restrict__ A,
                                          const float* __restrict__ B, float* __restrict__ C,
                                          int M, int N, int K, int lda, int ldb) {
    extern __shared__ __align__(16) float smem_f32w[];
    auto As = reinterpret_cast<float (*)[W_SK][W_BM + W_PAD]>(smem_f32w);
    auto Bs = reinterpret_cast<float (*)[W_SK][W_BN + W_PAD]>(smem_f32w +
                                                               2 * W_SK * (W_BM + W_PAD));
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int r0 = (warp / W_WN) * 64 + lane_row_run(lane) * 4;
    const int c0 = (warp % W_WN) * 64 + lane_col_run(lane) * 4;
    uint64_t tm, tn;
    tile_of(blockIdx.x, (M + W_BM - 1) / W_BM, (N + W_BN - 1) / W_BN, tm, tn);
    const int m0 = (int)tm * W_BM, n0 = (int)tn * W_BN;
    const int kt_n = K / W_SK;

    const WLoader<!TA, W_BM> la(A, lda, m0, M, tid);
    const WLoader<TB, W_BN> lb(B, ldb, n0, N, tid);
    float4 va[WLoader<!TA, W_BM>::NL], vb[WLoader<TB, W_BN>::NL];
    float acc[W_TM][W_TN];
#pragma unroll
    for (int i = 0; i < W_TM; ++i)
#pragma unroll
        for (int j = 0; j < W_TN; ++j) acc[i][j] = 0.0f;
    if (kt_n > 0) {
        la.load(0, va);
        lb.load(0, vb);
        la.store(As[0], va);
        lb.store(Bs[0], vb);
    }
    __syncthreads();
    for (int kt = 0; kt < kt_n; ++kt) {
        const int cur = kt & 1;
        const bool more = kt + 1 < kt_n;
        if (more) {
            la.load(kt + 1, va);
            lb.load(kt + 1, vb);
        }
        float fa[2][W_TM], fb[2][W_TN];
        // Step k's fragments: rows r0 + 16 i .. + 3 of A, columns c0 + 32 j .. + 3 of B.
        const auto frag = [&](int k, float (&a)[W_TM], float (&bv)[W_TN]) {
#pragma unroll
            for (int i = 0; i < W_TM / 4; ++i)
                unpack4(*reinterpret_cast<const float4*>(&As[cur][k][r0 + 16 * i]), &a[4 * i]);
#pragma unroll
            for (int j = 0; j < W_TN / 4; ++j)
                unpack4(*reinterpret_cast<const float4*>(&Bs[cur][k][c0 + 32 * j]), &bv[4 * j]);
        };
        frag(0, fa[0], fb[0]);
#pragma unroll
        for (int k = 0; k < W_SK; ++k) {
            if (k + 1 < W_SK) frag(k + 1, fa[(k + 1) & 1], fb[(k + 1) & 1]);
            // Rows in turn, columns forward then backward: consecutive multiply-adds share an
            // operand (the row's a, then at the turn the column's b).
#pragma unroll
            for (int i = 0; i < W_TM; ++i)
#pragma unroll
                for (int jj = 0; jj < W_TN; ++jj) {
                    const int j = (i & 1) ? W_TN - 1 - jj : jj;
                    acc[i][j] = fmaf(fa[k & 1][i], fb[k & 1][j], acc[i][j]);
                }
        }
        if (more) {
            la.store(As[cur ^ 1], va);
            lb.store(Bs[cur ^ 1], vb);
        }
        // Every read of this slice's buffer is done before the next slice overwrites it, and
        // the other buffer is complete before it is read.
        __syncthreads();
    }

    const bool quads = N % 4 == 0 && ((uintptr_t)C & 15) == 0;
#pragma unroll
    for (int i = 0; i < W_TM; ++i) {
        const int gr = m0 + r0 + 16 * (i >> 2) + (i & 3);
        if (gr >= M) continue;
#pragma unroll
        for (int h = 0; h < W_TN / 4; ++h) {
            const int gc = n0 + c0 + 32 * h;
            const float v[4] = {acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2],
                                acc[i][4 * h + 3]};
            store_row4(C + (size_t)gr * N + gc, v, quads, gc, N);
        }
    }
}

}  // namespace

#define F32W(name, TA, TB)                                                                     \
    extern "C" __global__ void __launch_bounds__(W_THREADS, 1) name(PARAMS(float, float)) {   \
        SPLIT(TA, TB)                                                                          \
        const uint64_t b = blockIdx.y;                                                         \
        gemm_f32w<TA, TB>(A + b * sa, B + b * sb, C + b * M * N, (int)M, (int)N, (int)K,       \
                          (int)lda, (int)ldb);                                                 \
    }
F32W(matmul_f32w_nn, false, false)
F32W(matmul_f32w_nt, false, true)
F32W(matmul_f32w_tn, true, false)
F32W(matmul_f32w_tt, true, true)
