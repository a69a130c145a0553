"""fuzz_requests.py — request i of a seed, built by gen_request from
random.Random("SEED:i") alone: a valid request to a POST surface
(fuzz_valid.py) with mutations (fuzz_mutations.py), or from gen_other a GET,
an odd method or path, an oversized body or a truncated upload. Req is a
request as sent and printed; State holds what generation and checks share
(the model, the vocabulary size, stored /v1/responses ids)."""
import random
import threading
import urllib.parse

from fuzz_mutations import TOKEN_KEY, byte_mutation, mutate, serialize
from fuzz_valid import (base_anthropic, base_chat, base_completions, base_ollama_chat, base_ollama_generate,
                        base_responses, maybe)
from fuzz_values import MARK, SPECIAL_STRINGS, huge_string, nested

# ---------------------------------------------------------------------------
# request representation


class Req:
    def __init__(self, kind, method, path, body=None, headers=None, mode="normal", stream=False, muts=None):
        self.kind = kind            # label used in the counts, e.g. "chat", "anthropic"
        self.method = method
        self.path = path            # already percent-encoded where needed
        self.body = body            # bytes or None
        self.headers = headers or {}
        self.mode = mode            # normal | truncated_upload | disconnect | oversize
        self.stream = stream        # the request asked for a streamed answer
        self.muts = muts or []      # the mutations applied (names)
        self.constraint = None      # "json" when a JSON constraint should hold on a "stop" answer
        self.obj = None             # the JSON object before serialization (None if not JSON)
        self.expect_reject = None   # why a 2xx would be wrong (an input the server must refuse)

    def describe(self, limit=4000):
        b = self.body
        lines = [f"  {self.method} {self.path}  mode={self.mode}  mutations={self.muts}"]
        for k, v in self.headers.items():
            lines.append(f"  header {k}: {v}")
        if b is not None:
            r = repr(b)
            if len(r) > limit:
                r = r[:limit] + f"... ({len(b)} bytes in all)"
            lines.append(f"  body {r}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------
# request generation


class State:
    def __init__(self, model, vocab=8192):
        self.model = model
        self.vocab = vocab
        self.lock = threading.Lock()
        self._resp_ids = []

    def resp_ids(self):
        with self.lock:
            return list(self._resp_ids[-20:])

    def add_resp_id(self, rid):
        with self.lock:
            self._resp_ids.append(rid)
            del self._resp_ids[:-50]


POST_KINDS = [("chat", "/v1/chat/completions", 20), ("completions", "/v1/completions", 12),
              ("responses", "/v1/responses", 14), ("anthropic", "/v1/messages", 16),
              ("ollama_chat", "/api/chat", 12), ("ollama_generate", "/api/generate", 12)]
OTHER_WEIGHT = 14


def weighted(rng, items):
    tot = sum(w for *_, w in items)
    x = rng.uniform(0, tot)
    for it in items:
        x -= it[-1]
        if x <= 0:
            return it
    return items[-1]


def stream_requested(kind, obj):
    if not isinstance(obj, dict):
        return False
    s = obj.get("stream")
    if kind.startswith("ollama"):
        return s is None or s is True
    return s is True


def gen_other(rng, state):
    """GET endpoints, /api/show, /tokenize, /detokenize, count_tokens, odd methods and paths."""
    c = rng.randrange(20)
    m = state.model
    if c == 0:
        return Req("models", "GET", "/v1/models", headers=rng.choice([{}, {"anthropic-version": "2023-06-01"}]))
    if c == 1:
        seg = rng.choice([m, "nope", "%ff", "%c3", "a" * 199 + "%c3%a9", "%00", "..%2f..%2fetc%2fpasswd", m + "/x",
                          urllib.parse.quote("\u00e9" * 150), "%e2%82", "x" * 5000])
        return Req("models", rng.choice(["GET", "HEAD"]), "/v1/models/" + seg,
                   headers=rng.choice([{}, {"anthropic-version": "2023-06-01"}]))
    if c == 2:
        return Req("tags", rng.choice(["GET", "HEAD"]), "/api/tags")
    if c == 3:
        return Req("health", "GET", "/health")
    if c in (4, 5):
        d = rng.choice([{"model": m}, {"name": m}, {"model": m + ":latest"}, {"model": "nope"}, {}, {"model": 5},
                        {"model": ""}, {"name": 5}, {"model": MARK}, {"model": "a" + "\u00e9" * 600},
                        {"model": m, "verbose": True}, {"model": None, "name": m}])
        if maybe(rng, 0.3):
            d, name = mutate(rng, dict(d), "ollama_chat", state)
        r = Req("show", "POST", "/api/show", headers={"content-type": "application/json"})
        r.obj = d
        return r
    if c == 6:
        return Req("misc", rng.choice(["GET", "HEAD"]), rng.choice(["/api/ps", "/api/version", "/", "/metrics"]))
    if c == 7:
        ids = state.resp_ids()
        rid = rng.choice(ids) if ids and maybe(rng, 0.6) else rng.choice(["nope", "%ff", "a" * 201, "a" * 200,
                                                                          "resp_x", "%c3", "", "x/y"])
        return Req("responses_get", rng.choice(["GET", "GET", "HEAD", "DELETE"]),
                   "/v1/responses/" + rid + rng.choice(["", "", "/input_items", "/input_items/x", "/"]))
    if c in (8, 9):
        r = Req("tokenize", "POST", rng.choice(["/tokenize", "/detokenize"]), headers={"content-type": "application/json"})
        if r.path == "/tokenize":
            r.obj = {"content": rng.choice(SPECIAL_STRINGS + [MARK, huge_string(rng), 5, None]),
                     "add_special": rng.choice([True, False, "x"])}
        else:
            r.obj = {"tokens": rng.choice([[1, 2, 3], [], [-1], [8192], [2 ** 31], [2 ** 63], [1.5], "x", None,
                                           list(range(128, 256)), [rng.randrange(8192) for _ in range(50)],
                                           [0] * 100000, [8190, 8191], nested(rng, 100)])}
        return r
    if c in (10, 11):
        d = base_anthropic(rng, m)
        if maybe(rng, 0.7):
            d, name = mutate(rng, d, "anthropic", state)
        r = Req("count_tokens", "POST", "/v1/messages/count_tokens",
                headers={"content-type": "application/json", "anthropic-version": "2023-06-01"})
        r.obj = d
        return r
    if c == 12:
        path = rng.choice(["/v1/chat/completions", "/v1/messages", "/api/chat", "/health", "/api/tags", "/v1/models",
                           "/v1/responses", "/tokenize"])
        return Req("wrong_method", rng.choice(["PUT", "DELETE", "PATCH", "GET", "POST", "OPTIONS", "FOO", "TRACE"]),
                   path, body=rng.choice([None, b"{}"]))
    if c == 13:
        return Req("odd_path", rng.choice(["GET", "POST"]),
                   rng.choice(["/nope", "/%ff", "/v1/%ff%fe", "/api/%c3", "/v1/messages%ff", "/v1/messages/%c3x",
                               "/v1//chat/completions", "/v1/chat/completions/", "/v1/chat/completions?x=%ff",
                               "/" + "a" * 8000, "/api/" + "\u00e9".encode().hex(), "/v1/messages/" + "a" * 1500,
                               "//", "/v1/responses/", "/v1/models/", "/api/" + "%c3%a9" * 600 + "x"]),
                   body=b"{}" if maybe(rng, 0.5) else None)
    if c == 14:
        return Req("health", "OPTIONS", rng.choice(["/v1/chat/completions", "/api/chat", "/v1/messages"]))
    # c >= 15: an oversized, a truncated upload, or a weird content-type on a POST surface
    kind, path, _ = weighted(rng, POST_KINDS)
    return None if c < 18 else ("oversize" if c == 18 else "truncated_upload", kind, path)


def gen_request(seed, i, state):
    rng = random.Random(f"{seed}:{i}")
    m = state.model
    special = None
    if rng.randrange(100) < OTHER_WEIGHT:
        r = gen_other(rng, state)
        if isinstance(r, Req):
            if r.obj is not None:
                r.body = serialize(rng, r.obj)
                if maybe(rng, 0.1):
                    r.body, bm = byte_mutation(rng, r.body)
                    r.muts.append(bm)
            return r
        special = r  # None or (mode, kind, path)
    if special:
        mode, kind, path = special
    else:
        mode = "normal"
        kind, path, _ = weighted(rng, POST_KINDS)
    base = {"chat": base_chat, "completions": base_completions, "anthropic": base_anthropic,
            "ollama_chat": base_ollama_chat, "ollama_generate": base_ollama_generate}
    d = base_responses(rng, m, state) if kind == "responses" else base[kind](rng, m)
    muts = []
    n_mut = rng.choice([0, 1, 1, 1, 2, 2, 3])
    for _ in range(n_mut):
        d, name = mutate(rng, d, kind, state)
        muts.append(name)
    headers = {"content-type": "application/json"}
    if kind == "anthropic":
        headers["anthropic-version"] = "2023-06-01"
    if maybe(rng, 0.05):
        headers["content-type"] = rng.choice(["text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                                              "application/json; charset=latin1", "", "\u00e9".encode().decode("latin1")])
        muts.append("content_type")
    elif maybe(rng, 0.03):
        del headers["content-type"]
        muts.append("no_content_type")
    body = serialize(rng, d)
    if maybe(rng, 0.12):
        body, bm = byte_mutation(rng, body)
        muts.append(bm)
    if mode == "normal" and stream_requested(kind, d) and maybe(rng, 0.08):
        mode = "disconnect"
        # enough tokens that cancellation, not the end of generation, ends it
        if kind.startswith("ollama") and isinstance(d.get("options"), dict):
            d["options"]["num_predict"] = 400
        elif kind in TOKEN_KEY:
            d[TOKEN_KEY[kind]] = 400
        body = serialize(rng, d)
    if mode == "oversize":
        body = b"{\"prompt\": \"" + b"a" * (17 << 20) + b"\"}"
    r = Req(kind, "POST", path, body=body, headers=headers, mode=mode, stream=stream_requested(kind, d), muts=muts)
    r.obj = d
    key = {"chat": "response_format", "completions": "response_format"}.get(kind)
    fmt = None
    if key and isinstance(d.get(key), dict):
        fmt = d[key].get("type") if d[key].get("type") in ("json_object", "json_schema") else None
    elif kind.startswith("ollama"):
        fmt = "json" if d.get("format") not in (None, "") else None
    elif kind == "responses" and isinstance(d.get("text"), dict) and isinstance(d["text"].get("format"), dict):
        fmt = d["text"]["format"].get("type") if d["text"]["format"].get("type") in ("json_object", "json_schema") else None
    elif kind == "anthropic" and isinstance(d.get("output_config"), dict):
        fmt = "json_schema" if isinstance(d["output_config"].get("format"), dict) else None
    opts = d.get("options") if isinstance(d.get("options"), dict) else {}
    has_stop = any(x.get(k) not in (None, "", []) for x in (d, opts) for k in ("stop", "stop_sequences"))
    if fmt and not muts and not has_stop:  # a stop string may cut the document (that is what it asks for)
        r.constraint = "json"
    # token ids outside the vocabulary must be refused, not wrapped into it
    pr = d.get("prompt") if kind == "completions" else d.get("context") if kind == "ollama_generate" else None
    if isinstance(pr, list) and any(type(v) is int and not 0 <= v < state.vocab for v in pr):
        r.expect_reject = f"token ids outside [0, {state.vocab}) in {'prompt' if kind == 'completions' else 'context'}"
    return r
