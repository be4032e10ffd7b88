/*
 * test_engine_contract.c: the engine precision contract (docs/tolerances.md, "The engine
 * contract"): serving plus exactly a served engine's extra bf16 roundings.
 *
 * Rules checked:
 *   - the engine envelope holds the serving one, element by element, on every stage, unsplit
 *     and split (a serving path always meets the engine contract);
 *   - the reference and the OpenBLAS path pass the engine contract on fixed cases;
 *   - mutant:round_y (routed y rounded to bf16 before weighting, what an engine does) passes
 *     30 smoke cases under the engine contract and is caught under serving;
 *   - every other mutant is still caught under the engine contract within 300 smoke cases.
 */
#include "test_support.h"

#include "harness/envelope.h"
#include "harness/fuzz.h"
#include "harness/mutants.h"

#include <stdio.h>
#include <stdlib.h>

static fuzz_suite smoke;

static int load_suite(void **state) {
    (void)state;
    moe_error err;
    return fuzz_suite_load("harness/suites", "smoke", &smoke, &err) == MOE_OK ? 0 : -1;
}

static void band_holds(const moe_band *wide, const moe_band *narrow, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (!(wide->lo[i] <= narrow->lo[i] && wide->hi[i] >= narrow->hi[i]))
            fail_msg("%s[%zu]: engine [%g, %g] does not hold serving [%g, %g]", what, i, wide->lo[i], wide->hi[i],
                     narrow->lo[i], narrow->hi[i]);
}

static void test_engine_envelope_holds_serving(void **state) {
    (void)state;
    static const char *const lines[] = {
        "D=64 I=64 R=6 K=3 S=2 T=5 fmt=mxfp4 bias=1 gscale=1 rs=8 split=tp2 pad=0 seed=11 feat=none",
        "D=96 I=64 R=5 K=2 S=1 T=4 fmt=bf16 bias=0 gscale=1 rs=2.5 split=ep2 pad=0 seed=12 feat=ties",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        fuzz_case c;
        moe_error err = {0};
        assert_int_equal(fuzz_case_parse(lines[i], &c, &err), MOE_OK);
        moe_layer_data ld;
        uint16_t *x = NULL;
        assert_int_equal(fuzz_case_build(&c, &ld, &x, &err), MOE_OK);
        moe_cmp_case cc = {&c.cfg, &ld.w, c.T, x};
        moe_envelope *serv = NULL, *eng = NULL;
        assert_int_equal(moe_envelope_build(&cc, MOE_PRECISION_SERVING, c.split, c.n, &serv, &err), MOE_OK);
        assert_int_equal(moe_envelope_build(&cc, MOE_PRECISION_ENGINE, c.split, c.n, &eng, &err), MOE_OK);
        const size_t T = (size_t)c.T, D = (size_t)c.cfg.D, K = (size_t)c.cfg.K, S = (size_t)c.cfg.S,
                     I = (size_t)c.cfg.I;
        band_holds(&eng->routed_h, &serv->routed_h, T * K * I, "routed_h");
        band_holds(&eng->routed_y, &serv->routed_y, T * K * D, "routed_y");
        band_holds(&eng->sink_h, &serv->sink_h, T * S * I, "sink_h");
        band_holds(&eng->sink_y, &serv->sink_y, T * D, "sink_y");
        band_holds(&eng->out_unsplit, &serv->out_unsplit, T * D, "out_unsplit");
        band_holds(&eng->out_split, &serv->out_split, T * D, "out_split");
        /* and it is wider somewhere: the engine's roundings are allowed */
        bool wider = false;
        for (size_t k = 0; k < T * D; k++)
            wider = wider || eng->out_unsplit.hi[k] - eng->out_unsplit.lo[k] > serv->out_unsplit.hi[k] - serv->out_unsplit.lo[k];
        assert_true(wider);
        moe_envelope_free(serv);
        moe_envelope_free(eng);
        moe_layer_data_free(&ld);
        free(x);
    }
}

static void test_paths_meet_engine_contract(void **state) {
    (void)state;
    const moe_backend *cands[1] = {&moe_backend_blas};
    char why[256];
    int nc = moe_backend_blas.available(why, sizeof why) ? 1 : 0;
    fuzz_targets tg = {.candidates = cands, .n_candidates = nc, .ref_paths = true, .n_threads = 1, .engine = true};
    for (long i = 0; i < 12; i++) {
        fuzz_case c = fuzz_suite_case(&smoke, 5, i);
        fuzz_case_result res;
        moe_error err = {0};
        assert_int_equal(fuzz_run_case(&c, &tg, &res, &err), MOE_OK);
        for (int k = 0; k < res.n; k++) {
            if (!strstr(res.r[k].path, "/engine")) fail_msg("path %s ran outside the engine contract", res.r[k].path);
            if (res.r[k].outcome == FUZZ_FAIL) fail_msg("%s: %s", res.r[k].path, res.r[k].rep.msg);
        }
    }
}

static void test_engine_rounding_allowed_only_by_engine(void **state) {
    (void)state;
    const moe_backend *m = moe_mutant_find("round_y");
    assert_non_null(m);
    fuzz_case caught;
    fuzz_case_result res;
    long took = fuzz_hunt(m, &smoke, 1, 30, 60.0, FUZZ_HUNT_ENGINE, &caught, &res);
    if (took >= 0) fail_msg("round_y failed the engine contract: %s", res.r[fuzz_first_failure(&res)].rep.msg);
    assert_true(fuzz_hunt(m, &smoke, 1, 60, 60.0, 0, &caught, &res) >= 0);
}

static void test_mutants_caught_under_engine(void **state) {
    (void)state;
    for (int i = 0; i < moe_mutant_count(); i++) {
        const moe_backend *m = moe_mutant_at(i);
        if (!strcmp(m->name, "mutant:round_y")) continue; /* an engine rounding: allowed */
        fuzz_case caught;
        fuzz_case_result res;
        long took = fuzz_hunt(m, &smoke, 1, 300, 60.0, FUZZ_HUNT_ENGINE, &caught, &res);
        if (took < 0) fail_msg("%s (%s) survived 300 smoke cases under the engine contract", m->name, m->description);
        print_message("%-26s caught under engine after %ld case(s)\n", m->name, took);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_engine_envelope_holds_serving),
        cmocka_unit_test(test_paths_meet_engine_contract),
        cmocka_unit_test(test_engine_rounding_allowed_only_by_engine),
        cmocka_unit_test(test_mutants_caught_under_engine),
    };
    return cmocka_run_group_tests(tests, load_suite, NULL);
}
