/*
 * lab_cuda.c: the lab's timer on the CUDA backend (lab.h, lab_timer): its stage events
 * (opt/cuda/cuda_profile.h), its L2 flush and device memory. A build without CUDA has none.
 */
#include "lab.h"

#ifdef MOE_HAVE_CUDA

#include "../opt/cuda/cuda_profile.h"

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <string.h>

/* Where each timed stage lies in the backend's record. */
static const size_t stage_field[LAB_DEVICE + 1] = {
    [LAB_UPLOAD] = offsetof(moe_cuda_stage_times, upload),
    [LAB_GATE] = offsetof(moe_cuda_stage_times, gate),
    [LAB_ROUTE] = offsetof(moe_cuda_stage_times, route),
    [LAB_GROUP] = offsetof(moe_cuda_stage_times, group),
    [LAB_GEMM1] = offsetof(moe_cuda_stage_times, gemm1),
    [LAB_GEMM2] = offsetof(moe_cuda_stage_times, gemm2),
    [LAB_COMBINE] = offsetof(moe_cuda_stage_times, combine),
    [LAB_DOWNLOAD] = offsetof(moe_cuda_stage_times, download),
    [LAB_SINK_GEMM1] = offsetof(moe_cuda_stage_times, sink_gemm1),
    [LAB_SINK_SWIGLU] = offsetof(moe_cuda_stage_times, sink_swiglu),
    [LAB_SINK_GEMM2] = offsetof(moe_cuda_stage_times, sink_gemm2),
    [LAB_DEVICE] = offsetof(moe_cuda_stage_times, device),
};

static moe_status cuda_flush(const moe_backend *be, void *state, moe_error *err) {
    (void)be;
    return moe_cuda_flush_l2(state, err);
}

static moe_status cuda_call(const moe_backend *be, void *state, int T, const uint16_t *x, float *out,
                            float ms[LAB_DEVICE + 1], moe_error *err) {
    if (!ms) return be->forward(state, T, x, out, NULL, err); /* as a caller makes it */
    moe_cuda_stage_times times;
    moe_status st = moe_cuda_forward_timed(state, T, x, out, &times, err);
    for (int s = 0; s <= LAB_DEVICE && !st; s++) ms[s] = *(const float *)((const char *)&times + stage_field[s]);
    return st;
}

static moe_status cuda_call_on_device(const moe_backend *be, void *state, int T, const void *x_dev,
                                      void *out_dev, float *device_ms, moe_error *err) {
    (void)be;
    if (device_ms) /* one event pair around the graph's launch */
        return moe_cuda_graph_device_ms(state, T, (const uint16_t *)x_dev, (float *)out_dev, device_ms, err);
    /* the serving call itself: no timing events to record and read back */
    return moe_cuda_forward_device_timed(state, T, (const uint16_t *)x_dev, (float *)out_dev, NULL, err);
}

static moe_status cuda_dev_alloc(void **p, size_t bytes, const void *src, moe_error *err) {
    *p = NULL;
    cudaError_t ce = cudaMalloc(p, bytes ? bytes : 1);
    if (ce == cudaSuccess && src) ce = cudaMemcpy(*p, src, bytes, cudaMemcpyHostToDevice);
    if (ce == cudaSuccess) return MOE_OK;
    cudaFree(*p);
    *p = NULL;
    return moe_fail(err, MOE_ERR_DEVICE, "lab: device buffer of %zu bytes: %s", bytes, cudaGetErrorString(ce));
}

static moe_status cuda_dev_read(void *host, const void *dev, size_t bytes, moe_error *err) {
    cudaError_t ce = cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost);
    return ce == cudaSuccess ? MOE_OK : moe_fail(err, MOE_ERR_DEVICE, "lab: reading a device buffer: %s",
                                                 cudaGetErrorString(ce));
}

static void cuda_dev_free(void *p) { cudaFree(p); }

static moe_status cuda_timeline(const moe_backend *be, void *state, int T, const void *x_dev,
                                void *out_dev, lab_span *spans, int cap, int *n, moe_error *err) {
    (void)be;
    moe_cuda_kernel_span k[LAB_MAX_SPANS];
    *n = 0;
    moe_status st = moe_cuda_graph_timeline(state, T, (const uint16_t *)x_dev, (float *)out_dev, k,
                                            cap < LAB_MAX_SPANS ? cap : LAB_MAX_SPANS, n, err);
    for (int i = 0; i < *n && !st; i++) {
        _Static_assert(sizeof spans[i].name == sizeof k[i].name, "one name length");
        memcpy(spans[i].name, k[i].name, sizeof spans[i].name);
        spans[i].name[sizeof spans[i].name - 1] = '\0';
        spans[i].start_us = k[i].start_us, spans[i].end_us = k[i].end_us, spans[i].stream = k[i].stream;
    }
    return st;
}

static moe_status cuda_pinned_dma(const moe_backend *be, void *state, int T, float ms[2],
                                  moe_error *err) {
    (void)be;
    return moe_cuda_staging_dma_ms(state, T, ms, err);
}

const lab_timer *lab_cuda_timer(void) {
    static const lab_timer timer = {cuda_flush,     cuda_call,     cuda_call_on_device,
                                    cuda_dev_alloc, cuda_dev_read, cuda_dev_free,
                                    cuda_timeline,  cuda_pinned_dma};
    return &timer;
}

#else

const lab_timer *lab_cuda_timer(void) { return NULL; }

#endif
