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
ROUNDS=${ROUNDS:-3}
DIV=1
[ -z "$CHECK" ] || DIV=10 CHECK_WARMUP=10
RAW=${MT_BUILD:-build}/bench/nanogpt.jsonl
. bench/nanogpt/lib.sh

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
    round_done nanogpt.sh
    r=$((r + 1))
done
runs_done
$PY bench/nanogpt/report.py "$RAW" "$LOAD0" "$LOAD1" "${OMP_WAIT_POLICY:-unset}" "${CHECK:-0}" \
    >bench/NANOGPT.md
echo "wrote bench/NANOGPT.md"
