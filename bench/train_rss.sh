#!/bin/sh
# The peak RSS of the whole ./train process (/usr/bin/time %M) on the configs with a memory goal:
# a short run of each on tiny Shakespeare with the bench's shapes (bench/configs.txt),
# 2 threads and the default replicas, STEPS steps then the evaluation (--eval-batches, default
# 20) and the checkpoint at the end. Prints one JSON line per config for bench/gpt/report.py.
# bench/run.sh runs it; alone: sh bench/train_rss.sh. Environment: MT_BUILD (build dir),
# TRAIN_STEPS (20), CONFIGS (tiny small deep100, by name).
set -e
cd "$(dirname "$0")/.."
BUILD=${MT_BUILD:-build}
STEPS=${TRAIN_STEPS:-20}
if [ ! -x /usr/bin/time ]; then
    echo "train_rss.sh: /usr/bin/time is missing (Debian: apt-get install time)" >&2
    exit 1
fi
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
grep -v '^#' bench/configs.txt | while read -r name L C NH T B norm arch; do
    case " ${CONFIGS:-tiny small deep100} " in *" $name "*) ;; *) continue ;; esac
    echo "$name: ./train, $STEPS steps, evaluation and checkpoint at the end" >&2
    if ! /usr/bin/time -f %M -o "$OUT/rss" "$BUILD/train" --data data/tinyshakespeare.txt \
        --n-layer "$L" --n-embd "$C" --n-head "$NH" --n-ctx "$T" --batch "$B" \
        --steps "$STEPS" --threads 2 --out "$OUT/$name" >"$OUT/log" 2>&1; then
        cat "$OUT/log" >&2
        exit 1
    fi
    awk -v n="$name" -v s="$STEPS" -v b="$B" -v t="$T" 'NR == 1 {
        printf "{\"prog\": \"train\", \"config\": \"%s\", \"steps\": %d, \"batch\": %d, " \
               "\"ctx\": %d, \"rss_mib\": %.1f}\n", n, s, b, t, $1 / 1024 }' "$OUT/rss"
done
