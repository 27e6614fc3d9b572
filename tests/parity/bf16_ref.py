"""bf16 rounding in PyTorch for the parity tests of --precision bf16 (test_bf16.py, test_ngpt.py,
test_hc.py, test_completep.py, test_qk_clip.py): mt's linear layers multiply bf16-rounded
operands and accumulate in fp32; these reproduce that from the definition of round-to-nearest-even
bf16."""
import json

import numpy as np
import torch

from harness import check_model, run_driver
from torch_gpt import ACTS


def r(t):
    """t rounded to bf16 (nearest even), back in t's float type."""
    return t.to(torch.bfloat16).to(t.dtype)


class BF16Product(torch.autograd.Function):
    """x w^T on bf16-rounded operands; the backward rounds dy too."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return r(x) @ r(w).t()

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        dyr = r(dy)
        dw = dyr.reshape(-1, dy.shape[-1]).t() @ r(x).reshape(-1, x.shape[-1])
        return dyr @ r(w), dw


class BF16Hidden(torch.autograd.Function):
    """h = act(a), or act(a) g; the backward multiplies dh by the derivatives rounded to bf16."""

    @staticmethod
    def forward(ctx, a, g, act):
        ctx.save_for_backward(a, g)
        ctx.act = act
        return act(a) if g is None else act(a) * g

    @staticmethod
    def backward(ctx, dh):
        a, g = ctx.saved_tensors
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_() for t in (a, g) if t is not None]
            h = ctx.act(leaves[0]) if g is None else ctx.act(leaves[0]) * leaves[1]
            derivs = torch.autograd.grad(h.sum(), leaves)  # elementwise: the sum's gradient
        grads = [dh * r(d) for d in derivs]
        return grads[0], grads[1] if g is not None else None, None


class BF16Twin:
    """Mixed in before a twin of torch_gpt.py (TorchGPT or a subclass): its linear layers' and
    head's products (TorchBlocks.product) on bf16 operands, the fused FFN's derivatives rounded
    (TorchBlocks.hidden), as mt's --precision bf16; every other product and op of the twin stays
    float64, as mt's stay fp32."""

    def product(self, x, w):
        return BF16Product.apply(x, w)

    def hidden(self, a, g):
        return BF16Hidden.apply(a, g, ACTS[self.cfg["act"]])


def bf16_twin(twin):
    """twin (a class of torch_gpt.py's family) with BF16Twin's rounding."""
    return type(twin.__name__ + "BF16", (BF16Twin, twin), {})


def rel_err(got, want):
    """max |got - want| / max |want|."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)


class Largest:
    """A harness.Report that keeps the largest error, each relative to its check's tolerance."""

    def __init__(self):
        self.worst = 0.0

    def check(self, what, got, want, tol):
        self.worst = max(self.worst, rel_err(got, want) / tol)


def bf16_case(R, label, twin, cfg, params, ids, targets, tol, meta=None):
    """The GPT of cfg on params, ids and targets (B, T) through gpt_driver in bf16 (meta: more of
    its metadata): logits, loss and every gradient against bf16_twin(twin) at tol
    (harness.check_model). Returns the driver's output, that twin (its gradients filled) and
    the largest error against twin unrounded (each as check_model scales it), which a test holds
    above 3 tol: the check tells bf16 products from fp32 ones."""
    B, T = ids.shape
    tensors = dict(params, ids=ids.astype(np.float32), targets=targets.astype(np.float32))
    got = run_driver("gpt", tensors, dict(meta or {}, config=json.dumps(cfg), B=B, T=T,
                                          precision="bf16"))
    plain = Largest()
    for ref, report, t in ((twin, plain, 1.0), (bf16_twin(twin), R, tol)):
        model = ref(cfg, params)
        logits, loss = model(torch.tensor(ids), torch.tensor(targets))
        loss.backward()
        check_model(report, f"{label} bf16", got, logits, loss, model, t)
    return got, model, plain.worst
