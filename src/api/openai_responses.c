/* openai_responses.c — the OpenAI Responses API: POST /v1/responses and
 * GET /v1/responses/{id} (+ /input_items).
 *
 * A request's input (a string, or an array of items: messages, function_call,
 * function_call_output, reasoning) is normalized into Responses items, put
 * after the conversation of `previous_response_id` (from the in-memory store,
 * api/responses_store.h), turned into chat messages (instructions first, as a
 * system message) and rendered with the chat template (truncation "auto":
 * the middle of that conversation dropped where it does not fit,
 * api/api_truncate.h; "disabled", the default: a 400); flat function tools
 * ({type, name, description, parameters}) become the chat-template shape
 * {type, function: {...}} (the input's parsing: api/responses_input.h). The answer is a response object whose output items
 * (reasoning, message, function_call) are built by one state machine from the
 * parsed pieces of api_gen; streaming emits the same items as typed SSE events
 * with increasing sequence_number (response.created ... response.completed).
 *
 * The store is created on first use and hung on app.responses_store; it is
 * freed at process exit (a destructor here, since cmd_serve.c does not know
 * about it). */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_common.h"
#include "api/api_parse.h"
#include "api/openai.h"
#include "api/responses_input.h"
#include "api/responses_store.h"
#include "api/surfaces.h"

#define RESP_STORE_MAX_ENTRIES 1000
#define RESP_STORE_MAX_BYTES ((size_t)256 << 20)

/* ---- the store's lifetime ---------------------------------------------- */

static pthread_mutex_t store_lock = PTHREAD_MUTEX_INITIALIZER;
static responses_store *store_first; /* the process's store, freed at exit */

static responses_store *store_of(app *a, bool create) {
    pthread_mutex_lock(&store_lock);
    if (!a->responses_store && create) {
        a->responses_store = responses_store_new(RESP_STORE_MAX_ENTRIES, RESP_STORE_MAX_BYTES);
        if (!store_first) store_first = a->responses_store;
    }
    responses_store *s = a->responses_store;
    pthread_mutex_unlock(&store_lock);
    return s;
}

/* Runs after main() returned (cmd_serve has stopped the HTTP threads). */
__attribute__((destructor)) static void store_free_at_exit(void) {
    responses_store_free(store_first);
    store_first = NULL;
}

/* A float parameter as the client would write it (0.7, not 0.699999988). */
static double num6(float x) {
    char b[32];
    snprintf(b, sizeof b, "%.6g", (double)x);
    return strtod(b, NULL);
}

/* ---- generation state ---------------------------------------------------- */

typedef enum { ITEM_NONE = 0, ITEM_MESSAGE, ITEM_REASONING } open_kind;

typedef struct {
    char id[64];
    long long created;
    bool stream, store;
    long long seq;          /* next sequence_number */
    json_t *echo;           /* request fields the response object repeats */
    json_t *output;         /* finished output items */
    json_t *input_items;    /* this request's input, normalized */
    json_t *history;        /* the previous response's conversation (items) */
    open_kind open;         /* the item being generated */
    char item_id[64];
    int out_index;
    strbuf text;            /* its text so far */
    strbuf held;            /* whitespace-only content before a message opened */
    char *body;             /* non-stream result */
    int status;
    /* include: ["message.output_text.logprobs"]: each token's entry
     * (openai_logprob_entry) waits in lp_pending for the output_text delta
     * that carries its text, and lp_item holds the open message's (its
     * output_text.done and its part); a reasoning or tool-call piece drops
     * the entries of its tokens */
    bool logprobs;
    json_t *lp_pending, *lp_item;
} resp_state;

static void resp_free(void *v) {
    resp_state *s = v;
    if (!s) return;
    json_decref(s->echo);
    json_decref(s->output);
    json_decref(s->input_items);
    json_decref(s->history);
    sb_free(&s->text);
    sb_free(&s->held);
    json_decref(s->lp_pending);
    json_decref(s->lp_item);
    free(s->body);
    free(s);
}

/* Appends a streaming event: {"type", "sequence_number", ...fields} (fields consumed). */
static void emit(resp_state *s, strbuf *out, const char *type, json_t *fields) {
    if (!s->stream) {
        json_decref(fields);
        return;
    }
    json_t *o = json_pack("{s:s, s:I}", "type", type, "sequence_number", s->seq++);
    if (fields) json_object_update(o, fields);
    json_decref(fields);
    api_sse(out, type, o);
}

static json_t *output_text_of(json_t *output) {
    strbuf t = {0};
    size_t i, k;
    json_t *it, *part;
    json_array_foreach(output, i, it) {
        if (strcmp(api_str_or(json_object_get(it, "type"), ""), "message")) continue;
        json_array_foreach(json_object_get(it, "content"), k, part) {
            json_t *tx = json_object_get(part, "text");
            if (json_is_string(tx)) sb_append(&t, json_string_value(tx), json_string_length(tx));
        }
    }
    json_t *r = json_stringn(t.s ? t.s : "", t.len);
    sb_free(&t);
    return r;
}

/* The response object; output is borrowed, usage and error consumed. */
static json_t *response_obj(resp_state *s, app *a, const char *status, const char *incomplete_reason, json_t *usage,
                            json_t *error) {
    json_t *r = json_pack("{s:s, s:s, s:I, s:s, s:o, s:o, s:s, s:O, s:o}", "id", s->id, "object", "response",
                          "created_at", s->created, "status", status, "error", error ? error : json_null(),
                          "incomplete_details",
                          incomplete_reason ? json_pack("{s:s}", "reason", incomplete_reason) : json_null(), "model",
                          a->model_name, "output", s->output, "output_text", output_text_of(s->output));
    json_object_update(r, s->echo);
    json_object_set_new(r, "usage", usage ? usage : json_null());
    return r;
}

static void part_added(resp_state *s, strbuf *out) {
    json_t *part = s->open == ITEM_MESSAGE ? json_pack("{s:s, s:s, s:[]}", "type", "output_text", "text", "", "annotations")
                                           : json_pack("{s:s, s:s}", "type", "reasoning_text", "text", "");
    emit(s, out, "response.content_part.added",
         json_pack("{s:s, s:i, s:i, s:o}", "item_id", s->item_id, "output_index", s->out_index, "content_index", 0,
                   "part", part));
}

static void open_item(resp_state *s, strbuf *out, open_kind k) {
    s->open = k;
    s->out_index = (int)json_array_size(s->output);
    sb_clear(&s->text);
    api_make_id(s->item_id, sizeof s->item_id, k == ITEM_MESSAGE ? "msg_" : "rs_");
    json_t *item = k == ITEM_MESSAGE ? json_pack("{s:s, s:s, s:s, s:s, s:[]}", "id", s->item_id, "type", "message",
                                                 "status", "in_progress", "role", "assistant", "content")
                                     : json_pack("{s:s, s:s, s:[], s:[]}", "id", s->item_id, "type", "reasoning",
                                                 "summary", "content");
    emit(s, out, "response.output_item.added", json_pack("{s:i, s:o}", "output_index", s->out_index, "item", item));
    part_added(s, out);
}

/* the entries of the tokens whose text a message delta carries (taken) */
static json_t *take_logprobs(resp_state *s) {
    if (!s->logprobs) return json_array();
    json_t *lp = s->lp_pending;
    s->lp_pending = json_array();
    json_array_extend(s->lp_item, lp);
    return lp;
}

static void delta(resp_state *s, strbuf *out, const char *text, size_t len) {
    if (!len) return;
    sb_append(&s->text, text, len);
    if (s->open == ITEM_MESSAGE)
        emit(s, out, "response.output_text.delta",
             json_pack("{s:s, s:i, s:i, s:s%, s:o}", "item_id", s->item_id, "output_index", s->out_index,
                       "content_index", 0, "delta", text, len, "logprobs", take_logprobs(s)));
    else
        emit(s, out, "response.reasoning_text.delta",
             json_pack("{s:s, s:i, s:i, s:s%}", "item_id", s->item_id, "output_index", s->out_index, "content_index",
                       0, "delta", text, len));
}

static void close_item(resp_state *s, strbuf *out, bool incomplete) {
    if (s->open == ITEM_NONE) return;
    const char *txt = s->text.s ? s->text.s : "";
    size_t len = s->text.len;
    bool msg = s->open == ITEM_MESSAGE;
    json_t *lp = s->lp_item; /* the message's entries (none unless asked for), its done event's and its part's */
    s->lp_item = json_array();
    if (msg)
        emit(s, out, "response.output_text.done",
             json_pack("{s:s, s:i, s:i, s:s%, s:O}", "item_id", s->item_id, "output_index", s->out_index,
                       "content_index", 0, "text", txt, len, "logprobs", lp));
    else
        emit(s, out, "response.reasoning_text.done",
             json_pack("{s:s, s:i, s:i, s:s%}", "item_id", s->item_id, "output_index", s->out_index, "content_index",
                       0, "text", txt, len));
    json_t *part = msg ? json_pack("{s:s, s:s%, s:[]}", "type", "output_text", "text", txt, len, "annotations")
                       : json_pack("{s:s, s:s%}", "type", "reasoning_text", "text", txt, len);
    if (msg && s->logprobs) json_object_set(part, "logprobs", lp);
    json_decref(lp);
    emit(s, out, "response.content_part.done",
         json_pack("{s:s, s:i, s:i, s:O}", "item_id", s->item_id, "output_index", s->out_index, "content_index", 0,
                   "part", part));
    json_t *item = msg ? json_pack("{s:s, s:s, s:s, s:s, s:[o]}", "id", s->item_id, "type", "message", "status",
                                   incomplete ? "incomplete" : "completed", "role", "assistant", "content", part)
                       : json_pack("{s:s, s:s, s:[], s:[o]}", "id", s->item_id, "type", "reasoning", "summary",
                                   "content", part);
    emit(s, out, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", s->out_index, "item", item));
    json_array_append_new(s->output, item);
    s->open = ITEM_NONE;
    sb_clear(&s->text);
}

static bool all_space(const char *t, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)t[i])) return false;
    return true;
}

static void on_piece(api_gen *g, const out_piece *pc, strbuf *out) {
    resp_state *s = g->surf;
    if (pc->kind == OUT_CONTENT) {
        if (s->open == ITEM_MESSAGE) {
            delta(s, out, pc->text, pc->len);
            return;
        }
        /* whitespace between items (after </think>, between tool calls)
         * does not open a message of its own */
        if (all_space(pc->text, pc->len)) {
            sb_append(&s->held, pc->text, pc->len);
            return;
        }
        close_item(s, out, false);
        const char *t = pc->text;
        size_t len = pc->len;
        bool first = json_array_size(s->output) == 0;
        open_item(s, out, ITEM_MESSAGE);
        if (first) {
            delta(s, out, s->held.s, s->held.len);
        } else {
            /* after reasoning or a tool call: the separator is not content */
            while (len && isspace((unsigned char)*t)) t++, len--;
        }
        sb_clear(&s->held);
        delta(s, out, t, len);
        return;
    }
    if (s->logprobs) json_array_clear(s->lp_pending); /* (a reasoning or tool-call piece's tokens: no entries) */
    if (pc->kind == OUT_REASONING) {
        if (s->open != ITEM_REASONING) {
            close_item(s, out, false);
            sb_clear(&s->held);
            open_item(s, out, ITEM_REASONING);
        }
        delta(s, out, pc->text, pc->len);
        return;
    }
    /* tool call: one complete item */
    close_item(s, out, false);
    sb_clear(&s->held);
    char fid[64], cid[64];
    api_make_id(fid, sizeof fid, "fc_");
    api_make_id(cid, sizeof cid, "call_");
    int idx = (int)json_array_size(s->output);
    emit(s, out, "response.output_item.added",
         json_pack("{s:i, s:{s:s, s:s, s:s, s:s, s:s, s:s}}", "output_index", idx, "item", "id", fid, "type",
                   "function_call", "status", "in_progress", "arguments", "", "call_id", cid, "name", pc->name));
    emit(s, out, "response.function_call_arguments.delta",
         json_pack("{s:s, s:i, s:s}", "item_id", fid, "output_index", idx, "delta", pc->arguments));
    emit(s, out, "response.function_call_arguments.done",
         json_pack("{s:s, s:i, s:s, s:s}", "item_id", fid, "output_index", idx, "name", pc->name, "arguments",
                   pc->arguments));
    json_t *item = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "id", fid, "type", "function_call", "status",
                             "completed", "arguments", pc->arguments, "call_id", cid, "name", pc->name);
    emit(s, out, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", idx, "item", item));
    json_array_append_new(s->output, item);
}

static void store_response(resp_state *s, app *a, json_t *resp) {
    if (!s->store) return;
    responses_store *st = store_of(a, true);
    if (!st) return;
    json_t *conv = json_array();
    json_array_extend(conv, s->history);
    json_array_extend(conv, s->input_items);
    json_array_extend(conv, s->output);
    char *r = json_dumps(resp, JSON_COMPACT), *in = json_dumps(s->input_items, JSON_COMPACT);
    char *c = api_dump(conv);
    if (r && in && c) responses_store_put(st, s->id, r, in, c);
    free(r);
    free(in);
    free(c);
}

static void on_done(api_gen *g, const engine_event *ev, strbuf *out) {
    resp_state *s = g->surf;
    bool incomplete = ev->finish == ENGINE_FINISH_LENGTH || ev->finish == ENGINE_FINISH_CONTEXT ||
                      ev->finish == ENGINE_FINISH_CANCELLED;
    if (s->open == ITEM_NONE && json_array_size(s->output) == 0) {
        /* nothing but whitespace (or nothing): still one message */
        open_item(s, out, ITEM_MESSAGE);
        delta(s, out, s->held.s, s->held.len);
    }
    close_item(s, out, incomplete);
    json_t *usage = json_pack("{s:i, s:{s:i}, s:i, s:{s:i}, s:i}", "input_tokens", ev->n_prompt,
                              "input_tokens_details", "cached_tokens", ev->n_cached, "output_tokens", ev->n_gen,
                              "output_tokens_details", "reasoning_tokens", 0, "total_tokens", ev->n_prompt + ev->n_gen);
    json_t *r = response_obj(s, g->a, incomplete ? "incomplete" : "completed",
                             incomplete ? "max_output_tokens" : NULL, usage, NULL);
    store_response(s, g->a, r);
    if (s->stream) {
        emit(s, out, incomplete ? "response.incomplete" : "response.completed", json_pack("{s:o}", "response", r));
    } else {
        s->body = api_dump(r);
        s->status = 200;
    }
}

static void on_error(api_gen *g, const char *msg, strbuf *out) {
    resp_state *s = g->surf;
    if (s->stream) {
        close_item(s, out, true);
        json_t *r = response_obj(s, g->a, "failed", NULL, NULL,
                                 json_pack("{s:s, s:s}", "code", "server_error", "message", msg));
        emit(s, out, "response.failed", json_pack("{s:o}", "response", r));
    } else {
        s->body = api_dump(json_pack("{s:{s:s, s:s, s:n, s:s}}", "error", "message", msg, "type", "server_error",
                                     "param", "code", "server_error"));
        s->status = 500;
    }
}

static void on_token(api_gen *g, const engine_event *ev, strbuf *out) {
    resp_state *s = g->surf;
    if (s->logprobs) json_array_append_new(s->lp_pending, openai_logprob_entry(g->a, ev));
}

static const api_gen_ops resp_ops = {on_piece, on_token, on_done, on_error, resp_free};

/* The stream starts with response.created and response.in_progress before
 * the first engine event (prefill may take a while). */
typedef struct {
    api_gen *g;
    bool started;
} resp_stream;

static int rs_next(void *st, strbuf *out) {
    resp_stream *rs = st;
    if (!rs->started) {
        rs->started = true;
        resp_state *s = rs->g->surf;
        json_t *r = response_obj(s, rs->g->a, "in_progress", NULL, NULL, NULL);
        emit(s, out, "response.created", json_pack("{s:O}", "response", r));
        emit(s, out, "response.in_progress", json_pack("{s:o}", "response", r));
        return 1;
    }
    return api_gen_next(rs->g, out);
}

static void rs_free(void *st) {
    resp_stream *rs = st;
    api_gen_free(rs->g);
    free(rs);
}

static int check_type(json_t *body, const char *key, int (*is)(const json_t *), const char *what, api_err *e) {
    json_t *v = json_object_get(body, key);
    if (v && !json_is_null(v) && !is(v)) return api_fail(e, key, "'%s': expected %s", key, what);
    return 0;
}
static int is_object(const json_t *v) { return json_is_object(v); }
static int is_array(const json_t *v) { return json_is_array(v); }
static int is_string(const json_t *v) { return json_is_string(v); }

static json_t *or_null(json_t *v) { return v && !json_is_null(v) ? json_incref(v) : json_null(); }

void openai_responses_create(app *a, const http_req *req, http_resp *resp) {
    api_err e = {{0}, NULL};
    json_t *body = api_parse_body(req->body, req->body_len, &e);
    json_t *items = NULL, *history = NULL, *msgs = NULL, *chat_tools = NULL, *echo_tools = NULL, *tc_echo = NULL;
    int32_t *ids = NULL;
    int n = 0;
    json_constraint *fmt = NULL;
    resp_state *s = NULL;
    char errbuf[600];
    if (!body) goto bad;
    const char *model_name = NULL, *instructions = NULL, *prev_id = NULL;
    if (api_get_str(body, "model", &model_name, &e) < 0) goto bad;
    if (!api_model_known(a, model_name)) {
        openai_model_not_found(resp, model_name);
        goto out;
    }
    if (api_get_str(body, "instructions", &instructions, &e) < 0) goto bad;
    if (api_get_str(body, "previous_response_id", &prev_id, &e) < 0) goto bad;
    if (api_get_str(body, "user", &(const char *){NULL}, &e) < 0) goto bad;
    if (check_type(body, "metadata", is_object, "an object", &e) < 0) goto bad;
    if (check_type(body, "text", is_object, "an object", &e) < 0) goto bad;
    if (check_type(body, "reasoning", is_object, "an object", &e) < 0) goto bad;
    if (check_type(body, "include", is_array, "an array", &e) < 0) goto bad;
    if (check_type(body, "truncation", is_string, "a string", &e) < 0) goto bad;
    const char *trunc_mode = json_string_value(json_object_get(body, "truncation"));
    if (trunc_mode && strcmp(trunc_mode, "auto") && strcmp(trunc_mode, "disabled")) {
        api_fail(&e, "truncation", "truncation: Input should be 'auto' or 'disabled'");
        goto bad;
    }
    json_t *conv = json_object_get(body, "conversation");
    if (conv && !json_is_null(conv)) {
        api_fail(&e, "conversation", "'conversation' is not supported; use previous_response_id");
        goto bad;
    }
    bool stream = false, store = true, background = false, parallel = true;
    if (api_get_bool(body, "stream", &stream, &e) < 0) goto bad;
    if (api_get_bool(body, "store", &store, &e) < 0) goto bad;
    if (api_get_bool(body, "parallel_tool_calls", &parallel, &e) < 0) goto bad;
    if (api_get_bool(body, "background", &background, &e) < 0) goto bad;
    if (background) {
        api_fail(&e, "background", "background mode is not supported");
        goto bad;
    }
    if (!(items = responses_normalize_input(json_object_get(body, "input"), &e))) goto bad;
    if (responses_convert_tools(json_object_get(body, "tools"), &chat_tools, &echo_tools, &e) < 0) goto bad;
    bool choice_none;
    if (!(tc_echo = responses_check_tool_choice(json_object_get(body, "tool_choice"), &choice_none, &e))) goto bad;
    bool use_tools = json_array_size(chat_tools) && !choice_none;
    const char *forced = json_is_object(tc_echo) ? json_string_value(json_object_get(tc_echo, "name")) : NULL;
    bool required = json_is_string(tc_echo) && !strcmp(json_string_value(tc_echo), "required");
    engine_params p;
    api_params_default(a, &p, 0);
    if (api_get_sampling(body, &p, false, &e) < 0) goto bad;
    json_t *text_opts = json_object_get(body, "text");
    if (json_is_object(text_opts) && api_get_response_format(text_opts, "format", true, &fmt, &e) < 0) goto bad;
    if (api_tool_constraint(echo_tools, forced, required, use_tools, &fmt, &p, &e) < 0) goto bad;
    long long max_out = 0, top_lp = 0;
    if (api_get_int(body, "max_output_tokens", 1, 1 << 30, &max_out, &e) < 0) goto bad;
    if (api_get_int(body, "top_logprobs", 0, 20, &top_lp, &e) < 0) goto bad;
    bool logprobs = false; /* include: "message.output_text.logprobs" (the other names ask for nothing kestrel has) */
    json_t *inc = json_object_get(body, "include"), *iv;
    size_t ii;
    json_array_foreach(inc, ii, iv) {
        if (!json_is_string(iv)) {
            api_fail(&e, "include", "'include' must be an array of strings");
            goto bad;
        }
        logprobs |= !strcmp(json_string_value(iv), "message.output_text.logprobs");
    }
    p.logprobs = logprobs;
    p.top_logprobs = logprobs ? (int)top_lp : 0;

    if (prev_id) {
        char *conv_text = NULL;
        responses_store *st = store_of(a, false);
        if (!st || responses_store_get(st, prev_id, NULL, NULL, &conv_text) != 0) {
            http_error(resp, API_OPENAI, 404, "invalid_request_error", "previous_response_id",
                       "Previous response with id '%.200s' not found.", prev_id);
            goto out;
        }
        history = json_loads(conv_text, 0, NULL);
        free(conv_text);
        if (!json_is_array(history)) {
            http_error(resp, API_OPENAI, 500, "server_error", NULL, "stored conversation of '%.200s' is unreadable",
                       prev_id);
            goto out;
        }
    } else {
        history = json_array();
    }
    msgs = json_array();
    if (instructions) json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", instructions));
    responses_items_to_messages(history, msgs);
    responses_items_to_messages(items, msgs);

    bool trunc_auto = trunc_mode && !strcmp(trunc_mode, "auto");
    if (!openai_chat_prompt(a, resp, msgs, use_tools ? chat_tools : NULL, NULL, trunc_auto, "input", max_out, &ids, &n,
                            &p.max_tokens))
        goto out;

    if (!(s = calloc(1, sizeof *s))) {
        http_error(resp, API_OPENAI, 500, "server_error", NULL, "out of memory");
        goto out;
    }
    api_make_id(s->id, sizeof s->id, "resp_");
    s->created = api_now();
    s->stream = stream;
    s->store = store;
    s->output = json_array();
    s->logprobs = logprobs;
    s->lp_pending = json_array();
    s->lp_item = json_array();
    s->input_items = items;
    s->history = history;
    items = history = NULL;
    json_t *meta = json_object_get(body, "metadata"), *text = json_object_get(body, "text"),
           *reasoning = json_object_get(body, "reasoning"), *trunc = json_object_get(body, "truncation");
    s->echo = json_pack("{s:o, s:o, s:o, s:b, s:o, s:o, s:b, s:f, s:o, s:O, s:O, s:f, s:o, s:o, s:o}", "instructions",
                        or_null(json_object_get(body, "instructions")), "max_output_tokens",
                        max_out ? json_integer(max_out) : json_null(), "metadata",
                        json_is_object(meta) ? json_incref(meta) : json_object(), "parallel_tool_calls", parallel,
                        "previous_response_id", or_null(json_object_get(body, "previous_response_id")), "reasoning",
                        json_is_object(reasoning) ? json_incref(reasoning)
                                                  : json_pack("{s:n, s:n}", "effort", "summary"),
                        "store", store, "temperature", num6(p.sp.temperature), "text",
                        json_is_object(text) ? json_incref(text) : json_pack("{s:{s:s}}", "format", "type", "text"),
                        "tool_choice", tc_echo, "tools", echo_tools, "top_p", num6(p.sp.top_p), "truncation",
                        json_is_string(trunc) ? json_incref(trunc) : json_string("disabled"), "user",
                        or_null(json_object_get(body, "user")), "background", json_false());
    output_parser_config opc = {use_tools, a->think, false};
    int status;
    api_gen *g = api_gen_start(a, SURF_RESPONSES, ids, n, &p, &opc, &resp_ops, s, &status, errbuf, sizeof errbuf);
    s = NULL; /* owned by g now (or freed) */
    if (!g) {
        openai_status_error(resp, status, NULL, errbuf);
        goto out;
    }
    if (stream) {
        resp_stream *rs = calloc(1, sizeof *rs);
        if (!rs) {
            api_gen_free(g);
            http_error(resp, API_OPENAI, 500, "server_error", NULL, "out of memory");
            goto out;
        }
        rs->g = g;
        resp->status = 200;
        resp->content_type = "text/event-stream";
        resp->stream = (stream_source){rs, rs_next, rs_free};
    } else {
        resp_state *gs = g->surf;
        api_gen_answer_json(g, resp, &gs->body, &gs->status);
    }
    goto out;
bad:
    http_error(resp, API_OPENAI, 400, "invalid_request_error", e.param, "%s", e.msg);
out:
    jc_free(fmt);
    free(ids);
    json_decref(items);
    json_decref(history);
    json_decref(msgs);
    json_decref(chat_tools);
    json_decref(echo_tools);
    json_decref(tc_echo);
    json_decref(body);
}

/* GET /v1/responses/{id} and /v1/responses/{id}/input_items. */
void openai_responses_get(app *a, const http_req *req, http_resp *resp) {
    const char *id = req->path + strlen("/v1/responses/");
    const char *slash = strchr(id, '/');
    size_t idlen = slash ? (size_t)(slash - id) : strlen(id);
    bool list = slash && !strcmp(slash, "/input_items");
    if ((slash && !list) || !idlen || idlen > 200) {
        http_error(resp, API_OPENAI, 404, "invalid_request_error", NULL, "no such endpoint: GET %.300s", req->path);
        return;
    }
    char key[256];
    memcpy(key, id, idlen);
    key[idlen] = 0;
    responses_store *st = store_of(a, false);
    char *text = NULL;
    if (!st || responses_store_get(st, key, list ? NULL : &text, list ? &text : NULL, NULL) != 0) {
        http_error(resp, API_OPENAI, 404, "invalid_request_error", NULL, "Response with id '%s' not found.", key);
        return;
    }
    if (!list) {
        http_json(resp, 200, text);
        return;
    }
    /* newest first, as the API's default order=desc */
    json_t *in = json_loads(text, 0, NULL), *data = json_array();
    free(text);
    for (size_t i = json_array_size(in); i-- > 0;) json_array_append(data, json_array_get(in, i));
    json_decref(in);
    json_t *first = json_object_get(json_array_get(data, 0), "id"),
           *last = json_object_get(json_array_get(data, json_array_size(data) - 1), "id");
    http_json(resp, 200,
              api_dump(json_pack("{s:s, s:o, s:O?, s:O?, s:b}", "object", "list", "data", data, "first_id", first,
                                 "last_id", last, "has_more", 0)));
}
