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

Prints one JSON line: seconds of the training steps, of the final scoring, the loss."""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


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
    if step < a.warmup:
        return a.lr * step / a.warmup
    if step >= a.steps:
        return a.min_lr
    u = (step - a.warmup) / (a.steps - a.warmup)
    return a.min_lr + (a.lr - a.min_lr) * 0.5 * (1.0 + math.cos(math.pi * u))


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
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.99), eps=1e-8)
    offs = torch.arange(T + 1)
    t0 = time.perf_counter()
    for step in range(a.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a)
        starts = torch.randint(len(train) - T, (a.batch,))
        w = train[starts[:, None] + offs]
        loss = model(w[:, :T], w[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
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
    print(json.dumps({"prog": "torch", "threads": a.threads, "steps": a.steps,
                      "train_s": round(train_s, 2), "score_s": round(time.perf_counter() - t1, 2),
                      "tok_s": round(a.steps * a.batch * T / train_s), "last_loss": round(loss.item(), 4),
                      "val_loss": round(nll / count, 4), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
