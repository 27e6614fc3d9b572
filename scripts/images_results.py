#!/usr/bin/python3
"""Runs the image experiments of docs/images.md and writes that page.

  /usr/bin/python3 scripts/images_results.py [--fashion-steps N] [--jobs J] [--reuse]
                                               [--skip-mnist] [--skip-fashion]

- the preview grids of MNIST and Fashion-MNIST (./preview) into docs/images/;
- a ViT on the shipped MNIST test set (configs/vit-mnist.ini, 9,000 train / 1,000 validation)
  with --threads 2: its validation accuracy and wall time, against the target of 95% in 10 min;
- on Fashion-MNIST (configs/vit-fashion.ini) every norm (ln, rms, bn, gn, in) x every placement
  (pre, post, deepnorm): validation accuracy on the 10,000 test images and wall time; J runs at
  a time (each --threads 1 when J > 1).

Every run's full log stays in out/images/<name>/train.log, its figures in result.json there;
--reuse takes a finished run's figures from there instead of running it again (to build the
page in pieces). Timings depend on the machine's load,
which the page records (load average before and after each run). OMP_WAIT_POLICY=passive is set:
on a machine with more runnable threads than cores, OpenMP's default spinning made 2-thread runs
15-25x slower than 1-thread ones here.
"""
import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mtrun import ROOT, build, evals, progress_evals, read_metrics, run as run_train  # noqa: E402

FASHION = "/usr/share/datasets/fashion-mnist"
NORMS = ["ln", "rms", "bn", "gn", "in"]
PLACEMENTS = ["pre", "post", "deepnorm"]


def accuracies(text, metrics):
    """(step, validation accuracy) of each evaluation: metrics.csv's val_acc where it has the
    column, else the progress lines of the log (./train prints the accuracy; metrics.csv has no
    column for it)."""
    if any("acc" in e.val for e in evals(metrics)):
        return [(e.step, e.val["acc"]) for e in evals(metrics)]
    return [(step, v["acc"]) for step, v in progress_evals(text) if "acc" in v]


def parse(r):
    """The evaluations of a run (and its log's last error line) into r."""
    text = open(os.path.join(ROOT, r["log"])).read()
    metrics = evals(read_metrics(os.path.join(ROOT, os.path.dirname(r["log"]), "metrics.csv")))
    acc = accuracies(text, metrics)
    if metrics and acc:
        r["step"], r["val"], r["acc"] = metrics[-1].step, metrics[-1].val_loss, acc[-1][1]
        r["curve"] = acc
    if r["rc"] != 0:
        last = [l for l in text.splitlines() if l.startswith("train:")]
        r["error"] = last[-1] if last else f"exit status {r['rc']}"
    return r


def run(name, args, reuse):
    """./train with args; returns a dict of the final validation loss and accuracy, wall time,
    exit status and the load average before and after."""
    out = os.path.join("out", "images", name)
    saved = os.path.join(ROOT, out, "result.json")
    if reuse and os.path.exists(saved):
        r = json.load(open(saved))
        if r["args"] == args:
            print(f"{name}: reused {saved}", flush=True)
            r["reused"] = True
            return parse(r)
    log = os.path.join(out, "train.log")
    res = run_train(["./train"] + args + ["--out", out], os.path.join(ROOT, log), cwd=ROOT)
    rc, wall = res.rc, res.wall
    r = parse({"name": name, "args": args, "rc": rc, "wall": wall, "load": res.load, "log": log})
    print(f"{name}: rc {rc}, {wall:.0f} s, acc {r.get('acc', float('nan')):.4f}", flush=True)
    json.dump(r, open(saved, "w"))
    return r


def preview(data, out, extra=()):
    os.makedirs(os.path.join(ROOT, "docs", "images"), exist_ok=True)
    subprocess.check_call(["./preview", "--data", data, "--out", out, "--n", "36", "--scale", "2",
                           *extra], cwd=ROOT)


def fmt_time(s):
    return f"{int(s // 60)}:{int(s % 60):02d}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fashion-steps", type=int, default=1500)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--skip-mnist", action="store_true")
    ap.add_argument("--skip-fashion", action="store_true")
    a = ap.parse_args()
    build("train", "preview")
    nproc = os.cpu_count()

    preview("data/mnist", "docs/images/mnist-preview.png")
    have_fashion = os.path.exists(os.path.join(FASHION, "train-images-idx3-ubyte.gz"))
    if have_fashion:
        preview(FASHION, "docs/images/fashion-preview.png",
                ("--classes", "data/fashion-mnist-classes.txt"))

    mnist = None
    if not a.skip_mnist:
        mnist = run("mnist", ["--config", "configs/vit-mnist.ini", "--threads", "2"], a.reuse)

    fashion = []
    if not a.skip_fashion and have_fashion:
        threads = "1" if a.jobs > 1 else "2"
        cases = [(n, p) for p in PLACEMENTS for n in NORMS]
        with ThreadPoolExecutor(a.jobs) as ex:
            fashion = list(ex.map(lambda c: run(
                f"fashion-{c[0]}-{c[1]}",
                ["--config", "configs/vit-fashion.ini", "--norm", c[0], "--placement", c[1],
                 "--steps", str(a.fashion_steps), "--threads", threads], a.reuse), cases))

    md = ["# Images: ViT results", "",
          f"Generated by `{' '.join(['/usr/bin/python3 scripts/images_results.py'] + sys.argv[1:])}`"
          f" on {nproc} cores: the load average before and after each run is given, and the "
          "times are only as good as that load allows. `OMP_WAIT_POLICY=passive` was set (see "
          "the script's docstring). Every log is in `out/images/<run>/train.log`." +
          (" With --reuse, the figures of runs already made with the same arguments were read "
           "back from `out/images/<run>/result.json`: the load averages below are those of "
           "their own time." if a.reuse else ""), ""]
    md += ["## Datasets", "",
           "MNIST test set shipped in `data/mnist/` (`./preview --data data/mnist --n 36 --scale 2 "
           "--out docs/images/mnist-preview.png`):", "",
           "![MNIST preview](images/mnist-preview.png)", ""]
    if have_fashion:
        md += ["Fashion-MNIST from Debian's `dataset-fashion-mnist` (`./preview --data "
               f"{FASHION} --classes data/fashion-mnist-classes.txt --n 36 --scale 2 --out "
               "docs/images/fashion-preview.png`):", "",
               "![Fashion-MNIST preview](images/fashion-preview.png)", ""]
    if mnist:
        ok = mnist.get("acc", 0) >= 0.95 and mnist["wall"] <= 600 and mnist["rc"] == 0
        md += ["## MNIST: a small ViT on the shipped test set", "",
               "`./train --config configs/vit-mnist.ini --threads 2` (patch 7: 16 patches + the "
               "class token, 4 layers, 4 heads, n_embd 64, LayerNorm, pre; AdamW, lr 2e-3, "
               "cosine, batch 64, 3,000 steps; 9,000 training and 1,000 validation images split "
               "at random with the seed).", "",
               "| step | validation accuracy |", "|---:|---:|"]
        md += [f"| {s} | {acc:.4f} |" for s, acc in mnist.get("curve", [])]
        md += ["", f"Final validation accuracy **{mnist.get('acc', float('nan')):.4f}** after "
               f"{fmt_time(mnist['wall'])} (min:s, wall, loading and evaluation included; load "
               f"average {mnist['load'][0]:.1f} before, {mnist['load'][1]:.1f} after). Target "
               f">= 95% within 10 minutes on 2 cores: **{'met' if ok else 'NOT met'}**.", ""]
        if mnist["rc"] != 0:
            md += [f"The run failed: {mnist.get('error')}", ""]
    if fashion:
        md += ["## Fashion-MNIST: every norm x every placement", "",
               f"`./train --config configs/vit-fashion.ini --norm NORM --placement PLACEMENT "
               f"--steps {a.fashion_steps} --threads {threads}` ({a.jobs} run(s) at a time): the "
               "same ViT as for MNIST (GroupNorm with 4 groups of 16 channels per token), "
               f"{a.fashion_steps} steps of 64 images (about "
               f"{a.fashion_steps * 64 / 60000:.1f} epochs of the 60,000 training images), "
               "validation accuracy on the 10,000 test images at the end. One seed per cell: "
               "differences of a few tenths of a percent are within seed noise.", "",
               "Validation accuracy:", "",
               "| norm | " + " | ".join(PLACEMENTS) + " |",
               "|---|" + "---:|" * len(PLACEMENTS)]
        by = {r["name"]: r for r in fashion}

        def cell(n, p, key):
            r = by[f"fashion-{n}-{p}"]
            if r["rc"] != 0:
                return "diverged" if "loss is" in r.get("error", "") else f"failed ({r['rc']})"
            return f"{r['acc']:.4f}" if key == "acc" else fmt_time(r["wall"])

        for n in NORMS:
            md.append(f"| {n} | " + " | ".join(cell(n, p, "acc") for p in PLACEMENTS) + " |")
        done = {(n, p): by[f"fashion-{n}-{p}"]["acc"] for n in NORMS for p in PLACEMENTS
                if by[f"fashion-{n}-{p}"]["rc"] == 0}
        if done:
            (bn, bp), lo = max(done, key=done.get), min(done.values())
            wins = {p: sum(1 for n in NORMS if all((n, q) in done for q in PLACEMENTS) and
                           max(PLACEMENTS, key=lambda q: done[(n, q)]) == p) for p in PLACEMENTS}
            md += ["", f"Best cell: {bn} with {bp}, {done[(bn, bp)]:.4f}; all {len(done)} "
                   f"finished runs lie within {100 * (done[(bn, bp)] - lo):.1f} points. The best "
                   "placement per norm: " + ", ".join(f"{p} for {k}" for p, k in wins.items()) +
                   " (of the norms).", ""]
        md += ["", "Wall time (min:s; evaluation included) and load average before -> after:", "",
               "| norm | " + " | ".join(PLACEMENTS) + " |", "|---|" + "---:|" * len(PLACEMENTS)]
        for n in NORMS:
            md.append(f"| {n} | " + " | ".join(
                f"{cell(n, p, 'time')} ({by[f'fashion-{n}-{p}']['load'][0]:.0f} -> "
                f"{by[f'fashion-{n}-{p}']['load'][1]:.0f})" for p in PLACEMENTS) + " |")
        md += [""]
        failed = [r for r in fashion if r["rc"] != 0]
        for r in failed:
            md.append(f"- {r['name']}: {r.get('error')}")
        if failed:
            md.append("")
    path = os.path.join(ROOT, "docs", "images.md")
    with open(path, "w") as f:
        f.write("\n".join(md))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
