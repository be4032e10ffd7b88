/*
 * cuda_check.c: the CUDA path at the real Inkling-Small shape, on a GPU: correctness on
 * sampled tokens against the reference's serving mode, determinism, and per-stage timing.
 * Built by `make cuda-check` (needs nvcc); run on a machine with an sm_90 GPU.
 *
 *   cuda-check [--small] [--tokens 1,64,4096] [--iters N] [--seed S]
 *              [--backends cuda,cuda-wmma,cuda-gemv] [--check 1,64] [--format mxfp4|nvfp4]
 *
 * With several backends (the CUDA path's variants: the expert kernels chosen by T, or forced
 * one way) every variant runs on the same layer and inputs, is judged against the same
 * reference rows and timed the same way: the kernel lab for the expert GEMMs. --check limits
 * the reference comparison (slow at the real shape: about 30 s a token) to the listed T; the
 * other T are timed and checked for determinism only.
 *
 * Rules:
 *   - the layer is random (codes uniform over all 16 E2M1 values, scales around the
 *     magnitude of N(0, 1/n) weights, bf16 gate and sinks N(0, 1/D) and N(0, 1/I)); filled in
 *     parallel from a counter-based generator so that a 3.5 GB layer takes seconds;
 *   - correctness: the batch of T tokens is run on the GPU once; a sample of its tokens (all
 *     for T <= 4, else 4 for T <= 64, else 8, drawn from the seed and printed) is run through
 *     the reference (serving) and the GPU rows are judged with the harness's contract envelope
 *     (harness/compare.h): logits, ids (near-ties judged), weights, output;
 *   - determinism: five forward calls on the same batch give bitwise-identical outputs;
 *   - timing: 3 warm-up calls, then --iters calls, each after overwriting 256 MB (past the
 *     50 MB L2) and on one of 4 rotating inputs; the median of each stage's CUDA event time is
 *     printed beside the bytes it must move and its floor at 4.2 TB/s and 780 TFLOP/s.
 * Exit status 0 when every check passes.
 */
#include "../../../common/layer_data.h"
#include "../../../common/moe.h"
#include "../../../common/numeric.h"
#include "../../../harness/compare.h"
#include "../cuda_profile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COPY_BW 4.2e12   /* bytes/s, device copy measured on an H200 (contract.md [floors]) */
#define BF16_RATE 7.8e14 /* FLOP/s, dense bf16 measured on an H200 (contract.md [floors]) */
#define ROTATE 4

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Random bytes, 1 MiB chunks seeded from (seed, stream, chunk): the same whatever the threads. */
static void fill_bytes(uint8_t *p, size_t n, uint64_t seed, uint64_t stream) {
    const size_t chunk = (size_t)1 << 20;
    const long chunks = (long)((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
    for (long c = 0; c < chunks; c++) {
        uint64_t s = moe_rng_hash(seed, stream, (uint64_t)c);
        size_t end = ((size_t)c + 1) * chunk < n ? ((size_t)c + 1) * chunk : n;
        for (size_t i = (size_t)c * chunk; i < end; i += 8) {
            uint64_t v = splitmix(&s);
            for (size_t b = 0; b < 8 && i + b < end; b++) p[i + b] = (uint8_t)(v >> (8 * b));
        }
    }
}

static void fill_scales(uint8_t *p, size_t n, int cols, uint64_t seed, uint64_t stream) {
    fill_bytes(p, n, seed, stream);
    const int centre = 127 - (int)lround(0.5 * log2((double)cols)) - 2;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)n; i++) p[i] = (uint8_t)(centre - 1 + p[i] % 3);
}

/* bf16 ~ N(0, stddev^2) from the sum of 4 uniforms (close enough for test weights). */
static void fill_normal(uint16_t *p, size_t n, double stddev, uint64_t seed, uint64_t stream) {
    const size_t chunk = (size_t)1 << 18;
    const long chunks = (long)((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
    for (long c = 0; c < chunks; c++) {
        uint64_t s = moe_rng_hash(seed, stream, (uint64_t)c);
        size_t end = ((size_t)c + 1) * chunk < n ? ((size_t)c + 1) * chunk : n;
        for (size_t i = (size_t)c * chunk; i < end; i++) {
            uint64_t v = splitmix(&s);
            double u = 0.0;
            for (int k = 0; k < 4; k++) u += (double)((v >> (16 * k)) & 0xFFFF) / 65536.0;
            p[i] = moe_f32_to_bf16((float)((u - 2.0) * sqrt(3.0) * stddev));
        }
    }
}

static moe_status random_layer(const moe_config *c, uint64_t seed, moe_layer_data *ld,
                               moe_error *err) {
    /* NVFP4: the library's random layer (parallel, counter-based: E4M3 scales 0.5..2, scale2
     * near 1 / (2.93 sqrt(n))) */
    if (c->routed_format == MOE_ROUTED_NVFP4) return moe_layer_data_random(c, seed, ld, err);
    moe_status st = moe_layer_data_alloc(c, ld, err);
    if (st) return st;
    const size_t D = (size_t)c->D, I = (size_t)c->I, R = (size_t)c->R, S = (size_t)c->S;
    fill_normal(ld->gate_w, (R + S) * D, 1.0 / sqrt((double)D), seed, 1);
    for (size_t e = 0; e < R; e++) ld->gate_bias[e] = 0.05f * (float)((e * 37 % 101) / 50.0 - 1.0);
    ld->w.global_scale = 1.25f;
    fill_bytes(ld->w13_mx, R * 2 * I * D / 2, seed, 2);
    fill_scales(ld->w13_scale, R * 2 * I * D / 32, (int)D, seed, 3);
    fill_bytes(ld->w2_mx, R * D * I / 2, seed, 4);
    fill_scales(ld->w2_scale, R * D * I / 32, (int)I, seed, 5);
    fill_normal(ld->sink_w13, S * 2 * I * D, 1.0 / sqrt((double)D), seed, 6);
    fill_normal(ld->sink_w2, S * D * I, 1.0 / sqrt((double)I), seed, 7);
    return MOE_OK;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float median(float *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

/* Judges the sampled rows of the GPU batch against the reference on those rows. */
static int check_sample(const moe_backend *b, const moe_config *c, const moe_weights *w, int T,
                        const uint16_t *x, const float *out, const float *logits,
                        const int32_t *ids, const float *weights, uint64_t seed, moe_run *ref,
                        bool *have_ref) {
    int n = T <= 4 ? T : T <= 64 ? 4 : 8;
    const int D = c->D, G = c->R + c->S, K = c->K, S = c->S;
    int *rows = malloc(sizeof(int) * (size_t)n);
    moe_rng rng = moe_rng_make(seed, 99);
    printf("  sampled tokens:");
    for (int i = 0; i < n; i++) {
        rows[i] = n == T ? i : moe_rng_int(&rng, 0, T - 1);
        printf(" %d", rows[i]);
    }
    printf("\n");
    uint16_t *xs = malloc(sizeof(uint16_t) * (size_t)n * D);
    moe_run gpu;
    memset(&gpu, 0, sizeof gpu);
    snprintf(gpu.name, sizeof gpu.name, "%s/serving/T%d", b->name, T);
    gpu.backend = b;
    gpu.opt = moe_options_default();
    gpu.split_kind = MOE_SPLIT_NONE, gpu.split_n = 1;
    gpu.T = n, gpu.D = D, gpu.I = c->I, gpu.R = c->R, gpu.K = K, gpu.S = S;
    gpu.out = malloc(sizeof(float) * (size_t)n * D);
    gpu.logits = malloc(sizeof(float) * (size_t)n * G);
    gpu.ids = malloc(sizeof(int32_t) * (size_t)n * K);
    gpu.weights = malloc(sizeof(float) * (size_t)n * (K + S));
    gpu.filled = MOE_STAGE_LOGITS | MOE_STAGE_TOPK;
    for (int i = 0; i < n; i++) {
        size_t r = (size_t)rows[i];
        memcpy(xs + (size_t)i * D, x + r * D, sizeof(uint16_t) * D);
        memcpy(gpu.out + (size_t)i * D, out + r * D, sizeof(float) * D);
        memcpy(gpu.logits + (size_t)i * G, logits + r * G, sizeof(float) * G);
        memcpy(gpu.ids + (size_t)i * K, ids + r * K, sizeof(int32_t) * K);
        memcpy(gpu.weights + (size_t)i * (K + S), weights + r * (K + S), sizeof(float) * (K + S));
    }
    moe_error err;
    moe_error_clear(&err);
    double t0 = now_ms();
    moe_status st = MOE_OK;
    if (!*have_ref) /* the same rows for every variant: the reference runs once per T */
        st = moe_run_path(&moe_backend_ref, &gpu.opt, c, w, MOE_SPLIT_NONE, 1, 0, n, xs, false,
                          ref, &err);
    *have_ref = *have_ref || !st;
    moe_cmp_case cc = {c, w, n, xs};
    moe_cmp_report rep;
    memset(&rep, 0, sizeof rep);
    if (!st) st = moe_compare_runs(&cc, ref, &gpu, NULL, NULL, &rep, &err);
    int bad = 0;
    if (st) {
        printf("  CHECK ERROR: %s\n", err.msg);
        bad = 1;
    } else {
        double max_diff = 0.0, max_ref = 0.0;
        for (size_t i = 0; i < (size_t)n * D; i++) {
            max_diff = fmax(max_diff, fabs((double)gpu.out[i] - (double)ref->out[i]));
            max_ref = fmax(max_ref, fabs((double)ref->out[i]));
        }
        printf("  %s: reference on %d tokens (%.1f s); max |gpu - ref| = %.3g (max |ref| %.3g); "
               "envelope: %s\n",
               b->name, n, (now_ms() - t0) * 1e-3, max_diff, max_ref, rep.ok ? "PASS" : "FAIL");
        if (!rep.ok) {
            moe_cmp_report_print(stdout, &rep);
            bad = 1;
        }
    }
    moe_run_free(&gpu);
    free(xs);
    free(rows);
    return bad;
}

typedef struct {
    const char *name;
    size_t field; /* offset in moe_cuda_stage_times */
    double bytes, flops;
} stage_row;

static int run_tokens(const moe_backend *b, void *state, const moe_config *c, const moe_weights *w,
                      int T, int iters, uint64_t seed, bool check, moe_run *ref, bool *have_ref) {
    const int D = c->D, G = c->R + c->S, K = c->K, S = c->S, I = c->I;
    printf("T = %d, %s\n", T, b->name);
    uint16_t *x[ROTATE];
    for (int r = 0; r < ROTATE; r++) {
        x[r] = malloc(sizeof(uint16_t) * ((size_t)T * D + 1));
        moe_random_input(T, D, seed + 10 * (uint64_t)T + (uint64_t)r, x[r]);
    }
    float *out = malloc(sizeof(float) * ((size_t)T * D + 1));
    float *out2 = malloc(sizeof(float) * ((size_t)T * D + 1));
    float *logits = malloc(sizeof(float) * ((size_t)T * G + 1));
    int32_t *ids = malloc(sizeof(int32_t) * ((size_t)T * K + 1));
    float *weights = malloc(sizeof(float) * ((size_t)T * (K + S) + 1));
    moe_error err;
    moe_error_clear(&err);
    moe_stages stg = {logits, ids, weights, NULL, NULL, NULL, NULL, 0};
    int bad = 0;
    moe_status st = b->forward(state, T, x[0], out, &stg, &err);
    if (st) {
        printf("  FORWARD ERROR: %s\n", err.msg);
        return 1;
    }
    if (check)
        bad |= check_sample(b, c, w, T, x[0], out, logits, ids, weights, seed + (uint64_t)T, ref,
                            have_ref);

    int same = 1;
    for (int r = 0; r < 5 && !st; r++) {
        st = b->forward(state, T, x[0], out2, NULL, &err);
        same = same && memcmp(out, out2, sizeof(float) * (size_t)T * D) == 0;
    }
    printf("  five further runs bitwise identical: %s\n", st ? err.msg : same ? "yes" : "NO");
    bad |= st || !same;

    /* distinct experts actually selected, for the byte counts */
    unsigned char *used = calloc((size_t)c->R, 1);
    int distinct = 0;
    for (size_t i = 0; i < (size_t)T * K; i++)
        if (!used[ids[i]]) used[ids[i]] = 1, distinct++;
    free(used);
    /* bytes per routed weight: 4-bit code plus E8M0 per 32 (MXFP4) or E4M3 per 16 (NVFP4) */
    const double t = T, mx = c->routed_format == MOE_ROUTED_NVFP4 ? 0.5625 : 0.53125;
    const double expert13 = 2.0 * I * D * mx, expert2 = (double)D * I * mx;
    const stage_row rows[] = {
        {"upload x", offsetof(moe_cuda_stage_times, upload), t * D * 2, 0},
        {"gate GEMM", offsetof(moe_cuda_stage_times, gate), (double)G * D * 2 + t * D * 2 + t * G * 4, 2.0 * t * G * D},
        {"route", offsetof(moe_cuda_stage_times, route), t * G * 4 + t * D * 2 + t * (2 * K + S) * 4, 0},
        {"group", offsetof(moe_cuda_stage_times, group), t * K * 4 * 2, 0},
        {"GEMM1+SwiGLU", offsetof(moe_cuda_stage_times, gemm1), distinct * expert13 + t * D * 2 + t * K * I * 2, 2.0 * t * K * 2 * I * D},
        {"GEMM2", offsetof(moe_cuda_stage_times, gemm2), distinct * expert2 + t * K * I * 2 + t * K * D * 4, 2.0 * t * K * D * I},
        {"combine", offsetof(moe_cuda_stage_times, combine), t * K * D * 4 + t * D * 8, 0},
        {"download out", offsetof(moe_cuda_stage_times, download), t * D * 4, 0},
        {"sink GEMM1", offsetof(moe_cuda_stage_times, sink_gemm1), (double)S * 2 * I * D * 2 + t * D * 2 + t * S * 2 * I * 2, 2.0 * t * S * 2 * I * D},
        {"sink SwiGLU", offsetof(moe_cuda_stage_times, sink_swiglu), t * S * 3 * I * 2, 0},
        {"sink GEMM2", offsetof(moe_cuda_stage_times, sink_gemm2), (double)S * D * I * 2 + t * S * I * 2 + t * D * 4, 2.0 * t * S * D * I},
        {"layer on device", offsetof(moe_cuda_stage_times, device),
         (double)G * D * 2 + distinct * (expert13 + expert2) + (double)S * 3 * I * D * 2 + t * D * 6,
         2.0 * t * (G * D + K * 3.0 * I * D + S * 3.0 * I * D)},
    };
    const int n_rows = (int)(sizeof rows / sizeof rows[0]);
    float *samples = malloc(sizeof(float) * (size_t)iters * n_rows);
    float *wall = malloc(sizeof(float) * (size_t)iters);
    for (int it = -3; it < iters && !st; it++) {
        moe_cuda_stage_times times;
        st = moe_cuda_flush_l2(state, &err);
        double w0 = now_ms();
        if (!st) st = moe_cuda_forward_timed(state, T, x[(it + 3) % ROTATE], out2, &times, &err);
        if (it < 0 || st) continue;
        wall[it] = (float)(now_ms() - w0);
        for (int r = 0; r < n_rows; r++)
            samples[(size_t)r * iters + it] = *(const float *)((const char *)&times + rows[r].field);
    }
    if (st) {
        printf("  TIMING ERROR: %s\n", err.msg);
        bad = 1;
    } else {
        printf("  distinct experts selected: %d (expected 256(1-(250/256)^T) = %.1f)\n", distinct,
               256.0 * (1.0 - pow(250.0 / 256.0, t)));
        printf("  %-16s %10s %12s %10s %10s %8s\n", "stage", "median us", "bytes", "GB/s",
               "floor us", "x floor");
        for (int r = 0; r < n_rows; r++) {
            float ms = median(samples + (size_t)r * iters, iters);
            double floor_s = fmax(rows[r].bytes / COPY_BW, rows[r].flops / BF16_RATE);
            printf("  %-16s %10.1f %12.4g %10.0f %10.1f %8.2f\n", rows[r].name, ms * 1e3,
                   rows[r].bytes, ms > 0 ? rows[r].bytes / (ms * 1e-3) * 1e-9 : 0.0,
                   floor_s * 1e6, ms > 0 ? ms * 1e-3 / floor_s : 0.0);
        }
        printf("  %-16s %10.1f   (host wall clock of one forward call, median)\n", "forward call",
               median(wall, iters) * 1e3);
    }
    free(samples);
    free(wall);
    for (int r = 0; r < ROTATE; r++) free(x[r]);
    free(out);
    free(out2);
    free(logits);
    free(ids);
    free(weights);
    return bad;
}

int main(int argc, char **argv) {
    int small = 0, iters = 30, nvfp4 = 0;
    uint64_t seed = 1;
    char tokens[256] = "1,64,4096", backends[256] = "cuda", checked[256] = "";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--small") == 0) small = 1, snprintf(tokens, sizeof tokens, "1,33");
        else if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc) snprintf(tokens, sizeof tokens, "%s", argv[++i]);
        else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) iters = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--backends") == 0 && i + 1 < argc) snprintf(backends, sizeof backends, "%s", argv[++i]);
        else if (strcmp(argv[i], "--check") == 0 && i + 1 < argc) snprintf(checked, sizeof checked, ",%s,", argv[++i]);
        else if (strcmp(argv[i], "--format") == 0 && i + 1 < argc && !strcmp(argv[i + 1], "nvfp4")) nvfp4 = 1, i++;
        else if (strcmp(argv[i], "--format") == 0 && i + 1 < argc && !strcmp(argv[i + 1], "mxfp4")) nvfp4 = 0, i++;
        else {
            fprintf(stderr, "usage: cuda-check [--small] [--tokens 1,64,4096] [--iters N] [--seed S] "
                            "[--backends cuda,cuda-wmma,cuda-gemv] [--check 1,64] [--format mxfp4|nvfp4]\n");
            return 2;
        }
    }
    if (iters < 1) iters = 1;
    char why[256] = "";
    if (!moe_backend_cuda.available(why, sizeof why)) {
        fprintf(stderr, "cuda-check: %s\n", why);
        return 2;
    }
    moe_config c = {4096, 2048, 256, 6, 2, 8.0f, true, true, MOE_ROUTED_MXFP4};
    if (small) c.D = 256, c.I = 128, c.R = 16, c.K = 4;
    if (nvfp4) c.routed_format = MOE_ROUTED_NVFP4;
    printf("layer D=%d I=%d R=%d K=%d S=%d %s, seed %llu\n", c.D, c.I, c.R, c.K, c.S,
           moe_routed_format_get(c.routed_format)->name, (unsigned long long)seed);
    moe_layer_data ld;
    moe_error err;
    moe_error_clear(&err);
    double t0 = now_ms();
    moe_split none = {MOE_SPLIT_NONE, 1, 0, 0};
    moe_shard sh;
    moe_options opt = moe_options_default();
    enum { MAX_VARIANTS = 8 };
    const moe_backend *variants[MAX_VARIANTS];
    void *states[MAX_VARIANTS] = {NULL};
    int n_variants = 0;
    moe_status st = random_layer(&c, seed, &ld, &err);
    if (!st) st = moe_shard_build(&c, &ld.w, &none, &sh, &err);
    for (char *name = strtok(backends, ","); name && !st; name = strtok(NULL, ",")) {
        const moe_backend *b = moe_backend_find(name);
        if (!b || !b->create || n_variants == MAX_VARIANTS) {
            fprintf(stderr, "cuda-check: --backends: %s is not a CUDA backend of this build (or "
                            "more than %d given)\n", name, MAX_VARIANTS);
            return 2;
        }
        variants[n_variants] = b;
        st = b->create(&sh, &opt, &states[n_variants], &err);
        n_variants += !st;
    }
    if (st) {
        fprintf(stderr, "cuda-check: %s\n", err.msg);
        return 1;
    }
    printf("layer made, sharded and uploaded in %.1f s\n", (now_ms() - t0) * 1e-3);
    int bad = 0;
    for (char *tok = strtok(tokens, ","); tok; tok = strtok(NULL, ",")) {
        char key[32];
        snprintf(key, sizeof key, ",%s,", tok);
        const bool check = !checked[0] || strstr(checked, key) != NULL;
        moe_run ref;
        memset(&ref, 0, sizeof ref);
        bool have_ref = false;
        for (int v = 0; v < n_variants; v++)
            bad |= run_tokens(variants[v], states[v], &c, &ld.w, atoi(tok), iters, seed, check,
                              &ref, &have_ref);
        if (have_ref) moe_run_free(&ref);
    }
    for (int v = 0; v < n_variants; v++) variants[v]->destroy(states[v]);
    moe_shard_free(&sh);
    moe_layer_data_free(&ld);
    printf("cuda-check: %s\n", bad ? "FAILED" : "all checks passed");
    return bad;
}
