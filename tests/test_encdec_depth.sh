#!/bin/sh
# scripts/encdec_depth.py on its tiny setting (1+1 and 2+2 layers, 20 steps, the dictionary's
# first 2,000 lines): every part writes its CSV with a row per run, and the report rebuilt from
# the CSVs has a cell for every placement and depth. Skipped without festlex-cmu.
T=$(mktemp -d /tmp/mt_test_encdec_depth_XXXXXX)
trap 'rm -rf "$T"' EXIT
[ -r /usr/share/festival/dicts/cmu/cmudict-0.4.out ] ||
    { echo "test_encdec_depth: skipped (festlex-cmu not installed)"; exit 0; }
fails=0
fail() { echo "FAIL test_encdec_depth: $*"; fails=$((fails + 1)); }
/usr/bin/python3 scripts/encdec_depth.py --tiny --dir "$T" >"$T/log" 2>&1 || fail "exit $?: $(tail -5 "$T/log")"
for k in 1 2; do
    [ "$(wc -l <"$T/csv/part$k.csv")" -eq 4 ] || fail "part $k: $(cat "$T/csv/part$k.csv")"
done
grep -q "^post,2,2,20," "$T/csv/part2.csv" || fail "part 2 rows: $(cat "$T/csv/part2.csv")"
for p in post pre deepnorm; do
    grep -Eq "^\| $p \| [0-9.]+% \| [0-9.]+% \|$" "$T/report.md" || fail "report row $p: $(grep "^| $p" "$T/report.md")"
done
python3 scripts/encdec_depth.py --list | grep -q "^part 4: deepnorm 50+50$" || fail "--list: $(python3 scripts/encdec_depth.py --list)"
[ $fails -eq 0 ] && echo "test_encdec_depth: ok"
[ $fails -eq 0 ]
