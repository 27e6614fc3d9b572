#!/bin/sh
# make test-aarch64: the tests of a cross build (BUILD, e.g. build-aarch64) under qemu-user.
# Without binfmt_misc a foreign binary cannot be executed directly, so $BUILD/qemu/ mirrors the
# build's programs, C tests and parity drivers as wrappers that run each under qemu-aarch64 (plain:
# -L would pair the cross loader with the multiarch libc, and a test then hangs in
# pthread_create), and tests/run.sh runs them as MT_BUILD (with the methods' list, methods.json,
# written by the wrapped scripts/methods). Ends "N passed, N failed". Left out: the tests that run
# no program of the build (native builds, ./train, scripts: fuzzing, MPI, the x86 CPU check, the
# format, links, study and dictionary scripts), which make test runs.
set -eu
B=$1
Q=$B/qemu
rm -rf "$Q"
for f in "$B"/train "$B"/infer "$B"/export "$B"/preview "$B"/tests/test_* "$B"/tests/parity/*_driver \
    "$B"/scripts/methods; do
    case $f in *.d | *.o | *.valgrind) continue ;; esac
    [ -x "$f" ] || continue
    w=$Q/${f#"$B"/}
    mkdir -p "$(dirname "$w")"
    printf '#!/bin/sh\nexec qemu-aarch64 %s "$@"\n' "$(realpath "$f")" >"$w"
    chmod +x "$w"
done
"$Q"/scripts/methods >"$Q"/methods.json
NATIVE="test_fuzz.sh test_mpi.sh test_mpi_net.sh test_cpu_check.sh test_format.sh test_links.sh
        test_depth_study.sh test_depth_study3.sh test_encdec_depth.sh test_scale.sh test_gcide.sh
        test_deps.sh"
MT_BUILD=$Q MT_LEAVE_OUT=$(echo $NATIVE ${MT_LEAVE_OUT:-}) exec sh tests/run.sh $(ls "$Q"/tests/test_* | sort)
