/*
 * test_fuzz_history.c: history as part of a case (harness/fuzz_pool.h, fuzz_stress.h,
 * fuzz_sequence.h, fuzz_flaky.h).
 *
 * Two test-only backends wrap the reference: "history_fault" adds 1 to the first output
 * element when the previous call on the same instance had more tokens (a stale-workspace bug:
 * its fault depends on the previous call), "odd_T_fault" does so whenever T is odd (a plain,
 * deterministic bug). Rules checked:
 *   - the pool hands the same live instance to a case of the same layer, a new one for other
 *     weights, and destroys the least recently used past its byte budget;
 *   - history_fault fails a case only after a larger one on the same instance: the harness
 *     judges that failure INTERMITTENT (fresh reruns pass), saves the sequence, and its replay
 *     fails every time; shrinking drops the unrelated earlier cases and keeps the two that
 *     matter; the stress (history) check catches it, names the live instance as the wrong one,
 *     and passes on two fresh instances;
 *   - odd_T_fault is judged DETERMINISTIC and leaves no sequence;
 *   - the sequence file round-trips; a bad header or case line fails naming the line;
 *   - the stress plan over ref and blas passes its history check (determinism across history);
 *   - a case that would hold more than FUZZ_MAX_PATHS results fails loudly;
 *   - the command: `fuzz --replay` of the kept sequence reports its rate and the standard last
 *     line, `fuzz --stress` runs and summarises, a missing or bad sequence file exits 2.
 */
#include "test_support.h"

#include "checkpoint_fixture.h"
#include "harness/fuzz_flaky.h"
#include "harness/commands.h"
#include "harness/fuzz_stress.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* ---------------------------------------------------------------- the test-only backends */

typedef struct {
    void *ref;
    int prev_T;
    bool history; /* the fault: true = after a larger call, false = on odd T */
} fault_state;

static bool fault_available(char *why, size_t len) { return moe_backend_ref.available(why, len); }

static bool fault_supports(const moe_config *cfg, const moe_split *split, const moe_options *opt,
                           char *why, size_t len) {
    return moe_backend_ref.supports(cfg, split, opt, why, len);
}

static moe_status fault_create(const moe_shard *sh, const moe_options *opt, void **out, bool history,
                               moe_error *err) {
    fault_state *s = calloc(1, sizeof *s);
    if (!s) return moe_fail(err, MOE_ERR_NOMEM, "fault: out of memory");
    s->history = history;
    moe_status st = moe_backend_ref.create(sh, opt, &s->ref, err);
    if (st) free(s);
    else *out = s;
    return st;
}

static moe_status history_create(const moe_shard *sh, const moe_options *opt, void **out, moe_error *err) {
    return fault_create(sh, opt, out, true, err);
}

static moe_status odd_create(const moe_shard *sh, const moe_options *opt, void **out, moe_error *err) {
    return fault_create(sh, opt, out, false, err);
}

static moe_status fault_forward(void *p, int T, const uint16_t *x, float *out, moe_stages *st, moe_error *err) {
    fault_state *s = p;
    moe_status rc = moe_backend_ref.forward(s->ref, T, x, out, st, err);
    const bool fault = s->history ? s->prev_T > T : T % 2 == 1;
    if (!rc && T > 0 && fault) out[0] += 1.0f;
    s->prev_T = T;
    return rc;
}

static moe_status fault_route(void *p, int T, const float *logits, int32_t *ids, float *weights, moe_error *err) {
    return moe_backend_ref.route(((fault_state *)p)->ref, T, logits, ids, weights, err);
}

static void fault_destroy(void *p) {
    fault_state *s = p;
    if (!s) return;
    moe_backend_ref.destroy(s->ref);
    free(s);
}

static const moe_backend history_fault = {"history_fault", "wrong after a larger call", fault_available,
                                          fault_supports, history_create, fault_forward, fault_route,
                                          fault_destroy, NULL};
static const moe_backend odd_T_fault = {"odd_T_fault", "wrong on odd T", fault_available, fault_supports,
                                        odd_create, fault_forward, fault_route, fault_destroy, NULL};

/* ---------------------------------------------------------------- fixtures */

static char dir[512];

static int setup(void **state) {
    (void)state;
    return fixture_tempdir(dir, sizeof dir, "history");
}

static int teardown(void **state) {
    (void)state;
    fixture_remove_tree(dir);
    return 0;
}

static fuzz_case case_of(const char *line) {
    fuzz_case c;
    moe_error err;
    if (fuzz_case_parse(line, &c, &err)) fail_msg("%s: %s", line, err.msg);
    return c;
}

/* One layer, a larger input, then a smaller one; and an unrelated layer. */
#define LAYER "D=32 I=32 R=4 K=2 S=1 fmt=bf16 bias=1 gscale=0 rs=1 split=none pad=0 seed=11 feat=none"
#define OTHER "D=64 I=64 R=3 K=1 S=0 T=3 fmt=mxfp4 bias=0 gscale=1 rs=2 split=tp2 pad=0 seed=12 feat=none"

static fuzz_targets targets_of(const moe_backend **cands, int n, fuzz_pool *pool) {
    fuzz_targets tg = {cands, n, false, 1, false, pool, false, 0.0};
    return tg;
}

/* Runs the printing parts of the harness with stdout silenced. */
static void quiet_judge(fuzz_check check, const fuzz_case *c, const char *path, const fuzz_sequence *history,
                        const fuzz_targets *tg, const char *name, fuzz_verdict *v) {
    fuzz_history_opts o = {10, 1, true, 0, dir, dir, true, 5, 4, 32};
    fflush(stdout);
    int saved = dup(1), null_fd = open("/dev/null", O_WRONLY);
    if (saved < 0 || null_fd < 0) fail_msg("cannot redirect stdout");
    dup2(null_fd, 1);
    fuzz_judge_failure(check, c, path, "FAIL: planted", history, tg, &o, name, "found by: a test", v);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    close(null_fd);
}

/* ---------------------------------------------------------------- tests */

static void test_pool_reuses_and_evicts(void **state) {
    (void)state;
    fuzz_case a = case_of(LAYER " T=4"), b = case_of(OTHER);
    moe_layer_data la, lb;
    uint16_t *xa, *xb;
    moe_error err;
    assert_int_equal(fuzz_case_build(&a, &la, &xa, &err), MOE_OK);
    assert_int_equal(fuzz_case_build(&b, &lb, &xb, &err), MOE_OK);
    fuzz_pool *pool = fuzz_pool_new(1); /* a one-byte budget: only the newest entry stays */
    moe_options opt = moe_options_default();
    moe_layer *const *l1, *const *l2, *const *l3;
    assert_int_equal(fuzz_pool_layers(pool, &moe_backend_ref, &opt, &a.cfg, &la.w, MOE_SPLIT_NONE, 1, 0, &l1, &err), MOE_OK);
    moe_layer *first = l1[0];
    assert_int_equal(fuzz_pool_layers(pool, &moe_backend_ref, &opt, &a.cfg, &la.w, MOE_SPLIT_NONE, 1, 0, &l2, &err), MOE_OK);
    assert_ptr_equal(l2[0], first);
    assert_int_equal(fuzz_pool_stats_of(pool).reused, 1);
    /* one weight changed: another layer */
    la.gate_w[0] ^= 1;
    assert_int_equal(fuzz_pool_layers(pool, &moe_backend_ref, &opt, &a.cfg, &la.w, MOE_SPLIT_NONE, 1, 0, &l3, &err), MOE_OK);
    assert_int_equal(fuzz_pool_stats_of(pool).made, 2);
    assert_int_equal(fuzz_pool_stats_of(pool).evicted, 1);
    assert_int_equal(fuzz_pool_layers(pool, &moe_backend_ref, &opt, &b.cfg, &lb.w, MOE_SPLIT_TP, 2, 0, &l3, &err), MOE_OK);
    assert_int_equal(fuzz_pool_stats_of(pool).made, 3);
    fuzz_pool_free(pool);
    moe_layer_data_free(&la);
    moe_layer_data_free(&lb);
    free(xa);
    free(xb);
}

static void test_history_fault_is_intermittent(void **state) {
    (void)state;
    const moe_backend *cands[1] = {&history_fault};
    fuzz_pool *pool = fuzz_pool_new((size_t)64 << 20);
    fuzz_targets tg = targets_of(cands, 1, pool);
    fuzz_case other = case_of(OTHER), big = case_of(LAYER " T=6"), small = case_of(LAYER " T=2 input=1");
    fuzz_case_result res;
    moe_error err;
    assert_int_equal(fuzz_run_case(&other, &tg, &res, &err), MOE_OK);
    assert_int_equal(fuzz_run_case(&big, &tg, &res, &err), MOE_OK);
    assert_int_equal(fuzz_first_failure(&res), -1);
    assert_int_equal(fuzz_run_case(&small, &tg, &res, &err), MOE_OK);
    assert_true(fuzz_result_failed(&res, "history_fault/serving"));
    assert_true(fuzz_result_failed(&res, "history_fault/exact"));
    fuzz_pool_free(pool);

    /* the sequence as the fuzzer keeps it: unrelated cases first */
    fuzz_sequence history = {0};
    assert_int_equal(fuzz_sequence_add(&history, &other, &err), MOE_OK);
    assert_int_equal(fuzz_sequence_add(&history, &big, &err), MOE_OK);
    fuzz_case other2 = other;
    other2.T = 1;
    assert_int_equal(fuzz_sequence_add(&history, &other2, &err), MOE_OK);
    tg.pool = NULL;
    fuzz_verdict v;
    quiet_judge(FUZZ_CHECK_ENVELOPE, &small, "history_fault/serving", &history, &tg, "intermittent", &v);
    assert_true(v.intermittent);
    assert_int_equal(v.fresh_failed, 0);
    assert_int_equal(v.replays, 4);
    assert_int_equal(v.replay_failed, 4);
    assert_int_equal(v.cases_before, 4);
    assert_int_equal(v.cases_after, 2);

    /* the saved file replays: the two cases that matter, failing every time */
    fuzz_sequence s;
    if (fuzz_sequence_load(v.saved, &s, &err)) fail_msg("%s", err.msg);
    assert_int_equal(s.check, FUZZ_CHECK_ENVELOPE);
    assert_string_equal(s.path, "history_fault/serving");
    assert_int_equal(s.n, 2);
    assert_memory_equal(&s.cases[0], &big, sizeof big);
    assert_memory_equal(&s.cases[1], &small, sizeof small);
    fuzz_replay_result rr;
    assert_int_equal(fuzz_sequence_replay(&s, &tg, 3, 0, &rr, &err), MOE_OK);
    assert_int_equal(rr.repeats, 3);
    assert_int_equal(rr.failed, 3);
    assert_int_equal(rr.first_failing_case, 1);
    fuzz_sequence_free(&s);
    fuzz_sequence_free(&history);
}

static void test_history_check_catches_it(void **state) {
    (void)state;
    const moe_backend *cands[1] = {&history_fault};
    fuzz_pool *pool = fuzz_pool_new((size_t)64 << 20);
    fuzz_targets tg = targets_of(cands, 1, pool);
    fuzz_case big = case_of(LAYER " T=6"), small = case_of(LAYER " T=2 input=1");
    fuzz_case_result res;
    moe_error err;
    assert_int_equal(fuzz_stress_case(&big, &tg, &res, &err), MOE_OK);
    assert_int_equal(fuzz_first_failure(&res), -1);
    assert_int_equal(fuzz_stress_case(&small, &tg, &res, &err), MOE_OK);
    int fi = fuzz_first_failure(&res);
    assert_true(fi >= 0);
    assert_int_equal(res.r[fi].rep.first_stage, MOE_CMP_OUTPUT);
    assert_int_equal(res.r[fi].rep.token, 0);
    assert_int_equal(res.r[fi].rep.element, 0);
    assert_msg_has(res.r[fi].rep, "the live instance was wrong");
    /* two fresh instances agree: the check without a pool passes */
    tg.pool = NULL;
    assert_int_equal(fuzz_stress_case(&small, &tg, &res, &err), MOE_OK);
    assert_int_equal(fuzz_first_failure(&res), -1);
    assert_int_equal(fuzz_fresh_failures(FUZZ_CHECK_HISTORY, &small, "any", &tg, 3), 0);
    fuzz_pool_free(pool);
}

/* A stress case over the memory limit runs nothing: the planted history fault, which a run
 * would catch, is not reached, and every path is SKIPPED with the reason. */
static void test_stress_case_over_memory_limit_skipped(void **state) {
    (void)state;
    const moe_backend *cands[1] = {&history_fault};
    fuzz_pool *pool = fuzz_pool_new((size_t)64 << 20);
    fuzz_targets tg = targets_of(cands, 1, pool);
    fuzz_case small = case_of(LAYER " T=2 input=1");
    tg.max_host_bytes = 0.5 * fuzz_case_host_bytes(&small, 2);
    fuzz_case_result res;
    moe_error err;
    assert_int_equal(fuzz_stress_case(&small, &tg, &res, &err), MOE_OK);
    assert_int_equal(res.n, 2); /* exact and serving of the one candidate, unsplit */
    for (int i = 0; i < res.n; i++) {
        assert_int_equal(res.r[i].outcome, FUZZ_SKIP);
        assert_non_null(strstr(res.r[i].skip_reason, "host memory"));
    }
    assert_int_equal(fuzz_pool_stats_of(pool).made, 0);
    fuzz_pool_free(pool);
}

static void test_plain_fault_is_deterministic(void **state) {
    (void)state;
    const moe_backend *cands[1] = {&odd_T_fault};
    fuzz_targets tg = targets_of(cands, 1, NULL);
    fuzz_case odd = case_of(LAYER " T=3");
    fuzz_case_result res;
    moe_error err;
    assert_int_equal(fuzz_run_case(&odd, &tg, &res, &err), MOE_OK);
    assert_true(fuzz_result_failed(&res, "odd_T_fault/serving"));
    fuzz_verdict v;
    quiet_judge(FUZZ_CHECK_ENVELOPE, &odd, "odd_T_fault/serving", NULL, &tg, "deterministic", &v);
    assert_false(v.intermittent);
    assert_int_equal(v.fresh_failed, 5);
    assert_string_equal(v.saved, "");
}

static void test_sequence_file(void **state) {
    (void)state;
    fuzz_sequence s = {0}, back;
    s.check = FUZZ_CHECK_HISTORY;
    snprintf(s.path, sizeof s.path, "blas/serving/split");
    fuzz_case a = case_of(LAYER " T=5 input=3"), b = case_of(OTHER);
    moe_error err;
    assert_int_equal(fuzz_sequence_add(&s, &a, &err), MOE_OK);
    assert_int_equal(fuzz_sequence_add(&s, &b, &err), MOE_OK);
    char file[700];
    snprintf(file, sizeof file, "%s/round.seq", dir);
    assert_int_equal(fuzz_sequence_save(file, &s, "two lines\nof notes", &err), MOE_OK);
    if (fuzz_sequence_load(file, &back, &err)) fail_msg("%s", err.msg);
    assert_int_equal(back.check, FUZZ_CHECK_HISTORY);
    assert_string_equal(back.path, "blas/serving/split");
    assert_int_equal(back.n, 2);
    assert_memory_equal(back.cases, s.cases, 2 * sizeof *s.cases);
    fuzz_sequence_free(&back);
    fuzz_sequence_free(&s);

    FILE *f = fopen(file, "w");
    fprintf(f, "# comment\nsequence check=envelope path=any\n" LAYER " T=1\nD=32 bogus\n");
    fclose(f);
    assert_int_equal(fuzz_sequence_load(file, &back, &err), MOE_ERR_ARG);
    assert_msg_has(err, "line 4");
    f = fopen(file, "w");
    fprintf(f, "sequence check=sometimes path=any\n" LAYER " T=1\n");
    fclose(f);
    assert_int_equal(fuzz_sequence_load(file, &back, &err), MOE_ERR_FORMAT);
    assert_msg_has(err, "check=sometimes");
}

/* Determinism across history on the CPU paths: 24 stress steps over ref and blas. */
static void test_stress_plan_over_cpu_paths(void **state) {
    (void)state;
    fuzz_suite smoke;
    moe_error err;
    if (fuzz_suite_load("harness/suites", "smoke", &smoke, &err)) fail_msg("%s", err.msg);
    const moe_backend *cands[1] = {&moe_backend_blas};
    fuzz_pool *pool = fuzz_pool_new((size_t)64 << 20);
    fuzz_targets tg = {cands, 1, true, 1, false, pool, false, 0.0};
    fuzz_stress_plan plan;
    assert_int_equal(fuzz_stress_plan_init(&plan, &smoke, 1, 5, &err), MOE_OK);
    int ran = 0, up = 0, down = 0, prev_T = -1;
    for (int step = 0; step < 24; step++) {
        fuzz_case c = fuzz_stress_next(&plan);
        fuzz_case_result res;
        assert_int_equal(fuzz_stress_case(&c, &tg, &res, &err), MOE_OK);
        for (int i = 0; i < res.n; i++) {
            if (res.r[i].outcome == FUZZ_FAIL) fail_msg("%s", res.r[i].rep.msg);
            ran += res.r[i].outcome == FUZZ_PASS;
        }
        up += prev_T >= 0 && c.T > prev_T, down += prev_T >= 0 && c.T < prev_T;
        prev_T = c.T;
    }
    assert_true(ran >= 24 * 2);
    assert_true(up > 0 && down > 0);
    assert_true(fuzz_pool_stats_of(pool).reused > 0);
    fuzz_pool_free(pool);
}

static void test_too_many_paths_fail_loudly(void **state) {
    (void)state;
    const moe_backend *cands[8];
    for (int i = 0; i < 8; i++) cands[i] = &moe_backend_ref;
    fuzz_targets tg = targets_of(cands, 8, NULL);
    tg.ref_paths = true;
    assert_true(fuzz_paths_per_case(&tg) > FUZZ_MAX_PATHS);
    fuzz_case c = case_of(OTHER);
    fuzz_case_result res;
    moe_error err;
    assert_int_equal(fuzz_run_case(&c, &tg, &res, &err), MOE_ERR_INTERNAL);
    assert_msg_has(err, "FUZZ_MAX_PATHS");
}

/* The whole file as text (buf of cap bytes). */
static const char *slurp(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    return buf;
}

/* `inkling-moe fuzz ARGS` in this process, stdout and stderr into files; returns the exit
 * status, the stdout text in *text and the stderr text in *errs (static buffers). */
static int fuzz_cli(const char *const *args, const char **text, const char **errs) {
    char *argv[32];
    int argc = 0;
    for (; args[argc]; argc++) argv[argc] = (char *)args[argc];
    char out[700], err[700];
    snprintf(out, sizeof out, "%s/cli.txt", dir);
    snprintf(err, sizeof err, "%s/cli.err", dir);
    fflush(stdout);
    fflush(stderr);
    int saved1 = dup(1), saved2 = dup(2);
    int fd1 = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), fd2 = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (saved1 < 0 || saved2 < 0 || fd1 < 0 || fd2 < 0) fail_msg("cannot redirect stdout and stderr");
    dup2(fd1, 1), dup2(fd2, 2);
    int rc = cmd_fuzz(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved1, 1), dup2(saved2, 2);
    close(saved1), close(saved2), close(fd1), close(fd2);
    static char out_text[1 << 16], err_text[4096];
    *text = slurp(out, out_text, sizeof out_text);
    *errs = slurp(err, err_text, sizeof err_text);
    return rc;
}

static void test_command(void **state) {
    (void)state;
    const char *text, *errs;
    const char *replay[] = {"--replay", "fuzz/regressions/history-grow-shrink.seq", "--repeat", "2",
                            "--paths", "blas", "--report-dir", dir, NULL};
    assert_int_equal(fuzz_cli(replay, &text, &errs), 0);
    if (!strstr(text, "failure rate: 0 of 2 repetitions failed on any")) fail_msg("%s", text);
    if (!strstr(text, " passed, 0 failed, ")) fail_msg("%s", text);
    const char *stress[] = {"--stress", "--max-cases", "6", "--seconds", "60", "--seed", "4", "--suite", "smoke",
                            "--paths", "blas", "--report-dir", dir, "--regress-dir", dir, NULL};
    assert_int_equal(fuzz_cli(stress, &text, &errs), 0);
    if (!strstr(text, "stress summary (seed 4): 6 cases")) fail_msg("%s", text);
    if (!strstr(text, " passed, 0 failed, ")) fail_msg("%s", text);
    char bad[700];
    snprintf(bad, sizeof bad, "%s/bad.seq", dir);
    FILE *f = fopen(bad, "w");
    fprintf(f, "sequence check=envelope\n");
    fclose(f);
    const char *bad_args[] = {"--replay", bad, NULL};
    assert_int_equal(fuzz_cli(bad_args, &text, &errs), 2);
    if (!strstr(errs, "bad.seq line 1")) fail_msg("stderr: %s", errs);
    const char *missing[] = {"--replay", "no/such/file.seq", NULL};
    assert_int_equal(fuzz_cli(missing, &text, &errs), 2);
    if (!strstr(errs, "no/such/file.seq")) fail_msg("stderr: %s", errs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_reuses_and_evicts),
        cmocka_unit_test(test_history_fault_is_intermittent),
        cmocka_unit_test(test_history_check_catches_it),
        cmocka_unit_test(test_plain_fault_is_deterministic),
        cmocka_unit_test(test_sequence_file),
        cmocka_unit_test(test_stress_plan_over_cpu_paths),
        cmocka_unit_test(test_stress_case_over_memory_limit_skipped),
        cmocka_unit_test(test_too_many_paths_fail_loudly),
        cmocka_unit_test(test_command),
    };
    return cmocka_run_group_tests_name("fuzz_history", tests, setup, teardown);
}
