#!/usr/bin/env bash
# tokenize.sh — `kestrel tokenize PATH TEXT [--add-special]` end to end: ids
# as one JSON array on one line (model dir or tokenizer.json path; TEXT "-"
# from standard input), and bad input gives one line on stderr naming the
# file, exit status 1.
set -uo pipefail
KESTREL=${KESTREL:-build/kestrel}
cd "$(dirname "$0")/../.."
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail=0

# check NAME WANT CMD...: stdout equals WANT, exit 0
check() {
    local name=$1 want=$2; shift 2
    local got; got=$("$@" 2> "$work/err"); local rc=$?
    if [ $rc -ne 0 ] || [ "$got" != "$want" ]; then
        echo "    FAIL $name: exit $rc, got '$got', want '$want' ($(head -1 "$work/err"))"; fail=1
    fi
}
# expect_err NAME PATTERN CMD...: exit 1, one stderr line matching PATTERN
expect_err() {
    local name=$1 pat=$2; shift 2
    "$@" > /dev/null 2> "$work/err"; local rc=$?
    if [ $rc -ne 1 ] || [ "$(grep -c . "$work/err")" -ne 1 ] || ! grep -qE -- "$pat" "$work/err"; then
        echo "    FAIL $name: exit $rc, stderr: $(cat "$work/err")"; fail=1
    fi
}

cat > "$work/tokenizer.json" <<'JSON'
{"added_tokens": [{"id": 9, "content": "<s>", "special": true}],
 "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
   {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [9], "tokens": ["<s>"]}}},
 "model": {"type": "BPE", "vocab": {"a": 3, "b": 4, "ab": 5, "c": 6}, "merges": ["a b"]}}
JSON
check "file path" "[5, 6, 5]" "$KESTREL" tokenize "$work/tokenizer.json" "abcab"
check "model dir" "[5, 6, 5]" "$KESTREL" tokenize "$work" "abcab"
check "add special" "[9, 5, 9, 3]" "$KESTREL" tokenize --add-special "$work" "ab<s>a"
check "empty text" "[]" "$KESTREL" tokenize "$work" ""
# "-": standard input, also past the ~128 KB a single argument may hold
check "stdin" "[5, 6, 5]" sh -c 'printf abcab | "$1" tokenize "$2" -' _ "$KESTREL" "$work"
check "stdin empty" "[]" sh -c '"$1" tokenize "$2" - < /dev/null' _ "$KESTREL" "$work"
want=$(awk 'BEGIN { printf "["; for (i = 0; i < 100000; i++) printf (i ? ", 5" : "5"); printf "]" }')
check "stdin 200 KB" "$want" sh -c 'awk "BEGIN { for (i = 0; i < 100000; i++) printf \"ab\" }" | "$1" tokenize "$2" -' _ "$KESTREL" "$work"

shared=${KESTREL_SHARED:-../shared}
if [ -f "$shared/models/tinycoder/tokenizer.json" ]; then
    check "tinycoder" "[39, 460, 315, 337, 6448]" "$KESTREL" tokenize "$shared/models/tinycoder" "Hello world"
else
    echo "    (tinycoder case skipped: $shared/models/tinycoder absent)"
fi

printf 'not json' > "$work/bad.json"
expect_err "not json" "bad\\.json: line 1" "$KESTREL" tokenize "$work/bad.json" "x"
printf '{"model": {"type": "Unigram", "vocab": []}}' > "$work/uni.json"
expect_err "unigram" "uni\\.json: model\\.type: unsupported .*Unigram" "$KESTREL" tokenize "$work/uni.json" "x"
expect_err "missing" "/nonexistent/tok\\.json" "$KESTREL" tokenize /nonexistent/tok.json "x"
expect_err "bad utf-8" "not valid UTF-8" "$KESTREL" tokenize "$work" "$(printf 'a\xffb')"

[ $fail -eq 0 ] && echo "    tokenize.sh: ok"
exit $fail
