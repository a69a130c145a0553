/* responses_truncate.c — the Responses API's truncation "auto": when the
 * conversation (a previous_response_id chain's history, then this input)
 * leaves too little of the context for the answer, messages are dropped
 * from the middle of the conversation, as OpenAI's "auto" does, until it
 * fits:
 *   kept: the leading system messages (instructions, system / developer
 *         items) and the last message, always;
 *   dropped: the fewest oldest messages after those, a tool result left at
 *         the front going with its call;
 *   room: the prompt must leave max_output_tokens (at most half the
 *         context) for the answer, or one token when none is asked — the
 *         same test as "disabled" then, so a conversation that fits is
 *         never cut.
 * The count is found by binary search (a render per probe; more dropped
 * never makes the prompt longer). The stored conversation keeps everything:
 * only this request's prompt is cut. */
#include "api/responses_truncate.h"

#include <stdlib.h>
#include <string.h>

#include "api/api_common.h"
#include "api/openai.h"
#include "engine/engine.h"

static bool role_is(json_t *m, const char *role) {
    const char *r = json_string_value(json_object_get(m, "role"));
    return r && !strcmp(r, role);
}

/* msgs without the k messages after the first `keep` (and any tool results
 * that would then lead), rendered: the render's status (0, or 400/500 with
 * err filled), *n the prompt's tokens */
static int render_dropping(app *a, json_t *msgs, size_t keep, size_t k, json_t *tools, int32_t **ids, int *n,
                           char *err, size_t errlen) {
    size_t m = json_array_size(msgs), j = keep + k;
    while (j + 1 < m && role_is(json_array_get(msgs, j), "tool")) j++;
    json_t *sub = json_array();
    for (size_t i = 0; i < keep; i++) json_array_append(sub, json_array_get(msgs, i));
    for (; j < m; j++) json_array_append(sub, json_array_get(msgs, j));
    free(*ids);
    *ids = NULL;
    int st = api_render_chat(a, sub, tools, NULL, true, ids, n, NULL, err, errlen);
    json_decref(sub);
    return st;
}

/* the answer for a render that failed (st 400 or 500, err its message) */
static bool render_failed(http_resp *resp, int st, const char *err) {
    http_error(resp, API_OPENAI, st, st == 400 ? "invalid_request_error" : "server_error", "input", "%s", err);
    return false;
}

bool responses_prompt_truncating(app *a, http_resp *resp, json_t *msgs, json_t *tools, long long requested,
                                 int32_t **ids, int *n, int *max_tokens) {
    size_t m = json_array_size(msgs), keep = 0;
    while (keep < m && role_is(json_array_get(msgs, keep), "system")) keep++;
    if (keep + 1 >= m) /* nothing to drop */
        return openai_chat_prompt(a, resp, msgs, tools, NULL, "input", requested, ids, n, max_tokens);
    int ctx = engine_ctx_size(a->eng);
    long long room = requested > 0 ? requested : 1;
    if (room > ctx / 2) room = ctx / 2 > 0 ? ctx / 2 : 1;
    char err[600];
    int st = render_dropping(a, msgs, keep, 0, tools, ids, n, err, sizeof err);
    if (st) return render_failed(resp, st, err);
    if (ctx - *n < room) {
        /* the fewest dropped in [1, m - keep - 1] that fits (a render that
         * fails counts as not fitting); hi always fits */
        size_t lo = 1, hi = m - keep - 1;
        st = render_dropping(a, msgs, keep, hi, tools, ids, n, err, sizeof err);
        if (st) return render_failed(resp, st, err);
        if (ctx - *n < room) {
            http_error(resp, API_OPENAI, 400, "invalid_request_error", "input",
                       "This model's maximum context length is %d tokens. However, your input resulted in %d tokens "
                       "with all but the system messages and the last message truncated.",
                       ctx, *n);
            return false;
        }
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            st = render_dropping(a, msgs, keep, mid, tools, ids, n, err, sizeof err);
            if (!st && ctx - *n >= room) hi = mid;
            else lo = mid + 1;
        }
        st = render_dropping(a, msgs, keep, lo, tools, ids, n, err, sizeof err); /* the ids of the count found */
        if (st) return render_failed(resp, st, err);
    }
    api_fit_output(a, *n, requested, max_tokens); /* (room >= 1 is left here) */
    return true;
}
