#!/usr/bin/python3
"""The speedrun's record chain behind bench/speedrun.sh (issue 45). The target is the validation
loss of PyTorch's recipe (bench/nanogpt/torch_char.py: AdamW, cosine, 2000 steps). The chain
starts from mt's Muon recipe (bench/NANOGPT.md's mt-muon row); each piece of PIECES in turn is
added to the record so far and kept when it reaches the target in fewer steps. A recipe's steps
are the fewest on a grid of STEP whose runs reach the target with every seed of SEEDS, the loss
being that of ./infer --score over the whole validation split. Every run is a row of
bench/speedrun/search.csv: one thread, nice 10, two at a time; the loss does not depend on the
load, its seconds do. A search stopped part way resumes; the chain is replayed from the file
alone (replay()), so that bench/speedrun.sh and its report read the same records.

usage: bench/speedrun/search.py [--csv FILE] [--pieces A,B] [--target X] [--steps-scale K]
         run what the chain still needs (needs make all); --target: instead of torch's loss;
         --steps-scale K: every step count over K (a check of the script, not a result)
       bench/speedrun/search.py --records [...]   the records, `label steps flags` a line a seed
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from mtrun import load_module, read_csv, run_candidates  # noqa: E402

nanogpt_search = load_module("nanogpt_search", os.path.join(ROOT, "bench/nanogpt/search.py"))
FIELDS, score_row = nanogpt_search.FIELDS, nanogpt_search.score_row

CSV = os.path.join(HERE, "search.csv")
# flags over configs/nanogpt-char.ini: mt's Muon recipe, bench/nanogpt.sh's MUON at 500 steps
MUON = "--optim muon --muon-lr 0.04 --adam-lr 6e-3 --schedule wsd --decay-frac 0.4 --warmup %d"
BASE_STEPS, TORCH_STEPS, WARMUP, STEP, MIN_STEPS, SEEDS = 500, 2000, 50, 50, 100, (1, 2)
# the pieces in the order the GPU speedrun and nanochat took them up (docs/optimizers.md,
# docs/layers.md); a 4-block model's value embeddings: every block, modded-nanogpt's sharing
PIECES = {
    "normuon": "--normuon",
    "cautious-wd": "--cautious-wd",
    "polar": "--muon-ortho polar",
    "relu2": "--act relu2",
    "zero-init": "--zero-init-out",
    "softcap": "--logit-softcap 15",
    "value-embeds": "--value-embeds 0,1,-2,-1 --value-embeds-shared",
    "lambdas": "--layer-lambdas",
    "unet": "--unet",
}


def run_name(label, steps, seed):
    return "%s-%d-s%d" % (label, steps, seed)


class Chain:
    """The chain replayed from the search's rows (name -> row): records, [(label, steps,
    flags)], the recipe first; trials, one per piece tried: (piece, flags, losses at the
    record's steps, steps reached or None, kept); need, {name: flags} of the runs the next
    decision waits for (empty when the chain is complete)."""

    def __init__(self, rows, pieces, target, scale):
        self.rows, self.target, self.scale = rows, target, scale
        # torch's recipe in mt: the config's own flags (its warmup of 100 scaled with the steps)
        warmup = "" if scale == 1 else "--warmup %d" % (100 // scale)
        recipe = ("recipe", TORCH_STEPS // scale, warmup)
        self.records, self.trials, self.need = [recipe], [], {}
        self.walk(pieces)

    def losses(self, label, flags, steps):
        """Each seed's loss at steps, or None (and the runs noted as needed)."""
        out = []
        for seed in SEEDS:
            name = run_name(label, steps, seed)
            if name in self.rows:
                out.append(float(self.rows[name]["val_loss"]))
            else:
                self.need[name] = "%s --seed %d --steps %d" % (flags, seed, steps)
        return out if len(out) == len(SEEDS) else None

    def fewest(self, label, flags, start):
        """(losses at start, the fewest steps from start down that reach the target or None)."""
        at_start = self.losses(label, flags, start)
        if at_start is None or max(at_start) > self.target:
            return at_start, None
        steps, step = start, STEP // self.scale
        while steps - step >= MIN_STEPS // self.scale:
            lower = self.losses(label, flags, steps - step)
            if lower is None or max(lower) > self.target:
                break
            steps -= step
        return at_start, steps

    def walk(self, pieces):
        label, flags = "muon", MUON % (WARMUP // self.scale)
        _, steps = self.fewest(label, flags, BASE_STEPS // self.scale)
        if steps is None or self.need:
            return  # runs needed, or the Muon recipe misses the target: no record to build on
        self.records.append((label, steps, flags))
        for piece in pieces:
            tried = "%s+%s" % (label, piece)
            tried_flags = "%s %s" % (flags, PIECES[piece])
            at_record, reached = self.fewest(tried, tried_flags, steps)
            if self.need:
                return
            kept = reached is not None and reached < steps
            self.trials.append((piece, tried_flags, at_record, reached, kept))
            if kept:
                label, flags, steps = tried, tried_flags, reached
                self.records.append((piece, steps, flags))


def run_torch(steps):
    out = subprocess.run(["nice", "-n", "10", "/usr/bin/python3", "bench/nanogpt/torch_char.py",
                          "--steps", str(steps), "--threads", "1"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    r = json.loads(out)
    return {"name": "torch", "flags": "bench/nanogpt/torch_char.py", "steps": steps, "batch": 12,
            "val_loss": r["val_loss"], "train_s": "%.0f" % r["train_s"],
            "load": open("/proc/loadavg").read().split()[0]}


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", default=CSV)
    ap.add_argument("--pieces", default=",".join(PIECES))
    ap.add_argument("--target", type=float)
    ap.add_argument("--steps-scale", type=int, default=1)
    ap.add_argument("--records", action="store_true")
    a = ap.parse_args(argv)
    a.pieces = [p for p in a.pieces.split(",") if p]
    bad = [p for p in a.pieces if p not in PIECES]
    if bad:
        ap.error("no piece %s; the pieces: %s" % (",".join(bad), ",".join(PIECES)))
    return a


def replay(a):
    """(rows, target, chain) of the search a names; the chain None while the target is unknown:
    torch's recipe's loss (the row `torch`) unless --target says."""
    rows = {r["name"]: r for r in read_csv(a.csv)}
    target = a.target or (float(rows["torch"]["val_loss"]) if "torch" in rows else None)
    return rows, target, target and Chain(rows, a.pieces, target, a.steps_scale)


def main():
    a = parse(sys.argv[1:])
    while True:
        rows, target, chain = replay(a)
        if chain is None:
            if a.records:
                sys.exit("search: %s has no torch row: run the search first" % a.csv)
            run_candidates(["torch"], lambda _: run_torch(TORCH_STEPS // a.steps_scale), a.csv,
                           FIELDS)
            continue
        if a.records:
            if chain.need:
                sys.exit("search: the chain in %s is not complete (%d runs to go)" %
                         (a.csv, len(chain.need)))
            for label, steps, flags in chain.records:
                for seed in SEEDS:
                    print(label, steps, flags, "--seed", seed)
            return
        if not chain.need:
            print("search: the chain is complete: %s" % " -> ".join(
                "%s %d" % (label, steps) for label, steps, _ in chain.records))
            return
        run_candidates(list(chain.need), lambda n: score_row(n, chain.need[n].split()), a.csv,
                       FIELDS)


if __name__ == "__main__":
    main()
