"""The GPT against a PyTorch model written here, on the same weights (passed by their mt names):
logits, loss and the gradient of every parameter, to 1e-4 relative, for every norm the GPT
accepts x every placement (Sub-LN's and Peri-LN's extra norms included; 2 to 3 layers, n_head > 1), with the head tied and once untied, biases
on and once off, and each activation."""
import json
import math

import numpy as np
import torch

from harness import Report, run_driver
from torch_gpt import FINAL_NORM, TorchGPT

rng = np.random.default_rng(0)
R = Report("parity gpt")
TOL = 1e-4


def norm_params(cfg):
    """(suffix, kind) of a norm's parameters, as the mt table names them."""
    kind = cfg["norm"]
    if kind in ("ln", "gn"):
        return [("weight", "w"), ("bias", "b")]
    if kind == "rms" and cfg.get("rms_form") == "paper" and cfg.get("rms_bias"):
        return [("weight", "w"), ("bias", "b")]
    if kind in ("rms", "prms"):
        return [("weight", "w")]
    if kind == "scale":
        return [("g", "g")]
    return []


def n_ff(cfg):
    """The FFN width: n_ff, or by default 4 n_embd, and for SwiGLU LLaMA's int(2 (4 n_embd) / 3)
    rounded up to a multiple of ff_multiple (its ModelArgs.multiple_of)."""
    if cfg["n_ff"]:
        return cfg["n_ff"]
    if cfg["act"] != "swiglu":
        return 4 * cfg["n_embd"]
    m = cfg.get("ff_multiple", 32)
    return (int(2 * 4 * cfg["n_embd"] / 3) + m - 1) // m * m


def param_shapes(cfg):
    """Every parameter the GPT must have, name -> (shape, kind), in torch.nn's layout."""
    C, V, Fw, L = cfg["n_embd"], cfg["n_vocab"], n_ff(cfg), cfg["n_layer"]
    KV = C // cfg["n_head"] * cfg.get("n_kv_head", cfg["n_head"])  # k_proj's, v_proj's outputs
    shapes = {"tok_emb.weight": ((V, C), "e")}
    if cfg.get("pos", "learned") == "learned":
        shapes["pos_emb.weight"] = ((cfg["n_ctx"], C), "e")

    def norm(prefix, width=C):
        for suffix, kind in norm_params(cfg):
            shapes[f"{prefix}.{suffix}"] = ((1,) if kind == "g" else (width,), kind)

    def linear(prefix, out, inp):
        shapes[prefix + ".weight"] = ((out, inp), "m")
        if cfg["bias"]:
            shapes[prefix + ".bias"] = ((out,), "b")

    subln, peri = cfg["placement"] == "subln", cfg["placement"] == "peri"
    for i in range(L):
        norm(f"blocks.{i}.attn_norm")
        for proj, out in (("q_proj", C), ("k_proj", KV), ("v_proj", KV), ("out_proj", C)):
            linear(f"blocks.{i}.attn.{proj}", out, C)
        if subln:
            norm(f"blocks.{i}.attn.inner_norm")
        if peri:
            norm(f"blocks.{i}.attn_out_norm")
        norm(f"blocks.{i}.ffn_norm")
        linear(f"blocks.{i}.ffn.fc1", Fw, C)
        linear(f"blocks.{i}.ffn.fc2", C, Fw)
        if cfg["act"] == "swiglu":
            linear(f"blocks.{i}.ffn.fc3", Fw, C)
        if subln:
            norm(f"blocks.{i}.ffn.inner_norm", Fw)
        if peri:
            norm(f"blocks.{i}.ffn_out_norm")
    if cfg["placement"] in FINAL_NORM:
        norm("final_norm")
    if not cfg["tied"]:
        shapes["lm_head.weight"] = ((V, C), "m")
    return shapes


def random_params(cfg):
    C = cfg["n_embd"]
    out = {}
    for name, (shape, kind) in param_shapes(cfg).items():
        z = rng.standard_normal(shape)
        if kind == "m":
            v = z * 1.2 / math.sqrt(shape[1])
        elif kind == "e":
            v = 0.5 * z
        elif kind == "w":
            v = 1 + 0.2 * z
        elif kind == "g":
            v = math.sqrt(C) * (1 + 0.1 * z)
        else:
            v = 0.1 * z
        out[name] = v.astype(np.float32)
    return out


NORMS = [("ln", {}), ("rms", {"rms_form": "llama"}),
         ("rms", {"rms_form": "paper", "rms_bias": True, "norm_eps": 1e-8}),
         ("prms", {"prms_p": 0.25}), ("gn", {"gn_groups": 4}), ("scale", {}), ("none", {})]
ACTS = ["gelu", "gelu_erf", "relu", "silu"]


def run_case(cfg, B, T, label, given=None):
    """cfg through torch and the driver (given: the driver's config instead, which validation
    must resolve to cfg): logits, loss and every gradient."""
    ids = rng.integers(0, cfg["n_vocab"], (B, T))
    targets = rng.integers(0, cfg["n_vocab"], (B, T))
    targets[0, 1] = -1  # ignored
    params = random_params(cfg)
    model = TorchGPT(cfg, params)
    logits, loss = model(torch.tensor(ids), torch.tensor(targets))
    loss.backward()

    tensors = dict(params, ids=ids.astype(np.float32), targets=targets.astype(np.float32))
    got = run_driver("gpt", tensors, {"config": json.dumps(given or cfg), "B": B, "T": T})
    R.check(f"{label} logits", got["logits"], logits.detach().numpy(), TOL)
    R.check(f"{label} loss", got["loss"], loss.detach().numpy().reshape(1), TOL)
    grads = {k[5:] for k in got if k.startswith("grad.")}
    if grads != set(params):
        R.check(f"{label} parameter names", sorted(grads), sorted(params))
    for name, t in model.p.items():
        want = t.grad.numpy().reshape(got["grad." + name].shape)
        tol = TOL
        if name.endswith("k_proj.bias"):
            # q.(k + b) shifts a softmax row by a constant: the true gradient is 0, so both
            # sides hold rounding noise; measure it against the q_proj bias gradient.
            ref = np.abs(model.p[name.replace("k_proj", "q_proj")].grad.numpy()).max()
            tol = TOL * max(1.0, ref / max(np.abs(want).max(), 1e-30))
        if name.endswith(".g"):
            # ScaleNorm's dL/dg = sum(dy * xh) can cancel to 1e-4 of its terms (seen for
            # a Pre-LN block's ffn_norm): measure the error against the sum of |terms|, as
            # test_vit.py does.
            terms = model.g_terms[name[:-2]]
            tol = TOL * max(1.0, terms / max(np.abs(want).max(), 1e-30))
        R.check(f"{label} grad {name}", got["grad." + name], want, tol)


case = 0
for norm, opts in NORMS:
    for placement in ("pre", "post", "deepnorm", "subln", "peri"):
        cfg = {"n_layer": 2 + case % 2, "n_head": 2 + 2 * (case % 3 == 0), "n_embd": 16,
               "n_ctx": 9, "n_vocab": 11, "n_ff": 24 + 8 * (case % 2), "norm": norm,
               "placement": placement, "norm_eps": 1e-5, "rms_form": "llama",
               "prms_p": 0.0625, "gn_groups": 1, "tied": case != 4, "bias": case != 7,
               "act": ACTS[case % 4], "dropout": 0.0}
        cfg.update(opts)
        label = (f"{norm}{'/' + opts['rms_form'] if 'rms_form' in opts else ''} {placement}"
                 f" L{cfg['n_layer']}{'' if cfg['tied'] else ' untied'}"
                 f"{'' if cfg['bias'] else ' no-bias'} {cfg['act']}")
        run_case(cfg, 2, 7 + case % 3, label)
        case += 1

# The LLaMA pieces, each alone and together, in every placement: RoPE (rope_theta 10000, and
# a small base that turns the later pairs too), SwiGLU, grouped-query attention (n_kv_head 1
# and 2 of 4 heads), and arch llama with what validation resolves it to.
PIECES = [("rope", {"pos": "rope", "rope_theta": 10000.0}),
          ("rope theta 7", {"pos": "rope", "rope_theta": 7.0}),
          ("swiglu", {"act": "swiglu"}),
          ("swiglu n_ff from the rule", {"act": "swiglu", "n_ff": 0, "ff_multiple": 8}),
          ("rope swiglu", {"pos": "rope", "act": "swiglu", "bias": False}),
          ("gqa 2 of 4", {"n_kv_head": 2}),
          ("gqa 1 of 4 rope", {"n_kv_head": 1, "pos": "rope"})]
for i, (what, opts) in enumerate(PIECES):
    for placement in ("pre", "post", "deepnorm", "subln", "peri"):
        cfg = {"n_layer": 2, "n_head": 4, "n_embd": 16, "n_ctx": 12, "n_vocab": 11,
               "n_ff": 24, "norm": ("ln", "rms")[i % 2], "placement": placement,
               "norm_eps": 1e-5, "rms_form": "llama", "tied": i % 2 == 0, "bias": True,
               "act": "gelu", "dropout": 0.0}
        cfg.update(opts)
        run_case(cfg, 2, 11, f"{what} {cfg['norm']} {placement}")

# arch llama: the driver gets the preset as the user gives it (arch, and any explicit pieces);
# torch gets what validation must resolve it to: RoPE, SwiGLU with LLaMA's n_ff, RMSNorm
# (x / sqrt(mean(x^2) + eps) w), no biases, tied; with grouped-query attention and untied once.
# The register-tile path of the attention too (head size 16).
for placement in ("pre", "post", "deepnorm", "subln", "peri"):
    for extra in ({}, {"n_kv_head": 2, "tied": False, "rope_theta": 500000.0}):
        given = {"arch": "llama", "n_layer": 2, "n_head": 4, "n_embd": 64, "n_ctx": 12,
                 "n_vocab": 11, "n_ff": 0, "placement": placement, "dropout": 0.0}
        given.update(extra)
        resolved = dict(given, pos="rope", act="swiglu", norm="rms", rms_form="llama",
                        norm_eps=1e-5, bias=False, tied=given.get("tied", True),
                        rope_theta=given.get("rope_theta", 10000.0))
        resolved["n_ff"] = n_ff(resolved)
        run_case(resolved, 2, 11, f"llama {placement}{' gqa untied theta 5e5' if extra else ''}",
                 given)

R.finish()
