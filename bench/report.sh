#!/bin/sh
# make bench: what ./train --report costs a run and what its page weighs; prints a Markdown table.
#   1. the quickstart (configs/tiny-gpt.ini at its evaluation cadence) with --report and the
#      per-block diagnostics every 10 steps: the page's writes as a share of the run's time
#      (./train's own "report" line);
#   2. a 100-layer run of 3000 steps with every diagnostic every 20 steps (the block-skip probe
#      every 100, the model update for all 3000): report.html's size, and its load time in
#      headless chromium (tests/browser/check_report.mjs's loadMs: from the navigation's start to
#      the last panel drawn), the median of LOADS loads. The model is narrow (n_embd 32) so that
#      the run takes minutes: the page's size follows the steps and blocks, not the width.
# Environment: MT_BUILD (build dir), LOADS (5), DEEP_STEPS (3000). Goals: under 1% of the run,
# under 5 MB, under 2 s; a row past its goal is marked "over". Skips the load time where chromium
# or playwright-core (make deps-test) is absent.
set -e
B=${MT_BUILD:-build}
LOADS=${LOADS:-5}
DEEP_STEPS=${DEEP_STEPS:-3000}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export MT_NODE_MODULES=${MT_NODE_MODULES:-$PWD/build-node/node_modules}
export MT_CHROMIUM=${MT_CHROMIUM:-/usr/bin/chromium}

verdict() { # value goal: "ok" or "over"
    awk -v v="$1" -v g="$2" 'BEGIN { print (v < g ? "ok" : "over") }'
}

"$B/train" --config configs/tiny-gpt.ini --report --diag-grad-every 10 --diag-resid-every 10 \
    --diag-attn-every 10 --diag-update-ratio-every 10 --out "$T/quick" >"$T/quick.log"
share=$(sed -n 's/^report .*, \([0-9.]*\)% of the run$/\1/p' "$T/quick.log")
writes=$(sed -n 's/^report .*: \(.* s\), .*$/\1/p' "$T/quick.log")
steps=$(sed -n 's/^done: \([0-9]*\) steps in \([0-9:]*\),.*/\1 steps in \2/p' "$T/quick.log")

"$B/train" --n-layer 100 --n-head 2 --n-embd 32 --n-ctx 32 --batch 4 --steps "$DEEP_STEPS" \
    --eval-every 200 --log-every 10 --report --diag-grad-every 20 --diag-resid-every 20 \
    --diag-attn-every 20 --diag-logz-every 20 --diag-update-ratio-every 20 \
    --diag-skip-every 100 --diag-update-steps "$DEEP_STEPS" --out "$T/deep100" >"$T/deep.log"
page=$T/deep100/report.html
mb=$(awk -v b="$(wc -c <"$page")" 'BEGIN { printf "%.2f", b / 1048576 }')
load="(no chromium or playwright-core)" goal=-
if [ -x "$MT_CHROMIUM" ] && [ -d "$MT_NODE_MODULES/playwright-core" ]; then
    for i in $(seq "$LOADS"); do
        node tests/browser/check_report.mjs "$page" '["deep100"]' |
            sed -n 's/^{"loadMs":\([0-9]*\).*/\1/p' >>"$T/loads"
    done
    ms=$(sort -n "$T/loads" | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
    load="$ms ms (median of $LOADS: $(sort -n "$T/loads" | tr '\n' ' ' | sed 's/ $//'))"
    goal=$(verdict "$ms" 2000)
fi
echo "| measured | figure | goal |"
echo "|---|---|---|"
echo "| quickstart with --report ($steps), its page's writes | $writes, $share% of the run | under 1%: $(verdict "$share" 1) |"
echo "| 100 layers x $DEEP_STEPS steps, every diagnostic: report.html | $mb MB | under 5 MB: $(verdict "$mb" 5) |"
echo "| the same page's load in headless chromium | $load | under 2 s: $goal |"
