/*
 * golden_cases.h: the golden cases under golden/cases, as the tests find them (header-only,
 * for tests). A case directory holds model/, input.safetensors, case.json and the expected
 * outputs (golden/README.md); tests run from the repository root.
 */
#ifndef INKLING_GOLDEN_CASES_H
#define INKLING_GOLDEN_CASES_H

#include "../common/moe.h"

#include <cJSON.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CASES_DIR "golden/cases"

typedef struct {
    char name[256];
    int layer, n, pad, T;
    moe_split_kind kind;
} golden_case;

static inline bool is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* Sorted case names: names [max][256]; returns the count. */
static inline int list_cases(char (*names)[256], int max) {
    DIR *d = opendir(CASES_DIR);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        char path[600];
        snprintf(path, sizeof path, CASES_DIR "/%s", e->d_name);
        if (e->d_name[0] == '.' || !is_dir(path) || n >= max) continue;
        snprintf(names[n++], 256, "%s", e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, 256, (int (*)(const void *, const void *))strcmp);
    return n;
}

static inline bool read_case(const char *name, golden_case *gc, char *why, size_t why_len) {
    char path[600], text[8192];
    snprintf(path, sizeof path, CASES_DIR "/%.255s/case.json", name);
    FILE *f = fopen(path, "rb");
    if (!f) return snprintf(why, why_len, "%s: cannot open", path), false;
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = '\0';
    cJSON *root = cJSON_Parse(text);
    const cJSON *layer = cJSON_GetObjectItem(root, "layer"), *split = cJSON_GetObjectItem(root, "split");
    const cJSON *kind = cJSON_GetObjectItem(split, "kind"), *n = cJSON_GetObjectItem(split, "n");
    const cJSON *pad = cJSON_GetObjectItem(root, "pad_intermediate_to"), *T = cJSON_GetObjectItem(root, "T");
    bool ok = cJSON_IsNumber(layer) && cJSON_IsString(kind) && cJSON_IsNumber(n) && cJSON_IsNumber(T);
    if (ok) {
        snprintf(gc->name, sizeof gc->name, "%.255s", name);
        gc->layer = layer->valueint;
        gc->n = n->valueint;
        gc->pad = cJSON_IsNumber(pad) ? pad->valueint : 0;
        gc->T = T->valueint;
        gc->kind = !strcmp(kind->valuestring, "tp") ? MOE_SPLIT_TP
                   : !strcmp(kind->valuestring, "ep") ? MOE_SPLIT_EP
                                                      : MOE_SPLIT_NONE;
        ok = gc->kind != MOE_SPLIT_NONE || !strcmp(kind->valuestring, "none");
    }
    if (!ok) snprintf(why, why_len, "%s: fields layer, split.kind, split.n or T missing", path);
    cJSON_Delete(root);
    return ok;
}

#endif
