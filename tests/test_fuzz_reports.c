/*
 * test_fuzz_reports.c: the reports `inkling-moe fuzz` writes for a nightly job.
 *
 * Rules checked: a run that fails (a planted bug) exits 1 and writes a JUnit report whose
 * counts agree with its elements (tests = testcases, failures = <failure> elements, no failing
 * path without a failing testcase) and a JSON report listing the failures; a clean run exits 0
 * with failures="0". Reports go to a temporary directory.
 */
#include "test_support.h"

#include "checkpoint_fixture.h"
#include "harness/commands.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char dir[512];

static int setup(void **state) {
    (void)state;
    return fixture_tempdir(dir, sizeof dir, "reports");
}

static int teardown(void **state) {
    (void)state;
    fixture_remove_tree(dir);
    return 0;
}

/* The whole file as a string (static buffer). */
static const char *slurp(const char *path) {
    static char text[1 << 20];
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    return text;
}

static long count(const char *text, const char *needle) {
    long n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* The integer after `attr="` at its first occurrence. */
static long attr(const char *text, const char *name) {
    char key[64];
    snprintf(key, sizeof key, " %s=\"", name);
    const char *p = strstr(text, key);
    if (!p) fail_msg("no attribute %s", name);
    return strtol(p + strlen(key), NULL, 10);
}

static int fuzz(const char *mutant, const char *sub) {
    char reports[600], regress[600];
    snprintf(reports, sizeof reports, "%s/%s", dir, sub);
    snprintf(regress, sizeof regress, "%s/%s/regressions", dir, sub);
    char *argv[16] = {"--seed", "7", "--max-cases", "12", "--seconds", "30", "--no-shrink",
                      "--report-dir", reports, "--regress-dir", regress};
    int argc = 11;
    if (mutant) argv[argc++] = "--mutant", argv[argc++] = (char *)mutant;
    /* the planted bug's failure blocks would read like real failures in the test log */
    fflush(stdout);
    int saved = dup(1), null_fd = open("/dev/null", O_WRONLY);
    if (saved < 0 || null_fd < 0) fail_msg("cannot redirect stdout");
    dup2(null_fd, 1);
    int rc = cmd_fuzz(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    close(null_fd);
    return rc;
}

static void test_failing_run_reports_every_failure(void **state) {
    (void)state;
    assert_int_equal(fuzz("gate_up_swap", "bad"), 1);
    char path[700];
    snprintf(path, sizeof path, "%s/bad/fuzz-junit.xml", dir);
    const char *xml = slurp(path);
    long failures = attr(xml, "failures"), tests = attr(xml, "tests");
    assert_true(failures > 0);
    assert_int_equal(count(xml, "<failure "), failures);
    assert_int_equal(count(xml, "<testcase "), tests);
    /* each testsuite: its failures attribute equals its <failure> elements */
    for (const char *ts = strstr(xml, "<testsuite "); ts; ts = strstr(ts + 1, "<testsuite ")) {
        const char *end = strstr(ts, "</testsuite>");
        assert_non_null(end);
        long in_suite = 0;
        for (const char *p = ts; (p = strstr(p, "<failure ")) && p < end; p++) in_suite++;
        assert_int_equal(attr(ts, "failures"), in_suite);
    }
    snprintf(path, sizeof path, "%s/bad/fuzz.json", dir);
    const char *json = slurp(path);
    assert_non_null(strstr(json, "\"failures\": [\n    {\"path\": \"mutant:gate_up_swap"));
}

static void test_clean_run_reports_no_failure(void **state) {
    (void)state;
    assert_int_equal(fuzz(NULL, "good"), 0);
    char path[700];
    snprintf(path, sizeof path, "%s/good/fuzz-junit.xml", dir);
    const char *xml = slurp(path);
    assert_int_equal(attr(xml, "failures"), 0);
    assert_int_equal(count(xml, "<failure "), 0);
    assert_true(attr(xml, "tests") > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failing_run_reports_every_failure),
        cmocka_unit_test(test_clean_run_reports_no_failure),
    };
    return cmocka_run_group_tests_name("fuzz_reports", tests, setup, teardown);
}
