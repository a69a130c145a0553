/* test_json_pattern.c — string patterns (json_pattern.h) against PCRE2 as
 * the reference matcher: every text over a small alphabet up to a length
 * gets the same verdict, every prefix from which some text over it still
 * matches is one the DFA can finish, random walks over the characters the
 * DFA allows never get stuck and end in matches; and the patterns refused
 * at compile, each with a message; and through the JSON recognizer, byte
 * by byte (escapes, UTF-8 cut anywhere), walks that end in documents whose
 * decoded string PCRE2 matches. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "sample/json_constraint.h"
#include "sample/json_pattern.h"
#include "test.h"

typedef struct {
    const char *pattern;
    int min_len, max_len;
    const char *alphabet; /* UTF-8 characters the texts are made of */
    int depth;            /* the longest text tried exhaustively */
} pcase;

/* PCRE2 reads these as ECMA-262 does over the alphabets used: no \u, no \s past ASCII, no '.' against \r */
static const pcase CASES[] = {
    {"^[a-z]+\\d{2,3}$", 0, 1000, "a1-", 7},
    {"cat|dog", 0, 1000, "catdo", 6},
    {"^(ab)*$", 0, 1000, "ab", 9},
    {"^\\d{3}-\\d{4}$", 0, 1000, "1-a", 9},
    {"^[A-Z]{2,}[0-9]?$", 0, 1000, "A0b", 7},
    {"^[^aeiou]*$", 0, 1000, "ae b", 6},
    {"a.c", 0, 1000, "abc\n", 6},
    {"^x{2}y{0,2}z?$", 0, 1000, "xyz", 7},
    {"^(a|ab)(c|bcd)(d*)$", 0, 1000, "abcd", 7},
    {"\xC3\xA9+|\xC3\xBC", 0, 1000, "\xC3\xA9\xC3\xBC" "a", 5},
    {"^[\xC3\xA0-\xC3\xBF]{1,3}$", 0, 1000, "\xC3\xA0\xC3\xBF" "a\xE2\x82\xAC", 5},
    {"\\$\\{[a-z]+\\}", 0, 1000, "${a}", 6},
    {"^[a-z]*$", 2, 4, "ab1", 6},
    {"^(ab)+$", 3, 7, "ab", 9},
    {"x|yyy", 4, 5, "xy", 7},
    {"^(a?){3}b$", 0, 1000, "ab", 7},
    {"(a*)*b", 0, 1000, "ab", 8},
    {"^$", 0, 1000, "a", 3},
    {"a$|^b", 0, 1000, "ab", 6},
    {"^\\s\\S\\W\\w$", 0, 1000, " a!\t", 5},
    {"^(?:[0-9]{1,3}\\.){2}[0-9]{1,3}$", 0, 1000, "1.", 9},
    {"^(?<year>\\d{2})-\\d$", 0, 1000, "1-", 7},
    {"[.]\\.\\x41\\u0042", 0, 1000, ".AB", 6},
    {"^[a-c-]{2}$|^\\t", 0, 1000, "a-d\t", 5},
    {"^a{2,}?b??$", 0, 1000, "ab", 6},
    {"^(a|b|c|d|e)+f$", 3, 1000, "aef", 6},
};

static pcre2_code *ref_compile(const char *pattern) {
    int rc;
    PCRE2_SIZE at;
    return pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_DOLLAR_ENDONLY | PCRE2_ALT_BSUX, &rc, &at,
                         NULL);
}

typedef struct {
    const pcase *c;
    pcre2_code *re;
    pcre2_match_data *md;
    jp_dfa *d;
    const char **chars; /* the alphabet's characters */
    int n_chars;
    char text[256];
    int bytes;
    long texts, wrong_verdict, wrong_finish;
} walk;

static bool ref_matches(walk *w, int len) {
    return len >= w->c->min_len && len <= w->c->max_len &&
           pcre2_match(w->re, (PCRE2_SPTR)w->text, (PCRE2_SIZE)w->bytes, 0, 0, w->md, NULL) >= 0;
}

static int char_bytes(const char *p) {
    uint8_t c = (uint8_t)*p;
    return c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
}

static uint32_t char_cp(const char *p) {
    int n = char_bytes(p);
    uint32_t cp = n == 1 ? (uint8_t)*p : (uint8_t)*p & (0x7F >> n);
    for (int i = 1; i < n; i++) cp = cp << 6 | ((uint8_t)p[i] & 0x3F);
    return cp;
}

/* every text extending w->text (len characters, DFA state st) up to
 * the depth: verdicts compared; returns whether some extension matches */
static bool exhaust(walk *w, int st, int len) {
    w->texts++;
    bool here = ref_matches(w, len), any = here;
    bool dfa = jp_can_end(w->d, st, len) && len <= w->c->max_len;
    if (dfa != here && w->wrong_verdict++ < 3)
        CHECK_MSG(0, "pattern %s: '%.*s' %s by PCRE2, %s by the DFA", w->c->pattern, w->bytes, w->text,
                  here ? "matched" : "refused", dfa ? "matched" : "refused");
    if (len < w->c->depth)
        for (int i = 0; i < w->n_chars; i++) {
            int n = char_bytes(w->chars[i]), saved = w->bytes;
            memcpy(w->text + w->bytes, w->chars[i], (size_t)n);
            w->bytes += n;
            any |= exhaust(w, st < 0 ? -1 : jp_step(w->d, st, char_cp(w->chars[i])), len + 1);
            w->bytes = saved;
        }
    if (any && !jp_can_finish(w->d, st, len) && w->wrong_finish++ < 3)
        CHECK_MSG(0, "pattern %s: '%.*s' can still match but the DFA says it cannot", w->c->pattern, w->bytes, w->text);
    return any;
}

static bool walk_setup(walk *w, const pcase *c) {
    char err[200];
    memset(w, 0, sizeof *w);
    w->c = c;
    w->re = ref_compile(c->pattern);
    CHECK_MSG(w->re != NULL, "PCRE2 refused %s", c->pattern);
    w->d = jp_compile(c->pattern, c->min_len, c->max_len, err, sizeof err);
    CHECK_MSG(w->d != NULL, "pattern %s: %s", c->pattern, err);
    if (!w->re || !w->d) return false;
    w->md = pcre2_match_data_create_from_pattern(w->re, NULL);
    static const char *chars[16];
    for (const char *p = c->alphabet; *p; p += char_bytes(p)) chars[w->n_chars++] = p;
    w->chars = chars;
    return true;
}

static void walk_free(walk *w) {
    pcre2_match_data_free(w->md);
    pcre2_code_free(w->re);
    jp_free(w->d);
}

TEST(test_json_pattern_matches_pcre2) {
    long texts = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        walk w;
        if (walk_setup(&w, &CASES[i])) {
            exhaust(&w, jp_start(w.d), 0);
            texts += w.texts;
        }
        walk_free(&w);
    }
    printf("    %ld texts over %zu patterns: the same verdicts as PCRE2\n", texts, sizeof CASES / sizeof CASES[0]);
}

/* a random pattern over a, b, c, 1: literals, classes, '.', \d, groups,
 * alternation, quantifiers (lazy ones too) and anchors, depth-bounded */
static void random_pattern(unsigned *rng, char *out, size_t cap, int depth) {
#define RND(n) ((*rng = *rng * 1664525u + 1013904223u) >> 16) % (n)
    int parts = 1 + (int)RND(3);
    for (int i = 0; i < parts; i++) {
        size_t at = strlen(out);
        if (at + 24 >= cap) return;
        switch (RND(depth > 0 ? 11 : 8)) {
        case 0: case 1: strcat(out, (const char *[]){"a", "b", "c", "1"}[RND(4)]); break;
        case 2: strcat(out, (const char *[]){"[ab]", "[^a]", "[a-c]", "[1b]"}[RND(4)]); break;
        case 3: strcat(out, "."); break;
        case 4: strcat(out, "\\d"); break;
        case 5: if (at == 0) strcat(out, "^"); else strcat(out, "b"); break;
        case 6: if (i == parts - 1 && depth < 2) strcat(out, "$"); else strcat(out, "c"); break;
        case 7: strcat(out, "a"); break;
        default: /* a group, maybe with an alternation */
            strcat(out, RND(2) ? "(" : "(?:");
            random_pattern(rng, out, cap, depth - 1);
            if (RND(2)) strcat(out, "|"), random_pattern(rng, out, cap, depth - 1);
            strcat(out, ")");
        }
        const char *q[] = {"", "", "", "*", "+", "?", "{2}", "{1,2}", "{0,3}", "{2,}", "*?", "+?"};
        char last = out[strlen(out) - 1];
        if (last != '^' && last != '$' && last != '|' && strlen(out) + 6 < cap) strcat(out, q[RND(12)]);
    }
#undef RND
}

/* 1,000 random patterns against PCRE2: every text over a, b, c, 1 up to 5
 * characters judged alike, every prefix that can still match finishable. */
TEST(test_json_pattern_random_patterns_match_pcre2) {
    unsigned rng = 2024;
    int compiled = 0, refused = 0;
    long texts = 0;
    for (int i = 0; i < 1000; i++) {
        char pat[256] = "";
        random_pattern(&rng, pat, sizeof pat, 1 + i % 3);
        pcase c = {pat, 0, 1000, "abc1", 5};
        char err[200];
        jp_dfa *d = jp_compile(pat, 0, 1000, err, sizeof err);
        if (!d) { /* (only for the refusals the header names) */
            CHECK_MSG(strstr(err, "too complex") || strstr(err, "no string"), "pattern %s refused: %s", pat, err);
            refused++;
            continue;
        }
        jp_free(d);
        walk w;
        if (walk_setup(&w, &c)) {
            exhaust(&w, jp_start(w.d), 0);
            texts += w.texts;
            compiled++;
        }
        walk_free(&w);
    }
    printf("    1000 random patterns: %d compiled (%ld texts judged as PCRE2 does), %d refused\n", compiled, texts, refused);
    CHECK(compiled > 900);
}

/* Random walks: a character only where the DFA can still finish; each walk
 * ends (by chance, where it may) in a text PCRE2 matches, never stuck. */
TEST(test_json_pattern_walks_never_stuck) {
    static const pcase MORE[] = {
        {"^(?:\\+?1[-. ]?)?\\(?\\d{3}\\)?[-. ]?\\d{3}[-. ]?\\d{4}$", 0, 1000, "1+-. ()5", 0},
        {"^\\w+@\\w+\\.com$", 0, 1000, "a_@.com", 0},
        {"^[a-z]{3,8}$", 4, 6, "az", 0},
        {"^(ab|cde)*$", 5, 9, "abcde", 0},
        {"[0-9]{4}", 6, 8, "09x", 0},
        {"^[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9.-]{1,255}\\.[A-Za-z]{2,63}$", 0, 1000, "a.@-z", 0}, /* (a DFA of thousands of states) */
    };
    unsigned rng = 11;
    int stuck = 0, ended = 0, runs = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0] + sizeof MORE / sizeof MORE[0]; i++) {
        const pcase *c = i < sizeof CASES / sizeof CASES[0] ? &CASES[i] : &MORE[i - sizeof CASES / sizeof CASES[0]];
        walk w;
        if (!walk_setup(&w, c)) {
            walk_free(&w);
            continue;
        }
        for (int run = 0; run < 200; run++, runs++) {
            int st = jp_start(w.d), len = 0;
            w.bytes = 0;
            for (; len < 60; len++) {
                rng = rng * 1664525u + 1013904223u;
                if (jp_can_end(w.d, st, len) && (rng >> 16) % 4 == 0) break;
                int ok[16], n = 0;
                for (int k = 0; k < w.n_chars; k++)
                    if (jp_can_finish(w.d, jp_step(w.d, st, char_cp(w.chars[k])), len + 1)) ok[n++] = k;
                if (!n) {
                    if (!jp_can_end(w.d, st, len) && stuck++ < 3)
                        CHECK_MSG(0, "pattern %s: '%.*s' has no next character", c->pattern, w.bytes, w.text);
                    break;
                }
                const char *ch = w.chars[ok[(rng >> 8) % (unsigned)n]];
                memcpy(w.text + w.bytes, ch, (size_t)char_bytes(ch));
                w.bytes += char_bytes(ch);
                st = jp_step(w.d, st, char_cp(ch));
            }
            if (jp_can_end(w.d, st, len)) {
                ended++;
                CHECK_MSG(ref_matches(&w, len), "pattern %s: the walk ended in '%.*s', which PCRE2 refuses", c->pattern,
                          w.bytes, w.text);
            }
        }
        walk_free(&w);
    }
    CHECK_EQ_INT(stuck, 0);
    CHECK(ended > runs / 2);
    printf("    %d of %d walks ended in a match, none stuck\n", ended, runs);
}

/* Patterns together (jp_compile_all): a text matches where PCRE2 matches
 * it with each; every text over a small alphabet up to 7 characters, and a
 * text that can still match is one the DFA can finish. */
TEST(test_json_pattern_intersections_match_pcre2) {
    static const struct { const char *a, *b, *alphabet; } P[] = {
        {"^[0-9]{4}-(?:0[1-9]|1[0-2])$", "^20", "0129-", },
        {"^[a-z]+$", "ab|ba", "abz1"},
        {"a", "b", "abc"},
        {"^(ab)*$", "^a(ba)*b$|^$", "ab"},
        {"^[ab]{2,4}$", "(a|b)b$", "ab"},
    };
    long texts = 0;
    int wrong = 0;
    for (size_t i = 0; i < sizeof P / sizeof P[0]; i++) {
        const char *both[2] = {P[i].a, P[i].b};
        char err[200];
        jp_dfa *d = jp_compile_all(both, 2, 0, 1000, err, sizeof err);
        CHECK_MSG(d != NULL, "%s & %s: %s", P[i].a, P[i].b, err);
        pcre2_code *ra = ref_compile(P[i].a), *rb = ref_compile(P[i].b);
        pcre2_match_data *md = ra ? pcre2_match_data_create_from_pattern(ra, NULL) : NULL;
        if (!d || !ra || !rb || !md) goto next;
        const char *chars[8];
        int nc = 0;
        for (const char *c = P[i].alphabet; *c; c++) chars[nc++] = c;
        for (long code = 0;; code++) { /* every text of length 0..7: code in base nc, its length by ranges */
            char t[8];
            int len = 0;
            long rest = code, span = 1, base = 0;
            while (rest >= base + span) base += span, span *= nc, len++;
            if (len > 7) break;
            rest -= base;
            for (int k = 0; k < len; k++) t[k] = *chars[rest % nc], rest /= nc;
            int st = jp_start(d);
            for (int k = 0; k < len && st >= 0; k++) st = jp_step(d, st, (uint8_t)t[k]);
            bool want = pcre2_match(ra, (PCRE2_SPTR)t, (PCRE2_SIZE)len, 0, 0, md, NULL) >= 0 &&
                        pcre2_match(rb, (PCRE2_SPTR)t, (PCRE2_SIZE)len, 0, 0, md, NULL) >= 0;
            if (jp_can_end(d, st, len) != want && wrong++ < 3)
                CHECK_MSG(0, "%s & %s: '%.*s' %s by PCRE2", P[i].a, P[i].b, len, t, want ? "matched" : "refused");
            if (want) /* every prefix of a match can finish */
                for (int k = 0, s2 = jp_start(d); k <= len; k++) {
                    if (!jp_can_finish(d, s2, k) && wrong++ < 3)
                        CHECK_MSG(0, "%s & %s: prefix '%.*s' of a match cannot finish", P[i].a, P[i].b, k, t);
                    if (k < len) s2 = jp_step(d, s2, (uint8_t)t[k]);
                }
            texts++;
        }
    next:
        pcre2_match_data_free(md);
        pcre2_code_free(ra);
        pcre2_code_free(rb);
        jp_free(d);
    }
    CHECK_EQ_INT(wrong, 0);
    printf("    %ld texts against pairs of patterns: the same verdicts as PCRE2 with both\n", texts);
}

TEST(test_json_pattern_refused) {
    static const struct { const char *pattern; int min_len, max_len; const char *why; } BAD[] = {
        {"(?=a)b", 0, 100, "lookahead"},
        {"(?<!a)b", 0, 100, "lookbehind"},
        {"(a)\\1", 0, 100, "backreference"},
        {"\\bword\\b", 0, 100, "word boundar"},
        {"\\p{L}+", 0, 100, "property"},
        {"a{2,1}", 0, 100, "out of order"},
        {"a{1001}", 0, 2000, "above"},
        {"(ab", 0, 100, "unclosed"},
        {"ab)", 0, 100, "unmatched"},
        {"[a-", 0, 100, "unclosed"},
        {"[z-a]", 0, 100, "out of order"},
        {"*a", 0, 100, "nothing to repeat"},
        {"a**", 0, 100, "nothing to repeat"},
        {"^*", 0, 100, "nothing to repeat"},
        {"a\\", 0, 100, "ends with"},
        {"\\q", 0, 100, "not supported"},
        {"a$b", 0, 100, "no string"},
        {"[]", 0, 100, "no string"},
        {"^[a-z]{3}$", 0, 2, "no string of 0 to 2"},
        {"^[a-z]{3}$", 4, 9, "no string of 4 to 9"},
        {"^(ab)+$", 3, 3, "no string of 3 to 3"},
        {"(a|b)*a(a|b){14}", 0, 100, "too complex (more than"},
        {"(?:\\w|\\d|\\s|.){0,999}[a-c]{0,999}", 0, 5000, "too complex to compile quickly"},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        char err[200];
        jp_dfa *d = jp_compile(BAD[i].pattern, BAD[i].min_len, BAD[i].max_len, err, sizeof err);
        CHECK_MSG(d == NULL, "pattern %s compiled; expected a refusal (%s)", BAD[i].pattern, BAD[i].why);
        CHECK_MSG(d || strstr(err, BAD[i].why), "pattern %s: message '%s' does not say '%s'", BAD[i].pattern, err, BAD[i].why);
        jp_free(d);
    }
}

/* The recognizer over a patterned string value, a byte at a time from an
 * alphabet of ASCII, escapes' letters and UTF-8 bytes: never stuck, and
 * every whole document's string (decoded by jansson) matches by PCRE2. */
TEST(test_json_pattern_recognizer_walks) {
    static const struct { const char *pattern; int min_len, max_len; } P[] = {
        {"^[a-z\xC3\xA0-\xC3\xBF]+-\\d{2}$", 0, 9},
        {"^a[/\"]\\n\\\\$", 0, 100},
        {"\xE2\x82\xAC|\\t\\.", 2, 6},
        {"^(?:[0-9a-f]{2}:){2}[0-9a-f]{2}$", 0, 100},
        {"^\\S+@\\S+$", 3, 12},
    };
    const char alpha[] = "az09-.:@/\"\\ntb\xC3\xA0\xA9\xBF\xE2\x82\xAC";
    unsigned rng = 5;
    int stuck = 0, ended = 0, runs = 0;
    for (size_t i = 0; i < sizeof P / sizeof P[0]; i++) {
        json_t *schema = json_pack("{s:s, s:s, s:i, s:i}", "type", "string", "pattern", P[i].pattern, "minLength",
                                   P[i].min_len, "maxLength", P[i].max_len);
        char err[256];
        json_constraint *c = jc_compile(schema, err, sizeof err);
        json_decref(schema);
        CHECK_MSG(c != NULL, "pattern %s: %s", P[i].pattern, err);
        pcre2_code *re = ref_compile(P[i].pattern);
        CHECK(re != NULL);
        if (!c || !re) {
            jc_free(c);
            pcre2_code_free(re);
            continue;
        }
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        for (int run = 0; run < 400; run++, runs++) {
            jc_state st, t;
            char text[512] = "\"";
            int n = 1;
            jc_start(&st, c, 0);
            CHECK(jc_feed(&st, (const uint8_t *)text, 1));
            while (n < 500 && !jc_finished(&st)) {
                uint8_t ok[sizeof alpha];
                int k = 0;
                for (const char *a = alpha; *a; a++) {
                    jc_copy(&t, &st);
                    if (jc_feed(&t, (const uint8_t *)a, 1)) ok[k++] = (uint8_t)*a;
                }
                if (!k) {
                    if (stuck++ < 3) CHECK_MSG(0, "pattern %s: prefix %.*s has no next byte", P[i].pattern, n, text);
                    break;
                }
                rng = rng * 1664525u + 1013904223u;
                text[n] = (char)ok[(rng >> 8) % (unsigned)k];
                CHECK(jc_feed(&st, (const uint8_t *)text + n, 1));
                n++;
            }
            if (!jc_finished(&st)) continue;
            ended++;
            json_t *v = json_loadb(text, (size_t)n, JSON_DECODE_ANY, NULL);
            const char *sv = json_string_value(v);
            size_t bytes = sv ? json_string_length(v) : 0, chars = 0;
            for (size_t b = 0; b < bytes; b++) chars += ((uint8_t)sv[b] & 0xC0) != 0x80;
            CHECK_MSG(sv && chars >= (size_t)P[i].min_len && chars <= (size_t)P[i].max_len &&
                          pcre2_match(re, (PCRE2_SPTR)sv, bytes, 0, 0, md, NULL) >= 0,
                      "pattern %s: document %.*s accepted, its string refused by PCRE2 or the lengths", P[i].pattern, n, text);
            json_decref(v);
        }
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        jc_free(c);
    }
    CHECK_EQ_INT(stuck, 0);
    CHECK(ended > runs / 2);
    printf("    %d of %d byte walks ended in a document, none stuck\n", ended, runs);
}
