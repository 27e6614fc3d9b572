#!/bin/sh
# ./train --label-smoothing end to end, for the GPT, the ViT and the encoder-decoder (when
# festlex-cmu is installed):
#  1. the logged training loss is torch's smoothed cross-entropy, (1 - eps) nll + eps
#     mean_j(-log p_j), which is linear in eps: one step at lr 0 (the model stays at its init, the
#     batch is the same) with eps 0, 0.1 and 0.3 gives losses on a line, and eps moves it;
#  2. validation scores the plain cross-entropy (and the encoder-decoder's WER and PER): the same
#     at every eps;
#  3. a run with --label-smoothing 0.1 trains: in 40 steps its plain validation loss falls below the
#     first logged training loss by a margin each model clears (the tiny ViT learns slowest).
# MT_BUILD names the build directory (default: build).
NAME=test_label_smoothing
. "$(dirname "$0")/lib.sh"
train() { "$B/train" --threads 2 "$@" >"$T/log" 2>&1; }

head -c 60000 data/tinyshakespeare.txt >"$T/text.txt"
GPT="--data $T/text.txt --n-layer 2 --n-head 2 --n-embd 32 --n-ctx 32 --batch 8 --emb-std 0.5"
VIT="--model vit --data data/mnist --patch 7 --n-layer 1 --n-head 2 --n-embd 16 --batch 16"
ENCDEC=
if has_cmudict; then
    head -n 800 "$CMU" >"$T/dict"
    ENCDEC="--model encdec --data $T/dict --enc-layers 1 --dec-layers 1 --n-head 2 --n-embd 16 --batch 16"
else
    skip_case encdec "$CMU_MISSING"
fi

check_model() { # name, margin of 3, flags
    name=$1 margin=$2
    shift 2
    # 1 and 2: one step at lr 0; metrics.csv row: step, loss, val_loss, ..., the type's metrics
    for e in 0 0.1 0.3; do
        train "$@" --lr 0 --warmup 0 --steps 1 --eval-every 1 --log-every 1 \
            --label-smoothing $e --out "$T/$name$e" || fail "$name eps $e: $(cat "$T/log")"
        tail -n 1 "$T/$name$e/metrics.csv" >"$T/$name$e.row"
    done
    awk -F, -v a="$(cat "$T/${name}0.row")" -v b="$(cat "$T/${name}0.1.row")" \
        -v c="$(cat "$T/${name}0.3.row")" 'BEGIN {
        split(a, r0, ","); split(b, r1, ","); split(c, r3, ",")
        d1 = r1[2] - r0[2]; d3 = r3[2] - r0[2]
        line = (d1 - d3 / 3) ^ 2 <= (5e-6 + 1e-3 * (d3 < 0 ? -d3 : d3)) ^ 2
        exit !(line && d3 ^ 2 >= 1e-6) }' ||
        fail "$name: training losses at eps 0, 0.1, 0.3 not on a line (or equal): $(cut -d, -f2 "$T/$name"*.row | tr '\n' ' ')"
    # the validation columns (3, and 9 on: the type's metrics) at eps 0.1 and 0.3 are eps 0's
    for e in 0.1 0.3; do
        [ "$(cut -d, -f3,9- "$T/$name$e.row")" = "$(cut -d, -f3,9- "$T/${name}0.row")" ] ||
            fail "$name: validation at eps $e differs from eps 0: $(cat "$T/$name$e.row") vs $(cat "$T/${name}0.row")"
    done
    # 3: trains
    train "$@" --lr 3e-3 --warmup 2 --steps 40 --eval-every 40 --log-every 5 \
        --label-smoothing 0.1 --out "$T/${name}run" || fail "$name trains: $(cat "$T/log")"
    first=$(sed -n 2p "$T/${name}run/metrics.csv" | cut -d, -f2)
    val=$(tail -n 1 "$T/${name}run/metrics.csv" | cut -d, -f3)
    awk -v a="$first" -v v="$val" -v m="$margin" 'BEGIN { exit !(v != "" && v < a - m) }' ||
        fail "$name with --label-smoothing 0.1 did not train: first loss $first, val $val"
}

check_model gpt 1 $GPT
check_model vit 0.1 $VIT
[ -n "$ENCDEC" ] && check_model encdec 0.3 $ENCDEC

finish
