"""The primitive ops, mt against torch: forward and backward ms on Transformer-sized activations
((8192, 768) float32; see bench/ops.c for each op's shapes), best / median of REPEATS.
1 thread on the thread's CPU clock (on a loaded machine, the time the work would take alone),
and all cores on the wall clock. Backward is the op's own backward on a fixed upstream grad.
Run: make bench (or MT_BUILD=build /usr/bin/python3 bench/ops.py)."""
import os
import subprocess
import time

import torch
import torch.nn.functional as F

BUILD = os.environ.get("MT_BUILD", "build")
REPEATS = 10
N, C = 8192, 768
ids = torch.randint(0, C, (N,))

# name: (input shapes, function of the inputs)
OPS = {
    "mul": ([(N, C), (N, C)], lambda a, b: a * b),
    "scale": ([(N, C)], lambda a: a * 0.5),
    "sum": ([(N, C)], lambda a: a.sum()),
    "gelu": ([(N, C)], lambda a: F.gelu(a, approximate="tanh")),
    "gelu_erf": ([(N, C)], F.gelu),
    "relu": ([(N, C)], F.relu),
    "silu": ([(N, C)], F.silu),
    "softmax": ([(N, C)], lambda a: a.softmax(-1)),
    "cross_entropy": ([(N, C)], lambda a: F.cross_entropy(a, ids)),
    "cross_entropy_ls": ([(N, C)], lambda a: F.cross_entropy(a, ids, label_smoothing=0.1)),
    "embedding": ([(C, C)], lambda w: F.embedding(ids, w)),
    "dropout": ([(N, C)], lambda a: F.dropout(a, 0.1, training=True)),
    "transpose": ([(8, N // 8, C)], lambda a: a.transpose(1, 2).contiguous()),
    "concat": ([(N, C // 2), (N, C // 2)], lambda a, b: torch.cat([a, b], -1)),
    "slice": ([(N, C)], lambda a: a[:, 256:512].contiguous()),
}


def torch_times(fn, shapes, clock):
    xs = [(4 * torch.rand(s) - 2).requires_grad_() for s in shapes]
    dy = torch.rand_like(fn(*xs)) - 0.5
    tf, tb = [], []
    for rep in range(REPEATS + 2):
        t0 = clock()
        y = fn(*xs)
        t1 = clock()
        y.backward(dy)
        t2 = clock()
        if rep >= 2:
            tf.append(1e3 * (t1 - t0))
            tb.append(1e3 * (t2 - t1))
    tf.sort()
    tb.sort()
    return tf[0], tf[REPEATS // 2], tb[0], tb[REPEATS // 2]


print(f"ms per call, best / median of {REPEATS}; torch {torch.__version__}\n")
print("| op | threads | clock | mt forward | torch forward | mt backward | torch backward |")
print("|---|---|---|---|---|---|---|")
for threads, clock, name in [(1, time.thread_time, "cpu"), (os.cpu_count(), time.perf_counter,
                                                             "wall")]:
    torch.set_num_threads(threads)
    args = [os.path.join(BUILD, "bench", "ops"), str(REPEATS), str(threads)]
    out = subprocess.run(args + (["cpu"] if name == "cpu" else []), check=True,
                         capture_output=True, text=True).stdout
    mt = {w[0]: [float(v) for v in w[1:]] for w in (line.split() for line in out.strip().split("\n"))}
    for op, (shapes, fn) in OPS.items():
        t = torch_times(fn, shapes, clock)
        m = mt[op]
        print(f"| {op} | {threads} | {name} | {m[0]:.2f} / {m[1]:.2f} | {t[0]:.2f} / {t[1]:.2f} | "
              f"{m[2]:.2f} / {m[3]:.2f} | {t[2]:.2f} / {t[3]:.2f} |")
