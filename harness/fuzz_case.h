/*
 * fuzz_case.h: one differential test case, its one-line text form, the suites that draw cases,
 * and the layer and input a case stands for.
 *
 * Rules:
 *   - a case is a configuration, a token count, a split, a seed and a set of features; it is
 *     printed as ONE line of key=value words that, parsed back, gives the same case, so the
 *     same weights and input bit for bit (everything is drawn from the counter RNG of numeric.h);
 *   - the line: D= I= R= K= S= T= fmt=mxfp4|bf16|nvfp4 bias=0|1 gscale=0|1 rs=<route_scale>
 *     split=none|tpN|epN pad=<pad_inter_to> seed=<u64> feat=<f1,f2,...|none> [sample=N] [input=N];
 *   - sample=N (0 < N < T): the candidate paths run all T tokens, the reference and the envelope
 *     only N of them, drawn from the seed and named in the report (tokens are independent, and
 *     at real-model sizes the reference takes seconds per token);
 *   - input=N (N > 0) draws the input x (and the input-only features) from a variant of the seed:
 *     the same layer (weights) with another input, so that one live layer can see many inputs;
 *     input=0 (the default, not printed) draws x from the seed itself;
 *   - features change the random layer and input in the documented ways (fuzz_case.c);
 *   - a suite (harness/suites/NAME.txt) bounds the random draws and may list fixed cases;
 *     a share of its drawn cases (aim_p) is aimed at the paths' declared shape hints.
 */
#ifndef INKLING_FUZZ_CASE_H
#define INKLING_FUZZ_CASE_H

#include "../common/layer_data.h"
#include "../common/numeric.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    FZ_TIES = 1u << 0,      /* exact ties at the K boundary: gate rows from two prototypes */
    FZ_DUP = 1u << 1,       /* duplicate gate rows (with equal bias) */
    FZ_NEAR = 1u << 2,      /* near-ties: rows that differ in one bf16 ulp of one element */
    FZ_E8M0 = 1u << 3,      /* extreme E8M0 bytes: 0, 1, 2 and large ones */
    FZ_CODES = 1u << 4,     /* every E2M1 code in the first block of every row */
    FZ_NEGLOGIT = 1u << 5,  /* logits far below -100 */
    FZ_NONFINITE = 1u << 6, /* input rows holding NaN or +-inf */
    FZ_FEW = 1u << 7,       /* a bias that sends (nearly) every token to the same few experts */
    FZ_ALLHIT = 1u << 8,    /* inputs aimed so that every expert is hit */
    FZ_BIASTIE = 1u << 9,   /* two selection scores tied by the contract's two roundings, one
                               ulp apart after one rounding: the lowest index decides */
    FZ_E4M3 = 1u << 10,     /* NVFP4: E4M3 scale bytes +-0, subnormal, smallest normal, 448 */
    FZ_SCALE2 = 1u << 11,   /* NVFP4: scale2 extremes (0, 2^-126, fp32 subnormal, 2^+-40) */
    FZ_FILE = 1u << 12,     /* the candidates run on the layer after a checkpoint round trip
                               (written, then loaded: fuzz_file.h) */
    FZ_FEATURE_COUNT = 13
};

/* The features that change the input x (and the layer according to it): without them, a case's
 * layer is the same whatever its T and input, and fuzz_case_input gives the case's whole x. */
#define FZ_INPUT_FEATURES (FZ_NONFINITE | FZ_ALLHIT | FZ_NEGLOGIT | FZ_BIASTIE)

const char *fuzz_feature_name(int bit_index);

typedef struct {
    moe_config cfg;
    int T;
    moe_split_kind split;
    int n;   /* ranks (1 for none) */
    int pad; /* pad_inter_to (0 = none) */
    uint64_t seed;
    unsigned features;
    int sample; /* tokens the reference checks; 0 = all */
    int input;  /* input variant: 0 = x from the seed, N > 0 = x from variant N of the seed */
} fuzz_case;

/* Writes the case's line (no newline) into buf; returns buf. */
char *fuzz_case_format(const fuzz_case *c, char *buf, size_t len);
/* Parses a line; unknown keys, missing keys or invalid configurations fail naming the word. */
moe_status fuzz_case_parse(const char *line, fuzz_case *c, moe_error *err);
/* Checks the case as a whole (config, split, T). */
moe_status fuzz_case_validate(const fuzz_case *c, moe_error *err);

/* The tokens the reference checks: tokens [n] ascending, n = sample (or T when sampling is off).
 * tokens must hold T entries (it is also the scratch of the draw). Returns n. */
int fuzz_case_sampled_tokens(const fuzz_case *c, int *tokens);

/* About the most host memory, in bytes, that running c takes with `candidates` candidate paths
 * (each holds its own copy of the weights beside the generated layer), so that a case that
 * cannot fit is skipped, not killed. Calibrated on peak resident sizes measured with the blas
 * path and the reference (docs/harness.md, "Memory"), and above each of them. */
double fuzz_case_host_bytes(const fuzz_case *c, int candidates);

/* The case's layer and input: ld owned (free with moe_layer_data_free), *x malloc'ed [T, D]. */
moe_status fuzz_case_build(const fuzz_case *c, moe_layer_data *ld, uint16_t **x, moe_error *err);
/* The case's input before its features: *x malloc'ed [T, D] (the whole input when the case
 * has none of FZ_INPUT_FEATURES), without building the layer. */
moe_status fuzz_case_input(const fuzz_case *c, uint16_t **x, moe_error *err);

/* ---------------------------------------------------------------- suites */

#define FUZZ_SUITE_MAX_FIXED 32

typedef struct {
    char name[32];
    int D_lo, D_hi, I_lo, I_hi, R_lo, R_hi, K_hi, S_lo, S_hi, T_lo, T_hi;
    double big_T_p;   /* probability of a large-T case */
    int big_T_lo, big_T_hi;
    int big_T_dim_max; /* D and I of a large-T case are at most this */
    int split_n_hi;   /* largest rank count */
    double split_p;   /* probability of a split */
    double pad_p;     /* probability of per-rank intermediate padding, given a split */
    double feature_p; /* probability of each feature */
    double bf16_p;    /* probability of bf16 routed experts */
    double nvfp4_p;   /* probability that a block-format case is NVFP4 rather than MXFP4 */
    double aim_p;     /* probability that a drawn case is aimed at a path's shape hint */
    int n_fixed;
    fuzz_case fixed[FUZZ_SUITE_MAX_FIXED]; /* run first, in order */
} fuzz_suite;

/* Aims case c at one declared tiling or threshold constant of a registered path (fuzz_aim.c):
 * its shape lands on one tile, several, a partial last one or a cut-off. Returns false (c
 * unchanged) when the drawn constant allows no valid case. */
bool fuzz_case_aim(fuzz_case *c, moe_rng *rng);

/* The candidates' thread count (moe_options.n_threads) for the k-th case of a run: 1 for half
 * the cases (fast on small ones), 2 for 5 in 16, 2 x cores + 1 (more threads than cores) for
 * 1 in 16 and the backends' own default (0) for 1 in 16, so that results are checked under
 * every kind of thread pool; results must not depend on it. */
int fuzz_case_threads(long k);

/* Reads DIR/NAME.txt. */
moe_status fuzz_suite_load(const char *dir, const char *name, fuzz_suite *s, moe_error *err);
/* Case number i of a suite from a run seed: the fixed cases first, then random draws.
 * Deterministic in (suite, seed, i). */
fuzz_case fuzz_suite_case(const fuzz_suite *s, uint64_t seed, long i);

#endif
