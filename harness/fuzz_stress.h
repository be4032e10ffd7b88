/*
 * fuzz_stress.h: determinism across history. A path must give the same bytes for a case
 * whatever its instance ran before (docs/harness.md, "Stress mode").
 *
 * Rules:
 *   - the history check of one case: for every path (the reference unless !ref_paths, each
 *     candidate; both contracts; unsplit and, for a split case, split) the case runs on the
 *     pool's live instance of its layer, after everything that instance ran before, and on a
 *     fresh instance; the output and every stage the path filled must be equal bit for bit.
 *     With no pool both runs are fresh: do two fresh instances agree?
 *   - a path that cannot run the case is SKIPPED with its reason; one that errors FAILS;
 *   - the stress plan keeps FUZZ_STRESS_LAYERS layers (suite draws, three in four from the
 *     first suite, so R, K, S, formats and splits differ between them) and sends each step to one of them with a new input and a T
 *     that goes up and down (0 and 1, the suite's small range, above it, up to
 *     FUZZ_STRESS_T_MAX), or repeats one of the last FUZZ_STRESS_RECENT cases; now and then a
 *     layer is replaced by a new draw. Deterministic in (suites, seed, step).
 */
#ifndef INKLING_FUZZ_STRESS_H
#define INKLING_FUZZ_STRESS_H

#include "fuzz.h"

/* The history check of c over tg (its pool: the live instances; NULL: two fresh ones). */
moe_status fuzz_stress_case(const fuzz_case *c, const fuzz_targets *tg, fuzz_case_result *res,
                            moe_error *err);

/* Compares two runs of one path bit for bit (every stage both filled, then the output): the
 * reference is a fresh instance's run, the candidate one that may have a history. True when
 * equal; otherwise rep names the first differing stage, token and element. */
bool fuzz_runs_identical(const moe_run *reference, const moe_run *candidate, moe_cmp_report *rep);

#define FUZZ_STRESS_LAYERS 4
#define FUZZ_STRESS_RECENT 16
#define FUZZ_STRESS_T_MAX 256

typedef struct {
    const fuzz_suite *suites;
    int n_suites;
    uint64_t seed;
    long step;
    long draws[8];                          /* suite draws so far, per suite */
    fuzz_case layer[FUZZ_STRESS_LAYERS];    /* the live layers' cases (T: as drawn) */
    int layer_suite[FUZZ_STRESS_LAYERS];
    int n_layers;
    fuzz_case recent[FUZZ_STRESS_RECENT];   /* ring of the last cases */
    long n_recent;
    int input;                              /* the last input variant handed out */
} fuzz_stress_plan;

/* n_suites must be at most 8 (fails otherwise). */
moe_status fuzz_stress_plan_init(fuzz_stress_plan *p, const fuzz_suite *suites, int n_suites,
                                 uint64_t seed, moe_error *err);
fuzz_case fuzz_stress_next(fuzz_stress_plan *p);

#endif
