#!/bin/sh
# Every C file of the tree is as .clang-format formats it (clang-format 14, Debian's
# clang-format package: make deps-test installs it). Fix with
#   clang-format -i $(git ls-files '*.c' '*.h')
# Without clang-format or git (a tarball), the test says so and passes.
if ! command -v clang-format >/dev/null || ! git rev-parse --git-dir >/dev/null 2>&1; then
    echo "test_format: SKIPPED (needs clang-format and a git checkout)"
    exit 0
fi
files=$(git ls-files '*.c' '*.h')
if ! clang-format --dry-run --Werror $files 2>/tmp/mt_test_format.$$; then
    grep -E 'warning:|error:' /tmp/mt_test_format.$$ | head -20
    echo "FAIL test_format: $(grep -Ec 'warning:|error:' /tmp/mt_test_format.$$) line(s) differ from" \
        ".clang-format's layout (clang-format -i FILE fixes them)"
    rm -f /tmp/mt_test_format.$$
    exit 1
fi
rm -f /tmp/mt_test_format.$$
echo "test_format: ok ($(echo $files | wc -w) files)"
