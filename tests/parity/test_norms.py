"""Every norm against torch 1.13 (nn.LayerNorm's functional form, BatchNorm, InstanceNorm,
GroupNorm) or against the torch formula of REFERENCE.md (RMSNorm in both forms, pRMSNorm,
ScaleNorm): outputs and the gradients of every input, float32, to 1e-5 relative."""
import numpy as np
import torch
import torch.nn.functional as F

from harness import Report, run_op

rng = np.random.default_rng(0)
R = Report("parity norms")


def randn(*shape, scale=1.0, shift=0.0):
    return (shift + scale * rng.standard_normal(shape)).astype(np.float32)


def compare(label, op, xs, fn, tol=1e-5, **opts):
    """xs: inputs (all require grad); fn: the torch computation on torch leaves."""
    ts = [torch.tensor(x, requires_grad=True) for x in xs]
    y = fn(*ts)
    dy = randn(*y.shape)
    y.backward(torch.tensor(dy))
    got = run_op("norms", op, xs, dy, [True] * len(xs), **opts)
    R.check(f"{label} y", got["y"], y.detach().numpy(), tol)
    for i, t in enumerate(ts):
        R.check(f"{label} dx{i}", got[f"dx{i}"], t.grad.numpy(), tol)


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
SHAPES = [(4, 17), (2, 5, 64), (3, 3), (8, 768)]

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

# large mean, small noise: the variance must survive (tolerance: float32 holds the mean 1e3 to
# half an ulp, 3e-5, which is 3e-3 of the noise's std in both torch and mt)
x = randn(8, 768, scale=1e-2, shift=1e3)
compare("layernorm mean 1e3", "layernorm", [x], lambda x: F.layer_norm(x, (768,), eps=1e-5),
        tol=5e-3, eps=1e-5)

R.finish()
