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
//   * randn (any float):  P = 2, Box-Muller on u1 = (top 53 bits of words 0,1 + 1) * 2^-53 in
//     (0, 1] and u2 = top 53 bits of words 2,3 * 2^-53: r = sqrt(-2 ln u1), element 2j gets
//     r cos(2 pi u2) and element 2j + 1 gets r sin(2 pi u2), computed in f64 and rounded to the
//     output type (f16 and bf16 through f32). ln, cos and sin are Genesis's own (series below) evaluated with
//     explicitly rounded operations (no FMA contraction), so the CPU twin, which runs the same
//     sequence of IEEE operations, gets the same bits.
//   * randint (i32, i64): P = 2, low + (u64 of words 2(i % 2), 2(i % 2) + 1) mod range (the
//     remainder by a multiply-high with floor(2^64 / range) and two corrections, exact).
//
// Launch contract (src/random.rs): one-dimensional blocks; thread t of the grid handles Philox
// blocks t, t + stride, ... until all n elements are written.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

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

template <typename T, int P>
__device__ void rand_words(T* out, uint64_t n, uint64_t seed, uint64_t offset) {
    uint64_t blocks = (n + 3) / 4;
    for (uint64_t j = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; j < blocks;
         j += (uint64_t)gridDim.x * blockDim.x) {
        Words w = philox(offset + j, seed);
#pragma unroll
        for (int l = 0; l < 4; ++l) {
            uint64_t i = 4 * j + l;
            if (i < n) out[i] = unit<T, P>(w.w[l]);
        }
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

extern "C" __global__ void randn_f32(float* out, uint64_t n, uint64_t seed, uint64_t offset) {
    randn_impl<float>(out, n, seed, offset);
}
extern "C" __global__ void randn_f16(__half* out, uint64_t n, uint64_t seed, uint64_t offset) {
    randn_impl<__half>(out, n, seed, offset);
}
extern "C" __global__ void randn_bf16(__nv_bfloat16* out, uint64_t n, uint64_t seed, uint64_t offset) {
    randn_impl<__nv_bfloat16>(out, n, seed, offset);
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
