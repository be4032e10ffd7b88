/*
 * overlap_probe.cu: does a kernel launched on a second stream start while a first kernel is
 * still running? The question behind every schedule of the layer's two chains (the routed
 * experts and the sinks, docs/perf-cuda.md): a grid placed first can keep a later grid of the
 * other stream off the GPU until the first one ends, although the multiprocessors hold room for
 * both.
 *
 * Rules:
 *   - kernel A (the stream of low priority) spins for 20 us; kernel B (high priority, 258
 *     blocks of 256 threads, 48 kB of dynamic shared memory, like the small front end) is queued
 *     on the other stream right after it and spins for 2 us. Each block stamps the global timer
 *     when it starts and ends; B's first start is reported against A's first start and last
 *     end. B "waits" when it starts within 1 us of A's end;
 *   - the cases vary what A holds on a multiprocessor (blocks, threads, registers a thread,
 *     shared-memory carveout), the registers as reported by cudaFuncGetAttributes;
 *   - each case runs three times and prints the median of B's start (and the last A's end).
 *
 * Usage: cuda-overlap-probe (no arguments). Needs a CUDA device; exits 2 without one.
 */
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_BLOCKS 1024
#define A_SPIN_NS 20000
#define B_SPIN_NS 2000
#define B_BLOCKS 258
#define B_SMEM (48 * 1024)

__device__ __forceinline__ uint64_t global_ns(void) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Spins for spin_ns with LIVE values kept in registers (the register count of the kernel);
 * starts[b] and ends[b]: block b's first and last timer reads. */
template <int LIVE>
__global__ void __launch_bounds__(256) spin_kernel(uint64_t *starts, uint64_t *ends, int spin_ns) {
    uint32_t v[LIVE];
#pragma unroll
    for (int i = 0; i < LIVE; i++) asm volatile("mov.u32 %0, %1;" : "=r"(v[i]) : "r"(i * (int)threadIdx.x));
    const uint64_t t0 = global_ns();
    while (global_ns() - t0 < (uint64_t)spin_ns) {
#pragma unroll
        for (int i = 0; i < LIVE; i++) asm volatile("add.u32 %0, %0, 1;" : "+r"(v[i]));
    }
    uint32_t x = 0;
#pragma unroll
    for (int i = 0; i < LIVE; i++) x ^= v[i];
    if (threadIdx.x == 0) {
        starts[blockIdx.x] = t0;
        ends[blockIdx.x] = global_ns() + (x == 0xFFFFFFFFu); /* keeps v live */
    }
}

typedef void (*spin_fn)(uint64_t *, uint64_t *, int);

typedef struct {
    const char *what;
    int blocks, threads;
    spin_fn kernel;
    int carveout; /* -1: the driver's choice; 100: the most shared memory */
} probe_case;

#define PROBE_TRY(call)                                                                           \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "cuda-overlap-probe: %s: %s\n", #call, cudaGetErrorString(e_));       \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

static double median3(double a, double b, double c) {
    const double lo = a < b ? a : b, hi = a < b ? b : a;
    return c < lo ? lo : c > hi ? hi : c;
}

/* One run of a case: B's first start and A's last end, ns after A's first start. */
static void run_once(const probe_case *c, cudaStream_t low, cudaStream_t high, uint64_t *dev,
                     uint64_t *host, double *b_start, double *a_end) {
    cudaEvent_t ready;
    PROBE_TRY(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    PROBE_TRY(cudaEventRecord(ready, high)); /* both streams start from the same point */
    PROBE_TRY(cudaStreamWaitEvent(low, ready, 0));
    c->kernel<<<c->blocks, c->threads, 0, low>>>(dev, dev + MAX_BLOCKS, A_SPIN_NS);
    PROBE_TRY(cudaGetLastError());
    spin_kernel<60><<<B_BLOCKS, 256, B_SMEM, high>>>(dev + 2 * MAX_BLOCKS, dev + 3 * MAX_BLOCKS,
                                                      B_SPIN_NS);
    PROBE_TRY(cudaGetLastError());
    PROBE_TRY(cudaDeviceSynchronize());
    PROBE_TRY(cudaEventDestroy(ready));
    PROBE_TRY(cudaMemcpy(host, dev, 4 * MAX_BLOCKS * sizeof(uint64_t), cudaMemcpyDeviceToHost));
    uint64_t a0 = UINT64_MAX, a1 = 0, b0 = UINT64_MAX;
    for (int i = 0; i < c->blocks; i++) {
        if (host[i] < a0) a0 = host[i];
        if (host[MAX_BLOCKS + i] > a1) a1 = host[MAX_BLOCKS + i];
    }
    for (int i = 0; i < B_BLOCKS; i++)
        if (host[2 * MAX_BLOCKS + i] < b0) b0 = host[2 * MAX_BLOCKS + i];
    *b_start = ((double)b0 - (double)a0) / 1e3;
    *a_end = ((double)a1 - (double)a0) / 1e3;
}

int main(int argc, char **argv) {
    (void)argv;
    if (argc > 1) {
        fprintf(stderr, "usage: cuda-overlap-probe (no arguments)\n");
        return 2;
    }
    int n_devices = 0;
    if (cudaGetDeviceCount(&n_devices) != cudaSuccess || n_devices == 0) {
        fprintf(stderr, "cuda-overlap-probe: no CUDA device\n");
        return 2;
    }
    int sms = 0, low_priority = 0, high_priority = 0;
    PROBE_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    PROBE_TRY(cudaDeviceGetStreamPriorityRange(&low_priority, &high_priority));
    cudaStream_t low, high;
    PROBE_TRY(cudaStreamCreateWithPriority(&low, cudaStreamNonBlocking, low_priority));
    PROBE_TRY(cudaStreamCreateWithPriority(&high, cudaStreamNonBlocking, high_priority));
    uint64_t *dev = NULL;
    PROBE_TRY(cudaMalloc(&dev, 4 * MAX_BLOCKS * sizeof(uint64_t)));
    uint64_t *host = (uint64_t *)malloc(4 * MAX_BLOCKS * sizeof(uint64_t));
    if (!host) {
        fprintf(stderr, "cuda-overlap-probe: out of host memory\n");
        return 1;
    }
    PROBE_TRY(cudaFuncSetAttribute(spin_kernel<60>, cudaFuncAttributeMaxDynamicSharedMemorySize, B_SMEM));

    const probe_case cases[] = {
        {"few registers", 2 * sms, 256, spin_kernel<4>, -1},
        {"few registers, carveout max", 2 * sms, 256, spin_kernel<4>, 100},
        {"", 2 * sms, 256, spin_kernel<20>, 100},
        {"", 2 * sms, 256, spin_kernel<36>, 100},
        {"", 2 * sms, 256, spin_kernel<52>, 100},
        {"one block a multiprocessor", sms, 256, spin_kernel<52>, 100},
        {"half the threads a block", 2 * sms, 128, spin_kernel<52>, 100},
    };
    cudaFuncAttributes b_attr;
    PROBE_TRY(cudaFuncGetAttributes(&b_attr, (const void *)spin_kernel<60>));
    printf("kernel B: %d blocks x 256 threads, %d registers a thread, %d kB dynamic shared memory, "
           "queued on the other stream after A; us after A's first block started (median of 3)\n",
           B_BLOCKS, b_attr.numRegs, B_SMEM / 1024);
    printf("%-30s %7s %8s %6s %11s %9s %9s %6s\n", "kernel A", "blocks", "threads", "regs",
           "regs per SM", "A ends", "B starts", "B");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const probe_case *c = &cases[i];
        if (c->blocks > MAX_BLOCKS) continue;
        cudaFuncAttributes attr;
        PROBE_TRY(cudaFuncGetAttributes(&attr, (const void *)c->kernel));
        PROBE_TRY(cudaFuncSetAttribute((const void *)c->kernel,
                                       cudaFuncAttributePreferredSharedMemoryCarveout, c->carveout));
        double starts[3], a_end = 0.0;
        for (int r = 0; r < 3; r++) run_once(c, low, high, dev, host, &starts[r], &a_end);
        const double b = median3(starts[0], starts[1], starts[2]);
        const int per_sm = (c->blocks + sms - 1) / sms * c->threads * attr.numRegs;
        printf("%-30s %7d %8d %6d %11d %9.1f %9.1f %6s\n", c->what, c->blocks, c->threads,
               attr.numRegs, per_sm, a_end, b, b > a_end - 1.0 ? "waits" : "beside");
    }
    free(host);
    cudaFree(dev);
    return 0;
}
