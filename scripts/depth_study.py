#!/usr/bin/env python3
"""The depth study (make depth-study): trains GPTs of growing depth with the norm after the
residual (Post-LN), inside it (Pre-LN) and DeepNorm, on byte-level tiny Shakespeare, with the
diagnostics of ./train --diag-*, then plots with gnuplot and writes docs/depth-study.md. Every
number in the document comes from this run.

  scripts/depth_study.py            the full sweep: {post, pre, deepnorm} x {6, 25, 50, 100} layers
                                    with LayerNorm, the 100-layer trio with RMSNorm, two seeds at 100,
                                    Post-LN with Xavier init, Pre-LN and DeepNorm with a constant lr
  scripts/depth_study.py --quick    the 100-layer LayerNorm trio, 400 steps (~6 minutes on 2 idle cores),
                                    to docs/depth-study-quick.md (the full sweep's document stays)
  scripts/depth_study.py --thousand 1000-layer DeepNorm, Pre-LN and Post-LN (separate: slow)
  scripts/depth_study.py --self-test  the divergence and stall labelling on synthetic metrics
  scripts/depth_study.py [--quick|--thousand] --report   the document again from the runs on disk
  scripts/depth_study.py [--quick|--thousand] --notes    its hand-written part again from its .notes.md

A run that ends with a non-finite loss (./train exits 1) is labelled diverged, one whose final
validation loss is at or above the unigram entropy of the validation split minus 0.1 nats is
labelled stalled; neither stops the sweep. Python 3 standard library and gnuplot; runs ./train
as built by make all.
"""
import argparse
import concurrent.futures as cf
import json
import math
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mtrun import (STALL_MARGIN, RunDir, byte_entropy, evals, final_val, gnuplot,  # noqa: E402
                   header, label, parse_metrics, run, with_notes, write_dat)

PLACEMENTS = ["post", "pre", "deepnorm"]
NAMES = {"post": "Post-LN", "pre": "Pre-LN", "deepnorm": "DeepNorm"}
COLORS = {"post": "#d62728", "pre": "#1f77b4", "deepnorm": "#2ca02c"}


def self_test():
    H = 3.0
    rows = lambda *v: parse_metrics(["step,loss,val_loss"] +
                                    ["%d,%g,%g" % (i, x, x) for i, x in enumerate(v, 1)])
    cases = [
        (0, rows(5, 4, 2.5, 2.0), "", "trained"),
        (0, rows(5, 3.5, 3.0, 2.95), "", "stalled"),        # 2.95 >= 3.0 - 0.1
        (0, rows(5, 3.5, 3.0, 2.89), "", "trained"),        # just below the line
        (1, rows(5, 4), "train: step 3: the loss is nan and the gradient norm inf", "diverged"),
        (0, rows(5, float("nan"), 4, 3), "", "diverged"),
        (1, [], "train: data/x: cannot open", "failed"),
        (0, parse_metrics(["step,loss,val_loss", "1,4,"]), "", "failed"),  # no validation row
    ]
    bad = 0
    for rc, m, log, want in cases:
        got = label(rc, m, H, log)
        if got != want:
            print("FAIL label(rc=%d, %s): %s, expected %s" % (rc, m, got, want))
            bad += 1
    for m, want in ((rows(5, 3.5, 3.0, 2.5), 4), (rows(5, 3.5, 2.95), None)):
        got = plateau_exit(val_points(m), H)
        if got != want:
            print("FAIL plateau_exit(%s): %s, expected %s" % (m, got, want))
            bad += 1
    print("depth_study self-test: %s" % ("ok" if not bad else "%d failed" % bad))
    return 1 if bad else 0


def val_points(metrics):
    """(step, validation loss) of the evaluations."""
    return [(r.step, r.val_loss) for r in evals(metrics)]


def warmup(steps):
    """The configs' 100 steps, shortened for short runs (a quarter of them at most)."""
    return min(100, steps // 4)


# ---- runs ------------------------------------------------------------------------------------

class Run:
    def __init__(self, placement, depth, norm, seed, steps, width=64, ff=128, init=None,
                 schedule=None):
        self.placement, self.depth, self.norm, self.seed, self.steps = placement, depth, norm, seed, steps
        self.width, self.ff, self.init, self.schedule = width, ff, init, schedule
        self.batch, self.ctx, self.extra = 16, 64, []
        self.name = "%s-%s-L%d-s%d" % (norm, placement, depth, seed)
        if width != 64:
            self.name += "-w%d" % width
        self.sweep = not init and not schedule  # a point of the placements x depths grid
        # a control run: another init than the placement's own (init = auto)
        self.title, self.color = NAMES[placement], COLORS[placement]
        if init:
            self.name += "-" + init
            self.title += " (%s init)" % init
            self.color = "#ff7f0e"
        # an ablation: another learning-rate schedule after the warmup than the configs' cosine
        if schedule:
            self.name += "-" + schedule
            self.title += " (%s lr)" % schedule
            self.extra += ["--schedule", schedule, "--min-lr="]  # the configs' min-lr: cosine's; none here

    def command(self, root, diag_update):
        return [os.path.join(root, "train"), "--config", "configs/deep100-%s.ini" % self.placement,
                "--out", os.path.join(root, self.name), "--n-layer", str(self.depth),
                "--n-embd", str(self.width), "--n-ff", str(self.ff), "--norm", self.norm,
                "--seed", str(self.seed), "--steps", str(self.steps), "--threads", "1",
                "--warmup", str(warmup(self.steps)), "--diag-update-steps", str(diag_update)] + \
            (["--init", self.init] if self.init else []) + self.extra + \
            ["--untie=false"]  # the first round's tied head (the configs untie it since)

    def execute(self, root, diag_update):
        d = os.path.join(root, self.name)
        shutil.rmtree(d, ignore_errors=True)  # ./train refuses a directory holding another run
        res = run(self.command(root, diag_update), os.path.join(d, "log.txt"), env=None)
        with open(os.path.join(d, "result.json"), "w") as f:
            json.dump({"rc": res.rc, "seconds": res.wall, "cpu": res.cpu}, f)
        self.load(root)
        return self

    def load(self, root):
        d = os.path.join(root, self.name)
        self.log = open(os.path.join(d, "log.txt")).read()
        res = json.load(open(os.path.join(d, "result.json")))
        self.rc, self.seconds, self.cpu = res["rc"], res["seconds"], res.get("cpu", math.nan)
        out = RunDir(d)
        self.metrics, self.grad, self.update = out.metrics, out.grad, out.update
        self.resid = out.resid

    def val(self):
        return val_points(self.metrics)

    def final_val(self):
        return final_val(self.metrics)

    def final_train(self):
        """Mean training loss of the last 5 logged rows (one batch is noisy)."""
        t = [r.loss for r in self.metrics][-5:]
        return sum(t) / len(t) if t else math.nan


def CONTROL(steps):
    """Post-LN with DeepNet's baseline init (Xavier, gain 1) instead of GPT-2's small one."""
    return Run("post", 100, "ln", 1, steps, init="xavier")


def run_all(runs, root, jobs, diag_update):
    order = sorted(runs, key=lambda r: -r.depth * r.steps * r.width)
    with cf.ThreadPoolExecutor(jobs) as ex:
        futs = [ex.submit(r.execute, root, diag_update) for r in order]
        for f in cf.as_completed(futs):
            r = f.result()
            print("  %-28s %4.0f s  exit %d" % (r.name, r.seconds, r.rc), flush=True)


# ---- plots -----------------------------------------------------------------------------------

def plot_loss(runs, png, tmp, H, title):
    plots = []
    for r in runs:
        tr = [(m.step, m.loss) for m in r.metrics]
        if not tr:
            continue
        a, b = os.path.join(tmp, r.name + ".train"), os.path.join(tmp, r.name + ".val")
        write_dat(a, tr)
        write_dat(b, r.val())
        c = r.color
        lab = "%s seed %d" % (r.title, r.seed)
        dash = "dt 1" if r.seed == 1 else "dt 2"
        plots.append("'%s' w l lc rgb '%s' lw 1 %s title '%s train'" % (a, c, dash, lab))
        if r.val():
            plots.append("'%s' w lp lc rgb '%s' lw 2 pt 7 ps 0.6 %s title '%s val (%s)'"
                         % (b, c, dash, lab, r.label))
    plots.append("%.6f w l lc rgb 'black' dt 3 lw 2 title 'unigram entropy %.3f'" % (H, H))
    gnuplot(header(png, title, "step", "loss (nats per byte)", "set yrange [1:6]") +
            "plot " + ", \\\n  ".join(plots) + "\n", png)


def plot_depth(runs, png, tmp, H):
    plots = []
    for p in PLACEMENTS:
        pts = {}
        for r in runs:
            if r.placement == p and r.norm == "ln" and r.sweep:
                v = r.final_val()
                pts.setdefault(r.depth, []).append(v if math.isfinite(v) else 6.0)
        if not pts:
            continue
        f = os.path.join(tmp, "depth-" + p)
        write_dat(f, [(d, sum(v) / len(v)) for d, v in sorted(pts.items())])
        plots.append("'%s' w lp lc rgb '%s' lw 2 pt 7 title '%s'" % (f, COLORS[p], NAMES[p]))
    plots.append("%.6f w l lc rgb 'black' dt 3 lw 2 title 'unigram entropy'" % H)
    gnuplot(header(png, "Final validation loss against depth (LayerNorm; diverged runs drawn at 6)",
                   "layers", "validation loss (nats per byte)",
                   "set logscale x\nset xtics (6, 25, 50, 100, 1000)\nset yrange [1:6.2]") +
            "plot " + ", \\\n  ".join(plots) + "\n", png)


def plot_per_run(runs, png, tmp, rows_of, suffix, title, xlabel, ylabel):
    """One line per run, (x, y) from rows_of(run), log y; nothing when no run has rows."""
    plots = []
    for r in runs:
        rows = rows_of(r)
        if not rows:
            continue
        f = os.path.join(tmp, r.name + suffix)
        write_dat(f, rows)
        plots.append("'%s' w l lc rgb '%s' lw 2 title '%s'" % (f, r.color, r.title))
    if plots:
        gnuplot(header(png, title, xlabel, ylabel, "set logscale y") +
                "plot " + ", \\\n  ".join(plots) + "\n", png)


def plot_grad_init(runs, png, tmp):
    plot_per_run(runs, png, tmp, lambda r: [(g.layer, g.total) for g in r.grad
                                            if g.step == 0 and g.layer >= 0],
                 ".grad0", "Gradient norm of each block at init (%d layers, before any update)"
                 % runs[0].depth, "block (0: next to the embedding)",
                 "||grad|| of the block's parameters")


def plot_update(runs, png, tmp):
    plot_per_run(runs, png, tmp, lambda r: [(u.step, u.update) for u in r.update if u.step > 0],
                 ".upd", "Model update ||F(x,θ_t) - F(x,θ_0)|| / sqrt(d) on a fixed held-out batch "
                 "(%d layers)" % runs[0].depth, "step", "update (RMS per channel)")


def update_at(r, step):
    for u in r.update:
        if u.step == step:
            return u.update
    return math.nan


def plot_update_depth(runs, png, tmp, step):
    plots = []
    for p in PLACEMENTS:
        pts = sorted((r.depth, update_at(r, step)) for r in runs
                     if r.placement == p and r.norm == "ln" and r.seed == 1 and r.sweep)
        pts = [x for x in pts if math.isfinite(x[1])]
        if not pts:
            continue
        f = os.path.join(tmp, "upd-depth-" + p)
        write_dat(f, pts)
        plots.append("'%s' w lp lc rgb '%s' lw 2 pt 7 title '%s'" % (f, COLORS[p], NAMES[p]))
    if plots:
        gnuplot(header(png, "Model update at step %d against depth (LayerNorm)" % step, "layers",
                       "update (RMS per channel)", "set logscale x\nset logscale y\nset xtics (6, 25, 50, 100)") +
                "plot " + ", \\\n  ".join(plots) + "\n", png)


def plot_resid(runs, png, tmp):
    plots = []
    for r in runs:
        steps = sorted({x.step for x in r.resid})
        for s, dash in ((steps[0], "dt 1"), (steps[-1], "dt 2")) if steps else ():
            rows = [(x.layer, x.norm) for x in r.resid if x.step == s]
            f = os.path.join(tmp, "%s.resid%d" % (r.name, s))
            write_dat(f, rows)
            plots.append("'%s' w l lc rgb '%s' lw 2 %s title '%s, step %d'"
                         % (f, r.color, dash, r.title, s))
    if plots:
        gnuplot(header(png, "Residual stream entering each block: mean token norm (%d layers)"
                       % runs[0].depth, "block", "mean ||x_t||", "set logscale y\nset yrange [0.1:1000]") +
                "plot " + ", \\\n  ".join(plots) + "\n", png)


# ---- the document ----------------------------------------------------------------------------

def fmt(x, d=3):
    return "%.*f" % (d, x) if math.isfinite(x) else "—"


def plateau_exit(val, H):
    """The first evaluation step whose validation loss is below the stall line (unigram entropy
    minus the margin): when the run left the unigram plateau; None if it never did."""
    return next((s for s, v in val if v < H - STALL_MARGIN), None)


def table(runs, H):
    lines = ["| run | placement | norm | layers | width | seed | steps | train loss (last 5 logs) "
             "| final val loss | best val loss | below the stall line from step | label | time |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(runs, key=lambda r: (r.width, r.norm, r.depth, PLACEMENTS.index(r.placement), r.seed)):
        v = r.val()
        best = min((x[1] for x in v if math.isfinite(x[1])), default=math.nan)
        done = r.metrics[-1].step if r.metrics else 0
        lab = r.label if r.label != "diverged" else "diverged after step %d" % done
        exit_step = plateau_exit(r.val(), H)
        lines.append("| %s | %s | %s | %d | %d | %d | %d | %s | %s | %s | %s | **%s** | %.0f s |" % (
            r.name, r.title, r.norm, r.depth, r.width, r.seed, r.steps,
            fmt(r.final_train()), fmt(r.final_val()), fmt(best),
            "—" if exit_step is None else exit_step, lab, r.seconds))
    return "\n".join(lines)


def splice_notes(doc):
    """--notes: the document's generated part (up to the first "## " heading after its
    "## Figures") followed by the notes as they are now."""
    lines = open(doc).read().split("\n")
    fig = next((i for i, l in enumerate(lines) if l.startswith("## Figures")), None)
    if fig is None:
        print("%s: no '## Figures' section: run the study (or --report) instead" % doc)
        return 1
    end = next((i for i in range(fig + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    with open(doc, "w") as f:
        f.write(with_notes(doc, "\n".join(lines[:end])))
    print("wrote %s (its notes from %s)" % (doc, doc.replace(".md", ".notes.md")))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the 100-layer trio, 400 steps, to docs/depth-study-quick.md")
    ap.add_argument("--thousand", action="store_true", help="1000-layer runs (narrow)")
    ap.add_argument("--steps", type=int, help="steps of every run (default: 600; --quick 400; --thousand 240)")
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time, one thread each")
    ap.add_argument("--out", default="out/depth-study", help="run directories")
    ap.add_argument("--doc", default="docs/depth-study.md")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--report", action="store_true", help="no training: the document from the runs in --out")
    ap.add_argument("--only", help="run only the runs whose name contains this, keeping the others on disk")
    ap.add_argument("--notes", action="store_true",
                    help="no training, no runs needed: the document's hand-written part again from "
                         "its .notes.md (the generated part is kept as it is)")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    t0 = time.time()
    H = byte_entropy()
    upd_steps = 100
    if a.thousand:
        steps = a.steps or 240
        runs = [Run("deepnorm", 1000, "ln", 1, steps, 32, 64),
                Run("pre", 1000, "ln", 1, steps // 3, 32, 64),
                Run("post", 1000, "ln", 1, steps // 3, 32, 64),
                Run("post", 1000, "ln", 1, steps // 3, 32, 64, init="xavier")]
        for r in runs:
            r.batch, r.ctx = 8, 32
            r.extra = ["--batch", "8", "--n-ctx", "32", "--eval-every", "25", "--eval-batches", "4",
                       "--diag-grad-every", "0", "--diag-resid-every", "0"]
        upd_steps = 50
        name, doc = "depth-1000", a.doc.replace(".md", "-1000.md")
    elif a.quick:
        steps = a.steps or 400
        runs = [Run(p, 100, "ln", 1, steps) for p in PLACEMENTS]
        name, doc = "quick", a.doc.replace(".md", "-quick.md")
    else:
        steps = a.steps or 600
        runs = [Run(p, d, "ln", 1, steps) for p in PLACEMENTS for d in (6, 25, 50, 100)]
        runs += [Run(p, 100, "ln", 2, steps) for p in PLACEMENTS]
        runs += [Run(p, 100, "rms", s, steps) for p in PLACEMENTS for s in (1, 2)] + [CONTROL(steps)]
        # does the cosine decay, well under way when the post-norm runs leave the plateau, make
        # DeepNorm's gap to Pre-LN? the same two with a constant learning rate after the warmup
        runs += [Run(p, 100, "ln", 1, steps, schedule="const") for p in ("pre", "deepnorm")]
        name, doc = "full", a.doc
    root = os.path.join(a.out, name)
    cmd = "make depth-study" + {"quick": "-quick", "full": "", "depth-1000": "-1000"}[name]
    if a.notes:
        return splice_notes(doc)
    if a.report:
        for r in runs:
            r.load(root)
        study = json.load(open(os.path.join(root, "study.json")))
    elif a.only:  # the rest is on disk; the time adds to the study's
        todo = [r for r in runs if a.only in r.name]
        run_all(todo, root, a.jobs, upd_steps)
        for r in runs:
            r.load(root)
        study = json.load(open(os.path.join(root, "study.json")))
        study["elapsed"] += time.time() - t0
        with open(os.path.join(root, "study.json"), "w") as f:
            json.dump(study, f)
    else:
        if os.path.isdir(root):
            shutil.rmtree(root)
        os.makedirs(root)
        shutil.copy2("./train", root)  # rebuilding ./train during the study changes nothing
        print("depth study (%s): %d runs, %d steps, %d at a time; unigram entropy of the "
              "validation split %.4f nats" % (name, len(runs), steps, a.jobs, H), flush=True)
        run_all(runs, root, a.jobs, upd_steps)
        study = {"elapsed": time.time() - t0, "jobs": a.jobs, "load": os.getloadavg()[0]}
        with open(os.path.join(root, "study.json"), "w") as f:
            json.dump(study, f)
    for r in runs:
        r.label = label(r.rc, r.metrics, H, r.log)
    elapsed = study["elapsed"]

    figdir = doc[:-len(".md")]  # docs/depth-study.md: figures in docs/depth-study/
    os.makedirs(figdir, exist_ok=True)
    tmp = os.path.join(root, "plot")
    os.makedirs(tmp, exist_ok=True)
    figs = []

    def fig(fname, caption):
        figs.append("![%s](%s/%s)\n\n*%s*\n" % (caption, os.path.basename(figdir), fname, caption))
        return os.path.join(figdir, fname)

    deep = max(r.depth for r in runs)
    main_runs = [r for r in runs if r.depth == deep and r.norm == "ln" and not r.schedule]
    s1 = [r for r in main_runs if r.seed == 1]
    plot_loss(main_runs, fig("loss-%d-ln.png" % deep, "Training (thin) and validation (points) loss, %d layers, LayerNorm; dotted: unigram entropy of the validation split" % deep),
              tmp, H, "%d layers, LayerNorm: loss against step" % deep)
    sched = [r for r in runs if r.schedule]
    if sched:
        base = [r for r in main_runs if r.seed == 1 and r.sweep and r.placement in
                {x.placement for x in sched}]
        for r in sched:
            r.color = {"pre": "#17becf", "deepnorm": "#bcbd22"}.get(r.placement, r.color)
        plot_loss(base + sched, fig("loss-%d-schedule.png" % deep, "Cosine decay (the configs') against a constant learning rate after the warmup, %d layers, seed 1" % deep),
                  tmp, H, "%d layers: cosine against constant learning rate" % deep)
    rms = [r for r in runs if r.norm == "rms"]
    if rms:
        plot_loss(rms, fig("loss-100-rms.png", "The same with RMSNorm"), tmp, H, "100 layers, RMSNorm: loss against step")
    if len({r.depth for r in runs}) > 1:
        plot_depth(runs, fig("val-vs-depth.png", "Final validation loss against depth per placement (mean over seeds)"), tmp, H)
    if any(r.grad for r in s1):
        plot_grad_init(s1, fig("grad-init-%d.png" % deep, "Per-block gradient norm at init (step 0), %d layers, LayerNorm, seed 1" % deep), tmp)
    plot_update(s1, fig("update-%d.png" % deep, "Model update against step on a fixed held-out batch, %d layers, seed 1" % deep), tmp)
    early = 5  # before the update saturates (outputs of unit RMS decorrelated from theta_0: sqrt(2))
    if len({r.depth for r in runs}) > 1:
        plot_update_depth(runs, fig("update-vs-depth.png", "Model update at step %d against depth (seed 1)" % early), tmp, early)
    if any(r.resid for r in s1):
        plot_resid(s1, fig("resid-%d.png" % deep, "Residual-stream norm entering each block at init (solid) and at the end (dashed), %d layers" % deep), tmp)

    # measured statements: each a number from the runs
    facts = []
    for r in s1:
        g0 = [g.total for g in r.grad if g.step == 0 and g.layer >= 0]
        if g0:
            facts.append("- %s, %d layers, at init: block gradient norm %.3g at the first block, "
                         "%.3g at the last (ratio last/first %.3g)."
                         % (r.title, r.depth, g0[0], g0[-1], g0[-1] / g0[0] if g0[0] else math.nan))
        res = [x for x in r.resid if x.step == 0]
        if res:
            facts.append("- %s, %d layers, at init: residual stream mean token norm %.3g entering block 0, "
                         "%.3g leaving the last block."
                         % (r.title, r.depth, res[0].norm, res[-1].norm))
        u = update_at(r, early), update_at(r, upd_steps)
        facts.append("- %s, %d layers: model update %s at step %d, %s at step %d."
                     % (r.title, r.depth, fmt(u[0], 4), early, fmt(u[1], 4), upd_steps))

    # the comparisons the discussion rests on: final validation loss against Pre-LN's, same
    # depth, norm and schedule (mean over seeds)
    def mean_val(placement, depth, norm, schedule=None, init=None):
        v = [r.final_val() for r in runs if (r.placement, r.depth, r.norm, r.schedule, r.init)
             == (placement, depth, norm, schedule, init)]
        return sum(v) / len(v) if v else math.nan
    gaps = []
    for (depth, norm, sched) in sorted({(r.depth, r.norm, r.schedule) for r in runs},
                                       key=lambda k: (k[1], k[2] or "", k[0])):
        pre = mean_val("pre", depth, norm, sched)
        for p in ("deepnorm", "post"):
            other = mean_val(p, depth, norm, sched)
            if math.isfinite(pre) and math.isfinite(other):
                gaps.append("%s %s-%d%s %+.3f" % (NAMES[p], norm.upper() if norm != "ln" else "LN",
                                                  depth, ", %s lr" % sched if sched else "", other - pre))
    if gaps:
        facts.append("- Final validation loss minus Pre-LN's at the same depth, norm and schedule "
                     "(mean over seeds; positive: behind Pre-LN): " + "; ".join(gaps) + ".")

    per_step = {}
    for r in runs:
        ms = [m.ms for m in r.metrics][1:]
        if ms and r.depth == deep:
            per_step.setdefault(r.title, []).append(sorted(ms)[len(ms) // 2])
    timing = ", ".join("%s %.0f ms" % (t, sum(v) / len(v)) for t, v in per_step.items())
    cpu = [r.cpu / r.steps for r in runs if r.depth == deep and math.isfinite(r.cpu)]
    if cpu:
        timing += ("; CPU time per step (the run's own, load-independent up to cache effects, "
                   "evaluations and diagnostics included): %.2f s" % (sum(cpu) / len(cpu)))

    md = []
    md.append("# The depth study%s\n" % ("" if name == "full" else
                                          {"quick": " (quick: the 100-layer trio, %d steps)" % steps,
                                           "depth-1000": ": 1000 layers"}[name]))
    md.append("Generated by `%s` (scripts/depth_study.py); every number and figure below "
              "comes from that run. It took **%.1f minutes** (%d runs, %d at a time, one thread "
              "each; `nproc` = %d, load average at the end %.1f, so times are noisy).\n"
              % (cmd, elapsed / 60, len(runs), study["jobs"], os.cpu_count(), study["load"]))
    md.append("**Setup.** Byte-level tiny Shakespeare (last 10%% held out), context %d, batch %d, "
              "width %d, FFN %d, 2 heads, LayerNorm unless marked rms. The same optimizer for every "
              "placement: AdamW (beta 0.9/0.99, weight decay 0.1 on matrices), peak learning rate "
              "1e-3 with a linear warmup over a quarter of the run's steps, at most 100 (%s), then "
              "cosine decay to 1e-4 at the run's last step, gradient clipping at 1.0. Only the placement (and its init: GPT-2 for Post-LN and Pre-LN, "
              "DeepNorm's for DeepNorm, `init = auto`) changes, so differences are the "
              "architecture's. Warmup is on for everyone because Post-LN is known to need it "
              "(Xiong et al.); giving it to all is the fair, Post-LN-friendly choice. Validation: "
              "the same %s fixed batches at every evaluation. Unigram entropy of the validation "
              "split: **%.4f** nats; a run is *stalled* if its final validation loss is >= %.4f "
              "and *diverged* if the loss became non-finite (./train exits 1).\n"
              % (runs[0].ctx, runs[0].batch, runs[0].width, runs[0].ff,
                 ", ".join("%d steps for %d-step runs" % (warmup(n), n)
                           for n in sorted({r.steps for r in runs}, reverse=True)),
                 "4" if name == "depth-1000" else "8", H, H - STALL_MARGIN))
    if name == "depth-1000":
        md.append("1000-layer runs are narrow to fit the machine's time; Pre-LN and Post-LN get a "
                  "third of DeepNorm's steps.\n")
    md.append("Median step time at %d layers (one thread; the machine's load moves it): %s.\n"
              % (deep, timing))
    md.append("## Results\n\n" + table(runs, H) + "\n")
    md.append("## Measured diagnostics (seed 1)\n\nThe update is sqrt(mean over tokens of "
              "||F(x,θ_t) - F(x,θ_0)||² / d), F the final hidden state the head sees (after the "
              "final norm for Pre-LN), on %d fixed held-out sequences; θ_0's output is computed "
              "once at the start.\n\n" % 4 + "\n".join(facts) + "\n")
    md.append("## Figures\n\n" + "\n".join(figs))
    os.makedirs(os.path.dirname(doc) or ".", exist_ok=True)
    with open(doc, "w") as f:
        f.write(with_notes(doc, "\n".join(md)))
    print("wrote %s and %s/*.png in %.1f minutes" % (doc, figdir, elapsed / 60))
    return 0


if __name__ == "__main__":
    sys.exit(main())
