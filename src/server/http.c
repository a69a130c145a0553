/* http.c — libmicrohttpd daemon, routing to one handler, auth, limits, CORS,
 * streaming responses (see http.h). */
#include "server/http.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <utf8proc.h>

#include "base/err.h"

struct http_server {
    struct MHD_Daemon *d;
    http_config cfg;
    int port;
};

typedef struct {
    strbuf body;
    bool too_big;
} conn_state;

typedef struct {
    stream_source src;
    strbuf buf;
    size_t off;
    bool ended;
} stream_state;

api_surface http_surface_of(const char *path) {
    if (!strncmp(path, "/v1/messages", 12)) return API_ANTHROPIC;
    if (!strncmp(path, "/api/", 5)) return API_OLLAMA;
    return API_OPENAI;
}

void http_json(http_resp *resp, int status, char *json_text) {
    resp->status = status;
    resp->content_type = "application/json";
    resp->body = json_text;
    resp->body_len = json_text ? strlen(json_text) : 0;
}

/* s made valid UTF-8 in place: each byte of a sequence that is not valid
 * (a request's bytes quoted in a message, a character cut by a bounded
 * format) becomes '?', so the JSON error body can always be written */
static void scrub_utf8(char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (l < 1) s[i++] = '?';
        else i += (size_t)l;
    }
}

static void error_body(http_resp *resp, api_surface surface, int status, const char *type, const char *param,
                       const char *code, const char *fmt, va_list ap) {
    char msg[1024], par[256];
    vsnprintf(msg, sizeof msg, fmt, ap);
    scrub_utf8(msg);
    if (param) {
        snprintf(par, sizeof par, "%s", param);
        scrub_utf8(par);
        param = par;
    }
    json_t *j;
    if (surface == API_ANTHROPIC) {
        j = json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", type, "message", msg);
    } else if (surface == API_OLLAMA) {
        j = json_pack("{s:s}", "error", msg);
    } else {
        j = json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error", "message", msg, "type", type, "param", param, "code", code);
    }
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!text) /* (out of memory): a fixed body in the surface's shape, never an empty one */
        text = strdup(surface == API_ANTHROPIC ? "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"error\"}}"
                      : surface == API_OLLAMA  ? "{\"error\":\"error\"}"
                                               : "{\"error\":{\"message\":\"error\",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
    http_json(resp, status, text);
}

void http_error(http_resp *resp, api_surface surface, int status, const char *type, const char *param,
                const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    error_body(resp, surface, status, type, param, NULL, fmt, ap);
    va_end(ap);
}

void http_error_code(http_resp *resp, api_surface surface, int status, const char *type, const char *param,
                     const char *code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    error_body(resp, surface, status, type, param, code, fmt, ap);
    va_end(ap);
}

const char *http_req_header(const http_req *req, const char *name) {
    return MHD_lookup_connection_value((struct MHD_Connection *)req->conn, MHD_HEADER_KIND, name);
}

static void add_common_headers(struct MHD_Response *r) {
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
    MHD_add_response_header(r, "Access-Control-Allow-Headers", "*");
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *out, size_t max) {
    stream_state *s = cls;
    (void)pos;
    while (s->off >= s->buf.len) {
        if (s->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        sb_clear(&s->buf);
        s->off = 0;
        if (!s->src.next(s->src.st, &s->buf)) s->ended = true;
        if (s->buf.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = s->buf.len - s->off;
    if (n > max) n = max;
    memcpy(out, s->buf.s + s->off, n);
    s->off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream_state *s = cls;
    if (s->src.free) s->src.free(s->src.st);
    sb_free(&s->buf);
    free(s);
}

static enum MHD_Result send_resp(struct MHD_Connection *c, http_resp *resp) {
    struct MHD_Response *r;
    if (resp->stream.next) {
        stream_state *s = calloc(1, sizeof *s);
        if (!s) {
            if (resp->stream.free) resp->stream.free(resp->stream.st);
            return MHD_NO;
        }
        s->src = resp->stream;
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, s, stream_free);
        if (!r) {
            stream_free(s);
            return MHD_NO;
        }
    } else {
        r = MHD_create_response_from_buffer(resp->body_len, resp->body ? resp->body : (char *)"",
                                            resp->body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
        if (!r) {
            free(resp->body);
            return MHD_NO;
        }
    }
    if (resp->content_type) MHD_add_response_header(r, "Content-Type", resp->content_type);
    if (resp->stream.next) {
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
    }
    add_common_headers(r);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)resp->status, r);
    MHD_destroy_response(r);
    return ret;
}

static bool is_loopback(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr) return false;
    const struct sockaddr *sa = ci->client_addr;
    if (sa->sa_family == AF_INET) return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
    return false;
}

static bool key_ok(struct MHD_Connection *c, const char *key) {
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (auth && !strncasecmp(auth, "Bearer ", 7) && !strcmp(auth + 7, key)) return true;
    const char *xk = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    return xk && !strcmp(xk, key);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    http_server *srv = cls;
    (void)version;
    conn_state *cs = *con_cls;
    if (!cs) {
        cs = calloc(1, sizeof *cs);
        if (!cs) return MHD_NO;
        *con_cls = cs;
        return MHD_YES;
    }
    if (*upload_size) {
        if (cs->body.len + *upload_size > srv->cfg.max_body) cs->too_big = true;
        else sb_append(&cs->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    http_resp resp = {0};
    api_surface surf = http_surface_of(url);
    if (!strcmp(method, "OPTIONS")) { /* CORS preflight */
        resp.status = 204;
        return send_resp(c, &resp);
    }
    if (cs->too_big) {
        http_error(&resp, surf, 413, surf == API_ANTHROPIC ? "request_too_large" : "invalid_request_error", NULL,
                   "request body larger than %zu bytes", srv->cfg.max_body);
        return send_resp(c, &resp);
    }
    if (cs->body.oom) {
        http_error(&resp, surf, 500, "server_error", NULL, "out of memory reading the request body");
        return send_resp(c, &resp);
    }
    bool open_path = !strcmp(url, "/health") || !strcmp(url, "/") ;
    if (!open_path && ((srv->cfg.api_key && !key_ok(c, srv->cfg.api_key)) || (!srv->cfg.api_key && !is_loopback(c)))) {
        http_error_code(&resp, surf, 401, surf == API_ANTHROPIC ? "authentication_error" : "invalid_request_error", NULL,
                        "invalid_api_key", /* (OpenAI's code; the other surfaces' bodies have none) */
                        srv->cfg.api_key ? "invalid or missing API key"
                                         : "this server accepts only loopback clients without --api-key");
        return send_resp(c, &resp);
    }
    http_req req = {method, url, cs->body.s ? cs->body.s : "", cs->body.len, c};
    srv->cfg.handler(srv->cfg.ctx, &req, &resp);
    if (!resp.status) resp.status = 500;
    return send_resp(c, &resp);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls; (void)c; (void)toe;
    conn_state *cs = *con_cls;
    if (cs) {
        sb_free(&cs->body);
        free(cs);
        *con_cls = NULL;
    }
}

int http_start(http_server **out, const http_config *cfg) {
    http_server *s = calloc(1, sizeof *s);
    if (!s) return err_set(KS_ENOMEM, "out of memory");
    s->cfg = *cfg;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)cfg->port);
    if (inet_pton(AF_INET, cfg->host, &sa.sin_addr) != 1) {
        free(s);
        return err_set(KS_EINVAL, "--host %s: not an IPv4 address", cfg->host);
    }
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
                            (uint16_t)cfg->port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, &sa,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)600, MHD_OPTION_CONNECTION_LIMIT, (unsigned)1024, MHD_OPTION_END);
    if (!s->d) {
        free(s);
        return err_set(KS_EIO, "cannot listen on %s:%d (in use, or not permitted)", cfg->host, cfg->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : cfg->port;
    *out = s;
    return KS_OK;
}

void http_stop(http_server *s) {
    if (!s) return;
    MHD_stop_daemon(s->d);
    free(s);
}

int http_port(const http_server *s) { return s->port; }
