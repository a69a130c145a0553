/* err.c — thread-local last-error message (see err.h). */
#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char err_buf[1024];

int err_set(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
    return status;
}

int err_wrap(int status, const char *fmt, ...) {
    char prefix[512], old[sizeof err_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err_buf, sizeof old);
    size_t pl = strlen(prefix);
    if (pl > sizeof err_buf - 3) pl = sizeof err_buf - 3;
    memcpy(err_buf, prefix, pl);
    memcpy(err_buf + pl, ": ", 2);
    size_t ol = strnlen(old, sizeof err_buf - pl - 3);
    memcpy(err_buf + pl + 2, old, ol);
    err_buf[pl + 2 + ol] = 0;
    return status;
}

const char *err_msg(void) { return err_buf[0] ? err_buf : "unknown error"; }

void err_clear(void) { err_buf[0] = 0; }
