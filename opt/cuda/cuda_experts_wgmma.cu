/*
 * cuda_experts_wgmma.cu: the routed experts' two GEMMs on Hopper's warpgroup MMA (wgmma,
 * sm_90a), the path `cuda`'s MXFP4 kernels at every T. Same results contract as
 * cuda_experts.cu (serving, contract.md [precision.serving]); MXFP4 only.
 *
 * Why: the wmma kernels (cuda_experts.cu) decode into shared memory and reach 70-95 TFLOP/s
 * (docs/perf-cuda.md); the tensor cores of an H200 do about 780 on bf16 only through wgmma.
 *
 * Rules:
 *   - a block computes RT row tiles of WG_ROWS weight rows (2 RT warpgroups of 64; warp w of
 *     a row tile owns its rows 16w .. 16w+15) by BN grouped assignment rows of one local expert
 *     (a tile of the device tile table, built for BN rows); the weights are the A operand, in
 *     registers, and
 *     the gathered activation rows the B operand, in shared memory, so BN can be as small as
 *     the tokens an expert has (wgmma's n) while the weight rows stay 64 a warpgroup;
 *   - create() re-lays the MXFP4 weights out once (cuda_wgmma_pack.cu): per 128-row tile and
 *     64-value chunk of the reduction, 16 bytes per lane holding exactly the E2M1 codes of its
 *     A fragments, each register's codes at the bits decode_word reads (cuda_wgmma_layout.h), and one
 *     scale word per row pair; rows past the matrix and values past Kdim are zero codes with
 *     scale 1;
 *   - a register's codes become bf16 by a shift and a mask (the magnitude bits at bf16 bits
 *     8..6: the E2M1 value times 2^-126) and one bf16 product by 2^(e - 1), their scale times
 *     2^126 (two products, for every block of an expert that has a scale where that is no bf16,
 *     flagged at create), the signs merged after: exact, as every E2M1 value times a power of
 *     two in range is a bf16 (moe_shard_build refuses scales that overflow). A chunk's four
 *     scales become two bf16 pairs (a row's two blocks) in four instructions, and each product
 *     reads its half of a pair through HMUL2's operand swizzle; products are exact
 *     and summed in fp32 by the tensor cores in one fixed k order, so outputs depend on nothing
 *     but their own row and column;
 *   - activations move by cp.async through a STAGES-deep ring of shared-memory stages of CPS
 *     64-value chunks each (rows past the tile or values past Kdim zero-filled), in the
 *     128-byte swizzle that the wgmma descriptor names; the weights of 16- and 32-row tiles go
 *     from global memory straight to each lane's registers (DIRECT), those of 128-row tiles
 *     through a ring of chunk slots (wg_smem_bytes), two stages of four chunks and one chunk
 *     more, so that the block barrier comes once per four chunks;
 *   - the DIRECT tiles are issue-bound, so every instruction of their loop counts. A stage
 *     whose chunks and their next chunks all exist (all but the last one or two) runs unrolled,
 *     without bound tests, on one descriptor and running pointers, with the choice of one or
 *     two products and (32-row tiles) wgmma's n made once a stage; a stage inside Kdim copies
 *     its activations without bound tests; the unsplit kernels are held to 64 registers (four
 *     blocks a multiprocessor). A 16-row chunk takes 83 instructions, a 32-row one 84 (n = 16),
 *     92 and 102 three runs before (docs/perf-cuda.md, seventeenth to nineteenth runs);
 *   - KS > 1 (a few tokens): block ks of a tile takes chunks [ks n/KS, (ks+1) n/KS) and the
 *     last block to finish adds the KS slices' sums in slice order;
 *   - wgmma's n is the tile's real rows rounded up to 16 (wg_mma_cols; 8 for 32-row tiles), not
 *     BN: 3 % off the GEMMs at T = 512 and 4096, where tiles hold 12 of 32 and 96 of 128 rows
 *     on average, and n = 24 another 0.7 % off the layer at T = 512. The
 *     128-row tiles' chunk loop is compiled once per n (with_mma_cols), so that a chunk's
 *     products stay in flight while the next chunk is decoded (12 % off GEMM1 at T = 4096);
 *   - an expert's last tile is mostly empty under a skewed routing, so the kernels come in
 *     tiers (launch_tiers): the table's tiles of 128 or 32 rows, each taken by the smallest
 *     kernel that holds its rows left, the tiers' kernels side by side, the first tier's tiles
 *     the table's first part and each smaller tier's from the list the grouping made of them;
 *   - GEMM1's warp rows g and g + 8 are the gate and up rows of one intermediate channel, so
 *     SwiGLU is cuda_experts.cu's epilogue in registers; GEMM2 writes y in fp32;
 *   - GEMM2 is GEMM1's programmatic dependent launch and waits, tile by tile, for the count of
 *     GEMM1's warps that wrote the tile's h (wg_chain), so its blocks take the multiprocessors
 *     that GEMM1's last wave leaves idle.
 *
 * Measured on an H200, Inkling-Small (docs/perf-cuda.md): GEMM1 + GEMM2 at 2.3 TB/s at T = 8,
 * 2.9 TB/s at T = 64, 2.4 TB/s at T = 512 and 323-372 TFLOP/s at T = 4096 before the
 * seventeenth run's loop (the layer 5-8 % faster since; GEMM1 2.67 TB/s and GEMM2 2.64 at
 * T = 512 in its stage intervals). The profiles put
 * the small tiles' limit in the integer pipe (the decode's masks and shifts; the layout moves
 * four shifts a word to the multiply pipe) and the issue slots; the 128-row tiles' in the block
 * barrier and fixed-latency waits (docs/device-notes.md). A warp-specialised 128-row kernel (a
 * producer warpgroup and an mbarrier ring) was 19-33 % slower (docs/perf-cuda.md, seventh run).
 */
#include "cuda_device.cuh"
#include "cuda_wgmma_decode.cuh"
#include "cuda_wgmma_layout.h"
#include "cuda_wgmma_ptx.cuh"
#include "cuda_wgmma_tiles.cuh"

#include <cuda_bf16.h>
#include <stdint.h>
#include <limits.h>

#define WG_THREADS 256 /* one row tile of WG_ROWS (cuda_wgmma_tiles.cuh): two warpgroups */
#define WG_SPLIT_SETS 4 /* 16-row split tiles (T <= 4, at most 3 blocks a multiprocessor): chunks of
                          codes in flight a lane; 7 % off GEMM1 at T = 1 against 2 sets */
#define WG_L2_AHEAD 4 /* direct loads: chunks asked of L2 ahead of the stage being read (4 and 8
                         measured best, 16 and 32 slower) */

namespace {

/* ---------------------------------------------------------------- the kernel */

/* DIRECT: bytes of one pipeline stage of CPS chunks, each BN activation rows of WG_KC bf16 (128
 * bytes, swizzled); 1024-byte aligned, as the swizzle needs. */
template <int BN, int CPS> __host__ __device__ constexpr int wg_stage_bytes() {
    return (CPS * BN * 128 + 1023) / 1024 * 1024;
}
/* The register pipeline (not DIRECT) keeps its chunks in a ring of STAGES CPS + 1 chunk slots:
 * at a barrier only the stage's last chunk may still be read by its products, so one chunk
 * slot, not a whole stage, stays unwritten. The activation slots first (BN rows of 128 bytes
 * each, 1024-byte aligned), then the weight slots (the codes of RT row tiles, then their scale
 * words). */
template <int RT> __host__ __device__ constexpr int wg_ring_w_bytes() { return RT * (WG_A_BYTES + WG_S_BYTES); }
template <int BN, int RT, int STAGES, int CPS, bool DIRECT> __host__ __device__ constexpr int wg_smem_bytes() {
    return (DIRECT ? STAGES * wg_stage_bytes<BN, CPS>() : (STAGES * CPS + 1) * (BN * 128 + wg_ring_w_bytes<RT>())) +
           1024; /* + alignment of the dynamic base */
}

/* Scratch of a reduction split into KS slices (moe_cuda_wgmma_split_floats): each slice's sums
 * [pair][KS][BN][WG_ROWS] of the real columns, and one arrival count per (tile, row tile)
 * pair, zero between launches. */
struct wg_split {
    float *partial;
    int32_t *counters;
};

/* The (tile, row tile) pairs of one split GEMM at T tokens. GEMM1 and GEMM2 each have a region
 * of the scratch this big, GEMM2's after GEMM1's: GEMM2 runs beside GEMM1's last blocks
 * (wg_chain), and where the two GEMMs have different row tile counts (a tensor-parallel shard's
 * I_local) the same pair index names different tiles of the two. */
inline size_t split_pairs(int T, int K, int E, int D, int IL) {
    const int n_rt = max(wg_row_tiles(1, 2 * IL), wg_row_tiles(2, D));
    return (size_t)moe_cuda_tile_bound(T, K, E, 16) * n_rt;
}

/* A lane's 16 bytes of codes of one chunk, global -> registers, read once (no L1 line kept). */
__device__ __forceinline__ void load_codes(const uint8_t *src, uint32_t (&w)[4]) {
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                 : "l"(src));
}
/* Asks L2 for bytes [src, src + bytes) (16-byte aligned, a multiple of 16). */
__device__ __forceinline__ void l2_prefetch(const void *src, uint32_t bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
}
/* ---------------------------------------------------------------- GEMM2 beside GEMM1's end */

/* GEMM2 is launched as GEMM1's programmatic dependent (launch below): its blocks may start once
 * every GEMM1 block has started, so they fill the multiprocessors that GEMM1's last wave leaves
 * idle, and ask L2 for their first weights meanwhile. A GEMM2 tile reads h rows that all of its
 * tile's GEMM1 row tiles write: each GEMM1 warp that wrote its part of a tile counts itself in
 * the tile's gemm1_done (zeroed by the grouping), and a GEMM2 block reads h only once the count
 * is complete. Where a block waits changes no value. */
struct wg_chain {
    moe_cuda_tile *count_in; /* GEMM1: the tile table its warps count in (NULL: no count) */
    int wait_for;            /* GEMM2: the count of a tile whose h is complete (0: no wait) */
    bool beside_previous;    /* launched as the stream's previous kernel's programmatic
                                dependent: GEMM2 beside GEMM1, a tier beside the one before */
};
#define WG_WARPS_PER_ROW_TILE (WG_THREADS / 32)
#define WG_WAIT_CYCLES 20000000000LL /* about 10 s: a count that never completes traps */

/* The dependent grid (GEMM2) may launch once every block of this grid has passed here. */
__device__ __forceinline__ void launch_dependents() {
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
__device__ __forceinline__ int load_acquire(const int *p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
/* Every thread of the block calls it; returns once tile_i's GEMM1 warps have all counted, which
 * thread `waiter` polls. A count that never completes would be a bug of this file: the kernel
 * traps (the call then fails with a device error) instead of hanging. */
__device__ void wait_for_gemm1(const moe_cuda_tile *tiles, int tile_i, int wait_for, int waiter) {
    if ((int)threadIdx.x == waiter) {
        const long long t0 = clock64();
        while (load_acquire(&tiles[tile_i].gemm1_done) < wait_for) {
            if (clock64() - t0 > WG_WAIT_CYCLES) __trap();
            __nanosleep(256);
        }
    }
    __syncthreads();
}
/* A GEMM1 warp's h stores are done: count it in its tile (count) once they are visible
 * device-wide. The warp barrier orders its lanes' stores before lane 0's release (an acq_rel
 * fence, cumulative, then a relaxed add), which GEMM2's acquire load pairs with: one fence a
 * warp instead of a sequentially consistent one (GEMM1 0.5 % faster at T = 4096,
 * docs/perf-cuda.md, twenty-sixth run). */
__device__ __forceinline__ void count_gemm1_warp(int *count) {
    __syncwarp();
    if (threadIdx.x % 32 == 0)
        asm volatile("fence.acq_rel.gpu;\n\tred.relaxed.gpu.global.add.s32 [%0], 1;\n" ::"l"(count) : "memory");
}

/* A lane's scale word of one chunk (four lanes read the same one). */
__device__ __forceinline__ uint32_t load_scale_word(const uint8_t *src) {
    uint32_t v;
    asm("ld.global.nc.u32 %0, [%1];\n" : "=r"(v) : "l"(src));
    return v;
}

/* The sums of one row tile's warp (acc, wgmma's fragment: acc[4j + e] row g, column 8j + 2t +
 * e; acc[4j + 2 + e] row g + 8) to h (GEMM1, through SwiGLU) or y (GEMM2). KS > 1: slice ks's
 * sums of the real columns go to its place in the scratch first; the block that finishes its
 * (tile, row tile) last adds the KS slices in slice order, so a sum has one order whichever
 * block comes last. Every thread of the block calls this; returns whether this block wrote the
 * outputs (not a slice that another block adds up). */
template <int STAGE, int BN, int KS>
__device__ __forceinline__ bool store_tile(const stream_args &p, wg_split split, float (&acc)[BN / 2],
                                           const int *row_src, int rows, int tile_i, int n_rt, int rt,
                                           int ks, int my_warp, int tid, bool *last_slice) {
    const int lane = tid % 32, g = lane / 4, t = lane % 4;
    auto each_real_column = [&](auto &&f) {
#pragma unroll
        for (int j = 0; j < BN / 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++)
                if (8 * j + 2 * t + e < rows) f(acc[4 * j + e], acc[4 * j + 2 + e], 8 * j + 2 * t + e);
    };
    if (KS > 1) {
        const size_t pair = (size_t)tile_i * n_rt + rt;
        const int row = 16 * my_warp + g;
        float *mine = split.partial + (pair * KS + ks) * (WG_ROWS * BN);
        each_real_column([&](float &lo, float &hi, int m) {
            mine[m * WG_ROWS + row] = lo;
            mine[m * WG_ROWS + row + 8] = hi;
        });
        __threadfence(); /* the slice is visible before the count says so */
        __syncthreads();
        if (tid == 0) *last_slice = atomicAdd(&split.counters[pair], 1) == KS - 1;
        __syncthreads();
        if (!*last_slice) return false;
        __threadfence();
        const float *slices = split.partial + pair * KS * (WG_ROWS * BN);
        each_real_column([&](float &lo, float &hi, int m) {
            lo = __ldcg(slices + m * WG_ROWS + row), hi = __ldcg(slices + m * WG_ROWS + row + 8);
            for (int k = 1; k < KS; k++) {
                lo += __ldcg(slices + (size_t)k * (WG_ROWS * BN) + m * WG_ROWS + row);
                hi += __ldcg(slices + (size_t)k * (WG_ROWS * BN) + m * WG_ROWS + row + 8);
            }
        });
        if (tid == 0) split.counters[pair] = 0; /* ready for the next launch */
    }
    if (STAGE == 1) {
        /* h of every column from fp32 alone, without a branch, so that the columns' chains
         * interleave (with a branch a column, each chain was exposed: a 128-row block's stores
         * took 4.4 us at T = 4096, 3.6 without, 2.7 with the groups below; docs/perf-cuda.md,
         * twenty-fifth run); a column where fp32 does not stand is written again, by the same
         * thread, from the double branch: GEMM2 reads h only after the count */
        const int c = 64 * rt + 8 * my_warp + g;
        int all_stand = 1;
        auto store_h = [&](int j, int e) {
            const int m = 8 * j + 2 * t + e;
            int stands;
            const uint16_t h = swiglu_bits_fp32(acc[4 * j + e], acc[4 * j + 2 + e], &stands);
            all_stand &= stands;
            if (m < rows && c < p.N / 2) p.h_out[(size_t)row_src[m] * (p.N / 2) + c] = h;
        };
        if constexpr (BN == 128) {
            /* groups of 32 columns, those past the tile's rows skipped (a test the block takes
             * alike): GEMM1 3.5-4.3 % faster at T = 1500 and 4096 (docs/perf-cuda.md, twenty-fifth
             * run) */
#pragma unroll
            for (int j0 = 0; j0 < BN / 8; j0 += 4) {
                if (8 * j0 >= rows) break;
#pragma unroll
                for (int j = j0; j < j0 + 4; j++) {
                    store_h(j, 0);
                    store_h(j, 1);
                }
            }
        } else {
            /* the small tiles' columns in one run: the groups' loop (even of one group) made the
             * 32-row tiles' layer 1-2 % slower at T = 512 */
#pragma unroll
            for (int j = 0; j < BN / 8; j++) {
                store_h(j, 0);
                store_h(j, 1);
            }
        }
        if (!all_stand)
            each_real_column([&](float &lo, float &hi, int m) {
                if (c < p.N / 2) p.h_out[(size_t)row_src[m] * (p.N / 2) + c] = swiglu_bits(lo, hi);
            });
    } else {
        each_real_column([&](float &lo, float &hi, int m) {
            const size_t a = (size_t)row_src[m];
            const int r = WG_ROWS * rt + 16 * my_warp + g;
            if (r < p.N) p.y_out[a * p.N + r] = lo;
            if (r + 8 < p.N) p.y_out[a * p.N + r + 8] = hi;
        });
    }
    return true;
}

/* RT row tiles of WG_ROWS (2 RT warpgroups) by BN rows of one tile. p.w_mx / p.w_scale are the
 * packed codes and scale words; block b takes row tiles RT (b % n_rtb) .. of tile b / n_rtb (the
 * row tiles of one tile run side by side, sharing its activation rows in L2). A pipeline stage
 * holds CPS chunks of activations, so its barrier and copy round are paid once per CPS chunks.
 * The weights come one of two ways:
 *   DIRECT (one row tile a block): each lane loads its own codes and scale word into registers
 *       one chunk ahead, from L2, which one thread asks for WG_L2_AHEAD chunks ahead; products
 *       wait before the next chunk is decoded;
 *   PIPE: the block copies each chunk's codes and scale words with its activations into its
 *       slot of the ring (wg_smem_bytes), and decodes the chunks into two register sets in
 *       turn, waiting for all groups but one after each chunk, so that a chunk's products run
 *       beside the next chunk's decode (the loop is compiled once per n: an n chosen a chunk at
 *       a time adds an empty group, wgmma_chunk). */
template <int STAGE, int BN, int STAGES, int RT, bool PIPE, int KS, int CPS, bool DIRECT>
__device__ __forceinline__ void expert_wgmma_item(const stream_args &p, wg_split split,
                                                  const uint8_t *two_products, wg_chain chain,
                                                  int item, bool let_dependents) {
    static_assert(KS == 1 || RT == 1, "a split reduction takes one row tile a block");
    static_assert(!PIPE || CPS % 2 == 0, "the register pipeline alternates two sets: a stage's chunks in pairs");
    static_assert(!PIPE || (BN * 8) % (WG_THREADS * RT) == 0, "a ring copy's place holds no chunk offset");
    static_assert(DIRECT || CPS * WG_S_BYTES / 16 <= WG_THREADS, "one scale copy a thread");
    static_assert(DIRECT != PIPE, "direct weight loads (one register set) or the register pipeline");
    static_assert(!DIRECT || RT == 1, "direct weight loads: one row tile a block");
    extern __shared__ uint8_t smem_raw[];
    __shared__ int row_src[BN];  /* assignment of tile row m, -1 past the tile */
    __shared__ int tok_row[BN];  /* its activation row */
    __shared__ bool last_slice;  /* KS > 1: this block adds the slices up */
    __shared__ int *count_at;    /* GEMM1: its tile's gemm1_done, or NULL (kept here, not in a
                                    register through the loop) */
    constexpr int THREADS = WG_THREADS * RT;
    static_assert(THREADS > BN, "GEMM2's wait for GEMM1 by a thread that reads no row");
    const int n_rt = wg_row_tiles(STAGE, p.N), n_kc = wg_chunks(p.Kdim), n_rtb = (n_rt + RT - 1) / RT;
    const int ks = item % KS, block = item / KS;
    const int rtb = block % n_rtb, tier_j = block / n_rtb;
    const int kc_begin = ks * n_kc / KS, kc_end = (ks + 1) * n_kc / KS; /* this block's chunks */
    const int n_chunks = kc_end - kc_begin, n_stages = (n_chunks + CPS - 1) / CPS;
    /* a tier above the first takes the tiles of its list, the first the table's first n_tiles[0]
     * (the grouping puts its tiles there); an exited block counts as one that let GEMM2 launch */
    if (tier_j >= *(p.tier_list ? p.tier_count : p.n_tiles)) return;
    /* GEMM2 may launch once every block is past here; it writes only y, so nothing that GEMM1
     * reads changes under it */
    if ((STAGE == 1 || p.rows_hi > 0) && let_dependents) launch_dependents(); /* (GEMM2's next tier too) */
    const int tile_i = p.tier_list ? p.tier_list[tier_j] : tier_j;
    const moe_cuda_tile tile = p.tiles[tile_i];
    if (STAGE == 2 && chain.wait_for > 0) { /* h comes from GEMM1, the weights do not */
        if (threadIdx.x == 0)
            for (int r = RT * rtb; r < RT * rtb + RT && r < n_rt; r++) {
                const size_t c0 = ((size_t)tile.expert * n_rt + r) * n_kc + kc_begin;
                const int n = min(n_chunks, WG_L2_AHEAD + CPS);
                l2_prefetch(p.w_mx + c0 * WG_A_BYTES, (uint32_t)n * WG_A_BYTES);
                l2_prefetch(p.w_scale + c0 * WG_S_BYTES, (uint32_t)n * WG_S_BYTES);
            }
    }
    /* the expert has a scale above the one-product limit: every warp decodes with two */
    const bool two = two_products[tile.expert] != 0;
    const int rows = tile_rows(tile, p.counts, p.perm, p.T, BN, row_src);
    /* the rows' two dependent reads run beside the wait: its thread reads no row (GEMM2 at
     * T = 1500 and 4096 1 % faster, docs/perf-cuda.md, thirty-seventh run) */
    if (STAGE == 2 && chain.wait_for > 0) wait_for_gemm1(p.tiles, tile_i, chain.wait_for, THREADS - 1);
    const int n_cols = wg_mma_cols<BN>(rows);
    if (threadIdx.x == 0)
        count_at = STAGE == 1 && chain.count_in ? &chain.count_in[tile_i].gemm1_done : NULL;
    __syncthreads();
    if ((int)threadIdx.x < BN) tok_row[threadIdx.x] = row_src[threadIdx.x] / p.a_row_div;
    __syncthreads();

    constexpr int B_BYTES = BN * 128, STAGE_BYTES = wg_stage_bytes<BN, CPS>();
    constexpr int RING_SLOTS = STAGES * CPS + 1, W_BYTES = wg_ring_w_bytes<RT>(), RING_W_OFF = RING_SLOTS * B_BYTES;
    const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const int tid = (int)threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4;
    const int my_tile = warp / 8, my_warp = warp % 8; /* row tile within the block, warp in it */
    const int rt = RT * rtb + my_tile;
    /* The weight copies of this thread: 16-byte piece copy_idx (+ 256 c) of its row tile's
     * codes of the stage's CPS chunks, and piece copy_idx of their scale words (contiguous in
     * the packed layout as in the stage). */
    const int copy_tile = tid / WG_THREADS, copy_idx = tid % WG_THREADS;
    const bool copy_real = RT * rtb + copy_tile < n_rt;
    const int scale_chunk = copy_idx / (WG_S_BYTES / 16); /* < CPS: this thread copies scales */
    const size_t chunk0 = ((size_t)tile.expert * n_rt + (copy_real ? RT * rtb + copy_tile : 0)) * n_kc;
    const uint8_t *codes = p.w_mx + chunk0 * WG_A_BYTES + copy_idx * 16;
    const uint8_t *scales = p.w_scale + chunk0 * WG_S_BYTES + copy_idx * 16;

    /* The activation copies of this thread, fixed for the whole reduction: 16-byte piece c of
     * tile row r of the stage's chunk j goes to its swizzled place in every stage; only the k
     * offset moves. A thread keeps them as ACT_PLACES places, each copy a place moved on by
     * whole chunks (cuda_wgmma_layout.h: one place where the threads divide into whole chunks'
     * pieces, two where a 128-row tile's chunk divides into its 512 threads): registers are
     * what bound the blocks a multiprocessor holds. */
    constexpr int CHUNK_PIECES = BN * 8, ACT_PIECES = CPS * CHUNK_PIECES;
    constexpr int ACT_COPIES = (ACT_PIECES + THREADS - 1) / THREADS;
    constexpr int ACT_PLACES = moe_wg_act_places(BN, THREADS, CPS);
    /* copy i's place and its chunk within the stage */
    auto act_place = [](int i) { return moe_wg_act_place(BN, THREADS, CPS, i); };
    auto act_chunk = [](int i) { return moe_wg_act_chunk(BN, THREADS, CPS, i); };
    const uint16_t *act_src[ACT_PLACES]; /* rows past the tile: row 0's start, never read */
    uint32_t act_dst[ACT_PLACES];
    int act_k[ACT_PLACES];               /* the piece's first value in stage 0; >= Kdim: nothing to copy */
    uint32_t act_size[ACT_PLACES];       /* 16, or 0 past the tile's rows (zero-filled) */
#pragma unroll
    for (int i = 0; i < ACT_PLACES; i++) {
        const int idx = tid + i * THREADS, j = idx / CHUNK_PIECES, r = idx / 8 % BN, c = idx % 8;
        const bool real = idx < ACT_PIECES && r < rows;
        act_src[i] = real ? p.a_src + (size_t)tok_row[r] * p.Kdim + WG_KC * j + 8 * c : p.a_src;
        act_dst[i] = (uint32_t)(j * B_BYTES + r * 128 + ((c ^ (r & 7)) * 16));
        act_k[i] = real ? WG_KC * j + 8 * c : p.Kdim;
        act_size[i] = real ? 16u : 0u;
    }
    /* PIPE: chunk slot j after slot s0 */
    auto ring_slot = [](uint32_t s0, int j) {
        const uint32_t s = s0 + (uint32_t)j;
        return s >= (uint32_t)RING_SLOTS ? s - (uint32_t)RING_SLOTS : s;
    };
    /* a stage's slot: its offset in the ring of stages (PIPE: its first chunk's slot), stepped
     * without a division */
    auto next_slot = [&](uint32_t slot) {
        if constexpr (PIPE) {
            return ring_slot(slot, CPS);
        } else {
            slot += STAGE_BYTES;
            return slot == (uint32_t)(STAGES * STAGE_BYTES) ? 0u : slot;
        }
    };
    /* PIPE: where chunk j of the stage in slot keeps its activations, and its weights */
    auto ring_act_at = [&](uint32_t slot, int j) { return base + ring_slot(slot, j) * (uint32_t)B_BYTES; };
    auto ring_w_at = [&](uint32_t slot, int j) { return base + RING_W_OFF + ring_slot(slot, j) * (uint32_t)W_BYTES; };
    auto load_stage = [&](int kc0, uint32_t slot) { /* chunks kc0 .. kc0 + CPS - 1 */
        const uint32_t st = base + slot;
        if (ACT_PIECES % THREADS == 0 && (kc0 + CPS) * WG_KC <= p.Kdim) {
            /* every value of the stage is inside the rows (every stage but a last partial
             * one): only the row decides, and a row past the tile reads inside row 0 */
#pragma unroll
            for (int i = 0; i < ACT_COPIES; i++) {
                const int q = act_place(i);
                const uint16_t *src = act_src[q] + (size_t)kc0 * WG_KC; /* + a constant below */
                cp_async16_size((PIPE ? ring_act_at(slot, act_chunk(i)) : st + act_chunk(i) * B_BYTES) + act_dst[q], src + act_chunk(i) * WG_KC, act_size[q]);
            }
        } else {
#pragma unroll
            for (int i = 0; i < ACT_COPIES; i++) {
                if (ACT_PIECES % THREADS != 0 && tid + i * THREADS >= ACT_PIECES) break;
                const int q = act_place(i), more = act_chunk(i);
                const bool valid = act_k[q] + (kc0 + more) * WG_KC < p.Kdim;
                cp_async16((PIPE ? ring_act_at(slot, more) : st + more * B_BYTES) + act_dst[q], valid ? act_src[q] + (kc0 + more) * WG_KC : p.a_src,
                           valid);
            }
        }
        if constexpr (PIPE) { /* a row tile past the matrix reads row tile 0's chunks, zero-filled */
            const bool whole = kc0 + CPS <= kc_end;
#pragma unroll
            for (int j = 0; j < CPS; j++)
                if (whole || kc0 + j < kc_end)
                    cp_async16(ring_w_at(slot, j) + copy_tile * WG_A_BYTES + copy_idx * 16,
                               codes + (size_t)(kc0 + j) * WG_A_BYTES, copy_real);
            if (scale_chunk < CPS && (whole || kc0 + scale_chunk < kc_end))
                cp_async16(ring_w_at(slot, scale_chunk) + RT * WG_A_BYTES + copy_tile * WG_S_BYTES +
                               copy_idx % (WG_S_BYTES / 16) * 16,
                           scales + (size_t)kc0 * WG_S_BYTES, copy_real);
        }
    };
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++) acc[i] = 0.0f;
    /* chunk j of a stage whose first chunk's descriptor is desc: B_BYTES further on, which
     * the descriptor's address field (bytes / 16) takes without a carry */
    auto mma_at = [&](uint64_t desc, int j, uint32_t (&a)[4][4]) {
        wgmma_fence();
        wgmma_chunk<BN>(acc, a, desc + (uint64_t)(j * (B_BYTES / 16)), n_cols);
        wgmma_commit();
    };
    auto mma_chunk = [&](uint32_t slot, int j, uint32_t (&a)[4][4]) {
        mma_at(smem_desc_sw128(base + slot), j, a);
    };

    /* Stage st's slot is refilled LOOKAHEAD stages later, after a barrier that every thread
     * reaches only once its wgmmas of stage st are done (PIPE waits for all but the last group:
     * that chunk's slot is the ring's one more). */
    constexpr int LOOKAHEAD = STAGES - 1;
    uint32_t slot = 0, load_slot = 0;
#pragma unroll
    for (int s = 0; s < LOOKAHEAD; s++) {
        if (s < n_stages) load_stage(kc_begin + s * CPS, load_slot);
        cp_async_commit();
        load_slot = next_slot(load_slot);
    }
    auto begin_stage = [&](int st) {
        cp_async_wait<LOOKAHEAD - 1>(); /* this thread's copies of stage st have landed */
        fence_proxy_async();
        __syncthreads(); /* everyone's have; the slot refilled next is no longer read */
        if (st + LOOKAHEAD < n_stages) load_stage(kc_begin + (st + LOOKAHEAD) * CPS, load_slot);
        cp_async_commit();
        load_slot = next_slot(load_slot);
    };
    if (DIRECT) {
        /* Each lane reads its own 16 code bytes and scale word of a chunk straight into
         * registers, one chunk ahead of their decode (two for 16-row tiles), from L2: one
         * thread of the block asks L2 for the row tile's codes and scales WG_L2_AHEAD chunks
         * ahead in bulk. No shared memory, copy round or barrier for the weights; the barrier
         * is paid once per CPS chunks, for the activations. The loop of a last, partial stage
         * is not unrolled (ptxas would decode a chunk ahead into a second register set); a
         * whole stage is, at the 64-register cap, without that. */
        const size_t my_chunk0 = ((size_t)tile.expert * n_rt + rt) * n_kc;
        const uint8_t *tile_codes = p.w_mx + my_chunk0 * WG_A_BYTES;
        const uint8_t *tile_scales = p.w_scale + my_chunk0 * WG_S_BYTES;
        const uint8_t *my_codes = tile_codes + (my_warp * 32 + lane) * 16;
        const uint8_t *my_scales = tile_scales + (my_warp * 8 + g) * 4;
        auto prefetch = [&](int kc, int n) { /* chunks kc .. kc + n - 1 into L2 */
            if (tid != 0 || kc >= kc_end) return;
            if (kc + n > kc_end) n = kc_end - kc;
            l2_prefetch(tile_codes + (size_t)kc * WG_A_BYTES, (uint32_t)n * WG_A_BYTES);
            l2_prefetch(tile_scales + (size_t)kc * WG_S_BYTES, (uint32_t)n * WG_S_BYTES);
        };
        prefetch(kc_begin, WG_L2_AHEAD + CPS);
        /* the stage's activations are in; L2 is asked for the chunks after the next CPS */
        auto open_stage = [&](int st) {
            const int kc0 = kc_begin + st * CPS;
            begin_stage(st);
            prefetch(kc0 + WG_L2_AHEAD + CPS, CPS);
            return kc0;
        };
        if constexpr (BN == 16) {
            /* 16-row tiles: SETS chunks in flight a lane, chunk kc in set kc % SETS, chunk
             * kc + SETS loaded into the same set once kc is decoded; the empty asm keeps set h's
             * decode after the previous chunk's wgmma wait (else ptxas decodes ahead into a
             * second fragment set). Two sets measured 2-5 % faster at T <= 64; the 32-row
             * tiles, capped at 64 registers, 2.5 % slower with it (docs/device-notes.md). */
            constexpr int SETS = KS > 1 ? WG_SPLIT_SETS : 2;
            static_assert(CPS % SETS == 0, "a stage holds whole rounds of the register sets");
            uint32_t wq[SETS][4], swq[SETS];
#pragma unroll
            for (int h = 0; h < SETS; h++)
                if (kc_begin + h < kc_end) {
                    load_codes(my_codes + (size_t)(kc_begin + h) * WG_A_BYTES, wq[h]);
                    swq[h] = load_scale_word(my_scales + (size_t)(kc_begin + h) * WG_S_BYTES);
                }
            uint32_t a[4][4];
            for (int st = 0; st < n_stages; st++) {
                const int kc0 = open_stage(st);
                if (kc0 + CPS + SETS <= kc_end) {
                    /* a whole stage whose chunks all have a next chunk (every stage but the
                     * last one or two): unrolled, no bound tests, one descriptor, the next
                     * loads from one running pointer pair, one choice of products (92 -> 87
                     * instructions a chunk in the SASS; docs/perf-cuda.md, seventeenth run) */
                    const uint64_t desc = smem_desc_sw128(base + slot);
                    const uint8_t *next_codes = my_codes + (size_t)kc0 * WG_A_BYTES;
                    const uint8_t *next_scales = my_scales + (size_t)kc0 * WG_S_BYTES;
                    with_products(two, [&](auto two_c) {
#pragma unroll
                        for (int j = 0; j < CPS; j += SETS) {
                            next_codes += SETS * WG_A_BYTES;
                            next_scales += SETS * WG_S_BYTES;
#pragma unroll
                            for (int h = 0; h < SETS; h++) {
                                asm volatile("" : "+r"(wq[h][0]), "+r"(wq[h][1]), "+r"(wq[h][2]),
                                             "+r"(wq[h][3]), "+r"(swq[h])::"memory");
                                decode_words_as<decltype(two_c)::value>(wq[h], swq[h], a);
                                load_codes(next_codes + h * WG_A_BYTES, wq[h]);
                                swq[h] = load_scale_word(next_scales + h * WG_S_BYTES);
                                mma_at(desc, j + h, a);
                                wgmma_wait_all();
                            }
                        }
                    });
                    slot = next_slot(slot);
                    continue;
                }
#pragma unroll 1
                for (int j = 0; j < CPS; j += SETS) {
#pragma unroll
                    for (int h = 0; h < SETS; h++) {
                        const int kc = kc0 + j + h;
                        if (kc >= kc_end) break;
                        asm volatile("" : "+r"(wq[h][0]), "+r"(wq[h][1]), "+r"(wq[h][2]),
                                     "+r"(wq[h][3]), "+r"(swq[h])::"memory");
                        decode_words(wq[h], swq[h], two, a);
                        if (kc + SETS < kc_end) {
                            load_codes(my_codes + (size_t)(kc + SETS) * WG_A_BYTES, wq[h]);
                            swq[h] = load_scale_word(my_scales + (size_t)(kc + SETS) * WG_S_BYTES);
                        }
                        mma_chunk(slot, j + h, a);
                        wgmma_wait_all();
                    }
                }
                slot = next_slot(slot);
            }
        } else {
            uint32_t wq[4];
            load_codes(my_codes + (size_t)kc_begin * WG_A_BYTES, wq);
            uint32_t swq = load_scale_word(my_scales + (size_t)kc_begin * WG_S_BYTES);
            uint32_t a[4][4];
            for (int st = 0; st < n_stages; st++) {
                const int kc0 = open_stage(st);
                if (kc0 + CPS + 1 <= kc_end) {
                    /* as the 16-row tiles' whole stages, and n chosen once a stage instead of a
                     * chunk: 102 -> 88 instructions a chunk in the SASS (n = 16) */
                    const uint64_t desc = smem_desc_sw128(base + slot);
                    with_mma_cols<BN>(n_cols, [&](auto cols) { with_products(two, [&](auto two_c) {
                        constexpr int N = decltype(cols)::value;
                        const uint8_t *next_codes = my_codes + (size_t)kc0 * WG_A_BYTES;
                        const uint8_t *next_scales = my_scales + (size_t)kc0 * WG_S_BYTES;
#pragma unroll
                        for (int j = 0; j < CPS; j++) {
                            next_codes += WG_A_BYTES;
                            next_scales += WG_S_BYTES;
                            decode_words_as<decltype(two_c)::value>(wq, swq, a);
                            load_codes(next_codes, wq);
                            swq = load_scale_word(next_scales);
                            wgmma_fence();
                            wgmma_steps<N>(acc, a, desc + (uint64_t)(j * (B_BYTES / 16)));
                            wgmma_commit();
                            wgmma_wait_all();
                        }
                    }); });
                    slot = next_slot(slot);
                    continue;
                }
#pragma unroll 1
                for (int j = 0; j < CPS; j++) {
                    const int kc = kc0 + j;
                    if (kc >= kc_end) break;
                    decode_words(wq, swq, two, a);
                    if (kc + 1 < kc_end) {
                        load_codes(my_codes + (size_t)(kc + 1) * WG_A_BYTES, wq);
                        swq = load_scale_word(my_scales + (size_t)(kc + 1) * WG_S_BYTES);
                    }
                    mma_chunk(slot, j, a);
                    wgmma_wait_all();
                }
                slot = next_slot(slot);
            }
        }
    } else {
        /* a stage's chunks in pairs, chunk i + j in register set a0 and i + j + 1 in a1, each read
         * from its slot in the ring with its scale word; the barrier (begin_stage) once per CPS
         * chunks. The loop is compiled once per n (with_mma_cols), so that a chunk is exactly one
         * wgmma group and "all but one" lets its products run beside the next chunk's decode: 12 %
         * off GEMM1 at T = 4096 against choosing n a chunk at a time (docs/perf-cuda.md, seventh
         * run). GEMM1 and GEMM2 find a chunk's slot and places two ways, each the faster for it,
         * in lambdas of their own: one pair chosen by STAGE inside shared lambdas made ptxas compile
         * GEMM1 136 SASS instructions longer and spill in GEMM2 (docs/perf-cuda.md, thirty-eighth
         * run). */
        with_mma_cols<BN>(n_cols, [&](auto cols) {
            constexpr int N = decltype(cols)::value;
            uint32_t a0[4][4], a1[4][4];
            /* the block's chunks c and c + 1 from slots s0 and s1 (their scale words read first),
             * in register sets a0 and a1; false once c is the block's last chunk */
            auto chunk_pair = [&](auto &scale_word, auto &decode_mma, uint32_t s0, uint32_t s1, int c) {
                const uint32_t w0 = scale_word(s0, kc_begin + c), w1 = scale_word(s1, kc_begin + c + 1);
                decode_mma(s0, w0, a0);
                wgmma_wait_one();
                keep_regs(a1);
                if (c + 1 >= n_chunks) return false;
                decode_mma(s1, w1, a1);
                wgmma_wait_one();
                keep_regs(a0);
                return true;
            };
            if constexpr (STAGE == 1) {
                /* GEMM1: one running chunk slot, as the ring's slots are used in order (0 to
                 * RING_SLOTS - 1, then 0 again), and a chunk's places slot 0's plus the slot's bytes:
                 * 11 instructions a chunk fewer, GEMM1 at T = 4096 1.4 % faster on an H100 */
                const uint32_t w_at0 = base + RING_W_OFF + my_tile * WG_A_BYTES + (my_warp * 32 + lane) * 16;
                const uint32_t s_at0 = base + RING_W_OFF + RT * WG_A_BYTES + my_tile * WG_S_BYTES + (my_warp * 8 + g) * 4;
                const uint64_t desc0 = smem_desc_sw128(base);
                auto scale_word = [&](uint32_t s, int kc) {
                    uint32_t w = 0x7F7F7F7Fu;
                    if (kc < kc_end)
                        asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(w) : "r"(s_at0 + s * (uint32_t)W_BYTES) : "memory");
                    return w;
                };
                auto decode_mma = [&](uint32_t s, uint32_t w, uint32_t (&a)[4][4]) {
                    decode_chunk_at(w_at0 + s * (uint32_t)W_BYTES, w, two, a);
                    wgmma_fence();
                    wgmma_steps<N>(acc, a, desc0 + (uint64_t)(s * (uint32_t)(B_BYTES / 16)));
                    wgmma_commit();
                };
                auto next_chunk_slot = [](uint32_t s) { return s + 1 == (uint32_t)RING_SLOTS ? 0u : s + 1; };
                uint32_t s0 = 0;
                for (int i = 0; i < n_chunks; i += CPS) {
                    begin_stage(i / CPS);
#pragma unroll 1
                    for (int j = 0; j < CPS; j += 2) {
                        if (i + j >= n_chunks) break;
                        const uint32_t s1 = next_chunk_slot(s0);
                        if (!chunk_pair(scale_word, decode_mma, s0, s1, i + j)) break;
                        s0 = next_chunk_slot(s1);
                    }
                }
            } else {
                /* GEMM2: each chunk's slot from its stage's, its places from the slot (the running
                 * slot spilled here and made GEMM2 no faster) */
                auto scale_word = [&](uint32_t s, int kc) {
                    uint32_t w = 0x7F7F7F7Fu;
                    if (kc < kc_end)
                        asm volatile("ld.shared.u32 %0, [%1];\n"
                                     : "=r"(w)
                                     : "r"(ring_w_at(s, 0) + RT * WG_A_BYTES + my_tile * WG_S_BYTES + (my_warp * 8 + g) * 4)
                                     : "memory");
                    return w;
                };
                auto decode_mma = [&](uint32_t s, uint32_t w, uint32_t (&a)[4][4]) {
                    decode_chunk_at(ring_w_at(s, 0) + my_tile * WG_A_BYTES + (my_warp * 32 + lane) * 16, w, two, a);
                    wgmma_fence();
                    wgmma_steps<N>(acc, a, smem_desc_sw128(ring_act_at(s, 0)));
                    wgmma_commit();
                };
                for (int i = 0; i < n_chunks; i += CPS) {
                    begin_stage(i / CPS);
#pragma unroll 1
                    for (int j = 0; j < CPS; j += 2) {
                        if (i + j >= n_chunks) break;
                        if (!chunk_pair(scale_word, decode_mma, ring_slot(slot, j), ring_slot(slot, j + 1), i + j)) break;
                    }
                    slot = next_slot(slot);
                }
            }
            wgmma_wait_all();
            keep_regs(a0);
            keep_regs(a1);
        });
    }
    cp_async_wait<0>();

    if (RT * rtb + my_tile >= n_rt) return;
    const bool wrote = store_tile<STAGE, BN, KS>(p, split, acc, row_src, rows, tile_i, n_rt, rt, ks,
                                                 my_warp, tid, &last_slice);
    if (STAGE == 1 && count_at && wrote) count_gemm1_warp(count_at);
}

/* Block b takes item b (expert_wgmma_item). */
template <int STAGE, int BN, int STAGES, int RT, bool PIPE, int KS, int CPS, bool DIRECT>
__global__ void __launch_bounds__(WG_THREADS * RT, DIRECT && KS == 1 ? 4 : 0)
    expert_wgmma_kernel(stream_args p, wg_split split, const uint8_t *two_products, wg_chain chain) {
    expert_wgmma_item<STAGE, BN, STAGES, RT, PIPE, KS, CPS, DIRECT>(p, split, two_products, chain,
                                                                    (int)blockIdx.x, true);
}

/* A listed tier below 128-row tiles (tiers 128,32,16): one wave of blocks takes the list's
 * items in turn, block b items b, b + grid, ... below the list's count times its row tiles. The
 * grid a block an item is sized by E, the list's bound, and a routing that fills the 128-row
 * tiles leaves the list nearly empty: at uniform T = 4096 GEMM1's two smaller tiers had 16,384
 * blocks that left after one read, 43 us between GEMM1's 128-row tiles and GEMM2 on an H100
 * (22 us in one wave; docs/perf-cuda.md, fifty-first run). Below 32-row tiles (tiers 32,16) the
 * list holds most tiles and a block an item stays: one wave was 1.1-1.5 % slower at T = 512.
 * A block lets the dependent grid launch as it begins its last item, so that grid still
 * starts once every item has. */
template <int STAGE, int BN, int STAGES, int RT, bool PIPE, int KS, int CPS, bool DIRECT>
__global__ void __launch_bounds__(WG_THREADS * RT, 4)
    expert_wgmma_listed_kernel(stream_args p, wg_split split, const uint8_t *two_products, wg_chain chain) {
    static_assert(DIRECT && KS == 1 && RT == 1, "a listed tier's tiles take one block an item");
    const int items = *p.tier_count * wg_row_tiles(STAGE, p.N);
    for (int item = (int)blockIdx.x; item < items; item += (int)gridDim.x) {
        expert_wgmma_item<STAGE, BN, STAGES, RT, PIPE, KS, CPS, DIRECT>(
            p, split, two_products, chain, item, item + (int)gridDim.x >= items);
        __syncthreads(); /* the next item rewrites the shared rows and stages */
    }
}

/* GEMM1 counts its warps in the tile table (chain.count_in); GEMM2 waits for the count
 * (chain.wait_for) and is launched as GEMM1's programmatic dependent, which CUDA honours when
 * GEMM1 is the stream's previous kernel (a graph keeps the edge; an event recorded between the
 * two makes it an ordinary launch). */
template <int STAGE, int BN, int STAGES, int RT, bool PIPE, int KS, int CPS, bool DIRECT>
moe_status launch(cudaStream_t stream, const moe_cuda_experts *ex, int T, int K, stream_args p,
                  const uint8_t *codes, const uint8_t *scales, wg_chain chain, int table_m,
                  moe_error *err) {
    if (T == 0 || ex->E == 0) return MOE_OK;
    if (!ex->mxfp4 || !codes || !scales)
        return moe_fail(err, MOE_ERR_UNSUPPORTED,
                        "cuda: the wgmma expert kernels read MXFP4 weights packed at create()");
    p.w_mx = codes, p.w_scale = scales;
    const uint8_t *two_products = scales + wg_flags_offset(STAGE, ex->E, p.N, p.Kdim);
    const int n_rtb = (wg_row_tiles(STAGE, p.N) + RT - 1) / RT;
    /* a listed tier: one tile an expert at most; the first of several: tiles that each hold more
     * than the next tier's rows */
    long tiles = moe_cuda_tile_bound(T, K, ex->E, table_m);
    const long most = p.tier_list ? (long)ex->E : p.rows_lo > 0 ? (long)T * K / (p.rows_lo + 1) : tiles;
    if (most < tiles) tiles = most > 0 ? most : 1;
    const long blocks = (long)n_rtb * tiles * KS;
    wg_split split = {ex->split_partial, ex->split_counters};
    if (STAGE == 2 && KS > 1 && split.partial && split.counters) { /* GEMM2's own region */
        const size_t pairs = split_pairs(T, K, ex->E, ex->D, ex->IL);
        split.partial += pairs * KS * WG_ROWS * BN, split.counters += pairs;
    }
    if (KS > 1 && (!split.partial || !split.counters || T > MOE_CUDA_WG_SPLIT_MAX_T))
        return moe_fail(err, MOE_ERR_INTERNAL, "cuda: split wgmma kernels for T = %d without scratch", T);
    if (blocks > 0x7FFFFFFFL)
        return moe_fail(err, MOE_ERR_UNSUPPORTED, "cuda: expert wgmma%d grid of %ld blocks too large",
                        STAGE, blocks);
    const int smem = wg_smem_bytes<BN, RT, STAGES, CPS, DIRECT>();
    auto kernel = expert_wgmma_kernel<STAGE, BN, STAGES, RT, PIPE, KS, CPS, DIRECT>;
    /* a listed tier below 128-row tiles: one wave (expert_wgmma_listed_kernel); below 32-row
     * tiles the list holds most tiles, and a block an item was faster */
    bool one_wave = false;
    if constexpr (DIRECT && KS == 1 && RT == 1) {
        one_wave = p.tier_list != NULL && table_m == WG_ROWS;
        if (one_wave) kernel = expert_wgmma_listed_kernel<STAGE, BN, STAGES, RT, PIPE, KS, CPS, DIRECT>;
    }
    CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    long grid = blocks;
    if (one_wave) { /* as many blocks as the multiprocessors hold at once */
        int device = 0, sms = 0, per_sm = 0;
        CUDA_TRY(cudaGetDevice(&device));
        CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, WG_THREADS * RT, smem));
        const long wave = (long)sms * (per_sm > 0 ? per_sm : 1);
        if (wave < grid) grid = wave;
    }
    cudaLaunchAttribute beside;
    beside.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    beside.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)grid), cfg.blockDim = dim3(WG_THREADS * RT);
    cfg.dynamicSmemBytes = (size_t)smem, cfg.stream = stream;
    cfg.attrs = &beside, cfg.numAttrs = chain.beside_previous ? 1 : 0;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, p, split, two_products, chain);
    if (e != cudaSuccess)
        return moe_fail(err, MOE_ERR_DEVICE, "cuda: launching expert_wgmma_kernel<gemm%d> "
                        "(%ld blocks): %s", STAGE, grid, cudaGetErrorString(e));
    return MOE_OK;
}

} // namespace

size_t moe_cuda_wgmma_split_floats(int T, int K, int E, int D, int IL) {
    return 2 * split_pairs(T, K, E, D, IL) * MOE_CUDA_WG_SPLIT * WG_ROWS * 16;
}
size_t moe_cuda_wgmma_split_counters(int T, int K, int E, int D, int IL) {
    return 2 * split_pairs(T, K, E, D, IL);
}

/* The counts that chain GEMM2 to GEMM1 (wg_chain). */
inline wg_chain chain_gemm1(moe_cuda_tile *tiles) { return {tiles, 0, false}; }
/* (ex->planted_chain_race: no wait, the race that tests/test_cuda.c plants) */
inline wg_chain chain_gemm2(const moe_cuda_experts *ex) {
    return {NULL, ex->planted_chain_race ? 0 : WG_WARPS_PER_ROW_TILE * wg_row_tiles(1, 2 * ex->IL),
            true};
}

/* Measured on an H200, Inkling-Small (docs/device-notes.md, "2026-12-01, direct loads"): for 16
 * and 32 rows, direct weight loads with four-chunk activation stages (GEMM1 + GEMM2 at T = 64:
 * 740 us against 853 us for the shared-memory copies of the earlier kernels in the same run, at
 * T = 512: 1407 against 1560; one-, two- and eight-chunk stages, four stages, L2 requests 16 or
 * 32 chunks ahead, L1 prefetches and loading a chunk earlier were no faster); for 128 rows two
 * row tiles a block (the activation tile read from L2 once per 256 weight rows) with the
 * register pipeline and stages of two chunks (4992 and 5018 against 5170 and 5175 us for the
 * layer at T = 4096), three stages of them (4554.1 and 4552.8 against 4591.7 and 4584.8 us
 * with four; one row tile a block at two blocks a multiprocessor, four or five stages of one
 * chunk, 4703-4718; a 256-row tile of two warpgroups, 43 % slower in GEMM1 at T = 4096,
 * docs/perf-cuda.md, twenty-seventh run); two stages of four chunks in the ring of nine chunk
 * slots, a barrier every four chunks (on an H100: the layer 0.9 % faster at T = 1500, 1862.0-
 * 1878.0 us against 1883.2-1888.9, and 0.1 % at T = 4096, 3517.7-3526.6 against 3518.3-3540.8,
 * five rounds; four whole stages of two, on an H200, 0.5-0.9 %; docs/perf-cuda.md, thirty-fourth
 * and thirty-fifth runs). A 128-row block's row tiles stay one group: two or four groups of
 * them taken in turn, to pay a block's start once, were 6-15 % slower at T = 4096 (a group's
 * second pass over the tile's activation rows reads them from DRAM; GEMM1 with a shape of its
 * own, or the first stage copied a chunk at a time, 1.3-1.8 % slower; docs/perf-cuda.md,
 * thirty-sixth run). The split reduction gives a few tokens' few tiles enough blocks to
 * keep every multiprocessor streaming (GEMM2 split too: 23.3 against 25.0 us at T = 1;
 * splitting up to T = 8 was slower there). */
#define WG_SMALL_CONFIG 3, 1, false, 1, 4, true /* stages, RT, PIPE, KS, CPS, DIRECT */
#ifndef WG_128_STAGES /* (an experiment's knobs, NVFLAGS=-DWG_128_STAGES=3 -DWG_128_CPS=2: a ring of seven) */
#define WG_128_STAGES 2
#endif
#ifndef WG_128_CPS
#define WG_128_CPS 4
#endif
#define WG_128_CONFIG WG_128_STAGES, 2, true, 1, WG_128_CPS, false
#define WG_SPLIT_CONFIG 3, 1, false, MOE_CUDA_WG_SPLIT, 4, true

/* One tier's kernel: bn rows a tile, over a tile table of table_m rows a tile. */
template <int STAGE>
moe_status launch_rows(int bn, int table_m, cudaStream_t stream, const moe_cuda_experts *ex,
                       int T, int K, const stream_args &p, wg_chain chain, moe_error *err) {
    const uint8_t *codes = STAGE == 1 ? ex->w13_wg : ex->w2_wg;
    const uint8_t *scales = STAGE == 1 ? ex->w13_wg_scale : ex->w2_wg_scale;
    switch (bn) {
    case 128: return launch<STAGE, 128, WG_128_CONFIG>(stream, ex, T, K, p, codes, scales, chain, table_m, err);
    case 32: return launch<STAGE, 32, WG_SMALL_CONFIG>(stream, ex, T, K, p, codes, scales, chain, table_m, err);
    case 16: return launch<STAGE, 16, WG_SMALL_CONFIG>(stream, ex, T, K, p, codes, scales, chain, table_m, err);
    }
    return moe_fail(err, MOE_ERR_INTERNAL, "cuda: no wgmma kernel of %d rows a tile", bn);
}

/* Tiers of tile sizes (tiers.rows [tiers.n], descending): the grouping makes tiles of rows[0]
 * rows, and the kernel of rows[i] takes the tiles whose rows left (in the expert, from the
 * tile's first) exceed rows[i + 1], the first any number above, the last every tile left; each
 * launches beside the one before. The first takes the table's first n_tiles[0] tiles, where the
 * grouping puts its own (cuda_group_block.cuh), on a grid of at most T K / (rows[1] + 1) tiles
 * (each of its tiles holds more than rows[1] rows); each other tier reads the list the grouping
 * made of its tiles (at most one an expert, so a grid of E tiles at most; under 128-row tiles
 * one wave of blocks that take its items in turn, expert_wgmma_listed_kernel). Blocks past either
 * count leave after one read (three dependent reads before: on an H100 the layer at T = 4096
 * 0.7-0.8 % faster on both routings with the later tiers' lists, T = 2048 1.2 % on uniform
 * routing, T = 1500 0.9 % slower on the skewed one; docs/perf-cuda.md, forty-sixth run; the
 * first tier's part and grid, where it took the table's tiles in order and left the others'
 * after three reads: T = 256 0.8 and 1.9 % faster on the skewed and uniform routings, T = 1500
 * 0.7 % on the skewed one, T = 512 to 4096 not told apart, on an H100, forty-eighth run). A
 * skewed routing leaves most of an expert's last tile empty (at T = 4096 the 128-row tiles
 * hold 71 rows on average, at T = 512 the 32-row ones 13,
 * docs/perf-cuda.md, twenty-sixth run), and a block's fixed cost is smaller on the small
 * tiles' kernels: 128,32,16 took the layer from 3541-3546 to 3365-3377 us at T = 4096 and
 * from 2035-2041 to 1745-1750 at T = 1500; 32,16 from 1186-1189 to 1124 at T = 512 and from
 * 943 (16 alone) to 893-896 at T = 256 (twenty-seventh run; cuda_backend.cu's wgmma_for picks
 * the tiers by T). One size: no filter at all. */
template <int STAGE>
moe_status launch_tiers(const moe_cuda_tiers &tiers, cudaStream_t stream, const moe_cuda_experts *ex,
                        int T, int K, stream_args p, wg_chain chain, moe_error *err) {
    const int n = tiers.n, *sizes = tiers.rows;
    for (int i = 0; i < n; i++) {
        p.rows_hi = n == 1 ? 0 : i == 0 ? INT_MAX : sizes[i];
        p.rows_lo = i + 1 < n ? sizes[i + 1] : 0;
        /* a tier above the first: the tiles the grouping listed for it (cuda_internal.h) */
        p.tier_count = i > 0 ? p.n_tiles + i : NULL;
        p.tier_list = i > 0 ? p.n_tiles + moe_cuda_tier_list(i, ex->E) : NULL;
        if (i > 0) chain.beside_previous = true;
        const moe_status st = launch_rows<STAGE>(sizes[i], sizes[0], stream, ex, T, K, p, chain, err);
        if (st != MOE_OK) return st;
    }
    return MOE_OK;
}

#define WGMMA_LAUNCHERS(NAME, N, ...)                                                             \
    static_assert(N >= 1 && N <= MOE_CUDA_MAX_TIERS, "the grouping lists at most that many tiers"); \
    const moe_cuda_tiers moe_cuda_wg_tiers_##NAME = {N, {__VA_ARGS__}};                           \
    moe_status moe_cuda_expert_wg1_##NAME(cudaStream_t stream, const moe_cuda_experts *ex, int T, \
                                          int K, const uint16_t *x, const int32_t *counts,        \
                                          const int32_t *perm, moe_cuda_tile *tiles,              \
                                          const int32_t *n_tiles, uint16_t *h, moe_error *err) {  \
        const stream_args p = stream_args_gemm1(ex, T, K, x, counts, perm, tiles, n_tiles, h);    \
        return launch_tiers<1>(moe_cuda_wg_tiers_##NAME, stream, ex, T, K, p, chain_gemm1(tiles), \
                               err);                                                              \
    }                                                                                             \
    moe_status moe_cuda_expert_wg2_##NAME(cudaStream_t stream, const moe_cuda_experts *ex, int T, \
                                          int K, const uint16_t *h, const int32_t *counts,        \
                                          const int32_t *perm, const moe_cuda_tile *tiles,        \
                                          const int32_t *n_tiles, float *y, moe_error *err) {     \
        const stream_args p = stream_args_gemm2(ex, T, h, counts, perm, tiles, n_tiles, y);       \
        return launch_tiers<2>(moe_cuda_wg_tiers_##NAME, stream, ex, T, K, p, chain_gemm2(ex),    \
                               err);                                                              \
    }
WGMMA_LAUNCHERS(16, 1, 16)
WGMMA_LAUNCHERS(32_16, 2, 32, 16)
WGMMA_LAUNCHERS(128_32_16, 3, 128, 32, 16)
moe_status moe_cuda_expert_wg1_16_split(cudaStream_t stream, const moe_cuda_experts *ex, int T,
                                        int K, const uint16_t *x, const int32_t *counts,
                                        const int32_t *perm, moe_cuda_tile *tiles,
                                        const int32_t *n_tiles, uint16_t *h, moe_error *err) {
    const stream_args p = stream_args_gemm1(ex, T, K, x, counts, perm, tiles, n_tiles, h);
    return launch<1, 16, WG_SPLIT_CONFIG>(stream, ex, T, K, p, ex->w13_wg, ex->w13_wg_scale,
                                          chain_gemm1(tiles), 16, err);
}
moe_status moe_cuda_expert_wg2_16_split(cudaStream_t stream, const moe_cuda_experts *ex, int T,
                                        int K, const uint16_t *h, const int32_t *counts,
                                        const int32_t *perm, const moe_cuda_tile *tiles,
                                        const int32_t *n_tiles, float *y, moe_error *err) {
    const stream_args p = stream_args_gemm2(ex, T, h, counts, perm, tiles, n_tiles, y);
    return launch<2, 16, WG_SPLIT_CONFIG>(stream, ex, T, K, p, ex->w2_wg, ex->w2_wg_scale,
                                          chain_gemm2(ex), 16, err);
}
