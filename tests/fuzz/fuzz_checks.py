"""fuzz_checks.py — api_fuzz.py's checks of answers: the error format a path
must use (surface_of), error bodies in that format, the shape of 2xx bodies
and of streams (SSE events, Ollama JSON lines), logprobs where asked for,
and JSON text under a JSON constraint."""
import json


def surface_of(path):
    """The error format the server must use (server/http.c http_surface_of)."""
    if path.startswith("/v1/messages"):
        return "anthropic"
    if path.startswith("/api/"):
        return "ollama"
    return "openai"


def check_error_body(surface, status, body):
    """None if body is an error in the surface's own format, else what is wrong."""
    if not body:
        return f"{status} with an empty body (expected a {surface} error object)"
    try:
        j = json.loads(body)
    except ValueError as ex:
        return f"{status} body is not JSON ({ex}): {body[:200]!r}"
    if surface == "anthropic":
        ok = (isinstance(j, dict) and j.get("type") == "error" and isinstance(j.get("error"), dict)
              and isinstance(j["error"].get("type"), str) and isinstance(j["error"].get("message"), str))
    elif surface == "ollama":
        ok = isinstance(j, dict) and isinstance(j.get("error"), str)
    else:
        ok = (isinstance(j, dict) and isinstance(j.get("error"), dict) and isinstance(j["error"].get("message"), str)
              and isinstance(j["error"].get("type"), str))
    return None if ok else f"{status} error body not in the {surface} format: {body[:300]!r}"


def parse_sse(body):
    events = []  # (event name or None, data text)
    for block in body.decode("utf-8", "replace").split("\n\n"):
        if not block.strip():
            continue
        ev, data = None, []
        for line in block.split("\n"):
            if line.startswith("event:"):
                ev = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
        events.append((ev, "\n".join(data)))
    return events


def json_or_none(t):
    try:
        return json.loads(t)
    except ValueError:
        return None


def is_json(t):
    """whether t is a JSON text (json_or_none cannot tell the text "null" from no JSON)"""
    try:
        json.loads(t)
        return True
    except ValueError:
        return False


def check_responses_logprobs(r, objs):
    """A Responses answer with include message.output_text.logprobs: entries
    where text was generated (over a stream's deltas, or a whole response's
    output_text parts)."""
    d = r.obj if isinstance(r.obj, dict) else {}
    inc, top = d.get("include"), d.get("top_logprobs", 0)
    if not (isinstance(inc, list) and "message.output_text.logprobs" in inc and (top is None or type(top) is int)):
        return []
    n_entries, texts = 0, ""
    for j in objs:
        if not isinstance(j, dict):
            continue
        if j.get("type") == "response.output_text.delta":  # a stream's deltas
            texts += j.get("delta") or ""
            n_entries += len(j.get("logprobs") or [])
        for item in j.get("output") or []:  # a whole response
            for part in (item.get("content") or []) if isinstance(item, dict) and item.get("type") == "message" else []:
                if isinstance(part, dict) and part.get("type") == "output_text":
                    texts += part.get("text") or ""
                    n_entries += len(part.get("logprobs") or [])
    if texts.strip() and n_entries == 0:
        return ["logprobs included, text generated, but no logprobs entries in the answer"]
    return []


def check_logprobs(r, objs):
    """Chat / completions with logprobs asked for: one entry per generated
    token (over all chunks of a stream), the completions arrays in step;
    Responses: check_responses_logprobs."""
    if r.kind == "responses":
        return check_responses_logprobs(r, objs)
    d = r.obj if isinstance(r.obj, dict) else {}
    if r.kind == "chat":
        want = d.get("logprobs") is True and type(d.get("top_logprobs", 0)) is int and 0 <= d.get("top_logprobs", 0) <= 20
    elif r.kind == "completions":
        want = type(d.get("logprobs")) is int and 0 <= d["logprobs"] <= 20
    else:
        return []
    if not want:
        return []
    n_entries, n_gen, texts = 0, None, ""
    for j in objs:
        if not isinstance(j, dict):
            continue
        if isinstance(j.get("usage"), dict):
            n_gen = j["usage"].get("completion_tokens")
        for ch in j.get("choices") or []:
            lp = ch.get("logprobs")
            texts += ch.get("text") or (ch.get("message") or ch.get("delta") or {}).get("content") or ""
            if not isinstance(lp, dict):
                continue
            if r.kind == "chat":
                n_entries += len(lp.get("content") or [])
            else:
                lens = [len(lp.get(k) or []) for k in ("tokens", "token_logprobs", "top_logprobs")]
                if len(set(lens)) != 1:
                    return [f"logprobs: tokens / token_logprobs / top_logprobs of different lengths {lens}"]
                n_entries += lens[0]
    if texts and n_entries == 0:
        return [f"logprobs asked for, {n_gen} tokens generated, but no logprobs entries in the answer"]
    return []


def check_success(r, res):
    """Problems with a 2xx answer (list of strings)."""
    probs = []
    kind = r.kind
    body = res.body
    if r.method == "HEAD" or res.status == 204:
        return probs
    if kind in ("health", "models", "tags", "misc", "show", "tokenize", "count_tokens", "responses_get", "wrong_method",
                "odd_path"):
        if r.path in ("/", "/metrics") or r.path.startswith("/metrics"):
            return probs
        if json_or_none(body) is None:
            probs.append(f"200 body is not JSON: {body[:200]!r}")
        return probs
    if not body:
        return [f"{res.status} with an empty body"]
    text = None
    if not r.stream:
        j = json_or_none(body)
        if not isinstance(j, dict):
            return [f"200 body is not a JSON object: {body[:300]!r}"]
        if kind == "chat":
            ch = (j.get("choices") or [{}])[0]
            if not isinstance(ch.get("message"), dict):
                probs.append("chat: choices[0].message missing")
            else:
                text = ch["message"].get("content")
            fr = ch.get("finish_reason")
        elif kind == "completions":
            ch = (j.get("choices") or [{}])[0]
            if not isinstance(ch.get("text"), str):
                probs.append("completions: choices[0].text missing")
            text, fr = ch.get("text"), ch.get("finish_reason")
        elif kind == "responses":
            if j.get("object") != "response" or j.get("status") not in ("completed", "incomplete"):
                probs.append(f"responses: bad object/status: {body[:300]!r}")
            elif j.get("store") is not False and isinstance(j.get("id"), str):
                r_state = getattr(r, "state", None)
                if r_state:
                    r_state.add_resp_id(j["id"])
            text, fr = j.get("output_text"), "stop" if j.get("status") == "completed" else "length"
        elif kind == "anthropic":
            if j.get("type") != "message" or not isinstance(j.get("content"), list):
                probs.append(f"anthropic: not a message: {body[:300]!r}")
            text = "".join(b.get("text", "") for b in j.get("content", []) if isinstance(b, dict) and b.get("type") == "text")
            fr = "stop" if j.get("stop_reason") == "end_turn" else j.get("stop_reason")
        else:  # ollama
            if j.get("done") is not True:
                probs.append(f"ollama: done is not true: {body[:300]!r}")
            text = (j.get("message") or {}).get("content") if kind == "ollama_chat" else j.get("response")
            fr = "stop" if j.get("done_reason") == "stop" else j.get("done_reason")
            if j.get("done_reason") == "load":
                fr = None
        probs += check_logprobs(r, [j])
        if r.constraint == "json" and fr == "stop" and isinstance(text, str) and text.strip():
            if not is_json(text):
                probs.append(f"constraint: finish 'stop' but the text is not JSON: {text[:200]!r}")
        return probs
    # streamed
    if kind.startswith("ollama"):
        lines = [ln for ln in body.decode("utf-8", "replace").split("\n") if ln.strip()]
        objs = [json_or_none(ln) for ln in lines]
        if not objs or any(o is None for o in objs):
            return [f"ollama stream: a line is not JSON: {body[-300:]!r}"]
        if any("error" in o for o in objs):
            probs.append(f"ollama stream: error line: {[o for o in objs if 'error' in o][0]}")
        if objs[-1].get("done") is not True:
            probs.append(f"ollama stream: last line not done: {lines[-1][:200]!r}")
        if any(o == {} for o in objs):
            probs.append("ollama stream: an empty {} line (a JSON object the server failed to build)")
        return probs
    evs = parse_sse(body)
    if not evs:
        return [f"empty event stream: {body[:200]!r}"]
    datas = [d for _, d in evs]
    if any(d == "{}" for d in datas):
        probs.append("stream: an empty data: {} event (a JSON object the server failed to build)")
    bad_json = [d for d in datas if d != "[DONE]" and json_or_none(d) is None]
    if bad_json:
        probs.append(f"stream: data that is not JSON: {bad_json[0][:200]!r}")
    if kind in ("chat", "completions"):
        probs += check_logprobs(r, [json_or_none(d) for d in datas if d != "[DONE]"])
        if datas[-1] != "[DONE]":
            probs.append(f"stream: does not end with [DONE]: {datas[-1][:200]!r}")
        for d in datas:
            j = json_or_none(d)
            if isinstance(j, dict) and "error" in j:
                probs.append(f"stream: error event: {d[:300]}")
                break
    elif kind == "anthropic":
        names = [e for e, _ in evs]
        if names[-1] != "message_stop":
            probs.append(f"anthropic stream: last event {names[-1]!r}, not message_stop")
        if "error" in names:
            probs.append(f"anthropic stream: error event: {evs[names.index('error')][1][:300]}")
        if names[0] != "message_start":
            probs.append(f"anthropic stream: first event {names[0]!r}")
    elif kind == "responses":
        names = [e for e, _ in evs]
        if names[-1] not in ("response.completed", "response.incomplete"):
            probs.append(f"responses stream: last event {names[-1]!r}: {datas[-1][:300]}")
        seqs = [(json_or_none(d) or {}).get("sequence_number") for d in datas]
        if seqs != list(range(len(seqs))):
            probs.append(f"responses stream: sequence_number not 0..n-1: {seqs[:20]}")
        last = json_or_none(datas[-1]) or {}
        rid = (last.get("response") or {}).get("id")
        if rid and (last.get("response") or {}).get("store") is not False and getattr(r, "state", None):
            r.state.add_resp_id(rid)
    return probs
