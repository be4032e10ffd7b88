/*
 * fuzz_flaky.c: deterministic or intermittent, and the sequence of an intermittent failure
 * (rules in fuzz_flaky.h).
 */
#include "fuzz_flaky.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int fuzz_mkdir_p(const char *dir) {
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

/* Saves seq under v->saved with the notes that say where it came from and what it did. */
static void save_sequence(const fuzz_sequence *seq, const char *found_by, const char *msg,
                          const fuzz_verdict *v, bool shrunk) {
    char notes[2048];
    int used = snprintf(notes, sizeof notes, "%s\n%s\nfresh reruns of the last case alone: %d of %d failed "
                        "(intermittent)\n", found_by, msg, v->fresh_failed, v->reruns);
    if (v->replays && used < (int)sizeof notes)
        used += snprintf(notes + used, sizeof notes - (size_t)used, "replays of the sequence: %d of %d failed\n",
                         v->replay_failed, v->replays);
    if (shrunk && used < (int)sizeof notes)
        snprintf(notes + used, sizeof notes - (size_t)used, "shrunk from %d to %d cases", v->cases_before, v->cases_after);
    moe_error err;
    if (fuzz_sequence_save(v->saved, seq, notes, &err)) printf("  %s\n", err.msg);
}

/* Replays, measures and shrinks the sequence of an intermittent failure; saves it. */
static void keep_sequence(fuzz_check check, const fuzz_case *c, const char *path, const char *msg,
                          const fuzz_sequence *history, const fuzz_targets *tg,
                          const fuzz_history_opts *o, const char *name, const char *found_by, fuzz_verdict *v) {
    fuzz_sequence seq;
    memset(&seq, 0, sizeof seq);
    seq.check = check;
    snprintf(seq.path, sizeof seq.path, "%s", path);
    moe_error err;
    moe_status st = MOE_OK;
    for (int i = 0; history && i < history->n && !st; i++) st = fuzz_sequence_add(&seq, &history->cases[i], &err);
    if (!st) st = fuzz_sequence_add(&seq, c, &err);
    if (st || fuzz_mkdir_p(o->regress_dir)) {
        printf("  sequence not saved: %s\n", st ? err.msg : "cannot create the regression directory");
        fuzz_sequence_free(&seq);
        return;
    }
    v->cases_before = v->cases_after = seq.n;
    snprintf(v->saved, sizeof v->saved, "%s/%s.seq", o->regress_dir, name);
    save_sequence(&seq, found_by, msg, v, false);
    fuzz_replay_result rr;
    double t0 = fuzz_now();
    if (fuzz_sequence_replay(&seq, tg, o->repeat, FUZZ_FLAKY_MEASURE_S, &rr, &err)) {
        printf("  sequence replay could not run: %s\n", err.msg);
    } else {
        v->replays = rr.repeats, v->replay_failed = rr.failed;
        printf("  sequence of %d cases: %d of %d replays failed on %s (%.1f s)\n", seq.n, rr.failed,
               rr.repeats, path, fuzz_now() - t0);
        if (rr.failed && o->shrink) {
            t0 = fuzz_now();
            int replays = fuzz_sequence_shrink(&seq, tg, rr.repeats, rr.failed, FUZZ_FLAKY_SHRINK_S);
            v->cases_after = seq.n;
            printf("  shrunk to %d cases in %d replays (%.1f s)\n", seq.n, replays, fuzz_now() - t0);
        } else if (!rr.repeats) {
            printf("  no replay of the sequence completed within %.0f s: kept whole, not measured\n",
                   FUZZ_FLAKY_MEASURE_S);
        } else if (!rr.failed) {
            printf("  the sequence did not fail again in %d replays: kept whole\n", rr.repeats);
        }
    }
    save_sequence(&seq, found_by, msg, v, v->cases_after != v->cases_before);
    printf("  sequence saved: %s (replay: inkling-moe fuzz --replay %s --repeat %d)\n", v->saved,
           v->saved, o->repeat);
    fuzz_sequence_free(&seq);
}

void fuzz_judge_failure(fuzz_check check, const fuzz_case *c, const char *path, const char *msg,
                        const fuzz_sequence *history, const fuzz_targets *tg,
                        const fuzz_history_opts *o, const char *name, const char *found_by,
                        fuzz_verdict *v) {
    memset(v, 0, sizeof *v);
    v->reruns = o->reruns;
    double t0 = fuzz_now();
    v->fresh_failed = fuzz_fresh_failures(check, c, path, tg, o->reruns);
    v->intermittent = v->fresh_failed < o->reruns;
    printf("  %s: %d of %d reruns of the case alone on fresh instances failed (%.1f s)\n",
           v->intermittent ? "INTERMITTENT" : "deterministic", v->fresh_failed, o->reruns, fuzz_now() - t0);
    fflush(stdout);
    if (v->intermittent) keep_sequence(check, c, path, msg, history, tg, o, name, found_by, v);
    fflush(stdout);
}
