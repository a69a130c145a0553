/* responses_truncate.h — the Responses API's truncation "auto" (the
 * policy: responses_truncate.c's header). */
#ifndef KS_API_RESPONSES_TRUNCATE_H
#define KS_API_RESPONSES_TRUNCATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/app.h"
#include "server/http.h"

/* openai_chat_prompt for truncation "auto": msgs (chat-template messages,
 * not changed) with the fewest middle messages dropped so the prompt leaves
 * room for the answer; the ids and output budget, or false after answering
 * the error (an OpenAI error naming "input"); *ids is the caller's to free
 * either way. */
bool responses_prompt_truncating(app *a, http_resp *resp, json_t *msgs, json_t *tools, long long requested,
                                 int32_t **ids, int *n, int *max_tokens);

#endif
