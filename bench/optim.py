"""Optimizer step and gradient-norm time, mt against torch.optim on the same Transformer-shaped
parameter table (per layer: 2 norms, qkv, proj, fc1 4x wide, fc2, biases), same thread count.
Run: make bench (or MT_BUILD=build /usr/bin/python3 bench/optim.py). Prints a Markdown table of
ms per call, best and median of REPEATS (on a shared machine the best is the cleaner figure)."""
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


def torch_times(L, C, foreach):
    ps = table(L, C)
    out = {}
    for name, make in [("sgd_momentum", lambda: torch.optim.SGD(ps, lr=1e-4, momentum=0.9,
                                                               foreach=foreach)),
                       ("adam", lambda: torch.optim.Adam(ps, lr=1e-4, foreach=foreach)),
                       ("adamw", lambda: torch.optim.AdamW(ps, lr=1e-4, foreach=foreach))]:
        out[name] = timed(make().step)
    out["clip"] = timed(lambda: torch.nn.utils.clip_grad_norm_(ps, 1e9))
    return out


def fmt(t):
    return f"{t[0]:.2f} / {t[1]:.2f}"


print(f"ms per call, best / median of {REPEATS}\n")
print("| layers x width | entries | params | threads | op | mt | torch for-loop | torch foreach |")
print("|---|---|---|---|---|---|---|---|")
for threads in sorted({1, os.cpu_count()}):
    torch.set_num_threads(threads)
    for L, C in [(100, 64), (12, 256)]:
        res = subprocess.run([os.path.join(BUILD, "bench", "optim"), str(L), str(C), str(REPEATS),
                              str(threads)], check=True, capture_output=True, text=True).stdout
        lines = res.strip().split("\n")
        head = lines[0].split()
        mt = {w[0]: (float(w[1]), float(w[2])) for w in (line.split() for line in lines[1:])}
        loop, fe = torch_times(L, C, False), torch_times(L, C, True)
        for op in ["sgd_momentum", "adam", "adamw", "clip"]:
            print(f"| {L} x {C} | {head[3]} | {head[1]} | {threads} | {op} | {fmt(mt[op])} | "
                  f"{fmt(loop[op])} | {fmt(fe[op])} |")
