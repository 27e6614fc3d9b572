#!/bin/sh
# scripts/depth_study3.py's Peri-LN part end to end at 3 layers and 20 steps (--smoke, into /tmp):
# every run trains and is kept, the output gains set in the step-0 checkpoint reach the run (the
# stream entering the last block at init scales with the gain), the torch twin starts where mt's
# run starts (same weights; its probe batch is its own, so within 15%), and the page has the
# tables. Skipped without Debian's python3-torch (the twin).
if ! /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
    echo "SKIPPED test_depth_study3: /usr/bin/python3 cannot import torch (make deps-test)"
    exit 0
fi
S=/tmp/mt-depth-study-3-smoke
rm -rf "$S"
trap 'rm -rf "$S"' EXIT
python3 scripts/depth_study3.py peri --smoke >"$S.log" 2>&1 &&
    python3 scripts/depth_study3.py report --smoke >>"$S.log" 2>&1 ||
    { echo "FAIL test_depth_study3: $(tail -n 20 "$S.log")"; rm -f "$S.log"; exit 1; }
rm -f "$S.log"
python3 - "$S" <<'PY'
import csv, json, os, sys
d = sys.argv[1] + "/docs/peri"
def at(name, step, layer=2):
    for r in csv.DictReader(open(os.path.join(d, name + ".resid.csv"))):
        if int(r["step"]) == step and int(r["layer"]) == layer:
            return float(r["norm"])
    sys.exit("FAIL test_depth_study3: no step %d layer %d in %s" % (step, layer, name))
rows = [json.load(open(os.path.join(d, f))) for f in os.listdir(d) if f.endswith(".row.json")]
bad = [r["name"] for r in rows if r["label"] == "failed"]
if len(rows) != 6 or bad:
    sys.exit("FAIL test_depth_study3: %d runs kept, failed: %s" % (len(rows), bad))
g1, g01 = at("peri-L100-lr1e-3", 0), at("peri-L100-lr1e-3-gain0.1", 0)
if not 0.05 < g01 / g1 < 0.15:
    sys.exit("FAIL test_depth_study3: gain 0.1 gives %.3f at init against %.3f" % (g01, g1))
t0 = at("torch-peri-L100-lr1e-3", 0)
if abs(t0 / g1 - 1) > 0.15:
    sys.exit("FAIL test_depth_study3: the twin starts at %.3f, mt at %.3f" % (t0, g1))
page = open(sys.argv[1] + "/docs.md").read()
if "| peri-L100-lr1e-3-gain0.1 |" not in page or "| 20 |" not in page:
    sys.exit("FAIL test_depth_study3: the page lacks its tables:\n" + page)
print("test_depth_study3: ok")
PY
