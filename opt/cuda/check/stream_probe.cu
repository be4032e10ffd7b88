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
 *   - each form also with the loads' L2::256B prefetch-size hint, and a read by bulk copies
 *     (cp.async.bulk into a ring of shared-memory stages, one thread a multiprocessor issuing
 *     them): does the way the rows are asked for, rather than how many are in flight, hold the
 *     rate near 3 TB/s? Each read form runs again on 4 copies of W one after the other (268 MB)
 *     on every multiprocessor; the extra rows' rate is then free of the fixed costs of a call
 *     (its launch, the first bytes' latency, the tail), as is a device copy of both sizes, and an
 *     empty kernel times the launch alone;
 *   - what a dependent link of a chain costs: W read by 1, 2, 4 and 8 kernels one after the other
 *     in one CUDA graph (each over its share of the rows), plainly and with each kernel a
 *     programmatic dependent of the one before that waits for it at its start, as the layer's
 *     chains do, and by one launch in as many phases with a grid-wide barrier between them
 *     (what a megakernel's dependent step would cost instead); every read, chain and phased
 *     launch is checked to have written every row's out;
 *   - the bound on the T = 1 layer as one launch: its 183 MB of weights (gate, the six routed
 *     experts' w13 and w2, the sinks' w13 and w2, as rows of the BIG copies) read by one launch,
 *     flat, and as parts unlocked by the steps they depend on (gate -> routing -> routed w13 ->
 *     routed w2; sinks' w13 -> sinks' w2), each warp taking rows of the first unlocked part with
 *     rows left (layer_read_kernel), the routing taking 0 or LAYER_ROUTE_US, and with both w2
 *     parts after both w13 parts (a last step that computes each output row whole);
 *   - beside them, the layer's own cuBLASLt plan for the sinks' GEMM1 (opt/cuda/cuda_lt.cu, bf16
 *     out, the layer's workspace size) planned for each multiprocessor count alone, its out
 *     checked against the same product within a bf16 rounding.
 *
 * Usage: cuda-stream-probe [--csv FILE] [--quick] (every case as a CSV row, written whole at the
 * end or not at all: common/out_file.h; --quick: each measurement once, on every multiprocessor
 * only, with every check: the run for the sanitizers). Needs a CUDA device; exits 2 without one,
 * on a bad argument or a bad FILE, 1 on a wrong result or a failed call.
 */
#include "../cuda_internal.h"
#include "../../../common/out_file.h"
#include "probe_common.h"


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
#define REPS 15 /* timed calls a measurement (--quick: QUICK_REPS, on every multiprocessor only) */
#define QUICK_REPS 1
#define CHUNK 4 /* rows a ticket */
#define BIG 4   /* the longer stream: this many copies of W one after the other (268 MB) */
#define MAX_LINKS 8 /* the longest chain of kernels that read W in turn */
#define CHAIN_WARPS 8 /* the chains' read form: one of the fastest on every multiprocessor */
#define CHAIN_BLOCKS 1
#define CHAIN_ROWS 2
#define LT_WORKSPACE (32u << 20) /* as the layer's (cuda_backend.cu) */
#define LAYER_ROUTE_US 5.0 /* the routing's time in the layer-shaped read (the front end's routing warp: a few us) */

__device__ __forceinline__ unsigned sm_id(void) {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}

/* 16 bytes read once: no L1 line kept (as the sinks' small kernel reads its weights). HINT:
 * with the prefetch-size hint that asks L2 to fill the whole 256-byte block around them. */
template <bool HINT> __device__ __forceinline__ uint4 load_once(const uint4 *src) {
    uint4 v;
    if (HINT)
        asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(src));
    else
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

/* Rows row .. row + ROWS - 1 of w, each lane's pieces asked for in one unrolled sequence, each
 * row's fold (read) or product with xs (gemv) summed across the warp into out[row + r]. */
template <bool GEMV, bool HINT, int ROWS>
__device__ __forceinline__ void read_rows(const uint4 *w, const uint4 *xs, float *out, int row, int lane) {
    float acc[ROWS];
    uint32_t fold[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) acc[r] = 0.0f, fold[r] = 0u;
    uint4 v[ROWS][LANE_PIECES];
#pragma unroll
    for (int r = 0; r < ROWS; r++)
#pragma unroll
        for (int p = 0; p < LANE_PIECES; p++)
            v[r][p] = load_once<HINT>(w + (size_t)(row + r) * ROW_PIECES + (size_t)p * 32 + lane);
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

template <bool GEMV, bool HINT, int WARPS, int ROWS>
__device__ __forceinline__ void stream_rows(const uint4 *w, const uint4 *x, float *out, int *counter, unsigned n_sms,
                                            int n_rows) {
    static_assert(CHUNK % ROWS == 0, "whole batches of rows");
    __shared__ uint4 xs[GEMV ? ROW_PIECES : 1];
    if (sm_id() >= n_sms) return;
    const int lane = (int)threadIdx.x % 32;
    if (GEMV) {
        for (int i = (int)threadIdx.x; i < ROW_PIECES; i += WARPS * 32) xs[i] = x[i];
        __syncthreads();
    }
    for (int chunk = next_chunk(counter, lane); chunk < n_rows; chunk = next_chunk(counter, lane))
        for (int row = chunk; row < chunk + CHUNK; row += ROWS) read_rows<GEMV, HINT, ROWS>(w, xs, out, row, lane);
}

template <bool GEMV, bool HINT, int WARPS, int BLOCKS, int ROWS>
__global__ void __launch_bounds__(WARPS * 32, BLOCKS) stream_kernel(const uint4 *w, const uint4 *x, float *out,
                                                                    int *counter, unsigned n_sms, int n_rows) {
    stream_rows<GEMV, HINT, WARPS, ROWS>(w, x, out, counter, n_sms, n_rows);
}
/* The read as a programmatic dependent launch: launched while the kernel before it runs, it
 * waits for that kernel's end and memory here (as the layer's GEMM2 waits for GEMM1). */
template <int WARPS, int BLOCKS, int ROWS>
__global__ void __launch_bounds__(WARPS * 32, BLOCKS) dependent_read_kernel(const uint4 *w, const uint4 *x, float *out,
                                                                            int *counter, unsigned n_sms, int n_rows) {
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    stream_rows<false, false, WARPS, ROWS>(w, x, out, counter, n_sms, n_rows);
}

/* Every block of the grid waits here until all have arrived (arrived: zero before the launch,
 * one count a barrier); the blocks' writes before it are visible after it. The grid must be
 * resident at once (a cooperative launch). */
__device__ __forceinline__ void grid_barrier(int *arrived) {
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(arrived) : "memory");
        int n = 0;
        do asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(n) : "l"(arrived) : "memory");
        while (n < (int)gridDim.x);
    }
    __syncthreads();
}
/* The chain's links as the phases of one launch: phase l reads link l's rows (on its own
 * tickets, counters[2 l]), then the grid waits at a barrier (arrived[l]) before phase l + 1:
 * what a dependent step costs inside one kernel, against a link of the chain. */
template <int WARPS, int ROWS>
__global__ void __launch_bounds__(WARPS * 32, 1) phased_read_kernel(const uint4 *w, float *out, int *counters,
                                                                    int *arrived, int links) {
    for (int l = 0; l < links; l++) {
        const int row0 = N_ROWS * l / links, rows = N_ROWS * (l + 1) / links - row0;
        stream_rows<false, false, WARPS, ROWS>(w + (size_t)row0 * ROW_PIECES, NULL, out + row0, counters + 2 * l,
                                              0xFFFFFFFFu, rows);
        if (l + 1 < links) grid_barrier(arrived + l);
    }
}

/* ---------------------------------------------------------------- the T = 1 layer's reads */

/* The weights one token's layer reads (Inkling-Small, docs/contract.md [floors]), as rows of W's
 * 8 kB one after the other in the BIG copies: the gate (264 padded rows of 4096 bf16), the six
 * routed experts' w13 and w2 (MXFP4 with scales: 8.91 and 4.46 MB each), the two sinks' w13 and
 * w2 (bf16), 183 MB in all. A part is unlocked by the parts it depends on: the routed w13 by the
 * routing, which starts once the gate is read and takes a set time; the routed w2 by the routed
 * w13, the sinks' w2 by the sinks' w13 and the routing (their gammas). */
enum layer_part { PART_GATE, PART_ROUTED_W2, PART_ROUTED_W13, PART_SINK_W2, PART_SINK_W13, N_PARTS };
__host__ __device__ constexpr int part_rows(int p) {
    return p == PART_GATE ? 264 : p == PART_ROUTED_W13 ? 6528 : p == PART_ROUTED_W2 ? 3264 : p == PART_SINK_W13 ? 8192 : 4096;
}
__host__ __device__ constexpr int part_row0(int p) { /* parts in enum order */
    return p == 0 ? 0 : part_row0(p - 1) + part_rows(p - 1);
}
#define LAYER_ROWS part_row0(N_PARTS)
/* q: tickets [N_PARTS], rows done [N_PARTS], then the routing's flag; zero before a launch */
#define Q_DONE N_PARTS
#define Q_ROUTED (2 * N_PARTS)
#define Q_INTS (2 * N_PARTS + 1)

__device__ __forceinline__ int load_acquire(const int *p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
/* JOINT: both w2 parts wait for both w13 parts (and the routing), as a launch whose last step
 * computes each output row whole, routed and sinks' sums together (the combine inside it). */
template <bool JOINT> __device__ __forceinline__ bool part_unlocked(const int *q, int p) {
    const bool routed = load_acquire(q + Q_ROUTED) != 0;
    const bool routed_w13 = load_acquire(q + Q_DONE + PART_ROUTED_W13) == part_rows(PART_ROUTED_W13);
    const bool sink_w13 = load_acquire(q + Q_DONE + PART_SINK_W13) == part_rows(PART_SINK_W13);
    switch (p) {
    case PART_ROUTED_W13: return routed;
    case PART_ROUTED_W2: return routed_w13 && (!JOINT || sink_w13);
    case PART_SINK_W2: return sink_w13 && routed && (!JOINT || routed_w13);
    default: return true;
    }
}
/* The layer's reads in one launch: each warp takes CHUNK rows at a time of the first part, in
 * enum order (the routed chain before the sinks, a later step before an earlier one), that is
 * unlocked and has rows left; with none, it waits for one. The warp that reads the gate's last
 * rows plays the routing: it waits route_cycles, then unlocks the routed w13. A warp leaves once
 * every part's rows are all read. This is the bound on one launch that runs the layer's steps
 * as dependent parts: only the reads, their order and the steps' dependencies. */
template <int WARPS, int ROWS, bool JOINT>
__global__ void __launch_bounds__(WARPS * 32, 1) layer_read_kernel(const uint4 *w, float *out, int *q,
                                                                   long long route_cycles) {
    const int lane = (int)threadIdx.x % 32;
    for (;;) {
        int part = -1, row = 0;
        if (lane == 0) {
            bool all_done = true;
            for (int p = 0; p < N_PARTS && part < 0; p++) {
                if (load_acquire(q + Q_DONE + p) < part_rows(p)) all_done = false;
                if (*(volatile int *)(q + p) >= part_rows(p) || !part_unlocked<JOINT>(q, p)) continue;
                const int r = atomicAdd(q + p, CHUNK);
                if (r < part_rows(p)) part = p, row = r;
            }
            if (part < 0 && all_done) part = N_PARTS; /* leave */
        }
        part = __shfl_sync(0xFFFFFFFFu, part, 0);
        row = __shfl_sync(0xFFFFFFFFu, row, 0);
        if (part == N_PARTS) return;
        if (part < 0) {
            __nanosleep(100);
            continue;
        }
        const int row0 = part_row0(part) + row;
        for (int r = row0; r < row0 + CHUNK; r += ROWS) read_rows<false, false, ROWS>(w, NULL, out, r, lane);
        __syncwarp();
        if (lane == 0) {
            int before;
            asm volatile("atom.release.gpu.global.add.s32 %0, [%1], %2;\n"
                         : "=r"(before)
                         : "l"(q + Q_DONE + part), "r"(CHUNK)
                         : "memory");
            if (part == PART_GATE && before + CHUNK == part_rows(PART_GATE)) { /* the routing */
                const long long t0 = clock64();
                while (clock64() - t0 < route_cycles)
                    ;
                asm volatile("st.release.gpu.global.b32 [%0], 1;\n" ::"l"(q + Q_ROUTED) : "memory");
            }
        }
    }
}

/* ---------------------------------------------------------------- bulk copies */

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void bar_init(uint32_t bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar) : "memory");
}
/* bytes [src, src + bytes) to shared memory at dst by one bulk copy that completes on bar */
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
__device__ __forceinline__ void bar_wait(uint32_t bar, uint32_t parity) {
    asm volatile("{\n\t.reg .pred done;\n"
                 "WAIT_%=:\n\tmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "\t@!done bra WAIT_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}

/* The read by bulk copies (cp.async.bulk, the copy engine behind TMA): one block of one warp a
 * multiprocessor, lane 0 keeping STAGES copies of PIECE_ROWS whole rows in flight through a
 * ring of shared-memory stages. A block takes one contiguous share of the rows (its rank among
 * the blocks that stay, by one ticket), so no ticket is drawn per copy. The rows are not used:
 * this is the rate of the copies alone (x and out are unused). */
template <int STAGES, int PIECE_ROWS>
__global__ void __launch_bounds__(32, 1) bulk_kernel(const uint4 *w, const uint4 *x, float *out, int *counter,
                                                     unsigned n_sms, int n_rows) {
    (void)x, (void)out;
    extern __shared__ __align__(128) uint8_t stage_bytes[];
    __shared__ __align__(8) uint64_t bars[STAGES];
    if (sm_id() >= n_sms || threadIdx.x != 0) return;
    constexpr uint32_t PIECE = PIECE_ROWS * KD * 2;
    const int rank = atomicAdd(counter, 1);
    const int first = (int)((long long)n_rows * rank / (int)n_sms);
    const int last = (int)((long long)n_rows * (rank + 1) / (int)n_sms);
    for (int s = 0; s < STAGES; s++) bar_init(smem_addr(&bars[s]));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    const uint8_t *src = (const uint8_t *)w;
    int i = 0;
    for (int row = first; row < last; row += PIECE_ROWS, i++) {
        const int s = i % STAGES;
        if (i >= STAGES) bar_wait(smem_addr(&bars[s]), (uint32_t)(i / STAGES - 1) & 1u);
        const uint32_t bytes = (uint32_t)(min(PIECE_ROWS, last - row) * KD * 2);
        bulk_copy(smem_addr(stage_bytes + (size_t)s * PIECE), src + (size_t)row * KD * 2, bytes,
                  smem_addr(&bars[s]));
    }
    for (int j = max(0, i - STAGES); j < i; j++) /* the copies still in flight */
        bar_wait(smem_addr(&bars[j % STAGES]), (uint32_t)(j / STAGES) & 1u);
    atomicAdd(counter + 1, last - first);
}

/* Nothing: the fixed cost of a timed launch on every multiprocessor. */
__global__ void empty_kernel(const uint4 *, const uint4 *, float *, int *, unsigned, int) {}

typedef void (*stream_fn)(const uint4 *, const uint4 *, float *, int *, unsigned, int);

typedef struct {
    const char *kernel; /* read, gemv, bulk */
    bool hint;          /* the loads' L2::256B prefetch-size hint */
    int warps, blocks, rows, stages;
    stream_fn fn;
} stream_case;

/* (warps, blocks a multiprocessor, rows a warp): 512 threads a multiprocessor (128 registers a
 * thread), 1024 (64) and 256 (up to 255); each without and with the prefetch-size hint */
#define CASE(G, H, W, B, R) {G ? "gemv" : "read", H, W, B, R, 0, stream_kernel<G, H, W, B, R>}
#define FORMS_OF(G, H)                                                                            \
    CASE(G, H, 4, 4, 1), CASE(G, H, 8, 2, 1), CASE(G, H, 16, 1, 1), CASE(G, H, 4, 4, 2),          \
    CASE(G, H, 8, 2, 2), CASE(G, H, 16, 1, 2), CASE(G, H, 8, 4, 1), CASE(G, H, 16, 2, 1),         \
    CASE(G, H, 32, 1, 1), CASE(G, H, 8, 1, 2), CASE(G, H, 4, 2, 2)
/* (stages, rows a copy): 32 to 192 kB in flight a multiprocessor */
#define BULK(S, P) {"bulk", false, 1, 1, P, S, bulk_kernel<S, P>}

static const stream_case cases[] = {FORMS_OF(false, false), FORMS_OF(false, true), FORMS_OF(true, false),
                                    FORMS_OF(true, true),  BULK(4, 1),  BULK(2, 4), BULK(4, 4),
                                    BULK(6, 4),            BULK(16, 1), BULK(12, 2)};

static float bf16_value(uint16_t bits) {
    const uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int reps = REPS;

/* median µs of reps timed intervals on stream, each after a flush of the L2 (and a warm-up
 * first): setup() queues what must precede the interval, timed() what it measures. */
template <typename Setup, typename Timed>
static double median_us(cudaStream_t stream, void *flush, cudaEvent_t e0, cudaEvent_t e1, Setup &&setup,
                        Timed &&timed) {
    double us[REPS];
    for (int r = -1; r < reps; r++) { /* r = -1: a warm-up */
        PROBE_TRY(cudaMemsetAsync(flush, r & 0xFF, FLUSH_BYTES, stream));
        setup();
        PROBE_TRY(cudaEventRecord(e0, stream));
        timed();
        PROBE_TRY(cudaEventRecord(e1, stream));
        PROBE_TRY(cudaEventSynchronize(e1));
        float ms = 0.0f;
        PROBE_TRY(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 0) us[r] = 1e3 * ms;
    }
    return median_of(us, reps);
}

/* median µs of REPS calls of fn on n_sms of the sms multiprocessors (blocks of threads each a
 * multiprocessor, pad bytes of dynamic shared memory a block) over n_rows rows of w, each after a
 * flush of the L2 */
static double time_case(stream_fn fn, int blocks, int threads, unsigned n_sms, int sms, int pad, int n_rows,
                        const uint4 *w, const uint4 *x, float *out, int *counter, void *flush, cudaEvent_t e0,
                        cudaEvent_t e1) {
    return median_us(
        0, flush, e0, e1, [&] { PROBE_TRY(cudaMemsetAsync(counter, 0, 2 * sizeof(int), 0)); },
        [&] {
            fn<<<blocks * sms, threads, (size_t)pad>>>(w, x, out, counter, n_sms, n_rows);
            PROBE_TRY(cudaGetLastError());
        });
}

/* median µs of REPS device copies of bytes from src to dst, each after a flush of the L2 */
static double time_copy(void *dst, const void *src, size_t bytes, void *flush, cudaEvent_t e0, cudaEvent_t e1) {
    return median_us(0, flush, e0, e1, [] {},
                     [&] { PROBE_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0)); });
}

/* Every row's out written by a read (out is set to all-ones bits before; a read writes its fold
 * converted to a float, never those bits). */
static bool rows_all_written(const float *out, int n_rows) {
    static uint32_t host[BIG * N_ROWS];
    PROBE_TRY(cudaMemcpy(host, out, (size_t)n_rows * sizeof(float), cudaMemcpyDeviceToHost));
    for (int r = 0; r < n_rows; r++)
        if (host[r] == 0xFFFFFFFFu) return false;
    return true;
}

/* median µs of REPS launches of one CUDA graph that reads W as `links` kernels one after the other,
 * each over its share of the rows: fn (blocks of threads a multiprocessor, pad bytes of dynamic
 * shared memory), or, with dependent_fn, each kernel after the first a programmatic dependent of
 * the one before. Each launch after a flush of the L2. counters: two ints a link. */
static double time_chain(stream_fn fn, stream_fn dependent_fn, int links, int blocks, int threads, int sms, int pad,
                         const uint4 *w, const uint4 *x, float *out, int *counters, void *flush, cudaStream_t stream,
                         cudaEvent_t e0, cudaEvent_t e1) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    PROBE_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int l = 0; l < links; l++) {
        const int row0 = N_ROWS * l / links, rows = N_ROWS * (l + 1) / links - row0;
        cudaLaunchAttribute attr = {};
        attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr.val.programmaticStreamSerializationAllowed = 1;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3((unsigned)(blocks * sms));
        cfg.blockDim = dim3((unsigned)threads);
        cfg.dynamicSmemBytes = (size_t)pad;
        cfg.stream = stream;
        const bool dependent = dependent_fn && l > 0;
        cfg.attrs = &attr;
        cfg.numAttrs = dependent ? 1 : 0;
        PROBE_TRY(cudaLaunchKernelEx(&cfg, dependent ? dependent_fn : fn, w + (size_t)row0 * ROW_PIECES, x,
                                     out + row0, counters + 2 * l, (unsigned)sms, rows));
    }
    PROBE_TRY(cudaStreamEndCapture(stream, &graph));
    PROBE_TRY(cudaGraphInstantiate(&exec, graph, 0));
    const double us = median_us(
        stream, flush, e0, e1,
        [&] { PROBE_TRY(cudaMemsetAsync(counters, 0, 2 * (size_t)links * sizeof(int), stream)); },
        [&] { PROBE_TRY(cudaGraphLaunch(exec, stream)); });
    PROBE_TRY(cudaGraphExecDestroy(exec));
    PROBE_TRY(cudaGraphDestroy(graph));
    return us;
}

/* median µs of W read by one cooperative launch of phased_read_kernel in `links` phases (one
 * block a multiprocessor), its tickets and barriers zeroed first. Launched directly, not in a
 * graph: what the phases add is read against its own one-phase launch. */
static double time_phased(int links, int threads, int sms, int pad, const uint4 *w, float *out, int *counters,
                          void *flush, cudaStream_t stream, cudaEvent_t e0, cudaEvent_t e1) {
    int *arrived = counters + 2 * MAX_LINKS;
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeCooperative;
    attr.val.cooperative = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)sms);
    cfg.blockDim = dim3((unsigned)threads);
    cfg.dynamicSmemBytes = (size_t)pad;
    cfg.stream = stream;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    return median_us(
        stream, flush, e0, e1,
        [&] { PROBE_TRY(cudaMemsetAsync(counters, 0, 3 * MAX_LINKS * sizeof(int), stream)); },
        [&] {
            PROBE_TRY(cudaLaunchKernelEx(&cfg, phased_read_kernel<CHAIN_WARPS, CHAIN_ROWS>, w, out, counters,
                                         arrived, links));
        });
}

/* median µs of the T = 1 layer's reads by one launch of layer_read_kernel (one block a
 * multiprocessor), the routing taking route_us, the w2 parts joint or not (part_unlocked); its
 * tickets and counts zeroed first. */
static double time_layer(bool joint, double route_us, int threads, int sms, int pad, const uint4 *w, float *out, int *q,
                         void *flush, cudaStream_t stream, cudaEvent_t e0, cudaEvent_t e1) {
    int clock_khz = 0;
    PROBE_TRY(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    const long long route_cycles = (long long)(route_us * clock_khz / 1e3);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)sms);
    cfg.blockDim = dim3((unsigned)threads);
    cfg.dynamicSmemBytes = (size_t)pad;
    cfg.stream = stream;
    return median_us(
        stream, flush, e0, e1, [&] { PROBE_TRY(cudaMemsetAsync(q, 0, Q_INTS * sizeof(int), stream)); },
        [&] {
            if (joint)
                PROBE_TRY(cudaLaunchKernelEx(&cfg, layer_read_kernel<CHAIN_WARPS, CHAIN_ROWS, true>, w, out, q,
                                             route_cycles));
            else
                PROBE_TRY(cudaLaunchKernelEx(&cfg, layer_read_kernel<CHAIN_WARPS, CHAIN_ROWS, false>, w, out, q,
                                             route_cycles));
        });
}

/* Every gemv call gives the first one's out bit for bit; the first is checked against a host
 * double product of each row (fp32 over 4096 products: within about 133 u of their magnitudes). */
static bool check_out(const stream_case *c, int n_sms, const float *out, float *out_host, float *first,
                      const uint16_t *w_host, const uint16_t *x_host, bool *have_first) {
    PROBE_TRY(cudaMemcpy(out_host, out, N_ROWS * sizeof(float), cudaMemcpyDeviceToHost));
    if (*have_first) {
        if (!memcmp(first, out_host, N_ROWS * sizeof(float))) return true;
        fprintf(stderr, "cuda-stream-probe: gemv%s %d warps x %d blocks, %d rows, on %d SMs: out differs from "
                "the first call's\n", c->hint ? " (L2::256B)" : "", c->warps, c->blocks, c->rows, n_sms);
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
    if (moe_cuda_lt_plan_for(lt, &plan, N_ROWS, KD, 1, 0, CUDA_R_16BF, sm_target, LT_WORKSPACE, &err)) {
        fprintf(stderr, "cuda-stream-probe: %s\n", err.msg);
        exit(1);
    }
    const double us = median_us(0, flush, e0, e1, [] {}, [&] {
        if (moe_cuda_lt_run(lt, &plan, (const uint16_t *)w, (const uint16_t *)x, out_bf16, workspace, LT_WORKSPACE,
                            0, &err)) {
            fprintf(stderr, "cuda-stream-probe: %s\n", err.msg);
            exit(1);
        }
    });
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
    return us;
}

/* One cell of the table: us (TB/s) for bytes, or a dash where it was not measured (--quick). */
static void print_us(double us, double bytes) {
    if (us > 0.0) printf(" %7.1f (%4.2f)", us, bytes / us * 1e-6);
    else printf(" %14s", "-");
}

int main(int argc, char **argv) {
    probe_args args;
    if (probe_parse_args("cuda-stream-probe", argc, argv, &args)) return 2;
    const char *csv_path = args.csv_path;
    const bool quick = args.quick;
    if (quick) reps = QUICK_REPS;
    moe_error err;
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
    int *counter = NULL; /* [0] the tickets; [1] rows a bulk case copied; two a link of a chain,
                            then one barrier count a phase (time_phased) */
    void *flush = NULL, *copy_dst = NULL;
    const size_t w_bytes = w_elems * sizeof(uint16_t);
    PROBE_TRY(cudaMalloc(&w, BIG * w_bytes));
    PROBE_TRY(cudaMalloc(&x, KD * sizeof(uint16_t)));
    PROBE_TRY(cudaMalloc(&out, BIG * N_ROWS * sizeof(float)));
    PROBE_TRY(cudaMalloc(&counter, 3 * MAX_LINKS * sizeof(int)));
    PROBE_TRY(cudaMalloc(&flush, FLUSH_BYTES));
    PROBE_TRY(cudaMalloc(&copy_dst, BIG * w_bytes));
    for (int i = 0; i < BIG; i++)
        PROBE_TRY(cudaMemcpy((uint8_t *)w + i * w_bytes, w_host, w_bytes, cudaMemcpyHostToDevice));
    PROBE_TRY(cudaMemcpy(x, x_host, KD * sizeof(uint16_t), cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    PROBE_TRY(cudaEventCreate(&e0));
    PROBE_TRY(cudaEventCreate(&e1));

    const double bytes = (double)w_bytes;
    const int sm_counts[] = {40, 60, 80, 100, sms};
    const int n_counts = (int)(sizeof sm_counts / sizeof sm_counts[0]);
    const int first_count = quick ? n_counts - 1 : 0; /* --quick: every multiprocessor only */
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    double table[sizeof cases / sizeof cases[0]][sizeof sm_counts / sizeof sm_counts[0]];
    double big[sizeof cases / sizeof cases[0]]; /* BIG times the rows, on every multiprocessor */
    int regs[sizeof cases / sizeof cases[0]];
    memset(table, 0, sizeof table);
    memset(big, 0, sizeof big);
    csv_row("kernel,l2_hint,warps,blocks_per_sm,rows,stages,regs,sms,MB,us,TBps\n");
    bool have_first = false, wrong = false;
    for (int i = 0; i < n_cases; i++) {
        const stream_case *c = &cases[i];
        const bool gemv = !strcmp(c->kernel, "gemv"), bulk = !strcmp(c->kernel, "bulk");
        cudaFuncAttributes attr;
        PROBE_TRY(cudaFuncGetAttributes(&attr, (const void *)c->fn));
        regs[i] = attr.numRegs;
        /* shared memory a block so that exactly c->blocks fit on a multiprocessor (a bulk
         * case's stages within it) */
        const int pad = smem_per_sm / c->blocks - smem_reserved - (int)attr.sharedSizeBytes;
        PROBE_TRY(cudaFuncSetAttribute((const void *)c->fn, cudaFuncAttributeMaxDynamicSharedMemorySize, pad));
        PROBE_TRY(cudaFuncSetAttribute((const void *)c->fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       cudaSharedmemCarveoutMaxShared));
        int fit = 0;
        PROBE_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, c->fn, c->warps * 32, (size_t)pad));
        if (fit != c->blocks || (bulk && pad < c->stages * c->rows * KD * 2)) {
            printf("skipped: %s %d warps, %d blocks a multiprocessor (%d fit at %d registers)\n", c->kernel,
                   c->warps, c->blocks, fit, attr.numRegs);
            continue;
        }
        for (int j = first_count; j <= n_counts; j++) { /* j = n_counts: BIG times the rows, every multiprocessor */
            const int n_sms = j < n_counts && sm_counts[j] < sms ? sm_counts[j] : sms;
            const int n_rows = j < n_counts ? N_ROWS : BIG * N_ROWS;
            if (j == n_counts && gemv) break;
            PROBE_TRY(cudaMemset(out, 0xFF, BIG * N_ROWS * sizeof(float))); /* NaN: a row left out shows */
            PROBE_TRY(cudaMemset(counter, 0, 2 * sizeof(int)));
            const double us = time_case(c->fn, c->blocks, c->warps * 32, (unsigned)n_sms, sms, pad, n_rows, w, x,
                                        out, counter, flush, e0, e1);
            csv_row("%s,%d,%d,%d,%d,%d,%d,%d,%.1f,%.2f,%.3f\n", c->kernel, c->hint, c->warps, c->blocks, c->rows,
                    c->stages, attr.numRegs, n_sms, bytes * n_rows / N_ROWS / 1e6, us,
                    bytes * n_rows / N_ROWS / us * 1e-6);
            if (j < n_counts) table[i][j] = us;
            else big[i] = us;
            if (gemv && !check_out(c, n_sms, out, out_host, first, w_host, x_host, &have_first)) wrong = true;
            if (!strcmp(c->kernel, "read") && !rows_all_written(out, n_rows)) {
                fprintf(stderr, "cuda-stream-probe: read %d warps x %d blocks, %d rows, on %d SMs left rows unread\n",
                        c->warps, c->blocks, c->rows, n_sms);
                wrong = true;
            }
            if (bulk) { /* every row copied, by the last call */
                int copied[2];
                PROBE_TRY(cudaMemcpy(copied, counter, sizeof copied, cudaMemcpyDeviceToHost));
                if (copied[1] != n_rows) {
                    fprintf(stderr, "cuda-stream-probe: bulk %d x %d rows on %d SMs copied %d of %d rows\n",
                            c->stages, c->rows, n_sms, copied[1], n_rows);
                    wrong = true;
                }
            }
        }
    }
    /* the fixed cost of a timed launch, and the device copy's rate at both sizes */
    PROBE_TRY(cudaMemset(counter, 0, 2 * sizeof(int)));
    const double empty_us = time_case(empty_kernel, 1, 32, (unsigned)sms, sms, 0, 0, w, x, out, counter, flush, e0, e1);
    const double copy_us = time_copy(copy_dst, w, w_bytes, flush, e0, e1);
    const double copy_big_us = time_copy(copy_dst, w, BIG * w_bytes, flush, e0, e1);

    /* what a dependent link costs: W read by 1 to MAX_LINKS kernels one after the other in one
     * graph, plainly and as programmatic dependents (the read form CHAIN_*) */
    stream_fn chain_fn = stream_kernel<false, false, CHAIN_WARPS, CHAIN_BLOCKS, CHAIN_ROWS>;
    stream_fn dependent_fn = dependent_read_kernel<CHAIN_WARPS, CHAIN_BLOCKS, CHAIN_ROWS>;
    const int chain_pad = smem_per_sm / CHAIN_BLOCKS - smem_reserved;
    PROBE_TRY(cudaFuncSetAttribute((const void *)chain_fn, cudaFuncAttributeMaxDynamicSharedMemorySize, chain_pad));
    PROBE_TRY(cudaFuncSetAttribute((const void *)dependent_fn, cudaFuncAttributeMaxDynamicSharedMemorySize, chain_pad));
    cudaStream_t chain_stream;
    PROBE_TRY(cudaStreamCreateWithFlags(&chain_stream, cudaStreamNonBlocking));
    const int link_counts[] = {1, 2, 4, MAX_LINKS};
    double chain_us[2][4];
    for (int d = 0; d < 2; d++)
        for (int j = 0; j < 4; j++) {
            PROBE_TRY(cudaMemset(out, 0xFF, N_ROWS * sizeof(float)));
            chain_us[d][j] = time_chain(chain_fn, d ? dependent_fn : NULL, link_counts[j], CHAIN_BLOCKS,
                                        CHAIN_WARPS * 32, sms, chain_pad, w, x, out, counter, flush, chain_stream,
                                        e0, e1);
            if (!rows_all_written(out, N_ROWS)) {
                fprintf(stderr, "cuda-stream-probe: a chain of %d left rows unread\n", link_counts[j]);
                wrong = true;
            }
            csv_row("%s-%d,0,%d,%d,%d,0,,%d,%.1f,%.2f,%.3f\n", d ? "dependent-chain" : "chain", link_counts[j],
                    CHAIN_WARPS, CHAIN_BLOCKS, CHAIN_ROWS, sms, bytes / 1e6, chain_us[d][j],
                    bytes / chain_us[d][j] * 1e-6);
        }
    /* the same links as the phases of one launch, a grid barrier between them */
    PROBE_TRY(cudaFuncSetAttribute((const void *)phased_read_kernel<CHAIN_WARPS, CHAIN_ROWS>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, chain_pad));
    double phased_us[4];
    for (int j = 0; j < 4; j++) {
        PROBE_TRY(cudaMemset(out, 0xFF, N_ROWS * sizeof(float)));
        phased_us[j] = time_phased(link_counts[j], CHAIN_WARPS * 32, sms, chain_pad, w, out, counter, flush,
                                   chain_stream, e0, e1);
        if (!rows_all_written(out, N_ROWS)) {
            fprintf(stderr, "cuda-stream-probe: one launch of %d phases left rows unread\n", link_counts[j]);
            wrong = true;
        }
        csv_row("phased-%d,0,%d,1,%d,0,,%d,%.1f,%.2f,%.3f\n", link_counts[j], CHAIN_WARPS, CHAIN_ROWS, sms,
                bytes / 1e6, phased_us[j], bytes / phased_us[j] * 1e-6);
    }
    /* the T = 1 layer's 183 MB in one launch: flat, and as dependent parts with the routing
     * taking 0 and LAYER_ROUTE_US */
    static_assert(LAYER_ROWS <= BIG * N_ROWS && Q_INTS <= 3 * MAX_LINKS, "the buffers hold the layer's reads");
    PROBE_TRY(cudaFuncSetAttribute((const void *)layer_read_kernel<CHAIN_WARPS, CHAIN_ROWS, false>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, chain_pad));
    PROBE_TRY(cudaFuncSetAttribute((const void *)layer_read_kernel<CHAIN_WARPS, CHAIN_ROWS, true>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, chain_pad));
    const double layer_bytes = (double)LAYER_ROWS * KD * 2;
    PROBE_TRY(cudaMemset(out, 0xFF, LAYER_ROWS * sizeof(float)));
    PROBE_TRY(cudaMemset(counter, 0, 2 * sizeof(int)));
    const double layer_flat_us = time_case(chain_fn, CHAIN_BLOCKS, CHAIN_WARPS * 32, (unsigned)sms, sms, chain_pad,
                                           LAYER_ROWS, w, x, out, counter, flush, e0, e1);
    if (!rows_all_written(out, LAYER_ROWS)) {
        fprintf(stderr, "cuda-stream-probe: the layer's flat read left rows unread\n");
        wrong = true;
    }
    csv_row("layer-flat,0,%d,1,%d,0,,%d,%.1f,%.2f,%.3f\n", CHAIN_WARPS, CHAIN_ROWS, sms, layer_bytes / 1e6,
            layer_flat_us, layer_bytes / layer_flat_us * 1e-6);
    const double route_us[3] = {0.0, LAYER_ROUTE_US, LAYER_ROUTE_US};
    double layer_us[3];
    for (int j = 0; j < 3; j++) { /* j = 2: the w2 parts joint */
        PROBE_TRY(cudaMemset(out, 0xFF, LAYER_ROWS * sizeof(float)));
        layer_us[j] = time_layer(j == 2, route_us[j], CHAIN_WARPS * 32, sms, chain_pad, w, out, counter, flush,
                                 chain_stream, e0, e1);
        if (!rows_all_written(out, LAYER_ROWS)) {
            fprintf(stderr, "cuda-stream-probe: the layer's parts (routing %.0f us%s) left rows unread\n", route_us[j],
                    j == 2 ? ", joint w2" : "");
            wrong = true;
        }
        csv_row("layer-parts-route%.0fus%s,0,%d,1,%d,0,,%d,%.1f,%.2f,%.3f\n", route_us[j], j == 2 ? "-joint" : "",
                CHAIN_WARPS, CHAIN_ROWS, sms, layer_bytes / 1e6, layer_us[j], layer_bytes / layer_us[j] * 1e-6);
    }
    PROBE_TRY(cudaStreamDestroy(chain_stream));
    csv_row("empty,0,1,1,0,0,0,%d,0,%.2f,\n", sms, empty_us);
    csv_row("device copy,0,,,,,,%d,%.1f,%.2f,%.3f\n", sms, bytes / 1e6, copy_us, bytes / copy_us * 1e-6);
    csv_row("device copy,0,,,,,,%d,%.1f,%.2f,%.3f\n", sms, BIG * bytes / 1e6, copy_big_us,
            BIG * bytes / copy_big_us * 1e-6);

    cublasLtHandle_t lt;
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cuda-stream-probe: cublasLtCreate failed\n");
        return 1;
    }
    uint16_t *out_bf16 = NULL;
    void *workspace = NULL;
    PROBE_TRY(cudaMalloc(&out_bf16, N_ROWS * sizeof(uint16_t)));
    PROBE_TRY(cudaMalloc(&workspace, LT_WORKSPACE));
    double lt_us[sizeof sm_counts / sizeof sm_counts[0]] = {0};
    for (int j = first_count; j < n_counts; j++) {
        bool right = false;
        lt_us[j] = time_lt(lt, sm_counts[j] < sms ? sm_counts[j] : 0, w, x, out_bf16, workspace, flush, e0, e1,
                           w_host, x_host, &right);
        csv_row("cublaslt,0,,,,,,%d,%.1f,%.2f,%.3f\n", sm_counts[j] < sms ? sm_counts[j] : sms, bytes / 1e6,
                lt_us[j], bytes / lt_us[j] * 1e-6);
        if (!right) wrong = true;
    }

    printf("W bf16 [%d, %d] (%.1f MB), one token, L2 flushed; median of %d calls, us (TB/s) on the "
           "multiprocessors of each column; last column: %d times the rows (%.0f MB) on all %d, and the "
           "rate of the extra rows alone (the fixed costs cancel)\n",
           N_ROWS, KD, bytes / 1e6, reps, BIG, BIG * bytes / 1e6, sms);
    printf("%-4s %4s %5s %6s %4s %6s %4s", "", "hint", "warps", "blocks", "rows", "stages", "regs");
    for (int j = 0; j < n_counts; j++) printf(" %11d SMs", sm_counts[j] < sms ? sm_counts[j] : sms);
    printf(" %11s x%d  %s\n", "", BIG, "extra rows");
    for (int i = 0; i < n_cases; i++) {
        if (table[i][n_counts - 1] <= 0.0) continue;
        const stream_case *c = &cases[i];
        printf("%-4s %4s %5d %6d %4d %6d %4d", c->kernel, c->hint ? "256B" : "-", c->warps, c->blocks, c->rows,
               c->stages, regs[i]);
        for (int j = 0; j < n_counts; j++) print_us(table[i][j], bytes);
        if (big[i] > 0.0)
            printf(" %7.1f (%4.2f)  %4.2f TB/s", big[i], BIG * bytes / big[i] * 1e-6,
                   (BIG - 1) * bytes / (big[i] - table[i][n_counts - 1]) * 1e-6);
        printf("\n");
    }
    printf("%-4s %4s %5s %6s %4s %6s %4s", "lt", "", "", "", "", "", "");
    for (int j = 0; j < n_counts; j++) print_us(lt_us[j], bytes);
    printf("  (cuBLASLt planned for the column's count)\n");
    printf("an empty kernel on all %d multiprocessors: %.1f us; a device copy of W: %.1f us (%.2f TB/s read, as "
           "many written), of %d times W: %.1f us (%.2f TB/s)\n",
           sms, empty_us, copy_us, bytes / copy_us * 1e-6, BIG, copy_big_us, BIG * bytes / copy_big_us * 1e-6);
    printf("W read by a chain of 1 / 2 / 4 / %d kernels in one graph (read, %d warps, %d block, %d rows), us: "
           "%.1f / %.1f / %.1f / %.1f; as programmatic dependents: %.1f / %.1f / %.1f / %.1f\n",
           MAX_LINKS, CHAIN_WARPS, CHAIN_BLOCKS, CHAIN_ROWS, chain_us[0][0], chain_us[0][1], chain_us[0][2],
           chain_us[0][3], chain_us[1][0], chain_us[1][1], chain_us[1][2], chain_us[1][3]);
    printf("W read by one launch (not in a graph) in 1 / 2 / 4 / %d phases, a grid barrier between them, us: "
           "%.1f / %.1f / %.1f / %.1f\n",
           MAX_LINKS, phased_us[0], phased_us[1], phased_us[2], phased_us[3]);
    printf("the T = 1 layer's reads (%.0f MB: gate, routed w13 and w2, sinks' w13 and w2) by one launch, us: flat "
           "%.1f (%.2f TB/s); as dependent parts, the routing taking 0 / %.0f us: %.1f / %.1f; both w2 after both "
           "w13: %.1f\n",
           layer_bytes / 1e6, layer_flat_us, layer_bytes / layer_flat_us * 1e-6, LAYER_ROUTE_US, layer_us[0],
           layer_us[1], layer_us[2]);
    printf("results: %s\n", wrong ? "WRONG"
                                   : "every gemv call equal, within 1e-5 of a double product; cuBLASLt within a "
                                     "bf16 rounding of it; every read and chain wrote, and every bulk call copied, "
                                     "every row");
    cublasLtDestroy(lt);
    cudaFree(out_bf16), cudaFree(workspace);
    if (csv_path && moe_out_write_whole(csv_path, probe_csv, probe_csv_len, &err)) {
        fprintf(stderr, "cuda-stream-probe: %s\n", err.msg);
        return 2;
    }
    cudaFree(w), cudaFree(x), cudaFree(out), cudaFree(counter), cudaFree(flush), cudaFree(copy_dst);
    free(w_host), free(out_host), free(first);
    return wrong ? 1 : 0;
}
