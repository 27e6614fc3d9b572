#!/bin/sh
# ./train --freeze GLOBS: the parameters the globs name stay at their initialisation (or
# --init-from's weights) and get no optimizer state, the others train; a run resumed from a
# frozen run's checkpoint continues it bit for bit; a glob matching no parameter is refused with
# exit 2, naming it, and nothing written. MT_BUILD names the build directory.
NAME=test_freeze
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || skip "needs python3 to compare tensors"
train() { "$B/train" --threads 2 "$@" >"$T/log" 2>&1; }
head -c 60000 data/tinyshakespeare.txt >"$T/text.txt"
TINY="--data $T/text.txt --n-layer 2 --n-head 2 --n-embd 32 --n-ctx 32 --batch 4 --lr 3e-3
      --eval-every 2 --eval-batches 2 --log-every 1 --schedule const --warmup 0"
FROZEN='blocks\.0\..*|tok_emb\..*'
train $TINY --steps 0 --out "$T/init" || fail "--steps 0 exited $?: $(cat "$T/log")"
train $TINY --steps 4 --freeze 'blocks.0.*,tok_emb.*' --out "$T/a" ||
    fail "--freeze exited $?: $(cat "$T/log")"
A=$T/a/model.safetensors
k=$(count same "$FROZEN" "$A" "$A")
[ "$k" -gt 5 ] || fail "the globs name $k tensors"
[ "$(count same "$FROZEN" "$A" "$T/init/model.safetensors")" -eq "$k" ] ||
    fail "frozen tensors trained: $(tensors differ "$FROZEN" "$A" "$T/init/model.safetensors")"
[ "$(count same '.*' "$A" "$T/init/model.safetensors")" -eq "$k" ] ||
    fail "tensors left untrained besides the frozen: $(tensors same '.*' "$A" "$T/init/model.safetensors")"
# the optimizer's state: the trained tensors' moments and nothing of the frozen
tensors names "$T/a/optim.safetensors" | grep -E "^[a-z]+\.($FROZEN)$" &&
    fail "optimizer state for frozen tensors"
[ "$(tensors names "$T/a/optim.safetensors" | grep -c '^m\.blocks\.1\.')" -gt 5 ] ||
    fail "no state for the trained tensors: $(tensors names "$T/a/optim.safetensors")"

# resume: 2 steps, then 2 more from the checkpoint (the saved options freeze the same), equal
train $TINY --steps 2 --freeze 'blocks.0.*,tok_emb.*' --out "$T/b" || fail "2 steps exited $?"
train $TINY --steps 4 --resume --out "$T/b" || fail "--resume exited $?: $(cat "$T/log")"
[ "$(count differ '.*' "$T/b/model.safetensors" "$A")" -eq 0 ] ||
    fail "the resumed run differs in: $(tensors differ '.*' "$T/b/model.safetensors" "$A")"

# --init-from with --freeze: the frozen tensors are the file's
train $TINY --steps 2 --init-from "$A" --freeze 'blocks.1.*' --out "$T/c" ||
    fail "--init-from --freeze exited $?: $(cat "$T/log")"
[ "$(count same 'blocks\.1\..*' "$T/c/model.safetensors" "$A")" -eq "$(count same 'blocks\.1\..*' "$A" "$A")" ] ||
    fail "frozen tensors of --init-from changed: $(tensors differ 'blocks\.1\..*' "$T/c/model.safetensors" "$A")"

# a glob that matches nothing: exit 2, named, nothing written
train $TINY --steps 2 --freeze 'blocks.0.*,block.1.*' --out "$T/bad"
[ $? -eq 2 ] || fail "a glob matching nothing: exit $?"
grep -q "^train: --freeze: the glob 'block.1.\*' matches no tensor of the model (its tensors: tok_emb.weight" "$T/log" ||
    fail "the message: $(cat "$T/log")"
[ ! -e "$T/bad" ] || fail "the refused run wrote $T/bad"
finish
