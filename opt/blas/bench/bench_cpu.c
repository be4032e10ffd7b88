/*
 * bench_cpu.c: times the OpenBLAS path against the reference on the Inkling-Small layer
 * (D 4096, I 2048, R 256, K 6, S 2, MXFP4, random weights) at T = 1, 64, 512, and relates the
 * OpenBLAS path's rate to the machine's sgemm rate and memory bandwidth measured in the same run.
 *
 * Rules (method in docs/perf-cpu.md):
 *   - every figure is measured in this run; the blas path's time is the best of several calls
 *     after one warm-up call, the reference's is one call;
 *   - the reference computes token by token, so for large T it may be timed on the first
 *     `--ref-tokens N` tokens and scaled by T / N; the output says when it was;
 *   - layer FLOPs per token: 2*D*(R+S) (gate) + (K+S) * 3 * 2*I*D (six GEMM passes over D x I);
 *   - weight bytes per call: the distinct routed experts the call touched times an expert's
 *     MXFP4 bytes, plus the bf16 sinks and the gate as the path reads them (fp32 copy);
 *   - sgemm rate: cblas_sgemm 2048^3 with OpenBLAS on all threads, best of 3; memory bandwidth:
 *     memcpy of 1 GiB, (bytes read + bytes written) / time, best of 3.
 * Usage: bench_cpu [--threads N] [--ref-tokens N] [--tokens T1,T2,...]
 */
#include "../../../common/layer_data.h"
#include "../../../common/moe.h"

#include <cblas.h>
#undef I /* complex.h's, pulled in by cblas.h: it would shadow moe_config's field I */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int die(const char *what, const moe_error *err) {
    fprintf(stderr, "bench_cpu: %s: %s\n", what, err ? err->msg : "out of memory");
    return 1;
}

/* GFLOP/s of OpenBLAS's sgemm on n x n x n with all its threads, best of 3. */
static double sgemm_rate(int n) {
    float *a = malloc((size_t)n * n * sizeof(float)), *b = malloc((size_t)n * n * sizeof(float));
    float *c = malloc((size_t)n * n * sizeof(float));
    double best = 0.0;
    if (a && b && c) {
        for (size_t i = 0; i < (size_t)n * n; i++) a[i] = b[i] = (float)(i % 17) * 0.125f - 1.0f;
        for (int rep = 0; rep < 4; rep++) {
            double t0 = now_s();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
            double rate = 2.0 * n * (double)n * n / (now_s() - t0) / 1e9;
            if (rep > 0 && rate > best) best = rate; /* the first call warms up */
        }
    }
    free(a);
    free(b);
    free(c);
    return best;
}

/* GB/s of memcpy over bytes (read + written), best of 3. */
static double memcpy_rate(size_t bytes) {
    char *src = malloc(bytes), *dst = malloc(bytes);
    double best = 0.0;
    if (src && dst) {
        memset(src, 1, bytes);
        memset(dst, 2, bytes);
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now_s();
            memcpy(dst, src, bytes);
            double rate = 2.0 * (double)bytes / (now_s() - t0) / 1e9;
            if (rate > best) best = rate;
        }
    }
    free(src);
    free(dst);
    return best;
}

static int parse_tokens(const char *s, int *tokens, int max) {
    int n = 0;
    while (s && *s && n < max) {
        tokens[n++] = atoi(s);
        s = strchr(s, ',');
        if (s) s++;
    }
    return n;
}

int main(int argc, char **argv) {
    int threads = 0, ref_tokens = 16, tokens[8] = {1, 64, 512}, n_tokens = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ref-tokens") && i + 1 < argc) ref_tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) n_tokens = parse_tokens(argv[++i], tokens, 8);
        else {
            fprintf(stderr, "usage: bench_cpu [--threads N] [--ref-tokens N] [--tokens T1,T2,...]\n");
            return 2;
        }
    }
    if (ref_tokens < 1) ref_tokens = 1;
    const moe_config cfg = {4096, 2048, 256, 6, 2, 8.0f, true, true, MOE_ROUTED_MXFP4};
    const double hidden = cfg.D, width = cfg.I, gate_rows = cfg.R + cfg.S;
    const double flop_per_token = 2.0 * hidden * gate_rows + (cfg.K + cfg.S) * 3.0 * 2.0 * width * hidden;
    const double expert_bytes = 3.0 * width * hidden * (0.5 + 1.0 / 32.0);
    const double fixed_bytes = cfg.S * 3.0 * width * hidden * 2.0 + gate_rows * hidden * 4.0;

    printf("bench-cpu: measuring the sgemm rate (2048^3, OpenBLAS threads %d)...\n",
           openblas_get_num_threads());
    fflush(stdout);
    const double sgemm_gflops = sgemm_rate(2048);
    printf("  sgemm: %.1f GFLOP/s\n", sgemm_gflops);
    printf("bench-cpu: measuring memory bandwidth (memcpy 1 GiB)...\n");
    fflush(stdout);
    const double mem_gbs = memcpy_rate((size_t)1 << 30);
    printf("  memcpy: %.1f GB/s (read + write)\n", mem_gbs);

    printf("bench-cpu: generating the random Inkling-Small layer (MXFP4, %.2f GB)...\n",
           (cfg.R * expert_bytes + fixed_bytes) / 1e9);
    fflush(stdout);
    moe_error err = {0};
    moe_layer_data ld;
    if (moe_layer_data_random(&cfg, 1, &ld, &err)) return die("random layer", &err);
    const moe_split whole = {MOE_SPLIT_NONE, 1, 0, 0};
    moe_shard shard;
    if (moe_shard_build(&cfg, &ld.w, &whole, &shard, &err)) return die("shard", &err);
    moe_layer_data_free(&ld); /* the shard holds its own copy */
    moe_options opt = moe_options_default();
    opt.n_threads = threads;
    moe_layer *ref = NULL, *blas = NULL;
    if (moe_layer_create(&moe_backend_ref, &shard, &opt, &ref, &err)) return die("ref layer", &err);
    if (moe_layer_create(&moe_backend_blas, &shard, &opt, &blas, &err)) return die("blas layer", &err);

    printf("\n%6s %12s %12s %8s %10s %8s %10s %8s  %s\n", "T", "ref s", "blas s", "ratio",
           "GFLOP/s", "%sgemm", "weight GB/s", "%memcpy", "reference timing");
    for (int i = 0; i < n_tokens; i++) {
        const int T = tokens[i];
        if (T < 1) continue;
        uint16_t *x = malloc((size_t)T * cfg.D * sizeof(uint16_t));
        float *out = malloc((size_t)T * cfg.D * sizeof(float));
        int32_t *ids = malloc((size_t)T * cfg.K * sizeof(int32_t));
        float *weights = malloc((size_t)T * (cfg.K + cfg.S) * sizeof(float));
        if (!x || !out || !ids || !weights) return die("buffers", NULL);
        moe_random_input(T, cfg.D, 100 + (uint64_t)T, x);
        moe_stages st = {NULL, ids, weights, NULL, NULL, NULL, NULL, 0};

        printf("  T=%d: blas warm-up...\n", T);
        fflush(stdout);
        if (moe_layer_forward(blas, T, x, out, &st, &err)) return die("blas forward", &err);
        const int reps = T >= 512 ? 2 : 3;
        double blas_s = 1e30;
        for (int r = 0; r < reps; r++) {
            double t0 = now_s();
            if (moe_layer_forward(blas, T, x, out, NULL, &err)) return die("blas forward", &err);
            double dt = now_s() - t0;
            if (dt < blas_s) blas_s = dt;
        }
        unsigned char *touched = calloc((size_t)cfg.R, 1);
        int distinct = 0;
        for (int j = 0; touched && j < T * cfg.K; j++)
            if (!touched[ids[j]]) touched[ids[j]] = 1, distinct++;
        free(touched);

        const int ref_T = T < ref_tokens ? T : ref_tokens;
        printf("  T=%d: blas %.4f s; reference on %d token(s)...\n", T, blas_s, ref_T);
        fflush(stdout);
        double t0 = now_s();
        if (moe_layer_forward(ref, ref_T, x, out, NULL, &err)) return die("ref forward", &err);
        const double ref_s = (now_s() - t0) * (double)T / ref_T;

        const double gflops = flop_per_token * T / blas_s / 1e9;
        const double weight_gbs = (distinct * expert_bytes + fixed_bytes) / blas_s / 1e9;
        char how[64];
        if (ref_T == T) snprintf(how, sizeof how, "all %d tokens", T);
        else snprintf(how, sizeof how, "%d tokens, scaled x%.0f", ref_T, (double)T / ref_T);
        printf("%6d %12.3f %12.4f %8.1f %10.1f %7.1f%% %10.1f %7.1f%%  %s (%d experts)\n", T, ref_s,
               blas_s, ref_s / blas_s, gflops, 100.0 * gflops / sgemm_gflops, weight_gbs,
               100.0 * weight_gbs / mem_gbs, how, distinct);
        fflush(stdout);
        free(x);
        free(out);
        free(ids);
        free(weights);
    }
    moe_layer_destroy(ref);
    moe_layer_destroy(blas);
    moe_shard_free(&shard);
    return 0;
}
