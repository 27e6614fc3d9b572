"""A LoRA step against PyTorch: the GPT of torch_gpt.py with each target matrix's linear layer
written from Hu et al. 2021's formula, W x + b + (alpha / r) B A x (dropout 0), the base frozen
(no gradient) and the adapters A (r, K) and B (O, r) trained: the logits, the loss, every adapter's
gradient, and the adapters after one AdamW step (betas 0.9, 0.95, no weight decay), to 1e-4
relative, on the same weights and inputs (B random, not zero, so that A's gradient is not zero).
peft's target names: q, k, v, o the attention's projections; gate, up, down a SwiGLU FFN's fc1,
fc3, fc2, and a GELU FFN's up and down its fc1 and fc2."""
import json

import numpy as np
import torch

from harness import Report, random_params, run_driver
from torch_gpt import TorchGPT

rng = np.random.default_rng(0)
R = Report("parity lora")
TOL = 1e-4
MODULES = {"q": "attn.q_proj", "k": "attn.k_proj", "v": "attn.v_proj", "o": "attn.out_proj",
           "down": "ffn.fc2"}


def modules(cfg, targets):
    """The prefixes of the matrices the targets name in block i (their weight: prefix.weight)."""
    glu = cfg.get("act") == "swiglu"
    names = dict(MODULES, gate="ffn.fc1" if glu else None, up="ffn.fc3" if glu else "ffn.fc1")
    return [names[t] for t in targets]


class TorchLoRA(TorchGPT):
    def __init__(self, cfg, params, adapted, scale):
        super().__init__(cfg, params)
        self.adapted, self.scale = adapted, scale
        for name, t in self.p.items():
            t.requires_grad_(".lora_" in name)  # the base frozen

    def linear(self, x, prefix):
        y = super().linear(x, prefix)
        if prefix not in self.adapted:
            return y
        A, B = self.p[prefix + ".lora_A.weight"], self.p[prefix + ".lora_B.weight"]
        return y + self.scale * (x @ A.t()) @ B.t()


def run_case(cfg, targets, r, alpha, label, B=2, T=8, lr=0.05, eps=1e-3):
    ids = rng.integers(0, cfg["n_vocab"], (B, T))
    ids_t = rng.integers(0, cfg["n_vocab"], (B, T))
    params = random_params("gpt", cfg, rng)
    adapted = []
    for i in range(cfg["n_layer"]):
        for m in modules(cfg, targets):
            prefix = f"blocks.{i}.{m}"
            O, K = params[prefix + ".weight"].shape
            params[prefix + ".lora_A.weight"] = (rng.uniform(-1, 1, (r, K)) / K ** 0.5).astype(
                np.float32)
            params[prefix + ".lora_B.weight"] = (0.3 * rng.standard_normal((O, r))).astype(
                np.float32)
            adapted.append(prefix)
    model = TorchLoRA(cfg, params, set(adapted), alpha / r)
    logits, loss = model(torch.tensor(ids), torch.tensor(ids_t))
    loss.backward()
    tensors = dict(params, ids=ids.astype(np.float32), targets=ids_t.astype(np.float32))
    got = run_driver("gpt", tensors, {"config": json.dumps(cfg), "B": B, "T": T,
                                      "lora_rank": r, "lora_alpha": alpha,
                                      "lora_targets": ",".join(targets),
                                      "step_lr": lr, "step_eps": eps})
    R.check(f"{label} logits", got["logits"], logits.detach().numpy(), TOL)
    R.check(f"{label} loss", got["loss"], loss.detach().numpy().reshape(1), TOL)
    trained = {k for k, t in model.p.items() if t.requires_grad}
    R.check(f"{label} the trained tensors: the adapters",
            sorted(k[5:] for k in got if k.startswith("grad.")) == sorted(trained), True, 0)
    for name in sorted(trained):
        R.check(f"{label} grad {name}", got["grad." + name], model.p[name].grad.numpy(), TOL)
    opt = torch.optim.AdamW([model.p[k] for k in sorted(trained)], lr=lr, betas=(0.9, 0.95),
                            eps=eps, weight_decay=0.0)
    opt.step()
    for name, t in model.p.items():  # the adapters stepped, the base as it was
        R.check(f"{label} after a step: {name}", got["step." + name], t.detach().numpy(), TOL)


BASE = {"n_layer": 2, "n_head": 2, "n_embd": 16, "n_ctx": 9, "n_vocab": 11, "n_ff": 24,
        "norm": "ln", "placement": "pre", "norm_eps": 1e-5, "tied": True, "bias": True,
        "act": "gelu", "dropout": 0.0}
run_case(BASE, ["q", "v"], 4, 8.0, "gpt q,v r4")
run_case(BASE, ["q", "k", "v", "o", "up", "down"], 2, 3.0, "gpt every matrix r2")
LLAMA = dict(BASE, norm="rms", rms_form="llama", bias=False, act="swiglu", pos="rope",
             tied=False, n_head=4, n_kv_head=2)
run_case(LLAMA, ["q", "k", "v", "o", "gate", "up", "down"], 3, 6.0, "llama-shaped every matrix")
run_case(dict(LLAMA, n_embd=64, n_ctx=12), ["v", "o"], 16, 16.0, "head size 16 r16", T=11)
R.finish()
