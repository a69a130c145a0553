/* cli_opts.c — see cli_opts.h. */
#include "cli/cli_opts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_parse_long(const char *cmd, const char *opt, const char *v, long lo, long hi, long *out) {
    char *end = NULL;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || *end || end == v || x < lo || x > hi) {
        fprintf(stderr, "kestrel %s: %s: expected an integer in [%ld, %ld], got '%s'\n", cmd, opt, lo, hi,
                v ? v : "");
        return -1;
    }
    *out = x;
    return 0;
}

int cli_parse_double(const char *cmd, const char *opt, const char *v, double lo, double hi, double *out) {
    char *end = NULL;
    errno = 0;
    double x = v ? strtod(v, &end) : 0;
    if (!v || errno || *end || end == v || !(x >= lo && x <= hi)) {
        fprintf(stderr, "kestrel %s: %s: expected a number in [%g, %g], got '%s'\n", cmd, opt, lo, hi, v ? v : "");
        return -1;
    }
    *out = x;
    return 0;
}

int cli_parse_size(const char *cmd, const char *opt, const char *v, long long *out) {
    char *end = NULL;
    errno = 0;
    double x = v ? strtod(v, &end) : -1;
    if (v && end != v) {
        double unit = 1;
        switch (*end) {
        case 'k': case 'K': unit = 1024.0; break;
        case 'm': case 'M': unit = 1024.0 * 1024; break;
        case 'g': case 'G': unit = 1024.0 * 1024 * 1024; break;
        }
        if (unit > 1) end++;
        x *= unit;
    }
    if (!v || errno || end == v || *end || !(x >= 1 && x < 9e18)) {
        fprintf(stderr, "kestrel %s: %s: expected a size like 512M or 2G, got '%s'\n", cmd, opt, v ? v : "");
        return -1;
    }
    *out = (long long)x;
    return 0;
}

char *cli_read_stdin(const char *cmd, size_t *len) {
    size_t cap = 0, n = 0;
    char *text = NULL;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(text, cap);
            if (!nb) {
                free(text);
                fprintf(stderr, "kestrel %s: out of memory\n", cmd);
                return NULL;
            }
            text = nb;
        }
        size_t r = fread(text + n, 1, cap - n - 1, stdin);
        n += r;
        if (r == 0) break;
    }
    text[n] = 0;
    *len = n;
    return text;
}

void cli_model_opts_default(cli_model_opts *o) {
    *o = (cli_model_opts){.device = "auto", .pld = 1, .pld_key_len = 3, .pld_draft_len = 5,
                          .pld_min_repetition = -1, .mtp = 1, .mtp_depth = 3, .draft_block = 0};
}

int cli_model_opt(const char *cmd, int argc, char **argv, int *i, cli_model_opts *o) {
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    /* flags without a value */
    if (!strcmp(a, "--pld")) o->pld = 1;
    else if (!strcmp(a, "--no-pld")) o->pld = 0;
    else if (!strcmp(a, "--mtp")) o->mtp = 1;
    else if (!strcmp(a, "--no-mtp")) o->mtp = 0;
    else if (!strcmp(a, "--no-drafter")) o->no_drafter = 1;
    else if (!strcmp(a, "--no-spec-gates")) o->no_gates = 1;
    else {
        int bad = 0;
        if (!strcmp(a, "--device") || !strcmp(a, "--drafter") || !strcmp(a, "--kv-type")) {
            if (!v) { fprintf(stderr, "kestrel %s: %s needs a value\n", cmd, a); return -1; }
            *(!strcmp(a, "--device") ? &o->device : !strcmp(a, "--kv-type") ? &o->kv_type : &o->drafter_dir) = v;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) bad = cli_parse_long(cmd, a, v, 1, 1024, &o->threads);
        else if (!strcmp(a, "--mtp-depth")) bad = cli_parse_long(cmd, a, v, 1, ENGINE_MAX_DRAFT, &o->mtp_depth);
        else if (!strcmp(a, "--draft-block-size")) bad = cli_parse_long(cmd, a, v, 1, ENGINE_MAX_DRAFT, &o->draft_block);
        else if (!strcmp(a, "--pld-key-len")) bad = cli_parse_long(cmd, a, v, 1, 8, &o->pld_key_len);
        else if (!strcmp(a, "--pld-draft-len")) bad = cli_parse_long(cmd, a, v, 1, ENGINE_MAX_DRAFT, &o->pld_draft_len);
        else if (!strcmp(a, "--pld-min-repetition")) bad = cli_parse_double(cmd, a, v, 0, 1, &o->pld_min_repetition);
        else return 0;
        if (bad) return -1;
        (*i)++;
    }
    return 1;
}

void cli_model_opts_apply(const cli_model_opts *o, engine_config *ec) {
    ec->pld = o->pld != 0;
    ec->pld_key_len = (int)o->pld_key_len;
    ec->pld_draft_len = (int)o->pld_draft_len;
    ec->spec_min_repetition = o->pld_min_repetition;
    ec->drafter_len = (int)o->draft_block;   /* 0: the engine's defaults (4; the */
    ec->dflash_block = (int)o->draft_block;  /* DFlash checkpoint's block size) */
    ec->mtp = o->mtp != 0;
    ec->mtp_depth = (int)o->mtp_depth;
    if (o->no_gates) {
        ec->no_runtime_gates = true;
        ec->spec_min_repetition = 0;
    }
}

const char cli_model_opts_help[] =
    "  --threads N            CPU threads (default: all cores)\n"
    "  --device D             cpu, cuda or cuda:N (default: cuda when a GPU is present)\n"
    "  --kv-type T            KV cache elements: bf16 (default) or f32 (CPU only: the float32\n"
    "                         attention transformers computes, at twice the KV bytes)\n"
    "  --drafter DIR          draft model or DFlash block drafter (default: MODEL/drafter and\n"
    "                         MODEL/dflash when present); --no-drafter: neither\n"
    "  --draft-block-size N   most drafter tokens per verify step (default 4), DFlash block size\n"
    "                         (default: the checkpoint's; a controller verifies 1..N-1 drafts)\n"
    "  --mtp / --no-mtp       draft with the model's own MTP head when it has one (default on;\n"
    "                         per request in serve: \"enable_mtp\": true|false)\n"
    "  --mtp-depth N          most MTP drafts per step (default 3; a controller picks 1..N)\n"
    "  --pld / --no-pld       prompt lookup decoding (speculative, exact; default on)\n"
    "  --pld-key-len N        n-gram length looked up (default 3)\n"
    "  --pld-draft-len N      draft tokens per verify step (default 5, at most 16)\n"
    "  --pld-min-repetition X prompt gate: 3-gram repetition score below which a request\n"
    "                         runs without speculation (default 0.02, prompts of 256+ tokens; 0 = off)\n"
    "  --no-spec-gates        verify every draft offered, whatever the measured costs (both gates\n"
    "                         off: for measuring acceptance, not for speed)\n";

int cli_default_prefill_chunk(const char *backend_name) { return strcmp(backend_name, "cpu") ? 2048 : 512; }
