/* test_json_constraint.c — the JSON constraint: documents accepted or
 * refused per schema (every prefix of an accepted one accepted, whole only
 * at its end), integer ranges against a search of every value and prefix, the any-object recognizer against jansson's parser on
 * mutated documents, schemas refused at compile, and the token mask against
 * feeding every token alone on the tinycoder tokenizer. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sample/json_constraint.h"
#include "sample/token_mask.h"
#include "test.h"
#include "tok/tok.h"

static json_constraint *compile_str(const char *schema) {
    char err[256];
    json_t *j = schema ? json_loads(schema, 0, NULL) : NULL;
    json_constraint *c = jc_compile(j, err, sizeof err);
    CHECK_MSG(c != NULL, "compile %s: %s", schema ? schema : "(json_object)", err);
    json_decref(j);
    return c;
}

/* 1: the whole text is accepted and may end there; 0: refused or unfinished.
 * Checks on the way that each prefix of an accepted text is accepted. */
static int verdict_flags(const json_constraint *c, const char *text, int flags, bool *can_end_early) {
    jc_state s;
    jc_start(&s, c, flags);
    size_t n = strlen(text);
    *can_end_early = false;
    for (size_t i = 0; i < n; i++) {
        if (!jc_feed(&s, (const uint8_t *)text + i, 1)) return 0;
        if (i + 1 < n && jc_finished(&s)) *can_end_early = true;
    }
    return jc_can_end(&s) ? 1 : 0;
}

static int verdict_think(const json_constraint *c, const char *text, bool think, bool *can_end_early) {
    return verdict_flags(c, text, think ? JC_THINK : 0, can_end_early);
}

static int verdict(const json_constraint *c, const char *text, bool *can_end_early) {
    return verdict_flags(c, text, 0, can_end_early);
}

static void expect(const char *schema, const char *text, int want) {
    json_constraint *c = compile_str(schema);
    if (!c) return;
    bool early;
    int got = verdict(c, text, &early);
    CHECK_MSG(got == want, "schema %s, text %s: %s, expected %s", schema ? schema : "(json_object)", text,
              got ? "accepted" : "refused", want ? "accepted" : "refused");
    CHECK_MSG(!want || !early, "schema %s, text %s: finished before its end", schema ? schema : "(json_object)", text);
    jc_free(c);
}

TEST(test_json_constraint_object_mode) {
    expect(NULL, "{}", 1);
    expect(NULL, " {\"a\": [1, -2.5e-3, 0, \"x\\u00e9\\n\", true, false, null, {}, []]}", 1);
    expect(NULL, "{\"caf\xC3\xA9\": \"\xE2\x82\xAC \xF0\x9F\x98\x80\"}", 1);
    expect(NULL, "[1]", 0);              /* json_object: the root is an object */
    expect(NULL, "\"a\"", 0);
    expect(NULL, "{\"a\": 01}", 0);      /* leading zero */
    expect(NULL, "{\"a\": 1.}", 0);
    expect(NULL, "{\"a\": .5}", 0);
    expect(NULL, "{\"a\": 1,}", 0);      /* trailing comma */
    expect(NULL, "{\"a\" 1}", 0);
    expect(NULL, "{'a': 1}", 0);
    expect(NULL, "{\"a\": tru}", 0);
    expect(NULL, "{\"a\": \"\x01\"}", 0); /* raw control character */
    expect(NULL, "{\"a\": \"\\x\"}", 0);  /* bad escape */
    expect(NULL, "{\"a\": \"\xC0\xAF\"}", 0); /* overlong UTF-8 */
    expect(NULL, "{\"a\": \"\xED\xA0\x80\"}", 0); /* a surrogate in UTF-8 */
    expect(NULL, "{\"a\": \"\xE2\x82\"}", 0);     /* cut character */
    expect(NULL, "{\"a\": 1", 0);        /* unfinished */
    expect(NULL, "{} ", 0);              /* nothing after the document */
    expect(NULL, "{}{}", 0);
    /* whitespace: one newline per run, 1 + JC_INDENT per level of nesting */
    expect(NULL, " {\n    \"a\": [\n        1,\n        2\n    ]\n}", 1);
    expect(NULL, "{\"a\":\t1}", 1);
    expect(NULL, "  {}", 0);
    expect(NULL, "{\n\n\"a\": 1}", 0);
    char ws[200];
    snprintf(ws, sizeof ws, "{\"a\": [%*s1]}", 1 + 2 * JC_INDENT, "");
    expect(NULL, ws, 1);
    snprintf(ws, sizeof ws, "{\"a\": [%*s1]}", 2 + 2 * JC_INDENT, "");
    expect(NULL, ws, 0);
    expect(NULL, "{\"a\": 1\r}", 0);
    char deep[256] = "{\"a\":";
    for (int i = 1; i < JC_MAX_DEPTH; i++) strcat(deep, "[");
    expect(NULL, deep, 0); /* unfinished, but accepted so far: */
    json_constraint *c = compile_str(NULL);
    jc_state s;
    jc_start(&s, c, 0);
    CHECK(jc_feed(&s, (const uint8_t *)deep, strlen(deep)));
    CHECK(!jc_feed(&s, (const uint8_t *)"[", 1)); /* one more would pass JC_MAX_DEPTH */
    jc_free(c);
}

/* a reasoning model's <think> block before the document, when allowed */
TEST(test_json_constraint_think) {
    json_constraint *c = compile_str(NULL);
    if (!c) return;
    bool early;
    const char *ok[] = { "<think>plan: an object </thin> <b>\n</think>\n\n{\"a\": 1}", "{}", "<think></think>{}",
                         "<think>x</think>    {}" };
    const char *no[] = { "<think>x</think>", "<thinking>x</think>{}", "<think>x</think>     {}", "<think>x</think>[1]",
                         " <think>x</think>{}", "<think>x</think>{} " };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        CHECK_MSG(verdict_think(c, ok[i], true, &early) == 1, "think: '%s' refused", ok[i]);
        CHECK_MSG(i == 1 || verdict(c, ok[i], &early) == 0, "'%s' accepted without the think allowance", ok[i]);
    }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        CHECK_MSG(verdict_think(c, no[i], true, &early) == 0, "think: '%s' accepted", no[i]);
    jc_free(c);
}

/* JC_CALLS: free text whose <tool_call> documents follow the schema */
static const char CALL_SCHEMA[] =
    "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"get_weather\"},\"arguments\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"enum\":[\"Paris\",\"Oslo\"]}},\"required\":[\"city\"]}},\"required\":[\"name\",\"arguments\"]},"
    "{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"now\"},\"arguments\":{\"type\":\"object\"}},"
    "\"required\":[\"name\",\"arguments\"]}]}";
#define W_CALL "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"

TEST(test_json_constraint_calls) {
    json_constraint *c = compile_str(CALL_SCHEMA);
    if (!c) return;
    bool early;
    const char *ok[] = { "", "Plain text, no call: a < b, <b>bold</b>, <tool_cal.", "Let me look." W_CALL,
                         W_CALL "\n" W_CALL " Done.", "<tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call>",
                         "<think>I could write <tool_call> here</think>ok", "<think>x</think>" W_CALL };
    const char *no[] = { "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>",
                         "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}</tool_call>",
                         "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",  /* open at the end */
                         "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_cal>x",
                         "<tool_call>{\"arguments\": {}, \"name\": \"now\"}</tool_call>",                  /* name first */
                         "<tool_call>   {\"name\": \"now\", \"arguments\": {}}</tool_call>", "<think>x" };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        CHECK_MSG(verdict_flags(c, ok[i], JC_CALLS, &early) == 1, "calls: '%s' refused", ok[i]);
    for (size_t i = 0; i < sizeof no / sizeof no[0] - 1; i++)
        CHECK_MSG(verdict_flags(c, no[i], JC_CALLS, &early) == 0, "calls: '%s' accepted", no[i]);
    /* the last: an open think block may end the answer (EOS anywhere in the text) */
    CHECK(verdict_flags(c, no[sizeof no / sizeof no[0] - 1], JC_CALLS, &early) == 1);
    jc_free(c);
}

/* expect() of each text given, all with the same verdict */
#define EXPECT_EACH(schema, want, ...) \
    do { \
        const char *const texts_[] = {__VA_ARGS__}; \
        for (size_t i_ = 0; i_ < sizeof texts_ / sizeof *texts_; i_++) expect(schema, texts_[i_], want); \
    } while (0)

TEST(test_json_constraint_schema) {
    const char *person = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
                         "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":1,\"maxItems\":2}},"
                         "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}";
    expect(person, "{\"name\": \"Ada\", \"age\": 36}", 1);
    expect(person, "{\"age\": 36, \"name\": \"Ada\", \"tags\": [\"x\"]}", 1);
    expect(person, "{\"name\": \"Ada\"}", 0);                        /* age required */
    expect(person, "{\"name\": \"Ada\", \"age\": 36.5}", 0);         /* integer */
    expect(person, "{\"name\": \"Ada\", \"age\": \"36\"}", 0);       /* type */
    expect(person, "{\"name\": \"Ada\", \"age\": 36, \"x\": 1}", 0); /* no others */
    expect(person, "{\"name\": \"Ada\", \"name\": \"B\", \"age\": 1}", 0); /* twice */
    expect(person, "{\"name\": \"Ada\", \"age\": 36, \"tags\": []}", 0);   /* minItems */
    expect(person, "{\"name\": \"Ada\", \"age\": 36, \"tags\": [\"a\",\"b\",\"c\"]}", 0); /* maxItems */
    expect(person, "{\"nam\": \"Ada\", \"age\": 36}", 0);
    /* absent additionalProperties with properties listed: those only; true: any */
    expect("{\"properties\":{\"a\":{}}}", "{\"b\": 1}", 0);
    expect("{\"properties\":{\"a\":{}},\"additionalProperties\":true}", "{\"b\": 1, \"a\": [{}]}", 1);
    expect("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"number\"}}", "{\"x\": 1, \"y\": 2e5}", 1);
    expect("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"number\"}}", "{\"x\": \"1\"}", 0);
    /* enum, const, type lists, anyOf */
    const char *color = "{\"type\":\"object\",\"properties\":{\"c\":{\"enum\":[\"red\",\"green\",1,12,null]}},\"required\":[\"c\"]}";
    EXPECT_EACH(color, 1, "{\"c\": \"green\"}", "{\"c\": 12}", "{\"c\": 1 }", "{\"c\": null}");
    EXPECT_EACH(color, 0, "{\"c\": \"blue\"}", "{\"c\": 123}");
    expect("{\"const\":\"yes\"}", "\"yes\"", 1);
    expect("{\"const\":\"yes\"}", "\"no\"", 0);
    expect("{\"type\":[\"string\",\"null\"]}", "null", 1);
    expect("{\"type\":[\"string\",\"null\"]}", "3", 0);
    const char *opt = "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"boolean\"}},\"required\":[\"x\"]},"
                      "{\"type\":\"null\"},{\"enum\":[\"a\",\"b\"]}]}";
    expect(opt, "{\"x\": false}", 1);
    expect(opt, "null", 1);
    expect(opt, "\"b\"", 1);
    expect(opt, "\"c\"", 0);
    expect(opt, "{}", 0);
    /* $ref and recursion */
    const char *tree = "{\"$ref\":\"#/$defs/node\",\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{"
                       "\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},"
                       "\"required\":[\"v\"]}}}";
    expect(tree, "{\"v\": 1, \"kids\": [{\"v\": 2}, {\"v\": 3, \"kids\": []}]}", 1);
    expect(tree, "{\"v\": 1, \"kids\": [{\"w\": 2}]}", 0);
    /* recursion through an anyOf branch (an optional next node) */
    const char *list = "{\"$ref\":\"#/$defs/n\",\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                       "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/n\"},{\"type\":\"null\"}]}},\"required\":[\"v\",\"next\"],"
                       "\"additionalProperties\":false}}}";
    expect(list, "{\"v\": 1, \"next\": {\"v\": 2, \"next\": null}}", 1);
    expect(list, "{\"v\": 1, \"next\": {}}", 0);
    expect(list, "{\"v\": 1, \"next\": {\"v\": 2}}", 0);
    /* a discriminated union: objects told apart by a constant property, written first */
    const char *shape = "{\"oneOf\":[{\"$ref\":\"#/$defs/c\"},{\"$ref\":\"#/$defs/r\"},{\"type\":\"null\"}],\"discriminator\":{\"propertyName\":\"kind\"},"
                        "\"$defs\":{\"c\":{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"circle\"},\"r\":{\"type\":\"number\"}},"
                        "\"required\":[\"kind\",\"r\"],\"additionalProperties\":false},\"r\":{\"type\":\"object\",\"properties\":{"
                        "\"kind\":{\"enum\":[\"rect\",\"square\"]},\"w\":{\"type\":\"number\"},\"h\":{\"type\":\"number\"}},"
                        "\"required\":[\"kind\",\"w\"],\"additionalProperties\":false}}}";
    expect(shape, "{\"kind\": \"circle\", \"r\": 1.5}", 1);
    expect(shape, "{\"kind\": \"rect\", \"w\": 1, \"h\": 2}", 1);
    expect(shape, "{\"kind\": \"square\", \"w\": 3}", 1);
    expect(shape, "null", 1);
    expect(shape, "{\"kind\": \"circle\", \"w\": 1}", 0);  /* a rect's property on a circle */
    expect(shape, "{\"kind\": \"rect\", \"h\": 2}", 0);    /* w required */
    expect(shape, "{\"r\": 1, \"kind\": \"circle\"}", 0);  /* the constant property comes first */
    expect(shape, "{\"kind\": \"tri\"}", 0);
    expect(shape, "{\"kind\": \"circle\", \"r\": 1, \"kind\": \"circle\"}", 0);
    /* top-level scalars */
    expect("{\"type\":\"number\"}", "-0.5E+3", 1);
    expect("{\"type\":\"integer\"}", "-05", 0);
    expect("{\"type\":\"integer\"}", "-123456789012345678", 1);  /* 18 digits: fits int64 */
    expect("{\"type\":\"integer\"}", "1234567890123456789", 0);  /* 19: may not */
    expect("{\"type\":\"number\"}", "1.5e99", 1);
    expect("{\"type\":\"number\"}", "1.5e308", 0);              /* 3 exponent digits: may overflow */
    expect("{\"type\":\"number\"}", "0.000000000000000000001", 1);
    expect("{\"type\":\"boolean\"}", "true", 1);
    expect("{\"type\":\"string\"}", "\"\\ud83d\\ude00\"", 1);
    /* other refinements are accepted and not enforced */
    expect("{\"type\":\"number\",\"multipleOf\":0.0000003}", "0.5", 1); /* (past JC_MAX_SCALE places) */
    /* string lengths in characters: a UTF-8 character or an escape counts one */
    const char *len23 = "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}";
    expect(len23, "\"ab\"", 1);
    expect(len23, "\"abc\"", 1);
    expect(len23, "\"a\"", 0);
    expect(len23, "\"abcd\"", 0);
    expect(len23, "\"\xC3\xA9\\n\"", 1);
    expect(len23, "\"\xC3\xA9\xC3\xA9\xE2\x82\xAC\"", 1);
    expect(len23, "\"\xC3\xA9\xC3\xA9\xC3\xA9\\u00e9\"", 0);
    expect("{\"properties\":{\"abcdef\":{\"type\":\"string\",\"maxLength\":1}}}", "{\"abcdef\": \"x\"}", 1); /* keys not counted */
    expect("{\"properties\":{\"abcdef\":{\"type\":\"string\",\"maxLength\":1}}}", "{\"abcdef\": \"xy\"}", 0);
    expect("{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"null\"}]}", "\"ab\"", 1);
    expect("{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"null\"}]}", "\"abc\"", 0);
    expect("{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"null\"}]}", "null", 1);
    expect("{\"type\":\"string\",\"maxLength\":0}", "\"\"", 1);
}

/* Integer ranges: a value is accepted iff it lies in the range, and every
 * prefix iff some valid integer in the range starts with it (all values
 * from -99999 to 99999 and every -?[0-9]{0,5} prefix, against a search of
 * the range); exclusive bounds, draft 4's boolean form, a non-integer
 * bound, an anyOf of two ranges (their hull), a bound past 18 digits. */
/* lo / hi: the range (+-JC_INT_LIMIT: unbounded) */
static void range_exhaustive(const char *schema, long long lo, long long hi, long long q) {
    json_constraint *c = compile_str(schema);
    if (!c) return;
    int wrong = 0;
    char t[32];
    for (long v = -99999; v <= 99999 && wrong < 5; v++) {
        snprintf(t, sizeof t, "%ld", v);
        bool early;
        int got = verdict(c, t, &early), want = v >= lo && v <= hi && v % q == 0;
        if (got != want) {
            wrong++;
            CHECK_MSG(0, "schema %s: %s %s", schema, t, got ? "accepted" : "refused");
        }
    }
    /* the prefixes ("-"?, then up to 5 digits) of every in-range value's text
     * within +-999999 (values past it add none a 6-digit one does not) */
    static uint8_t reach[2][6][100000];
    memset(reach, 0, sizeof reach);
    for (long long v = lo < -999999 ? -999999 : lo; v <= (hi > 999999 ? 999999 : hi); v++) {
        if (v % q) continue;
        int neg = v < 0, n = snprintf(t, sizeof t, "%lld", v < 0 ? -v : v);
        long d = 0;
        reach[neg][0][0] |= neg;
        for (int l = 1; l <= n && l <= 5; l++) reach[neg][l][d = d * 10 + (t[l - 1] - '0')] = 1;
    }
    if (lo <= 0 && hi >= 0) reach[1][0][0] = reach[1][1][0] = 1; /* "-0" is 0 */
    for (int neg = 0; neg < 2; neg++)
        for (int len = 0; len <= 5; len++)
            for (long d = 0; d < (long)pow(10, len) && wrong < 5; d++) {
                if (len) snprintf(t, sizeof t, "%s%0*ld", neg ? "-" : "", len, d);
                else snprintf(t, sizeof t, "%s", neg ? "-" : "");
                if (!t[0]) continue;
                jc_state st;
                jc_start(&st, c, 0);
                bool got = jc_feed(&st, (const uint8_t *)t, strlen(t));
                if (got != reach[neg][len][d]) {
                    wrong++;
                    CHECK_MSG(0, "schema %s: prefix %s %s", schema, t, got ? "accepted" : "refused");
                }
            }
    jc_free(c);
}

TEST(test_json_constraint_integer_range) {
    range_exhaustive("{\"type\":\"integer\",\"minimum\":3,\"maximum\":250}", 3, 250, 1);
    range_exhaustive("{\"type\":\"integer\",\"minimum\":-20,\"maximum\":-5}", -20, -5, 1);
    range_exhaustive("{\"type\":\"integer\",\"exclusiveMinimum\":-3,\"exclusiveMaximum\":1000}", -2, 999, 1);
    range_exhaustive("{\"type\":\"integer\",\"minimum\":0}", 0, JC_INT_LIMIT, 1);
    range_exhaustive("{\"type\":\"integer\",\"maximum\":-1200}", -JC_INT_LIMIT, -1200, 1);
    range_exhaustive("{\"type\":\"integer\",\"minimum\":0.5,\"maximum\":7.9}", 1, 7, 1);
    range_exhaustive("{\"type\":\"integer\",\"minimum\":2,\"exclusiveMinimum\":true,\"maximum\":9,\"exclusiveMaximum\":false}", 3, 9, 1);
    range_exhaustive("{\"type\":\"integer\",\"minimum\":0,\"maximum\":1000,\"multipleOf\":25}", 0, 1000, 25);
    range_exhaustive("{\"type\":\"integer\",\"multipleOf\":7}", -JC_INT_LIMIT, JC_INT_LIMIT, 7);
    range_exhaustive("{\"type\":\"integer\",\"minimum\":-95,\"maximum\":-3,\"multipleOf\":4}", -95, -3, 4);
    range_exhaustive("{\"type\":\"integer\",\"minimum\":1,\"maximum\":9,\"multipleOf\":0.5}", 1, 9, 1);
    range_exhaustive("{\"anyOf\":[{\"type\":\"integer\",\"minimum\":1,\"maximum\":5},{\"type\":\"integer\",\"minimum\":40,\"maximum\":60}]}", 1, 60, 1);
    const char *rating = "{\"type\":\"object\",\"properties\":{\"stars\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":5}},"
                         "\"required\":[\"stars\"]}";
    EXPECT_EACH(rating, 1, "{\"stars\": 4}", "{\"stars\":5 }");
    EXPECT_EACH(rating, 0, "{\"stars\": 0}", "{\"stars\": 6}", "{\"stars\": 45}");
    /* an integer bound past 18 digits is no bound */
    expect("{\"type\":\"integer\",\"maximum\":1e30}", "999999999999999999", 1);
    expect("{\"type\":\"integer\",\"minimum\":-1e30}", "-999999999999999999", 1);
}

/* Formats date, time, date-time, uuid, ipv4, email, hostname, ipv6, uri, uri-reference, duration and
 * json-pointer: valid texts accepted (each
 * prefix too), malformed ones refused at the first wrong character;
 * other formats and anyOf of two formats are not enforced. */
/* the prefix is refused: with it, no text of the format would fit maxLength */
static void room_bounded(const char *schema, const char *prefix) {
    json_constraint *c = compile_str(schema);
    if (!c) return;
    jc_state st;
    jc_start(&st, c, 0);
    CHECK_MSG(!jc_feed(&st, (const uint8_t *)prefix, strlen(prefix)), "schema %s: prefix %s accepted", schema, prefix);
    jc_free(c);
}

/* runs random walks from start: each step a character of alpha the
 * constraint accepts, until the text may end (or 120 steps); counts in
 * *stuck the walks that found no next character (reporting three) and
 * returns how many ended in a whole text */
static int random_walks(const char *schema, const char *start, const char *alpha, int runs, unsigned *rng, int *stuck) {
    json_constraint *c = compile_str(schema);
    if (!c) return 0;
    int ended = 0;
    for (int run = 0; run < runs; run++) {
        jc_state st, t;
        char text[160];
        int len = snprintf(text, sizeof text, "%s", start);
        jc_start(&st, c, 0);
        CHECK(jc_feed(&st, (const uint8_t *)text, (size_t)len));
        for (int step = 0; step < 120 && !jc_can_end(&st); step++) {
            uint8_t ok[64];
            int n = 0;
            for (const char *a = alpha; *a && n < 64; a++) {
                jc_copy(&t, &st);
                if (jc_feed(&t, (const uint8_t *)a, 1)) ok[n++] = (uint8_t)*a;
            }
            if (!n) {
                if (++*stuck <= 3) CHECK_MSG(0, "schema %s: prefix %.*s has no next character", schema, len, text);
                break;
            }
            *rng = *rng * 1664525u + 1013904223u;
            text[len] = (char)ok[(*rng >> 8) % (unsigned)n];
            CHECK(jc_feed(&st, (const uint8_t *)text + len++, 1));
        }
        ended += jc_can_end(&st);
    }
    jc_free(c);
    return ended;
}

TEST(test_json_constraint_string_formats) {
    const char *date = "{\"type\":\"string\",\"format\":\"date\"}", *time = "{\"type\":\"string\",\"format\":\"time\"}",
               *dt = "{\"type\":\"string\",\"format\":\"date-time\"}", *uuid = "{\"type\":\"string\",\"format\":\"uuid\"}";
    EXPECT_EACH(date, 1, "\"2024-02-29\"", "\"1999-12-31\"", "\"0001-01-01\"", "\"2030-10-30\"");
    EXPECT_EACH(date, 0, "\"2024-13-01\"", "\"2024-00-10\"", "\"2024-1-01\"", "\"2024-01-32\"", "\"2024-01-00\"",
                "\"24-01-01\"", "\"2024-01-01T\"", "\"2024/01/01\"", "\"2024-01-0\"", "\"\"");
    EXPECT_EACH(time, 1, "\"07:08:09Z\"", "\"23:59:59+02:00\"", "\"00:00:00.5-11:30\"", "\"12:30:00.123456789Z\"");
    EXPECT_EACH(time, 0, "\"24:00:00Z\"", "\"07:60:00Z\"", "\"07:08:09\"", "\"07:08:09.Z\"", "\"07:08:09+2:00\"",
                "\"07:08:09.1234567890Z\"", "\"07:08:09z\"", "\"07:08:09+02:60\"", "\"7:08:09Z\"");
    EXPECT_EACH(dt, 1, "\"2024-05-06T07:08:09Z\"", "\"2024-05-06T07:08:09.25+05:45\"");
    EXPECT_EACH(dt, 0, "\"2024-05-06 07:08:09Z\"", "\"2024-05-06\"", "\"2024-05-06T19:08\"");
    expect(uuid, "\"123e4567-e89b-12d3-A456-426614174000\"", 1);
    EXPECT_EACH(uuid, 0, "\"123e4567e89b12d3a456426614174000\"", "\"123e4567-e89b-12d3-a456-42661417400g\"",
                "\"123e4567-e89b-12d3-a456-4266141740001\"");
    const char *ip = "{\"type\":\"string\",\"format\":\"ipv4\"}";
    EXPECT_EACH(ip, 1, "\"192.168.0.1\"", "\"0.0.0.0\"", "\"255.255.255.255\"", "\"10.20.30.199\"");
    EXPECT_EACH(ip, 0, "\"256.1.1.1\"", "\"01.2.3.4\"", "\"1.2.3\"", "\"1.2.3.4.5\"", "\"1..2.3\"", "\"1.2.3.\"",
                "\"1.2.3.1000\"", "\"a.b.c.d\"");
    const char *mail = "{\"type\":\"string\",\"format\":\"email\"}";
    EXPECT_EACH(mail, 1, "\"ada@example.com\"", "\"a.b+c_d%e-f@mail.sub-domain.org\"", "\"x@y.io\"");
    EXPECT_EACH(mail, 0, "\"ada\"", "\"@example.com\"", "\"ada@example\"", "\"ada@example.c\"", "\"ada@-x.com\"",
                "\"ada@x-.com\"", "\"ada@x..com\"", "\"ada.@x.com\"", "\".ada@x.com\"", "\"a..b@x.com\"",
                "\"ada@x.com.\"", "\"a b@x.com\"", "\"ada@@x.com\"", "\"ada@x_y.com\"", "\"ada@x.co-\"");
    /* with maxLength: a character only where the shortest finish still fits */
    const char *mail8 = "{\"type\":\"string\",\"format\":\"email\",\"maxLength\":8}";
    expect(mail8, "\"ab@cd.ef\"", 1);
    expect(mail8, "\"abcd@e.fg\"", 0);
    room_bounded(mail8, "\"abcd@");
    const char *time12 = "{\"type\":\"string\",\"format\":\"time\",\"maxLength\":12}";
    expect(time12, "\"12:00:00.12Z\"", 1);
    expect(time12, "\"12:00:00.123Z\"", 0);
    room_bounded(time12, "\"12:00:00+");
    room_bounded(time12, "\"12:00:00.123");
    /* lengths inside a format's own: exact (the pattern's DFA counts them) */
    const char *ip8 = "{\"type\":\"string\",\"format\":\"ipv4\",\"minLength\":8}",
               *time20 = "{\"type\":\"string\",\"format\":\"time\",\"minLength\":20}";
    EXPECT_EACH(ip8, 1, "\"10.2.3.4\"", "\"255.255.255.255\"");
    EXPECT_EACH(ip8, 0, "\"1.2.3.4\"");
    EXPECT_EACH(time20, 1, "\"12:00:00.12345+01:00\"", "\"23:59:59.123456789+00:00\"");
    EXPECT_EACH(time20, 0, "\"23:59:59.123456789Z\"", "\"12:00:00Z\"");
    /* hostname and ipv6: built-in patterns (json_schema.c) */
    const char *host = "{\"type\":\"string\",\"format\":\"hostname\"}", *ip6 = "{\"type\":\"string\",\"format\":\"ipv6\"}";
    EXPECT_EACH(host, 1, "\"localhost\"", "\"a-b.example.COM\"", "\"x1.y2\"");
    EXPECT_EACH(host, 0, "\"not a hostname\"", "\"-a.com\"", "\"a-.com\"", "\"a..com\"", "\".a\"", "\"a_b.com\"", "\"\"");
    EXPECT_EACH(ip6, 1, "\"::1\"", "\"::\"", "\"fe80::1:2\"", "\"2001:db8:0:0:0:0:2:1\"", "\"2001:DB8::\"");
    EXPECT_EACH(ip6, 0, "\"1::2::3\"", "\"12345::\"", "\"1:2:3:4:5:6:7\"", "\"1:2:3:4:5:6:7:8:9\"", "\":1\"", "\"g::1\"");
    const char *uri = "{\"type\":\"string\",\"format\":\"uri\"}", *dur = "{\"type\":\"string\",\"format\":\"duration\"}",
               *ptr = "{\"type\":\"string\",\"format\":\"json-pointer\"}", *ref = "{\"type\":\"string\",\"format\":\"uri-reference\"}";
    EXPECT_EACH(uri, 1, "\"https://example.com/a?b=c#d\"", "\"mailto:ada@example.com\"", "\"urn:isbn:0451450523\"",
                "\"http://x/%20y\"");
    EXPECT_EACH(uri, 0, "\"//example.com\"", "\"/a/b\"", "\"1http://x\"", "\"http://x y\"", "\"http://x/%2\"", "\"\"");
    EXPECT_EACH(ref, 1, "\"/a/b?c\"", "\"../x#y\"", "\"\"", "\"https://example.com\"");
    EXPECT_EACH(ref, 0, "\"a b\"", "\"a<b\"");
    EXPECT_EACH(dur, 1, "\"P1D\"", "\"P3Y6M4DT12H30M5S\"", "\"PT5M\"", "\"P2W\"", "\"P1Y2M\"", "\"PT1H30M\"");
    EXPECT_EACH(dur, 0, "\"P\"", "\"PT\"", "\"P1DT\"", "\"P1M2Y\"", "\"P1H\"", "\"P1W2D\"", "\"1D\"");
    EXPECT_EACH(ptr, 1, "\"\"", "\"/a/b\"", "\"/a~1b/~0\"", "\"/\"");
    EXPECT_EACH(ptr, 0, "\"a/b\"", "\"/a~2\"", "\"/a~\"");
    const char *host9 = "{\"type\":\"string\",\"format\":\"hostname\",\"maxLength\":9}";
    expect(host9, "\"abcd.efgh\"", 1);
    room_bounded(host9, "\"abcdefgh-"); /* a '-' needs a character after it: no room */
    /* no accepted prefix is a dead end: random walks over accepted characters always have a next one */
    const char *walk[] = {date, time, dt, uuid, ip, mail, mail8, time12, host, ip6, host9, uri, dur, ptr, ref, ip8, time20,
                          "{\"type\":\"string\",\"format\":\"date-time\",\"maxLength\":22}"};
    unsigned rng = 7;
    int stuck = 0, ended = 0;
    for (size_t w = 0; w < sizeof walk / sizeof *walk; w++)
        ended += random_walks(walk[w], "\"", "0123456789abcdefxyzABCDEFTZ:-+.@_%\" PYMWHS/~?#", 500, &rng, &stuck);
    CHECK_EQ_INT(stuck, 0);
    printf("    random walks: %d of %d ended in a whole text, %d stuck\n", ended, (int)(sizeof walk / sizeof *walk) * 500, stuck);
    /* in an object, a key with the format's name, and what is not enforced */
    const char *ev = "{\"type\":\"object\",\"properties\":{\"when\":{\"type\":\"string\",\"format\":\"date\"},"
                     "\"note\":{\"type\":\"string\"}},\"required\":[\"when\",\"note\"]}";
    expect(ev, "{\"when\": \"2024-05-06\", \"note\": \"x\\\"y\"}", 1);
    expect(ev, "{\"when\": \"May 6\", \"note\": \"x\"}", 0);
    expect("{\"type\":\"string\",\"format\":\"idn-hostname\"}", "\"not a hostname\"", 1);
    expect("{\"anyOf\":[{\"type\":\"string\",\"format\":\"date\"},{\"type\":\"string\",\"format\":\"uuid\"}]}", "\"x\"", 1);
    expect("{\"type\":\"string\",\"format\":\"time\",\"maxLength\":24}", "\"12:30:00.123456789+01:00\"", 1);
}

/* some continuation of st (up to depth more characters of alpha) is a whole text */
static bool can_finish(const jc_state *st, const char *alpha, int depth) {
    if (jc_can_end(st)) return true;
    for (const char *a = alpha; depth > 0 && *a; a++) {
        jc_state t;
        jc_copy(&t, st);
        if (jc_feed(&t, (const uint8_t *)a, 1) && can_finish(&t, alpha, depth - 1)) return true;
    }
    return false;
}

/* every accepted prefix of up to len characters of alpha can still finish (in at most `more`); how many were accepted */
static int prefixes_finish(const json_constraint *c, const jc_state *st, const char *alpha, int len, int more, char *buf,
                           int at, int *dead) {
    int n = 0;
    for (const char *a = alpha; len > 0 && *a; a++) {
        jc_state t;
        jc_copy(&t, st);
        if (!jc_feed(&t, (const uint8_t *)a, 1)) continue;
        buf[at] = *a, buf[at + 1] = 0, n++;
        if (!can_finish(&t, alpha, more) && ++*dead <= 3) CHECK_MSG(0, "prefix %s cannot finish", buf);
        n += prefixes_finish(c, &t, alpha, len - 1, more, buf, at + 1, dead);
    }
    return n;
}

/* string patterns (json_pattern.h; PCRE2 checks the DFA in test_json_pattern.c): characters,
 * escapes, UTF-8, lengths, and where a pattern is not the only rule */
TEST(test_json_constraint_string_pattern) {
    const char *code = "{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}-\\\\d{2}$\"}";
    EXPECT_EACH(code, 1, "\"ABC-12\"", "\"XYZ-00\"");
    EXPECT_EACH(code, 0, "\"ABC-123\"", "\"abc-12\"", "\"ABC12\"", "\"AB-12\"", "\"\"", "\"\\u0041BC-12\"");
    /* search semantics: unanchored patterns match anywhere */
    const char *cafe = "{\"type\":\"string\",\"pattern\":\"caf\xC3\xA9|t\\\\.\"}";
    EXPECT_EACH(cafe, 1, "\"un caf\xC3\xA9 noir\"", "\"caf\xC3\xA9\"", "\"at. \"");
    EXPECT_EACH(cafe, 0, "\"cafe\"", "\"caf\xC3\xA8\"", "\"at\"");
    /* the short escapes stand for their characters; \u escapes are not taken */
    const char *esc = "{\"type\":\"string\",\"pattern\":\"^a[/\\\"]\\\\n\\\\\\\\$\"}";
    EXPECT_EACH(esc, 1, "\"a/\\n\\\\\"", "\"a\\/\\n\\\\\"", "\"a\\\"\\n\\\\\"");
    EXPECT_EACH(esc, 0, "\"a/n\\\\\"", "\"a/\\u000a\\\\\"", "\"a/\\t\\\\\"", "\"a\\\\\\n\\\\\"");
    /* minLength / maxLength count characters together with the pattern */
    const char *len = "{\"type\":\"string\",\"pattern\":\"^[a-z\xC3\xA0-\xC3\xBF]+$\",\"minLength\":2,\"maxLength\":3}";
    EXPECT_EACH(len, 1, "\"ab\"", "\"\xC3\xA0\xC3\xBF\xC3\xA9\"", "\"a\xC3\xA9z\"");
    EXPECT_EACH(len, 0, "\"a\"", "\"abcd\"", "\"\xC3\xA0\xC3\xBF\xC3\xA9\xC3\xA9\"", "\"a1\"", "\"a\xE2\x82\xAC\"");
    room_bounded("{\"type\":\"string\",\"pattern\":\"^[a-z]+\\\\d$\",\"maxLength\":3}", "\"abc"); /* no room for the digit */
    /* in an object beside free strings; a format beside a pattern (json_constraint.h) */
    const char *obj = "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"pattern\":\"^u[0-9]+$\"},"
                      "\"note\":{\"type\":\"string\"}},\"required\":[\"id\",\"note\"]}";
    expect(obj, "{\"id\": \"u42\", \"note\": \"u\"}", 1);
    EXPECT_EACH(obj, 0, "{\"id\": \"42\", \"note\": \"x\"}", "{\"id\": \"u\", \"note\": \"x\"}");
    const char *dpat = "{\"type\":\"string\",\"format\":\"date\",\"pattern\":\"^2024-\"}"; /* a format and a pattern: both */
    EXPECT_EACH(dpat, 1, "\"2024-05-06\"", "\"2024-12-31\"");
    EXPECT_EACH(dpat, 0, "\"2023-05-06\"", "\"2024-13-01\"", "\"2024-\"");
    expect("{\"type\":\"string\",\"format\":\"email\",\"pattern\":\"^x$\"}", "\"ada@example.com\"", 1); /* (email: alone) */
    /* two string branches with different patterns: either text (the hull, as for formats) */
    const char *two = "{\"anyOf\":[{\"type\":\"string\",\"pattern\":\"^a+$\"},{\"type\":\"string\",\"pattern\":\"^b+$\"}]}";
    EXPECT_EACH(two, 1, "\"aa\"", "\"bb\"");
    /* a pattern holding a NUL (jansson keeps it when asked; its C string would stop there): refused */
    json_t *nul = json_pack("{s:s, s:o}", "type", "string", "pattern", json_stringn("a\0b", 3));
    char err[200];
    json_constraint *cn = jc_compile(nul, err, sizeof err);
    CHECK_MSG(cn == NULL && strstr(err, "NUL"), "a pattern with a NUL: %s", cn ? "compiled" : err);
    jc_free(cn);
    json_decref(nul);
    /* an enum beside a pattern: the enum's texts */
    expect("{\"type\":\"string\",\"enum\":[\"x\"],\"pattern\":\"^y$\"}", "\"x\"", 1);
}

/* text's verdict against want (the first three that differ reported) */
static void judge(const json_constraint *c, const char *schema, const char *text, bool want, int *wrong) {
    bool early;
    if ((verdict(c, text, &early) == 1) != want && ++*wrong <= 3)
        CHECK_MSG(0, "schema %s: %s %s", schema, text, want ? "refused" : "accepted");
}

/* a number document's accepted prefixes of up to 6 characters over alpha, each shown able to finish */
static int number_prefixes_finish(const json_constraint *c, const char *alpha, int *dead) {
    jc_state st;
    jc_start(&st, c, 0);
    char buf[16];
    return prefixes_finish(c, &st, alpha, 6, 8, buf, 0, dead);
}

/* Bounded non-integer numbers: texts (all of -9.99 .. 9.99 in steps of
 * 0.01, and more) accepted iff their double lies in the range; every
 * accepted prefix of up to 6 characters can finish; no exponent. */
TEST(test_json_constraint_number_range) {
    struct { const char *schema; double lo, hi; bool lo_open, hi_open; } r[] = {
        {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", 0, 1, false, false},
        {"{\"type\":\"number\",\"minimum\":-2.5,\"maximum\":3.25}", -2.5, 3.25, false, false},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":0.3}", 0, 0.3, true, false},
        {"{\"type\":\"number\",\"minimum\":-1.5,\"exclusiveMaximum\":-0.5}", -1.5, -0.5, false, true},
        {"{\"type\":[\"number\",\"null\"],\"minimum\":0.1}", 0.1, INFINITY, false, false},
    };
    int checked = 0, prefixes = 0, dead = 0;
    for (size_t i = 0; i < sizeof r / sizeof *r; i++) {
        json_constraint *c = compile_str(r[i].schema);
        if (!c) continue;
        int wrong = 0;
        char t[32];
        for (int v = -999; v <= 999 && wrong < 5; v++)
            for (int form = 0; form < 3; form++) { /* 1.5 / 1.50 / 15 (the integer v) */
                if (form == 0) snprintf(t, sizeof t, "%s%d.%d", v < 0 ? "-" : "", abs(v) / 100, abs(v) % 100 / 10);
                else if (form == 1) snprintf(t, sizeof t, "%s%d.%02d", v < 0 ? "-" : "", abs(v) / 100, abs(v) % 100);
                else snprintf(t, sizeof t, "%d", v / 10);
                double x = strtod(t, NULL);
                bool want = (r[i].lo_open ? x > r[i].lo : x >= r[i].lo) && (r[i].hi_open ? x < r[i].hi : x <= r[i].hi);
                judge(c, r[i].schema, t, want, &wrong);
                checked++;
            }
        prefixes += number_prefixes_finish(c, "-0123456789.e", &dead);
        jc_free(c);
    }
    CHECK_EQ_INT(dead, 0);
    printf("    %d texts against the ranges, %d accepted prefixes all able to finish\n", checked, prefixes);
    expect("{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "1e0", 0);       /* no exponent when bounded */
    expect("{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "-0", 1);        /* -0 is 0 */
    expect("{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "0.99999999999999999", 1);
    expect("{\"type\":\"number\",\"exclusiveMinimum\":0}", "0.0", 0);
    expect("{\"type\":\"number\"}", "-1.5e-3", 1);                               /* unbounded: as before */
    const char *conf = "{\"type\":\"object\",\"properties\":{\"confidence\":{\"type\":\"number\",\"minimum\":0,\"maximum\":1}},"
                       "\"required\":[\"confidence\"]}";
    expect(conf, "{\"confidence\": 0.85}", 1);
    expect(conf, "{\"confidence\": 85}", 0);
}

/* multipleOf of a few decimal places (a whole one on a number, a fraction
 * on an integer): every text of up to 2 integer and 3 fraction digits,
 * either sign, judged in exact thousandths (fraction digits past the
 * multipleOf's places refused; integers and whole multiples take none);
 * every accepted prefix of up to 6 characters can finish. */
TEST(test_json_constraint_decimal_multiple) {
    const long long U = 1000000000LL; /* "unbounded", in thousandths */
    struct { const char *schema; long long m; int places, max_fd; long long lo, hi; } r[] = {
        {"{\"type\":\"number\",\"multipleOf\":0.01,\"minimum\":0,\"maximum\":2}", 1, 2, 2, 0, 2000},
        {"{\"type\":\"number\",\"multipleOf\":0.25,\"minimum\":-1,\"exclusiveMaximum\":1.5}", 25, 2, 2, -1000, 1499},
        {"{\"type\":\"number\",\"multipleOf\":0.5}", 5, 1, 1, -U, U},
        {"{\"type\":\"number\",\"multipleOf\":0.3,\"minimum\":0.3,\"maximum\":1.2}", 3, 1, 1, 300, 1200},
        {"{\"type\":\"number\",\"multipleOf\":0.001,\"exclusiveMinimum\":-0.5,\"maximum\":0.25}", 1, 3, 3, -499, 250},
        {"{\"type\":\"number\",\"multipleOf\":0.05,\"minimum\":0.01,\"maximum\":0.99}", 5, 2, 2, 10, 990},
        {"{\"type\":\"integer\",\"multipleOf\":0.3}", 3, 1, 0, -U, U},
        {"{\"type\":\"number\",\"multipleOf\":0.5,\"minimum\":10,\"maximum\":99.5}", 5, 1, 1, 10000, 99500},
        {"{\"type\":\"number\",\"multipleOf\":0.25,\"minimum\":-60,\"maximum\":-12.5}", 25, 2, 2, -60000, -12500},
        {"{\"type\":\"number\",\"multipleOf\":5,\"maximum\":12}", 5, 0, 0, -U, 12000},
        {"{\"anyOf\":[{\"type\":\"number\",\"multipleOf\":0.5,\"maximum\":1},{\"type\":\"number\",\"multipleOf\":0.5,\"minimum\":50}]}",
         5, 1, 1, -U, U}, /* (the two ranges' hull) */
    };
    long checked = 0;
    int prefixes = 0, dead = 0;
    for (size_t i = 0; i < sizeof r / sizeof *r; i++) {
        json_constraint *c = compile_str(r[i].schema);
        if (!c) continue;
        long long p10 = 1;
        for (int k = 0; k < r[i].places; k++) p10 *= 10;
        int wrong = 0;
        for (long long v = -99999; v <= 99999 && wrong < 5; v++)
            for (int fd = 0; fd <= 3; fd++) {
                long long step = fd == 0 ? 1000 : fd == 1 ? 100 : fd == 2 ? 10 : 1;
                if (v % step) continue;
                long long a = v < 0 ? -v : v;
                char t[32];
                if (fd) snprintf(t, sizeof t, "%s%lld.%0*lld", v < 0 ? "-" : "", a / 1000, fd, a % 1000 / step);
                else snprintf(t, sizeof t, "%s%lld", v < 0 ? "-" : "", a / 1000);
                judge(c, r[i].schema, t, fd <= r[i].max_fd && v >= r[i].lo && v <= r[i].hi && (v * p10) % (r[i].m * 1000) == 0,
                      &wrong);
                checked++;
            }
        prefixes += number_prefixes_finish(c, "-0123456789.", &dead);
        jc_free(c);
    }
    CHECK_EQ_INT(dead, 0);
    printf("    %ld texts against the multiples, %d accepted prefixes all able to finish\n", checked, prefixes);
    EXPECT_EACH("{\"type\":\"number\",\"multipleOf\":0.5}", 0, "1e1", "1.50", "0.25", "-0.1");
    EXPECT_EACH("{\"type\":\"number\",\"multipleOf\":0.5}", 1, "-0", "-0.5", "123456789012345.5");
    const char *price = "{\"type\":\"object\",\"properties\":{\"price\":{\"type\":\"number\",\"multipleOf\":0.01,\"minimum\":0}},"
                        "\"required\":[\"price\"]}";
    EXPECT_EACH(price, 1, "{\"price\": 19.99}", "{\"price\": 5}", "{\"price\": 0.5}");
    EXPECT_EACH(price, 0, "{\"price\": 19.999}", "{\"price\": -1}", "{\"price\": 2e1}");
}

/* uniqueItems over enum items: each value once (a literal that is a
 * prefix of another included), at most as many items as values, every
 * accepted prefix able to finish; over other items not enforced. */
TEST(test_json_constraint_unique_enum_items) {
    const char *tags = "{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",\"c\"]},\"uniqueItems\":true}";
    EXPECT_EACH(tags, 1, "[]", "[\"a\"]", "[\"b\", \"a\"]", "[\"a\",\"b\",\"c\"]", "[\"c\", \"a\", \"b\"]");
    EXPECT_EACH(tags, 0, "[\"a\", \"a\"]", "[\"a\",\"b\",\"a\"]", "[\"a\",\"b\",\"c\",\"a\"]", "[\"d\"]");
    const char *nums = "{\"type\":\"array\",\"items\":{\"enum\":[1,12,2]},\"uniqueItems\":true,\"minItems\":2}";
    EXPECT_EACH(nums, 1, "[1, 12]", "[12, 1]", "[2,1,12]", "[12,2]");
    EXPECT_EACH(nums, 0, "[1, 1]", "[12, 12]", "[1]", "[12,1,12]", "[1,12,2,1]");
    /* in an object, beside other arrays */
    const char *obj = "{\"type\":\"object\",\"properties\":{\"t\":{\"type\":\"array\",\"items\":{\"enum\":[\"x\",\"y\"]},"
                      "\"uniqueItems\":true},\"u\":{\"type\":\"array\",\"items\":{\"enum\":[\"x\",\"y\"]}}},\"required\":[\"t\",\"u\"]}";
    expect(obj, "{\"t\": [\"x\", \"y\"], \"u\": [\"x\", \"x\"]}", 1);
    expect(obj, "{\"t\": [\"y\", \"y\"], \"u\": []}", 0);
    expect("{\"type\":\"array\",\"items\":{\"type\":\"string\",\"enum\":[\"a\",\"b\"]},\"uniqueItems\":true}", "[\"a\", \"a\"]", 0);
    /* not enforced over other items */
    expect("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"uniqueItems\":true}", "[1, 1]", 1);
    int dead = 0, n = 0;
    const char *walked[] = {tags, nums};
    for (int i = 0; i < 2; i++) {
        json_constraint *c = compile_str(walked[i]);
        if (!c) continue;
        jc_state st;
        jc_start(&st, c, 0);
        char buf[16];
        n += prefixes_finish(c, &st, i ? "[]12, " : "[]\"abc, ", 9, 12, buf, 0, &dead);
        jc_free(c);
    }
    CHECK_EQ_INT(dead, 0);
    printf("    %d accepted prefixes of unique enum arrays, all able to finish\n", n);
}

/* minProperties / maxProperties: counts of properties given; under
 * maxProperties the required ones always keep their room (only they may
 * come when they fill it); random walks never get stuck. */
TEST(test_json_constraint_property_counts) {
    const char *two = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},"
                      "\"c\":{\"type\":\"integer\"}},\"minProperties\":2,\"maxProperties\":2}";
    EXPECT_EACH(two, 1, "{\"a\": 1, \"b\": 2}", "{\"c\":3,\"a\":1}");
    EXPECT_EACH(two, 0, "{}", "{\"a\": 1}", "{\"a\": 1, \"b\": 2, \"c\": 3}");
    /* maxProperties 2 with "r" required: after one other property, only "r" */
    const char *room = "{\"type\":\"object\",\"properties\":{\"r\":{\"type\":\"integer\"},\"x\":{\"type\":\"integer\"},"
                       "\"y\":{\"type\":\"integer\"}},\"required\":[\"r\"],\"additionalProperties\":true,\"maxProperties\":2}";
    EXPECT_EACH(room, 1, "{\"r\": 1}", "{\"x\": 1, \"r\": 2}", "{\"r\": 1, \"zz\": 2}", "{\"q\": 0, \"r\": 1}");
    EXPECT_EACH(room, 0, "{\"x\": 1, \"y\": 2}", "{\"x\": 1, \"zz\": 2}", "{\"x\": 1}", "{\"r\": 1, \"x\": 2, \"y\": 3}");
    const char *open = "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"},\"minProperties\":1}";
    EXPECT_EACH(open, 1, "{\"k\": 1}", "{\"k\": 1, \"m\": 2}");
    EXPECT_EACH(open, 0, "{}");
    unsigned rng = 3;
    int stuck = 0, n = 0;
    n += random_walks(two, "", "}\",:1ab{ ", 600, &rng, &stuck);
    n += random_walks(room, "", "}\",:1rxy{ ", 600, &rng, &stuck);
    n += random_walks(open, "", "}\",:1k{ ", 600, &rng, &stuck);
    CHECK_EQ_INT(stuck, 0);
    printf("    random walks: %d of 1800 ended in a whole object, %d stuck\n", n, stuck);
}

TEST(test_json_constraint_refused_schemas) {
    const char *bad[] = {
        "{\"type\":\"objekt\"}", "{\"not\":{}}", "{\"prefixItems\":[{}]}", "{\"allOf\":[{}, {}]}",
        "{\"anyOf\":[{\"type\":\"object\"},{\"type\":\"object\",\"properties\":{\"a\":{}}}]}",
        "{\"$ref\":\"#/$defs/missing\"}", "{\"$ref\":\"#/$defs/a\",\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}}}",
        "{\"properties\":{\"a\":{}},\"required\":[\"b\"]}", "{\"enum\":[]}", "{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}",
        "{\"properties\":{\"a\\\"b\":{}}}",
        "{\"type\":\"string\",\"format\":\"date\",\"maxLength\":5}", "{\"type\":\"string\",\"format\":\"email\",\"maxLength\":5}",
        "{\"type\":\"string\",\"format\":\"uuid\",\"minLength\":37}",
        "{\"type\":\"array\",\"items\":{\"enum\":[1,2]},\"uniqueItems\":true,\"minItems\":3}",
        "{\"type\":\"object\",\"minProperties\":3,\"maxProperties\":2}",
        "{\"properties\":{\"a\":{},\"b\":{}},\"required\":[\"a\",\"b\"],\"maxProperties\":1}",
        "{\"properties\":{\"a\":{}},\"minProperties\":2}",
        "{\"type\":\"number\",\"minimum\":1,\"exclusiveMaximum\":1}", "{\"type\":\"number\",\"minimum\":2.5,\"maximum\":2}",
        "{\"type\":\"integer\",\"multipleOf\":0}", "{\"type\":\"integer\",\"multipleOf\":\"2\"}",
        "{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "{\"type\":\"integer\",\"minimum\":\"3\"}",
        "{\"type\":\"integer\",\"exclusiveMinimum\":2,\"exclusiveMaximum\":3}",
        "{\"type\":\"integer\",\"minimum\":1,\"maximum\":4,\"multipleOf\":5}",
        "{\"type\":\"number\",\"minimum\":0.1,\"maximum\":0.2,\"multipleOf\":0.25}",
        "{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "{\"type\":\"string\",\"maxLength\":-1}",
        "{\"type\":\"string\",\"maxLength\":70000}", "{\"type\":\"string\",\"minLength\":1.5}",
        "{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "{\"type\":\"string\",\"pattern\":5}",
        "{\"type\":\"string\",\"pattern\":\"^[a-z]{3}$\",\"maxLength\":2}",
        "{\"type\":\"string\",\"format\":\"uuid\",\"pattern\":\"^x\"}",
        "{\"anyOf\":[{\"properties\":{\"k\":{\"const\":1}},\"required\":[\"k\"]},{\"properties\":{\"k\":{\"const\":1}},\"required\":[\"k\"]}]}",
        "{\"anyOf\":[{\"properties\":{\"k\":{\"const\":1}}},{\"properties\":{\"k\":{\"const\":2}}}]}", "{\"anyOf\":[{\"enum\":[\"x\"]},{\"type\":\"string\",\"maxLength\":3}, {\"enum\":[{\"a\":1}]}, {\"type\":\"object\"}]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256];
        json_t *j = json_loads(bad[i], 0, NULL);
        CHECK_MSG(j != NULL, "bad test schema %s", bad[i]);
        json_constraint *c = jc_compile(j, err, sizeof err);
        CHECK_MSG(c == NULL, "schema %s compiled; expected a refusal", bad[i]);
        CHECK_MSG(c != NULL || err[0], "schema %s refused without a message", bad[i]);
        jc_free(c);
        json_decref(j);
    }
}

/* The any-object recognizer agrees with jansson on single-byte mutations of
 * valid documents (no \u escapes: jansson also checks surrogate pairs). */
TEST(test_json_constraint_vs_jansson) {
    const char *docs[] = {
        "{\"a\": [1, 2.5, -3e2, true, false, null], \"b\": {\"c\": \"d e\", \"f\": {}}, \"g\": []}",
        "{\"key\":\"v\\\"q\\\\\",\"n\":-0.0,\"arr\":[[],[{}],[1,[2,[3]]]],\"t\":true}",
        "{ \"x\" : 10 , \"y\" : \"\xC3\xA9\xE2\x82\xAC\" }",
    };
    const char alphabet[] = "{}[]\":,.-+0123456789eEtrufalsn \\\n\xC3\xA9x";
    json_constraint *c = compile_str(NULL);
    if (!c) return;
    unsigned seed = 12345;
    int agree = 0, total = 0, accepted = 0;
    char buf[512];
    for (size_t d = 0; d < sizeof docs / sizeof docs[0]; d++) {
        size_t n = strlen(docs[d]);
        for (int trial = 0; trial < 4000; trial++) {
            seed = seed * 1103515245u + 12345u;
            size_t at = (seed >> 8) % n;
            char ch = alphabet[(seed >> 20) % (sizeof alphabet - 1)];
            int op = (seed >> 28) % 3;
            size_t m = 0;
            for (size_t i = 0; i < n; i++) {
                if (i == at && op == 0) continue;           /* delete */
                if (i == at && op == 1) buf[m++] = ch;      /* insert */
                buf[m++] = i == at && op == 2 ? ch : docs[d][i]; /* replace */
            }
            while (m && (buf[m - 1] == ' ' || buf[m - 1] == '\n')) m--; /* jansson allows trailing space, we end at the document */
            buf[m] = 0;
            if (strlen(buf) != m) continue;
            json_error_t je;
            json_t *j = json_loads(buf, 0, &je);
            bool theirs = j && json_is_object(j);
            json_decref(j);
            bool early;
            bool ours = verdict(c, buf, &early) == 1;
            total++;
            accepted += ours;
            if (ours == theirs) agree++;
            else if (total - agree <= 5)
                printf("    disagree on %s: ours %d, jansson %d (%s)\n", buf, ours, theirs, theirs ? "" : je.text);
        }
    }
    printf("    %d/%d mutated documents judged alike (%d valid)\n", agree, total, accepted);
    CHECK_EQ_INT(agree, total);
    CHECK(accepted > 100 && accepted < total - 100); /* both verdicts exercised */
    jc_free(c);
}

/* token_mask_fill equals feeding each token alone, in several states. */
TEST(test_json_constraint_token_mask) {
    const char *p = test_shared_path("models/tinycoder");
    if (!p) SKIP("../shared/models/tinycoder absent");
    tokenizer *t = NULL;
    CHECK(tok_load(&t, p) == 0);
    if (!t) return;
    int V = tok_vocab_size(t);
    token_mask *m = token_mask_new(t, V + 7); /* ids past the tokenizer's: never allowed */
    CHECK(m != NULL);
    const char *schema = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"n\":{\"type\":\"number\"},"
                         "\"e\":{\"enum\":[\"alpha\",\"beta\"]},\"s\":{\"type\":\"string\",\"maxLength\":4},"
                         "\"m\":{\"type\":\"string\",\"minLength\":3},"
                         "\"p\":{\"type\":\"string\",\"pattern\":\"^[a-z\xC3\xA9]+-\\\\d{2}$\",\"maxLength\":8}},\"required\":[\"name\"]}";
    /* the last prefix is a finished document; those after it run under the
     * any-object constraint (free keys, a character cut in two, an escape) */
    const char *prefixes[] = { "", "{", "{\"na", "{\"name\": \"x y", "{\"name\": \"x\", \"n\": 1", "{\"name\": \"x\", \"e\": \"al",
                               "{\"s\": \"ab", "{\"s\": \"a\xC3\xA9\\t", "{\"m\": \"a", "{\"p\": \"ab\xC3", "{\"p\": \"abcde-",
                               "{\"name\": \"x\", \"n\": 2}", "{\"k", "{\"k\": \"v\xC3", "{\"k\": \"v\\", "{\"k\": [\"\xE2\x82",
                               "<think>so", "<think>so </th", "<think>so </think>\n" }; /* the last three with the think allowance */
    const int last_schema = 11;
    json_constraint *c = compile_str(schema), *any = compile_str(NULL);
    uint8_t *allowed = malloc((size_t)V + 7);
    double t_fill = 0;
    for (size_t i = 0; c && any && m && i < sizeof prefixes / sizeof prefixes[0]; i++) {
        jc_state s;
        jc_start(&s, (int)i > last_schema ? any : c, i + 3 >= sizeof prefixes / sizeof prefixes[0] ? JC_THINK : 0);
        CHECK(jc_feed(&s, (const uint8_t *)prefixes[i], strlen(prefixes[i])));
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        int n = token_mask_fill(m, &s, allowed);
        clock_gettime(CLOCK_MONOTONIC, &b);
        t_fill += (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
        int brute = 0, wrong = 0;
        for (int id = 0; id < V + 7; id++) {
            bool ok = token_mask_allows(m, &s, id);
            brute += ok;
            if (ok != (allowed[id] == 1)) wrong++;
        }
        CHECK_MSG(wrong == 0 && n == brute, "prefix '%s': %d tokens differ (fill %d, alone %d)", prefixes[i], wrong, n, brute);
        printf("    after '%s': %d of %d tokens allowed\n", prefixes[i], n, V);
        if ((int)i == last_schema) CHECK_EQ_INT(n, 0); /* finished: only EOS (the engine's) */
        else CHECK(n > 0);
        for (int id = V; id < V + 7; id++) CHECK(!allowed[id]);
    }
    /* JC_CALLS: in the text, in a tag, in a call, closing it */
    json_constraint *cc = compile_str(CALL_SCHEMA);
    const char *calls_at[] = { "", "Hi <to", "ok <tool_call>\n{\"na", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
                               "<tool_call>{\"name\": \"now\", \"arguments\": {}}\n</tool", "<think>a <tool_call" };
    for (size_t i = 0; cc && m && i < sizeof calls_at / sizeof calls_at[0]; i++) {
        jc_state s;
        jc_start(&s, cc, JC_CALLS);
        CHECK(jc_feed(&s, (const uint8_t *)calls_at[i], strlen(calls_at[i])));
        int n = token_mask_fill(m, &s, allowed), brute = 0, wrong = 0;
        for (int id = 0; id < V + 7; id++) {
            bool ok = token_mask_allows(m, &s, id);
            brute += ok;
            wrong += ok != (allowed[id] == 1);
        }
        CHECK_MSG(wrong == 0 && n == brute && n > 0, "calls prefix '%s': %d tokens differ (fill %d, alone %d)", calls_at[i],
                  wrong, n, brute);
        printf("    calls, after '%s': %d of %d tokens allowed\n", calls_at[i], n, V);
    }
    jc_free(cc);
    printf("    %.3f ms per mask fill (%d tokens)\n", t_fill * 1e3 / (sizeof prefixes / sizeof prefixes[0]), V);
    free(allowed);
    jc_free(c);
    jc_free(any);
    token_mask_free(m);
    tok_free(t);
}
