#!/usr/bin/env python3
"""Self-checks of the NumPy golden model against small hand-computed cases.

    python3 golden/test_selfcheck.py

Prints one line per failure and 'N passed, M failed' at the end; exits 1 on failure.
"""

import hashlib
import json
import math
import os
import sys
import tempfile
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import inkling_np as ink  # noqa: E402
import safetensors_np as st  # noqa: E402

BF16 = ink.BF16
TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def bf(a):
    return np.asarray(a, dtype=np.float64).astype(np.float32).astype(BF16)


def tiny_bf16_layer(D=2, I=1, R=3, K=1, S=1, route_scale=2.0, gs=0.5, seed=None, **over):
    """A bf16 layer. With seed=None, small hand-chosen values."""
    if seed is None:
        gate = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, -0.5]])[:R + S, :D]
        bias = np.zeros(R, np.float32)
        w13 = np.zeros((R, 2 * I, D))
        w2 = np.zeros((R, D, I))
        sw13 = np.zeros((S, 2 * I, D))
        sw2 = np.zeros((S, D, I))
    else:
        rng = np.random.default_rng(seed)
        gate = bf(rng.standard_normal((R + S, D)) / np.sqrt(D)).astype(np.float64)
        bias = (rng.standard_normal(R) * 0.1).astype(np.float32)
        w13 = bf(rng.standard_normal((R, 2 * I, D)) / np.sqrt(D)).astype(np.float64)
        w2 = bf(rng.standard_normal((R, D, I)) / np.sqrt(I)).astype(np.float64)
        sw13 = bf(rng.standard_normal((S, 2 * I, D)) / np.sqrt(D)).astype(np.float64)
        sw2 = bf(rng.standard_normal((S, D, I)) / np.sqrt(I)).astype(np.float64)
    args = dict(gate_w=gate, bias=bias, w13=w13, w2=w2, sw13=sw13, sw2=sw2)
    args.update(over)
    return ink.Layer(D, I, R, K, S, route_scale, args["gate_w"], args["bias"], gs,
                     args["w13"], args["w2"], args["sw13"], args["sw2"])


# ---------------------------------------------------------------------------
# formats

@test
def e2m1_every_code():
    want = [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    for code in range(16):
        packed = np.full((1, 16), code | (code << 4), dtype=np.uint8)
        w = ink.mxfp4_decode(packed, np.array([[127]], np.uint8))
        v = want[code & 7] * (-1 if code & 8 else 1)
        assert np.all(w == v), (code, w[0, :2])
        assert math.copysign(1.0, w[0, 0]) == (-1.0 if code & 8 else 1.0), code  # 0x8 is -0


@test
def nibble_order():
    packed = np.zeros((1, 16), np.uint8)
    packed[0, 0] = 0x72        # element 0 = code 2 (1.0), element 1 = code 7 (6.0)
    packed[0, 1] = 0x9F        # element 2 = code 15 (-6), element 3 = code 9 (-0.5)
    w = ink.mxfp4_decode(packed, np.array([[127]], np.uint8))
    assert list(w[0, :4]) == [1.0, 6.0, -6.0, -0.5], w[0, :4]
    codes = np.array([[2, 7, 15, 9] + [0] * 28], np.uint8)
    assert ink.mxfp4_pack(codes)[0, 0] == 0x72 and ink.mxfp4_pack(codes)[0, 1] == 0x9F


@test
def e8m0_bytes():
    assert ink.e8m0_value(127) == 1.0
    assert ink.e8m0_value(0) == 2.0 ** -127
    assert ink.e8m0_value(254) == 2.0 ** 127
    assert ink.e8m0_value(128) == 2.0 and ink.e8m0_value(126) == 0.5
    assert np.isnan(ink.e8m0_value(255))
    # 2^-127 is an fp32 subnormal, not zero
    assert np.float32(ink.e8m0_value(0)) == np.float32(2.0 ** -127) != 0
    codes = np.zeros((3, 32), np.uint8)
    codes[:, 0] = 1            # 0.5
    codes[:, 1] = 3            # 1.5
    w = ink.mxfp4_decode(ink.mxfp4_pack(codes), np.array([[0], [127], [254]], np.uint8))
    assert w[0, 0] == 2.0 ** -128 and w[0, 1] == 1.5 * 2.0 ** -127
    assert w[1, 0] == 0.5 and w[1, 1] == 1.5
    assert w[2, 0] == 2.0 ** 126 and w[2, 1] == 1.5 * 2.0 ** 127


@test
def scale_per_32_columns():
    codes = np.full((1, 64), 2, np.uint8)   # all 1.0
    w = ink.mxfp4_decode(ink.mxfp4_pack(codes), np.array([[130, 120]], np.uint8))
    assert np.all(w[0, :32] == 8.0) and np.all(w[0, 32:] == 2.0 ** -7)


@test
def rejects_nan_scale_and_overflow():
    codes = np.full((1, 32), 7, np.uint8)   # 6.0
    for b in (255, 254):                    # NaN byte; 6 * 2^127 overflows fp32
        try:
            ink.mxfp4_decode(ink.mxfp4_pack(codes), np.array([[b]], np.uint8), "t")
        except ink.SpecError:
            pass
        else:
            raise AssertionError("byte %d accepted" % b)
    zeros = np.zeros((1, 32), np.uint8)     # zeros under 0xFE are fine
    assert np.all(ink.mxfp4_decode(ink.mxfp4_pack(zeros), np.array([[254]], np.uint8)) == 0)


@test
def safetensors_roundtrip():
    t = {"b": np.arange(6, dtype=np.float32).reshape(2, 3), "a": bf([1.5, -2.0, np.nan]),
         "c": np.array([1, 2, 3], np.int32), "d": np.array([7, 255], np.uint8),
         "e": np.zeros((0, 4), np.float32)}
    data = st.serialize(t, {"format": "pt"})
    n = int.from_bytes(data[:8], "little")
    assert n % 8 == 0
    header = json.loads(data[8:8 + n])
    assert list(k for k in header if k != "__metadata__") == ["a", "b", "c", "d", "e"]
    assert header["a"]["data_offsets"] == [0, 6] and header["b"]["data_offsets"] == [6, 30]
    back, meta = st.parse(data)
    assert meta == {"format": "pt"}
    for k in t:
        assert back[k].dtype == t[k].dtype and back[k].shape == t[k].shape
        assert back[k].tobytes() == t[k].tobytes(), k
    assert st.serialize(t, {"format": "pt"}) == data


# ---------------------------------------------------------------------------
# routing

@test
def weights_sum_to_scale():
    lay = tiny_bf16_layer(R=4, K=2, S=2, D=2, route_scale=8.0, gs=0.6,
                          gate_w=np.zeros((6, 2)), bias=np.zeros(4, np.float32),
                          w13=np.zeros((4, 2, 2)), w2=np.zeros((4, 2, 1)),
                          sw13=np.zeros((2, 2, 2)), sw2=np.zeros((2, 2, 1)))
    scale = float(np.float32(8.0)) * float(np.float32(0.6))
    for a in ([0.3, -1.2, 2.0, 0.0], [-150.0, -200.0, -120.0, -400.0], [50.0, 60.0, -700.0, 1.0]):
        w = ink.routing_weights(lay, np.array(a, np.float32))
        assert abs(math.fsum(w.astype(np.float64)) - scale) < 1e-5 * scale, (a, w)
        assert np.all(np.isfinite(w))
    # moderate logits: equal to sigma(a)/sum(sigma) * scale
    a = np.array([0.3, -1.2, 2.0, 0.0], np.float32)
    sig = 1 / (1 + np.exp(-a.astype(np.float64)))
    want = (sig / sig.sum() * scale).astype(np.float32)
    got = ink.routing_weights(lay, a)
    assert np.all(np.abs(got - want) <= 2 * np.spacing(want)), (got, want)
    # far below -100: the log form gives the ratio exp(a_i - a_j)
    a = np.array([-150.0, -151.0], np.float32)
    got = ink.routing_weights(lay, a).astype(np.float64)
    assert abs(got[0] / got[1] - math.e) < 1e-5 and got[0] > 0


@test
def tie_rule():
    sel = np.array([0.5, 0.9, 0.7, 0.9, 0.7, 0.1], np.float32)
    assert list(ink.select_topk(sel, 1)) == [1]
    assert list(ink.select_topk(sel, 2)) == [1, 3]
    assert list(ink.select_topk(sel, 3)) == [1, 3, 2]       # 2 beats 4 at the boundary
    assert list(ink.select_topk(sel, 4)) == [1, 3, 2, 4]
    assert list(ink.select_topk(np.zeros(5, np.float32), 3)) == [0, 1, 2]
    sel = np.array([0.0, -0.0, 0.0], np.float32)             # -0 == +0: index order
    assert list(ink.select_topk(sel, 3)) == [0, 1, 2]


@test
def bias_selects_but_does_not_weigh():
    R, S, D = 3, 1, 2
    gate = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [0.25, 0.0]])
    lay0 = tiny_bf16_layer(D=D, R=R, K=1, S=S, gate_w=gate, bias=np.zeros(R, np.float32))
    lay1 = tiny_bf16_layer(D=D, R=R, K=1, S=S, gate_w=gate, bias=np.array([0, 0, 1.0], np.float32))
    x = bf([[2.0, 1.0]])
    lg = ink.gate_logits(lay0, x)
    assert list(lg[0]) == [2.0, 1.0, 1.5, 0.5]
    i0, w0 = ink.route(lay0, lg)
    i1, w1 = ink.route(lay1, lg)
    assert i0[0, 0] == 0 and i1[0, 0] == 2
    # weights come from the raw logits (2.0 vs 1.5), never the bias
    s = lambda z: 1 / (1 + math.exp(-z))
    assert abs(w0[0, 0] - s(2.0) / (s(2.0) + s(0.5))) < 1e-6   # scale 2 * 0.5 = 1
    assert abs(w1[0, 0] - s(1.5) / (s(1.5) + s(0.5))) < 1e-6
    assert abs(w1[0, 1] - s(0.5) / (s(1.5) + s(0.5))) < 1e-6


@test
def selection_in_fp32():
    # sigmoid(20) rounds to 1.0f and sigmoid(25) too: equal sel, lowest index wins
    lay = tiny_bf16_layer(D=2, R=2, K=1, S=1, gate_w=np.array([[1.0, 0], [0, 1.0], [0, 0]]),
                          bias=np.zeros(2, np.float32))
    lg = ink.gate_logits(lay, bf([[20.0, 25.0]]))
    ids, _ = ink.route(lay, lg)
    assert ids[0, 0] == 0, ids


# ---------------------------------------------------------------------------
# the layer, by hand

@test
def hand_computed_layer():
    # D=2, I=1, R=2, K=1, S=1. w13 rows: [W1; W3] interleaved per channel.
    gate = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    w13 = np.array([[[1.0, 0.0], [0.0, 2.0]],      # expert 0: g = x0, u = 2 x1
                    [[0.0, 1.0], [1.0, 1.0]]])     # expert 1: g = x1, u = x0 + x1
    w2 = np.array([[[1.0], [-1.0]], [[2.0], [0.5]]])
    sw13 = np.array([[[1.0, 1.0], [1.0, -1.0]]])   # sink: g = x0 + x1, u = x0 - x1
    sw2 = np.array([[[1.0], [3.0]]])
    lay = ink.Layer(2, 1, 2, 1, 1, 4.0, gate, np.zeros(2, np.float32), 0.5, w13, w2, sw13, sw2)
    x = bf([[1.0, 0.5]])
    res = ink.forward(lay, x)
    s = lambda z: 1 / (1 + math.exp(-z))
    silu = lambda z: z * s(z)
    # logits: 1.0, 0.5, 0.75 -> expert 0
    assert list(res["logits"][0]) == [1.0, 0.5, 0.75]
    assert list(res["topk_ids"][0]) == [0]
    w0 = s(1.0) / (s(1.0) + s(0.75)) * 2.0
    gam = s(0.75) / (s(1.0) + s(0.75)) * 2.0
    assert abs(res["topk_weights"][0, 0] - w0) < 1e-6 and abs(res["topk_weights"][0, 1] - gam) < 1e-6
    w0, gam = float(res["topk_weights"][0, 0]), float(res["topk_weights"][0, 1])
    h0 = silu(1.0) * (2 * 0.5)
    y0 = np.array([1.0 * h0, -1.0 * h0])
    hs = gam * silu(1.5) * (0.5)
    ys = np.array([hs, 3 * hs])
    want = w0 * y0 + ys
    got = res["out_exact"][0].astype(np.float64)
    assert np.all(np.abs(got - want) <= 1e-6 * np.abs(want)), (got, want)
    # serving: g, u, h rounded to bf16 (f32 first), output to bf16
    r = lambda v: float(ink.round_bf16(np.array([v]))[0])
    h0s = r(silu(r(1.0)) * r(1.0))
    hss = r(silu(r(1.5)) * r(0.5) * gam)
    wants = w0 * np.array([h0s, -h0s]) + np.array([hss, 3 * hss])
    gots = res["out_serving"][0].astype(np.float64)
    assert np.array_equal(gots, ink.round_bf16(wants)), (gots, wants)


@test
def interleave_not_chunk():
    # gate/up swapped or chunk(2) layout would give a different answer
    lay = tiny_bf16_layer(D=32, I=4, R=2, K=1, S=1, seed=5)
    x = bf(np.random.default_rng(1).standard_normal((3, 32)))
    ref = dense_reference(lay, x)
    got = ink.forward(lay, x)["out_exact"].astype(np.float64)
    assert np.allclose(got, ref, rtol=1e-5, atol=1e-6), np.max(np.abs(got - ref))
    w13c = lay.w13.copy()
    for e in range(2):   # reinterpret as chunk(2)
        w13c[e] = np.concatenate([lay.w13[e][0::2], lay.w13[e][1::2]])
    bad = ink.Layer(32, 4, 2, 1, 1, lay.route_scale, lay.gate_w, lay.bias, lay.global_scale,
                    w13c, lay.w2, lay.sw13, lay.sw2)
    assert not np.allclose(ink.forward(bad, x)["out_exact"], got, rtol=1e-3)


def dense_reference(lay, x):
    """Straightforward vectorised float64 formulation (matmul, all experts)."""
    xd = x.astype(np.float64)
    lg = (xd @ lay.gate_w.T).astype(np.float32)
    ids, w = ink.route(lay, lg)
    out = np.zeros((x.shape[0], lay.D))
    silu = lambda z: z / (1 + np.exp(-z))
    for t in range(x.shape[0]):
        for k in range(lay.K):
            e = ids[t, k]
            g = lay.w13[e][0::2] @ xd[t]
            u = lay.w13[e][1::2] @ xd[t]
            out[t] += float(w[t, k]) * (lay.w2[e] @ (silu(g) * u))
        for s in range(lay.S):
            g = lay.sw13[s][0::2] @ xd[t]
            u = lay.sw13[s][1::2] @ xd[t]
            out[t] += lay.sw2[s] @ (float(w[t, lay.K + s]) * silu(g) * u)
    return out


@test
def matches_dense_reference_mxfp4():
    rng = np.random.default_rng(11)
    R, S, D, I, K = 5, 2, 64, 64, 2
    codes13 = rng.integers(0, 16, (R, 2 * I, D), dtype=np.uint8)
    codes2 = rng.integers(0, 16, (R, D, I), dtype=np.uint8)
    w13 = ink.mxfp4_decode(ink.mxfp4_pack(codes13), rng.integers(121, 124, (R, 2 * I, D // 32)).astype(np.uint8))
    w2 = ink.mxfp4_decode(ink.mxfp4_pack(codes2), rng.integers(121, 124, (R, D, I // 32)).astype(np.uint8))
    base = tiny_bf16_layer(D=D, I=I, R=R, K=K, S=S, seed=3)
    lay = ink.Layer(D, I, R, K, S, 8.0, base.gate_w, base.bias, 0.6, w13, w2, base.sw13, base.sw2)
    x = bf(rng.standard_normal((6, D)))
    got = ink.forward(lay, x)["out_exact"].astype(np.float64)
    ref = dense_reference(lay, x)
    assert np.allclose(got, ref, rtol=1e-5, atol=1e-5 * np.max(np.abs(ref))), np.max(np.abs(got - ref))


@test
def nonfinite_rows():
    lay = tiny_bf16_layer(D=32, I=4, R=4, K=2, S=1, seed=2)
    x = np.random.default_rng(0).standard_normal((4, 32))
    x[1, 3] = np.nan
    x[2, 0] = np.inf
    res = ink.forward(lay, bf(x))
    for t in (1, 2):
        assert np.all(np.isnan(res["out_exact"][t])) and np.all(np.isnan(res["out_serving"][t].astype(np.float32)))
        assert np.all(np.isnan(res["topk_weights"][t])) and np.all(np.isnan(res["logits"][t]))
        assert list(res["topk_ids"][t]) == [0, 1]
    for t in (0, 3):
        assert np.all(np.isfinite(res["out_exact"][t])) and np.all(np.isfinite(res["topk_weights"][t]))
    ref = ink.forward(lay, bf(x[[0, 3]]))
    assert np.array_equal(ref["out_exact"], res["out_exact"][[0, 3]])


@test
def empty_input():
    lay = tiny_bf16_layer(D=32, I=4, R=4, K=2, S=1, seed=2)
    res = ink.forward(lay, bf(np.zeros((0, 32))))
    assert res["out_exact"].shape == (0, 32) and res["topk_ids"].shape == (0, 2)
    assert res["topk_weights"].shape == (0, 3) and res["logits"].shape == (0, 5)


# ---------------------------------------------------------------------------
# splits

def split_close(lay, x, kind, n, pad):
    base = ink.forward(lay, x)
    res = ink.forward(lay, x, kind, n, pad)
    assert np.array_equal(base["topk_ids"], res["topk_ids"])
    a = res["out_exact"].astype(np.float64)
    b = base["out_exact"].astype(np.float64)
    mag = np.sum(np.abs(res["partials_exact"].astype(np.float64)), axis=0) + np.abs(b)
    assert np.all(np.abs(a - b) <= n * np.finfo(np.float32).eps * mag), (kind, n, pad)
    # the partials sum (in fp32, rank order) to the output exactly
    acc = res["partials_exact"][0].copy()
    for r in range(1, res["partials_exact"].shape[0]):
        acc = acc + res["partials_exact"][r]
    assert np.array_equal(acc, res["out_exact"])
    sv = res["out_serving"].astype(np.float64)
    assert np.all(np.abs(sv - b) <= 0.05 * np.max(np.abs(b)))
    return base, res


@test
def tp_splits_sum_to_unsplit():
    lay = tiny_bf16_layer(D=32, I=64, R=4, K=2, S=2, seed=7)
    x = bf(np.random.default_rng(3).standard_normal((5, 32)))
    for n in (1, 2, 4):
        split_close(lay, x, "tp", n, 0)


@test
def ep_splits_sum_to_unsplit():
    lay = tiny_bf16_layer(D=32, I=12, R=5, K=2, S=2, seed=8)
    x = bf(np.random.default_rng(4).standard_normal((5, 32)))
    for n in (1, 2, 3, 4):
        _, res = split_close(lay, x, "ep", n, 0)
    ranks = ink.make_ranks(lay, "ep", 3)
    assert [sorted(r["routed"]) for r in ranks] == [[0, 1], [2, 3], [4, 5]]   # E_pad = 6
    assert all(r["sinks"][0][0].shape == (8, 32) for r in ranks)              # I/3 = 4 channels


@test
def padding_changes_nothing():
    lay = tiny_bf16_layer(D=32, I=12, R=4, K=2, S=1, seed=9)
    x = bf(np.random.default_rng(5).standard_normal((4, 32)))
    a = ink.forward(lay, x, "tp", 2, 0)
    b = ink.forward(lay, x, "tp", 2, 32)
    assert np.array_equal(a["out_exact"], b["out_exact"])
    assert np.array_equal(a["out_serving"].astype(np.float32), b["out_serving"].astype(np.float32))
    ranks = ink.make_ranks(lay, "tp", 2, 32)
    assert ranks[0]["routed"][0][0].shape == (64, 32) and ranks[0]["routed"][0][1].shape == (32, 32)


@test
def tp_slab_is_interleaved():
    lay = tiny_bf16_layer(D=32, I=4, R=2, K=1, S=1, seed=1)
    r1 = ink.make_ranks(lay, "tp", 2)[1]
    a13, b2 = r1["routed"][1]
    assert np.array_equal(a13, lay.w13[1][4:8])          # rows of channels 2, 3 (gate, up, gate, up)
    assert np.array_equal(b2, lay.w2[1][:, 2:4])


# ---------------------------------------------------------------------------
# generated files

@test
def manifest_matches_files():
    man_path = os.path.join(HERE, "MANIFEST.json")
    if not os.path.exists(man_path):
        return
    with open(man_path) as f:
        man = json.load(f)
    assert man["generator_version"] == "1"
    for rel, digest in man["files"].items():
        with open(os.path.join(HERE, rel), "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == digest, rel


@test
def cases_reload_and_recompute():
    # the tiny cases: load the checkpoint independently and recompute the expected outputs
    cdir = os.path.join(HERE, "cases")
    for name in ("tiny_d32_i32", "hf_spelling_moe_intermediate_size", "sharded_checkpoint"):
        path = os.path.join(cdir, name)
        if not os.path.isdir(path):
            continue
        with open(os.path.join(path, "case.json")) as f:
            cj = json.load(f)
        lay = ink.load_layer(os.path.join(path, "model"), cj["layer"])
        x, _ = st.read(os.path.join(path, "input.safetensors"))
        res = ink.forward(lay, x["x"], cj["split"]["kind"], cj["split"]["n"], cj["pad_intermediate_to"])
        ex, _ = st.read(os.path.join(path, "expected-exact.safetensors"))
        sv, _ = st.read(os.path.join(path, "expected-serving.safetensors"))
        assert ex["out"].tobytes() == res["out_exact"].tobytes(), name
        assert sv["out"].tobytes() == res["out_serving"].tobytes(), name
        assert ex["topk_ids"].tobytes() == res["topk_ids"].tobytes(), name


def main():
    passed = failed = 0
    with np.errstate(all="ignore"):
        for fn in TESTS:
            try:
                fn()
                passed += 1
            except Exception:
                failed += 1
                print("FAIL %s" % fn.__name__)
                traceback.print_exc()
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
