/*
 * cuda_route.cu: selection and weights on the device (contract.md [routing]), one block a token.
 *
 * Rules (the same arithmetic as common/routing.c, so that equal logits give equal ids):
 *   - sel[e] = (fp32)(1 / (1 + exp(-(double)l[e]))) + bias[e] in fp32, e < R;
 *   - pick k is the largest (sel, -index) pair ordered after pick k-1: larger sel first, equal
 *     sel in ascending index, so the lowest index wins ties and slots are in that order;
 *   - weights over the K picked logits and the S sink logits in double, in log space, summed
 *     in slot order, each rounded once to fp32;
 *   - a token whose x row holds NaN/inf gets NaN logits and weights, ids 0..K-1 and bad = 1.
 */
#include "cuda_internal.h"

#include <math.h>
#include <stdint.h>

#define ROUTE_THREADS 256

namespace {

struct pick {
    float v;
    int i; /* -1: no candidate */
};

/* Is a ordered before b (larger value first, then lower index)? */
__device__ bool before(pick a, pick b) {
    if (a.i < 0) return false;
    if (b.i < 0) return true;
    return a.v > b.v || (a.v == b.v && a.i < b.i);
}

__device__ pick block_best(pick p, pick *scratch) {
    for (int off = 16; off > 0; off >>= 1) {
        pick q;
        q.v = __shfl_down_sync(0xffffffffu, p.v, off);
        q.i = __shfl_down_sync(0xffffffffu, p.i, off);
        if (before(q, p)) p = q;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) scratch[warp] = p;
    __syncthreads();
    if (threadIdx.x == 0) {
        pick best = scratch[0];
        for (int w = 1; w < (int)(blockDim.x / 32); w++)
            if (before(scratch[w], best)) best = scratch[w];
        scratch[0] = best;
    }
    __syncthreads();
    pick best = scratch[0];
    __syncthreads(); /* scratch is reused by the next call */
    return best;
}

__host__ __device__ size_t route_terms_offset(int R, int K);

__device__ double log_sigmoid(double a) { return fmin(a, 0.0) - log1p(exp(-fabs(a))); }

__device__ double weight_logit(const float *l, const int *ids, int R, int K, int j) {
    return j < K ? (double)l[ids[j]] : (double)l[R + (j - K)];
}

/* logits [T, R+S], bias [R] or NULL, x [T, D] or NULL, ids [T, K], weights [T, K+S], bad [T] */
__global__ void route_kernel(int D, int R, int K, int S, float route_scale, float global_scale,
                             const uint16_t *x, float *logits, const float *bias, int32_t *ids,
                             float *weights, int32_t *bad) {
    extern __shared__ float route_smem[];
    float *sel = route_smem;              /* [R] */
    int *picked = (int *)(route_smem + R); /* [K] */
    double *terms = (double *)((char *)route_smem + route_terms_offset(R, K)); /* [K+S] */
    __shared__ pick scratch[ROUTE_THREADS / 32];
    __shared__ double shared_max, shared_sum;
    const int t = blockIdx.x, G = R + S;
    float *l = logits + (size_t)t * G;
    int32_t *ids_t = ids + (size_t)t * K;
    float *w_t = weights + (size_t)t * (K + S);

    /* no early exit: the loads of the row are independent and stay in flight together (a
     * short-circuit chain of them cost about 10 us at D = 4096) */
    int nonfinite = 0;
    if (x)
        for (int d = threadIdx.x; d < D; d += blockDim.x)
            nonfinite |= (x[(size_t)t * D + d] & 0x7F80u) == 0x7F80u;
    const bool finite = !__syncthreads_or(nonfinite);
    if (!finite) {
        for (int e = threadIdx.x; e < G; e += blockDim.x) l[e] = NAN;
        for (int k = threadIdx.x; k < K; k += blockDim.x) ids_t[k] = k;
        for (int j = threadIdx.x; j < K + S; j += blockDim.x) w_t[j] = NAN;
        if (bad && threadIdx.x == 0) bad[t] = 1;
        return;
    }
    if (bad && threadIdx.x == 0) bad[t] = 0;

    for (int e = threadIdx.x; e < R; e += blockDim.x) {
        float s = (float)(1.0 / (1.0 + exp(-(double)l[e])));
        sel[e] = s + (bias ? bias[e] : 0.0f);
    }
    __syncthreads();

    pick prev = {0.0f, -1};
    for (int k = 0; k < K; k++) {
        pick mine = {0.0f, -1};
        for (int e = threadIdx.x; e < R; e += blockDim.x) {
            pick c = {sel[e], e};
            if (prev.i >= 0 && !before(prev, c)) continue; /* taken by an earlier slot */
            if (before(c, mine)) mine = c;
        }
        prev = block_best(mine, scratch);
        if (threadIdx.x == 0) {
            picked[k] = prev.i;
            ids_t[k] = prev.i;
        }
    }
    __syncthreads();

    /* K + S terms as in the reference: log-sigmoids, their maximum, exp(l - max), the sum in
     * slot order, then each weight. The transcendental steps run one term a thread (a single
     * thread took about 20 us at K + S = 8), the max and the sum stay serial and ordered. */
    const int n = K + S;
    for (int j = threadIdx.x; j < n; j += blockDim.x) terms[j] = log_sigmoid(weight_logit(l, picked, R, K, j));
    __syncthreads();
    if (threadIdx.x == 0) {
        double m = -INFINITY;
        for (int j = 0; j < n; j++) m = fmax(m, terms[j]);
        shared_max = m;
    }
    __syncthreads();
    for (int j = threadIdx.x; j < n; j += blockDim.x) terms[j] = exp(terms[j] - shared_max);
    __syncthreads();
    if (threadIdx.x == 0) {
        double sum = 0.0;
        for (int j = 0; j < n; j++) sum += terms[j];
        shared_sum = sum;
    }
    __syncthreads();
    const double scale = (double)route_scale * (double)global_scale;
    for (int j = threadIdx.x; j < n; j += blockDim.x) w_t[j] = (float)(terms[j] / shared_sum * scale);
}

/* Dynamic shared memory of route_kernel: sel [R] fp32, picked [K] int, terms [K+S] double. */
__host__ __device__ size_t route_terms_offset(int R, int K) { return ((size_t)(R + K) * 4 + 7) / 8 * 8; }

} // namespace

moe_status moe_cuda_route(cudaStream_t stream, int T, int D, int R, int K, int S,
                          float route_scale, float global_scale, const uint16_t *x,
                          float *logits, const float *bias, int32_t *ids, float *weights,
                          int32_t *bad, moe_error *err) {
    if (T == 0) return MOE_OK;
    size_t smem = route_terms_offset(R, K) + (size_t)(K + S) * sizeof(double);
    if (smem > 48 * 1024) {
        CUDA_TRY(cudaFuncSetAttribute(route_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)smem));
    }
    route_kernel<<<T, ROUTE_THREADS, smem, stream>>>(D, R, K, S, route_scale, global_scale, x,
                                                     logits, bias, ids, weights, bad);
    LAUNCH_CHECK("route_kernel");
    return MOE_OK;
}
