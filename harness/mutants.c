/*
 * mutants.c: the reference with one planted bug each (rules in mutants.h).
 *
 * Bugs planted in a copy of the shard: gate/up swapped (last rank), the interleave read as two
 * halves, nibbles swapped, E8M0 decoded with bias 126, scale blocks shifted by one, one E8M0
 * block off by one, a TP slab off by one row pair (ranks >= 1), global scale or route_scale
 * dropped. Bugs planted in the routing: ties to the higher index, the bias in the weights,
 * padding experts selectable. Bugs planted through the seams of the reference's own token loop
 * (ref.h, ref_layer; no copy of it here): a sink gamma on the wrong sink, the routed weight
 * applied before W2, the routed intermediates left unrounded (serving), y rounded to bf16 before
 * weighting, the last token of the batch dropped (the loop run on T - 1 tokens). NVFP4: scales
 * read per 32 values, scale2 ignored, scale2 indexed by the grouped assignment row instead of
 * the expert.
 * Bugs of the class the fuzzer was blind to: the OpenBLAS path's partial last weight tile
 * dropped (its declared TILE_ELEMENTS hint and clipping, emulated by zeroing the weight rows that
 * tile holds), the selection score rounded once, the log-sigmoid normaliser's maximum taken over
 * the routed logits only (overflows once every routed logit is far below -709).
 * A bug planted in the loader: gate.global_scale read at the other dtype's width, applied by the
 * harness to the weights this mutant runs on after a checkpoint round trip (feature file).
 */
#include "mutants.h"

#include "../common/numeric.h"
#include "../common/routing.h"
#include "../ref/ref.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#define MUTANT_LIST(X)                                                                          \
    X(NONE, "none", "control: the reference, nothing planted")                                  \
    X(TIES_HIGH, "ties_high", "ties broken toward the higher expert index")                     \
    X(BIAS_IN_WEIGHTS, "bias_in_weights", "the gate bias leaks into the routing weights")       \
    X(NO_GLOBAL_SCALE, "no_global_scale", "global_scale dropped")                               \
    X(NO_ROUTE_SCALE, "no_route_scale", "route_scale dropped")                                  \
    X(GATE_UP_SWAP, "gate_up_swap", "gate and up rows swapped (last rank)")                     \
    X(HALVES, "halves", "w13 interleave read as two contiguous halves")                         \
    X(NIBBLE_SWAP, "nibble_swap", "MXFP4 nibble order swapped")                                 \
    X(E8M0_BIAS, "e8m0_bias", "E8M0 decoded with bias 126 instead of 127")                      \
    X(SCALE_SHIFT, "scale_shift", "w13 scale blocks read one block late")                       \
    X(ONE_SCALE_BLOCK, "one_scale_block", "one E8M0 block of one expert off by one")           \
    X(TP_SLAB_OFF, "tp_slab_off", "ranks >= 1 read their w13 slab one row pair early")          \
    X(PAD_SELECTABLE, "pad_selectable", "EP padding experts take part in selection")            \
    X(SINK_GAMMA_SWAP, "sink_gamma_swap", "sink gamma applied to the next sink")                \
    X(WEIGHT_BEFORE_W2, "weight_before_w2", "routed weight applied to h before W2")             \
    X(NO_ROUND_INTER, "no_round_inter", "serving: routed g, u, h not rounded to bf16")          \
    X(ROUND_Y, "round_y", "routed y rounded to bf16 before weighting")                          \
    X(DROP_LAST_TOKEN, "drop_last_token", "the last token of the batch dropped")                \
    X(DROP_PARTIAL_TILE, "drop_partial_tile", "the OpenBLAS path's partial last weight tile dropped") \
    X(ONE_ROUNDING, "one_rounding", "selection score sigma + bias rounded once, not twice")     \
    X(ROUTED_ONLY_MAX, "routed_only_max", "log-sigmoid normaliser's max over routed logits only") \
    X(NV_BLOCK32, "nv_block32", "NVFP4 scales read one per 32 values instead of 16")            \
    X(NV_NO_SCALE2, "nv_no_scale2", "NVFP4 scale2 ignored")                                     \
    X(NV_SCALE2_ROW, "nv_scale2_row", "NVFP4 scale2 indexed by the assignment row, not the expert") \
    X(LOADER_GSCALE_WIDTH, "loader_gscale_width", "loader reads gate.global_scale at the other dtype's width")

#define AS_ENUM(id, name, desc) M_##id,
typedef enum { MUTANT_LIST(AS_ENUM) M_COUNT } mutant_id;
#undef AS_ENUM

typedef struct {
    mutant_id id;
    moe_shard sh;   /* the mutated copy */
    ref_layer *ref; /* the reference on sh, through this mutant's seams */
    float *tmp_logits, *tmp_bias; /* [E_pad + S], [E_pad]: routing over rearranged experts */
    double *tmp_a;  /* [K+S] the logits a mutant weighs */
} mutant_state;

/* ---------------------------------------------------------------- shard copy and mutations */

static void *dup_bytes(const void *p, size_t n, bool *failed) {
    if (!p) return NULL;
    void *q = malloc(n ? n : 1);
    if (!q) *failed = true;
    else memcpy(q, p, n);
    return q;
}

/* Scale bytes per element of the shard's block format (0 for bf16: no scales). */
static size_t block_of(const moe_shard *s) {
    return (size_t)moe_routed_format_get(s->cfg.routed_format)->block;
}

static bool shard_clone(const moe_shard *s, moe_shard *d) {
    const size_t D = (size_t)s->cfg.D, R = (size_t)s->cfg.R, S = (size_t)s->cfg.S;
    const size_t B = block_of(s) ? block_of(s) : 32;
    const size_t E = (size_t)s->n_local_experts, IL = (size_t)s->I_local, SIL = (size_t)s->sink_I_local;
    bool failed = false;
    *d = *s;
    d->gate_w = dup_bytes(s->gate_w, (R + S) * D * 2, &failed);
    d->gate_bias = dup_bytes(s->gate_bias, R * sizeof(float), &failed);
    d->w13_mx = dup_bytes(s->w13_mx, E * 2 * IL * D / 2, &failed);
    d->w13_scale = dup_bytes(s->w13_scale, E * 2 * IL * D / B, &failed);
    d->w2_mx = dup_bytes(s->w2_mx, E * D * IL / 2, &failed);
    d->w2_scale = dup_bytes(s->w2_scale, E * D * IL / B, &failed);
    d->w13_scale2 = dup_bytes(s->w13_scale2, E * sizeof(float), &failed);
    d->w2_scale2 = dup_bytes(s->w2_scale2, E * sizeof(float), &failed);
    d->w13_bf16 = dup_bytes(s->w13_bf16, E * 2 * IL * D * 2, &failed);
    d->w2_bf16 = dup_bytes(s->w2_bf16, E * D * IL * 2, &failed);
    d->sink_w13 = dup_bytes(s->sink_w13, S * 2 * SIL * D * 2, &failed);
    d->sink_w2 = dup_bytes(s->sink_w2, S * D * SIL * 2, &failed);
    if (failed) moe_shard_free(d);
    return !failed;
}

/* Rows of a w13 block of one expert: bytes per row in its storage. */
static size_t w13_row_bytes(const moe_shard *s) {
    return block_of(s) ? (size_t)s->cfg.D / 2 : (size_t)s->cfg.D * 2;
}

static uint8_t *w13_expert(const moe_shard *s, int e) {
    size_t rows = 2 * (size_t)s->I_local;
    return block_of(s) ? s->w13_mx + (size_t)e * rows * w13_row_bytes(s)
                       : (uint8_t *)(s->w13_bf16) + (size_t)e * rows * w13_row_bytes(s);
}

static void swap_bytes(uint8_t *a, uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint8_t t = a[i];
        a[i] = b[i];
        b[i] = t;
    }
}

/* Swaps every gate row with its up row (and, for the block formats, the scale rows in step). */
static void gate_up_swap(moe_shard *s) {
    const size_t rb = w13_row_bytes(s), sb = block_of(s) ? (size_t)s->cfg.D / block_of(s) : 0;
    for (int e = 0; e < s->n_local_experts; e++)
        for (int j = 0; j < s->I_local; j++) {
            uint8_t *m = w13_expert(s, e);
            swap_bytes(m + (size_t)(2 * j) * rb, m + (size_t)(2 * j + 1) * rb, rb);
            if (s->w13_scale) {
                uint8_t *sc = s->w13_scale + (size_t)e * 2 * s->I_local * sb;
                swap_bytes(sc + (size_t)(2 * j) * sb, sc + (size_t)(2 * j + 1) * sb, sb);
            }
        }
}

/* new row 2j = old row j, new row 2j+1 = old row I_local + j (the chunk(2) misreading). */
static void permute_halves(uint8_t *m, size_t rows, size_t row_bytes) {
    uint8_t *old = malloc(rows * row_bytes);
    if (!old) return;
    memcpy(old, m, rows * row_bytes);
    for (size_t j = 0; j < rows / 2; j++) {
        memcpy(m + 2 * j * row_bytes, old + j * row_bytes, row_bytes);
        memcpy(m + (2 * j + 1) * row_bytes, old + (rows / 2 + j) * row_bytes, row_bytes);
    }
    free(old);
}

/* The OpenBLAS path's declared weight tile (MOE_HINT_TILE_ELEMENTS), or 0 if none. */
static long blas_tile_elements(void) {
    for (const moe_shape_hint *h = moe_backend_blas.shape_hints; h && h->name; h++)
        if (h->kind == MOE_HINT_TILE_ELEMENTS) return h->value;
    return 0;
}

/* Where the last, partial tile starts along `extent` cut into tiles of `unit` (clipped to
 * [1, extent] as blas_backend.c clips it), or -1 when the extent is whole tiles. */
static int partial_tile_start(int extent, long unit) {
    if (unit < 1) unit = 1;
    if (extent <= 0 || unit >= extent || extent % unit == 0) return -1;
    return (int)(extent / unit * unit);
}

/* Whether a layer of width IL (routed) and SIL (sinks) has a partial tile anywhere. */
static bool has_partial_tile(int D, int IL, int S, int SIL) {
    const long v = blas_tile_elements();
    if (v <= 0) return false;
    bool routed = partial_tile_start(IL, v / (2 * D)) >= 0 || partial_tile_start(D, v / IL) >= 0;
    bool sinks = S > 0 && (partial_tile_start(SIL, v / (2 * D)) >= 0 || partial_tile_start(D, v / SIL) >= 0);
    return routed || sinks;
}

/* One matrix pair's partial tiles dropped: w13 [2W, D] channels and w2 [D, W] rows of the last
 * partial tile read as zero (h and y there come out 0, as if never computed). */
static void drop_partial(uint8_t *w13, size_t w13_row, uint8_t *w2, size_t w2_row, int D, int W) {
    const long v = blas_tile_elements();
    int c0 = partial_tile_start(W, v / (2 * D)), r0 = partial_tile_start(D, v / W);
    if (c0 >= 0) memset(w13 + (size_t)2 * c0 * w13_row, 0, (size_t)2 * (W - c0) * w13_row);
    if (r0 >= 0) memset(w2 + (size_t)r0 * w2_row, 0, (size_t)(D - r0) * w2_row);
}

static void drop_partial_tiles(moe_shard *s) {
    const int D = s->cfg.D, IL = s->I_local, SIL = s->sink_I_local;
    const bool mx = block_of(s) > 0;
    const size_t w2_row = mx ? (size_t)IL / 2 : (size_t)IL * 2;
    for (int e = 0; e < s->n_local_experts; e++) {
        uint8_t *w2 = mx ? s->w2_mx : (uint8_t *)s->w2_bf16;
        drop_partial(w13_expert(s, e), w13_row_bytes(s), w2 + (size_t)e * D * w2_row, w2_row, D, IL);
    }
    for (int k = 0; k < s->cfg.S; k++)
        drop_partial((uint8_t *)(s->sink_w13 + (size_t)k * 2 * SIL * D), (size_t)D * 2,
                     (uint8_t *)(s->sink_w2 + (size_t)k * D * SIL), (size_t)SIL * 2, D, SIL);
}

/* Row pair j takes pair j-1's rows; pair 0 becomes zero (the slab read one pair early). */
static void shift_pairs(uint8_t *m, size_t rows, size_t row_bytes) {
    memmove(m + 2 * row_bytes, m, (rows - 2) * row_bytes);
    memset(m, 0, 2 * row_bytes);
}

/* NVFP4 scales read one per 32 values: block b of a row takes the byte of block b/2. */
static void nv_block32(moe_shard *s) {
    const size_t D = (size_t)s->cfg.D, rows = (size_t)s->n_local_experts * 2 * s->I_local;
    for (size_t r = 0; r < rows; r++) {
        uint8_t *row = s->w13_scale + r * (D / 16);
        for (size_t b = D / 16; b-- > 0;) row[b] = row[b / 2];
    }
}

static void mutate_shard(mutant_id id, moe_shard *s) {
    const size_t D = (size_t)s->cfg.D, E = (size_t)s->n_local_experts, IL = (size_t)s->I_local;
    const bool mx = s->cfg.routed_format == MOE_ROUTED_MXFP4, blocks = block_of(s) > 0;
    const size_t SB = blocks ? D / block_of(s) : 0; /* w13 scale bytes per row */
    switch (id) {
    case M_NO_GLOBAL_SCALE: s->global_scale = 1.0f; break;
    case M_NO_ROUTE_SCALE: s->cfg.route_scale = 1.0f; break;
    case M_GATE_UP_SWAP:
        if (s->split.rank == s->split.n - 1) gate_up_swap(s);
        break;
    case M_HALVES:
        for (size_t e = 0; e < E; e++) {
            permute_halves(w13_expert(s, (int)e), 2 * IL, w13_row_bytes(s));
            if (blocks) permute_halves(s->w13_scale + e * 2 * IL * SB, 2 * IL, SB);
        }
        break;
    case M_NIBBLE_SWAP:
        for (size_t i = 0; mx && i < E * 2 * IL * D / 2; i++) s->w13_mx[i] = (uint8_t)(s->w13_mx[i] << 4 | s->w13_mx[i] >> 4);
        break;
    case M_E8M0_BIAS:
        for (size_t i = 0; mx && i < E * 2 * IL * D / 32; i++)
            if (s->w13_scale[i] < 254) s->w13_scale[i]++;
        break;
    case M_SCALE_SHIFT:
        for (size_t r = 0; mx && r < E * 2 * IL; r++) {
            uint8_t *row = s->w13_scale + r * (D / 32), first = row[0];
            memmove(row, row + 1, D / 32 - 1);
            row[D / 32 - 1] = first;
        }
        break;
    case M_ONE_SCALE_BLOCK:
        if (mx && E > 0 && s->w13_scale[0] < 254) s->w13_scale[0]++;
        break;
    case M_DROP_PARTIAL_TILE: drop_partial_tiles(s); break;
    case M_NV_BLOCK32: nv_block32(s); break;
    case M_NV_NO_SCALE2:
        for (size_t e = 0; e < E; e++) s->w13_scale2[e] = s->w2_scale2[e] = 1.0f;
        break;
    case M_TP_SLAB_OFF:
        if (s->split.rank >= 1) {
            if (s->split.kind == MOE_SPLIT_TP)
                for (size_t e = 0; e < E; e++) {
                    shift_pairs(w13_expert(s, (int)e), 2 * IL, w13_row_bytes(s));
                    if (blocks) shift_pairs(s->w13_scale + e * 2 * IL * SB, 2 * IL, SB);
                }
            for (int k = 0; k < s->cfg.S; k++)
                shift_pairs((uint8_t *)(s->sink_w13 + (size_t)k * 2 * s->sink_I_local * D),
                            2 * (size_t)s->sink_I_local, D * 2);
        }
        break;
    default: break;
    }
}

/* ---------------------------------------------------------------- routing */

/* The log-space weights of contract.md [routing.weights] over n given logits, the maximum taken
 * over the first n_max of them (n: correct; the bugs below weigh other logits or fewer). */
static void weights_of(const double *a, int n, int n_max, double scale, float *w) {
    double m = -INFINITY, sum = 0.0;
    for (int j = 0; j < n_max; j++) m = fmax(m, moe_log_sigmoid(a[j]));
    for (int j = 0; j < n; j++) sum += exp(moe_log_sigmoid(a[j]) - m);
    for (int j = 0; j < n; j++) w[j] = (float)(exp(moe_log_sigmoid(a[j]) - m) / sum * scale);
}

/* sel = fl32(sigma + bias): one rounding where the contract has two. ctx: a moe_score_input. */
static float one_rounding_score(const void *ctx, int e) {
    const moe_score_input *in = ctx;
    return (float)(1.0 / (1.0 + exp(-(double)in->logits[e])) + (in->bias ? (double)in->bias[e] : 0.0));
}

static void mutant_route_token(mutant_state *m, const float *logits, int32_t *ids, float *w) {
    const moe_shard *s = &m->sh;
    const int R = s->cfg.R, K = s->cfg.K, S = s->cfg.S;
    const float rs = s->cfg.route_scale, gs = s->global_scale;
    const float *bias = s->gate_bias;
    switch (m->id) {
    case M_TIES_HIGH: /* reversed expert order: the reference's lowest index is our highest */
        for (int e = 0; e < R; e++) {
            m->tmp_logits[e] = logits[R - 1 - e];
            m->tmp_bias[e] = bias ? bias[R - 1 - e] : 0.0f;
        }
        for (int k = 0; k < S; k++) m->tmp_logits[R + k] = logits[R + k];
        moe_route_token(m->tmp_logits, m->tmp_bias, R, K, S, rs, gs, ids, w);
        for (int k = 0; k < K; k++) ids[k] = R - 1 - ids[k];
        return;
    case M_BIAS_IN_WEIGHTS: /* the right experts, weighed by logit + bias */
        moe_route_token(logits, bias, R, K, S, rs, gs, ids, w);
        for (int j = 0; j < K + S; j++)
            m->tmp_a[j] = j < K ? (double)logits[ids[j]] + (bias ? (double)bias[ids[j]] : 0.0)
                                : (double)logits[R + (j - K)];
        weights_of(m->tmp_a, K + S, K + S, (double)rs * (double)gs, w);
        return;
    case M_ONE_ROUNDING: { /* the contract's selection on a once-rounded score */
        const moe_score_input in = {logits, bias};
        moe_select_top_k(one_rounding_score, &in, R, K, ids);
        moe_route_weights(logits, ids, R, K, S, rs, gs, w);
        return;
    }
    case M_ROUTED_ONLY_MAX: /* the right experts; the normaliser's max misses the sinks */
        moe_route_token(logits, bias, R, K, S, rs, gs, ids, w);
        for (int j = 0; j < K + S; j++) m->tmp_a[j] = j < K ? (double)logits[ids[j]] : (double)logits[R + (j - K)];
        weights_of(m->tmp_a, K + S, K, (double)rs * (double)gs, w);
        return;
    case M_PAD_SELECTABLE: {
        int n = s->split.kind == MOE_SPLIT_EP ? s->split.n : 1;
        int E = R + (n - R % n) % n;
        for (int e = 0; e < E + S; e++) {
            m->tmp_logits[e] = e < R ? logits[e] : e < E ? 0.0f : logits[R + (e - E)];
            if (e < E) m->tmp_bias[e] = e < R && bias ? bias[e] : 0.0f;
        }
        moe_route_token(m->tmp_logits, m->tmp_bias, E, K, S, rs, gs, ids, w);
        return;
    }
    default: moe_route_token(logits, bias, R, K, S, rs, gs, ids, w); return;
    }
}

/* ---------------------------------------------------------------- the reference's seams */

static void seam_route(void *ctx, const float *logits, int32_t *ids, float *weights) {
    mutant_route_token(ctx, logits, ids, weights);
}

/* Expert j of token t (j < K: routed slot j; else sink j - K). */
static void seam_expert(void *ctx, int t, int j, const float *weights, ref_expert_call *call) {
    const mutant_state *m = ctx;
    const moe_shard *sh = &m->sh;
    const int K = sh->cfg.K, S = sh->cfg.S;
    switch (m->id) {
    case M_NV_SCALE2_ROW: /* the grouped row's index instead of the expert's */
        if (j < K) {
            const int row = (t * K + j) % sh->n_local_experts;
            call->w13.scale2 = sh->w13_scale2 + row;
            call->w2.scale2 = sh->w2_scale2 + row;
        }
        break;
    case M_WEIGHT_BEFORE_W2:
        if (j < K) call->gamma = call->weight, call->weight = 1.0;
        break;
    case M_NO_ROUND_INTER:
        if (j < K) call->round_inter = false;
        break;
    case M_SINK_GAMMA_SWAP:
        if (j >= K) call->gamma = (double)weights[K + (j - K + 1) % S];
        break;
    default: break;
    }
}

static void seam_expert_y(void *ctx, int j, double *y, int D) {
    const mutant_state *m = ctx;
    if (m->id != M_ROUND_Y || j >= m->sh.cfg.K) return;
    for (int d = 0; d < D; d++) y[d] = (double)moe_round_bf16((float)y[d]);
}

/* ---------------------------------------------------------------- forward */

/* Token T-1's output row and stages zeroed: out [T, D], st as asked (or NULL). */
static void zero_last_token(const moe_shard *sh, int T, float *out, moe_stages *st) {
    const size_t D = (size_t)sh->cfg.D, K = (size_t)sh->cfg.K, S = (size_t)sh->cfg.S;
    const size_t t = (size_t)T - 1, G = (size_t)sh->cfg.R + S;
    const size_t IL = (size_t)sh->I_local, SIL = (size_t)sh->sink_I_local;
    memset(out + t * D, 0, D * sizeof(float));
    if (!st) return;
    if (st->logits) memset(st->logits + t * G, 0, G * sizeof(float));
    if (st->topk_ids) memset(st->topk_ids + t * K, 0, K * sizeof(int32_t));
    if (st->topk_weights) memset(st->topk_weights + t * (K + S), 0, (K + S) * sizeof(float));
    if (st->routed_h) memset(st->routed_h + t * K * IL, 0, K * IL * sizeof(float));
    if (st->routed_y) memset(st->routed_y + t * K * D, 0, K * D * sizeof(float));
    if (st->sink_h) memset(st->sink_h + t * S * SIL, 0, S * SIL * sizeof(float));
    if (st->sink_y) memset(st->sink_y + t * D, 0, D * sizeof(float));
}

/* x [T, D] bf16 -> out [T, D]: the reference's loop on the mutated shard, through the seams;
 * drop_last_token leaves the last token's output and stages zero. */
static moe_status mutant_forward(void *p, int T, const uint16_t *x, float *out, moe_stages *st,
                                 moe_error *err) {
    (void)err;
    mutant_state *m = p;
    if (m->id == M_DROP_LAST_TOKEN && T > 0) {
        zero_last_token(&m->sh, T, out, st);
        T--;
    }
    ref_layer_forward(m->ref, T, x, out, st);
    return MOE_OK;
}

static moe_status mutant_route(void *p, int T, const float *logits, int32_t *ids, float *weights,
                               moe_error *err) {
    (void)err;
    mutant_state *m = p;
    const int G = m->sh.cfg.R + m->sh.cfg.S, K = m->sh.cfg.K, S = m->sh.cfg.S;
    for (int t = 0; t < T; t++)
        mutant_route_token(m, logits + (size_t)t * G, ids + (size_t)t * K, weights + (size_t)t * (K + S));
    return MOE_OK;
}

/* ---------------------------------------------------------------- backend plumbing */

static void mutant_destroy(void *p) {
    mutant_state *m = p;
    if (!m) return;
    ref_layer_destroy(m->ref);
    moe_shard_free(&m->sh);
    free(m->tmp_logits);
    free(m->tmp_bias);
    free(m->tmp_a);
    free(m);
}

static moe_status mutant_create(mutant_id id, const moe_shard *shard, const moe_options *opt,
                                void **out, moe_error *err) {
    mutant_state *m = calloc(1, sizeof *m);
    if (!m) return moe_fail(err, MOE_ERR_NOMEM, "mutant: out of memory");
    if (!shard_clone(shard, &m->sh)) {
        free(m);
        return moe_fail(err, MOE_ERR_NOMEM, "mutant: out of memory copying the shard");
    }
    m->id = id;
    mutate_shard(id, &m->sh);
    const moe_config *c = &shard->cfg;
    /* routing over up to E_pad (< R + n) experts plus the sinks */
    const size_t G_pad = (size_t)(c->R + shard->split.n + c->S);
    m->tmp_logits = malloc(G_pad * sizeof(float));
    m->tmp_bias = malloc(G_pad * sizeof(float));
    m->tmp_a = malloc((size_t)(c->K + c->S) * sizeof(double));
    if (!m->tmp_logits || !m->tmp_bias || !m->tmp_a) {
        mutant_destroy(m);
        return moe_fail(err, MOE_ERR_NOMEM, "mutant: out of memory for scratch");
    }
    const ref_seams seams = {m, seam_route, seam_expert, seam_expert_y};
    moe_status st = ref_layer_create(&m->sh, opt->precision == MOE_PRECISION_SERVING, &seams,
                                     &m->ref, err);
    if (st) {
        mutant_destroy(m);
        return st;
    }
    *out = m;
    return MOE_OK;
}

static bool mutant_available(char *why, size_t len) {
    (void)why;
    (void)len;
    return true;
}

/* Where the planted bug cannot change anything, the mutant declines the case. */
static bool mutant_supports(mutant_id id, const moe_config *cfg, const moe_split *split,
                            const moe_options *opt, char *why, size_t len) {
    bool mx = cfg->routed_format == MOE_ROUTED_MXFP4;
    bool ok = true;
    switch (id) {
    case M_NIBBLE_SWAP:
    case M_E8M0_BIAS:
    case M_SCALE_SHIFT:
    case M_ONE_SCALE_BLOCK: ok = mx; break;
    case M_NV_BLOCK32:
    case M_NV_NO_SCALE2: ok = cfg->routed_format == MOE_ROUTED_NVFP4; break;
    case M_NV_SCALE2_ROW: ok = cfg->routed_format == MOE_ROUTED_NVFP4 && cfg->R >= 2; break;
    case M_TP_SLAB_OFF: ok = split->n >= 2; break;
    case M_PAD_SELECTABLE: ok = split->kind == MOE_SPLIT_EP && cfg->R % split->n != 0; break;
    case M_NO_ROUND_INTER: ok = opt->precision == MOE_PRECISION_SERVING; break;
    case M_SINK_GAMMA_SWAP: ok = cfg->S >= 2; break;
    case M_NO_GLOBAL_SCALE: ok = cfg->has_global_scale; break;
    case M_BIAS_IN_WEIGHTS:
    case M_ONE_ROUNDING: ok = cfg->has_gate_bias; break;
    case M_ROUTED_ONLY_MAX: ok = cfg->S >= 1; break;
    case M_LOADER_GSCALE_WIDTH: ok = cfg->has_global_scale; break;
    case M_DROP_PARTIAL_TILE: {
        const int n = split->n, pad = split->pad_inter_to, I = cfg->I;
        int IL = split->kind == MOE_SPLIT_TP ? I / n : I, SIL = split->kind != MOE_SPLIT_NONE ? I / n : I;
        if (pad > 0) IL = (IL + pad - 1) / pad * pad, SIL = (SIL + pad - 1) / pad * pad;
        ok = cfg->routed_format != MOE_ROUTED_NVFP4 && /* its packing: not emulated here */
             has_partial_tile(cfg->D, IL, cfg->S, SIL);    /* as moe_shard_build sizes the slabs */
        break;
    }
    default: break;
    }
    if (!ok) snprintf(why, len, "the planted bug cannot show on this case");
    return ok;
}

#define DEFINE_MUTANT(id, name, desc)                                                           \
    static moe_status create_##id(const moe_shard *s, const moe_options *o, void **st,          \
                                  moe_error *e) {                                               \
        return mutant_create(M_##id, s, o, st, e);                                              \
    }                                                                                           \
    static bool supports_##id(const moe_config *c, const moe_split *sp, const moe_options *o,    \
                              char *why, size_t len) {                                          \
        return mutant_supports(M_##id, c, sp, o, why, len);                                     \
    }
MUTANT_LIST(DEFINE_MUTANT)
#undef DEFINE_MUTANT

#define AS_BACKEND(id, name, desc)                                                              \
    {"mutant:" name, desc, mutant_available, supports_##id, create_##id,                        \
     mutant_forward, mutant_route, mutant_destroy, NULL},
static const moe_backend mutants[M_COUNT] = {MUTANT_LIST(AS_BACKEND)};
#undef AS_BACKEND

int moe_mutant_count(void) { return M_COUNT - 1; }
const moe_backend *moe_mutant_at(int i) { return i >= 0 && i < M_COUNT - 1 ? &mutants[1 + i] : NULL; }
const moe_backend *moe_mutant_control(void) { return &mutants[M_NONE]; }

/* gate.global_scale read at the other dtype's width: stored F32, its first two bytes (the low
 * mantissa half) taken as bf16; stored BF16, its two bytes taken as the low half of an F32. */
static void gscale_wrong_width(moe_checkpoint *ck, int layer, moe_weights *w) {
    char name[128];
    snprintf(name, sizeof name, "model.llm.layers.%d.mlp.gate.global_scale", layer);
    const moe_st_tensor *t = moe_checkpoint_tensor(ck, name, NULL);
    if (!t) return;
    uint16_t h;
    memcpy(&h, t->data, sizeof h);
    if (t->dtype == MOE_ST_F32) {
        w->global_scale = moe_bf16_to_f32(h);
    } else {
        uint32_t bits = h;
        memcpy(&w->global_scale, &bits, sizeof bits);
    }
}

moe_loader_quirk moe_mutant_loader_quirk(const moe_backend *be) {
    return be == &mutants[M_LOADER_GSCALE_WIDTH] ? gscale_wrong_width : NULL;
}

const moe_backend *moe_mutant_find(const char *name) {
    if (!name) return NULL;
    if (!strncmp(name, "mutant:", 7)) name += 7;
    for (int i = 0; i < M_COUNT; i++)
        if (!strcmp(mutants[i].name + 7, name)) return &mutants[i];
    return NULL;
}
