/* cli_opts.h — option parsing shared by the subcommands: checked numbers
 * and sizes, text from standard input, and the options `kestrel run` and
 * `kestrel serve` both take for the backend and for speculation (prompt
 * lookup, MTP head, draft model). */
#ifndef KS_CLI_OPTS_H
#define KS_CLI_OPTS_H

#include "engine/engine.h"

/* 0, or -1 after one line on stderr ("kestrel CMD: OPT: expected ...").
 * v may be NULL (a missing value). */
int cli_parse_long(const char *cmd, const char *opt, const char *v, long lo, long hi, long *out);
int cli_parse_double(const char *cmd, const char *opt, const char *v, double lo, double hi, double *out);
/* "4096", "512K", "512M", "2G" -> bytes (>= 1) */
int cli_parse_size(const char *cmd, const char *opt, const char *v, long long *out);

/* All of standard input as one NUL-terminated string (its length in *len;
 * the caller frees it), or NULL after one line on stderr ("kestrel CMD: out
 * of memory"): TEXT given as "-" to run and tokenize. */
char *cli_read_stdin(const char *cmd, size_t *len);

/* The backend and speculation options of run and serve. */
typedef struct {
    const char *device;         /* "auto" */
    long threads;               /* 0: all cores */
    const char *kv_type;        /* NULL: the backend's default (bf16) */
    long pld, pld_key_len, pld_draft_len;
    double pld_min_repetition;  /* < 0: the engine's default */
    long mtp, mtp_depth;
    const char *drafter_dir;    /* NULL: MODEL/drafter, MODEL/dflash when present */
    long no_drafter, draft_block; /* draft_block 0: each drafter's default */
    long no_gates;              /* --no-spec-gates */
} cli_model_opts;

void cli_model_opts_default(cli_model_opts *o);
/* Is argv[*i] one of these options? 1: taken (*i moved past its value),
 * 0: not one of them, -1: bad or missing value (message printed). */
int cli_model_opt(const char *cmd, int argc, char **argv, int *i, cli_model_opts *o);
/* Copies the speculation fields into an engine config (the caller loads the
 * drafter model and sets ec->drafter). */
void cli_model_opts_apply(const cli_model_opts *o, engine_config *ec);
/* Prompt tokens per scheduler step when not given: 512 on the CPU, 2048 on
 * CUDA (the tensor-core GEMMs are saturated by then and the activations of a
 * chunk stay a few hundred MB on an 8B model). */
int cli_default_prefill_chunk(const char *backend_name);
/* The help lines for these options, for the usage texts. */
extern const char cli_model_opts_help[];

#endif
