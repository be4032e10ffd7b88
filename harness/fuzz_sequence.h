/*
 * fuzz_sequence.h: history as part of a case. A failure that a fresh instance does not repeat
 * is kept as the sequence of cases that ran before it, replayed in one process on live
 * instances, measured and shrunk (docs/harness.md, "Flaky failures and sequences").
 *
 * Rules:
 *   - two checks: "envelope" (the fuzzer's: every path against the reference and the contract,
 *     fuzz_run_case) and "history" (stress mode's: every path equal bit for bit to a fresh
 *     instance, fuzz_stress_case);
 *   - a failure is deterministic when every one of N reruns of the case alone, on fresh
 *     instances, fails on the same path; otherwise intermittent;
 *   - the sequence file: '#' lines are comments; the first other line is
 *     "sequence check=envelope|history path=PATH" (PATH: the path class whose failure it
 *     reproduces, "any" for every path); every further line is one case line, oldest first,
 *     the failing case last;
 *   - a replay runs the cases in order on ONE pool (one live instance per path and layer,
 *     reused across the cases), as many times as asked, each repetition on a new pool; a
 *     repetition fails when the sequence's path fails on any of its cases;
 *   - shrinking drops earlier cases (halves, then smaller chunks, then single cases; the last
 *     case always stays) while the replays still fail at least half as often as the whole
 *     sequence did, and at least once.
 */
#ifndef INKLING_FUZZ_SEQUENCE_H
#define INKLING_FUZZ_SEQUENCE_H

#include "fuzz.h"

typedef enum { FUZZ_CHECK_ENVELOPE = 0, FUZZ_CHECK_HISTORY = 1 } fuzz_check;

const char *fuzz_check_name(fuzz_check check);

/* Runs the check on c over tg (tg->pool: the live instances, or NULL for fresh ones). */
moe_status fuzz_check_case(fuzz_check check, const fuzz_case *c, const fuzz_targets *tg,
                           fuzz_case_result *res, moe_error *err);

/* Did path fail in res? (path "" or "any": did any path fail?) */
bool fuzz_result_failed(const fuzz_case_result *res, const char *path);

typedef struct {
    fuzz_check check;
    char path[48]; /* the path class the sequence reproduces; "any" */
    int n, cap;
    fuzz_case *cases; /* [n], oldest first */
} fuzz_sequence;

moe_status fuzz_sequence_add(fuzz_sequence *s, const fuzz_case *c, moe_error *err);
/* Keeps only the last n cases. */
void fuzz_sequence_keep_last(fuzz_sequence *s, int n);
void fuzz_sequence_free(fuzz_sequence *s);
/* Parses FILE (format above); a bad line fails naming the file and line number. */
moe_status fuzz_sequence_load(const char *file, fuzz_sequence *s, moe_error *err);
/* Writes FILE: the comment lines of notes (each line of notes prefixed "# "), then the sequence. */
moe_status fuzz_sequence_save(const char *file, const fuzz_sequence *s, const char *notes,
                              moe_error *err);

typedef struct {
    int repeats, failed;        /* repetitions run, of which failing */
    long passed, fails, skipped; /* path-case outcomes over all repetitions */
    int first_failing_case;     /* index of the first case that failed (-1: none) */
    fuzz_case_result first;     /* that case's results, from the first failing repetition */
} fuzz_replay_result;

/* Replays s `repeat` times (tg's own pool is ignored: each repetition makes its own). With
 * max_seconds > 0 it stops at that time, between cases, and counts only the repetitions that
 * completed (out->repeats may then be less than repeat, even 0). */
moe_status fuzz_sequence_replay(const fuzz_sequence *s, const fuzz_targets *tg, int repeat,
                                double max_seconds, fuzz_replay_result *out, moe_error *err);

/* Shrinks s in place (rules above) within max_seconds; base_failed: failing repetitions of
 * `repeat` for the whole sequence. Returns the replays it ran. */
int fuzz_sequence_shrink(fuzz_sequence *s, const fuzz_targets *tg, int repeat, int base_failed,
                         double max_seconds);

/* Reruns c alone on fresh instances `reruns` times; returns how many reruns failed on path. */
int fuzz_fresh_failures(fuzz_check check, const fuzz_case *c, const char *path,
                        const fuzz_targets *tg, int reruns);

#endif
