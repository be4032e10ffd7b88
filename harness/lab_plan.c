/* lab_plan.c: what the lab runs: the registry's CUDA variants, the named real shapes as case
 * lines, token lists, the plan's layer and shard (rules in lab.h). */
#include "lab.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A variant the stage timer can drive: its state is the CUDA backend's, so it shares that
 * backend's forward entry (the stub build has none: no variant). */
static bool is_cuda_variant(const moe_backend *b) {
    return b && b->forward && b->forward == moe_backend_cuda.forward;
}

int lab_cuda_variants(const moe_backend **out, int cap) {
    int n = 0;
    for (int i = 0; i < moe_backend_count(); i++) {
        const moe_backend *b = moe_backend_at(i);
        if (!is_cuda_variant(b)) continue;
        if (n < cap) out[n] = b;
        n++;
    }
    return n;
}

moe_status lab_shape_case(const char *name, uint64_t seed, moe_routed_format fmt, fuzz_case *c,
                          moe_error *err) {
    static const struct {
        const char *name;
        int D, I, R, K;
    } shapes[] = {{"inkling-small", 4096, 2048, 256, 6}, {"inkling", 6144, 3072, 256, 6},
                  {"small", 256, 128, 16, 4}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (strcmp(name, shapes[i].name) != 0) continue;
        memset(c, 0, sizeof *c);
        moe_config cfg = {shapes[i].D, shapes[i].I, shapes[i].R, shapes[i].K, 2, 8.0f, true, true, fmt};
        c->cfg = cfg;
        c->T = 1;
        c->split = MOE_SPLIT_NONE;
        c->n = 1;
        c->seed = seed;
        return fuzz_case_validate(c, err);
    }
    return moe_fail(err, MOE_ERR_ARG, "unknown shape '%s' (inkling-small, inkling or small)", name);
}

moe_status lab_parse_tokens(const char *list, int *out, int cap, int *n, moe_error *err) {
    *n = 0;
    const char *p = list;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || *p == '-' || *p == '+' || errno || v < 1 || v > 1000000 || (*end && *end != ','))
            return moe_fail(err, MOE_ERR_ARG, "'%s': a token count must be an integer in [1, 1000000]", list);
        if (*n == cap) return moe_fail(err, MOE_ERR_ARG, "'%s': more than %d token counts", list, cap);
        out[(*n)++] = (int)v;
        p = *end ? end + 1 : end;
        if (*end && !*p) return moe_fail(err, MOE_ERR_ARG, "'%s': ends with a comma", list);
    }
    if (*n == 0) return moe_fail(err, MOE_ERR_ARG, "an empty token list");
    return MOE_OK;
}

moe_status lab_parse_variants(const char *list, lab_plan *p, moe_error *err) {
    p->n_variants = 0;
    if (strcmp(list, "all") == 0) {
        int n = lab_cuda_variants(p->variants, LAB_MAX_VARIANTS);
        if (n > LAB_MAX_VARIANTS)
            return moe_fail(err, MOE_ERR_ARG, "the registry lists %d CUDA variants; the lab takes %d",
                            n, LAB_MAX_VARIANTS);
        p->n_variants = n; /* 0 in a build without CUDA: the run says SKIPPED */
        return MOE_OK;
    }
    char buf[512];
    if (strlen(list) >= sizeof buf) return moe_fail(err, MOE_ERR_ARG, "variant list too long");
    strcpy(buf, list);
    char *save = NULL;
    for (char *name = strtok_r(buf, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        const moe_backend *b = moe_backend_find(name);
        if (!b) return moe_fail(err, MOE_ERR_ARG, "%s is not a path of this build", name);
        /* a stub build knows the CUDA names but cannot run them: the run says SKIPPED */
        if (!is_cuda_variant(b) && b->forward)
            return moe_fail(err, MOE_ERR_ARG, "%s is not a CUDA variant (the lab times those only)", name);
        for (int v = 0; v < p->n_variants; v++)
            if (p->variants[v] == b) return moe_fail(err, MOE_ERR_ARG, "%s given twice", name);
        if (p->n_variants == LAB_MAX_VARIANTS)
            return moe_fail(err, MOE_ERR_ARG, "more than %d variants", LAB_MAX_VARIANTS);
        p->variants[p->n_variants++] = b;
    }
    if (p->n_variants == 0) return moe_fail(err, MOE_ERR_ARG, "an empty variant list");
    return MOE_OK;
}

moe_status lab_check_case(const fuzz_case *c, moe_error *err) {
    if (c->split != MOE_SPLIT_NONE)
        return moe_fail(err, MOE_ERR_ARG, "the lab runs the unsplit layer (the case says split)");
    for (int i = 0; i < FZ_FEATURE_COUNT; i++) {
        const unsigned f = c->features & (1u << i);
        if (f & FZ_INPUT_FEATURES)
            return moe_fail(err, MOE_ERR_ARG, "feature %s changes the input; the lab runs one layer "
                            "at many T and inputs, so it takes layer features only", fuzz_feature_name(i));
        if (f & FZ_FILE)
            return moe_fail(err, MOE_ERR_ARG, "feature file: the lab runs the layer as generated, "
                            "not through a checkpoint file");
    }
    return MOE_OK;
}

int lab_sample_count(const fuzz_case *c, int T) {
    if (c->sample > 0 && c->sample < T) return c->sample;
    return T <= 4 ? T : T <= 64 ? 4 : 8;
}

moe_status lab_layer_build(const lab_plan *p, const char *note, FILE *out, moe_layer_data *ld,
                           moe_shard *sh, moe_error *err) {
    fuzz_case lc = p->layer;
    lc.T = 0, lc.sample = 0; /* the layer alone: the inputs come per T */
    char line[512];
    fprintf(out, "layer %s: %s (%s)\n", p->shape, fuzz_case_format(&lc, line, sizeof line), note);
    uint16_t *x0 = NULL;
    moe_status st = fuzz_case_build(&lc, ld, &x0, err);
    free(x0);
    if (st) return st;
    const moe_split none = {MOE_SPLIT_NONE, 1, 0, 0};
    st = moe_shard_build(&lc.cfg, &ld->w, &none, sh, err);
    if (st) moe_layer_data_free(ld);
    return st;
}
