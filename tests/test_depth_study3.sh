#!/bin/sh
# scripts/depth_study3.py's parts end to end at 3 layers and 20 steps (--smoke, into /tmp).
# Peri-LN: every run trains and is kept, the output gains set in the step-0 checkpoint reach the
# run (the stream entering the last block at init scales with the gain), the torch twin starts
# where mt's run starts (same weights; its probe batch is its own, so within 15%). lr-12, curse,
# dyt: every method of the table runs at every rate (./train accepts its flags), QK-norm bounds
# the attention logit that grows without it at 1e-1, z-loss changes the training loss, the skip
# probe and the gradient norms are kept per block, a second call runs nothing (the kept rows
# mark runs done), and the page has every part's tables. ngpt-steps: nGPT and its two controls
# at their best lr-12 rate, two seeds that differ, paired in the page's table. dyt-twin: the
# edits of the step-0 checkpoint reach the run (DyT's weight 8 multiplies the blocks' gradients
# at init by ~8), the saturation probe covers mt's checkpoints and the twin's steps, and the twin
# starts where mt starts: its block gradients and its stream entering the first block within 25%
# and 15% (the same weights; its own batch and probe batch). long: every method and seed kept, in
# the page; a run stopped after a checkpoint resumes from it and ends with the uninterrupted
# run's metrics. Skipped without Debian's python3-torch (the twin).
NAME=test_depth_study3
. "$(dirname "$0")/lib.sh"
has_torch || skip "$TORCH_MISSING"
S=$T/smoke # a directory of its own: two checkouts may run this test at once
for part in peri lr-12 ngpt-steps curse dyt dyt-twin long report; do
    python3 scripts/depth_study3.py $part --smoke --smoke-dir "$S" >>"$T/log" 2>&1 ||
        { fail "$part: $(tail -n 20 "$T/log")"; exit 1; }
done
# run again: every run has its row, nothing runs
python3 scripts/depth_study3.py lr-12 --smoke --smoke-dir "$S" >"$T/log" 2>&1 &&
    grep -q "lr-12: 0 runs to go" "$T/log" ||
    { fail "again: $(tail -n 20 "$T/log")"; exit 1; }
python3 - "$S" <<'PY'
import csv, json, os, sys
sys.path.insert(0, "scripts")
from depth_study3 import LONG, LONG_SEEDS, METHODS, RATES, STEPS_METHODS
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

def kept(part):
    d = os.path.join(sys.argv[1], "docs", part)
    return {r["name"]: r for r in (json.load(open(os.path.join(d, f))) for f in os.listdir(d)
                                   if f.endswith(".row.json"))}
lr = kept("lr-12")
bad = [n for n, r in lr.items() if r["label"] == "failed"]
if len(lr) != len(METHODS) * len(RATES) or bad:
    sys.exit("FAIL test_depth_study3: lr-12 kept %d runs of %d, failed: %s"
             % (len(lr), len(METHODS) * len(RATES), bad))
pre, qk = lr["pre-L12-lr1e-1"]["attn_peak"], lr["pre-qk-L12-lr1e-1"]["attn_peak"]
if not (qk < 10 and pre > 3 * qk):
    sys.exit("FAIL test_depth_study3: the largest attention logit at 1e-1: pre %g, pre-qk %g"
             % (pre, qk))
curve = lambda name: open(os.path.join(sys.argv[1], "docs/lr-12", name + ".csv")).read()
if curve("pre-z-L12-lr1e-2") == curve("pre-L12-lr1e-2"):
    sys.exit("FAIL test_depth_study3: z-loss left the training loss as it was")
for part, name, what, key, step in (("curse", "mixln-L100-lr1e-3", "skip", "block", 20),
                                    ("dyt", "derf-emb-L100-a0.5", "grad", "layer", 10)):
    r = kept(part)[name]
    rs = list(csv.DictReader(open(os.path.join(sys.argv[1], "docs", part, name + "." + what +
                                               ".csv"))))
    last = [x for x in rs if int(x["step"]) == step and int(x[key]) >= 0]
    if r["label"] == "failed" or len(last) != 3:
        sys.exit("FAIL test_depth_study3: %s %s: %s, %d blocks at step %d in its %s file"
                 % (part, name, r["label"], len(last), step, what))
# part 4: seeds 1 and 2 at 12 layers, seed 2 at 100 (seed 1 there is lr-100's run, not smoked),
# each method at its best lr-12 rate; the seeds differ; the table pairs them
steps = kept("ngpt-steps")
best = {m: min((r for n, r in lr.items() if n.rsplit("-L", 1)[0] == m),
               key=lambda r: r["val_final"])["lr"] for m in STEPS_METHODS}
want = ["%s-L12-lr%s-s%d" % (m, best[m], s) for m in best for s in (1, 2)]
want += ["%s-L100-lr1e-3-s2" % m for m in best]
if sorted(steps) != sorted(want) or any(r["label"] == "failed" for r in steps.values()):
    sys.exit("FAIL test_depth_study3: ngpt-steps kept %s, want %s" % (sorted(steps), want))
curve = lambda name: open(os.path.join(sys.argv[1], "docs/ngpt-steps", name + ".csv")).read()
if curve("ngpt-L12-lr%s-s1" % best["ngpt"]) == curve("ngpt-L12-lr%s-s2" % best["ngpt"]):
    sys.exit("FAIL test_depth_study3: nGPT's seeds 1 and 2 gave the same curve")
if "| 12 | 2 | pre | %s |" % best["pre"] not in page or "| 12 | 2 | llama |" not in page:
    sys.exit("FAIL test_depth_study3: the page lacks part 4's table")
for table in ("| pre-qk |", "| reorder-qk | `--placement reorder", "| 0.5 |",
              "| mixln-L100-lr1e-3 |"):
    if table not in page:
        sys.exit("FAIL test_depth_study3: the page lacks %r" % table)
def grad0(part, name, layer=0):
    for r in csv.DictReader(open(os.path.join(sys.argv[1], "docs", part, name + ".grad.csv"))):
        if int(r["step"]) == 0 and int(r["layer"]) == layer:
            return float(r["total"])
    sys.exit("FAIL test_depth_study3: no step-0 gradient of block %d in %s" % (layer, name))
base, g8 = grad0("dyt", "dyt-emb-L12-a0.5"), grad0("dyt-twin", "dyt-emb-L12-gamma8")
if not 4 < g8 / base < 16:
    sys.exit("FAIL test_depth_study3: block 0's gradient at init: %g with DyT's weight 8, %g "
             "with 1" % (g8, base))
mt, th = grad0("dyt-twin", "mt-dyt-emb-L12-a0.5"), grad0("dyt-twin", "torch-dyt-emb-L12-a0.5")
if abs(th / mt - 1) > 0.25:
    sys.exit("FAIL test_depth_study3: the twin's block-0 gradient at init %g, mt's %g" % (th, mt))
d = sys.argv[1] + "/docs/dyt-twin"
mt = at("mt-dyt-emb-L12-a0.5", 0, 0)
th = [float(r["norm"]) for r in csv.DictReader(open(d + "/torch-dyt-emb-L12-a0.5.csv"))
      if r["step"] == "0" and r["layer"] == "0"][0]
if abs(th / mt - 1) > 0.15:
    sys.exit("FAIL test_depth_study3: the twin's stream at init %g, mt's %g" % (th, mt))
for who, steps in (("mt", {0, 10, 20}), ("torch", {0, 10, 20})):
    sat = os.path.join(sys.argv[1], "docs/dyt-twin/%s-dyt-emb-L12-a0.5.sat.csv" % who)
    got = {int(r["step"]) for r in csv.DictReader(open(sat)) if r["site"] == "final_norm"}
    if got != steps:
        sys.exit("FAIL test_depth_study3: %s's saturation rows at steps %s" % (who, sorted(got)))
if "| dyt-emb-L12-gamma8 |" not in page or "mt's norms, site by site" not in page:
    sys.exit("FAIL test_depth_study3: the page lacks the dyt-twin tables")
# part 6: every method of LONG, both seeds, at the smoke's rate, in the page's table
long = kept("long")
want = sorted("%s-L100-lr1e-3-s%d" % (m, s) for m in LONG for s in LONG_SEEDS)
if sorted(long) != want or any(r["label"] == "failed" for r in long.values()):
    sys.exit("FAIL test_depth_study3: long kept %s, want %s" % (sorted(long), want))
if "## Long runs" not in page or "| dsl | 1e-3 |" not in page:
    sys.exit("FAIL test_depth_study3: the page lacks part 6's table")
# the per-run table: the control reaches its own final loss at its last evaluation, step 20
own = [l for l in page.splitlines() if l.startswith("| llama-L100-lr1e-3-s")]
if len(own) != 2 or not all(l.endswith("| 20 |") for l in own):
    sys.exit("FAIL test_depth_study3: part 6's per-run rows of llama: %s" % own)
print("test_depth_study3: ok")
PY
[ $? -eq 0 ] || exit 1
# part 6's runs resume: one stopped after its first checkpoint and run again ends with the
# uninterrupted run's losses, rates and gradient norms
python3 - "$S" <<'PY'
import os, subprocess, sys, threading, time
sys.path.insert(0, "scripts")
import depth_study3 as d
d.OUT, d.DOCS = sys.argv[1] + "/resume/out", sys.argv[1] + "/resume/docs"
flags = {"--n-layer": 3, "--warmup": 5, "--steps": 200, "--eval-every": 50, "--save-every": 20}
run = lambda name: d.Run("long", name, "pre", diag=flags, layers=3, resumable=True)
whole, part = run("whole").execute(), run("part")
t = threading.Thread(target=part.execute)
t.start()
ckpt = os.path.join(part.dir, "model.safetensors")
while t.is_alive() and d.ckpt_step(ckpt) < 20:
    time.sleep(0.005)
subprocess.run(["pkill", "-f", "out " + part.dir])
t.join()
stopped = d.ckpt_step(ckpt)
again = run("part").execute()
rows = lambda r: [l.split(",")[:5] for l in open(os.path.join(r.dir, "metrics.csv"))]
resumed = "resumed ->" in open(os.path.join(again.dir, "log.txt")).read()
if (whole.rc or part.rc == 0 or again.rc or not 0 < stopped < 200 or not resumed or
        rows(again) != rows(whole)):
    sys.exit("FAIL test_depth_study3: resume: rc %d, stopped (rc %d) at step %d, resumed %s "
             "(rc %d), %d rows against %d" % (whole.rc, part.rc, stopped, resumed, again.rc,
                                             len(rows(again)), len(rows(whole))))
print("test_depth_study3: resume ok (stopped at step %d)" % stopped)
PY
