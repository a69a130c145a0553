/* http.h — the HTTP layer on libmicrohttpd: one daemon, a thread per
 * connection, body accumulation with a size limit, API-key auth, CORS, and
 * responses that are either complete bodies or streams pulled from a
 * stream_source (SSE / NDJSON), whose free() runs when the client goes away
 * (which is how a disconnect cancels its generation).
 *
 * Handlers never see libmicrohttpd: they get an http_req and fill an
 * http_resp. Ownership: http_resp.body (malloc'd) and http_resp.stream pass
 * to the HTTP layer. */
#ifndef KS_HTTP_H
#define KS_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "base/strbuf.h"

typedef struct {
    const char *method;       /* "GET", "POST", ... */
    const char *path;         /* without the query string */
    const char *body;         /* NUL-terminated (may contain NULs: use body_len) */
    size_t body_len;
    void *conn;               /* opaque, for http_req_header() */
} http_req;

/* A stream: next() blocks until it appended output to `out` (returns 1) or
 * the stream ended (returns 0; it may still have appended a last piece). */
typedef struct {
    void *st;
    int (*next)(void *st, strbuf *out);
    void (*free)(void *st);
} stream_source;

typedef struct {
    int status;
    const char *content_type;  /* static string */
    char *body;                /* full body (malloc'd), or NULL when streaming */
    size_t body_len;
    stream_source stream;      /* used when stream.next != NULL */
} http_resp;

typedef enum { API_OPENAI = 0, API_ANTHROPIC, API_OLLAMA } api_surface;

typedef void (*http_handler)(void *ctx, const http_req *req, http_resp *resp);

typedef struct {
    const char *host;          /* "127.0.0.1" */
    int port;
    const char *api_key;       /* NULL: loopback clients need no key; others are refused */
    size_t max_body;           /* bytes */
    http_handler handler;      /* every request that passed auth/limits */
    void *ctx;
} http_config;

typedef struct http_server http_server;

int http_start(http_server **out, const http_config *cfg);
void http_stop(http_server *s);
/* Actual bound port (when cfg.port was 0). */
int http_port(const http_server *s);

const char *http_req_header(const http_req *req, const char *name);
/* The surface a path belongs to (decides the error body format). */
api_surface http_surface_of(const char *path);
/* Fills resp with an error in the surface's own format. */
void http_error(http_resp *resp, api_surface surface, int status, const char *type, const char *param,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* The same with an OpenAI error code (error.code; the other surfaces' bodies
 * have no such field), e.g. "context_length_exceeded", which OpenAI clients
 * and agents test to shorten a conversation and retry. */
void http_error_code(http_resp *resp, api_surface surface, int status, const char *type, const char *param,
                     const char *code, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* Fills resp with a JSON body (takes ownership of json text). */
void http_json(http_resp *resp, int status, char *json_text);

#endif
