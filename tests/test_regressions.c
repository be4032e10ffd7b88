/*
 * test_regressions.c: replays every saved fuzz case (the .txt files of fuzz/regressions, one case line per
 * non-comment line) over the reference in both contracts, its splits, and every other path
 * available on this machine. A path that cannot run here is skipped, never passed.
 *
 * The .seq files are sequences (harness/fuzz_sequence.h): each is replayed SEQ_REPEAT times in
 * this process, one pool of live instances per repetition, with the check it names.
 *
 * Rules checked: no path fails on any saved case or in any replay of a sequence; every line
 * parses.
 */
#include "test_support.h"

#include "harness/fuzz.h"
#include "harness/fuzz_sequence.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

#define REGRESSION_DIR "fuzz/regressions"
#define SEQ_REPEAT 3

/* Every available path: the reference's own and every other backend of the registry. */
static fuzz_targets all_paths(const moe_backend **cands, int cap) {
    int nc = 0;
    for (int i = 0; i < moe_backend_count(); i++)
        if (moe_backend_at(i) != &moe_backend_ref) {
            if (nc == cap) fail_msg("more than %d backends", cap);
            cands[nc++] = moe_backend_at(i);
        }
    fuzz_targets tg = {cands, nc, true, 1, false, NULL, false, 0.0};
    return tg;
}

static bool has_suffix(const char *name, const char *suffix) {
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && !strcmp(name + n - k, suffix);
}

static void test_replay_all(void **state) {
    (void)state;
    DIR *dir = opendir(REGRESSION_DIR);
    if (!dir) skip();
    const moe_backend *cands[8];
    fuzz_targets tg = all_paths(cands, 8);
    int cases = 0, failures = 0, skipped_paths = 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        if (!has_suffix(de->d_name, ".txt")) continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", REGRESSION_DIR, de->d_name);
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        char line[1024];
        while (fgets(line, sizeof line, f)) {
            line[strcspn(line, "\r\n")] = 0;
            const char *p = line;
            while (*p == ' ' || *p == '\t') p++;
            if (!*p || *p == '#') continue;
            fuzz_case c;
            moe_error err;
            if (fuzz_case_parse(p, &c, &err)) fail_msg("%s: %s", path, err.msg);
            fuzz_case_result res;
            if (fuzz_run_case(&c, &tg, &res, &err)) fail_msg("%s: case did not run: %s", path, err.msg);
            cases++;
            for (int i = 0; i < res.n; i++) {
                skipped_paths += res.r[i].outcome == FUZZ_SKIP;
                if (res.r[i].outcome == FUZZ_FAIL) {
                    failures++;
                    print_error("%s: %s\n  case: %s\n  %s\n", path, res.r[i].path, p, res.r[i].rep.msg);
                }
            }
        }
        fclose(f);
    }
    closedir(dir);
    print_message("replayed %d regression case(s); %d path run(s) skipped (not available here)\n",
                  cases, skipped_paths);
    if (!cases) skip();
    assert_int_equal(failures, 0);
}

static void test_replay_sequences(void **state) {
    (void)state;
    DIR *dir = opendir(REGRESSION_DIR);
    if (!dir) skip();
    const moe_backend *cands[8];
    fuzz_targets tg = all_paths(cands, 8);
    int sequences = 0, failed = 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        if (!has_suffix(de->d_name, ".seq")) continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", REGRESSION_DIR, de->d_name);
        fuzz_sequence s;
        moe_error err;
        if (fuzz_sequence_load(path, &s, &err)) fail_msg("%s", err.msg);
        fuzz_replay_result rr;
        if (fuzz_sequence_replay(&s, &tg, SEQ_REPEAT, 0, &rr, &err)) fail_msg("%s: %s", path, err.msg);
        sequences++;
        if (rr.failed) {
            failed++;
            const fuzz_path_result *r = &rr.first.r[fuzz_first_failure(&rr.first)];
            print_error("%s: %d of %d replays failed; first at case %d on %s\n  %s\n", path, rr.failed,
                        rr.repeats, rr.first_failing_case + 1, r->path, r->rep.msg);
        }
        fuzz_sequence_free(&s);
    }
    closedir(dir);
    print_message("replayed %d sequence(s) %d times each\n", sequences, SEQ_REPEAT);
    if (!sequences) skip();
    assert_int_equal(failed, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_replay_all),
                                       cmocka_unit_test(test_replay_sequences)};
    return cmocka_run_group_tests_name("regressions", tests, NULL, NULL);
}
