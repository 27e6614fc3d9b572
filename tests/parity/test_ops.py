"""Every primitive op against torch: outputs and input gradients, float32, to 1e-5 relative."""
import numpy as np
import torch
import torch.nn.functional as F

from harness import Report, run_op

rng = np.random.default_rng(0)
R = Report("parity ops")


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def torch_grads(xs, grad, fn, dy):
    """fn applied to torch leaves made from xs; returns (y, [grad of each input or None])."""
    ts = [torch.tensor(x, requires_grad=g) for x, g in zip(xs, grad)]
    y = fn(*ts)
    y.backward(torch.tensor(dy))
    return y.detach().numpy(), [t.grad.numpy() if g else None for t, g in zip(ts, grad)]


def compare(label, op, xs, grad, fn, tol=1e-5, **opts):
    ty = fn(*[torch.tensor(x) for x in xs])
    dy = randn(*ty.shape)
    want_y, want_dx = torch_grads(xs, grad, fn, dy)
    got = run_op("ops", op, xs, dy, grad, **opts)
    R.check(f"{label} y", got["y"], want_y, tol)
    for i, g in enumerate(grad):
        if g:
            R.check(f"{label} dx{i}", got[f"dx{i}"], want_dx[i], tol)


def tr(t, flag):
    return t.transpose(-1, -2) if flag else t


# matmul: every transpose combination, batched, and a 2-D b shared across the batch
for ashape, bshape, ta, tb in [((5, 7), (7, 3), 0, 0), ((7, 5), (7, 3), 1, 0),
                               ((5, 7), (3, 7), 0, 1), ((7, 5), (3, 7), 1, 1),
                               ((4, 33, 65), (65, 17), 0, 0), ((4, 33, 65), (17, 65), 0, 1),
                               ((2, 3, 19, 8), (2, 3, 19, 8), 1, 0),
                               ((2, 3, 19, 8), (2, 3, 21, 8), 0, 1)]:
    compare(f"matmul {ashape}{'^T' * ta} x {bshape}{'^T' * tb}", "matmul",
            [randn(*ashape), randn(*bshape)], [True, True],
            lambda a, b, ta=ta, tb=tb: tr(a, ta) @ tr(b, tb), ta=ta, tb=tb)

for shape in [(3,), (4, 17), (2, 5, 64)]:
    compare(f"add {shape}", "add", [randn(*shape), randn(*shape)], [True, True],
            lambda a, b: a + b)
    compare(f"add row {shape}", "add", [randn(*shape), randn(shape[-1])], [True, True],
            lambda a, b: a + b)

# shapes: 1 where defined, sizes that are not a multiple of the vector width, and sizes above
# MT_PAR_MIN (16384 elements) so the OpenMP paths run too
SHAPES = [(1,), (3, 17), (2, 5, 33), (2, 3, 4, 65), (8, 64, 97)]

for shape in SHAPES:
    compare(f"mul {shape}", "mul", [randn(*shape), randn(*shape)], [True, True],
            lambda a, b: a * b)
    compare(f"scale {shape}", "scale", [randn(*shape)], [True], lambda a: a * -1.75, s=-1.75)
    compare(f"scale_by {shape}", "scale_by", [randn(*shape), randn(1)], [True, True],
            lambda a, s: a * s)
    compare(f"sum {shape}", "sum", [randn(*shape)], [True], lambda a: a.sum().reshape(1))
    compare(f"mean {shape}", "mean", [randn(*shape)], [True], lambda a: a.mean().reshape(1))
    for op, fn in [("gelu", lambda a: F.gelu(a, approximate="tanh")), ("gelu_erf", F.gelu),
                   ("relu", F.relu), ("relu2", lambda a: F.relu(a).square()), ("silu", F.silu),
                   ("softmax", lambda a: a.softmax(-1))]:
        compare(f"{op} {shape}", op, [3 * randn(*shape)], [True], fn)
    for cap in [0.5, 3.0, 30.0]:  # the soft cap alone (Gemma 2): cap tanh(x / cap)
        compare(f"softcap {cap} {shape}", "softcap", [3 * randn(*shape)], [True],
                lambda a, cap=cap: cap * torch.tanh(a / cap), cap=cap)
    compare(f"dropout eval {shape}", "dropout", [randn(*shape)], [True],
            lambda a: F.dropout(a, 0.3, training=False), p=0.3)

for shape, new in [((2, 3, 4), (6, 4)), ((17,), (1, 17)), ((2, 3, 5, 7), (30, 7)),
                   ((8, 64, 97), (4, 2, 64, 97))]:
    compare(f"reshape {shape} -> {new}", "reshape", [randn(*shape)], [True],
            lambda a, new=new: a.reshape(new), ndim=len(new),
            **{f"s{i}": d for i, d in enumerate(new)})

for shape, perm in [((2, 3, 4, 5), (0, 2, 1, 3)), ((2, 3, 1, 17), (3, 1, 0, 2)),
                    ((5, 17), (1, 0)), ((3, 1, 17), (2, 0, 1)), ((4, 33, 6, 25), (0, 2, 1, 3))]:
    compare(f"permute {shape} {perm}", "permute", [randn(*shape)], [True],
            lambda a, perm=perm: a.permute(perm), **{f"p{i}": d for i, d in enumerate(perm)})

for shape, d0, d1 in [((2, 3, 17), 1, 2), ((2, 3, 17), 0, 2), ((1, 1), 0, 1),
                      ((8, 65, 33), 1, 2)]:
    compare(f"transpose {shape} {d0},{d1}", "transpose", [randn(*shape)], [True],
            lambda a, d0=d0, d1=d1: a.transpose(d0, d1), d0=d0, d1=d1)


def targets(rows, V, ignore, every):
    """targets in [0, V), every 'every'-th one the ignore index"""
    t = rng.integers(0, V, rows)
    if every:
        t[::every] = ignore
    return t.astype(np.float32)


def ce_z_loss(x, t, ignore, eps, z):
    """torch's cross-entropy plus z mean(logsumexp(x_r)^2) over the rows not ignored."""
    kept = t != ignore
    lse = torch.logsumexp(x, -1)
    ce = F.cross_entropy(x, t, ignore_index=ignore, label_smoothing=eps)
    return (ce + z * (lse[kept] ** 2).sum() / kept.sum()).reshape(1)


# label smoothing eps: torch's loss (1 - eps) nll + eps mean_j(-log p_j), mean over the targets
# that are not ignored
for shape, ignore, every in [((1, 1), -100, 0), ((3, 17), -100, 2), ((2, 5, 33), 7, 3),
                             ((4, 64, 97), -100, 5), ((2, 3, 1000), -1, 0), ((6, 50, 97), -1, 4)]:
    V, rows = shape[-1], int(np.prod(shape[:-1]))
    for eps in [0.0, 0.1, 0.3]:
        compare(f"cross_entropy {shape} ignore {ignore} smoothing {eps}", "cross_entropy",
                [4 * randn(*shape), targets(rows, V, ignore, every)], [True, False],
                lambda x, t, V=V, ignore=ignore, eps=eps: F.cross_entropy(
                    x.reshape(-1, V), t.long(), ignore_index=ignore,
                    label_smoothing=eps).reshape(1), ignore=ignore, smoothing=eps, z_loss=0,
                softcap=0)
    # PaLM's z-loss (Chowdhery et al. 2022, arXiv 2204.02311): + z log(Z)^2, log Z the row's
    # log-sum-exp, averaged over the same rows
    for eps, z in [(0.0, 1e-4), (0.0, 0.5), (0.1, 0.2)]:
        compare(f"cross_entropy {shape} ignore {ignore} smoothing {eps} z-loss {z}",
                "cross_entropy", [4 * randn(*shape), targets(rows, V, ignore, every)],
                [True, False], lambda x, t, V=V, ignore=ignore, eps=eps, z=z: ce_z_loss(
                    x.reshape(-1, V), t.long(), ignore, eps, z), ignore=ignore, smoothing=eps,
                z_loss=z, softcap=0)
    # Gemma 2's soft cap (arXiv 2408.00118): the loss of cap tanh(x / cap), with z-loss and
    # smoothing; the logits 4 randn, so a cap of 1.5 or 3 bends them and 30 barely
    for eps, z, cap in [(0.0, 0.0, 30.0), (0.0, 0.0, 3.0), (0.1, 0.2, 1.5)]:
        compare(f"cross_entropy {shape} ignore {ignore} smoothing {eps} z-loss {z} softcap {cap}",
                "cross_entropy", [4 * randn(*shape), targets(rows, V, ignore, every)],
                [True, False], lambda x, t, V=V, ignore=ignore, eps=eps, z=z, cap=cap: ce_z_loss(
                    cap * torch.tanh(x.reshape(-1, V) / cap), t.long(), ignore, eps, z),
                ignore=ignore, smoothing=eps, z_loss=z, softcap=cap)

for V, C, n in [(1, 1, 3), (7, 5, 9), (33, 17, 40), (257, 65, 600)]:
    ids = rng.integers(0, V, n).astype(np.float32)  # repeats: the backward scatter adds up
    compare(f"embedding ({V}, {C}) x {n}", "embedding", [randn(V, C), ids], [True, False],
            lambda w, i: F.embedding(i.long(), w))

for shapes in [[(2, 3), (2, 17), (2, 1)], [(3, 4, 5), (3, 4, 16)], [(1,), (1,)],
               [(700, 33), (700, 31), (700, 2), (700, 1), (700, 64), (700, 5)]]:
    compare(f"concat {shapes}", "concat", [randn(*s) for s in shapes], [True] * len(shapes),
            lambda *xs: torch.cat(xs, -1))

for shape, start, length in [((3, 17), 2, 5), ((2, 3, 33), 0, 33), ((1,), 0, 1),
                             ((9000, 33), 31, 2)]:
    compare(f"slice {shape} [{start}:+{length}]", "slice", [randn(*shape)], [True],
            lambda a, s=start, n=length: a[..., s:s + n], start=start, len=length)

for shape, sizes in [((3, 17), (5, 1, 11)), ((2, 5, 33), (16, 17)), ((1, 4), (1, 1, 1, 1)),
                     ((1000, 33), (30, 3))]:
    compare(f"split {shape} {sizes}", "split", [randn(*shape)], [True],
            lambda a, sizes=sizes: torch.cat(
                [a.split(sizes, -1)[-1], *a.split(sizes, -1)[:-1]], -1),
            parts=len(sizes), **{f"k{i}": k for i, k in enumerate(sizes)})

# SwiGLU's gate silu(a) * b; each input alone requiring grad too (the op's one-sided backward)
for shape in SHAPES:
    for grad in ([True, True], [True, False], [False, True]):
        compare(f"swiglu {shape} grad {grad}", "swiglu", [randn(*shape), randn(*shape)], grad,
                lambda a, b: F.silu(a) * b)


def rope(x, pos0, HS, theta):
    """RoPE written out (llama2.c's run.c): each head's adjacent pair (2i, 2i+1) turned by
    (pos0 + t) theta^(-2i/HS); angles in float64, where float32 would round them at t ~ 1000."""
    B, T, W = x.shape
    w = theta ** (-2.0 * torch.arange(HS // 2, dtype=torch.float64) / HS)
    ang = (pos0 + torch.arange(T, dtype=torch.float64))[:, None] * w  # (T, HS/2)
    cos, sin = ang.cos().repeat(1, W // HS), ang.sin().repeat(1, W // HS)
    a, b = x.double()[..., 0::2], x.double()[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).reshape(B, T, W).float()


# positions beyond 1000 (angles of ~1000 rad) and a small case from 0; q's and k's widths
for shape, HS, pos0, theta in [((2, 64, 64), 16, 1000, 10000.0), ((3, 64, 24), 8, 1000, 500000.0),
                               ((2, 7, 12), 2, 0, 10000.0), ((1, 300, 128), 64, 700, 10000.0)]:
    compare(f"rope {shape} HS {HS} positions {pos0}..{pos0 + shape[1] - 1} theta {theta:g}",
            "rope", [randn(*shape)], [True],
            lambda a, pos0=pos0, HS=HS, theta=theta: rope(a, pos0, HS, theta),
            pos0=pos0, HS=HS, theta=theta)

R.finish()
