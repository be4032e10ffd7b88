/*
 * cmd_diff.c: `inkling-moe diff`, two paths compared stage by stage on a checkpoint layer.
 *
 * Rules:
 *   - path A (--backend, the path under test) runs with the split given (--tp N | --ep N,
 *     --pad-inter P), as `run` does; path B (--against, default ref) runs unsplit with every
 *     stage, as the baseline; both in one contract (--precision, default serving) and are
 *     judged against that contract's envelope (harness/compare.h);
 *   - the report names the first diverging stage, its worst element and the error against
 *     its tolerance; exit status 0 agree, 1 diverge, 2 bad usage or input (one line on
 *     stderr naming the file, tensor or field).
 */
#include "../common/checkpoint.h"
#include "../common/safetensors.h"
#include "cli_args.h"
#include "commands.h"
#include "compare.h"
#include "paths.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: inkling-moe diff --model DIR [--layer L] --input FILE --backend A [--against B]\n"
               "                        [--tp N | --ep N] [--pad-inter P] [--precision exact|serving|engine]\n"
               "  A runs with the split, B (default ref) unsplit; both are judged stage by stage;\n"
               "  A or B may be a planted-bug path, mutant:NAME (inkling-moe fuzz --selftest lists them),\n"
               "  a plugin, plugin:FILE.so, or a program, exec:COMMAND / worker:COMMAND (docs/external-paths.md)\n");
}

int cmd_diff(int argc, char **argv) {
    const char *model = NULL, *input = NULL, *a_name = NULL, *b_name = "ref";
    int layer = -1, tp = 1, ep = 1, pad = 0, precision = 1;
    cli_option opts[] = {
        {.name = "--model", .kind = CLI_STRING, .out = &model, .required = true, .nonempty = true},
        {.name = "--input", .kind = CLI_STRING, .out = &input, .required = true, .nonempty = true},
        {.name = "--backend", .kind = CLI_STRING, .out = &a_name, .required = true, .nonempty = true},
        {.name = "--against", .kind = CLI_STRING, .out = &b_name, .nonempty = true},
        {.name = "--layer", .kind = CLI_INT, .out = &layer, .lo = 0, .hi = 999999},
        {.name = "--tp", .kind = CLI_INT, .out = &tp, .lo = 1, .hi = 1024, .excludes = "--ep"},
        {.name = "--ep", .kind = CLI_INT, .out = &ep, .lo = 1, .hi = 1024},
        {.name = "--pad-inter", .kind = CLI_INT, .out = &pad, .lo = 0, .hi = 1 << 20},
        {.name = "--precision", .kind = CLI_CHOICE, .out = &precision, .choices = "exact,serving,engine"},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    int rc = cli_parse("diff", opts, n_opts, argc, argv, usage);
    if (rc >= 0) return rc;
    moe_split_kind kind = cli_find(opts, n_opts, "--tp")->given   ? MOE_SPLIT_TP
                          : cli_find(opts, n_opts, "--ep")->given ? MOE_SPLIT_EP
                                                                  : MOE_SPLIT_NONE;
    int n = kind == MOE_SPLIT_TP ? tp : kind == MOE_SPLIT_EP ? ep : 1;
    moe_precision prec = precision == 0 ? MOE_PRECISION_EXACT : precision == 1 ? MOE_PRECISION_SERVING : MOE_PRECISION_ENGINE;
    /* a planted-bug path (mutant:NAME) shows what a divergence looks like on real files */
    moe_error err;
    moe_error_clear(&err);
    const moe_backend *a = moe_path_open(a_name, &err);
    const moe_backend *b = a ? moe_path_open(b_name, &err) : NULL;
    if (!a || !b) return cli_fail("diff", "argument %s: %s", a ? "--against" : "--backend", err.msg);
    moe_checkpoint ck;
    moe_config cfg;
    moe_weights w;
    int T = 0, loaded = -1;
    uint16_t *x = NULL;
    moe_status st = moe_checkpoint_open(model, &ck, &err);
    if (st) return cli_fail("diff", "%s", err.msg);
    st = moe_checkpoint_layer(&ck, layer, &loaded, &cfg, &w, &err);
    if (!st) st = moe_read_input(input, cfg.D, &T, &x, &err);
    if (st) {
        moe_checkpoint_close(&ck);
        free(x);
        return cli_fail("diff", "%s", err.msg);
    }
    moe_options opt = moe_options_default();
    opt.precision = prec;
    moe_run ra, rb;
    memset(&rb, 0, sizeof rb);
    st = moe_run_path(a, &opt, &cfg, &w, kind, n, pad, T, x, true, &ra, &err);
    if (!st) st = moe_run_path(b, &opt, &cfg, &w, MOE_SPLIT_NONE, 1, 0, T, x, true, &rb, &err);
    rc = 2;
    if (st) {
        cli_fail("diff", "%s", err.msg);
    } else {
        moe_cmp_case cc = {&cfg, &w, T, x};
        moe_cmp_report rep;
        st = moe_compare_runs(&cc, &ra, &rb, NULL, NULL, &rep, &err);
        if (st) {
            cli_fail("diff", "%s", err.msg);
        } else {
            printf("layer %d, T = %d: A = %s, B = %s\n", loaded, T, ra.name, rb.name);
            printf("stages compared:");
            for (int s = 0; s < MOE_CMP_STAGE_COUNT; s++)
                if (rep.stages_compared & (1u << s)) printf(" %s", moe_cmp_stage_name((moe_cmp_stage)s));
            printf("\n");
            moe_cmp_report_print(stdout, &rep);
            rc = rep.ok ? 0 : 1;
        }
    }
    moe_run_free(&ra);
    moe_run_free(&rb);
    free(x);
    moe_checkpoint_close(&ck);
    return rc;
}
