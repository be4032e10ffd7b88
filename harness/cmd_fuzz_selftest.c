/*
 * cmd_fuzz_selftest.c: `inkling-moe fuzz --selftest`, the proof of the harness's strength
 * (docs/harness.md, "Proof of strength: mutants").
 *
 * Rules:
 *   - every mutant (harness/mutants.c) is hunted with smoke cases, within an equal share of
 *     --seconds and at most --max-cases cases (default 1000), but never fewer than
 *     FUZZ_HUNT_MIN_CASES cases whatever the load (fuzz.h): once with every stage compared,
 *     once judging its output alone (a path that fills no stage is protected only by that);
 *   - a mutant that survives either hunt fails the selftest, and so does the control mutant
 *     (no bug) if it is ever caught;
 *   - the last line "N passed, N failed, 0 skipped" counts mutants; exit status 1 on a failure.
 */
#include "cli_args.h"
#include "cmd_fuzz.h"
#include "mutants.h"

#include <inttypes.h>
#include <stdio.h>

typedef struct {
    const fuzz_suite *smoke;
    uint64_t seed;
    long max_cases;
    double per_mutant; /* seconds */
    unsigned engine;   /* FUZZ_HUNT_ENGINE or 0 */
} hunt_plan;

/* Hunts mutant m twice; prints one line. Returns the hunts it survived (0, 1 or 2). */
static int hunt_mutant(const hunt_plan *h, const moe_backend *m) {
    fuzz_case caught;
    fuzz_case_result res;
    double t0 = fuzz_now();
    long took = fuzz_hunt(m, h->smoke, h->seed, h->max_cases, h->per_mutant, h->engine, &caught, &res);
    if (took < 0) {
        printf("  %-26s SURVIVED (%s)\n", m->name, m->description);
        return 1;
    }
    const fuzz_path_result *r = &res.r[fuzz_first_failure(&res)];
    printf("  %-26s caught after %3ld case%s (%.2f s) at stage %-8s on %-34s", m->name, took,
           took == 1 ? " " : "s", fuzz_now() - t0, moe_cmp_stage_name((moe_cmp_stage)r->rep.first_stage),
           r->path);
    /* again on the output alone: a path that fills no stage is protected by this */
    long took_out = fuzz_hunt(m, h->smoke, h->seed, h->max_cases, h->per_mutant,
                              FUZZ_HUNT_OUTPUT_ONLY | h->engine, &caught, &res);
    if (took_out < 0) {
        printf(" output alone: SURVIVED\n");
        return 1;
    }
    printf(" output alone: %3ld case%s\n", took_out, took_out == 1 ? "" : "s");
    return 0;
}

/* The control plants nothing: it must pass everything it runs. True when it was caught. */
static bool control_caught(const hunt_plan *h) {
    fuzz_case caught;
    fuzz_case_result res;
    long control = fuzz_hunt(moe_mutant_control(), h->smoke, h->seed, h->max_cases / 10 + 5, h->per_mutant,
                             h->engine, &caught, &res);
    if (control < 0) {
        printf("  %-26s never caught (as it must be)\n", moe_mutant_control()->name);
        return false;
    }
    char line[512];
    printf("  control (no bug) CAUGHT on: %s\n", fuzz_case_format(&caught, line, sizeof line));
    if (res.sampled[0]) printf("  reference checked %s\n", res.sampled);
    fuzz_print_result(&res);
    return true;
}

int fuzz_cmd_selftest(const fuzz_args *a) {
    fuzz_suite smoke;
    moe_error err;
    moe_error_clear(&err);
    if (fuzz_suite_load(a->suite_dir, "smoke", &smoke, &err)) return cli_fail("fuzz", "%s", err.msg);
    const int n = moe_mutant_count();
    const hunt_plan h = {&smoke, a->seed_given ? a->seed : 1, a->max_cases > 0 ? a->max_cases : 1000,
                         a->seconds / (n + 1), a->engine ? FUZZ_HUNT_ENGINE : 0u};
    printf("fuzz selftest: %d mutants, seed %" PRIu64 ", up to %ld cases or %.1f s each\n", n, h.seed,
           h.max_cases, h.per_mutant);
    if (a->engine) printf("judged by the engine contract only\n");
    int survivors = 0;
    for (int i = 0; i < n; i++) survivors += hunt_mutant(&h, moe_mutant_at(i)) > 0;
    const bool control = control_caught(&h);
    printf("%d passed, %d failed, 0 skipped\n", n - survivors + !control, survivors + control);
    return survivors == 0 && !control ? 0 : 1;
}
