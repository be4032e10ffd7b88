/*
 * cuda_route.cu: selection and weights on the device (contract.md [routing]), one warp a
 * token, ROUTE_WARPS tokens a block (the arithmetic: cuda_route_warp.cuh).
 *
 * A block a token with block barriers between the picks took 26 us at T = 1 and 407 us at
 * T = 4096 (docs/perf-cuda.md); a warp needs no barrier and a block routes several tokens.
 */
#include "cuda_route_warp.cuh"

#define ROUTE_WARPS 4
#define ROUTE_SMEM_DEFAULT (48 * 1024) /* dynamic shared memory without the opt-in */

namespace {

/* Tokens blockIdx.x * warps + warp; smem: warps slices of warp_bytes. Shapes as
 * moe_cuda_route. */
__global__ void route_kernel(int T, int D, int R, int K, int S, float route_scale,
                             float global_scale, size_t warp_bytes, const uint16_t *x,
                             float *logits, const float *bias, int32_t *ids, float *weights,
                             int32_t *bad) {
    extern __shared__ double route_smem[]; /* double: 8-aligned slices */
    const int warp = (int)(threadIdx.x / 32), warps = (int)(blockDim.x / 32);
    const int t = (int)blockIdx.x * warps + warp;
    if (t >= T) return; /* the whole warp */
    route_token_warp(t, D, R, K, S, route_scale, global_scale, x, logits, bias, ids, weights,
                     bad, reinterpret_cast<char *>(route_smem) + (size_t)warp * warp_bytes);
}

} // namespace

moe_status moe_cuda_route(cudaStream_t stream, int T, int D, int R, int K, int S,
                          float route_scale, float global_scale, const uint16_t *x,
                          float *logits, const float *bias, int32_t *ids, float *weights,
                          int32_t *bad, moe_error *err) {
    if (T == 0) return MOE_OK;
    const size_t warp_bytes = (route_warp_smem(R, K, S) + 7) / 8 * 8;
    int warps = (int)(ROUTE_SMEM_DEFAULT / warp_bytes);
    warps = warps < 1 ? 1 : warps > ROUTE_WARPS ? ROUTE_WARPS : warps;
    const size_t smem = (size_t)warps * warp_bytes;
    if (smem > ROUTE_SMEM_DEFAULT) /* one warp, a large R (cuda_supports bounds it) */
        CUDA_TRY(cudaFuncSetAttribute(route_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)smem));
    const int blocks = (T + warps - 1) / warps;
    route_kernel<<<blocks, warps * 32, smem, stream>>>(T, D, R, K, S, route_scale, global_scale,
                                                       warp_bytes, x, logits, bias, ids, weights,
                                                       bad);
    LAUNCH_CHECK("route_kernel");
    return MOE_OK;
}
