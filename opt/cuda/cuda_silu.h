/*
 * cuda_silu.h: h = silu(g) u gamma as the CUDA path forms it (every GEMM1 epilogue, with
 * gamma = 1, and the sinks' SwiGLU), from bf16 values g and u. Plain C, so that
 * tests/test_cuda_silu.c checks its error bound on any machine.
 *
 * Rules:
 *   - fp32: contract.md [precision.serving] 3 admits an fp32 evaluation of h within its own
 *     error, and docs/tolerances.md widens h by 16 u |h| (u = 2^-24) for it. expf (at most
 *     2 ulp on the GPU), the sum, the quotient and the two products make at most 8 u;
 *   - double where fp32 would lose digits, as the reference evaluates h everywhere: a product
 *     under 2^-100, before or after gamma, may have passed through fp32's subnormals (this
 *     takes in exp(-g) overflowing to infinity for g below about -88, which makes it zero);
 *     one above FLT_MAX may be finite in double (g u overflows, gamma < 1 brings it back); NaN
 *     takes this branch too;
 *   - why: the double exp and quotient (about 40 double instructions an h, on a pipe of half
 *     the fp32 rate) cost 12 us of the routed GEMM1 at T = 512 and 57 at T = 4096
 *     (docs/perf-cuda.md, twenty-first run).
 */
#ifndef INKLING_CUDA_SILU_H
#define INKLING_CUDA_SILU_H

#ifdef __CUDACC__
#define MOE_SILU_HD __host__ __device__
#else
#define MOE_SILU_HD
#endif

#include <float.h>
#include <math.h>

#define MOE_SILU_FP32_MIN_H 0x1p-100f /* smallest |product| kept from fp32 */

static inline MOE_SILU_HD float moe_silu_product(float g, float u, float gamma) {
    const float su = g / (1.0f + expf(-g)) * u, h = su * gamma;
    if (fabsf(su) >= MOE_SILU_FP32_MIN_H && fabsf(h) >= MOE_SILU_FP32_MIN_H && fabsf(h) <= FLT_MAX)
        return h;
    if (g == 0.0f || u == 0.0f) return h; /* an exact zero (or NaN, as in double) */
    return (float)((double)g / (1.0 + exp(-(double)g)) * (double)u * (double)gamma);
}

#endif
