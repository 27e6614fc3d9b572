#!/usr/bin/python3
"""Depth in an encoder-decoder, DeepNet's own setting: Post-LN, Pre-LN and DeepNorm at 6+6, 18+18
and 50+50 layers on the G2P task (CMUdict), seeds 1 and 2, with Post-LN under DeepNet's baseline
init (Xavier) as a control, in parts of at most ~45 minutes on 2 cores; every run kept as small
files in docs/encdec-depth/ and the page docs/encdec-depth.md written from those files alone.

  /usr/bin/python3 scripts/encdec_depth.py --list              the parts and their runs
  /usr/bin/python3 scripts/encdec_depth.py --part K [--reuse]  runs part K (--reuse: only its runs
                                                              not yet kept), then the page
  /usr/bin/python3 scripts/encdec_depth.py --report            the page again from the kept files
  /usr/bin/python3 scripts/encdec_depth.py --smoke [--dir D]   every part and the page on a tiny
                                                              setting (1+1, 2+2, 3+3 layers of
                                                              width 16, 40 steps, the dictionary's
                                                              first 2,000 lines) into D (default
                                                              /tmp/mt-encdec-depth); --tiny too

Every run is DeepNet's small model (Wang et al. 2022: width 64, FFN 128, 2 heads, tied
embeddings) with the same optimiser for every placement: AdamW (0.9, 0.99, weight decay 0.1),
lr 5e-4, 400 warmup steps then inverse-sqrt decay, clip 1.0, batch 32 words, 3000 steps, one
thread, two runs at a time; init auto (GPT-2's for Post-LN and Pre-LN, DeepNorm's with the
encoder-decoder constants of the table in docs/layers.md), and the control post-xavier (Post-LN,
--init xavier, the init DeepNet's Post-LN baseline had). Validation every 100 steps on 10 batches
(320 words: loss, greedy WER and PER), a training row every 50, DeepNet's model update
(./train --diag-update-steps: the decoder's final hidden state on 4 validation words against the
init's) for the first 400 steps, the warmup.

Labels are mtrun.label's: diverged (a non-finite loss; ./train stops and exits 1), stalled (the
final validation loss at or above the unigram entropy of the target tokens minus 0.1 nats: a
model that predicts the phones' frequencies and ignores the word), else trained; and stalled too
when no validation word comes out right (WER 100%: the decoder models the phones and ignores the
word, a plateau below the unigram line). The entropy is
over every word's first pronunciation (phones and the end token, as the validation loss counts
them); the validation split is a random 5% of the words, so it differs by sampling only.

Steps, from a measured timing (the runs' own CPU time; the load average was 5-7 from other jobs):
a 200-step Post-LN 50+50 run took 37.6 s of CPU, two evaluations included, i.e. 0.16 s a step
(137 ms a step on its log once the load eased), and an evaluation batch of 32 words (greedy
decoding) 0.25 s; so at 3000 steps a 50+50 run needs ~9 minutes of a core, an 18+18 run ~3.5 and
a 6+6 run ~1.1. Two 1-thread runs at once beat one 2-thread run after another: a pair of 18+18
runs of 100 steps took 57 s at once against 69 s on 2 threads in turn (load 5-6). Parts: 1 is
every 6+6 and 18+18 run (16 runs, ~18 minutes on 2 free cores), 2 and 3 the four 50+50 runs of
seed 1 and of seed 2 (two pairs, ~19 minutes each). 4000 steps would make a 50+50 part ~26
minutes on free cores, too close to 45 with other jobs about; under today's load (5-7) a step
took up to 1 s, so run the parts on otherwise idle cores.

Files: docs/encdec-depth/<run>.csv (step, loss, val_loss, wer, per, grad_norm: a row every 50
steps), <run>.update.csv (step, update: every step to 100, then every 10), <run>.row.json (its
summary, which --reuse looks for), part<K>.csv (the part's rows), the figures; runs go to
out/encdec-depth/<run>/ (./train's own files, not kept).
"""
import argparse
import concurrent.futures as cf
import csv
import json
import math
import os
import re
import shutil
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from depth_study import COLORS, NAMES  # noqa: E402
from mtrun import (ROOT, STALL_MARGIN, build, copy_columns, diverged_at, evals,  # noqa: E402
                   flags, label, num, plot_lines, read_metrics, read_update, run, with_notes)

CMU = "/usr/share/festival/dicts/cmu/cmudict-0.4.out"
DEPTHS = [6, 18, 50]
SEEDS = [1, 2]
STEPS = 3000
UPDATE_STEPS = 400  # the warmup
# the three placements with their own init, and the control: Post-LN with DeepNet's baseline
# init (Xavier) instead of GPT-2's small one, which fills the idle core of the 50+50 parts
PLACEMENTS = ["post", "pre", "deepnorm", "post-xavier"]
FLAGS = {"post": ["--placement", "post"], "pre": ["--placement", "pre"],
         "deepnorm": ["--placement", "deepnorm"],
         "post-xavier": ["--placement", "post", "--init", "xavier"]}
NAMES = dict(NAMES, **{"post-xavier": "Post-LN, Xavier init"})
COLORS = dict(COLORS, **{"post-xavier": "#ff7f0e"})
PARTS = [[(p, d, s) for d in (18, 6) for s in SEEDS for p in PLACEMENTS],
         [(p, 50, 1) for p in PLACEMENTS], [(p, 50, 2) for p in PLACEMENTS]]
TINY_DEPTH = {6: 1, 18: 2, 50: 3}  # --smoke: the same parts, shallow and narrow
WIDTHS = {"l": "lw 1", "lp": "lw 2 pt 7 ps 0.5"}  # the figures' lines: training thin

# the settings of every run; --smoke replaces some (SMOKE) for a quick check of the driver
SETTINGS = {"--n-embd": "64", "--n-ff": "128", "--n-head": "2", "--optim": "adamw",
            "--lr": "5e-4", "--warmup": "400", "--schedule": "invsqrt", "--clip": "1.0",
            "--batch": "32", "--steps": str(STEPS), "--eval-every": "100", "--eval-batches": "10",
            "--log-every": "50", "--save-every": "0", "--threads": "1",
            "--diag-update-steps": str(UPDATE_STEPS)}
SMOKE = {"--n-embd": "16", "--n-ff": "32", "--warmup": "5", "--steps": "40", "--eval-every": "20",
         "--eval-batches": "2", "--log-every": "10", "--diag-update-steps": "10"}


class Paths:
    """Where the kept files (docs), the runs (out) and the page go, and the data."""
    def __init__(self, docs, out, page, data, tiny):
        self.docs, self.out, self.page, self.data, self.tiny = docs, out, page, data, tiny


def run_name(placement, depth, seed):
    return "%s-%d+%d-s%d" % (placement, depth, depth, seed)


# ---- the plateau -----------------------------------------------------------------------------

SYLLABLE = re.compile(r"\(\(([^()]*)\) (\d)\)")


def target_entropy(path):
    """Entropy (nats) of the target tokens (phones with their stress digit, and the end token) of
    every word's first pronunciation, read as src/data/g2p.c reads festival's CMUdict: a word's
    entries in file order, lowercased, the digit of a syllable on its first vowel."""
    first = {}
    with open(path, encoding="latin-1") as f:
        for line in f:
            m = re.match(r'\("([^"]+)" \S+ \((.*)\)\)\s*$', line)
            if not m or m.group(1).lower() in first:
                continue
            phones = []
            for names, digit in SYLLABLE.findall(m.group(2)):
                names = names.lower().split()
                vowel = next((i for i, n in enumerate(names) if n[0] in "aeiou"), -1)
                phones += [n + digit if i == vowel else n for i, n in enumerate(names)]
            first[m.group(1).lower()] = phones
    counts = {}
    for phones in first.values():
        for p in phones + ["</s>"]:
            counts[p] = counts.get(p, 0) + 1
    n = sum(counts.values())
    return -sum(c / n * math.log(c / n) for c in counts.values())


# ---- runs ------------------------------------------------------------------------------------

def command(paths, placement, depth, seed):
    s = dict(SETTINGS, **(SMOKE if paths.tiny else {}))
    d = TINY_DEPTH[depth] if paths.tiny else depth
    return [os.path.join(ROOT, "build", "train"), "--model", "encdec", "--data", paths.data,
            "--enc-layers", str(d), "--dec-layers", str(d), "--seed", str(seed)] + \
        FLAGS[placement] + flags(s) + \
        ["--out", os.path.join(paths.out, run_name(placement, depth, seed))]


def execute(paths, H, placement, depth, seed):
    """Trains one run and keeps its curves and summary row in paths.docs; returns the row."""
    name = run_name(placement, depth, seed)
    out = os.path.join(paths.out, name)
    shutil.rmtree(out, ignore_errors=True)  # ./train refuses a directory holding another run
    res = run(command(paths, placement, depth, seed), os.path.join(out, "log.txt"), cwd=ROOT)
    log = res.text()
    metrics = read_metrics(os.path.join(out, "metrics.csv"))
    lab = label(res.rc, metrics, H, log)
    if lab == "failed":
        sys.exit("%s failed (exit %d): %s" % (name, res.rc, log.strip().split("\n")[-1]))
    copy_columns(os.path.join(out, "metrics.csv"), os.path.join(paths.docs, name + ".csv"),
                 {"step": "step", "loss": "loss", "val_loss": "val_loss", "wer": "val_wer",
                  "per": "val_per", "grad_norm": "grad_norm"})
    copy_columns(os.path.join(out, "diag_update.csv"),
                 os.path.join(paths.docs, name + ".update.csv"), ["step", "update"],
                 keep=lambda u: int(u["step"]) <= 100 or int(u["step"]) % 10 == 0)
    last = evals(metrics)[-1].text if evals(metrics) else {}
    nan_at = diverged_at(log)
    ms = [r.ms for r in metrics][1:]
    row = {"placement": placement, "enc": depth, "dec": depth, "seed": seed, "label": lab,
           "steps": metrics[-1].step if metrics else 0,
           "diverged_at": str(nan_at) if nan_at is not None else "",
           "loss": "%.4f" % statistics.mean(r.loss for r in metrics[-5:]) if metrics else "",
           "val_loss": last.get("val_loss", ""), "wer": last.get("val_wer", ""),
           "per": last.get("val_per", ""),
           "ms_per_step": "%.0f" % statistics.median(ms) if ms else "",
           "cpu_s": "%.0f" % res.cpu, "wall_s": "%.0f" % res.wall,
           "load_before": "%.1f" % res.load[0], "load_after": "%.1f" % res.load[1]}
    with open(os.path.join(paths.docs, name + ".row.json"), "w") as f:
        json.dump(relabel(row), f)
    return row


def run_part(paths, k, reuse, jobs=2):
    """Part k's runs two at a time (reuse: those without a kept row), then part<k>.csv."""
    H = target_entropy(paths.data)
    os.makedirs(paths.docs, exist_ok=True)
    runs = PARTS[k - 1]
    kept = {}
    for r in runs:
        path = os.path.join(paths.docs, run_name(*r) + ".row.json")
        if reuse and os.path.exists(path):
            kept[r] = json.load(open(path))
    todo = [r for r in runs if r not in kept]
    print("part %d: %d runs, %d kept, %d to run, %d at a time; unigram entropy %.4f nats"
          % (k, len(runs), len(kept), len(todo), jobs, H), flush=True)
    with cf.ThreadPoolExecutor(jobs) as ex:
        for r, row in zip(todo, ex.map(lambda r: execute(paths, H, *r), todo)):
            print("  %-18s %-8s val %-8s WER %-8s %5s s (CPU %s s)" % (
                run_name(*r), row["label"], row["val_loss"], row["wer"], row["wall_s"],
                row["cpu_s"]), flush=True)
            kept[r] = row
    with open(os.path.join(paths.docs, "part%d.csv" % k), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(kept[runs[0]]), lineterminator="\n")
        w.writeheader()
        w.writerows(kept[r] for r in runs)


# ---- the page --------------------------------------------------------------------------------

def relabel(row):
    """The decoder-only study's label, with one plateau more: a run that gets no validation word
    right (WER 100%) is stalled too, below the unigram line: its decoder models the phones and
    ignores the word (Post-LN with Xavier init at 18+18 sits at 2.88 nats that way)."""
    if row["label"] == "trained" and row.get("wer") and num(row["wer"]) >= 1.0:
        row["label"] = "stalled"
    return row


def kept_rows(docs):
    rows = {}
    for p in PLACEMENTS:
        for d in DEPTHS:
            for s in SEEDS:
                path = os.path.join(docs, run_name(p, d, s) + ".row.json")
                if os.path.exists(path):
                    rows[(p, d, s)] = relabel(json.load(open(path)))
    return rows


def curve(docs, name, column, suffix=".csv"):
    """(step, value) of a kept run's column (loss, val_loss of <name>.csv; update of
    <name>.update.csv), finite values only."""
    path = os.path.join(docs, name + suffix)
    rows = read_update(path) if suffix == ".update.csv" else read_metrics(path)
    return [(r.step, getattr(r, column)) for r in rows
            if getattr(r, column) is not None and math.isfinite(getattr(r, column))]


def cell(rows, p, d, key, pct=False):
    """Mean over the kept seeds (the spread: max - min), labels when not all trained."""
    mine = [rows[(p, d, s)] for s in SEEDS if (p, d, s) in rows]
    if not mine:
        return "not run"
    v = [num(r[key]) for r in mine if r["label"] != "diverged" and math.isfinite(num(r[key]))]
    f = (lambda x: "%.1f%%" % (100 * x)) if pct else (lambda x: "%.3f" % x)
    text = "-" if not v else f(statistics.mean(v)) + (" (%s)" % f(max(v) - min(v)) if len(v) > 1 else "")
    labels = [r["label"] + (" at %s" % r["diverged_at"] if r["diverged_at"] else "") for r in mine]
    if any(lab != "trained" for lab in labels):
        text += " " + ", ".join(labels)
    return text


def report(paths):
    H = target_entropy(paths.data)
    rows = kept_rows(paths.docs)
    docs_rel = os.path.relpath(paths.docs, os.path.dirname(paths.page))
    dl = (lambda d: "%d+%d" % (TINY_DEPTH[d], TINY_DEPTH[d])) if paths.tiny else (lambda d: "%d+%d" % (d, d))
    md = ["# Depth in an encoder-decoder: Post-LN, Pre-LN, DeepNorm", "",
          "Generated by `/usr/bin/python3 scripts/encdec_depth.py --report` from the files kept "
          "in [%s/](%s/) alone; the runs and their settings are in the script's docstring. "
          "DeepNet's 64-128-2 model on the G2P task (CMUdict 0.4, words split 90/5/5), %s steps "
          "of 32 words, the same optimiser for every placement (AdamW, lr 5e-4, 400 warmup steps "
          "then inverse-sqrt, clip 1), seeds %s; each placement with its own init (GPT-2's for "
          "Post-LN and Pre-LN, DeepNorm's), and *Post-LN, Xavier init* the control with the init "
          "of DeepNet's Post-LN baseline. Validation on 320 fixed words (greedy decoding for WER "
          "and PER)." % (docs_rel, docs_rel, (SMOKE if paths.tiny else SETTINGS)["--steps"],
                                  " and ".join(map(str, SEEDS))), "",
          "Unigram entropy of the target tokens: **%.4f** nats; a run is *stalled* if its final "
          "validation loss is >= %.4f, or if it gets no validation word right (WER 100%%: its "
          "decoder models the phones and ignores the word, a plateau below the unigram line), "
          "*diverged* if its loss became non-finite. %d of %d runs "
          "kept; \"not run\" marks the rest." % (H, H - STALL_MARGIN, len(rows),
                                                  len(PLACEMENTS) * len(DEPTHS) * len(SEEDS)), ""]
    for key, title, pct in (("val_loss", "Final validation loss (nats per token)", False),
                            ("wer", "Final validation WER", True),
                            ("per", "Final validation PER", True)):
        md += ["%s, mean over the seeds (spread), the labels when a run did not train:" % title, "",
               "| placement | " + " | ".join(dl(d) for d in DEPTHS) + " |",
               "|---|" + "---:|" * len(DEPTHS)]
        md += ["| %s | %s |" % (NAMES[p], " | ".join(cell(rows, p, d, key, pct) for d in DEPTHS))
               for p in PLACEMENTS]
        md.append("")
    md += ["Every run (train loss: the mean of the last five logged steps; time: wall seconds, "
           "the run's CPU seconds, the load average before -> after):", "",
           "| run | label | steps | train loss | val loss | WER | PER | ms/step | time |",
           "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for (p, d, s), r in sorted(rows.items(), key=lambda kv: (DEPTHS.index(kv[0][1]),
                                                              PLACEMENTS.index(kv[0][0]), kv[0][2])):
        md.append("| %s %s seed %d | %s | %s | %s | %s | %s | %s | %s | %s (CPU %s, %s -> %s) |" % (
            NAMES[p], dl(d), s, r["label"] + (" at %s" % r["diverged_at"] if r["diverged_at"] else ""),
            r["steps"], r["loss"] or "-", r["val_loss"] or "-",
            "%.1f%%" % (100 * num(r["wer"])) if r["wer"] else "-",
            "%.1f%%" % (100 * num(r["per"])) if r["per"] else "-", r["ms_per_step"],
            r["wall_s"], r["cpu_s"], r["load_before"], r["load_after"]))
    md += ["", "## Figures", ""]
    for d in DEPTHS:
        lines = []
        for p in PLACEMENTS:
            for s in SEEDS:
                if (p, d, s) not in rows:
                    continue
                name = run_name(p, d, s)
                lines.append(("%s s%d train" % (NAMES[p], s), COLORS[p], s, "l",
                              curve(paths.docs, name, "loss")))
                lines.append(("%s s%d val" % (NAMES[p], s), COLORS[p], s, "lp",
                              curve(paths.docs, name, "val_loss")))
        if lines:
            png = "loss-%d.png" % d
            plot_lines(os.path.join(paths.docs, png), "%s layers: loss against step" % dl(d),
                       "loss (nats per token)", lines +
                       [("unigram %.3f" % H, "black", 3, "l",
                         [(0, H), (max(x for ln in lines for x, _ in ln[4] or [(1, 0)]), H)])],
                       "set yrange [0:%g]" % (H + 1.5), WIDTHS)
            md += ["![%s loss](%s/%s)" % (dl(d), docs_rel, png), "",
                   "*%s: training loss (thin, one batch every 50 steps) and validation loss "
                   "(points); solid seed 1, dashed seed 2; black dotted: the unigram entropy.*"
                   % dl(d), ""]
    for d in DEPTHS:
        lines = [("%s s%d" % (NAMES[p], s), COLORS[p], s, "l",
                  [x for x in curve(paths.docs, run_name(p, d, s), "update", ".update.csv")
                   if x[0] > 0 and x[1] > 0])
                 for p in PLACEMENTS for s in SEEDS if (p, d, s) in rows]
        if any(x[4] for x in lines):
            png = "update-%d.png" % d
            plot_lines(os.path.join(paths.docs, png), "%s layers: model update "
                       "||F(x,θ_t) - F(x,θ_0)|| during the warmup" % dl(d),
                       "update (RMS per channel)", lines, "set logscale xy", WIDTHS)
            md += ["![%s update](%s/%s)" % (dl(d), docs_rel, png), "",
                   "*%s: DeepNet's model update, the decoder's final hidden state on 4 fixed "
                   "validation words against the init's, over the warmup (log scales).*" % dl(d), ""]
    last = int((SMOKE if paths.tiny else SETTINGS)["--diag-update-steps"])
    early = sorted({e for e in (10, 100, last) if e <= last})
    md += ["Model update at steps %s (seed 1; DeepNet's figure: Post-LN's update grows with depth "
           "early in training, DeepNorm's stays bounded):" % ", ".join(map(str, early)), "",
           "| placement | " + " | ".join("%s step %d" % (dl(d), e) for d in DEPTHS for e in early)
           + " |", "|---|" + "---:|" * (len(DEPTHS) * len(early))]
    for p in PLACEMENTS:
        cells = []
        for d in DEPTHS:
            u = dict(curve(paths.docs, run_name(p, d, 1), "update", ".update.csv")) \
                if (p, d, 1) in rows else {}
            cells += ["%.3g" % u[e] if e in u else "-" for e in early]
        md.append("| %s | %s |" % (NAMES[p], " | ".join(cells)))
    md.append("")
    with open(paths.page, "w") as f:
        f.write(with_notes(paths.page, "\n".join(md)))
    print("wrote %s (%d runs kept)" % (paths.page, len(rows)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true", help="the parts and their runs")
    ap.add_argument("--part", type=int, help="run part K (1 to %d)" % len(PARTS))
    ap.add_argument("--reuse", action="store_true",
                    help="run only the part's runs without a kept <run>.row.json")
    ap.add_argument("--report", action="store_true", help="the page from the kept files")
    ap.add_argument("--smoke", "--tiny", dest="smoke", action="store_true",
                    help="every part and the page, tiny, into --dir")
    ap.add_argument("--dir", default="/tmp/mt-encdec-depth", help="--smoke: where everything goes")
    a = ap.parse_args()
    if a.list:
        for k, part in enumerate(PARTS, 1):
            print("part %d: %s" % (k, ", ".join(run_name(*r) for r in part)))
        return 0
    if a.part is not None and not 1 <= a.part <= len(PARTS):
        sys.exit("--part %d: the parts are 1 to %d (--list names them)" % (a.part, len(PARTS)))
    if not os.path.exists(CMU):
        sys.exit("%s missing: apt-get install festlex-cmu" % CMU)
    build("build/train")
    if a.smoke:
        os.makedirs(a.dir, exist_ok=True)
        data = os.path.join(a.dir, "dict")
        with open(CMU, encoding="latin-1") as src, open(data, "w", encoding="latin-1") as dst:
            dst.writelines(line for _, line in zip(range(2000), src))
        paths = Paths(os.path.join(a.dir, "docs"), os.path.join(a.dir, "out"),
                      os.path.join(a.dir, "report.md"), data, True)
        for k in range(1, len(PARTS) + 1):
            run_part(paths, k, a.reuse)
        report(paths)
        return 0
    paths = Paths(os.path.join(ROOT, "docs", "encdec-depth"), os.path.join(ROOT, "out", "encdec-depth"),
                  os.path.join(ROOT, "docs", "encdec-depth.md"), CMU, False)
    if a.part:
        run_part(paths, a.part, a.reuse)
        report(paths)
    elif a.report:
        report(paths)
    else:
        ap.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
