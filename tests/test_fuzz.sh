#!/bin/sh
# A short run of every libFuzzer target (the long runs are `make fuzz`); skipped, and said so,
# where clang's fuzzer runtime is missing (make deps-test installs it).
if ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' |
    clang -fsanitize=fuzzer -x c - -o /tmp/mt_fuzz_probe.$$ 2>/dev/null; then
    echo "test_fuzz: SKIPPED (no clang with libFuzzer; apt-get install clang libclang-rt-14-dev)"
    exit 0
fi
rm -f /tmp/mt_fuzz_probe.$$
make -s -j2 fuzz FUZZ_SECONDS="${MT_FUZZ_SECONDS:-15}" >/tmp/mt_fuzz.$$ 2>&1
rc=$?
cat /tmp/mt_fuzz.$$ | grep -vE "^(clang|  )" | tail -20
rm -f /tmp/mt_fuzz.$$
[ $rc -eq 0 ] && echo "test_fuzz: ok" || echo "test_fuzz: a fuzzer found a crash (see build-fuzz/*.log)"
exit $rc
