/* api_truncate.c — a chat too long for the context, cut in the middle, as
 * OpenAI's Responses truncation "auto" and Ollama's chat do:
 *   kept: every system message and the last message, always;
 *   dropped: the fewest oldest other messages, a tool result left leading
 *         the kept ones going with its call;
 *   room: the prompt must leave `requested` tokens (at most half the
 *         context) for the answer, or one token when none is asked — then
 *         the same test as no truncation, so a chat that fits is never cut;
 *         where even dropping all of them leaves less, all are dropped and
 *         the answer gets what is left (never stricter than no truncation).
 * The count is found by binary search over renders (dropping more never
 * makes the prompt longer; a render that fails counts as not fitting). Only
 * the rendered prompt is cut: what the caller stores keeps every message.
 * Without drop it is the plain render (the surfaces' one call for both). */
#include "api/api_truncate.h"

#include <stdlib.h>
#include <string.h>

#include "api/api_common.h"
#include "engine/engine.h"

static bool is_role(json_t *m, const char *role) {
    const char *r = json_string_value(json_object_get(m, "role"));
    return r && !strcmp(r, role);
}

json_t *api_chat_dropping(json_t *msgs, size_t k) {
    size_t m = json_array_size(msgs), start = 0, seen = 0;
    for (; start + 1 < m; start++) /* the first kept droppable one: after k of them */
        if (!is_role(json_array_get(msgs, start), "system") && seen++ == k) break;
    while (k && start + 1 < m && is_role(json_array_get(msgs, start), "tool")) start++; /* (its call was dropped) */
    json_t *sub = json_array();
    for (size_t i = 0; i < m; i++)
        if (i >= start || is_role(json_array_get(msgs, i), "system")) json_array_append(sub, json_array_get(msgs, i));
    return sub;
}

/* api_chat_dropping(msgs, k) rendered: the render's status, *n the
 * prompt's tokens */
static int render_dropping(app *a, json_t *msgs, size_t k, json_t *tools, json_t *extra, int32_t **ids, int *n,
                           char *err, size_t errlen) {
    json_t *sub = api_chat_dropping(msgs, k);
    free(*ids);
    *ids = NULL;
    int st = api_render_chat(a, sub, tools, extra, true, ids, n, NULL, err, errlen);
    json_decref(sub);
    return st;
}

int api_render_chat_fitting(app *a, json_t *msgs, json_t *tools, json_t *extra, bool drop, long long requested,
                            int32_t **ids, int *n, char *err, size_t errlen) {
    size_t m = json_array_size(msgs), droppable = 0;
    for (size_t i = 0; i + 1 < m; i++) droppable += !is_role(json_array_get(msgs, i), "system");
    int ctx = engine_ctx_size(a->eng);
    long long room = requested > 0 ? requested : 1;
    if (room > ctx / 2) room = ctx / 2 > 0 ? ctx / 2 : 1;
    int st = render_dropping(a, msgs, 0, tools, extra, ids, n, err, errlen);
    if (st || !drop || ctx - *n >= room || !droppable) /* (no room and nothing to drop: the caller's fit check says so) */
        return st;
    size_t lo = 1, hi = droppable; /* the fewest in [lo, hi] that fits; hi must */
    st = render_dropping(a, msgs, hi, tools, extra, ids, n, err, errlen);
    if (st || ctx - *n < room) return st; /* (all dropped and still short: the most room there is, the caller's fit
                                             check gives what is left or its context-length error) */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        st = render_dropping(a, msgs, mid, tools, extra, ids, n, err, errlen);
        if (!st && ctx - *n >= room) hi = mid;
        else lo = mid + 1;
    }
    return render_dropping(a, msgs, lo, tools, extra, ids, n, err, errlen); /* the ids of the count found */
}
