"""The encoder-decoder against a PyTorch model written here (separate q, k, v projections, an
explicit key-padding mask; not nn.Transformer), on the same weights passed by their mt names:
logits, loss and the gradient of every parameter, to 1e-4 relative, for each placement (Pre-LN,
Post-LN, DeepNorm with the encoder-decoder constants, then LayerNorm Scaling with each stack's
blocks counted from 0 and OLMo-2's reorder), LayerNorm, RMSNorm, QK-norm on the self- and
cross-attention, DyT and Derf (not with DeepNorm), a batch of words of
different lengths (padded keys masked in the encoder's self-attention and the cross-attention),
tied and untied, with and without biases, label smoothing 0, 0.1 and 0.3 in the loss; and
QK-Clip's S_h (the largest logit per head, padded keys left out) of every self- and
cross-attention."""
import json
import math

import numpy as np
import torch
import torch.nn.functional as F

from harness import Report, check_model, check_sizes, layout, random_params, run_driver
from torch_gpt import FINAL_NORM, TorchBlocks

rng = np.random.default_rng(1)
R = Report("parity encdec")
TOL = 1e-4


class TorchEncDec(TorchBlocks):
    """DeepNet's encoder-decoder constants: encoder alpha 0.81 (N^4 M)^(1/16), decoder alpha
    (3M)^(1/4); Vaswani et al.'s decoder block: causal self-attention, cross-attention on the
    encoder's output, FFN, each in the residual placement."""

    def __init__(self, cfg, params):
        super().__init__(cfg, params, causal=False)
        N, M = cfg["enc_layers"], cfg["dec_layers"]
        self.enc_alpha = 0.81 * (N ** 4 * M) ** (1 / 16)
        self.dec_alpha = (3 * M) ** 0.25

    def mha(self, x, mem, pre, causal, key_len):
        B, T, C = x.shape
        S, NH = mem.shape[1], self.cfg["n_head"]
        q = self.qk_norm(self.linear(x, pre + "q_proj"), pre + "q_norm")
        k = self.qk_norm(self.linear(mem, pre + "k_proj"), pre + "k_norm")
        q, k, v = (t.view(B, -1, NH, C // NH).transpose(1, 2)
                   for t in (q, k, self.linear(mem, pre + "v_proj")))
        s = q @ k.transpose(-1, -2) / math.sqrt(C // NH)
        mask = torch.arange(S)[None, :] >= key_len[:, None]  # (B, S): padded keys
        mask = mask[:, None, None, :].expand(B, NH, T, S)
        if causal:
            mask = mask | torch.triu(torch.ones(T, S, dtype=torch.bool), 1)
        s = s.masked_fill(mask, float("-inf"))
        self.smax[pre] = s.detach().amax(dim=(0, 2, 3))  # QK-Clip's S_h: padded keys left out
        y = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        return self.linear(y, pre + "out_proj")

    def ffn_at(self, x, pre):
        act = {"gelu": lambda h: F.gelu(h, approximate="tanh"), "gelu_erf": F.gelu,
               "relu": F.relu, "silu": F.silu}[self.cfg["act"]]
        return self.linear(act(self.linear(x, pre + "fc1")), pre + "fc2")

    def res(self, x, prefix, f, alpha):
        self.alpha = alpha
        return self.residual(x, prefix, f)

    def embedded(self, x):
        """tokens + positions, times the one learned emb_scale of both sides when set (DyT's and
        Derf's LLaMA setting)"""
        if self.cfg.get("emb_scale"):
            return self.scalar("emb_scale", x * self.p["emb_scale"], x)
        return x

    def forward(self, src, src_len, tgt, targets):
        p, cfg = self.p, self.cfg
        S, T = src.shape[1], tgt.shape[1]
        pre_ln = cfg["placement"] in FINAL_NORM
        x = self.embedded(p["tok_emb.weight"][src] + p["enc.pos_emb.weight"][:S])
        for i in range(cfg["enc_layers"]):
            b = f"enc.blocks.{i}."
            x = self.res(x, b + "attn_norm",
                         lambda h: self.mha(h, h, b + "attn.", False, src_len), self.enc_alpha)
            x = self.res(x, b + "ffn_norm", lambda h: self.ffn_at(h, b + "ffn."), self.enc_alpha)
        mem = self.norm(x, "enc.final_norm") if pre_ln else x
        y = self.embedded(p["tok_emb.weight"][tgt] + p["dec.pos_emb.weight"][:T])
        full = torch.full((tgt.shape[0],), T)
        for i in range(cfg["dec_layers"]):
            b = f"dec.blocks.{i}."
            y = self.res(y, b + "attn_norm",
                         lambda h: self.mha(h, h, b + "attn.", True, full), self.dec_alpha)
            y = self.res(y, b + "cross_attn_norm",
                         lambda h: self.mha(h, mem, b + "cross_attn.", False, src_len),
                         self.dec_alpha)
            y = self.res(y, b + "ffn_norm", lambda h: self.ffn_at(h, b + "ffn."), self.dec_alpha)
        if pre_ln:
            y = self.norm(y, "dec.final_norm")
        head = p["tok_emb.weight"] if cfg["tied"] else p["lm_head.weight"]
        logits = y @ head.t()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                               ignore_index=-1, label_smoothing=cfg["label_smoothing"])
        return logits, loss


def run_case(norm, opts, placement, case):
    """One encoder-decoder through torch and the driver; case varies the other settings."""
    N, M = 2 + case % 2, 1 + (case + 1) % 3
    cfg = {"enc_layers": N, "dec_layers": M, "n_layer": N + M, "n_head": 2 + 2 * (case % 2),
           "n_embd": 16, "n_ff": 24, "src_ctx": 7, "tgt_ctx": 6, "n_vocab": 13,
           "norm": norm, "norm_eps": 1e-5, "rms_form": "llama", "placement": placement,
           "tied": case != 2, "bias": case != 4, "act": ("gelu", "relu", "silu")[case % 3],
           "dropout": 0.0, "label_smoothing": (0.0, 0.1, 0.3)[case % 3]}
    cfg.update(opts)
    B, S, T = 3, 7, 5 + case % 2
    src_len = np.array([4, 7, 1 + case % 3])
    src = rng.integers(3, cfg["n_vocab"], (B, S))
    for b in range(B):
        src[b, src_len[b]:] = 0  # padding
    tgt = rng.integers(3, cfg["n_vocab"], (B, T))
    tgt[:, 0] = 1
    targets = rng.integers(2, cfg["n_vocab"], (B, T))
    targets[0, T - 2:] = -1  # a shorter pronunciation
    params = random_params("encdec", cfg, rng)
    C = cfg["n_embd"]
    check_sizes(R, f"{norm} {opts} {placement} case {case}", params,
                {"enc.pos_emb.weight": (cfg["src_ctx"], C), "dec.pos_emb.weight": (cfg["tgt_ctx"], C),
                 "enc.blocks.0.ffn.fc1.weight": (cfg["n_ff"], C),
                 "dec.blocks.0.ffn.fc1.weight": (cfg["n_ff"], C)})
    model = TorchEncDec(cfg, params)
    logits, loss = model(torch.tensor(src), torch.tensor(src_len), torch.tensor(tgt),
                         torch.tensor(targets))
    loss.backward()
    tensors = dict(params, src=src.astype(np.float32), src_len=src_len.astype(np.float32),
                   tgt=tgt.astype(np.float32), targets=targets.astype(np.float32))
    got = run_driver("encdec", tensors, {"config": json.dumps(cfg), "qk_clip": 1.0})
    label = (f"{norm} {opts} {placement} {N}+{M}{'' if cfg['tied'] else ' untied'}"
             f"{'' if cfg['bias'] else ' no-bias'} {cfg['act']}"
             f" smoothing {cfg['label_smoothing']}")
    check_model(R, label, got, logits, loss, model, TOL)
    # QK-Clip's probe: S_h of every self- and cross-attention head, the attentions in table order
    pres = [n[:-len("q_proj.weight")] for n in layout("encdec", cfg)
            if n.endswith("attn.q_proj.weight")]
    R.check(f"{label} QK-Clip's S_max per head", got["qk_max"],
            torch.cat([model.smax[p] for p in pres]).numpy(), 1e-5)


# (norm, its options): LayerNorm, RMSNorm, QK-norm on the self- and cross-attention (per head with
# its gain, over the whole projection, l2), DyT and Derf (not with DeepNorm, which refuses them)
NORMS = [("ln", {}), ("rms", {}), ("ln", {"qk_norm": "rms", "qk_norm_affine": True}),
         ("rms", {"qk_norm": "ln", "qk_norm_scope": "all", "qk_norm_affine": True}),
         ("ln", {"qk_norm": "l2", "qk_norm_affine": True}), ("dyt", {}), ("derf", {})]
case = 0
for norm, opts in NORMS:
    for placement in ("pre", "post", "deepnorm"):
        if norm in ("dyt", "derf") and placement == "deepnorm":
            continue
        run_case(norm, opts, placement, case)
        case += 1
for norm in ("ln", "rms"):  # the placements that count each stack's blocks
    for placement in ("lns", "reorder"):
        run_case(norm, {}, placement, case)
        case += 1
# the embedding scale (one scalar on both sides' embeddings), with DyT and with LayerNorm
for norm, placement in (("dyt", "pre"), ("derf", "reorder"), ("ln", "post")):
    run_case(norm, {"emb_scale": True}, placement, case)
    case += 1

R.finish()
