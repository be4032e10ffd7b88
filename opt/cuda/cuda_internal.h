/*
 * cuda_internal.h: what the CUDA path's files share (CUDA C++ only, never included from C).
 *
 * Rules:
 *   - every CUDA / cuBLASLt call is checked; a failure becomes MOE_ERR_DEVICE with a message
 *     naming the call (CUDA_TRY / LT_TRY / LAUNCH_CHECK);
 *   - kernels take raw device pointers with their shapes written beside them in the contract's
 *     letters; "a" is an assignment index t*K + k (token t, slot k);
 *   - nothing here synchronises the host: launchers only enqueue work on the given stream.
 */
#ifndef INKLING_CUDA_INTERNAL_H
#define INKLING_CUDA_INTERNAL_H

#include "../../common/moe.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#define CUDA_TRY(call)                                                                            \
    do {                                                                                          \
        cudaError_t cuda_try_e = (call);                                                          \
        if (cuda_try_e != cudaSuccess)                                                            \
            return moe_fail(err, MOE_ERR_DEVICE, "cuda: %s failed: %s", #call,                    \
                            cudaGetErrorString(cuda_try_e));                                      \
    } while (0)

#define LT_TRY(call)                                                                              \
    do {                                                                                          \
        cublasStatus_t lt_try_s = (call);                                                         \
        if (lt_try_s != CUBLAS_STATUS_SUCCESS)                                                    \
            return moe_fail(err, MOE_ERR_DEVICE, "cublasLt: %s failed: status %d", #call,         \
                            (int)lt_try_s);                                                       \
    } while (0)

/* After a kernel launch: reports a launch failure naming the kernel. */
#define LAUNCH_CHECK(kernel_name)                                                                 \
    do {                                                                                          \
        cudaError_t launch_e = cudaGetLastError();                                                \
        if (launch_e != cudaSuccess)                                                              \
            return moe_fail(err, MOE_ERR_DEVICE, "cuda: launch of %s failed: %s", kernel_name,    \
                            cudaGetErrorString(launch_e));                                        \
    } while (0)

/* Rows of assignments per tile: the tensor-core expert GEMMs (cuda_experts.cu) take tiles of
 * MOE_CUDA_TILE_M rows, the weight-streaming kernels (cuda_experts_gemv.cu) tiles of
 * MOE_CUDA_GEMV_M rows. The grouping writes the tile table for the size the call uses. */
#define MOE_CUDA_TILE_M 32
#define MOE_CUDA_GEMV_M 8

/* The expert GEMM variant a layer uses. AUTO takes, for MXFP4 experts, the wgmma kernels
 * (cuda_experts_wgmma.cu; GEMM1 with its reduction split for T <= MOE_CUDA_WG_SPLIT_MAX_T)
 * and the tensor-core wmma kernels (cuda_experts.cu) for bf16 and NVFP4 experts. The others
 * force one kind (the harness fuzzes each by name); GEMV and mma, the older weight-streaming
 * kernels, stay as variants to compare; the mma kernels forced take tiles of twice
 * MOE_CUDA_GEMV_M rows above MOE_CUDA_MMA_NARROW_MAX_T.
 * Measured on an H200, Inkling-Small (docs/perf-cuda.md). */
typedef enum {
    MOE_CUDA_EXPERTS_AUTO,
    MOE_CUDA_EXPERTS_WMMA,
    MOE_CUDA_EXPERTS_GEMV,
    MOE_CUDA_EXPERTS_MMA,
    MOE_CUDA_EXPERTS_WGMMA,
} moe_cuda_variant;
#define MOE_CUDA_MMA_NARROW_MAX_T 64

/* The path's tiling constants as shape hints (moe.h), ended by {NULL}: cuda_experts.cu. */
extern const moe_shape_hint moe_cuda_shape_hints[];

/* One tile of the grouped GEMMs: local expert and first row within that expert's group.
 * gemm1_done: the grouping writes 0; the wgmma GEMM1 counts its finished warps of the tile in
 * it, so that GEMM2 can start on the tile before the whole GEMM1 grid has ended
 * (cuda_experts_wgmma.cu, wg_chain). */
typedef struct {
    int expert;
    int row0;
    int gemm1_done;
} moe_cuda_tile;

/* The tiers of tile sizes of a wgmma kernel set (cuda_experts_wgmma.cu, launch_tiers): rows[0]
 * the table's rows a tile, then each smaller kernel's, descending; n = 1: one kernel, no tiers.
 * Tier k > 0 takes the tiles whose rows left in their expert (from the tile's first row) are at
 * most rows[k] and above rows[k + 1] (0 past the last), tier 0 every other tile: only an
 * expert's last tile can be in a tier above 0, so such a tier holds at most one tile an expert. */
#define MOE_CUDA_MAX_TIERS 3
typedef struct {
    int n;
    int rows[MOE_CUDA_MAX_TIERS];
} moe_cuda_tiers;
#ifdef __CUDACC__
__host__ __device__
#endif
static inline int moe_cuda_tier_of(const moe_cuda_tiers *t, int rows_left) {
    int tier = 0;
    for (int k = 1; k < t->n; k++)
        if (rows_left <= t->rows[k]) tier = k;
    return tier;
}
/* The grouping's counts, n_tiles [moe_cuda_tile_counts(E)]: n_tiles[0] the first tier's tiles,
 * the table's first entries (every tile with one size); with tiers, n_tiles[k] (0 < k < n) the
 * tiles of tier k, which stand after those, and whose table indices (experts ascending) stand
 * from n_tiles + moe_cuda_tier_list(k, E) on, so that a tier's kernel finds its tiles without
 * reading every other tier's (each empty block of a tier cost three dependent reads: 1.8 % of
 * the layer at T = 4096, docs/perf-cuda.md, forty-sixth run). */
static inline size_t moe_cuda_tile_counts(int E) {
    return MOE_CUDA_MAX_TIERS + (size_t)(MOE_CUDA_MAX_TIERS - 1) * (size_t)(E > 0 ? E : 0);
}
#ifdef __CUDACC__
__host__ __device__
#endif
static inline size_t moe_cuda_tier_list(int k, int E) {
    return MOE_CUDA_MAX_TIERS + (size_t)(k - 1) * (size_t)E;
}

/* Upper bound on the tiles that T*K assignments over E local experts can need, tile_m rows a
 * tile (each expert's last tile may be partial). */
static inline int moe_cuda_tile_bound(int T, int K, int E, int tile_m) {
    long tk = (long)T * K;
    long bound = tk / tile_m + (tk < E ? tk : E) + 1;
    return (int)bound;
}

/* ---------------------------------------------------------------- small-T front (cuda_front_small.cu) */

/* What the small-T front end reads and writes. x [T, D] bf16, gate_w [G, D] bf16, bias [R] or
 * NULL -> logits [T, G] fp32, rows moe_cuda_gate_rows(G) apart (fp32 sums in one fixed order),
 * ids [T, K], weights [T, K+S], bad [T]; ticket [1], zero between launches. Grouping when
 * tiers.n > 0 (as moe_cuda_group): chunk_counts (scratch), counts [E], perm [E, T], tiles,
 * n_tiles [moe_cuda_tile_counts(E)]. */
typedef struct {
    int T, D, G, R, K, S;
    float route_scale, global_scale;
    const uint16_t *x, *gate_w;
    const float *bias;
    float *logits;
    int32_t *ids;
    float *weights;
    int32_t *bad;
    unsigned *ticket;
    int E, expert_first;
    moe_cuda_tiers tiers;
    int32_t *chunk_counts, *counts, *perm;
    moe_cuda_tile *tiles;
    int32_t *n_tiles;
} moe_cuda_front_args;

/* Gate, routing and (where moe_cuda_front_small_groups) grouping for a few tokens in one
 * launch, where the three kernels' launches and waits cost more than their work. Only where
 * moe_cuda_front_small_fits(T, D). */
#define MOE_CUDA_FRONT_SMALL_MAX_T 8
bool moe_cuda_front_small_fits(int T, int D);
bool moe_cuda_front_small_groups(int T, int K);
moe_status moe_cuda_front_small(cudaStream_t stream, const moe_cuda_front_args *args,
                                moe_error *err);

/* ---------------------------------------------------------------- sinks, few tokens (cuda_sinks_small.cu) */

/* The sinks' GEMMs for T <= MOE_CUDA_SINKS_SMALL_MAX_T on mma.sync, weights straight to
 * registers: out [T, N] = a [T, Kd] times w [N, Kd]^T, fp32 sums; GEMM1 rounds out to bf16,
 * GEMM2 keeps fp32. Only where moe_cuda_sinks_small_fits (Kd a multiple of 8, w and a 16-byte
 * aligned). beside_previous: GEMM1 launched as the stream's previous kernel's programmatic
 * dependent (it starts beside it and ends after it). The path `cuda` uses them from
 * MOE_CUDA_SINKS_BESIDE_MIN_T tokens (cuda_backend.cu, sinks_beside_front). */
#define MOE_CUDA_SINKS_SMALL_MAX_T 8
#define MOE_CUDA_SINKS_BESIDE_MIN_T 2
bool moe_cuda_sinks_small_fits(int T, int Kd, const void *w, const void *a);
moe_status moe_cuda_sinks_small_gemm1(cudaStream_t stream, int sm_count, int T, int N, int Kd,
                                      const uint16_t *w, const uint16_t *a, uint16_t *out,
                                      bool beside_previous, moe_error *err);
moe_status moe_cuda_sinks_small_gemm2(cudaStream_t stream, int sm_count, int T, int N, int Kd,
                                      const uint16_t *w, const uint16_t *a, float *out,
                                      moe_error *err);

/* ---------------------------------------------------------------- routing (cuda_route.cu) */

/* The gate's rows on the device, the real G and zero rows up to a multiple of 8, and so the row
 * stride of the logits [T, G] (elements). For G = 258 (Inkling's 256 + 2) cuBLASLt chose an
 * Ampere kernel at 45-106 TFLOP/s; for 264 rows its Hopper kernels, 2.9x faster at T = 4096
 * (docs/perf-cuda.md, twentieth run). */
__host__ __device__ static inline int moe_cuda_gate_rows(int G) { return (G + 7) / 8 * 8; }

/* Selection and weights, one warp per token, exactly as common/routing.c computes them.
 * logits [T, R+S] fp32, rows moe_cuda_gate_rows(R+S) apart (rows of non-finite tokens are
 * overwritten with NaN), bias [R] or NULL, x [T, D] bf16 or NULL (NULL: every row counts as
 * finite, the `route` entry), ids [T, K], weights [T, K+S], bad [T] (1 for a token whose x row
 * holds NaN/inf) or NULL. */
moe_status moe_cuda_route(cudaStream_t stream, int T, int D, int R, int K, int S,
                          float route_scale, float global_scale, const uint16_t *x,
                          float *logits, const float *bias, int32_t *ids, float *weights,
                          int32_t *bad, moe_error *err);

/* ---------------------------------------------------------------- grouping (cuda_group.cu) */

/* Assignments per chunk of the grouping (one warp walks a chunk in index order). */
#define MOE_CUDA_GROUP_CHUNK 256

/* int32 scratch the grouping needs for T*K assignments over E local experts: one count per
 * (chunk, expert). */
static inline size_t moe_cuda_group_scratch(int T, int K, int E) {
    size_t chunks = ((size_t)T * K + MOE_CUDA_GROUP_CHUNK - 1) / MOE_CUDA_GROUP_CHUNK;
    return chunks * (size_t)E;
}

/* Assignments grouped by local expert, ordered by (token, slot) inside each group, in O(T*K):
 * ids [T, K], bad [T], chunk_counts [moe_cuda_group_scratch(T, K, E)] (scratch) -> counts [E],
 * perm [E, T] (assignment indices), tiles [moe_cuda_tile_bound(T, K, E, tiers.rows[0])] of
 * tiers.rows[0] rows each, n_tiles [moe_cuda_tile_counts(E)] (with the tiers' lists). Expert el
 * holds global id expert_first + el. */
moe_status moe_cuda_group(cudaStream_t stream, int T, int K, int E, int expert_first,
                          moe_cuda_tiers tiers,
                          const int32_t *ids, const int32_t *bad, int32_t *chunk_counts,
                          int32_t *counts, int32_t *perm, moe_cuda_tile *tiles, int32_t *n_tiles,
                          moe_error *err);

/* ---------------------------------------------------------------- routed experts (cuda_experts.cu) */

/* Routed expert weights as the device holds them (one of the three formats). */
typedef struct {
    const uint8_t *w13_mx;    /* [E, 2*IL, D/2] */
    const uint8_t *w13_scale; /* [E, 2*IL, D/B] (B = 32 MXFP4, 16 NVFP4) */
    const uint8_t *w2_mx;     /* [E, D, IL/2] */
    const uint8_t *w2_scale;  /* [E, D, IL/B] */
    const float *w13_scale2;  /* [E] NVFP4 only */
    const float *w2_scale2;   /* [E] NVFP4 only */
    const uint16_t *w13_bf16; /* [E, 2*IL, D] */
    const uint16_t *w2_bf16;  /* [E, D, IL] */
    /* MXFP4 re-laid out for the wgmma kernels by moe_cuda_wgmma_pack, or NULL */
    uint8_t *w13_wg, *w13_wg_scale, *w2_wg, *w2_wg_scale;
    /* scratch of the split wgmma kernels for up to MOE_CUDA_WG_SPLIT_MAX_T tokens (workspace) */
    float *split_partial;
    int32_t *split_counters;
    int E, D, IL;
    bool mxfp4;               /* MXFP4 (the GEMV kernels read only this one) */
    bool nvfp4;               /* NVFP4 (grouped tensor-core GEMMs) */
    /* a planted bug, for the test that shows the checks catch it (moe_cuda_plant_chain_race):
     * the wgmma GEMM2 starts beside GEMM1 without waiting for the h it reads */
    bool planted_chain_race;
} moe_cuda_experts;

/* The launchers of the routed experts' two grouped GEMMs, one signature for every kind:
 * GEMM1 + SwiGLU: x [T, D] bf16 -> h [T*K, IL] bf16 for every grouped assignment;
 * GEMM2: h [T*K, IL] bf16 -> y [T*K, D] fp32 for every grouped assignment. */
typedef moe_status moe_cuda_expert_gemm1_fn(cudaStream_t stream, const moe_cuda_experts *ex,
                                            int T, int K, const uint16_t *x,
                                            const int32_t *counts, const int32_t *perm,
                                            moe_cuda_tile *tiles, const int32_t *n_tiles,
                                            uint16_t *h, moe_error *err);
typedef moe_status moe_cuda_expert_gemm2_fn(cudaStream_t stream, const moe_cuda_experts *ex,
                                            int T, int K, const uint16_t *h,
                                            const int32_t *counts, const int32_t *perm,
                                            const moe_cuda_tile *tiles, const int32_t *n_tiles,
                                            float *y, moe_error *err);

/* Tensor-core (wmma) kernels, every format, tiles of MOE_CUDA_TILE_M rows (cuda_experts.cu). */
moe_cuda_expert_gemm1_fn moe_cuda_expert_gemm1;
moe_cuda_expert_gemm2_fn moe_cuda_expert_gemm2;
/* Weight-streaming kernels, MXFP4 only, tiles of MOE_CUDA_GEMV_M rows (cuda_experts_gemv.cu). */
moe_cuda_expert_gemm1_fn moe_cuda_expert_gemv1;
moe_cuda_expert_gemm2_fn moe_cuda_expert_gemv2;
/* Register-decoded weights on mma.sync, MXFP4 only (cuda_experts_mma.cu): tiles of
 * MOE_CUDA_GEMV_M rows (mma1/2) or twice as many (_m16). */
moe_cuda_expert_gemm1_fn moe_cuda_expert_mma1, moe_cuda_expert_mma1_m16;
moe_cuda_expert_gemm2_fn moe_cuda_expert_mma2, moe_cuda_expert_mma2_m16;
/* Warpgroup MMA (wgmma, cuda_experts_wgmma.cu) on MXFP4 packed by moe_cuda_wgmma_pack: tiles
 * of the suffix's first size in rows, each taken by the kernel of the smallest size of the
 * suffix that holds its rows left (32_16: a 32-row table, a 16-row kernel beside for the tiles
 * of at most 16 rows); wg1_16_split, wg2_16_split: tiles of 16 rows with the
 * reduction split into MOE_CUDA_WG_SPLIT slices, for T <= MOE_CUDA_WG_SPLIT_MAX_T, through
 * ex's split scratch (a few tokens have too few tiles to keep every multiprocessor streaming). */
/* Their tiers (the first, the grouping's tile rows). */
extern const moe_cuda_tiers moe_cuda_wg_tiers_16, moe_cuda_wg_tiers_32_16, moe_cuda_wg_tiers_128_32_16;
moe_cuda_expert_gemm1_fn moe_cuda_expert_wg1_16, moe_cuda_expert_wg1_32_16,
    moe_cuda_expert_wg1_128_32_16, moe_cuda_expert_wg1_16_split;
moe_cuda_expert_gemm2_fn moe_cuda_expert_wg2_16, moe_cuda_expert_wg2_32_16,
    moe_cuda_expert_wg2_128_32_16, moe_cuda_expert_wg2_16_split;
#define MOE_CUDA_WG_SPLIT 2
#define MOE_CUDA_WG_SPLIT_MAX_T 4
/* The split scratch for T tokens, one region for each GEMM: fp32 partial sums and int32 arrival
 * counts (zeroed once). */
size_t moe_cuda_wgmma_split_floats(int T, int K, int E, int D, int IL);
size_t moe_cuda_wgmma_split_counters(int T, int K, int E, int D, int IL);
/* Allocates ex's w13_wg .. w2_wg_scale and fills them from its MXFP4 codes and scales on the
 * stream (the caller frees them with cudaFree). */
moe_status moe_cuda_wgmma_pack(cudaStream_t stream, moe_cuda_experts *ex, moe_error *err);

/* ---------------------------------------------------------------- elementwise (cuda_elementwise.cu) */

/* Sink SwiGLU: gu [T, S*2*SIL] bf16 (interleaved g/u per sink), weights [T, K+S]
 * -> h [T, S*SIL] bf16 = bf16(silu(g) * u * gamma_s). */
moe_status moe_cuda_sink_swiglu(cudaStream_t stream, int T, int K, int S, int SIL,
                                const uint16_t *gu, const float *weights, uint16_t *h,
                                moe_error *err);

/* out [T, D] = bf16(sum_k w_k * y[t*K+k] (local slots, k in order) + sink_y[t]);
 * NaN rows for bad tokens. sink_y [T, D] or NULL (no sinks). Exactly one of out (fp32) and
 * out16 (the same values as bf16 patterns: half the bytes for the host call's download) is
 * given. */
moe_status moe_cuda_combine(cudaStream_t stream, int T, int D, int K, int S, int E,
                            int expert_first, const int32_t *ids, const float *weights,
                            const int32_t *bad, const float *y, const float *sink_y, float *out,
                            uint16_t *out16, moe_error *err);

/* Stage rows [rows, cols] -> dst fp32: src is bf16 (src16) or fp32 (src32). With slots_K > 0
 * row r is assignment r (token r / slots_K): rows of bad tokens or non-local slots become 0.
 * With slots_K == 0 row r is token r: rows of bad tokens become NaN. */
moe_status moe_cuda_stage_rows(cudaStream_t stream, int rows, int cols, int slots_K, int E,
                               int expert_first, const int32_t *ids, const int32_t *bad,
                               const uint16_t *src16, const float *src32, float *dst,
                               moe_error *err);

/* ---------------------------------------------------------------- dense GEMMs (cuda_lt.cu) */

/* C [T, N] (row-major, fp32 or bf16) = X [T, Kd] bf16 times W [N, Kd]^T bf16, fp32 accumulate,
 * through cuBLASLt. A plan holds the descriptors and the algorithm for one T (chosen for algo_T
 * rows; 0: for T); it is rebuilt when either changes. */
typedef struct {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t w, x, c;
    cublasLtMatmulAlgo_t algo;
    int T, N, Kd;
    int algo_T; /* the row count the algorithm was chosen for (T unless the plan says) */
    cudaDataType_t out_type;
    int sm_target; /* multiprocessors the algorithm is chosen for; 0: all */
    bool ready;
} moe_cuda_lt_plan;

moe_status moe_cuda_lt_plan_for(cublasLtHandle_t lt, moe_cuda_lt_plan *plan, int N, int Kd, int T,
                                int algo_T, cudaDataType_t out_type, int sm_target,
                                size_t workspace_bytes, moe_error *err);
/* w [N, Kd], x [T, Kd], c [T, N]. */
moe_status moe_cuda_lt_run(cublasLtHandle_t lt, const moe_cuda_lt_plan *plan, const uint16_t *w,
                           const uint16_t *x, void *c, void *workspace, size_t workspace_bytes,
                           cudaStream_t stream, moe_error *err);
void moe_cuda_lt_plan_free(moe_cuda_lt_plan *plan);

#endif /* INKLING_CUDA_INTERNAL_H */
