/*
 * layer_input.c: a checkpoint layer and its input (rules in layer_input.h).
 */
#include "layer_input.h"

#include <stdlib.h>
#include <string.h>

moe_status layer_input_open(const char *model, int layer, const char *input, layer_input *li, moe_error *err) {
    memset(li, 0, sizeof *li);
    li->layer = -1;
    moe_status st = moe_checkpoint_open(model, &li->ck, err);
    if (st) return st;
    li->open = true;
    st = moe_checkpoint_layer(&li->ck, layer, &li->layer, &li->cfg, &li->w, err);
    if (!st) st = moe_read_input(input, li->cfg.D, &li->T, &li->x, err);
    return st;
}

void layer_input_close(layer_input *li) {
    free(li->x);
    li->x = NULL;
    if (li->open) moe_checkpoint_close(&li->ck);
    li->open = false;
}

void layer_input_args_read(const layer_input_args *a, cli_option *opts, int n_opts, moe_split_kind *kind, int *n,
                           moe_precision *precision) {
    *kind = cli_find(opts, n_opts, "--tp")->given   ? MOE_SPLIT_TP
            : cli_find(opts, n_opts, "--ep")->given ? MOE_SPLIT_EP
                                                    : MOE_SPLIT_NONE;
    *n = *kind == MOE_SPLIT_TP ? a->tp : *kind == MOE_SPLIT_EP ? a->ep : 1;
    *precision = a->precision == 0   ? MOE_PRECISION_EXACT
                 : a->precision == 1 ? MOE_PRECISION_SERVING
                                     : MOE_PRECISION_ENGINE;
}
