/*
 * test_compare.c: the stage-by-stage comparison (harness/compare.h) accepts what the contracts
 * allow and catches what they do not.
 *
 * Rules checked (expected verdicts derived from docs/tolerances.md, never from the code):
 *   - the reference agrees with itself, unsplit and split (TP 2, EP 3 with padding experts), in
 *     both contracts, T = 0 included;
 *   - a logit moved by 16 D 2^-24 sum|x||Wg| (16 times the serving radius) fails at the logits;
 *   - two slots' ids swapped on a token without a near-tie fail at the ids;
 *   - one weight scaled by 1 + 2^-12 fails at the weights (the relative radius at D = 64 is
 *     below 2^-17: 2 * 64 * 2^-24 * sum|x||Wg| / |logit| plus about 60 * 2^-24);
 *   - every serving output element moved by one bf16 ulp fails at the output (the output's
 *     radius, (K + 2S + 2) 2^-24 of the magnitudes, is far below half a bf16 ulp, so almost
 *     every interval holds a single bf16 value);
 *   - an output row that is not NaN for a non-finite input row fails.
 */
#include "test_support.h"

#include "common/layer_data.h"
#include "common/numeric.h"
#include "harness/compare.h"

#include <stdlib.h>

static moe_config small_config(void) {
    moe_config c = {64, 192, 7, 3, 2, 8.0f, true, true, MOE_ROUTED_MXFP4}; /* TP 2 and EP 3 divide I */
    return c;
}

typedef struct {
    moe_config cfg;
    moe_layer_data ld;
    uint16_t *x;
    int T;
    moe_cmp_case cc;
} fixture;

static void fixture_make(fixture *f, int T, uint64_t seed) {
    moe_error err;
    f->cfg = small_config();
    f->T = T;
    assert_int_equal(moe_layer_data_random(&f->cfg, seed, &f->ld, &err), MOE_OK);
    f->x = malloc(((size_t)T * f->cfg.D + 1) * sizeof(uint16_t));
    moe_random_input(T, f->cfg.D, seed, f->x);
    moe_cmp_case cc = {&f->cfg, &f->ld.w, T, f->x};
    f->cc = cc;
}

static void fixture_free(fixture *f) {
    moe_layer_data_free(&f->ld);
    free(f->x);
}

static void run_ref(fixture *f, moe_precision p, moe_split_kind kind, int n, moe_run *r) {
    moe_options o = moe_options_default();
    o.precision = p;
    moe_error err;
    moe_status st = moe_run_path(&moe_backend_ref, &o, &f->cfg, &f->ld.w, kind, n, 0, f->T, f->x, true, r, &err);
    if (st) fail_msg("run: %s", err.msg);
}

static void expect_stage(fixture *f, const moe_run *reference, const moe_run *candidate, int stage) {
    moe_cmp_report rep;
    moe_error err;
    assert_int_equal(moe_compare_runs(&f->cc, reference, candidate, NULL, NULL, &rep, &err), MOE_OK);
    if (stage < 0 && !rep.ok) fail_msg("unexpected failure: %s", rep.msg);
    if (stage >= 0) {
        if (rep.ok) fail_msg("expected a failure at stage %s, got: %s", moe_cmp_stage_name(stage), rep.msg);
        if (rep.first_stage != stage)
            fail_msg("expected stage %s, got: %s", moe_cmp_stage_name(stage), rep.msg);
    }
}

static void test_ref_agrees_with_itself(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++) {
        fixture f;
        fixture_make(&f, 5, 11 + p);
        moe_run a, b, tp, ep;
        run_ref(&f, (moe_precision)p, MOE_SPLIT_NONE, 1, &a);
        run_ref(&f, (moe_precision)p, MOE_SPLIT_NONE, 1, &b);
        run_ref(&f, (moe_precision)p, MOE_SPLIT_TP, 2, &tp);
        run_ref(&f, (moe_precision)p, MOE_SPLIT_EP, 3, &ep); /* R = 7: two padding experts */
        expect_stage(&f, &a, NULL, -1);
        expect_stage(&f, &a, &b, -1);
        expect_stage(&f, &a, &tp, -1);
        expect_stage(&f, &a, &ep, -1);
        moe_run_free(&a);
        moe_run_free(&b);
        moe_run_free(&tp);
        moe_run_free(&ep);
        fixture_free(&f);
    }
}

static void test_zero_tokens(void **state) {
    (void)state;
    fixture f;
    fixture_make(&f, 0, 3);
    moe_run a;
    run_ref(&f, MOE_PRECISION_SERVING, MOE_SPLIT_NONE, 1, &a);
    expect_stage(&f, &a, NULL, -1);
    moe_run_free(&a);
    fixture_free(&f);
}

static void test_logit_moved(void **state) {
    (void)state;
    fixture f;
    fixture_make(&f, 3, 5);
    moe_run a, b;
    run_ref(&f, MOE_PRECISION_SERVING, MOE_SPLIT_NONE, 1, &a);
    run_ref(&f, MOE_PRECISION_SERVING, MOE_SPLIT_NONE, 1, &b);
    double mag = 0; /* sum |x||Wg| of token 1, expert 2 */
    for (int d = 0; d < f.cfg.D; d++)
        mag += fabs((double)moe_bf16_to_f32(f.x[f.cfg.D + d]) * (double)moe_bf16_to_f32(f.ld.gate_w[2 * f.cfg.D + d]));
    b.logits[(f.cfg.R + f.cfg.S) + 2] += (float)(16.0 * f.cfg.D * 0x1p-24 * mag);
    expect_stage(&f, &a, &b, MOE_CMP_LOGITS);
    /* the report holds each run's own value; a candidate alone has no reference value */
    const size_t moved = (size_t)(f.cfg.R + f.cfg.S) + 2;
    moe_cmp_report rep;
    moe_error err;
    assert_int_equal(moe_compare_runs(&f.cc, &a, &b, NULL, NULL, &rep, &err), MOE_OK);
    assert_true(rep.value_reference == a.logits[moved] && rep.value_candidate == b.logits[moved]);
    assert_int_equal(moe_compare_runs(&f.cc, NULL, &b, NULL, NULL, &rep, &err), MOE_OK);
    assert_true(!rep.ok && rep.first_stage == MOE_CMP_LOGITS);
    assert_true(isnan(rep.value_reference) && rep.value_candidate == b.logits[moved]);
    moe_run_free(&a);
    moe_run_free(&b);
    fixture_free(&f);
}

static void test_ids_swapped(void **state) {
    (void)state;
    fixture f;
    fixture_make(&f, 4, 6);
    moe_run a, b;
    run_ref(&f, MOE_PRECISION_EXACT, MOE_SPLIT_NONE, 1, &a);
    run_ref(&f, MOE_PRECISION_EXACT, MOE_SPLIT_NONE, 1, &b);
    /* random N(0,1/D) gate rows: the slot-0/slot-1 scores of token 0 are far apart */
    int32_t t = b.ids[0];
    b.ids[0] = b.ids[1];
    b.ids[1] = t;
    expect_stage(&f, &a, &b, MOE_CMP_IDS);
    moe_run_free(&a);
    moe_run_free(&b);
    fixture_free(&f);
}

static void test_weight_scaled(void **state) {
    (void)state;
    fixture f;
    fixture_make(&f, 4, 7);
    moe_run a, b;
    run_ref(&f, MOE_PRECISION_EXACT, MOE_SPLIT_NONE, 1, &a);
    run_ref(&f, MOE_PRECISION_EXACT, MOE_SPLIT_NONE, 1, &b);
    b.weights[(f.cfg.K + f.cfg.S) * 2 + 1] *= 1.0f + 0x1p-12f;
    expect_stage(&f, &a, &b, MOE_CMP_WEIGHTS);
    moe_run_free(&a);
    moe_run_free(&b);
    fixture_free(&f);
}

static void test_output_one_ulp(void **state) {
    (void)state;
    fixture f;
    fixture_make(&f, 2, 8);
    moe_run a, b;
    run_ref(&f, MOE_PRECISION_SERVING, MOE_SPLIT_TP, 2, &a);
    run_ref(&f, MOE_PRECISION_SERVING, MOE_SPLIT_TP, 2, &b);
    for (int i = 0; i < f.T * f.cfg.D; i++) {
        uint16_t h = moe_f32_to_bf16(b.out[i]);
        b.out[i] = moe_bf16_to_f32((uint16_t)(h + 1)); /* the next bf16 away from zero */
    }
    expect_stage(&f, &a, &b, MOE_CMP_OUTPUT);
    moe_run_free(&a);
    moe_run_free(&b);
    fixture_free(&f);
}

static void test_nonfinite_row(void **state) {
    (void)state;
    fixture f;
    fixture_make(&f, 3, 9);
    f.x[1 * f.cfg.D + 5] = 0x7F80u; /* +inf in token 1 */
    moe_run a, b;
    run_ref(&f, MOE_PRECISION_SERVING, MOE_SPLIT_NONE, 1, &a);
    run_ref(&f, MOE_PRECISION_SERVING, MOE_SPLIT_NONE, 1, &b);
    expect_stage(&f, &a, &b, -1);
    b.out[1 * f.cfg.D + 3] = 0.0f;
    expect_stage(&f, &a, &b, MOE_CMP_OUTPUT);
    moe_run_free(&a);
    moe_run_free(&b);
    fixture_free(&f);
}

static void test_check_against_ref(void **state) {
    (void)state;
    fixture f;
    fixture_make(&f, 3, 10);
    moe_options o = moe_options_default();
    moe_cmp_report rep;
    moe_error err;
    assert_int_equal(moe_check_against_ref(&moe_backend_ref, &o, &f.cc, MOE_SPLIT_EP, 2, 0, &rep, &err), MOE_OK);
    if (!rep.ok) fail_msg("%s", rep.msg);
    fixture_free(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_agrees_with_itself), cmocka_unit_test(test_zero_tokens),
        cmocka_unit_test(test_logit_moved),            cmocka_unit_test(test_ids_swapped),
        cmocka_unit_test(test_weight_scaled),          cmocka_unit_test(test_output_one_ulp),
        cmocka_unit_test(test_nonfinite_row),          cmocka_unit_test(test_check_against_ref),
    };
    return cmocka_run_group_tests_name("compare", tests, NULL, NULL);
}
