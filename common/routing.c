/*
 * routing.c: selection and weights (contract.md [routing]); rules in routing.h.
 *
 * Rules:
 *   - sel[e] = sigmoid(l[e]) + bias[e] in fp32, e < R: the sigmoid is computed in double from
 *     the fp32 logit and rounded to fp32, then the fp32 bias is added in fp32;
 *   - the K largest sel are chosen, one at a time: each pick is the largest remaining value,
 *     and only a strictly larger value displaces the current candidate, so among equal values
 *     the lowest index wins and equal values land in ascending index order;
 *   - a = (l[i_0], ..., l[i_{K-1}], l[R], ..., l[R+S-1]); lambda = logsigmoid(a) =
 *     min(a, 0) - log1p(exp(-|a|)); w = exp(lambda - max lambda) / sum * route_scale *
 *     global_scale, in double from the fp32 logits, rounded once to fp32;
 *   - the bias decides which experts are chosen, never how much they weigh.
 */
#include "routing.h"

#include <math.h>
#include <stdbool.h>

float moe_contract_score(const void *ctx, int e) {
    const moe_score_input *in = ctx;
    float sel = (float)(1.0 / (1.0 + exp(-(double)in->logits[e])));
    return sel + (in->bias ? in->bias[e] : 0.0f);
}

void moe_select_top_k(moe_score_fn score, const void *ctx, int R, int K, int32_t *ids) {
    /* Rescanning the ids chosen so far keeps this free of buffers. */
    for (int k = 0; k < K; k++) {
        int best = -1;
        float best_sel = 0.0f;
        for (int e = 0; e < R; e++) {
            bool taken = false;
            for (int j = 0; j < k; j++) taken = taken || ids[j] == e;
            if (taken) continue;
            float sel = score(ctx, e);
            if (best < 0 || sel > best_sel) { /* strictly larger: lowest index wins ties */
                best = e;
                best_sel = sel;
            }
        }
        ids[k] = best;
    }
}

double moe_log_sigmoid(double a) { return fmin(a, 0.0) - log1p(exp(-fabs(a))); }

/* a_j: the j-th selected routed logit for j < K, else sink j - K's logit. */
static double weight_logit(const float *logits, const int32_t *ids, int R, int K, int j) {
    return j < K ? (double)logits[ids[j]] : (double)logits[R + (j - K)];
}

void moe_route_weights(const float *logits, const int32_t *ids, int R, int K, int S,
                       float route_scale, float global_scale, float *weights) {
    /* Three passes recompute lambda rather than store it, so K + S has no fixed bound. */
    const int n = K + S;
    double m = -INFINITY;
    for (int j = 0; j < n; j++) m = fmax(m, moe_log_sigmoid(weight_logit(logits, ids, R, K, j)));
    double sum = 0.0;
    for (int j = 0; j < n; j++) sum += exp(moe_log_sigmoid(weight_logit(logits, ids, R, K, j)) - m);
    const double scale = (double)route_scale * (double)global_scale;
    for (int j = 0; j < n; j++)
        weights[j] = (float)(exp(moe_log_sigmoid(weight_logit(logits, ids, R, K, j)) - m) / sum * scale);
}

void moe_route_token(const float *logits, const float *bias, int R, int K, int S,
                     float route_scale, float global_scale, int32_t *ids, float *weights) {
    const moe_score_input in = {logits, bias};
    moe_select_top_k(moe_contract_score, &in, R, K, ids);
    moe_route_weights(logits, ids, R, K, S, route_scale, global_scale, weights);
}

void moe_route_tokens(const moe_shard *sh, int T, const float *logits, int32_t *ids,
                      float *weights) {
    const moe_config *c = &sh->cfg;
    for (int t = 0; t < T; t++)
        moe_route_token(logits + (size_t)t * (c->R + c->S), sh->gate_bias, c->R, c->K, c->S,
                        c->route_scale, sh->global_scale, ids + (size_t)t * c->K,
                        weights + (size_t)t * (c->K + c->S));
}
