"""The ViT against a PyTorch model written here (float64), on the same weights (passed by their mt
names): logits, loss and the gradient of every parameter after one training-mode step, BatchNorm's
running statistics after it, and the logits in eval mode, to 1e-4 relative -- for every norm
(BatchNorm, InstanceNorm, GroupNorm, DyT and Derf included; QK-norms) x every placement (DyT
and Derf: not DeepNorm, which refuses them), with the class token and mean
pooling, gray and RGB, square and non-square images, biases on and off, each activation, label
smoothing 0, 0.1 and 0.3 in the loss. The patch
embedding is checked against torch's Conv2d(kernel = stride = P) on the weight reshaped, the
layout models.h promises."""
import json

import numpy as np
import torch
import torch.nn.functional as F

from harness import Report, check_sizes, k_bias_vanishes, methods, random_params, run_driver
from torch_gpt import TorchBlocks, z_loss

rng = np.random.default_rng(0)
R = Report("parity vit")
TOL = 1e-4


class TorchViT(TorchBlocks):
    """The ViT of models.h: patch embedding, class token, the bidirectional block stack, the head."""

    def __init__(self, cfg, params):
        super().__init__(cfg, params, causal=False)

    def forward(self, images):
        p, cfg = self.p, self.cfg
        C, P, CH = cfg["n_embd"], cfg["patch"], cfg["channels"]
        conv_w = p["patch_embed.weight"].reshape(C, CH, P, P)
        x = F.conv2d(images, conv_w, p.get("patch_embed.bias"), stride=P)  # (B, C, gh, gw)
        x = x.flatten(2).transpose(1, 2)  # (B, np, C), patches in raster order
        if cfg["pool"] == "cls":
            x = torch.cat([p["cls_token"].expand(x.shape[0], 1, C), x], 1)
        x = x + p["pos_emb.weight"]
        if cfg.get("emb_scale"):  # DyT's and Derf's LLaMA setting: a learned scalar
            x = self.scalar("emb_scale", x * p["emb_scale"], x)
        x = self.blocks(x)
        x = x[:, 0] if cfg["pool"] == "cls" else x.mean(1)
        return self.linear(x, "head")


def zero_by_invariance(cfg, name):
    """Biases whose loss gradient is exactly 0: k_proj's (q.(k + b) shifts a softmax row by a
    constant), and with BatchNorm or InstanceNorm those adding a per-channel constant to every
    token before the next norm removes it (v_proj's passes attention unchanged since its rows
    sum to 1; Sub-LN's inner norms' pass a linear layer, Peri-LN's output norms' go straight to
    the residual stream; patch_embed's reaches every token only without the class token, and only pre
    reads the embedded tokens through a norm alone: pre, subln, peri, lns, dsl, and mixln without a
    Post-LN block)."""
    if name.endswith("k_proj.bias"):
        return k_bias_vanishes(cfg)
    if cfg["norm"] not in ("bn", "in"):
        return False
    # The norm whose output goes to the residual stream, read next only through norms: reorder's
    # last (its FFN's output norm); Mix-LN's last Post-LN block's FFN norm.
    pl, L = cfg["placement"], cfg["n_layer"]
    post = cfg.get("mixln_post", -1) if pl == "mixln" else 0
    post = L // 4 if post == -1 else post
    if (pl == "reorder" and name == f"blocks.{L - 1}.ffn_norm.bias") or \
            (post > 0 and name == f"blocks.{post - 1}.ffn_norm.bias"):
        return True
    normed = pl in ("pre", "subln", "peri", "lns", "dsl") or (pl == "mixln" and post == 0)
    return (name.endswith(("v_proj.bias", "out_proj.bias", "fc2.bias", "inner_norm.bias",
                           "out_norm.bias")) or
            (name == "patch_embed.bias" and cfg["pool"] == "mean" and normed))


# Every method of mt's tables (harness.methods): the norms' cases below, in their order (each
# meets the settings its index picks), then any other norm of mt's with its defaults; QK-norms;
# each activation but SwiGLU; each placement
METHODS = methods()
NORMS = [("ln", {}), ("bn", {}), ("in", {}), ("in", {"in_affine": True}),
         ("gn", {"gn_groups": 4}), ("gn", {"gn_groups": 1}), ("rms", {"rms_form": "llama"}),
         ("rms", {"rms_form": "paper", "rms_bias": True, "norm_eps": 1e-8}),
         ("prms", {"prms_p": 0.25}), ("scale", {}), ("none", {}), ("dyt", {}), ("derf", {}),
         ("ln", {"qk_norm": "rms", "qk_norm_affine": True}),
         ("rms", {"qk_norm": "ln", "qk_norm_scope": "all", "qk_norm_affine": True}),
         ("ln", {"qk_norm": "l2", "qk_norm_affine": True}),
         ("ln", {"attn_gate": "headwise", "attn_sink": True}),
         ("rms", {"softmax": "softpick", "attn_gate": "elementwise"}),
         ("ln", {"value_residual": "learned"}), ("rms", {"value_residual": "half"})]
NORMS += [(norm, {}) for norm in METHODS["norm"] if norm not in dict(NORMS)]
ACTS = [act for act in METHODS["act"] if act != "swiglu"]
PLACEMENTS = tuple(METHODS["placement"])
PLACEMENT_OPTS = {"mixln": {"mixln_post": 1}, "dsl": {"dsl_k": 0.7}}  # as test_gpt.py's


def run_cases(placements, case):
    """Every norm in each placement; case (from 0, then on) varies the other settings."""
    for norm, opts in NORMS:
        for placement in placements:
            if norm in ("dyt", "derf") and placement == "deepnorm":
                continue  # refused (docs/norms.md)
            run_case(norm, opts, placement, case)
            case += 1
    return case


def run_case(norm, opts, placement, case):
    """One ViT through torch and the driver: the values, BatchNorm's statistics, every gradient."""
    rgb, wide = case % 2 == 1, case % 3 == 2
    cfg = {"image_h": 8, "image_w": 12 if wide else 8, "channels": 3 if rgb else 1,
           "patch": 4 if case % 4 else 2, "n_classes": 5, "n_layer": 2 + case % 2,
           "n_head": 2 + 2 * (case % 3 == 0), "n_embd": 16, "n_ff": 24 + 8 * (case % 2),
           "norm": norm, "placement": placement, "norm_eps": 1e-5, "rms_form": "llama",
           "prms_p": 0.0625, "gn_groups": 1, "in_affine": False, "bias": case % 5 != 3,
           "act": ACTS[case % len(ACTS)], "dropout": 0.0, "label_smoothing": (0.0, 0.1, 0.3)[case % 3],
           "pool": "mean" if case % 2 and norm != "in" else "cls"}  # in + mean: refused
    cfg.update(opts)
    cfg.update(PLACEMENT_OPTS.get(placement, {}))
    B = 3 + case % 2
    images = rng.standard_normal((B, cfg["channels"], cfg["image_h"], cfg["image_w"]))
    labels = rng.integers(0, cfg["n_classes"], B)
    params = random_params("vit", cfg, rng)
    check_sizes(R, f"{norm} {opts} {placement} case {case}", params,
                {"blocks.0.ffn.fc1.weight": (cfg["n_ff"], cfg["n_embd"]),
                 "head.weight": (cfg["n_classes"], cfg["n_embd"])})
    model = TorchViT(cfg, params)
    logits = model.forward(torch.tensor(images))
    loss = F.cross_entropy(logits, torch.tensor(labels),
                           label_smoothing=cfg["label_smoothing"])
    loss = loss + z_loss(cfg, logits, torch.tensor(labels))
    loss.backward()
    model.training = False
    with torch.no_grad():
        logits_eval = model.forward(torch.tensor(images))

    tensors = dict(params, images=images.astype(np.float32),
                   labels=labels.astype(np.float32))
    got = run_driver("vit", tensors, {"config": json.dumps(cfg)})
    label = (f"{norm}{'/' + '/'.join(f'{k}={v}' for k, v in opts.items()) if opts else ''}"
             f" {placement} {cfg['pool']} {cfg['channels']}x{cfg['image_h']}x"
             f"{cfg['image_w']}/p{cfg['patch']} L{cfg['n_layer']}"
             f"{'' if cfg['bias'] else ' no-bias'} {cfg['act']}"
             f" smoothing {cfg['label_smoothing']}")
    R.check(f"{label} logits", got["logits"], logits.detach().numpy(), TOL)
    R.check(f"{label} loss", got["loss"], loss.detach().numpy().reshape(1), TOL)
    R.check(f"{label} eval logits", got["logits_eval"], logits_eval.numpy(), TOL)
    trained = {k for k, t in model.p.items() if t.requires_grad}
    grads = {k[5:] for k in got if k.startswith("grad.")}
    if grads != trained:
        R.check(f"{label} parameter names", sorted(grads), sorted(trained))
    for name, t in model.p.items():
        if not t.requires_grad:  # a buffer: BatchNorm's running statistics after the step
            R.check(f"{label} {name}", got["buf." + name], t.detach().numpy(), TOL)
            continue
        want = t.grad.numpy().reshape(got["grad." + name].shape)
        tol = TOL
        if zero_by_invariance(cfg, name):
            # The true gradient is 0, so both sides hold rounding noise: measure it against
            # the gradient of the same layer's weight (after checking it is 0 indeed).
            # (A weight's gradient of 0 too, a softmax saturated to one-hot: the bias's is 0.)
            ref = np.abs(model.p[name[:-4] + "weight"].grad.numpy()).max()
            rel = np.abs(want).max() / ref if ref else np.abs(want).max()
            R.check(f"{label} grad {name} vanishes", 1 + rel, 1.0, 1e-9)
            tol = TOL * max(1.0, ref / max(np.abs(want).max(), 1e-30))
        if name.endswith(".g") and name[:-2] in model.g_terms:
            # After a post or DeepNorm ScaleNorm the next ScaleNorm makes the loss nearly
            # invariant to g, and dL/dg = sum(dy * xh) cancels (|sum| / sum|terms| ~ 2e-5
            # was seen): measure the error against the sum of |terms|.
            terms = model.g_terms[name[:-2]]
            tol = TOL * max(1.0, terms / max(np.abs(want).max(), 1e-30))
        if name in model.terms:  # DyT's and Derf's alpha and shift: the same
            tol = TOL * max(1.0, model.terms[name] / max(np.abs(want).max(), 1e-30))
        R.check(f"{label} grad {name}", got["grad." + name], want, tol)


# the placements of Post-LN to Peri-LN, then those of arXiv 2502.05795 (lns), OLMo-2 (reorder),
# Mix-LN and DeepScaleLM
case = run_cases(PLACEMENTS[5:], run_cases(PLACEMENTS[:5], 0))
for i, z in enumerate((1e-4, 0.3)):  # PaLM's z-loss in the training loss (torch_gpt.z_loss)
    run_case("ln", {"z_loss": z}, ("pre", "dsl")[i], case + i)
# the embedding scale on the tokens (patches + positions), with DyT, Derf and LayerNorm
for i, (norm, placement) in enumerate((("dyt", "pre"), ("derf", "lns"), ("ln", "post"))):
    run_case(norm, {"emb_scale": True}, placement, case + 2 + i)
# nanochat's per-block lambdas and modded-nanogpt's U-net skips (the stack's, torch_gpt's blocks)
for i, (norm, placement) in enumerate((("ln", "pre"), ("rms", "peri"))):
    run_case(norm, {"layer_lambdas": True, "unet": True}, placement, case + 5 + i)
R.finish()
