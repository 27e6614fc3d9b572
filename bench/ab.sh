#!/bin/sh
# Two builds of mt side by side: sh bench/ab.sh BUILD_A BUILD_B times the training step of each
# shape in bench/configs.txt with A's and B's bench/gpt, alternating A and B for ROUNDS rounds
# (2 threads, the default replicas), measures this machine's fp32 GEMM peak with A's sgemm, and
# prints a Markdown table (bench/ab.py): the median step of each build, B / A, and each build's
# spread across rounds, so a change can be checked for a slowdown beyond noise.
# Build B, e.g.: git worktree add /tmp/base COMMIT && make -C /tmp/base -j2 build/bench/gpt
# build/bench/sgemm (make bench would also run the whole benchmark).
# Environment: STEPS (10), UNTIMED (3), ROUNDS (6), CONFIGS (all, by name).
set -e
cd "$(dirname "$0")/.."
. bench/env.sh
if [ $# -ne 2 ] || [ ! -x "$1/bench/gpt" ] || [ ! -x "$2/bench/gpt" ]; then
    echo "usage: sh bench/ab.sh BUILD_A BUILD_B (each with bench/gpt: make BUILD=... bench)" >&2
    exit 2
fi
A=$1 B=$2
STEPS=${STEPS:-10} UNTIMED=${UNTIMED:-3} ROUNDS=${ROUNDS:-6}
RAW=$(mktemp)
trap 'rm -f "$RAW"' EXIT
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
"$A/bench/sgemm" 2048 15 2 >>"$RAW"
grep -v '^#' bench/configs.txt | while read -r name L C NH T Bt norm arch; do
    case " ${CONFIGS:-$name} " in *" $name "*) ;; *) continue ;; esac
    args="--n-layer $L --n-embd $C --n-head $NH --n-ctx $T --batch $Bt --norm $norm"
    args="$args --arch ${arch:-gpt} --steps $STEPS --untimed $UNTIMED --threads 2"
    echo "$name: A and B alternating, $ROUNDS rounds" >&2
    r=0
    while [ $r -lt "$ROUNDS" ]; do
        for who in A B; do
            [ $who = A ] && bin=$A || bin=$B
            "$bin/bench/gpt" --name "$name:$who" $args >>"$RAW"
        done
        r=$((r + 1))
    done
done
/usr/bin/python3 bench/ab.py "$RAW" --a "$A" --b "$B" --load-start "$LOAD0" \
    --command "sh bench/ab.sh $A $B (STEPS=$STEPS UNTIMED=$UNTIMED ROUNDS=$ROUNDS${CONFIGS:+ CONFIGS=\"$CONFIGS\"})"
