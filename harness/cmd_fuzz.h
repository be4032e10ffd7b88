/*
 * cmd_fuzz.h: the parts of `inkling-moe fuzz` that live in their own files: stress mode
 * (cmd_fuzz_stress.c) and sequence replay (cmd_fuzz_replay.c). cmd_fuzz.c parses the options,
 * loads the suites, chooses the targets and calls them.
 */
#ifndef INKLING_CMD_FUZZ_H
#define INKLING_CMD_FUZZ_H

#include "fuzz_flaky.h"

/* `fuzz --stress`: live instances run the stress plan's cases; each is checked against a
 * fresh instance bit for bit. Returns the exit status (0 clean, 1 a failure, 2 bad usage). */
int fuzz_cmd_stress(const fuzz_history_opts *o, const fuzz_suite *suites, int n_suites,
                    const fuzz_targets *tg);

/* `fuzz --replay FILE --repeat N`: the sequence, N times, one pool per repetition; its failure
 * rate. Returns the exit status. */
int fuzz_cmd_replay(const char *file, const fuzz_history_opts *o, const fuzz_targets *tg);

#endif
