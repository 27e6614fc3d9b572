#!/bin/sh
# ./train --model encdec and ./infer --source / --score-file end to end on a tiny model and the
# first 800 lines of CMUdict (skipped when festlex-cmu is not installed): evaluation
# prints and writes WER and PER, 2 replicas train as 1, a resumed run ends bit-identical, a
# missing dictionary names the package, --n-layer is refused, the checkpoint gives phones (greedy
# and beam), scores a split of a dictionary (refuses an empty one), and names characters outside
# its letters.
# MT_BUILD names the build directory (default: build).
NAME=test_cli_encdec
. "$(dirname "$0")/lib.sh"
train() { "$B/train" --threads 1 "$@" >"$T/log" 2>&1; }
infer() { "$B/infer" --threads 1 "$@" 2>"$T/log"; }

has_cmudict || skip "$CMU_MISSING"
head -n 800 "$CMU" >"$T/dict" # 799 entries of 786 words
WORDS=786
TINY="--model encdec --data $T/dict --enc-layers 1 --dec-layers 1 --n-head 2 --n-embd 16
      --batch 16 --lr 3e-3 --warmup 2 --eval-every 10 --log-every 5"

train $TINY --steps 20 --out "$T/a" || { fail "train exited $?"; cat "$T/log"; }
TEST=$(sed -n 's/^data .*, test \([0-9]*\)$/\1/p' "$T/log")
[ -n "$TEST" ] && [ "$TEST" -gt 0 ] || fail "data line: $(grep '^data' "$T/log")"
grep -Eq "step 20/20 .*\| val [0-9.]+ wer [0-9.]+ per [0-9.]+ wer_nostress [0-9.]+ per_nostress" "$T/log" ||
    fail "no WER/PER: $(tail -n 2 "$T/log")"
head -n 1 "$T/a/metrics.csv" | grep -q ",tok_per_s,elapsed_s,val_wer,val_per,val_wer_nostress,val_per_nostress$" ||
    fail "metrics header: $(head -n 1 "$T/a/metrics.csv")"
awk -F, 'NR > 1 && $1 == 20 { ok = $9 != "" && $10 != "" } END { exit !ok }' "$T/a/metrics.csv" ||
    fail "metrics row 20: $(tail -n 1 "$T/a/metrics.csv")"
awk -F, 'NR > 1 && $1 == 5 { ok = $9 == "" } END { exit !ok }' "$T/a/metrics.csv" ||
    fail "metrics row 5 should have no WER: $(sed -n 2p "$T/a/metrics.csv")"

# the batch split across 2 replicas trains as one: the same loss to float rounding
for r in 1 2; do
    train $TINY --threads 2 --replicas $r --steps 10 --out "$T/rep$r" || fail "replicas $r: $(cat "$T/log")"
    grep -o 'step 10/10 | loss [0-9.]*' "$T/log" | cut -d' ' -f5 >"$T/loss$r"
done
awk -v a="$(cat "$T/loss1")" -v b="$(cat "$T/loss2")" 'BEGIN { exit !(a > 0 && (a - b) ^ 2 < (1e-4 * a) ^ 2) }' ||
    fail "loss after 10 steps: $(cat "$T/loss1") with 1 replica, $(cat "$T/loss2") with 2"

# 20 steps at once and 10 + 10 resumed give the same bits
R="$TINY --schedule const --steps 20 --save-every 10 --dropout 0.1"
train $R --out "$T/r" && mv "$T/r" "$T/once" || fail "run once: $(cat "$T/log")"
train $R --steps 10 --out "$T/r" || fail "first half"
train --resume --out "$T/r" --steps 20 || { fail "resume exited $?"; cat "$T/log"; }
cmp -s "$T/once/model.safetensors" "$T/r/model.safetensors" || fail "resumed weights differ"

# bad input: a missing dictionary, --n-layer
train --model encdec --data "$T/none.out" --steps 1 --out "$T/x"
[ $? -eq 2 ] && grep -q "festlex-cmu" "$T/log" || fail "missing dictionary: $(cat "$T/log")"
train $TINY --n-layer 3 --steps 1 --out "$T/y"
[ $? -eq 2 ] && grep -q "enc-layers" "$T/log" || fail "--n-layer accepted: $(cat "$T/log")"
train $TINY --logit-softcap 30 --steps 1 --out "$T/y" # the GPT's only
[ $? -eq 2 ] && grep -q "logit_softcap = 30: the soft cap of the logits is the GPT's" "$T/log" ||
    fail "--logit-softcap accepted: $(cat "$T/log")"
train $TINY --param mup --base-width 16 --steps 1 --out "$T/y" # the GPT's head only
[ $? -eq 2 ] && grep -q "param mup: refused for the encoder-decoder" "$T/log" ||
    fail "--param mup accepted: $(cat "$T/log")"
# --emb-scale: the learned scalar emb_scale on both sides' embeddings trains, saves and decodes
train $TINY --norm dyt --emb-scale --steps 5 --out "$T/es" || fail "--emb-scale: $(cat "$T/log")"
infer --info "$T/es/model.safetensors" | grep -q '"emb_scale":true' ||
    fail "--emb-scale: not in the checkpoint's config: $(cat "$T/log")"
infer --checkpoint "$T/es/model.safetensors" --source "abc" | grep -q "^abc " ||
    fail "--emb-scale: --source: $(cat "$T/log")"
train $TINY --residual hc --steps 1 --out "$T/y" # no streams through the cross-attention
[ $? -eq 2 ] && grep -q "residual hc with the encoder-decoder: refused" "$T/log" ||
    fail "--residual hc accepted: $(cat "$T/log")"
train $TINY --unet --steps 1 --out "$T/y" # no skips through the cached decoder steps
[ $? -eq 2 ] && grep -q -- "--unet with the encoder-decoder: refused" "$T/log" ||
    fail "--unet accepted: $(cat "$T/log")"
for pl in mixln dsl; do # they count one stack's blocks
    train $TINY --placement $pl --steps 1 --out "$T/y"
    [ $? -eq 2 ] && grep -q "placement $pl counts the blocks of one stack.*use pre, post" "$T/log" ||
        fail "--placement $pl accepted: $(cat "$T/log")"
done

# the checkpoint: phones (greedy, beam), a score on the test split, letters outside the vocabulary
C="$T/a/model.safetensors"
out=$(infer --checkpoint "$C" --source "Abc ab") || fail "--source exited $?: $(cat "$T/log")"
[ "$(echo "$out" | wc -l)" -eq 2 ] && echo "$out" | head -n 1 | grep -q "^abc  [a-z]" ||
    fail "--source output: $out"
infer --checkpoint "$C" --source "abc" --beam 3 | grep -q "^abc " || fail "--beam 3: $(cat "$T/log")"
infer --checkpoint "$C" --source "ab7c" && fail "a digit accepted"
grep -q 'outside the model.s letters.*"7"' "$T/log" || fail "bad letter message: $(cat "$T/log")"
score=$(infer --checkpoint "$C" --score-file "$T/dict" --split test) || fail "--score-file: $(cat "$T/log")"
echo "$score" | grep -Eq "^words=$TEST wer=[0-9.]+ per=[0-9.]+ wer_nostress=[0-9.]+ per_nostress=[0-9.]+ beam=1 split=test" ||
    fail "--score-file: $score"
infer --checkpoint "$C" --score-file "$T/dict" --split all | grep -q "^words=$WORDS " || fail "--split all"
head -n 2 "$T/dict" >"$T/two" # a split of so few words has an empty test part: an error, no score
infer --checkpoint "$C" --score-file "$T/two" --split test
[ $? -eq 2 ] && grep -q "the test part of its [0-9]* word(s) is empty" "$T/log" ||
    fail "an empty split scored: $(cat "$T/log")"
"$B/infer" --info "$C" | grep -q "encdec" || fail "--info"
infer --checkpoint "$C" --prompt "x" && fail "an encdec checkpoint sampled text"
grep -q "only the text use reads it" "$T/log" || fail "--prompt: $(cat "$T/log")"
infer --checkpoint "$C" --source "abc" --split test && fail "--split without --score-file"
grep -q "only --score-file does" "$T/log" || fail "--split: $(cat "$T/log")"
infer --checkpoint "$C" --source "abc" --score-file "$T/dict" && fail "--score-file with --source"
grep -q "only a run without --source does" "$T/log" || fail "--score-file: $(cat "$T/log")"

finish
