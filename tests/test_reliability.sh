#!/bin/sh
# Reliability of ./train, ./infer and ./preview (docs/reliability.md):
#  1. a table of bad inputs: each exits with its status (2: usage, 1: out of memory), prints a
#     message naming the culprit, and writes nothing (no file newer than a stamp, no --out);
#  2. crash safety and exact resume: a run saving every step is killed with SIGKILL at random
#     moments 20 times; each time the checkpoint on disk loads (./infer --info) and --resume
#     continues; the run resumed to the end ends with the same bits (model tensors, optimizer
#     state, every logged loss) as an uninterrupted one, with a cosine schedule, warmup and dropout.
# MT_BUILD names the build directory (default: build).
NAME=test_reliability
. "$(dirname "$0")/lib.sh"
L=$(mktemp /tmp/mt_test_rel_log_XXXXXX) # outside $T: the bad runs' check finds $T's new files
trap 'rm -rf "$T" "$L"' EXIT

D=$T/d                 # inputs
W=$T/w                 # the working directory of the bad runs: must stay empty
mkdir -p "$D" "$W" "$D/adir" "$D/junk/a"
echo "not an image" >"$D/junk/a/x.png"
head -c 20000 data/tinyshakespeare.txt >"$D/t.txt"
: >"$D/empty.txt"
printf 'text\000with a NUL\n' >"$D/nul.txt"
printf 'NOTMTTOK and more bytes than a header has' >"$D/bad.bin"
TINY="--data $D/t.txt --n-layer 1 --n-head 2 --n-embd 16 --n-ctx 16 --batch 2 --threads 1"
"$B/train" $TINY --steps 2 --out "$D/run" >"$L" 2>&1 || { fail "the reference run: $(cat "$L")"; }
"$B/train" --data "$D/t.txt" --prepare "$D/ok.bin" >"$L" 2>&1 || fail "prepare"
head -c 100 "$D/ok.bin" >"$D/trunc.bin"
printf 'lr = 1e-3\nn_layers = 4\n' >"$D/key.ini"
printf 'lr = fast\n' >"$D/type.ini"
printf '[train]\nlr = 1e-3\n' >"$D/section.ini"
printf 'resume = true\n' >"$D/cli.ini"
printf 'label-smoothing = 1.5\n' >"$D/ls.ini"
printf 'lr = 1e-3\nsteps = 3\nlr = 2e-3\n' >"$D/dup.ini"
printf '\377\376l\000r\000 \000=\000 \0001\000\n\000' >"$D/utf16.ini"
printf '\000l\000r\000 \000=\000 \0001\000\n' >"$D/utf16be.ini"
printf 'lr = 1e-3\nste\000ps = 5\n' >"$D/nul.ini"
printf '\357\273\277lr = 1e-3\nn_layers = 4\n' >"$D/bom.ini"
printf 'data = "%s\n' "$D/t.txt" >"$D/quote.ini"
for k in ngpt_alpha dyt-weight qk-affine bias; do printf '%s = 1\n' $k >"$D/$k.ini"; done
M=$D/run/model.safetensors
# runs that diverge (exit 1 at step 2): the checkpoint of step 1 holds finite weights up to 1e34,
# and of a --lr 1e15 weights that make NaN logits
R1="$TINY --optim sgd --clip 0 --warmup 0 --schedule const --save-every 1"
"$B/train" $R1 --lr 1e38 --steps 4 --out "$D/huge" >"$L" 2>&1
"$B/train" $R1 --lr 1e15 --steps 1 --out "$D/nanlogits" >"$L" 2>&1 || fail "--lr 1e15: $(cat "$L")"
# a run whose optimizer states are of another step than its model (not a cut save: neither)
"$B/train" $TINY --steps 3 --out "$D/run3" >"$L" 2>&1 || fail "the step-3 run: $(cat "$L")"
cp -r "$D/run" "$D/mixed" && cp "$D/run3/optim.safetensors" "$D/mixed/optim.safetensors" &&
    cp "$D/run3/optim.safetensors" "$D/mixed/optim.prev.safetensors"
"$B/train" $TINY --arch llama --steps 1 --out "$D/llama" >"$L" 2>&1 || fail "llama: $(cat "$L")"
ML=$D/llama/model.safetensors
"$B/train" --model vit --data "$PWD/data/mnist" --n-layer 1 --n-head 2 --n-embd 16 --batch 2 \
    --steps 1 --threads 1 --eval-every 0 --out "$D/vit" >"$L" 2>&1 || fail "vit: $(cat "$L")"
printf 'hello hh ax0 l ow1\nworld w er1 l d\nab ey1 b iy0\nabc ey1 b iy1 s iy1\nx eh1 k s\n' >"$D/d1.dict"
printf 'hi hh ay1\nyo y ow1\nab ey1 b iy0\nabc ey1 b iy1 s iy1\nx eh1 k s\n' >"$D/d2.dict"
"$B/train" --model encdec --data "$D/d1.dict" --enc-layers 1 --dec-layers 1 --n-head 2 \
    --n-embd 16 --batch 2 --steps 1 --threads 1 --out "$D/ed" >"$L" 2>&1 || fail "encdec: $(cat "$L")"
mkfifo "$D/fifo" && ln -s fifo "$D/fifolink" # (never a link to a system file: a broken check
                                             # would replace it)
# a pipe where a run reads a file it did not write: a shard set's meta.json, a resumed run's
# optimizer state and metrics (each hung, waiting for a writer)
"$B/train" --data "$D/t.txt" --prepare "$D/set" --format llmc >"$L" 2>&1 || fail "llmc: $(cat "$L")"
# shards that are not what they seem: one empty, a header with a magic one off (20240521), a
# prepare cut before its meta.json
cp -r "$D/set" "$D/emptyset" && : >"$D/emptyset/train_000001.bin"
cp "$D/set/train_000000.bin" "$D/damaged.bin"
printf '\211\330\064\001' | dd of="$D/damaged.bin" conv=notrunc 2>/dev/null
cp -r "$D/set" "$D/unfinished" && rm "$D/unfinished/meta.json"
rm "$D/set/meta.json" && mkfifo "$D/set/meta.json"
for f in optim.safetensors metrics.csv diag_grad.csv diag_attn.csv; do
    cp -r "$D/run" "$D/fifo-$f" && rm -f "$D/fifo-$f/$f" && mkfifo "$D/fifo-$f/$f"
done
# a link to a file descriptor: the rename of a write through it would replace the file behind
# it, here this test's log
ln -s /proc/self/fd/1 "$D/stdout"

# status|text the message must hold|program and arguments (split on spaces)
cases() {
    cat <<EOF
2|unknown flag --n-layers (did you mean --n-layer?)|train $TINY --n-layers 2
2|unknown flag --lrr (did you mean --lr?)|train $TINY --lrr 0.1
2|unexpected argument 'foo'|train $TINY foo
2|--lr: 'abc' is not a finite number|train $TINY --lr abc
2|--steps: '1.5' is not an integer|train $TINY --steps 1.5
2|--untie: 'maybe' is not true or false|train $TINY --untie=maybe
2|--norm: 'batchnorm' is not one of ln|train $TINY --norm batchnorm
2|--batch needs a value|train $TINY --batch
2|--steps: -1 is out of range: expected at least 0|train $TINY --steps -1
2|--batch: 0 is out of range: expected at least 1|train $TINY --batch 0
2|--threads: -3 is out of range: expected from 0 to 1024|train $TINY --threads -3
2|--replicas 2: expected 0 (one per thread) to 1 (the threads)|train $TINY --replicas 2
2|--replicas 2: the model keeps running statistics (BatchNorm)|train --model vit --data $PWD/data/mnist --norm bn --n-layer 1 --n-head 2 --n-embd 16 --threads 2 --replicas 2 --steps 1 --out $D/bn
2|--warmup: -5 is out of range: expected at least 0|train $TINY --warmup -5
2|--n-layer: 0 is out of range|train $TINY --n-layer 0
2|--lr is -1; it must be a finite number >= 0|train $TINY --lr -1
2|--beta2 is 1; it must be in [0, 1)|train $TINY --beta2 1
2|dropout = 1.5, must be in [0, 1)|train $TINY --dropout 1.5
2|label_smoothing = 1, must be in [0, 1)|train $TINY --label-smoothing 1
2|label_smoothing = -0.1, must be in [0, 1)|train $TINY --label-smoothing -0.1
2|--label-smoothing: 'nan' is not a finite number|train $TINY --label-smoothing nan
2|label_smoothing = 1.5, must be in [0, 1)|train $TINY --config $D/ls.ini
2|label_smoothing = 2, must be in [0, 1)|train --model vit --data $PWD/data/mnist --label-smoothing 2 --out $D/lsv
2|n_head = 3 does not divide n_embd = 16|train $TINY --n-head 3
2|n_ctx + 1 = 100001 needs more data or a smaller --n-ctx|train $TINY --n-ctx 100000
2|--val-fraction 1.5: expected a fraction in [0, 1)|train $TINY --val-fraction 1.5
2|the validation split has 1 tokens (the last --val-fraction of 20000)|train $TINY --val-fraction 0.0001
2|--gn-groups: 3 groups do not divide the 16 channels|train $TINY --norm gn --gn-groups 3
2|--prms-p: 2 is outside (0, 1]|train $TINY --norm prms --prms-p 2
2|--arena-mb 1: a step of this model and batch takes|train --data $D/t.txt --n-ctx 64 --batch 8 --threads 1 --arena-mb 1 --out $D/arena
2|--norm bn needs at least 2 values per channel|train --model vit --data $PWD/data/mnist --norm bn --pool mean --patch 28 --batch 1 --threads 1 --steps 1 --out $D/bn1
2|--diag-batch 20: at most --batch (2)|train $TINY --diag-resid-every 1 --diag-batch 20 --out $D/dg
2|--model vit has none|train --model vit --data $PWD/data/mnist --n-layer 1 --n-head 2 --n-embd 16 --threads 1 --diag-logz-every 1 --out $W/new/run
2|--patch: refused for --model gpt: it is an option of --model vit only|train $TINY --patch 4 --out $D/patch
2|unknown model 'rnn' (accepted: gpt (a language model), vit|train $TINY --model rnn --out $D/rnn
2|--task images: --model gpt takes another kind of input (accepted: text, sft)|train $TINY --task images --out $D/task
2|--task speech: unknown (accepted for --model vit: images)|train --model vit --data $PWD/data/mnist --task speech --out $D/task
2|--norm-eps: -0.5; eps must be >= 0|train $TINY --norm-eps -0.5
2|--min-lr is -0.5; it must be a finite number >= 0|train $TINY --min-lr -0.5
2|--min-lr 0.1 is larger than --lr 0.01|train $TINY --lr 0.01 --min-lr 0.1
2|--momentum 0.9: this run does not read it (only --optim sgd does; Muon|train $TINY --momentum 0.9
2|--schedule invsqrt needs --warmup >= 1|train $TINY --schedule invsqrt --warmup 0
2|--data $D/none.txt: No such file or directory|train $TINY --data $D/none.txt
2|--data $D/adir is a directory without token shards|train $TINY --data $D/adir
2|$D/empty.txt is empty|train $TINY --data $D/empty.txt
2|$D/nul.txt holds a NUL byte at offset 4|train $TINY --data $D/nul.txt
2|$D/bad.bin: not an mt token file|train $TINY --data $D/bad.bin
2|$D/trunc.bin: the header announces|train $TINY --data $D/trunc.bin
2|--out $D/t.txt: $D/t.txt is a file, expected a directory|train $TINY --out $D/t.txt
2|--out /proc/mt-test: cannot write in /proc|train $TINY --out /proc/mt-test
2|--out $D/run already holds another run (there 'lr = 0.003', now 'lr = 0.01')|train $TINY --steps 2 --lr 0.01 --out $D/run
2|--out $D/run already holds another run (there 'lr = 0.003', now 'lr = 0.01')|train $TINY --steps 2 --lr 0.01 --out $D/run//
2|--vocab-size 512: this run does not read it (only --tokenizer bpe|train $TINY --vocab-size 512 --out $D/vs
2|--tokenizer char: this run does not read it (only --data of text|train $TINY --data $D/ok.bin --tokenizer char --out $D/tc
2|$D/key.ini:2: unknown key 'n_layers' (did you mean n-layer?)|train $TINY --config $D/key.ini
2|$D/ngpt_alpha.ini:1: unknown key 'ngpt_alpha' (did you mean ngpt-alpha-init or ngpt-alpha-scale?)|train $TINY --config $D/ngpt_alpha.ini
2|$D/dyt-weight.ini:1: unknown key 'dyt-weight' (did you mean dyt-weight-init?)|train $TINY --config $D/dyt-weight.ini
2|$D/qk-affine.ini:1: unknown key 'qk-affine' (did you mean qk-norm-affine?)|train $TINY --config $D/qk-affine.ini
2|$D/bias.ini:1: unknown key 'bias' (did you mean no-bias?)|train $TINY --config $D/bias.ini
2|unknown flag --qk-affine (did you mean --qk-norm-affine?)|train $TINY --qk-affine
2|--nesterov true: this run does not read it (only --optim sgd does; Muon's momentum is --muon-momentum (Nesterov's unless --no-nesterov), Lion's --lion-beta1 and --lion-beta2|train $TINY --optim muon --nesterov
2|--momentum 0.9: this run does not read it (only --optim sgd does; Muon's momentum is --muon-momentum|train $TINY --optim lion --momentum 0.9
2|$D/type.ini:1: lr: 'fast' is not a finite number|train $TINY --config $D/type.ini
2|$D/section.ini:1: '[train]': config files have no sections|train $TINY --config $D/section.ini
2|$D/cli.ini:1: 'resume' is a command-line flag only|train $TINY --config $D/cli.ini
2|$D/dup.ini:3: 'lr' is set on line 1 already: keep one|train $TINY --config $D/dup.ini
2|$D/utf16.ini: the file is UTF-16|train $TINY --config $D/utf16.ini
2|$D/utf16be.ini holds a NUL byte at offset 0|train $TINY --config $D/utf16be.ini
2|$D/nul.ini holds a NUL byte at offset 13|train $TINY --config $D/nul.ini
2|$D/bom.ini:2: unknown key 'n_layers'|train $TINY --config $D/bom.ini
2|$D/quote.ini:1: data: a value that starts with a quote ends with one|train $TINY --config $D/quote.ini
2|--resume: no checkpoint $W/none/model.safetensors|train --resume --out $W/none
2|the model options differ: n_layer is 1 in the checkpoint, 2 now|train --resume --out $D/run --n-layer 2
2|optim.safetensors holds the optimizer of step 3, $D/mixed/model.safetensors the model of step 2, and $D/mixed/optim.prev.safetensors no state of that step: the files are not of one save; put back the optimizer state of step 2|train --resume --out $D/mixed
2|a resumed run keeps its model, but the model options differ: arch is "llama" in the checkpoint, "ngpt" now|train --resume --out $D/llama --arch ngpt
2|holds a vit run, and --model gpt was given: a run continues as the model it is|train --resume --out $D/vit --model gpt
2|the data differs from the run's: src_ctx is 5 in the checkpoint, 3 now (a value --data $D/d2.dict decides|train --resume --out $D/ed --data $D/d2.dict
2|more than 200 distinct phones: not a pronunciation dictionary?|train --model encdec --data $PWD/data/tinyshakespeare.txt --threads 1 --out $D/edx
1|GiB available (parameters and gradients|train $TINY --n-embd 65536 --n-head 1
1|activations of a batch of 4000000 x 16 tokens|train $TINY --batch 4000000
1|GiB available (parameters and gradients|train $TINY --n-ff 2147483647
1|GiB available (the step's drawn batch of --batch 2 x --grad-accum 1000000000 rows)|train $TINY --grad-accum 1000000000
1|GiB available (the step's drawn batch of --batch 2147483647 x --grad-accum 1 rows)|train $TINY --batch 2147483647
1|n_layer = 2147483647: out of memory for the table of 2147483647 blocks|train $TINY --n-layer 2147483647
2|unknown flag --temperatur (did you mean --temperature?)|infer --checkpoint $M --temperatur 1
2|--checkpoint FILE is required|infer --prompt hi
2|--checkpoint $D/none: No such file or directory|infer --checkpoint $D/none
2|--checkpoint $D/adir is a directory|infer --checkpoint $D/adir
2|$D/t.txt: header length|infer --checkpoint $D/t.txt
2|not an mt checkpoint of a gpt model|infer --checkpoint $D/run/optim.safetensors
2|--top-p: 0 is out of range: expected from 1e-09 to 1|infer --checkpoint $M --top-p 0
2|--tokens: -1 is out of range|infer --checkpoint $M --tokens -1
2|--temperature: -1 is out of range|infer --checkpoint $M --temperature -1
2|--prompt is empty|infer --checkpoint $M --prompt=
2|--classify $D/fifo is not a regular file|infer --checkpoint $D/vit/model.safetensors --classify $D/fifo
2|--score $D/adir is a directory|infer --checkpoint $M --score $D/adir
2|--info $D/none: No such file or directory|infer --info $D/none
2|at index 0: weights of 2^64 (1.84467e+19) or more overflow float arithmetic|infer --checkpoint $D/huge/model.safetensors --score $D/t.txt
2|the model's weights make non-finite logits|infer --checkpoint $D/nanlogits/model.safetensors --score $D/t.txt
2|the logits of sampled token 0 hold|infer --checkpoint $D/nanlogits/model.safetensors --prompt hi
2|--out $D/fifolink is a pipe: expected a regular file|export --checkpoint $ML --format gguf --out $D/fifolink
2|--out $D/fifo is a pipe|export --checkpoint $ML --format gguf --out $D/fifo
2|--out $D/adir is a directory|export --checkpoint $ML --format gguf --out $D/adir
2|--tokenizer-out $D/fifo is a pipe|export --checkpoint $ML --format llama2c --out m.bin --tokenizer-out $D/fifo
2|--out $D/stdout names an open file descriptor|export --checkpoint $ML --format gguf --out $D/stdout
2|--out /dev/stdout names an open file descriptor|export --checkpoint $ML --format gguf --out /dev/stdout
2|--prepare $D/stdout names an open file descriptor|train --data $D/t.txt --prepare $D/stdout
2|--prepare $D/fifo is a pipe|train --data $D/t.txt --prepare $D/fifo
2|--config $D/fifo is a pipe: expected a regular file|train $TINY --config $D/fifo
2|$D/set/meta.json is a pipe: expected a regular file|train $TINY --data $D/set
2|$D/emptyset/train_000001.bin is empty: expected an llm.c shard|train $TINY --data $D/emptyset
2|$D/damaged.bin: starts with 20240521 (version 1, 18000 ids), close to an llm.c shard's magic 20240520: this looks like a damaged llm.c header|train $TINY --data $D/damaged.bin --data-vocab 65536
2|without a meta.json beside it, named as ./train --prepare --format llmc names its shards: that writes meta.json last, so this looks like an unfinished prepare|train $TINY --data $D/unfinished
2|$D/fifo-optim.safetensors/optim.safetensors is a pipe|train --resume --out $D/fifo-optim.safetensors --steps 3
2|$D/fifo-metrics.csv/metrics.csv is a pipe|train --resume --out $D/fifo-metrics.csv --steps 3
2|$D/fifo-diag_grad.csv/diag_grad.csv is a pipe|train --resume --out $D/fifo-diag_grad.csv --steps 3 --diag-grad-every 1
2|$D/fifo-diag_attn.csv/diag_attn.csv is a pipe|train --resume --out $D/fifo-diag_attn.csv --steps 3 --diag-attn-every 1
2|the class names file $D/fifo is a pipe|preview --data $PWD/data/mnist --classes $D/fifo --out $D/g.png
2|--out $D/fifo is a pipe|preview --data $PWD/data/mnist --out $D/fifo
2|--data $D/none: No such file or directory: expected an image folder|preview --data $D/none --out $D/g.png
2|none of the 1 files in its 1 class subdirectories is an image|preview --data $D/junk --channels 3 --out $D/g.png
2|make a 4294972194x4294972230 preview; it has at most 16384|preview --data $PWD/data/mnist --size 86x86 --scale 16647179 --n 9 --out $D/g.png
1|out of memory for 10000 images of 65536x65536x4|preview --data $PWD/data/mnist --size 65536x65536 --channels 4 --out $D/g.png
EOF
}

n=0
# under make asan an allocation too big to be had returns NULL, as malloc does (out of memory is
# a message and exit 1, not an ASan report)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1"
cp -p "$M" "$T/model.before"
cases >"$T/cases"
while IFS='|' read -r want text cmd; do
    n=$((n + 1))
    touch "$T/stamp"
    prog=${cmd%% *}
    # (a timeout: a case that waits on a pipe fails with 124 instead of hanging the test)
    (cd "$W" && exec timeout 30 "$OLDPWD/$B/$prog" ${cmd#* } >"$L" 2>&1 </dev/null)
    rc=$?
    [ "$rc" -eq "$want" ] || fail "case $n ($cmd): exit $rc, expected $want: $(cat "$L")"
    grep -qF -- "$text" "$L" || fail "case $n ($cmd): the message does not say '$text': $(cat "$L")"
    written=$(find "$T" -newer "$T/stamp" ! -type d)
    [ -z "$written" ] && [ -z "$(ls -A "$W")" ] && [ ! -e /proc/mt-test ] ||
        fail "case $n ($cmd) wrote: $written $(ls -A "$W")"
done <"$T/cases"
cmp -s "$M" "$T/model.before" || fail "a refused run changed the checkpoint in its --out"
[ -L "$D/fifolink" ] && [ -p "$D/fifo" ] || fail "an export replaced a link or a pipe"
# an export through a symbolic link to a file replaces the file and keeps the link
echo old >"$D/target.gguf" && ln -s target.gguf "$D/link.gguf"
"$B/export" --checkpoint "$ML" --format gguf --out "$D/link.gguf" >"$L" 2>&1 || fail "$(cat "$L")"
[ -L "$D/link.gguf" ] && [ "$(head -c 4 "$D/target.gguf")" = GGUF ] ||
    fail "an export through a link: $(ls -l "$D/link.gguf" "$D/target.gguf")"
[ $n -ge 50 ] || fail "only $n cases ran"

# a full disk while logging (a file size limit of 1 KiB: metrics.csv reaches it first): the run
# stops naming the file, which ends with a whole row (it kept the part of a row that fitted)
(ulimit -f 2 && trap '' XFSZ && exec "$B/train" $TINY --steps 100 --log-every 1 --eval-every 0 \
    --save-every 0 --out "$T/full") >/dev/null 2>"$L" # (stdout would reach the limit too)
rc=$?
[ $rc -eq 1 ] && grep -q "cannot write the metrics file" "$L" || fail "a full disk: exit $rc: $(cat "$L")"
[ "$(tail -c 1 "$T/full/metrics.csv" | od -An -c | tr -d ' ')" = '\n' ] &&
    awk -F, 'NF != 8 { exit 1 }' "$T/full/metrics.csv" ||
    fail "a full disk left a partial row: $(tail -n 2 "$T/full/metrics.csv")"

# a set of many short shards, several of them val files: the training split is the train files
# alone (the spans after it had their lengths wrapped below zero: a crash, SIGSEGV); shards all
# shorter than a window are refused as such
head -c 3000 "$D/t.txt" >"$D/t3.txt"
"$B/train" --data "$D/t3.txt" --prepare "$D/short" --format llmc --shard-tokens 12 >"$L" 2>&1 ||
    fail "short shards: $(cat "$L")"
H="--n-layer 1 --n-head 2 --n-embd 16 --batch 2 --threads 1 --steps 20 --eval-every 10"
"$B/train" --data "$D/short" $H --n-ctx 8 --out "$T/short" >"$L" 2>&1 ||
    fail "a set of 25 val shards: exit $?: $(cat "$L")"
"$B/train" --data "$D/short" $H --n-ctx 16 --out "$W/short" >"$L" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "the training split has 2700 tokens in shards shorter than a window" "$L" &&
    [ -z "$(ls -A "$W")" ] || fail "shards shorter than a window: exit $rc: $(cat "$L")"

# a shard changed while a run maps it: truncated to its header (a read past its end: SIGBUS), or
# its ids written over (65535, beyond the vocabulary): the run ends with exit 1 naming the file
# (one that goes on is stopped at 30 s: exit 124)
for how in truncate overwrite; do
    mkdir -p "$T/$how" && cp "$D/unfinished/train_000000.bin" "$T/$how/" &&
        echo '{"vocab_size": 256}' >"$T/$how/meta.json"
    timeout 30 "$B/train" --data "$T/$how" --n-layer 1 --n-head 2 --n-embd 16 --n-ctx 16 --batch 4 \
        --threads 1 --steps 100000000 --log-every 100 --eval-every 0 --save-every 0 \
        --out "$T/$how.out" >/dev/null 2>"$L" </dev/null &
    pid=$!
    # (once the metrics file is there, the run has mapped its shard and trains: a fixed delay
    # was too short under qemu)
    while [ ! -e "$T/$how.out/metrics.csv" ] && running $pid; do sleep 0.01; done
    if [ $how = truncate ]; then truncate -s 1024 "$T/$how/train_000000.bin"
    else head -c 36000 /dev/zero | tr '\0' '\377' |
        dd of="$T/$how/train_000000.bin" bs=1024 seek=1 conv=notrunc 2>/dev/null
    fi
    wait $pid
    rc=$?
    grep -q "$T/$how/train_000000.bin: the .* while training read it" "$L" && [ $rc -eq 1 ] ||
        fail "a shard changed under a run ($how): exit $rc: $(cat "$L")"
done

# --out o/ is the run of --out o (its saved options say o): the same run starts over
"$B/train" $TINY --steps 2 --out "$D/run/" >"$L" 2>&1 || fail "--out with a slash: $(cat "$L")"

# a path with a # (a comment starts at a # after a blank): given as a flag, it is saved and
# resumed; in a config file it is read as it is, quoted or not
cp "$D/t.txt" "$D/d#7.txt"
H="--n-layer 1 --n-head 2 --n-embd 16 --n-ctx 16 --batch 2 --threads 1 --steps 1"
"$B/train" --data "$D/d#7.txt" $H --out "$T/hash" >"$L" 2>&1 &&
    "$B/train" --resume --out "$T/hash" --steps 2 >"$L" 2>&1 || fail "a path with #: $(cat "$L")"
printf 'data = %s # a comment\n' "$D/d#7.txt" >"$D/hash.ini"
printf 'data = "%s" # a comment\n' "$D/d#7.txt" >"$D/hashq.ini"
for ini in hash hashq; do
    "$B/train" --config "$D/$ini.ini" $H --out "$T/$ini.out" >"$L" 2>&1 &&
        grep -qF "d#7.txt: 20000 tokens" "$L" || fail "a path with # in $ini.ini: $(cat "$L")"
done

# oneDNN limited by its environment below bf16 (where bf16 runs at all): a refusal naming the
# variable, before anything is written (it was an abort in the first product)
if has_bf16; then
    for prog in "train $TINY --steps 1 --out $W/bf16" "infer --checkpoint $M --prompt hi"; do
        (cd "$W" && ONEDNN_MAX_CPU_ISA=AVX2 exec "$OLDPWD/$B/"$prog --precision bf16 >"$L" 2>&1)
        rc=$?
        [ $rc -eq 2 ] && grep -qF "ONEDNN_MAX_CPU_ISA=AVX2" "$L" && [ -z "$(ls -A "$W")" ] ||
            fail "bf16 under ONEDNN_MAX_CPU_ISA=AVX2 ($prog): exit $rc: $(cat "$L")"
    done
else
    skip_case "ONEDNN_MAX_CPU_ISA" "$BF16_WHY"
fi

# refusals in time linear in the size of the input (look-ups by name are hashed): a model of
# 12000 blocks (144k parameter tensors) and a file of 150k one-float tensors are refused in
# seconds (each took minutes with the linear look-ups: 25 s at 8000 blocks, 16 s at 100k tensors)
many() { # many N FILE: a safetensors file of N one-float tensors
    LC_ALL=C awk -v n="$1" 'BEGIN { printf "{"; for (i = 0; i < n; i++)
        printf "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%d,%d]}",
               i ? "," : "", i, 4 * i, 4 * i + 4; printf "}" }' >"$2.json"
    LC_ALL=C awk -v l="$(wc -c <"$2.json")" \
        'BEGIN { for (i = 0; i < 8; i++) { printf "%c", l % 256; l = int(l / 256) } }' >"$2"
    cat "$2.json" >>"$2" && rm "$2.json" && head -c $((4 * $1)) /dev/zero >>"$2"
}
many 150000 "$D/many.safetensors"
ms() { echo $(($(date +%s%N) / 1000000)); }
for cmd in "train --data $D/t.txt --n-layer 12000 --n-embd 16 --n-head 2 --steps 0 --threads 1" \
    "infer --info $D/many.safetensors"; do
    t0=$(ms)
    (cd "$W" && exec "$OLDPWD/$B/"$cmd >"$L" 2>&1 </dev/null) && fail "$cmd was not refused"
    [ $(($(ms) - t0)) -lt 15000 ] || fail "$cmd took $(($(ms) - t0)) ms to refuse: $(cat "$L")"
done

# deep models whatever this machine's memory: each trains (--steps 0) or is refused before any
# reservation, for its activations or its step arena, with what to lower; never "cannot reserve"
# (2000 blocks passed the memory check, then the kernel refused the 25 GiB arena, no hint)
for layers in 2000 4000 8000 16000; do
    (cd "$W" && exec "$OLDPWD/$B/train" --data "$D/t.txt" --n-layer $layers --n-embd 16 \
        --n-head 2 --steps 0 --out "$T/deep$layers" >"$L" 2>&1 </dev/null)
    rc=$?
    [ $rc -eq 0 ] || { [ $rc -eq 1 ] && grep -q "needs .* GiB available\|more than this machine's \
memory and swap.*use a smaller --batch" "$L"; } || fail "--n-layer $layers exited $rc: $(cat "$L")"
done

# crash safety and exact resume
# (saving is I/O only: the reference saves once, and the last resume too, to be quick)
R="$TINY --batch 4 --steps 5000 --log-every 1 --eval-every 0 --eval-batches 1
   --schedule cosine --warmup 20 --dropout 0.1"
"$B/train" $R --save-every 0 --out "$T/ref" >"$L" 2>&1 || fail "uninterrupted run: $(cat "$L")"
ms=$(step_ms "$T/ref/metrics.csv")
kills=0 starts=0
while [ $kills -lt 20 ] && [ $starts -lt 60 ]; do
    starts=$((starts + 1))
    if [ -e "$T/k/model.safetensors" ]; then
        "$B/train" --resume --out "$T/k" >"$L" 2>&1 &
    else
        "$B/train" $R --save-every 1 --out "$T/k" >"$L" 2>&1 &
    fi
    pid=$!
    # 30 to 400 ms: anywhere in the start, a step or a save; every other start after it logged
    # a step, within two steps, which a slow start (qemu, a loaded machine) would outlast
    if [ $((starts % 2)) -eq 0 ]; then
        wait_step "$T/k/metrics.csv" "$(last_step "$T/k/metrics.csv")" $pid && random_ms $((2 * ms))
    else sleep "0.$(printf '%03d' $((30 + $(od -An -N2 -tu2 /dev/urandom) % 371)))"; fi
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    rc=$?
    if [ $rc -eq 0 ]; then fail "the run finished after $kills kills: use more steps"; break; fi
    [ $rc -eq 137 ] || { fail "a (resumed) run exited $rc: $(cat "$L")"; break; }
    kills=$((kills + 1))
    if [ -e "$T/k/model.safetensors" ]; then
        "$B/infer" --info "$T/k/model.safetensors" >"$L" 2>&1 ||
            fail "after kill $kills the checkpoint does not load: $(cat "$L")"
    fi
done
[ $kills -ge 20 ] || fail "only $kills kills"
step=$(grep '^steps  ' "$L" | tr -s ' ' | cut -d' ' -f2)
"$B/train" --resume --out "$T/k" --save-every 0 >"$L" 2>&1 || fail "the last resume exited $?: $(cat "$L")"
grep -q "resumed" "$L" || fail "the last run did not resume"
# the tensors (the headers differ in the saved --out)
tensors() { tail -c +$(($(od -An -tu8 -N8 "$1" | tr -d ' ') + 9)) "$1"; }
tensors "$T/ref/model.safetensors" >"$T/ref.data"
tensors "$T/k/model.safetensors" >"$T/k.data"
[ -s "$T/ref.data" ] && cmp -s "$T/ref.data" "$T/k.data" || fail "killed and resumed: other weights"
cmp -s "$T/ref/optim.safetensors" "$T/k/optim.safetensors" || fail "killed and resumed: other optimizer state"
[ "$(cut -d, -f1,2,4,5 "$T/ref/metrics.csv")" = "$(cut -d, -f1,2,4,5 "$T/k/metrics.csv")" ] ||
    fail "killed and resumed: other losses, learning rates or gradient norms"
echo "test_reliability: $n bad inputs; $kills kills (the last at step ${step:-?} of 5000), resumed to identical bits"
finish
