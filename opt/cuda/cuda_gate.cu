/*
 * cuda_gate.cu: the gate logits for a few tokens (contract.md [math.gate]), where cuBLASLt
 * spends about 12 us on a 2 MB matrix-vector product (docs/perf-cuda.md).
 *
 * Rules:
 *   - one block a gate row; each thread takes 8-value chunks of the row in turn, multiplies
 *     them with every token's x (products of bf16 values are exact in fp32) and sums in fp32;
 *     the block adds the threads' sums by a fixed butterfly and then the warps in order, so a
 *     logit has one order of additions whatever the launch ([precision.routing]: fp32 sums in
 *     any order, serving);
 *   - for T <= MOE_CUDA_GATE_SMALL_MAX_T and D a multiple of 8 (16-byte rows); other calls
 *     take cuBLASLt.
 */
#include "cuda_device.cuh"

#include <stdint.h>

#define GATE_THREADS 128

namespace {

/* x [T, D] bf16, w [G, D] bf16 -> logits [T, G] fp32; T <= MOE_CUDA_GATE_SMALL_MAX_T. */
__global__ void __launch_bounds__(GATE_THREADS) gate_small_kernel(int T, int D, int G,
                                                                  const uint16_t *x,
                                                                  const uint16_t *w,
                                                                  float *logits) {
    __shared__ float warp_sums[GATE_THREADS / 32][MOE_CUDA_GATE_SMALL_MAX_T];
    const int e = (int)blockIdx.x;
    const uint16_t *row = w + (size_t)e * D;
    float acc[MOE_CUDA_GATE_SMALL_MAX_T];
#pragma unroll
    for (int t = 0; t < MOE_CUDA_GATE_SMALL_MAX_T; t++) acc[t] = 0.0f;
    for (int c = (int)threadIdx.x * 8; c < D; c += GATE_THREADS * 8) {
        float wf[8];
        bf16x8_to_float(__ldcs(reinterpret_cast<const uint4 *>(row + c)), wf);
#pragma unroll
        for (int t = 0; t < MOE_CUDA_GATE_SMALL_MAX_T; t++) {
            if (t >= T) break;
            float xf[8];
            bf16x8_to_float(__ldg(reinterpret_cast<const uint4 *>(x + (size_t)t * D + c)), xf);
#pragma unroll
            for (int i = 0; i < 8; i++) acc[t] = fmaf(wf[i], xf[i], acc[t]);
        }
    }
    const int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32;
#pragma unroll
    for (int t = 0; t < MOE_CUDA_GATE_SMALL_MAX_T; t++) {
#pragma unroll
        for (int off = 16; off > 0; off /= 2) acc[t] += __shfl_xor_sync(0xFFFFFFFFu, acc[t], off);
        if (lane == 0) warp_sums[warp][t] = acc[t];
    }
    __syncthreads();
    if ((int)threadIdx.x < T) {
        float sum = 0.0f;
        for (int k = 0; k < GATE_THREADS / 32; k++) sum += warp_sums[k][threadIdx.x];
        logits[(size_t)threadIdx.x * G + e] = sum;
    }
}

} // namespace

bool moe_cuda_gate_small_fits(int T, int D) {
    return T >= 1 && T <= MOE_CUDA_GATE_SMALL_MAX_T && D % 8 == 0;
}

moe_status moe_cuda_gate_small(cudaStream_t stream, int T, int D, int G, const uint16_t *x,
                               const uint16_t *w, float *logits, moe_error *err) {
    if (!moe_cuda_gate_small_fits(T, D))
        return moe_fail(err, MOE_ERR_INTERNAL, "cuda: small gate kernel called with T %d, D %d",
                        T, D);
    gate_small_kernel<<<G, GATE_THREADS, 0, stream>>>(T, D, G, x, w, logits);
    LAUNCH_CHECK("gate_small_kernel");
    return MOE_OK;
}
