#!/usr/bin/env python3
"""The depth study, fourth round (the 2025-26 methods' claims): each part runs alone and keeps
what it measured as small files in docs/depth-study-4/<part>/, each run's as it finishes; a run
whose <name>.row.json is there is done and not run again, so a part stopped by the end of a
session resumes in the next. `report` writes docs/depth-study-4.md from those files alone.
Byte-level tiny Shakespeare, DeepNet's 64-128-2 size (configs/deep100-pre.ini), untied head,
400 steps, seed 1 (where a part says no other).

  scripts/depth_study4.py hc         mHC's claim (arXiv 2512.24880): the composite residual
                                     mixing of hyper-connections amplifies the signal as depth
                                     grows, mHC's doubly stochastic one does not; Pre-LN, HC and
                                     mHC (4 streams, dynamic) at 12 and 48 layers, two rates,
                                     with diag_hc.csv (12 runs, ~12 min on 2 idle cores)
  scripts/depth_study4.py completep  CompleteP's claim (arXiv 2505.01618): the best learning rate
                                     transfers across depth; Pre-LN, DeepNorm and completep
                                     (alpha 1, base depth 6) at 6, 12, 25 and 50 layers, 4 rates
                                     (48 runs, ~15 min idle)
  scripts/depth_study4.py completep-100    the same at 100 layers (12 runs, ~20 min idle)
  scripts/depth_study4.py completep-muon   the 6-50 layer grid under Muon, controls (32 runs, ~17 min)
  scripts/depth_study4.py completep-seed2  the 6-50 layer AdamW grid, seed 2 (48 runs, ~15 min)
  scripts/depth_study4.py gate       gated attention's claim (arXiv 2505.06708): the gate removes
                                     the attention sink and the massive activations and takes
                                     higher rates; softmax, both gates, a learned sink and
                                     softpick at 12 layers, 4 rates, with diag_sink.csv,
                                     diag_attn.csv and diag_act.csv (20 runs, ~7 min idle)
  scripts/depth_study4.py qkclip     QK-Clip's claim (arXiv 2507.20534): Muon lets the attention
                                     logits grow, QK-Clip caps them without hurting the loss;
                                     Muon at 12 layers, 3 rates, plain, with tau 30 and with
                                     QK-norm (9 runs)
  scripts/depth_study4.py hc-100     Pre-LN, DeepNorm, HC and mHC at 100 layers (4 runs, ~20 min
                                     idle)
  scripts/depth_study4.py value      ResFormer's value residual, half and learned, against Pre-LN
                                     at 12 and 100 layers (6 runs, ~8 min idle)
  scripts/depth_study4.py report     docs/depth-study-4.md from the parts on disk
  --only hc,mhc                      only those methods' runs (the rest stay to go)
  --smoke                            the part at 6 layers and 20 steps into /tmp (a check of the
                                     driver, not a result); --smoke-dir DIR: into DIR

A part is an entry of PARTS (its runs, its section of the page). Runs go to
out/depth-study-4/<part>/<run>/ (./train's own files); two run at once (JOBS=1: one), one
thread each, at nice 10. Python 3 standard library and gnuplot; runs ./train as built by make.
"""
import argparse
import concurrent.futures as cf
import json
import math
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from mtrun import (PALETTE, ROOT, byte_entropy, copy_columns, cpu_model, evals,  # noqa: E402
                   label, num, plot_heatmaps, plot_lines, plot_vs_rate, read_csv, read_metrics,
                   run, with_notes, write_curve)
from mtrun import flags as mtflags  # noqa: E402

DOCS = os.path.join(ROOT, "docs/depth-study-4")
OUT = os.path.join(ROOT, "out/depth-study-4")
PAGE = os.path.join(ROOT, "docs/depth-study-4.md")
BASE = {"--config": "configs/deep100-pre.ini", "--steps": 400, "--eval-every": 50,
        "--eval-batches": 8, "--save-every": 0, "--log-every": 10, "--threads": 1,
        "--replicas": 1, "--seed": 1, "--diag-grad-every": 0, "--diag-update-steps": 0,
        "--diag-resid-every": 0}
SMOKE = {}  # --smoke: a few layers and steps
COLORS = PALETTE

class Run:
    """One ./train run of a part: method's flags over BASE at a rate and a depth, with the
    diagnostics diag; keep() writes its files under docs/depth-study-4/<part>/."""

    def __init__(self, part, method, flags, lr, layers, diag=None):
        self.part, self.method, self.lr = part, method, lr
        self.layers = SMOKE.get("--n-layer", layers)
        self.name = "%s-L%d-lr%s" % (method, layers, lr)
        self.method_flags, self.diag = flags, diag or {}
        self.dir = os.path.join(OUT, part, self.name)
        self.stem = os.path.join(DOCS, part, self.name)

    def flags(self):
        return mtflags({**BASE, **self.diag, **self.method_flags, **SMOKE, "--lr": self.lr,
                        "--n-layer": self.layers})

    def done(self):
        return os.path.exists(self.stem + ".row.json")

    def execute(self):
        shutil.rmtree(self.dir, ignore_errors=True)
        res = run(["./train"] + self.flags() + ["--out", self.dir],
                  os.path.join(self.dir, "log.txt"))
        self.rc, self.seconds = res.rc, res.wall
        return self

    def keep(self, H):
        """The curves and the diagnostics' summaries into <stem>.*.csv; the summary row
        (<stem>.row.json, written last: its presence marks the run done)."""
        os.makedirs(os.path.dirname(self.stem), exist_ok=True)
        metrics = read_metrics(os.path.join(self.dir, "metrics.csv"))
        write_curve(self.stem + ".csv", metrics)
        src = lambda f: os.path.join(self.dir, f)  # noqa: E731
        if os.path.exists(src("diag_hc.csv")):
            copy_columns(src("diag_hc.csv"), self.stem + ".hc.csv",
                         ["step", "layer", "composite_gain", "composite_grad_gain"])
        for what, cols in (("sink", ("sink_rate", "entropy")), ("attn", ("self",)),
                           ("act", ("max_abs", "kurtosis"))):
            if os.path.exists(src("diag_%s.csv" % what)):
                per_step(src("diag_%s.csv" % what), "%s.%s.csv" % (self.stem, what), cols)
        vals = {r.step: r.val_loss for r in evals(metrics)}
        log = open(os.path.join(self.dir, "log.txt")).read()
        row = {"name": self.name, "part": self.part, "method": self.method,
               "flags": self.method_flags, "lr": self.lr, "layers": self.layers,
               "label": label(self.rc, metrics, H, log),
               "val_final": vals[max(vals)] if vals else "", "seconds": "%.0f" % self.seconds,
               "qk_clipped": sum(num(r.get("qk_clipped")) for r in read_csv(src("metrics.csv"))
                                 if math.isfinite(num(r.get("qk_clipped"))))}
        with open(self.stem + ".row.json", "w") as f:
            json.dump(row, f)
        return row


def per_step(src, dst, cols):
    """A per-block diagnostic over the blocks at each step: the max and the mean of each column,
    into dst as step,<col>_max,<col>_mean,..."""
    by = {}
    for r in read_csv(src):
        by.setdefault(int(r["step"]), []).append(r)
    with open(dst, "w") as f:
        f.write("step," + ",".join("%s_max,%s_mean" % (c, c) for c in cols) + "\n")
        for s in sorted(by):
            vals = []
            for c in cols:
                xs = [num(r[c]) for r in by[s] if math.isfinite(num(r[c]))]
                vals += [max(xs), sum(xs) / len(xs)] if xs else [math.nan, math.nan]
            f.write("%d,%s\n" % (s, ",".join("%.6g" % v for v in vals)))


# ---- the parts' runs ---------------------------------------------------------------------------

HC_METHODS = {"pre": {}, "hc": {"--residual": "hc"}, "mhc": {"--residual": "mhc"}}
HC_DEPTHS, HC_RATES = (12, 48), ("1e-3", "3e-3")


def hc_runs(part):
    diag = lambda m: {"--diag-hc-every": 20} if m != "pre" else {}  # noqa: E731
    return [Run(part, m, f, lr, L, diag(m)) for L in HC_DEPTHS for lr in HC_RATES
            for m, f in HC_METHODS.items()]


# CompleteP with the paper's alpha = 1 against the base depth 6 (docs/layers.md's table); the
# standard parameterisation's Pre-LN and DeepNorm at the same rates. Its grids: AdamW at 6-50
# layers (completep), at 100 (completep-100), Muon's (completep-muon: the matrices' rate; AdamW
# at 3e-3 for the rest; the controls alone, as ./train refuses CompleteP's AdamW rules under
# Muon) and the AdamW grid again with seed 2 (completep-seed2).
CP_METHODS = {"sp": {}, "deepnorm": {"--placement": "deepnorm"},
              "completep": {"--param": "completep", "--base-depth": 6}}
CP_DEPTHS, CP_RATES = (6, 12, 25, 50), ("1e-3", "3e-3", "1e-2", "3e-2")
MUON = {"--optim": "muon", "--adam-lr": "3e-3"}
CP_GRIDS = {"completep": ("AdamW", {}, CP_RATES, CP_DEPTHS, CP_METHODS),
            "completep-100": ("AdamW", {}, CP_RATES, (100,), CP_METHODS),
            "completep-muon": ("Muon", MUON, ("1e-2", "2e-2", "5e-2", "1e-1"), CP_DEPTHS,
                               ("sp", "deepnorm")),
            "completep-seed2": ("AdamW", {"--seed": 2}, CP_RATES, CP_DEPTHS, CP_METHODS)}


def cp_runs(part):
    _, extra, rates, depths, methods = CP_GRIDS[part]
    return [Run(part, m, {**CP_METHODS[m], **extra}, lr, L) for L in depths for m in methods
            for lr in rates]


GATE_METHODS = {"softmax": {}, "gate-elem": {"--attn-gate": "elementwise"},
                "gate-head": {"--attn-gate": "headwise"}, "sink": {"--attn-sink": True},
                "softpick": {"--softmax": "softpick"}}
GATE_RATES = ("3e-3", "1e-2", "3e-2", "1e-1")
GATE_DIAG = {"--diag-sink-every": 50, "--diag-attn-every": 50, "--diag-act-every": 50}


def gate_runs(part):
    return [Run(part, m, f, lr, 12, GATE_DIAG) for m, f in GATE_METHODS.items()
            for lr in GATE_RATES]


QK_TAU = 30
QK_METHODS = {"muon": MUON, "muon-clip": {**MUON, "--qk-clip": QK_TAU},
              "muon-qknorm": {**MUON, "--qk-norm": "rms", "--qk-norm-affine": True}}
QK_RATES = ("5e-2", "1e-1", "2e-1")  # above Muon's best 100-layer rate of round 3 (0.05)


def qk_runs(part):
    return [Run(part, m, f, lr, 12, {"--diag-attn-every": 10}) for m, f in QK_METHODS.items()
            for lr in QK_RATES]


HC100 = {"pre": {}, "deepnorm": {"--placement": "deepnorm"}, "hc": {"--residual": "hc"},
         "mhc": {"--residual": "mhc"}}


def hc100_runs(part):
    diag = lambda m: {"--diag-hc-every": 20} if "hc" in m else {}  # noqa: E731
    return [Run(part, m, f, "1e-3", 100, diag(m)) for m, f in HC100.items()]


VALUE_METHODS = {"pre": {}, "value-half": {"--value-residual": "half"},
                 "value-learned": {"--value-residual": "learned"}}


def value_runs(part):
    return [Run(part, m, f, "1e-3", L) for L in (12, 100) for m, f in VALUE_METHODS.items()]


def run_part(part, only=None):
    """The part's runs that have no row yet (only: of those methods), two at a time, each kept as
    it finishes."""
    H = byte_entropy()
    runs = [r for r in PARTS[part]["runs"](part) if not r.done()
            and (not only or r.method in only)]
    os.makedirs(os.path.join(DOCS, part), exist_ok=True)
    print("depth_study4: %s: %d runs to go" % (part, len(runs)), flush=True)
    with cf.ThreadPoolExecutor(int(os.environ.get("JOBS", "2"))) as ex:
        for f in cf.as_completed([ex.submit(r.execute) for r in runs]):
            row = f.result().keep(H)
            print("depth_study4: %s %s %s %ss" % (part, row["name"], row["label"],
                                                 row["seconds"]), flush=True)


# ---- the page ----------------------------------------------------------------------------------

def rows(part):
    """{name: row} of the part's kept runs."""
    d = os.path.join(DOCS, part)
    if not os.path.isdir(d):
        return {}
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".row.json"):
            with open(os.path.join(d, f)) as fh:
                r = json.load(fh)
            out[r["name"]] = r
    return out


def kept(part, name, what):
    return read_csv(os.path.join(DOCS, part, "%s.%s.csv" % (name, what)))


def val_cell(r):
    if r is None:
        return "–"
    if r["label"] != "trained":
        return r["label"] + (" (%.3f)" % r["val_final"] if r["val_final"] != "" else "")
    return "%.3f" % r["val_final"]


def best(rs):
    """The trained run of the lowest final validation loss among rs (None where none)."""
    ok = [r for r in rs if r and r["label"] == "trained"]
    return min(ok, key=lambda r: r["val_final"]) if ok else None


def rel(png):
    return os.path.relpath(png, os.path.dirname(PAGE))


def report_hc(part="hc"):
    R = rows(part)
    out = ["## Hyper-connections and mHC: the composite mixing's gain", "",
           "mHC (Xie et al., arXiv 2512.24880) reports that plain hyper-connections' composite "
           "residual mapping reaches an Amax gain of about 3000 in a 27B model while mHC's stays "
           "near 1. Here: 4 streams (dynamic), Pre-LN inside, `--diag-hc-every 20`; the gain is "
           "`composite_gain` of block 0 (the product of every sublayer's `H_res`, the max over "
           "the probe batch's tokens; docs/training.md). `gain peak`: its max over the steps "
           "and blocks. Time: one thread's wall clock for the 400 steps.", "",
           "| method | layers | lr | final val | gain at block 0, end | gain peak | "
           "gradient gain peak | s |", "|---|---|---|---|---|---|---|---|"]
    curves, heat = [], []
    for L in HC_DEPTHS:
        for lr in HC_RATES:
            for m in HC_METHODS:
                name = "%s-L%d-lr%s" % (m, L, lr)
                r = R.get(name)
                if r is None:
                    continue
                hc = kept(part, name, "hc")
                g0 = [(int(x["step"]), num(x["composite_gain"])) for x in hc
                      if x["layer"] == "0"]
                peak = max((num(x["composite_gain"]) for x in hc), default=math.nan)
                gpeak = max((num(x["composite_grad_gain"]) for x in hc), default=math.nan)
                out.append("| %s | %d | %s | %s | %s | %s | %s | %s |" % (
                    m, L, lr, val_cell(r), "%.4g" % g0[-1][1] if g0 else "–",
                    "%.4g" % peak if hc else "–", "%.4g" % gpeak if hc else "–", r["seconds"]))
                if g0:
                    curves.append(("%s L%d lr %s" % (m, L, lr), COLORS[len(curves) % 10], 1,
                                   "lp", g0))
                if hc and L == max(HC_DEPTHS) and lr == HC_RATES[-1]:
                    heat.append((m, [(int(x["step"]), int(x["layer"]), num(x["composite_gain"]))
                                     for x in hc]))
    png = os.path.join(DOCS, "hc-gain.png")
    plot_lines(png, "composite Amax gain from block 0 to the end", "gain", curves,
               "set logscale y")
    heat_png = os.path.join(DOCS, "hc-gain-heat.png")
    plot_heatmaps(heat_png, "composite gain from each block to the end (%d layers, lr %s)"
                  % (max(HC_DEPTHS), HC_RATES[-1]), "gain", heat)
    out += ["", "![composite gain](%s)" % rel(png), ""]
    if heat:
        out += ["![composite gain by block](%s)" % rel(heat_png), ""]
    return "\n".join(out)


def report_cp(part="completep"):
    """The CompleteP grids (CP_GRIDS) as a table and a plot per optimizer: a cell holds each
    seed's final validation loss (seed 1 / seed 2), bold the row's best by their mean."""
    out = ["## CompleteP: does the best rate transfer across depth?", "",
           "CompleteP (Dey et al., arXiv 2505.01618) scales each residual branch by "
           "`(L0 / L)^alpha` with alpha = 1 and the hidden rate, weight decay and AdamW eps as "
           "its table says (docs/layers.md), so that the rate tuned at the base depth L0 stays "
           "the best one at depth L. Here L0 = %d; the final validation loss at each rate, "
           "`a / b` for seeds 1 and 2 where both ran (bold: the row's best by the mean; a seed "
           "that did not train rules its rate out); Pre-LN (sp) and DeepNorm in the standard "
           "parameterisation as controls. Under Muon the rate is the matrices' (AdamW at 3e-3 "
           "for the rest), and the controls run alone: CompleteP's per-tensor rules are "
           "AdamW's, and ./train refuses them with Muon."
           % CP_METHODS["completep"]["--base-depth"], ""]
    for opt in ("AdamW", "Muon"):
        grids = [g for g, spec in CP_GRIDS.items() if spec[0] == opt]
        rates = CP_GRIDS[grids[0]][2]
        depths = sorted({L for g in grids for L in CP_GRIDS[g][3]})
        kept_rows = [rows(g) for g in grids]
        table = ["| param | layers | " + " | ".join(rates) + " | best rate |",
                 "|---|---|" + "---|" * (len(rates) + 1)]
        lines = []
        for m in CP_METHODS:
            for L in depths:
                seeds = [[R[n] for R in kept_rows if n in R]
                         for n in ("%s-L%d-lr%s" % (m, L, lr) for lr in rates)]
                if not any(seeds):
                    continue
                means = [sum(r["val_final"] for r in rs) / len(rs)
                         if rs and all(r["label"] == "trained" for r in rs) else None
                         for rs in seeds]
                ok = [i for i, v in enumerate(means) if v is not None]
                b = min(ok, key=lambda i: means[i]) if ok else None
                cells = [" / ".join(val_cell(r) for r in rs) or "–" for rs in seeds]
                cells = ["**%s**" % c if i == b else c for i, c in enumerate(cells)]
                table.append("| %s | %d | %s | %s |" % (m, L, " | ".join(cells),
                                                        rates[b] if b is not None else "–"))
                lines.append(("%s L%d" % (m, L), [(float(rates[i]), means[i]) for i in ok]))
        if len(table) == 2:
            continue
        png = os.path.join(DOCS, "completep-rates.png" if opt == "AdamW"
                           else "completep-%s-rates.png" % opt.lower())
        if os.path.exists(png):
            os.remove(png)  # no plot where no run trained: no stale one either
        plot_vs_rate(png, "final validation loss against the rate, sp and CompleteP, %s" % opt,
                     lines)
        out += ["### %s" % opt, ""] + table + [""]
        out += ["![rates](%s)" % rel(png), ""] if os.path.exists(png) else []
    return "\n".join(out)


def last(rows_, col):
    return num(rows_[-1][col]) if rows_ else math.nan


def report_gate(part="gate"):
    R = rows(part)
    out = ["## Gated attention, sinks and softpick: the attention sink", "",
           "Gated attention (Qiu et al., arXiv 2505.06708) reports that a query-dependent "
           "sigmoid gate on the attention output removes the attention sink (the first token's "
           "weight) and the massive activations and tolerates higher rates. 12 layers; at the "
           "end: `sink rate` the mean over the blocks of diag_sink.csv's share of queries with "
           "more than 0.3 of their weight on the first token, `max logit` the largest attention "
           "logit over the blocks, `max |x|` and `kurtosis` of the residual stream (the max and "
           "the mean over the blocks).", "",
           "| method | lr | final val | sink rate | entropy | max logit | max abs x | kurtosis |",
           "|---|---|---|---|---|---|---|---|"]
    lines = []
    for m in GATE_METHODS:
        pts = []
        for lr in GATE_RATES:
            name = "%s-L12-lr%s" % (m, lr)
            r = R.get(name)
            if r is None:
                continue
            s, a, x = kept(part, name, "sink"), kept(part, name, "attn"), kept(part, name, "act")
            out.append("| %s | %s | %s | %.3f | %.3f | %.4g | %.4g | %.4g |" % (
                m, lr, val_cell(r), last(s, "sink_rate_mean"), last(s, "entropy_mean"),
                last(a, "self_max"), last(x, "max_abs_max"), last(x, "kurtosis_mean")))
            if r["label"] == "trained":
                pts.append((float(lr), r["val_final"]))
        lines.append((m, pts))
    png = os.path.join(DOCS, "gate-rates.png")
    plot_vs_rate(png, "final validation loss against the rate, 12 layers", lines)
    return "\n".join(out + ["", "![rates](%s)" % rel(png), ""])


def report_qk(part="qkclip"):
    R = rows(part)
    out = ["## QK-Clip under Muon: the attention logits", "",
           "Kimi K2 (arXiv 2507.20534) reports that Muon lets the attention logits grow and "
           "that QK-Clip (tau %d here) caps them without hurting the loss. 12 layers, Muon on "
           "the hidden matrices at the rate given (AdamW 3e-3 on the rest). `max logit`: the "
           "largest attention logit over the blocks on the probe batch, its peak over the steps "
           "and at the end; `heads clipped`: the (step, head) pairs QK-Clip scaled, summed over "
           "the steps logged (metrics.csv's qk_clipped, every 10th step); `muon-qknorm` the "
           "QK-norm control (RMSNorm with a gain on each head's q and k)." % QK_TAU, "",
           "| method | muon lr | final val | max logit peak | at the end | heads clipped |",
           "|---|---|---|---|---|---|"]
    curves = []
    for lr in QK_RATES:
        for m in QK_METHODS:
            name = "%s-L12-lr%s" % (m, lr)
            r = R.get(name)
            if r is None:
                continue
            a = kept(part, name, "attn")
            peak = max((num(x["self_max"]) for x in a), default=math.nan)
            out.append("| %s | %s | %s | %.4g | %.4g | %s |" % (
                m, lr, val_cell(r), peak, last(a, "self_max"),
                "%d" % r.get("qk_clipped", 0) if "clip" in m else "–"))
            curves.append(("%s lr %s" % (m, lr), COLORS[len(curves) % 10],
                           1 if m == "muon" else 2, "l",
                           [(int(x["step"]), num(x["self_max"])) for x in a]))
    png = os.path.join(DOCS, "qkclip-logits.png")
    plot_lines(png, "largest attention logit, Muon without and with QK-Clip", "logit", curves)
    return "\n".join(out + ["", "![logits](%s)" % rel(png), ""])


def report_simple(part, title, intro, runs, gains=False):
    """A table of the runs' final losses (gains: and the composite gain at block 0)."""
    R = rows(part)
    gain_col = " composite gain at block 0, end |" if gains else ""
    out = ["## " + title, "", intro, "", "| method | layers | lr | final val |%s s |" % gain_col,
           "|---|---|---|---|%s---|" % ("---|" if gains else "")]
    for run_ in runs:
        r = R.get(run_.name)
        if r is None:
            continue
        g0 = [x for x in kept(part, run_.name, "hc") if x["layer"] == "0"]
        gain = (" %s |" % ("%.4g" % num(g0[-1]["composite_gain"]) if g0 else "–")) if gains else ""
        out.append("| %s | %d | %s | %s |%s %s |" % (r["method"], r["layers"], r["lr"],
                                                    val_cell(r), gain, r["seconds"]))
    return "\n".join(out + [""])


def report_hc100(part="hc-100"):
    return report_simple(part, "Hyper-connections at 100 layers",
                         "The signal-gain question at 100 layers, with Pre-LN and DeepNorm as "
                         "controls, lr 1e-3.", hc100_runs(part), gains=True)


def report_value(part="value"):
    return report_simple(part, "Value residuals at depth",
                         "ResFormer (Zhou et al., arXiv 2410.17897): every block's values mixed "
                         "with the first block's, fixed halves or learned lambdas, against "
                         "Pre-LN at 12 and 100 layers, lr 1e-3.", value_runs(part))


def report():
    text = ["# Depth study, round 4: the 2025-26 methods", "",
            "Generated by `scripts/depth_study4.py report` from the files in "
            "docs/depth-study-4/ (each part: `scripts/depth_study4.py <part>`). Byte-level tiny "
            "Shakespeare, configs/deep100-pre.ini's 64-128-2 model at the depths given, 400 "
            "steps, one seed; runs on %s, one thread each, two at a time. A cell says "
            "`diverged` or `stalled` (the loss of the byte frequencies) where the run did." %
            cpu_model(), ""]
    text += [s for s in (part["report"]() for part in PARTS.values()) if s]
    with open(PAGE, "w") as f:
        f.write(with_notes(PAGE, "\n".join(text) + "\n"))
    print("depth_study4: wrote", PAGE)


PARTS = {
    "hc": {"runs": hc_runs, "report": report_hc},
    "completep": {"runs": cp_runs, "report": report_cp},
    "completep-100": {"runs": cp_runs, "report": lambda: ""},  # in completep's section
    "completep-muon": {"runs": cp_runs, "report": lambda: ""},
    "completep-seed2": {"runs": cp_runs, "report": lambda: ""},
    "gate": {"runs": gate_runs, "report": report_gate},
    "qkclip": {"runs": qk_runs, "report": report_qk},
    "hc-100": {"runs": hc100_runs, "report": report_hc100},
    "value": {"runs": value_runs, "report": report_value},
}


def main():
    global OUT, DOCS, PAGE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("part", choices=list(PARTS) + ["report"])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--smoke-dir", default="/tmp/mt-depth-study-4-smoke",
                    help="--smoke's directory (its out/, docs/ and docs.md)")
    ap.add_argument("--only", metavar="M,M", help="only the runs of these methods (hc,mhc)")
    a = ap.parse_args()
    os.chdir(ROOT)
    if a.smoke:
        SMOKE.update({"--n-layer": 6, "--steps": 20, "--eval-every": 10, "--warmup": 5})
        OUT, DOCS = os.path.join(a.smoke_dir, "out"), os.path.join(a.smoke_dir, "docs")
        PAGE = DOCS + ".md"
    if a.part == "report":
        report()
    else:
        os.nice(max(0, 10 - os.nice(0)))  # nice 10: the runs share the machine
        run_part(a.part, a.only.split(",") if a.only else None)


if __name__ == "__main__":
    main()
