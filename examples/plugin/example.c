/*
 * example.c: a layer backend outside the project's own paths, as a kernel developer
 * would write one: plain loops from the contract (docs/external-paths.md, the math in
 * docs/tolerances.md), sharing no code with ref/ or common/ beyond the types of the plugin ABI.
 *
 * Built by `make examples` into build/examples/libexample.so; run it as
 *     inkling-moe fuzz --paths plugin:build/examples/libexample.so --seconds 30
 *
 * What it computes, per token (both precision contracts, any TP/EP split and padding):
 *   - logits in double, rounded to fp32; selection sigma(l) + bias in fp32, K largest, ties to
 *     the lowest index; weights from the log-sigmoid form, times route_scale * global_scale;
 *   - weights: MXFP4 (E8M0 per 32), NVFP4 (E4M3 per 16, and a per-expert scale2 that multiplies
 *     the sums) and bf16;
 *   - each held routed expert: g, u (rows 2j, 2j+1 of w13), h = silu(g) u, y = W2 h; each sink:
 *     h = gamma silu(g) u; serving rounds g, u and h to bf16 and the rank's output once;
 *   - a row holding NaN or inf gives NaN output and weights and ids 0..K-1.
 * Weights are decoded to fp32 once, in create. Accumulation is in double.
 * EXAMPLE_NAME and EXAMPLE_UP_ROW can be redefined before including this file (planted_bug.c).
 */
#include "moe_plugin.h" /* pkg-config --cflags inkling-moe; in the tree: -Icommon */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef EXAMPLE_NAME
#define EXAMPLE_NAME "example"
#define EXAMPLE_DESCRIPTION "plain-loop example plugin (examples/plugin)"
#endif
/* Row of w13 holding channel j's gate (up = 0) or up (up = 1) weights: interleaved. */
#ifndef EXAMPLE_UP_ROW
#define EXAMPLE_UP_ROW(j, up, width) (2 * (j) + (up))
#endif

typedef struct {
    const moe_shard *sh;
    int serving;
    int D, I, R, K, S, G, n_local;
    float *w13; /* [n_local, 2I, D] routed, decoded */
    float *w2;  /* [n_local, D, I] */
    float *s13; /* [S, 2 sink_I, D] */
    float *s2;  /* [S, D, sink_I] */
    const float *w13_scale2, *w2_scale2; /* NVFP4: [n_local] per-expert factors of the sums; else NULL */
} example_state;

static float bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float round_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return f; /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float fp4_value(unsigned code) {
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    return (code & 8u) ? -mag[code & 7u] : mag[code & 7u];
}

/* An E4M3 (float8_e4m3fn) scale byte: sign, 4 exponent bits (bias 7), 3 mantissa bits. */
static float e4m3_value(uint8_t b) {
    int e = (b >> 3) & 15, m = b & 7;
    float v = e ? ldexpf(1.0f + m / 8.0f, e - 7) : ldexpf(m / 8.0f, -6);
    return (b & 0x80u) ? -v : v;
}

/* rows x cols block-scaled FP4 matrix (codes [rows, cols/2], one scale byte per `block`
 * elements: E8M0 for MXFP4, E4M3 for NVFP4) into out [rows, cols]. */
static void decode_fp4(const uint8_t *codes, const uint8_t *scales, int rows, int cols, int block, int e4m3,
                       float *out) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            uint8_t byte = codes[(size_t)r * (cols / 2) + c / 2];
            unsigned code = (c % 2) ? byte >> 4 : byte & 15u;
            uint8_t sb = scales[(size_t)r * (cols / block) + c / block];
            float scale = e4m3 ? e4m3_value(sb) : ldexpf(1.0f, (int)sb - 127);
            out[(size_t)r * cols + c] = fp4_value(code) * scale;
        }
}

static void decode_bf16(const uint16_t *in, size_t n, float *out) {
    for (size_t i = 0; i < n; i++) out[i] = bf16_to_float(in[i]);
}

static void example_destroy(void *state) {
    example_state *s = state;
    if (!s) return;
    free(s->w13);
    free(s->w2);
    free(s->s13);
    free(s->s2);
    free(s);
}

static moe_status fail(moe_error *err, moe_status st, const char *msg) {
    if (err) {
        err->status = st;
        snprintf(err->msg, sizeof err->msg, "%s: %s", EXAMPLE_NAME, msg);
    }
    return st;
}

static bool example_available(char *why, size_t len) {
    (void)why, (void)len;
    return true;
}

static bool example_supports(const moe_config *cfg, const moe_split *split, const moe_options *opt,
                             char *why, size_t len) {
    (void)split;
    if (cfg->routed_format > MOE_ROUTED_NVFP4) {
        snprintf(why, len, "routed format %d unknown to this plugin", (int)cfg->routed_format);
        return false;
    }
    if (opt->precision != MOE_PRECISION_EXACT && opt->precision != MOE_PRECISION_SERVING) {
        snprintf(why, len, "precision %d unknown to this plugin", (int)opt->precision);
        return false;
    }
    return true;
}

static moe_status example_create(const moe_shard *sh, const moe_options *opt, void **out,
                                 moe_error *err) {
    example_state *s = calloc(1, sizeof *s);
    if (!s) return fail(err, MOE_ERR_NOMEM, "out of memory");
    const moe_config *c = &sh->cfg;
    s->sh = sh;
    s->serving = opt->precision == MOE_PRECISION_SERVING;
    s->D = c->D, s->I = sh->I_local, s->R = c->R, s->K = c->K, s->S = c->S, s->G = c->R + c->S;
    s->n_local = sh->n_local_experts;
    const size_t D = (size_t)s->D, I = (size_t)s->I, SI = (size_t)sh->sink_I_local, E = (size_t)s->n_local;
    s->w13 = malloc(E * 2 * I * D * sizeof(float) + 1);
    s->w2 = malloc(E * D * I * sizeof(float) + 1);
    s->s13 = malloc((size_t)s->S * 2 * SI * D * sizeof(float) + 1);
    s->s2 = malloc((size_t)s->S * D * SI * sizeof(float) + 1);
    if (!s->w13 || !s->w2 || !s->s13 || !s->s2) {
        example_destroy(s);
        return fail(err, MOE_ERR_NOMEM, "out of memory for the decoded weights");
    }
    for (size_t e = 0; e < E; e++) {
        if (c->routed_format != MOE_ROUTED_BF16) {
            const int nv = c->routed_format == MOE_ROUTED_NVFP4, B = nv ? 16 : 32;
            decode_fp4(sh->w13_mx + e * 2 * I * D / 2, sh->w13_scale + e * 2 * I * D / B, (int)(2 * I), (int)D, B,
                       nv, s->w13 + e * 2 * I * D);
            decode_fp4(sh->w2_mx + e * D * I / 2, sh->w2_scale + e * D * I / B, (int)D, (int)I, B, nv,
                       s->w2 + e * D * I);
        } else {
            decode_bf16(sh->w13_bf16 + e * 2 * I * D, 2 * I * D, s->w13 + e * 2 * I * D);
            decode_bf16(sh->w2_bf16 + e * D * I, D * I, s->w2 + e * D * I);
        }
    }
    if (c->routed_format == MOE_ROUTED_NVFP4) s->w13_scale2 = sh->w13_scale2, s->w2_scale2 = sh->w2_scale2;
    decode_bf16(sh->sink_w13, (size_t)s->S * 2 * SI * D, s->s13);
    decode_bf16(sh->sink_w2, (size_t)s->S * D * SI, s->s2);
    *out = s;
    return MOE_OK;
}

/* ---------------------------------------------------------------- routing */

/* ids [K] and weights [K+S] from one token's logits [G]. */
static void route_token(const example_state *s, const float *logits, int32_t *ids, float *weights) {
    const float *bias = s->sh->gate_bias;
    for (int k = 0; k < s->K; k++) {
        int best = -1;
        float best_sel = 0.0f;
        for (int e = 0; e < s->R; e++) {
            int taken = 0;
            for (int j = 0; j < k; j++) taken |= ids[j] == e;
            if (taken) continue;
            float sel = (float)(1.0 / (1.0 + exp(-(double)logits[e]))) + (bias ? bias[e] : 0.0f);
            if (best < 0 || sel > best_sel) best = e, best_sel = sel; /* ties: lower index kept */
        }
        ids[k] = best;
    }
    double lam[512], m = -INFINITY, sum = 0.0;
    const int n = s->K + s->S;
    for (int j = 0; j < n; j++) {
        double a = logits[j < s->K ? ids[j] : s->R + (j - s->K)];
        lam[j] = fmin(a, 0.0) - log1p(exp(-fabs(a)));
        m = fmax(m, lam[j]);
    }
    for (int j = 0; j < n; j++) sum += exp(lam[j] - m);
    const double scale = (double)s->sh->cfg.route_scale * (double)s->sh->global_scale;
    for (int j = 0; j < n; j++) weights[j] = (float)(exp(lam[j] - m) / sum * scale);
}

static moe_status example_route(void *state, int T, const float *logits, int32_t *ids,
                                float *weights, moe_error *err) {
    example_state *s = state;
    if (s->K + s->S > 512) return fail(err, MOE_ERR_UNSUPPORTED, "more than 512 routing weights");
    for (int t = 0; t < T; t++)
        route_token(s, logits + (size_t)t * s->G, ids + (size_t)t * s->K, weights + (size_t)t * (s->K + s->S));
    return MOE_OK;
}

/* ---------------------------------------------------------------- experts */

/* h [I] = gamma silu(g) u from w13 [2I, D] (times f, NVFP4's scale2) and x [D]; serving rounds
 * g, u and h to bf16. */
static void expert_h(const example_state *s, const float *w13, double f, int I, const float *x, double gamma,
                     double *h) {
    for (int j = 0; j < I; j++) {
        const float *wg = w13 + (size_t)EXAMPLE_UP_ROW(j, 0, I) * s->D;
        const float *wu = w13 + (size_t)EXAMPLE_UP_ROW(j, 1, I) * s->D;
        double g = 0.0, u = 0.0;
        for (int d = 0; d < s->D; d++) {
            g += (double)wg[d] * x[d];
            u += (double)wu[d] * x[d];
        }
        g *= f, u *= f;
        if (s->serving) {
            /* g, u rounded to bf16; the product in double (in float a tiny g loses its bits
             * in g / 2 before u scales it up), rounded once through fp32 to bf16 */
            double gb = round_bf16((float)g), ub = round_bf16((float)u);
            h[j] = round_bf16((float)(gb / (1.0 + exp(-gb)) * ub * gamma));
        } else {
            h[j] = g / (1.0 + exp(-g)) * u * gamma;
        }
    }
}

/* y [D] (double) = f W2 [D, I] h [I] (f: NVFP4's scale2, else 1) */
static void expert_y(const example_state *s, const float *w2, double f, int I, const double *h, double *y) {
    for (int d = 0; d < s->D; d++) {
        double acc = 0.0;
        for (int j = 0; j < I; j++) acc += (double)w2[(size_t)d * I + j] * h[j];
        y[d] = acc * f;
    }
}

typedef struct {
    float *x;
    double *h, *y, *acc;
    float logits[1024];
    int32_t ids[256];
    float weights[512];
} token_scratch;

static void token_forward(const example_state *s, token_scratch *w, int t, float *out, moe_stages *st) {
    const int D = s->D, K = s->K, S = s->S, I = s->I, SI = s->sh->sink_I_local;
    for (int g = 0; g < s->G; g++) {
        double acc = 0.0;
        for (int d = 0; d < D; d++) acc += (double)bf16_to_float(s->sh->gate_w[(size_t)g * D + d]) * w->x[d];
        w->logits[g] = (float)acc;
    }
    route_token(s, w->logits, w->ids, w->weights);
    for (int d = 0; d < D; d++) w->acc[d] = 0.0;
    for (int k = 0; k < K; k++) {
        int local = w->ids[k] - s->sh->expert_first;
        if (local < 0 || local >= s->n_local) { /* another rank's expert: zero stages */
            if (st->routed_h) memset(st->routed_h + ((size_t)t * K + k) * I, 0, (size_t)I * sizeof(float));
            if (st->routed_y) memset(st->routed_y + ((size_t)t * K + k) * D, 0, (size_t)D * sizeof(float));
            continue;
        }
        expert_h(s, s->w13 + (size_t)local * 2 * I * D, s->w13_scale2 ? s->w13_scale2[local] : 1.0, I, w->x, 1.0, w->h);
        expert_y(s, s->w2 + (size_t)local * D * I, s->w2_scale2 ? s->w2_scale2[local] : 1.0, I, w->h, w->y);
        for (int d = 0; d < D; d++) w->acc[d] += (double)w->weights[k] * w->y[d];
        if (st->routed_h)
            for (int j = 0; j < I; j++) st->routed_h[((size_t)t * K + k) * I + j] = (float)w->h[j];
        if (st->routed_y)
            for (int d = 0; d < D; d++) st->routed_y[((size_t)t * K + k) * D + d] = (float)w->y[d];
    }
    if (st->sink_y) memset(st->sink_y + (size_t)t * D, 0, (size_t)D * sizeof(float));
    for (int k = 0; k < S; k++) {
        expert_h(s, s->s13 + (size_t)k * 2 * SI * D, 1.0, SI, w->x, (double)w->weights[K + k], w->h);
        expert_y(s, s->s2 + (size_t)k * D * SI, 1.0, SI, w->h, w->y);
        for (int d = 0; d < D; d++) w->acc[d] += w->y[d];
        if (st->sink_h)
            for (int j = 0; j < SI; j++) st->sink_h[((size_t)t * S + k) * SI + j] = (float)w->h[j];
        if (st->sink_y)
            for (int d = 0; d < D; d++) st->sink_y[(size_t)t * D + d] += (float)w->y[d];
    }
    for (int d = 0; d < D; d++) out[(size_t)t * D + d] = s->serving ? round_bf16((float)w->acc[d]) : (float)w->acc[d];
}

/* A row holding NaN or inf: NaN output, weights and logits, ids 0..K-1 (any valid ids). */
static void token_nonfinite(const example_state *s, int t, float *out, moe_stages *st) {
    for (int d = 0; d < s->D; d++) out[(size_t)t * s->D + d] = NAN;
    for (int k = 0; st->topk_ids && k < s->K; k++) st->topk_ids[(size_t)t * s->K + k] = k;
    for (int j = 0; st->topk_weights && j < s->K + s->S; j++) st->topk_weights[(size_t)t * (s->K + s->S) + j] = NAN;
    for (int g = 0; st->logits && g < s->G; g++) st->logits[(size_t)t * s->G + g] = NAN;
}

static moe_status example_forward(void *state, int T, const uint16_t *x, float *out, moe_stages *stages,
                                  moe_error *err) {
    example_state *s = state;
    if (s->G > 1024 || s->K > 256 || s->K + s->S > 512) return fail(err, MOE_ERR_UNSUPPORTED, "too many experts");
    moe_stages none = {0};
    moe_stages *st = stages ? stages : &none;
    const size_t wide = (size_t)(s->D > s->I ? s->D : s->I) + (size_t)s->sh->sink_I_local;
    token_scratch *w = calloc(1, sizeof *w);
    if (w) {
        w->x = malloc((size_t)s->D * sizeof(float));
        w->h = malloc(wide * sizeof(double));
        w->y = malloc((size_t)s->D * sizeof(double));
        w->acc = malloc((size_t)s->D * sizeof(double));
    }
    int ok = w && w->x && w->h && w->y && w->acc;
    for (int t = 0; ok && t < T; t++) {
        int finite = 1;
        for (int d = 0; d < s->D; d++) {
            w->x[d] = bf16_to_float(x[(size_t)t * s->D + d]);
            finite &= isfinite(w->x[d]) != 0;
        }
        if (!finite) {
            token_nonfinite(s, t, out, st);
            continue;
        }
        token_forward(s, w, t, out, st);
        if (st->logits) memcpy(st->logits + (size_t)t * s->G, w->logits, (size_t)s->G * sizeof(float));
        if (st->topk_ids) memcpy(st->topk_ids + (size_t)t * s->K, w->ids, (size_t)s->K * sizeof(int32_t));
        if (st->topk_weights)
            memcpy(st->topk_weights + (size_t)t * (s->K + s->S), w->weights, (size_t)(s->K + s->S) * sizeof(float));
    }
    if (w) {
        free(w->x);
        free(w->h);
        free(w->y);
        free(w->acc);
    }
    free(w);
    if (!ok) return fail(err, MOE_ERR_NOMEM, "out of memory for the token scratch");
    st->filled = (st->logits ? MOE_STAGE_LOGITS : 0u) | (st->topk_ids && st->topk_weights ? MOE_STAGE_TOPK : 0u) |
                 (st->routed_h ? MOE_STAGE_ROUTED_H : 0u) | (st->routed_y ? MOE_STAGE_ROUTED_Y : 0u) |
                 (st->sink_h ? MOE_STAGE_SINK_H : 0u) | (st->sink_y ? MOE_STAGE_SINK_Y : 0u);
    return MOE_OK;
}

static const moe_backend example_backend = {EXAMPLE_NAME,      EXAMPLE_DESCRIPTION, example_available,
                                            example_supports,  example_create,      example_forward,
                                            example_route,     example_destroy,     NULL};

MOE_PLUGIN_EXPORT(example_backend)
