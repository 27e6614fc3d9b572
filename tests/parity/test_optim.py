"""The optimizers against torch.optim (1.13, for-loop implementation), step by step.

From the same initial weights, the same sequence of gradient tensors goes into torch.optim and
into mt (tests/parity/optim_driver.c); the parameters must agree to 1e-6 relative after every one
of the 10 steps. The table mixes decay flags: torch gets two param groups, the no-decay one with
weight_decay 0. Also: clipping against torch.nn.utils.clip_grad_norm_, the schedules (driven
through LambdaLR in the runs) against a hand formula, and a resume in the middle of a run.
"""
import math

import numpy as np
import torch

from harness import Report, run_driver

rng = np.random.default_rng(0)
R = Report("parity optim")
STEPS = 10

# name, shape, role: a table with every role and a buffer, sizes not multiples of 16
TABLE = [("wte", (13, 8), "embedding"), ("ln.weight", (8,), "norm"), ("ln.bias", (8,), "norm"),
         ("fc.weight", (24, 8), "matrix"), ("fc.bias", (24,), "bias"),
         ("bn.running_var", (5,), "buffer"), ("head.weight", (13, 24), "matrix")]


def decays(role, scope):
    """The decay flag of a role under a scope (mt_decay_scope), written independently of mt."""
    if role == "buffer":
        return False
    return {"matrices": role == "matrix", "embeddings": role in ("matrix", "embedding"),
            "all": True}[scope]


def hand_lr(s, kind, lr, min_lr, init, warmup, steps):
    """The lr of step s (from 0), from the formulas in src/optim/optim.h."""
    if kind == "invsqrt" and init == 0:
        return lr * min(s / warmup, math.sqrt(warmup / s)) if s > 0 else 0.0
    if s < warmup:
        return init + (lr - init) * s / warmup
    if kind == "const":
        return lr
    if kind == "invsqrt":
        return lr * math.sqrt(warmup / s)
    if s >= steps:
        return min_lr
    p = (s - warmup) / (steps - warmup)
    if kind == "cosine":
        return min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * p))
    return lr - (lr - min_lr) * p


DEFAULTS = dict(optim="adamw", lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0,
                momentum=0.0, nesterov=0, clip=0.0, schedule="const", min_lr=0.0,
                warmup_init_lr=0.0, warmup=0, sched_steps=0, decay_scope="matrices",
                resume_at=0)


def torch_run(o, p0, grads):
    """Torch's parameters after each step, the lr of each step and the pre-clip norms."""
    trained = [(n, r) for n, _, r in TABLE if r != "buffer"]
    params = {n: torch.nn.Parameter(torch.tensor(p0[n])) for n, _ in trained}
    decay = [params[n] for n, r in trained if decays(r, o["decay_scope"])]
    rest = [params[n] for n, r in trained if not decays(r, o["decay_scope"])]
    groups = [{"params": decay, "weight_decay": o["weight_decay"]},
              {"params": rest, "weight_decay": 0.0}]
    if o["optim"] == "sgd":
        opt = torch.optim.SGD(groups, lr=o["lr"], momentum=o["momentum"],
                              nesterov=bool(o["nesterov"]))
    else:
        cls = torch.optim.Adam if o["optim"] == "adam" else torch.optim.AdamW
        opt = cls(groups, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: hand_lr(
        s, o["schedule"], o["lr"], o["min_lr"], o["warmup_init_lr"], o["warmup"],
        o["sched_steps"]) / o["lr"])
    after, lrs, norms = [], [], []
    for s in range(STEPS):
        for n, _ in trained:
            params[n].grad = torch.tensor(grads[s][n])
        if o["clip"] > 0:
            norms.append(float(torch.nn.utils.clip_grad_norm_(list(params.values()), o["clip"])))
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        after.append({n: p.detach().numpy().copy() for n, p in params.items()})
    return after, lrs, norms


def compare_run(label, grad_scale=None, **opts):
    o = dict(DEFAULTS, **opts)
    p0 = {n: (0.1 * rng.standard_normal(sh)).astype(np.float32) for n, sh, _ in TABLE}
    grads = []
    for s in range(STEPS):
        k = 1.0 if grad_scale is None else grad_scale[s]
        grads.append({n: (k * rng.standard_normal(sh)).astype(np.float32) for n, sh, _ in TABLE})
    tensors = {f"p.{n}": p0[n] for n in p0}
    for s, g in enumerate(grads):
        tensors.update({f"g{s}.{n}": g[n] for n in g})
    meta = dict(o, mode="run", steps=STEPS, names=",".join(n for n, _, _ in TABLE),
                roles=",".join(r for _, _, r in TABLE))
    got = run_driver("optim", tensors, meta)
    want, lrs, norms = torch_run(o, p0, grads)
    for s in range(STEPS):
        for n, _, r in TABLE:
            # buffers are never updated: they must still hold their initial values
            ref = p0[n] if r == "buffer" else want[s][n]
            R.check(f"{label} step {s + 1} {n}", got[f"p{s}.{n}"], ref, 1e-6)
            # the update alone, so that a small error in it is not hidden by |p| >> |update|;
            # 1e-4: float32 p resolves an update only to ulp(p); with p ~ 0.1 that is below 1e-5
            if r == "buffer":
                continue
            prev_got, prev_want = (got[f"p{s - 1}.{n}"], want[s - 1][n]) if s else (p0[n], p0[n])
            R.check(f"{label} update {s + 1} {n}", got[f"p{s}.{n}"] - prev_got,
                    want[s][n] - prev_want, 1e-4)
    R.check(f"{label} lr", got["lr"], lrs, 1e-6)
    if o["clip"] > 0:
        R.check(f"{label} pre-clip norms", got["norm"], norms, 1e-6)


# SGD: plain, momentum, Nesterov, with weight decay (L2, matrices only)
compare_run("sgd", optim="sgd", lr=0.1)
compare_run("sgd momentum", optim="sgd", lr=0.1, momentum=0.9)
compare_run("sgd nesterov", optim="sgd", lr=0.1, momentum=0.9, nesterov=1)
compare_run("sgd wd", optim="sgd", lr=0.1, weight_decay=0.1)
compare_run("sgd momentum wd", optim="sgd", lr=0.1, momentum=0.9, weight_decay=0.1)
compare_run("sgd nesterov wd all", optim="sgd", lr=0.1, momentum=0.5, nesterov=1,
            weight_decay=0.05, decay_scope="all")
# Adam without and with weight decay (Adam's L2 form), AdamW (decoupled)
compare_run("adam", optim="adam", lr=1e-2)
compare_run("adam wd", optim="adam", lr=1e-2, weight_decay=0.1)
compare_run("adamw", optim="adamw", lr=1e-2, weight_decay=0.1)
compare_run("adamw embeddings", optim="adamw", lr=1e-2, weight_decay=0.1,
            decay_scope="embeddings")
compare_run("adamw betas eps", optim="adamw", lr=1e-2, weight_decay=0.3, beta1=0.8, beta2=0.95,
            eps=1e-3)
# schedules through LambdaLR, clipping active on some steps, a resume after step 5
compare_run("adamw cosine clip resume", optim="adamw", lr=1e-2, weight_decay=0.1,
            schedule="cosine", warmup=3, warmup_init_lr=1e-3, min_lr=1e-4, sched_steps=STEPS,
            clip=5.0, resume_at=5, grad_scale=[0.1, 2, 0.1, 2, 0.1, 2, 0.1, 2, 0.1, 2])
compare_run("sgd nesterov linear resume", optim="sgd", lr=0.1, momentum=0.9, nesterov=1,
            weight_decay=0.1, schedule="linear", warmup=2, min_lr=0.01, sched_steps=STEPS,
            resume_at=4)
compare_run("adam invsqrt clip", optim="adam", lr=1e-2, schedule="invsqrt", warmup=4, clip=1.0)

# clipping alone: above and below the threshold
for max_norm in [0.5, 3.0, 1e3]:
    g = {n: rng.standard_normal(sh).astype(np.float32) for n, sh, r in TABLE if r != "buffer"}
    table = [(n, sh, r) for n, sh, r in TABLE if r != "buffer"]
    got = run_driver("optim", {f"g.{n}": g[n] for n in g},
                     dict(mode="clip", max_norm=max_norm, names=",".join(n for n, _, _ in table),
                          roles=",".join(r for _, _, r in table)))
    ts = [torch.nn.Parameter(torch.zeros(sh)) for _, sh, _ in table]
    for t, (n, _, _) in zip(ts, table):
        t.grad = torch.tensor(g[n])
    norm = torch.nn.utils.clip_grad_norm_(ts, max_norm)
    R.check(f"clip {max_norm} norm", got["norm"], [float(norm)], 1e-6)
    for t, (n, _, _) in zip(ts, table):
        R.check(f"clip {max_norm} {n}", got[f"g.{n}"], t.grad.numpy(), 1e-6)

# every schedule at every step, 0 .. steps + 1, against the hand formula
for kind, init, min_lr in [("const", 1e-4, 0), ("cosine", 1e-4, 1e-5), ("linear", 0, 1e-5),
                           ("invsqrt", 0, 0), ("invsqrt", 1e-4, 0)]:
    o = dict(DEFAULTS, schedule=kind, warmup=10, warmup_init_lr=init, min_lr=min_lr,
             sched_steps=50)
    got = run_driver("optim", {}, dict(o, mode="schedule"))
    want = [hand_lr(s, kind, o["lr"], min_lr, init, 10, 50) for s in range(52)]
    R.check(f"schedule {kind} init {init}", got["lr"], want, 1e-6)

R.finish()
