/* openai_completions.c — POST /v1/completions (raw prompt, no template) and
 * GET /v1/models. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_common.h"
#include "api/openai.h"
#include "base/err.h"

typedef struct {
    char id[64];
    long long created;
    bool stream, logprobs;
    strbuf text;
    json_t *lp_tokens, *lp_values, *lp_top;
    char *body;
    int status;
} cmpl_state;

static void cmpl_free(void *v) {
    cmpl_state *s = v;
    sb_free(&s->text);
    json_decref(s->lp_tokens);
    json_decref(s->lp_values);
    json_decref(s->lp_top);
    free(s->body);
    free(s);
}

static json_t *cmpl_obj(cmpl_state *s, app *a, const char *text, size_t len, const char *finish) {
    json_t *lp = json_null();
    if (s->logprobs) {
        /* the arrays so far go out with this object (taken, not shared), fresh ones gather the next */
        lp = json_pack("{s:o, s:o, s:o}", "tokens", s->lp_tokens, "token_logprobs", s->lp_values, "top_logprobs",
                       s->lp_top);
        s->lp_tokens = json_array();
        s->lp_values = json_array();
        s->lp_top = json_array();
    }
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:[{s:i, s:s%, s:o, s:o}]}", "id", s->id, "object", "text_completion",
                     "created", s->created, "model", a->model_name, "system_fingerprint", "kestrel", "choices", "index",
                     0, "text", text, len, "logprobs", lp, "finish_reason", finish ? json_string(finish) : json_null());
}

static void on_token(api_gen *g, const engine_event *ev, strbuf *out) {
    cmpl_state *s = g->surf;
    if (!s->logprobs) return;
    char *t = api_token_str(g->a, ev->token);
    json_array_append_new(s->lp_tokens, json_string(t));
    free(t);
    json_array_append_new(s->lp_values, json_real(ev->logprob));
    json_t *top = json_object();
    for (int i = 0; i < ev->n_top; i++) {
        char *tt = api_token_str(g->a, ev->top_ids[i]);
        json_object_set_new(top, tt, json_real(ev->top_logprobs[i]));
        free(tt);
    }
    json_array_append_new(s->lp_top, top);
}

static void on_piece(api_gen *g, const out_piece *pc, strbuf *out) {
    cmpl_state *s = g->surf;
    if (s->stream) api_sse(out, NULL, cmpl_obj(s, g->a, pc->text, pc->len, NULL));
    else sb_append(&s->text, pc->text, pc->len);
}

static void on_done(api_gen *g, const engine_event *ev, strbuf *out) {
    cmpl_state *s = g->surf;
    const char *fr = openai_finish_reason(ev->finish, false);
    json_t *usage = json_pack("{s:i, s:i, s:i, s:{s:i}, s:{s:i, s:i}}", "prompt_tokens", ev->n_prompt,
                              "completion_tokens", ev->n_gen, "total_tokens", ev->n_prompt + ev->n_gen,
                              "prompt_tokens_details", "cached_tokens", ev->n_cached, "completion_tokens_details",
                              "accepted_prediction_tokens", ev->n_accepted, "rejected_prediction_tokens",
                              ev->n_drafted - ev->n_accepted);
    if (s->stream) {
        json_t *last = cmpl_obj(s, g->a, "", 0, fr);
        json_object_set_new(last, "usage", usage);
        api_sse(out, NULL, last);
        sb_puts(out, "data: [DONE]\n\n");
        return;
    }
    json_t *r = cmpl_obj(s, g->a, s->text.s ? s->text.s : "", s->text.len, fr);
    json_object_set_new(r, "usage", usage);
    s->body = api_dump(r);
    s->status = 200;
}

static void on_error(api_gen *g, const char *msg, strbuf *out) {
    cmpl_state *s = g->surf;
    openai_gen_error(msg, s->stream, out, &s->body, &s->status);
}

static const api_gen_ops cmpl_ops = {on_piece, on_token, on_done, on_error, cmpl_free};

void openai_completions(app *a, const http_req *req, http_resp *resp) {
    api_err e = {{0}, NULL};
    json_t *body = api_parse_body(req->body, req->body_len, &e);
    int32_t *ids = NULL;
    json_constraint *fmt = NULL;
    int n = 0;
    if (!body) goto bad;
    const char *model_name = NULL;
    if (api_get_str(body, "model", &model_name, &e) < 0) goto bad;
    if (!api_model_known(a, model_name)) {
        openai_model_not_found(resp, model_name);
        goto out;
    }
    json_t *pr = json_object_get(body, "prompt");
    if (json_is_array(pr) && json_array_size(pr) == 1 && json_is_string(json_array_get(pr, 0)))
        pr = json_array_get(pr, 0);
    if (json_is_string(pr)) {
        if (tok_encode(a->tok, json_string_value(pr), json_string_length(pr), true, &ids, &n) != 0) {
            api_fail(&e, "prompt", "'prompt': cannot tokenize: %s", err_msg());
            goto bad;
        }
    } else if (json_is_array(pr) && json_array_size(pr) > 0) { /* token ids */
        n = (int)json_array_size(pr);
        ids = malloc((size_t)n * sizeof *ids);
        for (int i = 0; ids && i < n; i++) {
            json_t *v = json_array_get(pr, (size_t)i);
            if (!json_is_integer(v)) {
                api_fail(&e, "prompt", "'prompt': expected a string, or an array of token ids");
                goto bad;
            }
            json_int_t id = json_integer_value(v); /* (the vocabulary is the engine's to check; never a cast that wraps) */
            if (id < 0 || id > INT32_MAX) {
                api_fail(&e, "prompt", "'prompt'[%d]: %lld is not a token id", i, (long long)id);
                goto bad;
            }
            ids[i] = (int32_t)id;
        }
    } else {
        api_fail(&e, "prompt", "'prompt' must be a non-empty string (or an array of token ids)");
        goto bad;
    }
    if (n == 0) {
        api_fail(&e, "prompt", "'prompt' is empty");
        goto bad;
    }
    engine_params p;
    api_params_default(a, &p, 0);
    if (api_get_sampling(body, &p, false, &e) < 0 || api_get_logit_bias(body, &p, &e) < 0) goto bad;
    if (api_get_response_format(body, "response_format", false, &fmt, &e) < 0) goto bad; /* as vLLM and llama.cpp take it */
    p.constraint = fmt;
    long long max_tokens = 16, lp = -1, nn = 1;
    if (api_get_int(body, "max_tokens", 1, 1 << 30, &max_tokens, &e) < 0) goto bad;
    if (api_get_int(body, "logprobs", 0, 20, &lp, &e) < 0) goto bad;
    if (api_get_int(body, "n", 1, 1, &nn, &e) < 0) goto bad;
    bool stream = false;
    if (api_get_bool(body, "stream", &stream, &e) < 0) goto bad;
    static const api_field extra_fields[] = {{"user", API_T_STR}, {"stream_options", API_T_OBJ}, {"echo", API_T_BOOL},
                                             {"suffix", API_T_STR}, {"best_of", API_T_NUM}};
    if (api_check_fields(body, extra_fields, sizeof extra_fields / sizeof extra_fields[0], &e) < 0) goto bad;
    if (!api_fit_output(a, n, max_tokens, &p.max_tokens)) {
        http_error_code(resp, API_OPENAI, 400, "invalid_request_error", "prompt", "context_length_exceeded",
                        "This model's maximum context length is %d tokens, however you requested %d tokens in the prompt.",
                        engine_ctx_size(a->eng), n);
        goto out;
    }
    p.logprobs = lp >= 0;
    p.top_logprobs = lp > 0 ? (int)lp : 0;
    cmpl_state *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    api_make_id(s->id, sizeof s->id, "cmpl-");
    s->created = api_now();
    s->stream = stream;
    s->logprobs = lp >= 0;
    s->lp_tokens = json_array();
    s->lp_values = json_array();
    s->lp_top = json_array();
    output_parser_config opc = {false, false, false};
    char errbuf[600];
    int status;
    api_gen *g = api_gen_start(a, SURF_COMPLETIONS, ids, n, &p, &opc, &cmpl_ops, s, &status, errbuf, sizeof errbuf);
    if (!g) {
        openai_status_error(resp, status, "prompt", errbuf);
        goto out;
    }
    if (stream) api_gen_answer_stream(g, resp, "text/event-stream");
    else api_gen_answer_json(g, resp, &s->body, &s->status);
    goto out;
oom:
    http_error(resp, API_OPENAI, 500, "server_error", NULL, "out of memory");
    goto out;
bad:
    http_error(resp, API_OPENAI, 400, "invalid_request_error", e.param, "%s", e.msg);
out:
    jc_free(fmt);
    free(ids);
    json_decref(body);
}

/* the served model as an OpenAI model object (new reference) */
static json_t *model_object(const app *a) {
    return json_pack("{s:s, s:s, s:I, s:s}", "id", a->model_name, "object", "model", "created", (long long)a->created,
                     "owned_by", "kestrel");
}

void openai_models(app *a, const http_req *req, http_resp *resp) {
    if (!strcmp(req->path, "/v1/models")) {
        http_json(resp, 200, api_dump(json_pack("{s:s, s:[o]}", "object", "list", "data", model_object(a))));
        return;
    }
    const char *id = req->path + strlen("/v1/models/");
    if (strcmp(id, a->model_name)) {
        openai_model_not_found(resp, id);
        return;
    }
    http_json(resp, 200, api_dump(model_object(a)));
}
