/* responses_store.h — the in-memory store behind the OpenAI Responses API's
 * `store`, GET /v1/responses/{id} and `previous_response_id`: a bounded FIFO
 * (oldest evicted first, by count and by total bytes) of finished responses,
 * safe to use from any HTTP thread (one mutex).
 *
 * Entries are kept as JSON text, never as shared jansson values, so no two
 * threads ever touch the same json_t. Ownership: put copies its strings; get
 * returns malloc'd copies the caller frees. */
#ifndef KS_RESPONSES_STORE_H
#define KS_RESPONSES_STORE_H

#include <stddef.h>

typedef struct responses_store responses_store;

/* max_entries >= 1; max_bytes: total text kept (0: unlimited). NULL on OOM. */
responses_store *responses_store_new(size_t max_entries, size_t max_bytes);
void responses_store_free(responses_store *s);
/* Stores (or replaces) id. response: the response object (GET answers it);
 * input: this request's input items; conversation: every item so far (earlier
 * responses' conversation + input + output), what previous_response_id
 * continues from. An entry larger than max_bytes is not kept. 0 or -1 (OOM). */
int responses_store_put(responses_store *s, const char *id, const char *response, const char *input,
                        const char *conversation);
/* 0 and copies of the requested fields (any out pointer may be NULL), or -1
 * when id is unknown (or evicted). */
int responses_store_get(responses_store *s, const char *id, char **response, char **input, char **conversation);
/* Number of entries (for tests). */
size_t responses_store_count(responses_store *s);

#endif
