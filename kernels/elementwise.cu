// Elementwise kernels of Genesis.
//
// What is here:
//   * `<op>_<T>`: the binary ops (add, sub, mul, maximum, minimum, pow, floor_divide,
//     trunc_divide, remainder, fmod for f64, f32, f16, bf16, i32, i64; div for the float
//     types, and atan2, hypot; bitwise_and/or/xor for i32, i64) over contiguous operands of
//     equal length.
//   * `<op>_nd_<T>`: the same ops over operands read in place through their layouts: each
//     operand has a stride per output dimension (0 for a broadcast dimension, any other value
//     for a strided view), and the right operand may instead be a scalar kernel argument. The
//     output is contiguous. So `x + bias` and `x + 1.0` read each input element once and write
//     each output element once, with no materialised temporary.
//   * `<op>_<T>` unary ops (GX_UNARY_OPS: neg, abs, relu, square, sign and the roundings for
//     every type; exp, log, erf, gelu, ... for the floats, f64 included), `clamp_<T>` (scalar bounds), `fill`, the comparisons to bool
//     bytes, `where` selection by element size, and `tape`, which runs a batch of small
//     operations in one launch.
//   * `<cmp>_nd_<T>` and `where_nd_e<N>`: comparisons and `where` with every operand read in
//     place through its layout (broadcast or strided), a scalar operand passed as an argument.
//
// Arithmetic (the CPU twins in crates/genesis-kernels/src/element.rs give the same bits):
//   * f64 is computed in f64 (the _rn intrinsics: IEEE, never contracted into an FMA).
//   * f16 / bf16 are computed in f32 and rounded to nearest-even once. For +, -, *, / this is
//     the correctly rounded half-precision result (f32 has more than 2p+2 bits for both).
//   * integers wrap on overflow (two's complement), done in unsigned arithmetic. Integer pow is
//     exponentiation by squaring in the unsigned type: the bits of repeated wrapping
//     multiplication. A negative exponent gives 0, but 1 for a base of 1 and +-1 for a base of
//     -1 (PyTorch's integer pow).
//   * maximum/minimum propagate NaN (like torch.maximum).
//
// Launch contract (src/gpu.rs): one-dimensional blocks of GX_THREADS threads. The contiguous
// kernels, when `vec_ok` is non-zero (every pointer 16-byte aligned), move 16 bytes a load and
// store; the last n % (16 / sizeof(T)) elements are done one by one. Each block handles tiles
// of GX_THREADS * GX_UNROLL vectors and strides over the tiles by gridDim.x, so any grid size
// >= 1 covers every element; several independent 16-byte loads in flight per thread hide the
// memory latency.
//
// The `_nd` kernels take a `GxBinaryNd` descriptor: the output's dimensions (after the
// launcher merged every pair of adjacent dimensions that both operands walk contiguously, and
// dropped dimensions of size 1), each with the magic number and shift that turn division into a
// multiply-high (n < 2^31), and each operand's strides. An output position is split into
// coordinates once per element, or, when `vec` is set, once per group of 16 bytes: the
// innermost size is then a multiple of the group, each operand's innermost stride is 0 (one
// value broadcast over the group) or 1 (one aligned 16-byte load), so a broadcast add runs at
// the speed of the contiguous one. A launch whose operands are both contiguous after merging
// (rank 1, innermost strides 1, or a scalar right operand) skips the coordinate split
// altogether: `x + 1.0` is then the contiguous kernel with one stream fewer to read.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define GX_THREADS 256
#define GX_UNROLL 4
// Unary kernels: one vector a thread per tile (the transcendental ops have enough arithmetic
// per load to hide the latency with fewer loads in flight; `gpu_elementwise` times the
// variants).
#define GX_UNARY_UNROLL 1

template <typename S> struct Unsigned;
template <> struct Unsigned<int32_t> { typedef uint32_t T; };
template <> struct Unsigned<int64_t> { typedef uint64_t T; };

// Binary operations. Floats: f32 arithmetic with the _rn intrinsics (never contracted into an
// FMA); f16/bf16 are widened to f32, computed once and rounded to nearest-even, which is the
// correctly rounded result for +, -, *, / (f32 has at least 2p+2 bits for both formats).
// maximum/minimum propagate NaN (like torch.maximum). Integers wrap (unsigned arithmetic).
struct OpAdd {
    static __device__ __forceinline__ float f(float x, float y) { return __fadd_rn(x, y); }
    static __device__ __forceinline__ double f(double x, double y) { return __dadd_rn(x, y); }
    template <typename U> static __device__ __forceinline__ U u(U x, U y) { return x + y; }
};
struct OpSub {
    static __device__ __forceinline__ float f(float x, float y) { return __fsub_rn(x, y); }
    static __device__ __forceinline__ double f(double x, double y) { return __dsub_rn(x, y); }
    template <typename U> static __device__ __forceinline__ U u(U x, U y) { return x - y; }
};
struct OpMul {
    static __device__ __forceinline__ float f(float x, float y) { return __fmul_rn(x, y); }
    static __device__ __forceinline__ double f(double x, double y) { return __dmul_rn(x, y); }
    template <typename U> static __device__ __forceinline__ U u(U x, U y) { return x * y; }
};
struct OpDiv {
    static __device__ __forceinline__ float f(float x, float y) { return __fdiv_rn(x, y); }
    static __device__ __forceinline__ double f(double x, double y) { return __ddiv_rn(x, y); }
};
struct OpPow {
    static __device__ __forceinline__ float f(float x, float y) { return powf(x, y); }
    static __device__ __forceinline__ double f(double x, double y) { return pow(x, y); }
};
struct OpMax {
    static __device__ __forceinline__ float f(float x, float y) {
        return x != x ? x : (y != y ? y : (x > y ? x : y));
    }
    static __device__ __forceinline__ double f(double x, double y) {
        return x != x ? x : (y != y ? y : (x > y ? x : y));
    }
    template <typename S> static __device__ __forceinline__ S s(S x, S y) { return x > y ? x : y; }
};
struct OpMin {
    static __device__ __forceinline__ float f(float x, float y) {
        return x != x ? x : (y != y ? y : (x < y ? x : y));
    }
    static __device__ __forceinline__ double f(double x, double y) {
        return x != x ? x : (y != y ? y : (x < y ? x : y));
    }
    template <typename S> static __device__ __forceinline__ S s(S x, S y) { return x < y ? x : y; }
};

// Floor and truncating division, remainder and fmod, as PyTorch's (c10's div_floor_floating,
// div_floor_integer, remainder and fmod kernels): floats computed in the operands' float type
// (f16/bf16 in f32, rounded once), every step exact or one IEEE operation, so the CPU twins in
// src/element.rs give the same bits; integers in the signed type, `MIN / -1` wrapping to
// `MIN` (a zero divisor gives 0: the facade refuses it first, as PyTorch's CPU).
__device__ __forceinline__ float gx_div(float x, float y) { return __fdiv_rn(x, y); }
__device__ __forceinline__ double gx_div(double x, double y) { return __ddiv_rn(x, y); }
__device__ __forceinline__ float gx_sub(float x, float y) { return __fsub_rn(x, y); }
__device__ __forceinline__ double gx_sub(double x, double y) { return __dsub_rn(x, y); }
__device__ __forceinline__ float gx_add(float x, float y) { return __fadd_rn(x, y); }
__device__ __forceinline__ double gx_add(double x, double y) { return __dadd_rn(x, y); }
struct OpFloorDiv {
    template <typename F> static __device__ __forceinline__ F g(F x, F y) {
        if (y == (F)0) return gx_div(x, y);
        const F m = fmod(x, y);
        F d = gx_div(gx_sub(x, m), y);
        if (m != (F)0 && ((y < (F)0) != (m < (F)0))) d = gx_sub(d, (F)1);
        if (d == (F)0) return copysign((F)0, gx_div(x, y));
        const F f = floor(d);
        return gx_sub(d, f) > (F)0.5 ? gx_add(f, (F)1) : f;
    }
    static __device__ __forceinline__ float f(float x, float y) { return g<float>(x, y); }
    static __device__ __forceinline__ double f(double x, double y) { return g<double>(x, y); }
    template <typename S> static __device__ __forceinline__ S s(S x, S y) {
        if (y == 0) return 0;
        if (y == -1) return (S)(0 - (typename Unsigned<S>::T)x);
        const S q = x / y, r = x % y;
        return (r != 0 && ((x < 0) != (y < 0))) ? (S)(q - 1) : q;
    }
};
struct OpTruncDiv {
    static __device__ __forceinline__ float f(float x, float y) { return truncf(__fdiv_rn(x, y)); }
    static __device__ __forceinline__ double f(double x, double y) { return trunc(__ddiv_rn(x, y)); }
    template <typename S> static __device__ __forceinline__ S s(S x, S y) {
        if (y == 0) return 0;
        if (y == -1) return (S)(0 - (typename Unsigned<S>::T)x);
        return x / y;
    }
};
struct OpRem {
    template <typename F> static __device__ __forceinline__ F g(F x, F y) {
        const F m = fmod(x, y);
        return (m != (F)0 && ((y < (F)0) != (m < (F)0))) ? gx_add(m, y) : m;
    }
    static __device__ __forceinline__ float f(float x, float y) { return g<float>(x, y); }
    static __device__ __forceinline__ double f(double x, double y) { return g<double>(x, y); }
    template <typename S> static __device__ __forceinline__ S s(S x, S y) {
        if (y == 0 || y == -1) return 0;
        const S r = x % y;
        return (r != 0 && ((r < 0) != (y < 0))) ? (S)(r + y) : r;
    }
};
struct OpFmod {
    static __device__ __forceinline__ float f(float x, float y) { return fmodf(x, y); }
    static __device__ __forceinline__ double f(double x, double y) { return fmod(x, y); }
    template <typename S> static __device__ __forceinline__ S s(S x, S y) {
        if (y == 0 || y == -1) return 0;
        return x % y;
    }
};
// atan2 and hypot: CUDA's (atan2f 2 ulp, hypotf 3 ulp; the CPU twins' within 1), so the twins
// agree within 4 ulp of the result type, as pow's.
struct OpAtan2 {
    static __device__ __forceinline__ float f(float x, float y) { return atan2f(x, y); }
    static __device__ __forceinline__ double f(double x, double y) { return atan2(x, y); }
};
struct OpHypot {
    static __device__ __forceinline__ float f(float x, float y) { return hypotf(x, y); }
    static __device__ __forceinline__ double f(double x, double y) { return hypot(x, y); }
};
struct OpAnd {
    template <typename U> static __device__ __forceinline__ U u(U x, U y) { return x & y; }
};
struct OpOr {
    template <typename U> static __device__ __forceinline__ U u(U x, U y) { return x | y; }
};
struct OpXor {
    template <typename U> static __device__ __forceinline__ U u(U x, U y) { return x ^ y; }
};

template <typename Op, typename T> struct Apply;
template <typename Op> struct Apply<Op, float> {
    static __device__ __forceinline__ float go(float x, float y) { return Op::f(x, y); }
};
template <typename Op> struct Apply<Op, double> {
    static __device__ __forceinline__ double go(double x, double y) { return Op::f(x, y); }
};
template <typename Op> struct Apply<Op, __half> {
    static __device__ __forceinline__ __half go(__half x, __half y) {
        return __float2half_rn(Op::f(__half2float(x), __half2float(y)));
    }
};
template <typename Op> struct Apply<Op, __nv_bfloat16> {
    static __device__ __forceinline__ __nv_bfloat16 go(__nv_bfloat16 x, __nv_bfloat16 y) {
        return __float2bfloat16_rn(Op::f(__bfloat162float(x), __bfloat162float(y)));
    }
};
// Integers: wrapping ops go through the unsigned type, max/min compare signed values.
template <typename Op, typename S, typename U> struct ApplyInt {
    static __device__ __forceinline__ S go(S x, S y) { return (S)Op::template u<U>((U)x, (U)y); }
};
template <typename S, typename U> struct ApplyInt<OpMax, S, U> {
    static __device__ __forceinline__ S go(S x, S y) { return OpMax::s<S>(x, y); }
};
template <typename S, typename U> struct ApplyInt<OpMin, S, U> {
    static __device__ __forceinline__ S go(S x, S y) { return OpMin::s<S>(x, y); }
};
// A truncating division of f16/bf16 rounds the quotient to the type first, then truncates
// (PyTorch's `trunc(a / b)` in the operands' type): exact after the rounding.
template <> struct Apply<OpTruncDiv, __half> {
    static __device__ __forceinline__ __half go(__half x, __half y) {
        const __half q = __float2half_rn(__fdiv_rn(__half2float(x), __half2float(y)));
        return __float2half_rn(truncf(__half2float(q)));
    }
};
template <> struct Apply<OpTruncDiv, __nv_bfloat16> {
    static __device__ __forceinline__ __nv_bfloat16 go(__nv_bfloat16 x, __nv_bfloat16 y) {
        const __nv_bfloat16 q = __float2bfloat16_rn(__fdiv_rn(__bfloat162float(x), __bfloat162float(y)));
        return __float2bfloat16_rn(truncf(__bfloat162float(q)));
    }
};
// The signed divisions take the signed values.
#define GX_SIGNED_INT(OP)                                                                      \
    template <typename S, typename U> struct ApplyInt<OP, S, U> {                              \
        static __device__ __forceinline__ S go(S x, S y) { return OP::s<S>(x, y); }            \
    };
GX_SIGNED_INT(OpFloorDiv)
GX_SIGNED_INT(OpTruncDiv)
GX_SIGNED_INT(OpRem)
GX_SIGNED_INT(OpFmod)
// Integer pow: base^exp wrapped to the type (squaring in the unsigned type); a negative exponent
// gives 0 but for bases 1 (1) and -1 (-1 for an odd exponent, else 1).
template <typename S, typename U> struct ApplyInt<OpPow, S, U> {
    static __device__ __forceinline__ S go(S x, S y) {
        if (y < 0) return x == 1 ? (S)1 : (x == -1 ? ((y & 1) ? (S)-1 : (S)1) : (S)0);
        U r = 1, b = (U)x;
        for (U e = (U)y; e != 0; e >>= 1) {
            if (e & 1) r *= b;
            b *= b;
        }
        return (S)r;
    }
};
template <typename Op> struct Apply<Op, int32_t> : ApplyInt<Op, int32_t, uint32_t> {};
template <typename Op> struct Apply<Op, int64_t> : ApplyInt<Op, int64_t, uint64_t> {};

template <typename T> union Vec16 {
    uint4 raw;
    T v[16 / sizeof(T)];
};

template <typename Op, typename T>
__device__ __forceinline__ void binary_impl(const T *a, const T *b, T *out, uint64_t n, int vec_ok) {
    if (vec_ok) {
        constexpr int V = 16 / sizeof(T);
        const uint64_t nvec = n / V;
        const uint64_t tile = (uint64_t)GX_THREADS * GX_UNROLL;
        const uint4 *a4 = reinterpret_cast<const uint4 *>(a);
        const uint4 *b4 = reinterpret_cast<const uint4 *>(b);
        uint4 *o4 = reinterpret_cast<uint4 *>(out);
        for (uint64_t base = (uint64_t)blockIdx.x * tile; base < nvec; base += (uint64_t)gridDim.x * tile) {
            Vec16<T> x[GX_UNROLL], y[GX_UNROLL];
#pragma unroll
            for (int u = 0; u < GX_UNROLL; ++u) {
                uint64_t i = base + (uint64_t)u * GX_THREADS + threadIdx.x;
                if (i < nvec) {
                    x[u].raw = a4[i];
                    y[u].raw = b4[i];
                }
            }
#pragma unroll
            for (int u = 0; u < GX_UNROLL; ++u) {
                uint64_t i = base + (uint64_t)u * GX_THREADS + threadIdx.x;
                if (i < nvec) {
#pragma unroll
                    for (int k = 0; k < V; ++k) x[u].v[k] = Apply<Op, T>::go(x[u].v[k], y[u].v[k]);
                    o4[i] = x[u].raw;
                }
            }
        }
        // The tail that does not fill a vector: done by the first threads of block 0.
        if (blockIdx.x == 0) {
            uint64_t i = nvec * V + threadIdx.x;
            if (i < n) out[i] = Apply<Op, T>::go(a[i], b[i]);
        }
    } else {
        const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
        for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
            out[i] = Apply<Op, T>::go(a[i], b[i]);
    }
}

// Operand layouts of an `_nd` kernel (`BinaryNd` in src/element.rs, same layout).
#define GX_ND_DIMS 8
struct GxBinaryNd {
    uint32_t size[GX_ND_DIMS];
    uint32_t magic[GX_ND_DIMS];
    uint32_t shift[GX_ND_DIMS];
    int64_t a_strides[GX_ND_DIMS];
    int64_t b_strides[GX_ND_DIMS];
    int64_t a_offset;
    int64_t b_offset;
    int32_t rank;
    int32_t vec;
};

// The offsets of both operands at output position i (i < 2^31).
__device__ __forceinline__ void nd_offsets(uint32_t i, const GxBinaryNd &d, int64_t &oa, int64_t &ob) {
    oa = d.a_offset;
    ob = d.b_offset;
#pragma unroll 1
    for (int k = d.rank - 1; k >= 0; --k) {
        const uint32_t q = (__umulhi(i, d.magic[k]) + i) >> d.shift[k];
        const uint32_t idx = i - q * d.size[k];
        i = q;
        oa += (int64_t)idx * d.a_strides[k];
        ob += (int64_t)idx * d.b_strides[k];
    }
}

// A group of 16 bytes of an operand whose innermost stride is 1 (an aligned vector load) or 0
// (one value repeated).
template <typename T> __device__ __forceinline__ void nd_load(Vec16<T> &v, const T *p, int64_t inner) {
    if (inner == 1) {
        v.raw = *reinterpret_cast<const uint4 *>(p);
    } else {
        const T x = *p;
#pragma unroll
        for (int k = 0; k < (int)(16 / sizeof(T)); ++k) v.v[k] = x;
    }
}

// out[i] = op(a[offset_a(i)], b ? b[offset_b(i)] : scalar) for i < n.
template <typename Op, typename T>
__device__ __forceinline__ void binary_nd_impl(const T *a, const T *b, T scalar, T *out, uint32_t n,
                                               const GxBinaryNd &d) {
    const uint32_t tile = GX_THREADS * GX_UNROLL;
    if (d.vec && d.rank == 1 && d.a_strides[0] == 1 && (b == nullptr || d.b_strides[0] == 1)) {
        // Contiguous operands (or a contiguous one and a scalar): no coordinates to split.
        constexpr uint32_t V = 16 / sizeof(T);
        const uint32_t groups = n / V;
        const uint4 *a4 = reinterpret_cast<const uint4 *>(a + d.a_offset);
        const uint4 *b4 = b ? reinterpret_cast<const uint4 *>(b + d.b_offset) : nullptr;
        uint4 *o4 = reinterpret_cast<uint4 *>(out);
        Vec16<T> s;
#pragma unroll
        for (int k = 0; k < (int)V; ++k) s.v[k] = scalar;
        for (uint32_t base = blockIdx.x * tile; base < groups; base += gridDim.x * tile) {
            Vec16<T> x[GX_UNROLL], y[GX_UNROLL];
#pragma unroll
            for (int u = 0; u < GX_UNROLL; ++u) {
                const uint32_t g = base + u * GX_THREADS + threadIdx.x;
                if (g < groups) {
                    x[u].raw = a4[g];
                    y[u].raw = b4 ? b4[g] : s.raw;
                }
            }
#pragma unroll
            for (int u = 0; u < GX_UNROLL; ++u) {
                const uint32_t g = base + u * GX_THREADS + threadIdx.x;
                if (g < groups) {
#pragma unroll
                    for (int k = 0; k < (int)V; ++k) x[u].v[k] = Apply<Op, T>::go(x[u].v[k], y[u].v[k]);
                    o4[g] = x[u].raw;
                }
            }
        }
    } else if (d.vec) {
        constexpr uint32_t V = 16 / sizeof(T);
        const uint32_t groups = n / V;
        const int64_t ia = d.a_strides[d.rank - 1], ib = d.b_strides[d.rank - 1];
        uint4 *o4 = reinterpret_cast<uint4 *>(out);
        for (uint32_t base = blockIdx.x * tile; base < groups; base += gridDim.x * tile) {
            Vec16<T> x[GX_UNROLL], y[GX_UNROLL];
#pragma unroll
            for (int u = 0; u < GX_UNROLL; ++u) {
                const uint32_t g = base + u * GX_THREADS + threadIdx.x;
                if (g < groups) {
                    int64_t oa, ob;
                    nd_offsets(g * V, d, oa, ob);
                    nd_load<T>(x[u], a + oa, ia);
                    if (b) {
                        nd_load<T>(y[u], b + ob, ib);
                    } else {
#pragma unroll
                        for (int k = 0; k < (int)V; ++k) y[u].v[k] = scalar;
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < GX_UNROLL; ++u) {
                const uint32_t g = base + u * GX_THREADS + threadIdx.x;
                if (g < groups) {
#pragma unroll
                    for (int k = 0; k < (int)V; ++k) x[u].v[k] = Apply<Op, T>::go(x[u].v[k], y[u].v[k]);
                    o4[g] = x[u].raw;
                }
            }
        }
    } else {
        // Any other layout: one element a thread per step of a grid-stride loop.
        for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
            int64_t oa, ob;
            nd_offsets(i, d, oa, ob);
            out[i] = Apply<Op, T>::go(a[oa], b ? b[ob] : scalar);
        }
    }
}

// Unary operations. Floats are computed in f32 (halves widened and rounded back once), f64 in
// f64, with the CUDA math library: sqrt is correctly rounded, expf/logf/tanhf and exp/log/tanh
// are within 2 ulp (CUDA C Programming Guide, "Mathematical Functions"). The CPU twins use
// Rust's libm, so the two agree exactly for neg/abs/relu/sqrt and within a few ulp of the
// result type for the others.
struct UNeg {
    static __device__ __forceinline__ float f(float x) { return -x; }
    static __device__ __forceinline__ double f(double x) { return -x; }
    template <typename S> static __device__ __forceinline__ S s(S x) { return (S)(0 - (typename Unsigned<S>::T)x); }
};
struct UAbs {
    static __device__ __forceinline__ float f(float x) { return fabsf(x); }
    static __device__ __forceinline__ double f(double x) { return fabs(x); }
    template <typename S> static __device__ __forceinline__ S s(S x) {
        return x < 0 ? (S)(0 - (typename Unsigned<S>::T)x) : x;
    }
};
struct URelu {
    // NaN stays NaN (like torch.relu); -0.0 becomes +0.0 only through x > 0 being false.
    static __device__ __forceinline__ float f(float x) { return x != x ? x : (x > 0.0f ? x : 0.0f); }
    static __device__ __forceinline__ double f(double x) { return x != x ? x : (x > 0.0 ? x : 0.0); }
    template <typename S> static __device__ __forceinline__ S s(S x) { return x > 0 ? x : 0; }
};
struct UExp {
    static __device__ __forceinline__ float f(float x) { return expf(x); }
    static __device__ __forceinline__ double f(double x) { return exp(x); }
};
struct ULog {
    static __device__ __forceinline__ float f(float x) { return logf(x); }
    static __device__ __forceinline__ double f(double x) { return log(x); }
};
struct USqrt {
    static __device__ __forceinline__ float f(float x) { return __fsqrt_rn(x); }
    static __device__ __forceinline__ double f(double x) { return __dsqrt_rn(x); }
};
struct UTanh {
    static __device__ __forceinline__ float f(float x) { return tanhf(x); }
    static __device__ __forceinline__ double f(double x) { return tanh(x); }
};
struct USigmoid {
    static __device__ __forceinline__ float f(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x))); }
    static __device__ __forceinline__ double f(double x) { return __ddiv_rn(1.0, __dadd_rn(1.0, exp(-x))); }
};
// sinf/cosf: the full-range library functions (within 2 ulp), not the __sinf intrinsics.
struct USin {
    static __device__ __forceinline__ float f(float x) { return sinf(x); }
    static __device__ __forceinline__ double f(double x) { return sin(x); }
};
struct UCos {
    static __device__ __forceinline__ float f(float x) { return cosf(x); }
    static __device__ __forceinline__ double f(double x) { return cos(x); }
};
struct UTan {
    static __device__ __forceinline__ float f(float x) { return tanf(x); }
    static __device__ __forceinline__ double f(double x) { return tan(x); }
};
struct UErf {
    static __device__ __forceinline__ float f(float x) { return erff(x); }
    static __device__ __forceinline__ double f(double x) { return erf(x); }
};
struct UErfc {
    static __device__ __forceinline__ float f(float x) { return erfcf(x); }
    static __device__ __forceinline__ double f(double x) { return erfc(x); }
};
// 1 / sqrt(x), the library's rsqrtf (within 2 ulp), as PyTorch's CUDA kernel.
struct URsqrt {
    static __device__ __forceinline__ float f(float x) { return rsqrtf(x); }
    static __device__ __forceinline__ double f(double x) { return rsqrt(x); }
};
struct UReciprocal {
    static __device__ __forceinline__ float f(float x) { return __frcp_rn(x); }
    static __device__ __forceinline__ double f(double x) { return __drcp_rn(x); }
};
struct USquare {
    static __device__ __forceinline__ float f(float x) { return __fmul_rn(x, x); }
    static __device__ __forceinline__ double f(double x) { return __dmul_rn(x, x); }
    template <typename S> static __device__ __forceinline__ S s(S x) {
        typedef typename Unsigned<S>::T U;
        return (S)((U)x * (U)x);
    }
};
// PyTorch's sign: NaN and both zeros give +0.
struct USign {
    static __device__ __forceinline__ float f(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); }
    static __device__ __forceinline__ double f(double x) { return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : 0.0); }
    template <typename S> static __device__ __forceinline__ S s(S x) { return (S)((x > 0) - (x < 0)); }
};
// Rounding: integers are unchanged.
struct UFloor {
    static __device__ __forceinline__ float f(float x) { return floorf(x); }
    static __device__ __forceinline__ double f(double x) { return floor(x); }
    template <typename S> static __device__ __forceinline__ S s(S x) { return x; }
};
struct UCeil {
    static __device__ __forceinline__ float f(float x) { return ceilf(x); }
    static __device__ __forceinline__ double f(double x) { return ceil(x); }
    template <typename S> static __device__ __forceinline__ S s(S x) { return x; }
};
// Halves to even (the current rounding mode), PyTorch's round.
struct URound {
    static __device__ __forceinline__ float f(float x) { return rintf(x); }
    static __device__ __forceinline__ double f(double x) { return rint(x); }
    template <typename S> static __device__ __forceinline__ S s(S x) { return x; }
};
struct UTrunc {
    static __device__ __forceinline__ float f(float x) { return truncf(x); }
    static __device__ __forceinline__ double f(double x) { return trunc(x); }
    template <typename S> static __device__ __forceinline__ S s(S x) { return x; }
};
struct ULog1p {
    static __device__ __forceinline__ float f(float x) { return log1pf(x); }
    static __device__ __forceinline__ double f(double x) { return log1p(x); }
};
struct UExpm1 {
    static __device__ __forceinline__ float f(float x) { return expm1f(x); }
    static __device__ __forceinline__ double f(double x) { return expm1(x); }
};
struct ULog2 {
    static __device__ __forceinline__ float f(float x) { return log2f(x); }
    static __device__ __forceinline__ double f(double x) { return log2(x); }
};
struct ULog10 {
    static __device__ __forceinline__ float f(float x) { return log10f(x); }
    static __device__ __forceinline__ double f(double x) { return log10(x); }
};
// The formulas below are written with the _rn intrinsics: never contracted into an FMA, so the
// standalone kernels, the tape and the CPU twins (src/unary.rs) do the same roundings, in the
// same order, around the library functions.
// GELU, exact: (x * 0.5) * (1 + erf(x * (1 / sqrt 2))), PyTorch's formula.
struct UGelu {
    static __device__ __forceinline__ float f(float x) {
        return __fmul_rn(__fmul_rn(x, 0.5f), __fadd_rn(1.0f, erff(__fmul_rn(x, 0.70710678118654752440f))));
    }
    static __device__ __forceinline__ double f(double x) {
        return __dmul_rn(__dmul_rn(x, 0.5), __dadd_rn(1.0, erf(__dmul_rn(x, 0.70710678118654752440))));
    }
};
// GELU, tanh approximation: (0.5 x) (1 + tanh(sqrt(2/pi) (x + ((0.044715 x) x) x))).
// As x sigmoid(2 inner) (the same function: (1 + tanh u) / 2 = 1 / (1 + e^(-2u))): no
// cancellation in 1 + tanh u for negative x; f32 takes the fast exponential (a few ulp).
struct UGeluTanh {
    static __device__ __forceinline__ float f(float x) {
        const float cube = __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, x), x), x);
        const float inner = __fmul_rn(0.7978845608028654f, __fadd_rn(x, cube));
        return __fdiv_rn(x, __fadd_rn(1.0f, __expf(-2.0f * inner)));
    }
    static __device__ __forceinline__ double f(double x) {
        const double cube = __dmul_rn(__dmul_rn(__dmul_rn(0.044715, x), x), x);
        const double inner = __dmul_rn(0.7978845608028654, __dadd_rn(x, cube));
        return __ddiv_rn(x, __dadd_rn(1.0, exp(-2.0 * inner)));
    }
};
struct USilu {
    static __device__ __forceinline__ float f(float x) { return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x))); }
    static __device__ __forceinline__ double f(double x) { return __ddiv_rn(x, __dadd_rn(1.0, exp(-x))); }
};
// softplus with beta 1, threshold 20 (PyTorch's defaults).
struct USoftplus {
    static __device__ __forceinline__ float f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
    static __device__ __forceinline__ double f(double x) { return x > 20.0 ? x : log1p(exp(x)); }
};
struct UAsin {
    static __device__ __forceinline__ float f(float x) { return asinf(x); }
    static __device__ __forceinline__ double f(double x) { return asin(x); }
};
struct UAcos {
    static __device__ __forceinline__ float f(float x) { return acosf(x); }
    static __device__ __forceinline__ double f(double x) { return acos(x); }
};
struct UAtan {
    static __device__ __forceinline__ float f(float x) { return atanf(x); }
    static __device__ __forceinline__ double f(double x) { return atan(x); }
};
struct USinh {
    static __device__ __forceinline__ float f(float x) { return sinhf(x); }
    static __device__ __forceinline__ double f(double x) { return sinh(x); }
};
struct UCosh {
    static __device__ __forceinline__ float f(float x) { return coshf(x); }
    static __device__ __forceinline__ double f(double x) { return cosh(x); }
};
struct UAsinh {
    static __device__ __forceinline__ float f(float x) { return asinhf(x); }
    static __device__ __forceinline__ double f(double x) { return asinh(x); }
};
struct UAcosh {
    static __device__ __forceinline__ float f(float x) { return acoshf(x); }
    static __device__ __forceinline__ double f(double x) { return acosh(x); }
};
struct UAtanh {
    static __device__ __forceinline__ float f(float x) { return atanhf(x); }
    static __device__ __forceinline__ double f(double x) { return atanh(x); }
};

// The unary ops, in the order of the table in src/unary.rs (the tape's op codes): the kernel
// name, the functor, and ALL (every type, i32 and i64 too) or FLOAT (f64, f32, f16, bf16).
#define GX_UNARY_OPS(X)                                                                        \
    X(neg, UNeg, ALL)                                                                           \
    X(abs, UAbs, ALL)                                                                           \
    X(relu, URelu, ALL)                                                                         \
    X(exp, UExp, FLOAT)                                                                         \
    X(log, ULog, FLOAT)                                                                         \
    X(sqrt, USqrt, FLOAT)                                                                       \
    X(tanh, UTanh, FLOAT)                                                                       \
    X(sigmoid, USigmoid, FLOAT)                                                                 \
    X(sin, USin, FLOAT)                                                                         \
    X(cos, UCos, FLOAT)                                                                         \
    X(tan, UTan, FLOAT)                                                                         \
    X(erf, UErf, FLOAT)                                                                         \
    X(erfc, UErfc, FLOAT)                                                                       \
    X(rsqrt, URsqrt, FLOAT)                                                                     \
    X(reciprocal, UReciprocal, FLOAT)                                                           \
    X(square, USquare, ALL)                                                                     \
    X(sign, USign, ALL)                                                                         \
    X(floor, UFloor, ALL)                                                                       \
    X(ceil, UCeil, ALL)                                                                         \
    X(round, URound, ALL)                                                                       \
    X(trunc, UTrunc, ALL)                                                                       \
    X(log1p, ULog1p, FLOAT)                                                                     \
    X(expm1, UExpm1, FLOAT)                                                                     \
    X(log2, ULog2, FLOAT)                                                                       \
    X(log10, ULog10, FLOAT)                                                                     \
    X(gelu, UGelu, FLOAT)                                                                       \
    X(gelu_tanh, UGeluTanh, FLOAT)                                                              \
    X(silu, USilu, FLOAT)                                                                       \
    X(softplus, USoftplus, FLOAT)                                                               \
    X(asin, UAsin, FLOAT)                                                                       \
    X(acos, UAcos, FLOAT)                                                                       \
    X(atan, UAtan, FLOAT)                                                                       \
    X(sinh, USinh, FLOAT)                                                                       \
    X(cosh, UCosh, FLOAT)                                                                       \
    X(asinh, UAsinh, FLOAT)                                                                     \
    X(acosh, UAcosh, FLOAT)                                                                     \
    X(atanh, UAtanh, FLOAT)

template <typename Op, typename T> struct ApplyU;
template <typename Op> struct ApplyU<Op, float> {
    static __device__ __forceinline__ float go(float x) { return Op::f(x); }
};
template <typename Op> struct ApplyU<Op, double> {
    static __device__ __forceinline__ double go(double x) { return Op::f(x); }
};
template <typename Op> struct ApplyU<Op, __half> {
    static __device__ __forceinline__ __half go(__half x) { return __float2half_rn(Op::f(__half2float(x))); }
};
template <typename Op> struct ApplyU<Op, __nv_bfloat16> {
    static __device__ __forceinline__ __nv_bfloat16 go(__nv_bfloat16 x) {
        return __float2bfloat16_rn(Op::f(__bfloat162float(x)));
    }
};
template <typename Op> struct ApplyU<Op, int32_t> {
    static __device__ __forceinline__ int32_t go(int32_t x) { return Op::template s<int32_t>(x); }
};
template <typename Op> struct ApplyU<Op, int64_t> {
    static __device__ __forceinline__ int64_t go(int64_t x) { return Op::template s<int64_t>(x); }
};

template <typename Op, typename T, int U = GX_UNARY_UNROLL>
__device__ __forceinline__ void unary_impl(const T *a, T *out, uint64_t n, int vec_ok) {
    if (vec_ok) {
        constexpr int V = 16 / sizeof(T);
        const uint64_t nvec = n / V;
        const uint64_t tile = (uint64_t)GX_THREADS * U;
        const uint4 *a4 = reinterpret_cast<const uint4 *>(a);
        uint4 *o4 = reinterpret_cast<uint4 *>(out);
        for (uint64_t base = (uint64_t)blockIdx.x * tile; base < nvec; base += (uint64_t)gridDim.x * tile) {
            Vec16<T> x[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                uint64_t i = base + (uint64_t)u * GX_THREADS + threadIdx.x;
                if (i < nvec) x[u].raw = a4[i];
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                uint64_t i = base + (uint64_t)u * GX_THREADS + threadIdx.x;
                if (i < nvec) {
#pragma unroll
                    for (int k = 0; k < V; ++k) x[u].v[k] = ApplyU<Op, T>::go(x[u].v[k]);
                    o4[i] = x[u].raw;
                }
            }
        }
        if (blockIdx.x == 0) {
            uint64_t i = nvec * V + threadIdx.x;
            if (i < n) out[i] = ApplyU<Op, T>::go(a[i]);
        }
    } else {
        const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
        for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
            out[i] = ApplyU<Op, T>::go(a[i]);
    }
}

template <typename T>
__device__ __forceinline__ void fill_impl(T *out, T value, uint64_t n, int vec_ok) {
    if (vec_ok) {
        constexpr int V = 16 / sizeof(T);
        const uint64_t nvec = n / V;
        const uint64_t tile = (uint64_t)GX_THREADS * GX_UNROLL;
        Vec16<T> x;
#pragma unroll
        for (int k = 0; k < V; ++k) x.v[k] = value;
        uint4 *o4 = reinterpret_cast<uint4 *>(out);
        for (uint64_t base = (uint64_t)blockIdx.x * tile; base < nvec; base += (uint64_t)gridDim.x * tile) {
#pragma unroll
            for (int u = 0; u < GX_UNROLL; ++u) {
                uint64_t i = base + (uint64_t)u * GX_THREADS + threadIdx.x;
                if (i < nvec) o4[i] = x.raw;
            }
        }
        if (blockIdx.x == 0) {
            uint64_t i = nvec * V + threadIdx.x;
            if (i < n) out[i] = value;
        }
    } else {
        const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
        for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
            out[i] = value;
    }
}

// clamp: out = min(max(x, lo), hi), PyTorch's order (so lo > hi gives hi), each bound
// optional (`flags` bit 0: lo, bit 1: hi). A NaN x stays x. Values are compared in f32 for the
// halves (exact) and the result is one of the three inputs' bits, so the CPU twin is exact.
template <typename T> struct ClampCmp {
    static __device__ __forceinline__ bool lt(T a, T b) { return a < b; }
    static __device__ __forceinline__ bool isnan(T) { return false; }
};
template <> struct ClampCmp<float> {
    static __device__ __forceinline__ bool lt(float a, float b) { return a < b; }
    static __device__ __forceinline__ bool isnan(float a) { return a != a; }
};
template <> struct ClampCmp<double> {
    static __device__ __forceinline__ bool lt(double a, double b) { return a < b; }
    static __device__ __forceinline__ bool isnan(double a) { return a != a; }
};
template <> struct ClampCmp<__half> {
    static __device__ __forceinline__ bool lt(__half a, __half b) { return __half2float(a) < __half2float(b); }
    static __device__ __forceinline__ bool isnan(__half a) { return __half2float(a) != __half2float(a); }
};
template <> struct ClampCmp<__nv_bfloat16> {
    static __device__ __forceinline__ bool lt(__nv_bfloat16 a, __nv_bfloat16 b) {
        return __bfloat162float(a) < __bfloat162float(b);
    }
    static __device__ __forceinline__ bool isnan(__nv_bfloat16 a) { return __bfloat162float(a) != __bfloat162float(a); }
};
template <typename T> __device__ __forceinline__ T clamp_one(T x, T lo, T hi, int flags) {
    typedef ClampCmp<T> C;
    if (C::isnan(x)) return x;
    if ((flags & 1) && C::lt(x, lo)) x = lo;
    if ((flags & 2) && C::lt(hi, x)) x = hi;
    return x;
}

// One pass `out[i] = f(a[i])` with a per-element function object `f` (clamp's bounds,
// nan_to_num's replacements): 16-byte vectors, GX_UNROLL in flight, when `vec_ok`; a
// grid-stride loop otherwise.
template <typename T, typename F>
__device__ __forceinline__ void map_impl(const T *a, T *out, uint64_t n, int vec_ok, const F &f) {
    if (vec_ok) {
        constexpr int V = 16 / sizeof(T);
        const uint64_t nvec = n / V;
        const uint64_t tile = (uint64_t)GX_THREADS * GX_UNROLL;
        const uint4 *a4 = reinterpret_cast<const uint4 *>(a);
        uint4 *o4 = reinterpret_cast<uint4 *>(out);
        for (uint64_t base = (uint64_t)blockIdx.x * tile; base < nvec; base += (uint64_t)gridDim.x * tile) {
            Vec16<T> x[GX_UNROLL];
#pragma unroll
            for (int u = 0; u < GX_UNROLL; ++u) {
                uint64_t i = base + (uint64_t)u * GX_THREADS + threadIdx.x;
                if (i < nvec) x[u].raw = a4[i];
            }
#pragma unroll
            for (int u = 0; u < GX_UNROLL; ++u) {
                uint64_t i = base + (uint64_t)u * GX_THREADS + threadIdx.x;
                if (i < nvec) {
#pragma unroll
                    for (int k = 0; k < V; ++k) x[u].v[k] = f(x[u].v[k]);
                    o4[i] = x[u].raw;
                }
            }
        }
        if (blockIdx.x == 0) {
            uint64_t i = nvec * V + threadIdx.x;
            if (i < n) out[i] = f(a[i]);
        }
    } else {
        const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
        for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
            out[i] = f(a[i]);
    }
}

template <typename T> struct ClampFn {
    T lo, hi;
    int flags;
    __device__ __forceinline__ T operator()(T x) const { return clamp_one<T>(x, lo, hi, flags); }
};

#define GX_CLAMP(NAME, T)                                                                      \
    extern "C" __global__ void __launch_bounds__(GX_THREADS)                                    \
        clamp_##NAME(const T *a, T *out, uint64_t n, int vec_ok, T lo, T hi, int flags) {       \
        map_impl<T>(a, out, n, vec_ok, ClampFn<T>{lo, hi, flags});                              \
    }
GX_CLAMP(f64, double)
GX_CLAMP(f32, float)
GX_CLAMP(f16, __half)
GX_CLAMP(bf16, __nv_bfloat16)
GX_CLAMP(i32, int32_t)
GX_CLAMP(i64, int64_t)

// nan_to_num: NaN, +inf and -inf replaced by three values of the type (PyTorch's nan_to_num),
// through map_impl as clamp.
template <typename T> __device__ __forceinline__ float gx_widen(T x) { return (float)x; }
template <> __device__ __forceinline__ float gx_widen<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float gx_widen<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> struct GxWide { typedef float F; static __device__ __forceinline__ float of(T x) { return gx_widen<T>(x); } };
template <> struct GxWide<double> { typedef double F; static __device__ __forceinline__ double of(double x) { return x; } };

template <typename T> __device__ __forceinline__ T nan_to_num_one(T x, T nv, T pv, T mv) {
    const typename GxWide<T>::F f = GxWide<T>::of(x);
    if (f != f) return nv;
    if (f == (typename GxWide<T>::F)INFINITY) return pv;
    if (f == -(typename GxWide<T>::F)INFINITY) return mv;
    return x;
}

template <typename T> struct NanToNumFn {
    T nv, pv, mv;
    __device__ __forceinline__ T operator()(T x) const { return nan_to_num_one<T>(x, nv, pv, mv); }
};
#define GX_NAN_TO_NUM(NAME, T)                                                                 \
    extern "C" __global__ void __launch_bounds__(GX_THREADS)                                    \
        nan_to_num_##NAME(const T *a, T *out, uint64_t n, int vec_ok, T nv, T pv, T mv) {       \
        map_impl<T>(a, out, n, vec_ok, NanToNumFn<T>{nv, pv, mv});                              \
    }
GX_NAN_TO_NUM(f64, double)
GX_NAN_TO_NUM(f32, float)
GX_NAN_TO_NUM(f16, __half)
GX_NAN_TO_NUM(bf16, __nv_bfloat16)

// isnan / isinf / isfinite of the float types, as bool bytes. With `vec_ok` (the input 16-byte
// aligned, the output aligned to 16 / sizeof(T) bytes) a thread reads 16 bytes and writes their
// 16 / sizeof(T) flags in one store.
struct CIsNan { template <typename F> static __device__ __forceinline__ bool c(F f) { return f != f; } };
struct CIsInf { template <typename F> static __device__ __forceinline__ bool c(F f) { return f == (F)INFINITY || f == -(F)INFINITY; } };
struct CIsFinite { template <typename F> static __device__ __forceinline__ bool c(F f) { return f - f == (F)0; } };
template <int V> struct GxBytes;
template <> struct GxBytes<2> { typedef uint16_t U; };
template <> struct GxBytes<4> { typedef uint32_t U; };
template <> struct GxBytes<8> { typedef uint64_t U; };

template <typename P, typename T>
__device__ __forceinline__ void classify_impl(const T *a, uint8_t *out, uint64_t n, int vec_ok) {
    if (vec_ok) {
        constexpr int V = 16 / sizeof(T);
        typedef typename GxBytes<V>::U U;
        const uint64_t nvec = n / V;
        const uint64_t tile = (uint64_t)GX_THREADS * GX_UNROLL;
        const uint4 *a4 = reinterpret_cast<const uint4 *>(a);
        U *ov = reinterpret_cast<U *>(out);
        for (uint64_t base = (uint64_t)blockIdx.x * tile; base < nvec; base += (uint64_t)gridDim.x * tile) {
            Vec16<T> x[GX_UNROLL];
#pragma unroll
            for (int u = 0; u < GX_UNROLL; ++u) {
                uint64_t i = base + (uint64_t)u * GX_THREADS + threadIdx.x;
                if (i < nvec) x[u].raw = a4[i];
            }
#pragma unroll
            for (int u = 0; u < GX_UNROLL; ++u) {
                uint64_t i = base + (uint64_t)u * GX_THREADS + threadIdx.x;
                if (i < nvec) {
                    U packed = 0;
#pragma unroll
                    for (int k = 0; k < V; ++k)
                        packed |= (U)P::c(GxWide<T>::of(x[u].v[k])) << (8 * k);
                    ov[i] = packed;
                }
            }
        }
        if (blockIdx.x == 0) {
            uint64_t i = nvec * V + threadIdx.x;
            if (i < n) out[i] = P::c(GxWide<T>::of(a[i]));
        }
    } else {
        const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
        for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
            out[i] = P::c(GxWide<T>::of(a[i]));
    }
}
#define GX_CLASSIFY(OPNAME, P, NAME, T)                                                        \
    extern "C" __global__ void __launch_bounds__(GX_THREADS)                                    \
        OPNAME##_##NAME(const T *a, uint8_t *out, uint64_t n, int vec_ok) {                     \
        classify_impl<P, T>(a, out, n, vec_ok);                                                 \
    }
#define GX_CLASSIFY_ALL(OPNAME, P)                                                             \
    GX_CLASSIFY(OPNAME, P, f64, double)                                                         \
    GX_CLASSIFY(OPNAME, P, f32, float)                                                          \
    GX_CLASSIFY(OPNAME, P, f16, __half)                                                         \
    GX_CLASSIFY(OPNAME, P, bf16, __nv_bfloat16)
GX_CLASSIFY_ALL(isnan, CIsNan)
GX_CLASSIFY_ALL(isinf, CIsInf)
GX_CLASSIFY_ALL(isfinite, CIsFinite)

#define GX_BINARY(OPNAME, OP, NAME, T)                                                         \
    extern "C" __global__ void __launch_bounds__(GX_THREADS)                                    \
        OPNAME##_##NAME(const T *a, const T *b, T *out, uint64_t n, int vec_ok) {               \
        binary_impl<OP, T>(a, b, out, n, vec_ok);                                               \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(GX_THREADS) OPNAME##_nd_##NAME(                \
        const T *a, const T *b, T scalar, T *out, uint32_t n, const __grid_constant__ GxBinaryNd d) { \
        binary_nd_impl<OP, T>(a, b, scalar, out, n, d);                                         \
    }

#define GX_DEFINE(NAME, T)                                                                     \
    GX_BINARY(add, OpAdd, NAME, T)                                                              \
    GX_BINARY(sub, OpSub, NAME, T)                                                              \
    GX_BINARY(mul, OpMul, NAME, T)                                                              \
    GX_BINARY(maximum, OpMax, NAME, T)                                                          \
    GX_BINARY(minimum, OpMin, NAME, T)                                                          \
    GX_BINARY(floor_divide, OpFloorDiv, NAME, T)                                                \
    GX_BINARY(trunc_divide, OpTruncDiv, NAME, T)                                                \
    GX_BINARY(remainder, OpRem, NAME, T)                                                        \
    GX_BINARY(fmod, OpFmod, NAME, T)                                                            \
    extern "C" __global__ void __launch_bounds__(GX_THREADS)                                    \
        fill_##NAME(T *out, T value, uint64_t n, int vec_ok) {                                  \
        fill_impl<T>(out, value, n, vec_ok);                                                    \
    }

GX_DEFINE(f64, double)
GX_DEFINE(f32, float)
GX_DEFINE(f16, __half)
GX_DEFINE(bf16, __nv_bfloat16)
GX_DEFINE(i32, int32_t)
GX_DEFINE(i64, int64_t)

// True division only for floating types (integer operands are converted by the caller).
GX_BINARY(div, OpDiv, f64, double)
GX_BINARY(div, OpDiv, f32, float)
GX_BINARY(div, OpDiv, f16, __half)
GX_BINARY(div, OpDiv, bf16, __nv_bfloat16)
// pow for the floating types: CUDA's powf (f64: pow), within 2 ulp; the CPU twin's powf. For
// the integers: exact, wrapping (ApplyInt<OpPow>).
GX_BINARY(pow, OpPow, f64, double)
GX_BINARY(pow, OpPow, f32, float)
GX_BINARY(pow, OpPow, f16, __half)
GX_BINARY(pow, OpPow, bf16, __nv_bfloat16)
GX_BINARY(pow, OpPow, i32, int32_t)
GX_BINARY(pow, OpPow, i64, int64_t)

// atan2 and hypot: the float types only.
GX_BINARY(atan2, OpAtan2, f64, double)
GX_BINARY(atan2, OpAtan2, f32, float)
GX_BINARY(atan2, OpAtan2, f16, __half)
GX_BINARY(atan2, OpAtan2, bf16, __nv_bfloat16)
GX_BINARY(hypot, OpHypot, f64, double)
GX_BINARY(hypot, OpHypot, f32, float)
GX_BINARY(hypot, OpHypot, f16, __half)
GX_BINARY(hypot, OpHypot, bf16, __nv_bfloat16)

// Bitwise ops: integers only (bools compute as int32).
GX_BINARY(bitwise_and, OpAnd, i32, int32_t)
GX_BINARY(bitwise_and, OpAnd, i64, int64_t)
GX_BINARY(bitwise_or, OpOr, i32, int32_t)
GX_BINARY(bitwise_or, OpOr, i64, int64_t)
GX_BINARY(bitwise_xor, OpXor, i32, int32_t)
GX_BINARY(bitwise_xor, OpXor, i64, int64_t)

#define GX_UNARY(OPNAME, OP, NAME, T)                                                          \
    extern "C" __global__ void __launch_bounds__(GX_THREADS)                                    \
        OPNAME##_##NAME(const T *a, T *out, uint64_t n, int vec_ok) {                           \
        unary_impl<OP, T>(a, out, n, vec_ok);                                                   \
    }
#define GX_UNARY_TYPES_FLOAT(OPNAME, OP)                                                       \
    GX_UNARY(OPNAME, OP, f64, double)                                                           \
    GX_UNARY(OPNAME, OP, f32, float)                                                            \
    GX_UNARY(OPNAME, OP, f16, __half)                                                           \
    GX_UNARY(OPNAME, OP, bf16, __nv_bfloat16)
#define GX_UNARY_TYPES_ALL(OPNAME, OP)                                                         \
    GX_UNARY_TYPES_FLOAT(OPNAME, OP)                                                            \
    GX_UNARY(OPNAME, OP, i32, int32_t)                                                          \
    GX_UNARY(OPNAME, OP, i64, int64_t)
#define GX_UNARY_DEFINE(OPNAME, OP, KIND) GX_UNARY_TYPES_##KIND(OPNAME, OP)
GX_UNARY_OPS(GX_UNARY_DEFINE)

// Launch-shape variants of exp, for the bench that tunes the unary kernels (vectors a thread
// per tile; the default is GX_UNARY_UNROLL).
#define GX_EXP_VARIANT(U, NAME, T)                                                             \
    extern "C" __global__ void __launch_bounds__(GX_THREADS)                                    \
        exp_u##U##_##NAME(const T *a, T *out, uint64_t n, int vec_ok) {                         \
        unary_impl<UExp, T, U>(a, out, n, vec_ok);                                              \
    }
GX_EXP_VARIANT(4, f32, float)
GX_EXP_VARIANT(2, f32, float)
GX_EXP_VARIANT(8, f32, float)
GX_EXP_VARIANT(4, bf16, __nv_bfloat16)
GX_EXP_VARIANT(2, bf16, __nv_bfloat16)
GX_EXP_VARIANT(8, bf16, __nv_bfloat16)


// Comparisons: out[i] = a[i] OP b[i] as a bool (0 or 1). Floats compare as IEEE values (halves
// widened exactly): NaN is unequal to everything, -0 == +0. Grid-stride loop, any grid size.
struct CEq { template <typename S> static __device__ __forceinline__ bool c(S x, S y) { return x == y; } };
struct CNe { template <typename S> static __device__ __forceinline__ bool c(S x, S y) { return x != y; } };
struct CLt { template <typename S> static __device__ __forceinline__ bool c(S x, S y) { return x < y; } };
struct CLe { template <typename S> static __device__ __forceinline__ bool c(S x, S y) { return x <= y; } };
struct CGt { template <typename S> static __device__ __forceinline__ bool c(S x, S y) { return x > y; } };
struct CGe { template <typename S> static __device__ __forceinline__ bool c(S x, S y) { return x >= y; } };

template <typename T> struct Wide { typedef T W; static __device__ __forceinline__ T w(T x) { return x; } };
template <> struct Wide<__half> { typedef float W; static __device__ __forceinline__ float w(__half x) { return __half2float(x); } };
template <> struct Wide<__nv_bfloat16> {
    typedef float W;
    static __device__ __forceinline__ float w(__nv_bfloat16 x) { return __bfloat162float(x); }
};

#define GX_COMPARE(OPNAME, OP, NAME, T)                                                        \
    extern "C" __global__ void __launch_bounds__(GX_THREADS)                                    \
        OPNAME##_##NAME(const T *a, const T *b, uint8_t *out, uint64_t n) {                    \
        const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;                               \
        for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) \
            out[i] = OP::c(Wide<T>::w(a[i]), Wide<T>::w(b[i])) ? 1 : 0;                        \
    }
#define GX_COMPARE_ALL(NAME, T)                                                                \
    GX_COMPARE(eq, CEq, NAME, T)                                                                \
    GX_COMPARE(ne, CNe, NAME, T)                                                                \
    GX_COMPARE(lt, CLt, NAME, T)                                                                \
    GX_COMPARE(le, CLe, NAME, T)                                                                \
    GX_COMPARE(gt, CGt, NAME, T)                                                                \
    GX_COMPARE(ge, CGe, NAME, T)

GX_COMPARE_ALL(f64, double)
GX_COMPARE_ALL(f32, float)
GX_COMPARE_ALL(f16, __half)
GX_COMPARE_ALL(bf16, __nv_bfloat16)
GX_COMPARE_ALL(i32, int32_t)
GX_COMPARE_ALL(i64, int64_t)

// where: out[i] = cond[i] ? a[i] : b[i], by element size (a pure selection of bits).
#define GX_WHERE(NAME, T)                                                                      \
    extern "C" __global__ void __launch_bounds__(GX_THREADS)                                    \
        where_##NAME(const uint8_t *cond, const T *a, const T *b, T *out, uint64_t n) {         \
        const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;                               \
        for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) \
            out[i] = cond[i] ? a[i] : b[i];                                                     \
    }
GX_WHERE(e1, uint8_t)
GX_WHERE(e2, uint16_t)
GX_WHERE(e4, uint32_t)
GX_WHERE(e8, uint64_t)

// Comparisons with operands read in place: out[i] = a[offset_a(i)] OP (b ? b[offset_b(i)] :
// scalar), the output contiguous bools, the descriptor a GxBinaryNd (its `vec` is unused). One
// element a thread per step of a grid-stride loop; a launch whose operands are contiguous skips
// the coordinate split.
template <typename Op, typename T>
__device__ __forceinline__ void compare_nd_impl(const T *a, const T *b, T scalar, uint8_t *out, uint32_t n,
                                                const GxBinaryNd &d) {
    const bool flat = d.rank == 1 && d.a_strides[0] == 1 && (b == nullptr || d.b_strides[0] == 1);
    const typename Wide<T>::W s = Wide<T>::w(scalar);
    if (flat) {
        // Four elements a thread: four loads of each operand in flight, one 4-byte store (the
        // output is a fresh allocation, so `out + 4q` is 4-byte aligned).
        const T *pa = a + d.a_offset;
        const T *pb = b ? b + d.b_offset : nullptr;
        const uint32_t quads = n / 4, stride = gridDim.x * blockDim.x;
        for (uint32_t q = blockIdx.x * blockDim.x + threadIdx.x; q < quads; q += stride) {
            const uint32_t i = 4 * q;
            typename Wide<T>::W x[4], y[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                x[k] = Wide<T>::w(pa[i + k]);
                y[k] = pb ? Wide<T>::w(pb[i + k]) : s;
            }
            uchar4 r;
            r.x = Op::c(x[0], y[0]) ? 1 : 0;
            r.y = Op::c(x[1], y[1]) ? 1 : 0;
            r.z = Op::c(x[2], y[2]) ? 1 : 0;
            r.w = Op::c(x[3], y[3]) ? 1 : 0;
            *reinterpret_cast<uchar4 *>(out + i) = r;
        }
        for (uint32_t i = 4 * quads + blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
            out[i] = Op::c(Wide<T>::w(pa[i]), pb ? Wide<T>::w(pb[i]) : s) ? 1 : 0;
        return;
    }
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        int64_t oa, ob;
        if (flat) {
            oa = d.a_offset + i;
            ob = d.b_offset + i;
        } else {
            nd_offsets(i, d, oa, ob);
        }
        out[i] = Op::c(Wide<T>::w(a[oa]), b ? Wide<T>::w(b[ob]) : s) ? 1 : 0;
    }
}
#define GX_COMPARE_ND(OPNAME, OP, NAME, T)                                                     \
    extern "C" __global__ void __launch_bounds__(GX_THREADS) OPNAME##_nd_##NAME(                \
        const T *a, const T *b, T scalar, uint8_t *out, uint32_t n, const __grid_constant__ GxBinaryNd d) { \
        compare_nd_impl<OP, T>(a, b, scalar, out, n, d);                                        \
    }
#define GX_COMPARE_ND_ALL(NAME, T)                                                             \
    GX_COMPARE_ND(eq, CEq, NAME, T)                                                             \
    GX_COMPARE_ND(ne, CNe, NAME, T)                                                             \
    GX_COMPARE_ND(lt, CLt, NAME, T)                                                             \
    GX_COMPARE_ND(le, CLe, NAME, T)                                                             \
    GX_COMPARE_ND(gt, CGt, NAME, T)                                                             \
    GX_COMPARE_ND(ge, CGe, NAME, T)
GX_COMPARE_ND_ALL(f64, double)
GX_COMPARE_ND_ALL(f32, float)
GX_COMPARE_ND_ALL(f16, __half)
GX_COMPARE_ND_ALL(bf16, __nv_bfloat16)
GX_COMPARE_ND_ALL(i32, int32_t)
GX_COMPARE_ND_ALL(i64, int64_t)

// where with operands read in place: out[i] = cond[offset_c(i)] ? (a ? a[offset_a(i)] : the
// bits of a_scalar) : (b ? b[offset_b(i)] : the bits of b_scalar), by element size; the output
// is contiguous. `GxWhereNd` (WhereNd in src/nd.rs, same layout) has each operand's strides per
// output dimension, merged like GxBinaryNd's; one element a thread per grid-stride step, four
// (vector accesses where aligned) when every operand is contiguous.
struct GxWhereNd {
    uint32_t size[GX_ND_DIMS];
    uint32_t magic[GX_ND_DIMS];
    uint32_t shift[GX_ND_DIMS];
    int64_t c_strides[GX_ND_DIMS];
    int64_t a_strides[GX_ND_DIMS];
    int64_t b_strides[GX_ND_DIMS];
    int64_t c_offset;
    int64_t a_offset;
    int64_t b_offset;
    int32_t rank;
    int32_t pad;
};
// Four elements of T, aligned to their size: one vector access (two for 8-byte elements).
template <typename T> struct alignas(4 * sizeof(T)) Quad {
    T v[4];
};
template <typename T>
__device__ __forceinline__ void where_nd_impl(const uint8_t *cond, const T *a, const T *b, uint64_t a_bits,
                                              uint64_t b_bits, T *out, uint32_t n, const GxWhereNd &d) {
    T sa, sb;
    memcpy(&sa, &a_bits, sizeof(T));
    memcpy(&sb, &b_bits, sizeof(T));
    if (d.rank == 1 && d.c_strides[0] == 1 && (a == nullptr || d.a_strides[0] == 1) &&
        (b == nullptr || d.b_strides[0] == 1)) {
        // Contiguous operands: four elements a thread, every load issued before the stores.
        const uint8_t *pc = cond + d.c_offset;
        const T *pa = a ? a + d.a_offset : nullptr;
        const T *pb = b ? b + d.b_offset : nullptr;
        const uint32_t quads = n / 4, stride = gridDim.x * blockDim.x;
        // Where every operand's quads are aligned to their size (fresh allocations are): one
        // 4-byte load of the conditions and one vector load of each value operand a quad.
        const auto quad_aligned = [](const void *p, size_t bytes) {
            return p == nullptr || (uintptr_t)p % bytes == 0;
        };
        if (quad_aligned(pc, 4) && quad_aligned(pa, sizeof(Quad<T>)) && quad_aligned(pb, sizeof(Quad<T>)) &&
            quad_aligned(out, sizeof(Quad<T>))) {
            Quad<T> qa, qb;
#pragma unroll
            for (int k = 0; k < 4; k++) qa.v[k] = sa, qb.v[k] = sb;
            for (uint32_t q = blockIdx.x * blockDim.x + threadIdx.x; q < quads; q += stride) {
                const uint32_t c = reinterpret_cast<const uint32_t *>(pc)[q];
                const Quad<T> x = pa ? reinterpret_cast<const Quad<T> *>(pa)[q] : qa;
                const Quad<T> y = pb ? reinterpret_cast<const Quad<T> *>(pb)[q] : qb;
                Quad<T> o;
#pragma unroll
                for (int k = 0; k < 4; k++) o.v[k] = (c >> (8 * k)) & 0xff ? x.v[k] : y.v[k];
                reinterpret_cast<Quad<T> *>(out)[q] = o;
            }
            for (uint32_t i = 4 * quads + blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
                out[i] = pc[i] ? (pa ? pa[i] : sa) : (pb ? pb[i] : sb);
            return;
        }
        for (uint32_t q = blockIdx.x * blockDim.x + threadIdx.x; q < quads; q += stride) {
            const uint32_t i = 4 * q;
            uint8_t c[4];
            T x[4], y[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                c[k] = pc[i + k];
                x[k] = pa ? pa[i + k] : sa;
                y[k] = pb ? pb[i + k] : sb;
            }
#pragma unroll
            for (int k = 0; k < 4; k++) out[i + k] = c[k] ? x[k] : y[k];
        }
        for (uint32_t i = 4 * quads + blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
            out[i] = pc[i] ? (pa ? pa[i] : sa) : (pb ? pb[i] : sb);
        return;
    }
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        int64_t oc = d.c_offset, oa = d.a_offset, ob = d.b_offset;
        uint32_t r = i;
#pragma unroll 1
        for (int k = d.rank - 1; k >= 0; --k) {
            const uint32_t q = (__umulhi(r, d.magic[k]) + r) >> d.shift[k];
            const uint32_t idx = r - q * d.size[k];
            r = q;
            oc += (int64_t)idx * d.c_strides[k];
            oa += (int64_t)idx * d.a_strides[k];
            ob += (int64_t)idx * d.b_strides[k];
        }
        out[i] = cond[oc] ? (a ? a[oa] : sa) : (b ? b[ob] : sb);
    }
}
#define GX_WHERE_ND(NAME, T)                                                                   \
    extern "C" __global__ void __launch_bounds__(GX_THREADS) where_nd_##NAME(                   \
        const uint8_t *cond, const T *a, const T *b, uint64_t a_bits, uint64_t b_bits, T *out,  \
        uint32_t n, const __grid_constant__ GxWhereNd d) {                                      \
        where_nd_impl<T>(cond, a, b, a_bits, b_bits, out, n, d);                                \
    }
GX_WHERE_ND(e1, uint8_t)
GX_WHERE_ND(e2, uint16_t)
GX_WHERE_ND(e4, uint32_t)
GX_WHERE_ND(e8, uint64_t)

// ---------------------------------------------------------------------------------------------
// The tape: small elementwise operations batched into one launch (genesis_cuda::batch). One
// block of GX_THREADS threads runs the records in order, with a barrier between records, so a
// record sees everything the records before it wrote (a barrier orders global memory accesses
// within the block). The parameter block is BATCH_PARAM_BYTES (4096) bytes: the record count at
// offset 0, the records from offset 16. Codes, shared with src/gpu.rs (`tape_*`):
//   code = kind | op << 8 | type << 16
//   kind: 0 binary (out = op(a, b)), 1 unary (out = op(a)), 2 fill (out = the bits in b),
//         3 binary with a scalar (out = op(a, the bits in b))
//   op:   BinaryOp / UnaryOp in declaration order
//   type: 0 f32, 1 f16, 2 bf16, 3 i32, 4 i64, 5 f64
// Records of unsupported (op, type) pairs are never written (the launchers check first); the
// kernel skips them.
#define TAPE_RECORDS 127
struct TapeRecord {
    uint32_t code;
    uint32_t n;
    uint64_t a, b, out;
};
struct Tape {
    uint32_t count;
    uint32_t pad[3];
    TapeRecord r[TAPE_RECORDS];
};
static_assert(sizeof(TapeRecord) == 32, "record layout shared with gpu.rs");
static_assert(sizeof(Tape) <= 4096, "one parameter block");

// Each thread loads TAPE_UNROLL elements before it stores any (two rounds cover a record of
// BATCH_MAX_ELEMS): a memory latency per round instead of per element (8: 128 registers and a
// spill). An element is read
// and written by the same thread, so `out` may be `a` or `b`.
#define TAPE_UNROLL 4
template <typename Op, typename T, bool SCALAR>
__device__ __forceinline__ void tape_binary(const TapeRecord &r) {
    const T *a = reinterpret_cast<const T *>(r.a);
    const T *b = reinterpret_cast<const T *>(r.b);
    T s;
    memcpy(&s, &r.b, sizeof(T));
    T *o = reinterpret_cast<T *>(r.out);
    for (uint32_t base = threadIdx.x; base < r.n; base += TAPE_UNROLL * GX_THREADS) {
        T x[TAPE_UNROLL], y[TAPE_UNROLL];
#pragma unroll
        for (int u = 0; u < TAPE_UNROLL; ++u) {
            const uint32_t i = base + u * GX_THREADS;
            if (i < r.n) {
                x[u] = a[i];
                y[u] = SCALAR ? s : b[i];
            }
        }
#pragma unroll
        for (int u = 0; u < TAPE_UNROLL; ++u) {
            const uint32_t i = base + u * GX_THREADS;
            if (i < r.n) o[i] = Apply<Op, T>::go(x[u], y[u]);
        }
    }
}
template <typename Op, typename T> __device__ __forceinline__ void tape_unary(const TapeRecord &r) {
    const T *a = reinterpret_cast<const T *>(r.a);
    T *o = reinterpret_cast<T *>(r.out);
    for (uint32_t base = threadIdx.x; base < r.n; base += TAPE_UNROLL * GX_THREADS) {
        T x[TAPE_UNROLL];
#pragma unroll
        for (int u = 0; u < TAPE_UNROLL; ++u) {
            const uint32_t i = base + u * GX_THREADS;
            if (i < r.n) x[u] = a[i];
        }
#pragma unroll
        for (int u = 0; u < TAPE_UNROLL; ++u) {
            const uint32_t i = base + u * GX_THREADS;
            if (i < r.n) o[i] = ApplyU<Op, T>::go(x[u]);
        }
    }
}
template <typename T> __device__ __forceinline__ void tape_fill(const TapeRecord &r) {
    T v;
    memcpy(&v, &r.b, sizeof(T));
    T *o = reinterpret_cast<T *>(r.out);
    for (uint32_t i = threadIdx.x; i < r.n; i += GX_THREADS) o[i] = v;
}

// The dtype switches of a record: f32, f16, bf16, f64, and with INTS also i32, i64 (the float-only
// ops never get an integer code from gpu.rs; with INTS false such a record does nothing).
template <typename Op, bool INTS, bool SCALAR>
__device__ __forceinline__ void tape_binary_as(uint32_t t, const TapeRecord &r) {
    switch (t) {
    case 0: tape_binary<Op, float, SCALAR>(r); break;
    case 1: tape_binary<Op, __half, SCALAR>(r); break;
    case 2: tape_binary<Op, __nv_bfloat16, SCALAR>(r); break;
    case 3: if constexpr (INTS) tape_binary<Op, int32_t, SCALAR>(r); break;
    case 4: if constexpr (INTS) tape_binary<Op, int64_t, SCALAR>(r); break;
    case 5: tape_binary<Op, double, SCALAR>(r); break;
    }
}
template <bool SCALAR> __device__ __forceinline__ void tape_binary_op(uint32_t op, uint32_t ty, const TapeRecord &r) {
    switch (op) {
    case 0: tape_binary_as<OpAdd, true, SCALAR>(ty, r); break;
    case 1: tape_binary_as<OpSub, true, SCALAR>(ty, r); break;
    case 2: tape_binary_as<OpMul, true, SCALAR>(ty, r); break;
    case 3: tape_binary_as<OpDiv, false, SCALAR>(ty, r); break;
    case 4: tape_binary_as<OpMax, true, SCALAR>(ty, r); break;
    case 5: tape_binary_as<OpMin, true, SCALAR>(ty, r); break;
    case 6: tape_binary_as<OpPow, true, SCALAR>(ty, r); break;
    // The later ops (floor_divide, ..., bitwise_xor) are not on the tape (gpu.rs's
    // `on_tape`): their code would push the tape kernel past its registers.
    }
}
template <typename Op, bool INTS> __device__ __forceinline__ void tape_unary_as(uint32_t t, const TapeRecord &r) {
    switch (t) {
    case 0: tape_unary<Op, float>(r); break;
    case 1: tape_unary<Op, __half>(r); break;
    case 2: tape_unary<Op, __nv_bfloat16>(r); break;
    case 3: if constexpr (INTS) tape_unary<Op, int32_t>(r); break;
    case 4: if constexpr (INTS) tape_unary<Op, int64_t>(r); break;
    case 5: tape_unary<Op, double>(r); break;
    }
}

// The tape's unary op codes: positions in GX_UNARY_OPS.
enum {
#define GX_UNARY_CODE(OPNAME, OP, KIND) GXU_##OPNAME,
    GX_UNARY_OPS(GX_UNARY_CODE)
#undef GX_UNARY_CODE
};
#define GX_INTS_ALL true
#define GX_INTS_FLOAT false

extern "C" __global__ void __launch_bounds__(GX_THREADS) tape(const __grid_constant__ Tape t) {
    for (uint32_t k = 0; k < t.count && k < TAPE_RECORDS; ++k) {
        const TapeRecord &r = t.r[k];
        const uint32_t kind = r.code & 0xff, op = (r.code >> 8) & 0xff, ty = r.code >> 16;
        if (kind == 0) {
            tape_binary_op<false>(op, ty, r);
        } else if (kind == 3) {
            tape_binary_op<true>(op, ty, r);
        } else if (kind == 1) {
            switch (op) {
#define GX_TAPE_UNARY(OPNAME, OP, KIND)                                                        \
    case GXU_##OPNAME: tape_unary_as<OP, GX_INTS_##KIND>(ty, r); break;
                GX_UNARY_OPS(GX_TAPE_UNARY)
#undef GX_TAPE_UNARY
            }
        } else if (kind == 2) {
            switch (ty) {
            case 0: tape_fill<float>(r); break;
            case 1: tape_fill<__half>(r); break;
            case 2: tape_fill<__nv_bfloat16>(r); break;
            case 3: tape_fill<int32_t>(r); break;
            case 4: tape_fill<int64_t>(r); break;
            case 5: tape_fill<double>(r); break;
            }
        }
        __syncthreads();
    }
}

// ---- mixed precision ------------------------------------------------------------------------
// mixed_<op>_f32_<h>(a, b, out, n, swap, vec): out[i] = op(a[i], (float)b[i]), or op((float)b[i],
// a[i]) when `swap`, for `a` and `out` f32 and `b` f16 or bf16 (an f32 tensor and a half one,
// PyTorch's promotion to f32, in one pass where the promoted op would first convert `b`). The
// CPU twin is `cpu::binary_mixed`. With `vec` (a and out on 16 bytes, b on 8): four elements a
// thread at a time.
template <typename H> struct alignas(8) GxHalf4 {
    H v[4];
};
__device__ __forceinline__ float gx_f32(__half h) { return __half2float(h); }
__device__ __forceinline__ float gx_f32(__nv_bfloat16 h) { return __bfloat162float(h); }

template <typename Op, typename H>
__device__ __forceinline__ void mixed_impl(const float *a, const H *b, float *out, uint64_t n, int swap, int vec) {
    const uint64_t tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    uint64_t done = 0;
    if (vec) {
        const uint64_t nv = n / 4;
        for (uint64_t i = tid; i < nv; i += stride) {
            float4 x = reinterpret_cast<const float4 *>(a)[i];
            GxHalf4<H> y = reinterpret_cast<const GxHalf4<H> *>(b)[i];
            float *xs = &x.x;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float h = gx_f32(y.v[j]);
                xs[j] = swap ? Op::f(h, xs[j]) : Op::f(xs[j], h);
            }
            reinterpret_cast<float4 *>(out)[i] = x;
        }
        done = nv * 4;
    }
    for (uint64_t i = done + tid; i < n; i += stride) {
        const float h = gx_f32(b[i]);
        out[i] = swap ? Op::f(h, a[i]) : Op::f(a[i], h);
    }
}

#define GX_MIXED(OPNAME, OP, NAME, H)                                                              \
    extern "C" __global__ void __launch_bounds__(GX_THREADS)                                       \
        mixed_##OPNAME##_f32_##NAME(const float *a, const H *b, float *out, uint64_t n, int swap, \
                                    int vec) {                                                     \
        mixed_impl<OP, H>(a, b, out, n, swap, vec);                                                \
    }
GX_MIXED(add, OpAdd, f16, __half)
GX_MIXED(add, OpAdd, bf16, __nv_bfloat16)
GX_MIXED(sub, OpSub, f16, __half)
GX_MIXED(sub, OpSub, bf16, __nv_bfloat16)
GX_MIXED(mul, OpMul, f16, __half)
GX_MIXED(mul, OpMul, bf16, __nv_bfloat16)
