/*
 * fuzz_file.c: the checkpoint round trip of a case's layer (rules in fuzz_file.h).
 */
#include "fuzz_file.h"

#include "mutants.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

moe_checkpoint_write_opts fuzz_file_opts(const fuzz_case *c) {
    moe_rng rng = moe_rng_make(c->seed, 300);
    moe_checkpoint_write_opts o;
    o.layer = moe_rng_int(&rng, 2, 65);
    o.global_scale_bf16 = moe_rng_int(&rng, 0, 1);
    o.scales_3d = moe_rng_int(&rng, 0, 1);
    return o;
}

/* The loaded configuration must be the case's. */
static moe_status same_config(const moe_config *want, const moe_config *got, moe_error *err) {
    const int a[6] = {want->D, want->I, want->R, want->K, want->S, (int)want->routed_format};
    const int b[6] = {got->D, got->I, got->R, got->K, got->S, (int)got->routed_format};
    static const char *const name[6] = {"hidden_size", "intermediate_size", "n_routed_experts",
                                        "num_experts_per_tok", "n_shared_experts", "routed format"};
    for (int i = 0; i < 6; i++)
        if (a[i] != b[i])
            return moe_fail(err, MOE_ERR_FORMAT, "file round trip: %s loaded as %d, written as %d",
                            name[i], b[i], a[i]);
    if (want->route_scale != got->route_scale || want->has_gate_bias != got->has_gate_bias ||
        want->has_global_scale != got->has_global_scale)
        return moe_fail(err, MOE_ERR_FORMAT,
                        "file round trip: route_scale, use_gate_bias or use_global_scale changed");
    return MOE_OK;
}

void fuzz_file_prepare(fuzz_file *f, const fuzz_case *c, const moe_layer_data *ld) {
    memset(f, 0, sizeof *f);
    f->c = c;
    f->ld = ld;
}

/* Writes the layer into a fresh temporary directory and loads it back. */
static moe_status round_trip(fuzz_file *f, moe_error *err) {
    const char *tmp = getenv("TMPDIR");
    snprintf(f->dir, sizeof f->dir, "%s/inkling-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(f->dir)) return moe_fail(err, MOE_ERR_IO, "file round trip: cannot create %s", f->dir);
    f->active = true;
    const moe_checkpoint_write_opts o = fuzz_file_opts(f->c);
    f->layer = o.layer;
    moe_status st = moe_checkpoint_write_layer(f->dir, &f->c->cfg, &f->ld->w, &o, err);
    if (!st) st = moe_checkpoint_open(f->dir, &f->ck, err);
    f->opened = !st;
    moe_config got;
    if (!st) st = moe_checkpoint_layer(&f->ck, o.layer, NULL, &got, &f->loaded, err);
    if (!st) st = same_config(&f->c->cfg, &got, err);
    return st;
}

moe_status fuzz_file_weights(fuzz_file *f, const moe_backend *be, const moe_weights **w,
                             moe_error *err) {
    *w = &f->ld->w;
    if (!(f->c->features & FZ_FILE)) return MOE_OK;
    if (!f->active && !f->failed) f->failed = round_trip(f, &f->fail_err);
    if (f->failed) return moe_fail(err, f->failed, "%s", f->fail_err.msg);
    *w = &f->loaded;
    moe_loader_quirk quirk = moe_mutant_loader_quirk(be);
    if (!quirk) return MOE_OK;
    if (f->quirk_of != be) {
        f->quirked = f->loaded;
        quirk(&f->ck, f->layer, &f->quirked);
        f->quirk_of = be;
    }
    *w = &f->quirked;
    return MOE_OK;
}

void fuzz_file_close(fuzz_file *f) {
    if (f->opened) moe_checkpoint_close(&f->ck);
    if (f->active) {
        static const char *const files[2] = {"config.json", "model.safetensors"};
        char path[512];
        for (int i = 0; i < 2; i++) {
            snprintf(path, sizeof path, "%s/%s", f->dir, files[i]);
            unlink(path);
        }
        rmdir(f->dir);
    }
    memset(f, 0, sizeof *f);
}
