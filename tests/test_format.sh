#!/bin/sh
# Every C file of the tree is as .clang-format formats it (clang-format 14, Debian's
# clang-format package: make deps-test installs it). Fix with
#   clang-format -i $(git ls-files '*.c' '*.h')
# Without clang-format or git (a tarball), the test says so and passes.
NAME=test_format
. "$(dirname "$0")/lib.sh"
command -v clang-format >/dev/null && git rev-parse --git-dir >/dev/null 2>&1 ||
    skip "needs clang-format and a git checkout"
files=$(git ls-files '*.c' '*.h')
if ! clang-format --dry-run --Werror $files 2>"$T/log"; then
    grep -E 'warning:|error:' "$T/log" | head -20
    fail "$(grep -Ec 'warning:|error:' "$T/log") line(s) differ from .clang-format's layout" \
        "(clang-format -i FILE fixes them)"
fi
echo "test_format: $(echo $files | wc -w) files"
finish
