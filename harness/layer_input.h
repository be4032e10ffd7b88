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
#include "cli_args.h"

/* The options that name a layer, its input, a split and a contract, as diff and check read
 * them (--model, --input, --layer, --tp | --ep, --pad-inter, --precision). */
typedef struct {
    const char *model, *input;
    int layer;     /* -1: the only layer of the checkpoint */
    int tp, ep;    /* as given (1 when not) */
    int pad;       /* --pad-inter */
    int precision; /* index in "exact,serving,engine" */
} layer_input_args;

#define LAYER_INPUT_ARGS_DEFAULT {NULL, NULL, -1, 1, 1, 0, 1}

/* Their entries of a cli_option table, reading into *(args). */
#define LAYER_INPUT_OPTIONS(args) \
    {.name = "--model", .kind = CLI_STRING, .out = &(args)->model, .required = true, .nonempty = true}, \
    {.name = "--input", .kind = CLI_STRING, .out = &(args)->input, .required = true, .nonempty = true}, \
    {.name = "--layer", .kind = CLI_INT, .out = &(args)->layer, .lo = 0, .hi = 999999}, \
    {.name = "--tp", .kind = CLI_INT, .out = &(args)->tp, .lo = 1, .hi = 1024, .excludes = "--ep"}, \
    {.name = "--ep", .kind = CLI_INT, .out = &(args)->ep, .lo = 1, .hi = 1024}, \
    {.name = "--pad-inter", .kind = CLI_INT, .out = &(args)->pad, .lo = 0, .hi = 1 << 20}, \
    {.name = "--precision", .kind = CLI_CHOICE, .out = &(args)->precision, .choices = "exact,serving,engine"}

/* After cli_parse of opts [n_opts]: the split (*kind, *n: NONE and 1 unless --tp or --ep was
 * given) and the contract. */
void layer_input_args_read(const layer_input_args *a, cli_option *opts, int n_opts, moe_split_kind *kind, int *n,
                           moe_precision *precision);

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
