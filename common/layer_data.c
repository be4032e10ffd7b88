/* layer_data.c: owned full-layer weights and the random layer (rules in layer_data.h). */
#include "layer_data.h"

#include "numeric.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void moe_layer_data_free(moe_layer_data *ld) {
    if (!ld) return;
    free(ld->gate_w);
    free(ld->gate_bias);
    free(ld->w13_mx);
    free(ld->w13_scale);
    free(ld->w2_mx);
    free(ld->w2_scale);
    free(ld->w13_scale2);
    free(ld->w2_scale2);
    free(ld->w13_bf16);
    free(ld->w2_bf16);
    free(ld->sink_w13);
    free(ld->sink_w2);
    memset(ld, 0, sizeof *ld);
}

moe_status moe_layer_data_alloc(const moe_config *cfg, moe_layer_data *ld, moe_error *err) {
    memset(ld, 0, sizeof *ld);
    moe_status st = moe_config_validate(cfg, err);
    if (st) return st;
    const size_t D = (size_t)cfg->D, I = (size_t)cfg->I, R = (size_t)cfg->R, S = (size_t)cfg->S;
    ld->cfg = *cfg;
    ld->gate_w = calloc((R + S) * D, sizeof(uint16_t));
    ld->gate_bias = cfg->has_gate_bias ? calloc(R, sizeof(float)) : NULL;
    const moe_routed_format_info *fi = moe_routed_format_get(cfg->routed_format);
    const size_t B = (size_t)fi->block;
    if (B) {
        ld->w13_mx = calloc(R * 2 * I * D / 2, 1);
        ld->w13_scale = calloc(R * 2 * I * D / B, 1);
        ld->w2_mx = calloc(R * D * I / 2, 1);
        ld->w2_scale = calloc(R * D * I / B, 1);
    } else {
        ld->w13_bf16 = calloc(R * 2 * I * D, sizeof(uint16_t));
        ld->w2_bf16 = calloc(R * D * I, sizeof(uint16_t));
    }
    if (fi->has_scale2) {
        ld->w13_scale2 = calloc(R, sizeof(float));
        ld->w2_scale2 = calloc(R, sizeof(float));
    }
    ld->sink_w13 = calloc(S * 2 * I * D + 1, sizeof(uint16_t));
    ld->sink_w2 = calloc(S * D * I + 1, sizeof(uint16_t));
    if (!ld->gate_w || (cfg->has_gate_bias && !ld->gate_bias) || !ld->sink_w13 || !ld->sink_w2 ||
        (B && (!ld->w13_mx || !ld->w13_scale || !ld->w2_mx || !ld->w2_scale)) ||
        (fi->has_scale2 && (!ld->w13_scale2 || !ld->w2_scale2)) ||
        (!B && (!ld->w13_bf16 || !ld->w2_bf16))) {
        moe_layer_data_free(ld);
        return moe_fail(err, MOE_ERR_NOMEM, "layer data: out of memory");
    }
    moe_weights w = {ld->gate_w,  ld->gate_bias, 1.0f,        ld->w13_mx,   ld->w13_scale, ld->w2_mx,
                     ld->w2_scale, ld->w13_bf16, ld->w2_bf16, ld->sink_w13, ld->sink_w2,
                     ld->w13_scale2, ld->w2_scale2, NULL};
    ld->w = w;
    return MOE_OK;
}

/* Element i draws from counters 2i and 2i+1 of (seed, stream) (Box-Muller takes two uniforms),
 * so the fill can run on every core and still give the same bytes. */
static void fill_bf16_normal(uint16_t *p, size_t n, double stddev, uint64_t seed, uint64_t stream) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        moe_rng r = {seed, stream, 2 * i};
        p[i] = moe_f32_to_bf16((float)(moe_rng_normal(&r) * stddev));
    }
}

/* Codes uniform over all 16 (byte i from counter i); one scale byte per 32 columns, near
 * 2^-(log2(sqrt(cols)) + 2) (scale byte i from counter n_code_bytes + i). */
static void fill_mxfp4(uint8_t *codes, uint8_t *scales, size_t rows, size_t cols, uint64_t seed,
                       uint64_t stream) {
    const int centre = 127 - (int)lround(0.5 * log2((double)cols)) - 2;
    const size_t n_code_bytes = rows * cols / 2, n_scales = rows * cols / 32;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n_code_bytes; i++) codes[i] = (uint8_t)(moe_rng_hash(seed, stream, i) & 0xFF);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n_scales; i++) {
        moe_rng r = {seed, stream, n_code_bytes + i};
        scales[i] = (uint8_t)moe_rng_int(&r, centre - 1, centre + 1);
    }
}

/* Codes uniform over all 16 (byte i from counter i); E4M3 scale bytes 0x30..0x40 (0.5..2, all
 * mantissas; from counter n_code_bytes + i); one scale2 per expert, 1 / (2.93 sqrt(cols)) times
 * a factor in [0.75, 1.25) (counter n_code_bytes + n_scales + e), so the weights have the bf16
 * layers' magnitude (2.93: the rms of a uniform E2M1 code). */
static void fill_nvfp4(uint8_t *codes, uint8_t *scales, float *scale2, size_t experts, size_t rows,
                       size_t cols, uint64_t seed, uint64_t stream) {
    const size_t n_code_bytes = experts * rows * cols / 2, n_scales = experts * rows * cols / 16;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n_code_bytes; i++) codes[i] = (uint8_t)(moe_rng_hash(seed, stream, i) & 0xFF);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n_scales; i++) {
        moe_rng r = {seed, stream, n_code_bytes + i};
        scales[i] = (uint8_t)moe_rng_int(&r, 0x30, 0x40);
    }
    for (size_t e = 0; e < experts; e++) {
        moe_rng r = {seed, stream, n_code_bytes + n_scales + e};
        scale2[e] = (float)((0.75 + 0.5 * moe_rng_uniform(&r)) / (2.93 * sqrt((double)cols)));
    }
}

moe_status moe_layer_data_random(const moe_config *cfg, uint64_t seed, moe_layer_data *ld,
                                 moe_error *err) {
    moe_status st = moe_layer_data_alloc(cfg, ld, err);
    if (st) return st;
    const size_t D = (size_t)cfg->D, I = (size_t)cfg->I, R = (size_t)cfg->R, S = (size_t)cfg->S;
    /* One stream per tensor, so changing one tensor's size leaves the others' draws alone. */
    moe_rng bias = moe_rng_make(seed, 2), scale = moe_rng_make(seed, 3);
    fill_bf16_normal(ld->gate_w, (R + S) * D, 1.0 / sqrt((double)D), seed, 1);
    if (cfg->has_gate_bias)
        for (size_t e = 0; e < R; e++) ld->gate_bias[e] = (float)(0.05 * moe_rng_normal(&bias));
    ld->w.global_scale = cfg->has_global_scale ? (float)(0.5 + 1.5 * moe_rng_uniform(&scale)) : 1.0f;
    if (cfg->routed_format == MOE_ROUTED_MXFP4) {
        fill_mxfp4(ld->w13_mx, ld->w13_scale, R * 2 * I, D, seed, 4);
        fill_mxfp4(ld->w2_mx, ld->w2_scale, R * D, I, seed, 5);
    } else if (cfg->routed_format == MOE_ROUTED_NVFP4) {
        fill_nvfp4(ld->w13_mx, ld->w13_scale, ld->w13_scale2, R, 2 * I, D, seed, 4);
        fill_nvfp4(ld->w2_mx, ld->w2_scale, ld->w2_scale2, R, D, I, seed, 5);
    } else {
        fill_bf16_normal(ld->w13_bf16, R * 2 * I * D, 1.0 / sqrt((double)D), seed, 4);
        fill_bf16_normal(ld->w2_bf16, R * D * I, 1.0 / sqrt((double)I), seed, 5);
    }
    fill_bf16_normal(ld->sink_w13, S * 2 * I * D, 1.0 / sqrt((double)D), seed, 6);
    fill_bf16_normal(ld->sink_w2, S * D * I, 1.0 / sqrt((double)I), seed, 7);
    return MOE_OK;
}

void moe_random_input(int T, int D, uint64_t seed, uint16_t *x) {
    fill_bf16_normal(x, (size_t)T * (size_t)D, 1.0, seed, 100);
}
