#!/usr/bin/env bash
# run_chat.sh — `kestrel run MODEL` without -p (interactive chat) driven through
# a pipe, checked against the server:
#   1. a piped conversation (/system, two user turns — the second written over
#      two lines with a trailing backslash — then /clear and the first turn
#      again) at --temp 0 -n 32 prints exactly the replies that POST
#      /v1/chat/completions (temperature 0, max_tokens 32) of `kestrel serve`
#      gives for the same growing conversation, each followed by a newline;
#      every reply is non-empty, and the reply after /clear equals the first
#      (the history was dropped, the system message kept). Any difference in
#      rendering (template, system message, continuation lines, assistant
#      content put back), tokenization or generation makes this fail.
#   2. a second run of the same input prints the same bytes (determinism).
#   3. a message longer than --ctx-size is refused with a /clear hint, without
#      a crash, and the next message is still answered.
#   4. a model directory without a chat template is a one-line error, exit != 0.
set -uo pipefail
KESTREL=${KESTREL:-build/kestrel}
cd "$(dirname "$0")/../.."
. scripts/lib/serve.sh
server_test_setup run_chat
fail=0

SYS='You are a helpful coding assistant.'
U1='Write a Python function `add`: Return the sum of a and b.'
U2A='Rename `a` to `x` in this code:'
U2B='def add(a, b): return a + b'
printf '/system %s\n%s\n%s\\\n%s\n/clear\n%s\n' "$SYS" "$U1" "$U2A" "$U2B" "$U1" > "$work/in"

"$KESTREL" run "$MODEL" --temp 0 -n 32 < "$work/in" > "$work/out1" 2> "$work/err1"; rc=$?
[ $rc -eq 0 ] || { echo "    FAIL run_chat: exit status $rc"; cat "$work/err1"; fail=1; }
n_speed=$(grep -c '^kestrel: prompt [0-9]* tokens' "$work/err1")
[ "$n_speed" = 3 ] || { echo "    FAIL run_chat: expected 3 speed lines on stderr, got $n_speed"; cat "$work/err1"; fail=1; }

# 2. determinism
"$KESTREL" run "$MODEL" --temp 0 -n 32 < "$work/in" > "$work/out2" 2>/dev/null
cmp -s "$work/out1" "$work/out2" || { echo "    FAIL run_chat: a second run printed different text"; fail=1; }

# 1. the same conversation through /v1/chat/completions
start_server run_chat "$work/log"
if ! python3 - "http://127.0.0.1:$port" "$work/want" "$SYS" "$U1" "$U2A"$'\n'"$U2B" <<'PY'
import json, sys, urllib.request
base, out, sys_msg, u1, u2 = sys.argv[1:]
def ask(msgs):
    body = json.dumps({"model": "tinycoder", "messages": msgs, "temperature": 0, "max_tokens": 32}).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", body, {"content-type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=120))["choices"][0]["message"]["content"] or ""
msgs = [{"role": "system", "content": sys_msg}, {"role": "user", "content": u1}]
c1 = ask(msgs)
msgs += [{"role": "assistant", "content": c1}, {"role": "user", "content": u2}]
c2 = ask(msgs)
c3 = ask([{"role": "system", "content": sys_msg}, {"role": "user", "content": u1}])
for i, c in enumerate((c1, c2, c3)):
    if not c.strip():
        print(f"    FAIL run_chat: the server's reply {i + 1} is empty"); sys.exit(1)
if c3 != c1:
    print("    FAIL run_chat: the server answered the same conversation differently"); sys.exit(1)
open(out, "w", encoding="utf-8").write(c1 + "\n" + c2 + "\n" + c3 + "\n")
PY
then fail=1
elif ! cmp -s "$work/want" "$work/out1"; then
    echo "    FAIL run_chat: the chat's replies differ from /v1/chat/completions':"
    diff "$work/want" "$work/out1" | head -10; fail=1
fi

# 3. over the context: refused with a hint, then the next (short) message is answered
{ printf 'x%.0s ' $(seq 1 200); printf '\nhi\n'; } > "$work/in3"
"$KESTREL" run "$MODEL" --temp 0 -n 8 --ctx-size 64 < "$work/in3" > "$work/out3" 2> "$work/err3"; rc=$?
if [ $rc -ne 0 ] || ! grep -q 'context holds 64.*/clear' "$work/err3" || [ "$(grep -c '^kestrel: prompt' "$work/err3")" != 1 ] \
   || [ ! -s "$work/out3" ]; then
    echo "    FAIL run_chat: over-long message (rc $rc):"; cat "$work/err3"; fail=1
fi

# 4. no chat template
mkdir "$work/notmpl"
for f in "$MODEL"/*; do ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$work/notmpl/"; done
rm "$work/notmpl/tokenizer_config.json"
echo '{"eos_token": "<|im_end|>"}' > "$work/notmpl/tokenizer_config.json"
echo hi | "$KESTREL" run "$work/notmpl" > /dev/null 2> "$work/err4"; rc=$?
if [ $rc -eq 0 ] || ! grep -q 'no usable chat template' "$work/err4" || [ "$(wc -l < "$work/err4")" != 1 ]; then
    echo "    FAIL run_chat: model without a chat template (rc $rc):"; cat "$work/err4"; fail=1
fi

[ $fail -eq 0 ] && echo "    run_chat: 3 piped turns equal /v1/chat/completions at temperature 0; deterministic; context and template errors handled"
exit $fail
