/*
 * checkpoint.c: config.json, the weight map, and one MoE layer's tensors as a moe_weights view.
 *
 * Rules (checkpoint.h and docs/formats.md state them in full):
 *   - config fields have one meaning each: the MoE width is moe_intermediate_size when present,
 *     else intermediate_size; K > R, non-integers and missing fields fail naming the field;
 *   - each tensor of contract.md [checkpoint.tensors] is checked for presence, dtype and shape
 *     against the config; the two scale layouts [R*2I, D/32] and [R, 2I, D/32] are the same bytes,
 *     so both are read the same way; gate.global_scale may be F32 or BF16, shape [1] or [];
 *   - a flag that is false with its tensor present, or true with it absent, is an error;
 *   - a layer's tensors are read with pread into memory the checkpoint owns (so aligned, at
 *     any file offset), never used in place in a mapping: a file truncated underneath is an
 *     error naming it, not SIGBUS;
 *   - files open without blocking (in_file.h); config.json and the index are strict JSON,
 *     size-capped, parsed in one pass; tensor names must be UTF-8, unique in the weight map;
 *   - NaN scale bytes and overflowing scales are found by moe_shard_build, which checks the
 *     slab a rank holds and names the full tensor name (moe_weights.name_prefix) and index.
 */
#include "checkpoint.h"
#include "in_file.h"
#include "numeric.h"

#include <cJSON.h>
#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define LAYER_PREFIX "model.llm.layers."
#define GATE_SUFFIX ".mlp.gate.weight"

/* ---------------------------------------------------------------- config.json */

void moe_model_config_free(moe_model_config *mc) {
    if (!mc) return;
    for (int i = 0; i < mc->n_exclude; i++) free(mc->exclude[i]);
    free(mc->exclude);
    memset(mc, 0, sizeof *mc);
}

static moe_status config_int(const char *label, const cJSON *obj, const char *field, int *out,
                             moe_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, field);
    if (!v) return moe_fail(err, MOE_ERR_CONFIG, "%s: config field %s: missing", label, field);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        !(fabs(v->valuedouble) <= INT_MAX))
        return moe_fail(err, MOE_ERR_CONFIG, "%s: config field %s: not an integer", label, field);
    *out = (int)v->valuedouble;
    return MOE_OK;
}

static moe_status config_flag(const char *label, const cJSON *obj, const char *field, int *out,
                              moe_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, field);
    *out = -1;
    if (!v) return MOE_OK;
    if (!cJSON_IsBool(v))
        return moe_fail(err, MOE_ERR_CONFIG, "%s: config field %s: not true or false", label, field);
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return MOE_OK;
}

/* Appends the strings of <section>.<field> (absent or null: nothing) to mc->exclude; section is
 * "quantization_config" (config.json) or "quantization" (hf_quant_config.json). */
static moe_status add_exclude_list(const char *label, const char *section, const cJSON *qc,
                                   const char *field, moe_model_config *mc, moe_error *err) {
    const cJSON *ex = cJSON_GetObjectItemCaseSensitive(qc, field);
    if (!ex || cJSON_IsNull(ex)) return MOE_OK;
    if (!cJSON_IsArray(ex))
        return moe_fail(err, MOE_ERR_CONFIG, "%s: config field %s.%s: not an array", label,
                        section, field);
    int n = 0;
    for (const cJSON *e = ex->child; e; e = e->next) n++;
    char **grown = realloc(mc->exclude, (size_t)(mc->n_exclude + n + 1) * sizeof *grown);
    if (!grown) return moe_fail(err, MOE_ERR_NOMEM, "%s: out of memory", label);
    mc->exclude = grown;
    int i = 0;
    for (const cJSON *e = ex->child; e; e = e->next, i++) {
        if (!cJSON_IsString(e))
            return moe_fail(err, MOE_ERR_CONFIG, "%s: config field %s.%s[%d]: not a string",
                            label, section, field, i);
        if (!(mc->exclude[mc->n_exclude] = strdup(e->valuestring)))
            return moe_fail(err, MOE_ERR_NOMEM, "%s: out of memory", label);
        mc->n_exclude++;
    }
    size_t used = strlen(mc->exclude_field);
    snprintf(mc->exclude_field + used, sizeof mc->exclude_field - used, "%s%s.%s",
             used ? " / " : "", section, field);
    return MOE_OK;
}

/* <section>.quant_algo and .group_size, when present: the algorithm must agree with one read
 * before (config.json and hf_quant_config.json may both give it). */
static moe_status parse_quant_algo(const char *label, const char *section, const cJSON *qc,
                                   moe_model_config *mc, moe_error *err) {
    const cJSON *algo = cJSON_GetObjectItemCaseSensitive(qc, "quant_algo");
    if (algo && !cJSON_IsNull(algo)) {
        if (!cJSON_IsString(algo))
            return moe_fail(err, MOE_ERR_CONFIG, "%s: config field %s.quant_algo: not a string",
                            label, section);
        if (mc->quant_algo[0] && strcmp(mc->quant_algo, algo->valuestring))
            return moe_fail(err, MOE_ERR_CONFIG,
                            "%s: config field %s.quant_algo: %s, but %s says %s", label, section,
                            algo->valuestring, mc->quant_algo_field, mc->quant_algo);
        snprintf(mc->quant_algo, sizeof mc->quant_algo, "%s", algo->valuestring);
        snprintf(mc->quant_algo_field, sizeof mc->quant_algo_field, "%s.quant_algo", section);
    }
    if (cJSON_GetObjectItemCaseSensitive(qc, "group_size")) {
        char field[64];
        snprintf(field, sizeof field, "%s.group_size", section);
        int g = 0;
        moe_status st = config_int(label, qc, "group_size", &g, err);
        if (st) return moe_fail(err, st, "%s: config field %s: not an integer", label, field);
        if (mc->group_size && g != mc->group_size)
            return moe_fail(err, MOE_ERR_CONFIG, "%s: config field %s: %d, but another says %d",
                            label, field, g, mc->group_size);
        mc->group_size = g;
    }
    return MOE_OK;
}

/* Quark's "exclude" and ModelOpt's "exclude_modules" (the NVFP4 releases) mean the same thing:
 * both lists are read, as one. */
static moe_status parse_quant_config(const char *label, const cJSON *qc, moe_model_config *mc,
                                     moe_error *err) {
    if (!cJSON_IsObject(qc))
        return moe_fail(err, MOE_ERR_CONFIG, "%s: config field quantization_config: not an object",
                        label);
    mc->has_quant_config = true;
    const char *sec = "quantization_config";
    moe_status st = add_exclude_list(label, sec, qc, "exclude", mc, err);
    if (!st) st = add_exclude_list(label, sec, qc, "exclude_modules", mc, err);
    if (!st) st = parse_quant_algo(label, sec, qc, mc, err);
    if (!st && !mc->exclude_field[0])
        snprintf(mc->exclude_field, sizeof mc->exclude_field, "quantization_config.exclude");
    return st;
}

static moe_status parse_config(const char *label, const cJSON *root, moe_model_config *mc,
                               moe_error *err) {
    if (!cJSON_IsObject(root))
        return moe_fail(err, MOE_ERR_CONFIG, "%s: not a JSON object", label);
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    if (text && !cJSON_IsObject(text))
        return moe_fail(err, MOE_ERR_CONFIG, "%s: config field text_config: not an object", label);
    if (!text) text = root;
    moe_config *c = &mc->cfg;
    moe_status st = config_int(label, text, "hidden_size", &c->D, err);
    const char *width = cJSON_GetObjectItemCaseSensitive(text, "moe_intermediate_size")
                            ? "moe_intermediate_size"
                            : "intermediate_size";
    if (!st) st = config_int(label, text, width, &c->I, err);
    if (!st) st = config_int(label, text, "n_routed_experts", &c->R, err);
    if (!st) st = config_int(label, text, "num_experts_per_tok", &c->K, err);
    if (!st) st = config_int(label, text, "n_shared_experts", &c->S, err);
    if (st) return st;
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(text, "route_scale");
    if (!rs) return moe_fail(err, MOE_ERR_CONFIG, "%s: config field route_scale: missing", label);
    if (!cJSON_IsNumber(rs) || !isfinite((float)rs->valuedouble))
        return moe_fail(err, MOE_ERR_CONFIG, "%s: config field route_scale: not a finite number",
                        label);
    c->route_scale = (float)rs->valuedouble;
    st = config_flag(label, text, "use_gate_bias", &mc->gate_bias_flag, err);
    if (!st) st = config_flag(label, text, "use_global_scale", &mc->global_scale_flag, err);
    if (st) return st;
    c->has_gate_bias = mc->gate_bias_flag == 1;
    c->has_global_scale = mc->global_scale_flag == 1;
    c->routed_format = MOE_ROUTED_BF16; /* no block alignment asked of D, I until a layer says */
    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    if (qc && !cJSON_IsNull(qc)) {
        st = parse_quant_config(label, qc, mc, err);
        if (st) return st;
    }
    moe_error inner;
    if (moe_config_validate(c, &inner))
        return moe_fail(err, inner.status, "%s: %s", label, inner.msg);
    return MOE_OK;
}

/* Strict JSON: after the value only whitespace, to the last byte (a NUL is not whitespace). */
static moe_status json_trailing(const char *label, const char *text, size_t len, const char *end,
                                moe_error *err) {
    for (const char *p = end; p < text + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            return moe_fail(err, MOE_ERR_FORMAT, "%s: bytes after the JSON value (byte %lld)", label,
                            (long long)(p - text));
    return MOE_OK;
}

moe_status moe_model_config_parse(const char *text, size_t len, const char *label,
                                  moe_model_config *mc, moe_error *err) {
    if (!mc) return moe_fail(err, MOE_ERR_ARG, "config: NULL");
    memset(mc, 0, sizeof *mc);
    if (!label) label = "config.json";
    if (!text) return moe_fail(err, MOE_ERR_ARG, "%s: NULL text", label);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        return moe_fail(err, MOE_ERR_FORMAT, "%s: not valid JSON (near byte %lld)", label,
                        end ? (long long)(end - text) : -1LL);
    }
    moe_status st = json_trailing(label, text, len, end, err);
    if (!st) st = parse_config(label, root, mc, err);
    cJSON_Delete(root);
    if (st) moe_model_config_free(mc);
    return st;
}

moe_status moe_model_config_add_hf_quant(const char *text, size_t len, const char *label,
                                         moe_model_config *mc, moe_error *err) {
    if (!label) label = "hf_quant_config.json";
    const char *end = NULL;
    cJSON *root = text ? cJSON_ParseWithLengthOpts(text, len, &end, 0) : NULL;
    if (!root)
        return moe_fail(err, MOE_ERR_FORMAT, "%s: not valid JSON (near byte %lld)", label,
                        end && text ? (long long)(end - text) : -1LL);
    const cJSON *q = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "quantization") : NULL;
    moe_status st = json_trailing(label, text, len, end, err);
    if (st) {
    } else if (!cJSON_IsObject(q)) {
        st = moe_fail(err, MOE_ERR_CONFIG, "%s: config field quantization: %s", label,
                      q ? "not an object" : "missing");
    } else {
        mc->has_quant_config = true;
        st = add_exclude_list(label, "quantization", q, "exclude_modules", mc, err);
        if (!st) st = parse_quant_algo(label, "quantization", q, mc, err);
    }
    cJSON_Delete(root);
    return st;
}

bool moe_model_config_excludes(const moe_model_config *mc, const char *module) {
    for (int i = 0; i < mc->n_exclude; i++) {
        const char *e = mc->exclude[i];
        size_t n = strlen(e);
        if (!fnmatch(e, module, 0)) return true;
        if (n && !strncmp(e, module, n) && module[n] == '.') return true;
    }
    return false;
}

static bool lists_exactly(const moe_model_config *mc, const char *name) {
    for (int i = 0; i < mc->n_exclude; i++)
        if (!strcmp(mc->exclude[i], name)) return true;
    return false;
}

moe_status moe_model_config_experts_excluded(const moe_model_config *mc, const char *module,
                                             bool *excluded, moe_error *err) {
    *excluded = moe_model_config_excludes(mc, module);
    if (*excluded) return MOE_OK;
    char w13[192], w2[192];
    snprintf(w13, sizeof w13, "%s.w13_weight", module);
    snprintf(w2, sizeof w2, "%s.w2_weight", module);
    bool has13 = lists_exactly(mc, w13), has2 = lists_exactly(mc, w2);
    if (has13 != has2)
        return moe_fail(err, MOE_ERR_CONFIG,
                        "config field %s lists %s but not %s: the routed experts are excluded "
                        "only when both %s and %s are listed (or the module %s)",
                        mc->exclude_field, has13 ? w13 : w2, has13 ? w2 : w13, w13, w2, module);
    *excluded = has13 && has2;
    return MOE_OK;
}

/* ---------------------------------------------------------------- the directory */

static char *join_path(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (p) {
        memcpy(p, dir, a);
        p[a] = '/';
        memcpy(p + a + 1, name, b + 1);
    }
    return p;
}

void moe_checkpoint_close(moe_checkpoint *ck) {
    if (!ck) return;
    for (int i = 0; i < ck->n_names; i++) {
        free(ck->names[i]);
        free(ck->name_file[i]);
    }
    free(ck->names);
    free(ck->name_file);
    for (int i = 0; i < ck->n_files; i++) {
        free(ck->file_names[i]);
        moe_st_close(&ck->files[i]);
    }
    free(ck->file_names);
    free(ck->files);
    for (int i = 0; i < ck->n_copies; i++) free(ck->copies[i]);
    free(ck->copies);
    moe_model_config_free(&ck->config);
    free(ck->dir);
    memset(ck, 0, sizeof *ck);
}

static moe_status add_name(moe_checkpoint *ck, const char *name, const char *file, int cap,
                           moe_error *err) {
    if (ck->n_names >= cap) return moe_fail(err, MOE_ERR_INTERNAL, "checkpoint: name table full");
    if (!moe_utf8_valid(name, strlen(name)))
        return moe_fail(err, MOE_ERR_FORMAT, "checkpoint %s: tensor name '%s' is not valid UTF-8",
                        ck->dir, name);
    ck->names[ck->n_names] = strdup(name);
    ck->name_file[ck->n_names] = strdup(file);
    if (!ck->names[ck->n_names] || !ck->name_file[ck->n_names]) {
        free(ck->names[ck->n_names]);
        free(ck->name_file[ck->n_names]);
        return moe_fail(err, MOE_ERR_NOMEM, "checkpoint: out of memory");
    }
    ck->n_names++;
    return MOE_OK;
}

static moe_status alloc_names(moe_checkpoint *ck, int n, moe_error *err) {
    ck->names = calloc((size_t)(n ? n : 1), sizeof *ck->names);
    ck->name_file = calloc((size_t)(n ? n : 1), sizeof *ck->name_file);
    if (!ck->names || !ck->name_file) return moe_fail(err, MOE_ERR_NOMEM, "checkpoint: out of memory");
    return MOE_OK;
}

/* Opens file name (relative to the directory) once; *out points at it. */
static moe_status open_file(moe_checkpoint *ck, const char *name, const moe_st_file **out,
                            moe_error *err) {
    for (int i = 0; i < ck->n_files; i++)
        if (!strcmp(ck->file_names[i], name)) {
            *out = &ck->files[i];
            return MOE_OK;
        }
    char **names = realloc(ck->file_names, (size_t)(ck->n_files + 1) * sizeof *names);
    if (names) ck->file_names = names;
    moe_st_file *files = realloc(ck->files, (size_t)(ck->n_files + 1) * sizeof *files);
    if (files) ck->files = files;
    char *path = join_path(ck->dir, name);
    char *copy = strdup(name);
    if (!names || !files || !path || !copy) {
        free(path);
        free(copy);
        return moe_fail(err, MOE_ERR_NOMEM, "checkpoint: out of memory");
    }
    moe_status st = moe_st_open(path, &ck->files[ck->n_files], err);
    free(path);
    if (st) {
        free(copy);
        return st;
    }
    ck->file_names[ck->n_files] = copy;
    *out = &ck->files[ck->n_files++];
    return MOE_OK;
}

static int by_name_ptr(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A tensor named twice in the weight map would make the lookup depend on order: refused. */
static moe_status check_unique_names(const moe_checkpoint *ck, const char *path, moe_error *err) {
    char **sorted = malloc((size_t)(ck->n_names ? ck->n_names : 1) * sizeof *sorted);
    if (!sorted) return moe_fail(err, MOE_ERR_NOMEM, "checkpoint: out of memory");
    memcpy(sorted, ck->names, (size_t)ck->n_names * sizeof *sorted);
    qsort(sorted, (size_t)ck->n_names, sizeof *sorted, by_name_ptr);
    moe_status st = MOE_OK;
    for (int i = 1; i < ck->n_names && !st; i++)
        if (!strcmp(sorted[i], sorted[i - 1]))
            st = moe_fail(err, MOE_ERR_FORMAT, "file %s: tensor %s appears twice in weight_map", path,
                          sorted[i]);
    free(sorted);
    return st;
}

/* The index, in time linear in its size: one pass over weight_map's members. */
static moe_status read_index(moe_checkpoint *ck, const char *path, moe_error *err) {
    char *text;
    size_t len;
    moe_status st = moe_in_read_small(path, MOE_INDEX_MAX_BYTES, &text, &len, err);
    if (st) return st;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root)
        st = moe_fail(err, MOE_ERR_FORMAT, "file %s: not valid JSON (near byte %lld)", path,
                      end ? (long long)(end - text) : -1LL);
    else st = json_trailing(path, text, len, end, err);
    free(text);
    const cJSON *map = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!st && !cJSON_IsObject(root)) st = moe_fail(err, MOE_ERR_FORMAT, "file %s: not a JSON object", path);
    else if (!st && !cJSON_IsObject(map))
        st = moe_fail(err, MOE_ERR_FORMAT, "file %s: field weight_map: missing or not an object", path);
    int n = 0;
    for (const cJSON *e = st ? NULL : map->child; e && n < INT_MAX; e = e->next) n++;
    if (!st) st = alloc_names(ck, n, err);
    for (const cJSON *e = st ? NULL : map->child; e && !st; e = e->next) {
        const char *file = cJSON_IsString(e) ? e->valuestring : NULL;
        if (!file || !file[0] || strchr(file, '/') || !strcmp(file, ".") || !strcmp(file, "..") ||
            !moe_utf8_valid(file, strlen(file)))
            st = moe_fail(err, MOE_ERR_FORMAT,
                          "file %s: weight_map entry for tensor %s is not a file name in the "
                          "model directory",
                          path, e->string);
        else
            st = add_name(ck, e->string, file, n, err);
    }
    if (!st) st = check_unique_names(ck, path, err);
    cJSON_Delete(root);
    return st;
}

/* Whether path exists (stat, not open: a named pipe there must not block; the reader refuses
 * it). Other errors than "absent" count as present, so that the reader names them. */
static bool present(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 || errno != ENOENT;
}

static moe_status read_hf_quant_config(moe_checkpoint *ck, moe_error *err) {
    char *path = join_path(ck->dir, "hf_quant_config.json");
    if (!path) return moe_fail(err, MOE_ERR_NOMEM, "checkpoint: out of memory");
    moe_status st = MOE_OK;
    if (present(path)) {
        char *text = NULL;
        size_t len = 0;
        st = moe_in_read_small(path, MOE_CONFIG_MAX_BYTES, &text, &len, err);
        if (!st) st = moe_model_config_add_hf_quant(text, len, path, &ck->config, err);
        free(text);
    }
    free(path);
    return st;
}

moe_status moe_checkpoint_open(const char *dir, moe_checkpoint *ck, moe_error *err) {
    if (!ck) return moe_fail(err, MOE_ERR_ARG, "checkpoint: NULL");
    memset(ck, 0, sizeof *ck);
    if (!dir) return moe_fail(err, MOE_ERR_ARG, "argument --model: missing");
    ck->dir = strdup(dir);
    char *config_path = join_path(dir, "config.json");
    char *index_path = join_path(dir, "model.safetensors.index.json");
    char *text = NULL;
    size_t len = 0;
    moe_status st = MOE_OK;
    if (!ck->dir || !config_path || !index_path) {
        st = moe_fail(err, MOE_ERR_NOMEM, "checkpoint: out of memory");
        goto done;
    }
    st = moe_in_read_small(config_path, MOE_CONFIG_MAX_BYTES, &text, &len, err);
    if (!st) st = moe_model_config_parse(text, len, config_path, &ck->config, err);
    if (!st) st = read_hf_quant_config(ck, err);
    if (st) goto done;
    if (present(index_path)) {
        st = read_index(ck, index_path, err);
    } else {
        const moe_st_file *f;
        char *single = join_path(dir, "model.safetensors");
        bool absent = single && !present(single);
        free(single);
        st = open_file(ck, "model.safetensors", &f, err);
        if (st && absent)
            st = moe_fail(err, MOE_ERR_IO,
                          "model directory %s: neither model.safetensors.index.json nor "
                          "model.safetensors",
                          dir);
        if (!st) st = alloc_names(ck, f->n_tensors, err);
        for (int i = 0; i < (st ? 0 : f->n_tensors) && !st; i++)
            st = add_name(ck, f->tensors[i].name, "model.safetensors", f->n_tensors, err);
    }
done:
    free(text);
    free(config_path);
    free(index_path);
    if (st) moe_checkpoint_close(ck);
    return st;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

void moe_checkpoint_moe_layers(const moe_checkpoint *ck, int *layers, int max, int *count) {
    int n = 0;
    const size_t plen = strlen(LAYER_PREFIX), slen = strlen(GATE_SUFFIX);
    for (int i = 0; i < ck->n_names; i++) {
        const char *s = ck->names[i];
        size_t len = strlen(s);
        if (len <= plen + slen || strncmp(s, LAYER_PREFIX, plen) || strcmp(s + len - slen, GATE_SUFFIX))
            continue;
        long v = 0;
        size_t j = plen;
        for (; j < len - slen && s[j] >= '0' && s[j] <= '9' && v < 1000000; j++) v = v * 10 + (s[j] - '0');
        if (j != len - slen) continue; /* not a plain layer number */
        if (n < max) layers[n] = (int)v;
        n++;
    }
    if (layers) qsort(layers, (size_t)(n < max ? n : max), sizeof *layers, cmp_int);
    *count = n;
}

static const char *lookup_file(const moe_checkpoint *ck, const char *name) {
    for (int i = 0; i < ck->n_names; i++)
        if (!strcmp(ck->names[i], name)) return ck->name_file[i];
    return NULL;
}

/* A tensor by full name and the file holding it, opening that file if needed. */
static const moe_st_tensor *find_tensor(moe_checkpoint *ck, const char *name,
                                        const moe_st_file **file, moe_error *err) {
    const char *fname = lookup_file(ck, name);
    if (!fname) {
        moe_fail(err, MOE_ERR_SHAPE, "missing tensor %s", name);
        return NULL;
    }
    if (open_file(ck, fname, file, err)) return NULL;
    const moe_st_tensor *t = moe_st_find(*file, name);
    if (!t)
        moe_fail(err, MOE_ERR_FORMAT,
                 "missing tensor %s: the weight map names file %s, which does not hold it", name,
                 fname);
    return t;
}

const moe_st_tensor *moe_checkpoint_tensor(moe_checkpoint *ck, const char *name, moe_error *err) {
    const moe_st_file *f;
    return find_tensor(ck, name, &f, err);
}

/* Keeps p (malloc'ed) until moe_checkpoint_close; frees it and fails if it cannot. */
static moe_status keep(moe_checkpoint *ck, void *p, moe_error *err) {
    void **copies = realloc(ck->copies, (size_t)(ck->n_copies + 1) * sizeof *copies);
    if (!copies) {
        free(p);
        return moe_fail(err, MOE_ERR_NOMEM, "checkpoint: out of memory");
    }
    ck->copies = copies;
    ck->copies[ck->n_copies++] = p;
    return MOE_OK;
}

/* t's bytes read from file f (pread: a file shrunk underneath is an error, not SIGBUS) into
 * aligned memory owned by ck. */
static moe_status read_data(moe_checkpoint *ck, const moe_st_file *f, const moe_st_tensor *t,
                            const void **out, moe_error *err) {
    void *copy = malloc(t->nbytes ? (size_t)t->nbytes : 1);
    if (!copy)
        return moe_fail(err, MOE_ERR_NOMEM, "tensor %s: out of memory (%llu bytes)", t->name,
                        (unsigned long long)t->nbytes);
    moe_status st = moe_st_read(f, t, copy, err);
    if (st) {
        free(copy);
        return st;
    }
    *out = copy;
    return keep(ck, copy, err);
}

/* A tensor by full name, read whole (read_data). */
static const moe_st_tensor *read_tensor(moe_checkpoint *ck, const char *name, const void **out,
                                        moe_error *err) {
    const moe_st_file *f;
    const moe_st_tensor *t = find_tensor(ck, name, &f, err);
    return t && !read_data(ck, f, t, out, err) ? t : NULL;
}

/* ---------------------------------------------------------------- one layer */

typedef struct {
    moe_checkpoint *ck;
    const moe_config *cfg;
    char prefix[64];
    char name[192];
} layer_ctx;

static const char *full_name(layer_ctx *lc, const char *suffix) {
    snprintf(lc->name, sizeof lc->name, "%s%s", lc->prefix, suffix);
    return lc->name;
}

static bool has_tensor(layer_ctx *lc, const char *suffix) {
    return lookup_file(lc->ck, full_name(lc, suffix)) != NULL;
}

/* Checks dtype and shape; dims [ndim]. The expected shape is explained by the config fields. */
static moe_status check_tensor(layer_ctx *lc, const moe_st_tensor *t, moe_st_dtype dtype, int ndim,
                               const int64_t *dims, moe_error *err) {
    if (t->dtype != dtype)
        return moe_fail(err, MOE_ERR_DTYPE, "tensor %s: dtype %s, expected %s", t->name,
                        moe_st_dtype_name(t->dtype), moe_st_dtype_name(dtype));
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == dims[i];
    if (!same) {
        char got[96], want[96];
        const moe_config *c = lc->cfg;
        return moe_fail(err, MOE_ERR_SHAPE,
                        "tensor %s: shape %s, expected %s from config hidden_size=%d, "
                        "intermediate_size=%d, n_routed_experts=%d, n_shared_experts=%d",
                        t->name, moe_st_shape_str(t->ndim, t->shape, got, sizeof got),
                        moe_st_shape_str(ndim, dims, want, sizeof want), c->D, c->I, c->R, c->S);
    }
    return MOE_OK;
}

/* Finds suffix and checks it; *data receives its aligned elements. */
static moe_status load(layer_ctx *lc, const char *suffix, moe_st_dtype dtype, int ndim,
                       const int64_t *dims, const void **data, moe_error *err) {
    const moe_st_file *f;
    const moe_st_tensor *t = find_tensor(lc->ck, full_name(lc, suffix), &f, err);
    if (!t) return err ? err->status : MOE_ERR_SHAPE;
    moe_status st = check_tensor(lc, t, dtype, ndim, dims, err);
    return st ? st : read_data(lc->ck, f, t, data, err);
}

/* A flag and the presence of its tensor must agree; an absent flag follows the tensor. */
static moe_status resolve_flag(layer_ctx *lc, int flag, const char *field, const char *suffix,
                               bool *use, moe_error *err) {
    bool present = has_tensor(lc, suffix);
    if (flag == 1 && !present)
        return moe_fail(err, MOE_ERR_SHAPE, "missing tensor %s (config field %s is true)",
                        full_name(lc, suffix), field);
    if (flag == 0 && present)
        return moe_fail(err, MOE_ERR_CONFIG,
                        "tensor %s: present, but config field %s is false", full_name(lc, suffix),
                        field);
    *use = present;
    return MOE_OK;
}

/* How each routed format is stored in a checkpoint: the scale tensor's suffix after the weight's
 * name and its dtype; NVFP4 also needs the .scale2, .input_amax and .original_shape sidecars. */
typedef struct {
    const char *scale_suffix; /* "_scale" (MXFP4), ".scale" (NVFP4); NULL for bf16 */
    moe_st_dtype scale_dtype;
    bool sidecars_required;
} routed_storage;

static const routed_storage storage[MOE_ROUTED_FORMAT_COUNT] = {
    [MOE_ROUTED_MXFP4] = {"_scale", MOE_ST_U8, false},
    [MOE_ROUTED_BF16] = {NULL, MOE_ST_BF16, false},
    [MOE_ROUTED_NVFP4] = {".scale", MOE_ST_F8_E4M3, true},
};

/* The block format the quantization config asks of the layers it does not exclude: quant_algo
 * NVFP4 or MXFP4; no quant_algo (Quark's config) means MXFP4. */
static moe_status config_block_format(const moe_model_config *mc, moe_routed_format *fmt,
                                      moe_error *err) {
    *fmt = MOE_ROUTED_MXFP4;
    if (!mc->quant_algo[0] || !strcmp(mc->quant_algo, "MXFP4")) return MOE_OK;
    if (!strcmp(mc->quant_algo, "NVFP4")) {
        *fmt = MOE_ROUTED_NVFP4;
        return MOE_OK;
    }
    return moe_fail(err, MOE_ERR_CONFIG,
                    "config field %s: %s is not a routed expert format this loader reads (MXFP4 "
                    "or NVFP4)",
                    mc->quant_algo_field, mc->quant_algo);
}

/* The routed format from the tensors (experts.w13_weight's dtype, then which scale tensor is
 * present), cross-checked with the quantization config's exclusions, quant_algo and group_size. */
static moe_status routed_format(layer_ctx *lc, const moe_model_config *mc, moe_routed_format *fmt,
                                moe_error *err) {
    const moe_st_tensor *t = moe_checkpoint_tensor(lc->ck, full_name(lc, "experts.w13_weight"), err);
    if (!t) return err ? err->status : MOE_ERR_SHAPE;
    if (t->dtype != MOE_ST_U8 && t->dtype != MOE_ST_BF16)
        return moe_fail(err, MOE_ERR_DTYPE,
                        "tensor %s: dtype %s, expected U8 (MXFP4 or NVFP4) or BF16", t->name,
                        moe_st_dtype_name(t->dtype));
    moe_routed_format want;
    moe_status st = mc->has_quant_config ? config_block_format(mc, &want, err)
                                         : (want = MOE_ROUTED_MXFP4, MOE_OK);
    if (st) return st;
    *fmt = MOE_ROUTED_BF16;
    if (t->dtype == MOE_ST_U8) {
        bool mx = has_tensor(lc, "experts.w13_weight_scale"), nv = has_tensor(lc, "experts.w13_weight.scale");
        if (mx && nv)
            return moe_fail(err, MOE_ERR_FORMAT,
                            "tensor %s: both an MXFP4 scale (w13_weight_scale) and an NVFP4 scale "
                            "(w13_weight.scale) are present",
                            t->name);
        *fmt = nv ? MOE_ROUTED_NVFP4 : mx ? MOE_ROUTED_MXFP4 : want;
    }
    if (!mc->has_quant_config) return MOE_OK;
    const char *have = moe_routed_format_get(*fmt)->name, *expect = moe_routed_format_get(want)->name;
    char module[128];
    snprintf(module, sizeof module, "%sexperts", lc->prefix);
    bool excluded;
    st = moe_model_config_experts_excluded(mc, module, &excluded, err);
    if (st) return st;
    lc->ck->info.excluded = excluded;
    if (excluded && *fmt != MOE_ROUTED_BF16)
        return moe_fail(err, MOE_ERR_DTYPE,
                        "tensor %s: stored as %s (U8), but config field %s excludes %s from "
                        "quantization, so bf16 was expected",
                        t->name, have, mc->exclude_field, module);
    if (!excluded && *fmt == MOE_ROUTED_BF16)
        return moe_fail(err, MOE_ERR_DTYPE,
                        "tensor %s: stored as BF16, but config field %s lists neither %s nor both "
                        "of its weights, so %s was expected",
                        t->name, mc->exclude_field, module, expect);
    if (!excluded && *fmt != want)
        return moe_fail(err, MOE_ERR_DTYPE,
                        "tensor %s: stored as %s (its scale is %s%s), but config field %s says %s",
                        t->name, have, t->name, storage[*fmt].scale_suffix,
                        mc->quant_algo[0] ? mc->quant_algo_field : "quantization_config.quant_method",
                        mc->quant_algo[0] ? mc->quant_algo : "quark (MXFP4)");
    const int block = moe_routed_format_get(*fmt)->block;
    if (!excluded && mc->group_size && mc->group_size != block)
        return moe_fail(err, MOE_ERR_CONFIG,
                        "config field group_size: %d, but %s experts (tensor %s) have %d values "
                        "per scale",
                        mc->group_size, have, t->name, block);
    return MOE_OK;
}

/* An fp32 or bf16 tensor of one element, shape [1] or []: *out, with its name for messages. */
static moe_status load_scalar(layer_ctx *lc, const char *suffix, float *out, moe_error *err) {
    const moe_st_tensor *t = moe_checkpoint_tensor(lc->ck, full_name(lc, suffix), err);
    if (!t) return err ? err->status : MOE_ERR_SHAPE;
    if (t->dtype != MOE_ST_F32 && t->dtype != MOE_ST_BF16)
        return moe_fail(err, MOE_ERR_DTYPE, "tensor %s: dtype %s, expected F32 or BF16", t->name,
                        moe_st_dtype_name(t->dtype));
    if (t->numel != 1 || t->ndim > 1) {
        char got[96];
        return moe_fail(err, MOE_ERR_SHAPE, "tensor %s: shape %s, expected [1]", t->name,
                        moe_st_shape_str(t->ndim, t->shape, got, sizeof got));
    }
    const void *data = NULL;
    if (!read_tensor(lc->ck, t->name, &data, err)) return err ? err->status : MOE_ERR_IO;
    moe_st_tensor copy = *t; /* the read bytes, not the mapping */
    copy.data = data;
    float v[1];
    moe_st_to_f32(&copy, v);
    *out = v[0];
    return MOE_OK;
}

/* weight.input_amax (finite, > 0; loaded and otherwise unused: NVFP4 runs as W4A16) and
 * weight.original_shape (I32 or I64 [3], equal to the unpacked [R, rows, cols]); required for
 * NVFP4, validated when present for MXFP4. which: 0 w13, 1 w2. */
static moe_status load_sidecars(layer_ctx *lc, const char *weight, int which, bool required,
                                const int64_t *unpacked, moe_error *err) {
    char suffix[96];
    moe_layer_info *info = &lc->ck->info;
    snprintf(suffix, sizeof suffix, "%s.input_amax", weight);
    moe_status st = MOE_OK;
    if (required || has_tensor(lc, suffix)) {
        float amax = 0.0f;
        st = load_scalar(lc, suffix, &amax, err);
        if (!st && !(isfinite(amax) && amax > 0.0f))
            st = moe_fail(err, MOE_ERR_VALUE, "tensor %s: value %g, expected finite and > 0",
                          full_name(lc, suffix), (double)amax);
        if (st) return st;
        info->input_amax[which] = amax;
    }
    snprintf(suffix, sizeof suffix, "%s.original_shape", weight);
    if (!required && !has_tensor(lc, suffix)) return MOE_OK;
    const void *data = NULL;
    const moe_st_tensor *t = moe_checkpoint_tensor(lc->ck, full_name(lc, suffix), err);
    if (!t) return err ? err->status : MOE_ERR_SHAPE;
    if (t->dtype != MOE_ST_I32 && t->dtype != MOE_ST_I64)
        return moe_fail(err, MOE_ERR_DTYPE, "tensor %s: dtype %s, expected I32 or I64", t->name,
                        moe_st_dtype_name(t->dtype));
    if (t->ndim != 1 || t->shape[0] != 3) {
        char got[96];
        return moe_fail(err, MOE_ERR_SHAPE, "tensor %s: shape %s, expected [3]", t->name,
                        moe_st_shape_str(t->ndim, t->shape, got, sizeof got));
    }
    if (!read_tensor(lc->ck, t->name, &data, err)) return err ? err->status : MOE_ERR_IO;
    for (int i = 0; i < 3; i++) {
        int64_t v;
        if (t->dtype == MOE_ST_I64) {
            memcpy(&v, (const uint8_t *)data + 8 * i, 8);
        } else {
            int32_t v32;
            memcpy(&v32, (const uint8_t *)data + 4 * i, 4);
            v = v32;
        }
        if (v != unpacked[i])
            return moe_fail(err, MOE_ERR_SHAPE,
                            "tensor %s: element %d is %" PRId64 ", expected %" PRId64
                            " (the unpacked shape [%" PRId64 ", %" PRId64 ", %" PRId64 "])",
                            t->name, i, v, unpacked[i], unpacked[0], unpacked[1], unpacked[2]);
    }
    info->original_shape[which] = true;
    return MOE_OK;
}

/* The block-format experts: codes [R, rows, cols/2] U8, scales [R, rows, cols/B] or flattened
 * [R*rows, cols/B] (the same bytes) of the format's scale dtype, NVFP4's scale2 [R] F32, and the
 * sidecars. */
static moe_status load_block_experts(layer_ctx *lc, const moe_config *cfg, moe_weights *w,
                                     moe_error *err) {
    const routed_storage *rs = &storage[cfg->routed_format];
    const moe_routed_format_info *fi = moe_routed_format_get(cfg->routed_format);
    const int64_t D = cfg->D, I = cfg->I, R = cfg->R, B = fi->block;
    moe_status st = MOE_OK;
    for (int i = 0; i < 2 && !st; i++) {
        const char *weight = i ? "experts.w2_weight" : "experts.w13_weight";
        const int64_t rows = i ? D : 2 * I, cols = i ? I : D;
        const void *codes = NULL, *scales = NULL, *scale2 = NULL;
        char suffix[96];
        st = load(lc, weight, MOE_ST_U8, 3, (const int64_t[]){R, rows, cols / 2}, &codes, err);
        snprintf(suffix, sizeof suffix, "%s%s", weight, rs->scale_suffix);
        const moe_st_file *f = NULL;
        const moe_st_tensor *t = st ? NULL : find_tensor(lc->ck, full_name(lc, suffix), &f, err);
        if (!st && !t) st = err ? err->status : MOE_ERR_SHAPE;
        if (!st) {
            bool flat = t->ndim == 2;
            st = check_tensor(lc, t, rs->scale_dtype, flat ? 2 : 3,
                              flat ? (const int64_t[]){R * rows, cols / B}
                                   : (const int64_t[]){R, rows, cols / B},
                              err);
        }
        if (!st) st = read_data(lc->ck, f, t, &scales, err);
        if (!st && fi->has_scale2) {
            snprintf(suffix, sizeof suffix, "%s.scale2", weight);
            st = load(lc, suffix, MOE_ST_F32, 1, (const int64_t[]){R}, &scale2, err);
        }
        if (!st) st = load_sidecars(lc, weight, i, rs->sidecars_required,
                                    (const int64_t[]){R, rows, cols}, err);
        if (i == 0) w->w13_mx = codes, w->w13_scale = scales, w->w13_scale2 = scale2;
        else w->w2_mx = codes, w->w2_scale = scales, w->w2_scale2 = scale2;
    }
    return st;
}

/* Every tensor under the layer's mlp. prefix that this format does not use is recorded in
 * ck->info (by name); with ck->strict the first one is an error. */
static moe_status check_unknown_tensors(layer_ctx *lc, moe_routed_format fmt, moe_error *err) {
    static const char *const common_suffixes[] = {
        "gate.weight", "gate.bias", "gate.global_scale", "experts.w13_weight", "experts.w2_weight",
        "shared_experts.shared_w13_weight", "shared_experts.shared_w2_weight"};
    static const char *const sidecars[] = {"_scale", ".scale", ".scale2", ".input_amax", ".original_shape"};
    moe_layer_info *info = &lc->ck->info;
    const size_t plen = strlen(lc->prefix);
    for (int i = 0; i < lc->ck->n_names; i++) {
        const char *name = lc->ck->names[i];
        if (strncmp(name, lc->prefix, plen)) continue;
        const char *suffix = name + plen;
        bool known = false;
        for (size_t k = 0; k < sizeof common_suffixes / sizeof *common_suffixes && !known; k++)
            known = !strcmp(suffix, common_suffixes[k]);
        for (int wi = 0; wi < 2 && !known && fmt != MOE_ROUTED_BF16; wi++) {
            const char *weight = wi ? "experts.w2_weight" : "experts.w13_weight";
            size_t wl = strlen(weight);
            if (strncmp(suffix, weight, wl)) continue;
            for (size_t k = 0; k < sizeof sidecars / sizeof *sidecars && !known; k++) {
                bool scale_of_other = (k == 0 && fmt != MOE_ROUTED_MXFP4) ||
                                      (k <= 2 && k >= 1 && fmt != MOE_ROUTED_NVFP4);
                known = !scale_of_other && !strcmp(suffix + wl, sidecars[k]);
            }
        }
        if (known) continue;
        if (lc->ck->strict)
            return moe_fail(err, MOE_ERR_FORMAT,
                            "tensor %s: not a tensor of a %s MoE layer (strict mode refuses "
                            "tensors it would ignore)",
                            name, moe_routed_format_get(fmt)->name);
        if (info->n_ignored < MOE_LAYER_INFO_MAX_IGNORED)
            snprintf(info->ignored[info->n_ignored], sizeof info->ignored[0], "%s", name);
        info->n_ignored++;
    }
    return MOE_OK;
}

static moe_status pick_layer(const moe_checkpoint *ck, int *layer, moe_error *err) {
    int layers[16], n;
    moe_checkpoint_moe_layers(ck, layers, 16, &n);
    if (n == 1) {
        *layer = layers[0];
        return MOE_OK;
    }
    if (n == 0)
        return moe_fail(err, MOE_ERR_SHAPE,
                        "missing tensor " LAYER_PREFIX "{L}" GATE_SUFFIX ": the checkpoint holds no "
                        "MoE layer");
    char list[128] = "";
    size_t used = 0;
    for (int i = 0; i < n && i < 16 && used < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, i ? ", %d" : "%d", layers[i]);
    return moe_fail(err, MOE_ERR_ARG,
                    "argument --layer: required, the checkpoint holds %d MoE layers (%s%s)", n, list,
                    n > 16 ? ", ..." : "");
}

moe_status moe_checkpoint_layer(moe_checkpoint *ck, int layer, int *layer_out, moe_config *cfg_out,
                                moe_weights *w, moe_error *err) {
    if (!ck || !cfg_out || !w) return moe_fail(err, MOE_ERR_ARG, "checkpoint layer: NULL argument");
    memset(w, 0, sizeof *w);
    moe_status st = MOE_OK;
    if (layer < 0 && (st = pick_layer(ck, &layer, err))) return st;
    if (layer_out) *layer_out = layer;
    memset(&ck->info, 0, sizeof ck->info);
    ck->info.layer = layer;
    moe_config cfg = ck->config.cfg;
    layer_ctx lc = {.ck = ck, .cfg = &cfg};
    snprintf(lc.prefix, sizeof lc.prefix, LAYER_PREFIX "%d.mlp.", layer);
    if (!has_tensor(&lc, "gate.weight")) {
        int layers[16], n;
        moe_checkpoint_moe_layers(ck, layers, 16, &n);
        return moe_fail(err, MOE_ERR_SHAPE, "missing tensor %sgate.weight (layer %d%s)", lc.prefix,
                        layer, n ? " is not a MoE layer of this checkpoint" : "; no MoE layer found");
    }
    st = routed_format(&lc, &ck->config, &cfg.routed_format, err);
    if (!st) {
        moe_error inner;
        if (moe_config_validate(&cfg, &inner)) st = moe_fail(err, inner.status, "%s", inner.msg);
    }
    if (!st) st = resolve_flag(&lc, ck->config.gate_bias_flag, "use_gate_bias", "gate.bias",
                               &cfg.has_gate_bias, err);
    if (!st) st = resolve_flag(&lc, ck->config.global_scale_flag, "use_global_scale",
                               "gate.global_scale", &cfg.has_global_scale, err);
    if (st) return st;

    const int64_t D = cfg.D, I = cfg.I, R = cfg.R, S = cfg.S;
    const void *p = NULL;
    st = load(&lc, "gate.weight", MOE_ST_BF16, 2, (const int64_t[]){R + S, D}, &p, err);
    w->gate_w = p;
    if (!st && cfg.has_gate_bias) {
        st = load(&lc, "gate.bias", MOE_ST_F32, 1, (const int64_t[]){R}, &p, err);
        w->gate_bias = p;
    }
    w->global_scale = 1.0f;
    if (!st && cfg.has_global_scale) {
        st = load_scalar(&lc, "gate.global_scale", &w->global_scale, err);
        if (!st && !isfinite(w->global_scale))
            st = moe_fail(err, MOE_ERR_VALUE, "tensor %s: value %g is not finite",
                          full_name(&lc, "gate.global_scale"), (double)w->global_scale);
    }
    if (st) return st;

    if (moe_routed_format_get(cfg.routed_format)->block) {
        st = load_block_experts(&lc, &cfg, w, err);
    } else {
        st = load(&lc, "experts.w13_weight", MOE_ST_BF16, 3, (const int64_t[]){R, 2 * I, D}, &p, err);
        w->w13_bf16 = p;
        if (!st) st = load(&lc, "experts.w2_weight", MOE_ST_BF16, 3, (const int64_t[]){R, D, I}, &p, err);
        w->w2_bf16 = p;
        static const char *const scales[4] = {"experts.w13_weight_scale", "experts.w2_weight_scale",
                                              "experts.w13_weight.scale", "experts.w2_weight.scale"};
        for (int i = 0; i < 4 && !st; i++)
            if (has_tensor(&lc, scales[i]))
                st = moe_fail(err, MOE_ERR_DTYPE,
                              "tensor %s: an %s scale next to bf16 experts.w13_weight",
                              full_name(&lc, scales[i]), i < 2 ? "MXFP4" : "NVFP4");
    }
    if (st) return st;
    if (S > 0 || has_tensor(&lc, "shared_experts.shared_w13_weight")) {
        st = load(&lc, "shared_experts.shared_w13_weight", MOE_ST_BF16, 3,
                  (const int64_t[]){S, 2 * I, D}, &p, err);
        w->sink_w13 = p;
    }
    if (!st && (S > 0 || has_tensor(&lc, "shared_experts.shared_w2_weight"))) {
        st = load(&lc, "shared_experts.shared_w2_weight", MOE_ST_BF16, 3,
                  (const int64_t[]){S, D, I}, &p, err);
        w->sink_w2 = p;
    }
    if (!st) st = check_unknown_tensors(&lc, cfg.routed_format, err);
    char *prefix = st ? NULL : strdup(lc.prefix);
    if (!st) st = prefix ? keep(ck, prefix, err) : moe_fail(err, MOE_ERR_NOMEM, "checkpoint: out of memory");
    if (st) {
        memset(w, 0, sizeof *w);
        return st;
    }
    w->name_prefix = prefix;
    ck->info.format = cfg.routed_format;
    *cfg_out = cfg;
    return MOE_OK;
}

/* x [T, D] bf16 from the input file, copied out of the mapping. */
moe_status moe_read_input(const char *path, int D, int *T, uint16_t **x, moe_error *err) {
    moe_st_file f;
    moe_status st = moe_st_open(path, &f, err);
    if (st) return st;
    const moe_st_tensor *t = moe_st_find(&f, "x");
    char shape[96];
    if (!t)
        st = moe_fail(err, MOE_ERR_SHAPE, "missing tensor x in input file %s", path);
    else if (t->dtype != MOE_ST_BF16)
        st = moe_fail(err, MOE_ERR_DTYPE, "tensor x (input file %s): dtype %s, expected BF16", path,
                      moe_st_dtype_name(t->dtype));
    else if (t->ndim != 2 || t->shape[1] != D || t->shape[0] > INT_MAX / (D ? D : 1))
        st = moe_fail(err, MOE_ERR_SHAPE,
                      "tensor x (input file %s): shape %s, expected [T, %d] (hidden_size %d)", path,
                      moe_st_shape_str(t->ndim, t->shape, shape, sizeof shape), D, D);
    if (!st) {
        *T = (int)t->shape[0];
        *x = malloc(t->nbytes ? (size_t)t->nbytes : 1);
        if (!*x) st = moe_fail(err, MOE_ERR_NOMEM, "tensor x: out of memory");
        else st = moe_st_read(&f, t, *x, err);
        if (st) {
            free(*x);
            *x = NULL;
        }
    }
    moe_st_close(&f);
    return st;
}
