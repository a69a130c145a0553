/* engine_drain.h — test helper: a request's events read to its end.
 * engine_drain: every event of r until the one that ends it (each handed to
 * fn first, when given), up to cap of its tokens into toks (NULL: none
 * kept), the ending event into *last (when given; its text dropped); r
 * released. Returns the tokens seen; whether the end was an error is for
 * the caller to check (last->type). */
#ifndef KS_TEST_ENGINE_DRAIN_H
#define KS_TEST_ENGINE_DRAIN_H

#include "engine/engine.h"

typedef void (*drain_fn)(const engine_event *ev, void *arg);

static inline int engine_drain(engine_req *r, int32_t *toks, int cap, engine_event *last, drain_fn fn, void *arg) {
    int n = 0;
    engine_event ev;
    for (;;) {
        engine_next_event(r, &ev, -1);
        if (fn) fn(&ev, arg);
        if (ev.type == ENGINE_EV_TOKEN && toks && n < cap) toks[n] = ev.token;
        n += ev.type == ENGINE_EV_TOKEN;
        int end = ev.type != ENGINE_EV_TOKEN;
        if (end && last) *last = ev, last->text = NULL, last->len = 0;
        engine_event_clear(&ev);
        if (end) break;
    }
    engine_req_release(r);
    return n;
}

#endif
