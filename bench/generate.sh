#!/bin/sh
# Generation speed: ./infer against llama2.c's run.c on one model of llama2.c's stories15M shape
# (dim 288, 6 layers, 6 heads, context 256, the byte vocabulary), exported for run.c with
# ./export --format llama2c. Per thread count (THREADS, "1 2"), ROUNDS (3) rounds alternating
# the two programs, each greedy (temperature 0) from the same prompt; prints a Markdown table of
# min / median tokens/s. run.c is built from $LLAMA2C_RUN_C (its path; never copied into mt) as
# its own `make runomp` does (with RUNC_ARCH, -march=native unless given: the instruction sets of
# mt's build, e.g. -march=znver3 beside make ARCH=-march=znver3), into $MT_BUILD/bench/runomp;
# without it the run.c column is skipped with a message. The ratio is of the medians; the goal,
# issue 41's. Counting: ./infer's tokens/s is its --tokens (248) over the time from the
# prompt's feed to the last token; run.c's is its positions after the first (255 of -n 256:
# BOS, the prompt, then the generated tokens) over the time from the second one on. Both take
# OMP_WAIT_POLICY from the environment (make bench sets passive on a machine loaded beyond its
# cores, where spinning barriers make two threads a lottery).
set -e
cd "$(dirname "$0")/.."
BUILD=${MT_BUILD:-build}
ROUNDS=${ROUNDS:-3}
RUNC_ARCH=${RUNC_ARCH:--march=native}
GOAL=1.5
THREADS=${THREADS:-1 2}
DIR=$BUILD/bench/generate
PROMPT="ROMEO:"
mkdir -p "$DIR"
if [ ! -e "$DIR/model.safetensors" ]; then
    "$BUILD/train" --data data/tinyshakespeare.txt --arch llama --n-layer 6 --n-head 6 \
        --n-embd 288 --n-ctx 256 --steps 0 --out "$DIR" >"$DIR/train.log" 2>&1
fi
"$BUILD/export" --checkpoint "$DIR/model.safetensors" --format llama2c --out "$DIR/model.bin" \
    --tokenizer-out "$DIR/tok.bin" >/dev/null
RUNC=""
if [ -n "$LLAMA2C_RUN_C" ] && [ -e "$LLAMA2C_RUN_C" ]; then
    if gcc -Ofast -fopenmp $RUNC_ARCH "$LLAMA2C_RUN_C" -lm -o "$BUILD/bench/runomp"; then
        RUNC=$BUILD/bench/runomp
    else
        echo "run.c: skipped ($LLAMA2C_RUN_C did not build)" >&2
    fi
else
    echo "run.c: skipped (set LLAMA2C_RUN_C to llama2.c's run.c, e.g." \
         "LLAMA2C_RUN_C=../shared/third_party/llama2c/run.c; now '${LLAMA2C_RUN_C}')" >&2
fi

# min and median of the numbers on stdin
stats() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "-"; exit }
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.0f / %.0f", v[1], m }'; }

mt_once() { # tokens/s of ./infer on $1 threads
    OMP_NUM_THREADS=$1 "$BUILD/infer" --checkpoint "$DIR/model.safetensors" --prompt "$PROMPT" \
        --tokens 248 --temperature 0 --threads "$1" 2>&1 >/dev/null |
        sed -n 's/.*s: \([0-9.]*\) tokens\/s.*/\1/p'
}
runc_once() { # tokens/s of run.c on $1 threads
    (cd "$DIR" && OMP_NUM_THREADS=$1 "../runomp" model.bin -z tok.bin -t 0 -n 256 -i "$PROMPT" \
        2>&1 >/dev/null | sed -n 's/achieved tok\/s: \([0-9.]*\)/\1/p')
}

echo "| threads | ./infer tokens/s (min / median) | run.c tokens/s (min / median) | ./infer / run.c | goal |"
echo "|---|---|---|---:|---:|"
for t in $THREADS; do
    : >"$DIR/mt.$t"
    : >"$DIR/runc.$t"
    r=0
    while [ "$r" -lt "$ROUNDS" ]; do
        mt_once "$t" >>"$DIR/mt.$t"
        [ -z "$RUNC" ] || runc_once "$t" >>"$DIR/runc.$t"
        r=$((r + 1))
    done
    runc=$([ -n "$RUNC" ] && stats <"$DIR/runc.$t" || echo "skipped: no LLAMA2C_RUN_C")
    mt=$(stats <"$DIR/mt.$t")
    ratio=$(echo "$mt / $runc" | awk -F' / ' '$4 + 0 > 0 { printf "%.2fx", $2 / $4; next } { print "-" }')
    echo "| $t | $mt | $runc | $ratio | >= ${GOAL}x |"
done
echo
echo "$ROUNDS rounds alternating, stories15M shape (dim 288, 6 layers, 6 heads, context 256," \
     "bytes), random weights, greedy from \"$PROMPT\"; run.c built with $RUNC_ARCH; load $(cut -d' ' -f1-3 /proc/loadavg)," \
     "OMP_WAIT_POLICY ${OMP_WAIT_POLICY:-unset}."
