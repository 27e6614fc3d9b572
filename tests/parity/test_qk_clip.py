"""QK-Clip (--qk-clip TAU; MuonClip, Kimi K2, arXiv 2507.20534, section 2.1, Algorithm 1) against
PyTorch written from the paper's rule: one training step of a tiny GPT (the gradients of the
loss, torch's AdamW, then the clip) in mt (gpt_driver's "qk_clip") and in float64 torch
(torch_gpt.TorchGPT) on the same weights and batch, every parameter compared after the step.

    S_h   = max over the batch, queries t and keys s <= t of q_t . k_s / sqrt(HS) (head h; the
            attention sink's logit is not a q.k logit and is left out)
    eta_h = min(1, tau / S_h)
    W_q^h <- sqrt(eta_h) W_q^h,  W_k^h <- sqrt(eta_h) W_k^h  (their bias rows alike)

With grouped key heads (G query heads share key head g) mt scales W_k^g by sqrt(e_g),
e_g = min_{h in g} eta_h, and W_q^h by eta_h / sqrt(e_g): every logit of head h is scaled by
eta_h exactly, and G = 1 is the paper's rule. tau sits between the heads' maxima, so that some
heads are clipped and some are not; the heads under tau keep their logits (and, without grouping,
their rows: those of the plain AdamW step). Cases: biases on and off, learned and rotary
positions, both attention paths (head size 4: strided products; 16: register tiles), grouped
heads (2 and 1 of 4), a sink (large, so that a probe reading it would find other maxima) and
Softpick. Then the loss's forward on the clipped weights: its maxima S_h against torch's.

bf16 (--precision bf16, where this build and CPU have it): the same step with the products of
the linear layers and the head in bf16 (bf16_ref.py's twin; S_max from q and k of bf16 products,
the step and the clip fp32), at test_bf16.py's TOL. AdamW's eps is 1 there: the first step is
then lr g / (|g| + 1), about linear in g, where eps 1e-3 makes it a near-sign of g whose
sensitivity lr / eps at g near 0 magnifies the bf16 products' differences (measured 1e-2). The
clip scales the fp32 weights, and mt must round them into the bf16 copy the next forward reads:
the maxima after the clip check that (a stale copy leaves a clipped head's maximum 1 / eta_h,
at least 2% here, and up to 30%, too high). They are single logits of the second block, after
the first's flipped roundings: measured 4.4e-3 against the rounded twin, held to 1e-2
(test_bf16.py's TOL_QK and TOL_NEW, its measured tail)."""
import json
import math

import numpy as np
import torch

from bf16_ref import bf16_twin
from harness import Report, bf16_missing, random_params, run_driver
from torch_gpt import TorchGPT

rng = np.random.default_rng(44)
R = Report("parity qk-clip")
TOL, TOL_BF16, TOL_BF16_AFTER = 1e-4, 3e-3, 1e-2


def between(smax):
    """A tau between two of the heads' maxima, near the middle, at least 2% from each (so that
    mt's and torch's roundings cannot put a head on different sides)."""
    s = np.sort(smax)
    for k in sorted(range(len(s) - 1), key=lambda k: abs(k - len(s) / 2)):
        if s[k + 1] > s[k] * 1.04 and s[k] > 0:
            return float((s[k] + s[k + 1]) / 2)
    raise AssertionError(f"no gap between the maxima {s}")


def clip(p, cfg, smax, tau):
    """The rule above on the parameters p (torch, in place); eta (layers, NH)."""
    NH, C = cfg["n_head"], cfg["n_embd"]
    NKV, HS = cfg.get("n_kv_head", NH), C // NH
    G = NH // NKV
    etas = []
    with torch.no_grad():
        for i in range(cfg["n_layer"]):
            eta = torch.clamp(tau / smax[i], max=1.0)
            etas.append(eta)
            pre = f"blocks.{i}.attn."
            for g in range(NKV):
                e = eta[g * G:(g + 1) * G].min()
                for name in ("k_proj.weight", "k_proj.bias"):
                    if pre + name in p:
                        p[pre + name][g * HS:(g + 1) * HS] *= e.sqrt()
                for h in range(g * G, (g + 1) * G):
                    for name in ("q_proj.weight", "q_proj.bias"):
                        if pre + name in p:
                            p[pre + name][h * HS:(h + 1) * HS] *= eta[h] / e.sqrt()
    return torch.stack(etas)


def head_logits(p, cfg, i, x):
    """Block i's logits q.k / sqrt(HS) of x (N, C) against itself per head, (NH, N, N), from the
    projections p (arrays) alone."""
    NH, C = cfg["n_head"], cfg["n_embd"]
    NKV, HS = cfg.get("n_kv_head", NH), C // NH
    pre = f"blocks.{i}.attn."
    q = x @ p[pre + "q_proj.weight"].T + p.get(pre + "q_proj.bias", 0)
    k = x @ p[pre + "k_proj.weight"].T + p.get(pre + "k_proj.bias", 0)
    q = q.reshape(-1, NH, HS).transpose(1, 0, 2)
    k = np.repeat(k.reshape(-1, NKV, HS).transpose(1, 0, 2), NH // NKV, axis=0)
    return q @ k.transpose(0, 2, 1) / math.sqrt(HS)


def run_case(cfg, B, T, label, lr=0.05, eps=1e-3, bf16=False):
    """One step both ways (bf16: mt's products in bf16 against bf16_ref.py's twin, at TOL_BF16).
    AdamW's eps is large so that the update is a smooth function of the gradient (the k bias's
    gradient is rounding noise on both sides)."""
    ids = rng.integers(0, cfg["n_vocab"], (B, T))
    targets = rng.integers(0, cfg["n_vocab"], (B, T))
    params = random_params("gpt", cfg, rng)
    for name in params:
        if name.endswith("attn.sink"):  # above every logit: a probe reading it would see it
            params[name] = np.full_like(params[name], 10.0)
    model = (bf16_twin(TorchGPT) if bf16 else TorchGPT)(cfg, params)
    tol, meta = (TOL_BF16, {"precision": "bf16"}) if bf16 else (TOL, {})
    _, loss = model(torch.tensor(ids), torch.tensor(targets))
    loss.backward()
    smax = [model.smax[i] for i in range(cfg["n_layer"])]
    tau = between(torch.cat(smax).numpy())
    opt = torch.optim.AdamW(list(model.p.values()), lr=lr, betas=(0.9, 0.95), eps=eps,
                            weight_decay=0.0)
    opt.step()
    plain = {k: t.detach().numpy().copy() for k, t in model.p.items()}
    eta = clip(model.p, cfg, smax, tau)
    tensors = dict(params, ids=ids.astype(np.float32), targets=targets.astype(np.float32))
    got = run_driver("gpt", tensors, dict(meta, config=json.dumps(cfg), B=B, T=T, step_lr=lr,
                                          step_eps=eps, qk_clip=tau))
    R.check(f"{label} S_max per head", got["qk_max"], torch.cat(smax).numpy(),
            tol if bf16 else 1e-5)
    with torch.no_grad():  # the clipped weights' maxima (mt: their bf16 copy in bf16)
        model(torch.tensor(ids), torch.tensor(targets))
    R.check(f"{label} S_max per head after the clip", got["qk_max_after"],
            torch.cat([model.smax[i] for i in range(cfg["n_layer"])]).numpy(),
            TOL_BF16_AFTER if bf16 else 1e-5)
    clipped = int((eta < 1).sum())
    R.check(f"{label} tau {tau:.3f} clips some heads, not all",
            [min(max(clipped, 1), eta.numel() - 1)], [clipped], 0.0)
    for name, t in model.p.items():
        R.check(f"{label} after the step: {name}", got["step." + name], t.detach().numpy(), tol)
    # each head's logits times eta_h (1: under tau, untouched), on inputs of the projections
    x = rng.standard_normal((6, cfg["n_embd"]))
    mt = {k[5:]: v.astype(np.float64) for k, v in got.items() if k.startswith("step.")}
    NH, HS = cfg["n_head"], cfg["n_embd"] // cfg["n_head"]
    for i in range(cfg["n_layer"]):
        want = eta[i].numpy()[:, None, None] * head_logits(plain, cfg, i, x)
        R.check(f"{label} block {i}: each head's logits times eta_h", head_logits(mt, cfg, i, x),
                want, tol)
        if cfg.get("n_kv_head", NH) != NH:
            continue
        for h in np.flatnonzero(eta[i].numpy() >= 1):  # no grouping: the rows untouched
            rows = slice(h * HS, (h + 1) * HS)
            for name in ("q_proj.weight", "k_proj.weight"):
                key = f"blocks.{i}.attn.{name}"
                R.check(f"{label} block {i} head {h} under tau: {name} is the plain step's",
                        got["step." + key][rows], plain[key][rows], tol)
    print(f"  {label}: tau {tau:.4f}, {clipped} of {eta.numel()} heads clipped")


BASE = {"n_layer": 2, "n_head": 4, "n_embd": 16, "n_ctx": 9, "n_vocab": 11, "n_ff": 24,
        "norm": "ln", "placement": "pre", "norm_eps": 1e-5, "rms_form": "llama", "tied": True,
        "bias": True, "act": "gelu", "dropout": 0.0}
run_case(BASE, 2, 8, "mha bias")
run_case(dict(BASE, bias=False, pos="rope", norm="rms"), 3, 9, "mha rope no-bias")
run_case(dict(BASE, n_embd=64, n_ctx=12), 2, 11, "mha head size 16")
run_case(dict(BASE, n_kv_head=2, pos="rope"), 2, 8, "gqa 2 of 4 bias rope")
run_case(dict(BASE, n_kv_head=1, n_embd=64, n_ctx=12, bias=False), 2, 11, "gqa 1 of 4 hs 16")
run_case(dict(BASE, attn_sink=True, n_kv_head=2), 2, 8, "sink gqa 2 of 4")
run_case(dict(BASE, softmax="softpick"), 2, 8, "softpick")
why = bf16_missing()
if why:
    print(f"parity qk-clip bf16: skipped: {why}")
else:
    run_case(dict(BASE, n_embd=32, n_ctx=16, n_vocab=29), 3, 16, "bf16 mha bias", eps=1.0,
             bf16=True)
    run_case(dict(BASE, n_embd=64, n_ctx=16, n_vocab=29, n_kv_head=2, pos="rope", bias=False),
             3, 16, "bf16 gqa 2 of 4 rope", eps=1.0, bf16=True)
R.finish()
