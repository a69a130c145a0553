/* cmd_tokenize.c — `kestrel tokenize PATH TEXT [--add-special]`: loads the
 * tokenizer (PATH: a model directory or a tokenizer.json) and prints the ids
 * of TEXT (standard input where TEXT is "-") as one JSON array on one line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "tok/tok.h"

static void usage(FILE *f) {
    fprintf(f, "usage: kestrel tokenize PATH TEXT [--add-special]\n"
               "  PATH           model directory (with tokenizer.json) or a tokenizer.json\n"
               "  TEXT           text to encode (-: standard input, e.g. past the argument size limit)\n"
               "  --add-special  add the post-processor's special tokens (e.g. BOS)\n"
               "prints the token ids as a JSON array\n");
}

int cmd_tokenize(int argc, char **argv) {
    const char *pos[2] = { NULL, NULL };
    int n_pos = 0;
    bool add_special = false, only_pos = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!only_pos && !strcmp(a, "--")) only_pos = true;
        else if (!only_pos && (!strcmp(a, "-h") || !strcmp(a, "--help"))) {
            usage(stdout);
            return 0;
        } else if (!only_pos && !strcmp(a, "--add-special")) add_special = true;
        else if (!only_pos && a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "kestrel tokenize: unknown option '%s'\n", a);
            return 2;
        } else if (n_pos < 2) pos[n_pos++] = a;
        else {
            fprintf(stderr, "kestrel tokenize: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    if (n_pos != 2) {
        usage(stderr);
        return 2;
    }
    const char *text = pos[1];
    size_t len = strlen(text);
    char *stdin_text = NULL;
    if (!strcmp(text, "-") && !(text = stdin_text = cli_read_stdin("tokenize", &len))) return 1;
    tokenizer *t = NULL;
    if (tok_load(&t, pos[0]) < 0) {
        fprintf(stderr, "kestrel tokenize: %s\n", err_msg());
        free(stdin_text);
        return 1;
    }
    int32_t *ids = NULL;
    int n = 0;
    int rc = tok_encode(t, text, len, add_special, &ids, &n);
    free(stdin_text);
    if (rc < 0) {
        fprintf(stderr, "kestrel tokenize: %s\n", err_msg());
        tok_free(t);
        return 1;
    }
    putchar('[');
    for (int i = 0; i < n; i++) printf(i ? ", %d" : "%d", (int)ids[i]);
    printf("]\n");
    free(ids);
    tok_free(t);
    return fflush(stdout) == 0 ? 0 : 1;
}
