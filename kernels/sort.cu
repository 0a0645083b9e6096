// Sorting along the last axis of a contiguous [rows, r] array: values and int64 indices, for
// f64, f32, f16, bf16, i32, i64; ascending or descending; stable (equal values keep their order).
//
// Built by `cargo xtask build-kernels` into crates/genesis-kernels/images/sort.fatbin. The CPU
// twin is `sort` in crates/genesis-kernels/src/sort.rs; the two agree exactly.
//
// Keys: each value becomes an unsigned key whose order is the sort order: floats by their
// bits (sign flipped for positives, all bits for negatives; every NaN first made the canonical
// positive NaN, so NaN sorts after +inf, as PyTorch, and -0.0 made +0.0, an equal value),
// integers with the sign bit flipped; descending inverts the key's bits. The values written
// are the input's, read back at the sorted positions (bits kept). A key and the element's
// position in its row sort as a pair (key, position), so the order is total (no two elements
// of a row compare equal) and equal values keep their order: the result is the stable sort's,
// whatever the network or merge order.
//
// Every kernel writes the first `kout` elements of each sorted row (`kout == r` for a whole
// sort, fewer for a top-k), rows of `kout` in the outputs.
//
// Rows of at most SO_SMEM elements, and rows of at most RG_LONG elements of keys of at most 32
// bits: one block a row, the row padded to a power of two (padding keys sort last), read once
// and written once. Keys of at most 32 bits in rows padded to RG_MIN or more (`sort_rows8_*`,
// `sort_rows8l_*` above SO_SMEM, below): warps sort runs of RG_MIN in registers by a bitonic
// network, merged in shared memory (as the chunks of step 1 below); the others
// (`sort_rows_*`): a bitonic network over the row in shared memory.
//
// Longer rows: a run sort, then merges.
// 1. A block sorts each chunk of SO_SMEM elements of a row (the row's last chunk may be
//    short) and writes its sorted (key, position) pairs, the position being the element's
//    index in its row, into a workspace laid out as the input (row i at i * r). A pair is one
//    word: key << 32 | position (u64) for keys of at most 32 bits, {key, position} (16 bytes)
//    for 64-bit keys; words compare as the pairs do. `sort_chunks8_*` (keys of at most 32
//    bits): each warp sorts RG_MIN words in registers by the bitonic network (shuffles only),
//    then three merge levels in shared memory (merge path, as in step 2) join the eight runs:
//    far fewer steps than the network over SO_SMEM. `sort_chunks_*` (64-bit keys): the
//    shared-memory network over the chunk.
// 2. Each merge pass merges the sorted runs of every row two by two (runs of `run` elements,
//    the last of a row possibly short or alone; runs never cross rows), doubling the run
//    length, ping-ponging between two workspace buffers: log2(r / SO_SMEM) passes, rounded up.
//    Merge path: the merged output of two runs A and B is cut into tiles of MG_TILE outputs;
//    `sort_part_*` finds, for each tile boundary d, how many of the first d outputs come from
//    A by a binary search along the diagonal d (A[i] < B[d - 1 - i] holds exactly for the i
//    below that count, as no two words are equal). A block of `sort_merge_*` then loads its
//    tile's slices of A and B (MG_TILE words together) into shared memory, each thread finds
//    its own start on its diagonal (MG_E outputs a thread) by the same search there, merges
//    MG_E words sequentially into registers, and the block writes the tile back coalesced.
//    Every block and thread gets the same share of outputs whatever the data.
// 3. The last pass (`sort_mfinal_*`, one merge a row) writes the values, read from the input
//    at the merged positions, and the positions as int64 indices instead of words.
// Only the first `kout` elements of a sorted row are kept, and the first `kout` of a merge
// depend only on the first `kout` of each of its runs: every run keeps (is sorted, merged and
// written for) its first min(length, kout) words only, so a top-k of long rows merges short
// runs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define SO_SMEM 2048
#define SO_THREADS 512
#define MG_THREADS 256
#define MG_E 8
#define MG_TILE (MG_THREADS * MG_E)
static_assert(SO_SMEM % MG_TILE == 0, "a merge tile never straddles two merges");

typedef unsigned long long u64;

template <typename T> struct Key;
template <> struct Key<double> {
    static __device__ __forceinline__ u64 to(double x) {
        u64 b = (u64)__double_as_longlong(x);
        if (x != x) b = 0x7ff8000000000000ull;
        if (b == 0x8000000000000000ull) b = 0;
        return (b & 0x8000000000000000ull) ? ~b : (b | 0x8000000000000000ull);
    }
};
template <> struct Key<float> {
    static __device__ __forceinline__ u64 to(float x) {
        uint32_t b = __float_as_uint(x);
        if (x != x) b = 0x7fc00000u;
        if (b == 0x80000000u) b = 0;
        b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
        return b;
    }
};
template <> struct Key<__half> {
    static __device__ __forceinline__ u64 to(__half x) {
        uint16_t b = __half_as_ushort(x);
        if ((b & 0x7c00u) == 0x7c00u && (b & 0x03ffu)) b = 0x7e00u;
        if (b == 0x8000u) b = 0;
        b = (b & 0x8000u) ? (uint16_t)~b : (uint16_t)(b | 0x8000u);
        return b;
    }
};
template <> struct Key<__nv_bfloat16> {
    static __device__ __forceinline__ u64 to(__nv_bfloat16 x) {
        uint16_t b = __bfloat16_as_ushort(x);
        if ((b & 0x7f80u) == 0x7f80u && (b & 0x007fu)) b = 0x7fc0u;
        if (b == 0x8000u) b = 0;
        b = (b & 0x8000u) ? (uint16_t)~b : (uint16_t)(b | 0x8000u);
        return b;
    }
};
template <> struct Key<int32_t> {
    static __device__ __forceinline__ u64 to(int32_t x) { return (uint32_t)x ^ 0x80000000u; }
};
template <> struct Key<int64_t> {
    static __device__ __forceinline__ u64 to(int64_t x) { return (u64)x ^ 0x8000000000000000ull; }
};

// The mask that inverts a key for a descending sort: the key's width only, so that a padding
// key (all ones, position all ones) still sorts last.
template <typename T> __device__ __forceinline__ u64 width_mask() {
    return sizeof(T) == 8 ? ~0ull : ((1ull << (8 * sizeof(T))) - 1);
}

// (ka, ia) after (kb, ib)?
__device__ __forceinline__ bool after(u64 ka, uint32_t ia, u64 kb, uint32_t ib) {
    return ka > kb || (ka == kb && ia > ib);
}


// The shared-memory network over `npad` keys and positions (a power of two), block-wide; ends
// after a barrier.
__device__ __forceinline__ void smem_network(u64 *key, uint32_t *pos, uint32_t npad) {
    // Each stage: npad / 2 pairs (i, i + j), i with bit j clear; thread t takes pair t.
    for (uint32_t k = 2; k <= npad; k <<= 1) {
        for (uint32_t j = k >> 1; j > 0; j >>= 1) {
            for (uint32_t t = threadIdx.x; t < npad / 2; t += blockDim.x) {
                const uint32_t i = ((t & ~(j - 1)) << 1) | (t & (j - 1));
                const uint32_t l = i + j;
                const bool up = (i & k) == 0;
                const u64 ki = key[i], kl = key[l];
                const uint32_t pi = pos[i], pl = pos[l];
                if (after(ki, pi, kl, pl) == up) {
                    key[i] = kl;
                    key[l] = ki;
                    pos[i] = pl;
                    pos[l] = pi;
                }
            }
            __syncthreads();
        }
    }
}

// Loads `n` elements of `p` as keys and positions, padded to `npad` with keys that sort last.
template <typename T>
__device__ __forceinline__ void smem_load(const T *p, uint64_t n, uint32_t npad, u64 inv, u64 *key, uint32_t *pos) {
    for (uint32_t i = threadIdx.x; i < npad; i += blockDim.x) {
        if (i < n) {
            key[i] = Key<T>::to(p[i]) ^ inv;
            pos[i] = i;
        } else {
            key[i] = ~0ull;
            pos[i] = 0xffffffffu;
        }
    }
    __syncthreads();
}

template <typename T>
__device__ __forceinline__ void rows_impl(const T *in, T *out, int64_t *out_idx, uint64_t r, uint32_t npad, int desc,
                                          uint64_t kout) {
    extern __shared__ u64 smem[];
    u64 *key = smem;
    uint32_t *pos = reinterpret_cast<uint32_t *>(smem + npad);
    const uint64_t row = blockIdx.x;
    const T *p = in + row * r;
    smem_load<T>(p, r, npad, desc ? width_mask<T>() : 0, key, pos);
    smem_network(key, pos, npad);
    T *q = out + row * kout;
    int64_t *qi = out_idx + row * kout;
    for (uint32_t i = threadIdx.x; i < kout; i += blockDim.x) {
        q[i] = p[pos[i]];
        qi[i] = pos[i];
    }
}

// Chunks of SO_SMEM elements of rows of 64-bit keys: sorted in shared memory (SO_SMEM keys and
// positions, dynamic), the first min(length, kout) of each written as {key, position in the
// row} words. One chunk a block at a time.
template <typename T>
__device__ __forceinline__ void chunks_impl(const T *in, ulonglong2 *ws, uint64_t rows, uint64_t r, int desc,
                                            uint64_t kout) {
    extern __shared__ u64 smem[];
    u64 *key = smem;
    uint32_t *pos = reinterpret_cast<uint32_t *>(smem + SO_SMEM);
    const uint64_t per_row = (r + SO_SMEM - 1) / SO_SMEM, chunks = rows * per_row;
    for (uint64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
        const uint64_t row = c / per_row, start = (c % per_row) * SO_SMEM;
        const uint64_t n = min((uint64_t)SO_SMEM, r - start), keep = min(n, kout);
        smem_load<T>(in + row * r + start, n, SO_SMEM, desc ? width_mask<T>() : 0, key, pos);
        smem_network(key, pos, SO_SMEM);
        ulonglong2 *q = ws + row * r + start;
        for (uint32_t i = threadIdx.x; i < keep; i += blockDim.x) q[i] = make_ulonglong2(key[i], start + pos[i]);
        __syncthreads();
    }
}

// Rows of RG_MIN..SO_SMEM elements whose keys fit 32 bits (f32, f16, bf16, i32), and the
// chunks of longer rows: each key packed with its position into one word (key << SHIFT |
// position: the pair's order is the word's), RG_E consecutive words a thread. Each warp sorts
// RG_MIN words in registers (no barrier), then merge levels in shared memory join the warps'
// runs: a 2048-element row needs seven block-wide barriers, and far fewer steps than the
// network over the whole row (36 stages a warp, then three merges of eight words a thread).
#define RG_E 8
#define RG_MIN (32 * RG_E)
#define RG_LONG 8192

// The word of a key and its position: 64 bits for 32-bit keys, 32 bits for 16-bit keys (a
// position below RG_LONG fits the low 16 bits), so that half-precision rows move half the bytes.
template <typename T> struct Word {
    typedef u64 W;
    static const int SHIFT = 32;
};
template <> struct Word<__half> {
    typedef uint32_t W;
    static const int SHIFT = 16;
};
template <> struct Word<__nv_bfloat16> {
    typedef uint32_t W;
    static const int SHIFT = 16;
};

template <typename W> __device__ __forceinline__ W rg_min(W a, W b) { return a < b ? a : b; }
template <typename W> __device__ __forceinline__ W rg_max(W a, W b) { return a < b ? b : a; }

// Stage (j, k) for j < RG_E: the partners are registers e and e + J of one thread.
template <uint32_t J, typename W> __device__ __forceinline__ void rg_local(W (&v)[RG_E], uint32_t base, uint32_t k) {
#pragma unroll
    for (uint32_t e = 0; e < RG_E; e++) {
        if ((e & J) == 0) {
            const bool up = ((base + e) & k) == 0;
            const W a = v[e], b = v[e + J];
            v[e] = up ? rg_min(a, b) : rg_max(a, b);
            v[e + J] = up ? rg_max(a, b) : rg_min(a, b);
        }
    }
}

// One warp sorts `n` elements of `p` (padded to RG_MIN; lane l holds words l * RG_E .. + RG_E
// in `v`, `base` = l * RG_E) by the bitonic network in registers: partners in the same thread
// swap registers, partners in other lanes are exchanged by shuffles.
template <typename T>
__device__ __forceinline__ void rg_sort(const T *p, uint64_t n, uint32_t base, uint32_t inv,
                                        typename Word<T>::W (&v)[RG_E]) {
    typedef typename Word<T>::W W;
#pragma unroll
    for (uint32_t e = 0; e < RG_E; e++) {
        const uint32_t i = base + e;
        v[e] = i < n ? ((W)((uint32_t)Key<T>::to(p[i]) ^ inv) << Word<T>::SHIFT) | i : ~(W)0;
    }
    for (uint32_t k = 2; k <= RG_MIN; k <<= 1) {
        for (uint32_t j = k >> 1; j > 0; j >>= 1) {
            if (j >= RG_E) {
                const uint32_t lanes = j / RG_E;
#pragma unroll
                for (uint32_t e = 0; e < RG_E; e++) {
                    const uint32_t i = base + e;
                    const W o = __shfl_xor_sync(0xffffffffu, v[e], lanes);
                    const bool keep_min = ((i & j) == 0) == ((i & k) == 0);
                    v[e] = keep_min ? rg_min(v[e], o) : rg_max(v[e], o);
                }
            } else if (j == 4) {
                rg_local<4>(v, base, k);
            } else if (j == 2) {
                rg_local<2>(v, base, k);
            } else {
                rg_local<1>(v, base, k);
            }
        }
    }
}

// Words of the workspace: u64 (key << 32 | position) for keys of at most 32 bits, {key,
// position} for 64-bit keys, ordered as integers. No two words of a row's elements are equal;
// padding words (all ones, in a chunk's merges only) are identical, and the search and the
// merge below both take b's word first on a tie, so they agree on where each word goes.
__device__ __forceinline__ bool lt(u64 a, u64 b) { return a < b; }
__device__ __forceinline__ bool lt(const ulonglong2 &a, const ulonglong2 &b) {
    return a.x < b.x || (a.x == b.x && a.y < b.y);
}
__device__ __forceinline__ uint32_t pos_of(u64 w) { return (uint32_t)w; }
__device__ __forceinline__ uint32_t pos_of(const ulonglong2 &w) { return (uint32_t)w.y; }

// How many of the first `d` words of the merge of a[0..la) and b[0..lb) come from `a`
// (d <= la + lb): the first i in [max(0, d - lb), min(d, la)] with !(a[i] < b[d - 1 - i]).
template <typename W, typename I>
__device__ __forceinline__ I merge_path(const W *a, I la, const W *b, I lb, I d) {
    I lo = d > lb ? d - lb : 0, hi = min(d, la);
    while (lo < hi) {
        const I mid = (lo + hi) >> 1;
        if (lt(a[mid], b[d - 1 - mid]))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

// Sorts `n` elements of `p` (padded to `npad`, RG_MIN..SO_SMEM, a power of two) as words into
// sm[0..npad), a block of npad / RG_E threads: each warp sorts RG_MIN words in registers by the
// bitonic network (shuffles only, no barrier), then log2(npad / RG_MIN) merge levels in shared
// memory join the runs (each thread finds the start of its RG_E outputs by merge path and
// merges them; padding words, all ones, sort last and are identical, so ties among them need
// no order). Far fewer steps than the network over npad. Positions are local to `p`. Ends
// after a barrier.
template <typename T>
__device__ __forceinline__ void warp_merge_sort(const T *p, uint64_t n, uint32_t npad, uint32_t inv,
                                                typename Word<T>::W *sm) {
    typedef typename Word<T>::W W;
    const uint32_t tid = threadIdx.x, lane_base = (tid % 32) * RG_E, warp_at = (tid / 32) * RG_MIN;
    // Positions in the warp's sort are local to the warp; made local to `p` when stored.
    const uint64_t wn = n > warp_at ? min((uint64_t)RG_MIN, n - warp_at) : 0;
    W v[RG_E];
    rg_sort<T>(p + warp_at, wn, lane_base, inv, v);
#pragma unroll
    for (uint32_t e = 0; e < RG_E; e++) sm[warp_at + lane_base + e] = v[e] == ~(W)0 ? v[e] : v[e] + warp_at;
    __syncthreads();
    for (uint32_t run = RG_MIN; run < npad; run <<= 1) {
        const uint32_t d = tid * RG_E, at = d & ~(2 * run - 1), dd = d - at;
        const W *a = sm + at, *b = sm + at + run;
        uint32_t ai = merge_path<W, uint32_t>(a, run, b, run, dd), bi = dd - ai;
#pragma unroll
        for (uint32_t e = 0; e < RG_E; e++) {
            const bool take_a = ai < run && (bi >= run || lt(a[ai], b[bi]));
            v[e] = take_a ? a[ai++] : b[bi++];
        }
        __syncthreads();
#pragma unroll
        for (uint32_t e = 0; e < RG_E; e++) sm[d + e] = v[e];
        __syncthreads();
    }
}

// Rows of RG_MIN..RG_LONG elements padded (keys of at most 32 bits): `warp_merge_sort` into
// `sm` (npad words), then the first `kout` values and positions written coalesced.
template <typename T>
__device__ __forceinline__ void rows_reg_impl(const T *in, T *out, int64_t *out_idx, uint64_t r, uint32_t npad,
                                              int desc, uint64_t kout, typename Word<T>::W *sm) {
    typedef typename Word<T>::W W;
    const uint64_t row = blockIdx.x;
    const T *p = in + row * r;
    warp_merge_sort<T>(p, r, npad, desc ? (uint32_t)width_mask<T>() : 0u, sm);
    T *q = out + row * kout;
    int64_t *qi = out_idx + row * kout;
    for (uint32_t i = threadIdx.x; i < kout; i += blockDim.x) {
        const uint32_t at = (uint32_t)(sm[i] & (((W)1 << Word<T>::SHIFT) - 1));
        q[i] = p[at];
        qi[i] = at;
    }
}

// Chunks of SO_SMEM elements of rows of keys of at most 32 bits (a block of SO_SMEM / RG_E
// threads): `warp_merge_sort`, then the first min(length, kout) words written as key << 32 |
// position-in-row words, coalesced. One chunk a block at a time.
template <typename T>
__device__ __forceinline__ void chunks_reg_impl(const T *in, u64 *ws, uint64_t rows, uint64_t r, int desc,
                                                uint64_t kout) {
    typedef typename Word<T>::W W;
    __shared__ W sm[SO_SMEM];
    const uint32_t inv = desc ? (uint32_t)width_mask<T>() : 0u;
    const uint64_t per_row = (r + SO_SMEM - 1) / SO_SMEM, chunks = rows * per_row;
    for (uint64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
        const uint64_t row = c / per_row, start = (c % per_row) * SO_SMEM;
        const uint64_t n = min((uint64_t)SO_SMEM, r - start), keep = min(n, kout);
        warp_merge_sort<T>(in + row * r + start, n, SO_SMEM, inv, sm);
        u64 *q = ws + row * r + start;
        for (uint32_t i = threadIdx.x; i < keep; i += blockDim.x) {
            const W w = sm[i];
            q[i] = ((u64)(w >> Word<T>::SHIFT) << 32) | (start + (uint32_t)(w & (((W)1 << Word<T>::SHIFT) - 1)));
        }
        __syncthreads();
    }
}

// ---- Merges of sorted runs (rows longer than SO_SMEM) ----

template <typename T> struct WordOf { typedef u64 W; };
template <> struct WordOf<double> { typedef ulonglong2 W; };
template <> struct WordOf<int64_t> { typedef ulonglong2 W; };

// Merge `pair` of row `row` when runs are `run` long: its runs A (at `a`) and B (at `b`, just
// after A) with `la` and `lb` words kept each, and its `outc` kept outputs, at `a` on.
struct MergePair {
    uint64_t a, b, la, lb, outc;
};
__device__ __forceinline__ MergePair merge_pair(uint64_t row, uint64_t pair, uint64_t r, uint64_t kout,
                                                uint64_t run) {
    const uint64_t start = pair * 2 * run, rest = r - start;
    const uint64_t fa = min(run, rest), fb = min(run, rest - fa);
    MergePair m;
    m.a = row * r + start;
    m.b = m.a + fa;
    m.la = min(fa, kout);
    m.lb = min(fb, kout);
    m.outc = min(fa + fb, kout);
    return m;
}

// Tile boundaries of one merge pass: `tiles` (tiles a merge) + 1 entries a merge, entry j the
// split (words from A) of the first min(j * MG_TILE, outc) outputs.
template <typename W>
__device__ __forceinline__ void part_impl(const W *src, uint32_t *part, uint64_t rows, uint64_t r, uint64_t kout,
                                          uint64_t run, uint64_t pairs, uint64_t tiles) {
    const uint64_t n = rows * pairs * (tiles + 1), stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
        const uint64_t at = e / (tiles + 1), j = e % (tiles + 1);
        const MergePair m = merge_pair(at / pairs, at % pairs, r, kout, run);
        const uint64_t d = min(j * MG_TILE, m.outc);
        part[e] = (uint32_t)merge_path<W, uint64_t>(src + m.a, m.la, src + m.b, m.lb, d);
    }
}

// One merge pass: a block merges one tile of MG_TILE outputs at a time (see the header). Into
// `dst` (words, laid out as `src`), or, FINAL (one merge a row), into the values `out` (read
// from `in` at the merged positions) and the indices `out_idx`, rows of `kout`.
template <typename T, typename W, bool FINAL>
__device__ __forceinline__ void merge_impl(const W *src, W *dst, const T *in, T *out, int64_t *out_idx,
                                           const uint32_t *part, uint64_t rows, uint64_t r, uint64_t kout,
                                           uint64_t run, uint64_t pairs, uint64_t tiles) {
    __shared__ W s[MG_TILE];
    const uint64_t all = rows * pairs * tiles;
    const uint32_t tid = threadIdx.x;
    for (uint64_t t = blockIdx.x; t < all; t += gridDim.x) {
        const uint64_t at = t / tiles, j = t % tiles, row = at / pairs;
        const MergePair m = merge_pair(row, at % pairs, r, kout, run);
        const uint64_t d0 = j * MG_TILE;
        if (d0 >= m.outc) continue;  // the same for the whole block
        const uint64_t d1 = min(d0 + MG_TILE, m.outc);
        const uint64_t a0 = part[at * (tiles + 1) + j], a1 = part[at * (tiles + 1) + j + 1];
        const uint64_t b0 = d0 - a0;
        const uint32_t n = (uint32_t)(d1 - d0), na = (uint32_t)(a1 - a0), nb = n - na;
        for (uint32_t i = tid; i < n; i += MG_THREADS) s[i] = i < na ? src[m.a + a0 + i] : src[m.b + b0 + (i - na)];
        __syncthreads();
        const uint32_t d = min(tid * MG_E, n);
        uint32_t ai = merge_path<W, uint32_t>(s, na, s + na, nb, d);
        uint32_t bi = d - ai;
        W v[MG_E];
#pragma unroll
        for (uint32_t e = 0; e < MG_E; e++) {
            if (d + e < n) {
                const bool take_a = ai < na && (bi >= nb || lt(s[ai], s[na + bi]));
                v[e] = take_a ? s[ai++] : s[na + bi++];
            }
        }
        __syncthreads();
#pragma unroll
        for (uint32_t e = 0; e < MG_E; e++)
            if (d + e < n) s[d + e] = v[e];
        __syncthreads();
        if (FINAL) {
            const T *p = in + row * r;
            T *q = out + row * kout + d0;
            int64_t *qi = out_idx + row * kout + d0;
            for (uint32_t i = tid; i < n; i += MG_THREADS) {
                const uint32_t at_pos = pos_of(s[i]);
                q[i] = p[at_pos];
                qi[i] = at_pos;
            }
        } else {
            W *q = dst + m.a + d0;
            for (uint32_t i = tid; i < n; i += MG_THREADS) q[i] = s[i];
        }
        __syncthreads();
    }
}

#define SO_MERGE_WORDS(NAME, W)                                                                          \
    extern "C" __global__ void sort_part_##NAME(const W *src, uint32_t *part, uint64_t rows, uint64_t r, \
                                                uint64_t kout, uint64_t run, uint64_t pairs,             \
                                                uint64_t tiles) {                                        \
        part_impl<W>(src, part, rows, r, kout, run, pairs, tiles);                                       \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(MG_THREADS)                                             \
        sort_merge_##NAME(const W *src, W *dst, const uint32_t *part, uint64_t rows, uint64_t r,         \
                          uint64_t kout, uint64_t run, uint64_t pairs, uint64_t tiles) {                 \
        merge_impl<float, W, false>(src, dst, nullptr, nullptr, nullptr, part, rows, r, kout, run,       \
                                    pairs, tiles);                                                       \
    }

SO_MERGE_WORDS(w64, u64)
SO_MERGE_WORDS(w128, ulonglong2)

// `sort_rows8_*`: rows padded to at most SO_SMEM, static shared memory. `sort_rows8l_*`: rows
// padded to SO_SMEM * 2 .. RG_LONG, a block of up to 1024 threads and npad words of dynamic
// shared memory (64 KiB for 8192 words of 64 bits): on chip, where the chunk sort and a merge
// pass through global memory would write and read every word once more.
#define SO_REG_KERNEL(NAME, T)                                                                           \
    extern "C" __global__ void __launch_bounds__(SO_SMEM / RG_E)                                         \
        sort_rows8_##NAME(const T *in, T *out, int64_t *out_idx, uint64_t r, uint32_t npad, int desc,    \
                          uint64_t kout) {                                                               \
        __shared__ Word<T>::W sm[SO_SMEM];                                                               \
        rows_reg_impl<T>(in, out, out_idx, r, npad, desc, kout, sm);                                     \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(RG_LONG / RG_E)                                         \
        sort_rows8l_##NAME(const T *in, T *out, int64_t *out_idx, uint64_t r, uint32_t npad, int desc,   \
                           uint64_t kout) {                                                              \
        extern __shared__ uint4 so_words[];                                                              \
        rows_reg_impl<T>(in, out, out_idx, r, npad, desc, kout, reinterpret_cast<Word<T>::W *>(so_words)); \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(SO_SMEM / RG_E)                                         \
        sort_chunks8_##NAME(const T *in, u64 *ws, uint64_t rows, uint64_t r, int desc, uint64_t kout) {  \
        chunks_reg_impl<T>(in, ws, rows, r, desc, kout);                                                 \
    }

SO_REG_KERNEL(f32, float)
SO_REG_KERNEL(f16, __half)
SO_REG_KERNEL(bf16, __nv_bfloat16)
SO_REG_KERNEL(i32, int32_t)

#define SO_KERNELS(NAME, T)                                                                              \
    extern "C" __global__ void __launch_bounds__(SO_THREADS)                                             \
        sort_rows_##NAME(const T *in, T *out, int64_t *out_idx, uint64_t r, uint32_t npad, int desc,     \
                         uint64_t kout) {                                                                \
        rows_impl<T>(in, out, out_idx, r, npad, desc, kout);                                             \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(MG_THREADS)                                             \
        sort_mfinal_##NAME(const typename WordOf<T>::W *src, const uint32_t *part, const T *in, T *out,  \
                           int64_t *out_idx, uint64_t rows, uint64_t r, uint64_t kout, uint64_t run,     \
                           uint64_t pairs, uint64_t tiles) {                                             \
        merge_impl<T, typename WordOf<T>::W, true>(src, nullptr, in, out, out_idx, part, rows, r, kout,  \
                                                   run, pairs, tiles);                                   \
    }

SO_KERNELS(f64, double)
SO_KERNELS(f32, float)
SO_KERNELS(f16, __half)
SO_KERNELS(bf16, __nv_bfloat16)
SO_KERNELS(i32, int32_t)
SO_KERNELS(i64, int64_t)

#define SO_CHUNK_KERNEL(NAME, T)                                                                         \
    extern "C" __global__ void __launch_bounds__(SO_THREADS)                                             \
        sort_chunks_##NAME(const T *in, ulonglong2 *ws, uint64_t rows, uint64_t r, int desc,             \
                           uint64_t kout) {                                                              \
        chunks_impl<T>(in, ws, rows, r, desc, kout);                                                     \
    }

SO_CHUNK_KERNEL(f64, double)
SO_CHUNK_KERNEL(i64, int64_t)

// ---- LSD radix sort of long rows (`sort_rx*`) ----
//
// Whole sorts (and top-k keeping a large share) of rows of RADIX_MIN elements or more: the
// (key, position) pairs of each row are sorted eight bits of the key at a time, least
// significant digit first, each pass stable, so that the result is the stable sort's: the same
// as the merge path's and the CPU twin's. A key of `sizeof(T)` bytes takes `sizeof(T)`
// passes, and a pass whose digit is the same for every element of a row (a count of r in one
// bin: small integers' high bytes, a row of one value) leaves that row as it is.
//
// 1. `sort_rxinit_*`: for each row the OR of its keys and the OR of their complements
//    (`bits`, zeroed first: a byte set in both varies within the row), and the row's digit
//    counts of every pass (`hist`, rows x passes x 256), from one read of the input (keys
//    are u32, or u64 for 64-bit T; nothing is written but the counts).
// 2. `sort_rxplan`: per row and pass, -1 when the pass's byte never varies in the row (the
//    pass would leave it as it is), else flags: RX_SRC (the pass reads buffer 1, else 0),
//    RX_FIRST (the row's first pass: it reads the input, making keys on the fly, and the
//    positions are the identity), RX_LAST (the row's last pass: it writes values and int64
//    indices to the outputs instead of keys and positions); last, RX_LAST when a pass wrote
//    the row's outputs.
// 3. Each pass, one kernel (`sort_rxpass_*`, "one sweep"): a block takes the next tile of
//    RxTile elements in row order (an atomic counter, so a tile's predecessors are already
//    taken by running blocks), ranks its elements stably by digit (warps in order; in a warp,
//    `__match_any_sync` finds the lanes of one digit and the lowest of them adds their number
//    to the warp's counter of that digit with one shared-memory atomic, whose old value is
//    the earlier rounds' count: atomics of one warp to one address take effect in issue
//    order, so no warp barrier separates the rounds), and finds where its run of each digit
//    starts in the row by decoupled look-back: it publishes its digit counts (`status`, rows
//    x tiles x 256 words: the pass, a flag and a count), sums its predecessors' (RX_LOOK at a
//    time) until one that holds an inclusive prefix, and publishes its own inclusive prefix.
//    The row's elements of smaller digits come from `hist`. It then stages the tile in shared
//    memory in digit order and writes each digit's run to its place (consecutive threads,
//    consecutive addresses). A middle pass reads and writes each key and position once; the
//    first reads the input instead, the last writes the outputs (values decoded from the
//    keys: integers always, floats unless the key is of a zero or a NaN, whose sign or
//    payload the key lost: those read the input at their position).
// 4. `sort_rxfinal_*`: rows no pass touched (every key of the row equal) are their own sorted
//    order: the first `kout` values copied, the indices 0, 1, ...
#define RX_THREADS 256
#define RX_WARPS (RX_THREADS / 32)
#define RX_BINS 256
#define RX_SRC 1
#define RX_FIRST 2
#define RX_LAST 4

// Elements a thread ranks in a pass (20 for 32-bit keys, 16 for 64-bit ones: two blocks an
// SM, 128 registers a thread), and a tile's elements.
template <typename K> struct RxTile {
    static constexpr int ITEMS = sizeof(K) == 4 ? 20 : 16;
    static constexpr uint32_t N = RX_THREADS * ITEMS;
};

template <typename T> struct RxKey { typedef uint32_t K; };
template <> struct RxKey<double> { typedef u64 K; };
template <> struct RxKey<int64_t> { typedef u64 K; };

// The value of element `pos` of a row whose key is `k` (inversion undone): decoded from the
// key (a sequential read instead of a gather), but for a float zero or NaN, read from the
// input at `pos` (the key made -0.0 +0.0 and every NaN the canonical one).
template <typename T, typename K> struct RxValue;
template <typename K> struct RxValue<int32_t, K> {
    static __device__ __forceinline__ int32_t of(const int32_t *, K k, uint32_t) {
        return (int32_t)((uint32_t)k ^ 0x80000000u);
    }
};
template <typename K> struct RxValue<int64_t, K> {
    static __device__ __forceinline__ int64_t of(const int64_t *, K k, uint32_t) {
        return (int64_t)((u64)k ^ 0x8000000000000000ull);
    }
};
template <typename K> struct RxValue<float, K> {
    static __device__ __forceinline__ float of(const float *row, K k, uint32_t pos) {
        const uint32_t key = (uint32_t)k;
        const uint32_t b = (key & 0x80000000u) ? (key & 0x7fffffffu) : ~key;
        const uint32_t mag = b & 0x7fffffffu;
        return (mag == 0 || mag > 0x7f800000u) ? row[pos] : __uint_as_float(b);
    }
};
template <typename K> struct RxValue<double, K> {
    static __device__ __forceinline__ double of(const double *row, K k, uint32_t pos) {
        const u64 key = (u64)k;
        const u64 b = (key & 0x8000000000000000ull) ? (key & 0x7fffffffffffffffull) : ~key;
        const u64 mag = b & 0x7fffffffffffffffull;
        return (mag == 0 || mag > 0x7ff0000000000000ull) ? row[pos] : __longlong_as_double((long long)b);
    }
};
template <typename K> struct RxValue<__half, K> {
    static __device__ __forceinline__ __half of(const __half *row, K k, uint32_t pos) {
        const uint32_t key = (uint32_t)k & 0xffffu;
        const uint16_t b = (uint16_t)((key & 0x8000u) ? (key & 0x7fffu) : (~key & 0xffffu));
        const uint16_t mag = b & 0x7fffu;
        return (mag == 0 || mag > 0x7c00u) ? row[pos] : __ushort_as_half(b);
    }
};
template <typename K> struct RxValue<__nv_bfloat16, K> {
    static __device__ __forceinline__ __nv_bfloat16 of(const __nv_bfloat16 *row, K k, uint32_t pos) {
        const uint32_t key = (uint32_t)k & 0xffffu;
        const uint16_t b = (uint16_t)((key & 0x8000u) ? (key & 0x7fffu) : (~key & 0xffffu));
        const uint16_t mag = b & 0x7fffu;
        return (mag == 0 || mag > 0x7f80u) ? row[pos] : __ushort_as_bfloat16(b);
    }
};

// Tiles of the init kernel (its block's share of a row): any size works, the counts are summed.
#define RX_INIT_TILE 4096

template <typename T>
__device__ __forceinline__ void rx_init_impl(const T *in, u64 *bits, uint32_t *hist, uint64_t rows, uint64_t r,
                                             int desc) {
    typedef typename RxKey<T>::K K;
    constexpr int passes = sizeof(T);
    __shared__ u64 s_or[RX_WARPS], s_nor[RX_WARPS];
    __shared__ uint32_t h[passes * RX_BINS];
    const K inv = desc ? (K)width_mask<T>() : (K)0;
    const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int i = threadIdx.x; i < passes * RX_BINS; i += RX_THREADS) h[i] = 0;
    // The block's tiles are consecutive (tiles of a row together); counts go out when the row
    // changes and at the end.
    const uint64_t tiles = (r + RX_INIT_TILE - 1) / RX_INIT_TILE;
    const uint64_t all = rows * tiles, per = (all + gridDim.x - 1) / gridDim.x;
    const uint64_t first = blockIdx.x * per, last = min(all, first + per);
    u64 o = 0, no = 0;
    __syncthreads();
    for (uint64_t t = first; t < last; t++) {
        const uint64_t row = t / tiles, start = (t % tiles) * RX_INIT_TILE;
        const uint32_t n = (uint32_t)min((uint64_t)RX_INIT_TILE, r - start);
        const uint64_t at = row * r + start;
        for (uint32_t i = threadIdx.x; i < n; i += RX_THREADS) {
            const K k = (K)Key<T>::to(in[at + i]) ^ inv;
            o |= (u64)k;
            no |= (u64)(K)~k;
#pragma unroll
            for (int p = 0; p < passes; p++) atomicAdd(&h[p * RX_BINS + (uint32_t)((k >> (8 * p)) & 0xff)], 1u);
        }
        if (t + 1 == last || (t + 1) / tiles != row) {
#pragma unroll
            for (uint32_t d = 16; d > 0; d >>= 1) {
                o |= __shfl_xor_sync(0xffffffffu, o, d);
                no |= __shfl_xor_sync(0xffffffffu, no, d);
            }
            if (lane == 0) {
                s_or[warp] = o;
                s_nor[warp] = no;
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                for (int w = 1; w < RX_WARPS; w++) {
                    o |= s_or[w];
                    no |= s_nor[w];
                }
                atomicOr(&bits[2 * row], o);
                atomicOr(&bits[2 * row + 1], no);
            }
            for (int i = threadIdx.x; i < passes * RX_BINS; i += RX_THREADS) {
                const uint32_t c = h[i];
                if (c) atomicAdd(&hist[row * passes * RX_BINS + i], c);
                h[i] = 0;
            }
            o = 0;
            no = 0;
            __syncthreads();
        }
    }
}

// One thread a row: a pass whose byte of the key is the same in every element of the row (no
// bit of it both set in one key and clear in another) leaves the row as it is.
extern "C" __global__ void sort_rxplan(const u64 *bits, int32_t *plan, uint64_t rows, int passes) {
    const uint64_t row = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const u64 varies = bits[2 * row] & bits[2 * row + 1];
    int32_t *pl = plan + row * (passes + 1);
    int src = 0, last = -1;
    for (int p = 0; p < passes; p++) {
        const bool skip = ((varies >> (8 * p)) & 0xff) == 0;
        pl[p] = skip ? -1 : (src | (last < 0 ? RX_FIRST : 0));
        if (!skip) {
            src ^= 1;
            last = p;
        }
    }
    if (last >= 0) pl[last] |= RX_LAST;
    pl[passes] = last >= 0 ? RX_LAST : 0;
}

// Exclusive sum of the RX_BINS values `v` of a block of RX_BINS threads (thread i's), through
// `s` (RX_WARPS words); ends after a barrier.
__device__ __forceinline__ uint32_t rx_block_exclusive(uint32_t v, uint32_t *s) {
    const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    uint32_t x = v;
#pragma unroll
    for (uint32_t o = 1; o < 32; o <<= 1) {
        const uint32_t y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) s[warp] = x;
    __syncthreads();
    uint32_t before = 0;
    for (uint32_t w = 0; w < warp; w++) before += s[w];
    __syncthreads();
    return before + x - v;
}

// A look-back word: the pass + 1 (bits 56..63; words of other passes, or zeroed, are not yet
// written), RX_PREFIX when the count includes every earlier tile of the row, and the count.
#define RX_PREFIX (1ull << 55)
#define RX_COUNT ((1ull << 55) - 1)
// Predecessors a look-back loads at once (8 and 32 measured slower).
#define RX_LOOK 16

__device__ __forceinline__ u64 rx_load(const u64 *p) { return *(const volatile u64 *)p; }
__device__ __forceinline__ void rx_store(u64 *p, u64 v) { *(volatile u64 *)p = v; }

// The tile staged in shared memory in digit order: (key, position) pairs, one 8-byte word
// each for keys of 32 bits, keys and positions in two arrays for 64-bit keys.
template <typename K, int N> struct RxStage {
    uint2 *w;
    __device__ __forceinline__ void put(uint32_t at, K k, uint32_t pos) { w[at] = make_uint2((uint32_t)k, pos); }
    __device__ __forceinline__ void get(uint32_t i, K &k, uint32_t &pos) const {
        const uint2 v = w[i];
        k = (K)v.x;
        pos = v.y;
    }
    static constexpr uint32_t BYTES = N * 8;
};
template <int N> struct RxStage<u64, N> {
    u64 *w;
    __device__ __forceinline__ void put(uint32_t at, u64 k, uint32_t pos) {
        w[at] = k;
        reinterpret_cast<uint32_t *>(w + N)[at] = pos;
    }
    __device__ __forceinline__ void get(uint32_t i, u64 &k, uint32_t &pos) const {
        k = w[i];
        pos = reinterpret_cast<const uint32_t *>(w + N)[i];
    }
    static constexpr uint32_t BYTES = N * 12;
};

// The sum of the counts of the tiles before `tile` (`st` points at tile 0's word of one
// digit): windows of LOOK predecessors loaded together, summed nearest first until an
// inclusive prefix; a word not yet written is loaded again with the next window. Tile 0
// always holds a prefix, so the walk ends there at the latest.
template <int LOOK> __device__ __forceinline__ u64 rx_look_back(const u64 *st, uint64_t tile, u64 epoch) {
    u64 prefix = 0;
    int64_t j = (int64_t)tile - 1;
    for (;;) {
        u64 w[LOOK];
#pragma unroll
        for (int i = 0; i < LOOK; i++) w[i] = j - i >= 0 ? rx_load(st + (j - i) * RX_BINS) : 0;
        bool done = false;
        int used = 0;
#pragma unroll
        for (int i = 0; i < LOOK; i++) {
            if (done || used < i || (w[i] & ~(RX_PREFIX | RX_COUNT)) != epoch) continue;
            prefix += w[i] & RX_COUNT;
            used = i + 1;
            done = (w[i] & RX_PREFIX) != 0;
        }
        if (done) return prefix;
        j -= used;
    }
}

// One pass over tiles of RX_THREADS * IT elements. Shared memory (dynamic): the staged tile,
// per-warp digit counts (then each warp's first place of each digit in the staged tile),
// each digit's row offset less its first place in the tile, a block sum and the tile
// number.
template <typename T>
__device__ __forceinline__ void rx_pass_impl(const T *in, typename RxKey<T>::K *k0, typename RxKey<T>::K *k1,
                                             uint32_t *p0, uint32_t *p1, const int32_t *plan,
                                             const uint32_t *hist, u64 *status, uint32_t *counter, T *out,
                                             int64_t *out_idx, uint64_t rows, uint64_t r, uint64_t tiles,
                                             uint64_t kout, int passes, int p, int desc) {
    typedef typename RxKey<T>::K K;
    constexpr int IT = RxTile<K>::ITEMS;
    constexpr uint32_t N = RxTile<K>::N;
    extern __shared__ uint4 rx_smem[];
    RxStage<K, N> stage{reinterpret_cast<decltype(RxStage<K, N>::w)>(rx_smem)};
    int64_t *gdiff = reinterpret_cast<int64_t *>(reinterpret_cast<char *>(rx_smem) + RxStage<K, N>::BYTES);
    uint32_t *cnt = reinterpret_cast<uint32_t *>(gdiff + RX_BINS);  // [RX_WARPS][RX_BINS]
    uint32_t *s = cnt + RX_WARPS * RX_BINS;  // RX_WARPS words for the block sum
    uint32_t *s_tile = s + RX_WARPS;
    const uint32_t tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const uint32_t lt_mask = (1u << lane) - 1;
    const int shift = 8 * p;
    const u64 epoch = (u64)(p + 1) << 56;
    const K inv = desc ? (K)width_mask<T>() : (K)0;
    for (;;) {
        if (tid == 0) *s_tile = atomicAdd(counter + p, 1u);
        __syncthreads();
        const uint64_t t = *s_tile;
        __syncthreads();
        if (t >= rows * tiles) return;
        const uint64_t row = t / tiles, tile = t % tiles, start = tile * N;
        const int pl = plan[row * (passes + 1) + p];
        if (pl < 0) continue;  // the same for the whole block (and every tile of the row)
        const bool first = (pl & RX_FIRST) != 0, last = (pl & RX_LAST) != 0;
        const int src = pl & RX_SRC;
        const uint32_t n = (uint32_t)min((uint64_t)N, r - start);
        const K *sk_in = (src ? k1 : k0) + row * r + start;
        const uint32_t *sp_in = (src ? p1 : p0) + row * r + start;
        const T *x_in = in + row * r + start;
        for (uint32_t d = lane; d < RX_BINS; d += 32) cnt[warp * RX_BINS + d] = 0;
        __syncwarp();
        // Warp w ranks elements w * 32 * IT .. in rounds of 32 consecutive elements, all
        // loaded first (IT loads of each kind in flight).
        K key[IT];
        uint32_t ps[IT], off[IT];
        if (first) {
#pragma unroll
            for (int j = 0; j < IT; j++) {
                const uint32_t i = warp * 32 * IT + j * 32 + lane;
                key[j] = i < n ? (K)Key<T>::to(x_in[i]) ^ inv : (K)0;
                ps[j] = (uint32_t)start + i;
            }
        } else {
#pragma unroll
            for (int j = 0; j < IT; j++) {
                const uint32_t i = warp * 32 * IT + j * 32 + lane;
                key[j] = i < n ? sk_in[i] : (K)0;
                ps[j] = i < n ? sp_in[i] : 0;
            }
        }
#pragma unroll
        for (int j = 0; j < IT; j++) {
            const uint32_t i = warp * 32 * IT + j * 32 + lane;
            const bool valid = i < n;
            const uint32_t d = (uint32_t)((key[j] >> shift) & 0xff);
            // The lanes of digit d: eight ballots, one a bit of the digit (`__match_any_sync`
            // measured slower).
            uint32_t peers = __ballot_sync(0xffffffffu, valid);
#pragma unroll
            for (int b = 0; b < 8; b++) {
                const uint32_t vb = __ballot_sync(0xffffffffu, (d >> b) & 1);
                peers &= ((d >> b) & 1) ? vb : ~vb;
            }
            if (!valid) peers = 1u << lane;
            const uint32_t leader = __ffs(peers) - 1;
            uint32_t before = 0;
            if (lane == leader && valid) before = atomicAdd(&cnt[warp * RX_BINS + d], __popc(peers));
            off[j] = __shfl_sync(0xffffffffu, before, leader) + __popc(peers & lt_mask);
        }
        __syncthreads();
        // Thread d: digit d's count in each warp, and in the tile.
        uint32_t total = 0;
#pragma unroll
        for (int w = 0; w < RX_WARPS; w++) total += cnt[w * RX_BINS + tid];
        // The tile's counts go out at once (tile 0's as the row's inclusive prefix); the
        // look-back for them comes last, after the tile is staged, so that its loads have the
        // registers the keys held.
        u64 *st = status + row * tiles * RX_BINS + tid;
        rx_store(st + tile * RX_BINS, epoch | (tile == 0 ? RX_PREFIX : 0) | total);
        // The row's elements of smaller digits, and digit d's first place in the tile; each
        // warp's first place of digit d follows.
        const uint32_t below = rx_block_exclusive(hist[(row * passes + p) * RX_BINS + tid], s);
        const uint32_t tstart = rx_block_exclusive(total, s);
        uint32_t at_w = tstart;
#pragma unroll
        for (int w = 0; w < RX_WARPS; w++) {
            const uint32_t c = cnt[w * RX_BINS + tid];
            cnt[w * RX_BINS + tid] = at_w;
            at_w += c;
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < IT; j++) {
            const uint32_t i = warp * 32 * IT + j * 32 + lane;
            if (i < n) {
                const uint32_t d = (uint32_t)((key[j] >> shift) & 0xff);
                stage.put(cnt[warp * RX_BINS + d] + off[j], key[j], ps[j]);
            }
        }
        // Decoupled look-back: digit `tid`'s elements in the row's tiles before this one.
        u64 prefix = 0;
        if (tile > 0) {
            prefix = rx_look_back<RX_LOOK>(st, tile, epoch);
            rx_store(st + tile * RX_BINS, epoch | RX_PREFIX | (prefix + total));
        }
        gdiff[tid] = (int64_t)(below + prefix) - (int64_t)tstart;
        __syncthreads();
        if (last) {
            const T *x_row = in + row * r;
            T *o = out + row * kout;
            int64_t *oi = out_idx + row * kout;
            for (uint32_t i = tid; i < n; i += RX_THREADS) {
                K k;
                uint32_t ps1;
                stage.get(i, k, ps1);
                const uint64_t at = (uint64_t)(gdiff[(uint32_t)((k >> shift) & 0xff)] + i);
                if (at < kout) {
                    o[at] = RxValue<T, K>::of(x_row, k ^ inv, ps1);
                    oi[at] = ps1;
                }
            }
        } else {
            K *dk = (src ? k0 : k1) + row * r;
            uint32_t *dp = (src ? p0 : p1) + row * r;
            for (uint32_t i = tid; i < n; i += RX_THREADS) {
                K k;
                uint32_t ps1;
                stage.get(i, k, ps1);
                const uint64_t at = (uint64_t)(gdiff[(uint32_t)((k >> shift) & 0xff)] + i);
                dk[at] = k;
                dp[at] = ps1;
            }
        }
        __syncthreads();
    }
}

// Rows no pass touched: every key equal, so the stable order is the input's.
template <typename T>
__device__ __forceinline__ void rx_final_impl(const T *in, const int32_t *plan, T *out, int64_t *out_idx,
                                              uint64_t rows, uint64_t r, uint64_t kout) {
    const int passes = sizeof(T);
    const uint64_t all = rows * kout, stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; e < all; e += stride) {
        const uint64_t row = e / kout, i = e % kout;
        if (plan[row * (passes + 1) + passes] != 0) continue;
        out[e] = in[row * r + i];
        out_idx[e] = (int64_t)i;
    }
}

#define RX_KERNELS(NAME, T)                                                                              \
    extern "C" __global__ void __launch_bounds__(RX_THREADS)                                             \
        sort_rxinit_##NAME(const T *in, u64 *bits, uint32_t *hist, uint64_t rows, uint64_t r, int desc) { \
        rx_init_impl<T>(in, bits, hist, rows, r, desc);                                                  \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(RX_THREADS, 2) sort_rxpass_##NAME(                      \
        const T *in, typename RxKey<T>::K *k0, typename RxKey<T>::K *k1, uint32_t *p0, uint32_t *p1,     \
        const int32_t *plan, const uint32_t *hist, u64 *status, uint32_t *counter, T *out,               \
        int64_t *out_idx, uint64_t rows, uint64_t r, uint64_t tiles, uint64_t kout, int passes, int p,   \
        int desc) {                                                                                      \
        rx_pass_impl<T>(in, k0, k1, p0, p1, plan, hist, status, counter, out, out_idx, rows, r, tiles,   \
                        kout, passes, p, desc);                                                          \
    }                                                                                                    \
    extern "C" __global__ void sort_rxfinal_##NAME(const T *in, const int32_t *plan, T *out,             \
                                                   int64_t *out_idx, uint64_t rows, uint64_t r,          \
                                                   uint64_t kout) {                                      \
        rx_final_impl<T>(in, plan, out, out_idx, rows, r, kout);                                         \
    }

RX_KERNELS(f64, double)
RX_KERNELS(f32, float)
RX_KERNELS(f16, __half)
RX_KERNELS(bf16, __nv_bfloat16)
RX_KERNELS(i32, int32_t)
RX_KERNELS(i64, int64_t)
