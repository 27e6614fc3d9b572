# Sourced by the MPI tests (tests/test_mpi.sh, tests/test_zero.sh) with NAME set to the test's
# name: tests/lib.sh's preamble, skips the test where mpicc or mpirun is missing (need_mpi),
# builds build-mpi/train, and defines mpi RANKS FLAGS... (./train under mpirun, one thread a
# rank, its output in $T/log), a 60 KB slice of tiny Shakespeare in $T/text.txt and $TINY, a
# 2-layer GPT's flags on it.
. "$(dirname "$0")/lib.sh"
need_mpi
# a make of ours (make test, make asan) must not pass its variables to this build
MAKEFLAGS= MFLAGS= make -s MPI=1 build-mpi/train >/dev/null || { fail "make MPI=1"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpi() { # ranks, flags...
    n=$1
    shift
    mpirun --allow-run-as-root --oversubscribe -np "$n" build-mpi/train --threads 1 --bucket-kb 16 \
        "$@" >"$T/log" 2>&1
}

head -c 60000 data/tinyshakespeare.txt >"$T/text.txt"
TINY="--data $T/text.txt --n-layer 2 --n-head 2 --n-embd 32 --n-ctx 32 --batch 8 --lr 3e-3
      --warmup 5 --schedule const --eval-every 5 --eval-batches 2 --log-every 1"
