/*
 * mutants.h: deliberately broken paths, each the reference with one plausible kernel bug.
 *
 * Rules: a mutant is a moe_backend named "mutant:<name>"; it copies the shard it is given,
 * plants its bug in the copy (or through a seam of the reference's token loop, ref.h), and runs
 * the reference's own loop on it, so it otherwise computes exactly what the reference computes. supports() is false where the bug cannot show (an MXFP4 bug on
 * a bf16 layer, a split bug on an unsplit layer, a rounding bug in the exact contract). The
 * harness must catch every one of them (`make fuzz-selftest`); "mutant:none" plants nothing and
 * must never be caught (the control).
 */
#ifndef INKLING_MUTANTS_H
#define INKLING_MUTANTS_H

#include "../common/checkpoint.h"
#include "../common/moe.h"

int moe_mutant_count(void);               /* the bug-carrying mutants, without the control */
const moe_backend *moe_mutant_at(int i);  /* 0 <= i < count */
const moe_backend *moe_mutant_find(const char *name); /* "none", "gate_up_swap" or "mutant:..." */
const moe_backend *moe_mutant_control(void);

/* A planted loader bug: re-reads part of a layer loaded from checkpoint ck (its tensors named
 * model.llm.layers.{layer}.mlp.*) the wrong way into w. The harness applies it to the weights
 * a loader mutant runs on after a checkpoint round trip (fuzz_file.h); without one the mutant
 * is the reference. */
typedef void (*moe_loader_quirk)(moe_checkpoint *ck, int layer, moe_weights *w);
/* be's planted loader bug, or NULL (every path but the loader mutants). */
moe_loader_quirk moe_mutant_loader_quirk(const moe_backend *be);

#endif
