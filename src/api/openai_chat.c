/* openai_chat.c — POST /v1/chat/completions (OpenAI Chat Completions):
 * messages -> chat template -> engine; the answer as one JSON body or as SSE
 * chunks (role, content / reasoning_content / tool_calls deltas, finish_reason,
 * optional usage chunk, [DONE]). Tool calls are parsed from the model's output
 * (chat/output_parser.c). */
#include <stdlib.h>
#include <string.h>

#include "api/api_common.h"
#include "api/api_parse.h"
#include "api/api_truncate.h"
#include "api/openai.h"
#include "base/err.h"

typedef struct {
    char id[64];
    long long created;
    bool stream, include_usage, logprobs;
    int top_logprobs;
    bool role_sent;
    strbuf content, reasoning;
    json_t *tool_calls;     /* array */
    json_t *lp_content;     /* logprobs.content entries (non-stream: all; stream: pending) */
    char *body;             /* non-stream result */
    int status;
} chat_state;

static void chat_free(void *v) {
    chat_state *s = v;
    sb_free(&s->content);
    sb_free(&s->reasoning);
    json_decref(s->tool_calls);
    json_decref(s->lp_content);
    free(s->body);
    free(s);
}

json_t *openai_logprob_entry(const app *a, const engine_event *ev) {
    char *t = api_token_str(a, ev->token);
    json_t *bytes = json_array();
    for (const unsigned char *p = (const unsigned char *)t; *p; p++) json_array_append_new(bytes, json_integer(*p));
    json_t *top = json_array();
    for (int i = 0; i < ev->n_top; i++) {
        char *tt = api_token_str(a, ev->top_ids[i]);
        json_t *tb = json_array();
        for (const unsigned char *p = (const unsigned char *)tt; *p; p++) json_array_append_new(tb, json_integer(*p));
        json_array_append_new(top, json_pack("{s:s, s:f, s:o}", "token", tt, "logprob", (double)ev->top_logprobs[i],
                                             "bytes", tb));
        free(tt);
    }
    json_t *e = json_pack("{s:s, s:f, s:o, s:o}", "token", t, "logprob", (double)ev->logprob, "bytes", bytes,
                          "top_logprobs", top);
    free(t);
    return e;
}

const char *openai_finish_reason(engine_finish f, bool tool_calls) {
    if (tool_calls) return "tool_calls";
    return f == ENGINE_FINISH_LENGTH || f == ENGINE_FINISH_CONTEXT ? "length" : "stop";
}

static json_t *chunk(chat_state *s, app *a, json_t *delta, const char *finish) {
    json_t *choice = json_pack("{s:i, s:o, s:o, s:o}", "index", 0, "delta", delta, "logprobs", json_null(),
                               "finish_reason", finish ? json_string(finish) : json_null());
    if (s->logprobs && json_array_size(s->lp_content)) {
        json_object_set_new(choice, "logprobs", json_pack("{s:o}", "content", s->lp_content)); /* (taken, not shared) */
        s->lp_content = json_array();
    }
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:[o]}", "id", s->id, "object", "chat.completion.chunk", "created",
                     s->created, "model", a->model_name, "system_fingerprint", "kestrel", "choices", choice);
}

static void send_role(chat_state *s, app *a, strbuf *out) {
    if (s->role_sent) return;
    s->role_sent = true;
    api_sse(out, NULL, chunk(s, a, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL));
}

static void on_token(api_gen *g, const engine_event *ev, strbuf *out) {
    chat_state *s = g->surf;
    if (s->logprobs) json_array_append_new(s->lp_content, openai_logprob_entry(g->a, ev));
}

static void on_piece(api_gen *g, const out_piece *pc, strbuf *out) {
    chat_state *s = g->surf;
    if (pc->kind == OUT_TOOL_CALL) {
        char cid[40];
        api_make_id(cid, sizeof cid, "call_");
        int idx = (int)json_array_size(s->tool_calls);
        json_t *fn = json_pack("{s:s, s:s}", "name", pc->name, "arguments", pc->arguments);
        json_t *tc = json_pack("{s:s, s:s, s:o}", "id", cid, "type", "function", "function", fn);
        if (s->stream) {
            send_role(s, g->a, out);
            json_t *d = json_pack("{s:[{s:i, s:s, s:s, s:O}]}", "tool_calls", "index", idx, "id", cid, "type",
                                  "function", "function", fn);
            api_sse(out, NULL, chunk(s, g->a, d, NULL));
        }
        json_array_append_new(s->tool_calls, tc);
        return;
    }
    strbuf *dst = pc->kind == OUT_REASONING ? &s->reasoning : &s->content;
    if (s->stream) {
        send_role(s, g->a, out);
        json_t *d = json_object();
        json_object_set_new(d, pc->kind == OUT_REASONING ? "reasoning_content" : "content",
                            json_stringn(pc->text, pc->len));
        api_sse(out, NULL, chunk(s, g->a, d, NULL));
    } else {
        sb_append(dst, pc->text, pc->len);
    }
}

static json_t *usage(const engine_event *ev) {
    return json_pack("{s:i, s:i, s:i, s:{s:i}, s:{s:i, s:i, s:i}}", "prompt_tokens", ev->n_prompt,
                     "completion_tokens", ev->n_gen, "total_tokens", ev->n_prompt + ev->n_gen,
                     "prompt_tokens_details", "cached_tokens", ev->n_cached, "completion_tokens_details", "reasoning_tokens", 0,
                     "accepted_prediction_tokens", ev->n_accepted, "rejected_prediction_tokens",
                     ev->n_drafted - ev->n_accepted);
}

/* prediction: {"type": "content", "content": string | [{"type": "text", "text"}]}
 * -> token ids (a draft source). 0 absent, 1 ok, -1 bad (e filled). */
static int parse_prediction(app *a, json_t *body, int32_t **ids, int *n, api_err *e) {
    json_t *pr = json_object_get(body, "prediction");
    if (!pr || json_is_null(pr)) return 0;
    const char *type = json_string_value(json_object_get(pr, "type"));
    json_t *c = json_object_get(pr, "content");
    if (!json_is_object(pr) || !type || strcmp(type, "content"))
        return api_fail(e, "prediction", "'prediction' must be {\"type\": \"content\", \"content\": ...}");
    strbuf t = {0};
    if (json_is_string(c)) {
        sb_append(&t, json_string_value(c), json_string_length(c));
    } else if (json_is_array(c)) {
        static const char *const types[] = {"text", NULL};
        long k = api_join_text_parts(c, types, NULL, &t);
        if (k >= 0) return api_fail(e, "prediction", "'prediction.content[%ld]': only text parts are supported", k);
    } else {
        return api_fail(e, "prediction", "'prediction.content' must be a string or an array of text parts");
    }
    int rc = t.len ? tok_encode(a->tok, t.s, t.len, false, ids, n) : 0;
    sb_free(&t);
    if (rc) return api_fail(e, "prediction", "'prediction.content': %s", err_msg());
    return 1;
}

static void on_done(api_gen *g, const engine_event *ev, strbuf *out) {
    chat_state *s = g->surf;
    bool tools = json_array_size(s->tool_calls) > 0;
    const char *fr = openai_finish_reason(ev->finish, tools);
    if (s->stream) {
        send_role(s, g->a, out);
        api_sse(out, NULL, chunk(s, g->a, json_object(), fr));
        if (s->include_usage) {
            json_t *u = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[], s:o}", "id", s->id, "object",
                                  "chat.completion.chunk", "created", s->created, "model", g->a->model_name,
                                  "system_fingerprint", "kestrel", "choices", "usage", usage(ev));
            api_sse(out, NULL, u);
        }
        sb_puts(out, "data: [DONE]\n\n");
        return;
    }
    json_t *msg = json_pack("{s:s, s:s%}", "role", "assistant", "content", s->content.s ? s->content.s : "",
                            s->content.len);
    if (!s->content.len && tools) json_object_set_new(msg, "content", json_null());
    if (s->reasoning.len) json_object_set_new(msg, "reasoning_content", json_stringn(s->reasoning.s, s->reasoning.len));
    if (tools) json_object_set(msg, "tool_calls", s->tool_calls);
    json_t *lp = s->logprobs ? json_pack("{s:O}", "content", s->lp_content) : json_null();
    json_t *resp = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[{s:i, s:o, s:o, s:s}], s:o}", "id", s->id, "object",
                             "chat.completion", "created", s->created, "model", g->a->model_name,
                             "system_fingerprint", "kestrel", "choices", "index", 0, "message", msg, "logprobs", lp,
                             "finish_reason", fr, "usage", usage(ev));
    s->body = api_dump(resp);
    s->status = 200;
}

void openai_gen_error(const char *msg, bool stream, strbuf *out, char **body, int *status) {
    json_t *e = json_pack("{s:{s:s, s:s, s:n, s:n}}", "error", "message", msg, "type", "server_error", "param", "code");
    if (stream) {
        api_sse(out, NULL, e);
        sb_puts(out, "data: [DONE]\n\n");
    } else {
        *body = api_dump(e);
        *status = 500;
    }
}

static void on_error(api_gen *g, const char *msg, strbuf *out) {
    chat_state *s = g->surf;
    openai_gen_error(msg, s->stream, out, &s->body, &s->status);
}

static const api_gen_ops chat_ops = {on_piece, on_token, on_done, on_error, chat_free};

/* Converts OpenAI messages into the shape chat templates expect: content as
 * a string (text parts joined), tool_calls kept, roles checked. */
static json_t *normalize_messages(json_t *msgs, api_err *e) {
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        api_fail(e, "messages", "'messages' must be a non-empty array");
        return NULL;
    }
    json_t *out = json_array(), *nm = NULL; /* (nm: the message being built) */
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        json_t *role = json_object_get(m, "role");
        const char *r = json_string_value(role);
        if (!json_is_object(m) || !r ||
            (strcmp(r, "system") && strcmp(r, "developer") && strcmp(r, "user") && strcmp(r, "assistant") &&
             strcmp(r, "tool"))) {
            api_fail(e, "messages", "messages[%zu]: 'role' must be one of system, developer, user, assistant, tool", i);
            goto bad;
        }
        nm = json_pack("{s:s}", "role", !strcmp(r, "developer") ? "system" : r);
        json_t *c = json_object_get(m, "content");
        if (json_is_string(c)) {
            json_object_set(nm, "content", c);
        } else if (json_is_array(c)) {
            static const char *const types[] = {"text", "input_text", NULL};
            strbuf t = {0};
            long k = api_join_text_parts(c, types, NULL, &t);
            if (k >= 0) {
                api_fail(e, "messages", "messages[%zu].content[%ld]: only text parts are supported", i, k);
                goto bad;
            }
            json_object_set_new(nm, "content", json_stringn(t.s ? t.s : "", t.len));
            sb_free(&t);
        } else if (!c || json_is_null(c)) {
            if (strcmp(r, "assistant") || !json_object_get(m, "tool_calls")) {
                api_fail(e, "messages", "messages[%zu]: 'content' is required", i);
                goto bad;
            }
            json_object_set_new(nm, "content", json_string(""));
        } else {
            api_fail(e, "messages", "messages[%zu]: 'content' must be a string or an array of parts", i);
            goto bad;
        }
        json_t *tc = json_object_get(m, "tool_calls");
        if (tc && !json_is_null(tc)) {
            if (!json_is_array(tc)) {
                api_fail(e, "messages", "messages[%zu]: 'tool_calls' must be an array", i);
                goto bad;
            }
            /* templates want arguments as an object; OpenAI sends a JSON string */
            json_t *calls = json_array();
            size_t k;
            json_t *call;
            json_array_foreach(tc, k, call) {
                json_t *fn = json_object_get(call, "function");
                json_t *args = json_object_get(fn, "arguments");
                json_t *argv = NULL;
                if (json_is_string(args)) argv = json_loads(json_string_value(args), 0, NULL);
                if (!argv) argv = args ? json_incref(args) : json_object();
                json_array_append_new(calls, json_pack("{s:O?, s:s, s:{s:O?, s:o}}", "id", json_object_get(call, "id"),
                                                       "type", "function", "function", "name",
                                                       json_object_get(fn, "name"), "arguments", argv));
            }
            json_object_set_new(nm, "tool_calls", calls);
        }
        json_t *v;
        if ((v = json_object_get(m, "tool_call_id")) && json_is_string(v)) json_object_set(nm, "tool_call_id", v);
        if ((v = json_object_get(m, "name")) && json_is_string(v)) json_object_set(nm, "name", v);
        if ((v = json_object_get(m, "reasoning_content")) && json_is_string(v)) json_object_set(nm, "reasoning_content", v);
        json_array_append_new(out, nm);
        nm = NULL;
    }
    return out;
bad:
    json_decref(nm);
    json_decref(out);
    return NULL;
}

bool openai_chat_prompt(app *a, http_resp *resp, json_t *msgs, json_t *tools, json_t *extra, bool drop_to_fit,
                        const char *param, long long requested, int32_t **ids, int *n, int *max_tokens) {
    char errbuf[600];
    int st = api_render_chat_fitting(a, msgs, tools, extra, drop_to_fit, requested, ids, n, errbuf, sizeof errbuf);
    if (st) {
        openai_status_error(resp, st, param, errbuf);
        return false;
    }
    if (api_fit_output(a, *n, requested, max_tokens)) return true;
    http_error_code(resp, API_OPENAI, 400, "invalid_request_error", param, "context_length_exceeded",
                    "This model's maximum context length is %d tokens. However, your %s resulted in %d tokens.",
                    engine_ctx_size(a->eng), param, *n);
    return false;
}

void openai_status_error(http_resp *resp, int status, const char *param, const char *msg) {
    http_error(resp, API_OPENAI, status, status == 400 ? "invalid_request_error" : "server_error", param, "%s", msg);
}

void openai_model_not_found(http_resp *resp, const char *name) {
    http_error_code(resp, API_OPENAI, 404, "invalid_request_error", "model", "model_not_found",
                    "The model '%.200s' does not exist", name);
}

int openai_check_tools(json_t *tools, api_err *e) {
    if (!tools || json_is_null(tools)) return 0;
    if (!json_is_array(tools)) return api_fail(e, "tools", "'tools' must be an array");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        if (!json_is_object(t) || !json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
            return api_fail(e, "tools", "tools[%zu]: expected {\"type\": \"function\", \"function\": {\"name\": ...}}", i);
    }
    return 1;
}

void openai_chat_completions(app *a, const http_req *req, http_resp *resp) {
    api_err e = {{0}, NULL};
    json_t *body = api_parse_body(req->body, req->body_len, &e), *msgs = NULL;
    int32_t *ids = NULL, *pred = NULL;
    int n = 0, n_pred = 0;
    json_constraint *fmt = NULL;
    if (!body) goto bad;
    const char *model_name = NULL;
    if (api_get_str(body, "model", &model_name, &e) < 0) goto bad;
    if (!api_model_known(a, model_name)) {
        openai_model_not_found(resp, model_name);
        json_decref(body);
        return;
    }
    if (!(msgs = normalize_messages(json_object_get(body, "messages"), &e))) goto bad;
    json_t *tools = json_object_get(body, "tools");
    if (openai_check_tools(tools, &e) < 0) goto bad;
    const char *tool_choice = json_string_value(json_object_get(body, "tool_choice"));
    bool use_tools = tools && json_array_size(tools) && !(tool_choice && !strcmp(tool_choice, "none"));
    long long nn = 1;
    if (api_get_int(body, "n", 1, 1, &nn, &e) < 0) goto bad;
    engine_params p;
    api_params_default(a, &p, 0);
    if (api_get_sampling(body, &p, false, &e) < 0 || api_get_logit_bias(body, &p, &e) < 0) goto bad;
    long long max_tokens = 0;
    if (api_get_int(body, "max_tokens", 1, 1 << 30, &max_tokens, &e) < 0) goto bad;
    if (api_get_int(body, "max_completion_tokens", 1, 1 << 30, &max_tokens, &e) < 0) goto bad;
    bool stream = false, include_usage = false, logprobs = false;
    if (api_get_bool(body, "stream", &stream, &e) < 0) goto bad;
    static const api_field extra_fields[] = {
        {"user", API_T_STR}, {"stream_options", API_T_OBJ}, {"metadata", API_T_OBJ},
        {"tool_choice", API_T_STR | API_T_OBJ}, {"parallel_tool_calls", API_T_BOOL}, {"store", API_T_BOOL},
        {"response_format", API_T_OBJ}, {"chat_template_kwargs", API_T_OBJ}, {"prediction", API_T_OBJ},
        {"reasoning_effort", API_T_STR}, {"service_tier", API_T_STR}, {"modalities", API_T_ARR}};
    if (api_check_fields(body, extra_fields, sizeof extra_fields / sizeof extra_fields[0], &e) < 0) goto bad;
    json_t *so = json_object_get(body, "stream_options");
    if (so && json_is_object(so) && api_get_bool(so, "include_usage", &include_usage, &e) < 0) goto bad;
    if (api_get_bool(body, "logprobs", &logprobs, &e) < 0) goto bad;
    long long top_lp = 0;
    if (api_get_int(body, "top_logprobs", 0, 20, &top_lp, &e) < 0) goto bad;
    if (api_get_response_format(body, "response_format", false, &fmt, &e) < 0) goto bad;
    /* tool_choice "required" or a named function: the answer is that call (api_tool_constraint) */
    json_t *tc = json_object_get(body, "tool_choice");
    const char *forced = json_is_object(tc) ? json_string_value(json_object_get(json_object_get(tc, "function"), "name")) : NULL;
    if ((json_is_object(tc) && !forced) ||
        (tool_choice && strcmp(tool_choice, "none") && strcmp(tool_choice, "auto") && strcmp(tool_choice, "required"))) {
        api_fail(&e, "tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
        goto bad;
    }
    if (api_tool_constraint(tools, forced, tool_choice && !strcmp(tool_choice, "required"), use_tools, &fmt, &p, &e) < 0)
        goto bad;
    if (parse_prediction(a, body, &pred, &n_pred, &e) < 0) goto bad;
    p.prediction = pred;
    p.n_prediction = n_pred;
    json_t *extra = json_object();
    json_t *ctk = json_object_get(body, "chat_template_kwargs");
    if (json_is_object(ctk)) json_object_update(extra, ctk);
    bool prompt_ok = openai_chat_prompt(a, resp, msgs, use_tools ? tools : NULL, extra, false, "messages", max_tokens,
                                        &ids, &n, &p.max_tokens);
    json_decref(extra);
    if (!prompt_ok) goto out;
    p.logprobs = logprobs;
    p.top_logprobs = logprobs ? (int)top_lp : 0;
    chat_state *s = calloc(1, sizeof *s);
    if (!s) {
        http_error(resp, API_OPENAI, 500, "server_error", NULL, "out of memory");
        goto out;
    }
    api_make_id(s->id, sizeof s->id, "chatcmpl-");
    s->created = api_now();
    s->stream = stream;
    s->include_usage = include_usage;
    s->logprobs = logprobs;
    s->tool_calls = json_array();
    s->lp_content = json_array();
    output_parser_config opc = {use_tools, a->think, false};
    int status;
    char errbuf[600];
    api_gen *g = api_gen_start(a, SURF_CHAT, ids, n, &p, &opc, &chat_ops, s, &status, errbuf, sizeof errbuf);
    if (!g) {
        openai_status_error(resp, status, NULL, errbuf);
        goto out;
    }
    if (stream) api_gen_answer_stream(g, resp, "text/event-stream");
    else api_gen_answer_json(g, resp, &s->body, &s->status);
    goto out;
bad:
    http_error(resp, API_OPENAI, 400, "invalid_request_error", e.param, "%s", e.msg);
out:
    jc_free(fmt); /* a request holds its own reference */
    free(ids);
    free(pred);
    json_decref(msgs);
    json_decref(body);
}
