/*
 * layer_rules.c: the non-finite token, the stages asked for, and the stage export (rules in
 * layer_rules.h).
 */
#include "layer_rules.h"

#include <math.h>
#include <string.h>

static void fill_nan(float *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = NAN;
}

bool moe_row_finite(const uint16_t *x_row, int D) { return moe_first_nonfinite_row(1, D, x_row) < 0; }

void moe_nonfinite_route(const moe_config *c, float *logits, int32_t *ids, float *weights) {
    fill_nan(logits, (size_t)(c->R + c->S));
    for (int k = 0; k < c->K; k++) ids[k] = k; /* valid ids: no selection on NaN scores */
    fill_nan(weights, (size_t)(c->K + c->S));
}

void moe_nonfinite_output(const moe_config *c, float *out_row) { fill_nan(out_row, (size_t)c->D); }

unsigned moe_stages_wanted(const moe_stages *st) {
    if (!st) return 0u;
    return (st->logits ? MOE_STAGE_LOGITS : 0u) |
           (st->topk_ids && st->topk_weights ? MOE_STAGE_TOPK : 0u) |
           (st->routed_h ? MOE_STAGE_ROUTED_H : 0u) | (st->routed_y ? MOE_STAGE_ROUTED_Y : 0u) |
           (st->sink_h ? MOE_STAGE_SINK_H : 0u) | (st->sink_y ? MOE_STAGE_SINK_Y : 0u);
}

void moe_stages_put_route(moe_stages *st, const moe_config *c, int t0, int n, const float *logits,
                          const int32_t *ids, const float *weights) {
    if (!st || n <= 0) return;
    const size_t G = (size_t)(c->R + c->S), K = (size_t)c->K, KS = (size_t)(c->K + c->S);
    if (st->logits) memcpy(st->logits + (size_t)t0 * G, logits, (size_t)n * G * sizeof(float));
    if (st->topk_ids) memcpy(st->topk_ids + (size_t)t0 * K, ids, (size_t)n * K * sizeof(int32_t));
    if (st->topk_weights)
        memcpy(st->topk_weights + (size_t)t0 * KS, weights, (size_t)n * KS * sizeof(float));
}

/* dst [n] = src [n], or zeros when src is NULL. */
static void copy_or_zero(float *dst, const float *src, size_t n) {
    if (src) memcpy(dst, src, n * sizeof(float));
    else memset(dst, 0, n * sizeof(float));
}

void moe_stages_put_slot(moe_stages *st, const moe_shard *sh, int t, int k, const float *h,
                         const float *y) {
    if (!st) return;
    const size_t tk = (size_t)t * sh->cfg.K + k, IL = (size_t)sh->I_local, D = (size_t)sh->cfg.D;
    if (st->routed_h) copy_or_zero(st->routed_h + tk * IL, h, IL);
    if (st->routed_y) copy_or_zero(st->routed_y + tk * D, y, D);
}

void moe_stages_put_sinks(moe_stages *st, const moe_shard *sh, int t, const float *h,
                          const float *y) {
    if (!st) return;
    const size_t SH = (size_t)sh->cfg.S * sh->sink_I_local, D = (size_t)sh->cfg.D;
    if (st->sink_h) {
        if (h) memcpy(st->sink_h + (size_t)t * SH, h, SH * sizeof(float));
        else fill_nan(st->sink_h + (size_t)t * SH, SH);
    }
    if (st->sink_y) {
        if (y) memcpy(st->sink_y + (size_t)t * D, y, D * sizeof(float));
        else fill_nan(st->sink_y + (size_t)t * D, D);
    }
}
