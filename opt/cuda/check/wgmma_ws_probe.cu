/*
 * wgmma_ws_probe.cu: would the 128-row expert tiles keep the tensor pipe busier the other way
 * round? Today (cuda_experts_wgmma.cu) every warpgroup decodes its own 64 weight rows into the
 * registers of wgmma's A operand and multiplies them by the tile's n tokens (n <= 128) from
 * shared memory, one chunk's products in flight while it decodes the next; profiled at T = 4096
 * the tensor pipe is 55-60 % active (docs/perf-cuda.md, thirty-first run). The public prefill
 * kernels for mixed-input MoE on Hopper do it the other way: a decoding warpgroup writes a weight
 * tile once into shared memory as bf16, and the multiplying warpgroups read both operands from
 * shared memory, the tokens as A (64 a warpgroup) and the weights as B (n = 128 or 256 weight
 * rows), so the decode and the products run on different warps. This probe times that loop on
 * data already in shared memory, beside cuda-wgmma-probe's modes of today's loop:
 *
 *   ss-mma   the two multiplying warpgroups alone, the weights already bf16 in shared memory:
 *            the pipe's rate at m64nNWk16 with both operands in shared memory;
 *   ws       DEC decoding warpgroups fill a ring of NB weight slots (decode_chunk_at, then
 *            stmatrix into the 128-byte swizzle), a full and an empty mbarrier a slot; the
 *            multiplying warpgroups wait for a slot, queue its products and free the slot of
 *            the chunk DEPTH before once wgmma has read it.
 *
 * Rules:
 *   - one block a multiprocessor: two multiplying warpgroups (tokens 0..63 and 64..127) and DEC
 *     decoding ones; a chunk is 128 tokens by NW weight rows by 64 reduction values;
 *   - the tokens: A_SLOTS chunks of 1.0 (chunk c reads slot c % A_SLOTS); the codes: CODE_SETS
 *     chunks of cuda-wgmma-probe's layout (every code 1.0) whose scale bytes make rows g and g + 8
 *     of a 16-row group 2^(m - 2) and 2^(m - 1) in set m (chunk c decodes set c % CODE_SETS), so
 *     that a slot read before it is refilled, or a row placed in the wrong half, shows: every
 *     accumulator must end at exactly 64 times its rows' sum over the chunks (ss-mma: the rows
 *     1.0 and 2.0 throughout);
 *   - a decoding warp takes NW / 16 / (4 DEC) groups of 16 rows a chunk; the full barrier counts
 *     the decoding threads (each fences its shared-memory writes for the async proxy first), the
 *     empty one the multiplying threads;
 *   - thread 0 reads the clock around the loop: cycles a chunk against the pipe's 4 NW (2048
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

#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define TOKENS 128          /* a chunk's tokens: two multiplying warpgroups of 64 */
#define A_SLOTS 2           /* token chunks in shared memory */
#define A_BYTES (TOKENS * 128)
#define CODE_SETS 3         /* code chunks in shared memory, each its own scales */
#define NB 4                /* weight slots in the ring */
#define CHUNKS 1026         /* chunks a call (a multiple of CODE_SETS) */
#define QUICK_CHUNKS 12
#define REPS 5
#define BF16_ONE_PAIR 0x3F803F80u
#define BF16_TWO_PAIR 0x40004000u

enum ws_mode { MODE_SS_MMA, MODE_WS };
static const char *const mode_names[] = {"ss-mma", "ws"};

/* Shared memory of a block multiplying NW weight rows: the weight slots (NW rows of 128 bytes),
 * the token slots, the code sets (NW / WG_ROWS row tiles of codes, then their scale words), the
 * 2 NB mbarriers. */
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

/* d (64 x NW fp32, wgmma's fragment) += a (64 x 16 bf16) * b (16 x NW bf16), both K-major in
 * shared memory in the 128-byte swizzle. */
template <int NW> __device__ __forceinline__ void wgmma_ss(float *d, uint64_t a_desc, uint64_t b_desc);
#define WS_D128                                                                                   \
    WG_D64 ",%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84," \
           "%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104," \
           "%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121," \
           "%122,%123,%124,%125,%126,%127"
template <> __device__ __forceinline__ void wgmma_ss<128>(float *d, uint64_t a_desc, uint64_t b_desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WG_D64 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : WG_A128
                 : "l"(a_desc), "l"(b_desc), "r"(1));
}
template <> __device__ __forceinline__ void wgmma_ss<256>(float *d, uint64_t a_desc, uint64_t b_desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" WS_D128 "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
                 : WG_A128, WG_ACC8(64), WG_ACC8(72), WG_ACC8(80), WG_ACC8(88), WG_ACC8(96), WG_ACC8(104),
                   WG_ACC8(112), WG_ACC8(120)
                 : "l"(a_desc), "l"(b_desc), "r"(1));
}

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

template <int NW, int MODE, int DEC, int DEPTH>
__global__ void __launch_bounds__((2 + DEC) * 128, 1)
    ws_probe_kernel(const int chunks, uint32_t code_word, long long *cycles, int *wrong) {
    using L = ws_smem<NW>;
    constexpr int threads = (2 + DEC) * 128;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const uint32_t full = base + L::bars_off, empty = full + NB * 8; /* bar i at + 8 i */
    fill_regions<NW>(base, code_word, threads);
    if (threadIdx.x < NB) {
        mbar_init(full + 8 * threadIdx.x, DEC * 128);
        mbar_init(empty + 8 * threadIdx.x, 2 * 128);
    }
    __syncthreads();
    const int tid = (int)threadIdx.x, wg = tid / 128, lane = tid % 32;
    const long long t0 = clock64();
    if (wg < 2) { /* multiplying: tokens 64 wg .. 64 wg + 63 */
        float acc[NW / 2];
#pragma unroll
        for (int i = 0; i < NW / 2; i++) acc[i] = 0.0f;
        for (int c = 0; c < chunks; c++) {
            const uint32_t slot = base + L::b_off + (uint32_t)(c % NB) * L::slot_bytes;
            const uint32_t a = base + L::a_off + (uint32_t)(c % A_SLOTS) * A_BYTES + (uint32_t)wg * 8192u;
            if (MODE == MODE_WS) mbar_wait(full + 8 * (c % NB), (uint32_t)(c / NB) & 1u);
            wgmma_fence();
#pragma unroll
            for (int s = 0; s < 4; s++) /* + 32 bytes a k16 step in both */
                wgmma_ss<NW>(acc, smem_desc_sw128(a) + 2 * s, smem_desc_sw128(slot) + 2 * s);
            wgmma_commit();
            asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(DEPTH) : "memory");
            if (MODE == MODE_WS && c >= DEPTH) mbar_arrive(empty + 8 * ((c - DEPTH) % NB));
        }
        wgmma_wait_all();
        /* row n of the slot (column n here: d[4j + e], d[4j + 2 + e] are column 8j + 2t + e) is
         * 2^(m - 2) (n % 16 < 8) or 2^(m - 1) in code set m; ss-mma: 1.0 or 2.0 */
        float unit = 0.0f;
        for (int c = 0; c < chunks; c++) unit += MODE == MODE_WS ? (float)(1 << (c % CODE_SETS)) : 4.0f;
        int bad = 0;
#pragma unroll
        for (int i = 0; i < NW / 2; i++) bad += acc[i] != 64.0f * unit * ((i / 4) % 2 ? 0.5f : 0.25f);
        if (bad) atomicAdd(wrong, bad);
    } else if (MODE == MODE_WS) { /* decoding: warp dw's row groups dw, dw + 4 DEC, ... */
        const int dw = (tid - 256) / 32, g = lane / 4;
        constexpr int groups = NW / 16 / (4 * DEC);
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

typedef void (*probe_fn)(int, uint32_t, long long *, int *);
typedef struct {
    int nw, mode, dec, depth, smem;
    probe_fn fn;
} probe_case;

#define CASE(NW, MODE, DEC, DEPTH) {NW, MODE, DEC, DEPTH, ws_smem<NW>::bytes, ws_probe_kernel<NW, MODE, DEC, DEPTH>}
static const probe_case cases[] = {
    CASE(128, MODE_SS_MMA, 1, 1), CASE(256, MODE_SS_MMA, 1, 1), CASE(128, MODE_WS, 1, 1),
    CASE(128, MODE_WS, 2, 1),     CASE(128, MODE_WS, 2, 2),     CASE(256, MODE_WS, 1, 1),
    CASE(256, MODE_WS, 1, 2),
};

/* A lane word of codes whose eight codes are all 1.0 (E2M1 0b0010: magnitude bit 1). */
static uint32_t word_of_ones(void) {
    uint32_t w = 0;
    for (int j = 0; j < 4; j++)
        for (int h = 0; h < 2; h++) w |= 1u << moe_wg_code_bit(j, h, 1);
    return w;
}

int main(int argc, char **argv) {
    probe_args args;
    if (probe_parse_args("cuda-wgmma-ws-probe", argc, argv, &args)) return 2;
    const int chunks = args.quick ? QUICK_CHUNKS : CHUNKS, reps = args.quick ? 1 : REPS;
    moe_error err;
    int n_devices = 0, major = 0;
    if (cudaGetDeviceCount(&n_devices) != cudaSuccess || n_devices == 0 ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess || major != 9) {
        fprintf(stderr, "cuda-wgmma-ws-probe: no sm_90 CUDA device\n");
        return 2;
    }
    int sms = 0;
    PROBE_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    long long *cycles = NULL;
    int *wrong = NULL;
    PROBE_TRY(cudaMalloc(&cycles, (size_t)sms * sizeof(long long)));
    PROBE_TRY(cudaMalloc(&wrong, sizeof(int)));
    long long *cycles_host = (long long *)malloc((size_t)sms * sizeof(long long));
    double *chunk_cycles = (double *)malloc((size_t)sms * reps * sizeof(double));
    if (!cycles_host || !chunk_cycles) {
        fprintf(stderr, "cuda-wgmma-ws-probe: out of host memory\n");
        return 1;
    }
    cudaEvent_t e0, e1;
    PROBE_TRY(cudaEventCreate(&e0));
    PROBE_TRY(cudaEventCreate(&e1));
    const uint32_t code_word = word_of_ones();

    printf("cuda-wgmma-ws-probe: %d blocks (one a multiprocessor), %d chunks of %d tokens a call\n", sms,
           chunks, TOKENS);
    printf("%-7s %4s %4s %6s %5s %7s %12s %9s %10s %9s %9s\n", "mode", "nw", "dec", "depth", "regs", "smem",
           "cycles/chunk", "ideal", "efficiency", "us", "TFLOP/s");
    csv_row("mode,nw,dec,depth,regs,smem,cycles_per_chunk,ideal_cycles,efficiency,us,TFLOPs\n");
    bool failed = false;
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n_cases; i++) {
        const probe_case *pc = &cases[i];
        const int threads = (2 + pc->dec) * 128;
        cudaFuncAttributes attr;
        PROBE_TRY(cudaFuncGetAttributes(&attr, (const void *)pc->fn));
        PROBE_TRY(cudaFuncSetAttribute((const void *)pc->fn, cudaFuncAttributeMaxDynamicSharedMemorySize, pc->smem));
        double us[REPS];
        int n_chunk_cycles = 0;
        for (int r = -1; r < reps; r++) { /* r = -1: the warm-up call */
            PROBE_TRY(cudaMemset(wrong, 0, sizeof(int)));
            PROBE_TRY(cudaEventRecord(e0));
            pc->fn<<<sms, threads, pc->smem>>>(chunks, code_word, cycles, wrong);
            PROBE_TRY(cudaGetLastError());
            PROBE_TRY(cudaEventRecord(e1));
            PROBE_TRY(cudaEventSynchronize(e1));
            int wrong_host = 0;
            PROBE_TRY(cudaMemcpy(&wrong_host, wrong, sizeof(int), cudaMemcpyDeviceToHost));
            if (wrong_host) {
                fprintf(stderr, "cuda-wgmma-ws-probe: %s nw = %d dec = %d depth = %d: %d accumulators wrong\n",
                        mode_names[pc->mode], pc->nw, pc->dec, pc->depth, wrong_host);
                failed = true;
            }
            if (r < 0) continue;
            float ms = 0;
            PROBE_TRY(cudaEventElapsedTime(&ms, e0, e1));
            us[r] = 1000.0 * ms;
            PROBE_TRY(cudaMemcpy(cycles_host, cycles, (size_t)sms * sizeof(long long), cudaMemcpyDeviceToHost));
            for (int b = 0; b < sms; b++) chunk_cycles[n_chunk_cycles++] = (double)cycles_host[b] / chunks;
        }
        const double cyc = median_of(chunk_cycles, n_chunk_cycles), ideal = 4.0 * pc->nw;
        const double t_us = median_of(us, reps);
        const double flops = 2.0 * TOKENS * pc->nw * 64 * (double)chunks * sms;
        printf("%-7s %4d %4d %6d %5d %7d %12.1f %9.0f %9.1f%% %9.1f %9.1f\n", mode_names[pc->mode], pc->nw,
               pc->dec, pc->depth, attr.numRegs, pc->smem, cyc, ideal, 100.0 * ideal / cyc, t_us,
               flops / t_us * 1e-6);
        csv_row("%s,%d,%d,%d,%d,%d,%.1f,%.0f,%.4f,%.2f,%.1f\n", mode_names[pc->mode], pc->nw, pc->dec, pc->depth,
                attr.numRegs, pc->smem, cyc, ideal, ideal / cyc, t_us, flops / t_us * 1e-6);
    }
    if (args.csv_path && moe_out_write_whole(args.csv_path, probe_csv, probe_csv_len, &err)) {
        fprintf(stderr, "cuda-wgmma-ws-probe: %s\n", err.msg);
        return 2;
    }
    return failed ? 1 : 0;
}
