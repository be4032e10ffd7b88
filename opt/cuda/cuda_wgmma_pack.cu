/*
 * cuda_wgmma_pack.cu: create()'s one re-layout of the routed experts' MXFP4 weights for the
 * wgmma kernels (cuda_experts_wgmma.cu, whose rules describe the layout): per row tile and
 * chunk (cuda_wgmma_tiles.cuh), each lane's 16 bytes of codes at the bits cuda_wgmma_layout.h
 * names and one scale word per row pair, then a flag byte an expert.
 */
#include "cuda_device.cuh"
#include "cuda_wgmma_layout.h"
#include "cuda_wgmma_tiles.cuh"

#include <stdint.h>

namespace {

/* One 32-bit word of lane (g, t) of warp w, k16 step s of chunk kc: the codes of its four A
 * fragment registers, j = 0: values (k, k+1) of row g, 1: of row g + 8, 2: (k+8, k+9) of row
 * g, 3: of row g + 8, k = 16 s + 2 t, at the bits cuda_wgmma_layout.h names. One thread a
 * word. */
__global__ void wgmma_pack_codes(int stage, int E, int N, int Kdim, const uint8_t *w_mx,
                                 uint32_t *out) {
    const int n_rt = wg_row_tiles(stage, N), n_kc = wg_chunks(Kdim);
    const size_t words = (size_t)E * n_rt * n_kc * WG_ROWS / 16 * 32 * 4;
    const size_t row_bytes = (size_t)Kdim / 2;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words;
         i += (size_t)gridDim.x * blockDim.x) {
        const int s = (int)(i % 4), lane = (int)(i / 4 % 32), w = (int)(i / 128 % (WG_ROWS / 16));
        const size_t rest = i / (128 * (WG_ROWS / 16));
        const int kc = (int)(rest % n_kc), rt = (int)(rest / n_kc % n_rt), e = (int)(rest / n_kc / n_rt);
        const int g = lane / 4, t = lane % 4;
        uint32_t word = 0;
        for (int j = 0; j < 4; j++) {
            const int src = wg_source_row(stage, N, rt, 16 * w + g + 8 * (j & 1));
            const int k = WG_KC * kc + 16 * s + 2 * t + 8 * (j >> 1);
            if (src < 0 || k >= Kdim) continue;
            const uint32_t pair = w_mx[((size_t)e * N + src) * row_bytes + k / 2];
            for (int h = 0; h < 2; h++)
                for (int b = 0; b < 4; b++) /* bit by bit: a group may wrap past bit 31 */
                    word |= ((pair >> (4 * h + b)) & 1u) << moe_wg_code_bit(j, h, b);
        }
        out[i] = word;
    }
}

/* The scale word of row pair (g, g + 8) of warp w, chunk kc: bytes 0..3 the E8M0 of row g and
 * of row g + 8 for block 2 kc, then for block 2 kc + 1 (127, one, past the matrix). */
__global__ void wgmma_pack_scales(int stage, int E, int N, int Kdim, const uint8_t *w_scale,
                                  uint32_t *out) {
    const int n_rt = wg_row_tiles(stage, N), n_kc = wg_chunks(Kdim);
    const size_t words = (size_t)E * n_rt * n_kc * WG_ROWS / 16 * 8;
    const size_t row_scales = (size_t)Kdim / 32;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words;
         i += (size_t)gridDim.x * blockDim.x) {
        const int g = (int)(i % 8), w = (int)(i / 8 % (WG_ROWS / 16));
        const size_t rest = i / (8 * (WG_ROWS / 16));
        const int kc = (int)(rest % n_kc), rt = (int)(rest / n_kc % n_rt), e = (int)(rest / n_kc / n_rt);
        uint32_t word = 0;
        for (int b = 0; b < 4; b++) {
            const int src = wg_source_row(stage, N, rt, 16 * w + g + 8 * (b & 1));
            const int blk = 2 * kc + (b >> 1);
            const uint32_t e8 = src >= 0 && (size_t)blk < row_scales
                                    ? w_scale[((size_t)e * N + src) * row_scales + blk]
                                    : 127u;
            word |= e8 << (8 * b);
        }
        out[i] = word;
    }
}

/* wg_flags_offset's byte of expert blockIdx.x from its scales (per_expert E8M0 bytes). */
__global__ void wgmma_flag_experts(size_t per_expert, const uint8_t *w_scale, uint8_t *flags) {
    const uint8_t *mine = w_scale + blockIdx.x * per_expert;
    int big = 0;
    for (size_t i = threadIdx.x; i < per_expert; i += blockDim.x) big |= mine[i] > WG_ONE_PRODUCT_MAX_SCALE;
    big = __syncthreads_or(big);
    if (threadIdx.x == 0) flags[blockIdx.x] = (uint8_t)big;
}

template <int STAGE>
moe_status pack(cudaStream_t stream, int E, int N, int Kdim, const uint8_t *w_mx,
                const uint8_t *w_scale, uint8_t **codes, uint8_t **scales, moe_error *err) {
    const size_t chunks = (size_t)E * wg_row_tiles(STAGE, N) * wg_chunks(Kdim);
    CUDA_TRY(cudaMalloc((void **)codes, chunks * WG_A_BYTES > 0 ? chunks * WG_A_BYTES : 1));
    CUDA_TRY(cudaMalloc((void **)scales, chunks * WG_S_BYTES + (size_t)E + 1));
    if (chunks == 0) return MOE_OK;
    wgmma_flag_experts<<<E, 256, 0, stream>>>((size_t)N * (Kdim / 32), w_scale,
                                              *scales + wg_flags_offset(STAGE, E, N, Kdim));
    LAUNCH_CHECK("wgmma_flag_experts");
    wgmma_pack_codes<<<1024, 256, 0, stream>>>(STAGE, E, N, Kdim, w_mx, (uint32_t *)*codes);
    LAUNCH_CHECK("wgmma_pack_codes");
    wgmma_pack_scales<<<256, 256, 0, stream>>>(STAGE, E, N, Kdim, w_scale, (uint32_t *)*scales);
    LAUNCH_CHECK("wgmma_pack_scales");
    return MOE_OK;
}

} // namespace

moe_status moe_cuda_wgmma_pack(cudaStream_t stream, moe_cuda_experts *ex, moe_error *err) {
    moe_status st = pack<1>(stream, ex->E, 2 * ex->IL, ex->D, ex->w13_mx, ex->w13_scale,
                            &ex->w13_wg, &ex->w13_wg_scale, err);
    if (!st)
        st = pack<2>(stream, ex->E, ex->D, ex->IL, ex->w2_mx, ex->w2_scale, &ex->w2_wg,
                     &ex->w2_wg_scale, err);
    return st;
}
