"""Benchmark (not a test): forward + backward of every norm in torch on the inputs of
bench/norms.c: (8192, 768) float32; InstanceNorm on (8, 768, 1024), channels-first as torch
takes it (the same bytes). Prints one JSON line per norm, as bench/norms does.
   python3 bench/norms/torch_norms.py REPS THREADS SETTING [cpu]
cpu: time with the process's CPU clock (with 1 thread: the time the work would take alone on a
loaded machine), as bench/norms does.
RMSNorm, pRMSNorm and ScaleNorm are not in torch 1.13: their formulas (docs/norms.md) in torch ops."""
import json
import sys
import time

import torch
import torch.nn.functional as F

reps, threads, setting = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
clock = "cpu" if sys.argv[4:] == ["cpu"] else "wall"
now = time.process_time if clock == "cpu" else time.perf_counter
torch.set_num_threads(threads)
N, C = 8192, 768
g = torch.Generator().manual_seed(1)
x0 = torch.randn(N, C, generator=g)
dy = torch.randn(N, C, generator=g)
w = torch.ones(C, requires_grad=True)
b = torch.zeros(C, requires_grad=True)
s = torch.tensor([C ** 0.5], requires_grad=True)
rm, rv = torch.zeros(C), torch.ones(C)
k = int(C * 0.0625)
alpha, shift = torch.tensor([0.5], requires_grad=True), torch.zeros(1, requires_grad=True)


def rms(x, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


CASES = {
    "ln": (lambda x: F.layer_norm(x, (C,), w, b, 1e-5), False),
    "rms": (rms, False),
    "rms/paper": (lambda x: x / (x.norm(2, dim=-1, keepdim=True) * C ** -0.5 + 1e-8) * w,
                      False),
    "prms": (lambda x: x * torch.rsqrt(x[:, :k].pow(2).mean(-1, keepdim=True) + 1e-5) * w,
                 False),
    "scale": (lambda x: s * x / x.norm(dim=-1, keepdim=True).clamp(min=1e-5), False),
    "bn": (lambda x: F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5), False),
    "in": (lambda x: F.instance_norm(x, weight=w, bias=b, eps=1e-5), True),
    "gn": (lambda x: F.group_norm(x, 32, w, b, 1e-5), False),
    "dyt": (lambda x: w * torch.tanh(alpha * x) + b, False),
    "derf": (lambda x: w * torch.erf(alpha * x + shift) + b, False),
}

for name, (fn, channels_first) in CASES.items():
    x = (x0.view(8, N // 8, C).transpose(1, 2).contiguous() if channels_first else x0.clone())
    d = dy.view(8, N // 8, C).transpose(1, 2).contiguous() if channels_first else dy
    x.requires_grad_(True)
    tf, tt = [], []
    for i in range(reps + 2):
        x.grad = None
        t0 = now()
        y = fn(x)
        t1 = now()
        y.backward(d)
        t2 = now()
        if i >= 2:
            tf.append(t1 - t0)
            tt.append(t2 - t0)
    tf.sort()
    tt.sort()
    med = tt[len(tt) // 2]
    print(json.dumps({"what": name, "impl": "torch", "setting": setting, "threads": threads,
                      "clock": clock,
                      "fwd_ms": round(1e3 * tf[len(tf) // 2], 3), "ms": round(1e3 * med, 3),
                      "gbs": round(5 * N * C * 4 / med / 1e9, 2)}), flush=True)
