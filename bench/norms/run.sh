#!/bin/sh
# The norms section of make bench (bench/run.sh calls it): forward + backward of every norm on
# (8192, 768), mt (bench/norms.c) against torch (torch_norms.py); writes bench/NORMS.md
# (report.py). Environment: MT_BUILD (build dir), REPS (11).
set -e
cd "$(dirname "$0")/../.."
BUILD=${MT_BUILD:-build}
PY=/usr/bin/python3
BLAS=/usr/lib/x86_64-linux-gnu/openblas-openmp
HAVE_TORCH=$($PY -c 'import torch' 2>/dev/null && echo 1 || echo 0)

# ---- norms (issue 3): forward + backward of every norm on (8192, 768); about 1-2 minutes.
# REPS repetitions each (median); mt and torch alternate twice, torch in both settings.
REPS=${REPS:-15}
RAW=$BUILD/bench/norms.jsonl
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
: >"$RAW"
for round in 1 2; do
    "$BUILD/bench/norms" "$REPS" 2 | tee -a "$RAW"
    if [ "$HAVE_TORCH" = 1 ]; then
        LD_LIBRARY_PATH=$BLAS ATEN_CPU_CAPABILITY=avx512 \
            $PY bench/norms/torch_norms.py "$REPS" 2 openmp-openblas+avx512 | tee -a "$RAW"
        $PY bench/norms/torch_norms.py "$REPS" 2 default | tee -a "$RAW"
    fi
done
$PY bench/norms/report.py "$RAW" "$LOAD" "make bench (REPS=$REPS)" >bench/NORMS.md
echo "wrote bench/NORMS.md"
