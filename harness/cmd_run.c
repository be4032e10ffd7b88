/*
 * cmd_run.c: `inkling-moe run`, one MoE layer of a checkpoint on an input file
 * (contract.md [cli.run]).
 *
 * Rules:
 *   - the layer is loaded through the checkpoint loader as a view into the mapped files;
 *     --tp N / --ep N run all N ranks, each from its own shard (moe_shard_build reads only that
 *     rank's slab), and write the sum of the partials added in rank order;
 *   - the output file holds out [T, D] (F32 for exact, BF16 for serving), topk_ids I32 [T, K],
 *     topk_weights F32 [T, K+S]; with --stages also logits F32 [T, R+S] and, for an unsplit
 *     layer whose backend fills it, sink_y F32 [T, D] (under a split rank 0's sink_y would be
 *     only a partial, so it is left out);
 *   - exit 0 on success; on any failure exit 2 with exactly one line on stderr naming the
 *     tensor, config field or argument at fault, and no output file (the writer renames a
 *     complete temporary file into place only at the very end).
 */
#include "cli_args.h"
#include "commands.h"
#include "paths.h"

#include "../common/checkpoint.h"
#include "../common/moe.h"
#include "../common/numeric.h"
#include "../common/out_file.h"
#include "../common/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: inkling-moe run --model DIR [--layer L] --input FILE --out FILE\n"
            "        [--backend ref|blas|cuda] [--precision exact|serving|engine] [--tp N | --ep N]\n"
            "        [--pad-inter N] [--stages] [--threads N] [--strict]\n\n"
            "  --model DIR        checkpoint: config.json plus model.safetensors or shards with\n"
            "                     model.safetensors.index.json\n"
            "  --layer L          the MoE layer; may be left out when the files hold exactly one\n"
            "  --input FILE       safetensors file with x BF16 [T, D]\n"
            "  --out FILE         output safetensors: out [T, D] (F32 exact, BF16 serving),\n"
            "                     topk_ids I32 [T, K], topk_weights F32 [T, K+S]\n"
            "  --backend NAME     ref (default), blas, cuda, mutant:NAME, plugin:FILE.so, exec:CMD\n"
            "  --precision P      serving (default), exact, or engine (computed as serving)\n"
            "  --tp N, --ep N     run all N ranks of tensor / expert parallelism and sum them\n"
            "  --pad-inter N      round each rank's intermediate width up to a multiple of N\n"
            "  --stages           also write logits F32 [T, R+S] (and sink_y F32 [T, D] unsplit)\n"
            "  --threads N        threads for the backend, 0..256 (0: its default)\n"
            "  --strict           refuse input rows holding NaN or inf instead of NaN outputs,\n"
            "                     and tensors under the layer that the loader would ignore\n");
}

typedef struct {
    const char *model, *input, *out, *backend;
    int layer, n, pad_inter, threads;
    moe_split_kind kind;
    moe_precision precision;
    bool stages, strict;
} run_args;

/* One line on stderr, escaped (cli_args.h). */
static int fail_line(const char *msg) { return cli_fail("run", "%s", msg); }

/* Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, run_args *a) {
    *a = (run_args){.backend = "ref", .layer = -1, .n = 1, .kind = MOE_SPLIT_NONE,
                    .precision = MOE_PRECISION_SERVING};
    int tp = 1, ep = 1, precision = 1;
    cli_option opts[] = {
        {.name = "--model", .kind = CLI_STRING, .out = &a->model, .required = true, .nonempty = true},
        {.name = "--input", .kind = CLI_STRING, .out = &a->input, .required = true, .nonempty = true},
        {.name = "--out", .kind = CLI_STRING, .out = &a->out, .required = true, .nonempty = true},
        {.name = "--layer", .kind = CLI_INT, .out = &a->layer, .lo = 0, .hi = 999999},
        {.name = "--backend", .kind = CLI_STRING, .out = &a->backend, .nonempty = true},
        {.name = "--precision", .kind = CLI_CHOICE, .out = &precision, .choices = "exact,serving,engine"},
        {.name = "--tp", .kind = CLI_INT, .out = &tp, .lo = 1, .hi = 1024, .excludes = "--ep"},
        {.name = "--ep", .kind = CLI_INT, .out = &ep, .lo = 1, .hi = 1024},
        {.name = "--pad-inter", .kind = CLI_INT, .out = &a->pad_inter, .lo = 0, .hi = 1 << 20},
        {.name = "--threads", .kind = CLI_INT, .out = &a->threads, .lo = 0, .hi = CLI_MAX_THREADS},
        {.name = "--stages", .kind = CLI_FLAG, .out = &a->stages},
        {.name = "--strict", .kind = CLI_FLAG, .out = &a->strict},
    };
    const int n = (int)(sizeof opts / sizeof opts[0]);
    int rc = cli_parse("run", opts, n, argc, argv, usage);
    if (rc >= 0) return rc;
    a->precision = precision == 0 ? MOE_PRECISION_EXACT : precision == 1 ? MOE_PRECISION_SERVING : MOE_PRECISION_ENGINE;
    if (cli_find(opts, n, "--tp")->given) a->kind = MOE_SPLIT_TP, a->n = tp;
    if (cli_find(opts, n, "--ep")->given) a->kind = MOE_SPLIT_EP, a->n = ep;
    return -1;
}

static int by_string(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* --out must not be any file of the run: the input, config.json, hf_quant_config.json, the
 * index, or any file the weight map names (a shard not read for this layer is still part of
 * the checkpoint). */
static moe_status refuse_out_on_inputs(const run_args *a, const moe_checkpoint *ck, moe_error *err) {
    const int cap = ck->n_names + 5;
    const char **names = calloc((size_t)cap, sizeof *names);
    char **paths = calloc((size_t)cap, sizeof *paths);
    moe_status st = names && paths ? MOE_OK : moe_fail(err, MOE_ERR_NOMEM, "run: out of memory");
    int n = 0, np = 0;
    if (!st) {
        names[n++] = "config.json";
        names[n++] = "hf_quant_config.json";
        names[n++] = "model.safetensors.index.json";
        names[n++] = "model.safetensors";
        for (int i = 0; i < ck->n_names; i++) names[n++] = ck->name_file[i];
        qsort(names, (size_t)n, sizeof *names, by_string); /* then one path per distinct file */
    }
    for (int i = 0; i < n && !st; i++) {
        if (i && !strcmp(names[i], names[i - 1])) continue;
        size_t len = strlen(ck->dir) + strlen(names[i]) + 2;
        if (!(paths[np] = malloc(len))) st = moe_fail(err, MOE_ERR_NOMEM, "run: out of memory");
        else snprintf(paths[np++], len, "%s/%s", ck->dir, names[i]);
    }
    if (!st) {
        paths[np] = (char *)a->input;
        st = moe_out_refuse_same("argument --out", a->out, (const char *const *)paths, np + 1, err);
    }
    for (int i = 0; i < np; i++) free(paths[i]);
    free(paths);
    free(names);
    return st;
}

/* The output and the stages of one run, owned. */
typedef struct {
    float *out, *weights, *logits, *sink_y;
    int32_t *ids;
    uint16_t *out_bf16; /* serving: out rounded to bf16 */
} run_arrays;

static void arrays_free(run_arrays *r) {
    free(r->out);
    free(r->weights);
    free(r->logits);
    free(r->sink_y);
    free(r->ids);
    free(r->out_bf16);
}

static moe_status arrays_alloc(const run_args *a, const moe_config *cfg, int T, run_arrays *r, moe_error *err) {
    const size_t TD = (size_t)T * (size_t)cfg->D, G = (size_t)(cfg->R + cfg->S);
    r->out = malloc((TD ? TD : 1) * sizeof *r->out);
    r->ids = malloc(((size_t)T * (size_t)cfg->K + 1) * sizeof *r->ids);
    r->weights = malloc(((size_t)T * (size_t)(cfg->K + cfg->S) + 1) * sizeof *r->weights);
    if (a->stages) r->logits = malloc(((size_t)T * G + 1) * sizeof *r->logits);
    if (a->stages && a->kind == MOE_SPLIT_NONE) r->sink_y = malloc((TD ? TD : 1) * sizeof *r->sink_y);
    if (!r->out || !r->ids || !r->weights || (a->stages && !r->logits) ||
        (a->stages && a->kind == MOE_SPLIT_NONE && !r->sink_y))
        return moe_fail(err, MOE_ERR_NOMEM, "run: out of memory for T = %d tokens", T);
    return MOE_OK;
}

/* The output file: out (bf16 when serving), the routing, and the stages asked for. */
static moe_status write_outputs(const run_args *a, const moe_config *cfg, int T, unsigned filled, run_arrays *r,
                                moe_error *err) {
    const size_t TD = (size_t)T * (size_t)cfg->D;
    const bool serving = a->precision != MOE_PRECISION_EXACT; /* engine: computed as serving */
    if (serving) {
        r->out_bf16 = malloc((TD ? TD : 1) * sizeof *r->out_bf16);
        if (!r->out_bf16) return moe_fail(err, MOE_ERR_NOMEM, "run: out of memory for the output");
        for (size_t i = 0; i < TD; i++) r->out_bf16[i] = moe_f32_to_bf16(r->out[i]);
    }
    moe_st_entry e[5];
    int n = 0;
    e[n++] = (moe_st_entry){"out", serving ? MOE_ST_BF16 : MOE_ST_F32, 2, {T, cfg->D},
                            serving ? (const void *)r->out_bf16 : (const void *)r->out};
    e[n++] = (moe_st_entry){"topk_ids", MOE_ST_I32, 2, {T, cfg->K}, r->ids};
    e[n++] = (moe_st_entry){"topk_weights", MOE_ST_F32, 2, {T, cfg->K + cfg->S}, r->weights};
    if (a->stages) e[n++] = (moe_st_entry){"logits", MOE_ST_F32, 2, {T, (int64_t)(cfg->R + cfg->S)}, r->logits};
    if (r->sink_y && (filled & MOE_STAGE_SINK_Y))
        e[n++] = (moe_st_entry){"sink_y", MOE_ST_F32, 2, {T, cfg->D}, r->sink_y};
    return moe_st_write(a->out, e, n, err);
}

/* The layer forward over every rank into r; the routing (and logits with --stages) must be
 * reported. */
static moe_status forward(const run_args *a, const moe_backend *be, const moe_config *cfg, const moe_weights *w,
                          int T, const uint16_t *x, run_arrays *r, unsigned *filled, moe_error *err) {
    moe_options opt = moe_options_default();
    opt.precision = a->precision;
    opt.n_threads = a->threads;
    opt.strict_nonfinite = a->strict;
    moe_stages stages = {.logits = r->logits, .topk_ids = r->ids, .topk_weights = r->weights, .sink_y = r->sink_y};
    moe_status st = moe_forward_all_ranks(be, cfg, w, a->kind, a->n, a->pad_inter, &opt, T, x, r->out, &stages, err);
    *filled = stages.filled;
    if (st) return st;
    if (!(stages.filled & MOE_STAGE_TOPK) || (a->stages && !(stages.filled & MOE_STAGE_LOGITS)))
        return moe_fail(err, MOE_ERR_INTERNAL, "backend %s: did not report %s", be->name,
                        (stages.filled & MOE_STAGE_TOPK) ? "logits" : "topk_ids/topk_weights");
    return MOE_OK;
}

static moe_status run(const run_args *a, moe_error *err) {
    const moe_backend *be = moe_path_open(a->backend, err);
    if (!be) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return moe_fail(err, err->status, "argument --backend: %.480s", msg);
    }
    moe_checkpoint ck;
    moe_status st = moe_checkpoint_open(a->model, &ck, err);
    if (!st) st = refuse_out_on_inputs(a, &ck, err);
    if (st) {
        moe_checkpoint_close(&ck);
        return st;
    }
    moe_config cfg;
    moe_weights w;
    uint16_t *x = NULL;
    run_arrays r = {0};
    unsigned filled = 0;
    int T = 0;
    ck.strict = a->strict;
    st = moe_checkpoint_layer(&ck, a->layer, NULL, &cfg, &w, err);
    moe_split split = {a->kind, a->n, 0, a->pad_inter};
    if (!st) st = moe_split_validate(&cfg, &split, err);
    if (!st) st = moe_read_input(a->input, cfg.D, &T, &x, err);
    if (!st) st = arrays_alloc(a, &cfg, T, &r, err);
    if (!st) st = forward(a, be, &cfg, &w, T, x, &r, &filled, err);
    if (!st) st = write_outputs(a, &cfg, T, filled, &r, err);
    /* notes only after success: a failing run prints exactly its one error line */
    for (int i = 0; !st && i < ck.info.n_ignored && i < MOE_LAYER_INFO_MAX_IGNORED; i++) {
        char name[600];
        fprintf(stderr, "inkling-moe run: note: tensor %s ignored (--strict refuses it)\n",
                cli_escape(ck.info.ignored[i], name, sizeof name));
    }
    free(x);
    arrays_free(&r);
    moe_checkpoint_close(&ck);
    return st;
}

int cmd_run(int argc, char **argv) {
    run_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    moe_error err = {0};
    if (run(&a, &err)) return fail_line(err.msg[0] ? err.msg : moe_status_name(err.status));
    return 0;
}
