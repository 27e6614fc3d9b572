#!/bin/sh
# ./train --lora-rank R: the base stays as it was (the run's initialisation, or --init-from's
# weights), the adapters train, the optimizer keeps state for them alone, adapter_model.safetensors
# holds them under peft's names beside adapter_config.json; --resume continues a LoRA run bit for
# bit; bad LoRA options are refused with exit 2 naming what is accepted, nothing written.
# MT_BUILD names the build directory.
NAME=test_lora
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || skip "needs python3 to compare tensors"
train() { "$B/train" --threads 2 "$@" >"$T/log" 2>&1; }
head -c 60000 data/tinyshakespeare.txt >"$T/text.txt"
TINY="--data $T/text.txt --n-layer 2 --n-head 2 --n-embd 32 --n-ctx 32 --batch 4 --lr 3e-3
      --eval-every 2 --eval-batches 2 --log-every 1 --schedule const --warmup 0"
LORA="--lora-rank 4 --lora-alpha 8 --lora-targets q,v,down"
train $TINY --steps 0 --out "$T/init" || fail "--steps 0 exited $?: $(cat "$T/log")"
I=$T/init/model.safetensors
train $TINY $LORA --steps 4 --out "$T/a" || fail "LoRA exited $?: $(cat "$T/log")"
A=$T/a/model.safetensors
n=$(count same '.*' "$I" "$I")
[ "$(count same '.*' "$A" "$I")" -eq "$n" ] ||
    fail "the base changed: $(tensors differ '.*' "$A" "$I")"
adapters='blocks\.[01]\.(attn\.[qv]_proj|ffn\.fc2)\.lora_[AB]\.weight'
[ "$(count same "$adapters" "$A" "$A")" -eq 12 ] ||
    fail "the adapters: $(tensors names "$A" | grep lora)"
[ "$(count same '.*lora.*' "$A" "$A")" -eq 12 ] || fail "adapters on other matrices"
[ "$(tensors shape "$A" blocks.0.ffn.fc2.lora_A.weight)" = "[4, 128]" ] &&
    [ "$(tensors shape "$A" blocks.0.ffn.fc2.lora_B.weight)" = "[32, 4]" ] ||
    fail "fc2's adapter shapes: A (r, K), B (O, r)"
# the optimizer's state: the adapters' moments, nothing else
[ "$(tensors names "$T/a/optim.safetensors" | grep -vc 'lora_[AB]')" -eq 0 ] ||
    fail "state for the base: $(tensors names "$T/a/optim.safetensors" | grep -v lora)"
# peft's files: the adapters under base_model.model.<name>, the same values
P=$T/a/adapter_model.safetensors
[ "$(tensors names "$P" | grep -c '^base_model\.model\.blocks\.[01]\..*\.lora_[AB]\.weight$')" -eq 12 ] ||
    fail "adapter_model.safetensors: $(tensors names "$P")"
python3 - "$P" "$A" "$T/a/adapter_config.json" <<'PY' || fail "adapter files"
import json, sys
def load(p):
    b = open(p, "rb").read(); n = int.from_bytes(b[:8], "little"); h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()
            if k != "__metadata__"}
p, a = load(sys.argv[1]), load(sys.argv[2])
assert all(v == a[k[len("base_model.model."):]] for k, v in p.items()), "values differ"
assert any(any(v) for k, v in p.items() if "lora_B" in k), "B still zero after 4 steps"
c = json.load(open(sys.argv[3]))
assert (c["peft_type"], c["r"], c["lora_alpha"], c["lora_dropout"], c["bias"]) == \
    ("LORA", 4, 8, 0, "none"), c
assert c["target_modules"] == ["attn.q_proj", "attn.v_proj", "ffn.fc2"], c["target_modules"]
PY

# resume: 2 steps, then 2 more (the saved options adapt the same), the same weights
train $TINY $LORA --steps 2 --out "$T/b" || fail "2 steps exited $?"
train $TINY --steps 4 --resume --out "$T/b" || fail "--resume exited $?: $(cat "$T/log")"
[ "$(count differ '.*' "$T/b/model.safetensors" "$A")" -eq 0 ] ||
    fail "the resumed run differs in: $(tensors differ '.*' "$T/b/model.safetensors" "$A")"

# from --init-from's weights, with dropout on the adapters' input: the base is the file's
train $TINY --steps 2 --lora-rank 2 --lora-dropout 0.2 --init-from "$I" --out "$T/c" ||
    fail "--init-from LoRA exited $?: $(cat "$T/log")"
[ "$(count same '.*' "$T/c/model.safetensors" "$I")" -eq "$n" ] || fail "--init-from's base changed"

# ./export --merge-lora: W + (alpha / r) B A, a plain checkpoint that scores as the adapted one
# (after 20 steps at a high rate: B far from zero), and the llama2.c export of a LoRA run
train $TINY --arch llama --lr 3e-2 --lora-rank 4 --lora-targets q,k,v,o,gate,up,down --steps 20 \
    --out "$T/d" || fail "llama LoRA exited $?: $(cat "$T/log")"
D=$T/d/model.safetensors
"$B/export" --checkpoint "$D" --merge-lora --format checkpoint --out "$T/merged.safetensors" \
    >"$T/log" 2>&1 || fail "--merge-lora exited $?: $(cat "$T/log")"
[ "$(tensors names "$T/merged.safetensors" | grep -c lora)" -eq 0 ] || fail "adapters left"
[ "$(tensors names "$T/merged.safetensors")" = "$(tensors names "$D" | grep -v lora)" ] ||
    fail "the merged tensors: $(tensors names "$T/merged.safetensors")"
score() { "$B/infer" --threads 2 --checkpoint "$1" --score "$T/text.txt" | sed 's/ .*//; s/loss=//'; }
a=$(score "$D") m=$(score "$T/merged.safetensors")
python3 -c "import sys; a, m = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - m) > 1e-4 * a)" "$a" "$m" ||
    fail "the merged model scores $m, the adapted one $a"
"$B/export" --checkpoint "$D" --format llama2c --out "$T/x.bin" >"$T/log" 2>&1
[ $? -eq 2 ] && grep -q "holds LoRA adapters (4 8 0 q,k,v,o,gate,up,down), which --format llama2c cannot: give --merge-lora" "$T/log" &&
    [ ! -e "$T/x.bin" ] || fail "a llama2c export of adapters unmerged: $(cat "$T/log")"
"$B/export" --checkpoint "$D" --merge-lora --format llama2c --out "$T/x.bin" >"$T/log" 2>&1 &&
    [ -s "$T/x.bin" ] || fail "--merge-lora --format llama2c: $(cat "$T/log")"
"$B/export" --checkpoint "$I" --merge-lora --format checkpoint --out "$T/y.safetensors" >"$T/log" 2>&1
[ $? -eq 2 ] && grep -q "^export: --merge-lora: $I holds no LoRA adapters" "$T/log" &&
    [ ! -e "$T/y.safetensors" ] || fail "--merge-lora without adapters: $(cat "$T/log")"

# bad values: exit 2, named, nothing written
bad() { # expected message, flags...
    msg=$1
    shift
    train $TINY --steps 1 "$@" --out "$T/bad"
    rc=$?
    [ $rc -eq 2 ] || fail "$*: exit $rc"
    grep -qF -- "$msg" "$T/log" || fail "$*: the message: $(cat "$T/log")"
    [ ! -e "$T/bad" ] || fail "$*: the refused run wrote $T/bad"
}
bad "--lora-rank 33: above the smaller side of blocks.0.attn.q_proj.weight (32, 32): expected 1 to 32" --lora-rank 33
bad "--lora-alpha 0: expected a number above 0" --lora-rank 4 --lora-alpha 0
bad "--lora-alpha -1: expected a number above 0" --lora-rank 4 --lora-alpha -1
bad "--lora-dropout 1: expected a probability in [0, 1)" --lora-rank 4 --lora-dropout 1
bad "--lora-targets: 'gate' matches no matrix of the model" --lora-rank 4 --lora-targets q,gate
bad "--lora-targets: 'x' is no target: expected names among q, k, v, o, gate, up, down" --lora-rank 4 --lora-targets x
bad "--lora-alpha 3: this run does not read it (only --lora-rank does)" --lora-alpha 3
finish
