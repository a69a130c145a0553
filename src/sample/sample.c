/* sample.c — penalties, greedy, temperature / top-k / top-p / min-p sampling
 * (see sample.h). Top-k and top-p pop candidates from a max-heap, so the cost
 * is O(vocab + kept * log vocab), not a full sort of the vocabulary. */
#include "sample/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct sampler {
    int vocab;
    int32_t *heap;   /* (vocab) candidate ids */
    int32_t *kept;   /* (vocab) ids kept, descending logit */
    float *prob;     /* (vocab) */
    float *e;        /* (vocab) e^(logit - the largest) */
};

void sample_params_default(sample_params *p) {
    p->temperature = 1.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->repetition_penalty = 1.0f;
    p->repetition_last_n = 0;
    p->presence_penalty = 0.0f;
    p->frequency_penalty = 0.0f;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void sample_rng_seed(sample_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(sample_rng *r) {
    uint64_t *s = r->s, res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return res;
}

double sample_rng_uniform(sample_rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

sampler *sampler_new(int vocab) {
    sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->vocab = vocab;
    s->heap = malloc((size_t)vocab * sizeof *s->heap);
    s->kept = malloc((size_t)vocab * sizeof *s->kept);
    s->prob = malloc((size_t)vocab * sizeof *s->prob);
    s->e = malloc((size_t)vocab * sizeof *s->e);
    if (!s->heap || !s->kept || !s->prob || !s->e) {
        sampler_free(s);
        return NULL;
    }
    return s;
}

void sampler_free(sampler *s) {
    if (!s) return;
    free(s->heap);
    free(s->kept);
    free(s->prob);
    free(s->e);
    free(s);
}

bool sample_penalties_on(const sample_params *p) {
    return (p->repetition_penalty != 1.0f && p->repetition_penalty > 0) || p->presence_penalty != 0.0f ||
           p->frequency_penalty != 0.0f;
}

/* The first index of the largest logit (NaNs never win; a NaN first logit
 * gives 0). The max in 16 independent lanes (a comparison the compiler
 * turns into vector max instructions: 11x the one-compare-a-logit loop on
 * a 152k vocabulary), then the first logit equal to it. */
int sample_argmax(const float *logits, int vocab) {
    if (vocab <= 0 || logits[0] != logits[0]) return 0;
    float lane[16], best = logits[0];
    for (int k = 0; k < 16; k++) lane[k] = best;
    int i = 0;
    for (; i + 16 <= vocab; i += 16)
        for (int k = 0; k < 16; k++) lane[k] = logits[i + k] > lane[k] ? logits[i + k] : lane[k];
    for (int k = 0; k < 16; k++) best = lane[k] > best ? lane[k] : best;
    for (; i < vocab; i++) best = logits[i] > best ? logits[i] : best;
    for (i = 0; i < vocab; i++)
        if (logits[i] == best) return i;
    return 0;
}

/* max-heap of ids by logit; ties: lower id first */
static inline int heap_less(const float *l, int32_t a, int32_t b) { return l[a] < l[b] || (l[a] == l[b] && a > b); }

static void heap_down(int32_t *h, int n, int i, const float *l) {
    for (;;) {
        int m = i, a = 2 * i + 1, b = a + 1;
        if (a < n && heap_less(l, h[m], h[a])) m = a;
        if (b < n && heap_less(l, h[m], h[b])) m = b;
        if (m == i) return;
        int32_t t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* Logits further than SAMPLE_CUT below the largest (after temperature)
 * are left out of the distribution: each weighs under e^-30 = 9e-14 of the
 * largest, all of a 262k vocabulary under 3e-8 of the mass — below float
 * rounding of the probabilities, so the distribution is the same to the
 * precision it is computed in. Without the cut a flat row's every token is
 * a candidate. */
#define SAMPLE_CUT 30.0f

static int point_mass(sampler *s, int id, const int32_t **ids, const float **probs) {
    s->kept[0] = id;
    s->prob[0] = 1.0f;
    *ids = s->kept;
    *probs = s->prob;
    return 1;
}

/* Appends to s->kept[kept..] the candidates s->heap[0..n) in descending
 * logit order (ties by id) while the rules keep them — a max-heap popped,
 * so only the kept ones (and one more) are sorted; `cum` is the mass the
 * kept ones before hold. With top-k the k best first, whose mass then
 * renormalises (as HF does, before top-p). Returns how many are kept. */
static int pop_sorted(sampler *s, const sample_params *p, const float *logits, int n, double z, int kept, double cum) {
    int32_t *h = s->heap;
    for (int i = n / 2 - 1; i >= 0; i--) heap_down(h, n, i, logits);
    if (p->top_k > 0) {
        int limit = p->top_k < n ? p->top_k : n, k = 0;
        double zk = 0;
        while (k < limit) {
            int32_t id = h[0];
            s->kept[k++] = id;
            zk += s->e[id];
            h[0] = h[--n];
            heap_down(h, n, 0, logits);
        }
        z = zk;
        n = k;
        memcpy(h, s->kept, (size_t)k * sizeof *h); /* sorted desc is a valid heap */
    }
    double top_p = p->top_p < 1.0f ? (double)p->top_p : 2.0;
    float thr = p->min_p > 0.0f ? p->min_p / (float)z : 0.0f; /* the largest's probability is 1 / z */
    while (n > 0) {
        int32_t id = h[0];
        double pr = s->e[id] / z;
        /* HF top-p keeps the smallest prefix whose mass reaches top_p; min-p
         * what is at least min_p of the largest */
        if (kept > 0 && (cum >= top_p || (float)pr < thr)) break;
        s->kept[kept] = id;
        s->prob[kept] = (float)pr;
        kept++;
        cum += pr;
        h[0] = h[--n];
        heap_down(h, n, 0, logits);
    }
    return kept;
}

/* e^x, four at a time, for x <= 0 (below -87, and NaN: e^-87, which no
 * candidate is) within 2 ulp of expf: x = n ln 2 + r, |r| <= ln 2 / 2 (n
 * by the 1.5 x 2^23 rounding trick), e^r by Cephes' degree-6 polynomial,
 * 2^n into the exponent bits. GCC vector extensions: SSE on x86-64, NEON
 * on arm64; 3x glibc's expf, a call per value. */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4f exp4_nonpos(v4f x) {
    const v4f lo = { -87.0f, -87.0f, -87.0f, -87.0f };
    v4i keep = x > lo;
    x = (v4f)(((v4i)x & keep) | ((v4i)lo & ~keep));
    v4f t = x * 1.44269504f + 12582912.0f, n = t - 12582912.0f;
    v4f r = x - n * 0.693359375f + n * 2.12194440e-4f;
    v4f q = ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r + 4.1665795894e-2f) * r +
             1.6666665459e-1f) * r + 5.0000001201e-1f;
    v4i bits = ((v4i)t - 0x4B400000 + 127) << 23;
    return (q * r * r + r + 1.0f) * (v4f)bits;
}

/* The sum of p[0..n): float lanes over 1,024 values at a time, then double */
static double sum_floats(const float *p, int n) {
    double z = 0;
    int i = 0;
    while (i + 4 <= n) {
        v4f acc = { 0, 0, 0, 0 };
        int end = i + 1024 < n ? i + 1024 : n;
        for (; i + 4 <= end; i += 4) {
            v4f v;
            memcpy(&v, p + i, sizeof v);
            acc += v;
        }
        z += (double)acc[0] + acc[1] + acc[2] + acc[3];
    }
    for (; i < n; i++) z += p[i];
    return z;
}

/* e[i] = e^(l[i] - mx) for every i < n; returns their sum */
static double weigh(const float *l, float *e, int n, float mx) {
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        v4f x, v;
        memcpy(&x, l + i, sizeof x);
        v = exp4_nonpos(x - mx);
        memcpy(e + i, &v, sizeof v);
    }
    for (; i < n; i++) e[i] = exp4_nonpos((v4f){ l[i] - mx, 0, 0, 0 })[0];
    return sum_floats(e, n);
}

/* The weights e[i] of the logits l[i] >= lim: their sum, and how many (*count) */
static double weight_above(const float *l, const float *e, int n, float lim, int *count) {
    double z = 0;
    int i = 0, c = 0;
    const v4f vlim = { lim, lim, lim, lim };
    while (i + 4 <= n) {
        v4f acc = { 0, 0, 0, 0 };
        v4i cnt = { 0, 0, 0, 0 };
        int end = i + 1024 < n ? i + 1024 : n;
        for (; i + 4 <= end; i += 4) {
            v4f x, v;
            memcpy(&x, l + i, sizeof x);
            memcpy(&v, e + i, sizeof v);
            v4i in = x >= vlim;
            acc += (v4f)((v4i)v & in);
            cnt -= in;
        }
        z += (double)acc[0] + acc[1] + acc[2] + acc[3];
        c += cnt[0] + cnt[1] + cnt[2] + cnt[3];
    }
    for (; i < n; i++)
        if (l[i] >= lim) z += e[i], c++;
    *count = c;
    return z;
}

/* Top-k / top-p keep a prefix of the descending order: logit bounds
 * mx - hi <= mx - lo (*lo 0: none below which all are kept) where the rule
 * holds with every logit >= mx - hi (top_k of them; else top_p of the mass
 * z) and fails with those >= mx - lo — doubling d from 1, then halving while
 * more than 256 lie between (masked vector sums, no sort). */
static void prefix_bounds(const float *logits, const float *e, int V, float mx, double z, const sample_params *p,
                          float *lo_out, float *hi_out) {
    double want = p->top_k <= 0 ? p->top_p * z * (1 + 1e-6) : 2 * z; /* (a margin for rounding) */
    int c, c_hi = 0;
    double m, m_lo = 0;
#define HOLDS(d) ((m = weight_above(logits, e, V, mx - (d), &c)) >= want || (p->top_k > 0 && c >= p->top_k))
    float lo = 0.0f, hi = 1.0f;
    while (hi < SAMPLE_CUT && !HOLDS(hi)) lo = hi, m_lo = m, hi = 2 * hi < SAMPLE_CUT ? 2 * hi : SAMPLE_CUT;
    if (hi >= SAMPLE_CUT) hi = SAMPLE_CUT;
    weight_above(logits, e, V, mx - hi, &c_hi);
    int c_lo = 0;
    if (lo > 0) weight_above(logits, e, V, mx - lo, &c_lo);
    while (c_hi - c_lo > 256 && hi - lo > 1e-5f * (1.0f + hi)) {
        float mid = (lo + hi) / 2;
        if (HOLDS(mid)) hi = mid, c_hi = c;
        else lo = mid, c_lo = c, m_lo = m;
    }
#undef HOLDS
    if (p->top_k <= 0 && m_lo >= p->top_p * z * (1 - 1e-6)) lo = 0; /* too near top_p to be sure: all sorted */
    *lo_out = lo;
    *hi_out = hi;
}

int sample_dist(sampler *s, const sample_params *p, float *logits, const int32_t **ids, const float **probs) {
    int V = s->vocab;
    float inv_t = 1.0f / p->temperature, lane[16], mx = -INFINITY;
    for (int k = 0; k < 16; k++) lane[k] = -INFINITY;
    int i = 0;
    for (; i + 16 <= V; i += 16) /* temperature, and the largest (NaN never): vector instructions */
        for (int k = 0; k < 16; k++) {
            float x = logits[i + k] * inv_t;
            logits[i + k] = x;
            lane[k] = x > lane[k] ? x : lane[k];
        }
    for (; i < V; i++) {
        logits[i] *= inv_t;
        mx = logits[i] > mx ? logits[i] : mx;
    }
    for (int k = 0; k < 16; k++) mx = lane[k] > mx ? lane[k] : mx;
    if (mx == -INFINITY || mx == INFINITY) /* nothing finite, or an infinite logit: the argmax */
        return point_mass(s, sample_argmax(logits, V), ids, probs);
    /* every weight e^(l - max) and their sum (NaN and -inf weigh e^-87 and
     * are no candidates) */
    double z = weigh(logits, s->e, V, mx);
    float cut = mx - SAMPLE_CUT;
    const float *e = s->e;
    int32_t *cand = s->heap;
    int n = 0, kept;
    int32_t *ids_out = s->kept;
    float *pr = s->prob;
    if (p->top_k > 0 || p->top_p < 1.0f) {
        float lo, hi;
        prefix_bounds(logits, e, V, mx, z, p, &lo, &hi);
        float llo = mx - lo, lhi = mx - hi;
        if (p->top_k > 0) { /* the k best are among those >= lhi: their heap */
            for (i = 0; i < V; i++)
                if (logits[i] >= lhi) cand[n++] = i;
            kept = pop_sorted(s, p, logits, n, z, 0, 0.0);
        } else { /* those >= llo all kept (id order), then the band's best */
            float minw = p->min_p > 0.0f ? p->min_p < 1.0f ? p->min_p : 1.0f : 0.0f; /* min-p: e^(l - max) >= min_p */
            double cum = 0;
            kept = 0;
            for (i = 0; i < V; i++)
                if (logits[i] >= llo && lo > 0) {
                    if (e[i] < minw) continue;
                    ids_out[kept] = i;
                    pr[kept++] = (float)(e[i] / z);
                    cum += e[i] / z;
                } else if (logits[i] >= lhi)
                    cand[n++] = i;
            kept = pop_sorted(s, p, logits, n, z, kept, cum);
        }
    } else if (p->min_p > 0.0f) { /* min-p alone: e^(l - max) >= min_p, id order */
        for (i = 0; i < V; i++)
            if (logits[i] >= cut && e[i] >= p->min_p) {
                ids_out[n] = i;
                pr[n++] = e[i];
            }
        kept = n;
    } else { /* every candidate, id order */
        for (i = 0; i < V; i++)
            if (logits[i] >= cut) {
                ids_out[n] = i;
                pr[n++] = e[i];
            }
        kept = n;
    }
    float inv = (float)(1.0 / sum_floats(s->prob, kept));
    for (i = 0; i < kept; i++) s->prob[i] *= inv;
    *ids = s->kept;
    *probs = s->prob;
    return kept;
}

/* The mass of probs[0..n) without the excluded id, and where that id is
 * (*ix, -1: absent) */
static double mass_without(const int32_t *ids, const float *probs, int n, int exclude, int *ix) {
    *ix = -1;
    for (int i = 0; exclude >= 0 && i < n && *ix < 0; i++)
        if (ids[i] == exclude) *ix = i;
    return sum_floats(probs, n) - (*ix >= 0 ? probs[*ix] : 0.0);
}

/* the id at u of the way through the mass tot (ix left out) */
static int draw_at(const int32_t *ids, const float *probs, int n, int ix, double tot, double u01) {
    double u = u01 * tot, acc = 0;
    int i = 0;
    for (; i + 64 <= n; i += 64) { /* whole blocks of 64 while u lies past them */
        double b = sum_floats(probs + i, 64) - (ix >= i && ix < i + 64 ? probs[ix] : 0.0);
        if (u < acc + b) break;
        acc += b;
    }
    for (; i < n; i++) {
        if (i == ix) continue;
        acc += probs[i];
        if (u < acc) return ids[i];
    }
    return ids[ix == n - 1 ? n - 2 : n - 1]; /* (rounding left u at the end) */
}

int sample_draw(const int32_t *ids, const float *probs, int n, int exclude, sample_rng *rng) {
    int ix;
    double tot = mass_without(ids, probs, n, exclude, &ix);
    return tot <= 0 ? ids[0] : draw_at(ids, probs, n, ix, tot, sample_rng_uniform(rng));
}

int sample_draw_u(const int32_t *ids, const float *probs, int n, double u) {
    int ix;
    double tot = mass_without(ids, probs, n, -1, &ix);
    return tot <= 0 ? ids[0] : draw_at(ids, probs, n, ix, tot, u);
}

int sample_choose(sampler *s, const sample_params *p, float *logits, sample_rng *rng) {
    if (p->temperature <= 0.0f) return sample_argmax(logits, s->vocab);
    const int32_t *ids;
    const float *probs;
    int n = sample_dist(s, p, logits, &ids, &probs);
    return sample_draw(ids, probs, n, -1, rng);
}

int sample_spec_accept(const int32_t *ids, const float *probs, int n, int d, sample_rng *rng) {
    float pd = 0.f;
    for (int i = 0; i < n; i++)
        if (ids[i] == d) pd = probs[i];
    if (pd > 0.f && sample_rng_uniform(rng) < pd) return d;
    return sample_draw(ids, probs, n, d, rng);
}
