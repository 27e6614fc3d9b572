#!/bin/sh
# Importing llm.c's gpt2_124M.bin (./train --init-from FILE): bad files refused with exit 2, the
# file named and nothing written (a truncated or oversized file, an unknown version, llm.c's
# tokenizer in its place, another vocabulary, a shape-changing flag). With llm.c's own writer
# (../shared/third_party/llmc, MT_LLMC) and torch: train_gpt2.py's write_model of a random GPT-2
# (a 59-char vocabulary, padded to 128) in versions 3 and 5 imports to its weights (5: their
# bfloat16 rounding); one of GPT-2's 50257 (padded to 50304) fine-tunes on shards of its ids; mt's loss on a text is a float64 PyTorch GPT-2's, written here from the
# published architecture; llm.c's train_gpt2.c reports that reference's loss on mt's
# --prepare --format llmc shards, and its greedy continuation is mt's token for token.
NAME=test_import_llmc
. "$(dirname "$0")/lib.sh"
LLMC=${MT_LLMC:-../shared/third_party/llmc}
command -v python3 >/dev/null || skip "needs python3 to write and compare the files"
train() { "$B/train" --threads 2 "$@" >"$T/log" 2>&1; }
head -c 60000 data/tinyshakespeare.txt >"$T/text.txt"
DATA="--data $T/text.txt --tokenizer char --batch 4 --eval-batches 1"

# 59 chars padded to 128, 2 layers, 4 heads, 48 channels, 64 positions: 66112 float32
n=$((128 * 48 + 64 * 48 + 2 * (4 * 48 + 3 * 48 * 48 + 3 * 48 + 48 * 48 + 48 + 8 * 48 * 48 + 5 * 48) + 2 * 48))
llmc_header "$T/zero.bin" 20240326 3 64 59 2 4 48 128 $((4 * n))
train $DATA --steps 0 --init-from "$T/zero.bin" --out "$T/zero" || fail "a well-formed file: $(cat "$T/log")"
llmc_header "$T/short.bin" 20240326 3 64 59 2 4 48 128 1000
refused "a truncated file" "short.bin: an llm.c gpt2 model (version 3, float32) of max_seq_len 64, vocab_size 59 (padded 128), num_layers 2, num_heads 4, channels 48 takes $((1024 + 4 * n)) bytes; the file has 2024 (truncated?)" \
    --init-from "$T/short.bin"
llmc_header "$T/long.bin" 20240326 5 64 59 2 4 48 128 $((4 * n))
refused "an oversized file" "long.bin: .*(version 5, bfloat16).* takes $((1024 + 2 * n)) bytes; the file has $((1024 + 4 * n)) (more than its header says)" \
    --init-from "$T/long.bin"
llmc_header "$T/v4.bin" 20240326 4 64 59 2 4 48 128 0
refused "version 4" "v4.bin: an llm.c gpt2 model of version 4: versions 3 (float32) and 5 (bfloat16) are read" \
    --init-from "$T/v4.bin"
head -c 100 "$T/zero.bin" >"$T/tiny.bin"
refused "less than a header" "tiny.bin: truncated: 100 bytes, less than an llm.c gpt2 .bin header (1024)" \
    --init-from "$T/tiny.bin"
llmc_header "$T/tok.bin" 20240328 2 59 58 0 0 0 0 0
refused "llm.c's tokenizer" "tok.bin: llm.c's tokenizer (gpt2_tokenizer.bin), magic 20240328: expected its gpt2 model (magic 20240326)" \
    --init-from "$T/tok.bin"
llmc_header "$T/vp.bin" 20240326 3 64 59 2 4 48 58 0
refused "a padded vocabulary below the vocabulary" "padded_vocab_size at least vocab_size" --init-from "$T/vp.bin"
refused "--tokenizer byte" "n_vocab is 59 in the file, 256 here" --init-from "$T/zero.bin" --tokenizer byte
refused "--n-embd" "n_embd is 48 in the file, 64 here (--n-embd 48)" --init-from "$T/zero.bin" --n-embd 64

# llm.c's own writer and trainer
if [ ! -r "$LLMC/train_gpt2.py" ] || [ ! -r "$LLMC/train_gpt2.c" ]; then
    skip_case "train_gpt2.py and train_gpt2.c" "$LLMC missing (the shared third_party directory)"
    finish
fi
has_torch || { skip_case "train_gpt2.py and train_gpt2.c" "$TORCH_MISSING"; finish; }
/usr/bin/python3 - "$LLMC" "$T" >"$T/write.log" 2>&1 <<'PY' || fail "write_model: $(cat "$T/write.log")"
import sys, types, torch
sys.path.insert(0, sys.argv[1])
T = sys.argv[2]
try:
    import torch._inductor.config
except ImportError:  # Debian's torch has no inductor; train_gpt2.py only sets its flags
    for name in ("torch._inductor", "torch._inductor.config"):
        sys.modules[name] = types.ModuleType(name)
init_normal = torch.nn.init.normal_  # an older torch's takes no generator (the weights are set
torch.nn.init.normal_ = lambda t, mean=0.0, std=1.0, generator=None: init_normal(t, mean, std)
import train_gpt2  # below)
pad_vocab_50257 = train_gpt2.pad_vocab
def pad_vocab(t, multiple=128):  # train_gpt2.py's, without its assertion that V is 50257
    pad = -t.size(0) % multiple
    return torch.nn.functional.pad(t, (0, 0, 0, pad)) if pad else t
train_gpt2.pad_vocab = pad_vocab
torch.manual_seed(0)
m = train_gpt2.GPT(train_gpt2.GPTConfig(block_size=64, vocab_size=59, n_layer=2, n_head=4,
                                        n_embd=48))
with torch.no_grad():  # weights of unit-scale logits: greedy picks are far from ties
    for n, p in m.named_parameters():
        gain = n.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight"))
        p.copy_(1 + 0.1 * torch.randn_like(p) if gain else 0.1 * torch.randn_like(p)
                if p.dim() == 1 else torch.randn_like(p) / p.shape[1] ** 0.5)
torch.save({k: v.clone() for k, v in m.state_dict().items()}, f"{T}/gpt2.pt")
train_gpt2.write_model(m, f"{T}/gpt2_v3.bin", "float32")
train_gpt2.write_model(m, f"{T}/gpt2_v5.bin", "bfloat16")
train_gpt2.pad_vocab = pad_vocab_50257
m = train_gpt2.GPT(train_gpt2.GPTConfig(block_size=32, vocab_size=50257, n_layer=1, n_head=2,
                                        n_embd=16))
train_gpt2.write_model(m, f"{T}/gpt2_50257.bin", "float32")
PY
for v in 3 5; do
    train $DATA --steps 0 --init-from "$T/gpt2_v$v.bin" --out "$T/v$v" ||
        fail "version $v: import exited $?: $(cat "$T/log")"
    grep -q "^init    loaded 36 of 36 tensors" "$T/log" || fail "version $v: $(grep init "$T/log")"
done
# GPT-2's own vocabulary (50257 padded to 50304) fine-tuned on llm.c shards of ids
mkdir "$T/ids"
python3 -c 'import random, struct, sys
random.seed(0)
ids = [random.randrange(50257) for _ in range(4000)]
open(sys.argv[1], "wb").write(struct.pack("<3i", 20240520, 1, len(ids)).ljust(1024, b"\0") +
                              struct.pack(f"<{len(ids)}H", *ids))' "$T/ids/tiny_shakespeare_val.bin"
train --data "$T/ids/tiny_shakespeare_val.bin" --data-vocab 50257 --batch 2 --eval-batches 1 \
    --steps 2 --init-from "$T/gpt2_50257.bin" --out "$T/v50257" ||
    fail "GPT-2's vocabulary: import exited $?: $(cat "$T/log")"
grep -q "^init    loaded 20 of 20 tensors (0.808M numbers)" "$T/log" ||
    fail "GPT-2's vocabulary: $(grep init "$T/log")"
head -c 4000 "$T/text.txt" >"$T/score.txt"
"$B/infer" --threads 2 --checkpoint "$T/v3/model.safetensors" --score "$T/score.txt" >"$T/score" ||
    fail "infer --score exited $?"
# mt's prepared shards, which llm.c's trainer reads from its working directory
train $DATA --prepare "$T/shards" --format llmc || fail "--prepare --format llmc: $(cat "$T/log")"
mkdir -p "$T/llmc/dev/data/tinyshakespeare"
ln -s "$T/shards/train_000000.bin" "$T/llmc/dev/data/tinyshakespeare/tiny_shakespeare_train.bin"
ln -s "$T/shards/val_000000.bin" "$T/llmc/dev/data/tinyshakespeare/tiny_shakespeare_val.bin"
cp "$T/gpt2_v3.bin" "$T/llmc/gpt2_124M.bin"
# train_gpt2.c generating greedily (its sampler's coin replaced by the most likely token) from
# the newline at step 0, printing ids (no tokenizer file), and stopping after step 0
nl=$(python3 -c 'import json, struct, sys
b = open(sys.argv[1], "rb").read()
meta = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])["__metadata__"]
print(json.loads(meta["tokenizer"])["chars"].index(10))' "$T/v3/model.safetensors")
sed -e 's/int next_token = sample_mult(probs, model.config.vocab_size, coin);/int next_token = 0; for (int v = 1; v < model.config.vocab_size; v++) if (probs[v] > probs[next_token]) next_token = v; (void)coin;/' \
    -e "s/gen_tokens\[i\] = tokenizer.eot_token;/gen_tokens[i] = $nl;/" \
    -e 's/step > 0 \&\& step % 20 == 0/step == 0/' -e 's/step <= 40/step <= 0/' \
    "$LLMC/train_gpt2.c" >"$T/llmc/train_greedy.c"
grep -c "next_token = 0; for\|gen_tokens\[i\] = $nl;\|if (step == 0)\|step <= 0;" "$T/llmc/train_greedy.c" |
    grep -qx 4 || fail "patching train_gpt2.c: its source is not the one this test knows"
if ! gcc -O2 -I"$LLMC" -o "$T/llmc/train_greedy" "$T/llmc/train_greedy.c" -lm 2>"$T/gcc.log"; then
    fail "gcc train_gpt2.c: $(cat "$T/gcc.log")"
else
    (cd "$T/llmc" && ./train_greedy) >"$T/llmc.log" 2>&1 || fail "train_gpt2.c: $(cat "$T/llmc.log")"
    "$B/infer" --threads 2 --checkpoint "$T/v3/model.safetensors" --tokens 63 --temperature 0 \
        >"$T/gen" 2>/dev/null || fail "infer exited $?"
fi
/usr/bin/python3 - "$T" <<'PY' || fail "the import is not train_gpt2.py's model"
import json, math, re, struct, sys
import numpy as np, torch
T = sys.argv[1]
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: torch.tensor(np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                                          np.float32).reshape(v["shape"]))
            for k, v in h.items() if k != "__metadata__"}, h["__metadata__"]
sd = torch.load(f"{T}/gpt2.pt")
w = {k: v.double() for k, v in sd.items()}
L, C, NH = 2, 48, 4
bad = 0
# the weights: version 3 exactly, version 5 their bfloat16 rounding
ours = {"tok_emb.weight": "transformer.wte.weight", "pos_emb.weight": "transformer.wpe.weight",
        "final_norm.weight": "transformer.ln_f.weight", "final_norm.bias": "transformer.ln_f.bias"}
for i in range(L):
    for a, b in (("attn_norm", "ln_1"), ("attn.out_proj", "attn.c_proj"), ("ffn_norm", "ln_2"),
                 ("ffn.fc1", "mlp.c_fc"), ("ffn.fc2", "mlp.c_proj")):
        for s in ("weight", "bias"):
            ours[f"blocks.{i}.{a}.{s}"] = f"transformer.h.{i}.{b}.{s}"
def want(name, round_bf16):
    if ".attn." in name and name.split(".")[3] in ("q_proj", "k_proj", "v_proj"):
        i, j = int(name.split(".")[1]), "qkv".index(name.split(".")[3][0])
        x = sd[f"transformer.h.{i}.attn.c_attn.{name.split('.')[-1]}"][j * C:(j + 1) * C]
    else:
        x = sd[ours[name]]
    return x.to(torch.bfloat16).float() if round_bf16 else x
for v in (3, 5):
    got, meta = load(f"{T}/v{v}/model.safetensors")
    for k, x in got.items():
        y = want(k, v == 5)
        if x.shape != y.shape or not torch.equal(x, y):
            print(f"version {v}: {k} differs from train_gpt2.py's")
            bad += 1
    cfg = json.loads(meta["config"])
    if (cfg["act"], cfg["norm"], cfg["pos"], cfg["tied"], cfg["bias"]) != ("gelu", "ln", "learned", True, True):
        print(f"version {v}: the config is not GPT-2's: {cfg}")
        bad += 1

def gelu(x):  # GPT-2's tanh form (Hendrycks and Gimpel 2016)
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
def ln(x, p):
    return torch.nn.functional.layer_norm(x, (C,), w[p + ".weight"], w[p + ".bias"], 1e-5)
def forward(ids):
    """GPT-2 (Radford et al. 2019; OpenAI's model.py): pre-norm blocks, float64."""
    B, t = ids.shape
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:t]
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    for i in range(L):
        p = f"transformer.h.{i}."
        q, k, v = (ln(x, p + "ln_1") @ w[p + "attn.c_attn.weight"].T + w[p + "attn.c_attn.bias"]).split(C, -1)
        q, k, v = (z.view(B, t, NH, C // NH).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-1, -2) / math.sqrt(C // NH)).masked_fill(~mask, -math.inf).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, t, C)
        x = x + y @ w[p + "attn.c_proj.weight"].T + w[p + "attn.c_proj.bias"]
        h = gelu(ln(x, p + "ln_2") @ w[p + "mlp.c_fc.weight"].T + w[p + "mlp.c_fc.bias"])
        x = x + h @ w[p + "mlp.c_proj.weight"].T + w[p + "mlp.c_proj.bias"]
    return ln(x, "transformer.ln_f") @ w["transformer.wte.weight"].T
def nll(ids):  # summed over the predicted tokens
    return float(torch.nn.functional.cross_entropy(forward(ids[None, :-1])[0], ids[1:], reduction="sum"))

# mt's score: consecutive windows of n_ctx + 1 tokens
chars = json.loads(meta["tokenizer"])["chars"]
ids = torch.tensor([chars.index(ord(c)) for c in open(f"{T}/score.txt").read()])
total = sum(nll(ids[s:s + 65]) for s in range(0, len(ids) - 1, 65) if len(ids[s:s + 65]) > 1)
ref = total / (len(ids) - math.ceil(len(ids) / 65))
mt = float(re.search(r"loss=(\S+)", open(f"{T}/score").read()).group(1))
print(f"score: mt {mt:.6f}, torch {ref:.6f}")
if abs(mt - ref) > 3e-6:  # printed to 6 places; the erf GELU is 1.4e-5 off
    print(f"mt's loss {mt} is not the reference's {ref}")
    bad += 1
# llm.c's val loss at step 0: 5 batches of 4 rows of 64 from the val shard's start
try:
    log = open(f"{T}/llmc.log").read()
except OSError:
    sys.exit(1)
b = open(f"{T}/shards/val_000000.bin", "rb").read()
val = torch.tensor(np.frombuffer(b[1024:], np.uint16).astype(np.int64))
ref = np.mean([np.mean([nll(val[256 * i + 64 * r:256 * i + 64 * r + 65]) / 64 for r in range(4)])
               for i in range(5)])
llmc = float(re.search(r"val loss (\S+)", log).group(1))
print(f"val loss: llm.c {llmc:.6f}, torch {ref:.6f}")
if abs(llmc - ref) > 3e-6:
    print(f"llm.c's val loss {llmc} is not the reference's {ref}")
    bad += 1
# the greedy continuations of the newline: llm.c's ids, mt's text
theirs = [int(t) for t in log.split("generating:\n---\n")[1].split("\n---")[0].split()]
text = open(f"{T}/gen").read()
mine = [chars.index(ord(c)) for c in text[1:]]
print(f"greedy: {len(theirs)} ids, llm.c's and mt's {'the same' if theirs == mine else 'differ'}")
if theirs != mine or len(theirs) != 63:
    print(f"greedy: llm.c {theirs}, mt {mine}")
    bad += 1
sys.exit(bad != 0)
PY
finish
