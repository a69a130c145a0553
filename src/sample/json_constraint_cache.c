/* json_constraint_cache.c — json_constraint_cache.h: a small table of
 * (schema text, compiled constraint or refusal) under one mutex, searched
 * linearly (at most JCC_ENTRIES), the least recently used evicted. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "sample/json_constraint_cache.h"

typedef struct {
    uint64_t hash;
    char *text;          /* the key */
    json_constraint *c;  /* the cache's reference (NULL: refused) */
    char *err;           /* a refusal's message */
    size_t bytes;
    unsigned long used;  /* the tick of its last use */
} entry;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static entry tab[JCC_ENTRIES];
static int n_tab;
static size_t total;
static unsigned long tick;
static long n_hits, n_misses;

static void drop(int i) {
    jc_free(tab[i].c);
    free(tab[i].text);
    free(tab[i].err);
    total -= tab[i].bytes;
    tab[i] = tab[--n_tab];
}

static int find(uint64_t h, const char *text) {
    for (int i = 0; i < n_tab; i++)
        if (tab[i].hash == h && !strcmp(tab[i].text, text)) return i;
    return -1;
}

json_constraint *jc_compile_cached(const json_t *schema, char *err, size_t errlen) {
    char *text = schema ? json_dumps(schema, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY) : strdup("");
    if (!text) return jc_compile(schema, err, errlen);
    uint64_t h = XXH3_64bits(text, strlen(text));
    pthread_mutex_lock(&mu);
    int i = find(h, text);
    if (i >= 0) {
        tab[i].used = ++tick;
        n_hits++;
        json_constraint *c = jc_ref(tab[i].c);
        if (!c && err && errlen) snprintf(err, errlen, "%s", tab[i].err);
        pthread_mutex_unlock(&mu);
        free(text);
        return c;
    }
    n_misses++;
    pthread_mutex_unlock(&mu);
    json_constraint *c = jc_compile(schema, err, errlen); /* (outside the lock) */
    size_t bytes = sizeof(entry) + strlen(text) + 1 + (c ? jc_bytes(c) : 0);
    char *msg = c ? NULL : strdup(err && errlen ? err : "");
    if (bytes <= JCC_BYTES / 4 && (c || msg)) {
        pthread_mutex_lock(&mu);
        if (find(h, text) < 0) { /* (another request may have kept it meanwhile) */
            while (n_tab && (n_tab == JCC_ENTRIES || total + bytes > JCC_BYTES)) {
                int lru = 0;
                for (int j = 1; j < n_tab; j++)
                    if (tab[j].used < tab[lru].used) lru = j;
                drop(lru);
            }
            tab[n_tab++] = (entry){h, text, jc_ref(c), msg, bytes, ++tick};
            total += bytes;
            text = msg = NULL;
        }
        pthread_mutex_unlock(&mu);
    }
    free(text);
    free(msg);
    return c;
}

void jc_cache_clear(void) {
    pthread_mutex_lock(&mu);
    while (n_tab) drop(n_tab - 1);
    n_hits = n_misses = 0;
    pthread_mutex_unlock(&mu);
}

void jc_cache_counts(long *hits, long *misses) {
    pthread_mutex_lock(&mu);
    *hits = n_hits;
    *misses = n_misses;
    pthread_mutex_unlock(&mu);
}
