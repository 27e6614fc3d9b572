#!/usr/bin/python3
"""Muon + WSD against AdamW on configs/g2p.ini at equal, shorter step counts, to choose the rates
of a Muon config for the 30-minute run (docs/optimizers.md): each candidate trains nice -n 10 on
one thread (its validation WER and PER do not depend on the load; its words/s do, and are kept
only as a rough ratio between rows run together), two at a time, and is a row of
bench/g2p/search.csv, written as it finishes and skipped when present. The validation figures are
./train's own at the last step (greedy decoding of the 5,283 validation words).

usage: bench/g2p/search.py [NAME ...]   (no name: every candidate below; needs make all)
"""
import csv
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from mtrun import evals, read_metrics, run_candidates  # noqa: E402

CSV = os.path.join(ROOT, "bench/g2p/search.csv")
OUT = os.path.join(ROOT, "out/g2p-search")
FIELDS = ["name", "flags", "steps", "val_loss", "wer", "per", "words_s", "load"]
SHORT = "--steps 1500 --warmup 150 --eval-every 1500"
MUON = "--optim muon --schedule wsd --decay-frac 0.3 --adam-lr 2e-3 "
# name: flags over configs/g2p.ini (AdamW 2e-3, cosine to 1e-5, weight decay 0.01)
CANDIDATES = {
    "adamw-1500": SHORT,
    "muon-2e-2-1500": SHORT + " " + MUON + "--muon-lr 0.02",
    "muon-4e-2-1500": SHORT + " " + MUON + "--muon-lr 0.04",
    "adamw-wsd-1500": SHORT + " --schedule wsd --decay-frac 0.3",
    "muon-1e-2-1500": SHORT + " " + MUON + "--muon-lr 0.01",
    # 0.01 won at the grid's low edge (44.1% WER against 49.3% at 0.02): one rate past it
    "muon-5e-3-1500": SHORT + " " + MUON + "--muon-lr 0.005",
}


def run_one(name):
    out = os.path.join(OUT, name)
    shutil.rmtree(out, ignore_errors=True)
    flags = CANDIDATES[name].split()
    with open(os.path.join(OUT, name + ".log"), "w") as log:
        subprocess.run(["nice", "-n", "10", "./train", "--config", "configs/g2p.ini", "--out", out,
                        "--threads", "1", "--save-every", "0"] + flags, cwd=ROOT, check=True,
                       stdout=log, stderr=subprocess.STDOUT)
    metrics = read_metrics(os.path.join(out, "metrics.csv"))
    last = evals(metrics)[-1]
    words = 128 * last.step / metrics[-1].elapsed_s
    return {"name": name, "flags": " ".join(flags), "steps": last.step,
            "val_loss": "%.4f" % last.val_loss, "wer": "%.4f" % last.val["wer"],
            "per": "%.4f" % last.val["per"], "words_s": "%.0f" % words,
            "load": open("/proc/loadavg").read().split()[0]}


def main():
    os.makedirs(OUT, exist_ok=True)
    have = {r["name"] for r in csv.DictReader(open(CSV))} if os.path.exists(CSV) else set()
    todo = [n for n in (sys.argv[1:] or CANDIDATES) if n not in have]
    run_candidates(todo, run_one, CSV, FIELDS)

if __name__ == "__main__":
    main()
