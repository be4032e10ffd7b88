/*
 * staging_probe.c: what the CUDA path's host call pays to move x up and out down through its
 * pinned staging (opt/cuda/cuda_backend.cu), piece by piece, against the bus alone. The
 * question behind the host call's bound at T = 4096 (docs/perf-cuda.md, thirty-ninth run): the
 * call took 1.06-1.12 times the layer plus its two DMAs at pinned-memory speed.
 *
 * Rules:
 *   - x is T x D bf16, out T x D fp32 (the caller's buffers, pageable), the staging pinned
 *     (cudaHostAlloc), as in the layer; T and D default to Inkling-Small at T = 4096;
 *   - "cold": 512 MB of other host memory is written before each timed run, so x comes from
 *     DRAM, as the lab's rotating inputs do; "warm": x was just copied and sits in cache;
 *   - each figure is the median of 9 runs, on the host's clock, a run ending when its last DMA
 *     has landed (and, down, its last piece is in out);
 *   - the copies are the layer's own (common/host_copy.h); "staged" is the layer's upload and
 *     download loop (8 pieces, the team copying one piece while the DMA of another runs);
 *     "each thread sends on" queues a piece's DMA from the thread that copied it, no barrier;
 *   - pinning the caller's x instead of copying it: cudaHostRegister, the DMA, cudaHostUnregister.
 *
 * Usage: cuda-staging-probe [T [D]]. Needs a CUDA device; exits 2 without one, 1 on a CUDA
 * failure.
 */
#include "common/host_copy.h"

#include <cuda_runtime.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RUNS 9
#define PIECES 8
#define COLD_BYTES ((size_t)512 << 20)

#define CK(call)                                                                                   \
    do {                                                                                           \
        const cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "cuda-staging-probe: %s: %s\n", #call, cudaGetErrorString(e_));       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static size_t x_bytes, out_bytes;
static char *x, *out, *stage_x, *stage_out, *dev, *cold;
static cudaStream_t stream;

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b) {
    const double p = *(const double *)a, q = *(const double *)b;
    return (p > q) - (p < q);
}

static void chill(void) {
    for (size_t i = 0; i < COLD_BYTES; i += 64) cold[i]++;
}

static size_t piece_of(size_t bytes) { return ((bytes + PIECES - 1) / PIECES + 255) / 256 * 256; }

/* The layer's upload: the team copies piece i, then its DMA is queued. */
static void staged_up(int threads) {
    const size_t p = piece_of(x_bytes);
    for (size_t o = 0; o < x_bytes; o += p) {
        const size_t n = x_bytes - o < p ? x_bytes - o : p;
        moe_copy_parallel(stage_x + o, x + o, n, threads);
        CK(cudaMemcpyAsync(dev + o, stage_x + o, n, cudaMemcpyHostToDevice, stream));
    }
    CK(cudaStreamSynchronize(stream));
}

/* Each thread copies 1 MB pieces and queues each one's DMA itself. */
static void each_thread_up(int threads) {
    const size_t p = (size_t)1 << 20;
    const long pieces = (long)((x_bytes + p - 1) / p);
    int failed = 0;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) reduction(+ : failed)
    for (long i = 0; i < pieces; i++) {
        const size_t o = (size_t)i * p, n = x_bytes - o < p ? x_bytes - o : p;
        moe_copy_parallel(stage_x + o, x + o, n, 1);
        failed += cudaMemcpyAsync(dev + o, stage_x + o, n, cudaMemcpyHostToDevice, stream) != cudaSuccess;
    }
    if (failed) CK(cudaErrorUnknown);
    CK(cudaStreamSynchronize(stream));
}

/* The layer's download: DMA of each piece (fp32 out, or its bf16 patterns), then the team
 * copies or widens it into out as soon as it has landed. */
static void staged_down(int threads, int bf16) {
    const size_t bytes = bf16 ? out_bytes / 2 : out_bytes, p = piece_of(bytes);
    cudaEvent_t landed[PIECES + 1];
    int n_pieces = 0;
    for (size_t o = 0; o < bytes; o += p, n_pieces++) {
        const size_t n = bytes - o < p ? bytes - o : p;
        CK(cudaEventCreateWithFlags(&landed[n_pieces], cudaEventDisableTiming));
        CK(cudaMemcpyAsync(stage_out + o, dev + o, n, cudaMemcpyDeviceToHost, stream));
        CK(cudaEventRecord(landed[n_pieces], stream));
    }
    for (int i = 0; i < n_pieces; i++) {
        const size_t o = (size_t)i * p, n = bytes - o < p ? bytes - o : p;
        CK(cudaEventSynchronize(landed[i]));
        if (bf16)
            moe_widen_bf16_parallel((float *)out + o / 2, (const uint16_t *)(stage_out + o), n / 2, threads);
        else
            moe_copy_parallel(out + o, stage_out + o, n, threads);
        CK(cudaEventDestroy(landed[i]));
    }
}

static void dma(int up, size_t bytes) {
    if (up)
        CK(cudaMemcpyAsync(dev, stage_x, bytes, cudaMemcpyHostToDevice, stream));
    else
        CK(cudaMemcpyAsync(stage_out, dev, bytes, cudaMemcpyDeviceToHost, stream));
    CK(cudaStreamSynchronize(stream));
}

/* Median of RUNS runs of what(arg, arg2), each after chilling the caches when cold. */
static double median_us(void (*what)(int, int), int arg, int arg2, int is_cold) {
    double t[RUNS];
    for (int r = 0; r < RUNS; r++) {
        if (is_cold) chill();
        const double a = now_us();
        what(arg, arg2);
        t[r] = now_us() - a;
    }
    qsort(t, RUNS, sizeof t[0], by_value);
    return t[RUNS / 2];
}

static void copy_x(int threads, int unused) {
    (void)unused;
    moe_copy_parallel(stage_x, x, x_bytes, threads);
}
static void up_staged(int threads, int unused) {
    (void)unused;
    staged_up(threads);
}
static void up_each(int threads, int unused) {
    (void)unused;
    each_thread_up(threads);
}
static void down_staged(int threads, int bf16) { staged_down(threads, bf16); }
static void dma_up(int unused, int unused2) {
    (void)unused, (void)unused2;
    dma(1, x_bytes);
}
static void dma_down(int bf16, int unused) {
    (void)unused;
    dma(0, bf16 ? out_bytes / 2 : out_bytes);
}

static void print(const char *what, double us, size_t bytes) {
    printf("  %-62s %9.1f us  %6.1f GB/s\n", what, us, bytes ? (double)bytes / us / 1e3 : 0.0);
}

int main(int argc, char **argv) {
    const long T = argc > 1 ? atol(argv[1]) : 4096, D = argc > 2 ? atol(argv[2]) : 4096;
    if (argc > 3 || T < 1 || D < 1 || T > (1L << 20) || D > (1L << 16)) {
        fprintf(stderr, "usage: cuda-staging-probe [T [D]] (1 <= T <= 2^20, 1 <= D <= 2^16)\n");
        return 2;
    }
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
        fprintf(stderr, "cuda-staging-probe: no CUDA device\n");
        return 2;
    }
    x_bytes = (size_t)T * (size_t)D * 2, out_bytes = 2 * x_bytes;
    x = malloc(x_bytes), out = malloc(out_bytes), cold = malloc(COLD_BYTES);
    if (!x || !out || !cold) {
        fprintf(stderr, "cuda-staging-probe: out of host memory\n");
        return 1;
    }
    memset(x, 3, x_bytes), memset(out, 0, out_bytes), memset(cold, 1, COLD_BYTES);
    CK(cudaHostAlloc((void **)&stage_x, x_bytes, cudaHostAllocDefault));
    CK(cudaHostAlloc((void **)&stage_out, out_bytes, cudaHostAllocDefault));
    memset(stage_x, 0, x_bytes), memset(stage_out, 0, out_bytes);
    CK(cudaMalloc((void **)&dev, out_bytes));
    CK(cudaMemset(dev, 0, out_bytes));
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    char what[128];
    printf("T = %ld, D = %ld: x %.1f MB bf16, out %.1f MB fp32 (%.1f MB as bf16); %d OpenMP threads, "
           "the layer copies with %d\n", T, D, x_bytes / 1e6, out_bytes / 1e6, x_bytes / 1e6,
           omp_get_max_threads(), moe_copy_threads());
    const int teams[] = {1, 4, 8, 16};
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < 4; i++) {
            snprintf(what, sizeof what, "x into the staging, %s source, %d threads", c ? "cold" : "warm", teams[i]);
            print(what, median_us(copy_x, teams[i], 0, c), x_bytes);
        }
    print("DMA up, x from the staging", median_us(dma_up, 0, 0, 0), x_bytes);
    print("DMA down, out as fp32", median_us(dma_down, 0, 0, 0), out_bytes);
    print("DMA down, out as bf16", median_us(dma_down, 1, 0, 0), x_bytes);
    for (int i = 2; i < 4; i++) {
        snprintf(what, sizeof what, "upload as the layer does it, cold, %d threads", teams[i]);
        print(what, median_us(up_staged, teams[i], 0, 1), x_bytes);
        snprintf(what, sizeof what, "each thread sends on its 1 MB pieces, cold, %d threads", teams[i]);
        print(what, median_us(up_each, teams[i], 0, 1), x_bytes);
    }
    print("download as fp32, copied into out, 8 threads", median_us(down_staged, 8, 0, 1), out_bytes);
    print("download as bf16, widened into out, 8 threads", median_us(down_staged, 8, 1, 1), x_bytes);
    double reg[RUNS], unreg[RUNS];
    for (int r = 0; r < RUNS; r++) {
        chill();
        const double a = now_us();
        CK(cudaHostRegister(x, x_bytes, cudaHostRegisterDefault));
        const double b = now_us();
        CK(cudaMemcpyAsync(dev, x, x_bytes, cudaMemcpyHostToDevice, stream));
        CK(cudaStreamSynchronize(stream));
        const double c = now_us();
        CK(cudaHostUnregister(x));
        reg[r] = b - a, unreg[r] = now_us() - c;
    }
    qsort(reg, RUNS, sizeof reg[0], by_value);
    qsort(unreg, RUNS, sizeof unreg[0], by_value);
    print("cudaHostRegister of x (instead of a copy)", reg[RUNS / 2], 0);
    print("cudaHostUnregister of x", unreg[RUNS / 2], 0);
    CK(cudaStreamDestroy(stream));
    CK(cudaFree(dev));
    CK(cudaFreeHost(stage_x));
    CK(cudaFreeHost(stage_out));
    free(x), free(out), free(cold);
    return 0;
}
