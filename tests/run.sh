#!/bin/sh
# Runs every C test program given as an argument, every shell test (tests/test_*.sh), then
# every PyTorch parity script
# (tests/parity/test_*.py, with Debian's /usr/bin/python3), and ends with the line
# "N passed, N failed" (", N skipped" when torch is missing and parity could not run).
# MT_LEAVE_OUT: names of tests not to run (make test-fast's slow ones).
NAME=run
. "$(dirname "$0")/lib.sh"
pass=0 fail=0 skip=0 failed=""
# The CPU seconds (user + system) of this shell's finished children: `times` (a builtin) in
# this shell, not in the subshell of a $(...), which has no children of its own.
children_cpu() {
    times >"$T/times"
    awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/); print 60 * (u[1] + s[1]) + u[2] + s[2] }' "$T/times"
}
# Each test's line: its wall seconds, and its CPU seconds, which a loaded machine inflates far
# less (make test-fast's tier is sized by them).
run() { # name, command...
    name=$1
    shift
    start=$(date +%s)
    children_cpu >"$T/cpu0"
    if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); failed="$failed $name"; fi
    children_cpu >"$T/cpu1"
    echo "  ($name: $(($(date +%s) - start)) s, $(paste "$T/cpu1" "$T/cpu0" | awk '{ printf "%.1f", $1 - $2 }') s CPU)"
}
left_out() { case " $MT_LEAVE_OUT " in *" $(basename "$1") "*) true ;; *) false ;; esac; }
for t in "$@"; do left_out "$t" || run "$(basename "$t")" "$t"; done
for t in tests/test_*.sh; do [ -e "$t" ] && ! left_out "$t" && run "$(basename "$t")" sh "$t"; done
if has_torch; then
    for p in tests/parity/test_*.py; do
        [ -e "$p" ] && ! left_out "$p" && run "$(basename "$p")" /usr/bin/python3 "$p"
    done
else
    for p in tests/parity/test_*.py; do [ -e "$p" ] && skip=$((skip + 1)); done
    echo "SKIPPED $skip parity test(s): $TORCH_MISSING"
fi
[ -n "$MT_LEAVE_OUT" ] && echo "left out (make test runs them): $MT_LEAVE_OUT"
[ -n "$failed" ] && echo "failed:$failed"
if [ "$skip" -gt 0 ]; then echo "$pass passed, $fail failed, $skip skipped"
else echo "$pass passed, $fail failed"; fi
[ "$fail" -eq 0 ]
