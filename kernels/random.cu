// Random number kernels of Genesis: uniform [0, 1), standard normal and integers in [low, high),
// from the counter-based Philox4x32-10 generator (Salmon et al., SC'11), so that every element is
// a pure function of (seed, offset, index) and the CPU twin (crates/genesis-kernels/src/random.rs)
// gives bit-identical values.
//
// Element i of a call draws from Philox block b = offset + i / P, with counter (lo(b), hi(b), 0, 0)
// and key (lo(seed), hi(seed)), where P is the number of elements one block of four 32-bit words
// feeds:
//   * rand  f32/f16/bf16: P = 4, word i % 4, the top p bits (p = 24, 11, 8) times 2^-p (exact).
//   * rand  f64:          P = 2, words 2(i % 2) and 2(i % 2) + 1 as a u64, top 53 bits * 2^-53.
//   * randn f32/f16/bf16: P = 4, Box-Muller in f32 on each pair of words (a, b) = (0, 1) and
//     (2, 3): u1 = ((a >> 8) + 1) * 2^-24 in (0, 1], u2 = (b >> 8) * 2^-24: r = sqrt(-2 ln u1),
//     element 4j + 2p gets r cos(2 pi u2), 4j + 2p + 1 gets r sin(2 pi u2) (|z| <= 5.77, as
//     PyTorch's f32 normals are bounded by their 32-bit uniforms), rounded once to f16/bf16.
//   * randn f64:          P = 2, the same in f64 on u1 = (top 53 bits of words 0,1 + 1) * 2^-53
//     and u2 = top 53 bits of words 2,3 * 2^-53.
//   ln, cos and sin are Genesis's own (series below) evaluated with explicitly rounded
//   operations (no FMA contraction in f64; explicit FMAs in f32), so the CPU twin, which runs
//   the same sequence of IEEE operations, gets the same bits.
//   * randint (i32, i64): P = 2, low + (u64 of words 2(i % 2), 2(i % 2) + 1) mod range (the
//     remainder by a multiply-high with floor(2^64 / range) and two corrections, exact).
//
// Launch contract (src/random.rs): one-dimensional blocks; thread t of the grid handles Philox
// blocks t, t + stride, ... until all n elements are written.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <cuda/std/type_traits>

struct Words { uint32_t w[4]; };

__device__ __forceinline__ Words philox(uint64_t block, uint64_t seed) {
    uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
    Words r; r.w[0] = c0; r.w[1] = c1; r.w[2] = c2; r.w[3] = c3;
    return r;
}

__device__ __forceinline__ uint64_t u64_of(uint32_t lo, uint32_t hi) {
    return (uint64_t)lo | ((uint64_t)hi << 32);
}

// f64 helpers with explicit rounding: the same IEEE operations as the CPU twin.
__device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }

// ln(x) for x in (0, 1]: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh(s),
// s = (m - 1) / (m + 1), |s| < 0.172; the series to s^25 is exact to well below an ulp.
__device__ double genesis_ln(double x) {
    uint64_t bits = __double_as_longlong(x);
    int e = (int)((bits >> 52) & 0x7ff) - 1023;
    double m = __longlong_as_double((long long)((bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull));
    if (m > 1.4142135623730951) {
        m = mul(m, 0.5);
        e += 1;
    }
    double s = __ddiv_rn(add(m, -1.0), add(m, 1.0));
    double s2 = mul(s, s);
    double p = 1.0 / 25.0;
    for (int k = 23; k >= 1; k -= 2) p = add(mul(p, s2), 1.0 / (double)k);
    double lnm = mul(mul(2.0, s), p);
    return add(mul((double)e, 0.6931471805599453), lnm);
}

// (cos 2 pi u, sin 2 pi u) for u in [0, 1): quadrant q = floor(4u), phi = (4u - q) pi/2 in
// [0, pi/2); Taylor series to phi^22 / phi^21.
__device__ void genesis_cos_sin(double u, double* c, double* s) {
    double t = mul(u, 4.0);
    double q = floor(t);
    double phi = mul(add(t, -q), 1.5707963267948966);
    double p2 = mul(phi, phi);
    double cs = 1.0, sn = 1.0;
    for (int k = 22; k >= 2; k -= 2) cs = add(1.0, mul(cs, -p2 / (double)(k * (k - 1))));
    for (int k = 21; k >= 3; k -= 2) sn = add(1.0, mul(sn, -p2 / (double)(k * (k - 1))));
    sn = mul(sn, phi);
    int qi = (int)q;
    if (qi == 0) { *c = cs; *s = sn; }
    else if (qi == 1) { *c = -sn; *s = cs; }
    else if (qi == 2) { *c = -cs; *s = -sn; }
    else { *c = sn; *s = -cs; }
}

__device__ __forceinline__ void normals(uint64_t block, uint64_t seed, double* z0, double* z1) {
    Words w = philox(block, seed);
    double u1 = mul((double)((u64_of(w.w[0], w.w[1]) >> 11) + 1), 1.1102230246251565e-16);
    double u2 = mul((double)(u64_of(w.w[2], w.w[3]) >> 11), 1.1102230246251565e-16);
    double r = __dsqrt_rn(mul(-2.0, genesis_ln(u1)));
    double c, s;
    genesis_cos_sin(u2, &c, &s);
    *z0 = mul(r, c);
    *z1 = mul(r, s);
}

// The f32 twins of the above, for f32, f16 and bf16 normals, with fused multiply-adds (one
// rounding each; the CPU twin uses `mul_add`, an FMA instruction where the processor has one):
// ln to s^9 and cos/sin on an octant to phi^10/phi^11, each far below an f32 ulp. Every
// constant is an f32 the twin spells alike.
__device__ __forceinline__ float fmul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float fadd(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float ffma(float a, float b, float c) { return __fmaf_rn(a, b, c); }

__device__ float genesis_lnf(float x) {
    uint32_t bits = __float_as_uint(x);
    int e = (int)((bits >> 23) & 0xff) - 127;
    float m = __uint_as_float((bits & 0x007fffffu) | 0x3f800000u);
    if (m > __uint_as_float(0x3fb504f3u)) {  // sqrt(2)
        m = fmul(m, 0.5f);
        e += 1;
    }
    float s = __fdiv_rn(fadd(m, -1.0f), fadd(m, 1.0f));
    float s2 = fmul(s, s);
    float p = 1.0f / 9.0f;
    p = ffma(p, s2, 1.0f / 7.0f);
    p = ffma(p, s2, 1.0f / 5.0f);
    p = ffma(p, s2, 1.0f / 3.0f);
    p = ffma(p, s2, 1.0f);
    float lnm = fmul(fmul(2.0f, s), p);
    // ln 2 split so that e * hi is exact.
    float ef = (float)e;
    return ffma(ef, __uint_as_float(0x3f317200u), ffma(ef, __uint_as_float(0x35bfbe8eu), lnm));
}

// (cos 2 pi u, sin 2 pi u) for u in [0, 1): octant q = floor(8u), phi = f pi/4 with f = 8u - q,
// or 1 - f in odd octants (exact: f is a multiple of 2^-21), so phi is in [0, pi/4].
__device__ void genesis_cos_sinf(float u, float* c, float* s) {
    float t = fmul(u, 8.0f);
    float q = floorf(t);
    int qi = (int)q;
    float f = fadd(t, -q);
    if (qi & 1) f = fadd(1.0f, -f);
    float phi = fmul(f, __uint_as_float(0x3f490fdbu));  // pi / 4
    float p2 = fmul(phi, phi);
    float cs = 1.0f / 3628800.0f;  // 1/10!, then down to 1 with alternating signs
    cs = ffma(cs, p2, -1.0f / 40320.0f);
    cs = ffma(cs, p2, 1.0f / 720.0f);
    cs = ffma(cs, p2, -1.0f / 24.0f);
    cs = ffma(cs, p2, 0.5f);
    cs = ffma(cs, -p2, 1.0f);  // 1 - p2 (1/2 - p2 (1/24 - ...))
    float sn = -1.0f / 39916800.0f;  // -1/11!
    sn = ffma(sn, p2, 1.0f / 362880.0f);
    sn = ffma(sn, p2, -1.0f / 5040.0f);
    sn = ffma(sn, p2, 1.0f / 120.0f);
    sn = ffma(sn, p2, -1.0f / 6.0f);
    sn = ffma(sn, p2, 1.0f);
    sn = fmul(sn, phi);
    // The octant's swap and signs as selects (no branch on a per-lane octant): cos and sin
    // swap in octants 1, 2, 5, 6; cos is negative in 2..5, sin in 4..7.
    const bool swap = ((qi + 1) >> 1) & 1;
    const float a = swap ? sn : cs, b = swap ? cs : sn;
    *c = (((qi + 2) >> 2) & 1) ? -a : a;
    *s = ((qi >> 2) & 1) ? -b : b;
}

__device__ __forceinline__ void normals_f32(uint32_t a, uint32_t b, float* z0, float* z1) {
    const float inv24 = 1.0f / 16777216.0f;
    float u1 = fmul((float)((a >> 8) + 1), inv24);
    float u2 = fmul((float)(b >> 8), inv24);
    float r = __fsqrt_rn(fmul(-2.0f, genesis_lnf(u1)));
    float c, s;
    genesis_cos_sinf(u2, &c, &s);
    *z0 = fmul(r, c);
    *z1 = fmul(r, s);
}

template <typename T> __device__ __forceinline__ T from_f64(double x);
template <> __device__ __forceinline__ float from_f64<float>(double x) { return __double2float_rn(x); }
template <> __device__ __forceinline__ double from_f64<double>(double x) { return x; }
// f16 and bf16 through f32 (both steps round to nearest-even), exactly as the CPU twin does.
template <> __device__ __forceinline__ __half from_f64<__half>(double x) { return __float2half_rn(__double2float_rn(x)); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f64<__nv_bfloat16>(double x) { return __float2bfloat16_rn(__double2float_rn(x)); }

// Uniform from one 32-bit word with the top P bits: exact in every type.
template <typename T, int P> __device__ __forceinline__ T unit(uint32_t w) {
    return from_f64<T>((double)(w >> (32 - P)) * (1.0 / (double)(1u << P)));
}

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Four elements 4j .. 4j + 3 of a 2- or 4-byte type: one 8- or 16-byte store when the output
// is aligned for it and all four exist.
template <typename T> struct Quad {
    typedef typename cuda::std::conditional<sizeof(T) == 4, uint4, uint2>::type V;
};
template <typename T>
__device__ __forceinline__ void store4(T* out, uint64_t i, uint64_t n, const T (&v)[4], bool vec) {
    if (vec && i + 4 <= n) {
        typename Quad<T>::V q;
        memcpy(&q, v, sizeof(q));
        *reinterpret_cast<typename Quad<T>::V*>(out + i) = q;
    } else {
#pragma unroll
        for (int l = 0; l < 4; ++l)
            if (i + l < n) out[i + l] = v[l];
    }
}

template <typename T, int P>
__device__ void rand_words(T* out, uint64_t n, uint64_t seed, uint64_t offset) {
    uint64_t blocks = (n + 3) / 4;
    const bool vec = ((uintptr_t)out % sizeof(typename Quad<T>::V)) == 0;
    for (uint64_t j = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; j < blocks;
         j += (uint64_t)gridDim.x * blockDim.x) {
        Words w = philox(offset + j, seed);
        T v[4];
#pragma unroll
        for (int l = 0; l < 4; ++l) v[l] = unit<T, P>(w.w[l]);
        store4<T>(out, 4 * j, n, v, vec);
    }
}

extern "C" __global__ void rand_f32(float* out, uint64_t n, uint64_t seed, uint64_t offset) {
    rand_words<float, 24>(out, n, seed, offset);
}
extern "C" __global__ void rand_f16(__half* out, uint64_t n, uint64_t seed, uint64_t offset) {
    rand_words<__half, 11>(out, n, seed, offset);
}
extern "C" __global__ void rand_bf16(__nv_bfloat16* out, uint64_t n, uint64_t seed, uint64_t offset) {
    rand_words<__nv_bfloat16, 8>(out, n, seed, offset);
}
extern "C" __global__ void rand_f64(double* out, uint64_t n, uint64_t seed, uint64_t offset) {
    uint64_t blocks = (n + 1) / 2;
    for (uint64_t j = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; j < blocks;
         j += (uint64_t)gridDim.x * blockDim.x) {
        Words w = philox(offset + j, seed);
        out[2 * j] = (double)(u64_of(w.w[0], w.w[1]) >> 11) * 1.1102230246251565e-16;
        if (2 * j + 1 < n) out[2 * j + 1] = (double)(u64_of(w.w[2], w.w[3]) >> 11) * 1.1102230246251565e-16;
    }
}

template <typename T>
__device__ void randn_impl(T* out, uint64_t n, uint64_t seed, uint64_t offset) {
    uint64_t blocks = (n + 1) / 2;
    for (uint64_t j = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; j < blocks;
         j += (uint64_t)gridDim.x * blockDim.x) {
        double z0, z1;
        normals(offset + j, seed, &z0, &z1);
        out[2 * j] = from_f64<T>(z0);
        if (2 * j + 1 < n) out[2 * j + 1] = from_f64<T>(z1);
    }
}

template <typename T>
__device__ void randn4_impl(T* out, uint64_t n, uint64_t seed, uint64_t offset) {
    uint64_t blocks = (n + 3) / 4;
    const bool vec = ((uintptr_t)out % sizeof(typename Quad<T>::V)) == 0;
    for (uint64_t j = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; j < blocks;
         j += (uint64_t)gridDim.x * blockDim.x) {
        Words w = philox(offset + j, seed);
        float z[4];
        normals_f32(w.w[0], w.w[1], &z[0], &z[1]);
        normals_f32(w.w[2], w.w[3], &z[2], &z[3]);
        T v[4];
#pragma unroll
        for (int l = 0; l < 4; ++l) v[l] = from_f32<T>(z[l]);
        store4<T>(out, 4 * j, n, v, vec);
    }
}

extern "C" __global__ void randn_f32(float* out, uint64_t n, uint64_t seed, uint64_t offset) {
    randn4_impl<float>(out, n, seed, offset);
}
extern "C" __global__ void randn_f16(__half* out, uint64_t n, uint64_t seed, uint64_t offset) {
    randn4_impl<__half>(out, n, seed, offset);
}
extern "C" __global__ void randn_bf16(__nv_bfloat16* out, uint64_t n, uint64_t seed, uint64_t offset) {
    randn4_impl<__nv_bfloat16>(out, n, seed, offset);
}
extern "C" __global__ void randn_f64(double* out, uint64_t n, uint64_t seed, uint64_t offset) {
    randn_impl<double>(out, n, seed, offset);
}

// x mod range without a 64-bit division: `magic` is floor(2^64 / range) (0 for range 1), so
// q = umulhi(x, magic) is floor(x / range) or at most two less, and two conditional
// subtractions finish the remainder exactly.
__device__ __forceinline__ uint64_t mod_range(uint64_t x, uint64_t range, uint64_t magic) {
    if (range == 1) return 0;
    const uint64_t q = __umul64hi(x, magic);
    uint64_t r = x - q * range;
    if (r >= range) r -= range;
    if (r >= range) r -= range;
    return r;
}

template <typename T> struct Pair;
template <> struct Pair<int32_t> {
    typedef int2 V;
    static __device__ __forceinline__ V of(int32_t a, int32_t b) { return make_int2(a, b); }
};
template <> struct Pair<int64_t> {
    typedef longlong2 V;
    static __device__ __forceinline__ V of(int64_t a, int64_t b) { return make_longlong2(a, b); }
};

template <typename T>
__device__ void randint_impl(T* out, uint64_t n, uint64_t seed, uint64_t offset, int64_t low,
                             uint64_t range, uint64_t magic) {
    uint64_t blocks = (n + 1) / 2;
    // Both values of a block in one store when the output is aligned for the pair.
    const bool paired = ((uintptr_t)out % sizeof(typename Pair<T>::V)) == 0;
    for (uint64_t j = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; j < blocks;
         j += (uint64_t)gridDim.x * blockDim.x) {
        Words w = philox(offset + j, seed);
        const T a = (T)((uint64_t)low + mod_range(u64_of(w.w[0], w.w[1]), range, magic));
        const T b = (T)((uint64_t)low + mod_range(u64_of(w.w[2], w.w[3]), range, magic));
        if (2 * j + 1 < n && paired) {
            *reinterpret_cast<typename Pair<T>::V*>(out + 2 * j) = Pair<T>::of(a, b);
        } else {
            out[2 * j] = a;
            if (2 * j + 1 < n) out[2 * j + 1] = b;
        }
    }
}

extern "C" __global__ void randint_i32(int32_t* out, uint64_t n, uint64_t seed, uint64_t offset,
                                       int64_t low, uint64_t range, uint64_t magic) {
    randint_impl<int32_t>(out, n, seed, offset, low, range, magic);
}
extern "C" __global__ void randint_i64(int64_t* out, uint64_t n, uint64_t seed, uint64_t offset,
                                       int64_t low, uint64_t range, uint64_t magic) {
    randint_impl<int64_t>(out, n, seed, offset, low, range, magic);
}
