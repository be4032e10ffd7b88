/*
 * compare.h: stage-by-stage comparison of two paths that claim the same precision contract.
 *
 * Rules (derivations in docs/tolerances.md; running a path is run_path.c, judging compare.c):
 *   - A path's results on one case are a moe_run: its output and the stages it filled.
 *   - A comparison has two runs: the *reference* (the trusted run, what the other is judged
 *     against: the reference backend, or a fresh instance in stress mode) and the *candidate*
 *     (the run being judged). Every command, report and message names them so.
 *   - Both runs are judged against the contract's *envelope*: for every element of every stage,
 *     the interval that any correct implementation of the contract (exact or serving,
 *     contract.md [precision]) must land in, whatever its accumulation order. The envelope is
 *     computed from the exact math (double) plus the roundings the contract allows, element by
 *     element and in proportion to the magnitudes of the terms that make up that element (sum
 *     |x||W| etc.), never to a norm of the output: tolerances are accumulation order only.
 *   - Ids compare exactly between the two runs. A token whose K-th and (K+1)-th selection
 *     scores are closer than the logits' envelope allows is a near-tie: if its ids differ, both
 *     selectors are fed the same logits (the backend's route entry); the token passes only if
 *     they then agree, and its later stages are then not compared for the run whose routing
 *     differs from the exact one.
 *   - Stages are judged in order logits, ids, weights, routed_h, routed_y, sink_h, sink_y,
 *     output; the report names the first one that diverges, its worst token / slot / expert /
 *     element, the two values, the allowed interval and the error against its tolerance.
 *   - Intermediates (routed_h, routed_y, sink_h, sink_y) are compared only for unsplit,
 *     unpadded runs (a rank's stages hold a slab); logits, ids, weights and output always.
 *   - Tokens whose input row holds NaN or inf must give an all-NaN output row, ids in [0, R)
 *     and NaN weights (contract.md [nonfinite]); their other stages are not compared.
 * Library code: returns moe_status, never exits.
 */
#ifndef INKLING_COMPARE_H
#define INKLING_COMPARE_H

#include "../common/moe.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* ---------------------------------------------------------------- one path's results */

typedef struct {
    char name[80];               /* e.g. "ref/serving/tp2", used in reports */
    const moe_backend *backend;  /* whose route entry judges near-ties */
    moe_options opt;             /* precision is the contract the run claims */
    moe_split_kind split_kind;
    int split_n;                 /* 1 for MOE_SPLIT_NONE */
    int pad_inter_to;
    int T, D, I, R, K, S;
    float *out;       /* [T, D] */
    float *logits;    /* [T, R+S] */
    int32_t *ids;     /* [T, K] */
    float *weights;   /* [T, K+S] */
    float *routed_h;  /* [T, K, I]  (unsplit, unpadded runs only) */
    float *routed_y;  /* [T, K, D] */
    float *sink_h;    /* [T, S, I] */
    float *sink_y;    /* [T, D] */
    unsigned filled;  /* MOE_STAGE_* bits the backend wrote */
} moe_run;

/* Runs one path on T tokens of x [T, D]: backend with opt (precision, threads), split kind and
 * n (NONE with n = 1: the unsplit layer through a single shard), pad_inter_to. Intermediates are
 * requested when want_intermediates and the run is unsplit and unpadded. The run owns its
 * arrays; free them with moe_run_free. A backend that is unavailable or does not support the
 * case returns MOE_ERR_UNAVAILABLE / MOE_ERR_UNSUPPORTED (the caller reports SKIPPED). */
moe_status moe_run_path(const moe_backend *backend, const moe_options *opt,
                        const moe_config *cfg, const moe_weights *w, moe_split_kind kind, int n,
                        int pad_inter_to, int T, const uint16_t *x, bool want_intermediates,
                        moe_run *run, moe_error *err);
/* The same on layers already made (layers[r]: rank r of that split, made with opt), which live
 * on after the call: a run on a backend instance with a history. */
moe_status moe_run_layers(const moe_backend *backend, const moe_options *opt,
                          const moe_config *cfg, moe_split_kind kind, int n, int pad_inter_to,
                          moe_layer *const *layers, int T, const uint16_t *x,
                          bool want_intermediates, moe_run *run, moe_error *err);
void moe_run_free(moe_run *run);

/* Keeps only tokens [n] (ascending, each < run->T) of every stage of run, in that order, and
 * sets run->T = n: a path run on all tokens, cut down to the tokens the reference checked. */
void moe_run_keep_tokens(moe_run *run, const int *tokens, int n);

/* ---------------------------------------------------------------- the contract envelope */

/* The case both runs computed: the full layer and its input. Borrowed pointers. */
typedef struct {
    const moe_config *cfg;
    const moe_weights *w;
    int T;
    const uint16_t *x; /* [T, D] bf16 */
} moe_cmp_case;

/* Per-element allowed intervals of every stage under one precision contract, with the output's
 * interval both for the unsplit layer and for one split (kind, n) summed as all_ranks.c does. */
typedef struct moe_envelope moe_envelope;

moe_status moe_envelope_build(const moe_cmp_case *cc, moe_precision precision,
                              moe_split_kind split_kind, int split_n, moe_envelope **env,
                              moe_error *err);
void moe_envelope_free(moe_envelope *env);

/* ---------------------------------------------------------------- comparison */

typedef enum {
    MOE_CMP_LOGITS = 0,
    MOE_CMP_IDS,
    MOE_CMP_WEIGHTS,
    MOE_CMP_ROUTED_H,
    MOE_CMP_ROUTED_Y,
    MOE_CMP_SINK_H,
    MOE_CMP_SINK_Y,
    MOE_CMP_OUTPUT,
    MOE_CMP_STAGE_COUNT
} moe_cmp_stage;

const char *moe_cmp_stage_name(moe_cmp_stage s);

/* "exact", "serving" or "engine": the contract's name in run names and reports. */
const char *moe_cmp_precision_name(moe_precision p);

typedef struct {
    bool ok;                  /* both runs inside the envelope, ids agree */
    int first_stage;          /* moe_cmp_stage of the first divergence, -1 if ok */
    char path[80];            /* the run that left the envelope (or whose ids are wrong) */
    int token, slot, expert, element; /* worst element of that stage (-1 where meaningless) */
    double value_reference;   /* the reference run's value there (NaN where it lacks the stage) */
    double value_candidate;   /* the candidate run's value there (NaN where it lacks the stage) */
    double centre, lo, hi;    /* the exact value and the allowed interval */
    double err, tol;          /* |value - centre| and the half-width of the allowed interval */
    int near_ties;            /* tokens whose ids differed on a near-tie and were judged alike */
    unsigned stages_compared; /* 1u << moe_cmp_stage for each stage compared */
    char msg[768];            /* one line: what diverged where, value against tolerance */
} moe_cmp_report;

/* Compares the reference run (the trusted one, usually the reference backend unsplit with
 * every stage) and the candidate run (the path being judged), same precision, same case, stage
 * by stage against the envelope(s). Either may be NULL, not both: the other run is then judged
 * alone against the contract. env_reference / env_candidate may be NULL (built here) or
 * envelopes already built for the case, the runs' precision and (for the output) that run's
 * split. Returns MOE_OK when the comparison itself ran; the verdict is rep->ok. */
moe_status moe_compare_runs(const moe_cmp_case *cc, const moe_run *reference, const moe_run *candidate,
                            const moe_envelope *env_reference, const moe_envelope *env_candidate,
                            moe_cmp_report *rep, moe_error *err);

/* Convenience for unit tests of a path: runs backend (opt, split kind/n/pad) as the candidate
 * and the reference (same precision, unsplit, with intermediates) on the case and compares
 * them. */
moe_status moe_check_against_ref(const moe_backend *backend, const moe_options *opt,
                                 const moe_cmp_case *cc, moe_split_kind kind, int n,
                                 int pad_inter_to, moe_cmp_report *rep, moe_error *err);

/* Writes the report as a few indented lines (the msg line first). */
void moe_cmp_report_print(FILE *f, const moe_cmp_report *rep);
/* Writes "stages compared: logits ids ..." (the stages the comparison judged) and a newline. */
void moe_cmp_stages_print(FILE *f, const moe_cmp_report *rep);

#endif /* INKLING_COMPARE_H */
