#!/bin/sh
# ./train with --optim muon and lion and --schedule wsd end to end on a tiny GPT: the loss falls;
# wsd's rates; 30 steps at once and 15 + 15 resumed give the same bits (Muon in fp32 and, where
# this build and CPU have it, bf16; Lion); the options are saved in the checkpoint; QK-Clip under
# Muon; Muon's state resumed with another optimizer and bad values exit 2 with a message naming
# the flag. Polar Express, NorMuon and cautious weight decay: the loss falls, the exact resume
# (NorMuon's row moments in the state), their refusals; configs/nanogpt-muon.ini is
# bench/nanogpt.sh's Muon recipe (its flags over nanogpt-char.ini give the same bits).
# MT_BUILD names the build directory (default: build).
NAME=test_cli_optim
. "$(dirname "$0")/lib.sh"
train() { "$B/train" --threads 2 "$@" >"$T/log" 2>&1; }

head -c 60000 data/tinyshakespeare.txt >"$T/text.txt"
TINY="--data $T/text.txt --n-layer 2 --n-head 2 --n-embd 32 --n-ctx 32 --batch 8 --lr 3e-3
      --warmup 5 --eval-every 20 --eval-batches 2 --log-every 5"
MUON="--optim muon --muon-lr 0.02 --adam-lr 3e-3"

# the loss falls over 40 steps, with wsd
SPEED="$MUON --muon-ortho polar --normuon --cautious-wd --weight-decay 0.1"
for opt in "$MUON" "--optim lion --lr 1e-3" "$SPEED" "--cautious-wd --weight-decay 0.1"; do
    rm -rf "$T/a"
    train $TINY $opt --schedule wsd --decay-frac 0.3 --steps 40 --out "$T/a" ||
        { fail "$opt: train exited $?"; cat "$T/log"; }
    first=$(sed -n 2p "$T/a/metrics.csv" | cut -d, -f2)
    last=$(tail -n 1 "$T/a/metrics.csv" | cut -d, -f2)
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' ||
        fail "$opt: loss did not fall: first $first, last $last"
    [ "$opt" = "$MUON" ] || continue
    # wsd (row k: the lr of step k - 1): lr until 0.3 of 40 steps (12) are left, then linear to
    # min-lr (lr / 10): step 29 at 3e-4 + 2.7e-3 * 11/12, step 34 at 3e-4 + 2.7e-3 * 6/12
    grep -q "^25,[^,]*,[^,]*,0.003," "$T/a/metrics.csv" &&
        grep -q "^30,[^,]*,[^,]*,0.002775," "$T/a/metrics.csv" &&
        grep -q "^35,[^,]*,[^,]*,0.00165," "$T/a/metrics.csv" ||
        fail "wsd lr: $(cut -d, -f1,4 "$T/a/metrics.csv" | tr '\n' ' ')"
done

# exact resume: 30 steps at once, 15 + 15 resumed (constant lr)
resume() { # label, extra flags
    R="$TINY --schedule const --steps 30 --save-every 10 $2"
    rm -rf "$T/once" "$T/r"
    train $R --out "$T/r" && mv "$T/r" "$T/once" ||
        { fail "$1: run once: $(tail -n 2 "$T/log")"; return; }
    train $R --steps 15 --out "$T/r" || fail "$1: first half"
    train --resume --out "$T/r" --steps 30 || fail "$1: resume exited: $(tail -n 2 "$T/log")"
    cmp -s "$T/once/model.safetensors" "$T/r/model.safetensors" || fail "$1: resumed weights differ"
    cmp -s "$T/once/optim.safetensors" "$T/r/optim.safetensors" || fail "$1: resumed state differs"
}
resume muon "$MUON"
"$B/infer" --info "$T/once/model.safetensors" | grep -q "^muon-lr = 0.02$" ||
    fail "the options are not in the checkpoint: $("$B/infer" --info "$T/once/model.safetensors")"
# Muon's state resumed with another optimizer: refused (exit 2), the options of another kind first
train --resume --out "$T/once" --steps 40 --optim adamw; rc=$?
[ $rc -eq 2 ] && grep -q "muon-lr 0.02: this run does not read it (only --optim muon does)" "$T/log" ||
    fail "muon options resumed with adamw: exit $rc, $(cat "$T/log")"
resume "muon, default rates" "--optim muon"
train --resume --out "$T/once" --steps 40 --optim adamw; rc=$?
[ $rc -eq 2 ] && grep -q "optimizer state for 'muon', but this run uses --optim adamw" "$T/log" ||
    fail "muon state resumed with adamw: exit $rc, $(cat "$T/log")"
resume "muon plain match-adamw" "$MUON --no-nesterov --muon-scale match-adamw --ns-steps 3"
resume lion "--optim lion --lr 1e-3"
resume "muon polar normuon cautious" "$SPEED --normuon-beta2 0.9"
resume "adamw cautious" "--cautious-wd --weight-decay 0.1"
if has_bf16; then
    resume "muon bf16" "$MUON --precision bf16"
else
    skip_case "Muon in bf16" "$BF16_WHY"
fi

# QK-Clip under Muon: a tau above every logit leaves the run as it was (the same rows but the two
# columns it adds); 0.2 clips heads and holds the largest logit near it from step 25 on, where the
# run without passes 0.35
rm -rf "$T/q0" "$T/q10" "$T/q02"
train $TINY $MUON --steps 40 --out "$T/q0" || fail "qk-clip: the run without exited $?"
train $TINY $MUON --steps 40 --qk-clip 10 --out "$T/q10" || fail "qk-clip 10: exited $?"
train $TINY $MUON --steps 40 --qk-clip 0.2 --out "$T/q02" || fail "qk-clip 0.2: exited $?"
head -n 1 "$T/q10/metrics.csv" | grep -q ",elapsed_s,qk_clipped,qk_max_logit$" ||
    fail "qk-clip: metrics.csv's header $(head -n 1 "$T/q10/metrics.csv")"
[ "$(cut -d, -f1-5 "$T/q0/metrics.csv" | tail -n +2)" = \
    "$(cut -d, -f1-5 "$T/q10/metrics.csv" | tail -n +2)" ] ||
    fail "qk-clip 10 changed the run: $(cut -d, -f2,9 "$T/q10/metrics.csv" | tr '\n' ' ')"
awk -F, 'NR > 1 { c += $9; if ($1 >= 25 && $10 > 0.25) high = 1 } END { exit !(c > 0 && !high) }' \
    "$T/q02/metrics.csv" || fail "qk-clip 0.2: $(cut -d, -f1,9,10 "$T/q02/metrics.csv" | tr '\n' ' ')"
awk -F, 'NR > 1 && $10 > m { m = $10 } END { exit !(m > 0.35) }' "$T/q10/metrics.csv" ||
    fail "without a clip the logits stay low: $(cut -d, -f1,10 "$T/q10/metrics.csv" | tr '\n' ' ')"
grep -q "qk-clip [0-9]*, max " "$T/log" || fail "qk-clip: no heads in the progress line"
# diag_qkclip.csv: by layer, every 10 steps, the same heads and logits as metrics.csv's steps
train $TINY $MUON --steps 40 --qk-clip 0.2 --log-every 1 --diag-qkclip-every 10 --out "$T/q02d" ||
    fail "--diag-qkclip-every: $(cat "$T/log")"
m=$(awk -F, 'NR > 1 { c += $9; if ($10 > m) m = $10 } END { printf "%d %.4f", c, m }' \
    "$T/q02d/metrics.csv")
d=$(awk -F, 'NR > 1 { c += $3; n++; s[$1] = 1; if ($4 > m) m = $4 }
    END { printf "%d %.4f %d", c, m, length(s) }' "$T/q02d/diag_qkclip.csv")
[ "$d" = "$m 4" ] || fail "diag_qkclip.csv ($d) against metrics.csv ($m, 4 steps)"
train $TINY --steps 2 --warmup 0 --diag-qkclip-every 1 --out "$T/bad"
[ $? -eq 2 ] && grep -q -- "--diag-qkclip-every.*--qk-clip" "$T/log" ||
    fail "--diag-qkclip-every without --qk-clip: $(cat "$T/log")"

# bad values: exit 2, the flag and what is accepted in the message
bad() { # expected message, flags...
    want=$1
    shift
    train $TINY --steps 10 --out "$T/bad" "$@"
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "$want" "$T/log" || fail "$*: exit $rc, $(cat "$T/log")"
    [ ! -e "$T/bad" ] || fail "$*: wrote $T/bad"
}
bad "ns-steps" --optim muon --ns-steps 0
bad "muon-momentum is 1; it must be in \[0, 1)" --optim muon --muon-momentum 1
bad "decay-frac" --schedule wsd --decay-frac 1.5
bad "decay-frac" --schedule wsd --decay-frac -0.1
bad "would start inside the --warmup" --schedule wsd --decay-frac 1 --warmup 1
bad "muon-lr 0.02: this run does not read it (only --optim muon does)" --muon-lr 0.02
bad "no-nesterov.*: this run does not read it (only --optim muon does)" --optim lion --no-nesterov
bad "lion-beta2 1; each must be in \[0, 1)" --optim lion --lion-beta2 1
bad "is not one of reference|match-adamw" --optim muon --muon-scale rms
bad "qk-clip is -1; it must be a finite number >= 0" --qk-clip -1
bad "qk-clip 1 with --qk-norm: refused: its queries and keys are normalised" --qk-clip 1 \
    --qk-norm rms
bad "qk-clip 1 with --arch ngpt: refused" --qk-clip 1 --arch ngpt --weight-decay 0
bad "qk-clip rescales blocks.1.attn.k_proj.weight, which is not trained" --qk-clip 1 \
    --freeze "blocks.1.attn.k_proj.*"
bad "normuon true: this run does not read it (only --optim muon does)" --normuon
bad "normuon-beta2 0.9: this run does not read it (only --optim muon --normuon does)" \
    --optim muon --normuon-beta2 0.9
bad "normuon-beta2 is 1; it must be in \[0, 1)" --optim muon --normuon --normuon-beta2 1
bad "is not one of ns5|polar" --optim muon --muon-ortho ns3
bad "muon-ortho polar has 5 coefficient triples: give --ns-steps 1..5" --optim muon \
    --muon-ortho polar --ns-steps 6
bad "ns-coef-a 3: this run does not read it (only --optim muon --muon-ortho ns5 does)" \
    --optim muon --muon-ortho polar --ns-coef-a 3
bad "cautious-wd true: this run does not read it (only --optim adamw or muon with" \
    --optim lion --weight-decay 0.1 --cautious-wd
bad "cautious-wd true: this run does not read it" --weight-decay 0 --cautious-wd

# configs/nanogpt-muon.ini: bench/nanogpt.sh's MUON flags over nanogpt-char.ini, the same bits
BENCH_MUON=$(sed -n 's/^MUON="\(.*\)"$/\1/p' bench/nanogpt.sh)
[ -n "$BENCH_MUON" ] || fail "no MUON= line in bench/nanogpt.sh"
SHORT="--data $T/text.txt --steps 3 --warmup 1 --eval-every 0 --log-every 1"
rm -rf "$T/n1" "$T/n2"
train --config configs/nanogpt-char.ini $BENCH_MUON $SHORT --out "$T/n1" ||
    fail "nanogpt-char.ini with the bench's MUON: $(tail -n 2 "$T/log")"
train --config configs/nanogpt-muon.ini $SHORT --out "$T/n2" ||
    fail "nanogpt-muon.ini: $(tail -n 2 "$T/log")"
[ "$(count differ '.*' "$T/n1/model.safetensors" "$T/n2/model.safetensors")" -eq 0 ] &&
    [ "$(count same '.*' "$T/n1/model.safetensors" "$T/n2/model.safetensors")" -gt 0 ] ||
    fail "nanogpt-muon.ini is not the bench's Muon recipe: the weights differ"
# and the options saved (all of them but the paths)
for n in 1 2; do "$B/infer" --info "$T/n$n/model.safetensors" | grep -v "^checkpoint\|^out =" \
    >"$T/n$n.info"; done
cmp -s "$T/n1.info" "$T/n2.info" || fail "nanogpt-muon.ini's options: $(diff "$T/n1.info" "$T/n2.info")"
grep -q "^steps = 500$" configs/nanogpt-muon.ini &&
    grep -q '^MUON_STEPS="500 500"$' bench/nanogpt.sh || fail "nanogpt-muon.ini's steps"

finish
