#!/bin/sh
# OpenBLAS's kernels match the CPU: where OpenBLAS does not know an AVX2 CPU and would run its
# Prescott (SSE3) kernels, a program of mt sets OPENBLAS_CORETYPE and starts again (gemm.c,
# openblas_own_kernels); a set OPENBLAS_CORETYPE is kept. MT_BUILD names the build directory.
NAME=test_openblas_core
. "$(dirname "$0")/lib.sh"

[ "$(uname -m)" = x86_64 ] && [ -x "$B/bench/sgemm" ] ||
    skip "needs an x86-64 machine and $B/bench/sgemm (make $B/bench/sgemm)"
grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo ||
    skip "this CPU has no AVX2 and FMA, so no OpenBLAS kernels newer than its own pick"
core() { env "$@" "$B/bench/sgemm" 64 1 1 | sed -n 's/.*"blas_core": "\([^"]*\)".*/\1/p'; }
c=$(core -u OPENBLAS_CORETYPE)
case $c in Haswell | Zen | SkylakeX | Cooperlake | SapphireRapids | Excavator) ;;
*) fail "on an AVX2 CPU OpenBLAS runs '$c' kernels, expected AVX2 or AVX-512 ones" ;; esac
c=$(core OPENBLAS_CORETYPE=Prescott)
[ "$c" = Prescott ] || fail "OPENBLAS_CORETYPE=Prescott was replaced by '$c'"
finish
