/*
 * test_lab_compare.c: `inkling-moe lab-compare` and harness/bench/ab.sh (harness/lab_compare.h).
 *
 * Rules checked: the rank-sum p equals a count over every ordering of small samples, and ties
 * never make it smaller; the table of two sides' CSVs, worked out by hand; every malformed
 * file refused with its name and line, leaving what was read before untouched; the command's
 * exit statuses; ab.sh's alternating rounds, its comparison and its skip, run on stand-in tools
 * that write the lab's CSV rows (no GPU needed). The tool is $INKLING_BUILD/bin/inkling-moe
 * (INKLING_BUILD default "build"); the tests that need it or the repository's scripts skip
 * where those are not there.
 */
#include "test_support.h"

#include "../harness/lab.h"
#include "../harness/lab_compare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char tool[512], dir[64], out_path[128], err_path[128];

static int setup(void **state) {
    (void)state;
    const char *b = getenv("INKLING_BUILD");
    snprintf(tool, sizeof tool, "%s/bin/inkling-moe", b && *b ? b : "build");
    snprintf(dir, sizeof dir, "/tmp/test_lab_compare_XXXXXX");
    if (!mkdtemp(dir)) return -1;
    snprintf(out_path, sizeof out_path, "%s/out.txt", dir);
    snprintf(err_path, sizeof err_path, "%s/err.txt", dir);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* dir/name holding the lab's header and then body; returns its path (static buffer a call). */
static const char *write_csv(const char *name, const char *body) {
    static char path[4][160];
    static int turn;
    char *p = path[turn++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fprintf(f, "%s\n%s", LAB_CSV_HEADER, body);
    fclose(f);
    return p;
}

/* A lab CSV row of the serving graph (the columns the comparison does not read are 1). */
static void row(char *buf, size_t cap, const char *variant, int T, double median) {
    const size_t len = strlen(buf);
    snprintf(buf + len, cap - len, "inkling-small,%s,%d,serving graph,1,1,%.1f,1,1,1,1,1,1\n", variant, T, median);
}

/* ---------------------------------------------------------------- the test */

static void test_rank_sum_separated(void **state) {
    (void)state;
    const double a3[] = {10, 11, 12}, b3[] = {20, 21, 22}, a4[] = {10, 11, 12, 13}, b4[] = {1, 2, 3, 4};
    assert_float_equal(lab_rank_sum_p(a3, 3, b3, 3), 2.0 / 20.0, 1e-12); /* C(6, 3) orderings */
    assert_float_equal(lab_rank_sum_p(a4, 4, b4, 4), 2.0 / 70.0, 1e-12);
    assert_float_equal(lab_rank_sum_p(b4, 4, a4, 4), 2.0 / 70.0, 1e-12);
    assert_float_equal(lab_rank_sum_p(a3, 1, b3, 1), 1.0, 0.0); /* one run a side shows nothing */
    assert_float_equal(lab_rank_sum_p(a4, 4, a4, 4), 1.0, 0.0);
    assert_float_equal(lab_rank_sum_p(a4, 0, b4, 4), 1.0, 0.0);
    assert_float_equal(lab_rank_sum_p(a4, LAB_COMPARE_MAX_RUNS + 1, b4, 4), 1.0, 0.0);
}

/* Every way of giving 3 of the values 1..7 to b: p from the counts of all 35 orderings. */
static void test_rank_sum_by_enumeration(void **state) {
    (void)state;
    int u_of[128], n = 0;
    for (int m = 0; m < 128; m++) {
        if (__builtin_popcount((unsigned)m) != 3) continue;
        int u = 0;
        for (int i = 0; i < 7; i++)
            for (int j = 0; j < 7; j++) u += (m >> j & 1) && !(m >> i & 1) && j > i;
        u_of[n++] = u;
    }
    assert_int_equal(n, 35);
    for (int m = 0, k = 0; m < 128; m++) {
        if (__builtin_popcount((unsigned)m) != 3) continue;
        double a[4], b[3];
        int na = 0, nb = 0;
        for (int i = 0; i < 7; i++) {
            if (m >> i & 1) b[nb++] = i + 1;
            else a[na++] = i + 1;
        }
        int low = 0, high = 0;
        for (int t = 0; t < 35; t++) low += u_of[t] <= u_of[k], high += u_of[t] >= u_of[k];
        const double want = fmin(1.0, 2.0 * fmin(low, high) / 35.0);
        assert_float_equal(lab_rank_sum_p(a, 4, b, 3), want, 1e-12);
        k++;
    }
    /* a tie at the edge counts half, and p is taken on its far side: never below the untied */
    const double a[] = {1, 2, 3, 4}, tied[] = {4, 5, 6, 7}, apart[] = {4.5, 5, 6, 7};
    const double p_tied = lab_rank_sum_p(a, 4, tied, 4), p_apart = lab_rank_sum_p(a, 4, apart, 4);
    assert_float_equal(p_apart, 2.0 / 70.0, 1e-12);
    assert_float_equal(p_tied, 4.0 / 70.0, 1e-12);
    assert_true(p_tied > LAB_COMPARE_ALPHA);
}

/* Two sides' files, the table worked out by hand: T = 1 slower and apart (every candidate run
 * above every baseline run, p = 2/70), T = 8 interleaved (U = 10 of 16: p = 48/70), T = 64 on the
 * candidate's side only; a GEMM1 row and a comment are passed over. */
static void test_table_by_hand(void **state) {
    (void)state;
    char base[2048] = "", cand[2048] = "";
    const double b1[] = {90, 91, 92, 93}, c1[] = {94, 95, 96, 97}, b8[] = {200, 202, 204, 206},
                 c8[] = {201, 203, 205, 207};
    for (int i = 0; i < 4; i++) {
        row(base, sizeof base, "cuda", 1, b1[i]), row(base, sizeof base, "cuda", 8, b8[i]);
        row(cand, sizeof cand, "cuda", 1, c1[i]), row(cand, sizeof cand, "cuda", 8, c8[i]);
    }
    strcat(base, "inkling-small,cuda,1,GEMM1,1,1,5.0,1,1,1,1,1,1\n# a comment\n\n");
    row(cand, sizeof cand, "cuda", 64, 600);
    lab_compare_set set;
    moe_error err;
    moe_error_clear(&err);
    assert_int_equal(lab_compare_init(&set, "serving graph", &err), MOE_OK);
    assert_int_equal(lab_compare_read(&set, LAB_BASELINE, write_csv("base.csv", base), &err), MOE_OK);
    assert_int_equal(lab_compare_read(&set, LAB_CANDIDATE, write_csv("cand.csv", cand), &err), MOE_OK);
    FILE *f = fopen(out_path, "w");
    assert_non_null(f);
    assert_int_equal(lab_compare_print(f, &set, 4.0), 1);   /* +4.4 % > 4 */
    assert_int_equal(lab_compare_print(f, &set, 5.0), 0);   /* +4.4 % <= 5 */
    assert_int_equal(lab_compare_print(f, &set, -1.0), 0);  /* no limit */
    fclose(f);
    lab_compare_free(&set);
    const char *head =
        "lab-compare: stage \"serving graph\", us: the median of a side's runs' medians [least, most] "
        "(runs); p: exact two-sided rank-sum test (~: p > 0.05, not a result)\n"
        "  shape          variant        T  baseline                        candidate                       difference    p\n"
        "  inkling-small  cuda           1  91.5 [90.0, 93.0] (4)           95.5 [94.0, 97.0] (4)           +4.4 %        0.029\n"
        "  inkling-small  cuda           8  203.0 [200.0, 206.0] (4)        204.0 [201.0, 207.0] (4)        +0.5 % ~      0.686\n"
        "  inkling-small  cuda          64  -                               600.0 [600.0, 600.0] (1)        -             -\n"
        "verdict: 0 faster, 1 slower (p <= 0.05), 1 not told apart, 1 on one side only\n";
    char want[4096];
    snprintf(want, sizeof want, "%s%s%s%s", head,
             "slower than allowed: inkling-small cuda T = 1: +4.4 % (p 0.029), more than 4.0 %\n", head, head);
    assert_string_equal(test_text_of(out_path), want);
}

/* Each malformed file: refused with its name and line, the rows read before left as they were. */
static void test_malformed_refused(void **state) {
    (void)state;
    char good[512] = "", many[4096] = "";
    static char keys[(LAB_COMPARE_MAX_ROWS + 1) * 64];
    for (int t = 1, len = 0; t <= LAB_COMPARE_MAX_ROWS + 1; t++) /* distinct T past the bound */
        len += snprintf(keys + len, sizeof keys - (size_t)len, "s,v,%d,serving graph,1,1,1.0,1,1,1,1,1,1\n", t);
    row(good, sizeof good, "cuda", 1, 90);
    for (int i = 0; i <= LAB_COMPARE_MAX_RUNS; i++) row(many, sizeof many, "cuda", 1, 90 + i);
    char long_line[5000];
    memset(long_line, 'x', sizeof long_line - 2);
    long_line[sizeof long_line - 2] = '\n', long_line[sizeof long_line - 1] = '\0';
    const struct {
        const char *body, *says;
        bool no_header;
    } bad[] = {
        {"inkling-small,cuda,1,serving graph,1,1,90\n", ":2: 7 fields, the lab writes 13", false},
        {"inkling-small,cuda,x,serving graph,1,1,90,1,1,1,1,1,1\n", ":2: field T: 'x'", false},
        {"inkling-small,cuda,0,serving graph,1,1,90,1,1,1,1,1,1\n", ":2: field T: '0'", false},
        {"inkling-small,cuda,1,serving graph,1,1,nan,1,1,1,1,1,1\n", ":2: field median_us: 'nan'", false},
        {"inkling-small,cuda,1,serving graph,1,1,-1,1,1,1,1,1,1\n", ":2: field median_us: '-1'", false},
        {"inkling-small,cuda,1,serving graph,1,1,9x,1,1,1,1,1,1\n", ":2: field median_us: '9x'", false},
        {",cuda,1,serving graph,1,1,90,1,1,1,1,1,1\n", ":2: field shape", false},
        {long_line, ":2: a line longer than", false},
        {many, ":17: more than 16 runs of inkling-small cuda T = 1", false}, /* good.csv held one */
        {"shape,variant\n", ":1: not a lab CSV", true},
        {"", ": empty", true},
        {keys, ":4097: more than 4096 (shape, variant, T)", false}, /* good.csv held one */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lab_compare_set set;
        moe_error err;
        moe_error_clear(&err);
        assert_int_equal(lab_compare_init(&set, "serving graph", &err), MOE_OK);
        assert_int_equal(lab_compare_read(&set, LAB_BASELINE, write_csv("good.csv", good), &err), MOE_OK);
        char path[160];
        snprintf(path, sizeof path, "%s/bad.csv", dir);
        if (bad[i].no_header) {
            FILE *f = fopen(path, "w");
            assert_non_null(f);
            fputs(bad[i].body, f);
            fclose(f);
        } else {
            write_csv("bad.csv", bad[i].body);
        }
        const moe_status st = lab_compare_read(&set, LAB_BASELINE, path, &err);
        if (st != MOE_ERR_FORMAT || !strstr(err.msg, path) || !strstr(err.msg, bad[i].says))
            fail_msg("case %zu: status %d, '%s' (wanted '%s')", i, (int)st, err.msg, bad[i].says);
        assert_int_equal(set.n, 1);
        assert_int_equal(set.rows[0].runs[LAB_BASELINE], 1);
        assert_float_equal(set.rows[0].median_us[LAB_BASELINE][0], 90.0, 0.0);
        lab_compare_free(&set);
    }
    lab_compare_set set;
    moe_error err;
    moe_error_clear(&err);
    assert_int_equal(lab_compare_init(&set, "serving graph", &err), MOE_OK);
    assert_int_equal(lab_compare_read(&set, LAB_BASELINE, "/nonexistent/lab.csv", &err), MOE_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/lab.csv: cannot open"));
    assert_int_equal(lab_compare_read(&set, 2, "/nonexistent/lab.csv", &err), MOE_ERR_ARG);
    char fifo[160];
    snprintf(fifo, sizeof fifo, "%s/fifo.csv", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(lab_compare_read(&set, LAB_BASELINE, fifo, &err), MOE_ERR_IO); /* not a wait */
    assert_non_null(strstr(err.msg, "not a regular file"));
    assert_int_equal(lab_compare_read(&set, LAB_BASELINE, dir, &err), MOE_ERR_IO);
    assert_non_null(strstr(err.msg, "not a regular file"));
    lab_compare_free(&set);
    assert_int_equal(lab_compare_init(&set, "", &err), MOE_ERR_ARG);
}

/* Runs a shell command line, stdout and stderr to files; its exit status. */
static int shell(const char *line) {
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "%s > '%s' 2> '%s'", line, out_path, err_path);
    const int status = system(cmd);
    if (status == -1 || !WIFEXITED(status)) fail_msg("cannot run: %s", cmd);
    return WEXITSTATUS(status);
}

/* One line on stderr holding says. */
static void assert_one_error_line(const char *says) {
    const char *e = test_text_of(err_path);
    if (!strstr(e, says) || strchr(e, '\n') != e + strlen(e) - 1) fail_msg("stderr '%s' (wanted one line with '%s')", e, says);
}

static void test_command_exit_status(void **state) {
    (void)state;
    if (access(tool, X_OK) != 0) skip();
    char base[1024] = "", cand[1024] = "", line[2048];
    for (int i = 0; i < 4; i++) row(base, sizeof base, "cuda", 1, 90 + i), row(cand, sizeof cand, "cuda", 1, 100 + i);
    char b_path[160], c_path[160];
    snprintf(b_path, sizeof b_path, "%s", write_csv("b.csv", base));
    snprintf(c_path, sizeof c_path, "%s", write_csv("c.csv", cand));
    snprintf(line, sizeof line, "'%s' lab-compare --baseline '%s' --candidate '%s'", tool, b_path, c_path);
    assert_int_equal(shell(line), 0);
    assert_non_null(strstr(test_text_of(out_path), "verdict: 0 faster, 1 slower"));
    snprintf(line, sizeof line, "'%s' lab-compare --baseline '%s,%s,%s,%s' --candidate '%s' --max-slowdown 5", tool,
             b_path, b_path, b_path, b_path, c_path);
    assert_int_equal(shell(line), 1); /* +10.9 %, apart */
    assert_non_null(strstr(test_text_of(out_path), "(16)"));
    assert_non_null(strstr(test_text_of(out_path), "  4.1e-04\n")); /* 2 / C(20, 4), below 0.001 */
    assert_non_null(strstr(test_text_of(out_path), "slower than allowed: inkling-small cuda T = 1"));
    snprintf(line, sizeof line, "'%s' lab-compare --baseline '%s'", tool, b_path);
    assert_int_equal(shell(line), 2);
    assert_one_error_line("--candidate");
    snprintf(line, sizeof line, "'%s' lab-compare --baseline '%s,' --candidate '%s'", tool, b_path, c_path);
    assert_int_equal(shell(line), 2);
    assert_one_error_line("argument --baseline: an empty file name");
    snprintf(line, sizeof line, "'%s' lab-compare --baseline '%s' --candidate '%s/none.csv'", tool, b_path, dir);
    assert_int_equal(shell(line), 2);
    assert_one_error_line("none.csv: cannot open");
    snprintf(line, sizeof line, "'%s' lab-compare --baseline '%s' --candidate '%s' --stage GEMM9", tool, b_path, c_path);
    assert_int_equal(shell(line), 2);
    assert_one_error_line("no row of stage \"GEMM9\"");
    snprintf(line, sizeof line, "'%s' lab-compare --baseline '%s' --candidate '%s' --max-slowdown -1", tool, b_path,
             c_path);
    assert_int_equal(shell(line), 2);
    assert_one_error_line("--max-slowdown");
}

/* A stand-in for inkling-moe: `lab ... --csv FILE` logs its name and appends a serving-graph row
 * of median base + the call's number; `lab` exits 77 when base is "skip". */
static void write_fake_tool(const char *name, const char *base) {
    char path[160];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "#!/bin/sh\n"
            "[ \"$1\" = lab ] || exit 2\n"
            "[ %s != skip ] || { echo 'lab: SKIPPED: no CUDA device'; exit 77; }\n"
            "csv=; while [ $# -gt 0 ]; do [ \"$1\" = --csv ] && csv=$2; shift; done\n"
            "echo %s >> '%s/calls.log'\n"
            "n=$(wc -l < '%s/calls.log')\n"
            "[ -s \"$csv\" ] || echo '%s' > \"$csv\"\n"
            "echo \"inkling-small,cuda,1,serving graph,1,1,$((%s + n)).0,1,1,1,1,1,1\" >> \"$csv\"\n",
            base, name, dir, dir, LAB_CSV_HEADER, base);
    fclose(f);
    assert_int_equal(chmod(path, 0755), 0);
}

static void test_ab_alternates_and_compares(void **state) {
    (void)state;
    if (access(tool, X_OK) != 0 || access("harness/bench/ab.sh", R_OK) != 0) skip();
    write_fake_tool("base", "100");
    write_fake_tool("cand", "90");
    write_fake_tool("none", "skip");
    char line[2048];
    snprintf(line, sizeof line, "sh harness/bench/ab.sh -r 4 -o '%s/ab' -c '%s' '%s/base' '%s/cand' --tokens 1", dir,
             tool, dir, dir);
    if (shell(line) != 0) fail_msg("ab.sh: %s %s", test_text_of(out_path), test_text_of(err_path));
    char calls[160];
    snprintf(calls, sizeof calls, "%s/calls.log", dir);
    assert_string_equal(test_text_of(calls), "base\ncand\ncand\nbase\nbase\ncand\ncand\nbase\n");
    const char *text = test_text_of(out_path);
    assert_non_null(strstr(text, "ab: round 4/4: baseline done"));
    /* baseline 101, 104, 105, 108; candidate 92, 93, 96, 97 */
    assert_non_null(strstr(text, "104.5 [101.0, 108.0] (4)"));
    assert_non_null(strstr(text, "94.5 [92.0, 97.0] (4)"));
    assert_non_null(strstr(text, "verdict: 1 faster, 0 slower"));
    assert_int_equal(shell(line), 2); /* the same folder again: refused, nothing overwritten */
    assert_one_error_line("already holds a comparison's CSVs");
    snprintf(line, sizeof line, "sh harness/bench/ab.sh -o '%s/ab2' '%s/none' '%s/cand'", dir, dir, dir);
    assert_int_equal(shell(line), 77);
    assert_non_null(strstr(test_text_of(out_path), "ab: SKIPPED: the lab cannot run here: lab: SKIPPED: no CUDA device"));
    snprintf(line, sizeof line, "sh harness/bench/ab.sh -r 0 '%s/base' '%s/cand'", dir, dir);
    assert_int_equal(shell(line), 2);
    assert_one_error_line("-r: 1 to 16 rounds");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rank_sum_separated),   cmocka_unit_test(test_rank_sum_by_enumeration),
        cmocka_unit_test(test_table_by_hand),        cmocka_unit_test(test_malformed_refused),
        cmocka_unit_test(test_command_exit_status), cmocka_unit_test(test_ab_alternates_and_compares),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
