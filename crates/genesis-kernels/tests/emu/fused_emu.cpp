// Host emulation of kernels/classifier.cu and kernels/layernorm.cu (fused_run.sh builds and runs
// it under AddressSanitizer; no GPU needed): every kernel of both files, every dtype, the
// vector and scalar paths, grid-stride launches, odd sizes, strided rows, ignored and bad
// targets, in place and not, residual / weight / bias present or not, accumulation, against
// f64 references within the bounds of tests/gpu_classifier.rs and tests/gpu_layernorm.rs.
// A block's threads run as OS threads (blocks one after another); __syncthreads is a barrier
// of the block, __shfl_xor_sync exchanges through a barrier of the warp; static __shared__
// arrays are function statics (shared by the block's threads), dynamic shared memory starts
// as 0xff bytes (NaN); every global buffer is its own exact-size allocation, so ASan reports
// any access outside it, and inputs are compared with copies after each launch. What it
// cannot check: timing races (barriers are exact here), the hardware's expf/logf, speed.
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(x) alignas(x)
#define __shared__ static

struct dim3 { unsigned x = 1, y = 1, z = 1; };
struct __half { uint16_t x; };
struct __nv_bfloat16 { uint16_t x; };

thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;
thread_local int emu_tid;

template <class T> static T min(T a, T b) { return a < b ? a : b; }
template <class T> static T max(T a, T b) { return a > b ? a : b; }
static inline float __int_as_float(uint32_t x) { float f; memcpy(&f, &x, 4); return f; }
static inline uint32_t fbits(float f) { uint32_t x; memcpy(&x, &f, 4); return x; }
static inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }

static inline uint16_t bf16_rn(float f) {
    uint32_t x = fbits(f);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}
static inline float bf16_f(uint16_t h) { return __int_as_float((uint32_t)h << 16); }
static inline uint16_t f16_rn(float f) { _Float16 h = (_Float16)f; uint16_t x; memcpy(&x, &h, 2); return x; }
static inline float f16_f(uint16_t x) { _Float16 v; memcpy(&v, &x, 2); return (float)v; }
static inline float __half2float(__half h) { return f16_f(h.x); }
static inline __half __float2half_rn(float f) { return __half{f16_rn(f)}; }
static inline float __bfloat162float(__nv_bfloat16 h) { return bf16_f(h.x); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{bf16_rn(f)}; }

static std::mutex atomic_mu;
static unsigned long long atomicMin(unsigned long long *p, unsigned long long v) {
    std::lock_guard<std::mutex> g(atomic_mu);
    unsigned long long old = *p;
    if (v < old) *p = v;
    return old;
}

// --- Block state.
static std::barrier<> *block_bar;
struct Warp {
    std::barrier<> bar{32};
    uint64_t v[32];
};
static std::vector<Warp *> warps;
static std::vector<uint8_t> dyn_smem;
static void *emu_dyn_smem() { return dyn_smem.data(); }

template <class V> static V __shfl_xor_sync(unsigned, V v, int x) {
    static_assert(sizeof(V) <= 8, "shuffle of at most 8 bytes");
    Warp *w = warps[emu_tid / 32];
    const int l = emu_tid & 31;
    memcpy(&w->v[l], &v, sizeof(V));
    w->bar.arrive_and_wait();
    V r;
    memcpy(&r, &w->v[l ^ x], sizeof(V));
    w->bar.arrive_and_wait();
    return r;
}
static void __syncthreads() { block_bar->arrive_and_wait(); }

#include "classifier_host.inc"
#include "layernorm_host.inc"

// Runs `fn` on a grid of `grid` blocks of bx x by threads with `smem` bytes of dynamic shared
// memory.
static void launch(const std::function<void()> &fn, unsigned grid, unsigned bx, unsigned by, size_t smem) {
    const unsigned n = bx * by;
    if (n % 32) { fprintf(stderr, "block of %u threads\n", n); exit(2); }
    gridDim = dim3{grid, 1, 1};
    blockDim = dim3{bx, by, 1};
    std::barrier<> bar(n);
    block_bar = &bar;
    warps.clear();
    for (unsigned w = 0; w < n / 32; ++w) warps.push_back(new Warp);
    dyn_smem.assign(smem + 16, 0xff);
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < n; ++t)
        ts.emplace_back([&, t] {
            emu_tid = (int)t;
            threadIdx = dim3{t % bx, t / bx, 0};
            for (unsigned b = 0; b < grid; ++b) {
                blockIdx = dim3{b, 0, 0};
                fn();
                bar.arrive_and_wait();
            }
        });
    for (auto &t : ts) t.join();
    for (auto *w : warps) delete w;
    warps.clear();
}

// --- Buffers: one exact-size allocation each (ASan sees every overrun).
template <class E> struct Buf {
    E *p = nullptr;
    size_t n = 0;
    explicit Buf(size_t len, E fill = E{}) : n(len) {
        void *q = nullptr;
        if (posix_memalign(&q, 16, len ? len * sizeof(E) : 1)) abort();
        p = (E *)q;
        for (size_t i = 0; i < len; ++i) p[i] = fill;
    }
    Buf(const Buf &) = delete;
    ~Buf() { free(p); }
    u64 addr() const { return (u64)(uintptr_t)p; }
    std::vector<E> copy() const { return std::vector<E>(p, p + n); }
    bool same(const std::vector<E> &c) const { return memcmp(p, c.data(), n * sizeof(E)) == 0; }
};

// The element types: conversion to and from float, unit roundoff.
template <class T> struct Ty;
template <> struct Ty<float> {
    static float f(float x) { return x; }
    static float of(double x) { return (float)x; }
    static constexpr double U = 1.0 / (1 << 24);
    static constexpr double TINY = 1e-45;  // the spacing of the type's subnormals
    static constexpr const char *name = "f32";
};
template <> struct Ty<__half> {
    static float f(__half x) { return f16_f(x.x); }
    static __half of(double x) { return __half{f16_rn((float)x)}; }
    static constexpr double U = 1.0 / 2048;
    static constexpr double TINY = 1.0 / (1 << 24);
    static constexpr const char *name = "f16";
};
template <> struct Ty<__nv_bfloat16> {
    static float f(__nv_bfloat16 x) { return bf16_f(x.x); }
    static __nv_bfloat16 of(double x) { return __nv_bfloat16{bf16_rn((float)x)}; }
    static constexpr double U = 1.0 / 256;
    static constexpr double TINY = 1e-40;
    static constexpr const char *name = "bf16";
};
static bool bits_eq(float a, float b) { return fbits(a) == fbits(b) || (a != a && b != b); }

static long failures = 0, checks = 0;
static void check(bool ok, const char *what, const char *ctx, long i, double got, double want, double tol) {
    ++checks;
    if (!ok && failures++ < 40)
        fprintf(stderr, "FAIL %s [%s] at %ld: got %.9g want %.9g (tol %.3g)\n", what, ctx, i, got, want, tol);
}
static bool close(double g, double w, double tol) {
    if (std::isnan(w)) return std::isnan(g);
    if (std::isinf(w)) return g == w;
    return std::fabs(g - w) <= tol;
}

typedef void (*Kern)(const CeArgs);
template <class T> struct CeK;
#define CEK(T, N)                                                                                  \
    template <> struct CeK<T> {                                                                    \
        static Kern fwd(bool v) { return v ? ce_fwd_##N##_v : ce_fwd_##N; }                       \
        static Kern bwd(bool v) { return v ? ce_bwd_##N##_v : ce_bwd_##N; }                       \
        static Kern fused(bool v) { return v ? ce_fused_##N##_v : ce_fused_##N; }                 \
    };
CEK(float, f32)
CEK(__half, f16)
CEK(__nv_bfloat16, bf16)

// ---- Classifier.
template <class T>
static void classifier_case(std::mt19937_64 &rng, u64 rows, u64 V, u64 stride, bool vec, unsigned grid, int mode,
                            bool device_dloss, bool bad) {
    char ctx[160];
    snprintf(ctx, sizeof ctx, "ce %s rows %llu V %llu stride %llu vec %d grid %u mode %d dev %d bad %d", Ty<T>::name,
             rows, V, stride, vec, grid, mode, device_dloss, bad);
    const i64 ignore = -100;
    const u64 span = rows ? (rows - 1) * stride + V : 0;
    std::uniform_real_distribution<double> U(-6, 6);
    Buf<T> x(span);
    for (u64 i = 0; i < span; ++i) x.p[i] = Ty<T>::of(U(rng));
    // Special rows: a NaN, a +inf, -inf entries, a large offset.
    if (rows > 6) {
        x.p[3 * stride + V / 2] = Ty<T>::of(NAN);
        x.p[4 * stride] = Ty<T>::of(-INFINITY);
        for (u64 k = 0; k < V; ++k) x.p[5 * stride + k] = Ty<T>::of(Ty<T>::f(x.p[5 * stride + k]) + 1000.0);
    }
    Buf<i64> tg(rows);
    u64 count = 0;
    i64 first_bad = -1;
    for (u64 n = 0; n < rows; ++n) {
        tg.p[n] = n % 7 == 2 ? ignore : (i64)(rng() % V);
        if (bad && n % 11 == 9) {
            tg.p[n] = n % 2 ? (i64)V : -1;
            if (first_bad < 0) first_bad = (i64)n;
        }
        count += tg.p[n] != ignore;
    }
    const auto x0 = x.copy(), t0 = tg.copy();
    // f64 reference.
    std::vector<double> lse(rows), loss(rows), g(rows);
    std::uniform_real_distribution<double> G(0.5, 2.0);
    Buf<float> dl(mode == 0 ? rows : 1);
    for (u64 i = 0; i < dl.n; ++i) dl.p[i] = (float)G(rng);
    const float dval = 1.25f;
    std::vector<double> tol_lse(rows);
    for (u64 n = 0; n < rows; ++n) {
        double m = -INFINITY;
        bool nan = false;
        for (u64 k = 0; k < V; ++k) {
            double v = Ty<T>::f(x.p[n * stride + k]);
            nan |= v != v;
            m = std::max(m, v);
        }
        double s = 0;
        if (std::isfinite(m) && !nan)
            for (u64 k = 0; k < V; ++k) s += std::exp(Ty<T>::f(x.p[n * stride + k]) - m);
        lse[n] = nan || !std::isfinite(m) ? NAN : m + std::log(s);
        tol_lse[n] = (8 + 2 * std::sqrt((double)V)) * (1.0 / (1 << 24)) * (1 + std::fabs(m) + std::fabs(std::log(s)));
        const i64 t = tg.p[n];
        const bool ign = t == ignore, bd = !ign && (t < 0 || t >= (i64)V);
        loss[n] = ign ? 0 : bd ? NAN : lse[n] - Ty<T>::f(x.p[n * stride + t]);
        double gv = device_dloss ? dl.p[mode == 0 ? n : 0] : dval;
        if (mode == 2) gv = (float)gv / (float)count;
        g[n] = bd ? NAN : gv;
    }
    auto base_args = [&](CeArgs &a) {
        memset(&a, 0, sizeof a);
        a.rows = rows;
        a.classes = V;
        a.in_stride = stride;
        a.out_stride = stride;
        a.ignore = ignore;
        a.targets = tg.addr();
        a.mode = mode;
        a.dloss = device_dloss ? dl.addr() : 0;
        a.dloss_value = dval;
    };
    // Forward.
    Buf<float> lo(rows, 7.0f), ls(rows, 7.0f);
    Buf<i64> st(1, -1);
    CeArgs a;
    base_args(a);
    a.logits = x.addr();
    a.loss = lo.addr();
    a.lse = ls.addr();
    a.status = st.addr();
    launch([&] { CeK<T>::fwd(vec)(a); }, grid, 512, 1, 0);
    check(st.p[0] == first_bad, "fwd status", ctx, 0, (double)st.p[0], (double)first_bad, 0);
    for (u64 n = 0; n < rows; ++n) {
        check(close(ls.p[n], lse[n], tol_lse[n]), "fwd lse", ctx, n, ls.p[n], lse[n], tol_lse[n]);
        check(close(lo.p[n], loss[n], tol_lse[n]), "fwd loss", ctx, n, lo.p[n], loss[n], tol_lse[n]);
    }
    // Count and reduce.
    Buf<u64> cnt(1, 12345);
    Buf<float> red(1, 7.0f);
    a.count = cnt.addr();
    a.out = red.addr();
    st.p[0] = -1;
    launch([&] { ce_count(a); }, 1, 1024, 1, 0);
    check(cnt.p[0] == count, "count", ctx, 0, (double)cnt.p[0], (double)count, 0);
    check(st.p[0] == first_bad, "count status", ctx, 0, (double)st.p[0], (double)first_bad, 0);
    if (mode != 0) {
        launch([&] { ce_reduce(a); }, 1, 1024, 1, 0);
        double s = 0, tol = 0;
        for (u64 n = 0; n < rows; ++n) s += lo.p[n], tol += std::fabs(lo.p[n]);
        const double want = mode == 2 ? s / (double)count : s;
        tol = 1e-6 * (mode == 2 ? tol / (double)count : tol);
        check(close(red.p[0], want, tol), "reduce", ctx, 0, red.p[0], want, tol);
    }
    // Fused, out of place (output rows out_stride = stride + 3 apart, sentinel gaps), and the
    // backward from the forward's lse, compared bit for bit.
    const u64 ostride = stride + 3, ospan = rows ? (rows - 1) * ostride + V : 0;
    const T sentinel = Ty<T>::of(12345.0);
    Buf<T> dx(ospan, sentinel), dx2(ospan, sentinel);
    Buf<float> lo2(rows, 7.0f), ls2(rows, 7.0f);
    CeArgs f = a;
    f.dlogits = dx.addr();
    f.out_stride = ostride;
    f.loss = lo2.addr();
    f.lse = ls2.addr();
    st.p[0] = -1;
    launch([&] { CeK<T>::fused(vec && ostride * sizeof(T) % 16 == 0)(f); }, grid, 512, 1, 0);
    check(st.p[0] == first_bad, "fused status", ctx, 0, (double)st.p[0], (double)first_bad, 0);
    for (u64 n = 0; n < rows; ++n) {
        check(bits_eq(lo2.p[n], lo.p[n]), "fused loss == fwd", ctx, n, lo2.p[n], lo.p[n], 0);
        check(bits_eq(ls2.p[n], ls.p[n]), "fused lse == fwd", ctx, n, ls2.p[n], ls.p[n], 0);
        const i64 t = tg.p[n];
        const bool fin = std::isfinite(lse[n]);
        for (u64 k = 0; k < ostride && n * ostride + k < ospan; ++k) {
            const double got = Ty<T>::f(dx.p[n * ostride + k]);
            if (k >= V) {
                check(got == 12345.0 || Ty<T>::f(sentinel) == got, "gap kept", ctx, n * ostride + k, got, 12345, 0);
                continue;
            }
            double want, tol;
            if (t == ignore) {
                want = 0, tol = 0;
                check(fbits(got) == 0, "ignored row +0", ctx, n * ostride + k, got, 0, 0);
            } else {
                const double p = fin ? std::exp(Ty<T>::f(x.p[n * stride + k]) - lse[n]) : NAN;
                const double oh = (i64)k == t ? 1.0 : 0.0;
                want = (p - oh) * g[n];
                tol = std::fabs(g[n]) * (p * (tol_lse[n] + 4.0 / (1 << 24)) + std::fabs(p - oh) / (1 << 24)) +
                      2 * Ty<T>::U * std::fabs(want) + Ty<T>::TINY;
                if (!std::isfinite(lse[n]) || !std::isfinite(g[n])) want = NAN;
            }
            check(close(got, want, tol), "fused dlogits", ctx, n * ostride + k, got, want, tol);
        }
    }
    CeArgs b = f;
    b.dlogits = dx2.addr();
    b.lse = ls.addr();
    b.loss = 0;
    launch([&] { CeK<T>::bwd(vec && ostride * sizeof(T) % 16 == 0)(b); }, grid, 512, 1, 0);
    check(memcmp(dx.p, dx2.p, ospan * sizeof(T)) == 0, "bwd == fused (bits)", ctx, 0, 0, 0, 0);
    check(x.same(x0) && tg.same(t0), "inputs unchanged", ctx, 0, 0, 0, 0);
    // Fused in place: the logits become the gradient (rows stride apart).
    Buf<T> xi(span);
    memcpy(xi.p, x.p, span * sizeof(T));
    CeArgs ip = a;
    ip.logits = xi.addr();
    ip.dlogits = xi.addr();
    ip.loss = lo2.addr();
    ip.lse = ls2.addr();
    launch([&] { CeK<T>::fused(vec)(ip); }, grid, 512, 1, 0);
    bool same = true;
    for (u64 n = 0; n < rows; ++n)
        for (u64 k = 0; k < stride && n * stride + k < span; ++k) {
            const uint16_t *want = (const uint16_t *)(k < V ? &dx.p[n * ostride + k] : &x.p[n * stride + k]);
            same &= memcmp(&xi.p[n * stride + k], want, sizeof(T)) == 0;
        }
    check(same, "in place == out of place (bits, gaps kept)", ctx, 0, 0, 0, 0);
    for (u64 n = 0; n < rows; ++n) check(bits_eq(lo2.p[n], lo.p[n]), "in-place loss", ctx, n, lo2.p[n], lo.p[n], 0);
}

// ---- LayerNorm.
typedef void (*LnKern)(const LnArgs);
template <class T> struct LnK;
#define LNK(T, N)                                                                                  \
    template <> struct LnK<T> {                                                                    \
        static LnKern fwd(bool v) { return v ? ln_fwd_##N##_v : ln_fwd_##N; }                     \
        static LnKern bwd(bool v) { return v ? ln_bwd_##N##_v : ln_bwd_##N; }                     \
        static LnKern params() { return ln_params_##N; }                                          \
    };
LNK(float, f32)
LNK(__half, f16)
LNK(__nv_bfloat16, bf16)

// layernorm.rs's forward_threads (four chunks a thread) and, with `per` 2, the chunk rule of
// its backward threads.
static unsigned ln_threads(u64 cols, size_t elem, u64 per = 2) {
    u64 chunks = (cols + 16 / elem - 1) / (16 / elem), t = 1;
    while (t < (chunks + per - 1) / per) t <<= 1;
    return (unsigned)std::min<u64>(std::max<u64>(t, 32), 512);
}

// layernorm.rs's threads (the backward's): four chunks a thread from 16,384 rows where they
// divide a row's chunks evenly, else two.
static unsigned ln_bwd_threads(u64 rows, u64 cols, size_t elem) {
    const u64 chunks = (cols + 16 / elem - 1) / (16 / elem);
    const unsigned four = ln_threads(cols, elem, 4);
    return rows >= 16384 && chunks % four == 0 ? four : ln_threads(cols, elem, 2);
}

template <class T>
static void layernorm_case(std::mt19937_64 &rng, u64 rows, u64 C, bool res, bool hasw, bool hasb, unsigned grid,
                           u64 rpb, int acc) {
    char ctx[160];
    const bool vec = C * sizeof(T) % 16 == 0;
    snprintf(ctx, sizeof ctx, "ln %s rows %llu C %llu res %d w %d b %d vec %d grid %u rpb %llu acc %d", Ty<T>::name,
             rows, C, res, hasw, hasb, vec, grid, rpb, acc);
    const u64 len = rows * C;
    const float eps = 1e-5f;
    std::uniform_real_distribution<double> U(-2, 2);
    Buf<T> x(len), r(len), h(len, Ty<T>::of(99)), y(len, Ty<T>::of(99)), w(C), b(C), dy(len), dh(len), dw(C), db(C);
    for (u64 i = 0; i < len; ++i) x.p[i] = Ty<T>::of(U(rng) + 3.0), r.p[i] = Ty<T>::of(U(rng)), dy.p[i] = Ty<T>::of(U(rng));
    for (u64 i = 0; i < C; ++i) w.p[i] = Ty<T>::of(U(rng)), b.p[i] = Ty<T>::of(U(rng)), dw.p[i] = Ty<T>::of(U(rng)), db.p[i] = Ty<T>::of(U(rng));
    for (u64 i = 0; i < len; ++i) dh.p[i] = Ty<T>::of(U(rng));
    const auto x0 = x.copy(), r0 = r.copy(), dh0 = dh.copy(), dw0 = dw.copy(), db0 = db.copy();
    Buf<float> mean(rows, 7.0f), rstd(rows, 7.0f);
    LnArgs a;
    memset(&a, 0, sizeof a);
    a.x = x.addr();
    a.r = res ? r.addr() : 0;
    a.h = res ? h.addr() : 0;
    a.y = y.addr();
    a.w = hasw ? w.addr() : 0;
    a.b = hasb ? b.addr() : 0;
    a.mean = mean.addr();
    a.rstd = rstd.addr();
    a.rows = rows;
    a.cols = C;
    a.eps = eps;
    const unsigned th = ln_bwd_threads(rows, C, sizeof(T));
    launch([&] { LnK<T>::fwd(vec)(a); }, grid, ln_threads(C, sizeof(T), 4), 1, C * 4);
    const double u = 1.0 / (1 << 24), k = 8 + 2 * std::sqrt((double)C);
    std::vector<double> hv(len);
    for (u64 n = 0; n < rows; ++n) {
        double s = 0, sa = 0, h0 = 0;
        for (u64 c = 0; c < C; ++c) {
            const u64 i = n * C + c;
            double v = Ty<T>::f(x.p[i]);
            if (res) {
                const T hr = Ty<T>::of((double)(Ty<T>::f(x.p[i]) + Ty<T>::f(r.p[i])));
                check(memcmp(&hr, &h.p[i], sizeof(T)) == 0, "h = x + r (bits)", ctx, i, Ty<T>::f(h.p[i]), Ty<T>::f(hr), 0);
                v = Ty<T>::f(hr);
            }
            hv[i] = v;
            if (c == 0) h0 = v;
            // The kernel sums h - h0 (h0 the row's first h): its error scales with that spread.
            s += v, sa += std::fabs(v - h0);
        }
        const double m = s / C;
        double var = 0;
        for (u64 c = 0; c < C; ++c) var += (hv[n * C + c] - m) * (hv[n * C + c] - m);
        var /= C;
        const double rs = 1 / std::sqrt(var + eps);
        const double em = (k + 2) * u * sa / C + 2 * u * std::fabs(m);
        check(close(mean.p[n], m, em + 1e-30), "mean", ctx, n, mean.p[n], m, em);
        // rstd: 2 k u relative, plus var's error from mean's (2 |h - m| em / C per element,
        // second order here) and eps's rounding to f32.
        const double er = rs * (2 * k * u + 0.5 * rs * rs * (2 * em * em + 1e-12));
        check(close(rstd.p[n], rs, er), "rstd", ctx, n, rstd.p[n], rs, er);
        for (u64 c = 0; c < C; ++c) {
            const u64 i = n * C + c;
            const double nv = (hv[i] - m) * rs;
            const double wv = hasw ? Ty<T>::f(w.p[c]) : 1.0, bv = hasb ? Ty<T>::f(b.p[c]) : 0.0;
            const double want = nv * wv + bv;
            const double tol = 4 * (std::fabs(wv) * (std::fabs(nv) * 2 * k * u + rs * em) + u * std::fabs(bv)) +
                               2 * Ty<T>::U * std::fabs(want) + Ty<T>::TINY;
            check(close(Ty<T>::f(y.p[i]), want, tol), "y", ctx, i, Ty<T>::f(y.p[i]), want, tol);
        }
    }
    check(x.same(x0) && r.same(r0), "fwd inputs unchanged", ctx, 0, 0, 0, 0);
    // Backward (from the kernel's own mean and rstd, as training does).
    const u64 blocks = rows ? (rows + rpb - 1) / rpb : 0;
    Buf<float> ws(blocks * 3 * C + (blocks ? 0 : 1));
    Buf<T> dsum(C + 1);
    LnArgs g;
    memset(&g, 0, sizeof g);
    g.dy = dy.addr();
    g.h = res ? h.addr() : x.addr();
    g.w = hasw ? w.addr() : 0;
    g.mean = mean.addr();
    g.rstd = rstd.addr();
    g.dh = dh.addr();
    g.dw = dw.addr();
    g.db = hasb ? db.addr() : 0;
    g.ws = ws.addr();
    g.rows = rows;
    g.cols = C;
    g.rows_per_block = rpb;
    g.blocks = blocks;
    g.accumulate = acc & 1;
    g.accumulate_params = (acc >> 1) & 1;
    // dh's column sums as stored (the bias gradient of a branch of dh's type).
    g.ds = dsum.addr();
    g.ds_type = std::is_same_v<T, float> ? 0 : std::is_same_v<T, __half> ? 1 : 2;
    const auto hin = res ? h.copy() : x.copy(), dyc = dy.copy();
    if (blocks) launch([&] { LnK<T>::bwd(vec)(g); }, std::min<unsigned>(grid, (unsigned)blocks), th, 1, C * 12);
    launch([&] { LnK<T>::params()(g); }, (unsigned)((C + 31) / 32), 32, 32, 0);
    std::vector<double> sw(C, 0), sb(C, 0), swa(C, 0), sba(C, 0);
    for (u64 n = 0; n < rows; ++n) {
        const double m = mean.p[n], rs = rstd.p[n];
        double s1 = 0, s2 = 0, a1 = 0, a2 = 0;
        std::vector<double> nv(C), dn(C);
        for (u64 c = 0; c < C; ++c) {
            const u64 i = n * C + c;
            const double d = Ty<T>::f(dy.p[i]);
            nv[c] = (Ty<T>::f(hin[i]) - m) * rs;
            dn[c] = d * (hasw ? Ty<T>::f(w.p[c]) : 1.0);
            s1 += dn[c], s2 += dn[c] * nv[c], a1 += std::fabs(dn[c]), a2 += std::fabs(dn[c] * nv[c]);
            sw[c] += d * nv[c], sb[c] += d, swa[c] += std::fabs(d * nv[c]), sba[c] += std::fabs(d);
        }
        const double ma = s1 / C, mb = s2 / C;
        for (u64 c = 0; c < C; ++c) {
            const u64 i = n * C + c;
            const double old = (acc & 1) ? Ty<T>::f(dh0[i]) : 0.0;
            const double want = rs * ((dn[c] - ma) - nv[c] * mb) + old;
            const double core = rs * (std::fabs(dn[c] - ma) + std::fabs(nv[c] * mb));
            const double tol = 4 * (rs * k * u * (a1 / C + std::fabs(nv[c]) * a2 / C) + 2 * k * u * core) +
                               u * std::fabs(old) + 2 * Ty<T>::U * std::fabs(want) + Ty<T>::TINY;
            check(close(Ty<T>::f(dh.p[i]), want, tol), "dh", ctx, i, Ty<T>::f(dh.p[i]), want, tol);
        }
    }
    const double kr = 8 + 2 * std::sqrt((double)rows);
    for (u64 c = 0; c < C; ++c) {
        const double ow = (acc & 2) ? Ty<T>::f(dw0[c]) : 0.0, ob = (acc & 2) ? Ty<T>::f(db0[c]) : 0.0;
        const double tw = 4 * kr * u * swa[c] + u * std::fabs(ow) + 2 * Ty<T>::U * std::fabs(sw[c] + ow) + 1e-30;
        const double tb = 4 * kr * u * sba[c] + u * std::fabs(ob) + 2 * Ty<T>::U * std::fabs(sb[c] + ob) + 1e-30;
        check(close(Ty<T>::f(dw.p[c]), sw[c] + ow, tw), "dw", ctx, c, Ty<T>::f(dw.p[c]), sw[c] + ow, tw);
        if (hasb) check(close(Ty<T>::f(db.p[c]), sb[c] + ob, tb), "db", ctx, c, Ty<T>::f(db.p[c]), sb[c] + ob, tb);
        else check(memcmp(&db.p[c], &db0[c], sizeof(T)) == 0, "db untouched", ctx, c, 0, 0, 0);
    }
    for (u64 c = 0; c < C; ++c) {
        double s = 0, sa = 0;
        for (u64 n = 0; n < rows; ++n) s += Ty<T>::f(dh.p[n * C + c]), sa += std::fabs(Ty<T>::f(dh.p[n * C + c]));
        const double t = 4 * kr * u * sa + 2 * Ty<T>::U * std::fabs(s) + Ty<T>::TINY;
        check(close(Ty<T>::f(dsum.p[c]), s, t), "column sums of dh", ctx, c, Ty<T>::f(dsum.p[c]), s, t);
    }
    check(dy.same(dyc), "bwd inputs unchanged", ctx, 0, 0, 0, 0);
    // Determinism: again from the same inputs, bit for bit.
    if (!(acc & 3)) {
        const auto d1 = dh.copy(), w1 = dw.copy();
        memset(dh.p, 0, len * sizeof(T));
        const auto s1 = dsum.copy();
        if (blocks) launch([&] { LnK<T>::bwd(vec)(g); }, std::min<unsigned>(grid, (unsigned)blocks), th, 1, C * 12);
        launch([&] { LnK<T>::params()(g); }, (unsigned)((C + 31) / 32), 32, 32, 0);
        check(dh.same(d1) && dw.same(w1) && dsum.same(s1), "bwd deterministic", ctx, 0, 0, 0, 0);
    }
}

template <class T> static void all(std::mt19937_64 &rng, int part) {
    if (part == 0 || part == 1) {
        struct C { u64 rows, V, stride; unsigned grid; };
        const C cs[] = {{1, 1, 1, 1}, {3, 5, 5, 3}, {13, 1000, 1000, 13}, {12, 1003, 1003, 5},
                        {24, 777, 784, 7},  {9, 4096, 4100, 9}, {2, 50304, 50304, 2}};
        for (auto c : cs) {
            const bool aligned = (c.stride * sizeof(T)) % 16 == 0;
            for (int mode = 0; mode < 3; ++mode) {
                classifier_case<T>(rng, c.rows, c.V, c.stride, aligned, c.grid, mode, mode != 1, c.rows > 10);
                if (aligned && mode == 2) classifier_case<T>(rng, c.rows, c.V, c.stride, false, c.grid, mode, false, false);
            }
        }
    }
    if (part == 0 || part == 2) {
        struct L { u64 rows, C; unsigned grid; u64 rpb; };
        const L ls[] = {{1, 1, 1, 32}, {5, 3, 2, 2}, {7, 768, 7, 3}, {40, 768, 3, 32}, {3, 1601, 3, 2}, {2, 4096, 1, 1}, {66, 8, 5, 32},
                        // From 16,384 rows: three f32 chunks a thread (ln_bwd_threads; f32
                        // only, the 16-bit rows' split being two chunks either way).
                        {16400, 384, 2, 8200}};
        int i = 0;
        for (auto l : ls) {
            if (l.rows >= 16384 && sizeof(T) != 4) continue;
            layernorm_case<T>(rng, l.rows, l.C, i % 2 == 0, i % 3 != 1, i % 4 != 3, l.grid, l.rpb, i % 4);
            layernorm_case<T>(rng, l.rows, l.C, i % 2 != 0, true, true, l.grid, l.rpb, 0);
            ++i;
        }
    }
}

int main(int argc, char **argv) {
    const int part = argc > 1 ? atoi(argv[1]) : 0;  // 0 all, 1 classifier, 2 layernorm
    std::mt19937_64 rng(42);
    all<float>(rng, part);
    all<__nv_bfloat16>(rng, part);
    all<__half>(rng, part);
    printf("%ld checks, %ld failures\n", checks, failures);
    return failures ? 1 : 0;
}
