/*
 * wgmma_probe.cu: what keeps the tensor pipe of the 128-row expert tiles 55-60 % busy
 * (docs/perf-cuda.md, thirty-first run's profile at T = 4096, against cuBLASLt's 91 %)? The
 * tiles' chunk loop, taken apart: the same block of four warpgroups, the same wgmma (A, the
 * weights, in registers; B, the tokens, in shared memory in the 128-byte swizzle) and the same
 * decode (cuda_wgmma_decode.cuh), on data already in shared memory, each piece added in turn:
 *
 *   mma-deep    A constant, DEEP_GROUPS chunks' products in flight a warpgroup: the pipe's own
 *               rate at wgmma's n (the tile's tokens, 16 to 128: 71-96 on average at T = 4096);
 *   mma         A constant in two register sets, waiting for all groups but one after each
 *               chunk, as the tiles do: what the group depth of a warpgroup costs;
 *   decode      each chunk's A decoded from its packed codes and scale word in shared memory
 *               into the register set in turn (the tiles' one-product decode);
 *   decode-bar  and the block barrier once a stage of two chunks, as the tiles' copy rounds;
 *   decode-bar4 the barrier once every four chunks instead (what stages of four would save);
 *   decode3     decode without the barrier on three register sets, waiting for all groups but
 *               two (n <= 96 only: the registers of 512 threads hold no more): what a deeper
 *               group queue buys the decoding warps.
 *
 * What is left between decode-bar and the tiles is the copies, the tile's start and its
 * epilogue. If mma-deep is far from the pipe's peak at the tiles' n, wgmma's n bounds them
 * (more tokens a tile, or the other orientation); if mma is, the group depth; if decode or
 * decode-bar, the warps' own loop.
 *
 * Rules:
 *   - one block of 512 threads (four warpgroups: two row tiles of 128 weight rows) a
 *     multiprocessor, as many blocks as multiprocessors; three stages of two chunks in shared
 *     memory (each chunk: 128 token rows of 64 bf16 values, the codes and scale words of the two
 *     row tiles), laid out as expert_wgmma_kernel's, filled once by the block: every token
 *     value 1.0, every code 1.0 (E2M1 0b0010 at the bits decode_word reads), every scale 2^0;
 *   - a warpgroup runs `chunks` chunks (4 wgmma m64nNk16 each; CHUNKS, --quick QUICK_CHUNKS)
 *     over the stages in turn, so every accumulator ends at exactly 64 chunks: each thread
 *     checks its N / 2 and counts the wrong
 *     ones (an integer count, the only atomic);
 *   - thread 0 of each block reads the clock around the loop: cycles a round (a chunk of each of
 *     the four warpgroups) against the pipe's 8 N (dense bf16: 2048 multiply-adds a cycle a
 *     multiprocessor, so m64nNk16 takes N / 2 cycles), the median over blocks and calls;
 *     beside it the call's time by events and its TFLOP/s.
 *
 * Usage: cuda-wgmma-probe [--csv FILE] [--quick] (probe_args.h; --quick: QUICK_CHUNKS chunks,
 * one call a case). Needs an sm_90 CUDA device; exits 2 without one, on a bad argument or a bad
 * FILE, 1 on a wrong result or a failed call.
 */
#include "../cuda_wgmma_decode.cuh"
#include "../cuda_wgmma_ptx.cuh"
#include "../cuda_wgmma_tiles.cuh"
#include "../../../common/out_file.h"
#include "probe_common.h"
#include "wgmma_probe_timing.cuh"

#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 512                  /* four warpgroups: two row tiles, as the 128-row tiles */
#define ROW_TILES 2
#define TOKENS 128                   /* B rows a chunk: the tile's tokens (wgmma reads the first N) */
#define CPS 2                        /* chunks a stage */
#define STAGES 3
#define B_BYTES (TOKENS * 128)       /* a chunk's token rows: 64 bf16 values each */
#define A_OFF (CPS * B_BYTES)        /* then the codes of ROW_TILES row tiles by CPS chunks */
#define S_OFF (A_OFF + ROW_TILES * CPS * WG_A_BYTES) /* then their scale words */
#define STAGE_BYTES ((S_OFF + ROW_TILES * CPS * WG_S_BYTES + 1023) / 1024 * 1024)
#define SMEM_BYTES (STAGES * STAGE_BYTES + 1024) /* + alignment of the dynamic base */
#define CHUNKS 1024                  /* a warpgroup's chunks a call (a 128-row GEMM1 block: 64) */
#define QUICK_CHUNKS 8               /* --quick: every case once, short, for the sanitizers */
#define REPS 5                       /* timed calls a case (--quick: 1) */
#define BF16_ONE_PAIR 0x3F803F80u
#define DEEP_GROUPS 3                /* mma-deep: chunks of products a warpgroup keeps in flight */

enum probe_mode { MODE_MMA_DEEP, MODE_MMA, MODE_DECODE, MODE_DECODE_BAR, MODE_DECODE_BAR4, MODE_DECODE3 };
static const char *const mode_names[] = {"mma-deep", "mma", "decode", "decode-bar", "decode-bar4", "decode3"};

/* Every stage: token values 1.0, codes `code_word`, scale bytes 127 (2^0). */
__device__ void fill_stages(uint32_t base, uint32_t code_word) {
    for (uint32_t off = threadIdx.x * 4; off < STAGES * STAGE_BYTES; off += THREADS * 4) {
        const uint32_t in_stage = off % STAGE_BYTES;
        const uint32_t v = in_stage < A_OFF ? BF16_ONE_PAIR : in_stage < S_OFF ? code_word : 0x7F7F7F7Fu;
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(base + off), "r"(v) : "memory");
    }
    fence_proxy_async(); /* the wgmma reads them through the async proxy */
    __syncthreads();
}

template <int N, int MODE>
__global__ void __launch_bounds__(THREADS, 1)
    wgmma_probe_kernel(const int all_chunks, uint32_t code_word, long long *cycles, int *wrong) {
    int chunks = all_chunks;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    fill_stages(base, code_word);
    const int tid = (int)threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4;
    const int my_tile = warp / 8, my_warp = warp % 8;
    float acc[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; i++) acc[i] = 0.0f;
    /* the constant sets (mma modes): 1.0 pairs read from the first token row, so that they are
     * 32 registers of unknown value, as decoded ones are, not one constant */
    uint32_t a0[4][4], a1[4][4];
#pragma unroll
    for (int s = 0; s < 4; s++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(a0[s][r]) : "r"(base + 4 * (4 * s + r)) : "memory");
            asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(a1[s][r]) : "r"(base + 64 + 4 * (4 * s + r)) : "memory");
        }
    /* chunk j of the stage at slot: its products, and (decode modes) its A fragments first */
    auto mma = [&](uint32_t slot, int j, uint32_t (&a)[4][4]) {
        wgmma_fence();
        wgmma_steps<N>(acc, a, smem_desc_sw128(base + slot + (uint32_t)(j * B_BYTES)));
        wgmma_commit();
    };
    auto decode = [&](uint32_t slot, int j, uint32_t (&a)[4][4]) {
        uint32_t sw;
        asm volatile("ld.shared.u32 %0, [%1];\n"
                     : "=r"(sw)
                     : "r"(base + slot + S_OFF + (my_tile * CPS + j) * WG_S_BYTES + (my_warp * 8 + g) * 4)
                     : "memory");
        decode_chunk_at(base + slot + A_OFF + (my_tile * CPS + j) * WG_A_BYTES + (my_warp * 32 + lane) * 16,
                        sw, false, a);
    };
    constexpr bool DECODE = MODE >= MODE_DECODE;
    auto wait_groups = [] { /* all groups but one, as the tiles; mma-deep: all but DEEP_GROUPS */
        if (MODE == MODE_MMA_DEEP) asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(DEEP_GROUPS) : "memory");
        else wgmma_wait_one();
    };
    const long long t0 = clock64();
    uint32_t slot = 0;
    if constexpr (MODE == MODE_DECODE3) {
        /* chunk c in set c % 3, its stage and place from c (a few instructions the other modes
         * step instead); after chunk c's products are queued, chunk c - 2's are done and its
         * set is the next one decoded */
        uint32_t a2[4][4];
        auto step = [&](int c, uint32_t (&a)[4][4], uint32_t (&next)[4][4]) {
            const uint32_t at = (uint32_t)((c >> 1) % STAGES) * STAGE_BYTES;
            decode(at, c & 1, a);
            mma(at, c & 1, a);
            asm volatile("wgmma.wait_group.sync.aligned 2;\n" ::: "memory");
            keep_regs(next);
        };
        for (int c = 0; c < chunks; c += 3) { /* chunks: a multiple of 3 in this mode */
            step(c, a0, a1);
            step(c + 1, a1, a2);
            step(c + 2, a2, a0);
        }
        chunks = 0; /* the loop below is the other modes' */
    }
    for (int i = 0; i < chunks; i += CPS) {
        if (MODE == MODE_DECODE_BAR || (MODE == MODE_DECODE_BAR4 && i % 4 == 0)) __syncthreads();
        if (DECODE) decode(slot, 0, a0);
        mma(slot, 0, a0);
        wait_groups();
        if (DECODE) keep_regs(a1); /* (constant sets are never written: nothing to keep) */
        if (DECODE) decode(slot, 1, a1);
        mma(slot, 1, a1);
        wait_groups();
        if (DECODE) keep_regs(a0);
        slot = slot + STAGE_BYTES == STAGES * STAGE_BYTES ? 0u : slot + STAGE_BYTES;
    }
    wgmma_wait_all();
    __syncthreads();
    const long long t1 = clock64();
    if (tid == 0) cycles[blockIdx.x] = t1 - t0;
    int bad = 0;
#pragma unroll
    for (int i = 0; i < N / 2; i++) bad += acc[i] != 64.0f * (float)all_chunks;
    if (bad) atomicAdd(wrong, bad);
}

typedef struct {
    int n, mode;
    wgmma_probe_fn fn;
} probe_case;

#define CASE(N, MODE) {N, MODE, wgmma_probe_kernel<N, MODE>}
#define CASES_OF(N)                                                                               \
    CASE(N, MODE_MMA_DEEP), CASE(N, MODE_MMA), CASE(N, MODE_DECODE), CASE(N, MODE_DECODE_BAR),    \
        CASE(N, MODE_DECODE_BAR4)
#define CASES_WITH_THREE_SETS(N) CASES_OF(N), CASE(N, MODE_DECODE3)
static const probe_case cases[] = {
    CASES_WITH_THREE_SETS(16), CASES_WITH_THREE_SETS(32), CASES_WITH_THREE_SETS(48), CASES_WITH_THREE_SETS(64),
    CASES_WITH_THREE_SETS(80), CASES_WITH_THREE_SETS(96), CASES_OF(112),          CASES_OF(128)};

int main(int argc, char **argv) {
    probe_args args;
    wgmma_probe_env env;
    if (wgmma_probe_start("cuda-wgmma-probe", argc, argv, CHUNKS, QUICK_CHUNKS, REPS, &args, &env)) return 2;

    printf("cuda-wgmma-probe: %d blocks of %d threads (one a multiprocessor), %d chunks a warpgroup, "
           "%d bytes of shared memory a block\n",
           env.sms, THREADS, env.chunks, SMEM_BYTES);
    printf("%-11s %4s %5s %12s %9s %10s %9s %9s\n", "mode", "n", "regs", "cycles/round", "ideal",
           "efficiency", "us", "TFLOP/s");
    csv_row("mode,n,regs,cycles_per_round,ideal_cycles,efficiency,us,TFLOPs\n");
    bool failed = false;
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    for (int c = 0; c < n_cases; c++) {
        const probe_case *pc = &cases[c];
        const int case_chunks = pc->mode == MODE_DECODE3 ? env.chunks / 3 * 3 : env.chunks; /* whole rounds of sets */
        char what[64];
        snprintf(what, sizeof what, "%s n = %d", mode_names[pc->mode], pc->n);
        double cyc, t_us;
        int regs;
        if (!wgmma_probe_time(&env, pc->fn, THREADS, SMEM_BYTES, case_chunks, what, &cyc, &t_us,
                              &regs))
            failed = true;
        const double ideal = 8.0 * pc->n;
        const double flops = 2.0 * 64 * pc->n * 16 * 4 * (double)case_chunks * 4 * env.sms;
        printf("%-11s %4d %5d %12.1f %9.0f %9.1f%% %9.1f %9.1f\n", mode_names[pc->mode], pc->n, regs, cyc,
               ideal, 100.0 * ideal / cyc, t_us, flops / t_us * 1e-6);
        csv_row("%s,%d,%d,%.1f,%.0f,%.4f,%.2f,%.1f\n", mode_names[pc->mode], pc->n, regs, cyc, ideal, ideal / cyc,
                t_us, flops / t_us * 1e-6);
    }
    moe_error err;
    if (args.csv_path && moe_out_write_whole(args.csv_path, probe_csv, probe_csv_len, &err)) {
        fprintf(stderr, "cuda-wgmma-probe: %s\n", err.msg);
        return 2;
    }
    return failed ? 1 : 0;
}
