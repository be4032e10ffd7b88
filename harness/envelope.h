/*
 * envelope.h: the layout of a contract envelope, shared by envelope.c (which builds it) and
 * compare.c (which judges runs against it). Not part of the public comparison API (compare.h).
 *
 * Rules: every stage element has a centre (the exact value, in double) and an allowed interval
 * [lo, hi] of values a correct path may store there (derivations in docs/tolerances.md).
 */
#ifndef INKLING_ENVELOPE_H
#define INKLING_ENVELOPE_H

#include "compare.h"

/* n elements: centre, lowest and highest allowed stored value. */
typedef struct {
    double *c, *lo, *hi;
} moe_band;

struct moe_envelope {
    moe_precision precision;
    moe_split_kind split_kind;
    int split_n;
    int T, D, I, R, K, S;
    unsigned char *nonfinite; /* [T] the input row holds NaN or inf */
    unsigned char *near_tie;  /* [T] the selection order or the K boundary is within tolerance */
    int32_t *ids;             /* [T, K] the exact routing (what the reference selects) */
    moe_band logits;          /* [T, R+S] */
    moe_band weights;         /* [T, K+S] */
    moe_band routed_h;        /* [T, K, I] */
    moe_band routed_y;        /* [T, K, D] */
    moe_band sink_h;          /* [T, S, I] */
    moe_band sink_y;          /* [T, D] */
    moe_band out_unsplit;     /* [T, D] */
    moe_band out_split;       /* [T, D] summed over split_n partials as all_ranks.c does */
};

#endif
