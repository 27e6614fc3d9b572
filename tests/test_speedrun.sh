#!/bin/sh
# The speedrun (issue 45): bench/speedrun/search.py's chain on a made-up search (a piece kept when
# every seed reaches the target in fewer steps, one that does not is dropped; a missing run is
# what the search runs next, and it runs it: one real ./train and ./infer --score); then
# bench/speedrun.sh end to end on that chain (CHECK: torch's script and each record's seeds, in
# bf16 too where it runs) and its page: the records, each seed's loss, the gains, the trials.
# configs/speedrun.ini is the last record of the shipped search (bench/speedrun/search.csv): the
# same bits as its flags over configs/nanogpt-char.ini.
# MT_BUILD names the build directory (default: build).
NAME=test_speedrun
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
has_torch || skip "no torch for /usr/bin/python3 (bench/nanogpt/torch_char.py)"
# at a 25th of the steps: the recipe 80, Muon from 20 on a grid of 2 down to 4; the target 2.0
SCALE="--pieces normuon,cautious-wd --target 2.0 --steps-scale 25"
cat >"$T/sr.csv" <<'CSV'
name,flags,steps,batch,val_loss,train_s,load
torch,bench/nanogpt/torch_char.py,80,12,2.0,1,0
muon-20-s1,,20,12,1.9,1,0
muon-20-s2,,20,12,1.95,1,0
muon-18-s1,,18,12,1.98,1,0
muon-18-s2,,18,12,1.99,1,0
muon-16-s1,,16,12,2.01,1,0
muon-16-s2,,16,12,1.9,1,0
muon+normuon-18-s1,,18,12,1.9,1,0
muon+normuon-18-s2,,18,12,1.9,1,0
muon+normuon-16-s1,,16,12,1.95,1,0
muon+normuon-16-s2,,16,12,1.96,1,0
muon+normuon-14-s1,,14,12,2.1,1,0
muon+normuon+cautious-wd-16-s1,,16,12,2.05,1,0
muon+normuon+cautious-wd-16-s2,,16,12,1.9,1,0
CSV
# shellcheck disable=SC2086
$PY - "$T/sr.csv" $SCALE <<'PY' || fail "the chain: $(cat "$T/log")"
import sys
sys.path.insert(0, "scripts")
from mtrun import load_module  # noqa: E402
s = load_module("speedrun_search", "bench/speedrun/search.py")
a = s.parse(["--csv"] + sys.argv[1:])
rows, target, chain = s.replay(a)
assert target == 2.0 and list(chain.need) == ["muon+normuon-14-s2"], chain.need
assert chain.need["muon+normuon-14-s2"].endswith("--normuon --seed 2 --steps 14"), chain.need
PY
$PY bench/speedrun/search.py --csv "$T/sr.csv" $SCALE >"$T/log" 2>&1 ||
    fail "search: $(tail -n 5 "$T/log")"
grep -q "the chain is complete: recipe 80 -> muon 18 -> normuon 16$" "$T/log" ||
    fail "search's chain: $(tail -n 3 "$T/log")"
loss=$(sed -n 's/^muon+normuon-14-s2,.*,14,12,\([0-9.]*\),.*/\1/p' "$T/sr.csv")
awk -v l="$loss" 'BEGIN { exit !(l > 2.5 && l < 4.2) }' || fail "the real run's loss: '$loss'"
$PY bench/speedrun/search.py --csv "$T/sr.csv" $SCALE --records >"$T/records" 2>&1
[ "$(cut -d' ' -f1-2 "$T/records" | tr '\n' ' ')" = \
    "recipe 80 recipe 80 muon 18 muon 18 normuon 16 normuon 16 " ] &&
    grep -q "^normuon 16 --optim muon .* --warmup 2 --normuon --seed 2$" "$T/records" ||
    fail "records: $(cat "$T/records")"

# bench/speedrun.sh on that chain, its page
MT_BUILD=$B SEARCH_FLAGS="--csv $T/sr.csv $SCALE" CHECK=1 RAW=$T/raw.jsonl PAGE=$T/SPEEDRUN.md \
    ROUNDS=1 sh bench/speedrun.sh >"$T/bench.log" 2>&1 ||
    { fail "speedrun.sh: $(tail "$T/bench.log")"; finish; }
P=$T/SPEEDRUN.md
for line in "check run: not a result" "| torch | fp32 | 80 |" "| recipe | fp32 | 80 |" \
    "| muon | fp32 | 18 |" "| normuon | fp32 | 16 |" "| 2 steps, " "| >= 10x |" \
    "| cautious-wd | \`--cautious-wd\` | 2.0500 / 1.9000 | not reached | no |" \
    "| normuon | \`--normuon\` | 1.9000 / 1.9000 | 16 | yes |" "fraction of limit" \
    "the highest of 2 measurements"; do
    grep -qF -- "$line" "$P" || fail "the page has no '$line'"
done
grep -q "^| normuon | fp32 | 16 | [0-9.]* | [0-9]* | [0-9]* | [0-9]*% | [0-9.]* / [0-9.]* |" "$P" ||
    fail "normuon's row: $(grep '^| normuon' "$P")"
if has_bf16; then
    grep -qF "| normuon | bf16 | 16 |" "$P" || fail "no bf16 record"
else
    skip_case bf16 "$BF16_WHY"
fi

# configs/speedrun.ini: the shipped chain's last record
if $PY bench/speedrun/search.py --records >"$T/shipped" 2>"$T/log"; then
    last=$(tail -n 1 "$T/shipped")
    steps=$(echo "$last" | cut -d' ' -f2)
    flags=$(echo "$last" | cut -d' ' -f3- | sed 's/ --seed [0-9]*$//')
    SHORT="--data data/tinyshakespeare.txt --steps 3 --warmup 1 --eval-every 0 --log-every 1"
    # shellcheck disable=SC2086
    "$B/train" --threads 2 --config configs/nanogpt-char.ini $flags $SHORT --out "$T/c1" \
        >"$T/log" 2>&1 || fail "the record's flags: $(tail -n 2 "$T/log")"
    # shellcheck disable=SC2086
    "$B/train" --threads 2 --config configs/speedrun.ini $SHORT --out "$T/c2" >"$T/log" 2>&1 ||
        fail "speedrun.ini: $(tail -n 2 "$T/log")"
    [ "$(count differ '.*' "$T/c1/model.safetensors" "$T/c2/model.safetensors")" -eq 0 ] &&
        [ "$(count same '.*' "$T/c1/model.safetensors" "$T/c2/model.safetensors")" -gt 0 ] ||
        fail "configs/speedrun.ini is not the last record ($flags): the weights differ"
    for n in 1 2; do "$B/infer" --info "$T/c$n/model.safetensors" |
        grep -v "^checkpoint\|^out =" >"$T/c$n.info"; done
    cmp -s "$T/c1.info" "$T/c2.info" ||
        fail "speedrun.ini's options: $(diff "$T/c1.info" "$T/c2.info")"
    grep -q "^steps = $steps$" configs/speedrun.ini || fail "speedrun.ini's steps: not $steps"
else
    skip_case speedrun.ini "$(tail -n 1 "$T/log")"
fi
finish
