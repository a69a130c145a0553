/* test_api_truncate.c — which messages a chat too long for the context
 * keeps (api_chat_dropping, the rule api_render_chat_fitting searches
 * over): every system message wherever it stands, the last message always,
 * the others from the oldest, a tool result that would lead the kept ones
 * with its call. Messages are written as "role:text" and compared as such. */
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_truncate.h"
#include "base/strbuf.h"

/* "user:a,assistant:b" -> [{"role":"user","content":"a"}, ...] */
static json_t *chat_of(const char *spec) {
    json_t *msgs = json_array();
    char buf[512];
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(tok, ':');
        *colon = 0;
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", tok, "content", colon + 1));
    }
    return msgs;
}

/* the kept chat back in the same notation */
static char *spec_of(json_t *msgs) {
    strbuf s = {0};
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        if (i) sb_puts(&s, ",");
        sb_puts(&s, json_string_value(json_object_get(m, "role")));
        sb_puts(&s, ":");
        sb_puts(&s, json_string_value(json_object_get(m, "content")));
    }
    return sb_take(&s, NULL);
}

static void check_drop(const char *chat, size_t k, const char *want) {
    json_t *msgs = chat_of(chat), *kept = api_chat_dropping(msgs, k);
    char *got = spec_of(kept);
    CHECK_MSG(!strcmp(got, want), "drop %zu of [%s]: got [%s], want [%s]", k, chat, got, want);
    free(got);
    got = spec_of(msgs);
    CHECK_MSG(!strcmp(got, chat), "the chat itself changed: [%s]", got);
    free(got);
    json_decref(kept);
    json_decref(msgs);
}

TEST(test_api_chat_dropping_keeps_system_and_last) {
    const char *chat = "system:S,user:a,assistant:b,user:c,assistant:d,user:e";
    check_drop(chat, 0, chat);
    check_drop(chat, 1, "system:S,assistant:b,user:c,assistant:d,user:e");
    check_drop(chat, 2, "system:S,user:c,assistant:d,user:e");
    check_drop(chat, 4, "system:S,user:e");
    check_drop(chat, 9, "system:S,user:e"); /* past the droppable ones: the same */
    /* a system message in the middle stays where it was */
    check_drop("system:S,user:a,system:T,user:c,user:e", 2, "system:S,system:T,user:e");
    check_drop("system:S,user:a,system:T,user:c,user:e", 1, "system:S,system:T,user:c,user:e");
    /* no system message; a single message */
    check_drop("user:a,assistant:b,user:c", 2, "user:c");
    check_drop("user:a", 3, "user:a");
}

TEST(test_api_chat_dropping_takes_tool_results_with_their_call) {
    const char *chat = "system:S,user:a,assistant:call,tool:r1,tool:r2,assistant:b,user:c";
    check_drop(chat, 1, "system:S,assistant:call,tool:r1,tool:r2,assistant:b,user:c");
    check_drop(chat, 2, "system:S,assistant:b,user:c"); /* the call went: its results too */
    check_drop(chat, 3, "system:S,assistant:b,user:c");
    /* with nothing dropped, a chat that starts with a tool result is left as it is */
    check_drop("tool:r,user:c", 0, "tool:r,user:c");
    /* the last message is kept even when it is a tool result */
    check_drop("user:a,assistant:call,tool:r", 2, "tool:r");
}
