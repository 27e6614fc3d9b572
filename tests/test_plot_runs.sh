#!/bin/sh
# scripts/plot-runs end to end: two tiny runs (one with the depth-study diagnostics, one without)
# plotted side by side into a PNG of sensible size, labelled by the options they differ in; a
# metrics.csv of the older format still plots; a directory holding no run, or none at all, is an
# error naming it (exit 2). MT_BUILD names the build directory (default: build).
NAME=test_plot_runs
. "$(dirname "$0")/lib.sh"
train() { "$B/train" --threads 1 "$@" >"$T/log" 2>&1 || fail "train $*: $(cat "$T/log")"; }
# the PNG signature, then a width and height (IHDR) above min: $1 png, $2 min width, $3 min height
png_ok() {
    [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || return 1
    w=$(od -An -tu1 -j16 -N4 "$1" | awk '{ print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4 }')
    h=$(od -An -tu1 -j20 -N4 "$1" | awk '{ print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4 }')
    [ "$w" -ge "$2" ] && [ "$h" -ge "$3" ]
}
command -v gnuplot >/dev/null || { fail "gnuplot missing (make deps)"; exit 1; }

head -c 60000 data/tinyshakespeare.txt >"$T/text.txt"
TINY="--data $T/text.txt --n-layer 2 --n-head 2 --n-embd 16 --n-ctx 16 --batch 4 --steps 12
      --eval-every 4 --eval-batches 1 --log-every 2"
train $TINY --placement pre --out "$T/pre-run" --diag-grad-every 4 --diag-update-steps 4 \
    --diag-resid-every 4
train $TINY --placement subln --lr 1e-3 --out "$T/subln-run"

out=$(python3 scripts/plot-runs "$T/pre-run" "$T/subln-run" -o "$T/compare.png" 2>&1) ||
    fail "plot-runs exited $?: $out"
echo "$out" | grep -q "2 runs, 7 panels" || fail "panels: $out"
[ -f "$T/compare.png" ] && png_ok "$T/compare.png" 1000 1000 || fail "not a PNG of sensible size"
size=$(wc -c <"$T/compare.png")
[ "$size" -gt 20000 ] && [ "$size" -lt 2000000 ] || fail "PNG of $size bytes"

# the labels: each run's directory and the options that differ (not --out), init resolved
python3 - "$T" <<'EOF' || fail "labels"
import importlib.machinery, importlib.util, sys
loader = importlib.machinery.SourceFileLoader("plot_runs", "scripts/plot-runs")
spec = importlib.util.spec_from_loader("plot_runs", loader)
m = importlib.util.module_from_spec(spec)
loader.exec_module(m)
runs = [m.Run(sys.argv[1] + "/pre-run"), m.Run(sys.argv[1] + "/subln-run")]
m.label_runs(runs)
want = ["pre-run: lr=0.003 diag-grad-every=4 diag-update-steps=4 diag-resid-every=4 "
        "placement=pre (Pre-LN) init=auto (gpt2)",
        "subln-run: lr=0.001 diag-grad-every=0 diag-update-steps=0 diag-resid-every=0 "
        "placement=subln (Sub-LN) init=auto (subln)"]
got = [r.label for r in runs]
if got != want:
    sys.exit("labels %s, expected %s" % (got, want))
EOF

# issue 29's diagnostics and methods: LNS with DyT, QK-norm and the z-loss writing diag_attn.csv,
# diag_logz.csv and diag_skip.csv, against Mix-LN (its default -1: a quarter of 2 blocks, 0)
train $TINY --placement lns --norm dyt --qk-norm rms --z-loss 1e-4 --out "$T/lns-run" \
    --diag-attn-every 4 --diag-logz-every 4 --diag-skip-every 4
train $TINY --placement mixln --out "$T/mixln-run"
out=$(python3 scripts/plot-runs "$T/lns-run" "$T/mixln-run" -o "$T/new.png" 2>&1) ||
    fail "plot-runs exited $?: $out"
echo "$out" | grep -q "2 runs, 7 panels" || fail "panels of the new diagnostics: $out"
png_ok "$T/new.png" 1000 1000 || fail "new diagnostics: not a PNG of sensible size"
# the labels name the methods; the panels hold the files' numbers: the largest self-attention
# logit over the blocks per step, log Z's mean and max per step, each block's loss increase at
# the first and last step measured (read here with csv, not with mtrun)
python3 - "$T" <<'EOF' || fail "new diagnostics' labels or panels"
import csv, importlib.machinery, importlib.util, os, sys, tempfile
loader = importlib.machinery.SourceFileLoader("plot_runs", "scripts/plot-runs")
spec = importlib.util.spec_from_loader("plot_runs", loader)
m = importlib.util.module_from_spec(spec)
loader.exec_module(m)
T = sys.argv[1]
runs = [m.Run(T + "/lns-run"), m.Run(T + "/mixln-run")]
m.label_runs(runs)
want = ["lns-run: diag-attn-every=4 diag-logz-every=4 diag-skip-every=4 norm=dyt (DyT) "
        "qk-norm=rms (QK-RMSNorm) placement=lns (LNS) z-loss=0.0001 mixln-post=-1",
        "mixln-run: diag-attn-every=0 diag-logz-every=0 diag-skip-every=0 norm=ln (LayerNorm) "
        "qk-norm=none (off) placement=mixln (Mix-LN) z-loss=0 (off) mixln-post=-1 (0)"]
got = [r.label for r in runs]
if got != want:
    sys.exit("labels %s, expected %s" % (got, want))
rows = lambda name: list(csv.DictReader(open(os.path.join(T, "lns-run", name))))
attn, logz, skip = rows("diag_attn.csv"), rows("diag_logz.csv"), rows("diag_skip.csv")
steps = sorted({int(r["step"]) for r in attn})
want_attn = [[s, max(float(r["self"]) for r in attn if int(r["step"]) == s)] for s in steps]
want_mean = [[int(r["step"]), float(r["mean"])] for r in logz]
want_max = [[int(r["step"]), float(r["max"])] for r in logz]
last = max(int(r["step"]) for r in skip)
want_first = [[int(r["block"]), float(r["delta"])] for r in skip
              if r["step"] == "0" and r["block"] != "-1"]
want_last = [[int(r["block"]), float(r["delta"])] for r in skip
             if int(r["step"]) == last and r["block"] != "-1"]
with tempfile.TemporaryDirectory() as tmp:
    panels = {p.title.split("(")[1].split(")")[0]: p for p in m.build_panels(runs, m.Plot(tmp))
              if "diag_" in p.title}
    data = lambda p, k: [[float(x) for x in l.split()] for l in open(panels[p].curves[k][0])]
    close = lambda a, b: len(a) == len(b) and all(
        x[0] == y[0] and abs(x[1] - y[1]) <= 1e-6 * max(1, abs(y[1])) for x, y in zip(a, b))
    checks = {"diag_attn.csv": [want_attn], "diag_logz.csv": [want_mean, want_max],
              "diag_skip.csv": [want_first, want_last]}
    for p, curves in checks.items():
        if p not in panels or len(panels[p].curves) != len(curves):
            sys.exit("panel %s: %s" % (p, sorted(panels)))
        for k, w in enumerate(curves):
            if not close(data(p, k), w):
                sys.exit("panel %s curve %d: %s, expected %s" % (p, k, data(p, k), w))
    if len(want_attn) != 4 or len(want_last) != 2 or last != 12:
        sys.exit("diagnostics' rows: attn %s, skip at %d %s" % (want_attn, last, want_last))
EOF

# a metrics.csv of the older format (no elapsed_s, no checkpoint) plots, its wall time estimated
mkdir "$T/old"
cut -d, -f1-7 "$T/subln-run/metrics.csv" >"$T/old/metrics.csv"
out=$(python3 scripts/plot-runs "$T/old" "$T/pre-run" -o "$T/old.png" 2>&1) || fail "old: $out"
png_ok "$T/old.png" 1000 500 || fail "old format: not a PNG"

# a directory without a run, a missing one, no argument: exit 2 naming the culprit, no PNG
mkdir "$T/empty"
out=$(python3 scripts/plot-runs "$T/pre-run" "$T/empty" -o "$T/bad.png" 2>&1)
rc=$?
[ $rc -eq 2 ] || fail "empty directory: exit $rc"
echo "$out" | grep -q "$T/empty: holds no run: no metrics.csv" || fail "empty directory: $out"
[ ! -e "$T/bad.png" ] || fail "a PNG written for a bad directory"
out=$(python3 scripts/plot-runs "$T/nowhere" 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "$T/nowhere: no such directory" || fail "missing: $out"
python3 scripts/plot-runs >/dev/null 2>&1
[ $? -eq 2 ] || fail "no argument accepted"

finish
