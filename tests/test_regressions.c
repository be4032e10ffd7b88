/*
 * test_regressions.c: replays every saved fuzz case (the .txt files of fuzz/regressions, one case line per
 * non-comment line) over the reference in both contracts, its splits, and every other path
 * available on this machine. A path that cannot run here is skipped, never passed.
 *
 * Rules checked: no path fails on any saved case; every line parses.
 */
#include "test_support.h"

#include "harness/fuzz.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

#define REGRESSION_DIR "fuzz/regressions"

static void test_replay_all(void **state) {
    (void)state;
    DIR *dir = opendir(REGRESSION_DIR);
    if (!dir) skip();
    const moe_backend *cands[8];
    int nc = 0;
    for (int i = 0; i < moe_backend_count() && nc < 8; i++)
        if (moe_backend_at(i) != &moe_backend_ref) cands[nc++] = moe_backend_at(i);
    fuzz_targets tg = {cands, nc, true, 1, false, NULL};
    int cases = 0, failures = 0, skipped_paths = 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        size_t len = strlen(de->d_name);
        if (len < 4 || strcmp(de->d_name + len - 4, ".txt")) continue;
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

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_replay_all)};
    return cmocka_run_group_tests_name("regressions", tests, NULL, NULL);
}
