"""PyTorch parity harness: safetensors in numpy, running an mt driver, comparing results.

Run with Debian's /usr/bin/python3 (python3-torch, python3-numpy). MT_BUILD names mt's build
directory (default: build). A comparison passes when max|mt - torch| <= tol * max|torch|.
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

BUILD = os.environ.get("MT_BUILD", "build")


def save(path, tensors, meta=None):
    """Writes a dict of float32 arrays (and string metadata) as safetensors."""
    header, blobs, off = {}, [], 0
    if meta:
        header["__metadata__"] = {k: str(v) for k, v in meta.items()}
    for name, arr in tensors.items():
        a = np.ascontiguousarray(arr, dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def load(path):
    """Reads safetensors (F32) into (dict of arrays, metadata dict)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        assert e["dtype"] == "F32", f"{name}: dtype {e['dtype']}"
        b, en = e["data_offsets"]
        out[name] = np.frombuffer(data[b:en], dtype="<f4").reshape(e["shape"]).copy()
    return out, meta


def run_driver(driver, tensors, meta):
    """Runs build/tests/parity/<driver>_driver on the tensors; returns its output tensors."""
    exe = os.path.join(BUILD, "tests", "parity", driver + "_driver")
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.safetensors"), os.path.join(d, "out.safetensors")
        save(src, tensors, meta)
        subprocess.run([exe, src, dst], check=True)
        return load(dst)[0]


def methods():
    """The methods mt has, from its enum tables (build/methods.json, written by scripts/methods.c):
    a config key ("norm", "placement", "act", "optim", ..., "model") -> {name: help}, in the
    enum's order."""
    with open(os.path.join(BUILD, "methods.json")) as f:
        return json.load(f)


def header(path):
    """The header of a safetensors file: ({name: its entry}, in the file's order; metadata)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        entries = json.loads(f.read(n))
    return entries, entries.pop("__metadata__", {})


def param_kind(name, role):
    """What random_params draws for a parameter, from its name and its role in mt's table."""
    if role in ("matrix", "head", "embedding", "bias"):
        return {"matrix": "m", "head": "m", "embedding": "e", "bias": "b"}[role]
    if role == "buffer":
        return {"running_mean": "rm", "running_var": "rv"}[name.rsplit(".", 1)[-1]]
    last = name.rsplit(".", 1)[-1]
    if last == "g":  # ScaleNorm's gain, or the l2 QK-norm's
        return "q2" if name.endswith(("q_norm.g", "k_norm.g")) else "g"
    return {"weight": "w", "bias": "b", "alpha": "a", "shift": "s", "emb_scale": "g",
            "sink": "z", "lambda_v1": "l", "lambda_v": "l", "lambda_e": "l", "static_alpha": "hs",
            "static_beta": "hs", "dynamic_alpha_fn": "hf", "dynamic_beta_fn": "hf",
            "dynamic_alpha_scale": "hk", "dynamic_beta_scale": "hk", "b_pre": "hs",
            "b_post": "hs", "b_res": "hs", "phi_pre": "hf", "phi_post": "hf", "phi_res": "hf",
            "alpha_pre": "hk", "alpha_post": "hk", "alpha_res": "hk", "resid_lambda": "w",
            "x0_lambda": "l", "skip_weight": "w"}[last]


_LAYOUT = []  # the layout driver, started by the first call of layout


def layout(model, cfg):
    """The parameters (and buffers) mt builds for model (gpt, vit, encdec) from cfg, as its
    checkpoints hold them (one layout_driver serves the test): name -> (shape, role), in mt's
    table order. A config mt refuses is an error naming why."""
    if not _LAYOUT:
        exe = os.path.join(BUILD, "tests", "parity", "layout_driver")
        _LAYOUT.append(subprocess.Popen([exe], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True))
        _LAYOUT.append(tempfile.TemporaryDirectory())
    driver, tmp = _LAYOUT
    path = os.path.join(tmp.name, "layout.safetensors")
    driver.stdin.write(f"{model} {path} {json.dumps(cfg)}\n")
    driver.stdin.flush()
    answer = driver.stdout.readline().strip()
    if answer != "ok":
        raise RuntimeError(f"layout_driver: {model} {cfg}: {answer or 'no answer'}")
    entries, meta = header(path)
    roles = json.loads(meta["roles"])
    return {name: (tuple(e["shape"]), roles[name]) for name, e in entries.items()}


def random_params(model, cfg, rng):
    """Random parameters for the layout mt builds for model from cfg (layout), name -> float32
    array, drawn from rng in mt's table order at about the scale each kind acts at: m a matrix
    (rows of norm about 1.2), e an embedding, w a norm's weight, b a bias, g and q2 the l2 norms'
    and QK-norm's gains (q.k g^2 / sqrt(HS) of order 1), a DyT's and Derf's alpha (about the
    papers' 0.5), s Derf's shift, z the attention's sink logits (about a score's size), l the
    value residual's and the value embeddings' lambdas (about their 1/2) and the stack's
    x0_lambda (resid_lambda and skip_weight: w), rm and rv BatchNorm's running mean and variance,
    hs hyper-connections' static weights or mHC's logits (about their 0 and 1), hf their dynamic
    projections (tanh's argument of order 1), hk their dynamic scales (larger than the papers'
    0.01 init, so that the dynamic terms count)."""
    C = cfg["n_embd"]
    out = {}
    for name, (shape, role) in layout(model, cfg).items():
        z, kind = rng.standard_normal(shape), param_kind(name, role)
        v = {"m": lambda: z * 1.2 / math.sqrt(shape[-1]), "e": lambda: 0.5 * z,
             "w": lambda: 1 + 0.2 * z, "b": lambda: 0.1 * z,
             "g": lambda: math.sqrt(C) * (1 + 0.1 * z),
             "q2": lambda: (C // cfg["n_head"]) ** 0.5 * (1 + 0.1 * z),
             "a": lambda: 0.6 + 0.2 * z, "s": lambda: 0.2 * z, "z": lambda: 0.5 + z, "l": lambda: 0.5 + 0.2 * z,
             "rm": lambda: 0.3 * z, "rv": lambda: 0.5 + rng.random(shape),
             "hs": lambda: 0.5 + 0.5 * z, "hf": lambda: z / math.sqrt(C),
             "hk": lambda: 0.3 + 0.1 * z}[kind]()
        out[name] = v.astype(np.float32)
    return out


def check_sizes(R, label, params, sizes):
    """The shapes of params (mt's layout) that the config fixes and torch would not notice (it
    slices the position embeddings, takes an FFN's width or a head's classes as they come):
    sizes, name -> shape."""
    for name, shape in sizes.items():
        R.check(f"{label} {name} shape", params[name].shape, shape, 0)


def bf16_missing():
    """Why this build or CPU cannot multiply in bf16 (gpt_driver --bf16-check, mt_bf16_check), or
    None where it can."""
    probe = subprocess.run([os.path.join(BUILD, "tests", "parity", "gpt_driver"), "--bf16-check"],
                           capture_output=True, text=True)
    return probe.stderr.strip() if probe.returncode == 3 else None


def run_op(driver, op, xs, dy, grad, **opts):
    """One op through a driver: xs the inputs, dy the upstream grad, grad a list of bools."""
    tensors = {f"x{i}": x for i, x in enumerate(xs)}
    tensors["dy"] = dy
    meta = {"op": op, "grad": "".join("1" if g else "0" for g in grad)}
    meta.update(opts)
    return run_driver(driver, tensors, meta)


def k_bias_vanishes(cfg):
    """Whether the k_proj bias's true gradient is 0: q.(k + b) shifts a row of scores by a
    constant, which softmax does not see; not under a QK-norm (not linear), nor with a sink
    logit (which the shift does not move) or Softpick (not shift-invariant)."""
    return (cfg.get("qk_norm", "none") == "none" and not cfg.get("attn_sink")
            and cfg.get("softmax", "softmax") == "softmax")


# mHC's res and pre weights whose true gradient can vanish, leaving both sides rounding noise:
# the res mix of the first sublayer (its N streams are equal copies, and a row-stochastic mix of
# equal streams is that stream), of the last (the streams' sum reads the column sums, which
# Sinkhorn-Knopp has converged to 1), and the pre weights of the first (its norm removes the
# scale of sum_i pre_i x): measured against the sublayer's b_post gradient
MHC_VANISHING = tuple(f"{w}_{g}" for w in ("b", "phi", "alpha") for g in ("pre", "res"))


def check_model(R, label, got, logits, loss, model, tol):
    """A driver's output (got: logits, loss, grad.<name>) against a torch model's (logits, loss
    and model.p, name -> parameter with its .grad): the values, every gradient, and the names.
    The k_proj bias's true gradient is 0 where k_bias_vanishes, so both sides hold rounding noise: measured against the q_proj bias's gradient. ScaleNorm's
    dL/dg = sum(dy * xh) can cancel to 1e-4 of its terms: measured against the sum of |terms|
    (model.g_terms, when the model records them), as are the other learned scalars' gradients
    (DyT's and Derf's alpha and shift, the embedding scale: model.terms); mHC's weights of
    MHC_VANISHING against their sublayer's b_post gradient."""
    R.check(f"{label} logits", got["logits"], logits.detach().numpy(), tol)
    R.check(f"{label} loss", got["loss"], loss.detach().numpy().reshape(1), tol)
    names = {k[5:] for k in got if k.startswith("grad.")}
    if names != set(model.p):
        R.check(f"{label} parameter names", sorted(names), sorted(model.p))
    for name, t in model.p.items():
        if t.grad is None:  # a parameter of mt's layout that the torch model does not read
            R.check(f"{label} grad {name}: torch's model reads it", [0.0], [1.0])
            continue
        want = t.grad.numpy().reshape(got["grad." + name].shape)
        scale = 1.0
        if name.endswith("k_proj.bias") and k_bias_vanishes(model.cfg):
            scale = np.abs(model.p[name.replace("k_proj", "q_proj")].grad.numpy()).max()
        elif model.cfg.get("residual") == "mhc" and name.endswith(MHC_VANISHING):
            scale = np.abs(model.p[name.rsplit(".", 1)[0] + ".b_post"].grad.numpy()).max()
        elif name in getattr(model, "terms", {}):
            scale = model.terms[name]
        elif name.endswith(".g") and hasattr(model, "g_terms"):
            scale = model.g_terms[name[:-2]]
        R.check(f"{label} grad {name}", got["grad." + name], want,
                tol * max(1.0, scale / max(np.abs(want).max(), 1e-30)))


class Report:
    """Counts comparisons; finish() prints a summary and exits non-zero on any failure."""

    def __init__(self, name):
        self.name, self.n, self.failed = name, 0, []

    def check(self, what, got, want, tol=1e-5):
        got = np.asarray(got, dtype=np.float64)
        want = np.asarray(want, dtype=np.float64)
        self.n += 1
        if got.shape != want.shape:
            self.failed.append(what)
            print(f"FAIL {what}: shape {got.shape} vs torch {want.shape}")
            return
        scale = max(np.abs(want).max(initial=0.0), 1e-30)
        err = np.abs(got - want).max(initial=0.0) / scale
        if not err <= tol:  # also catches NaN
            self.failed.append(what)
            print(f"FAIL {what}: relative error {err:.3g} > {tol:g}")

    def finish(self):
        if self.failed:
            print(f"{self.name}: {len(self.failed)} of {self.n} comparisons failed")
            sys.exit(1)
        print(f"{self.name}: {self.n} comparisons with torch agree")
        sys.exit(0)
