/*
 * cuda_backend.cu: the CUDA path as a moe_backend (serving contract only,
 * contract.md [precision.serving]).
 *
 * Rules:
 *   - create() uploads the shard once; the weights stay resident in their stored format
 *     (MXFP4 stays MXFP4: no dequantized copy); the sinks' w2 is laid out once as
 *     [D, S*sink_I_local] so one GEMM sums over the sinks;
 *   - forward() allocates nothing on the device except when T exceeds the largest T seen:
 *     then the per-token workspace is freed and allocated again for the new T (cudaFree and
 *     cudaMalloc synchronise the device; later calls with T at most that size allocate nothing);
 *     a new workspace is filled with 0xFF bytes (NaN), so reading an unwritten element shows;
 *   - the host waits only at the end of forward(), for the copies back (stage copies on the
 *     routed stream, the output on the download stream; pageable copies complete before
 *     returning);
 *   - x and out cross the bus through pinned staging buffers (grown with T like the workspace,
 *     freed in destroy), with up to moe_copy_threads() threads copying (common/host_copy.h):
 *     one thread's copies were three quarters of the host call at T = 4096. Both go in at most
 *     STAGING_CHUNKS pieces, so that the host's copy of one piece overlaps the DMA of the next;
 *     out comes down as bf16 patterns (every output value is a bf16 value, contract.md
 *     [precision.serving]: half the bytes of fp32), each piece widened to fp32 into the
 *     caller's out. The combine runs in out's pieces, each piece's DMA (on a stream of its
 *     own) beside the next pieces' combine; from 2 * SINK_PIECE_MIN_TOKENS tokens the sinks'
 *     GEMM1 runs in x's pieces, each as soon as its piece has landed, under the rest of the
 *     upload. Where x and out each cross in one piece (host_call_graphed, T <= 128 at
 *     D = 4096) the upload, the layer and the download are one kept graph, as below;
 *   - moe_cuda_forward_device (cuda_layer.h) runs the same chain on x and out already on the
 *     device: no staging, no upload or download, ordered after and before the caller's stream
 *     by events (or waited for when the caller gives no stream). It launches the chain as one
 *     CUDA graph, captured from the two streams for its (T, x, out) and kept until a call with
 *     another key or a larger workspace: a serving engine calls with the same buffers, and one
 *     graph launch replaces a dozen launches whose host cost showed beside the 100 us layer
 *     at T = 1. The graph holds the same kernels in the same order, so its output is bitwise
 *     the stream-launched one (checked by the lab at every T);
 *   - every device operation of a layer is queued on one of its two streams, never on the legacy
 *     default stream: the streams are non-blocking, so they do not wait for work queued there.
 *     (The weight uploads and the workspace poison once went through cudaMemcpy / cudaMemset on
 *     the legacy stream; a pageable cudaMemcpy may return before its DMA lands and cudaMemset
 *     returns at once, so the gate could read weights not yet written and the 0xFF poison could
 *     land on x or the logits after the routed stream wrote them: NaN now and then, depending on
 *     what the device was still doing. docs/cuda-path.md, "Streams and the legacy stream".)
 *     create() returns only once its uploads have landed;
 *   - routed chain on one stream: upload x, gate logits, routing, grouping, GEMM1+SwiGLU,
 *     GEMM2, combine; sink chain on a second stream, started after the upload and joined
 *     before the combine, so the sinks overlap the routed experts;
 *   - a slot whose expert is not held by this shard contributes nothing; a token whose row
 *     holds NaN/inf gets NaN logits, weights and output, ids 0..K-1 (as the reference writes);
 *   - every CUDA / cuBLASLt failure is MOE_ERR_DEVICE naming the call.
 */
#include "cuda_internal.h"
#include "cuda_layer.h"
#include "cuda_profile.h"

#include "../../common/host_copy.h"
#include "../../common/layer_rules.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LT_WORKSPACE_BYTES ((size_t)32 << 20)
#define L2_FLUSH_BYTES ((size_t)256 << 20)
#define STAGING_CHUNKS 8                   /* pieces of an x upload or out download at most (16 and
                                              32 were slower at T = 4096: device-notes) */
#define STAGING_MIN_CHUNK ((size_t)1 << 20) /* smaller pieces cost more in calls than they save */
#ifndef SINK_PIECE_MIN_TOKENS
#define SINK_PIECE_MIN_TOKENS 512 /* tokens of a piece of the sinks' GEMM1 at least (sink_piece_tokens) */
#endif
#define LT_ALIGN 256 /* cuBLASLt picks its algorithm for operands aligned this far (its default) */
#define GRAPH_CACHE 8 /* captured layers the device entry keeps, one per (T, x, out): a caller
                         that cycles through a few buffers launches a kept graph (4-5 us of host
                         time) instead of capturing again (about 20 us; docs/device-notes.md) */

namespace {

enum { EV_UPLOAD, EV_GATE, EV_ROUTE, EV_GROUP, EV_GEMM1, EV_GEMM2, EV_COMBINE, EV_DOWNLOAD,
       EV_BEGIN, EV_SINK_START, EV_SINK_GEMM1, EV_SINK_SWIGLU, EV_SINK_GEMM2, EV_COUNT };

/* One captured layer, valid for T tokens on x and out: the device entry's (x, out on the
 * device) or the host call's (host_call: x and out the pinned staging, the upload and the
 * download inside the graph). */
struct layer_graph {
    cudaGraphExec_t exec; /* NULL: an empty slot */
    int T;
    const void *x, *out;
    bool host_call;
    unsigned long last_use;
};

struct cuda_state {
    const moe_shard *shard;
    int device;
    int D, R, K, S, G, IL, SIL, E, expert_first;
    moe_cuda_variant variant; /* which expert GEMM kernels (cuda_internal.h) */
    cudaStream_t routed, sinks;
    cudaStream_t download; /* the host call's DMAs of out, beside the combine's later pieces */
    cudaEvent_t x_ready, route_ready, sinks_done;
    cudaEvent_t caller_ready, layer_done;     /* the device entry's joins with the caller's stream */
    cudaEvent_t out_combined[STAGING_CHUNKS]; /* each piece of out formed (the host call's) */
    cudaEvent_t out_landed[STAGING_CHUNKS];   /* each piece of out in the staging */
    cudaEvent_t x_landed[STAGING_CHUNKS];     /* each piece of x on the device (sinks' pieces) */
    int copy_threads; /* the host's copies into and out of the staging (common/host_copy.h) */
    int priority_low, priority_high; /* the sink and routed streams' priorities */
    int sm_count;                    /* the device's multiprocessors */
    cudaEvent_t timing[EV_COUNT];
    cublasLtHandle_t lt;
    void *lt_ws_routed, *lt_ws_sinks;
    moe_cuda_lt_plan gate_plan, sink1_plan, sink2_plan;
    moe_cuda_lt_plan sink1_tail_plan;  /* the sinks' GEMM1 on a last, shorter piece */
    moe_cuda_lt_plan sink1_whole_plan; /* the sinks' GEMM1 whole where the host call has pieces */
    /* resident weights */
    uint16_t *gate_w;   /* [G, D], then zero rows up to moe_cuda_gate_rows(G) */
    float *gate_bias;   /* [R] or NULL */
    moe_cuda_experts experts;
    uint16_t *sink_w13; /* [S*2*SIL, D] */
    uint16_t *sink_w2;  /* [D, S*SIL] */
    /* per-token workspace, sized for T_cap tokens */
    int T_cap;
    void *ws;
    uint16_t *x;        /* [T, D] */
    float *logits;      /* [T, G], rows moe_cuda_gate_rows(G) apart */
    int32_t *ids;       /* [T, K] */
    float *weights;     /* [T, K+S] */
    int32_t *bad;       /* [T] */
    int32_t *perm;      /* [E, T] */
    int32_t *group_scratch; /* [moe_cuda_group_scratch(T, K, E)] */
    moe_cuda_tile *tiles;
    uint16_t *h;        /* [T*K, IL] */
    float *y;           /* [T*K, D] */
    uint16_t *sink_gu;  /* [T, S*2*SIL] */
    uint16_t *sink_h;   /* [T, S*SIL] */
    float *sink_y;      /* [T, D] */
    float *out;         /* [T, D] */
    int32_t *counts;    /* [E] */
    int32_t *n_tiles;   /* [moe_cuda_tile_counts(E)]: the table's tiles, the tiers' lists */
    unsigned *front_ticket; /* [1] the small-T front end's, zero between launches */
    /* the device entry's and the small host call's captured layers (capture_layer), the least
     * recently used replaced */
    layer_graph graphs[GRAPH_CACHE];
    unsigned long graph_clock; /* counts the graphs' uses, for last_use */
    float *stage;       /* stage conversions, stage_cap floats */
    size_t stage_cap;
    void *flush;        /* L2_FLUSH_BYTES, allocated on first use */
    bool strict_nonfinite; /* the layer refuses NaN/inf rows: checked on host x only */
    /* pinned staging for staging_T tokens (one allocation) */
    int staging_T;
    void *staging;
    uint16_t *x_host;   /* [T, D] */
    uint16_t *out_host; /* [T, D] bf16 patterns of out: every output value is a bf16 value
                           (contract.md [precision.serving]), so half the bytes cross the bus */
};

bool device_is_sm90(int device) {
    cudaDeviceProp prop;
    return cudaGetDeviceProperties(&prop, device) == cudaSuccess && prop.major == 9 && prop.minor == 0;
}

bool cuda_available(char *why, size_t why_len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(why, why_len, "no CUDA device: cudaGetDeviceCount failed: %s", cudaGetErrorString(e));
        cudaGetLastError(); /* clear the sticky-free error so later calls start clean */
        return false;
    }
    if (n == 0) {
        snprintf(why, why_len, "no CUDA device: cudaGetDeviceCount returned 0");
        return false;
    }
    for (int d = 0; d < n; d++)
        if (device_is_sm90(d)) return true;
    snprintf(why, why_len, "no compute capability 9.0 device (the kernels are built for sm_90a)");
    return false;
}

bool supports_variant(moe_cuda_variant variant, const moe_config *cfg, const moe_split *split,
                      const moe_options *opt, char *why, size_t why_len) {
    (void)split;
    if (opt->precision != MOE_PRECISION_SERVING) {
        snprintf(why, why_len, "the CUDA path implements the serving contract only (bf16 g, u, h); "
                               "use --precision serving");
        return false;
    }
    if ((size_t)cfg->R * 4 + (size_t)cfg->K * 12 + (size_t)cfg->S * 8 + 8 > 200 * 1024) {
        snprintf(why, why_len, "n_routed_experts %d, num_experts_per_tok %d, n_shared_experts %d: "
                               "the routing kernel keeps R scores and K + S weight terms in shared "
                               "memory, at most 200 kB", cfg->R, cfg->K, cfg->S);
        return false;
    }
    if ((variant == MOE_CUDA_EXPERTS_GEMV || variant == MOE_CUDA_EXPERTS_MMA ||
         variant == MOE_CUDA_EXPERTS_WGMMA) &&
        cfg->routed_format != MOE_ROUTED_MXFP4) {
        snprintf(why, why_len, "the %s expert kernels read MXFP4 routed experts only; this "
                               "layer's are %s (use cuda or cuda-wmma)",
                 variant == MOE_CUDA_EXPERTS_GEMV ? "GEMV"
                 : variant == MOE_CUDA_EXPERTS_MMA ? "mma" : "wgmma",
                 moe_routed_format_get(cfg->routed_format)->name);
        return false;
    }
    return true;
}

bool cuda_supports(const moe_config *cfg, const moe_split *split, const moe_options *opt,
                   char *why, size_t why_len) {
    return supports_variant(MOE_CUDA_EXPERTS_AUTO, cfg, split, opt, why, why_len);
}
bool cuda_wmma_supports(const moe_config *cfg, const moe_split *split, const moe_options *opt,
                        char *why, size_t why_len) {
    return supports_variant(MOE_CUDA_EXPERTS_WMMA, cfg, split, opt, why, why_len);
}
bool cuda_gemv_supports(const moe_config *cfg, const moe_split *split, const moe_options *opt,
                        char *why, size_t why_len) {
    return supports_variant(MOE_CUDA_EXPERTS_GEMV, cfg, split, opt, why, why_len);
}
bool cuda_mma_supports(const moe_config *cfg, const moe_split *split, const moe_options *opt,
                       char *why, size_t why_len) {
    return supports_variant(MOE_CUDA_EXPERTS_MMA, cfg, split, opt, why, why_len);
}
bool cuda_wgmma_supports(const moe_config *cfg, const moe_split *split, const moe_options *opt,
                         char *why, size_t why_len) {
    return supports_variant(MOE_CUDA_EXPERTS_WGMMA, cfg, split, opt, why, why_len);
}

void drop_graph(layer_graph *g) {
    if (g->exec) cudaGraphExecDestroy(g->exec);
    *g = layer_graph();
}

/* The captured layers are dropped with the buffers they were captured on. */
void free_workspace(cuda_state *s) {
    for (int i = 0; i < GRAPH_CACHE; i++) drop_graph(&s->graphs[i]);
    cudaFree(s->ws);
    s->ws = NULL;
    s->experts.split_partial = NULL, s->experts.split_counters = NULL;
    s->T_cap = 0;
}

void cuda_destroy(void *p) {
    cuda_state *s = (cuda_state *)p;
    if (!s) return;
    cudaSetDevice(s->device);
    if (s->routed) cudaStreamSynchronize(s->routed);
    if (s->sinks) cudaStreamSynchronize(s->sinks);
    if (s->download) cudaStreamSynchronize(s->download);
    free_workspace(s);
    cudaFreeHost(s->staging);
    cudaFree(s->stage);
    cudaFree(s->flush);
    cudaFree(s->gate_w);
    cudaFree(s->gate_bias);
    cudaFree((void *)s->experts.w13_mx);
    cudaFree((void *)s->experts.w13_scale);
    cudaFree((void *)s->experts.w2_mx);
    cudaFree((void *)s->experts.w2_scale);
    cudaFree((void *)s->experts.w13_scale2);
    cudaFree((void *)s->experts.w2_scale2);
    cudaFree((void *)s->experts.w13_bf16);
    cudaFree((void *)s->experts.w2_bf16);
    cudaFree(s->experts.w13_wg);
    cudaFree(s->experts.w13_wg_scale);
    cudaFree(s->experts.w2_wg);
    cudaFree(s->experts.w2_wg_scale);
    cudaFree(s->sink_w13);
    cudaFree(s->sink_w2);
    cudaFree(s->lt_ws_routed);
    cudaFree(s->lt_ws_sinks);
    moe_cuda_lt_plan_free(&s->gate_plan);
    moe_cuda_lt_plan_free(&s->sink1_plan);
    moe_cuda_lt_plan_free(&s->sink1_tail_plan);
    moe_cuda_lt_plan_free(&s->sink1_whole_plan);
    moe_cuda_lt_plan_free(&s->sink2_plan);
    if (s->lt) cublasLtDestroy(s->lt);
    if (s->x_ready) cudaEventDestroy(s->x_ready);
    if (s->route_ready) cudaEventDestroy(s->route_ready);
    if (s->sinks_done) cudaEventDestroy(s->sinks_done);
    if (s->caller_ready) cudaEventDestroy(s->caller_ready);
    if (s->layer_done) cudaEventDestroy(s->layer_done);
    for (int i = 0; i < STAGING_CHUNKS; i++) {
        if (s->out_combined[i]) cudaEventDestroy(s->out_combined[i]);
        if (s->out_landed[i]) cudaEventDestroy(s->out_landed[i]);
        if (s->x_landed[i]) cudaEventDestroy(s->x_landed[i]);
    }
    for (int i = 0; i < EV_COUNT; i++)
        if (s->timing[i]) cudaEventDestroy(s->timing[i]);
    if (s->routed) cudaStreamDestroy(s->routed);
    if (s->sinks) cudaStreamDestroy(s->sinks);
    if (s->download) cudaStreamDestroy(s->download);
    free(s);
}

/* Queues a copy of n bytes of host memory to a new device buffer of `size` >= n bytes, zero past
 * n, on stream (NULL host or n = 0: nothing). The caller synchronises the stream before it frees
 * or reuses src. */
moe_status upload_padded(void **dst, const void *src, size_t n, size_t size, const char *name,
                         cudaStream_t stream, moe_error *err) {
    *dst = NULL;
    if (!src || n == 0) return MOE_OK;
    cudaError_t e = cudaMalloc(dst, size);
    if (e == cudaSuccess) e = cudaMemcpyAsync(*dst, src, n, cudaMemcpyHostToDevice, stream);
    if (e == cudaSuccess && size > n) e = cudaMemsetAsync((char *)*dst + n, 0, size - n, stream);
    if (e != cudaSuccess)
        return moe_fail(err, MOE_ERR_DEVICE, "cuda: uploading %s (%zu bytes) failed: %s", name, n,
                        cudaGetErrorString(e));
    return MOE_OK;
}

/* The same, no padding. */
moe_status upload(void **dst, const void *src, size_t n, const char *name, cudaStream_t stream,
                  moe_error *err) {
    return upload_padded(dst, src, n, n, name, stream, err);
}

/* Waits for the uploads queued on the routed stream: create() returns with the weights on the
 * device, and the host buffers they came from may be freed. */
moe_status landed(cuda_state *s, moe_error *err) {
    CUDA_TRY(cudaStreamSynchronize(s->routed));
    return MOE_OK;
}

moe_status upload_weights(cuda_state *s, const moe_shard *sh, moe_error *err) {
    const size_t D = (size_t)s->D, IL = (size_t)s->IL, E = (size_t)s->E, S = (size_t)s->S;
    const size_t SIL = (size_t)s->SIL;
    cudaStream_t up = s->routed;
    moe_status st = upload_padded((void **)&s->gate_w, sh->gate_w, (size_t)s->G * D * 2,
                                  (size_t)moe_cuda_gate_rows(s->G) * D * 2, "gate_w", up, err);
    if (!st) st = upload((void **)&s->gate_bias, sh->gate_bias, (size_t)s->R * 4, "gate_bias", up, err);
    moe_cuda_experts *ex = &s->experts;
    ex->E = s->E, ex->D = s->D, ex->IL = s->IL;
    ex->mxfp4 = sh->cfg.routed_format == MOE_ROUTED_MXFP4;
    ex->nvfp4 = sh->cfg.routed_format == MOE_ROUTED_NVFP4;
    const size_t B = (size_t)moe_routed_format_get(sh->cfg.routed_format)->block;
    if (B) {
        if (!st) st = upload((void **)&ex->w13_mx, sh->w13_mx, E * 2 * IL * D / 2, "w13 codes", up, err);
        if (!st) st = upload((void **)&ex->w13_scale, sh->w13_scale, E * 2 * IL * D / B, "w13 scales", up, err);
        if (!st) st = upload((void **)&ex->w2_mx, sh->w2_mx, E * D * IL / 2, "w2 codes", up, err);
        if (!st) st = upload((void **)&ex->w2_scale, sh->w2_scale, E * D * IL / B, "w2 scales", up, err);
    }
    if (ex->nvfp4) {
        if (!st) st = upload((void **)&ex->w13_scale2, sh->w13_scale2, E * 4, "w13 scale2", up, err);
        if (!st) st = upload((void **)&ex->w2_scale2, sh->w2_scale2, E * 4, "w2 scale2", up, err);
    }
    if (!B) {
        if (!st) st = upload((void **)&ex->w13_bf16, sh->w13_bf16, E * 2 * IL * D * 2, "w13 bf16", up, err);
        if (!st) st = upload((void **)&ex->w2_bf16, sh->w2_bf16, E * D * IL * 2, "w2 bf16", up, err);
    }
    if (!st) st = upload((void **)&s->sink_w13, sh->sink_w13, S * 2 * SIL * D * 2, "sink_w13", up, err);
    if (st) return st;
    /* the wgmma kernels read their own layout of the MXFP4 weights */
    if (!st && ex->mxfp4 &&
        (s->variant == MOE_CUDA_EXPERTS_AUTO || s->variant == MOE_CUDA_EXPERTS_WGMMA))
        st = moe_cuda_wgmma_pack(up, ex, err);
    if (st) return st;
    if (S == 0 || SIL == 0) return landed(s, err);
    /* sink_w2 [S, D, SIL] -> [D, S*SIL]: column s*SIL + j of row d is sink s's W2[d, j]. */
    uint16_t *cat = (uint16_t *)malloc(S * D * SIL * 2);
    if (!cat) return moe_fail(err, MOE_ERR_NOMEM, "cuda: out of memory laying out sink_w2");
    for (size_t sk = 0; sk < S; sk++)
        for (size_t d = 0; d < D; d++)
            memcpy(cat + d * S * SIL + sk * SIL, sh->sink_w2 + (sk * D + d) * SIL, SIL * 2);
    st = upload((void **)&s->sink_w2, cat, S * D * SIL * 2, "sink_w2", up, err);
    if (!st) st = landed(s, err); /* before cat is freed */
    free(cat);
    return st;
}

moe_status create_variant(moe_cuda_variant variant, const moe_shard *sh, const moe_options *opt,
                          void **out, moe_error *err) {
    *out = NULL;
    if (!device_is_sm90(opt->device))
        return moe_fail(err, MOE_ERR_UNAVAILABLE,
                        "cuda: device %d is missing or not compute capability 9.0 (sm_90a build)",
                        opt->device);
    cuda_state *s = (cuda_state *)calloc(1, sizeof *s);
    if (!s) return moe_fail(err, MOE_ERR_NOMEM, "cuda: out of memory for the state");
    const moe_config *c = &sh->cfg;
    s->shard = sh;
    s->device = opt->device;
    s->D = c->D, s->R = c->R, s->K = c->K, s->S = c->S, s->G = c->R + c->S;
    s->IL = sh->I_local, s->SIL = sh->sink_I_local;
    s->E = sh->n_local_experts, s->expert_first = sh->expert_first;
    s->variant = variant;
    s->strict_nonfinite = opt->strict_nonfinite;
    moe_status st = MOE_OK;
#define CREATE_TRY(call)                                                                          \
    do {                                                                                          \
        cudaError_t create_e = (call);                                                            \
        if (create_e != cudaSuccess) {                                                            \
            st = moe_fail(err, MOE_ERR_DEVICE, "cuda: %s failed: %s", #call,                      \
                          cudaGetErrorString(create_e));                                          \
            goto fail;                                                                            \
        }                                                                                         \
    } while (0)
    CREATE_TRY(cudaSetDevice(opt->device));
    CREATE_TRY(cudaDeviceGetAttribute(&s->sm_count, cudaDevAttrMultiProcessorCount, opt->device));
    /* the routed chain is the critical path: its kernels go first when both streams have
     * blocks waiting (measured: T = 64 layer 1658 -> 1508 us, no change at T = 1 and 8) */
    CREATE_TRY(cudaDeviceGetStreamPriorityRange(&s->priority_low, &s->priority_high));
    CREATE_TRY(cudaStreamCreateWithPriority(&s->routed, cudaStreamNonBlocking, s->priority_high));
    CREATE_TRY(cudaStreamCreateWithPriority(&s->sinks, cudaStreamNonBlocking, s->priority_low));
    CREATE_TRY(cudaStreamCreateWithFlags(&s->download, cudaStreamNonBlocking));
    CREATE_TRY(cudaEventCreateWithFlags(&s->x_ready, cudaEventDisableTiming));
    CREATE_TRY(cudaEventCreateWithFlags(&s->route_ready, cudaEventDisableTiming));
    CREATE_TRY(cudaEventCreateWithFlags(&s->sinks_done, cudaEventDisableTiming));
    CREATE_TRY(cudaEventCreateWithFlags(&s->caller_ready, cudaEventDisableTiming));
    CREATE_TRY(cudaEventCreateWithFlags(&s->layer_done, cudaEventDisableTiming));
    for (int i = 0; i < STAGING_CHUNKS; i++) {
        CREATE_TRY(cudaEventCreateWithFlags(&s->out_combined[i], cudaEventDisableTiming));
        CREATE_TRY(cudaEventCreateWithFlags(&s->out_landed[i], cudaEventDisableTiming));
        CREATE_TRY(cudaEventCreateWithFlags(&s->x_landed[i], cudaEventDisableTiming));
    }
    for (int i = 0; i < EV_COUNT; i++) CREATE_TRY(cudaEventCreate(&s->timing[i]));
    s->copy_threads = moe_copy_threads();
    CREATE_TRY(cudaMalloc(&s->lt_ws_routed, LT_WORKSPACE_BYTES));
    CREATE_TRY(cudaMalloc(&s->lt_ws_sinks, LT_WORKSPACE_BYTES));
    CREATE_TRY(cudaMalloc((void **)&s->counts, (size_t)(s->E > 0 ? s->E : 1) * sizeof(int32_t)));
    CREATE_TRY(cudaMalloc((void **)&s->n_tiles, moe_cuda_tile_counts(s->E) * sizeof(int32_t)));
#undef CREATE_TRY
    {
        cublasStatus_t ls = cublasLtCreate(&s->lt);
        if (ls != CUBLAS_STATUS_SUCCESS) {
            st = moe_fail(err, MOE_ERR_DEVICE, "cublasLt: cublasLtCreate failed: status %d", (int)ls);
            goto fail;
        }
    }
    st = upload_weights(s, sh, err);
    if (st) goto fail;
    *out = s;
    return MOE_OK;
fail:
    cuda_destroy(s);
    return st;
}

moe_status cuda_create(const moe_shard *sh, const moe_options *opt, void **out, moe_error *err) {
    return create_variant(MOE_CUDA_EXPERTS_AUTO, sh, opt, out, err);
}
moe_status cuda_wmma_create(const moe_shard *sh, const moe_options *opt, void **out,
                            moe_error *err) {
    return create_variant(MOE_CUDA_EXPERTS_WMMA, sh, opt, out, err);
}
moe_status cuda_gemv_create(const moe_shard *sh, const moe_options *opt, void **out,
                            moe_error *err) {
    return create_variant(MOE_CUDA_EXPERTS_GEMV, sh, opt, out, err);
}
moe_status cuda_mma_create(const moe_shard *sh, const moe_options *opt, void **out,
                           moe_error *err) {
    return create_variant(MOE_CUDA_EXPERTS_MMA, sh, opt, out, err);
}
moe_status cuda_wgmma_create(const moe_shard *sh, const moe_options *opt, void **out,
                             moe_error *err) {
    return create_variant(MOE_CUDA_EXPERTS_WGMMA, sh, opt, out, err);
}

size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

/* Carves the per-token buffers for T tokens out of one allocation. */
moe_status ensure_workspace(cuda_state *s, int T, moe_error *err) {
    if (T <= s->T_cap) return MOE_OK;
    CUDA_TRY(cudaStreamSynchronize(s->routed));
    CUDA_TRY(cudaStreamSynchronize(s->sinks));
    free_workspace(s);
    const size_t t = (size_t)T, D = (size_t)s->D, K = (size_t)s->K, S = (size_t)s->S;
    /* the split wgmma kernels' scratch, for the T they take (MXFP4 packed for wgmma only) */
    const int split_T = T < MOE_CUDA_WG_SPLIT_MAX_T ? T : MOE_CUDA_WG_SPLIT_MAX_T;
    const bool split = s->experts.w13_wg != NULL;
    const size_t split_floats =
        split ? moe_cuda_wgmma_split_floats(split_T, s->K, s->E, s->D, s->IL) : 0;
    const size_t split_counters =
        split ? moe_cuda_wgmma_split_counters(split_T, s->K, s->E, s->D, s->IL) : 0;
    const size_t sizes[] = {
        t * D * 2,                                                  /* x */
        t * (size_t)moe_cuda_gate_rows(s->G) * 4,                   /* logits */
        t * K * 4,                                                  /* ids */
        t * (K + S) * 4,                                            /* weights */
        t * 4,                                                      /* bad */
        (size_t)s->E * t * 4,                                       /* perm */
        moe_cuda_group_scratch(T, s->K, s->E) * 4,                  /* group_scratch */
        (size_t)moe_cuda_tile_bound(T, s->K, s->E, MOE_CUDA_GEMV_M) * sizeof(moe_cuda_tile), /* tiles */
        t * K * (size_t)s->IL * 2,                                  /* h */
        t * K * D * 4,                                              /* y */
        t * S * 2 * (size_t)s->SIL * 2,                             /* sink_gu */
        t * S * (size_t)s->SIL * 2,                                 /* sink_h */
        t * D * 4,                                                  /* sink_y */
        t * D * 4,                                                  /* out */
        split_floats * 4,                                           /* split_partial */
        split_counters * 4,                                         /* split_counters */
        4,                                                          /* front_ticket */
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) total += align_up(sizes[i]);
    cudaError_t e = cudaMalloc(&s->ws, total);
    if (e != cudaSuccess)
        return moe_fail(err, MOE_ERR_DEVICE, "cuda: cudaMalloc of the workspace for T = %d "
                        "(%zu bytes) failed: %s", T, total, cudaGetErrorString(e));
    /* Poisoned once per allocation: 0xFF bytes are NaN in bf16 and fp32 and -1 in int32, so a
     * stage that reads an element nothing wrote gives NaN (or a failed check), never plausible
     * stale data. The cost is one memset when the workspace grows. */
    CUDA_TRY(cudaMemsetAsync(s->ws, 0xFF, total, s->routed)); /* the sinks wait on x_ready, after it */
    char *p = (char *)s->ws;
    void **slots[] = {(void **)&s->x,      (void **)&s->logits, (void **)&s->ids,
                      (void **)&s->weights, (void **)&s->bad,   (void **)&s->perm,
                      (void **)&s->group_scratch,
                      (void **)&s->tiles,  (void **)&s->h,      (void **)&s->y,
                      (void **)&s->sink_gu, (void **)&s->sink_h, (void **)&s->sink_y,
                      (void **)&s->out, (void **)&s->experts.split_partial,
                      (void **)&s->experts.split_counters, (void **)&s->front_ticket};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *slots[i] = p;
        p += align_up(sizes[i]);
    }
    /* the arrival counts start at zero; each split launch leaves them so */
    CUDA_TRY(cudaMemsetAsync(s->experts.split_counters, 0, split_counters * 4, s->routed));
    CUDA_TRY(cudaMemsetAsync(s->front_ticket, 0, 4, s->routed));
    s->T_cap = T;
    return MOE_OK;
}

moe_status ensure_stage_buffer(cuda_state *s, size_t floats, moe_error *err) {
    if (floats <= s->stage_cap) return MOE_OK;
    CUDA_TRY(cudaStreamSynchronize(s->routed));
    cudaFree(s->stage);
    s->stage = NULL;
    s->stage_cap = 0;
    CUDA_TRY(cudaMalloc((void **)&s->stage, floats * sizeof(float)));
    s->stage_cap = floats;
    return MOE_OK;
}

/* Records timing event i on stream when timing. */
moe_status mark(cuda_state *s, bool timed, int i, cudaStream_t stream, moe_error *err) {
    if (timed) CUDA_TRY(cudaEventRecord(s->timing[i], stream));
    return MOE_OK;
}

#define TRY(expr)                                                                                 \
    do {                                                                                          \
        moe_status try_st = (expr);                                                               \
        if (try_st) return try_st;                                                                \
    } while (0)

/* The multiprocessors the sinks' GEMMs are planned for at T tokens (0: all). At T <= 8 the
 * front end and the routed GEMMs run beside the sink GEMM1; planned for about 60 % of the
 * multiprocessors (80 of an H200's 132), it leaves them room: the serving graph 82.2-82.8 us at
 * T = 1 and 234.7-235.6 at T = 8 against 88.0 and 241.2-242.0 planned for all; 33, 50, 66 and
 * 100 gained less, and at T = 64 nothing (docs/device-notes.md). With today's kernels 64, 72, 88
 * and 96 were not told apart from 80 at T = 1 on an H100 (five processes each, forty-fifth run). */
#ifndef SINK_SMS_OF_132 /* (an experiment's knob: NVFLAGS='-O3 -g -lineinfo -DSINK_SMS_OF_132=88') */
#define SINK_SMS_OF_132 80
#endif
int sink_sms(const cuda_state *s, int T) {
    return T <= MOE_CUDA_FRONT_SMALL_MAX_T ? s->sm_count * SINK_SMS_OF_132 / 132 : 0;
}
/* Above the small front end and up to FRONT_SMS_MAX_T tokens, the sinks' GEMM1 is planned for
 * 100 of 132 multiprocessors and the gate for 32 (scaled to the device's count); above that
 * T, and for either knob at 0, for every multiprocessor. Measured (docs/perf-cuda.md, fiftieth
 * run, H100, serving graph): uniform T = 256 1.5 % and T = 512 1.8 % faster, skewed 1.7 and
 * 2.0 %, T = 64 within 1 %; at T = 4096 the same plans were 2.0 % slower (the routing, beside
 * the sinks' first GEMM1 piece, took twice as long and the routed GEMM1 began 51 us later),
 * hence the bound, below the T where the sinks' GEMM1 comes in pieces. Experiment's knobs:
 * NVFLAGS='-O3 -g -lineinfo -DSINK1_LARGE_SMS_OF_132=... -DGATE_SMS_OF_132=...
 * -DFRONT_SMS_MAX_T=...'. */
#ifndef SINK1_LARGE_SMS_OF_132
#define SINK1_LARGE_SMS_OF_132 100
#endif
#ifndef GATE_SMS_OF_132
#define GATE_SMS_OF_132 32
#endif
#ifndef FRONT_SMS_MAX_T
#define FRONT_SMS_MAX_T 1023
#endif
static int sink1_sms(const cuda_state *s, int T) {
    if (T <= MOE_CUDA_FRONT_SMALL_MAX_T) return sink_sms(s, T);
    return T <= FRONT_SMS_MAX_T ? s->sm_count * SINK1_LARGE_SMS_OF_132 / 132 : 0;
}
static int gate_sms(const cuda_state *s, int T) {
    return T <= FRONT_SMS_MAX_T ? s->sm_count * GATE_SMS_OF_132 / 132 : 0;
}

/* Whether the path `cuda` runs the sinks' GEMMs on the small kernels (cuda_sinks_small.cu),
 * GEMM1 beside the front end as its programmatic dependent on the routed stream: a grid queued
 * on the sinks stream waits for the front end's end (docs/perf-cuda.md, eighth run), this one
 * streams while the front end routes. Measured (ninth run), serving graph at T = 2 / 4 / 8:
 * 107.3-107.5 / 158.2-158.5 / 229.1-230.0 us against 108.2-109.2 / 162.8-163.8 / 234.8-236.7
 * with cuBLASLt's sinks after the front end. At T = 1 slower (84.9-86.1 against 81.9-83.0: the
 * front end, on the routed GEMMs' critical path, shares the bandwidth), hence
 * MOE_CUDA_SINKS_BESIDE_MIN_T. The forced variants keep cuBLASLt's sinks, so that the harness
 * checks both. */
bool sinks_beside_front(const cuda_state *s, int T, const uint16_t *x) {
    return s->variant == MOE_CUDA_EXPERTS_AUTO && T >= MOE_CUDA_SINKS_BESIDE_MIN_T && s->S > 0 &&
           s->SIL > 0 && moe_cuda_front_small_fits(T, s->D) &&
           moe_cuda_sinks_small_fits(T, s->D, s->sink_w13, x) &&
           moe_cuda_sinks_small_fits(T, s->S * s->SIL, s->sink_w2, s->sink_h);
}

/* Tokens per piece of the sinks' GEMM1 in the host call at T tokens; 0: one GEMM. Where there
 * are two pieces or more, the host call queues each piece as soon as its rows of x have landed,
 * so that the sinks' GEMM1 runs under the rest of the upload instead of after it
 * (docs/perf-cuda.md, forty-first run). A piece is a multiple of 128 tokens (its rows of x and
 * of g, u start 256-byte aligned, as cuBLASLt's algorithm assumes), STAGING_CHUNKS pieces at
 * most, and at least SINK_PIECE_MIN_TOKENS: pieces of 256 tokens made the serving graph at
 * T = 2048 3 % slower on an H100, half the multiprocessors idle beside each. */
int sink_piece_tokens(const cuda_state *s, int T) {
    if (s->S == 0 || s->SIL == 0) return 0;
    const int per_chunk = ((T + STAGING_CHUNKS - 1) / STAGING_CHUNKS + 127) / 128 * 128;
    const int P = per_chunk > SINK_PIECE_MIN_TOKENS ? per_chunk : SINK_PIECE_MIN_TOKENS;
    return T >= 2 * P ? P : 0;
}

int sink_pieces(const cuda_state *s, int T) {
    const int P = sink_piece_tokens(s, T);
    return P ? (T + P - 1) / P : 1;
}

/* Whether the device entry runs the sinks' GEMM1 as one GEMM where the host call has pieces.
 * Then every piece runs the algorithm cuBLASLt chose for the whole T: its rows do not depend
 * on the rows beside them (the lab's "device call equal"), so both calls give the same bits.
 * Whole against main's pieces (docs/perf-cuda.md, sixtieth run, an H100, serving graph, five
 * processes each): uniform T = 2048 / 3072 / 4096 0.6 / 0.4 / 0.3 % faster, skewed 2048 0.5 %;
 * T = 1024 (two pieces) 0.5-1.0 % and skewed 1536 (three) 0.4 % slower, hence four pieces. */
#define SINK_WHOLE_MIN_PIECES 4
static bool sink_gemm1_whole(const cuda_state *s, int T) {
    return sink_pieces(s, T) >= SINK_WHOLE_MIN_PIECES;
}

/* Piece i of the sinks' GEMM1 at T tokens on the sinks stream: g, u [n, S*2*SIL] of tokens
 * [i*P, i*P + n) of x [T, D], P = sink_piece_tokens; the whole of x where i = -1 or P = 0. */
moe_status sink_gemm1_piece(cuda_state *s, int T, int i, const uint16_t *x, moe_error *err) {
    const int P = sink_piece_tokens(s, T), N = s->S * 2 * s->SIL;
    const bool whole = i < 0 || P == 0;
    const int t0 = whole ? 0 : i * P, n = whole ? T : (T - t0 < P ? T - t0 : P);
    const int algo_T = sink_gemm1_whole(s, T) ? T : n;
    moe_cuda_lt_plan *plan = whole ? (P ? &s->sink1_whole_plan : &s->sink1_plan)
                             : n == P ? &s->sink1_plan : &s->sink1_tail_plan;
    TRY(moe_cuda_lt_plan_for(s->lt, plan, N, s->D, n, algo_T, CUDA_R_16BF, sink1_sms(s, T),
                             LT_WORKSPACE_BYTES, err));
    return moe_cuda_lt_run(s->lt, plan, s->sink_w13, x + (size_t)t0 * s->D,
                           s->sink_gu + (size_t)t0 * N, s->lt_ws_sinks, LT_WORKSPACE_BYTES,
                           s->sinks, err);
}

/* The sink chain on the sinks stream; x [T, D] on the device. beside (sinks_beside_front): the
 * sinks' GEMM1 was queued on the routed stream beside the front end, before route_ready, and
 * GEMM2 runs on the small kernel too (cuBLASLt's, planned for 80 multiprocessors, was 2-4 us
 * slower at T = 4 and 7-10 at T = 8). gemm1_queued: the host call queued the sinks' GEMM1 in
 * pieces as x landed (upload_x). */
moe_status run_sinks(cuda_state *s, int T, const uint16_t *x, bool beside, bool gemm1_queued,
                     bool timed, moe_error *err) {
    const int S = s->S, SIL = s->SIL, D = s->D;
    cudaStream_t st = s->sinks;
    CUDA_TRY(cudaStreamWaitEvent(st, s->x_ready, 0));
    if (beside) {
        CUDA_TRY(cudaStreamWaitEvent(st, s->route_ready, 0)); /* the gammas and g, u */
        TRY(moe_cuda_sink_swiglu(st, T, s->K, S, SIL, s->sink_gu, s->weights, s->sink_h, err));
        TRY(mark(s, timed, EV_SINK_SWIGLU, st, err));
        TRY(moe_cuda_sinks_small_gemm2(st, s->sm_count, T, D, S * SIL, s->sink_w2, s->sink_h,
                                       s->sink_y, err));
        TRY(mark(s, timed, EV_SINK_GEMM2, st, err));
        CUDA_TRY(cudaEventRecord(s->sinks_done, st));
        return MOE_OK;
    }
    if (S == 0 || SIL == 0) {
        TRY(mark(s, timed, EV_SINK_START, st, err));
        CUDA_TRY(cudaMemsetAsync(s->sink_y, 0, (size_t)T * D * sizeof(float), st));
        TRY(mark(s, timed, EV_SINK_GEMM1, st, err));
        CUDA_TRY(cudaStreamWaitEvent(st, s->route_ready, 0));
        TRY(mark(s, timed, EV_SINK_SWIGLU, st, err));
        TRY(mark(s, timed, EV_SINK_GEMM2, st, err));
        CUDA_TRY(cudaEventRecord(s->sinks_done, st));
        return MOE_OK;
    }
    if (!gemm1_queued) {
        TRY(mark(s, timed, EV_SINK_START, st, err));
        if (sink_gemm1_whole(s, T))
            TRY(sink_gemm1_piece(s, T, -1, x, err));
        else
            for (int i = 0; i < sink_pieces(s, T); i++) TRY(sink_gemm1_piece(s, T, i, x, err));
        TRY(mark(s, timed, EV_SINK_GEMM1, st, err));
    }
    CUDA_TRY(cudaStreamWaitEvent(st, s->route_ready, 0)); /* the gammas */
    TRY(moe_cuda_sink_swiglu(st, T, s->K, S, SIL, s->sink_gu, s->weights, s->sink_h, err));
    TRY(mark(s, timed, EV_SINK_SWIGLU, st, err));
    TRY(moe_cuda_lt_plan_for(s->lt, &s->sink2_plan, D, S * SIL, T, 0, CUDA_R_32F, sink_sms(s, T),
                             LT_WORKSPACE_BYTES, err));
    TRY(moe_cuda_lt_run(s->lt, &s->sink2_plan, s->sink_w2, s->sink_h, s->sink_y, s->lt_ws_sinks,
                        LT_WORKSPACE_BYTES, st, err));
    TRY(mark(s, timed, EV_SINK_GEMM2, st, err));
    CUDA_TRY(cudaEventRecord(s->sinks_done, st));
    return MOE_OK;
}

moe_status copy_stages(cuda_state *s, int T, moe_stages *stg, moe_error *err) {
    const size_t t = (size_t)T, D = (size_t)s->D, K = (size_t)s->K, S = (size_t)s->S;
    const size_t IL = (size_t)s->IL, SIL = (size_t)s->SIL;
    cudaStream_t st = s->routed;
    stg->filled = moe_stages_wanted(stg); /* the shared rule; T = 0 writes nothing */
    if (T == 0) return MOE_OK;
    const size_t G = (size_t)s->G, ldl = (size_t)moe_cuda_gate_rows(s->G);
    if (stg->logits)
        CUDA_TRY(cudaMemcpy2DAsync(stg->logits, G * 4, s->logits, ldl * 4, G * 4, t,
                                   cudaMemcpyDeviceToHost, st));
    if (stg->topk_ids)
        CUDA_TRY(cudaMemcpyAsync(stg->topk_ids, s->ids, t * K * 4, cudaMemcpyDeviceToHost, st));
    if (stg->topk_weights)
        CUDA_TRY(cudaMemcpyAsync(stg->topk_weights, s->weights, t * (K + S) * 4,
                                 cudaMemcpyDeviceToHost, st));
    struct {
        float *dst;
        int rows, cols, slots_K;
        const uint16_t *src16;
        const float *src32;
    } conv[] = {
        {stg->routed_h, (int)(t * K), (int)IL, s->K, s->h, NULL},
        {stg->routed_y, (int)(t * K), (int)D, s->K, NULL, s->y},
        {stg->sink_h, T, (int)(S * SIL), 0, s->sink_h, NULL},
        {stg->sink_y, T, (int)D, 0, NULL, s->sink_y},
    };
    for (size_t i = 0; i < sizeof conv / sizeof conv[0]; i++) {
        if (!conv[i].dst) continue;
        const size_t n = (size_t)conv[i].rows * conv[i].cols;
        if (n == 0) continue;
        TRY(ensure_stage_buffer(s, n, err));
        TRY(moe_cuda_stage_rows(st, conv[i].rows, conv[i].cols, conv[i].slots_K, s->E,
                                s->expert_first, s->ids, s->bad, conv[i].src16, conv[i].src32,
                                s->stage, err));
        CUDA_TRY(cudaMemcpyAsync(conv[i].dst, s->stage, n * 4, cudaMemcpyDeviceToHost, st));
    }
    return MOE_OK;
}

/* Pinned host buffers for x and out of T tokens (one allocation), made again only when T
 * exceeds the largest T staged so far. */
moe_status ensure_staging(cuda_state *s, int T, moe_error *err) {
    if (T <= s->staging_T) return MOE_OK;
    CUDA_TRY(cudaStreamSynchronize(s->routed)); /* no copy still reads the old buffers */
    CUDA_TRY(cudaStreamSynchronize(s->download));
    for (int i = 0; i < GRAPH_CACHE; i++) /* the host call's graphs copy to and from them */
        if (s->graphs[i].host_call) drop_graph(&s->graphs[i]);
    cudaFreeHost(s->staging);
    s->staging = NULL;
    s->staging_T = 0;
    const size_t x_bytes = align_up((size_t)T * s->D * 2), out_bytes = (size_t)T * s->D * 2;
    cudaError_t e = cudaHostAlloc(&s->staging, x_bytes + out_bytes, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        s->staging = NULL;
        return moe_fail(err, MOE_ERR_DEVICE, "cuda: cudaHostAlloc of the staging for T = %d "
                        "(%zu bytes) failed: %s", T, x_bytes + out_bytes, cudaGetErrorString(e));
    }
    s->x_host = (uint16_t *)s->staging;
    s->out_host = (uint16_t *)((char *)s->staging + x_bytes);
    s->staging_T = T;
    return MOE_OK;
}

/* Bytes per piece of a staged copy of `bytes`: at most STAGING_CHUNKS pieces, none below
 * STAGING_MIN_CHUNK, a multiple of 256 (each DMA starts aligned). */
size_t staging_chunk(size_t bytes) {
    size_t chunk = (bytes + STAGING_CHUNKS - 1) / STAGING_CHUNKS;
    chunk = chunk < STAGING_MIN_CHUNK ? STAGING_MIN_CHUNK : chunk;
    return align_up(chunk);
}

/* x [T, D] host -> s->x through the staging: the host copies piece i + 1 while piece i is on
 * its way. (Each thread sending on the pieces it copied, with no barrier between pieces, was
 * no faster and far less steady: docs/perf-cuda.md.) Where the sinks' GEMM1 runs in pieces
 * (sink_piece_tokens), x goes up in the same pieces and each piece's GEMM1 is queued on the
 * sinks stream behind its landing; returns whether it was. */
moe_status upload_x(cuda_state *s, int T, const uint16_t *x, bool timed, bool *gemm1_queued,
                    moe_error *err) {
    const int P = sink_piece_tokens(s, T);
    const size_t bytes = (size_t)T * s->D * 2;
    const size_t chunk = P ? (size_t)P * s->D * 2 : staging_chunk(bytes);
    for (size_t o = 0, i = 0; o < bytes; o += chunk, i++) {
        const size_t n = bytes - o < chunk ? bytes - o : chunk;
        moe_copy_parallel((char *)s->x_host + o, (const char *)x + o, n, s->copy_threads);
        CUDA_TRY(cudaMemcpyAsync((char *)s->x + o, (const char *)s->x_host + o, n,
                                 cudaMemcpyHostToDevice, s->routed));
        if (!P) continue;
        CUDA_TRY(cudaEventRecord(s->x_landed[i], s->routed));
        CUDA_TRY(cudaStreamWaitEvent(s->sinks, s->x_landed[i], 0));
        if (i == 0) TRY(mark(s, timed, EV_SINK_START, s->sinks, err));
        TRY(sink_gemm1_piece(s, T, (int)i, s->x, err));
    }
    if (P) TRY(mark(s, timed, EV_SINK_GEMM1, s->sinks, err));
    *gemm1_queued = P > 0;
    return MOE_OK;
}

/* Tokens per piece of out in the host call, for the combine, the download and the widening:
 * STAGING_CHUNKS pieces at most, none below STAGING_MIN_CHUNK bytes (as the upload's). */
int out_piece_tokens(const cuda_state *s, int T) {
    const size_t row = (size_t)s->D * 2;
    const int per_chunk = (T + STAGING_CHUNKS - 1) / STAGING_CHUNKS;
    const int least = (int)((STAGING_MIN_CHUNK + row - 1) / row);
    return per_chunk > least ? per_chunk : least;
}

/* Queues out [T, D] (bf16 patterns in s->out, as the host call's combine writes them) -> the
 * staging on the download stream, piece i after event out_combined[i] (run_layer) and followed
 * by event out_landed[i]: a piece crosses the bus while the next is being formed. */
moe_status queue_download(cuda_state *s, int T, moe_error *err) {
    const size_t row = (size_t)s->D * 2;
    const int P = out_piece_tokens(s, T);
    for (int t0 = 0, i = 0; t0 < T; t0 += P, i++) {
        const size_t o = (size_t)t0 * row, n = (size_t)(T - t0 < P ? T - t0 : P) * row;
        CUDA_TRY(cudaStreamWaitEvent(s->download, s->out_combined[i], 0));
        CUDA_TRY(cudaMemcpyAsync((char *)s->out_host + o, (const char *)s->out + o, n,
                                 cudaMemcpyDeviceToHost, s->download));
        CUDA_TRY(cudaEventRecord(s->out_landed[i], s->download));
    }
    return MOE_OK;
}

/* The staging's bf16 -> out [T, D] fp32 host (exact), each piece as soon as it has landed
 * (the next is still on its way). */
moe_status finish_download(cuda_state *s, int T, float *out, moe_error *err) {
    const size_t D = (size_t)s->D;
    const int P = out_piece_tokens(s, T);
    for (int t0 = 0, i = 0; t0 < T; t0 += P, i++) {
        const size_t o = (size_t)t0 * D, n = (size_t)(T - t0 < P ? T - t0 : P) * D;
        CUDA_TRY(cudaEventSynchronize(s->out_landed[i]));
        moe_widen_bf16_parallel(out + o, s->out_host + o, n, s->copy_threads);
    }
    return MOE_OK;
}

/* One expert-GEMM implementation: its tiers of tile sizes (the grouping's tile rows first) and
 * its two kernels' launchers. */
struct expert_kernels {
    const char *name;
    const moe_cuda_tiers *tiers;
    moe_cuda_expert_gemm1_fn *gemm1;
    moe_cuda_expert_gemm2_fn *gemm2;
};

const moe_cuda_tiers wmma_tiles = {1, {MOE_CUDA_TILE_M}}, gemv_tiles = {1, {MOE_CUDA_GEMV_M}},
                     mma16_tiles = {1, {2 * MOE_CUDA_GEMV_M}};
const expert_kernels wmma_kernels = {"wmma", &wmma_tiles, moe_cuda_expert_gemm1,
                                     moe_cuda_expert_gemm2};
const expert_kernels gemv_kernels = {"gemv", &gemv_tiles, moe_cuda_expert_gemv1,
                                     moe_cuda_expert_gemv2};
const expert_kernels mma_kernels = {"mma", &gemv_tiles, moe_cuda_expert_mma1,
                                    moe_cuda_expert_mma2};
const expert_kernels mma16_kernels = {"mma16", &mma16_tiles, moe_cuda_expert_mma1_m16,
                                      moe_cuda_expert_mma2_m16};
const expert_kernels wgmma_kernels[] = {
    {"wgmma16", &moe_cuda_wg_tiers_16, moe_cuda_expert_wg1_16, moe_cuda_expert_wg2_16},
    {"wgmma32-16", &moe_cuda_wg_tiers_32_16, moe_cuda_expert_wg1_32_16, moe_cuda_expert_wg2_32_16},
    {"wgmma128-32-16", &moe_cuda_wg_tiers_128_32_16, moe_cuda_expert_wg1_128_32_16,
     moe_cuda_expert_wg2_128_32_16},
    {"wgmma16-split", &moe_cuda_wg_tiers_16, moe_cuda_expert_wg1_16_split, moe_cuda_expert_wg2_16_split},
};

/* The wgmma tiles (rows of one expert) for T tokens, from the T * K / R rows an expert has on
 * average. Measured, serving graph, Inkling-Small (docs/device-notes.md): 16-row tiles up to 3
 * rows (T = 128: 728-742 us against 744-746 with the tiers 32,16, whose 32-row tiles are as many
 * as the 16-row ones there); the tiers 32,16 from 4 rows (T = 192: 826 against 833-837 with
 * 16; T = 256: 893-896 against 943; T = 512: 1140-1143 against 1184-1198 with 32 alone); the
 * tiers 128,32,16 above 32 (T = 1500: 1756-1764 against 2035-2045 with 128 alone; T = 4096:
 * 3374-3382 against 3538-3552; 32-row tiles at T = 4096 were 8748 against 6313 with 128). */
const expert_kernels *wgmma_for(const cuda_state *s, int T) {
    const long rows_per_expert = (long)T * s->K / (s->R > 0 ? s->R : 1);
    if (T <= MOE_CUDA_WG_SPLIT_MAX_T) return &wgmma_kernels[3];
    return rows_per_expert <= 3    ? &wgmma_kernels[0]
           : rows_per_expert <= 32 ? &wgmma_kernels[1]
                                   : &wgmma_kernels[2];
}

/* The variant's kernels for a call of T tokens. The thresholds are measured
 * (cuda_internal.h, docs/perf-cuda.md). */
const expert_kernels *expert_kernels_for(const cuda_state *s, int T) {
    const expert_kernels *mma = T <= MOE_CUDA_MMA_NARROW_MAX_T ? &mma_kernels : &mma16_kernels;
    switch (s->variant) {
    case MOE_CUDA_EXPERTS_WMMA: return &wmma_kernels;
    case MOE_CUDA_EXPERTS_GEMV: return &gemv_kernels;
    case MOE_CUDA_EXPERTS_MMA: return mma;
    case MOE_CUDA_EXPERTS_WGMMA: return wgmma_for(s, T);
    case MOE_CUDA_EXPERTS_AUTO: break;
    }
    if (!s->experts.mxfp4) return &wmma_kernels;
    return wgmma_for(s, T);
}

/* The layer on the routed stream (the sinks forked off and joined), from x [T, D] bf16 on the
 * device to out [T, D] on the device, fp32 (out) or as bf16 patterns (out16, the host call's,
 * whose download then carries half the bytes); the workspace holds T tokens. Timing events
 * EV_GATE .. EV_COMBINE. */
moe_status run_layer(cuda_state *s, int T, const uint16_t *x, float *out, uint16_t *out16,
                     bool sink_gemm1_queued, bool timed, moe_error *err) {
    const int D = s->D, K = s->K, S = s->S;
    cudaStream_t st = s->routed;
    CUDA_TRY(cudaEventRecord(s->x_ready, st));

    /* Few rows per expert: stream the weights (GEMV); else tiles on the tensor cores. */
    const expert_kernels *kern = expert_kernels_for(s, T);
    bool grouped = false;
    if (moe_cuda_front_small_fits(T, D)) { /* a few tokens: one launch for the three steps */
        grouped = moe_cuda_front_small_groups(T, K);
        const moe_cuda_front_args front = {
            T, D, s->G, s->R, K, S, s->shard->cfg.route_scale, s->shard->global_scale,
            x, s->gate_w, s->gate_bias, s->logits, s->ids, s->weights, s->bad, s->front_ticket,
            s->E, s->expert_first, grouped ? *kern->tiers : moe_cuda_tiers{}, s->group_scratch, s->counts,
            s->perm, s->tiles, s->n_tiles};
        TRY(moe_cuda_front_small(st, &front, err));
    } else {
        TRY(moe_cuda_lt_plan_for(s->lt, &s->gate_plan, moe_cuda_gate_rows(s->G), D, T, 0, CUDA_R_32F,
                                 gate_sms(s, T), LT_WORKSPACE_BYTES, err));
        TRY(moe_cuda_lt_run(s->lt, &s->gate_plan, s->gate_w, x, s->logits, s->lt_ws_routed,
                            LT_WORKSPACE_BYTES, st, err));
    }
    /* the sinks' GEMM1 beside the front end: no event between the two, or the launch is an
     * ordinary one (the timed call records its events and runs them one after the other) */
    const bool beside = sinks_beside_front(s, T, x);
    if (beside) {
        TRY(mark(s, timed, EV_GATE, st, err));
        TRY(mark(s, timed, EV_SINK_START, st, err));
        TRY(moe_cuda_sinks_small_gemm1(st, s->sm_count, T, S * 2 * s->SIL, D, s->sink_w13, x,
                                       s->sink_gu, !timed, err));
        TRY(mark(s, timed, EV_SINK_GEMM1, st, err));
    } else {
        TRY(mark(s, timed, EV_GATE, st, err));
    }
    if (!moe_cuda_front_small_fits(T, D))
        TRY(moe_cuda_route(st, T, D, s->R, K, S, s->shard->cfg.route_scale,
                           s->shard->global_scale, x, s->logits, s->gate_bias, s->ids, s->weights,
                           s->bad, err));
    CUDA_TRY(cudaEventRecord(s->route_ready, st));
    TRY(mark(s, timed, EV_ROUTE, st, err));

    TRY(run_sinks(s, T, x, beside, sink_gemm1_queued, timed, err));

    if (!grouped)
        TRY(moe_cuda_group(st, T, K, s->E, s->expert_first, *kern->tiers, s->ids, s->bad,
                           s->group_scratch, s->counts, s->perm, s->tiles, s->n_tiles, err));
    TRY(mark(s, timed, EV_GROUP, st, err));
    TRY(kern->gemm1(st, &s->experts, T, K, x, s->counts, s->perm, s->tiles, s->n_tiles, s->h,
                    err));
    TRY(mark(s, timed, EV_GEMM1, st, err));
    TRY(kern->gemm2(st, &s->experts, T, K, s->h, s->counts, s->perm, s->tiles, s->n_tiles, s->y,
                    err));
    TRY(mark(s, timed, EV_GEMM2, st, err));

    CUDA_TRY(cudaStreamWaitEvent(st, s->sinks_done, 0));
    const float *sink_y = S > 0 && s->SIL > 0 ? s->sink_y : NULL;
    if (!out16) {
        TRY(moe_cuda_combine(st, T, D, K, S, s->E, s->expert_first, s->ids, s->weights, s->bad,
                             s->y, sink_y, out, NULL, err));
    } else { /* the host call's, in out's pieces, each followed by its event (queue_download);
                a token's sum is the same whatever the launch it is in */
        const int P = out_piece_tokens(s, T);
        for (int t0 = 0, i = 0; t0 < T; t0 += P, i++) {
            const size_t t = (size_t)t0;
            TRY(moe_cuda_combine(st, T - t0 < P ? T - t0 : P, D, K, S, s->E, s->expert_first,
                                 s->ids + t * K, s->weights + t * (K + S), s->bad + t,
                                 s->y + t * K * D, sink_y ? sink_y + t * D : NULL, NULL,
                                 out16 + t * D, err));
            CUDA_TRY(cudaEventRecord(s->out_combined[i], st));
        }
    }
    TRY(mark(s, timed, EV_COMBINE, st, err));
    return MOE_OK;
}

/* The stage intervals of the last timed call (its events have completed). */
moe_status read_times(cuda_state *s, moe_cuda_stage_times *times, moe_error *err) {
    const struct {
        float *field;
        int from, to;
    } spans[] = {
        {&times->upload, EV_BEGIN, EV_UPLOAD},       {&times->gate, EV_UPLOAD, EV_GATE},
        {&times->route, EV_GATE, EV_ROUTE},          {&times->group, EV_ROUTE, EV_GROUP},
        {&times->gemm1, EV_GROUP, EV_GEMM1},         {&times->gemm2, EV_GEMM1, EV_GEMM2},
        {&times->combine, EV_GEMM2, EV_COMBINE},     {&times->download, EV_COMBINE, EV_DOWNLOAD},
        {&times->sink_gemm1, EV_SINK_START, EV_SINK_GEMM1},
        {&times->sink_swiglu, EV_SINK_GEMM1, EV_SINK_SWIGLU},
        {&times->sink_gemm2, EV_SINK_SWIGLU, EV_SINK_GEMM2},
        {&times->device, EV_UPLOAD, EV_COMBINE},
    };
    for (size_t i = 0; i < sizeof spans / sizeof spans[0]; i++)
        CUDA_TRY(cudaEventElapsedTime(spans[i].field, s->timing[spans[i].from],
                                      s->timing[spans[i].to]));
    return MOE_OK;
}

moe_status forward_graphed(cuda_state *s, int T, const uint16_t *x, float *out, moe_error *err);

/* Whether the untimed host call at T runs as one kept graph (forward_graphed): x and out each
 * cross the bus in one piece (at most STAGING_MIN_CHUNK bytes: T <= 128 at D = 4096) and the
 * sinks' GEMM1 is not in x's pieces. There the chain's dozen launches and the separate copies,
 * not the bytes, put the host clock 1.12-1.19 times the layer's device interval at T = 1 on an
 * H200; as one graph the call took 0.98-1.02 times it on an H100 where the launched chain took
 * 1.08-1.10 (docs/perf-cuda.md, fifty-eighth run). */
bool host_call_graphed(const cuda_state *s, int T) {
    return (size_t)T * s->D * 2 <= STAGING_MIN_CHUNK && sink_piece_tokens(s, T) == 0;
}

/* A forward call on host x and out: upload through the staging, the layer, stage copies,
 * download through the staging (one kept graph where host_call_graphed). */
moe_status forward_impl(cuda_state *s, int T, const uint16_t *x, float *out, moe_stages *stg,
                        moe_cuda_stage_times *times, moe_error *err) {
    const bool timed = times != NULL;
    if (T == 0) {
        if (stg) TRY(copy_stages(s, 0, stg, err));
        return MOE_OK;
    }
    CUDA_TRY(cudaSetDevice(s->device));
    TRY(ensure_workspace(s, T, err));
    TRY(ensure_staging(s, T, err));
    if (!timed && !stg && host_call_graphed(s, T)) return forward_graphed(s, T, x, out, err);
    cudaStream_t st = s->routed;

    TRY(mark(s, timed, EV_BEGIN, st, err));
    bool sink_gemm1_queued = false;
    TRY(upload_x(s, T, x, timed, &sink_gemm1_queued, err));
    TRY(mark(s, timed, EV_UPLOAD, st, err));
    TRY(run_layer(s, T, s->x, NULL, (uint16_t *)s->out, sink_gemm1_queued, timed, err));
    if (stg) TRY(copy_stages(s, T, stg, err));
    TRY(queue_download(s, T, err));
    TRY(mark(s, timed, EV_DOWNLOAD, s->download, err));
    TRY(finish_download(s, T, out, err));
    CUDA_TRY(cudaStreamSynchronize(st));

    if (timed) TRY(read_times(s, times, err));
    return MOE_OK;
}

/* Whether p is memory of this layer's device (device or managed). */
bool on_device(const cuda_state *s, const void *p) {
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* not an error of the layer: clear it */
        return false;
    }
    return (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) &&
           a.device == s->device;
}

/* Queues what a captured graph holds on the routed stream: the layer on x [T, D] into out
 * [T, D] (device, fp32), or for the host call (host_call; x, out NULL) x's upload from the
 * staging, the layer into out's bf16 patterns and their download to the staging. */
moe_status queue_captured(cuda_state *s, int T, const uint16_t *x, float *out, bool host_call,
                          moe_error *err) {
    if (!host_call) return run_layer(s, T, x, out, NULL, false, false, err);
    const size_t bytes = (size_t)T * s->D * 2; /* x and out's patterns alike */
    CUDA_TRY(cudaMemcpyAsync(s->x, s->x_host, bytes, cudaMemcpyHostToDevice, s->routed));
    TRY(run_layer(s, T, s->x, NULL, (uint16_t *)s->out, false, false, err));
    CUDA_TRY(cudaMemcpyAsync(s->out_host, s->out, bytes, cudaMemcpyDeviceToHost, s->routed));
    return MOE_OK;
}

/* The graph of queue_captured's work for (T, x, out, host_call), in *exec: a kept one with
 * this key, else one captured from the routed stream (the sinks stream joins through its
 * events) into the slot used least recently, whose graph is updated in place where CUDA
 * allows it and instantiated again where not. */
moe_status capture_layer(cuda_state *s, int T, const uint16_t *x, float *out, bool host_call,
                         cudaGraphExec_t *exec, moe_error *err) {
    layer_graph *slot = &s->graphs[0];
    for (int i = 0; i < GRAPH_CACHE; i++) {
        layer_graph *g = &s->graphs[i];
        if (g->exec && g->T == T && g->x == x && g->out == out && g->host_call == host_call) {
            g->last_use = ++s->graph_clock;
            *exec = g->exec;
            return MOE_OK;
        }
        const bool replaces_sooner = !g->exec ? slot->exec != NULL /* an empty slot first */
                                              : slot->exec && g->last_use < slot->last_use;
        if (replaces_sooner) slot = g;
    }
    CUDA_TRY(cudaStreamBeginCapture(s->routed, cudaStreamCaptureModeRelaxed));
    moe_status st = queue_captured(s, T, x, out, host_call, err);
    cudaGraph_t g = NULL;
    const cudaError_t ended = cudaStreamEndCapture(s->routed, &g);
    if (!st && ended != cudaSuccess)
        st = moe_fail(err, MOE_ERR_DEVICE, "cuda: capturing the layer for T = %d failed: %s", T,
                      cudaGetErrorString(ended));
    cudaGetLastError(); /* a failed capture leaves its error behind; it is reported above */
    if (!st && slot->exec) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(slot->exec, g, &info) != cudaSuccess) {
            cudaGetLastError();
            drop_graph(slot);
        }
    }
    if (!st && !slot->exec) {
        const cudaError_t e = cudaGraphInstantiate(&slot->exec, g, 0);
        if (e != cudaSuccess) {
            slot->exec = NULL;
            st = moe_fail(err, MOE_ERR_DEVICE, "cuda: cudaGraphInstantiate of the layer for "
                          "T = %d failed: %s", T, cudaGetErrorString(e));
        }
    }
    if (g) cudaGraphDestroy(g);
    if (st) {
        drop_graph(slot);
        return st;
    }
    slot->T = T, slot->x = x, slot->out = out, slot->host_call = host_call;
    slot->last_use = ++s->graph_clock;
    *exec = slot->exec;
    return MOE_OK;
}

/* The host call at T (host_call_graphed) on x, out [T, D] in host memory: x into the staging,
 * one kept graph (upload, layer, download), out widened from the staging. The graph holds the
 * kernels of the stream-launched call in the same order: the same bits. */
moe_status forward_graphed(cuda_state *s, int T, const uint16_t *x, float *out, moe_error *err) {
    const size_t n = (size_t)T * s->D;
    moe_copy_parallel(s->x_host, x, n * 2, s->copy_threads);
    cudaGraphExec_t graph = NULL;
    TRY(capture_layer(s, T, NULL, NULL, true, &graph, err));
    CUDA_TRY(cudaGraphLaunch(graph, s->routed));
    CUDA_TRY(cudaStreamSynchronize(s->routed));
    moe_widen_bf16_parallel(out, s->out_host, n, s->copy_threads);
    return MOE_OK;
}

/* The device entry (cuda_layer.h) once its arguments are checked. Timed (times non-NULL,
 * caller NULL): no upload or download, so both intervals are empty, and the chain is launched
 * kernel by kernel between the timing events; untimed: the captured graph, and graph_ms (not
 * NULL, caller NULL) its interval on the device, between one event pair around the launch. */
moe_status forward_device(cuda_state *s, int T, const uint16_t *x_dev, float *out_dev,
                          cudaStream_t caller, moe_cuda_stage_times *times, float *graph_ms,
                          moe_error *err) {
    const bool timed = times != NULL;
    CUDA_TRY(cudaSetDevice(s->device));
    TRY(ensure_workspace(s, T, err));
    cudaStream_t st = s->routed;
    if (caller) {
        CUDA_TRY(cudaEventRecord(s->caller_ready, caller));
        CUDA_TRY(cudaStreamWaitEvent(st, s->caller_ready, 0));
    }
    TRY(mark(s, timed, EV_BEGIN, st, err));
    TRY(mark(s, timed, EV_UPLOAD, st, err));
    /* cuBLASLt's algorithm was chosen for LT_ALIGN-aligned operands: another x goes through
     * the workspace's copy (a device-to-device copy, no bus crossing). */
    const uint16_t *x = x_dev;
    if ((uintptr_t)x_dev % LT_ALIGN != 0) {
        CUDA_TRY(cudaMemcpyAsync(s->x, x_dev, (size_t)T * s->D * 2, cudaMemcpyDeviceToDevice, st));
        x = s->x;
    }
    if (timed) {
        TRY(run_layer(s, T, x, out_dev, NULL, false, timed, err));
    } else {
        cudaGraphExec_t graph = NULL;
        TRY(capture_layer(s, T, x, out_dev, false, &graph, err));
        if (graph_ms) CUDA_TRY(cudaEventRecord(s->timing[EV_UPLOAD], st));
        CUDA_TRY(cudaGraphLaunch(graph, st));
        if (graph_ms) CUDA_TRY(cudaEventRecord(s->timing[EV_COMBINE], st));
    }
    TRY(mark(s, timed, EV_DOWNLOAD, st, err));
    if (caller) {
        CUDA_TRY(cudaEventRecord(s->layer_done, st));
        CUDA_TRY(cudaStreamWaitEvent(caller, s->layer_done, 0));
    } else {
        CUDA_TRY(cudaStreamSynchronize(st));
    }
    if (timed) TRY(read_times(s, times, err));
    if (graph_ms && !timed)
        CUDA_TRY(cudaEventElapsedTime(graph_ms, s->timing[EV_UPLOAD], s->timing[EV_COMBINE]));
    return MOE_OK;
}

moe_status cuda_forward(void *p, int T, const uint16_t *x, float *out, moe_stages *stg,
                        moe_error *err) {
    return forward_impl((cuda_state *)p, T, x, out, stg, NULL, err);
}

moe_status cuda_route(void *p, int T, const float *logits, int32_t *ids, float *weights,
                      moe_error *err) {
    cuda_state *s = (cuda_state *)p;
    if (T == 0) return MOE_OK;
    CUDA_TRY(cudaSetDevice(s->device));
    TRY(ensure_workspace(s, T, err));
    const size_t t = (size_t)T;
    cudaStream_t st = s->routed;
    CUDA_TRY(cudaMemcpy2DAsync(s->logits, (size_t)moe_cuda_gate_rows(s->G) * 4, logits,
                               (size_t)s->G * 4, (size_t)s->G * 4, t, cudaMemcpyHostToDevice, st));
    TRY(moe_cuda_route(st, T, s->D, s->R, s->K, s->S, s->shard->cfg.route_scale,
                       s->shard->global_scale, NULL, s->logits, s->gate_bias, s->ids, s->weights,
                       NULL, err));
    CUDA_TRY(cudaMemcpyAsync(ids, s->ids, t * s->K * 4, cudaMemcpyDeviceToHost, st));
    CUDA_TRY(cudaMemcpyAsync(weights, s->weights, t * (s->K + s->S) * 4, cudaMemcpyDeviceToHost, st));
    CUDA_TRY(cudaStreamSynchronize(st));
    return MOE_OK;
}

} // namespace

extern "C" moe_status moe_cuda_forward_timed(void *state, int T, const uint16_t *x, float *out,
                                             moe_cuda_stage_times *times, moe_error *err) {
    if (!state || !times) return moe_fail(err, MOE_ERR_ARG, "cuda timing: NULL state or times");
    memset(times, 0, sizeof *times);
    return forward_impl((cuda_state *)state, T, x, out, NULL, T > 0 ? times : NULL, err);
}

extern "C" moe_status moe_cuda_forward_device(moe_layer *layer, int T, const uint16_t *x_dev,
                                              float *out_dev, cudaStream_t stream,
                                              moe_error *err) {
    const moe_backend *b = moe_layer_backend(layer);
    if (!b || (b != &moe_backend_cuda && b != &moe_backend_cuda_wmma && b != &moe_backend_cuda_gemv))
        return moe_fail(err, MOE_ERR_ARG, "cuda device forward: %s is not a layer of a CUDA "
                        "backend", b ? b->name : "NULL layer");
    cuda_state *s = (cuda_state *)moe_layer_backend_state(layer);
    if (T < 0) return moe_fail(err, MOE_ERR_ARG, "cuda device forward: token count T = %d is "
                               "negative", T);
    if (s->strict_nonfinite)
        return moe_fail(err, MOE_ERR_UNSUPPORTED, "cuda device forward: the strict non-finite "
                        "policy checks x on the host; create the layer without it (NaN/inf rows "
                        "then give NaN output rows)");
    if (T == 0) return MOE_OK;
    if (!on_device(s, x_dev) || !on_device(s, out_dev))
        return moe_fail(err, MOE_ERR_ARG, "cuda device forward: x_dev and out_dev must be memory "
                        "of device %d (T = %d)", s->device, T);
    return forward_device(s, T, x_dev, out_dev, stream, NULL, NULL, err);
}

extern "C" moe_status moe_cuda_forward_device_timed(void *state, int T, const uint16_t *x_dev,
                                                    float *out_dev, moe_cuda_stage_times *times,
                                                    moe_error *err) {
    cuda_state *s = (cuda_state *)state;
    if (!s) return moe_fail(err, MOE_ERR_ARG, "cuda timing: NULL state");
    if (times) memset(times, 0, sizeof *times);
    if (T <= 0) return T < 0 ? moe_fail(err, MOE_ERR_ARG, "cuda timing: T = %d", T) : MOE_OK;
    if (!on_device(s, x_dev) || !on_device(s, out_dev))
        return moe_fail(err, MOE_ERR_ARG, "cuda timing: x_dev and out_dev must be memory of "
                        "device %d", s->device);
    return forward_device(s, T, x_dev, out_dev, NULL, times, NULL, err);
}

extern "C" moe_status moe_cuda_graph_device_ms(void *state, int T, const uint16_t *x_dev,
                                               float *out_dev, float *ms, moe_error *err) {
    cuda_state *s = (cuda_state *)state;
    if (!s || !ms) return moe_fail(err, MOE_ERR_ARG, "cuda timing: NULL state or ms");
    *ms = 0.0f;
    if (T <= 0) return T < 0 ? moe_fail(err, MOE_ERR_ARG, "cuda timing: T = %d", T) : MOE_OK;
    if (!on_device(s, x_dev) || !on_device(s, out_dev))
        return moe_fail(err, MOE_ERR_ARG, "cuda timing: x_dev and out_dev must be memory of "
                        "device %d", s->device);
    return forward_device(s, T, x_dev, out_dev, NULL, NULL, ms, err);
}

extern "C" moe_status moe_cuda_staging_dma_ms(void *state, int T, float ms[2], moe_error *err) {
    cuda_state *s = (cuda_state *)state;
    if (!s || !ms) return moe_fail(err, MOE_ERR_ARG, "cuda timing: NULL state or ms");
    ms[0] = ms[1] = 0.0f;
    if (T <= 0) return T < 0 ? moe_fail(err, MOE_ERR_ARG, "cuda timing: T = %d", T) : MOE_OK;
    CUDA_TRY(cudaSetDevice(s->device));
    TRY(ensure_workspace(s, T, err));
    TRY(ensure_staging(s, T, err));
    const size_t x_bytes = (size_t)T * s->D * 2, out_bytes = (size_t)T * s->D * 2;
    cudaStream_t st = s->routed;
    cudaEvent_t *ev = s->timing; /* three of the stage events, free between calls */
    CUDA_TRY(cudaEventRecord(ev[0], st));
    CUDA_TRY(cudaMemcpyAsync(s->x, s->x_host, x_bytes, cudaMemcpyHostToDevice, st));
    CUDA_TRY(cudaEventRecord(ev[1], st));
    CUDA_TRY(cudaMemcpyAsync(s->out_host, s->out, out_bytes, cudaMemcpyDeviceToHost, st));
    CUDA_TRY(cudaEventRecord(ev[2], st));
    CUDA_TRY(cudaEventSynchronize(ev[2]));
    CUDA_TRY(cudaEventElapsedTime(&ms[0], ev[0], ev[1]));
    CUDA_TRY(cudaEventElapsedTime(&ms[1], ev[1], ev[2]));
    return MOE_OK;
}

extern "C" moe_status moe_cuda_drop_graphs(void *state, moe_error *err) {
    cuda_state *s = (cuda_state *)state;
    if (!s) return moe_fail(err, MOE_ERR_ARG, "cuda: NULL state");
    CUDA_TRY(cudaSetDevice(s->device));
    CUDA_TRY(cudaStreamSynchronize(s->routed)); /* no kept graph still running */
    for (int i = 0; i < GRAPH_CACHE; i++) drop_graph(&s->graphs[i]);
    return MOE_OK;
}

extern "C" moe_status moe_cuda_plant_chain_race(void *state, bool on, moe_error *err) {
    if (!state) return moe_fail(err, MOE_ERR_ARG, "cuda plant: NULL state");
    TRY(moe_cuda_drop_graphs(state, err)); /* they were captured the other way */
    ((cuda_state *)state)->experts.planted_chain_race = on;
    return MOE_OK;
}

extern "C" moe_status moe_cuda_flush_l2(void *state, moe_error *err) {
    cuda_state *s = (cuda_state *)state;
    if (!s) return moe_fail(err, MOE_ERR_ARG, "cuda flush: NULL state");
    CUDA_TRY(cudaSetDevice(s->device));
    if (!s->flush) CUDA_TRY(cudaMalloc(&s->flush, L2_FLUSH_BYTES));
    static int flush_round = 0;
    CUDA_TRY(cudaMemsetAsync(s->flush, ++flush_round & 0xFF, L2_FLUSH_BYTES, s->routed));
    CUDA_TRY(cudaStreamSynchronize(s->routed));
    return MOE_OK;
}

extern "C" const moe_backend moe_backend_cuda = {
    "cuda",
    "CUDA path (serving contract): cuBLASLt gate and sinks, grouped MXFP4/bf16 expert GEMMs",
    cuda_available,
    cuda_supports,
    cuda_create,
    cuda_forward,
    cuda_route,
    cuda_destroy,
    moe_cuda_shape_hints,
};

/* The expert kernels forced one way, so that the harness checks each variant by name. */
extern "C" const moe_backend moe_backend_cuda_wmma = {
    "cuda-wmma",
    "CUDA path with the tensor-core (wmma) expert GEMMs at every T",
    cuda_available,
    cuda_wmma_supports,
    cuda_wmma_create,
    cuda_forward,
    cuda_route,
    cuda_destroy,
    moe_cuda_shape_hints,
};

extern "C" const moe_backend moe_backend_cuda_mma = {
    "cuda-mma",
    "CUDA path with the register-decoded mma expert kernels at every T (MXFP4 experts)",
    cuda_available,
    cuda_mma_supports,
    cuda_mma_create,
    cuda_forward,
    cuda_route,
    cuda_destroy,
    moe_cuda_shape_hints,
};

extern "C" const moe_backend moe_backend_cuda_wgmma = {
    "cuda-wgmma",
    "CUDA path with the warpgroup-MMA (wgmma) expert kernels at every T (MXFP4 experts)",
    cuda_available,
    cuda_wgmma_supports,
    cuda_wgmma_create,
    cuda_forward,
    cuda_route,
    cuda_destroy,
    moe_cuda_shape_hints,
};

extern "C" const moe_backend moe_backend_cuda_gemv = {
    "cuda-gemv",
    "CUDA path with the weight-streaming (GEMV) expert kernels at every T (MXFP4 experts)",
    cuda_available,
    cuda_gemv_supports,
    cuda_gemv_create,
    cuda_forward,
    cuda_route,
    cuda_destroy,
    moe_cuda_shape_hints,
};
