/*
 * bench_cpu.c: times the OpenBLAS path (and, optionally, the reference) on the Inkling-Small
 * layer (D 4096, I 2048, R 256, K 6, S 2, MXFP4, random weights) for a list of token counts and
 * thread counts, and relates its rate to the machine's sgemm rate and memory read bandwidth
 * measured in the same run with the same thread count.
 *
 * Rules (method in docs/perf-cpu.md):
 *   - every figure is measured in this run; the blas path's time is the median of --reps calls
 *     after one warm-up call; the reference's is one call (skipped with --ref-tokens 0);
 *   - the reference computes token by token, so for large T it may be timed on the first
 *     `--ref-tokens N` tokens and scaled by T / N; the output says when it was;
 *   - --routed-only times the layer without sinks (S = 0): the gate, the routing and the routed
 *     experts, the part whose cost depends on the group sizes;
 *   - layer FLOPs per token: 2*D*(R+S) (gate) + (K+S) * 3 * 2*I*D (six GEMM passes over D x I);
 *   - weight bytes per call: the distinct routed experts the call touched times an expert's
 *     MXFP4 bytes, plus the bf16 sinks and the gate as the path reads them (fp32 copy);
 *   - --group-sizes N1,N2,...: the cross-over between the fused route and the sgemm route. A
 *     layer of 8 experts, all chosen by every token (D 4096, I 2048, R = K = 8, S 0), run with
 *     T = N tokens gives every expert a group of N rows; its time on each route forced
 *     (blas_set_fused_below), medians of --reps calls taken in alternation;
 *   - sgemm rate: cblas_sgemm 2048^3 with OpenBLAS on the same thread count, best of 3; memory
 *     read bandwidth: a sum over 1 GiB on the same thread count, best of 3.
 * Usage: bench_cpu [--threads N1,N2,...] [--tokens T1,T2,...] [--reps N] [--ref-tokens N]
 *                  [--routed-only] [--group-sizes N1,N2,...]
 */
#include "../../../common/layer_data.h"
#include "../../../common/moe.h"
#include "../blas_internal.h"

#include <cblas.h>
#include <limits.h>
#undef I /* complex.h's, pulled in by cblas.h: it would shadow moe_config's field I */
#include <omp.h>
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

/* GB/s of reading `bytes` with `threads` OpenMP threads (a sum of 64-bit words in four
 * independent chains per thread), best of 3. */
static double read_rate(size_t bytes, int threads) {
    const size_t words = bytes / sizeof(uint64_t);
    uint64_t *src = malloc(words * sizeof(uint64_t));
    double best = 0.0;
    if (src) {
        for (size_t i = 0; i < words; i++) src[i] = i;
        for (int rep = 0; rep < 3; rep++) {
            uint64_t total = 0;
            double t0 = now_s();
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : total)
            for (size_t i = 0; i < words; i += 4) total += src[i] ^ src[i + 1] ^ (src[i + 2] + src[i + 3]);
            double rate = (double)(words * sizeof(uint64_t)) / (now_s() - t0) / 1e9;
            if (rate > best && total != 1) best = rate; /* total used so the loop stays */
        }
    }
    free(src);
    return best;
}

static int parse_list(const char *s, int *list, int max) {
    int n = 0;
    while (s && *s && n < max) {
        list[n++] = atoi(s);
        s = strchr(s, ',');
        if (s) s++;
    }
    return n;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median time of reps forward calls after one warm-up; ids [T, K] from the warm-up. */
static int time_forward(moe_layer *layer, int T, const uint16_t *x, float *out, int32_t *ids,
                        float *weights, int reps, double *median_s, moe_error *err) {
    moe_stages st = {NULL, ids, weights, NULL, NULL, NULL, NULL, 0};
    if (moe_layer_forward(layer, T, x, out, &st, err)) return 1;
    double times[64];
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        if (moe_layer_forward(layer, T, x, out, NULL, err)) return 1;
        times[r] = now_s() - t0;
    }
    qsort(times, (size_t)reps, sizeof(double), cmp_double);
    *median_s = reps % 2 ? times[reps / 2] : 0.5 * (times[reps / 2 - 1] + times[reps / 2]);
    return 0;
}

static int distinct_experts(const int32_t *ids, int n, int R) {
    unsigned char *touched = calloc((size_t)R, 1);
    int distinct = 0;
    for (int j = 0; touched && j < n; j++)
        if (!touched[ids[j]]) touched[ids[j]] = 1, distinct++;
    free(touched);
    return distinct;
}

/* The unsplit shard of a random layer of shape cfg (seed 1); 0, or 1 once the reason is
 * printed. The layer's data is freed: the shard holds its own copy. */
static int random_shard(const moe_config *cfg, moe_shard *shard) {
    moe_error err = {0};
    moe_layer_data ld;
    if (moe_layer_data_random(cfg, 1, &ld, &err)) return die("random layer", &err);
    const moe_split whole = {MOE_SPLIT_NONE, 1, 0, 0};
    const int bad = moe_shard_build(cfg, &ld.w, &whole, shard, &err) != MOE_OK;
    moe_layer_data_free(&ld);
    return bad ? die("shard", &err) : 0;
}

/* The --group-sizes sweep (see the rules above). */
static int group_sweep(const int *sizes, int n_sizes, const int *thread_list, int n_threads,
                       int reps) {
    const moe_config cfg = {4096, 2048, 8, 8, 0, 8.0f, true, true, MOE_ROUTED_MXFP4};
    moe_error err = {0};
    moe_shard shard;
    if (random_shard(&cfg, &shard)) return 1;
    printf("\n%4s %6s %12s %12s %8s\n", "thr", "rows", "fused ms", "sgemm ms", "ratio");
    for (int ti = 0; ti < n_threads; ti++) {
        moe_options opt = moe_options_default();
        opt.n_threads = thread_list[ti] > 0 ? thread_list[ti] : omp_get_max_threads();
        moe_layer *blas = NULL;
        if (moe_layer_create(&moe_backend_blas, &shard, &opt, &blas, &err)) return die("blas layer", &err);
        for (int i = 0; i < n_sizes; i++) {
            const int T = sizes[i];
            uint16_t *x = malloc((size_t)T * cfg.D * sizeof(uint16_t));
            float *out = malloc((size_t)T * cfg.D * sizeof(float));
            int32_t *ids = malloc((size_t)T * cfg.K * sizeof(int32_t));
            float *weights = malloc((size_t)T * cfg.K * sizeof(float));
            if (!x || !out || !ids || !weights) return die("buffers", NULL);
            moe_random_input(T, cfg.D, 7, x);
            double fused[64], sgemm[64];
            const int n = reps < 1 ? 5 : (reps > 64 ? 64 : reps);
            for (int r = 0; r < n; r++) { /* alternate, so that both see the same load */
                blas_set_fused_below(INT_MAX);
                if (time_forward(blas, T, x, out, ids, weights, 1, &fused[r], &err)) return die("fused", &err);
                blas_set_fused_below(0);
                if (time_forward(blas, T, x, out, ids, weights, 1, &sgemm[r], &err)) return die("sgemm", &err);
            }
            qsort(fused, (size_t)n, sizeof(double), cmp_double);
            qsort(sgemm, (size_t)n, sizeof(double), cmp_double);
            printf("%4d %6d %12.2f %12.2f %8.2f\n", opt.n_threads, T, 1e3 * fused[n / 2],
                   1e3 * sgemm[n / 2], sgemm[n / 2] / fused[n / 2]);
            fflush(stdout);
            free(x), free(out), free(ids), free(weights);
        }
        moe_layer_destroy(blas);
    }
    blas_set_fused_below(-1);
    moe_shard_free(&shard);
    return 0;
}

int main(int argc, char **argv) {
    int thread_list[8] = {0}, n_threads = 1, ref_tokens = 16, tokens[16] = {1, 64, 512};
    int n_tokens = 3, reps = 0;
    bool routed_only = false;
    int group_sizes[16], n_group_sizes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) n_threads = parse_list(argv[++i], thread_list, 8);
        else if (!strcmp(argv[i], "--ref-tokens") && i + 1 < argc) ref_tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) n_tokens = parse_list(argv[++i], tokens, 16);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--routed-only")) routed_only = true;
        else if (!strcmp(argv[i], "--group-sizes") && i + 1 < argc)
            n_group_sizes = parse_list(argv[++i], group_sizes, 16);
        else {
            fprintf(stderr, "usage: bench_cpu [--threads N1,N2,...] [--tokens T1,T2,...] [--reps N] "
                            "[--ref-tokens N] [--routed-only] [--group-sizes N1,N2,...]\n");
            return 2;
        }
    }
    if (n_group_sizes > 0) return group_sweep(group_sizes, n_group_sizes, thread_list, n_threads, reps);
    moe_config cfg = {4096, 2048, 256, 6, 2, 8.0f, true, true, MOE_ROUTED_MXFP4};
    if (routed_only) cfg.S = 0;
    const double hidden = cfg.D, width = cfg.I, gate_rows = cfg.R + cfg.S;
    const double flop_per_token = 2.0 * hidden * gate_rows + (cfg.K + cfg.S) * 3.0 * 2.0 * width * hidden;
    const double expert_bytes = 3.0 * width * hidden * (0.5 + 1.0 / 32.0);
    const double fixed_bytes = cfg.S * 3.0 * width * hidden * 2.0 + gate_rows * hidden * 4.0;

    printf("bench-cpu: generating the random Inkling-Small layer (MXFP4, S = %d, %.2f GB)...\n",
           cfg.S, (cfg.R * expert_bytes + fixed_bytes) / 1e9);
    fflush(stdout);
    moe_error err = {0};
    moe_shard shard;
    if (random_shard(&cfg, &shard)) return 1;

    printf("\n%4s %6s %10s %10s %8s %9s %7s %8s %8s %7s %8s  %s\n", "thr", "T", "ref s",
           "blas s", "ratio", "GFLOP/s", "sgemm", "%sgemm", "wt GB/s", "read", "%read",
           "reference timing");
    for (int ti = 0; ti < n_threads; ti++) {
        const int threads = thread_list[ti] > 0 ? thread_list[ti] : omp_get_max_threads();
        openblas_set_num_threads(threads);
        const double sgemm_gflops = sgemm_rate(2048);
        const double read_gbs = read_rate((size_t)1 << 30, threads);
        moe_options opt = moe_options_default();
        opt.n_threads = threads;
        moe_layer *ref = NULL, *blas = NULL;
        if (moe_layer_create(&moe_backend_ref, &shard, &opt, &ref, &err)) return die("ref layer", &err);
        if (moe_layer_create(&moe_backend_blas, &shard, &opt, &blas, &err)) return die("blas layer", &err);
        for (int i = 0; i < n_tokens; i++) {
            const int T = tokens[i];
            if (T < 1) continue;
            uint16_t *x = malloc((size_t)T * cfg.D * sizeof(uint16_t));
            float *out = malloc((size_t)T * cfg.D * sizeof(float));
            int32_t *ids = malloc((size_t)T * cfg.K * sizeof(int32_t));
            float *weights = malloc((size_t)T * (cfg.K + cfg.S) * sizeof(float));
            if (!x || !out || !ids || !weights) return die("buffers", NULL);
            moe_random_input(T, cfg.D, 100 + (uint64_t)T, x);
            double blas_s = 0.0;
            const int n_reps = reps > 0 ? reps : (T >= 512 ? 3 : 5);
            if (time_forward(blas, T, x, out, ids, weights, n_reps, &blas_s, &err))
                return die("blas forward", &err);
            const int distinct = distinct_experts(ids, T * cfg.K, cfg.R);

            const int ref_T = T < ref_tokens ? T : ref_tokens;
            double ref_s = 0.0;
            char how[64] = "not timed";
            if (ref_T > 0) {
                double t0 = now_s();
                if (moe_layer_forward(ref, ref_T, x, out, NULL, &err)) return die("ref forward", &err);
                ref_s = (now_s() - t0) * (double)T / ref_T;
                if (ref_T == T) snprintf(how, sizeof how, "all %d tokens", T);
                else snprintf(how, sizeof how, "%d tokens, scaled x%.0f", ref_T, (double)T / ref_T);
            }
            const double gflops = flop_per_token * T / blas_s / 1e9;
            const double weight_gbs = (distinct * expert_bytes + fixed_bytes) / blas_s / 1e9;
            printf("%4d %6d %10.3f %10.4f %8.1f %9.1f %7.1f %7.1f%% %8.2f %7.1f %7.1f%%  %s (%d experts)\n",
                   threads, T, ref_s, blas_s, ref_T > 0 ? ref_s / blas_s : 0.0, gflops, sgemm_gflops,
                   100.0 * gflops / sgemm_gflops, weight_gbs, read_gbs, 100.0 * weight_gbs / read_gbs,
                   how, distinct);
            fflush(stdout);
            free(x);
            free(out);
            free(ids);
            free(weights);
        }
        moe_layer_destroy(ref);
        moe_layer_destroy(blas);
    }
    moe_shard_free(&shard);
    return 0;
}
