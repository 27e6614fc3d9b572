#!/usr/bin/env python3
"""The depth study, third round (the 2023-25 stability methods' claims): each part runs alone and
keeps what it measured as small files in docs/depth-study-3/<part>/, each run's as it finishes;
a run whose <name>.row.json is there is done and not run again, so a part stopped by the end of
a session resumes in the next. `report` writes docs/depth-study-3.md from those files alone.
Byte-level tiny Shakespeare, DeepNet's 64-128-2 size, untied head, 400 steps, seed 1.

  scripts/depth_study3.py lr-12    learning-rate sensitivity (Wortsman et al. 2023): every method
                                   of METHODS at 6 rates 3e-4..1e-1, 12 layers, with the largest
                                   attention logit and log Z every 10 steps (96 runs, ~20 min on
                                   2 idle cores, ~75 at load 15)
  scripts/depth_study3.py lr-100   the same at 100 layers (96 runs, ~2 h on 2 idle cores: in
                                   sittings with --only)
  scripts/depth_study3.py dyt      DyT and Derf at 100 layers; alpha's initial value against
                                   depth (12, 100 layers) and width (64, 128 channels), per-block
                                   gradient norms (20 runs, 4 of them 100 layers; ~15 min idle)
  scripts/depth_study3.py dyt-twin why DyT and Derf stall: part 2's 12-layer DyT run again with
                                   its checkpoints kept, the saturation of its norms' inputs,
                                   its torch twin (loss, per-block gradients, saturation); one
                                   change at a time that could make it train (the papers' LLaMA
                                   alphas, biases, alpha, the embedding scale, DyT's weight at
                                   init), the one that does at 100 layers (19 runs, ~20 min idle)
  scripts/depth_study3.py curse    the curse of depth: Pre-LN, LNS, Mix-LN, DeepNorm at 100
                                   layers, the block-skip probe and per-block gradient norms
                                   (4 runs, ~8 min idle)
  scripts/depth_study3.py peri     Peri-LN settled: does a PyTorch twin of the second round's
                                   100-layer Peri-LN run (same init, AdamW, clipping, schedule,
                                   its own batches) show the residual stream's growth from 45 to
                                   1130? What controls it: the output norms' initial gain, the
                                   rate, the depth (~25 min on 2 idle cores)
  scripts/depth_study3.py ngpt-steps  nGPT's step claim (4-20x fewer steps): nGPT, Pre-LN and
                                   the LLaMA-shaped Pre-LN at 12 and 100 layers, each at its best
                                   rate of part 1, two seeds, evaluated every 25 steps (9 runs of
                                   its own, 3 of them 100 layers; seed 1 at 100 is lr-100's)
  scripts/depth_study3.py long     the long runs: Pre-LN, DeepNorm, the LLaMA-shaped Pre-LN and
                                   the best methods of parts 1-4 at 100 layers, 3000 steps, two
                                   seeds (12 runs of 16-28 min of a core; resumable from a
                                   checkpoint every 250 steps)
  scripts/depth_study3.py muon     Muon at depth: Muon against AdamW on the 100-layer Post-LN,
                                   Pre-LN and DeepNorm configs, a short rate sweep, seed 1
                                   (--seed2 2e-2,...: those rates with seed 2 too)
  scripts/depth_study3.py report   docs/depth-study-3.md from the parts on disk
  --only lns,mixln                 only those methods' runs (the rest stay to go)
  --rates 3e-3,1e-2                only the runs at those rates
  --smoke                          the part at 3 layers and 20 steps into /tmp (a check of the
                                   driver, not a result); --smoke-dir DIR: into DIR

A method is an entry of METHODS (its flags over configs/deep100-pre.ini); a part is an entry of
PARTS (its runs, its section of the page). Runs go to out/depth-study-3/<part>/<run>/ (./train's
own files); two run at once (JOBS=1: one), one thread each, at nice 10. The torch twin
(tests/parity/torch_gpt.py's model, float32) needs Debian's python3-torch. Python 3 standard
library and gnuplot otherwise; runs ./train as built by make all.
"""
import argparse
import concurrent.futures as cf
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from mtrun import (PALETTE, ROOT, byte_entropy, ckpt_step, copy_columns, cpu_model,  # noqa: E402
                   evals, fmt, gnuplot, header, label, num, plot_heatmaps, plot_lines,
                   plot_vs_rate, read_csv, read_metrics, read_resid, run, set_tensors, with_notes,
                   write_curve, write_dat)
from mtrun import flags as mtflags  # noqa: E402

DOCS = os.path.join(ROOT, "docs/depth-study-3")
OUT = os.path.join(ROOT, "out/depth-study-3")
PAGE = os.path.join(ROOT, "docs/depth-study-3.md")
BASE = {"--config": "configs/deep100-pre.ini", "--n-layer": 100, "--steps": 400,
        "--eval-every": 50, "--eval-batches": 8, "--save-every": 0, "--log-every": 10,
        "--threads": 1, "--replicas": 1, "--seed": 1, "--diag-grad-every": 0,
        "--diag-update-steps": 0, "--diag-resid-every": 0}
SMOKE = {}  # --smoke: a few layers and steps
TWIN_STEPS = 100  # the torch twin's length: the growth happens in the first 50 steps
LOSS0 = math.log(256)  # the loss at init (uniform over the bytes): Wortsman et al.'s l_0

# The methods of parts 1-3: their flags over BASE (configs/deep100-pre.ini: LayerNorm, Pre-LN,
# init auto, untied head).
METHODS = {
    "pre": {"--placement": "pre"},
    "deepnorm": {"--placement": "deepnorm"},
    # Wortsman et al.'s qk-layernorm: LayerNorm on each head's queries and keys
    "pre-qk": {"--qk-norm": "ln", "--qk-norm-affine": True},
    # Wortsman et al.'s (and PaLM's) z-loss coefficient
    "pre-z": {"--z-loss": "1e-4"},
    # OLMo-2: the reordered block with RMSNorm over the whole q and k projections
    "reorder-qk": {"--placement": "reorder", "--qk-norm": "rms", "--qk-norm-scope": "all",
                   "--qk-norm-affine": True},
    "dyt": {"--norm": "dyt"},
    "derf": {"--norm": "derf"},
    # the papers' language-model setting: a learned scalar on the embeddings, init sqrt(n_embd)
    # (DyT's LLaMA, Derf's GPT-2 patch): without it the blocks read a stream of norm ~0.2 and
    # tanh(0.5 x) passes it on as small as it is (part 1: plain DyT and Derf stall)
    "dyt-emb": {"--norm": "dyt", "--emb-scale": True},
    "derf-emb": {"--norm": "derf", "--emb-scale": True},
    # part 2's finding: with every norm weight started at 8 the outputs start at LayerNorm's
    # scale, and DyT and Derf train at this width (docs/norms.md, "Narrow models")
    "dyt-gamma8": {"--norm": "dyt", "--emb-scale": True, "--dyt-weight-init": 8},
    "derf-gamma8": {"--norm": "derf", "--emb-scale": True, "--dyt-weight-init": 8},
    "lns": {"--placement": "lns"},
    "mixln": {"--placement": "mixln"},
    # the init these runs were made with: the correlation r = 1 throughout (--dsl-r0 1, no
    # dropout), which the authors' recurrence from r0 = 0.221 replaced after part 1a was run
    "dsl": {"--placement": "dsl", "--dsl-r0": 1},
    # nGPT (Loshchilov et al. 2024, arXiv 2410.01131; docs/layers.md): --arch ngpt with the
    # config's norm and placement given as nGPT's (a preset does not override the config file's
    # keys) and what it brings, so it differs from the Pre-LN control
    # in more than the block: RoPE for the learned position table (its embeddings enter the
    # sphere as they are), SwiGLU for GELU, and the paper's recipe, no weight decay (refused on
    # unit matrices) and no warmup (the config's 0.1 and 100 are given back). The FFN is 85 wide
    # so that its three matrices hold what Pre-LN's two of 128 hold (16320 against 16384 weights
    # a block; 3.340M parameters in all at 100 layers, Pre-LN 3.384M): the same size, each
    # method as its paper trains it, at its own best rate (part 1), is the paper's comparison.
    "ngpt": {"--arch": "ngpt", "--norm": "none", "--n-ff": 85,
             "--weight-decay": 0, "--warmup": 0},
    # the Pre-LN control with what nGPT brings besides the sphere (its paper's baseline is such a
    # modern GPT): RMSNorm (given over the config's LayerNorm), RoPE, SwiGLU 85 wide, no biases;
    # Pre-LN's decay and warmup
    "llama": {"--arch": "llama", "--norm": "rms", "--n-ff": 85},
}
RATES = ["3e-4", "1e-3", "3e-3", "1e-2", "3e-2", "1e-1"]
ATTN_DIAG = {"--diag-attn-every": 10, "--diag-logz-every": 10}
GRAD_DIAG = {"--diag-grad-every": 10}
# the steps whose per-block gradient norms are kept: diag_grad.csv's step s holds the gradient
# of update s + 1, so its last row is steps - 10
GRAD_KEPT = (0, 10, 20, 50, 100, 200, 300, 390)


class Run:
    """One ./train run of a part: the method's flags over BASE, the rate, the depth and the
    diagnostics. gain: the output norms' initial weight (Peri-LN); edits: {regex: value}, the
    initial value of every element of the tensors whose name matches the regex (DyT's weights,
    the embedding scale). Both are set in the step-0 checkpoint (<dir>/init), which the run
    starts from (--init-from: the same numbers as a run from scratch, bit for bit, where nothing
    is set). resumable: a run that saves checkpoints (diag's
    --save-every) and was stopped part way (the end of a session) resumes from its last one."""

    def __init__(self, part, name, method, lr="1e-3", layers=100, diag=None, gain=1.0,
                 edits=None, resumable=False):
        self.part, self.name, self.lr, self.gain = part, name, lr, gain
        self.resumable = resumable
        self.edits = dict(edits or {})
        if gain != 1.0:
            self.edits[r".*_out_norm\.weight"] = gain
        self.method = METHODS[method] if isinstance(method, str) else method
        self.layers, self.diag = SMOKE.get("--n-layer", layers), diag or {}
        self.dir = os.path.join(OUT, part, name)
        self.stem = os.path.join(DOCS, part, name)

    def options(self):
        return {**BASE, **self.diag, **self.method, **SMOKE, "--lr": self.lr,
                "--n-layer": self.layers}

    def flags(self):
        return mtflags(self.options())

    def done(self):
        return os.path.exists(self.stem + ".row.json")

    def execute(self):
        log = os.path.join(self.dir, "log.txt")
        if self.resumable and ckpt_step(os.path.join(self.dir, "model.safetensors")):
            res = run(["./train", "--resume", "--out", self.dir], log)  # stopped part way
            self.rc, self.seconds = res.rc, res.wall
            return self
        shutil.rmtree(self.dir, ignore_errors=True)
        if not self.edits:
            res = run(["./train"] + self.flags() + ["--out", self.dir], log)
        else:  # the step-0 checkpoint, edited, is where the run starts
            init = os.path.join(self.dir, "init", "model.safetensors")
            res = run(["./train"] + self.flags() + ["--steps", "0", "--out",
                                                    os.path.dirname(init)], log)
            if res.rc == 0:
                for regex, value in self.edits.items():
                    set_tensors(init, lambda name: re.fullmatch(regex, name), value)
                res = run(["./train"] + self.flags() + ["--init-from", init, "--out", self.dir],
                          log)
        self.rc, self.seconds = res.rc, res.wall
        return self

    def keep(self, H):
        """The run's curves and diagnostics into docs/<part>/<name>.*.csv; its summary row
        (<name>.row.json, written last: its presence marks the run done)."""
        os.makedirs(os.path.dirname(self.stem), exist_ok=True)
        metrics = read_metrics(os.path.join(self.dir, "metrics.csv"))
        write_curve(self.stem + ".csv", metrics)
        src = lambda f: os.path.join(self.dir, f)  # noqa: E731
        if os.path.exists(src("diag_resid.csv")):
            keep_resid(src("diag_resid.csv"), self.stem, self.layers)
        attn = keep_attn(src("diag_attn.csv"), self.stem)
        logz = read_csv(src("diag_logz.csv"))
        for what, cols, keep in (("logz", ["step", "mean", "max"], None),
                                 ("skip", ["step", "block", "loss", "delta"], None),
                                 ("grad", ["step", "layer", "total"],
                                  lambda r: int(r["step"]) in GRAD_KEPT)):
            if os.path.exists(src("diag_%s.csv" % what)):
                copy_columns(src("diag_%s.csv" % what), "%s.%s.csv" % (self.stem, what), cols,
                             keep)
        vals = {r.step: r.val_loss for r in evals(metrics)}
        log = open(os.path.join(self.dir, "log.txt")).read()
        row = {"name": self.name, "part": self.part, "flags": self.method,
               "placement": self.method.get("--placement", "ngpt" if self.method.get(
                   "--arch") == "ngpt" else "pre"), "lr": self.lr,
               "layers": self.layers, "gain": self.gain, "edits": self.edits,
               "label": label(self.rc, metrics, H, log),
               "val_final": vals[max(vals)] if vals else "", "seconds": "%.0f" % self.seconds,
               "attn_peak": max(attn.values()) if attn else "",
               "logz_end": float(logz[-1]["mean"]) if logz else "",
               "logz_peak": max(float(r["max"]) for r in logz) if logz else ""}
        with open(self.stem + ".row.json", "w") as f:
            json.dump(row, f)
        return row


def keep_attn(src, stem):
    """The largest attention logit over the layers at each step (diag_attn.csv's self column),
    into stem.attn.csv; {step: logit}."""
    top = {}
    for r in read_csv(src):
        s, v = int(r["step"]), num(r["self"])
        top[s] = max(top.get(s, -math.inf), v)
    if top:
        with open(stem + ".attn.csv", "w") as f:
            f.write("step,max\n")
            f.writelines("%d,%.6g\n" % kv for kv in sorted(top.items()))
    return top


def keep_resid(src, stem, layers):
    """The stream's norm entering the first, middle and last blocks and leaving the last."""
    keep = {0, layers // 2, layers - 1, layers}
    with open(stem + ".resid.csv", "w") as f:
        f.write("step,layer,norm\n")
        for r in read_resid(src):
            if r.layer in keep:
                f.write("%d,%d,%.6g\n" % (r.step, r.layer, r.norm))


def peri_runs(part):
    peri, diag = {"--placement": "peri"}, {"--diag-resid-every": 10}
    return [Run(part, "peri-L100-lr1e-3", peri, diag=diag),
            Run(part, "peri-L100-lr1e-3-gain0.3", peri, diag=diag, gain=0.3),
            Run(part, "peri-L100-lr1e-3-gain0.1", peri, diag=diag, gain=0.1),
            Run(part, "peri-L100-lr3e-4", peri, "3e-4", diag=diag),
            Run(part, "peri-L12-lr1e-3", peri, layers=12, diag=diag),
            Run(part, "pre-L100-lr1e-3", "pre", diag=diag)]


def twin(part, partner):
    """The torch twin from partner's step-0 weights: the stream entering the last block every
    10 steps, into docs/<part>/torch-<partner>.resid.csv."""
    dst = os.path.join(DOCS, part, "torch-" + partner.name + ".resid.csv")
    if os.path.exists(dst):
        return
    steps = min(TWIN_STEPS, SMOKE.get("--steps", TWIN_STEPS))
    init = os.path.join(OUT, part, "init-" + partner.name + ".safetensors")
    # the partner's step-0 weights, written again: its own file holds the final ones by now
    res = run(["./train"] + partner.flags() + ["--steps", "0", "--out", init + ".d"],
              os.path.join(OUT, part, "twin-init.log"))
    if res.rc != 0:
        sys.exit("depth_study3: the twin's init run failed (%s)" % init)
    subprocess.run(["/usr/bin/python3", os.path.join(HERE, "torch_twin.py"),
                    os.path.join(init + ".d", "model.safetensors"), str(partner.layers),
                    partner.method["--placement"], partner.lr, str(steps), dst], check=True,
                   cwd=ROOT)


def lr_runs(part, layers):
    """Part 1: every method at every rate, with the attention-logit and log Z diagnostics; at
    the depths of EVAL_25 evaluated every 25 steps, so that part 4's seed 1 is part 1's run
    (the evaluations do not change the training: the same losses to the last digit)."""
    diag = {**ATTN_DIAG, "--eval-every": STEPS_EVAL} if layers in EVAL_25 else ATTN_DIAG
    return [Run(part, "%s-L%d-lr%s" % (m, layers, lr), m, lr, layers, diag)
            for m in METHODS for lr in RATES]


CURSE = ("pre", "lns", "mixln", "deepnorm")


def curse_runs(part):
    """Part 3: the block-skip probe at init, every 100 steps and at the end, with per-block
    gradient norms."""
    diag = {"--diag-skip-every": 100, **GRAD_DIAG}
    return [Run(part, "%s-L100-lr1e-3" % m, m, diag=diag) for m in CURSE]


DYT_ALPHAS = ("0.1", "0.2", "0.5", "1", "2")
WIDE = {"--n-embd": 128, "--n-ff": 256}


def dyt_runs(part):
    """Part 2: DyT and Derf (with the embedding scale, the papers' language-model setting) at
    100 layers (Pre-LN's LayerNorm control is part 3's run), and alpha's initial value against
    depth (12 and 100 layers) and width (64 and 128 channels at 12 layers), with per-block
    gradient norms; the runs that answer "do they train" first."""
    def one(m, a, layers, wide=None):
        name = "%s-L%d%s-a%s" % (m, layers, "-w128" if wide else "", a)
        return Run(part, name, {**METHODS[m], **(wide or {}), "--dyt-alpha": a}, layers=layers,
                   diag=GRAD_DIAG)
    return ([one("dyt-emb", "0.5", 100), one("derf-emb", "0.5", 100)] +
            [one(m, a, 12) for m in ("dyt-emb", "derf-emb") for a in DYT_ALPHAS] +
            [one("dyt-emb", a, 12, WIDE) for a in DYT_ALPHAS] +
            [Run(part, "pre-L12-w128", {**METHODS["pre"], **WIDE}, layers=12, diag=GRAD_DIAG),
             one("dyt-emb", "0.2", 100), one("dyt-emb", "1", 100)])


# Part 4: nGPT's step claim (arXiv 2410.01131: 4-20x fewer steps to the same loss). nGPT and its
# controls, Pre-LN and the LLaMA-shaped Pre-LN, at 12 and 100 layers, each at its best rate of
# part 1, two seeds, evaluated every 25 steps (seed 1 at the depths of EVAL_25 is part 1's run:
# lr-12 was run before part 4 and evaluated every 50 steps, so it has its own seed-1 runs)
STEPS_CONTROLS = ("pre", "llama")
STEPS_METHODS, STEPS_SEEDS, STEPS_EVAL, EVAL_25 = STEPS_CONTROLS + ("ngpt",), (1, 2), 25, (100,)


def lr_rows(method, layers):
    """Part 1's kept rows of method at that depth, one a rate."""
    return [r for r in rows("lr-%d" % layers) if method_of(r["name"]) == method]


def best_rate(method, layers):
    """The rate of part 1's lowest final loss for method at that depth (None: not run yet;
    --smoke without part 1's rows: BASE's 1e-3, to check the driver)."""
    mine = lr_rows(method, layers)
    if not mine:
        return "1e-3" if SMOKE else None
    return min(mine, key=loss_or_l0)["lr"]


def steps_runs(part):
    runs = []
    for layers in (12, 100):
        for m in STEPS_METHODS:
            lr = best_rate(m, layers)
            if lr is None:
                print("depth_study3: %s: no part-1 rows for %s at %d layers yet (lr-%d)"
                      % (part, m, layers, layers), flush=True)
                continue
            runs += [Run(part, "%s-L%d-lr%s-s%d" % (m, layers, lr, seed), m, lr, layers,
                         {"--seed": seed, "--eval-every": STEPS_EVAL}) for seed in STEPS_SEEDS
                     if steps_source(part, m, layers, lr, seed)[0] == part]
    return runs


def steps_source(part, method, layers, lr, seed):
    """(part, run name) of part 4's run of method at that depth, rate and seed: part 1's for
    seed 1 at the depths of EVAL_25."""
    if seed == 1 and layers in EVAL_25:
        return "lr-%d" % layers, "%s-L%d-lr%s" % (method, layers, lr)
    return part, "%s-L%d-lr%s-s%d" % (method, layers, lr, seed)


# ---- long: the long runs (issue 30 part 6) ---------------------------------------------------
# The three best methods of parts 1-4 at 100 layers against the controls Pre-LN and DeepNorm,
# each at its best rate of lr-100 (400 steps), for 3000 steps (warmup 100, cosine to the
# config's 1e-4 over the 3000: 3.1M tokens, 3.1 passes over the training bytes), seeds 1 and 2,
# the validation loss every 100 steps; a checkpoint every 250 steps, from which a run stopped by
# the end of a session resumes.
# The three: the lowest best final loss of lr-100 besides the controls (nGPT 2.004, Mix-LN 2.248,
# DeepScaleLM 2.250; then LNS 2.273, qk-norm 2.281, DyT with weights 8 2.282). A third control,
# part 4's LLaMA-shaped Pre-LN, holds nGPT's RoPE, SwiGLU and RMSNorm: against it nGPT's lead is
# the sphere's.
LONG = ("pre", "deepnorm", "ngpt", "mixln", "dsl", "llama")
LONG_FLAGS = {"--steps": 3000, "--eval-every": 100, "--save-every": 250}
LONG_SEEDS = (1, 2)


def long_runs(part):
    """Part 6's runs, seed 1 of every method first."""
    runs = []
    for seed in LONG_SEEDS:
        for method in LONG:
            lr = best_rate(method, 100)
            if lr is None:
                print("depth_study3: %s: no lr-100 rows for %s yet" % (part, method), flush=True)
                continue
            runs.append(Run(part, "%s-L100-lr%s-s%d" % (method, lr, seed), method, lr,
                            diag={**LONG_FLAGS, "--seed": seed}, resumable=True))
    return runs


def report_long(part="long"):
    """Part 6's section: per method its rate, the final validation loss of each seed, their mean
    and spread, beside its 400-step result of part 1; per run its validation loss at six steps,
    its training loss over the last 100 and the first evaluation at or below the LLaMA-shaped
    control's final loss (same seed); the curves."""
    out = ["## Long runs\n"]
    runs = rows(part)
    if not runs:
        return out + ["Not run yet (`scripts/depth_study3.py %s`).\n" % part]
    steps = SMOKE.get("--steps", LONG_FLAGS["--steps"])
    out.append("`scripts/depth_study3.py %s`: the controls Pre-LN, DeepNorm and part 4's "
               "LLaMA-shaped Pre-LN (llama) and the methods that led at 100 layers in parts 1-4, "
               "each at its best rate of lr-100, %d steps (warmup 100, %s none; cosine to 1e-4 "
               "over the %d), seeds %s, the validation loss (8 fixed batches) every %d steps; "
               "otherwise as part 1. The 400-step column is the method's lr-100 run at the same "
               "rate (its schedule ends at step 400). Sorted by the mean.\n" % (
                   part, steps, ", ".join(m for m in LONG if METHODS[m].get("--warmup") == 0),
                   steps, " and ".join(map(str, LONG_SEEDS)), LONG_FLAGS["--eval-every"]))
    out += ["| method | rate | %s | mean | spread | 400 steps (lr-100) |"
            % " | ".join("seed %d" % s for s in LONG_SEEDS),
            "|---|---:|%s---:|---:|---:|" % ("---:|" * len(LONG_SEEDS))]
    lines, table = [], []
    for i, method in enumerate(LONG):
        mine = {int(r["name"].rsplit("-s", 1)[1]): r for r in runs
                if method_of(r["name"]) == method}
        if not mine:
            continue
        lr = next(iter(mine.values()))["lr"]
        short = [r for r in rows("lr-100") if r["name"] == "%s-L100-lr%s" % (method, lr)]
        vals = [r["val_final"] for r in mine.values() if r["label"] == "trained"]
        for seed, r in mine.items():
            lines.append(("%s seed %d" % (method, seed), COLORS[i], seed, "l",
                          val_curve(part, r["name"])))
        mean = sum(vals) / len(vals) if vals else math.inf
        table.append((mean, "| %s | %s | %s | %s | %s | %s |" % (
            method, lr, " | ".join(cell(mine.get(s)) for s in LONG_SEEDS),
            "%.3f" % mean if vals else "-",
            "%.3f" % (max(vals) - min(vals)) if len(vals) > 1 else "-",
            cell(short[0]) if short else "-")))
    out += [t for _, t in sorted(table)] + [""]
    out += report_long_runs(part, runs)
    plot_lines(os.path.join(DOCS, "long.png"), "validation loss, 100 layers, %d steps (seed 1 "
               "solid, 2 dashed)" % steps, "validation loss", lines)
    out.append("![long runs](depth-study-3/long.png)\n")
    return out


def report_long_runs(part, runs):
    """Per run: the validation loss at the evaluations nearest each sixth of the run, the mean
    training loss of the last 10 logged steps (10 apart), and the first evaluation at or below the
    final validation loss of the LLaMA-shaped control of the same seed ("-": never)."""
    control = {r["name"].rsplit("-s", 1)[1]: r["val_final"] for r in runs
               if method_of(r["name"]) == "llama" and r["val_final"] != ""}
    curves = {r["name"]: val_curve(part, r["name"]) for r in runs}
    steps = [s for s, _ in next(iter(curves.values()))]
    marks = sorted({min(steps, key=lambda s: abs(s - steps[-1] * i / 6)) for i in range(1, 7)})
    out = ["Per run, the validation loss at steps %s; the training loss over the last 100 steps "
           "(the mean of the last 10 logged); the first evaluation at or below llama's final "
           "validation loss of the same seed:\n" % ", ".join(map(str, marks)),
           "| run | %s | training loss | reaches llama's final at |" % " | ".join(map(str, marks)),
           "|---|%s---:|---:|" % ("---:|" * len(marks))]
    for r in sorted(runs, key=lambda r: (LONG.index(method_of(r["name"])), r["name"])):
        val = dict(curves[r["name"]])
        train = [float(m["loss"]) for m in read_csv(os.path.join(DOCS, part, r["name"] + ".csv"))]
        seed = r["name"].rsplit("-s", 1)[1]
        reach = first_at(curves[r["name"]], control[seed]) if seed in control else None
        out.append("| %s | %s | %.3f | %s |" % (
            r["name"], " | ".join("%.3f" % val[s] if s in val else "-" for s in marks),
            sum(train[-10:]) / len(train[-10:]), reach or "-"))
    return out + [""]


# ---- dyt-twin: why DyT and Derf stall (issue 30 part 2) ---------------------------------------
TWIN_RUN = "dyt-emb-L12-a0.5"  # the stalled run the twin follows: part 2's, at 12 layers
TWIN_PROBE_STEPS = (0, 10, 20, 30, 40, 50, 60, 100, 200, 400)
PAPER_ALPHAS = {"--dyt-alpha-attn": 0.8, "--dyt-alpha-ffn": 0.2, "--dyt-alpha-final": 0.2}
GAMMA = r".*norm\.weight"  # every DyT or Derf weight (the final norm's too)


def dyt_twin_runs(part):
    """What makes the stalled 12-layer run train, one change at a time over dyt-emb (lr 1e-3,
    alpha 0.5, emb scale sqrt(64) = 8): DyT's LLaMA setting (per-site alphas 0.8 / 0.2 / 0.2,
    no biases), alpha, the embedding scale's initial value (and the rate), DyT's weight gamma
    at init; then the change that trains at 100 layers."""
    def one(name, flags=None, edits=None, lr="1e-3", layers=12, method="dyt-emb"):
        return Run(part, "%s-L%d-%s" % (method, layers, name), {**METHODS[method],
                   **(flags or {})}, lr, layers, GRAD_DIAG, edits=edits)
    return [one("paper-alphas", PAPER_ALPHAS),
            one("nobias", {"--no-bias": True}),
            one("paper-alphas-nobias", {**PAPER_ALPHAS, "--no-bias": True}),
            one("final0.05", {"--dyt-alpha-final": 0.05}),
            one("a4", {"--dyt-alpha": 4}),
            one("a8", {"--dyt-alpha": 8})] + \
        [one("emb%d" % e, edits={"emb_scale": e}) for e in (32, 64, 128)] + \
        [one("emb64-lr%s" % lr, edits={"emb_scale": 64}, lr=lr) for lr in ("3e-4", "3e-3")] + \
        [one("emb64-paper-alphas-nobias", {**PAPER_ALPHAS, "--no-bias": True},
             {"emb_scale": 64})] + \
        [one("gamma%d" % g, edits={GAMMA: g}) for g in (2, 4, 8, 16)] + \
        [one("gamma8", edits={GAMMA: 8}, method="derf-emb"),
         one("gamma8", edits={GAMMA: 8}, layers=100),
         one("gamma8", edits={GAMMA: 8}, layers=100, method="derf-emb")]


def dyt_twin(part):
    """TWIN_RUN again, its checkpoints at TWIN_PROBE_STEPS kept (its gradients, stream and
    metrics: mt-<run>.grad.csv, .resid.csv, .metrics.csv); the saturation of its norms' inputs
    in each (scripts/torch_twin.py --probe: mt-<run>.sat.csv); and the torch twin from its
    step-0 weights (torch-<run>.csv: stream and loss, .grad.csv, .sat.csv)."""
    d, stem = os.path.join(OUT, part, "capture"), os.path.join(DOCS, part, "%s-" + TWIN_RUN)
    if os.path.exists(stem % "torch" + ".sat.csv"):
        return
    partner = [r for r in dyt_runs("dyt") if r.name == TWIN_RUN][0]
    steps = SMOKE.get("--steps", BASE["--steps"])
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    ckpts = capture(partner.flags() + ["--save-every", "10", "--diag-resid-every", "10",
                                       "--out", d], d)
    init = os.path.join(OUT, part, "init")
    if run(["./train"] + partner.flags() + ["--steps", "0", "--out", init],
           os.path.join(OUT, part, "twin-init.log")).rc != 0:
        sys.exit("depth_study3: the twin's init run failed (%s)" % init)
    ckpts[0] = os.path.join(init, "model.safetensors")
    twin = ["/usr/bin/python3", os.path.join(HERE, "torch_twin.py")]
    subprocess.run(twin + ["--probe", "dyt", stem % "mt" + ".sat.csv"] +
                   [ckpts[s] for s in TWIN_PROBE_STEPS if s in ckpts], check=True, cwd=ROOT)
    copy_columns(os.path.join(d, "diag_grad.csv"), stem % "mt" + ".grad.csv",
                 ["step", "layer", "total"])
    keep_resid(os.path.join(d, "diag_resid.csv"), stem % "mt", partner.layers)
    shutil.copy(os.path.join(d, "metrics.csv"), stem % "mt" + ".metrics.csv")
    subprocess.run(twin + [ckpts[0], str(partner.layers), "pre", partner.lr, str(steps),
                           stem % "torch" + ".csv", "--norm", "dyt", "--emb-scale",
                           "--grad", stem % "torch" + ".grad.csv",
                           "--sat", stem % "torch" + ".sat.csv.tmp"], check=True, cwd=ROOT)
    os.replace(stem % "torch" + ".sat.csv.tmp", stem % "torch" + ".sat.csv")


def capture(args, d):
    """./train args (nice 10), hard-linking each checkpoint it writes to d/ckpt-<step>
    (checkpoints are renamed into place: the link holds that step's file); {step: path}."""
    p = subprocess.Popen(["./train"] + args, stdout=open(os.path.join(d, "log.txt"), "w"),
                         stderr=subprocess.STDOUT)
    model, seen, ckpts = os.path.join(d, "model.safetensors"), None, {}
    while True:
        done = p.poll() is not None
        try:
            ino = os.stat(model).st_ino
        except FileNotFoundError:
            ino = seen
        if ino != seen:
            seen, tmp = ino, os.path.join(d, "ckpt.tmp")
            os.link(model, tmp)
            step = ckpt_step(tmp)
            ckpts[step] = os.path.join(d, "ckpt-%d.safetensors" % step)
            os.replace(tmp, ckpts[step])
        if done:
            break
        time.sleep(0.02)
    if p.returncode != 0:
        sys.exit("depth_study3: the captured run failed (%s)" % d)
    return ckpts


def run_part(part, only=None, rates=None):
    """The part's runs that have no row yet (only: of those methods; rates: at those rates), two
    at a time, each kept as it finishes."""
    H = byte_entropy()
    runs = [r for r in PARTS[part]["runs"](part) if not r.done()
            and (not only or method_of(r.name) in only) and (not rates or r.lr in rates)]
    os.makedirs(os.path.join(DOCS, part), exist_ok=True)
    print("depth_study3: %s: %d runs to go" % (part, len(runs)), flush=True)
    with cf.ThreadPoolExecutor(int(os.environ.get("JOBS", "2"))) as ex:
        extra = PARTS[part].get("extra")
        extra_done = ex.submit(extra, part) if extra else None
        for f in cf.as_completed([ex.submit(r.execute) for r in runs]):
            row = f.result().keep(H)
            print("depth_study3: %s %s %s %ss" % (part, row["name"], row["label"],
                                                 row["seconds"]), flush=True)
        if extra_done:
            extra_done.result()


# ---- muon: Muon at depth (issue 31) -----------------------------------------------------------
# Self-contained: its own runs (BASE's flags with Muon's), skipped when their row exists.
# For a table of parts: {"runs": lambda part: [], "report": report_muon, "extra": muon_part}.

MUON_PLACEMENTS = ("post", "pre", "deepnorm")  # configs/deep100-{post,pre,deepnorm}.ini
# The blocks' matrices' rate, in the order the runs go (0.1 last: Pre-LN's best was 0.05, then
# the top of the grid); the other tensors stay AdamW at the config's 1e-3 (Muon's AdamW group:
# embeddings, the untied head, the norms). AdamW itself is the second round's rate sweep on the
# same configs, steps and seed (docs/depth-study-2/lr-100.csv, 3e-4 to 1e-2; seed 2 at the best
# rate in lr-seed2.csv), not run again.
MUON_RATES = ("2e-2", "1e-2", "5e-3", "5e-2", "1e-1")
MUON_SEEDS = ("1", "2")  # every rate with seed 1 first; seed 2 only for the rates in --seed2
ADAMW_RUNS = [os.path.join(ROOT, "docs/depth-study-2", f) for f in ("lr-100.csv", "lr-seed2.csv")]


def muon_part(part="muon", seed2=()):
    """Muon on the 100-layer Post-LN, Pre-LN and DeepNorm configs: BASE's 400 steps (100 warmup,
    cosine to 1e-4, clip 1, batch 16 x 64), each run's curve into docs/depth-study-3/muon/<run>.csv
    and its summary into <run>.row.json (written last: its presence skips the run). nice -n 10,
    one thread, two at a time (JOBS). seed2: the rates also run with seed 2."""
    H, d = byte_entropy(), os.path.join(DOCS, part)
    os.makedirs(d, exist_ok=True)
    todo = [(pl, lr, seed) for seed in MUON_SEEDS for lr in MUON_RATES for pl in MUON_PLACEMENTS
            if seed == "1" or lr in seed2]

    def one(pl, lr, seed):
        name = "%s-muon-lr%s-s%s" % (pl, lr, seed)
        if os.path.exists(os.path.join(d, name + ".row.json")):
            return
        out = os.path.join(OUT, part, name)
        shutil.rmtree(out, ignore_errors=True)
        opts = {**BASE, **SMOKE, "--placement": pl, "--seed": seed, "--diag-resid-every": 0,
                "--optim": "muon", "--muon-lr": lr, "--adam-lr": "1e-3"}
        cmd = ["nice", "-n", "10", "./train"] + [str(x) for kv in opts.items() for x in kv]
        res = run(cmd + ["--out", out], os.path.join(out, "log.txt"))
        metrics = read_metrics(os.path.join(out, "metrics.csv"))
        with open(os.path.join(d, name + ".csv"), "w") as f:
            f.write("step,loss,val_loss\n")
            for r in metrics:
                f.write("%d,%s,%s\n" % (r.step, fmt(r.loss), fmt(r.val_loss)))
        vals = {r.step: r.val_loss for r in evals(metrics)}
        row = {"name": name, "placement": pl, "lr": lr, "seed": seed,
               "label": label(res.rc, metrics, H, open(res.log).read()),
               "val_final": vals[max(vals)] if vals else "", "seconds": "%.0f" % res.wall}
        with open(os.path.join(d, name + ".row.json"), "w") as f:
            json.dump(row, f)
        print("depth_study3: muon %s %s %s" % (name, row["label"], row["val_final"]), flush=True)

    with cf.ThreadPoolExecutor(int(os.environ.get("JOBS", "2"))) as ex:
        for f in [ex.submit(one, *t) for t in todo]:
            f.result()


def report_muon(part="muon"):
    """The section: per placement AdamW's final validation loss at each rate of the second
    round's sweep and Muon's at each of its rates (seed 1; seed 2 in brackets where run), and the
    first evaluation at which each Muon run reached AdamW's best final loss."""
    runs = rows(part)
    out = ["## Muon at depth\n"]
    if not runs:
        return out + ["Not run yet (`scripts/depth_study3.py muon`).\n"]
    adamw = [r for f in ADAMW_RUNS if os.path.exists(f) for r in read_csv(f)
             if r["variant"].startswith("L100 lr")]
    out.append("`scripts/depth_study3.py muon`: the 100-layer configs (64-128-2, LayerNorm, "
               "untied head), 400 steps of 16 x 64 bytes, 100 warmup steps then cosine to a "
               "tenth, clip 1, seed 1 (2 in brackets). Muon (KellerJordan/Muon: momentum 0.95, "
               "Nesterov, 5 Newton-Schulz steps, scale sqrt(max(1, rows / cols)), decay 0.1) on "
               "the blocks' matrices at the rate shown, AdamW (0.9, 0.99, decay 0.1) on the rest "
               "at 1e-3; AdamW on everything is the second round's sweep on the same configs "
               "(docs/depth-study-2/lr-100.csv, lr-seed2.csv). Final validation loss; *reached* "
               "is the first evaluation (every 50 steps) at or below AdamW's best:\n")
    out.append("| placement | optimizer | rate | final | label | reached AdamW's best at |")
    out.append("|---|---|---:|---:|---|---:|")
    for pl in MUON_PLACEMENTS:
        mine = [r for r in adamw if r["placement"] == pl]
        s1 = [r for r in mine if "seed" not in r["variant"]]
        ok = [float(r["val_final"]) for r in s1 if r["label"] == "trained"]
        best = min(ok) if ok else None
        for r in s1:
            lr = r["variant"].split()[-1]
            s2 = [x["val_final"] for x in mine if x["variant"] == r["variant"] + " seed 2"]
            out.append("| %s | AdamW | %s | %.3f%s | %s | |" % (
                pl, lr, float(r["val_final"]), " (%.3f)" % float(s2[0]) if s2 else "",
                r["label"]))
        for lr in MUON_RATES:
            rs = {r["seed"]: r for r in runs if r["placement"] == pl and r["lr"] == lr}
            if "1" not in rs:
                continue
            r = rs["1"]
            curve = read_csv(os.path.join(DOCS, part, r["name"] + ".csv"))
            hit = [int(c["step"]) for c in curve if best and c["val_loss"] and
                   float(c["val_loss"]) <= best * (1 + 1e-5)]  # %.6g in the CSV
            s2 = " (%.3f)" % rs["2"]["val_final"] if "2" in rs and rs["2"]["val_final"] else ""
            final = "%.3f" % r["val_final"] if r["val_final"] != "" else "-"
            out.append("| %s | Muon | %s | %s%s | %s | %s |" % (
                pl, lr, final, s2, r["label"], hit[0] if hit else "-"))
    return out + [""]

# ---- report ----------------------------------------------------------------------------------

def rows(part):
    d = os.path.join(DOCS, part)
    if not os.path.isdir(d):
        return []
    return [json.load(open(os.path.join(d, f))) for f in sorted(os.listdir(d))
            if f.endswith(".row.json")]


def resid_at(part, name, layer):
    """{step: norm} of the stream entering block layer."""
    path = os.path.join(DOCS, part, name + ".resid.csv")
    if not os.path.exists(path):
        return {}
    return {int(r["step"]): float(r["norm"]) for r in read_csv(path) if int(r["layer"]) == layer}


COLORS = PALETTE
LABELS = {"fail": "failed", "diverged": "div", "stalled": "stall"}


def method_of(name):
    """The METHODS key of a run named <method>-L<layers>...."""
    return name.rsplit("-L", 1)[0]


def loss_or_l0(r):
    """Wortsman et al.'s min(final loss, initial loss): a diverged run counts as l_0."""
    v = num(r["val_final"])
    return LOSS0 if r["label"] == "diverged" or not math.isfinite(v) else min(v, LOSS0)


def cell(r):
    """A run's final validation loss, its label when it did not train."""
    if r is None:
        return "-"
    if r["label"] in ("diverged", "failed"):
        return r["label"]
    return "%.3f" % r["val_final"] + (" (stalled)" if r["label"] == "stalled" else "")


def sensitivity(mine):
    """mean over the grid of min(final, l_0) minus the best: None until every rate has run."""
    if len(mine) < len(RATES):
        return None
    losses = [loss_or_l0(mine[lr]) for lr in RATES]
    return sum(losses) / len(losses) - min(losses)


def report_lr(part):
    runs = rows(part)
    depth = 12 if part == "lr-12" else 100
    out = ["## Learning-rate sensitivity at %d layers\n" % depth]
    if not runs:
        return out + ["Not run yet (`scripts/depth_study3.py %s`).\n" % part]
    grid = {}
    for r in runs:
        grid.setdefault(method_of(r["name"]), {})[r["lr"]] = r
    methods = [m for m in METHODS if m in grid]
    out.append("`scripts/depth_study3.py %s`: 64-128-2, %d layers, LayerNorm unless the method "
               "replaces it, untied head, 400 steps of 16 x 64 bytes, AdamW (0.9, 0.99, decay "
               "0.1), clip 1, 100 warmup steps then cosine to 1e-4, seed 1 (one draw per "
               "cell). Each method's flags over configs/deep100-pre.ini are in the last "
               "table. Final validation loss (8 fixed batches); LR sensitivity is Wortsman et "
               "al.'s: the mean over the six rates of min(final loss, l_0) minus the best, "
               "l_0 = ln 256 = %.3f the loss at init, a diverged run counting as l_0:\n"
               % (part, depth, LOSS0))
    head = "| method | " + " | ".join(RATES) + " |"
    rule = "|---|" + "---:|" * len(RATES)
    out += [head + " best rate | LR sensitivity |", rule + "---:|---:|"]
    for m in methods:
        mine = grid[m]
        best = min(mine.values(), key=loss_or_l0)
        sens = sensitivity(mine)
        flat = "" if any(r["label"] == "trained" for r in mine.values()) else " (none trained)"
        out.append("| %s | %s | %s | %s |" % (m, " | ".join(cell(mine.get(lr)) for lr in RATES),
                                             best["lr"],
                                             "-" if sens is None else "%.3f%s" % (sens, flat)))
    out.append("\nThe largest attention logit (diag_attn.csv: the largest q.k / sqrt(head size) "
               "of any layer on the 4-row probe batch, every 10 steps), its peak over the run:\n")
    out += [head, rule] + ["| %s | %s |" % (m, " | ".join(
        "%.1f" % num(grid[m][lr]["attn_peak"]) if lr in grid[m] else "-" for lr in RATES))
        for m in methods]
    out.append("\nThe output logits' log Z (diag_logz.csv: log of the softmax's normaliser, the "
               "mean over the probe batch's tokens) at the end of the run; ln 256 = 5.55 at "
               "init, z-loss pulls it towards 0:\n")
    out += [head, rule] + ["| %s | %s |" % (m, " | ".join(
        "%.2f" % num(grid[m][lr]["logz_end"]) if lr in grid[m] else "-" for lr in RATES))
        for m in methods]
    out.append("\n| method | flags over configs/deep100-pre.ini |\n|---|---|")
    out += ["| %s | `%s` |" % (m, " ".join(mtflags(METHODS[m])) or "(none)") for m in methods]
    png = "%s.png" % part
    plot_vs_rate(os.path.join(DOCS, png), "final validation loss against the peak rate, "
                 "%d layers (diverged: ln 256)" % depth,
                 [(m, [(float(lr), loss_or_l0(grid[m][lr])) for lr in RATES if lr in grid[m]])
                  for m in methods], xrange="2e-4:1.5e-1")
    out.append("\n![%s](depth-study-3/%s)\n" % (part, png))
    png = "%s-attn.png" % part
    top = RATES[-1]
    lines = [(m, COLORS[i % len(COLORS)], 1 + i // len(COLORS), "l",
              step_values(part, "%s-L%d-lr%s" % (m, depth, top), "attn", "max"))
             for i, m in enumerate(methods) if top in grid[m]]
    plot_lines(os.path.join(DOCS, png), "the largest attention logit at lr %s, %d layers"
               % (top, depth), "logit", lines, extra="set logscale y\nset format y '%g'")
    if any(pts for *_, pts in lines):  # none until a method has run at the top rate
        out.append("![%s attention](depth-study-3/%s)\n" % (part, png))
    return out


def step_values(part, name, what, column):
    """[(step, value)] of docs/<part>/<name>.<what>.csv's column."""
    return [(int(r["step"]), num(r[column]))
            for r in read_csv(os.path.join(DOCS, part, "%s.%s.csv" % (name, what)))]


def block_values(part, name, what, column, step=None):
    """[(block, value)] of a per-block file (skip: block, grad: layer) at step (None: the
    last); the whole-model rows (block or layer -1) left out."""
    rs = read_csv(os.path.join(DOCS, part, "%s.%s.csv" % (name, what)))
    key = "block" if what == "skip" else "layer"
    if not rs:
        return []
    step = max(int(r["step"]) for r in rs) if step is None else step
    return [(int(r[key]), num(r[column])) for r in rs
            if int(r["step"]) == step and int(r[key]) >= 0]


def plot_blocks(png, title, ylabel, lines, extra=""):
    """Values against the block: lines are (title, color, dash, points)."""
    tmp = png + ".d"
    os.makedirs(tmp, exist_ok=True)
    plots = []
    for i, (t, color, dash, pts) in enumerate(lines):
        if not pts:
            continue
        f = os.path.join(tmp, "%d" % i)
        write_dat(f, pts)
        plots.append("'%s' w l lc rgb '%s' dt %d lw 2 title '%s'" % (f, color, dash, t))
    if plots:
        gnuplot(header(png, title, "block", ylabel, extra + "\nset key outside right top",
                       size="1000,480") + "plot " + ", \\\n  ".join(plots) + "\n", png)
    shutil.rmtree(tmp)


def grad_summary(part, name, step):
    """(block 0's, the middle block's, the last block's gradient norm, the first over the last,
    max/min over the blocks)."""
    g = dict(block_values(part, name, "grad", "total", step))
    if not g:
        return None
    L = max(g) + 1
    vals = [v for v in g.values() if v > 0] or [0.0]  # all 0: no gradient reaches the blocks
    ratio = lambda x, y: x / y if y > 0 else math.inf  # noqa: E731
    return g[0], g[L // 2], g[L - 1], ratio(g[0], g[L - 1]), ratio(max(vals), min(vals))


def grad_row(part, r, step):
    s = grad_summary(part, r["name"], step)
    if s is None:
        return "| %s | %d | - | - | - | - | - |" % (r["name"], step)
    return "| %s | %d | %.3g | %.3g | %.3g | %.2f | %.1f |" % ((r["name"], step) + s)


def val_curve(part, name):
    """[(step, validation loss)] of a kept run's curve."""
    return [(int(r["step"]), float(r["val_loss"]))
            for r in read_csv(os.path.join(DOCS, part, name + ".csv")) if r["val_loss"]]


def first_at(curve, target):
    """The first evaluated step whose validation loss is at or below target (the CSV keeps 6
    digits), None if none is."""
    return next((s for s, v in curve if v <= target * (1 + 1e-6)), None)


def spread(xs):
    """mean (min-max) of a list, or its one value."""
    if len(xs) == 1:
        return "%.0f" % xs[0]
    return "%.0f (%.0f-%.0f)" % (sum(xs) / len(xs), min(xs), max(xs))


def kept_run(part, method, layers, seed):
    """(part, row) of part 4's kept run of method at that depth and seed, at its best rate;
    (None, None) if there is none yet."""
    lr = best_rate(method, layers)
    if lr is None:
        return None, None
    p, name = steps_source(part, method, layers, lr, seed)
    row = os.path.join(DOCS, p, name + ".row.json")
    return (p, json.load(open(row))) if os.path.exists(row) else (None, None)


def report_steps(part="ngpt-steps"):
    """Part 4's section: per depth, seed and control (Pre-LN, and the LLaMA-shaped Pre-LN with
    nGPT's positions and activation), the control's final validation loss and the first
    evaluation at which nGPT (same depth, same seed) reached it; mean and range over seeds."""
    out = ["## nGPT's step claim\n"]
    if not rows(part):
        return out + ["Not run yet (`scripts/depth_study3.py %s`).\n" % part]
    # the fewest rates behind a best rate, over the methods that have any
    ran = {d: min(filter(None, (len(lr_rows(m, d)) for m in STEPS_METHODS)), default=0)
           for d in (12, 100)}
    out.append("`scripts/depth_study3.py %s`: nGPT (part 1's `ngpt` entry) against two controls, "
               "Pre-LN and `llama` (Pre-LN with RMSNorm, RoPE, SwiGLU and no biases: what nGPT "
               "brings besides the sphere), at 12 and 100 layers, each at its best rate of part 1 "
               "(lr-12, lr-100: chosen from at least %d and %d of the %d rates), seeds %s, 400 "
               "steps, the validation loss (8 fixed batches) every %d steps, otherwise as part 1 "
               "(seed 1 at 100 layers is part 1's run, evaluated as often). *Reached* is the "
               "first evaluation at which nGPT's validation loss is at or below the control's "
               "final one of the same seed; the paper (Loshchilov et al. 2024, arXiv 2410.01131) "
               "reports 4-20x fewer steps, 400 / reached is that factor here:\n"
               % (part, ran[12], ran[100], len(RATES), " and ".join(map(str, STEPS_SEEDS)),
                  STEPS_EVAL))
    out += ["| layers | seed | control | its rate | its final | nGPT rate | nGPT final | reached "
            "| 400 / reached |", "|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    lines, summary, steps = [], [], SMOKE.get("--steps", BASE["--steps"])
    for i, layers in enumerate((12, 100)):
        reached = {c: [] for c in STEPS_CONTROLS}
        for seed in STEPS_SEEDS:
            pick = {m: kept_run(part, m, layers, seed) for m in STEPS_METHODS}
            for j, (m, (p, r)) in enumerate(pick.items()):
                if r:
                    lines.append(("%s L%d seed %d" % (m, layers, seed),
                                  COLORS[len(STEPS_METHODS) * i + j], seed, "l",
                                  val_curve(p, r["name"])))
            ng_part, ng = pick["ngpt"]
            for c in STEPS_CONTROLS:
                ctl = pick[c][1]
                if not (ctl and ng):
                    continue
                hit = first_at(val_curve(ng_part, ng["name"]), ctl["val_final"])
                if hit:
                    reached[c].append(hit)
                out.append("| %d | %d | %s | %s | %s | %s | %s | %s | %s |" % (
                    layers, seed, c, ctl["lr"], cell(ctl), ng["lr"], cell(ng),
                    hit or "not by %d" % steps, "%.1f" % (steps / hit) if hit else "-"))
        summary += ["%d layers: nGPT reached %s's final loss at step %s (%s)" % (
            layers, c, spread(hit), "%d seeds: mean, range" % len(hit) if len(hit) > 1 else
            "one seed") for c, hit in reached.items() if hit]
    out += ["", "; ".join(summary) + ".\n" if summary else ""]
    plot_lines(os.path.join(DOCS, "ngpt-steps.png"), "validation loss, nGPT and its controls at "
               "their best rates (seed 1 solid, 2 dashed)", "validation loss", lines,
               extra="set yrange [1.9:3.4]")
    out.append("![steps](depth-study-3/ngpt-steps.png)\n")
    return out


def report_curse():
    part = "curse"
    out = ["## The curse of depth: what each block adds at 100 layers\n"]
    runs = rows(part)
    if not runs:
        return out + ["Not run yet (`scripts/depth_study3.py curse`).\n"]
    out.append("`scripts/depth_study3.py curse`: 100 layers, lr 1e-3, otherwise as above. After "
               "training, the block-skip probe (diag_skip.csv) evaluates the 4-row probe "
               "batch with each block left out in turn (its input passed on unchanged); a "
               "block's *skip cost* is that loss minus the whole model's. Mean skip cost over "
               "each quarter of the blocks, and the blocks whose skip cost is below 0.01 "
               "nats:\n")
    out += ["| run | final val | probe loss | 1st quarter | 2nd | 3rd | 4th | below 0.01 | "
            "label |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in runs:
        d = block_values(part, r["name"], "skip", "delta")
        whole = [num(x["loss"]) for x in read_csv(os.path.join(DOCS, part, r["name"] +
                 ".skip.csv")) if int(x["block"]) == -1]
        L = len(d)
        q = [[v for b, v in d if k * L // 4 <= b < (k + 1) * L // 4] for k in range(4)]
        out.append("| %s | %s | %s | %s | %d | %s |" % (
            r["name"], cell(r), "%.3f" % whole[-1] if whole else "-",
            " | ".join("%.4f" % (sum(x) / len(x)) if x else "-" for x in q),
            sum(1 for _, v in d if v < 0.01), r["label"]))
    out.append("\nPer-block gradient norms (diag_grad.csv: each block's parameters' gradient "
               "norm on the step's batch) at init and at the end; max/min is the spread over "
               "the 100 blocks (Mix-LN's claim: more uniform across depth):\n")
    out += ["| run | step | first block | middle block | last block | first/last | max/min |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        out += [grad_row(part, r, 0), grad_row(part, r, last_grad_step(part, r["name"]))]
    plot_blocks(os.path.join(DOCS, "curse.png"), "loss increase when one block is skipped, "
                "after 400 steps, 100 layers", "skip cost (nats)",
                [(r["name"], COLORS[i], 1, block_values(part, r["name"], "skip", "delta"))
                 for i, r in enumerate(runs)], extra="set logscale y")
    lines = []
    for i, r in enumerate(runs):
        lines.append((r["name"] + " init", COLORS[i], 2,
                      block_values(part, r["name"], "grad", "total", 0)))
        lines.append((r["name"] + " end", COLORS[i], 1,
                      block_values(part, r["name"], "grad", "total")))
    plot_blocks(os.path.join(DOCS, "curse-grad.png"), "per-block gradient norm at init "
                "(dashed) and after 400 steps (solid)", "gradient norm", lines,
                extra="set logscale y")
    out.append("\n![skip](depth-study-3/curse.png)\n\n![grad](depth-study-3/curse-grad.png)\n")
    plot_heatmaps(os.path.join(DOCS, "curse-grad-heat.png"), "per-block gradient norm over "
                  "training, 100 layers (diag_grad.csv)", "gradient norm",
                  [(r["name"], block_rows(part, r["name"], "grad", "total")) for r in runs])
    out.append("The same gradient norms block by step, every step measured (a column each):\n\n"
               "![grad heatmaps](depth-study-3/curse-grad-heat.png)\n")
    return out


def block_rows(part, name, kind, column):
    """(step, block, value) of a run's kept per-block CSV, the blocks alone (no row -1)."""
    key = "layer" if kind != "skip" else "block"
    return [(int(x["step"]), int(x[key]), num(x[column]))
            for x in read_csv(os.path.join(DOCS, part, "%s.%s.csv" % (name, kind)))
            if int(x[key]) >= 0]


def last_grad_step(part, name):
    rs = read_csv(os.path.join(DOCS, part, name + ".grad.csv"))
    return max((int(r["step"]) for r in rs), default=0)


def report_dyt():
    part = "dyt"
    out = ["## DyT and Derf at depth\n"]
    runs = {r["name"]: r for r in rows(part)}
    if not runs:
        return out + ["Not run yet (`scripts/depth_study3.py dyt`).\n"]
    pre100 = {r["name"]: r for r in rows("curse")}.get("pre-L100-lr1e-3")
    pre12 = {r["name"]: r for r in rows("lr-12")}.get("pre-L12-lr1e-3")
    out.append("`scripts/depth_study3.py dyt`: lr 1e-3, otherwise as above; DyT "
               "`w tanh(alpha x) + b` and Derf `w erf(alpha x + s) + b` in place of every "
               "LayerNorm of Pre-LN, with `--emb-scale` (the papers' language-model setting, "
               "part 1's dyt-emb and derf-emb), alpha's initial value `--dyt-alpha` (the "
               "papers' 0.5 by default). Final validation loss against alpha's initial value, "
               "depth and width (LayerNorm: Pre-LN's run of part 3, of part 1 and "
               "`pre-L12-w128`):\n")
    cols = [("DyT 12 x 64", "dyt-emb-L12-a%s"), ("Derf 12 x 64", "derf-emb-L12-a%s"),
            ("DyT 12 x 128", "dyt-emb-L12-w128-a%s"), ("DyT 100 x 64", "dyt-emb-L100-a%s"),
            ("Derf 100 x 64", "derf-emb-L100-a%s")]
    out += ["| alpha | " + " | ".join(c for c, _ in cols) + " |",
            "|---:|" + "---:|" * len(cols)]
    for a in DYT_ALPHAS:
        out.append("| %s | %s |" % (a, " | ".join(cell(runs.get(n % a)) for _, n in cols)))
    ln = [pre12, None, runs.get("pre-L12-w128"), pre100, pre100]
    out.append("| LayerNorm | %s |" % " | ".join(cell(r) for r in ln))
    out.append("\nPer-block gradient norms at init and at the end (the \"subcritical\" critique, "
               "Alekseev 2026, arXiv 2604.11890: with LayerNorm replaced by tanh-like "
               "functions the gradient's amplification from the last block back to the first "
               "grows faster with depth than Pre-LN's power law). first/last, the first block's "
               "gradient norm over the last's, is that amplification as the gradients show "
               "it:\n")
    out += ["| run | step | first block | middle block | last block | first/last | max/min |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    big = [r for r in [("curse", pre100)] + [(part, runs.get(n)) for n in
           ("dyt-emb-L100-a0.2", "dyt-emb-L100-a0.5", "dyt-emb-L100-a1",
            "derf-emb-L100-a0.5")] if r[1]]
    for p, r in big:
        out += [grad_row(p, r, 0), grad_row(p, r, last_grad_step(p, r["name"]))]
    lines = []
    for i, (p, r) in enumerate(big):
        lines.append((r["name"] + " init", COLORS[i], 2, block_values(p, r["name"], "grad",
                                                                      "total", 0)))
        lines.append((r["name"] + " end", COLORS[i], 1, block_values(p, r["name"], "grad",
                                                                     "total")))
    plot_blocks(os.path.join(DOCS, "dyt-grad.png"), "per-block gradient norm at init (dashed) "
                "and after 400 steps (solid), 100 layers", "gradient norm", lines,
                extra="set logscale y")
    out.append("\n![grad](depth-study-3/dyt-grad.png)\n")
    return out


def report_dyt_twin():
    part = "dyt-twin"
    out = ["## Why DyT and Derf stall: a torch twin and what makes them train\n"]
    stem = os.path.join(DOCS, part, "%s-" + TWIN_RUN)
    if not os.path.exists(stem % "torch" + ".sat.csv"):
        return out + ["Not run yet (`scripts/depth_study3.py dyt-twin`).\n"]
    out.append("`scripts/depth_study3.py dyt-twin`: part 2's `%s` (12 layers, DyT alpha 0.5, "
               "`--emb-scale`, lr 1e-3) again with its checkpoints kept, and its PyTorch twin "
               "(scripts/torch_twin.py: tests/parity/torch_gpt.py's model in float32 written from "
               "`w tanh(alpha x) + b`, from mt's step-0 weights, the same AdamW, groups, clipping "
               "and schedule, its own batches). Training loss, the gradient norm of the first and "
               "last block's parameters, and the final norm's input on the probe batch: mean "
               "|u| = |alpha x|, the fraction of its elements where 1 - tanh(u)^2 is 0 in "
               "float32, and the input split into the part the tokens share (shared: the norm "
               "of its mean over the probe batch's tokens) and the rest (spread: the mean norm "
               "of each token's difference from that mean):\n" % TWIN_RUN)
    loss = {"mt": {r.step: r.loss for r in read_metrics(stem % "mt" + ".metrics.csv")},
            "torch": {int(r["step"]): r["loss"] for r in read_csv(stem % "torch" + ".csv")}}
    grad = {w: {(int(r["step"]), int(r["layer"])): num(r["total"])
                for r in read_csv(stem % w + ".grad.csv")} for w in ("mt", "torch")}
    sat = {w: {(int(r["step"]), r["site"]): r for r in read_csv(stem % w + ".sat.csv")}
           for w in ("mt", "torch")}
    L = max(layer for _, layer in grad["mt"]) + 1
    out += ["| step | loss mt | torch | block 0 grad mt | torch | block %d grad mt | torch | "
            "final norm mean abs(u) mt | torch | saturated mt | torch | shared mt | spread mt |"
            % (L - 1), "|---:|" + "---:|" * 12]
    g = lambda w, s, b: "%.2g" % grad[w][(s, b)] if (s, b) in grad[w] else "-"  # noqa: E731
    u = lambda w, s, k: ("%.3g" % num(sat[w][(s, "final_norm")][k])  # noqa: E731
                         if (s, "final_norm") in sat[w] else "-")
    for s in TWIN_PROBE_STEPS:
        lm, lt = loss["mt"].get(s), loss["torch"].get(s)
        out.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            s, "%.3f" % lm if lm else "-", "%.3f" % float(lt) if lt else "-",
            g("mt", s, 0), g("torch", s, 0), g("mt", s, L - 1), g("torch", s, L - 1),
            u("mt", s, "mean_abs_u"), u("torch", s, "mean_abs_u"),
            u("mt", s, "frac_saturated"), u("torch", s, "frac_saturated"),
            u("mt", s, "shared"), u("mt", s, "spread")))
    out.append("\nmt's norms, site by site (max |u|, the fraction saturated):\n")
    sites = ["blocks.0.attn_norm", "blocks.%d.attn_norm" % (L // 2),
             "blocks.%d.ffn_norm" % (L - 1), "final_norm"]
    out += ["| step | " + " | ".join(sites) + " |", "|---:|" + "---:|" * len(sites)]
    for s in TWIN_PROBE_STEPS:
        cells = ["%.3g, %.3g" % (num(sat["mt"][(s, x)]["max_abs_u"]),
                                 num(sat["mt"][(s, x)]["frac_saturated"]))
                 if (s, x) in sat["mt"] else "-" for x in sites]
        out.append("| %d | %s |" % (s, " | ".join(cells)))
    out.append("\nOne change at a time over `%s` (edits: initial values set in the step-0 "
               "checkpoint; gamma: every DyT or Derf weight, the final norm's too), lr 1e-3 "
               "unless named, one seed:\n" % TWIN_RUN)
    out += ["| run | flags | edits | lr | final val | block 0 grad at 100 | label |",
            "|---|---|---|---:|---:|---:|---|"]
    order = [r.name for r in dyt_twin_runs(part)]
    for r in sorted(rows(part), key=lambda r: order.index(r["name"])):
        flags = {k: v for k, v in r["flags"].items() if k not in ("--norm", "--emb-scale")}
        g100 = dict(block_values(part, r["name"], "grad", "total", 100)).get(0)
        out.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            r["name"], " ".join("%s %s" % (k, "" if v is True else v) for k, v in
                                flags.items()) or "-",
            ", ".join("%s = %g" % kv for kv in r.get("edits", {}).items()) or "-", r["lr"],
            cell(r), "%.2g" % g100 if g100 is not None else "-", r["label"]))
    return out


def report_peri():
    part, out = "peri", []
    runs = rows(part)
    if not runs:
        return ["## Peri-LN, settled\n", "Not run yet (`scripts/depth_study3.py peri`).\n"]
    steps = [0, 10, 50, 100, 400]
    out.append("## Peri-LN, settled\n")
    out.append("`scripts/depth_study3.py peri`: 64-128-2, LayerNorm, untied head, 400 steps of "
               "16 x 64 bytes, AdamW (0.9, 0.99, decay 0.1), clip 1, 100 warmup steps then "
               "cosine to 1e-4, seed 1. The residual stream entering the last block (mean over "
               "the probe batch's tokens of ||x||, diag_resid.csv) and the final validation "
               "loss; gain is the output norms' initial weight:\n")
    out.append("| run | layers | lr | gain | " + " | ".join("step %d" % s for s in steps) +
               " | final val | label |")
    out.append("|---|---:|---:|---:|" + "---:|" * len(steps) + "---:|---|")
    for r in runs:
        res = resid_at(part, r["name"], r["layers"] - 1)
        out.append("| %s | %d | %s | %g | %s | %s | %s |" % (
            r["name"], r["layers"], r["lr"], r["gain"],
            " | ".join("%.1f" % res[s] if s in res else "-" for s in steps),
            "%.3f" % r["val_final"] if r["val_final"] != "" else "-", r["label"]))
    out += report_twin(part)
    out.append("\n![resid](depth-study-3/peri.png)\n")
    plot_peri(part, runs)
    return out


def report_twin(part):
    path = os.path.join(DOCS, part, "torch-peri-L100-lr1e-3.resid.csv")
    if not os.path.exists(path):
        return []
    L = max((r["layers"] for r in rows(part) if r["name"] == "peri-L100-lr1e-3"), default=100)
    torch_rows = {int(r["step"]): (float(r["norm"]), r["loss"]) for r in read_csv(path)
                  if int(r["layer"]) == L - 1}
    out = ["\nThe PyTorch twin (scripts/torch_twin.py: tests/parity/torch_gpt.py's model in "
           "float32, the same step-0 weights as mt's run, AdamW, clipping and schedule as "
           "above, its own random batches) against mt, the stream entering block %d:\n" % (L - 1),
           "| step | mt | torch | torch loss |", "|---:|---:|---:|---:|"]
    mt = resid_at(part, "peri-L100-lr1e-3", L - 1)
    for s in sorted(torch_rows):
        out.append("| %d | %s | %.1f | %s |" % (s, "%.1f" % mt[s] if s in mt else "-",
                                                 torch_rows[s][0], torch_rows[s][1] or "-"))
    return out


def plot_peri(part, runs):
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#000000"]
    lines = []
    for i, r in enumerate(runs):
        res = resid_at(part, r["name"], r["layers"] - 1)
        lines.append((r["name"], colors[i % len(colors)], 1, "l", sorted(res.items())))
    path = os.path.join(DOCS, part, "torch-peri-L100-lr1e-3.resid.csv")
    if os.path.exists(path):
        L = runs[0]["layers"] if runs else 100
        pts = [(int(r["step"]), float(r["norm"])) for r in read_csv(path)
               if int(r["layer"]) == L - 1]
        lines.append(("torch twin, peri-L100-lr1e-3", "#000000", 2, "lp", pts))
    plot_lines(os.path.join(DOCS, "peri.png"), "the residual stream entering the last block",
               "mean token norm", lines, extra="set logscale y")


def report():
    text = ["# Depth study, third round\n",
            "Generated by `scripts/depth_study3.py report` from the small files each run kept "
            "in [depth-study-3/](depth-study-3/) (CPU: %s); each part's command is given with "
            "its section. The runs went two at a time, one thread each, at nice 10, on a 2-core "
            "machine shared with other work (load 14-19): the losses do not depend on the load, "
            "the seconds in the kept rows do. A part stopped by the end of a session resumes "
            "where it stopped (a run whose row is kept is not run again). The hand-written "
            "reading, with the table of the papers' claims, follows the generated sections "
            "(docs/depth-study-3.notes.md). The second round is "
            "[depth-study-2.md](depth-study-2.md).\n" % cpu_model()]
    for part in PARTS.values():
        text += part["report"]()
    with open(PAGE, "w") as f:
        f.write(with_notes(PAGE, "\n".join(text) + "\n"))
    print("depth_study3: wrote", PAGE)


# The parts in the page's order: runs(part) lists the runs, report() the page's section, extra
# (if any) runs beside them.
PARTS = {
    "lr-12": {"runs": lambda part: lr_runs(part, 12), "report": lambda: report_lr("lr-12")},
    "lr-100": {"runs": lambda part: lr_runs(part, 100), "report": lambda: report_lr("lr-100")},
    "dyt": {"runs": dyt_runs, "report": report_dyt},
    "dyt-twin": {"runs": dyt_twin_runs, "report": report_dyt_twin, "extra": dyt_twin},
    "curse": {"runs": curse_runs, "report": report_curse},
    "peri": {"runs": peri_runs, "report": report_peri,
             "extra": lambda part: twin(part, peri_runs(part)[0])},
    "ngpt-steps": {"runs": steps_runs, "report": report_steps},
    "long": {"runs": long_runs, "report": report_long},
    "muon": {"runs": lambda part: [], "report": report_muon},  # run by muon_part (--seed2)
}


def main():
    global OUT, DOCS, PAGE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("part", choices=list(PARTS) + ["report"])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--smoke-dir", default="/tmp/mt-depth-study-3-smoke",
                    help="--smoke's directory (its out/, docs/ and docs.md)")
    ap.add_argument("--only", metavar="M,M", help="only the runs of these methods (the names' "
                    "part before -L<layers>: lns,mixln), to run what matters first")
    ap.add_argument("--rates", metavar="R,R", help="only the runs at these rates (3e-3,1e-2)")
    ap.add_argument("--seed2", default="", help="muon: the rates also run with seed 2 (2e-2,...)")
    a = ap.parse_args()
    os.chdir(ROOT)
    if a.smoke:
        SMOKE.update({"--n-layer": 3, "--steps": 20, "--eval-every": 10, "--warmup": 5})
        OUT, DOCS = os.path.join(a.smoke_dir, "out"), os.path.join(a.smoke_dir, "docs")
        PAGE = DOCS + ".md"
    if a.part == "report":
        report()
    elif a.part == "muon":
        muon_part(seed2=a.seed2.split(","))
    else:
        os.nice(max(0, 10 - os.nice(0)))  # nice 10: the runs share the machine
        run_part(a.part, a.only.split(",") if a.only else None,
                 a.rates.split(",") if a.rates else None)


if __name__ == "__main__":
    main()
