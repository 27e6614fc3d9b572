#!/bin/sh
# make test-aarch64: the tests of a cross build (BUILD, e.g. build-aarch64) under qemu-user.
# Without binfmt_misc a foreign binary cannot be executed directly, so $BUILD/qemu/ mirrors the
# build's programs, C tests and parity drivers as wrappers that run each under qemu-aarch64 (plain:
# -L would pair the cross loader with the multiarch libc, and a test then hangs in
# pthread_create), and tests/run.sh runs them as MT_BUILD (with the methods' list, methods.json,
# written by the wrapped scripts/methods). Ends "N passed, N failed".
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
MT_BUILD=$Q exec sh tests/run.sh $(ls "$Q"/tests/test_* | sort)
