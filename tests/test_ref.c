/*
 * test_ref.c: the reference backend on whole layers.
 *
 * Rules checked (contract.md [math], [precision]):
 *   - a hand-built layer (D = 32, I = 32, R = 2, K = 1, S = 1) whose logits, weights, g, u, h
 *     and y are derived here from the formulas, in long double, for MXFP4 and bf16 experts and
 *     in both contracts: exact (no rounding after the fp32 logits and weights, output fp32)
 *     and serving (g, u, h rounded to bf16, output rounded to bf16 once);
 *   - non-finite input rows: that row's output, logits and weights are NaN, its ids valid;
 *     other rows are bitwise what they are without the bad row; strict mode refuses and names
 *     the token;
 *   - T = 0 is a valid call; forwards are deterministic.
 */
#include "test_support.h"

#include "common/layer_data.h"
#include "common/numeric.h"

enum { D = 32, I = 32, R = 2, K = 1, S = 1, G = R + S };

/* Sets W[row, col] = E2M1(code) * 2^(scale_byte - 127) of routed expert e, in both storages
 * (the bf16 copy is the same exact value). which: 13 for w13 [2I, D], 2 for w2 [D, I]. */
static void set_weight(moe_layer_data *ld, int which, int e, int row, int col, unsigned code,
                       int scale_byte) {
    const int cols = which == 13 ? D : I, rows = which == 13 ? 2 * I : D;
    uint8_t *codes = which == 13 ? ld->w13_mx : ld->w2_mx;
    uint8_t *scales = which == 13 ? ld->w13_scale : ld->w2_scale;
    uint16_t *bf = which == 13 ? ld->w13_bf16 : ld->w2_bf16;
    const size_t r = (size_t)e * rows + (size_t)row;
    if (codes) {
        uint8_t *byte = &codes[r * (cols / 2) + col / 2];
        *byte = col % 2 == 0 ? (uint8_t)((*byte & 0xF0u) | code) : (uint8_t)((*byte & 0x0Fu) | code << 4);
        scales[r * (cols / 32) + col / 32] = (uint8_t)scale_byte;
    } else {
        static const float mag[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
        float v = ldexpf(mag[code & 7u], scale_byte - 127) * ((code & 8u) ? -1.0f : 1.0f);
        bf[r * cols + col] = moe_f32_to_bf16(v); /* exact: a 2-bit significand */
    }
}

static uint16_t bf(float v) { return moe_f32_to_bf16(v); }

/* The hand-built layer (values in comments); x [D] = (1, 2, 2^-9, 0, ...). */
static void build_hand_layer(moe_routed_format fmt, moe_layer_data *ld, uint16_t *x) {
    moe_config c = {D, I, R, K, S, 2.0f, false, false, fmt};
    moe_error err = {0};
    assert_int_equal(moe_layer_data_alloc(&c, ld, &err), MOE_OK);
    if (ld->w13_scale) {
        memset(ld->w13_scale, 127, (size_t)R * 2 * I * D / 32);
        memset(ld->w2_scale, 127, (size_t)R * D * I / 32);
        memset(ld->w13_mx + (size_t)2 * I * D / 2, 0x22, (size_t)2 * I * D / 2); /* expert 1: all 1.0 */
        memset(ld->w2_mx + (size_t)D * I / 2, 0x22, (size_t)D * I / 2);
    } else {
        for (size_t i = 0; i < (size_t)2 * I * D; i++) ld->w13_bf16[(size_t)2 * I * D + i] = bf(1.0f);
        for (size_t i = 0; i < (size_t)D * I; i++) ld->w2_bf16[(size_t)D * I + i] = bf(1.0f);
    }
    memset(x, 0, D * sizeof *x);
    x[0] = bf(1.0f), x[1] = bf(2.0f), x[2] = bf(0x1p-9f);
    /* gate: l0 = 0, l1 = -2 * x0 = -2, sink l2 = 0.5 * x1 = 1 */
    ld->gate_w[1 * D + 0] = bf(-2.0f);
    ld->gate_w[2 * D + 1] = bf(0.5f);
    /* expert 0, w13 rows interleaved: row 2j gate j, row 2j+1 up j */
    set_weight(ld, 13, 0, 0, 0, 0x4, 127); /* g0 = 2*1 + 0.5*2 = 3 */
    set_weight(ld, 13, 0, 0, 1, 0x1, 127);
    set_weight(ld, 13, 0, 1, 0, 0x2, 127); /* u0 = 1 */
    set_weight(ld, 13, 0, 2, 0, 0xA, 128); /* g1 = -1 * 2 * x0 = -2 */
    set_weight(ld, 13, 0, 3, 1, 0x3, 127); /* u1 = 1.5 * x1 = 3 */
    set_weight(ld, 13, 0, 4, 0, 0x2, 127); /* g2 = x0 + x2 = 1 + 2^-9 */
    set_weight(ld, 13, 0, 4, 2, 0x2, 127);
    set_weight(ld, 13, 0, 5, 0, 0x2, 127); /* u2 = 1 */
    set_weight(ld, 13, 0, 6, 0, 0x2, 127); /* g3 = 1 */
    set_weight(ld, 13, 0, 7, 0, 0x2, 127); /* u3 = 1 */
    /* expert 0, w2 [D, I]: y[0] = h0 + 4 h1 + h2, y[5] = -0.25 h1, y[7] = h2 - h3 */
    set_weight(ld, 2, 0, 0, 0, 0x2, 127);
    set_weight(ld, 2, 0, 0, 1, 0x6, 127);
    set_weight(ld, 2, 0, 0, 2, 0x2, 127);
    set_weight(ld, 2, 0, 5, 1, 0x9, 126);
    set_weight(ld, 2, 0, 7, 2, 0x2, 127);
    set_weight(ld, 2, 0, 7, 3, 0xA, 127);
    /* sink: gate 0 = 0.25 x0, up 0 = x1 = 2; gate 1 = x1 = 2, up 1 = x0 = 1 */
    ld->sink_w13[0 * D + 0] = bf(0.25f);
    ld->sink_w13[1 * D + 1] = bf(1.0f);
    ld->sink_w13[2 * D + 1] = bf(1.0f);
    ld->sink_w13[3 * D + 0] = bf(1.0f);
    /* sink w2 [D, I]: sink_y[0] = hs0, sink_y[3] = 2 hs0 + 0.5 hs1 */
    ld->sink_w2[0 * I + 0] = bf(1.0f);
    ld->sink_w2[3 * I + 0] = bf(2.0f);
    ld->sink_w2[3 * I + 1] = bf(0.5f);
}

typedef struct {
    long double w0, gamma;       /* fp32-rounded routing weights */
    long double h[4], hs[2];     /* routed and sink intermediates */
    long double y0, y5, y7, sy0, sy3;
    long double out[D];
} hand_expect;

/* Everything from the formulas; serving rounds where contract.md [precision.serving] says. */
static void derive(bool serving, hand_expect *e) {
    long double (*rb)(long double) = serving ? test_round_bf16 : NULL;
#define RB(v) (rb ? rb(v) : (v))
    const long double s_routed = 0.5L, s_sink = test_sigmoid(1.0L); /* sigma(l0), sigma(l2) */
    e->w0 = test_round_f32(s_routed / (s_routed + s_sink) * 2.0L);
    e->gamma = test_round_f32(s_sink / (s_routed + s_sink) * 2.0L);
    const long double g[4] = {3.0L, -2.0L, 1.0L + 0x1p-9L, 1.0L}, u[4] = {1.0L, 3.0L, 1.0L, 1.0L};
    for (int j = 0; j < 4; j++) e->h[j] = RB(test_silu(RB(g[j])) * RB(u[j]));
    e->hs[0] = RB(e->gamma * test_silu(RB(0.25L)) * RB(2.0L));
    e->hs[1] = RB(e->gamma * test_silu(RB(2.0L)) * RB(1.0L));
    e->y0 = e->h[0] + 4.0L * e->h[1] + e->h[2];
    e->y5 = -0.25L * e->h[1];
    e->y7 = e->h[2] - e->h[3];
    e->sy0 = e->hs[0];
    e->sy3 = 2.0L * e->hs[0] + 0.5L * e->hs[1];
    for (int d = 0; d < D; d++) e->out[d] = 0.0L;
    e->out[0] = e->w0 * e->y0 + e->sy0;
    e->out[3] = e->sy3;
    e->out[5] = e->w0 * e->y5;
    e->out[7] = e->w0 * e->y7;
    for (int d = 0; d < D; d++) e->out[d] = serving ? test_round_bf16(e->out[d]) : test_round_f32(e->out[d]);
#undef RB
}

static void assert_close(float got, long double expect, long double rel, const char *what) {
    if (!(fabsl((long double)got - expect) <= fabsl(expect) * rel))
        fail_msg("%s: %.9g, expected %.12Lg", what, (double)got, expect);
}

typedef struct {
    float out[D], logits[G], weights[K + S], routed_h[K * I], routed_y[K * D], sink_h[S * I], sink_y[D];
    int32_t ids[K];
} hand_run;

static void run_hand(moe_routed_format fmt, moe_precision prec, hand_run *o) {
    moe_layer_data ld;
    uint16_t x[D];
    build_hand_layer(fmt, &ld, x);
    moe_split none = {MOE_SPLIT_NONE, 1, 0, 0};
    moe_shard sh;
    moe_error err = {0};
    assert_int_equal(moe_shard_build(&ld.cfg, &ld.w, &none, &sh, &err), MOE_OK);
    moe_options opt = moe_options_default();
    opt.precision = prec;
    moe_layer *layer;
    assert_int_equal(moe_layer_create(&moe_backend_ref, &sh, &opt, &layer, &err), MOE_OK);
    moe_stages st = {o->logits, o->ids, o->weights, o->routed_h, o->routed_y, o->sink_h, o->sink_y, 0};
    assert_int_equal(moe_layer_forward(layer, 1, x, o->out, &st, &err), MOE_OK);
    assert_int_equal(st.filled, MOE_STAGE_LOGITS | MOE_STAGE_TOPK | MOE_STAGE_ROUTED_H |
                                    MOE_STAGE_ROUTED_Y | MOE_STAGE_SINK_H | MOE_STAGE_SINK_Y);
    moe_layer_destroy(layer);
    moe_shard_free(&sh);
    moe_layer_data_free(&ld);
}

static void check_hand(moe_routed_format fmt, moe_precision prec) {
    const bool serving = prec == MOE_PRECISION_SERVING;
    hand_run o;
    run_hand(fmt, prec, &o);
    hand_expect e;
    derive(serving, &e);
    assert_true(o.logits[0] == 0.0f && o.logits[1] == -2.0f && o.logits[2] == 1.0f);
    assert_int_equal(o.ids[0], 0); /* sigma(0) > sigma(-2) */
    const long double f32 = 0x1p-23L; /* one fp32 ulp, relative: room for the last rounding */
    assert_close(o.weights[0], e.w0, f32, "w0");
    assert_close(o.weights[1], e.gamma, f32, "gamma");
    assert_true(fabsf(o.weights[0] + o.weights[1] - 2.0f) <= 4 * 0x1p-23f);
    /* serving intermediates are bf16 values: they must match exactly */
    const long double tol_h = serving ? 0.0L : f32;
    for (int j = 0; j < 4; j++) assert_close(o.routed_h[j], e.h[j], tol_h, "routed h");
    for (int j = 4; j < I; j++) assert_true(o.routed_h[j] == 0.0f);
    for (int j = 0; j < 2; j++) assert_close(o.sink_h[j], e.hs[j], tol_h, "sink h");
    assert_close(o.routed_y[0], e.y0, f32, "routed y[0]");
    assert_close(o.routed_y[5], e.y5, f32, "routed y[5]");
    assert_close(o.routed_y[7], e.y7, f32, "routed y[7]");
    assert_close(o.sink_y[0], e.sy0, f32, "sink y[0]");
    assert_close(o.sink_y[3], e.sy3, f32, "sink y[3]");
    for (int d = 0; d < D; d++) {
        if (d == 0 || d == 3 || d == 5 || d == 7) assert_close(o.out[d], e.out[d], serving ? 0.0L : f32, "out");
        else assert_true(o.out[d] == 0.0f);
        if (serving) assert_true(moe_round_bf16(o.out[d]) == o.out[d]);
    }
}

static void test_hand_mxfp4_exact(void **state) {
    (void)state;
    check_hand(MOE_ROUTED_MXFP4, MOE_PRECISION_EXACT);
}

static void test_hand_mxfp4_serving(void **state) {
    (void)state;
    check_hand(MOE_ROUTED_MXFP4, MOE_PRECISION_SERVING);
}

static void test_hand_bf16_exact(void **state) {
    (void)state;
    check_hand(MOE_ROUTED_BF16, MOE_PRECISION_EXACT);
}

static void test_hand_bf16_serving(void **state) {
    (void)state;
    check_hand(MOE_ROUTED_BF16, MOE_PRECISION_SERVING);
}

static void test_serving_differs_visibly_from_exact(void **state) {
    (void)state;
    hand_run ex, sv;
    run_hand(MOE_ROUTED_MXFP4, MOE_PRECISION_EXACT, &ex);
    run_hand(MOE_ROUTED_MXFP4, MOE_PRECISION_SERVING, &sv);
    /* g2 = 1 + 2^-9 rounds to 1 in bf16 (below half of the 2^-7 step), so h2 differs by about
     * silu'(1) * 2^-9 ~ 1.8e-3 before h itself is rounded */
    assert_true(ex.routed_h[2] != sv.routed_h[2]);
    assert_true(fabsf(ex.routed_h[2] - (float)test_silu(1.0L + 0x1p-9L)) < 1e-6f);
    assert_true(sv.routed_h[2] == (float)test_round_bf16(test_silu(1.0L)));
    /* out[7] = w0 (h2 - h3) with h3 = silu(1): exact keeps w0 silu'(1) 2^-9 ~ 1.5e-3, serving
     * cancels to exactly 0, which no rounding of the exact output would give */
    assert_true(ex.out[7] > 1.4e-3f && ex.out[7] < 1.6e-3f);
    assert_true(sv.out[7] == 0.0f);
    assert_true(moe_round_bf16(ex.out[7]) != 0.0f);
    assert_true(ex.out[0] != moe_round_bf16(ex.out[0])); /* the exact output is not bf16 */
}

/* ---------------------------------------------------------------- non-finite rows */

typedef struct {
    moe_layer_data ld;
    moe_shard shard;
    moe_layer *layer;
} fixture;

static void open_random(fixture *f, moe_precision prec, bool strict) {
    moe_config c = {64, 64, 8, 2, 2, 8.0f, true, true, MOE_ROUTED_MXFP4};
    moe_error err = {0};
    assert_int_equal(moe_layer_data_random(&c, 21, &f->ld, &err), MOE_OK);
    moe_split none = {MOE_SPLIT_NONE, 1, 0, 0};
    assert_int_equal(moe_shard_build(&c, &f->ld.w, &none, &f->shard, &err), MOE_OK);
    moe_options opt = moe_options_default();
    opt.precision = prec;
    opt.strict_nonfinite = strict;
    assert_int_equal(moe_layer_create(&moe_backend_ref, &f->shard, &opt, &f->layer, &err), MOE_OK);
}

static void close_fixture(fixture *f) {
    moe_layer_destroy(f->layer);
    moe_shard_free(&f->shard);
    moe_layer_data_free(&f->ld);
}

enum { T5 = 5, BAD = 2, DX = 64, RX = 8, KX = 2, SX = 2 };

static void check_nonfinite(moe_precision prec, uint16_t bad_value, int bad_column) {
    fixture f;
    open_random(&f, prec, false);
    uint16_t x[T5 * DX], good[(T5 - 1) * DX];
    moe_random_input(T5, DX, 8, x);
    x[BAD * DX + bad_column] = bad_value;
    for (int t = 0, g = 0; t < T5; t++)
        if (t != BAD) memcpy(good + (size_t)g++ * DX, x + (size_t)t * DX, DX * sizeof *x);
    float out[T5 * DX], out_good[(T5 - 1) * DX];
    float lg[T5 * (RX + SX)], lg_good[(T5 - 1) * (RX + SX)];
    float w[T5 * (KX + SX)], w_good[(T5 - 1) * (KX + SX)];
    int32_t ids[T5 * KX], ids_good[(T5 - 1) * KX];
    moe_stages st = {lg, ids, w, NULL, NULL, NULL, NULL, 0};
    moe_stages st_good = {lg_good, ids_good, w_good, NULL, NULL, NULL, NULL, 0};
    moe_error err = {0};
    assert_int_equal(moe_layer_forward(f.layer, T5, x, out, &st, &err), MOE_OK);
    assert_int_equal(moe_layer_forward(f.layer, T5 - 1, good, out_good, &st_good, &err), MOE_OK);
    for (int d = 0; d < DX; d++) assert_true(isnan(out[BAD * DX + d]));
    for (int e = 0; e < RX + SX; e++) assert_true(isnan(lg[BAD * (RX + SX) + e]));
    for (int j = 0; j < KX + SX; j++) assert_true(isnan(w[BAD * (KX + SX) + j]));
    for (int k = 0; k < KX; k++) assert_true(ids[BAD * KX + k] >= 0 && ids[BAD * KX + k] < RX);
    for (int t = 0, g = 0; t < T5; t++) {
        if (t == BAD) continue;
        assert_memory_equal(out + t * DX, out_good + g * DX, DX * sizeof(float));
        assert_memory_equal(lg + t * (RX + SX), lg_good + g * (RX + SX), (RX + SX) * sizeof(float));
        assert_memory_equal(w + t * (KX + SX), w_good + g * (KX + SX), (KX + SX) * sizeof(float));
        assert_memory_equal(ids + t * KX, ids_good + g * KX, KX * sizeof(int32_t));
        for (int d = 0; d < DX; d++) assert_true(isfinite(out[t * DX + d]));
        g++;
    }
    close_fixture(&f);
}

static void test_nonfinite_rows_nan(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++) {
        check_nonfinite((moe_precision)p, 0x7FC0, 7);  /* NaN */
        check_nonfinite((moe_precision)p, 0xFF81, 3);  /* negative signalling NaN */
    }
}

static void test_nonfinite_rows_inf(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++) {
        check_nonfinite((moe_precision)p, 0x7F80, 0);  /* +inf */
        check_nonfinite((moe_precision)p, 0xFF80, 63); /* -inf */
    }
}

static void test_nonfinite_rows_split(void **state) {
    (void)state;
    /* every rank of an EP and a TP split turns the row to NaN, the others stay finite */
    moe_config c = {64, 64, 8, 2, 2, 8.0f, true, true, MOE_ROUTED_MXFP4};
    moe_layer_data ld;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_random(&c, 22, &ld, &err), MOE_OK);
    uint16_t x[3 * 64];
    moe_random_input(3, 64, 9, x);
    x[64 + 10] = 0x7F80;
    float out[3 * 64];
    moe_options opt = moe_options_default();
    const moe_split_kind kinds[2] = {MOE_SPLIT_EP, MOE_SPLIT_TP};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(moe_forward_all_ranks(&moe_backend_ref, &c, &ld.w, kinds[i], 2, 0, &opt, 3, x,
                                               out, NULL, &err), MOE_OK);
        for (int d = 0; d < 64; d++) {
            assert_true(isnan(out[64 + d]));
            assert_true(isfinite(out[d]) && isfinite(out[128 + d]));
        }
    }
    moe_layer_data_free(&ld);
}

static void test_strict_mode_names_token(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++) {
        fixture f;
        open_random(&f, (moe_precision)p, true);
        uint16_t x[4 * DX];
        float out[4 * DX];
        moe_random_input(4, DX, 8, x);
        moe_error err = {0};
        assert_int_equal(moe_layer_forward(f.layer, 4, x, out, NULL, &err), MOE_OK);
        x[3 * DX + 5] = 0xFFC1; /* token 3 */
        x[2 * DX + 60] = 0x7F80; /* token 2: the first one */
        assert_int_equal(moe_layer_forward(f.layer, 4, x, out, NULL, &err), MOE_ERR_NONFINITE_INPUT);
        assert_msg_has(err, "token 2");
        assert_int_equal(err.status, MOE_ERR_NONFINITE_INPUT);
        close_fixture(&f);
    }
    /* through all ranks as well */
    moe_config c = {64, 64, 8, 2, 2, 8.0f, true, true, MOE_ROUTED_MXFP4};
    moe_layer_data ld;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_random(&c, 23, &ld, &err), MOE_OK);
    uint16_t x[2 * 64];
    float out[2 * 64];
    moe_random_input(2, 64, 3, x);
    x[64] = 0x7FC0;
    moe_options opt = moe_options_default();
    opt.strict_nonfinite = true;
    assert_int_equal(moe_forward_all_ranks(&moe_backend_ref, &c, &ld.w, MOE_SPLIT_TP, 2, 0, &opt, 2, x,
                                           out, NULL, &err), MOE_ERR_NONFINITE_INPUT);
    assert_msg_has(err, "token 1");
    moe_layer_data_free(&ld);
}

static void test_zero_tokens_and_determinism(void **state) {
    (void)state;
    fixture f;
    open_random(&f, MOE_PRECISION_SERVING, false);
    moe_error err = {0};
    moe_stages st = {0};
    assert_int_equal(moe_layer_forward(f.layer, 0, NULL, NULL, &st, &err), MOE_OK);
    assert_int_equal(moe_layer_forward(f.layer, 0, NULL, NULL, NULL, &err), MOE_OK);
    uint16_t x[3 * DX];
    float a[3 * DX], b[3 * DX], one[DX];
    assert_int_equal(moe_layer_forward(f.layer, 0, x, a, NULL, &err), MOE_OK);
    moe_random_input(3, DX, 4, x);
    assert_int_equal(moe_layer_forward(f.layer, 3, x, a, NULL, &err), MOE_OK);
    assert_int_equal(moe_layer_forward(f.layer, 3, x, b, NULL, &err), MOE_OK);
    assert_memory_equal(a, b, sizeof a);
    /* a token's output does not depend on the batch around it */
    assert_int_equal(moe_layer_forward(f.layer, 1, x + 2 * DX, one, NULL, &err), MOE_OK);
    assert_memory_equal(one, a + 2 * DX, sizeof one);
    float z[1] = {42.0f};
    assert_int_equal(moe_forward_all_ranks(&moe_backend_ref, &f.ld.cfg, &f.ld.w, MOE_SPLIT_EP, 2, 0,
                                           &(moe_options){MOE_PRECISION_EXACT, 0, false, 0}, 0, NULL, z,
                                           NULL, &err), MOE_OK);
    assert_true(z[0] == 42.0f); /* nothing written */
    close_fixture(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_mxfp4_exact),
        cmocka_unit_test(test_hand_mxfp4_serving),
        cmocka_unit_test(test_hand_bf16_exact),
        cmocka_unit_test(test_hand_bf16_serving),
        cmocka_unit_test(test_serving_differs_visibly_from_exact),
        cmocka_unit_test(test_nonfinite_rows_nan),
        cmocka_unit_test(test_nonfinite_rows_inf),
        cmocka_unit_test(test_nonfinite_rows_split),
        cmocka_unit_test(test_strict_mode_names_token),
        cmocka_unit_test(test_zero_tokens_and_determinism),
    };
    return cmocka_run_group_tests_name("ref", tests, NULL, NULL);
}
