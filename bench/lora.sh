#!/bin/sh
# LoRA against full fine-tuning on GPT-2 124M's blocks (12 layers, n_embd 768, 12 heads; the byte
# vocabulary of tiny Shakespeare, n_ctx 64, batch 4: llm.c's setting; a fresh initialisation,
# not GPT-2's weights), 2 threads: full fine-tuning, and --lora-rank 8 on q and v, ROUNDS rounds
# alternating, each STEPS steps. Per mode: the peak RSS of the whole process (/usr/bin/time %M,
# the most over the rounds) and the step time (the median of each run's steps after the first
# UNTIMED, then the median over the rounds). Prints a Markdown table; bench/run.sh appends it to
# bench/RESULTS.md. Goal (issue 42): LoRA's RSS at most 45% of full's, its step at most 0.6x.
# Environment: MT_BUILD (build dir), STEPS (6), UNTIMED (2), ROUNDS (2).
set -e
cd "$(dirname "$0")/.."
BUILD=${MT_BUILD:-build}
STEPS=${STEPS:-6}
UNTIMED=${UNTIMED:-2}
ROUNDS=${ROUNDS:-2}
[ -x /usr/bin/time ] || { echo "lora.sh: /usr/bin/time is missing (Debian: apt-get install time)" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
median() {
    sort -g | awk '{ v[NR] = $1 }
        END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
flags() { [ "$1" = lora ] && echo "--lora-rank 8 --lora-alpha 16 --lora-targets q,v"; }
r=0
while [ $r -lt "$ROUNDS" ]; do
    for mode in full lora; do
        echo "GPT-2 124M blocks, $mode, round $((r + 1)) of $ROUNDS" >&2
        rm -rf "$OUT/run"
        if ! /usr/bin/time -f %M -o "$OUT/rss" "$BUILD/train" --data data/tinyshakespeare.txt \
            --n-layer 12 --n-embd 768 --n-head 12 --n-ctx 64 --batch 4 --steps "$STEPS" \
            --threads 2 --log-every 1 --eval-every 0 --eval-batches 1 $(flags "$mode") \
            --out "$OUT/run" >"$OUT/log" 2>&1; then
            cat "$OUT/log" >&2
            exit 1
        fi
        cat "$OUT/rss" >>"$OUT/$mode.rss"
        awk -F, -v u="$UNTIMED" 'NR > 1 + u { print $6 }' "$OUT/run/metrics.csv" | median \
            >>"$OUT/$mode.ms"
    done
    r=$((r + 1))
done
rss() { sort -g "$OUT/$1.rss" | tail -1; }
ms() { median <"$OUT/$1.ms"; }
echo "Peak RSS of the whole ./train process and median step time, GPT-2 124M's blocks (byte"
echo "vocabulary, batch 4 x 64, 2 threads), $STEPS steps a run (the first $UNTIMED untimed), $ROUNDS"
echo "rounds alternating; load average at the end $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores."
echo
echo "| mode | peak RSS MiB | step ms | RSS vs full | step time vs full |"
echo "|---|---|---|---|---|"
for mode in full lora; do
    awk -v m="$mode $(flags "$mode")" -v rss="$(rss $mode)" -v ms="$(ms $mode)" \
        -v rss0="$(rss full)" -v ms0="$(ms full)" 'BEGIN {
        printf "| %s | %.1f | %.0f | %.0f%% | %.2fx |\n", m, rss / 1024, ms, 100 * rss / rss0,
            ms / ms0 }'
done
awk -v a="$(rss lora)" -v b="$(rss full)" -v c="$(ms lora)" -v d="$(ms full)" 'BEGIN {
    printf "\nGoal: RSS at most 45%% of full'"'"'s at a step time at most 0.6x: %s (%.0f%%, %.2fx).\n",
        a <= 0.45 * b && c <= 0.6 * d ? "met" : "not met", 100 * a / b, c / d }'
