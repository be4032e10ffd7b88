/*
 * cmd_fuzz.c: `inkling-moe fuzz`, the differential fuzzer (docs/harness.md).
 *
 * Rules:
 *   - every path this build knows is tried on every case: the reference in both contracts and
 *     its splits always, the other backends when available (else SKIPPED, never passed);
 *   - the seed is printed first, so that a run can be repeated (--seed, FUZZ_SEED);
 *   - a progress line every 5 seconds; a summary (cases per path and suite, failures, cases
 *     per second); a JUnit XML and a JSON report; the last line "N passed, N failed,
 *     N skipped" counts path-case outcomes; exit status 1 on any failure;
 *   - a failing case is printed as its line, shrunk, and saved as a regression case (one line
 *     in a file under the regression directory) that tests/test_regressions.c replays;
 *   - --selftest hunts every mutant (harness/mutants.c) with smoke cases and fails if one
 *     survives, or if the control mutant (no bug) is ever caught.
 */
#include "commands.h"
#include "fuzz.h"
#include "mutants.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_SUITES 4
#define MAX_PATH_CLASSES 64
#define MAX_FAILURES 8

typedef struct {
    char name[48];
    long passed, failed, skipped;
} path_tally;

typedef struct {
    char path[48];
    char suite[32];
    char line[512];
    char shrunk[512];
    char msg[768];
    char saved[600];
} failure_record;

typedef struct {
    double seconds;
    uint64_t seed;
    bool seed_given;
    const char *report_dir, *suite_dir, *regress_dir, *case_line, *mutant, *suites;
    long max_cases;
    bool shrink, selftest;
    const char *paths; /* candidate backends by name ("a,b"; "none"); NULL = every one */
    bool no_ref;       /* judge only the candidates, not the reference and its split */
} fuzz_args;

static void usage(FILE *f) {
    fprintf(f,
            "usage: inkling-moe fuzz [--seconds N] [--seed S] [--suite smoke,ci,nightly]\n"
            "                        [--report-dir DIR] [--regress-dir DIR] [--suite-dir DIR]\n"
            "                        [--max-cases N] [--no-shrink] [--mutant NAME]\n"
            "                        [--paths blas,cuda|none] [--no-ref]\n"
            "       inkling-moe fuzz --case 'LINE' [--mutant NAME] [--paths ...] [--no-ref]\n"
            "       inkling-moe fuzz --selftest [--seconds N] [--seed S] [--max-cases N]\n");
}

static int mkdir_p(const char *dir) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0777) && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(buf, 0777) && errno != EEXIST ? -1 : 0;
}

/* ---------------------------------------------------------------- targets */

/* Is name one of the comma-separated names of list? */
static bool listed(const char *list, const char *name) {
    size_t len = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == len && !strncmp(p, name, len)) return true;
        p += n + (end ? 1 : 0);
    }
    return false;
}

/* The backends of the registry other than the reference, all or those named in paths.
 * Returns -1 (after saying so) if paths names a backend this build does not know. */
static int registry_candidates(const char *paths, const moe_backend **out, int cap) {
    if (paths && strcmp(paths, "none")) {
        char list[256];
        snprintf(list, sizeof list, "%s", paths);
        for (char *save = NULL, *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save))
            if (!moe_backend_find(name) || moe_backend_find(name) == &moe_backend_ref) {
                fprintf(stderr, "inkling-moe fuzz: --paths: '%s' is not a candidate path of this build\n", name);
                return -1;
            }
    }
    int n = 0;
    for (int i = 0; i < moe_backend_count() && n < cap; i++) {
        const moe_backend *be = moe_backend_at(i);
        if (be != &moe_backend_ref && (!paths || listed(paths, be->name))) out[n++] = be;
    }
    return n;
}

/* The paths a run compares with the reference: one mutant (alone, without the reference's own
 * paths), or the registry's backends that --paths names. Returns non-zero after saying why. */
static int choose_targets(const fuzz_args *a, const moe_backend **cands, int cap, fuzz_targets *tg) {
    fuzz_targets t = {cands, 0, !a->no_ref, 1, false, NULL};
    if (a->mutant) {
        cands[0] = moe_mutant_find(a->mutant);
        if (!cands[0]) {
            fprintf(stderr, "inkling-moe fuzz: unknown mutant '%s'\n", a->mutant);
            return 2;
        }
        t.n_candidates = 1;
        t.ref_paths = false;
    } else {
        t.n_candidates = registry_candidates(a->paths, cands, cap);
        if (t.n_candidates < 0) return 2;
    }
    *tg = t;
    return 0;
}

static void print_result(const fuzz_case_result *res) {
    for (int i = 0; i < res->n; i++) {
        const fuzz_path_result *r = &res->r[i];
        printf("  %-28s %s\n", r->path,
               r->outcome == FUZZ_PASS ? "PASS" : r->outcome == FUZZ_FAIL ? "FAIL" : "SKIPPED");
        if (r->outcome == FUZZ_FAIL) moe_cmp_report_print(stdout, &r->rep);
        if (r->outcome == FUZZ_SKIP) printf("    %s\n", r->skip_reason);
    }
}

/* ---------------------------------------------------------------- one case */

static int run_one(const fuzz_args *a) {
    fuzz_case c;
    moe_error err;
    moe_error_clear(&err);
    if (fuzz_case_parse(a->case_line, &c, &err)) {
        fprintf(stderr, "inkling-moe fuzz: %s\n", err.msg);
        return 2;
    }
    const moe_backend *cands[8];
    fuzz_targets tg;
    if (choose_targets(a, cands, 8, &tg)) return 2;
    char line[512];
    printf("case: %s\n", fuzz_case_format(&c, line, sizeof line));
    fuzz_case_result res;
    if (fuzz_run_case(&c, &tg, &res, &err)) {
        fprintf(stderr, "inkling-moe fuzz: %s\n", err.msg);
        return 2;
    }
    if (res.sampled[0]) printf("reference checked %s\n", res.sampled);
    print_result(&res);
    long p = 0, f = 0, s = 0;
    for (int i = 0; i < res.n; i++) {
        p += res.r[i].outcome == FUZZ_PASS;
        f += res.r[i].outcome == FUZZ_FAIL;
        s += res.r[i].outcome == FUZZ_SKIP;
    }
    printf("%ld passed, %ld failed, %ld skipped\n", p, f, s);
    return f ? 1 : 0;
}

/* ---------------------------------------------------------------- selftest */

static int run_selftest(const fuzz_args *a) {
    fuzz_suite smoke;
    moe_error err;
    moe_error_clear(&err);
    if (fuzz_suite_load(a->suite_dir, "smoke", &smoke, &err)) {
        fprintf(stderr, "inkling-moe fuzz: %s\n", err.msg);
        return 2;
    }
    uint64_t seed = a->seed_given ? a->seed : 1;
    int n = moe_mutant_count();
    double per = a->seconds / (n + 1);
    long max_cases = a->max_cases > 0 ? a->max_cases : 1000;
    printf("fuzz selftest: %d mutants, seed %" PRIu64 ", up to %ld cases or %.1f s each\n", n, seed,
           max_cases, per);
    int survivors = 0;
    fuzz_case caught;
    fuzz_case_result res;
    for (int i = 0; i < n; i++) {
        const moe_backend *m = moe_mutant_at(i);
        double t0 = fuzz_now();
        long took = fuzz_hunt(m, &smoke, seed, max_cases, per, false, &caught, &res);
        if (took < 0) {
            survivors++;
            printf("  %-26s SURVIVED (%s)\n", m->name, m->description);
            continue;
        }
        const fuzz_path_result *r = &res.r[fuzz_first_failure(&res)];
        printf("  %-26s caught after %3ld case%s (%.2f s) at stage %-8s on %-34s", m->name, took,
               took == 1 ? " " : "s", fuzz_now() - t0,
               moe_cmp_stage_name((moe_cmp_stage)r->rep.first_stage), r->path);
        /* again on the output alone: a path that fills no stage is protected by this */
        long took_out = fuzz_hunt(m, &smoke, seed, max_cases, per, true, &caught, &res);
        if (took_out < 0) {
            survivors++;
            printf(" output alone: SURVIVED\n");
        } else {
            printf(" output alone: %3ld case%s\n", took_out, took_out == 1 ? "" : "s");
        }
    }
    /* the control plants nothing: it must pass everything it runs */
    long control = fuzz_hunt(moe_mutant_control(), &smoke, seed, max_cases / 10 + 5, per, false, &caught, &res);
    if (control >= 0) {
        char line[512];
        printf("  control (no bug) CAUGHT on: %s\n", fuzz_case_format(&caught, line, sizeof line));
        if (res.sampled[0]) printf("  reference checked %s\n", res.sampled);
        print_result(&res);
    } else {
        printf("  %-26s never caught (as it must be)\n", moe_mutant_control()->name);
    }
    bool ok = survivors == 0 && control < 0;
    printf("%d passed, %d failed, 0 skipped\n", n - survivors + (control < 0), survivors + (control >= 0));
    return ok ? 0 : 1;
}

/* ---------------------------------------------------------------- reports */

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

static void xml_string(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: if ((unsigned char)*s >= 0x20) fputc(*s, f); break;
        }
    }
}

typedef struct {
    path_tally paths[MAX_PATH_CLASSES];
    int n_paths;
    long suite_cases[MAX_SUITES];
    failure_record failures[MAX_FAILURES];
    int n_failures;
    long total_failures;
    long cases;
    double elapsed;
} fuzz_totals;

/* One <testcase>: name is "<path>: <what>"; kind 'p' passed, 's' skipped, 'f' failed. */
static void junit_case(FILE *f, const char *path, const char *what, char kind, const char *message,
                       const failure_record *r) {
    fprintf(f, "    <testcase classname=\"fuzz.");
    xml_string(f, path);
    fprintf(f, "\" name=\"");
    xml_string(f, what);
    fprintf(f, "\">");
    if (kind == 's') fprintf(f, "<skipped/>");
    if (kind == 'f') {
        fprintf(f, "\n      <failure message=\"");
        xml_string(f, message);
        fprintf(f, "\">");
        if (r) {
            fprintf(f, "case: ");
            xml_string(f, r->line);
            fprintf(f, "\nshrunk: ");
            xml_string(f, r->shrunk);
            fprintf(f, "\nregression file: ");
            xml_string(f, r->saved);
        }
        fprintf(f, "</failure>\n    ");
    }
    fprintf(f, "</testcase>\n");
}

/* The JUnit report: a testsuite per path; in it one testcase for the passing cases, one for the
 * skipped ones, one per recorded failing case (its line, shrunk line and regression file), and
 * one for failing cases beyond the recorded ones, so that every failure shows as a failure. */
static void write_junit(const fuzz_args *a, const fuzz_totals *tt) {
    char path[1200];
    snprintf(path, sizeof path, "%s/fuzz-junit.xml", a->report_dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "inkling-moe fuzz: cannot write %s\n", path);
        return;
    }
    long tests = 0, fails = 0, skips = 0;
    int counts[MAX_PATH_CLASSES][3]; /* testcases, failures, skipped per path */
    for (int i = 0; i < tt->n_paths; i++) {
        const path_tally *p = &tt->paths[i];
        int recorded = 0;
        for (int k = 0; k < tt->n_failures; k++) recorded += !strcmp(tt->failures[k].path, p->name);
        int fail_cases = recorded + (p->failed > recorded);
        counts[i][0] = (p->passed > 0) + (p->skipped > 0) + fail_cases;
        counts[i][1] = fail_cases;
        counts[i][2] = p->skipped > 0;
        tests += counts[i][0], fails += counts[i][1], skips += counts[i][2];
    }
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<testsuites name=\"inkling-moe fuzz (seed %" PRIu64 ")\" tests=\"%ld\" failures=\"%ld\" "
            "skipped=\"%ld\" time=\"%.3f\">\n", a->seed, tests, fails, skips, tt->elapsed);
    for (int i = 0; i < tt->n_paths; i++) {
        const path_tally *p = &tt->paths[i];
        char what[700];
        fprintf(f, "  <testsuite name=\"");
        xml_string(f, p->name);
        fprintf(f, "\" tests=\"%d\" failures=\"%d\" skipped=\"%d\">\n", counts[i][0], counts[i][1], counts[i][2]);
        if (p->passed) {
            snprintf(what, sizeof what, "%ld cases passed", p->passed);
            junit_case(f, p->name, what, 'p', NULL, NULL);
        }
        if (p->skipped) {
            snprintf(what, sizeof what, "%ld cases skipped (path unavailable or case unsupported)", p->skipped);
            junit_case(f, p->name, what, 's', NULL, NULL);
        }
        long recorded = 0;
        for (int k = 0; k < tt->n_failures; k++)
            if (!strcmp(tt->failures[k].path, p->name)) {
                recorded++;
                snprintf(what, sizeof what, "failing case %.600s", tt->failures[k].line);
                junit_case(f, p->name, what, 'f', tt->failures[k].msg, &tt->failures[k]);
            }
        if (p->failed > recorded) {
            snprintf(what, sizeof what, "%ld further failing cases", p->failed - recorded);
            junit_case(f, p->name, what, 'f',
                       "failing cases not recorded one by one (the first failing path of a case, up "
                       "to the first failures of the run, is): see the fuzzer's output", NULL);
        }
        fprintf(f, "  </testsuite>\n");
    }
    fprintf(f, "</testsuites>\n");
    fclose(f);
}

static void write_reports(const fuzz_args *a, const fuzz_totals *tt, fuzz_suite *suites, int ns) {
    if (mkdir_p(a->report_dir)) {
        fprintf(stderr, "inkling-moe fuzz: cannot create report directory %s\n", a->report_dir);
        return;
    }
    char path[1200];
    snprintf(path, sizeof path, "%s/fuzz.json", a->report_dir);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "{\n  \"seed\": %" PRIu64 ",\n  \"seconds\": %.3f,\n  \"cases\": %ld,\n", a->seed, tt->elapsed, tt->cases);
        fprintf(f, "  \"cases_per_second\": %.3f,\n  \"paths\": [\n", tt->elapsed > 0 ? tt->cases / tt->elapsed : 0.0);
        for (int i = 0; i < tt->n_paths; i++) {
            const path_tally *p = &tt->paths[i];
            fprintf(f, "    {\"name\": ");
            json_string(f, p->name);
            fprintf(f, ", \"passed\": %ld, \"failed\": %ld, \"skipped\": %ld}%s\n", p->passed, p->failed,
                    p->skipped, i + 1 < tt->n_paths ? "," : "");
        }
        fprintf(f, "  ],\n  \"suites\": [\n");
        for (int i = 0; i < ns; i++) {
            fprintf(f, "    {\"name\": ");
            json_string(f, suites[i].name);
            fprintf(f, ", \"cases\": %ld}%s\n", tt->suite_cases[i], i + 1 < ns ? "," : "");
        }
        fprintf(f, "  ],\n  \"failures\": [\n");
        for (int i = 0; i < tt->n_failures; i++) {
            const failure_record *r = &tt->failures[i];
            fprintf(f, "    {\"path\": ");
            json_string(f, r->path);
            fprintf(f, ", \"suite\": ");
            json_string(f, r->suite);
            fprintf(f, ", \"case\": ");
            json_string(f, r->line);
            fprintf(f, ", \"shrunk\": ");
            json_string(f, r->shrunk);
            fprintf(f, ", \"message\": ");
            json_string(f, r->msg);
            fprintf(f, ", \"regression_file\": ");
            json_string(f, r->saved);
            fprintf(f, "}%s\n", i + 1 < tt->n_failures ? "," : "");
        }
        fprintf(f, "  ]\n}\n");
        fclose(f);
    }
    write_junit(a, tt);
}

/* ---------------------------------------------------------------- the fuzz loop */

static path_tally *tally_of(fuzz_totals *tt, const char *name) {
    for (int i = 0; i < tt->n_paths; i++)
        if (!strcmp(tt->paths[i].name, name)) return &tt->paths[i];
    if (tt->n_paths >= MAX_PATH_CLASSES) return NULL;
    path_tally *p = &tt->paths[tt->n_paths++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    return p;
}

static void save_regression(const fuzz_args *a, failure_record *fr, uint64_t seed, long index) {
    if (mkdir_p(a->regress_dir)) {
        snprintf(fr->saved, sizeof fr->saved, "(could not create %s)", a->regress_dir);
        return;
    }
    snprintf(fr->saved, sizeof fr->saved, "%s/seed%" PRIu64 "-case%ld.txt", a->regress_dir, seed, index);
    FILE *f = fopen(fr->saved, "w");
    if (!f) return;
    fprintf(f, "# found by: inkling-moe fuzz --seed %" PRIu64 " (suite %s, case %ld) on %s\n", seed,
            fr->suite, index, fr->path);
    fprintf(f, "# %s\n# original: %s\n%s\n", fr->msg, fr->line, fr->shrunk);
    fclose(f);
}

static int run_fuzz(const fuzz_args *a) {
    fuzz_suite suites[MAX_SUITES];
    int ns = 0;
    moe_error err;
    moe_error_clear(&err);
    char list[256];
    snprintf(list, sizeof list, "%s", a->suites);
    for (char *save = NULL, *s = strtok_r(list, ",", &save); s && ns < MAX_SUITES; s = strtok_r(NULL, ",", &save)) {
        if (fuzz_suite_load(a->suite_dir, s, &suites[ns], &err)) {
            fprintf(stderr, "inkling-moe fuzz: %s\n", err.msg);
            return 2;
        }
        ns++;
    }
    if (!ns) {
        fprintf(stderr, "inkling-moe fuzz: no suite given\n");
        return 2;
    }
    const moe_backend *cands[8];
    fuzz_targets tg;
    if (choose_targets(a, cands, 8, &tg)) return 2;
    printf("fuzz seed: %" PRIu64 "   (repeat with: make fuzz FUZZ_SEED=%" PRIu64 ")\n", a->seed, a->seed);
    printf("budget %.0f s, suites:", a->seconds);
    for (int i = 0; i < ns; i++) printf(" %s", suites[i].name);
    printf("; paths:%s", tg.ref_paths ? " ref (exact, serving, splits)," : "");
    for (int i = 0; i < tg.n_candidates; i++) {
        char why[256] = "";
        bool av = cands[i]->available(why, sizeof why);
        printf(" %s%s%s%s", cands[i]->name, av ? "" : " (SKIPPED: ", av ? "" : why, av ? "" : ")");
    }
    printf("\n");
    fflush(stdout);

    static fuzz_totals tt;
    memset(&tt, 0, sizeof tt);
    long index[MAX_SUITES] = {0};
    const double t0 = fuzz_now();
    double next_progress = t0 + 5.0, last_case_seconds = 0.0;
    fuzz_case_result res;
    for (long k = 0;; k++) {
        double now = fuzz_now();
        if (now - t0 >= a->seconds || (a->max_cases > 0 && tt.cases >= a->max_cases)) break;
        /* the first suite (smoke) gets fifteen cases for each one of the others */
        int si = ns == 1 ? 0 : (k % 16 < 15 ? 0 : 1 + (int)((k / 16) % (ns - 1)));
        fuzz_case c = fuzz_suite_case(&suites[si], a->seed, index[si]);
        /* one thread (fast on small cases), and every 64th case the backends' own default, so
         * that results are also checked under their thread pools */
        tg.n_threads = k % 64 == 63 ? 0 : 1;
        long case_index = index[si]++;
        /* when cases are slow (real-model sizes take a minute), name each one as it starts */
        if (last_case_seconds > 5.0 || (double)c.cfg.D * c.cfg.I * c.cfg.R > 1e8) {
            char line[512];
            printf("[%6.1f s] running %s case %ld: %s\n", now - t0, suites[si].name, case_index,
                   fuzz_case_format(&c, line, sizeof line));
            fflush(stdout);
        }
        const double case_start = now;
        if (fuzz_run_case(&c, &tg, &res, &err)) {
            char line[512];
            fprintf(stderr, "inkling-moe fuzz: case could not run (%s): %s\n", err.msg,
                    fuzz_case_format(&c, line, sizeof line));
            tt.total_failures++;
            continue;
        }
        last_case_seconds = fuzz_now() - case_start;
        tt.cases++;
        tt.suite_cases[si]++;
        for (int i = 0; i < res.n; i++) {
            path_tally *p = tally_of(&tt, res.r[i].path);
            if (!p) continue;
            p->passed += res.r[i].outcome == FUZZ_PASS;
            p->failed += res.r[i].outcome == FUZZ_FAIL;
            p->skipped += res.r[i].outcome == FUZZ_SKIP;
        }
        int fi = fuzz_first_failure(&res);
        if (fi >= 0) {
            tt.total_failures++;
            const fuzz_path_result *r = &res.r[fi];
            char line[512];
            fuzz_case_format(&c, line, sizeof line);
            printf("\nFAILURE on %s (suite %s, case %ld)\n  case: %s\n", r->path, suites[si].name, case_index, line);
            if (res.sampled[0]) printf("  reference checked %s\n", res.sampled);
            moe_cmp_report_print(stdout, &r->rep);
            printf("  rerun: build/bin/inkling-moe fuzz --case '%s'%s%s\n", line,
                   a->mutant ? " --mutant " : "", a->mutant ? a->mutant : "");
            if (tt.n_failures < MAX_FAILURES) {
                failure_record *fr = &tt.failures[tt.n_failures++];
                memset(fr, 0, sizeof *fr);
                snprintf(fr->path, sizeof fr->path, "%s", r->path);
                snprintf(fr->suite, sizeof fr->suite, "%.31s", suites[si].name);
                snprintf(fr->line, sizeof fr->line, "%s", line);
                snprintf(fr->msg, sizeof fr->msg, "%s", r->rep.msg);
                fuzz_case shrunk = c;
                if (a->shrink) {
                    double s0 = fuzz_now();
                    int tries = fuzz_shrink(&c, r->path, &tg, 300, &shrunk);
                    printf("  shrunk in %d tries (%.1f s)\n", tries, fuzz_now() - s0);
                }
                fuzz_case_format(&shrunk, fr->shrunk, sizeof fr->shrunk);
                printf("  shrunk case: %s\n", fr->shrunk);
                save_regression(a, fr, a->seed, case_index);
                printf("  saved as regression case: %s\n\n", fr->saved);
            }
            fflush(stdout);
        }
        now = fuzz_now();
        if (now >= next_progress) {
            printf("[%6.1f s] %ld cases (%.1f/s), %ld failure%s\n", now - t0, tt.cases,
                   tt.cases / (now - t0), tt.total_failures, tt.total_failures == 1 ? "" : "s");
            fflush(stdout);
            next_progress = now + 5.0;
        }
    }
    tt.elapsed = fuzz_now() - t0;

    printf("\nsummary (seed %" PRIu64 "): %ld cases in %.1f s, %.1f cases/s, %ld failing case%s\n", a->seed,
           tt.cases, tt.elapsed, tt.elapsed > 0 ? tt.cases / tt.elapsed : 0.0, tt.total_failures,
           tt.total_failures == 1 ? "" : "s");
    printf("  %-28s %8s %8s %8s\n", "path", "passed", "failed", "skipped");
    long P = 0, F = 0, S = 0;
    for (int i = 0; i < tt.n_paths; i++) {
        const path_tally *p = &tt.paths[i];
        printf("  %-28s %8ld %8ld %8ld\n", p->name, p->passed, p->failed, p->skipped);
        P += p->passed, F += p->failed, S += p->skipped;
    }
    for (int i = 0; i < ns; i++) printf("  suite %-22s %8ld cases\n", suites[i].name, tt.suite_cases[i]);
    write_reports(a, &tt, suites, ns);
    printf("reports: %s/fuzz.json, %s/fuzz-junit.xml\n", a->report_dir, a->report_dir);
    printf("%ld passed, %ld failed, %ld skipped\n", P, F, S);
    return F || tt.total_failures ? 1 : 0;
}

int cmd_fuzz(int argc, char **argv) {
    fuzz_args a = {60.0, 0, false, "build/fuzz-report", "harness/suites", "fuzz/regressions",
                   NULL, NULL, "smoke,ci", 0, true, false, NULL, false};
    bool regress_given = false;
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = true;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(o, "--no-shrink")) a.shrink = false, takes = false;
        else if (!strcmp(o, "--selftest")) a.selftest = true, takes = false;
        else if (!strcmp(o, "--no-ref")) a.no_ref = true, takes = false;
        else if (!v) {
            fprintf(stderr, "inkling-moe fuzz: option %s needs a value\n", o);
            usage(stderr);
            return 2;
        } else if (!strcmp(o, "--seconds")) a.seconds = strtod(v, NULL);
        else if (!strcmp(o, "--seed")) a.seed = strtoull(v, NULL, 0), a.seed_given = true;
        else if (!strcmp(o, "--report-dir")) a.report_dir = v;
        else if (!strcmp(o, "--suite-dir")) a.suite_dir = v;
        else if (!strcmp(o, "--regress-dir")) a.regress_dir = v, regress_given = true;
        else if (!strcmp(o, "--case")) a.case_line = v;
        else if (!strcmp(o, "--mutant")) a.mutant = v;
        else if (!strcmp(o, "--suite")) a.suites = v;
        else if (!strcmp(o, "--paths")) a.paths = v;
        else if (!strcmp(o, "--max-cases")) a.max_cases = strtol(v, NULL, 10);
        else {
            fprintf(stderr, "inkling-moe fuzz: unknown option %s\n", o);
            usage(stderr);
            return 2;
        }
        if (takes) i++;
    }
    if (!a.seed_given) a.seed = (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid();
    /* a mutant's failures are planted: keep them out of the real regression set */
    static char mutant_dir[1100];
    if (a.mutant && !regress_given) {
        snprintf(mutant_dir, sizeof mutant_dir, "%s/regressions", a.report_dir);
        a.regress_dir = mutant_dir;
    }
    if (a.case_line) return run_one(&a);
    if (a.selftest) return run_selftest(&a);
    return run_fuzz(&a);
}
