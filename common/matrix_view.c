/*
 * matrix_view.c: a shard's weight matrices as views, decoded one row at a time (rules in
 * matrix_view.h).
 */
#include "matrix_view.h"

#include <string.h>

const moe_block_format *moe_matrix_format(const moe_matrix *m) {
    return m->fmt ? m->fmt : &moe_format_mxfp4;
}

void moe_matrix_row(const moe_matrix *m, int r, double *out) {
    if (m->mx) {
        const moe_block_format *f = moe_matrix_format(m);
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

void moe_routed_matrices(const moe_shard *sh, int e, moe_matrix *w13, moe_matrix *w2) {
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

void moe_sink_matrices(const moe_shard *sh, int s, moe_matrix *w13, moe_matrix *w2) {
    const size_t D = (size_t)sh->cfg.D, SIL = (size_t)sh->sink_I_local;
    memset(w13, 0, sizeof *w13);
    memset(w2, 0, sizeof *w2);
    w13->bf16 = sh->sink_w13 + (size_t)s * 2 * SIL * D;
    w13->rows = (int)(2 * SIL), w13->cols = (int)D;
    w2->bf16 = sh->sink_w2 + (size_t)s * D * SIL;
    w2->rows = (int)D, w2->cols = (int)SIL;
}
