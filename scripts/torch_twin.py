#!/usr/bin/python3
"""The PyTorch twin of a ./train run of the GPT (scripts/depth_study3.py): the model of
tests/parity/torch_gpt.py in float32 from the run's step-0 checkpoint, trained as ./train trains
it (AdamW with betas (0.9, 0.99), eps 1e-8, decay 0.1 on the matrices and the head, none on the
embeddings, norms and scalars; global clipping at 1; linear warmup over 100 steps from 0, then
cosine to 1e-4 over 400 steps), on batches of 16 x 64 bytes drawn by its own generator from tiny
Shakespeare's first 90%. Every 10 steps it writes the residual stream entering each of the first,
middle and last blocks (the mean over the tokens of ||x||, as diag_resid.csv) on the first four
64-byte windows of the last 10% (the probe batch), and the training loss.

usage: scripts/torch_twin.py INIT.safetensors LAYERS PLACEMENT LR STEPS OUT.csv [options]
  --norm dyt|derf|ln    the norm of every site (ln)
  --emb-scale           the learned scalar on the embeddings (emb_scale in INIT)
  --grad G.csv          every 10 steps each block's gradient norm before clipping (step,layer,
                        total; layer -1: the parameters outside the blocks), as diag_grad.csv
  --sat S.csv           every 10 steps, for each DyT or Derf site on the probe batch: alpha, the
                        largest |u| (u = alpha x + shift), the mean |u|, and the fraction of
                        elements whose derivative f'(u) is exactly 0 in float32 (saturated) and
                        below 1e-2 (|u| > 3 for tanh); the input's part shared by the
                        tokens (the norm of its mean over them) and the rest (the mean norm of
                        each token's difference from that mean)
  --alpha-attn A, --alpha-ffn A, --alpha-final A   set those sites' alpha in the twin at step 0
usage: scripts/torch_twin.py --probe NORM S.csv CKPT... : --sat's rows for checkpoints of ./train
(their step from the metadata), nothing trained.
Debian's python3-torch and numpy.
"""
import argparse
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
POINT = ("dyt", "derf")


def lr_at(lr, s):
    """./train's schedule at update s (0-based): warmup from 0, then cosine to MIN_LR."""
    if s < WARMUP:
        return lr * s / WARMUP
    return MIN_LR + 0.5 * (lr - MIN_LR) * (1 + math.cos(math.pi * (s - WARMUP) / (TOTAL - WARMUP)))


class Twin(TorchGPT):
    """TorchGPT whose point-wise norms record their inputs' statistics when self.sat is a dict
    ({site: (alpha, max |u|, mean |u|, fraction f' == 0, fraction f' < 1e-2, the norm of the
    input's mean over the tokens, the mean over the tokens of ||x - that mean||)})."""

    sat = None

    def norm(self, x, prefix):
        if self.sat is not None and self.cfg["norm"] in POINT:
            with torch.no_grad():
                a = self.p[prefix + ".alpha"].float()
                u = a * x.float() + (self.p[prefix + ".shift"].float()
                                     if self.cfg["norm"] == "derf" else 0.0)
                if self.cfg["norm"] == "dyt":  # f' = 1 - tanh^2, in float32
                    d = 1 - torch.tanh(u) ** 2
                else:  # f' = 2/sqrt(pi) exp(-u^2)
                    d = 2 / math.sqrt(math.pi) * torch.exp(-u * u)
                shared = x.reshape(-1, x.shape[-1]).mean(0)
                self.sat[prefix] = (a.item(), u.abs().max().item(), u.abs().mean().item(),
                                    (d == 0).float().mean().item(),
                                    (d < 1e-2).float().mean().item(), shared.norm().item(),
                                    (x - shared).norm(dim=-1).mean().item())
        return super().norm(x, prefix)


def model(init, L, placement, norm, emb_scale):
    cfg = {"n_layer": L, "n_head": 2, "norm": norm, "norm_eps": 1e-5, "placement": placement,
           "act": "gelu", "tied": False, "pos": "learned", "emb_scale": emb_scale}
    params, meta = load(init)
    m = Twin(cfg, params)
    m.p = {k: v.detach().float().requires_grad_() for k, v in m.p.items()}
    return m, meta


def stream_norms(m, ids, layers):
    """{layer: mean token norm of the stream entering it} for layer in layers (L: leaving)."""
    out, L = {}, m.cfg["n_layer"]
    with torch.no_grad():
        x = m.p["tok_emb.weight"][ids] + m.p["pos_emb.weight"][:ids.shape[1]]
        if m.cfg["emb_scale"]:
            x = x * m.p["emb_scale"]
        for i in range(L + 1):
            if i in layers:
                out[i] = x.norm(dim=-1).mean().item()
            if i < L:
                x = m.residual(x, f"blocks.{i}.attn_norm", lambda h: m.attn(h, i))
                x = m.residual(x, f"blocks.{i}.ffn_norm", lambda h: m.ffn(h, i))
    return out


def saturation(m, ids):
    """{site: m.sat's tuple} of one forward pass over ids."""
    m.sat = {}
    with torch.no_grad():
        m(ids, ids)
    out, m.sat = m.sat, None
    return out


def block_grads(m, L):
    """{block: gradient norm of its parameters} and -1: the rest's."""
    sq = {}
    for k, v in m.p.items():
        if v.grad is not None:
            i = int(k.split(".")[1]) if k.startswith("blocks.") else -1
            sq[i] = sq.get(i, 0.0) + v.grad.double().pow(2).sum().item()
    return {i: math.sqrt(s) for i, s in sorted(sq.items(), key=lambda kv: (kv[0] < 0, kv[0]))}


def data():
    d = np.frombuffer(open(os.path.join(ROOT, "data/tinyshakespeare.txt"), "rb").read(),
                      dtype=np.uint8).astype(np.int64)
    split = len(d) - len(d) // 10
    return torch.from_numpy(d[:split]), torch.from_numpy(d[split:])


def write_sat(f, step, sat):
    for site, v in sat.items():
        f.write("%d,%s," % (step, site) + ",".join("%.6g" % x for x in v) + "\n")


SAT_HEADER = ("step,site,alpha,max_abs_u,mean_abs_u,frac_saturated,frac_below_1e-2,shared,"
              "spread\n")


def probe(norm, dst, ckpts):
    """--probe: the saturation rows of ./train's checkpoints."""
    _, val = data()
    ids = val[:4 * T].view(4, T)
    rows = []
    for c in ckpts:
        params, meta = load(c)
        L = 1 + max(int(k.split(".")[1]) for k in params if k.startswith("blocks."))
        m, meta = model(c, L, "pre", norm, "emb_scale" in params)
        rows.append((int(meta["step"]), saturation(m, ids)))
    with open(dst, "w") as f:
        f.write(SAT_HEADER)
        for step, sat in sorted(rows):
            write_sat(f, step, sat)


def set_alphas(m, a):
    """The sites' alpha at step 0: a = {"attn": A, "ffn": A, "final": A} (None: as loaded)."""
    with torch.no_grad():
        for k, v in m.p.items():
            if k.endswith(".alpha"):
                site = "final" if k.startswith("final") else "attn" if "attn" in k else "ffn"
                if a[site] is not None:
                    v.fill_(a[site])


def main():
    if sys.argv[1] == "--probe":
        return probe(sys.argv[2], sys.argv[3], sys.argv[4:])
    ap = argparse.ArgumentParser()
    for name in ("init", "layers", "placement", "lr", "steps", "dst"):
        ap.add_argument(name)
    ap.add_argument("--norm", default="ln")
    ap.add_argument("--emb-scale", action="store_true")
    ap.add_argument("--grad")
    ap.add_argument("--sat")
    for site in ("attn", "ffn", "final"):
        ap.add_argument("--alpha-" + site, type=float)
    a = ap.parse_args()
    L, lr, steps = int(a.layers), float(a.lr), int(a.steps)
    torch.set_num_threads(1)
    torch.manual_seed(1)
    m, _ = model(a.init, L, a.placement, a.norm, a.emb_scale)
    set_alphas(m, {"attn": a.alpha_attn, "ffn": a.alpha_ffn, "final": a.alpha_final})
    train, val = data()
    probe_ids = val[:4 * T].view(4, T)
    matrix = lambda k, v: v.dim() == 2 and "emb" not in k  # noqa: E731
    opt = torch.optim.AdamW(
        [{"params": [v for k, v in m.p.items() if matrix(k, v)], "weight_decay": 0.1},
         {"params": [v for k, v in m.p.items() if not matrix(k, v)], "weight_decay": 0.0}],
        lr=lr, betas=(0.9, 0.99), eps=1e-8)
    keep = sorted({0, L // 2, L - 1, L})
    fg = open(a.grad, "w") if a.grad else None
    fs = open(a.sat, "w") if a.sat else None
    fg and fg.write("step,layer,total\n")
    fs and fs.write(SAT_HEADER)
    loss = None  # the last update's training loss
    with open(a.dst, "w") as f:
        f.write("step,layer,norm,loss\n")
        for s in range(steps + 1):
            if s % 10 == 0 or s == steps:
                for layer, v in stream_norms(m, probe_ids, keep).items():
                    f.write("%d,%d,%.6g,%s\n" % (s, layer, v, "%.5f" % loss if s else ""))
                f.flush()
                if fs:
                    write_sat(fs, s, saturation(m, probe_ids))
            if s == steps:
                break
            ix = torch.randint(len(train) - T - 1, (B,)).tolist()
            x = torch.stack([train[i:i + T] for i in ix])
            y = torch.stack([train[i + 1:i + T + 1] for i in ix])
            loss = m(x, y)[1]
            opt.zero_grad()
            loss.backward()
            if fg and s % 10 == 0:
                fg.writelines("%d,%d,%.6g\n" % (s, i, g) for i, g in block_grads(m, L).items())
            torch.nn.utils.clip_grad_norm_(list(m.p.values()), 1.0)
            for g in opt.param_groups:
                g["lr"] = lr_at(lr, s)
            opt.step()
            loss = loss.item()


if __name__ == "__main__":
    main()
