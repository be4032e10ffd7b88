/*
 * selection.c: the contract's expert selection, from contract.md [routing.select] (rules in
 * selection.h).
 *
 * Written apart from common/routing.c on purpose, and differently: sigma in long double (its
 * correctly rounded fp32 value either way, away from midpoints), and the top K kept as a
 * sorted list that each expert is inserted into, instead of K rescans.
 */
#include "selection.h"

#include <math.h>
#include <stddef.h>

float contract_sel_score(float logit, float bias) {
    const float sigma = (float)(1.0L / (1.0L + expl(-(long double)logit))); /* rounding 1 */
    return sigma + bias;                                                  /* rounding 2 */
}

/* Does (a, ia) rank before (b, ib)? Larger score first; equal scores: lower index first. */
static int ranks_before(float a, int ia, float b, int ib) { return a > b || (a == b && ia < ib); }

void contract_select(const float *logits, const float *bias, int R, int K, int32_t *ids,
                     float *scratch) {
    int n = 0; /* entries held in ids / scratch, sorted by rank */
    for (int e = 0; e < R; e++) {
        const float s = contract_sel_score(logits[e], bias ? bias[e] : 0.0f);
        if (n == K && !ranks_before(s, e, scratch[K - 1], ids[K - 1])) continue;
        int pos = n < K ? n++ : K - 1;
        for (; pos > 0 && ranks_before(s, e, scratch[pos - 1], ids[pos - 1]); pos--) {
            scratch[pos] = scratch[pos - 1];
            ids[pos] = ids[pos - 1];
        }
        scratch[pos] = s;
        ids[pos] = e;
    }
}
