// Copy kernels of Genesis: strided copies, a tiled 2-D transpose, triangles (tril / triu) and
// dtype casts.
//
// The CPU twins are in crates/genesis-kernels/src/cpu.rs (`strided_copy`, `cast`).
//
// * strided_copy_e{1,2,4,8}: dst[layout_dst(i)] = src[layout_src(i)] for i < n, where both
//   layouts are given by a GxStrided descriptor (up to GX_MAX_DIMS dimensions, strides in
//   elements). Copies move bytes, so the kernels are per element size, not per dtype; the
//   launcher widens elements to 16 bytes (e16) when rows are contiguous and aligned on both
//   sides, so a copy into a slice of rows (`cat` along an inner dimension) moves 16 bytes an
//   access. strided_copy32_rows_e{1,2,4,8}: the same copy, a thread a run of 16 bytes' worth of
//   innermost elements. strided_copy_rev_e{1,2,4,8}: rows read backwards (`flip`) in 16-byte vectors,
//   each vector's elements reversed.
// * transpose_e{1,2,4,8}: out[c * rows + r] = in[r * ld_in + c] for a rows x cols matrix
//   (batched over gridDim.z with batch strides), through 32 x 32 shared-memory tiles.
// * cast_<src>_<dst>: elementwise conversion of n contiguous elements. Semantics (the twin's):
//   float -> integer truncates toward zero, saturates at the target's range, NaN -> 0;
//   integer -> integer wraps (two's complement); anything -> bool is `x != 0`; bool -> x is 0/1;
//   -> f16 / bf16 rounds to nearest-even through f32 (exact: f32 carries more than 2p + 2 bits);
//   f64 -> f16 / bf16 goes through f32 with round-to-odd, which makes it correctly rounded too.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define GX_MAX_DIMS 8

struct GxStrided {
    int64_t shape[GX_MAX_DIMS];
    int64_t src_strides[GX_MAX_DIMS];
    int64_t dst_strides[GX_MAX_DIMS];
    int64_t src_offset;
    int64_t dst_offset;
    int32_t rank;
    int32_t pad;
};

// The value written for the value read: itself, or (`Reverse16`) a 16-byte vector with its
// S-byte elements in reverse order.
struct Same {
    template <typename T> __device__ __forceinline__ T operator()(T v) const { return v; }
};
template <int S> struct Reverse16;
template <> struct Reverse16<8> {
    __device__ __forceinline__ uint4 operator()(uint4 v) const { return make_uint4(v.z, v.w, v.x, v.y); }
};
template <> struct Reverse16<4> {
    __device__ __forceinline__ uint4 operator()(uint4 v) const { return make_uint4(v.w, v.z, v.y, v.x); }
};
template <> struct Reverse16<2> {
    __device__ __forceinline__ uint4 operator()(uint4 v) const {
        return make_uint4(__byte_perm(v.w, 0, 0x1032), __byte_perm(v.z, 0, 0x1032), __byte_perm(v.y, 0, 0x1032),
                          __byte_perm(v.x, 0, 0x1032));
    }
};
template <> struct Reverse16<1> {
    __device__ __forceinline__ uint4 operator()(uint4 v) const {
        return make_uint4(__byte_perm(v.w, 0, 0x0123), __byte_perm(v.z, 0, 0x0123), __byte_perm(v.y, 0, 0x0123),
                          __byte_perm(v.x, 0, 0x0123));
    }
};

template <typename T, typename F = Same>
__device__ __forceinline__ void strided_copy_impl(const T *src, T *dst, uint64_t n, const GxStrided &d) {
    const F f;
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        uint64_t rem = i;
        int64_t so = d.src_offset, doff = d.dst_offset;
        for (int k = d.rank - 1; k >= 0; --k) {
            const uint64_t sz = (uint64_t)d.shape[k];
            const uint64_t idx = rem % sz;
            rem /= sz;
            so += (int64_t)idx * d.src_strides[k];
            doff += (int64_t)idx * d.dst_strides[k];
        }
        dst[doff] = f(src[so]);
    }
}

// The same with 32-bit indices and division by multiplication (n < 2^31): each dimension's
// size d has a magic number m and shift s with n / d == (umulhi(n, m) + n) >> s.
struct GxStrided32 {
    uint32_t size[GX_MAX_DIMS];
    uint32_t magic[GX_MAX_DIMS];
    uint32_t shift[GX_MAX_DIMS];
    int64_t src_strides[GX_MAX_DIMS];
    int64_t dst_strides[GX_MAX_DIMS];
    int64_t src_offset;
    int64_t dst_offset;
    int32_t rank;
    int32_t pad;
};

template <typename T, typename F = Same>
__device__ __forceinline__ void strided_copy32_impl(const T *src, T *dst, uint32_t n, const GxStrided32 &d) {
    const F f;
    const uint32_t stride = gridDim.x * blockDim.x;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        uint32_t rem = i;
        int64_t so = d.src_offset, doff = d.dst_offset;
        for (int k = d.rank - 1; k >= 0; --k) {
            const uint32_t q = (__umulhi(rem, d.magic[k]) + rem) >> d.shift[k];
            const uint32_t idx = rem - q * d.size[k];
            rem = q;
            so += (int64_t)idx * d.src_strides[k];
            doff += (int64_t)idx * d.dst_strides[k];
        }
        dst[doff] = f(src[so]);
    }
}

// The same copy a run at a time: a thread copies V = 16 / sizeof(T) consecutive elements of the
// innermost dimension (`chunks` runs a row, the last one possibly short), so the outer
// dimensions are decomposed once per run rather than per element (a copy whose innermost
// dimension is not contiguous on both sides, which `widened` cannot turn into 16-byte
// elements: a permutation, the windows of an image). With `vec` (the destination's innermost
// stride 1 and every whole run 16-byte aligned, checked by the launcher) a run is stored as one
// 16-byte vector. Needs rows * chunks < 2^31 (the magic division of the run index).
template <typename T>
__device__ __forceinline__ void strided_copy32_rows_impl(const T *src, T *dst, uint32_t items, const GxStrided32 &d,
                                                         uint32_t chunks, uint32_t cmagic, uint32_t cshift, int vec) {
    constexpr int V = 16 / sizeof(T);
    const int ik = d.rank - 1;
    const uint32_t inner = d.size[ik];
    const int64_t ss = d.src_strides[ik], ds = d.dst_strides[ik];
    const uint32_t stride = gridDim.x * blockDim.x;
    for (uint32_t it = blockIdx.x * blockDim.x + threadIdx.x; it < items; it += stride) {
        uint32_t row = (__umulhi(it, cmagic) + it) >> cshift;
        const uint32_t k0 = (it - row * chunks) * V;
        int64_t so = d.src_offset, doff = d.dst_offset;
        for (int k = ik - 1; k >= 0; --k) {
            const uint32_t q = (__umulhi(row, d.magic[k]) + row) >> d.shift[k];
            const uint32_t idx = row - q * d.size[k];
            row = q;
            so += (int64_t)idx * d.src_strides[k];
            doff += (int64_t)idx * d.dst_strides[k];
        }
        so += (int64_t)k0 * ss;
        doff += (int64_t)k0 * ds;
        if (vec && k0 + V <= inner) {
            union {
                T e[V];
                uint4 v;
            } u;
#pragma unroll
            for (int e = 0; e < V; ++e) u.e[e] = src[so + e * ss];
            *reinterpret_cast<uint4 *>(dst + doff) = u.v;
        } else {
#pragma unroll
            for (int e = 0; e < V; ++e)
                if (k0 + e < inner) dst[doff + e * ds] = src[so + e * ss];
        }
    }
}

#define GX_COPY_ROWS(E, T)                                                                        \
    extern "C" __global__ void strided_copy32_rows_e##E(const T *src, T *dst, uint32_t items,      \
                                                        GxStrided32 d, uint32_t chunks,            \
                                                        uint32_t cmagic, uint32_t cshift, int vec) { \
        strided_copy32_rows_impl<T>(src, dst, items, d, chunks, cmagic, cshift, vec);              \
    }

GX_COPY_ROWS(1, uint8_t)
GX_COPY_ROWS(2, uint16_t)
GX_COPY_ROWS(4, uint32_t)
GX_COPY_ROWS(8, uint64_t)

#define GX_TILE 32
#define GX_ROWS 8

template <typename T>
__device__ __forceinline__ void transpose_impl(const T *in, T *out, int64_t rows, int64_t cols, int64_t ld_in,
                                               int64_t batch_in, int64_t batch_out) {
    __shared__ T tile[GX_TILE][GX_TILE + 1];
    in += (int64_t)blockIdx.z * batch_in;
    out += (int64_t)blockIdx.z * batch_out;
    const int64_t c0 = (int64_t)blockIdx.x * GX_TILE, r0 = (int64_t)blockIdx.y * GX_TILE;
#pragma unroll
    for (int j = 0; j < GX_TILE; j += GX_ROWS) {
        const int64_t r = r0 + threadIdx.y + j, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[threadIdx.y + j][threadIdx.x] = in[r * ld_in + c];
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < GX_TILE; j += GX_ROWS) {
        const int64_t c = c0 + threadIdx.y + j, r = r0 + threadIdx.x;
        if (r < rows && c < cols) out[c * rows + r] = tile[threadIdx.x][threadIdx.y + j];
    }
}

#define GX_COPY(E, T)                                                                            \
    extern "C" __global__ void strided_copy_e##E(const T *src, T *dst, uint64_t n, GxStrided d) { \
        strided_copy_impl<T>(src, dst, n, d);                                                     \
    }                                                                                             \
    extern "C" __global__ void strided_copy32_e##E(const T *src, T *dst, uint32_t n, GxStrided32 d) { \
        strided_copy32_impl<T>(src, dst, n, d);                                                   \
    }                                                                                             \
    extern "C" __global__ void __launch_bounds__(GX_TILE *GX_ROWS)                                \
        transpose_e##E(const T *in, T *out, int64_t rows, int64_t cols, int64_t ld_in,            \
                       int64_t batch_in, int64_t batch_out) {                                     \
        transpose_impl<T>(in, out, rows, cols, ld_in, batch_in, batch_out);                       \
    }

GX_COPY(1, uint8_t)
GX_COPY(2, uint16_t)
GX_COPY(4, uint32_t)
GX_COPY(8, uint64_t)
GX_COPY(16, uint4)

// A copy whose innermost dimension runs backwards through the source (`flip`), in 16-byte
// vectors: the launcher's descriptor walks vectors (source stride -1 innermost), and each
// vector's elements of E bytes are written in reverse order.
#define GX_COPY_REV(E)                                                                           \
    extern "C" __global__ void strided_copy_rev_e##E(const uint4 *src, uint4 *dst, uint64_t n, GxStrided d) { \
        strided_copy_impl<uint4, Reverse16<E>>(src, dst, n, d);                                   \
    }                                                                                             \
    extern "C" __global__ void strided_copy32_rev_e##E(const uint4 *src, uint4 *dst, uint32_t n,  \
                                                       GxStrided32 d) {                           \
        strided_copy32_impl<uint4, Reverse16<E>>(src, dst, n, d);                                 \
    }

GX_COPY_REV(1)
GX_COPY_REV(2)
GX_COPY_REV(4)
GX_COPY_REV(8)

// ---- triangles --------------------------------------------------------------------------------
// tril / triu of a contiguous [batch, rows, cols] array, by element size: element (b, i, j) is
// kept when j - i <= k (lower) or j - i >= k (upper), else its bits are zeroed (0, +0.0, false
// in every dtype). With `vec` (cols a multiple of the vector, both pointers 16-byte aligned) a
// thread moves 16 bytes, all in one row: the row and column are found once per vector.
template <typename T> union GxTriVec {
    uint4 raw;
    T v[16 / sizeof(T)];
};
template <typename T>
__device__ __forceinline__ void triangle_impl(const T *src, T *dst, uint64_t n, uint64_t rows, uint64_t cols,
                                              int64_t k, int lower, int vec) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (vec) {
        constexpr int V = 16 / sizeof(T);
        const uint64_t cols_v = cols / V, nvec = n / V;
        const uint4 *s4 = reinterpret_cast<const uint4 *>(src);
        uint4 *d4 = reinterpret_cast<uint4 *>(dst);
        for (uint64_t q = first; q < nvec; q += stride) {
            const uint64_t line = q / cols_v;
            const int64_t j0 = (int64_t)((q - line * cols_v) * V), i = (int64_t)(line % rows);
            GxTriVec<T> x;
            x.raw = s4[q];
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const int64_t d = j0 + e - i;
                if (lower ? d > k : d < k) x.v[e] = 0;
            }
            d4[q] = x.raw;
        }
    } else {
        for (uint64_t q = first; q < n; q += stride) {
            const uint64_t line = q / cols;
            const int64_t d = (int64_t)(q - line * cols) - (int64_t)(line % rows);
            dst[q] = (lower ? d > k : d < k) ? (T)0 : src[q];
        }
    }
}
#define GX_TRIANGLE(E, T)                                                                        \
    extern "C" __global__ void triangle_e##E(const T *src, T *dst, uint64_t n, uint64_t rows,     \
                                             uint64_t cols, int64_t k, int lower, int vec) {      \
        triangle_impl<T>(src, dst, n, rows, cols, k, lower, vec);                                 \
    }
GX_TRIANGLE(1, uint8_t)
GX_TRIANGLE(2, uint16_t)
GX_TRIANGLE(4, uint32_t)
GX_TRIANGLE(8, uint64_t)

// one_hot_i64: out[r * classes + c] = (idx[r] == c) as int64 for rows r < rows, one warp a row
// (grid-stride over rows; a warp's stores cover 256 contiguous bytes). A row whose class lies
// outside [0, classes) writes zeros and puts its position in bad[0] (the smallest such, by
// atomicMin; the caller sets bad[0] to all ones first and reads it back).
extern "C" __global__ void one_hot_i64(const int64_t *idx, uint64_t rows, uint64_t classes,
                                       int64_t *out, unsigned long long *bad) {
    const uint64_t lane = threadIdx.x & 31;
    const uint64_t warps = ((uint64_t)gridDim.x * blockDim.x) >> 5;
    for (uint64_t r = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < rows; r += warps) {
        const int64_t k = idx[r];
        if (lane == 0 && (k < 0 || (uint64_t)k >= classes)) atomicMin(bad, (unsigned long long)r);
        int64_t *o = out + r * classes;
        for (uint64_t c = lane; c < classes; c += 32) o[c] = (int64_t)c == k ? 1 : 0;
    }
}

// ---- casts ----------------------------------------------------------------------------------

typedef bool gx_bool;
typedef uint8_t gx_u8;
typedef int8_t gx_i8;
typedef int16_t gx_i16;
typedef int32_t gx_i32;
typedef int64_t gx_i64;
typedef __half gx_f16;
typedef __nv_bfloat16 gx_bf16;
typedef float gx_f32;
typedef double gx_f64;

// Every source goes through one of three carriers: int64 (integers and bool), float (f16, bf16,
// f32) or double (f64).
template <typename T> struct Src;
template <> struct Src<gx_bool> { typedef int64_t C; static __device__ __forceinline__ int64_t get(gx_bool v) { return v ? 1 : 0; } };
template <> struct Src<gx_u8> { typedef int64_t C; static __device__ __forceinline__ int64_t get(gx_u8 v) { return v; } };
template <> struct Src<gx_i8> { typedef int64_t C; static __device__ __forceinline__ int64_t get(gx_i8 v) { return v; } };
template <> struct Src<gx_i16> { typedef int64_t C; static __device__ __forceinline__ int64_t get(gx_i16 v) { return v; } };
template <> struct Src<gx_i32> { typedef int64_t C; static __device__ __forceinline__ int64_t get(gx_i32 v) { return v; } };
template <> struct Src<gx_i64> { typedef int64_t C; static __device__ __forceinline__ int64_t get(gx_i64 v) { return v; } };
template <> struct Src<gx_f16> { typedef float C; static __device__ __forceinline__ float get(gx_f16 v) { return __half2float(v); } };
template <> struct Src<gx_bf16> { typedef float C; static __device__ __forceinline__ float get(gx_bf16 v) { return __bfloat162float(v); } };
template <> struct Src<gx_f32> { typedef float C; static __device__ __forceinline__ float get(gx_f32 v) { return v; } };
template <> struct Src<gx_f64> { typedef double C; static __device__ __forceinline__ double get(gx_f64 v) { return v; } };

// Float to integer: truncate, saturate, NaN -> 0. `lo` / `hi` are the target's range as the
// carrier type; `hi_excl` is the smallest carrier value above the range (2^k), used so that
// rounding of `hi` to the carrier type cannot let an out-of-range value through.
template <typename I, typename F>
__device__ __forceinline__ I f2i(F x, F lo, F hi_excl, I min, I max) {
    if (x != x) return 0;
    if (x <= lo) return min;
    if (x >= hi_excl) return max;
    return (I)x;
}

// f64 -> f32 with round-to-odd (truncate, then set the last bit if inexact): rounding that to
// f16 / bf16 with nearest-even is correctly rounded (no double-rounding error).
__device__ __forceinline__ float d2f_odd(double x) {
    if (!isfinite(x)) return (float)x;
    float f = __double2float_rz(x);
    if ((double)f != x) f = __int_as_float(__float_as_int(f) | 1);
    return f;
}

template <typename D> struct Dst;
#define GX_INT_DST(T, MIN, MAX, LO, HIX)                                                         \
    template <> struct Dst<T> {                                                                   \
        static __device__ __forceinline__ T from(int64_t v) { return (T)(uint64_t)v; }            \
        static __device__ __forceinline__ T from(float v) { return f2i<T, float>(v, LO, HIX, MIN, MAX); } \
        static __device__ __forceinline__ T from(double v) { return f2i<T, double>(v, LO, HIX, MIN, MAX); } \
    };
GX_INT_DST(gx_u8, 0, 255, 0.0, 256.0)
GX_INT_DST(gx_i8, -128, 127, -128.0, 128.0)
GX_INT_DST(gx_i16, -32768, 32767, -32768.0, 32768.0)
GX_INT_DST(gx_i32, INT32_MIN, INT32_MAX, -2147483648.0, 2147483648.0)
GX_INT_DST(gx_i64, INT64_MIN, INT64_MAX, -9223372036854775808.0, 9223372036854775808.0)
template <> struct Dst<gx_bool> {
    static __device__ __forceinline__ gx_bool from(int64_t v) { return v != 0; }
    static __device__ __forceinline__ gx_bool from(float v) { return v != 0.0f; }
    static __device__ __forceinline__ gx_bool from(double v) { return v != 0.0; }
};
template <> struct Dst<gx_f32> {
    static __device__ __forceinline__ float from(int64_t v) { return __ll2float_rn(v); }
    static __device__ __forceinline__ float from(float v) { return v; }
    static __device__ __forceinline__ float from(double v) { return __double2float_rn(v); }
};
template <> struct Dst<gx_f64> {
    static __device__ __forceinline__ double from(int64_t v) { return __ll2double_rn(v); }
    static __device__ __forceinline__ double from(float v) { return (double)v; }
    static __device__ __forceinline__ double from(double v) { return v; }
};
template <> struct Dst<gx_f16> {
    static __device__ __forceinline__ __half from(int64_t v) { return __float2half_rn(__ll2float_rn(v)); }
    static __device__ __forceinline__ __half from(float v) { return __float2half_rn(v); }
    static __device__ __forceinline__ __half from(double v) { return __float2half_rn(d2f_odd(v)); }
};
template <> struct Dst<gx_bf16> {
    static __device__ __forceinline__ __nv_bfloat16 from(int64_t v) { return __float2bfloat16_rn(__ll2float_rn(v)); }
    static __device__ __forceinline__ __nv_bfloat16 from(float v) { return __float2bfloat16_rn(v); }
    static __device__ __forceinline__ __nv_bfloat16 from(double v) { return __float2bfloat16_rn(d2f_odd(v)); }
};

template <typename T, int N> struct alignas(sizeof(T) * N) GxVec {
    T v[N];
};

// When `vec` is set, both pointers are aligned to 4 elements: each thread converts 4 elements
// with one load and one store; the last n % 4 elements go one by one.
template <typename S, typename D>
__device__ __forceinline__ void cast_impl(const S *src, D *dst, uint64_t n, int vec) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    uint64_t start = 0;
    if (vec) {
        const uint64_t nv = n / 4;
        const GxVec<S, 4> *s4 = reinterpret_cast<const GxVec<S, 4> *>(src);
        GxVec<D, 4> *d4 = reinterpret_cast<GxVec<D, 4> *>(dst);
        for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += stride) {
            GxVec<S, 4> a = s4[i];
            GxVec<D, 4> b;
#pragma unroll
            for (int k = 0; k < 4; ++k) b.v[k] = Dst<D>::from(Src<S>::get(a.v[k]));
            d4[i] = b;
        }
        start = nv * 4;
    }
    for (uint64_t i = start + (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = Dst<D>::from(Src<S>::get(src[i]));
}

#define GX_CAST(S, D)                                                                          \
    extern "C" __global__ void cast_##S##_##D(const gx_##S *src, gx_##D *dst, uint64_t n, int vec) { \
        cast_impl<gx_##S, gx_##D>(src, dst, n, vec);                                            \
    }
#define GX_CAST_FROM(S)                                                                        \
    GX_CAST(S, bool) GX_CAST(S, u8) GX_CAST(S, i8) GX_CAST(S, i16) GX_CAST(S, i32) GX_CAST(S, i64) \
    GX_CAST(S, f16) GX_CAST(S, bf16) GX_CAST(S, f32) GX_CAST(S, f64)

GX_CAST_FROM(bool)
GX_CAST_FROM(u8)
GX_CAST_FROM(i8)
GX_CAST_FROM(i16)
GX_CAST_FROM(i32)
GX_CAST_FROM(i64)
GX_CAST_FROM(f16)
GX_CAST_FROM(bf16)
GX_CAST_FROM(f32)
GX_CAST_FROM(f64)
