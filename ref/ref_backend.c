/*
 * ref_backend.c: the reference's token loop (ref_layer) and the "ref" backend around it.
 *
 * Rules:
 *   - every rank routes every token over all R experts and the S sinks (contract.md [sharding]),
 *     with the shared CPU routing (common/routing.h);
 *   - a routed slot contributes w_k * y_k only if its expert is held by this rank; the rank's
 *     sink slab always contributes; the partial output is their sum, in double;
 *   - exact: the partial is rounded to fp32; serving: to bf16 (through fp32), once;
 *   - non-finite rows, the stages asked for and their export follow common/layer_rules.h, as in
 *     every path;
 *   - a seam (ref.h) replaces one step for a test double; the reference runs with none.
 */
#include "ref.h"

#include "../common/layer_rules.h"
#include "../common/numeric.h"
#include "../common/routing.h"

#include <stdlib.h>
#include <string.h>

struct ref_layer {
    const moe_shard *shard;
    bool serving;
    ref_seams seams;
    double *x;       /* [D] the current token */
    double *row_buf; /* [max(D, I_local, sink_I_local)] */
    double *h;       /* [max(I_local, sink_I_local)] */
    double *y;       /* [D] */
    double *acc;     /* [D] routed sum */
    double *sink;    /* [D] sink sum */
    float *logits;   /* [R+S] */
    int32_t *ids;    /* [K] */
    float *weights;  /* [K+S] */
    float *h_out, *y_out; /* [I_local], [D]: one slot's stages in fp32 */
    float *sink_h_out, *sink_y_out; /* [S, sink_I_local], [D]: the token's sink stages in fp32 */
};

void ref_layer_destroy(ref_layer *s) {
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
    free(s->h_out);
    free(s->y_out);
    free(s->sink_h_out);
    free(s->sink_y_out);
    free(s);
}

static int max3(int a, int b, int c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

static void *alloc_n(size_t n, size_t size) { return malloc((n ? n : 1) * size); }

moe_status ref_layer_create(const moe_shard *sh, bool serving, const ref_seams *seams,
                            ref_layer **out, moe_error *err) {
    ref_layer *s = calloc(1, sizeof *s);
    if (!s) return moe_fail(err, MOE_ERR_NOMEM, "ref: out of memory");
    const moe_config *c = &sh->cfg;
    const size_t D = (size_t)c->D, widest = (size_t)max3(c->D, sh->I_local, sh->sink_I_local);
    s->shard = sh;
    s->serving = serving;
    if (seams) s->seams = *seams;
    s->x = alloc_n(D, sizeof(double));
    s->row_buf = alloc_n(widest, sizeof(double));
    s->h = alloc_n(widest, sizeof(double));
    s->y = alloc_n(D, sizeof(double));
    s->acc = alloc_n(D, sizeof(double));
    s->sink = alloc_n(D, sizeof(double));
    s->logits = alloc_n((size_t)(c->R + c->S), sizeof(float));
    s->ids = alloc_n((size_t)c->K, sizeof(int32_t));
    s->weights = alloc_n((size_t)(c->K + c->S), sizeof(float));
    s->h_out = alloc_n((size_t)sh->I_local, sizeof(float));
    s->y_out = alloc_n(D, sizeof(float));
    s->sink_h_out = alloc_n((size_t)c->S * sh->sink_I_local, sizeof(float));
    s->sink_y_out = alloc_n(D, sizeof(float));
    if (!s->x || !s->row_buf || !s->h || !s->y || !s->acc || !s->sink || !s->logits || !s->ids ||
        !s->weights || !s->h_out || !s->y_out || !s->sink_h_out || !s->sink_y_out) {
        ref_layer_destroy(s);
        return moe_fail(err, MOE_ERR_NOMEM, "ref: out of memory for scratch buffers");
    }
    *out = s;
    return MOE_OK;
}

static void to_f32(const double *v, int n, float *out) {
    for (int i = 0; i < n; i++) out[i] = (float)v[i];
}

/* Expert j of token t (j < K: routed slot j; else sink j - K) as call says once the seam has
 * seen it: h [width] and y [D] into s->h, s->y, and weight * y added into sum [D]. */
static void run_expert(ref_layer *s, int t, int j, ref_expert_call *call, int width, double *sum) {
    const int D = s->shard->cfg.D;
    if (s->seams.expert) s->seams.expert(s->seams.ctx, t, j, s->weights, call);
    ref_expert_token(&call->w13, &call->w2, s->x, D, width, call->gamma, call->round_inter, s->h,
                     s->y, s->row_buf);
    if (s->seams.expert_y) s->seams.expert_y(s->seams.ctx, j, s->y, D);
    for (int d = 0; d < D; d++) sum[d] += call->weight * s->y[d];
}

/* Routed slot k of token t: runs its expert when this rank holds it, and exports the slot. */
static void routed_slot(ref_layer *s, int t, int k, moe_stages *st) {
    const moe_shard *sh = s->shard;
    const int e = s->ids[k] - sh->expert_first;
    if (e < 0 || e >= sh->n_local_experts) {
        moe_stages_put_slot(st, sh, t, k, NULL, NULL);
        return;
    }
    ref_expert_call call = {.gamma = 1.0, .weight = (double)s->weights[k], .round_inter = s->serving};
    moe_routed_matrices(sh, e, &call.w13, &call.w2);
    run_expert(s, t, k, &call, sh->I_local, s->acc);
    if (!st) return;
    to_f32(s->h, sh->I_local, s->h_out);
    to_f32(s->y, sh->cfg.D, s->y_out);
    moe_stages_put_slot(st, sh, t, k, s->h_out, s->y_out);
}

/* Sink sk of token t, its gamma multiplying h before W2; its h kept for the stages. */
static void sink_expert(ref_layer *s, int t, int sk) {
    const moe_shard *sh = s->shard;
    const int K = sh->cfg.K, SIL = sh->sink_I_local;
    ref_expert_call call = {.gamma = (double)s->weights[K + sk], .weight = 1.0, .round_inter = s->serving};
    moe_sink_matrices(sh, sk, &call.w13, &call.w2);
    run_expert(s, t, K + sk, &call, SIL, s->sink);
    to_f32(s->h, SIL, s->sink_h_out + (size_t)sk * SIL);
}

/* One token: x_t [D] bf16 -> out_t [D], and its stages. */
static void ref_token(ref_layer *s, int t, const uint16_t *x_t, float *out_t, moe_stages *st) {
    const moe_shard *sh = s->shard;
    const moe_config *c = &sh->cfg;
    const int D = c->D, K = c->K, S = c->S;
    if (!moe_row_finite(x_t, D)) {
        moe_nonfinite_route(c, s->logits, s->ids, s->weights);
        moe_nonfinite_output(c, out_t);
        moe_stages_put_route(st, c, t, 1, s->logits, s->ids, s->weights);
        for (int k = 0; k < K; k++) moe_stages_put_slot(st, sh, t, k, NULL, NULL);
        moe_stages_put_sinks(st, sh, t, NULL, NULL);
        return;
    }
    for (int d = 0; d < D; d++) s->x[d] = (double)moe_bf16_to_f32(x_t[d]);
    ref_gate_logits(s->x, sh->gate_w, c->R + S, D, s->logits);
    if (s->seams.route) s->seams.route(s->seams.ctx, s->logits, s->ids, s->weights);
    else moe_route_token(s->logits, sh->gate_bias, c->R, K, S, c->route_scale, sh->global_scale,
                         s->ids, s->weights);

    for (int d = 0; d < D; d++) s->acc[d] = s->sink[d] = 0.0;
    for (int k = 0; k < K; k++) routed_slot(s, t, k, st);
    for (int sk = 0; sk < S; sk++) sink_expert(s, t, sk);
    for (int d = 0; d < D; d++) {
        const float v = (float)(s->acc[d] + s->sink[d]);
        out_t[d] = s->serving ? moe_round_bf16(v) : v;
        s->sink_y_out[d] = (float)s->sink[d];
    }
    moe_stages_put_route(st, c, t, 1, s->logits, s->ids, s->weights);
    moe_stages_put_sinks(st, sh, t, s->sink_h_out, s->sink_y_out);
}

void ref_layer_forward(ref_layer *s, int T, const uint16_t *x, float *out, moe_stages *st) {
    const int D = s->shard->cfg.D;
    for (int t = 0; t < T; t++) ref_token(s, t, x + (size_t)t * D, out + (size_t)t * D, st);
    if (st) st->filled = moe_stages_wanted(st);
}

/* ---------------------------------------------------------------- the "ref" backend */

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

static moe_status ref_create(const moe_shard *sh, const moe_options *opt, void **out,
                             moe_error *err) {
    ref_layer *l = NULL;
    moe_status st = ref_layer_create(sh, opt->precision == MOE_PRECISION_SERVING, NULL, &l, err);
    *out = l;
    return st;
}

static moe_status ref_forward(void *p, int T, const uint16_t *x, float *out, moe_stages *st,
                              moe_error *err) {
    (void)err;
    ref_layer_forward(p, T, x, out, st);
    return MOE_OK;
}

static moe_status ref_route(void *p, int T, const float *logits, int32_t *ids, float *weights,
                            moe_error *err) {
    (void)err;
    const ref_layer *s = p;
    moe_route_tokens(s->shard, T, logits, ids, weights);
    return MOE_OK;
}

static void ref_destroy(void *p) { ref_layer_destroy(p); }

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
