// Host emulation of the CUDA primitives attention.cu uses (PTX ISA semantics).
#pragma once
inline uint32_t smem_addr(const void* p) { return (uint32_t)((const char*)p - (const char*)emu_smem_base()); }
inline void cp_async16(uint32_t dst, const void* src, int src_bytes) { emu_cp_async(dst, src, src_bytes, 16); }
inline void cp_async4(uint32_t dst, const void* src, int src_bytes) { emu_cp_async(dst, src, src_bytes, 4); }
inline void cp_async_commit() { emu_commit(); }
template <int N> inline void cp_async_wait() { emu_wait(N); }
inline void ldsm_x4(uint32_t (&r)[4], uint32_t addr) { emu_ldsm(r, addr, false); }
inline void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) { emu_ldsm(r, addr, true); }

template <typename T> struct Ty;
template <> struct Ty<__nv_bfloat16> {
    static void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { emu_mma(d, a, b0, b1, false); }
    static uint32_t pack(float lo, float hi) { return bf16_rn(lo) | ((uint32_t)bf16_rn(hi) << 16); }
    static float2 unpack(uint32_t x) { return float2{bf16_f(x & 0xffff), bf16_f(x >> 16)}; }
};
template <> struct Ty<__half> {
    static void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { emu_mma(d, a, b0, b1, true); }
    static uint32_t pack(float lo, float hi) { return f16_rn(lo) | ((uint32_t)f16_rn(hi) << 16); }
    static float2 unpack(uint32_t x) { return float2{f16_f(x & 0xffff), f16_f(x >> 16)}; }
};
