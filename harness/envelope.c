/*
 * envelope.c: the contract envelope of one case (derivations in docs/tolerances.md).
 *
 * Rules implemented, per token, from the exact math in double:
 *   - an n-term sum accumulated by a correct path errs by at most acc(n) * sum|terms|, with
 *     acc(n) = n * 2^-53 (exact contract: double accumulation) or min(n, 8 sqrt n) * 2^-24
 *     (serving: fp32 accumulation in any order; the worst case up to n = 64, a random-walk
 *     bound of 8 standard deviations above);
 *   - a stage stored after a rounding to nearest (fp32 or bf16) may hold any value between the
 *     roundings of the two ends of the interval its unrounded value lies in (rounding is
 *     monotonic), so an interval collapses to one value away from rounding boundaries;
 *   - logits: centre sum x*Wg, radius acc(D) * sum |x||Wg|, stored as fp32;
 *   - routing: the contract's selection (selection.c, apart from ref/) on the exact fp32
 *     logits, the reference's weights; a token is a near-tie when
 *     two adjacent slots, or slot K-1 and the best unselected expert, have selection scores
 *     closer than their radii (sigmoid slope <= 1/4 times the logit radius, plus fp32
 *     evaluation); weights: relative radius 2 * max logit radius + fp32 evaluation of the
 *     log-sigmoid form;
 *   - g, u: radius acc(D) * sum|W||x| (NVFP4: plus one rounding of |g| + radius, for the fp32
 *     multiply by scale2 after the block dot product; likewise y); serving rounds them to bf16, and h = silu(g) u (gamma)
 *     is bounded over the corners of the rounded intervals (plus the minimum of silu when the
 *     interval holds it) with 16 ulp of fp32 evaluation, then rounded to bf16; exact: first
 *     order propagation with |silu'| <= 1.1;
 *   - y = W2 h: centre W2 h_c, radius |W2| h_rad + acc(I) |W2| |h|; output: sum of
 *     w_k y_k (weights with their radius) and sink y, plus (K + 2S + 2) roundings of the fp32
 *     (exact: double) additions and products, then the partial's rounding (bf16 / fp32); a
 *     split adds its n rounded partials in fp32 in rank order and (serving) rounds once more;
 *   - engine (a contract, computed as serving): serving plus exactly a served engine's extra
 *     bf16 roundings: routed and sink y stored in bf16, (K + 3) bf16 roundings of the output
 *     sum, and a split's partials added in bf16.
 * Tokens whose input row holds NaN or inf are only flagged.
 */
#include "envelope.h"
#include "selection.h"

#include "../common/numeric.h"
#include "../common/routing.h"
#include "../ref/ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define U32 0x1p-24
#define UD 0x1p-53
/* Covers subnormal underflow in products of 2^-127-scaled weights (spacing 2^-149). */
#define ABS_FLOOR 0x1p-120
#define SILU_ARGMIN (-1.2784645427610738) /* silu is decreasing below, increasing above */
#define SILU_SLOPE_MAX 1.1                  /* max |silu'| = 1.0998 */

static double acc_bound(moe_precision p, int n) {
    if (p == MOE_PRECISION_EXACT) return (double)n * UD;
    double random_walk = 8.0 * sqrt((double)n);
    return (n < random_walk ? (double)n : random_walk) * U32;
}

static double unit(moe_precision p) { return p == MOE_PRECISION_EXACT ? UD : U32; }
/* Serving and the engine contract round to bf16 at the served model's points. */
static bool rounds_bf16(moe_precision p) { return p != MOE_PRECISION_EXACT; }
/* The engine contract's extra roundings are bf16 (unit roundoff 2^-8); none elsewhere. */
static double engine_unit(moe_precision p) { return p == MOE_PRECISION_ENGINE ? 0x1p-8 : 0.0; }
static double to_f32(double v) { return (double)(float)v; }
static double to_bf16(double v) { return (double)moe_round_bf16((float)v); }
/* An end (side -1 low, +1 high) of a y stage's band as stored: fp32, or under the engine
 * contract fp32 or bf16 (an engine's GEMM2 may write bf16), whichever reaches further. */
static double round_y(moe_precision p, double v, int side) {
    double f = to_f32(v), b = to_bf16(f);
    if (p != MOE_PRECISION_ENGINE) return f;
    return side < 0 ? (b < f ? b : f) : (b > f ? b : f);
}
static double silu(double z) { return z / (1.0 + exp(-z)); }
static double dmax(double a, double b) { return a > b ? a : b; }
static double dmin(double a, double b) { return a < b ? a : b; }

static void band_set(moe_band *b, size_t i, double c, double lo, double hi) {
    b->c[i] = c;
    b->lo[i] = lo;
    b->hi[i] = hi;
}

/* [alo, ahi] * [blo, bhi] */
static void interval_mul(double alo, double ahi, double blo, double bhi, double *lo, double *hi) {
    double p[4] = {alo * blo, alo * bhi, ahi * blo, ahi * bhi};
    *lo = *hi = p[0];
    for (int i = 1; i < 4; i++) {
        *lo = dmin(*lo, p[i]);
        *hi = dmax(*hi, p[i]);
    }
}

static moe_status band_alloc(moe_band *b, size_t n) {
    size_t m = n ? n : 1;
    b->c = calloc(m, sizeof(double));
    b->lo = calloc(m, sizeof(double));
    b->hi = calloc(m, sizeof(double));
    return b->c && b->lo && b->hi ? MOE_OK : MOE_ERR_NOMEM;
}

static void band_free(moe_band *b) {
    free(b->c);
    free(b->lo);
    free(b->hi);
}

void moe_envelope_free(moe_envelope *e) {
    if (!e) return;
    free(e->nonfinite);
    free(e->near_tie);
    free(e->ids);
    band_free(&e->logits);
    band_free(&e->weights);
    band_free(&e->routed_h);
    band_free(&e->routed_y);
    band_free(&e->sink_h);
    band_free(&e->sink_y);
    band_free(&e->out_unsplit);
    band_free(&e->out_split);
    free(e);
}

/* Scratch for one token. */
typedef struct {
    double *x;        /* [D] */
    double *row;      /* [max(D, I)] */
    double *sink_c, *sink_r; /* [D] the sinks' summed y: centre and radius */
    float *logits;    /* [G] the exact logits rounded to fp32, as the reference has them */
    double *logit_r;  /* [G] how far a correct path's fp32 logit may be from the exact one */
    float *weights;   /* [K+S] */
    float *sel;       /* [K] selection scores, contract_select's scratch */
    double *w_rel;    /* [K+S] relative radius of each weight */
    double *hc, *hrad, *hmax; /* [I] one slot's h: centre, radius, largest magnitude */
    double *pc, *prad, *pmag; /* [(1+n) * D] partial sums: unsplit, then rank 0..n-1 */
} token_scratch;

/* The scratch's arrays and their lengths: one list that both allocation and freeing read. */
typedef struct {
    double **d[12];
    size_t dn[12];
    float **f[3];
    size_t fn[3];
} scratch_arrays;

static scratch_arrays arrays_of(token_scratch *s, const moe_config *c, int n) {
    const size_t D = (size_t)c->D, I = (size_t)c->I, G = (size_t)(c->R + c->S), KS = (size_t)(c->K + c->S);
    const size_t wide = D > I ? D : I, P = (size_t)(1 + n) * D;
    scratch_arrays a = {{&s->x, &s->row, &s->sink_c, &s->sink_r, &s->logit_r, &s->w_rel, &s->hc, &s->hrad,
                         &s->hmax, &s->pc, &s->prad, &s->pmag},
                        {D, wide, D, D, G, KS, I, I, I, P, P, P},
                        {&s->logits, &s->weights, &s->sel},
                        {G, KS, (size_t)c->K}};
    return a;
}

static void scratch_free(token_scratch *s, const moe_config *c, int n) {
    scratch_arrays a = arrays_of(s, c, n);
    for (int i = 0; i < 12; i++) free(*a.d[i]);
    for (int i = 0; i < 3; i++) free(*a.f[i]);
}

static bool scratch_alloc(token_scratch *s, const moe_config *c, int n) {
    memset(s, 0, sizeof *s);
    scratch_arrays a = arrays_of(s, c, n);
    bool ok = true;
    for (int i = 0; i < 12; i++) ok &= (*a.d[i] = malloc(a.dn[i] * sizeof(double))) != NULL;
    for (int i = 0; i < 3; i++) ok &= (*a.f[i] = malloc(a.fn[i] * sizeof(float))) != NULL;
    return ok;
}

typedef struct {
    const moe_config *cfg;
    const moe_weights *w;
    moe_envelope *env;
    token_scratch *s;
    int ep_per_rank; /* E_pad / n under EP */
} builder;

/* The rank holding channel j of a routed expert (sink: expert < 0). */
static int channel_rank(const builder *b, int expert, int j) {
    const moe_envelope *e = b->env;
    if (e->split_kind == MOE_SPLIT_NONE) return 0;
    if (e->split_kind == MOE_SPLIT_EP && expert >= 0) return expert / b->ep_per_rank;
    return j / (e->I / e->split_n);
}

static void routed_matrices(const builder *b, int e, moe_matrix *w13, moe_matrix *w2) {
    const moe_config *c = b->cfg;
    const size_t D = (size_t)c->D, I = (size_t)c->I;
    memset(w13, 0, sizeof *w13);
    memset(w2, 0, sizeof *w2);
    w13->rows = (int)(2 * I), w13->cols = (int)D;
    w2->rows = (int)D, w2->cols = (int)I;
    const moe_routed_format_info *fi = moe_routed_format_get(c->routed_format);
    if (fi->block) {
        const size_t B = (size_t)fi->block;
        w13->fmt = w2->fmt = fi->decoder;
        w13->mx = b->w->w13_mx + (size_t)e * 2 * I * D / 2;
        w13->scale = b->w->w13_scale + (size_t)e * 2 * I * D / B;
        w2->mx = b->w->w2_mx + (size_t)e * D * I / 2;
        w2->scale = b->w->w2_scale + (size_t)e * D * I / B;
        if (fi->has_scale2) {
            w13->scale2 = b->w->w13_scale2 + e;
            w2->scale2 = b->w->w2_scale2 + e;
        }
    } else {
        w13->bf16 = b->w->w13_bf16 + (size_t)e * 2 * I * D;
        w2->bf16 = b->w->w2_bf16 + (size_t)e * D * I;
    }
}

static void sink_matrices(const builder *b, int s, moe_matrix *w13, moe_matrix *w2) {
    const size_t D = (size_t)b->cfg->D, I = (size_t)b->cfg->I;
    moe_matrix a = {.bf16 = b->w->sink_w13 + (size_t)s * 2 * I * D, .rows = (int)(2 * I), .cols = (int)D};
    moe_matrix m = {.bf16 = b->w->sink_w2 + (size_t)s * D * I, .rows = (int)D, .cols = (int)I};
    *w13 = a;
    *w2 = m;
}

/* sum a*b and sum |a||b| over n elements */
static void dot_mag(const double *a, const double *v, int n, double *dot, double *mag) {
    double d = 0.0, m = 0.0;
    for (int i = 0; i < n; i++) {
        d += a[i] * v[i];
        m += fabs(a[i]) * fabs(v[i]);
    }
    *dot = d;
    *mag = m;
}

static void token_logits_and_routing(builder *b, int t) {
    moe_envelope *e = b->env;
    token_scratch *s = b->s;
    const int D = e->D, R = e->R, K = e->K, S = e->S, G = R + S;
    const moe_precision p = e->precision;
    ref_gate_logits(s->x, b->w->gate_w, G, D, s->logits);
    for (int g = 0; g < G; g++) {
        for (int d = 0; d < D; d++) s->row[d] = (double)moe_bf16_to_f32(b->w->gate_w[(size_t)g * D + d]);
        double c, m;
        dot_mag(s->row, s->x, D, &c, &m);
        double r = acc_bound(p, D) * m + ABS_FLOOR;
        double lo = to_f32(c - r), hi = to_f32(c + r);
        band_set(&e->logits, (size_t)t * G + g, c, lo, hi);
        s->logit_r[g] = dmax(c - lo, hi - c);
    }
    int32_t *ids = e->ids + (size_t)t * K;
    moe_route_token(s->logits, b->w->gate_bias, R, K, S, b->cfg->route_scale, b->w->global_scale,
                    ids, s->weights);
    /* The ids every run is judged by: the contract's selection, computed apart from ref/, so
     * that a bug in the reference's selection cannot move the judge with it. (The weights stay
     * the reference's; where its ids differ, the reference fails at stage ids first.) */
    contract_select(s->logits, b->w->gate_bias, R, K, ids, s->sel);

    /* near-ties: selection scores as the reference forms them, with their radii */
    const float *bias = b->w->gate_bias;
#define SEL(i) ((double)((float)(1.0 / (1.0 + exp(-(double)s->logits[i]))) + (bias ? bias[i] : 0.0f)))
#define SEL_R(i) (0.25 * s->logit_r[i] + 4.0 * U32 * (1.0 + (bias ? fabs((double)bias[i]) : 0.0)))
    bool near = false;
    for (int k = 0; k + 1 < K; k++)
        near = near || SEL(ids[k]) - SEL(ids[k + 1]) <= SEL_R(ids[k]) + SEL_R(ids[k + 1]);
    double best_unselected = -INFINITY;
    for (int x = 0; x < R; x++) {
        bool taken = false;
        for (int k = 0; k < K; k++) taken = taken || ids[k] == x;
        if (!taken) best_unselected = dmax(best_unselected, SEL(x) + SEL_R(x));
    }
    near = near || SEL(ids[K - 1]) - SEL_R(ids[K - 1]) <= best_unselected;
#undef SEL
#undef SEL_R
    e->near_tie[t] = near;

    /* weights: |d ln w_j| <= 2 max |d a| over the K + S logits used, plus fp32 evaluation */
    double max_r = 0.0, max_lambda = 0.0;
    for (int j = 0; j < K + S; j++) {
        int g = j < K ? ids[j] : R + (j - K);
        double a = (double)s->logits[g];
        max_r = dmax(max_r, s->logit_r[g]);
        max_lambda = dmax(max_lambda, fabs(fmin(a, 0.0) - log1p(exp(-fabs(a)))));
    }
    double rel = 2.0 * max_r + U32 * (16.0 + 2.0 * (K + S) + 8.0 * max_lambda);
    for (int j = 0; j < K + S; j++) {
        double w = (double)s->weights[j];
        s->w_rel[j] = rel;
        band_set(&e->weights, (size_t)t * (K + S) + j, w, w - fabs(w) * rel - ABS_FLOOR,
                 w + fabs(w) * rel + ABS_FLOOR);
    }
}

/* One slot's intermediate h over all I channels: fills the stage band (if h_band) and the
 * centre / radius / magnitude scratch used for y. gamma = 1 with no radius for routed slots. */
static void slot_h(builder *b, const moe_matrix *w13, double gamma, double gamma_rel,
                   moe_band *h_band, size_t h_off) {
    moe_envelope *e = b->env;
    token_scratch *s = b->s;
    const int D = e->D, I = e->I;
    const moe_precision p = e->precision;
    const double ga = acc_bound(p, D);
    for (int j = 0; j < I; j++) {
        double g, mg, u, mu;
        moe_matrix_row(w13, 2 * j, s->row);
        dot_mag(s->row, s->x, D, &g, &mg);
        moe_matrix_row(w13, 2 * j + 1, s->row);
        dot_mag(s->row, s->x, D, &u, &mu);
        double rg = ga * mg + ABS_FLOOR, ru = ga * mu + ABS_FLOOR;
        if (w13->scale2) { /* scale2 multiplies the block dot product: one more rounding */
            rg += unit(p) * (fabs(g) + rg);
            ru += unit(p) * (fabs(u) + ru);
        }
        double exact = silu(g) * u * gamma, lo, hi;
        if (rounds_bf16(p)) {
            double glo = to_bf16(g - rg), ghi = to_bf16(g + rg);
            double ulo = to_bf16(u - ru), uhi = to_bf16(u + ru);
            double smin = dmin(silu(glo), silu(ghi)), smax = dmax(silu(glo), silu(ghi));
            if (glo < SILU_ARGMIN && SILU_ARGMIN < ghi) smin = silu(SILU_ARGMIN);
            interval_mul(smin, smax, ulo, uhi, &lo, &hi);
            interval_mul(lo, hi, gamma * (1.0 - gamma_rel), gamma * (1.0 + gamma_rel), &lo, &hi);
            lo -= 16.0 * U32 * fabs(lo) + ABS_FLOOR;
            hi += 16.0 * U32 * fabs(hi) + ABS_FLOOR;
            lo = to_bf16(lo);
            hi = to_bf16(hi);
            s->hc[j] = 0.5 * (lo + hi);
            s->hrad[j] = 0.5 * (hi - lo);
        } else {
            double sg = silu(g);
            double r = fabs(gamma) * (SILU_SLOPE_MAX * (fabs(u) * rg + rg * ru) + fabs(sg) * ru) +
                       fabs(exact) * gamma_rel + 8.0 * UD * fabs(exact) + ABS_FLOOR;
            s->hc[j] = exact;
            s->hrad[j] = r;
            lo = to_f32(exact - r);
            hi = to_f32(exact + r);
        }
        s->hmax[j] = fabs(s->hc[j]) + s->hrad[j];
        if (h_band) band_set(h_band, h_off + (size_t)j, exact, lo, hi);
    }
}

/* y = W2 h for one slot: the stage band (if y_band) and its weighted contribution to the
 * unsplit partial and to each rank's partial; sum_c / sum_r (if given) accumulate the whole y's
 * centre and radius. weight 1 with no radius for sinks. */
static void slot_y(builder *b, const moe_matrix *w2, int expert, double weight, double w_rel,
                   moe_band *y_band, size_t y_off, double *sum_c, double *sum_r) {
    moe_envelope *e = b->env;
    token_scratch *s = b->s;
    const int D = e->D, I = e->I, n = e->split_n;
    const double ya = acc_bound(e->precision, I);
    const double post = w2->scale2 ? unit(e->precision) : 0.0; /* NVFP4: y' * scale2 rounded */
    double yc[64], yr[64], ym[64]; /* per rank; split_n <= 64 (checked when building) */
    for (int d = 0; d < D; d++) {
        moe_matrix_row(w2, d, s->row);
        for (int r = 0; r < n; r++) yc[r] = yr[r] = ym[r] = 0.0;
        for (int j = 0; j < I; j++) {
            int r = channel_rank(b, expert, j);
            yc[r] += s->row[j] * s->hc[j];
            yr[r] += fabs(s->row[j]) * s->hrad[j];
            ym[r] += fabs(s->row[j]) * s->hmax[j];
        }
        double c = 0.0, rad = 0.0;
        for (int r = 0; r <= n; r++) {
            /* r < n: rank r; r == n: the whole (unsplit) y */
            double rr_r = r < n ? yr[r] + ya * ym[r] : 0.0;
            if (r < n) rr_r += post * (fabs(yc[r]) + rr_r);
            double rc = r < n ? yc[r] : c, rr = r < n ? rr_r : rad;
            double size = fabs(rc) + rr;
            double tc = weight * rc;
            double trad = fabs(weight) * rr + fabs(weight) * w_rel * size;
            double tmag = fabs(weight) * (1.0 + w_rel) * size;
            size_t at = (size_t)(r < n ? 1 + r : 0) * (size_t)D + (size_t)d;
            s->pc[at] += tc;
            s->prad[at] += trad;
            s->pmag[at] += tmag;
            if (r < n) {
                c += yc[r];
                rad += rr_r;
            }
        }
        if (y_band)
            band_set(y_band, y_off + (size_t)d, c, round_y(e->precision, c - rad - ABS_FLOOR, -1),
                     round_y(e->precision, c + rad + ABS_FLOOR, 1));
        if (sum_c) sum_c[d] += c;
        if (sum_r) sum_r[d] += rad;
    }
}

static double round_contract(moe_precision p, double v) {
    return rounds_bf16(p) ? to_bf16(v) : to_f32(v);
}


static void token_output(builder *b, int t) {
    moe_envelope *e = b->env;
    token_scratch *s = b->s;
    const int D = e->D, K = e->K, S = e->S, n = e->split_n;
    const moe_precision p = e->precision;
    /* engine: each routed y and each w*y rounded to bf16, the sinks' sum rounded to bf16, and
     * the K + 1 terms added in bf16 (K additions): (K + 3) bf16 roundings, each at most one
     * unit of the sum of the terms' magnitudes */
    const double adds = (double)(K + 2 * S + 2) * unit(p) + (double)(K + 3) * engine_unit(p);
    for (int d = 0; d < D; d++) {
        size_t i = (size_t)t * D + d;
        double c = s->pc[d], r = s->prad[d] + adds * s->pmag[d] + ABS_FLOOR;
        band_set(&e->out_unsplit, i, c, round_contract(p, c - r), round_contract(p, c + r));
        /* split: each rank's partial rounded, then added in fp32 in rank order */
        double lo = 0.0, hi = 0.0, size = 0.0;
        for (int k = 0; k < n; k++) {
            size_t at = (size_t)(1 + k) * D + d;
            double rk = s->prad[at] + adds * s->pmag[at] + ABS_FLOOR;
            double plo = round_contract(p, s->pc[at] - rk), phi = round_contract(p, s->pc[at] + rk);
            lo += plo;
            hi += phi;
            size += dmax(fabs(plo), fabs(phi));
        }
        /* engine: the partials are added in bf16 (an all-reduce of bf16 tensors) */
        double add_err = (double)(n - 1) * (p == MOE_PRECISION_ENGINE ? engine_unit(p) : U32) * size;
        band_set(&e->out_split, i, c, round_contract(p, lo - add_err),
                 round_contract(p, hi + add_err));
    }
}

static void token_envelope(builder *b, int t, const uint16_t *x_row) {
    moe_envelope *e = b->env;
    token_scratch *s = b->s;
    const int D = e->D, I = e->I, K = e->K, S = e->S, n = e->split_n;
    bool finite = true;
    for (int d = 0; d < D; d++) {
        s->x[d] = (double)moe_bf16_to_f32(x_row[d]);
        finite = finite && isfinite(s->x[d]);
    }
    if (!finite) {
        e->nonfinite[t] = 1;
        for (int k = 0; k < K; k++) e->ids[(size_t)t * K + k] = -1;
        return;
    }
    token_logits_and_routing(b, t);
    size_t P = (size_t)(1 + n) * D;
    memset(s->pc, 0, P * sizeof(double));
    memset(s->prad, 0, P * sizeof(double));
    memset(s->pmag, 0, P * sizeof(double));
    for (int k = 0; k < K; k++) {
        int ex = e->ids[(size_t)t * K + k];
        moe_matrix w13, w2;
        routed_matrices(b, ex, &w13, &w2);
        slot_h(b, &w13, 1.0, 0.0, &e->routed_h, ((size_t)t * K + k) * I);
        slot_y(b, &w2, ex, (double)s->weights[k], s->w_rel[k], &e->routed_y,
               ((size_t)t * K + k) * D, NULL, NULL);
    }
    for (int d = 0; d < D; d++) s->sink_c[d] = s->sink_r[d] = 0.0;
    for (int sk = 0; sk < S; sk++) {
        moe_matrix w13, w2;
        sink_matrices(b, sk, &w13, &w2);
        slot_h(b, &w13, (double)s->weights[K + sk], s->w_rel[K + sk], &e->sink_h,
               ((size_t)t * S + sk) * I);
        slot_y(b, &w2, -1, 1.0, 0.0, NULL, 0, s->sink_c, s->sink_r);
    }
    for (int d = 0; d < D; d++) {
        /* the sinks' y added in fp32: S roundings of at most the sum's size */
        double c = s->sink_c[d], r = s->sink_r[d];
        r += (double)S * U32 * (fabs(c) + r) + ABS_FLOOR;
        band_set(&e->sink_y, (size_t)t * D + d, c, round_y(e->precision, c - r, -1),
                 round_y(e->precision, c + r, 1));
    }
    token_output(b, t);
}

moe_status moe_envelope_build(const moe_cmp_case *cc, moe_precision precision,
                              moe_split_kind kind, int n, moe_envelope **out, moe_error *err) {
    if (!out) return moe_fail(err, MOE_ERR_ARG, "envelope: NULL output pointer");
    *out = NULL;
    if (!cc || !cc->cfg || !cc->w) return moe_fail(err, MOE_ERR_ARG, "envelope: NULL case");
    if (cc->T < 0 || (cc->T > 0 && !cc->x))
        return moe_fail(err, MOE_ERR_ARG, "envelope: bad input (T = %d)", cc->T);
    const moe_config *c = cc->cfg;
    if (kind == MOE_SPLIT_NONE) n = 1;
    moe_split split = {kind, n, 0, 0};
    moe_status st = moe_split_validate(c, &split, err);
    if (st) return st;
    if (n > 64) return moe_fail(err, MOE_ERR_UNSUPPORTED, "envelope: split of %d ranks (at most 64)", n);
    moe_envelope *e = calloc(1, sizeof *e);
    if (!e) return moe_fail(err, MOE_ERR_NOMEM, "envelope: out of memory");
    e->precision = precision;
    e->split_kind = kind;
    e->split_n = n;
    e->T = cc->T, e->D = c->D, e->I = c->I, e->R = c->R, e->K = c->K, e->S = c->S;
    const size_t T = (size_t)cc->T, D = (size_t)c->D, I = (size_t)c->I, K = (size_t)c->K,
                 S = (size_t)c->S, G = (size_t)(c->R + c->S);
    e->nonfinite = calloc(T ? T : 1, 1);
    e->near_tie = calloc(T ? T : 1, 1);
    e->ids = calloc((T * K) > 0 ? T * K : 1, sizeof(int32_t));
    bool ok = e->nonfinite && e->near_tie && e->ids;
    ok = ok && !band_alloc(&e->logits, T * G) && !band_alloc(&e->weights, T * (K + S)) &&
         !band_alloc(&e->routed_h, T * K * I) && !band_alloc(&e->routed_y, T * K * D) &&
         !band_alloc(&e->sink_h, T * S * I) && !band_alloc(&e->sink_y, T * D) &&
         !band_alloc(&e->out_unsplit, T * D) && !band_alloc(&e->out_split, T * D);
    token_scratch s;
    memset(&s, 0, sizeof s);
    ok = ok && scratch_alloc(&s, c, n);
    if (!ok) {
        scratch_free(&s, c, n);
        moe_envelope_free(e);
        return moe_fail(err, MOE_ERR_NOMEM, "envelope: out of memory for T = %d", cc->T);
    }
    builder b = {c, cc->w, e, &s, 1};
    if (kind == MOE_SPLIT_EP) b.ep_per_rank = (c->R + (n - c->R % n) % n) / n;
    for (int t = 0; t < cc->T; t++) {
        token_envelope(&b, t, cc->x + (size_t)t * D);
    }
    scratch_free(&s, c, n);
    *out = e;
    return MOE_OK;
}
