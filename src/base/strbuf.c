/* strbuf.c — growable byte buffer (see strbuf.h). */
#include "base/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool sb_reserve(strbuf *b, size_t extra) {
    if (b->oom) return false;
    if (b->len + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra + 1) cap *= 2;
    char *ns = realloc(b->s, cap);
    if (!ns) {
        b->oom = true;
        return false;
    }
    b->s = ns;
    b->cap = cap;
    return true;
}

void sb_append(strbuf *b, const char *s, size_t n) {
    if (!sb_reserve(b, n)) return;
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void sb_puts(strbuf *b, const char *s) { sb_append(b, s, strlen(s)); }

void sb_printf(strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char tmp[256];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        sb_append(b, tmp, (size_t)n);
        return;
    }
    if (!sb_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void sb_consume(strbuf *b, size_t n) {
    if (n >= b->len) {
        b->len = 0;
        if (b->s) b->s[0] = 0;
        return;
    }
    memmove(b->s, b->s + n, b->len - n);
    b->len -= n;
    b->s[b->len] = 0;
}

void sb_clear(strbuf *b) { sb_consume(b, b->len); }

void sb_free(strbuf *b) {
    free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
    b->oom = false;
}

char *sb_take(strbuf *b, size_t *len) {
    char *s = b->s ? b->s : calloc(1, 1);
    if (len) *len = b->s ? b->len : 0;
    b->s = NULL;
    b->len = b->cap = 0;
    return s;
}
