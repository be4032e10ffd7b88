"""Independent NumPy model of one Inkling MoE layer (docs/contract.md [math] to [sharding]).

Everything is computed in float64 with explicit rounding points:

* Products of a bf16 value and a bf16 or MXFP4 weight are exact in float64.
  Every dot product is the correctly rounded float64 sum of the float64
  products (math.fsum), so results do not depend on a BLAS or on the order of
  accumulation; a reference that accumulates in double can differ from it only
  by its own accumulation error.
* Scalar transcendental functions use Python's `math` module (the platform
  libm), never NumPy's vectorised kernels, whose last bit varies with the CPU.
* sigma(z) = 1 / (1 + exp(-z)), silu(z) = z * sigma(z), both in float64.
* bf16 rounding is always float64 -> float32 -> bf16, each round-to-nearest-even
  (ml_dtypes).

Precision contracts (contract.md [precision]):

exact    logits rounded once to fp32; selection and weights as in contract.md [routing];
         routed y_e = W2 (silu(W1 x) * (W3 x)) in float64;
         out = sum_k w_k y_k + sum_s W2_s ((gamma_s * silu(W1_s x)) * (W3_s x))
         in float64; each rank's partial rounded to fp32.
serving  g, u rounded to bf16; h = silu(g) * u (sinks: (silu(g) * u) * gamma_s)
         in float64 from those values, rounded to bf16; y = W2 h in float64;
         out = sum_k w_k y_k + sum_s W2_s h_s in float64; each rank's partial
         rounded to fp32, then to bf16.

Splits (contract.md [sharding.sum]): each rank's partial is computed from its own slabs of
the weights (with zero channels appended when a per-rank padding P is given),
rounded as above, and the partials are added in rank order in fp32; the
serving sum is then rounded to bf16.

Non-finite input rows: logits, weights and output are NaN; topk_ids are
0..K-1 (the project's choice of "valid but unspecified" indices).
"""

import fnmatch
import json
import math
import os

import ml_dtypes
import numpy as np

import safetensors_np as st

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.float32

# E2M1 code -> value; bit 3 is the sign (code 8 is -0.0).
E2M1_VALUES = np.array(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
     -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float64)

MX_BLOCK = 32
NV_BLOCK = 16
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)


class SpecError(ValueError):
    """A checkpoint or argument that the contract rejects."""


# ---------------------------------------------------------------------------
# rounding helpers

def round_f32(a):
    """float64 -> float32 (RNE), returned as float64."""
    return np.asarray(a, dtype=np.float64).astype(np.float32).astype(np.float64)


def round_bf16(a):
    """float64 -> float32 -> bf16 (each RNE), returned as float64."""
    return (np.asarray(a, dtype=np.float64).astype(np.float32)
            .astype(BF16).astype(np.float64))


def to_bf16(a):
    """float64 -> float32 -> bf16 array."""
    return np.asarray(a, dtype=np.float64).astype(np.float32).astype(BF16)


# ---------------------------------------------------------------------------
# scalar math (libm through the math module)

def _exp(z):
    try:
        return math.exp(z)
    except OverflowError:
        return math.inf


def sigmoid(z):
    return 1.0 / (1.0 + _exp(-z))


def silu(z):
    return z * sigmoid(z)


def log_sigmoid(a):
    return min(a, 0.0) - math.log1p(math.exp(-abs(a)))


def silu_vec(v):
    return np.array([silu(float(z)) for z in v], dtype=np.float64)


def dots(m, v):
    """Row-wise dot products of float64 matrix m [n, d] with vector v [d]:
    float64 products, correctly rounded float64 sum per row."""
    if m.shape[0] == 0:
        return np.zeros(0, dtype=np.float64)
    prod = m * v[None, :]
    return np.array([math.fsum(row) for row in prod.tolist()], dtype=np.float64)


def fsum_rows(stack):
    """Correctly rounded float64 sum over axis 0 of a [n, d] array."""
    if stack.shape[0] == 0:
        return np.zeros(stack.shape[1], dtype=np.float64)
    return np.array([math.fsum(col) for col in stack.T.tolist()], dtype=np.float64)


# ---------------------------------------------------------------------------
# MXFP4

def mxfp4_pack(codes):
    """codes u8 [..., C] (0..15) -> packed u8 [..., C/2]; element 2k in the low
    nibble, element 2k+1 in the high nibble."""
    codes = np.asarray(codes, dtype=np.uint8)
    if codes.shape[-1] % 2:
        raise SpecError("MXFP4 row length must be even")
    if np.any(codes > 15):
        raise SpecError("E2M1 code out of range")
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def mxfp4_unpack(packed):
    packed = np.asarray(packed, dtype=np.uint8)
    out = np.empty(packed.shape[:-1] + (packed.shape[-1] * 2,), dtype=np.uint8)
    out[..., 0::2] = packed & 0x0F
    out[..., 1::2] = packed >> 4
    return out


def e8m0_value(b):
    """E8M0 byte -> float64 2^(b-127); 0xFF is NaN."""
    b = np.asarray(b, dtype=np.int64)
    v = np.ldexp(np.ones(b.shape, dtype=np.float64), (b - 127).astype(np.int32))
    return np.where(b == 255, np.nan, v)


def mxfp4_decode(packed, scales, name="tensor"):
    """packed u8 [..., rows, C/2], scales u8 [..., rows, C/32] -> float64
    [..., rows, C], exact. Rejects NaN scale bytes and weights that are not
    finite in fp32."""
    codes = mxfp4_unpack(packed)
    cols = codes.shape[-1]
    if cols % MX_BLOCK:
        raise SpecError("%s: reduction length %d not a multiple of 32" % (name, cols))
    scales = np.asarray(scales, dtype=np.uint8)
    if scales.shape != codes.shape[:-1] + (cols // MX_BLOCK,):
        raise SpecError("%s: scale shape %r does not match %r" % (name, scales.shape, codes.shape))
    if np.any(scales == 255):
        idx = tuple(int(i) for i in np.argwhere(scales == 255)[0])
        raise SpecError("%s_scale: NaN scale byte at %r" % (name, idx))
    exps = np.repeat(scales.astype(np.int32) - 127, MX_BLOCK, axis=-1)
    w = np.ldexp(E2M1_VALUES[codes], exps)
    if not np.all(np.isfinite(w.astype(np.float32))):
        idx = tuple(int(i) for i in np.argwhere(~np.isfinite(w.astype(np.float32)))[0])
        raise SpecError("%s: weight not finite in fp32 at %r" % (name, idx))
    return w


# ---------------------------------------------------------------------------
# NVFP4 (ModelOpt): E2M1 codes packed as MXFP4, one float8_e4m3fn scale per 16
# elements, one fp32 scale2 per expert. W = E2M1(code) * e4m3(scale) * scale2,
# exact in float64 (2 + 4 + 24 significant bits).

def nvfp4_decode(packed, scales, scale2, name="tensor"):
    """packed u8 [R, rows, C/2], scales float8_e4m3fn [R, rows, C/16] (or the
    same bytes as u8), scale2 fp32 [R] -> float64 [R, rows, C]. Rejects NaN
    scales and scale2 values that are negative or not finite."""
    codes = mxfp4_unpack(packed)
    cols = codes.shape[-1]
    if cols % NV_BLOCK:
        raise SpecError("%s: reduction length %d not a multiple of 16" % (name, cols))
    scales = np.asarray(scales)
    if scales.dtype != E4M3:
        scales = np.asarray(scales, dtype=np.uint8).view(E4M3)
    if scales.shape != codes.shape[:-1] + (cols // NV_BLOCK,):
        raise SpecError("%s.scale: shape %r does not match %r" % (name, scales.shape, codes.shape))
    sv = scales.astype(np.float64)
    if np.any(np.isnan(sv)):
        idx = tuple(int(i) for i in np.argwhere(np.isnan(sv))[0])
        raise SpecError("%s.scale: NaN E4M3 byte at %r" % (name, idx))
    s2 = np.asarray(scale2, dtype=np.float32).astype(np.float64)
    if s2.shape != (codes.shape[0],):
        raise SpecError("%s.scale2: shape %r, expected [%d]" % (name, s2.shape, codes.shape[0]))
    bad = ~np.isfinite(s2) | (s2 < 0)
    if np.any(bad):
        raise SpecError("%s.scale2: value %r at expert %d" % (name, s2[bad][0], int(np.argwhere(bad)[0][0])))
    w = E2M1_VALUES[codes] * np.repeat(sv, NV_BLOCK, axis=-1) * s2[:, None, None]
    if not np.all(np.isfinite(w.astype(np.float32))):
        raise SpecError("%s.scale2: a weight is not finite in fp32" % name)
    return w


# ---------------------------------------------------------------------------
# the layer

class Layer:
    """Decoded float64 weights of one MoE layer plus its fp32 routing constants."""

    def __init__(self, D, I, R, K, S, route_scale, gate_w, bias, global_scale,
                 w13, w2, sw13, sw2):
        self.D, self.I, self.R, self.K, self.S = int(D), int(I), int(R), int(K), int(S)
        if not (1 <= self.K <= self.R):
            raise SpecError("num_experts_per_tok: K=%d must be in [1, R=%d]" % (K, R))
        self.route_scale = float(np.float32(route_scale))
        self.global_scale = float(np.float32(global_scale))
        self.gate_w = np.asarray(gate_w, dtype=np.float64)          # [R+S, D]
        self.bias = np.asarray(bias, dtype=np.float32)               # [R]
        self.w13 = np.asarray(w13, dtype=np.float64)                 # [R, 2I, D]
        self.w2 = np.asarray(w2, dtype=np.float64)                   # [R, D, I]
        self.sw13 = np.asarray(sw13, dtype=np.float64)               # [S, 2I, D]
        self.sw2 = np.asarray(sw2, dtype=np.float64)                 # [S, D, I]
        G = self.R + self.S
        for name, arr, shape in (
                ("gate.weight", self.gate_w, (G, self.D)),
                ("gate.bias", self.bias, (self.R,)),
                ("experts.w13_weight", self.w13, (self.R, 2 * self.I, self.D)),
                ("experts.w2_weight", self.w2, (self.R, self.D, self.I)),
                ("shared_experts.shared_w13_weight", self.sw13, (self.S, 2 * self.I, self.D)),
                ("shared_experts.shared_w2_weight", self.sw2, (self.S, self.D, self.I))):
            if arr.shape != shape:
                raise SpecError("%s: shape %r, expected %r" % (name, arr.shape, shape))

    @property
    def scale(self):
        """route_scale * global_scale, float64 product of the fp32 values."""
        return self.route_scale * self.global_scale


def nonfinite_rows(x):
    x = np.asarray(x).astype(np.float64)
    if x.shape[0] == 0:
        return np.zeros(0, dtype=bool)
    return ~np.all(np.isfinite(x), axis=1)


def gate_logits(layer, x):
    """x bf16 [T, D] -> fp32 logits [T, R+S] (NaN rows for non-finite input)."""
    xd = np.asarray(x).astype(np.float64)
    T = xd.shape[0]
    G = layer.R + layer.S
    bad = nonfinite_rows(xd)
    out = np.full((T, G), np.nan, dtype=np.float32)
    for t in range(T):
        if not bad[t]:
            out[t] = dots(layer.gate_w, xd[t]).astype(np.float32)
    return out


def select_topk(sel, K):
    """sel fp32 [R] -> K indices: the K largest, ties to the lowest index,
    slot order descending sel, equal values by ascending index."""
    sel = np.asarray(sel, dtype=np.float32)
    idx = np.arange(sel.shape[0])
    # lexsort: last key is primary. -sel as float64 is exact.
    order = np.lexsort((idx, -sel.astype(np.float64)))
    return order[:K].astype(np.int32)


def selection_scores(layer, logits_row):
    """fp32 sel[e] = fp32(sigmoid(logit)) + bias (fp32 add), e < R."""
    sig = np.array([sigmoid(float(z)) for z in logits_row[:layer.R]], dtype=np.float64)
    return sig.astype(np.float32) + layer.bias


def routing_weights(layer, a):
    """a: fp32 [K+S] (selected logits then sink logits) -> fp32 weights."""
    lam = np.array([log_sigmoid(float(v)) for v in a], dtype=np.float64)
    m = float(np.max(lam))
    e = np.array([math.exp(float(v) - m) for v in lam], dtype=np.float64)
    tot = math.fsum(e.tolist())
    w = e / tot * layer.scale
    return w.astype(np.float32)


def route(layer, logits):
    """logits fp32 [T, R+S] -> (topk_ids i32 [T, K], topk_weights fp32 [T, K+S])."""
    T = logits.shape[0]
    K, R, S = layer.K, layer.R, layer.S
    ids = np.zeros((T, K), dtype=np.int32)
    wts = np.full((T, K + S), np.nan, dtype=np.float32)
    for t in range(T):
        row = logits[t]
        if not np.all(np.isfinite(row)):
            ids[t] = np.arange(K, dtype=np.int32)
            continue
        sel = selection_scores(layer, row)
        ids[t] = select_topk(sel, K)
        a = np.concatenate([row[ids[t]], row[R:R + S]]).astype(np.float32)
        wts[t] = routing_weights(layer, a)
    return ids, wts


# ---------------------------------------------------------------------------
# splits

def _pad_width(width, pad):
    if pad and pad > 0:
        return -(-width // pad) * pad
    return width


def _slab(w13, w2, lo, hi, pad):
    """Channels [lo, hi) of one expert: w13 rows [2lo, 2hi) (interleaved),
    w2 columns [lo, hi); zero channels appended up to a multiple of pad."""
    a = w13[2 * lo:2 * hi]
    b = w2[:, lo:hi]
    width = hi - lo
    pw = _pad_width(width, pad)
    if pw > width:
        a = np.concatenate([a, np.zeros((2 * (pw - width), a.shape[1]))], axis=0)
        b = np.concatenate([b, np.zeros((b.shape[0], pw - width))], axis=1)
    return a, b


def make_ranks(layer, kind="none", n=1, pad=0):
    """Per-rank weights. Each rank: {"routed": {expert id: (w13 slab, w2 slab)},
    "sinks": [(w13 slab, w2 slab), ...]}."""
    I, R = layer.I, layer.R
    if kind == "none":
        if n != 1:
            raise SpecError("split none needs n=1")
        ranks = [{"routed": {e: _slab(layer.w13[e], layer.w2[e], 0, I, pad) for e in range(R)},
                  "sinks": [_slab(layer.sw13[s], layer.sw2[s], 0, I, pad) for s in range(layer.S)]}]
    elif kind == "tp":
        if n < 1 or I % n:
            raise SpecError("--tp %d does not divide intermediate_size %d" % (n, I))
        it = I // n
        ranks = []
        for r in range(n):
            lo, hi = r * it, (r + 1) * it
            ranks.append({
                "routed": {e: _slab(layer.w13[e], layer.w2[e], lo, hi, pad) for e in range(R)},
                "sinks": [_slab(layer.sw13[s], layer.sw2[s], lo, hi, pad) for s in range(layer.S)]})
    elif kind == "ep":
        if n < 1 or I % n:
            raise SpecError("--ep %d does not divide the sink intermediate_size %d" % (n, I))
        e_pad = R + ((-R) % n)
        per = e_pad // n
        it = I // n
        zero13 = np.zeros((2 * I, layer.D))
        zero2 = np.zeros((layer.D, I))
        ranks = []
        for r in range(n):
            routed = {}
            for e in range(r * per, (r + 1) * per):
                if e < R:
                    routed[e] = _slab(layer.w13[e], layer.w2[e], 0, I, pad)
                else:  # padding expert: zeros, never selected
                    routed[e] = _slab(zero13, zero2, 0, I, pad)
            lo, hi = r * it, (r + 1) * it
            ranks.append({
                "routed": routed,
                "sinks": [_slab(layer.sw13[s], layer.sw2[s], lo, hi, pad) for s in range(layer.S)]})
    else:
        raise SpecError("unknown split kind %r" % kind)
    return ranks


# ---------------------------------------------------------------------------
# forward

def _rank_partials(layer, rank, xt, ids_t, w_t):
    """One token on one rank -> (exact partial f64 [D], serving partial f64 [D]),
    both before the partial's final rounding."""
    K = layer.K
    ex_terms = []
    sv_terms = []
    for k in range(K):
        e = int(ids_t[k])
        if e not in rank["routed"]:
            continue
        a13, b2 = rank["routed"][e]
        gu = dots(a13, xt)
        g, u = gu[0::2], gu[1::2]
        wk = float(w_t[k])
        # exact
        h = silu_vec(g) * u
        y = dots(b2, h)
        ex_terms.append(wk * y)
        # serving
        gb, ub = round_bf16(g), round_bf16(u)
        hb = round_bf16(silu_vec(gb) * ub)
        yb = dots(b2, hb)
        sv_terms.append(wk * yb)
    for s, (a13, b2) in enumerate(rank["sinks"]):
        gamma = float(w_t[K + s])
        gu = dots(a13, xt)
        g, u = gu[0::2], gu[1::2]
        h = (gamma * silu_vec(g)) * u
        ex_terms.append(dots(b2, h))
        gb, ub = round_bf16(g), round_bf16(u)
        hb = round_bf16((silu_vec(gb) * ub) * gamma)
        sv_terms.append(dots(b2, hb))
    D = layer.D
    ex = fsum_rows(np.array(ex_terms).reshape(-1, D))
    sv = fsum_rows(np.array(sv_terms).reshape(-1, D))
    return ex, sv


def forward(layer, x, kind="none", n=1, pad=0):
    """Run the layer. x: bf16 [T, D]. Returns a dict with
    logits fp32 [T, R+S], topk_ids i32 [T, K], topk_weights fp32 [T, K+S],
    out_exact fp32 [T, D], out_serving bf16 [T, D], and the per-rank partials
    (partials_exact fp32 [n, T, D], partials_serving bf16 [n, T, D])."""
    x = np.asarray(x)
    if x.dtype != BF16:
        raise SpecError("x: dtype must be bf16")
    if x.ndim != 2 or x.shape[1] != layer.D:
        raise SpecError("x: shape %r, expected [T, %d]" % (x.shape, layer.D))
    T, D = x.shape
    xd = x.astype(np.float64)
    bad = nonfinite_rows(xd)
    logits = gate_logits(layer, x)
    ids, wts = route(layer, logits)
    ranks = make_ranks(layer, kind, n, pad)
    nr = len(ranks)
    pex = np.zeros((nr, T, D), dtype=np.float32)
    psv = np.zeros((nr, T, D), dtype=BF16)
    for t in range(T):
        if bad[t]:
            pex[:, t, :] = np.nan
            psv[:, t, :] = np.nan
            continue
        for r, rank in enumerate(ranks):
            ex, sv = _rank_partials(layer, rank, xd[t], ids[t], wts[t])
            pex[r, t] = ex.astype(np.float32)
            psv[r, t] = to_bf16(sv)
    out_ex = pex[0].copy() if nr else np.zeros((T, D), np.float32)
    acc_sv = psv[0].astype(np.float32) if nr else np.zeros((T, D), np.float32)
    for r in range(1, nr):
        out_ex = (out_ex + pex[r]).astype(np.float32)
        acc_sv = (acc_sv + psv[r].astype(np.float32)).astype(np.float32)
    out_sv = acc_sv.astype(BF16)
    # Non-finite rows: all NaN (already NaN, but make it explicit).
    out_ex[bad] = np.nan
    out_sv[bad] = np.nan
    return {
        "logits": logits, "topk_ids": ids, "topk_weights": wts,
        "out_exact": out_ex, "out_serving": out_sv,
        "partials_exact": pex, "partials_serving": psv,
    }


# ---------------------------------------------------------------------------
# loading a checkpoint (config.json + safetensors), independent of the generator

def read_text_config(model_dir):
    with open(os.path.join(model_dir, "config.json"), "r", encoding="utf-8") as f:
        cfg = json.load(f)
    text = cfg.get("text_config", cfg)
    def need(key):
        if key not in text:
            raise SpecError("config.json: missing %s" % key)
        return text[key]
    if "moe_intermediate_size" in text:
        I = text["moe_intermediate_size"]
    else:
        I = need("intermediate_size")
    out = {
        "D": int(need("hidden_size")), "I": int(I),
        "R": int(need("n_routed_experts")), "K": int(need("num_experts_per_tok")),
        "S": int(need("n_shared_experts")), "route_scale": float(need("route_scale")),
        "use_gate_bias": bool(text.get("use_gate_bias", False)),
        "use_global_scale": bool(text.get("use_global_scale", False)),
        "quantization_config": cfg.get("quantization_config"),
    }
    hf = os.path.join(model_dir, "hf_quant_config.json")
    if os.path.exists(hf):
        with open(hf, "r", encoding="utf-8") as f:
            q = json.load(f)["quantization"]
        qc = dict(out["quantization_config"] or {})
        if "quant_algo" in q and qc.get("quant_algo", q["quant_algo"]) != q["quant_algo"]:
            raise SpecError("hf_quant_config.json: quant_algo disagrees with config.json")
        qc["quant_algo"] = q.get("quant_algo", qc.get("quant_algo"))
        qc["exclude_modules"] = list(qc.get("exclude_modules") or []) + list(q.get("exclude_modules") or [])
        out["quantization_config"] = qc
    return out


def _module_excluded(listed, module):
    """An entry equal to the module, a glob matching it, or a parent module."""
    for e in listed:
        if e == module or fnmatch.fnmatchcase(module, e) or module.startswith(e + "."):
            return True
    return False


def _check_sidecars(tensors, name, unpacked, required):
    amax = tensors.get(name + ".input_amax")
    if amax is None:
        if required:
            raise SpecError("missing tensor %s.input_amax" % name)
    else:
        v = float(np.asarray(amax).astype(np.float32).reshape(-1)[0])
        if amax.size != 1 or not (math.isfinite(v) and v > 0):
            raise SpecError("%s.input_amax: %r" % (name, v))
    shape = tensors.get(name + ".original_shape")
    if shape is None:
        if required:
            raise SpecError("missing tensor %s.original_shape" % name)
    elif [int(v) for v in shape.reshape(-1)] != list(unpacked):
        raise SpecError("%s.original_shape: %r, expected %r" % (name, shape.tolist(), list(unpacked)))


def read_checkpoint_tensors(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    tensors = {}
    if os.path.exists(index):
        with open(index, "r", encoding="utf-8") as f:
            wm = json.load(f)["weight_map"]
        for fname in sorted(set(wm.values())):
            part, _ = st.read(os.path.join(model_dir, fname))
            for k, v in part.items():
                if wm.get(k) != fname:
                    raise SpecError("%s: tensor %s not in the weight map for this file" % (fname, k))
                tensors[k] = v
        missing = set(wm) - set(tensors)
        if missing:
            raise SpecError("weight map names missing tensors: %s" % sorted(missing)[0])
    else:
        tensors, _ = st.read(os.path.join(model_dir, "model.safetensors"))
    return tensors


def load_layer(model_dir, layer_idx):
    cfg = read_text_config(model_dir)
    tensors = read_checkpoint_tensors(model_dir)
    D, I, R, K, S = cfg["D"], cfg["I"], cfg["R"], cfg["K"], cfg["S"]
    p = "model.llm.layers.%d.mlp." % layer_idx

    def get(name, dtype):
        key = p + name
        if key not in tensors:
            raise SpecError("missing tensor %s" % key)
        arr = tensors[key]
        if arr.dtype != np.dtype(dtype):
            raise SpecError("%s: dtype %s" % (key, arr.dtype))
        return arr

    gate_w = get("gate.weight", BF16).astype(np.float64)
    bias = get("gate.bias", np.float32) if cfg["use_gate_bias"] else np.zeros(R, np.float32)
    if cfg["use_global_scale"]:
        gs_arr = tensors.get(p + "gate.global_scale")
        if gs_arr is None:
            raise SpecError("missing tensor %sgate.global_scale" % p)
        if gs_arr.shape != (1,) or gs_arr.dtype not in (np.dtype(np.float32), BF16):
            raise SpecError("%sgate.global_scale: bad shape or dtype" % p)
        gs = float(gs_arr.astype(np.float32)[0])
    else:
        gs = 1.0
    w13 = tensors[p + "experts.w13_weight"]
    w2 = tensors[p + "experts.w2_weight"]
    mx = w13.dtype == np.uint8
    nv = mx and (p + "experts.w13_weight.scale") in tensors
    fmt = "NVFP4" if nv else "MXFP4" if mx else "bf16"
    qc = cfg["quantization_config"]
    if qc is not None:
        # Quark's exclude and ModelOpt's exclude_modules; the module, or both weight names exactly
        listed = list(qc.get("exclude") or []) + list(qc.get("exclude_modules") or [])
        names = {p + "experts.w13_weight", p + "experts.w2_weight"}
        if len(names & set(listed)) == 1:
            raise SpecError("quantization_config: only one of %s listed" % " and ".join(sorted(names)))
        excluded = _module_excluded(listed, p + "experts") or names <= set(listed)
        want = "bf16" if excluded else ("NVFP4" if qc.get("quant_algo") == "NVFP4" else "MXFP4")
        if fmt != want:
            raise SpecError("quantization_config: %sexperts expected %s but stored as %s" % (p, want, fmt))
    if nv:
        for name, rows, cols in (("w13_weight", 2 * I, D), ("w2_weight", D, I)):
            _check_sidecars(tensors, p + "experts." + name, (R, rows, cols), True)
        s13 = tensors[p + "experts.w13_weight.scale"].reshape(R, 2 * I, D // NV_BLOCK)
        s2 = tensors[p + "experts.w2_weight.scale"].reshape(R, D, I // NV_BLOCK)
        w13d = nvfp4_decode(w13, s13, tensors[p + "experts.w13_weight.scale2"], p + "experts.w13_weight")
        w2d = nvfp4_decode(w2, s2, tensors[p + "experts.w2_weight.scale2"], p + "experts.w2_weight")
    elif mx:
        for name, rows, cols in (("w13_weight", 2 * I, D), ("w2_weight", D, I)):
            _check_sidecars(tensors, p + "experts." + name, (R, rows, cols), False)
        s13 = tensors[p + "experts.w13_weight_scale"].reshape(R, 2 * I, D // MX_BLOCK)
        s2 = tensors[p + "experts.w2_weight_scale"].reshape(R, D, I // MX_BLOCK)
        w13d = mxfp4_decode(w13, s13, p + "experts.w13_weight")
        w2d = mxfp4_decode(w2, s2, p + "experts.w2_weight")
    else:
        w13d = w13.astype(np.float64)
        w2d = w2.astype(np.float64)
    sw13 = get("shared_experts.shared_w13_weight", BF16).astype(np.float64)
    sw2 = get("shared_experts.shared_w2_weight", BF16).astype(np.float64)
    return Layer(D, I, R, K, S, cfg["route_scale"], gate_w, bias, gs, w13d, w2d, sw13, sw2)
