#!/usr/bin/env bash
# responses_smoke.sh — the OpenAI Responses API of `kestrel serve` against
# tinycoder, over real HTTP (curl): string and item input, tools in the flat
# format, SSE streaming (event order, event/data type agreement, contiguous
# sequence_number, deltas adding up to the final text), GET /v1/responses/{id}
# and /input_items, previous_response_id chaining, store:false, and bad
# input (status + OpenAI error body); the server must stay up and exit 0 on
# SIGINT.
set -uo pipefail
KESTREL=${KESTREL:-build/kestrel}
cd "$(dirname "$0")/../.."
. scripts/lib/serve.sh
server_test_setup responses_smoke
command -v curl > /dev/null || { echo "    SKIP responses_smoke: curl not found"; exit 0; }
fail=0

start_server responses_smoke "$work/log" --ctx-size 512 --max-concurrent 2
base="http://127.0.0.1:$port"

# req NAME METHOD PATH [BODY]: response body in $work/NAME, status on stdout
req() {
    local name=$1 method=$2 path=$3
    if [ $# -ge 4 ]; then
        printf '%s' "$4" > "$work/$name.req"
        curl -s -o "$work/$name" -w '%{http_code}' -X "$method" -H 'Content-Type: application/json' \
            --data-binary @"$work/$name.req" "$base$path"
    else
        curl -s -o "$work/$name" -w '%{http_code}' -X "$method" "$base$path"
    fi
}
# check NAME PYTHON-EXPR...: runs python over $work with the named files loaded
check() {
    local name=$1; shift
    if python3 - "$work" "$@" > "$work/check.out" 2>&1; then
        echo "    ok   $name"
    else
        echo "    FAIL $name:"; sed 's/^/      /' "$work/check.out" | head -20; fail=1
    fi
}

# 1. string input, non-streaming
st=$(req r1 POST /v1/responses '{"model":"tinycoder","input":"Write a C function that adds two ints.","max_output_tokens":24,"temperature":0,"metadata":{"k":"v"}}')
check "string input (HTTP $st)" <<PY
import json, sys
w = sys.argv[1]; r = json.load(open(w + "/r1"))
assert "$st" == "200", r
assert r["object"] == "response" and r["id"].startswith("resp_"), r
assert r["status"] in ("completed", "incomplete"), r["status"]
if r["status"] == "incomplete": assert r["incomplete_details"] == {"reason": "max_output_tokens"}, r
m = r["output"][-1]
assert m["type"] == "message" and m["role"] == "assistant" and m["id"].startswith("msg_"), m
assert m["content"][0]["type"] == "output_text" and m["content"][0]["annotations"] == [], m
assert r["output_text"] == m["content"][0]["text"] and len(r["output_text"]) > 0
u = r["usage"]
assert u["total_tokens"] == u["input_tokens"] + u["output_tokens"] and 0 < u["output_tokens"] <= 24, u
assert u["input_tokens_details"] == {"cached_tokens": 0} and "reasoning_tokens" in u["output_tokens_details"], u
assert r["metadata"] == {"k": "v"} and r["max_output_tokens"] == 24 and r["temperature"] == 0, r
assert r["error"] is None and r["previous_response_id"] is None and r["text"] == {"format": {"type": "text"}}, r
PY

# 2. item input with tools (flat format) and a finished tool round trip
items='[{"role":"developer","content":"You are terse."},
 {"type":"message","role":"user","content":[{"type":"input_text","text":"Weather in "},{"type":"input_text","text":"Paris?"}]},
 {"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
 {"type":"function_call_output","call_id":"call_1","output":"sunny, 21C"},
 {"role":"assistant","content":[{"type":"output_text","text":"Sunny."}]},
 {"role":"user","content":"Thanks. Now write it as C code."}]'
tools='[{"type":"function","name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]'
st=$(req r2 POST /v1/responses "{\"input\":$items,\"tools\":$tools,\"instructions\":\"Answer in code.\",\"max_output_tokens\":16,\"tool_choice\":\"auto\"}")
check "item input + tools (HTTP $st)" <<PY
import json, sys
w = sys.argv[1]; r = json.load(open(w + "/r2"))
assert "$st" == "200", r
assert r["instructions"] == "Answer in code." and r["tool_choice"] == "auto", r
t = r["tools"][0]
assert t["type"] == "function" and t["name"] == "get_weather" and t["parameters"]["required"] == ["city"], t
assert r["usage"]["input_tokens"] > 100, r["usage"]  # the tools block and the round trip are in the prompt
assert all(o["type"] in ("message", "function_call", "reasoning") for o in r["output"]), r["output"]
PY
st=$(req r2i GET "/v1/responses/$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$work/r2")/input_items")
check "input_items (HTTP $st)" <<PY
import json, sys
w = sys.argv[1]; r = json.load(open(w + "/r2i"))
assert "$st" == "200" and r["object"] == "list" and r["has_more"] is False, r
types = [i["type"] for i in reversed(r["data"])]  # newest first
assert types == ["message", "message", "function_call", "function_call_output", "message", "message"], types
assert r["first_id"] == r["data"][0]["id"] and r["last_id"] == r["data"][-1]["id"], r
PY

# 3. streaming
printf '%s' '{"model":"tinycoder","input":"Write a Python function that reverses a string.","stream":true,"max_output_tokens":24,"temperature":0}' > "$work/s1.req"
curl -s -N -D "$work/s1.hdr" -H 'Content-Type: application/json' --data-binary @"$work/s1.req" "$base/v1/responses" > "$work/s1"
check "streaming events" <<'PY'
import json, sys
w = sys.argv[1]
hdr = open(w + "/s1.hdr").read().lower()
assert " 200" in hdr.splitlines()[0] and "text/event-stream" in hdr, hdr
evs = []
for block in open(w + "/s1").read().split("\n\n"):
    if not block.strip(): continue
    lines = block.split("\n")
    assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block
    d = json.loads(lines[1][6:])
    assert d["type"] == lines[0][7:], (lines[0], d["type"])
    evs.append(d)
types = [e["type"] for e in evs]
assert [e["sequence_number"] for e in evs] == list(range(len(evs))), "sequence numbers not 0..n-1"
assert types[:2] == ["response.created", "response.in_progress"], types[:3]
assert types[-1] in ("response.completed", "response.incomplete"), types[-1]
assert evs[0]["response"]["status"] == "in_progress" and evs[0]["response"]["output"] == []
want = ["response.output_item.added", "response.content_part.added", "response.output_text.delta"]
assert types[2:5] == want, types[2:6]
assert types[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"], types[-5:]
assert set(types[5:-4]) <= {"response.output_text.delta"}, types
item = evs[2]["item"]
assert item["type"] == "message" and item["status"] == "in_progress" and item["content"] == []
deltas = [e for e in evs if e["type"] == "response.output_text.delta"]
assert all(e["item_id"] == item["id"] and e["output_index"] == 0 and e["content_index"] == 0 for e in deltas)
text = "".join(e["delta"] for e in deltas)
done = next(e for e in evs if e["type"] == "response.output_text.done")
assert done["text"] == text, (done["text"], text)
fin = evs[-1]["response"]
assert fin["output"][0]["content"][0]["text"] == text and fin["output_text"] == text
assert fin["status"] == evs[-1]["type"].split(".")[1]
assert fin["id"] == evs[0]["response"]["id"]
json.dump(fin, open(w + "/s1.final", "w"))
PY

# 4. GET /v1/responses/{id}: the stored object (streamed and non-streamed)
id1=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$work/r1")
ids1=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$work/s1.final" 2> /dev/null)
st=$(req g1 GET "/v1/responses/$id1"); st2=$(req g2 GET "/v1/responses/$ids1")
check "GET /v1/responses/{id} (HTTP $st, $st2)" <<PY
import json, sys
w = sys.argv[1]
assert "$st" == "200" and "$st2" == "200"
assert json.load(open(w + "/g1")) == json.load(open(w + "/r1"))
assert json.load(open(w + "/g2")) == json.load(open(w + "/s1.final"))
PY

# 5. previous_response_id chaining (twice), store:false
st=$(req c1 POST /v1/responses "{\"previous_response_id\":\"$id1\",\"input\":[{\"role\":\"user\",\"content\":\"Now make it return a long.\"}],\"max_output_tokens\":8}")
cid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("id",""))' "$work/c1")
st2=$(req c2 POST /v1/responses "{\"previous_response_id\":\"$cid\",\"input\":\"And unsigned?\",\"max_output_tokens\":8,\"store\":false}")
cid2=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("id",""))' "$work/c2")
st3=$(req c3 GET "/v1/responses/$cid2")
check "previous_response_id chain (HTTP $st, $st2; store:false GET $st3)" <<PY
import json, sys
w = sys.argv[1]
r1, c1, c2 = (json.load(open(w + "/" + n)) for n in ("r1", "c1", "c2"))
assert "$st" == "200" and "$st2" == "200", (c1, c2)
assert c1["previous_response_id"] == r1["id"] and c2["previous_response_id"] == c1["id"]
u1, uc1, uc2 = r1["usage"], c1["usage"], c2["usage"]
# the previous turn (input + output) is in the prompt
assert uc1["input_tokens"] > u1["input_tokens"] + u1["output_tokens"], (u1, uc1)
assert uc2["input_tokens"] > uc1["input_tokens"] + uc1["output_tokens"], (uc1, uc2)
assert c2["store"] is False and "$st3" == "404", "$st3"
PY

# 6. bad input: status, OpenAI error body, param
long=$(python3 -c 'print("word " * 3000)')
bad() { # bad NAME WANT_STATUS WANT_PARAM BODY
    local st; st=$(req bad POST /v1/responses "$4")
    check "bad input: $1 -> $st" <<PY
import json, sys
b = json.load(open(sys.argv[1] + "/bad"))
assert "$st" == "$2", ("status", "$st")
e = b["error"]
assert isinstance(e["message"], str) and e["message"] and e["type"] in ("invalid_request_error",), b
assert "$3" == "-" or e["param"] == "$3", b
PY
}
bad "malformed JSON" 400 - '{"input": "x",'
bad "not an object" 400 - '["input"]'
bad "input missing" 400 input '{"model":"tinycoder"}'
bad "input empty string" 400 input '{"input":""}'
bad "input empty array" 400 input '{"input":[]}'
bad "input a number" 400 input '{"input":5}'
bad "item not an object" 400 input '{"input":[1]}'
bad "unknown item type" 400 input '{"input":[{"type":"item_reference","id":"x"}]}'
bad "bad role" 400 input '{"input":[{"role":"robot","content":"hi"}]}'
bad "image part" 400 input '{"input":[{"role":"user","content":[{"type":"input_image","image_url":"http://x"}]}]}'
bad "function_call without call_id" 400 input '{"input":[{"type":"function_call","name":"f","arguments":"{}"}]}'
bad "unknown model" 404 model '{"model":"gpt-17","input":"hi"}'
bad "temperature a string" 400 temperature '{"input":"hi","temperature":"hot"}'
bad "max_output_tokens 0" 400 max_output_tokens '{"input":"hi","max_output_tokens":0}'
bad "stream not a bool" 400 stream '{"input":"hi","stream":"yes"}'
bad "instructions not a string" 400 instructions '{"input":"hi","instructions":7}'
bad "non-function tool" 400 tools '{"input":"hi","tools":[{"type":"web_search_preview"}]}'
bad "tool without name" 400 tools '{"input":"hi","tools":[{"type":"function","parameters":{}}]}'
bad "bad tool_choice" 400 tool_choice '{"input":"hi","tool_choice":"sometimes"}'
bad "unknown previous_response_id" 404 previous_response_id '{"input":"hi","previous_response_id":"resp_doesnotexist"}'
bad "prompt longer than the context" 400 input "{\"input\":\"$long\"}"
st=$(req g404 GET /v1/responses/resp_doesnotexist)
check "GET unknown id -> $st" <<PY
import json, sys
b = json.load(open(sys.argv[1] + "/g404"))
assert "$st" == "404" and "not found" in b["error"]["message"], b
PY
st=$(req health GET /health)
[ "$st" = 200 ] || { echo "    FAIL server not healthy after the bad input ($st)"; fail=1; }

kill -INT "$srv"
wait "$srv"; rc=$?
srv=
if [ $rc -ne 0 ]; then echo "    FAIL server exit status $rc on SIGINT"; sed 's/^/      /' "$work/log" | tail -30; fail=1; fi
[ $fail -eq 0 ] && echo "    responses_smoke: all checks passed"
exit $fail
