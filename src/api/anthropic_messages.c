/* anthropic_messages.c — POST /v1/messages and /v1/messages/count_tokens
 * (Anthropic Messages API): Anthropic content blocks (text, tool_use,
 * tool_result, thinking) -> the OpenAI-shaped messages the chat template
 * wants -> engine; the answer as one message object or as SSE events
 * (message_start, content_block_start/delta/stop per block, message_delta,
 * message_stop). Errors use Anthropic's {"type":"error","error":{...}} body.
 *
 * stop_reason "stop_sequence" is decided exactly: the engine reports
 * ENGINE_FINISH_STOP for both eos and stop strings (and strips the stop
 * string), so when stop_sequences were given we keep the generated token ids
 * and look for the stop strings in their decoded text — an eos finish never
 * contains one (the engine would have stopped there first). */
#include <stdlib.h>
#include <string.h>

#include "api/api_common.h"
#include "api/api_parse.h"
#include "api/surfaces.h"

#define AM_400(...)                                              \
    do {                                                         \
        api_fail(e, NULL, __VA_ARGS__);                          \
        return NULL;                                             \
    } while (0)

typedef struct {
    char id[64];
    bool stream, started;
    int n_blocks;            /* content blocks started so far */
    int open_kind;           /* stream: kind of the open text/thinking block, -1 none */
    json_t *content;         /* non-stream: the content blocks */
    strbuf cur;              /* non-stream: text of the last text/thinking block */
    int cur_kind;            /* -1 none */
    bool tool_used;
    char *stops[ENGINE_MAX_STOP]; /* copies of stop_sequences */
    int n_stop;
    int32_t *toks;           /* generated ids (only when stop sequences were given) */
    int n_toks, cap_toks;
    int n_prompt;
    char *body;              /* non-stream result */
    int status;
} am_state;

static void am_free(void *v) {
    am_state *s = v;
    if (!s) return;
    json_decref(s->content);
    sb_free(&s->cur);
    for (int i = 0; i < s->n_stop; i++) free(s->stops[i]);
    free(s->toks);
    free(s->body);
    free(s);
}

/* Anthropic counts cache reads apart from input_tokens */
static json_t *am_usage(int in, int out_toks, int cached) {
    return json_pack("{s:i, s:i, s:i, s:i}", "input_tokens", in - cached, "output_tokens", out_toks,
                     "cache_creation_input_tokens", 0, "cache_read_input_tokens", cached);
}

static void send_start(api_gen *g, strbuf *out) {
    am_state *s = g->surf;
    if (s->started) return;
    s->started = true;
    json_t *msg = json_pack("{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:o}", "id", s->id, "type", "message", "role",
                            "assistant", "model", g->a->model_name, "content", "stop_reason", "stop_sequence",
                            "usage", am_usage(s->n_prompt, 0, 0));
    api_sse(out, "message_start", json_pack("{s:s, s:o}", "type", "message_start", "message", msg));
    api_sse(out, "ping", json_pack("{s:s}", "type", "ping"));
}

static void close_block(am_state *s, strbuf *out) {
    if (s->open_kind < 0) return;
    api_sse(out, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index", s->n_blocks - 1));
    s->open_kind = -1;
}

/* non-stream: moves the accumulated text/thinking into a content block */
static void flush_cur(am_state *s) {
    if (s->cur_kind < 0) return;
    const char *t = s->cur.s ? s->cur.s : "";
    if (s->cur_kind == OUT_REASONING)
        json_array_append_new(s->content, json_pack("{s:s, s:s%, s:s}", "type", "thinking", "thinking", t, s->cur.len,
                                                    "signature", ""));
    else
        json_array_append_new(s->content, json_pack("{s:s, s:s%}", "type", "text", "text", t, s->cur.len));
    sb_clear(&s->cur);
    s->cur_kind = -1;
}

static void on_token(api_gen *g, const engine_event *ev, strbuf *out) {
    am_state *s = g->surf;
    if (s->stream) send_start(g, out);
    if (!s->n_stop) return;
    if (s->n_toks == s->cap_toks) {
        int cap = s->cap_toks ? s->cap_toks * 2 : 256;
        int32_t *t = realloc(s->toks, (size_t)cap * sizeof *t);
        if (!t) return;
        s->toks = t;
        s->cap_toks = cap;
    }
    s->toks[s->n_toks++] = ev->token;
}

static void on_piece(api_gen *g, const out_piece *pc, strbuf *out) {
    am_state *s = g->surf;
    if (pc->kind == OUT_TOOL_CALL) {
        char tid[48];
        api_make_id(tid, sizeof tid, "toolu_");
        json_t *input = json_loads(pc->arguments, JSON_DECODE_ANY, NULL);
        if (!json_is_object(input)) { /* the parser only passes valid JSON; an object is what clients expect */
            json_decref(input);
            input = json_object();
        }
        s->tool_used = true;
        if (s->stream) {
            send_start(g, out);
            close_block(s, out);
            int idx = s->n_blocks++;
            api_sse(out, "content_block_start",
                    json_pack("{s:s, s:i, s:{s:s, s:s, s:s, s:{}}}", "type", "content_block_start", "index", idx,
                              "content_block", "type", "tool_use", "id", tid, "name", pc->name, "input"));
            char *args = api_dump(input);
            api_sse(out, "content_block_delta",
                    json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_delta", "index", idx, "delta", "type",
                              "input_json_delta", "partial_json", args ? args : "{}"));
            free(args);
            api_sse(out, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index", idx));
        } else {
            flush_cur(s);
            json_array_append_new(s->content,
                                  json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", tid, "name", pc->name,
                                            "input", input));
        }
        return;
    }
    if (!pc->len) return;
    bool think = pc->kind == OUT_REASONING;
    if (s->stream) {
        send_start(g, out);
        if (s->open_kind != (int)pc->kind) {
            close_block(s, out);
            int idx = s->n_blocks++;
            json_t *cb = think ? json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", "")
                               : json_pack("{s:s, s:s}", "type", "text", "text", "");
            api_sse(out, "content_block_start",
                    json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index", idx, "content_block", cb));
            s->open_kind = (int)pc->kind;
        }
        json_t *d = think ? json_pack("{s:s, s:s%}", "type", "thinking_delta", "thinking", pc->text, pc->len)
                          : json_pack("{s:s, s:s%}", "type", "text_delta", "text", pc->text, pc->len);
        api_sse(out, "content_block_delta",
                json_pack("{s:s, s:i, s:o}", "type", "content_block_delta", "index", s->n_blocks - 1, "delta", d));
    } else {
        if (s->cur_kind != (int)pc->kind) {
            flush_cur(s);
            s->cur_kind = (int)pc->kind;
        }
        sb_append(&s->cur, pc->text, pc->len);
    }
}

/* The stop sequence that ended generation, or NULL (see the file comment). */
static const char *matched_stop(api_gen *g, am_state *s) {
    if (!s->n_stop || !s->n_toks) return NULL;
    char *text = NULL;
    size_t len = 0;
    if (tok_decode(g->a->tok, s->toks, s->n_toks, false, &text, &len) != 0) return NULL;
    const char *best = NULL;
    size_t best_pos = len + 1;
    for (int i = 0; i < s->n_stop; i++) {
        const char *hit = memmem(text, len, s->stops[i], strlen(s->stops[i]));
        if (hit && (size_t)(hit - text) < best_pos) {
            best_pos = (size_t)(hit - text);
            best = s->stops[i];
        }
    }
    free(text);
    return best;
}

static void on_done(api_gen *g, const engine_event *ev, strbuf *out) {
    am_state *s = g->surf;
    const char *reason = "end_turn", *stop_seq = NULL;
    if (ev->finish == ENGINE_FINISH_LENGTH || ev->finish == ENGINE_FINISH_CONTEXT) {
        reason = "max_tokens";
    } else if (ev->finish == ENGINE_FINISH_STOP) {
        if ((stop_seq = matched_stop(g, s))) reason = "stop_sequence";
        else if (s->tool_used) reason = "tool_use";
    }
    if (s->stream) {
        send_start(g, out);
        close_block(s, out);
        api_sse(out, "message_delta",
                json_pack("{s:s, s:{s:s, s:s?}, s:{s:i, s:i}}", "type", "message_delta", "delta", "stop_reason", reason,
                          "stop_sequence", stop_seq, "usage", "input_tokens", ev->n_prompt, "output_tokens",
                          ev->n_gen));
        api_sse(out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
        return;
    }
    flush_cur(s);
    json_t *resp = json_pack("{s:s, s:s, s:s, s:s, s:O, s:s, s:s?, s:o}", "id", s->id, "type", "message", "role",
                             "assistant", "model", g->a->model_name, "content", s->content, "stop_reason", reason,
                             "stop_sequence", stop_seq, "usage", am_usage(ev->n_prompt, ev->n_gen, ev->n_cached));
    s->body = api_dump(resp);
    s->status = s->body ? 200 : 500;
}

static void on_error(api_gen *g, const char *msg, strbuf *out) {
    am_state *s = g->surf;
    json_t *e = json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", "api_error", "message", msg);
    if (s->stream) {
        api_sse(out, "error", e);
    } else {
        s->body = api_dump(e);
        s->status = 500;
    }
}

static const api_gen_ops am_ops = {on_piece, on_token, on_done, on_error, am_free};

/* The stream: message_start goes out at once (before the first token). */
static int am_stream_next(void *st, strbuf *out) {
    api_gen *g = st;
    am_state *s = g->surf;
    if (!s->started) {
        send_start(g, out);
        return 1;
    }
    return api_gen_next(g, out);
}

static void am_stream_free(void *st) { api_gen_free(st); }

/* ---- request -> OpenAI-shaped messages ---------------------------------- */

/* Text of a string or an array of text blocks (malloc'd); NULL with e filled. */
static char *text_of(json_t *c, const char *where, api_err *e) {
    if (json_is_string(c)) return strdup(json_string_value(c));
    if (!json_is_array(c)) {
        api_fail(e, NULL, "%s: expected a string or an array of content blocks", where);
        return NULL;
    }
    static const char *const types[] = {"text", NULL};
    strbuf t = {0};
    long k = api_join_text_parts(c, types, "\n", &t);
    if (k >= 0) {
        api_fail(e, NULL, "%s.%ld: only text blocks ({\"type\": \"text\", \"text\": ...}) are supported here", where, k);
        return NULL;
    }
    return sb_take(&t, NULL);
}

static void push_text_msg(json_t *out, const char *role, strbuf *t) {
    json_array_append_new(out, json_pack("{s:s, s:s%}", "role", role, "content", t->s ? t->s : "", t->len));
    sb_clear(t);
}

/* Converts one Anthropic message into OpenAI-shaped messages appended to out.
 * Returns 0, or -1 with e filled. */
static int convert_message(json_t *m, size_t i, json_t *out, api_err *e) {
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!json_is_object(m) || !role || (strcmp(role, "user") && strcmp(role, "assistant"))) {
        api_fail(e, NULL, "messages.%zu.role: Input should be 'user' or 'assistant'", i);
        return -1;
    }
    bool user = !strcmp(role, "user");
    json_t *c = json_object_get(m, "content");
    if (json_is_string(c)) {
        json_array_append_new(out, json_pack("{s:s, s:O}", "role", role, "content", c));
        return 0;
    }
    if (!json_is_array(c)) {
        api_fail(e, NULL, "messages.%zu.content: expected a string or an array of content blocks", i);
        return -1;
    }
    strbuf text = {0}, thinking = {0};
    json_t *calls = json_array();
    size_t k, n_before = json_array_size(out);
    json_t *b;
    json_array_foreach(c, k, b) {
        const char *type = json_string_value(json_object_get(b, "type"));
        if (!json_is_object(b) || !type) {
            api_fail(e, NULL, "messages.%zu.content.%zu: a content block needs a 'type'", i, k);
            goto fail;
        }
        if (!strcmp(type, "text")) {
            json_t *t = json_object_get(b, "text");
            if (!json_is_string(t)) {
                api_fail(e, NULL, "messages.%zu.content.%zu.text: Field required (a string)", i, k);
                goto fail;
            }
            if (text.len) sb_puts(&text, "\n");
            sb_append(&text, json_string_value(t), json_string_length(t));
        } else if (!strcmp(type, "thinking") || !strcmp(type, "redacted_thinking")) {
            json_t *t = json_object_get(b, "thinking");
            if (!user && json_is_string(t)) sb_append(&thinking, json_string_value(t), json_string_length(t));
        } else if (!strcmp(type, "tool_use")) {
            json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"), *input = json_object_get(b, "input");
            if (user) {
                api_fail(e, NULL, "messages.%zu.content.%zu: tool_use blocks belong in assistant messages", i, k);
                goto fail;
            }
            if (!json_is_string(id) || !json_is_string(name) || (input && !json_is_object(input))) {
                api_fail(e, NULL,
                         "messages.%zu.content.%zu: tool_use needs 'id' and 'name' (strings) and 'input' (an object)", i, k);
                goto fail;
            }
            json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:o}}", "id", id, "type", "function", "function",
                                                   "name", name, "arguments", input ? json_incref(input) : json_object()));
        } else if (!strcmp(type, "tool_result")) {
            json_t *tid = json_object_get(b, "tool_use_id"), *tc = json_object_get(b, "content");
            if (!user) {
                api_fail(e, NULL, "messages.%zu.content.%zu: tool_result blocks belong in user messages", i, k);
                goto fail;
            }
            if (!json_is_string(tid)) {
                api_fail(e, NULL, "messages.%zu.content.%zu.tool_use_id: Field required (a string)", i, k);
                goto fail;
            }
            json_t *ie = json_object_get(b, "is_error");
            if (ie && !json_is_boolean(ie)) {
                api_fail(e, NULL, "messages.%zu.content.%zu.is_error: expected a boolean", i, k);
                goto fail;
            }
            char where[96];
            snprintf(where, sizeof where, "messages.%zu.content.%zu.content", i, k);
            char *rt = !tc || json_is_null(tc) ? strdup("") : text_of(tc, where, e);
            if (!rt) goto fail;
            if (text.len) push_text_msg(out, "user", &text); /* keep block order */
            json_array_append_new(out, json_pack("{s:s, s:O, s:s}", "role", "tool", "tool_call_id", tid, "content", rt));
            free(rt);
        } else {
            api_fail(e, NULL,
                     "messages.%zu.content.%zu: content blocks of type '%s' are not supported (text, tool_use, "
                     "tool_result, thinking only)", i, k, type);
            goto fail;
        }
    }
    if (user) {
        /* a turn of only tool_results needs no empty user message after them */
        if (text.len || json_array_size(out) == n_before) push_text_msg(out, "user", &text);
    } else {
        json_t *am = json_pack("{s:s, s:s%}", "role", "assistant", "content", text.s ? text.s : "", text.len);
        if (json_array_size(calls)) json_object_set(am, "tool_calls", calls);
        if (thinking.len) json_object_set_new(am, "reasoning_content", json_stringn(thinking.s, thinking.len));
        json_array_append_new(out, am);
    }
    sb_free(&text);
    sb_free(&thinking);
    json_decref(calls);
    return 0;
fail:
    sb_free(&text);
    sb_free(&thinking);
    json_decref(calls);
    return -1;
}

/* Anthropic tools -> OpenAI function tools (new reference; NULL + e on error). */
static json_t *convert_tools(json_t *tools, api_err *e) {
    if (!json_is_array(tools)) AM_400("tools: expected an array");
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *name = json_object_get(t, "name"), *desc = json_object_get(t, "description");
        json_t *schema = json_object_get(t, "input_schema");
        const char *type = json_string_value(json_object_get(t, "type"));
        if (!json_is_object(t) || !json_is_string(name) || (desc && !json_is_null(desc) && !json_is_string(desc))) {
            json_decref(out);
            AM_400("tools.%zu: a tool needs 'name' (a string), 'input_schema' (an object) and optionally 'description'", i);
        }
        if (type && strcmp(type, "custom")) {
            json_decref(out);
            AM_400("tools.%zu: server tools of type '%s' are not supported", i, type);
        }
        if (!json_is_object(schema)) {
            json_decref(out);
            AM_400("tools.%zu.input_schema: Field required (a JSON schema object)", i);
        }
        json_t *fn = json_pack("{s:O}", "name", name);
        if (json_is_string(desc)) json_object_set(fn, "description", desc);
        json_object_set(fn, "parameters", schema);
        json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
    return out;
}

/* What /v1/messages and count_tokens share: validates model, system,
 * messages, tools, tool_choice, thinking; renders the prompt and tokenizes it.
 * Returns 0, or an HTTP status with resp filled. */
static int build_prompt(app *a, json_t *body, int32_t **ids, int *n, bool *use_tools, http_resp *resp) {
    api_err err = {{0}, NULL}, *e = &err;
    json_t *msgs = NULL, *tools = NULL, *extra = NULL;
    int st = 400;
    const char *model_name = NULL;
    json_t *mv = json_object_get(body, "model");
    if (!mv) {
        api_fail(e, NULL, "model: Field required");
        goto bad;
    }
    if (api_get_str(body, "model", &model_name, e) < 0) goto bad;
    if (!api_model_known(a, model_name)) {
        http_error(resp, API_ANTHROPIC, 404, "not_found_error", "model", "model: %s", model_name);
        return 404;
    }
    json_t *m = json_object_get(body, "messages");
    if (!m) {
        api_fail(e, NULL, "messages: Field required");
        goto bad;
    }
    if (!json_is_array(m)) {
        api_fail(e, NULL, "messages: Input should be a valid list");
        goto bad;
    }
    if (!json_array_size(m)) {
        api_fail(e, NULL, "messages: at least one message is required");
        goto bad;
    }
    msgs = json_array();
    json_t *sys = json_object_get(body, "system");
    if (sys && !json_is_null(sys)) {
        char *stext = text_of(sys, "system", e);
        if (!stext) goto bad;
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", stext));
        free(stext);
    }
    size_t i;
    json_t *mm;
    json_array_foreach(m, i, mm) if (convert_message(mm, i, msgs, e) < 0) goto bad;
    json_t *tv = json_object_get(body, "tools");
    if (tv && !json_is_null(tv) && !(tools = convert_tools(tv, e))) goto bad;
    json_t *tc = json_object_get(body, "tool_choice");
    const char *tct = NULL;
    if (tc && !json_is_null(tc)) {
        tct = json_string_value(json_object_get(tc, "type"));
        if (!json_is_object(tc) || !tct ||
            (strcmp(tct, "auto") && strcmp(tct, "any") && strcmp(tct, "tool") && strcmp(tct, "none"))) {
            api_fail(e, NULL, "tool_choice: expected {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}");
            goto bad;
        }
        if (!strcmp(tct, "tool") && !json_is_string(json_object_get(tc, "name"))) {
            api_fail(e, NULL, "tool_choice.name: Field required for type 'tool'");
            goto bad;
        }
    }
    extra = json_object();
    json_t *th = json_object_get(body, "thinking");
    if (th && !json_is_null(th)) {
        const char *tt = json_string_value(json_object_get(th, "type"));
        if (!json_is_object(th) || !tt || (strcmp(tt, "enabled") && strcmp(tt, "disabled"))) {
            api_fail(e, NULL, "thinking: expected {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": \"disabled\"}");
            goto bad;
        }
        json_object_set_new(extra, "enable_thinking", json_boolean(!strcmp(tt, "enabled")));
    }
    *use_tools = tools && json_array_size(tools) && !(tct && !strcmp(tct, "none"));
    /* a final assistant message is a prefill: the answer continues its text */
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    const char *prefill = NULL;
    if (!strcmp(json_string_value(json_object_get(last, "role")), "assistant") && !json_object_get(last, "tool_calls") &&
        json_string_length(json_object_get(last, "content"))) {
        json_t *pc = json_object_get(last, "content");
        prefill = json_string_value(pc);
        unsigned char endc = (unsigned char)prefill[json_string_length(pc) - 1];
        if (endc == ' ' || endc == '\n' || endc == '\t' || endc == '\r') {
            api_fail(e, NULL, "final assistant content cannot end with trailing whitespace");
            goto bad;
        }
    }
    char errbuf[600];
    char *text = NULL;
    st = api_render_chat(a, msgs, *use_tools ? tools : NULL, extra, !prefill, ids, n, prefill ? &text : NULL, errbuf,
                         sizeof errbuf);
    if (st) {
        http_error(resp, API_ANTHROPIC, st, st == 400 ? "invalid_request_error" : "api_error", NULL, "%s", errbuf);
        goto out;
    }
    if (prefill) {
        /* cut the rendered prompt right after the prefill text (dropping the
         * template's end-of-turn) and tokenize that */
        size_t pl = strlen(prefill), tl = strlen(text);
        const char *hit = NULL, *q = text;
        while ((q = memmem(q, tl - (size_t)(q - text), prefill, pl))) hit = q++;
        if (hit) {
            int32_t *cut = NULL;
            int nc = 0;
            if (tok_encode(a->tok, text, (size_t)(hit - text) + pl, false, &cut, &nc) == 0) {
                free(*ids);
                *ids = cut;
                *n = nc;
            }
        }
        free(text);
    }
    goto out;
bad:
    st = 400;
    http_error(resp, API_ANTHROPIC, 400, "invalid_request_error", NULL, "%s", e->msg);
out:
    json_decref(msgs);
    json_decref(tools);
    json_decref(extra);
    return st;
}

void anthropic_count_tokens(app *a, const http_req *req, http_resp *resp) {
    api_err e = {{0}, NULL};
    json_t *body = api_parse_body(req->body, req->body_len, &e);
    if (!body) {
        http_error(resp, API_ANTHROPIC, 400, "invalid_request_error", NULL, "%s", e.msg);
        return;
    }
    int32_t *ids = NULL;
    int n = 0;
    bool use_tools = false;
    if (build_prompt(a, body, &ids, &n, &use_tools, resp) == 0)
        http_json(resp, 200, api_dump(json_pack("{s:i}", "input_tokens", n)));
    free(ids);
    json_decref(body);
}

void anthropic_messages(app *a, const http_req *req, http_resp *resp) {
    api_err e = {{0}, NULL};
    json_t *body = api_parse_body(req->body, req->body_len, &e);
    int32_t *ids = NULL;
    int n = 0;
    am_state *s = NULL;
    json_constraint *fmt = NULL;
    if (!body) goto bad;
    /* sampling and limits first: they need no rendering */
    long long max_tokens = 0;
    int r = api_get_int(body, "max_tokens", 1, 1 << 30, &max_tokens, &e);
    if (r < 0) goto bad;
    if (r == 0) {
        snprintf(e.msg, sizeof e.msg, "max_tokens: Field required");
        goto bad;
    }
    engine_params p;
    api_params_default(a, &p, 0);
    double d;
    long long x;
    if ((r = api_get_num(body, "temperature", 0, 1, &d, &e)) < 0) goto bad;
    if (r) p.sp.temperature = (float)d;
    if ((r = api_get_num(body, "top_p", 0, 1, &d, &e)) < 0) goto bad;
    if (r) p.sp.top_p = d <= 0 ? 1e-6f : (float)d;
    if ((r = api_get_int(body, "top_k", 0, 1 << 30, &x, &e)) < 0) goto bad;
    if (r) p.sp.top_k = (int)x;
    bool stream = false;
    if (api_get_bool(body, "stream", &stream, &e) < 0) goto bad;
    /* structured outputs: output_config.format {"type": "json_schema", "schema": ...} */
    json_t *oc = json_object_get(body, "output_config");
    if (oc && !json_is_null(oc) && !json_is_object(oc)) {
        snprintf(e.msg, sizeof e.msg, "output_config: expected an object");
        goto bad;
    }
    if (json_is_object(oc) && api_get_response_format(oc, "format", true, &fmt, &e) < 0) goto bad;
    p.constraint = fmt;
    json_t *md = json_object_get(body, "metadata");
    if (md && !json_is_null(md) && !json_is_object(md)) {
        snprintf(e.msg, sizeof e.msg, "metadata: expected an object");
        goto bad;
    }
    json_t *ss = json_object_get(body, "stop_sequences");
    if (ss && !json_is_null(ss)) {
        if (!json_is_array(ss)) {
            snprintf(e.msg, sizeof e.msg, "stop_sequences: expected an array of strings");
            goto bad;
        }
        if (json_array_size(ss) > ENGINE_MAX_STOP) {
            snprintf(e.msg, sizeof e.msg, "stop_sequences: at most %d stop sequences are supported", ENGINE_MAX_STOP);
            goto bad;
        }
        size_t i;
        json_t *v;
        json_array_foreach(ss, i, v) {
            if (!json_is_string(v)) {
                snprintf(e.msg, sizeof e.msg, "stop_sequences.%zu: expected a string", i);
                goto bad;
            }
            if (!json_string_length(v)) continue; /* an empty stop sequence never matches */
            p.stop[p.n_stop++] = json_string_value(v);
        }
    }
    bool use_tools = false;
    if (build_prompt(a, body, &ids, &n, &use_tools, resp)) goto out;
    /* tool_choice "tool" / "any": that call (before output_config.format); strict tools */
    json_t *tc = json_object_get(body, "tool_choice");
    const char *tct = json_string_value(json_object_get(tc, "type"));
    const char *named = tct && !strcmp(tct, "tool") ? json_string_value(json_object_get(tc, "name")) : NULL;
    if (api_tool_constraint(json_object_get(body, "tools"), named, tct && !strcmp(tct, "any"), use_tools, &fmt, &p, &e) < 0)
        goto bad;
    if (!api_fit_output(a, n, max_tokens, &p.max_tokens)) {
        http_error(resp, API_ANTHROPIC, 400, "invalid_request_error", NULL,
                   "prompt is too long: %d tokens > %d maximum", n, engine_ctx_size(a->eng) - 1);
        goto out;
    }
    if (!(s = calloc(1, sizeof *s)) || !(s->content = json_array())) {
        am_free(s);
        http_error(resp, API_ANTHROPIC, 500, "api_error", NULL, "out of memory");
        goto out;
    }
    api_make_id(s->id, sizeof s->id, "msg_");
    s->stream = stream;
    s->open_kind = s->cur_kind = -1;
    s->n_prompt = n;
    for (int i = 0; i < p.n_stop; i++)
        if ((s->stops[s->n_stop] = strdup(p.stop[i]))) s->n_stop++;
    output_parser_config opc = {use_tools, a->think, false};
    int status;
    char errbuf[600];
    api_gen *g = api_gen_start(a, SURF_ANTHROPIC, ids, n, &p, &opc, &am_ops, s, &status, errbuf, sizeof errbuf);
    if (!g) {
        http_error(resp, API_ANTHROPIC, status, status == 400 ? "invalid_request_error" : "api_error", NULL, "%s", errbuf);
        goto out;
    }
    if (stream) {
        resp->status = 200;
        resp->content_type = "text/event-stream";
        resp->stream = (stream_source){g, am_stream_next, am_stream_free};
    } else {
        api_gen_answer_json(g, resp, &s->body, &s->status);
    }
    goto out;
bad:
    http_error(resp, API_ANTHROPIC, 400, "invalid_request_error", e.param, "%s", e.msg);
out:
    jc_free(fmt);
    free(ids);
    json_decref(body);
}

/* The served model as an Anthropic ModelInfo (new reference) */
static json_t *model_info(const app *a) {
    int ctx = engine_ctx_size(a->eng);
    return json_pack("{s:s, s:s, s:s, s:o, s:i, s:i}", "type", "model", "id", a->model_name, "display_name",
                     a->model_name, "created_at", api_time_json(&(struct timespec){a->created, 0}),
                     "max_input_tokens", ctx, "max_tokens", ctx);
}

void anthropic_models(app *a, const http_req *req, http_resp *resp) {
    if (!strcmp(req->path, "/v1/models")) { /* one model: one page */
        http_json(resp, 200, api_dump(json_pack("{s:[o], s:b, s:s, s:s}", "data", model_info(a), "has_more", 0,
                                                "first_id", a->model_name, "last_id", a->model_name)));
        return;
    }
    const char *id = req->path + strlen("/v1/models/");
    if (strcmp(id, a->model_name)) {
        http_error(resp, API_ANTHROPIC, 404, "not_found_error", NULL, "model: %.200s", id);
        return;
    }
    http_json(resp, 200, api_dump(model_info(a)));
}
