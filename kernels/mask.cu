// Boolean-mask kernels of Genesis: compaction (`masked_select`, x[mask] for a full-shape mask)
// and `masked_fill`, for elements of 1, 2, 4 or 8 bytes.
//
// Compaction keeps row-major order in three launches over tiles of MK_TILE elements:
//   1. mask_count:   the number of set mask bytes of each tile;
//   2. mask_scan:    one block turns the tile counts into exclusive offsets, and the total;
//   3. mask_compact: each tile scans its threads' counts, stages its selected elements in
//                    shared memory in order, and writes them as one coalesced run from its
//                    offset.
// The host reads the total between 2 and 3 to size the output. The mask is read twice, the data
// once, the output written once. The CPU twin (crates/genesis-kernels/src/mask.rs) gives the
// same bytes (a copy: no arithmetic).
//
// Mask bytes are 0 or 1 (genesis bool); any non-zero byte counts as set.
#include <stdint.h>

template <typename T> union MkVec16 {
    uint4 raw;
    T v[16 / sizeof(T)];
};

#define MK_THREADS 256
#define MK_PER_THREAD 16
#define MK_TILE (MK_THREADS * MK_PER_THREAD)

// The number of set bytes among the MK_PER_THREAD mask bytes of thread t of a tile.
__device__ __forceinline__ int thread_bits(const uint8_t *mask, uint64_t n, uint64_t first, uint32_t *bits) {
    uint32_t b = 0;
    if (first + MK_PER_THREAD <= n && (((uintptr_t)(mask + first)) & 15) == 0) {
        const uint4 v = *reinterpret_cast<const uint4 *>(mask + first);
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int q = 0; q < 4; ++q)
#pragma unroll
            for (int k = 0; k < 4; ++k) b |= (((w[q] >> (8 * k)) & 0xff) != 0 ? 1u : 0u) << (4 * q + k);
    } else {
        for (int j = 0; j < MK_PER_THREAD; ++j)
            if (first + j < n && mask[first + j] != 0) b |= 1u << j;
    }
    *bits = b;
    return __popc(b);
}

extern "C" __global__ void __launch_bounds__(MK_THREADS) mask_count(const uint8_t *mask, uint64_t n, uint32_t *counts) {
    const uint64_t tile = blockIdx.x;
    const uint64_t first = tile * MK_TILE + (uint64_t)threadIdx.x * MK_PER_THREAD;
    uint32_t bits;
    int c = first < n ? thread_bits(mask, n, first, &bits) : 0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) c += __shfl_down_sync(0xffffffffu, c, o);
    __shared__ int warp_sums[MK_THREADS / 32];
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = c;
    __syncthreads();
    if (threadIdx.x == 0) {
        int t = 0;
        for (int w = 0; w < MK_THREADS / 32; ++w) t += warp_sums[w];
        counts[tile] = (uint32_t)t;
    }
}

// One block of 1024 threads: offsets[i] = sum of counts[0..i), total[0] = sum of all.
extern "C" __global__ void __launch_bounds__(1024) mask_scan(const uint32_t *counts, uint64_t tiles, uint64_t *offsets,
                                                             uint64_t *total) {
    __shared__ uint64_t sums[1024];
    const uint64_t per = (tiles + 1023) / 1024;
    const uint64_t lo = threadIdx.x * per, hi = min(tiles, lo + per);
    uint64_t s = 0;
    for (uint64_t i = lo; i < hi; ++i) s += counts[i];
    sums[threadIdx.x] = s;
    __syncthreads();
    // Inclusive scan of the 1024 partial sums (Hillis-Steele).
    for (int o = 1; o < 1024; o <<= 1) {
        const uint64_t v = threadIdx.x >= (unsigned)o ? sums[threadIdx.x - o] : 0;
        __syncthreads();
        sums[threadIdx.x] += v;
        __syncthreads();
    }
    uint64_t run = threadIdx.x == 0 ? 0 : sums[threadIdx.x - 1];
    for (uint64_t i = lo; i < hi; ++i) {
        offsets[i] = run;
        run += counts[i];
    }
    if (threadIdx.x == 1023) total[0] = sums[1023];
}

template <typename T>
__device__ __forceinline__ void compact_impl(const T *src, const uint8_t *mask, uint64_t n, const uint64_t *offsets,
                                             T *out) {
    // The tile's selected elements are staged in shared memory in order, then written out as one
    // contiguous, coalesced run.
    __shared__ T staged[MK_TILE];
    __shared__ int warp_sums[MK_THREADS / 32];
    const uint64_t tile = blockIdx.x;
    const uint64_t first = tile * MK_TILE + (uint64_t)threadIdx.x * MK_PER_THREAD;
    uint32_t bits = 0;
    const int c = first < n ? thread_bits(mask, n, first, &bits) : 0;
    // Exclusive scan of the threads' counts: within warps by shuffles, then across warps.
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int incl = c;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    int before = 0, count = 0;
#pragma unroll
    for (int w = 0; w < MK_THREADS / 32; ++w) {
        before += w < warp ? warp_sums[w] : 0;
        count += warp_sums[w];
    }
    int at = before + incl - c;
    if (bits != 0) {
        if (first + MK_PER_THREAD <= n && (((uintptr_t)(src + first)) & 15) == 0) {
            // The thread's 16 elements in 16-byte loads.
            constexpr int PER = 16 / sizeof(T);
            MkVec16<T> x[MK_PER_THREAD / PER];
            const uint4 *s4 = reinterpret_cast<const uint4 *>(src + first);
#pragma unroll
            for (int q = 0; q < MK_PER_THREAD / PER; ++q) x[q].raw = s4[q];
#pragma unroll
            for (int j = 0; j < MK_PER_THREAD; ++j)
                if (bits & (1u << j)) staged[at++] = x[j / PER].v[j % PER];
        } else {
            while (bits) {
                const int j = __ffs(bits) - 1;
                bits &= bits - 1;
                staged[at++] = src[first + j];
            }
        }
    }
    __syncthreads();
    T *dst = out + offsets[tile];
    for (int i = threadIdx.x; i < count; i += MK_THREADS) dst[i] = staged[i];
}

// masked_fill, laid out like the elementwise kernels: thread i of the grid takes 16-byte data
// vector i and its PER = 16 / sizeof(T) mask bytes (one coalesced load each), and writes the
// whole vector back when any byte is set: the value splatted when all are, a blend of the
// loaded data otherwise. The tail and unaligned operands go element by element.
template <int PER> __device__ __forceinline__ uint32_t mask_bits(const uint8_t *m) {
    uint32_t w[4] = {0, 0, 0, 0};
    if constexpr (PER == 16) {
        const uint4 v = *reinterpret_cast<const uint4 *>(m);
        w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
    } else if constexpr (PER == 8) {
        const uint2 v = *reinterpret_cast<const uint2 *>(m);
        w[0] = v.x; w[1] = v.y;
    } else if constexpr (PER == 4) {
        w[0] = *reinterpret_cast<const uint32_t *>(m);
    } else {
        w[0] = *reinterpret_cast<const uint16_t *>(m);
    }
    uint32_t b = 0;
#pragma unroll
    for (int j = 0; j < PER; ++j) b |= (((w[j / 4] >> (8 * (j % 4))) & 0xff) != 0 ? 1u : 0u) << j;
    return b;
}

template <typename T>
__device__ __forceinline__ void fill_impl(T *dst, const uint8_t *mask, uint64_t n, T value) {
    constexpr int PER = 16 / sizeof(T);
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    const uint64_t tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const bool aligned = ((((uintptr_t)dst) | ((uintptr_t)mask)) & 15) == 0;
    uint64_t done = 0;
    if (aligned) {
        const uint64_t nvec = n / PER;
        uint4 *d4 = reinterpret_cast<uint4 *>(dst);
        for (uint64_t i = tid; i < nvec; i += stride) {
            const uint32_t bits = mask_bits<PER>(mask + i * PER);
            if (bits == 0) continue;
            MkVec16<T> x;
            if (bits == (PER == 32 ? 0xffffffffu : ((1u << PER) - 1))) {
#pragma unroll
                for (int j = 0; j < PER; ++j) x.v[j] = value;
            } else {
                x.raw = d4[i];
#pragma unroll
                for (int j = 0; j < PER; ++j)
                    if (bits & (1u << j)) x.v[j] = value;
            }
            d4[i] = x.raw;
        }
        done = nvec * PER;
    }
    for (uint64_t i = done + tid; i < n; i += stride)
        if (mask[i] != 0) dst[i] = value;
}

#define MASK_KERNELS(E, T)                                                                                       \
    extern "C" __global__ void __launch_bounds__(MK_THREADS)                                                     \
        mask_compact_e##E(const T *src, const uint8_t *mask, uint64_t n, const uint64_t *offsets, T *out) {      \
        compact_impl<T>(src, mask, n, offsets, out);                                                             \
    }                                                                                                            \
    extern "C" __global__ void mask_fill_e##E(T *dst, const uint8_t *mask, uint64_t n, T value) {                \
        fill_impl<T>(dst, mask, n, value);                                                                       \
    }

MASK_KERNELS(1, uint8_t)
MASK_KERNELS(2, uint16_t)
MASK_KERNELS(4, uint32_t)
MASK_KERNELS(8, uint64_t)

// nonzero for a mask: the row-major positions of its set bytes, in order, as int64 (the third
// launch of a compaction, after mask_count and mask_scan, writing positions instead of
// elements).
extern "C" __global__ void __launch_bounds__(MK_THREADS)
    mask_positions(const uint8_t *mask, uint64_t n, const uint64_t *offsets, int64_t *out) {
    __shared__ int64_t staged[MK_TILE];
    __shared__ int warp_sums[MK_THREADS / 32];
    const uint64_t tile = blockIdx.x;
    const uint64_t first = tile * MK_TILE + (uint64_t)threadIdx.x * MK_PER_THREAD;
    uint32_t bits = 0;
    const int c = first < n ? thread_bits(mask, n, first, &bits) : 0;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int incl = c;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    int before = 0, count = 0;
#pragma unroll
    for (int w = 0; w < MK_THREADS / 32; ++w) {
        before += w < warp ? warp_sums[w] : 0;
        count += warp_sums[w];
    }
    int at = before + incl - c;
    while (bits) {
        const int j = __ffs(bits) - 1;
        bits &= bits - 1;
        staged[at++] = (int64_t)(first + j);
    }
    __syncthreads();
    int64_t *dst = out + offsets[tile];
    for (int i = threadIdx.x; i < count; i += MK_THREADS) dst[i] = staged[i];
}
