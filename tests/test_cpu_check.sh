#!/bin/sh
# A build refuses to start on a CPU without an instruction set it was compiled for (naming the
# set and PORTABLE=1) instead of dying with SIGILL, and a PORTABLE=1 build trains on a Core 2:
# both under qemu-x86_64 (qemu-user) with an older CPU model. MT_BUILD names the build directory
# (default: build); the PORTABLE=1 build goes to build-portable.
NAME=test_cpu_check
. "$(dirname "$0")/lib.sh"

[ "$(uname -m)" = x86_64 ] && [ -e "$B/cpu_needs.h" ] && command -v qemu-x86_64 >/dev/null ||
    skip "needs an x86-64 machine and build, and qemu-x86_64 (make deps-test)"
case $B in *asan*) skip "under the sanitizers (qemu-user cannot map ASan's shadow memory)" ;; esac

# Nehalem (SSE4.2, no AVX): the build's first set it lacks, or a clean start where it needs none
if grep -q '"avx"' "$B/cpu_needs.h"; then
    qemu-x86_64 -cpu Nehalem "$B/train" --help >"$T/out" 2>"$T/err"
    rc=$?
    [ $rc -eq 1 ] || fail "on a Nehalem ./train --help exited $rc, expected 1: $(grep -v '^qemu' "$T/err")"
    grep -q "uses the CPU's avx instructions.*PORTABLE=1" "$T/err" ||
        fail "no message naming avx and PORTABLE=1: $(cat "$T/err")"
    [ -s "$T/out" ] && fail "printed to stdout before refusing: $(head -2 "$T/out")"
else
    skip_case Nehalem "the build needs no AVX (cpu_needs.h: $(cat "$B/cpu_needs.h"))"
fi

# PORTABLE=1 on a Core 2 (Conroe: SSSE3, no SSE4): three steps and a checkpoint that the native
# build reads. OPENBLAS_CORETYPE, where this machine sets it, names kernels that a Core 2 lacks.
make -s BUILD=build-portable PORTABLE=1 build-portable/train >"$T/make" 2>&1 ||
    { fail "make PORTABLE=1 failed"; tail -20 "$T/make"; }
head -c 20000 data/tinyshakespeare.txt >"$T/s.txt"
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE qemu-x86_64 -cpu Conroe build-portable/train \
    --data "$T/s.txt" --n-layer 1 --n-head 2 --n-embd 16 --n-ctx 16 --batch 4 --threads 1 \
    --steps 3 --eval-every 0 --out "$T/core2" >"$T/log" 2>&1 ||
    { fail "PORTABLE=1 ./train on a Core 2 exited $?"; grep -v '^qemu' "$T/log" | tail -5; }
"$B/infer" --checkpoint "$T/core2/model.safetensors" --score "$T/s.txt" >"$T/score" 2>&1 ||
    fail "the native build cannot read the Core 2's checkpoint: $(cat "$T/score")"

finish
