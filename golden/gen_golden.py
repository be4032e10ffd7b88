#!/usr/bin/env python3
"""Generate the golden test cases of the Inkling MoE layer.

    python3 golden/gen_golden.py --out golden/cases      # regenerate everything
    python3 golden/gen_golden.py --check golden/cases    # regenerate to a temp dir, compare

The output is byte-identical on every run: fixed per-case seeds
(numpy.random.default_rng), sorted JSON keys, no timestamps.
MANIFEST.json (sha256 of every file) is written next to the cases directory.
"""

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import inkling_np as ink  # noqa: E402
import safetensors_np as st  # noqa: E402

GENERATOR_VERSION = "1"
BF16 = ink.BF16
DEFAULT_EXCLUDE = ["lm_head", "model.llm.layers.2.mlp.experts"]


# ---------------------------------------------------------------------------
# helpers

def bf16(a):
    return ink.to_bf16(a)


def json_bytes(obj):
    return (json.dumps(obj, sort_keys=True, indent=2, separators=(",", ": ")) + "\n").encode("utf-8")


def write_bytes(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def mx_base_scale(n):
    """E8M0 byte that makes random E2M1 codes (rms about 2.93) have an rms of
    about 1/sqrt(n)."""
    return int(round(127 - np.log2(2.93 * np.sqrt(n))))


# ---------------------------------------------------------------------------
# case parameters

DEFAULTS = dict(
    D=64, I=64, R=8, K=2, S=2, T=8, layer=3,
    experts="mxfp4",            # "mxfp4" | "bf16" | "nvfp4"
    quant_file="config",        # NVFP4: "config" (quantization_config) | "hf" (hf_quant_config.json)
    sidecars=False,             # MXFP4: also write .input_amax / .original_shape
    scales="flat",              # "flat" | "3d"
    use_gate_bias=True, use_global_scale=True,
    global_scale=0.6, global_scale_dtype="F32",
    route_scale=8.0,
    split=("none", 1), pad=0,
    config_style="orig",        # "orig" | "hf"
    nested=False,
    quant_config=True,          # quantization_config with DEFAULT_EXCLUDE (+ bf16 layers)
    extra_exclude=(),
    exclude_form="module",      # how bf16 layers are excluded: see EXCLUDE_FORMS
    sharded=False,
    extra_layers=(),            # further MoE layers stored in the same checkpoint
    hook=None,
    features=(),
    num_hidden_layers=None,
)


def case(name, seed, description, **kw):
    c = dict(DEFAULTS)
    c.update(kw)
    c["name"] = name
    c["seed"] = seed
    c["description"] = description
    return c


# ---------------------------------------------------------------------------
# hooks: craft weights / inputs after the random draw.
# `lay` is the raw design of the case layer (see draw_layer), x is float64 [T, D]
# (rounded to bf16 afterwards), rng is the case generator.

def hook_ties(c, lay, x, rng):
    R, D = c["R"], c["D"]
    gw = lay["gate_w"]
    bias = np.full(R, -2.0, dtype=np.float32)
    for e in (2, 4, 5, 7):
        bias[e] = np.float32(0.25)
    lay["bias"] = bias
    gw[5] = gw[2]          # A
    gw[7] = gw[4]          # B
    a, b = gw[2], gw[4]
    x[1] = 0.0                                  # all logits 0: 4-way tie
    x[2] = 8.0 * np.sign(a + b)                 # A, B logits large: sigmoid == 1.0f
    x[3] = -8.0 * np.sign(a + b)                # both very negative: sigmoid ~ 0
    x[4] = 2.0 * np.sign(a - b)                 # A > B: tie of 4 and 7 at slot K-1
    x[5] = -2.0 * np.sign(a - b)                # B > A: tie of 2 and 5 at slot K-1


def check_ties(c, res):
    """Every token must have an exact sel tie at the K boundary."""
    lay = res["layer"]
    K = lay.K
    for t in range(res["logits"].shape[0]):
        sel = ink.selection_scores(lay, res["logits"][t])
        ids = res["topk_ids"][t]
        kth = sel[ids[K - 1]]
        rest = np.setdiff1d(np.arange(lay.R), ids)
        assert np.any(sel[rest] == kth), "ties case: token %d has no tie at the K boundary" % t
        assert np.all(rest[sel[rest] == kth] > ids[K - 1]), "tie not broken by index"


def hook_duplicate_rows(c, lay, x, rng):
    R = c["R"]
    gw = lay["gate_w"]
    gw[6] = gw[1]
    gw[4] = gw[3]
    lay["bias"][4] = lay["bias"][3] = np.float32(0.3)
    gw[R] = gw[0]          # sink 0 duplicates routed expert 0
    gw[R + 1] = gw[2]      # sink 1 duplicates routed expert 2


def hook_zero_bias(c, lay, x, rng):
    lay["bias"][:] = 0.0


def hook_every_code(c, lay, x, rng):
    byte_vals = np.arange(256, dtype=np.uint8)
    lo, hi = byte_vals & 0x0F, byte_vals >> 4
    pairs = np.empty(512, dtype=np.uint8)
    pairs[0::2], pairs[1::2] = lo, hi
    for key, n in (("w13_codes", c["D"]), ("w2_codes", c["I"])):
        codes = lay[key]
        rows = 512 // n
        for e in range(codes.shape[0]):
            codes[e, :rows, :] = np.roll(pairs, 2 * e).reshape(rows, n)


def hook_extreme(c, lay, x, rng):
    R, D, I = c["R"], c["D"], c["I"]
    big13 = np.array([0x00, 0x01, 0x70, 0x7A, 0x7F, 0x90, 0x98, 0xA0], dtype=np.uint8)
    big2 = np.array([0x00, 0x30, 0x40, 0x50, 0x60, 0x7F], dtype=np.uint8)
    lay["w13_scales"] = rng.choice(big13, size=lay["w13_scales"].shape).astype(np.uint8)
    lay["w2_scales"] = rng.choice(big2, size=lay["w2_scales"].shape).astype(np.uint8)
    for e in range(R):
        # a block of +-0 under the largest legal byte 0xFE (2^127): finite, contributes 0
        lay["w13_scales"][e, 1, 0] = 0xFE
        lay["w13_codes"][e, 1, 0:32] = rng.choice(np.array([0, 8], dtype=np.uint8), size=32)
        lay["w2_scales"][e, 2, 1] = 0xFE
        lay["w2_codes"][e, 2, 32:64] = rng.choice(np.array([0, 8], dtype=np.uint8), size=32)
        # blocks under byte 0 (2^-127): fp32-subnormal weights, must not be flushed
        lay["w13_scales"][e, 0, :] = 0x00
        lay["w2_scales"][e, 0, :] = 0x00


def hook_subnormal(c, lay, x, rng):
    # w13 scaled up by 2^48 (h ~ 2^96), w2 scale bytes 0..2: most w2 weights are
    # fp32 subnormals; sinks scaled to the same output range, so flushing the
    # subnormal weights to zero changes the output grossly.
    lay["w13_scales"] = (lay["w13_scales"].astype(np.int64) + 48).astype(np.uint8)
    lay["w2_scales"] = rng.integers(0, 2, size=lay["w2_scales"].shape).astype(np.uint8)
    lay["sw2"] = lay["sw2"] * 2.0 ** -26


def check_flushing_visible(res, min_share):
    """At least min_share of the nonzero w2 weights are fp32 subnormals, and flushing them to
    zero moves every output row by far more than rounding."""
    lay = res["layer"]
    w2 = lay.w2
    sub = (w2 != 0) & (np.abs(w2) < 2.0 ** -126)
    assert np.mean(sub[w2 != 0]) > min_share, "too few subnormal w2 weights"
    flushed = ink.Layer(lay.D, lay.I, lay.R, lay.K, lay.S, lay.route_scale, lay.gate_w, lay.bias,
                        lay.global_scale, lay.w13, np.where(sub, 0.0, w2), lay.sw13, lay.sw2)
    f = ink.forward(flushed, res["x"])["out_exact"].astype(np.float64)
    o = res["out_exact"].astype(np.float64)
    rel = np.max(np.abs(f - o), axis=1) / np.max(np.abs(o), axis=1)
    assert np.all(rel > 0.05), "flushing subnormal weights is not visible: %r" % rel


def check_subnormal(c, res):
    check_flushing_visible(res, 0.25)


def hook_nonfinite(c, lay, x, rng):
    x[1, 5] = np.nan
    x[3, 0] = np.inf
    x[4, 63] = -np.inf
    x[6, :] = np.nan
    x[7, 10] = np.inf
    x[7, 11] = -np.inf


def hook_far_negative(c, lay, x, rng):
    R, S, D = c["R"], c["S"], c["D"]
    u = np.where(rng.random(D) < 0.5, -1.0, 1.0)
    gw = lay["gate_w"]
    gw[:R + 1] += 0.5 * u      # routed rows and sink 0 share a direction u
    lay["u"] = u
    coeff = [0.0, 0.0, 4.0, 4.0, 8.0, 12.0, 30.0, 1.0]
    for t, cc in enumerate(coeff[:x.shape[0]]):
        x[t] -= cc * u


def check_far_negative(c, res):
    lg = res["logits"]
    assert np.sum(lg < -100) >= 20, "too few logits below -100"
    sel_rows = [t for t in range(lg.shape[0]) if np.all(lg[t, res["topk_ids"][t]] < -100)]
    assert sel_rows, "no token whose selected logits are all below -100"
    assert np.all(lg[:, c["R"]] < 50) and np.any(lg[:, c["R"]] < -100)


def hook_sinks_loud(c, lay, x, rng):
    # sink gate rows twice as large: the sink gammas dominate for some tokens
    R = c["R"]
    lay["gate_w"][R:] *= 2.0


def all_e4m3_bytes():
    """Every float8_e4m3fn byte that is not NaN: +-0, subnormals, normals, +-448."""
    return np.array([b for b in range(256) if (b & 0x7F) != 0x7F], dtype=np.uint8)


def hook_every_e4m3_byte(c, lay, x, rng):
    # every non-NaN scale byte in the w13 and w2 scales of every expert (rolled per expert);
    # codes random, so each byte meets several codes
    valid = all_e4m3_bytes()
    for key in ("w13_scales", "w2_scales"):
        sc = lay[key]
        for e in range(sc.shape[0]):
            flat = np.resize(np.roll(valid, 7 * e), sc[e].size)
            sc[e] = flat.reshape(sc[e].shape)
    # one scale2 per expert near 1/(448 * 6 * sqrt(n)) keeps g, u and y moderate
    lay["w13_scale2"] = (lay["w13_scale2"] / 64.0).astype(np.float32)
    lay["w2_scale2"] = (lay["w2_scale2"] / 64.0).astype(np.float32)


def check_every_e4m3_byte(c, res):
    for key in ("w13_scales", "w2_scales"):
        seen = set(np.unique(res["design"][key]).tolist())
        assert seen == set(all_e4m3_bytes().tolist()), "%s: not every E4M3 byte present" % key


def hook_scale2_extremes(c, lay, x, rng):
    # per expert (w13 scale2, w2 scale2): 2^40 with 2^-80 (h ~ 2^80), 2^-40 with 2^80
    # (h ~ 2^-80), 0 (the expert's w13 is zero), the smallest normal fp32 2^-126, and
    # an fp32 subnormal 2^-140; others stay typical
    pairs = [(2.0 ** 40, 2.0 ** -80), (2.0 ** -40, 2.0 ** 80), (0.0, None), (2.0 ** -126, None),
             (2.0 ** -140, None)]
    for e, (a, b) in enumerate(pairs):
        lay["w13_scale2"][e] = np.float32(lay["w13_scale2"][e] * a if a else 0.0)
        if b is not None:
            lay["w2_scale2"][e] = np.float32(lay["w2_scale2"][e] * b)


def hook_nv_subnormal(c, lay, x, rng):
    # w2 scales are E4M3 subnormals (2^-9..7 * 2^-9) and w2's scale2 2^-126, so the decoded
    # w2 weights are fp32 subnormals; w13's scale2 2^60 makes h ~ 2^120 (within bf16) so that
    # the output is O(1) next to sinks scaled to match: flushing them changes every row
    lay["w2_scales"] = rng.integers(1, 8, size=lay["w2_scales"].shape).astype(np.uint8)
    lay["w2_scale2"] = np.full_like(lay["w2_scale2"], 2.0 ** -126)
    lay["w13_scale2"] = (lay["w13_scale2"] * 2.0 ** 60).astype(np.float32)
    lay["sw2"] = lay["sw2"] * 2.0 ** -10


def check_nv_subnormal(c, res):
    check_flushing_visible(res, 0.9)


# ---------------------------------------------------------------------------
# the case list

CASES = [
    case("tiny_d32_i32", 101, "Smallest shapes: D=32, I=32 (one MXFP4 block per row), R=4, K=2, S=2, one token.",
         D=32, I=32, R=4, K=2, S=2, T=1, quant_config=False),
    case("odd_d96_i96", 102, "D=I=96 (three MXFP4 blocks per row), R=12, K=3, 33 tokens, layer 17, 3-D scales.",
         D=96, I=96, R=12, K=3, T=33, layer=17, scales="3d", num_hidden_layers=24),
    case("t0_empty", 103, "Zero tokens: every output tensor has a leading dimension 0.",
         T=0, quant_config=False),
    case("k_equals_r", 104, "K = R = 4: every routed expert is selected; slot order still by descending score.",
         R=4, K=4, T=8, quant_config=False),
    case("s1_single_sink", 105, "A single sink expert (S=1): topk_weights has K+1 columns.",
         S=1, T=8),
    case("s2_two_sinks", 106, "Two sink experts with loud sink gate rows, so the gammas dominate some tokens.",
         S=2, T=16, hook=hook_sinks_loud),
    case("ties_at_k_boundary", 107,
         "Duplicate gate rows and equal biases give exact selection ties at the K-th place in every token "
         "(zero input, saturated sigmoid, A>B and B>A); the lowest index must win.",
         R=8, K=3, T=6, hook=hook_ties, features=("ties",)),
    case("duplicate_gate_rows", 108,
         "Identical gate rows (1=6, 3=4 with equal bias, sink rows copying routed rows 0 and 2), 33 tokens.",
         T=33, hook=hook_duplicate_rows, features=("duplicate_gate_rows", "ties")),
    case("zero_bias", 109, "use_gate_bias true with an all-zero gate.bias tensor.",
         hook=hook_zero_bias, features=("zero_bias",)),
    case("no_bias_no_global_scale", 110,
         "use_gate_bias and use_global_scale false, tensors absent: bias 0, global_scale 1.",
         use_gate_bias=False, use_global_scale=False),
    case("bf16_global_scale", 111, "gate.global_scale stored as BF16 (1.375), route_scale 2.5.",
         global_scale=1.375, global_scale_dtype="BF16", route_scale=2.5),
    case("nested_text_config", 112,
         "The text config nested under text_config (with a vision_config next to it), quantization_config at the top.",
         nested=True),
    case("bf16_layer2_excluded", 113,
         "Layer 2 with bf16 routed experts, listed in quantization_config.exclude.",
         layer=2, experts="bf16", T=12),
    case("hf_spelling_moe_intermediate_size", 114,
         "Hugging Face spelling: moe_intermediate_size=64 is the MoE width, intermediate_size=192 the dense width.",
         config_style="hf"),
    case("scales_flattened", 115, "MXFP4 scales stored flattened: w13 [R*2I, D/32], w2 [R*D, I/32]; D=128, I=64.",
         D=128, I=64, scales="flat"),
    case("scales_3d", 116, "MXFP4 scales stored 3-D: w13 [R, 2I, D/32], w2 [R, D, I/32]; D=128, I=64.",
         D=128, I=64, scales="3d"),
    case("every_e2m1_code", 117,
         "Every packed byte value 0..255 (so all 16 E2M1 codes in both nibbles) in w13 and w2 of every expert.",
         R=6, K=4, T=16, hook=hook_every_code, features=("all_e2m1_codes",)),
    case("extreme_e8m0", 118,
         "E8M0 bytes 0x00 (fp32-subnormal weights), 0x01, 0x30..0x7F, 0x90..0xA0, and 0xFE over zero codes; "
         "all GEMM results stay finite in fp32/bf16.",
         R=4, K=2, T=8, hook=hook_extreme, features=("extreme_scales",)),
    case("subnormal_weights", 132,
         "w2 E8M0 bytes 0 and 1, so most decoded w2 weights are fp32 subnormals, with w13 scaled by 2^48 "
         "(h about 2^96) and sinks scaled to match: flushing subnormals to zero changes every output row.",
         R=4, K=2, T=8, hook=hook_subnormal, features=("extreme_scales", "subnormal_weights")),
    case("nonfinite_rows", 119,
         "Rows with NaN, +inf, -inf and +-inf among finite rows: those rows give NaN output and weights, ids 0..K-1.",
         T=9, hook=hook_nonfinite, features=("nonfinite_input",)),
    case("logits_far_negative", 120,
         "Logits far below -100 (down to about -1000) for selected and sink experts; weights via log-sigmoid.",
         T=8, hook=hook_far_negative, features=("far_negative_logits",)),
    case("tp2", 121, "Tensor parallel 2 (I_tp=32) for routed and sink experts.",
         I=64, T=12, split=("tp", 2)),
    case("tp4", 122, "Tensor parallel 4 (I=128, I_tp=32).",
         I=128, T=12, split=("tp", 4), scales="3d"),
    case("ep3_padding", 123,
         "Expert parallel 3 with R=10: E_pad=12, rank 2 owns experts 8..11 (10, 11 padding); sinks TP-sliced in 3.",
         R=10, K=3, I=96, T=16, split=("ep", 3)),
    case("ep4", 124, "Expert parallel 4 with R=16 (4 experts a rank), sinks TP-sliced in 4.",
         R=16, K=4, I=64, T=16, split=("ep", 4)),
    case("tp2_pad256", 125,
         "TP 2 with the per-rank intermediate padded to 256 (I_tp=32 -> 256 with zero channels).",
         I=64, T=8, split=("tp", 2), pad=256),
    case("ep2_pad128", 126,
         "EP 2 with per-rank padding to 128: routed width 96 -> 128, sink slabs 48 -> 128.",
         I=96, R=8, K=2, T=8, split=("ep", 2), pad=128),
    case("bf16_tp2", 127, "bf16 routed experts (layer 2, no quantization_config) under TP 2.",
         layer=2, experts="bf16", I=64, T=8, split=("tp", 2), quant_config=False),
    case("nested_hf_spelling_tp2", 128,
         "Nested text_config with the Hugging Face spelling, under TP 2.",
         nested=True, config_style="hf", I=64, split=("tp", 2)),
    case("sharded_checkpoint", 129,
         "Checkpoint in two safetensors shards plus model.safetensors.index.json; the layer's tensors are split "
         "across both shards, next to unrelated tensors.",
         layer=5, sharded=True, T=8, features=("extra_tensors",)),
    case("two_layers", 130,
         "Two MoE layers in one checkpoint (layer 2 bf16, layer 3 MXFP4): --layer is required; expected is layer 3.",
         layer=3, extra_layers=(2,), T=8),
    case("inkling_like_r16_k6", 131,
         "Inkling-like routing (R=16, K=6, S=2, route_scale 8) at D=I=128, 33 tokens; quantization_config also "
         "excludes this layer's gate and shared experts (but not its experts).",
         D=128, I=128, R=16, K=6, S=2, T=33, layer=4,
         extra_exclude=("model.llm.layers.4.mlp.gate", "model.llm.layers.4.mlp.shared_experts")),
]

# ---------------------------------------------------------------------------
# quantization_config exclusion forms (the MXFP4 release's first MoE layer, ModelOpt)

# The entries that exclude a bf16 layer L, by form: the experts module; the release's form, the
# two expert weight names exactly (plus its shared-expert pattern); ModelOpt's exclude_modules.
EXCLUDE_FORMS = {
    "module": lambda L: ["model.llm.layers.%d.mlp.experts" % L],
    "weights": lambda L: ["model.llm.layers.%d.mlp.experts.w13_weight" % L,
                          "model.llm.layers.%d.mlp.experts.w2_weight" % L,
                          "model.llm.layers.%d.mlp.shared_experts.*" % L],
    "modelopt": lambda L: ["model.llm.layers.%d.mlp.experts" % L],
}

CASES += [
    case("exclude_weight_names", 140,
         "Layer 2 bf16, excluded as the MXFP4 release lists it: the two expert weight names exactly "
         "(plus shared_experts.*), not the module.",
         layer=2, experts="bf16", T=12, exclude_form="weights"),
    case("exclude_weight_names_tp2", 141,
         "The release's weight-name exclusion of bf16 layer 2, under TP 2.",
         layer=2, experts="bf16", I=64, T=8, split=("tp", 2), exclude_form="weights"),
    case("exclude_weight_names_ep2", 142,
         "The release's weight-name exclusion of bf16 layer 2, under EP 2.",
         layer=2, experts="bf16", R=8, T=8, split=("ep", 2), exclude_form="weights"),
    case("exclude_modules_modelopt", 143,
         "ModelOpt's quantization_config.exclude_modules (NVFP4 releases) excluding bf16 layer 2's experts module.",
         layer=2, experts="bf16", T=8, exclude_form="modelopt"),
    case("exclude_weight_names_two_layers", 144,
         "Two MoE layers: bf16 layer 2 excluded by its two weight names, MXFP4 layer 3 not excluded; "
         "expected is layer 3 (--layer required).",
         layer=3, extra_layers=(2,), T=8, exclude_form="weights"),
]

CASES += [
    case("nvfp4_basic", 150,
         "NVFP4 routed experts (ModelOpt): E2M1 codes, float8_e4m3fn .scale per 16 values [R, rows, n/16], "
         "fp32 .scale2 per expert, .input_amax and .original_shape sidecars; quantization_config with "
         "quant_algo NVFP4, group_size 16, exclude_modules.",
         experts="nvfp4", scales="3d", T=12),
    case("nvfp4_every_e4m3_byte", 151,
         "Every float8_e4m3fn scale byte that is not NaN (+-0, the subnormals (m/8) 2^-6, the normals, "
         "+-448) in w13 and w2 of every expert, negative scales included.",
         experts="nvfp4", scales="3d", R=4, K=2, T=8, hook=hook_every_e4m3_byte,
         features=("all_e4m3_bytes",)),
    case("nvfp4_scale2_extremes", 152,
         "scale2 extremes per expert: w13 2^40 with w2 2^-80 (h ~ 2^80), w13 2^-40 with w2 2^80, w13 0, "
         "w13 2^-126 and the fp32 subnormal 2^-140, K = R so that every expert runs.",
         experts="nvfp4", scales="3d", R=6, K=6, T=8, hook=hook_scale2_extremes,
         features=("scale2_extremes",)),
    case("nvfp4_subnormal_weights", 153,
         "E4M3 subnormal w2 scales times scale2 2^-126: the decoded w2 weights are fp32 subnormals "
         "(w13 scale2 2^60, h ~ 2^120); flushing them to zero changes every output row.",
         experts="nvfp4", scales="3d", R=4, K=2, T=8, hook=hook_nv_subnormal,
         features=("subnormal_weights",)),
    case("nvfp4_flat_d48_i80", 154,
         "NVFP4 at D=48, I=80 (multiples of 16, not of 32), flattened scales [R*rows, n/16], 17 tokens.",
         experts="nvfp4", scales="flat", D=48, I=80, R=6, K=3, T=17),
    case("nvfp4_tp2", 155, "NVFP4 under TP 2 (I_tp = 32: w2 bytes [r*16, ...), scale columns [r*2, ...)).",
         experts="nvfp4", scales="3d", I=64, T=12, split=("tp", 2)),
    case("nvfp4_tp4_itp16", 156,
         "NVFP4 under TP 4 with I_tp = 16, one scale column per rank (a split MXFP4 cannot take).",
         experts="nvfp4", scales="3d", I=64, T=8, split=("tp", 4)),
    case("nvfp4_ep3_padding", 157,
         "NVFP4 under EP 3 with R=10: padding experts 10, 11 (scale2 0); sinks TP-sliced in 3.",
         experts="nvfp4", scales="3d", R=10, K=3, I=96, T=16, split=("ep", 3)),
    case("nvfp4_tp2_pad64", 158, "NVFP4 under TP 2 with each rank's width padded to 64 (zero codes, zero scales).",
         experts="nvfp4", scales="3d", I=64, T=8, split=("tp", 2), pad=64),
    case("nvfp4_hf_quant_config_two_layers", 159,
         "ModelOpt's second config form: hf_quant_config.json beside config.json (no quantization_config), "
         "exclude_modules with globs excluding bf16 layer 2 (model.llm.layers.2.mlp.experts*) and the "
         "shared experts; expected is NVFP4 layer 3 (--layer required).",
         experts="nvfp4", scales="3d", layer=3, extra_layers=(2,), T=8, quant_file="hf"),
    case("mxfp4_sidecars", 160,
         "An MXFP4 layer carrying .input_amax and .original_shape sidecars next to its weights: loaded, "
         "validated, unused.",
         sidecars=True, T=8),
]

CHECKS = {
    "nvfp4_every_e4m3_byte": check_every_e4m3_byte,
    "nvfp4_subnormal_weights": check_nv_subnormal,
    "ties_at_k_boundary": check_ties,
    "logits_far_negative": check_far_negative,
    "subnormal_weights": check_subnormal,
}


# ---------------------------------------------------------------------------
# 1-ulp near-ties decided by the bias. The contract ([routing.select]) rounds
# sel = sigmoid(l) + bias twice (sigmoid to fp32, then the fp32 sum); a selector that rounds
# once picks differently here.
# Rows p (zero gate row: logit 0, sigmoid 1/2 exactly; bias 1: sel 1.5) and q (zero but for c
# at column D0, where every token's x is 32: logit 32c for every token; bias chosen so that
# fp32(sigmoid) + bias lands exactly on a midpoint next to 1.5, or one ulp above it).

BIAS_TIE_D0 = 5
# expert -> role: "p" (sel 1.5), "up" (midpoint above 1.5, sigmoid rounded down: ties at 1.5,
# one rounding goes above), "down" (midpoint below, sigmoid rounded up: ties at 1.5, one
# rounding goes below), "over" (one fp32 ulp above the tie: 1.5 + 2^-23, strictly first)
BIAS_TIE_ROLES = {1: "down", 2: "p", 3: "p", 4: "up", 5: "p", 6: "over"}


def bias_tie_c(want_down):
    """The first bf16 c in k/64 whose sigmoid(32c) is rounded down (want_down) or up by fp32,
    away from a midpoint."""
    for k in range(1, 64):
        c = float(bf16(np.array([k / 64.0]))[0])
        sg = ink.sigmoid(32.0 * c)
        s = float(np.float32(sg))
        ulp = float(np.spacing(np.float32(s)))
        if (sg > s) == want_down and abs(sg - s) > 0.01 * ulp and abs(abs(sg - s) - ulp / 2) > 0.01 * ulp:
            return c, s
    raise AssertionError("no c found")


def hook_bias_ulp_ties(c, lay, x, rng):
    gw, bias = lay["gate_w"], lay["bias"]
    bias[:] = np.minimum(bias, np.float32(0.2))
    half = 2.0 ** -24
    for e, role in sorted(BIAS_TIE_ROLES.items()):
        gw[e] = 0.0
        if role == "p":
            bias[e] = np.float32(1.0)
            continue
        cval, s = bias_tie_c(role != "down")
        gw[e, BIAS_TIE_D0] = cval
        target = {"up": 1.5 + half, "down": 1.5 - half, "over": 1.5 + 2 * half}[role]
        b = target - s
        assert float(np.float32(b)) == b, "bias not exact in fp32"
        bias[e] = np.float32(b)
    x[:, BIAS_TIE_D0] = 32.0


def check_bias_ulp_ties(c, res):
    """Every token selects 6, then the 1.5-group in index order; one rounding would not."""
    lay = res["layer"]
    K = lay.K
    group = sorted(e for e, r in BIAS_TIE_ROLES.items() if r in ("p", "up", "down"))
    want = [6] + group[:K - 1]
    for t in range(res["logits"].shape[0]):
        assert list(res["topk_ids"][t]) == want, "token %d: ids %s, want %s" % (t, res["topk_ids"][t], want)
        sel = ink.selection_scores(lay, res["logits"][t])
        assert all(sel[e] == np.float32(1.5) for e in group), "the group does not tie at 1.5"
        once = np.array([np.float32(ink.sigmoid(float(z)) + float(b))
                         for z, b in zip(res["logits"][t][:lay.R], lay.bias)])
        assert list(ink.select_topk(once, K)) != want, "one rounding would select the same"


CASES += [
    case("bias_ulp_ties", 160,
         "1-ulp near-ties decided by the bias: five experts whose sigmoid + bias rounds (twice, as "
         "SPEC says) to exactly 1.5, two of them only through the ties-to-even midpoint rule, and "
         "one a single fp32 ulp above; the lowest index wins at the K boundary, and rounding the "
         "score once would select differently.",
         R=8, K=4, S=1, T=5, hook=hook_bias_ulp_ties, features=("ties", "bias_ulp_ties")),
]
CHECKS["bias_ulp_ties"] = check_bias_ulp_ties


# ---------------------------------------------------------------------------
# drawing and packing a layer

def draw_layer(c, rng, experts):
    D, I, R, S = c["D"], c["I"], c["R"], c["S"]
    G = R + S
    lay = {"experts": experts}
    lay["gate_w"] = rng.standard_normal((G, D)) / np.sqrt(D)
    lay["bias"] = (rng.standard_normal(R) * 0.1).astype(np.float32)
    if experts == "mxfp4":
        b13, b2 = mx_base_scale(D), mx_base_scale(I)
        lay["w13_codes"] = rng.integers(0, 16, size=(R, 2 * I, D), dtype=np.uint8)
        lay["w13_scales"] = (b13 + rng.integers(-1, 2, size=(R, 2 * I, D // 32))).astype(np.uint8)
        lay["w2_codes"] = rng.integers(0, 16, size=(R, D, I), dtype=np.uint8)
        lay["w2_scales"] = (b2 + rng.integers(-1, 2, size=(R, D, I // 32))).astype(np.uint8)
    elif experts == "nvfp4":
        lay["w13_codes"] = rng.integers(0, 16, size=(R, 2 * I, D), dtype=np.uint8)
        lay["w13_scales"] = rng.integers(0x30, 0x41, size=(R, 2 * I, D // 16)).astype(np.uint8)
        lay["w2_codes"] = rng.integers(0, 16, size=(R, D, I), dtype=np.uint8)
        lay["w2_scales"] = rng.integers(0x30, 0x41, size=(R, D, I // 16)).astype(np.uint8)
        # scale bytes 0x30..0x40 are 0.5..2: scale2 brings the weights to about 1/sqrt(n)
        lay["w13_scale2"] = ((0.75 + 0.5 * rng.random(R)) / (2.93 * np.sqrt(D))).astype(np.float32)
        lay["w2_scale2"] = ((0.75 + 0.5 * rng.random(R)) / (2.93 * np.sqrt(I))).astype(np.float32)
    else:
        lay["w13"] = rng.standard_normal((R, 2 * I, D)) / np.sqrt(D)
        lay["w2"] = rng.standard_normal((R, D, I)) / np.sqrt(I)
    lay["sw13"] = rng.standard_normal((S, 2 * I, D)) / np.sqrt(D)
    lay["sw2"] = rng.standard_normal((S, D, I)) / np.sqrt(I)
    return lay


def layer_tensors(c, lay, L):
    p = "model.llm.layers.%d.mlp." % L
    R, I, D = c["R"], c["I"], c["D"]
    t = {p + "gate.weight": bf16(lay["gate_w"])}
    if c["use_gate_bias"]:
        t[p + "gate.bias"] = np.asarray(lay["bias"], dtype=np.float32)
    if c["use_global_scale"]:
        gs = np.array([c["global_scale"]], dtype=np.float64)
        t[p + "gate.global_scale"] = bf16(gs) if c["global_scale_dtype"] == "BF16" else gs.astype(np.float32)
    if lay["experts"] == "mxfp4":
        t[p + "experts.w13_weight"] = ink.mxfp4_pack(lay["w13_codes"])
        t[p + "experts.w2_weight"] = ink.mxfp4_pack(lay["w2_codes"])
        s13, s2 = lay["w13_scales"], lay["w2_scales"]
        if c["scales"] == "flat":
            s13 = s13.reshape(R * 2 * I, D // 32)
            s2 = s2.reshape(R * D, I // 32)
        t[p + "experts.w13_weight_scale"] = np.ascontiguousarray(s13)
        t[p + "experts.w2_weight_scale"] = np.ascontiguousarray(s2)
        if c["sidecars"]:
            add_sidecars(t, p, R, I, D)
    elif lay["experts"] == "nvfp4":
        for name, rows, cols in (("w13", 2 * I, D), ("w2", D, I)):
            w = p + "experts.%s_weight" % name
            t[w] = ink.mxfp4_pack(lay[name + "_codes"])
            sc = lay[name + "_scales"]
            if c["scales"] == "flat":
                sc = sc.reshape(R * rows, cols // 16)
            t[w + ".scale"] = np.ascontiguousarray(sc).view(ink.E4M3)
            t[w + ".scale2"] = np.asarray(lay[name + "_scale2"], dtype=np.float32)
        add_sidecars(t, p, R, I, D)
    else:
        t[p + "experts.w13_weight"] = bf16(lay["w13"])
        t[p + "experts.w2_weight"] = bf16(lay["w2"])
    t[p + "shared_experts.shared_w13_weight"] = bf16(lay["sw13"])
    t[p + "shared_experts.shared_w2_weight"] = bf16(lay["sw2"])
    return t


def add_sidecars(t, p, R, I, D):
    """.input_amax (w13 fp32, w2 bf16) and .original_shape (w13 int64, w2 int32)."""
    t[p + "experts.w13_weight.input_amax"] = np.array([5.25], dtype=np.float32)
    t[p + "experts.w2_weight.input_amax"] = bf16(np.array([3.5]))
    t[p + "experts.w13_weight.original_shape"] = np.array([R, 2 * I, D], dtype=np.int64)
    t[p + "experts.w2_weight.original_shape"] = np.array([R, D, I], dtype=np.int32)


def design_layer(c, lay):
    """The Layer object straight from the design (used to cross-check loading)."""
    gs = c["global_scale"] if c["use_global_scale"] else 1.0
    if c["use_global_scale"] and c["global_scale_dtype"] == "BF16":
        gs = float(bf16(np.array([gs]))[0])
    bias = lay["bias"] if c["use_gate_bias"] else np.zeros(c["R"], np.float32)
    if lay["experts"] == "mxfp4":
        w13 = ink.mxfp4_decode(ink.mxfp4_pack(lay["w13_codes"]), lay["w13_scales"])
        w2 = ink.mxfp4_decode(ink.mxfp4_pack(lay["w2_codes"]), lay["w2_scales"])
    elif lay["experts"] == "nvfp4":
        w13 = ink.nvfp4_decode(ink.mxfp4_pack(lay["w13_codes"]), lay["w13_scales"], lay["w13_scale2"])
        w2 = ink.nvfp4_decode(ink.mxfp4_pack(lay["w2_codes"]), lay["w2_scales"], lay["w2_scale2"])
    else:
        w13 = bf16(lay["w13"]).astype(np.float64)
        w2 = bf16(lay["w2"]).astype(np.float64)
    return ink.Layer(c["D"], c["I"], c["R"], c["K"], c["S"], c["route_scale"],
                     bf16(lay["gate_w"]).astype(np.float64), bias, gs, w13, w2,
                     bf16(lay["sw13"]).astype(np.float64), bf16(lay["sw2"]).astype(np.float64))


def make_config(c, bf16_layers):
    D = c["D"]
    text = {
        "hidden_size": D,
        "n_routed_experts": c["R"],
        "num_experts_per_tok": c["K"],
        "n_shared_experts": c["S"],
        "route_scale": c["route_scale"],
        "use_gate_bias": c["use_gate_bias"],
        "use_global_scale": c["use_global_scale"],
        "num_hidden_layers": c["num_hidden_layers"] or max(8, c["layer"] + 2),
        "model_type": "inkling",
    }
    if c["config_style"] == "hf":
        text["moe_intermediate_size"] = c["I"]
        text["intermediate_size"] = 3 * D
    else:
        text["intermediate_size"] = c["I"]
        text["dense_intermediate_size"] = 3 * D
    if c["nested"]:
        cfg = {"architectures": ["InklingForConditionalGeneration"], "model_type": "inkling",
               "text_config": text,
               "vision_config": {"hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2}}
    else:
        cfg = dict(text)
        cfg["architectures"] = ["InklingForCausalLM"]
    if c["quant_config"]:
        form = c["exclude_form"]
        excl = list(DEFAULT_EXCLUDE) if form == "module" else ["lm_head"]
        for L in bf16_layers:
            for name in EXCLUDE_FORMS[form](L):
                if name not in excl:
                    excl.append(name)
        excl += list(c["extra_exclude"])
        if c["experts"] == "nvfp4":
            excl = ["lm_head"] + ["model.llm.layers.%d.mlp.experts*" % L for L in bf16_layers]
            excl += ["model.llm.layers.*.mlp.shared_experts*"] + list(c["extra_exclude"])
            q = {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": excl}
            if c["quant_file"] == "config":
                cfg["quantization_config"] = dict(q, quant_method="modelopt")
        elif form == "modelopt":
            cfg["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                          "exclude_modules": excl}
        else:
            cfg["quantization_config"] = {"quant_method": "quark", "exclude": excl}
    return cfg


# ---------------------------------------------------------------------------
# one case

def features_of(c):
    f = set(c["features"])
    if c["quant_config"] and c["exclude_form"] != "module":
        f.add("exclude_" + c["exclude_form"])
    f.add(c["experts"] if c["experts"] != "bf16" else "bf16_experts")
    if c["sidecars"] or c["experts"] == "nvfp4":
        f.add("sidecars")
    if c["quant_file"] == "hf" and c["experts"] == "nvfp4":
        f.add("hf_quant_config")
    if c["experts"] != "bf16":
        f.add("scales_flat" if c["scales"] == "flat" else "scales_3d")
    if c["use_gate_bias"]:
        f.add("gate_bias")
    else:
        f.add("no_gate_bias")
    if c["use_global_scale"]:
        f.add("global_scale_bf16" if c["global_scale_dtype"] == "BF16" else "global_scale_f32")
    else:
        f.add("no_global_scale")
    if c["quant_config"]:
        f.add("quant_config")
    if c["nested"]:
        f.add("config_nested")
    f.add("config_hf_spelling" if c["config_style"] == "hf" else "config_original_spelling")
    kind, n = c["split"]
    if kind != "none":
        f.add("split_" + kind)
        if kind == "ep" and c["R"] % n:
            f.add("ep_padding_experts")
    if c["pad"]:
        f.add("pad_intermediate")
    if c["sharded"]:
        f.add("sharded")
    if c["extra_layers"]:
        f.add("multi_layer")
    if c["T"] == 0:
        f.add("t0")
    if c["K"] == c["R"]:
        f.add("k_equals_r")
    if c["S"] == 1:
        f.add("single_sink")
    return sorted(f)


def build_case(c, root):
    rng = np.random.default_rng(c["seed"])
    L = c["layer"]
    lay = draw_layer(c, rng, c["experts"])
    extra = {}
    for L2 in c["extra_layers"]:
        extra[L2] = draw_layer(c, rng, "bf16" if L2 == 2 else c["experts"])
    x = rng.standard_normal((c["T"], c["D"]))
    if c["hook"] is not None:
        c["hook"](c, lay, x, rng)
    xb = bf16(x)

    tensors = layer_tensors(c, lay, L)
    for L2, lay2 in extra.items():
        tensors.update(layer_tensors(c, lay2, L2))
    bf16_layers = sorted([L] * (lay["experts"] == "bf16") +
                         [L2 for L2, l2 in extra.items() if l2["experts"] == "bf16"])

    cdir = os.path.join(root, c["name"])
    mdir = os.path.join(cdir, "model")
    os.makedirs(mdir, exist_ok=True)
    write_bytes(os.path.join(mdir, "config.json"), json_bytes(make_config(c, bf16_layers)))
    if c["experts"] == "nvfp4" and c["quant_file"] == "hf":
        excl = ["lm_head"] + ["model.llm.layers.%d.mlp.experts*" % L2 for L2 in bf16_layers]
        excl += ["model.llm.layers.*.mlp.shared_experts*"]
        hq = {"producer": {"name": "modelopt", "version": "0.29.0"},
              "quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": excl}}
        write_bytes(os.path.join(mdir, "hf_quant_config.json"), json_bytes(hq))
    meta = {"format": "pt"}
    if c["sharded"]:
        p = "model.llm.layers.%d." % L
        tensors["model.llm.embed_tokens.weight"] = bf16(rng.standard_normal((16, c["D"])))
        tensors[p + "input_layernorm.weight"] = bf16(1.0 + 0.1 * rng.standard_normal(c["D"]))
        first = {p + "mlp.gate.weight", p + "mlp.gate.bias", p + "mlp.experts.w13_weight",
                 p + "mlp.experts.w2_weight_scale", "model.llm.embed_tokens.weight"}
        names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
        parts = [{k: v for k, v in tensors.items() if k in first},
                 {k: v for k, v in tensors.items() if k not in first}]
        weight_map = {}
        total = 0
        for fname, part in zip(names, parts):
            st.write(os.path.join(mdir, fname), part, meta)
            for k, v in part.items():
                weight_map[k] = fname
                total += st.tensor_nbytes(v)
        write_bytes(os.path.join(mdir, "model.safetensors.index.json"),
                    json_bytes({"metadata": {"total_size": total}, "weight_map": weight_map}))
    else:
        st.write(os.path.join(mdir, "model.safetensors"), tensors, meta)
    st.write(os.path.join(cdir, "input.safetensors"), {"x": xb})

    # Reload the checkpoint with the independent loader and check it against the design.
    layer = ink.load_layer(mdir, L)
    ref = design_layer(c, lay)
    for attr in ("gate_w", "bias", "w13", "w2", "sw13", "sw2"):
        a, b = getattr(layer, attr), getattr(ref, attr)
        assert a.shape == b.shape and np.array_equal(a, b), "%s: %s reload mismatch" % (c["name"], attr)
    assert layer.scale == ref.scale
    xr, _ = st.read(os.path.join(cdir, "input.safetensors"))
    assert xr["x"].tobytes() == xb.tobytes()

    kind, n = c["split"]
    res = ink.forward(layer, xr["x"], kind, n, c["pad"])
    res["layer"] = layer
    res["x"] = xr["x"]
    sanity(c, layer, xb, res)
    res["design"] = lay
    if c["name"] in CHECKS:
        CHECKS[c["name"]](c, res)

    common = {"topk_ids": res["topk_ids"], "topk_weights": res["topk_weights"], "logits": res["logits"]}
    st.write(os.path.join(cdir, "expected-exact.safetensors"), dict(common, out=res["out_exact"]))
    st.write(os.path.join(cdir, "expected-serving.safetensors"), dict(common, out=res["out_serving"]))
    cj = {
        "name": c["name"], "description": c["description"], "layer": L,
        "split": {"kind": kind, "n": n}, "pad_intermediate_to": c["pad"],
        "features": features_of(c), "T": c["T"],
    }
    write_bytes(os.path.join(cdir, "case.json"), json_bytes(cj))


def sanity(c, layer, xb, res):
    """Generator-side assertions: finite where expected, weights sum to the scale,
    and (for splits) the split output agrees with the unsplit one."""
    bad = ink.nonfinite_rows(xb)
    good = ~bad
    T = xb.shape[0]
    name = c["name"]
    for key in ("out_exact", "out_serving", "topk_weights", "logits"):
        v = res[key].astype(np.float64)
        assert np.all(np.isfinite(v[good])), "%s: non-finite %s in a finite row" % (name, key)
        assert np.all(np.isnan(v[bad])), "%s: %s not NaN in a non-finite row" % (name, key)
        if key.startswith("out"):
            assert np.all(np.abs(v[good]) < 1e36), "%s: output too close to overflow" % name
    ids = res["topk_ids"]
    assert ids.shape == (T, layer.K) and np.all((ids >= 0) & (ids < layer.R))
    for t in range(T):
        assert len(set(ids[t].tolist())) == layer.K
        if good[t]:
            s = float(np.sum(res["topk_weights"][t].astype(np.float64)))
            assert abs(s - layer.scale) <= 1e-5 * layer.scale, "%s: weights sum %r" % (name, s)
    if T and np.any(good):
        assert np.any(res["out_exact"][good] != 0), "%s: output is all zero" % name
    kind, n = c["split"]
    if kind != "none" or c["pad"]:
        base = ink.forward(layer, xb, "none", 1, 0)
        a = res["out_exact"][good].astype(np.float64)
        b = base["out_exact"][good].astype(np.float64)
        # each partial and each fp32 add rounds once: bound by the partials' magnitudes
        mag = np.sum(np.abs(res["partials_exact"].astype(np.float64)), axis=0)[good] + np.abs(b)
        tol = n * np.finfo(np.float32).eps * mag
        assert np.all(np.abs(a - b) <= tol), "%s: split exact output differs from unsplit" % name
        assert np.array_equal(res["topk_ids"], base["topk_ids"])
        assert np.array_equal(res["topk_weights"], base["topk_weights"], equal_nan=True)


# ---------------------------------------------------------------------------
# manifest, generate, check

def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def list_files(root):
    out = []
    for dp, dn, fn in os.walk(root):
        dn.sort()
        for f in sorted(fn):
            out.append(os.path.relpath(os.path.join(dp, f), root).replace(os.sep, "/"))
    return sorted(out)


def generate(out_dir, manifest_path, only=None):
    cases_name = os.path.basename(os.path.normpath(out_dir))
    if os.path.isdir(out_dir):
        known = {c["name"] for c in CASES}
        entries = sorted(e for e in os.listdir(out_dir) if not only or e in only)
        for entry in entries:
            path = os.path.join(out_dir, entry)
            if not (os.path.isdir(path) and (entry in known or
                                             os.path.exists(os.path.join(path, "case.json")))):
                sys.exit("refusing to clear %s: %s is not a generated case" % (out_dir, entry))
        for entry in entries:
            shutil.rmtree(os.path.join(out_dir, entry))
    os.makedirs(out_dir, exist_ok=True)
    for c in CASES:
        if only and c["name"] not in only:
            continue
        build_case(c, out_dir)
        print("wrote", c["name"])
    files = {}
    for rel in list_files(out_dir):
        files[cases_name + "/" + rel] = sha256_file(os.path.join(out_dir, rel))
    manifest = {"generator_version": GENERATOR_VERSION, "numpy": np.__version__,
                "ml_dtypes": ml_dtypes.__version__, "files": files}
    write_bytes(manifest_path, json_bytes(manifest))


def check(case_dir, manifest_path):
    case_dir = os.path.normpath(case_dir)
    with tempfile.TemporaryDirectory() as tmp:
        tcases = os.path.join(tmp, os.path.basename(case_dir))
        tman = os.path.join(tmp, "MANIFEST.json")
        generate(tcases, tman)
        diffs = []
        want = set(list_files(tcases))
        have = set(list_files(case_dir)) if os.path.isdir(case_dir) else set()
        for rel in sorted(want | have):
            a, b = os.path.join(tcases, rel), os.path.join(case_dir, rel)
            if rel not in have:
                diffs.append("missing: " + rel)
            elif rel not in want:
                diffs.append("extra: " + rel)
            else:
                with open(a, "rb") as fa, open(b, "rb") as fb:
                    if fa.read() != fb.read():
                        diffs.append("differs: " + rel)
        if not os.path.exists(manifest_path):
            diffs.append("missing: MANIFEST.json")
        else:
            with open(tman, "rb") as fa, open(manifest_path, "rb") as fb:
                if fa.read() != fb.read():
                    diffs.append("differs: MANIFEST.json")
    if diffs:
        print("golden check FAILED: %d file(s) differ" % len(diffs))
        for d in diffs:
            print("  " + d)
        return 1
    print("golden check OK: %d files identical" % len(want))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--out", help="directory to (re)generate the cases into, e.g. golden/cases")
    g.add_argument("--check", metavar="DIR", help="regenerate into a temp dir and compare with DIR")
    ap.add_argument("--manifest", help="MANIFEST.json path (default: next to the cases directory)")
    ap.add_argument("--only", nargs="*", help="generate only these cases (with --out; manifest covers what exists)")
    args = ap.parse_args(argv)
    target = args.out or args.check
    manifest = args.manifest or os.path.join(os.path.dirname(os.path.abspath(os.path.normpath(target))),
                                             "MANIFEST.json")
    if args.check:
        return check(args.check, manifest)
    generate(args.out, manifest, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
