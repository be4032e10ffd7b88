/*
 * safetensors.c: a validating safetensors reader over mmap, and an all-or-nothing writer.
 *
 * Rules (safetensors.h states them in full):
 *   - the header is checked completely before anything else is used: length, JSON syntax,
 *     the type of every field, dtype names, shapes, offsets; the tensors must tile the data
 *     section exactly (sorted by offset, each beginning where the previous one ended);
 *   - every message names the file and, where there is one, the tensor;
 *   - data bytes are never read here: opening a 100 GB checkpoint touches only its header;
 *   - files are written through out_file.h: a temporary, fsync, rename, nothing half-written.
 */
#include "safetensors.h"

#include "in_file.h"
#include "numeric.h"
#include "out_file.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
    const char *name;
    size_t size;
} dtype_table[MOE_ST_DTYPE_COUNT] = {
    [MOE_ST_BOOL] = {"BOOL", 1},         [MOE_ST_U8] = {"U8", 1},
    [MOE_ST_I8] = {"I8", 1},             [MOE_ST_F8_E5M2] = {"F8_E5M2", 1},
    [MOE_ST_F8_E4M3] = {"F8_E4M3", 1},   [MOE_ST_F8_E8M0] = {"F8_E8M0", 1},
    [MOE_ST_I16] = {"I16", 2},           [MOE_ST_U16] = {"U16", 2},
    [MOE_ST_F16] = {"F16", 2},           [MOE_ST_BF16] = {"BF16", 2},
    [MOE_ST_I32] = {"I32", 4},           [MOE_ST_U32] = {"U32", 4},
    [MOE_ST_F32] = {"F32", 4},           [MOE_ST_I64] = {"I64", 8},
    [MOE_ST_U64] = {"U64", 8},           [MOE_ST_F64] = {"F64", 8},
};

const char *moe_st_dtype_name(moe_st_dtype dt) {
    return (unsigned)dt < MOE_ST_DTYPE_COUNT ? dtype_table[dt].name : "?";
}

size_t moe_st_dtype_size(moe_st_dtype dt) {
    return (unsigned)dt < MOE_ST_DTYPE_COUNT ? dtype_table[dt].size : 0;
}

int moe_st_dtype_from_name(const char *name) {
    for (int i = 0; i < MOE_ST_DTYPE_COUNT; i++)
        if (!strcmp(name, dtype_table[i].name)) return i;
    return -1;
}

const char *moe_st_shape_str(int ndim, const int64_t *shape, char *buf, size_t len) {
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (used < len) snprintf(buf + used, len - used, "]");
    return buf;
}

void moe_st_close(moe_st_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    if (f->map) munmap(f->map, f->map_size);
    if (f->owns_fd) close(f->fd);
    free(f->label);
    memset(f, 0, sizeof *f);
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const moe_st_tensor *)a)->name, ((const moe_st_tensor *)b)->name);
}

static int by_offset(const void *a, const void *b) {
    const moe_st_tensor *x = *(const moe_st_tensor *const *)a, *y = *(const moe_st_tensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return 0;
}

const moe_st_tensor *moe_st_find(const moe_st_file *f, const char *name) {
    if (!f || !name || !f->n_tensors) return NULL;
    moe_st_tensor key = {.name = (char *)name};
    return bsearch(&key, f->tensors, (size_t)f->n_tensors, sizeof key, by_name);
}

/* A JSON number that is a whole number in [0, 2^53]: stored in *out. */
static int json_count(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0.0 && d <= 9007199254740992.0) || d != floor(d)) return 0;
    *out = (uint64_t)d;
    return 1;
}

/* Fills t from one header entry; returns MOE_OK or a message naming the tensor. */
static moe_status parse_entry(const char *label, const cJSON *item, moe_st_tensor *t,
                              moe_error *err) {
    const char *name = item->string;
    if (!cJSON_IsObject(item))
        return moe_fail(err, MOE_ERR_FORMAT, "file %s: tensor %s: header entry is not an object",
                        label, name);
    const cJSON *dtype = NULL, *shape = NULL, *offsets = NULL;
    for (const cJSON *f = item->child; f; f = f->next) {
        const cJSON **slot = !strcmp(f->string, "dtype")          ? &dtype
                             : !strcmp(f->string, "shape")        ? &shape
                             : !strcmp(f->string, "data_offsets") ? &offsets
                                                                  : NULL;
        if (!slot)
            return moe_fail(err, MOE_ERR_FORMAT, "file %s: tensor %s: unknown header field '%s'",
                            label, name, f->string);
        if (*slot)
            return moe_fail(err, MOE_ERR_FORMAT, "file %s: tensor %s: header field '%s' repeated",
                            label, name, f->string);
        *slot = f;
    }
    if (!dtype || !shape || !offsets)
        return moe_fail(err, MOE_ERR_FORMAT, "file %s: tensor %s: header entry lacks '%s'", label,
                        name, !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
    int dt = cJSON_IsString(dtype) ? moe_st_dtype_from_name(dtype->valuestring) : -1;
    if (dt < 0)
        return moe_fail(err, MOE_ERR_FORMAT, "file %s: tensor %s: unknown dtype %s%s%s", label,
                        name, cJSON_IsString(dtype) ? "'" : "(not a string)",
                        cJSON_IsString(dtype) ? dtype->valuestring : "",
                        cJSON_IsString(dtype) ? "'" : "");
    t->dtype = (moe_st_dtype)dt;
    if (!cJSON_IsArray(shape))
        return moe_fail(err, MOE_ERR_FORMAT, "file %s: tensor %s: shape is not an array", label, name);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > MOE_ST_MAX_DIMS)
        return moe_fail(err, MOE_ERR_FORMAT, "file %s: tensor %s: %d dimensions, at most %d", label,
                        name, ndim, MOE_ST_MAX_DIMS);
    t->ndim = ndim;
    uint64_t numel = 1;
    int i = 0;
    for (const cJSON *d = shape->child; d; d = d->next, i++) {
        uint64_t n;
        if (!json_count(d, &n) || n > (uint64_t)INT64_MAX)
            return moe_fail(err, MOE_ERR_FORMAT,
                            "file %s: tensor %s: shape[%d] is not a non-negative integer", label,
                            name, i);
        t->shape[i] = (int64_t)n;
        if (n && numel > (UINT64_C(1) << 62) / n)
            return moe_fail(err, MOE_ERR_FORMAT, "file %s: tensor %s: shape is absurdly large",
                            label, name);
        numel *= n;
    }
    t->numel = numel;
    uint64_t begin, end;
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
        !json_count(offsets->child, &begin) || !json_count(offsets->child->next, &end))
        return moe_fail(err, MOE_ERR_FORMAT,
                        "file %s: tensor %s: data_offsets is not two non-negative integers", label,
                        name);
    if (end < begin)
        return moe_fail(err, MOE_ERR_FORMAT,
                        "file %s: tensor %s: data_offsets [%llu, %llu] end before begin", label,
                        name, (unsigned long long)begin, (unsigned long long)end);
    if (numel > (UINT64_C(1) << 62) / 8 || end - begin != numel * dtype_table[dt].size)
        return moe_fail(err, MOE_ERR_FORMAT,
                        "file %s: tensor %s: data_offsets [%llu, %llu] hold %llu bytes, but shape "
                        "and dtype %s need %llu",
                        label, name, (unsigned long long)begin, (unsigned long long)end,
                        (unsigned long long)(end - begin), dtype_table[dt].name,
                        (unsigned long long)(numel * dtype_table[dt].size));
    t->offset = begin;
    t->nbytes = end - begin;
    return MOE_OK;
}

static moe_status check_metadata(const char *label, const cJSON *meta, moe_error *err) {
    if (!cJSON_IsObject(meta))
        return moe_fail(err, MOE_ERR_FORMAT, "file %s: __metadata__ is not an object", label);
    for (const cJSON *m = meta->child; m; m = m->next)
        if (!cJSON_IsString(m))
            return moe_fail(err, MOE_ERR_FORMAT, "file %s: __metadata__ field '%s' is not a string",
                            label, m->string);
    return MOE_OK;
}

/* Checks sorted-by-offset tiling of [0, data_size) and fills the data pointers. */
static moe_status check_layout(moe_st_file *f, moe_error *err) {
    int n = f->n_tensors;
    moe_st_tensor **order = malloc((size_t)(n ? n : 1) * sizeof *order);
    if (!order) return moe_fail(err, MOE_ERR_NOMEM, "file %s: out of memory", f->label);
    for (int i = 0; i < n; i++) order[i] = &f->tensors[i];
    qsort(order, (size_t)n, sizeof *order, by_offset);
    uint64_t at = 0;
    moe_status st = MOE_OK;
    for (int i = 0; i < n && !st; i++) {
        moe_st_tensor *t = order[i];
        if (t->offset + t->nbytes > f->data_size)
            st = moe_fail(err, MOE_ERR_FORMAT,
                          "file %s: tensor %s: data_offsets [%llu, %llu] out of range: the data "
                          "section holds %llu bytes (truncated file?)",
                          f->label, t->name, (unsigned long long)t->offset,
                          (unsigned long long)(t->offset + t->nbytes),
                          (unsigned long long)f->data_size);
        else if (t->offset < at)
            st = moe_fail(err, MOE_ERR_FORMAT,
                          "file %s: tensor %s: data_offsets [%llu, %llu] overlap tensor %s",
                          f->label, t->name, (unsigned long long)t->offset,
                          (unsigned long long)(t->offset + t->nbytes), order[i - 1]->name);
        else if (t->offset > at)
            st = moe_fail(err, MOE_ERR_FORMAT,
                          "file %s: tensor %s: data_offsets begin at %llu, leaving a hole after "
                          "byte %llu",
                          f->label, t->name, (unsigned long long)t->offset, (unsigned long long)at);
        at = t->offset + t->nbytes;
    }
    if (!st && at != f->data_size)
        st = moe_fail(err, MOE_ERR_FORMAT,
                      "file %s: %llu trailing bytes after the last tensor (the data section holds "
                      "%llu, the header describes %llu)",
                      f->label, (unsigned long long)(f->data_size - at),
                      (unsigned long long)f->data_size, (unsigned long long)at);
    free(order);
    return st;
}

/* Points every tensor's data into the image's data section, when there is an image. */
static void set_data(moe_st_file *f) {
    for (int i = 0; i < f->n_tensors; i++)
        f->tensors[i].data = f->data ? f->data + f->tensors[i].offset : NULL;
}

/* bytes [avail] hold at least the length and the header of a file of size bytes (the whole
 * image for moe_st_parse, the first 8 + N bytes for moe_st_open). */
static moe_status parse_header(moe_st_file *f, const uint8_t *bytes, size_t avail, uint64_t size,
                               moe_error *err) {
    if (size < 8 || avail < 8)
        return moe_fail(err, MOE_ERR_FORMAT,
                        "file %s: truncated: %llu bytes, less than the 8-byte header length", f->label,
                        (unsigned long long)size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | bytes[i];
    if (hlen < 2 || hlen > MOE_ST_MAX_HEADER)
        return moe_fail(err, MOE_ERR_FORMAT, "file %s: header length %llu is absurd (allowed 2..%llu)",
                        f->label, (unsigned long long)hlen, (unsigned long long)MOE_ST_MAX_HEADER);
    if (hlen > size - 8 || hlen > avail - 8)
        return moe_fail(err, MOE_ERR_FORMAT,
                        "file %s: truncated: header length %llu but only %llu bytes follow it",
                        f->label, (unsigned long long)hlen, (unsigned long long)(size - 8));
    const char *text = (const char *)bytes + 8;
    if (text[0] != '{')
        return moe_fail(err, MOE_ERR_FORMAT, "file %s: header does not start with '{'", f->label);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)hlen, &end, 0);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return moe_fail(err, MOE_ERR_FORMAT, "file %s: header is not valid JSON (near byte %lld)",
                        f->label, end ? (long long)(end - text) : -1LL);
    }
    for (const char *p = end; p < text + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            return moe_fail(err, MOE_ERR_FORMAT,
                            "file %s: header has bytes after its JSON object (byte %lld)", f->label,
                            (long long)(p - text));
        }
    f->data = avail >= size ? bytes + 8 + hlen : NULL;
    f->data_offset = 8 + hlen;
    f->data_size = size - 8 - hlen;
    int n = 0;
    for (const cJSON *it = root->child; it; it = it->next)
        if (strcmp(it->string, "__metadata__")) n++;
    f->tensors = calloc((size_t)(n ? n : 1), sizeof *f->tensors);
    moe_status st = f->tensors ? MOE_OK : moe_fail(err, MOE_ERR_NOMEM, "file %s: out of memory", f->label);
    int seen_meta = 0;
    for (const cJSON *it = root->child; it && !st; it = it->next) {
        if (!strcmp(it->string, "__metadata__")) {
            st = seen_meta++ ? moe_fail(err, MOE_ERR_FORMAT, "file %s: __metadata__ repeated", f->label)
                             : check_metadata(f->label, it, err);
            continue;
        }
        if (!it->string[0]) {
            st = moe_fail(err, MOE_ERR_FORMAT, "file %s: a tensor has an empty name", f->label);
            continue;
        }
        if (!moe_utf8_valid(it->string, strlen(it->string))) {
            st = moe_fail(err, MOE_ERR_FORMAT, "file %s: tensor name '%s' is not valid UTF-8",
                          f->label, it->string);
            continue;
        }
        moe_st_tensor *t = &f->tensors[f->n_tensors];
        t->name = strdup(it->string);
        if (!t->name) {
            st = moe_fail(err, MOE_ERR_NOMEM, "file %s: out of memory", f->label);
            continue;
        }
        f->n_tensors++;
        st = parse_entry(f->label, it, t, err);
    }
    cJSON_Delete(root);
    if (st) return st;
    qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, by_name);
    for (int i = 1; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, f->tensors[i - 1].name))
            return moe_fail(err, MOE_ERR_FORMAT, "file %s: tensor %s appears twice in the header",
                            f->label, f->tensors[i].name);
    return check_layout(f, err);
}

moe_status moe_st_parse(const void *bytes, size_t size, const char *label, moe_st_file *f,
                        moe_error *err) {
    if (!f) return moe_fail(err, MOE_ERR_ARG, "safetensors: NULL file");
    memset(f, 0, sizeof *f);
    if (!bytes && size) return moe_fail(err, MOE_ERR_ARG, "safetensors: NULL bytes");
    f->label = strdup(label ? label : "(buffer)");
    if (!f->label) return moe_fail(err, MOE_ERR_NOMEM, "safetensors: out of memory");
    moe_status st = parse_header(f, bytes, size, size, err);
    if (st) moe_st_close(f);
    else set_data(f);
    return st;
}

/* The length and the header of the open file fd [size] into *head [*avail] (malloc'ed): all of
 * it when the length is plausible, else just the length for parse_header to name the fault. */
static moe_status read_head(int fd, uint64_t size, const char *path, uint8_t **head, size_t *avail,
                            moe_error *err) {
    uint8_t len8[8];
    size_t n = size < 8 ? (size_t)size : 8;
    moe_status st = moe_in_pread(fd, len8, n, 0, path, "header length", err);
    if (st) return st;
    uint64_t hlen = 0;
    for (int i = (int)n - 1; i >= 0; i--) hlen = hlen << 8 | len8[i];
    if (n == 8 && hlen >= 2 && hlen <= MOE_ST_MAX_HEADER && hlen <= size - 8) n = 8 + (size_t)hlen;
    *head = malloc(n ? n : 1);
    if (!*head) return moe_fail(err, MOE_ERR_NOMEM, "file %s: out of memory for the header", path);
    memcpy(*head, len8, n < 8 ? n : 8);
    *avail = n;
    return n > 8 ? moe_in_pread(fd, *head + 8, n - 8, 8, path, "header", err) : MOE_OK;
}

moe_status moe_st_open(const char *path, moe_st_file *f, moe_error *err) {
    if (!f || !path) return moe_fail(err, MOE_ERR_ARG, "safetensors: NULL path or file");
    memset(f, 0, sizeof *f);
    int fd;
    uint64_t size;
    moe_status st = moe_in_open(path, &fd, &size, err);
    if (st) return st;
    uint8_t *head = NULL;
    size_t avail = 0;
    f->fd = fd;
    f->owns_fd = true;
    f->label = strdup(path);
    st = f->label ? read_head(fd, size, path, &head, &avail, err)
                  : moe_fail(err, MOE_ERR_NOMEM, "safetensors: out of memory");
    if (!st) st = parse_header(f, head, avail, size, err);
    free(head);
    f->data = NULL; /* the header was parsed from a copy: tensors are read with moe_st_read */
    /* A read-only mapping for callers that look at t->data of their own files (tests); the
     * loader and the tool never touch it, so a file shrinking underneath cannot fault them. */
    void *map = NULL;
    if (!st && size >= 8 && size <= SIZE_MAX) {
        map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED)
            st = moe_fail(err, MOE_ERR_IO, "file %s: cannot map: %s", path, strerror(errno));
    }
    if (st) {
        moe_st_close(f);
        return st;
    }
    f->map = map;
    f->map_size = (size_t)size;
    f->data = map ? (const uint8_t *)map + f->data_offset : NULL;
    set_data(f);
    return MOE_OK;
}

moe_status moe_st_read(const moe_st_file *f, const moe_st_tensor *t, void *dst, moe_error *err) {
    if (!t->nbytes) return MOE_OK;
    if (!f->owns_fd) {
        memcpy(dst, t->data, (size_t)t->nbytes);
        return MOE_OK;
    }
    char what[300];
    snprintf(what, sizeof what, "tensor %.250s", t->name);
    return moe_in_pread(f->fd, dst, (size_t)t->nbytes, f->data_offset + t->offset, f->label, what, err);
}

/* ---------------------------------------------------------------- writer */

static int by_size_desc(const void *a, const void *b) {
    const moe_st_entry *x = *(const moe_st_entry *const *)a, *y = *(const moe_st_entry *const *)b;
    size_t sx = moe_st_dtype_size(x->dtype), sy = moe_st_dtype_size(y->dtype);
    if (sx != sy) return sx > sy ? -1 : 1;
    return x < y ? -1 : x > y; /* stable: keep the caller's order within a size */
}

static uint64_t entry_bytes(const moe_st_entry *e) {
    uint64_t n = moe_st_dtype_size(e->dtype);
    for (int d = 0; d < e->ndim; d++) n *= (uint64_t)e->shape[d];
    return n;
}

/* The 8-byte length, the header padded with spaces to a multiple of 8, then the tensors in
 * order [n], through the all-or-nothing writer (out_file.h). */
static moe_status write_file(const char *path, const char *json, const moe_st_entry *const *order,
                             int n, moe_error *err) {
    size_t jlen = strlen(json), hlen = jlen + (8 - (8 + jlen) % 8) % 8;
    uint8_t *head = malloc(8 + hlen);
    if (!head) return moe_fail(err, MOE_ERR_NOMEM, "safetensors write %s: out of memory", path);
    for (int i = 0; i < 8; i++) head[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(head + 8, json, jlen);
    memset(head + 8 + jlen, ' ', hlen - jlen);
    moe_out_file out;
    moe_status st = moe_out_open(path, &out, err);
    if (!st) st = moe_out_write(&out, head, 8 + hlen, err);
    for (int i = 0; i < n && !st; i++)
        st = moe_out_write(&out, order[i]->data, (size_t)entry_bytes(order[i]), err);
    if (!st) st = moe_out_commit(&out, err);
    free(head);
    return st;
}

moe_status moe_st_write(const char *path, const moe_st_entry *entries, int n, moe_error *err) {
    if (!path || n < 0 || (n && !entries))
        return moe_fail(err, MOE_ERR_ARG, "safetensors write: NULL path or entries");
    for (int i = 0; i < n; i++) {
        const moe_st_entry *e = &entries[i];
        if (!e->name || !e->name[0] || !strcmp(e->name, "__metadata__") ||
            (unsigned)e->dtype >= MOE_ST_DTYPE_COUNT || e->ndim < 0 || e->ndim > MOE_ST_MAX_DIMS)
            return moe_fail(err, MOE_ERR_ARG, "safetensors write %s: entry %d is invalid", path, i);
        for (int d = 0; d < e->ndim; d++)
            if (e->shape[d] < 0)
                return moe_fail(err, MOE_ERR_ARG, "safetensors write %s: tensor %s: negative shape",
                                path, e->name);
        if (!e->data && entry_bytes(e))
            return moe_fail(err, MOE_ERR_ARG, "safetensors write %s: tensor %s: NULL data", path,
                            e->name);
        for (int j = 0; j < i; j++)
            if (!strcmp(entries[j].name, e->name))
                return moe_fail(err, MOE_ERR_ARG, "safetensors write %s: tensor %s given twice",
                                path, e->name);
    }
    const moe_st_entry **order = malloc((size_t)(n ? n : 1) * sizeof *order);
    cJSON *root = cJSON_CreateObject();
    char *json = NULL;
    moe_status st = MOE_OK;
    if (!order || !root) {
        st = moe_fail(err, MOE_ERR_NOMEM, "safetensors write %s: out of memory", path);
        goto done;
    }
    for (int i = 0; i < n; i++) order[i] = &entries[i];
    qsort(order, (size_t)n, sizeof *order, by_size_desc);
    uint64_t at = 0;
    for (int i = 0; i < n && !st; i++) {
        const moe_st_entry *e = order[i];
        cJSON *item = cJSON_AddObjectToObject(root, e->name);
        cJSON *shape = item ? cJSON_AddArrayToObject(item, "shape") : NULL;
        cJSON *offs = item ? cJSON_AddArrayToObject(item, "data_offsets") : NULL;
        if (!item || !shape || !offs || !cJSON_AddStringToObject(item, "dtype", moe_st_dtype_name(e->dtype)))
            st = moe_fail(err, MOE_ERR_NOMEM, "safetensors write %s: out of memory", path);
        for (int d = 0; d < e->ndim && !st; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)e->shape[d]));
        if (!st) {
            cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)at));
            at += entry_bytes(e);
            cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)at));
        }
    }
    if (st) goto done;
    json = cJSON_PrintUnformatted(root);
    if (!json) {
        st = moe_fail(err, MOE_ERR_NOMEM, "safetensors write %s: out of memory", path);
        goto done;
    }
    st = write_file(path, json, order, n, err);
done:
    free(json);
    cJSON_Delete(root);
    free(order);
    return st;
}

bool moe_st_to_f32(const moe_st_tensor *t, float *out) {
    if (t->dtype != MOE_ST_BF16 && t->dtype != MOE_ST_F32) return false;
    const uint8_t *p = t->data;
    for (uint64_t i = 0; i < t->numel; i++) {
        if (t->dtype == MOE_ST_BF16) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2); /* the mapping need not be aligned */
            out[i] = moe_bf16_to_f32(h);
        } else {
            memcpy(&out[i], p + 4 * i, 4);
        }
    }
    return true;
}
