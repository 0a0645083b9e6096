// What the f32 SIMT matmul kernels of `matmul.cu` and `matmul_f32w.cu` share: the tile order,
// the epilogue's row stores, the lanes' placement, and the kernels' parameter list and split-k
// prologue (the launch contract at the top of `matmul.cu`).
#pragma once
#include <stdint.h>

namespace {

constexpr int GROUP_M = 8;

// The tile (tile_m, tile_n) of block `pid`, in groups of GROUP_M tile rows.
__device__ __forceinline__ void tile_of(uint64_t pid, uint64_t tiles_m, uint64_t tiles_n,
                                        uint64_t& tm, uint64_t& tn) {
    const uint64_t in_group = GROUP_M * tiles_n;
    const uint64_t group = pid / in_group;
    const uint64_t first = group * GROUP_M;
    const uint64_t size = min(tiles_m - first, (uint64_t)GROUP_M);
    const uint64_t r = pid % in_group;
    tm = first + r % size;
    tn = r / size;
}

// Four consecutive outputs of a row at p (column gc of N): one float4 store when `quads` (N a
// multiple of 4, C on 16 bytes) and all four are inside, else the ones inside.
__device__ __forceinline__ void store_row4(float* p, const float (&v)[4], bool quads,
                                           uint64_t gc, uint64_t N) {
    if (quads && gc + 4 <= N) {
        *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
#pragma unroll
        for (int e = 0; e < 4; ++e)
            if (gc + e < N) p[e] = v[e];
    }
}

// A lane's place on its warp's 4 x 8 grid of (row run, column run), interleaved in pairs: lane
// bits 0 and 4 pick the row run, bits 1-3 the column run. A quarter-warp then reads 2 runs of A
// and 4 of B, which takes a third fewer shared-memory wavefronts per fragment read than 1 and 8
// (lanes in row-major order).
__device__ __forceinline__ int lane_row_run(int lane) { return ((lane >> 4) << 1) | (lane & 1); }
__device__ __forceinline__ int lane_col_run(int lane) { return (lane >> 1) & 7; }

// Stores NL float4 loaded from global memory into the k-major shared tile s[k][mn]: each v[i]
// holds k .. k + 3 at one m (or n) when the operand is k-major (KMAJOR), else 4 consecutive m
// (or n) at one k; kk[i] and mn[i] are its first k and m (or n) in the tile.
template <bool KMAJOR, int NL, int W>
__device__ __forceinline__ void store_kmajor(float (*s)[W], const int (&kk)[NL],
                                             const int (&mn)[NL], const float4 (&v)[NL]) {
#pragma unroll
    for (int i = 0; i < NL; ++i) {
        if (KMAJOR) {
            s[kk[i] + 0][mn[i]] = v[i].x;
            s[kk[i] + 1][mn[i]] = v[i].y;
            s[kk[i] + 2][mn[i]] = v[i].z;
            s[kk[i] + 3][mn[i]] = v[i].w;
        } else {
            *reinterpret_cast<float4*>(&s[kk[i]][mn[i]]) = v[i];
        }
    }
}

// The four floats of v into d[0 .. 3].
__device__ __forceinline__ void unpack4(float4 v, float* d) {
    d[0] = v.x;
    d[1] = v.y;
    d[2] = v.z;
    d[3] = v.w;
}

}  // namespace

#define PARAMS(T, O)                                                                           \
    const T *A, const T *B, O *C, uint64_t batch, uint64_t M, uint64_t N, uint64_t K,          \
        uint64_t lda, uint64_t ldb, uint64_t sa, uint64_t sb, uint64_t kslice
#define ARGS A, B, C, batch, M, N, K, lda, ldb, sa, sb

// The k slice of this block (see "Split-k" at the top of matmul.cu): moves A and B to the
// slice's first k and C to the slice's partial product, and sets K to the slice's length (0 for
// a slice past k, whose partial is then zeros).
#define SPLIT(TA, TB)                                                                          \
    {                                                                                          \
        const uint64_t k0 = (uint64_t)blockIdx.z * kslice;                                     \
        A += (TA) ? k0 * lda : k0;                                                             \
        B += (TB) ? k0 : k0 * ldb;                                                             \
        C += (uint64_t)blockIdx.z * batch * M * N;                                             \
        K = K > k0 ? min(K - k0, kslice) : 0;                                                  \
    }

