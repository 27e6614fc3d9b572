#!/bin/sh
# make bench: mt against PyTorch on this machine; writes bench/RESULTS.md. About 10 minutes.
#   1. this machine's fp32 GEMM peak (the faster of OpenBLAS and oneDNN, 2 threads), the ceiling for MFU,
#      and the FMA limit of the build's vector width (bench/fma.c, 2 threads);
#   2. per config, full training steps (forward + backward + AdamW + zero grad), alternating
#      mt, torch in its best setting (2 threads, OpenMP OpenBLAS, its widest kernels: bench/env.sh) and, where the build
#      and CPU have bf16, mt --precision bf16, for ROUNDS rounds,
#      then torch once in its default setting (and once in its best with bf16 autocast, where mt
#      has bf16) and mt once with every op split across the threads
#      (--replicas 1) instead of the batch; every program reports the median of its steps.
#   3. the peak RSS of the whole ./train process on the configs with a memory goal: a short run
#      of each, evaluation and checkpoint included (bench/train_rss.sh); then deep100's peak RSS
#      and step time with --recompute none and block side by side (bench/recompute.sh), and LoRA
#      against full fine-tuning on GPT-2 124M's blocks (bench/lora.sh);
#   4. the component benchmarks: bench/norms/run.sh (writes bench/NORMS.md), bench/gemm.c
#      (the GEMM backends: OpenBLAS, oneDNN fp32 and bf16), bench/bpe.c (learning a BPE
#      vocabulary and encoding), bench/generate.sh (./infer's generation against llama2.c's
#      run.c, from LLAMA2C_RUN_C), bench/report.sh (./train --report's cost and a 100-layer
#      run's page: its size and load time in chromium, ~5 minutes), bench/shards_rss.sh (./train's peak RSS on a 4 GiB set of
#      token shards against a 10 MiB one), then each bench/*.py (one module against its torch
#      counterpart, printing a Markdown table), appended to bench/RESULTS.md;
#   5. with mpicc and mpirun, bench/mpi.sh (data-parallel training across processes) and
#      bench/zero.sh (--zero 1 against the unsharded run: state bytes, RSS, step time per rank).
# Environment: MT_BUILD (build dir), STEPS (10), UNTIMED (3: steps before the timed ones),
# ROUNDS (4), CONFIGS (all, by name), TRAIN_STEPS (20, of 3), BENCH_GPT_ONLY=1 (skip 4 and 5),
# LLAMA2C_RUN_C (llama2.c's run.c, e.g. ../shared/third_party/llama2c/run.c; absent:
# generation's run.c column is skipped).
set -e
cd "$(dirname "$0")/.."
BUILD=${MT_BUILD:-build}
STEPS=${STEPS:-10}
UNTIMED=${UNTIMED:-3}
ROUNDS=${ROUNDS:-4}
PY=/usr/bin/python3
. bench/env.sh
RAW=$BUILD/bench/results.jsonl
mkdir -p "$BUILD/bench"
: >"$RAW"
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
# On a machine loaded beyond its CPUs, OpenMP threads spinning at a barrier while their partner
# is descheduled stall every fork/join (deep100: 50 s a step instead of 1.3): both programs then
# wait passively, and the report says so. A setting from the caller is kept.
if [ -z "${OMP_WAIT_POLICY+set}" ] && awk "BEGIN { exit !(${LOAD0%% *} > $(nproc)) }"; then
    export OMP_WAIT_POLICY=passive
fi
START=$(date +%s)

# bf16 rows where this build and CPU have bf16 (oneDNN, AVX512_BF16)
BF16=0
"$BUILD/bench/gpt" --precision bf16 --n-layer 1 --n-embd 16 --n-head 1 --n-ctx 8 --batch 2 \
    --steps 1 --untimed 0 --threads 1 >/dev/null 2>&1 && BF16=1

echo "fp32 GEMM peak"
"$BUILD/bench/sgemm" 2048 15 2 | tee -a "$RAW"
echo "FMA limit of the build's vector width"
"$BUILD/bench/fma" 50 2 | tee -a "$RAW"

grep -v '^#' bench/configs.txt | while read -r name L C NH T B norm arch; do
    case " ${CONFIGS:-$name} " in *" $name "*) ;; *) continue ;; esac
    args="--name $name --n-layer $L --n-embd $C --n-head $NH --n-ctx $T --batch $B --norm $norm"
    args="$args --arch ${arch:-gpt}"
    args="$args --steps $STEPS --untimed $UNTIMED --threads"
    echo "$name: mt, torch (best setting) and mt bf16 alternating, $ROUNDS rounds; torch (default); mt (--replicas 1)"
    r=0
    while [ $r -lt "$ROUNDS" ]; do
        "$BUILD/bench/gpt" $args 2 | tee -a "$RAW"
        env $TORCH_BEST $PY bench/gpt/torch_gpt.py $args 2 \
            --setting best | tee -a "$RAW"
        [ "$BF16" = 0 ] || "$BUILD/bench/gpt" $args 2 --precision bf16 | tee -a "$RAW"
        r=$((r + 1))
    done
    $PY bench/gpt/torch_gpt.py $args 0 --setting default | tee -a "$RAW"
    [ "$BF16" = 0 ] || env $TORCH_BEST $PY bench/gpt/torch_gpt.py \
        $args 2 --setting autocast --autocast | tee -a "$RAW"
    "$BUILD/bench/gpt" $args 2 --replicas 1 | tee -a "$RAW"
done

echo "./train's peak RSS: bench/train_rss.sh"
MT_BUILD=$BUILD sh bench/train_rss.sh | tee -a "$RAW"

$PY bench/gpt/report.py "$RAW" --load-start "$LOAD0" --seconds $(($(date +%s) - START)) \
    --command "make bench (STEPS=$STEPS UNTIMED=$UNTIMED ROUNDS=$ROUNDS${CONFIGS:+ CONFIGS=\"$CONFIGS\"})" \
    >bench/RESULTS.md

echo "recomputation: bench/recompute.sh"
printf '\n## bench/recompute.sh: ./train on deep100 with --recompute none and block\n\n' \
    >>bench/RESULTS.md
MT_BUILD=$BUILD sh bench/recompute.sh | tee -a bench/RESULTS.md

echo "LoRA: bench/lora.sh"
printf '\n## bench/lora.sh: LoRA r 8 on q and v against full fine-tuning, GPT-2 124M blocks\n\n' \
    >>bench/RESULTS.md
MT_BUILD=$BUILD sh bench/lora.sh | tee -a bench/RESULTS.md

if [ -z "$BENCH_GPT_ONLY" ]; then
    echo "norms: bench/norms/run.sh"
    MT_BUILD=$BUILD sh bench/norms/run.sh
    printf '\n## norms\n\nForward + backward of every norm against torch: bench/NORMS.md.\n' \
        >>bench/RESULTS.md
    echo "gemm: $BUILD/bench/gemm"
    printf '\n## bench/gemm.c: the GEMM backends, one product on the pool\n\n' >>bench/RESULTS.md
    "$BUILD/bench/gemm" 30 2 pool | tee -a bench/RESULTS.md
    printf '\n## bench/gemm.c: the GEMM backends, a product per thread (as the replicas)\n\n' \
        >>bench/RESULTS.md
    "$BUILD/bench/gemm" 30 2 replicas | tee -a bench/RESULTS.md
    echo "generation: bench/generate.sh (./infer against llama2.c's run.c, LLAMA2C_RUN_C)"
    printf '\n## bench/generate.sh: generation against llama2.c run.c\n\n' >>bench/RESULTS.md
    MT_BUILD=$BUILD sh bench/generate.sh | tee -a bench/RESULTS.md
    echo "bpe: $BUILD/bench/bpe"
    printf '\n## bench/bpe.c: learning a BPE vocabulary and encoding\n\n' >>bench/RESULTS.md
    "$BUILD/bench/bpe" data/tinyshakespeare.txt 4096 9 2 | tee -a bench/RESULTS.md
    echo "report: bench/report.sh (./train --report's cost, a 100-layer page's size and load)"
    printf '\n## bench/report.sh: ./train --report, its cost and its page\n\n' >>bench/RESULTS.md
    MT_BUILD=$BUILD sh bench/report.sh | tee -a bench/RESULTS.md
    echo "token shards: bench/shards_rss.sh (writes and removes 4 GiB in TMPDIR or /var/tmp)"
    printf '\n## bench/shards_rss.sh: peak RSS of ./train on token shards by mmap\n\n' \
        >>bench/RESULTS.md
    MT_BUILD=$BUILD sh bench/shards_rss.sh | tee -a bench/RESULTS.md
    for p in bench/*.py; do
        [ -e "$p" ] || continue
        echo "component benchmark $p"
        printf '\n## %s\n\n' "$p" >>bench/RESULTS.md
        MT_BUILD=$BUILD $PY "$p" | tee -a bench/RESULTS.md
    done
fi
if [ -z "$BENCH_GPT_ONLY" ] && command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
    echo "mpi: bench/mpi.sh"
    printf '\n' >>bench/RESULTS.md
    sh bench/mpi.sh | tee -a bench/RESULTS.md
    echo "zero: bench/zero.sh"
    printf '\n' >>bench/RESULTS.md
    sh bench/zero.sh | tee -a bench/RESULTS.md
fi
echo "wrote bench/RESULTS.md"
