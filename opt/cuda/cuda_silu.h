/*
 * cuda_silu.h: h = silu(g) u gamma as the CUDA path forms it (every GEMM1 epilogue, with
 * gamma = 1, and the sinks' SwiGLU), from bf16 values g and u. Plain C, so that
 * tests/test_cuda_silu.c checks its error bound on any machine (and on the GPU, where one is).
 *
 * Rules:
 *   - fp32: contract.md [precision.serving] 3 admits an fp32 evaluation of h within its own
 *     error, and docs/tolerances.md widens h by 16 u |h| (u = 2^-24) for it. expf (at most
 *     2 ulp on the GPU: 4 u) and the sum make 1 + exp(-g) within 5 u, its reciprocal (1 ulp on
 *     the GPU: 2 u) 7 u, and the three products 10 u, the bound tests/test_cuda_silu.c checks
 *     on the host and on the GPU (measured there: 4.3 u);
 *   - no branch on the fp32 way (moe_silu_product_fp32), so that a GEMM1 epilogue interleaves
 *     its columns' chains and takes the double branch afterwards, only where it is needed;
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

/* 1 / d for d >= 1, within 1 ulp: on the GPU the approximate reciprocal (one instruction, where
 * a correctly rounded quotient is about nine and a branch); a result below FLT_MIN is flushed to
 * zero, which makes the product zero and sends it to the double branch. */
static inline MOE_SILU_HD float moe_silu_reciprocal(float d) {
#ifdef __CUDA_ARCH__
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
    return r;
#else
    return 1.0f / d;
#endif
}

/* h in fp32 alone, without a branch; *stands says whether it is h (else moe_silu_product takes
 * the double branch): its product kept clear of fp32's subnormals and overflow, or an exact zero
 * (or NaN, as in double). */
static inline MOE_SILU_HD float moe_silu_product_fp32(float g, float u, float gamma, int *stands) {
    const float su = g * moe_silu_reciprocal(1.0f + expf(-g)) * u, h = su * gamma;
    *stands = ((fabsf(su) >= MOE_SILU_FP32_MIN_H) & (fabsf(h) >= MOE_SILU_FP32_MIN_H) &
               (fabsf(h) <= FLT_MAX)) | (g == 0.0f) | (u == 0.0f);
    return h;
}

static inline MOE_SILU_HD float moe_silu_product(float g, float u, float gamma) {
    int stands;
    const float h = moe_silu_product_fp32(g, u, gamma, &stands);
    if (stands) return h;
    return (float)((double)g / (1.0 + exp(-(double)g)) * (double)u * (double)gamma);
}

#endif
