// Batched matrix multiplication of Genesis on Hopper (sm_90a only): C[b] = A[b] @ B[b] for f16
// and bf16 operands, accumulated in f32 and written as the input type or as f32, and for f32
// operands in TF32 (below). The operand
// layouts, batch strides and the split-k contract are those of matmul.cu (read its header): A
// [m, k] and B [k, n] each row-major ("n") or column-major ("t"), with its own leading
// dimension and batch stride (0 broadcasts), C [m, n] contiguous with batch stride m * n, and
// slice z of a split product written to C + z * batch * m * n.
//
// Algorithm (warp-specialised, persistent, TMA + wgmma):
//   * A block is three warpgroups (384 threads) and owns one multiprocessor (grid = min(SMs,
//     work units)); it walks the work units u = blockIdx.x, blockIdx.x + gridDim.x, ... A unit
//     is one (slice z, batch b, tile) triple; a tile is 128 x BN outputs (BN = 256, 128 or 64,
//     one kernel per choice; 64 serves the thin products of n < 128, most often split in k), numbered within a matrix in groups of 8 tile rows so that the blocks
//     running at one time share B columns and a narrow band of A rows in L2.
//   * Warpgroup 0 is the producer (its registers cut to 40 by `setmaxnreg`); one thread of it
//     issues the TMA copies (`cp.async.bulk.tensor.3d`, box 64 x 64 elements, 128-byte swizzle)
//     of each 64-deep k slice of the A tile (128 x 64) and B tile (BN x 64) into a ring of
//     shared-memory stages (4 of 48 KiB for BN = 256, 6 of 32 KiB for BN = 128, 8 of 24 KiB for
//     BN = 64). Stage s has
//     two mbarriers: full[s] (the producer's
//     arrive.expect_tx of the stage's bytes, completed by the copies) and empty[s] (one arrival
//     from each consumer warpgroup once its tensor-core reads of the stage are done).
//   * Warpgroups 1 and 2 are consumers (registers raised to 232): consumer c computes rows
//     64c .. 64c + 63 of the tile with `wgmma.mma_async.m64nBNk16` (four per k slice), both
//     operands read from shared memory through descriptors. One wgmma group stays in flight:
//     after committing slice t the consumer waits for slice t - 1's group and frees its stage.
//   * Operand tiles in shared memory: each 64 x 64 box is 64 rows of 128 bytes, swizzled by
//     TMA (16-byte chunk c of row r at chunk c ^ (r % 8)), boxes 8 KiB apart and 1 KiB
//     aligned. A "k-major" operand (k contiguous in memory: A "n", B "t") is boxed as
//     (64 k) x (64 rows of m or n): the canonical wgmma K-major 128B-swizzle layout, stride
//     byte offset 1024 (8 rows), k step 16 = +32 bytes of start address. An "mn-major" operand
//     (A "t", B "n") is boxed as (64 m or n) x (64 rows of k): the canonical MN-major layout
//     with the transpose flag, stride byte offset 1024 (8 k rows), leading byte offset 8192
//     (the next 64 m or n; a 64-wide B tile has one box and never uses it), k step 16 = +2048
//     bytes.
//   * Edges: the tensor maps (built on the host by cuTensorMapEncodeTiled, passed as
//     __grid_constant__ parameters) have the true extents (inner, outer, batch), so TMA fills
//     out-of-range elements of a box with zeros (k beyond K adds nothing; rows beyond M or N
//     are computed and dropped); boxes wholly beyond M or N are not copied at all (the stage's
//     transaction count covers the boxes copied); the epilogue stores in-range elements only.
//     A broadcast operand (batch stride 0) has a batch extent of 1 and is read at batch 0.
//   * Epilogue: each consumer thread stores its accumulators straight from registers (the
//     m64nNk16 f32 layout: register i of lane l of warp w holds row 16w + l / 4 + 8 ((i / 2) % 2),
//     column 8 (i / 4) + 2 (l % 4) + i % 2), as pairs where the row allows (f32: a quad's
//     pairs are one whole 32-byte sector). 16-bit outputs are first exchanged within each quad
//     of lanes (a 4 x 4 transpose of packed pairs), so that each lane stores 8 consecutive
//     columns as one 16-byte store and every sector is written whole, where C's rows start on
//     16 bytes. The producer runs ahead into the next unit's stages meanwhile. A `bias` (null:
//     none; given to unsplit launches only) of N output-type values is added to the
//     accumulators first, bias[c] to every row of column c, in f32 (one rounding in all).
//   * Split-k (the f32-output kernels only; the others run one slice, kslice >= k): slice z
//     covers k in [z * kslice, min(k, (z + 1) * kslice)), kslice a multiple of 32 (the
//     launcher's rule). A slice's last box may reach 32 k values into the next slice: the
//     consumers then issue only its first two k steps (a box past k itself holds TMA's zeros
//     there, so all four steps run).
//
// Ping-pong (`matmul_sm90_<in>_pp_<ab>_<BN>`, 16-bit outputs, unsplit products): the same
// producer and ring, but each consumer warpgroup computes whole 128 x BN tiles (two m64
// accumulators), the block's units alternating between the two; they take turns at the
// tensor cores (two more mbarriers), so that one's epilogue (and the next tile's first
// stages) overlap the other's k loop. It serves products of a short k, where the cooperative
// kernels' epilogue, which both consumers run at once, is a large share of a tile's time, and
// long-k products whose 128 x 192 tiles fill whole waves unsplit (the cost model's choice).
// BN = 128 (6 stages of 32 KiB) or 192 (5 stages of 40 KiB): a 128 x 192
// tile reads a sixth fewer operand bytes per product from L2 and shared memory than a
// 128 x 128 one, and its 192 accumulators a thread fit the consumers' registers only with the
// bias staged in shared memory rather than held in registers through the k loop.
// `matmul_sm90_<in>_pp_<ab>_192x96`: tiles of 192 x 96 (three m64n96 accumulators a consumer,
// 6 stages of 36 KiB), for long-k products whose outputs make 128 of them and fewer of any
// larger tile (GPT-2's 3072 x 768 weight gradients: one wave on 128 multiprocessors where 128 x
// 192 tiles fill 96). They read a quarter more shared memory per product than 128 x 192 tiles
// (B once for each of the three m64 rows), which costs where the tiles come in several waves.
// B's boxes are 32 columns wide: an mn-major B is copied as 64-byte rows with the 64-byte
// swizzle (chunk c of row r at c ^ ((r / 2) % 4)), the wgmma descriptor's layout type 2,
// leading byte offset 4 KiB (the next 32 columns), stride byte offset 512 (8 k rows); a
// k-major B as boxes of 32 rows of 128 bytes, contiguous, the 128 x BN layout.
//
// Cooperative 192 x 192 (`matmul_sm90_<in>[_f32out]_<ab>_192x192`, 512 threads): the
// cooperative kernel with three consumer warpgroups, consumer c computing rows 64c .. 64c + 63
// with m64n192k16 products (96 accumulators a thread; registers: producer 40, consumers 152), 4
// stages of 48 KiB, a stage released by all three. Long-k weight gradients take it split in k:
// GPT-2's 3072 x 768 outputs are 64 of its tiles, two k slices each one wave of 128 units, and
// a 192 x 192 tile reads a third less from L2 per product than a 192 x 96 one (a fifth less
// than 128 x 192), which shows most where the power limit holds the clock down.
//
// Products are accumulated in f32 in another order than the CPU twin's (per 16-deep wgmma step)
// and rounded once to the output type: the accuracy contract of matmul.cu.
//
// TF32 (`matmul_sm90_tf32_nt_<BN>`, f32 operands and output): the same kernel with
// `wgmma.mma_async.m64nBNk8.f32.tf32.tf32`. A stage is 32 k deep (a 128-byte row of f32, so
// boxes of 32 x 64 f32 are 8 KiB and swizzled as above), four k steps of 8 at +32 bytes.
// wgmma reads tf32 operands k-major only, so these kernels take A row-major and B column-major;
// the launcher first copies an operand of any other layout k-major into the plan's workspace
// (`matmul_sm90_stage_t`, a 32 x 32 tiled transpose). The tensor cores read the top 19 bits of
// each f32 (truncation to tf32), which the CPU twin and matmul.cu's TF32 kernel reproduce.
// Split slices are whole stages (kslice is a multiple of 32).
//
// Requirements the launcher checks (else it runs matmul.cu): compute capability 9.0; A and B
// start on 16 bytes; leading dimensions multiples of 8 elements; batch strides 0 or multiples
// of 8 elements of at least one matrix of leading-dimension-long lines; extents below 2^31;
// kslice a multiple of 32.
//
// Launch contract (src/matmul.rs): 384 threads, grid (min(SMs, units), 1, 1), dynamic shared
// memory Config<BN>::SMEM (set as the function's maximum first; the 128 x 192 ping-pong
// kernels' includes their bias buffers). Parameters: (tensor map of A,
// tensor map of B, C, batch, m, n, k, a batch stride, b batch stride, kslice, slices), the maps
// 128-byte CUtensorMap structs, every integer a u64. Kernel names:
// matmul_sm90_<in>[_f32out]_<a><b>_<BN>, e.g. matmul_sm90_bf16_nt_256, matmul_sm90_f16_tn_64.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>
#include <utility>

#include "ptx.cuh"
#include "cp_async.cuh"

namespace {

// The driver's CUtensorMap: 128 opaque bytes, aligned as cuda.h declares it.
struct alignas(128) TensorMap {
    uint64_t opaque[16];
};

constexpr int THREADS = 384;  // a producer and two consumer warpgroups (192 x 192: three)
constexpr int BK = 64;
constexpr int BOX_BYTES = 64 * 64 * 2;  // one 64 x 64 box of 16-bit elements
constexpr int GROUP_M = 8;

// A kernel's tile: BM x BN outputs (BM = 128, or 192 for the 192 x 96 ping-pong tile and the
// cooperative 192 x 192 tile).
template <int BN, int BM = 128>
struct Config {
    static constexpr int A_BYTES = BM * BK * 2;
    static constexpr int B_BYTES = BN * BK * 2;
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    // B's boxes: 64 wide (n, or n rows of a k-major B), 32 wide for BN = 96 (three boxes;
    // an mn-major B's 32-element rows are 64 bytes, copied with the 64-byte swizzle).
    static constexpr int B_BOX = BN % 64 == 0 ? 64 : 32;
    static constexpr int B_BOX_BYTES = B_BOX * 64 * 2;
    // 192 KiB of operand ring for most tiles: 4 stages of 48 KiB (BN = 256), 6 of 32 KiB
    // (BN = 128), 8 of 24 KiB (BN = 64); 5 of 40 KiB (200 KiB) for 128 x 192; 6 of 36 KiB
    // (216 KiB) for 192 x 96; 4 of 48 KiB for 192 x 192.
    static constexpr int STAGES =
        BN == 96 ? 6 : (BN == 192 ? 200 : 192) * 1024 / STAGE_BYTES;
    // Slack to align the ring to 1 KiB, the ring, the 2 * STAGES mbarriers and the two turn
    // mbarriers of the ping-pong kernels.
    // The ping-pong 128 x 192 kernels' bias: f32 values of a tile's columns, two buffers for
    // each consumer.
    static constexpr int BIAS_BYTES = BN == 192 && BM == 128 ? 2 * 2 * BN * 4 : 0;
    static constexpr int SMEM = 1024 + STAGES * STAGE_BYTES + 2 * STAGES * 8 + 16 + BIAS_BYTES;
};
static_assert(Config<256>::SMEM <= 227 * 1024, "shared memory of a block");
static_assert(Config<192>::SMEM <= 227 * 1024, "shared memory of a block");
static_assert(Config<128>::SMEM <= 227 * 1024, "shared memory of a block");
static_assert(Config<64>::SMEM <= 227 * 1024, "shared memory of a block");
static_assert(Config<96, 192>::SMEM <= 227 * 1024, "shared memory of a block");
static_assert(Config<192, 192>::SMEM <= 227 * 1024, "shared memory of a block");


// ---------------------------------------------------------------------------------------------
// mbarrier, TMA, wgmma and register-count primitives.

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Waits until the phase of `bar` with parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n"
        "}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}

// Copies the box at coordinates (c0, c1, c2) of the tensor `map` to shared memory at `dst`,
// completing `bytes` of the transaction count of mbarrier `bar`.
__device__ __forceinline__ void tma_load(uint32_t dst, const TensorMap* map, int c0, int c1,
                                         int c2, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
        "[%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
        : "memory");
}

__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps the compiler from moving accesses of `x` across the asynchronous wgmma window.
__device__ __forceinline__ void pin(float& x) { asm volatile("" : "+f"(x)::"memory"); }

template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

// A shared-memory matrix descriptor with 128-byte swizzle: start address, leading and stride
// byte offsets (all >> 4) in bits 0-13, 16-29 and 32-45, layout type 1 in bits 62-63; base
// offset 0 (every box is 1 KiB aligned).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

// The same with the 64-byte swizzle (layout type 2): an mn-major operand of 32-element
// (64-byte) rows, 16-byte chunk c of row r at chunk c ^ ((r / 2) % 4).
__device__ __forceinline__ uint64_t sw64_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | (2ull << 62);
}

// wgmma.mma_async.m64nNk16 with f32 accumulators d (in and out), A and B from shared memory
// (descriptors da, db). TRANS_A / TRANS_B: the operand is mn-major. scale_d == 0 ignores d's
// old values.
template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_n256(float (&d)[128], uint64_t da, uint64_t db,
                                          int scale_d, __nv_bfloat16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
        "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
        "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, "
        "%60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, "
        "%72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, "
        "%84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, "
        "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, "
        "%120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, p, 1, 1, %131, %132;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
          "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]),
          "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),
          "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]),
          "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]),
          "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]),
          "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]),
          "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]),
          "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
}

template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_n256(float (&d)[128], uint64_t da, uint64_t db,
                                          int scale_d, __half) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
        "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
        "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, "
        "%60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, "
        "%72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, "
        "%84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, "
        "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, "
        "%120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, p, 1, 1, %131, %132;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
          "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]),
          "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),
          "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]),
          "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]),
          "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]),
          "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]),
          "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]),
          "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
}

template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_n192(float (&d)[96], uint64_t da, uint64_t db,
                                          int scale_d, __nv_bfloat16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
        "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
        "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, "
        "%60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, "
        "%72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, "
        "%84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
        "}, %96, %97, p, 1, 1, %99, %100;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
          "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]),
          "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),
          "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]),
          "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
        : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
}

template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_n192(float (&d)[96], uint64_t da, uint64_t db,
                                          int scale_d, __half) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
        "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
        "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, "
        "%60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, "
        "%72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, "
        "%84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
        "}, %96, %97, p, 1, 1, %99, %100;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
          "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]),
          "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),
          "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]),
          "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
        : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
}

template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_n128(float (&d)[64], uint64_t da, uint64_t db,
                                          int scale_d, __nv_bfloat16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
        "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
        "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, "
        "%60, %61, %62, %63"
        "}, %64, %65, p, 1, 1, %67, %68;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
          "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
}

template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_n128(float (&d)[64], uint64_t da, uint64_t db,
                                          int scale_d, __half) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
        "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
        "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, "
        "%60, %61, %62, %63"
        "}, %64, %65, p, 1, 1, %67, %68;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
          "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
}

template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_n64(float (&d)[32], uint64_t da, uint64_t db, int scale_d,
                                         __nv_bfloat16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
        "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1, %35, %36;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
}

template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_n64(float (&d)[32], uint64_t da, uint64_t db, int scale_d,
                                         __half) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
        "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1, %35, %36;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
}

template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_n96(float (&d)[48], uint64_t da, uint64_t db, int scale_d,
                                         __nv_bfloat16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
        "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
        "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
        "}, %48, %49, p, 1, 1, %51, %52;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
        : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
}

template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_n96(float (&d)[48], uint64_t da, uint64_t db, int scale_d,
                                         __half) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n96k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
        "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
        "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
        "}, %48, %49, p, 1, 1, %51, %52;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
        : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
}

// wgmma.mma_async.m64nNk8 of tf32 operands, both k-major (tf32 has no transposed form): the
// tensor cores read the top 19 bits of each f32 (sign, exponent, 10 mantissa bits) and ignore
// the low 13, so an f32 operand is used truncated to tf32.
__device__ __forceinline__ void wgmma_tf32_n256(float (&d)[128], uint64_t da, uint64_t db,
                                                int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
        "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
        "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, "
        "%60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, "
        "%72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, "
        "%84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, "
        "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, "
        "%120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
          "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]),
          "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),
          "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]),
          "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]),
          "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]),
          "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]),
          "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]),
          "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_tf32_n128(float (&d)[64], uint64_t da, uint64_t db,
                                                int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
        "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
        "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, "
        "%60, %61, %62, %63"
        "}, %64, %65, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
          "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_tf32_n64(float (&d)[32], uint64_t da, uint64_t db,
                                                int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
        "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(scale_d));
}

template <int BN, int TRANS_A, int TRANS_B, typename T>
__device__ __forceinline__ void wgmma_tile(float (&d)[BN / 2], uint64_t da, uint64_t db,
                                           int scale_d) {
    if constexpr (sizeof(T) == 4) {
        static_assert(TRANS_A == 0 && TRANS_B == 0, "tf32 operands are k-major");
        if constexpr (BN == 256) {
            wgmma_tf32_n256(d, da, db, scale_d);
        } else if constexpr (BN == 128) {
            wgmma_tf32_n128(d, da, db, scale_d);
        } else {
            static_assert(BN == 64, "tile width");
            wgmma_tf32_n64(d, da, db, scale_d);
        }
    } else if constexpr (BN == 256) {
        wgmma_n256<TRANS_A, TRANS_B>(d, da, db, scale_d, T());
    } else if constexpr (BN == 192) {
        wgmma_n192<TRANS_A, TRANS_B>(d, da, db, scale_d, T());
    } else if constexpr (BN == 128) {
        wgmma_n128<TRANS_A, TRANS_B>(d, da, db, scale_d, T());
    } else if constexpr (BN == 96) {
        wgmma_n96<TRANS_A, TRANS_B>(d, da, db, scale_d, T());
    } else {
        static_assert(BN == 64, "tile width");
        wgmma_n64<TRANS_A, TRANS_B>(d, da, db, scale_d, T());
    }
}

// STEPS k steps of 16 (tf32: 8) of one stage: A rows 64c.. at sa (this consumer's box), B at
// sb. Step kk is +32 bytes in a k-major row, +16 rows (2 KiB) in an mn-major box. A 96-wide
// mn-major B lies in three 32-wide boxes of 64-byte rows (4 KiB apart; step kk is +1 KiB).
// `accumulate` false: the first step overwrites d. Starts with the fence that orders d's
// earlier writes before wgmma.
template <typename T, int BN, bool TA, bool TB, int STEPS>
__device__ __forceinline__ void mma_steps(float (&d)[BN / 2], uint32_t sa, uint32_t sb,
                                          bool accumulate) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < STEPS; ++kk) {
        const uint64_t da = TA ? sw128_desc(sa + kk * 2048, 8192, 1024)
                               : sw128_desc(sa + kk * 32, 16, 1024);
        const uint64_t db = TB        ? sw128_desc(sb + kk * 32, 16, 1024)
                            : BN == 96 ? sw64_desc(sb + kk * 1024, 4096, 512)
                                       : sw128_desc(sb + kk * 2048, 8192, 1024);
        wgmma_tile<BN, TA ? 1 : 0, TB ? 0 : 1, T>(d, da, db, (accumulate || kk > 0) ? 1 : 0);
    }
}

// ---------------------------------------------------------------------------------------------
// Stores and the tile order.

__device__ __forceinline__ void store1(float* p, float x) { *p = x; }
__device__ __forceinline__ void store1(__half* p, float x) { *p = __float2half_rn(x); }
__device__ __forceinline__ void store1(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }
__device__ __forceinline__ void store2(float* p, float x, float y) {
    *reinterpret_cast<float2*>(p) = make_float2(x, y);
}
__device__ __forceinline__ void store2(__half* p, float x, float y) {
    *reinterpret_cast<__half2*>(p) = __floats2half2_rn(x, y);
}
__device__ __forceinline__ void store2(__nv_bfloat16* p, float x, float y) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
}

// Two f32 values rounded to the 16-bit type and packed as one 32-bit word (x in the low half,
// the element at the lower address).
__device__ __forceinline__ uint32_t pack2(__half*, float x, float y) {
    const __half2 v = __floats2half2_rn(x, y);
    return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pack2(__nv_bfloat16*, float x, float y) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// The 4 x 4 transpose of 32-bit words across the quad of lanes 4r .. 4r + 3: lane q enters
// w[j] and leaves with o[p] = word q of lane p's w. In the accumulator layout word j of lane
// q holds columns 8 j + 2 q, + 1 of a row, so o is columns 8 q .. 8 q + 7: 16 contiguous
// bytes. Two exchange rounds of plain selects (no lane-dependent indexing, which compiles to
// divergent branches and splits the warp's stores that follow): lanes q and q ^ 2 swap the
// off-diagonal 2 x 2 blocks of the quad's 4 x 4 words, then lanes q and q ^ 1 transpose each
// block. Every lane of the warp takes part (the shuffles are warp-wide).
__device__ __forceinline__ void quad_transpose(const uint32_t (&w)[4], uint32_t (&o)[4],
                                               int q) {
    const bool hi = (q & 2) != 0, odd = (q & 1) != 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) o[j] = w[j];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        // The upper lanes send their left block's column k and take the partner's right
        // block's; the lower lanes the other way round.
        const uint32_t r = __shfl_xor_sync(0xffffffffu, hi ? o[k] : o[2 + k], 2);
        o[k] = hi ? r : o[k];
        o[2 + k] = hi ? o[2 + k] : r;
    }
#pragma unroll
    for (int m = 0; m < 2; ++m) {
        const uint32_t r = __shfl_xor_sync(0xffffffffu, odd ? o[2 * m] : o[2 * m + 1], 1);
        o[2 * m] = odd ? r : o[2 * m];
        o[2 * m + 1] = odd ? o[2 * m + 1] : r;
    }
}

// f(std::integral_constant<int, I>) for each I of the sequence, in order.
template <typename F, int... I>
__device__ __forceinline__ void for_each_index(F&& f, std::integer_sequence<int, I...>) {
    (f(std::integral_constant<int, I>{}), ...);
}

// Work unit u: slice z, batch b and the first row and column (m0, n0) of its tile. Units run
// slice-major, then batch, then tile; tiles of one matrix in groups of GROUP_M tile rows,
// column by column inside a group.
struct Unit {
    uint64_t z, b, m0, n0;
};

template <int BM, int BN>
__device__ __forceinline__ Unit unit_of(uint64_t u, uint64_t batch, uint64_t tiles_m,
                                        uint64_t tiles_n) {
    const uint64_t per = tiles_m * tiles_n;
    const uint64_t zb = u / per, pid = u % per;
    const uint64_t in_group = GROUP_M * tiles_n;
    const uint64_t first = pid / in_group * GROUP_M;
    const uint64_t size = min(tiles_m - first, (uint64_t)GROUP_M);
    const uint64_t r = pid % in_group;
    return Unit{zb / batch, zb % batch, (first + r % size) * BM, r / size * BN};
}

// ---------------------------------------------------------------------------------------------
// The kernel. TA: A is column-major (mn-major in shared memory); TB: B is column-major
// (k-major).

// A bias element as f32 (the epilogue's bias).
__device__ __forceinline__ float bias_f32(const float* b) { return *b; }
__device__ __forceinline__ float bias_f32(const __half* b) { return __half2float(*b); }
__device__ __forceinline__ float bias_f32(const __nv_bfloat16* b) { return __bfloat162float(*b); }

// b0 and b1 added to the accumulators of a lane's columns 8j + 2 (lane % 4) and + 1 in both
// of its rows (register 4j + 2h + e of a lane holds column 8j + 2 (lane % 4) + e of the
// m64nNk16 layout).
template <int BN>
__device__ __forceinline__ void add_column_pair(float (&acc)[BN / 2], int j, float b0, float b1) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        acc[j * 4 + h * 2] += b0;
        acc[j * 4 + h * 2 + 1] += b1;
    }
}

// The bias (when given): column c's added to every row's accumulator of column c, in f32,
// before the one rounding.
template <typename O, int BN>
__device__ __forceinline__ void add_bias(float (&acc)[BN / 2], const O* __restrict__ bias,
                                         uint64_t n0, uint64_t N, int lane) {
    if (bias == nullptr) return;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        const uint64_t col = n0 + j * 8 + (lane % 4) * 2;
        const float b0 = col < N ? bias_f32(bias + col) : 0.0f;
        const float b1 = col + 1 < N ? bias_f32(bias + col + 1) : 0.0f;
        add_column_pair<BN>(acc, j, b0, b1);
    }
}

// The bias values of a lane's columns (8 j + 2 (lane % 4), + 1 for j < BN / 8), each pair
// packed as one 32-bit word of two 16-bit values (the low half the lower column; 0 past N):
// loaded ahead of the k loop and added by add_bias_pairs after it.
template <typename O, int BN>
__device__ __forceinline__ void load_bias_pairs(uint32_t (&bw)[BN / 8], const O* __restrict__ bias,
                                                uint64_t n0, uint64_t N, int lane) {
    static_assert(sizeof(O) == 2, "16-bit outputs");
    const bool words = ((uintptr_t)bias & 3) == 0;
    const uint16_t* b = reinterpret_cast<const uint16_t*>(bias);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        const uint64_t col = n0 + j * 8 + (lane % 4) * 2;
        if (words && col + 1 < N) {
            bw[j] = *reinterpret_cast<const uint32_t*>(b + col);
        } else {
            const uint32_t lo = col < N ? b[col] : 0u, hi = col + 1 < N ? b[col + 1] : 0u;
            bw[j] = lo | (hi << 16);
        }
    }
}

// The low (hi = 0) or high 16-bit value of a bias word as f32.
__device__ __forceinline__ float bias_half(uint32_t w, int hi, const __nv_bfloat16*) {
    return __uint_as_float(hi ? (w & 0xffff0000u) : (w << 16));
}
__device__ __forceinline__ float bias_half(uint32_t w, int hi, const __half*) {
    return __half2float(__ushort_as_half((unsigned short)(hi ? (w >> 16) : (w & 0xffffu))));
}

// add_bias with the words of load_bias_pairs.
template <typename O, int BN>
__device__ __forceinline__ void add_bias_pairs(float (&acc)[BN / 2], const uint32_t (&bw)[BN / 8]) {
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        const float b0 = bias_half(bw[j], 0, (const O*)nullptr);
        const float b1 = bias_half(bw[j], 1, (const O*)nullptr);
        add_column_pair<BN>(acc, j, b0, b1);
    }
}

// pin() on every accumulator of a ping-pong tile.
template <int MI, int BN>
__device__ __forceinline__ void pin_all(float (&acc)[MI][BN / 2]) {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < BN / 2; ++j) pin(acc[i][j]);
}

// add_bias for the accumulators of a ping-pong tile from the f32 bias of its columns in
// shared memory at `sbias` (column c at + 4 c).
template <int BN, int MI>
__device__ __forceinline__ void add_bias_shared(float (&acc)[MI][BN / 2], uint32_t sbias,
                                                int lane) {
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        float b0, b1;
        asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n"
                     : "=f"(b0), "=f"(b1)
                     : "r"(sbias + 4 * (j * 8 + (lane % 4) * 2))
                     : "memory");
#pragma unroll
        for (int i = 0; i < MI; ++i) add_column_pair<BN>(acc[i], j, b0, b1);
    }
}

// Stores a warpgroup's 64 x BN accumulators (the m64nNk16 layout: register i of lane l of warp
// w holds row 16w + l / 4 + 8 ((i / 2) % 2), column 8 (i / 4) + 2 (l % 4) + i % 2) into `out`
// (rows of N), in-range elements only; `row0` is this lane's first row (the tile's first row of
// the block + 16 warp + lane / 4).
template <typename O, int BN>
__device__ __forceinline__ void store_rows(const float (&acc)[BN / 2], O* __restrict__ out,
                                           uint64_t row0, uint64_t n0, uint64_t M, uint64_t N,
                                           int lane, bool pairs, bool vec16) {
    if constexpr (sizeof(O) == 2) {
        // 16-bit outputs: a quad's four lanes hold 8 columns (16 bytes) of a row in each
        // 8-column chunk, 4 bytes a lane, which would write every 32-byte sector of C in
        // two halves. A quad transpose over 4 chunks gives each lane one whole chunk, so a
        // warp's store covers whole sectors (8 rows of 64 bytes). Taken when every chunk
        // starts on 16 bytes (N a multiple of 8, C on 16 bytes); a chunk then lies wholly
        // inside or wholly past column N.
        if (vec16) {
            const int q = lane % 4;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const uint64_t row = row0 + 8 * h;
                // This lane's chunk of the row's first group; group g is 64 g bytes on.
                O* line = out + row * N + n0 + (uint64_t)q * 8;
                // Groups as constants (the store's offset is an immediate).
                for_each_index(
                    [&](auto gc) {
                        constexpr int g = decltype(gc)::value;
                        uint32_t wd[4], o[4];
#pragma unroll
                        for (int j = 0; j < 4; ++j)
                            wd[j] = pack2((O*)nullptr, acc[(4 * g + j) * 4 + h * 2],
                                          acc[(4 * g + j) * 4 + h * 2 + 1]);
                        quad_transpose(wd, o, q);
                        const uint64_t col = n0 + (uint64_t)(4 * g + q) * 8;
                        if (row < M && col < N) st_global_v4<64 * g>(line, o[0], o[1], o[2], o[3]);
                    },
                    std::make_integer_sequence<int, BN / 32>{});
            }
            return;
        }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const uint64_t row = row0 + 8 * h;
        if (row >= M) continue;
        O* line = out + row * N;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const uint64_t col = n0 + j * 8 + (lane % 4) * 2;
            const float x = acc[j * 4 + h * 2], y = acc[j * 4 + h * 2 + 1];
            if (pairs && col + 1 < N) {
                store2(line + col, x, y);
            } else {
                if (col < N) store1(line + col, x);
                if (col + 1 < N) store1(line + col + 1, y);
            }
        }
    }
}

template <typename T, typename O, int BN, bool TA, bool TB, bool PP = false, int BM = 128>
__device__ __forceinline__ void gemm_sm90(const TensorMap* map_a, const TensorMap* map_b,
                                          O* __restrict__ C, const O* __restrict__ bias,
                                          uint64_t batch, uint64_t M,
                                          uint64_t N, uint64_t K, uint64_t sa, uint64_t sb,
                                          uint64_t kslice, uint64_t slices) {
    using Cfg = Config<BN, BM>;
    constexpr int STAGES = Cfg::STAGES;
    constexpr int B_BOX = Cfg::B_BOX;
    // Consumer warpgroups: two, or (cooperative 192-row tiles) one a 64-row band.
    constexpr int NC = PP ? 2 : BM / 64;
    static_assert(NC == 2 || NC == 3, "two or three consumer warpgroups");
    // k elements of a stage: a box row is 128 bytes (64 16-bit or 32 f32 elements).
    constexpr int KE = 128 / (int)sizeof(T);
    static_assert(sizeof(T) == 2 || (!TA && TB), "tf32 operands are both k-major");
    // Whether the kernel may run slices of split products (the f32-output kernels): a uniform
    // branch in the k loop that makes ptxas add a wgmma register fence, so the kernels of
    // f16/bf16 outputs (one slice, kslice >= k) leave it out.
    constexpr bool SPLITS = sizeof(O) == 4;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t ring = (smem_addr(smem_raw) + 1023) & ~1023u;
    const uint32_t a_ring = ring;                             // stage s at + s * A_BYTES
    const uint32_t b_ring = ring + STAGES * Cfg::A_BYTES;     // stage s at + s * B_BYTES
    const uint32_t full = ring + STAGES * Cfg::STAGE_BYTES;  // full[s] at + 8 s
    const uint32_t empty = full + STAGES * 8;                 // empty[s] at + 8 s
    const uint32_t turn = empty + STAGES * 8;                 // turn[c] at + 8 c (ping-pong)
    const uint32_t bias_buf = turn + 16;                      // consumer c, buffer t at + (2c + t) BN 4
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full + 8 * s, 1);
            // A stage is released by every consumer, or (ping-pong) by the one whose unit it is.
            mbar_init(empty + 8 * s, PP ? 1 : NC);
        }
        if (PP) {
            mbar_init(turn, 1);
            mbar_init(turn + 8, 1);
            // Consumer 0's first turn is given.
            mbar_arrive(turn);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map_a))
                     : "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map_b))
                     : "memory");
    }
    __syncthreads();

    const uint64_t tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const uint64_t units = tiles_m * tiles_n * batch * slices;

    if (wg == 0) {
        // Producer: one thread issues every copy.
        setmaxnreg_dec<40>();
        if (threadIdx.x != 0) return;
        int stage = 0;
        uint32_t phase = 0;
        for (uint64_t u = blockIdx.x; u < units; u += gridDim.x) {
            const Unit w = unit_of<BM, BN>(u, batch, tiles_m, tiles_n);
            const uint64_t k_begin = w.z * kslice;
            const uint64_t k_end = min(K, k_begin + kslice);
            const int kt_n = (int)((k_end - k_begin + KE - 1) / KE);
            const int ba = sa != 0 ? (int)w.b : 0, bb = sb != 0 ? (int)w.b : 0;
            const int m0 = (int)w.m0, n0 = (int)w.n0;
            // Boxes wholly past m or n are not copied: their rows and columns of C are dropped,
            // so whatever the stage held there is never stored.
            const int a_boxes = (int)min((uint64_t)(BM / 64), (M - w.m0 + 63) / 64);
            const int b_boxes = (int)min((uint64_t)(BN / B_BOX), (N - w.n0 + B_BOX - 1) / B_BOX);
            const uint32_t bytes =
                (uint32_t)a_boxes * BOX_BYTES + (uint32_t)b_boxes * Cfg::B_BOX_BYTES;
            for (int kt = 0; kt < kt_n; ++kt) {
                // The stage is free once both consumers released its previous use (a fresh
                // barrier counts as released: parity 1 is the phase before its first).
                mbar_wait(empty + 8 * stage, phase ^ 1);
                const uint32_t bar = full + 8 * stage;
                mbar_expect_tx(bar, bytes);
                const int k0 = (int)(k_begin + (uint64_t)kt * KE);
                const uint32_t sa_stage = a_ring + stage * Cfg::A_BYTES;
                const uint32_t sb_stage = b_ring + stage * Cfg::B_BYTES;
#pragma unroll
                for (int j = 0; j < BM / 64; ++j) {
                    if (j >= a_boxes) break;
                    if (TA)
                        tma_load(sa_stage + j * BOX_BYTES, map_a, m0 + 64 * j, k0, ba, bar);
                    else
                        tma_load(sa_stage + j * BOX_BYTES, map_a, k0, m0 + 64 * j, ba, bar);
                }
#pragma unroll
                for (int j = 0; j < BN / B_BOX; ++j) {
                    if (j >= b_boxes) break;
                    const uint32_t dst = sb_stage + j * Cfg::B_BOX_BYTES;
                    if (TB)
                        tma_load(dst, map_b, k0, n0 + B_BOX * j, bb, bar);
                    else
                        tma_load(dst, map_b, n0 + B_BOX * j, k0, bb, bar);
                }
                if (++stage == STAGES) {
                    stage = 0;
                    phase ^= 1;
                }
            }
        }
        return;
    }

    // Two consumers take 232 registers a thread; three (512 threads) 152.
    setmaxnreg_inc<NC == 3 ? 152 : 232>();
    const int c = wg - 1;
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const bool leader = threadIdx.x % 128 == 0;
    const bool pairs = N % 2 == 0 && ((uintptr_t)C & (2 * sizeof(O) - 1)) == 0;
    const bool vec16 = N % 8 == 0 && ((uintptr_t)C & 15) == 0;
    if constexpr (PP) {
        // Ping-pong: consumer c computes whole BM x BN tiles, the block's units c, c + 2, ...
        // (rows 64i .. 64i + 63 as m64 accumulator i). The two take turns at the tensor
        // cores: c waits for turn[c] before its unit's k loop and hands the turn over once its
        // last products are issued (the other's queue behind them while they complete), so
        // one consumer's epilogue runs beside the other's k loop. Every unit has the same
        // kt_n stages (unsplit), so unit i's first stage is ring position i * kt_n. The turns
        // also order the ring: a consumer starts a unit only once every earlier position was
        // loaded and waited for, so each full-barrier wait is at most one phase ahead.
        static_assert(!SPLITS && ((BM == 128 && (BN == 128 || BN == 192)) ||
                                  (BM == 192 && BN == 96)),
                      "ping-pong: unsplit 128 x 128, 128 x 192 or 192 x 96 tiles");
        constexpr int MI = BM / 64;
        float acc[MI][BN / 2];
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < BN / 2; ++j) acc[i][j] = 0.0f;
        const int kt_n = (int)((K + KE - 1) / KE);
        uint32_t turns = 0;
        for (uint64_t i = (uint64_t)c;; i += 2) {
            const uint64_t u = blockIdx.x + i * gridDim.x;
            if (u >= units) break;
            const Unit w = unit_of<BM, BN>(u, batch, tiles_m, tiles_n);
            const uint64_t pos = i * (uint64_t)kt_n;
            int stage = (int)(pos % STAGES);
            uint32_t phase = (uint32_t)((pos / STAGES) & 1);
            // The bias of this lane's columns, loaded before the k loop hides their latency:
            // in registers for 128 x 128 tiles; a 128 x 192 tile's 192 accumulators leave no
            // room for them, so its consumer stages the tile's bias in shared memory as f32
            // (buffer turns % 2: the barrier after writing it also orders the reads of the
            // other buffer, two units ago, before its next write).
            constexpr bool PRELOAD = BN != 192;
            uint32_t bw[PRELOAD ? BN / 8 : 1];
            const uint32_t my_bias = bias_buf + (uint32_t)((2 * c + (turns & 1)) * BN * 4);
            if (bias != nullptr) {
                if constexpr (PRELOAD) {
                    load_bias_pairs<O, BN>(bw, bias, w.n0, N, lane);
                } else {
                    const int t = threadIdx.x % 128;
                    for (int j = t; j < BN; j += 128) {
                        const uint64_t col = w.n0 + j;
                        const float v = col < N ? bias_f32(bias + col) : 0.0f;
                        asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(my_bias + 4 * j), "f"(v)
                                     : "memory");
                    }
                    asm volatile("bar.sync %0, 128;\n" ::"r"(1 + c) : "memory");
                }
            }
            mbar_wait(turn + 8 * c, turns & 1);
            int prev = 0;
            for (int kt = 0; kt < kt_n; ++kt) {
                mbar_wait(full + 8 * stage, phase);
                const uint32_t sa_stage = a_ring + stage * Cfg::A_BYTES;
                const uint32_t sb_stage = b_ring + stage * Cfg::B_BYTES;
                pin_all<MI, BN>(acc);
#pragma unroll
                for (int i = 0; i < MI; ++i)
                    mma_steps<T, BN, TA, TB, 4>(acc[i], sa_stage + i * BOX_BYTES, sb_stage,
                                                kt > 0);
                wgmma_commit();
                pin_all<MI, BN>(acc);
                wgmma_wait<1>();
                if (kt > 0 && leader) mbar_arrive(empty + 8 * prev);
                prev = stage;
                if (++stage == STAGES) {
                    stage = 0;
                    phase ^= 1;
                }
            }
            // The unit's products are issued: the other consumer's queue behind them at the
            // tensor cores while these complete.
            if (leader) mbar_arrive(turn + 8 * (1 - c));
            wgmma_wait<0>();
            pin_all<MI, BN>(acc);
            if (kt_n > 0 && leader) mbar_arrive(empty + 8 * prev);
            ++turns;
            O* out = C + w.b * M * N;
            if (bias != nullptr) {
                if constexpr (PRELOAD) {
#pragma unroll
                    for (int i = 0; i < MI; ++i) add_bias_pairs<O, BN>(acc[i], bw);
                } else {
                    add_bias_shared<BN, MI>(acc, my_bias, lane);
                }
            }
            const uint64_t row0 = w.m0 + warp * 16 + lane / 4;
#pragma unroll
            for (int i = 0; i < MI; ++i)
                store_rows<O, BN>(acc[i], out, row0 + 64 * i, w.n0, M, N, lane, pairs, vec16);
        }
    } else {
        // Cooperative: warpgroup 1 + c computes rows 64c .. 64c + 63 of each tile (the 192 x 192
        // tile has three consumers).
        float acc[BN / 2];
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
        int stage = 0;
        uint32_t phase = 0;
        for (uint64_t u = blockIdx.x; u < units; u += gridDim.x) {
            const Unit w = unit_of<BM, BN>(u, batch, tiles_m, tiles_n);
            const uint64_t k_begin = w.z * kslice;
            const uint64_t k_end = min(K, k_begin + kslice);
            const int kt_n = (int)((k_end - k_begin + KE - 1) / KE);
            int prev = 0;
            for (int kt = 0; kt < kt_n; ++kt) {
                mbar_wait(full + 8 * stage, phase);
                const uint32_t sa_stage = a_ring + stage * Cfg::A_BYTES + c * BOX_BYTES;
                const uint32_t sb_stage = b_ring + stage * Cfg::B_BYTES;
                // The last box of a slice that ends 32 short of a box and before k holds 32 k
                // values of the next slice: only its first two k steps belong here (past k itself
                // a box holds TMA's zeros, which add nothing). Only the f32-output kernels run
                // split products.
                // (A tf32 stage is 32 deep: a slice is whole stages.)
                const bool half = SPLITS && sizeof(T) == 2 && k_end < K &&
                                  k_end - (k_begin + (uint64_t)kt * KE) < KE;
#pragma unroll
                for (int i = 0; i < BN / 2; ++i) pin(acc[i]);
                if (half)
                    mma_steps<T, BN, TA, TB, 2>(acc, sa_stage, sb_stage, kt > 0);
                else
                    mma_steps<T, BN, TA, TB, 4>(acc, sa_stage, sb_stage, kt > 0);
                wgmma_commit();
#pragma unroll
                for (int i = 0; i < BN / 2; ++i) pin(acc[i]);
                // Slice kt - 1's group is complete once at most one group (kt's) is pending.
                wgmma_wait<1>();
                if (kt > 0 && leader) mbar_arrive(empty + 8 * prev);
                prev = stage;
                if (++stage == STAGES) {
                    stage = 0;
                    phase ^= 1;
                }
            }
            wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) pin(acc[i]);
            if (kt_n > 0 && leader) mbar_arrive(empty + 8 * prev);

            O* out = C + (w.z * batch + w.b) * M * N;
            add_bias<O, BN>(acc, bias, w.n0, N, lane);
            store_rows<O, BN>(acc, out, w.m0 + c * 64 + warp * 16 + lane / 4, w.n0, M, N, lane, pairs,
                              vec16);
        }
    }
}

}  // namespace

// One kernel: NAME runs gemm_sm90<T, O, BN, TA, TB, PP, BM> in blocks of NT threads.
#define SM90_KERNEL_OF(NAME, T, O, BN, TA, TB, PP, BM, NT)                                     \
    extern "C" __global__ void __launch_bounds__(NT, 1)                                        \
        NAME(const __grid_constant__ TensorMap a, const __grid_constant__ TensorMap b,         \
             O* __restrict__ c, const O* __restrict__ bias, uint64_t batch, uint64_t m,        \
             uint64_t n, uint64_t k, uint64_t sa, uint64_t sb, uint64_t kslice,                \
             uint64_t slices) {                                                                \
        gemm_sm90<T, O, BN, TA, TB, PP, BM>(&a, &b, c, bias, batch, m, n, k, sa, sb, kslice,   \
                                            slices);                                           \
    }
#define SM90_KERNEL(NAME, T, O, BN, TA, TB) \
    SM90_KERNEL_OF(NAME, T, O, BN, TA, TB, false, 128, THREADS)

// The four layouts of one tile: P_<ab>SFX.
#define SM90_LAYOUTS(P, SFX, T, O, BN, PP, BM, NT)                          \
    SM90_KERNEL_OF(P##_nn##SFX, T, O, BN, false, false, PP, BM, NT)         \
    SM90_KERNEL_OF(P##_nt##SFX, T, O, BN, false, true, PP, BM, NT)          \
    SM90_KERNEL_OF(P##_tn##SFX, T, O, BN, true, false, PP, BM, NT)          \
    SM90_KERNEL_OF(P##_tt##SFX, T, O, BN, true, true, PP, BM, NT)

// The cooperative kernels, matmul_sm90_<in>[_f32out]_<ab>_<BN>: 128 x 256, 128 x 128 and
// 128 x 64 tiles, and 192 x 192 (three consumers, 512 threads) as _192x192.
#define SM90_TILES(P, T, O)                                         \
    SM90_LAYOUTS(P, _256, T, O, 256, false, 128, THREADS)           \
    SM90_LAYOUTS(P, _128, T, O, 128, false, 128, THREADS)           \
    SM90_LAYOUTS(P, _64, T, O, 64, false, 128, THREADS)             \
    SM90_LAYOUTS(P, _192x192, T, O, 192, false, 192, 512)

// The ping-pong kernels (16-bit outputs, unsplit): matmul_sm90_<in>_pp_<ab>_<128|192|192x96>.
#define SM90_PP(P, T)                                               \
    SM90_LAYOUTS(P##_pp, _128, T, T, 128, true, 128, THREADS)       \
    SM90_LAYOUTS(P##_pp, _192, T, T, 192, true, 128, THREADS)       \
    SM90_LAYOUTS(P##_pp, _192x96, T, T, 96, true, 192, THREADS)

SM90_TILES(matmul_sm90_bf16, __nv_bfloat16, __nv_bfloat16)
SM90_TILES(matmul_sm90_bf16_f32out, __nv_bfloat16, float)
SM90_TILES(matmul_sm90_f16, __half, __half)
SM90_TILES(matmul_sm90_f16_f32out, __half, float)
SM90_PP(matmul_sm90_bf16, __nv_bfloat16)
SM90_PP(matmul_sm90_f16, __half)

// TF32 (f32 operands, f32 output): k-major A and B only ("nt"); the launcher stages other
// layouts as k-major copies first (matmul_sm90_stage_t).
SM90_KERNEL(matmul_sm90_tf32_nt_256, float, float, 256, false, true)
SM90_KERNEL(matmul_sm90_tf32_nt_128, float, float, 128, false, true)
SM90_KERNEL(matmul_sm90_tf32_nt_64, float, float, 64, false, true)

// The k-major staging copy of a TF32 operand: dst[b][c][r] = src[b * sstride + r * ld + c] for
// r < rows, c < cols (the transpose of a rows x cols matrix of ld-long lines), dst lines dld
// long (a multiple of 4 elements, at least rows; the pad is never read), batch b at b *
// dstride. 32 x 32 tiles through shared memory (a padded row: no bank conflicts either way),
// blocks of 32 x 8 threads, grid (ceil(cols / 32), ceil(rows / 32), batches).
extern "C" __global__ void __launch_bounds__(256)
    matmul_sm90_stage_t(const float* __restrict__ src, float* __restrict__ dst, uint64_t rows,
                        uint64_t cols, uint64_t ld, uint64_t sstride, uint64_t dld,
                        uint64_t dstride) {
    __shared__ float t[32][33];
    const uint64_t b = blockIdx.z, c0 = (uint64_t)blockIdx.x * 32, r0 = (uint64_t)blockIdx.y * 32;
    const float* s = src + b * sstride;
    for (int i = threadIdx.y; i < 32; i += 8) {
        const uint64_t r = r0 + i, c = c0 + threadIdx.x;
        if (r < rows && c < cols) t[i][threadIdx.x] = s[r * ld + c];
    }
    __syncthreads();
    float* d = dst + b * dstride;
    for (int i = threadIdx.y; i < 32; i += 8) {
        const uint64_t c = c0 + i, r = r0 + threadIdx.x;
        if (c < cols && r < rows) d[c * dld + r] = t[threadIdx.x][i];
    }
}
