/*
 * fuzz.h: one differential case over every path, and shrinking a failing case.
 *
 * Rules:
 *   - for each precision contract (exact, serving) the unsplit reference with all its stages
 *     is the reference run; it is judged against the contract envelope ("ref/<precision>"),
 *     then every candidate is run and compared with it stage by stage: the reference split as the
 *     case says ("ref/<precision>/split"), and each candidate backend unsplit and split
 *     ("<name>/<precision>", "<name>/<precision>/split");
 *   - a candidate that is unavailable or does not support the case is SKIPPED, never passed;
 *   - with sample=N the candidates run all T tokens and are cut down to the N sampled ones;
 *     the reference, its split and the envelope run on those N tokens only;
 *   - without the reference's own paths, a contract that no candidate can run is not computed
 *     (its candidate paths are reported SKIPPED with their reason);
 *   - with a pool, the candidates (and the reference's split) run on the pool's live layers, so
 *     on instances that ran the earlier cases of the same layer; the reference run is always fresh;
 *   - a case never holds more than FUZZ_MAX_PATHS path results: more fails the case loudly;
 *   - a failing case is shrunk greedily (fewer tokens, no features, simpler split, fewer
 *     experts, smaller D and I, plainer scales) while it still fails on the same path class.
 */
#ifndef INKLING_FUZZ_H
#define INKLING_FUZZ_H

#include "compare.h"
#include "fuzz_case.h"
#include "fuzz_pool.h"

typedef enum { FUZZ_PASS = 0, FUZZ_FAIL, FUZZ_SKIP } fuzz_outcome;

#define FUZZ_MAX_PATHS 32

typedef struct {
    char path[48];         /* path class, e.g. "blas/serving/split" */
    fuzz_outcome outcome;
    moe_cmp_report rep;    /* for FUZZ_FAIL */
    char skip_reason[160]; /* for FUZZ_SKIP */
} fuzz_path_result;

typedef struct {
    int n;
    fuzz_path_result r[FUZZ_MAX_PATHS];
    char sampled[256]; /* "tokens 3 17 ..." when the case samples tokens, else "" */
    char not_run[160]; /* why no path ran (the case does not fit the host's memory), else "" */
} fuzz_case_result;

typedef struct {
    const moe_backend *const *candidates; /* backends compared with the reference */
    int n_candidates;
    bool ref_paths; /* judge the reference itself and its split (false: candidates only) */
    int n_threads;  /* the candidates' moe_options.n_threads (0: the backend's default) */
    bool output_only; /* judge the candidates' output alone, as for a path that fills no stage */
    fuzz_pool *pool;  /* live layers reused across cases; NULL: a fresh layer for every run */
    bool engine;      /* judge by the engine contract only (paths "<name>/engine"), not exact and serving */
    double max_host_bytes; /* skip a case whose fuzz_case_host_bytes exceeds this; 0: the host's
                              available memory when the case starts (cases under 1 GB unchecked) */
} fuzz_targets;

/* Runs one path on T tokens of x into *run, as moe_run_path does (intermediates wanted): on the
 * pool's live layers for (cfg, w, split), or with pool NULL on layers made for this run alone. */
moe_status fuzz_run_on(fuzz_pool *pool, const moe_backend *be, const moe_options *opt,
                       const moe_config *cfg, const moe_weights *w, moe_split_kind kind, int n,
                       int pad, int T, const uint16_t *x, moe_run *run, moe_error *err);

/* A new result slot of res named path; NULL (after saying why in err) when res holds
 * FUZZ_MAX_PATHS results already. */
fuzz_path_result *fuzz_add_result(fuzz_case_result *res, const char *path, moe_error *err);

/* Records a run that did not give results (st != MOE_OK): SKIPPED with the reason when the path
 * is unavailable or does not support the case, else FAIL naming the error. Returns false (and
 * records nothing) when st is MOE_OK. */
bool fuzz_path_not_run(fuzz_path_result *r, moe_status st, const moe_run *run, const moe_error *run_err);

/* Path results one case of tg can produce (2 contracts x (ref, its split, 2 per candidate)). */
int fuzz_paths_per_case(const fuzz_targets *tg);

/* Runs one case. Returns an error only when the case itself cannot be built or run (bad line,
 * out of memory); path failures are outcomes. */
moe_status fuzz_run_case(const fuzz_case *c, const fuzz_targets *tg, fuzz_case_result *res,
                         moe_error *err);

/* Whether c, with `copies` copies of its weights held by the paths (fuzz_case_host_bytes),
 * would not fit the host's available memory or tg->max_host_bytes; why then says by how much. */
bool fuzz_case_too_big(const fuzz_case *c, const fuzz_targets *tg, int copies, char *why, size_t len);
/* Every path c would have produced, SKIPPED for why, and res->not_run = why. */
moe_status fuzz_skip_every_path(const fuzz_case *c, const fuzz_targets *tg, const char *why,
                                fuzz_case_result *res, moe_error *err);

/* Index of the first failing path in res, or -1. */
int fuzz_first_failure(const fuzz_case_result *res);

/* Shrinks c (which fails on path class `path`) into *out, trying at most max_tries candidate
 * cases. Returns the number of tries used. */
int fuzz_shrink(const fuzz_case *c, const char *path, const fuzz_targets *tg, int max_tries,
                fuzz_case *out);

/* Seconds on a monotonic clock. */
double fuzz_now(void);

/* Draws suite cases (from seed) against one backend (candidates only) until a case fails.
 * flags: FUZZ_HUNT_OUTPUT_ONLY judges the output alone; FUZZ_HUNT_ENGINE judges by the engine
 * contract only (true and false still mean output-only or not).
 * Cases the backend declines on every path are not counted. Returns the number of cases it
 * took, or -1 if none failed within max_cases counted cases or max_seconds; on success
 * *caught and *res describe the catching case. The time box ends a hunt only after
 * FUZZ_HUNT_MIN_CASES counted cases (or max_cases, if fewer): with a time box alone, the
 * verdict on a mutant that needs a few dozen cases depended on the machine's load. */
enum { FUZZ_HUNT_OUTPUT_ONLY = 1u, FUZZ_HUNT_ENGINE = 2u };
#define FUZZ_HUNT_MIN_CASES 64
long fuzz_hunt(const moe_backend *be, const fuzz_suite *s, uint64_t seed, long max_cases,
               double max_seconds, unsigned flags, fuzz_case *caught, fuzz_case_result *res);

#endif
