/*
 * lab_run.c: the lab's device part (rules in lab.h): one layer from the case generator,
 * uploaded once per variant; at each T every variant runs the same inputs and is
 *   - checked for determinism: five further calls on the same batch, bitwise identical;
 *   - judged (at the T asked for) on sampled tokens against the reference's serving mode with
 *     the contract's envelope (compare.h): logits, ids (near-ties judged), weights, output; the
 *     reference runs once per T for every variant;
 *   - timed: 3 warm-up calls, then `iters` calls, each after the backend overwrites 256 MB
 *     (past the 50 MB L2) and on one of LAB_ROTATE inputs in turn, the variants' calls
 *     interleaved (run_tokens); the median (and for the
 *     spread the 10th and 90th percentiles) of each stage's
 *     CUDA event interval (opt/cuda/cuda_profile.h), and of the host's wall clock of the same
 *     call made as a caller makes it (no stage events);
 *     the same for the call on x and out already on the device (its host clock), whose last
 *     output must equal the host call's bit for bit.
 * The calls and their times come from the plan's timer (lab.h; the CUDA backend's by default).
 * A build without CUDA has no timer: everything reports SKIPPED.
 */
#include "lab.h"

#include "compare.h"
#include "fuzz.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Whether any variant can run here; if not, why (the first one's reason). */
static bool any_runnable(const lab_plan *p, char *why, size_t len) {
    snprintf(why, len, "this build lists no CUDA variant (built without the CUDA toolkit)");
    for (int v = 0; v < p->n_variants; v++)
        if (p->variants[v]->available(why, len)) return true;
    return false;
}

/* One T's inputs, shared by every variant, and the reference on its sampled tokens. */
typedef struct {
    fuzz_case c;               /* the layer's case at this T */
    uint16_t *x[LAB_ROTATE];   /* [T, D] each: the case at T with input + r */
    int *tokens;               /* [T]: the sampled tokens first (fuzz_case_sampled_tokens) */
    int n;                     /* sampled tokens */
    uint16_t *xs;              /* [n, D] their rows of x[0] */
    moe_run ref;
    bool have_ref;
} lab_batch;

static void batch_free(lab_batch *b) {
    for (int r = 0; r < LAB_ROTATE; r++) free(b->x[r]);
    free(b->tokens);
    free(b->xs);
    if (b->have_ref) moe_run_free(&b->ref);
    memset(b, 0, sizeof *b);
}

static moe_status batch_make(const lab_plan *p, int T, lab_batch *b, moe_error *err) {
    memset(b, 0, sizeof *b);
    b->c = p->layer;
    b->c.T = T;
    const int n = lab_sample_count(&p->layer, T);
    b->c.sample = n < T ? n : 0;
    moe_status st = fuzz_case_validate(&b->c, err);
    for (int r = 0; r < LAB_ROTATE && !st; r++) {
        fuzz_case cr = b->c;
        cr.input = p->layer.input + r;
        st = fuzz_case_input(&cr, &b->x[r], err);
    }
    const size_t D = (size_t)p->layer.cfg.D;
    b->tokens = st ? NULL : malloc(sizeof(int) * (size_t)T);
    b->xs = st ? NULL : malloc(sizeof(uint16_t) * (size_t)n * D);
    if (!st && (!b->tokens || !b->xs)) st = moe_fail(err, MOE_ERR_NOMEM, "lab: out of memory at T = %d", T);
    if (!st) {
        b->n = fuzz_case_sampled_tokens(&b->c, b->tokens);
        for (int i = 0; i < b->n; i++)
            memcpy(b->xs + (size_t)i * D, b->x[0] + (size_t)b->tokens[i] * D, sizeof(uint16_t) * D);
    }
    if (st) batch_free(b);
    return st;
}

/* Judges the variant's rows of the sampled tokens (gpu: all T, cut down here) against the
 * reference on those tokens. Returns 1 when they leave the envelope or cannot be judged. */
static int check_sample(const lab_plan *p, const moe_layer_data *ld, const moe_backend *be,
                        lab_batch *b, moe_run *gpu, FILE *out) {
    moe_error err;
    moe_error_clear(&err);
    fprintf(out, "  sampled tokens:");
    for (int i = 0; i < b->n; i++) fprintf(out, " %d", b->tokens[i]);
    fprintf(out, "\n");
    const double t0 = fuzz_now();
    moe_status st = MOE_OK;
    moe_options opt = moe_options_default();
    if (!b->have_ref) /* the same rows for every variant: the reference runs once per T */
        st = moe_run_path(&moe_backend_ref, &opt, &p->layer.cfg, &ld->w, MOE_SPLIT_NONE, 1, 0, b->n,
                          b->xs, false, &b->ref, &err);
    b->have_ref = b->have_ref || !st;
    moe_run_keep_tokens(gpu, b->tokens, b->n);
    moe_cmp_case cc = {&p->layer.cfg, &ld->w, b->n, b->xs};
    moe_cmp_report rep;
    memset(&rep, 0, sizeof rep);
    if (!st) st = moe_compare_runs(&cc, &b->ref, gpu, NULL, NULL, &rep, &err);
    if (st) {
        fprintf(out, "  CHECK ERROR: %s\n", err.msg);
        return 1;
    }
    double max_diff = 0.0, max_ref = 0.0;
    for (size_t i = 0; i < (size_t)b->n * p->layer.cfg.D; i++) {
        max_diff = fmax(max_diff, fabs((double)gpu->out[i] - (double)b->ref.out[i]));
        max_ref = fmax(max_ref, fabs((double)b->ref.out[i]));
    }
    fprintf(out, "  %s: reference on %d tokens (%.1f s); max |gpu - ref| = %.3g (max |ref| %.3g); "
                 "envelope: %s\n", be->name, b->n, fuzz_now() - t0, max_diff, max_ref,
            rep.ok ? "PASS" : "FAIL");
    if (!rep.ok) moe_cmp_report_print(out, &rep);
    return !rep.ok;
}

/* A moe_run of the variant's whole batch: output, logits, ids and weights (owned). */
static moe_status gpu_run_alloc(const moe_config *c, const moe_backend *be, int T, moe_run *r,
                                moe_error *err) {
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s/serving/T%d", be->name, T);
    r->backend = be;
    r->opt = moe_options_default();
    r->split_kind = MOE_SPLIT_NONE, r->split_n = 1;
    r->T = T, r->D = c->D, r->I = c->I, r->R = c->R, r->K = c->K, r->S = c->S;
    const size_t t = (size_t)T;
    r->out = malloc(sizeof(float) * (t * c->D + 1));
    r->logits = malloc(sizeof(float) * (t * (c->R + c->S) + 1));
    r->ids = malloc(sizeof(int32_t) * (t * c->K + 1));
    r->weights = malloc(sizeof(float) * (t * (c->K + c->S) + 1));
    if (!r->out || !r->logits || !r->ids || !r->weights) {
        moe_run_free(r);
        return moe_fail(err, MOE_ERR_NOMEM, "lab: out of memory for a batch of %d tokens", T);
    }
    return MOE_OK;
}

/* The kernels of one more device-pointer call (the timer's timeline), or why there are none.
 * Not a check: a timeline that cannot be made here is said and the run goes on. */
static void print_timeline(const lab_timer *tm, const moe_backend *be, void *state, int T,
                           const void *x_dev, void *out_dev, FILE *out) {
    lab_span spans[LAB_MAX_SPANS];
    int n = 0;
    moe_error err;
    moe_error_clear(&err);
    const moe_status st = tm->timeline ? tm->timeline(be, state, T, x_dev, out_dev, spans,
                                                      LAB_MAX_SPANS, &n, &err)
                                       : moe_fail(&err, MOE_ERR_UNSUPPORTED, "this timer has none");
    if (st) {
        fprintf(out, "  timeline: not made (%s)\n", err.msg);
        return;
    }
    fprintf(out, "  timeline of one serving call (L2 flushed), us after its first kernel began:\n");
    fprintf(out, "  %10s %10s %10s %7s  %s\n", "start", "end", "length", "stream", "kernel");
    for (int i = 0; i < n; i++)
        fprintf(out, "  %10.1f %10.1f %10.1f %7u  %s\n", spans[i].start_us, spans[i].end_us,
                spans[i].end_us - spans[i].start_us, spans[i].stream, spans[i].name);
}

/* The pinned-DMA stages, measured only by a timer that can. */
static bool is_pinned_dma(int s) { return s == LAB_PINNED_UPLOAD || s == LAB_PINNED_DOWNLOAD; }

/* One variant's timing at one T (timing_open .. timing_close): its device buffers, the samples
 * [LAB_STAGE_COUNT][iters] in ms, and out2 [T, D], the last host call's output. */
typedef struct {
    const moe_backend *be;
    void *state;
    void *x_dev[LAB_ROTATE], *out_dev;
    float *samples, *out2;
    moe_status st; /* the first failure of its calls (then no more are made) */
    moe_error err;
} lab_timing;

static void timing_free(const lab_timer *tm, lab_timing *t) {
    for (int r = 0; r < LAB_ROTATE; r++)
        if (t->x_dev[r]) tm->dev_free(t->x_dev[r]);
    if (t->out_dev) tm->dev_free(t->out_dev);
    free(t->samples);
    free(t->out2);
    memset(t->x_dev, 0, sizeof t->x_dev);
    t->out_dev = NULL, t->samples = NULL, t->out2 = NULL;
}

/* The buffers of one variant's timed calls at the batch's T. A failure is kept in t->st. */
static void timing_open(const lab_timer *tm, const moe_backend *be, void *state, const lab_batch *b,
                        int D, int iters, lab_timing *t) {
    memset(t, 0, sizeof *t);
    moe_error_clear(&t->err);
    t->be = be, t->state = state;
    const int T = b->c.T;
    const size_t x_bytes = sizeof(uint16_t) * (size_t)T * D, out_bytes = sizeof(float) * (size_t)T * D;
    t->samples = calloc((size_t)iters * LAB_STAGE_COUNT, sizeof(float));
    t->out2 = malloc(out_bytes + 1);
    if (!t->samples || !t->out2) t->st = moe_fail(&t->err, MOE_ERR_NOMEM, "lab: out of memory at T = %d", T);
    if (!t->st) t->st = tm->dev_alloc(&t->out_dev, out_bytes, NULL, &t->err);
    for (int r = 0; r < LAB_ROTATE && !t->st; r++) t->st = tm->dev_alloc(&t->x_dev[r], x_bytes, b->x[r], &t->err);
}

/* Call `it` of one variant (it < 0: a warm-up call), each kind after an L2 flush and on the
 * next of the batch's inputs: from host memory with the stage events, from host memory as a
 * caller makes the call (the host's clock: the stage events' own records and waits would
 * lengthen it), on device pointers (the host's clock), and on device pointers again (the
 * device's interval of the serving graph), then the pinned DMAs. */
static void timing_step(const lab_timer *tm, const lab_batch *b, int it, int iters, lab_timing *t) {
    if (t->st) return;
    const int T = b->c.T, r = (it + 3) % LAB_ROTATE;
    const moe_backend *be = t->be;
    float ms[LAB_DEVICE + 1], serving_ms = 0.0f, dma_ms[2] = {0.0f, 0.0f};
    moe_error *err = &t->err;
    moe_status st = tm->flush(be, t->state, err);
    if (!st) st = tm->call(be, t->state, T, b->x[r], t->out2, ms, err);
    if (!st) st = tm->flush(be, t->state, err);
    const double w0 = fuzz_now();
    if (!st) st = tm->call(be, t->state, T, b->x[r], t->out2, NULL, err);
    const double w1 = fuzz_now();
    if (!st) st = tm->flush(be, t->state, err);
    const double w2 = fuzz_now();
    if (!st) st = tm->call_on_device(be, t->state, T, t->x_dev[r], t->out_dev, NULL, err);
    const double w3 = fuzz_now();
    if (!st) st = tm->flush(be, t->state, err);
    if (!st) st = tm->call_on_device(be, t->state, T, t->x_dev[r], t->out_dev, &serving_ms, err);
    if (!st && tm->pinned_dma) st = tm->pinned_dma(be, t->state, T, dma_ms, err);
    t->st = st;
    if (it < 0 || st) return;
    float *samples = t->samples;
    samples[(size_t)LAB_PINNED_UPLOAD * iters + it] = dma_ms[0];
    samples[(size_t)LAB_PINNED_DOWNLOAD * iters + it] = dma_ms[1];
    samples[(size_t)LAB_HOST * iters + it] = (float)((w1 - w0) * 1e3);
    samples[(size_t)LAB_DEVICE_CALL * iters + it] = (float)((w3 - w2) * 1e3);
    samples[(size_t)LAB_SERVING_DEVICE * iters + it] = serving_ms;
    for (int s = 0; s <= LAB_DEVICE; s++) samples[(size_t)s * iters + it] = ms[s];
}

/* After the last call: whether the last device call gave the host call's bits (*same), and the
 * timeline, if asked for. A failure is kept in t->st. */
static void timing_finish(const lab_timer *tm, const lab_batch *b, int D, bool *same, FILE *timeline,
                          lab_timing *t) {
    const int T = b->c.T;
    const size_t out_bytes = sizeof(float) * (size_t)T * D;
    float *out3 = t->st ? NULL : malloc(out_bytes + 1);
    if (!t->st && !out3) t->st = moe_fail(&t->err, MOE_ERR_NOMEM, "lab: out of memory at T = %d", T);
    if (!t->st) t->st = tm->dev_read(out3, t->out_dev, out_bytes, &t->err);
    *same = !t->st && memcmp(t->out2, out3, out_bytes) == 0;
    if (!t->st && timeline) print_timeline(tm, t->be, t->state, T, t->x_dev[0], t->out_dev, timeline);
    free(out3);
}

/* What one variant's checks at one T found, for its report after the timed calls. */
typedef struct {
    int bad;      /* a check failed */
    bool ran;     /* its forward call ran: it is timed */
    int distinct; /* distinct experts its batch selected */
    int *rows;    /* [R]: each expert's rows (NULL if out of memory) */
} lab_checked;

/* One variant at one T before its timing: its first call, determinism, the check (if asked). */
static void check_variant(const lab_plan *p, const moe_layer_data *ld, const moe_backend *be,
                          void *state, lab_batch *b, bool check, FILE *out, lab_checked *k) {
    const moe_config *c = &p->layer.cfg;
    const int T = b->c.T;
    memset(k, 0, sizeof *k);
    fprintf(out, "T = %d, %s\n", T, be->name);
    moe_error err;
    moe_error_clear(&err);
    moe_run gpu;
    float *out2 = malloc(sizeof(float) * ((size_t)T * c->D + 1));
    moe_status st = gpu_run_alloc(c, be, T, &gpu, &err);
    if (!st && !out2) {
        moe_run_free(&gpu);
        st = moe_fail(&err, MOE_ERR_NOMEM, "lab: out of memory at T = %d", T);
    }
    moe_stages stg = {st ? NULL : gpu.logits, st ? NULL : gpu.ids, st ? NULL : gpu.weights,
                      NULL, NULL, NULL, NULL, 0};
    if (!st) st = be->forward(state, T, b->x[0], gpu.out, &stg, &err);
    if (st) {
        fprintf(out, "  FORWARD ERROR: %s\n", err.msg);
        if (gpu.out) moe_run_free(&gpu);
        free(out2);
        k->bad = 1;
        return;
    }
    gpu.filled = stg.filled & (MOE_STAGE_LOGITS | MOE_STAGE_TOPK);
    int same = 1;
    for (int r = 0; r < 5 && !st; r++) {
        st = be->forward(state, T, b->x[0], out2, NULL, &err);
        same = same && memcmp(gpu.out, out2, sizeof(float) * (size_t)T * c->D) == 0;
    }
    fprintf(out, "  five further runs bitwise identical: %s\n", st ? err.msg : same ? "yes" : "NO");
    k->bad |= st || !same;
    k->ran = true;
    k->rows = calloc((size_t)c->R, sizeof(int));
    for (size_t i = 0; k->rows && i < (size_t)T * c->K; i++)
        if (gpu.ids[i] >= 0 && gpu.ids[i] < c->R) k->distinct += k->rows[gpu.ids[i]]++ == 0;
    if (check) k->bad |= check_sample(p, ld, be, b, &gpu, out);
    moe_run_free(&gpu);
    free(out2);
}

/* One variant's timings at one T, after every variant's calls; its serving graph's times into
 * *cell. Returns 1 on a failure. */
static int report_variant(const lab_plan *p, const lab_timer *tm, const lab_timing *t,
                          bool same_on_device, const lab_checked *k, int T, FILE *out, FILE *csv,
                          lab_summary_cell *cell) {
    const moe_config *c = &p->layer.cfg;
    const int iters = p->iters;
    const bool with_dma = tm->pinned_dma != NULL;
    if (t->st) {
        fprintf(out, "  TIMING ERROR: %s\n", t->err.msg);
        return 1;
    }
    fprintf(out, "  device-pointer call bitwise equal to the host call: %s\n", same_on_device ? "yes" : "NO");
    lab_stage stages[LAB_STAGE_COUNT];
    lab_stages(c, T, k->distinct, stages);
    fprintf(out, "  distinct experts selected: %d (expected R(1-(1-K/R)^T) = %.1f)\n", k->distinct,
            c->R * (1.0 - pow(1.0 - (double)c->K / c->R, T)));
    if (k->rows) lab_print_tiles(out, k->rows, c->R);
    fprintf(out, "  %-20s %10s %12s %10s %8s %10s %8s\n", "stage", "median us", "bytes", "GB/s",
            "TFLOP/s", "floor us", "x floor");
    double us_of[LAB_STAGE_COUNT];
    lab_times times_of[LAB_STAGE_COUNT];
    for (int s = 0; s < LAB_STAGE_COUNT; s++) {
        float *ms = t->samples + (size_t)s * iters;
        for (int i = 0; i < iters; i++) ms[i] *= 1e3f; /* ms -> us */
        times_of[s] = lab_times_of(ms, iters);
        us_of[s] = times_of[s].median_us;
    }
    for (int s = 0; s < LAB_STAGE_COUNT; s++) {
        if (!lab_focus_has(p->focus, (lab_stage_id)s) || (is_pinned_dma(s) && !with_dma)) continue;
        const double us = us_of[s], secs = us * 1e-6;
        const double floor_s = lab_floor_s(&stages[s]);
        fprintf(out, "  %-20s %10.1f %12.4g %10.0f %8.1f %10.2f %8.2f\n", stages[s].name, us,
                stages[s].bytes, secs > 0 ? stages[s].bytes / secs * 1e-9 : 0.0,
                secs > 0 ? stages[s].flops / secs * 1e-12 : 0.0, floor_s * 1e6,
                floor_s > 0 ? secs / floor_s : 0.0);
        if (csv) lab_csv_row(csv, p->shape, t->be->name, T, &stages[s], times_of[s]);
    }
    if (csv) fflush(csv);
    *cell = (lab_summary_cell){true, times_of[LAB_SERVING_DEVICE]};
    /* how far apart the calls were: a change smaller than this spread is not shown */
    fprintf(out, "  spread of the %d calls, layer on device: p10 %.1f, median %.1f, p90 %.1f us\n",
            iters, times_of[LAB_DEVICE].p10_us, us_of[LAB_DEVICE], times_of[LAB_DEVICE].p90_us);
    fprintf(out, "  spread of the %d calls, serving graph: p10 %.1f, median %.1f, p90 %.1f us\n",
            iters, times_of[LAB_SERVING_DEVICE].p10_us, us_of[LAB_SERVING_DEVICE],
            times_of[LAB_SERVING_DEVICE].p90_us);
    /* what the host's call adds to the layer's device time */
    if (us_of[LAB_DEVICE] > 0)
        fprintf(out, "  host clock / layer on device: forward call %.2f, device-pointer call %.2f\n",
                us_of[LAB_HOST] / us_of[LAB_DEVICE], us_of[LAB_DEVICE_CALL] / us_of[LAB_DEVICE]);
    if (us_of[LAB_SERVING_DEVICE] > 0)
        fprintf(out, "  host clock of the device-pointer call / serving graph on device: %.2f\n",
                us_of[LAB_DEVICE_CALL] / us_of[LAB_SERVING_DEVICE]);
    /* the host call's bound at large T (docs/perf-cuda.md): no more than the layer plus its
     * transfers at pinned-memory speed. The layer is the serving graph's interval: the timed
     * call's "layer on device" starts at the upload's end, and from 1024 tokens the sinks'
     * GEMM1 runs before that (opt/cuda/cuda_backend.cu, sink_piece_tokens) */
    const double bound_us = us_of[LAB_SERVING_DEVICE] + us_of[LAB_PINNED_UPLOAD] + us_of[LAB_PINNED_DOWNLOAD];
    if (with_dma && bound_us > 0)
        fprintf(out, "  forward call / (serving graph + transfers at pinned speed): %.2f "
                "(%.1f us against %.1f)\n", us_of[LAB_HOST] / bound_us, us_of[LAB_HOST], bound_us);
    return !same_on_device;
}

/* Every variant at one T: each one's checks, then their timed calls interleaved (call it of
 * every variant before call it + 1 of any, the first of each round moving on by one), so that
 * whatever drifts over a run (the GPU's clocks, the host, what ran just before) falls on every
 * variant alike: timed one after another, the first-timed variant read 1-3 us slower at T = 1
 * (docs/perf-cuda.md, forty-third run). row [n_variants]: the summary's cells at this T.
 * Returns 1 on a failure. */
static int run_tokens(const lab_plan *p, const lab_timer *tm, const moe_layer_data *ld,
                      void *const *states, lab_batch *b, bool check, FILE *out, FILE *csv,
                      lab_summary_cell *row) {
    const int n = p->n_variants, D = p->layer.cfg.D, iters = p->iters;
    lab_checked checked[LAB_MAX_VARIANTS];
    lab_timing timing[LAB_MAX_VARIANTS];
    int bad = 0;
    for (int v = 0; v < n; v++) {
        memset(&checked[v], 0, sizeof checked[v]);
        if (states[v]) check_variant(p, ld, p->variants[v], states[v], b, check, out, &checked[v]);
        bad |= checked[v].bad;
        if (checked[v].ran) timing_open(tm, p->variants[v], states[v], b, D, iters, &timing[v]);
    }
    for (int it = -3; it < iters; it++)
        for (int j = 0; j < n; j++) {
            const int v = (j + (it + 3)) % n;
            if (checked[v].ran) timing_step(tm, b, it, iters, &timing[v]);
        }
    for (int v = 0; v < n; v++) {
        if (!checked[v].ran) continue;
        bool same = false;
        fprintf(out, "T = %d, %s: timed\n", b->c.T, p->variants[v]->name);
        timing_finish(tm, b, D, &same, p->timeline ? out : NULL, &timing[v]);
        bad |= report_variant(p, tm, &timing[v], same, &checked[v], b->c.T, out, csv, &row[v]);
        timing_free(tm, &timing[v]);
        free(checked[v].rows);
    }
    return bad;
}

static int run_device(const lab_plan *p, const lab_timer *tm, FILE *out, FILE *csv) {
    moe_error err;
    moe_error_clear(&err);
    const double t0 = fuzz_now();
    moe_layer_data ld;
    moe_shard sh;
    moe_status st = lab_layer_build(p, "T from --tokens", out, &ld, &sh, &err);
    if (st) {
        fprintf(out, "lab: %s\n", err.msg);
        return 1;
    }
    const moe_split none = {MOE_SPLIT_NONE, 1, 0, 0};
    moe_options opt = moe_options_default();
    void *states[LAB_MAX_VARIANTS] = {NULL};
    int created = 0;
    for (int v = 0; v < p->n_variants && !st; v++) {
        const moe_backend *be = p->variants[v];
        char why[256] = "";
        if (!be->available(why, sizeof why) || !be->supports(&p->layer.cfg, &none, &opt, why, sizeof why)) {
            fprintf(out, "%s: SKIPPED: %s\n", be->name, why);
            continue;
        }
        st = be->create(&sh, &opt, &states[v], &err);
        created += !st;
    }
    int rc = 0;
    if (st) {
        fprintf(out, "lab: %s\n", err.msg);
        rc = 1;
    } else if (!created) {
        fprintf(out, "lab: SKIPPED: no variant supports this layer\n");
        rc = LAB_EXIT_SKIPPED;
    } else {
        fprintf(out, "layer made, sharded and uploaded in %.1f s\n", fuzz_now() - t0);
    }
    /* a failed check does not stop the run: every T is still checked and timed */
    lab_summary_cell cells[LAB_MAX_T * LAB_MAX_VARIANTS];
    memset(cells, 0, sizeof cells);
    int ran = 0;
    for (int i = 0; i < p->n_tokens && !st && created; i++) {
        lab_batch b;
        if (batch_make(p, p->tokens[i], &b, &err)) {
            fprintf(out, "lab: %s\n", err.msg);
            rc = 1;
            break;
        }
        rc |= run_tokens(p, tm, &ld, states, &b, p->check[i], out, csv, cells + (size_t)i * p->n_variants);
        ran = i + 1;
        batch_free(&b);
    }
    const char *names[LAB_MAX_VARIANTS];
    for (int v = 0; v < p->n_variants; v++) names[v] = p->variants[v]->name;
    lab_print_summary(out, p->tokens, ran, names, p->n_variants, cells);
    for (int v = 0; v < p->n_variants; v++)
        if (states[v]) p->variants[v]->destroy(states[v]);
    moe_shard_free(&sh);
    moe_layer_data_free(&ld);
    return rc;
}

int lab_run(const lab_plan *p, FILE *out, FILE *csv) {
    char why[256];
    if (!any_runnable(p, why, sizeof why)) {
        fprintf(out, "lab: SKIPPED: %s\n", why);
        return LAB_EXIT_SKIPPED;
    }
    const lab_timer *tm = p->timer ? p->timer : lab_cuda_timer();
    if (!tm) {
        fprintf(out, "lab: SKIPPED: built without the CUDA toolkit (no stage timer)\n");
        return LAB_EXIT_SKIPPED;
    }
    const int rc = run_device(p, tm, out, csv);
    if (rc != LAB_EXIT_SKIPPED) fprintf(out, "lab: %s\n", rc ? "FAILED" : "all checks passed");
    return rc;
}
