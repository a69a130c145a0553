/* ollama.c — the Ollama API: POST /api/chat and /api/generate (NDJSON
 * streaming by default, one object with "stream": false), GET /api/tags,
 * POST /api/show, GET /api/version. Errors are {"error": "..."}.
 *
 * Ollama specifics kept here: "options" carries the sampling fields
 * (num_predict <= 0 means up to the context), an empty messages list / empty
 * prompt answers done_reason "load", durations are nanoseconds, created_at is
 * RFC 3339 with nanoseconds, /api/generate returns "context" (prompt +
 * output token ids) and accepts it back as a prefix of the next prompt,
 * /api/chat drops a long chat's oldest messages to fit the context
 * (api/api_truncate.h; "truncate": false: the error instead). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "api/api_common.h"
#include "api/api_parse.h"
#include "api/api_truncate.h"
#include "api/openai.h"
#include "api/surfaces.h"

#define OLLAMA_VERSION "0.12.0"

typedef struct {
    bool stream, chat;
    double t0;               /* handler start (monotonic seconds) */
    double t_submit;
    strbuf content, thinking;
    json_t *tool_calls;      /* array of {"function": {name, arguments}} */
    int32_t *ctx;            /* generate: prompt + generated ids ("context") */
    int n_ctx, cap_ctx;
    char *body;              /* non-stream result */
    int status;
} ol_state;

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static json_t *created_at(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return api_time_json(&ts);
}

static void ol_free(void *v) {
    ol_state *s = v;
    if (!s) return;
    sb_free(&s->content);
    sb_free(&s->thinking);
    json_decref(s->tool_calls);
    free(s->ctx);
    free(s->body);
    free(s);
}

static void ol_line(strbuf *out, json_t *j) {
    char *t = api_dump(j);
    sb_puts(out, t ? t : "{}");
    sb_puts(out, "\n");
    free(t);
}

static void ctx_push(ol_state *s, int32_t id) {
    if (s->n_ctx == s->cap_ctx) {
        int cap = s->cap_ctx ? s->cap_ctx * 2 : 256;
        int32_t *t = realloc(s->ctx, (size_t)cap * sizeof *t);
        if (!t) return;
        s->ctx = t;
        s->cap_ctx = cap;
    }
    s->ctx[s->n_ctx++] = id;
}

/* A streamed line: {"model","created_at", message|response, "done": false}. */
static json_t *ol_chunk(api_gen *g, ol_state *s) {
    return json_pack("{s:s, s:o}", "model", g->a->model_name, "created_at", created_at());
}

static void on_token(api_gen *g, const engine_event *ev, strbuf *out) {
    ol_state *s = g->surf;
    if (!s->chat) ctx_push(s, ev->token);
}

static json_t *tool_call_json(const out_piece *pc) {
    json_t *args = json_loads(pc->arguments, JSON_DECODE_ANY, NULL);
    if (!json_is_object(args)) { /* Ollama clients expect an object */
        json_decref(args);
        args = json_object();
    }
    return json_pack("{s:{s:s, s:o}}", "function", "name", pc->name, "arguments", args);
}

static void on_piece(api_gen *g, const out_piece *pc, strbuf *out) {
    ol_state *s = g->surf;
    if (pc->kind == OUT_TOOL_CALL) {
        json_t *tc = tool_call_json(pc);
        if (s->stream) {
            json_t *j = ol_chunk(g, s);
            json_object_set_new(j, "message", json_pack("{s:s, s:s, s:[O]}", "role", "assistant", "content", "",
                                                        "tool_calls", tc));
            json_object_set_new(j, "done", json_false());
            ol_line(out, j);
        }
        json_array_append_new(s->tool_calls, tc);
        return;
    }
    if (!pc->len) return;
    bool think = pc->kind == OUT_REASONING;
    if (!s->stream) {
        sb_append(think ? &s->thinking : &s->content, pc->text, pc->len);
        return;
    }
    json_t *j = ol_chunk(g, s);
    if (s->chat) {
        json_t *m = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
        json_object_set_new(m, think ? "thinking" : "content", json_stringn(pc->text, pc->len));
        json_object_set_new(j, "message", m);
    } else {
        json_object_set_new(j, "response", think ? json_string("") : json_stringn(pc->text, pc->len));
        if (think) json_object_set_new(j, "thinking", json_stringn(pc->text, pc->len));
    }
    json_object_set_new(j, "done", json_false());
    ol_line(out, j);
}

static long long ns(double sec) { return sec > 0 ? (long long)(sec * 1e9) : 0; }

static void on_done(api_gen *g, const engine_event *ev, strbuf *out) {
    ol_state *s = g->surf;
    json_t *j = ol_chunk(g, s);
    if (s->chat) {
        json_t *m = json_pack("{s:s, s:s%}", "role", "assistant", "content", s->stream ? "" : (s->content.s ? s->content.s : ""),
                              s->stream ? (size_t)0 : s->content.len);
        if (!s->stream && s->thinking.len) json_object_set_new(m, "thinking", json_stringn(s->thinking.s, s->thinking.len));
        if (!s->stream && json_array_size(s->tool_calls)) json_object_set(m, "tool_calls", s->tool_calls);
        json_object_set_new(j, "message", m);
    } else {
        json_object_set_new(j, "response", s->stream ? json_string("")
                                                     : json_stringn(s->content.s ? s->content.s : "", s->content.len));
        if (!s->stream && s->thinking.len) json_object_set_new(j, "thinking", json_stringn(s->thinking.s, s->thinking.len));
    }
    const char *reason = ev->finish == ENGINE_FINISH_LENGTH || ev->finish == ENGINE_FINISH_CONTEXT ? "length" : "stop";
    json_object_set_new(j, "done", json_true());
    json_object_set_new(j, "done_reason", json_string(reason));
    if (!s->chat) {
        json_t *c = json_array();
        for (int i = 0; i < s->n_ctx; i++) json_array_append_new(c, json_integer(s->ctx[i]));
        json_object_set_new(j, "context", c);
    }
    double end = mono_now();
    json_object_set_new(j, "total_duration", json_integer(ns(end - s->t0)));
    json_object_set_new(j, "load_duration", json_integer(ns(s->t_submit - s->t0)));
    json_object_set_new(j, "prompt_eval_count", json_integer(ev->n_prompt));
    json_object_set_new(j, "prompt_eval_duration", json_integer(ns(ev->t_first_token)));
    json_object_set_new(j, "eval_count", json_integer(ev->n_gen));
    json_object_set_new(j, "eval_duration", json_integer(ns(ev->t_total - ev->t_first_token)));
    if (s->stream) {
        ol_line(out, j);
    } else {
        s->body = api_dump(j);
        s->status = s->body ? 200 : 500;
    }
}

static void on_error(api_gen *g, const char *msg, strbuf *out) {
    ol_state *s = g->surf;
    json_t *e = json_pack("{s:s}", "error", msg);
    if (s->stream) {
        ol_line(out, e);
    } else {
        s->body = api_dump(e);
        s->status = 500;
    }
}

static const api_gen_ops ol_ops = {on_piece, on_token, on_done, on_error, ol_free};

/* ---- request parsing ---------------------------------------------------- */

#define OL_BAD(...)                                   \
    do {                                              \
        api_fail(e, NULL, __VA_ARGS__);               \
        return -1;                                    \
    } while (0)

/* model (required), stream (default true), format, options, think. Fills p;
 * returns 0, 404 (unknown model), or -1 with e filled. */
static int parse_common(app *a, json_t *body, engine_params *p, bool *stream, long long *num_predict, json_t *extra,
                        api_err *e) {
    json_t *mv = json_object_get(body, "model");
    if (!mv || json_is_null(mv) || (json_is_string(mv) && !json_string_length(mv))) OL_BAD("model is required");
    if (!json_is_string(mv)) OL_BAD("model: expected a string");
    if (!api_model_known(a, json_string_value(mv))) return 404;
    *stream = true;
    if (api_get_bool(body, "stream", stream, e) < 0) return -1;
    static const api_field extra_fields[] = {{"keep_alive", API_T_STR | API_T_NUM}, {"options", API_T_OBJ},
                                             {"tools", API_T_ARR}, {"images", API_T_ARR}};
    if (api_check_fields(body, extra_fields, sizeof extra_fields / sizeof extra_fields[0], e) < 0) return -1;
    json_t *th = json_object_get(body, "think");
    if (th && !json_is_null(th)) {
        const char *lv = json_string_value(th);
        if (!json_is_boolean(th) && !(lv && (!strcmp(lv, "high") || !strcmp(lv, "medium") || !strcmp(lv, "low"))))
            OL_BAD("think: expected a boolean or \"high\", \"medium\", \"low\"");
        bool on = !json_is_false(th);
        if (on && !a->think) OL_BAD("\"%s\" does not support thinking", json_string_value(mv));
        json_object_set_new(extra, "enable_thinking", json_boolean(on));
    }
    api_params_default(a, p, 0);
    p->sp.repetition_last_n = 64; /* Ollama's repeat_last_n unless the options say */
    if (api_get_ollama_format(body, &p->constraint, e) < 0) return -1;
    *num_predict = -1;
    json_t *o = json_object_get(body, "options");
    if (o && !json_is_null(o)) {
        if (!json_is_object(o)) OL_BAD("options: expected an object");
        if (api_get_sampling(o, p, true, e) < 0) return -1;
        if (api_get_int(o, "num_predict", INT_MIN, INT_MAX, num_predict, e) < 0) return -1;
    }
    return 0;
}

static bool has_images(json_t *o) {
    json_t *im = json_object_get(o, "images");
    return im && !json_is_null(im) && !(json_is_array(im) && !json_array_size(im));
}

/* Ollama messages -> OpenAI-shaped messages for the template. */
static json_t *convert_messages(json_t *msgs, api_err *e) {
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *r = json_string_value(json_object_get(m, "role"));
        if (!json_is_object(m) || !r ||
            (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool"))) {
            api_fail(e, NULL, "messages[%zu]: role must be one of system, user, assistant, tool", i);
            goto fail;
        }
        if (has_images(m)) {
            api_fail(e, NULL, "messages[%zu]: images are not supported: this model accepts text only", i);
            goto fail;
        }
        json_t *c = json_object_get(m, "content");
        if (c && !json_is_null(c) && !json_is_string(c)) {
            api_fail(e, NULL, "messages[%zu].content: expected a string", i);
            goto fail;
        }
        json_t *nm = json_pack("{s:s, s:s}", "role", r, "content", json_is_string(c) ? json_string_value(c) : "");
        json_array_append_new(out, nm);
        json_t *v;
        if ((v = json_object_get(m, "thinking")) && json_is_string(v)) json_object_set(nm, "reasoning_content", v);
        if ((v = json_object_get(m, "tool_name")) && json_is_string(v)) json_object_set(nm, "name", v);
        if ((v = json_object_get(m, "tool_call_id")) && json_is_string(v)) json_object_set(nm, "tool_call_id", v);
        json_t *tc = json_object_get(m, "tool_calls");
        if (!tc || json_is_null(tc)) continue;
        if (!json_is_array(tc)) {
            api_fail(e, NULL, "messages[%zu].tool_calls: expected an array", i);
            goto fail;
        }
        json_t *calls = json_array();
        json_object_set_new(nm, "tool_calls", calls);
        size_t k;
        json_t *call;
        json_array_foreach(tc, k, call) {
            json_t *fn = json_object_get(call, "function");
            json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
            if (!json_is_object(fn) || !json_is_string(name)) {
                api_fail(e, NULL, "messages[%zu].tool_calls[%zu]: expected {\"function\": {\"name\": ..., \"arguments\": {...}}}", i, k);
                goto fail;
            }
            json_t *argv = NULL;
            if (json_is_string(args)) argv = json_loads(json_string_value(args), 0, NULL);
            if (!argv) argv = json_is_object(args) ? json_incref(args) : json_object();
            json_t *id = json_object_get(call, "id");
            json_t *one = json_pack("{s:s, s:{s:O, s:o}}", "type", "function", "function", "name", name, "arguments", argv);
            if (json_is_string(id)) json_object_set(one, "id", id);
            json_array_append_new(calls, one);
        }
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

/* The answer to an empty request: Ollama loads the model and says so. */
static void load_response(app *a, http_resp *resp, bool chat) {
    json_t *j = json_pack("{s:s, s:o}", "model", a->model_name, "created_at", created_at());
    if (chat) json_object_set_new(j, "message", json_pack("{s:s, s:s}", "role", "assistant", "content", ""));
    else json_object_set_new(j, "response", json_string(""));
    json_object_set_new(j, "done", json_true());
    json_object_set_new(j, "done_reason", json_string("load"));
    http_json(resp, 200, api_dump(j));
}

/* Submits ids and answers (stream or one object). Takes nothing. */
static void run_gen(app *a, http_resp *resp, const int32_t *ids, int n, engine_params *p, long long num_predict,
                    bool stream, bool chat, bool tools, double t0) {
    if (!api_fit_output(a, n, num_predict, &p->max_tokens)) {
        http_error(resp, API_OLLAMA, 400, NULL, NULL,
                   "the input length (%d tokens) exceeds the context length (%d tokens)", n, engine_ctx_size(a->eng));
        return;
    }
    ol_state *s = calloc(1, sizeof *s);
    if (!s || !(s->tool_calls = json_array())) {
        ol_free(s);
        http_error(resp, API_OLLAMA, 500, NULL, NULL, "out of memory");
        return;
    }
    s->stream = stream;
    s->chat = chat;
    s->t0 = t0;
    if (!chat)
        for (int i = 0; i < n; i++) ctx_push(s, ids[i]);
    output_parser_config opc = {tools, a->think, false};
    int status;
    char errbuf[600];
    s->t_submit = mono_now();
    api_gen *g = api_gen_start(a, SURF_OLLAMA, ids, n, p, &opc, &ol_ops, s, &status, errbuf, sizeof errbuf);
    if (!g) {
        http_error(resp, API_OLLAMA, status, NULL, NULL, "%s", errbuf);
        return;
    }
    if (stream) api_gen_answer_stream(g, resp, "application/x-ndjson");
    else api_gen_answer_json(g, resp, &s->body, &s->status);
}

static void not_found(http_resp *resp, const char *name) {
    http_error(resp, API_OLLAMA, 404, NULL, NULL, "model \"%s\" not found, try pulling it first", name ? name : "");
}

/* What /api/chat and /api/generate both start with: the body and the
 * options they share (parse_common). 0: go on; 1: answered (an unknown
 * model); -1: a bad request (e says why). */
static int read_request(app *a, const http_req *req, http_resp *resp, json_t **body, engine_params *p, bool *stream,
                        long long *num_predict, json_t *extra, api_err *e) {
    memset(p, 0, sizeof *p); /* p->constraint: the caller's to free in every case */
    if (!(*body = api_parse_body(req->body, req->body_len, e))) return -1;
    int r = parse_common(a, *body, p, stream, num_predict, extra, e);
    if (r == 404) {
        not_found(resp, json_string_value(json_object_get(*body, "model")));
        return 1;
    }
    return r < 0 ? -1 : 0;
}

void ollama_chat(app *a, const http_req *req, http_resp *resp) {
    double t0 = mono_now();
    api_err err = {{0}, NULL}, *e = &err;
    json_t *body = NULL, *msgs = NULL, *extra = json_object();
    int32_t *ids = NULL;
    int n = 0;
    engine_params p;
    bool stream;
    long long num_predict;
    int r = read_request(a, req, resp, &body, &p, &stream, &num_predict, extra, e);
    if (r > 0) goto out;
    if (r < 0) goto bad;
    json_t *mv = json_object_get(body, "messages");
    if (mv && !json_is_null(mv) && !json_is_array(mv)) {
        api_fail(e, NULL, "messages: expected an array");
        goto bad;
    }
    if (!json_array_size(mv)) {
        load_response(a, resp, true);
        goto out;
    }
    if (!(msgs = convert_messages(mv, e))) goto bad;
    json_t *tools = json_object_get(body, "tools");
    if (openai_check_tools(tools, e) < 0) goto bad;
    bool use_tools = json_array_size(tools) > 0, truncate = true;
    if (api_get_bool(body, "truncate", &truncate, e) < 0) goto bad;
    char errbuf[600];
    /* a chat past the context loses its oldest messages, as Ollama's does
     * (the system ones and the last kept; "truncate": false asks for the
     * error instead) */
    int st = api_render_chat_fitting(a, msgs, use_tools ? tools : NULL, extra, truncate, num_predict, &ids, &n, errbuf,
                                     sizeof errbuf);
    if (st) {
        http_error(resp, API_OLLAMA, st, NULL, NULL, "%s", errbuf);
        goto out;
    }
    run_gen(a, resp, ids, n, &p, num_predict, stream, true, use_tools, t0);
    goto out;
bad:
    http_error(resp, API_OLLAMA, 400, NULL, NULL, "%s", e->msg);
out:
    jc_free(p.constraint); /* a request holds its own reference */
    free(ids);
    json_decref(msgs);
    json_decref(extra);
    json_decref(body);
}

void ollama_generate(app *a, const http_req *req, http_resp *resp) {
    double t0 = mono_now();
    api_err err = {{0}, NULL}, *e = &err;
    json_t *body = NULL, *msgs = NULL, *extra = json_object();
    int32_t *ids = NULL, *all = NULL;
    int n = 0;
    engine_params p;
    bool stream, raw = false;
    long long num_predict;
    int r = read_request(a, req, resp, &body, &p, &stream, &num_predict, extra, e);
    if (r > 0) goto out;
    if (r < 0) goto bad;
    const char *prompt = NULL, *system = NULL, *suffix = NULL;
    if (api_get_str(body, "prompt", &prompt, e) < 0 || api_get_str(body, "system", &system, e) < 0 ||
        api_get_str(body, "suffix", &suffix, e) < 0 || api_get_bool(body, "raw", &raw, e) < 0)
        goto bad;
    if (has_images(body)) {
        api_fail(e, NULL, "images are not supported: this model accepts text only");
        goto bad;
    }
    if (suffix && *suffix) {
        api_fail(e, NULL, "\"%s\" does not support insert", a->model_name);
        goto bad;
    }
    json_t *cv = json_object_get(body, "context");
    if (cv && !json_is_null(cv) && !json_is_array(cv)) {
        api_fail(e, NULL, "context: expected an array of token ids");
        goto bad;
    }
    if (!prompt || !*prompt) {
        load_response(a, resp, false);
        goto out;
    }
    if (raw || !a->tmpl) {
        if (tok_encode(a->tok, prompt, strlen(prompt), !json_array_size(cv), &ids, &n) != 0) {
            api_fail(e, NULL, "could not tokenize the prompt");
            goto bad;
        }
    } else {
        msgs = json_array();
        if (system) json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", system));
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", prompt));
        char errbuf[600];
        int st = api_render_chat(a, msgs, NULL, extra, true, &ids, &n, NULL, errbuf, sizeof errbuf);
        if (st) {
            http_error(resp, API_OLLAMA, st, NULL, NULL, "%s", errbuf);
            goto out;
        }
    }
    /* "context" from an earlier answer goes in front of this prompt */
    size_t nc = json_array_size(cv);
    if (nc) {
        if (nc > (size_t)engine_ctx_size(a->eng)) {
            api_fail(e, NULL, "context: %zu tokens exceed the context length (%d)", nc,
                     engine_ctx_size(a->eng));
            goto bad;
        }
        all = malloc((nc + (size_t)n) * sizeof *all);
        if (!all) {
            http_error(resp, API_OLLAMA, 500, NULL, NULL, "out of memory");
            goto out;
        }
        int V = tok_vocab_size(a->tok);
        for (size_t i = 0; i < nc; i++) {
            json_t *v = json_array_get(cv, i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= V) {
                api_fail(e, NULL, "context[%zu]: expected a token id in [0, %d)", i, V);
                goto bad;
            }
            all[i] = (int32_t)json_integer_value(v);
        }
        memcpy(all + nc, ids, (size_t)n * sizeof *ids);
        free(ids);
        ids = all;
        all = NULL;
        n += (int)nc;
    }
    run_gen(a, resp, ids, n, &p, num_predict, stream, false, false, t0);
    goto out;
bad:
    http_error(resp, API_OLLAMA, 400, NULL, NULL, "%s", e->msg);
out:
    jc_free(p.constraint);
    free(all);
    free(ids);
    json_decref(msgs);
    json_decref(extra);
    json_decref(body);
}

/* ---- model listing ------------------------------------------------------ */

typedef struct {
    long long size;           /* bytes of the checkpoint files */
    long long n_params;
    time_t mtime;
    char digest[65];
    const char *family;
    const char *quant;
} model_facts;

static void gather_facts(const app *a, model_facts *f) {
    memset(f, 0, sizeof *f);
    const st_set *st = &a->m->st;
    uint64_t h[4] = {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull, 0x9e3779b97f4a7c15ull, 0x2545f4914f6cdd1dull};
    for (int i = 0; i < st->n_files; i++) {
        struct stat sb;
        if (stat(st->paths[i], &sb) != 0) continue;
        f->size += (long long)sb.st_size;
        if (sb.st_mtime > f->mtime) f->mtime = sb.st_mtime;
        const char *base = strrchr(st->paths[i], '/');
        base = base ? base + 1 : st->paths[i];
        char key[512];
        int kl = snprintf(key, sizeof key, "%s|%lld|%lld", base, (long long)sb.st_size, (long long)sb.st_mtime);
        for (int w = 0; w < 4; w++)
            for (int k = 0; k < kl && k < (int)sizeof key; k++) h[w] = (h[w] ^ (unsigned char)key[k]) * 0x100000001b3ull;
    }
    for (int w = 0; w < 4; w++) snprintf(f->digest + 16 * w, 17, "%016llx", (unsigned long long)h[w]);
    for (int i = 0; i < st->n_tensors; i++) /* the MTP head is a drafter, not the model */
        if (strncmp(st->tensors[i].name, "mtp.", 4)) f->n_params += st->tensors[i].n_elems;
    const model_config *c = &a->m->cfg;
    f->family = c->arch == ARCH_QWEN3 ? "qwen3" : c->arch == ARCH_QWEN2 ? "qwen2" : "llama";
    f->quant = "unknown";
    if (st->n_tensors) {
        dtype_t dt = st->tensors[0].dtype;
        for (int i = 0; i < st->n_tensors; i++) /* the dtype of the largest tensor */
            if (st->tensors[i].n_elems > st->tensors[0].n_elems) dt = st->tensors[i].dtype;
        f->quant = dt == DTYPE_BF16 ? "BF16" : dt == DTYPE_F16 ? "F16" : dt == DTYPE_F32 ? "F32" : dtype_name(dt);
    }
}

/* Ollama's format.HumanNumber: 8.0B, 494.03M, 22M, 15K. */
static void human_number(char *buf, size_t cap, long long v) {
    double d;
    if (v >= 1000000000LL) {
        d = (double)v / 1e9;
        snprintf(buf, cap, d == (double)(long long)d ? "%.0fB" : "%.1fB", d);
    } else if (v >= 1000000LL) {
        d = (double)v / 1e6;
        snprintf(buf, cap, d == (double)(long long)d ? "%.0fM" : "%.2fM", d);
    } else if (v >= 1000) {
        snprintf(buf, cap, "%.0fK", (double)v / 1e3);
    } else {
        snprintf(buf, cap, "%lld", v);
    }
}

static json_t *details_json(const model_facts *f) {
    char ps[32];
    human_number(ps, sizeof ps, f->n_params);
    return json_pack("{s:s, s:s, s:s, s:[s], s:s, s:s}", "parent_model", "", "format", "safetensors", "family",
                     f->family, "families", f->family, "parameter_size", ps, "quantization_level", f->quant);
}

/* "<model>:latest" unless the name already has a tag. */
static void tagged_name(const app *a, char *buf, size_t cap) {
    snprintf(buf, cap, strchr(a->model_name, ':') ? "%s" : "%s:latest", a->model_name);
}

/* The served model's entry in /api/tags and /api/ps (new reference) */
static json_t *model_entry(const app *a) {
    model_facts f;
    gather_facts(a, &f);
    char name[512];
    tagged_name(a, name, sizeof name);
    return json_pack("{s:s, s:s, s:o, s:I, s:s, s:o}", "name", name, "model", name, "modified_at", api_time_json(&(struct timespec){f.mtime, 0}),
                     "size", (json_int_t)f.size, "digest", f.digest, "details", details_json(&f));
}

void ollama_tags(app *a, const http_req *req, http_resp *resp) {
    (void)req;
    http_json(resp, 200, api_dump(json_pack("{s:[o]}", "models", model_entry(a))));
}

/* GET /api/ps: the models in memory — the one served, loaded for as long as
 * the server runs (expires_at the end of 9999); size_vram the device memory
 * its backend holds (weights, KV pool, workspaces), 0 on the CPU */
void ollama_ps(app *a, const http_req *req, http_resp *resp) {
    (void)req;
    json_t *m = model_entry(a);
    backend *be = a->m->be;
    bk_mem mem = {0, 0, 0};
    if (be->ops->mem_usage) be->ops->mem_usage(be, &mem);
    json_object_set_new(m, "expires_at", json_string("9999-12-31T23:59:59Z"));
    json_object_set_new(m, "size_vram", json_integer(mem.weights + mem.buffers + mem.workspace));
    http_json(resp, 200, api_dump(json_pack("{s:[o]}", "models", m)));
}

/* The chat template source: chat_template.jinja, else tokenizer_config.json's
 * chat_template (a string or a list of {name, template}). malloc'd or NULL. */
static char *template_text(const app *a) {
    char path[4096];
    snprintf(path, sizeof path, "%s/chat_template.jinja", a->model_dir);
    FILE *fp = fopen(path, "rb");
    if (fp) {
        strbuf b = {0};
        char buf[8192];
        size_t r;
        while ((r = fread(buf, 1, sizeof buf, fp)) > 0) sb_append(&b, buf, r);
        fclose(fp);
        return sb_take(&b, NULL);
    }
    snprintf(path, sizeof path, "%s/tokenizer_config.json", a->model_dir);
    json_t *j = json_load_file(path, 0, NULL);
    json_t *ct = json_object_get(j, "chat_template");
    char *out = NULL;
    if (json_is_string(ct)) {
        out = strdup(json_string_value(ct));
    } else if (json_is_array(ct)) {
        size_t i;
        json_t *v;
        json_array_foreach(ct, i, v) {
            const char *nm = json_string_value(json_object_get(v, "name"));
            const char *t = json_string_value(json_object_get(v, "template"));
            if (t && (!out || (nm && !strcmp(nm, "default")))) {
                free(out);
                out = strdup(t);
            }
        }
    }
    json_decref(j);
    return out;
}

void ollama_show(app *a, const http_req *req, http_resp *resp) {
    api_err e = {{0}, NULL};
    json_t *body = api_parse_body(req->body, req->body_len, &e);
    const char *name = NULL;
    if (!body || api_get_str(body, "model", &name, &e) < 0 || (!name && api_get_str(body, "name", &name, &e) < 0)) {
        http_error(resp, API_OLLAMA, 400, NULL, NULL, "%s", e.msg);
        json_decref(body);
        return;
    }
    if (!name || !*name) {
        http_error(resp, API_OLLAMA, 400, NULL, NULL, "model is required");
        json_decref(body);
        return;
    }
    if (!api_model_known(a, name)) {
        not_found(resp, name);
        json_decref(body);
        return;
    }
    model_facts f;
    gather_facts(a, &f);
    char *tmpl = template_text(a);
    const model_config *c = &a->m->cfg;
    json_t *info = json_object();
    char key[128];
    json_object_set_new(info, "general.architecture", json_string(f.family));
    json_object_set_new(info, "general.parameter_count", json_integer(f.n_params));
#define INFO(k, v)                                          \
    do {                                                    \
        snprintf(key, sizeof key, "%s." k, f.family);       \
        json_object_set_new(info, key, json_integer(v));    \
    } while (0)
    INFO("context_length", c->max_position_embeddings);
    INFO("embedding_length", c->hidden_size);
    INFO("block_count", c->n_layers);
    INFO("feed_forward_length", c->intermediate_size);
    INFO("attention.head_count", c->n_heads);
    INFO("attention.head_count_kv", c->n_kv_heads);
    INFO("attention.key_length", c->head_dim);
    INFO("vocab_size", c->vocab_size);
#undef INFO
    json_t *caps = json_pack("[s]", "completion");
    if (tmpl && strstr(tmpl, "tools")) json_array_append_new(caps, json_string("tools"));
    if (a->think) json_array_append_new(caps, json_string("thinking"));
    const gen_config *g = &a->gen;
    strbuf params = {0};
    if (g->do_sample) sb_printf(&params, "temperature %g\n", g->temperature);
    else sb_puts(&params, "temperature 0\n");
    if (g->top_k > 0) sb_printf(&params, "top_k %d\n", g->top_k);
    if (g->top_p < 1) sb_printf(&params, "top_p %g\n", g->top_p);
    if (g->min_p > 0) sb_printf(&params, "min_p %g\n", g->min_p);
    if (g->repetition_penalty != 1) sb_printf(&params, "repeat_penalty %g\n", g->repetition_penalty);
    if (params.len) params.s[--params.len] = 0; /* no trailing newline */
    char *ptext = sb_take(&params, NULL);
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:o}", "license", "", "modelfile", "", "parameters",
                          ptext ? ptext : "", "template", tmpl ? tmpl : "", "details", details_json(&f), "model_info",
                          info, "capabilities", caps, "modified_at", api_time_json(&(struct timespec){f.mtime, 0}));
    free(ptext);
    free(tmpl);
    http_json(resp, 200, api_dump(j));
    json_decref(body);
}

void ollama_version(app *a, const http_req *req, http_resp *resp) {
    (void)a;
    (void)req;
    http_json(resp, 200, api_dump(json_pack("{s:s}", "version", OLLAMA_VERSION)));
}
