#!/bin/sh
# Time to quality on nanoGPT's CPU shakespeare_char recipe, side by side in one run, whole
# programs: PyTorch's recipe (bench/nanogpt/torch_char.py: AdamW, 2000 steps, cosine; torch's best
# setting here: 2 threads, the OpenMP OpenBLAS, its widest kernels: bench/env.sh) against mt's ./train --config
# configs/nanogpt-char.ini with the same recipe and with mt's best recipe for each optimizer
# (AdamW, Muon, Lion: rate, schedule, batch and steps chosen by validation loss with
# bench/nanogpt/search.py, in bench/nanogpt/search.csv), and torch's twin of the Muon recipe
# (Muon written out in torch), so that what the algorithm gives and what mt's implementation gives
# show apart. Each row: the whole program's seconds (mt: ./train, then ./infer --score of the
# validation split; torch: training and the same scoring), tokens/s of the training steps, the
# validation loss over the whole validation split. Where the build and CPU have bf16, each mt
# recipe also runs with --precision bf16. The programs alternate in each of ROUNDS rounds; writes
# bench/NANOGPT.md (medians over the rounds; bench/nanogpt/report.py). A separate script from
# bench/run.sh: about 6 minutes a round on 2 idle cores (ROUNDS=3: 20 minutes).
# Environment: ROUNDS (3), THREADS (2), CHECK (1: every row at a tenth of its steps, a check of
# the script whose page says so), MT_BEFORE (a second ./train to alternate with, e.g. a build of
# another commit: rows mt-before and mt-before-bf16 with the recipe), MT_BUILD (build).
set -e
cd "$(dirname "$0")/.."
BUILD=${MT_BUILD:-build}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
DIV=1
[ -z "$CHECK" ] || DIV=10
PY=/usr/bin/python3
. bench/env.sh
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
RAW=$BUILD/bench/nanogpt.jsonl
mkdir -p "$BUILD/bench"
tail -c 111539 data/tinyshakespeare.txt >"$TMP/val.txt" # the last 10%: ./train's validation split

# The recipes: label, steps (fp32, bf16), flags over configs/nanogpt-char.ini; torch_char.py takes
# the same flags for adamw and muon. From bench/nanogpt/search.csv: the fewest steps whose
# validation loss is at most torch's recipe's (bf16 Muon: 450 steps gave 1.914, 500 1.885; fp32
# Muon at 450 gave 1.904 with one thread but 1.909 with the bench's two, and 1.882 at 500); Lion
# reached none in 1000 steps (best 1.975 at 1e-3, decay 0.3): it runs the recipe's 2000.
RECIPE_STEPS=2000
ADAMW_STEPS="1200 1200"
ADAMW="--lr 3e-3 --schedule wsd --decay-frac 0.4 --warmup 50"
MUON_STEPS="500 500"
MUON="--optim muon --muon-lr 0.04 --adam-lr 6e-3 --schedule wsd --decay-frac 0.4 --warmup 50"
LION_STEPS=2000
LION="--optim lion --lr 1e-3 --weight-decay 0.3 --schedule wsd --decay-frac 0.4 --warmup 50"

# on a machine loaded beyond its CPUs both wait passively (bench/run.sh says why)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
if [ -z "${OMP_WAIT_POLICY+set}" ] && awk "BEGIN { exit !(${LOAD0%% *} > $(nproc)) }"; then
    export OMP_WAIT_POLICY=passive
fi
# the machine (CPU, OpenBLAS's kernels) and its fp32 and bf16 GEMM peaks (bench/sgemm, as
# bench/run.sh measures them); bf16 where it runs
"$BUILD/bench/sgemm" 2048 15 "$THREADS" >"$RAW"
BF16=0
"$BUILD/bench/gpt" --precision bf16 --n-layer 1 --n-embd 16 --n-head 1 --n-ctx 8 --batch 2 \
    --steps 1 --untimed 0 --threads 1 >/dev/null 2>&1 && BF16=1
now() { date +%s.%N; }

run_mt() { # label binary steps [train flags]; a failure leaves $TMP/failed (a pipe hides it)
    label=$1 bin=$2 steps=$(($3 / DIV))
    shift 3
    [ -z "$CHECK" ] || set -- "$@" --warmup 10
    rm -rf "$TMP/out"
    t0=$(now)
    "$bin" --config configs/nanogpt-char.ini --out "$TMP/out" --threads "$THREADS" \
        --eval-every 500 --log-every "$steps" "$@" --steps "$steps" >"$TMP/train.log" ||
        { echo "$label: $(tail -n 3 "$TMP/train.log")" >"$TMP/failed" && return 1; }
    t1=$(now)
    # scoring: batches of 16 windows of 64 tokens, each thread its own batches
    ./infer --checkpoint "$TMP/out/model.safetensors" --score "$TMP/val.txt" --threads "$THREADS" \
        >"$TMP/score.log"
    t2=$(now)
    # tokens/s of the loop, its evaluations included: steps x batch x 64 over the last elapsed_s
    batch=$(sed -n 's/.*batch \([0-9]*\) x.*/\1/p' "$TMP/train.log")
    tok=$(awk -F, -v b="$batch" 'END { printf "%.0f", $1 * b * 64 / $8 }' "$TMP/out/metrics.csv")
    val=$(sed -n 's/.*loss=\([0-9.]*\).*/\1/p' "$TMP/score.log")
    echo "{\"prog\": \"$label\", \"threads\": $THREADS, \"steps\": $steps, \"batch\": $batch," \
        "\"prog_s\": $(echo "$t2 - $t0" | bc), \"train_s\": $(echo "$t1 - $t0" | bc)," \
        "\"score_s\": $(echo "$t2 - $t1" | bc), \"tok_s\": $tok, \"val_loss\": $val," \
        "\"flags\": \"$*\"}"
}

run_both() { # label "fp32-steps [bf16-steps]" "train flags": the recipe in fp32, then in bf16
    label=$1 s32=${2% *} s16=${2#* } flags=$3
    # shellcheck disable=SC2086
    run_mt "$label" ./train "$s32" $flags | tee -a "$RAW"
    # shellcheck disable=SC2086
    [ "$BF16" = 0 ] || run_mt "$label-bf16" ./train "$s16" $flags --precision bf16 | tee -a "$RAW"
}

run_torch() { # label steps [torch_char.py flags]; prog_s: the whole program
    label=$1 steps=$(($2 / DIV))
    shift 2
    [ -z "$CHECK" ] || set -- "$@" --warmup 10
    t0=$(now)
    env $TORCH_BEST $PY bench/nanogpt/torch_char.py \
        --steps "$steps" --threads "$THREADS" --prog "$label" "$@" >"$TMP/torch.json" ||
        { echo "$label: torch_char.py failed" >"$TMP/failed" && return 1; }
    t1=$(now)
    sed "s/^{/{\"prog_s\": $(echo "$t1 - $t0" | bc), \"flags\": \"$*\", /" "$TMP/torch.json"
}

echo "# nanogpt-char: $THREADS threads, $ROUNDS rounds${CHECK:+, CHECK (a tenth of the steps)};" \
    "load $LOAD0; OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}"
r=0
while [ $r -lt "$ROUNDS" ]; do
    run_both mt "$RECIPE_STEPS" ""
    run_both mt-adamw "$ADAMW_STEPS" "$ADAMW"
    run_both mt-muon "$MUON_STEPS" "$MUON"
    run_both mt-lion "$LION_STEPS" "$LION"
    [ -z "$MT_BEFORE" ] || run_mt mt-before "$MT_BEFORE" "$RECIPE_STEPS" | tee -a "$RAW"
    [ -z "$MT_BEFORE" ] || [ "$BF16" = 0 ] ||
        run_mt mt-before-bf16 "$MT_BEFORE" "$RECIPE_STEPS" --precision bf16 | tee -a "$RAW"
    run_torch torch "$RECIPE_STEPS" | tee -a "$RAW"
    # shellcheck disable=SC2086
    run_torch torch-muon "${MUON_STEPS% *}" $MUON | tee -a "$RAW"
    [ ! -e "$TMP/failed" ] || { echo "nanogpt.sh: $(cat "$TMP/failed")" >&2 && exit 1; }
    r=$((r + 1))
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
echo "# load at the end $LOAD1"
$PY bench/nanogpt/report.py "$RAW" "$LOAD0" "$LOAD1" "${OMP_WAIT_POLICY:-unset}" "${CHECK:-0}" \
    >bench/NANOGPT.md
echo "wrote bench/NANOGPT.md"
