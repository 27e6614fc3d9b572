#!/usr/bin/python3
"""The PyTorch twin of a ./train run of the GPT (scripts/depth_study3.py): the model of
tests/parity/torch_gpt.py in float32 from the run's step-0 checkpoint, trained as ./train trains
it (AdamW with betas (0.9, 0.99), eps 1e-8, decay 0.1 on the matrices and the head; global
clipping at 1; linear warmup over 100 steps from 0, then cosine to 1e-4 over 400 steps), on
batches of 16 x 64 bytes drawn by its own generator from tiny Shakespeare's first 90%. Every 10
steps it writes the residual stream entering each of the first, middle and last blocks (the mean
over the tokens of ||x||, as diag_resid.csv) on the first four 64-byte windows of the last 10%,
and the training loss.

usage: scripts/torch_twin.py INIT.safetensors LAYERS PLACEMENT LR STEPS OUT.csv
Debian's python3-torch and numpy.
"""
import math
import os
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests/parity"))
from harness import load  # noqa: E402
from torch_gpt import TorchGPT  # noqa: E402

B, T, WARMUP, TOTAL, MIN_LR = 16, 64, 100, 400, 1e-4


def lr_at(lr, s):
    """./train's schedule at update s (0-based): warmup from 0, then cosine to MIN_LR."""
    if s < WARMUP:
        return lr * s / WARMUP
    return MIN_LR + 0.5 * (lr - MIN_LR) * (1 + math.cos(math.pi * (s - WARMUP) / (TOTAL - WARMUP)))


def stream_norms(m, ids, layers):
    """{layer: mean token norm of the stream entering it} for layer in layers (L: leaving)."""
    out, L = {}, m.cfg["n_layer"]
    with torch.no_grad():
        x = m.p["tok_emb.weight"][ids] + m.p["pos_emb.weight"][:ids.shape[1]]
        for i in range(L + 1):
            if i in layers:
                out[i] = x.norm(dim=-1).mean().item()
            if i < L:
                x = m.residual(x, f"blocks.{i}.attn_norm", lambda h: m.attn(h, i))
                x = m.residual(x, f"blocks.{i}.ffn_norm", lambda h: m.ffn(h, i))
    return out


def main():
    init, L, placement, lr, steps, dst = sys.argv[1:7]
    L, lr, steps = int(L), float(lr), int(steps)
    torch.set_num_threads(1)
    torch.manual_seed(1)
    cfg = {"n_layer": L, "n_head": 2, "norm": "ln", "norm_eps": 1e-5, "placement": placement,
           "act": "gelu", "tied": False, "pos": "learned"}
    m = TorchGPT(cfg, load(init)[0])
    m.p = {k: v.detach().float().requires_grad_() for k, v in m.p.items()}
    data = np.frombuffer(open(os.path.join(ROOT, "data/tinyshakespeare.txt"), "rb").read(),
                         dtype=np.uint8).astype(np.int64)
    split = len(data) - len(data) // 10
    train, val = torch.from_numpy(data[:split]), torch.from_numpy(data[split:])
    probe = val[:4 * T].view(4, T)
    matrix = lambda k, v: v.dim() == 2 and "emb" not in k  # noqa: E731
    opt = torch.optim.AdamW(
        [{"params": [v for k, v in m.p.items() if matrix(k, v)], "weight_decay": 0.1},
         {"params": [v for k, v in m.p.items() if not matrix(k, v)], "weight_decay": 0.0}],
        lr=lr, betas=(0.9, 0.99), eps=1e-8)
    keep = sorted({0, L // 2, L - 1, L})
    with open(dst, "w") as f:
        f.write("step,layer,norm,loss\n")
        for s in range(steps + 1):
            if s % 10 == 0 or s == steps:
                for layer, v in stream_norms(m, probe, keep).items():
                    f.write("%d,%d,%.6g,%s\n" % (s, layer, v, "%.5f" % loss if s else ""))
                f.flush()
            if s == steps:
                break
            ix = torch.randint(len(train) - T - 1, (B,)).tolist()
            x = torch.stack([train[i:i + T] for i in ix])
            y = torch.stack([train[i + 1:i + T + 1] for i in ix])
            loss = m(x, y)[1]
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(list(m.p.values()), 1.0)
            for g in opt.param_groups:
                g["lr"] = lr_at(lr, s)
            opt.step()
            loss = loss.item()


if __name__ == "__main__":
    main()
