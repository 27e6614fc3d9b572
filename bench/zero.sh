#!/bin/sh
# --zero 1 at 2 ranks against the unsharded run (docs/mpi.md, ZeRO-1): the optimizer-state bytes
# each rank holds (./train's state line), each rank's peak RSS (/usr/bin/time) and the mean step
# time (metrics.csv's ms, the first step left out), on a 3.2M-parameter GPT (4 layers, n_embd 256,
# AdamW: 25 MiB of state) with one thread per rank. Prints a Markdown table with the load average.
# Step times are only comparable on a quiet machine: the load is printed next to them.
# Usage: sh bench/zero.sh [steps]
set -e
STEPS=${1:-40}
MAKEFLAGS= MFLAGS= make -s MPI=1 build-mpi/train >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
T=$(mktemp -d /tmp/mt_bench_zero_XXXXXX)
trap 'rm -rf "$T"' EXIT
RUN="--data data/tinyshakespeare.txt --n-layer 4 --n-head 4 --n-embd 256 --n-ctx 64 --batch 8
     --steps $STEPS --eval-every 0 --save-every 0 --log-every 1 --threads 1 --bucket-kb 1024"
echo "## --zero 1 (bench/zero.sh, $(nproc) cores, load average $(cut -d" " -f1-3 /proc/loadavg) at its start)"
echo
echo "| 2 ranks | optimizer state per rank (bytes) | peak RSS per rank | ms per step |"
echo "|---|---|---|---:|"
for zero in 0 1; do
    mpirun --oversubscribe -np 2 /usr/bin/time -f "peak-rss %M" build-mpi/train $RUN --zero $zero \
        --out "$T/$zero" >"$T/log" 2>&1
    state=$(grep '^state ' "$T/log" | sed 's/.*per rank: \([0-9 ]*\) (.*/\1/; s/ *$//; s/ / + /g')
    rss=$(grep '^peak-rss' "$T/log" | awk '{ printf "%s%.1f MiB", n++ ? " + " : "", $2 / 1024 }')
    ms=$(awk -F, 'NR > 2 { s += $6; n++ } END { printf "%.1f", s / n }' "$T/$zero/metrics.csv")
    echo "| --zero $zero | $state | $rss | $ms |"
done
echo
echo "load average at the end: $(cut -d" " -f1-3 /proc/loadavg)"
