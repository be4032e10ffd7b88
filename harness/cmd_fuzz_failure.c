/*
 * cmd_fuzz_failure.c: a failing case of the fuzz loop (declaration in cmd_fuzz.h; docs/harness.md,
 * "Reading a failure", "Shrinking, replaying, promoting", "Flaky failures and sequences").
 *
 * Rules:
 *   - the failure is printed first: the path, the case line, the comparison report and a rerun
 *     line that names this binary (argv[0]);
 *   - it is rerun alone on fresh instances (--reruns N): deterministic when it fails every time,
 *     else intermittent; an intermittent failure is saved as the sequence of the --history cases
 *     before it (NAME.seq, harness/fuzz_flaky.h);
 *   - a deterministic failure is shrunk (unless --no-shrink) and saved as a regression case (one
 *     line in REGRESS_DIR/seedS-caseI.txt, replayed by tests/test_regressions.c), and with
 *     --export-failures written as files an engine can load (case_files.h).
 */
#include "case_files.h"
#include "cli_args.h"
#include "cmd_fuzz.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The regression case file: what found it, the failure, the original line, the shrunk line. */
static void save_regression(const fuzz_args *a, fuzz_failure_record *fr, long index) {
    if (fuzz_mkdir_p(a->regress_dir)) {
        snprintf(fr->saved, sizeof fr->saved, "(could not create %s)", a->regress_dir);
        return;
    }
    snprintf(fr->saved, sizeof fr->saved, "%s/seed%" PRIu64 "-case%ld.txt", a->regress_dir, a->seed, index);
    FILE *f = fopen(fr->saved, "w");
    if (!f) return;
    fprintf(f, "# found by: inkling-moe fuzz --seed %" PRIu64 " (suite %s, case %ld) on %s\n", a->seed,
            fr->suite, index, fr->path);
    fprintf(f, "# %s\n# original: %s\n%s\n", fr->msg, fr->line, fr->shrunk);
    fclose(f);
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

/* The failure as printed: path, case, report, rerun line. */
static void print_failure(const fuzz_args *a, const fuzz_case_result *res, const fuzz_path_result *r,
                          const char *line, const char *suite, long case_index) {
    printf("\nFAILURE on %s (suite %s, case %ld)\n  case: %s\n", r->path, suite, case_index, line);
    if (res->sampled[0]) printf("  reference checked %s\n", res->sampled);
    moe_cmp_report_print(stdout, &r->rep);
    printf("  rerun: %s fuzz --case '%s'%s%s%s%s%s\n", cli_program(), line, a->mutant ? " --mutant " : "",
           a->mutant ? a->mutant : "", a->paths ? " --paths '" : "", a->paths ? a->paths : "", a->paths ? "'" : "");
}

/* Reruns the failure alone: intermittent (its sequence saved) or deterministic. */
static fuzz_verdict judge(const fuzz_args *a, const fuzz_case *c, const fuzz_path_result *r, const char *suite,
                          long case_index, const fuzz_sequence *history, const fuzz_targets *tg) {
    const fuzz_history_opts o = fuzz_history_opts_of(a);
    char name[96], found_by[300];
    snprintf(name, sizeof name, "seed%" PRIu64 "-case%ld", a->seed, case_index);
    snprintf(found_by, sizeof found_by, "found by: inkling-moe fuzz --seed %" PRIu64 " (suite %.31s, case %ld) on %.47s",
             a->seed, suite, case_index, r->path);
    fuzz_verdict v;
    fuzz_judge_failure(FUZZ_CHECK_ENVELOPE, c, r->path, r->rep.msg, history, tg, &o, name, found_by, &v);
    return v;
}

void fuzz_record_failure(const fuzz_args *a, fuzz_totals *tt, const fuzz_case *c, const fuzz_case_result *res,
                         const char *suite, long case_index, const fuzz_sequence *history,
                         const fuzz_targets *tg) {
    const fuzz_path_result *r = &res->r[fuzz_first_failure(res)];
    char line[512];
    fuzz_case_format(c, line, sizeof line);
    print_failure(a, res, r, line, suite, case_index);
    if (tt->n_failures >= FUZZ_MAX_FAILURES) return;
    fuzz_failure_record *fr = &tt->failures[tt->n_failures++];
    memset(fr, 0, sizeof *fr);
    snprintf(fr->path, sizeof fr->path, "%s", r->path);
    snprintf(fr->suite, sizeof fr->suite, "%.31s", suite);
    snprintf(fr->line, sizeof fr->line, "%s", line);
    snprintf(fr->msg, sizeof fr->msg, "%s", r->rep.msg);
    const fuzz_verdict v = judge(a, c, r, suite, case_index, history, tg);
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
    save_regression(a, fr, case_index);
    printf("  saved as regression case: %s\n", fr->saved);
    if (a->export_dir) export_failure(a, &shrunk, r->path, case_index);
    printf("\n");
}
