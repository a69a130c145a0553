/* output_parser.h — splits generated text into content, reasoning
 * (<think>...</think>) and tool calls (Hermes/Qwen <tool_call>{json}</tool_call>,
 * Llama 3 bare JSON {"name": ..., "parameters": ...}), incrementally, so the
 * same parser serves streaming and non-streaming responses.
 *
 * Text that might be the start of a tag is held back until it is decided.
 * A tool call whose JSON does not parse (or lacks a name) comes back as
 * content, verbatim. Pieces are delivered through a callback; their strings
 * are valid only during the call. */
#ifndef KS_OUTPUT_PARSER_H
#define KS_OUTPUT_PARSER_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { OUT_CONTENT = 0, OUT_REASONING, OUT_TOOL_CALL } out_kind;

typedef struct {
    out_kind kind;
    const char *text;       /* CONTENT / REASONING */
    size_t len;
    const char *name;       /* TOOL_CALL: function name */
    const char *arguments;  /* TOOL_CALL: arguments as compact JSON text */
} out_piece;

typedef void (*out_emit)(void *ud, const out_piece *p);

typedef struct {
    bool tools;             /* the request offered tools: parse tool calls */
    bool think;             /* the model has <think> tags: split reasoning */
    bool in_think;          /* the prompt already opened <think> */
} output_parser_config;

typedef struct output_parser output_parser;

output_parser *output_parser_new(const output_parser_config *cfg);
void output_parser_feed(output_parser *p, const char *text, size_t len, out_emit emit, void *ud);
/* End of generation: flushes held text, resolves unterminated tags. */
void output_parser_finish(output_parser *p, out_emit emit, void *ud);
int output_parser_n_tool_calls(const output_parser *p);
void output_parser_free(output_parser *p);

#endif
