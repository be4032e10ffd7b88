/*
 * cmd_check.c: `inkling-moe check`, an outputs file written by anything judged against the
 * contract (docs/external-paths.md).
 *
 * Rules:
 *   - the layer (--model, --layer) and input (--input) are read as `run` reads them; the file
 *     (--outputs) must hold out [T, D] (F32 or BF16) and may hold topk_ids, topk_weights,
 *     logits and, for an unsplit run, routed_h, routed_y, sink_h, sink_y (case_files.h);
 *   - the reference runs unsplit with every stage in the contract (--precision, default
 *     serving); the file is judged against that contract's envelope stage by stage, its output
 *     as the sum of the split's ranks when --tp N / --ep N (and --pad-inter) say it is one,
 *     and ids exactly against the reference's (near-ties judged as the fuzzer does);
 *   - the report is the fuzzer's: a PASS/FAIL line, the first diverging stage, its worst
 *     element, the allowed interval; last line "N passed, N failed, 0 skipped";
 *   - options are read by the one parser (cli_args.h); exit status 0 pass, 1 fail, 2 bad usage
 *     or input (one line naming the file, tensor or option).
 */
#include "case_files.h"
#include "cli_args.h"
#include "commands.h"
#include "layer_input.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: inkling-moe check --model DIR [--layer L] --input FILE --outputs FILE\n"
               "                         [--precision exact|serving|engine] [--tp N | --ep N] [--pad-inter P]\n"
               "  judges an outputs file (out, and topk_ids, topk_weights, logits, routed_h, ... when\n"
               "  present) written by any implementation against the contract, stage by stage\n");
}

typedef struct {
    layer_input_args in;
    const char *outputs;
    int n;
    moe_split_kind kind;
    moe_precision precision;
} check_args;

/* Returns -1 to go on, else the exit status. */
static int parse(int argc, char **argv, check_args *a) {
    *a = (check_args){LAYER_INPUT_ARGS_DEFAULT, NULL, 1, MOE_SPLIT_NONE, MOE_PRECISION_SERVING};
    cli_option opts[] = {
        LAYER_INPUT_OPTIONS(&a->in),
        {.name = "--outputs", .kind = CLI_STRING, .out = &a->outputs, .required = true, .nonempty = true},
    };
    const int n = (int)(sizeof opts / sizeof opts[0]);
    int rc = cli_parse("check", opts, n, argc, argv, usage);
    if (rc >= 0) return rc;
    layer_input_args_read(&a->in, opts, n, &a->kind, &a->n, &a->precision);
    return -1;
}

/* The file as a run: the path whose results it holds is unknown, so it has no selector of its
 * own (near-ties are judged through the reference's). */
static const moe_backend outputs_file = {"outputs", "an outputs file", NULL, NULL, NULL, NULL, NULL, NULL, NULL};

static moe_status file_run(const check_args *a, const moe_config *c, int T, moe_run *r, moe_error *err) {
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "outputs/%s", moe_cmp_precision_name(a->precision));
    r->backend = &outputs_file;
    r->opt = moe_options_default();
    r->opt.precision = a->precision;
    r->split_kind = a->kind;
    r->split_n = a->kind == MOE_SPLIT_NONE ? 1 : a->n;
    r->pad_inter_to = a->in.pad;
    r->T = T, r->D = c->D, r->I = c->I, r->R = c->R, r->K = c->K, r->S = c->S;
    const size_t t = (size_t)T + 1, D = (size_t)c->D, K = (size_t)c->K, S = (size_t)c->S, I = (size_t)c->I;
    r->out = calloc(t * D, 4), r->logits = calloc(t * (size_t)(c->R + c->S), 4), r->ids = calloc(t * K, 4);
    r->weights = calloc(t * (K + S), 4);
    if (a->kind == MOE_SPLIT_NONE && !a->in.pad) {
        r->routed_h = calloc(t * K * I, 4), r->routed_y = calloc(t * K * D, 4);
        r->sink_h = calloc(t * S * I, 4), r->sink_y = calloc(t * D, 4);
    }
    if (!r->out || !r->logits || !r->ids || !r->weights)
        return moe_fail(err, MOE_ERR_NOMEM, "check: out of memory for T = %d", T);
    moe_stages st = {r->logits, r->ids, r->weights, r->routed_h, r->routed_y, r->sink_h, r->sink_y, 0};
    moe_status s = moe_read_outputs(a->outputs, c, T, r->out, &st, err);
    r->filled = st.filled;
    return s;
}

/* The file is the candidate, the reference backend (unsplit, every stage) the reference. */
static int judge(const check_args *a, int layer, const moe_config *cfg, const moe_weights *w, int T,
                 const uint16_t *x, moe_error *err) {
    moe_run reference, candidate;
    memset(&reference, 0, sizeof reference);
    memset(&candidate, 0, sizeof candidate); /* freed below even when the split is refused */
    moe_options opt = moe_options_default();
    opt.precision = a->precision;
    moe_split split = {a->kind, a->kind == MOE_SPLIT_NONE ? 1 : a->n, 0, a->in.pad};
    moe_status st = moe_split_validate(cfg, &split, err);
    if (!st) st = file_run(a, cfg, T, &candidate, err);
    if (!st) st = moe_run_path(&moe_backend_ref, &opt, cfg, w, MOE_SPLIT_NONE, 1, 0, T, x, true, &reference, err);
    moe_cmp_report rep;
    moe_cmp_case cc = {cfg, w, T, x};
    if (!st) st = moe_compare_runs(&cc, &reference, &candidate, NULL, NULL, &rep, err);
    int rc = 2;
    if (!st) {
        printf("layer %d, T = %d: %s judged against the reference (%s contract)\n", layer, T, a->outputs,
               moe_cmp_precision_name(a->precision));
        moe_cmp_stages_print(stdout, &rep);
        printf("  %-28s %s\n", candidate.name, rep.ok ? "PASS" : "FAIL");
        if (!rep.ok) moe_cmp_report_print(stdout, &rep);
        printf("%d passed, %d failed, 0 skipped\n", rep.ok, !rep.ok);
        rc = rep.ok ? 0 : 1;
    }
    moe_run_free(&reference);
    moe_run_free(&candidate);
    return rc;
}

int cmd_check(int argc, char **argv) {
    check_args a;
    int rc = parse(argc, argv, &a);
    if (rc >= 0) return rc;
    moe_error err;
    moe_error_clear(&err);
    layer_input li;
    moe_status st = layer_input_open(a.in.model, a.in.layer, a.in.input, &li, &err);
    rc = st ? 2 : judge(&a, li.layer, &li.cfg, &li.w, li.T, li.x, &err);
    if (rc == 2) cli_fail("check", "%s", err.msg);
    layer_input_close(&li);
    return rc;
}
