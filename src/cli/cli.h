/* cli.h — the kestrel subcommands (argument parsing only; the work is in the
 * layers below). Each returns the process exit status. */
#ifndef KS_CLI_H
#define KS_CLI_H

int cmd_run(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_bench(int argc, char **argv);

/* chat_repl.c: the interactive chat of `kestrel run MODEL` without -p. All
 * pointers are borrowed; params->max_tokens caps each reply. Returns the
 * exit status (0 at /exit or end of input). */
#include <stdbool.h>
#include "backend/backend.h"
#include "chat/chat_template.h"
#include "model/dflash.h"
#include "model/model.h"
#include "engine/engine.h"
typedef struct {
    engine *eng;
    const tokenizer *tok;
    const chat_template *tmpl;
    const engine_params *params;  /* sampling, eos, max tokens per reply */
    int ctx_size;                 /* the engine's context (prompt + reply) */
    bool think;                   /* the vocabulary has <think> / </think> */
    const char *hw;               /* e.g. "cpu AVX2, 2 threads", for the speed line */
} chat_repl_config;
int chat_repl(const chat_repl_config *cfg);

/* drafter_load.c: the draft model and the DFlash drafter for serve/run
 * (NULL where there is none or they are disabled; the caller frees the
 * DFlash drafter before the target). Nonzero with err_msg() when a drafter
 * was asked for or found but cannot serve this model. */
int cli_load_drafters(const char *model_dir, const char *drafter_dir, int disabled, backend *be, model *target,
                      model **dm, dflash **fl);

#endif
