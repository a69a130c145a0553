#!/usr/bin/env bash
# surfaces_smoke.sh — the Anthropic Messages and Ollama surfaces of `kestrel
# serve` answer with the right status codes and shapes: /v1/messages (JSON and
# SSE), /v1/messages/count_tokens, /api/chat and /api/generate (NDJSON and
# JSON), /api/tags, /api/show, /api/version, and errors in each surface's own
# format (bad JSON, missing fields, unknown model, prompt over the context).
set -uo pipefail
KESTREL=${KESTREL:-build/kestrel}
cd "$(dirname "$0")/../.."
. scripts/lib/serve.sh
server_test_setup surfaces_smoke

start_server surfaces_smoke "$work/log"
base="http://127.0.0.1:$port"
fail=0; n=0

# check NAME METHOD PATH BODY STATUS PYTHON: the response has STATUS and PYTHON
# (an expression over `body` (text), `d` (parsed JSON, or None), `lines`
# (NDJSON objects) and `events` (SSE (event, data) pairs)) is true.
check() {
    local name=$1 method=$2 path=$3 body=$4 want=$5 expr=$6
    local code
    if [ "$method" = GET ]; then
        code=$(curl -s -o "$work/body" -w '%{http_code}' "$base$path")
    else
        code=$(curl -s -o "$work/body" -w '%{http_code}' -H 'content-type: application/json' -X "$method" \
               --data-binary "$body" "$base$path")
    fi
    if [ "$code" != "$want" ]; then
        echo "    FAIL $name: HTTP $code (want $want): $(head -c 300 "$work/body")"; fail=1; return
    fi
    if ! python3 - "$work/body" "$expr" <<'PY'
import json, sys
body = open(sys.argv[1], encoding="utf-8").read()
try:
    d = json.loads(body)
except Exception:
    d = None
lines = []
for l in body.splitlines():
    try:
        lines.append(json.loads(l))
    except Exception:
        pass
events, ev = [], None
for l in body.splitlines():
    if l.startswith("event: "):
        ev = l[7:]
    elif l.startswith("data: "):
        events.append((ev, json.loads(l[6:])))
        ev = None
ok = eval(sys.argv[2])
sys.exit(0 if ok else 1)
PY
    then
        echo "    FAIL $name: check failed: $expr"; echo "      body: $(head -c 400 "$work/body")"; fail=1; return
    fi
    n=$((n + 1))
}

U='{"role":"user","content":"Write a Python function `add`"}'
TOOL='{"name":"get_weather","description":"Get the weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}'

# ---- Anthropic Messages
check "messages" POST /v1/messages "{\"model\":\"tinycoder\",\"max_tokens\":8,\"messages\":[$U]}" 200 \
  'd["type"]=="message" and d["id"].startswith("msg_") and d["role"]=="assistant" and d["content"][0]["type"]=="text" and d["stop_reason"] in ("end_turn","max_tokens") and d["usage"]["output_tokens"]>0 and d["usage"]["input_tokens"]>0'
check "messages max_tokens" POST /v1/messages "{\"model\":\"tinycoder\",\"max_tokens\":3,\"temperature\":0,\"messages\":[$U]}" 200 \
  'd["stop_reason"]=="max_tokens" and d["usage"]["output_tokens"]==3 and d["stop_sequence"] is None'
check "messages stop_sequence" POST /v1/messages "{\"model\":\"tinycoder\",\"max_tokens\":40,\"temperature\":0,\"stop_sequences\":[\"def\"],\"messages\":[$U]}" 200 \
  'd["stop_reason"]=="stop_sequence" and d["stop_sequence"]=="def" and "def" not in d["content"][0]["text"]'
check "messages stream" POST /v1/messages "{\"model\":\"tinycoder\",\"max_tokens\":8,\"stream\":true,\"messages\":[$U]}" 200 \
  '[e for e,_ in events][0]=="message_start" and [e for e,_ in events][-1]=="message_stop" and any(e=="content_block_delta" and x["delta"]["type"]=="text_delta" for e,x in events) and [x for e,x in events if e=="message_delta"][0]["usage"]["output_tokens"]>0 and all(x["index"]==0 for e,x in events if e.startswith("content_block"))'
check "messages tools + round trip" POST /v1/messages "{\"model\":\"tinycoder\",\"max_tokens\":8,\"tools\":[$TOOL],\"tool_choice\":{\"type\":\"auto\"},\"system\":\"You are helpful.\",\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}}]},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":\"Sunny\"}]}]}" 200 \
  'd["type"]=="message" and all(b["type"] in ("text","tool_use","thinking") for b in d["content"]) and all(isinstance(b["input"],dict) for b in d["content"] if b["type"]=="tool_use")'
check "count_tokens" POST /v1/messages/count_tokens "{\"model\":\"tinycoder\",\"messages\":[$U]}" 200 \
  'isinstance(d["input_tokens"],int) and d["input_tokens"]>5'
check "messages bad JSON" POST /v1/messages '{"model":' 400 'd["type"]=="error" and d["error"]["type"]=="invalid_request_error"'
check "messages no max_tokens" POST /v1/messages "{\"model\":\"tinycoder\",\"messages\":[$U]}" 400 '"max_tokens" in d["error"]["message"]'
check "messages empty" POST /v1/messages '{"model":"tinycoder","max_tokens":5,"messages":[]}' 400 'd["error"]["type"]=="invalid_request_error"'
check "messages unknown model" POST /v1/messages "{\"model\":\"nope\",\"max_tokens\":5,\"messages\":[$U]}" 404 'd["error"]["type"]=="not_found_error"'
long=$(python3 -c 'print("hello world " * 3000)')
check "messages too long" POST /v1/messages "{\"model\":\"tinycoder\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"$long\"}]}" 400 '"too long" in d["error"]["message"]'

# ---- Ollama
check "api/chat stream (default)" POST /api/chat "{\"model\":\"tinycoder\",\"messages\":[$U],\"options\":{\"num_predict\":5}}" 200 \
  'len(lines)>=2 and all(not l["done"] for l in lines[:-1]) and lines[-1]["done"] and lines[-1]["done_reason"]=="length" and lines[-1]["eval_count"]==5 and lines[-1]["prompt_eval_count"]>0 and "".join(l["message"]["content"] for l in lines) != "" and lines[0]["created_at"].endswith("Z")'
check "api/chat" POST /api/chat "{\"model\":\"tinycoder:latest\",\"stream\":false,\"messages\":[$U],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}}}],\"options\":{\"num_predict\":5,\"temperature\":0}}" 200 \
  'd["done"] and d["message"]["role"]=="assistant" and isinstance(d["message"]["content"],str) and d["total_duration"]>0 and d["eval_count"]<=5'
check "api/chat empty = load" POST /api/chat '{"model":"tinycoder","messages":[]}' 200 'd["done_reason"]=="load"'
check "api/chat unknown model" POST /api/chat "{\"model\":\"nope\",\"messages\":[$U]}" 404 'd["error"]=="model \"nope\" not found, try pulling it first"'
check "api/chat images" POST /api/chat '{"model":"tinycoder","messages":[{"role":"user","content":"hi","images":["aGk="]}]}' 400 '"error" in d'
check "api/chat bad options" POST /api/chat "{\"model\":\"tinycoder\",\"messages\":[$U],\"options\":{\"temperature\":\"x\"}}" 400 '"temperature" in d["error"]'
check "api/chat too long" POST /api/chat "{\"model\":\"tinycoder\",\"messages\":[{\"role\":\"user\",\"content\":\"$long\"}]}" 400 '"context" in d["error"]'
check "api/generate stream" POST /api/generate '{"model":"tinycoder","prompt":"def add(a, b):","raw":true,"options":{"num_predict":4}}' 200 \
  'lines[-1]["done"] and lines[-1]["eval_count"]==4 and all("response" in l for l in lines) and len(lines[-1]["context"])==lines[-1]["prompt_eval_count"]+4'
check "api/generate" POST /api/generate '{"model":"tinycoder","prompt":"Write a Python function `add`","system":"Be brief.","stream":false,"options":{"num_predict":4,"temperature":0}}' 200 \
  'd["done"] and d["done_reason"]=="length" and isinstance(d["response"],str) and d["eval_count"]==4'
check "api/generate bad JSON" POST /api/generate '[1' 400 'isinstance(d["error"],str)'
check "api/tags" GET /api/tags '' 200 \
  'd["models"][0]["name"]=="tinycoder:latest" and d["models"][0]["size"]>0 and len(d["models"][0]["digest"])==64 and d["models"][0]["details"]["family"]=="qwen3"'
check "api/show" POST /api/show '{"model":"tinycoder"}' 200 \
  '"im_start" in d["template"] and "completion" in d["capabilities"] and d["model_info"]["general.architecture"]=="qwen3" and d["model_info"]["qwen3.context_length"]>0'
check "api/show unknown" POST /api/show '{"name":"nope"}' 404 '"not found" in d["error"]'
check "api/version" GET /api/version '' 200 'd["version"].count(".")==2'

kill -0 "$srv" 2>/dev/null || { echo "    FAIL surfaces_smoke: the server died"; fail=1; }
echo "    surfaces_smoke: $n checks passed"
exit $fail
