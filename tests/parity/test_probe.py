"""The diagnostics' attention probe (diag_sink.csv) against torch: the share of (row, head,
query) whose weight on key 0 exceeds 0.3 (Gu et al., arXiv 2410.10781) and the mean entropy
-sum_s p_s log p_s of the weights the values are mixed with, on the same q and k: softmax (the
fused op's register-tile and strided paths, causal or not, grouped heads), queries at pos0 of a
longer sequence, a learned sink logit per head (its column dropped), softpick (arXiv
2504.20966). The weights are torch's in float64 from the formulas."""
import numpy as np
import torch

from harness import Report, run_op

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
R.finish()
