/*
 * cuda_device.cuh: device helpers the expert kernels share (cuda_experts.cu, cuda_experts_gemv.cu).
 *
 * Rules: the numeric conversions are exact where the contract says so (contract.md
 * [precision.decode]); bf16 rounding is round-to-nearest-even.
 */
#ifndef INKLING_CUDA_DEVICE_CUH
#define INKLING_CUDA_DEVICE_CUH

#include "cuda_internal.h"

#include <cuda_bf16.h>
#include <stdint.h>

namespace {

__device__ __forceinline__ float round_bf16(float v) {
    return __bfloat162float(__float2bfloat16_rn(v));
}

__device__ __forceinline__ uint16_t bf16_bits(float v) {
    __nv_bfloat16 b = __float2bfloat16_rn(v);
    return *reinterpret_cast<uint16_t *>(&b);
}

/* h = bf16(silu(bf16 g) * bf16 u): g and u from fp32 sums rounded to bf16, the product in
 * double as the reference computes it, rounded once (through fp32) to bf16 bits. */
__device__ __forceinline__ uint16_t swiglu_bits(float g_sum, float u_sum) {
    const double g = (double)round_bf16(g_sum), u = (double)round_bf16(u_sum);
    return bf16_bits((float)(g / (1.0 + exp(-g)) * u));
}

/* E8M0 scale byte to fp32, exactly (2^-127 is an fp32 subnormal). */
__device__ __forceinline__ float e8m0(uint32_t b) {
    return __uint_as_float(b == 0 ? 0x00400000u : b << 23);
}

/* The 16 E2M1 values by code, written by threads 0..15 of the block (sync before use). */
__device__ __forceinline__ void fill_e2m1_table(float *lut) {
    if (threadIdx.x < 16) {
        const float magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
        const float v = magnitude[threadIdx.x & 7u];
        lut[threadIdx.x] = (threadIdx.x & 8u) ? -v : v;
    }
}

/* A tile's grouped assignment rows (at most max_rows) into row_src, -1 past the group's end,
 * written by threads 0..max_rows-1 (sync before use); returns how many are real. */
__device__ __forceinline__ int tile_rows(const moe_cuda_tile &tile, const int32_t *counts,
                                         const int32_t *perm, int T, int max_rows, int *row_src) {
    const int rows = min(max_rows, counts[tile.expert] - tile.row0);
    if ((int)threadIdx.x < max_rows)
        row_src[threadIdx.x] =
            (int)threadIdx.x < rows ? perm[(size_t)tile.expert * T + tile.row0 + threadIdx.x] : -1;
    return rows;
}

} // namespace

#endif /* INKLING_CUDA_DEVICE_CUH */
