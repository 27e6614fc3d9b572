#!/usr/bin/env python3
"""The GCIDE scale run (docs/scale.md): Debian's dict-gcide turned into text, mt's BPE of 8192
tokens learnt on it, llm.c token shards, and a 17.3M-parameter LLaMA (configs/gcide-llama.ini)
trained with --recompute block and --grad-accum 4, in parts of at most an hour.

  scripts/scale_run.py               the next part: text, BPE and shards when missing, then up to
                                     --part-minutes of training (resumed from the checkpoint),
                                     its CSVs copied into docs/scale/, docs/scale.md written
  scripts/scale_run.py --bench       peak RSS and tokens/s of short runs of the same model with
                                     --recompute none and block (docs/scale/bench.csv), the page
  scripts/scale_run.py --report      docs/scale.md again from docs/scale/*.csv

The big files live in --root (default /work/runs/gcide, outside the repository): text.txt,
shards/ (llm.c shards and meta.json) and run/ (the checkpoint, metrics.csv, a log per part). A
part is ./train with the config's --steps for the whole run: the first part starts it, a later
one resumes it (--resume); a part still running at its deadline (or at the first checkpoint
--part-steps on) is killed, and the next resumes from the last checkpoint (every 10 steps; the
schedule, sampler and RNG continue exactly: tests/test_scale.sh). A part runs a copy of ./train
(root/train), so that make may rebuild ./train meanwhile. After each part the small files go to
docs/scale/:
  prep.csv     the text, the BPE and the shards: sizes, seconds, tokens, the CPU
  run.csv      the first part's command and ./train's lines on its data, model and training
  metrics.csv  ./train's metrics up to the checkpoint: loss, validation loss, tokens/s per step
  parts.csv    a row per part: steps, wall and CPU seconds, peak RSS, load, threads
  bench.csv    --bench: a row per (recompute, threads): tokens/s, peak RSS, arena, load
so the page can be rebuilt (--report) and the run continued from any later session; the
hand-written docs/scale.notes.md is appended to the page.

Training runs at nice 10 with --threads 1 (a loss is the result; the machine is shared); tokens/s
is only meaningful on a quiet machine: bench.csv records the load next to it. --text,
--text-bytes, --vocab-size, --shard-tokens and --train-flags shrink the pipeline for
tests/test_scale.sh.
Python 3 standard library and gnuplot; runs ./train as built by make all."""
import argparse
import csv
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mtrun import (ENV, ROOT, ckpt_meta, ckpt_step, cpu_model, gnuplot, header,  # noqa: E402
                   read_csv, read_metrics, with_notes, write_dat)

CONFIG = "configs/gcide-llama.ini"
TRAIN = os.path.join(ROOT, "train")
NICE = 10
METRIC_COLUMNS = ["step", "loss", "val_loss", "lr", "grad_norm", "ms", "tok_per_s"]
PART_COLUMNS = ["part", "start_step", "end_step", "steps", "finished", "wall_s", "cpu_s",
                "peak_rss_mib", "load_start", "load_end", "threads", "started"]
BENCH_COLUMNS = ["recompute", "threads", "steps", "tok_per_s", "ms_per_step", "peak_rss_mib",
                 "arena_peak_mib", "load_start", "load_end", "started"]


def write_csv(path, columns, rows):
    """rows (dicts) as a CSV file of those columns, written whole then renamed."""
    with open(path + ".tmp", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(columns)
        w.writerows([r.get(c, "") for c in columns] for r in rows)
    os.replace(path + ".tmp", path)


def load1():
    return "%.2f" % os.getloadavg()[0]


def now():
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime())


def timed(cmd, log, timeout=None, stop=None):
    """Runs cmd at nice NICE, output into log; kills it after timeout seconds or once stop()
    holds. Returns (exit status, wall s, CPU s, peak RSS MiB, load before, load after). The peak
    RSS is the child's ru_maxrss (wait4), which a kill leaves intact."""
    os.makedirs(os.path.dirname(log), exist_ok=True)
    l0, t0 = load1(), time.time()
    with open(log, "a") as f:
        f.write("$ %s\n" % " ".join(cmd))
        f.flush()
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=ENV, cwd=ROOT,
                             preexec_fn=lambda: os.nice(NICE))
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if (timeout is not None and time.time() - t0 > timeout) or (stop and stop()):
                p.kill()
                _, status, usage = os.wait4(p.pid, 0)
                break
            time.sleep(0.2)
    return (os.waitstatus_to_exitcode(status), time.time() - t0, usage.ru_utime + usage.ru_stime,
            usage.ru_maxrss / 1024.0, l0, load1())


# ---- the data --------------------------------------------------------------------------------

def make_text(args, root):
    """root/text.txt: GCIDE's text (or --text), cut to --text-bytes at a line's end."""
    path = os.path.join(root, "text.txt")
    if os.path.exists(path):
        return path, None
    t0 = time.time()
    if args.text:
        with open(args.text, "rb") as f:
            data = f.read()
    else:
        subprocess.check_call([sys.executable, os.path.join(ROOT, "scripts/gcide_text.py"),
                               "-o", path + ".full"])
        with open(path + ".full", "rb") as f:
            data = f.read()
        os.remove(path + ".full")
    if args.text_bytes and len(data) > args.text_bytes:
        data = data[:data.rfind(b"\n", 0, args.text_bytes) + 1]
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)
    return path, time.time() - t0


def prepare(args, root, docs):
    """root/shards: the text's BPE and llm.c shards (./train --prepare --format llmc); the
    figures into docs/prep.csv. Kept when there."""
    shards = os.path.join(root, "shards")
    if os.path.exists(os.path.join(shards, "meta.json")):
        return shards
    text, text_s = make_text(args, root)
    shutil.rmtree(shards, ignore_errors=True)
    cmd = [TRAIN, "--data", text, "--tokenizer", "bpe", "--vocab-size", str(args.vocab_size),
           "--prepare", shards, "--format", "llmc", "--shard-tokens", str(args.shard_tokens),
           "--threads", "1"]
    rc, wall, cpu, rss, l0, l1 = timed(cmd, os.path.join(root, "prepare.log"))
    if rc != 0:
        sys.exit("scale_run: %s exited %d: see %s/prepare.log" % (" ".join(cmd), rc, root))
    files = sorted(os.listdir(shards))
    count = {k: sum((os.path.getsize(os.path.join(shards, f)) - 1024) // 2 for f in files
                    if f.startswith(k) and f.endswith(".bin")) for k in ("train", "val")}
    text_bytes = os.path.getsize(text)
    rows = [("text", "GCIDE (dict-gcide)" if not args.text else os.path.basename(args.text)),
            ("text_bytes", text_bytes), ("text_s", "%.1f" % text_s if text_s else ""),
            ("vocab_size", args.vocab_size), ("prepare_s", "%.1f" % wall),
            ("prepare_cpu_s", "%.1f" % cpu), ("prepare_peak_rss_mib", "%.0f" % rss),
            ("prepare_load", l0), ("tokens", count["train"] + count["val"]),
            ("train_tokens", count["train"]), ("val_tokens", count["val"]),
            ("bytes_per_token", "%.3f" % (text_bytes / (count["train"] + count["val"]))),
            ("shard_tokens", args.shard_tokens),
            ("train_shards", sum(f.startswith("train") for f in files)),
            ("val_shards", sum(f.startswith("val") for f in files)), ("cpu", cpu_model()),
            ("cpus", os.cpu_count()), ("date", now())]
    write_csv(os.path.join(docs, "prep.csv"), ["key", "value"],
              [{"key": k, "value": v} for k, v in rows])
    return shards


# ---- training --------------------------------------------------------------------------------

def copy_metrics(run, docs):
    """docs/metrics.csv: run/metrics.csv's rows up to the checkpoint's step (a resume drops the
    rows after it), METRIC_COLUMNS only."""
    step = ckpt_step(os.path.join(run, "model.safetensors"))
    rows = [r.text for r in read_metrics(os.path.join(run, "metrics.csv")) if r.step <= step]
    write_csv(os.path.join(docs, "metrics.csv"), METRIC_COLUMNS, rows)


def total_steps(run):
    """--steps of the run, from the checkpoint's saved options."""
    options = ckpt_meta(os.path.join(run, "model.safetensors"))["options"]
    return int([o for o in options.splitlines() if o.startswith("steps")][0].split("=")[1])


def save_run_lines(run, docs):
    """docs/run.csv: the first part's command and what ./train said of the data, the model and
    the training (its lines "data ...", "model ...", "train ...")."""
    with open(os.path.join(run, "part-1.log")) as f:
        lines = f.read().splitlines()
    said = {line.split()[0]: line.split(None, 1)[1].strip() for line in lines
            if line.split()[:1] in (["data"], ["model"], ["train"])}
    said["command"] = lines[0][2:].replace(ROOT + "/", "")  # timed's "$ cmd" line
    write_csv(os.path.join(docs, "run.csv"), ["key", "value"],
              [{"key": k, "value": said.get(k, "")} for k in ("data", "model", "train", "command")])


def train_part(args, root, docs, shards):
    """One part: at most --part-minutes of ./train, started or resumed; a row in parts.csv."""
    run = os.path.join(root, "run")
    ckpt = os.path.join(run, "model.safetensors")
    start = ckpt_step(ckpt)
    if start and start >= total_steps(run):
        print("scale_run: the run is complete (%d steps)" % start)
        return
    parts = read_csv(os.path.join(docs, "parts.csv"))
    train = os.path.join(root, "train")  # a copy: make may rebuild ./train meanwhile
    shutil.copy2(TRAIN, train)
    if start:
        cmd = [train, "--resume", "--out", run, "--threads", str(args.threads)]
    else:  # a new run: nothing of an older one stays
        shutil.rmtree(run, ignore_errors=True)
        for f in ("parts.csv", "metrics.csv", "run.csv"):
            if os.path.exists(os.path.join(docs, f)):
                os.remove(os.path.join(docs, f))
        parts = []
        cmd = [train, "--config", CONFIG, "--data", shards, "--out", run, "--threads",
               str(args.threads)] + args.train_flags.split()
    part = len(parts) + 1
    print("scale_run: part %d from step %d, at most %g minutes: %s"
          % (part, start, args.part_minutes, " ".join(cmd)), flush=True)
    started = now()

    def stop():  # --part-steps: once a checkpoint that far is written
        return args.part_steps and ckpt_step(ckpt) >= start + args.part_steps

    rc, wall, cpu, rss, l0, l1 = timed(cmd, os.path.join(run, "part-%d.log" % part),
                                       args.part_minutes * 60, stop)
    end = ckpt_step(ckpt)
    finished = rc == 0 and end == total_steps(run)
    if rc != 0 and rc != -9:
        sys.exit("scale_run: ./train exited %d: see %s/part-%d.log" % (rc, run, part))
    parts.append({"part": part, "start_step": start, "end_step": end, "steps": total_steps(run),
                  "finished": int(finished), "wall_s": "%.0f" % wall, "cpu_s": "%.0f" % cpu,
                  "peak_rss_mib": "%.0f" % rss, "load_start": l0, "load_end": l1,
                  "threads": args.threads, "started": started})
    write_csv(os.path.join(docs, "parts.csv"), PART_COLUMNS, parts)
    copy_metrics(run, docs)
    if not os.path.exists(os.path.join(docs, "run.csv")):
        save_run_lines(run, docs)
    print("scale_run: part %d: steps %d to %d of %d in %.0f s, peak RSS %.0f MiB"
          % (part, start, end, total_steps(run), wall, rss), flush=True)


def bench(args, root, docs, shards):
    """--bench-steps steps of the run's model with --recompute none, then block, at --threads:
    peak RSS (ru_maxrss) and the median tokens/s of the steps after the first, with the load;
    a row per (recompute, threads) in bench.csv, replacing an older one. One micro-batch per
    step (--grad-accum 1): accumulation keeps no state of its own, the peak RSS is the same
    (measured: 4 layers, n_embd 128, K = 1 and 4 within 0.1 MiB), and a step is 4 times
    shorter."""
    rows = [r for r in read_csv(os.path.join(docs, "bench.csv"))
            if r["threads"] != str(args.threads)]
    for recompute in ("none", "block"):
        out = os.path.join(root, "bench-%s" % recompute)
        shutil.rmtree(out, ignore_errors=True)
        cmd = [TRAIN, "--config", CONFIG, "--data", shards, "--out", out, "--recompute",
               recompute, "--threads", str(args.threads), "--steps", str(args.bench_steps),
               "--warmup", "0", "--eval-every", "0", "--eval-batches", "1",
               "--save-every", "0", "--grad-accum", "1"] + args.train_flags.split()
        started = now()
        rc, wall, cpu, rss, l0, l1 = timed(cmd, os.path.join(root, "bench.log"))
        if rc != 0:
            sys.exit("scale_run: %s exited %d: see %s/bench.log" % (" ".join(cmd), rc, root))
        with open(os.path.join(root, "bench.log")) as f:
            arena = re.findall(r"arena peak ([0-9.]+) MiB", f.read())[-1]
        steps = read_metrics(os.path.join(out, "metrics.csv"))
        tail = steps[1:] or steps
        rows.append({"recompute": recompute, "threads": args.threads, "steps": len(steps),
                     "tok_per_s": "%.0f" % statistics.median(r.tok_per_s for r in tail),
                     "ms_per_step": "%.0f" % statistics.median(r.ms for r in tail),
                     "peak_rss_mib": "%.0f" % rss, "arena_peak_mib": arena, "load_start": l0,
                     "load_end": l1, "started": started})
        shutil.rmtree(out)
        print("scale_run: --recompute %s, %d threads: %s tokens/s, peak RSS %.0f MiB (load %s)"
              % (recompute, args.threads, rows[-1]["tok_per_s"], rss, l0), flush=True)
    rows.sort(key=lambda r: (int(r["threads"]), r["recompute"] != "none"))
    write_csv(os.path.join(docs, "bench.csv"), BENCH_COLUMNS, rows)


# ---- the page --------------------------------------------------------------------------------

def plot(docs, metrics, step_tokens):
    """docs/loss.png: the training loss (mean of each 10 steps) and the validation loss."""
    png = os.path.join(docs, "loss.png")
    train, val = [], []
    for k in range(0, len(metrics) - 9, 10):
        chunk = metrics[k:k + 10]
        train.append((chunk[-1]["step"], statistics.mean(float(r["loss"]) for r in chunk)))
    val = [(r["step"], float(r["val_loss"])) for r in metrics if r["val_loss"]]
    if not val:
        return None
    write_dat(png + ".train", train)
    write_dat(png + ".val", val)
    gnuplot(header(png, "GCIDE, 17.3M-parameter LLaMA, BPE 8192",
                   "step (%s tokens each)" % fmt_int(step_tokens), "loss (nats per token)")
            + "plot '%s.train' w l lw 2 lc rgb '#4477aa' title 'training (mean of 10 steps)', "
              "'%s.val' w lp lw 2 pt 7 lc rgb '#cc3311' title 'validation'\n" % (png, png), png)
    os.remove(png + ".train")
    os.remove(png + ".val")
    return os.path.basename(docs) + "/loss.png"


def kv(docs, name):
    """A key,value CSV as a dict; {} when missing."""
    return {r["key"]: r["value"] for r in read_csv(os.path.join(docs, name))}


def table(head, rows):
    """A Markdown table: head is a list of (title, align) with align "l" or "r"."""
    out = ["| " + " | ".join(t for t, _ in head) + " |",
           "|" + "|".join("---" if a == "l" else "---:" for _, a in head) + "|"]
    return out + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]


def data_section(prep):
    mb = int(prep["text_bytes"]) / 1e6
    return ["## The data", "",
            "GCIDE, the GNU Collaborative International Dictionary of English (Debian's "
            "`dict-gcide`: Webster's 1913 with later additions, definitions, etymologies and "
            "quotations), turned into plain text by `scripts/gcide_text.py` (one paragraph per "
            "line, a blank line between entries, markup and source lines removed), then a "
            "byte-level BPE learnt by mt on the training part and the whole text written as "
            "llm.c shards of mt's ids (`./train --prepare --format llmc`; the ids are mt's, "
            "not GPT-2's: [data.md](data.md#writing-token-data---prepare)).", ""] + table(
        [("", "l"), ("", "r")],
        [("text", "%s: %.1f MB, in %s s" % (prep["text"], mb, prep["text_s"] or "?")),
         ("BPE", "%s tokens, learnt and the text encoded in %s s (%s s of CPU, peak RSS %s MiB, "
          "load %s)" % (prep["vocab_size"], prep["prepare_s"], prep["prepare_cpu_s"],
                        prep["prepare_peak_rss_mib"], prep["prepare_load"])),
         ("tokens", "%s: %s training, %s validation (the last 10%% of the text); %s bytes per "
          "token" % (fmt_int(prep["tokens"]), fmt_int(prep["train_tokens"]),
                     fmt_int(prep["val_tokens"]), prep["bytes_per_token"])),
         ("shards", "%s training and %s validation shards of at most %s tokens, and meta.json "
          "(the tokenizer)" % (prep["train_shards"], prep["val_shards"],
                               fmt_int(prep["shard_tokens"])))]) + [
        "", "mt's BPE trainer is not the bottleneck: learning %s tokens from %.1f MB and "
        "encoding it takes seconds (it counts distinct pre-tokens and updates pair counts "
        "incrementally through a heap: [training.md](training.md#bpe))." % (
            prep["vocab_size"], mb), ""]


def tokens_per_step(run):
    """From ./train's line "batch 32 x 256 tokens in 4 micro-batches": 32 x 256."""
    m = re.search(r"batch (\d+) x (\d+) tokens", run.get("train", ""))
    return int(m.group(1)) * int(m.group(2)) if m else 0


def fmt_int(s):
    return "{:,}".format(int(s))


def run_section(run, parts, metrics):
    steps = int(parts[-1]["steps"]) if parts else 0
    done = int(parts[-1]["end_step"]) if parts else 0
    state = ("complete: %d steps" % steps if parts and parts[-1]["finished"] == "1" else
             "**in progress: step %d of %d**; `scripts/scale_run.py` runs the next part" %
             (done, steps))
    out = ["## The run", "", "- model: " + run.get("model", "?"),
           "- data: " + run.get("data", "?"), "- training: " + run.get("train", "?"),
           "- state: " + state, ""]
    rows = []
    for p in parts:
        tps = [float(r["tok_per_s"]) for r in metrics
               if int(p["start_step"]) < int(r["step"]) <= int(p["end_step"])]
        done_tokens = (int(p["end_step"]) - int(p["start_step"])) * tokens_per_step(run)
        rows.append((p["part"], p["started"], "%s to %s" % (p["start_step"], p["end_step"]),
                     p["wall_s"], p["cpu_s"], p["threads"],
                     "%.0f" % statistics.median(tps) if tps else "",
                     "%.0f" % (done_tokens / float(p["cpu_s"])) if float(p["cpu_s"]) else "",
                     p["peak_rss_mib"], "%s, %s" % (p["load_start"], p["load_end"])))
    out += ["Each part is at most an hour of ./train at nice 10 (the machine is shared); a part "
            "still running at its hour is killed and the next resumes from the checkpoint (every "
            "10 steps, so the steps after it are done again). Tokens/s is the median of the "
            "part's steps (%s tokens each) under the load shown: not the machine's speed "
            "(that is [below](#memory-and-speed)). Tokens per CPU second divides the "
            "checkpointed steps' tokens by the part's CPU time (which also holds the start, the "
            "evaluations and the steps after the last checkpoint): less moved by the load, "
            "though the cores' caches are shared." % fmt_int(tokens_per_step(run)), ""]
    out += table([("part", "r"), ("started (UTC)", "l"), ("steps", "l"), ("wall s", "r"),
                  ("CPU s", "r"), ("threads", "r"), ("tokens/s", "r"),
                  ("tokens per CPU s", "r"), ("peak RSS MiB", "r"),
                  ("load at start, end", "l")], rows)
    return out + [""]


def curve_section(metrics, png, bytes_per_token, step_tokens):
    val = [r for r in metrics if r["val_loss"]]
    out = ["## The validation loss", ""]
    if png:
        out += ["![loss](%s)" % png, ""]
    out += ["The validation loss is the mean over the same 16 batches of 8 windows of 256 tokens "
            "of the validation shard at every evaluation. Bits per byte: the loss / ln 2 / the "
            "corpus's %.3f bytes per token (the validation text's own ratio differs a little)."
            % bytes_per_token, ""]
    rows = [(r["step"], fmt_int(int(r["step"]) * step_tokens), r["val_loss"],
             "%.3f" % (float(r["val_loss"]) / math.log(2) / bytes_per_token), r["loss"])
            for r in val]
    return out + table([("step", "r"), ("tokens seen", "r"), ("val loss", "r"),
                        ("val bits per byte", "r"), ("training loss (that step)", "r")],
                       rows) + [""]


def memory_section(bench):
    out = ["## Memory and speed", "",
           "Short runs of the same model and micro-batch (8 x 256 tokens, one per step), with "
           "and without recomputation: ./train's peak RSS (the kernel's maximum resident set, "
           "`ru_maxrss`) and the median tokens/s of the steps after the first. The peak RSS does "
           "not depend on the load; tokens/s does, so the load average at the start of each run "
           "stands beside it, and only a row measured on a quiet machine (load below 0.5 with "
           "2 threads) gives the machine's speed. Measured by:", "",
           "    scripts/scale_run.py --bench --threads 1   # and --threads 2", ""]
    rows = []
    for r in bench:
        base = [b for b in bench if b["threads"] == r["threads"] and b["recompute"] == "none"]
        share = (" (%.0f%%)" % (100 * float(r["peak_rss_mib"]) / float(base[0]["peak_rss_mib"]))
                 if base and r["recompute"] != "none" else "")
        rows.append((r["recompute"], r["threads"], r["steps"], r["peak_rss_mib"] + share,
                     r.get("arena_peak_mib", ""), r["tok_per_s"], r["ms_per_step"],
                     r["load_start"], r["started"]))
    out += table([("--recompute", "l"), ("threads", "r"), ("steps", "r"), ("peak RSS MiB", "r"),
                  ("arena peak MiB", "r"), ("tokens/s", "r"), ("ms per step", "r"),
                  ("load at start", "r"), ("measured (UTC)", "l")], rows)
    return out + [""]


def commands_section():
    return ["## How it was made", "",
            "`scripts/scale_run.py` does all of it, one part per call; the big files stay in "
            "`--root` (/work/runs/gcide), the small ones come here ([scale/](scale/): "
            "prep.csv, run.csv, parts.csv, metrics.csv, bench.csv), and this page is written "
            "from them (`--report` writes it again). By hand, the same steps:", "",
            "    python3 scripts/gcide_text.py -o /work/runs/gcide/text.txt",
            "    ./train --data /work/runs/gcide/text.txt --tokenizer bpe --vocab-size 8192 \\",
            "        --prepare /work/runs/gcide/shards --format llmc --shard-tokens 2000000",
            "    nice -n 10 ./train --config configs/gcide-llama.ini \\",
            "        --data /work/runs/gcide/shards --out /work/runs/gcide/run --threads 1",
            "    nice -n 10 ./train --resume --out /work/runs/gcide/run --threads 1  # later parts",
            "", "The model and schedule are [configs/gcide-llama.ini](../configs/gcide-llama.ini):"
            " a LLaMA (RoPE, SwiGLU, RMSNorm, no biases, tied embedding) of 8 layers, 6 heads "
            "of 64, n_embd 384, n_ff 1024, n_ctx 256: 17.3M parameters, of which 3.1M are the "
            "embedding. `--recompute block` keeps each block's input only and recomputes the "
            "block inside its backward ([training.md](training.md#recomputation)); "
            "`--batch 8 --grad-accum 4` makes a step of 32 x 256 = 8192 tokens in the memory "
            "of 8 rows. AdamW, lr 1.5e-3 with 30 warmup steps and a cosine decay to 1.5e-4 over "
            "300 steps (2.46M tokens, 0.29 of the training shards), weight decay 0.1, "
            "clipping at 1.", ""]


def report(docs):
    """DOCS.md from the CSVs in DOCS (and the loss plot)."""
    prep, run = kv(docs, "prep.csv"), kv(docs, "run.csv")
    parts = read_csv(os.path.join(docs, "parts.csv"))
    metrics = read_csv(os.path.join(docs, "metrics.csv"))
    bench = read_csv(os.path.join(docs, "bench.csv"))
    png = plot(docs, metrics, tokens_per_step(run))
    lines = ["# A real corpus: GCIDE, BPE 8192, a 17.3M-parameter LLaMA", "",
             "Generated by `scripts/scale_run.py` (do not edit by hand). What issue 32 built, "
             "working together on a corpus 26 times tiny Shakespeare: a BPE of 8192 tokens "
             "learnt by mt, llm.c token shards read by mmap, activation recomputation "
             "(`--recompute block`) and gradient accumulation (`--grad-accum 4`), in a run "
             "split into parts of at most an hour that resume exactly.", "",
             "- machine: %s, %s CPUs, shared with other work (the load is given with every "
             "time)" % (prep.get("cpu", "?"), prep.get("cpus", "?")), ""]
    if prep:
        lines += data_section(prep)
    lines += run_section(run, parts, metrics)
    lines += curve_section(metrics, png, float(prep.get("bytes_per_token", "nan")),
                           tokens_per_step(run))
    lines += memory_section(bench)
    lines += commands_section()
    page = docs.rstrip("/") + ".md"
    with open(page + ".tmp", "w") as f:
        f.write(with_notes(page, "\n".join(lines)))
    os.replace(page + ".tmp", page)
    print("scale_run: wrote " + page)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default="/work/runs/gcide", help="the big files (not in git)")
    ap.add_argument("--docs", default=os.path.join(ROOT, "docs/scale"),
                    help="the CSVs and the plot; the page is DOCS.md")
    ap.add_argument("--part-minutes", type=float, default=60)
    ap.add_argument("--part-steps", type=int, default=0,
                    help="end the part at the first checkpoint this many steps on (0: none)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--bench", action="store_true", help="RSS and tokens/s of short runs")
    ap.add_argument("--bench-steps", type=int, default=4)
    ap.add_argument("--report", action="store_true", help="the page only")
    ap.add_argument("--text", help="this text instead of GCIDE's")
    ap.add_argument("--text-bytes", type=int, default=0, help="the text's first N bytes")
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--shard-tokens", type=int, default=2000000)
    ap.add_argument("--train-flags", default="", help="more ./train flags (tests)")
    args = ap.parse_args()
    root, docs = os.path.abspath(args.root), os.path.abspath(args.docs)
    os.makedirs(root, exist_ok=True)
    os.makedirs(docs, exist_ok=True)
    if not args.report:
        shards = prepare(args, root, docs)
        if args.bench:
            bench(args, root, docs, shards)
        else:
            train_part(args, root, docs, shards)
    report(docs)


if __name__ == "__main__":
    main()
