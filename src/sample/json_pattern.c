/* json_pattern.c — json_pattern.h: each pattern to a Thompson NFA
 * (json_pattern_nfa.c), the NFA to a DFA by subsets over classes of code
 * points (the intervals no set's edge splits), then for each state and
 * each count k of characters still owed to minLength the fewest characters
 * to a match k or more long. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/json_pattern.h"
#include "sample/json_pattern_nfa.h"

#define INF (1 << 29)
#define MAX_FEWEST (1 << 20)  /* entries of the (minLength + 1) x states table */
#define MAX_NEXT (1 << 22)    /* entries of the states x classes table (16 MB) */
#define MAX_WORK 40000000LL   /* the subset construction's steps (NFA states visited, bitset words
                               * cleared; a visit ~2.5 ns on this VM): about 0.1 s at most, for a
                               * compile that runs on a request's thread */

struct jp_dfa {
    int n_states, n_classes, start;
    uint32_t *bound;     /* (n_classes) each class's first code point, ascending from 0 */
    int16_t ascii[128];  /* an ASCII character's class */
    int32_t *next;       /* (n_states x n_classes) -1: dead, or a character no string carries */
    uint8_t *accept;     /* (n_states) */
    int min_len, max_len;
    int32_t *fewest;     /* ((min_len + 1) x n_states): [k][s] the fewest characters from s to a match, k or more */
};


/* ---- DFA ---- */

/* a character a JSON string carries as itself or by a short escape */
static bool writable(uint32_t c) { return (c >= 8 && c <= 10) || c == 12 || c == 13 || (c >= 0x20 && c < 0xD800) || c >= 0xE000; }

static int class_of(const jp_dfa *d, uint32_t cp) {
    if (cp < 128) return d->ascii[cp];
    int lo = 0, hi = d->n_classes - 1; /* the last class whose first code point is <= cp */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (d->bound[mid] <= cp) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static int by_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* the classes: every set's range ends, and the edges of what strings carry */
static int make_classes(rx *x, jp_dfa *d) {
    static const uint32_t FIXED[] = {0, 8, 11, 12, 14, 0x20, 0xD800, 0xE000};
    int n = 0, cap = 0;
    uint32_t *b = NULL;
    for (int i = 0; i < (int)(sizeof FIXED / sizeof FIXED[0]); i++) {
        if (!rx_grow((void **)&b, &cap, n + 1, sizeof *b)) goto oom;
        b[n++] = FIXED[i];
    }
    for (int i = 0; i < x->n_sets; i++)
        for (int j = 0; j < x->sets[i].n; j++) {
            if (!rx_grow((void **)&b, &cap, n + 2, sizeof *b)) goto oom;
            b[n++] = x->sets[i].r[j].lo;
            if (x->sets[i].r[j].hi < CP_MAX) b[n++] = x->sets[i].r[j].hi + 1;
        }
    qsort(b, (size_t)n, sizeof *b, by_u32);
    int w = 0;
    for (int i = 0; i < n; i++)
        if (!w || b[i] != b[w - 1]) b[w++] = b[i];
    d->bound = b;
    d->n_classes = w;
    d->n_classes = w;
    for (uint32_t c = 0, k = 0; c < 128; c++) {
        while (k + 1 < (uint32_t)w && b[k + 1] <= c) k++;
        d->ascii[c] = (int16_t)k;
    }
    return 0;
oom:
    free(b);
    return rx_fail(x, "out of memory");
}

static bool in_set(const cset *s, uint32_t cp) {
    int lo = 0, hi = s->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < s->r[mid].lo) hi = mid - 1;
        else if (cp > s->r[mid].hi) lo = mid + 1;
        else return true;
    }
    return false;
}

typedef struct {
    rx *x;
    jp_dfa *d;
    int words;           /* uint64s of an NFA state set */
    int32_t *keys;       /* each DFA state's live S_SET states, ascending, back to back */
    size_t *key_at;      /* (n_states + 1) where each state's run starts */
    size_t cap_keys;
    uint32_t *hash;
    int32_t *slot;       /* (2 x JP_MAX_STATES) state + 1 by hash, 0: free */
    int cap;
    int *stack;          /* closure work: state x 2 + after-$ */
    uint64_t *seen;      /* (2 x words) visited, before / after a $ */
    uint64_t *key;       /* (words) the closure's live S_SET states, cleared as read into list */
    int32_t *list;       /* the closure's live S_SET states, ascending */
    int n_list;
    long long work;      /* steps so far (MAX_WORK) */
    int all;             /* every pattern's bit */
} builder;

/* the closure of the seeds (states entered before any $): the S_SET
 * states live in b->list (ascending), and the patterns whose match is
 * reached, a bit each (a path through $ may match but take no character) */
static int closure(builder *b, const int *seeds, int n, bool at_start) {
    const nstate *nfa = b->x->nfa;
    int sp = 0, accept = 0; /* (a bit per pattern whose match is reached) */
    int lo = b->words, hi = -1; /* the key words touched */
    memset(b->seen, 0, 2 * (size_t)b->words * sizeof *b->seen);
    b->work += b->words / 8 + 1;
    b->n_list = 0;
    for (int i = 0; i < n; i++) b->stack[sp++] = seeds[i] * 2;
    while (sp) {
        int v = b->stack[--sp], q = v >> 1, post = v & 1;
        uint64_t *seen = b->seen + post * b->words;
        if (seen[q >> 6] >> (q & 63) & 1) continue;
        seen[q >> 6] |= 1ull << (q & 63);
        b->work++;
        const nstate *s = &nfa[q];
        switch (s->op) {
        case S_SET: /* (kept in the key bitset: the list comes out in order) */
            if (!post) {
                b->key[q >> 6] |= 1ull << (q & 63);
                if (q >> 6 < lo) lo = q >> 6;
                if (q >> 6 > hi) hi = q >> 6;
            }
            break;
        case S_MATCH: accept |= 1 << s->set; break;
        case S_SPLIT: b->stack[sp++] = s->out1 * 2 + post; /* fall through */
        case S_EPS: b->stack[sp++] = s->out * 2 + post; break;
        case S_BOL:
            if (at_start) b->stack[sp++] = s->out * 2 + post;
            break;
        case S_EOL: b->stack[sp++] = s->out * 2 + 1; break;
        }
    }
    for (int w = lo; w <= hi; w++) {
        for (uint64_t m = b->key[w]; m; m &= m - 1) b->list[b->n_list++] = w * 64 + __builtin_ctzll(m);
        b->key[w] = 0;
    }
    b->work += hi - lo + 1;
    return accept;
}

/* the DFA state of b->list / accept (the patterns matched, a bit each;
 * kept in d->accept until build_dfa turns it into all or not), added when
 * new (-1: dead — nothing live and not every pattern matched; -2: too
 * many; -3: out of memory); found through an open-addressed table of
 * state + 1 by hash (JP_MAX_STATES x 2 slots) */
static int state_of(builder *b, int accept) {
    jp_dfa *d = b->d;
    int n = b->n_list;
    if (!n && accept != b->all) return -1;
    uint32_t h = 2166136261u ^ accept;
    for (int i = 0; i < n; i++) h = (h ^ (uint32_t)b->list[i]) * 16777619u;
    uint32_t at = h & (2 * JP_MAX_STATES - 1);
    for (; b->slot[at]; at = (at + 1) & (2 * JP_MAX_STATES - 1)) {
        int s = b->slot[at] - 1;
        b->work++;
        if (b->hash[s] == h && d->accept[s] == accept && b->key_at[s + 1] - b->key_at[s] == (size_t)n &&
            !memcmp(b->keys + b->key_at[s], b->list, (size_t)n * sizeof *b->list))
            return s;
    }
    if (d->n_states >= JP_MAX_STATES) return -2;
    if (d->n_states + 1 >= b->cap) {
        int cap = b->cap ? 2 * b->cap : 64;
        size_t *ka = realloc(b->key_at, (size_t)(cap + 1) * sizeof *ka);
        if (ka) b->key_at = ka;
        uint32_t *hh = realloc(b->hash, (size_t)cap * sizeof *hh);
        if (hh) b->hash = hh;
        uint8_t *ac = realloc(d->accept, (size_t)cap);
        if (ac) d->accept = ac;
        if (!ka || !hh || !ac) return -3;
        if (!b->cap) b->key_at[0] = 0;
        b->cap = cap;
    }
    size_t k0 = b->key_at[d->n_states];
    if (k0 + (size_t)n > b->cap_keys) {
        size_t cap = (k0 + (size_t)n) * 2;
        int32_t *k = realloc(b->keys, cap * sizeof *k);
        if (!k) return -3;
        b->keys = k;
        b->cap_keys = cap;
    }
    memcpy(b->keys + k0, b->list, (size_t)n * sizeof *b->list);
    b->key_at[d->n_states + 1] = k0 + (size_t)n;
    b->hash[d->n_states] = h;
    d->accept[d->n_states] = (uint8_t)accept;
    b->slot[at] = d->n_states + 1;
    return d->n_states++;
}

/* subsets from the patterns' starts: states numbered as found, each
 * state's row of next filled in turn; a state accepts where every pattern
 * matches */
static int build_dfa(rx *x, jp_dfa *d, const int *starts, int n_pat) {
    builder b = {.x = x, .d = d, .words = (x->n_nfa + 63) / 64, .all = (1 << n_pat) - 1};
    int rc = -1, nc = d->n_classes, *seeds = NULL, cap_next = 0;
    /* takes[set][c]: a set's S_SET states take class c */
    uint8_t *takes = malloc((size_t)x->n_sets * nc);
    b.stack = malloc(sizeof *b.stack * (6 * (size_t)x->n_nfa + 16)); /* (seeds, then two pushes a visit of a state before or after a $) */
    b.seen = malloc(2 * (size_t)b.words * 8);
    b.list = malloc(sizeof *b.list * (size_t)x->n_nfa);
    b.key = calloc((size_t)b.words, 8);
    seeds = malloc(sizeof *seeds * (size_t)x->n_nfa);
    b.slot = calloc(2 * JP_MAX_STATES, sizeof *b.slot);
    if (!takes || !b.stack || !b.seen || !b.list || !b.key || !seeds || !b.slot) goto oom;
    for (int i = 0; i < x->n_sets; i++)
        for (int c = 0; c < nc; c++) takes[(size_t)i * nc + c] = in_set(&x->sets[i], d->bound[c]);
    d->start = state_of(&b, closure(&b, starts, n_pat, true));
    if (d->start == -3) goto oom;
    for (int s = 0; s < d->n_states; s++) {
        if (!rx_grow((void **)&d->next, &cap_next, (s + 1) * nc, sizeof *d->next)) goto oom;
        for (int c = 0; c < nc; c++) {
            int t = -1;
            if (writable(d->bound[c])) {
                int n = 0;
                for (size_t k = b.key_at[s]; k < b.key_at[s + 1]; k++) {
                    int q = b.keys[k];
                    if (takes[(size_t)x->nfa[q].set * nc + c]) seeds[n++] = x->nfa[q].out;
                }
                b.work += (long long)(b.key_at[s + 1] - b.key_at[s]);
                if (n) t = state_of(&b, closure(&b, seeds, n, false));
                if (t == -3) goto oom;
                if (t == -2) {
                    rx_fail(x, "too complex (more than %d automaton states)", JP_MAX_STATES);
                    goto out;
                }
                if (b.work > MAX_WORK || (long long)d->n_states * nc > MAX_NEXT) {
                    rx_fail(x, "too complex to compile quickly");
                    goto out;
                }
            }
            d->next[(size_t)s * nc + c] = t;
        }
    }
    for (int s = 0; s < d->n_states; s++) d->accept[s] = d->accept[s] == b.all;
    rc = 0;
    goto out;
oom:
    rx_fail(x, "out of memory");
out:
    free(takes);
    free(b.stack);
    free(b.seen);
    free(b.list);
    free(b.key);
    free(b.keys);
    free(b.key_at);
    free(b.hash);
    free(b.slot);
    free(seeds);
    return rc;
}

/* fewest[0][s]: the distance to an accepting state (backwards from them,
 * breadth first); fewest[k][s] = 1 + min over s's successors t of
 * fewest[k - 1][t] (a match k or more characters on) */
static int make_fewest(rx *x, jp_dfa *d) {
    int ns = d->n_states, nc = d->n_classes, K = d->min_len;
    if ((long)(K + 1) * ns > MAX_FEWEST)
        return rx_fail(x, "minLength %d with a pattern of %d automaton states is not supported", K, ns);
    int *cnt = calloc((size_t)ns + 1, sizeof *cnt), *from = NULL, *queue = malloc(sizeof *queue * (size_t)ns);
    d->fewest = malloc(sizeof *d->fewest * (size_t)(K + 1) * ns);
    if (!cnt || !queue || !d->fewest) goto oom;
    /* predecessors by target (CSR; a row's runs of one target counted once) */
    for (int s = 0; s < ns; s++)
        for (int c = 0, last = -1; c < nc; c++) {
            int t = d->next[(size_t)s * nc + c];
            if (t >= 0 && t != last) cnt[t + 1]++, last = t;
        }
    for (int t = 0; t < ns; t++) cnt[t + 1] += cnt[t];
    if (!(from = malloc(sizeof *from * ((size_t)cnt[ns] + 1)))) goto oom;
    for (int s = 0; s < ns; s++)
        for (int c = 0, last = -1; c < nc; c++) {
            int t = d->next[(size_t)s * nc + c];
            if (t >= 0 && t != last) from[cnt[t]++] = s, last = t;
        }
    for (int t = ns; t > 0; t--) cnt[t] = cnt[t - 1]; /* (back to row starts) */
    cnt[0] = 0;
    int32_t *f0 = d->fewest, qh = 0, qt = 0;
    for (int s = 0; s < ns; s++) {
        f0[s] = d->accept[s] ? 0 : INF;
        if (d->accept[s]) queue[qt++] = s;
    }
    while (qh < qt) {
        int t = queue[qh++];
        for (int i = cnt[t]; i < cnt[t + 1]; i++)
            if (f0[from[i]] == INF) f0[from[i]] = f0[t] + 1, queue[qt++] = from[i];
    }
    for (int k = 1; k <= K; k++) {
        const int32_t *prev = d->fewest + (size_t)(k - 1) * ns;
        int32_t *cur = d->fewest + (size_t)k * ns;
        for (int s = 0; s < ns; s++) cur[s] = INF;
        for (int t = 0; t < ns; t++)
            if (prev[t] < INF)
                for (int i = cnt[t]; i < cnt[t + 1]; i++)
                    if (prev[t] + 1 < cur[from[i]]) cur[from[i]] = prev[t] + 1;
    }
    free(cnt);
    free(from);
    free(queue);
    return 0;
oom:
    free(cnt);
    free(from);
    free(queue);
    return rx_fail(x, "out of memory");
}

void jp_free(jp_dfa *d) {
    if (!d) return;
    free(d->bound);
    free(d->next);
    free(d->accept);
    free(d->fewest);
    free(d);
}

size_t jp_bytes(const jp_dfa *d) {
    size_t ns = (size_t)d->n_states, nc = (size_t)d->n_classes;
    return sizeof *d + nc * sizeof *d->bound + ns * nc * sizeof *d->next + ns +
           ((size_t)d->min_len + 1) * ns * sizeof *d->fewest;
}

jp_dfa *jp_compile(const char *pattern, int min_len, int max_len, char *err, size_t errlen) {
    return jp_compile_all(&pattern, 1, min_len, max_len, err, errlen);
}

jp_dfa *jp_compile_all(const char *const *patterns, int n_pat, int min_len, int max_len, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    rx x = {.err = err, .errlen = errlen};
    jp_dfa *d = calloc(1, sizeof *d);
    int starts[JP_MAX_PATTERNS];
    if (!d || n_pat < 1 || n_pat > JP_MAX_PATTERNS) goto fail;
    d->min_len = min_len;
    d->max_len = max_len;
    for (int p = 0; p < n_pat; p++) { /* each pattern: any* R any* then its match */
        x.p = patterns[p];
        x.end = patterns[p] + strlen(patterns[p]);
        if ((starts[p] = rx_add_pattern(&x, p)) < 0) goto fail;
    }
    if (make_classes(&x, d) < 0 || build_dfa(&x, d, starts, n_pat) < 0) goto fail;
    if (d->start < 0) {
        rx_fail(&x, "no string matches it");
        goto fail;
    }
    if (make_fewest(&x, d) < 0) goto fail;
    if (!jp_can_finish(d, d->start, 0)) {
        rx_fail(&x, "no string of %d to %d characters matches it", min_len, max_len);
        goto fail;
    }
    goto done;
fail:
    jp_free(d);
    d = NULL;
    if (err && errlen && !err[0]) snprintf(err, errlen, "pattern: out of memory");
done:
    rx_free(&x);
    return d;
}

int jp_start(const jp_dfa *d) { return d->start; }

int jp_step(const jp_dfa *d, int state, uint32_t cp) {
    return state < 0 || cp > CP_MAX ? -1 : d->next[(size_t)state * d->n_classes + class_of(d, cp)];
}

bool jp_can_finish(const jp_dfa *d, int state, int len) {
    if (state < 0) return false;
    int need = d->min_len > len ? d->min_len - len : 0;
    int32_t f = d->fewest[(size_t)need * d->n_states + state];
    return f < INF && (long)len + f <= d->max_len;
}

bool jp_range_can_finish(const jp_dfa *d, int state, uint32_t lo, uint32_t hi, int len) {
    if (state < 0) return false;
    for (int c = class_of(d, lo); c < d->n_classes && d->bound[c] <= hi; c++)
        if (jp_can_finish(d, d->next[(size_t)state * d->n_classes + c], len + 1)) return true;
    return false;
}

bool jp_can_end(const jp_dfa *d, int state, int len) { return state >= 0 && d->accept[state] && len >= d->min_len; }
