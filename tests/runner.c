/* runner.c — runs every TEST() linked into build/test_runner (optionally only
 * those whose name contains argv[1]) and prints "N passed, N failed" last. */
#include "test.h"

#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_TESTS 1024
static struct { const char *name, *file; test_fn fn; } tests[MAX_TESTS];
static int n_tests;
static int cur_failed, cur_skipped;
static char skip_reason[512];

void test_register(const char *name, const char *file, test_fn fn) {
    if (n_tests < MAX_TESTS) {
        tests[n_tests].name = name;
        tests[n_tests].file = file;
        tests[n_tests].fn = fn;
        n_tests++;
    }
}

void test_fail(const char *file, int line, const char *fmt, ...) {
    if (cur_failed < 20) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stdout, "    %s:%d: ", file, line);
        vfprintf(stdout, fmt, ap);
        fputc('\n', stdout);
        va_end(ap);
    }
    cur_failed++;
}

void test_skip(const char *reason) {
    cur_skipped = 1;
    snprintf(skip_reason, sizeof skip_reason, "%s", reason);
}

const char *test_shared_path(const char *rel) {
    static _Thread_local char buf[8][1024];
    static _Thread_local int slot;
    const char *root = getenv("KESTREL_SHARED");
    if (!root || !*root) root = "../shared";
    char *b = buf[slot++ % 8];
    snprintf(b, 1024, "%s/%s", root, rel);
    return access(b, F_OK) == 0 ? b : NULL;
}

const char *test_repo_path(const char *rel) { return rel; }

int main(int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    int passed = 0, failed = 0, skipped = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 0; i < n_tests; i++) {
        if (filter && !strstr(tests[i].name, filter)) continue;
        cur_failed = 0;
        cur_skipped = 0;
        tests[i].fn();
        if (cur_failed) {
            printf("FAIL %s (%s)\n", tests[i].name, tests[i].file);
            failed++;
        } else if (cur_skipped) {
            printf("SKIP %s: %s\n", tests[i].name, skip_reason);
            skipped++;
        } else {
            printf("ok   %s\n", tests[i].name);
            passed++;
        }
    }
    if (skipped) printf("(%d skipped)\n", skipped);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
