/* token_mask.c — token_mask.h: the vocabulary's byte strings in sorted
 * order with each one's common prefix with the one before, walked with a
 * stack of recognizer states (state d = after the first d bytes). Inside a
 * free string (jc_in_free_string) most of a vocabulary is plain text: those
 * tokens are allowed from a table made once (less those longer than a
 * maxLength leaves room for), and only the others are fed;
 * in free text (jc_in_free_text) only the tokens holding a '<'. */
#include <stdlib.h>
#include <string.h>

#include "sample/token_mask.h"

struct token_mask {
    int n_ids;
    uint8_t *bytes;     /* every text token's bytes, back to back */
    uint32_t *off, *len; /* (n_ids) a token's bytes (len 0: never allowed) */
    int32_t *order;     /* (n_text) text tokens sorted by their bytes */
    uint32_t *lcp;      /* (n_text) bytes in common with the token before in order */
    int n_text;
    uint8_t *plain;     /* (n_ids) 1: a token a free string takes whole (jc_in_free_string) */
    uint16_t *chars;    /* (n_ids) a plain token's characters (bytes that start one) */
    int max_chars;
    int n_plain;
    int32_t *other;     /* the text tokens that are not plain */
    int n_other;
    int32_t *with_lt;   /* the text tokens holding a '<' (the others a <think> block takes whole) */
    int n_with_lt;
    uint32_t max_len;
    jc_state *stack;    /* (max_len + 1) scratch */
};

static int by_bytes(const void *a, const void *b, void *ctx) {
    const token_mask *m = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = m->len[x], ly = m->len[y];
    int c = memcmp(m->bytes + m->off[x], m->bytes + m->off[y], lx < ly ? lx : ly);
    return c ? c : lx < ly ? -1 : lx > ly ? 1 : x - y;
}

/* Valid UTF-8 (the last character may be cut short) without '"', '\\' or
 * control characters: what jc_in_free_string accepts whole. */
static bool is_plain(const uint8_t *b, uint32_t n) {
    for (uint32_t i = 0; i < n;) {
        uint8_t c = b[i];
        if (c < 0x80) {
            if (c < 0x20 || c == '"' || c == '\\') return false;
            i++;
            continue;
        }
        uint8_t lo, hi;
        uint32_t need = (uint32_t)jc_utf8_lead(c, &lo, &hi);
        if (!need) return false;
        for (uint32_t k = 1; k <= need && i + k < n; k++) {
            uint8_t d = b[i + k];
            if (k == 1 ? d < lo || d > hi : (d & 0xC0) != 0x80) return false;
        }
        i += need + 1;
    }
    return true;
}

token_mask *token_mask_new(const tokenizer *t, int n_ids) {
    token_mask *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->n_ids = n_ids;
    m->off = calloc((size_t)n_ids, sizeof *m->off);
    m->len = calloc((size_t)n_ids, sizeof *m->len);
    m->order = malloc((size_t)n_ids * sizeof *m->order);
    m->lcp = malloc((size_t)n_ids * sizeof *m->lcp);
    if (!m->off || !m->len || !m->order || !m->lcp) goto fail;
    size_t cap = 1 << 20, used = 0;
    m->bytes = malloc(cap);
    if (!m->bytes) goto fail;
    int nv = tok_vocab_size(t);
    for (int id = 0; id < n_ids && id < nv; id++) {
        char *b;
        size_t bl;
        if (tok_is_special(t, id) || tok_id_bytes(t, id, &b, &bl) < 0) continue; /* unused ids: no bytes */
        if (bl && bl < 65536) {
            if (used + bl > cap) {
                while (used + bl > cap) cap *= 2;
                uint8_t *nb = realloc(m->bytes, cap);
                if (!nb) {
                    free(b);
                    goto fail;
                }
                m->bytes = nb;
            }
            memcpy(m->bytes + used, b, bl);
            m->off[id] = (uint32_t)used;
            m->len[id] = (uint32_t)bl;
            used += bl;
            m->order[m->n_text++] = id;
            if (bl > m->max_len) m->max_len = (uint32_t)bl;
        }
        free(b);
    }
    qsort_r(m->order, (size_t)m->n_text, sizeof *m->order, by_bytes, m);
    for (int i = 0; i < m->n_text; i++) {
        uint32_t l = 0;
        if (i) {
            int32_t a = m->order[i - 1], b = m->order[i];
            while (l < m->len[a] && l < m->len[b] && m->bytes[m->off[a] + l] == m->bytes[m->off[b] + l]) l++;
        }
        m->lcp[i] = l;
    }
    m->stack = malloc((size_t)(m->max_len + 1) * sizeof *m->stack);
    m->plain = calloc((size_t)n_ids, 1);
    m->other = malloc((size_t)n_ids * sizeof *m->other);
    m->with_lt = malloc((size_t)n_ids * sizeof *m->with_lt);
    m->chars = calloc((size_t)n_ids, sizeof *m->chars);
    if (!m->stack || !m->plain || !m->other || !m->with_lt || !m->chars) goto fail;
    for (int i = 0; i < m->n_text; i++) {
        int32_t id = m->order[i];
        if (memchr(m->bytes + m->off[id], '<', m->len[id])) m->with_lt[m->n_with_lt++] = id;
        if (is_plain(m->bytes + m->off[id], m->len[id])) {
            m->plain[id] = 1;
            m->n_plain++;
            for (uint32_t k = 0; k < m->len[id]; k++) m->chars[id] += (m->bytes[m->off[id] + k] & 0xC0) != 0x80;
            if (m->chars[id] > m->max_chars) m->max_chars = m->chars[id];
        } else
            m->other[m->n_other++] = id;
    }
    return m;
fail:
    token_mask_free(m);
    return NULL;
}

void token_mask_free(token_mask *m) {
    if (!m) return;
    free(m->bytes);
    free(m->off);
    free(m->len);
    free(m->order);
    free(m->lcp);
    free(m->stack);
    free(m->plain);
    free(m->other);
    free(m->with_lt);
    free(m->chars);
    free(m);
}

int token_mask_fill(token_mask *m, const jc_state *s, uint8_t *allowed) {
    if (jc_in_free_string(s)) {
        memcpy(allowed, m->plain, (size_t)m->n_ids);
        int n = m->n_plain, room = jc_string_room(s);
        if (room < m->max_chars) /* a maxLength near: the plain tokens too long for it go */
            for (int id = 0; id < m->n_ids; id++)
                if (allowed[id] && m->chars[id] > room) allowed[id] = 0, n--;
        for (int i = 0; i < m->n_other; i++)
            if (token_mask_allows(m, s, m->other[i])) {
                allowed[m->other[i]] = 1;
                n++;
            }
        return n;
    }
    if (jc_in_free_text(s)) { /* every text token but those with a '<', which are fed */
        int n = m->n_text;
        memset(allowed, 0, (size_t)m->n_ids);
        for (int i = 0; i < m->n_text; i++) allowed[m->order[i]] = 1;
        for (int i = 0; i < m->n_with_lt; i++)
            if (!token_mask_allows(m, s, m->with_lt[i])) allowed[m->with_lt[i]] = 0, n--;
        return n;
    }
    memset(allowed, 0, (size_t)m->n_ids);
    jc_copy(&m->stack[0], s);
    /* valid: states stack[0..valid] hold the previous token's prefixes;
     * refused: that token's first `refused` bytes are refused (0: none) */
    uint32_t valid = 0, refused = 0;
    int n = 0;
    for (int i = 0; i < m->n_text; i++) {
        int32_t id = m->order[i];
        uint32_t l = m->lcp[i], len = m->len[id];
        const uint8_t *b = m->bytes + m->off[id];
        if (refused && l >= refused) continue; /* starts with a refused prefix */
        refused = 0;
        uint32_t d = l < valid ? l : valid;
        for (; d < len; d++) {
            jc_copy(&m->stack[d + 1], &m->stack[d]);
            if (!jc_feed(&m->stack[d + 1], b + d, 1)) {
                refused = d + 1;
                break;
            }
        }
        valid = d;
        if (d == len) {
            allowed[id] = 1;
            n++;
        }
    }
    return n;
}

bool token_mask_allows(const token_mask *m, const jc_state *s, int id) {
    if (id < 0 || id >= m->n_ids || !m->len[id]) return false;
    jc_state t;
    jc_copy(&t, s);
    return jc_feed(&t, m->bytes + m->off[id], m->len[id]);
}

bool token_mask_feed(const token_mask *m, jc_state *s, int id) {
    if (id < 0 || id >= m->n_ids || !m->len[id]) return false;
    return jc_feed(s, m->bytes + m->off[id], m->len[id]);
}
