"""Every primitive op against torch: outputs and input gradients, float32, to 1e-5 relative."""
import numpy as np
import torch

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

R.finish()
