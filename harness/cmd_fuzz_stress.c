/*
 * cmd_fuzz_stress.c: `inkling-moe fuzz --stress`, determinism across history
 * (docs/harness.md, "Stress mode").
 *
 * Rules:
 *   - ONE pool for the whole run: every path keeps one live instance per layer, which runs
 *     every case the plan sends to that layer, with T going up and down, other layers' cases
 *     and repeated cases in between (harness/fuzz_stress.h);
 *   - each case on each path is checked against a fresh instance's result, bit for bit;
 *   - the seed is printed first; a progress line every 5 seconds; a summary (cases, cases per
 *     second, instances made and reused, outcomes per path); the last line "N passed, N failed,
 *     N skipped" counts path-case outcomes; exit status 1 on any failure;
 *   - a failure is judged deterministic or intermittent (fuzz_flaky.h); an intermittent one is
 *     saved as a sequence of the cases before it.
 */
#include "cli_args.h"
#include "cmd_fuzz.h"
#include "fuzz_stress.h"
#include "fuzz_tally.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The weight bytes the stress pool may keep alive (a few layers per path at suite sizes). */
#define STRESS_POOL_BYTES ((size_t)256 << 20)
#define MAX_REPORTED 8

static void report_failure(const fuzz_history_opts *o, const fuzz_case *c, const fuzz_case_result *res,
                           long step, const fuzz_sequence *history, const fuzz_targets *tg) {
    const fuzz_path_result *r = &res->r[fuzz_first_failure(res)];
    char line[512], name[96], found_by[256];
    printf("\nFAILURE on %s (stress step %ld)\n  case: %s\n", r->path, step, fuzz_case_format(c, line, sizeof line));
    moe_cmp_report_print(stdout, &r->rep);
    snprintf(name, sizeof name, "stress-seed%" PRIu64 "-step%ld", o->seed, step);
    snprintf(found_by, sizeof found_by, "found by: inkling-moe fuzz --stress --seed %" PRIu64 " (step %ld) on %s",
             o->seed, step, r->path);
    fuzz_verdict v;
    fuzz_judge_failure(FUZZ_CHECK_HISTORY, c, r->path, r->rep.msg, history, tg, o, name, found_by, &v);
    printf("\n");
}

static void progress(double t, long cases, long failures, const fuzz_pool *pool, int max_T) {
    fuzz_pool_stats ps = fuzz_pool_stats_of(pool);
    printf("[%6.1f s] %ld cases (%.1f/s), %ld failure%s; instances made %ld, reused %ld; largest T %d\n",
           t, cases, t > 0 ? cases / t : 0.0, failures, failures == 1 ? "" : "s", ps.made, ps.reused, max_T);
    fflush(stdout);
}

int fuzz_cmd_stress(const fuzz_history_opts *o, const fuzz_suite *suites, int n_suites,
                    const fuzz_targets *tg_in) {
    moe_error err;
    fuzz_stress_plan plan;
    if (fuzz_stress_plan_init(&plan, suites, n_suites, o->seed, &err)) {
        cli_fail("fuzz", "%s", err.msg);
        return 2;
    }
    fuzz_targets tg = *tg_in;
    tg.pool = fuzz_pool_new(STRESS_POOL_BYTES);
    if (!tg.pool) {
        cli_fail("fuzz", "out of memory for the stress pool");
        return 2;
    }
    printf("fuzz stress seed: %" PRIu64 "   (repeat with: inkling-moe fuzz --stress --seed %" PRIu64 ")\n", o->seed, o->seed);
    printf("budget %.0f s, suites:", o->seconds);
    for (int i = 0; i < n_suites; i++) printf(" %s", suites[i].name);
    printf("; %d live layers, T up to %d; ", FUZZ_STRESS_LAYERS, FUZZ_STRESS_T_MAX);
    fuzz_print_paths(stdout, &tg);
    fflush(stdout);

    fuzz_tally tally = {0};
    fuzz_sequence history = {0};
    history.check = FUZZ_CHECK_HISTORY;
    long cases = 0, failures = 0, not_run = 0;
    int max_T = 0;
    const double t0 = fuzz_now();
    double next_progress = t0 + 5.0;
    fuzz_case_result res;
    for (long step = 0;; step++) {
        double now = fuzz_now();
        if (now - t0 >= o->seconds || (o->max_cases > 0 && cases >= o->max_cases)) break;
        fuzz_case c = fuzz_stress_next(&plan);
        tg.n_threads = step % 64 == 63 ? 0 : 1;
        if (fuzz_stress_case(&c, &tg, &res, &err)) {
            char line[512];
            cli_fail("fuzz", "stress case could not run (%s): %s", err.msg,
                    fuzz_case_format(&c, line, sizeof line));
            not_run++;
            continue;
        }
        cases++;
        if (res.not_run[0]) {
            char line[512];
            printf("[%6.1f s] skipped stress case %ld, which %s: %s\n", now - t0, step, res.not_run,
                   fuzz_case_format(&c, line, sizeof line));
        }
        max_T = c.T > max_T ? c.T : max_T;
        if (fuzz_tally_add(&tally, &res)) not_run++;
        if (fuzz_first_failure(&res) >= 0) {
            if (++failures <= MAX_REPORTED) report_failure(o, &c, &res, step, &history, &tg);
            else printf("FAILURE on %s (stress step %ld): further failures are counted, not judged\n",
                        res.r[fuzz_first_failure(&res)].path, step);
        }
        if (!fuzz_sequence_add(&history, &c, &err)) fuzz_sequence_keep_last(&history, o->history);
        now = fuzz_now();
        if (now >= next_progress) {
            progress(now - t0, cases, failures, tg.pool, max_T);
            next_progress = now + 5.0;
        }
    }
    const double elapsed = fuzz_now() - t0;
    fuzz_pool_stats ps = fuzz_pool_stats_of(tg.pool);
    printf("\nstress summary (seed %" PRIu64 "): %ld cases in %.1f s, %.1f cases/s, %ld failing case%s, "
           "%ld not run\n", o->seed, cases, elapsed, elapsed > 0 ? cases / elapsed : 0.0, failures,
           failures == 1 ? "" : "s", not_run);
    printf("  instances made %ld, reused %ld times, destroyed for memory %ld; largest T %d\n", ps.made,
           ps.reused, ps.evicted, max_T);
    fuzz_tally_print(stdout, &tally);
    printf("%ld passed, %ld failed, %ld skipped\n", tally.passed, tally.failed, tally.skipped);
    const int rc = tally.failed || failures || not_run ? 1 : 0;
    fuzz_tally_free(&tally);
    fuzz_sequence_free(&history);
    fuzz_pool_free(tg.pool);
    return rc;
}
