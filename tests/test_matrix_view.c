/*
 * test_matrix_view.c: the matrix views every CPU path reads a shard's weights through
 * (common/matrix_view.h).
 *
 * Rules checked, with the formats decoded here from their definitions (contract.md [formats]),
 * not through numeric.c:
 *   - moe_matrix_row gives code * scale (* scale2 for NVFP4) for MXFP4 and NVFP4, the value for
 *     bf16, for every row of every routed expert and sink of a random layer;
 *   - an unsplit shard's views are the layer's own matrices; a TP rank's w13 holds the gate/up
 *     pairs of its channel slab and its w2 the matching columns; an EP rank's expert e is the
 *     layer's expert expert_first + e.
 */
#include "test_support.h"

#include "common/layer_data.h"
#include "common/matrix_view.h"

#include <stdlib.h>

/* E2M1: codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 the sign. */
static double e2m1(unsigned code) {
    static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    return (code & 8u ? -1.0 : 1.0) * mag[code & 7u];
}

/* E8M0: 2^(b - 127). E4M3: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 subnormal. */
static double e8m0(unsigned b) { return ldexp(1.0, (int)b - 127); }
static double e4m3(unsigned b) {
    const unsigned e = (b >> 3) & 15u, m = b & 7u;
    const double v = e ? ldexp(1.0 + m / 8.0, (int)e - 7) : ldexp(m / 8.0, -6);
    return b & 0x80u ? -v : v;
}

static double bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Element (r, c) of matrix e of a full-layer block tensor: codes [E, rows, cols/2], scales
 * [E, rows, cols/B], scale2 [E] or NULL. */
static double block_element(const uint8_t *codes, const uint8_t *scales, const float *scale2,
                            int B, bool nv, int rows, int cols, int e, int r, int c) {
    const size_t row = (size_t)e * rows + r;
    const uint8_t byte = codes[row * (cols / 2) + c / 2];
    const unsigned code = c % 2 ? byte >> 4 : byte & 15u;
    const uint8_t sb = scales[row * (cols / B) + c / B];
    return e2m1(code) * (nv ? e4m3(sb) : e8m0(sb)) * (scale2 ? (double)scale2[e] : 1.0);
}

/* Checks view m (expert e of the layer, its rows r0 + r and columns c0 + c) against the full
 * layer's matrix [rows, cols]: codes/scales/scale2 of a block format, or bf16. */
static void check_view(const moe_matrix *m, const moe_weights *w, const moe_config *cfg, bool w13,
                       int e, int row_of_pair0, int col0) {
    const moe_routed_format_info *fi = moe_routed_format_get(cfg->routed_format);
    const int rows = w13 ? 2 * cfg->I : cfg->D, cols = w13 ? cfg->D : cfg->I;
    double *got = malloc((size_t)m->cols * sizeof(double));
    for (int r = 0; r < m->rows; r++) {
        moe_matrix_row(m, r, got);
        const int fr = w13 ? row_of_pair0 + r : r; /* w13: the slab's rows; w2: every row */
        for (int c = 0; c < m->cols; c++) {
            const int fc = w13 ? c : col0 + c;
            double want;
            if (fi->block)
                want = block_element(w13 ? w->w13_mx : w->w2_mx, w13 ? w->w13_scale : w->w2_scale,
                                     w13 ? w->w13_scale2 : w->w2_scale2, fi->block,
                                     fi->has_scale2, rows, cols, e, fr, fc);
            else
                want = bf16((w13 ? w->w13_bf16 : w->w2_bf16)[((size_t)e * rows + fr) * cols + fc]);
            if (got[c] != want) fail_msg("expert %d %s row %d col %d: %g, want %g", e,
                                         w13 ? "w13" : "w2", r, c, got[c], want);
        }
    }
    free(got);
}

static void check_layer(moe_routed_format fmt, moe_split_kind kind, int n) {
    moe_config cfg = {64, 64, 5, 2, 2, 1.0f, true, true, fmt};
    moe_layer_data ld;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_random(&cfg, 21, &ld, &err), MOE_OK);
    for (int rank = 0; rank < n; rank++) {
        moe_split split = {kind, n, rank, 0};
        moe_shard sh;
        assert_int_equal(moe_shard_build(&cfg, &ld.w, &split, &sh, &err), MOE_OK);
        const int tp_cut = kind == MOE_SPLIT_TP ? rank * sh.I_local : 0;
        for (int e = 0; e < sh.n_local_experts; e++) {
            const int global = sh.expert_first + e;
            if (global >= cfg.R) continue; /* EP padding: zeros, no layer matrix */
            moe_matrix w13, w2;
            moe_routed_matrices(&sh, e, &w13, &w2);
            assert_int_equal(w13.rows, 2 * sh.I_local);
            assert_int_equal(w2.cols, sh.I_local);
            check_view(&w13, &ld.w, &cfg, true, global, 2 * tp_cut, 0);
            check_view(&w2, &ld.w, &cfg, false, global, 0, tp_cut);
        }
        for (int s = 0; s < cfg.S; s++) {
            moe_matrix w13, w2;
            moe_sink_matrices(&sh, s, &w13, &w2);
            const int cut = kind == MOE_SPLIT_NONE ? 0 : rank * sh.sink_I_local;
            for (int r = 0; r < w13.rows; r++) {
                double row[64];
                moe_matrix_row(&w13, r, row);
                for (int c = 0; c < cfg.D; c++)
                    assert_true(row[c] == bf16(ld.w.sink_w13[((size_t)s * 2 * cfg.I + 2 * cut + r) * cfg.D + c]));
            }
            for (int r = 0; r < w2.rows; r++) {
                double row[64];
                moe_matrix_row(&w2, r, row);
                for (int c = 0; c < w2.cols; c++)
                    assert_true(row[c] == bf16(ld.w.sink_w2[((size_t)s * cfg.D + r) * cfg.I + cut + c]));
            }
        }
        moe_shard_free(&sh);
    }
    moe_layer_data_free(&ld);
}

static void test_mxfp4_views(void **state) {
    (void)state;
    check_layer(MOE_ROUTED_MXFP4, MOE_SPLIT_NONE, 1);
    check_layer(MOE_ROUTED_MXFP4, MOE_SPLIT_TP, 2);
    check_layer(MOE_ROUTED_MXFP4, MOE_SPLIT_EP, 2);
}

static void test_nvfp4_views(void **state) {
    (void)state;
    check_layer(MOE_ROUTED_NVFP4, MOE_SPLIT_NONE, 1);
    check_layer(MOE_ROUTED_NVFP4, MOE_SPLIT_TP, 2);
    check_layer(MOE_ROUTED_NVFP4, MOE_SPLIT_EP, 2);
}

static void test_bf16_views(void **state) {
    (void)state;
    check_layer(MOE_ROUTED_BF16, MOE_SPLIT_NONE, 1);
    check_layer(MOE_ROUTED_BF16, MOE_SPLIT_TP, 2);
    check_layer(MOE_ROUTED_BF16, MOE_SPLIT_EP, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mxfp4_views),
        cmocka_unit_test(test_nvfp4_views),
        cmocka_unit_test(test_bf16_views),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
