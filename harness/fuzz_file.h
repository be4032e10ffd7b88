/*
 * fuzz_file.h: a case's layer through a real checkpoint round trip (feature `file`).
 *
 * Rules:
 *   - the layer is written with the checkpoint writer (common/checkpoint_write.h) into a fresh
 *     temporary directory and loaded back with the loader (common/checkpoint.h); the layer
 *     index, global_scale's dtype (F32 or BF16) and the MXFP4 scale layout (2-D or 3-D) are
 *     drawn from the case seed (fuzz_file_opts), so the line says everything;
 *   - the candidate paths run on the loaded view, the reference and the envelope on the layer
 *     in memory: a loader that misreads a tensor or a scalar (a global_scale read at the wrong
 *     width) makes the candidates fail; a loaded configuration that differs from the case's
 *     fails the case with the field named;
 *   - a loader mutant (mutants.h) gets the loaded view with its planted misreading applied;
 *   - the directory is removed when the case is done.
 */
#ifndef INKLING_FUZZ_FILE_H
#define INKLING_FUZZ_FILE_H

#include "../common/checkpoint.h"
#include "../common/checkpoint_write.h"
#include "fuzz_case.h"

typedef struct {
    const fuzz_case *c;
    const moe_layer_data *ld;   /* the case's layer in memory */
    bool active;                /* written and loaded */
    moe_status failed;          /* the round trip's failure, kept for every later path */
    moe_error fail_err;
    char dir[256];
    moe_checkpoint ck;
    bool opened;
    int layer;
    moe_weights loaded;         /* a view into ck's mapped files */
    moe_weights quirked;        /* loaded, with a loader mutant's misreading */
    const moe_backend *quirk_of; /* the backend quirked is for, or NULL */
} fuzz_file;

/* How the case's checkpoint is written: drawn from the case seed. */
moe_checkpoint_write_opts fuzz_file_opts(const fuzz_case *c);

/* Prepares f for case c and its layer ld; nothing is written yet. */
void fuzz_file_prepare(fuzz_file *f, const fuzz_case *c, const moe_layer_data *ld);
/* The weights backend be runs on: the layer in memory, or for a case with feature file the
 * loaded view (with a loader mutant's misreading for that mutant). The first such call writes
 * and loads the layer; a failure there is returned, to every caller, naming what failed. */
moe_status fuzz_file_weights(fuzz_file *f, const moe_backend *be, const moe_weights **w,
                             moe_error *err);
/* Closes the checkpoint and removes its directory. */
void fuzz_file_close(fuzz_file *f);

#endif
