/* strbuf.h — a growable byte buffer (always NUL-terminated). Owned by whoever
 * holds it; sb_free() releases the storage. On allocation failure the buffer
 * keeps its old contents and sets `oom` (checked once, at the end). */
#ifndef KS_STRBUF_H
#define KS_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *s;
    size_t len, cap;
    bool oom;
} strbuf;

void sb_append(strbuf *b, const char *s, size_t n);
void sb_puts(strbuf *b, const char *s);
void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Removes the first n bytes. */
void sb_consume(strbuf *b, size_t n);
void sb_clear(strbuf *b);
void sb_free(strbuf *b);
/* Hands the storage to the caller (malloc'd, NUL-terminated; "" if empty). */
char *sb_take(strbuf *b, size_t *len);

#endif
