/*
 * case_files.h: a case as files any engine can load, and outputs written by anything read back
 * (docs/external-paths.md).
 *
 * Rules:
 *   - a checkpoint directory holds config.json (the original field names, docs/formats.md)
 *     and model.safetensors with the original tensor names of MoE layer MOE_EXPORT_LAYER
 *     (model.llm.layers.{L}.mlp.*), exactly as the loader reads them (checkpoint.h); NVFP4 adds
 *     the .scale2, .input_amax (1: unused by W4A16 paths) and .original_shape tensors;
 *   - an input file holds x BF16 [T, D]; a stages file holds out [T, D] and, for each stage
 *     the run filled, topk_ids I32 [T, K], topk_weights F32 [T, K+S], logits F32 [T, R+S],
 *     routed_h F32 [T, K, I], routed_y F32 [T, K, D], sink_h F32 [T, S, I], sink_y F32 [T, D];
 *     out is F32 (values of a serving run are bf16-representable, so nothing is lost);
 *   - reading outputs: out (F32 or BF16) is required; every other tensor above is optional,
 *     and when present must have its dtype and shape (the error names the file and tensor).
 */
#ifndef INKLING_CASE_FILES_H
#define INKLING_CASE_FILES_H

#include "compare.h"
#include "fuzz_case.h"

#define MOE_EXPORT_LAYER 0

/* Creates dir if needed; writes config.json and model.safetensors of one layer. */
moe_status moe_export_checkpoint(const char *dir, const moe_config *cfg, const moe_weights *w,
                                 moe_error *err);
/* x [T, D] bf16 as an input file. */
moe_status moe_export_input(const char *path, int T, int D, const uint16_t *x, moe_error *err);
/* The output and the stages run filled (intermediates when it has them). */
moe_status moe_export_stages(const char *path, const moe_run *run, moe_error *err);
/* A fuzz case as a directory any engine can load: the checkpoint (config.json,
 * model.safetensors), input.safetensors, expected.safetensors (the reference, unsplit, with every
 * stage, in contract precision) and case.txt (the case's line, the split it names, the contract).
 * All T tokens are exported, whatever the case samples. */
moe_status moe_export_case(const fuzz_case *c, moe_precision precision, const char *dir, moe_error *err);

/* Reads an outputs file for a layer cfg on T tokens into out [T, D] and the non-NULL arrays of
 * st (shapes as moe_stages with I_local = cfg->I), setting st->filled for each one present. */
moe_status moe_read_outputs(const char *path, const moe_config *cfg, int T, float *out,
                            moe_stages *st, moe_error *err);

#endif
