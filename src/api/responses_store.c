/* responses_store.c — bounded FIFO of finished Responses (see
 * responses_store.h): a doubly linked list in insertion order (head = oldest)
 * searched linearly — a thousand strcmp()s per lookup is nothing next to a
 * generation. */
#include "api/responses_store.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    struct entry *prev, *next;
    char *id, *response, *input, *conversation;
    size_t bytes;
} entry;

struct responses_store {
    pthread_mutex_t lock;
    entry *head, *tail;     /* head: oldest */
    size_t n, max_entries;
    size_t bytes, max_bytes;
};

responses_store *responses_store_new(size_t max_entries, size_t max_bytes) {
    responses_store *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_init(&s->lock, NULL);
    s->max_entries = max_entries ? max_entries : 1;
    s->max_bytes = max_bytes;
    return s;
}

static void entry_free(entry *e) {
    if (!e) return;
    free(e->id);
    free(e->response);
    free(e->input);
    free(e->conversation);
    free(e);
}

static void unlink_entry(responses_store *s, entry *e) {
    if (e->prev) e->prev->next = e->next;
    else s->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else s->tail = e->prev;
    s->n--;
    s->bytes -= e->bytes;
}

void responses_store_free(responses_store *s) {
    if (!s) return;
    for (entry *e = s->head, *nx; e; e = nx) {
        nx = e->next;
        entry_free(e);
    }
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static entry *find(responses_store *s, const char *id) {
    for (entry *e = s->tail; e; e = e->prev)
        if (!strcmp(e->id, id)) return e;
    return NULL;
}

static char *dup_or_empty(const char *x) { return strdup(x ? x : ""); }

int responses_store_put(responses_store *s, const char *id, const char *response, const char *input,
                        const char *conversation) {
    entry *e = calloc(1, sizeof *e);
    if (!e) return -1;
    e->id = strdup(id);
    e->response = dup_or_empty(response);
    e->input = dup_or_empty(input);
    e->conversation = dup_or_empty(conversation);
    if (!e->id || !e->response || !e->input || !e->conversation) {
        entry_free(e);
        return -1;
    }
    e->bytes = sizeof *e + strlen(e->id) + strlen(e->response) + strlen(e->input) + strlen(e->conversation) + 4;
    pthread_mutex_lock(&s->lock);
    entry *old = find(s, id);
    if (old) unlink_entry(s, old);
    entry_free(old);
    if (s->max_bytes && e->bytes > s->max_bytes) {
        pthread_mutex_unlock(&s->lock);
        entry_free(e);
        return 0;
    }
    while (s->head && (s->n + 1 > s->max_entries || (s->max_bytes && s->bytes + e->bytes > s->max_bytes))) {
        entry *victim = s->head;
        unlink_entry(s, victim);
        entry_free(victim);
    }
    e->prev = s->tail;
    if (s->tail) s->tail->next = e;
    else s->head = e;
    s->tail = e;
    s->n++;
    s->bytes += e->bytes;
    pthread_mutex_unlock(&s->lock);
    return 0;
}

int responses_store_get(responses_store *s, const char *id, char **response, char **input, char **conversation) {
    int rc = -1;
    char *r = NULL, *in = NULL, *c = NULL;
    pthread_mutex_lock(&s->lock);
    entry *e = find(s, id);
    if (e) {
        rc = 0;
        if (response && !(r = strdup(e->response))) rc = -1;
        if (input && !(in = strdup(e->input))) rc = -1;
        if (conversation && !(c = strdup(e->conversation))) rc = -1;
    }
    pthread_mutex_unlock(&s->lock);
    if (rc) {
        free(r);
        free(in);
        free(c);
        return -1;
    }
    if (response) *response = r;
    if (input) *input = in;
    if (conversation) *conversation = c;
    return 0;
}

size_t responses_store_count(responses_store *s) {
    pthread_mutex_lock(&s->lock);
    size_t n = s->n;
    pthread_mutex_unlock(&s->lock);
    return n;
}
