/*
 * test_plugin.c: plugins (common/moe_plugin.h) as paths: the example plugin passes the
 * differential harness, the planted-bug plugin is caught and shrunk, and every faulty plugin
 * is refused at load or reported by name, never passed.
 *
 * Rules checked:
 *   - build/examples/libexample.so passes fixed cases of every kind (MXFP4, NVFP4, bf16, exact and
 *     serving, TP and EP with padding, non-finite rows, ties) with every stage compared;
 *   - build/examples/libplanted_bug.so is caught within 50 smoke cases, first at routed_h, and
 *     the shrunk case still fails and is no larger than the caught one;
 *   - a plugin with another ABI version, another layout fingerprint, no entry symbol, or a
 *     missing file fails to load with a message naming the file and the fault;
 *   - a plugin that crashes, exits or hangs (INKLING_MOE_PATH_TIMEOUT=1) in forward makes the
 *     call fail with a message naming plugin:fault and what happened, and the fuzz case FAIL.
 * The plugins come from `make examples` under $INKLING_BUILD (default build).
 */
#include "test_support.h"

#include "harness/fuzz.h"
#include "harness/paths.h"

#include <stdio.h>
#include <stdlib.h>

static char built[512];

static const char *plugin_path(const char *rel) {
    static char buf[700];
    snprintf(buf, sizeof buf, "plugin:%s/%s", built, rel);
    return buf;
}

static const moe_backend *open_ok(const char *rel) {
    moe_error err = {0};
    const moe_backend *b = moe_path_open(plugin_path(rel), &err);
    if (!b) fail_msg("%s did not load: %s", rel, err.msg);
    return b;
}

static const char *const fixed_cases[] = {
    "D=64 I=64 R=6 K=2 S=2 T=5 fmt=mxfp4 bias=1 gscale=1 rs=8 split=none pad=0 seed=1 feat=none",
    "D=96 I=64 R=5 K=3 S=1 T=7 fmt=bf16 bias=0 gscale=1 rs=2.5 split=tp2 pad=0 seed=2 feat=ties,dup",
    "D=64 I=64 R=7 K=2 S=2 T=6 fmt=mxfp4 bias=1 gscale=0 rs=8 split=ep2 pad=0 seed=3 feat=nonfinite,e8m0",
    "D=64 I=128 R=4 K=2 S=1 T=4 fmt=mxfp4 bias=1 gscale=1 rs=1 split=tp2 pad=96 seed=4 feat=codes,neglogit",
    "D=32 I=32 R=3 K=3 S=0 T=3 fmt=bf16 bias=1 gscale=1 rs=4 split=ep2 pad=0 seed=5 feat=near,few",
    "D=64 I=64 R=4 K=2 S=1 T=4 fmt=nvfp4 bias=1 gscale=1 rs=8 split=tp2 pad=0 seed=6 feat=e8m0",
    "D=48 I=80 R=5 K=2 S=2 T=3 fmt=nvfp4 bias=0 gscale=1 rs=8 split=ep2 pad=0 seed=7 feat=codes",
    /* found by CI's fuzz-external: a subnormal g lost its bits when silu(g) u was formed in float */
    "D=64 I=1600 R=1 K=1 S=0 T=1 fmt=nvfp4 bias=0 gscale=0 rs=1 split=none pad=0 "
    "seed=3380144733096139448 feat=e4m3",
};

static void test_example_passes(void **state) {
    (void)state;
    const moe_backend *b = open_ok("examples/libexample.so");
    assert_string_equal(b->name, "plugin:example");
    fuzz_targets tg = {.candidates = &b, .n_candidates = 1, .ref_paths = false, .n_threads = 1};
    for (size_t i = 0; i < sizeof fixed_cases / sizeof fixed_cases[0]; i++) {
        fuzz_case c;
        moe_error err = {0};
        assert_int_equal(fuzz_case_parse(fixed_cases[i], &c, &err), MOE_OK);
        fuzz_case_result res;
        assert_int_equal(fuzz_run_case(&c, &tg, &res, &err), MOE_OK);
        assert_true(res.n >= 2); /* both contracts ran: nothing skipped */
        for (int k = 0; k < res.n; k++)
            if (res.r[k].outcome != FUZZ_PASS)
                fail_msg("%s on %s: %s", res.r[k].path, fixed_cases[i],
                         res.r[k].outcome == FUZZ_SKIP ? res.r[k].skip_reason : res.r[k].rep.msg);
    }
}

static void test_planted_bug_caught_and_shrunk(void **state) {
    (void)state;
    const moe_backend *b = open_ok("examples/libplanted_bug.so");
    fuzz_suite smoke;
    moe_error err = {0};
    assert_int_equal(fuzz_suite_load("harness/suites", "smoke", &smoke, &err), MOE_OK);
    fuzz_case caught, shrunk;
    fuzz_case_result res;
    long took = fuzz_hunt(b, &smoke, 1, 50, 60.0, false, &caught, &res);
    if (took < 0) fail_msg("the planted bug survived 50 smoke cases");
    const fuzz_path_result *r = &res.r[fuzz_first_failure(&res)];
    assert_int_equal(r->rep.first_stage, MOE_CMP_ROUTED_H);
    fuzz_targets tg = {.candidates = &b, .n_candidates = 1, .ref_paths = false, .n_threads = 1};
    fuzz_shrink(&caught, r->path, &tg, 100, &shrunk);
    assert_true(shrunk.T <= caught.T && shrunk.cfg.D <= caught.cfg.D && shrunk.cfg.R <= caught.cfg.R);
    assert_int_equal(fuzz_run_case(&shrunk, &tg, &res, &err), MOE_OK);
    assert_true(fuzz_first_failure(&res) >= 0);
    char a[512], s[512];
    print_message("caught after %ld case(s): %s\nshrunk: %s\n", took, fuzz_case_format(&caught, a, sizeof a),
                  fuzz_case_format(&shrunk, s, sizeof s));
}

static void expect_load_failure(const char *rel, const char *fragment) {
    moe_error err = {0};
    assert_null(moe_path_open(plugin_path(rel), &err));
    assert_msg_has(err, rel);
    assert_msg_has(err, fragment);
}

static void test_bad_plugins_refused(void **state) {
    (void)state;
    expect_load_failure("tests/plugins/libfault_abi.so", "ABI version 2");
    expect_load_failure("tests/plugins/libfault_layout.so", "layout");
    expect_load_failure("tests/plugins/libfault_noentry.so", "no symbol inkling_moe_plugin");
    expect_load_failure("tests/plugins/libno_such_plugin.so", "cannot load");
    moe_error err = {0};
    assert_null(moe_path_open("plugin:", &err));
    assert_msg_has(err, "needs a file");
}

/* One forward call of a faulty plugin on a small layer: the error it reports. */
static moe_error forward_error(const moe_backend *b) {
    const char *line = "D=32 I=32 R=2 K=1 S=1 T=2 fmt=bf16 bias=0 gscale=0 rs=1 split=none pad=0 seed=7 feat=none";
    fuzz_case c;
    moe_error err = {0};
    assert_int_equal(fuzz_case_parse(line, &c, &err), MOE_OK);
    fuzz_targets tg = {.candidates = &b, .n_candidates = 1, .ref_paths = false, .n_threads = 1};
    fuzz_case_result res;
    assert_int_equal(fuzz_run_case(&c, &tg, &res, &err), MOE_OK);
    assert_true(res.n > 0);
    for (int k = 0; k < res.n; k++) assert_int_equal(res.r[k].outcome, FUZZ_FAIL); /* never passed */
    moe_error out = {MOE_ERR_DEVICE, ""};
    snprintf(out.msg, sizeof out.msg, "%.500s", res.r[0].rep.msg);
    return out;
}

static void test_faulty_forward_reported(void **state) {
    (void)state;
    moe_error e = forward_error(open_ok("tests/plugins/libfault_crash.so"));
    assert_msg_has(e, "plugin:fault: crashed in forward: signal 11");
    e = forward_error(open_ok("tests/plugins/libfault_exit.so"));
    assert_msg_has(e, "plugin:fault: exited with status 3");
    setenv("INKLING_MOE_PATH_TIMEOUT", "1", 1);
    e = forward_error(open_ok("tests/plugins/libfault_hang.so"));
    unsetenv("INKLING_MOE_PATH_TIMEOUT");
    assert_msg_has(e, "plugin:fault: forward timed out after 1 s");
}

int main(void) {
    const char *b = getenv("INKLING_BUILD");
    snprintf(built, sizeof built, "%s", b && b[0] ? b : "build");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_example_passes),
        cmocka_unit_test(test_planted_bug_caught_and_shrunk),
        cmocka_unit_test(test_bad_plugins_refused),
        cmocka_unit_test(test_faulty_forward_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
