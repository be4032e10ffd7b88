/*
 * test_lab.c: the kernel lab's CPU-side parts (harness/lab.h): the registry's CUDA variants,
 * the option parsing of `inkling-moe lab`, the stage table against contract.md [floors], the
 * CSV rows, the GPU part reporting SKIPPED (never a pass) where no GPU is, and the picture of a
 * CSV (harness/bench/plot.sh) drawn from a made-up fixture CSV.
 *
 * Rules: expected bytes and FLOPs are derived here from the contract's definitions; the tool is
 * $INKLING_BUILD/bin/inkling-moe (INKLING_BUILD default "build"); the tests that need the tool,
 * gnuplot or no GPU skip where those are not so.
 */
#include "test_support.h"

#include "../harness/lab.h"
#include "../harness/mutants.h"
#include "../common/layer_data.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char tool[1024], dir[256], out_path[300], err_path[300], csv_path[300];

static int setup(void **state) {
    (void)state;
    const char *b = getenv("INKLING_BUILD");
    snprintf(tool, sizeof tool, "%s/bin/inkling-moe", b && *b ? b : "build");
    snprintf(dir, sizeof dir, "/tmp/test_lab_XXXXXX");
    if (!mkdtemp(dir)) return -1;
    snprintf(out_path, sizeof out_path, "%s/out.txt", dir);
    snprintf(err_path, sizeof err_path, "%s/err.txt", dir);
    snprintf(csv_path, sizeof csv_path, "%s/lab.csv", dir);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Runs `inkling-moe lab ARGS` (ARGS: shell words), stdout and stderr to files; exit status. */
static int run_lab(const char *args) {
    if (access(tool, X_OK) != 0) skip();
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' lab %s > '%s' 2> '%s'", tool, args, out_path, err_path);
    int status = system(cmd);
    if (status == -1 || !WIFEXITED(status)) fail_msg("cannot run: %s", cmd);
    return WEXITSTATUS(status);
}

static bool gpu_here(void) {
    char why[256];
    return moe_backend_cuda.available(why, sizeof why);
}

/* "all" is every registry entry driven by the CUDA backend's forward, in registry order: the
 * CUDA names in a build with nvcc, none in one without; never ref or blas. */
static void test_variants_from_registry(void **state) {
    (void)state;
    const moe_backend *v[LAB_MAX_VARIANTS];
    const int n = lab_cuda_variants(v, LAB_MAX_VARIANTS);
    int expected = 0;
    for (int i = 0; i < moe_backend_count(); i++) {
        const moe_backend *b = moe_backend_at(i);
        if (b->forward && b->forward == moe_backend_cuda.forward) {
            assert_true(expected < n);
            assert_ptr_equal(v[expected], b);
            expected++;
        }
    }
    assert_int_equal(n, expected);
    if (moe_backend_cuda.forward) {
        assert_true(n >= 3); /* cuda, cuda-wmma, cuda-gemv at least */
        assert_ptr_equal(v[0], &moe_backend_cuda);
    } else {
        assert_int_equal(n, 0);
    }
    for (int i = 0; i < n; i++) {
        assert_ptr_not_equal(v[i], &moe_backend_ref);
        assert_ptr_not_equal(v[i], &moe_backend_blas);
    }
    static lab_plan p;
    moe_error err;
    assert_int_equal(lab_parse_variants("all", &p, &err), MOE_OK);
    assert_int_equal(p.n_variants, n);
    for (int i = 0; i < n; i++) assert_ptr_equal(p.variants[i], v[i]);
    assert_int_equal(lab_parse_variants("cuda-wmma,cuda", &p, &err), MOE_OK);
    assert_int_equal(p.n_variants, 2);
    assert_ptr_equal(p.variants[0], &moe_backend_cuda_wmma);
    assert_int_equal(lab_parse_variants("ref", &p, &err), MOE_ERR_ARG);
    assert_msg_has(err, "not a CUDA variant");
    assert_int_equal(lab_parse_variants("cuda,cuda", &p, &err), MOE_ERR_ARG);
    assert_msg_has(err, "twice");
    assert_int_equal(lab_parse_variants("nosuch", &p, &err), MOE_ERR_ARG);
    assert_msg_has(err, "nosuch");
}

static void test_token_lists(void **state) {
    (void)state;
    int t[LAB_MAX_T], n;
    moe_error err;
    assert_int_equal(lab_parse_tokens("1,8,64,512,4096", t, LAB_MAX_T, &n, &err), MOE_OK);
    assert_int_equal(n, 5);
    assert_int_equal(t[0], 1);
    assert_int_equal(t[4], 4096);
    const char *bad[] = {"", "0", "-1", "1,", ",1", "1,,2", "1x", "1000001", "+3", "1 2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (lab_parse_tokens(bad[i], t, LAB_MAX_T, &n, &err) != MOE_ERR_ARG)
            fail_msg("token list '%s' was accepted", bad[i]);
    assert_int_equal(lab_parse_tokens("1,2,3", t, 2, &n, &err), MOE_ERR_ARG);
}

/* The named shapes are contract.md [model]'s; a case with input features or a split is refused. */
static void test_shapes_and_cases(void **state) {
    (void)state;
    fuzz_case c;
    moe_error err;
    assert_int_equal(lab_shape_case("inkling-small", 5, MOE_ROUTED_MXFP4, &c, &err), MOE_OK);
    assert_int_equal(c.cfg.D, 4096);
    assert_int_equal(c.cfg.I, 2048);
    assert_int_equal(c.cfg.R, 256);
    assert_int_equal(c.cfg.K, 6);
    assert_int_equal(c.cfg.S, 2);
    assert_true(c.cfg.route_scale == 8.0f && c.cfg.has_gate_bias && c.cfg.has_global_scale);
    assert_int_equal(c.seed, 5);
    assert_int_equal(lab_shape_case("inkling", 1, MOE_ROUTED_NVFP4, &c, &err), MOE_OK);
    assert_int_equal(c.cfg.D, 6144);
    assert_int_equal(c.cfg.I, 3072);
    assert_int_equal(c.cfg.routed_format, MOE_ROUTED_NVFP4);
    assert_int_equal(lab_shape_case("huge", 1, MOE_ROUTED_MXFP4, &c, &err), MOE_ERR_ARG);

    const char *base = "D=64 I=64 R=8 K=2 S=1 T=3 fmt=mxfp4 bias=1 gscale=1 rs=8 pad=0 seed=3 ";
    char line[256];
    snprintf(line, sizeof line, "%ssplit=none feat=ties,e8m0", base);
    assert_int_equal(fuzz_case_parse(line, &c, &err), MOE_OK);
    assert_int_equal(lab_check_case(&c, &err), MOE_OK);
    const char *refused[] = {"split=none feat=nonfinite", "split=none feat=allhit", "split=none feat=neglogit",
                             "split=none feat=biastie", "split=none feat=file", "split=tp2 feat=none"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(line, sizeof line, "%s%s", base, refused[i]);
        assert_int_equal(fuzz_case_parse(line, &c, &err), MOE_OK);
        if (lab_check_case(&c, &err) != MOE_ERR_ARG) fail_msg("the lab took '%s'", refused[i]);
    }
    /* without input features, the case's input is fuzz_case_build's */
    snprintf(line, sizeof line, "%ssplit=none feat=ties input=2", base);
    assert_int_equal(fuzz_case_parse(line, &c, &err), MOE_OK);
    moe_layer_data ld;
    uint16_t *x_build, *x_input;
    assert_int_equal(fuzz_case_build(&c, &ld, &x_build, &err), MOE_OK);
    assert_int_equal(fuzz_case_input(&c, &x_input, &err), MOE_OK);
    assert_memory_equal(x_build, x_input, sizeof(uint16_t) * 3 * 64);
    free(x_build);
    free(x_input);
    moe_layer_data_free(&ld);
    assert_int_equal(lab_sample_count(&c, 1), 1);
    assert_int_equal(lab_sample_count(&c, 64), 4);
    assert_int_equal(lab_sample_count(&c, 4096), 8);
    c.sample = 2;
    assert_int_equal(lab_sample_count(&c, 64), 2);
}

/* The whole layer at T = 1 on Inkling-Small with the 6 experts one token selects: the bytes and
 * FLOPs of contract.md [floors] (13.37 MB a MXFP4 expert, 100.7 MB of sinks, the gate, x in
 * and out), and its 43.6 us floor at 4.2 TB/s. */
static void test_stage_table(void **state) {
    (void)state;
    const moe_config c = {4096, 2048, 256, 6, 2, 8.0f, true, true, MOE_ROUTED_MXFP4};
    lab_stage s[LAB_STAGE_COUNT];
    lab_stages(&c, 1, 6, s);
    const double D = 4096, I = 2048;
    const double expert = 3 * D * I * (0.5 + 1.0 / 32), sinks = 2 * 3 * D * I * 2, gate = 258 * D * 2;
    assert_true(fabs(expert - 13.37e6) < 0.01e6);
    assert_true(fabs(sinks - 100.7e6) < 0.1e6);
    assert_true(s[LAB_DEVICE].bytes == 6 * expert + sinks + gate + D * 2 + D * 4);
    const double flops = 2 * (258 * D + 6 * 3 * I * D + 2 * 3 * I * D);
    assert_true(fabs(flops - 0.405e9) < 0.001e9);
    assert_true(s[LAB_DEVICE].flops == flops);
    assert_true(fabs(lab_floor_s(&s[LAB_DEVICE]) * 1e6 - 43.6) < 0.05);
    assert_true(s[LAB_HOST].bytes > s[LAB_DEVICE].bytes);
    /* the expert stages read the selected experts' weights: 2/3 and 1/3 of each */
    assert_true(s[LAB_GEMM1].bytes >= 6 * expert * 2 / 3 && s[LAB_GEMM2].bytes >= 6 * expert / 3);
    /* at T = 4096 the layer is bound by the bf16 rate (contract.md [floors]: above ~1,600) */
    lab_stages(&c, 4096, 256, s);
    assert_true(s[LAB_DEVICE].flops / LAB_BF16_RATE > s[LAB_DEVICE].bytes / LAB_COPY_BW);
    for (int i = 0; i < LAB_STAGE_COUNT; i++) {
        assert_non_null(s[i].name);
        if (strchr(s[i].name, ',')) fail_msg("stage \"%s\" would break the CSV's columns", s[i].name);
    }
    assert_true(lab_focus_has(LAB_FOCUS_EXPERTS, LAB_GEMM1) && lab_focus_has(LAB_FOCUS_EXPERTS, LAB_GEMM2));
    assert_false(lab_focus_has(LAB_FOCUS_EXPERTS, LAB_GATE));
    assert_true(lab_focus_has(LAB_FOCUS_EXPERTS, LAB_DEVICE) && lab_focus_has(LAB_FOCUS_GATE, LAB_HOST));
    for (int i = 0; i < LAB_STAGE_COUNT; i++) assert_true(lab_focus_has(LAB_FOCUS_LAYER, (lab_stage_id)i));
}

/* A row has the header's columns; rates and x_floor follow from bytes, FLOPs and the median;
 * the spread's percentiles close the row. */
static void test_csv_row(void **state) {
    (void)state;
    const lab_stage s = {"GEMM1+SwiGLU", 4.2e6, 7.8e8};
    FILE *f = tmpfile();
    assert_non_null(f);
    const lab_times t = {2.0, 1.5, 3.25, 1.75, 2.5, 20};
    lab_csv_row(f, "inkling-small", "cuda-gemv", 8, &s, t);
    rewind(f);
    char line[512];
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    int commas = 0, header_commas = 0;
    for (const char *p = line; *p; p++) commas += *p == ',';
    for (const char *p = LAB_CSV_HEADER; *p; p++) header_commas += *p == ',';
    assert_int_equal(commas, header_commas);
    char shape[32], variant[32], stage[32];
    int T;
    double bytes, flops, us, floor_us, gbps, tflops, x, p10, p90;
    assert_int_equal(sscanf(line, "%31[^,],%31[^,],%d,%31[^,],%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf",
                            shape, variant, &T, stage, &bytes, &flops, &us, &floor_us, &gbps,
                            &tflops, &x, &p10, &p90), 13);
    assert_string_equal(shape, "inkling-small");
    assert_string_equal(variant, "cuda-gemv");
    assert_string_equal(stage, "GEMM1+SwiGLU");
    assert_int_equal(T, 8);
    assert_true(bytes == 4.2e6 && flops == 7.8e8 && us == 2.0);
    assert_true(fabs(floor_us - 1.0) < 1e-3);   /* 4.2 MB at 4.2 TB/s = 780 MFLOP at 780 TFLOP/s */
    assert_true(fabs(gbps - 2100.0) < 0.1);     /* 4.2 MB in 2 us */
    assert_true(fabs(tflops - 390.0) < 1e-3);   /* 780 MFLOP in 2 us */
    assert_true(fabs(x - 2.0) < 1e-3);
    assert_true(p10 == 1.5 && p90 == 3.25);
}

/* Median and percentiles of the timed calls, whatever their order: 1..11 ms give 6, 2 and 10,
 * quartiles 3.5 and 8.5 and a notch of 1.58 * 5 / sqrt(11); an even count interpolates; one call
 * is its own spread and has no notch. */
static void test_times_spread(void **state) {
    (void)state;
    float v[11] = {7, 3, 11, 1, 9, 5, 2, 10, 4, 8, 6};
    lab_times t = lab_times_of(v, 11);
    assert_true(t.median_us == 6.0 && t.p10_us == 2.0 && t.p90_us == 10.0);
    assert_true(t.p25_us == 3.5 && t.p75_us == 8.5 && t.calls == 11);
    assert_true(fabs(lab_median_notch(t) - 1.58 * 5.0 / sqrt(11.0)) < 1e-12);
    float w[4] = {4, 1, 3, 2};
    t = lab_times_of(w, 4);
    assert_true(fabs(t.median_us - 2.5) < 1e-12 && fabs(t.p10_us - 1.3) < 1e-6 &&
                fabs(t.p90_us - 3.7) < 1e-6);
    assert_true(fabs(t.p25_us - 1.75) < 1e-12 && fabs(t.p75_us - 3.25) < 1e-12);
    float one[1] = {5};
    t = lab_times_of(one, 1);
    assert_true(t.median_us == 5.0 && t.p10_us == 5.0 && t.p90_us == 5.0);
    assert_true(lab_median_notch(t) == 0.0);
}

/* Rows are appended only under this lab's header: a file that begins otherwise is refused with
 * one line naming it, and left as it was. */
static void test_csv_other_header_refused(void **state) {
    (void)state;
    char path[400], args[600];
    snprintf(path, sizeof path, "%s/old.csv", dir);
    const char *old = "shape,variant,T,stage,bytes\nkept,as,it,was,1\n";
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(old, f);
    fclose(f);
    snprintf(args, sizeof args, "--small --variant cuda --csv '%s'", path);
    const int rc = run_lab(args);
    const char *e = test_text_of(err_path);
    if (rc != 2 || !strstr(e, path) || strchr(e, '\n') != e + strlen(e) - 1)
        fail_msg("exit %d, stderr: %s", rc, e);
    assert_string_equal(test_text_of(path), old);
    /* a named pipe would hold the lab until something read it: refused at once */
    snprintf(path, sizeof path, "%s/pipe.csv", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    snprintf(args, sizeof args, "--small --variant cuda --csv '%s'", path);
    assert_int_equal(run_lab(args), 2);
    assert_non_null(strstr(test_text_of(err_path), "is not a regular file"));
}

/* Without a GPU the lab judges nothing: SKIPPED, exit 77, never a pass; the CSV holds the
 * header only. Bad options exit 2 with one line. */
static void test_command_skips_without_gpu(void **state) {
    (void)state;
    if (gpu_here()) skip(); /* a GPU host runs the real thing (make bench-cuda) */
    char args[512];
    snprintf(args, sizeof args, "--variant all --tokens 1,8 --iters 2 --check 1 --csv '%s'", csv_path);
    const int rc = run_lab(args);
    const char *out = test_text_of(out_path);
    if (rc != LAB_EXIT_SKIPPED) fail_msg("exit %d, output: %s", rc, out);
    assert_non_null(strstr(out, "SKIPPED"));
    assert_null(strstr(out, "PASS"));
    assert_null(strstr(out, "all checks passed"));
    assert_string_equal(test_text_of(csv_path), LAB_CSV_HEADER "\n");
    assert_int_equal(run_lab("--small --variant cuda"), LAB_EXIT_SKIPPED);
    assert_int_equal(run_lab("--case 'D=64 I=64 R=8 K=2 S=1 T=3 fmt=mxfp4 bias=1 gscale=1 rs=8 split=none "
                             "pad=0 seed=3 feat=ties' --stage experts"), LAB_EXIT_SKIPPED);
    assert_null(strstr(test_text_of(out_path), "PASS"));
}

static void test_command_usage(void **state) {
    (void)state;
    assert_int_equal(run_lab("--list"), 0);
    const char *out = test_text_of(out_path);
    const moe_backend *v[LAB_MAX_VARIANTS];
    const int n = lab_cuda_variants(v, LAB_MAX_VARIANTS);
    for (int i = 0; i < n; i++) assert_non_null(strstr(out, v[i]->name));
    const struct {
        const char *args, *frag;
    } bad[] = {
        {"--variant ref", "--variant"},
        {"--csv ''", "--csv"},
        {"--tokens 1,,8", "--tokens"},
        {"--tokens 1,8 --check 64", "--check"},
        {"--shape nosuch", "--shape"},
        {"--stage nosuch", "--stage"},
        {"--iters 0", "--iters"},
        {"--case 'D=64' --shape inkling", "--case"},
        {"--case 'D=64 I=64 R=8 K=2 S=1 T=3 fmt=mxfp4 bias=1 gscale=1 rs=8 split=none pad=0 seed=3 "
         "feat=nonfinite'", "nonfinite"},
        {"--variant cuda --backends cuda", "--backends"},
        {"--small --shape inkling", "--small"},
        {"--format bf16", "--format"},
        {"--routing flat", "--routing"},
        {"--routing uniform --case 'D=64 I=64 R=8 K=2 S=1 T=3 fmt=mxfp4 bias=1 gscale=1 rs=8 "
         "split=none pad=0 seed=3 feat=none'", "--routing"},
        {"stray", "stray"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = run_lab(bad[i].args);
        const char *e = test_text_of(err_path);
        if (rc != 2 || !strstr(e, bad[i].frag) || strchr(e, '\n') != e + strlen(e) - 1)
            fail_msg("lab %s: exit %d, stderr: %s", bad[i].args, rc, e);
    }
}

/* On a GPU host: every variant on the small shape at two T, checked against the reference and
 * timed; the CSV gets a row per (variant, T, stage). */
static void test_small_on_gpu(void **state) {
    (void)state;
    if (!gpu_here()) skip();
    char args[512];
    snprintf(args, sizeof args, "--small --variant all --iters 3 --csv '%s/gpu.csv'", dir);
    const int rc = run_lab(args);
    if (rc != 0) fail_msg("exit %d, output: %s", rc, test_text_of(out_path));
    char path[400];
    snprintf(path, sizeof path, "%s/gpu.csv", dir);
    const char *csv = test_text_of(path);
    int lines = 0;
    for (const char *p = csv; *p; p++) lines += *p == '\n';
    const moe_backend *v[LAB_MAX_VARIANTS];
    assert_int_equal(lines, 1 + lab_cuda_variants(v, LAB_MAX_VARIANTS) * 2 * LAB_STAGE_COUNT);
}

/* A timer for any backend, on the host: its forward is the call, "device" memory is host
 * memory, and each stage s takes a made-up 1 + s ms (the serving graph too); with it the whole
 * lab runs without a GPU. */
static moe_status host_flush(const moe_backend *be, void *state, moe_error *err) {
    (void)be, (void)state, (void)err;
    return MOE_OK;
}
static moe_status host_call(const moe_backend *be, void *state, int T, const uint16_t *x, float *out,
                            float ms[LAB_DEVICE + 1], moe_error *err) {
    for (int s = 0; ms && s <= LAB_DEVICE; s++) ms[s] = 1.0f + (float)s;
    return be->forward(state, T, x, out, NULL, err);
}
static moe_status host_call_on_device(const moe_backend *be, void *state, int T, const void *x_dev,
                                      void *out_dev, float *device_ms, moe_error *err) {
    if (device_ms) *device_ms = 1.0f + (float)LAB_SERVING_DEVICE;
    return be->forward(state, T, (const uint16_t *)x_dev, (float *)out_dev, NULL, err);
}
static moe_status host_alloc(void **p, size_t bytes, const void *src, moe_error *err) {
    *p = malloc(bytes + 1);
    if (!*p) return moe_fail(err, MOE_ERR_NOMEM, "test: out of memory");
    if (src) memcpy(*p, src, bytes);
    return MOE_OK;
}
static moe_status host_read(void *host, const void *dev, size_t bytes, moe_error *err) {
    (void)err;
    memcpy(host, dev, bytes);
    return MOE_OK;
}
/* Two made-up kernels: 0-10 us on stream 7, 4-12.5 us on stream 8. */
static moe_status host_timeline(const moe_backend *be, void *state, int T, const void *x_dev,
                                void *out_dev, lab_span *spans, int cap, int *n, moe_error *err) {
    (void)be, (void)state, (void)T, (void)x_dev, (void)out_dev, (void)err;
    const lab_span made_up[2] = {{"first_kernel<16>", 0.0, 10.0, 7}, {"second_kernel", 4.0, 12.5, 8}};
    *n = cap < 2 ? cap : 2;
    for (int i = 0; i < *n; i++) spans[i] = made_up[i];
    return MOE_OK;
}
/* Made-up transfers at pinned speed, 1 + s ms like the stages. */
static moe_status host_pinned_dma(const moe_backend *be, void *state, int T, float ms[2], moe_error *err) {
    (void)be, (void)state, (void)T, (void)err;
    ms[0] = 1.0f + (float)LAB_PINNED_UPLOAD, ms[1] = 1.0f + (float)LAB_PINNED_DOWNLOAD;
    return MOE_OK;
}
static const lab_timer host_timer = {host_flush, host_call,     host_call_on_device, host_alloc,
                                     host_read,  free,          host_timeline,       host_pinned_dma};
static const lab_timer host_timer_without_timeline = {host_flush, host_call, host_call_on_device,
                                                      host_alloc, host_read, free,
                                                      NULL, NULL};

/* What was written to the temporary stream f, read back from its start (one buffer, reused). */
static const char *stream_text(FILE *f) {
    static char text[65536];
    rewind(f);
    text[fread(text, 1, sizeof text - 1, f)] = '\0';
    return text;
}

/* A plan on a small case line's layer (S sinks, feature feat), driven by timer tm. */
static void small_plan(lab_plan *p, const lab_timer *tm, int S, const char *feat) {
    memset(p, 0, sizeof *p);
    p->timer = tm;
    char line[200];
    snprintf(line, sizeof line, "D=64 I=64 R=8 K=2 S=%d T=1 fmt=mxfp4 bias=1 gscale=1 rs=8 split=none "
             "pad=0 seed=7 feat=%s", S, feat);
    moe_error err;
    assert_int_equal(fuzz_case_parse(line, &p->layer, &err), MOE_OK);
    snprintf(p->shape, sizeof p->shape, "case");
}

/* --timeline prints each kernel of the timer's timeline with its start, end and length under
 * a header; a timer without one says so, and neither changes the run's verdict. */
static void test_timeline_printed_or_said_missing(void **state) {
    (void)state;
    static lab_plan p;
    small_plan(&p, NULL, 1, "none");
    p.tokens[0] = 3, p.n_tokens = 1, p.iters = 2, p.timeline = true;
    p.variants[0] = &moe_backend_ref, p.n_variants = 1;
    for (int with = 1; with >= 0; with--) {
        p.timer = with ? &host_timer : &host_timer_without_timeline;
        FILE *out = tmpfile();
        assert_non_null(out);
        const int rc = lab_run(&p, out, NULL);
        const char *text = stream_text(out);
        fclose(out);
        if (rc != 0) fail_msg("exit %d: %s", rc, text);
        if (with) {
            assert_non_null(strstr(text, "timeline of one serving call"));
            assert_non_null(strstr(text, "       0.0       10.0       10.0       7  first_kernel<16>"));
            assert_non_null(strstr(text, "       4.0       12.5        8.5       8  second_kernel"));
        } else {
            assert_non_null(strstr(text, "timeline: not made (this timer has none)"));
            /* nor can it time the transfers at pinned speed: not reported rather than 0 */
            assert_null(strstr(text, "pinned"));
        }
    }
}

/* The lab's whole run on the host timer: the reference as a variant passes every check at every
 * T (all tokens, then a sample of 4 and of 8) and gives a CSV row per (variant, T, stage) with
 * the timer's times; a planted bug fails its check, and the other T still run. */
static void test_whole_run_on_host_timer(void **state) {
    (void)state;
    static lab_plan p;
    small_plan(&p, &host_timer, 1, "ties");
    const int tokens[] = {1, 5, 70};
    for (int i = 0; i < 3; i++) p.tokens[i] = tokens[i], p.check[i] = true;
    p.n_tokens = 3;
    p.iters = 3;
    p.variants[0] = &moe_backend_ref;
    p.variants[1] = moe_mutant_find("gate_up_swap");
    assert_non_null(p.variants[1]);
    for (int n_variants = 1; n_variants <= 2; n_variants++) {
        p.n_variants = n_variants;
        FILE *out = tmpfile(), *csv = tmpfile();
        assert_true(out && csv);
        const int rc = lab_run(&p, out, csv);
        const char *text = stream_text(out);
        int passes = 0, fails = 0, rows = 0, gate_rows = 0;
        for (const char *q = text; (q = strstr(q, "envelope: PASS")); q++) passes++;
        for (const char *q = text; (q = strstr(q, "envelope: FAIL")); q++) fails++;
        assert_non_null(strstr(text, "five further runs bitwise identical: yes"));
        assert_non_null(strstr(text, "device-pointer call bitwise equal to the host call: yes"));
        assert_non_null(strstr(text, "sampled tokens:"));
        /* the tiles from the variant's own selection: T * K rows over R experts at T = 70 */
        assert_non_null(strstr(text, "tiles (real rows a tile, n a tile): "));
        assert_non_null(strstr(text, "tiers (tiles a kernel: real rows a tile, n a tile): "));
        assert_non_null(strstr(text, "experts used, rows ") && strstr(text, ", mean 17.5\n"));
        assert_non_null(strstr(text, "spread of the 3 calls, layer on device: p10 12000.0, "
                                     "median 12000.0, p90 12000.0 us"));
        assert_non_null(strstr(text, "spread of the 3 calls, serving graph: p10 15000.0, "
                                     "median 15000.0, p90 15000.0 us"));
        /* the host call against the serving graph plus the made-up pinned transfers:
         * 15 + 16 + 17 ms */
        assert_non_null(strstr(text, "forward call / (serving graph + transfers at pinned speed): "));
        assert_non_null(strstr(text, " against 48000.0)"));
        /* the summary: the made-up serving graph of 15 ms at every T, the second variant 0 %
         * from the first and within the spread */
        assert_non_null(strstr(text, "summary: serving graph"));
        assert_non_null(strstr(text, "15000.0 [15000.0, 15000.0]"));
        if (n_variants == 2) assert_non_null(strstr(text, "15000.0 [15000.0, 15000.0] +0.0% ~"));
        char line[512];
        int dma_rows = 0;
        rewind(csv);
        while (fgets(line, sizeof line, csv)) {
            rows++;
            if (strstr(line, ",gate GEMM,")) {
                gate_rows++;
                assert_non_null(strstr(line, ",2000.000,")); /* stage 1: 2 ms */
            }
            if (strstr(line, ",download out (pinned DMA),")) {
                dma_rows++;
                assert_non_null(strstr(line, ",17000.000,"));
            }
        }
        assert_int_equal(dma_rows, n_variants * 3);
        fclose(out);
        fclose(csv);
        assert_int_equal(passes, 3);
        assert_int_equal(rows, n_variants * 3 * LAB_STAGE_COUNT);
        assert_int_equal(gate_rows, n_variants * 3);
        if (n_variants == 1) {
            if (rc != 0) fail_msg("exit %d: %s", rc, text);
            assert_int_equal(fails, 0);
            assert_non_null(strstr(text, "all checks passed"));
        } else {
            assert_int_equal(rc, 1);
            assert_int_equal(fails, 3);
            assert_non_null(strstr(text, "lab: FAILED"));
        }
    }
}

/* The serving calls that the logging timer saw, by variant name, in order. */
static const char *serving_log[64];
static int serving_logged;
static moe_status logging_call_on_device(const moe_backend *be, void *state, int T, const void *x_dev,
                                         void *out_dev, float *device_ms, moe_error *err) {
    if (device_ms && serving_logged < 64) serving_log[serving_logged++] = be->name;
    return host_call_on_device(be, state, T, x_dev, out_dev, device_ms, err);
}
static const lab_timer logging_timer = {host_flush, host_call, logging_call_on_device, host_alloc,
                                        host_read,  free,      NULL,                   NULL};

/* The variants' timed calls are interleaved: round i (3 warm-up rounds, then iters timed) makes
 * one call of every variant, the first of the round moving on by one each round, so that no
 * variant is always timed first (docs/perf-cuda.md, forty-third run: the first-timed variant
 * read 1-3 us slower at T = 1). Three variants, iters 2: five rounds of three. */
static void test_timed_calls_interleaved(void **state) {
    (void)state;
    static lab_plan p;
    small_plan(&p, &logging_timer, 2, "none"); /* two sinks: the mutant below needs them */
    p.tokens[0] = 2, p.n_tokens = 1, p.iters = 2;
    p.variants[0] = &moe_backend_ref;
    p.variants[1] = moe_mutant_find("gate_up_swap");
    p.variants[2] = moe_mutant_find("sink_gamma_swap");
    assert_true(p.variants[1] && p.variants[2]);
    p.n_variants = 3;
    serving_logged = 0;
    FILE *out = tmpfile();
    assert_non_null(out);
    const int rc = lab_run(&p, out, NULL);
    fclose(out);
    assert_int_equal(rc, 0); /* nothing checked (check[0] false): each variant is only timed */
    assert_int_equal(serving_logged, 5 * 3);
    for (int round = 0; round < 5; round++)
        for (int j = 0; j < 3; j++)
            assert_string_equal(serving_log[3 * round + j], p.variants[(j + round) % 3]->name);
}

/* The summary: one row per T, each variant's serving graph, and after the first timed variant of
 * a T its difference in percent, "~" only where the medians' notches overlap. By hand, 16 calls
 * each, so a notch is 1.58 (p75 - p25) / 4: at T = 1 a's is 100 +- 0.395 and b's 100.5 +- 0.395
 * (they overlap: +0.5 % ~); c's 102 +- 0.395 is clear of a's although c's [p10, p90] reaches
 * into a's (+2.0 %, no ~). At T = 8 a was not timed, so b is the first and c (notch 0.79) is
 * against b (-50 %). Nothing timed: nothing printed. */
static void test_summary_against_the_first(void **state) {
    (void)state;
    const int tokens[2] = {1, 8};
    const char *const names[3] = {"a", "b", "c"};
    const lab_summary_cell cells[6] = {
        {true, {100.0, 99.0, 101.0, 99.5, 100.5, 16}},
        {true, {100.5, 99.5, 101.5, 100.0, 101.0, 16}},
        {true, {102.0, 99.0, 105.0, 101.5, 102.5, 16}},
        {false, {0, 0, 0, 0, 0, 0}},
        {true, {200.0, 190.0, 210.0, 199.0, 201.0, 16}},
        {true, {100.0, 95.0, 105.0, 99.0, 101.0, 16}},
    };
    FILE *out = tmpfile();
    assert_non_null(out);
    lab_print_summary(out, tokens, 2, names, 3, cells);
    const char *text = stream_text(out);
    fclose(out);
    assert_string_equal(text,
        "summary: serving graph, median us [p10, p90]; after the first variant timed at a T, the "
        "difference from it (~: the medians' notches overlap, not a result)\n"
        "        T  a                                   b                                   c\n"
        "        1  100.0 [99.0, 101.0]                 100.5 [99.5, 101.5] +0.5% ~         "
        "102.0 [99.0, 105.0] +2.0%\n"
        "        8  -                                   200.0 [190.0, 210.0]                "
        "100.0 [95.0, 105.0] -50.0%\n");

    const lab_summary_cell untimed[1] = {{false, {0, 0, 0, 0, 0, 0}}};
    out = tmpfile();
    assert_non_null(out);
    lab_print_summary(out, tokens, 1, names, 1, untimed);
    assert_int_equal(ftell(out), 0);
    fclose(out);
}

/* Tiles of an expert's rows, derived by hand: rows 0, 5, 130, 16, 33 (184 rows). bn = 128:
 * 0 + 1 + 2 + 1 + 1 = 5 tiles, n 16 + (128 + 16) + 16 + 48 = 224; bn = 32: 1 + 5 + 1 + 2 = 9
 * tiles, n 16 + (4 * 32 + 16) + 16 + (32 + 16) = 224; bn = 16: 1 + 9 + 1 + 3 = 14 tiles, all
 * of n 16. No rows: no tiles. */
static void test_tiles_of(void **state) {
    (void)state;
    const int rows[] = {0, 5, 130, 16, 33};
    lab_tiles t = lab_tiles_of(rows, 5, 128);
    assert_int_equal(t.tiles, 5);
    assert_true(fabs(t.rows_per_tile - 184.0 / 5) < 1e-12 && fabs(t.n_per_tile - 224.0 / 5) < 1e-12);
    t = lab_tiles_of(rows, 5, 32);
    assert_int_equal(t.tiles, 9);
    assert_true(fabs(t.rows_per_tile - 184.0 / 9) < 1e-12 && fabs(t.n_per_tile - 224.0 / 9) < 1e-12);
    t = lab_tiles_of(rows, 5, 16);
    assert_int_equal(t.tiles, 14);
    assert_true(fabs(t.n_per_tile - 16.0) < 1e-12);
    /* an expert of 20 rows: n 24 on the 32-row kernel (steps of 8), 32 on the 128-row one
     * (steps of 16), 16 on the 16-row one (two tiles) */
    const int twenty[1] = {20};
    assert_true(fabs(lab_tiles_of(twenty, 1, 32).n_per_tile - 24.0) < 1e-12);
    assert_true(fabs(lab_tiles_of(twenty, 1, 128).n_per_tile - 32.0) < 1e-12);
    t = lab_tiles_of(twenty, 1, 16);
    assert_true(t.tiles == 2 && fabs(t.n_per_tile - 16.0) < 1e-12);
    const int none[3] = {0, 0, 0};
    t = lab_tiles_of(none, 3, 16);
    assert_int_equal(t.tiles, 0);
    assert_true(t.rows_per_tile == 0.0 && t.n_per_tile == 0.0);
}

/* The tiers share out the table's tiles by the rows left from each tile's first, worked by hand
 * for the rows above. Tiers 128,32,16 on 128-row tiles: 130 rows make a tile of 128 rows left
 * (128-row kernel) and one of 2 (16-row kernel); 33 rows one tile on the 128-row kernel (n 48);
 * 5 and 16 rows one tile each on the 16-row kernel; none on the 32-row kernel. Tiers 32,16 on
 * 32-row tiles: 130 rows make four full tiles (130, 98, 66, 34 left) and one of 2, 33 rows one
 * full tile and one of 1. */
static void test_tiers_share_the_tiles(void **state) {
    (void)state;
    const int rows[] = {0, 5, 130, 16, 33};
    lab_tiles t = lab_tier_of(rows, 5, 128, 32, INT_MAX);
    assert_int_equal(t.tiles, 2);
    assert_true(fabs(t.rows_per_tile - 161.0 / 2) < 1e-12 && fabs(t.n_per_tile - 176.0 / 2) < 1e-12);
    assert_int_equal(lab_tier_of(rows, 5, 128, 16, 32).tiles, 0);
    t = lab_tier_of(rows, 5, 128, 0, 16);
    assert_int_equal(t.tiles, 3);
    assert_true(fabs(t.rows_per_tile - 23.0 / 3) < 1e-12 && fabs(t.n_per_tile - 16.0) < 1e-12);
    t = lab_tier_of(rows, 5, 32, 16, INT_MAX);
    assert_int_equal(t.tiles, 5);
    assert_true(fabs(t.rows_per_tile - 32.0) < 1e-12 && fabs(t.n_per_tile - 32.0) < 1e-12);
    t = lab_tier_of(rows, 5, 32, 0, 16);
    assert_int_equal(t.tiles, 4);
    assert_true(fabs(t.rows_per_tile - 6.0) < 1e-12 && fabs(t.n_per_tile - 16.0) < 1e-12);
    /* 20 rows left on a 128-row table: the 32-row kernel's, at its n of 24 */
    const int twenty[1] = {20};
    t = lab_tier_of(twenty, 1, 128, 16, 32);
    assert_true(t.tiles == 1 && fabs(t.n_per_tile - 24.0) < 1e-12);
}

/* Routed on the host, every token's K slots land on K different experts: the rows add up to
 * T * K and no expert holds more than T. The command prints both lines at every T. */
static void test_tiles_routed_on_host(void **state) {
    (void)state;
    moe_error err;
    fuzz_case c;
    assert_int_equal(lab_shape_case("small", 3, MOE_ROUTED_MXFP4, &c, &err), MOE_OK);
    moe_layer_data ld;
    uint16_t *x = NULL;
    c.T = 0;
    assert_int_equal(fuzz_case_build(&c, &ld, &x, &err), MOE_OK);
    free(x);
    moe_split none = {MOE_SPLIT_NONE, 1, 0, 0};
    moe_shard sh;
    assert_int_equal(moe_shard_build(&c.cfg, &ld.w, &none, &sh, &err), MOE_OK);
    c.T = 77;
    assert_int_equal(fuzz_case_input(&c, &x, &err), MOE_OK);
    int rows[64];
    assert_true(c.cfg.R <= 64);
    assert_int_equal(lab_expert_rows(&sh, c.T, x, rows, &err), MOE_OK);
    long total = 0;
    for (int e = 0; e < c.cfg.R; e++) {
        assert_true(rows[e] >= 0 && rows[e] <= c.T);
        total += rows[e];
    }
    assert_int_equal(total, (long)c.T * c.cfg.K);
    free(x);
    moe_shard_free(&sh);
    moe_layer_data_free(&ld);

    const int rc = run_lab("--small --tokens 8,77 --tiles");
    const char *text = test_text_of(out_path);
    if (rc != 0) fail_msg("exit %d: %s", rc, text);
    assert_non_null(strstr(text, "T = 8 (expected"));
    assert_non_null(strstr(text, "T = 77 (expected"));
    assert_non_null(strstr(text, "tiles (real rows a tile, n a tile): "));
    assert_non_null(strstr(text, " of 128 rows ("));
    assert_non_null(strstr(text, "tiers (tiles a kernel: real rows a tile, n a tile): 128,32,16: "));
    assert_non_null(strstr(text, "; 32,16: "));
}

/* --routing uniform is the shape without its gate bias (bias=0 in the layer's line, which
 * reproduces it), under a label of its own so that its CSV rows never pair with the shape's;
 * the default, skewed, keeps the shape's bias. */
static void test_uniform_routing(void **state) {
    (void)state;
    const struct {
        const char *args, *layer;
    } runs[] = {
        {"--small --tokens 64 --tiles", "layer small: D=256 I=128 R=16 K=4 S=2 T=0 fmt=mxfp4 bias=1 "},
        {"--small --tokens 64 --tiles --routing skewed", "layer small: D=256 I=128 R=16 K=4 S=2 T=0 fmt=mxfp4 bias=1 "},
        {"--small --tokens 64 --tiles --routing uniform",
         "layer small-uniform: D=256 I=128 R=16 K=4 S=2 T=0 fmt=mxfp4 bias=0 "},
        {"--shape small --format nvfp4 --tokens 64 --tiles --routing uniform",
         "layer small-nvfp4-uniform: D=256 I=128 R=16 K=4 S=2 T=0 fmt=nvfp4 bias=0 "},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        const int rc = run_lab(runs[i].args);
        const char *text = test_text_of(out_path);
        if (rc != 0 || strncmp(text, runs[i].layer, strlen(runs[i].layer)) != 0)
            fail_msg("lab %s: exit %d, output: %s", runs[i].args, rc, text);
        assert_non_null(strstr(text, "T = 64 (expected 16.0 rows an expert)"));
    }
}

/* The picture from a CSV alone: the fixture's (made-up numbers, never a measurement) gives one
 * PNG per (shape, variant). */
static void test_plot_from_fixture(void **state) {
    (void)state;
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) skip();
    if (access("harness/bench/plot.sh", R_OK) != 0 || access("tests/fixtures/bench-cuda-fixture.csv", R_OK) != 0)
        skip(); /* not run from the repository root */
    char cmd[700], png[400];
    snprintf(cmd, sizeof cmd, "sh harness/bench/plot.sh tests/fixtures/bench-cuda-fixture.csv '%s/fx' > '%s' 2>&1",
             dir, out_path);
    if (system(cmd) != 0) fail_msg("plot.sh failed: %s", test_text_of(out_path));
    snprintf(png, sizeof png, "%s/fx-fixture-fixture-variant.png", dir);
    FILE *f = fopen(png, "rb");
    assert_non_null(f);
    unsigned char magic[8] = {0};
    assert_int_equal(fread(magic, 1, 8, f), 8);
    fclose(f);
    assert_memory_equal(magic, "\x89PNG\r\n\x1a\n", 8);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_variants_from_registry), cmocka_unit_test(test_token_lists),
        cmocka_unit_test(test_shapes_and_cases),       cmocka_unit_test(test_stage_table),
        cmocka_unit_test(test_csv_row),                cmocka_unit_test(test_times_spread),
        cmocka_unit_test(test_csv_other_header_refused), cmocka_unit_test(test_command_skips_without_gpu),
        cmocka_unit_test(test_command_usage),          cmocka_unit_test(test_whole_run_on_host_timer),
        cmocka_unit_test(test_timeline_printed_or_said_missing),
        cmocka_unit_test(test_timed_calls_interleaved), cmocka_unit_test(test_summary_against_the_first),
        cmocka_unit_test(test_small_on_gpu),
        cmocka_unit_test(test_plot_from_fixture),      cmocka_unit_test(test_tiles_of),
        cmocka_unit_test(test_tiers_share_the_tiles), cmocka_unit_test(test_tiles_routed_on_host),
        cmocka_unit_test(test_uniform_routing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
