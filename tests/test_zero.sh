#!/bin/sh
# --zero 1 under MPI (ZeRO-1, docs/mpi.md): the optimizer state sharded across the ranks. Checks,
# against the same run without --zero (the unsharded run):
# - 2 ranks, with AdamW, Adam, SGD with momentum, Lion and Muon, in bf16, with --grad-accum 2, with
#   --recompute block and on a ViT with BatchNorm (buffers: each rank keeps its own statistics):
#   the metrics and both checkpoint files bit-identical (a sum of two floats does not depend on
#   its order, so the reduce-scatter's sums are the all-reduce's);
# - 4 ranks (oversubscribed), AdamW and Muon: losses, validation losses and gradient norms within a
#   relative 1e-6, every tensor of both checkpoints within 1e-6 of its largest element, and the
#   same tensor names and metadata (the sums may be added in another order);
# - the optimizer-state bytes each rank prints: they add up to the whole, each within the largest
#   tensor's state of 1/N, and less than the whole (the unsharded run prints the whole per rank);
# - resume across kinds: a run of 10 steps, stopped at 5 and resumed with and without --zero 1,
#   ends bit-identical to the uninterrupted unsharded run (4 combinations, with dropout), and a
#   sharded run's checkpoint resumes in one process;
# - --qk-clip with Muon: sharded and unsharded bit-identical, and the heads clipped and largest
#   logit rank 0 logs those of one process (the maxima reduced across the ranks);
# - refusals: --zero 1 in one process (the default build and mpirun -np 1), --zero 2; exit 2.
# Skipped (with a line saying so) when mpicc or mpirun is missing; the bf16 case where this build
# or CPU has no bf16.
NAME=test_zero
. "$(dirname "$0")/mpi_setup.sh"

# The state line's numbers: every rank's bytes, their sum is the whole, each within the largest
# tensor's of whole / N and (sharded) below the whole; unsharded every rank holds the whole.
state() { # ranks sharded(0|1) what
    grep '^state ' "$T/log" | tr -d '(),;' | awk -v N="$1" -v z="$2" -v what="$3" '{
        for (i = 1; i <= NF; i++) if ($i == "rank:") first = i + 1
        for (r = 0; r < N; r++) b[r] = $(first + r)
        whole = $(first + N + 2); largest = $(first + N + 6)
        for (r = 0; r < N; r++) {
            sum += b[r]
            if (z && (b[r] > whole / N + largest || b[r] >= whole)) bad = "rank " r " holds " b[r]
            if (!z && b[r] != whole) bad = "rank " r " holds " b[r] " unsharded"
        }
        if (z && sum != whole) bad = "the ranks hold " sum " bytes, the whole is " whole
        if (whole <= 0 || largest <= 0) bad = "no whole or largest in: " $0
        n++ } END { if (n != 1 || bad != "") { printf "FAIL test_zero: %s: state: %s\n", what, (n != 1 ? "no state line" : bad); exit 1 } }' ||
        fails=$((fails + 1))
}

# Unsharded, then sharded, into the same --out (the checkpoint saves its path): a/ and z/.
pair() { # ranks what flags...
    n=$1 what=$2
    shift 2
    rm -rf "$T/a" "$T/z" "$T/r"
    mpi "$n" "$@" --out "$T/r" && mv "$T/r" "$T/a" || { fail "$what: unsharded: $(tail -3 "$T/log")"; return 1; }
    state "$n" 0 "$what, unsharded"
    mpi "$n" "$@" --zero 1 --out "$T/r" && mv "$T/r" "$T/z" || { fail "$what: --zero 1: $(tail -3 "$T/log")"; return 1; }
    state "$n" 1 "$what"
}
same_bits() { # what
    cmp -s "$T/a/metrics.csv" "$T/z/metrics.csv" 2>/dev/null ||
        [ "$(cut -d, -f1-5 "$T/a/metrics.csv")" = "$(cut -d, -f1-5 "$T/z/metrics.csv")" ] ||
        fail "$1: metrics differ"
    cmp -s "$T/a/model.safetensors" "$T/z/model.safetensors" || fail "$1: model.safetensors differs"
    cmp -s "$T/a/optim.safetensors" "$T/z/optim.safetensors" || fail "$1: optim.safetensors differs"
}
for o in "adamw" "adam" "sgd --momentum 0.9" "lion --lr 3e-4" "muon"; do
    pair 2 "2 ranks, --optim $o" $TINY --optim $o --steps 12 && same_bits "2 ranks, --optim $o"
done
if has_bf16 build-mpi/train; then
    pair 2 "2 ranks, bf16" $TINY --precision bf16 --steps 12 && same_bits "2 ranks, bf16"
else
    skip_case "2 ranks, bf16" "$BF16_WHY"
fi
pair 2 "2 ranks, --grad-accum 2" $TINY --batch 4 --grad-accum 2 --steps 12 &&
    same_bits "2 ranks, --grad-accum 2"
pair 2 "2 ranks, --recompute block" $TINY --recompute block --steps 12 &&
    same_bits "2 ranks, --recompute block"
pair 2 "2 ranks, ViT with BatchNorm" --model vit --data data/mnist --patch 7 --n-layer 2 \
    --n-head 2 --n-embd 16 --batch 16 --norm bn --schedule const --steps 10 --eval-every 5 \
    --eval-batches 2 --log-every 1 --bucket-kb 4 && same_bits "2 ranks, ViT with BatchNorm"

# --qk-clip: the steps' largest logits max-reduced across the ranks, the rescale on the whole
# weights after the gather: sharded and unsharded bit-identical, and rank 0 logs the heads clipped
# and the largest logit of one process over all the rows (within 1e-5, and the 6 decimals printed:
# other row counts)
Q="--optim muon --muon-lr 0.02 --qk-clip 0.1 --steps 12"
pair 2 "2 ranks, --qk-clip" $TINY $Q && same_bits "2 ranks, --qk-clip"
build-mpi/train --threads 1 $TINY $Q --out "$T/one" >"$T/log" 2>&1 || fail "--qk-clip, one process"
paste -d, "$T/one/metrics.csv" "$T/z/metrics.csv" | awk -F, 'NR > 1 {
    d = $10 - $20; if (d < 0) d = -d
    if ($9 != $19 || d > 1e-5 * $10 + 2e-6) {
        printf "step %s: %s heads, %s one process; %s, %s on 2 ranks\n", $1, $9, $10, $19, $20
        bad = 1
    }
    c += $9 } END { exit bad || c == 0 }' >"$T/qk" ||
    fail "--qk-clip: 2 ranks against one process: $(cat "$T/qk") (clipped: $(cut -d, -f9 \
        "$T/one/metrics.csv" | tr '\n' ' '))"
rm -rf "$T/one"

# 4 ranks: the metrics within a relative 1e-6, the checkpoints' tensors within 1e-6 of their
# largest element, the same names and metadata
close() { # what
    paste -d, "$T/a/metrics.csv" "$T/z/metrics.csv" | awk -F, -v what="$1" 'NR > 1 {
        for (k = 2; k <= 5; k++) {
            if (k == 4) continue
            a = $k; b = $(k + NF / 2); d = a - b; if (d < 0) d = -d
            if ((a == "") != (b == "") || d > 1e-6 * (a < 0 ? -a : a) + 1e-12) {
                printf "FAIL test_zero: %s: step %s column %d: %s vs %s\n", what, $1, k, a, b; bad = 1
            }
        }
        n++ } END { exit bad || n != 12 }' || fails=$((fails + 1))
    for f in model optim; do
        /usr/bin/python3 - "$T/a/$f.safetensors" "$T/z/$f.safetensors" <<'PY' || fail "$1: $f.safetensors: see above"
import sys
import numpy as np
sys.path[:0] = ["tests/parity"]
from harness import load
(a, ma), (b, mb) = load(sys.argv[1]), load(sys.argv[2])
bad = [] if ma == mb and sorted(a) == sorted(b) else ["the metadata or tensor names differ"]
for name in sorted(set(a) & set(b)):
    big = float(np.abs(a[name]).max(initial=0.0))
    diff = float(np.abs(a[name] - b[name]).max(initial=0.0))
    if diff > 1e-6 * big + 1e-12:
        bad.append("%s: %g of its largest %g" % (name, diff, big))
for line in bad[:5]:
    print("FAIL test_zero: %s: %s" % (sys.argv[1], line))
sys.exit(1 if bad else 0)
PY
    done
}
pair 4 "4 ranks, adamw" $TINY --steps 12 && close "4 ranks, adamw"
pair 4 "4 ranks, muon" $TINY --optim muon --steps 12 && close "4 ranks, muon"

# resume across kinds: 5 steps with or without --zero 1, resumed with or without it, against
# 10 steps at once unsharded (dropout: each rank's masks come from the checkpoint's stream)
R="$TINY --dropout 0.1 --steps 10 --save-every 5"
mpi 2 $R --out "$T/r" && mv "$T/r" "$T/once" || fail "run once"
for first in "" "--zero 1"; do
    for then in "" "--zero 1"; do
        what="5 steps [$first], resumed [$then]"
        rm -rf "$T/r"
        mpi 2 $R --steps 5 $first --out "$T/r" || fail "$what: first half"
        mpi 2 --resume --out "$T/r" --steps 10 $then || { fail "$what: resume exited $?"; cat "$T/log"; }
        cmp -s "$T/once/model.safetensors" "$T/r/model.safetensors" || fail "$what: weights differ"
        cmp -s "$T/once/optim.safetensors" "$T/r/optim.safetensors" || fail "$what: optimizer differs"
    done
done
rm -rf "$T/r"
mpi 2 $R --steps 5 --zero 1 --out "$T/r" || fail "sharded, for one process"
"$B/train" --threads 1 --resume --out "$T/r" --steps 6 >"$T/log" 2>&1 &&
    grep -q "^step 6/6" "$T/log" || fail "a sharded run's checkpoint in one process: $(tail -2 "$T/log")"

# refusals: one process, and a value out of range
refused() { # what code log
    [ "$2" -eq 2 ] && grep -q "$3" "$T/log" || fail "$1: exit $2: $(head -3 "$T/log")"
}
"$B/train" --threads 1 $TINY --steps 2 --zero 1 --out "$T/one" >"$T/log" 2>&1
refused "--zero 1 in one process" $? "this run is one process: run build-mpi/train under mpirun"
mpi 1 $TINY --steps 2 --zero 1 --out "$T/one"
refused "--zero 1 under mpirun -np 1" $? "this run is one process"
"$B/train" --threads 1 $TINY --steps 2 --zero 2 --out "$T/one" >"$T/log" 2>&1
refused "--zero 2" $? "expected from 0 to 1"
[ ! -e "$T/one" ] || fail "a refused run wrote $T/one"

finish
