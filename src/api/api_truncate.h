/* api_truncate.h — a chat too long for the context, cut in the middle:
 * Responses' truncation "auto" and Ollama's /api/chat (which truncates by
 * default) render through it (the policy: api_truncate.c's header). */
#ifndef KS_API_TRUNCATE_H
#define KS_API_TRUNCATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/app.h"

/* msgs (chat-template messages, not changed) rendered like api_render_chat
 * (tools, extra template variables, the generation prompt); with drop, the
 * fewest oldest messages dropped so the prompt leaves the answer its room:
 * `requested` output tokens (at most half the context), or one token when
 * requested <= 0 (all droppable ones dropped where even that leaves less:
 * the caller's fit check then gives the answer what is left, or its error).
 * Returns 0 with *ids / *n, or the render's HTTP status with err filled.
 * *ids is the caller's to free either way. */
int api_render_chat_fitting(app *a, json_t *msgs, json_t *tools, json_t *extra, bool drop, long long requested,
                            int32_t **ids, int *n, char *err, size_t errlen);
/* msgs without the k oldest droppable messages (not system, not the last;
 * with k > 0 also the tool results that would then lead the kept ones),
 * in order (a new array of the same message objects; k 0: all of them) */
json_t *api_chat_dropping(json_t *msgs, size_t k);

#endif
