#!/usr/bin/env python3
"""The depth study, second round: each part tests one claim of the first round's reading with
./train on byte-level tiny Shakespeare (100 layers of DeepNet's 64-128-2 size unless a part says
otherwise). A part runs alone and keeps what it measured as small files in docs/depth-study-2/:
<part>.csv (a row per run: its options, final validation loss, label, time) and <part>/<run>.csv
(its curves; <run>.update.csv too where the part records the model update); `report` writes
docs/depth-study-2.md and its figures from those files alone, so the page can be rebuilt from
parts run in different sessions.

  scripts/depth_study2.py lead      mt's 100-layer configs changed one setting at a time towards
                                    the PyTorch pilot's (~20 min on 2 idle cores)
  scripts/depth_study2.py lead-post Post-LN's 100 layers with mt's first-round tied head and untied
  scripts/depth_study2.py lr-12     the learning-rate sweep: {3e-4, 1e-3, 3e-3, 1e-2} x {post, pre,
  scripts/depth_study2.py lr-100    deepnorm, subln, peri} at 12 or 100 layers (~25 min at 100)
  scripts/depth_study2.py lr-seed2  seed 2 at each placement's best rate of lr-12 and lr-100
  scripts/depth_study2.py clip      no gradient clipping: post, pre, deepnorm at 50 and 100
                                    layers, lr 1e-3 and 3e-3 (~15 min)
  scripts/depth_study2.py warmup    post and pre at 6 and 12 layers, warmup 0, 100 and 1000 steps
                                    (the last from 1e-6), lr 1e-3 and 1e-2, 2000 steps (~20 min)
  scripts/depth_study2.py long-100  pre, deepnorm, subln at 100 layers, 3000 steps at the best rate
                                    of lr-100, seeds 1 and 2 (~30 min)
  scripts/depth_study2.py long-6    post and pre at 6 layers, 3000 steps at the best rate of
                                    lr-12, seeds 1 and 2 (~5 min)
  scripts/depth_study2.py report    docs/depth-study-2.md from the parts on disk
  --reuse                           run only the part's runs not yet kept (a part split across
                                    sessions)
  --smoke                           any part at 2-3 layers and 20 steps into /tmp (a check of
                                    the driver, not a result)

Runs go to out/depth-study-2/<part>/<run>/ (./train's own files); two run at once, one thread
each. Labels (trained, stalled, diverged) are mtrun.label's. Python 3 standard library and
gnuplot; runs ./train as built by make all.
"""
import argparse
import concurrent.futures as cf
import csv
import json
import math
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mtrun import (byte_entropy, copy_columns, cpu_model, diverged_at, evals,  # noqa: E402
                   gnuplot, header, label, num, plot_heatmaps, plot_lines, read_csv,
                   read_metrics, read_update, run, write_dat)

DOCS = "docs/depth-study-2"
OUT = "out/depth-study-2"
PLACEMENTS = ["post", "pre", "deepnorm", "subln", "peri"]
RATES = ["3e-4", "1e-3", "3e-3", "1e-2"]
NAMES = {"post": "Post-LN", "pre": "Pre-LN", "deepnorm": "DeepNorm", "subln": "Sub-LN",
         "peri": "Peri-LN"}

# The 100-layer settings (configs/deep100-*.ini), shortened to 400 steps as make
# depth-study-quick, and the pilot's values of the settings in which the first round's differ
# (the lead starts from the first round's tied head; the configs untie it since).
BASE = ["--n-layer", "100", "--n-embd", "64", "--n-ff", "128", "--n-head", "2", "--steps", "400",
        "--eval-every", "50", "--eval-batches", "8", "--save-every", "0", "--log-every", "10",
        "--threads", "1", "--replicas", "1", "--seed", "1"]
PILOT = {
    "emb-std 1": ["--emb-std", "1"],
    "untied head": ["--untie"],
    "adam 0.9/0.98, no decay": ["--optim", "adam", "--beta2", "0.98", "--weight-decay", "0"],
    "no clipping": ["--clip", "0"],
    "no warmup, constant lr": ["--warmup", "0", "--schedule", "const", "--min-lr="],
    "context 32": ["--n-ctx", "32"],
    "xavier init": ["--init", "xavier"],  # pre only: DeepNorm's own init is Xavier already
}


FIRST_ROUND = {"lead": ["--untie=false"], "lead-post": ["--untie=false"]}  # a part's settings before its variant's


class Run:
    def __init__(self, part, placement, variant, flags):
        self.part, self.placement, self.variant, self.flags = part, placement, variant, flags
        self.name = "%s-%s" % (placement, "".join(c if c.isalnum() or c in "-." else "_"
                                                  for c in variant).strip("_"))
        self.dir = os.path.join(OUT, part, self.name)

    def command(self):
        # Sub-LN and Peri-LN: the Pre-LN config with their placement (init auto: each its own)
        config = self.placement if self.placement in ("post", "pre", "deepnorm") else "pre"
        return ["./train", "--config", "configs/deep100-%s.ini" % config, "--placement",
                self.placement] + BASE + FIRST_ROUND.get(self.part, []) + self.flags + \
            SMOKE + ["--out", self.dir]

    def execute(self):
        shutil.rmtree(self.dir, ignore_errors=True)
        res = run(self.command(), os.path.join(self.dir, "log.txt"), env=None)
        self.seconds, self.rc = res.wall, res.rc
        return self

    def keep(self, H):
        """The run's curves into docs/<part>/<name>.csv; its summary row."""
        metrics = read_metrics(os.path.join(self.dir, "metrics.csv"))
        log = open(os.path.join(self.dir, "log.txt")).read()
        os.makedirs(os.path.join(DOCS, self.part), exist_ok=True)
        copy_columns(os.path.join(self.dir, "metrics.csv"),
                     os.path.join(DOCS, self.part, self.name + ".csv"),
                     ["step", "loss", "val_loss", "grad_norm"])
        update = os.path.join(self.dir, "diag_update.csv")
        if self.part in KEEP_UPDATE and os.path.exists(update):
            shutil.copy(update, os.path.join(DOCS, self.part, self.name + ".update.csv"))
        vals = {r.step: r.val_loss for r in evals(metrics)}
        grads = [(r.grad_norm, r.step) for r in metrics if math.isfinite(r.grad_norm)]
        nan_at = diverged_at(log)
        row = {"placement": self.placement, "variant": self.variant,
               "flags": " ".join(self.flags), "label": label(self.rc, metrics, H, log),
               "val_100": vals.get(100, ""), "val_200": vals.get(200, ""),
               "val_300": vals.get(300, ""), "val_final": vals[max(vals)] if vals else "",
               "diverged_at": str(nan_at) if nan_at is not None else "",
               "max_grad": "%.4g" % max(grads)[0] if grads else "",
               "max_grad_step": max(grads)[1] if grads else "",
               "seconds": "%.0f" % self.seconds}
        with open(self.row_path(), "w") as f:
            json.dump(row, f)
        return row

    def row_path(self):
        """The run's summary row, kept beside its curves so that a part can be finished in
        another session (--reuse)."""
        return os.path.join(DOCS, self.part, self.name + ".row.json")


def lead_post_runs():
    """Post-LN, which the first round saw stall from 25 layers on, with its tied head and untied."""
    return [Run("lead-post", "post", "mt", []), Run("lead-post", "post", "untied head", ["--untie"])]


def lead_runs():
    runs = []
    for p in ("pre", "deepnorm"):
        runs.append(Run("lead", p, "mt", []))
        everything = []
        for variant, flags in PILOT.items():
            if variant == "xavier init" and p != "pre":
                continue
            runs.append(Run("lead", p, variant, flags))
            everything += flags
        runs.append(Run("lead", p, "pilot (all of them)", everything))
    return runs


SMOKE = []  # --smoke: flags after every run's own


def lr_runs(part, depth):
    return [Run(part, p, "L%d lr %s" % (depth, lr), ["--n-layer", str(depth), "--lr", lr])
            for p in PLACEMENTS for lr in RATES]


def best_rate(rows, placement):
    """The rate of the placement's lowest final validation loss among trained runs, or None."""
    ok = [(num(r["val_final"]), r["variant"].split()[-1]) for r in rows
          if r["placement"] == placement and r["label"] == "trained"]
    return min(ok)[1] if ok else None


def seed2_runs():
    runs = []
    for depth in (12, 100):
        rows = read_csv(os.path.join(DOCS, "lr-%d.csv" % depth))
        for p in PLACEMENTS:
            lr = best_rate(rows, p)
            if lr:
                runs.append(Run("lr-seed2", p, "L%d lr %s seed 2" % (depth, lr),
                                ["--n-layer", str(depth), "--lr", lr, "--seed", "2"]))
    return runs


KEEP_UPDATE = ("clip",)  # parts whose runs keep their model-update curve
CLIP_RATES = ["1e-3", "3e-3"]
WARMUP_RATES = ["1e-3", "1e-2"]  # mt's rate, and the one at which Post-LN stalled at 12 layers
WARMUPS = {"0": ["--warmup", "0"], "100": ["--warmup", "100"],
           "1000 from 1e-6": ["--warmup", "1000", "--warmup-init-lr", "1e-6"]}
NO_DIAG = ["--diag-grad-every", "0", "--diag-update-steps", "0", "--diag-resid-every", "0"]


def clip_runs():
    """Clipping off, a log row and a model-update point every step: what the gradient and the
    update did just before a divergence."""
    return [Run("clip", p, "L%d lr %s clip 0" % (depth, lr),
                ["--n-layer", str(depth), "--lr", lr, "--clip", "0", "--log-every", "1",
                 "--diag-update-steps", "400", "--diag-resid-every", "0"])
            for depth in (50, 100) for p in ("post", "pre", "deepnorm") for lr in CLIP_RATES]


def warmup_runs():
    return [Run("warmup", p, "L%d lr %s warmup %s" % (depth, lr, w),
                ["--n-layer", str(depth), "--lr", lr, "--steps", "2000", "--eval-every", "100"] +
                flags + NO_DIAG)
            for depth in (6, 12) for p in ("post", "pre") for lr in WARMUP_RATES
            for w, flags in WARMUPS.items()]


def long_runs(part, depth, placements, sweep):
    """3000 steps at each placement's best rate of the sweep (1e-3 if it has none), two seeds."""
    rows = read_csv(os.path.join(DOCS, sweep + ".csv"))
    runs = []
    for p in placements:
        lr = best_rate(rows, p) or "1e-3"
        for seed in ("1", "2"):
            runs.append(Run(part, p, "L%d lr %s seed %s" % (depth, lr, seed),
                            ["--n-layer", str(depth), "--lr", lr, "--seed", seed,
                             "--steps", "3000", "--eval-every", "100"] + NO_DIAG))
    return runs


def run_part(part, runs, jobs, reuse=False):
    """Executes the runs (reuse: those without a kept summary, <run>.row.json) and writes the
    part's CSV from every run's summary, in the runs' order."""
    H = byte_entropy()
    kept = {r.name: json.load(open(r.row_path())) for r in runs
            if reuse and os.path.exists(r.row_path())}
    todo = [r for r in runs if r.name not in kept]
    with cf.ThreadPoolExecutor(jobs) as ex:
        for r in ex.map(lambda r: r.execute(), todo):
            print("  %-40s %4.0f s  exit %d" % (r.name, r.seconds, r.rc), flush=True)
            kept[r.name] = r.keep(H)
    rows = [kept[r.name] for r in runs]
    os.makedirs(DOCS, exist_ok=True)
    with open(os.path.join(DOCS, part + ".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


# ---- the report ------------------------------------------------------------------------------

def fmt(x):
    v = num(x)
    return "%.3f" % v if math.isfinite(v) else "-"


def plot_lead(rows, H, placement, png):
    plots = []
    colors = ["#000000", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
              "#e377c2", "#17becf"]
    tmp = png + ".d"
    os.makedirs(tmp, exist_ok=True)
    mine = [r for r in rows if r["placement"] == placement]
    for i, r in enumerate(mine):
        name = Run(r["part"], placement, r["variant"], []).name
        curve = read_metrics(os.path.join(DOCS, r["part"], name + ".csv"))
        pts = [(c.step, c.val_loss) for c in evals(curve)]
        f = os.path.join(tmp, name)
        write_dat(f, pts)
        lw = 3 if r["variant"] in ("mt", "pilot (all of them)") else 1.5
        plots.append("'%s' w lp lc rgb '%s' lw %g pt 7 ps 0.5 title '%s'"
                     % (f, colors[i % len(colors)], lw, r["variant"]))
    plots.append("%.6f w l lc rgb 'black' dt 3 lw 2 title 'unigram entropy %.3f'" % (H, H))
    gnuplot(header(png, "%s, 100 layers: mt's settings changed one at a time towards the pilot's"
                   % NAMES[placement], "step", "validation loss (nats per byte)",
                   "set yrange [2:3.6]\nset key outside right top") +
            "plot " + ", \\\n  ".join(plots) + "\n", png)
    shutil.rmtree(tmp)


def report_lr(H):
    """The learning-rate sweep: final validation loss per placement and rate at each depth, each
    placement's best rate and the largest at which it still trains; seed 2 at the best rates."""
    out = []
    seed2 = read_csv(os.path.join(DOCS, "lr-seed2.csv"))
    for depth in (12, 100):
        rows = read_csv(os.path.join(DOCS, "lr-%d.csv" % depth))
        if not rows:
            continue
        out += ["## Learning rates at %d layers" % depth, "",
                "`scripts/depth_study2.py lr-%d`: 64-128-2, LayerNorm, untied head, 400 steps of "
                "16 x 64 bytes, AdamW (0.9, 0.99, decay 0.1), clip 1, 100 warmup steps then "
                "cosine to 1e-4, seed 1. Final validation loss (label when not trained); at each "
                "placement's best rate a second run with seed 2, and the mean of the two (their "
                "spread: the difference) when both trained:"
                % depth, "",
                "| placement | " + " | ".join(RATES) + " | best rate | largest trained | "
                "best, seed 2 | mean (spread) |",
                "|---|" + "---:|" * len(RATES) + "---:|---:|---:|---|"]
        for p in PLACEMENTS:
            mine = {r["variant"].split()[-1]: r for r in rows if r["placement"] == p}
            if not mine:
                continue
            cells = []
            for lr in RATES:
                r = mine.get(lr)
                cells.append("-" if not r else fmt(r["val_final"]) +
                             ("" if r["label"] == "trained" else " " + r["label"]))
            best = best_rate(rows, p)
            trained = [lr for lr in RATES if lr in mine and mine[lr]["label"] == "trained"]
            two = [r for r in seed2 if r["placement"] == p and
                   r["variant"].startswith("L%d lr %s " % (depth, best))]
            s2 = fmt(two[0]["val_final"]) + ("" if two[0]["label"] == "trained" else
                                             " " + two[0]["label"]) if two else "-"
            if two and best and two[0]["label"] == "trained":
                a, b = num(mine[best]["val_final"]), num(two[0]["val_final"])
                ms = "%.3f (%.3f)" % ((a + b) / 2, abs(a - b))
            else:
                ms = "-"
            out.append("| %s | %s | %s | %s | %s | %s |" % (
                NAMES[p], " | ".join(cells), best or "-", trained[-1] if trained else "-", s2, ms))
        out.append("")
        lines = []
        for p in PLACEMENTS:
            pts = [(float(r["variant"].split()[-1]), num(r["val_final"]) if r["label"] ==
                    "trained" else H) for r in rows if r["placement"] == p]
            lines.append((NAMES[p], COLORS[p], 1, "lp", sorted(pts)))
        png = os.path.join(DOCS, "lr-%d.png" % depth)
        plot_lines(png, "%d layers, 400 steps (a run that did not train: on the unigram line)"
                   % depth, "final validation loss (nats per byte)", lines,
                   "set logscale x\nset xlabel 'peak learning rate'\nset yrange [2:3.5]")
        out += ["![lr %d](depth-study-2/lr-%d.png)" % (depth, depth), ""] + resid_heatmaps(depth)
        out += notes("lr-%d" % depth)
    return out


def resid_heatmaps(depth, lr="1e-3"):
    """The residual stream entering each block over training, the placements' kept runs at lr."""
    panels = []
    for p in PLACEMENTS:
        path = os.path.join(DOCS, "lr-%d" % depth, "%s-L%d_lr_%s.resid.csv" % (p, depth, lr))
        rows = [(int(r["step"]), int(r["layer"]), num(r["norm"])) for r in read_csv(path)]
        if rows:
            panels.append((NAMES[p], rows))
    if not panels:
        return []
    png = "lr-%d-resid-heat.png" % depth
    plot_heatmaps(os.path.join(DOCS, png), "residual stream entering each block, %d layers, lr %s "
                  "(diag_resid.csv; the top row: after the last block)" % (depth, lr),
                  "mean token norm", panels)
    return ["The residual stream entering each block (mean token norm on the probe batch), "
            "block by step, at lr %s:" % lr, "", "![resid](depth-study-2/%s)" % png, ""]


COLORS = {"post": "#d62728", "pre": "#1f77b4", "deepnorm": "#2ca02c", "subln": "#9467bd",
          "peri": "#ff7f0e"}


def curve(part, name, column="val_loss"):
    """(step, value) of a kept run's column, finite values only."""
    rows = read_metrics(os.path.join(DOCS, part, name + ".csv"))
    return [(r.step, getattr(r, column)) for r in rows
            if getattr(r, column) is not None and math.isfinite(getattr(r, column))]


def run_name(part, row):
    return Run(part, row["placement"], row["variant"], []).name


def notes(part):
    path = os.path.join(DOCS, part + ".notes.md")
    return [open(path).read().strip(), ""] if os.path.exists(path) else []


def report_clip(H):
    rows = read_csv(os.path.join(DOCS, "clip.csv"))
    if not rows:
        return []
    out = ["## Gradient clipping off", "",
           "`scripts/depth_study2.py clip`: the learning-rate sweep's settings with `--clip 0`, "
           "a log row and a model-update point (DeepNet's ||F(x,θ_t) - F(x,θ_0)||, the final "
           "hidden state on a fixed held-out batch) every step. The gradient norm and the update "
           "are those of the last five steps before the end (before the step whose loss was not "
           "finite, for a diverged run).", "",
           "| placement | layers | lr | label | final val | diverged at step | largest gradient "
           "norm (step) | gradient norm, last 5 steps | update, last 5 steps |",
           "|---|---:|---:|---|---:|---:|---:|---|---|"]
    for r in rows:
        name = run_name("clip", r)
        grads = curve("clip", name, "grad_norm")[-5:]
        upd = read_update(os.path.join(DOCS, "clip", name + ".update.csv"))
        end = int(r["diverged_at"]) if r.get("diverged_at") else None
        upd = [u.update for u in upd if end is None or u.step < end][-5:]
        depth, lr = r["variant"].split()[0][1:], r["variant"].split()[2]
        out.append("| %s | %s | %s | %s | %s | %s | %s (%s) | %s | %s |" % (
            NAMES[r["placement"]], depth, lr, r["label"], fmt(r["val_final"]),
            r.get("diverged_at") or "-", r.get("max_grad") or "-", r.get("max_grad_step") or "-",
            " ".join("%.3g" % g for _, g in grads), " ".join("%.3g" % u for u in upd)))
    out.append("")
    for depth in ("50", "100"):
        mine = [r for r in rows if r["variant"].startswith("L%s " % depth)]
        lines = [("%s lr %s" % (NAMES[r["placement"]], r["variant"].split()[2]),
                  COLORS[r["placement"]], 1 if r["variant"].split()[2] == CLIP_RATES[0] else 2,
                  "l", curve("clip", run_name("clip", r), "loss")) for r in mine]
        png = os.path.join(DOCS, "clip-L%s.png" % depth)
        plot_lines(png, "No clipping, %s layers: training loss" % depth,
                   "training loss (nats per byte)", lines, "set yrange [1.5:6]")
        lines = [(t, c, d, "l", curve("clip", run_name("clip", r), "grad_norm"))
                 for (t, c, d, _, _), r in zip(lines, mine)]
        png2 = os.path.join(DOCS, "clip-grad-L%s.png" % depth)
        plot_lines(png2, "No clipping, %s layers: gradient norm" % depth, "gradient norm",
                   lines, "set logscale y")
        out += ["![clip %s](depth-study-2/clip-L%s.png)" % (depth, depth),
                "![clip gradient %s](depth-study-2/clip-grad-L%s.png)" % (depth, depth), ""]
    return out + notes("clip")


def report_warmup(H):
    rows = read_csv(os.path.join(DOCS, "warmup.csv"))
    if not rows:
        return []
    out = ["## Warmup", "",
           "`scripts/depth_study2.py warmup`: 64-128-2, LayerNorm, untied head, 2000 steps of "
           "16 x 64 bytes, AdamW (0.9, 0.99, decay 0.1), clip 1, cosine to 1e-4 after the "
           "warmup, seed 1; the 1000-step warmup starts at 1e-6 (Xiong et al.'s example), the "
           "others at 0. Final validation loss (label when not trained), and in brackets the "
           "first evaluation below the unigram line minus 0.1 (%.3f):" % (H - 0.1), "",
           "| placement | layers | lr | " + " | ".join("warmup " + w for w in WARMUPS) + " |",
           "|---|---:|---:|" + "---:|" * len(WARMUPS)]
    seen = []
    for r in rows:
        depth, lr = r["variant"].split()[0][1:], r["variant"].split()[2]
        key = (r["placement"], depth, lr)
        if key in seen:
            continue
        seen.append(key)
        cells = []
        for w in WARMUPS:
            m = [x for x in rows if (x["placement"], x["variant"]) ==
                 (r["placement"], "L%s lr %s warmup %s" % (depth, lr, w))]
            if not m:
                cells.append("-")
                continue
            left = next((s for s, v in curve("warmup", run_name("warmup", m[0]))
                         if v < H - 0.1), None)
            cells.append(fmt(m[0]["val_final"]) + ("" if m[0]["label"] == "trained" else
                                                   " " + m[0]["label"]) +
                         (" (%d)" % left if left is not None else ""))
        out.append("| %s | %s | %s | %s |" % (NAMES[r["placement"]], depth, lr,
                                              " | ".join(cells)))
    out.append("")
    for depth in ("6", "12"):
        mine = [r for r in rows if r["variant"].startswith("L%s " % depth)]
        lines = [("%s lr %s warmup %s" % (NAMES[r["placement"]], r["variant"].split()[2],
                                          " ".join(r["variant"].split()[4:])),
                  COLORS[r["placement"]] if r["variant"].split()[2] == WARMUP_RATES[0]
                  else {"post": "#ff9896", "pre": "#aec7e8"}[r["placement"]],
                  1 + list(WARMUPS).index(" ".join(r["variant"].split()[4:])), "l",
                  curve("warmup", run_name("warmup", r))) for r in mine]
        png = os.path.join(DOCS, "warmup-L%s.png" % depth)
        plot_lines(png, "Warmup, %s layers: validation loss" % depth,
                   "validation loss (nats per byte)", lines, "set yrange [1.4:3.6]")
        out += ["![warmup %s](depth-study-2/warmup-L%s.png)" % (depth, depth), ""]
    return out + notes("warmup")


def part_rows(part):
    """The part's summary rows: its CSV, or while the part is unfinished (run in sessions with
    --reuse), the summaries of the runs kept so far."""
    rows = read_csv(os.path.join(DOCS, part + ".csv"))
    folder = os.path.join(DOCS, part)
    if rows or not os.path.isdir(folder):
        return rows
    return [json.load(open(os.path.join(folder, f))) for f in sorted(os.listdir(folder))
            if f.endswith(".row.json")]


def report_long(H):
    out = []
    for part, depth in (("long-100", 100), ("long-6", 6)):
        rows = part_rows(part)
        if not rows:
            continue
        out += ["## Long runs at %d layers" % depth, "",
                "`scripts/depth_study2.py %s`: 64-128-2, LayerNorm, untied head, 3000 steps of "
                "16 x 64 bytes, AdamW (0.9, 0.99, decay 0.1), clip 1, 100 warmup steps, cosine "
                "to 1e-4, each placement at its best rate of the %d-layer sweep, seeds 1 and 2. "
                "Validation loss, mean of the seeds (their spread: the difference):"
                % (part, 12 if depth == 6 else 100), "",
                "| placement | lr | step 500 | step 1000 | step 2000 | final | labels |",
                "|---|---:|---:|---:|---:|---:|---|"]
        lines = []
        for p in PLACEMENTS:
            mine = [r for r in rows if r["placement"] == p]
            if not mine:
                continue
            curves = [dict(curve(part, run_name(part, r))) for r in mine]
            cells = []
            for step in (500, 1000, 2000, None):
                v = [c[step if step else max(c)] for c in curves if c and (step in c or not step)]
                cells.append("-" if not v else "%.3f" % (sum(v) / len(v)) +
                             (" (%.3f)" % (max(v) - min(v)) if len(v) > 1 else ""))
            out.append("| %s | %s | %s | %s |" % (NAMES[p], mine[0]["variant"].split()[2],
                                                  " | ".join(cells),
                                                  ", ".join(r["label"] for r in mine)))
            for r, c in zip(mine, curves):
                lines.append(("%s seed %s" % (NAMES[p], r["variant"].split()[-1]), COLORS[p],
                              int(r["variant"].split()[-1]), "l", sorted(c.items())))
        out.append("")
        png = os.path.join(DOCS, "%s.png" % part)
        plot_lines(png, "%d layers, 3000 steps: validation loss" % depth,
                   "validation loss (nats per byte)", lines, "set yrange [1.3:3.0]")
        out += ["![%s](depth-study-2/%s.png)" % (part, part), ""] + notes(part)
    return out


def report():
    H = byte_entropy()
    out = ["# The depth study, second round", "",
           "Generated by `scripts/depth_study2.py report` from the parts kept in "
           "[depth-study-2/](depth-study-2/); each part's command is given with its section. "
           "The first round is [depth-study.md](depth-study.md).", ""] + notes("summary")
    lead = [dict(r, part=part) for part in ("lead", "lead-post")
            for r in read_csv(os.path.join(DOCS, part + ".csv"))]
    if lead:
        cpu = cpu_model()
        out += ["## The lead: why DeepNorm started late and Post-LN stalled in the first round", "",
                "`scripts/depth_study2.py lead` and `lead-post` (%s). 100 layers, 64-128-2, LayerNorm, 400 steps "
                "of 16 x 64 bytes (32 with `context 32`), lr 1e-3, seed 1; each row changes one "
                "setting of mt's configs (configs/deep100-*.ini) to the PyTorch pilot's, the last "
                "changes them all. Validation loss (8 fixed batches):" % cpu.strip(), "",
                "| placement | change | step 100 | step 200 | step 300 | final | label |",
                "|---|---|---:|---:|---:|---:|---|"]
        for r in lead:
            out.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                NAMES[r["placement"]], r["variant"], fmt(r["val_100"]), fmt(r["val_200"]),
                fmt(r["val_300"]), fmt(r["val_final"]), r["label"]))
        out.append("")
        for p in ("deepnorm", "pre", "post"):
            if any(r["placement"] == p for r in lead):
                png = os.path.join(DOCS, "lead-%s.png" % p)
                plot_lead(lead, H, p, png)
                out += ["![%s](depth-study-2/lead-%s.png)" % (NAMES[p], p), ""]
        out += notes("lead")
    out += report_lr(H) + report_clip(H) + report_warmup(H) + report_long(H)
    page = os.path.join(os.path.dirname(DOCS), "depth-study-2.md")
    with open(page, "w") as f:
        f.write("\n".join(out))
    print("wrote " + page)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("part", choices=["lead", "lead-post", "lr-12", "lr-100", "lr-seed2", "clip", "warmup",
                                     "long-100", "long-6", "report"])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--reuse", action="store_true",
                    help="run only the part's runs without a kept summary (<run>.row.json in "
                         "docs/depth-study-2/<part>/), e.g. to finish a part in another session")
    a = ap.parse_args()
    if a.smoke:
        global DOCS, OUT
        DOCS, OUT = "/tmp/mt-depth-study-2/docs", "/tmp/mt-depth-study-2/out"
        SMOKE.extend(["--n-layer", "3", "--steps", "20", "--warmup", "5", "--eval-every", "10",
                      "--diag-grad-every", "0", "--diag-update-steps", "0",
                      "--diag-resid-every", "0"])
    if a.part == "report":
        report()
        return 0
    runs = {"lead": lead_runs, "lead-post": lead_post_runs, "lr-12": lambda: lr_runs("lr-12", 12),
            "lr-100": lambda: lr_runs("lr-100", 100), "lr-seed2": seed2_runs,
            "clip": clip_runs, "warmup": warmup_runs,
            "long-100": lambda: long_runs("long-100", 100, ("pre", "deepnorm", "subln"), "lr-100"),
            "long-6": lambda: long_runs("long-6", 6, ("post", "pre"), "lr-12")}[a.part]()
    if not runs:
        print("depth_study2: %s has nothing to run (lr-12 and lr-100 first)" % a.part)
        return 2
    run_part(a.part, runs, a.jobs, a.reuse)
    if not a.smoke:
        report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
