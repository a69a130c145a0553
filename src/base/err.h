/* err.h — status codes and the thread-local "last error" message.
 *
 * Functions that can fail return a status (0 = ok, negative = error) and call
 * err_set() with a one-line message naming what was wrong and where (file,
 * tensor, byte offset, JSON path). The caller that gives up (cli/, later the
 * server) prints err_msg(); nothing below cli/ prints errors or exits. */
#ifndef KS_ERR_H
#define KS_ERR_H

enum {
    KS_OK = 0,
    KS_EIO = -1,          /* file missing, unreadable, mmap failed */
    KS_EFORMAT = -2,      /* malformed or inconsistent input data */
    KS_ENOMEM = -3,       /* allocation failed */
    KS_EINVAL = -4,       /* bad argument from the caller / user */
    KS_EUNSUPPORTED = -5, /* well-formed but not supported (arch, dtype) */
};

/* Stores a printf-style message for this thread and returns status. When a
 * message is already set and `status` comes from a nested call, use
 * err_wrap() to prefix context instead of overwriting it. */
int err_set(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes context to the current message: "ctx: <old message>". */
int err_wrap(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *err_msg(void);
void err_clear(void);

#endif
