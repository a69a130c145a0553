/* cmd_serve.c — `kestrel serve MODEL [...]`: loads the model, tokenizer and
 * chat template, starts the engine thread and the HTTP server on one port
 * (all four API surfaces), and runs until SIGINT/SIGTERM, then shuts down
 * gracefully (stops accepting, cancels generations, frees everything). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "base/err.h"
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "kv/kv_cache.h"
#include "server/app.h"
#include "server/http.h"

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig) {
    (void)sig;
    stop_flag = 1;
}

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: kestrel serve MODEL [options]\n"
            "  --host ADDR            listen address (default 127.0.0.1)\n"
            "  --port N               port (default 8080; 0 picks a free one)\n"
            "  --api-key KEY          require this key (Authorization: Bearer KEY or x-api-key)\n"
            "  --ctx-size N           most tokens per sequence (default: min(max_position_embeddings, 8192))\n"
            "  --max-concurrent N     sequences decoded together (default 4 on the CPU, 16 on CUDA)\n"
            "  --prefill-chunk N      prompt tokens per scheduler step (default 512 on the CPU, 2048 on CUDA)\n"
            "  --kv-mem SIZE          KV pool size (e.g. 4G; default: ctx-size x max-concurrent tokens);\n"
            "                         requests that do not fit wait in the queue\n"
            "  --max-body BYTES       request body limit (default 16 MiB)\n"
            "  --log-requests         one line per finished request on stderr (tokens, cache, speculation)\n"
            "  --no-prefix-cache      do not keep KV of finished requests for reuse\n"
            "  --prefix-cache-entries N  most KV blocks (16 tokens each) the prefix cache keeps\n"
            "  --prefix-cache-mem SIZE   ... or at most this much KV memory (e.g. 512M, 2G)\n"
            "  --served-model-name S  model id reported by the APIs (default: the directory name)\n"
            "%s",
            cli_model_opts_help);
}

static int parse_long(const char *opt, const char *v, long lo, long hi, long *out) {
    return cli_parse_long("serve", opt, v, lo, hi, out);
}

static char *dir_basename(const char *dir) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t s = n;
    while (s > 0 && dir[s - 1] != '/') s--;
    char *b = malloc(n - s + 1);
    if (!b) return NULL;
    memcpy(b, dir + s, n - s);
    b[n - s] = 0;
    return b;
}

int cmd_serve(int argc, char **argv) {
    const char *dir = NULL, *host = "127.0.0.1", *api_key = NULL, *name = NULL;
    long port = 8080, ctx = 0, conc = 0, chunk = 0, max_body = 16 << 20;
    long use_pc = 1, pc_entries = 0, log_requests = 0;
    cli_model_opts mo;
    cli_model_opts_default(&mo);
    model *dm = NULL;
    dflash *fl = NULL;
    long long pc_mem = 0, kv_mem = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int taken = cli_model_opt("serve", argc, argv, &i, &mo);
        if (taken < 0) return 2;
        if (taken) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { serve_usage(stdout); return 0; }
        else if (!strcmp(a, "--host")) { if (!v) goto missing; host = v; i++; }
        else if (!strcmp(a, "--port")) { if (parse_long(a, v, 0, 65535, &port)) return 2; i++; }
        else if (!strcmp(a, "--api-key")) { if (!v) goto missing; api_key = v; i++; }
        else if (!strcmp(a, "--ctx-size") || !strcmp(a, "-c")) { if (parse_long(a, v, 64, 1 << 22, &ctx)) return 2; i++; }
        else if (!strcmp(a, "--max-concurrent")) { if (parse_long(a, v, 1, 1024, &conc)) return 2; i++; }
        else if (!strcmp(a, "--prefill-chunk")) { if (parse_long(a, v, 16, 1 << 20, &chunk)) return 2; i++; }
        else if (!strcmp(a, "--max-body")) { if (parse_long(a, v, 1024, 1L << 30, &max_body)) return 2; i++; }
        else if (!strcmp(a, "--no-prefix-cache")) use_pc = 0;
        else if (!strcmp(a, "--log-requests")) log_requests = 1;
        else if (!strcmp(a, "--prefix-cache-entries")) { if (parse_long(a, v, 1, 1L << 30, &pc_entries)) return 2; i++; }
        else if (!strcmp(a, "--kv-mem")) { if (cli_parse_size("serve", a, v, &kv_mem)) return 2; i++; }
        else if (!strcmp(a, "--prefix-cache-mem")) { if (cli_parse_size("serve", a, v, &pc_mem)) return 2; i++; }
        else if (!strcmp(a, "--served-model-name")) { if (!v) goto missing; name = v; i++; }
        else if (a[0] == '-') { fprintf(stderr, "kestrel serve: unknown option '%s'\n", a); return 2; }
        else if (!dir) dir = a;
        else { fprintf(stderr, "kestrel serve: unexpected argument '%s'\n", a); return 2; }
        continue;
    missing:
        fprintf(stderr, "kestrel serve: %s needs a value\n", a);
        return 2;
    }
    if (!dir) { serve_usage(stderr); return 2; }

    int status = 1;
    app a;
    memset(&a, 0, sizeof a);
    backend *be = NULL;
    tokenizer *tk = NULL;
    http_server *srv = NULL;
    char *base = NULL;
    int rc;
    if ((rc = tok_load(&tk, dir))) goto fail;
    a.tok = tk;
    if ((rc = gen_config_load(&a.gen, dir))) goto fail;
    if ((rc = backend_new(&be, mo.device, (int)mo.threads))) goto fail;
    if (mo.kv_type && (rc = backend_set_kv_type(be, mo.kv_type))) goto fail;
    if ((rc = model_load(&a.m, dir, be))) goto fail;
    if (chat_template_load(&a.tmpl, dir) != 0) {
        fprintf(stderr, "kestrel: warning: %s (chat endpoints will answer 400)\n", err_msg());
        a.tmpl = NULL;
    }
    a.think = tok_piece_id(tk, "<think>") >= 0 && tok_piece_id(tk, "</think>") >= 0;
    if (!ctx) {
        ctx = a.m->cfg.max_position_embeddings > 0 ? a.m->cfg.max_position_embeddings : 8192;
        if (ctx > 8192) ctx = 8192;
    }
    if ((rc = cli_load_drafters(dir, mo.drafter_dir, (int)mo.no_drafter, be, a.m, &dm, &fl))) goto fail;
    bool gpu = strcmp(be->ops->name, "cpu") != 0;
    if (!conc) conc = gpu ? 16 : 4;
    if (!chunk) chunk = cli_default_prefill_chunk(be->ops->name);
    engine_config ec = {.max_concurrent = (int)conc, .prefill_chunk = (int)chunk, .ctx_size = (int)ctx,
                        .prefix_cache = use_pc != 0, .log_requests = log_requests != 0, .drafter = dm, .dflash = fl};
    cli_model_opts_apply(&mo, &ec);
    if (pc_entries > 0) ec.prefix_cache_blocks = (int)pc_entries;
    /* bytes of one KV block: K and V, every layer, in the backend's KV format */
    long long per_block = (long long)KV_BLOCK_SIZE * a.m->cfg.n_kv_heads * a.m->cfg.head_dim * 2 * a.m->cfg.n_layers *
                          be->kv_elem_bytes;
    if (kv_mem > 0) {
        long long tokens = kv_mem / per_block * KV_BLOCK_SIZE;
        if (tokens < ctx) {
            fprintf(stderr, "kestrel: --kv-mem %lld bytes holds %lld tokens, less than one context (%ld)\n", kv_mem,
                    tokens, ctx);
            goto fail_quiet;
        }
        ec.kv_tokens = tokens > (1LL << 30) ? 1 << 30 : (int)tokens;
    }
    if (pc_mem > 0) {
        long long blocks = pc_mem / per_block;
        if (blocks < 1) blocks = 1;
        if (!ec.prefix_cache_blocks || blocks < ec.prefix_cache_blocks) ec.prefix_cache_blocks = (int)blocks;
    }
    if ((rc = engine_start(&a.eng, a.m, tk, &ec))) goto fail;
    base = dir_basename(dir);
    a.model_name = name ? name : base;
    a.model_dir = dir;
    a.created = time(NULL);
    http_config hc = {host, (int)port, api_key, (size_t)max_body, app_handle, &a};
    if ((rc = http_start(&srv, &hc))) goto fail;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    fprintf(stderr, "kestrel: serving %s on http://%s:%d (%s %s, ctx %ld, max concurrent %ld)\n", a.model_name, host,
            http_port(srv), be->ops->name, backend_describe(be), ctx, conc);
    fflush(stderr);
    while (!stop_flag) pause();
    fprintf(stderr, "kestrel: shutting down\n");
    status = 0;
    goto done;
fail:
    fprintf(stderr, "kestrel: %s\n", err_msg());
    goto done;
fail_quiet:
    status = 1;
done:
    http_stop(srv);     /* no new requests; connection threads end */
    engine_stop(a.eng); /* cancels what is left */
    chat_template_free(a.tmpl);
    model_free(dm);
    dflash_free(fl);
    model_free(a.m);
    backend_free(be);
    tok_free(tk);
    free(base);
    return status;
}
