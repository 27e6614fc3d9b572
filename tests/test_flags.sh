#!/bin/sh
# Flags and config keys that nothing reads, and presets against explicit flags (docs/training.md,
# "What reads an option"): a given option the chosen components do not read exits 2 naming it and
# what would read it, before anything is written; a config file's key left at the value under it
# (a run's saved options hold every key) is not refused; a preset sits just under the layer that
# names it (--arch over the config file), an explicit option of that layer wins over --arch
# llama's pieces, and one nGPT cannot take is refused with the reason. MT_BUILD names the build
# directory (default: build).
NAME=test_flags
. "$(dirname "$0")/lib.sh"

head -c 20000 data/tinyshakespeare.txt >"$T/text.txt"
TINY="--data $T/text.txt --n-layer 2 --n-head 2 --n-embd 16 --n-ctx 16 --batch 2 --steps 2
      --eval-every 0 --save-every 0 --threads 2"
n=0
# bad MESSAGE FLAGS...: exit 2, MESSAGE in the output, no --out written
bad() {
    msg=$1
    shift
    n=$((n + 1))
    "$B/train" $TINY --out "$T/bad$n" "$@" >"$T/log" 2>&1
    rc=$?
    [ $rc -eq 2 ] && grep -qF -- "$msg" "$T/log" && [ ! -e "$T/bad$n" ] ||
        fail "$* (exit $rc, want 2 and '$msg'): $(cat "$T/log")"
}
# good FLAGS...: the run trains; its model line is in $T/log
good() {
    n=$((n + 1))
    "$B/train" $TINY --out "$T/good$n" "$@" >"$T/log" 2>&1 || fail "$* exited $?: $(cat "$T/log")"
}

# ---- no-op options, each refused naming what would read it
bad "--decay-frac 0.3: this run does not read it (only --schedule wsd does)" --decay-frac 0.3
bad "--muon-rms 0.3: this run does not read it (only --optim muon --muon-scale match-adamw does)" \
    --optim muon --muon-rms 0.3
bad "--dyt-alpha-final 0.3: this run does not read it (only the final norm of --norm dyt or derf" \
    --norm dyt --placement post --dyt-alpha-final 0.3
bad "--emb-std 0.1: this run does not read it (only an --init other than dsl" --init dsl \
    --emb-std 0.1
bad "--data-vocab 300: this run does not read it (only --data of token shards does)" \
    --data-vocab 300
bad "--shard-tokens 8000: this run does not read it (only --prepare --format llmc does)" \
    --prepare "$T/p.bin" --shard-tokens 8000
[ ! -e "$T/p.bin" ] || fail "--prepare --format mt --shard-tokens wrote $T/p.bin"
case $B in
*mpi*) ;;
*) bad "--bucket-kb 8: this run does not read it (only a build with MPI (make MPI=1) does)" \
    --bucket-kb 8 ;;
esac
bad "--rope-theta 500: this run does not read it (only --pos rope does)" --rope-theta 500
bad "--gn-groups 4: this run does not read it (only --norm gn does)" --norm rms --gn-groups 4
bad "--deepnorm-alpha 2: this run does not read it (only --placement deepnorm does)" \
    --placement pre --deepnorm-alpha 2
bad "--warmup-init-lr 0.001: this run does not read it (only a warmup (--warmup > 0) does)" \
    --warmup 0 --warmup-init-lr 0.001
# ... each component's own: the norm's, the placement's and init's, the optimizer's, nGPT's
bad "--dyt-alpha 0.5: this run does not read it (only --norm dyt or derf does)" --norm rms \
    --dyt-alpha 0.5
bad "--derf-shift 0.5: this run does not read it (only --norm derf does)" --norm dyt \
    --derf-shift 0.5
bad "--mixln-post 1: this run does not read it (only --placement mixln does)" --mixln-post 1
bad "--dsl-k 1: this run does not read it (only --placement dsl does)" --dsl-k 1
bad "--dsl-r0 0.5: this run does not read it (only --init dsl" --placement dsl --init gpt2 \
    --dsl-r0 0.5
bad "--deepnorm-beta 0.3: this run does not read it (only --init deepnorm" --deepnorm-beta 0.3
bad "--subln-gain 1.5: this run does not read it (only --init subln" --placement subln \
    --init xavier --subln-gain 1.5
bad "--momentum 0.9: this run does not read it (only --optim sgd does; Muon" --momentum 0.9
bad "--lion-beta1 0.8: this run does not read it (only --optim lion does)" --lion-beta1 0.8
bad "--ns-steps 3: this run does not read it (only --optim muon does)" --optim lion --ns-steps 3
bad "--ngpt-alpha-init 0.1: this run does not read it (only --arch ngpt does)" \
    --ngpt-alpha-init 0.1
# a config key as a flag: named by its file and line
printf 'steps = 2\ndecay_frac = 0.3\n' >"$T/d.ini"
bad "$T/d.ini:2: decay-frac = 0.3: this run does not read it (only --schedule wsd does)" \
    --config "$T/d.ini"
# ... but a key at the value under it is not refused (a run's saved options hold every key)
printf 'decay_frac = 0.2\nwarmup_init_lr = 0\nrope_theta = 10000\n' >"$T/same.ini"
good --config "$T/same.ini"
# read where the components read them
good --schedule wsd --decay-frac 0.5 --warmup 0
good --pos rope --rope-theta 500
good --norm gn --gn-groups 2
good --norm dyt --dyt-alpha-final 0.3
good --norm derf --derf-shift 0.5 --dyt-alpha 0.7
good --placement mixln --mixln-post 1
good --placement dsl --dsl-k 1 --dsl-r0 0.5
good --placement deepnorm --deepnorm-beta 0.3
good --placement subln --subln-gain 1.5
good --optim sgd --momentum 0.9
good --optim lion --lion-beta1 0.8

# ---- presets: an explicit flag wins over --arch llama's pieces
good --arch llama --norm ln --pos learned --act gelu
grep -q "norm ln, placement pre, init gpt2, pos learned, act gelu, no bias" "$T/log" ||
    fail "--arch llama --norm ln --pos learned --act gelu: $(grep '^model' "$T/log")"
printf 'arch = llama\nno-bias = false\n' >"$T/llama.ini"
good --config "$T/llama.ini"
grep "^model" "$T/log" | grep -q "norm rms, .*pos rope, act swiglu: " ||
    fail "llama with no-bias = false keeps the biases: $(grep '^model' "$T/log")"
good --arch llama
grep "^model" "$T/log" | grep -q "norm rms, .*pos rope, act swiglu, no bias" ||
    fail "--arch llama's pieces: $(grep '^model' "$T/log")"
# ... a preset sits just under the layer that names it: --arch over the config file's keys
printf 'norm = ln\n' >"$T/ln.ini"
good --config "$T/ln.ini" --arch llama
grep "^model" "$T/log" | grep -q "norm rms, .*pos rope, act swiglu, no bias" ||
    fail "--config (norm = ln) --arch llama: $(grep '^model' "$T/log")"
printf 'placement = pre\nact = gelu\nweight-decay = 0.1\n' >"$T/pre.ini"
good --config "$T/pre.ini" --arch ngpt
grep "^model" "$T/log" | grep -q "ngpt, .*norm none, residual ngpt, .*act swiglu, no bias" ||
    fail "--config (placement = pre) --arch ngpt: $(grep '^model' "$T/log")"
# ... and one nGPT cannot take is refused with the reason
bad "--arch ngpt needs --act swiglu: s_u and s_v scale its two branches" \
    --arch ngpt --act gelu
bad "--arch ngpt with --pos learned: refused: the embeddings are unit vectors" --arch ngpt \
    --pos learned
bad "--placement pre: this run does not read it (only a residual that sums its sublayers" \
    --arch ngpt --placement pre
bad "--arch ngpt needs no --placement: nGPT's residual is its own" --arch ngpt --placement post
bad "--arch ngpt needs --norm none" --arch ngpt --norm ln
printf 'arch = ngpt\nno-bias = false\n' >"$T/ngpt.ini"
bad "--arch ngpt needs --no-bias: a bias would move the unit vectors" \
    --config "$T/ngpt.ini"
printf 'arch = ngpt\nuntie = false\n' >"$T/tied.ini"
bad "--arch ngpt with a tied head (untie = false): refused" --config "$T/tied.ini"

# ---- a run saved before presets were layered under the given options resumes as the model it
# trained: that build filled a preset's pieces in validation, so its saved options hold the GPT's
# defaults of them (arch = llama with norm = ln trained RMSNorm). A new run's checkpoint stands in
# for one, its options rewritten to that form (and its checksums dropped, as files of before
# them); a model flag that changes the model is still refused on resume.
old_form() { # checkpoint: the preset's pieces back at the GPT's defaults in its saved options
    python3 - "$1" <<'PY' || fail "rewriting $1"
import json, re, sys
with open(sys.argv[1], "rb") as f:
    n = int.from_bytes(f.read(8), "little")
    head, data = json.loads(f.read(n)), f.read()
meta = head["__metadata__"]
del meta["mt_crc32c"]
gpt = {"norm": "ln", "pos": "learned", "act": "gelu", "no-bias": "false", "placement": "pre",
       "untie": "false"}
meta["options"] = re.sub(r"^(%s) = .*$" % "|".join(gpt), lambda m: m[1] + " = " + gpt[m[1]],
                         meta["options"], flags=re.M)
text = json.dumps(head).encode()
text += b" " * (-len(text) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(len(text).to_bytes(8, "little") + text + data)
PY
}
for case in 'llama:norm is "rms" in the checkpoint, "ln" now' 'ngpt:needs --norm none'; do
    arch=${case%%:*}
    good --arch $arch
    want=$(grep "^model" "$T/log")
    old_form "$T/good$n/model.safetensors"
    "$B/train" --resume --out "$T/good$n" --steps 3 >"$T/log" 2>&1 ||
        fail "--arch $arch saved in the old form: --resume exited $?: $(cat "$T/log")"
    [ "$(grep "^model" "$T/log")" = "$want" ] ||
        fail "--arch $arch saved in the old form resumes as $(grep "^model" "$T/log"), not $want"
    "$B/train" --resume --out "$T/good$n" --steps 4 --norm ln >"$T/log" 2>&1
    rc=$?
    [ $rc -eq 2 ] && grep -qF -- "${case#*:}" "$T/log" ||
        fail "--arch $arch --resume --norm ln: exit $rc, want 2: $(cat "$T/log")"
done

finish
