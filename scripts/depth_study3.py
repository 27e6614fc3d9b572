#!/usr/bin/env python3
"""The depth study, third round (the 2023-25 stability methods' claims): each part runs alone and
keeps what it measured as small files in docs/depth-study-3/<part>/; `report` writes
docs/depth-study-3.md from those files alone, so the page can be rebuilt from parts run in
different sessions. Byte-level tiny Shakespeare, DeepNet's 64-128-2 size, untied head.

  scripts/depth_study3.py peri     Peri-LN settled: does a PyTorch twin of the second round's
                                   100-layer Peri-LN run (same init, AdamW, clipping, schedule,
                                   its own batches) show the residual stream's growth from 45 to
                                   1130? What controls it: the output norms' initial gain, the
                                   rate, the depth (~25 min on 2 idle cores)
  scripts/depth_study3.py report   docs/depth-study-3.md from the parts on disk
  --smoke                          the part at 3 layers and 20 steps into /tmp (a check of the
                                   driver, not a result)

Runs go to out/depth-study-3/<part>/<run>/ (./train's own files); two run at once, one thread
each. The torch twin (tests/parity/torch_gpt.py's model, float32) needs Debian's python3-torch.
Python 3 standard library and gnuplot otherwise; runs ./train as built by make all.
"""
import argparse
import concurrent.futures as cf
import json
import math
import os
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from mtrun import (ROOT, byte_entropy, cpu_model, evals, label, plot_lines,  # noqa: E402
                   read_csv, read_metrics, read_resid, run, with_notes)

DOCS = os.path.join(ROOT, "docs/depth-study-3")
OUT = os.path.join(ROOT, "out/depth-study-3")
PAGE = os.path.join(ROOT, "docs/depth-study-3.md")
BASE = {"--config": "configs/deep100-pre.ini", "--n-layer": 100, "--steps": 400,
        "--eval-every": 50, "--eval-batches": 8, "--save-every": 0, "--log-every": 10,
        "--threads": 1, "--replicas": 1, "--seed": 1, "--diag-grad-every": 0,
        "--diag-update-steps": 0, "--diag-resid-every": 10}
SMOKE = {}  # --smoke: a few layers and steps
TWIN_STEPS = 100  # the torch twin's length: the growth happens in the first 50 steps


class Run:
    """One ./train run of a part; gain: the output norms' initial weight (Peri-LN), set in the
    step-0 checkpoint, from which the run resumes (it equals a run from scratch bit for bit)."""

    def __init__(self, part, name, placement="peri", lr="1e-3", layers=100, gain=1.0):
        self.part, self.name, self.placement, self.lr = part, name, placement, lr
        self.layers, self.gain = SMOKE.get("--n-layer", layers), gain
        self.dir = os.path.join(OUT, part, name)

    def flags(self):
        opts = {**BASE, **SMOKE, "--placement": self.placement, "--lr": self.lr,
                "--n-layer": self.layers}
        return [str(x) for kv in opts.items() for x in kv]

    def execute(self):
        shutil.rmtree(self.dir, ignore_errors=True)
        log = os.path.join(self.dir, "log.txt")
        res = run(["./train"] + self.flags() + ["--steps", "0", "--out", self.dir], log)
        if res.rc == 0 and self.gain != 1.0:
            set_out_gains(os.path.join(self.dir, "model.safetensors"), self.gain)
        if res.rc == 0:
            steps = SMOKE.get("--steps", BASE["--steps"])
            res = run(["./train", "--resume", "--out", self.dir, "--steps", str(steps)], log)
        self.rc, self.seconds = res.rc, res.wall
        return self

    def keep(self, H):
        """The run's curves into docs/<part>/<name>.{csv,resid.csv}; its summary row."""
        d = os.path.join(DOCS, self.part)
        os.makedirs(d, exist_ok=True)
        metrics = read_metrics(os.path.join(self.dir, "metrics.csv"))
        with open(os.path.join(d, self.name + ".csv"), "w") as f:
            f.write("step,loss,val_loss\n")
            for r in metrics:
                f.write("%d,%s,%s\n" % (r.step, fmt(r.loss), fmt(r.val_loss)))
        keep_resid(os.path.join(self.dir, "diag_resid.csv"), os.path.join(d, self.name),
                   self.layers)
        vals = {r.step: r.val_loss for r in evals(metrics)}
        log = open(os.path.join(self.dir, "log.txt")).read()
        row = {"name": self.name, "placement": self.placement, "lr": self.lr,
               "layers": self.layers, "gain": self.gain,
               "label": label(self.rc, metrics, H, log),
               "val_final": vals[max(vals)] if vals else "", "seconds": "%.0f" % self.seconds}
        with open(os.path.join(d, self.name + ".row.json"), "w") as f:
            json.dump(row, f)
        return row


def fmt(x):
    return "" if x is None else "%.6g" % x


def keep_resid(src, stem, layers):
    """The stream's norm entering the first, middle and last blocks and leaving the last."""
    keep = {0, layers // 2, layers - 1, layers}
    with open(stem + ".resid.csv", "w") as f:
        f.write("step,layer,norm\n")
        for r in read_resid(src):
            if r.layer in keep:
                f.write("%d,%d,%.6g\n" % (r.step, r.layer, r.norm))


def set_out_gains(path, gain):
    """Every Peri-LN output norm's weight (blocks.{i}.{attn,ffn}_out_norm.weight) := gain, in
    place, in a checkpoint of ./train's (safetensors: a u64 header size, the JSON header, then
    the tensors' bytes at their data_offsets; F32 little-endian)."""
    with open(path, "r+b") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        for name, e in header.items():
            if name.endswith("_out_norm.weight"):
                assert e["dtype"] == "F32", name
                begin, end = e["data_offsets"]
                f.seek(8 + n + begin)
                f.write(struct.pack("<%df" % ((end - begin) // 4), *[gain] * ((end - begin) // 4)))


def peri_runs(part):
    runs = [Run(part, "peri-L100-lr1e-3"), Run(part, "peri-L100-lr1e-3-gain0.3", gain=0.3),
            Run(part, "peri-L100-lr1e-3-gain0.1", gain=0.1),
            Run(part, "peri-L100-lr3e-4", lr="3e-4"), Run(part, "peri-L12-lr1e-3", layers=12),
            Run(part, "pre-L100-lr1e-3", placement="pre")]
    return runs


def twin(part, partner):
    """The torch twin from partner's step-0 weights: the stream entering the last block every
    10 steps, into docs/<part>/torch-<partner>.resid.csv."""
    steps = min(TWIN_STEPS, SMOKE.get("--steps", TWIN_STEPS))
    init = os.path.join(OUT, part, "init-" + partner.name + ".safetensors")
    # the partner's step-0 weights, written again: its own file holds the final ones by now
    res = run(["./train"] + partner.flags() + ["--steps", "0", "--out", init + ".d"],
              os.path.join(OUT, part, "twin-init.log"))
    if res.rc != 0:
        sys.exit("depth_study3: the twin's init run failed (%s)" % init)
    dst = os.path.join(DOCS, part, "torch-" + partner.name + ".resid.csv")
    subprocess.run(["/usr/bin/python3", os.path.join(HERE, "torch_twin.py"),
                    os.path.join(init + ".d", "model.safetensors"), str(partner.layers),
                    partner.placement, partner.lr, str(steps), dst], check=True, cwd=ROOT)


def run_part(part):
    H = byte_entropy()
    runs = peri_runs(part)
    os.makedirs(os.path.join(DOCS, part), exist_ok=True)
    with cf.ThreadPoolExecutor(2) as ex:
        done = [ex.submit(r.execute) for r in runs]
        torch_done = ex.submit(twin, part, runs[0])
        for f in done:
            f.result().keep(H)
        torch_done.result()


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
            "Generated by `scripts/depth_study3.py report` from docs/depth-study-3/ (CPU: %s); "
            "the hand-written reading is docs/depth-study-3.notes.md.\n" % cpu_model()]
    text += report_peri()
    with open(PAGE, "w") as f:
        f.write(with_notes(PAGE, "\n".join(text) + "\n"))
    print("depth_study3: wrote", PAGE)


def main():
    global OUT, DOCS, PAGE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("part", choices=["peri", "report"])
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    os.chdir(ROOT)
    if a.smoke:
        SMOKE.update({"--n-layer": 3, "--steps": 20, "--eval-every": 10, "--warmup": 5})
        OUT, DOCS = "/tmp/mt-depth-study-3-smoke/out", "/tmp/mt-depth-study-3-smoke/docs"
        PAGE = DOCS + ".md"
    if a.part == "report":
        report()
    else:
        run_part(a.part)


if __name__ == "__main__":
    main()
