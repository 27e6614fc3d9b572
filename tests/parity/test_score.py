"""./infer --score against PyTorch: the same checkpoint (trained a few steps by ./train) through
the torch GPT of torch_gpt.py, on the same windows (consecutive, non-overlapping, n_ctx + 1
tokens, the last shorter): the mean loss per predicted token, the token count, the bytes the
predicted tokens hold and the bits per byte must agree, for the byte, char and bpe tokenizers.
The score is the same to the printed digits at 1 and 2 threads (each thread its own batches of
windows)."""
import json
import os
import subprocess
import tempfile

import numpy as np
import torch

import bpe_ref
from harness import BUILD, Report, load
from torch_gpt import TorchGPT

R = Report("parity score")


def encode(text, tok):
    """The ids of text under the checkpoint's tokenizer, and the bytes of each id."""
    if tok["type"] == "byte":
        return list(text.encode()), [1] * 256
    if tok["type"] == "bpe":
        merges = [tuple(m) for m in tok["merges"]]
        return bpe_ref.encode(text.encode(), merges), [len(b) for b in bpe_ref.token_bytes(merges)]
    index = {c: i for i, c in enumerate(tok["chars"])}
    return [index[ord(ch)] for ch in text], [len(chr(c).encode()) for c in tok["chars"]]


def torch_score(path, text):
    params, meta = load(path)
    cfg = json.loads(meta["config"])
    if cfg["norm_eps"] < 0:  # the norm's default
        cfg["norm_eps"] = 1e-8 if cfg["norm"] == "rms" and cfg["rms_form"] == "paper" else 1e-5
    model = TorchGPT(cfg, params)
    ids, size = encode(text, json.loads(meta["tokenizer"]))
    W, nll, count, nbytes = cfg["n_ctx"] + 1, 0.0, 0, 0
    with torch.no_grad():
        for start in range(0, len(ids) - 1, W):
            w = torch.tensor(ids[start:start + W])
            if len(w) < 2:
                break
            _, loss = model(w[None, :-1], w[None, 1:])
            nll += float(loss) * (len(w) - 1)
            count += len(w) - 1
            nbytes += sum(size[int(t)] for t in w[1:])
    return nll / count, count, nbytes, nll / np.log(2) / nbytes, cfg["n_vocab"]


def mt(prog, *args, threads=2):
    out = subprocess.run([os.path.join(BUILD, prog), "--threads", str(threads), *args], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return out.strip().splitlines()[-1]


with open("data/tinyshakespeare.txt", encoding="utf-8") as f:
    shakespeare = f.read()
score_text = shakespeare[-3000:]
train_text = shakespeare[:40000] + score_text  # so the char vocabulary covers the scored text
CASES = [("byte ln pre", ["--tokenizer", "byte", "--norm", "ln", "--placement", "pre"]),
         ("char rms post untied", ["--tokenizer", "char", "--norm", "rms", "--placement", "post",
                                   "--untie", "--act", "gelu_erf"]),
         ("byte rms deepnorm", ["--norm", "rms", "--placement", "deepnorm", "--n-ctx", "20"]),
         ("bpe 400 ln pre", ["--tokenizer", "bpe", "--vocab-size", "400"])]
with tempfile.TemporaryDirectory() as d:
    data = os.path.join(d, "train.txt")
    text = os.path.join(d, "score.txt")
    with open(data, "w", encoding="utf-8") as f:
        f.write(train_text)
    with open(text, "w", encoding="utf-8") as f:
        f.write(score_text)
    for i, (label, flags) in enumerate(CASES):
        out = os.path.join(d, f"run{i}")
        mt("train", "--data", data, "--out", out, "--n-layer", "2", "--n-head", "2",
           "--n-embd", "32", "--n-ctx", "24", "--batch", "8", "--steps", "25", "--lr", "3e-3",
           "--eval-every", "0", "--eval-batches", "1", *flags)
        line = mt("infer", "--checkpoint", os.path.join(out, "model.safetensors"), "--score", text)
        got = dict(kv.split("=") for kv in line.split())
        one = dict(kv.split("=") for kv in mt("infer", "--checkpoint", os.path.join(
            out, "model.safetensors"), "--score", text, threads=1).split())
        R.check(f"{label} loss at 1 thread as at 2", float(one["loss"]), float(got["loss"]), tol=0)
        want_loss, want_count, want_bytes, want_bpb, V = torch_score(
            os.path.join(out, "model.safetensors"), score_text)
        R.check(f"{label} loss", float(got["loss"]), want_loss)
        R.check(f"{label} tokens", int(got["tokens"]), want_count, tol=0)
        R.check(f"{label} bytes", int(got["bytes"]), want_bytes, tol=0)
        R.check(f"{label} bpb", float(got["bpb"]), want_bpb, tol=1e-4)
        R.check(f"{label} ppl", float(got["ppl"]), np.exp(want_loss), tol=1e-4)
        assert want_loss < np.log(V) - 0.3, f"{label}: {want_loss} does not beat uniform, log {V}"
R.finish()
