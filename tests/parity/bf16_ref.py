"""bf16 rounding in PyTorch for the parity tests of --precision bf16 (test_bf16.py, test_ngpt.py):
mt's linear layers multiply bf16-rounded operands and accumulate in fp32; these reproduce that
from the definition of round-to-nearest-even bf16."""
import torch


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
