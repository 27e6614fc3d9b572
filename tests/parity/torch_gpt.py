"""The GPT of REFERENCE.md in plain torch, shared by the parity tests (test_gpt.py, test_score.py):
parameters held under mt's names (tok_emb.weight, blocks.{i}.attn.q_proj.weight, ...) in
torch.nn's layout."""
import math

import torch
import torch.nn.functional as F


class TorchGPT(torch.nn.Module):
    """The GPT of REFERENCE.md in plain torch: parameters held under the mt names."""

    def __init__(self, cfg, params):
        super().__init__()
        self.cfg = cfg
        # float64: the reference's own rounding stays out of the comparison
        self.p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True)
                  for k, v in params.items()}
        L = cfg["n_layer"]
        self.alpha = (2 * L) ** 0.25  # DeepNet, decoder-only

    def norm(self, x, prefix):
        cfg, p, C = self.cfg, self.p, self.cfg["n_embd"]
        kind, eps = cfg["norm"], cfg["norm_eps"]
        if kind == "ln":
            return F.layer_norm(x, (C,), p[prefix + ".weight"], p[prefix + ".bias"], eps)
        if kind == "rms" and cfg["rms_form"] == "llama":
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * p[prefix + ".weight"]
        if kind == "rms":  # the paper's code: eps outside the sqrt, optional bias
            y = x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * p[prefix + ".weight"]
            return y + p[prefix + ".bias"] if cfg.get("rms_bias") else y
        if kind == "prms":  # RMS of the first k = floor(C p) channels scales all C
            k = max(1, int(C * cfg["prms_p"]))
            ms = x[..., :k].pow(2).mean(-1, keepdim=True)
            return x * torch.rsqrt(ms + eps) * p[prefix + ".weight"]
        if kind == "gn":  # per token, groups of C / G channels
            y = F.group_norm(x.reshape(-1, C), cfg["gn_groups"], p[prefix + ".weight"],
                             p[prefix + ".bias"], eps)
            return y.reshape(x.shape)
        if kind == "scale":
            return p[prefix + ".g"] * x / x.norm(dim=-1, keepdim=True).clamp(min=eps)
        assert kind == "none"
        return x

    def linear(self, x, prefix):
        return F.linear(x, self.p[prefix + ".weight"], self.p.get(prefix + ".bias"))

    def attn(self, x, i):
        B, T, C = x.shape
        NH = self.cfg["n_head"]
        pre = f"blocks.{i}.attn."
        q, k, v = (self.linear(x, pre + n).view(B, T, NH, C // NH).transpose(1, 2)
                   for n in ("q_proj", "k_proj", "v_proj"))
        s = q @ k.transpose(-1, -2) / math.sqrt(C // NH)
        s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        y = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        return self.linear(y, pre + "out_proj")

    def ffn(self, x, i):
        act = {"gelu": lambda h: F.gelu(h, approximate="tanh"), "gelu_erf": F.gelu,
               "relu": F.relu, "silu": F.silu}[self.cfg["act"]]
        return self.linear(act(self.linear(x, f"blocks.{i}.ffn.fc1")), f"blocks.{i}.ffn.fc2")

    def residual(self, x, prefix, f):
        pl = self.cfg["placement"]
        if pl == "pre":
            return x + f(self.norm(x, prefix))
        if pl == "post":
            return self.norm(x + f(x), prefix)
        return self.norm(self.alpha * x + f(x), prefix)  # deepnorm: alpha on the skip branch

    def forward(self, ids, targets):
        p, cfg = self.p, self.cfg
        T = ids.shape[1]
        x = p["tok_emb.weight"][ids] + p["pos_emb.weight"][:T]
        for i in range(cfg["n_layer"]):
            x = self.residual(x, f"blocks.{i}.attn_norm", lambda h: self.attn(h, i))
            x = self.residual(x, f"blocks.{i}.ffn_norm", lambda h: self.ffn(h, i))
        if cfg["placement"] == "pre":
            x = self.norm(x, "final_norm")
        head = p["tok_emb.weight"] if cfg["tied"] else p["lm_head.weight"]
        logits = x @ head.t()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                               ignore_index=-1)
        return logits, loss
