/*
 * cuda_experts_gemv.cu: the routed experts' two GEMMs as weight-streaming kernels, for calls
 * with few rows per expert (decode), where the MXFP4 weight bytes are the floor
 * (docs/perf-cuda.md). Same results contract as cuda_experts.cu (serving,
 * contract.md [precision.serving]).
 *
 * Rules:
 *   - a block takes one tile of at most MOE_CUDA_GEMV_M grouped assignment rows of one local
 *     expert (the tile table is built for that size) and GEMV_ROWS_PER_BLOCK weight rows; each
 *     warp owns two adjacent weight rows: in GEMM1 the gate and up rows of one intermediate
 *     channel (w13 is interleaved), so SwiGLU is done in registers; in GEMM2 two output columns;
 *   - weights stream from memory once per tile, 16 bytes (32 E2M1 codes, one E8M0 scale) per
 *     lane and row, GEMV_UNROLL such loads in flight before any is used; activations are read
 *     through the read-only cache (every warp of the block reads the same rows);
 *   - each weight is decoded to fp32 (an E2M1 value times a power of two: exact) and multiplied
 *     with a bf16 activation, so every product is exact and the sum is an fp32 accumulation,
 *     as on the tensor cores; each lane sums its 32-value chunks in k order and the warp adds
 *     the lanes' partials by a fixed butterfly, so a token's result does not depend on T, on
 *     the tile it shares or on the launch;
 *   - GEMM1's epilogue is cuda_experts.cu's: g, u rounded to bf16, silu(g) * u in fp32,
 *     h rounded once to bf16.
 *
 * Measured (docs/perf-cuda.md): 780-850 GB/s at T = 1, about 1 TB/s at T = 8, well under the
 * copy ceiling. A version with a register double buffer over several row pairs per warp was
 * no faster (same figures at T = 1, slower at T = 8 and 64) and was dropped.
 */
#include "cuda_device.cuh"

#include <cuda_bf16.h>
#include <stdint.h>

#define GEMV_THREADS 256
#define GEMV_WARPS (GEMV_THREADS / 32)
#define GEMV_ROWS_PER_BLOCK (GEMV_WARPS * 2)
#define GEMV_UNROLL 4 /* 16-byte chunks per lane and row loaded before the first is used */
#define GEMV_M MOE_CUDA_GEMV_M

namespace {


__device__ __forceinline__ uint32_t word_of(const uint4 &v, int j) {
    return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

/* 32 values of two weight rows (codes c0, c1 with scales s0, s1) against the rows' tokens:
 * acc[r][m] += w_r[k] * a_m[k] for k in this chunk, in k order. */
__device__ __forceinline__ void chunk_dot(const uint4 &c0, const uint4 &c1, float s0, float s1,
                                          const float *lut, const uint16_t *const *a_rows,
                                          int rows, int col, float (*acc)[GEMV_M]) {
#pragma unroll
    for (int j = 0; j < 4; j++) { /* word j: values 8j .. 8j+7, low nibble first */
        const uint32_t w0 = word_of(c0, j), w1 = word_of(c1, j);
        float v0[8], v1[8];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            v0[i] = lut[(w0 >> (4 * i)) & 15u] * s0;
            v1[i] = lut[(w1 >> (4 * i)) & 15u] * s1;
        }
#pragma unroll
        for (int m = 0; m < GEMV_M; m++) {
            if (m >= rows) break;
            float a[8];
            bf16x8_to_float(__ldg(reinterpret_cast<const uint4 *>(a_rows[m] + col + 8 * j)), a);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                acc[0][m] = fmaf(v0[i], a[i], acc[0][m]);
                acc[1][m] = fmaf(v1[i], a[i], acc[1][m]);
            }
        }
    }
}

template <int STAGE>
__global__ void __launch_bounds__(GEMV_THREADS) expert_gemv_kernel(stream_args p) {
    __shared__ float lut[16];
    __shared__ int row_src[GEMV_M];
    if ((int)blockIdx.x >= *p.n_tiles) return;
    const moe_cuda_tile tile = p.tiles[blockIdx.x];
    const int rows = tile_rows(tile, p.counts, p.perm, p.T, GEMV_M, row_src);
    fill_e2m1_table(lut);
    __syncthreads();

    const int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32;
    const int n = ((int)blockIdx.y * GEMV_WARPS + warp) * 2; /* rows n, n + 1; N is even */
    if (n >= p.N) return;
    const size_t row_bytes = (size_t)p.Kdim / 2, row_scales = (size_t)p.Kdim / 32;
    const size_t w_row = (size_t)tile.expert * p.N + n;
    const uint8_t *codes0 = p.w_mx + w_row * row_bytes, *codes1 = codes0 + row_bytes;
    const uint8_t *scales0 = p.w_scale + w_row * row_scales, *scales1 = scales0 + row_scales;
    const uint16_t *a_rows[GEMV_M];
#pragma unroll
    for (int m = 0; m < GEMV_M; m++)
        a_rows[m] = m < rows ? p.a_src + (size_t)(row_src[m] / p.a_row_div) * p.Kdim : p.a_src;

    float acc[2][GEMV_M];
#pragma unroll
    for (int m = 0; m < GEMV_M; m++) acc[0][m] = acc[1][m] = 0.0f;
    const int step = 32 * 32; /* values a warp covers per chunk */
    for (int base = 0; base < p.Kdim; base += step * GEMV_UNROLL) {
        uint4 c0[GEMV_UNROLL], c1[GEMV_UNROLL];
        uint32_t s0[GEMV_UNROLL], s1[GEMV_UNROLL];
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) { /* all loads first: bytes in flight */
            const int col = base + u * step + lane * 32;
            if (col < p.Kdim) {
                c0[u] = __ldcs(reinterpret_cast<const uint4 *>(codes0 + col / 2));
                c1[u] = __ldcs(reinterpret_cast<const uint4 *>(codes1 + col / 2));
                s0[u] = scales0[col / 32];
                s1[u] = scales1[col / 32];
            }
        }
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
            const int col = base + u * step + lane * 32;
            if (col < p.Kdim)
                chunk_dot(c0[u], c1[u], e8m0(s0[u]), e8m0(s1[u]), lut, a_rows, rows,
                          col, acc);
        }
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2)
#pragma unroll
        for (int m = 0; m < GEMV_M; m++) {
            acc[0][m] += __shfl_xor_sync(0xFFFFFFFFu, acc[0][m], off);
            acc[1][m] += __shfl_xor_sync(0xFFFFFFFFu, acc[1][m], off);
        }
#pragma unroll
    for (int m = 0; m < GEMV_M; m++) {
        if (m != lane || m >= rows) continue; /* lane m writes token row m */
        const int a = row_src[m];
        if (STAGE == 1) { /* row n is g_j, n + 1 is u_j: h_j = bf16(silu(bf16(g)) * bf16(u)) */
            p.h_out[(size_t)a * (p.N / 2) + n / 2] = swiglu_bits(acc[0][m], acc[1][m]);
        } else {
            p.y_out[(size_t)a * p.N + n] = acc[0][m];
            p.y_out[(size_t)a * p.N + n + 1] = acc[1][m];
        }
    }
}

template <int STAGE>
moe_status launch(cudaStream_t stream, const moe_cuda_experts *ex, int T, int K,
                  const stream_args &p, moe_error *err) {
    if (T == 0 || ex->E == 0) return MOE_OK;
    if (!ex->mxfp4)
        return moe_fail(err, MOE_ERR_UNSUPPORTED, "cuda: the GEMV expert kernels read MXFP4 only");
    dim3 grid((unsigned)moe_cuda_tile_bound(T, K, ex->E, GEMV_M),
              (unsigned)((p.N + GEMV_ROWS_PER_BLOCK - 1) / GEMV_ROWS_PER_BLOCK));
    if (grid.y > 65535u)
        return moe_fail(err, MOE_ERR_UNSUPPORTED, "cuda: expert GEMV%d output width %d too large",
                        STAGE, p.N);
    expert_gemv_kernel<STAGE><<<grid, GEMV_THREADS, 0, stream>>>(p);
    LAUNCH_CHECK(STAGE == 1 ? "expert_gemv_kernel<gemm1>" : "expert_gemv_kernel<gemm2>");
    return MOE_OK;
}

} // namespace

moe_status moe_cuda_expert_gemv1(cudaStream_t stream, const moe_cuda_experts *ex, int T, int K,
                                 const uint16_t *x, const int32_t *counts, const int32_t *perm,
                                 moe_cuda_tile *tiles, const int32_t *n_tiles,
                                 uint16_t *h, moe_error *err) {
    const stream_args p = stream_args_gemm1(ex, T, K, x, counts, perm, tiles, n_tiles, h);
    return launch<1>(stream, ex, T, K, p, err);
}

moe_status moe_cuda_expert_gemv2(cudaStream_t stream, const moe_cuda_experts *ex, int T, int K,
                                 const uint16_t *h, const int32_t *counts, const int32_t *perm,
                                 const moe_cuda_tile *tiles, const int32_t *n_tiles, float *y,
                                 moe_error *err) {
    const stream_args p = stream_args_gemm2(ex, T, h, counts, perm, tiles, n_tiles, y);
    return launch<2>(stream, ex, T, K, p, err);
}
