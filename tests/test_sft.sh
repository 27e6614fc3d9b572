#!/bin/sh
# --task sft and ./infer --chat as a user runs them: a tiny GPT instruction-tuned on 600
# conversations of sums (prompt/response pairs and chat messages with a system turn) learns to
# answer them (the validation loss on the replies falls below a quarter of its start, and the
# greedy reply to a held-out sum is right), its checkpoint keeps the chat template, a run resumes;
# --chat - answers each line of stdin; a model not tuned on the template, --chat with --prompt,
# a line of neither form (named by its number), a conversation longer than a row and the ids
# tokenizer are refused (exit 2).
NAME=test_sft
. "$(dirname "$0")/lib.sh"
# sums a + b with a, b < 10: pairs on odd lines, messages on even ones
awk 'BEGIN { srand(7); for (i = 0; i < 600; i++) { a = int(rand() * 10); b = int(rand() * 10);
    if (i % 2) printf "{\"prompt\": \"%d+%d=\", \"response\": \"%d\"}\n", a, b, a + b;
    else printf "{\"messages\": [{\"role\": \"system\", \"content\": \"add\"}, " \
        "{\"role\": \"user\", \"content\": \"%d+%d=\"}, {\"role\": \"assistant\", " \
        "\"content\": \"%d\"}]}\n", a, b, a + b } }' >"$T/sums.jsonl"
TINY="--task sft --data $T/sums.jsonl --n-layer 2 --n-head 2 --n-embd 64 --n-ctx 64 --batch 32
      --lr 3e-3 --eval-every 100 --eval-batches 2 --threads 2"
"$B/train" $TINY --steps 300 --out "$T/run" >"$T/log" 2>&1 || fail "train exited $?: $(tail -3 "$T/log")"
grep -q "^data .*600 conversations, .* trained: the assistants'; byte tokenizer" "$T/log" ||
    fail "data line: $(grep '^data' "$T/log")"
awk -F, 'NR > 1 && $3 != "" { v[++n] = $3 } END { exit !(n >= 2 && v[n] < v[1] / 4) }' \
    "$T/run/metrics.csv" || fail "the replies' validation loss did not fall: $(cut -d, -f1,3 "$T/run/metrics.csv" | tr '\n' ' ')"
grep -aq 'chat_template' "$T/run/model.safetensors" || fail "the checkpoint has no chat template"
out=$("$B/infer" --checkpoint "$T/run/model.safetensors" --chat "7+8=" --temperature 0 2>&1) ||
    fail "infer --chat exited $?: $out"
[ "$out" = 15 ] || fail "the reply to 7+8= is '$out'"
out=$(printf '2+2=\n9+9=\n' | "$B/infer" --checkpoint "$T/run/model.safetensors" --chat - \
    --temperature 0 2>&1) || fail "infer --chat - exited $?: $out"
[ "$(echo "$out" | wc -l)" -eq 2 ] || fail "a conversation of two turns: '$out'"
"$B/train" $TINY --steps 320 --resume --out "$T/run" >"$T/log" 2>&1 ||
    fail "resume exited $?: $(tail -3 "$T/log")"

refused() { # what, expected text, command...
    what=$1 want=$2
    shift 2
    "$@" >"$T/err" 2>&1
    rc=$?
    [ $rc -eq 2 ] && grep -qF -- "$want" "$T/err" || fail "$what: exit $rc: $(cat "$T/err")"
}
"$B/train" --data data/tinyshakespeare.txt --n-layer 1 --n-head 1 --n-embd 8 --n-ctx 8 \
    --steps 1 --out "$T/text" >/dev/null 2>&1 || fail "a text run"
refused "--chat on a text model" "was not instruction-tuned" \
    "$B/infer" --checkpoint "$T/text/model.safetensors" --chat hi
refused "--chat with --prompt" "--chat and --prompt" \
    "$B/infer" --checkpoint "$T/run/model.safetensors" --chat hi --prompt x
printf '{"prompt": "a", "response": "b"}\n{"prompt": "a"}\n' >"$T/bad.jsonl"
refused "a line of neither form" "bad.jsonl:2: expected {\"prompt\"" \
    "$B/train" --task sft --data "$T/bad.jsonl" --steps 1 --out "$T/bad"
refused "a long conversation" "the conversation is 53 tokens with the chat template; a row holds n_ctx + 1 = 17" \
    "$B/train" --task sft --data "$T/sums.jsonl" --n-ctx 16 --steps 1 --out "$T/bad"
refused "--tokenizer ids" "not ids" \
    "$B/train" --task sft --data "$T/sums.jsonl" --tokenizer ids --steps 1 --out "$T/bad"
[ -e "$T/bad" ] && fail "a refused run left $T/bad"
finish
