"""Every norm against torch 1.13 (nn.LayerNorm's functional form, BatchNorm, InstanceNorm,
GroupNorm) or against the torch formula of docs/norms.md (RMSNorm in both forms, pRMSNorm,
ScaleNorm, DyT, Derf): outputs and the gradients of every input, float32, to 1e-5 relative."""
import numpy as np
import torch
import torch.nn.functional as F

from harness import Report, run_op

rng = np.random.default_rng(0)
R = Report("parity norms")


def randn(*shape, scale=1.0, shift=0.0):
    return (shift + scale * rng.standard_normal(shape)).astype(np.float32)


def compare(label, op, xs, fn, tol=1e-5, scalars=(), **opts):
    """xs: inputs (all require grad); fn: the torch computation on torch leaves. scalars: the
    inputs that are one learned scalar (DyT's and Derf's alpha and s): their gradient sums a term
    per element, which can cancel to 1e-4 of the terms, so torch runs in float64 and the error is
    measured against the sum of |terms| (as check_model does for ScaleNorm's g)."""
    dtype = torch.float64 if scalars else torch.float32
    ts = [torch.tensor(x, dtype=dtype, requires_grad=True) for x in xs]
    y = fn(*ts)
    dy = randn(*y.shape)
    y.backward(torch.tensor(dy, dtype=dtype))
    got = run_op("norms", op, xs, dy, [True] * len(xs), **opts)
    R.check(f"{label} y", got["y"], y.detach().numpy(), tol)
    for i, t in enumerate(ts):
        want, scale = t.grad.numpy(), 1.0
        if i in scalars:  # the terms: the gradient of the scalar spread over y's shape
            spread = ts[i].detach().expand(y.shape).clone().requires_grad_()
            fn(*[spread if j == i else u.detach() for j, u in enumerate(ts)]).backward(
                torch.tensor(dy, dtype=dtype))
            scale = max(1.0, spread.grad.abs().sum().item() / max(abs(want).max(), 1e-30))
        R.check(f"{label} dx{i}", got[f"dx{i}"], want, tol * scale)


# the torch formulas of the norms torch 1.13 does not have
def rms_llama(x, w, eps, k=None):
    k = k or x.shape[-1]
    return x * torch.rsqrt(x[..., :k].pow(2).mean(-1, keepdim=True) + eps) * w


def rms_paper(x, w, b, eps, k=None):
    # the RMSNorm paper's code: x / (||x[:k]|| k^-1/2 + eps) * w + b
    k = k or x.shape[-1]
    rms = x[..., :k].norm(2, dim=-1, keepdim=True) * k ** -0.5
    y = x / (rms + eps) * w
    return y + b if b is not None else y


def scale_norm(x, g, eps):
    return g * x / x.norm(dim=-1, keepdim=True).clamp(min=eps)


# C = 1 is left to the finite-difference checks of test_norms.c: there LayerNorm's output and
# every RMS-type input gradient are exactly 0 up to eps, and torch returns rounding noise (its
# mean of one float is not the float), so a relative comparison would compare noise.
SHAPES = [(4, 17), (2, 5, 64), (3, 3), (8, 768), (2, 65, 64)]  # the last: 2 parts of 65 rows

for shape in SHAPES:
    C = shape[-1]
    x, w, b = randn(*shape), randn(C, scale=0.5, shift=1.0), randn(C)
    compare(f"layernorm {shape}", "layernorm", [x, w, b],
            lambda x, w, b: F.layer_norm(x, (C,), w, b, 1e-5), eps=1e-5)
    compare(f"layernorm {shape} no affine", "layernorm", [x],
            lambda x: F.layer_norm(x, (C,), None, None, 1e-5), eps=1e-5)
    compare(f"rmsnorm llama {shape}", "rmsnorm", [x, w],
            lambda x, w: rms_llama(x, w, 1e-5), eps=1e-5, form=0)
    compare(f"rmsnorm paper {shape}", "rmsnorm", [x, w],
            lambda x, w: rms_paper(x, w, None, 1e-8), eps=1e-8, form=1)
    compare(f"rmsnorm paper+bias {shape}", "rmsnorm", [x, w, b],
            lambda x, w, b: rms_paper(x, w, b, 1e-8), eps=1e-8, form=1)
    for p in [0.0625, 0.3, 1.0]:
        k = max(1, int(C * p))
        compare(f"prmsnorm llama p={p} {shape}", "prmsnorm", [x, w],
                lambda x, w: rms_llama(x, w, 1e-5, k), eps=1e-5, form=0, p=p)
        compare(f"prmsnorm paper p={p} {shape}", "prmsnorm", [x, w, b],
                lambda x, w, b: rms_paper(x, w, b, 1e-8, k), eps=1e-8, form=1, p=p)
    g = np.array([np.sqrt(C) * 0.9], dtype=np.float32)
    compare(f"scalenorm {shape}", "scalenorm", [x, g],
            lambda x, g: scale_norm(x, g, 1e-5), eps=1e-5)

# DyT and Derf, from the papers' formulas: w tanh(alpha x) + b (Zhu et al. 2025) and
# w erf(alpha x + s) + b (Chen et al. 2025); the scalars' gradients are sums over every element
for shape in SHAPES:
    C = shape[-1]
    x, w, b = randn(*shape, scale=2.0), randn(C, scale=0.5, shift=1.0), randn(C)
    a, s = np.array([0.7], np.float32), np.array([-0.3], np.float32)
    compare(f"dyt {shape}", "dyt", [x, a, w, b], lambda x, a, w, b: w * torch.tanh(a * x) + b,
            scalars=(1,))
    compare(f"dyt {shape} no affine", "dyt", [x, a], lambda x, a: torch.tanh(a * x),
            scalars=(1,))
    compare(f"derf {shape}", "derf", [x, a, s, w, b],
            lambda x, a, s, w, b: w * torch.erf(a * x + s) + b, scalars=(1, 2))
    compare(f"derf {shape} no affine", "derf", [x, a, s], lambda x, a, s: torch.erf(a * x + s),
            scalars=(1, 2))

# where eps matters: variance 1e-4 against eps 1e-5 (inside the sqrt), and the paper form's eps
# (outside the sqrt) large enough to tell the two apart
x = randn(6, 40, scale=1e-2)
w, b = randn(40, scale=0.5, shift=1.0), randn(40)
compare("layernorm small var", "layernorm", [x, w, b],
        lambda x, w, b: F.layer_norm(x, (40,), w, b, 1e-5), eps=1e-5)
compare("rmsnorm llama small var", "rmsnorm", [x, w], lambda x, w: rms_llama(x, w, 1e-5),
        eps=1e-5, form=0)
compare("rmsnorm paper eps 1e-3", "rmsnorm", [x, w, b], lambda x, w, b: rms_paper(x, w, b, 1e-3),
        eps=1e-3, form=1)
compare("prmsnorm paper eps 1e-3", "prmsnorm", [x, w, b],
        lambda x, w, b: rms_paper(x, w, b, 1e-3, 10), eps=1e-3, form=1, p=0.25)
compare("scalenorm eps above the norm", "scalenorm", [x * 1e-3, np.array([2.0], np.float32)],
        lambda x, g: scale_norm(x, g, 1e-3), eps=1e-3)

# large mean, small noise: the variance must survive (tolerance: float32 holds the mean 1e3 to
# half an ulp, 3e-5, which is 3e-3 of the noise's std in both torch and mt)
x = randn(8, 768, scale=1e-2, shift=1e3)
compare("layernorm mean 1e3", "layernorm", [x], lambda x: F.layer_norm(x, (768,), eps=1e-5),
        tol=5e-3, eps=1e-5)



def compare_partial(label, op, xs, grad, fn, tol=1e-5, **opts):
    """As compare, for inputs of which only some require grad (running statistics)."""
    ts = [torch.tensor(x, requires_grad=g) for x, g in zip(xs, grad)]
    y = fn(*ts)
    dy = randn(*y.shape)
    y.backward(torch.tensor(dy))
    got = run_op("norms", op, xs, dy, grad, **opts)
    R.check(f"{label} y", got["y"], y.detach().numpy(), tol)
    for i, (t, g) in enumerate(zip(ts, grad)):
        if g:
            R.check(f"{label} dx{i}", got[f"dx{i}"], t.grad.numpy(), tol)


def channels_first(fn, cl):
    """fn on channels-first tensors; for a channels-last x (N, *spatial, C), permute around it."""
    if not cl:
        return fn
    def wrapped(x, *rest):
        d = x.dim()
        to_cf = [0, d - 1] + list(range(1, d - 1))
        to_cl = [0] + list(range(2, d)) + [1]
        return fn(x.permute(*to_cf), *rest).permute(*to_cl)
    return wrapped


# BatchNorm1d ((N, C), (N, C, L)) and BatchNorm2d ((N, C, H, W)), train and eval; channels-last
# tokens (B, T, C); (256, 768) spans several of mt's statistics blocks
for shape, cl, sx in [((16, 32), 0, 1), ((8, 12, 20), 0, 1), ((4, 6, 5, 7), 0, 1),
                      ((256, 768), 0, 1), ((4, 33, 24), 1, 1), ((2, 5, 6, 8), 1, 1),
                      ((16, 32), 0, 1e-2)]:  # sx: the input's scale; 1e-2: eps matters
    C = shape[-1] if cl else shape[1]
    x, w, b = randn(*shape, scale=sx), randn(C, scale=0.5, shift=1.0), randn(C)
    rm, rv = randn(C, scale=0.2), np.abs(randn(C, scale=1e-3)) + 1e-4  # eps 1e-5 matters
    for training in [1, 0]:
        fn = channels_first(lambda x, w, b, rm, rv, t=training: F.batch_norm(
            x, rm.detach().clone(), rv.detach().clone(), w, b, training=bool(t), momentum=0.1,
            eps=1e-5), cl)
        compare_partial(f"batchnorm {shape} cl={cl} sx={sx} training={training}", "batchnorm",
                        [x, w, b, rm, rv], [True, True, True, False, False], fn,
                        eps=1e-5, training=training, cl=cl)
    compare(f"batchnorm {shape} cl={cl} sx={sx} no affine", "batchnorm", [x],
            channels_first(lambda x: F.batch_norm(x, None, None, training=True, eps=1e-5), cl),
            eps=1e-5, training=1, cl=cl)
    # running statistics after 5 steps of torch.nn.BatchNorm (momentum 0.1, unbiased variance);
    # the batches go to mt stacked along dim 0
    steps = randn(5 * shape[0], *shape[1:], scale=2.0, shift=0.5)
    bn = (torch.nn.BatchNorm1d if len(shape) < 4 else torch.nn.BatchNorm2d)(C)
    for k in range(5):
        channels_first(bn, cl)(torch.tensor(steps[k * shape[0]:(k + 1) * shape[0]]))
    got = run_op("norms", "batchnorm_steps", [steps, np.zeros(C, np.float32),
                 np.ones(C, np.float32)], np.zeros((2, C), np.float32), [False] * 3,
                 eps=1e-5, cl=cl, steps=5)["y"]
    R.check(f"batchnorm {shape} cl={cl} running_mean after 5 steps", got[0],
            bn.running_mean.numpy())
    R.check(f"batchnorm {shape} cl={cl} running_var after 5 steps", got[1], bn.running_var.numpy())

# InstanceNorm1d (N, C, L) and InstanceNorm2d (N, C, H, W), affine on and off; channels-last
for shape, cl, sx in [((4, 6, 33), 0, 1), ((2, 5, 7, 9), 0, 1), ((3, 1, 16), 0, 1),
                      ((4, 33, 24), 1, 1), ((4, 6, 33), 0, 1e-2)]:
    C = shape[-1] if cl else shape[1]
    x, w, b = randn(*shape, scale=sx), randn(C, scale=0.5, shift=1.0), randn(C)
    compare(f"instancenorm {shape} cl={cl} sx={sx} affine", "instancenorm", [x, w, b],
            channels_first(lambda x, w, b: F.instance_norm(x, weight=w, bias=b, eps=1e-5), cl),
            eps=1e-5, cl=cl)
    compare(f"instancenorm {shape} cl={cl} sx={sx}", "instancenorm", [x],
            channels_first(lambda x: F.instance_norm(x, eps=1e-5), cl), eps=1e-5, cl=cl)

# GroupNorm on (N, C), (N, C, L), (N, C, H, W); G = 1 and G = C; channels-last
for shape, G, cl, sx in [((6, 24), 6, 0, 1), ((4, 12, 10), 3, 0, 1), ((2, 32, 4, 4), 8, 0, 1),
                         ((3, 10, 7), 1, 0, 1), ((3, 10, 7), 10, 0, 1), ((256, 768), 32, 0, 1),
                         ((2, 5, 6, 24), 4, 1, 1), ((4, 12, 10), 3, 0, 1e-2)]:
    C = shape[-1] if cl else shape[1]
    x, w, b = randn(*shape, scale=sx), randn(C, scale=0.5, shift=1.0), randn(C)
    compare(f"groupnorm {shape} G={G} cl={cl} sx={sx}", "groupnorm", [x, w, b],
            channels_first(lambda x, w, b, G=G: F.group_norm(x, G, w, b, 1e-5), cl),
            eps=1e-5, G=G, cl=cl)
    compare(f"groupnorm {shape} G={G} cl={cl} sx={sx} no affine", "groupnorm", [x],
            channels_first(lambda x, G=G: F.group_norm(x, G, None, None, 1e-5), cl),
            eps=1e-5, G=G, cl=cl)

R.finish()
