/*
 * cmd_diff.c: `inkling-moe diff`, two paths compared stage by stage on a checkpoint layer.
 *
 * Rules:
 *   - the candidate (--backend, the path being judged) runs with the split given (--tp N |
 *     --ep N, --pad-inter P), as `run` does; the reference (--reference, default ref; --against
 *     is its older name) runs unsplit with every stage, as the trusted run; both in one
 *     contract (--precision, default serving) and are judged against that contract's envelope
 *     (harness/compare.h);
 *   - the report names the first diverging stage, its worst element and the error against
 *     its tolerance; exit status 0 agree, 1 diverge, 2 bad usage or input (one line on
 *     stderr naming the file, tensor or field).
 */
#include "cli_args.h"
#include "commands.h"
#include "compare.h"
#include "layer_input.h"
#include "paths.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: inkling-moe diff --model DIR [--layer L] --input FILE --backend CANDIDATE\n"
               "                        [--reference REF] [--tp N | --ep N] [--pad-inter P]\n"
               "                        [--precision exact|serving|engine]\n"
               "  the candidate runs with the split, the reference (default ref) unsplit; both are\n"
               "  judged stage by stage; --against REF is the older name of --reference;\n"
               "  either may be a planted-bug path, mutant:NAME (inkling-moe fuzz --selftest lists them),\n"
               "  a plugin, plugin:FILE.so, or a program, exec:COMMAND / worker:COMMAND (docs/external-paths.md)\n");
}

typedef struct {
    layer_input_args in;
    const char *candidate, *reference;
    const char *reference_option; /* the option that named the reference, for its errors */
    int n;
    moe_split_kind kind;
    moe_precision precision;
} diff_args;

/* Returns -1 to go on, else the exit status. */
static int parse(int argc, char **argv, diff_args *a) {
    *a = (diff_args){LAYER_INPUT_ARGS_DEFAULT, NULL, "ref", "--reference", 1, MOE_SPLIT_NONE, MOE_PRECISION_SERVING};
    cli_option opts[] = {
        LAYER_INPUT_OPTIONS(&a->in),
        {.name = "--backend", .kind = CLI_STRING, .out = &a->candidate, .required = true, .nonempty = true},
        {.name = "--reference", .kind = CLI_STRING, .out = &a->reference, .nonempty = true, .excludes = "--against"},
        {.name = "--against", .kind = CLI_STRING, .out = &a->reference, .nonempty = true},
    };
    const int n = (int)(sizeof opts / sizeof opts[0]);
    int rc = cli_parse("diff", opts, n, argc, argv, usage);
    if (rc >= 0) return rc;
    if (cli_find(opts, n, "--against")->given) a->reference_option = "--against";
    layer_input_args_read(&a->in, opts, n, &a->kind, &a->n, &a->precision);
    return -1;
}

/* Runs both paths on the layer and prints the verdict; returns the exit status. */
static int judge(const diff_args *a, const moe_backend *candidate_path, const moe_backend *reference_path,
                 const layer_input *li) {
    const moe_config *cfg = &li->cfg;
    const moe_weights *w = &li->w;
    const int T = li->T;
    const uint16_t *x = li->x;
    moe_error err;
    moe_error_clear(&err);
    moe_options opt = moe_options_default();
    opt.precision = a->precision;
    moe_run candidate, reference;
    memset(&reference, 0, sizeof reference);
    moe_status st = moe_run_path(candidate_path, &opt, cfg, w, a->kind, a->n, a->in.pad, T, x, true, &candidate, &err);
    if (!st) st = moe_run_path(reference_path, &opt, cfg, w, MOE_SPLIT_NONE, 1, 0, T, x, true, &reference, &err);
    moe_cmp_case cc = {cfg, w, T, x};
    moe_cmp_report rep;
    if (!st) st = moe_compare_runs(&cc, &reference, &candidate, NULL, NULL, &rep, &err);
    int rc = 2;
    if (st) {
        cli_fail("diff", "%s", err.msg);
    } else {
        printf("layer %d, T = %d: candidate %s, reference %s\n", li->layer, T, candidate.name, reference.name);
        moe_cmp_stages_print(stdout, &rep);
        moe_cmp_report_print(stdout, &rep);
        rc = rep.ok ? 0 : 1;
    }
    moe_run_free(&candidate);
    moe_run_free(&reference);
    return rc;
}

int cmd_diff(int argc, char **argv) {
    diff_args a;
    int rc = parse(argc, argv, &a);
    if (rc >= 0) return rc;
    /* a planted-bug path (mutant:NAME) shows what a divergence looks like on real files */
    moe_error err;
    moe_error_clear(&err);
    const moe_backend *candidate = moe_path_open(a.candidate, &err);
    const moe_backend *reference = candidate ? moe_path_open(a.reference, &err) : NULL;
    if (!candidate || !reference)
        return cli_fail("diff", "argument %s: %s", candidate ? a.reference_option : "--backend", err.msg);
    layer_input li;
    moe_status st = layer_input_open(a.in.model, a.in.layer, a.in.input, &li, &err);
    rc = st ? cli_fail("diff", "%s", err.msg) : judge(&a, candidate, reference, &li);
    layer_input_close(&li);
    return rc;
}
