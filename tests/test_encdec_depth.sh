#!/bin/sh
# scripts/encdec_depth.py --smoke (1+1, 2+2 and 3+3 layers of width 16, 40 steps, the dictionary's
# first 2,000 lines): every part keeps each run's curves, model update and summary row and writes
# its CSV; the page rebuilt from the kept files has a cell for every placement and depth, the
# figures and the notes; --reuse runs only the runs without a kept row. Skipped without
# festlex-cmu.
NAME=test_encdec_depth
. "$(dirname "$0")/lib.sh"
has_cmudict || skip "$CMU_MISSING"
S="scripts/encdec_depth.py --smoke --dir $T"
D="$T/docs"
python3 $S >"$T/log" 2>&1 || fail "exit $?: $(tail -5 "$T/log")"
[ "$(wc -l <"$D/part1.csv")" -eq 17 ] || fail "part 1: $(cat "$D/part1.csv")"
for k in 2 3; do
    [ "$(wc -l <"$D/part$k.csv")" -eq 5 ] || fail "part $k: $(cat "$D/part$k.csv")"
done
grep -Eq "^post,50,50,2,(trained|stalled|diverged),40," "$D/part3.csv" &&
    grep -Eq "^post-xavier,50,50,2,(trained|stalled|diverged),40," "$D/part3.csv" ||
    fail "part 3 rows: $(cat "$D/part3.csv")"
for p in post pre deepnorm post-xavier; do
    for d in 6 18 50; do
        for s in 1 2; do
            r="$D/$p-$d+$d-s$s"
            head -n 1 "$r.csv" | grep -q "^step,loss,val_loss,wer,per,grad_norm$" || fail "$r.csv header"
            [ "$(wc -l <"$r.csv")" -eq 5 ] || fail "$r.csv: a row every 10 of 40 steps: $(cat "$r.csv")"
            grep -Eq "^40,[0-9.]+,[0-9.]+,[0-9.]+,[0-9.]+," "$r.csv" || fail "$r.csv: no final evaluation"
            [ "$(wc -l <"$r.update.csv")" -eq 12 ] || fail "$r.update.csv: steps 0..10: $(cat "$r.update.csv")"
            [ -s "$r.row.json" ] || fail "no $r.row.json"
        done
    done
done
for p in Post-LN Pre-LN DeepNorm "Post-LN, Xavier init"; do
    [ "$(grep -Ec "^\| $p \| [0-9.]+%? \([0-9.]+%?\)[a-z ,]* \| [0-9.]+%? \([0-9.]+%?\)[a-z ,]* \| [0-9.]+%? \([0-9.]+%?\)[a-z ,]* \|$" "$T/report.md")" -eq 3 ] ||
        fail "report: the val loss, WER and PER rows of $p: $(grep "^| $p |" "$T/report.md")"
done
for f in loss-6.png loss-18.png loss-50.png update-6.png update-18.png update-50.png; do
    [ -s "$D/$f" ] && grep -q "($(basename "$D")/$f)" "$T/report.md" || fail "figure $f"
done
# the notes are included; --reuse runs nothing when every row is kept, one run when one is missing
echo "## Reading (hand-written)" >"$T/report.notes.md"
rm "$D/pre-18+18-s2.row.json"
python3 $S --reuse >"$T/log2" 2>&1 || fail "--reuse: exit $?: $(tail -5 "$T/log2")"
grep -q "^part 1: 16 runs, 15 kept, 1 to run" "$T/log2" || fail "--reuse part 1: $(grep '^part 1' "$T/log2")"
grep -q "^part 2: 4 runs, 4 kept, 0 to run" "$T/log2" || fail "--reuse part 2: $(grep '^part 2' "$T/log2")"
[ "$(grep -c "^  [a-z]*-" "$T/log2")" -eq 1 ] || fail "--reuse ran: $(grep "^  " "$T/log2")"
tail -n 1 "$T/report.md" | grep -q "^## Reading (hand-written)$" || fail "notes: $(tail -n 2 "$T/report.md")"
L=$(python3 scripts/encdec_depth.py --list)
echo "$L" | grep -q "^part 2: post-50+50-s1, pre-50+50-s1, deepnorm-50+50-s1, post-xavier-50+50-s1$" || fail "--list: $L"
python3 scripts/encdec_depth.py --part 9 2>"$T/err" && fail "--part 9 accepted"
grep -q "parts are 1 to 3" "$T/err" || fail "--part 9: $(cat "$T/err")"
# a run that trained below the unigram line but gets no word right is stalled (source ignored)
R=$(cd scripts && python3 -c 'from encdec_depth import relabel
print(*(relabel({"label": l, "wer": w})["label"] for l, w in
        (("trained", "1.000000"), ("trained", "0.74"), ("diverged", "1"), ("trained", ""))))')
[ "$R" = "stalled trained diverged trained" ] || fail "relabel: $R"
finish
