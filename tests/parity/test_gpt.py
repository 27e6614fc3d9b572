"""The GPT against a PyTorch model written here, on the same weights (passed by their mt names):
logits, loss and the gradient of every parameter, to 1e-4 relative, for every norm the GPT
accepts x every placement (DyT and Derf: not DeepNorm, which refuses them; their learned alpha and
shift and the embedding scale included) (Sub-LN's and Peri-LN's extra norms included; LNS, OLMo-2's
reorder, Mix-LN and DeepScaleLM written from their papers' formulas; 2 to 3 layers, n_head > 1),
with the head tied and once untied, biases
on and once off, each activation, and the loss with label smoothing 0, 0.1 and 0.3; the
attention's methods (gated attention, gpt-oss's sink, Softpick, ResFormer's value residual,
modded-nanogpt's value embeddings) in every placement."""
import json

import numpy as np
import torch

from harness import Report, check_model, check_sizes, methods, random_params, run_driver
from torch_gpt import TorchGPT, n_ff

rng = np.random.default_rng(0)
R = Report("parity gpt")
TOL = 1e-4


# Every method of mt's tables (harness.methods): each norm with its defaults, or with the
# options of NORM_CASES (BatchNorm and InstanceNorm: images only, test_vit.py); each activation
# but SwiGLU (PIECES); each placement
METHODS = methods()
NORM_CASES = {"rms": [{"rms_form": "llama"},
                      {"rms_form": "paper", "rms_bias": True, "norm_eps": 1e-8}],
              "prms": [{"prms_p": 0.25}], "gn": [{"gn_groups": 4}], "bn": [], "in": []}
NORMS = [(norm, opts) for norm in METHODS["norm"] for opts in NORM_CASES.get(norm, [{}])]
ACTS = [act for act in METHODS["act"] if act != "swiglu"]
PLACEMENTS = tuple(METHODS["placement"])
# Mix-LN with Post-LN in its first block of 2 or 3 (the default n_layer / 4 is 0 there); DSL's
# k below n_layer (k = 2 at 2 layers would leave no skip: lambda = 0)
PLACEMENT_OPTS = {"mixln": {"mixln_post": 1}, "dsl": {"dsl_k": 0.7}}


def run_case(cfg, B, T, label, given=None):
    """cfg through torch and the driver (given: the driver's config instead, which validation
    must resolve to cfg): logits, loss and every gradient."""
    ids = rng.integers(0, cfg["n_vocab"], (B, T))
    targets = rng.integers(0, cfg["n_vocab"], (B, T))
    targets[0, 1] = -1  # ignored
    params = random_params("gpt", given or cfg, rng)
    C = cfg["n_embd"]
    sizes = {"blocks.0.ffn.fc1.weight": (n_ff(cfg), C)}
    if cfg.get("pos", "learned") == "learned":
        sizes["pos_emb.weight"] = (cfg["n_ctx"], C)
    check_sizes(R, label, params, sizes)
    model = TorchGPT(cfg, params)
    logits, loss = model(torch.tensor(ids), torch.tensor(targets))
    loss.backward()

    tensors = dict(params, ids=ids.astype(np.float32), targets=targets.astype(np.float32))
    got = run_driver("gpt", tensors, {"config": json.dumps(given or cfg), "B": B, "T": T})
    check_model(R, label, got, logits, loss, model, TOL)


def norm_cases(placements, case):
    """Every norm in each placement; case (from 0, then on) varies the other settings."""
    for norm, opts in NORMS:
        for placement in placements:
            if norm in ("dyt", "derf") and placement == "deepnorm":
                continue  # refused (docs/norms.md)
            cfg = {"n_layer": 2 + case % 2, "n_head": 2 + 2 * (case % 3 == 0), "n_embd": 16,
                   "n_ctx": 9, "n_vocab": 11, "n_ff": 24 + 8 * (case % 2), "norm": norm,
                   "placement": placement, "norm_eps": 1e-5, "rms_form": "llama",
                   "prms_p": 0.0625, "gn_groups": 1, "tied": case != 4, "bias": case != 7,
                   "act": ACTS[case % len(ACTS)], "dropout": 0.0,
                   "label_smoothing": (0.0, 0.1, 0.3)[case % 3]}
            cfg.update(opts)
            cfg.update(PLACEMENT_OPTS.get(placement, {}))
            label = (f"{norm}{'/' + opts['rms_form'] if 'rms_form' in opts else ''} {placement}"
                     f" L{cfg['n_layer']}{'' if cfg['tied'] else ' untied'}"
                     f"{'' if cfg['bias'] else ' no-bias'} {cfg['act']}"
                     f" smoothing {cfg['label_smoothing']}")
            run_case(cfg, 2, 7 + case % 3, label)
            case += 1


# DyT's and Derf's LLaMA setting: the learned embedding scale, with learned and rotary positions
for norm in ("dyt", "derf"):
    for pos in ("learned", "rope"):
        cfg = {"n_layer": 2, "n_head": 2, "n_embd": 16, "n_ctx": 9, "n_vocab": 11, "n_ff": 24,
               "norm": norm, "placement": "pre", "norm_eps": 1e-5, "tied": pos == "rope",
               "bias": pos == "learned", "act": "swiglu" if pos == "rope" else "gelu",
               "dropout": 0.0, "pos": pos, "emb_scale": True}
        run_case(cfg, 2, 8, f"{norm} emb_scale pos {pos}")

# QK-norm: each kind per head and over the whole projection, with and without its gain (l2 only
# with), before RoPE, with grouped-query attention (k_norm over the n_kv_head heads), in every
# placement
QK = [("rms", "head", False), ("rms", "head", True), ("rms", "all", True), ("ln", "head", True),
      ("ln", "all", False), ("l2", "head", True), ("l2", "all", True)]
for i, (kind, scope, affine) in enumerate(QK):
    for j, placement in enumerate(("pre", "post", "deepnorm", "subln", "peri")):
        cfg = {"n_layer": 2, "n_head": 4, "n_embd": 16, "n_ctx": 9, "n_vocab": 11, "n_ff": 24,
               "norm": ("ln", "rms")[j % 2], "placement": placement, "norm_eps": 1e-5,
               "rms_form": "llama", "tied": True, "bias": i % 2 == 0, "act": "gelu",
               "dropout": 0.0, "qk_norm": kind, "qk_norm_scope": scope, "qk_norm_affine": affine,
               "pos": ("learned", "rope")[(i + j) % 2], "n_kv_head": (4, 2)[i % 2]}
        run_case(cfg, 2, 8, f"qk-norm {kind} {scope}{' affine' if affine else ''} {placement}"
                 f" pos {cfg['pos']} kv {cfg['n_kv_head']}")

# Gated attention (the paper's G1), elementwise and headwise, in every placement, with RoPE,
# grouped-query attention and QK-norm in turn
for i, gate in enumerate(("elementwise", "headwise")):
    for j, placement in enumerate(PLACEMENTS):
        cfg = {"n_layer": 2, "n_head": 4, "n_embd": 16, "n_ctx": 9, "n_vocab": 11, "n_ff": 24,
               "norm": ("ln", "rms")[j % 2], "placement": placement, "norm_eps": 1e-5,
               "rms_form": "llama", "tied": j % 2 == 0, "bias": (i + j) % 2 == 0,
               "act": "gelu", "dropout": 0.0, "attn_gate": gate,
               "pos": ("learned", "rope")[(i + j) % 2], "n_kv_head": (4, 2)[j % 2],
               "qk_norm": ("none", "rms")[j % 3 == 2], "qk_norm_affine": j % 3 == 2}
        cfg.update(PLACEMENT_OPTS.get(placement, {}))
        run_case(cfg, 2, 8, f"attn-gate {gate} {placement} pos {cfg['pos']}"
                 f" kv {cfg['n_kv_head']} qk {cfg['qk_norm']}")

# gpt-oss's attention sink, and Softpick in place of softmax, each in every placement, with the
# gate, RoPE, grouped-query attention
for i, (what, opts, gate) in enumerate([("attn-sink", {"attn_sink": True}, "headwise"),
                                        ("softpick", {"softmax": "softpick"}, "elementwise")]):
    for j, placement in enumerate(PLACEMENTS):
        cfg = {"n_layer": 2, "n_head": 4, "n_embd": 16, "n_ctx": 9, "n_vocab": 11, "n_ff": 24,
               "norm": ("rms", "ln")[(i + j) % 2], "placement": placement, "norm_eps": 1e-5,
               "rms_form": "llama", "tied": (i + j) % 2 == 1, "bias": (i + j) % 2 == 0,
               "act": "gelu", "dropout": 0.0, "attn_gate": ("none", gate)[j % 3 == 1 + i],
               "pos": ("learned", "rope")[(i + j) % 2], "n_kv_head": (4, 2)[(i + j) % 2]}
        cfg.update(opts)
        cfg.update(PLACEMENT_OPTS.get(placement, {}))
        run_case(cfg, 2, 8, f"{what} {placement} gate {cfg['attn_gate']} pos {cfg['pos']}"
                 f" kv {cfg['n_kv_head']}")

# ResFormer's value residual, fixed and learned, in every placement, over three blocks, with the
# gate, RoPE, grouped-query attention and a sink in turn
for i, residual in enumerate(("half", "learned")):
    for j, placement in enumerate(PLACEMENTS):
        cfg = {"n_layer": 3, "n_head": 4, "n_embd": 16, "n_ctx": 9, "n_vocab": 11, "n_ff": 24,
               "norm": ("ln", "rms")[(i + j) % 2], "placement": placement, "norm_eps": 1e-5,
               "rms_form": "llama", "tied": j % 2 == 0, "bias": (i + j) % 2 == 1,
               "act": "gelu", "dropout": 0.0, "value_residual": residual,
               "attn_gate": ("none", "headwise")[j % 3 == 1], "attn_sink": j % 3 == 2,
               "pos": ("learned", "rope")[(i + j) % 2], "n_kv_head": (4, 2)[j % 2]}
        cfg.update(PLACEMENT_OPTS.get(placement, {}))
        run_case(cfg, 2, 8, f"value-residual {residual} {placement} gate {cfg['attn_gate']}"
                 f" sink {cfg['attn_sink']} pos {cfg['pos']} kv {cfg['n_kv_head']}")

# nanochat's per-block lambdas and modded-nanogpt's U-net skips, alone and together, in every
# placement, over 4 and 5 blocks (an odd depth: the middle block reads no skip), with a value
# residual and RoPE in turn
for i, (what, opts) in enumerate([("layer-lambdas", {"layer_lambdas": True}),
                                  ("unet", {"unet": True}),
                                  ("both", {"layer_lambdas": True, "unet": True})]):
    for j, placement in enumerate(PLACEMENTS):
        cfg = {"n_layer": (4, 5)[(i + j) % 2], "n_head": 2, "n_embd": 16, "n_ctx": 9,
               "n_vocab": 11, "n_ff": 24, "norm": ("ln", "rms")[j % 2], "placement": placement,
               "norm_eps": 1e-5, "rms_form": "llama", "tied": j % 2 == 0, "bias": i % 2 == 0,
               "act": "gelu", "dropout": 0.0, "value_residual": ("none", "learned")[j % 3 == 1],
               "pos": ("learned", "rope")[(i + j) % 2]}
        cfg.update(opts)
        cfg.update(PLACEMENT_OPTS.get(placement, {}))
        run_case(cfg, 2, 8, f"{what} {placement} L{cfg['n_layer']} value-residual "
                 f"{cfg['value_residual']} pos {cfg['pos']}")

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


def piece_cases(placements):
    for i, (what, opts) in enumerate(PIECES):
        for placement in placements:
            cfg = {"n_layer": 2, "n_head": 4, "n_embd": 16, "n_ctx": 12, "n_vocab": 11,
                   "n_ff": 24, "norm": ("ln", "rms")[i % 2], "placement": placement,
                   "norm_eps": 1e-5, "rms_form": "llama", "tied": i % 2 == 0, "bias": True,
                   "act": "gelu", "dropout": 0.0}
            cfg.update(opts)
            cfg.update(PLACEMENT_OPTS.get(placement, {}))
            run_case(cfg, 2, 11, f"{what} {cfg['norm']} {placement}")


def llama_cases(placements):
    """arch llama: the driver gets the preset as the user gives it (arch, and any explicit
    pieces); torch gets what validation must resolve it to: RoPE, SwiGLU with LLaMA's n_ff,
    RMSNorm (x / sqrt(mean(x^2) + eps) w), no biases, tied; with grouped-query attention and
    untied once. The register-tile path of the attention too (head size 16)."""
    for placement in placements:
        for extra in ({}, {"n_kv_head": 2, "tied": False, "rope_theta": 500000.0}):
            given = {"arch": "llama", "n_layer": 2, "n_head": 4, "n_embd": 64, "n_ctx": 12,
                     "n_vocab": 11, "n_ff": 0, "placement": placement, "dropout": 0.0}
            given.update(extra)
            given.update(PLACEMENT_OPTS.get(placement, {}))
            resolved = dict(given, pos="rope", act="swiglu", norm="rms", rms_form="llama",
                            norm_eps=1e-5, bias=False, tied=given.get("tied", True),
                            rope_theta=given.get("rope_theta", 10000.0))
            resolved["n_ff"] = n_ff(resolved)
            run_case(resolved, 2, 11,
                     f"llama {placement}{' gqa untied theta 5e5' if extra else ''}", given)


# Post-LN to Peri-LN, then those of arXiv 2502.05795 (lns), OLMo-2 (reorder), Mix-LN and
# DeepScaleLM (each set in turn: the first set's cases draw what they drew before the second)
for placements in (PLACEMENTS[:5], PLACEMENTS[5:]):
    norm_cases(placements, 0 if placements[0] == "pre" else len(NORMS) * 5)
    piece_cases(placements)
    llama_cases(placements)

# The placements' own settings: Mix-LN's default quarter (1 Post-LN block of 4, 2 of 9), every
# block Post-LN (then the final norm), and none; DeepScaleLM's default k = 2 at 4 and 9 layers and
# k = n_layer (lambda = 0: no skip at all).
SETTINGS = [("mixln", 4, {}), ("mixln", 9, {}), ("mixln", 3, {"mixln_post": 3}),
            ("mixln", 3, {"mixln_post": 0}), ("dsl", 4, {}), ("dsl", 9, {}),
            ("dsl", 3, {"dsl_k": 3.0}), ("lns", 9, {})]
for i, (placement, L, opts) in enumerate(SETTINGS):
    cfg = {"n_layer": L, "n_head": 2, "n_embd": 16, "n_ctx": 8, "n_vocab": 11, "n_ff": 24,
           "norm": ("ln", "rms")[i % 2], "placement": placement, "norm_eps": 1e-5,
           "rms_form": "llama", "tied": True, "bias": True, "act": "gelu", "dropout": 0.0}
    cfg.update(opts)
    run_case(cfg, 2, 8, f"{placement} L{L} {opts}")

# PaLM's z-loss in the training loss (torch_gpt.z_loss): alone, with label smoothing, untied
for i, (z, eps, tied) in enumerate([(1e-4, 0.0, True), (0.3, 0.1, True), (0.05, 0.0, False)]):
    cfg = {"n_layer": 2, "n_head": 2, "n_embd": 16, "n_ctx": 8, "n_vocab": 11, "n_ff": 24,
           "norm": ("ln", "rms")[i % 2], "placement": ("pre", "post", "lns")[i],
           "norm_eps": 1e-5, "rms_form": "llama", "tied": tied, "bias": True, "act": "gelu",
           "dropout": 0.0, "label_smoothing": eps, "z_loss": z}
    run_case(cfg, 2, 8, f"z-loss {z} smoothing {eps}{'' if tied else ' untied'}")

# every activation in Sub-LN's unfused FFN (mt_activation: act, norm, fc2), which the cases above
# reach only for some
for i, act in enumerate(ACTS):
    cfg = {"n_layer": 2, "n_head": 2, "n_embd": 16, "n_ctx": 8, "n_vocab": 11, "n_ff": 24,
           "norm": ("ln", "rms")[i % 2], "placement": "subln", "norm_eps": 1e-5,
           "rms_form": "llama", "tied": True, "bias": i % 2 == 0, "act": act, "dropout": 0.0}
    run_case(cfg, 2, 8, f"subln {act}")

# Gemma 2's logit soft cap (torch_gpt.TorchGPT: cap tanh(logits / cap)) in the logits, the loss
# and every gradient: 30 (Gemma 2's), 2 (where tanh bends: the logits of these weights reach
# about 3), with z-loss, label smoothing, untied
for i, (cap, z, eps, tied) in enumerate([(30.0, 0.0, 0.0, True), (2.0, 0.0, 0.0, True),
                                         (2.0, 0.05, 0.1, False), (0.5, 1e-4, 0.0, True)]):
    cfg = {"n_layer": 2, "n_head": 2, "n_embd": 16, "n_ctx": 8, "n_vocab": 11, "n_ff": 24,
           "norm": ("ln", "rms")[i % 2], "placement": ("pre", "post", "lns", "pre")[i],
           "norm_eps": 1e-5, "rms_form": "llama", "tied": tied, "bias": True, "act": "gelu",
           "dropout": 0.0, "label_smoothing": eps, "z_loss": z, "logit_softcap": cap}
    run_case(cfg, 2, 8, f"softcap {cap} z-loss {z} smoothing {eps}{'' if tied else ' untied'}")

# modded-nanogpt's value embeddings (last: the cases above keep their draws of rng) in every
# placement, over three blocks, on lists of layers
# (negative ones from the last), with the gate, a sink, Softpick, RoPE and grouped-query attention
# in turn
for j, placement in enumerate(PLACEMENTS):
    cfg = {"n_layer": 3, "n_head": 4, "n_embd": 16, "n_ctx": 9, "n_vocab": 11, "n_ff": 24,
           "norm": ("ln", "rms")[j % 2], "placement": placement, "norm_eps": 1e-5,
           "rms_form": "llama", "tied": j % 2 == 1, "bias": j % 2 == 0, "act": "gelu",
           "dropout": 0.0, "value_embeds": ("0,-1", "1", "0,1,2", "-2,0")[j % 4],
           "attn_gate": ("none", "headwise")[j % 3 == 1], "attn_sink": j % 3 == 2,
           "softmax": ("softmax", "softpick")[j % 5 == 3],
           "pos": ("learned", "rope")[j % 2], "n_kv_head": (4, 2)[(j // 2) % 2]}
    cfg.update(PLACEMENT_OPTS.get(placement, {}))
    if cfg["attn_sink"]:
        cfg["softmax"] = "softmax"
    run_case(cfg, 2, 8, f"value-embeds {cfg['value_embeds']} {placement} gate {cfg['attn_gate']}"
             f" sink {cfg['attn_sink']} {cfg['softmax']} pos {cfg['pos']} kv {cfg['n_kv_head']}")
# modded-nanogpt's sharing: the list's second half reads its first half's tables (its 012 ... 012
# over six blocks, and a list out of order)
for j, (layers, L) in enumerate([("0,1,2,-3,-2,-1", 6), ("-1,0", 3)]):
    cfg = {"n_layer": L, "n_head": 4, "n_embd": 16, "n_ctx": 9, "n_vocab": 11, "n_ff": 24,
           "norm": "rms", "placement": ("pre", "post")[j], "norm_eps": 1e-5, "rms_form": "llama",
           "tied": j == 0, "bias": j == 1, "act": "gelu", "dropout": 0.0, "value_embeds": layers,
           "value_embeds_shared": True, "pos": ("rope", "learned")[j], "n_kv_head": 2}
    run_case(cfg, 2, 8, f"value-embeds {layers} shared {cfg['placement']} pos {cfg['pos']}")

R.finish()
