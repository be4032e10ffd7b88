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
 *   - a failing case is rerun alone on fresh instances (--reruns N): deterministic when it fails
 *     every time, else intermittent; an intermittent failure is saved as the sequence of the
 *     --history cases before it (NAME.seq), replayed and shrunk (harness/fuzz_flaky.h);
 *   - --stress runs stress mode (cmd_fuzz_stress.c), --replay FILE a saved sequence
 *     (cmd_fuzz_replay.c);
 *   - limits fail loudly: more suites, candidates or paths per case than the harness holds is
 *     bad usage (exit 2), never a silently shorter run;
 *   - --selftest hunts every mutant (harness/mutants.c) with smoke cases and fails if one
 *     survives, or if the control mutant (no bug) is ever caught.
 */
#include "cli_args.h"
#include "cmd_fuzz.h"
#include "commands.h"
#include "fuzz.h"
#include "fuzz_tally.h"
#include "mutants.h"
#include "case_files.h"
#include "paths.h"

#include "../common/out_file.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_SUITES 4
#define MAX_FAILURES 8
#define MAX_CANDIDATES 16

typedef struct {
    char path[48];
    char suite[32];
    char line[512];
    char shrunk[512];
    char msg[768];
    char saved[600]; /* the regression case, or the sequence of an intermittent failure */
    char kind[16];   /* "deterministic" or "intermittent" */
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
    bool engine;       /* --precision engine: the engine contract only (docs/tolerances.md) */
    /* history (docs/harness.md, "Flaky failures and sequences", "Stress mode") */
    bool stress;        /* --stress */
    const char *replay; /* --replay FILE */
    int repeat;         /* --repeat N: replays of a sequence */
    int reruns;         /* --reruns N: fresh reruns that classify a failure */
    int history;        /* --history N: cases kept before a failing one */
    const char *export_dir; /* --export-failures: each shrunk failing case as files (case_files.h) */
} fuzz_args;

static void usage(FILE *f) {
    fprintf(f,
            "usage: inkling-moe fuzz [--seconds N] [--seed S] [--suite smoke,ci,nightly]\n"
            "                        [--report-dir DIR] [--regress-dir DIR] [--suite-dir DIR]\n"
            "                        [--max-cases N] [--no-shrink] [--mutant NAME]\n"
            "                        [--paths blas,cuda,mutant:NAME,plugin:FILE.so,exec:CMD|none] [--no-ref]\n"
            "                        [--export-failures DIR] [--precision both|engine]\n"
            "       inkling-moe fuzz --case 'LINE' [--mutant NAME] [--paths ...] [--no-ref]\n"
            "       inkling-moe fuzz --selftest [--seconds N] [--seed S] [--max-cases N]\n"
            "       inkling-moe fuzz --stress [--seconds N] [--seed S] [--suite ...] [--paths ...] [--no-ref]\n"
            "       inkling-moe fuzz --replay FILE.seq [--repeat N] [--paths ...] [--no-ref] [--no-shrink]\n"
            "  failures: [--reruns N] (fresh reruns, default 5) [--history N] (cases kept, default 32)\n");
}

static int check_report_dir(const char *dir);

/* ---------------------------------------------------------------- targets */

/* The candidates: the backends of the registry other than the reference, or the paths that
 * --paths names (paths.h: registry names, mutant:, plugin:, exec:, worker:). Returns -1 (after
 * saying so) if a named path cannot be opened. */
static int registry_candidates(const char *paths, const moe_backend **out, int cap) {
    int n = 0;
    if (paths && !strcmp(paths, "none")) return 0;
    char buf[1024];
    const char *names[16];
    int count = paths ? moe_path_list_split(paths, buf, sizeof buf, names, 16) : moe_backend_count();
    for (int i = 0; i < count; i++) {
        const moe_backend *be = paths ? NULL : moe_backend_at(i);
        if (be == &moe_backend_ref) continue;
        moe_error err;
        moe_error_clear(&err);
        if (paths) be = moe_path_open(names[i], &err);
        if (!be || be == &moe_backend_ref) {
            cli_fail("fuzz", "argument --paths: %s", be ? "'ref' is the reference, not a candidate path" : err.msg);
            return -1;
        }
        if (n == cap) {
            cli_fail("fuzz", "argument --paths: more than %d candidate paths; name fewer", cap);
            return -1;
        }
        out[n++] = be;
    }
    return n;
}

/* The paths a run compares with the reference: one mutant (alone, without the reference's own
 * paths), or the registry's backends that --paths names. Returns non-zero after saying why. */
static int choose_targets(const fuzz_args *a, const moe_backend **cands, int cap, fuzz_targets *tg) {
    fuzz_targets t = {cands, 0, !a->no_ref, 1, false, NULL, a->engine};
    if (a->mutant) {
        cands[0] = moe_mutant_find(a->mutant);
        if (!cands[0]) {
            cli_fail("fuzz", "argument --mutant: unknown mutant '%s'", a->mutant);
            return 2;
        }
        t.n_candidates = 1;
        t.ref_paths = false;
    } else {
        t.n_candidates = registry_candidates(a->paths, cands, cap);
        if (t.n_candidates < 0) return 2;
    }
    if (fuzz_paths_per_case(&t) > FUZZ_MAX_PATHS) {
        cli_fail("fuzz", "argument --paths: %d candidates give %d paths per case; a case holds %d "
                 "(FUZZ_MAX_PATHS): name fewer", t.n_candidates, fuzz_paths_per_case(&t), FUZZ_MAX_PATHS);
        return 2;
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
        cli_fail("fuzz", "%s", err.msg);
        return 2;
    }
    const moe_backend *cands[MAX_CANDIDATES];
    fuzz_targets tg;
    if (choose_targets(a, cands, MAX_CANDIDATES, &tg)) return 2;
    char line[512];
    printf("case: %s\n", fuzz_case_format(&c, line, sizeof line));
    fuzz_case_result res;
    if (fuzz_run_case(&c, &tg, &res, &err)) {
        cli_fail("fuzz", "%s", err.msg);
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
        cli_fail("fuzz", "%s", err.msg);
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
    const unsigned engine = a->engine ? FUZZ_HUNT_ENGINE : 0u;
    if (a->engine) printf("judged by the engine contract only\n");
    for (int i = 0; i < n; i++) {
        const moe_backend *m = moe_mutant_at(i);
        double t0 = fuzz_now();
        long took = fuzz_hunt(m, &smoke, seed, max_cases, per, engine, &caught, &res);
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
        long took_out = fuzz_hunt(m, &smoke, seed, max_cases, per, FUZZ_HUNT_OUTPUT_ONLY | engine, &caught, &res);
        if (took_out < 0) {
            survivors++;
            printf(" output alone: SURVIVED\n");
        } else {
            printf(" output alone: %3ld case%s\n", took_out, took_out == 1 ? "" : "s");
        }
    }
    /* the control plants nothing: it must pass everything it runs */
    long control = fuzz_hunt(moe_mutant_control(), &smoke, seed, max_cases / 10 + 5, per, engine, &caught, &res);
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
    fuzz_tally tally;
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
            fprintf(f, "\n%s failure; regression file: ", r->kind);
            xml_string(f, r->saved);
        }
        fprintf(f, "</failure>\n    ");
    }
    fprintf(f, "</testcase>\n");
}

/* A report is gathered in memory (open_memstream) and published whole through the
 * all-or-nothing writer (common/out_file.h). Returns 0, or 2 after one error line. */
static int publish(const char *path, FILE *f, char **buf, size_t *len) {
    moe_error err = {0};
    moe_out_file o;
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    moe_status st = bad ? moe_fail(&err, MOE_ERR_NOMEM, "file %s: out of memory", path)
                        : moe_out_open(path, &o, &err);
    if (!st) st = moe_out_write(&o, *buf, *len, &err);
    if (!st) st = moe_out_commit(&o, &err);
    free(*buf);
    return st ? cli_fail("fuzz", "%s", err.msg) : 0;
}

/* The JUnit report: a testsuite per path; in it one testcase for the passing cases, one for the
 * skipped ones, one per recorded failing case (its line, shrunk line and regression file), and
 * one for failing cases beyond the recorded ones, so that every failure shows as a failure. */
static int write_junit(const fuzz_args *a, const fuzz_totals *tt) {
    char path[1200], *buf = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/fuzz-junit.xml", a->report_dir);
    long tests = 0, fails = 0, skips = 0;
    int (*counts)[3] = calloc((size_t)tt->tally.n + 1, sizeof *counts); /* testcases, failures, skipped */
    FILE *f = counts ? open_memstream(&buf, &len) : NULL;
    if (!f) {
        free(counts);
        return cli_fail("fuzz", "file %s: out of memory", path);
    }
    for (int i = 0; i < tt->tally.n; i++) {
        const fuzz_path_tally *p = &tt->tally.p[i];
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
    for (int i = 0; i < tt->tally.n; i++) {
        const fuzz_path_tally *p = &tt->tally.p[i];
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
    free(counts);
    return publish(path, f, &buf, &len);
}

static int write_reports(const fuzz_args *a, const fuzz_totals *tt, fuzz_suite *suites, int ns) {
    if (check_report_dir(a->report_dir)) return 2;
    char path[1200], *buf = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/fuzz.json", a->report_dir);
    FILE *f = open_memstream(&buf, &len);
    if (!f) return cli_fail("fuzz", "file %s: out of memory", path);
    {
        fprintf(f, "{\n  \"seed\": %" PRIu64 ",\n  \"seconds\": %.3f,\n  \"cases\": %ld,\n", a->seed, tt->elapsed, tt->cases);
        fprintf(f, "  \"cases_per_second\": %.3f,\n  \"paths\": [\n", tt->elapsed > 0 ? tt->cases / tt->elapsed : 0.0);
        for (int i = 0; i < tt->tally.n; i++) {
            const fuzz_path_tally *p = &tt->tally.p[i];
            fprintf(f, "    {\"name\": ");
            json_string(f, p->name);
            fprintf(f, ", \"passed\": %ld, \"failed\": %ld, \"skipped\": %ld}%s\n", p->passed, p->failed,
                    p->skipped, i + 1 < tt->tally.n ? "," : "");
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
            fprintf(f, ", \"kind\": ");
            json_string(f, r->kind);
            fprintf(f, ", \"regression_file\": ");
            json_string(f, r->saved);
            fprintf(f, "}%s\n", i + 1 < tt->n_failures ? "," : "");
        }
        fprintf(f, "  ]\n}\n");
    }
    if (publish(path, f, &buf, &len)) return 2;
    return write_junit(a, tt);
}

/* ---------------------------------------------------------------- the fuzz loop */

static void save_regression(const fuzz_args *a, failure_record *fr, uint64_t seed, long index) {
    if (fuzz_mkdir_p(a->regress_dir)) {
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

/* The suites of --suite; 2 (after saying why) when one cannot be loaded or there are too many. */
static int load_suites(const fuzz_args *a, fuzz_suite *suites, int *ns) {
    moe_error err;
    char list[256];
    snprintf(list, sizeof list, "%s", a->suites);
    *ns = 0;
    for (char *save = NULL, *s = strtok_r(list, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
        if (*ns == MAX_SUITES) {
            cli_fail("fuzz", "argument --suite: more than %d suites", MAX_SUITES);
            return 2;
        }
        if (fuzz_suite_load(a->suite_dir, s, &suites[*ns], &err)) {
            cli_fail("fuzz", "%s", err.msg);
            return 2;
        }
        (*ns)++;
    }
    if (!*ns) {
        cli_fail("fuzz", "argument --suite: no suite given");
        return 2;
    }
    return 0;
}

static fuzz_history_opts history_opts(const fuzz_args *a) {
    fuzz_history_opts o = {a->seconds, a->seed, a->seed_given, a->max_cases, a->regress_dir,
                           a->report_dir, a->shrink, a->reruns, a->repeat, a->history};
    return o;
}

/* The shrunk case as files an engine can load, in the failing path's contract. */
static void export_failure(const fuzz_args *a, const fuzz_case *c, const char *path, long index) {
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/seed%" PRIu64 "-case%ld", a->export_dir, a->seed, index);
    moe_error err;
    moe_error_clear(&err);
    moe_precision p = strstr(path, "/exact") ? MOE_PRECISION_EXACT : MOE_PRECISION_SERVING;
    if (fuzz_mkdir_p(a->export_dir) || moe_export_case(c, p, dir, &err))
        printf("  could not export to %s: %s\n", dir, err.msg[0] ? err.msg : "cannot create the directory");
    else printf("  exported as files: %s (inkling-moe check judges an engine's output on it)\n", dir);
}

/* A failing case of the fuzz loop: printed, judged deterministic (shrunk, saved as a regression
 * case) or intermittent (its sequence saved), and recorded for the reports. */
static void record_failure(const fuzz_args *a, fuzz_totals *tt, const fuzz_case *c, const fuzz_case_result *res,
                           const char *suite, long case_index, const fuzz_sequence *history,
                           const fuzz_targets *tg) {
    const fuzz_path_result *r = &res->r[fuzz_first_failure(res)];
    char line[512];
    fuzz_case_format(c, line, sizeof line);
    printf("\nFAILURE on %s (suite %s, case %ld)\n  case: %s\n", r->path, suite, case_index, line);
    if (res->sampled[0]) printf("  reference checked %s\n", res->sampled);
    moe_cmp_report_print(stdout, &r->rep);
    printf("  rerun: %s fuzz --case '%s'%s%s%s%s%s\n", cli_program(), line, a->mutant ? " --mutant " : "",
           a->mutant ? a->mutant : "", a->paths ? " --paths '" : "", a->paths ? a->paths : "", a->paths ? "'" : "");
    if (tt->n_failures >= MAX_FAILURES) return;
    failure_record *fr = &tt->failures[tt->n_failures++];
    memset(fr, 0, sizeof *fr);
    snprintf(fr->path, sizeof fr->path, "%s", r->path);
    snprintf(fr->suite, sizeof fr->suite, "%.31s", suite);
    snprintf(fr->line, sizeof fr->line, "%s", line);
    snprintf(fr->msg, sizeof fr->msg, "%s", r->rep.msg);
    const fuzz_history_opts o = history_opts(a);
    char name[96], found_by[300];
    snprintf(name, sizeof name, "seed%" PRIu64 "-case%ld", a->seed, case_index);
    snprintf(found_by, sizeof found_by, "found by: inkling-moe fuzz --seed %" PRIu64 " (suite %.31s, case %ld) on %.47s",
             a->seed, suite, case_index, r->path);
    fuzz_verdict v;
    fuzz_judge_failure(FUZZ_CHECK_ENVELOPE, c, r->path, r->rep.msg, history, tg, &o, name, found_by, &v);
    snprintf(fr->kind, sizeof fr->kind, "%s", v.intermittent ? "intermittent" : "deterministic");
    if (v.intermittent) {
        snprintf(fr->shrunk, sizeof fr->shrunk, "(intermittent: the sequence file holds the cases)");
        snprintf(fr->saved, sizeof fr->saved, "%s", v.saved);
        printf("\n");
        return;
    }
    fuzz_case shrunk = *c;
    if (a->shrink) {
        double s0 = fuzz_now();
        int tries = fuzz_shrink(c, r->path, tg, 300, &shrunk);
        printf("  shrunk in %d tries (%.1f s)\n", tries, fuzz_now() - s0);
    }
    fuzz_case_format(&shrunk, fr->shrunk, sizeof fr->shrunk);
    printf("  shrunk case: %s\n", fr->shrunk);
    save_regression(a, fr, a->seed, case_index);
    printf("  saved as regression case: %s\n", fr->saved);
    if (a->export_dir) export_failure(a, &shrunk, r->path, case_index);
    printf("\n");
}

static int run_fuzz(const fuzz_args *a) {
    fuzz_suite suites[MAX_SUITES];
    int ns = 0;
    moe_error err;
    moe_error_clear(&err);
    if (load_suites(a, suites, &ns)) return 2;
    const moe_backend *cands[MAX_CANDIDATES];
    fuzz_targets tg;
    if (choose_targets(a, cands, MAX_CANDIDATES, &tg)) return 2;
    if (check_report_dir(a->report_dir)) return 2; /* after the usage checks: nothing created before */
    printf("fuzz seed: %" PRIu64 "   (repeat with: make fuzz FUZZ_SEED=%" PRIu64 ")\n", a->seed, a->seed);
    printf("budget %.0f s, suites:", a->seconds);
    for (int i = 0; i < ns; i++) printf(" %s", suites[i].name);
    printf("; ");
    fuzz_print_paths(stdout, &tg);
    fflush(stdout);

    static fuzz_totals tt;
    memset(&tt, 0, sizeof tt);
    long index[MAX_SUITES] = {0};
    const double t0 = fuzz_now();
    double next_progress = t0 + 5.0, last_case_seconds = 0.0;
    fuzz_case_result res;
    fuzz_sequence history = {0}; /* the cases run before, for an intermittent failure's sequence */
    for (long k = 0;; k++) {
        double now = fuzz_now();
        if (now - t0 >= a->seconds || (a->max_cases > 0 && tt.cases >= a->max_cases)) break;
        /* the first suite (smoke) gets fifteen cases for each one of the others */
        int si = ns == 1 ? 0 : (k % 16 < 15 ? 0 : 1 + (int)((k / 16) % (ns - 1)));
        fuzz_case c = fuzz_suite_case(&suites[si], a->seed, index[si]);
        tg.n_threads = fuzz_case_threads(k); /* 1, 2, more than cores, the default */
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
            cli_fail("fuzz", "case could not run (%s): %s", err.msg,
                    fuzz_case_format(&c, line, sizeof line));
            tt.total_failures++;
            continue;
        }
        last_case_seconds = fuzz_now() - case_start;
        tt.cases++;
        tt.suite_cases[si]++;
        if (fuzz_tally_add(&tt.tally, &res)) tt.total_failures++;
        if (fuzz_first_failure(&res) >= 0) {
            tt.total_failures++;
            record_failure(a, &tt, &c, &res, suites[si].name, case_index, &history, &tg);
            fflush(stdout);
        }
        if (!fuzz_sequence_add(&history, &c, &err)) fuzz_sequence_keep_last(&history, a->history);
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
    fuzz_tally_print(stdout, &tt.tally);
    const long P = tt.tally.passed, F = tt.tally.failed, S = tt.tally.skipped;
    for (int i = 0; i < ns; i++) printf("  suite %-22s %8ld cases\n", suites[i].name, tt.suite_cases[i]);
    if (write_reports(a, &tt, suites, ns)) return 2;
    printf("reports: %s/fuzz.json, %s/fuzz-junit.xml\n", a->report_dir, a->report_dir);
    printf("%ld passed, %ld failed, %ld skipped\n", P, F, S);
    fuzz_tally_free(&tt.tally);
    fuzz_sequence_free(&history);
    return F || tt.total_failures ? 1 : 0;
}

/* --stress and --replay FILE (cmd_fuzz_stress.c, cmd_fuzz_replay.c). */
static int run_history(const fuzz_args *a) {
    const moe_backend *cands[MAX_CANDIDATES];
    fuzz_targets tg;
    if (choose_targets(a, cands, MAX_CANDIDATES, &tg)) return 2;
    const fuzz_history_opts o = history_opts(a);
    if (a->replay) return fuzz_cmd_replay(a->replay, &o, &tg);
    fuzz_suite suites[MAX_SUITES];
    int ns = 0;
    if (load_suites(a, suites, &ns)) return 2;
    return fuzz_cmd_stress(&o, suites, ns, &tg);
}

/* The report directory exists and is writable before any case runs: a run that cannot
 * leave its reports fails at once instead of announcing files it never wrote. */
static int check_report_dir(const char *dir) {
    if (strlen(dir) > 1000) return cli_fail("fuzz", "argument --report-dir: longer than 1000 bytes");
    if (fuzz_mkdir_p(dir) || access(dir, W_OK | X_OK))
        return cli_fail("fuzz", "argument --report-dir: cannot create or write directory %s: %s", dir,
                        strerror(errno));
    return 0;
}

int cmd_fuzz(int argc, char **argv) {
    fuzz_args a = {60.0, 0, false, "build/fuzz-report", "harness/suites", "fuzz/regressions",
                   NULL, NULL, "smoke,ci", 0, true, false, NULL, false, false,
                   false, NULL, 10, 5, 32, NULL};
    bool no_shrink = false;
    int contracts = 0;
    cli_option opts[] = {
        {.name = "--seconds", .kind = CLI_REAL, .out = &a.seconds, .lo = 0.001, .hi = 31536000},
        {.name = "--seed", .kind = CLI_U64, .out = &a.seed},
        {.name = "--suite", .kind = CLI_STRING, .out = &a.suites, .nonempty = true},
        {.name = "--report-dir", .kind = CLI_STRING, .out = &a.report_dir, .nonempty = true},
        {.name = "--regress-dir", .kind = CLI_STRING, .out = &a.regress_dir, .nonempty = true},
        {.name = "--suite-dir", .kind = CLI_STRING, .out = &a.suite_dir, .nonempty = true},
        {.name = "--max-cases", .kind = CLI_LONG, .out = &a.max_cases, .lo = 0, .hi = 1e12},
        {.name = "--no-shrink", .kind = CLI_FLAG, .out = &no_shrink},
        {.name = "--mutant", .kind = CLI_STRING, .out = &a.mutant, .nonempty = true},
        {.name = "--paths", .kind = CLI_STRING, .out = &a.paths, .nonempty = true},
        {.name = "--no-ref", .kind = CLI_FLAG, .out = &a.no_ref},
        {.name = "--export-failures", .kind = CLI_STRING, .out = &a.export_dir, .nonempty = true},
        {.name = "--precision", .kind = CLI_CHOICE, .out = &contracts, .choices = "both,engine"},
        {.name = "--case", .kind = CLI_STRING, .out = &a.case_line, .nonempty = true,
         .excludes = "--selftest"},
        {.name = "--selftest", .kind = CLI_FLAG, .out = &a.selftest, .excludes = "--mutant"},
        {.name = "--stress", .kind = CLI_FLAG, .out = &a.stress, .excludes = "--replay"},
        {.name = "--replay", .kind = CLI_STRING, .out = &a.replay, .nonempty = true,
         .excludes = "--case"},
        {.name = "--repeat", .kind = CLI_INT, .out = &a.repeat, .lo = 1, .hi = 1000000},
        {.name = "--reruns", .kind = CLI_INT, .out = &a.reruns, .lo = 1, .hi = 1000000},
        {.name = "--history", .kind = CLI_INT, .out = &a.history, .lo = 1, .hi = 1000000},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    int rc = cli_parse("fuzz", opts, n_opts, argc, argv, usage);
    if (rc >= 0) return rc;
    a.shrink = !no_shrink;
    a.engine = contracts == 1;
    a.seed_given = cli_find(opts, n_opts, "--seed")->given;
    bool regress_given = cli_find(opts, n_opts, "--regress-dir")->given;
    if (!a.seed_given) a.seed = (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid();
    /* a mutant's failures are planted: keep them out of the real regression set */
    static char mutant_dir[1100];
    if (a.mutant && !regress_given) {
        snprintf(mutant_dir, sizeof mutant_dir, "%s/regressions", a.report_dir);
        a.regress_dir = mutant_dir;
    }
    if (a.replay || a.stress) return run_history(&a);
    if (a.case_line) return run_one(&a);
    if (a.selftest) return run_selftest(&a);
    return run_fuzz(&a);
}
