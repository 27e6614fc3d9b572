#!/usr/bin/python3
"""The recipe search behind bench/nanogpt.sh's mt rows: configs/nanogpt-char.ini with each
optimizer's candidate flags (rate, schedule, batch, steps), trained and scored for its validation
loss only, which does not depend on the machine's load: nice -n 10, one thread, two runs at a
time. Each run is a row of bench/nanogpt/search.csv, written as it finishes and skipped when
present, so an interrupted search resumes. The recipe of each optimizer that bench/nanogpt.sh
times is the one with the fewest tokens (and, at equal tokens, cheapest steps) whose loss is at
most torch's recipe's (1.9086).

usage: bench/nanogpt/search.py [NAME ...]   (no name: every candidate below; needs make all)
"""
import csv
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from mtrun import run_candidates  # noqa: E402

CSV = os.path.join(ROOT, "bench/nanogpt/search.csv")
FIELDS = ["name", "flags", "steps", "batch", "val_loss", "train_s", "load"]
WSD = "--schedule wsd --warmup 50"
MUON = "--optim muon " + WSD
# name: flags over configs/nanogpt-char.ini (--steps and --batch among them)
CANDIDATES = {
    "muon-2e-2-500": MUON + " --muon-lr 0.02 --adam-lr 3e-3 --decay-frac 0.4 --steps 500",
    "muon-4e-2-400": MUON + " --muon-lr 0.04 --adam-lr 6e-3 --decay-frac 0.4 --steps 400",
    "muon-3e-2-400": MUON + " --muon-lr 0.03 --adam-lr 4e-3 --decay-frac 0.5 --steps 400",
    "muon-4e-2-b24-250": MUON + " --muon-lr 0.04 --adam-lr 6e-3 --decay-frac 0.5 --batch 24 "
                                "--steps 250",
    "muon-bf16-4e-2-400": MUON + " --muon-lr 0.04 --adam-lr 6e-3 --decay-frac 0.4 --steps 400 "
                                 "--precision bf16",
    "muon-4e-2-450": MUON + " --muon-lr 0.04 --adam-lr 6e-3 --decay-frac 0.4 --steps 450",
    "muon-bf16-4e-2-450": MUON + " --muon-lr 0.04 --adam-lr 6e-3 --decay-frac 0.4 --steps 450 "
                                 "--precision bf16",
    "muon-bf16-4e-2-500": MUON + " --muon-lr 0.04 --adam-lr 6e-3 --decay-frac 0.4 --steps 500 "
                                 "--precision bf16",
    "muon-bf16-2e-2-500": MUON + " --muon-lr 0.02 --adam-lr 3e-3 --decay-frac 0.4 --steps 500 "
                                 "--precision bf16",
    "muon-6e-2-400": MUON + " --muon-lr 0.06 --adam-lr 8e-3 --decay-frac 0.4 --steps 400",
    "muon-4e-2-a1e-2-400": MUON + " --muon-lr 0.04 --adam-lr 1e-2 --decay-frac 0.4 --steps 400",
    "muon-4e-2-d6-400": MUON + " --muon-lr 0.04 --adam-lr 6e-3 --decay-frac 0.6 --steps 400",
    "muon-4e-2-min0-400": MUON + " --muon-lr 0.04 --adam-lr 6e-3 --decay-frac 0.4 --min-lr 0 "
                                 "--steps 400",
    "muon-4e-2-b16-300": MUON + " --muon-lr 0.04 --adam-lr 6e-3 --decay-frac 0.4 --batch 16 "
                                "--steps 300",
    "adamw-3e-3-1000": WSD + " --lr 3e-3 --decay-frac 0.4 --steps 1000",
    "adamw-6e-3-800": WSD + " --lr 6e-3 --decay-frac 0.4 --steps 800",
    "lion-3e-4-1000": "--optim lion " + WSD + " --lr 3e-4 --weight-decay 1 --decay-frac 0.4 "
                                              "--steps 1000",
    "lion-1e-3-1000": "--optim lion " + WSD + " --lr 1e-3 --weight-decay 0.3 --decay-frac 0.4 "
                                              "--steps 1000",
    "lion-2e-3-1000": "--optim lion " + WSD + " --lr 2e-3 --weight-decay 0.15 --decay-frac 0.4 "
                                              "--steps 1000",
    "adamw-3e-3-1200": WSD + " --lr 3e-3 --decay-frac 0.4 --steps 1200",
    "lion-6e-4-800": "--optim lion " + WSD + " --lr 6e-4 --weight-decay 0.5 --decay-frac 0.4 "
                                             "--steps 800",
}


def done():
    if not os.path.exists(CSV):
        return {}
    return {r["name"]: r for r in csv.DictReader(open(CSV))}


def run_one(name):
    return score_row(name, CANDIDATES[name].split())


def score_row(name, flags):
    """configs/nanogpt-char.ini with flags (--steps among them) trained and scored on one thread
    at nice 10: a row of FIELDS, the loss over the whole validation split (./infer --score)."""
    with tempfile.TemporaryDirectory() as tmp:
        val = os.path.join(tmp, "val.txt")
        with open(os.path.join(ROOT, "data/tinyshakespeare.txt"), "rb") as f:
            f.seek(-111539, 2)  # the last 10%: ./train's validation split
            open(val, "wb").write(f.read())
        nice = ["nice", "-n", "10"]
        t0 = time.time()
        subprocess.run(nice + ["./train", "--config", "configs/nanogpt-char.ini", "--out",
                               tmp + "/out", "--threads", "1", "--eval-every", "0",
                               "--log-every", "100"] + flags, cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
        train_s = time.time() - t0
        score = subprocess.run(nice + ["./infer", "--checkpoint", tmp + "/out/model.safetensors",
                                       "--score", val, "--threads", "1"], cwd=ROOT, check=True,
                               capture_output=True, text=True).stdout
    loss = re.search(r"loss=([0-9.]+)", score).group(1)
    steps = flags[flags.index("--steps") + 1]
    batch = flags[flags.index("--batch") + 1] if "--batch" in flags else "12"
    return {"name": name, "flags": " ".join(flags), "steps": steps, "batch": batch,
            "val_loss": loss, "train_s": "%.0f" % train_s,
            "load": open("/proc/loadavg").read().split()[0]}


def has_bf16():
    """Whether ./train runs --precision bf16 here (oneDNN and a CPU with AVX512_BF16)."""
    with tempfile.TemporaryDirectory() as tmp:
        return subprocess.run(["./train", "--precision", "bf16", "--n-layer", "1", "--n-embd", "16",
                               "--n-head", "1", "--n-ctx", "8", "--batch", "2", "--steps", "1",
                               "--warmup", "0", "--threads", "1", "--out", tmp + "/out"],
                              cwd=ROOT, capture_output=True).returncode == 0


def main():
    names = sys.argv[1:] or list(CANDIDATES)
    todo = [n for n in names if n not in done()]
    if any("--precision bf16" in CANDIDATES[n] for n in todo) and not has_bf16():
        print("search: this build or CPU has no bf16 (./train --precision bf16 refused): "
              "the bf16 candidates are skipped")
        todo = [n for n in todo if "--precision bf16" not in CANDIDATES[n]]
    run_candidates(todo, run_one, CSV, FIELDS)

if __name__ == "__main__":
    main()
