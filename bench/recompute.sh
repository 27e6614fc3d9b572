#!/bin/sh
# ./train on deep100 (bench/run.sh's shape: 100 layers, n_embd 64, 2 heads, n_ctx 64, batch 8;
# tiny Shakespeare, 2 threads, the default replicas) with --recompute none and block side by
# side, and block with --replicas 1 (one gradient buffer instead of one a thread: the floor of
# parameters, gradients and AdamW's moments is most of what block leaves): ROUNDS rounds of one
# run of each, alternating, each STEPS steps then the evaluation and the checkpoint at the end.
# Per mode: the peak RSS of the whole process (/usr/bin/time %M, the most over the rounds) and
# the step time (the median of each run's steps after the first UNTIMED, then the median over
# the rounds). Prints a Markdown table; bench/run.sh appends it to
# bench/RESULTS.md. Goal (issue 32): with block, RSS at most 40% of none's at a step time at most
# 1.35x. Environment: MT_BUILD (build dir), STEPS (12), UNTIMED (3), ROUNDS (3).
set -e
cd "$(dirname "$0")/.."
BUILD=${MT_BUILD:-build}
STEPS=${STEPS:-12}
UNTIMED=${UNTIMED:-3}
ROUNDS=${ROUNDS:-3}
if [ ! -x /usr/bin/time ]; then
    echo "recompute.sh: /usr/bin/time is missing (Debian: apt-get install time)" >&2
    exit 1
fi
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
# median of the numbers on stdin
median() {
    sort -g | awk '{ v[NR] = $1 }
        END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
flags() { # mode: its ./train flags
    case $1 in
    block-r1) echo "--recompute block --replicas 1" ;;
    *) echo "--recompute $1" ;;
    esac
}
r=0
while [ $r -lt "$ROUNDS" ]; do
    for mode in none block block-r1; do
        echo "deep100, --recompute $mode, round $((r + 1)) of $ROUNDS" >&2
        rm -rf "$OUT/run"
        if ! /usr/bin/time -f %M -o "$OUT/rss" "$BUILD/train" --data data/tinyshakespeare.txt \
            --n-layer 100 --n-embd 64 --n-head 2 --n-ctx 64 --batch 8 --steps "$STEPS" \
            --threads 2 --log-every 1 --eval-every 0 $(flags "$mode") \
            --out "$OUT/run" >"$OUT/log" 2>&1; then
            cat "$OUT/log" >&2
            exit 1
        fi
        echo "$(cat "$OUT/rss")" >>"$OUT/$mode.rss"
        awk -F, -v u="$UNTIMED" 'NR > 1 + u { print $6 }' "$OUT/run/metrics.csv" | median \
            >>"$OUT/$mode.ms"
        grep -o 'arena peak [0-9.]* MiB' "$OUT/log" | cut -d' ' -f3 >>"$OUT/$mode.arena"
    done
    r=$((r + 1))
done
rss() { sort -g "$OUT/$1.rss" | tail -1 | awk '{ printf "%.1f", $1 / 1024 }'; }
ms() { median <"$OUT/$1.ms"; }
echo "Peak RSS of the whole ./train process and median step time, deep100 (100 x 64, batch 8 x 64,"
echo "2 threads, 2 replicas unless the mode says 1), $STEPS steps a run (the first $UNTIMED" \
    "untimed), $ROUNDS rounds"
echo "alternating; load average at the end $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores."
echo
echo "| mode | peak RSS MiB | arena peak MiB (replica 0) | step ms | RSS vs none |" \
    "step time vs none |"
echo "|---|---|---|---|---|---|"
for mode in none block block-r1; do
    awk -v m="$(flags "$mode")" -v rss="$(rss $mode)" -v ms="$(ms $mode)" -v rss0="$(rss none)" \
        -v ms0="$(ms none)" -v arena="$(sort -g "$OUT/$mode.arena" | tail -1)" 'BEGIN {
        printf "| %s | %.1f | %s | %.0f | %.0f%% | %.2fx |\n", m, rss, arena, ms, 100 * rss / rss0,
            ms / ms0 }'
done
for mode in block block-r1; do
    awk -v m="$(flags "$mode")" -v a="$(rss "$mode")" -v b="$(rss none)" -v c="$(ms "$mode")" \
        -v d="$(ms none)" 'BEGIN {
        printf "\nGoal: RSS at most 40%% of none'"'"'s at a step time at most 1.35x, with %s: " \
            "%s (%.0f%%, %.2fx).\n",
            m, a <= 0.4 * b && c <= 1.35 * d ? "met" : "not met", 100 * a / b, c / d }'
done
