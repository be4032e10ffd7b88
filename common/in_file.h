/*
 * in_file.h: opening and reading input files so that nothing can hang or crash the tool.
 *
 * Rules (docs/formats.md, "Limits"):
 *   - a file is opened with O_NONBLOCK (a named pipe or a device cannot make open() wait),
 *     then must be a regular file, then O_NONBLOCK is cleared; symlinks are followed;
 *   - bytes are read with pread() and every short read is an error naming the file ("the file
 *     is shorter than its header says: truncated while being read?"), never a SIGBUS as a
 *     memory mapping of a shrunk file would give;
 *   - small text files (config.json, the index) are read whole up to a stated cap.
 */
#ifndef INKLING_IN_FILE_H
#define INKLING_IN_FILE_H

#include "moe.h"

#include <stddef.h>
#include <stdint.h>

#define MOE_CONFIG_MAX_BYTES ((size_t)16 << 20) /* config.json */
#define MOE_INDEX_MAX_BYTES ((size_t)64 << 20)  /* model.safetensors.index.json */

/* Opens path for reading as described above: *fd, *size (bytes). err names the file. */
moe_status moe_in_open(const char *path, int *fd, uint64_t *size, moe_error *err);

/* Reads buf [n] at offset of fd; a short read is MOE_ERR_IO naming label and what. */
moe_status moe_in_pread(int fd, void *buf, size_t n, uint64_t offset, const char *label,
                        const char *what, moe_error *err);

/* The whole file, at most max bytes: *text [*len + 1], NUL-terminated, malloc'ed. */
moe_status moe_in_read_small(const char *path, size_t max, char **text, size_t *len,
                             moe_error *err);

/* Whether s [len] is valid UTF-8 (no overlong forms, no surrogates, at most U+10FFFF). */
bool moe_utf8_valid(const char *s, size_t len);
/* Length of the valid UTF-8 sequence at s (1..4), or 0. */
int moe_utf8_seq_len(const unsigned char *s);

#endif /* INKLING_IN_FILE_H */
