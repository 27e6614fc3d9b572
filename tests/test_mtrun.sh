#!/bin/sh
# scripts/mtrun.py, the study scripts' shared module: a tiny ./train run with the diagnostics read
# back into typed rows (metrics.csv: steps, evaluations, empty cells as None; diag_grad.csv: each
# block's total is the root of its four parts' squares, the layer -1 row has a total only;
# diag_update.csv starts at 0; diag_resid.csv has n_layer + 1 rows a step; diag_attn.csv a self
# logit per block and no cross; diag_logz.csv mean <= max; diag_skip.csv the whole model's row and
# a row per block, delta = loss - the whole model's), an older metrics.csv,
# a row being written, a malformed cell (an error naming file, line and column), val_<metric>
# columns; run() with its exit status, log and timeout; flags(), copy_columns(), scores(),
# log_field(), diverged_at(), progress_evals(), label() and byte_entropy() on known inputs.
# MT_BUILD names the build directory (default: build).
NAME=test_mtrun
. "$(dirname "$0")/lib.sh"
head -c 60000 data/tinyshakespeare.txt >"$T/text.txt"
"$B/train" --threads 1 --data "$T/text.txt" --n-layer 3 --n-head 2 --n-embd 16 --n-ctx 16 \
    --batch 4 --steps 12 --eval-every 4 --eval-batches 1 --log-every 2 --diag-grad-every 4 \
    --diag-update-steps 4 --diag-resid-every 4 --diag-attn-every 4 --diag-logz-every 4 \
    --diag-skip-every 4 --out "$T/run" >"$T/log" 2>&1 ||
    { fail "train: $(cat "$T/log")"; exit 1; }
exec python3 - "$T" <<'EOF'
import math, os, sys
sys.path.insert(0, "scripts")
import mtrun as m

T = sys.argv[1]
fails = []


def check(what, ok):
    if not ok:
        fails.append(what)
        print("FAIL test_mtrun: " + what)


# ./train's files, typed
r = m.RunDir(os.path.join(T, "run"))
check("metrics steps %s" % [x.step for x in r.metrics], [x.step for x in r.metrics] ==
      [2, 4, 6, 8, 10, 12])
check("evaluations", [x.step for x in m.evals(r.metrics)] == [4, 8, 12])
check("no val_loss off evaluations", all(x.val_loss is None for x in r.metrics if x.step % 4))
check("types", all(isinstance(x.step, int) and isinstance(x.loss, float) and
                   isinstance(x.elapsed_s, float) and x.val == {} for x in r.metrics))
check("final_val", m.final_val(r.metrics) == r.metrics[-1].val_loss and
      m.final_val(r.metrics[:1]) != m.final_val(r.metrics[:1]))
check("text kept as written", r.metrics[-1].text["val_loss"] == "%.6f" % r.metrics[-1].val_loss)
steps = sorted({g.step for g in r.grad})
check("grad steps %s" % steps, steps == [0, 4, 8])
for s in steps:
    rows = [g for g in r.grad if g.step == s]
    check("grad layers at %d" % s, [g.layer for g in rows] == [0, 1, 2, -1])
    check("grad rest row", rows[-1].attn is None and rows[-1].ffn_norm is None and
          rows[-1].total > 0)
    for g in rows[:-1]:
        parts = math.sqrt(g.attn_norm ** 2 + g.attn ** 2 + g.ffn_norm ** 2 + g.ffn ** 2)
        check("grad total of layer %d at %d" % (g.layer, s), abs(parts - g.total) <= 1e-6 * g.total)
check("update %s" % r.update, [u.step for u in r.update] == [0, 1, 2, 3, 4] and
      r.update[0].update == 0 and r.update[-1].update > 0)
check("resid", [(x.step, x.layer) for x in r.resid[:4]] == [(0, 0), (0, 1), (0, 2), (0, 3)] and
      len(r.resid) == 4 * len({x.step for x in r.resid}) and all(x.norm > 0 for x in r.resid))
check("attn %s" % r.attn[:4], [(x.step, x.layer) for x in r.attn] ==
      [(s, l) for s in (0, 4, 8, 12) for l in range(3)] and
      all(isinstance(x.self, float) and x.cross is None for x in r.attn))
check("logz %s" % r.logz, [z.step for z in r.logz] == [0, 4, 8, 12] and
      all(0 < z.mean <= z.max for z in r.logz))
check("skip steps", [(k.step, k.block) for k in r.skip] ==
      [(s, b) for s in (0, 4, 8, 12) for b in (-1, 0, 1, 2)])
for k in r.skip:
    whole = [w.loss for w in r.skip if w.step == k.step and w.block == -1][0]
    check("skip delta at %d block %d" % (k.step, k.block), isinstance(k.block, int) and
          abs(k.delta - (k.loss - whole)) <= 1e-5 * whole and (k.block >= 0 or k.delta == 0))

# an older file, a row being written, val_<metric> columns, errors
old = os.path.join(T, "old.csv")
with open(old, "w") as f:
    f.write("step,loss,val_loss,lr,grad_norm,ms,tok_per_s\n5,2.5,,0.001,1.5,10.0,100.0\n"
            "10,2.000000,2.25,0.001,nan,10.0,100.0\n15,1.9")
rows = m.read_metrics(old)
check("older format", [x.step for x in rows] == [5, 10] and rows[0].elapsed_s is None and
      rows[0].val_loss is None and rows[1].val_loss == 2.25 and math.isnan(rows[1].grad_norm))
rows = m.parse_metrics(["step,loss,val_loss,lr,grad_norm,ms,tok_per_s,elapsed_s,val_wer,val_acc",
                        "1,3,,1,1,1,1,1,,", "2,3,2.5,1,1,1,1,2,0.25,0.75"])
check("val metrics %s" % rows, rows[0].val == {"wer": None, "acc": None} and
      rows[1].val == {"wer": 0.25, "acc": 0.75})
for lines, want in ((["step,loss", "1,x"], "<metrics>:2: column loss: 'x' is not a number"),
                    (["loss", "1"], "no step column"), (["step,loss", ",1"], ":2: no step")):
    try:
        m.parse_metrics(lines)
        check("%s accepted" % lines, False)
    except ValueError as e:
        check("error %r, expected %r" % (str(e), want), want in str(e))
check("missing file", m.read_metrics(os.path.join(T, "none.csv")) == [] and
      m.read_csv(os.path.join(T, "none.csv")) == [])

# copy_columns: renamed, selected, the text as written
m.copy_columns(old, os.path.join(T, "copy.csv"), {"step": "step", "wer": "loss", "x": "none"},
               keep=lambda row: row["step"] != "5")
check("copy_columns", open(os.path.join(T, "copy.csv")).read() == "step,wer,x\n10,2.000000,\n")

# running: exit status, log, CPU time, timeout
res = m.run(["sh", "-c", "echo out; echo err >&2; exit 3"], os.path.join(T, "sub", "log"))
check("run %s" % res, res.rc == 3 and not res.timed_out and res.text() == "out\nerr\n" and
      res.cpu >= 0 and len(res.load) == 2)
res = m.run(["sleep", "10"], os.path.join(T, "sleep.log"), timeout=0.3)
check("timeout %s" % res, res.timed_out and res.rc == -9 and res.wall < 5)
check("flags", m.flags({"n-layer": 4, "--untie": True, "tied": False, "init": None}) ==
      ["--n-layer", "4", "--untie", "--tied=false"])
check("scores", m.scores(["sh", "-c", "echo a=b; echo words=12 wer=0.25 split=test"]) ==
      {"words": 12.0, "wer": 0.25, "split": "test"})

# the log and the labels
log = ("data    d.txt: 100 tokens\nmodel   gpt: 0.1M parameters\n"
       "step  4/12 | loss 2.0 | lr 1e-3 | norm 1 | 10 img/s | 0:01 | ETA 0:02 | val 2.5000 "
       "acc 0.7500\n"
       "step 12/12 | loss 1.0 | lr 1e-3 | norm 1 | 10 tok/s | 0:01 | ETA 0:00 | val 1.5 "
       "wer 0.2 per 0.1\n"
       "train: step 13: the loss is nan and the gradient norm inf; ...\n")
check("log_field", m.log_field(log, "data") == "d.txt: 100 tokens" and
      m.log_field(log, "model") == "gpt: 0.1M parameters" and m.log_field(log, "mpi") is None)
check("diverged_at", m.diverged_at(log) == 13 and m.diverged_at("done") is None)
check("progress_evals %s" % m.progress_evals(log), m.progress_evals(log) ==
      [(4, {"val": 2.5, "acc": 0.75}), (12, {"val": 1.5, "wer": 0.2, "per": 0.1})])
rows = lambda *v: m.parse_metrics(["step,loss,val_loss"] +
                                  ["%d,%g,%g" % (i, x, x) for i, x in enumerate(v, 1)])
for rc, metrics, text, want in ((0, rows(5, 2.0), "", "trained"), (0, rows(5, 2.95), "", "stalled"),
                                (1, rows(5), "the loss is nan", "diverged"),
                                (0, rows(5, float("inf")), "", "diverged"),
                                (1, [], "cannot open", "failed"),
                                (0, m.parse_metrics(["step,loss,val_loss", "1,4,"]), "", "failed")):
    check("label %s: %s" % (want, m.label(rc, metrics, 3.0, text)),
          m.label(rc, metrics, 3.0, text) == want)
with open(os.path.join(T, "ab.txt"), "wb") as f:
    f.write(b"ab" * 50)
check("byte_entropy", abs(m.byte_entropy(os.path.join(T, "ab.txt"), 0.2) - math.log(2)) < 1e-12)

print("test_mtrun: " + ("ok" if not fails else "%d failed" % len(fails)))
sys.exit(1 if fails else 0)
EOF
