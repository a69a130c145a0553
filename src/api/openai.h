/* openai.h — the OpenAI surfaces: chat completions, completions, models,
 * responses; and helpers they share. */
#ifndef KS_OPENAI_H
#define KS_OPENAI_H

#include "api/api_parse.h"
#include "server/app.h"

void openai_chat_completions(app *a, const http_req *req, http_resp *resp);
void openai_completions(app *a, const http_req *req, http_resp *resp);
/* GET /v1/models (the list) and /v1/models/{id} (the served model, or a
 * 404 naming the id) */
void openai_models(app *a, const http_req *req, http_resp *resp);

/* logprobs.content entry for one token event (new reference). */
json_t *openai_logprob_entry(const app *a, const engine_event *ev);
const char *openai_finish_reason(engine_finish f, bool tool_calls);
/* A generation that failed: an error event and [DONE] when streaming, else a
 * 500 body (Chat Completions and Completions). */
void openai_gen_error(const char *msg, bool stream, strbuf *out, char **body, int *status);
/* The prompt's ids of a chat (messages through the chat template, tools
 * where not NULL, extra template variables; drop_to_fit: the oldest
 * messages dropped where it does not fit, api_truncate.h) and the output budget (at most
 * `requested`, the context's room): false after answering the error, an
 * OpenAI error naming `param` ("messages", "input"); *ids is the caller's
 * to free either way. */
bool openai_chat_prompt(app *a, http_resp *resp, json_t *msgs, json_t *tools, json_t *extra, bool drop_to_fit,
                        const char *param, long long requested, int32_t **ids, int *n, int *max_tokens);
/* An OpenAI error for a status a helper returned with its message (400:
 * invalid_request_error naming param, else server_error). */
void openai_status_error(http_resp *resp, int status, const char *param, const char *msg);
/* OpenAI's 404 for a model this server does not serve (code model_not_found). */
void openai_model_not_found(http_resp *resp, const char *name);
/* Validates an OpenAI tools array: 0 absent, 1 ok, -1 bad (e filled). */
int openai_check_tools(json_t *tools, api_err *e);

#endif
