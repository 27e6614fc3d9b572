#!/bin/sh
# scripts/depth_study4.py's parts end to end at 6 layers and 20 steps (--smoke, into /tmp): every
# run of every part trains and is kept (no run fails: ./train accepts each method's flags), the
# diagnostics each part reads are kept (HC's and mHC's composite gains, mHC's at 1; the sink,
# logit and activation summaries; QK-Clip's heads clipped), a second call runs nothing (the kept
# rows mark runs done), and the page has every part's section and figures.
NAME=test_depth_study4
. "$(dirname "$0")/lib.sh"
S=$T/smoke
# completep's other grids with one method alone (completep; the Muon grid has only the controls)
for part in hc completep "completep-100 --only completep" "completep-muon --only deepnorm" \
    "completep-seed2 --only completep" gate qkclip hc-100 value report; do
    python3 scripts/depth_study4.py $part --smoke --smoke-dir "$S" >>"$T/log" 2>&1 ||
        { fail "$part: $(tail -n 20 "$T/log")"; exit 1; }
done
python3 scripts/depth_study4.py gate --smoke --smoke-dir "$S" >"$T/log" 2>&1 &&
    grep -q "gate: 0 runs to go" "$T/log" || fail "again: $(tail -n 5 "$T/log")"
python3 - "$S" <<'PY' || fail "the kept files"
import csv, json, os, re, sys
sys.path.insert(0, "scripts")
import depth_study4 as ds
docs = sys.argv[1] + "/docs"
for part, spec in ds.PARTS.items():
    for run in spec["runs"](part):
        alone = "deepnorm" if part == "completep-muon" else "completep"
        if part.startswith("completep-") and run.method != alone:
            continue
        stem = os.path.join(docs, part, run.name)
        row = json.load(open(stem + ".row.json"))
        assert row["label"] != "failed", (part, run.name, row)
        if "--residual" in run.method_flags and part == "hc":
            gains = [float(r["composite_gain"]) for r in csv.DictReader(open(stem + ".hc.csv"))]
            assert gains and (run.method != "mhc" or max(abs(g - 1) for g in gains) < 1e-4), gains
        if part == "gate":
            for what in ("sink", "attn", "act"):
                assert os.path.getsize(stem + ".%s.csv" % what) > 20, (stem, what)
        if part == "qkclip" and run.method == "muon-clip":
            assert "qk_clipped" in row, row
page = open(sys.argv[1] + "/docs.md").read()
for title in ("Hyper-connections and mHC", "CompleteP", "Gated attention", "QK-Clip under Muon",
              "at 100 layers", "Value residuals"):
    assert "## " in page and title in page, title
assert " / " in page, "seeds 1 and 2 in one cell"
for png in ("hc-gain.png", "completep-rates.png", "gate-rates.png", "qkclip-logits.png"):
    assert os.path.getsize(os.path.join(docs, png)) > 1000, png
for png in re.findall(r"!\[[^]]*\]\(([^)]+)\)", page):  # every figure the page shows is there
    assert os.path.getsize(os.path.join(sys.argv[1], png)) > 1000, png
PY
finish
