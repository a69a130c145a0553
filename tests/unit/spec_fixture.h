/* spec_fixture.h — what the engine-level tests of test_spec.c and
 * test_row_choice.c share: tinycoder opened on a device ("cpu", "cuda", or
 * "cpu+sample_rows": the CPU backend given a sample_rows op, so that the
 * engine's side of sampling on the device runs without a GPU), a
 * workload's prompts, a request's tokens collected, plain greedy params,
 * and a two-sample chi-square. */
#ifndef KS_TEST_SPEC_FIXTURE_H
#define KS_TEST_SPEC_FIXTURE_H

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "chat/chat_template.h"
#include "engine/engine.h"
#include "sample/sample.h"
#include "tok/tok.h"
#include "engine_drain.h"
#include "test.h"

/* a test's opening: skipped where the workload's prompts (FILE, e.g.
 * "chat.jsonl") are not in ../shared */
#define SKIP_WITHOUT_PROMPTS(file)                                                  \
    do {                                                                          \
        if (!test_shared_path("models/tinycoder/prompts/" file))                  \
            SKIP("../shared/models/tinycoder/prompts not found");                 \
    } while (0)

typedef struct {
    backend *be;
    model *m;
    tokenizer *tk;
    chat_template *ct;
} fx;

/* The CPU backend with a sample_rows op (as CUDA has it), so that the
 * engine hands it the rows of sampled requests with their uniforms — the
 * engine's side of sampling on the device, run without a GPU. Each row: the
 * host's distribution (sample_dist) drawn at u (sample_draw_u). */
static sampler *rows_smp;
static float *rows_copy;
static inline void host_sample_rows(backend *be, int32_t *out, const float *in, int cols, const bk_sample_row *rows,
                                    int n) {
    if (!rows_smp) rows_smp = sampler_new(cols), rows_copy = malloc((size_t)cols * sizeof *rows_copy);
    for (int i = 0; i < n; i++) {
        sample_params sp;
        sample_params_default(&sp);
        sp.temperature = rows[i].temperature, sp.top_k = rows[i].top_k, sp.top_p = rows[i].top_p,
        sp.min_p = rows[i].min_p;
        memcpy(rows_copy, in + (size_t)rows[i].row * cols, (size_t)cols * sizeof *rows_copy);
        const int32_t *ids;
        const float *probs;
        int k = sample_dist(rows_smp, &sp, rows_copy, &ids, &probs);
        out[rows[i].row] = sample_draw_u(ids, probs, k, rows[i].u);
    }
}
static backend_ops cpu_sampling_ops;

static inline int fx_open_on(fx *f, const char *device) {
    memset(f, 0, sizeof *f);
    const char *dir = test_shared_path("models/tinycoder");
    if (!dir) return 0;
    bool rows = !strcmp(device, "cpu+sample_rows");
    CHECK(backend_new(&f->be, rows ? "cpu" : device, 2) == 0);
    if (!f->be) return 0;
    if (rows) {
        cpu_sampling_ops = *f->be->ops;
        cpu_sampling_ops.sample_rows = host_sample_rows;
        f->be->ops = &cpu_sampling_ops;
    }
    CHECK(model_load(&f->m, dir, f->be) == 0);
    CHECK(tok_load(&f->tk, dir) == 0);
    CHECK(chat_template_load(&f->ct, dir) == 0);
    return f->m && f->tk && f->ct;
}

static inline int fx_open(fx *f) { return fx_open_on(f, "cpu"); }

static inline void fx_close(fx *f) {
    chat_template_free(f->ct);
    tok_free(f->tk);
    model_free(f->m);
    backend_free(f->be);
}

/* prompt ids of line i of a workload (chat ones through the template) */
static inline int32_t *workload_prompt(fx *f, const char *file, int line, int *n, char **reference) {
    const char *path = test_shared_path(file);
    if (!path) return NULL;
    FILE *fp = fopen(path, "r");
    if (!fp) return NULL;
    char *buf = NULL;
    size_t cap = 0;
    ssize_t len = 0;
    for (int i = 0; i <= line; i++)
        if ((len = getline(&buf, &cap, fp)) < 0) break;
    fclose(fp);
    int32_t *ids = NULL;
    if (len > 0) {
        json_t *j = json_loadb(buf, (size_t)len, 0, NULL);
        json_t *msgs = json_object_get(j, "messages");
        if (reference) {
            const char *r = json_string_value(json_object_get(j, "reference"));
            *reference = r ? strdup(r) : NULL;
        }
        if (msgs) {
            char *text = NULL;
            if (chat_template_apply(f->ct, msgs, NULL, true, NULL, &text) == 0)
                tok_encode(f->tk, text, strlen(text), false, &ids, n);
            free(text);
        } else {
            const char *p = json_string_value(json_object_get(j, "prompt"));
            if (p) tok_encode(f->tk, p, strlen(p), true, &ids, n);
        }
        json_decref(j);
    }
    free(buf);
    return ids;
}

typedef struct {
    int32_t toks[256];
    int n, drafted, accepted;
} run_out;

static inline void collect(engine_req *r, run_out *o) {
    memset(o, 0, sizeof *o);
    engine_event done;
    o->n = engine_drain(r, o->toks, 256, &done, NULL, NULL);
    if (o->n > 256) o->n = 256;
    CHECK(done.type == ENGINE_EV_DONE);
    o->drafted = done.n_drafted;
    o->accepted = done.n_accepted;
}

static inline engine_params params(int n, int spec) {
    engine_params p;
    memset(&p, 0, sizeof p);
    p.max_tokens = n;
    sample_params_default(&p.sp);
    p.sp.temperature = 0;
    p.spec = spec;
    p.eos[0] = 8183; /* <|im_end|> */
    p.eos[1] = 8181;
    p.n_eos = 2;
    return p;
}

/* two-sample chi-square over bins with >= 5 expected; returns statistic, *df */
static inline double chi2(const int *a, const int *b, int nbins, int *df) {
    double na = 0, nb = 0, x = 0;
    for (int i = 0; i < nbins; i++) { na += a[i]; nb += b[i]; }
    int used = 0;
    double ra = 0, rb = 0;
    for (int i = 0; i < nbins; i++) {
        double tot = a[i] + b[i];
        if (tot * na / (na + nb) < 5 || tot * nb / (na + nb) < 5) { ra += a[i]; rb += b[i]; continue; }
        double ea = tot * na / (na + nb), eb = tot * nb / (na + nb);
        x += (a[i] - ea) * (a[i] - ea) / ea + (b[i] - eb) * (b[i] - eb) / eb;
        used++;
    }
    double tot = ra + rb;
    if (tot > 0) { /* pooled rare bins */
        double ea = tot * na / (na + nb), eb = tot * nb / (na + nb);
        if (ea >= 5 && eb >= 5) {
            x += (ra - ea) * (ra - ea) / ea + (rb - eb) * (rb - eb) / eb;
            used++;
        }
    }
    *df = used - 1;
    return x;
}

/* chi-square critical value at p = 0.001 (Wilson-Hilferty) */
static inline double chi2_crit(int df) {
    double z = 3.09, h = 2.0 / (9.0 * df);
    return df * pow(1 - h + z * sqrt(h), 3);
}

#endif
