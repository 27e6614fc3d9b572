# Sourced by bench/nanogpt.sh and bench/speedrun.sh after `set -e` and a cd to the root, with RAW
# (the rows' JSON lines), DIV (every step count over it) and CHECK_WARMUP (empty, or the warmup
# of a check run's shortened runs) set: the temporary directory, the validation split, the load
# and OMP wait policy, the machine's line (bench/sgemm's peaks into RAW; `peaks` measures them
# again), BF16 (1 where ./train runs bf16 here) and the runs: run_mt, run_both and run_torch
# print a row of JSON each (a failure leaves $TMP/failed: round_done stops there); runs_done ends.
BUILD=${MT_BUILD:-build}
THREADS=${THREADS:-2}
PY=/usr/bin/python3
. bench/env.sh
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$BUILD/bench"
tail -c 111539 data/tinyshakespeare.txt >"$TMP/val.txt" # the last 10%: ./train's validation split

# on a machine loaded beyond its CPUs both wait passively (bench/run.sh says why)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
if [ -z "${OMP_WAIT_POLICY+set}" ] && awk "BEGIN { exit !(${LOAD0%% *} > $(nproc)) }"; then
    export OMP_WAIT_POLICY=passive
fi
# the machine (CPU, OpenBLAS's kernels) and its fp32 and bf16 GEMM peaks (bench/sgemm, as
# bench/run.sh measures them); bf16 where it runs. The scripts measure again at their end: the
# report takes the higher (a neighbour on a shared CPU lowers one)
peaks() { "$BUILD/bench/sgemm" 2048 15 "$THREADS"; }
peaks >"$RAW"
BF16=0
"$BUILD/bench/gpt" --precision bf16 --n-layer 1 --n-embd 16 --n-head 1 --n-ctx 8 --batch 2 \
    --steps 1 --untimed 0 --threads 1 >/dev/null 2>&1 && BF16=1
now() { date +%s.%N; }

run_mt() { # label binary steps [train flags]; a failure leaves $TMP/failed (a pipe hides it)
    label=$1 bin=$2 steps=$(($3 / DIV))
    shift 3
    [ -z "$CHECK_WARMUP" ] || set -- "$@" --warmup "$CHECK_WARMUP"
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
    [ -z "$CHECK_WARMUP" ] || set -- "$@" --warmup "$CHECK_WARMUP"
    t0=$(now)
    env $TORCH_BEST $PY bench/nanogpt/torch_char.py \
        --steps "$steps" --threads "$THREADS" --prog "$label" "$@" >"$TMP/torch.json" ||
        { echo "$label: torch_char.py failed" >"$TMP/failed" && return 1; }
    t1=$(now)
    sed "s/^{/{\"prog_s\": $(echo "$t1 - $t0" | bc), \"flags\": \"$*\", /" "$TMP/torch.json"
}

round_done() { # script: stop at a round whose run failed
    [ ! -e "$TMP/failed" ] || { echo "$1: $(cat "$TMP/failed")" >&2 && exit 1; }
}

runs_done() { # the load at the end (LOAD1) and the peaks again, into RAW
    LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
    peaks >>"$RAW"
    echo "# load at the end $LOAD1"
}
