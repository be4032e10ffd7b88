/*
 * layer_input.h: the checkpoint layer and the input tokens a command reads (--model, --layer,
 * --input), as `diff` and `check` read them.
 *
 * Rules: the layer is loaded as `run` loads it (common/checkpoint.h: --layer -1 is the only
 * layer of a one-layer checkpoint); the input must hold x [T, D] of that layer's D; errors name
 * the file, tensor or field (moe_error).
 */
#ifndef INKLING_LAYER_INPUT_H
#define INKLING_LAYER_INPUT_H

#include "../common/checkpoint.h"

typedef struct {
    moe_checkpoint ck;
    bool open;        /* ck must be closed */
    int layer;        /* the layer loaded */
    moe_config cfg;
    moe_weights w;    /* borrowed from ck */
    int T;
    uint16_t *x;      /* [T, D] bf16, owned */
} layer_input;

/* Opens model, loads layer (-1: the only one) and reads input. On failure li still needs
 * layer_input_close. */
moe_status layer_input_open(const char *model, int layer, const char *input, layer_input *li, moe_error *err);
void layer_input_close(layer_input *li);

#endif
