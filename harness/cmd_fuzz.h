/*
 * cmd_fuzz.h: the pieces of `inkling-moe fuzz`, one job a file:
 *   cmd_fuzz.c          the options (fuzz_args) and which mode runs;
 *   cmd_fuzz_targets.c  the paths a run judges, its suites, its report directory;
 *   cmd_fuzz_loop.c     the fuzz loop: which case runs next, progress, summary, reports;
 *   cmd_fuzz_failure.c  a failing case of the loop: judged, shrunk, saved as a regression case;
 *   cmd_fuzz_case.c     --case LINE: one case;
 *   cmd_fuzz_selftest.c --selftest: every mutant hunted;
 *   cmd_fuzz_stress.c   --stress;  cmd_fuzz_replay.c  --replay FILE;
 *   fuzz_report*.c      the JSON and JUnit reports (fuzz_report.h).
 * Each mode returns the exit status: 0 clean, 1 a failure, 2 bad usage (one line on stderr).
 */
#ifndef INKLING_CMD_FUZZ_H
#define INKLING_CMD_FUZZ_H

#include "fuzz_flaky.h"
#include "fuzz_report.h"

#define FUZZ_MAX_CANDIDATES 16 /* candidate paths one run may name (--paths) */

/* The options of `inkling-moe fuzz` (docs/harness.md). */
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
    double max_memory_gb;   /* --max-memory GB: skip cases estimated above it (0: the host's
                               available memory) */
} fuzz_args;

/* ---------------------------------------------------------------- cmd_fuzz_targets.c */

/* The paths a run judges against the reference: one mutant (alone, without the reference's own
 * paths), or the registry's backends, or those --paths names; cands [cap] holds them. Returns
 * non-zero (2) after saying why. */
int fuzz_choose_targets(const fuzz_args *a, const moe_backend **cands, int cap, fuzz_targets *tg);
/* The suites of --suite into suites [FUZZ_MAX_SUITES]; 2 (after saying why) when one cannot be
 * loaded or there are too many. */
int fuzz_load_suites(const fuzz_args *a, fuzz_suite *suites, int *n_suites);
/* The report directory exists and is writable; 2 after saying why. */
int fuzz_check_report_dir(const char *dir);
/* The options the history modes and the failure judge read. */
fuzz_history_opts fuzz_history_opts_of(const fuzz_args *a);

/* ---------------------------------------------------------------- the modes */

int fuzz_cmd_loop(const fuzz_args *a);     /* cmd_fuzz_loop.c: the fuzz loop */
int fuzz_cmd_case(const fuzz_args *a);     /* cmd_fuzz_case.c: --case LINE */
int fuzz_cmd_selftest(const fuzz_args *a); /* cmd_fuzz_selftest.c: --selftest */

/* `fuzz --stress`: live instances run the stress plan's cases; each is checked against a
 * fresh instance bit for bit. */
int fuzz_cmd_stress(const fuzz_history_opts *o, const fuzz_suite *suites, int n_suites,
                    const fuzz_targets *tg);

/* `fuzz --replay FILE --repeat N`: the sequence, N times, one pool per repetition; its failure
 * rate. */
int fuzz_cmd_replay(const char *file, const fuzz_history_opts *o, const fuzz_targets *tg);

/* Every path result of one case: PASS, FAIL (with the report) or SKIPPED (with the reason). */
void fuzz_print_result(const fuzz_case_result *res);

/* ---------------------------------------------------------------- cmd_fuzz_failure.c */

/* A failing case of the fuzz loop (res holds its results; history the cases run before it):
 * printed with its rerun line, judged deterministic (shrunk, saved as a regression case,
 * exported with --export-failures) or intermittent (its sequence saved), and recorded in tt
 * for the reports while tt has room. */
void fuzz_record_failure(const fuzz_args *a, fuzz_totals *tt, const fuzz_case *c, const fuzz_case_result *res,
                         const char *suite, long case_index, const fuzz_sequence *history,
                         const fuzz_targets *tg);

#endif
