/*
 * cuda_route_warp.cuh: one warp routes one token (contract.md [routing]); used by the routing
 * kernel (cuda_route.cu) and by the small-T front end's last block (cuda_front_small.cu).
 *
 * Rules (the same arithmetic as common/routing.c, so that equal logits give equal ids):
 *   - sel[e] = (fp32)(1 / (1 + exp(-(double)l[e]))) + bias[e] in fp32, e < R;
 *   - pick k is the largest (sel, -index) pair ordered after pick k-1: larger sel first, equal
 *     sel in ascending index, so the lowest index wins ties and slots are in that order. The
 *     order is total, so the warp's butterfly finds the pick whatever the lanes' order;
 *   - weights over the K picked logits and the S sink logits in double, in log space; the
 *     maximum and the sum run in slot order on lane 0, each weight rounded once to fp32;
 *   - a token whose x row holds NaN/inf gets NaN logits and weights, ids 0..K-1 and bad = 1;
 *   - no block barrier: a warp owns its token and its slice of shared memory, so a block of
 *     warps routes that many tokens at once and the last block of the front end can route
 *     with whatever warps it has.
 */
#ifndef INKLING_CUDA_ROUTE_WARP_CUH
#define INKLING_CUDA_ROUTE_WARP_CUH

#include "cuda_internal.h"

#include <math.h>
#include <stdint.h>

#define ROUTE_BATCH 8 /* logits a lane loads before it computes their sigmoids */

namespace {

/* Shared memory of one routing warp: sel [R] fp32, picked [K] int, terms [K+S] double. */
__host__ __device__ inline size_t route_terms_offset(int R, int K) {
    return ((size_t)(R + K) * 4 + 7) / 8 * 8;
}
__host__ __device__ inline size_t route_warp_smem(int R, int K, int S) {
    return route_terms_offset(R, K) + (size_t)(K + S) * sizeof(double);
}

struct route_pick {
    float v;
    int i; /* -1: no candidate */
};

/* Is a ordered before b (larger value first, then lower index)? */
__device__ __forceinline__ bool route_before(route_pick a, route_pick b) {
    if (a.i < 0) return false;
    if (b.i < 0) return true;
    return a.v > b.v || (a.v == b.v && a.i < b.i);
}

/* The first of the lanes' picks in that order, lane 0's answer given to every lane. */
__device__ __forceinline__ route_pick warp_first(route_pick p) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        route_pick q;
        q.v = __shfl_xor_sync(0xFFFFFFFFu, p.v, off);
        q.i = __shfl_xor_sync(0xFFFFFFFFu, p.i, off);
        if (route_before(q, p)) p = q;
    }
    p.v = __shfl_sync(0xFFFFFFFFu, p.v, 0);
    p.i = __shfl_sync(0xFFFFFFFFu, p.i, 0);
    return p;
}

__device__ __forceinline__ double route_log_sigmoid(double a) {
    return fmin(a, 0.0) - log1p(exp(-fabs(a)));
}

/* Does bf16 row x [D] hold NaN or inf? All lanes get the answer. Every load of the row is
 * issued before any is tested (a short-circuit chain of them cost about 10 us at D = 4096). */
__device__ __forceinline__ bool row_nonfinite_warp(const uint16_t *row, int D) {
    const int lane = (int)(threadIdx.x % 32);
    bool nonfinite = false;
    if (D % 8 == 0 && ((uintptr_t)row & 15u) == 0) {
        const uint4 *v = reinterpret_cast<const uint4 *>(row);
        for (int c = lane; c < D / 8; c += 32) {
            const uint4 q = __ldg(v + c);
            const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
                nonfinite |= (w[i] & 0x7F80u) == 0x7F80u || (w[i] & 0x7F800000u) == 0x7F800000u;
        }
    } else {
        for (int d = lane; d < D; d += 32) nonfinite |= (row[d] & 0x7F80u) == 0x7F80u;
    }
    return __any_sync(0xFFFFFFFFu, nonfinite);
}

/* Warp-wide: routes token t. logits [T, R+S] (the row is read through L2, so a block may route
 * logits other blocks of the same kernel wrote), bias [R] or NULL, x [T, D] or NULL (NULL:
 * finite), ids [T, K], weights [T, K+S], bad [T] or NULL; smem: route_warp_smem(R, K, S) bytes,
 * 8-aligned, this warp's own. */
__device__ void route_token_warp(int t, int D, int R, int K, int S, float route_scale,
                                 float global_scale, const uint16_t *x, float *logits,
                                 const float *bias, int32_t *ids, float *weights, int32_t *bad,
                                 char *smem) {
    const int lane = (int)(threadIdx.x % 32), G = R + S, n = K + S;
    float *sel = reinterpret_cast<float *>(smem);                          /* [R] */
    int *picked = reinterpret_cast<int *>(smem + (size_t)R * 4);           /* [K] */
    double *terms = reinterpret_cast<double *>(smem + route_terms_offset(R, K)); /* [K+S] */
    float *l = logits + (size_t)t * G;
    int32_t *ids_t = ids + (size_t)t * K;
    float *w_t = weights + (size_t)t * n;

    if (x && row_nonfinite_warp(x + (size_t)t * D, D)) {
        for (int e = lane; e < G; e += 32) l[e] = NAN;
        for (int k = lane; k < K; k += 32) ids_t[k] = k;
        for (int j = lane; j < n; j += 32) w_t[j] = NAN;
        if (bad && lane == 0) bad[t] = 1;
        return;
    }
    if (bad && lane == 0) bad[t] = 0;

    /* ROUTE_BATCH logits a lane in flight at once: one L2 round trip, not one per value */
    for (int e0 = 0; e0 < R; e0 += 32 * ROUTE_BATCH) {
        float logit[ROUTE_BATCH], b[ROUTE_BATCH];
#pragma unroll
        for (int i = 0; i < ROUTE_BATCH; i++) {
            const int e = e0 + i * 32 + lane;
            logit[i] = e < R ? __ldcg(l + e) : 0.0f;
            b[i] = e < R && bias ? bias[e] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < ROUTE_BATCH; i++) {
            const int e = e0 + i * 32 + lane;
            if (e < R) sel[e] = (float)(1.0 / (1.0 + exp(-(double)logit[i]))) + b[i];
        }
    }
    __syncwarp();

    route_pick prev = {0.0f, -1};
    for (int k = 0; k < K; k++) {
        route_pick mine = {0.0f, -1};
        for (int e = lane; e < R; e += 32) {
            const route_pick c = {sel[e], e};
            if (prev.i >= 0 && !route_before(prev, c)) continue; /* taken by an earlier slot */
            if (route_before(c, mine)) mine = c;
        }
        prev = warp_first(mine);
        if (lane == 0) picked[k] = ids_t[k] = prev.i;
    }
    __syncwarp();

    /* one transcendental term a lane; the maximum and the sum serial, in slot order */
    for (int j = lane; j < n; j += 32)
        terms[j] = route_log_sigmoid(j < K ? (double)__ldcg(l + picked[j])
                                           : (double)__ldcg(l + R + (j - K)));
    __syncwarp();
    double m = -INFINITY;
    if (lane == 0)
        for (int j = 0; j < n; j++) m = fmax(m, terms[j]);
    m = __shfl_sync(0xFFFFFFFFu, m, 0);
    for (int j = lane; j < n; j += 32) terms[j] = exp(terms[j] - m);
    __syncwarp();
    double sum = 0.0;
    if (lane == 0)
        for (int j = 0; j < n; j++) sum += terms[j];
    sum = __shfl_sync(0xFFFFFFFFu, sum, 0);
    const double scale = (double)route_scale * (double)global_scale;
    for (int j = lane; j < n; j += 32) w_t[j] = (float)(terms[j] / sum * scale);
}

} // namespace

#endif
