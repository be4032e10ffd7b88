/*
 * cmd_fuzz_replay.c: `inkling-moe fuzz --replay FILE [--repeat N]` (docs/harness.md,
 * "Flaky failures and sequences").
 *
 * Rules:
 *   - the sequence runs N times in this process, each repetition on one new pool (one live
 *     instance per path and layer, reused across the sequence's cases), with the check it was
 *     found with; the report gives the failure rate (failing repetitions of N) and the first
 *     failure seen;
 *   - a failing sequence is shrunk (unless --no-shrink) and the shrunk one written to
 *     REPORT_DIR/NAME-shrunk.seq;
 *   - the last line "N passed, N failed, N skipped" counts path-case outcomes over all
 *     repetitions; exit status 1 when any repetition failed, 2 for a bad file.
 */
#include "cli_args.h"
#include "cmd_fuzz.h"
#include "fuzz_tally.h"

#include <stdio.h>
#include <string.h>

static void shrink_and_save(fuzz_sequence *s, const fuzz_history_opts *o, const fuzz_targets *tg,
                            const char *file, const fuzz_replay_result *rr) {
    const int before = s->n;
    double t0 = fuzz_now();
    int replays = fuzz_sequence_shrink(s, tg, rr->repeats, rr->failed, FUZZ_FLAKY_SHRINK_S);
    printf("shrunk from %d to %d cases in %d replays (%.1f s)\n", before, s->n, replays, fuzz_now() - t0);
    const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
    char out[1200], notes[1400];
    snprintf(out, sizeof out, "%s/%.*s-shrunk.seq", o->report_dir,
             (int)(strstr(base, ".seq") ? (size_t)(strstr(base, ".seq") - base) : strlen(base)), base);
    snprintf(notes, sizeof notes, "shrunk from %s (%d cases; %d of %d replays failed) to %d cases",
             file, before, rr->failed, rr->repeats, s->n);
    moe_error err;
    if (fuzz_mkdir_p(o->report_dir) || fuzz_sequence_save(out, s, notes, &err))
        printf("could not write %s\n", out);
    else
        printf("shrunk sequence: %s\n", out);
}

int fuzz_cmd_replay(const char *file, const fuzz_history_opts *o, const fuzz_targets *tg) {
    fuzz_sequence s;
    moe_error err;
    if (fuzz_sequence_load(file, &s, &err)) {
        cli_fail("fuzz", "%s", err.msg);
        return 2;
    }
    printf("replay %s: %d cases, check %s, path %s, %d repetitions; ", file, s.n,
           fuzz_check_name(s.check), s.path, o->repeat);
    fuzz_print_paths(stdout, tg);
    fflush(stdout);
    fuzz_replay_result rr;
    double t0 = fuzz_now();
    if (fuzz_sequence_replay(&s, tg, o->repeat, 0, &rr, &err)) {
        cli_fail("fuzz", "replay could not run: %s", err.msg);
        fuzz_sequence_free(&s);
        return 2;
    }
    printf("failure rate: %d of %d repetitions failed on %s (%.1f s)\n", rr.failed, rr.repeats, s.path,
           fuzz_now() - t0);
    if (rr.first_failing_case >= 0) {
        char line[512];
        const fuzz_path_result *r = &rr.first.r[fuzz_first_failure(&rr.first)];
        for (int i = 0; i < rr.first.n; i++) /* the sequence's own path, when it names one */
            if (rr.first.r[i].outcome == FUZZ_FAIL && !strcmp(rr.first.r[i].path, s.path)) r = &rr.first.r[i];
        printf("first failure: case %d of the sequence on %s\n  case: %s\n", rr.first_failing_case + 1,
               r->path, fuzz_case_format(&s.cases[rr.first_failing_case], line, sizeof line));
        moe_cmp_report_print(stdout, &r->rep);
        if (o->shrink && s.n > 1) shrink_and_save(&s, o, tg, file, &rr);
    }
    printf("%ld passed, %ld failed, %ld skipped\n", rr.passed, rr.fails, rr.skipped);
    fuzz_sequence_free(&s);
    return rr.failed ? 1 : 0;
}
