/*
 * mutants.h: deliberately broken paths, each the reference with one plausible kernel bug.
 *
 * Rules: a mutant is a moe_backend named "mutant:<name>"; it copies the shard it is given,
 * plants its bug in the copy (or in its routing or token loop), and otherwise computes exactly
 * what the reference computes. supports() is false where the bug cannot show (an MXFP4 bug on
 * a bf16 layer, a split bug on an unsplit layer, a rounding bug in the exact contract). The
 * harness must catch every one of them (`make fuzz-selftest`); "mutant:none" plants nothing and
 * must never be caught (the control).
 */
#ifndef INKLING_MUTANTS_H
#define INKLING_MUTANTS_H

#include "../common/moe.h"

int moe_mutant_count(void);               /* the bug-carrying mutants, without the control */
const moe_backend *moe_mutant_at(int i);  /* 0 <= i < count */
const moe_backend *moe_mutant_find(const char *name); /* "none", "gate_up_swap" or "mutant:..." */
const moe_backend *moe_mutant_control(void);

#endif
