/*
 * cuda_route_warp.cuh: one warp routes one token (contract.md [routing]); used by the routing
 * kernel (cuda_route.cu) and by the small-T front end's last block (cuda_front_small.cu).
 *
 * Rules (the same arithmetic as common/routing.c, so that equal logits give equal ids):
 *   - sel[e] = (fp32)(1 / (1 + exp(-(double)l[e]))) + bias[e] in fp32, e < R;
 *   - each pick is the reference's scan over the experts not yet taken, in index order, where
 *     only a strictly larger sel displaces the candidate: the largest sel, the lowest index
 *     among equal ones, and a NaN sel (never larger than anything) only when it is the first
 *     expert not yet taken. The warp finds it with three integer reductions (redux.sync) over
 *     order-preserving keys of the sels held in shared memory, in less than half the time of a
 *     butterfly over (value, index) pairs (docs/perf-cuda.md, tenth run);
 *   - weights over the K picked logits and the S sink logits in double, in log space; the
 *     maximum and the sum run in slot order on lane 0, each weight rounded once to fp32;
 *   - a token whose x row holds NaN/inf gets NaN logits and weights, ids 0..K-1 and bad = 1;
 *     its x row is read only when one of its first logits is NaN or inf, which every logit of
 *     such a row is (a product with the NaN or inf term is NaN or inf, and so is any fp32 sum
 *     holding one), so a finite row is never read (T = 512 and 4096 0.5-0.7 % faster on both
 *     routings on an H100: docs/perf-cuda.md, forty-eighth run);
 *   - no block barrier: a warp owns its token and its slice of shared memory, so a block of
 *     warps routes that many tokens at once and the last block of the front end can route
 *     with whatever warps it has;
 *   - one copy of this code in a kernel: a routing warp runs once a call, and three changes
 *     that grew the kernels around it made it slower (docs/perf-cuda.md, fourteenth run).
 */
#ifndef INKLING_CUDA_ROUTE_WARP_CUH
#define INKLING_CUDA_ROUTE_WARP_CUH

#include "cuda_internal.h"

#include <math.h>
#include <stdint.h>

#define ROUTE_BATCH 8 /* logits a lane loads before it computes their sigmoids */

namespace {

/* Shared memory of one routing warp: key [R] (route_key of sel, ROUTE_KEY_TAKEN once picked),
 * picked [K] int, terms [K+S] double. */
__host__ __device__ inline size_t route_terms_offset(int R, int K) {
    return ((size_t)(R + K) * 4 + 7) / 8 * 8;
}
__host__ __device__ inline size_t route_warp_smem(int R, int K, int S) {
    return route_terms_offset(R, K) + (size_t)(K + S) * sizeof(double);
}

#define ROUTE_KEY_TAKEN 0u /* an expert already picked */
#define ROUTE_KEY_NAN 1u   /* below every number's key */

/* An unsigned key with the order of the fp32 sel v: larger v, larger key; -0 and +0 equal (the
 * reference compares them as equal); NaN ROUTE_KEY_NAN; every number's key >= 0x007FFFFF. */
__device__ __forceinline__ uint32_t route_key(float v) {
    if (v != v) return ROUTE_KEY_NAN;
    if (v == 0.0f) v = 0.0f; /* -0 */
    const uint32_t u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Warp-wide: the next pick among key [R] (the reference's scan, see the rules above), -1 when
 * every expert is taken; marks it taken. All lanes get the answer. */
__device__ __forceinline__ int route_next_pick(uint32_t *key, int R) {
    const int lane = (int)(threadIdx.x % 32);
    /* this lane's experts, in index order: the largest key (its lowest index on equal keys),
     * and the first expert not taken as (index << 1 | its key is not NaN) */
    uint32_t best_key = ROUTE_KEY_TAKEN, best_e = 0xFFFFFFFFu, first = 0xFFFFFFFFu;
#pragma unroll 8
    for (int e = lane; e < R; e += 32) {
        const uint32_t k = key[e];
        if (k > best_key) best_key = k, best_e = (uint32_t)e;
        if (k != ROUTE_KEY_TAKEN) first = min(first, (uint32_t)e << 1 | (k != ROUTE_KEY_NAN));
    }
    first = __reduce_min_sync(0xFFFFFFFFu, first);
    if (first == 0xFFFFFFFFu) return -1;
    int pick;
    if ((first & 1u) == 0) { /* the first expert not taken has a NaN sel: nothing displaces it */
        pick = (int)(first >> 1);
    } else { /* NaN keys lose to every number's */
        const uint32_t most = __reduce_max_sync(0xFFFFFFFFu, best_key);
        pick = (int)__reduce_min_sync(0xFFFFFFFFu, best_key == most ? best_e : 0xFFFFFFFFu);
    }
    if (lane == pick % 32) key[pick] = ROUTE_KEY_TAKEN;
    __syncwarp();
    return pick;
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

/* Warp-wide: routes token t. logits [T, R+S], rows moe_cuda_gate_rows(R+S) apart (the row is
 * read through L2, so a block may route logits other blocks of the same kernel wrote), bias [R]
 * or NULL, x [T, D] or NULL (NULL: finite), ids [T, K], weights [T, K+S], bad [T] or NULL; smem:
 * route_warp_smem(R, K, S) bytes, 8-aligned, this warp's own. */
__device__ void route_token_warp(int t, int D, int R, int K, int S, float route_scale,
                                 float global_scale, const uint16_t *x, float *logits,
                                 const float *bias, int32_t *ids, float *weights, int32_t *bad,
                                 char *smem) {
    const int lane = (int)(threadIdx.x % 32), G = R + S, n = K + S;
    uint32_t *key = reinterpret_cast<uint32_t *>(smem);                    /* [R] */
    int *picked = reinterpret_cast<int *>(smem + (size_t)R * 4);           /* [K] */
    double *terms = reinterpret_cast<double *>(smem + route_terms_offset(R, K)); /* [K+S] */
    float *l = logits + (size_t)t * moe_cuda_gate_rows(G);
    int32_t *ids_t = ids + (size_t)t * K;
    float *w_t = weights + (size_t)t * n;

    /* ROUTE_BATCH logits a lane in flight at once: one L2 round trip, not one per value */
    for (int e0 = 0; e0 < R; e0 += 32 * ROUTE_BATCH) {
        float logit[ROUTE_BATCH], b[ROUTE_BATCH];
        bool nonfinite = false;
#pragma unroll
        for (int i = 0; i < ROUTE_BATCH; i++) {
            const int e = e0 + i * 32 + lane;
            logit[i] = e < R ? __ldcg(l + e) : 0.0f;
            b[i] = e < R && bias ? bias[e] : 0.0f;
            nonfinite |= !isfinite(logit[i]);
        }
        /* a NaN or inf in x makes every logit of the token NaN or inf (each sums a product with
         * it), so the row is read only when the first batch holds one: x's rows are the routing's
         * largest read (33.5 MB at T = 4096, D = 4096) */
        if (e0 == 0) {
            if (x && __any_sync(0xFFFFFFFFu, nonfinite) && row_nonfinite_warp(x + (size_t)t * D, D)) {
                for (int e = lane; e < G; e += 32) l[e] = NAN;
                for (int k = lane; k < K; k += 32) ids_t[k] = k;
                for (int j = lane; j < n; j += 32) w_t[j] = NAN;
                if (bad && lane == 0) bad[t] = 1;
                return;
            }
            if (bad && lane == 0) bad[t] = 0;
        }
#pragma unroll
        for (int i = 0; i < ROUTE_BATCH; i++) {
            const int e = e0 + i * 32 + lane;
            if (e < R) key[e] = route_key((float)(1.0 / (1.0 + exp(-(double)logit[i]))) + b[i]);
        }
    }
    __syncwarp();

    for (int k = 0; k < K; k++) {
        const int pick = route_next_pick(key, R);
        if (lane == 0) picked[k] = ids_t[k] = pick;
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
