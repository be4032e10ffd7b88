/*
 * safetensors.h: reading and writing safetensors files.
 *
 * Rules of the format as this project reads it (docs/formats.md):
 *   - 8-byte little-endian header length N, then N bytes of a JSON object, then the data;
 *     N must be at least 2, at most MOE_ST_MAX_HEADER and fit in the file;
 *   - the JSON object maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]},
 *     plus an optional "__metadata__" object of string values; nothing else is accepted;
 *   - begin <= end <= data length, end - begin = product(shape) * element size (overflow
 *     checked), and the tensors tile the data section exactly: no overlap, no hole, no
 *     trailing bytes (as the reference Rust implementation requires);
 *   - opening a file reads only its header (pread); a tensor's bytes are read when a caller
 *     asks (moe_st_read);
 *   - tensor names must be valid UTF-8;
 *   - the writer writes a fresh temporary next to NAME, fsyncs it and renames it to NAME
 *     (common/out_file.h), so no partial file is ever left under NAME; tensors are laid out by element size, largest first, so that every tensor
 *     is aligned to its element size when the data section is (the header is padded to 8).
 */
#ifndef INKLING_SAFETENSORS_H
#define INKLING_SAFETENSORS_H

#include "moe.h"

#include <stddef.h>
#include <stdint.h>

#define MOE_ST_MAX_DIMS 8
#define MOE_ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000) /* the reference implementation's limit */

typedef enum {
    MOE_ST_BOOL = 0,
    MOE_ST_U8,
    MOE_ST_I8,
    MOE_ST_F8_E5M2,
    MOE_ST_F8_E4M3,
    MOE_ST_F8_E8M0,
    MOE_ST_I16,
    MOE_ST_U16,
    MOE_ST_F16,
    MOE_ST_BF16,
    MOE_ST_I32,
    MOE_ST_U32,
    MOE_ST_F32,
    MOE_ST_I64,
    MOE_ST_U64,
    MOE_ST_F64,
    MOE_ST_DTYPE_COUNT
} moe_st_dtype;

const char *moe_st_dtype_name(moe_st_dtype dt);      /* "BF16", ...; "?" if out of range */
size_t moe_st_dtype_size(moe_st_dtype dt);           /* bytes per element; 0 if out of range */
int moe_st_dtype_from_name(const char *name);        /* the dtype, or -1 if unknown */

typedef struct {
    char *name;
    moe_st_dtype dtype;
    int ndim;
    int64_t shape[MOE_ST_MAX_DIMS];
    uint64_t numel;
    uint64_t offset;   /* of the first byte, from the start of the data section */
    uint64_t nbytes;
    const void *data;  /* [nbytes] inside the mapping (or the parsed buffer) */
} moe_st_tensor;

typedef struct {
    char *label;               /* the path, for messages */
    void *map;                 /* the mapping (NULL for a parsed buffer) */
    size_t map_size;
    const uint8_t *data;       /* the data section */
    uint64_t data_size;
    int n_tensors;
    moe_st_tensor *tensors;    /* [n_tensors] sorted by name */
    uint64_t data_offset;      /* of the data section in the file: 8 + header length */
    int fd;                    /* the open file (moe_st_open), read by moe_st_read */
    bool owns_fd;              /* fd is open and closed by moe_st_close */
} moe_st_file;

/* Opens (in_file.h: never blocks, regular files only) and validates a file; the header is
 * read with pread. t->data points into a read-only mapping, for callers that read their own
 * files; input that may change underneath (checkpoints, --input) is read with moe_st_read,
 * which turns a file truncated meanwhile into an error instead of SIGBUS. On failure *f is
 * empty and err names the file and the fault. */
moe_status moe_st_open(const char *path, moe_st_file *f, moe_error *err);
/* Validates a file image bytes [size] held by the caller, who keeps it alive while f is used.
 * label names it in messages. */
moe_status moe_st_parse(const void *bytes, size_t size, const char *label, moe_st_file *f,
                        moe_error *err);
void moe_st_close(moe_st_file *f);

const moe_st_tensor *moe_st_find(const moe_st_file *f, const char *name); /* NULL if absent */

/* Copies tensor t of f into dst [t->nbytes]: pread for an opened file (a short read is an error
 * naming the file and tensor), memcpy for a parsed buffer. */
moe_status moe_st_read(const moe_st_file *f, const moe_st_tensor *t, void *dst, moe_error *err);

/* The elements of a BF16 or F32 tensor as fp32 (bf16 widens exactly): out [numel]. False for any
 * other dtype. */
bool moe_st_to_f32(const moe_st_tensor *t, float *out);

/* "[2, 3]" into buf [len]. */
const char *moe_st_shape_str(int ndim, const int64_t *shape, char *buf, size_t len);

/* One tensor to write: data [product(shape)] elements of dtype. */
typedef struct {
    const char *name;
    moe_st_dtype dtype;
    int ndim;
    int64_t shape[MOE_ST_MAX_DIMS];
    const void *data;
} moe_st_entry;

/* Writes entries [n] to path via a temporary, fsync and rename() (out_file.h). Names must be
 * unique. */
moe_status moe_st_write(const char *path, const moe_st_entry *entries, int n, moe_error *err);

#endif /* INKLING_SAFETENSORS_H */
