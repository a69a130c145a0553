/* responses_input.h — the Responses API's request input: the `input` value
 * (a string, or an array of message / function_call / function_call_output
 * / reasoning items) normalized into Responses items, those items turned
 * into chat-template messages, the flat function tools and tool_choice
 * checked and converted. Used by openai_responses.c; errors name the
 * parameter (api_err). */
#ifndef KS_API_RESPONSES_INPUT_H
#define KS_API_RESPONSES_INPUT_H

#include <jansson.h>
#include <stdbool.h>

#include "api/api_parse.h"

/* input -> a new array of normalized items (ids made where missing); NULL
 * with e filled when input is missing or wrong */
json_t *responses_normalize_input(json_t *input, api_err *e);
/* normalized items -> chat-template messages appended to msgs: an assistant
 * turn's text, reasoning and function calls merge into one message */
void responses_items_to_messages(json_t *items, json_t *msgs);
/* flat function tools -> *chat (the chat template's shape) and *echo (the
 * response's echo), both new arrays (empty for no tools): 0 absent, 1 converted, -1 wrong (e filled) */
int responses_convert_tools(json_t *tools, json_t **chat, json_t **echo, api_err *e);
/* tool_choice ("none" | "auto" | "required" | {"type": "function", "name"})
 * -> its echo (new reference; "auto" when absent), *none for "none"; NULL
 * with e filled when wrong */
json_t *responses_check_tool_choice(json_t *tc, bool *none, api_err *e);

#endif
