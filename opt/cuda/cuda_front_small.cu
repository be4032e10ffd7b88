/*
 * cuda_front_small.cu: the front of the layer for a few tokens in one launch: gate logits
 * (contract.md [math.gate]), then routing ([routing]) and grouping by the last block to finish.
 *
 * Rules:
 *   - one block a gate row; each thread takes 8-value chunks of the row in turn, multiplies
 *     them with every token's x (products of bf16 values are exact in fp32) and sums in fp32;
 *     the block adds the threads' sums by a fixed butterfly and then the warps in order, so a
 *     logit has one order of additions whatever the launch ([precision.routing]: fp32 sums in
 *     any order, serving);
 *   - each block counts itself done on a ticket after its logits are visible device-wide; the
 *     block that draws the last ticket resets it and routes the T tokens, one warp a token
 *     (cuda_route_warp.cuh), then groups them when they fit one block (cuda_group_block.cuh).
 *     Which block is last changes nothing in what it computes, so the result is the same
 *     whatever the order the blocks ran in;
 *   - why: at T <= 8 the gate, routing and grouping are a few microseconds of work each, and
 *     three launches cost their launch gaps plus the wait of each behind the sinks' GEMMs
 *     (the routing kernel's interval was 26 us at T = 1; docs/perf-cuda.md);
 *   - for T <= MOE_CUDA_FRONT_SMALL_MAX_T and D a multiple of 8 (16-byte rows); other calls
 *     take cuBLASLt and the routing and grouping kernels.
 */
#include "cuda_device.cuh"
#include "cuda_group_block.cuh"
#include "cuda_route_warp.cuh"

#include <stdint.h>

#define FRONT_THREADS GROUP_THREADS /* the last block groups: the grouping's block size */
#define FRONT_WARPS (FRONT_THREADS / 32)
#define FRONT_SMEM_DEFAULT (48 * 1024)

namespace {

/* Block e: logits [T, G] (rows moe_cuda_gate_rows(G) apart) column e from x [T, D] and gate_w
 * [G, D]; the last block: routing and grouping of the T tokens (shapes as
 * moe_cuda_front_args). */
__global__ void __launch_bounds__(FRONT_THREADS) front_small_kernel(moe_cuda_front_args a,
                                                                    size_t route_warp_bytes,
                                                                    int route_warps) {
    extern __shared__ double front_smem[]; /* the last block's routing slices */
    __shared__ float warp_sums[FRONT_WARPS][MOE_CUDA_FRONT_SMALL_MAX_T];
    __shared__ typename block_scan::TempStorage scan_storage;
    __shared__ bool is_last;
    /* a programmatic dependent (the sinks' GEMM1 at T <= 8) may start once every block is here */
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    const int T = a.T, D = a.D, G = a.G;
    const int e = (int)blockIdx.x;
    const uint16_t *row = a.gate_w + (size_t)e * D;
    float acc[MOE_CUDA_FRONT_SMALL_MAX_T];
#pragma unroll
    for (int t = 0; t < MOE_CUDA_FRONT_SMALL_MAX_T; t++) acc[t] = 0.0f;
    for (int c = (int)threadIdx.x * 8; c < D; c += FRONT_THREADS * 8) {
        /* every token's piece is asked for before the first is used: one L2 round trip a
         * chunk, not one a token (docs/perf-cuda.md, fifteenth run) */
        const uint4 wq = __ldcs(reinterpret_cast<const uint4 *>(row + c));
        uint4 xq[MOE_CUDA_FRONT_SMALL_MAX_T];
#pragma unroll
        for (int t = 0; t < MOE_CUDA_FRONT_SMALL_MAX_T; t++)
            xq[t] = t < T ? __ldg(reinterpret_cast<const uint4 *>(a.x + (size_t)t * D + c))
                          : make_uint4(0u, 0u, 0u, 0u);
        float wf[8];
        bf16x8_to_float(wq, wf);
#pragma unroll
        for (int t = 0; t < MOE_CUDA_FRONT_SMALL_MAX_T; t++) {
            if (t >= T) break;
            float xf[8];
            bf16x8_to_float(xq[t], xf);
#pragma unroll
            for (int i = 0; i < 8; i++) acc[t] = fmaf(wf[i], xf[i], acc[t]);
        }
    }
    const int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32;
#pragma unroll
    for (int t = 0; t < MOE_CUDA_FRONT_SMALL_MAX_T; t++) {
#pragma unroll
        for (int off = 16; off > 0; off /= 2) acc[t] += __shfl_xor_sync(0xFFFFFFFFu, acc[t], off);
        if (lane == 0) warp_sums[warp][t] = acc[t];
    }
    __syncthreads();
    if ((int)threadIdx.x < T) {
        float sum = 0.0f;
        for (int k = 0; k < FRONT_WARPS; k++) sum += warp_sums[k][threadIdx.x];
        a.logits[(size_t)threadIdx.x * moe_cuda_gate_rows(G) + e] = sum;
        __threadfence(); /* this logit is visible device-wide before the ticket is drawn */
    }
    __syncthreads();
    if (threadIdx.x == 0) is_last = atomicAdd(a.ticket, 1u) == (unsigned)(G - 1);
    __syncthreads();
    if (!is_last) return;

    __threadfence(); /* every block's logits are visible to this one */
    if (threadIdx.x == 0) *a.ticket = 0; /* for the next launch (stream order) */
    if (warp < route_warps)
        for (int t = warp; t < T; t += route_warps)
            route_token_warp(t, D, a.R, a.K, a.S, a.route_scale, a.global_scale, a.x, a.logits,
                             a.bias, a.ids, a.weights, a.bad,
                             reinterpret_cast<char *>(front_smem) + (size_t)warp * route_warp_bytes);
    if (a.tiers.n <= 0) return; /* the whole block: grouped by the grouping kernels */
    __syncthreads(); /* ids and bad, written by this block, are visible to all of it */
    group_in_one_block(T * a.K, T, a.K, a.E, a.expert_first, a.tiers, a.ids, a.bad,
                       a.chunk_counts, a.counts, a.perm, a.tiles, a.n_tiles, scan_storage);
}

} // namespace

bool moe_cuda_front_small_fits(int T, int D) {
    return T >= 1 && T <= MOE_CUDA_FRONT_SMALL_MAX_T && D % 8 == 0;
}

bool moe_cuda_front_small_groups(int T, int K) {
    return (long)T * K <= (long)GROUP_WARPS * MOE_CUDA_GROUP_CHUNK;
}

moe_status moe_cuda_front_small(cudaStream_t stream, const moe_cuda_front_args *a,
                                moe_error *err) {
    if (!moe_cuda_front_small_fits(a->T, a->D) ||
        (a->tiers.n > 0 && !moe_cuda_front_small_groups(a->T, a->K)))
        return moe_fail(err, MOE_ERR_INTERNAL, "cuda: small front end called with T %d, D %d, "
                        "K %d, %d tiers", a->T, a->D, a->K, a->tiers.n);
    const size_t warp_bytes = (route_warp_smem(a->R, a->K, a->S) + 7) / 8 * 8;
    int warps = (int)(FRONT_SMEM_DEFAULT / warp_bytes);
    warps = warps < 1 ? 1 : warps > FRONT_WARPS ? FRONT_WARPS : warps;
    const size_t smem = (size_t)warps * warp_bytes;
    if (smem > FRONT_SMEM_DEFAULT) /* one routing warp, a large R (cuda_supports bounds it) */
        CUDA_TRY(cudaFuncSetAttribute(front_small_kernel,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    front_small_kernel<<<a->G, FRONT_THREADS, smem, stream>>>(*a, warp_bytes, warps);
    LAUNCH_CHECK("front_small_kernel");
    return MOE_OK;
}
