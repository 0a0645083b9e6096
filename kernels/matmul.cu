// Batched matrix multiplication of Genesis: C[b] = A[b] @ B[b] for row-major A [m, k],
// B [k, n], C [m, n] (f32, f16, bf16; products accumulated in f32, rounded once to the output
// type). A and B advance by their own batch strides (0 broadcasts one matrix to every batch);
// C is contiguous. f32 runs on the CUDA cores (a 128x128 tile per block, 8x8 outputs per thread,
// k-slices of 8 staged through shared memory); f16 and bf16 run on tensor cores (WMMA, below).
// Both are straightforward kernels without software pipelining: correct first, well short of
// cuBLAS (see docs/benchmarks.md).
//
// The CPU twin (crates/genesis-kernels/src/matmul.rs) accumulates in f32 in the same k order;
// the GPU contracts multiply-adds into FMAs, so the two agree within the usual f32 rounding
// bound (k * 2^-24 * sum |a||b|), not bit for bit.
//
// Launch contract (src/matmul.rs): blocks of 256 threads, grid (ceil(n / 128), ceil(m / 128),
// min(batch, 65535)); blocks stride over the batch by gridDim.z.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#include <stdint.h>

#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8

__device__ __forceinline__ float load_f(const float* p) { return *p; }
__device__ __forceinline__ float load_f(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ float load_f(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void store_f(float* p, float x) { *p = x; }
__device__ __forceinline__ void store_f(__half* p, float x) { *p = __float2half_rn(x); }
__device__ __forceinline__ void store_f(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }

template <typename T>
__device__ void gemm(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                     uint64_t batch, uint64_t M, uint64_t N, uint64_t K, uint64_t sa,
                     uint64_t sb) {
    __shared__ float As[BK][BM + 4];
    __shared__ float Bs[BK][BN + 4];
    const int tid = threadIdx.x;
    const int tx = tid % 16, ty = tid / 16;
    const uint64_t m0 = (uint64_t)blockIdx.y * BM, n0 = (uint64_t)blockIdx.x * BN;
    for (uint64_t b = blockIdx.z; b < batch; b += gridDim.z) {
        const T* a = A + b * sa;
        const T* bm = B + b * sb;
        T* c = C + b * M * N;
        float acc[TM][TN];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
        for (uint64_t k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
            for (int l = 0; l < (BM * BK) / 256; ++l) {
                int idx = tid + 256 * l;
                int r = idx / BK, kk = idx % BK;
                uint64_t gr = m0 + r, gk = k0 + kk;
                As[kk][r] = (gr < M && gk < K) ? load_f(a + gr * K + gk) : 0.0f;
            }
#pragma unroll
            for (int l = 0; l < (BN * BK) / 256; ++l) {
                int idx = tid + 256 * l;
                int kk = idx / BN, col = idx % BN;
                uint64_t gk = k0 + kk, gc = n0 + col;
                Bs[kk][col] = (gk < K && gc < N) ? load_f(bm + gk * N + gc) : 0.0f;
            }
            __syncthreads();
#pragma unroll
            for (int kk = 0; kk < BK; ++kk) {
                float av[TM], bv[TN];
#pragma unroll
                for (int i = 0; i < TM; ++i) av[i] = As[kk][ty + 16 * i];
#pragma unroll
                for (int j = 0; j < TN; ++j) bv[j] = Bs[kk][tx + 16 * j];
#pragma unroll
                for (int i = 0; i < TM; ++i)
#pragma unroll
                    for (int j = 0; j < TN; ++j) acc[i][j] += av[i] * bv[j];
            }
            __syncthreads();
        }
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            uint64_t gr = m0 + ty + 16 * i;
            if (gr >= M) continue;
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                uint64_t gc = n0 + tx + 16 * j;
                if (gc < N) store_f(c + gr * N + gc, acc[i][j]);
            }
        }
    }
}

#define GEMM(name, T)                                                                          \
    extern "C" __global__ void __launch_bounds__(256)                                          \
        name(const T* A, const T* B, T* C, uint64_t batch, uint64_t M, uint64_t N, uint64_t K, \
             uint64_t sa, uint64_t sb) {                                                       \
        gemm<T>(A, B, C, batch, M, N, K, sa, sb);                                              \
    }

GEMM(matmul_f32, float)
GEMM(matmul_f16, __half)
GEMM(matmul_bf16, __nv_bfloat16)

// Tensor-core kernel for f16 and bf16 (sm_80+): a 128x128 tile per block of 8 warps, each warp
// a 32x64 sub-tile of 2x4 16x16x16 WMMA fragments accumulated in f32; k-slices of 32 staged in
// shared memory (16-byte loads when the rows allow, zero-filled at the edges). Products are
// exact in f32 and the accumulation order differs from the CPU twin's, so results agree within
// the f32 accumulation bound.
#define TC_BM 128
#define TC_BN 128
#define TC_BK 32
#define TC_PAD 8

template <typename T>
__device__ void gemm_tc(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                        uint64_t batch, uint64_t M, uint64_t N, uint64_t K, uint64_t sa, uint64_t sb) {
    using namespace nvcuda;
    __shared__ __align__(32) T As[TC_BM][TC_BK + TC_PAD];
    __shared__ __align__(32) T Bs[TC_BK][TC_BN + TC_PAD];
    __shared__ __align__(32) float stage[8][16 * 16];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp / 2, wn = warp % 2;  // 4 x 2 warps: 32 rows x 64 columns each
    const uint64_t m0 = (uint64_t)blockIdx.y * TC_BM, n0 = (uint64_t)blockIdx.x * TC_BN;
    const bool vec_a = (K % 8 == 0) && (sa % 8 == 0) && (((uintptr_t)A & 15) == 0);
    const bool vec_b = (N % 8 == 0) && (sb % 8 == 0) && (((uintptr_t)B & 15) == 0);
    const T zero = T(0.0f);
    for (uint64_t b = blockIdx.z; b < batch; b += gridDim.z) {
        const T* a = A + b * sa;
        const T* bm = B + b * sb;
        T* c = C + b * M * N;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][4];
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
        for (uint64_t k0 = 0; k0 < K; k0 += TC_BK) {
            // A tile: 128 rows x 32 columns = 512 vectors of 8.
#pragma unroll
            for (int l = 0; l < 2; ++l) {
                const int v = tid + 256 * l;
                const int r = v / 4, kk = (v % 4) * 8;
                const uint64_t gr = m0 + r, gk = k0 + kk;
                if (vec_a && gr < M && gk + 8 <= K) {
                    *reinterpret_cast<uint4*>(&As[r][kk]) = *reinterpret_cast<const uint4*>(a + gr * K + gk);
                } else {
#pragma unroll
                    for (int e = 0; e < 8; ++e)
                        As[r][kk + e] = (gr < M && gk + e < K) ? a[gr * K + gk + e] : zero;
                }
            }
            // B tile: 32 rows x 128 columns = 512 vectors of 8.
#pragma unroll
            for (int l = 0; l < 2; ++l) {
                const int v = tid + 256 * l;
                const int kk = v / 16, col = (v % 16) * 8;
                const uint64_t gk = k0 + kk, gc = n0 + col;
                if (vec_b && gk < K && gc + 8 <= N) {
                    *reinterpret_cast<uint4*>(&Bs[kk][col]) = *reinterpret_cast<const uint4*>(bm + gk * N + gc);
                } else {
#pragma unroll
                    for (int e = 0; e < 8; ++e)
                        Bs[kk][col + e] = (gk < K && gc + e < N) ? bm[gk * N + gc + e] : zero;
                }
            }
            __syncthreads();
#pragma unroll
            for (int kk = 0; kk < TC_BK; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[2];
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb[4];
#pragma unroll
                for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], &As[wm * 32 + i * 16][kk], TC_BK + TC_PAD);
#pragma unroll
                for (int j = 0; j < 4; ++j) wmma::load_matrix_sync(fb[j], &Bs[kk][wn * 64 + j * 16], TC_BN + TC_PAD);
#pragma unroll
                for (int i = 0; i < 2; ++i)
#pragma unroll
                    for (int j = 0; j < 4; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
            }
            __syncthreads();
        }
        // Out through a per-warp 16x16 staging area: convert, bounds-check, store.
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                wmma::store_matrix_sync(stage[warp], acc[i][j], 16, wmma::mem_row_major);
                __syncwarp();
                const uint64_t r0 = m0 + wm * 32 + i * 16, c0 = n0 + wn * 64 + j * 16;
#pragma unroll
                for (int e = lane; e < 256; e += 32) {
                    const uint64_t gr = r0 + e / 16, gc = c0 + e % 16;
                    if (gr < M && gc < N) store_f(c + gr * N + gc, stage[warp][e]);
                }
                __syncwarp();
            }
    }
}

#define GEMM_TC(name, T)                                                                       \
    extern "C" __global__ void __launch_bounds__(256)                                          \
        name(const T* A, const T* B, T* C, uint64_t batch, uint64_t M, uint64_t N, uint64_t K, \
             uint64_t sa, uint64_t sb) {                                                       \
        gemm_tc<T>(A, B, C, batch, M, N, K, sa, sb);                                           \
    }

GEMM_TC(matmul_tc_f16, __half)
GEMM_TC(matmul_tc_bf16, __nv_bfloat16)
