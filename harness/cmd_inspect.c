/*
 * cmd_inspect.c: `inkling-moe inspect`: what the loader understood of a checkpoint, one line per
 * MoE layer, before anything runs.
 *
 * Rules:
 *   - every MoE layer (or only --layer L) is loaded through moe_checkpoint_layer, so the line
 *     shows exactly what run would use: routed format, shapes, the TP and EP rank counts up to
 *     8 that moe_split_validate accepts, whether the quantization config excludes the experts,
 *     the sidecars found (input_amax values: validated, unused, since NVFP4 runs as W4A16) and
 *     the tensors under the layer that the loader ignores;
 *   - a layer that fails to load prints its one-line error in place of its line; the exit
 *     status is 2 if any layer failed (with --strict, ignored tensors are failures), else 0.
 */
#include "cli_args.h"
#include "commands.h"

#include "../common/checkpoint.h"
#include "../common/moe.h"

#include <stdio.h>
#include <string.h>

#define INSPECT_MAX_LAYERS 1024
#define INSPECT_MAX_SPLIT 8

static void usage(FILE *f) {
    fprintf(f,
            "usage: inkling-moe inspect --model DIR [--layer L] [--strict]\n\n"
            "  --model DIR   checkpoint: config.json (and hf_quant_config.json) plus safetensors\n"
            "  --layer L     only this MoE layer\n"
            "  --strict      count tensors the loader would ignore as errors\n");
}

/* "tp 1,2,4 ep 1,2,3,...": the rank counts up to INSPECT_MAX_SPLIT a split of cfg accepts. */
static void valid_splits(const moe_config *cfg, char *out, size_t len) {
    static const moe_split_kind kinds[2] = {MOE_SPLIT_TP, MOE_SPLIT_EP};
    size_t used = 0;
    for (int k = 0; k < 2; k++) {
        used += (size_t)snprintf(out + used, len - used, "%s%s", k ? " ep " : "tp ", "");
        bool first = true;
        for (int n = 1; n <= INSPECT_MAX_SPLIT && used < len; n++) {
            moe_split s = {n == 1 ? MOE_SPLIT_NONE : kinds[k], n, 0, 0};
            if (moe_split_validate(cfg, &s, NULL)) continue;
            used += (size_t)snprintf(out + used, len - used, first ? "%d" : ",%d", n);
            first = false;
        }
    }
}

static void print_layer(const moe_checkpoint *ck, const moe_config *c) {
    const moe_layer_info *in = &ck->info;
    char splits[96], sidecars[160] = "", ignored[600] = "";
    valid_splits(c, splits, sizeof splits);
    for (int i = 0; i < 2; i++) {
        const char *w = i ? "w2" : "w13";
        size_t u = strlen(sidecars);
        if (in->input_amax[i] > 0.0f)
            u += (size_t)snprintf(sidecars + u, sizeof sidecars - u, "%s%s.input_amax=%g (unused: W4A16)",
                                  u ? ", " : "", w, (double)in->input_amax[i]);
        if (in->original_shape[i])
            snprintf(sidecars + u, sizeof sidecars - u, "%s%s.original_shape", u ? ", " : "", w);
    }
    for (int i = 0; i < in->n_ignored && i < MOE_LAYER_INFO_MAX_IGNORED; i++) {
        size_t u = strlen(ignored);
        snprintf(ignored + u, sizeof ignored - u, "%s%s", i ? ", " : "", in->ignored[i]);
    }
    if (in->n_ignored > MOE_LAYER_INFO_MAX_IGNORED) {
        size_t u = strlen(ignored);
        snprintf(ignored + u, sizeof ignored - u, " and %d more", in->n_ignored - MOE_LAYER_INFO_MAX_IGNORED);
    }
    const moe_routed_format_info *fi = moe_routed_format_get(c->routed_format);
    printf("layer %d: %s routed experts%s; D=%d I=%d R=%d K=%d S=%d route_scale=%g gate_bias=%s "
           "global_scale=%s; splits %s; sidecars: %s; ignored: %s\n",
           in->layer, fi->name, in->excluded ? " (excluded from quantization by the config)" : "",
           c->D, c->I, c->R, c->K, c->S, (double)c->route_scale, c->has_gate_bias ? "yes" : "no",
           c->has_global_scale ? "yes" : "no", splits, sidecars[0] ? sidecars : "none",
           ignored[0] ? ignored : "none");
}

int cmd_inspect(int argc, char **argv) {
    const char *model = NULL;
    int layer = -1;
    bool strict = false;
    cli_option opts[] = {
        {.name = "--model", .kind = CLI_STRING, .out = &model, .required = true, .nonempty = true},
        {.name = "--layer", .kind = CLI_INT, .out = &layer, .lo = 0, .hi = 999999},
        {.name = "--strict", .kind = CLI_FLAG, .out = &strict},
    };
    int rc = cli_parse("inspect", opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, usage);
    if (rc >= 0) return rc;
    moe_checkpoint ck;
    moe_error err = {0};
    if (moe_checkpoint_open(model, &ck, &err)) return cli_fail("inspect", "%s", err.msg);
    ck.strict = strict;
    static int layers[INSPECT_MAX_LAYERS];
    int n = 0;
    if (layer >= 0) layers[n++] = layer;
    else moe_checkpoint_moe_layers(&ck, layers, INSPECT_MAX_LAYERS, &n);
    if (n > INSPECT_MAX_LAYERS) n = INSPECT_MAX_LAYERS;
    const moe_model_config *mc = &ck.config;
    if (mc->has_quant_config)
        printf("quantization: %s%s%s, group_size %d, exclusions from %s (%d entries)\n",
               mc->quant_algo[0] ? mc->quant_algo : "no quant_algo (MXFP4)",
               mc->quant_algo[0] ? " from " : "", mc->quant_algo_field, mc->group_size,
               mc->exclude_field, mc->n_exclude);
    else
        printf("quantization: no quantization config\n");
    int failed = 0;
    for (int i = 0; i < n; i++) {
        moe_config cfg;
        moe_weights w;
        if (moe_checkpoint_layer(&ck, layers[i], NULL, &cfg, &w, &err)) {
            cli_fail("inspect", "layer %d: %s", layers[i], err.msg);
            failed++;
        } else {
            print_layer(&ck, &cfg);
        }
    }
    if (n == 0) failed += cli_fail("inspect", "model %s: no MoE layer (no model.llm.layers.{L}.mlp.gate.weight)", model) > 0;
    moe_checkpoint_close(&ck);
    return failed ? 2 : 0;
}
