#!/usr/bin/python3
"""Depth in an encoder-decoder: Post-LN, Pre-LN and DeepNorm at 6+6, 18+18 and 50+50 layers on
the G2P task (CMUdict), in parts of at most an hour each, results kept as small CSVs.

  /usr/bin/python3 scripts/encdec_depth.py --list            the parts and their runs
  /usr/bin/python3 scripts/encdec_depth.py --part K          runs part K, writes its CSV
  /usr/bin/python3 scripts/encdec_depth.py --report          rebuilds the page from the CSVs
  /usr/bin/python3 scripts/encdec_depth.py --tiny --dir D    the whole pipeline on a tiny setting
                                                            (1+1 and 2+2 layers, 20 steps, the
                                                            dictionary's first 2,000 lines) in D

Every run is DeepNet's small model (Wang et al. 2022: width 64, FFN 128, 2 heads) with the same
optimiser settings for every placement (AdamW, lr 5e-4, 400 warmup steps, inverse-sqrt
schedule, clip 1.0, batch 32 words, STEPS steps), DeepNorm with the encoder-decoder constants of
the table in docs/layers.md and its init; the others the GPT-2 init. A run that stops on a
non-finite loss is recorded as diverged at the step it reached. Each part's CSV
(docs/encdec-depth/part<K>.csv: placement, enc, dec, steps reached, train loss, validation loss,
WER, PER, diverged, wall seconds, load before and after) is written when the part ends; the page
docs/encdec-depth.md is rebuilt from the CSVs alone. A part's runs are sized to take at most an
hour on 2 cores of this machine at the default steps (50+50 runs one to a part). Nothing of the
full sweep has been run yet: a later session runs the parts, one at a time.
"""
import argparse
import csv
import glob
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CMU = "/usr/share/festival/dicts/cmu/cmudict-0.4.out"
ENV = dict(os.environ, OMP_WAIT_POLICY="passive")
PLACEMENTS = ["post", "pre", "deepnorm"]
PARTS = [[(p, 6, 6) for p in PLACEMENTS] + [(p, 18, 18) for p in PLACEMENTS]] + \
        [[(p, 50, 50)] for p in PLACEMENTS]
TINY_PARTS = [[(p, 1, 1) for p in PLACEMENTS], [(p, 2, 2) for p in PLACEMENTS]]
COLUMNS = ["placement", "enc", "dec", "steps", "loss", "val_loss", "wer", "per", "diverged",
           "wall_s", "load_before", "load_after"]
STEP = re.compile(r"step\s+(\d+)/\d+ \| loss ([0-9.]+)")
EVAL = re.compile(r"\| val ([0-9.]+) wer ([0-9.]+) per ([0-9.]+)")


def train(placement, n, m, steps, data, out, tiny):
    args = ["build/train", "--model", "encdec", "--data", data, "--enc-layers", str(n),
            "--dec-layers", str(m), "--n-embd", "16" if tiny else "64", "--n-ff",
            "32" if tiny else "128", "--n-head", "2", "--placement", placement, "--optim",
            "adamw", "--lr", "5e-4", "--warmup", "5" if tiny else "400", "--schedule",
            "invsqrt", "--clip", "1.0", "--batch", "32", "--steps", str(steps),
            "--eval-every", "0", "--eval-batches", "4" if tiny else "40", "--log-every",
            "10" if tiny else "100", "--threads", "2", "--out", out]
    os.makedirs(out, exist_ok=True)
    l0, t0 = os.getloadavg()[0], time.time()
    with open(os.path.join(out, "train.log"), "w") as f:
        rc = subprocess.call(args, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=ENV)
    text = open(os.path.join(out, "train.log")).read()
    steps_seen = STEP.findall(text)
    ev = EVAL.findall(text)
    diverged = rc != 0 and "the loss is" in text
    if rc != 0 and not diverged:
        sys.exit(f"{placement} {n}+{m} failed (exit {rc}); see {out}/train.log")
    last = steps_seen[-1] if steps_seen else ("0", "nan")
    row = {"placement": placement, "enc": n, "dec": m,
           "steps": int(last[0]) + (1 if diverged else 0), "loss": last[1],
           "val_loss": ev[-1][0] if ev else "", "wer": ev[-1][1] if ev else "",
           "per": ev[-1][2] if ev else "", "diverged": int(diverged),
           "wall_s": f"{time.time() - t0:.0f}", "load_before": f"{l0:.1f}",
           "load_after": f"{os.getloadavg()[0]:.1f}"}
    print(f"  {placement} {n}+{m}: {row}", flush=True)
    return row


def run_part(k, parts, steps, data, csv_dir, out_dir, tiny):
    rows = [train(p, n, m, steps, data, os.path.join(out_dir, f"{p}-{n}-{m}"), tiny)
            for p, n, m in parts[k - 1]]
    os.makedirs(csv_dir, exist_ok=True)
    path = os.path.join(csv_dir, f"part{k}.csv")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {path}")


def report(csv_dir, page, steps, parts):
    rows = []
    for path in sorted(glob.glob(os.path.join(csv_dir, "part*.csv"))):
        rows += list(csv.DictReader(open(path)))
    depths = sorted({(int(r["enc"]), int(r["dec"])) for r in rows} |
                    {(n, m) for part in parts for _, n, m in part})
    by = {(r["placement"], int(r["enc"]), int(r["dec"])): r for r in rows}

    def cell(p, d, key):
        r = by.get((p, *d))
        if not r:
            return "not run"
        if r["diverged"] == "1":
            return f"diverged at step {r['steps']}"
        return f"{float(r[key]):.2%}" if key in ("wer", "per") else r[key]

    md = ["# Depth in an encoder-decoder: Post-LN, Pre-LN, DeepNorm", "",
          "Generated by `/usr/bin/python3 scripts/encdec_depth.py --report` from the CSVs in "
          f"[{os.path.basename(csv_dir)}/]({os.path.basename(csv_dir)}/) alone; the runs and "
          "their settings are in the script's docstring (DeepNet's 64-128-2 model on the G2P "
          f"task, {steps} steps, the same optimiser for every placement). Validation WER and "
          "PER (greedy) at the end of each run; \"not run\" marks the parts still to do.", ""]
    for key, title in (("wer", "Validation WER"), ("per", "Validation PER"),
                       ("val_loss", "Validation loss")):
        md += [f"{title}:", "", "| placement | " + " | ".join(f"{n}+{m}" for n, m in depths) +
               " |", "|---|" + "---:|" * len(depths)]
        md += [f"| {p} | " + " | ".join(cell(p, d, key) for d in depths) + " |"
               for p in PLACEMENTS]
        md.append("")
    md += ["Wall time (s) and load average before -> after:", "",
           "| placement | " + " | ".join(f"{n}+{m}" for n, m in depths) + " |",
           "|---|" + "---:|" * len(depths)]
    md += [f"| {p} | " + " | ".join(
        f"{by[(p, *d)]['wall_s']} ({by[(p, *d)]['load_before']} -> {by[(p, *d)]['load_after']})"
        if (p, *d) in by else "not run" for d in depths) + " |" for p in PLACEMENTS]
    md.append("")
    with open(page, "w") as f:
        f.write("\n".join(md))
    print(f"wrote {page}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--part", type=int)
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--dir", help="--tiny: where its CSVs, page and runs go")
    ap.add_argument("--steps", type=int, default=4000)
    a = ap.parse_args()
    if a.tiny:
        if not a.dir:
            sys.exit("--tiny needs --dir")
        subprocess.check_call(["make", "-s", "build/train"], cwd=ROOT)
        data = os.path.join(a.dir, "dict")
        os.makedirs(a.dir, exist_ok=True)
        with open(CMU) as src, open(data, "w") as dst:
            dst.writelines(line for _, line in zip(range(2000), src))
        for k in range(1, len(TINY_PARTS) + 1):
            run_part(k, TINY_PARTS, 20, data, os.path.join(a.dir, "csv"),
                     os.path.join(a.dir, "runs"), True)
        report(os.path.join(a.dir, "csv"), os.path.join(a.dir, "report.md"), 20, TINY_PARTS)
        return
    csv_dir, page = os.path.join(ROOT, "docs", "encdec-depth"), os.path.join(ROOT, "docs",
                                                                              "encdec-depth.md")
    if a.list:
        for k, part in enumerate(PARTS, 1):
            print(f"part {k}: " + ", ".join(f"{p} {n}+{m}" for p, n, m in part))
    elif a.part:
        if not 1 <= a.part <= len(PARTS):
            sys.exit(f"--part {a.part}: parts are 1 to {len(PARTS)}")
        subprocess.check_call(["make", "-s", "build/train"], cwd=ROOT)
        run_part(a.part, PARTS, a.steps, CMU, csv_dir, os.path.join(ROOT, "out", "encdec-depth"),
                 False)
        report(csv_dir, page, a.steps, PARTS)
    elif a.report:
        report(csv_dir, page, a.steps, PARTS)
    else:
        ap.print_help()


if __name__ == "__main__":
    main()
