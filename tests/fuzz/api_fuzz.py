#!/usr/bin/env python3
"""api_fuzz.py — a randomized, reproducible fuzzer of kestrel's HTTP API surfaces.

What it does
  Sends N requests to a running `kestrel serve`, each a mutation of a valid
  request to one of: OpenAI POST /v1/chat/completions, /v1/completions,
  /v1/responses (+ GET /v1/responses/{id}[/input_items]); Anthropic POST
  /v1/messages (+ /v1/messages/count_tokens); Ollama POST /api/chat,
  /api/generate, /api/show; and GET /v1/models[/{id}], /api/tags, /api/ps,
  /api/version, /health, /, /metrics, POST /tokenize, /detokenize.
  Mutations: wrong types for every field, huge / negative / fractional /
  overflowing numbers, deeply nested JSON, invalid UTF-8 and lone surrogates
  (\\ud800) in strings, empty and enormous strings, unknown fields, stream
  on/off, tools / tool_choice shapes, response_format / format / text.format /
  output_config with valid, invalid and weird JSON schemas (patterns, enums,
  $ref, huge minLength, ...), logit_bias with out-of-range ids, stop lists,
  penalties (presence / frequency / repetition; Ollama repeat_penalty and
  repeat_last_n -1, 0, huge), logprobs / top_logprobs, n, seed, max_tokens
  0 / 1 / huge, temperature 0 / 2 / negative; and at the HTTP level truncated
  JSON, truncated uploads (Content-Length larger than what is sent), wrong or
  missing content-type, wrong methods, odd paths, an oversized body, and a
  client that disconnects in the middle of a streamed answer.

  Checks per request: the server answers (no reset, no timeout — except where
  the fuzzer itself hangs up); the status is 2xx or 4xx (kestrel documents no
  5xx); an error body is in the surface's own format (OpenAI
  {"error": {"message", "type", ...}}, Anthropic {"type": "error", "error":
  {"type", "message"}}, Ollama {"error": "..."}; the surface is chosen by path
  as server/http.c does); a 200 body / stream is well formed (JSON, the
  stream's last event, no "{}" placeholder events, no error events mid-stream);
  a request that was not mutated succeeds (or, chaining a stored response
  by previous_response_id, is refused for the context length its hidden
  history reached, as OpenAI's default truncation "disabled" does); under a json_object / schema
  constraint a "stop" answer parses as JSON; and afterwards GET /health still
  answers 200 (in sequential mode also that no request is left running).
  With --server-log, new "runtime error" / AddressSanitizer lines in the
  server's stderr after a request are reported against that request.

Reproducibility
  Request i is generated from random.Random("SEED:i") alone, so the seed
  (printed first) and the index reproduce it: `--only I` re-sends it,
  `--show I` prints it without sending. Failures print the request's method,
  path, headers and exact body (Python bytes repr; the full body also goes
  to --out-dir when given). Two things are not reproducible: requests that
  reuse an id stored by an earlier /v1/responses answer (previous_response_id,
  GET /v1/responses/{id}) and interleavings under --threads.

How to run (python3, standard library only)
  KESTREL_SHARED=/work/shared build/kestrel serve ../shared/models/tinycoder \\
      --port 18080 --ctx-size 640 2> /tmp/kestrel.log &
  python3 tests/fuzz/api_fuzz.py --url http://127.0.0.1:18080 -n 500 --seed 1 \\
      --server-log /tmp/kestrel.log
  python3 tests/fuzz/api_fuzz.py --url ... -n 1000 --threads 4   # races
  A small --ctx-size bounds the cost of the (rare) requests that ask for a
  huge max_tokens; the fuzzer keeps max_tokens <= 16 otherwise. On a 2-core
  CPU machine with tinycoder, 500 requests take about 6 s against the release
  build at --ctx-size 1024 (about 14 s at the default context of 4096) and
  35-60 s against the ASan + UBSan build. For memory
  errors run an AddressSanitizer build (`make debug`, or the Makefile's OPT /
  LDFLAGS with -fsanitize=address,undefined) with
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1, and stop the server with
  SIGTERM at the end so LeakSanitizer reports.
  Exit status: 0 when no check failed, 1 otherwise. Last line:
  "api_fuzz: N requests, F failures".

Files (tests/fuzz/)
  api_fuzz.py        this entry point: arguments, the run, threads, report
  fuzz_requests.py   request i of a seed (Req, State, gen_request), from
  fuzz_valid.py      the valid request of each surface,
  fuzz_mutations.py  the mutations, serialization and byte mutations, and
  fuzz_values.py     the hostile values and JSON schemas
  fuzz_http.py       sending a request and reading the answer
  fuzz_checks.py     the checks of the answers
"""
import argparse
import collections
import http.client
import json
import os
import random
import re
import sys
import threading
import time

from fuzz_checks import check_error_body, check_success, json_or_none, surface_of
from fuzz_http import host_port, send
from fuzz_requests import State, gen_request

# ---------------------------------------------------------------------------
# the run


def chain_overflow(r, st, body):
    """A 400 for the context length on a request that chains a stored
    response (previous_response_id): its history, which the fuzzer does not
    see, grows with each link until it no longer fits the server's context."""
    prev = isinstance(r.obj, dict) and r.obj.get("previous_response_id")
    err = json_or_none(body)
    code = err["error"].get("code") if isinstance(err, dict) and isinstance(err.get("error"), dict) else None
    return st == 400 and bool(prev) and code == "context_length_exceeded"


class Runner:
    def __init__(self, args, state):
        self.args = args
        self.state = state
        self.lock = threading.Lock()
        self.counts = collections.Counter()      # kind
        self.status_counts = collections.Counter()  # (kind, status)
        self.mut_counts = collections.Counter()
        self.failures = []
        self.n_done = 0
        self.server_down = False
        self.log_pos = os.path.getsize(args.server_log) if args.server_log and os.path.exists(args.server_log) else 0
        self.inflight = {}

    def health(self, timeout=15):
        host, port = host_port(self.args.url)
        for _ in range(3):
            try:
                c = http.client.HTTPConnection(host, port, timeout=timeout)
                c.request("GET", "/health")
                rr = c.getresponse()
                b = rr.read()
                c.close()
                if rr.status == 200:
                    return json_or_none(b) or {}
                return None
            except (OSError, http.client.HTTPException):
                time.sleep(1)
        return None

    def new_log(self):
        p = self.args.server_log
        if not p or not os.path.exists(p):
            return ""
        with open(p, "rb") as f:
            f.seek(self.log_pos)
            data = f.read()
            self.log_pos = f.tell()
        text = data.decode("utf-8", "replace")
        keys = ("runtime error", "AddressSanitizer", "LeakSanitizer", "ThreadSanitizer", "SUMMARY:", "Assertion",
                "Segmentation", "double free", "stack-overflow")
        if any(k in text for k in keys):
            return text
        return ""

    def fail(self, i, r, reason, res=None):
        with self.lock:
            self.failures.append((i, reason))
            out = [f"FAIL #{i} [{r.kind}] {reason}", f"  reproduce: --seed {self.args.seed} --only {i}", r.describe()]
            if res is not None and res.status is not None:
                out.append(f"  answer: status {res.status}, {len(res.body)} bytes: {res.body[:500]!r}")
            if self.args.out_dir and r.body is not None:
                os.makedirs(self.args.out_dir, exist_ok=True)
                fn = os.path.join(self.args.out_dir, f"fail-{self.args.seed}-{i}.bin")
                with open(fn, "wb") as f:
                    f.write(r.body)
                out.append(f"  full body: {fn}")
            print("\n".join(out), flush=True)

    def one(self, i):
        r = gen_request(self.args.seed, i, self.state)
        r.state = self.state
        if self.args.verbose:
            print(f"#{i} {r.kind} {r.method} {r.path} mode={r.mode} stream={r.stream} muts={r.muts} "
                  f"body={len(r.body or b'')}B", flush=True)
        with self.lock:
            self.inflight[i] = r
        res = send(self.args.url, r, self.args.timeout)
        with self.lock:
            del self.inflight[i]
            self.counts[r.kind] += 1
            self.status_counts[(r.kind, res.status if res.error is None else "err")] += 1
            self.mut_counts.update(m.split(":")[0] for m in r.muts)
            self.mut_counts["mode:" + r.mode] += 1
            self.mut_counts["asked:streamed" if r.stream else "asked:not_streamed"] += 1
            self.n_done += 1
        surf = surface_of(r.path.split("?")[0])
        if res.error:
            if not (r.mode in ("oversize",) and ("Broken" in res.error or "Reset" in res.error)):
                self.fail(i, r, f"no answer: {res.error}", res)
        elif r.mode == "normal" or r.mode == "oversize":
            st = res.status
            if st >= 500:
                self.fail(i, r, f"status {st} (5xx)", res)
            elif st >= 400:
                if r.method != "HEAD":
                    why = check_error_body(surf, st, res.body)
                    if why:
                        self.fail(i, r, why, res)
                if not r.muts and r.kind in ("chat", "completions", "responses", "anthropic", "ollama_chat",
                                              "ollama_generate") and r.mode == "normal" and st != 404 \
                        and not chain_overflow(r, st, res.body):
                    self.fail(i, r, f"an unmutated (valid) request was refused with {st}", res)
                if r.mode == "oversize" and st != 413:
                    self.fail(i, r, f"oversized body answered {st}, not 413", res)
            elif 200 <= st < 300:
                if r.mode == "oversize":
                    self.fail(i, r, f"oversized body answered {st}", res)
                if r.expect_reject:
                    self.fail(i, r, f"accepted ({st}) though it has {r.expect_reject}", res)
                for p in check_success(r, res):
                    self.fail(i, r, p, res)
            else:
                self.fail(i, r, f"unexpected status {st}", res)
        elif r.mode == "disconnect" and res.status not in (200, -1) and res.status is not None and res.status >= 500:
            self.fail(i, r, f"status {res.status} (5xx) before the disconnect", res)
        # the server must still be alive
        h = self.health()
        if h is None:
            with self.lock:
                inflight = list(self.inflight.items())
            self.fail(i, r, "GET /health does not answer after this request (server down or hung)", res)
            for j, rr in inflight:
                print(f"  (in flight at the time: #{j} [{rr.kind}] {rr.method} {rr.path})", flush=True)
            self.server_down = True
            return
        # sequential: nothing may stay running (a disconnected stream must be cancelled)
        if self.args.threads == 1 and (h.get("active") or h.get("queued")):
            t0 = time.time()
            while time.time() - t0 < self.args.drain_timeout:
                time.sleep(0.2)
                h = self.health() or {}
                if not h.get("active") and not h.get("queued"):
                    break
            else:
                self.fail(i, r, f"a request is still running {self.args.drain_timeout}s after the answer "
                                f"(/health: {h})", res)
        if self.args.threads == 1:
            log = self.new_log()
            if log:
                self.fail(i, r, "sanitizer / crash report in the server log:\n" + log[-6000:], res)

    def worker(self, idx_iter):
        while not self.server_down:
            try:
                i = next(idx_iter)
            except StopIteration:
                return
            try:
                self.one(i)
            except Exception as ex:  # a bug in the fuzzer itself
                print(f"fuzzer error on #{i}: {type(ex).__name__}: {ex}", flush=True)
                import traceback
                traceback.print_exc()


def main():
    # deeply nested values are built and encoded recursively
    sys.setrecursionlimit(50000)
    threading.stack_size(512 << 20)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080", help="the server's base URL")
    ap.add_argument("-n", type=int, default=500, help="requests to send (default 500)")
    ap.add_argument("--seed", type=int, default=None, help="seed (default: random, printed)")
    ap.add_argument("--start", type=int, default=0, help="first request index (default 0)")
    ap.add_argument("--only", type=int, default=None, help="send request I of the seed only")
    ap.add_argument("--show", type=int, default=None, help="print request I of the seed and exit")
    ap.add_argument("--threads", type=int, default=1, help="concurrent clients (default 1)")
    ap.add_argument("--timeout", type=float, default=180, help="seconds to wait for an answer (default 180)")
    ap.add_argument("--drain-timeout", type=float, default=30,
                    help="sequential mode: seconds a request may keep running after its answer (default 30)")
    ap.add_argument("--server-log", default=None, help="the server's stderr file: check it for sanitizer reports")
    ap.add_argument("--out-dir", default=None, help="write the full body of each failing request here")
    ap.add_argument("--model", default=None, help="model name (default: from GET /v1/models)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every request")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    print(f"api_fuzz: seed {args.seed}, url {args.url}", flush=True)
    model = args.model
    if not model:
        if args.show is not None:
            model = "tinycoder"
        else:
            host, port = host_port(args.url)
            c = http.client.HTTPConnection(host, port, timeout=30)
            c.request("GET", "/v1/models")
            model = json.loads(c.getresponse().read())["data"][0]["id"]
            c.close()
    vocab = 8192
    if args.show is None:
        try:
            host, port = host_port(args.url)
            c = http.client.HTTPConnection(host, port, timeout=30)
            c.request("POST", "/api/show", json.dumps({"model": model}), {"content-type": "application/json"})
            info = json.loads(c.getresponse().read()).get("model_info", {})
            c.close()
            vocab = next(v for k, v in info.items() if k.endswith(".vocab_size"))
        except (OSError, ValueError, StopIteration, http.client.HTTPException):
            pass
    state = State(model, vocab)
    if args.show is not None:
        r = gen_request(args.seed, args.show, state)
        print(f"#{args.show} [{r.kind}] stream={r.stream} constraint={r.constraint}")
        print(r.describe(limit=1 << 30))
        return 0
    run = Runner(args, state)
    if args.server_log and run.new_log():
        print("api_fuzz: note: the server log already holds sanitizer output before the run", flush=True)
    idx = [args.only] if args.only is not None else range(args.start, args.start + args.n)
    it = iter(idx)
    lock = threading.Lock()

    def locked_iter():
        while True:
            with lock:
                try:
                    v = next(it)
                except StopIteration:
                    return
            yield v

    shared = locked_iter()
    t0 = time.time()
    threads = [threading.Thread(target=run.worker, args=(shared,), daemon=True) for _ in range(max(1, args.threads))]
    for t in threads:
        t.start()
    last = time.time()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(timeout=1)
        if time.time() - last > 60:
            last = time.time()
            print(f"api_fuzz: {run.n_done} done, {len(run.failures)} failures, {time.time() - t0:.0f}s", flush=True)
    if args.threads > 1 and args.server_log:
        log = run.new_log()
        if log:
            run.failures.append((-1, "sanitizer report"))
            print("FAIL (concurrent run) sanitizer / crash report in the server log:\n" + log[-8000:], flush=True)
    el = time.time() - t0
    print(f"api_fuzz: seed {args.seed}, {run.n_done} requests in {el:.1f}s "
          f"({el / max(1, run.n_done) * 1000:.0f} ms each), threads {args.threads}")
    print("requests by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(run.counts.items())))
    by = collections.defaultdict(list)
    for (k, s), v in sorted(run.status_counts.items(), key=lambda x: (x[0][0], str(x[0][1]))):
        by[k].append(f"{s}:{v}")
    for k in sorted(by):
        print(f"  {k}: " + " ".join(by[k]))
    print("mutations: " + ", ".join(f"{k} {v}" for k, v in sorted(run.mut_counts.items())))
    reasons = collections.Counter(re.sub(r"-?\d+", "N", r.split(":")[0].split("(")[0])[:70] for _, r in run.failures)
    for k, v in reasons.most_common():
        print(f"  failures: {v} x {k}")
    print(f"api_fuzz: {run.n_done} requests, {len(run.failures)} failures")
    return 1 if run.failures else 0


if __name__ == "__main__":
    sys.exit(main())
