/* api_common.h — what every API surface shares: sampling defaults, the model
 * name check, chat-template rendering + tokenization, and the generation
 * driver that turns engine events into parsed output pieces (content,
 * reasoning, tool calls) for a surface's formatter — one driver for streaming
 * and non-streaming responses.
 *
 * Ownership: api_gen owns its engine request, output parser and the surface
 * state passed to api_gen_start (freed by ops->free_surface). */
#ifndef KS_API_COMMON_H
#define KS_API_COMMON_H

#include <jansson.h>
#include <stdbool.h>
#include <time.h>

#include "base/strbuf.h"
#include "chat/output_parser.h"
#include "server/app.h"

/* generation_config sampling + the model's eos ids; max_tokens as given. */
void api_params_default(const app *a, engine_params *p, int max_tokens);
/* Absent or NULL names are fine; otherwise it must be the served model. */
bool api_model_known(const app *a, const char *name);
/* Renders OpenAI-shaped messages with the chat template and tokenizes them.
 * Returns 0, or an HTTP status (400/500) with a message in err. */
int api_render_chat(app *a, json_t *messages, json_t *tools, json_t *extra, bool add_generation_prompt, int32_t **ids,
                    int *n, char **prompt_text, char *err, size_t errlen);
/* The output budget of a prompt of n tokens: false when the prompt leaves no
 * room in the context (the caller answers 400 in its surface's words); else
 * *max_tokens = the requested count (> 0) capped by the room left. */
bool api_fit_output(const app *a, int n_prompt, long long requested, int *max_tokens);
/* Text of one token as the client should see it (malloc'd). */
char *api_token_str(const app *a, int32_t id);
/* "prefix-<24 random hex>" into buf. */
void api_make_id(char *buf, size_t cap, const char *prefix);
/* Appends an SSE event ("event: NAME\n" when name) with data JSON (consumed). */
void api_sse(strbuf *out, const char *event, json_t *data);
/* Compact JSON text of j, consumed. */
char *api_dump(json_t *j);
/* Unix time now. */
long long api_now(void);
/* ts as RFC 3339 UTC with nanoseconds, e.g. 2025-01-02T03:04:05.123456789Z
 * (new reference) */
json_t *api_time_json(const struct timespec *ts);

typedef struct api_gen api_gen;

typedef struct {
    void (*on_piece)(api_gen *g, const out_piece *pc, strbuf *out);
    void (*on_token)(api_gen *g, const engine_event *ev, strbuf *out); /* optional */
    void (*on_done)(api_gen *g, const engine_event *ev, strbuf *out);
    void (*on_error)(api_gen *g, const char *msg, strbuf *out);
    void (*free_surface)(void *surf);
} api_gen_ops;

struct api_gen {
    app *a;
    app_surface surface;
    engine_req *req;
    output_parser *op;
    const api_gen_ops *ops;
    void *surf;
    int n_prompt;
    bool ended;
};

/* Submits; on failure returns NULL with an HTTP status in *status and a
 * message in err (surf is freed). */
api_gen *api_gen_start(app *a, app_surface s, const int32_t *ids, int n, const engine_params *p,
                       const output_parser_config *opc, const api_gen_ops *ops, void *surf, int *status, char *err,
                       size_t errlen);
/* Processes the next engine event; returns 0 after the last one. */
int api_gen_next(api_gen *g, strbuf *out);
/* Runs to the end (non-streaming); output appended to out. */
void api_gen_run(api_gen *g, strbuf *out);
void api_gen_free(api_gen *g);
/* Wraps g as the HTTP layer's stream (the stream owns g). */
stream_source api_gen_stream(api_gen *g);
/* Non-streaming answer: runs g to the end (its surface fills *body and
 * *status from on_done/on_error), hands *body to resp and frees g. */
void api_gen_answer_json(api_gen *g, http_resp *resp, char **body, const int *status);
/* Streaming answer: status 200, the content type, g as the stream. */
void api_gen_answer_stream(api_gen *g, http_resp *resp, const char *content_type);

#endif
