/*
 * ref_backend.c: the reference as a moe_backend: the whole layer on a shard, token by token.
 *
 * Rules:
 *   - every rank routes every token over all R experts and the S sinks (contract.md [sharding]);
 *   - a routed slot contributes w_k * y_k only if its expert is held by this rank; the rank's
 *     sink slab always contributes; the partial output is their sum, in double;
 *   - exact: the partial is rounded to fp32; serving: to bf16 (through fp32), once;
 *   - a token whose input row holds NaN or inf gets logits, weights and output of NaN and
 *     ids 0..K-1 (contract.md [nonfinite]); other tokens are unaffected.
 */
#include "ref.h"

#include "../common/numeric.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const moe_shard *shard;
    bool serving;
    double *x;       /* [D] the current token */
    double *row_buf; /* [max(D, I_local, sink_I_local)] */
    double *h;       /* [max(I_local, sink_I_local)] */
    double *y;       /* [D] */
    double *acc;     /* [D] routed sum */
    double *sink;    /* [D] sink sum */
    float *logits;   /* [R+S] */
    int32_t *ids;    /* [K] */
    float *weights;  /* [K+S] */
} ref_state;

static bool ref_available(char *why, size_t why_len) {
    (void)why;
    (void)why_len;
    return true;
}

static bool ref_supports(const moe_config *cfg, const moe_split *split, const moe_options *opt,
                         char *why, size_t why_len) {
    (void)cfg;
    (void)split;
    (void)opt;
    (void)why;
    (void)why_len;
    return true; /* the reference defines the layer: it takes every valid configuration */
}

static void ref_destroy(void *p) {
    ref_state *s = p;
    if (!s) return;
    free(s->x);
    free(s->row_buf);
    free(s->h);
    free(s->y);
    free(s->acc);
    free(s->sink);
    free(s->logits);
    free(s->ids);
    free(s->weights);
    free(s);
}

static int max3(int a, int b, int c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

static moe_status ref_create(const moe_shard *sh, const moe_options *opt, void **out,
                             moe_error *err) {
    ref_state *s = calloc(1, sizeof *s);
    if (!s) return moe_fail(err, MOE_ERR_NOMEM, "ref: out of memory");
    const moe_config *c = &sh->cfg;
    int widest = max3(c->D, sh->I_local, sh->sink_I_local);
    s->shard = sh;
    s->serving = opt->precision == MOE_PRECISION_SERVING;
    s->x = malloc((size_t)c->D * sizeof(double));
    s->row_buf = malloc((size_t)widest * sizeof(double));
    s->h = malloc((size_t)widest * sizeof(double));
    s->y = malloc((size_t)c->D * sizeof(double));
    s->acc = malloc((size_t)c->D * sizeof(double));
    s->sink = malloc((size_t)c->D * sizeof(double));
    s->logits = malloc((size_t)(c->R + c->S) * sizeof(float));
    s->ids = malloc((size_t)c->K * sizeof(int32_t));
    s->weights = malloc((size_t)(c->K + c->S) * sizeof(float));
    if (!s->x || !s->row_buf || !s->h || !s->y || !s->acc || !s->sink || !s->logits || !s->ids ||
        !s->weights) {
        ref_destroy(s);
        return moe_fail(err, MOE_ERR_NOMEM, "ref: out of memory for scratch buffers");
    }
    *out = s;
    return MOE_OK;
}

static void fill_f32(float *p, size_t n, float v) {
    for (size_t i = 0; i < n; i++) p[i] = v;
}

static moe_status ref_forward(void *p, int T, const uint16_t *x, float *out, moe_stages *st,
                              moe_error *err) {
    (void)err;
    ref_state *s = p;
    const moe_shard *sh = s->shard;
    const moe_config *c = &sh->cfg;
    const int D = c->D, R = c->R, K = c->K, S = c->S, G = R + S;
    const int IL = sh->I_local, SIL = sh->sink_I_local;
    const float nan = NAN;
    for (int t = 0; t < T; t++) {
        bool finite = true;
        for (int d = 0; d < D; d++) {
            s->x[d] = (double)moe_bf16_to_f32(x[(size_t)t * D + d]);
            finite = finite && isfinite(s->x[d]);
        }
        float *out_t = out + (size_t)t * D;
        if (finite) {
            ref_gate_logits(s->x, sh->gate_w, G, D, s->logits);
            ref_route_token(s->logits, sh->gate_bias, R, K, S, c->route_scale, sh->global_scale,
                            s->ids, s->weights);
        } else {
            fill_f32(s->logits, (size_t)G, nan);
            for (int k = 0; k < K; k++) s->ids[k] = k;
            fill_f32(s->weights, (size_t)(K + S), nan);
        }

        for (int d = 0; d < D; d++) s->acc[d] = s->sink[d] = 0.0;
        for (int k = 0; k < K; k++) {
            int e = s->ids[k] - sh->expert_first;
            bool local = finite && e >= 0 && e < sh->n_local_experts;
            if (st && st->routed_h) memset(st->routed_h + ((size_t)t * K + k) * IL, 0, (size_t)IL * sizeof(float));
            if (st && st->routed_y) memset(st->routed_y + ((size_t)t * K + k) * D, 0, (size_t)D * sizeof(float));
            if (!local) continue;
            ref_matrix w13, w2;
            ref_routed_matrices(sh, e, &w13, &w2);
            ref_expert_token(&w13, &w2, s->x, D, IL, 1.0, s->serving, s->h, s->y, s->row_buf);
            for (int d = 0; d < D; d++) s->acc[d] += (double)s->weights[k] * s->y[d];
            if (st && st->routed_h)
                for (int j = 0; j < IL; j++) st->routed_h[((size_t)t * K + k) * IL + j] = (float)s->h[j];
            if (st && st->routed_y)
                for (int d = 0; d < D; d++) st->routed_y[((size_t)t * K + k) * D + d] = (float)s->y[d];
        }
        for (int sk = 0; sk < S; sk++) {
            float *h_stage = st && st->sink_h ? st->sink_h + ((size_t)t * S + sk) * SIL : NULL;
            if (!finite) {
                if (h_stage) fill_f32(h_stage, (size_t)SIL, nan);
                continue;
            }
            ref_matrix w13, w2;
            ref_sink_matrices(sh, sk, &w13, &w2);
            ref_expert_token(&w13, &w2, s->x, D, SIL, (double)s->weights[K + sk], s->serving, s->h,
                             s->y, s->row_buf);
            for (int d = 0; d < D; d++) s->sink[d] += s->y[d];
            if (h_stage)
                for (int j = 0; j < SIL; j++) h_stage[j] = (float)s->h[j];
        }

        for (int d = 0; d < D; d++) {
            float v = finite ? (float)(s->acc[d] + s->sink[d]) : nan;
            out_t[d] = s->serving ? moe_round_bf16(v) : v;
            if (st && st->sink_y) st->sink_y[(size_t)t * D + d] = finite ? (float)s->sink[d] : nan;
        }
        if (st && st->logits) memcpy(st->logits + (size_t)t * G, s->logits, (size_t)G * sizeof(float));
        if (st && st->topk_ids) memcpy(st->topk_ids + (size_t)t * K, s->ids, (size_t)K * sizeof(int32_t));
        if (st && st->topk_weights)
            memcpy(st->topk_weights + (size_t)t * (K + S), s->weights, (size_t)(K + S) * sizeof(float));
    }
    if (st) {
        st->filled = (st->logits ? MOE_STAGE_LOGITS : 0u) |
                     (st->topk_ids && st->topk_weights ? MOE_STAGE_TOPK : 0u) |
                     (st->routed_h ? MOE_STAGE_ROUTED_H : 0u) | (st->routed_y ? MOE_STAGE_ROUTED_Y : 0u) |
                     (st->sink_h ? MOE_STAGE_SINK_H : 0u) | (st->sink_y ? MOE_STAGE_SINK_Y : 0u);
    }
    return MOE_OK;
}

static moe_status ref_route(void *p, int T, const float *logits, int32_t *ids, float *weights,
                            moe_error *err) {
    (void)err;
    const ref_state *s = p;
    ref_route_tokens(s->shard, T, logits, ids, weights);
    return MOE_OK;
}

const moe_backend moe_backend_ref = {
    "ref",
    "pure-C reference: plain loops, double accumulation",
    ref_available,
    ref_supports,
    ref_create,
    ref_forward,
    ref_route,
    ref_destroy,
    NULL, /* no tiling: plain loops */
};
