/*
 * fuzz_case.c: case lines, suites and the layer + input a case stands for (rules in
 * fuzz_case.h).
 *
 * Features, applied after moe_layer_data_random in this order (each from its own RNG stream,
 * so one feature's draws never shift another's):
 *   ties      every routed gate row (and its bias) is a copy of one of 1..3 prototype rows, so
 *             selection scores come in a few exactly equal groups: ties at the K boundary and
 *             inside the top K;
 *   dup       a few gate rows (and biases) duplicated onto others;
 *   near      a few gate rows copied with one element moved by one bf16 ulp, or (with a bias)
 *             the bias moved by one fp32 ulp: selection scores that differ in the last bits;
 *   neglogit  one input column set to 32 in every token and that column of the gate rows set
 *             to -8, -32 or -128 (logits near -256, -1024 or -4096: past about -709, exp of
 *             them underflows and a log-sigmoid normaliser that leaves out the sinks
 *             overflows; -8 in 1 case in 4), on about half of the rows (sinks included: 1 in
 *             8), on all of them (1 in 8), or on every routed row and no sink (3 in 4);
 *   codes     (MXFP4, NVFP4) the first 32 values of every row holds every E2M1 code twice;
 *   e4m3      (NVFP4) about 1 in 8 scale blocks set to +-0, an E4M3 subnormal, 2^-6 or +-448;
 *   scale2    (NVFP4) about a third of the experts get extreme scale2 pairs (0, 2^+-40 with
 *             2^-+80, 2^-126, the fp32 subnormal 2^-140);
 *   e8m0      (MXFP4, after codes) about 1 in 16 scale blocks set to 0 (2^-127), 1, 2, a large byte
 *             (2^1..2^20), or 254 over codes forced to +-0;
 *   few       (bias) K experts get +2 bias: every finite token selects the same K experts;
 *   allhit    token t's input leans towards experts tK..tK+K-1 (mod R): every expert is hit
 *             once T*K >= R;
 *   biastie   (bias, R >= 2) experts p < q tie exactly after the contract's two roundings
 *             of sel = sigma + bias and differ by one ulp after a single rounding: p's gate row
 *             is zero (sigma = 1/2 exactly) with bias 1, so sel 1.5; q's row is zero but for c
 *             at a column d0 where every token's x is 32 (logit 32c for every token, exact on
 *             every path), with sigma(32c) above its fp32 rounding s, and q's bias is
 *             1.5 + 2^-24 - s (exact in fp32): s + bias is exactly halfway between 1.5 and the
 *             next float and rounds to even, 1.5, so the lowest index (p) wins, while
 *             sigma + bias rounded once is the next float up;
 *   nonfinite up to a quarter of the tokens (at least one) get one NaN, +inf or -inf.
 *   file      the candidate paths run on the layer written with the checkpoint writer and
 *             read back by the loader (fuzz_file.h); with a BF16 global_scale the layer's
 *             global_scale is a bf16 value, so that the file holds it exactly.
 * file is drawn from the aiming stream (fuzz_suite_case), so that adding it moved no other
 * draw; NVFP4 layers are not written (checkpoint_write.h), so they never get it.
 */
#include "fuzz_case.h"

#include "fuzz_file.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const feature_names[FZ_FEATURE_COUNT] = {
    "ties", "dup", "near", "e8m0", "codes", "neglogit", "nonfinite", "few", "allhit", "biastie",
    "e4m3", "scale2", "file"};

const char *fuzz_feature_name(int i) { return i >= 0 && i < FZ_FEATURE_COUNT ? feature_names[i] : "?"; }

/* ---------------------------------------------------------------- the line */

char *fuzz_case_format(const fuzz_case *c, char *buf, size_t len) {
    char split[24] = "none", feat[160] = "";
    if (c->split == MOE_SPLIT_TP) snprintf(split, sizeof split, "tp%d", c->n);
    if (c->split == MOE_SPLIT_EP) snprintf(split, sizeof split, "ep%d", c->n);
    for (int i = 0; i < FZ_FEATURE_COUNT; i++)
        if (c->features & (1u << i))
            snprintf(feat + strlen(feat), sizeof feat - strlen(feat), "%s%s", feat[0] ? "," : "",
                     feature_names[i]);
    char sample[48] = "";
    if (c->sample > 0) snprintf(sample, sizeof sample, " sample=%d", c->sample);
    if (c->input > 0) snprintf(sample + strlen(sample), sizeof sample - strlen(sample), " input=%d", c->input);
    snprintf(buf, len,
             "D=%d I=%d R=%d K=%d S=%d T=%d fmt=%s bias=%d gscale=%d rs=%.9g split=%s pad=%d "
             "seed=%" PRIu64 " feat=%s%s",
             c->cfg.D, c->cfg.I, c->cfg.R, c->cfg.K, c->cfg.S, c->T,
             moe_routed_format_get(c->cfg.routed_format)->key, c->cfg.has_gate_bias ? 1 : 0,
             c->cfg.has_global_scale ? 1 : 0, (double)c->cfg.route_scale, split, c->pad, c->seed,
             feat[0] ? feat : "none", sample);
    return buf;
}

static bool parse_int(const char *v, int *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < -1000000000L || x > 1000000000L) return false;
    *out = (int)x;
    return true;
}

moe_status fuzz_case_validate(const fuzz_case *c, moe_error *err) {
    moe_split split = {c->split, c->n, 0, c->pad};
    moe_status st = moe_split_validate(&c->cfg, &split, err);
    if (st) return st;
    if (c->T < 0 || c->T > 1000000)
        return moe_fail(err, MOE_ERR_ARG, "case: T = %d is not in [0, 1000000]", c->T);
    if (c->sample < 0 || c->sample > c->T)
        return moe_fail(err, MOE_ERR_ARG, "case: sample = %d is not in [0, T = %d]", c->sample, c->T);
    if (c->input < 0) return moe_fail(err, MOE_ERR_ARG, "case: input = %d is negative", c->input);
    return MOE_OK;
}

static const char *const case_keys[] = {"D", "I", "R", "K", "S", "T", "fmt", "bias", "gscale", "rs",
                                        "split", "pad", "seed", "feat", "sample", "input"};
enum { CASE_KEY_COUNT = (int)(sizeof case_keys / sizeof case_keys[0]) };

/* feat=a,b,... (or none) into c->features. */
static moe_status parse_features(const char *v, fuzz_case *c, moe_error *err) {
    if (!strcmp(v, "none")) return MOE_OK;
    char list[256];
    snprintf(list, sizeof list, "%s", v);
    for (char *save = NULL, *f = strtok_r(list, ",", &save); f; f = strtok_r(NULL, ",", &save)) {
        int bit = -1;
        for (int i = 0; i < FZ_FEATURE_COUNT; i++)
            if (!strcmp(f, feature_names[i])) bit = i;
        if (bit < 0) return moe_fail(err, MOE_ERR_ARG, "case line: unknown feature '%s'", f);
        c->features |= 1u << bit;
    }
    return MOE_OK;
}

/* The value v of key case_keys[which] into c; false when v is not a value of that key. */
static bool set_key(fuzz_case *c, int which, const char *v) {
    int iv = 0;
    char *end;
    switch (which) {
    case 0: return parse_int(v, &c->cfg.D);
    case 1: return parse_int(v, &c->cfg.I);
    case 2: return parse_int(v, &c->cfg.R);
    case 3: return parse_int(v, &c->cfg.K);
    case 4: return parse_int(v, &c->cfg.S);
    case 5: return parse_int(v, &c->T);
    case 6: {
        const bool ok = moe_routed_format_from_key(v) >= 0;
        c->cfg.routed_format = ok ? (moe_routed_format)moe_routed_format_from_key(v) : MOE_ROUTED_MXFP4;
        return ok;
    }
    case 7: {
        const bool ok = parse_int(v, &iv) && (iv == 0 || iv == 1);
        c->cfg.has_gate_bias = iv;
        return ok;
    }
    case 8: {
        const bool ok = parse_int(v, &iv) && (iv == 0 || iv == 1);
        c->cfg.has_global_scale = iv;
        return ok;
    }
    case 9:
        c->cfg.route_scale = strtof(v, &end);
        return end != v && !*end && isfinite(c->cfg.route_scale);
    case 10:
        if (!strcmp(v, "none")) {
            c->split = MOE_SPLIT_NONE;
            c->n = 1;
            return true;
        }
        if (strncmp(v, "tp", 2) && strncmp(v, "ep", 2)) return false;
        c->split = v[0] == 't' ? MOE_SPLIT_TP : MOE_SPLIT_EP;
        return parse_int(v + 2, &c->n) && c->n >= 1;
    case 11: return parse_int(v, &c->pad);
    case 12:
        errno = 0;
        c->seed = (uint64_t)strtoull(v, &end, 0);
        return !errno && end != v && !*end;
    case 14: return parse_int(v, &c->sample);
    case 15: return parse_int(v, &c->input);
    default: return true;
    }
}

moe_status fuzz_case_parse(const char *line, fuzz_case *c, moe_error *err) {
    memset(c, 0, sizeof *c);
    c->split = MOE_SPLIT_NONE;
    c->n = 1;
    c->cfg.route_scale = 1.0f;
    unsigned seen = 0;
    const char *p = line;
    while (*p) {
        while (isspace((unsigned char)*p)) p++;
        if (!*p) break;
        char word[256];
        size_t n = 0;
        while (p[n] && !isspace((unsigned char)p[n])) n++;
        if (n >= sizeof word) return moe_fail(err, MOE_ERR_ARG, "case line: word too long at '%.40s'", p);
        memcpy(word, p, n);
        word[n] = 0;
        p += n;
        char *eq = strchr(word, '=');
        if (!eq) return moe_fail(err, MOE_ERR_ARG, "case line: word '%s' is not key=value", word);
        *eq = 0;
        const char *k = word, *v = eq + 1;
        int which = -1;
        for (int i = 0; i < CASE_KEY_COUNT; i++)
            if (!strcmp(k, case_keys[i])) which = i;
        if (which < 0) return moe_fail(err, MOE_ERR_ARG, "case line: unknown key '%s'", k);
        seen |= 1u << which;
        const moe_status st = which == 13 ? parse_features(v, c, err) : MOE_OK;
        if (st) return st;
        if (!set_key(c, which, v)) return moe_fail(err, MOE_ERR_ARG, "case line: bad value '%s' for key %s", v, k);
    }
    for (int i = 0; i < 6; i++) /* the sizes must be given; the rest have defaults */
        if (!(seen & (1u << i))) return moe_fail(err, MOE_ERR_ARG, "case line: key %s missing", case_keys[i]);
    if (c->split == MOE_SPLIT_NONE) c->n = 1;
    return fuzz_case_validate(c, err);
}

/* A partial Fisher-Yates shuffle on its own stream of the case seed, then sorted, so the same
 * case always checks the same tokens. */
int fuzz_case_sampled_tokens(const fuzz_case *c, int *tokens) {
    const int n = c->sample > 0 && c->sample < c->T ? c->sample : c->T;
    for (int t = 0; t < c->T; t++) tokens[t] = t;
    if (n == c->T) return n;
    moe_rng rng = moe_rng_make(c->seed, 0x5A5A);
    for (int i = 0; i < n; i++) {
        int j = moe_rng_int(&rng, i, c->T - 1), tmp = tokens[i];
        tokens[i] = tokens[j];
        tokens[j] = tmp;
    }
    for (int i = 1; i < n; i++) /* insertion sort: n is small */
        for (int j = i; j > 0 && tokens[j - 1] > tokens[j]; j--) {
            int tmp = tokens[j];
            tokens[j] = tokens[j - 1];
            tokens[j - 1] = tmp;
        }
    return n;
}

/* ---------------------------------------------------------------- features */

static void copy_gate_row(moe_layer_data *ld, int from, int to) {
    size_t D = (size_t)ld->cfg.D;
    memcpy(ld->gate_w + (size_t)to * D, ld->gate_w + (size_t)from * D, D * sizeof(uint16_t));
    if (ld->gate_bias) ld->gate_bias[to] = ld->gate_bias[from];
}

static void feature_ties(moe_layer_data *ld, moe_rng *rng) {
    int R = ld->cfg.R, protos = moe_rng_int(rng, 1, 3);
    if (protos > R) protos = R;
    for (int e = protos; e < R; e++) copy_gate_row(ld, moe_rng_int(rng, 0, protos - 1), e);
}

static void feature_dup(moe_layer_data *ld, moe_rng *rng) {
    int R = ld->cfg.R, pairs = moe_rng_int(rng, 1, R / 2 > 1 ? R / 2 : 1);
    for (int i = 0; i < pairs && R > 1; i++) copy_gate_row(ld, moe_rng_int(rng, 0, R - 1), moe_rng_int(rng, 0, R - 1));
}

static void feature_near(moe_layer_data *ld, moe_rng *rng) {
    int R = ld->cfg.R, D = ld->cfg.D, pairs = moe_rng_int(rng, 1, R / 2 > 1 ? R / 2 : 1);
    for (int i = 0; i < pairs && R > 1; i++) {
        int a = moe_rng_int(rng, 0, R - 1), b = moe_rng_int(rng, 0, R - 1);
        if (a == b) continue;
        copy_gate_row(ld, a, b);
        if (ld->gate_bias && moe_rng_int(rng, 0, 1)) {
            ld->gate_bias[b] = nextafterf(ld->gate_bias[b], moe_rng_int(rng, 0, 1) ? INFINITY : -INFINITY);
        } else {
            uint16_t *wv = ld->gate_w + (size_t)b * D + moe_rng_int(rng, 0, D - 1);
            if ((*wv & 0x7FFFu) != 0 && (*wv & 0x7F80u) != 0x7F80u) *wv ^= 1u; /* one ulp */
        }
    }
}

static void feature_neglogit(moe_layer_data *ld, uint16_t *x, int T, moe_rng *rng) {
    static const float depth[4] = {-8.0f, -32.0f, -128.0f, -128.0f};
    const int D = ld->cfg.D, R = ld->cfg.R, G = R + ld->cfg.S, d0 = moe_rng_int(rng, 0, D - 1);
    const uint16_t v = moe_f32_to_bf16(depth[moe_rng_int(rng, 0, 3)]);
    const int rows = moe_rng_int(rng, 0, 7); /* 0: about half, 1: all, else the routed ones */
    for (int g = 0; g < G; g++)
        if (rows == 1 || (rows >= 2 && g < R) || (rows == 0 && moe_rng_int(rng, 0, 1)))
            ld->gate_w[(size_t)g * D + d0] = v;
    for (int t = 0; t < T; t++) x[(size_t)t * D + d0] = moe_f32_to_bf16(32.0f);
}

static void feature_biastie(moe_layer_data *ld, uint16_t *x, int T, moe_rng *rng) {
    const int D = ld->cfg.D, R = ld->cfg.R;
    if (R < 2 || !ld->gate_bias) return;
    const int p = moe_rng_int(rng, 0, R - 2), q = moe_rng_int(rng, p + 1, R - 1);
    const int d0 = moe_rng_int(rng, 0, D - 1);
    uint16_t c = 0;
    double sigma = 0.0;
    float s = 0.0f;
    for (int tries = 0; tries < 64 && !(sigma > (double)s); tries++) { /* sigma rounded down */
        c = moe_f32_to_bf16((float)(0.01 + 0.1 * moe_rng_uniform(rng)));
        sigma = 1.0 / (1.0 + exp(-32.0 * (double)moe_bf16_to_f32(c)));
        s = (float)sigma;
    }
    if (!(sigma > (double)s)) return;
    memset(ld->gate_w + (size_t)p * D, 0, (size_t)D * sizeof(uint16_t));
    memset(ld->gate_w + (size_t)q * D, 0, (size_t)D * sizeof(uint16_t));
    ld->gate_w[(size_t)q * D + d0] = c;
    ld->gate_bias[p] = 1.0f;
    ld->gate_bias[q] = (float)(1.5 + ldexp(1.0, -24) - (double)s); /* exact: a multiple of 2^-24 in (0.5, 1] */
    for (int t = 0; t < T; t++) x[(size_t)t * D + d0] = moe_f32_to_bf16(32.0f);
}

/* One block's byte; 254 only over codes forced to +-0, so every weight stays finite. */
static void extreme_block(uint8_t *codes16, uint8_t *scale, moe_rng *rng) {
    int kind = moe_rng_int(rng, 0, 9);
    if (kind < 3) *scale = 0;
    else if (kind < 5) *scale = (uint8_t)moe_rng_int(rng, 1, 2);
    else if (kind < 8) *scale = (uint8_t)(127 + moe_rng_int(rng, 1, 20)); /* 128, 129: a GPU decode's edge */
    else {
        *scale = 254;
        for (int i = 0; i < 16; i++) codes16[i] &= 0x88u; /* keep the signs: +-0 */
    }
}

static void feature_e8m0_matrix(uint8_t *codes, uint8_t *scales, size_t rows, size_t cols, moe_rng *rng) {
    size_t blocks = rows * cols / 32;
    for (size_t b = 0; b < blocks; b++)
        if (moe_rng_int(rng, 0, 15) == 0) extreme_block(codes + b * 16, scales + b, rng);
}

static void feature_codes_matrix(uint8_t *codes, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < 32; c += 2) {
            uint8_t lo = (uint8_t)((c + r) % 16), hi = (uint8_t)((c + 1 + r) % 16);
            codes[r * cols / 2 + (size_t)c / 2] = (uint8_t)(lo | hi << 4);
        }
}

static void feature_allhit(moe_layer_data *ld, uint16_t *x, int T, moe_rng *rng) {
    const int D = ld->cfg.D, R = ld->cfg.R, K = ld->cfg.K;
    const double lean = sqrt((double)D);
    for (int t = 0; t < T; t++)
        for (int d = 0; d < D; d++) {
            double v = 0.5 * moe_rng_normal(rng);
            for (int k = 0; k < K; k++)
                v += lean * (double)moe_bf16_to_f32(ld->gate_w[(size_t)((t * K + k) % R) * D + d]);
            x[(size_t)t * D + d] = moe_f32_to_bf16((float)v);
        }
}

static void feature_nonfinite(uint16_t *x, int T, int D, moe_rng *rng) {
    static const uint16_t bad[3] = {0x7FC0u, 0x7F80u, 0xFF80u}; /* NaN, +inf, -inf */
    int rows = moe_rng_int(rng, 1, T / 4 > 1 ? T / 4 : 1);
    for (int i = 0; i < rows; i++)
        x[(size_t)moe_rng_int(rng, 0, T - 1) * D + moe_rng_int(rng, 0, D - 1)] = bad[moe_rng_int(rng, 0, 2)];
}

/* NVFP4: about 1 in 8 scale blocks (of 16) set to +-0, an E4M3 subnormal (+-1..7 * 2^-9), the
 * smallest normal 2^-6 or the largest value +-448; the codes stay random. */
static void feature_e4m3_scales(uint8_t *scales, size_t n, moe_rng *rng) {
    static const uint8_t special[6] = {0x00, 0x01, 0x07, 0x08, 0x7E, 0x80};
    for (size_t b = 0; b < n; b++) {
        if (moe_rng_int(rng, 0, 7)) continue;
        uint8_t v = special[moe_rng_int(rng, 0, 5)];
        if (v == 0x01) v = (uint8_t)moe_rng_int(rng, 1, 7);
        scales[b] = (uint8_t)(v | (moe_rng_int(rng, 0, 1) ? 0x80u : 0u));
    }
}

/* NVFP4: about a third of the experts get extreme scale2 pairs that keep the output finite:
 * w13 0; w13 x 2^40 with w2 x 2^-80 (h ~ 2^80); w13 x 2^-40 with w2 x 2^80; w2 = 2^-126;
 * w13 = 2^-140 (an fp32 subnormal). */
static void feature_scale2(moe_layer_data *ld, moe_rng *rng) {
    for (int e = 0; e < ld->cfg.R; e++) {
        if (moe_rng_int(rng, 0, 2)) continue;
        float *a = &ld->w13_scale2[e], *b = &ld->w2_scale2[e];
        switch (moe_rng_int(rng, 0, 4)) {
        case 0: *a = 0.0f; break;
        case 1: *a *= 0x1p40f, *b *= 0x1p-80f; break;
        case 2: *a *= 0x1p-40f, *b *= 0x1p80f; break;
        case 3: *b = 0x1p-126f; break;
        default: *a = 0x1p-140f; break;
        }
    }
}

/* The input's seed: the case seed, or a variant of it (same weights, another input). */
static uint64_t input_seed(const fuzz_case *c) {
    return c->input > 0 ? moe_rng_hash(c->seed, 0x1297, (uint64_t)c->input) : c->seed;
}

moe_status fuzz_case_input(const fuzz_case *c, uint16_t **xp, moe_error *err) {
    const int T = c->T, D = c->cfg.D;
    *xp = malloc(((size_t)T * D > 0 ? (size_t)T * D : 1) * sizeof(uint16_t));
    if (!*xp) return moe_fail(err, MOE_ERR_NOMEM, "case: out of memory for x [%d, %d]", T, D);
    moe_random_input(T, D, input_seed(c), *xp);
    return MOE_OK;
}

/* The weights (routed in their format, sinks and gate in bf16) once for each candidate and once
 * as generated; the runs' intermediates, dominated by the fp32 y of every routed and sink
 * expert of every token, kept by several runs at once; and what the process holds besides. */
double fuzz_case_host_bytes(const fuzz_case *c, int candidates) {
    const moe_config *g = &c->cfg;
    const moe_routed_format_info *f = moe_routed_format_get(g->routed_format);
    const double per_weight = f && f->block ? 0.5 + 1.0 / f->block : 2.0;
    const double expert = 3.0 * g->I * g->D; /* w13 and w2 */
    const double weights = g->R * expert * per_weight + g->S * expert * 2.0 + (double)(g->R + g->S) * g->D * 2.0;
    return (1.0 + candidates) * weights + 24.0 * c->T * (g->K + g->S) * g->D + 0.5e9;
}

moe_status fuzz_case_build(const fuzz_case *c, moe_layer_data *ld, uint16_t **xp, moe_error *err) {
    *xp = NULL;
    moe_status st = fuzz_case_validate(c, err);
    if (st) return st;
    st = moe_layer_data_random(&c->cfg, c->seed, ld, err);
    if (st) return st;
    const int T = c->T, D = c->cfg.D, I = c->cfg.I, R = c->cfg.R;
    uint16_t *x;
    st = fuzz_case_input(c, &x, err);
    if (st) {
        moe_layer_data_free(ld);
        return st;
    }
    const uint64_t xseed = input_seed(c);
    unsigned f = c->features;
    bool mx = c->cfg.routed_format == MOE_ROUTED_MXFP4;
    moe_rng rng[FZ_FEATURE_COUNT];
    for (int i = 0; i < FZ_FEATURE_COUNT; i++) rng[i] = moe_rng_make(c->seed, 200 + (uint64_t)i);
    rng[6] = moe_rng_make(xseed, 206); /* the input-only features follow the input */
    rng[8] = moe_rng_make(xseed, 208);
    if (f & FZ_TIES) feature_ties(ld, &rng[0]);
    if (f & FZ_DUP) feature_dup(ld, &rng[1]);
    if (f & FZ_NEAR) feature_near(ld, &rng[2]);
    const bool nv = c->cfg.routed_format == MOE_ROUTED_NVFP4;
    if ((f & FZ_CODES) && (mx || nv)) {
        feature_codes_matrix(ld->w13_mx, (size_t)R * 2 * I, (size_t)D);
        feature_codes_matrix(ld->w2_mx, (size_t)R * D, (size_t)I);
    }
    if ((f & FZ_E8M0) && mx) {
        feature_e8m0_matrix(ld->w13_mx, ld->w13_scale, (size_t)R * 2 * I, (size_t)D, &rng[3]);
        feature_e8m0_matrix(ld->w2_mx, ld->w2_scale, (size_t)R * D, (size_t)I, &rng[3]);
    }
    if ((f & FZ_E4M3) && nv) {
        moe_rng r = moe_rng_make(c->seed, 210);
        feature_e4m3_scales(ld->w13_scale, (size_t)R * 2 * I * D / 16, &r);
        feature_e4m3_scales(ld->w2_scale, (size_t)R * D * I / 16, &r);
    }
    if ((f & FZ_SCALE2) && nv) {
        moe_rng r = moe_rng_make(c->seed, 211);
        feature_scale2(ld, &r);
    }
    if ((f & FZ_FEW) && ld->gate_bias)
        for (int k = 0; k < c->cfg.K; k++) ld->gate_bias[moe_rng_int(&rng[7], 0, R - 1)] += 2.0f;
    if (f & FZ_ALLHIT) feature_allhit(ld, x, T, &rng[8]);
    if (f & FZ_NEGLOGIT) feature_neglogit(ld, x, T, &rng[5]);
    if (f & FZ_BIASTIE) feature_biastie(ld, x, T, &rng[9]);
    if ((f & FZ_NONFINITE) && T > 0) feature_nonfinite(x, T, D, &rng[6]);
    if ((f & FZ_FILE) && fuzz_file_opts(c).global_scale_bf16)
        ld->w.global_scale = moe_round_bf16(ld->w.global_scale);
    *xp = x;
    return MOE_OK;
}

/* ---------------------------------------------------------------- suites */

int fuzz_case_threads(long k) {
    if (k % 2 == 0) return 1;
    if (k % 16 == 15) return 0;
    if (k % 16 == 7) return 2 * omp_get_num_procs() + 1;
    return 2;
}

static bool split_ok(const moe_config *cfg, moe_split_kind kind, int n, int pad) {
    moe_split s = {kind, n, 0, pad};
    return moe_split_validate(cfg, &s, NULL) == MOE_OK;
}

fuzz_case fuzz_suite_case(const fuzz_suite *s, uint64_t seed, long i) {
    if (i < s->n_fixed) return s->fixed[i];
    moe_rng rng = moe_rng_make(seed, 1000 + (uint64_t)i);
    fuzz_case c;
    memset(&c, 0, sizeof c);
    moe_config *cfg = &c.cfg;
    cfg->routed_format = moe_rng_uniform(&rng) < s->bf16_p ? MOE_ROUTED_BF16 : MOE_ROUTED_MXFP4;
    /* NVFP4 from its own stream, so that the draws of the other cases stay what they were */
    moe_rng nvr = moe_rng_make(seed, 8000 + (uint64_t)i);
    const bool nvfp4 = cfg->routed_format == MOE_ROUTED_MXFP4 && moe_rng_uniform(&nvr) < s->nvfp4_p;
    if (nvfp4) cfg->routed_format = MOE_ROUTED_NVFP4;
    /* a large batch runs on a narrow layer, so that it costs what a small case costs */
    bool big = moe_rng_uniform(&rng) < s->big_T_p;
    int dim_hi = big && s->big_T_dim_max > 0 ? s->big_T_dim_max : 1 << 20;
    cfg->D = 32 * moe_rng_int(&rng, s->D_lo / 32, (s->D_hi < dim_hi ? s->D_hi : dim_hi) / 32);
    cfg->I = 32 * moe_rng_int(&rng, s->I_lo / 32, (s->I_hi < dim_hi ? s->I_hi : dim_hi) / 32);
    /* NVFP4 takes multiples of 16: half its D and I (when wide enough) lose 16 */
    if (nvfp4 && cfg->D >= 48 && moe_rng_int(&nvr, 0, 1)) cfg->D -= 16;
    if (nvfp4 && cfg->I >= 48 && moe_rng_int(&nvr, 0, 1)) cfg->I -= 16;
    /* half the draws from small expert counts, where ties and full coverage are likely */
    int r_hi = moe_rng_int(&rng, 0, 1) ? s->R_hi : (s->R_lo + 8 < s->R_hi ? s->R_lo + 8 : s->R_hi);
    cfg->R = moe_rng_int(&rng, s->R_lo, r_hi);
    cfg->K = moe_rng_int(&rng, 1, cfg->R < s->K_hi ? cfg->R : s->K_hi);
    cfg->S = moe_rng_int(&rng, s->S_lo, s->S_hi);
    cfg->has_gate_bias = moe_rng_int(&rng, 0, 1);
    cfg->has_global_scale = moe_rng_int(&rng, 0, 1);
    static const float scales[4] = {1.0f, 2.5f, 8.0f, 0.75f};
    cfg->route_scale = scales[moe_rng_int(&rng, 0, 3)];
    c.T = big ? moe_rng_int(&rng, s->big_T_lo, s->big_T_hi) : moe_rng_int(&rng, s->T_lo, s->T_hi);
    c.split = MOE_SPLIT_NONE;
    c.n = 1;
    if (s->split_n_hi >= 2 && moe_rng_uniform(&rng) < s->split_p) {
        moe_split_kind kind = moe_rng_int(&rng, 0, 1) ? MOE_SPLIT_TP : MOE_SPLIT_EP;
        int n = moe_rng_int(&rng, 2, s->split_n_hi);
        while (n > 1 && !split_ok(cfg, kind, n, 0)) n--;
        if (n > 1) {
            c.split = kind;
            c.n = n;
            if (moe_rng_uniform(&rng) < s->pad_p) c.pad = 32 * moe_rng_int(&rng, 1, 4);
        }
    }
    for (int f = 0; f < 10; f++) /* the first ten; later features draw from their own streams */
        if (moe_rng_uniform(&rng) < s->feature_p) c.features |= 1u << f;
    if (big && moe_rng_int(&rng, 0, 1)) c.features |= FZ_FEW;           /* large T, few experts hit */
    if (!big && c.T * cfg->K >= cfg->R && moe_rng_int(&rng, 0, 3) == 0) c.features |= FZ_ALLHIT;
    if (cfg->routed_format == MOE_ROUTED_BF16) c.features &= ~(unsigned)(FZ_E8M0 | FZ_CODES);
    if (nvfp4) {
        c.features &= ~(unsigned)FZ_E8M0;
        if (moe_rng_uniform(&nvr) < 2 * s->feature_p) c.features |= FZ_E4M3;
        if (moe_rng_uniform(&nvr) < 2 * s->feature_p) c.features |= FZ_SCALE2;
    }
    if (c.features & FZ_FEW) cfg->has_gate_bias = true;
    if (c.T == 0) c.features &= ~(unsigned)(FZ_NONFINITE | FZ_ALLHIT);
    c.seed = moe_rng_next(&rng);
    /* aiming and the later features draw from their own stream, so that the draws above stay
     * what they were before these existed */
    moe_rng aim = moe_rng_make(seed, 7000 + (uint64_t)i);
    if (moe_rng_uniform(&aim) < s->aim_p) fuzz_case_aim(&c, &aim);
    if (moe_rng_uniform(&aim) < s->feature_p && !nvfp4) c.features |= FZ_FILE; /* not written */
    if (c.features & FZ_BIASTIE) cfg->has_gate_bias = true; /* the tie is the bias's doing */
    return c;
}

static moe_status suite_defaults(fuzz_suite *s, const char *name) {
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->D_lo = s->I_lo = 32;
    s->D_hi = s->I_hi = 128;
    s->R_lo = 1, s->R_hi = 16, s->K_hi = 8, s->S_lo = 0, s->S_hi = 3, s->T_lo = 0, s->T_hi = 8;
    s->big_T_lo = s->big_T_hi = 64;
    s->big_T_dim_max = 64;
    s->split_n_hi = 8, s->split_p = 0.5, s->pad_p = 0.2, s->feature_p = 0.2, s->bf16_p = 0.3;
    s->nvfp4_p = 0.3;
    return MOE_OK;
}

moe_status fuzz_suite_load(const char *dir, const char *name, fuzz_suite *s, moe_error *err) {
    suite_defaults(s, name);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.txt", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) return moe_fail(err, MOE_ERR_IO, "suite %s: cannot open %s", name, path);
    char line[1024];
    int lineno = 0;
    moe_status st = MOE_OK;
    while (!st && fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line;
        while (isspace((unsigned char)*p)) p++;
        p[strcspn(p, "\r\n")] = 0;
        if (!*p || *p == '#') continue;
        char key[32];
        int used = 0;
        if (sscanf(p, "%31s %n", key, &used) < 1) continue;
        const char *v = p + used;
        double a = 0, b = 0, c = 0;
        int nv = sscanf(v, "%lf %lf %lf", &a, &b, &c);
        struct { const char *k; int *lo, *hi; } ranges[] = {
            {"D", &s->D_lo, &s->D_hi}, {"I", &s->I_lo, &s->I_hi}, {"R", &s->R_lo, &s->R_hi},
            {"S", &s->S_lo, &s->S_hi}, {"T", &s->T_lo, &s->T_hi}};
        bool done = false;
        for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
            if (!strcmp(key, ranges[i].k)) {
                if (nv != 2 || a > b || a < 0) st = moe_fail(err, MOE_ERR_FORMAT, "%s:%d: %s needs 'lo hi'", path, lineno, key);
                *ranges[i].lo = (int)a;
                *ranges[i].hi = (int)b;
                done = true;
            }
        if (done) continue;
        if (!strcmp(key, "case")) {
            if (s->n_fixed >= FUZZ_SUITE_MAX_FIXED)
                st = moe_fail(err, MOE_ERR_FORMAT, "%s:%d: more than %d fixed cases", path, lineno, FUZZ_SUITE_MAX_FIXED);
            else st = fuzz_case_parse(v, &s->fixed[s->n_fixed++], err);
        } else if (!strcmp(key, "K_max") && nv == 1) s->K_hi = (int)a;
        else if (!strcmp(key, "split_n_max") && nv == 1) s->split_n_hi = (int)a;
        else if (!strcmp(key, "split_p") && nv == 1) s->split_p = a;
        else if (!strcmp(key, "pad_p") && nv == 1) s->pad_p = a;
        else if (!strcmp(key, "feature_p") && nv == 1) s->feature_p = a;
        else if (!strcmp(key, "bf16_p") && nv == 1) s->bf16_p = a;
        else if (!strcmp(key, "nvfp4_p") && nv == 1) s->nvfp4_p = a;
        else if (!strcmp(key, "aim_p") && nv == 1) s->aim_p = a;
        else if (!strcmp(key, "big_T") && nv == 3) {
            s->big_T_p = a;
            s->big_T_lo = (int)b;
            s->big_T_hi = (int)c;
        } else if (!strcmp(key, "big_T_dim_max") && nv == 1) s->big_T_dim_max = (int)a;
        else st = moe_fail(err, MOE_ERR_FORMAT, "%s:%d: unknown or malformed key '%s'", path, lineno, key);
    }
    fclose(f);
    if (!st && (s->D_lo < 32 || s->I_lo < 32 || s->R_lo < 1 || s->K_hi < 1))
        st = moe_fail(err, MOE_ERR_FORMAT, "%s: D, I >= 32, R >= 1, K_max >= 1 required", path);
    return st;
}
