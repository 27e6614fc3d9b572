"""Optimizer step and gradient-norm time, mt against torch.optim on the same Transformer-shaped
parameter table (per layer: 2 norms, qkv, proj, fc1 4x wide, fc2, biases), same thread count.
Run: make bench (or MT_BUILD=build /usr/bin/python3 bench/optim.py). Prints a Markdown table of
ms per call, best and median of REPEATS (on a shared machine the best is the cleaner figure), and
mt's best in ns per parameter. Lion and Muon are not in torch 1.13: their torch columns run them
written out from lion-pytorch's update_fn and muon.py's muon_update (a for-loop; Newton-Schulz in
fp32 on the 2-D matrices but the embedding, AdamW on the rest). muon_bf16 is mt's Muon with the
products in bf16 (no torch column: the reference's bf16 matmuls on this CPU are not its speed)."""
import os
import subprocess
import time

import torch

BUILD = os.environ.get("MT_BUILD", "build")
REPEATS = 10


def table(L, C):
    shapes = [(256, C)]
    for _ in range(L):
        shapes += [(C,), (C,), (3 * C, C), (3 * C,), (C, C), (C,), (C,), (C,), (4 * C, C),
                   (4 * C,), (C, 4 * C), (C,)]
    ps = [torch.nn.Parameter(0.02 * torch.randn(s)) for s in shapes]
    for p in ps:
        p.grad = 1e-3 * torch.randn(p.shape)
    return ps


def timed(fn):
    """(best, median) ms of REPEATS calls after two warm-up calls."""
    for _ in range(2):
        fn()
    ts = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn()
        ts.append(1e3 * (time.perf_counter() - t0))
    ts.sort()
    return ts[0], ts[REPEATS // 2]


def newton_schulz(G, steps=5):
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G.T if G.size(0) > G.size(1) else G
    X = X / (X.norm() + 1e-7)
    for _ in range(steps):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    return X.T if G.size(0) > G.size(1) else X


def lion_step(ps, ms, lr=1e-4, wd=0.0, b1=0.9, b2=0.99):
    for p, m in zip(ps, ms):
        p.data.mul_(1 - lr * wd)
        p.data.add_((m * b1 + p.grad * (1 - b1)).sign_(), alpha=-lr)
        m.mul_(b2).add_(p.grad, alpha=1 - b2)


def muon_step(hidden, ms, adam, lr=0.02, beta=0.95):
    for p, m in zip(hidden, ms):
        m.lerp_(p.grad, 1 - beta)
        u = p.grad.lerp(m, beta)
        p.data.add_(newton_schulz(u) * max(1, p.size(0) / p.size(1)) ** 0.5, alpha=-lr)
    adam.step()


def torch_times(L, C, foreach):
    ps = table(L, C)
    out = {}
    with torch.no_grad():
        ms = [torch.zeros_like(p) for p in ps]
        out["lion"] = timed(lambda: lion_step(ps, ms))
        hidden = [p for p in ps[1:] if p.ndim == 2]
        rest = [ps[0]] + [p for p in ps[1:] if p.ndim != 2]
        adam = torch.optim.AdamW(rest, lr=1e-4, foreach=foreach)
        mh = [torch.zeros_like(p) for p in hidden]
        out["muon"] = timed(lambda: muon_step(hidden, mh, adam))
    for name, make in [("sgd_momentum", lambda: torch.optim.SGD(ps, lr=1e-4, momentum=0.9,
                                                               foreach=foreach)),
                       ("adam", lambda: torch.optim.Adam(ps, lr=1e-4, foreach=foreach)),
                       ("adamw", lambda: torch.optim.AdamW(ps, lr=1e-4, foreach=foreach))]:
        out[name] = timed(make().step)
    out["clip"] = timed(lambda: torch.nn.utils.clip_grad_norm_(ps, 1e9))
    return out


def fmt(t):
    return f"{t[0]:.2f} / {t[1]:.2f}"


def main():
    print(f"ms per call, best / median of {REPEATS}; mt's best in ns per parameter\n")
    print("| layers x width | entries | params | threads | op | mt | mt ns/param | torch for-loop |"
          " torch foreach |")
    print("|---|---|---|---|---|---|---|---|---|")
    for threads in sorted({1, os.cpu_count()}):
        torch.set_num_threads(threads)
        for L, C in [(100, 64), (12, 256)]:
            cmd = [os.path.join(BUILD, "bench", "optim"), str(L), str(C), str(REPEATS),
                   str(threads)]
            res = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            lines = res.strip().split("\n")
            head = lines[0].split()
            mt = {w[0]: (float(w[1]), float(w[2])) for w in (line.split() for line in lines[1:])}
            loop, fe = torch_times(L, C, False), torch_times(L, C, True)
            for op in ["sgd_momentum", "adam", "adamw", "clip", "lion", "muon", "muon_bf16"]:
                if op not in mt:
                    continue
                per = 1e6 * mt[op][0] / int(head[1])
                tl, tf = (fmt(loop[op]), fmt(fe[op])) if op in loop else ("-", "-")
                print(f"| {L} x {C} | {head[3]} | {head[1]} | {threads} | {op} | {fmt(mt[op])} | "
                      f"{per:.2f} | {tl} | {tf} |")


if __name__ == "__main__":
    main()
