/*
 * routing.h: selection and weights on the CPU (contract.md [routing]), one token at a time.
 *
 * A shared primitive, not the reference's private code: the reference, the OpenBLAS path, the
 * envelope and the mutants all route with it. What checks it independently of its users:
 * tests/test_route.c (brute-force ranks, the weights in long double), harness/selection.c
 * (the contract's selection written apart, which judges every path's ids) and the golden
 * cases (NumPy). docs/architecture.md lists who reuses what.
 */
#ifndef INKLING_ROUTING_H
#define INKLING_ROUTING_H

#include "moe.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The selection score of routed expert e (contract.md [routing.select]), from whatever the
 * caller's ctx holds. */
typedef float (*moe_score_fn)(const void *ctx, int e);

/* The contract's score: fl32(fl32(sigmoid(logits[e])) + bias[e]); ctx is a moe_score_input. */
typedef struct {
    const float *logits; /* [R+S] */
    const float *bias;   /* [R] or NULL (0) */
} moe_score_input;
float moe_contract_score(const void *ctx, int e);

/* ids [K] of the K largest scores among experts 0..R-1, one pick at a time: each the largest
 * remaining score, only a strictly larger one displacing the candidate, so ties go to the lowest
 * index and equal scores fill slots in ascending index. */
void moe_select_top_k(moe_score_fn score, const void *ctx, int R, int K, int32_t *ids);

/* log(sigmoid(a)) = min(a, 0) - log1p(exp(-|a|)): no overflow or cancellation for any a. */
double moe_log_sigmoid(double a);

/* weights [K+S] over a = (logits[ids[0..K-1]], logits[R..R+S-1]) (contract.md [routing.weights]):
 * in double from the fp32 logits, normalised by the largest log-sigmoid, rounded once to fp32. */
void moe_route_weights(const float *logits, const int32_t *ids, int R, int K, int S,
                       float route_scale, float global_scale, float *weights);

/* One token's selection and weights: logits [R+S] fp32, bias [R] or NULL -> ids [K] in slot
 * order, weights [K+S] (routed, then sink gammas) summing to route_scale * global_scale. */
void moe_route_token(const float *logits, const float *bias, int R, int K, int S,
                     float route_scale, float global_scale, int32_t *ids, float *weights);

/* moe_route_token for T tokens with a shard's bias, route_scale and global scale:
 * logits [T, R+S] -> ids [T, K], weights [T, K+S]. */
void moe_route_tokens(const moe_shard *sh, int T, const float *logits, int32_t *ids,
                      float *weights);

#ifdef __cplusplus
}
#endif

#endif /* INKLING_ROUTING_H */
