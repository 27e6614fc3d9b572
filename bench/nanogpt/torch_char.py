"""The PyTorch twin of configs/nanogpt-char.ini for bench/nanogpt.sh: nanoGPT's CPU shakespeare_char
recipe with the model and schedule as mt runs them, so that the two reach the same loss.

Model: character vocabulary of the file, learned positions, 4 Pre-LN blocks of 4 heads, n_embd
128, n_ctx 64, separate q/k/v projections, linear layers without bias, LayerNorm with bias,
exact GELU, head tied to the token embedding, GPT-2 init (N(0, 0.02), out_proj and fc2
N(0, (0.02 / sqrt(2 L))^2)). AdamW lr 1e-3, betas (0.9, 0.99), eps 1e-8, weight decay 0.1 on the
matrices and embeddings; linear warmup from 0 over 100 steps, cosine to 1e-4 at the last step;
gradient norm clipped to 1. Batches of 12 windows at uniform random starts in the first 90% of
the characters. The final loss is the mean over the last 10% in consecutive windows of n_ctx + 1
characters, as ./infer --score computes it.

--optim muon --muon-lr --adam-lr --schedule wsd --decay-frac: the same model with mt's Muon
recipe (Muon, written out below from its formulas, on the blocks' 2-D weights, AdamW on the rest),
so that bench/nanogpt.sh separates what the algorithm gives from what mt's implementation gives.

Prints one JSON line: seconds of the training steps, of the final scoring, the loss."""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from optim import newton_schulz  # noqa: E402  bench/optim.py's, written from muon.py


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.q, self.k, self.v, self.out_proj = (nn.Linear(C, C, bias=False) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(C, 4 * C, bias=False), nn.Linear(4 * C, C, bias=False)

    def forward(self, x, mask):
        B, T, C = x.shape
        h = self.ln1(x)
        q, k, v = (p(h).view(B, T, self.NH, C // self.NH).transpose(1, 2)
                   for p in (self.q, self.k, self.v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.NH))
        att = att.masked_fill(mask[:T, :T], float("-inf")).softmax(-1)
        x = x + self.out_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, V, L, C, NH, T):
        super().__init__()
        self.tok_emb, self.pos_emb = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))
        for name, p in self.named_parameters():
            if name.startswith("ln") or ".ln" in name:
                continue  # LayerNorm: weight 1, bias 0
            resid = name.endswith(("out_proj.weight", "fc2.weight"))
            nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L) if resid else 0.02)

    def forward(self, ids, targets):
        B, T = ids.shape
        x = self.tok_emb(ids) + self.pos_emb(torch.arange(T))
        for b in self.blocks:
            x = b(x, self.mask)
        logits = self.ln_f(x) @ self.tok_emb.weight.t()
        return F.cross_entropy(logits.view(B * T, -1), targets.reshape(-1))


def lr_at(step, a):
    """mt's schedules: linear warmup from 0, then cosine to min_lr at the last step, or (wsd)
    constant until a linear decay to min_lr over the last round(decay_frac steps) steps."""
    if step < a.warmup:
        return a.lr * step / a.warmup
    if step >= a.steps:
        return a.min_lr
    if a.schedule == "wsd":
        d = round(a.decay_frac * a.steps)  # half to even, as mt and nanochat
        return a.lr if step <= a.steps - d else a.min_lr + (a.lr - a.min_lr) * (a.steps - step) / d
    u = (step - a.warmup) / (a.steps - a.warmup)
    return a.min_lr + (a.lr - a.min_lr) * 0.5 * (1.0 + math.cos(math.pi * u))


class Muon(torch.optim.Optimizer):
    """Muon written out from KellerJordan/Muon's muon.py (torch 1.13 has no torch.optim.Muon),
    fp32: m = beta m + (1 - beta) g; u = (1 - beta) g + beta m (Nesterov); X = u / (|u|_F + 1e-7),
    transposed when it has more rows than columns; 5 times A = X X^T, X = a X + (b A + c A A) X
    (bench/optim.py's newton_schulz); W = (1 - lr wd) W - lr sqrt(max(1, rows / cols)) X."""

    def __init__(self, params, lr, weight_decay, momentum=0.95, ns_steps=5):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum,
                                      ns_steps=ns_steps))

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            beta = g["momentum"]
            for p in g["params"]:
                st = self.state[p]
                if "m" not in st:
                    st["m"] = torch.zeros_like(p)
                m = st["m"]
                m.mul_(beta).add_(p.grad, alpha=1 - beta)
                u = p.grad * (1 - beta) + m * beta
                x = newton_schulz(u, g["ns_steps"])
                p.mul_(1 - g["lr"] * g["weight_decay"])
                p.add_(x, alpha=-g["lr"] * max(1.0, p.shape[0] / p.shape[1]) ** 0.5)


def optimizers(model, a):
    """AdamW on everything (the recipe), or Muon on the blocks' 2-D weights (mt's groups: q, k,
    v, out_proj, fc1, fc2) and AdamW on the rest (embeddings, the tied head, LayerNorms); weight
    decay 0.1 on the matrices and the embeddings. Each with its base rate."""
    betas = (0.9, 0.99)
    if a.optim == "adamw":
        decay = [p for p in model.parameters() if p.dim() >= 2]
        other = [p for p in model.parameters() if p.dim() < 2]
        return [(torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                    {"params": other, "weight_decay": 0.0}],
                                   lr=a.lr, betas=betas, eps=1e-8), a.lr)]
    hidden = [p for n, p in model.named_parameters() if n.startswith("blocks.") and p.dim() == 2]
    ids = {id(p) for p in hidden}
    rest = [p for p in model.parameters() if id(p) not in ids]
    emb = [p for p in rest if p.dim() >= 2]
    other = [p for p in rest if p.dim() < 2]
    adam = torch.optim.AdamW([{"params": emb, "weight_decay": 0.1},
                              {"params": other, "weight_decay": 0.0}],
                             lr=a.adam_lr, betas=betas, eps=1e-8)
    return [(Muon(hidden, a.muon_lr, 0.1), a.muon_lr), (adam, a.adam_lr)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="data/tinyshakespeare.txt")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--optim", choices=["adamw", "muon"], default="adamw")
    ap.add_argument("--muon-lr", type=float, default=0.02)
    ap.add_argument("--adam-lr", type=float, default=3e-3)
    ap.add_argument("--schedule", choices=["cosine", "wsd"], default="cosine")
    ap.add_argument("--decay-frac", type=float, default=0.2)
    ap.add_argument("--prog", default="torch", help="the row's label")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    L, C, NH, T = 4, 128, 4, 64
    text = open(a.data, encoding="utf-8").read()
    chars = sorted(set(text))
    lut = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([lut[c] for c in text], dtype=torch.long)
    n_val = int(len(data) * 0.1)
    train, val = data[: len(data) - n_val], data[len(data) - n_val:]
    model = GPT(len(chars), L, C, NH, T)
    opts = optimizers(model, a)
    offs = torch.arange(T + 1)
    t0 = time.perf_counter()
    for step in range(a.steps):
        scale = lr_at(step, a) / a.lr  # each optimizer's base rate times the schedule's
        for opt, base in opts:
            for g in opt.param_groups:
                g["lr"] = base * scale
        starts = torch.randint(len(train) - T, (a.batch,))
        w = train[starts[:, None] + offs]
        loss = model(w[:, :T], w[:, 1:])
        model.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for opt, _ in opts:
            opt.step()
    train_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    nll, count, W = 0.0, 0, T + 1
    full = (len(val) - 1) // W  # whole windows, 64 at a time, then the rest
    with torch.no_grad():
        for s in range(0, full, 64):
            w = val[s * W: min(s + 64, full) * W].view(-1, W)
            nll += model(w[:, :T], w[:, 1:]).item() * w.numel() * T / W
            count += w.shape[0] * T
        w = val[full * W:]
        if len(w) > 1:
            nll += model(w[None, :-1], w[None, 1:]).item() * (len(w) - 1)
            count += len(w) - 1
    print(json.dumps({"prog": a.prog, "threads": a.threads, "steps": a.steps,
                      "train_s": round(train_s, 2), "score_s": round(time.perf_counter() - t1, 2),
                      "tok_s": round(a.steps * a.batch * T / train_s),
                      "last_loss": round(loss.item(), 4),
                      "val_loss": round(nll / count, 4), "torch": torch.__version__,
                      "isa": os.environ.get("ATEN_CPU_CAPABILITY", "default")}))


if __name__ == "__main__":
    main()
