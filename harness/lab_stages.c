/* lab_stages.c: what each stage of the layer must move and compute, its floor, and the lab's
 * CSV rows (rules in lab.h). */
#include "lab.h"

#include <math.h>
#include <stdlib.h>

void lab_stages(const moe_config *c, int T, int distinct, lab_stage out[LAB_STAGE_COUNT]) {
    const double t = T, D = c->D, I = c->I, K = c->K, S = c->S, G = (double)c->R + c->S;
    /* bytes per routed weight: a 4-bit code plus its block's scale byte (E8M0 per 32 or E4M3
     * per 16); bf16 experts 2 */
    const moe_routed_format_info *fi = moe_routed_format_get(c->routed_format);
    const double w = fi->block ? 0.5 + 1.0 / fi->block : 2.0;
    const double expert13 = 2.0 * I * D * w, expert2 = D * I * w;
    const double gate_w = G * D * 2, sinks_w = S * 3 * I * D * 2;
    const double layer_bytes = gate_w + distinct * (expert13 + expert2) + sinks_w + t * D * 6;
    const double layer_flops = 2.0 * t * (G * D + K * 3.0 * I * D + S * 3.0 * I * D);
    const lab_stage rows[LAB_STAGE_COUNT] = {
        [LAB_UPLOAD] = {"upload x", t * D * 2, 0},
        [LAB_GATE] = {"gate GEMM", gate_w + t * D * 2 + t * G * 4, 2.0 * t * G * D},
        [LAB_ROUTE] = {"route", t * G * 4 + t * D * 2 + t * (2 * K + S) * 4, 0},
        [LAB_GROUP] = {"group", t * K * 4 * 2, 0},
        [LAB_GEMM1] = {"GEMM1+SwiGLU", distinct * expert13 + t * D * 2 + t * K * I * 2,
                       2.0 * t * K * 2 * I * D},
        [LAB_GEMM2] = {"GEMM2", distinct * expert2 + t * K * I * 2 + t * K * D * 4,
                       2.0 * t * K * D * I},
        [LAB_COMBINE] = {"combine", t * K * D * 4 + t * D * 8, 0},
        [LAB_DOWNLOAD] = {"download out", t * D * 2, 0},
        [LAB_SINK_GEMM1] = {"sink GEMM1", S * 2 * I * D * 2 + t * D * 2 + t * S * 2 * I * 2,
                            2.0 * t * S * 2 * I * D},
        [LAB_SINK_SWIGLU] = {"sink SwiGLU", t * S * 3 * I * 2, 0},
        [LAB_SINK_GEMM2] = {"sink GEMM2", S * D * I * 2 + t * S * I * 2 + t * D * 4,
                            2.0 * t * S * D * I},
        [LAB_DEVICE] = {"layer on device", layer_bytes, layer_flops},
        /* the host's call adds the transfers: x up and out down, both bf16 (every output value
         * is a bf16 value; the host widens it into the caller's fp32 out) */
        [LAB_HOST] = {"forward call", layer_bytes + t * D * 4, layer_flops},
        [LAB_DEVICE_CALL] = {"device-pointer call", layer_bytes, layer_flops},
        [LAB_SERVING_DEVICE] = {"serving graph", layer_bytes, layer_flops},
        [LAB_PINNED_UPLOAD] = {"upload x (pinned DMA)", t * D * 2, 0},
        [LAB_PINNED_DOWNLOAD] = {"download out (pinned DMA)", t * D * 2, 0},
    };
    for (int s = 0; s < LAB_STAGE_COUNT; s++) out[s] = rows[s];
}

bool lab_focus_has(lab_focus f, lab_stage_id s) {
    if (s == LAB_DEVICE || s == LAB_HOST || s == LAB_DEVICE_CALL || s == LAB_SERVING_DEVICE ||
        f == LAB_FOCUS_LAYER)
        return true;
    switch (f) {
    case LAB_FOCUS_EXPERTS: return s == LAB_GEMM1 || s == LAB_GEMM2;
    case LAB_FOCUS_GATE: return s == LAB_GATE;
    case LAB_FOCUS_ROUTE: return s == LAB_ROUTE;
    case LAB_FOCUS_GROUP: return s == LAB_GROUP;
    case LAB_FOCUS_SINKS: return s == LAB_SINK_GEMM1 || s == LAB_SINK_SWIGLU || s == LAB_SINK_GEMM2;
    case LAB_FOCUS_COMBINE: return s == LAB_COMBINE;
    case LAB_FOCUS_TRANSFERS:
        return s == LAB_UPLOAD || s == LAB_DOWNLOAD || s == LAB_PINNED_UPLOAD || s == LAB_PINNED_DOWNLOAD;
    default: return false;
    }
}

double lab_floor_s(const lab_stage *s) { return fmax(s->bytes / LAB_COPY_BW, s->flops / LAB_BF16_RATE); }

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The value at fraction q of the sorted v [n], interpolated between neighbours. */
static double quantile(const float *v, int n, double q) {
    const double at = q * (n - 1);
    const int lo = (int)at, hi = lo + 1 < n ? lo + 1 : lo;
    return v[lo] + (at - lo) * (v[hi] - v[lo]);
}

lab_times lab_times_of(float *times, int n) {
    lab_times t = {0.0, 0.0, 0.0, 0.0, 0.0, 0};
    if (n < 1) return t;
    qsort(times, (size_t)n, sizeof *times, cmp_float);
    t.median_us = quantile(times, n, 0.5);
    t.p10_us = quantile(times, n, 0.1);
    t.p90_us = quantile(times, n, 0.9);
    t.p25_us = quantile(times, n, 0.25);
    t.p75_us = quantile(times, n, 0.75);
    t.calls = n;
    return t;
}

double lab_median_notch(lab_times t) {
    return t.calls < 2 ? 0.0 : 1.58 * (t.p75_us - t.p25_us) / sqrt((double)t.calls);
}

void lab_csv_row(FILE *f, const char *shape, const char *variant, int T, const lab_stage *s,
                 lab_times t) {
    const double floor_us = lab_floor_s(s) * 1e6, secs = t.median_us * 1e-6;
    fprintf(f, "%s,%s,%d,%s,%.0f,%.0f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n", shape, variant, T,
            s->name, s->bytes, s->flops, t.median_us, floor_us,
            secs > 0 ? s->bytes / secs * 1e-9 : 0.0, secs > 0 ? s->flops / secs * 1e-12 : 0.0,
            floor_us > 0 ? t.median_us / floor_us : 0.0, t.p10_us, t.p90_us);
}
