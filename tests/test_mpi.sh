#!/bin/sh
# Data parallelism under MPI (docs/mpi.md): builds build-mpi/train (make MPI=1) and checks that
# 2 ranks with a global batch of 8 give the losses, validation losses and gradient norms of one
# process with batch 8 (the default build) to a relative 2e-5 (float32 sums in another order:
# each rank's half of a gradient, then the two halves), 3 ranks with 3 + 3 + 2 rows too, and 2
# and 3 ranks with 2 micro-batches of 4 rows (--grad-accum 2) too; that a run resumed under MPI
# ends bit-identical to an uninterrupted one (with dropout: each rank's masks come from the shared
# stream in the checkpoint), with and without --grad-accum; that a save cut between its two
# writes resumes, 20 times on 2 and 4 ranks; that a setup error stops every rank
# with one message; and that --recompute block changes no bit. Skipped (with a line saying so)
# when mpicc or mpirun is missing.
NAME=test_mpi
. "$(dirname "$0")/mpi_setup.sh"

# step, loss, val_loss, grad_norm of two runs agree to a relative tol
same() { # a.csv b.csv what
    paste -d, "$1" "$2" | awk -F, -v what="$3" 'NR > 1 {
        for (k = 2; k <= 5; k++) {
            if (k == 4) continue
            a = $k; b = $(k + NF / 2); d = a - b; if (d < 0) d = -d  # b: the same column of b.csv
            if ((a == "") != (b == "") || d > 2e-5 * (a < 0 ? -a : a) + 1e-12) {
                printf "FAIL test_mpi: %s: step %s column %d: %s vs %s\n", what, $1, k, a, b; bad = 1
            }
        }
        n++ } END { exit bad || n != 12 }' || fails=$((fails + 1))
}
"$B/train" --threads 1 $TINY --steps 12 --out "$T/one" >"$T/log" 2>&1 || { fail "1 process"; cat "$T/log"; }
mpi 2 $TINY --steps 12 --out "$T/two" || { fail "2 ranks exited $?"; cat "$T/log"; }
grep -q "^mpi     2 ranks" "$T/log" || fail "no mpi line: $(cat "$T/log")"
[ "$(grep -c '^step ' "$T/log")" -eq 12 ] || fail "progress not from rank 0 alone: $(cat "$T/log")"
same "$T/one/metrics.csv" "$T/two/metrics.csv" "2 ranks x 4 vs 1 x 8"
mpi 3 $TINY --steps 12 --out "$T/three" || { fail "3 ranks exited $?"; cat "$T/log"; }
same "$T/one/metrics.csv" "$T/three/metrics.csv" "3 ranks (3 + 3 + 2) vs 1 x 8"
# recomputed blocks (their nodes' parameters final at the recomputation's node): the same bits
mpi 2 $TINY --steps 12 --recompute block --out "$T/two-rc" || fail "2 ranks, recompute"
[ "$(cut -d, -f1-5 "$T/two/metrics.csv")" = "$(cut -d, -f1-5 "$T/two-rc/metrics.csv")" ] &&
    cmp -s "$T/two/optim.safetensors" "$T/two-rc/optim.safetensors" ||
    fail "2 ranks with --recompute block: other bits"
# gradient accumulation: 2 micro-batches of 4 rows, each split across the ranks
mpi 2 $TINY --batch 4 --grad-accum 2 --steps 12 --out "$T/accum2" || fail "2 ranks, accum"
same "$T/one/metrics.csv" "$T/accum2/metrics.csv" "2 ranks x 2 rows x 2 micro-batches vs 1 x 8"
mpi 3 $TINY --batch 4 --grad-accum 2 --steps 12 --out "$T/accum3" || fail "3 ranks, accum"
same "$T/one/metrics.csv" "$T/accum3/metrics.csv" "3 ranks (2 + 1 + 1) x 2 micro-batches vs 1 x 8"

# resumed under MPI: the same bits as at once (with dropout: per-rank masks)
R="$TINY --dropout 0.1 --steps 10 --save-every 5"
mpi 2 $R --out "$T/r" && mv "$T/r" "$T/once" || fail "run once"
mpi 2 $R --steps 5 --out "$T/r" || fail "first half"
mpi 2 --resume --out "$T/r" --steps 10 || { fail "resume exited $?"; cat "$T/log"; }
cmp -s "$T/once/model.safetensors" "$T/r/model.safetensors" || fail "resumed weights differ"
cmp -s "$T/once/optim.safetensors" "$T/r/optim.safetensors" || fail "resumed optimizer differs"
# ... and with gradient accumulation
rm -rf "$T/once" "$T/r"
R="$R --batch 4 --grad-accum 2"
mpi 2 $R --out "$T/r" && mv "$T/r" "$T/once" || fail "run once, accum"
mpi 2 $R --steps 5 --out "$T/r" || fail "first half, accum"
mpi 2 --resume --out "$T/r" --steps 10 || { fail "resume exited $?, accum"; cat "$T/log"; }
cmp -s "$T/once/model.safetensors" "$T/r/model.safetensors" || fail "resumed weights differ, accum"

# a save cut between its two writes (optim.safetensors of step 3, optim.prev of the model's step
# 2), resumed 10 times with 2 ranks and 10 with 4, every other with --zero 1: rank 0 alone puts
# optim.prev back, the others read after it (every rank renamed it: about half the tries failed,
# saying the rename found no file, or telling to start again without --resume); every try ends
# with the first's bits
C="$TINY --steps 2 --save-every 1 --eval-every 0"
mpi 2 $C --out "$T/cut" && mpi 2 $C --steps 3 --out "$T/ahead" || fail "the cut save's runs"
mv "$T/cut/optim.safetensors" "$T/cut/optim.prev.safetensors"
cp "$T/ahead/optim.safetensors" "$T/cut/optim.safetensors"
for n in 2 4; do
    for try in 1 2 3 4 5 6 7 8 9 10; do
        z=$((1 - try % 2)) zero=
        [ $z -eq 1 ] && zero="--zero 1"
        what="a cut save resumed on $n ranks, zero $z (try $try)"
        rm -rf "$T/r" && cp -r "$T/cut" "$T/r"
        mpi $n --resume --out "$T/r" --steps 3 $zero || { fail "$what: $(grep '^train' "$T/log")"; break; }
        [ -e "$T/first$n.$z" ] || cp "$T/r/model.safetensors" "$T/first$n.$z"
        cmp -s "$T/r/model.safetensors" "$T/first$n.$z" || fail "$what: other weights"
    done
done

# a setup error: one message, exit 2
mpi 2 $TINY --batch 1 --out "$T/b"
[ $? -eq 2 ] || fail "--batch 1 on 2 ranks: exit code"
[ "$(grep -c '^train: ' "$T/log")" -eq 1 ] && grep -q "smaller than the 2 MPI ranks" "$T/log" ||
    fail "--batch 1 on 2 ranks: $(cat "$T/log")"

finish
