/*
 * cuda_elementwise.cu: the small kernels between and after the GEMMs.
 *
 * Rules:
 *   - sink SwiGLU (contract.md [math.sinks], [precision]): g and u arrive as bf16 from the sink
 *     GEMM1; h = silu(g) * u * gamma_s in fp32 (moe_silu_product, cuda_silu.h), rounded once to
 *     bf16;
 *   - combine (contract.md [math.output], [precision]): per output element, in fp32 and in a fixed
 *     order, the routed slots k = 0..K-1 whose expert is local (w_k * y_k, fused multiply-add),
 *     then the sink sum; one rounding to bf16. No atomics: the result is bitwise reproducible;
 *   - a token whose input row holds NaN/inf (bad) gets an output row of NaN;
 *   - stage rows follow moe_stages: routed rows of bad tokens or non-local slots hold 0, sink
 *     rows of bad tokens hold NaN.
 */
#include "cuda_device.cuh"
#include "cuda_stages.h"

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#define ELEMENTWISE_THREADS 256

namespace {

__device__ float bf16_value(uint16_t bits) { return __uint_as_float((uint32_t)bits << 16); }

/* gu [T, S*2*SIL], weights [T, K+S], h [T, S*SIL]; grid (T, S, Z). VEC channels a thread: 4
 * where SIL % 4 == 0 (one 16-byte load of four (g, u) pairs, one 8-byte store of four h; the rows
 * are then 16- and 8-byte aligned), else 1. Up to SWIGLU_SPREAD_MAX_T tokens Z = ceil(SIL / (VEC
 * threads)), VEC channels a thread, so that its loads and gamma's are one round trip (a loop of
 * them took 7-12 us at T = 1 against 4-7, docs/perf-cuda.md); above, Z = 1 and each thread loops
 * (fewer, larger blocks beside the routed GEMMs). */
#define SWIGLU_SPREAD_MAX_T 64
template <int VEC>
__global__ void sink_swiglu_kernel(int K, int S, int SIL, const uint16_t *gu,
                                   const float *weights, uint16_t *h) {
    const int t = blockIdx.x, s = blockIdx.y;
    const float gamma = weights[(size_t)t * (K + S) + K + s];
    const uint16_t *gu_row = gu + ((size_t)t * S + s) * 2 * SIL;
    uint16_t *h_row = h + ((size_t)t * S + s) * SIL;
    /* word w holds g in its low half, u in its high half */
    auto h_of = [&](uint32_t w) {
        return bf16_bits(moe_silu_product(__uint_as_float(w << 16), __uint_as_float(w & 0xFFFF0000u), gamma));
    };
    const int step = (int)(gridDim.z * blockDim.x) * VEC;
    for (int j = (int)(blockIdx.z * blockDim.x + threadIdx.x) * VEC; j < SIL; j += step) {
        if (VEC == 4) {
            const uint4 q = *reinterpret_cast<const uint4 *>(gu_row + 2 * j);
            uint2 o;
            o.x = (uint32_t)h_of(q.x) | (uint32_t)h_of(q.y) << 16;
            o.y = (uint32_t)h_of(q.z) | (uint32_t)h_of(q.w) << 16;
            *reinterpret_cast<uint2 *>(h_row + j) = o;
        } else {
            h_row[j] = h_of((uint32_t)gu_row[2 * j] | (uint32_t)gu_row[2 * j + 1] << 16);
        }
    }
}

/* Routed slots whose loads a thread issues at once: 8 up to COMBINE_BATCH_MAX_T tokens, where
 * the combine waits on its loads' latency (one round trip a slot cost 1-1.7 us at T <= 64 and
 * 4 us at T = 512); 1 above, where the kernel streams y (8 slots: 139.3 us against 129.5 at
 * T = 4096; docs/perf-cuda.md). */
#define COMBINE_SLOTS 8
#define COMBINE_BATCH_MAX_T 512

/* A thread's VEC output values, each a bf16 value or NaN, as their bf16 patterns (the upper
 * halves, exact), which the host call carries over the bus and widens back. (The fp32 output
 * is stored value by value as it is formed, the form measured for the serving graph.) */
template <int VEC> __device__ __forceinline__ void store_bf16(uint16_t *o, const float (&v)[VEC]) {
    if (VEC == 4) {
        const uint2 q = {(__float_as_uint(v[0]) >> 16) | (__float_as_uint(v[1]) & 0xffff0000u),
                         (__float_as_uint(v[2]) >> 16) | (__float_as_uint(v[3]) & 0xffff0000u)};
        *reinterpret_cast<uint2 *>(o) = q;
    } else {
#pragma unroll
        for (int i = 0; i < VEC; i++) o[i] = (uint16_t)(__float_as_uint(v[i]) >> 16);
    }
}

/* ids [T, K], weights [T, K+S], bad [T], y [T*K, D], sink_y [T, D] or NULL, out [T, D]
 * (fp32, or bf16 patterns). */
/* VEC consecutive elements a thread (float4 loads where D % 4 == 0: about 2x the scalar
 * kernel's bandwidth at T = 4096, docs/perf-cuda.md); each element's sum is the same fixed
 * chain of fused multiply-adds whatever VEC and SLOTS. A thread issues the loads of SLOTS slots
 * (ids, weights and y rows; y rows of slots it then skips are read and unused) before it sums
 * them. */
template <int VEC, int SLOTS, typename OutT>
__global__ void combine_kernel(int D, int K, int S, int E, int expert_first, const int32_t *ids,
                               const float *weights, const int32_t *bad, const float *y,
                               const float *sink_y, OutT *out) {
    const int t = blockIdx.x;
    const int d = (blockIdx.y * blockDim.x + threadIdx.x) * VEC;
    if (d >= D) return;
    auto load_vec = [](const float *src, float (&v)[VEC]) {
        if (VEC == 4) {
            const float4 q = *reinterpret_cast<const float4 *>(src);
            v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
        } else {
#pragma unroll
            for (int i = 0; i < VEC; i++) v[i] = src[i];
        }
    };
    const bool token_bad = bad[t] != 0;
    float sink[VEC];
    if (sink_y) load_vec(sink_y + (size_t)t * D + d, sink);
    float acc[VEC];
#pragma unroll
    for (int i = 0; i < VEC; i++) acc[i] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += SLOTS) {
        int el[SLOTS];
        float w[SLOTS], v[SLOTS][VEC];
#pragma unroll
        for (int j = 0; j < SLOTS; j++) {
            const int k = k0 + j;
            if (k >= K) break;
            el[j] = ids[(size_t)t * K + k] - expert_first;
            w[j] = weights[(size_t)t * (K + S) + k];
            load_vec(y + ((size_t)t * K + k) * D + d, v[j]);
        }
#pragma unroll
        for (int j = 0; j < SLOTS; j++) {
            if (k0 + j >= K) break;
            if (el[j] < 0 || el[j] >= E) continue; /* another rank's expert */
#pragma unroll
            for (int i = 0; i < VEC; i++) acc[i] = fmaf(w[j], v[j][i], acc[i]);
        }
    }
    float v[VEC];
#pragma unroll
    for (int i = 0; i < VEC; i++) {
        if (sink_y) acc[i] += sink[i];
        v[i] = token_bad ? NAN : __bfloat162float(__float2bfloat16_rn(acc[i]));
        if constexpr (sizeof(OutT) == sizeof(float)) out[(size_t)t * D + d + i] = v[i];
    }
    if constexpr (sizeof(OutT) != sizeof(float)) store_bf16(out + (size_t)t * D + d, v);
}

/* See moe_cuda_stage_rows. grid (rows, ceil(cols / threads)). */
__global__ void stage_rows_kernel(int cols, int slots_K, int E, int expert_first,
                                  const int32_t *ids, const int32_t *bad, const uint16_t *src16,
                                  const float *src32, float *dst) {
    const int r = blockIdx.x;
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    const size_t i = (size_t)r * cols + c;
    float v;
    if (slots_K > 0) {
        const int el = ids[r] - expert_first;
        const bool live = !bad[r / slots_K] && el >= 0 && el < E;
        v = live ? (src16 ? bf16_value(src16[i]) : src32[i]) : 0.0f;
    } else {
        v = bad[r] ? NAN : (src16 ? bf16_value(src16[i]) : src32[i]);
    }
    dst[i] = v;
}

unsigned blocks_for(int n) { return (unsigned)((n + ELEMENTWISE_THREADS - 1) / ELEMENTWISE_THREADS); }

template <int VEC, typename OutT>
void launch_combine(cudaStream_t stream, int T, int D, int K, int S, int E, int expert_first,
                    const int32_t *ids, const float *weights, const int32_t *bad, const float *y,
                    const float *sink_y, OutT *out) {
    const dim3 grid((unsigned)T, blocks_for(D / VEC));
    if (T <= COMBINE_BATCH_MAX_T)
        combine_kernel<VEC, COMBINE_SLOTS, OutT><<<grid, ELEMENTWISE_THREADS, 0, stream>>>(
            D, K, S, E, expert_first, ids, weights, bad, y, sink_y, out);
    else
        combine_kernel<VEC, 1, OutT><<<grid, ELEMENTWISE_THREADS, 0, stream>>>(
            D, K, S, E, expert_first, ids, weights, bad, y, sink_y, out);
}

} // namespace

moe_status moe_cuda_sink_swiglu(cudaStream_t stream, int T, int K, int S, int SIL,
                                const uint16_t *gu, const float *weights, uint16_t *h,
                                moe_error *err) {
    if (T == 0 || S == 0 || SIL == 0) return MOE_OK;
    const bool quads = T > SWIGLU_SPREAD_MAX_T && SIL % 4 == 0 && (uintptr_t)gu % 16 == 0 &&
                       (uintptr_t)h % 8 == 0;
    const int threads_needed = quads ? SIL / 4 : SIL;
    const dim3 grid((unsigned)T, (unsigned)S, T <= SWIGLU_SPREAD_MAX_T ? blocks_for(threads_needed) : 1u);
    if (quads)
        sink_swiglu_kernel<4><<<grid, ELEMENTWISE_THREADS, 0, stream>>>(K, S, SIL, gu, weights, h);
    else
        sink_swiglu_kernel<1><<<grid, ELEMENTWISE_THREADS, 0, stream>>>(K, S, SIL, gu, weights, h);
    LAUNCH_CHECK("sink_swiglu_kernel");
    return MOE_OK;
}

namespace {

/* g, u, gamma, h [n] */
__global__ void silu_products_kernel(int n, const float *g, const float *u, const float *gamma,
                                     float *h) {
    const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) h[i] = moe_silu_product(g[i], u[i], gamma[i]);
}

/* The four arrays through one device buffer [4][n]. */
moe_status silu_on_stream(cudaStream_t st, float *buf, int n, const float *g, const float *u,
                          const float *gamma, float *h, moe_error *err) {
    const size_t bytes = (size_t)n * sizeof(float);
    CUDA_TRY(cudaMemcpyAsync(buf, g, bytes, cudaMemcpyHostToDevice, st));
    CUDA_TRY(cudaMemcpyAsync(buf + n, u, bytes, cudaMemcpyHostToDevice, st));
    CUDA_TRY(cudaMemcpyAsync(buf + 2 * (size_t)n, gamma, bytes, cudaMemcpyHostToDevice, st));
    silu_products_kernel<<<blocks_for(n), ELEMENTWISE_THREADS, 0, st>>>(n, buf, buf + n, buf + 2 * (size_t)n,
                                                                       buf + 3 * (size_t)n);
    LAUNCH_CHECK("silu_products_kernel");
    CUDA_TRY(cudaMemcpyAsync(h, buf + 3 * (size_t)n, bytes, cudaMemcpyDeviceToHost, st));
    CUDA_TRY(cudaStreamSynchronize(st));
    return MOE_OK;
}

} // namespace

extern "C" moe_status moe_cuda_silu_run(int device, int n, const float *g, const float *u,
                                        const float *gamma, float *h, moe_error *err) {
    if (n < 0 || (n > 0 && (!g || !u || !gamma || !h)))
        return moe_fail(err, MOE_ERR_ARG, "cuda silu: bad arguments (n %d)", n);
    if (n == 0) return MOE_OK;
    CUDA_TRY(cudaSetDevice(device));
    cudaStream_t st = NULL;
    CUDA_TRY(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    float *buf = NULL;
    moe_status s = MOE_OK;
    const cudaError_t e = cudaMalloc((void **)&buf, 4 * (size_t)n * sizeof(float));
    if (e != cudaSuccess)
        s = moe_fail(err, MOE_ERR_DEVICE, "cuda: cudaMalloc of the silu buffers failed: %s",
                     cudaGetErrorString(e));
    else
        s = silu_on_stream(st, buf, n, g, u, gamma, h, err);
    cudaStreamSynchronize(st); /* after a failure too, before the buffer goes */
    cudaFree(buf);
    cudaStreamDestroy(st);
    return s;
}

moe_status moe_cuda_combine(cudaStream_t stream, int T, int D, int K, int S, int E,
                            int expert_first, const int32_t *ids, const float *weights,
                            const int32_t *bad, const float *y, const float *sink_y, float *out,
                            uint16_t *out16, moe_error *err) {
    if (T == 0) return MOE_OK;
    if ((out == NULL) == (out16 == NULL))
        return moe_fail(err, MOE_ERR_ARG, "cuda combine: give exactly one of out and out16");
    const bool vec4 = D % 4 == 0;
    if (out16 && vec4)
        launch_combine<4>(stream, T, D, K, S, E, expert_first, ids, weights, bad, y, sink_y, out16);
    else if (out16)
        launch_combine<1>(stream, T, D, K, S, E, expert_first, ids, weights, bad, y, sink_y, out16);
    else if (vec4)
        launch_combine<4>(stream, T, D, K, S, E, expert_first, ids, weights, bad, y, sink_y, out);
    else
        launch_combine<1>(stream, T, D, K, S, E, expert_first, ids, weights, bad, y, sink_y, out);
    LAUNCH_CHECK("combine_kernel");
    return MOE_OK;
}

moe_status moe_cuda_stage_rows(cudaStream_t stream, int rows, int cols, int slots_K, int E,
                               int expert_first, const int32_t *ids, const int32_t *bad,
                               const uint16_t *src16, const float *src32, float *dst,
                               moe_error *err) {
    if (rows == 0 || cols == 0) return MOE_OK;
    stage_rows_kernel<<<dim3((unsigned)rows, blocks_for(cols)), ELEMENTWISE_THREADS, 0, stream>>>(
        cols, slots_K, E, expert_first, ids, bad, src16, src32, dst);
    LAUNCH_CHECK("stage_rows_kernel");
    return MOE_OK;
}
