/* surfaces.h — entry points of the non-OpenAI-chat surfaces: OpenAI
 * Responses, Anthropic Messages, Ollama. */
#ifndef KS_SURFACES_H
#define KS_SURFACES_H

#include "server/app.h"

void openai_responses_create(app *a, const http_req *req, http_resp *resp);
void openai_responses_get(app *a, const http_req *req, http_resp *resp);
void anthropic_messages(app *a, const http_req *req, http_resp *resp);
void anthropic_count_tokens(app *a, const http_req *req, http_resp *resp);
/* GET /v1/models[/{id}] for Anthropic's clients (they send anthropic-version) */
void anthropic_models(app *a, const http_req *req, http_resp *resp);
void ollama_chat(app *a, const http_req *req, http_resp *resp);
void ollama_generate(app *a, const http_req *req, http_resp *resp);
void ollama_tags(app *a, const http_req *req, http_resp *resp);
void ollama_ps(app *a, const http_req *req, http_resp *resp);
void ollama_show(app *a, const http_req *req, http_resp *resp);
void ollama_version(app *a, const http_req *req, http_resp *resp);

#endif
