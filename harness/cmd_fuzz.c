/*
 * cmd_fuzz.c: `inkling-moe fuzz`, the differential fuzzer (docs/harness.md): its options, and
 * which mode runs. The modes and their parts live in the files cmd_fuzz.h lists.
 *
 * Rules:
 *   - every path this build knows is tried on every case: the reference in both contracts and
 *     its splits always, the other backends when available (else SKIPPED, never passed);
 *   - options are read by the one parser (cli_args.h); a seed not given is drawn from the time
 *     and the process id, and printed first by every mode that draws cases;
 *   - a mutant's failures are planted: with --mutant and no --regress-dir, its regression
 *     cases go under REPORT_DIR/regressions, never into the real regression set;
 *   - --stress and --replay FILE are the history modes, --case LINE one case, --selftest the
 *     mutant hunt; otherwise the fuzz loop.
 */
#include "cli_args.h"
#include "cmd_fuzz.h"
#include "commands.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: inkling-moe fuzz [--seconds N] [--seed S] [--suite smoke,ci,nightly]\n"
            "                        [--report-dir DIR] [--regress-dir DIR] [--suite-dir DIR]\n"
            "                        [--max-cases N] [--no-shrink] [--mutant NAME]\n"
            "                        [--paths blas,cuda,mutant:NAME,plugin:FILE.so,exec:CMD|none] [--no-ref]\n"
            "                        [--export-failures DIR] [--precision both|engine] [--max-memory GB]\n"
            "       inkling-moe fuzz --case 'LINE' [--mutant NAME] [--paths ...] [--no-ref]\n"
            "       inkling-moe fuzz --selftest [--seconds N] [--seed S] [--max-cases N]\n"
            "       inkling-moe fuzz --stress [--seconds N] [--seed S] [--suite ...] [--paths ...] [--no-ref]\n"
            "       inkling-moe fuzz --replay FILE.seq [--repeat N] [--paths ...] [--no-ref] [--no-shrink]\n"
            "  failures: [--reruns N] (fresh reruns, default 5) [--history N] (cases kept, default 32)\n"
            "  the candidates (--paths, --mutant) are judged against the reference run\n"
            "  a case estimated above --max-memory GB (default: the host's available memory) is skipped\n");
}

/* --stress and --replay FILE (cmd_fuzz_stress.c, cmd_fuzz_replay.c). */
static int run_history(const fuzz_args *a) {
    const moe_backend *cands[FUZZ_MAX_CANDIDATES];
    fuzz_targets tg;
    if (fuzz_choose_targets(a, cands, FUZZ_MAX_CANDIDATES, &tg)) return 2;
    const fuzz_history_opts o = fuzz_history_opts_of(a);
    if (a->replay) return fuzz_cmd_replay(a->replay, &o, &tg);
    fuzz_suite suites[FUZZ_MAX_SUITES];
    int ns = 0;
    if (fuzz_load_suites(a, suites, &ns)) return 2;
    return fuzz_cmd_stress(&o, suites, ns, &tg);
}

int cmd_fuzz(int argc, char **argv) {
    fuzz_args a = {60.0, 0, false, "build/fuzz-report", "harness/suites", "fuzz/regressions",
                   NULL, NULL, "smoke,ci", 0, true, false, NULL, false, false,
                   false, NULL, 10, 5, 32, NULL, 0.0};
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
        {.name = "--max-memory", .kind = CLI_REAL, .out = &a.max_memory_gb, .lo = 0.001, .hi = 1e6},
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
    if (a.case_line) return fuzz_cmd_case(&a);
    if (a.selftest) return fuzz_cmd_selftest(&a);
    return fuzz_cmd_loop(&a);
}
