/*
 * selection.h: the contract's expert selection (contract.md [routing.select]), written from the
 * contract for the harness alone, independently of ref/, so that the ids every path is judged against
 * do not come from the code under test.
 *
 * Rules (contract.md [routing.select]):
 *   - sel[e] = sigma(l[e]) + bias[e] in fp32, e < R, rounded twice: sigma of the fp32 logit,
 *     rounded to fp32; then the fp32 sum with the fp32 bias, rounded to fp32;
 *   - the K largest, in slot order: slot 0 the largest; equal values in ascending index (the
 *     lowest index wins a tie, at the K boundary too).
 */
#ifndef INKLING_SELECTION_H
#define INKLING_SELECTION_H

#include <stdint.h>

/* The selection score of one expert: fp32 logit and bias (0 without a gate bias). */
float contract_sel_score(float logit, float bias);

/* logits [R] (the sinks' logits, if they follow, are not read), bias [R] or NULL ->
 * ids [K] in slot order. scratch [K] floats. */
void contract_select(const float *logits, const float *bias, int R, int K, int32_t *ids,
                     float *scratch);

#endif
