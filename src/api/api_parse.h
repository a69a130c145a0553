/* api_parse.h — typed access to request JSON with errors that name the
 * parameter: each getter returns 0 when the field is absent (out untouched),
 * 1 when present and valid, -1 when present but wrong (err filled). */
#ifndef KS_API_PARSE_H
#define KS_API_PARSE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "engine/engine.h"

typedef struct {
    char msg[512];
    const char *param;  /* static: the offending parameter */
} api_err;

int api_get_num(json_t *o, const char *key, double lo, double hi, double *out, api_err *e);
int api_get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, api_err *e);
int api_get_bool(json_t *o, const char *key, bool *out, api_err *e);
int api_get_str(json_t *o, const char *key, const char **out, api_err *e);
/* "stop": a string or an array of strings (at most ENGINE_MAX_STOP); the
 * strings stay owned by o. */
int api_get_stop(json_t *o, const char *key, engine_params *p, api_err *e);
/* OpenAI's "logit_bias": an object of token-id strings to biases in [-100,
 * 100] (at most ENGINE_MAX_LOGIT_BIAS; the ids are checked against the
 * vocabulary when the request is submitted). 0 absent, 1 read, -1 bad. */
int api_get_logit_bias(json_t *o, engine_params *p, api_err *e);
/* Output constraints (sample/json_constraint.h). OpenAI's response_format
 * at o[key]: {"type": "text"} none, {"type": "json_object"} any object,
 * {"type": "json_schema", "json_schema": {"name", "schema", "strict"}} that
 * schema — or, with `flat` (the Responses API's text.format), the
 * json_schema fields beside "type". Ollama's "format": "json" (any object)
 * or a schema object. 0 none, 1 *out compiled (the caller jc_free()s it),
 * -1 bad (the schema's refusal in err). */
int api_get_response_format(json_t *o, const char *key, bool flat, json_constraint **out, api_err *e);
int api_get_ollama_format(json_t *o, json_constraint **out, api_err *e);
/* A forced tool call (tool_choice "required" / a named function; Anthropic's
 * "any" / "tool"): the answer constrained to one {"name": ..., "arguments":
 * ...} object, which the output parser turns into a tool call on every
 * surface. tools: chat-shaped [{"type": "function", "function": {"name",
 * "parameters"}}]; name: the function named, or NULL for any of them (a
 * union told apart by "name", which is then written first). The arguments
 * follow the tool's parameters schema. 1 *out compiled (caller jc_free()s),
 * -1 bad (param named: no such tool, or a schema that cannot be enforced). */
int api_forced_tool_call(json_t *tools, const char *name, const char *param, json_constraint **out, api_err *e);
/* Tools marked "strict": true under tool_choice auto: every <tool_call> the
 * model opens (Hermes / Qwen syntax) is constrained to a call of one of the
 * tools, a strict tool's arguments following its parameters schema (the
 * others': any object); the text around the calls stays free (the caller
 * sets engine_params.constraint_calls). Any of the three tool shapes (Chat
 * Completions, Responses, Anthropic). 0 no strict tool, 1 *out compiled,
 * -1 bad. */
int api_strict_tool_calls(json_t *tools, json_constraint **out, api_err *e);
/* Sampling fields shared by the surfaces: temperature, top_p, top_k, min_p,
 * presence/frequency penalty, repetition_penalty (Ollama: repeat_penalty),
 * seed, stop. 0 or -1 (err filled). */
int api_get_sampling(json_t *o, engine_params *p, bool ollama, api_err *e);
/* Type checks of fields a surface accepts but does not otherwise read (so
 * that a wrong type is a 400, as the original APIs answer). */
enum { API_T_STR = 1, API_T_NUM = 2, API_T_BOOL = 4, API_T_OBJ = 8, API_T_ARR = 16 };
typedef struct {
    const char *key;
    unsigned types;
} api_field;
int api_check_fields(json_t *o, const api_field *f, int n, api_err *e);
/* Parses the body; NULL with e filled ("invalid JSON at line:col ..." or "the
 * request body must be a JSON object"). */
json_t *api_parse_body(const char *body, size_t len, api_err *e);

#endif
