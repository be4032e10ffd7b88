/*
 * out_file.h: output files that are never half-written and never land on the wrong file.
 *
 * Rules (docs/formats.md, "Durability of --out"):
 *   - bytes go to a fresh temporary in the destination's own directory, named
 *     .NAME.XXXXXXXXXXXX.tmp with a random part, created with O_CREAT|O_EXCL|O_NOFOLLOW (an
 *     existing file or a planted symlink of that name is never opened, never followed);
 *   - commit: fsync the temporary, rename it over NAME, fsync the directory; so NAME is at
 *     every moment either its old content or the new complete file, also after a crash;
 *   - concurrent writers of one NAME each have their own temporary: the last rename wins,
 *     whole;
 *   - every error removes the temporary; so does SIGINT, SIGTERM or SIGHUP once the tool has
 *     called moe_out_guard_signals (the handler only unlinks paths stored beforehand, then
 *     re-raises the signal); SIGXFSZ is ignored there, so a write past `ulimit -f` fails
 *     with EFBIG and takes the error path;
 *   - moe_out_refuse_same refuses an output that is the same file (device and inode) as an
 *     input, and an existing output that is not a regular file.
 */
#ifndef INKLING_OUT_FILE_H
#define INKLING_OUT_FILE_H

#include "moe.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int fd;     /* the temporary, open for writing; -1 when none */
    int slot;   /* its place in the signal handler's table, -1 when none */
    char *path; /* the destination */
    char *tmp;  /* the temporary's path */
} moe_out_file;

/* Creates the temporary for path. Errors name path (an empty path, a directory, a missing
 * or unwritable directory). */
moe_status moe_out_open(const char *path, moe_out_file *o, moe_error *err);
/* Writes buf [n]; on failure the temporary is removed. */
moe_status moe_out_write(moe_out_file *o, const void *buf, size_t n, moe_error *err);
/* fsync, rename over the destination, fsync the directory. On failure nothing is published
 * and the temporary is removed. Either way o is closed. */
moe_status moe_out_commit(moe_out_file *o, moe_error *err);
/* Closes and removes the temporary (no-op on a closed o). */
void moe_out_abort(moe_out_file *o);
/* The file path holding exactly buf [n], or (on any failure) as it was: open, write, commit. */
moe_status moe_out_write_whole(const char *path, const void *buf, size_t n, moe_error *err);

/* Installs the handlers of SIGINT, SIGTERM, SIGHUP (remove live temporaries, re-raise) and
 * ignores SIGXFSZ. For programs, once, before any output is opened. */
void moe_out_guard_signals(void);

/* Fails if path exists and is not a regular file, or is the same file as any of inputs [n]
 * (paths that do not exist are skipped). what names the output in the message, e.g.
 * "argument --out". */
moe_status moe_out_refuse_same(const char *what, const char *path, const char *const *inputs,
                               int n, moe_error *err);

#ifdef __cplusplus
}
#endif

#endif /* INKLING_OUT_FILE_H */
