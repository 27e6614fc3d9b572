#!/bin/sh
# Time to quality on nanoGPT's CPU shakespeare_char recipe: ./train --config
# configs/nanogpt-char.ini against its PyTorch twin (bench/nanogpt/torch_char.py, torch's best
# setting here: 2 threads, the OpenMP OpenBLAS, AVX-512), alternating for ROUNDS rounds. Each
# row: the whole program's seconds (mt: ./train, then ./infer --score of the validation split;
# torch: training and the same scoring), tokens/s of the training steps, the validation loss over
# the whole validation split. Where the build and CPU have bf16, mt also runs with --precision
# bf16 in each round. Writes bench/NANOGPT.md (medians over the rounds; bench/nanogpt/report.py).
# A separate script from bench/run.sh: about 4 minutes a round on 2 idle cores at 2000 steps.
# Environment: STEPS (2000), WARMUP (100), ROUNDS (3), THREADS (2), MT_BEFORE (a second ./train to alternate
# with, e.g. a build of another commit: its rows are labelled mt-before and, where bf16 runs,
# mt-before-bf16), MT_BUILD (build).
set -e
cd "$(dirname "$0")/.."
BUILD=${MT_BUILD:-build}
STEPS=${STEPS:-2000}
WARMUP=${WARMUP:-100}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
PY=/usr/bin/python3
BLAS=/usr/lib/x86_64-linux-gnu/openblas-openmp
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
RAW=$BUILD/bench/nanogpt.jsonl
mkdir -p "$BUILD/bench"
tail -c 111539 data/tinyshakespeare.txt >"$TMP/val.txt" # the last 10%: ./train's validation split
# on a machine loaded beyond its CPUs both wait passively (bench/run.sh says why)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
if [ -z "${OMP_WAIT_POLICY+set}" ] && awk "BEGIN { exit !(${LOAD0%% *} > $(nproc)) }"; then
    export OMP_WAIT_POLICY=passive
fi
# the machine (CPU, OpenBLAS's kernels) from bench/gpt's one-step report; bf16 where it runs
"$BUILD/bench/gpt" --n-layer 1 --n-embd 16 --n-head 1 --n-ctx 8 --batch 2 --steps 1 --untimed 0 \
    --threads 1 | sed 's/^{"prog": "mt"/{"prog": "machine"/' >"$RAW"
BF16=0
"$BUILD/bench/gpt" --precision bf16 --n-layer 1 --n-embd 16 --n-head 1 --n-ctx 8 --batch 2 \
    --steps 1 --untimed 0 --threads 1 >/dev/null 2>&1 && BF16=1
now() { date +%s.%N; }

run_mt() { # label binary [train flags]
    label=$1 bin=$2
    shift 2
    rm -rf "$TMP/out"
    t0=$(now)
    "$bin" --config configs/nanogpt-char.ini --out "$TMP/out" --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS" \
        --log-every "$STEPS" "$@" >"$TMP/train.log"
    t1=$(now)
    # scoring: batches of 16 windows of 64 tokens, each thread its own batches
    ./infer --checkpoint "$TMP/out/model.safetensors" --score "$TMP/val.txt" --threads "$THREADS" >"$TMP/score.log"
    t2=$(now)
    # tokens/s of the loop, its evaluations included: steps x 12 x 64 over the last elapsed_s
    tok=$(awk -F, 'END { printf "%.0f", $1 * 768 / $8 }' "$TMP/out/metrics.csv")
    val=$(sed -n 's/.*loss=\([0-9.]*\).*/\1/p' "$TMP/score.log")
    echo "{\"prog\": \"$label\", \"threads\": $THREADS, \"steps\": $STEPS, \"prog_s\": $(echo "$t2 - $t0" | bc), \"train_s\": $(echo "$t1 - $t0" | bc), \"score_s\": $(echo "$t2 - $t1" | bc), \"tok_s\": $tok, \"val_loss\": $val}"
}

run_torch() { # prog_s: the whole program; train_s: its training steps; tok_s: of those
    t0=$(now)
    LD_LIBRARY_PATH=$BLAS ATEN_CPU_CAPABILITY=avx512 $PY bench/nanogpt/torch_char.py \
        --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS" >"$TMP/torch.json"
    t1=$(now)
    sed "s/^{/{\"prog_s\": $(echo "$t1 - $t0" | bc), /" "$TMP/torch.json"
}

echo "# nanogpt-char: $STEPS steps, $THREADS threads, $ROUNDS rounds; load $LOAD0; OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}"
r=0
while [ $r -lt "$ROUNDS" ]; do
    run_mt mt ./train | tee -a "$RAW"
    [ "$BF16" = 0 ] || run_mt mt-bf16 ./train --precision bf16 | tee -a "$RAW"
    [ -z "$MT_BEFORE" ] || run_mt mt-before "$MT_BEFORE" | tee -a "$RAW"
    [ -z "$MT_BEFORE" ] || [ "$BF16" = 0 ] ||
        run_mt mt-before-bf16 "$MT_BEFORE" --precision bf16 | tee -a "$RAW"
    run_torch | tee -a "$RAW"
    r=$((r + 1))
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
echo "# load at the end $LOAD1"
$PY bench/nanogpt/report.py "$RAW" "$LOAD0" "$LOAD1" "${OMP_WAIT_POLICY:-unset}" >bench/NANOGPT.md
echo "wrote bench/NANOGPT.md"
