#!/bin/sh
# The norms section of make bench (bench/run.sh calls it): forward + backward of every norm on
# (8192, 768), mt (bench/norms.c) against torch (torch_norms.py); writes bench/NORMS.md
# (report.py), which names the machine, its OpenBLAS kernels and GEMM peaks (bench/sgemm). Environment: MT_BUILD (build dir), REPS (11).
set -e
cd "$(dirname "$0")/../.."
BUILD=${MT_BUILD:-build}
PY=/usr/bin/python3
. bench/env.sh
HAVE_TORCH=$($PY -c 'import torch' 2>/dev/null && echo 1 || echo 0)

# 1-2 minutes when the machine is idle. REPS repetitions each (median). 2 threads on the wall clock, mt and torch
# (both settings) alternating twice; then 1 thread on the process CPU clock, which a loaded
# machine disturbs less.
REPS=${REPS:-11}
RAW=$BUILD/bench/norms.jsonl
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
"$BUILD/bench/sgemm" 2048 15 2 | tee "$RAW" # the machine and its GEMM peaks
norms_round() { # threads [cpu]
    "$BUILD/bench/norms" "$REPS" "$@" | tee -a "$RAW"
    [ "$HAVE_TORCH" = 1 ] || return 0
    env $TORCH_BEST $PY bench/norms/torch_norms.py "$REPS" "$1" "openmp-openblas+$TORCH_ISA" $2 |
        tee -a "$RAW"
    $PY bench/norms/torch_norms.py "$REPS" "$1" default $2 | tee -a "$RAW"
}
norms_round 2
norms_round 2
norms_round 1 cpu
$PY bench/norms/report.py "$RAW" "$LOAD" "sh bench/norms/run.sh (REPS=$REPS), part of make bench" \
    >bench/NORMS.md
echo "wrote bench/NORMS.md"
