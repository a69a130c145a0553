/* responses_input.c — the Responses API's request input (responses_input.h):
 * normalizing `input` into Responses items, items to chat-template
 * messages, and the flat function tools and tool_choice. */
#include "api/responses_input.h"

#include <stdlib.h>
#include <string.h>

#include "api/api_common.h"

static bool role_ok(const char *r) {
    return r && (!strcmp(r, "user") || !strcmp(r, "assistant") || !strcmp(r, "system") || !strcmp(r, "developer"));
}

/* Text of a content value: a string, or an array of text parts. NULL (e
 * filled) when wrong. Returns a new string reference. */
static json_t *content_text(json_t *c, size_t i, const char *field, api_err *e) {
    if (json_is_string(c)) return json_incref(c);
    if (!json_is_array(c)) {
        api_fail(e, "input", "input[%zu].%s: expected a string or an array of content parts", i, field);
        return NULL;
    }
    static const char *const types[] = {"input_text", "output_text", "text", "refusal", NULL};
    strbuf t = {0};
    long k = api_join_text_parts(c, types, NULL, &t);
    if (k >= 0) {
        api_fail(e, "input", "input[%zu].%s[%ld]: only text parts (input_text, output_text) are supported", i, field, k);
        return NULL;
    }
    json_t *r = json_stringn(t.s ? t.s : "", t.len);
    sb_free(&t);
    return r;
}

static json_t *msg_item(const char *id, const char *role, json_t *text /* consumed */) {
    bool asst = !strcmp(role, "assistant");
    json_t *part = asst ? json_pack("{s:s, s:o, s:[]}", "type", "output_text", "text", text, "annotations")
                        : json_pack("{s:s, s:o}", "type", "input_text", "text", text);
    char mid[64];
    if (!id) api_make_id(mid, sizeof mid, "msg_");
    return json_pack("{s:s, s:s, s:s, s:s, s:[o]}", "id", id ? id : mid, "type", "message", "status", "completed",
                     "role", role, "content", part);
}

static const char *opt_id(json_t *it) { return json_string_value(json_object_get(it, "id")); }

/* input (string or array of items) -> normalized items; NULL with e filled. */
json_t *responses_normalize_input(json_t *input, api_err *e) {
    if (!input || json_is_null(input)) {
        api_fail(e, "input", "Missing required parameter: 'input'.");
        return NULL;
    }
    if (json_is_string(input)) {
        if (!json_string_length(input)) {
            api_fail(e, "input", "'input' must not be empty");
            return NULL;
        }
        json_t *items = json_array();
        json_array_append_new(items, msg_item(NULL, "user", json_incref(input)));
        return items;
    }
    if (!json_is_array(input) || !json_array_size(input)) {
        api_fail(e, "input", "'input' must be a non-empty string or a non-empty array of input items");
        return NULL;
    }
    json_t *items = json_array();
    size_t i;
    json_t *it;
    json_array_foreach(input, i, it) {
        if (!json_is_object(it)) {
            api_fail(e, "input", "input[%zu]: expected an object", i);
            goto bad;
        }
        json_t *tv = json_object_get(it, "type");
        if (tv && !json_is_string(tv)) {
            api_fail(e, "input", "input[%zu].type: expected a string", i);
            goto bad;
        }
        const char *type = tv ? json_string_value(tv) : "message";
        if (!strcmp(type, "message")) {
            const char *role = json_string_value(json_object_get(it, "role"));
            if (!role_ok(role)) {
                api_fail(e, "input", "input[%zu].role: must be one of user, assistant, system, developer", i);
                goto bad;
            }
            json_t *c = json_object_get(it, "content");
            if (!c) {
                api_fail(e, "input", "input[%zu]: 'content' is required", i);
                goto bad;
            }
            json_t *txt = content_text(c, i, "content", e);
            if (!txt) goto bad;
            json_array_append_new(items, msg_item(opt_id(it), role, txt));
        } else if (!strcmp(type, "function_call")) {
            json_t *cid = json_object_get(it, "call_id"), *name = json_object_get(it, "name"),
                   *args = json_object_get(it, "arguments");
            if (!json_is_string(cid) || !json_is_string(name)) {
                api_fail(e, "input", "input[%zu]: a function_call needs string 'call_id' and 'name'", i);
                goto bad;
            }
            char *argtext = NULL;
            if (json_is_string(args)) argtext = strdup(json_string_value(args));
            else if (json_is_object(args)) argtext = json_dumps(args, JSON_COMPACT);
            else if (!args || json_is_null(args)) argtext = strdup("{}");
            if (!argtext) {
                api_fail(e, "input", "input[%zu].arguments: expected a JSON string", i);
                goto bad;
            }
            char fid[64];
            if (!opt_id(it)) api_make_id(fid, sizeof fid, "fc_");
            json_array_append_new(items, json_pack("{s:s, s:s, s:s, s:s, s:O, s:O}", "id", opt_id(it) ? opt_id(it) : fid,
                                                   "type", "function_call", "status", "completed", "arguments",
                                                   argtext, "call_id", cid, "name", name));
            free(argtext);
        } else if (!strcmp(type, "function_call_output")) {
            json_t *cid = json_object_get(it, "call_id"), *o = json_object_get(it, "output");
            if (!json_is_string(cid)) {
                api_fail(e, "input", "input[%zu]: a function_call_output needs a string 'call_id'", i);
                goto bad;
            }
            json_t *txt = o ? content_text(o, i, "output", e) : NULL;
            if (!txt) {
                if (!o) api_fail(e, "input", "input[%zu]: a function_call_output needs 'output' (a string)", i);
                goto bad;
            }
            char fid[64];
            if (!opt_id(it)) api_make_id(fid, sizeof fid, "fco_");
            json_array_append_new(items, json_pack("{s:s, s:s, s:s, s:O, s:o}", "id", opt_id(it) ? opt_id(it) : fid,
                                                   "type", "function_call_output", "status", "completed", "call_id",
                                                   cid, "output", txt));
        } else if (!strcmp(type, "reasoning")) {
            /* raw reasoning (content) goes back to the template; summaries are kept as given */
            strbuf t = {0};
            size_t k;
            json_t *part;
            json_array_foreach(json_object_get(it, "content"), k, part) {
                json_t *tx = json_object_get(part, "text");
                if (json_is_string(tx)) sb_append(&t, json_string_value(tx), json_string_length(tx));
            }
            json_t *sum = json_object_get(it, "summary");
            char rid[64];
            if (!opt_id(it)) api_make_id(rid, sizeof rid, "rs_");
            json_array_append_new(items, json_pack("{s:s, s:s, s:o, s:[{s:s, s:s%}]}", "id",
                                                   opt_id(it) ? opt_id(it) : rid, "type", "reasoning", "summary",
                                                   json_is_array(sum) ? json_incref(sum) : json_array(),
                                                   "content", "type", "reasoning_text", "text", t.s ? t.s : "", t.len));
            sb_free(&t);
        } else {
            api_fail(e, "input", "input[%zu]: item type '%.64s' is not supported (message, function_call, "
                 "function_call_output, reasoning)", i, type);
            goto bad;
        }
    }
    return items;
bad:
    json_decref(items);
    return NULL;
}

static const char *item_text(json_t *item) {
    json_t *c = json_array_get(json_object_get(item, "content"), 0);
    return api_str_or(json_object_get(c, "text"), "");
}

/* Normalized items -> chat-template messages (appended to msgs). Assistant
 * text, reasoning and function calls of one turn merge into one message. */
void responses_items_to_messages(json_t *items, json_t *msgs) {
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it) {
        const char *type = api_str_or(json_object_get(it, "type"), "");
        json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
        bool last_asst = last && !strcmp(api_str_or(json_object_get(last, "role"), ""), "assistant");
        if (!strcmp(type, "message")) {
            const char *role = api_str_or(json_object_get(it, "role"), "user");
            if (!strcmp(role, "developer")) role = "system";
            if (!strcmp(role, "assistant") && last_asst && !json_object_get(last, "tool_calls") &&
                !json_string_length(json_object_get(last, "content"))) {
                json_object_set_new(last, "content", json_string(item_text(it)));
                continue;
            }
            json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", role, "content", item_text(it)));
        } else if (!strcmp(type, "reasoning")) {
            json_array_append_new(msgs, json_pack("{s:s, s:s, s:s}", "role", "assistant", "content", "",
                                                  "reasoning_content", item_text(it)));
        } else if (!strcmp(type, "function_call")) {
            /* templates want arguments as an object */
            const char *args = api_str_or(json_object_get(it, "arguments"), "{}");
            json_t *argv = json_loads(args, JSON_DECODE_ANY, NULL);
            if (!argv) argv = json_string(args);
            json_t *call = json_pack("{s:O?, s:s, s:{s:O?, s:o}}", "id", json_object_get(it, "call_id"), "type",
                                     "function", "function", "name", json_object_get(it, "name"), "arguments", argv);
            if (!last_asst) {
                last = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
                json_array_append_new(msgs, last);
            }
            json_t *tc = json_object_get(last, "tool_calls");
            if (!tc) json_object_set_new(last, "tool_calls", tc = json_array());
            json_array_append_new(tc, call);
        } else if (!strcmp(type, "function_call_output")) {
            json_array_append_new(msgs, json_pack("{s:s, s:O?, s:s}", "role", "tool", "tool_call_id",
                                                  json_object_get(it, "call_id"), "content",
                                                  api_str_or(json_object_get(it, "output"), "")));
        }
    }
}

/* Flat function tools -> chat-template tools (*chat) and the echoed form
 * (*echo). 0 absent, 1 ok, -1 bad. */
int responses_convert_tools(json_t *tools, json_t **chat, json_t **echo, api_err *e) {
    *chat = json_array();
    *echo = json_array();
    if (!tools || json_is_null(tools)) return 0;
    if (!json_is_array(tools)) return api_fail(e, "tools", "'tools' must be an array");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *type = json_string_value(json_object_get(t, "type"));
        if (!json_is_object(t) || !type) return api_fail(e, "tools", "tools[%zu]: expected an object with a 'type'", i);
        if (strcmp(type, "function"))
            return api_fail(e, "tools", "tools[%zu]: tool type '%.64s' is not supported (only 'function')", i, type);
        json_t *src = t;
        if (!json_object_get(t, "name") && json_is_object(json_object_get(t, "function")))
            src = json_object_get(t, "function"); /* Chat Completions shape, tolerated */
        json_t *name = json_object_get(src, "name"), *desc = json_object_get(src, "description"),
               *params = json_object_get(src, "parameters"), *strict = json_object_get(src, "strict");
        if (!json_is_string(name) || !json_string_length(name))
            return api_fail(e, "tools", "tools[%zu]: 'name' (a string) is required", i);
        if (desc && !json_is_null(desc) && !json_is_string(desc))
            return api_fail(e, "tools", "tools[%zu].description: expected a string", i);
        if (params && !json_is_null(params) && !json_is_object(params))
            return api_fail(e, "tools", "tools[%zu].parameters: expected a JSON Schema object", i);
        if (strict && !json_is_null(strict) && !json_is_boolean(strict))
            return api_fail(e, "tools", "tools[%zu].strict: expected a boolean", i);
        json_t *fn = json_pack("{s:O}", "name", name);
        if (json_is_string(desc)) json_object_set(fn, "description", desc);
        if (json_is_object(params)) json_object_set(fn, "parameters", params);
        json_array_append_new(*chat, json_pack("{s:s, s:o}", "type", "function", "function", fn));
        json_array_append_new(*echo, json_pack("{s:s, s:O, s:O?, s:O?, s:O?}", "type", "function", "name", name,
                                               "description", json_is_string(desc) ? desc : NULL, "parameters",
                                               json_is_object(params) ? params : NULL, "strict",
                                               json_is_boolean(strict) ? strict : NULL));
    }
    return 1;
}

/* tool_choice: "none" | "auto" | "required" | {"type": "function", "name": ...}.
 * Returns the echoed value (new reference) or NULL (e filled). */
json_t *responses_check_tool_choice(json_t *tc, bool *none, api_err *e) {
    *none = false;
    if (!tc || json_is_null(tc)) return json_string("auto");
    if (json_is_string(tc)) {
        const char *v = json_string_value(tc);
        if (strcmp(v, "none") && strcmp(v, "auto") && strcmp(v, "required")) {
            api_fail(e, "tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"name\": ...}");
            return NULL;
        }
        *none = !strcmp(v, "none");
        return json_incref(tc);
    }
    const char *type = json_string_value(json_object_get(tc, "type"));
    if (type && !strcmp(type, "function") && !json_is_string(json_object_get(tc, "name"))) {
        api_fail(e, "tool_choice", "'tool_choice' of type 'function' needs the function's 'name'");
        return NULL;
    }
    if (json_is_object(tc) && type) return json_incref(tc);
    api_fail(e, "tool_choice", "'tool_choice' must be a string or an object with a 'type'");
    return NULL;
}

