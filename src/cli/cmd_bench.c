/* cmd_bench.c — `kestrel bench --url URL [...]`: the benchmark probe. Measures
 * any running OpenAI-compatible server with one protocol (src/bench/): TTFT,
 * prefill and decode tok/s, end-to-end latency per workload, the context
 * ladder and the concurrency sweep; writes the result JSON, the markdown
 * tables and gnuplot data. `--report FILE` re-renders a saved result (and
 * joins speculation on/off results) without sending requests.
 * bench/bench.sh boots `kestrel serve` and drives this. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "bench/bench_run.h"
#include "cli/cli.h"

static void bench_usage(FILE *f) {
    fprintf(f,
            "usage: kestrel bench --url URL [options]        measure a running OpenAI-compatible server\n"
            "       kestrel bench --report FILE.json [options] re-render a saved result\n"
            "  --quick | --full         sizes: quick = 3 prompts, max_tokens 64, ladder 512/2048, streams 1/4/16;\n"
            "                           default = 5 prompts, 128 tokens, ladder to 16k, streams to 64;\n"
            "                           full = 10 prompts, 256 tokens, ladder to 64k\n"
            "  --workloads LIST         of code,edit,chat,prose,ladder,concurrency (default: all)\n"
            "  --prompts DIR            completion.jsonl, edit.jsonl, chat.jsonl\n"
            "                           (default ../shared/models/tinycoder/prompts)\n"
            "  --prose FILE             novel prose, paragraphs split by blank lines (default bench/prose.txt)\n"
            "  --prompts-per-workload N --runs N (measured repetitions, default 3) --max-tokens N\n"
            "  --temperature T          (default 0)\n"
            "  --ladder N,N,...         target prompt tokens    --streams N,N,...  concurrency levels\n"
            "  --model NAME             model id to request (default: the first of GET /v1/models)\n"
            "  --api-key KEY            --timeout SECONDS (per request, default 600)\n"
            "  --no-cache-bust          do not tag prompts uniquely (lets a prefix cache hit repeats)\n"
            "  --ignore-eos             send \"ignore_eos\": true (llama-server, vLLM)\n"
            "  --extra-json OBJ         merged into every request body\n"
            "  --spec-on FILE --spec-off FILE   results of edit,prose runs with speculation on / off\n"
            "  --meta KEY=VALUE         recorded in the result (date, commit, machine, server_flags, ...)\n"
            "  --out FILE.json  --md FILE.md (default: stdout)  --plot-data PREFIX  --quiet\n");
}

static int parse_int(const char *opt, const char *v, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || *end || end == v || x < lo || x > hi) {
        fprintf(stderr, "kestrel bench: %s: expected an integer in [%ld, %ld]\n", opt, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int parse_list(const char *opt, const char *v, int *out, int *n) {
    *n = 0;
    if (!v) goto bad;
    for (const char *p = v; *p;) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (errno || end == p || x < 1 || x > (1 << 24) || *n == BENCH_MAX_LEVELS) goto bad;
        out[(*n)++] = (int)x;
        if (*end == ',') end++;
        else if (*end) goto bad;
        p = end;
    }
    if (*n) return 0;
bad:
    fprintf(stderr, "kestrel bench: %s: expected up to %d comma-separated positive integers\n", opt,
            BENCH_MAX_LEVELS);
    return -1;
}

static json_t *load_json(const char *path) {
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!json_is_object(j)) {
        fprintf(stderr, "kestrel bench: %s: %s (line %d)\n", path, j ? "not a JSON object" : je.text, je.line);
        json_decref(j);
        return NULL;
    }
    return j;
}

int cmd_bench(int argc, char **argv) {
    bench_config cfg = {0};
    cfg.prompts_dir = "../shared/models/tinycoder/prompts";
    cfg.prose_path = "bench/prose.txt";
    cfg.runs = 3;
    cfg.cache_bust = 1;
    cfg.timeout_s = 600;
    cfg.verbose = 1;
    int size = 1; /* 0 quick, 1 default, 2 full */
    int n_prompts = 0, max_tokens = 0, runs = 0, have_ladder = 0, have_conc = 0;
    const char *out = NULL, *md = NULL, *plot = NULL, *report = NULL, *spec_on = NULL, *spec_off = NULL;
    json_t *meta = json_object();
    int status = 2;
    json_t *res = NULL, *on = NULL, *off = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bench_usage(stdout);
            status = 0;
            goto done;
        } else if (!strcmp(a, "--quick")) size = 0, takes = 0;
        else if (!strcmp(a, "--full")) size = 2, takes = 0;
        else if (!strcmp(a, "--no-cache-bust")) cfg.cache_bust = 0, takes = 0;
        else if (!strcmp(a, "--ignore-eos")) cfg.ignore_eos = 1, takes = 0;
        else if (!strcmp(a, "--quiet")) cfg.verbose = 0, takes = 0;
        else if (!v) {
            fprintf(stderr, a[0] == '-' ? "kestrel bench: %s needs a value (or is unknown)\n"
                                        : "kestrel bench: unexpected argument '%s'\n", a);
            goto done;
        } else if (!strcmp(a, "--url")) cfg.url = v;
        else if (!strcmp(a, "--report")) report = v;
        else if (!strcmp(a, "--workloads")) cfg.workloads = v;
        else if (!strcmp(a, "--prompts")) cfg.prompts_dir = v;
        else if (!strcmp(a, "--prose")) cfg.prose_path = v;
        else if (!strcmp(a, "--model")) cfg.model = v;
        else if (!strcmp(a, "--api-key")) cfg.api_key = v;
        else if (!strcmp(a, "--extra-json")) cfg.extra_json = v;
        else if (!strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--md")) md = v;
        else if (!strcmp(a, "--plot-data")) plot = v;
        else if (!strcmp(a, "--spec-on")) spec_on = v;
        else if (!strcmp(a, "--spec-off")) spec_off = v;
        else if (!strcmp(a, "--prompts-per-workload")) { if (parse_int(a, v, 1, 10000, &n_prompts)) goto done; }
        else if (!strcmp(a, "--runs")) { if (parse_int(a, v, 1, 1000, &runs)) goto done; }
        else if (!strcmp(a, "--max-tokens")) { if (parse_int(a, v, 1, 1 << 20, &max_tokens)) goto done; }
        else if (!strcmp(a, "--timeout")) {
            int t;
            if (parse_int(a, v, 1, 86400, &t)) goto done;
            cfg.timeout_s = t;
        } else if (!strcmp(a, "--temperature")) {
            char *end;
            cfg.temperature = strtod(v, &end);
            if (*end || end == v || !(cfg.temperature >= 0 && cfg.temperature <= 100)) {
                fprintf(stderr, "kestrel bench: --temperature: expected a number in [0, 100]\n");
                goto done;
            }
        } else if (!strcmp(a, "--ladder")) {
            if (parse_list(a, v, cfg.ladder, &cfg.n_ladder)) goto done;
            have_ladder = 1;
        } else if (!strcmp(a, "--streams")) {
            if (parse_list(a, v, cfg.conc, &cfg.n_conc)) goto done;
            have_conc = 1;
        } else if (!strcmp(a, "--meta")) {
            const char *eq = strchr(v, '=');
            if (!eq || eq == v) {
                fprintf(stderr, "kestrel bench: --meta: expected KEY=VALUE\n");
                goto done;
            }
            char key[128];
            snprintf(key, sizeof key, "%.*s", (int)(eq - v), v);
            json_object_set_new(meta, key, json_string(eq + 1));
        } else {
            fprintf(stderr, "kestrel bench: unknown option '%s'\n", a);
            goto done;
        }
        i += takes;
    }
    if (!cfg.url == !report) {
        fprintf(stderr, "kestrel bench: give exactly one of --url URL or --report FILE\n");
        bench_usage(stderr);
        goto done;
    }
    static const int ladders[3][6] = {{512, 2048}, {512, 2048, 8192, 16384}, {512, 2048, 8192, 16384, 32768, 65536}};
    static const int n_ladders[3] = {2, 4, 6};
    static const int concs[3][4] = {{1, 4, 16}, {1, 4, 16, 64}, {1, 4, 16, 64}};
    static const int n_concs[3] = {3, 4, 4};
    cfg.n_prompts = n_prompts ? n_prompts : (int[]){3, 5, 10}[size];
    cfg.max_tokens = max_tokens ? max_tokens : (int[]){64, 128, 256}[size];
    if (runs) cfg.runs = runs;
    if (!have_ladder) {
        cfg.n_ladder = n_ladders[size];
        memcpy(cfg.ladder, ladders[size], sizeof(int) * (size_t)cfg.n_ladder);
    }
    if (!have_conc) {
        cfg.n_conc = n_concs[size];
        memcpy(cfg.conc, concs[size], sizeof(int) * (size_t)cfg.n_conc);
    }

    status = 1;
    if (report) {
        if (!(res = load_json(report))) goto done;
    } else {
        if (cfg.verbose)
            fprintf(stderr, "bench: %s: %d prompts x %d runs, max_tokens %d\n", cfg.url, cfg.n_prompts, cfg.runs,
                    cfg.max_tokens);
        if (bench_run_all(&cfg, &res) < 0) {
            fprintf(stderr, "kestrel %s\n", err_msg());
            goto done;
        }
    }
    if (json_object_size(meta)) {
        json_t *m = json_object_get(res, "meta");
        if (json_is_object(m)) json_object_update(m, meta);
        else json_object_set(res, "meta", meta);
    }
    if ((spec_on && !(on = load_json(spec_on))) || (spec_off && !(off = load_json(spec_off)))) goto done;
    if (on || off || !report || !json_object_get(res, "speculation")) bench_add_speculation(res, on, off);
    if (out && json_dump_file(res, out, JSON_INDENT(2) | JSON_REAL_PRECISION(6)) != 0) {
        fprintf(stderr, "kestrel bench: cannot write %s\n", out);
        goto done;
    }
    if (plot && bench_write_plot_data(res, plot) < 0) {
        fprintf(stderr, "kestrel %s\n", err_msg());
        goto done;
    }
    FILE *f = md ? fopen(md, "w") : stdout;
    if (!f) {
        fprintf(stderr, "kestrel bench: cannot write %s\n", md);
        goto done;
    }
    bench_write_markdown(res, f);
    if (md) fclose(f);
    status = 0;
done:
    json_decref(meta);
    json_decref(res);
    json_decref(on);
    json_decref(off);
    return status;
}
