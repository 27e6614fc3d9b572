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
  scripts/depth_study3.py muon     Muon at depth: Muon against AdamW on the 100-layer Post-LN,
                                   Pre-LN and DeepNorm configs, a short rate sweep, seed 1
                                   (--seed2 2e-2,...: those rates with seed 2 too)
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
    """Every Peri-LN output norm's weight (blocks.{i}.{attn,ffn}_out_norm.weight) := gain in a
    checkpoint of ./train's (safetensors: a u64 header size, the JSON header, then the tensors'
    bytes at their data_offsets; F32 little-endian). The edited file drops its checksums
    (metadata mt_crc32c, which no longer hold); mt reads it as it reads other writers' files."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = bytearray(f.read())
    header.get("__metadata__", {}).pop("mt_crc32c", None)
    for name, e in header.items():
        if name.endswith("_out_norm.weight"):
            assert e["dtype"] == "F32", name
            begin, end = e["data_offsets"]
            count = (end - begin) // 4
            data[begin:end] = struct.pack("<%df" % count, *[gain] * count)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(data))
    os.replace(path + ".tmp", path)


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


# ---- muon: Muon at depth (issue 31) -----------------------------------------------------------
# Self-contained: its own runs (BASE's flags with Muon's), skipped when their row exists.
# For a table of parts: {"runs": lambda part: [], "report": report_muon, "extra": muon_part}.

MUON_PLACEMENTS = ("post", "pre", "deepnorm")  # configs/deep100-{post,pre,deepnorm}.ini
# The blocks' matrices' rate, in the order the runs go; the other tensors stay AdamW at the
# config's 1e-3 (Muon's AdamW group: embeddings, the untied head, the norms). AdamW itself is the
# second round's rate sweep on the same configs, steps and seed (docs/depth-study-2/lr-100.csv,
# 3e-4 to 1e-2; seed 2 at the best rate in lr-seed2.csv), not run again.
MUON_RATES = ("2e-2", "1e-2", "5e-3", "5e-2")
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
    text += report_muon()
    with open(PAGE, "w") as f:
        f.write(with_notes(PAGE, "\n".join(text) + "\n"))
    print("depth_study3: wrote", PAGE)


def main():
    global OUT, DOCS, PAGE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("part", choices=["peri", "muon", "report"])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--seed2", default="", help="muon: the rates also run with seed 2 (2e-2,...)")
    a = ap.parse_args()
    os.chdir(ROOT)
    if a.smoke:
        SMOKE.update({"--n-layer": 3, "--steps": 20, "--eval-every": 10, "--warmup": 5})
        OUT, DOCS = "/tmp/mt-depth-study-3-smoke/out", "/tmp/mt-depth-study-3-smoke/docs"
        PAGE = DOCS + ".md"
    if a.part == "report":
        report()
    elif a.part == "muon":
        muon_part(seed2=a.seed2.split(","))
    else:
        run_part(a.part)


if __name__ == "__main__":
    main()
