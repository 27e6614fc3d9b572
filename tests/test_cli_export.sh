#!/bin/sh
# ./export's refusals and flags (the files themselves are checked by tests/parity/test_export.py):
# what llama2.c and GGUF cannot hold is refused with exit 2 and a message naming every config key
# that differs (a GPT-2 model; a Llama in each other placement; another norm; an attention
# method; relu2), both refuse a logit soft cap, llama2c refuses an
# eps or rope_theta other than run.c's built-in ones (GGUF stores them), a ViT and an
# encoder-decoder checkpoint are refused by type, --f16 is gguf's only, a bad flag or path is
# named. MT_BUILD names the build directory (default: build).
NAME=test_cli_export
. "$(dirname "$0")/lib.sh"
train() { "$B/train" --threads 1 "$@" >"$T/log" 2>&1 || { fail "train $*: $(tail -n 3 "$T/log")"; return 1; }; }
export_() { "$B/export" "$@" >"$T/out" 2>"$T/err"; }
# refused: exit 2 and each of the words in the message
refused() { # what, words, export flags...
    what=$1 words=$2
    shift 2
    export_ "$@"
    rc=$?
    [ $rc -eq 2 ] || fail "$what: exit $rc, expected 2 ($(cat "$T/err"))"
    for w in $words; do grep -qF -- "$w" "$T/err" || fail "$what: no '$w' in: $(cat "$T/err")"; done
}

head -c 30000 data/tinyshakespeare.txt >"$T/text"
TINY="--data $T/text --n-layer 1 --n-head 2 --n-embd 16 --n-ctx 16 --batch 2 --steps 2
      --eval-every 0 --log-every 2"

# a GPT-2-style model: every key that differs, both formats
train $TINY --out "$T/gpt2"
for f in llama2c gguf; do
    refused "gpt2 to $f" "norm = ln bias = true act = gelu pos = learned --arch llama" \
        --checkpoint "$T/gpt2/model.safetensors" --format $f --out "$T/x.$f"
done
[ ! -e "$T/x.llama2c" ] && [ ! -e "$T/tokenizer.bin" ] || fail "a refused export left a file"

# a Llama in the other placements, and with another norm
for p in post deepnorm subln peri; do
    train $TINY --arch llama --placement $p --out "$T/$p" &&
        refused "placement $p" "placement = $p (--placement pre)" \
            --checkpoint "$T/$p/model.safetensors" --format gguf --out "$T/x.gguf"
done
train $TINY --arch llama --norm prms --out "$T/prms" &&
    refused "norm prms" "norm = prms (--norm rms)" --checkpoint "$T/prms/model.safetensors" \
        --format llama2c --out "$T/x.bin"
# the stream's skips: scalars neither format has
for f in layer-lambdas unet; do
    train $TINY --arch llama --$f --out "$T/$f" &&
        refused "$f" "$(echo $f | tr - _) = true (no --$f" \
            --checkpoint "$T/$f/model.safetensors" --format gguf --out "$T/x.gguf"
done
# the attention's methods: weights neither format has
train $TINY --arch llama --softmax softpick --out "$T/softpick" &&
    refused "softpick" "softmax = softpick (--softmax softmax)" \
        --checkpoint "$T/softpick/model.safetensors" --format gguf --out "$T/x.gguf"
train $TINY --arch llama --attn-gate headwise --attn-sink --value-residual learned --n-layer 2 \
    --out "$T/gate" &&
    for f in llama2c gguf; do
        refused "attn gate, sink and value residual to $f" \
            "attn_gate = headwise (--attn-gate none) attn_sink = true (no --attn-sink) value_residual = learned (--value-residual none)" \
            --checkpoint "$T/gate/model.safetensors" --format $f --out "$T/x.$f"
    done
# value embeddings: token tables of the values, which neither format has
train $TINY --arch llama --value-embeds 0 --out "$T/ve" &&
    for f in llama2c gguf; do
        refused "value embeddings to $f" "value_embeds = 0 (no --value-embeds)" \
            --checkpoint "$T/ve/model.safetensors" --format $f --out "$T/x.$f"
    done
# hyper-connections: N residual streams, which a Llama's one stream cannot hold
train $TINY --arch llama --residual hc --hc-streams 2 --out "$T/hc" &&
    refused "hyper-connections" "residual = hc (--residual sum" \
        --checkpoint "$T/hc/model.safetensors" --format gguf --out "$T/x.gguf"
# the FFN's and the head's: relu2 has no w3; neither format caps the logits
train $TINY --arch llama --act relu2 --out "$T/relu2" &&
    refused "relu2" "act = relu2 (--act swiglu)" --checkpoint "$T/relu2/model.safetensors" \
        --format gguf --out "$T/x.gguf"
train $TINY --arch llama --logit-softcap 30 --out "$T/softcap" &&
    for f in llama2c gguf; do
        refused "softcap to $f" "--format $f logit_softcap = 30 (--logit-softcap)" \
            --checkpoint "$T/softcap/model.safetensors" --format $f --out "$T/x.$f"
    done
train $TINY --arch llama --param completep --base-depth 1 --out "$T/cp" &&
    for f in llama2c gguf; do
        refused "completep to $f" "--format $f param = completep (--param sp" \
            --checkpoint "$T/cp/model.safetensors" --format $f --out "$T/x.$f"
    done
train $TINY --arch llama --rms-form paper --out "$T/paper" &&
    refused "rms form paper" "rms_form = paper" --checkpoint "$T/paper/model.safetensors" \
        --format gguf --out "$T/x.gguf"

# run.c's eps and theta are built in: llama2c refuses others, GGUF stores them
train $TINY --arch llama --norm-eps 1e-6 --rope-theta 500000 --out "$T/eps"
refused "eps 1e-6 to llama2c" "norm_eps = 1e-06 --format gguf" \
    --checkpoint "$T/eps/model.safetensors" --format llama2c --out "$T/x.bin"
train $TINY --arch llama --rope-theta 500000 --out "$T/theta"
refused "theta to llama2c" "rope_theta = 500000" \
    --checkpoint "$T/theta/model.safetensors" --format llama2c --out "$T/x.bin"
export_ --checkpoint "$T/eps/model.safetensors" --format gguf --out "$T/eps.gguf" ||
    fail "eps and theta to gguf: $(cat "$T/err")"

# a Llama exports to both; the tokenizer goes beside --out unless named
train $TINY --arch llama --out "$T/llama"
export_ --checkpoint "$T/llama/model.safetensors" --format llama2c --out "$T/ll/model.bin" &&
    fail "llama2c into a missing directory: exit 0"
mkdir -p "$T/ll"
export_ --checkpoint "$T/llama/model.safetensors" --format llama2c --out "$T/ll/model.bin" ||
    fail "llama2c: $(cat "$T/err")"
[ -s "$T/ll/model.bin" ] && [ -s "$T/ll/tokenizer.bin" ] || fail "llama2c files: $(ls "$T/ll")"
export_ --checkpoint "$T/llama/model.safetensors" --format llama2c --out "$T/m.bin" \
    --tokenizer-out "$T/tok.bin" && [ -s "$T/tok.bin" ] || fail "--tokenizer-out: $(cat "$T/err")"
refused "same out and tokenizer" "--tokenizer-out" --checkpoint "$T/llama/model.safetensors" \
    --out "$T/m.bin" --tokenizer-out "$T/m.bin"
# an output naming the checkpoint itself (through another path) is refused, the checkpoint kept
cp "$T/llama/model.safetensors" "$T/self.safetensors"
sum=$(cksum <"$T/self.safetensors")
refused "--out over the checkpoint" "--out --checkpoint destroy" --checkpoint "$T/self.safetensors" \
    --format gguf --out "$T/./self.safetensors"
refused "--tokenizer-out over the checkpoint" "--tokenizer-out" --checkpoint "$T/self.safetensors" \
    --out "$T/self.bin" --tokenizer-out "$T/../$(basename "$T")/self.safetensors"
[ "$(cksum <"$T/self.safetensors")" = "$sum" ] || fail "the checkpoint changed"
export_ --checkpoint "$T/llama/model.safetensors" --format gguf --out "$T/m.gguf" ||
    fail "gguf: $(cat "$T/err")"
[ "$(head -c 4 "$T/m.gguf")" = GGUF ] || fail "gguf magic: $(head -c 4 "$T/m.gguf" | od -c)"
ls "$T"/*.tmp "$T"/ll/*.tmp >/dev/null 2>&1 && fail "temporary files left: $(ls "$T")"

# models of other types
train --model vit --data data/mnist --patch 7 --n-layer 1 --n-head 2 --n-embd 16 --batch 4 \
    --steps 1 --eval-every 0 --out "$T/vit"
refused "vit" "vit checkpoint" --checkpoint "$T/vit/model.safetensors" --format gguf \
    --out "$T/x.gguf"
for w in cat dog bird fish cow horse mouse rat bat hat; do
    echo "$w $(echo $w | sed 's/./& /g' | tr a-z A-Z)"
done >"$T/dict"
train --model encdec --data "$T/dict" --enc-layers 1 --dec-layers 1 --n-head 2 --n-embd 16 \
    --batch 4 --steps 1 --eval-every 0 --out "$T/ed"
refused "encdec" "encdec checkpoint" --checkpoint "$T/ed/model.safetensors" --format llama2c \
    --out "$T/x.bin"

# flags
refused "f16 to llama2c" "--f16 float32 --format gguf" --checkpoint "$T/llama/model.safetensors" \
    --format llama2c --f16 --out "$T/x.bin"
export_ --checkpoint "$T/llama/model.safetensors" --format gguf --f16 --out "$T/h.gguf" &&
    [ "$(wc -c <"$T/h.gguf")" -lt "$(wc -c <"$T/m.gguf")" ] || fail "--f16: $(cat "$T/err")"
refused "bad format" "--format onnx llama2c gguf" --checkpoint "$T/llama/model.safetensors" \
    --format onnx --out "$T/x"
refused "no --out" "--out" --checkpoint "$T/llama/model.safetensors"
refused "no checkpoint" "--checkpoint" --checkpoint "$T/none.safetensors" --out "$T/x"
"$B/export" --help | grep -q "llama2c|gguf" || fail "--help"

finish
