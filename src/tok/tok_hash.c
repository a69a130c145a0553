/* tok_hash.c — the tokenizer's small data structures: a fast byte hash,
 * open-addressing hash maps (string -> id for the vocab, u64 -> u64 for merge
 * ranks), growable buffers, UTF-8 helpers and the GPT-2 byte-level alphabet. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "tok/tok_internal.h"

/* ---- hashing ---------------------------------------------------------- */

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ULL;
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ULL;
    x ^= x >> 32;
    return x;
}

uint64_t tok_hash_bytes(const void *p, size_t len) {
    const unsigned char *s = p;
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (len * 0xff51afd7ed558ccdULL);
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ mix64(v)) * 0x9fb21c651e98df25ULL;
        h ^= h >> 29;
        s += 8;
        len -= 8;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) v |= (uint64_t)s[i] << (8 * i);
    h = (h ^ mix64(v ^ 0x2545f4914f6cdd1dULL)) * 0x9fb21c651e98df25ULL;
    return mix64(h);
}

static uint32_t pow2_at_least(uint64_t n) {
    uint64_t c = 16;
    while (c < n) c <<= 1;
    return c > (1u << 31) ? 0 : (uint32_t)c;
}

/* ---- string -> id ------------------------------------------------------- */

int tok_smap_init(tok_smap *m, uint32_t expected) {
    m->n = 0;
    m->cap = pow2_at_least((uint64_t)expected * 2 + 16);
    m->slots = m->cap ? calloc(m->cap, sizeof *m->slots) : NULL;
    if (!m->slots) return err_set(KS_ENOMEM, "tokenizer: out of memory (hash map of %u)", expected);
    return KS_OK;
}

void tok_smap_free(tok_smap *m) {
    free(m->slots);
    m->slots = NULL;
    m->cap = m->n = 0;
}

static int smap_grow(tok_smap *m) {
    uint32_t ncap = m->cap * 2;
    if (!ncap) return err_set(KS_ENOMEM, "tokenizer: hash map too large");
    tok_smap_slot *ns = calloc(ncap, sizeof *ns);
    if (!ns) return err_set(KS_ENOMEM, "tokenizer: out of memory (hash map)");
    for (uint32_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].key) continue;
        uint32_t j = m->slots[i].hash & (ncap - 1);
        while (ns[j].key) j = (j + 1) & (ncap - 1);
        ns[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    return KS_OK;
}

int tok_smap_put(tok_smap *m, const char *key, uint32_t len, int32_t val) {
    if ((uint64_t)(m->n + 1) * 2 > m->cap) {
        int rc = smap_grow(m);
        if (rc < 0) return rc;
    }
    uint32_t h = (uint32_t)tok_hash_bytes(key, len);
    uint32_t j = h & (m->cap - 1);
    while (m->slots[j].key) {
        tok_smap_slot *s = &m->slots[j];
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) {
            s->val = val;
            return 0;
        }
        j = (j + 1) & (m->cap - 1);
    }
    m->slots[j] = (tok_smap_slot){ key, len, h, val };
    m->n++;
    return 1;
}

int32_t tok_smap_get(const tok_smap *m, const char *key, uint32_t len) {
    if (!m->cap) return -1;
    uint32_t h = (uint32_t)tok_hash_bytes(key, len);
    uint32_t j = h & (m->cap - 1);
    while (m->slots[j].key) {
        const tok_smap_slot *s = &m->slots[j];
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) return s->val;
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

/* ---- u64 -> u64 ------------------------------------------------------------ */

#define PMAP_EMPTY UINT64_MAX

int tok_pmap_init(tok_pmap *m, uint32_t expected) {
    m->n = 0;
    m->cap = pow2_at_least((uint64_t)expected * 2 + 16);
    m->keys = m->cap ? malloc((size_t)m->cap * sizeof *m->keys) : NULL;
    m->vals = m->cap ? malloc((size_t)m->cap * sizeof *m->vals) : NULL;
    if (!m->keys || !m->vals) {
        tok_pmap_free(m);
        return err_set(KS_ENOMEM, "tokenizer: out of memory (hash map of %u)", expected);
    }
    memset(m->keys, 0xff, (size_t)m->cap * sizeof *m->keys);
    return KS_OK;
}

void tok_pmap_free(tok_pmap *m) {
    free(m->keys);
    free(m->vals);
    m->keys = m->vals = NULL;
    m->cap = m->n = 0;
}

static int pmap_grow(tok_pmap *m) {
    tok_pmap nm;
    int rc = tok_pmap_init(&nm, m->cap);
    if (rc < 0) return rc;
    for (uint32_t i = 0; i < m->cap; i++)
        if (m->keys[i] != PMAP_EMPTY) tok_pmap_put(&nm, m->keys[i], m->vals[i]);
    tok_pmap_free(m);
    *m = nm;
    return KS_OK;
}

int tok_pmap_put(tok_pmap *m, uint64_t key, uint64_t val) {
    if (key == PMAP_EMPTY) return err_set(KS_EINVAL, "tokenizer: reserved hash key");
    if ((uint64_t)(m->n + 1) * 2 > m->cap) {
        int rc = pmap_grow(m);
        if (rc < 0) return rc;
    }
    uint32_t j = (uint32_t)mix64(key) & (m->cap - 1);
    while (m->keys[j] != PMAP_EMPTY) {
        if (m->keys[j] == key) {
            m->vals[j] = val;
            return 0;
        }
        j = (j + 1) & (m->cap - 1);
    }
    m->keys[j] = key;
    m->vals[j] = val;
    m->n++;
    return 1;
}

bool tok_pmap_get(const tok_pmap *m, uint64_t key, uint64_t *val) {
    if (!m->cap) return false;
    uint32_t j = (uint32_t)mix64(key) & (m->cap - 1);
    while (m->keys[j] != PMAP_EMPTY) {
        if (m->keys[j] == key) {
            *val = m->vals[j];
            return true;
        }
        j = (j + 1) & (m->cap - 1);
    }
    return false;
}

/* ---- buffers ----------------------------------------------------------------- */

int tok_buf_reserve(tok_buf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return KS_OK;
    size_t ncap = b->cap ? b->cap : 64;
    while (ncap < b->len + extra + 1) ncap *= 2;
    char *np = realloc(b->p, ncap);
    if (!np) return err_set(KS_ENOMEM, "tokenizer: out of memory (%zu bytes)", ncap);
    b->p = np;
    b->cap = ncap;
    return KS_OK;
}

int tok_buf_add(tok_buf *b, const void *p, size_t n) {
    int rc = tok_buf_reserve(b, n);
    if (rc < 0) return rc;
    if (n) memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = 0;
    return KS_OK;
}

void tok_buf_free(tok_buf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

int tok_ids_push(tok_ids *v, int32_t id) {
    if (v->len == v->cap) {
        size_t ncap = v->cap ? v->cap * 2 : 64;
        int32_t *np = realloc(v->p, ncap * sizeof *np);
        if (!np) return err_set(KS_ENOMEM, "tokenizer: out of memory (%zu ids)", ncap);
        v->p = np;
        v->cap = ncap;
    }
    v->p[v->len++] = id;
    return KS_OK;
}

/* ---- UTF-8 ------------------------------------------------------------------------ */

int tok_utf8_len(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 0;
    if (n < (size_t)len) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (int i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

size_t tok_utf8_validate(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        int l = tok_utf8_len(u + i, n - i);
        if (!l) return i;
        i += l;
    }
    return n;
}

int tok_utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

uint32_t tok_utf8_decode(const unsigned char *s, int len) {
    switch (len) {
    case 1: return s[0];
    case 2: return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3: return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default:
        return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
               ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    }
}

/* ---- byte-level alphabet ---------------------------------------------------------
 * GPT-2's bytes_to_unicode: printable bytes 33..126, 161..172, 174..255 map to
 * themselves, the other 68 bytes to U+0100.. in byte order. */

static bool byte_is_printable(unsigned b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
}

static uint16_t byte_cp[256];
static int16_t cp_byte[256 + 68];
static pthread_once_t alphabet_once = PTHREAD_ONCE_INIT;

static void alphabet_init(void) {
    unsigned n = 0;
    for (unsigned i = 0; i < 256 + 68; i++) cp_byte[i] = -1;
    for (unsigned b = 0; b < 256; b++) {
        byte_cp[b] = byte_is_printable(b) ? b : 256 + n++;
        cp_byte[byte_cp[b]] = (int16_t)b;
    }
}

uint32_t tok_byte_to_cp(uint8_t b) {
    pthread_once(&alphabet_once, alphabet_init);
    return byte_cp[b];
}

int tok_cp_to_byte(uint32_t cp) {
    pthread_once(&alphabet_once, alphabet_init);
    return cp < 256 + 68 ? cp_byte[cp] : -1;
}
