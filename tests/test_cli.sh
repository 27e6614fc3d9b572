#!/bin/sh
# ./train and ./infer end to end on a tiny model: the loss falls, --steps 0 writes a model, a
# resumed run ends bit-identical to an uninterrupted one, flags and config errors exit 2, a
# diverging run exits 1 and keeps its last checkpoint, sampling is reproducible, --score and
# --prepare work, the bpe tokenizer trains, resumes, samples and prepares, --logit-softcap caps
# the logits every loss and ./infer see, --target-loss and --time-budget stop a run early. MT_BUILD names the
# build directory (default: build).
NAME=test_cli
. "$(dirname "$0")/lib.sh"
# every run prints into $T/log; shown when a check fails
train() { "$B/train" --threads 2 "$@" >"$T/log" 2>&1; }
infer() { "$B/infer" --threads 2 "$@" 2>"$T/log"; }

head -c 60000 data/tinyshakespeare.txt >"$T/text.txt"
TINY="--data $T/text.txt --n-layer 2 --n-head 2 --n-embd 32 --n-ctx 32 --batch 8 --lr 3e-3
      --warmup 5 --eval-every 20 --eval-batches 2 --log-every 5"

# value embeddings' tables and lambdas saved by name, resumed to the same bits, and sampled
# through the KV cache
R="$TINY --value-embeds 0,-1 --schedule const --steps 12 --save-every 6"
train $R --out "$T/ve" && mv "$T/ve" "$T/ve1" || fail "value-embeds run: $(cat "$T/log")"
train $R --steps 6 --out "$T/ve" && train --resume --out "$T/ve" --steps 12 ||
    fail "value-embeds resume: $(cat "$T/log")"
cmp -s "$T/ve1/model.safetensors" "$T/ve/model.safetensors" || fail "value-embeds resume differs"
for n in value_embeds.0.weight value_embeds.1.lambda_v value_embeds.1.lambda_e; do
    grep -aq "\"$n\"" "$T/ve/model.safetensors" || fail "value-embeds: no $n in the checkpoint"
done
infer --checkpoint "$T/ve/model.safetensors" --prompt "ROMEO:" --tokens 8 >/dev/null ||
    fail "value-embeds sample: $(cat "$T/log")"

# the loss falls over 60 steps; metrics.csv has its header and a row per logged step
train $TINY --steps 60 --out "$T/a" || { fail "train exited $?"; cat "$T/log"; }
first=$(sed -n 2p "$T/a/metrics.csv" | cut -d, -f2)
last=$(tail -n 1 "$T/a/metrics.csv" | cut -d, -f2)
val=$(tail -n 1 "$T/a/metrics.csv" | cut -d, -f3)
[ "$(head -n 1 "$T/a/metrics.csv")" = "step,loss,val_loss,lr,grad_norm,ms,tok_per_s,elapsed_s" ] ||
    fail "metrics header"
[ "$(wc -l <"$T/a/metrics.csv")" -eq 13 ] || fail "metrics rows: $(wc -l <"$T/a/metrics.csv")"
awk -v a="$first" -v b="$last" -v v="$val" 'BEGIN { exit !(b < a - 1.0 && v < a - 0.8) }' ||
    fail "loss did not fall: first $first, last $last, val $val"

# --steps 0 writes the initialised model and its optimizer state
train $TINY --steps 0 --out "$T/zero" || fail "--steps 0 exited $?"
[ -f "$T/zero/model.safetensors" ] && [ -f "$T/zero/optim.safetensors" ] || fail "--steps 0 wrote nothing"
infer --info "$T/zero/model.safetensors" | grep -q "^steps       0$" || fail "--info of step 0"

# 30 steps at once and 15 + 15 resumed give the same bits (constant lr: the schedule does not
# depend on --steps)
R="$TINY --schedule const --dropout 0.1 --steps 30 --save-every 10"
train $R --out "$T/r" && mv "$T/r" "$T/once" || fail "run once"
train $R --steps 15 --out "$T/r" || fail "first half"
train --resume --out "$T/r" --steps 30 || { fail "resume exited $?"; cat "$T/log"; }
grep -q resumed "$T/log" || fail "resume did not say so"
cmp -s "$T/once/model.safetensors" "$T/r/model.safetensors" || fail "resumed weights differ"
cmp -s "$T/once/optim.safetensors" "$T/r/optim.safetensors" || fail "resumed optimizer differs"
# step, loss, lr, grad_norm (the first half also evaluated at its last step)
[ "$(cut -d, -f1,2,4,5 "$T/once/metrics.csv")" = "$(cut -d, -f1,2,4,5 "$T/r/metrics.csv")" ] ||
    fail "resumed metrics differ"
# elapsed_s grows row by row, across the resume too
awk -F, 'NR > 1 { if ($8 == "" || $8 + 0 < prev) exit 1; prev = $8 + 0 }' "$T/r/metrics.csv" ||
    fail "elapsed_s does not grow: $(cut -d, -f1,8 "$T/r/metrics.csv" | tr '\n' ' ')"
train --resume --out "$T/r" --n-layer 3 && fail "resume with another model accepted"
grep -q "n_layer is 2 in the checkpoint, 3 now" "$T/log" || fail "resume mismatch message: $(cat "$T/log")"
# a run of a build before derived defaults (its saved options say min-lr = -1, warmup = -1):
# the same flags over it start it over (the same run); resumed, its warmup is derived anew
OLD="--data $T/text.txt --n-layer 1 --n-head 2 --n-embd 16 --n-ctx 16 --batch 4 --out $T/old"
old_options() {
    /usr/bin/python3 - "$T/old/model.safetensors" <<'PY' || fail "old options not written"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
o = h["__metadata__"]["options"]
assert "min-lr" not in o and "\nwarmup =" not in o
h["__metadata__"].pop("mt_crc32c")  # its checksums: of the options as written
h["__metadata__"]["options"] = o.replace("\nschedule =", "\nmin-lr = -1\nwarmup = -1\nschedule =")
j = json.dumps(h, separators=(",", ":")).encode()
j += b" " * (-len(j) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(j)) + j + b[8 + n:])
PY
}
train $OLD --steps 4 || fail "old-run setup: $(cat "$T/log")"
old_options
train $OLD --steps 4 || fail "the old run's flags again: $(cat "$T/log")"
old_options
train --resume --out "$T/old" --steps 30 --log-every 10 || fail "old run resumed: $(cat "$T/log")"
grep -q "warmup 3)" "$T/log" || fail "old run's warmup not derived anew (3): $(cat "$T/log")"

# usage errors exit 2 and name the culprit
train --n-layers 3; [ $? -eq 2 ] && grep -q "unknown flag --n-layers (did you mean --n-layer?)" "$T/log" ||
    fail "unknown flag: $(cat "$T/log")"
printf 'lr = 1e-3\nbatchsize = 4\n' >"$T/bad.ini"
train --config "$T/bad.ini"; [ $? -eq 2 ] && grep -q "bad.ini:2: unknown key 'batchsize'" "$T/log" ||
    fail "unknown config key: $(cat "$T/log")"
train --resume --out "$T/none"; [ $? -eq 2 ] && grep -q "no checkpoint" "$T/log" || fail "resume without a run"
train $TINY --norm batch; [ $? -eq 2 ] && grep -q "is not one of ln|rms" "$T/log" || fail "bad choice"
# DyT and Derf: refused with DeepNorm and their options with another norm (docs/norms.md)
train $TINY --norm dyt --placement deepnorm; [ $? -eq 2 ] && grep -q "skip scale alpha" "$T/log" ||
    fail "dyt with deepnorm: $(cat "$T/log")"
train $TINY --norm ln --dyt-alpha-attn 0.8; [ $? -eq 2 ] &&
    grep -q "dyt-alpha-attn 0.8: this run does not read it (only --norm dyt or derf does)" "$T/log" || fail "dyt alpha with ln"
train $TINY --norm derf --dyt-alpha 0; [ $? -eq 2 ] && grep -q "must be > 0" "$T/log" ||
    fail "derf alpha 0: $(cat "$T/log")"
# (a run accepted by mistake stays short and out of the way)
W="--steps 0 --out $T/refused"
train $TINY $W --norm rms --dyt-weight-init 8; [ $? -eq 2 ] &&
    grep -q "dyt-weight-init 8: this run does not read it (only --norm dyt or derf does)" "$T/log" || fail "dyt weight with rms"
train $TINY $W --norm dyt --dyt-weight-init 0; [ $? -eq 2 ] && grep -q "finite number > 0" "$T/log" ||
    fail "dyt weight 0: $(cat "$T/log")"
train $TINY $W --norm derf --dyt-weight-init -8; [ $? -eq 2 ] && grep -q "out of range" "$T/log" ||
    fail "derf weight -8: $(cat "$T/log")"
train $TINY $W --norm dyt --dyt-weight-init nan; [ $? -eq 2 ] && grep -q "not a finite" "$T/log" ||
    fail "dyt weight nan: $(cat "$T/log")"
# QK-norm: l2 without its gain and a scope without a norm are refused (docs/layers.md)
train $TINY --qk-norm l2; [ $? -eq 2 ] && grep -q "softmax stays near uniform" "$T/log" ||
    fail "qk-norm l2 without affine: $(cat "$T/log")"
train $TINY --qk-norm-scope all; [ $? -eq 2 ] && grep -q "no QK-norm to apply to" "$T/log" ||
    fail "qk-norm scope without a norm: $(cat "$T/log")"
# the attention's methods: a gate not in the list, a sink with softpick, a value residual without
# later blocks (docs/layers.md)
train $TINY $W --attn-gate channel; [ $? -eq 2 ] &&
    grep -q "'channel' is not one of none|elementwise|headwise" "$T/log" ||
    fail "attn-gate channel: $(cat "$T/log")"
train $TINY $W --attn-sink --softmax softpick; [ $? -eq 2 ] &&
    grep -q "already lets a head attend to nothing" "$T/log" ||
    fail "attn-sink with softpick: $(cat "$T/log")"
train $TINY $W --softmax sparsemax; [ $? -eq 2 ] && grep -q "softmax|softpick" "$T/log" ||
    fail "softmax sparsemax: $(cat "$T/log")"
train $TINY $W --value-residual half --n-layer 1; [ $? -eq 2 ] &&
    grep -q "value-residual half with 1 block in a stack: refused" "$T/log" ||
    fail "value-residual with one block: $(cat "$T/log")"
train $TINY $W --value-residual all; [ $? -eq 2 ] && grep -q "none|half|learned" "$T/log" ||
    fail "value-residual all: $(cat "$T/log")"
# value embeddings (docs/layers.md): a layer the model has not, one named twice, an odd list
# shared, sharing without a list, not a number, with the value residual or nGPT, and the ViT's
# (no token table: the GPT's flag)
train $TINY $W --value-embeds 0,2; [ $? -eq 2 ] &&
    grep -q "layer 2 does not exist: 2 blocks take layers 0..1 (or -2..-1 from the last)" \
        "$T/log" || fail "value-embeds 0,2: $(cat "$T/log")"
train $TINY $W --value-embeds 1,-1; [ $? -eq 2 ] && grep -q "layer 1 is named twice" "$T/log" ||
    fail "value-embeds 1,-1: $(cat "$T/log")"
train $TINY $W --value-embeds 0,1,-1 --n-layer 3 --value-embeds-shared; [ $? -eq 2 ] &&
    grep -q "3 layers: the list's two halves share their tables" "$T/log" ||
    fail "value-embeds-shared odd: $(cat "$T/log")"
train $TINY $W --value-embeds-shared; [ $? -eq 2 ] && grep -q "only --value-embeds does" "$T/log" ||
    fail "value-embeds-shared alone: $(cat "$T/log")"
train $TINY $W --value-embeds first; [ $? -eq 2 ] && grep -q "not a list of layers" "$T/log" ||
    fail "value-embeds first: $(cat "$T/log")"
train $TINY $W --value-embeds 0 --value-residual learned; [ $? -eq 2 ] &&
    grep -q "value-embeds with --value-residual learned: refused" "$T/log" ||
    fail "value-embeds with value-residual: $(cat "$T/log")"
train $TINY $W --value-embeds 0 --arch ngpt; [ $? -eq 2 ] &&
    grep -q "value-embeds with --arch ngpt: refused" "$T/log" ||
    fail "value-embeds with ngpt: $(cat "$T/log")"
train --model vit --data data/mnist $W --value-embeds 0; [ $? -eq 2 ] &&
    grep -q "value-embeds: refused for --model vit: it is an option of --model gpt only" \
        "$T/log" || fail "value-embeds vit: $(cat "$T/log")"
# hyper-connections (docs/layers.md): their streams' bounds, their options without them, a
# residual of their own or a placement they do not take
train $TINY $W --residual hc --hc-streams 0; [ $? -eq 2 ] &&
    grep -q "hc-streams: 0 is out of range: expected from 1 to 16" "$T/log" ||
    fail "hc-streams 0: $(cat "$T/log")"
train $TINY $W --residual hc --hc-streams 17; [ $? -eq 2 ] && grep -q "from 1 to 16" "$T/log" ||
    fail "hc-streams 17: $(cat "$T/log")"
for f in "--hc-streams 2" --hc-static; do
    train $TINY $W $f; [ $? -eq 2 ] && grep -q "only --residual hc or mhc does" "$T/log" ||
        fail "$f without --residual hc: $(cat "$T/log")"
done
train $TINY $W --residual hc --arch ngpt; [ $? -eq 2 ] &&
    grep -q "residual hc with --arch ngpt: refused" "$T/log" ||
    fail "residual hc with arch ngpt: $(cat "$T/log")"
for pl in post deepnorm subln mixln; do
    train $TINY $W --residual hc --placement $pl; [ $? -eq 2 ] &&
        grep -q "placement $pl with --residual hc: refused: hyper-connections are Pre-LN" \
            "$T/log" || fail "residual hc with placement $pl: $(cat "$T/log")"
done
train $TINY $W --residual hc --norm bn; [ $? -eq 2 ] &&
    grep -q "statistics cross tokens" "$T/log" ||
    fail "residual hc with norm bn: $(cat "$T/log")"
# mHC: Sinkhorn-Knopp needs an iteration; its count without mHC
train $TINY $W --residual mhc --mhc-iters 0; [ $? -eq 2 ] &&
    grep -q "mhc-iters: 0 is out of range: expected at least 1" "$T/log" ||
    fail "mhc-iters 0: $(cat "$T/log")"
train $TINY $W --residual hc --mhc-iters 5; [ $? -eq 2 ] &&
    grep -q "only --residual mhc does" "$T/log" || fail "mhc-iters with hc: $(cat "$T/log")"
train $TINY $W --residual mhc --arch ngpt; [ $? -eq 2 ] &&
    grep -q "residual mhc with --arch ngpt: refused" "$T/log" ||
    fail "residual mhc with arch ngpt: $(cat "$T/log")"
train $TINY $W --residual sums; [ $? -eq 2 ] && grep -q "not one of sum|hc|mhc" "$T/log" ||
    fail "residual sums: $(cat "$T/log")"
# --param mup and completep (docs/optimizers.md): the base model's depth and width required and
# in range, their flags without them, the placements, residuals, inits and optimizers they do
# not take; a completep run trains, resumes and keeps them in its checkpoint
for a in "completep" "completep --base-depth 3"; do
    train $TINY $W --param $a; [ $? -eq 2 ] &&
        grep -q "base model's depth L0 is required, 1 to n_layer = 2" "$T/log" ||
        fail "--param $a: $(cat "$T/log")"
done
train $TINY $W --param mup; [ $? -eq 2 ] && grep -q "base model's width C0 is required" "$T/log" ||
    fail "--param mup without --base-width: $(cat "$T/log")"
train $TINY $W --param mup --base-width 15; [ $? -eq 2 ] && grep -q "give a multiple of 2" "$T/log" ||
    fail "--base-width 15: $(cat "$T/log")"
train $TINY $W --param mup --base-width -1; [ $? -eq 2 ] && grep -q "expected at least 0" "$T/log" ||
    fail "--base-width -1: $(cat "$T/log")"
train $TINY $W --base-depth 1; [ $? -eq 2 ] && grep -q "only --param completep does" "$T/log" ||
    fail "--base-depth without --param completep: $(cat "$T/log")"
train $TINY $W --param mup --base-width 16 --base-depth 1; [ $? -eq 2 ] &&
    grep -q "only --param completep does" "$T/log" || fail "--base-depth with mup: $(cat "$T/log")"
train $TINY $W --base-width 16; [ $? -eq 2 ] && grep -q "only --param mup or completep does" "$T/log" ||
    fail "--base-width without --param: $(cat "$T/log")"
for pl in post deepnorm dsl; do
    train $TINY $W --param completep --base-depth 1 --placement $pl; [ $? -eq 2 ] &&
        grep -q "param completep needs --placement pre" "$T/log" ||
        fail "--param completep with placement $pl: $(cat "$T/log")"
done
for r in "--arch ngpt" "--residual hc"; do
    train $TINY $W --param completep --base-depth 1 $r; [ $? -eq 2 ] &&
        grep -q "needs a residual that sums its sublayers" "$T/log" ||
        fail "--param completep with $r: $(cat "$T/log")"
done
train $TINY $W --param mup --base-width 16 --init xavier; [ $? -eq 2 ] &&
    grep -q "param mup needs --init gpt2" "$T/log" || fail "--param mup --init xavier: $(cat "$T/log")"
for o in lion muon sgd; do
    train $TINY $W --param mup --base-width 16 --optim $o; [ $? -eq 2 ] &&
        grep -q "optim $o with --param mup or completep: refused" "$T/log" ||
        fail "--param mup --optim $o: $(cat "$T/log")"
done
[ ! -e "$T/refused" ] || fail "a refused run wrote $T/refused"
CP="--param completep --base-depth 1 --base-width 16"
train $TINY $CP --steps 10 --out "$T/cp" || fail "--param completep: $(cat "$T/log")"
train --resume --out "$T/cp" --steps 20 || fail "--param completep resumed: $(cat "$T/log")"
infer --info "$T/cp/model.safetensors" |
    grep -q '"param":"completep","base_depth":1,"base_width":16' ||
    fail "--param completep not in the checkpoint's config"
# a config file is read and a flag overrides it
printf 'n-layer = 1\nn_embd = 16\nsteps = 3\n' >"$T/ok.ini"
train --config "$T/ok.ini" --data "$T/text.txt" --n-ctx 16 --steps 2 --out "$T/c" --log-every 1 ||
    fail "config run"
infer --info "$T/c/model.safetensors" >"$T/info"
grep -q '"n_layer":1,' "$T/info" && grep -q '"n_embd":16,' "$T/info" && grep -q "^steps       2$" "$T/info" ||
    fail "config not applied: $(cat "$T/info")"

# divergence: exit 1, the step and the parameter named, the last checkpoint kept
train $TINY --lr 1e4 --clip 0 --warmup 0 --schedule const --steps 200 --save-every 1 --out "$T/nan"
rc=$?
[ $rc -eq 1 ] && grep -q "step [0-9]*: the loss is" "$T/log" || fail "divergence: exit $rc: $(tail -n 2 "$T/log")"
grep -q "first non-finite gradient is in\|every gradient is finite" "$T/log" || fail "divergence message"
infer --info "$T/nan/model.safetensors" >/dev/null || fail "no checkpoint after divergence"

# --profile: the time per op of the training steps, after the run (2 layers: 8 linears and 2 ffns
# a step)
train $TINY --steps 5 --out "$T/prof" --profile || fail "--profile: $(cat "$T/log")"
grep -q "^op profile: 5 steps" "$T/log" && grep -Eq "^linear +9 " "$T/log" && # 4 a layer, the tied head
    grep -Eq "^ffn +2 " "$T/log" &&
    grep -q "^(outside ops)" "$T/log" || fail "--profile table: $(tail -n 12 "$T/log")"

# --precision and MT_GEMM: a bad value names the accepted ones; bf16 trains, resumes and samples
# where this build and CPU have it, and is refused with the reason (exit 2) where not
train $TINY --steps 1 --out "$T/prec" --precision fp16; [ $? -eq 2 ] &&
    grep -q "is not one of fp32|bf16" "$T/log" || fail "bad precision: $(cat "$T/log")"
env MT_GEMM=mkl "$B/train" $TINY --steps 1 --out "$T/prec" >"$T/log" 2>&1; [ $? -eq 2 ] &&
    grep -q "MT_GEMM: unknown GEMM backend 'mkl' (accepted: auto, openblas, onednn)" "$T/log" ||
    fail "bad MT_GEMM: $(cat "$T/log")"
if has_bf16; then
    train $TINY --steps 10 --save-every 5 --out "$T/bf16" --precision bf16 ||
        fail "bf16: train exited $?: $(tail -n 3 "$T/log")"
    grep -q "bf16 products" "$T/log" || fail "bf16: not announced: $(head -n 3 "$T/log")"
    train $TINY --steps 10 --save-every 5 --out "$T/bf16" --precision bf16 --resume ||
        fail "bf16 resume: $(tail -n 3 "$T/log")"
    infer --checkpoint "$T/bf16/model.safetensors" --prompt "ROMEO:" --tokens 20 \
        --precision bf16 >/dev/null || fail "bf16 sampling: $(cat "$T/log")"
else
    [ "$BF16_RC" -eq 2 ] && echo "$BF16_WHY" | grep -Eq "precision bf16 needs (oneDNN|a CPU with AVX512_BF16)" ||
        fail "bf16 refused without the reason: exit $BF16_RC: $BF16_WHY"
fi

# sampling: the same seed gives the same text, another seed another text
M="$T/a/model.safetensors"
s1=$(infer --checkpoint "$M" --prompt "ROMEO:" --tokens 60 --seed 7)
s2=$(infer --checkpoint "$M" --prompt "ROMEO:" --tokens 60 --seed 7)
s3=$(infer --checkpoint "$M" --prompt "ROMEO:" --tokens 60 --seed 8)
s4=$(infer --checkpoint "$M" --prompt "ROMEO:" --tokens 60 --seed 7 --no-cache)
[ "$s1" = "$s2" ] || fail "same seed, other text"
[ "$s1" != "$s3" ] || fail "another seed, same text"
[ "$s1" = "$s4" ] || fail "the cache changes the text"
case "$s1" in ROMEO:*) ;; *) fail "the sample does not start with the prompt" ;; esac

# scoring: the last line's format; a token file scores as the text it came from
tail -c 5000 data/tinyshakespeare.txt >"$T/s.txt"
infer --checkpoint "$M" --score "$T/s.txt" | tail -n 1 >"$T/score"
grep -Eq '^loss=[0-9]+\.[0-9]+ ppl=[0-9]+\.[0-9]+ tokens=[0-9]+ bpb=[0-9]+\.[0-9]+ bytes=[0-9]+$' "$T/score" ||
    fail "score line: $(cat "$T/score")"
grep -q "tokens=4848 .* bytes=4848$" "$T/score" || fail "5000 tokens in windows of 33: 151 x 32 + 16: $(cat "$T/score")"
# a flag of another use than the checkpoint's, or one the run does not read, is refused naming
# what reads it (exit 2, nothing printed); --info reads no use's flag
while IFS='|' read -r why args; do
    eval "infer $args" >"$T/out"
    [ $? -eq 2 ] && grep -q -e "$why" "$T/log" && [ ! -s "$T/out" ] || fail "$args: $(cat "$T/log")"
done <<EOF
only the images use reads it.*is a gpt checkpoint, whose use is text|--checkpoint $M --classify x.pgm
only the g2p use reads it|--checkpoint $M --beam 2
--tokens 5: .*only sampling|--checkpoint $M --score $T/s.txt --tokens 5
--info reads no option of a use (text|--info $M --prompt x
EOF
"$B/train" --data "$T/text.txt" --tokenizer char --prepare "$T/text.bin" >"$T/log" || fail "prepare"
cp "$T/text.txt" "$T/same.txt" # --prepare over its own --data: refused, the text kept
"$B/train" --data "$T/same.txt" --prepare "$T/./same.txt" >"$T/log" 2>&1
[ $? -eq 2 ] && grep -q "would destroy the input" "$T/log" && cmp -s "$T/text.txt" "$T/same.txt" ||
    fail "--prepare over --data: $(cat "$T/log")"
train --data "$T/text.bin" --n-layer 1 --n-embd 16 --n-ctx 16 --steps 3 --out "$T/bin" ||
    fail "train on a token file: $(cat "$T/log")"
infer --info "$T/bin/model.safetensors" | grep -q "tokenizer   char" || fail "char tokenizer from the token file"
infer --checkpoint "$T/bin/model.safetensors" --prompt "ROMEO: \$" --tokens 5 >/dev/null
[ $? -eq 2 ] && grep -q "character '\\$'" "$T/log" || fail "unknown character: $(cat "$T/log")"

# bpe: learnt from the training part, in the checkpoint; a resumed run learns the same merges;
# any prompt encodes; a token file carries the merges; a vocabulary out of range exits 2
BPE="$TINY --tokenizer bpe --vocab-size 400 --schedule const"
train $BPE --steps 4 --out "$T/bpe" || fail "bpe: $(cat "$T/log")"
grep -q "bpe tokenizer, vocabulary 400" "$T/log" || fail "bpe data line: $(head -n 1 "$T/log")"
train --resume --out "$T/bpe" --steps 6 || fail "bpe resume: $(cat "$T/log")"
infer --info "$T/bpe/model.safetensors" | grep -q "tokenizer   bpe, vocabulary 400" || fail "bpe --info"
P=$(printf 'ROMEO: $ caf\303\251 \342\230\203')
s=$(infer --checkpoint "$T/bpe/model.safetensors" --prompt "$P" --tokens 20 --seed 3) ||
    fail "bpe sample: $(cat "$T/log")"
case "$s" in "$P"*) ;; *) fail "bpe sample: $s" ;; esac
infer --checkpoint "$T/bpe/model.safetensors" --score "$T/s.txt" | tail -n 1 >"$T/score"
# a bpe token holds several bytes: more bytes than tokens are predicted
awk -F'[= ]' '{ exit !($10 > 1.5 * $6) }' "$T/score" || fail "bpe score: $(cat "$T/score")"
"$B/train" $BPE --prepare "$T/bpe.bin" >"$T/log" && grep -q "bpe tokenizer, vocabulary 400" "$T/log" ||
    fail "bpe prepare: $(cat "$T/log")"
train $BPE --vocab-size 256 --steps 1 --out "$T/bad"
[ $? -eq 2 ] && grep -q -- "--vocab-size.*256.*from 257 to 65536" "$T/log" || fail "vocab 256: $(cat "$T/log")"

# the LLaMA preset: the loss falls, the checkpoint holds the resolved pieces, the cache samples as
# the full forward does; a flag given alongside keeps its value
train $TINY --arch llama --n-kv-head 1 --steps 40 --out "$T/llama" || fail "llama: $(cat "$T/log")"
grep -q "^model   llama, 2 layers, 2 heads (1 key-value), .*norm rms, .*pos rope, act swiglu, no bias" \
    "$T/log" || fail "llama model line: $(grep ^model "$T/log")"
awk -F, 'NR == 2 { a = $2 } END { exit !($2 < a - 0.8) }' "$T/llama/metrics.csv" ||
    fail "llama: the loss did not fall: $(cut -d, -f1,2 "$T/llama/metrics.csv" | tr '\n' ' ')"
infer --info "$T/llama/model.safetensors" >"$T/info"
grep -q '"arch":"llama","pos":"rope","rope_theta":10000,' "$T/info" &&
    grep -q '"n_kv_head":1,' "$T/info" && grep -q '"n_ff":96,' "$T/info" &&
    grep -q '"norm":"rms",' "$T/info" && grep -q '"bias":false,"act":"swiglu"' "$T/info" ||
    fail "llama config: $(cat "$T/info")"
s1=$(infer --checkpoint "$T/llama/model.safetensors" --prompt "ROMEO:" --tokens 80 --seed 7)
s2=$(infer --checkpoint "$T/llama/model.safetensors" --prompt "ROMEO:" --tokens 80 --seed 7 --no-cache)
[ -n "$s1" ] && [ "$s1" = "$s2" ] || fail "llama: the cache changes the text"
train $TINY --arch llama --norm scale --steps 5 --out "$T/llama2" &&
    grep -q "^model   llama, .*norm scale, .*act swiglu" "$T/log" || fail "llama --norm scale: $(cat "$T/log")"
# their bad values exit 2 and say what is accepted
train $TINY --n-head 4 --n-kv-head 3 --steps 1 --out "$T/bad"
[ $? -eq 2 ] && grep -q "n_kv_head = 3 does not divide n_head = 4" "$T/log" || fail "n-kv-head 3: $(cat "$T/log")"
train $TINY --pos rope --rope-theta 0 --steps 1 --out "$T/bad"
[ $? -eq 2 ] && grep -q "rope_theta = 0, must be a finite number > 0" "$T/log" || fail "rope-theta 0: $(cat "$T/log")"
train $TINY --act swiglu --ff-multiple 0 --steps 1 --out "$T/bad"
[ $? -eq 2 ] && grep -q -- "--ff-multiple.*0" "$T/log" || fail "ff-multiple 0: $(cat "$T/log")"
train $TINY --arch mistral --steps 1 --out "$T/bad"
[ $? -eq 2 ] && grep -q "is not one of gpt|llama" "$T/log" || fail "arch mistral: $(cat "$T/log")"

# the placements of issue 29: each trains; their settings' bad values exit 2 with the accepted ones
for pl in lns reorder mixln dsl; do
    train $TINY --placement $pl --steps 5 --out "$T/pl-$pl" &&
        grep -q "placement $pl," "$T/log" || fail "--placement $pl: $(cat "$T/log")"
done
infer --info "$T/pl-mixln/model.safetensors" | grep -q '"mixln_post":0,' ||
    fail "mixln_post not resolved to n_layer / 4 = 0"
train $TINY --placement mixln --mixln-post 3 --steps 1 --out "$T/bad"
[ $? -eq 2 ] && grep -q "mixln_post = 3: beyond the depth.*0 to n_layer = 2" "$T/log" ||
    fail "mixln-post 3 of 2: $(cat "$T/log")"
train $TINY --mixln-post 1 --steps 1 --out "$T/bad"
[ $? -eq 2 ] && grep -q "mixln-post 1: this run does not read it (only --placement mixln does)" "$T/log" ||
    fail "mixln-post without mixln: $(cat "$T/log")"
train $TINY --placement dsl --dsl-k 0 --steps 1 --out "$T/bad"
[ $? -eq 2 ] && grep -q "dsl_k = 0: .*needs k in (0, n_layer = 2\]" "$T/log" ||
    fail "dsl-k 0: $(cat "$T/log")"
train $TINY --dsl-k 1 --steps 1 --out "$T/bad"
[ $? -eq 2 ] && grep -q "dsl-k 1: this run does not read it (only --placement dsl does)" "$T/log" ||
    fail "dsl-k without dsl: $(cat "$T/log")"
for r0 in 0 1.5; do
    train $TINY --placement dsl --dsl-r0 $r0 --steps 1 --out "$T/bad"
    [ $? -eq 2 ] && grep -q "dsl_r0 = $r0: the embedded tokens' correlation must be in (0, 1\]" \
        "$T/log" || fail "dsl-r0 $r0: $(cat "$T/log")"
done
train $TINY --dsl-r0 0.5 --steps 1 --out "$T/bad"
[ $? -eq 2 ] && grep -q "dsl-r0 0.5: this run does not read it (only --init dsl" "$T/log" ||
    fail "dsl-r0 without init dsl: $(cat "$T/log")"
train $TINY --placement lns --init dsl --dsl-r0 0.5 --steps 5 --out "$T/pl-lns-dsl" ||
    fail "lns with init dsl and dsl-r0: $(cat "$T/log")"

# --z-loss: in the training loss (+ z lse^2 per target), not in the validation loss; with lr 0 the
# weights stay, so the validation losses are the same bits and the training loss grows
for z in 0 0.5; do
    train $TINY --lr 0 --warmup 0 --schedule const --steps 2 --eval-every 2 --log-every 1 \
        --z-loss $z --out "$T/z$z" || fail "--z-loss $z: $(cat "$T/log")"
done
[ "$(cut -d, -f3 "$T/z0/metrics.csv")" = "$(cut -d, -f3 "$T/z0.5/metrics.csv")" ] &&
    awk -F, 'NR == FNR && FNR > 1 {l[FNR] = $2; next} FNR > 1 && $2 < l[FNR] + 1 {exit 1}' \
        "$T/z0/metrics.csv" "$T/z0.5/metrics.csv" ||
    fail "z-loss: val_loss should be the plain loss, loss the larger: $(cat "$T/z0.5/metrics.csv")"
train $TINY --z-loss -1 --steps 1 --out "$T/bad"
[ $? -eq 2 ] && grep -q "z-loss" "$T/log" || fail "z-loss -1: $(cat "$T/log")"

# --logit-softcap C: the model's logits C tanh(z / C) in the training loss, the validation loss
# and ./infer --score alike (saved in the config: --resume and ./infer read it). At lr 0 with
# --emb-std 0.5 the plain logits are far from uniform (loss about 11); C = 0.001 flattens them, so
# every loss is ln 256 = 5.5452 (to 1e-3); negative and non-finite C are refused
head -c 2000 data/tinyshakespeare.txt >"$T/score.txt"
SC="$TINY --emb-std 0.5 --lr 0 --warmup 0 --schedule const --eval-every 2 --log-every 1"
train $SC --steps 2 --logit-softcap 0.001 --out "$T/cap" || fail "--logit-softcap: $(cat "$T/log")"
train --resume --out "$T/cap" --steps 4 || fail "--logit-softcap resumed: $(cat "$T/log")"
infer --info "$T/cap/model.safetensors" | grep -q '"logit_softcap":0.001' ||
    fail "--logit-softcap not in the checkpoint's config"
score=$(infer --checkpoint "$T/cap/model.safetensors" --score "$T/score.txt" | sed 's/^loss=\([^ ]*\).*/\1/')
awk -F, -v s="$score" 'function off(x) { return x - 5.545177 > 1e-3 || 5.545177 - x > 1e-3 }
    NR > 1 && (off($2) || ($3 != "" && off($3))) { bad = 1 } END { exit bad || s == "" || off(s) }' \
    "$T/cap/metrics.csv" || fail "softcap 0.001: losses not ln 256: score $score, $(cat "$T/cap/metrics.csv")"
[ "$(wc -l <"$T/cap/metrics.csv")" -eq 5 ] || fail "softcap resumed: $(cat "$T/cap/metrics.csv")"
train $SC --steps 2 --out "$T/nocap" || fail "no --logit-softcap: $(cat "$T/log")"
awk -F, 'NR == 3 { exit !($3 > 7) }' "$T/nocap/metrics.csv" ||
    fail "without the cap the loss should be far from ln 256: $(cat "$T/nocap/metrics.csv")"
for c in -1 nan inf; do
    train $TINY --logit-softcap $c --steps 1 --out "$T/bad"
    [ $? -eq 2 ] && grep -q -- "--logit-softcap" "$T/log" || fail "logit-softcap $c: $(cat "$T/log")"
done

# --act relu2 (Primer's squared ReLU) trains, and ./infer generates with it
train $TINY --act relu2 --steps 5 --out "$T/relu2" || fail "--act relu2: $(cat "$T/log")"
infer --info "$T/relu2/model.safetensors" | grep -q '"act":"relu2"' || fail "relu2 not saved"
gen=$(infer --checkpoint "$T/relu2/model.safetensors" --prompt "The " --tokens 12 --seed 1)
[ ${#gen} -ge 12 ] || fail "relu2: ./infer generated '$gen': $(cat "$T/log")"

# --target-loss X stops at the first validation at or below X, --time-budget S after the step that
# ends past S seconds; either prints "result {json}": the steps and tokens trained, the seconds,
# the last validation loss and whether X was reached. Not positive or not finite: refused
result() { sed -n 's/^result //p' "$T/out"; }
"$B/train" --threads 2 $TINY --steps 50 --eval-every 5 --target-loss 100 --out "$T/tl" >"$T/out" 2>&1 ||
    fail "--target-loss: $(cat "$T/out")"
result | grep -Eq '^\{"steps":5,"tokens":1280,"seconds":[0-9.]+,"val_loss":[0-9.]+,"reached":true\}$' ||
    fail "--target-loss 100 should stop at the first validation, step 5: $(cat "$T/out")"
[ "$(tail -n 1 "$T/tl/metrics.csv" | cut -d, -f1)" = 5 ] && [ -f "$T/tl/model.safetensors" ] ||
    fail "--target-loss: no checkpoint or metrics at step 5"
"$B/train" --threads 2 $TINY --steps 6 --eval-every 2 --target-loss 0.01 --out "$T/tl2" >"$T/out" 2>&1 ||
    fail "--target-loss not reached: $(cat "$T/out")"
result | grep -Eq '^\{"steps":6,.*"reached":false\}$' || fail "--target-loss 0.01: $(cat "$T/out")"
"$B/train" --threads 2 $TINY --steps 50 --time-budget 1e-6 --out "$T/tb" >"$T/out" 2>&1 ||
    fail "--time-budget: $(cat "$T/out")"
result | grep -Eq '^\{"steps":1,"tokens":256,"seconds":[0-9.]+,"val_loss":[0-9.]+,"reached":false\}$' ||
    fail "--time-budget 1e-6 should stop after the first step, validated: $(cat "$T/out")"
"$B/train" --threads 2 $TINY --steps 6 --out "$T/plain" >"$T/out" 2>&1 && ! grep -q '^result ' "$T/out" ||
    fail "a result line without --time-budget or --target-loss: $(cat "$T/out")"
for v in 0 -1 inf; do
    for f in --time-budget --target-loss; do
        train $TINY $f $v --steps 1 --out "$T/bad"
        [ $? -eq 2 ] && grep -q -- "$f" "$T/log" || fail "$f $v: $(cat "$T/log")"
    done
done

# the stream's skips: zero-initialised projections are zero; the scalars are refused where the
# stream is not a sum (the encoder-decoder's and a Llama export's: test_cli_encdec, _export)
train $TINY --steps 0 --zero-init-out --layer-lambdas --unet --out "$T/skips" ||
    fail "--zero-init-out --layer-lambdas --unet: $(cat "$T/log")"
python3 - "$T/skips/model.safetensors" <<'PY' || fail "--zero-init-out: a projection is not 0"
import json, struct, sys
f = open(sys.argv[1], "rb")
n = struct.unpack("<Q", f.read(8))[0]
head, data = json.loads(f.read(n)), f.read()
outs = [k for k in head if k.endswith(("out_proj.weight", "fc2.weight"))]
for k in outs:
    a, b = head[k]["data_offsets"]
    assert not any(struct.unpack("<%df" % ((b - a) // 4), data[a:b])), k
assert outs
assert "blocks.1.skip_weight" in head and "blocks.0.skip_weight" not in head
PY
for bad in "--layer-lambdas --residual hc" "--unet --arch ngpt" "--zero-init-out --arch ngpt"; do
    train $TINY --steps 1 --warmup 0 $bad --out "$T/bad"
    [ $? -eq 2 ] && grep -q -- "${bad%% *}" "$T/log" || fail "$bad: $(cat "$T/log")"
done

# hyper-connections' gains need hyper-connections
train $TINY --steps 1 --warmup 0 --diag-hc-every 1 --out "$T/bad"
[ $? -eq 2 ] && grep -q -- "--diag-hc-every.*--residual hc or mhc" "$T/log" ||
    fail "--diag-hc-every without --residual hc: $(cat "$T/log")"

# the log Z and block-skip diagnostics: their files, rows at steps 0, 2 and (skip) the last, 3
train $TINY --placement lns --steps 3 --warmup 1 --diag-logz-every 2 --diag-skip-every 2 \
    --out "$T/probe" || fail "--diag-logz-every, --diag-skip-every: $(cat "$T/log")"
[ "$(cut -d, -f1 "$T/probe/diag_logz.csv" | tr '\n' ' ')" = "step 0 2 " ] &&
    [ "$(cut -d, -f1,2 "$T/probe/diag_skip.csv" | tr '\n' ' ')" = \
        "step,block 0,-1 0,0 0,1 2,-1 2,0 2,1 3,-1 3,0 3,1 " ] ||
    fail "diagnostics' rows: $(cat "$T/probe/diag_logz.csv" "$T/probe/diag_skip.csv")"

finish
