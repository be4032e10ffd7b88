/*
 * test_route.c: selection and routing weights (contract.md [routing]) of the shared CPU routing
 * (common/routing.c, which the reference and the OpenBLAS path both use), through
 * moe_route_token, moe_select_top_k and moe_layer_route.
 *
 * Rules checked:
 *   - sel = sigmoid(logit) + bias in fp32; the K largest; ties: lowest index; slot order by
 *     descending sel, equal values in ascending index;
 *   - the bias changes which experts are chosen, never their weights;
 *   - w_j = sigma(a_j) / sum sigma(a) * route_scale * global_scale over the K chosen raw logits
 *     and the S sink logits (derived here in long double); they sum to the scale;
 *   - extreme logits (-200, -1000, +inf) give finite weights, -inf gives weight 0;
 *   - 1-ulp near-ties decided by the bias: sel rounded twice (sigma to fp32, then the sum)
 *     ties where one rounding would not, and the lowest index wins; the reference and the
 *     harness's own selector (harness/selection.c) both follow the contract;
 *   - moe_select_top_k on any score function: the same order rules; moe_contract_score is the
 *     harness's own score (harness/selection.c) bit for bit.
 */
#include "test_support.h"

#include "common/layer_data.h"
#include "common/numeric.h"
#include "common/routing.h"
#include "harness/selection.h"

#include <float.h>

enum { MAX_E = 64 };

/* The weights by the plain sigmoid formula in long double (its range survives e^-1000).
 * logits [R+S], ids [K] -> w [K+S]. */
static void expected_weights(const float *logits, const int32_t *ids, int R, int K, int S,
                             long double scale, long double *w) {
    long double sum = 0.0L;
    for (int j = 0; j < K + S; j++) {
        long double a = j < K ? (long double)logits[ids[j]] : (long double)logits[R + j - K];
        w[j] = isinf(a) ? (a > 0 ? 1.0L : 0.0L) : test_sigmoid(a);
        sum += w[j];
    }
    for (int j = 0; j < K + S; j++) w[j] = w[j] / sum * scale;
}

/* |got - expected| within one fp32 rounding (plus the double arithmetic's few ulps). */
static void assert_weight(float got, long double expect) {
    long double tol = fabsl(expect) * 0x1p-23L + 0x1p-149L;
    if (!(fabsl((long double)got - expect) <= tol))
        fail_msg("weight %.9g, expected %.12Lg", (double)got, expect);
}

static void test_ties_at_k_boundary(void **state) {
    (void)state;
    /* sel: e4 largest, then e1, e2, e5 equal: K = 3 takes e4, e1, e2 (lowest indices win) */
    const float logits[6 + 1] = {0.1f, 0.5f, 0.5f, 0.3f, 0.9f, 0.5f, 0.0f};
    int32_t ids[3];
    float w[4];
    moe_route_token(logits, NULL, 6, 3, 1, 1.0f, 1.0f, ids, w);
    assert_int_equal(ids[0], 4);
    assert_int_equal(ids[1], 1);
    assert_int_equal(ids[2], 2);
    assert_true(w[1] == w[2]); /* equal logits, equal weights */
}

static void test_all_equal_logits(void **state) {
    (void)state;
    float logits[8 + 2];
    for (int e = 0; e < 10; e++) logits[e] = -0.75f;
    int32_t ids[5];
    float w[7];
    moe_route_token(logits, NULL, 8, 5, 2, 8.0f, 1.0f, ids, w);
    for (int k = 0; k < 5; k++) assert_int_equal(ids[k], k);
    for (int j = 0; j < 7; j++) assert_weight(w[j], 8.0L / 7.0L);
}

static void test_k_equals_r_slot_order(void **state) {
    (void)state;
    /* sel order: e3 (2.0), then e0, e2, e4 (1.0, equal: ascending), then e1 (-1.0) */
    const float logits[5 + 1] = {1.0f, -1.0f, 1.0f, 2.0f, 1.0f, 0.5f};
    int32_t ids[5];
    float w[6];
    moe_route_token(logits, NULL, 5, 5, 1, 1.0f, 1.0f, ids, w);
    const int32_t expect[5] = {3, 0, 2, 4, 1};
    for (int k = 0; k < 5; k++) assert_int_equal(ids[k], expect[k]);
    long double ew[6];
    expected_weights(logits, ids, 5, 5, 1, 1.0L, ew);
    for (int j = 0; j < 6; j++) assert_weight(w[j], ew[j]);
}

static void test_fp32_saturated_sigmoid_is_a_tie(void **state) {
    (void)state;
    /* sigma(20) and sigma(30) both round to 1.0f: selection is in fp32, so they tie and the
     * lower index comes first although its logit is smaller */
    assert_true((float)(1.0 / (1.0 + exp(-20.0))) == 1.0f);
    const float logits[3 + 1] = {0.0f, 20.0f, 30.0f, 0.0f};
    int32_t ids[2];
    float w[3];
    moe_route_token(logits, NULL, 3, 2, 1, 1.0f, 1.0f, ids, w);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 2);
}

static void test_bias_flips_selection_not_weights(void **state) {
    (void)state;
    /* sigma(2) = 0.881 < sigma(0) + 0.4 = 0.9: the bias picks expert 1 although its logit is
     * smaller (and logit + bias, 0.4 < 2, would not: selection goes through the sigmoid) */
    const float logits[2 + 1] = {2.0f, 0.0f, 1.0f};
    const float bias[2] = {0.0f, 0.4f};
    int32_t ids[1];
    float w[2];
    moe_route_token(logits, bias, 2, 1, 1, 8.0f, 1.5f, ids, w);
    assert_int_equal(ids[0], 1);
    /* the weight of expert 1 comes from its raw logit 0 only: sigma(0) / (sigma(0) + sigma(1)) */
    long double s0 = 0.5L, s1 = test_sigmoid(1.0L);
    assert_weight(w[0], s0 / (s0 + s1) * 12.0L);
    assert_weight(w[1], s1 / (s0 + s1) * 12.0L);
    /* without the bias expert 0 wins, weighed by sigma(2) */
    moe_route_token(logits, NULL, 2, 1, 1, 8.0f, 1.5f, ids, w);
    assert_int_equal(ids[0], 0);
    long double s2 = test_sigmoid(2.0L);
    assert_weight(w[0], s2 / (s2 + s1) * 12.0L);
}

static void test_uniform_bias_leaves_weights_bitwise(void **state) {
    (void)state;
    /* a bias equal for every expert cannot change selection; the weights must be identical */
    enum { R = 16, K = 4, S = 2 };
    float logits[R + S], bias[R];
    moe_rng rng = moe_rng_make(11, 0);
    for (int e = 0; e < R + S; e++) logits[e] = (float)moe_rng_normal(&rng);
    for (int e = 0; e < R; e++) bias[e] = 0.25f;
    int32_t ids_a[K], ids_b[K];
    float wa[K + S], wb[K + S];
    moe_route_token(logits, NULL, R, K, S, 8.0f, 1.0f, ids_a, wa);
    moe_route_token(logits, bias, R, K, S, 8.0f, 1.0f, ids_b, wb);
    assert_memory_equal(ids_a, ids_b, sizeof ids_a);
    assert_memory_equal(wa, wb, sizeof wa);
}

static void test_weights_match_sigmoid_formula(void **state) {
    (void)state;
    enum { R = 24, K = 6, S = 2 };
    moe_rng rng = moe_rng_make(12, 0);
    for (int trial = 0; trial < 200; trial++) {
        float logits[R + S], bias[R];
        for (int e = 0; e < R + S; e++) logits[e] = (float)(3.0 * moe_rng_normal(&rng));
        for (int e = 0; e < R; e++) bias[e] = (float)(0.1 * moe_rng_normal(&rng));
        const float rs = 8.0f, gs = (float)(0.5 + moe_rng_uniform(&rng));
        int32_t ids[K];
        float w[K + S];
        moe_route_token(logits, bias, R, K, S, rs, gs, ids, w);
        /* selection against a brute-force rank count: slot k's expert has exactly k experts
         * ranked above it (larger sel, or equal sel and lower index) */
        for (int k = 0; k < K; k++) {
            int e = ids[k], above = 0;
            float se = (float)(1.0 / (1.0 + exp(-(double)logits[e]))) + bias[e];
            for (int o = 0; o < R; o++) {
                float so = (float)(1.0 / (1.0 + exp(-(double)logits[o]))) + bias[o];
                above += so > se || (so == se && o < e);
            }
            assert_int_equal(above, k);
        }
        long double ew[K + S], sum = 0.0L;
        expected_weights(logits, ids, R, K, S, (long double)rs * gs, ew);
        for (int j = 0; j < K + S; j++) {
            assert_weight(w[j], ew[j]);
            sum += w[j];
        }
        /* K + S fp32 roundings of values summing to the scale */
        assert_true(fabsl(sum - (long double)rs * gs) <= (K + S) * 0x1p-23L * rs * gs);
    }
}

static void test_extreme_logits_stay_finite(void **state) {
    (void)state;
    int32_t ids[2];
    float w[3];
    /* +inf and -200 among the chosen, a sink at 0: sigma = 1, e^-200, 1/2 */
    const float a[3 + 1] = {-200.0f, INFINITY, -300.0f, 0.0f};
    moe_route_token(a, NULL, 3, 2, 1, 8.0f, 1.0f, ids, w);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 0);
    long double ew[3];
    expected_weights(a, ids, 3, 2, 1, 8.0L, ew);
    for (int j = 0; j < 3; j++) {
        assert_true(isfinite(w[j]));
        assert_weight(w[j], ew[j]);
    }
    /* everything far below -100: a naive sigmoid underflows to 0/0, the log form must not */
    const float b[2 + 1] = {-1000.0f, -1100.0f, -1050.0f};
    moe_route_token(b, NULL, 2, 2, 1, 8.0f, 1.0f, ids, w);
    expected_weights(b, ids, 2, 2, 1, 8.0L, ew);
    for (int j = 0; j < 3; j++) {
        assert_true(isfinite(w[j]));
        assert_weight(w[j], ew[j]);
    }
    assert_true(w[0] > 7.99f && w[2] > 0.0f); /* 8 e^-50 ~ 1.5e-21 is a normal fp32 */
    /* -inf: weight exactly 0, the others share the scale */
    const float c[2 + 1] = {1.0f, -INFINITY, 1.0f};
    moe_route_token(c, NULL, 2, 2, 1, 8.0f, 1.0f, ids, w);
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 1);
    assert_true(w[1] == 0.0f);
    assert_weight(w[0], 4.0L);
    assert_weight(w[2], 4.0L);
}

/* A layer on the reference whose routing only is used (the experts are zero). */
typedef struct {
    moe_layer_data ld;
    moe_shard shard;
    moe_layer *layer;
} route_fixture;

static void make_layer(route_fixture *f, bool bias, bool gscale, float global_scale) {
    moe_config cfg = {32, 32, 12, 3, 2, 8.0f, bias, gscale, MOE_ROUTED_MXFP4};
    moe_error err = {0};
    assert_int_equal(moe_layer_data_alloc(&cfg, &f->ld, &err), MOE_OK);
    if (bias)
        for (int e = 0; e < 12; e++) f->ld.gate_bias[e] = e == 7 ? 0.5f : 0.0f;
    f->ld.w.global_scale = global_scale;
    moe_split none = {MOE_SPLIT_NONE, 1, 0, 0};
    assert_int_equal(moe_shard_build(&cfg, &f->ld.w, &none, &f->shard, &err), MOE_OK);
    moe_options opt = moe_options_default();
    assert_int_equal(moe_layer_create(&moe_backend_ref, &f->shard, &opt, &f->layer, &err), MOE_OK);
}

static void free_layer(route_fixture *f) {
    moe_layer_destroy(f->layer);
    moe_shard_free(&f->shard);
    moe_layer_data_free(&f->ld);
}

static void test_layer_route_scales_and_bias(void **state) {
    (void)state;
    float logits[2][14];
    for (int e = 0; e < 14; e++) {
        logits[0][e] = 0.1f * (float)e; /* sel ascending with e */
        logits[1][e] = 0.0f;            /* all equal: 0, 1, 2 (or 7 first with the bias) */
    }
    int32_t ids[2][3];
    float w[2][5];
    moe_error err = {0};
    const struct { bool bias, gscale; float g; long double scale; } cases[3] = {
        {false, false, 3.0f, 8.0L}, /* no global scale: the stored 3 must be ignored */
        {false, true, 3.0f, 24.0L},
        {true, true, 0.5f, 4.0L},
    };
    for (int c = 0; c < 3; c++) {
        route_fixture f;
        make_layer(&f, cases[c].bias, cases[c].gscale, cases[c].g);
        assert_int_equal(moe_layer_route(f.layer, 2, &logits[0][0], &ids[0][0], &w[0][0], &err), MOE_OK);
        /* the bias of 0.5 on expert 7 lifts it above every sigmoid (all < 1) */
        const int32_t plain0[3] = {11, 10, 9}, biased0[3] = {7, 11, 10};
        const int32_t plain1[3] = {0, 1, 2}, biased1[3] = {7, 0, 1};
        assert_memory_equal(ids[0], cases[c].bias ? biased0 : plain0, sizeof ids[0]);
        assert_memory_equal(ids[1], cases[c].bias ? biased1 : plain1, sizeof ids[1]);
        for (int t = 0; t < 2; t++) {
            long double ew[5], sum = 0.0L;
            expected_weights(logits[t], ids[t], 12, 3, 2, cases[c].scale, ew);
            for (int j = 0; j < 5; j++) {
                assert_weight(w[t][j], ew[j]);
                sum += w[t][j];
            }
            assert_true(fabsl(sum - cases[c].scale) <= 5 * 0x1p-23L * cases[c].scale);
        }
        /* equal logits: every weight is scale / 5, the biased choice included */
        for (int j = 0; j < 5; j++) assert_weight(w[1][j], cases[c].scale / 5.0L);
        free_layer(&f);
    }
}

/* Expert `a` (logit 0: sigma = 1/2 exactly, bias 1: sel 1.5) and expert `b` (logit L, bias
 * 1.5 +- 2^-24 - s with s = fl32(sigma(L)), exact in fp32): s + bias is exactly halfway between
 * 1.5 and its neighbour and rounds to even, 1.5, a tie that the lower index wins; sigma + bias
 * rounded once lies on the side of sigma - s. The layout puts the lower index on the side that
 * one rounding would lose, so the two rules select differently, and the test derives both
 * answers itself (long double sigma, its own fp32 rounding). */
static void test_one_ulp_ties_decided_by_bias(void **state) {
    (void)state;
    const float Ls[] = {0.3f, 0.75f, 1.3f, 2.1f, 0.9f, 0.0625f, 3.7f, 1.0f / 3.0f}; /* sigma in (1/2, 1) */
    int discriminating = 0;
    for (size_t i = 0; i < sizeof Ls / sizeof Ls[0]; i++)
        for (int side = -1; side <= 1; side += 2) {
            const long double sigma = test_sigmoid((long double)Ls[i]), s = test_round_f32(sigma);
            if (sigma == s) continue;
            const long double half = 0x1p-24L;
            const float b_bias = (float)(1.5L + side * half - s);
            assert_true((long double)b_bias == 1.5L + side * half - s); /* exact in fp32 */
            /* one rounding: above 1.5 when sigma > s and the midpoint is above (side +1) */
            const long double once = test_round_f32(sigma + (long double)b_bias);
            const bool b_wins_once = once > 1.5L;
            /* the lower index goes to whichever expert one rounding puts second */
            const int a = b_wins_once ? 1 : 3, b = b_wins_once ? 3 : 1;
            if (once == 1.5L) continue; /* both rules tie: not discriminating */
            float logits[5] = {-3.0f, -3.0f, -3.0f, -3.0f, 0.5f}, bias[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            logits[a] = 0.0f, bias[a] = 1.0f;
            logits[b] = Ls[i], bias[b] = b_bias;
            /* the contract: both scores round to 1.5, the lower index first */
            const int32_t want[2] = {a < b ? a : b, a < b ? b : a};
            int32_t ids[2];
            float w[3], scratch[2];
            moe_route_token(logits, bias, 4, 2, 1, 1.0f, 1.0f, ids, w);
            assert_int_equal(ids[0], want[0]);
            assert_int_equal(ids[1], want[1]);
            contract_select(logits, bias, 4, 2, ids, scratch);
            assert_int_equal(ids[0], want[0]);
            assert_int_equal(ids[1], want[1]);
            assert_true(contract_sel_score(logits[b], bias[b]) == 1.5f);
            discriminating += want[0] != (b_wins_once ? b : a);
        }
    assert_true(discriminating >= 4);
}

/* Scores given by a table: ctx is the float array. */
static float table_score(const void *ctx, int e) { return ((const float *)ctx)[e]; }

static void test_select_top_k_on_given_scores(void **state) {
    (void)state;
    /* 7 scores: 3.0 at e5, 2.0 at e1, e4 (tie: ascending), -inf at e0, NaN never beats anyone */
    const float sel[7] = {-INFINITY, 2.0f, 1.0f, NAN, 2.0f, 3.0f, 1.0f};
    int32_t ids[7];
    moe_select_top_k(table_score, sel, 7, 5, ids);
    const int32_t want[5] = {5, 1, 4, 2, 6};
    assert_memory_equal(ids, want, sizeof want);
    /* K = R: every expert once, the last slots in ascending index among the unordered */
    moe_select_top_k(table_score, sel, 7, 7, ids);
    bool seen[7] = {false};
    for (int k = 0; k < 7; k++) {
        assert_true(ids[k] >= 0 && ids[k] < 7 && !seen[ids[k]]);
        seen[ids[k]] = true;
    }
    /* the contract's score is the harness's, bit for bit, bias or none */
    moe_rng rng = moe_rng_make(13, 0);
    for (int i = 0; i < 1000; i++) {
        float logits[2] = {(float)(4.0 * moe_rng_normal(&rng)), 0.0f};
        float bias[1] = {(float)(0.1 * moe_rng_normal(&rng))};
        const moe_score_input with = {logits, bias}, without = {logits, NULL};
        assert_true(moe_contract_score(&with, 0) == contract_sel_score(logits[0], bias[0]));
        assert_true(moe_contract_score(&without, 0) == contract_sel_score(logits[0], 0.0f));
    }
}

static void test_layer_route_arguments(void **state) {
    (void)state;
    route_fixture f;
    make_layer(&f, false, false, 1.0f);
    moe_error err = {0};
    assert_int_equal(moe_layer_route(f.layer, 0, NULL, NULL, NULL, &err), MOE_OK);
    assert_int_equal(moe_layer_route(f.layer, -1, NULL, NULL, NULL, &err), MOE_ERR_ARG);
    assert_msg_has(err, "T = -1");
    float logits[14] = {0};
    assert_int_equal(moe_layer_route(f.layer, 1, logits, NULL, NULL, &err), MOE_ERR_ARG);
    assert_int_equal(moe_layer_route(NULL, 1, logits, NULL, NULL, &err), MOE_ERR_ARG);
    free_layer(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ties_at_k_boundary),
        cmocka_unit_test(test_all_equal_logits),
        cmocka_unit_test(test_k_equals_r_slot_order),
        cmocka_unit_test(test_fp32_saturated_sigmoid_is_a_tie),
        cmocka_unit_test(test_select_top_k_on_given_scores),
        cmocka_unit_test(test_bias_flips_selection_not_weights),
        cmocka_unit_test(test_uniform_bias_leaves_weights_bitwise),
        cmocka_unit_test(test_weights_match_sigmoid_formula),
        cmocka_unit_test(test_extreme_logits_stay_finite),
        cmocka_unit_test(test_layer_route_scales_and_bias),
        cmocka_unit_test(test_layer_route_arguments),
        cmocka_unit_test(test_one_ulp_ties_decided_by_bias),
    };
    return cmocka_run_group_tests_name("route", tests, NULL, NULL);
}
