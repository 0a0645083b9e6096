// Boolean-mask kernels of Genesis: compaction (`masked_select`, x[mask] for a full-shape mask)
// and `masked_fill`, for elements of 1, 2, 4 or 8 bytes.
//
// Compaction keeps row-major order in three launches over tiles of MK_TILE elements:
//   1. mask_count:   the number of set mask bytes of each tile, and the mask packed into bits
//                    (16 bits a thread of the later passes, an eighth of the mask's bytes);
//                    and the sum of each group of MK_GROUP tiles (one block);
//   2. mask_scan:    one block turns the group sums into exclusive offsets, and the total;
//   3. mask_compact: each tile adds the counts of the tiles before it in its group to its
//                    group's offset, scans its threads' counts, stages its selected elements in
//                    shared memory in order, and writes them as one coalesced run from there.
// The host reads the total between 2 and 3 to size the output. The mask is read once (the
// bits twice, written once), the data once, the output written once. The CPU twin (crates/genesis-kernels/src/mask.rs) gives the
// same bytes (a copy: no arithmetic).
//
// Mask bytes are 0 or 1 (genesis bool); any non-zero byte counts as set.
#include <stdint.h>

#include "pdl.cuh"

template <typename T> union MkVec16 {
    uint4 raw;
    T v[16 / sizeof(T)];
};

#define MK_THREADS 256
#define MK_PER_THREAD 16
#define MK_TILE (MK_THREADS * MK_PER_THREAD)

// One bit per byte of a 32-bit word, set when the byte is non-zero: bit 7 of each byte of
// ((w & 0x7f7f7f7f) + 0x7f7f7f7f) | w is set exactly when that byte is (no carry crosses
// bytes); the four bits are gathered into the low nibble.
__device__ __forceinline__ uint32_t nonzero_nibble(uint32_t w) {
    const uint32_t t = (((w & 0x7f7f7f7fu) + 0x7f7f7f7fu) | w) & 0x80808080u;
    return ((t >> 7) & 1u) | ((t >> 14) & 2u) | ((t >> 21) & 4u) | ((t >> 28) & 8u);
}

// One warp per tile (eight tiles a block, no shared memory): lane l reads 16-byte vectors
// l, l + 32, ... of the tile (each load instruction of the warp covers 512 contiguous bytes),
// eight in flight at once; vector g becomes the 16 bits bits[tile * MK_THREADS + g] (bits past
// n are clear); a warp reduction gives the tile's count.
#define MK_COUNT_VECS (MK_TILE / 16 / 32)
#define MK_GROUP 8
extern "C" __global__ void __launch_bounds__(256) mask_count(const uint8_t *mask, uint64_t n, uint64_t tiles,
                                                             uint32_t *counts, uint32_t *group_sums, uint16_t *bits) {
    __shared__ int warp_counts[MK_GROUP];
    pdl_trigger();  // mask_scan follows (pdl.cuh)
    const uint64_t tile = (uint64_t)blockIdx.x * MK_GROUP + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    const uint64_t base = tile * MK_TILE;
    uint16_t *tb = bits + tile * MK_THREADS;
    int c = 0;
    if (tile >= tiles) {
        // Past the last tile: counts nothing (the block's sum still needs this warp).
    } else if (base + MK_TILE <= n && (((uintptr_t)(mask + base)) & 15) == 0) {
        const uint4 *m4 = reinterpret_cast<const uint4 *>(mask + base);
        uint4 v[MK_COUNT_VECS];
#pragma unroll
        for (int q = 0; q < MK_COUNT_VECS; ++q) v[q] = m4[q * 32 + lane];
#pragma unroll
        for (int q = 0; q < MK_COUNT_VECS; ++q) {
            const uint32_t b = nonzero_nibble(v[q].x) | (nonzero_nibble(v[q].y) << 4) |
                               (nonzero_nibble(v[q].z) << 8) | (nonzero_nibble(v[q].w) << 12);
            tb[q * 32 + lane] = (uint16_t)b;
            c += __popc(b);
        }
    } else {
        for (int g = lane; g < MK_THREADS; g += 32) {
            const uint64_t first = base + (uint64_t)g * MK_PER_THREAD;
            uint32_t b = 0;
            for (int j = 0; j < MK_PER_THREAD; ++j)
                if (first + j < n && mask[first + j] != 0) b |= 1u << j;
            tb[g] = (uint16_t)b;
            c += __popc(b);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) c += __shfl_down_sync(0xffffffffu, c, o);
    if (lane == 0) {
        if (tile < tiles) counts[tile] = (uint32_t)c;
        warp_counts[threadIdx.x >> 5] = c;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int g = 0;
#pragma unroll
        for (int w = 0; w < MK_GROUP; ++w) g += warp_counts[w];
        group_sums[blockIdx.x] = (uint32_t)g;
    }
}

// The offset of a tile's first selected element: its group's offset plus the counts of the
// tiles before it in the group. Computed by warp 0 of the tile's block into *dst_base (shared),
// read after a __syncthreads.
__device__ __forceinline__ void tile_base(const uint32_t *counts, const uint64_t *group_offsets, uint64_t tile,
                                          uint64_t *dst_base) {
    if (threadIdx.x < 32) {
        const uint64_t g = tile / MK_GROUP;
        const uint64_t t = g * MK_GROUP + threadIdx.x;
        uint32_t v = (threadIdx.x < MK_GROUP && t < tile) ? counts[t] : 0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0) *dst_base = group_offsets[g] + v;
    }
}

// One block of 1024 threads: offsets[i] = sum of counts[0..i), total[0] = sum of all (over the
// group sums of mask_count). Each
// thread takes a run of `per` tiles (a multiple of 4, so that its counts load as 16-byte
// vectors, four in flight at once): it sums them, the block scans the 1024 sums (warp shuffles,
// then across warps), and each thread writes its run's offsets in 16-byte stores.
extern "C" __global__ void __launch_bounds__(1024) mask_scan(const uint32_t *counts, uint64_t tiles, uint64_t *offsets,
                                                             uint64_t *total) {
    __shared__ uint64_t warp_sums[32];
    pdl_wait();  // for mask_count's counts (pdl.cuh)
    const uint64_t per = (((tiles + 1023) / 1024) + 3) & ~3ull;
    const uint64_t lo = min(tiles, threadIdx.x * per), hi = min(tiles, lo + per);
    uint64_t s = 0;
    uint64_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        uint4 v[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) v[q] = *reinterpret_cast<const uint4 *>(counts + i + 4 * q);
#pragma unroll
        for (int q = 0; q < 4; ++q) s += (uint64_t)v[q].x + v[q].y + v[q].z + v[q].w;
    }
    for (; i < hi; ++i) s += counts[i];
    // Inclusive scan of the threads' sums.
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    uint64_t incl = s;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint64_t v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        uint64_t w = warp_sums[lane];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const uint64_t v = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += v;
        }
        warp_sums[lane] = w;
    }
    __syncthreads();
    incl += warp == 0 ? 0 : warp_sums[warp - 1];
    uint64_t run = incl - s;
    i = lo;
    for (; i + 16 <= hi; i += 16) {
        uint4 v[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) v[q] = *reinterpret_cast<const uint4 *>(counts + i + 4 * q);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            ulonglong2 a, b;
            a.x = run;
            a.y = run + v[q].x;
            b.x = a.y + v[q].y;
            b.y = b.x + v[q].z;
            run = b.y + v[q].w;
            *reinterpret_cast<ulonglong2 *>(offsets + i + 4 * q) = a;
            *reinterpret_cast<ulonglong2 *>(offsets + i + 4 * q + 2) = b;
        }
    }
    for (; i < hi; ++i) {
        offsets[i] = run;
        run += counts[i];
    }
    if (threadIdx.x == 1023) total[0] = incl;
}

// The tile's exclusive scan of each thread's count `c` (shuffles within warps, then across
// warps): where the thread's first selected element goes in the tile; the tile's total in
// *count. Every thread of the block must call it (it synchronises the block).
__device__ __forceinline__ int tile_scan(int c, int *count) {
    __shared__ int warp_sums[MK_THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int incl = c;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    int before = 0, total = 0;
#pragma unroll
    for (int w = 0; w < MK_THREADS / 32; ++w) {
        before += w < warp ? warp_sums[w] : 0;
        total += warp_sums[w];
    }
    *count = total;
    return before + incl - c;
}

// A thread loads its 16 elements only when one of its 16 mask bits is set (sparse masks skip
// most of the data). (Loading them together with the bits measured slower on the H200 at 50 %
// and at 1 in 32, once the bits replaced the mask bytes here.)
template <typename T>
__device__ __forceinline__ void compact_impl(const T *src, const uint16_t *mbits, uint64_t n, const uint32_t *counts,
                                             const uint64_t *offsets, T *out) {
    // The tile's selected elements are staged in shared memory in order, then written out as one
    // contiguous, coalesced run.
    __shared__ T staged[MK_TILE];
    __shared__ uint64_t dst_base;
    const uint64_t tile = blockIdx.x;
    tile_base(counts, offsets, tile, &dst_base);
    const uint64_t first = tile * MK_TILE + (uint64_t)threadIdx.x * MK_PER_THREAD;
    constexpr int PER = 16 / sizeof(T);
    const bool vec = first + MK_PER_THREAD <= n && (((uintptr_t)(src + first)) & 15) == 0;
    MkVec16<T> x[MK_PER_THREAD / PER];
    uint32_t bits = first < n ? mbits[tile * MK_THREADS + threadIdx.x] : 0;
    int count;
    int at = tile_scan(__popc(bits), &count);
    if (bits != 0) {
        if (vec) {
            // The thread's 16 elements in 16-byte loads.
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
    T *dst = out + dst_base;
    for (int i = threadIdx.x; i < count; i += MK_THREADS) dst[i] = staged[i];
}

// The PER mask bytes at m (one load) as PER bits, bit j set when byte j is non-zero.
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

// masked_fill: thread i of the grid takes 16-byte data vector i and its 16 / sizeof(T) mask
// bytes, both loads issued together; the vector is written back (the value where the mask is
// set) unless the whole 32-byte sector it shares with its neighbour's vector has no set byte.
// Whole sectors matter (H200, 64 Mi f32, ms a launch): at 50 % density, skipping the store of
// every vector whose own mask is clear was 7 % slower than storing all (0.1537 against
// 0.1440), skipping untouched sectors is not (0.1450); at 1 in 32 skipping sectors is 15 %
// faster than storing all (0.1228 against 0.1453; per vector 0.1033). The earlier shape (four
// vectors a thread, data loaded only for mixed masks, 44 registers) took 0.1486 / 0.1210.
// All lanes of a warp run the loop together (its condition is uniform per block), so the
// shuffle is whole; the tail and unaligned operands go element by element.
template <typename T>
__device__ __forceinline__ void fill_sectors(T *dst, const uint8_t *mask, uint64_t n, T value) {
    constexpr int PER = 16 / sizeof(T);
    const bool aligned = ((((uintptr_t)dst) | ((uintptr_t)mask)) & 15) == 0;
    uint64_t done = 0;
    if (aligned) {
        const uint64_t nvec = n / PER;
        uint4 *d4 = reinterpret_cast<uint4 *>(dst);
        const uint64_t step = (uint64_t)gridDim.x * blockDim.x;
        for (uint64_t b0 = (uint64_t)blockIdx.x * blockDim.x; b0 < nvec; b0 += step) {
            const uint64_t b = b0 + threadIdx.x;
            const bool valid = b < nvec;
            const uint32_t bits = valid ? mask_bits<PER>(mask + b * PER) : 0;
            MkVec16<T> x;
            if (valid) x.raw = d4[b];
            const uint32_t sector = bits | __shfl_xor_sync(0xffffffffu, bits, 1);
            if (valid && sector != 0) {
#pragma unroll
                for (int k = 0; k < PER; ++k)
                    if (bits & (1u << k)) x.v[k] = value;
                d4[b] = x.raw;
            }
        }
        done = nvec * PER;
    }
    const uint64_t tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = done + tid; i < n; i += stride)
        if (mask[i] != 0) dst[i] = value;
}

#define MASK_KERNELS(E, T)                                                                                       \
    extern "C" __global__ void __launch_bounds__(MK_THREADS)                                                     \
        mask_compact_e##E(const T *src, const uint16_t *bits, uint64_t n, const uint32_t *counts,                \
                          const uint64_t *offsets, T *out) {                                                     \
        compact_impl<T>(src, bits, n, counts, offsets, out);                                                     \
    }                                                                                                            \
    extern "C" __global__ void mask_fill_e##E(T *dst, const uint8_t *mask, uint64_t n, T value) {                \
        fill_sectors<T>(dst, mask, n, value);                                                                    \
    }

MASK_KERNELS(1, uint8_t)
MASK_KERNELS(2, uint16_t)
MASK_KERNELS(4, uint32_t)
MASK_KERNELS(8, uint64_t)

// nonzero for a mask: the row-major positions of its set bytes, in order, as int64 (the third
// launch of a compaction, after mask_count and mask_scan, writing positions instead of
// elements).
extern "C" __global__ void __launch_bounds__(MK_THREADS)
    mask_positions(const uint16_t *mbits, uint64_t n, const uint32_t *counts, const uint64_t *offsets, int64_t *out) {
    __shared__ int64_t staged[MK_TILE];
    __shared__ uint64_t dst_base;
    const uint64_t tile = blockIdx.x;
    tile_base(counts, offsets, tile, &dst_base);
    const uint64_t first = tile * MK_TILE + (uint64_t)threadIdx.x * MK_PER_THREAD;
    uint32_t bits = first < n ? mbits[tile * MK_THREADS + threadIdx.x] : 0;
    int count;
    int at = tile_scan(__popc(bits), &count);
    while (bits) {
        const int j = __ffs(bits) - 1;
        bits &= bits - 1;
        staged[at++] = (int64_t)(first + j);
    }
    __syncthreads();
    int64_t *dst = out + dst_base;
    for (int i = threadIdx.x; i < count; i += MK_THREADS) dst[i] = staged[i];
}
