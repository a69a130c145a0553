/* test_graph_replay.c — the CUDA-graph path checked on the CPU: a recording
 * backend wraps the CPU backend and implements graph_begin/end/launch the
 * way CUDA graphs behave — ops issued during capture are not run but
 * recorded with their arguments by value (the attention batch struct
 * included), buffers by address, and a launch replays them. Greedy output
 * through the engine (the target forward, the MTP head's passes, DFlash's
 * context and block passes, all replayed from recordings) must equal the
 * plain CPU's, and graphs must really have been recorded and replayed. It
 * has a prompt path (the CPU's matmul), so prompt rows take their bulk
 * sequence as on CUDA. This
 * catches a recording keyed on too little (a host-side value that changes
 * between calls with one key) or a buffer that moves under a recording.
 * Every eager forward advances the backend's epoch, as the CUDA backend's
 * does when a scratch buffer grows: graphs recorded before are refused as
 * stale and the model must record them again. (Every second one made the
 * MTP run's staleness hang on the parity of the engine's start-up
 * forwards.) */
#include <jansson.h>
#include <stdlib.h>
#include <unistd.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "model/dflash.h"
#include "prefill_logits.h"
#include "tok/tok.h"
#include "engine_drain.h"
#include "test.h"

typedef enum {
    R_EMBED, R_RMSNORM, R_MATMUL, R_ROPE, R_KV_STORE, R_ATTN, R_SILU, R_ADD, R_QK_NORM_ROPE, R_GATHER, R_MTP_INPUT,
    R_ARGMAX, R_FUSED, R_PROMPT, R_SPEC_SHIFT
} rec_kind;

typedef struct {
    rec_kind k;
    float *out;
    const float *in, *in2;
    float *out2;
    int32_t *iout;
    const bk_weight *w, *w2, *w3;
    const int32_t *ids;
    const float *fp;
    int i[6];
    float f;
    size_t z;
    bk_attn_batch ab; /* by value, as a kernel's parameters are */
    int32_t *p[9];    /* spec_shift's buffers */
} rec_op;

typedef struct {
    rec_op *ops;
    int n, cap;
    int epoch; /* the backend's epoch when recorded */
} rec_graph;

typedef struct {
    backend *cpu;
    rec_graph *cur; /* capturing into this, or NULL */
    int recorded, launched;
    long prompt_calls; /* matmul_prompt calls (prompt rows took the bulk path) */
    int epoch, refused; /* the epoch (eager forwards so far); launches refused as stale */
    int end_delay_us;          /* graph_end sleeps this long (a CUDA graph's instantiation) */
} rec_state;

static rec_state *st(backend *be) { return be->impl; }
static backend *cpu(backend *be) { return st(be)->cpu; }

/* Records op during a capture (returns 1), else 0: run it now. */
static int rec(backend *be, const rec_op *op) {
    rec_graph *g = st(be)->cur;
    if (!g) {
        if (op->k == R_EMBED) st(be)->epoch++; /* an eager forward: a scratch buffer grew */
        return 0;
    }
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 64;
        g->ops = realloc(g->ops, (size_t)g->cap * sizeof *g->ops);
    }
    g->ops[g->n++] = *op;
    return 1;
}

/* The CPU attention sizes its scratch from ab->max_pos; CUDA's split depends
 * on the pool's capacity only. A replay carries the capture's max_pos, so
 * size for the capacity, as CUDA does. */
static bk_attn_batch cap_ab(const bk_attn_batch *ab) {
    bk_attn_batch a = *ab;
    a.max_pos = a.kv_capacity - 1;
    return a;
}

static void run_op(backend *be, const rec_op *o) {
    backend *c = cpu(be);
    const backend_ops *op = c->ops;
    switch (o->k) {
    case R_EMBED: op->embed(c, o->out, o->w, o->ids, o->i[0]); break;
    case R_RMSNORM: op->rmsnorm(c, o->out, o->i[0], o->in, o->i[1], o->w, o->i[2], o->i[3], o->i[4], o->f); break;
    case R_MATMUL: op->matmul(c, o->out, o->in, o->w, o->w2, o->i[0]); break;
    case R_ROPE: op->rope(c, o->out, o->i[0], o->i[1], o->i[2], o->i[3], o->ids, o->fp); break;
    case R_KV_STORE: op->kv_store(c, o->out, o->out2, o->in, o->in2, o->i[0], &o->ab, o->i[1]); break;
    case R_ATTN: {
        bk_attn_batch a = cap_ab(&o->ab);
        op->attention(c, o->out, o->in, o->i[0], o->in2, o->fp, &a, o->i[1], o->i[2], o->i[3], o->f);
        break;
    }
    case R_SILU: op->silu_mul(c, o->out, o->in, o->i[0], o->i[1]); break;
    case R_ADD: op->add(c, o->out, o->in, o->z); break;
    case R_QK_NORM_ROPE:
        op->qk_norm_rope(c, o->out, o->i[0], o->i[1], o->i[2], o->i[3], o->i[4], o->w, o->w2, o->f, o->ids, o->fp,
                         o->out2, (void *)o->in2, &o->ab);
        break;
    case R_GATHER: op->gather_rows(c, o->out, o->in, o->ids, o->i[0], o->i[1]); break;
    case R_MTP_INPUT: op->mtp_input(c, o->out, o->w, o->ids, o->in, o->iout, o->w2, o->w3, o->i[0], o->i[1], o->f); break;
    case R_ARGMAX: op->argmax(c, o->iout, o->in, o->i[0], o->i[1]); break;
    case R_FUSED: op->matmul_fused(c, o->out, o->in, o->w2, o->f, o->w, o->w3, o->i[0], o->i[1]); break;
    case R_SPEC_SHIFT:
        op->spec_shift(c, o->p[0], o->p[1], o->p[2], o->p[3], o->p[4], o->p[5], o->p[6], o->p[7], o->p[8], o->i[0],
                       o->i[1]);
        break;
    case R_PROMPT: { /* matmul_prompt's norm and modes as the CPU's separate ops */
        int n = o->i[0], mode = o->i[1], k = (int)o->w->cols;
        float *act = NULL;
        const float *in = o->in;
        if (mode & BK_MM_SWIGLU_IN) {
            act = malloc((size_t)n * k * sizeof *act);
            op->silu_mul(c, act, in, n, k);
            in = act;
        }
        op->matmul_fused(c, o->out, in, o->w3, o->f, o->w, o->w2, n, mode & BK_MM_ADD);
        free(act);
        break;
    }
    }
}

#define DO(...)                                   \
    do {                                          \
        rec_op o = {__VA_ARGS__};                 \
        if (!rec(be, &o)) run_op(be, &o);         \
    } while (0)

static void r_embed(backend *be, float *out, const bk_weight *t, const int32_t *ids, int n) {
    DO(.k = R_EMBED, .out = out, .w = t, .ids = ids, .i = {n});
}
static void r_rmsnorm(backend *be, float *out, int os, const float *in, int is, const bk_weight *w, int n, int nh, int dim,
                      float eps) {
    DO(.k = R_RMSNORM, .out = out, .in = in, .w = w, .i = {os, is, n, nh, dim}, .f = eps);
}
static void r_matmul(backend *be, float *out, const float *in, const bk_weight *w, const bk_weight *bias, int n) {
    DO(.k = R_MATMUL, .out = out, .in = in, .w = w, .w2 = bias, .i = {n});
}
/* the prompt path is the CPU's matmul here: the model's prompt-row
 * sequences (the norms, residual adds and SwiGLU in matmul_prompt, prompt
 * attention tiles) run on the CPU tests too */
static void r_matmul_prompt(backend *be, float *out, const float *in, const bk_weight *norm, float eps, const bk_weight *w,
                            const bk_weight *bias, int n, int mode) {
    DO(.k = R_PROMPT, .out = out, .in = in, .w = w, .w2 = bias, .w3 = norm, .f = eps, .i = {n, mode});
    st(be)->prompt_calls++;
}
static void r_rope(backend *be, float *x, int rs, int n, int nh, int hd, const int32_t *pos, const float *inv) {
    DO(.k = R_ROPE, .out = x, .ids = pos, .fp = inv, .i = {rs, n, nh, hd});
}
static void r_kv_store(backend *be, void *kc, void *vc, const float *k, const float *v, int ss, const bk_attn_batch *ab,
                       int kvd) { /* the CPU's f32 KV */
    DO(.k = R_KV_STORE, .out = kc, .out2 = vc, .in = k, .in2 = v, .i = {ss, kvd}, .ab = *ab);
}
static void r_attention(backend *be, float *out, const float *q, int qs, const void *kc, const void *vc,
                        const bk_attn_batch *ab, int nh, int nkv, int hd, float scale) {
    DO(.k = R_ATTN, .out = out, .in = q, .in2 = kc, .fp = vc, .i = {qs, nh, nkv, hd}, .f = scale, .ab = *ab);
}
static void r_silu(backend *be, float *out, const float *gu, int n, int dim) {
    DO(.k = R_SILU, .out = out, .in = gu, .i = {n, dim});
}
static void r_fused(backend *be, float *out, const float *in, const bk_weight *norm, float eps, const bk_weight *w,
                    const bk_weight *bias, int n, int mode) {
    DO(.k = R_FUSED, .out = out, .in = in, .w = w, .w2 = norm, .w3 = bias, .i = {n, mode}, .f = eps);
}
static void r_add(backend *be, float *x, const float *y, size_t n) { DO(.k = R_ADD, .out = x, .in = y, .z = n); }
static void r_spec_shift(backend *be, const int32_t *ids, const int32_t *drafts, const int32_t *k, int32_t *tok,
                         int32_t *pos, int32_t *pos2, const int32_t *entry, int32_t *slots, const int32_t *table, int bs,
                         int n) {
    DO(.k = R_SPEC_SHIFT, .p = {(int32_t *)ids, (int32_t *)drafts, (int32_t *)k, tok, pos, pos2, (int32_t *)entry, slots,
                                (int32_t *)table},
       .i = {bs, n});
}
static void r_qk_norm_rope(backend *be, float *qkv, int stride, int n, int nh, int nkv, int hd, const bk_weight *qn,
                           const bk_weight *kn, float eps, const int32_t *pos, const float *inv, void *kc, void *vc,
                           const bk_attn_batch *ab) {
    DO(.k = R_QK_NORM_ROPE, .out = qkv, .w = qn, .w2 = kn, .ids = pos, .fp = inv, .i = {stride, n, nh, nkv, hd}, .f = eps,
       .out2 = kc, .in2 = vc, .ab = ab ? *ab : (bk_attn_batch){0});
}
static void r_gather(backend *be, float *out, const float *in, const int32_t *idx, int n, int dim) {
    DO(.k = R_GATHER, .out = out, .in = in, .ids = idx, .i = {n, dim});
}

static void r_mtp_input(backend *be, float *out, const bk_weight *t, const int32_t *ids, const float *hid,
                        const int32_t *idx, const bk_weight *we, const bk_weight *wh, int n, int dim, float eps) {
    DO(.k = R_MTP_INPUT, .out = out, .w = t, .ids = ids, .in = hid, .iout = (int32_t *)idx, .w2 = we, .w3 = wh,
       .i = {n, dim}, .f = eps);
}

static void r_argmax(backend *be, int32_t *out, const float *in, int n, int cols) {
    DO(.k = R_ARGMAX, .iout = out, .in = in, .i = {n, cols});
}

static int r_graph_begin(backend *be) {
    st(be)->cur = calloc(1, sizeof(rec_graph));
    return st(be)->cur ? 0 : -1;
}
static void *r_graph_end(backend *be) {
    rec_graph *g = st(be)->cur;
    st(be)->cur = NULL;
    g->epoch = st(be)->epoch;
    st(be)->recorded++;
    if (st(be)->end_delay_us) usleep((useconds_t)st(be)->end_delay_us);
    return g;
}
static int r_graph_launch(backend *be, void *graph) {
    rec_graph *g = graph;
    if (g->epoch != st(be)->epoch) {
        st(be)->refused++;
        return 1; /* stale */
    }
    for (int i = 0; i < g->n; i++) run_op(be, &g->ops[i]);
    st(be)->launched++;
    return 0;
}
static void r_graph_free(backend *be, void *graph) {
    rec_graph *g = graph;
    free(g->ops);
    free(g);
}

/* pass-throughs */
static void *r_alloc(backend *be, size_t n) { return cpu(be)->ops->buf_alloc(cpu(be), n); }
static void r_buf_free(backend *be, void *p) { cpu(be)->ops->buf_free(cpu(be), p); }
static int r_up(backend *be, void *d, const void *s, size_t n) { return cpu(be)->ops->buf_upload(cpu(be), d, s, n); }
static int r_down(backend *be, void *d, const void *s, size_t n) { return cpu(be)->ops->buf_download(cpu(be), d, s, n); }
static int r_winit(backend *be, bk_weight *w, const st_tensor *const *p, int n) {
    return cpu(be)->ops->weight_init(cpu(be), w, p, n);
}
static void r_wrel(backend *be, bk_weight *w) { cpu(be)->ops->weight_release(cpu(be), w); }
static void r_free(backend *be) {
    backend_free(cpu(be));
    free(st(be));
    free(be);
}

static const backend_ops rec_ops = {
    .name = "recording", .buf_alloc = r_alloc, .buf_free = r_buf_free, .buf_upload = r_up, .buf_download = r_down,
    .weight_init = r_winit, .weight_release = r_wrel, .embed = r_embed, .rmsnorm = r_rmsnorm, .matmul = r_matmul,
    .matmul_prompt = r_matmul_prompt,
    .rope = r_rope, .kv_store = r_kv_store, .attention = r_attention, .silu_mul = r_silu,
    .matmul_fused = r_fused, .add = r_add,
    .qk_norm_rope = r_qk_norm_rope,
    .gather_rows = r_gather, .mtp_input = r_mtp_input, .argmax = r_argmax, .spec_shift = r_spec_shift, .graph_begin = r_graph_begin, .graph_end = r_graph_end, .graph_launch = r_graph_launch,
    .graph_free = r_graph_free, .free = r_free};

static backend *rec_backend_new(void) {
    backend *be = calloc(1, sizeof *be);
    rec_state *s = calloc(1, sizeof *s);
    if (!be || !s || backend_cpu_new(&s->cpu, 2) != 0) {
        free(be);
        free(s);
        return NULL;
    }
    be->ops = &rec_ops;
    be->impl = s;
    be->kv_elem_bytes = s->cpu->kv_elem_bytes;
    be->kv_elem_choices = s->cpu->kv_elem_choices;
    return be;
}

/* greedy tokens of two prompts decoded together (one batch) through an
 * engine on `be` with the given proposers; returns tokens of each in out[i] */
static void greedy2(backend *be, int32_t *const ids[2], const int n[2], int n_gen, bool mtp, bool with_dflash,
                    int32_t out[2][96], int got[2], long long *accepted) {
    const char *dir = test_shared_path("models/tinycoder");
    model *m = NULL;
    tokenizer *tk = NULL;
    dflash *d = NULL;
    engine *e = NULL;
    CHECK(model_load(&m, dir, be) == 0);
    CHECK(tok_load(&tk, dir) == 0);
    if (m && with_dflash) CHECK(dflash_load(&d, test_shared_path("models/tinycoder/dflash"), m) == 0);
    engine_config ec = {.max_concurrent = 2, .prefill_chunk = 512, .ctx_size = 512, .spec_min_repetition = 0.0,
                        .no_runtime_gates = true, .mtp = mtp, .mtp_depth = 3, .dflash = d,
                        .dflash_block = 4}; /* fixed: the engine's own choice follows measured costs, which
                                             * differ between two engines on a loaded machine */
    if (m && tk && (!with_dflash || d)) CHECK(engine_start(&e, m, tk, &ec) == 0);
    got[0] = got[1] = 0;
    if (e) {
        engine_req *r[2];
        for (int i = 0; i < 2; i++) {
            engine_params p;
            memset(&p, 0, sizeof p);
            p.max_tokens = n_gen;
            sample_params_default(&p.sp);
            p.sp.temperature = 0;
            p.spec = -1;
            p.mtp = -1;
            r[i] = engine_submit(e, ids[i], n[i], &p);
        }
        for (int i = 0; i < 2; i++) {
            engine_event done;
            if (!r[i]) continue;
            got[i] = engine_drain(r[i], out[i], n_gen, &done, NULL, NULL);
            if (got[i] > n_gen) got[i] = n_gen;
            CHECK(done.type == ENGINE_EV_DONE);
            *accepted += done.n_accepted;
        }
        engine_stop(e);
    }
    dflash_free(d);
    tok_free(tk);
    model_free(m);
}

TEST(test_graph_replay_matches_direct) {
    if (!test_shared_path("models/tinycoder/dflash")) SKIP("../shared/models/tinycoder/dflash not found");
    json_t *rep = json_load_file(test_shared_path("models/tinycoder/dflash/dflash_report.json"), 0, NULL);
    CHECK(rep != NULL);
    if (!rep) return;
    int32_t buf[2][1024], *ids[2] = {buf[0], buf[1]};
    int n[2];
    for (int p = 0; p < 2; p++) {
        json_t *it = json_object_get(json_array_get(json_object_get(rep, "eval"), (size_t)p + 1), "prompt_ids");
        n[p] = (int)json_array_size(it);
        for (int i = 0; i < n[p] && i < 1024; i++) ids[p][i] = (int32_t)json_integer_value(json_array_get(it, i));
    }
    for (int v = 0; v < 3; v++) { /* plain, MTP, DFlash */
        bool mtp = v == 1, fl = v == 2;
        backend *plain = NULL, *rb = rec_backend_new();
        CHECK(backend_cpu_new(&plain, 2) == 0);
        CHECK(rb != NULL);
        if (!plain || !rb) { backend_free(plain); if (rb) backend_free(rb); break; }
        int32_t a[2][96], b[2][96];
        int na[2], nb[2];
        long long acc_a = 0, acc_b = 0;
        greedy2(plain, ids, n, 96, mtp, fl, a, na, &acc_a);
        greedy2(rb, ids, n, 96, mtp, fl, b, nb, &acc_b);
        rec_state *s = st(rb);
        static const char *names[3] = {"plain", "MTP", "DFlash"};
        printf("    %s: 2 x %d tokens decoded together; %d graphs recorded, %d replays, %d refused as stale; %lld / %lld "
               "drafts accepted\n",
               names[v], nb[0], s->recorded, s->launched, s->refused, acc_a, acc_b);
        for (int p = 0; p < 2; p++) {
            CHECK_EQ_INT(na[p], 96);
            CHECK_MSG(na[p] == nb[p] && !memcmp(a[p], b[p], (size_t)na[p] * sizeof **a),
                      "%s, prompt %d: output with replayed graphs differs", names[v], p);
        }
        CHECK_EQ_INT(acc_a, acc_b); /* the drafts themselves were the same */
        CHECK(s->recorded > 0 && s->launched > s->recorded);
        CHECK(s->prompt_calls > 0);
        if (v > 0) CHECK(s->refused > 0); /* plain decoding runs nothing eagerly once its graphs exist */
        backend_free(plain);
        backend_free(rb);
    }
    json_decref(rep);
}

/* A pass that records a graph is not a pass's cost: with recordings that
 * take 40 ms (far more than a tinycoder decode step on a CPU, as a CUDA
 * graph's instantiation is next to a 0.14 ms step on the H200), the MTP
 * head's cost the engine follows stays near its probed value. Each of a
 * run's recordings would otherwise have added several decode steps to the
 * average. */
TEST(test_graph_recordings_leave_pass_costs_alone) {
    const char *dir = test_shared_path("models/tinycoder");
    if (!dir) SKIP("../shared/models/tinycoder not found");
    backend *rb = rec_backend_new();
    CHECK(rb != NULL);
    if (!rb) return;
    st(rb)->end_delay_us = 40000;
    model *m = NULL;
    tokenizer *tk = NULL;
    engine *e = NULL;
    CHECK(model_load(&m, dir, rb) == 0);
    CHECK(tok_load(&tk, dir) == 0);
    engine_config ec = {.max_concurrent = 1, .prefill_chunk = 512, .ctx_size = 512, .spec_min_repetition = 0.0,
                        .no_runtime_gates = true, .mtp = true, .mtp_depth = 3};
    if (m && tk) CHECK(engine_start(&e, m, tk, &ec) == 0);
    if (e) {
        engine_stats s0, s1;
        engine_get_stats(e, &s0);
        int32_t ids[64];
        for (int i = 0; i < 64; i++) ids[i] = 100 + (i * 37) % 500;
        engine_params p;
        memset(&p, 0, sizeof p);
        p.max_tokens = 48;
        sample_params_default(&p.sp);
        p.sp.temperature = 0;
        p.spec = -1;
        p.mtp = -1;
        engine_req *r = engine_submit(e, ids, 64, &p);
        engine_event done = {.type = ENGINE_EV_ERROR};
        if (r) engine_drain(r, NULL, 0, &done, NULL, NULL);
        CHECK(done.type == ENGINE_EV_DONE);
        engine_get_stats(e, &s1);
        printf("    MTP pass cost %.3f decode steps probed, %.3f after 48 tokens; %d graphs recorded\n",
               s0.src_cost_ratio[DRAFT_SRC_MTP], s1.src_cost_ratio[DRAFT_SRC_MTP], st(rb)->recorded);
        CHECK(st(rb)->recorded > 2 && s1.src_drafted[DRAFT_SRC_MTP] > 0);
        CHECK(s0.src_cost_ratio[DRAFT_SRC_MTP] > 0 && s1.src_cost_ratio[DRAFT_SRC_MTP] < 2 * s0.src_cost_ratio[DRAFT_SRC_MTP] + 0.5);
        engine_stop(e);
    }
    tok_free(tk);
    model_free(m);
    backend_free(rb);
}

/* The MLP's row tiles (model_mlp_rows at a time) leave no trace: a prompt of
 * more than one tile gives bitwise the last row's logits of chunks of at
 * most one tile — on the prompt path (the recording backend's, the rows
 * marked prompt rows) and on the decode path (the plain CPU), which also
 * agree with each other. */
TEST(test_mlp_row_tiles_leave_no_trace) {
    const char *dir = test_shared_path("models/tinycoder");
    if (!dir) SKIP("../shared/models/tinycoder not found");
    int n = MODEL_MLP_ROWS + 301;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    for (int i = 0; i < n; i++) ids[i] = 100 + (int32_t)((i * 7919u) % 7000); /* a long prompt of varied tokens */
    float *got[2][2] = {{NULL}};
    for (int v = 0; v < 2; v++) { /* 0: plain CPU, decode rows; 1: recording backend, prompt rows */
        backend *be = NULL;
        if (v == 0) CHECK(backend_cpu_new(&be, 2) == 0);
        else be = rec_backend_new();
        model *m = NULL;
        kv_cache kv = {0};
        if (be) CHECK(model_load(&m, dir, be) == 0);
        if (m) CHECK(model_kv_init(m, &kv, n + 16) == 0);
        if (m) CHECK_MSG(model_mlp_rows(m) < n, "tinycoder's MLP tile: %d rows, not under %d", model_mlp_rows(m), n);
        if (m && kv.n_blocks) {
            got[v][0] = prefill_logits(m, &kv, ids, n, n, v == 1);
            got[v][1] = prefill_logits(m, &kv, ids, n, 1000, v == 1);
            CHECK_MSG(!memcmp(got[v][0], got[v][1], (size_t)m->cfg.vocab_size * 4),
                      "%s: one forward of %d rows (two MLP tiles) differs from chunks of 1000",
                      v ? "prompt path" : "decode path", n);
            if (v == 1) {
                CHECK(st(be)->prompt_calls > 0);
                CHECK_MSG(!memcmp(got[0][0], got[1][0], (size_t)m->cfg.vocab_size * 4),
                          "the prompt path's logits differ from the decode path's");
            }
            kv_cache_free(&kv);
        }
        model_free(m);
        backend_free(be);
    }
    for (int v = 0; v < 2; v++) free(got[v][0]), free(got[v][1]);
    free(ids);
}

static void no_ops(model *m, const void *ctx) {
    (void)m;
    (void)ctx;
}

/* More shapes than the graph table holds (a server meets new batch sizes
 * and draft lengths for as long as it runs): each new key
 * still gets its graph, in the slot used longest ago, and keys in use keep
 * theirs. */
TEST(test_graph_table_replaces_the_least_recently_used) {
    backend *rb = rec_backend_new();
    CHECK(rb != NULL);
    if (!rb) return;
    model m;
    memset(&m, 0, sizeof m);
    m.be = rb;
    rec_state *s = st(rb);
    int keys = MODEL_MAX_GRAPHS + 8;
    for (int i = 0; i < keys; i++) {
        model_graph_key k = {.tag = MODEL_GRAPH_FORWARD, .n = 1, .aux = i};
        model_graph_key k0 = {.tag = MODEL_GRAPH_FORWARD, .n = 1, .aux = 0};
        for (int rep = 0; rep < 3; rep++) CHECK(model_graph_run(&m, &k, true, no_ops, NULL) == 0);
        CHECK(model_graph_run(&m, &k0, true, no_ops, NULL) == 0); /* key 0 stays in use */
    }
    /* each key seen three times: run, recorded, replayed */
    CHECK_EQ_INT(s->recorded, keys);
    CHECK_EQ_INT(m.n_graphs, MODEL_MAX_GRAPHS);
    CHECK(s->launched >= 2 * keys); /* key 0's replays and each key's third sight */
    int before = s->recorded;
    model_graph_key k0 = {.tag = MODEL_GRAPH_FORWARD, .n = 1, .aux = 0};
    CHECK(model_graph_run(&m, &k0, true, no_ops, NULL) == 0);
    CHECK_EQ_INT(s->recorded, before); /* key 0 was never the one replaced */
    model_graphs_drop(&m);
    backend_free(rb);
}
