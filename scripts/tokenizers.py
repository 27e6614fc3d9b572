#!/usr/bin/env python3
"""Tokenizers compared at the same training time: the quickstart's model (configs/tiny-gpt.ini)
trained with the byte, char, BPE-512 and BPE-2048 tokenizers on tiny Shakespeare, scored in bits
per byte on the same validation text, written to docs/tokenizers.md.

  scripts/tokenizers.py              the four runs (~5 minutes on 2 cores), then the document
  scripts/tokenizers.py --report     the document again from the runs on disk (out/tokenizers)

Same time: the byte run takes the config's 1000 steps, every other tokenizer
round(1000 * byte ms / its ms) steps, where ms is the time of one training step (a larger
vocabulary makes the head, the softmax and the embedding dearer): so every run spends what the
byte run spends in training steps. On a machine shared with other work the time of a step
moves with the load, so it is measured apart, before the runs: ROUNDS rounds that each run
CALIBRATE steps of every tokenizer in turn; a tokenizer's ms is the smallest of its rounds'
medians (the least disturbed). The steps are the only difference: the same model, batch (32 windows of n_ctx = 64 tokens), learning rate,
schedule (cosine over the run's steps, 50 warmup steps) and seed, validation only at the end.
A window of 64 BPE tokens spans more text than one of 64 bytes: that is part of what a
tokenizer buys, and is counted.

Same validation text: ./train holds out the last tenth of the file's bytes for every tokenizer
(BPE learns its merges from the rest); ./infer --score scores exactly those bytes (111,539),
each run with its own tokenizer, and prints bits per byte = nats / ln 2 / bytes predicted.
The runs wait passively at OpenMP barriers (OMP_WAIT_POLICY=passive unless set): on a shared
machine a spinning thread costs more than the work it waits for. Python 3 standard library;
runs ./train and ./infer as built by make all."""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mtrun import ENV, cpu_model, log_field, read_metrics, run, scores  # noqa: E402

DATA = "data/tinyshakespeare.txt"
CONFIG = "configs/tiny-gpt.ini"
BASE_STEPS = 1000
CALIBRATE = 60
ROUNDS = 3
RUNS = [("byte", ["--tokenizer", "byte"]), ("char", ["--tokenizer", "char"]),
        ("bpe-512", ["--tokenizer", "bpe", "--vocab-size", "512"]),
        ("bpe-2048", ["--tokenizer", "bpe", "--vocab-size", "2048"])]


def train(out, flags, steps, threads):
    """Runs ./train; returns (wall seconds, CPU seconds)."""
    cmd = ["./train", "--config", CONFIG, "--out", out, "--steps", str(steps),
           "--eval-every", "0", "--save-every", "0", "--threads", str(threads)] + flags
    res = run(cmd, os.path.join(out, "train.log"))
    if res.rc != 0:
        sys.exit(f"tokenizers: {' '.join(cmd)} exited {res.rc}: see {out}/train.log")
    return res.wall, res.cpu, " ".join(cmd)


def ms_per_step(out):
    """The median of metrics.csv's per-step milliseconds (the logged steps but the first)."""
    return statistics.median(r.ms for r in read_metrics(os.path.join(out, "metrics.csv"))[1:])


def score(out, val):
    return scores(["./infer", "--checkpoint", os.path.join(out, "model.safetensors"), "--score",
                   val, "--threads", "2"])


def log_text(out):
    with open(os.path.join(out, "train.log")) as f:
        return f.read()


def data_line(out):
    """The data line's description, after the file's name."""
    line = log_field(log_text(out), "data")
    return line.split(": ", 1)[1].strip() if line else "?"


def params(out):
    """"0.221M" from the model line."""
    line = log_field(log_text(out), "model")
    return line.rsplit(": ", 1)[1].split()[0] if line else "?"


def run_all(root, threads):
    os.makedirs(root, exist_ok=True)
    with open(DATA, "rb") as f:
        text = f.read()
    val = os.path.join(root, "val.txt")
    with open(val, "wb") as f:
        f.write(text[len(text) - int(len(text) * 0.1):])
    study = {"load_start": open("/proc/loadavg").read().split()[:3], "runs": {}}
    t_start = time.time()
    calib = {name: [] for name, _ in RUNS}
    for k in range(ROUNDS):
        for name, flags in RUNS:
            out = os.path.join(root, "calibrate", name)
            train(out, flags + ["--log-every", "5"], CALIBRATE, threads)
            calib[name].append(ms_per_step(out))
        print(f"calibration round {k + 1}: " +
              ", ".join(f"{n} {v[-1]:.1f} ms" for n, v in calib.items()), flush=True)
    for name, flags in RUNS:
        out = os.path.join(root, name)
        r = {"flags": flags, "calibrate_ms": min(calib[name]), "calibrate_all": calib[name]}
        r["steps"] = round(BASE_STEPS * min(calib["byte"]) / r["calibrate_ms"])
        print(f"{name}: {r['steps']} steps", flush=True)
        r["wall"], r["cpu"], r["command"] = train(out, flags, r["steps"], threads)
        r["ms"] = ms_per_step(out)
        r["score"] = score(out, val)
        r["data"] = data_line(out)
        r["params"] = params(out)
        print(f"{name}: {r['wall']:.0f} s, bpb {r['score']['bpb']:.4f}", flush=True)
        study["runs"][name] = r
    study["seconds"] = time.time() - t_start
    study["load_end"] = open("/proc/loadavg").read().split()[:3]
    study["cpu"] = cpu_model()
    study["cpus"] = os.cpu_count()
    study["threads"] = threads
    study["val_bytes"] = os.path.getsize(val)
    study["train_bytes"] = len(text) - study["val_bytes"]
    study["omp_wait_policy"] = ENV["OMP_WAIT_POLICY"]
    with open(os.path.join(root, "study.json"), "w") as f:
        json.dump(study, f, indent=1)
    return study


def report(study, root):
    p = []
    p.append("# Tokenizers at the same training time\n")
    p.append("Generated by `scripts/tokenizers.py` (do not edit by hand): the quickstart's model "
             "([configs/tiny-gpt.ini](../configs/tiny-gpt.ini): 4 layers, n_embd 64, n_ctx 64, "
             "batch 32) trained on tiny Shakespeare with each tokenizer for about the time of "
             f"the byte run's {BASE_STEPS} steps, then scored on the same validation text.\n")
    p.append(f"- machine: {study['cpu']}, {study['cpus']} CPUs, {study['threads']} threads per "
             f"run, OMP_WAIT_POLICY={study['omp_wait_policy']}; load average {' '.join(study['load_start'])} at the start, "
             f"{' '.join(study['load_end'])} at the end (a shared machine: times are noisy); "
             f"{study['seconds'] / 60:.1f} minutes in all")
    p.append(f"- command: `python3 scripts/tokenizers.py` (runs in `{root}`); each run is "
             "`./train --config configs/tiny-gpt.ini --steps N --eval-every 0 --save-every 0 "
             "--threads 2` plus its tokenizer flags, then `./infer --checkpoint ... --score "
             "val.txt`")
    p.append(f"- steps: the byte run takes {BASE_STEPS}, every other run round({BASE_STEPS} x "
             f"byte ms / its ms), ms being a training step's time measured before the runs: "
             f"{ROUNDS} rounds of {CALIBRATE} steps of each tokenizer in turn, the smallest of "
             "a tokenizer's medians (the column 'calibrated ms'); 'ms per step' is the median "
             "of the run itself, under whatever else the machine ran then")
    p.append(f"- validation text: the file's last {study['val_bytes']:,} bytes, held out of "
             "training by every tokenizer (BPE learns its merges from the rest); bits per byte "
             "= nats / ln 2 / bytes predicted, by `./infer --score` (consecutive windows of "
             "n_ctx + 1 tokens: a window's first token is context only, its bytes not counted)")
    p.append("")
    p.append("| tokenizer | vocabulary | parameters | bytes per token (val) | calibrated ms | "
             "steps | ms per step | wall time, s | CPU time, s | text seen in training, MB | "
             "val loss per token | **val bits per byte** |")
    p.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, _ in RUNS:
        r = study["runs"][name]
        s = r["score"]
        bpt = s["bytes"] / s["tokens"]
        vocab = r["data"].split("vocabulary ")[1].split(")")[0]
        train_tokens = int(r["data"].split("train ")[1].split(",")[0])
        seen = r["steps"] * 32 * 64 * study["train_bytes"] / train_tokens / 1e6
        p.append(f"| {name} | {vocab} | {r['params']} | {bpt:.2f} | {r['calibrate_ms']:.1f} | "
                 f"{r['steps']} | "
                 f"{r['ms']:.1f} | {r['wall']:.0f} | {r['cpu']:.0f} | {seen:.1f} | "
                 f"{s['loss']:.4f} | **{s['bpb']:.4f}** |")
    p.append("")
    p.append("Wall time includes loading (BPE learns its merges then, in about 0.02 s) and the "
             "final validation; CPU time is both threads' (user + system), steadier than wall "
             "time on a shared machine. \"Text seen\" is steps x 32 x 64 tokens x the training "
             "part's bytes per token (the training part compresses better than the validation "
             "text, whose merges it did not learn from). A window of 64 tokens spans 64 bytes "
             "of text for byte and char and about 64 x bytes per token for BPE: a longer "
             "context for the same compute is part of what BPE buys. The data lines of the "
             "runs:\n")
    for name, _ in RUNS:
        p.append(f"- {name}: {study['runs'][name]['data']}")
    p.append("")
    return "\n".join(p)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default="out/tokenizers")
    ap.add_argument("--doc", default="docs/tokenizers.md")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--report", action="store_true", help="the document from the runs on disk")
    a = ap.parse_args()
    if a.report:
        with open(os.path.join(a.root, "study.json")) as f:
            study = json.load(f)
    else:
        study = run_all(a.root, a.threads)
    with open(a.doc, "w") as f:
        f.write(report(study, a.root))
    print(f"wrote {a.doc}")


if __name__ == "__main__":
    main()
