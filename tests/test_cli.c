/*
 * test_cli.c: `inkling-moe run` as a user meets it (contract.md [cli.run]), through posix_spawn.
 *
 * Rules checked: a good run exits 0 and writes out/topk_ids/topk_weights (and logits with
 * --stages) with the right dtypes and shapes, matching the library called directly; every
 * broken input (missing --model, truncated file, bad header, each missing tensor, each wrong
 * shape, NaN scale, K > R, a split that does not divide, a wrong input width) exits non-zero
 * with exactly one line on stderr naming the culprit, and leaves no output file (nor its
 * temporary) behind. The tool is $INKLING_BUILD/bin/inkling-moe (INKLING_BUILD default
 * "build"); the test is skipped only if that binary does not exist.
 */
#include "test_support.h"

#include "../common/checkpoint.h"
#include "checkpoint_fixture.h"
#include "golden_cases.h"

#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

extern char **environ;

static char tool[1024];
static char dir[512], input[700], out_path[700], err_path[700], out_text_path[700];

static const moe_config cfg = {.D = 64, .I = 64, .R = 6, .K = 2, .S = 2, .route_scale = 8.0f,
                               .has_gate_bias = true, .has_global_scale = true,
                               .routed_format = MOE_ROUTED_MXFP4};
enum { T = 5 };
static uint16_t x[T * 64];

/* Runs `inkling-moe command args...` (args NULL-terminated); stdout goes to out_text_path,
 * stderr to err_path. Returns the exit status. */
static int run_command(const char *command, const char *const *args) {
    const char *argv[32];
    int n = 0;
    argv[n++] = tool;
    argv[n++] = command;
    for (int i = 0; args[i] && n < 31; i++) argv[n++] = args[i];
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 1, out_text_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int rc = posix_spawn(&pid, tool, &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc) fail_msg("cannot start %s", tool);
    int status;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status)) fail_msg("%s did not exit normally (signal %d)", tool, WTERMSIG(status));
    return WEXITSTATUS(status);
}

static int run_tool(const char *const *args) { return run_command("run", args); }

/* The tool must fail: non-zero exit, one stderr line holding frag, no output file. */
static void expect_failure(const char *model, const char *frag, const char *const *extra) {
    const char *args[24] = {"--model", model, "--input", input, "--out", out_path};
    int n = model ? 6 : 0;
    if (!model) {
        args[n++] = "--input", args[n++] = input, args[n++] = "--out", args[n++] = out_path;
    }
    for (int i = 0; extra && extra[i]; i++) args[n++] = extra[i];
    args[n] = NULL;
    unlink(out_path);
    int rc = run_tool(args);
    char text[4096] = "";
    FILE *f = fopen(err_path, "rb");
    size_t len = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[len] = '\0';
    int lines = 0;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    if (rc == 0 || lines != 1 || text[len ? len - 1 : 0] != '\n' || !strstr(text, frag) ||
        access(out_path, F_OK) == 0 || fixture_count_entries(dir, false) != 0)
        fail_msg("wanted a failure naming '%s': exit %d, %d stderr lines: %s", frag, rc, lines, text);
}

static int setup(void **state) {
    (void)state;
    const char *build = getenv("INKLING_BUILD");
    snprintf(tool, sizeof tool, "%s/bin/inkling-moe", build && build[0] ? build : "build");
    if (fixture_tempdir(dir, sizeof dir, "cli")) return -1;
    snprintf(input, sizeof input, "%s/input.safetensors", dir);
    snprintf(out_path, sizeof out_path, "%s/out.safetensors", dir);
    snprintf(err_path, sizeof err_path, "%s/stderr.txt", dir);
    snprintf(out_text_path, sizeof out_text_path, "%s/stdout.txt", dir);
    moe_random_input(T, cfg.D, 3, x);
    return fixture_write_input(input, T, cfg.D, x);
}

static int teardown(void **state) {
    (void)state;
    fixture_remove_tree(dir);
    return 0;
}

static void need_tool(void) {
    if (access(tool, X_OK)) {
        print_message("%s not built: CLI tests skipped\n", tool);
        skip();
    }
}

/* Writes a model directory with one planted fault; returns its path (static buffer). */
static const char *model_with(const fixture_opts *o, uint64_t seed, int nan_scale) {
    static char model[700];
    static int serial;
    snprintf(model, sizeof model, "%s/model%d", dir, serial++);
    moe_layer_data ld;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_random(&cfg, seed, &ld, &err), MOE_OK);
    if (nan_scale) ld.w2_scale[(2 * 64 + 7) * 2 + 1] = 0xFF; /* expert 2, row 7, block 1 */
    assert_int_equal(fixture_write_model(model, &ld, o), 0);
    moe_layer_data_free(&ld);
    return model;
}

static void test_help_and_good_run(void **state) {
    (void)state;
    need_tool();
    const char *help[] = {"--help", NULL};
    assert_int_equal(run_tool(help), 0);
    const char *model = model_with(&(fixture_opts){.layer = 5}, 1, 0);
    static const char *precisions[2] = {"exact", "serving"};
    for (int p = 0; p < 2; p++) {
        const char *args[] = {"--model", model, "--input", input, "--out", out_path, "--tp", "2",
                              "--precision", precisions[p], "--stages", NULL};
        unlink(out_path);
        assert_int_equal(run_tool(args), 0);
        moe_st_file f;
        moe_error err = {0};
        assert_int_equal(moe_st_open(out_path, &f, &err), MOE_OK);
        const moe_st_tensor *o = moe_st_find(&f, "out"), *ids = moe_st_find(&f, "topk_ids");
        const moe_st_tensor *w = moe_st_find(&f, "topk_weights"), *lg = moe_st_find(&f, "logits");
        assert_non_null(o);
        assert_non_null(ids);
        assert_non_null(w);
        assert_non_null(lg);
        assert_int_equal(o->dtype, p ? MOE_ST_BF16 : MOE_ST_F32);
        assert_true(o->ndim == 2 && o->shape[0] == T && o->shape[1] == cfg.D);
        assert_true(ids->dtype == MOE_ST_I32 && ids->shape[0] == T && ids->shape[1] == cfg.K);
        assert_true(w->dtype == MOE_ST_F32 && w->shape[1] == cfg.K + cfg.S);
        assert_true(lg->dtype == MOE_ST_F32 && lg->shape[1] == cfg.R + cfg.S);
        assert_null(moe_st_find(&f, "sink_y")); /* a split writes no partial sink_y */

        /* The same numbers as the library called directly on the same files. */
        moe_checkpoint ck;
        moe_config c;
        moe_weights wv;
        assert_int_equal(moe_checkpoint_open(model, &ck, &err), MOE_OK);
        assert_int_equal(moe_checkpoint_layer(&ck, 5, NULL, &c, &wv, &err), MOE_OK);
        float want[T * 64], got[T * 64];
        moe_options opt = moe_options_default();
        opt.precision = p ? MOE_PRECISION_SERVING : MOE_PRECISION_EXACT;
        assert_int_equal(moe_forward_all_ranks(&moe_backend_ref, &c, &wv, MOE_SPLIT_TP, 2, 0, &opt,
                                               T, x, want, NULL, &err),
                         MOE_OK);
        assert_true(moe_st_to_f32(o, got));
        assert_memory_equal(got, want, sizeof got);
        moe_checkpoint_close(&ck);
        moe_st_close(&f);
    }
}

/* out of an output file, as float: out [numel]; false if missing or not dtype/numel. */
static bool read_out(const moe_st_file *f, bool bf16, size_t numel, float *out) {
    const moe_st_tensor *t = moe_st_find(f, "out");
    return t && t->dtype == (bf16 ? MOE_ST_BF16 : MOE_ST_F32) && t->numel == numel && moe_st_to_f32(t, out);
}

/* The tool on every golden case, with the case's layer and split, on every backend that can run
 * here and every contract it supports: its output file must hold exactly what the library
 * computes (test_golden judges the library against the NumPy outputs and the envelope), so the
 * tool adds file handling and nothing else. */
static void test_tool_on_every_golden_case(void **state) {
    (void)state;
    need_tool();
    if (!is_dir(CASES_DIR)) skip();
    static char names[512][256];
    int n = list_cases(names, 512), runs = 0, failures = 0;
    if (n <= 0) fail_msg(CASES_DIR " exists but holds no case directory");
    static const char *const backends[] = {"ref", "blas", "cuda"};
    for (int i = 0; i < n; i++) {
        golden_case gc;
        char why[700], model[600], in[600], layer[16], nranks[16], pad[16];
        if (!read_case(names[i], &gc, why, sizeof why)) fail_msg("%s", why);
        snprintf(model, sizeof model, CASES_DIR "/%.255s/model", names[i]);
        snprintf(in, sizeof in, CASES_DIR "/%.255s/input.safetensors", names[i]);
        snprintf(layer, sizeof layer, "%d", gc.layer);
        snprintf(nranks, sizeof nranks, "%d", gc.n);
        snprintf(pad, sizeof pad, "%d", gc.pad);
        moe_checkpoint ck;
        moe_config c;
        moe_weights w;
        moe_st_file xf;
        moe_error err = {0};
        assert_int_equal(moe_checkpoint_open(model, &ck, &err), MOE_OK);
        assert_int_equal(moe_checkpoint_layer(&ck, gc.layer, NULL, &c, &w, &err), MOE_OK);
        assert_int_equal(moe_st_open(in, &xf, &err), MOE_OK);
        const uint16_t *xs = moe_st_find(&xf, "x")->data;
        const size_t TD = (size_t)gc.T * (size_t)c.D;
        float *want = calloc(TD + 1, sizeof *want), *got = calloc(TD + 1, sizeof *got);
        for (int b = 0; b < 3; b++) {
            const moe_backend *be = moe_backend_find(backends[b]);
            for (int p = 0; p < 2; p++) {
                moe_options opt = moe_options_default();
                opt.precision = p ? MOE_PRECISION_SERVING : MOE_PRECISION_EXACT;
                moe_split split = {gc.kind, gc.n, 0, gc.pad};
                if (!be->available(why, sizeof why) || !be->supports(&c, &split, &opt, why, sizeof why)) continue;
                const char *split_flag = gc.kind == MOE_SPLIT_TP ? "--tp" : gc.kind == MOE_SPLIT_EP ? "--ep" : NULL;
                const char *args[] = {"--model", model, "--layer", layer, "--input", in, "--out", out_path,
                                      "--backend", backends[b], "--precision", p ? "serving" : "exact",
                                      "--pad-inter", pad, split_flag, nranks, NULL};
                unlink(out_path);
                runs++;
                int rc = run_tool(args);
                moe_st_file of;
                bool same = false;
                if (rc == 0 && moe_st_open(out_path, &of, &err) == MOE_OK) {
                    same = read_out(&of, p, TD, got) &&
                           moe_forward_all_ranks(be, &c, &w, gc.kind, gc.n, gc.pad, &opt, gc.T, xs, want,
                                                 NULL, &err) == MOE_OK &&
                           memcmp(got, want, TD * sizeof *got) == 0;
                    moe_st_close(&of);
                }
                if (!same) {
                    print_error("tool on golden %s, backend %s, %s: exit %d, output %s\n", names[i],
                                backends[b], p ? "serving" : "exact", rc,
                                rc ? "none" : "differs from the library's");
                    failures++;
                }
            }
        }
        free(want);
        free(got);
        moe_st_close(&xf);
        moe_checkpoint_close(&ck);
    }
    print_message("inkling-moe run on %d golden cases: %d runs over the paths available here, %d failed\n",
                  n, runs, failures);
    if (failures) fail_msg("%d of %d tool runs on golden cases failed", failures, runs);
}

/* diff on a golden checkpoint: the reference split against itself unsplit agrees (exit 0); a
 * planted bug diverges (exit 1) and the report names the stage; a missing path is usage (2). */
static void test_diff(void **state) {
    (void)state;
    need_tool();
    if (!is_dir(CASES_DIR "/ep3_padding")) skip();
    const char *model = CASES_DIR "/ep3_padding/model", *in = CASES_DIR "/ep3_padding/input.safetensors";
    const char *agree[] = {"--model", model, "--input", in, "--backend", "ref", "--ep", "3", NULL};
    assert_int_equal(run_command("diff", agree), 0);
    assert_non_null(strstr(test_text_of(out_text_path), "candidate ref/serving/ep3, reference ref/serving"));
    assert_non_null(strstr(test_text_of(out_text_path), "ok: candidate ref/serving/ep3 and reference ref/serving"));
    /* the reference by its name, and by its older name --against; not both */
    const char *named[] = {"--model", model, "--input", in, "--backend", "ref", "--ep", "3", "--reference", "ref", NULL};
    assert_int_equal(run_command("diff", named), 0);
    assert_non_null(strstr(test_text_of(out_text_path), "ok: candidate ref/serving/ep3 and reference ref/serving"));
    const char *older[] = {"--model", model, "--input", in, "--backend", "ref", "--against", "mutant:gate_up_swap", NULL};
    assert_int_equal(run_command("diff", older), 1);
    assert_non_null(strstr(test_text_of(out_text_path), "reference mutant:gate_up_swap/serving"));
    const char *both[] = {"--model", model, "--input", in, "--backend", "ref", "--reference", "ref", "--against", "ref", NULL};
    assert_int_equal(run_command("diff", both), 2);
    assert_non_null(strstr(test_text_of(err_path), "argument --reference: cannot be combined with --against"));
    const char *planted[] = {"--model", model, "--input", in, "--backend", "mutant:gate_up_swap", NULL};
    assert_int_equal(run_command("diff", planted), 1);
    assert_non_null(strstr(test_text_of(out_text_path), "first diverging stage"));
    const char *unknown[] = {"--model", model, "--input", in, "--backend", "nope", NULL};
    assert_int_equal(run_command("diff", unknown), 2);
    assert_non_null(strstr(test_text_of(err_path), "unknown backend 'nope'"));
}

/* A fuzz failure's rerun line names the binary that ran, wherever it was built. */
static void test_rerun_line_names_this_binary(void **state) {
    (void)state;
    need_tool();
    char reports[800], regress[800], want[1200];
    snprintf(reports, sizeof reports, "%s/rerun-reports", dir);
    snprintf(regress, sizeof regress, "%s/rerun-regress", dir);
    const char *args[] = {"--mutant", "halves", "--suite", "smoke", "--max-cases", "4", "--seed", "1", "--no-shrink",
                          "--seconds", "20", "--report-dir", reports, "--regress-dir", regress, NULL};
    assert_int_equal(run_command("fuzz", args), 1);
    snprintf(want, sizeof want, "rerun: %s fuzz --case '", tool);
    if (!strstr(test_text_of(out_text_path), want)) fail_msg("no line starting '%s' in the fuzz output", want);
}

static void test_usage_errors(void **state) {
    (void)state;
    need_tool();
    const char *model = model_with(&(fixture_opts){.layer = 3}, 1, 0);
    expect_failure(NULL, "--model", NULL);
    expect_failure(model, "--tp", (const char *const[]){"--tp", "0", NULL});
    expect_failure(model, "--backend", (const char *const[]){"--backend", "nope", NULL});
    expect_failure(model, "--frobnicate", (const char *const[]){"--frobnicate", NULL});
    /* I = 64 split 3 ways does not divide; split 4 ways leaves 16, not a multiple of 32 */
    expect_failure(model, "intermediate_size", (const char *const[]){"--tp", "3", NULL});
    expect_failure(model, "TP 4", (const char *const[]){"--tp", "4", NULL});
    expect_failure(model, "model.llm.layers.4.mlp.gate.weight", (const char *const[]){"--layer", "4", NULL});
    /* an input of the wrong width */
    char other[720];
    snprintf(other, sizeof other, "%s/wide.safetensors", dir);
    static uint16_t wide[2 * 96];
    assert_int_equal(fixture_write_input(other, 2, 96, wide), 0);
    const char *args[] = {"--model", model, "--input", other, "--out", out_path, NULL};
    unlink(out_path);
    assert_int_not_equal(run_tool(args), 0);
    assert_int_not_equal(access(out_path, F_OK), 0);
}

/* An NVFP4 model directory (cfg's shapes) with one planted value fault; returns its path. */
static const char *nvfp4_model_with(const fixture_opts *o, int fault) {
    static char model[700];
    static int serial;
    snprintf(model, sizeof model, "%s/nvfp4_%d", dir, serial++);
    moe_config c = cfg;
    c.routed_format = MOE_ROUTED_NVFP4;
    moe_layer_data ld;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_random(&c, 9, &ld, &err), MOE_OK);
    if (fault == 1) ld.w13_scale[(size_t)(1 * 2 * c.I + 6) * (c.D / 16) + 2] = 0x7F; /* NaN */
    if (fault == 2) ld.w2_scale2[3] = -0.5f;
    if (fault == 3) ld.w13_scale2[0] = INFINITY;
    assert_int_equal(fixture_write_model(model, &ld, o), 0);
    moe_layer_data_free(&ld);
    return model;
}

/* Every bad NVFP4 input: exit status non-zero, one stderr line naming the tensor, no output. */
static void test_broken_nvfp4(void **state) {
    (void)state;
    need_tool();
    const fixture_opts plain = {.layer = 3};
    expect_failure(nvfp4_model_with(&plain, 1), "experts.w13_weight.scale: NaN E4M3 byte 0x7F", NULL);
    expect_failure(nvfp4_model_with(&plain, 2), "experts.w2_weight.scale2", NULL);
    expect_failure(nvfp4_model_with(&plain, 3), "experts.w13_weight.scale2", NULL);
    expect_failure(nvfp4_model_with(&(fixture_opts){.layer = 3, .bad_shape = "experts.w2_weight.scale"}, 0),
                   "model.llm.layers.3.mlp.experts.w2_weight.scale", NULL);
    const char *sidecars[3] = {"experts.w13_weight.input_amax", "experts.w2_weight.original_shape",
                               "experts.w2_weight.scale2"};
    for (int i = 0; i < 3; i++) {
        char full[160];
        snprintf(full, sizeof full, "missing tensor model.llm.layers.3.mlp.%s", sidecars[i]);
        expect_failure(nvfp4_model_with(&(fixture_opts){.layer = 3, .omit = sidecars[i]}, 0), full, NULL);
    }
    expect_failure(nvfp4_model_with(&(fixture_opts){.layer = 3, .amax13 = -1.0f}, 0),
                   "model.llm.layers.3.mlp.experts.w13_weight.input_amax", NULL);
    expect_failure(nvfp4_model_with(&(fixture_opts){.layer = 3, .amax13 = NAN}, 0),
                   "model.llm.layers.3.mlp.experts.w13_weight.input_amax", NULL);
    /* --strict: an unknown tensor under the layer is an error naming it */
    const char *strict[] = {"--strict", NULL};
    expect_failure(nvfp4_model_with(&(fixture_opts){.layer = 3, .extra = "experts.w13_weight.weird"}, 0),
                   "model.llm.layers.3.mlp.experts.w13_weight.weird", strict);
}

static void test_broken_files(void **state) {
    (void)state;
    need_tool();
    /* truncated checkpoint, then a header length that is absurd */
    const char *model = model_with(&(fixture_opts){.layer = 3}, 1, 0);
    char path[800];
    snprintf(path, sizeof path, "%s/model.safetensors", model);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(truncate(path, sb.st_size - 100), 0);
    expect_failure(model, "model.safetensors", NULL);
    FILE *f = fopen(path, "r+b");
    static const uint8_t huge[8] = {0, 0, 0, 0, 0, 1, 0, 0};
    assert_int_equal(fwrite(huge, 1, 8, f), 8);
    fclose(f);
    expect_failure(model, "header length", NULL);
    /* K > R in config.json */
    moe_config c = cfg;
    c.K = 9;
    char text[2048];
    fixture_config_text(&c, 3, text, sizeof text);
    expect_failure(model_with(&(fixture_opts){.layer = 3, .config_json = text}, 1, 0),
                   "num_experts_per_tok", NULL);
    /* NaN scale byte */
    expect_failure(model_with(&(fixture_opts){.layer = 3}, 1, 1), "experts.w2_weight_scale", NULL);
    /* each missing tensor and each wrong shape */
    const char *suffixes[16];
    int n = fixture_suffixes(&cfg, suffixes);
    const char *layer3[] = {"--layer", "3", NULL};
    for (int i = 0; i < n; i++) {
        char full[160];
        snprintf(full, sizeof full, "model.llm.layers.3.mlp.%s", suffixes[i]);
        expect_failure(model_with(&(fixture_opts){.layer = 3, .omit = suffixes[i]}, 1, 0), full, layer3);
        expect_failure(model_with(&(fixture_opts){.layer = 3, .bad_shape = suffixes[i]}, 1, 0), full, NULL);
    }
    /* an existing output file is left as it was when a run fails */
    FILE *keep = fopen(out_path, "wb");
    fputs("previous", keep);
    fclose(keep);
    const char *args[] = {"--model", model, "--input", input, "--out", out_path, NULL};
    assert_int_not_equal(run_tool(args), 0);
    char back[16] = "";
    keep = fopen(out_path, "rb");
    assert_int_equal(fread(back, 1, sizeof back, keep), 8);
    fclose(keep);
    assert_memory_equal(back, "previous", 8);
    unlink(out_path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_and_good_run),
        cmocka_unit_test(test_tool_on_every_golden_case),
        cmocka_unit_test(test_diff),
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_rerun_line_names_this_binary),
        cmocka_unit_test(test_broken_files),
        cmocka_unit_test(test_broken_nvfp4),
    };
    return cmocka_run_group_tests_name("cli", tests, setup, teardown);
}
