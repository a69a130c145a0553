/* api_common.c — shared pieces of the API surfaces (see api_common.h). */
#include "api/api_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/err.h"

long long api_now(void) { return (long long)time(NULL); }

void api_params_default(const app *a, engine_params *p, int max_tokens) {
    memset(p, 0, sizeof *p);
    sample_params_default(&p->sp);
    const gen_config *g = &a->gen;
    p->sp.temperature = g->do_sample ? g->temperature : 0.0f;
    p->sp.top_p = g->top_p;
    p->sp.top_k = g->top_k;
    p->sp.min_p = g->min_p;
    p->sp.repetition_penalty = g->repetition_penalty;
    p->max_tokens = max_tokens;
    p->spec = -1; /* the server's default; the gates decide per request */
    p->mtp = -1;
    p->constraint_think = a->think; /* a reasoning model thinks before a constrained answer */
    uint64_t seed;
    if (getrandom(&seed, sizeof seed, 0) != sizeof seed) seed = (uint64_t)time(NULL);
    p->seed = seed;
    const int *eos = g->n_eos ? g->eos_ids : a->m->cfg.eos_ids;
    int ne = g->n_eos ? g->n_eos : a->m->cfg.n_eos;
    for (int i = 0; i < ne && p->n_eos < ENGINE_MAX_EOS; i++) p->eos[p->n_eos++] = eos[i];
}

json_t *api_time_json(const struct timespec *ts) {
    struct tm tm;
    gmtime_r(&ts->tv_sec, &tm);
    char b[64];
    size_t o = strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(b + o, sizeof b - o, ".%09ldZ", ts->tv_nsec);
    return json_string(b);
}

bool api_model_known(const app *a, const char *name) {
    if (!name || !*name) return true;
    if (!strcmp(name, a->model_name)) return true;
    /* Ollama clients append ":latest" */
    size_t n = strlen(a->model_name);
    return !strncmp(name, a->model_name, n) && !strcmp(name + n, ":latest");
}

int api_render_chat(app *a, json_t *messages, json_t *tools, json_t *extra, bool add_generation_prompt, int32_t **ids,
                    int *n, char **prompt_text, char *err, size_t errlen) {
    if (!a->tmpl) {
        snprintf(err, errlen, "this model has no chat template; use the completions API");
        return 400;
    }
    char *text = NULL;
    if (chat_template_apply(a->tmpl, messages, tools && json_array_size(tools) ? tools : NULL, add_generation_prompt,
                            extra, &text) != 0) {
        snprintf(err, errlen, "chat template: %s", err_msg());
        return 400;
    }
    /* the template writes any BOS itself */
    if (tok_encode(a->tok, text, strlen(text), false, ids, n) != 0) {
        snprintf(err, errlen, "tokenizer: %s", err_msg());
        free(text);
        return 400;
    }
    if (prompt_text) *prompt_text = text;
    else free(text);
    return 0;
}

bool api_fit_output(const app *a, int n_prompt, long long requested, int *max_tokens) {
    int room = engine_ctx_size(a->eng) - n_prompt;
    if (room < 1) return false;
    *max_tokens = requested > 0 && requested < room ? (int)requested : room;
    return true;
}

char *api_token_str(const app *a, int32_t id) {
    char *s = NULL;
    size_t len;
    if (tok_decode(a->tok, &id, 1, false, &s, &len) != 0) return strdup("");
    return s;
}

void api_make_id(char *buf, size_t cap, const char *prefix) {
    unsigned char r[12];
    if (getrandom(r, sizeof r, 0) != sizeof r)
        for (size_t i = 0; i < sizeof r; i++) r[i] = (unsigned char)rand();
    int o = snprintf(buf, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof r && (size_t)o + 3 < cap; i++) o += snprintf(buf + o, cap - (size_t)o, "%02x", r[i]);
}

char *api_dump(json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

void api_sse(strbuf *out, const char *event, json_t *data) {
    char *s = api_dump(data);
    if (event) sb_printf(out, "event: %s\n", event);
    sb_puts(out, "data: ");
    sb_puts(out, s ? s : "{}");
    sb_puts(out, "\n\n");
    free(s);
}

api_gen *api_gen_start(app *a, app_surface s, const int32_t *ids, int n, const engine_params *p,
                       const output_parser_config *opc, const api_gen_ops *ops, void *surf, int *status, char *err,
                       size_t errlen) {
    api_gen *g = calloc(1, sizeof *g);
    output_parser *op = output_parser_new(opc);
    if (!g || !op) {
        free(g);
        output_parser_free(op);
        if (ops->free_surface) ops->free_surface(surf);
        *status = 500;
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    g->req = engine_submit(a->eng, ids, n, p);
    if (!g->req) {
        *status = 400;
        snprintf(err, errlen, "%s", err_msg());
        output_parser_free(op);
        if (ops->free_surface) ops->free_surface(surf);
        free(g);
        return NULL;
    }
    g->a = a;
    g->surface = s;
    g->op = op;
    g->ops = ops;
    g->surf = surf;
    g->n_prompt = n;
    return g;
}

typedef struct {
    api_gen *g;
    strbuf *out;
} emit_ctx;

static void on_piece(void *ud, const out_piece *pc) {
    emit_ctx *c = ud;
    c->g->ops->on_piece(c->g, pc, c->out);
}

int api_gen_next(api_gen *g, strbuf *out) {
    if (g->ended) return 0;
    engine_event ev;
    engine_next_event(g->req, &ev, -1);
    emit_ctx c = {g, out};
    switch (ev.type) {
    case ENGINE_EV_TOKEN:
        if (g->ops->on_token) g->ops->on_token(g, &ev, out);
        if (ev.len) output_parser_feed(g->op, ev.text, ev.len, on_piece, &c);
        break;
    case ENGINE_EV_DONE: {
        if (ev.len) output_parser_feed(g->op, ev.text, ev.len, on_piece, &c);
        output_parser_finish(g->op, on_piece, &c);
        g->ops->on_done(g, &ev, out);
        g->ended = true;
        double tpot = ev.n_gen > 1 ? (ev.t_total - ev.t_first_token) / (ev.n_gen - 1) : 0;
        metrics_latency(&g->a->met, ev.t_first_token, tpot, ev.n_gen);
        break;
    }
    case ENGINE_EV_ERROR:
        g->ops->on_error(g, ev.text ? ev.text : "generation failed", out);
        g->ended = true;
        break;
    }
    engine_event_clear(&ev);
    return !g->ended;
}

void api_gen_run(api_gen *g, strbuf *out) {
    while (api_gen_next(g, out)) {
    }
}

void api_gen_free(api_gen *g) {
    if (!g) return;
    engine_req_release(g->req); /* cancels it if still running */
    output_parser_free(g->op);
    if (g->ops->free_surface) g->ops->free_surface(g->surf);
    free(g);
}

static int stream_next(void *st, strbuf *out) { return api_gen_next(st, out); }
static void stream_free(void *st) { api_gen_free(st); }

stream_source api_gen_stream(api_gen *g) {
    stream_source s = {g, stream_next, stream_free};
    return s;
}

void api_gen_answer_json(api_gen *g, http_resp *resp, char **body, const int *status) {
    strbuf sink = {0}; /* the surface builds its body in its own state */
    api_gen_run(g, &sink);
    sb_free(&sink);
    http_json(resp, *status ? *status : 500, *body);
    *body = NULL; /* now the response's */
    api_gen_free(g);
}

void api_gen_answer_stream(api_gen *g, http_resp *resp, const char *content_type) {
    resp->status = 200;
    resp->content_type = content_type;
    resp->stream = api_gen_stream(g);
}
