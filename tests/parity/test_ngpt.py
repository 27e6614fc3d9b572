"""nGPT (--arch ngpt) against PyTorch written from the paper's formulas (Loshchilov et al. 2024,
arXiv 2410.01131, sections 2.1-2.6; the scalings' init/scale trick and |alpha| as NVIDIA/ngpt's
model.py): logits, loss and every gradient, the learned vectors' included, to 1e-4 relative; then
one AdamW step with the renormalisation of every matrix after it (the parameters compared after
the step), with the paper's default scalings and with others.

    h <- Norm(h + a_A (Norm(ATTN(h)) - h)),  h <- Norm(h + a_M (Norm(MLP(h)) - h)),
    a = |alpha| alpha_init / alpha_scale,  Norm(x) = x / ||x||,
    ATTN: q, k rotated (RoPE), then Norm per head times s_qk (init / scale), softmax scale
          sqrt(d_k) instead of 1 / sqrt(d_k);
    MLP:  u = x W_u^T s_u,  v = x W_v^T s_v sqrt(d_model)  (s_uv's init / scale),  u SiLU(v) W_o^T;
    logits z = x W_head^T s_z (init / scale); embeddings and matrices unit along d_model.

bf16 (when this build and CPU have it): the same model whose linear layers and head multiply
operands rounded to bf16, products summed in float64, the backward's dy rounded too (what oneDNN
computes; test_bf16.py's reference, whose tolerance argument holds here: everything else stays
fp32). Measured: mt within 1.7e-4 relative of it (logits, loss, every gradient; the first block's
q_proj and v_proj the largest), so TOL_BF16 = 2e-3, below test_bf16.py's 3e-3 because the plain
float64 model is off by only 8e-3 to 1e-2 here (unit vectors: the products' rounding is small
against their sums) and must be more than 3 TOL_BF16 away, so that the check tells bf16 products
from fp32 ones."""
import json
import math

import numpy as np
import torch
import torch.nn.functional as F

from bf16_ref import BF16Product
from harness import Report, bf16_missing, check_model, check_sizes, layout, run_driver
from torch_gpt import rope

rng = np.random.default_rng(29)
R = Report("parity ngpt")
TOL, TOL_BF16 = 1e-4, 2e-3

# unit along d_model (C): rows of these (out, C) matrices, columns of the (C, in) ones
ROWS = ("tok_emb.weight", "lm_head.weight", "q_proj.weight", "k_proj.weight", "v_proj.weight",
        "fc1.weight", "fc3.weight")
COLS = ("out_proj.weight", "fc2.weight")


def unit(name, w):
    """w with its vectors along C of norm 1 (the paper's normalisation of the matrices)."""
    if name.endswith(ROWS):
        return w / np.linalg.norm(w, axis=1, keepdims=True)
    if name.endswith(COLS):
        return w / np.linalg.norm(w, axis=0, keepdims=True)
    return w


def scalings(cfg):
    """(init, scale) of alpha, s_qk, s_uv, s_z: a scale of 0 is 1 / sqrt(C)."""
    r = 1 / math.sqrt(cfg["n_embd"])
    return {k: (cfg.get(f"ngpt_{k}_init", d), cfg.get(f"ngpt_{k}_scale", s) or r)
            for k, d, s in (("alpha", 0.05, 0), ("sqk", 1.0, 0), ("suv", 1.0, 1.0),
                            ("sz", 1.0, 0))}


# the scalings' names (the ends of mt's), by the kind of scalings() they hold
SCALINGS = {"attn_alpha": "alpha", "ffn_alpha": "alpha", "s_qk": "sqk", "s_u": "suv",
            "s_v": "suv", "s_z": "sz"}


def ngpt_params(cfg):
    """Unit matrices (as training keeps them); each learned vector about its initial value
    (stored at its scale), spread so that they differ per channel; one alpha entry negative
    (|alpha| is what acts)."""
    sc = scalings(cfg)
    out = {}
    for name, (shape, _) in layout("gpt", cfg).items():
        z = rng.standard_normal(shape)
        kind = SCALINGS.get(name.rsplit(".", 1)[-1], "m")
        if kind == "m":
            v = unit(name, z)
        else:
            v = sc[kind][1] * (1 + 0.3 * z)
            if kind == "alpha":
                v[1] = -v[1]
        out[name] = v.astype(np.float32)
    return out


class TorchNGPT(torch.nn.Module):
    """The normalised Transformer from the formulas above, float64, parameters under mt's names."""

    def __init__(self, cfg, params):
        super().__init__()
        self.cfg, self.sc = cfg, scalings(cfg)
        self.p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True)
                  for k, v in params.items()}

    def product(self, x, w):
        """x w^T: the linear layers' and the head's product (rounded in TorchNGPTBF16)."""
        return x @ w.t()

    def s(self, name, kind):
        init, scale = self.sc[kind]
        return self.p[name] * (init / scale)

    def update(self, h, f, alpha):
        """h <- Norm(h + a (Norm(f) - h)), a = |alpha| init / scale (the eigen learning rate)."""
        a = self.s(alpha, "alpha").abs()
        return F.normalize(h + a * (F.normalize(f, dim=-1, eps=0) - h), dim=-1, eps=0)

    def attn(self, h, i):
        p, cfg = self.p, self.cfg
        B, T, C = h.shape
        NH = cfg["n_head"]
        HS = C // NH
        b = f"blocks.{i}.attn."
        q, k, v = (self.product(h, p[b + f"{n}_proj.weight"]) for n in "qkv")
        q, k, v = (t.view(B, T, NH, HS).transpose(1, 2) for t in (q, k, v))
        q, k = rope(q, 10000.0), rope(k, 10000.0)
        sqk = self.s(b + "s_qk", "sqk").view(NH, 1, HS)
        q = sqk * F.normalize(q, dim=-1, eps=0)
        k = sqk * F.normalize(k, dim=-1, eps=0)
        s = q @ k.transpose(-1, -2) * math.sqrt(HS)  # the softmax scale sqrt(d_k)
        s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        y = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        return self.product(y, p[b + "out_proj.weight"])

    def mlp(self, h, i):
        p, C = self.p, self.cfg["n_embd"]
        b = f"blocks.{i}.ffn."
        u = self.product(h, p[b + "fc3.weight"]) * self.s(b + "s_u", "suv")
        v = self.product(h, p[b + "fc1.weight"]) * self.s(b + "s_v", "suv") * math.sqrt(C)
        return self.product(u * F.silu(v), p[b + "fc2.weight"])

    def forward(self, ids, targets):
        h = self.p["tok_emb.weight"][ids]
        for i in range(self.cfg["n_layer"]):
            h = self.update(h, self.attn(h, i), f"blocks.{i}.attn_alpha")
            h = self.update(h, self.mlp(h, i), f"blocks.{i}.ffn_alpha")
        logits = self.product(h, self.p["lm_head.weight"]) * self.s("s_z", "sz")
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                               ignore_index=-1)
        return logits, loss


def step(model, lr, eps):
    """torch's AdamW (betas 0.9, 0.95, no weight decay) on the gradients, then every matrix's
    vectors along C back onto the unit sphere."""
    opt = torch.optim.AdamW(list(model.p.values()), lr=lr, betas=(0.9, 0.95), eps=eps,
                            weight_decay=0.0)
    opt.step()
    with torch.no_grad():
        for name, t in model.p.items():
            t.copy_(torch.tensor(unit(name, t.numpy())))


def run_case(cfg, B, T, label, lr=0.05, eps=1e-3):
    """The driver gets cfg (arch ngpt, as a user gives it); torch the formulas. AdamW's eps is
    large so that the update is a smooth function of the gradient: two gradients within 1e-4
    of each other give steps within about as much (a tiny gradient's sign cannot flip it)."""
    Fw = cfg.get("n_ff") or (int(2 * 4 * cfg["n_embd"] / 3) + 31) // 32 * 32
    full = dict(cfg, n_ff=Fw)
    ids = rng.integers(0, cfg["n_vocab"], (B, T))
    targets = rng.integers(0, cfg["n_vocab"], (B, T))
    targets[0, 1] = -1  # ignored
    params = ngpt_params(cfg)
    check_sizes(R, label, params, {"blocks.0.ffn.fc1.weight": (Fw, cfg["n_embd"])})
    model = TorchNGPT(full, params)
    logits, loss = model(torch.tensor(ids), torch.tensor(targets))
    loss.backward()
    tensors = dict(params, ids=ids.astype(np.float32), targets=targets.astype(np.float32))
    got = run_driver("gpt", tensors, {"config": json.dumps(cfg), "B": B, "T": T,
                                      "step_lr": lr, "step_eps": eps})
    check_model(R, label, got, logits, loss, model, TOL)
    step(model, lr, eps)
    for name, t in model.p.items():
        R.check(f"{label} after a step: {name}", got["step." + name], t.detach().numpy(), TOL)
        if name.endswith(ROWS + COLS):  # and on the sphere
            w = got["step." + name]
            norms = np.linalg.norm(w, axis=1 if name.endswith(ROWS) else 0)
            R.check(f"{label} after a step: {name} unit", norms, np.ones_like(norms), 1e-5)


BASE = {"arch": "ngpt", "n_layer": 2, "n_head": 2, "n_embd": 16, "n_ctx": 9, "n_vocab": 11,
        "n_ff": 24}
run_case(BASE, 2, 8, "ngpt paper scalings")
run_case(dict(BASE, n_layer=3, n_head=4, n_ff=0), 2, 9, "ngpt L3 4 heads n_ff rule")
run_case(dict(BASE, n_embd=32, ngpt_alpha_init=0.2, ngpt_alpha_scale=0.5, ngpt_sqk_init=2.0,
              ngpt_sqk_scale=0.25, ngpt_suv_init=0.5, ngpt_suv_scale=2.0, ngpt_sz_init=3.0,
              ngpt_sz_scale=0.1), 3, 7, "ngpt other scalings")
# the register-tile path of the attention (head size 16)
run_case(dict(BASE, n_embd=64, n_head=4, n_ctx=12), 2, 11, "ngpt head size 16")


class TorchNGPTBF16(TorchNGPT):
    def product(self, x, w):
        return BF16Product.apply(x, w)


def bf16_case(cfg, B, T, label):
    """cfg in bf16 against the rounded reference (TOL_BF16) and the plain one (told apart)."""
    full = dict(cfg, n_ff=cfg["n_ff"])
    ids = rng.integers(0, cfg["n_vocab"], (B, T))
    targets = rng.integers(0, cfg["n_vocab"], (B, T))
    params = ngpt_params(cfg)
    tensors = dict(params, ids=ids.astype(np.float32), targets=targets.astype(np.float32))
    got = run_driver("gpt", tensors, {"config": json.dumps(cfg), "B": B, "T": T,
                                      "precision": "bf16"})
    plain = 0.0
    for ref_type in (TorchNGPTBF16, TorchNGPT):
        model = ref_type(full, params)
        logits, loss = model(torch.tensor(ids), torch.tensor(targets))
        loss.backward()
        want = {"logits": logits.detach().numpy(), "loss": loss.detach().numpy().reshape(1)}
        want.update({"grad." + k: t.grad.numpy() for k, t in model.p.items()})
        for k, w in want.items():
            if ref_type is TorchNGPTBF16:
                R.check(f"{label} bf16 {k}", got[k], w, TOL_BF16)
            else:
                e = np.abs(got[k] - w).max() / max(np.abs(w).max(), 1e-30)
                plain = max(plain, e)
    print(f"  {label} bf16: against the unrounded float64 model, largest error {plain:.2g}")
    R.check(f"{label} bf16: the unrounded model is told apart (error >= 3 TOL_BF16)",
            [min(plain, 3 * TOL_BF16)], [3 * TOL_BF16], 0.0)


why = bf16_missing()
if why:
    print(f"parity ngpt bf16: skipped: {why}")
else:
    bf16_case(dict(BASE, n_embd=32, n_ctx=16, n_vocab=29, n_ff=64), 3, 16, "ngpt")
    bf16_case(dict(BASE, n_embd=64, n_head=4, n_ctx=16, n_vocab=29, n_ff=96), 3, 16,
              "ngpt head size 16")
R.finish()
