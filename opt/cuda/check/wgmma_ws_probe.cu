/*
 * wgmma_ws_probe.cu: would the 128-row expert tiles keep the tensor pipe busier if warps of their
 * own decoded the weights? Today (cuda_experts_wgmma.cu) every warpgroup decodes its own 64
 * weight rows into the registers of wgmma's A operand and multiplies them by the tile's n tokens
 * (n <= 128) from shared memory, one chunk's products in flight while it decodes the next;
 * profiled at T = 4096 the tensor pipe is 55-60 % active (docs/perf-cuda.md, thirty-first run).
 * The public prefill kernels for mixed-input MoE on Hopper split the work instead: decoding
 * warps write a weight tile once into shared memory as bf16, and multiplying warpgroups read
 * both operands from shared memory. This probe times that loop on data already in shared
 * memory, in the two orientations:
 *
 *   weights as A (`ss`, `ws`): the tiles' own shape, 256 weight rows by n tokens (wgmma
 *       m64nNk16, n = 64, 96 or 128, two 64-row slabs a multiplying warpgroup), so that an
 *       expert's tile pads its tokens to 16 as today; ideal 8 n cycles a chunk, as
 *       cuda-wgmma-probe's round;
 *   tokens as A (`ss-t`, `ws-t`): 128 tokens (64 a multiplying warpgroup) by n = 128 or 256
 *       weight rows, the public kernels' shape, which pads an expert's tokens to 64 (at T = 4096,
 *       96 rows an expert on average: 128, a quarter of the products wasted); ideal 4 n cycles.
 *
 * and in two modes:
 *
 *   ss   the two multiplying warpgroups alone, the weights already bf16 in shared memory: the
 *        pipe's rate with both operands in shared memory;
 *   ws   DEC decoding warpgroups fill a ring of NB weight slots (decode_chunk_at, then stmatrix
 *        into the 128-byte swizzle), a full and an empty mbarrier a slot; the multiplying
 *        warpgroups wait for a slot, queue its products and free the slot of the chunk DEPTH
 *        before once wgmma has read it (DEPTH 2 only with tokens as A: with weights as A, whose
 *        two slabs a warpgroup are two accumulator sets, ptxas serialises the wgmma of DEPTH 2).
 *
 * Rules:
 *   - one block a multiprocessor: two multiplying warpgroups and DEC decoding ones; a chunk is
 *     the block's weight rows (NW) by its tokens by 64 reduction values;
 *   - the tokens: A_SLOTS chunks of 128 rows of 1.0 (chunk c reads slot c % A_SLOTS); the codes:
 *     CODE_SETS chunks of cuda-wgmma-probe's layout (every code 1.0) whose scale bytes make rows
 *     g and g + 8 of a 16-row group 2^(m - 2) and 2^(m - 1) in set m (chunk c decodes set
 *     c % CODE_SETS), so that a slot read before it is refilled, or a row placed in the wrong
 *     half, shows: every accumulator must end at exactly 64 times its row's sum over the chunks
 *     (ss: the rows 1.0 and 2.0 throughout);
 *   - a decoding warp takes NW / 16 / (4 DEC) groups of 16 rows a chunk; the full barrier counts
 *     the decoding threads (each fences its shared-memory writes for the async proxy first), the
 *     empty one the multiplying threads;
 *   - thread 0 reads the clock around the loop: cycles a chunk against the pipe's ideal (2048
 *     multiply-adds a cycle a multiprocessor), the median over blocks and calls, and the call's
 *     time by events and its TFLOP/s.
 *
 * Usage: cuda-wgmma-ws-probe [--csv FILE] [--quick] (probe_common.h). Needs an sm_90 CUDA
 * device; exits 2 without one, on a bad argument or a bad FILE, 1 on a wrong result or a failed
 * call.
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

#define A_SLOTS 2           /* token chunks in shared memory, 128 rows each */
#define A_BYTES (128 * 128)
#define CODE_SETS 3         /* code chunks in shared memory, each its own scales */
#define NB 4                /* weight slots in the ring */
#define CHUNKS 1026         /* chunks a call (a multiple of CODE_SETS) */
#define QUICK_CHUNKS 12
#define REPS 5
#define BF16_ONE_PAIR 0x3F803F80u
#define BF16_TWO_PAIR 0x40004000u

enum ws_mode { MODE_SS, MODE_WS };
enum ws_orient { WEIGHTS_A, TOKENS_A };

/* The shape of orientation O at wgmma n = N: the block's weight rows and tokens, a multiplying
 * thread's accumulators, a chunk's ideal cycles. */
template <int O, int N> struct ws_shape {
    static constexpr int weight_rows = O == WEIGHTS_A ? 256 : N;
    static constexpr int tokens = O == WEIGHTS_A ? N : 128;
    static constexpr int acc = O == WEIGHTS_A ? 2 * (N / 2) : N / 2; /* two 64-row slabs, or one */
    static constexpr int ideal_cycles = weight_rows * tokens * 64 / 2048;
};

/* Shared memory of a block of NW weight rows: the weight slots (NW rows of 128 bytes), the token
 * slots, the code sets (NW / WG_ROWS row tiles of codes, then their scale words), the 2 NB
 * mbarriers. */
template <int NW> struct ws_smem {
    static constexpr int slot_bytes = NW * 128;
    static constexpr int b_off = 0;
    static constexpr int a_off = NB * slot_bytes;
    static constexpr int codes_off = a_off + A_SLOTS * A_BYTES;
    static constexpr int set_bytes = NW / WG_ROWS * (WG_A_BYTES + WG_S_BYTES);
    static constexpr int bars_off = codes_off + CODE_SETS * set_bytes;
    static constexpr int bytes = bars_off + 2 * NB * 8 + 1024; /* + alignment of the base */
};

/* ---------------------------------------------------------------- PTX of this loop only */

/* d (64 x N fp32, wgmma's fragment) += a (64 x 16 bf16) * b (16 x N bf16), both K-major in
 * shared memory in the 128-byte swizzle. One specialisation per N, as wgmma_bf16's
 * (cuda_wgmma_ptx.cuh): the accumulators, then the two descriptors and the scale-d flag. */
template <int N> __device__ __forceinline__ void wgmma_ss(float *d, uint64_t a_desc, uint64_t b_desc);
#define WS_DEFINE_SS(N, D_REGS, DESCS, FLAG, ...)                                                  \
    template <>                                                                                   \
    __device__ __forceinline__ void wgmma_ss<N>(float *d, uint64_t a_desc, uint64_t b_desc) {     \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " FLAG ", 0;\n"                            \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 "                  \
                     "{" D_REGS "}, " DESCS ", p, 1, 1, 0, 0;\n}\n"                               \
                     : __VA_ARGS__                                                                \
                     : "l"(a_desc), "l"(b_desc), "r"(1));                                         \
    }
#define WS_D128                                                                                   \
    WG_D64 ",%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84," \
           "%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104," \
           "%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121," \
           "%122,%123,%124,%125,%126,%127"
WS_DEFINE_SS(64, WG_D32, "%32, %33", "%34", WG_A64)
WS_DEFINE_SS(96, WG_D48, "%48, %49", "%50", WG_A96)
WS_DEFINE_SS(128, WG_D64, "%64, %65", "%66", WG_A128)
WS_DEFINE_SS(256, WS_D128, "%128, %129", "%130", WG_A128, WG_ACC8(64), WG_ACC8(72), WG_ACC8(80),
             WG_ACC8(88), WG_ACC8(96), WG_ACC8(104), WG_ACC8(112), WG_ACC8(120))

/* Four 8x8 bf16 matrices from mma fragment registers r to the rows whose addresses lanes 8i..8i+7
 * give (matrix i = register i). */
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]),
                 "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
}
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/* Until the phase of `parity` of bar has completed. */
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile("{\n.reg .pred done;\n"
                 "WAIT_%=:\n\tmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "\t@!done bra WAIT_%=;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}

/* Where lane `lane` gives stmatrix_x4 its row for k16 step s of rows 16 q .. 16 q + 15 of a
 * weight slot: row 16 q + lane % 8 (+ 8 for matrices 1 and 3), 16-byte piece 2 s (+ 1 for
 * matrices 2 and 3), swizzled by the row's place in its 8-row group. */
__device__ __forceinline__ uint32_t slot_row_addr(uint32_t slot, int q, int s, int lane) {
    const int r = 16 * q + lane % 8 + 8 * ((lane >> 3) & 1), piece = 2 * s + (lane >> 4);
    return slot + (uint32_t)((r / 8) * 1024 + (r % 8) * 128 + ((piece ^ (r % 8)) * 16));
}

/* ---------------------------------------------------------------- the kernel */

/* Every region: tokens 1.0; weight slots rows 1.0 (r % 16 < 8) and 2.0; code set m's codes 1.0
 * (code_word), scale bytes 125 + m (rows g) and 126 + m (rows g + 8) for both halves. */
template <int NW> __device__ void fill_regions(uint32_t base, uint32_t code_word, int threads) {
    using L = ws_smem<NW>;
    for (uint32_t off = threadIdx.x * 4; off < (uint32_t)L::bars_off; off += threads * 4) {
        uint32_t v;
        if (off < (uint32_t)L::a_off) {
            const uint32_t row = off % L::slot_bytes / 128;
            v = row % 16 < 8 ? BF16_ONE_PAIR : BF16_TWO_PAIR;
        } else if (off < (uint32_t)L::codes_off) {
            v = BF16_ONE_PAIR;
        } else {
            const uint32_t in_set = (off - L::codes_off) % L::set_bytes, m = (off - L::codes_off) / L::set_bytes;
            const uint32_t lo = 125 + m, hi = 126 + m;
            v = in_set < (uint32_t)(NW / WG_ROWS * WG_A_BYTES) ? code_word : lo | hi << 8 | lo << 16 | hi << 24;
        }
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(base + off), "r"(v) : "memory");
    }
    fence_proxy_async(); /* the wgmma reads them through the async proxy */
}

/* Whether accumulator i of a multiplying thread sits on a row g + 8 of a 16-row weight group:
 * weights as A, the fragment's rows (d[4j + 2 + e]); tokens as A, its columns (j odd). */
template <int O> __device__ __forceinline__ bool upper_half(int i) {
    return O == WEIGHTS_A ? i % 4 >= 2 : (i / 4) % 2 == 1;
}

template <int O, int N, int MODE, int DEC, int DEPTH>
__global__ void __launch_bounds__((2 + DEC) * 128, 1)
    ws_probe_kernel(const int chunks, uint32_t code_word, long long *cycles, int *wrong) {
    using S = ws_shape<O, N>;
    using L = ws_smem<S::weight_rows>;
    constexpr int threads = (2 + DEC) * 128;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const uint32_t full = base + L::bars_off, empty = full + NB * 8; /* bar i at + 8 i */
    fill_regions<S::weight_rows>(base, code_word, threads);
    if (threadIdx.x < NB) {
        mbar_init(full + 8 * threadIdx.x, DEC * 128);
        mbar_init(empty + 8 * threadIdx.x, 2 * 128);
    }
    __syncthreads();
    const int tid = (int)threadIdx.x, wg = tid / 128, lane = tid % 32;
    const long long t0 = clock64();
    if (wg < 2) { /* multiplying: weight slabs 2 wg, 2 wg + 1 by every token, or tokens 64 wg.. */
        float acc[S::acc];
#pragma unroll
        for (int i = 0; i < S::acc; i++) acc[i] = 0.0f;
        for (int c = 0; c < chunks; c++) {
            const uint32_t slot = base + L::b_off + (uint32_t)(c % NB) * L::slot_bytes;
            const uint32_t tok = base + L::a_off + (uint32_t)(c % A_SLOTS) * A_BYTES;
            if (MODE == MODE_WS) mbar_wait(full + 8 * (c % NB), (uint32_t)(c / NB) & 1u);
            wgmma_fence();
#pragma unroll
            for (int s = 0; s < 4; s++) { /* + 32 bytes a k16 step in both operands */
                if constexpr (O == WEIGHTS_A) {
                    const uint64_t b = smem_desc_sw128(tok) + 2 * s;
                    wgmma_ss<N>(acc, smem_desc_sw128(slot + (uint32_t)(2 * wg) * 8192u) + 2 * s, b);
                    wgmma_ss<N>(acc + N / 2, smem_desc_sw128(slot + (uint32_t)(2 * wg + 1) * 8192u) + 2 * s, b);
                } else {
                    wgmma_ss<N>(acc, smem_desc_sw128(tok + (uint32_t)wg * 8192u) + 2 * s, smem_desc_sw128(slot) + 2 * s);
                }
            }
            wgmma_commit();
            asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(DEPTH) : "memory");
            if (MODE == MODE_WS && c >= DEPTH) mbar_arrive(empty + 8 * ((c - DEPTH) % NB));
        }
        wgmma_wait_all();
        /* a row of weight group set m is 2^(m - 2) (lower half) or 2^(m - 1); ss: 1.0 or 2.0 */
        float unit = 0.0f;
        for (int c = 0; c < chunks; c++) unit += MODE == MODE_WS ? (float)(1 << (c % CODE_SETS)) : 4.0f;
        int bad = 0;
#pragma unroll
        for (int i = 0; i < S::acc; i++) bad += acc[i] != 64.0f * unit * (upper_half<O>(i % (N / 2)) ? 0.5f : 0.25f);
        if (bad) atomicAdd(wrong, bad);
    } else if (MODE == MODE_WS) { /* decoding: warp dw's row groups dw, dw + 4 DEC, ... */
        const int dw = (tid - 256) / 32, g = lane / 4;
        constexpr int NW = S::weight_rows, groups = NW / 16 / (4 * DEC);
        for (int c = 0; c < chunks; c++) {
            const uint32_t slot = base + L::b_off + (uint32_t)(c % NB) * L::slot_bytes;
            const uint32_t set = base + L::codes_off + (uint32_t)(c % CODE_SETS) * L::set_bytes;
            if (c >= NB) mbar_wait(empty + 8 * (c % NB), (uint32_t)(c / NB - 1) & 1u);
#pragma unroll
            for (int i = 0; i < groups; i++) {
                const int q = dw + 4 * DEC * i, tile = q / 8, w = q % 8;
                uint32_t sw;
                asm volatile("ld.shared.u32 %0, [%1];\n"
                             : "=r"(sw)
                             : "r"(set + NW / WG_ROWS * WG_A_BYTES + tile * WG_S_BYTES + (w * 8 + g) * 4)
                             : "memory");
                uint32_t frag[4][4];
                decode_chunk_at(set + tile * WG_A_BYTES + (w * 32 + lane) * 16, sw, false, frag);
#pragma unroll
                for (int s = 0; s < 4; s++) stmatrix_x4(slot_row_addr(slot, q, s, lane), frag[s]);
            }
            fence_proxy_async(); /* this thread's stmatrix writes, before wgmma reads them */
            mbar_arrive(full + 8 * (c % NB));
        }
    }
    __syncthreads();
    const long long t1 = clock64();
    if (tid == 0) cycles[blockIdx.x] = t1 - t0;
}

typedef struct {
    const char *mode;
    int n, dec, depth, weight_rows, tokens, ideal_cycles, smem;
    wgmma_probe_fn fn;
} probe_case;

#define CASE(NAME, O, N, MODE, DEC, DEPTH)                                                        \
    {NAME, N, DEC, DEPTH, ws_shape<O, N>::weight_rows, ws_shape<O, N>::tokens,                   \
     ws_shape<O, N>::ideal_cycles, ws_smem<ws_shape<O, N>::weight_rows>::bytes,                   \
     ws_probe_kernel<O, N, MODE, DEC, DEPTH>}
#define WEIGHTS_A_CASES(N)                                                                        \
    CASE("ss", WEIGHTS_A, N, MODE_SS, 1, 1), CASE("ws", WEIGHTS_A, N, MODE_WS, 1, 1)
static const probe_case cases[] = {
    WEIGHTS_A_CASES(64), WEIGHTS_A_CASES(96), WEIGHTS_A_CASES(128), CASE("ws", WEIGHTS_A, 64, MODE_WS, 2, 1),
    CASE("ss-t", TOKENS_A, 128, MODE_SS, 1, 1), CASE("ss-t", TOKENS_A, 256, MODE_SS, 1, 1),
    CASE("ws-t", TOKENS_A, 128, MODE_WS, 2, 1), CASE("ws-t", TOKENS_A, 256, MODE_WS, 1, 1),
    CASE("ws-t", TOKENS_A, 256, MODE_WS, 1, 2),
};

int main(int argc, char **argv) {
    probe_args args;
    wgmma_probe_env env;
    if (wgmma_probe_start("cuda-wgmma-ws-probe", argc, argv, CHUNKS, QUICK_CHUNKS, REPS, &args, &env)) return 2;

    printf("cuda-wgmma-ws-probe: %d blocks (one a multiprocessor), %d chunks a call\n", env.sms, env.chunks);
    printf("%-5s %4s %7s %6s %4s %6s %5s %7s %12s %6s %10s %9s %9s\n", "mode", "n", "weights", "tokens", "dec",
           "depth", "regs", "smem", "cycles/chunk", "ideal", "efficiency", "us", "TFLOP/s");
    csv_row("mode,n,weight_rows,tokens,dec,depth,regs,smem,cycles_per_chunk,ideal_cycles,efficiency,us,TFLOPs\n");
    bool failed = false;
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n_cases; i++) {
        const probe_case *pc = &cases[i];
        char what[64];
        snprintf(what, sizeof what, "%s n = %d dec = %d depth = %d", pc->mode, pc->n, pc->dec, pc->depth);
        double cyc, t_us;
        int regs;
        if (!wgmma_probe_time(&env, pc->fn, (2 + pc->dec) * 128, pc->smem, env.chunks, what, &cyc,
                              &t_us, &regs))
            failed = true;
        const double ideal = pc->ideal_cycles;
        const double flops = 2.0 * pc->tokens * pc->weight_rows * 64 * (double)env.chunks * env.sms;
        printf("%-5s %4d %7d %6d %4d %6d %5d %7d %12.1f %6.0f %9.1f%% %9.1f %9.1f\n", pc->mode, pc->n,
               pc->weight_rows, pc->tokens, pc->dec, pc->depth, regs, pc->smem, cyc, ideal, 100.0 * ideal / cyc,
               t_us, flops / t_us * 1e-6);
        csv_row("%s,%d,%d,%d,%d,%d,%d,%d,%.1f,%.0f,%.4f,%.2f,%.1f\n", pc->mode, pc->n, pc->weight_rows, pc->tokens,
                pc->dec, pc->depth, regs, pc->smem, cyc, ideal, ideal / cyc, t_us, flops / t_us * 1e-6);
    }
    moe_error err;
    if (args.csv_path && moe_out_write_whole(args.csv_path, probe_csv, probe_csv_len, &err)) {
        fprintf(stderr, "cuda-wgmma-ws-probe: %s\n", err.msg);
        return 2;
    }
    return failed ? 1 : 0;
}
