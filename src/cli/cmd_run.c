/* cmd_run.c — `kestrel run MODEL -p TEXT ...`: loads a model, tokenizes the
 * prompt (raw text, the post-processor's BOS added), generates and streams
 * only the generated text to stdout; prompt and decode speed go to stderr.
 * Without -p it is an interactive chat through the model's chat template
 * (chat_repl.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "backend/backend.h"
#include "base/err.h"
#include "base/file.h"
#include "chat/chat_template.h"
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "engine/engine.h"
#include "io/config.h"
#include "model/model.h"
#include "tok/tok.h"

static void run_usage(FILE *f) {
    fprintf(f,
            "usage: kestrel run MODEL [-p TEXT] [options]\n"
            "  MODEL                  Hugging Face model directory (config.json, *.safetensors, tokenizer.json)\n"
            "  -p, --prompt TEXT      raw prompt text, no chat template ('-' reads standard input)\n"
            "                         without -p: chat through the model's chat template, one message per\n"
            "                         line of standard input (a trailing \\ continues the line); /exit or\n"
            "                         end of input quits, /clear starts over (keeping the system message),\n"
            "                         /system TEXT sets the system message, Ctrl-C stops a reply; the\n"
            "                         replies stream to stdout (only they, when stdin is not a\n"
            "                         terminal), speed to stderr\n"
            "  -n, --max-tokens N     tokens to generate (default 256; chat: per reply, default and 0 =\n"
            "                         until end of turn or the context is full)\n"
            "  --temp T               temperature (0 = greedy; default from generation_config.json)\n"
            "  --top-p P  --top-k K  --min-p P\n"
            "  --repeat-penalty R  --presence-penalty P  --frequency-penalty F\n"
            "  --repeat-last-n N      the repeat penalty reads the last N tokens only (default: all)\n"
            "  --seed S               random seed (default: time)\n"
            "  --ctx-size N           KV cache size in tokens (default: min(max_position_embeddings, 8192))\n"
            "  --ignore-eos           do not stop at end-of-sequence tokens\n"
            "%s",
            cli_model_opts_help);
}

static int parse_int(const char *opt, const char *v, long lo, long hi, long *out) {
    return cli_parse_long("run", opt, v, lo, hi, out);
}

static int parse_float(const char *opt, const char *v, double lo, double hi, float *out) {
    double x;
    if (cli_parse_double("run", opt, v, lo, hi, &x)) return -1;
    *out = (float)x;
    return 0;
}

/* Peak resident set and its current anonymous / file-backed parts (MiB):
 * mapped weights show up as file-backed, copies would be anonymous. */
static void read_rss(double *peak, double *anon, double *file) {
    *peak = *anon = *file = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return;
    char line[256];
    long kb;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) *peak = kb / 1024.0;
        if (sscanf(line, "RssAnon: %ld kB", &kb) == 1) *anon = kb / 1024.0;
        if (sscanf(line, "RssFile: %ld kB", &kb) == 1) *file = kb / 1024.0;
    }
    fclose(f);
}

int cmd_run(int argc, char **argv) {
    const char *dir = NULL, *prompt = NULL;
    long n_gen = -1, ctx_size = 0, seed = -1;
    int ignore_eos = 0;
    cli_model_opts mo;
    cli_model_opts_default(&mo);
    model *dm = NULL;
    dflash *fl = NULL;
    float temp = -1, top_p = -1, min_p = -1, rep = -1, pres = 0, freq = 0;
    long top_k = -1, rep_last_n = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VALUE()                                                              \
    do {                                                                          \
        if (!v) { fprintf(stderr, "kestrel run: %s needs a value\n", a); return 2; } \
        i++;                                                                      \
    } while (0)
        int taken = cli_model_opt("run", argc, argv, &i, &mo);
        if (taken < 0) return 2;
        if (taken) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { run_usage(stdout); return 0; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { NEED_VALUE(); prompt = v; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) { NEED_VALUE(); if (parse_int(a, v, 0, 1 << 24, &n_gen)) return 2; }
        else if (!strcmp(a, "--temp") || !strcmp(a, "--temperature")) { NEED_VALUE(); if (parse_float(a, v, 0, 100, &temp)) return 2; }
        else if (!strcmp(a, "--top-p")) { NEED_VALUE(); if (parse_float(a, v, 0, 1, &top_p)) return 2; }
        else if (!strcmp(a, "--top-k")) { NEED_VALUE(); if (parse_int(a, v, 0, 1 << 30, &top_k)) return 2; }
        else if (!strcmp(a, "--min-p")) { NEED_VALUE(); if (parse_float(a, v, 0, 1, &min_p)) return 2; }
        else if (!strcmp(a, "--repeat-penalty")) { NEED_VALUE(); if (parse_float(a, v, 0.01, 100, &rep)) return 2; }
        else if (!strcmp(a, "--repeat-last-n")) { NEED_VALUE(); if (parse_int(a, v, 0, 1 << 30, &rep_last_n)) return 2; }
        else if (!strcmp(a, "--presence-penalty")) { NEED_VALUE(); if (parse_float(a, v, -2, 2, &pres)) return 2; }
        else if (!strcmp(a, "--frequency-penalty")) { NEED_VALUE(); if (parse_float(a, v, -2, 2, &freq)) return 2; }
        else if (!strcmp(a, "--seed")) { NEED_VALUE(); if (parse_int(a, v, 0, 0x7fffffffL, &seed)) return 2; }
        else if (!strcmp(a, "--ctx-size") || !strcmp(a, "-c")) { NEED_VALUE(); if (parse_int(a, v, 16, 1 << 22, &ctx_size)) return 2; }
        else if (!strcmp(a, "--ignore-eos")) ignore_eos = 1;
        else if (a[0] == '-' && a[1]) { fprintf(stderr, "kestrel run: unknown option '%s'\n", a); return 2; }
        else if (!dir) dir = a;
        else { fprintf(stderr, "kestrel run: unexpected argument '%s'\n", a); return 2; }
#undef NEED_VALUE
    }
    if (!dir) {
        run_usage(stderr);
        return 2;
    }
    bool chat = !prompt;
    if (n_gen < 0) n_gen = chat ? 0 : 256;
    char *stdin_text = NULL;
    if (prompt && !strcmp(prompt, "-")) {
        size_t len;
        if (!(stdin_text = cli_read_stdin("run", &len))) return 1;
        prompt = stdin_text;
    }

    int status = 1;
    backend *be = NULL;
    model *m = NULL;
    tokenizer *tk = NULL;
    engine *eng = NULL;
    engine_req *req = NULL;
    chat_template *tmpl = NULL;
    int32_t *ids = NULL;
    int n_ids = 0;
    gen_config gc;
    int rc;
    if ((rc = tok_load(&tk, dir))) goto fail;
    if ((rc = gen_config_load(&gc, dir))) goto fail;
    if (chat && chat_template_load(&tmpl, dir) != 0) {
        fprintf(stderr, "kestrel: %s has no usable chat template (%s); give a raw prompt with -p TEXT\n", dir,
                err_msg());
        goto done;
    }
    if ((rc = backend_new(&be, mo.device, (int)mo.threads))) goto fail;
    if (mo.kv_type && (rc = backend_set_kv_type(be, mo.kv_type))) goto fail;
    if ((rc = model_load(&m, dir, be))) goto fail;
    if (!chat) {
        if ((rc = tok_encode(tk, prompt, strlen(prompt), true, &ids, &n_ids))) goto fail;
        if (n_ids == 0) { err_set(KS_EINVAL, "the prompt is empty"); goto fail; }
    }
    if (!ctx_size) {
        ctx_size = m->cfg.max_position_embeddings > 0 ? m->cfg.max_position_embeddings : 8192;
        if (ctx_size > 8192) ctx_size = 8192;
        if (!chat && ctx_size < n_ids + n_gen + 1) ctx_size = n_ids + n_gen + 1;
    }
    if ((rc = cli_load_drafters(dir, mo.drafter_dir, (int)mo.no_drafter, be, m, &dm, &fl))) goto fail;
    engine_config ec = {.max_concurrent = 1, .prefill_chunk = cli_default_prefill_chunk(be->ops->name), .ctx_size = (int)ctx_size, .drafter = dm, .dflash = fl};
    cli_model_opts_apply(&mo, &ec);
    if ((rc = engine_start(&eng, m, tk, &ec))) goto fail;

    engine_params ep;
    memset(&ep, 0, sizeof ep);
    ep.spec = -1; /* the engine default (--pld/--no-pld); the gates decide */
    ep.mtp = -1;
    ep.max_tokens = n_gen > 0 ? (int)n_gen : chat ? (int)ctx_size : 1;
    sample_params_default(&ep.sp);
    ep.sp.temperature = gc.do_sample ? gc.temperature : 0.0f;
    ep.sp.top_p = gc.top_p;
    ep.sp.top_k = gc.top_k;
    ep.sp.min_p = gc.min_p;
    ep.sp.repetition_penalty = gc.repetition_penalty;
    if (temp >= 0) ep.sp.temperature = temp;
    if (top_p >= 0) ep.sp.top_p = top_p;
    if (top_k >= 0) ep.sp.top_k = (int)top_k;
    if (min_p >= 0) ep.sp.min_p = min_p;
    if (rep > 0) ep.sp.repetition_penalty = rep;
    ep.sp.repetition_last_n = (int)rep_last_n;
    ep.sp.presence_penalty = pres;
    ep.sp.frequency_penalty = freq;
    ep.seed = seed >= 0 ? (uint64_t)seed : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    if (!ignore_eos) {
        const int *eos = gc.n_eos ? gc.eos_ids : m->cfg.eos_ids;
        int ne = gc.n_eos ? gc.n_eos : m->cfg.n_eos;
        for (int i = 0; i < ne && ep.n_eos < ENGINE_MAX_EOS; i++) ep.eos[ep.n_eos++] = eos[i];
    }
    if (chat) {
        char hw[256];
        snprintf(hw, sizeof hw, "%s %s, %d threads", be->ops->name, backend_describe(be),
                 mo.threads > 0 ? (int)mo.threads : (int)sysconf(_SC_NPROCESSORS_ONLN));
        chat_repl_config cc = {eng, tk, tmpl, &ep, engine_ctx_size(eng),
                               tok_piece_id(tk, "<think>") >= 0 && tok_piece_id(tk, "</think>") >= 0, hw};
        status = chat_repl(&cc);
        goto done;
    }
    if (n_gen == 0) { status = 0; goto done; }
    double t0 = now_s(), t_first = 0, t_last = 0;
    req = engine_submit(eng, ids, n_ids, &ep);
    if (!req) goto fail;
    engine_event ev;
    int n_out = 0, failed = 0, drafted = 0, accepted = 0;
    for (;;) {
        engine_next_event(req, &ev, -1);
        if (ev.len) {
            fwrite(ev.text, 1, ev.len, stdout);
            fflush(stdout);
        }
        if (ev.type == ENGINE_EV_TOKEN) {
            t_last = now_s();
            if (n_out++ == 0) t_first = t_last;
        } else if (ev.type == ENGINE_EV_ERROR) {
            err_set(KS_EINVAL, "%s", ev.text ? ev.text : "generation failed");
            failed = 1;
        }
        if (ev.type == ENGINE_EV_DONE) {
            drafted = ev.n_drafted;
            accepted = ev.n_accepted;
        }
        int end = ev.type != ENGINE_EV_TOKEN;
        engine_event_clear(&ev);
        if (end) break;
    }
    if (failed) goto fail;
    double peak, anon, file;
    read_rss(&peak, &anon, &file);
    fprintf(stderr,
            "\nkestrel: prompt %d tokens, %.1f tok/s; decode %d tokens, %.1f tok/s (%s %s, %d threads); "
            "rss peak %.1f MiB (anon %.1f, file-mapped %.1f); speculation: %d drafted, %d accepted\n",
            n_ids, t_first > t0 ? n_ids / (t_first - t0) : 0.0, n_out,
            n_out > 1 && t_last > t_first ? (n_out - 1) / (t_last - t_first) : 0.0, be->ops->name, backend_describe(be),
            mo.threads > 0 ? (int)mo.threads : (int)sysconf(_SC_NPROCESSORS_ONLN), peak, anon, file, drafted, accepted);
    status = 0;
    goto done;
fail:
    fprintf(stderr, "kestrel: %s\n", err_msg());
done:
    engine_req_release(req);
    engine_stop(eng);
    free(ids);
    model_free(dm);
    dflash_free(fl);
    model_free(m);
    backend_free(be);
    tok_free(tk);
    chat_template_free(tmpl);
    free(stdin_text);
    return status;
}
