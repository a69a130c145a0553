/* app.c — routes requests to the API surfaces and serves the operational
 * endpoints: /health, /tokenize, /detokenize, /metrics. Counts every request
 * by surface and status for /metrics. */
#include "server/app.h"

#include <stdlib.h>
#include <string.h>

#include "api/api_common.h"
#include "api/api_parse.h"
#include "api/openai.h"
#include "api/surfaces.h"
#include "base/err.h"

static void health(app *a, const http_req *req, http_resp *resp) {
    (void)req;
    engine_stats st;
    engine_get_stats(a->eng, &st);
    http_json(resp, 200, api_dump(json_pack("{s:s, s:s, s:i, s:i}", "status", "ok", "model", a->model_name,
                                            "queued", st.queued, "active", st.active)));
}

/* GET / (open like /health): a liveness answer in plain text, what
 * Ollama's clients probe (HEAD /) before their first call */
static void root(app *a, const http_req *req, http_resp *resp) {
    (void)a;
    (void)req;
    resp->status = 200;
    resp->content_type = "text/plain; charset=utf-8";
    resp->body = strdup("kestrel is running");
    resp->body_len = resp->body ? strlen(resp->body) : 0;
}

static void tokenize(app *a, const http_req *req, http_resp *resp) {
    api_err e = {{0}, NULL};
    json_t *b = api_parse_body(req->body, req->body_len, &e);
    const char *text = NULL;
    bool add_special = false;
    int32_t *ids = NULL;
    int n = 0;
    if (!b || api_get_str(b, "content", &text, &e) < 0 || api_get_bool(b, "add_special", &add_special, &e) < 0) goto bad;
    if (!text) {
        snprintf(e.msg, sizeof e.msg, "'content' (a string) is required");
        e.param = "content";
        goto bad;
    }
    if (tok_encode(a->tok, text, strlen(text), add_special, &ids, &n) != 0) {
        snprintf(e.msg, sizeof e.msg, "%s", err_msg());
        goto bad;
    }
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
    free(ids);
    http_json(resp, 200, api_dump(json_pack("{s:o}", "tokens", arr)));
    json_decref(b);
    return;
bad:
    http_error(resp, API_OPENAI, 400, "invalid_request_error", e.param, "%s", e.msg);
    json_decref(b);
}

static void detokenize(app *a, const http_req *req, http_resp *resp) {
    api_err e = {{0}, NULL};
    json_t *b = api_parse_body(req->body, req->body_len, &e);
    int32_t *ids = NULL;
    if (!b) goto bad;
    json_t *t = json_object_get(b, "tokens");
    if (!json_is_array(t)) {
        snprintf(e.msg, sizeof e.msg, "'tokens' (an array of token ids) is required");
        e.param = "tokens";
        goto bad;
    }
    int n = (int)json_array_size(t), V = tok_vocab_size(a->tok);
    ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    for (int i = 0; i < n; i++) {
        json_t *v = json_array_get(t, (size_t)i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= V) {
            snprintf(e.msg, sizeof e.msg, "tokens[%d]: expected a token id in [0, %d)", i, V);
            e.param = "tokens";
            goto bad;
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    char *text = NULL;
    size_t len;
    if (tok_decode(a->tok, ids, n, false, &text, &len) != 0) {
        snprintf(e.msg, sizeof e.msg, "%s", err_msg());
        goto bad;
    }
    http_json(resp, 200, api_dump(json_pack("{s:s%}", "content", text, len)));
    free(text);
    free(ids);
    json_decref(b);
    return;
bad:
    free(ids);
    http_error(resp, API_OPENAI, 400, "invalid_request_error", e.param, "%s", e.msg);
    json_decref(b);
}

static void metrics_ep(app *a, const http_req *req, http_resp *resp) {
    (void)req;
    resp->status = 200;
    resp->content_type = "text/plain; version=0.0.4";
    resp->body = metrics_render(&a->met, a->eng);
    resp->body_len = resp->body ? strlen(resp->body) : 0;
}

typedef void (*route_fn)(app *a, const http_req *req, http_resp *resp);
typedef struct {
    const char *method, *path;
    route_fn fn;
    app_surface surface;
    bool prefix;
} route;

/* GET /v1/models[/{id}]: one path, two APIs' shapes — Anthropic's clients
 * send anthropic-version, OpenAI's do not */
static void models(app *a, const http_req *req, http_resp *resp) {
    if (http_req_header(req, "anthropic-version")) anthropic_models(a, req, resp);
    else openai_models(a, req, resp);
}

static const route routes[] = {
    {"POST", "/v1/chat/completions", openai_chat_completions, SURF_CHAT, false},
    {"POST", "/v1/completions", openai_completions, SURF_COMPLETIONS, false},
    {"GET", "/v1/models", models, SURF_OTHER, false},
    {"GET", "/v1/models/", models, SURF_OTHER, true},
    {"POST", "/v1/responses", openai_responses_create, SURF_RESPONSES, false},
    {"GET", "/v1/responses/", openai_responses_get, SURF_RESPONSES, true},
    {"POST", "/v1/messages", anthropic_messages, SURF_ANTHROPIC, false},
    {"POST", "/v1/messages/count_tokens", anthropic_count_tokens, SURF_ANTHROPIC, false},
    {"POST", "/api/chat", ollama_chat, SURF_OLLAMA, false},
    {"POST", "/api/generate", ollama_generate, SURF_OLLAMA, false},
    {"GET", "/api/tags", ollama_tags, SURF_OLLAMA, false},
    {"GET", "/api/ps", ollama_ps, SURF_OLLAMA, false},
    {"POST", "/api/show", ollama_show, SURF_OLLAMA, false},
    {"GET", "/api/version", ollama_version, SURF_OLLAMA, false},
    {"GET", "/", root, SURF_OTHER, false},
    {"GET", "/health", health, SURF_OTHER, false},
    {"POST", "/tokenize", tokenize, SURF_OTHER, false},
    {"POST", "/detokenize", detokenize, SURF_OTHER, false},
    {"GET", "/metrics", metrics_ep, SURF_OTHER, false},
};

void app_handle(void *ctx, const http_req *req, http_resp *resp) {
    app *a = ctx;
    const route *hit = NULL;
    bool path_known = false;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        const route *r = &routes[i];
        bool pm = r->prefix ? !strncmp(req->path, r->path, strlen(r->path)) && req->path[strlen(r->path)]
                            : !strcmp(req->path, r->path);
        if (!pm) continue;
        path_known = true;
        /* HEAD takes a GET route (libmicrohttpd sends the headers only) */
        if (!strcmp(req->method, r->method) || (!strcmp(req->method, "HEAD") && !strcmp(r->method, "GET"))) {
            hit = r;
            break;
        }
    }
    api_surface surf = http_surface_of(req->path);
    if (!hit) {
        if (path_known)
            http_error(resp, surf, 405, "invalid_request_error", NULL, "method %s not allowed on %s", req->method, req->path);
        else
            http_error(resp, surf, 404, surf == API_ANTHROPIC ? "not_found_error" : "invalid_request_error", NULL,
                       "no such endpoint: %s %s", req->method, req->path);
        metrics_request(&a->met, SURF_OTHER, resp->status);
        return;
    }
    hit->fn(a, req, resp);
    metrics_request(&a->met, hit->surface, resp->status ? resp->status : 500);
}
