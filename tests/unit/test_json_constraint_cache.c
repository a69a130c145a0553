/* test_json_constraint_cache.c — compiled constraints kept by schema text:
 * the same schema (in any key order) is one compile, another schema
 * another; refusals come back with their message without a second
 * compile; the least recently used leave past JCC_ENTRIES while the
 * constraints handed out stay usable; threads sharing it get working
 * constraints. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "sample/json_constraint_cache.h"
#include "test.h"

static json_constraint *cached(const char *schema, char *err, size_t errlen) {
    json_t *j = schema ? json_loads(schema, 0, NULL) : NULL;
    CHECK(!schema || j);
    json_constraint *c = jc_compile_cached(j, err, errlen);
    json_decref(j);
    return c;
}

/* the constraint accepts text whole */
static bool accepts(const json_constraint *c, const char *text) {
    jc_state s;
    jc_start(&s, c, 0);
    return jc_feed(&s, (const uint8_t *)text, strlen(text)) && jc_can_end(&s);
}

TEST(test_json_constraint_cache_keeps_compiles) {
    char err[256];
    long hits, misses;
    jc_cache_clear();
    const char *a = "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"pattern\":\"^u[0-9]+$\"},\"n\":{\"type\":\"integer\"}},"
                    "\"required\":[\"id\"]}";
    const char *a_reordered = "{\"required\":[\"id\"],\"properties\":{\"n\":{\"type\":\"integer\"},\"id\":{\"pattern\":\"^u[0-9]+$\","
                              "\"type\":\"string\"}},\"type\":\"object\"}";
    json_constraint *c1 = cached(a, err, sizeof err), *c2 = cached(a_reordered, err, sizeof err),
                    *c3 = cached("{\"type\":\"integer\"}", err, sizeof err), *c4 = cached(NULL, err, sizeof err),
                    *c5 = cached(NULL, err, sizeof err);
    CHECK(c1 && c1 == c2);
    CHECK(c3 && c3 != c1);
    CHECK(c4 && c4 == c5);
    jc_cache_counts(&hits, &misses);
    CHECK_EQ_INT(hits, 2);
    CHECK_EQ_INT(misses, 3);
    CHECK(c1 && accepts(c1, "{\"id\": \"u42\"}") && !accepts(c1, "{\"id\": \"x\"}"));
    /* a refusal: the same message, one compile */
    char e1[256] = "", e2[256] = "";
    CHECK(cached("{\"type\":\"string\",\"pattern\":\"(?=a)\"}", e1, sizeof e1) == NULL);
    CHECK(cached("{\"type\":\"string\",\"pattern\":\"(?=a)\"}", e2, sizeof e2) == NULL);
    CHECK(strstr(e1, "lookahead") != NULL);
    CHECK_EQ_STR(e2, e1);
    jc_cache_counts(&hits, &misses);
    CHECK_EQ_INT(hits, 3);
    CHECK_EQ_INT(misses, 4);
    /* past JCC_ENTRIES others: the least recently used (a) is compiled again; c1 still works */
    for (int i = 0; i < JCC_ENTRIES + 2; i++) {
        char s[96];
        snprintf(s, sizeof s, "{\"type\":\"integer\",\"minimum\":%d}", i);
        jc_free(cached(s, err, sizeof err));
    }
    json_constraint *again = cached(a, err, sizeof err);
    jc_cache_counts(&hits, &misses);
    CHECK_EQ_INT(misses, 4 + JCC_ENTRIES + 2 + 1);
    CHECK(again && again != c1);
    jc_cache_clear();
    CHECK(c1 && accepts(c1, "{\"id\": \"u7\", \"n\": 3}"));
    jc_free(again);
    jc_free(c1);
    jc_free(c2);
    jc_free(c3);
    jc_free(c4);
    jc_free(c5);
}

static void *worker(void *arg) {
    int *bad = arg;
    char err[256];
    for (int i = 0; i < 300; i++) {
        char s[128];
        snprintf(s, sizeof s, "{\"type\":\"string\",\"pattern\":\"^[a-z]{%d}$\"}", 1 + i % 9);
        json_constraint *c = cached(s, err, sizeof err);
        char ok[16] = "\"", no[16] = "\"";
        for (int k = 0; k < 1 + i % 9; k++) strcat(ok, "q");
        strcat(no, ok + 1), strcat(no, "q\"");
        strcat(ok, "\"");
        if (!c || !accepts(c, ok) || accepts(c, no)) (*bad)++;
        jc_free(c);
    }
    return NULL;
}

TEST(test_json_constraint_cache_is_shared_by_threads) {
    pthread_t t[4];
    int bad[4] = {0};
    jc_cache_clear();
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, &bad[i]);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    long hits, misses;
    jc_cache_counts(&hits, &misses);
    printf("    4 threads x 300 compiles of 9 schemas: %ld hits, %ld misses\n", hits, misses);
    CHECK_EQ_INT(bad[0] + bad[1] + bad[2] + bad[3], 0);
    CHECK_EQ_INT(hits + misses, 1200);
    CHECK(misses >= 9 && misses <= 36); /* (a schema new to two threads at once may compile twice) */
    jc_cache_clear();
}
