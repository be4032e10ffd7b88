/*
 * cuda_device.cuh: device helpers the expert and elementwise kernels share.
 *
 * Rules: the numeric conversions are exact where the contract says so (contract.md
 * [precision.decode]); bf16 rounding is round-to-nearest-even.
 */
#ifndef INKLING_CUDA_DEVICE_CUH
#define INKLING_CUDA_DEVICE_CUH

#include "cuda_internal.h"
#include "cuda_silu.h"

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

/* h = bf16(silu(bf16 g) * bf16 u): g and u from fp32 sums rounded to bf16, h rounded once to
 * bf16 bits. */
__device__ __forceinline__ uint16_t swiglu_bits(float g_sum, float u_sum) {
    return bf16_bits(moe_silu_product(round_bf16(g_sum), round_bf16(u_sum), 1.0f));
}
/* The same from fp32 alone, without a branch: *stands says whether it is h (else swiglu_bits
 * takes the double branch). */
__device__ __forceinline__ uint16_t swiglu_bits_fp32(float g_sum, float u_sum, int *stands) {
    return bf16_bits(moe_silu_product_fp32(round_bf16(g_sum), round_bf16(u_sum), 1.0f, stands));
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

/* Eight E2M1 codes (element 2i in the low nibble of byte i) to four bf16 pairs, unscaled:
 * pair j holds codes 2j (low half) and 2j+1. Magnitudes through byte-permute tables of the
 * eight bf16 patterns' low and high bytes; the sign bits are moved onto the high bytes. */
__device__ __forceinline__ void e2m1x8_to_bf16x4(uint32_t w, uint32_t out[4]) {
    const uint32_t lo_tab0 = 0xC0800000u, lo_tab1 = 0xC0804000u; /* 0 .5 1 1.5 | 2 3 4 6 */
    const uint32_t hi_tab0 = 0x3F3F3F00u, hi_tab1 = 0x40404040u;
    const uint32_t mag = w & 0x77777777u, mag_hi = mag >> 16;
    const uint32_t w4 = w << 4; /* byte i's msb: the sign of code 2i; w's: code 2i+1 */
    const uint32_t lo_a = __byte_perm(lo_tab0, lo_tab1, mag);
    const uint32_t lo_b = __byte_perm(lo_tab0, lo_tab1, mag_hi);
    const uint32_t hi_a = __byte_perm(hi_tab0, hi_tab1, mag) |
                          (__byte_perm(w4, w, 0x5140) & 0x80808080u);
    const uint32_t hi_b = __byte_perm(hi_tab0, hi_tab1, mag_hi) |
                          (__byte_perm(w4, w, 0x7362) & 0x80808080u);
    out[0] = __byte_perm(lo_a, hi_a, 0x5140);
    out[1] = __byte_perm(lo_a, hi_a, 0x7362);
    out[2] = __byte_perm(lo_b, hi_b, 0x5140);
    out[3] = __byte_perm(lo_b, hi_b, 0x7362);
}

/* Eight bf16 (one uint4, element 0 in the low half of .x) to fp32, exactly. */
__device__ __forceinline__ void bf16x8_to_float(const uint4 &v, float *f) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
}

/* What a weight-streaming expert kernel (GEMV, mma) reads and writes for one of the two GEMMs. */
struct stream_args {
    const uint16_t *a_src;  /* stage 1: x [T, D]; stage 2: h [T*K, IL] */
    int a_row_div;          /* a source row = assignment / a_row_div (K for x, 1 for h) */
    const uint8_t *w_mx;    /* [E, N, Kdim/2] */
    const uint8_t *w_scale; /* [E, N, Kdim/32] */
    int N, Kdim, T;         /* N weight rows: 2*IL (g/u interleaved) or D */
    const int32_t *counts;  /* [E] */
    const int32_t *perm;    /* [E, T] */
    const moe_cuda_tile *tiles;
    const int32_t *n_tiles;
    uint16_t *h_out;        /* stage 1: [T*K, N/2] */
    float *y_out;           /* stage 2: [T*K, N] */
    int rows_lo, rows_hi;   /* wgmma tiers: the tier's tiles hold rows_lo < (rows left in the
                               expert from the tile's first) <= rows_hi (the grouping puts them
                               in the table's first part or the tier's list); rows_hi 0: one size */
    const int32_t *tier_count, *tier_list; /* a wgmma tier above the first: its tiles' count and
                               table indices (the grouping's lists), else NULL */
};

/* GEMM1 (x -> h through w13) and GEMM2 (h -> y through w2) as stream_args. */
inline stream_args stream_args_gemm1(const moe_cuda_experts *ex, int T, int K, const uint16_t *x,
                                     const int32_t *counts, const int32_t *perm,
                                     const moe_cuda_tile *tiles, const int32_t *n_tiles,
                                     uint16_t *h) {
    stream_args p = {x, K, ex->w13_mx, ex->w13_scale, 2 * ex->IL, ex->D, T, counts, perm, tiles,
                     n_tiles, h, NULL, 0, 0, NULL, NULL};
    return p;
}
inline stream_args stream_args_gemm2(const moe_cuda_experts *ex, int T, const uint16_t *h,
                                     const int32_t *counts, const int32_t *perm,
                                     const moe_cuda_tile *tiles, const int32_t *n_tiles, float *y) {
    stream_args p = {h, 1, ex->w2_mx, ex->w2_scale, ex->D, ex->IL, T, counts, perm, tiles, n_tiles,
                     NULL, y, 0, 0, NULL, NULL};
    return p;
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
