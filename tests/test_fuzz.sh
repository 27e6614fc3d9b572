#!/bin/sh
# A short run of every libFuzzer target (the long runs are `make fuzz`); skipped, and said so,
# where clang's fuzzer runtime is missing (make deps-test installs it).
NAME=test_fuzz
. "$(dirname "$0")/lib.sh"
echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' |
    clang -fsanitize=fuzzer -x c - -o "$T/probe" 2>/dev/null ||
    skip "no clang with libFuzzer (apt-get install clang libclang-rt-14-dev)"
make -s -j2 fuzz FUZZ_SECONDS="${MT_FUZZ_SECONDS:-15}" >"$T/log" 2>&1 ||
    fail "a fuzzer found a crash (see build-fuzz/*.log)"
grep -vE "^(clang|  )" "$T/log" | tail -20
finish
