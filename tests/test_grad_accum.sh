#!/bin/sh
# ./train --grad-accum end to end (docs/training.md#gradient-accumulation): a bad value is refused
# (exit 2, nothing written); --batch 4 --grad-accum 2 trains as --batch 8 (the same losses,
# validation losses and gradient norms to a relative 2e-5, the float32 sums being in another
# order; tests/test_accum.c compares the gradients themselves); a run stopped at a step and
# resumed ends bit-identical to one run at once; and a run killed with SIGKILL at random moments
# of its steps, most of them between two of a step's 8 micro-batches (the micro-batches take
# about 90% of a step's time here), then resumed, ends bit-identical too, with dropout. A
# checkpoint is only written after an update, and a step's micro-batches are a function of the
# state it saves (the sampler's and dropout's RNGs, drawn at the step's start): no state inside a
# step is needed.
NAME=test_grad_accum
. "$(dirname "$0")/lib.sh"
head -c 60000 data/tinyshakespeare.txt >"$T/text.txt"
TINY="--data $T/text.txt --n-layer 2 --n-head 2 --n-embd 32 --n-ctx 32 --lr 3e-3 --warmup 5
      --schedule const --eval-every 5 --eval-batches 2 --log-every 1 --threads 1"

# refused: 0, negative, and a step batch beyond an int
for bad in "--grad-accum 0" "--grad-accum -2" "--grad-accum 100000 --batch 100000"; do
    "$B/train" $TINY $bad --out "$T/bad" >"$T/log" 2>&1
    rc=$?
    [ $rc -eq 2 ] || fail "$bad: exit $rc, expected 2: $(cat "$T/log")"
    grep -q "grad-accum\|grad_accum" "$T/log" ||
        fail "$bad: the message does not name the flag: $(cat "$T/log")"
    [ ! -e "$T/bad" ] || fail "$bad: wrote $T/bad"
done

# the same run as one batch of 8
"$B/train" $TINY --batch 8 --steps 12 --out "$T/one" >"$T/log" 2>&1 ||
    fail "batch 8: $(cat "$T/log")"
"$B/train" $TINY --batch 4 --grad-accum 2 --steps 12 --out "$T/two" >"$T/log" 2>&1 ||
    fail "batch 4 x 2: $(cat "$T/log")"
grep -q "batch 8 x 32 tokens in 2 micro-batches" "$T/log" || fail "the train line: $(cat "$T/log")"
paste -d, "$T/one/metrics.csv" "$T/two/metrics.csv" | awk -F, 'NR > 1 {
    for (k = 2; k <= 5; k++) {
        if (k == 4) continue
        a = $k; b = $(k + NF / 2); d = a - b; if (d < 0) d = -d
        if ((a == "") != (b == "") || d > 2e-5 * (a < 0 ? -a : a) + 1e-12) {
            printf "FAIL test_grad_accum: batch 4 x 2 vs 8: step %s column %d: %s vs %s\n",
                $1, k, a, b
            bad = 1
        }
    }
    n++ } END { exit bad || n != 12 }' || fails=$((fails + 1))

# stopped at step 5 and resumed: the bits of one run
R="$TINY --batch 4 --grad-accum 8 --dropout 0.1 --eval-every 0 --eval-batches 1"
"$B/train" $R --steps 10 --out "$T/once" >"$T/log" 2>&1 || fail "run once: $(cat "$T/log")"
"$B/train" $R --steps 5 --out "$T/r" >"$T/log" 2>&1 || fail "first half: $(cat "$T/log")"
"$B/train" --resume --out "$T/r" --steps 10 >"$T/log" 2>&1 || fail "resume: $(cat "$T/log")"
tensors() { tail -c +$(($(od -An -tu8 -N8 "$1" | tr -d ' ') + 9)) "$1"; } # (the options hold --out)
[ "$(tensors "$T/once/model.safetensors" | sha256sum)" = \
    "$(tensors "$T/r/model.safetensors" | sha256sum)" ] ||
    fail "resumed weights differ"
cmp -s "$T/once/optim.safetensors" "$T/r/optim.safetensors" || fail "resumed optimizer differs"

# killed anywhere in a step (mostly between micro-batches), resumed: the bits of one run. Each
# start is killed a random fraction of a step (the mean of the run once's) after it logged a
# step, so that the kills land in the training loop however slow the machine (qemu too); the
# run, long enough never to finish, is then resumed to a few steps past the last kill, and the
# reference trains to that step at once (--steps changes no step before it: a const schedule).
ms=$(step_ms "$T/once/metrics.csv")
kills=0 starts=0
while [ $kills -lt 10 ] && [ $starts -lt 40 ]; do
    starts=$((starts + 1))
    from=$(last_step "$T/k/metrics.csv")
    if [ -e "$T/k/model.safetensors" ]; then
        "$B/train" --resume --out "$T/k" >"$T/log" 2>&1 &
    else
        "$B/train" $R --steps 100000 --save-every 1 --out "$T/k" >"$T/log" 2>&1 &
    fi
    pid=$!
    wait_step "$T/k/metrics.csv" "$from" $pid && random_ms "$ms"
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    rc=$?
    if [ $rc -eq 0 ]; then fail "the run finished after $kills kills: use more steps"; break; fi
    [ $rc -eq 137 ] || { fail "a (resumed) run exited $rc: $(cat "$T/log")"; break; }
    kills=$((kills + 1))
done
[ $kills -ge 10 ] || fail "only $kills kills"
steps=$(($(last_step "$T/k/metrics.csv") + 5))
"$B/train" --resume --out "$T/k" --steps $steps --save-every 0 >"$T/log" 2>&1 ||
    fail "the last resume: $(cat "$T/log")"
"$B/train" $R --steps $steps --save-every 0 --out "$T/ref" >"$T/log" 2>&1 ||
    fail "reference: $(cat "$T/log")"
tensors "$T/ref/model.safetensors" >"$T/ref.data"
tensors "$T/k/model.safetensors" >"$T/k.data"
[ -s "$T/ref.data" ] && cmp -s "$T/ref.data" "$T/k.data" || fail "killed and resumed: other weights"
cmp -s "$T/ref/optim.safetensors" "$T/k/optim.safetensors" ||
    fail "killed and resumed: other optimizer state"
[ "$(cut -d, -f1,2,4,5 "$T/ref/metrics.csv")" = "$(cut -d, -f1,2,4,5 "$T/k/metrics.csv")" ] ||
    fail "killed and resumed: other losses, learning rates or gradient norms"
echo "test_grad_accum: $kills kills (the last near step $((steps - 5))), resumed to identical bits"
finish
