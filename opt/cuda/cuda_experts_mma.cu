/*
 * cuda_experts_mma.cu: the routed experts' two GEMMs for calls with few rows per expert
 * (decode), streaming MXFP4 weights through register-decoded tensor-core products. Same
 * results contract as cuda_experts.cu (serving, contract.md [precision.serving]).
 *
 * Why: the SIMT GEMV (cuda_experts_gemv.cu) spends about 7.7 instructions per weight (decode
 * through a shared table, a scale multiply and one FMA per token) and stalls at 0.8 TB/s
 * (docs/perf-cuda.md, profile). Here a weight costs about two instructions: E2M1 codes become
 * bf16 in registers through byte permutes, the products run as mma.m16n8k16 (16 weight rows
 * by 8 tokens, so up to 8 tokens of an expert cost the same), and the E8M0 scale multiplies a
 * block's fp32 partial sum once instead of every weight.
 *
 * Rules:
 *   - a block takes one tile of at most 8 * NT grouped assignment rows of one local expert
 *     (NT token tiles of 8, the mma's n) and TILES * 16 weight rows; its MMA_KSPLIT warps
 *     split the reduction dimension into contiguous slices of 32-value blocks and the block
 *     adds their partial sums in warp order through shared memory, so every output has one
 *     fixed order of additions whatever the launch;
 *   - inside a warp the 16 x 16 operand of one mma holds, for thread (g, t) (g = lane / 4,
 *     t = lane % 4), weight rows g and g + 8 and the codes 8t .. 8t+7 of one 32-value block:
 *     the four threads of a row read the block's 16 bytes together, so one mma pair covers
 *     exactly one block and its E8M0 scale multiplies the pair's fp32 result (exact: a power
 *     of two) before it is added to the row's sum, in block order;
 *   - the mma's k positions are a permutation of the block's 32 values, the same for weights
 *     and activations, so the block's products are those of the reference; products are exact
 *     (E2M1 values have two significant bits) and summed in fp32, as on every tensor-core path;
 *   - GEMM1's rows g and g + 8 are the gate and up rows of one intermediate channel (w13 is
 *     interleaved), so SwiGLU is done in registers with cuda_experts.cu's epilogue: g, u
 *     rounded to bf16, silu(g) * u in fp32, h rounded once to bf16;
 *   - the four threads of a row fetch the scales of four consecutive blocks, one each, and
 *     share them by shuffles (a byte load per thread and block loaded the L1 for nothing);
 *   - MXFP4 only (NVFP4's 16-value blocks take the tensor-core kernels).
 *
 * Measured on an H200 (docs/perf-cuda.md): 1.1-1.8 TB/s at T = 1 to 64, against 0.75-1.2 for
 * the GEMV kernels; tiles of 32 rows (4 token tiles) were slower than 16 at T = 512 and 4096
 * and were dropped.
 */
#include "cuda_device.cuh"

#include <cuda_bf16.h>
#include <stdint.h>

#define MMA_KSPLIT 8 /* warps of a block, each a slice of the reduction */
#define MMA_THREADS (MMA_KSPLIT * 32)
#define MMA_M MOE_CUDA_GEMV_M

namespace {


/* d = a (16 x 16 bf16, row) * b (16 x 8 bf16, col) + c, fp32. */
__device__ __forceinline__ void mma_bf16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1,
                                         const float c[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]),
                   "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

/* The loads of one 32-value block for this thread: its 8 codes of rows g and g + 8 of each
 * weight tile and its token's 8 activations in each token tile. */
template <int TILES, int NT> struct block_regs {
    uint32_t codes[TILES][2];
    uint4 act[NT];
};

/* NT token tiles of 8 (a block's tile holds up to 8 * NT grouped assignment rows), TILES
 * weight tiles of 16 rows a warp, U blocks' loads in flight (U <= 4). */
template <int STAGE, int NT, int TILES, int U>
__global__ void __launch_bounds__(MMA_THREADS, NT == 1 ? 3 : 2) expert_mma_kernel(stream_args p) {
    __shared__ int row_src[8 * NT];
    __shared__ float partial[MMA_KSPLIT][TILES][NT][32][4];
    if ((int)blockIdx.x >= *p.n_tiles) return;
    const moe_cuda_tile tile = p.tiles[blockIdx.x];
    const int rows = tile_rows(tile, p.counts, p.perm, p.T, 8 * NT, row_src);
    __syncthreads();

    const int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32;
    const int g = lane / 4, t = lane % 4;
    /* weight rows of (tile i, operand row g / g + 8): GEMM1 the gate and up rows of channel
     * c, GEMM2 output columns */
    int wrow[TILES][2];
#pragma unroll
    for (int i = 0; i < TILES; i++) {
        if (STAGE == 1) {
            const int c = ((int)blockIdx.y * TILES + i) * 8 + g;
            wrow[i][0] = 2 * c, wrow[i][1] = 2 * c + 1;
        } else {
            const int r = ((int)blockIdx.y * TILES + i) * 16 + g;
            wrow[i][0] = r, wrow[i][1] = r + 8;
        }
    }
    const size_t row_bytes = (size_t)p.Kdim / 2, row_scales = (size_t)p.Kdim / 32;
    const uint8_t *codes[TILES][2], *scales[TILES][2];
#pragma unroll
    for (int i = 0; i < TILES; i++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const bool real = wrow[i][r] < p.N;
            const size_t w_row = (size_t)tile.expert * p.N + (real ? wrow[i][r] : 0);
            codes[i][r] = real ? p.w_mx + w_row * row_bytes + 4 * t : NULL;
            scales[i][r] = real ? p.w_scale + w_row * row_scales : NULL;
        }
    const uint16_t *act_row[NT];
#pragma unroll
    for (int n = 0; n < NT; n++)
        act_row[n] = 8 * n + g < rows
                         ? p.a_src + (size_t)(row_src[8 * n + g] / p.a_row_div) * p.Kdim + 8 * t
                         : NULL;

    /* this warp's slice of the Kdim / 32 blocks */
    const int n_blocks = p.Kdim / 32;
    const int kb_begin = warp * n_blocks / MMA_KSPLIT, kb_end = (warp + 1) * n_blocks / MMA_KSPLIT;
    float acc[TILES][NT][4];
#pragma unroll
    for (int i = 0; i < TILES; i++)
#pragma unroll
        for (int n = 0; n < NT; n++) acc[i][n][0] = acc[i][n][1] = acc[i][n][2] = acc[i][n][3] = 0.0f;
    const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};

    for (int kb0 = kb_begin; kb0 < kb_end; kb0 += U) {
        /* thread t fetches the four scales of block kb0 + t (U == 4 threads a row),
         * the row's threads share them by shuffles below */
        uint32_t my_scales = 0;
        if (t < U && kb0 + t < kb_end) {
#pragma unroll
            for (int i = 0; i < TILES; i++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    if (scales[i][h]) my_scales |= (uint32_t)scales[i][h][kb0 + t] << (8 * (2 * i + h));
        }
        block_regs<TILES, NT> r[U];
#pragma unroll
        for (int u = 0; u < U; u++) { /* all loads first: bytes in flight */
            const int kb = kb0 + u;
#pragma unroll
            for (int i = 0; i < TILES; i++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    r[u].codes[i][h] = kb < kb_end && codes[i][h]
                                           ? __ldcs(reinterpret_cast<const unsigned int *>(
                                                 codes[i][h] + (size_t)kb * 16))
                                           : 0u;
#pragma unroll
            for (int n = 0; n < NT; n++)
                r[u].act[n] = kb < kb_end && act_row[n]
                                  ? __ldg(reinterpret_cast<const uint4 *>(act_row[n] + (size_t)kb * 32))
                                  : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const uint32_t sc = __shfl_sync(0xFFFFFFFFu, my_scales, (lane & ~3) | u);
            if (kb0 + u >= kb_end) break;
#pragma unroll
            for (int i = 0; i < TILES; i++) {
                uint32_t row_g[4], row_g8[4];
                e2m1x8_to_bf16x4(r[u].codes[i][0], row_g);
                e2m1x8_to_bf16x4(r[u].codes[i][1], row_g8);
                /* mma 0: codes 8t..8t+3, mma 1: 8t+4..8t+7 of rows g, g + 8 */
                const uint32_t a0[4] = {row_g[0], row_g8[0], row_g[1], row_g8[1]};
                const uint32_t a1[4] = {row_g[2], row_g8[2], row_g[3], row_g8[3]};
                const float s0 = e8m0((sc >> (16 * i)) & 0xFFu);
                const float s1 = e8m0((sc >> (16 * i + 8)) & 0xFFu);
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    if (NT > 1 && 8 * n >= rows) break;
                    float part[4];
                    mma_bf16(part, a0, r[u].act[n].x, r[u].act[n].y, zero);
                    mma_bf16(part, a1, r[u].act[n].z, r[u].act[n].w, part);
                    acc[i][n][0] = fmaf(s0, part[0], acc[i][n][0]);
                    acc[i][n][1] = fmaf(s0, part[1], acc[i][n][1]);
                    acc[i][n][2] = fmaf(s1, part[2], acc[i][n][2]);
                    acc[i][n][3] = fmaf(s1, part[3], acc[i][n][3]);
                }
            }
        }
    }

    /* the warps' slices, added in warp order by warp 0 */
#pragma unroll
    for (int i = 0; i < TILES; i++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int j = 0; j < 4; j++) partial[warp][i][n][lane][j] = acc[i][n][j];
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int i = 0; i < TILES; i++)
#pragma unroll
        for (int n = 0; n < NT; n++) {
            float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int w = 0; w < MMA_KSPLIT; w++)
#pragma unroll
                for (int j = 0; j < 4; j++) sum[j] += partial[w][i][n][lane][j];
            /* sum[0], sum[1]: row g for tokens 2t, 2t+1 of token tile n; sum[2], sum[3]: row g + 8 */
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int m = 8 * n + 2 * t + e;
                if (m >= rows) continue;
                const int a = row_src[m];
                if (STAGE == 1) {
                    if (wrow[i][0] < p.N)
                        p.h_out[(size_t)a * (p.N / 2) + wrow[i][0] / 2] =
                            swiglu_bits(sum[e], sum[2 + e]);
                } else {
                    if (wrow[i][0] < p.N) p.y_out[(size_t)a * p.N + wrow[i][0]] = sum[e];
                    if (wrow[i][1] < p.N) p.y_out[(size_t)a * p.N + wrow[i][1]] = sum[2 + e];
                }
            }
        }
}

template <int STAGE, int NT, int TILES, int U>
moe_status launch(cudaStream_t stream, const moe_cuda_experts *ex, int T, int K,
                  const stream_args &p, moe_error *err) {
    if (T == 0 || ex->E == 0) return MOE_OK;
    if (!ex->mxfp4)
        return moe_fail(err, MOE_ERR_UNSUPPORTED, "cuda: the mma expert kernels read MXFP4 only");
    const int rows_per_block = TILES * (STAGE == 1 ? 8 : 16); /* channels or columns */
    const int n_rows = STAGE == 1 ? p.N / 2 : p.N;
    dim3 grid((unsigned)moe_cuda_tile_bound(T, K, ex->E, 8 * NT),
              (unsigned)((n_rows + rows_per_block - 1) / rows_per_block));
    if (grid.y > 65535u)
        return moe_fail(err, MOE_ERR_UNSUPPORTED, "cuda: expert mma%d output width %d too large",
                        STAGE, p.N);
    expert_mma_kernel<STAGE, NT, TILES, U><<<grid, MMA_THREADS, 0, stream>>>(p);
    LAUNCH_CHECK(STAGE == 1 ? "expert_mma_kernel<gemm1>" : "expert_mma_kernel<gemm2>");
    return MOE_OK;
}

} // namespace

#define MMA_LAUNCHERS(NT, TILES, U, SUFFIX)                                                               \
    moe_status moe_cuda_expert_mma1##SUFFIX(cudaStream_t stream, const moe_cuda_experts *ex,      \
                                            int T, int K, const uint16_t *x,                      \
                                            const int32_t *counts, const int32_t *perm,           \
                                            moe_cuda_tile *tiles, const int32_t *n_tiles,         \
                                            uint16_t *h, moe_error *err) {                        \
        const stream_args p = stream_args_gemm1(ex, T, K, x, counts, perm, tiles, n_tiles, h);    \
        return launch<1, NT, TILES, U>(stream, ex, T, K, p, err);                                           \
    }                                                                                             \
    moe_status moe_cuda_expert_mma2##SUFFIX(cudaStream_t stream, const moe_cuda_experts *ex,      \
                                            int T, int K, const uint16_t *h,                      \
                                            const int32_t *counts, const int32_t *perm,           \
                                            const moe_cuda_tile *tiles, const int32_t *n_tiles,   \
                                            float *y, moe_error *err) {                           \
        const stream_args p = stream_args_gemm2(ex, T, h, counts, perm, tiles, n_tiles, y);       \
        return launch<2, NT, TILES, U>(stream, ex, T, K, p, err);                                           \
    }

MMA_LAUNCHERS(1, 2, 4, )
MMA_LAUNCHERS(2, 2, 2, _m16)
