/*
 * stream_probe.cu: how fast can one bf16 weight matrix stream through part of the GPU for one
 * token? The question behind the sinks' chain at T = 1 (docs/perf-cuda.md): it is the layer's
 * critical path there (61-67 us in the timed call), and cuBLASLt's GEMM1 and our small kernels
 * moved the sinks' 67 MB of w13 at 1.5-1.9 TB/s, where the whole 100 MB of sink weights would
 * take 29 us at 3.5 TB/s. This measures what a plain kernel reaches, by its warps, blocks and
 * rows in flight, on a given number of multiprocessors, against cuBLASLt alone on as many.
 *
 * Rules:
 *   - W bf16 [N_ROWS, KD] (the sinks' w13 of Inkling-Small: 8192 x 4096, 67 MB), x bf16 [KD],
 *     out fp32 [N_ROWS]; the L2 is flushed (a 256 MB write) before every timed call;
 *   - kernel "read": each lane folds its 16-byte pieces' words together (no x): the rate of the
 *     access pattern alone; kernel "gemv": the same loads, each piece's 8 values times x's (from
 *     shared memory) in fp32;
 *   - a warp takes ROWS rows at a time, 16 pieces a lane a row, all asked for in one unrolled
 *     sequence; a block is WARPS warps, BLOCKS of them a multiprocessor. The launch bounds say so,
 *     and ptxas then keeps as many of the pieces in flight as the registers of that occupancy
 *     hold (left to choose, it reuses each load's registers as soon as the load is used: about six
 *     in flight). Each block asks for an unused share of the multiprocessor's shared memory, so
 *     that exactly BLOCKS fit on one. A warp takes CHUNK rows an atomic ticket, and a block whose
 *     multiprocessor number is at or above the case's count leaves at once, so that the case
 *     runs on that many multiprocessors;
 *   - a row's sum has one order (a lane's pieces in row order, then a fixed butterfly), so every
 *     gemv case gives the same out bit for bit; the first is checked against a host double product;
 *   - beside them, the layer's own cuBLASLt plan for the sinks' GEMM1 (opt/cuda/cuda_lt.cu, bf16
 *     out, the layer's workspace size) planned for each multiprocessor count alone, its out
 *     checked against the same product within a bf16 rounding.
 *
 * Usage: cuda-stream-probe [--csv FILE] (every case as a CSV row, written whole at the end or not
 * at all: common/out_file.h). Needs a CUDA device; exits 2 without one or on a bad FILE, 1 on a
 * wrong result or a failed call.
 */
#include "../cuda_internal.h"
#include "../../../common/out_file.h"

#include <stdarg.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_ROWS 8192
#define KD 4096
#define ROW_PIECES (KD / 8)             /* 16-byte pieces a row */
#define LANE_PIECES (ROW_PIECES / 32)   /* pieces a lane a row */
#define FLUSH_BYTES (256u << 20)
#define REPS 15
#define CHUNK 4 /* rows a ticket */
#define LT_WORKSPACE (32u << 20) /* as the layer's (cuda_backend.cu) */

#define PROBE_TRY(call)                                                                           \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "cuda-stream-probe: %s: %s\n", #call, cudaGetErrorString(e_));        \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

__device__ __forceinline__ unsigned sm_id(void) {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}

/* 16 bytes read once: no L1 line kept (as the sinks' small kernel reads its weights). */
__device__ __forceinline__ uint4 load_once(const uint4 *src) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(src));
    return v;
}

/* acc + the 8 bf16 products of w and x, in element order */
__device__ __forceinline__ float dot8(float acc, uint4 w, uint4 x) {
    const uint32_t wv[4] = {w.x, w.y, w.z, w.w}, xv[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        acc = fmaf(__uint_as_float(wv[i] << 16), __uint_as_float(xv[i] << 16), acc);
        acc = fmaf(__uint_as_float(wv[i] & 0xFFFF0000u), __uint_as_float(xv[i] & 0xFFFF0000u), acc);
    }
    return acc;
}

/* The first of the warp's next CHUNK rows (lane 0 asks, every lane gets the answer). */
__device__ __forceinline__ int next_chunk(int *counter, int lane) {
    int row = 0;
    if (lane == 0) row = atomicAdd(counter, CHUNK);
    return __shfl_sync(0xFFFFFFFFu, row, 0);
}

template <bool GEMV, int WARPS, int BLOCKS, int ROWS>
__global__ void __launch_bounds__(WARPS * 32, BLOCKS) stream_kernel(const uint4 *w, const uint4 *x, float *out,
                                                                    int *counter, unsigned n_sms) {
    static_assert(CHUNK % ROWS == 0, "whole batches of rows");
    __shared__ uint4 xs[GEMV ? ROW_PIECES : 1];
    if (sm_id() >= n_sms) return;
    const int lane = (int)threadIdx.x % 32;
    if (GEMV) {
        for (int i = (int)threadIdx.x; i < ROW_PIECES; i += WARPS * 32) xs[i] = x[i];
        __syncthreads();
    }
    for (int chunk = next_chunk(counter, lane); chunk < N_ROWS; chunk = next_chunk(counter, lane))
        for (int row = chunk; row < chunk + CHUNK; row += ROWS) {
            float acc[ROWS];
            uint32_t fold[ROWS];
#pragma unroll
            for (int r = 0; r < ROWS; r++) acc[r] = 0.0f, fold[r] = 0u;
            uint4 v[ROWS][LANE_PIECES];
#pragma unroll
            for (int r = 0; r < ROWS; r++)
#pragma unroll
                for (int p = 0; p < LANE_PIECES; p++)
                    v[r][p] = load_once(w + (size_t)(row + r) * ROW_PIECES + (size_t)p * 32 + lane);
#pragma unroll
            for (int r = 0; r < ROWS; r++)
#pragma unroll
                for (int p = 0; p < LANE_PIECES; p++) {
                    if (GEMV) acc[r] = dot8(acc[r], v[r][p], xs[p * 32 + lane]);
                    else fold[r] ^= v[r][p].x ^ v[r][p].y ^ v[r][p].z ^ v[r][p].w;
                }
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                float s = GEMV ? acc[r] : (float)fold[r];
#pragma unroll
                for (int m = 16; m > 0; m /= 2) s += __shfl_xor_sync(0xFFFFFFFFu, s, m);
                if (lane == 0) out[row + r] = s;
            }
        }
}

typedef void (*stream_fn)(const uint4 *, const uint4 *, float *, int *, unsigned);

typedef struct {
    bool gemv;
    int warps, blocks, rows;
    stream_fn kernel;
} stream_case;

/* (warps, blocks a multiprocessor, rows a warp): 512 threads a multiprocessor (128 registers a
 * thread), 1024 (64) and 256 (up to 255) */
#define CASE(G, W, B, R) {G, W, B, R, stream_kernel<G, W, B, R>}
#define CASES_OF(G)                                                                               \
    CASE(G, 4, 4, 1), CASE(G, 8, 2, 1), CASE(G, 16, 1, 1), CASE(G, 4, 4, 2), CASE(G, 8, 2, 2),    \
    CASE(G, 16, 1, 2), CASE(G, 8, 4, 1), CASE(G, 16, 2, 1), CASE(G, 32, 1, 1), CASE(G, 8, 1, 2),  \
    CASE(G, 4, 2, 2)

static const stream_case cases[] = {CASES_OF(false), CASES_OF(true)};

static int compare_doubles(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static float bf16_value(uint16_t bits) {
    const uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* median µs of REPS calls of case c on n_sms of the sms multiprocessors (pad bytes of dynamic
 * shared memory a block), each after a flush of the L2 */
static double time_case(const stream_case *c, unsigned n_sms, int sms, int pad, const uint4 *w, const uint4 *x,
                        float *out, int *counter, void *flush, cudaEvent_t e0, cudaEvent_t e1) {
    double us[REPS];
    for (int r = -1; r < REPS; r++) { /* r = -1: a warm-up */
        PROBE_TRY(cudaMemsetAsync(flush, r & 0xFF, FLUSH_BYTES, 0));
        PROBE_TRY(cudaMemsetAsync(counter, 0, sizeof(int), 0));
        PROBE_TRY(cudaEventRecord(e0, 0));
        c->kernel<<<c->blocks * sms, c->warps * 32, (size_t)pad>>>(w, x, out, counter, n_sms);
        PROBE_TRY(cudaGetLastError());
        PROBE_TRY(cudaEventRecord(e1, 0));
        PROBE_TRY(cudaEventSynchronize(e1));
        float ms = 0.0f;
        PROBE_TRY(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 0) us[r] = 1e3 * ms;
    }
    qsort(us, REPS, sizeof us[0], compare_doubles);
    return us[REPS / 2];
}

/* Every gemv call gives the first one's out bit for bit; the first is checked against a host
 * double product of each row (fp32 over 4096 products: within about 133 u of their magnitudes). */
static bool check_out(const stream_case *c, int n_sms, const float *out, float *out_host, float *first,
                      const uint16_t *w_host, const uint16_t *x_host, bool *have_first) {
    PROBE_TRY(cudaMemcpy(out_host, out, N_ROWS * sizeof(float), cudaMemcpyDeviceToHost));
    if (*have_first) {
        if (!memcmp(first, out_host, N_ROWS * sizeof(float))) return true;
        fprintf(stderr, "cuda-stream-probe: gemv %d warps x %d blocks, %d rows, on %d SMs: out differs from "
                "the first call's\n", c->warps, c->blocks, c->rows, n_sms);
        return false;
    }
    for (int r = 0; r < N_ROWS; r++) {
        double sum = 0.0, mag = 0.0;
        for (int k = 0; k < KD; k++) {
            const double p = (double)bf16_value(w_host[(size_t)r * KD + k]) * bf16_value(x_host[k]);
            sum += p, mag += fabs(p);
        }
        if (!(fabs(out_host[r] - sum) <= 1e-5 * mag + 1e-30)) {
            fprintf(stderr, "cuda-stream-probe: row %d: %.9g against %.9g\n", r, out_host[r], sum);
            return false;
        }
    }
    memcpy(first, out_host, N_ROWS * sizeof(float));
    *have_first = true;
    return true;
}

/* The layer's cuBLASLt GEMM1 plan for the sinks (bf16 out), planned for sm_target
 * multiprocessors (0: all): median us as time_case, and whether out is within a bf16 rounding
 * (2^-8 relative) and the fp32 error of the double product. */
static double time_lt(cublasLtHandle_t lt, int sm_target, const uint4 *w, const uint4 *x, uint16_t *out_bf16,
                      void *workspace, void *flush, cudaEvent_t e0, cudaEvent_t e1, const uint16_t *w_host,
                      const uint16_t *x_host, bool *right) {
    moe_cuda_lt_plan plan;
    memset(&plan, 0, sizeof plan);
    moe_error err;
    if (moe_cuda_lt_plan_for(lt, &plan, N_ROWS, KD, 1, CUDA_R_16BF, sm_target, LT_WORKSPACE, &err)) {
        fprintf(stderr, "cuda-stream-probe: %s\n", err.msg);
        exit(1);
    }
    double us[REPS];
    for (int r = -1; r < REPS; r++) {
        PROBE_TRY(cudaMemsetAsync(flush, r & 0xFF, FLUSH_BYTES, 0));
        PROBE_TRY(cudaEventRecord(e0, 0));
        if (moe_cuda_lt_run(lt, &plan, (const uint16_t *)w, (const uint16_t *)x, out_bf16, workspace, LT_WORKSPACE,
                            0, &err)) {
            fprintf(stderr, "cuda-stream-probe: %s\n", err.msg);
            exit(1);
        }
        PROBE_TRY(cudaEventRecord(e1, 0));
        PROBE_TRY(cudaEventSynchronize(e1));
        float ms = 0.0f;
        PROBE_TRY(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 0) us[r] = 1e3 * ms;
    }
    moe_cuda_lt_plan_free(&plan);
    static uint16_t host[N_ROWS];
    PROBE_TRY(cudaMemcpy(host, out_bf16, sizeof host, cudaMemcpyDeviceToHost));
    *right = true;
    for (int r = 0; r < N_ROWS && *right; r++) {
        double sum = 0.0, mag = 0.0;
        for (int k = 0; k < KD; k++) {
            const double p = (double)bf16_value(w_host[(size_t)r * KD + k]) * bf16_value(x_host[k]);
            sum += p, mag += fabs(p);
        }
        if (!(fabs(bf16_value(host[r]) - sum) <= fabs(sum) / 256.0 + 1e-5 * mag + 1e-30)) {
            fprintf(stderr, "cuda-stream-probe: cuBLASLt on %d SMs, row %d: %.9g against %.9g\n", sm_target, r,
                    bf16_value(host[r]), sum);
            *right = false;
        }
    }
    qsort(us, REPS, sizeof us[0], compare_doubles);
    return us[REPS / 2];
}

/* The CSV's rows, kept until the end (a few kB). */
static char csv_text[1 << 16];
static size_t csv_len;
static void csv_row(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(csv_text + csv_len, sizeof csv_text - csv_len, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < sizeof csv_text - csv_len) csv_len += (size_t)n;
}

int main(int argc, char **argv) {
    const char *csv_path = NULL;
    if (argc == 3 && !strcmp(argv[1], "--csv")) csv_path = argv[2];
    else if (argc != 1) {
        fprintf(stderr, "usage: cuda-stream-probe [--csv FILE]\n");
        return 2;
    }
    moe_error err;
    if (csv_path) { /* refused now, not after the measurements: opened once and given up */
        moe_out_file probe;
        if (moe_out_refuse_same("argument --csv", csv_path, NULL, 0, &err) || moe_out_open(csv_path, &probe, &err)) {
            fprintf(stderr, "cuda-stream-probe: %s\n", err.msg);
            return 2;
        }
        moe_out_abort(&probe);
    }
    moe_out_guard_signals();
    int n_devices = 0;
    if (cudaGetDeviceCount(&n_devices) != cudaSuccess || n_devices == 0) {
        fprintf(stderr, "cuda-stream-probe: no CUDA device\n");
        return 2;
    }
    int sms = 0, smem_per_sm = 0, smem_reserved = 0;
    PROBE_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    PROBE_TRY(cudaDeviceGetAttribute(&smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0));
    PROBE_TRY(cudaDeviceGetAttribute(&smem_reserved, cudaDevAttrReservedSharedMemoryPerBlock, 0));

    /* the layer: W and x of uniform values in [-1, 1) rounded to bf16 (a fixed generator) */
    const size_t w_elems = (size_t)N_ROWS * KD;
    uint16_t *w_host = (uint16_t *)malloc(w_elems * sizeof(uint16_t));
    uint16_t x_host[KD];
    float *out_host = (float *)malloc(N_ROWS * sizeof(float)), *first = (float *)malloc(N_ROWS * sizeof(float));
    if (!w_host || !out_host || !first) {
        fprintf(stderr, "cuda-stream-probe: out of host memory\n");
        return 1;
    }
    uint64_t state = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < w_elems + KD; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const float v = (float)(int32_t)(state >> 32) / 2147483648.0f;
        uint32_t u;
        memcpy(&u, &v, sizeof u);
        const uint16_t bits = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
        if (i < w_elems) w_host[i] = bits;
        else x_host[i - w_elems] = bits;
    }
    uint4 *w = NULL, *x = NULL;
    float *out = NULL;
    int *counter = NULL;
    void *flush = NULL;
    PROBE_TRY(cudaMalloc(&w, w_elems * sizeof(uint16_t)));
    PROBE_TRY(cudaMalloc(&x, KD * sizeof(uint16_t)));
    PROBE_TRY(cudaMalloc(&out, N_ROWS * sizeof(float)));
    PROBE_TRY(cudaMalloc(&counter, sizeof(int)));
    PROBE_TRY(cudaMalloc(&flush, FLUSH_BYTES));
    PROBE_TRY(cudaMemcpy(w, w_host, w_elems * sizeof(uint16_t), cudaMemcpyHostToDevice));
    PROBE_TRY(cudaMemcpy(x, x_host, KD * sizeof(uint16_t), cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    PROBE_TRY(cudaEventCreate(&e0));
    PROBE_TRY(cudaEventCreate(&e1));

    const double bytes = (double)w_elems * 2.0;
    const int sm_counts[] = {40, 60, 80, 100, sms};
    const int n_counts = (int)(sizeof sm_counts / sizeof sm_counts[0]);
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    double table[sizeof cases / sizeof cases[0]][sizeof sm_counts / sizeof sm_counts[0]];
    int regs[sizeof cases / sizeof cases[0]];
    memset(table, 0, sizeof table);
    csv_row("kernel,warps,blocks_per_sm,rows,regs,sms,us,TBps\n");
    bool have_first = false, wrong = false;
    for (int i = 0; i < n_cases; i++) {
        const stream_case *c = &cases[i];
        cudaFuncAttributes attr;
        PROBE_TRY(cudaFuncGetAttributes(&attr, (const void *)c->kernel));
        regs[i] = attr.numRegs;
        /* shared memory a block so that exactly c->blocks fit on a multiprocessor */
        const int pad = smem_per_sm / c->blocks - smem_reserved - (int)attr.sharedSizeBytes;
        PROBE_TRY(cudaFuncSetAttribute((const void *)c->kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, pad));
        PROBE_TRY(cudaFuncSetAttribute((const void *)c->kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       cudaSharedmemCarveoutMaxShared));
        int fit = 0;
        PROBE_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, c->kernel, c->warps * 32, (size_t)pad));
        if (fit != c->blocks) {
            printf("skipped: %s %d warps, %d blocks a multiprocessor (%d fit at %d registers)\n",
                   c->gemv ? "gemv" : "read", c->warps, c->blocks, fit, attr.numRegs);
            continue;
        }
        for (int j = 0; j < n_counts; j++) {
            const int n_sms = sm_counts[j] < sms ? sm_counts[j] : sms;
            PROBE_TRY(cudaMemset(out, 0xFF, N_ROWS * sizeof(float))); /* NaN: a row left out shows */
            const double us = time_case(c, (unsigned)n_sms, sms, pad, w, x, out, counter, flush, e0, e1);
            csv_row("%s,%d,%d,%d,%d,%d,%.2f,%.3f\n", c->gemv ? "gemv" : "read", c->warps,
                    c->blocks, c->rows, attr.numRegs, n_sms, us, bytes / us * 1e-6);
            table[i][j] = us;
            if (c->gemv && !check_out(c, n_sms, out, out_host, first, w_host, x_host, &have_first)) wrong = true;
        }
    }

    cublasLtHandle_t lt;
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cuda-stream-probe: cublasLtCreate failed\n");
        return 1;
    }
    uint16_t *out_bf16 = NULL;
    void *workspace = NULL;
    PROBE_TRY(cudaMalloc(&out_bf16, N_ROWS * sizeof(uint16_t)));
    PROBE_TRY(cudaMalloc(&workspace, LT_WORKSPACE));
    double lt_us[sizeof sm_counts / sizeof sm_counts[0]];
    for (int j = 0; j < n_counts; j++) {
        bool right = false;
        lt_us[j] = time_lt(lt, sm_counts[j] < sms ? sm_counts[j] : 0, w, x, out_bf16, workspace, flush, e0, e1,
                           w_host, x_host, &right);
        csv_row("cublaslt,,,,,%d,%.2f,%.3f\n", sm_counts[j] < sms ? sm_counts[j] : sms, lt_us[j],
                         bytes / lt_us[j] * 1e-6);
        if (!right) wrong = true;
    }

    printf("W bf16 [%d, %d] (%.1f MB), one token, L2 flushed; median of %d calls, us (TB/s) on the "
           "multiprocessors of each column\n",
           N_ROWS, KD, bytes / 1e6, REPS);
    printf("%-4s %5s %6s %4s %4s", "", "warps", "blocks", "rows", "regs");
    for (int j = 0; j < n_counts; j++) printf(" %11d SMs", sm_counts[j] < sms ? sm_counts[j] : sms);
    printf("\n");
    for (int i = 0; i < n_cases; i++) {
        if (table[i][0] <= 0.0) continue;
        const stream_case *c = &cases[i];
        printf("%-4s %5d %6d %4d %4d", c->gemv ? "gemv" : "read", c->warps, c->blocks, c->rows, regs[i]);
        for (int j = 0; j < n_counts; j++) printf(" %7.1f (%4.2f)", table[i][j], bytes / table[i][j] * 1e-6);
        printf("\n");
    }
    printf("%-4s %5s %6s %4s %4s", "lt", "", "", "", "");
    for (int j = 0; j < n_counts; j++) printf(" %7.1f (%4.2f)", lt_us[j], bytes / lt_us[j] * 1e-6);
    printf("  (cuBLASLt planned for the column's count)\n");
    printf("results: %s\n", wrong ? "WRONG" : "every gemv call equal, within 1e-5 of a double product; "
                                            "cuBLASLt within a bf16 rounding of it");
    cublasLtDestroy(lt);
    cudaFree(out_bf16), cudaFree(workspace);
    if (csv_path) {
        moe_out_file o;
        if (moe_out_open(csv_path, &o, &err) || moe_out_write(&o, csv_text, csv_len, &err) ||
            moe_out_commit(&o, &err)) {
            fprintf(stderr, "cuda-stream-probe: %s\n", err.msg);
            return 2;
        }
    }
    cudaFree(w), cudaFree(x), cudaFree(out), cudaFree(counter), cudaFree(flush);
    free(w_host), free(out_host), free(first);
    return wrong ? 1 : 0;
}
