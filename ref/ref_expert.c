/*
 * ref_expert.c: one SwiGLU expert on one token
 * (contract.md [math.experts], [math.sinks], [precision]).
 *
 * Rules:
 *   - weights are decoded exactly (MXFP4 and bf16 are exact in fp32, so in double; an NVFP4
 *     weight code * scale * scale2 is exact in double);
 *   - g = W1 x and u = W3 x accumulate in double; w13 rows interleave: row 2j is W1 row j,
 *     row 2j+1 is W3 row j;
 *   - h = gamma * silu(g) * u (gamma = 1 for routed experts: their weight multiplies after W2;
 *     gamma_s for sinks: it multiplies the intermediate, before W2);
 *   - serving: g and u are rounded to bf16 (through fp32), h is computed from them and rounded
 *     to bf16 (through fp32); y = W2 h accumulates in double either way.
 */
#include "ref.h"

#include "../common/numeric.h"

#include <math.h>
#include <string.h>

const moe_block_format *ref_matrix_format(const ref_matrix *m) {
    return m->fmt ? m->fmt : &moe_format_mxfp4;
}

void ref_matrix_row(const ref_matrix *m, int r, double *out) {
    if (m->mx) {
        const moe_block_format *f = ref_matrix_format(m);
        const int B = f->block;
        const uint8_t *codes = m->mx + (size_t)r * (m->cols / 2);
        const uint8_t *scales = m->scale + (size_t)r * (m->cols / B);
        const double scale2 = m->scale2 ? (double)*m->scale2 : 1.0;
        for (int b = 0; b < m->cols / B; b++) {
            /* at most 2 + 4 + 24 significant bits: exact in double */
            const double s = (double)f->scale(scales[b]) * scale2;
            for (int c = b * B; c < (b + 1) * B; c++) {
                uint8_t code = c % 2 == 0 ? (uint8_t)(codes[c / 2] & 0x0F) : (uint8_t)(codes[c / 2] >> 4);
                out[c] = (double)moe_e2m1_to_f32(code) * s;
            }
        }
    } else {
        for (int c = 0; c < m->cols; c++) out[c] = (double)moe_bf16_to_f32(m->bf16[(size_t)r * m->cols + c]);
    }
}

void ref_routed_matrices(const moe_shard *sh, int e, ref_matrix *w13, ref_matrix *w2) {
    const size_t D = (size_t)sh->cfg.D, IL = (size_t)sh->I_local;
    memset(w13, 0, sizeof *w13);
    memset(w2, 0, sizeof *w2);
    w13->rows = (int)(2 * IL), w13->cols = (int)D;
    w2->rows = (int)D, w2->cols = (int)IL;
    const moe_routed_format_info *fi = moe_routed_format_get(sh->cfg.routed_format);
    if (fi->block) {
        const size_t B = (size_t)fi->block;
        w13->fmt = w2->fmt = fi->decoder;
        w13->mx = sh->w13_mx + (size_t)e * 2 * IL * D / 2;
        w13->scale = sh->w13_scale + (size_t)e * 2 * IL * D / B;
        w2->mx = sh->w2_mx + (size_t)e * D * IL / 2;
        w2->scale = sh->w2_scale + (size_t)e * D * IL / B;
        if (fi->has_scale2) {
            w13->scale2 = sh->w13_scale2 + e;
            w2->scale2 = sh->w2_scale2 + e;
        }
    } else {
        w13->bf16 = sh->w13_bf16 + (size_t)e * 2 * IL * D;
        w2->bf16 = sh->w2_bf16 + (size_t)e * D * IL;
    }
}

void ref_sink_matrices(const moe_shard *sh, int s, ref_matrix *w13, ref_matrix *w2) {
    const size_t D = (size_t)sh->cfg.D, SIL = (size_t)sh->sink_I_local;
    memset(w13, 0, sizeof *w13);
    memset(w2, 0, sizeof *w2);
    w13->bf16 = sh->sink_w13 + (size_t)s * 2 * SIL * D;
    w13->rows = (int)(2 * SIL), w13->cols = (int)D;
    w2->bf16 = sh->sink_w2 + (size_t)s * D * SIL;
    w2->rows = (int)D, w2->cols = (int)SIL;
}

static double dot(const double *a, const double *b, int n) {
    double acc = 0.0;
    for (int i = 0; i < n; i++) acc += a[i] * b[i];
    return acc;
}

static double to_bf16(double v) { return (double)moe_round_bf16((float)v); }

static double silu(double z) { return z / (1.0 + exp(-z)); }

void ref_expert_token(const ref_matrix *w13, const ref_matrix *w2, const double *x, int D,
                      int I_loc, double gamma, bool serving, double *h, double *y,
                      double *row_buf) {
    for (int j = 0; j < I_loc; j++) {
        ref_matrix_row(w13, 2 * j, row_buf);
        double g = dot(row_buf, x, D);
        ref_matrix_row(w13, 2 * j + 1, row_buf);
        double u = dot(row_buf, x, D);
        if (serving) {
            g = to_bf16(g);
            u = to_bf16(u);
        }
        double hj = silu(g) * u * gamma;
        h[j] = serving ? to_bf16(hj) : hj;
    }
    for (int d = 0; d < D; d++) {
        ref_matrix_row(w2, d, row_buf);
        y[d] = dot(row_buf, h, I_loc);
    }
}
