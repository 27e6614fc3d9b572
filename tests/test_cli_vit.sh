#!/bin/sh
# ./train --model vit, ./infer --classify and ./preview end to end on tiny models: the shipped
# MNIST set trains and reports accuracy, 2 replicas train as 1, a resumed run ends bit-identical, an image folder with
# a broken file is skipped or rejected as asked, the InstanceNorm + mean-pooling trap is refused,
# a ViT checkpoint classifies image files and refuses to generate text, the preview PNG has the
# documented size. MT_BUILD names the build directory (default: build).
NAME=test_cli_vit
. "$(dirname "$0")/lib.sh"
train() { "$B/train" --threads 1 "$@" >"$T/log" 2>&1; }
infer() { "$B/infer" --threads 1 "$@" 2>"$T/log"; }

# MNIST digit i of the shipped test set as a PGM file (stb_image reads PNM)
digit() { # i file
    { printf 'P5\n28 28\n255\n'
      gzip -dc data/mnist/t10k-images-idx3-ubyte.gz | tail -c +$((17 + $1 * 784)) | head -c 784
    } >"$2"
}

TINY="--model vit --data data/mnist --patch 7 --n-layer 1 --n-head 2 --n-embd 16 --batch 16
      --lr 3e-3 --warmup 2 --eval-every 10 --log-every 5"

# trains, evaluates every validation image, reports accuracy; metrics rows
train $TINY --steps 20 --out "$T/a" || { fail "train exited $?"; cat "$T/log"; }
grep -q "train 9000, val 1000" "$T/log" || fail "split: $(head -n 1 "$T/log")"
grep -Eq "step 20/20 .*\| val [0-9.]+ acc 0\.[0-9]+" "$T/log" || fail "no accuracy: $(tail -n 2 "$T/log")"
[ "$(wc -l <"$T/a/metrics.csv")" -eq 5 ] || fail "metrics rows: $(wc -l <"$T/a/metrics.csv")"

# the batch split across 2 replicas (2 threads) trains as one: the same loss to float rounding
for r in 1 2; do
    train $TINY --threads 2 --replicas $r --steps 10 --out "$T/rep$r" || fail "replicas $r: $(cat "$T/log")"
    grep -q "2 threads ($r replicas)" "$T/log" || fail "replicas $r: $(grep '^train' "$T/log")"
    grep -o 'step 10/10 | loss [0-9.]*' "$T/log" | cut -d' ' -f5 >"$T/loss$r"
done
awk -v a="$(cat "$T/loss1")" -v b="$(cat "$T/loss2")" 'BEGIN { exit !(a > 0 && (a - b) ^ 2 < (1e-4 * a) ^ 2) }' ||
    fail "loss after 10 steps: $(cat "$T/loss1") with 1 replica, $(cat "$T/loss2") with 2"

# 20 steps at once and 10 + 10 resumed give the same bits (BatchNorm: its running statistics too)
R="$TINY --norm bn --schedule const --steps 20 --save-every 10"
train $R --out "$T/r" && mv "$T/r" "$T/once" || fail "run once: $(cat "$T/log")"
train $R --steps 10 --out "$T/r" || fail "first half"
train --resume --out "$T/r" --steps 20 || { fail "resume exited $?"; cat "$T/log"; }
cmp -s "$T/once/model.safetensors" "$T/r/model.safetensors" || fail "resumed weights differ"
cmp -s "$T/once/optim.safetensors" "$T/r/optim.safetensors" || fail "resumed optimizer differs"
train --resume --out "$T/r" --patch 4 && fail "resume with another patch accepted"
grep -q "patch is 7 in the checkpoint, 4 now" "$T/log" || fail "resume mismatch: $(cat "$T/log")"

# --emb-scale: the learned scalar emb_scale on the tokens trains and is in the checkpoint's config
train $TINY --norm dyt --emb-scale --steps 5 --out "$T/es" || fail "--emb-scale: $(cat "$T/log")"
infer --info "$T/es/model.safetensors" | grep -q '"emb_scale":true' ||
    fail "--emb-scale: not in the checkpoint's config: $(cat "$T/log")"

# an image folder: classes from the directory names, a broken file skipped and named, or rejected
mkdir -p "$T/img/seven" "$T/img/two"
for i in 0 17 26 34 36 41; do digit $i "$T/img/seven/$i.pgm"; done
for i in 1 35 38 43 47 72; do digit $i "$T/img/two/$i.pgm"; done
echo "not an image" >"$T/img/two/broken.png"
F="--model vit --data $T/img --val-fraction 0.25 --patch 7 --n-layer 1 --n-head 2 --n-embd 16
   --batch 4 --steps 3 --warmup 1"
train $F --out "$T/f" || fail "image folder: $(cat "$T/log")"
grep -q "12 images 28x28x1, 2 classes, train 9, val 3" "$T/log" || fail "folder data: $(cat "$T/log")"
grep -q "img/two/broken.png: unreadable" "$T/log" || fail "broken file not named: $(cat "$T/log")"
train $F --bad-images reject --out "$T/g"
rc=$?
[ $rc -eq 2 ] && grep -q "broken.png: unreadable" "$T/log" || fail "reject: exit $rc: $(cat "$T/log")"
train $F --image-size 14 --patch 7 --out "$T/s" && grep -q "12 images 14x14x1" "$T/log" ||
    fail "resize: $(cat "$T/log")"

# a bad combination exits 2 naming both
train $TINY --norm in --pool mean --steps 1 --out "$T/x"
[ $? -eq 2 ] && grep -q "norm in with pool mean" "$T/log" || fail "in + mean: $(cat "$T/log")"
# the logit soft cap is the GPT's: refused
train $TINY --logit-softcap 30 --steps 1 --out "$T/x"
[ $? -eq 2 ] && grep -q "logit_softcap = 30: the soft cap of the logits is the GPT's" "$T/log" ||
    fail "--logit-softcap accepted: $(cat "$T/log")"
train $TINY --param mup --base-width 16 --steps 1 --out "$T/x" # the GPT's head only
[ $? -eq 2 ] && grep -q "param mup: refused for the ViT" "$T/log" ||
    fail "--param mup accepted: $(cat "$T/log")"

# classification: one line per image, files and directories; a GPT's flags are refused
M="$T/a/model.safetensors"
digit 0 "$T/d0.pgm"
infer --checkpoint "$M" --classify "$T/img/seven,$T/d0.pgm" >"$T/out" || fail "classify: $(cat "$T/log")"
[ "$(wc -l <"$T/out")" -eq 7 ] || fail "classify lines: $(cat "$T/out")"
grep -Eq "d0.pgm: [0-9] \(p = [01]\.[0-9]{3}\)$" "$T/out" || fail "classify format: $(cat "$T/out")"
# bad input: nothing to classify (exit 2), an image of 0 x 0 pixels (unreadable: exit 1)
mkdir "$T/empty"
for arg in , "$T/empty"; do
    infer --checkpoint "$M" --classify "$arg" >"$T/out"
    [ $? -eq 2 ] && grep -q "no image given\|holds no files" "$T/log" && [ ! -s "$T/out" ] ||
        fail "--classify '$arg': $(cat "$T/log" "$T/out")"
done
printf 'P5\n0 0\n255\n' >"$T/zero.pgm"
infer --checkpoint "$M" --classify "$T/zero.pgm,$T/d0.pgm" >"$T/out"
[ $? -eq 1 ] && grep -q "^infer: .*zero.pgm: 0x0 pixels" "$T/log" && [ "$(wc -l <"$T/out")" -eq 1 ] ||
    fail "--classify of a 0x0 image: $(cat "$T/log" "$T/out")"
infer --checkpoint "$M" --prompt "x" >/dev/null
grep -q "is a vit checkpoint" "$T/log" || fail "text from a ViT: $(cat "$T/log")"
infer --info "$M" | grep -q "^model       vit$" || fail "--info of a ViT"

# the preview: 5 images at scale 2 -> 3 x 2 cells of (2*28 + 4) x (2*28 + 16) pixels
"$B/preview" --data "$T/img" --n 5 --scale 2 --out "$T/grid.png" >"$T/log" 2>&1 || fail "preview"
size=$(od -An -tu1 -j16 -N8 "$T/grid.png" | awk '{ print $3 * 256 + $4, $7 * 256 + $8 }')
[ "$size" = "180 144" ] || fail "preview size $size, want 180 144"

finish
