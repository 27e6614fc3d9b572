#!/bin/sh
# nGPT (--arch ngpt) end to end: it trains with no weight decay and no warmup by default, keeps
# every matrix's vectors along n_embd on the unit sphere (checked in the checkpoint), resumes
# bit-identically, generates from its checkpoint with and without the KV cache alike, scores;
# ./export refuses it; bad combinations exit 2 naming the reason. MT_BUILD names the build
# directory (default: build).
NAME=test_cli_ngpt
. "$(dirname "$0")/lib.sh"
train() { "$B/train" --threads 2 "$@" >"$T/log" 2>&1; }
infer() { "$B/infer" --threads 2 "$@" 2>"$T/log"; }

head -c 60000 data/tinyshakespeare.txt >"$T/text.txt"
NG="--data $T/text.txt --arch ngpt --n-layer 2 --n-head 2 --n-embd 32 --n-ctx 32 --batch 8
    --lr 1e-2 --eval-every 20 --eval-batches 2 --log-every 5"

# the paper's training defaults, saved with the run; the loss falls (at lr 1e-2: nGPT's learned
# scalings are stored at 1/sqrt(n_embd) of the value they act with and move slowly at 3e-3)
train $NG --steps 40 --out "$T/a" || { fail "train exited $?"; cat "$T/log"; }
grep -q "warmup 0" "$T/log" || fail "warmup is not 0 by default: $(grep '^train' "$T/log")"
infer --info "$T/a/model.safetensors" >"$T/info" || fail "--info: $(cat "$T/log")"
grep -q "^weight-decay = 0$" "$T/info" && grep -q "^warmup = 0$" "$T/info" ||
    fail "saved options without weight_decay = 0, warmup = 0: $(grep -E 'weight|warmup' "$T/info")"
first=$(sed -n 2p "$T/a/metrics.csv" | cut -d, -f2)
last=$(tail -n 1 "$T/a/metrics.csv" | cut -d, -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }' ||
    fail "loss did not fall: first $first, last $last"

# every unit matrix's rows (or columns: out_proj, fc2) of norm 1 after training
/usr/bin/python3 - "$T/a/model.safetensors" <<'EOF' || fail "a matrix left the unit sphere"
import sys
import numpy as np
sys.path[:0] = ["tests/parity"]
from harness import load
seen = 0
for name, w in load(sys.argv[1])[0].items():
    axis = 0 if name.endswith(("out_proj.weight", "fc2.weight")) else 1
    if name.endswith(".weight"):
        norms = np.linalg.norm(w.astype(np.float64), axis=axis)
        if np.abs(norms - 1).max() > 1e-5:
            sys.exit(f"{name}: norms {norms.min()} .. {norms.max()}")
        seen += 1
sys.exit(0 if seen == 2 * 7 + 2 else f"{seen} matrices")
EOF

# 30 steps at once and 15 + 15 resumed: the same bits
R="$NG --schedule const --steps 30 --save-every 10"
train $R --out "$T/r" && mv "$T/r" "$T/once" || fail "run once: $(tail -n 2 "$T/log")"
train $R --steps 15 --out "$T/r" || fail "first half"
train --resume --out "$T/r" --steps 30 || fail "resume exited $?: $(tail -n 2 "$T/log")"
cmp -s "$T/once/model.safetensors" "$T/r/model.safetensors" || fail "resumed weights differ"
cmp -s "$T/once/optim.safetensors" "$T/r/optim.safetensors" || fail "resumed optimizer differs"

# a checkpoint of an older build, whose options and config say placement ngpt (nGPT's residual
# was a placement): read as this build's (pre, unread), it generates and resumes to the same bits
train $R --steps 15 --out "$T/old" && cp "$T/old/model.safetensors" "$T/half.safetensors" ||
    fail "the old run's first half"
/usr/bin/python3 - "$T/old/model.safetensors" <<'EOF' || fail "could not age the checkpoint"
import json, sys
raw = open(sys.argv[1], "rb").read()
n = int.from_bytes(raw[:8], "little")
h = json.loads(raw[8:8 + n])
m = h["__metadata__"]
assert "placement = pre\n" in m["options"] and '"placement":"pre"' in m["config"]
m["options"] = m["options"].replace("placement = pre\n", "placement = ngpt\n")
m["config"] = m["config"].replace('"placement":"pre"', '"placement":"ngpt"')
def crc32c(data, crc=0):  # src/io/safetensors.c's
    crc = ~crc & 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = crc >> 1 ^ (0x82F63B78 if crc & 1 else 0)
    return ~crc & 0xFFFFFFFF
sums = m["mt_crc32c"].split()
for i, key in enumerate(k for k in m if k != "mt_crc32c"):  # one per entry, in order
    sums[i] = "%08x" % crc32c(m[key].encode(), crc32c(key.encode() + b"\0"))
m["mt_crc32c"] = " ".join(sums)
head = json.dumps(h, separators=(",", ":")).encode()
head += b" " * (-len(head) % 8)
open(sys.argv[1], "wb").write(len(head).to_bytes(8, "little") + head + raw[8 + n:])
EOF
infer --checkpoint "$T/old/model.safetensors" --prompt "ROMEO:" --tokens 20 --temperature 0 \
    >"$T/old.txt" || fail "generate from an old checkpoint: $(cat "$T/log")"
infer --checkpoint "$T/half.safetensors" --prompt "ROMEO:" --tokens 20 --temperature 0 \
    >"$T/new.txt" || fail "generate: $(cat "$T/log")"
cmp -s "$T/old.txt" "$T/new.txt" || fail "an old checkpoint generates otherwise"
train --resume --out "$T/old" --steps 30 || fail "resume of an old checkpoint: $(tail -n 2 "$T/log")"
/usr/bin/python3 - "$T/once" "$T/old" <<'EOF' || fail "an old checkpoint resumed to other bits"
import sys
def tensors(path):  # the bytes after the header (whose options name the --out)
    raw = open(path, "rb").read()
    return raw[8 + int.from_bytes(raw[:8], "little"):]
for f in ("model.safetensors", "optim.safetensors"):
    if tensors(f"{sys.argv[1]}/{f}") != tensors(f"{sys.argv[2]}/{f}"):
        sys.exit(f)
EOF

# generation: the KV cache stores the scaled unit keys, so it samples what the whole window gives
infer --checkpoint "$T/a/model.safetensors" --prompt "ROMEO:" --tokens 40 --temperature 0 \
    >"$T/cached" || fail "generate: $(cat "$T/log")"
infer --checkpoint "$T/a/model.safetensors" --prompt "ROMEO:" --tokens 40 --temperature 0 \
    --no-cache >"$T/whole" || fail "generate --no-cache: $(cat "$T/log")"
[ "$(wc -c <"$T/cached")" -gt 40 ] && cmp -s "$T/cached" "$T/whole" ||
    fail "cached and uncached generation differ: $(cat "$T/cached") / $(cat "$T/whole")"
infer --checkpoint "$T/a/model.safetensors" --score "$T/text.txt" | grep -q "loss=" ||
    fail "score: $(cat "$T/log")"
"$B/export" --checkpoint "$T/a/model.safetensors" --format gguf --out "$T/m.gguf" 2>"$T/log"
[ $? -eq 2 ] && grep -q "norm = none" "$T/log" || fail "export of an nGPT: $(cat "$T/log")"

# Muon, Lion and SGD renormalise too (the update's hook is the optimizer's, not AdamW's)
for o in muon lion sgd; do
    train $NG --steps 3 --optim $o --out "$T/$o" || fail "--optim $o: $(tail -n 2 "$T/log")"
done

# refused, exit 2, with the reason
bad() { # bad "PATTERN" FLAGS...: exit 2 and the message matches
    pattern=$1
    shift
    train "$@" --steps 1 --out "$T/bad"
    [ $? -eq 2 ] && grep -q -e "$pattern" "$T/log" || fail "$*: $(cat "$T/log")"
}
bad "needs --norm none: nGPT has no norm layers" $NG --norm bn
bad "needs --norm none" $NG --norm dyt
bad "needs no --placement: nGPT's residual is its own" $NG --placement post
bad "weight decay 0.1 reaches tok_emb.weight.*give --weight-decay 0" $NG --weight-decay 0.1 \
    --decay-scope embeddings
bad "weight decay 0.02 reaches .*q_proj.weight.*--muon-wd 0" $NG --optim muon --muon-wd 0.02
bad "needs --qk-norm none" $NG --qk-norm rms
bad "needs --attn-gate none" $NG --attn-gate headwise
bad "needs --n-kv-head equal to --n-head" $NG --n-kv-head 1
bad "needs --act swiglu" $NG --act relu
bad "with --emb-scale: refused" $NG --emb-scale
bad "ngpt_alpha_init = -1\|an --ngpt-\* init or scale is\|out of range" $NG --ngpt-alpha-init -1
# a scale that stores init / scale beyond float (1e-45: infinity; the run diverged at step 1)
bad "--ngpt-alpha-scale is 1.4013e-45: an --ngpt-\* scale must be in \[1e-06, 1e+06\]" $NG --ngpt-alpha-scale 1e-45
bad "--ngpt-sz-scale is 1e+07: an --ngpt-\* scale must be in" $NG --ngpt-sz-scale 1e7
bad "--placement: 'ngpt' is retired: nGPT's residual is --arch ngpt's" --data "$T/text.txt" \
    --placement ngpt
bad "--ngpt-sz-init 2: this run does not read it (only --arch ngpt does)" --data "$T/text.txt" \
    --ngpt-sz-init 2
printf 'hello hh ax0 l ow1\nworld w er1 l d\ncat k ae1 t\ndog d ao1 g\n' >"$T/dict.txt"
bad "--placement: 'ngpt' is retired: nGPT's residual is --arch ngpt's" --model encdec \
    --data "$T/dict.txt" --placement ngpt

finish
