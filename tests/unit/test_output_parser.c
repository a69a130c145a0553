/* test_output_parser.c — output_parser (content / <think> reasoning / tool
 * calls): each case's pieces when fed whole, and the streaming property: fed
 * in two parts split at every byte, in three parts split at every pair of
 * bytes, and one byte at a time, the parser gives the same pieces (after
 * joining consecutive text pieces of the same kind) as when fed whole. */
#include "test.h"

#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "chat/output_parser.h"

/* Collected pieces, serialized as one string: "C[text]" content, "R[text]"
 * reasoning, "T[name|arguments]" tool call; consecutive C (or R) pieces are
 * joined, so the string does not depend on how the text was chunked. */
typedef struct {
    strbuf out;
    char last;     /* kind of the open text piece: 'C', 'R' or 0 */
    int n_empty;   /* text pieces of length 0 (the parser should not emit them) */
} collect;

static void close_text(collect *c) {
    if (c->last) sb_puts(&c->out, "]");
    c->last = 0;
}

static void on_piece(void *ud, const out_piece *p) {
    collect *c = ud;
    if (p->kind == OUT_TOOL_CALL) {
        close_text(c);
        sb_printf(&c->out, "T[%s|%s]", p->name ? p->name : "(null)", p->arguments ? p->arguments : "(null)");
        return;
    }
    if (!p->len) c->n_empty++;
    char k = p->kind == OUT_REASONING ? 'R' : 'C';
    if (c->last != k) {
        close_text(c);
        sb_printf(&c->out, "%c[", k);
        c->last = k;
    }
    sb_append(&c->out, p->text, p->len);
}

/* Feeds text cut at the given offsets (sorted, in (0, len)); returns the
 * serialized pieces (malloc'd) and the number of tool calls the parser counted. */
static char *parse_cuts(const output_parser_config *cfg, const char *text, const size_t *cuts, int n_cuts,
                        int *n_calls, int *n_empty) {
    output_parser *p = output_parser_new(cfg);
    collect c = {0};
    size_t len = strlen(text), at = 0;
    for (int i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : len;
        output_parser_feed(p, text + at, end - at, on_piece, &c);
        at = end;
    }
    output_parser_finish(p, on_piece, &c);
    close_text(&c);
    if (n_calls) *n_calls = output_parser_n_tool_calls(p);
    if (n_empty) *n_empty = c.n_empty;
    output_parser_free(p);
    return sb_take(&c.out, NULL);
}

static char *parse_bytes(const output_parser_config *cfg, const char *text) {
    output_parser *p = output_parser_new(cfg);
    collect c = {0};
    for (const char *s = text; *s; s++) output_parser_feed(p, s, 1, on_piece, &c);
    output_parser_finish(p, on_piece, &c);
    close_text(&c);
    output_parser_free(p);
    return sb_take(&c.out, NULL);
}

/* Checks the whole-text result against want, the tool-call count, and that
 * every chunking gives the same result. */
static void check_case(const char *name, bool tools, bool think, bool in_think, const char *text, const char *want,
                       int want_calls) {
    output_parser_config cfg = {tools, think, in_think};
    int n_calls = 0, n_empty = 0;
    char *whole = parse_cuts(&cfg, text, NULL, 0, &n_calls, &n_empty);
    CHECK_MSG(!strcmp(whole, want), "%s: whole:\n  got  %s\n  want %s", name, whole, want);
    CHECK_MSG(n_calls == want_calls, "%s: %d tool calls counted, want %d", name, n_calls, want_calls);
    CHECK_MSG(n_empty == 0, "%s: %d empty text pieces", name, n_empty);
    size_t len = strlen(text);
    int bad = 0;
    for (size_t i = 1; i < len && bad < 3; i++) {
        char *got = parse_cuts(&cfg, text, &i, 1, NULL, NULL);
        if (strcmp(got, whole)) {
            test_fail(__FILE__, __LINE__, "%s: split at byte %zu (%.*s|%s):\n  got  %s\n  want %s", name, i, (int)i,
                      text, text + i, got, whole);
            bad++;
        }
        free(got);
    }
    for (size_t i = 1; i < len && !bad; i++)
        for (size_t j = i + 1; j < len && !bad; j++) {
            size_t cuts[2] = {i, j};
            char *got = parse_cuts(&cfg, text, cuts, 2, NULL, NULL);
            if (strcmp(got, whole)) {
                test_fail(__FILE__, __LINE__, "%s: split at bytes %zu, %zu:\n  got  %s\n  want %s", name, i, j, got,
                          whole);
                bad++;
            }
            free(got);
        }
    char *bytes = parse_bytes(&cfg, text);
    CHECK_MSG(!strcmp(bytes, whole), "%s: one byte at a time:\n  got  %s\n  want %s", name, bytes, whole);
    free(bytes);
    free(whole);
}

#define CALL_WEATHER "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}"

TEST(output_parser_plain_text) {
    check_case("plain", false, false, false, "Hello, world!\nSecond line < > { } </x>", "C[Hello, world!\nSecond line < > { } </x>]", 0);
    check_case("plain+tools+think", true, true, false, "a < b and <tool or <thin", "C[a < b and <tool or <thin]", 0);
    /* tags are only recognised when enabled */
    check_case("tags off", false, false, false, "<think>x</think><tool_call>" CALL_WEATHER "</tool_call>",
               "C[<think>x</think><tool_call>" CALL_WEATHER "</tool_call>]", 0);
    check_case("leading whitespace kept", false, false, false, "\n  hi", "C[\n  hi]", 0);
    check_case("only whitespace", true, false, false, " \n ", "C[ \n ]", 0);
    check_case("utf-8", true, true, false, "caf\xc3\xa9 \xe2\x86\x92 <", "C[caf\xc3\xa9 \xe2\x86\x92 <]", 0);
}

TEST(output_parser_hermes_calls) {
    check_case("object args", true, false, false, "<tool_call>\n" CALL_WEATHER "\n</tool_call>",
               "T[get_weather|{\"city\":\"Paris\",\"unit\":\"c\"}]", 1);
    check_case("string args", true, false, false,
               "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>", "T[f|{\"a\": 1}]", 1);
    check_case("no args", true, false, false, "<tool_call>{\"name\": \"now\"}</tool_call>", "T[now|{}]", 1);
    check_case("parameters key", true, false, false, "<tool_call>{\"name\": \"g\", \"parameters\": {\"x\": [1, 2]}}</tool_call>",
               "T[g|{\"x\":[1,2]}]", 1);
    check_case("two calls", true, false, false,
               "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", "
               "\"arguments\": {\"k\": \"v\"}}\n</tool_call>",
               "T[a|{}]T[b|{\"k\":\"v\"}]", 2);
    check_case("text before", true, false, false, "Let me check.\n<tool_call>" CALL_WEATHER "</tool_call>",
               "C[Let me check.\n]T[get_weather|{\"city\":\"Paris\",\"unit\":\"c\"}]", 1);
    check_case("trailing whitespace", true, false, false, "<tool_call>{\"name\": \"a\"}</tool_call> \n",
               "T[a|{}]", 1);
    check_case("text after", true, false, false, "<tool_call>{\"name\": \"a\"}</tool_call>\n done",
               "T[a|{}]C[done]", 1);
}

TEST(output_parser_bad_calls) {
    check_case("malformed json", true, false, false, "x <tool_call>{\"name\": \"a\", </tool_call> y",
               "C[x <tool_call>{\"name\": \"a\", </tool_call> y]", 0);
    check_case("no name", true, false, false, "<tool_call>{\"arguments\": {}}</tool_call>",
               "C[<tool_call>{\"arguments\": {}}</tool_call>]", 0);
    check_case("args not object", true, false, false, "<tool_call>{\"name\": \"a\", \"arguments\": 3}</tool_call>",
               "C[<tool_call>{\"name\": \"a\", \"arguments\": 3}</tool_call>]", 0);
    check_case("unterminated", true, false, false, "ok <tool_call>{\"name\": \"a\", \"arguments\": {}}",
               "C[ok <tool_call>{\"name\": \"a\", \"arguments\": {}}]", 0);
    check_case("unterminated empty", true, false, false, "ok <tool_call>", "C[ok <tool_call>]", 0);
    check_case("partial open tag at end", true, false, false, "ok <tool_ca", "C[ok <tool_ca]", 0);
    check_case("partial close tag at end", true, false, false, "<tool_call>{\"name\": \"a\"}</tool_c",
               "C[<tool_call>{\"name\": \"a\"}</tool_c]", 0);
    check_case("good after bad", true, false, false,
               "<tool_call>nope</tool_call><tool_call>{\"name\": \"b\"}</tool_call>",
               "C[<tool_call>nope</tool_call>]T[b|{}]", 1);
}

TEST(output_parser_think) {
    check_case("think split", false, true, false, "<think>\nplan it\n</think>\n\nThe answer.",
               "R[\nplan it\n]C[The answer.]", 0);
    check_case("in_think start", false, true, true, "plan it</think>\n\nThe answer.", "R[plan it]C[The answer.]", 0);
    check_case("in_think unterminated", false, true, true, "still thinking </thi", "R[still thinking </thi]", 0);
    check_case("content before think", false, true, false, "a<think>b</think>c", "C[a]R[b]C[c]", 0);
    check_case("only newlines dropped", false, true, false, "<think>r</think>\n \nx", "R[r]C[ \nx]", 0);
    check_case("think then call", true, true, false,
               "<think>need weather</think>\n<tool_call>" CALL_WEATHER "</tool_call>",
               "R[need weather]T[get_weather|{\"city\":\"Paris\",\"unit\":\"c\"}]", 1);
    check_case("tool tag inside think", true, true, false, "<think>say <tool_call> later</think>ok",
               "R[say <tool_call> later]C[ok]", 0);
}

TEST(output_parser_bare_json) {
    check_case("llama3 call", true, false, false, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
               "T[get_weather|{\"city\":\"Paris\"}]", 1);
    check_case("llama3 call, leading ws", true, false, false, "\n {\"name\": \"f\", \"arguments\": {\"n\": 1}}",
               "T[f|{\"n\":1}]", 1);
    check_case("json not a call", true, false, false, "{\"answer\": 42}", "C[{\"answer\": 42}]", 0);
    check_case("json then text", true, false, false, "{\"name\": \"f\"} and more", "C[{\"name\": \"f\"} and more]", 0);
    check_case("json without tools", false, false, false, "{\"name\": \"f\", \"parameters\": {}}",
               "C[{\"name\": \"f\", \"parameters\": {}}]", 0);
    check_case("brace later is text", true, false, false, "x {\"name\": \"f\"}", "C[x {\"name\": \"f\"}]", 0);
}

TEST(output_parser_empty) {
    check_case("empty", true, true, false, "", "", 0);
    check_case("empty think", false, true, false, "<think></think>", "", 0);
    check_case("think then bare JSON call", true, true, false, "<think>weather</think>\n\n" CALL_WEATHER,
               "R[weather]T[get_weather|{\"city\":\"Paris\",\"unit\":\"c\"}]", 1);
    check_case("think then JSON, no tools", false, true, false, "<think>w</think>\n{\"a\": 1}", "R[w]C[{\"a\": 1}]", 0);
}
