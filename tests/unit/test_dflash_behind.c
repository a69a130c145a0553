/* test_dflash_behind.c — a DFlash block launched behind its verify, before
 * the host has the verify's ids (dflash_blocks.behind, model_dev_ids.behind:
 * the device finds the drafts accepted and moves the block up), drafts what
 * the host path drafts once it knows them: context entries for the accepted
 * positions, then the block from the verify's next token. tinycoder, its
 * DFlash drafter, the first reference prompt; a verify of 5 drafts with 0,
 * 2 and all 5 of them right, each in two fresh worlds (host path, behind). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "model/dflash.h"
#include "model/model.h"
#include "dflash_fixture.h"
#include "prefill_logits.h"
#include "test.h"

enum { K = 5, B = 8 };

typedef struct {
    dflash *d;
    kv_cache *fkv;
    kv_seq *fs;
    int p0, rc;
} behind_arg;

static void launch_behind(void *arg) {
    behind_arg *x = arg;
    int32_t idx[K + 1], seq[K + 1] = {0}, row[K + 1], of = 0, last = 0, rope0 = x->p0 + 1;
    for (int i = 0; i <= K; i++) {
        idx[i] = x->p0 + i;
        row[i] = i;
    }
    kv_seq *fseqs[1] = {x->fs};
    dflash_ctx_rows cr = {K + 1, idx, idx, seq, row};
    dflash_blocks bl = {1, &of, &last, &rope0, &rope0, B, NULL, K};
    x->rc = dflash_step(x->d, x->fkv, 1, fseqs, &cr, &bl);
}

/* One world: the prompt and its context entries, then a verify of
 * [greedy[0], drafts] — behind: with the block launched behind it — and
 * the block's drafts (B - 1) into out; returns the drafts accepted. */
static int world(model *m, dflash *d, const int32_t *prompt, int P, const int32_t *verify, bool behind, int32_t *out) {
    int V = m->cfg.vocab_size, n = P + K + 1 + B, accepted = -1;
    int32_t pos[512], seq[512] = {0}, ids[K + 1], rows[K + 1];
    for (int i = 0; i < n; i++) pos[i] = i;
    for (int i = 0; i <= K; i++) rows[i] = i;
    float *logits = malloc((size_t)V * 4);
    kv_cache kv, fkv;
    CHECK(model_kv_init(m, &kv, n) == 0);
    CHECK(dflash_kv_init(d, &fkv, n) == 0);
    kv_seq s = {0}, fs = {0};
    kv_seq *seqs[1] = {&s}, *fseqs[1] = {&fs};
    CHECK(kv_seq_reserve(&kv, &s, P + K + 1) == 0);
    CHECK(kv_seq_reserve(&fkv, &fs, n) == 0);
    CHECK(forward_seq(m, &kv, &s, prompt, P, 0, NULL, 0, false, logits) == 0);
    CHECK(dflash_add_context(d, &fkv, P, pos, pos, seq, pos, 1, fseqs) == 0);
    behind_arg x = {d, &fkv, &fs, P, 0};
    model_batch vb = {.n_tokens = K + 1, .tokens = verify, .pos = pos + P, .seq = seq, .n_seqs = 1, .seqs = seqs,
                      .n_logits = K + 1, .logit_rows = rows, .argmax = ids};
    model_dev_ids dev = {.behind = behind ? launch_behind : NULL, .behind_arg = &x};
    CHECK(model_forward_dev(m, &kv, &vb, NULL, &dev) == 0);
    CHECK_EQ_INT(x.rc, 0);
    for (accepted = 0; accepted < K && ids[accepted] == verify[accepted + 1];) accepted++;
    if (behind) {
        int32_t blk[B];
        CHECK(m->be->ops->buf_download(m->be, blk, dflash_block_ids(d), sizeof blk) == 0);
        memcpy(out, blk + 1, (B - 1) * sizeof *out);
    } else { /* the host path: entries for the accepted positions, the block from the next token */
        int32_t rope0 = P + accepted + 1;
        CHECK(dflash_add_context(d, &fkv, accepted + 1, pos + P, pos + P, seq, rows, 1, fseqs) == 0);
        CHECK(dflash_draft(d, &fkv, 1, fseqs, &ids[accepted], &rope0, &rope0, B, out) == 0);
    }
    kv_seq_release(&kv, &s);
    kv_seq_release(&fkv, &fs);
    kv_cache_free(&kv);
    kv_cache_free(&fkv);
    free(logits);
    return accepted;
}

static void check_behind(const char *device) {
    dflash_fixture f;
    if (!dflash_fixture_open(&f, device)) return;
    json_t *rep = f.rep;
    model *m = f.m;
    dflash *d = f.d;
    json_t *ev = json_array_get(json_object_get(rep, "eval"), 0);
    json_t *it = json_object_get(ev, "prompt_ids"), *g = json_object_get(ev, "greedy_64");
    int P = (int)json_array_size(it);
    int32_t prompt[400];
    CHECK(P + K + 1 + B <= 400);
    for (int i = 0; i < P; i++) prompt[i] = (int32_t)json_integer_value(json_array_get(it, i));
    int right[3] = {0, 2, K};
    for (int c = 0; c < 3; c++) {
        /* [greedy[0], drafts]: the first right[c] drafts are greedy's next tokens, then a wrong one */
        int32_t verify[K + 1], drafts[2][B - 1];
        for (int i = 0; i <= K; i++) {
            int32_t want = (int32_t)json_integer_value(json_array_get(g, i));
            verify[i] = i <= right[c] ? want : (want + 1) % m->cfg.vocab_size;
        }
        int acc_host = world(m, d, prompt, P, verify, false, drafts[0]);
        int acc_dev = world(m, d, prompt, P, verify, true, drafts[1]);
        printf("    [%s] %d of %d drafts right: %d accepted; the block behind the verify %s the host path's\n", device,
               right[c], K, acc_host, memcmp(drafts[0], drafts[1], sizeof drafts[0]) ? "differs from" : "equals");
        CHECK_EQ_INT(acc_host, right[c]);
        CHECK_EQ_INT(acc_dev, right[c]);
        CHECK(!memcmp(drafts[0], drafts[1], sizeof drafts[0]));
    }
    dflash_fixture_close(&f);
}

TEST(test_dflash_block_behind_its_verify_equals_the_host_path) {
    if (!test_shared_path("models/tinycoder/dflash")) SKIP("../shared/models/tinycoder/dflash not found");
    check_behind("cpu");
}

TEST(test_cuda_dflash_block_behind_its_verify_equals_the_host_path) {
    if (!test_shared_path("models/tinycoder/dflash")) SKIP("../shared/models/tinycoder/dflash not found");
    if (!backend_cuda_available()) SKIP("no CUDA GPU");
    check_behind("cuda");
}
