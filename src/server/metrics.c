/* metrics.c — counters and the Prometheus text format (see metrics.h). */
#include "server/metrics.h"

#include "base/strbuf.h"

static const double ttft_le[METRICS_BUCKETS] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double tpot_le[METRICS_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.15, 0.3, 0.6, 1.2, 2.5};
static const char *surf_names[SURF_COUNT] = {"chat_completions", "completions", "responses", "anthropic_messages",
                                             "ollama", "other"};

void metrics_request(metrics *m, app_surface s, int status) {
    int c = status / 100;
    if (c < 0 || c > 5) c = 0;
    if ((unsigned)s >= SURF_COUNT) s = SURF_OTHER;
    atomic_fetch_add(&m->requests[s][c], 1);
}

static void observe(atomic_llong *h, const double *le, double v) {
    int i = 0;
    while (i < METRICS_BUCKETS && v > le[i]) i++;
    atomic_fetch_add(&h[i], 1);
}

void metrics_latency(metrics *m, double ttft, double tpot, int n_gen) {
    if (ttft > 0) {
        observe(m->ttft, ttft_le, ttft);
        atomic_fetch_add(&m->ttft_us_sum, (long long)(ttft * 1e6));
        atomic_fetch_add(&m->ttft_n, 1);
    }
    if (n_gen > 1 && tpot > 0) {
        observe(m->tpot, tpot_le, tpot);
        atomic_fetch_add(&m->tpot_us_sum, (long long)(tpot * 1e6));
        atomic_fetch_add(&m->tpot_n, 1);
    }
}

static void hist(strbuf *b, const char *name, const char *help, atomic_llong *h, const double *le, long long sum_us,
                 long long n) {
    sb_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    long long cum = 0;
    for (int i = 0; i < METRICS_BUCKETS; i++) {
        cum += atomic_load(&h[i]);
        sb_printf(b, "%s_bucket{le=\"%g\"} %lld\n", name, le[i], cum);
    }
    cum += atomic_load(&h[METRICS_BUCKETS]);
    sb_printf(b, "%s_bucket{le=\"+Inf\"} %lld\n%s_sum %.6f\n%s_count %lld\n", name, cum, name, sum_us / 1e6, name, n);
}

char *metrics_render(metrics *m, engine *e) {
    strbuf b = {0};
    sb_puts(&b, "# HELP kestrel_requests_total HTTP requests by API surface and status class.\n"
                "# TYPE kestrel_requests_total counter\n");
    for (int s = 0; s < SURF_COUNT; s++)
        for (int c = 1; c <= 5; c++) {
            long long v = atomic_load(&m->requests[s][c]);
            if (v) sb_printf(&b, "kestrel_requests_total{surface=\"%s\",status=\"%dxx\"} %lld\n", surf_names[s], c, v);
        }
    engine_stats st;
    engine_get_stats(e, &st);
    sb_printf(&b,
              "# HELP kestrel_prompt_tokens_total Prompt tokens processed.\n# TYPE kestrel_prompt_tokens_total counter\n"
              "kestrel_prompt_tokens_total %lld\n"
              "# HELP kestrel_generated_tokens_total Tokens generated.\n# TYPE kestrel_generated_tokens_total counter\n"
              "kestrel_generated_tokens_total %lld\n"
              "# HELP kestrel_queue_depth Requests waiting for a slot.\n# TYPE kestrel_queue_depth gauge\n"
              "kestrel_queue_depth %d\n"
              "# HELP kestrel_active_sequences Sequences being generated.\n# TYPE kestrel_active_sequences gauge\n"
              "kestrel_active_sequences %d\n"
              "# HELP kestrel_kv_blocks_free Free KV cache blocks.\n# TYPE kestrel_kv_blocks_free gauge\n"
              "kestrel_kv_blocks_free %d\n"
              "# HELP kestrel_kv_blocks_total KV cache blocks.\n# TYPE kestrel_kv_blocks_total gauge\n"
              "kestrel_kv_blocks_total %d\n"
              "# HELP kestrel_preemptions_total Sequences preempted for KV space.\n# TYPE kestrel_preemptions_total counter\n"
              "kestrel_preemptions_total %lld\n"
              "# HELP kestrel_spec_draft_tokens_total Draft tokens verified (every source).\n"
              "# TYPE kestrel_spec_draft_tokens_total counter\nkestrel_spec_draft_tokens_total %lld\n"
              "# HELP kestrel_spec_accepted_tokens_total Draft tokens accepted.\n"
              "# TYPE kestrel_spec_accepted_tokens_total counter\nkestrel_spec_accepted_tokens_total %lld\n"
              "# HELP kestrel_spec_verify_steps_total Verify steps run.\n"
              "# TYPE kestrel_spec_verify_steps_total counter\nkestrel_spec_verify_steps_total %lld\n"
              "# HELP kestrel_spec_acceptance_rate Accepted / drafted tokens since start.\n"
              "# TYPE kestrel_spec_acceptance_rate gauge\nkestrel_spec_acceptance_rate %.4f\n"
              "# HELP kestrel_spec_gate_off_total Times the speculation gates turned drafting off, by gate (prompt: requests; runtime: a proposer or a request's drafting, each closing).\n"
              "# TYPE kestrel_spec_gate_off_total counter\n"
              "kestrel_spec_gate_off_total{gate=\"prompt\"} %lld\nkestrel_spec_gate_off_total{gate=\"runtime\"} %lld\n"
              "# HELP kestrel_spec_gate_retry_total Runtime gates whose back-off passed: a proposer or a request's drafting started again.\n"
              "# TYPE kestrel_spec_gate_retry_total counter\nkestrel_spec_gate_retry_total %lld\n"
              "# HELP kestrel_spec_verify_cost_ratio Measured cost of a verify step over a decode step.\n"
              "# TYPE kestrel_spec_verify_cost_ratio gauge\nkestrel_spec_verify_cost_ratio %.3f\n"
              "# HELP kestrel_prefix_cache_lookup_tokens_total Prompt tokens looked up in the prefix cache.\n"
              "# TYPE kestrel_prefix_cache_lookup_tokens_total counter\nkestrel_prefix_cache_lookup_tokens_total %lld\n"
              "# HELP kestrel_prefix_cache_hit_tokens_total Prompt tokens whose KV came from the prefix cache.\n"
              "# TYPE kestrel_prefix_cache_hit_tokens_total counter\nkestrel_prefix_cache_hit_tokens_total %lld\n"
              "# HELP kestrel_prefix_cache_hit_rate Hit tokens / looked-up tokens since start.\n"
              "# TYPE kestrel_prefix_cache_hit_rate gauge\nkestrel_prefix_cache_hit_rate %.4f\n"
              "# HELP kestrel_prefix_cache_blocks KV blocks kept by the prefix cache.\n"
              "# TYPE kestrel_prefix_cache_blocks gauge\nkestrel_prefix_cache_blocks %d\n",
              st.prompt_tokens, st.generated_tokens, st.queued, st.active, st.kv_blocks_free, st.kv_blocks_total,
              st.preemptions, st.spec_drafted, st.spec_accepted, st.spec_verify_steps,
              st.spec_drafted ? (double)st.spec_accepted / st.spec_drafted : 0.0, st.gate_prompt_off,
              st.gate_runtime_off, st.gate_retries, st.verify_cost_ratio, st.prefix_lookup_tokens, st.prefix_hit_tokens,
              st.prefix_lookup_tokens ? (double)st.prefix_hit_tokens / st.prefix_lookup_tokens : 0.0,
              st.prefix_cached_blocks);
    sb_puts(&b, "# HELP kestrel_spec_proposer_draft_tokens_total Draft tokens verified, by model proposer.\n"
                "# TYPE kestrel_spec_proposer_draft_tokens_total counter\n");
    /* draft sources in the engine's order (DRAFT_SRC_*): lookup, then the model proposers */
    const char *src[DRAFT_SRC_COUNT] = {"lookup", "drafter", "mtp", "dflash"};
    for (int i = DRAFT_SRC_DRAFTER; i < DRAFT_SRC_COUNT; i++)
        sb_printf(&b, "kestrel_spec_proposer_draft_tokens_total{proposer=\"%s\"} %lld\n", src[i], st.src_drafted[i]);
    sb_puts(&b, "# HELP kestrel_spec_proposer_accepted_tokens_total Draft tokens accepted, by model proposer.\n"
                "# TYPE kestrel_spec_proposer_accepted_tokens_total counter\n");
    for (int i = DRAFT_SRC_DRAFTER; i < DRAFT_SRC_COUNT; i++)
        sb_printf(&b, "kestrel_spec_proposer_accepted_tokens_total{proposer=\"%s\"} %lld\n", src[i], st.src_accepted[i]);
    sb_puts(&b, "# HELP kestrel_spec_proposer_cost_ratio Measured cost of one proposer pass over a decode step "
                "(0: not loaded).\n# TYPE kestrel_spec_proposer_cost_ratio gauge\n");
    for (int i = DRAFT_SRC_DRAFTER; i < DRAFT_SRC_COUNT; i++)
        sb_printf(&b, "kestrel_spec_proposer_cost_ratio{proposer=\"%s\"} %.3f\n", src[i], st.src_cost_ratio[i]);
    sb_puts(&b, "# HELP kestrel_spec_proposer_passes_total Passes run by a model proposer (MTP head passes, DFlash "
                "passes with or without a block, draft-model drafts), their drafts used or not.\n"
                "# TYPE kestrel_spec_proposer_passes_total counter\n");
    for (int i = DRAFT_SRC_DRAFTER; i < DRAFT_SRC_COUNT; i++)
        sb_printf(&b, "kestrel_spec_proposer_passes_total{proposer=\"%s\"} %lld\n", src[i], st.src_passes[i]);
    sb_puts(&b, "# HELP kestrel_spec_source_verify_steps_total Verify steps, by the source of their drafts.\n"
                "# TYPE kestrel_spec_source_verify_steps_total counter\n");
    for (int i = 0; i < DRAFT_SRC_COUNT; i++)
        sb_printf(&b, "kestrel_spec_source_verify_steps_total{source=\"%s\"} %lld\n", src[i], st.src_verify_steps[i]);
    sb_printf(&b, "# HELP kestrel_spec_dflash_behind_steps_total DFlash blocks drafted right behind their verify, "
                  "before the host had its outcome.\n# TYPE kestrel_spec_dflash_behind_steps_total counter\n"
                  "kestrel_spec_dflash_behind_steps_total %lld\n", st.dflash_behind_steps);
    sb_puts(&b, "# HELP kestrel_spec_mtp_depth_steps_total Verify steps of MTP drafts, by the depth the controller "
                "chose.\n# TYPE kestrel_spec_mtp_depth_steps_total counter\n");
    for (int d = 1; d <= ENGINE_MAX_DRAFT; d++)
        if (st.mtp_depth_steps[d])
            sb_printf(&b, "kestrel_spec_mtp_depth_steps_total{depth=\"%d\"} %lld\n", d, st.mtp_depth_steps[d]);
    if (st.has_mem) {
        sb_puts(&b, "# HELP kestrel_device_memory_bytes Device memory the server holds, by kind: weights; buffers "
                    "(KV cache, activations, logits); workspace (kernel scratch). Not in it: the device context and "
                    "kernel images.\n# TYPE kestrel_device_memory_bytes gauge\n");
        const char *kind[3] = {"weights", "buffers", "workspace"};
        long long v[3] = {st.mem.weights, st.mem.buffers, st.mem.workspace};
        for (int i = 0; i < 3; i++) sb_printf(&b, "kestrel_device_memory_bytes{kind=\"%s\"} %lld\n", kind[i], v[i]);
    }
    hist(&b, "kestrel_time_to_first_token_seconds", "Time from request to first generated token.", m->ttft, ttft_le,
         atomic_load(&m->ttft_us_sum), atomic_load(&m->ttft_n));
    hist(&b, "kestrel_time_per_output_token_seconds", "Mean time per generated token after the first.", m->tpot,
         tpot_le, atomic_load(&m->tpot_us_sum), atomic_load(&m->tpot_n));
    return sb_take(&b, NULL);
}
