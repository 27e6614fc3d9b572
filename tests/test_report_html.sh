#!/bin/sh
# scripts/plot-runs --html and ./train --report as a reader sees them: the page of three real
# short runs (a learning-rate pair with every per-block diagnostic, a Sub-LN run without any)
# opened from file:// in headless Chromium (tests/browser/check_report.mjs: no console error or
# failed request, every panel drew, the legends name the runs); the page of a run whose
# metrics.csv ends mid-line (rewritten while the run goes on) still loads and says so; ./train
# --report's page is plot-runs' page of the run, loads while the run rewrites it, reloads itself
# until the run ends and says why a run stopped; an output that is an input, or a directory
# without metrics.csv, is refused with nothing written. Skips where chromium or playwright-core is absent
# (make deps-test installs both).
NAME=test_report_html
. "$(dirname "$0")/lib.sh"
NODE_MODULES=${MT_NODE_MODULES:-$PWD/build-node/node_modules}
CHROMIUM=${MT_CHROMIUM:-/usr/bin/chromium}
[ -x "$CHROMIUM" ] || skip "no $CHROMIUM (Debian's chromium: make deps-test)"
[ -d "$NODE_MODULES/playwright-core" ] ||
    skip "no playwright-core in $NODE_MODULES (make deps-test)"
[ -f /usr/share/javascript/chart.js/chart.min.js ] || skip "no libjs-chart.js (make deps)"
export MT_NODE_MODULES=$NODE_MODULES MT_CHROMIUM=$CHROMIUM
train() { "$B/train" --threads 1 "$@" >"$T/log" 2>&1 || fail "train $*: $(cat "$T/log")"; }
check() { # page, names JSON: check_report.mjs's verdict; its JSON line into $T/check.json
    node tests/browser/check_report.mjs "$1" "$2" >"$T/check.out" 2>&1 ||
        fail "$1: $(cat "$T/check.out")"
    grep '^{' "$T/check.out" >"$T/check.json"
}

head -c 60000 data/tinyshakespeare.txt >"$T/text.txt"
TINY="--data $T/text.txt --n-layer 3 --n-head 2 --n-embd 16 --n-ctx 16 --batch 4 --steps 16
      --eval-every 4 --eval-batches 1 --log-every 2"
DIAGS="--diag-grad-every 4 --diag-update-steps 4 --diag-resid-every 4 --diag-attn-every 4
       --diag-logz-every 4 --diag-skip-every 4 --diag-update-ratio-every 2 --diag-sink-every 4
       --diag-act-every 4"
train $TINY $DIAGS --lr 3e-3 --out "$T/lr-hi"
train $TINY $DIAGS --lr 1e-3 --out "$T/lr-lo"
train $TINY --placement subln --out "$T/subln"

out=$(python3 scripts/plot-runs "$T/lr-hi" "$T/lr-lo" "$T/subln" --html "$T/page.html" 2>&1) ||
    fail "plot-runs --html exited $?: $out"
[ -f "$T/compare.png" ] && fail "--html alone also wrote a PNG"
check "$T/page.html" '["lr-hi","lr-lo","subln"]'
for id in loss wall lr grad_norm tok_per_s update logz rate heat-grad heat-resid heat-attn \
    heat-sink heat-act heat-ratio heat-skip; do
    grep -q "\"$id\"" "$T/check.json" || fail "no panel $id: $(cat "$T/check.json")"
done
size=$(wc -c <"$T/page.html")
[ "$size" -lt 1000000 ] || fail "a page of $size bytes for three 16-step runs"

# a run being written: metrics.csv and diag_grad.csv end mid-line; the whole lines are shown
cp -r "$T/lr-hi" "$T/live"
printf '18,4.9' >>"$T/live/metrics.csv"
printf '20,1,0.1' >>"$T/live/diag_grad.csv"
out=$(python3 scripts/plot-runs "$T/live" --html "$T/live.html" 2>&1) ||
    fail "plot-runs of a run being written exited $?: $out"
echo "$out" | grep -q "live: metrics.csv: its last line is incomplete" ||
    fail "no word of the partial line: $out"
check "$T/live.html" '["live"]'
grep -q 'incomplete' "$T/check.json" || fail "the page does not say a line was left out"
grep -q '^18,4.9' "$T/live.html" && fail "the partial line was embedded"

# ./train --report: the same template filled the same way (all but the JSON line as plot-runs
# writes the page of the run), no reload once the run is done; hyper-connections' gains and
# QK-Clip's heads
train $TINY $DIAGS --residual hc --diag-hc-every 4 --qk-clip 0.5 --diag-qkclip-every 4 --lr 3e-3 \
    --report --out "$T/own"
grep -q "^report  $T/own/report.html: [0-9]* writes in [0-9.]* s" "$T/log" ||
    fail "no word of what the page cost: $(tail -2 "$T/log")"
check "$T/own/report.html" '["own"]'
grep -q '"live":0' "$T/check.json" || fail "the finished run's page reloads: $(cat "$T/check.json")"
for id in loss wall mfu heat-grad heat-resid heat-attn heat-sink heat-act heat-hc heat-qkclip \
    heat-ratio heat-skip; do
    grep -q "\"$id\"" "$T/check.json" || fail "--report: no panel $id: $(cat "$T/check.json")"
done
python3 scripts/plot-runs "$T/own" --html "$T/own.html" >"$T/log" 2>&1 || fail "$(cat "$T/log")"
grep -v 'id="mt-report">{' "$T/own.html" >"$T/a"
grep -v 'id="mt-report">{' "$T/own/report.html" >"$T/b"
cmp -s "$T/a" "$T/b" || fail "./train --report and plot-runs --html differ: $(diff "$T/a" "$T/b" | head -5)"

# a page rewritten while the run goes on loads, and reloads itself; the end stops the reloading
"$B/train" --threads 1 $TINY --steps 4000 --eval-every 100 --report --out "$T/going" \
    >"$T/going.log" 2>&1 &
pid=$!
i=0
until [ -f "$T/going/report.html" ] || [ $i -ge 300 ]; do sleep 0.1; i=$((i + 1)); done
cp "$T/going/report.html" "$T/mid.html" 2>/dev/null || fail "no report.html in 30 s"
check "$T/going/report.html" '["going"]'
wait $pid || fail "the run exited $?: $(cat "$T/going.log")"
grep -q '"live":[1-9]' "$T/mid.html" || fail "a page of a running run does not reload"
grep -q '"live":0' "$T/going/report.html" || fail "the finished run's page still reloads"
grep -q '^4000,' "$T/going/report.html" || fail "the last page lacks the last step"

# a diverged run's page says why it stopped; no chart library: refused before anything is written
"$B/train" --threads 1 $TINY --lr 1e9 --report --out "$T/diverged" >"$T/log" 2>&1 &&
    fail "lr 1e9 did not diverge"
grep -q 'the run stopped: step [0-9]*: the loss is' "$T/diverged/report.html" ||
    fail "the diverged run's page does not say why it stopped"
MT_CHARTJS=$T/none.js "$B/train" $TINY --report --out "$T/nochart" >"$T/err" 2>&1
[ $? -eq 2 ] && grep -q "libjs-chart.js" "$T/err" && [ ! -e "$T/nochart" ] ||
    fail "--report without a chart library: $(cat "$T/err")"

# refused, nothing written or overwritten
before=$(cksum <"$T/lr-hi/metrics.csv")
python3 scripts/plot-runs "$T/lr-hi" --html "$T/lr-hi/metrics.csv" >"$T/err" 2>&1
[ $? -eq 2 ] && grep -q "ending in .html" "$T/err" || fail "--html metrics.csv: $(cat "$T/err")"
mkdir "$T/x.html"
cp "$T/lr-hi/metrics.csv" "$T/x.html/"
python3 scripts/plot-runs "$T/x.html" --html "$T/x.html" >"$T/err" 2>&1
[ $? -eq 2 ] && grep -q "is the directory of the run" "$T/err" || fail "--html RUN: $(cat "$T/err")"
[ "$(cksum <"$T/lr-hi/metrics.csv")" = "$before" ] || fail "an input was changed"
mkdir "$T/empty"
python3 scripts/plot-runs "$T/empty" --html "$T/e.html" >"$T/err" 2>&1
[ $? -eq 2 ] && grep -q "no metrics.csv" "$T/err" && [ ! -e "$T/e.html" ] ||
    fail "a directory without metrics.csv: $(cat "$T/err")"
finish
