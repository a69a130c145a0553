/* bench_run.h — the workloads of `kestrel bench` (see BENCHMARKS.md, "Server
 * harness"): code / edit / chat / prose request sets, the context ladder and
 * the concurrency sweep, run against any OpenAI-compatible server; and the
 * reports made from their JSON result (markdown tables, gnuplot data, the
 * speculation on/off comparison). */
#ifndef KS_BENCH_RUN_H
#define KS_BENCH_RUN_H

#include <jansson.h>
#include <stdio.h>

#define BENCH_MAX_LEVELS 8

typedef struct {
    const char *url;         /* server base URL */
    const char *api_key;     /* NULL: none */
    const char *model;       /* model id for requests; NULL: the first of GET /v1/models */
    const char *prompts_dir; /* holds completion.jsonl, edit.jsonl, chat.jsonl */
    const char *prose_path;  /* novel prose, paragraphs separated by blank lines */
    const char *workloads;   /* comma list of code,edit,chat,prose,ladder,concurrency; NULL: all */
    int n_prompts;           /* prompts per workload */
    int runs;                /* measured repetitions of each prompt / ladder point / sweep level */
    int max_tokens;
    double temperature;
    int ladder[BENCH_MAX_LEVELS], n_ladder;     /* target prompt tokens */
    int conc[BENCH_MAX_LEVELS], n_conc;         /* simultaneous streams */
    int cache_bust;          /* prefix every prompt with a unique tag (defeats prefix caches) */
    int ignore_eos;          /* send "ignore_eos": true (llama-server, vLLM; others ignore it) */
    const char *extra_json;  /* object merged into every request body; NULL: none */
    long timeout_s;          /* per request */
    int verbose;             /* progress lines on stderr */
} bench_config;

/* Runs the selected workloads; *out receives the result object (caller
 * decrefs): {"config", "model", "url", "workloads": [...], "ladder": [...],
 * "concurrency": [...], "speculation_reported"}. Returns 0 or a negative
 * status (err_msg() says why: server unreachable, prompt files missing). */
int bench_run_all(const bench_config *cfg, json_t **out);

/* Adds "speculation": the decode tok/s of edit and prose with speculation
 * on vs off (two results of earlier runs, either may be NULL) and the
 * acceptance when the server reported it; with neither file, what the main
 * result says ("no speculation support in this server" when its usage never
 * had completion_tokens_details.accepted_prediction_tokens). */
void bench_add_speculation(json_t *res, json_t *on, json_t *off);

/* The markdown report: one table per section, then the BENCHMARKS.md history
 * rows (| date | commit | machine | model | workload | result |) taken from
 * res["meta"] (date, commit, machine) when present. */
void bench_write_markdown(json_t *res, FILE *f);
/* gnuplot data files: PREFIX-bars.dat (workload, decode tok/s, prefill tok/s)
 * and PREFIX-ladder.dat (prompt tokens, prefill tok/s, decode tok/s, TTFT ms). */
int bench_write_plot_data(json_t *res, const char *prefix);

#endif
