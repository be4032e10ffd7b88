/*
 * cuda_experts.cu: the routed experts as two grouped GEMMs on tensor cores
 * (contract.md [math.experts], [precision.serving]).
 *
 * Rules:
 *   - a block computes one tile of MOE_CUDA_TILE_M grouped assignment rows by EXPERT_BN
 *     output columns of one local expert, taken from the device tile table (no host round
 *     trip); blocks past the table's length return at once;
 *   - weights are read as stored: MXFP4 codes and E8M0 scales are decoded in shared memory to
 *     bf16, which is exact (an E2M1 value times a power of two has at most two significant
 *     bits); NVFP4 codes times their E4M3 scale (one per 16) likewise (at most 2 + 4 significant
 *     bits, within bf16's range); bf16 weights are copied as they are;
 *   - NVFP4's per-expert scale2 multiplies each block dot product in fp32 in the epilogue,
 *     before g and u are rounded (GEMM1) or y is written (GEMM2): one more fp32 rounding, as
 *     the OpenBLAS path does (docs/tolerances.md);
 *   - products on tensor cores (wmma bf16 x bf16, fp32 accumulate), one fixed k order per
 *     output, so results do not depend on the launch or on other tokens;
 *   - GEMM1 (x [T, D] rows gathered by token) produces the interleaved g/u columns of w13;
 *     its epilogue rounds g and u to bf16, computes silu(g) * u from them in fp32
 *     (moe_silu_product, cuda_silu.h) and rounds h once to bf16;
 *   - GEMM2 (h rows of the group) writes y = W2 h in fp32 to the assignment's row.
 */
#include "cuda_device.cuh"

#include <cuda_bf16.h>
#include <mma.h>
#include <stdint.h>

#define EXPERT_THREADS 128
#define EXPERT_BM MOE_CUDA_TILE_M
#define EXPERT_BN 64
#define EXPERT_BK 128
#define EXPERT_PAD 8 /* bf16 elements of padding per shared row, against bank conflicts */

const moe_shape_hint moe_cuda_shape_hints[] = {
    {"MOE_CUDA_TILE_M", MOE_HINT_EXPERT_ROWS, EXPERT_BM, "assignment rows per grouped-GEMM tile"},
    {"MOE_CUDA_GEMV_M", MOE_HINT_EXPERT_ROWS, MOE_CUDA_GEMV_M, "assignment rows per GEMV/mma tile"},
    {"2*MOE_CUDA_GEMV_M", MOE_HINT_EXPERT_ROWS, 2 * MOE_CUDA_GEMV_M, "rows per wide mma tile"},
    {"MOE_CUDA_MMA_NARROW_MAX_T", MOE_HINT_TOKENS, MOE_CUDA_MMA_NARROW_MAX_T,
     "largest T on 8-row mma tiles"},
    {"MOE_CUDA_FRONT_SMALL_MAX_T", MOE_HINT_TOKENS, MOE_CUDA_FRONT_SMALL_MAX_T,
     "largest T on the one-launch gate, routing and grouping"},
    {"MOE_CUDA_SINKS_BESIDE_MIN_T", MOE_HINT_TOKENS, MOE_CUDA_SINKS_BESIDE_MIN_T,
     "fewest T on the small sink GEMMs beside the front end"},
    {"MOE_CUDA_WG_SPLIT_MAX_T", MOE_HINT_TOKENS, MOE_CUDA_WG_SPLIT_MAX_T,
     "largest T on the split-reduction wgmma GEMM1"},
    {"wgmma tile 16", MOE_HINT_EXPERT_ROWS, 16, "assignment rows per small wgmma tile"},
    {"wgmma tile 32", MOE_HINT_EXPERT_ROWS, 32, "assignment rows per middle wgmma tile"},
    {"wgmma tile 128", MOE_HINT_EXPERT_ROWS, 128, "assignment rows per large wgmma tile"},
    {"wgmma rows 64", MOE_HINT_WIDTH, 64, "weight rows per warpgroup, reduction values per chunk"},
    {"wgmma stage 128", MOE_HINT_WIDTH, 128, "reduction values per two-chunk stage (128-row tiles)"},
    {"wgmma stage 256", MOE_HINT_WIDTH, 256, "reduction values per four-chunk stage (16- and 32-row tiles)"},
    {"EXPERT_BN", MOE_HINT_WIDTH, EXPERT_BN, "output columns per grouped-GEMM block"},
    {"EXPERT_BK", MOE_HINT_WIDTH, EXPERT_BK, "reduction elements per grouped-GEMM step"},
    {NULL, (moe_hint_kind)0, 0, NULL},
};

namespace {

using namespace nvcuda;

struct gemm_args {
    const uint16_t *a_src;    /* stage 1: x [T, D]; stage 2: h [T*K, IL] */
    int a_row_div;            /* a source row = assignment / a_row_div (K for x, 1 for h) */
    const uint8_t *w_mx;      /* [E, N, Kdim/2] */
    const uint8_t *w_scale;   /* [E, N, Kdim/B]: B = 32 (MXFP4, E8M0) or 16 (NVFP4, E4M3) */
    const float *w_scale2;    /* NVFP4: [E] per-expert scale2; NULL otherwise */
    const uint16_t *w_bf16;   /* [E, N, Kdim] */
    int N, Kdim, T;
    const int32_t *counts;    /* [E] */
    const int32_t *perm;      /* [E, T] */
    const moe_cuda_tile *tiles;
    const int32_t *n_tiles;
    uint16_t *h_out;          /* stage 1: [T*K, N/2] */
    float *y_out;             /* stage 2: [T*K, N] */
};

/* Routed weight storage a kernel instance reads. */
enum { FMT_BF16 = 0, FMT_MXFP4 = 1, FMT_NVFP4 = 2 };

struct tile_regs {
    uint4 a[4];
    uint4 b[8]; /* block formats use b[0..1] (codes) and scale */
    uint32_t scale[2]; /* MXFP4: the E8M0 byte; NVFP4: the two E4M3 bytes (low, high half) */
};

/* 8 bf16 of a row from column c on, zero past Kdim; vector load when aligned. */
__device__ uint4 load8(const uint16_t *row, int c, int Kdim, bool vec) {
    if (vec && c + 8 <= Kdim) return *reinterpret_cast<const uint4 *>(row + c);
    uint16_t v[8];
    for (int i = 0; i < 8; i++) v[i] = c + i < Kdim ? row[c + i] : (uint16_t)0;
    uint4 r;
    r.x = v[0] | ((uint32_t)v[1] << 16);
    r.y = v[2] | ((uint32_t)v[3] << 16);
    r.z = v[4] | ((uint32_t)v[5] << 16);
    r.w = v[6] | ((uint32_t)v[7] << 16);
    return r;
}

/* E4M3 (float8_e4m3fn) exactly; NaN bytes never reach the device (moe_shard_build refuses them). */
__device__ float e4m3(uint32_t b) {
    const uint32_t e = (b >> 3) & 15u, m = b & 7u;
    const float v = e == 0 ? (float)m * 0x1p-9f : __uint_as_float(((e + 120u) << 23) | (m << 20));
    return (b & 0x80u) ? -v : v;
}

template <int FMT>
__device__ void load_tile(const gemm_args &p, int expert, int n0, int k0, const int *row_src,
                          tile_regs &r) {
    const bool vec = p.Kdim % 8 == 0;
    for (int i = 0; i < 4; i++) {
        const int idx = (int)threadIdx.x + i * EXPERT_THREADS;
        const int row = idx / 16, c = k0 + (idx % 16) * 8;
        const int a = row_src[row];
        r.a[i] = make_uint4(0, 0, 0, 0);
        if (a >= 0 && c < p.Kdim)
            r.a[i] = load8(p.a_src + (size_t)(a / p.a_row_div) * p.Kdim, c, p.Kdim, vec);
    }
    if (FMT == FMT_NVFP4) {
        /* 32 elements: two 8-byte halves (rows are 8-byte aligned: Kdim is a multiple of 16),
         * each with its E4M3 byte; a half past Kdim reads nothing (zero codes, scale 0) */
        const size_t row_bytes = (size_t)p.Kdim / 2, row_scales = (size_t)p.Kdim / 16;
        for (int i = 0; i < 2; i++) {
            const int idx = (int)threadIdx.x + i * EXPERT_THREADS;
            const int row = idx / 4, q = idx % 4, n = n0 + row, c = k0 + q * 32;
            r.b[i] = make_uint4(0, 0, 0, 0);
            r.scale[i] = 0;
            if (n < p.N && c < p.Kdim) {
                const size_t w_row = (size_t)expert * p.N + n;
                const uint2 *src = reinterpret_cast<const uint2 *>(p.w_mx + w_row * row_bytes + c / 2);
                const uint2 lo = src[0];
                r.b[i].x = lo.x, r.b[i].y = lo.y;
                r.scale[i] = p.w_scale[w_row * row_scales + c / 16];
                if (c + 16 < p.Kdim) {
                    const uint2 hi = src[1];
                    r.b[i].z = hi.x, r.b[i].w = hi.y;
                    r.scale[i] |= (uint32_t)p.w_scale[w_row * row_scales + c / 16 + 1] << 8;
                }
            }
        }
    } else if (FMT == FMT_MXFP4) {
        const size_t row_bytes = (size_t)p.Kdim / 2, row_scales = (size_t)p.Kdim / 32;
        for (int i = 0; i < 2; i++) {
            const int idx = (int)threadIdx.x + i * EXPERT_THREADS;
            const int row = idx / 4, q = idx % 4, n = n0 + row, c = k0 + q * 32;
            r.b[i] = make_uint4(0, 0, 0, 0);
            r.scale[i] = 127;
            if (n < p.N && c < p.Kdim) {
                const size_t w_row = (size_t)expert * p.N + n;
                r.b[i] = *reinterpret_cast<const uint4 *>(p.w_mx + w_row * row_bytes + c / 2);
                r.scale[i] = p.w_scale[w_row * row_scales + c / 32];
            }
        }
    } else {
        for (int i = 0; i < 8; i++) {
            const int idx = (int)threadIdx.x + i * EXPERT_THREADS;
            const int row = idx / 16, c = k0 + (idx % 16) * 8, n = n0 + row;
            r.b[i] = make_uint4(0, 0, 0, 0);
            if (n < p.N && c < p.Kdim)
                r.b[i] = load8(p.w_bf16 + ((size_t)expert * p.N + n) * p.Kdim, c, p.Kdim, vec);
        }
    }
}

/* 16 bytes of E2M1 codes (32 elements) times their scale -> 32 bf16 as 16 packed words.
 * MXFP4: one E8M0 byte for all 32; NVFP4: E4M3 bytes, the low one for elements 0..15. */
template <int FMT>
__device__ void decode32(uint4 codes, uint32_t scale_bytes, const float *lut, uint32_t *out) {
    const float s_lo = FMT == FMT_NVFP4 ? e4m3(scale_bytes & 0xFFu) : e8m0(scale_bytes);
    const float s_hi = FMT == FMT_NVFP4 ? e4m3(scale_bytes >> 8) : s_lo;
    const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
#pragma unroll
    for (int w = 0; w < 4; w++)
#pragma unroll
        for (int b = 0; b < 4; b++) {
            const float s = w < 2 ? s_lo : s_hi;
            const uint32_t byte = (words[w] >> (8 * b)) & 0xFFu;
            const uint32_t lo = __float_as_uint(lut[byte & 15u] * s) >> 16; /* exact: truncation */
            const uint32_t hi = __float_as_uint(lut[byte >> 4] * s) >> 16;
            out[w * 4 + b] = lo | (hi << 16);
        }
}

template <int FMT>
__device__ void store_tile(const tile_regs &r, const float *lut,
                           uint16_t (*As)[EXPERT_BK + EXPERT_PAD],
                           uint16_t (*Bs)[EXPERT_BK + EXPERT_PAD]) {
    for (int i = 0; i < 4; i++) {
        const int idx = (int)threadIdx.x + i * EXPERT_THREADS;
        *reinterpret_cast<uint4 *>(&As[idx / 16][(idx % 16) * 8]) = r.a[i];
    }
    if (FMT != FMT_BF16) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int idx = (int)threadIdx.x + i * EXPERT_THREADS;
            uint32_t words[16];
            decode32<FMT>(r.b[i], r.scale[i], lut, words);
            uint4 *dst = reinterpret_cast<uint4 *>(&Bs[idx / 4][(idx % 4) * 32]);
#pragma unroll
            for (int v = 0; v < 4; v++)
                dst[v] = make_uint4(words[4 * v], words[4 * v + 1], words[4 * v + 2], words[4 * v + 3]);
        }
    } else {
        for (int i = 0; i < 8; i++) {
            const int idx = (int)threadIdx.x + i * EXPERT_THREADS;
            *reinterpret_cast<uint4 *>(&Bs[idx / 16][(idx % 16) * 8]) = r.b[i];
        }
    }
}

template <int FMT, int STAGE>
__global__ void __launch_bounds__(EXPERT_THREADS) expert_gemm_kernel(gemm_args p) {
    __shared__ __align__(128) uint16_t As[EXPERT_BM][EXPERT_BK + EXPERT_PAD];
    __shared__ __align__(128) uint16_t Bs[EXPERT_BN][EXPERT_BK + EXPERT_PAD];
    __shared__ __align__(128) float Cs[EXPERT_BM][EXPERT_BN + 4];
    __shared__ int row_src[EXPERT_BM];
    __shared__ float lut[16];

    if ((int)blockIdx.x >= *p.n_tiles) return;
    const moe_cuda_tile tile = p.tiles[blockIdx.x];
    const int n0 = (int)blockIdx.y * EXPERT_BN;
    const int rows = tile_rows(tile, p.counts, p.perm, p.T, EXPERT_BM, row_src);
    fill_e2m1_table(lut);
    __syncthreads();

    const int warp = (int)threadIdx.x / 32, wm = warp / 2, wn = warp % 2;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2];
    wmma::fill_fragment(acc[0], 0.0f);
    wmma::fill_fragment(acc[1], 0.0f);

    tile_regs regs;
    load_tile<FMT>(p, tile.expert, n0, 0, row_src, regs);
    for (int k0 = 0; k0 < p.Kdim; k0 += EXPERT_BK) {
        store_tile<FMT>(regs, lut, As, Bs);
        __syncthreads();
        if (k0 + EXPERT_BK < p.Kdim) /* the next tile's loads fly while this one multiplies */
            load_tile<FMT>(p, tile.expert, n0, k0 + EXPERT_BK, row_src, regs);
#pragma unroll
        for (int ks = 0; ks < EXPERT_BK; ks += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
            wmma::load_matrix_sync(fa, reinterpret_cast<const __nv_bfloat16 *>(&As[wm * 16][ks]),
                                   EXPERT_BK + EXPERT_PAD);
#pragma unroll
            for (int f = 0; f < 2; f++) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
                wmma::load_matrix_sync(
                    fb, reinterpret_cast<const __nv_bfloat16 *>(&Bs[wn * 32 + f * 16][ks]),
                    EXPERT_BK + EXPERT_PAD);
                wmma::mma_sync(acc[f], fa, fb, acc[f]);
            }
        }
        __syncthreads();
    }
    for (int f = 0; f < 2; f++)
        wmma::store_matrix_sync(&Cs[wm * 16][wn * 32 + f * 16], acc[f], EXPERT_BN + 4,
                                wmma::mem_row_major);
    __syncthreads();

    /* NVFP4: the expert's scale2 times each block dot product, one fp32 rounding (__fmul_rn:
     * never contracted); the other formats skip it */
    const float s2 = FMT == FMT_NVFP4 ? p.w_scale2[tile.expert] : 1.0f;
    if (STAGE == 1) { /* column 2j is g_j, 2j+1 is u_j: h_j = bf16(silu(bf16(g)) * bf16(u)) */
        const int IL = p.N / 2;
        for (int idx = (int)threadIdx.x; idx < EXPERT_BM * EXPERT_BN / 2; idx += EXPERT_THREADS) {
            const int r = idx / (EXPERT_BN / 2), j = idx % (EXPERT_BN / 2);
            const int a = row_src[r];
            if (a < 0 || n0 + 2 * j >= p.N) continue;
            const float gs = FMT == FMT_NVFP4 ? __fmul_rn(Cs[r][2 * j], s2) : Cs[r][2 * j];
            const float us = FMT == FMT_NVFP4 ? __fmul_rn(Cs[r][2 * j + 1], s2) : Cs[r][2 * j + 1];
            p.h_out[(size_t)a * IL + n0 / 2 + j] = swiglu_bits(gs, us);
        }
    } else {
        for (int idx = (int)threadIdx.x; idx < EXPERT_BM * EXPERT_BN; idx += EXPERT_THREADS) {
            const int r = idx / EXPERT_BN, c = idx % EXPERT_BN;
            const int a = row_src[r];
            if (a < 0 || n0 + c >= p.N) continue;
            p.y_out[(size_t)a * p.N + n0 + c] = FMT == FMT_NVFP4 ? __fmul_rn(Cs[r][c], s2) : Cs[r][c];
        }
    }
}

template <int STAGE>
moe_status launch(cudaStream_t stream, const moe_cuda_experts *ex, int T, int K,
                  const gemm_args &p, moe_error *err) {
    if (T == 0 || ex->E == 0) return MOE_OK;
    dim3 grid((unsigned)moe_cuda_tile_bound(T, K, ex->E, MOE_CUDA_TILE_M), (unsigned)((p.N + EXPERT_BN - 1) / EXPERT_BN));
    if (grid.y > 65535u)
        return moe_fail(err, MOE_ERR_UNSUPPORTED, "cuda: expert GEMM%d output width %d too large",
                        STAGE, p.N);
    if (ex->nvfp4) {
        expert_gemm_kernel<FMT_NVFP4, STAGE><<<grid, EXPERT_THREADS, 0, stream>>>(p);
        LAUNCH_CHECK(STAGE == 1 ? "expert_gemm_kernel<nvfp4, gemm1>" : "expert_gemm_kernel<nvfp4, gemm2>");
    } else if (ex->mxfp4) {
        expert_gemm_kernel<FMT_MXFP4, STAGE><<<grid, EXPERT_THREADS, 0, stream>>>(p);
        LAUNCH_CHECK(STAGE == 1 ? "expert_gemm_kernel<mxfp4, gemm1>" : "expert_gemm_kernel<mxfp4, gemm2>");
    } else {
        expert_gemm_kernel<FMT_BF16, STAGE><<<grid, EXPERT_THREADS, 0, stream>>>(p);
        LAUNCH_CHECK(STAGE == 1 ? "expert_gemm_kernel<bf16, gemm1>" : "expert_gemm_kernel<bf16, gemm2>");
    }
    return MOE_OK;
}

} // namespace

moe_status moe_cuda_expert_gemm1(cudaStream_t stream, const moe_cuda_experts *ex, int T, int K,
                                 const uint16_t *x, const int32_t *counts, const int32_t *perm,
                                 moe_cuda_tile *tiles, const int32_t *n_tiles,
                                 uint16_t *h, moe_error *err) {
    gemm_args p = {x,      K,     ex->w13_mx, ex->w13_scale, ex->w13_scale2, ex->w13_bf16, 2 * ex->IL,
                   ex->D,  T,     counts,     perm,          tiles,          n_tiles,      h,
                   NULL};
    return launch<1>(stream, ex, T, K, p, err);
}

moe_status moe_cuda_expert_gemm2(cudaStream_t stream, const moe_cuda_experts *ex, int T, int K,
                                 const uint16_t *h, const int32_t *counts, const int32_t *perm,
                                 const moe_cuda_tile *tiles, const int32_t *n_tiles, float *y,
                                 moe_error *err) {
    gemm_args p = {h,     1,  ex->w2_mx, ex->w2_scale, ex->w2_scale2, ex->w2_bf16, ex->D,
                   ex->IL, T, counts,    perm,         tiles,         n_tiles,     NULL,
                   y};
    return launch<2>(stream, ex, T, K, p, err);
}
