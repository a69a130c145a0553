/* bench_report.c — what `kestrel bench` makes of a result JSON (see
 * bench_run.h): the markdown tables (workloads, context ladder, concurrency,
 * speculation) with the BENCHMARKS.md history rows, the gnuplot data files,
 * and the speculation on/off comparison of two earlier results. Numbers are
 * medians; "a–b" is the min–max range over the samples. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "base/strbuf.h"
#include "bench/bench_run.h"

static double num(json_t *o, const char *k1, const char *k2) {
    json_t *v = json_object_get(o, k1);
    if (k2) v = json_object_get(v, k2);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static const char *str(json_t *o, const char *k, const char *def) {
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : def;
}

static json_t *find_named(json_t *arr, const char *name) {
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) if (!strcmp(str(v, "name", ""), name)) return v;
    return NULL;
}

/* "12.3" with precision chosen by size; "–" for NaN. */
static void fmt(strbuf *b, double x) {
    if (isnan(x)) sb_puts(b, "–");
    else if (fabs(x) >= 100 || (x == floor(x) && fabs(x) < 1e9)) sb_printf(b, "%.0f", x);
    else if (fabs(x) >= 10) sb_printf(b, "%.1f", x);
    else sb_printf(b, "%.2f", x);
}

/* median (min–max) of a stat object */
static void fmt_stat(strbuf *b, json_t *st) {
    fmt(b, num(st, "median", NULL));
    double lo = num(st, "min", NULL), hi = num(st, "max", NULL);
    if (!isnan(lo) && lo != hi) {
        sb_puts(b, " (");
        fmt(b, lo);
        sb_puts(b, "–");
        fmt(b, hi);
        sb_puts(b, ")");
    }
}

void bench_add_speculation(json_t *res, json_t *on, json_t *off) {
    json_t *sp = json_object(), *rows = json_array();
    static const char *names[] = {"code", "edit", "prose"};
    const int n_names = 3;
    if (on && off) {
        json_object_set_new(sp, "mode", json_string("on vs off (server flags)"));
        for (int i = 0; i < n_names; i++) {
            json_t *a = find_named(json_object_get(on, "workloads"), names[i]);
            json_t *b = find_named(json_object_get(off, "workloads"), names[i]);
            if (!a || !b) continue;
            double d_on = num(a, "decode_tok_s", "median"), d_off = num(b, "decode_tok_s", "median");
            json_t *r = json_pack("{s:s}", "name", names[i]);
            json_object_set_new(r, "decode_tok_s_on", isnan(d_on) ? json_null() : json_real(d_on));
            json_object_set_new(r, "decode_tok_s_off", isnan(d_off) ? json_null() : json_real(d_off));
            json_object_set_new(r, "decode_ratio", isnan(d_on / d_off) ? json_null() : json_real(d_on / d_off));
            json_t *s = json_object_get(a, "speculation");
            json_object_set_new(r, "acceptance", json_deep_copy(s ? json_object_get(s, "acceptance") : json_null()));
            json_object_set_new(r, "accepted_per_completion_token",
                                json_deep_copy(s ? json_object_get(s, "accepted_per_completion_token") : json_null()));
            json_array_append_new(rows, r);
        }
        int reported = json_is_true(json_object_get(on, "speculation_reported"));
        json_object_set_new(sp, "supported", json_true());
        json_object_set_new(sp, "note", json_string(reported ? "acceptance from the server's usage"
                                                             : "the server reported no acceptance counters"));
        json_object_set(sp, "flags_on", json_object_get(json_object_get(on, "meta"), "server_flags"));
        json_object_set(sp, "flags_off", json_object_get(json_object_get(off, "meta"), "server_flags"));
    } else if (json_is_true(json_object_get(res, "speculation_reported"))) {
        json_object_set_new(sp, "mode", json_string("as served (no on/off comparison in this run)"));
        json_object_set_new(sp, "supported", json_true());
        json_object_set_new(sp, "note", json_string("acceptance from the server's usage"));
        for (int i = 0; i < n_names; i++) {
            json_t *a = find_named(json_object_get(res, "workloads"), names[i]);
            json_t *s = a ? json_object_get(a, "speculation") : NULL;
            if (!s) continue;
            json_t *r = json_pack("{s:s}", "name", names[i]);
            json_object_set(r, "acceptance", json_object_get(s, "acceptance"));
            json_object_set(r, "accepted_per_completion_token", json_object_get(s, "accepted_per_completion_token"));
            json_array_append_new(rows, r);
        }
    } else if (!find_named(json_object_get(res, "workloads"), "edit") &&
               !find_named(json_object_get(res, "workloads"), "prose")) {
        json_object_set_new(sp, "mode", json_string("not measured"));
        json_object_set_new(sp, "supported", json_null());
        json_object_set_new(sp, "note", json_string("edit and prose were not in this run"));
    } else {
        json_object_set_new(sp, "mode", json_string("none"));
        json_object_set_new(sp, "supported", json_false());
        json_object_set_new(sp, "note", json_string("no speculation support in this server"));
    }
    json_object_set_new(sp, "workloads", rows);
    json_object_set_new(res, "speculation", sp);
}

void bench_write_markdown(json_t *res, FILE *f) {
    json_t *meta = json_object_get(res, "meta"), *conf = json_object_get(res, "config");
    strbuf b = {0};
    sb_printf(&b, "## kestrel bench: %s at %s\n\n", str(res, "model", "?"), str(res, "url", "?"));
    if (meta) {
        const char *k;
        json_t *v;
        json_object_foreach(meta, k, v) if (json_is_string(v)) sb_printf(&b, "- %s: %s\n", k, json_string_value(v));
    }
    sb_printf(&b, "- protocol: temperature %g, max_tokens %d, %d prompts x %d runs per workload after 1 warmup, "
                  "cache busting %s; median (min–max)\n\n",
              num(conf, "temperature", NULL), (int)num(conf, "max_tokens", NULL),
              (int)num(conf, "prompts_per_workload", NULL), (int)num(conf, "runs", NULL),
              json_is_true(json_object_get(conf, "cache_bust")) ? "on" : "off");
    size_t i;
    json_t *w;
    json_t *wl = json_object_get(res, "workloads");
    if (json_array_size(wl)) {
        sb_puts(&b, "| workload | endpoint | prompt tok | completion tok | TTFT ms | prefill tok/s | decode tok/s | "
                    "e2e ms | errors |\n|---|---|---|---|---|---|---|---|---|\n");
        json_array_foreach(wl, i, w) {
            sb_printf(&b, "| %s | %s | ", str(w, "name", "?"), str(w, "endpoint", "?"));
            fmt(&b, num(w, "prompt_tokens", "median"));
            sb_puts(&b, " | ");
            fmt(&b, num(w, "completion_tokens", "median"));
            const char *cols[] = {"ttft_ms", "prefill_tok_s", "decode_tok_s", "e2e_ms"};
            for (int c = 0; c < 4; c++) {
                sb_puts(&b, " | ");
                fmt_stat(&b, json_object_get(w, cols[c]));
            }
            sb_printf(&b, " | %d |\n", (int)num(w, "errors", NULL));
        }
        sb_puts(&b, "\n");
    }
    json_t *lad = json_object_get(res, "ladder");
    if (json_array_size(lad)) {
        sb_puts(&b, "Context ladder (/v1/completions, code corpus):\n\n| target tok | prompt tok | status | TTFT ms | "
                    "prefill tok/s | decode tok/s |\n|---|---|---|---|---|---|\n");
        json_array_foreach(lad, i, w) {
            int st = (int)num(w, "status", NULL);
            sb_printf(&b, "| %d | ", (int)num(w, "target_tokens", NULL));
            if (st != 200) {
                sb_printf(&b, "– | %d: %s | – | – | – |\n", st, str(w, "error", ""));
                continue;
            }
            fmt(&b, num(w, "prompt_tokens", "median"));
            sb_puts(&b, " | 200 | ");
            fmt_stat(&b, json_object_get(w, "ttft_ms"));
            sb_puts(&b, " | ");
            fmt_stat(&b, json_object_get(w, "prefill_tok_s"));
            sb_puts(&b, " | ");
            fmt_stat(&b, json_object_get(w, "decode_tok_s"));
            sb_puts(&b, " |\n");
        }
        sb_puts(&b, "\n");
    }
    json_t *con = json_object_get(res, "concurrency");
    if (json_array_size(con)) {
        sb_puts(&b, "Concurrency sweep (/v1/completions, code prompts, all streams sent at once; total: tokens over "
                    "first request to last byte; all decoding: while every stream decodes):\n\n| streams | "
                    "total tok/s | all decoding tok/s | per-stream decode tok/s | TTFT ms | errors |\n"
                    "|---|---|---|---|---|---|\n");
        json_array_foreach(con, i, w) {
            sb_printf(&b, "| %d | ", (int)num(w, "streams", NULL));
            fmt_stat(&b, json_object_get(w, "total_tok_s"));
            sb_puts(&b, " | ");
            fmt_stat(&b, json_object_get(w, "decode_window_tok_s"));
            sb_puts(&b, " | ");
            fmt_stat(&b, json_object_get(w, "decode_tok_s"));
            sb_puts(&b, " | ");
            fmt_stat(&b, json_object_get(w, "ttft_ms"));
            sb_printf(&b, " | %d |\n", (int)num(w, "errors", NULL));
        }
        sb_puts(&b, "\n");
    }
    json_t *sp = json_object_get(res, "speculation");
    if (sp) {
        sb_printf(&b, "Speculation (%s): %s\n\n", str(sp, "mode", ""), str(sp, "note", ""));
        json_t *rows = json_object_get(sp, "workloads");
        if (json_array_size(rows)) {
            sb_puts(&b, "| workload | decode tok/s on | off | ratio | acceptance | accepted / completion token |\n"
                        "|---|---|---|---|---|---|\n");
            json_array_foreach(rows, i, w) {
                sb_printf(&b, "| %s | ", str(w, "name", "?"));
                const char *cols[] = {"decode_tok_s_on", "decode_tok_s_off", "decode_ratio", "acceptance",
                                      "accepted_per_completion_token"};
                for (int c = 0; c < 5; c++) {
                    fmt(&b, num(w, cols[c], NULL));
                    sb_puts(&b, c < 4 ? " | " : " |\n");
                }
            }
            sb_puts(&b, "\n");
        }
    }

    /* history rows for BENCHMARKS.md */
    const char *date = str(meta, "date", "?"), *commit = str(meta, "commit", "?"), *mach = str(meta, "machine", "?");
    const char *model = str(meta, "model", str(res, "model", "?"));
    const char *flags = str(meta, "server_flags", NULL);
    char mode[512];
    if (flags && strcmp(flags, "(defaults)") && flags[0] != '(')
        snprintf(mode, sizeof mode, "%s -- %s", str(meta, "mode", "bench"), flags);
    else snprintf(mode, sizeof mode, "%s", str(meta, "mode", "bench"));
    sb_puts(&b, "History rows (BENCHMARKS.md):\n\n");
    if (json_array_size(wl)) {
        sb_printf(&b, "| %s | %s | %s | %s | %s: workloads, 1 stream, max_tokens %d | decode tok/s", date, commit, mach,
                  model, mode, (int)num(conf, "max_tokens", NULL));
        json_array_foreach(wl, i, w) {
            sb_printf(&b, "%s%s ", i ? ", " : " ", str(w, "name", "?"));
            fmt(&b, num(w, "decode_tok_s", "median"));
        }
        sb_puts(&b, "; TTFT ms");
        json_array_foreach(wl, i, w) {
            sb_printf(&b, "%s%s ", i ? ", " : " ", str(w, "name", "?"));
            fmt(&b, num(w, "ttft_ms", "median"));
        }
        sb_puts(&b, "; prefill tok/s");
        json_array_foreach(wl, i, w) {
            sb_printf(&b, "%s%s ", i ? ", " : " ", str(w, "name", "?"));
            fmt(&b, num(w, "prefill_tok_s", "median"));
        }
        sb_puts(&b, " |\n");
    }
    if (json_array_size(lad)) {
        sb_printf(&b, "| %s | %s | %s | %s | %s: context ladder | ", date, commit, mach, model, mode);
        json_array_foreach(lad, i, w) {
            int st = (int)num(w, "status", NULL);
            sb_printf(&b, "%s%d: ", i ? "; " : "", (int)num(w, "target_tokens", NULL));
            if (st != 200) {
                sb_printf(&b, "HTTP %d", st);
                continue;
            }
            sb_puts(&b, "prefill ");
            fmt(&b, num(w, "prefill_tok_s", "median"));
            sb_puts(&b, ", decode ");
            fmt(&b, num(w, "decode_tok_s", "median"));
            sb_puts(&b, " tok/s");
        }
        sb_puts(&b, " |\n");
    }
    if (json_array_size(con)) {
        sb_printf(&b, "| %s | %s | %s | %s | %s: concurrency | ", date, commit, mach, model, mode);
        json_array_foreach(con, i, w) {
            int ns = (int)num(w, "streams", NULL);
            sb_printf(&b, "%s%d stream%s: total ", i ? "; " : "", ns, ns == 1 ? "" : "s");
            fmt(&b, num(w, "total_tok_s", "median"));
            sb_puts(&b, ", all decoding ");
            fmt(&b, num(w, "decode_window_tok_s", "median"));
            sb_puts(&b, ", per stream ");
            fmt(&b, num(w, "decode_tok_s", "median"));
            sb_puts(&b, " tok/s");
        }
        sb_puts(&b, " |\n");
    }
    if (sp) {
        sb_printf(&b, "| %s | %s | %s | %s | %s: speculation | %s", date, commit, mach, model, mode,
                  str(sp, "note", ""));
        json_array_foreach(json_object_get(sp, "workloads"), i, w) {
            sb_printf(&b, "; %s decode ratio ", str(w, "name", "?"));
            fmt(&b, num(w, "decode_ratio", NULL));
            sb_puts(&b, ", acceptance ");
            fmt(&b, num(w, "acceptance", NULL));
        }
        sb_puts(&b, " |\n");
    }
    fputs(b.s ? b.s : "", f);
    sb_free(&b);
}

/* Data rows of one chart; a file is written only when it has a row (the
 * gnuplot script skips a chart whose file is missing). */
static int write_dat(const char *prefix, const char *suffix, const strbuf *rows) {
    char path[1024];
    snprintf(path, sizeof path, "%s-%s.dat", prefix, suffix);
    remove(path);
    if (!rows->len) return 0;
    FILE *f = fopen(path, "w");
    if (!f) return err_set(KS_EIO, "bench: cannot write %s", path);
    fputs(rows->s, f);
    return fclose(f) == 0 ? 0 : err_set(KS_EIO, "bench: cannot write %s", path);
}

int bench_write_plot_data(json_t *res, const char *prefix) {
    size_t i;
    json_t *w;
    strbuf bars = {0}, conc = {0}, lad = {0};
    json_array_foreach(json_object_get(res, "workloads"), i, w)
        sb_printf(&bars, "%s %g %g %g\n", str(w, "name", "?"), num(w, "decode_tok_s", "median"),
                  num(w, "prefill_tok_s", "median"), num(w, "ttft_ms", "median"));
    json_array_foreach(json_object_get(res, "concurrency"), i, w)
        sb_printf(&conc, "%d %g %g %g\n", (int)num(w, "streams", NULL), num(w, "total_tok_s", "median"),
                  num(w, "decode_tok_s", "median"), num(w, "ttft_ms", "median"));
    json_array_foreach(json_object_get(res, "ladder"), i, w) {
        if ((int)num(w, "status", NULL) != 200) continue; /* rejected sizes are not plotted */
        sb_printf(&lad, "%d %g %g %g %g\n", (int)num(w, "target_tokens", NULL), num(w, "prompt_tokens", "median"),
                  num(w, "prefill_tok_s", "median"), num(w, "decode_tok_s", "median"), num(w, "ttft_ms", "median"));
    }
    /* columns: bars: workload decode_tok_s prefill_tok_s ttft_ms; concurrency: streams total_tok_s
     * per_stream_decode_tok_s ttft_ms; ladder: target_tokens prompt_tokens prefill_tok_s decode_tok_s ttft_ms */
    int rc = write_dat(prefix, "bars", &bars);
    if (rc == 0) rc = write_dat(prefix, "concurrency", &conc);
    if (rc == 0) rc = write_dat(prefix, "ladder", &lad);
    sb_free(&bars);
    sb_free(&conc);
    sb_free(&lad);
    return rc;
}
