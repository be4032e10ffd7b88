/*
 * ref_expert.c: one SwiGLU expert on one token
 * (contract.md [math.experts], [math.sinks], [precision]).
 *
 * Rules:
 *   - weights are decoded exactly through the shared matrix views (common/matrix_view.h: MXFP4
 *     and bf16 are exact in fp32, so in double; an NVFP4 code * scale * scale2 is exact in double);
 *   - g = W1 x and u = W3 x accumulate in double; w13 rows interleave: row 2j is W1 row j,
 *     row 2j+1 is W3 row j;
 *   - h = gamma * silu(g) * u (gamma = 1 for routed experts: their weight multiplies after W2;
 *     gamma_s for sinks: it multiplies the intermediate, before W2);
 *   - serving: g and u are rounded to bf16 (through fp32), h is computed from them and rounded
 *     to bf16 (through fp32); y = W2 h accumulates in double either way.
 */
#include "ref.h"

#include "../common/matrix_view.h"
#include "../common/numeric.h"

#include <math.h>
#include <string.h>

static double dot(const double *a, const double *b, int n) {
    double acc = 0.0;
    for (int i = 0; i < n; i++) acc += a[i] * b[i];
    return acc;
}

static double to_bf16(double v) { return (double)moe_round_bf16((float)v); }

static double silu(double z) { return z / (1.0 + exp(-z)); }

void ref_expert_token(const moe_matrix *w13, const moe_matrix *w2, const double *x, int D,
                      int I_loc, double gamma, bool serving, double *h, double *y,
                      double *row_buf) {
    for (int j = 0; j < I_loc; j++) {
        moe_matrix_row(w13, 2 * j, row_buf);
        double g = dot(row_buf, x, D);
        moe_matrix_row(w13, 2 * j + 1, row_buf);
        double u = dot(row_buf, x, D);
        if (serving) {
            g = to_bf16(g);
            u = to_bf16(u);
        }
        double hj = silu(g) * u * gamma;
        h[j] = serving ? to_bf16(hj) : hj;
    }
    for (int d = 0; d < D; d++) {
        moe_matrix_row(w2, d, row_buf);
        y[d] = dot(row_buf, h, I_loc);
    }
}
