/*
 * cuda_sinks_small.cu: the sinks' two GEMMs for a few tokens (T <= 8), out [T, N] =
 * a [T, Kd] times w [N, Kd]^T, bf16 operands, fp32 sums; out in bf16 (the sinks' GEMM1: g and
 * u rounded to nearest even, contract.md [precision.serving] 2) or fp32 (GEMM2: the sinks' sum).
 *
 * Rules:
 *   - mma.sync m16n8k16 multiplies 16 weight rows by the 8 token columns (tokens past T are
 *     zeros and never stored). Lane (g, t) loads 16 bytes of weight rows g and g + 8 and of
 *     token g's row at value 8t of each 32-value group, and those 8 values feed two mmas: the
 *     mma's k order is then a permutation of the group's, the same one for both operands, so
 *     the products are those of the plain GEMM. Weights go from global memory straight to the
 *     fragment registers, read once (no L1 line kept), SMALL_GROUPS groups a lane a step;
 *   - a block is SMALL_WARPS warps on the same 16 rows; warp w takes the groups w,
 *     w + SMALL_WARPS, ... (the block's warps read adjacent 64-byte pieces of a row), and the
 *     warps' sums are added in warp order through shared memory: one order of additions
 *     whatever the launch;
 *   - why: a grid queued on another stream does not start beside a running grid of this size
 *     (docs/perf-cuda.md, eighth run), so the sinks' GEMM1 never streamed while the front end
 *     routed. This GEMM1 is launched as the front end's programmatic dependent on the routed
 *     stream instead (the front end's blocks let it launch at their start), and waits for the
 *     front end only at its end;
 *   - where: Kd a multiple of 8 and a, w 16-byte aligned (moe_cuda_sinks_small_fits).
 */
#include "cuda_device.cuh"

#include <stdint.h>

#define SMALL_WARPS 8 /* warps a block, each a slice of the reduction */
/* 32-value groups a lane loads a step (4: up to 1.7 us slower at T = 2..8). ptxas, left to
 * choose, gives the kernel 48 registers, too few to hold a step's loads at once; asked for two
 * blocks a multiprocessor it used 121, and the front end beside the kernel ran slower: T = 8
 * in 239.7 us against 229.1 (docs/perf-cuda.md, ninth run). */
#define SMALL_GROUPS 8
#define SMALL_BLOCKS_PER_SM 2 /* blocks a multiprocessor (3 was no faster) */

namespace {

/* 16 bytes read once: no L1 line kept. */
__device__ __forceinline__ uint4 load_once(const uint16_t *src) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(src));
    return v;
}

/* c += A (16 x 16, rows g and g + 8 of a lane: a0..a3) times B (16 x 8, column g: b0, b1). */
__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Rows 16 q .. 16 q + 15 of out [T, N] for q = blockIdx.x, + gridDim.x, ... (OutT uint16_t: bf16
 * bits; float) from w [N, Kd] and a [T, Kd]. */
template <typename OutT>
__global__ void __launch_bounds__(SMALL_WARPS * 32) sinks_small_kernel(int T, int N, int Kd,
                                                                       const uint16_t *w,
                                                                       const uint16_t *a,
                                                                       OutT *out) {
    __shared__ float warp_sums[SMALL_WARPS - 1][4][32];
    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const bool token_real = g < T;
    const uint16_t *token = a + (size_t)(token_real ? g : 0) * Kd;
    const int n_groups = (Kd + 31) / 32;
    for (int q = (int)blockIdx.x; 16 * q < N; q += (int)gridDim.x) {
        const uint16_t *rows[2];
        bool row_real[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = 16 * q + 8 * h + g;
            row_real[h] = row < N;
            rows[h] = w + (size_t)(row_real[h] ? row : 0) * Kd;
        }
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int g0 = warp; g0 < n_groups; g0 += SMALL_WARPS * SMALL_GROUPS) {
            uint4 wv[SMALL_GROUPS][2], xv[SMALL_GROUPS];
            const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
            for (int i = 0; i < SMALL_GROUPS; i++) {
                const int k = 32 * (g0 + SMALL_WARPS * i) + 8 * t;
                const bool real = g0 + SMALL_WARPS * i < n_groups && k < Kd;
#pragma unroll
                for (int h = 0; h < 2; h++) wv[i][h] = real && row_real[h] ? load_once(rows[h] + k) : zero;
                xv[i] = real && token_real ? __ldg(reinterpret_cast<const uint4 *>(token + k)) : zero;
            }
#pragma unroll
            for (int i = 0; i < SMALL_GROUPS; i++) {
                mma_bf16(c, wv[i][0].x, wv[i][1].x, wv[i][0].y, wv[i][1].y, xv[i].x, xv[i].y);
                mma_bf16(c, wv[i][0].z, wv[i][1].z, wv[i][0].w, wv[i][1].w, xv[i].z, xv[i].w);
            }
        }
        /* the warps' sums in warp order; warp 0 stores */
        if (warp > 0)
#pragma unroll
            for (int j = 0; j < 4; j++) warp_sums[warp - 1][j][lane] = c[j];
        __syncthreads();
        if (warp == 0)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float sum = c[j];
#pragma unroll
                for (int k = 0; k < SMALL_WARPS - 1; k++) sum += warp_sums[k][j][lane];
                /* fragment element j: row g (j < 2) or g + 8, token column 2t + j % 2 */
                const int row = 16 * q + 8 * (j / 2) + g, col = 2 * t + j % 2;
                if (row >= N || col >= T) continue;
                if constexpr (sizeof(OutT) == 2)
                    out[(size_t)col * N + row] = bf16_bits(sum);
                else
                    out[(size_t)col * N + row] = sum;
            }
        __syncthreads(); /* warp_sums is free again */
    }
    /* Launched as the front end's programmatic dependent (GEMM1 only), this grid may start and
     * end before the front end does; waiting here for the front end's end makes the work queued
     * after this kernel come after the front end too. Without the launch attribute: no wait. */
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

template <typename OutT>
moe_status launch(cudaStream_t stream, int sm_count, int T, int N, int Kd, const uint16_t *w,
                  const uint16_t *a, OutT *out, bool beside_previous, moe_error *err) {
    if (!moe_cuda_sinks_small_fits(T, Kd, w, a))
        return moe_fail(err, MOE_ERR_INTERNAL, "cuda: small sink GEMM called with T %d, Kd %d", T, Kd);
    if (N == 0) return MOE_OK;
    const int row_groups = (N + 15) / 16, most = SMALL_BLOCKS_PER_SM * (sm_count > 0 ? sm_count : 1);
    const int blocks = row_groups < most ? row_groups : most;
    /* the largest carveout, as a kernel meant to share its multiprocessors with another's
     * blocks must ask (docs/perf-cuda.md, eighth run) */
    CUDA_TRY(cudaFuncSetAttribute(sinks_small_kernel<OutT>,
                                  cudaFuncAttributePreferredSharedMemoryCarveout,
                                  cudaSharedmemCarveoutMaxShared));
    cudaLaunchAttribute beside;
    beside.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    beside.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)blocks), cfg.blockDim = dim3(SMALL_WARPS * 32);
    cfg.dynamicSmemBytes = 0, cfg.stream = stream;
    cfg.attrs = &beside, cfg.numAttrs = beside_previous ? 1 : 0;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, sinks_small_kernel<OutT>, T, N, Kd, w, a, out);
    if (e != cudaSuccess)
        return moe_fail(err, MOE_ERR_DEVICE, "cuda: launching sinks_small_kernel (%d blocks): %s",
                        blocks, cudaGetErrorString(e));
    return MOE_OK;
}

} // namespace

bool moe_cuda_sinks_small_fits(int T, int Kd, const void *w, const void *a) {
    return T >= 1 && T <= MOE_CUDA_SINKS_SMALL_MAX_T && Kd > 0 && Kd % 8 == 0 &&
           (uintptr_t)w % 16 == 0 && (uintptr_t)a % 16 == 0;
}

moe_status moe_cuda_sinks_small_gemm1(cudaStream_t stream, int sm_count, int T, int N, int Kd,
                                      const uint16_t *w, const uint16_t *a, uint16_t *out,
                                      bool beside_previous, moe_error *err) {
    return launch(stream, sm_count, T, N, Kd, w, a, out, beside_previous, err);
}

moe_status moe_cuda_sinks_small_gemm2(cudaStream_t stream, int sm_count, int T, int N, int Kd,
                                      const uint16_t *w, const uint16_t *a, float *out,
                                      moe_error *err) {
    return launch(stream, sm_count, T, N, Kd, w, a, out, false, err);
}
