/*
 * layer_rules.h: the layer-level rules every path applies identically, written once here and
 * called by each path's host code (ref/, opt/blas/, opt/cuda/ on the host, the mutants).
 *
 * Rules:
 *   - a token whose input row holds NaN or inf (a bf16 exponent field of all ones) gets logits
 *     and weights of NaN, ids 0..K-1, an output row of NaN, zero routed stages and NaN sink
 *     stages (contract.md [nonfinite]); every other token is unaffected;
 *   - a path reports filled exactly the stages it was asked for (moe_stages_wanted): topk needs
 *     both topk_ids and topk_weights. T = 0 writes nothing and reports the same bits;
 *   - a routed slot whose expert did not run for the token (held by another rank, or a
 *     non-finite token) exports zeros in routed_h and routed_y (moe.h, moe_stages);
 *   - the routing output is ids [T, K] in slot order and weights [T, K+S], routed weights then
 *     sink gammas (contract.md [routing]); the stages hold them as the path computed them.
 * The device kernels keep their own device-side copy of the non-finite test (cuda_route_warp.cuh).
 */
#ifndef INKLING_LAYER_RULES_H
#define INKLING_LAYER_RULES_H

#include "moe.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Whether x_row [D] bf16 holds no NaN and no inf. */
bool moe_row_finite(const uint16_t *x_row, int D);

/* A non-finite token's routing: logits [R+S] NaN, ids [K] = 0..K-1, weights [K+S] NaN. */
void moe_nonfinite_route(const moe_config *c, float *logits, int32_t *ids, float *weights);

/* A non-finite token's output row: out_row [D] NaN. */
void moe_nonfinite_output(const moe_config *c, float *out_row);

/* The MOE_STAGE_* bits of the stages st asks for (0 for NULL): what a path reports filled. */
unsigned moe_stages_wanted(const moe_stages *st);

/* The routing stages of tokens [t0, t0+n): logits [n, R+S], ids [n, K], weights [n, K+S].
 * Nothing for a NULL st or a stage not asked for; likewise below. */
void moe_stages_put_route(moe_stages *st, const moe_config *c, int t0, int n, const float *logits,
                          const int32_t *ids, const float *weights);

/* Routed slot k of token t: h [I_local] and y [D] as computed, or NULL where no expert ran for
 * the slot (held by another rank, or a non-finite token): zeros. */
void moe_stages_put_slot(moe_stages *st, const moe_shard *sh, int t, int k, const float *h,
                         const float *y);

/* Token t's sinks: h [S, sink_I_local] and their sum y [D], or NULL for a non-finite token: NaN. */
void moe_stages_put_sinks(moe_stages *st, const moe_shard *sh, int t, const float *h,
                          const float *y);

#ifdef __cplusplus
}
#endif

#endif /* INKLING_LAYER_RULES_H */
