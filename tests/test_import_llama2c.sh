#!/bin/sh
# Importing llama2.c's model.bin (./train --init-from model.bin): an mt Llama exported, imported
# and exported again is the same file byte for byte (tied and untied); the import fine-tunes and
# ./infer runs it; the export rewritten as versions 1 and 2 imports to its weights; a
# shape-changing flag, another vocabulary, a truncated or oversized file and an unknown version
# are refused with exit 2 and nothing written. With llama2.c's own files
# (../shared/third_party/llama2c, MT_LLAMA2C) and torch: export.py's versions 0, 1 and 2 of a
# random model.py model import to its weights (version 2 within its Q8_0 rounding), and mt's
# greedy continuation of run.c's start (its BOS, id 1) is run.c's, token for token.
NAME=test_import_llama2c
. "$(dirname "$0")/lib.sh"
L2C=${MT_LLAMA2C:-../shared/third_party/llama2c}
command -v python3 >/dev/null || skip "needs python3 to write and compare the files"
train() { "$B/train" --threads 2 "$@" >"$T/log" 2>&1; }
head -c 60000 data/tinyshakespeare.txt >"$T/text.txt"
DATA="--data $T/text.txt --tokenizer byte --batch 4 --eval-batches 1"
LLAMA="$DATA --arch llama --n-layer 2 --n-head 4 --n-embd 32 --n-ctx 32"

# export -> import -> export: the same bytes
for shape in "tied --n-kv-head 4" "untied --n-kv-head 2 --untie"; do
    name=${shape%% *} flags=${shape#* }
    train $LLAMA $flags --steps 2 --out "$T/$name" || fail "$name: train exited $?: $(cat "$T/log")"
    "$B/export" --checkpoint "$T/$name/model.safetensors" --out "$T/$name.bin" >/dev/null ||
        fail "$name: export exited $?"
    train $DATA --steps 0 --init-from "$T/$name.bin" --out "$T/$name-in" ||
        fail "$name: import exited $?: $(cat "$T/log")"
    grep -q "^init    loaded 2[01] of 2[01] tensors" "$T/log" || fail "$name: $(grep init "$T/log")"
    "$B/export" --checkpoint "$T/$name-in/model.safetensors" --out "$T/$name-again.bin" \
        >/dev/null || fail "$name: the second export exited $?"
    cmp -s "$T/$name.bin" "$T/$name-again.bin" || fail "$name: export -> import -> export differs"
done

# fine-tuning the import, and ./infer on it
train $DATA --steps 3 --init-from "$T/untied.bin" --out "$T/tuned" ||
    fail "fine-tuning exited $?: $(cat "$T/log")"
"$B/infer" --checkpoint "$T/tuned/model.safetensors" --prompt "ROMEO:" --tokens 8 >"$T/gen" 2>&1 ||
    fail "infer exited $?: $(cat "$T/gen")"

# versions 1 and 2 without llama2.c's writer: the untied export rewritten in their layouts (a
# Q8_0 group of 16), imported to the same tensors (version 2: within half a step of its grid)
python3 - "$T/untied.bin" "$T/untied" <<'PY' || fail "writing versions 1 and 2: exit $?"
import struct, sys
src, out = sys.argv[1], sys.argv[2]
b = open(src, "rb").read()
C, F, L, H, KVH, V, T = struct.unpack("<7i", b[:28])
V, HS = -V, C // H
KV = KVH * HS
sizes = [("emb", V * C, 1)] + [(k, n, L) for k, n in (("att_norm", C), ("wq", C * C),
         ("wk", KV * C), ("wv", KV * C), ("wo", C * C), ("ffn_norm", C), ("w1", F * C),
         ("w2", C * F), ("w3", F * C))] + [("norm", C, 1), ("freqs", T * HS, 1), ("out", V * C, 1)]
at, t = 28, {}
for k, n, layers in sizes:
    t[k] = [struct.unpack_from(f"<{n}f", b, at + 4 * n * i) for i in range(layers)]
    at += 4 * n * layers
assert at == len(b)
head = lambda v, extra=b"": (struct.pack("<Ii7iB", 0x616b3432, v, C, F, L, H, KVH, V, T, 0)
                             + extra).ljust(256, b"\0")
norms, mats = ["att_norm", "ffn_norm", "norm"], ["emb", "wq", "wk", "wv", "wo", "w1", "w2", "w3", "out"]
with open(out + "-v1.bin", "wb") as f:
    f.write(head(1))
    for k in norms + mats:
        for x in t[k]:
            f.write(struct.pack(f"<{len(x)}f", *x))
with open(out + "-v2.bin", "wb") as f:
    f.write(head(2, struct.pack("<i", 16)))
    for k in norms:
        for x in t[k]:
            f.write(struct.pack(f"<{len(x)}f", *x))
    for k in mats:
        for x in t[k]:
            g = [x[i:i + 16] for i in range(0, len(x), 16)]
            s = [max(abs(v) for v in grp) / 127 for grp in g]
            f.write(struct.pack(f"<{len(x)}b", *[round(v / s[i // 16]) for i, v in enumerate(x)]))
            f.write(struct.pack(f"<{len(s)}f", *s))
PY
for v in 1 2; do
    train $DATA --steps 0 --init-from "$T/untied-v$v.bin" --out "$T/untied-v$v" ||
        fail "version $v: import exited $?: $(cat "$T/log")"
    "$B/export" --checkpoint "$T/untied-v$v/model.safetensors" --out "$T/untied-v$v-again.bin" \
        >/dev/null || fail "version $v: export exited $?"
done
cmp -s "$T/untied.bin" "$T/untied-v1-again.bin" || fail "version 1 imports to other weights"
python3 - "$T/untied.bin" "$T/untied-v2-again.bin" <<'PY' || fail "version 2 imports to other weights"
import struct, sys
a, b = (open(p, "rb").read() for p in sys.argv[1:])
x, y = (struct.unpack(f"<{(len(a) - 28) // 4}f", v[28:]) for v in (a, b))
big = max(abs(p - q) for p, q in zip(x, y))
sys.exit(not (len(a) == len(b) and a[:28] == b[:28] and 0 < big <= max(map(abs, x)) / 254 * 1.0001))
PY

U=$T/untied.bin
size=$(wc -c <"$U")
refused "--n-embd" "n_embd is 32 in the file, 64 here (--n-embd 32)" --init-from "$U" --n-embd 64
refused "--tokenizer char" "n_vocab is 256 in the file, 59 here" --init-from "$U" --tokenizer char
head -c 1000 "$U" >"$T/short.bin"
refused "a truncated file" "short.bin: a llama2.c model.bin (version 0) of dim 32.* takes $size bytes; the file has 1000 (truncated?)" \
    --init-from "$T/short.bin"
cat "$U" "$U" >"$T/long.bin"
refused "an oversized file" "the file has $((2 * size)) (more than its header says)" --init-from "$T/long.bin"
head -c 20 "$U" >"$T/tiny.bin"
refused "less than a header" "tiny.bin: truncated: 20 bytes, less than a llama2.c model.bin header (28)" \
    --init-from "$T/tiny.bin"
printf '24ka\007\000\000\000' >"$T/v7.bin"
head -c 248 /dev/zero >>"$T/v7.bin"
refused "version 7" "v7.bin: a llama2.c model.bin (magic ak42) of version 7: versions 1" \
    --init-from "$T/v7.bin"

# llama2.c's own writer and generator
if [ ! -r "$L2C/export.py" ] || [ ! -r "$L2C/run.c" ]; then
    skip_case "export.py and run.c" "$L2C missing (the shared third_party directory)"
elif ! has_torch; then
    skip_case "export.py and run.c" "$TORCH_MISSING"
else
    /usr/bin/python3 - "$L2C" "$T" >"$T/export.log" 2>&1 <<'PY' || fail "export.py: $(cat "$T/export.log")"
import sys, torch
sys.path.insert(0, sys.argv[1])
from model import ModelArgs, Transformer
from export import model_export
T = sys.argv[2]
torch.manual_seed(0)
for tied in (True, False):
    m = Transformer(ModelArgs(dim=48, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=256,
                              multiple_of=32, max_seq_len=64, dropout=0.0))
    with torch.no_grad():  # weights of unit-scale logits: greedy picks are far from ties
        for n, p in m.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if p.dim() == 1
                    else torch.randn_like(p) / p.shape[1] ** 0.5)
        if not tied:
            m.output.weight = torch.nn.Parameter(torch.randn(256, 48) / 48 ** 0.5)
    name = "tied" if tied else "untied"
    torch.save({k: v.clone() for k, v in m.state_dict().items()}, f"{T}/py-{name}.pt")
    for v in (1, 2, 0):  # version 0 negates params.vocab_size of an untied model
        model_export(m, f"{T}/py-{name}-v{v}.bin", version=v)
PY
    for name in tied untied; do
        for v in 0 1 2; do
            train $DATA --steps 0 --init-from "$T/py-$name-v$v.bin" --out "$T/py-$name-v$v" ||
                fail "$name v$v: import exited $?: $(cat "$T/log")"
        done
    done
    /usr/bin/python3 - "$T" <<'PY' || fail "the imported weights are not export.py's"
import json, re, sys, numpy as np, torch
T = sys.argv[1]
def load(p):
    b = open(p, "rb").read()
    n = int.from_bytes(b[:8], "little")
    h = json.loads(b[8:8 + n])
    return {k: np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                             np.float32).reshape(v["shape"])
            for k, v in h.items() if k != "__metadata__"}
RULES = [("tok_emb", "tok_embeddings"), (r"blocks\.(\d+)\.attn_norm", r"layers.\1.attention_norm"),
         (r"blocks\.(\d+)\.attn\.q_proj", r"layers.\1.attention.wq"),
         (r"blocks\.(\d+)\.attn\.k_proj", r"layers.\1.attention.wk"),
         (r"blocks\.(\d+)\.attn\.v_proj", r"layers.\1.attention.wv"),
         (r"blocks\.(\d+)\.attn\.out_proj", r"layers.\1.attention.wo"),
         (r"blocks\.(\d+)\.ffn_norm", r"layers.\1.ffn_norm"),
         (r"blocks\.(\d+)\.ffn\.fc(\d)", r"layers.\1.feed_forward.w\2"),
         ("final_norm", "norm"), ("lm_head", "output")]
bad = 0
for name in ("tied", "untied"):
    want = {k: v.numpy() for k, v in torch.load(f"{T}/py-{name}.pt").items()}
    for v in (0, 1, 2):
        got = load(f"{T}/py-{name}-v{v}/model.safetensors")
        if ("lm_head.weight" in got) == (name == "tied"):
            print(f"{name} v{v}: the head is {'separate' if 'lm_head.weight' in got else 'tied'}")
            bad += 1
        for k, x in got.items():
            pk = k
            for a, b in RULES:
                pk = re.sub("^" + a + r"\.weight$", b + ".weight", pk)
            w = want[pk]
            # version 2: each matrix within half a step of its Q8_0 grid (max |group| / 127)
            tol = np.abs(w).max() / 254 * 1.0001 if v == 2 and x.ndim == 2 else 0
            if x.shape != w.shape or np.abs(x - w).max() > tol:
                print(f"{name} v{v}: {k} <- {pk} differs by {np.abs(x - w).max()}")
                bad += 1
sys.exit(bad != 0)
PY
    # run.c, printing its token ids instead of their text
    sed 's/safe_printf(piece);/printf("%d\\n", next);/' "$L2C/run.c" >"$T/run_ids.c"
    if ! gcc -O2 -o "$T/run" "$T/run_ids.c" -lm 2>"$T/gcc.log"; then
        fail "gcc run.c: $(cat "$T/gcc.log")"
    else
        for name in tied untied; do
            "$B/export" --checkpoint "$T/py-$name-v0/model.safetensors" --out "$T/$name-mt.bin" \
                >/dev/null || fail "$name: export exited $?"
            "$T/run" "$T/py-$name-v0.bin" -z "$T/tokenizer.bin" -t 0 -n 40 -i "" 2>/dev/null |
                grep . >"$T/run.ids"
            "$B/infer" --checkpoint "$T/py-$name-v0/model.safetensors" --threads 2 \
                --prompt "$(printf '\001')" --tokens 40 --temperature 0 2>/dev/null |
                od -An -v -tu1 | tr -s ' ' '\n' | grep . | tail -n +2 >"$T/mt.ids"
                    n=$(wc -l <"$T/run.ids")
            # run.c stops at id 1 (its BOS): mt's next is then 1
            { head -n "$n" "$T/mt.ids" | cmp -s - "$T/run.ids" &&
                { [ "$n" -eq 40 ] || [ "$(sed -n "$((n + 1))p" "$T/mt.ids")" = 1 ]; }; } ||
                fail "$name: run.c's greedy ids $(tr '\n' ' ' <"$T/run.ids"), mt's $(tr '\n' ' ' <"$T/mt.ids")"
        done
    fi
fi
finish
