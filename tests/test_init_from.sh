#!/bin/sh
# ./train --init-from FILE [--init-skip GLOBS]: a run of the same shape starts from the file's
# weights (--steps 0 writes them back bit for bit) at step 0, the globs leave their tensors at the
# run's own initialisation, a run from a step-0 checkpoint trains as --resume from it does, and a
# shape-changing flag, --resume, a glob without --init-from, a missing file and a file that is
# no checkpoint are refused with exit 2 and nothing written. MT_BUILD names the build directory.
NAME=test_init_from
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || skip "needs python3 to compare tensors"
train() { "$B/train" --threads 2 "$@" >"$T/log" 2>&1; }
head -c 60000 data/tinyshakespeare.txt >"$T/text.txt"
TINY="--data $T/text.txt --n-layer 2 --n-head 2 --n-embd 32 --n-ctx 32 --batch 4 --lr 3e-3
      --eval-every 2 --eval-batches 2 --log-every 1"
train $TINY --steps 2 --out "$T/a" || fail "2 steps exited $?: $(cat "$T/log")"
A=$T/a/model.safetensors
train $TINY --steps 0 --out "$T/init" || fail "--steps 0 exited $?"
n=$(count same '.*' "$A" "$A")
[ "$n" -gt 10 ] || fail "the file holds $n tensors"

# the same shape: step 0's weights are the file's, every one; a new run at step 0
train $TINY --steps 0 --init-from "$A" --out "$T/same" || fail "--init-from exited $?: $(cat "$T/log")"
[ "$(count same '.*' "$T/same/model.safetensors" "$A")" -eq "$n" ] ||
    fail "step 0 differs from the file in: $(tensors differ '.*' "$T/same/model.safetensors" "$A")"
grep -q "^init    loaded $n of $n tensors" "$T/log" || fail "the report: $(grep init "$T/log")"
grep -q "from --init-from" "$T/log" || fail "the train line: $(grep '^train' "$T/log")"
"$B/infer" --info "$T/same/model.safetensors" | grep -q "^steps       0$" || fail "not at step 0"
[ "$(count same '.*' "$A" "$T/init/model.safetensors")" -eq 0 ] || fail "2 steps changed nothing"

# skip globs: those tensors are the run's initialisation (the --steps 0 run of the same seed),
# the others the file's
train $TINY --steps 0 --init-from "$A" --init-skip 'blocks.1.*,tok_emb.*' --out "$T/skip" ||
    fail "--init-skip exited $?: $(cat "$T/log")"
S=$T/skip/model.safetensors
k=$(count same 'blocks\.1\..*|tok_emb\..*' "$A" "$A")
[ "$k" -gt 2 ] && [ "$(count same 'blocks\.1\..*|tok_emb\..*' "$S" "$T/init/model.safetensors")" -eq "$k" ] ||
    fail "skipped tensors not at their initialisation: $(tensors differ 'blocks\.1\..*|tok_emb\..*' "$S" "$T/init/model.safetensors")"
[ "$(count same '.*' "$S" "$A")" -eq $((n - k)) ] ||
    fail "the others are not the file's: $(tensors differ '.*' "$S" "$A")"
grep -q "^init    loaded $((n - k)) of $n tensors.*left at their initialisation: tok_emb.weight" "$T/log" ||
    fail "the report of the skip: $(grep init "$T/log")"

# from the step-0 checkpoint: the same training as --resume from it (the depth study's use)
cp -r "$T/init" "$T/resumed"
train --resume --out "$T/resumed" --steps 4 || fail "resume exited $?: $(cat "$T/log")"
train $TINY --steps 4 --init-from "$T/init/model.safetensors" --out "$T/from0" ||
    fail "--init-from the step-0 file exited $?"
[ "$(cut -d, -f1-5 "$T/from0/metrics.csv")" = "$(cut -d, -f1-5 "$T/resumed/metrics.csv")" ] ||
    fail "--init-from step 0 trains otherwise than --resume: $(diff "$T/from0/metrics.csv" "$T/resumed/metrics.csv")"

# refused, exit 2, nothing written: a shape-changing flag (named, with the flag that fits),
# --resume, a glob without --init-from or matching nothing, a missing file, not a checkpoint
refused() { # what, the message's part, flags...
    what=$1 says=$2
    shift 2
    train "$@" --out "$T/no"
    rc=$?
    [ $rc -eq 2 ] || fail "$what: exit $rc, expected 2: $(cat "$T/log")"
    grep -q -- "$says" "$T/log" || fail "$what: the message does not say '$says': $(cat "$T/log")"
    [ ! -e "$T/no" ] || fail "$what: wrote $T/no"
    rm -rf "$T/no"
}
refused "another n_embd" "tensor 'tok_emb.weight' has shape (256, 32), the model needs (256, 64): n_embd is 32 in the file, 64 here (--n-embd 32)" \
    $TINY --n-embd 64 --steps 0 --init-from "$A"
refused "another n_layer" "n_layer is 2 in the file, 3 here (--n-layer 2)" \
    $TINY --n-layer 3 --steps 0 --init-from "$A"
refused "value embeddings the file has not" \
    "value_embeds is \"\" in the file, 0 here (drop --value-embeds)" \
    $TINY --value-embeds 0 --steps 0 --init-from "$A"
before=$(cat "$T/a/model.safetensors" "$T/a/metrics.csv" | cksum)
train --resume --out "$T/a" --steps 4 --init-from "$A"
rc=$?
[ $rc -eq 2 ] && grep -q "give one of them" "$T/log" || fail "--resume: exit $rc: $(cat "$T/log")"
[ "$(cat "$T/a/model.safetensors" "$T/a/metrics.csv" | cksum)" = "$before" ] || fail "--resume: wrote"
refused "a glob alone" "give --init-from too" $TINY --init-skip 'tok_emb.*'
refused "a glob of nothing" "the skip glob 'lm_head.\*' matches no tensor" \
    $TINY --init-from "$A" --init-skip 'lm_head.*'
refused "a missing file" "--init-from $T/none" $TINY --init-from "$T/none"
refused "not a checkpoint" "$T/text.txt" $TINY --init-from "$T/text.txt"

finish
