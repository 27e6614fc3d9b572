#!/bin/sh
# --dyt-weight-init (docs/norms.md, "Narrow models"): for DyT and Derf, a run with the flag ends
# bit-identical (metrics, weights, optimizer state) to the route it replaces: a --steps 0 run
# whose checkpoint has every *norm.weight tensor (the blocks' and the final norm's) set to the
# value, then resumed to the same step. Its refusals are in test_cli.sh. MT_BUILD names the build
# directory (default: build).
NAME=test_cli_dyt
. "$(dirname "$0")/lib.sh"
train() { "$B/train" --threads 1 "$@" >"$T/log" 2>&1 || { cat "$T/log"; return 1; }; }
# safetensors FILE set VALUE: every element of the *norm.weight tensors := VALUE (the depth
# study's edit, scripts/mtrun.py set_tensors); FILE count VALUE: how many such tensors hold VALUE
# only; FILE same OTHER: every tensor of FILE has OTHER's bytes (the headers' configs differ)
safetensors() {
    /usr/bin/python3 - "$@" <<'EOF'
import re, sys
sys.path[:0] = ["scripts", "tests/parity"]
from harness import load
from mtrun import set_tensors
path, what, arg = sys.argv[1:]
norm = lambda name: re.fullmatch(r".*norm\.weight", name)
if what == "set":
    set_tensors(path, norm, float(arg))
    sys.exit()
tensors = load(path)[0]
if what == "count":
    print(sum(set(t.ravel()) == {float(arg)} for k, t in tensors.items() if norm(k)))
else:
    other = load(arg)[0]
    bad = [k for k, t in tensors.items() if k not in other or t.tobytes() != other[k].tobytes()]
    if bad or len(other) != len(tensors):
        sys.exit("tensors differ: %s" % bad[:5])
EOF
}

head -c 60000 data/tinyshakespeare.txt >"$T/text.txt"
# 6 blocks of 32 channels, the embedding scale (DyT's LLaMA setting): 13 norm weights
F="--data $T/text.txt --n-layer 6 --n-head 2 --n-embd 32 --n-ctx 32 --batch 8 --lr 3e-3
   --warmup 5 --steps 20 --eval-every 10 --eval-batches 2 --log-every 5 --emb-scale"
for norm in dyt derf; do
    # the default: every norm weight 1; the flag: every norm weight 8, the final norm's too
    train $F --norm $norm --steps 0 --out "$T/$norm-one" || fail "$norm: step 0"
    n=$(safetensors "$T/$norm-one/model.safetensors" count 1)
    [ "$n" = 13 ] || fail "$norm: $n of 13 norm weights are 1 by default"
    train $F --norm $norm --steps 0 --dyt-weight-init 8 --out "$T/$norm-zero" ||
        fail "$norm: step 0"
    n=$(safetensors "$T/$norm-zero/model.safetensors" count 8)
    [ "$n" = 13 ] || fail "$norm: $n of 13 norm weights are 8 with --dyt-weight-init 8"
    # the flag against the edited step-0 checkpoint, resumed
    train $F --norm $norm --dyt-weight-init 8 --out "$T/$norm-flag" || fail "$norm: flag run"
    safetensors "$T/$norm-one/model.safetensors" set 8
    train --resume --out "$T/$norm-one" --steps 20 || fail "$norm: resumed edit"
    a=$(cut -d, -f1-5 "$T/$norm-flag/metrics.csv") b=$(cut -d, -f1-5 "$T/$norm-one/metrics.csv")
    [ "$a" = "$b" ] && [ "$(echo "$a" | wc -l)" -eq 5 ] ||
        fail "$norm: metrics differ: flag $(echo $a), edit $(echo $b)"
    for f in model optim; do
        safetensors "$T/$norm-flag/$f.safetensors" same "$T/$norm-one/$f.safetensors" ||
            fail "$norm: $f.safetensors differ"
    done
done

finish
