/* main.c — `kestrel <command> ...`: dispatches to the subcommands in cli/. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kestrel <command> [args]\n"
            "  run MODEL [-p TEXT] [-n N] [--temp T] [--top-p P] [--top-k K] [--seed S] ...\n"
            "                         generate from a prompt, stream the text to stdout\n"
            "  serve MODEL [--host H] [--port P] [--api-key K] [--ctx-size N] [--max-concurrent N] ...\n"
            "                         serve the OpenAI, Anthropic and Ollama APIs on one port\n"
            "  bench --url URL [--quick|--full] [--out FILE.json] ...\n"
            "                         benchmark a running OpenAI-compatible server (bench/bench.sh boots one)\n"
            "  tokenize PATH TEXT     print token ids as a JSON array (PATH: model dir or tokenizer.json)\n"
            "run `kestrel <command> --help` for a command's options\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    fprintf(stderr, "kestrel: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
