/* output_parser.c — incremental content / reasoning / tool-call splitter
 * (see output_parser.h). States: TEXT (content), THINK (reasoning), CALL
 * (inside <tool_call>), JSON (a Llama 3 style bare-JSON answer — at the
 * start or right after the reasoning — decided at the end). After </think>
 * the newlines that follow are dropped, after a parsed </tool_call> the
 * spaces and newlines: `skip` remembers that across feeds so
 * that the result does not depend on where the text was split. */
#include "chat/output_parser.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"

#define TAG_THINK "<think>"
#define TAG_THINK_END "</think>"
#define TAG_CALL "<tool_call>"
#define TAG_CALL_END "</tool_call>"

typedef enum { ST_START, ST_TEXT, ST_THINK, ST_CALL, ST_JSON } pstate;

struct output_parser {
    output_parser_config cfg;
    pstate st;
    strbuf hold;   /* undecided text */
    strbuf call;   /* body of the current <tool_call> / bare JSON */
    const char *skip; /* ST_TEXT: characters still to drop at its start, or NULL */
    int n_calls;
};

output_parser *output_parser_new(const output_parser_config *cfg) {
    output_parser *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->cfg = *cfg;
    p->st = cfg->in_think ? ST_THINK : ST_START;
    return p;
}

void output_parser_free(output_parser *p) {
    if (!p) return;
    sb_free(&p->hold);
    sb_free(&p->call);
    free(p);
}

int output_parser_n_tool_calls(const output_parser *p) { return p->n_calls; }

static void emit_text(out_emit emit, void *ud, out_kind k, const char *s, size_t n) {
    if (!n) return;
    out_piece pc = {k, s, n, NULL, NULL};
    emit(ud, &pc);
}

/* Parses a tool-call JSON body; emits a TOOL_CALL and returns 1, or 0. */
static int emit_call_json(output_parser *p, const char *body, size_t n, out_emit emit, void *ud) {
    json_error_t e;
    json_t *j = json_loadb(body, n, 0, &e);
    if (!j || !json_is_object(j)) {
        json_decref(j);
        return 0;
    }
    json_t *name = json_object_get(j, "name");
    json_t *args = json_object_get(j, "arguments");
    if (!args) args = json_object_get(j, "parameters");
    if (!json_is_string(name) || !json_string_length(name) || (args && !json_is_object(args) && !json_is_string(args))) {
        json_decref(j);
        return 0;
    }
    char *a = NULL;
    if (!args) a = strdup("{}");
    else if (json_is_string(args)) a = strdup(json_string_value(args));
    else a = json_dumps(args, JSON_COMPACT);
    if (!a) {
        json_decref(j);
        return 0;
    }
    out_piece pc = {OUT_TOOL_CALL, NULL, 0, json_string_value(name), a};
    emit(ud, &pc);
    p->n_calls++;
    free(a);
    json_decref(j);
    return 1;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of tag. */
static size_t partial_suffix(const char *s, size_t n, const char *tag) {
    size_t tl = strlen(tag);
    for (size_t k = tl - 1 < n ? tl - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, tag, k)) return k;
    return 0;
}

static const char *find(const char *s, size_t n, const char *tag) { return memmem(s, n, tag, strlen(tag)); }

/* Processes p->hold as far as it can be decided. */
static void run(output_parser *p, out_emit emit, void *ud, bool final) {
    for (;;) {
        if (p->skip && (p->st == ST_TEXT || p->st == ST_START)) {
            size_t j = 0;
            while (j < p->hold.len && p->hold.s[j] && strchr(p->skip, p->hold.s[j])) j++;
            sb_consume(&p->hold, j);
            if (!p->hold.len) return; /* more may follow */
            p->skip = NULL;
        }
        const char *s = p->hold.s;
        size_t n = p->hold.len;
        /* an unterminated <tool_call> at the end is given back even if empty */
        if (!n && !(final && p->st == ST_CALL)) return;
        if (p->st == ST_START) {
            size_t i = 0;
            while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) i++;
            if (i == n && !final) return; /* only whitespace so far */
            if (p->cfg.tools && i < n && s[i] == '{') {
                p->st = ST_JSON;
                continue;
            }
            p->st = ST_TEXT;
            continue;
        }
        if (p->st == ST_JSON) {
            sb_append(&p->call, s, n);
            sb_clear(&p->hold);
            return;
        }
        if (p->st == ST_TEXT || p->st == ST_THINK) {
            const char *open_tag = p->st == ST_THINK ? TAG_THINK_END : TAG_CALL;
            const char *hit = find(s, n, open_tag);
            const char *think = p->st == ST_TEXT && p->cfg.think ? find(s, n, TAG_THINK) : NULL;
            if (!p->cfg.tools && p->st == ST_TEXT) hit = NULL;
            if (think && (!hit || think < hit)) {
                emit_text(emit, ud, OUT_CONTENT, s, (size_t)(think - s));
                sb_consume(&p->hold, (size_t)(think - s) + strlen(TAG_THINK));
                p->st = ST_THINK;
                continue;
            }
            if (hit) {
                out_kind k = p->st == ST_THINK ? OUT_REASONING : OUT_CONTENT;
                emit_text(emit, ud, k, s, (size_t)(hit - s));
                sb_consume(&p->hold, (size_t)(hit - s) + strlen(open_tag));
                /* after </think> the answer starts afresh: a bare-JSON tool call may follow */
                p->st = p->st == ST_THINK ? (p->cfg.tools ? ST_START : ST_TEXT) : ST_CALL;
                if (p->st != ST_CALL) p->skip = "\n"; /* drop the newlines that follow </think> */
                continue;
            }
            size_t keep = final || (p->st == ST_TEXT && !p->cfg.tools) ? 0 : partial_suffix(s, n, open_tag);
            if (!final && p->st == ST_TEXT && p->cfg.think) {
                size_t k2 = partial_suffix(s, n, TAG_THINK);
                if (k2 > keep) keep = k2;
            }
            emit_text(emit, ud, p->st == ST_THINK ? OUT_REASONING : OUT_CONTENT, s, n - keep);
            sb_consume(&p->hold, n - keep);
            return;
        }
        if (p->st == ST_CALL) {
            const char *end = find(s, n, TAG_CALL_END);
            if (!end) {
                if (!final) return;
                /* unterminated: give it back as text */
                strbuf raw = {0};
                sb_puts(&raw, TAG_CALL);
                sb_append(&raw, s, n);
                emit_text(emit, ud, OUT_CONTENT, raw.s, raw.len);
                sb_free(&raw);
                sb_clear(&p->hold);
                p->st = ST_TEXT;
                return;
            }
            size_t bl = (size_t)(end - s);
            p->skip = " \n"; /* whitespace between calls is not content */
            if (!emit_call_json(p, s, bl, emit, ud)) {
                p->skip = NULL; /* a call given back as text stays verbatim */
                strbuf raw = {0};
                sb_puts(&raw, TAG_CALL);
                sb_append(&raw, s, bl);
                sb_puts(&raw, TAG_CALL_END);
                emit_text(emit, ud, OUT_CONTENT, raw.s, raw.len);
                sb_free(&raw);
            }
            sb_consume(&p->hold, bl + strlen(TAG_CALL_END));
            p->st = ST_TEXT;
            continue;
        }
    }
}

void output_parser_feed(output_parser *p, const char *text, size_t len, out_emit emit, void *ud) {
    sb_append(&p->hold, text, len);
    run(p, emit, ud, false);
}

void output_parser_finish(output_parser *p, out_emit emit, void *ud) {
    run(p, emit, ud, true);
    if (p->st == ST_JSON) {
        /* a bare JSON answer is a tool call only if it parses as one; an
         * optional trailing <|eom_id|>-style text was already stripped */
        if (!emit_call_json(p, p->call.s, p->call.len, emit, ud)) emit_text(emit, ud, OUT_CONTENT, p->call.s, p->call.len);
        sb_clear(&p->call);
    }
}
