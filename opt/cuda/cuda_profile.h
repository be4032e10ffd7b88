/*
 * cuda_profile.h: stage timing of the CUDA path, for the kernel lab (inkling-moe lab, harness/lab.h).
 * Exists only in builds made with nvcc; the CUDA backend's state is the `void *` that
 * moe_backend_cuda.create() returns.
 *
 * Rules: times are CUDA event intervals on the device, in milliseconds. The routed chain
 * (gate .. combine) runs on one stream and the sink chain on a second stream at the same time,
 * so stage times of one chain include whatever the other chain takes from the GPU meanwhile.
 */
#ifndef INKLING_CUDA_PROFILE_H
#define INKLING_CUDA_PROFILE_H

#include "../../common/moe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float upload;      /* x host -> device through the pinned staging (host copies included) */
    float gate;        /* gate logits GEMM (cuBLASLt) */
    float route;       /* selection and weights */
    float group;       /* grouping by expert and tile table */
    float gemm1;       /* routed GEMM1 + SwiGLU */
    float gemm2;       /* routed GEMM2 */
    float combine;     /* wait for the sinks, then weighted sum and rounding */
    float download;    /* out device -> pinned staging (the host's copies out overlap it) */
    float sink_gemm1;  /* sink GEMM1 (cuBLASLt), from the upload's end, or from its first
                          piece's landing where it runs in pieces under the upload */
    float sink_swiglu; /* waits for the routing, then the sink SwiGLU epilogue */
    float sink_gemm2;  /* sink GEMM2 (cuBLASLt) */
    float device;      /* upload's end to combine's end: the layer on the device (less the
                          sinks' GEMM1 where it runs in pieces under the upload) */
} moe_cuda_stage_times;

/* One forward call like moe_backend_cuda.forward (no stages), timing each stage. */
moe_status moe_cuda_forward_timed(void *state, int T, const uint16_t *x, float *out,
                                  moe_cuda_stage_times *times, moe_error *err);

/* The same on x_dev [T, D] bf16 and out_dev [T, D] fp32 already on the device, as
 * moe_cuda_forward_device (cuda_layer.h) with no stream: upload and download are empty (0),
 * `device` is the layer as a serving engine calls it. times NULL: exactly the serving call
 * (its captured graph, no events), for timing it by the host's clock. */
moe_status moe_cuda_forward_device_timed(void *state, int T, const uint16_t *x_dev,
                                         float *out_dev, moe_cuda_stage_times *times,
                                         moe_error *err);

/* The serving call (moe_cuda_forward_device_timed with times NULL: the captured graph) with one
 * event pair around the graph's launch; *ms the interval between them on the device. Kernels
 * that overlap inside the graph (GEMM2 starting beside GEMM1's last wave) are timed as they run,
 * which the per-stage events of the timed call, recorded between the kernels, prevent. */
moe_status moe_cuda_graph_device_ms(void *state, int T, const uint16_t *x_dev, float *out_dev,
                                    float *ms, moe_error *err);

/* One kernel of a traced call (moe_cuda_graph_timeline). */
typedef struct {
    char name[96];   /* demangled, without its parameters ("expert_wgmma_kernel<1, 16, ...>") */
    double start_us; /* after the first kernel's start */
    double end_us;
    unsigned stream; /* CUPTI's stream id: the kernels of one stream share it */
} moe_cuda_kernel_span;

/* The serving call (the captured graph) once more, after an L2 flush, with CUPTI recording
 * every kernel it runs, cuBLASLt's included: spans [cap] in start order, *n how many (at most
 * cap). MOE_ERR_UNSUPPORTED with the reason where CUPTI cannot be loaded or record here. */
moe_status moe_cuda_graph_timeline(void *state, int T, const uint16_t *x_dev, float *out_dev,
                                   moe_cuda_kernel_span *spans, int cap, int *n, moe_error *err);

/* The bus at pinned-memory speed for a forward call of T tokens: one DMA of x [T, D] bf16 from
 * the layer's pinned staging to the device (ms[0]) and one of out [T, D] back as bf16, the
 * bytes the host call moves (ms[1]), with no host copy; the bound the host call's transfers
 * are held to (docs/perf-cuda.md). The device's x and out and the staging are scratch between
 * calls: nothing the layer keeps. */
moe_status moe_cuda_staging_dma_ms(void *state, int T, float ms[2], moe_error *err);

/* Drops the graphs the device entry keeps; the next call on each (T, x, out) captures again. */
moe_status moe_cuda_drop_graphs(void *state, moe_error *err);

/* Plants (on) or removes (off) a race for the tests to catch: the wgmma GEMM2 starts beside
 * GEMM1's last blocks, as it does, but no longer waits for the h rows it reads, so it may read
 * the previous call's. The checks of the CUDA path must catch it (tests/test_cuda.c). */
moe_status moe_cuda_plant_chain_race(void *state, bool on, moe_error *err);

/* Overwrites a scratch buffer larger than the L2 cache so the next call starts cold. */
moe_status moe_cuda_flush_l2(void *state, moe_error *err);

#ifdef __cplusplus
}
#endif

#endif /* INKLING_CUDA_PROFILE_H */
