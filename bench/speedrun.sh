#!/bin/sh
# The speedrun's record table (issue 45) side by side in one run, whole programs as
# bench/nanogpt.sh times them (bench/nanogpt/lib.sh): PyTorch's recipe (bench/nanogpt/torch_char.py,
# AdamW, 2000 steps) and each record of bench/speedrun/search.py's chain (mt with torch's recipe,
# mt's Muon recipe, then each piece kept because it reached torch's loss in fewer steps) at the
# chain's steps, every seed of the search, and where the build and CPU have bf16, in bf16 too.
# Writes bench/SPEEDRUN.md (bench/speedrun/report.py: medians over the seeds and rounds, the
# search's trials). About 8 minutes a round on 2 idle cores.
# Environment: ROUNDS (1), THREADS (2), SEARCH_FLAGS (the search's own: --csv, --pieces, --target,
# --steps-scale), RAW (build/bench/speedrun.jsonl), PAGE (bench/SPEEDRUN.md), CHECK (1: a check
# of the script, its page says so; with the SEARCH_FLAGS of a check search, whose steps are
# already few), MT_BUILD (build).
set -e
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-1}
DIV=1
RAW=${RAW:-${MT_BUILD:-build}/bench/speedrun.jsonl}
PAGE=${PAGE:-bench/SPEEDRUN.md}
. bench/nanogpt/lib.sh
# shellcheck disable=SC2086
$PY bench/speedrun/search.py $SEARCH_FLAGS --records >"$TMP/records"
TORCH_STEPS=$(sed -n 's/^recipe \([0-9]*\) .*/\1/p' "$TMP/records" | head -n 1)

echo "# speedrun: $THREADS threads, $ROUNDS rounds${CHECK:+, CHECK};" \
    "load $LOAD0; OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}"
r=0
while [ $r -lt "$ROUNDS" ]; do
    run_torch torch "$TORCH_STEPS" | tee -a "$RAW"
    while read -r label steps flags; do
        run_both "$label" "$steps $steps" "$flags" </dev/null
    done <"$TMP/records"
    round_done speedrun.sh
    r=$((r + 1))
done
runs_done
$PY bench/speedrun/report.py "$RAW" "$SEARCH_FLAGS" "$LOAD0" "$LOAD1" "${OMP_WAIT_POLICY:-unset}" \
    "${CHECK:-0}" >"$PAGE"
echo "wrote $PAGE"
