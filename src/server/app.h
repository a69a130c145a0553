/* app.h — what the API handlers share: the loaded model, tokenizer, chat
 * template, engine, defaults and counters. Built by `kestrel serve`, read by
 * every HTTP thread (everything here is read-only after startup except the
 * counters, which are atomic, and the Responses store, which has its lock). */
#ifndef KS_APP_H
#define KS_APP_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "chat/chat_template.h"
#include "engine/engine.h"
#include "io/config.h"
#include "model/model.h"
#include "server/http.h"
#include "server/metrics.h"
#include "tok/tok.h"

typedef struct app {
    model *m;
    const tokenizer *tok;
    chat_template *tmpl;      /* NULL when the model has none */
    engine *eng;
    gen_config gen;
    const char *model_name;   /* what /v1/models lists */
    const char *model_dir;
    time_t created;
    bool think;               /* the vocabulary has <think> tags */
    metrics met;
    void *responses_store;    /* openai_responses.c */
} app;

/* The router: every request that passed auth and limits. */
void app_handle(void *ctx, const http_req *req, http_resp *resp);

#endif
