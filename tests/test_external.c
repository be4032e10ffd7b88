/*
 * test_external.c: cases out, results in (docs/external-paths.md): export, check, and
 * external programs as paths (exec:, worker:).
 *
 * Rules checked:
 *   - `inkling-moe export` then `inkling-moe check` round-trips a case: the exported expected
 *     outputs pass, the output of `run` on the exported checkpoint passes (unsplit and TP 2),
 *     a planted bug's output fails naming the stage, and broken outputs files (no out, a
 *     topk_ids of the wrong shape) exit 2 naming the tensor;
 *   - the example worker (build/examples/moe-worker) passes fixed cases as exec: and worker:
 *     (MXFP4, NVFP4 and bf16 checkpoints as export writes them, T = 0 included);
 *   - a program that exits non-zero, is killed, answers "error", or runs past
 *     INKLING_MOE_PATH_TIMEOUT fails the case with a message naming the path and its stderr.
 * The tool and the worker come from $INKLING_BUILD (default build).
 */
#include "test_support.h"

#include "common/safetensors.h"
#include "harness/fuzz.h"
#include "harness/paths.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char built[256], work[300];

/* Runs a shell command line; stdout and stderr into work/log. Returns the exit status. */
static int shell(const char *line) {
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "(%s) > %s/log 2>&1", line, work);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static const char *log_text(void) {
    static char text[8192];
    char path[600];
    snprintf(path, sizeof path, "%s/log", work);
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = '\0';
    return text;
}

#define assert_log_has(frag)                                                                     \
    do {                                                                                         \
        if (!strstr(log_text(), (frag))) fail_msg("output lacks \"%s\":\n%s", (frag), log_text()); \
    } while (0)

static const char *case_line =
    "D=64 I=64 R=6 K=2 S=2 T=5 fmt=mxfp4 bias=1 gscale=1 rs=8 split=tp2 pad=0 seed=3 feat=nonfinite";

static void test_export_check_round_trip(void **state) {
    (void)state;
    char tool[300], dir[320], args[1000], cmd[8000];
    snprintf(tool, sizeof tool, "%s/bin/inkling-moe", built);
    snprintf(dir, sizeof dir, "%s/case", work);
    snprintf(cmd, sizeof cmd, "%s export --case '%s' --out %s", tool, case_line, dir);
    assert_int_equal(shell(cmd), 0);
    snprintf(args, sizeof args, "--model %s --input %s/input.safetensors", dir, dir);
    snprintf(cmd, sizeof cmd, "%s check %s --outputs %s/expected.safetensors", tool, args, dir);
    assert_int_equal(shell(cmd), 0);
    assert_log_has("outputs/serving              PASS");
    assert_log_has("stages compared: logits ids weights routed_h routed_y sink_h sink_y output");
    /* run on the exported checkpoint, TP 2, judged as a TP 2 sum */
    snprintf(cmd, sizeof cmd, "%s run %s --out %s/y.safetensors --tp 2 --stages && %s check %s --outputs %s/y.safetensors --tp 2",
             tool, args, dir, tool, args, dir);
    assert_int_equal(shell(cmd), 0);
    assert_log_has("1 passed, 0 failed, 0 skipped");
    /* a planted bug's output fails, naming the stage */
    snprintf(cmd, sizeof cmd, "%s run %s --out %s/m.safetensors --backend mutant:gate_up_swap --stages && %s check %s --outputs %s/m.safetensors",
             tool, args, dir, tool, args, dir);
    assert_int_equal(shell(cmd), 1);
    assert_log_has("FAIL stage output");
    assert_log_has("0 passed, 1 failed, 0 skipped");
}

static void write_outputs(const char *path, bool with_out, int ids_cols) {
    static float out[5 * 64];
    static int32_t ids[5 * 8];
    static float w[5 * 4];
    moe_st_entry e[3] = {{"out", MOE_ST_F32, 2, {5, 64}, out}, {"topk_ids", MOE_ST_I32, 2, {5, ids_cols}, ids},
                         {"topk_weights", MOE_ST_F32, 2, {5, 4}, w}};
    moe_error err = {0};
    assert_int_equal(moe_st_write(path, with_out ? e : e + 1, with_out ? 3 : 2, &err), MOE_OK);
}

static void test_check_rejects_broken_outputs(void **state) {
    (void)state;
    char tool[300], dir[320], bad[340], cmd[2000];
    snprintf(tool, sizeof tool, "%s/bin/inkling-moe", built);
    snprintf(dir, sizeof dir, "%s/case", work);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", work);
    write_outputs(bad, false, 2);
    snprintf(cmd, sizeof cmd, "%s check --model %s --input %s/input.safetensors --outputs %s", tool, dir, dir, bad);
    assert_int_equal(shell(cmd), 2);
    assert_log_has("tensor out: missing");
    write_outputs(bad, true, 3);
    assert_int_equal(shell(cmd), 2);
    assert_log_has("tensor topk_ids: I32 [5, 3], expected I32 [5, 2]");
}

/* Runs one fixed case on path; returns the outcome of its unsplit serving run and its message. */
static fuzz_outcome run_on(const char *path, const char *line, char *msg, size_t len) {
    moe_error err = {0};
    const moe_backend *b = moe_path_open(path, &err);
    if (!b) fail_msg("%s: %s", path, err.msg);
    fuzz_case c;
    assert_int_equal(fuzz_case_parse(line, &c, &err), MOE_OK);
    fuzz_targets tg = {.candidates = &b, .n_candidates = 1, .ref_paths = false, .n_threads = 1};
    fuzz_case_result res;
    assert_int_equal(fuzz_run_case(&c, &tg, &res, &err), MOE_OK);
    fuzz_outcome worst = FUZZ_SKIP;
    msg[0] = '\0';
    for (int k = 0; k < res.n; k++) {
        if (res.r[k].outcome == FUZZ_FAIL && worst != FUZZ_FAIL) snprintf(msg, len, "%.600s", res.r[k].rep.msg);
        if (res.r[k].outcome == FUZZ_FAIL) worst = FUZZ_FAIL;
        else if (res.r[k].outcome == FUZZ_PASS && worst == FUZZ_SKIP) worst = FUZZ_PASS;
    }
    return worst;
}

static void test_example_worker_passes(void **state) {
    (void)state;
    static const char *const lines[] = {
        "D=64 I=64 R=6 K=2 S=2 T=5 fmt=mxfp4 bias=1 gscale=1 rs=8 split=none pad=0 seed=1 feat=nonfinite",
        "D=96 I=64 R=5 K=3 S=0 T=7 fmt=bf16 bias=0 gscale=1 rs=2.5 split=none pad=0 seed=2 feat=ties,dup",
        "D=32 I=32 R=3 K=1 S=1 T=0 fmt=mxfp4 bias=0 gscale=0 rs=1 split=none pad=0 seed=3 feat=none",
        "D=64 I=64 R=4 K=2 S=1 T=4 fmt=nvfp4 bias=1 gscale=1 rs=8 split=none pad=0 seed=6 feat=e8m0",
    };
    char exec_path[400], worker_path[400], msg[700];
    snprintf(exec_path, sizeof exec_path, "exec:%s/examples/moe-worker", built);
    snprintf(worker_path, sizeof worker_path, "worker:%s/examples/moe-worker --worker", built);
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        if (run_on(exec_path, lines[i], msg, sizeof msg) != FUZZ_PASS) fail_msg("exec: %s: %s", lines[i], msg);
        if (run_on(worker_path, lines[i], msg, sizeof msg) != FUZZ_PASS) fail_msg("worker: %s: %s", lines[i], msg);
    }
}

static void expect_failure(const char *path, const char *fragment) {
    const char *line = "D=32 I=32 R=2 K=1 S=1 T=2 fmt=bf16 bias=0 gscale=0 rs=1 split=none pad=0 seed=7 feat=none";
    char msg[700];
    assert_int_equal(run_on(path, line, msg, sizeof msg), FUZZ_FAIL);
    if (!strstr(msg, fragment)) fail_msg("%s: message \"%s\" lacks \"%s\"", path, msg, fragment);
}

static void test_failing_programs_reported(void **state) {
    (void)state;
    expect_failure("exec:echo engine broke >&2; exit 3", "exec:echo: exited with status 3; stderr: engine broke");
    expect_failure("exec:kill -SEGV $$", "killed by signal 11");
    expect_failure("exec:true", "its output");
    expect_failure("worker:while read l; do echo error no kernel for this shape; done",
                   "answered: error no kernel for this shape");
    expect_failure("worker:read l; echo dying >&2; exit 4", "worker ended without an answer (exited with status 4); stderr: dying");
    setenv("INKLING_MOE_PATH_TIMEOUT", "1", 1);
    expect_failure("exec:sleep 30", "timed out after 1 s");
    expect_failure("worker:sleep 30", "no answer within 1 s");
    unsetenv("INKLING_MOE_PATH_TIMEOUT");
}

int main(void) {
    const char *b = getenv("INKLING_BUILD");
    snprintf(built, sizeof built, "%.200s", b && b[0] ? b : "build");
    snprintf(work, sizeof work, "%.250s/tests/external-work", built);
    char cmd[800];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", work, work);
    if (system(cmd)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_export_check_round_trip),
        cmocka_unit_test(test_check_rejects_broken_outputs),
        cmocka_unit_test(test_example_worker_passes),
        cmocka_unit_test(test_failing_programs_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
