"""The diagnostics' attention probe (diag_sink.csv) against torch: the share of (row, head,
query) whose weight on key 0 exceeds 0.3 (Gu et al., arXiv 2410.10781) and the mean entropy
-sum_s p_s log p_s of the weights the values are mixed with, on the same q and k: softmax (the
fused op's register-tile and strided paths, causal or not, grouped heads), queries at pos0 of a
longer sequence, a learned sink logit per head (its column dropped), softpick (arXiv
2504.20966). The weights are torch's in float64 from the formulas. Then diag_act.csv's
statistics and diag_hc.csv's hyper-connection gains."""
import os
import subprocess
import tempfile

import numpy as np
import torch

from harness import BUILD, Report, load, run_op

rng = np.random.default_rng(3)
R = Report("parity probe")
EPS = 0.3


def weights(q, k, NH, causal, pos0, sink, softpick):
    """(B, NH, Tq, Tk) weights in float64; masked keys 0."""
    q, k = torch.tensor(q, dtype=torch.float64), torch.tensor(k, dtype=torch.float64)
    B, Tq, C = q.shape
    Tk, KC = k.shape[1], k.shape[2]
    HS = C // NH
    G = NH // (KC // HS)
    qh = q.reshape(B, Tq, NH, HS).transpose(1, 2)
    kh = k.reshape(B, Tk, KC // HS, HS).transpose(1, 2).repeat_interleave(G, 1)
    S = qh @ kh.transpose(-1, -2) / HS ** 0.5
    seen = torch.ones(Tq, Tk, dtype=torch.bool)
    if causal:
        seen = torch.arange(Tk)[None, :] <= pos0 + torch.arange(Tq)[:, None]
    if softpick:  # relu(e^S - 1) / (sum |e^S - 1| + 1e-8) over the keys seen
        u = torch.where(seen, torch.expm1(S), 0.0)
        return torch.relu(u) / (u.abs().sum(-1, keepdim=True) + 1e-8)
    S = S.masked_fill(~seen, float("-inf"))
    if sink is not None:  # softmax over [S, z_h], the sink's column dropped
        z = torch.tensor(sink, dtype=torch.float64)[None, :, None, None].expand(B, NH, Tq, 1)
        return torch.cat([S, z], -1).softmax(-1)[..., :-1]
    return S.softmax(-1)


def compare(label, B, Tq, Tk, C, NH, KC, causal=True, pos0=0, sink=False, softpick=False,
            scale=2.0, k0=1.0):
    q = (scale * rng.standard_normal((B, Tq, C))).astype(np.float32)
    k = rng.standard_normal((B, Tk, KC)).astype(np.float32)
    k[:, 0] = k0 * np.abs(k[:, 0])  # k0 > 1 with q > 0: key 0 draws the queries, a sink
    if k0 != 1.0:
        q = np.abs(q)
    z = (2 * rng.standard_normal(NH)).astype(np.float32) if sink else None
    P = weights(q, k, NH, causal, pos0, z, softpick)
    rate = (P[..., 0] > EPS).double().mean().item()
    ent = -torch.where(P > 0, P * P.clamp_min(1e-300).log(), 0.0).sum(-1).mean().item()
    xs = [q, k] + ([z] if sink else [])
    got = run_op("probe", "attn_sink", xs, np.zeros(2, np.float32), [False] * len(xs), NH=NH,
                 causal=int(causal), pos0=pos0, softpick=int(softpick))
    R.check(f"{label} sink rate", got["y"][0], rate, 1e-4)
    R.check(f"{label} entropy", got["y"][1], ent, 1e-4)
    print(f"  {label}: rate {rate:.4f} entropy {ent:.4f}")


compare("fused small causal", 2, 64, 64, 64, 4, 64)
compare("fused small causal, a sink at key 0", 2, 64, 64, 64, 4, 64, scale=0.5, k0=1.5)
compare("fused small GQA not causal", 2, 33, 33, 64, 4, 32, causal=False, scale=3.0)
compare("fused strided HS 6", 3, 40, 40, 24, 4, 24)
compare("fused OpenMP", 2, 128, 128, 128, 4, 64)
compare("pos0 7", 2, 5, 12, 32, 2, 16, pos0=7)
compare("sink", 2, 48, 48, 64, 4, 64, sink=True)
compare("sink, a sink at key 0", 2, 48, 48, 64, 4, 64, sink=True, scale=0.5, k0=1.5)
compare("sink GQA", 2, 48, 48, 64, 4, 32, sink=True, scale=1.0)
compare("softpick", 2, 48, 48, 64, 4, 64, softpick=True)
compare("softpick, a sink at key 0", 2, 48, 48, 64, 4, 64, softpick=True, scale=0.5, k0=1.5)
compare("softpick not causal", 2, 20, 20, 32, 2, 16, causal=False, softpick=True, scale=3.0)


# the activation probe (diag_act.csv): max |x| and Pearson's kurtosis E[(x - mu)^4] / sigma^4
# (population moments) of a block's input over its tokens and channels; Gaussian (3), a few
# massive channels (heavy tails), uniform (1.8), an offset mean
def act(label, x):
    t = torch.tensor(x, dtype=torch.float64)
    d = t - t.mean()
    want = [t.abs().max().item(), ((d ** 4).mean() / (d ** 2).mean() ** 2).item()]
    got = run_op("probe", "act", [x], np.zeros(2, np.float32), [False])
    R.check(f"act {label} max |x|", got["y"][0], want[0], 1e-6)
    R.check(f"act {label} kurtosis", got["y"][1], want[1], 1e-4)
    print(f"  act {label}: max |x| {want[0]:.4f} kurtosis {want[1]:.4f}")


act("gaussian", rng.standard_normal((4, 64, 64)).astype(np.float32))
massive = rng.standard_normal((4, 64, 64)).astype(np.float32)
massive[:, 0, 7] = 300.0  # Sun et al.'s massive activations: one channel at the first token
act("massive", massive)
act("uniform + 5", (5 + rng.uniform(-1, 1, (2, 33, 48))).astype(np.float32))


# the hyper-connections' gains (diag_hc.csv, mHC arXiv 2512.24880 section 3.1): sublayer s's
# residual mixing H_s[j][i] = a_s[i][1 + j] of each row, the composite M_s = H_{S-1} ... H_s, and
# of each the largest |row sum| (the signal's gain) and |column sum| (the gradient's), the max
# over the rows; a shared a is every row's
def gains(a_list, N):
    R = max(a.shape[0] if a.ndim == 3 else 1 for a in a_list)
    Hs = [torch.tensor(a, dtype=torch.float64).reshape(-1, N, N + 1)[:, :, 1:].transpose(1, 2)
          .expand(R, N, N) for a in a_list]
    out = np.zeros((len(Hs), 4))
    M = torch.eye(N, dtype=torch.float64).expand(R, N, N)
    for s in reversed(range(len(Hs))):
        M = M @ Hs[s]
        for k, X in enumerate((Hs[s], M)):
            out[s, 2 * k] = X.sum(2).abs().amax().item()
            out[s, 2 * k + 1] = X.sum(1).abs().amax().item()
    return out


def hc(label, N, rows):
    """rows[s]: 0 a shared (N, N+1), else (rows, N, N+1)"""
    a = [(rng.standard_normal((r, N, N + 1) if r else (N, N + 1)) * 0.6
          + np.eye(N, N + 1, 1)).astype(np.float32) for r in rows]
    want = gains(a, N)
    got = run_op("probe", "hc_gains", a, np.zeros(4 * len(a), np.float32), [False] * len(a), N=N)
    R.check(f"hc {label}", got["y"].reshape(-1, 4), want, 1e-5)
    print(f"  hc {label}: composite gain {want[0, 2]:.4g}, gradient's {want[0, 3]:.4g}")


hc("static N 4, 6 sublayers", 4, [0] * 6)
hc("dynamic N 4, 8 sublayers of 37 rows", 4, [37] * 8)
hc("shared and dynamic N 2", 2, [0, 5, 5, 0])
hc("N 1", 1, [3, 3])


def hc_run(residual, L=3, N=3):
    """./train's diag_hc.csv at its last step against the gains of its saved static mixing (the
    trained weights of that step): the hook reads each sublayer's coefficients in order"""
    with tempfile.TemporaryDirectory() as out:
        run = subprocess.run(
            [os.path.join(BUILD, "train"), "--data", DATA, "--n-layer", str(L), "--n-embd", "32",
             "--n-head", "2", "--n-ctx", "32", "--batch", "4", "--steps", "30", "--lr", "3e-2",
             "--eval-every", "30", "--residual", residual, "--hc-static", "--hc-streams", str(N),
             "--diag-hc-every", "15", "--out", out], capture_output=True, text=True)
        R.check(f"hc run {residual} exit", run.returncode, 0, 0)
        rows = np.loadtxt(os.path.join(out, "diag_hc.csv"), delimiter=",", skiprows=1)
        t, _ = load(os.path.join(out, "model.safetensors"))
    if residual == "hc":
        a = [t[f"blocks.{l}.{s}_hc.static_alpha"] for l in range(L) for s in ("attn", "ffn")]
        g = gains(a, N).reshape(L, 8)
        want = g[:, [0, 1, 4, 5, 2, 3]]
    else:  # doubly stochastic: every gain 1
        want = np.ones((L, 6))
    R.check(f"hc run {residual} steps", rows[:, 0], np.repeat([0, 15, 30], L), 0)
    R.check(f"hc run {residual} last gains", rows[-L:, 2:], want, 1e-5)
    print(f"  hc run {residual}: composite gain at block 0 {rows[-L, 6]:.4f}")


DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data", "tinyshakespeare.txt")
hc_run("hc")
hc_run("mhc")
R.finish()
