/*
 * checkpoint.h: one MoE layer of a checkpoint directory, as a moe_config plus a moe_weights
 * view whose tensors were read (pread) into memory the checkpoint owns
 * (contract.md [checkpoint.tensors], [cli]).
 *
 * Rules (docs/formats.md has the full list and the decisions behind them):
 *   - config.json: the text config at the top level or under "text_config"; the MoE width is
 *     "moe_intermediate_size" when present, else "intermediate_size"; hidden_size,
 *     n_routed_experts, num_experts_per_tok, n_shared_experts and route_scale are required;
 *     use_gate_bias / use_global_scale, when absent, follow the presence of the tensor;
 *   - a model directory holds model.safetensors.index.json (its weight_map says which file
 *     holds each tensor) or else one model.safetensors; only the files that hold the layer's
 *     tensors are opened, and only their headers are read when they are;
 *   - the routed format comes from the tensors: experts.w13_weight BF16 is bf16; U8 with
 *     experts.w13_weight_scale is MXFP4, with experts.w13_weight.scale (F8_E4M3) NVFP4 (plus
 *     .scale2 F32 [R], .input_amax and .original_shape per weight); it is cross-checked against
 *     quantization_config (exclude, exclude_modules, quant_algo, group_size) and ModelOpt's
 *     hf_quant_config.json beside config.json when present;
 *   - any other tensor under the layer's mlp. prefix is recorded in info (strict: an error);
 *   - every inconsistency fails with a message naming the tensor or config field.
 * Files are opened without blocking and must be regular files; config.json (16 MiB) and the
 * index (64 MiB) are size-capped, strict JSON (nothing after the value) and parsed in linear
 * time; tensor names must be UTF-8. A file truncated while it is read is an error naming it.
 */
#ifndef INKLING_CHECKPOINT_H
#define INKLING_CHECKPOINT_H

#include "moe.h"
#include "safetensors.h"

#include <stdbool.h>

/* What config.json says about the MoE layers. */
typedef struct {
    moe_config cfg;           /* routed_format is decided per layer, from the tensors */
    int gate_bias_flag;       /* use_gate_bias: 1 true, 0 false, -1 absent */
    int global_scale_flag;    /* use_global_scale: 1 true, 0 false, -1 absent */
    bool has_quant_config;    /* a top-level quantization_config is present */
    int n_exclude;
    char **exclude;           /* [n_exclude] quantization_config.exclude and exclude_modules */
    char exclude_field[80];   /* the field(s) the entries came from, for messages */
    char quant_algo[24];      /* quant_algo ("NVFP4", "MXFP4"), "" when absent */
    char quant_algo_field[48]; /* where it came from, for messages */
    int group_size;           /* group_size, 0 when absent */
} moe_model_config;

/* Parses config.json text [len] (need not be NUL-terminated). label names it in messages. */
moe_status moe_model_config_parse(const char *text, size_t len, const char *label,
                                  moe_model_config *mc, moe_error *err);
void moe_model_config_free(moe_model_config *mc);

/* Adds ModelOpt's hf_quant_config.json text [len] ({"producer": ..., "quantization":
 * {"quant_algo", "group_size", "exclude_modules"}}) to a parsed config: the exclusions join the
 * list, quant_algo and group_size must agree with config.json's when both give them. */
moe_status moe_model_config_add_hf_quant(const char *text, size_t len, const char *label,
                                         moe_model_config *mc, moe_error *err);

/* Whether quantization_config.exclude excludes module (e.g. "model.llm.layers.2.mlp.experts"):
 * an entry equal to it, an fnmatch pattern matching it, or a module path that contains it
 * (an entry "model.llm.layers.2" excludes everything under that layer). */
bool moe_model_config_excludes(const moe_model_config *mc, const char *module);

/* Whether the routed experts module (".../mlp.experts") are excluded from quantization: a module
 * entry covers it (moe_model_config_excludes), or both weight names module.w13_weight and
 * module.w2_weight are listed exactly (not as patterns or prefixes), as the MXFP4 release lists
 * its first MoE layer. One weight name without the other is an error naming both. */
moe_status moe_model_config_experts_excluded(const moe_model_config *mc, const char *module,
                                             bool *excluded, moe_error *err);

/* What moe_checkpoint_layer understood of the last layer it loaded (inkling-moe inspect). */
#define MOE_LAYER_INFO_MAX_IGNORED 8
typedef struct {
    int layer;
    moe_routed_format format;
    bool excluded;            /* the quantization config excludes the routed experts */
    float input_amax[2];      /* w13, w2 .input_amax (validated, unused: W4A16); 0 when absent */
    bool original_shape[2];   /* w13, w2 .original_shape present (and equal to the unpacked shape) */
    int n_ignored;            /* tensors under the layer's mlp. prefix that the loader ignored */
    char ignored[MOE_LAYER_INFO_MAX_IGNORED][192]; /* the first of them, by full name */
} moe_layer_info;

typedef struct {
    char *dir;
    bool strict;         /* set by the caller: a tensor the loader would ignore is an error */
    moe_layer_info info; /* filled by moe_checkpoint_layer */
    moe_model_config config;
    int n_names;
    char **names;        /* [n_names] every tensor name the checkpoint holds */
    char **name_file;    /* [n_names] the file (relative to dir) holding names[i] */
    int n_files;
    char **file_names;   /* [n_files] files opened so far */
    moe_st_file *files;  /* [n_files] */
    int n_copies;
    void **copies;       /* tensors copied out because their offset was misaligned */
} moe_checkpoint;

/* Reads config.json and the index (or the single file's header). */
moe_status moe_checkpoint_open(const char *dir, moe_checkpoint *ck, moe_error *err);
void moe_checkpoint_close(moe_checkpoint *ck);

/* The MoE layers present (those with a model.llm.layers.{L}.mlp.gate.weight tensor), in
 * ascending order: layers [max], *count may exceed max. */
void moe_checkpoint_moe_layers(const moe_checkpoint *ck, int *layers, int max, int *count);

/* layer < 0: the only MoE layer, or an error if there is not exactly one. *layer_out (may be
 * NULL) receives the layer loaded. The view stays valid until moe_checkpoint_close. */
moe_status moe_checkpoint_layer(moe_checkpoint *ck, int layer, int *layer_out, moe_config *cfg,
                                moe_weights *w, moe_error *err);

/* A tensor by full name, opening its file if needed; NULL plus err when absent. */
const moe_st_tensor *moe_checkpoint_tensor(moe_checkpoint *ck, const char *name, moe_error *err);

/* An input file's x [T, D] bf16 (contract.md [cli.files]), checked against hidden_size D and copied
 * out of the file into *x (malloc'ed; free it). Errors name the file and the tensor. */
moe_status moe_read_input(const char *path, int D, int *T, uint16_t **x, moe_error *err);

#endif /* INKLING_CHECKPOINT_H */
