/*
 * test_hostile.c: inkling-moe under hostile input and faults (docs/formats.md, "Error contract",
 * "Limits and hostile input", "Durability of --out"), through posix_spawn.
 *
 * Rules checked, for every case of the table (run, diff, fuzz and the command name itself):
 * the exit status (2 for every bad input), exactly one line on stderr holding the culprit
 * (option, file, tensor or field), nothing created or changed in the sandbox directory that
 * holds every file the case names (its listing: names, sizes, modes and modification times),
 * and no hang (a case that runs past 20 s fails). Under `make asan` the tool is the
 * sanitized build, so a sanitizer report breaks the one-line rule and the exit status.
 * Then the faults: 20 SIGTERM/SIGINT kills while --out is being written leave no temporary
 * and no damaged --out; two concurrent writers of one --out never publish a truncated file;
 * a checkpoint truncated under an open loader is an error naming the file, not SIGBUS; a
 * weight map of 200,000 entries loads in linear time. The tool is $INKLING_BUILD/bin/inkling-moe
 * (INKLING_BUILD default "build"); the test is skipped only if that binary does not exist.
 */
#include "test_support.h"

#include "../common/checkpoint.h"
#include "checkpoint_fixture.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static char tool[1024], box[512], scratch[512], err_path[700], out_text[700];
static char good_model[700], good_input[700], cur_model[700], cur_input[700];

static const moe_config cfg = {.D = 64, .I = 64, .R = 6, .K = 2, .S = 2, .route_scale = 8.0f,
                               .has_gate_bias = true, .has_global_scale = true,
                               .routed_format = MOE_ROUTED_MXFP4};
enum { T = 5, LAYER = 3 };

/* ---------------------------------------------------------------- running the tool */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static pid_t spawn(const char *const *argv, const char *out, const char *err) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    /* the signals the kill tests send act by default, whatever the test runner ignores */
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t dfl;
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGINT);
    sigaddset(&dfl, SIGTERM);
    sigaddset(&dfl, SIGHUP);
    posix_spawnattr_setsigdefault(&at, &dfl);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF);
    pid_t pid;
    int rc = posix_spawn(&pid, tool, &fa, &at, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (rc) fail_msg("cannot start %s", tool);
    return pid;
}

/* Waits for pid at most limit seconds (then kills it and fails: the tool hung). Returns the
 * wait status. */
static int wait_bounded(pid_t pid, double limit, const char *what) {
    double t0 = now_s();
    for (;;) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return status;
        if (now_s() - t0 > limit) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            fail_msg("%s: still running after %.0f s (hung)", what, limit);
        }
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    }
}

/* ---------------------------------------------------------------- the sandbox listing */

static void list_into(const char *dir, const char *rel, char *buf, size_t cap, size_t *used) {
    DIR *d = opendir(dir);
    if (!d) return;
    char names[256][256];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 256;)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    for (int i = 0; i < n; i++) {
        char path[1400], sub[1400];
        snprintf(path, sizeof path, "%.1000s/%.255s", dir, names[i]);
        snprintf(sub, sizeof sub, "%.1000s/%.255s", rel, names[i]);
        struct stat sb;
        if (lstat(path, &sb)) continue;
        if (*used < cap)
            *used += (size_t)snprintf(buf + *used, cap - *used, "%s %lld %o %lld.%09ld\n", sub,
                                      (long long)sb.st_size, (unsigned)sb.st_mode,
                                      (long long)sb.st_mtim.tv_sec, sb.st_mtim.tv_nsec);
        if (S_ISDIR(sb.st_mode)) list_into(path, sub, buf, cap, used);
    }
}

/* Every entry under the sandbox with size, mode and mtime: static buffer k (0 or 1). */
static const char *listing(int k) {
    static char buf[2][1 << 16];
    size_t used = 0;
    buf[k][0] = '\0';
    list_into(box, "", buf[k], sizeof buf[k], &used);
    return buf[k];
}

/* ---------------------------------------------------------------- plants */

static int serial;

/* A fresh directory in the sandbox: path into dst [cap]. */
static void fresh_dir(char *dst, size_t cap, const char *tag) {
    snprintf(dst, cap, "%s/%s%d", box, tag, serial++);
    assert_int_equal(mkdir(dst, 0755), 0);
}

static void copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    assert_true(a && b);
    char buf[65536];
    for (size_t n; (n = fread(buf, 1, sizeof buf, a)) > 0;) assert_int_equal(fwrite(buf, 1, n, b), n);
    fclose(a);
    assert_int_equal(fclose(b), 0);
}

static void write_bytes(const char *path, const void *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* cur_model: a copy of the good model with config.json replaced by text [len] (len 0: strlen). */
static void model_with_config(const char *text, size_t len) {
    fresh_dir(cur_model, sizeof cur_model, "cfg");
    char path[800];
    snprintf(path, sizeof path, "%s/config.json", cur_model);
    write_bytes(path, text, len ? len : strlen(text));
    char from[800], to[800];
    snprintf(from, sizeof from, "%s/model.safetensors", good_model);
    snprintf(to, sizeof to, "%s/model.safetensors", cur_model);
    copy_file(from, to);
}

/* The good config.json with field's value replaced by value (the rest of the line kept). */
static void model_with_field(const char *field, const char *value) {
    char text[2048];
    fixture_config_text(&cfg, LAYER, text, sizeof text);
    char key[64];
    snprintf(key, sizeof key, "\"%s\": ", field);
    char *at = strstr(text, key);
    assert_non_null(at);
    at += strlen(key);
    /* quantization_config, the last field, holds braces: its value runs to the final brace */
    char *end = strcmp(field, "quantization_config") ? at + strcspn(at, ",}") : strrchr(text, '}');
    char out[2048];
    snprintf(out, sizeof out, "%.*s%s%s", (int)(at - text), text, value, end);
    model_with_config(out, 0);
}

/* cur_model: config.json of the good model plus model.safetensors = bytes [n]. */
static void model_with_st_bytes(const void *bytes, size_t n) {
    char text[2048];
    fixture_config_text(&cfg, LAYER, text, sizeof text);
    model_with_config(text, 0);
    char path[800];
    snprintf(path, sizeof path, "%s/model.safetensors", cur_model);
    write_bytes(path, bytes, n);
}

/* A safetensors image with header JSON and data [data_len] of byte 0x3c. */
static void model_with_header(const char *json, size_t json_len, size_t data_len) {
    size_t jl = json_len ? json_len : strlen(json);
    size_t n = 8 + jl + data_len;
    uint8_t *b = calloc(n, 1);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)jl >> (8 * i));
    memcpy(b + 8, json, jl);
    memset(b + 8 + jl, 0x3c, data_len);
    model_with_st_bytes(b, n);
    free(b);
}

/* cur_model: a layer written by the fixture with options o and, when nan_scale, a NaN scale. */
static void model_with_opts(const fixture_opts *o, int nan_scale) {
    fresh_dir(cur_model, sizeof cur_model, "layer");
    moe_layer_data ld;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_random(&cfg, 7, &ld, &err), MOE_OK);
    if (nan_scale == 1) ld.w2_scale[(2 * 64 + 7) * 2 + 1] = 0xFF; /* expert 2, row 7, block 1 */
    if (nan_scale == 2) {
        ld.w13_scale[5] = 0xFE; /* a huge scale over a nonzero code overflows fp32 */
        ld.w13_mx[5 * 16] = 0x77;
    }
    assert_int_equal(fixture_write_model(cur_model, &ld, o), 0);
    moe_layer_data_free(&ld);
}

/* cur_model: the good model plus an index file with text. */
static void model_with_index(const char *text) {
    char cfgtext[2048];
    fixture_config_text(&cfg, LAYER, cfgtext, sizeof cfgtext);
    model_with_config(cfgtext, 0);
    char path[800];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", cur_model);
    write_bytes(path, text, strlen(text));
}

/* cur_input: an input file with one tensor as given. */
static void input_with(const char *name, moe_st_dtype dt, int ndim, int64_t d0, int64_t d1) {
    snprintf(cur_input, sizeof cur_input, "%s/in%d.safetensors", box, serial++);
    static uint8_t zeros[64 * 64 * 8];
    moe_st_entry e = {name, dt, ndim, {d0, d1, 1}, zeros};
    moe_error err = {0};
    assert_int_equal(moe_st_write(cur_input, &e, 1, &err), MOE_OK);
}

/* A FIFO at dir/name (replacing a file there). */
static void fifo_at(const char *dir, const char *name) {
    char path[800];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
    assert_int_equal(mkfifo(path, 0644), 0);
}

static void truncate_to(const char *path, off_t size) { assert_int_equal(truncate(path, size), 0); }

/* ---------------------------------------------------------------- the table */

typedef struct {
    const char *what;
    void (*plant)(void);
    const char *args[18]; /* after the tool name; $M model, $I input, $O output, $D/... sandbox */
    const char *frag;     /* in the one stderr line */
} hostile_case;

#define GOOD "--model", "$M", "--input", "$I", "--out", "$O"
#define DIFF "diff", "--model", "$M", "--input", "$I", "--backend", "ref"

static void p_cfg_garbage(void) { model_with_field("use_global_scale", "true} garbage"); }
static void p_cfg_nulgarbage(void) {
    char text[2048];
    fixture_config_text(&cfg, LAYER, text, sizeof text);
    size_t n = strlen(text);
    memcpy(text + n, "\0garbage", 8);
    model_with_config(text, n + 8);
}
static void p_cfg_notjson(void) { model_with_config("{\"hidden_size\": 64,", 0); }
static void p_cfg_array(void) { model_with_config("[1, 2]", 0); }
static void p_cfg_empty(void) { model_with_config(" ", 0); }
static void p_cfg_no_hidden(void) { model_with_field("hidden_size", "null, \"x\": 1"); }
static void p_cfg_hidden_str(void) { model_with_field("hidden_size", "\"64\""); }
static void p_cfg_hidden_frac(void) { model_with_field("hidden_size", "64.5"); }
static void p_cfg_hidden_huge(void) { model_with_field("hidden_size", "1e300"); }
static void p_cfg_k_gt_r(void) { model_with_field("num_experts_per_tok", "7"); }
static void p_cfg_k_zero(void) { model_with_field("num_experts_per_tok", "0"); }
static void p_cfg_rs(void) { model_with_field("route_scale", "1e300"); }
static void p_cfg_rs_str(void) { model_with_field("route_scale", "\"eight\""); }
static void p_cfg_bias_flag(void) { model_with_field("use_gate_bias", "\"yes\""); }
static void p_cfg_bias_false(void) { model_with_field("use_gate_bias", "false"); }
static void p_cfg_excl_str(void) { model_with_field("quantization_config", "{\"exclude\": \"lm_head\"}"); }
static void p_cfg_excl_num(void) { model_with_field("quantization_config", "{\"exclude\": [1]}"); }
static void p_cfg_excl_mod(void) { model_with_field("quantization_config", "{\"exclude_modules\": {}}"); }
static void p_cfg_one_name(void) {
    model_with_field("quantization_config",
                     "{\"exclude\": [\"model.llm.layers.3.mlp.experts.w13_weight\"]}");
}
static void p_cfg_excluded_mx(void) {
    model_with_field("quantization_config", "{\"exclude\": [\"model.llm.layers.3.mlp.experts\"]}");
}
static void p_cfg_text3(void) { model_with_field("hidden_size", "64, \"text_config\": 3"); }
static void p_cfg_qc_num(void) { model_with_field("quantization_config", "5"); }
static void p_cfg_deep(void) {
    static char text[6000];
    size_t n = 0;
    for (int i = 0; i < 2000; i++) text[n++] = '[';
    text[n] = '\0';
    model_with_config(text, 0);
}
static void p_cfg_big(void) {
    size_t n = (16u << 20) + 16;
    char *text = malloc(n + 1);
    memset(text, ' ', n);
    text[0] = '{', text[n - 1] = '}', text[n] = '\0';
    model_with_config(text, n);
    free(text);
}
static void p_cfg_dir(void) {
    fresh_dir(cur_model, sizeof cur_model, "cfgdir");
    char path[800];
    snprintf(path, sizeof path, "%s/config.json", cur_model);
    assert_int_equal(mkdir(path, 0755), 0);
}
static void p_cfg_fifo(void) {
    char text[2048];
    fixture_config_text(&cfg, LAYER, text, sizeof text);
    model_with_config(text, 0);
    fifo_at(cur_model, "config.json");
}
static void p_cfg_missing(void) { fresh_dir(cur_model, sizeof cur_model, "nocfg"); }
static void p_no_weights(void) {
    char text[2048];
    fixture_config_text(&cfg, LAYER, text, sizeof text);
    fresh_dir(cur_model, sizeof cur_model, "now");
    char path[800];
    snprintf(path, sizeof path, "%s/config.json", cur_model);
    write_bytes(path, text, strlen(text));
}
static void p_st_fifo(void) {
    p_no_weights();
    fifo_at(cur_model, "model.safetensors");
}
static void p_index_fifo(void) {
    char text[2048];
    fixture_config_text(&cfg, LAYER, text, sizeof text);
    model_with_config(text, 0);
    fifo_at(cur_model, "model.safetensors.index.json");
}
static void p_st_empty(void) { model_with_st_bytes("", 0); }
static void p_st_short(void) { model_with_st_bytes("\x10\0\0\0", 4); }
static void p_st_hlen_huge(void) { model_with_st_bytes("\xff\xff\xff\xff\xff\0\0\0{}", 10); }
static void p_st_hlen_past(void) { model_with_st_bytes("\x40\0\0\0\0\0\0\0{}", 10); }
static void p_st_notjson(void) { model_with_header("{\"a\": ", 0, 0); }
static void p_st_trailing(void) { model_with_header("{}    xyz", 0, 0); }
static void p_st_nul_trailing(void) { model_with_header("{}\0junk", 7, 0); }
static void p_st_nul_pad(void) { model_with_header("{}\0\0\0\0\0\0", 8, 0); }
static void p_st_not_brace(void) { model_with_header("[]", 0, 0); }
static void p_st_dtype(void) { model_with_header("{\"t\": {\"dtype\": \"Q7\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 0, 1); }
static void p_st_shape(void) { model_with_header("{\"t\": {\"dtype\": \"U8\", \"shape\": 3, \"data_offsets\": [0, 1]}}", 0, 1); }
static void p_st_shape_neg(void) { model_with_header("{\"t\": {\"dtype\": \"U8\", \"shape\": [-1], \"data_offsets\": [0, 1]}}", 0, 1); }
static void p_st_ndim(void) { model_with_header("{\"t\": {\"dtype\": \"U8\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 1]}}", 0, 1); }
static void p_st_offsets(void) { model_with_header("{\"t\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 1]}}", 0, 1); }
static void p_st_offsets_rev(void) { model_with_header("{\"t\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [1, 0]}}", 0, 1); }
static void p_st_offsets_str(void) { model_with_header("{\"t\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": \"0-1\"}}", 0, 1); }
static void p_st_overlap(void) {
    model_with_header("{\"a\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 2]},"
                      " \"b\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [1, 3]}}", 0, 3);
}
static void p_st_hole(void) { model_with_header("{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [1, 2]}}", 0, 2); }
static void p_st_extra_bytes(void) { model_with_header("{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 0, 5); }
static void p_st_past_end(void) { model_with_header("{\"a\": {\"dtype\": \"U8\", \"shape\": [9], \"data_offsets\": [0, 9]}}", 0, 3); }
static void p_st_unknown_field(void) { model_with_header("{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1], \"x\": 1}}", 0, 1); }
static void p_st_lacks(void) { model_with_header("{\"a\": {\"dtype\": \"U8\", \"shape\": [1]}}", 0, 1); }
static void p_st_dup(void) {
    model_with_header("{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]},"
                      " \"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [1, 2]}}", 0, 2);
}
static void p_st_meta(void) { model_with_header("{\"__metadata__\": {\"k\": 1}}", 0, 0); }
static void p_st_entry_num(void) { model_with_header("{\"a\": 5}", 0, 0); }
static void p_st_empty_name(void) { model_with_header("{\"\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 0, 1); }
static void p_st_bad_utf8(void) { model_with_header("{\"evil\xff\xfe\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 0, 1); }
static void p_st_newline_name(void) {
    model_with_header("{\"evil\\nline2\": {\"dtype\": \"Q7\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 0, 1);
}
static void p_st_escape_name(void) {
    model_with_header("{\"\\u001b[2Jevil\": {\"dtype\": \"Q7\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 0, 1);
}
static void p_st_truncated(void) {
    char text[2048];
    fixture_config_text(&cfg, LAYER, text, sizeof text);
    model_with_config(text, 0);
    char path[800];
    snprintf(path, sizeof path, "%s/model.safetensors", cur_model);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    truncate_to(path, sb.st_size / 2);
}
static void p_st_truncated_header(void) {
    p_st_truncated();
    char path[800];
    snprintf(path, sizeof path, "%s/model.safetensors", cur_model);
    truncate_to(path, 100);
}
static void p_no_layer(void) { model_with_header("{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 0, 1); }
#define OMIT(fn, suffix) static void fn(void) { model_with_opts(&(fixture_opts){.layer = LAYER, .omit = suffix}, 0); }
#define SHAPE(fn, suffix) static void fn(void) { model_with_opts(&(fixture_opts){.layer = LAYER, .bad_shape = suffix}, 0); }
#define DTYPE(fn, suffix) static void fn(void) { model_with_opts(&(fixture_opts){.layer = LAYER, .bad_dtype = suffix}, 0); }
OMIT(p_omit_bias, "gate.bias")
OMIT(p_omit_gs, "gate.global_scale")
OMIT(p_omit_w13, "experts.w13_weight")
OMIT(p_omit_w13s, "experts.w13_weight_scale")
OMIT(p_omit_w2, "experts.w2_weight")
OMIT(p_omit_w2s, "experts.w2_weight_scale")
OMIT(p_omit_sw13, "shared_experts.shared_w13_weight")
OMIT(p_omit_sw2, "shared_experts.shared_w2_weight")
SHAPE(p_shape_gate, "gate.weight")
SHAPE(p_shape_bias, "gate.bias")
SHAPE(p_shape_w13, "experts.w13_weight")
SHAPE(p_shape_w2s, "experts.w2_weight_scale")
SHAPE(p_shape_sw2, "shared_experts.shared_w2_weight")
DTYPE(p_dtype_gate, "gate.weight")
DTYPE(p_dtype_bias, "gate.bias")
DTYPE(p_dtype_sw13, "shared_experts.shared_w13_weight")
static void p_nan_scale(void) { model_with_opts(&(fixture_opts){.layer = LAYER}, 1); }
static void p_overflow_scale(void) { model_with_opts(&(fixture_opts){.layer = LAYER}, 2); }
static void p_index_notjson(void) { model_with_index("{\"weight_map\": "); }
static void p_index_trailing(void) { model_with_index("{\"weight_map\": {}} trailing"); }
static void p_index_nomap(void) { model_with_index("{\"metadata\": {}}"); }
static void p_index_array(void) { model_with_index("{\"weight_map\": []}"); }
static void p_index_notstr(void) { model_with_index("{\"weight_map\": {\"model.llm.layers.3.mlp.gate.weight\": 3}}"); }
static void p_index_slash(void) { model_with_index("{\"weight_map\": {\"model.llm.layers.3.mlp.gate.weight\": \"../x\"}}"); }
static void p_index_dotdot(void) { model_with_index("{\"weight_map\": {\"model.llm.layers.3.mlp.gate.weight\": \"..\"}}"); }
/* cur_model: the good model plus an index naming every tensor's file model.safetensors, except
 * that name (when not NULL) is mapped to file. */
static void model_with_index_except(const char *name, const char *file) {
    moe_st_file f;
    moe_error err = {0};
    char path[800];
    snprintf(path, sizeof path, "%s/model.safetensors", good_model);
    assert_int_equal(moe_st_open(path, &f, &err), MOE_OK);
    static char text[16384];
    size_t n = (size_t)snprintf(text, sizeof text, "{\"weight_map\": {");
    for (int i = 0; i < f.n_tensors; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "%s\"%s\": \"%s\"", i ? ", " : "", f.tensors[i].name,
                              name && !strcmp(name, f.tensors[i].name) ? file : "model.safetensors");
    snprintf(text + n, sizeof text - n, "}}");
    moe_st_close(&f);
    model_with_index(text);
}
static void p_index_for_out(void) { model_with_index_except(NULL, NULL); }
static void p_index_missing_file(void) {
    model_with_index_except("model.llm.layers.3.mlp.gate.weight", "shard-9.safetensors");
}
static void p_index_wrong_file(void) { model_with_index_except("model.llm.layers.3.mlp.gate.weight", "config.json"); }
static void p_index_not_held(void) {
    model_with_index_except("model.llm.layers.3.mlp.gate.bias", "other.safetensors");
    char path[800];
    snprintf(path, sizeof path, "%s/other.safetensors", cur_model);
    copy_file(good_input, path);
}
static void p_index_dup(void) {
    model_with_index("{\"weight_map\": {\"model.llm.layers.3.mlp.gate.weight\": \"model.safetensors\","
                     " \"model.llm.layers.3.mlp.gate.weight\": \"model.safetensors\"}}");
}
static void p_index_utf8(void) { model_with_index("{\"weight_map\": {\"bad\xc3\x28\": \"model.safetensors\"}}"); }
static void p_in_missing_x(void) { input_with("y", MOE_ST_BF16, 2, T, 64); }
static void p_in_dtype(void) { input_with("x", MOE_ST_F32, 2, T, 64); }
static void p_in_width(void) { input_with("x", MOE_ST_BF16, 2, T, 32); }
static void p_in_rank(void) { input_with("x", MOE_ST_BF16, 3, T, 64); }
static void p_in_truncated(void) {
    snprintf(cur_input, sizeof cur_input, "%s/cut%d.safetensors", box, serial++);
    copy_file(good_input, cur_input);
    struct stat sb;
    assert_int_equal(stat(cur_input, &sb), 0);
    truncate_to(cur_input, sb.st_size - 7);
}
static void p_in_fifo(void) {
    snprintf(cur_input, sizeof cur_input, "%s/fifo%d", box, serial++);
    assert_int_equal(mkfifo(cur_input, 0644), 0);
}
static void p_in_dir(void) { fresh_dir(cur_input, sizeof cur_input, "indir"); }
static void p_in_notst(void) {
    snprintf(cur_input, sizeof cur_input, "%s/text%d.safetensors", box, serial++);
    write_bytes(cur_input, "hello, world", 12);
}
static void p_out_exists_dir(void) {
    char path[800];
    snprintf(path, sizeof path, "%s/outdir", box);
    mkdir(path, 0755);
}
static void p_out_hardlink(void) {
    char path[800];
    snprintf(path, sizeof path, "%s/hard.st", box);
    unlink(path);
    assert_int_equal(link(good_input, path), 0);
}
static void p_out_symlink(void) {
    char path[800];
    snprintf(path, sizeof path, "%s/soft.st", box);
    unlink(path);
    assert_int_equal(symlink(good_input, path), 0);
}
static void p_out_fifo(void) {
    char path[800];
    snprintf(path, sizeof path, "%s/out.fifo", box);
    unlink(path);
    assert_int_equal(mkfifo(path, 0644), 0);
}
static void p_report_file(void) {
    char path[800];
    snprintf(path, sizeof path, "%s/afile", box);
    write_bytes(path, "x", 1);
}

static const hostile_case cases[] = {
    /* ---- the command name */
    {"no command", NULL, {NULL}, "a command is needed"},
    {"unknown command", NULL, {"frob"}, "unknown command 'frob'"},
    {"unknown command, option-like", NULL, {"--frob"}, "unknown command '--frob'"},
    {"unknown command, case", NULL, {"RUN"}, "unknown command 'RUN'"},
    {"unknown command, empty", NULL, {""}, "unknown command ''"},
    {"unknown command, newline", NULL, {"ru\nn"}, "unknown command 'ru\\nn'"},
    {"unknown command, escape", NULL, {"\x1b[2J"}, "unknown command '\\x1B[2J'"},
    {"unknown command, bad utf-8", NULL, {"r\xffun"}, "'r\\xFFun'"},
    {"backends, stray option", NULL, {"backends", "--x"}, "argument --x: unknown option"},
    {"lab, stray option", NULL, {"lab", "--x"}, "argument --x: unknown option"},
    {"lab, --variant with a newline", NULL, {"lab", "--variant", "cu\nda"}, "cu\\nda is not a path"},
    {"lab, --csv a directory", NULL, {"lab", "--csv", "$D"}, "is not a regular file"},
    {"lab-compare, stray option", NULL, {"lab-compare", "--x"}, "argument --x: unknown option"},
    {"lab-compare, no --baseline", NULL, {"lab-compare", "--candidate", "$D"}, "argument --baseline: missing"},
    {"lab-compare, a directory", NULL, {"lab-compare", "--baseline", "$D", "--candidate", "$D"}, "not a regular file"},
    {"lab-compare, a missing file", NULL, {"lab-compare", "--baseline", "$D/none.csv", "--candidate", "$D"}, "none.csv: cannot open"},
    {"lab-compare, the input as a CSV", NULL, {"lab-compare", "--baseline", "$I", "--candidate", "$I"}, "not a lab CSV"},
    {"lab-compare, --stage empty", NULL, {"lab-compare", "--baseline", "$I", "--candidate", "$I", "--stage", ""}, "argument --stage: empty"},
    {"lab-compare, --max-slowdown nan", NULL, {"lab-compare", "--baseline", "$I", "--candidate", "$I", "--max-slowdown", "nan"}, "argument --max-slowdown"},
    /* ---- run: options */
    {"run, no options", NULL, {"run"}, "argument --model: missing"},
    {"run, no --input", NULL, {"run", "--model", "$M", "--out", "$O"}, "argument --input: missing"},
    {"run, no --out", NULL, {"run", "--model", "$M", "--input", "$I"}, "argument --out: missing"},
    {"run, empty --out", NULL, {"run", "--model", "$M", "--input", "$I", "--out", ""}, "argument --out: empty"},
    {"run, empty --model", NULL, {"run", "--model", "", "--input", "$I", "--out", "$O"}, "argument --model: empty"},
    {"run, --out a directory", p_out_exists_dir, {"run", "--model", "$M", "--input", "$I", "--out", "$D/outdir"}, "not a regular file"},
    {"run, --out ending in /", NULL, {"run", "--model", "$M", "--input", "$I", "--out", "$D/new/"}, "is a directory"},
    {"run, --out = --input", NULL, {"run", "--model", "$M", "--input", "$I", "--out", "$I"}, "same file as the input"},
    {"run, --out = model.safetensors", NULL, {"run", "--model", "$M", "--input", "$I", "--out", "$M/model.safetensors"}, "same file as the input"},
    {"run, --out = the index", p_index_for_out, {"run", "--model", "$M", "--input", "$I", "--out", "$M/model.safetensors.index.json"}, "same file as the input"},
    {"run, --out = config.json", NULL, {"run", "--model", "$M", "--input", "$I", "--out", "$M/config.json"}, "same file as the input"},
    {"run, --out a hard link to the input", p_out_hardlink, {"run", "--model", "$M", "--input", "$I", "--out", "$D/hard.st"}, "same file"},
    {"run, --out a symlink to the input", p_out_symlink, {"run", "--model", "$M", "--input", "$I", "--out", "$D/soft.st"}, "same file"},
    {"run, --out a FIFO", p_out_fifo, {"run", "--model", "$M", "--input", "$I", "--out", "$D/out.fifo"}, "not a regular file"},
    {"run, --out in a missing directory", NULL, {"run", "--model", "$M", "--input", "$I", "--out", "$D/no/such/out.st"}, "cannot create a temporary file"},
    {"run, --threads 100000", NULL, {"run", GOOD, "--threads", "100000"}, "argument --threads"},
    {"run, --threads -1", NULL, {"run", GOOD, "--threads", "-1"}, "argument --threads"},
    {"run, --threads abc", NULL, {"run", GOOD, "--threads", "abc"}, "argument --threads"},
    {"run, --threads 4x", NULL, {"run", GOOD, "--threads", "4x"}, "argument --threads"},
    {"run, --tp abc", NULL, {"run", GOOD, "--tp", "abc"}, "argument --tp"},
    {"run, --tp 0", NULL, {"run", GOOD, "--tp", "0"}, "argument --tp"},
    {"run, --ep 1025", NULL, {"run", GOOD, "--ep", "1025"}, "argument --ep"},
    {"run, --tp with --ep", NULL, {"run", GOOD, "--tp", "1", "--ep", "2"}, "argument --tp: cannot be combined with --ep"},
    {"run, --tp given twice", NULL, {"run", GOOD, "--tp", "2", "--tp=2"}, "argument --tp: given twice"},
    {"run, --layer -1", NULL, {"run", GOOD, "--layer", "-1"}, "argument --layer"},
    {"run, --layer 1.5", NULL, {"run", GOOD, "--layer", "1.5"}, "argument --layer"},
    {"run, --layer not a MoE layer", NULL, {"run", GOOD, "--layer", "4"}, "model.llm.layers.4.mlp.gate.weight"},
    {"run, --precision fast", NULL, {"run", GOOD, "--precision", "fast"}, "argument --precision"},
    {"run, --backend nope", NULL, {"run", GOOD, "--backend", "nope"}, "argument --backend: unknown backend 'nope'"},
    {"run, --pad-inter -4", NULL, {"run", GOOD, "--pad-inter", "-4"}, "argument --pad-inter"},
    {"run, --stages=1", NULL, {"run", GOOD, "--stages=1"}, "argument --stages: takes no value"},
    {"run, unknown option", NULL, {"run", GOOD, "--frob"}, "argument --frob: unknown option"},
    {"run, trailing valued option", NULL, {"run", GOOD, "--layer"}, "argument --layer: needs a value"},
    {"run, value is an option", NULL, {"run", "--model", "--input", "$I", "--out", "$O"}, "argument --model: needs a value"},
    {"run, stray word", NULL, {"run", GOOD, "extra"}, "argument 'extra': unexpected"},
    {"run, TP 3 does not divide", NULL, {"run", GOOD, "--tp", "3"}, "TP 3 does not divide intermediate_size 64"},
    {"run, EP 7 > R", NULL, {"run", GOOD, "--ep", "7", "--pad-inter", "3"}, "split"},
    /* ---- run: the model directory and config.json */
    {"run, --model missing", NULL, {"run", "--model", "$D/absent", "--input", "$I", "--out", "$O"}, "absent/config.json"},
    {"run, no config.json", p_cfg_missing, {"run", GOOD}, "config.json: cannot open"},
    {"run, config.json a directory", p_cfg_dir, {"run", GOOD}, "config.json: not a regular file"},
    {"run, config.json a FIFO", p_cfg_fifo, {"run", GOOD}, "config.json: not a regular file"},
    {"run, config.json + garbage", p_cfg_garbage, {"run", GOOD}, "bytes after the JSON value"},
    {"run, config.json + \\0garbage", p_cfg_nulgarbage, {"run", GOOD}, "bytes after the JSON value"},
    {"run, config.json not JSON", p_cfg_notjson, {"run", GOOD}, "not valid JSON"},
    {"run, config.json empty", p_cfg_empty, {"run", GOOD}, "not valid JSON"},
    {"run, config.json an array", p_cfg_array, {"run", GOOD}, "not a JSON object"},
    {"run, config.json nested 2000 deep", p_cfg_deep, {"run", GOOD}, "not valid JSON"},
    {"run, config.json over 16 MiB", p_cfg_big, {"run", GOOD}, "more than the 16777216 allowed"},
    {"run, hidden_size missing", p_cfg_no_hidden, {"run", GOOD}, "config field hidden_size"},
    {"run, hidden_size a string", p_cfg_hidden_str, {"run", GOOD}, "config field hidden_size: not an integer"},
    {"run, hidden_size 64.5", p_cfg_hidden_frac, {"run", GOOD}, "config field hidden_size: not an integer"},
    {"run, hidden_size 1e300", p_cfg_hidden_huge, {"run", GOOD}, "config field hidden_size"},
    {"run, K > R", p_cfg_k_gt_r, {"run", GOOD}, "config field num_experts_per_tok"},
    {"run, K = 0", p_cfg_k_zero, {"run", GOOD}, "config field num_experts_per_tok"},
    {"run, route_scale 1e300", p_cfg_rs, {"run", GOOD}, "config field route_scale"},
    {"run, route_scale a string", p_cfg_rs_str, {"run", GOOD}, "config field route_scale"},
    {"run, use_gate_bias \"yes\"", p_cfg_bias_flag, {"run", GOOD}, "config field use_gate_bias"},
    {"run, use_gate_bias false, bias present", p_cfg_bias_false, {"run", GOOD}, "use_gate_bias is false"},
    {"run, exclude a string", p_cfg_excl_str, {"run", GOOD}, "config field quantization_config.exclude"},
    {"run, exclude[0] a number", p_cfg_excl_num, {"run", GOOD}, "quantization_config.exclude[0]"},
    {"run, exclude_modules an object", p_cfg_excl_mod, {"run", GOOD}, "quantization_config.exclude_modules"},
    {"run, one expert weight name excluded", p_cfg_one_name, {"run", GOOD}, "experts.w2_weight"},
    {"run, MXFP4 experts excluded", p_cfg_excluded_mx, {"run", GOOD}, "bf16 was expected"},
    {"run, text_config 3", p_cfg_text3, {"run", GOOD}, "config field text_config"},
    {"run, quantization_config 5", p_cfg_qc_num, {"run", GOOD}, "config field quantization_config"},
    /* ---- run: safetensors files */
    {"run, no weights", p_no_weights, {"run", GOOD}, "neither model.safetensors.index.json nor model.safetensors"},
    {"run, model.safetensors a FIFO", p_st_fifo, {"run", GOOD}, "model.safetensors: not a regular file"},
    {"run, index a FIFO", p_index_fifo, {"run", GOOD}, "model.safetensors.index.json: not a regular file"},
    {"run, empty safetensors", p_st_empty, {"run", GOOD}, "truncated"},
    {"run, 4-byte safetensors", p_st_short, {"run", GOOD}, "truncated"},
    {"run, header length absurd", p_st_hlen_huge, {"run", GOOD}, "header length"},
    {"run, header length past the end", p_st_hlen_past, {"run", GOOD}, "truncated: header length 64"},
    {"run, header not JSON", p_st_notjson, {"run", GOOD}, "header is not valid JSON"},
    {"run, header + garbage", p_st_trailing, {"run", GOOD}, "bytes after its JSON object"},
    {"run, header + \\0junk", p_st_nul_trailing, {"run", GOOD}, "bytes after its JSON object"},
    {"run, header padded with NUL bytes", p_st_nul_pad, {"run", GOOD}, "bytes after its JSON object"},
    {"run, header not an object", p_st_not_brace, {"run", GOOD}, "does not start with '{'"},
    {"run, unknown dtype", p_st_dtype, {"run", GOOD}, "tensor t: unknown dtype 'Q7'"},
    {"run, shape not an array", p_st_shape, {"run", GOOD}, "tensor t: shape is not an array"},
    {"run, negative shape", p_st_shape_neg, {"run", GOOD}, "shape[0]"},
    {"run, 9 dimensions", p_st_ndim, {"run", GOOD}, "9 dimensions"},
    {"run, offsets disagree with shape", p_st_offsets, {"run", GOOD}, "tensor t: data_offsets [0, 1] hold 1 bytes"},
    {"run, offsets reversed", p_st_offsets_rev, {"run", GOOD}, "end before begin"},
    {"run, offsets a string", p_st_offsets_str, {"run", GOOD}, "data_offsets is not two"},
    {"run, tensors overlap", p_st_overlap, {"run", GOOD}, "overlap tensor a"},
    {"run, hole before a tensor", p_st_hole, {"run", GOOD}, "leaving a hole"},
    {"run, trailing data bytes", p_st_extra_bytes, {"run", GOOD}, "trailing bytes"},
    {"run, data past the end", p_st_past_end, {"run", GOOD}, "out of range"},
    {"run, unknown header field", p_st_unknown_field, {"run", GOOD}, "unknown header field 'x'"},
    {"run, entry lacks data_offsets", p_st_lacks, {"run", GOOD}, "lacks 'data_offsets'"},
    {"run, tensor named twice", p_st_dup, {"run", GOOD}, "appears twice"},
    {"run, metadata not strings", p_st_meta, {"run", GOOD}, "__metadata__ field 'k'"},
    {"run, entry not an object", p_st_entry_num, {"run", GOOD}, "tensor a: header entry is not an object"},
    {"run, empty tensor name", p_st_empty_name, {"run", GOOD}, "empty name"},
    {"run, tensor name not UTF-8", p_st_bad_utf8, {"run", GOOD}, "is not valid UTF-8"},
    {"run, tensor name with a newline", p_st_newline_name, {"run", GOOD}, "tensor evil\\nline2: unknown dtype"},
    {"run, tensor name with an escape", p_st_escape_name, {"run", GOOD}, "tensor \\x1B[2Jevil"},
    {"run, checkpoint truncated", p_st_truncated, {"run", GOOD}, "model.safetensors"},
    {"run, checkpoint cut in its header", p_st_truncated_header, {"run", GOOD}, "truncated"},
    {"run, no MoE layer", p_no_layer, {"run", GOOD}, "holds no MoE layer"},
    /* ---- run: the layer's tensors */
    {"run, gate.bias missing (flag true)", p_omit_bias, {"run", GOOD}, "model.llm.layers.3.mlp.gate.bias"},
    {"run, global_scale missing", p_omit_gs, {"run", GOOD}, "model.llm.layers.3.mlp.gate.global_scale"},
    {"run, w13 missing", p_omit_w13, {"run", GOOD}, "missing tensor model.llm.layers.3.mlp.experts.w13_weight"},
    {"run, w13 scale missing", p_omit_w13s, {"run", GOOD}, "model.llm.layers.3.mlp.experts.w13_weight_scale"},
    {"run, w2 missing", p_omit_w2, {"run", GOOD}, "missing tensor model.llm.layers.3.mlp.experts.w2_weight"},
    {"run, w2 scale missing", p_omit_w2s, {"run", GOOD}, "model.llm.layers.3.mlp.experts.w2_weight_scale"},
    {"run, sink w13 missing", p_omit_sw13, {"run", GOOD}, "model.llm.layers.3.mlp.shared_experts.shared_w13_weight"},
    {"run, sink w2 missing", p_omit_sw2, {"run", GOOD}, "model.llm.layers.3.mlp.shared_experts.shared_w2_weight"},
    {"run, gate.weight shape", p_shape_gate, {"run", GOOD}, "tensor model.llm.layers.3.mlp.gate.weight: shape"},
    {"run, gate.bias shape", p_shape_bias, {"run", GOOD}, "tensor model.llm.layers.3.mlp.gate.bias: shape"},
    {"run, w13 shape", p_shape_w13, {"run", GOOD}, "tensor model.llm.layers.3.mlp.experts.w13_weight: shape"},
    {"run, w2 scale shape", p_shape_w2s, {"run", GOOD}, "model.llm.layers.3.mlp.experts.w2_weight_scale: shape"},
    {"run, sink w2 shape", p_shape_sw2, {"run", GOOD}, "shared_experts.shared_w2_weight: shape"},
    {"run, gate.weight dtype", p_dtype_gate, {"run", GOOD}, "tensor model.llm.layers.3.mlp.gate.weight: dtype"},
    {"run, gate.bias dtype", p_dtype_bias, {"run", GOOD}, "tensor model.llm.layers.3.mlp.gate.bias: dtype"},
    {"run, sink w13 dtype", p_dtype_sw13, {"run", GOOD}, "shared_experts.shared_w13_weight: dtype"},
    {"run, NaN scale byte", p_nan_scale, {"run", GOOD}, "tensor model.llm.layers.3.mlp.experts.w2_weight_scale: NaN E8M0 byte 0xFF at [expert 2, row 7, block 1]"},
    {"run, NaN scale byte under TP 2", p_nan_scale, {"run", GOOD, "--tp", "2"}, "model.llm.layers.3.mlp.experts.w2_weight_scale: NaN"},
    {"run, overflowing scale", p_overflow_scale, {"run", GOOD}, "model.llm.layers.3.mlp.experts.w13_weight_scale: E8M0 byte 0xFE"},
    /* ---- run: the index */
    {"run, index not JSON", p_index_notjson, {"run", GOOD}, "model.safetensors.index.json: not valid JSON"},
    {"run, index + trailing", p_index_trailing, {"run", GOOD}, "bytes after the JSON value"},
    {"run, index without weight_map", p_index_nomap, {"run", GOOD}, "field weight_map"},
    {"run, weight_map an array", p_index_array, {"run", GOOD}, "field weight_map"},
    {"run, weight_map entry a number", p_index_notstr, {"run", GOOD}, "entry for tensor model.llm.layers.3.mlp.gate.weight"},
    {"run, weight_map entry ../x", p_index_slash, {"run", GOOD}, "not a file name in the model directory"},
    {"run, weight_map entry ..", p_index_dotdot, {"run", GOOD}, "not a file name in the model directory"},
    {"run, weight_map file missing", p_index_missing_file, {"run", GOOD}, "shard-9.safetensors: cannot open"},
    {"run, the index only, no files", NULL, {"run", "--model", "$D/none", "--input", "$I", "--out", "$O"}, "none/config.json: cannot open"},
    {"run, weight_map file not safetensors", p_index_wrong_file, {"run", GOOD}, "config.json"},
    {"run, weight_map names a tensor the file lacks", p_index_not_held, {"run", GOOD}, "gate.bias: the weight map names file other.safetensors, which does not hold it"},
    {"run, weight_map names a tensor twice", p_index_dup, {"run", GOOD}, "appears twice in weight_map"},
    {"run, weight_map name not UTF-8", p_index_utf8, {"run", GOOD}, "not valid UTF-8"},
    /* ---- run: the input */
    {"run, --input missing", NULL, {"run", "--model", "$M", "--input", "$D/absent.st", "--out", "$O"}, "absent.st: cannot open"},
    {"run, --input a FIFO", p_in_fifo, {"run", GOOD}, "not a regular file"},
    {"run, --input a directory", p_in_dir, {"run", GOOD}, "not a regular file"},
    {"run, --input /dev/null", NULL, {"run", "--model", "$M", "--input", "/dev/null", "--out", "$O"}, "/dev/null: not a regular file"},
    {"run, --input not safetensors", p_in_notst, {"run", GOOD}, "header length"},
    {"run, --input truncated", p_in_truncated, {"run", GOOD}, "out of range"},
    {"run, x missing", p_in_missing_x, {"run", GOOD}, "missing tensor x"},
    {"run, x F32", p_in_dtype, {"run", GOOD}, "tensor x (input file"},
    {"run, x width 32", p_in_width, {"run", GOOD}, "expected [T, 64]"},
    {"run, x 3-D", p_in_rank, {"run", GOOD}, "expected [T, 64]"},
    /* ---- diff */
    {"diff, no options", NULL, {"diff"}, "argument --model: missing"},
    {"diff, no --backend", NULL, {"diff", "--model", "$M", "--input", "$I"}, "argument --backend: missing"},
    {"diff, unknown option", NULL, {DIFF, "--out", "x"}, "argument --out: unknown option"},
    {"diff, --tp abc", NULL, {DIFF, "--tp", "abc"}, "argument --tp: 'abc'"},
    {"diff, --tp 1 --ep 2", NULL, {DIFF, "--tp", "1", "--ep", "2"}, "argument --tp: cannot be combined with --ep"},
    {"diff, --layer x", NULL, {DIFF, "--layer", "x"}, "argument --layer"},
    {"diff, --pad-inter 1e3", NULL, {DIFF, "--pad-inter", "1e3"}, "argument --pad-inter"},
    {"diff, --precision bad", NULL, {DIFF, "--precision", "fp8"}, "argument --precision"},
    {"diff, --backend nope", NULL, {"diff", "--model", "$M", "--input", "$I", "--backend", "nope"}, "argument --backend: unknown backend 'nope'"},
    {"diff, --against nope", NULL, {DIFF, "--against", "nope"}, "argument --against: unknown backend 'nope'"},
    {"diff, --reference nope", NULL, {DIFF, "--reference", "nope"}, "argument --reference: unknown backend 'nope'"},
    {"diff, trailing option", NULL, {DIFF, "--against"}, "argument --against: needs a value"},
    {"diff, stray word", NULL, {DIFF, "now"}, "argument 'now': unexpected"},
    {"diff, control characters in a tensor name", p_st_newline_name, {DIFF}, "tensor evil\\nline2"},
    {"diff, config.json + \\0garbage", p_cfg_nulgarbage, {DIFF}, "bytes after the JSON value"},
    {"diff, --input a FIFO", p_in_fifo, {DIFF}, "not a regular file"},
    {"diff, NaN scale", p_nan_scale, {DIFF}, "model.llm.layers.3.mlp.experts.w2_weight_scale: NaN"},
    {"diff, x width 32", p_in_width, {DIFF}, "expected [T, 64]"},
    {"diff, TP 3 does not divide", NULL, {DIFF, "--tp", "3"}, "TP 3 does not divide"},
    /* ---- fuzz */
    {"fuzz, --seconds abc", NULL, {"fuzz", "--seconds", "abc", "--report-dir", "$D/rep"}, "argument --seconds: 'abc'"},
    {"fuzz, --seconds -5", NULL, {"fuzz", "--seconds", "-5", "--report-dir", "$D/rep"}, "argument --seconds: '-5'"},
    {"fuzz, --seconds nan", NULL, {"fuzz", "--seconds", "nan", "--report-dir", "$D/rep"}, "argument --seconds: 'nan'"},
    {"fuzz, --seconds inf", NULL, {"fuzz", "--seconds", "inf", "--report-dir", "$D/rep"}, "argument --seconds: 'inf'"},
    {"fuzz, --seconds 0", NULL, {"fuzz", "--seconds", "0", "--report-dir", "$D/rep"}, "argument --seconds: '0'"},
    {"fuzz, --seed xyz", NULL, {"fuzz", "--seed", "xyz", "--report-dir", "$D/rep"}, "argument --seed: 'xyz'"},
    {"fuzz, --seed -1", NULL, {"fuzz", "--seed", "-1", "--report-dir", "$D/rep"}, "argument --seed: '-1'"},
    {"fuzz, --seed 2^64", NULL, {"fuzz", "--seed", "18446744073709551616", "--report-dir", "$D/rep"}, "argument --seed"},
    {"fuzz, --max-cases -1", NULL, {"fuzz", "--max-cases", "-1", "--report-dir", "$D/rep"}, "argument --max-cases"},
    {"fuzz, --max-cases 1.5", NULL, {"fuzz", "--max-cases", "1.5", "--report-dir", "$D/rep"}, "argument --max-cases"},
    {"fuzz, unwritable --report-dir", p_report_file, {"fuzz", "--seconds", "1", "--report-dir", "$D/afile/sub"}, "argument --report-dir: cannot create or write directory"},
    {"fuzz, trailing unknown option", NULL, {"fuzz", "--seconds", "1", "--frob"}, "argument --frob: unknown option"},
    {"fuzz, trailing valued option", NULL, {"fuzz", "--report-dir", "$D/rep", "--seed"}, "argument --seed: needs a value"},
    {"fuzz, stray word", NULL, {"fuzz", "smoke"}, "argument 'smoke': unexpected"},
    {"fuzz, --case garbage", NULL, {"fuzz", "--case", "D=banana"}, "D"},
    {"fuzz, --case with --selftest", NULL, {"fuzz", "--case", "x", "--selftest"}, "argument --case: cannot be combined with --selftest"},
    {"fuzz, --mutant nope", NULL, {"fuzz", "--mutant", "nope", "--seconds", "1", "--report-dir", "$D/rep"}, "argument --mutant: unknown mutant 'nope'"},
    {"fuzz, --paths nope", NULL, {"fuzz", "--paths", "nope", "--seconds", "1", "--report-dir", "$D/rep"}, "argument --paths"},
    {"fuzz, --suite nope", NULL, {"fuzz", "--suite", "nope", "--seconds", "1", "--report-dir", "$D/rep"}, "nope"},
    {"fuzz, --suite-dir missing", NULL, {"fuzz", "--suite-dir", "$D/nosuites", "--seconds", "1", "--report-dir", "$D/rep"}, "nosuites"},
    {"fuzz, --repeat 0", NULL, {"fuzz", "--repeat", "0"}, "argument --repeat"},
    {"fuzz, --reruns x", NULL, {"fuzz", "--reruns", "x"}, "argument --reruns"},
    {"fuzz, --history 1e9", NULL, {"fuzz", "--history", "1e9"}, "argument --history"},
    {"fuzz, --stress with --replay", NULL, {"fuzz", "--stress", "--replay", "f"}, "argument --stress: cannot be combined with --replay"},
    {"fuzz, --replay missing file", NULL, {"fuzz", "--replay", "$D/none.seq", "--report-dir", "$D/rep"}, "none.seq"},
    {"fuzz, --selftest with --mutant", NULL, {"fuzz", "--selftest", "--mutant", "x"}, "argument --selftest: cannot be combined with --mutant"},
    {"fuzz, --no-ref=1", NULL, {"fuzz", "--no-ref=1"}, "argument --no-ref: takes no value"},
};

/* argv for a case: the tool, then args with $M, $I, $O and $D expanded (static storage). */
static int expand(const hostile_case *c, const char **argv) {
    static char buf[18][1200];
    int n = 0;
    argv[n++] = tool;
    for (int i = 0; c->args[i] && n < 18; i++) {
        const char *a = c->args[i];
        const char *sub = !strncmp(a, "$M", 2) ? cur_model : !strncmp(a, "$I", 2) ? cur_input
                          : !strncmp(a, "$D", 2) ? box : NULL;
        char out[800];
        snprintf(out, sizeof out, "%s/out.st", box);
        if (!strcmp(a, "$O")) snprintf(buf[n], sizeof buf[n], "%s", out);
        else if (sub) snprintf(buf[n], sizeof buf[n], "%s%s", sub, a + 2);
        else snprintf(buf[n], sizeof buf[n], "%s", a);
        argv[n] = buf[n];
        n++;
    }
    argv[n] = NULL;
    return n;
}

/* One case: plant, list the sandbox, run, check status, line, culprit, listing. */
static bool run_case(const hostile_case *c, char *why, size_t len) {
    snprintf(cur_model, sizeof cur_model, "%s", good_model);
    snprintf(cur_input, sizeof cur_input, "%s", good_input);
    if (c->plant) c->plant();
    const char *argv[20];
    expand(c, argv);
    const char *before = listing(0);
    int status = wait_bounded(spawn(argv, out_text, err_path), 20.0, c->what);
    const char *text = test_text_of(err_path);
    int lines = 0;
    for (const char *p = text; *p; p++) lines += *p == '\n';
    const char *after = listing(1);
    const char *prefix = "inkling-moe";
    if (!WIFEXITED(status))
        return snprintf(why, len, "ended by signal %d: %s", WTERMSIG(status), text), false;
    if (WEXITSTATUS(status) != 2)
        return snprintf(why, len, "exit %d, wanted 2: %s", WEXITSTATUS(status), text), false;
    if (lines != 1 || strncmp(text, prefix, strlen(prefix)) || !strstr(text, c->frag))
        return snprintf(why, len, "%d stderr lines, wanted one naming '%s': %s", lines, c->frag, text),
               false;
    if (strcmp(before, after))
        return snprintf(why, len, "the sandbox changed:\n--- before\n%s--- after\n%s", before, after),
               false;
    return true;
}

static void need_tool(void) {
    if (access(tool, X_OK)) {
        print_message("%s not built: hostile-input tests skipped\n", tool);
        skip();
    }
}

static void test_hostile_table(void **state) {
    (void)state;
    need_tool();
    const int n = (int)(sizeof cases / sizeof cases[0]);
    int failed = 0;
    static char why[1 << 17];
    for (int i = 0; i < n; i++)
        if (!run_case(&cases[i], why, sizeof why)) {
            failed++;
            print_error("case %d (%s): %s\n", i, cases[i].what, why);
        }
    print_message("hostile input: %d cases, %d failed\n", n, failed);
    if (failed) fail_msg("%d of %d hostile-input cases failed", failed, n);
}

/* ---------------------------------------------------------------- faults */

/* A model and an input of T_big tokens whose output file takes a while to write. */
enum { T_BIG = 2500 };
static char big_input[700];

static void make_big_input(void) {
    if (big_input[0]) return;
    snprintf(big_input, sizeof big_input, "%s/big-input.safetensors", scratch);
    uint16_t *xb = malloc((size_t)T_BIG * 64 * sizeof *xb);
    moe_random_input(T_BIG, 64, 5, xb);
    assert_int_equal(fixture_write_input(big_input, T_BIG, 64, xb), 0);
    free(xb);
}

/* Whether a file is a complete output: it parses and holds out [T_BIG, 64]. */
static bool complete_output(const char *path) {
    moe_st_file f;
    moe_error err = {0};
    if (moe_st_open(path, &f, &err)) return false;
    const moe_st_tensor *o = moe_st_find(&f, "out");
    bool ok = o && o->ndim == 2 && o->shape[0] == T_BIG && o->shape[1] == 64 &&
              moe_st_find(&f, "topk_ids") && moe_st_find(&f, "logits");
    moe_st_close(&f);
    return ok;
}

/* Whether dir holds an output temporary now. */
static bool temporary_present(const char *dir) { return fixture_count_entries(dir, false) > 0; }

static void test_kills_during_write(void **state) {
    (void)state;
    need_tool();
    make_big_input();
    char dir[700], out[800];
    snprintf(dir, sizeof dir, "%s/kills", scratch);
    mkdir(dir, 0755);
    snprintf(out, sizeof out, "%s/out.st", dir);
    const char *argv[] = {tool, "run", "--model", good_model, "--input", big_input, "--out", out,
                          "--precision", "exact", "--stages", NULL};
    char o_path[800], e_path[800];
    snprintf(o_path, sizeof o_path, "%s/kill.out", scratch);
    snprintf(e_path, sizeof e_path, "%s/kill.err", scratch);
    /* a complete older output: every kill must leave it whole, or replace it whole */
    assert_int_equal(WEXITSTATUS(wait_bounded(spawn(argv, o_path, e_path), 60, "first run")), 0);
    assert_true(complete_output(out));
    int during = 0, finished = 0, attempts = 0;
    const double t0 = now_s();
    while (during < 20 && attempts < 80 && now_s() - t0 < 150) {
        attempts++;
        pid_t pid = spawn(argv, o_path, e_path);
        bool seen = false;
        int status = 0;
        /* kill as soon as the temporary exists: the run is then inside the write */
        for (;;) {
            if (temporary_present(dir)) {
                seen = true;
                kill(pid, attempts % 2 ? SIGTERM : SIGINT);
                break;
            }
            if (waitpid(pid, &status, WNOHANG) == pid) break;
        }
        if (seen) status = wait_bounded(pid, 30, "killed run");
        if (seen && WIFSIGNALED(status)) during++;
        else finished += WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (temporary_present(dir)) fail_msg("kill %d left a temporary behind", attempts);
        if (!complete_output(out)) fail_msg("kill %d left a damaged --out", attempts);
    }
    print_message("kills during the write: %d (of %d runs; %d finished before the signal landed): "
                  "0 temporaries left, --out whole every time\n", during, attempts, finished);
    assert_int_equal(during, 20);
}

static void test_concurrent_writers(void **state) {
    (void)state;
    need_tool();
    make_big_input();
    char dir[700], out[800];
    snprintf(dir, sizeof dir, "%s/race", scratch);
    mkdir(dir, 0755);
    snprintf(out, sizeof out, "%s/out.st", dir);
    const char *argv[] = {tool, "run", "--model", good_model, "--input", big_input, "--out", out,
                          "--precision", "exact", "--stages", NULL};
    int rounds = 0, checks = 0, zero = 0;
    for (; rounds < 6; rounds++) {
        unlink(out);
        char o[2][800], e[2][800];
        pid_t pid[2];
        for (int k = 0; k < 2; k++) {
            snprintf(o[k], sizeof o[k], "%s/race%d.out", scratch, k);
            snprintf(e[k], sizeof e[k], "%s/race%d.err", scratch, k);
            pid[k] = spawn(argv, o[k], e[k]);
        }
        /* while both run, whenever --out exists it must be a complete file */
        int done = 0, status[2] = {0, 0};
        bool exited[2] = {false, false};
        while (done < 2) {
            if (access(out, F_OK) == 0) {
                checks++;
                if (!complete_output(out)) fail_msg("round %d: a truncated --out was published", rounds);
            }
            for (int k = 0; k < 2; k++)
                if (!exited[k] && waitpid(pid[k], &status[k], WNOHANG) == pid[k]) exited[k] = true, done++;
        }
        for (int k = 0; k < 2; k++) {
            if (!WIFEXITED(status[k]) || WEXITSTATUS(status[k]) != 0)
                fail_msg("round %d: writer %d failed: %s", rounds, k, test_text_of(e[k]));
            zero++;
        }
        if (!complete_output(out)) fail_msg("round %d: the published --out is not complete", rounds);
        if (temporary_present(dir)) fail_msg("round %d: a temporary was left", rounds);
    }
    print_message("concurrent writers: %d rounds of 2, %d exits 0, %d looks at --out while both "
                  "ran, 0 truncated\n", rounds, zero, checks);
}

/* A checkpoint shrinking between the header read and the tensor reads: an error, never SIGBUS
 * (in process, so that the moment is exact). */
static void test_truncated_underneath(void **state) {
    (void)state;
    char dir[700], path[800];
    snprintf(dir, sizeof dir, "%s/shrink", scratch);
    moe_layer_data ld;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_random(&cfg, 9, &ld, &err), MOE_OK);
    assert_int_equal(fixture_write_model(dir, &ld, &(fixture_opts){.layer = LAYER}), 0);
    moe_layer_data_free(&ld);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    moe_checkpoint ck;
    assert_int_equal(moe_checkpoint_open(dir, &ck, &err), MOE_OK);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    truncate_to(path, sb.st_size / 3);
    moe_config c;
    moe_weights w;
    assert_int_equal(moe_checkpoint_layer(&ck, -1, NULL, &c, &w, &err), MOE_ERR_IO);
    assert_msg_has(err, path);
    assert_msg_has(err, "truncated while being read");
    moe_checkpoint_close(&ck);
    /* the same for one tensor of an opened file */
    moe_st_file f;
    snprintf(path, sizeof path, "%s", good_input);
    char copy[800];
    snprintf(copy, sizeof copy, "%s/shrink-input.safetensors", scratch);
    copy_file(path, copy);
    assert_int_equal(moe_st_open(copy, &f, &err), MOE_OK);
    truncate_to(copy, (off_t)f.data_offset + 3);
    uint8_t buf[T * 64 * 2];
    assert_int_equal(moe_st_read(&f, moe_st_find(&f, "x"), buf, &err), MOE_ERR_IO);
    assert_msg_has(err, "tensor x");
    moe_st_close(&f);
}

/* 200,000 weight_map entries (about 14 MB): the index is read in one pass. */
static void test_big_index_linear(void **state) {
    (void)state;
    need_tool();
    char dir[700], path[800];
    snprintf(dir, sizeof dir, "%s/bigindex", scratch);
    moe_layer_data ld;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_random(&cfg, 3, &ld, &err), MOE_OK);
    assert_int_equal(fixture_write_model(dir, &ld, &(fixture_opts){.layer = LAYER}), 0);
    moe_layer_data_free(&ld);
    moe_st_file f;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(moe_st_open(path, &f, &err), MOE_OK);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *ix = fopen(path, "wb");
    assert_non_null(ix);
    fprintf(ix, "{\"metadata\": {}, \"weight_map\": {");
    for (int i = 0; i < f.n_tensors; i++) fprintf(ix, "\"%s\": \"model.safetensors\", ", f.tensors[i].name);
    for (int i = 0; i < 200000; i++)
        fprintf(ix, "%s\"model.llm.layers.%d.self_attn.p%d.weight\": \"model.safetensors\"", i ? ", " : "",
                100 + i / 1000, i);
    fprintf(ix, "}}\n");
    assert_int_equal(fclose(ix), 0);
    moe_st_close(&f);
    char out[800], o_path[800], e_path[800];
    snprintf(out, sizeof out, "%s/out.st", scratch);
    snprintf(o_path, sizeof o_path, "%s/bigindex.out", scratch);
    snprintf(e_path, sizeof e_path, "%s/bigindex.err", scratch);
    const char *argv[] = {tool, "run", "--model", dir, "--input", good_input, "--out", out, NULL};
    double t0 = now_s();
    int status = wait_bounded(spawn(argv, o_path, e_path), 30, "200,000-entry index");
    double took = now_s() - t0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail_msg("%s", test_text_of(e_path));
    print_message("200,000-entry weight map: %.2f s\n", took);
    assert_true(took < 10.0);
}

/* ---------------------------------------------------------------- setup */

static int setup(void **state) {
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    const char *build = getenv("INKLING_BUILD");
    snprintf(tool, sizeof tool, "%s/bin/inkling-moe", build && build[0] ? build : "build");
    if (fixture_tempdir(box, sizeof box, "hostile") || fixture_tempdir(scratch, sizeof scratch, "hostile-io"))
        return -1;
    snprintf(err_path, sizeof err_path, "%s/stderr.txt", scratch);
    snprintf(out_text, sizeof out_text, "%s/stdout.txt", scratch);
    snprintf(good_model, sizeof good_model, "%s/model", box);
    snprintf(good_input, sizeof good_input, "%s/input.safetensors", box);
    moe_layer_data ld;
    moe_error err = {0};
    if (moe_layer_data_random(&cfg, 1, &ld, &err)) return -1;
    int bad = fixture_write_model(good_model, &ld, &(fixture_opts){.layer = LAYER});
    moe_layer_data_free(&ld);
    static uint16_t x[T * 64];
    moe_random_input(T, 64, 3, x);
    return bad || fixture_write_input(good_input, T, 64, x) ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    fixture_remove_tree(box);
    fixture_remove_tree(scratch);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostile_table),
        cmocka_unit_test(test_kills_during_write),
        cmocka_unit_test(test_concurrent_writers),
        cmocka_unit_test(test_truncated_underneath),
        cmocka_unit_test(test_big_index_linear),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
