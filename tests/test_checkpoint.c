/*
 * test_checkpoint.c: the checkpoint loader (common/checkpoint.c).
 *
 * Rules checked: config.json at the top level or under text_config, both spellings of the
 * MoE width (moe_intermediate_size wins), each missing or mistyped field and K > R named;
 * the quantization_config exclude rules (module entries, the two expert weight names, ModelOpt's
 * exclude_modules, one weight name alone an error naming both); a written layer loads back byte for byte as a view
 * into memory the checkpoint owns (both scale layouts, F32 or BF16 global scale, bf16 experts) and a shard
 * cut from it equals one cut from the original arrays; every missing tensor, wrong shape and
 * wrong dtype is named; the flag/tensor agreement; NaN and overflowing scales are named by
 * the shard build; layer discovery; sharded checkpoints through the weight map.
 */
#include "test_support.h"

#include "../common/checkpoint.h"
#include "checkpoint_fixture.h"

#include <stdio.h>
#include <stdlib.h>

static const char *orig_config =
    "{\"hidden_size\": 64, \"intermediate_size\": 96, \"n_routed_experts\": 6,"
    " \"num_experts_per_tok\": 2, \"n_shared_experts\": 2, \"route_scale\": 2.5,"
    " \"use_gate_bias\": true, \"use_global_scale\": false}";

static moe_status parse(const char *text, moe_model_config *mc, moe_error *err) {
    return moe_model_config_parse(text, strlen(text), "config.json", mc, err);
}

static void test_config_original_spelling(void **state) {
    (void)state;
    moe_model_config mc;
    moe_error err = {0};
    assert_int_equal(parse(orig_config, &mc, &err), MOE_OK);
    assert_int_equal(mc.cfg.D, 64);
    assert_int_equal(mc.cfg.I, 96);
    assert_int_equal(mc.cfg.R, 6);
    assert_int_equal(mc.cfg.K, 2);
    assert_int_equal(mc.cfg.S, 2);
    assert_true(mc.cfg.route_scale == 2.5f);
    assert_int_equal(mc.gate_bias_flag, 1);
    assert_int_equal(mc.global_scale_flag, 0);
    assert_false(mc.has_quant_config);
    moe_model_config_free(&mc);
}

static void test_config_nested_and_hf_spelling(void **state) {
    (void)state;
    moe_model_config mc;
    moe_error err = {0};
    const char *nested =
        "{\"hidden_size\": 7, \"vision_config\": {\"hidden_size\": 48},"
        " \"quantization_config\": {\"exclude\": [\"lm_head\"]},"
        " \"text_config\": {\"hidden_size\": 128, \"intermediate_size\": 384,"
        " \"moe_intermediate_size\": 64, \"n_routed_experts\": 8, \"num_experts_per_tok\": 8,"
        " \"n_shared_experts\": 0, \"route_scale\": 8}}";
    assert_int_equal(parse(nested, &mc, &err), MOE_OK);
    assert_int_equal(mc.cfg.D, 128); /* text_config wins over the top level */
    assert_int_equal(mc.cfg.I, 64);  /* moe_intermediate_size wins over intermediate_size */
    assert_int_equal(mc.cfg.K, 8);
    assert_int_equal(mc.cfg.S, 0);
    assert_int_equal(mc.gate_bias_flag, -1);
    assert_int_equal(mc.global_scale_flag, -1);
    assert_true(mc.has_quant_config); /* the quantization config sits at the top level */
    assert_int_equal(mc.n_exclude, 1);
    assert_string_equal(mc.exclude[0], "lm_head");
    moe_model_config_free(&mc);
}

/* orig_config with one field's value replaced (or the field removed when value is NULL). */
static void edited(const char *field, const char *value, char *out, size_t len) {
    char key[64];
    snprintf(key, sizeof key, "\"%s\": ", field);
    const char *at = strstr(orig_config, key);
    assert_non_null(at);
    const char *end = at + strlen(key);
    while (*end && *end != ',' && *end != '}') end++;
    if (value)
        snprintf(out, len, "%.*s%s%s%s", (int)(at - orig_config), orig_config, key, value, end);
    else if (*end == ',')
        snprintf(out, len, "%.*s%s", (int)(at - orig_config), orig_config, end + 1);
    else /* last field: drop the comma before it */
        snprintf(out, len, "%.*s%s", (int)(at - orig_config - 2), orig_config, end);
}

static void expect_config_error(const char *text, const char *field) {
    moe_model_config mc;
    moe_error err = {0};
    moe_status st = parse(text, &mc, &err);
    if (st == MOE_OK || !strstr(err.msg, field))
        fail_msg("config %s: status %d, message '%s' does not name %s", text, st, err.msg, field);
}

static void test_config_missing_and_bad_fields(void **state) {
    (void)state;
    static const char *required[] = {"hidden_size", "intermediate_size", "n_routed_experts",
                                     "num_experts_per_tok", "n_shared_experts", "route_scale"};
    char text[1024];
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        edited(required[i], NULL, text, sizeof text);
        expect_config_error(text, required[i]);
        edited(required[i], "\"8\"", text, sizeof text);
        expect_config_error(text, required[i]);
    }
    edited("hidden_size", "64.5", text, sizeof text);
    expect_config_error(text, "hidden_size");
    edited("hidden_size", "0", text, sizeof text);
    expect_config_error(text, "hidden_size");
    edited("num_experts_per_tok", "7", text, sizeof text); /* K = 7 > R = 6 */
    expect_config_error(text, "num_experts_per_tok");
    edited("num_experts_per_tok", "0", text, sizeof text);
    expect_config_error(text, "num_experts_per_tok");
    edited("use_gate_bias", "\"yes\"", text, sizeof text);
    expect_config_error(text, "use_gate_bias");
    edited("route_scale", "1e300", text, sizeof text); /* not finite in fp32 */
    expect_config_error(text, "route_scale");
    edited("hidden_size", "64, \"text_config\": 3", text, sizeof text);
    expect_config_error(text, "text_config");
    edited("hidden_size", "64, \"quantization_config\": {\"exclude\": \"lm_head\"}", text, sizeof text);
    expect_config_error(text, "quantization_config.exclude");
    edited("hidden_size", "64, \"quantization_config\": {\"exclude\": [1]}", text, sizeof text);
    expect_config_error(text, "quantization_config.exclude[0]");
    expect_config_error("{\"hidden_size\": 64,", "not valid JSON");
    expect_config_error("[]", "not a JSON object");
}

static void test_exclude_rules(void **state) {
    (void)state;
    moe_model_config mc;
    moe_error err = {0};
    char text[1024];
    edited("hidden_size",
           "64, \"quantization_config\": {\"exclude\": [\"lm_head\", \"model.llm.layers.2.mlp.experts\","
           " \"*.layers.5.mlp.experts\", \"model.llm.layers.7\"]}",
           text, sizeof text);
    assert_int_equal(parse(text, &mc, &err), MOE_OK);
    assert_true(moe_model_config_excludes(&mc, "model.llm.layers.2.mlp.experts"));  /* exact */
    assert_true(moe_model_config_excludes(&mc, "model.llm.layers.5.mlp.experts"));  /* pattern */
    assert_true(moe_model_config_excludes(&mc, "model.llm.layers.7.mlp.experts"));  /* parent */
    assert_false(moe_model_config_excludes(&mc, "model.llm.layers.3.mlp.experts"));
    assert_false(moe_model_config_excludes(&mc, "model.llm.layers.20.mlp.experts")); /* not "2" */
    assert_false(moe_model_config_excludes(&mc, "model.llm.layers.70.mlp.experts")); /* not "7" */
    moe_model_config_free(&mc);
}

/* The MXFP4 release lists its first MoE layer's two expert weights by name; ModelOpt's
 * exclude_modules means what Quark's exclude means. */
static void test_exclude_weight_names(void **state) {
    (void)state;
    moe_model_config mc;
    moe_error err = {0};
    char text[1024];
    bool ex;
    edited("hidden_size",
           "64, \"quantization_config\": {\"exclude\": [\"model.llm.layers.2.mlp.experts.w13_weight\","
           " \"model.llm.layers.2.mlp.experts.w2_weight\", \"model.llm.layers.2.mlp.shared_experts.*\"]}",
           text, sizeof text);
    assert_int_equal(parse(text, &mc, &err), MOE_OK);
    assert_int_equal(moe_model_config_experts_excluded(&mc, "model.llm.layers.2.mlp.experts", &ex, &err), MOE_OK);
    assert_true(ex);
    assert_int_equal(moe_model_config_experts_excluded(&mc, "model.llm.layers.3.mlp.experts", &ex, &err), MOE_OK);
    assert_false(ex);
    /* exact names: layer 20 is not covered by layer 2's weight names */
    assert_int_equal(moe_model_config_experts_excluded(&mc, "model.llm.layers.20.mlp.experts", &ex, &err), MOE_OK);
    assert_false(ex);
    assert_false(moe_model_config_excludes(&mc, "model.llm.layers.2.mlp.experts")); /* not a module entry */
    moe_model_config_free(&mc);

    /* one of the two names alone: an error naming both, whichever is listed */
    static const char *const alone[2] = {"w13_weight", "w2_weight"};
    for (int i = 0; i < 2; i++) {
        char body[256];
        snprintf(body, sizeof body,
                 "64, \"quantization_config\": {\"exclude\": [\"model.llm.layers.2.mlp.experts.%s\"]}",
                 alone[i]);
        edited("hidden_size", body, text, sizeof text);
        assert_int_equal(parse(text, &mc, &err), MOE_OK);
        assert_int_equal(moe_model_config_experts_excluded(&mc, "model.llm.layers.2.mlp.experts", &ex, &err),
                         MOE_ERR_CONFIG);
        assert_non_null(strstr(err.msg, "model.llm.layers.2.mlp.experts.w13_weight"));
        assert_non_null(strstr(err.msg, "model.llm.layers.2.mlp.experts.w2_weight"));
        assert_non_null(strstr(err.msg, "quantization_config.exclude"));
        /* another layer is not affected by it */
        assert_int_equal(moe_model_config_experts_excluded(&mc, "model.llm.layers.3.mlp.experts", &ex, &err), MOE_OK);
        assert_false(ex);
        moe_model_config_free(&mc);
    }

    /* ModelOpt: exclude_modules, module entries and weight names alike; merged with exclude */
    edited("hidden_size",
           "64, \"quantization_config\": {\"quant_algo\": \"NVFP4\", \"exclude\": [\"lm_head\"],"
           " \"exclude_modules\": [\"model.llm.layers.4.mlp.experts\","
           " \"model.llm.layers.6.mlp.experts.w2_weight\", \"model.llm.layers.6.mlp.experts.w13_weight\"]}",
           text, sizeof text);
    assert_int_equal(parse(text, &mc, &err), MOE_OK);
    assert_int_equal(mc.n_exclude, 4);
    assert_string_equal(mc.exclude_field, "quantization_config.exclude / quantization_config.exclude_modules");
    assert_true(moe_model_config_excludes(&mc, "model.llm.layers.4.mlp.experts"));
    assert_int_equal(moe_model_config_experts_excluded(&mc, "model.llm.layers.6.mlp.experts", &ex, &err), MOE_OK);
    assert_true(ex);
    assert_int_equal(moe_model_config_experts_excluded(&mc, "model.llm.layers.5.mlp.experts", &ex, &err), MOE_OK);
    assert_false(ex);
    moe_model_config_free(&mc);
    edited("hidden_size", "64, \"quantization_config\": {\"exclude_modules\": {}}", text, sizeof text);
    expect_config_error(text, "quantization_config.exclude_modules");
    edited("hidden_size", "64, \"quantization_config\": {\"exclude\": [], \"exclude_modules\": [\"a\", 2]}",
           text, sizeof text);
    expect_config_error(text, "quantization_config.exclude_modules[1]");
}

/* ---------------------------------------------------------------- layers on disk */

static const moe_config mx_cfg = {.D = 64, .I = 64, .R = 6, .K = 2, .S = 2, .route_scale = 8.0f,
                                  .has_gate_bias = true, .has_global_scale = true,
                                  .routed_format = MOE_ROUTED_MXFP4};

typedef struct {
    char dir[512];
    char model[600];
    moe_layer_data ld;
} fixture;

static void make_fixture(fixture *fx, const moe_config *cfg, const fixture_opts *o) {
    assert_int_equal(fixture_tempdir(fx->dir, sizeof fx->dir, "ckpt"), 0);
    snprintf(fx->model, sizeof fx->model, "%s/model", fx->dir);
    moe_error err = {0};
    assert_int_equal(moe_layer_data_random(cfg, 11, &fx->ld, &err), MOE_OK);
    assert_int_equal(fixture_write_model(fx->model, &fx->ld, o), 0);
}

static void drop_fixture(fixture *fx) {
    moe_layer_data_free(&fx->ld);
    fixture_remove_tree(fx->dir);
}

/* Loads layer and expects failure naming every fragment. */
static void expect_load_error(const char *model, int layer, const char *frag1, const char *frag2) {
    moe_checkpoint ck;
    moe_error err = {0};
    moe_config cfg;
    moe_weights w;
    moe_status st = moe_checkpoint_open(model, &ck, &err);
    if (!st) st = moe_checkpoint_layer(&ck, layer, NULL, &cfg, &w, &err);
    if (st == MOE_OK || !strstr(err.msg, frag1) || (frag2 && !strstr(err.msg, frag2)))
        fail_msg("status %d, message '%s', wanted '%s' and '%s'", st, err.msg, frag1,
                 frag2 ? frag2 : "");
    moe_checkpoint_close(&ck);
}

/* Loads layer 3 in strict mode and expects failure naming tensor. */
static void expect_strict_error(const char *model, const char *tensor) {
    moe_checkpoint ck;
    moe_error err = {0};
    moe_config cfg;
    moe_weights w;
    assert_int_equal(moe_checkpoint_open(model, &ck, &err), MOE_OK);
    ck.strict = true;
    moe_status st = moe_checkpoint_layer(&ck, 3, NULL, &cfg, &w, &err);
    if (st == MOE_OK || !strstr(err.msg, tensor) || !strstr(err.msg, "strict"))
        fail_msg("status %d, message '%s', wanted '%s' in strict mode", st, err.msg, tensor);
    moe_checkpoint_close(&ck);
}

static bool inside(const moe_checkpoint *ck, const void *p) {
    for (int i = 0; i < ck->n_files; i++) {
        const uint8_t *m = ck->files[i].map;
        if ((const uint8_t *)p >= m && (const uint8_t *)p < m + ck->files[i].map_size) return true;
    }
    return false;
}

static void check_round_trip(const moe_config *c, const fixture_opts *o) {
    fixture fx;
    make_fixture(&fx, c, o);
    moe_checkpoint ck;
    moe_error err = {0};
    moe_config cfg;
    moe_weights w;
    int layer = -1;
    assert_int_equal(moe_checkpoint_open(fx.model, &ck, &err), MOE_OK);
    if (moe_checkpoint_layer(&ck, -1, &layer, &cfg, &w, &err)) fail_msg("%s", err.msg);
    assert_int_equal(layer, o->layer);
    assert_true(cfg.D == c->D && cfg.I == c->I && cfg.R == c->R && cfg.K == c->K && cfg.S == c->S);
    assert_true(cfg.route_scale == c->route_scale && cfg.routed_format == c->routed_format);
    assert_true(cfg.has_gate_bias == c->has_gate_bias && cfg.has_global_scale == c->has_global_scale);
    const size_t D = (size_t)c->D, I = (size_t)c->I, R = (size_t)c->R, S = (size_t)c->S;
    /* read with pread into memory the checkpoint owns, never used in place in a mapping (a
     * file truncated underneath is then an error, not SIGBUS) */
    assert_false(inside(&ck, w.gate_w));
    char prefix[64];
    snprintf(prefix, sizeof prefix, "model.llm.layers.%d.mlp.", o->layer);
    assert_string_equal(w.name_prefix, prefix);
    assert_memory_equal(w.gate_w, fx.ld.gate_w, (R + S) * D * 2);
    assert_memory_equal(w.gate_bias, fx.ld.gate_bias, R * 4);
    float gs = o->global_scale_bf16 ? moe_round_bf16(fx.ld.w.global_scale) : fx.ld.w.global_scale;
    assert_true(w.global_scale == gs);
    const size_t B = (size_t)moe_routed_format_get(c->routed_format)->block;
    if (B) {
        assert_memory_equal(w.w13_mx, fx.ld.w13_mx, R * 2 * I * D / 2);
        assert_memory_equal(w.w13_scale, fx.ld.w13_scale, R * 2 * I * D / B);
        assert_memory_equal(w.w2_mx, fx.ld.w2_mx, R * D * I / 2);
        assert_memory_equal(w.w2_scale, fx.ld.w2_scale, R * D * I / B);
        assert_null(w.w13_bf16);
        if (c->routed_format == MOE_ROUTED_NVFP4) {
            assert_memory_equal(w.w13_scale2, fx.ld.w13_scale2, R * 4);
            assert_memory_equal(w.w2_scale2, fx.ld.w2_scale2, R * 4);
            assert_true(ck.info.input_amax[0] == 3.5f && ck.info.input_amax[1] == 2.25f);
            assert_true(ck.info.original_shape[0] && ck.info.original_shape[1]);
        } else {
            assert_null(w.w13_scale2);
        }
    } else {
        assert_memory_equal(w.w13_bf16, fx.ld.w13_bf16, R * 2 * I * D * 2);
        assert_memory_equal(w.w2_bf16, fx.ld.w2_bf16, R * D * I * 2);
        assert_null(w.w13_mx);
    }
    assert_memory_equal(w.sink_w13, fx.ld.sink_w13, S * 2 * I * D * 2);
    assert_memory_equal(w.sink_w2, fx.ld.sink_w2, S * D * I * 2);

    /* The shard a TP-2 rank cuts from the view is the one cut from the original arrays. */
    moe_split split = {MOE_SPLIT_TP, 2, 1, 0};
    moe_shard a, b;
    assert_int_equal(moe_shard_build(&cfg, &w, &split, &a, &err), MOE_OK);
    moe_weights orig = fx.ld.w;
    orig.global_scale = gs;
    assert_int_equal(moe_shard_build(c, &orig, &split, &b, &err), MOE_OK);
    const size_t IL = (size_t)a.I_local;
    if (B) {
        assert_memory_equal(a.w13_mx, b.w13_mx, R * 2 * IL * D / 2);
        assert_memory_equal(a.w2_scale, b.w2_scale, R * D * IL / B);
    } else {
        assert_memory_equal(a.w2_bf16, b.w2_bf16, R * D * IL * 2);
    }
    assert_memory_equal(a.sink_w13, b.sink_w13, S * 2 * IL * D * 2);
    moe_shard_free(&a);
    moe_shard_free(&b);
    moe_checkpoint_close(&ck);
    drop_fixture(&fx);
}

static void test_layer_round_trip(void **state) {
    (void)state;
    check_round_trip(&mx_cfg, &(fixture_opts){.layer = 3});
    check_round_trip(&mx_cfg, &(fixture_opts){.layer = 4, .scales_3d = true});
    check_round_trip(&mx_cfg, &(fixture_opts){.layer = 12, .global_scale_bf16 = true});
    moe_config bf = mx_cfg;
    bf.routed_format = MOE_ROUTED_BF16;
    bf.D = 48; /* bf16 experts need no block alignment */
    bf.I = 40;
    check_round_trip(&bf, &(fixture_opts){.layer = 2});
    moe_config nv = mx_cfg;
    nv.routed_format = MOE_ROUTED_NVFP4;
    nv.D = 48; /* NVFP4 needs multiples of 16 only */
    nv.I = 96; /* TP 2: 48 per rank, a multiple of 16 but not of 32 */
    check_round_trip(&nv, &(fixture_opts){.layer = 5});
    check_round_trip(&nv, &(fixture_opts){.layer = 6, .scales_3d = true});
}

static void check_each_missing_wrong_shape_wrong_dtype(const moe_config *cfg) {
    const char *suffixes[24];
    int n = fixture_suffixes(cfg, suffixes);
    for (int i = 0; i < n; i++) {
        char full[160];
        snprintf(full, sizeof full, "model.llm.layers.3.mlp.%s", suffixes[i]);
        fixture fx;
        make_fixture(&fx, cfg, &(fixture_opts){.layer = 3, .omit = suffixes[i]});
        /* gate.weight missing leaves no MoE layer to discover: name layer 3 explicitly */
        expect_load_error(fx.model, 3, full, "missing tensor");
        drop_fixture(&fx);
        make_fixture(&fx, cfg, &(fixture_opts){.layer = 3, .bad_shape = suffixes[i]});
        expect_load_error(fx.model, 3, full, "shape");
        drop_fixture(&fx);
        make_fixture(&fx, cfg, &(fixture_opts){.layer = 3, .bad_dtype = suffixes[i]});
        expect_load_error(fx.model, 3, full, "dtype");
        drop_fixture(&fx);
    }
}

static const moe_config nv_cfg = {.D = 64, .I = 64, .R = 6, .K = 2, .S = 2, .route_scale = 8.0f,
                                  .has_gate_bias = true, .has_global_scale = true,
                                  .routed_format = MOE_ROUTED_NVFP4};

/* Loads layer 3 of model, expecting success; ck stays open for the caller. */
static void load_ok(const char *model, bool strict, moe_checkpoint *ck) {
    moe_error err = {0};
    moe_config cfg;
    moe_weights w;
    assert_int_equal(moe_checkpoint_open(model, ck, &err), MOE_OK);
    ck->strict = strict;
    if (moe_checkpoint_layer(ck, 3, NULL, &cfg, &w, &err)) fail_msg("%s", err.msg);
}

/* NVFP4: input_amax and original_shape validated; the config's quant_algo / group_size and
 * hf_quant_config.json cross-checked with the tensors. */
static void test_nvfp4_sidecars_and_config(void **state) {
    (void)state;
    const float bad_amax[3] = {-1.0f, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        fixture fx;
        make_fixture(&fx, &nv_cfg, &(fixture_opts){.layer = 3, .amax13 = bad_amax[i]});
        expect_load_error(fx.model, 3, "model.llm.layers.3.mlp.experts.w13_weight.input_amax",
                          "expected finite and > 0");
        drop_fixture(&fx);
    }
    fixture fx;
    make_fixture(&fx, &nv_cfg, &(fixture_opts){.layer = 3, .bad_original_shape = true});
    expect_load_error(fx.model, 3, "model.llm.layers.3.mlp.experts.w13_weight.original_shape",
                      "element 2 is 80, expected 64");
    drop_fixture(&fx);

    char text[2048], path[700];
    /* NVFP4 tensors under Quark's MXFP4 config, MXFP4 tensors under an NVFP4 config */
    fixture_config_text(&mx_cfg, 3, text, sizeof text);
    make_fixture(&fx, &nv_cfg, &(fixture_opts){.layer = 3, .config_json = text});
    expect_load_error(fx.model, 3, "stored as NVFP4", "quant_method");
    drop_fixture(&fx);
    fixture_config_text(&nv_cfg, 3, text, sizeof text);
    make_fixture(&fx, &mx_cfg, &(fixture_opts){.layer = 3, .config_json = text});
    expect_load_error(fx.model, 3, "stored as MXFP4", "quantization_config.quant_algo says NVFP4");
    drop_fixture(&fx);
    /* group_size must be the format's block */
    fixture_config_text(&nv_cfg, 3, text, sizeof text);
    char *g = strstr(text, "\"group_size\": 16");
    assert_non_null(g);
    memcpy(g, "\"group_size\": 32", 16);
    make_fixture(&fx, &nv_cfg, &(fixture_opts){.layer = 3, .config_json = text});
    expect_load_error(fx.model, 3, "group_size: 32", "NVFP4");
    drop_fixture(&fx);

    /* ModelOpt's second form: no quantization_config, hf_quant_config.json beside config.json */
    fixture_config_text(&nv_cfg, 3, text, sizeof text);
    *strstr(text, ",\n \"quantization_config\"") = '\0';
    strcat(text, "}\n");
    make_fixture(&fx, &nv_cfg, &(fixture_opts){.layer = 3, .config_json = text});
    snprintf(path, sizeof path, "%s/hf_quant_config.json", fx.model);
    assert_int_equal(fixture_write_text(path, "{\"producer\": {\"name\": \"modelopt\", \"version\": \"0.29\"},"
                                              " \"quantization\": {\"quant_algo\": \"NVFP4\", \"group_size\": 16,"
                                              " \"exclude_modules\": [\"lm_head\", \"model.llm.layers.*.mlp.shared_experts*\"]}}"),
                     0);
    moe_checkpoint ck;
    load_ok(fx.model, false, &ck);
    assert_true(ck.config.has_quant_config && ck.config.group_size == 16);
    assert_string_equal(ck.config.quant_algo_field, "quantization.quant_algo");
    assert_int_equal(ck.info.format, MOE_ROUTED_NVFP4);
    moe_checkpoint_close(&ck);
    assert_int_equal(fixture_write_text(path, "{\"quantization\": {\"quant_algo\": \"MXFP4\"}}"), 0);
    expect_load_error(fx.model, 3, "quantization.quant_algo", "MXFP4");
    assert_int_equal(fixture_write_text(path, "{\"quantization\": [1]}"), 0);
    expect_load_error(fx.model, 3, "hf_quant_config.json", "quantization: not an object");
    drop_fixture(&fx);
}

/* MXFP4 layers load with .input_amax / .original_shape sidecars; a tensor the loader does not
 * know under the layer is reported by name, and strict mode refuses it. */
static void test_sidecars_and_unknown_tensors(void **state) {
    (void)state;
    fixture fx;
    moe_checkpoint ck;
    make_fixture(&fx, &mx_cfg, &(fixture_opts){.layer = 3, .sidecars = true});
    load_ok(fx.model, true, &ck);
    assert_true(ck.info.input_amax[0] == 3.5f && ck.info.original_shape[1]);
    assert_int_equal(ck.info.n_ignored, 0);
    moe_checkpoint_close(&ck);
    drop_fixture(&fx);
    make_fixture(&fx, &mx_cfg, &(fixture_opts){.layer = 3, .sidecars = true, .amax13 = -2.0f});
    expect_load_error(fx.model, 3, "experts.w13_weight.input_amax", "-2");
    drop_fixture(&fx);
    const char *extras[3] = {"experts.w13_weight.bias", "gate.e_score_correction_bias", "experts.w2_weight.scale2"};
    for (int i = 0; i < 3; i++) {
        char full[160];
        snprintf(full, sizeof full, "model.llm.layers.3.mlp.%s", extras[i]);
        make_fixture(&fx, &mx_cfg, &(fixture_opts){.layer = 3, .extra = extras[i]});
        load_ok(fx.model, false, &ck);
        assert_int_equal(ck.info.n_ignored, 1);
        assert_string_equal(ck.info.ignored[0], full);
        moe_checkpoint_close(&ck);
        expect_strict_error(fx.model, full);
        drop_fixture(&fx);
    }
}

static void test_each_missing_wrong_shape_wrong_dtype(void **state) {
    (void)state;
    check_each_missing_wrong_shape_wrong_dtype(&mx_cfg);
    moe_config nv = mx_cfg;
    nv.routed_format = MOE_ROUTED_NVFP4;
    check_each_missing_wrong_shape_wrong_dtype(&nv);
}

static void test_config_disagrees_with_tensors(void **state) {
    (void)state;
    fixture fx;
    char text[2048];
    /* hidden_size 96 against tensors written for 64 */
    moe_config c = mx_cfg;
    c.D = 96;
    fixture_config_text(&c, 3, text, sizeof text);
    make_fixture(&fx, &mx_cfg, &(fixture_opts){.layer = 3, .config_json = text});
    expect_load_error(fx.model, -1, "model.llm.layers.3.mlp.gate.weight", "hidden_size=96");
    drop_fixture(&fx);
    /* K > R in the config */
    c = mx_cfg;
    c.K = 7;
    fixture_config_text(&c, 3, text, sizeof text);
    make_fixture(&fx, &mx_cfg, &(fixture_opts){.layer = 3, .config_json = text});
    expect_load_error(fx.model, -1, "num_experts_per_tok", NULL);
    drop_fixture(&fx);
    /* use_gate_bias false with the bias present */
    c = mx_cfg;
    c.has_gate_bias = false;
    fixture_config_text(&c, 3, text, sizeof text);
    make_fixture(&fx, &mx_cfg, &(fixture_opts){.layer = 3, .config_json = text});
    expect_load_error(fx.model, -1, "model.llm.layers.3.mlp.gate.bias", "use_gate_bias");
    drop_fixture(&fx);
    /* flags absent: they follow the tensors (bias present, global scale absent) */
    const char *no_flags = "{\"hidden_size\": 64, \"intermediate_size\": 64, \"n_routed_experts\": 6,"
                           " \"num_experts_per_tok\": 2, \"n_shared_experts\": 2, \"route_scale\": 8}";
    make_fixture(&fx, &mx_cfg, &(fixture_opts){.layer = 3, .config_json = no_flags,
                                                .omit = "gate.global_scale"});
    moe_checkpoint ck;
    moe_error err = {0};
    moe_config got;
    moe_weights w;
    assert_int_equal(moe_checkpoint_open(fx.model, &ck, &err), MOE_OK);
    assert_int_equal(moe_checkpoint_layer(&ck, 3, NULL, &got, &w, &err), MOE_OK);
    assert_true(got.has_gate_bias);
    assert_false(got.has_global_scale);
    assert_true(w.global_scale == 1.0f);
    moe_checkpoint_close(&ck);
    drop_fixture(&fx);
}

/* The weight-name forms on disk: bf16 layer 2 listed by its two weight names (Quark) or its
 * module (ModelOpt) loads; one name alone fails naming both; MXFP4 layer 3 listed by name fails. */
static void check_weight_name_forms(const moe_config *bf) {
    static const char *const head =
        "{\"hidden_size\": 64, \"intermediate_size\": 64, \"n_routed_experts\": 6,"
        " \"num_experts_per_tok\": 2, \"n_shared_experts\": 2, \"route_scale\": 8,"
        " \"quantization_config\": ";
    static const char *const forms[4] = {
        "{\"exclude\": [\"model.llm.layers.L.mlp.experts.w13_weight\", \"model.llm.layers.L.mlp.experts.w2_weight\","
        " \"model.llm.layers.L.mlp.shared_experts.*\"]}}",
        "{\"exclude_modules\": [\"lm_head\", \"model.llm.layers.L.mlp.experts\"]}}",
        "{\"exclude\": [\"model.llm.layers.L.mlp.experts.w2_weight\"]}}",
        "{\"exclude_modules\": [\"model.llm.layers.L.mlp.experts.w13_weight\", \"model.llm.layers.L.mlp.experts.w2_weight\"]}}",
    };
    for (int i = 0; i < 4; i++) {
        char text[1024], body[512];
        snprintf(body, sizeof body, "%s", forms[i]);
        for (char *p = body; (p = strstr(p, "layers.L.")); p += 7) p[7] = i == 3 ? '3' : '2';
        snprintf(text, sizeof text, "%s%s", head, body);
        fixture fx;
        make_fixture(&fx, i == 3 ? &mx_cfg : bf, &(fixture_opts){.layer = i == 3 ? 3 : 2, .config_json = text});
        if (i < 2) {
            moe_checkpoint ck;
            moe_error err = {0};
            moe_config got;
            moe_weights w;
            assert_int_equal(moe_checkpoint_open(fx.model, &ck, &err), MOE_OK);
            if (moe_checkpoint_layer(&ck, 2, NULL, &got, &w, &err)) fail_msg("form %d: %s", i, err.msg);
            assert_int_equal(got.routed_format, MOE_ROUTED_BF16);
            assert_memory_equal(w.w13_bf16, fx.ld.w13_bf16, (size_t)6 * 128 * 64 * 2);
            moe_checkpoint_close(&ck);
        } else if (i == 2) {
            expect_load_error(fx.model, 2, "lists model.llm.layers.2.mlp.experts.w2_weight but not "
                              "model.llm.layers.2.mlp.experts.w13_weight", "quantization_config.exclude");
        } else {
            expect_load_error(fx.model, 3, "stored as MXFP4", "quantization_config.exclude_modules");
        }
        drop_fixture(&fx);
    }
}

static void test_quantization_cross_check(void **state) {
    (void)state;
    fixture fx;
    char text[2048];
    moe_config bf = mx_cfg;
    bf.routed_format = MOE_ROUTED_BF16;
    /* MXFP4 experts that the config excludes from quantization */
    fixture_config_text(&bf, 3, text, sizeof text);
    make_fixture(&fx, &mx_cfg, &(fixture_opts){.layer = 3, .config_json = text});
    expect_load_error(fx.model, -1, "model.llm.layers.3.mlp.experts.w13_weight",
                      "quantization_config.exclude");
    drop_fixture(&fx);
    /* bf16 experts that the config does not exclude */
    fixture_config_text(&mx_cfg, 2, text, sizeof text);
    make_fixture(&fx, &bf, &(fixture_opts){.layer = 2, .config_json = text});
    expect_load_error(fx.model, -1, "model.llm.layers.2.mlp.experts.w13_weight", "MXFP4 was expected");
    drop_fixture(&fx);
    check_weight_name_forms(&bf);
}

/* Loads and cuts rank 0 of an unsplit layer; expects the shard build to fail naming frag. */
static void expect_shard_error(const fixture *fx, const char *frag1, const char *frag2) {
    moe_checkpoint ck;
    moe_error err = {0};
    moe_config cfg;
    moe_weights w;
    assert_int_equal(moe_checkpoint_open(fx->model, &ck, &err), MOE_OK);
    assert_int_equal(moe_checkpoint_layer(&ck, -1, NULL, &cfg, &w, &err), MOE_OK);
    moe_split split = {MOE_SPLIT_NONE, 1, 0, 0};
    moe_shard sh;
    assert_int_equal(moe_shard_build(&cfg, &w, &split, &sh, &err), MOE_ERR_VALUE);
    assert_msg_has(err, frag1);
    assert_msg_has(err, frag2);
    moe_checkpoint_close(&ck);
}

static void test_bad_scales(void **state) {
    (void)state;
    fixture fx;
    moe_error err = {0};
    /* NaN byte in w13 scale of expert 1, row 3, block 1 (D/32 = 2 blocks a row) */
    assert_int_equal(fixture_tempdir(fx.dir, sizeof fx.dir, "ckpt"), 0);
    snprintf(fx.model, sizeof fx.model, "%s/model", fx.dir);
    assert_int_equal(moe_layer_data_random(&mx_cfg, 5, &fx.ld, &err), MOE_OK);
    fx.ld.w13_scale[(1 * 2 * 64 + 3) * 2 + 1] = 0xFF;
    assert_int_equal(fixture_write_model(fx.model, &fx.ld, &(fixture_opts){.layer = 3}), 0);
    expect_shard_error(&fx, "experts.w13_weight_scale", "[expert 1, row 3, block 1]");
    drop_fixture(&fx);
    /* E8M0 0xFE (2^127) over a code of magnitude 6 overflows fp32: w2 expert 4, row 5, block 0 */
    assert_int_equal(fixture_tempdir(fx.dir, sizeof fx.dir, "ckpt"), 0);
    snprintf(fx.model, sizeof fx.model, "%s/model", fx.dir);
    assert_int_equal(moe_layer_data_random(&mx_cfg, 5, &fx.ld, &err), MOE_OK);
    fx.ld.w2_scale[(4 * 64 + 5) * 2 + 0] = 0xFE;
    fx.ld.w2_mx[(4 * 64 + 5) * 32 + 0] = 0x07; /* code 7: 6.0 */
    assert_int_equal(fixture_write_model(fx.model, &fx.ld, &(fixture_opts){.layer = 3}), 0);
    expect_shard_error(&fx, "experts.w2_weight_scale", "overflow");
    drop_fixture(&fx);
}

static void test_layer_discovery(void **state) {
    (void)state;
    fixture fx;
    make_fixture(&fx, &mx_cfg, &(fixture_opts){.layer = 9});
    moe_checkpoint ck;
    moe_error err = {0};
    assert_int_equal(moe_checkpoint_open(fx.model, &ck, &err), MOE_OK);
    int layers[4], n;
    moe_checkpoint_moe_layers(&ck, layers, 4, &n);
    assert_int_equal(n, 1);
    assert_int_equal(layers[0], 9);
    moe_checkpoint_close(&ck);
    expect_load_error(fx.model, 8, "model.llm.layers.8.mlp.gate.weight", "not a MoE layer");
    drop_fixture(&fx);
    expect_load_error("/nonexistent-model-dir", -1, "nonexistent-model-dir", NULL);
}

/* Two shards and a weight map: gate.weight lives in the second file. */
static void test_sharded_weight_map(void **state) {
    (void)state;
    fixture fx;
    make_fixture(&fx, &mx_cfg, &(fixture_opts){.layer = 3, .omit = "gate.weight"});
    char path[800], other[800];
    snprintf(path, sizeof path, "%s/model.safetensors", fx.model);
    snprintf(other, sizeof other, "%s/part-1.safetensors", fx.model);
    assert_int_equal(rename(path, other), 0);
    const int64_t G = mx_cfg.R + mx_cfg.S;
    moe_st_entry gate = {"model.llm.layers.3.mlp.gate.weight", MOE_ST_BF16, 2, {G, mx_cfg.D}, fx.ld.gate_w};
    snprintf(path, sizeof path, "%s/part-2.safetensors", fx.model);
    assert_int_equal(moe_st_write(path, &gate, 1, NULL), MOE_OK);
    const char *suffixes[16];
    int n = fixture_suffixes(&mx_cfg, suffixes);
    char index[4096];
    size_t used = (size_t)snprintf(index, sizeof index, "{\"metadata\": {}, \"weight_map\": {");
    for (int i = 0; i < n; i++)
        used += (size_t)snprintf(index + used, sizeof index - used,
                                 "%s\"model.llm.layers.3.mlp.%s\": \"part-%d.safetensors\"",
                                 i ? ", " : "", suffixes[i], i == 0 ? 2 : 1);
    snprintf(index + used, sizeof index - used, "}}");
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", fx.model);
    assert_int_equal(fixture_write_text(path, index), 0);

    moe_checkpoint ck;
    moe_error err = {0};
    moe_config cfg;
    moe_weights w;
    assert_int_equal(moe_checkpoint_open(fx.model, &ck, &err), MOE_OK);
    if (moe_checkpoint_layer(&ck, -1, NULL, &cfg, &w, &err)) fail_msg("%s", err.msg);
    assert_int_equal(ck.n_files, 2);
    assert_memory_equal(w.gate_w, fx.ld.gate_w, (size_t)G * 64 * 2);
    assert_memory_equal(w.w2_mx, fx.ld.w2_mx, 6 * 64 * 32);
    moe_checkpoint_close(&ck);

    /* The map points gate.weight at a file that does not hold it, then at one that is absent. */
    char *at = strstr(index, "part-2");
    at[5] = '1';
    assert_int_equal(fixture_write_text(path, index), 0);
    expect_load_error(fx.model, -1, "model.llm.layers.3.mlp.gate.weight", "part-1.safetensors");
    at[5] = '7';
    assert_int_equal(fixture_write_text(path, index), 0);
    expect_load_error(fx.model, -1, "part-7.safetensors", NULL);
    drop_fixture(&fx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_original_spelling),
        cmocka_unit_test(test_config_nested_and_hf_spelling),
        cmocka_unit_test(test_config_missing_and_bad_fields),
        cmocka_unit_test(test_exclude_rules),
        cmocka_unit_test(test_exclude_weight_names),
        cmocka_unit_test(test_layer_round_trip),
        cmocka_unit_test(test_each_missing_wrong_shape_wrong_dtype),
        cmocka_unit_test(test_nvfp4_sidecars_and_config),
        cmocka_unit_test(test_sidecars_and_unknown_tensors),
        cmocka_unit_test(test_config_disagrees_with_tensors),
        cmocka_unit_test(test_quantization_cross_check),
        cmocka_unit_test(test_bad_scales),
        cmocka_unit_test(test_layer_discovery),
        cmocka_unit_test(test_sharded_weight_map),
    };
    return cmocka_run_group_tests_name("checkpoint", tests, NULL, NULL);
}
