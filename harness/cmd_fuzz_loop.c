/*
 * cmd_fuzz_loop.c: the fuzz loop of `inkling-moe fuzz` (declaration in cmd_fuzz.h; docs/harness.md,
 * "Running it").
 *
 * Rules:
 *   - the seed is printed first, so that a run can be repeated (--seed, FUZZ_SEED);
 *   - cases are drawn from the suites, the first suite (smoke) getting fifteen for each one of
 *     the others, until --seconds or --max-cases; the candidates' thread count varies by case
 *     (fuzz_case_threads: 1, 2, more than cores, the default);
 *   - a slow case (real-model sizes) is named as it starts; a progress line every 5 seconds;
 *   - a failing case goes to cmd_fuzz_failure.c; the cases before it are kept (--history) for
 *     an intermittent failure's sequence;
 *   - at the end a summary (cases per path and suite, failures, cases per second), the JSON
 *     and JUnit reports, and the last line "N passed, N failed, N skipped" over path-case
 *     outcomes; exit status 1 on any failure, 2 when a report cannot be written.
 */
#include "cli_args.h"
#include "cmd_fuzz.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* One run of the loop: what it draws from and what it has counted so far. */
typedef struct {
    const fuzz_args *a;
    const fuzz_suite *suites;
    int n_suites;
    fuzz_targets *tg;
    fuzz_totals *tt;
    fuzz_sequence history; /* the cases run before, for an intermittent failure's sequence */
    long index[FUZZ_MAX_SUITES]; /* next case of each suite */
    double t0, last_case_seconds;
} fuzz_loop;

static void print_start(const fuzz_loop *L) {
    const fuzz_args *a = L->a;
    printf("fuzz seed: %" PRIu64 "   (repeat with: make fuzz FUZZ_SEED=%" PRIu64 ")\n", a->seed, a->seed);
    printf("budget %.0f s, suites:", a->seconds);
    for (int i = 0; i < L->n_suites; i++) printf(" %s", L->suites[i].name);
    printf("; ");
    fuzz_print_paths(stdout, L->tg);
    fflush(stdout);
}

/* Case k of the run: drawn, run on every path, counted, and judged if it fails. */
static void run_step(fuzz_loop *L, long k, double now, fuzz_case_result *res) {
    const int ns = L->n_suites;
    /* the first suite (smoke) gets fifteen cases for each one of the others */
    const int si = ns == 1 ? 0 : (k % 16 < 15 ? 0 : 1 + (int)((k / 16) % (ns - 1)));
    fuzz_case c = fuzz_suite_case(&L->suites[si], L->a->seed, L->index[si]);
    L->tg->n_threads = fuzz_case_threads(k); /* 1, 2, more than cores, the default */
    const long case_index = L->index[si]++;
    char line[512];
    /* when cases are slow (real-model sizes take a minute), name each one as it starts */
    if (L->last_case_seconds > 5.0 || (double)c.cfg.D * c.cfg.I * c.cfg.R > 1e8) {
        printf("[%6.1f s] running %s case %ld: %s\n", now - L->t0, L->suites[si].name, case_index,
               fuzz_case_format(&c, line, sizeof line));
        fflush(stdout);
    }
    moe_error err;
    moe_error_clear(&err);
    if (fuzz_run_case(&c, L->tg, res, &err)) {
        cli_fail("fuzz", "case could not run (%s): %s", err.msg, fuzz_case_format(&c, line, sizeof line));
        L->tt->total_failures++;
        return;
    }
    L->last_case_seconds = fuzz_now() - now;
    if (res->not_run[0]) { /* every path skipped: say so where the run's progress is read */
        printf("[%6.1f s] skipped %s case %ld, which %s: %s\n", now - L->t0, L->suites[si].name,
               case_index, res->not_run, fuzz_case_format(&c, line, sizeof line));
        fflush(stdout);
    }
    L->tt->cases++;
    L->tt->suite_cases[si]++;
    if (fuzz_tally_add(&L->tt->tally, res)) L->tt->total_failures++;
    if (fuzz_first_failure(res) >= 0) {
        L->tt->total_failures++;
        fuzz_record_failure(L->a, L->tt, &c, res, L->suites[si].name, case_index, &L->history, L->tg);
        fflush(stdout);
    }
    if (!fuzz_sequence_add(&L->history, &c, &err)) fuzz_sequence_keep_last(&L->history, L->a->history);
}

/* The summary, the reports and the last line; returns the exit status. */
static int finish(const fuzz_loop *L) {
    const fuzz_args *a = L->a;
    const fuzz_totals *tt = L->tt;
    printf("\nsummary (seed %" PRIu64 "): %ld cases in %.1f s, %.1f cases/s, %ld failing case%s\n", a->seed,
           tt->cases, tt->elapsed, tt->elapsed > 0 ? tt->cases / tt->elapsed : 0.0, tt->total_failures,
           tt->total_failures == 1 ? "" : "s");
    fuzz_tally_print(stdout, &tt->tally);
    for (int i = 0; i < L->n_suites; i++) printf("  suite %-22s %8ld cases\n", L->suites[i].name, tt->suite_cases[i]);
    if (fuzz_check_report_dir(a->report_dir) || fuzz_write_json(a->report_dir, a->seed, tt, L->suites, L->n_suites) ||
        fuzz_write_junit(a->report_dir, a->seed, tt))
        return 2;
    printf("reports: %s/fuzz.json, %s/fuzz-junit.xml\n", a->report_dir, a->report_dir);
    printf("%ld passed, %ld failed, %ld skipped\n", tt->tally.passed, tt->tally.failed, tt->tally.skipped);
    return tt->tally.failed || tt->total_failures ? 1 : 0;
}

int fuzz_cmd_loop(const fuzz_args *a) {
    fuzz_suite suites[FUZZ_MAX_SUITES];
    int ns = 0;
    if (fuzz_load_suites(a, suites, &ns)) return 2;
    const moe_backend *cands[FUZZ_MAX_CANDIDATES];
    fuzz_targets tg;
    if (fuzz_choose_targets(a, cands, FUZZ_MAX_CANDIDATES, &tg)) return 2;
    if (fuzz_check_report_dir(a->report_dir)) return 2; /* after the usage checks: nothing created before */
    static fuzz_totals tt;
    memset(&tt, 0, sizeof tt);
    fuzz_loop L = {a, suites, ns, &tg, &tt, {0}, {0}, 0.0, 0.0};
    print_start(&L);
    L.t0 = fuzz_now();
    double next_progress = L.t0 + 5.0;
    fuzz_case_result res;
    for (long k = 0;; k++) {
        double now = fuzz_now();
        if (now - L.t0 >= a->seconds || (a->max_cases > 0 && tt.cases >= a->max_cases)) break;
        run_step(&L, k, now, &res);
        now = fuzz_now();
        if (now >= next_progress) {
            printf("[%6.1f s] %ld cases (%.1f/s), %ld failure%s\n", now - L.t0, tt.cases,
                   tt.cases / (now - L.t0), tt.total_failures, tt.total_failures == 1 ? "" : "s");
            fflush(stdout);
            next_progress = now + 5.0;
        }
    }
    tt.elapsed = fuzz_now() - L.t0;
    int rc = finish(&L);
    fuzz_tally_free(&tt.tally);
    fuzz_sequence_free(&L.history);
    return rc;
}
