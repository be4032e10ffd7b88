/*
 * fuzz_flaky.h: what the fuzzer does with a failing case: is it deterministic or intermittent,
 * and for an intermittent one, the sequence that produced it (docs/harness.md, "Flaky
 * failures and sequences").
 *
 * Rules:
 *   - the case is rerun alone on fresh instances `reruns` times: failing every time it is
 *     deterministic (shrink the case, save it as a single regression), else intermittent;
 *   - an intermittent failure is saved as a sequence file NAME.seq (the `history` cases that ran
 *     before it in this process, oldest first, then the failing case), replayed `repeat` times
 *     to measure its rate, shrunk while it keeps failing at a similar rate, and saved again;
 *   - measuring and shrinking are bounded in time (FUZZ_FLAKY_MEASURE_S, FUZZ_FLAKY_SHRINK_S);
 *     a sequence that did not fail again in its replays is kept whole, and the report says so.
 */
#ifndef INKLING_FUZZ_FLAKY_H
#define INKLING_FUZZ_FLAKY_H

#include "fuzz_sequence.h"

#define FUZZ_FLAKY_MEASURE_S 30.0
#define FUZZ_FLAKY_SHRINK_S 60.0

typedef struct {
    double seconds;          /* the run's budget */
    uint64_t seed;
    bool seed_given;
    long max_cases;          /* 0: no limit */
    const char *regress_dir; /* regressions (.txt) and sequences (.seq) are saved here */
    const char *report_dir;
    bool shrink;
    int reruns;              /* fresh reruns that classify a failure */
    int repeat;              /* replays of a sequence */
    int history;             /* cases kept before a failing one */
} fuzz_history_opts;

typedef struct {
    bool intermittent;
    int fresh_failed, reruns;  /* fresh reruns that failed, of reruns */
    int replay_failed, replays; /* for an intermittent failure: its sequence's replays */
    int cases_before, cases_after; /* the sequence's length, before and after shrinking */
    char saved[600];           /* the sequence file ("" if none) */
} fuzz_verdict;

/* Judges the failure of c on path (check: how it was found; history: the cases run before it,
 * oldest first; tg: the targets, pool ignored). name: the sequence file's base name; found_by:
 * a line for the file's notes; msg: the failure message. Prints what it does. */
void fuzz_judge_failure(fuzz_check check, const fuzz_case *c, const char *path, const char *msg,
                        const fuzz_sequence *history, const fuzz_targets *tg,
                        const fuzz_history_opts *o, const char *name, const char *found_by,
                        fuzz_verdict *v);

/* Creates dir and its parents. Returns 0 on success. */
int fuzz_mkdir_p(const char *dir);

#endif
