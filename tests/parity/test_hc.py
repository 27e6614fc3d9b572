"""Hyper-connections (--residual hc) against PyTorch written from the paper's formulas (Zhu et al.
2024, arXiv 2409.19606, section 2 and Algorithm 2; the layout of lucidrains/hyper-connections):
logits, loss and every gradient, the learned weights of the connections included, to 1e-4
relative; N = 1, 2 and 4 streams, static and dynamic, LayerNorm and RMSNorm, tied and untied.

    H (B, T, N, C) = the embeddings repeated N times;  per sublayer (attention, FFN) of a block:
    A = static_alpha (N, N+1),  B = static_beta (N)                        (static HC)
    A += s_a tanh(Norm(H) W_a),  B += s_b tanh(Norm(H) W_b)  per stream    (dynamic HC)
    h = sum_i A[i, 0] H_i,  y = F(Norm(h)),  H'_j = sum_i A[i, 1 + j] H_i + B[j] y
    and after the last block the streams' sum, the final norm and the head.

mHC (--residual mhc; Xie et al. 2025, arXiv 2512.24880, eqs. 3, 7, 8): the logits b_pre, b_post,
b_res (static) plus alpha (Norm(vec H) phi) (dynamic, H flattened to N C), H_pre = sigmoid,
H_post = 2 sigmoid, H_res = Sinkhorn-Knopp(exp) with K column-then-row normalisations; H' =
H_res H + H_post^T F(Norm(H_pre H)); N = 2 and 4, static and dynamic, K = 20 and 3. Both once
with value embeddings (--value-embeds). Then in bf16 (--precision bf16; bf16_ref.py's twin)."""
import json

import numpy as np
import torch

from bf16_ref import bf16_case
from harness import Report, bf16_missing, check_model, random_params, run_driver
from torch_gpt import TorchGPT

rng = np.random.default_rng(44)
R = Report("parity hc")
TOL, TOL_BF16 = 1e-4, 3e-3


class TorchHC(TorchGPT):
    """The GPT of torch_gpt.py with its residual stream widened to N streams (its sublayers
    Pre-LN's: mt's config names no placement, which hyper-connections do not read)."""

    def __init__(self, cfg, params):
        super().__init__(dict(cfg, placement="pre"), params)

    def hyper(self, H, prefix, norm, f):
        """One sublayer's hyper-connection on H (B, T, N, C): prefix its parameters', norm the
        sublayer's norm (Pre-LN)."""
        p = self.p
        A, Bv = p[prefix + ".static_alpha"], p[prefix + ".static_beta"]
        if self.cfg.get("hc_dynamic", True):
            Hn = self.norm(H, prefix + ".norm")  # each stream of each token
            ta = torch.tanh(Hn @ p[prefix + ".dynamic_alpha_fn"])  # (B, T, N, N+1)
            tb = torch.tanh(Hn @ p[prefix + ".dynamic_beta_fn"])  # (B, T, N)
            A = A + self.scalar(prefix + ".dynamic_alpha_scale",
                                p[prefix + ".dynamic_alpha_scale"] * ta, ta)
            Bv = Bv + self.scalar(prefix + ".dynamic_beta_scale",
                                  p[prefix + ".dynamic_beta_scale"] * tb, tb)
        mix = torch.einsum("...it,...ic->...tc", A, H)  # (B, T, N+1, C)
        y = f(self.norm(mix[..., 0, :], norm))
        return mix[..., 1:, :] + Bv[..., None] * y[..., None, :]

    def mhc(self, H, prefix, norm, f):
        """mHC (Xie et al. 2025, arXiv 2512.24880, eqs. 3, 7 and 8): the logits b (static) plus
        alpha (Norm(vec H) phi) (dynamic), H_pre = sigmoid, H_post = 2 sigmoid, H_res =
        Sinkhorn-Knopp; H' = H_res H + H_post^T F(Norm(H_pre H))."""
        p, N, C = self.p, H.shape[-2], H.shape[-1]
        z = [p[prefix + ".b_pre"], p[prefix + ".b_post"], p[prefix + ".b_res"].reshape(-1)]
        if self.cfg.get("hc_dynamic", True):
            x = self.norm(H.reshape(*H.shape[:-2], N * C), prefix + ".norm")
            for g, part in enumerate(("pre", "post", "res")):
                u = x @ p[f"{prefix}.phi_{part}"]
                z[g] = z[g] + self.scalar(f"{prefix}.alpha_{part}",
                                          p[f"{prefix}.alpha_{part}"] * u, u)
        pre, post = torch.sigmoid(z[0]), 2 * torch.sigmoid(z[1])
        M = z[2].reshape(*z[2].shape[:-1], N, N)  # M[j][i]: output stream j from input i
        M = torch.exp(M - M.amax((-2, -1), keepdim=True).detach())
        for _ in range(self.cfg.get("mhc_iters", 20)):  # T_r(T_c(M))
            M = M / M.sum(-2, keepdim=True)
            M = M / M.sum(-1, keepdim=True)
        h = torch.einsum("...i,...ic->...c", pre, H)
        y = f(self.norm(h, norm))
        return torch.einsum("...ji,...ic->...jc", M, H) + post[..., None] * y[..., None, :]

    def blocks(self, x):
        N = self.cfg["hc_streams"]
        H = x[..., None, :].expand(*x.shape[:-1], N, x.shape[-1])
        hyper = self.mhc if self.cfg["residual"] == "mhc" else self.hyper
        for i in range(self.cfg["n_layer"]):
            H = hyper(H, f"blocks.{i}.attn_hc", f"blocks.{i}.attn_norm",
                      lambda h: self.attn(h, i))
            H = hyper(H, f"blocks.{i}.ffn_hc", f"blocks.{i}.ffn_norm",
                      lambda h: self.ffn(h, i))
        return self.norm(H.sum(-2), "final_norm")


def run_case(cfg, B, T, label):
    ids = rng.integers(0, cfg["n_vocab"], (B, T))
    targets = rng.integers(0, cfg["n_vocab"], (B, T))
    targets[0, 1] = -1  # ignored
    params = random_params("gpt", cfg, rng)
    model = TorchHC(cfg, params)
    logits, loss = model(torch.tensor(ids), torch.tensor(targets))
    loss.backward()
    tensors = dict(params, ids=ids.astype(np.float32), targets=targets.astype(np.float32))
    got = run_driver("gpt", tensors, {"config": json.dumps(cfg), "B": B, "T": T})
    check_model(R, label, got, logits, loss, model, TOL)


case = 0
for N in (1, 2, 4):
    for dynamic in (False, True):
        for norm in ("ln", "rms"):
            cfg = {"n_layer": 2 + case % 2, "n_head": 2, "n_embd": 16, "n_ctx": 9, "n_vocab": 11,
                   "n_ff": 24, "norm": norm, "norm_eps": 1e-5, "rms_form": "llama",
                   "tied": case % 3 != 1, "bias": True, "act": "gelu", "dropout": 0.0,
                   "residual": "hc", "hc_streams": N, "hc_dynamic": dynamic}
            label = (f"hc N{N} {'dynamic' if dynamic else 'static'} {norm} L{cfg['n_layer']}"
                     f"{'' if cfg['tied'] else ' untied'}")
            run_case(cfg, 2, 6 + case % 3, label)
            case += 1
for N in (2, 4):
    for dynamic in (False, True):
        for iters in (20, 3):
            cfg = {"n_layer": 2 + case % 2, "n_head": 2, "n_embd": 16, "n_ctx": 9, "n_vocab": 11,
                   "n_ff": 24, "norm": ("ln", "rms")[case % 2], "norm_eps": 1e-5,
                   "rms_form": "llama", "tied": case % 3 != 1, "bias": True, "act": "gelu",
                   "dropout": 0.0, "residual": "mhc", "hc_streams": N, "hc_dynamic": dynamic,
                   "mhc_iters": iters}
            label = (f"mhc N{N} {'dynamic' if dynamic else 'static'} K{iters} {cfg['norm']}"
                     f" L{cfg['n_layer']}{'' if cfg['tied'] else ' untied'}")
            run_case(cfg, 2, 6 + case % 3, label)
            case += 1
# modded-nanogpt's value embeddings (docs/layers.md) inside the streams' attention, HC and mHC
for i, residual in enumerate(("hc", "mhc")):
    cfg = {"n_layer": 3, "n_head": 2, "n_embd": 16, "n_ctx": 9, "n_vocab": 11, "n_ff": 24,
           "norm": "rms", "norm_eps": 1e-5, "rms_form": "llama", "tied": True, "bias": True,
           "act": "gelu", "dropout": 0.0, "residual": residual, "hc_streams": 2,
           "hc_dynamic": True, "value_embeds": ("0,-1", "1")[i]}
    run_case(cfg, 2, 7, f"{residual} N2 dynamic value-embeds {cfg['value_embeds']}")

# bf16 (where this build and CPU have it): the sublayers' linear layers and the head multiply in
# bf16 (bf16_ref.py), the connections' own products (the dynamic projections Norm(H) W, mHC's
# Norm(vec H) phi) and mixes stay fp32, as mt's do. TOL_BF16 is test_bf16.py's TOL (its argument
# holds: the connections add fp32 arithmetic around the same products); the unrounded model must
# be more than 3 TOL_BF16 away in at least one case
why = bf16_missing()
if why:
    print(f"parity hc bf16: skipped: {why}")
else:
    plain = 0.0
    for residual, N, dynamic, norm in (("hc", 2, False, "ln"), ("hc", 4, True, "rms"),
                                       ("mhc", 2, True, "ln"), ("mhc", 4, False, "rms")):
        cfg = {"n_layer": 2, "n_head": 2, "n_embd": 32, "n_ctx": 16, "n_vocab": 29, "n_ff": 64,
               "norm": norm, "norm_eps": 1e-5, "rms_form": "llama", "tied": N == 2,
               "bias": True, "act": "gelu", "dropout": 0.0, "residual": residual,
               "hc_streams": N, "hc_dynamic": dynamic}
        ids, targets = (rng.integers(0, cfg["n_vocab"], (3, 16)) for _ in range(2))
        label = f"{residual} N{N} {'dynamic' if dynamic else 'static'} {norm}"
        _, _, e = bf16_case(R, label, TorchHC, cfg, random_params("gpt", cfg, rng), ids, targets,
                            TOL_BF16)
        print(f"  {label} bf16: against the unrounded float64 model, largest error {e:.2g}")
        plain = max(plain, e)
    R.check("bf16: the unrounded model is told apart (error >= 3 TOL_BF16)",
            [min(plain, 3 * TOL_BF16)], [3 * TOL_BF16], 0.0)
R.finish()
