#!/bin/sh
# MPI data parallelism on this machine (docs/mpi.md): MPI_Allreduce bandwidth for the tiny GPT's
# gradient (and larger sizes), then ./train on configs/tiny-gpt.ini with 1 and 2 ranks of one
# thread each: tokens/s and the share of the run rank 0 spends in the gradient sums.
# Usage: sh bench/mpi.sh [steps]   (make bench runs it when mpicc is present)
set -e
STEPS=${1:-60}
MAKEFLAGS= MFLAGS= make -s MPI=1 build-mpi/train >/dev/null
mkdir -p build-mpi/bench
mpicc -O2 bench/mpi/allreduce.c -o build-mpi/bench/allreduce
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
T=$(mktemp -d /tmp/mt_bench_mpi_XXXXXX)
trap 'rm -rf "$T"' EXIT
RUN="--config configs/tiny-gpt.ini --steps $STEPS --eval-every 0 --save-every 0 --log-every $STEPS --threads 1"
echo "## MPI (bench/mpi.sh, $(nproc) cores, load average $(cut -d" " -f1-3 /proc/loadavg) at its start)"
echo
echo "MPI_Allreduce between 2 local ranks (median of 30):"
echo
# 0.2M parameters: the tiny GPT's gradient; then 1, 7 and 27 MiB (a GPT-2 small's 124M is 474 MiB)
mpirun --oversubscribe -np 2 build-mpi/bench/allreduce 212992 262144 1835008 7077888 | sed 's/^/    /'
echo
for n in 1 2; do
    mpirun --oversubscribe -np $n build-mpi/train $RUN --out "$T/$n" >"$T/log" 2>&1
    tok=$(tail -n 1 "$T/$n/metrics.csv" | cut -d, -f7)
    printf '%d rank(s), batch 32 x 64 tokens, 1 thread each: %s tok/s (the last step)\n' $n "$tok"
    grep "^done\|^mpi     rank" "$T/log" | sed 's/^/    /'
done
