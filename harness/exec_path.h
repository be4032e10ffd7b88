/*
 * exec_path.h: an external program as a path (docs/external-paths.md).
 *
 *   exec:COMMAND    per forward call, `sh -c COMMAND` runs with INKLING_MOE_MODEL (a checkpoint
 *                   directory, case_files.h), INKLING_MOE_INPUT (x BF16 [T, D]),
 *                   INKLING_MOE_OUTPUT (the file it must write: out, and any stages),
 *                   INKLING_MOE_PRECISION (exact | serving) and INKLING_MOE_LAYER in its
 *                   environment; exit status 0 means the output file is written;
 *   worker:COMMAND  `sh -c COMMAND` starts once and stays: per call the harness writes one line
 *                   "MODEL<TAB>INPUT<TAB>OUTPUT<TAB>PRECISION\n" to its stdin and reads one line
 *                   back from its stdout, "ok" or "error MESSAGE"; the model directory changes
 *                   only when the case does.
 * Rules:
 *   - the program computes the whole layer: unsplit, unpadded runs only (others are SKIPPED
 *     with that reason); the checkpoint is written once per layer (create), the input per call,
 *     all in a fresh directory under $TMPDIR (default /tmp) removed by destroy;
 *   - a non-zero exit, a signal, an "error" answer, a worker that ends, a missing or malformed
 *     output file, or a call past INKLING_MOE_PATH_TIMEOUT seconds (default 120; the program is
 *     then killed) fails the call with a message naming the path and holding the tail of the
 *     program's stderr; the program's stdout (exec:) is discarded.
 */
#ifndef INKLING_EXEC_PATH_H
#define INKLING_EXEC_PATH_H

#include "../common/moe.h"

/* spec is "exec:COMMAND" or "worker:COMMAND". */
const moe_backend *moe_exec_open(const char *spec, moe_error *err);

#endif
