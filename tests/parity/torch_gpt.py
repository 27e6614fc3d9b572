"""The GPT of docs/layers.md in plain torch, shared by the parity tests (test_gpt.py, test_score.py),
and its block stack, which the ViT's reference (test_vit.py) shares: parameters held under mt's
names (tok_emb.weight, blocks.{i}.attn.q_proj.weight, ...) in torch.nn's layout, as mt's
checkpoints hold them (harness.py layout reads which there are and their shapes from mt)."""
import math

import numpy as np
import torch
import torch.nn.functional as F

# the placements with a norm before the head
FINAL_NORM = ("pre", "subln", "peri", "lns", "reorder", "mixln", "dsl")
# relu2: Primer's squared ReLU as modded-nanogpt writes it, F.relu(x).square()
ACTS = {"gelu": lambda h: F.gelu(h, approximate="tanh"), "gelu_erf": F.gelu, "relu": F.relu,
        "silu": F.silu, "swiglu": F.silu, "relu2": lambda h: F.relu(h).square()}


def rope(x, theta):
    """RoPE written out in llama2.c's convention: x (B, NH, T, HS), each head's adjacent channel
    pair (2i, 2i+1) at position t turned by the angle t theta^(-2i/HS)."""
    HS, T = x.shape[-1], x.shape[-2]
    w = theta ** (-2.0 * torch.arange(HS // 2, dtype=torch.float64) / HS)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * w  # (T, HS/2)
    a, b = x[..., 0::2], x[..., 1::2]
    y = torch.stack([a * ang.cos() - b * ang.sin(), a * ang.sin() + b * ang.cos()], -1)
    return y.reshape(x.shape)


def softpick(x, eps=1e-8):
    """Softpick (arXiv 2504.20966) over the last dim as zaydzuhri/softpick-attention's naive
    softpick writes it: relu(exp(x - m) - exp(-m)) / (sum |exp(x - m) - exp(-m)| + eps), m the
    row's max, the masked (-inf) scores out of the sum."""
    m = x.max(-1, keepdim=True).values
    u = torch.exp(x - m) - torch.exp(-m)
    return F.relu(u) / (torch.where(x.isfinite(), u.abs(), 0).sum(-1, keepdim=True) + eps)


def z_loss(cfg, logits, targets):
    """PaLM's auxiliary loss (Chowdhery et al. 2022, arXiv 2204.02311, section 5): z log(Z)^2,
    Z = sum_j exp(logit_j) of a row, averaged over the rows whose target is not ignored (-1)."""
    z = cfg.get("z_loss", 0.0)
    kept = targets != -1
    return z * (torch.logsumexp(logits[kept], -1) ** 2).mean() if z else 0.0


class TorchBlocks(torch.nn.Module):
    """The block stack of models.h in plain torch, float64, parameters under the mt names; the
    GPT (causal attention) and the ViT (tests/parity/test_vit.py) add their ends to it."""

    def __init__(self, cfg, params, causal):
        super().__init__()
        self.cfg, self.causal = cfg, causal
        # float64: the reference's own rounding stays out of the comparison
        self.p = {k: torch.tensor(v, dtype=torch.float64,
                                  requires_grad=not k.endswith(("running_mean", "running_var")))
                  for k, v in params.items()}
        self.alpha = (2 * cfg["n_layer"]) ** 0.25  # DeepNet: decoder-only and encoder-only alike
        self.g_terms = {}  # ScaleNorm: the sum of |dL/dg terms| per norm, for its tolerance
        self.terms = {}  # a learned scalar's name -> the sum of |terms| of its gradient
        self.smax = {}  # block i -> (NH) each head's largest logit q.k / sqrt(HS) (QK-Clip)
        self.ve = {}  # block i -> lambda_e E_i[ids] (B, T, KC), the GPT's value embeddings

    def scalar(self, name, u, factor=None):
        """p[name] enters as u = p[name] * factor (+ ...): records sum |dL/du factor|, the terms
        of dL/dp[name] (which can cancel to far below them), for the tolerance; summed over the
        places it enters (the encoder-decoder's emb_scale: both embeddings)."""
        if u.requires_grad:
            f = 1.0 if factor is None else factor.detach()
            u.register_hook(lambda d: self.terms.__setitem__(
                name, self.terms.get(name, 0.0) + (d * f).abs().sum().item()))
        return u

    def norm(self, x, prefix):
        """The configured norm over x's last dim (C, or F for Sub-LN's FFN inner norm)."""
        cfg, p, C = self.cfg, self.p, x.shape[-1]
        kind, eps = cfg["norm"], cfg["norm_eps"]
        w, b = p.get(prefix + ".weight"), p.get(prefix + ".bias")
        if kind == "ln":
            return F.layer_norm(x, (C,), w, b, eps)
        if kind == "bn":  # over B*T per channel; running stats with momentum 0.1
            y = F.batch_norm(x.reshape(-1, C), p[prefix + ".running_mean"],
                             p[prefix + ".running_var"], w, b, self.training, 0.1, eps)
            return y.reshape(x.shape)
        if kind == "in":  # per sequence and channel over the tokens, in eval mode too
            return F.instance_norm(x.transpose(1, 2), weight=w, bias=b, eps=eps).transpose(1, 2)
        if kind == "gn":  # per token, groups of C / G channels
            return F.group_norm(x.reshape(-1, C), cfg["gn_groups"], w, b, eps).reshape(x.shape)
        if kind == "rms" and cfg["rms_form"] == "llama":
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
        if kind == "rms":  # the paper's code: eps outside the sqrt, optional bias
            y = x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * w
            return y + b if cfg.get("rms_bias") else y
        if kind == "prms":  # RMS of the first k = floor(C p) channels scales all C
            k = max(1, int(C * cfg["prms_p"]))
            return x * torch.rsqrt(x[..., :k].pow(2).mean(-1, keepdim=True) + eps) * w
        if kind == "scale":
            xh = x / x.norm(dim=-1, keepdim=True).clamp(min=eps)
            if xh.requires_grad:  # the scale of dL/dg = sum(dy * xh): the sum of |terms|
                xh.register_hook(lambda d: self.g_terms.__setitem__(
                    prefix, (d * xh.detach()).abs().sum().item() / p[prefix + ".g"].item()))
            return p[prefix + ".g"] * xh
        if kind == "dyt":  # Dynamic Tanh (Zhu et al. 2025): w tanh(alpha x) + b
            u = self.scalar(prefix + ".alpha", p[prefix + ".alpha"] * x, x)
            return w * torch.tanh(u) + b
        if kind == "derf":  # Dynamic erf (Chen et al. 2025): w erf(alpha x + s) + b
            u = self.scalar(prefix + ".alpha", p[prefix + ".alpha"] * x, x)
            u = self.scalar(prefix + ".shift", u + p[prefix + ".shift"])
            return w * torch.erf(u) + b
        assert kind == "none"
        return x

    def qk_norm(self, t, prefix):
        """QK-norm of a projection t (B, T, W) before RoPE, from the formulas of docs/layers.md:
        per head (HS channels, a gain of HS shared by the heads: Qwen3, Gemma 3) or over the
        whole W (OLMo-2); rms x / sqrt(mean(x^2) + 1e-6), ln (x - mean) / sqrt(var + 1e-5), each
        times the gain prefix.weight when learned; l2 g x / max(||x||, 1e-12)."""
        cfg, p = self.cfg, self.p
        kind = cfg.get("qk_norm", "none")
        if kind == "none":
            return t
        B, T, W = t.shape
        HS = cfg["n_embd"] // cfg["n_head"]
        x = t.reshape(B, T, W // HS, HS) if cfg.get("qk_norm_scope", "head") == "head" else t
        w = p.get(prefix + ".weight")
        if kind == "rms":
            y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        elif kind == "ln":
            y = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False,
                                                                 keepdim=True) + 1e-5)
        else:  # l2: g a learned scalar (affine only)
            y = x / x.norm(dim=-1, keepdim=True).clamp(min=1e-12)
            return self.scalar(prefix + ".g", p[prefix + ".g"] * y, y).reshape(B, T, W)
        return (y if w is None else y * w).reshape(B, T, W)

    def product(self, x, w):
        """x w^T, the linear layers' and the head's matrix product (test_bf16.py rounds its
        operands to bf16)."""
        return x @ w.t()

    def linear(self, x, prefix):
        y, b = self.product(x, self.p[prefix + ".weight"]), self.p.get(prefix + ".bias")
        return y if b is None else y + b

    def attn(self, x, i):
        B, T, C = x.shape
        NH, HS = self.cfg["n_head"], C // self.cfg["n_head"]
        NKV = self.cfg.get("n_kv_head", NH)
        pre = f"blocks.{i}.attn."
        q = self.qk_norm(self.linear(x, pre + "q_proj"), pre + "q_norm")
        q = q.view(B, T, NH, HS).transpose(1, 2)
        # grouped-query attention: head h reads key and value head h // (NH / NKV)
        k = self.qk_norm(self.linear(x, pre + "k_proj"), pre + "k_norm")
        v = self.linear(x, pre + "v_proj")
        residual = self.cfg.get("value_residual", "none")
        if residual != "none":  # ResFormer (arXiv 2410.17897): V'_n = lambda_1 V_1 + lambda_2 V_n
            if i == 0:
                self.v1 = v
            elif residual == "half":
                v = 0.5 * self.v1 + 0.5 * v
            else:
                v = self.p[pre + "lambda_v1"] * self.v1 + self.p[pre + "lambda_v"] * v
        if i in self.ve:  # modded-nanogpt's value embedding: lambda_v V + lambda_e E[ids]
            v = self.p[f"value_embeds.{i}.lambda_v"] * v + self.ve[i]
        k, v = (t.view(B, T, NKV, HS).transpose(1, 2).repeat_interleave(NH // NKV, dim=1)
                for t in (k, v))
        if self.cfg.get("pos") == "rope":
            theta = self.cfg.get("rope_theta", 10000.0)
            q, k = rope(q, theta), rope(k, theta)
        s = q @ k.transpose(-1, -2) / math.sqrt(C // NH)
        if self.causal:
            s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        self.smax[i] = s.detach().amax(dim=(0, 2, 3))  # over batch, queries, keys; no sink
        if self.cfg.get("attn_sink"):  # gpt-oss's sdpa: a column z_h per head, dropped after
            z = self.p[pre + "sink"].view(1, NH, 1, 1).expand(B, NH, T, 1)
            w = torch.cat([s, z], -1).softmax(-1)[..., :-1]
        elif self.cfg.get("softmax") == "softpick":
            w = softpick(s)
        else:
            w = s.softmax(-1)
        y = (w @ v).transpose(1, 2)  # (B, T, NH, HS)
        gate = self.cfg.get("attn_gate", "none")
        if gate != "none":  # gated attention's G1 (arXiv 2505.06708): Y sigmoid(X W_theta)
            z = self.linear(x, pre + "gate_proj").view(B, T, NH, HS if gate == "elementwise" else 1)
            y = y * torch.sigmoid(z)
        y = y.reshape(B, T, C)
        if self.cfg["placement"] == "subln":  # Sub-LN: a norm of the concatenated heads
            y = self.norm(y, pre + "inner_norm")
        return self.linear(y, pre + "out_proj")

    def hidden(self, a, g):
        """The FFN's hidden layer act(a), or silu(a) g (SwiGLU: g given); test_bf16.py rounds
        its derivatives."""
        h = ACTS[self.cfg["act"]](a)
        return h if g is None else h * g

    def ffn(self, x, i):
        a = self.linear(x, f"blocks.{i}.ffn.fc1")
        g = self.linear(x, f"blocks.{i}.ffn.fc3") if self.cfg["act"] == "swiglu" else None
        if self.cfg["placement"] == "subln":  # Sub-LN: a norm of the F hidden channels
            h = self.norm(TorchGPT.hidden(self, a, g), f"blocks.{i}.ffn.inner_norm")
        else:
            h = self.hidden(a, g)
        return self.linear(h, f"blocks.{i}.ffn.fc2")

    def residual(self, x, prefix, f):
        """prefix: the sublayer's norm, blocks.{i}.attn_norm or blocks.{i}.ffn_norm; i, the
        block's index from 0, is read from it."""
        pl, cfg = self.cfg["placement"], self.cfg
        layer = int(prefix.split("blocks.")[1].split(".")[0])
        if pl == "mixln":  # Mix-LN (arXiv 2412.13795): Post-LN in the first blocks, Pre-LN after
            post = cfg.get("mixln_post", -1)
            pl = "post" if layer < (cfg["n_layer"] // 4 if post == -1 else post) else "pre"
        if pl in ("pre", "subln"):  # subln's inner norms are in attn and ffn
            return x + f(self.norm(x, prefix))
        if pl == "lns":  # LayerNorm Scaling (arXiv 2502.05795): the norm's output / sqrt(l + 1)
            return x + f(self.norm(x, prefix) / math.sqrt(layer + 1))
        if pl == "reorder":  # OLMo-2: the sublayer's output normalised, no input norm
            return x + self.norm(f(x), prefix)
        if pl == "dsl":  # DeepScaleLM (arXiv 2403.09635): beta^2 = k / N, lambda^2 + beta^2 = 1
            beta2 = cfg.get("dsl_k", 2.0) / cfg["n_layer"]
            return math.sqrt(1 - beta2) * x + math.sqrt(beta2) * f(self.norm(x, prefix))
        if pl == "peri":  # Peri-LN: the sublayer's output normalised too
            return x + self.norm(f(self.norm(x, prefix)), prefix.replace("_norm", "_out_norm"))
        if pl == "post":
            return self.norm(x + f(x), prefix)
        return self.norm(self.alpha * x + f(x), prefix)  # deepnorm: alpha on the skip branch

    def blocks(self, x):
        """Every block, then the final norm of Pre-LN, Sub-LN and Peri-LN. A block's input: with
        unet (modded-nanogpt's U-net) block L-1-j's adds skip_weight times block j's output, j <
        L // 2; then with layer_lambdas (nanochat) resid_lambda x + x0_lambda x0, x0 the input
        of block 0."""
        L, x0, out = self.cfg["n_layer"], x, []
        for i in range(L):
            pre = f"blocks.{i}."
            if self.cfg.get("unet") and i >= L - L // 2:
                x = x + self.p[pre + "skip_weight"] * out[L - 1 - i]
            if self.cfg.get("layer_lambdas"):
                x = self.p[pre + "resid_lambda"] * x + self.p[pre + "x0_lambda"] * x0
            x = self.residual(x, f"blocks.{i}.attn_norm", lambda h: self.attn(h, i))
            x = self.residual(x, f"blocks.{i}.ffn_norm", lambda h: self.ffn(h, i))
            out.append(x)
        return self.norm(x, "final_norm") if self.cfg["placement"] in FINAL_NORM else x


class TorchGPT(TorchBlocks):
    """The GPT of docs/layers.md: token and (learned) position embeddings, the causal block
    stack (RoPE in its attention with pos rope), the head."""

    def __init__(self, cfg, params):
        super().__init__(cfg, params, causal=True)

    def forward(self, ids, targets):
        p, cfg = self.p, self.cfg
        T = ids.shape[1]
        x = p["tok_emb.weight"][ids]
        if cfg.get("pos", "learned") == "learned":
            x = x + p["pos_emb.weight"][:T]
        if cfg.get("emb_scale"):  # DyT's and Derf's LLaMA setting: a learned scalar
            x = self.scalar("emb_scale", x * p["emb_scale"], x)
        # --value-embeds "0,-1": block l's own table E_l (V, KC); shared: the list's second half
        # reads its first half's, in order (modded-nanogpt's 012 ... 012)
        at = [int(w) % cfg["n_layer"] for w in cfg.get("value_embeds", "").split(",") if w]
        for k, l in enumerate(at):
            half = cfg.get("value_embeds_shared") and k >= len(at) // 2
            table = p[f"value_embeds.{at[k - len(at) // 2] if half else l}.weight"]
            self.ve[l] = p[f"value_embeds.{l}.lambda_e"] * table[ids]
        x = self.blocks(x)
        head = p["tok_emb.weight"] if cfg["tied"] else p["lm_head.weight"]
        logits = self.product(x, head)
        cap = cfg.get("logit_softcap", 0.0)
        if cap:  # Gemma 2's soft cap (arXiv 2408.00118): cap tanh(logits / cap), the loss's too
            logits = cap * torch.tanh(logits / cap)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                               ignore_index=-1, label_smoothing=cfg.get("label_smoothing", 0.0))
        return logits, loss + z_loss(cfg, logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def n_ff(cfg):
    """The FFN width: n_ff, or by default 4 n_embd, and for SwiGLU LLaMA's int(2 (4 n_embd) / 3)
    rounded up to a multiple of ff_multiple (its ModelArgs.multiple_of)."""
    if cfg["n_ff"]:
        return cfg["n_ff"]
    if cfg["act"] != "swiglu":
        return 4 * cfg["n_embd"]
    m = cfg.get("ff_multiple", 32)
    return (int(2 * 4 * cfg["n_embd"] / 3) + m - 1) // m * m
