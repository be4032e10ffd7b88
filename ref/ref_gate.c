/*
 * ref_gate.c: gate logits (contract.md [math.gate]).
 * l[e] = sum_d x[d] * Wg[e, d] over bf16 inputs, accumulated in double, rounded once to fp32.
 * Every row e < G is computed; the sinks' logits (rows >= R) feed the weights only.
 */
#include "ref.h"

#include "../common/numeric.h"

void ref_gate_logits(const double *x, const uint16_t *gate_w, int G, int D, float *logits) {
    for (int e = 0; e < G; e++) {
        double acc = 0.0;
        for (int d = 0; d < D; d++) acc += x[d] * (double)moe_bf16_to_f32(gate_w[(size_t)e * D + d]);
        logits[e] = (float)acc;
    }
}
