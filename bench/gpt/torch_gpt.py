"""The PyTorch reference for bench/gpt.c: the same GPT (vocab 256, pre-norm LayerNorm or RMSNorm,
learned positions, head tied to the token embedding, GELU tanh, biases, separate q/k/v projections,
GPT-2 init), the same AdamW (torch defaults: lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.01
on the Linear weights only, as mt's table decays matrices only) and the same batch shape of
uniform random tokens. One training step = zero grad + forward + loss + backward + AdamW step.
Prints one JSON line: median ms per step over --steps steps after --untimed ones, tokens/s, peak
RSS. The flags are bench/gpt's (./train's names).

--arch llama: LLaMA's decoder at the same size, as mt's --arch llama resolves it: no biases,
RMSNorm (LLaMA form) whatever --norm says, no position embedding but RoPE on q and k (llama2.c's
adjacent channel pairs), SwiGLU fc2(silu(fc1 x) * fc3 x) with n_ff = int(2 (4 C) / 3) rounded up to
a multiple of 32; the head tied, the same init.

--autocast: torch's CPU mixed precision (bf16 autocast around the forward and the loss; the
backward follows the forward's types, master weights and AdamW stay fp32).

Run it as bench/run.sh does: torch's best setting here is --threads 2 with bench/env.sh's
$TORCH_BEST (the OpenMP OpenBLAS, the CPU's widest ATEN_CPU_CAPABILITY); without --threads torch
keeps its default thread count."""
import argparse
import json
import math
import os
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    """LLaMA form: x / sqrt(mean(x^2) + eps) * weight (torch 1.13 has no nn.RMSNorm)."""

    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_table(T, HS, theta=10000.0):
    """cos, sin (T, 1, HS/2) of the angle t theta^(-2i/HS), as llama2.c's precompute_freqs_cis."""
    w = theta ** (-torch.arange(0, HS, 2, dtype=torch.float64) / HS)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), w).float()[:, None, :]
    return ang.cos(), ang.sin()


def rope(x, cos, sin):
    """x (B, T, NH, HS): each head's adjacent pair (2i, 2i+1) turned, as llama2.c's model.py."""
    a, b = x.reshape(x.shape[:-1] + (-1, 2)).unbind(-1)
    return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(3)


class Block(nn.Module):
    def __init__(self, C, NH, norm, llama):
        super().__init__()
        self.NH, self.llama = NH, llama
        self.attn_norm, self.ffn_norm = norm(C), norm(C)
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(C, C, bias=not llama) for _ in range(3))
        self.out_proj = nn.Linear(C, C, bias=not llama)
        F_ = (int(2 * 4 * C / 3) + 31) // 32 * 32 if llama else 4 * C
        self.fc1, self.fc2 = nn.Linear(C, F_, bias=not llama), nn.Linear(F_, C, bias=not llama)
        if llama:
            self.fc3 = nn.Linear(C, F_, bias=False)

    def forward(self, x, mask, cos_sin):
        B, T, C = x.shape
        h = self.attn_norm(x)
        q, k, v = (p(h).view(B, T, self.NH, C // self.NH)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        if self.llama:
            q, k = rope(q, *cos_sin), rope(k, *cos_sin)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.NH))
        att = att.masked_fill(mask[:T, :T], float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.out_proj(y)
        h = self.ffn_norm(x)
        if self.llama:
            return x + self.fc2(F.silu(self.fc1(h)) * self.fc3(h))
        return x + self.fc2(F.gelu(self.fc1(h), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, T, V, norm, llama):
        super().__init__()
        self.tok_emb = nn.Embedding(V, C)
        self.pos_emb = None if llama else nn.Embedding(T, C)
        self.cos_sin = rope_table(T, C // NH) if llama else None
        self.blocks = nn.ModuleList(Block(C, NH, norm, llama) for _ in range(L))
        self.final_norm = norm(C)
        self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))
        # GPT-2 init, as mt's MT_SCHEME_GPT2: N(0, 0.02), the residual outputs (out_proj, fc2)
        # N(0, (0.02 / sqrt(2 L))^2), biases 0, norm weights 1
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "norm" in name:
                nn.init.ones_(p)
            else:
                resid = name.endswith(("out_proj.weight", "fc2.weight"))
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L) if resid else 0.02)

    def forward(self, ids, targets):
        B, T = ids.shape
        x = self.tok_emb(ids)
        if self.pos_emb is not None:
            x = x + self.pos_emb(torch.arange(T))
        cos_sin = None if self.cos_sin is None else tuple(t[:T] for t in self.cos_sin)
        for b in self.blocks:
            x = b(x, self.mask, cos_sin)
        logits = self.final_norm(x) @ self.tok_emb.weight.t()
        return F.cross_entropy(logits.view(B * T, -1), targets.reshape(-1))


def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--name", default="tiny")
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-ctx", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--norm", choices=("ln", "rms"), default="ln")
    ap.add_argument("--arch", choices=("gpt", "llama"), default="gpt")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--untimed", type=int, default=3, help="steps before the timed ones")
    ap.add_argument("--threads", type=int, default=0, help="0: torch's default")
    ap.add_argument("--setting", default="", help="a label for the report")
    ap.add_argument("--autocast", action="store_true",
                    help="forward and loss under torch.autocast('cpu', torch.bfloat16): torch's "
                         "CPU mixed precision, the counterpart of mt's --precision bf16")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    base = rss_mib()
    V, L, C, NH, T, B = 256, a.n_layer, a.n_embd, a.n_head, a.n_ctx, a.batch
    llama = a.arch == "llama"
    norm = (lambda c: nn.LayerNorm(c, eps=1e-5)) if a.norm == "ln" and not llama else RMSNorm
    model = GPT(L, C, NH, T, V, norm, llama)
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and p.dim() == 2
             and "emb" not in n]
    other = [p for n, p in model.named_parameters() if not (n.endswith("weight") and p.dim() == 2
             and "emb" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": other, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    times, losses = [], []
    for step in range(a.untimed + a.steps):
        data = torch.randint(0, V, (B, T + 1))
        ids, targets = data[:, :T], data[:, 1:]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast):
            loss = model(ids, targets)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if step >= a.untimed:
            times.append(dt)
    ms = statistics.median(times) * 1e3
    print(json.dumps({
        "prog": "torch", "setting": a.setting, "config": a.name, "arch": a.arch,
        "threads": torch.get_num_threads(),
        "blas": os.environ.get("LD_LIBRARY_PATH", "default"),
        "isa": os.environ.get("ATEN_CPU_CAPABILITY", "default"), "torch": torch.__version__,
        "params": sum(p.numel() for p in model.parameters()), "layers": L, "embd": C, "batch": B, "ctx": T,
        "steps": a.steps, "ms_step": round(ms, 3), "tok_s": round(B * T / (ms / 1e3), 1),
        "ms_steps": [round(t * 1e3, 3) for t in times],
        "rss_mib": round(rss_mib(), 1), "rss_base_mib": round(base, 1),
        "loss_first": round(losses[0], 4), "loss_last": round(losses[-1], 4)}))


if __name__ == "__main__":
    main()
