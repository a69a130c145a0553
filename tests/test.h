/* test.h — the unit-test framework: TEST() registers a function with the one
 * runner (tests/runner.c), CHECK*() record failures without stopping, SKIP()
 * marks a test skipped with a reason (e.g. ../shared absent).
 * The runner's last line is "N passed, N failed". */
#ifndef KS_TEST_H
#define KS_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef void (*test_fn)(void);
void test_register(const char *name, const char *file, test_fn fn);
void test_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void test_skip(const char *reason);
/* Path of ../shared/models/... relative to the repo root, or NULL if absent
 * (env KESTREL_SHARED overrides the default "../shared"). */
const char *test_shared_path(const char *rel);
/* Path of a file in the repository (tests run from the repo root). */
const char *test_repo_path(const char *rel);

/* Tolerance of logits against a float32 transformers reference, by the
 * backend's KV format: 1e-4 relative with f32 KV (the CPU with --kv-type
 * f32: f32 activations and KV); 1e-2 with a bf16 KV cache (the default on
 * both backends: 2^-9 relative rounding per element; 1.6e-3 .. 4.6e-3
 * measured on the H200 for tinycoder and the tiny fixtures, 1.2e-3 ..
 * 2.7e-3 on the CPU for tinycoder). A wrong kernel is off by O(1). */
#define TEST_LOGIT_TOL(be) ((be)->kv_elem_bytes == 4 ? 1e-4 : 1e-2)

#define TEST(name)                                                         \
    static void name(void);                                                \
    __attribute__((constructor)) static void name##_register(void) {       \
        test_register(#name, __FILE__, name);                              \
    }                                                                      \
    static void name(void)

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond)) test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);    \
    } while (0)
#define CHECK_MSG(cond, ...)                                               \
    do {                                                                   \
        if (!(cond)) test_fail(__FILE__, __LINE__, __VA_ARGS__);           \
    } while (0)
#define CHECK_EQ_INT(a, b)                                                 \
    do {                                                                   \
        long long _a = (long long)(a), _b = (long long)(b);                \
        if (_a != _b)                                                      \
            test_fail(__FILE__, __LINE__, "%s == %lld, expected %s == %lld", \
                      #a, _a, #b, _b);                                     \
    } while (0)
#define CHECK_EQ_STR(a, b)                                                 \
    do {                                                                   \
        const char *_a = (a), *_b = (b);                                   \
        if (!_a || !_b || strcmp(_a, _b) != 0)                             \
            test_fail(__FILE__, __LINE__, "%s == \"%s\", expected \"%s\"", \
                      #a, _a ? _a : "(null)", _b ? _b : "(null)");         \
    } while (0)
#define CHECK_NEAR(a, b, tol)                                              \
    do {                                                                   \
        double _a = (a), _b = (b);                                         \
        if (!(fabs(_a - _b) <= (tol)))                                     \
            test_fail(__FILE__, __LINE__, "%s == %g, expected %g (tol %g)", \
                      #a, _a, _b, (double)(tol));                          \
    } while (0)
#define SKIP(reason)                                                       \
    do {                                                                   \
        test_skip(reason);                                                 \
        return;                                                            \
    } while (0)

#endif
