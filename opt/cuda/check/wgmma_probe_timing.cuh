/*
 * wgmma_probe_timing.cuh: what the two wgmma probes (cuda-wgmma-probe, cuda-wgmma-ws-probe)
 * share: the sm_90 device they need, a lane word of codes all 1.0, and one case's calls, timed.
 * A probe kernel takes (chunks, code word, cycles [blocks], wrong [1]): one block a
 * multiprocessor, thread 0 of each writes the cycles of its loop, and every thread adds the
 * accumulators it finds wrong to *wrong.
 */
#ifndef INKLING_WGMMA_PROBE_TIMING_CUH
#define INKLING_WGMMA_PROBE_TIMING_CUH

#include "../cuda_wgmma_layout.h"
#include "probe_common.h"

#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*wgmma_probe_fn)(int, uint32_t, long long *, int *);

typedef struct {
    int chunks, reps;                /* a case's chunks and timed calls (--quick: fewer, one) */
    uint32_t code_word;              /* wgmma_probe_word_of_ones */
    int sms, max_reps;
    long long *cycles, *cycles_host; /* [sms], device and host */
    int *wrong;                      /* [1] on the device */
    double *block_cycles;            /* [sms * max_reps]: a case's cycles a chunk, every block */
    cudaEvent_t e0, e1;
} wgmma_probe_env;

/* The sm_90 device and the buffers for cases of up to max_reps timed calls; 0, or 2 once the
 * refusal is printed (no such device). Any other failure ends the program (PROBE_TRY). */
static int wgmma_probe_open(wgmma_probe_env *env, int max_reps) {
    int n_devices = 0, major = 0;
    if (cudaGetDeviceCount(&n_devices) != cudaSuccess || n_devices == 0 ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess || major != 9) {
        fprintf(stderr, "%s: no sm_90 CUDA device\n", probe_prog);
        return 2;
    }
    env->max_reps = max_reps;
    PROBE_TRY(cudaDeviceGetAttribute(&env->sms, cudaDevAttrMultiProcessorCount, 0));
    PROBE_TRY(cudaMalloc(&env->cycles, (size_t)env->sms * sizeof(long long)));
    PROBE_TRY(cudaMalloc(&env->wrong, sizeof(int)));
    env->cycles_host = (long long *)malloc((size_t)env->sms * sizeof(long long));
    env->block_cycles = (double *)malloc((size_t)env->sms * max_reps * sizeof(double));
    if (!env->cycles_host || !env->block_cycles) {
        fprintf(stderr, "%s: out of host memory\n", probe_prog);
        exit(1);
    }
    PROBE_TRY(cudaEventCreate(&env->e0));
    PROBE_TRY(cudaEventCreate(&env->e1));
    return 0;
}

/* A lane word of cuda_wgmma_layout.h's layout whose eight codes are all 1.0 (E2M1 0b0010: the
 * magnitude's bit 1). */
static uint32_t wgmma_probe_word_of_ones(void) {
    uint32_t w = 0;
    for (int j = 0; j < 4; j++)
        for (int h = 0; h < 2; h++) w |= 1u << moe_wg_code_bit(j, h, 1);
    return w;
}

/* One case: a warm-up call, then env->reps timed ones of fn on env->sms blocks of `threads`
 * with `smem` bytes of dynamic shared memory and `chunks` chunks. *cycles_per_chunk:
 * the median over blocks and calls; *us: the median call by events; *regs: the kernel's
 * registers. Returns false, after a line naming `what`, if any call left an accumulator
 * wrong. */
static bool wgmma_probe_time(wgmma_probe_env *env, wgmma_probe_fn fn, int threads, int smem, int chunks,
                             const char *what, double *cycles_per_chunk, double *us, int *regs) {
    int reps = env->reps;
    const uint32_t code_word = env->code_word;
    cudaFuncAttributes attr;
    PROBE_TRY(cudaFuncGetAttributes(&attr, (const void *)fn));
    PROBE_TRY(cudaFuncSetAttribute((const void *)fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    *regs = attr.numRegs;
    double call_us[64];
    if (reps > env->max_reps) reps = env->max_reps;
    if (reps > 64) reps = 64;
    int n = 0;
    bool right = true;
    for (int r = -1; r < reps; r++) { /* r = -1: the warm-up call */
        PROBE_TRY(cudaMemset(env->wrong, 0, sizeof(int)));
        PROBE_TRY(cudaEventRecord(env->e0));
        fn<<<env->sms, threads, smem>>>(chunks, code_word, env->cycles, env->wrong);
        PROBE_TRY(cudaGetLastError());
        PROBE_TRY(cudaEventRecord(env->e1));
        PROBE_TRY(cudaEventSynchronize(env->e1));
        int wrong = 0;
        PROBE_TRY(cudaMemcpy(&wrong, env->wrong, sizeof(int), cudaMemcpyDeviceToHost));
        if (wrong) {
            fprintf(stderr, "%s: %s: %d accumulators wrong\n", probe_prog, what, wrong);
            right = false;
        }
        if (r < 0) continue;
        float ms = 0;
        PROBE_TRY(cudaEventElapsedTime(&ms, env->e0, env->e1));
        call_us[r] = 1000.0 * ms;
        PROBE_TRY(cudaMemcpy(env->cycles_host, env->cycles, (size_t)env->sms * sizeof(long long),
                             cudaMemcpyDeviceToHost));
        for (int b = 0; b < env->sms; b++) env->block_cycles[n++] = (double)env->cycles_host[b] / chunks;
    }
    *cycles_per_chunk = median_of(env->block_cycles, n);
    *us = median_of(call_us, reps);
    return right;
}


/* The probe's command line (probe_common.h) and device (wgmma_probe_open): env->chunks and
 * env->reps chunks and reps, or with --quick quick_chunks and one; 0, or 2 once refused. */
static inline int wgmma_probe_start(const char *prog, int argc, char **argv, int chunks, int quick_chunks, int reps,
                                    probe_args *args, wgmma_probe_env *env) {
    if (probe_parse_args(prog, argc, argv, args) || wgmma_probe_open(env, reps)) return 2;
    env->chunks = args->quick ? quick_chunks : chunks, env->reps = args->quick ? 1 : reps;
    env->code_word = wgmma_probe_word_of_ones();
    return 0;
}

#endif
