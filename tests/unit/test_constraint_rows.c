/* test_constraint_rows.c — a constraint's masks on logits rows (backend op
 * mask_rows): the CPU op against the rule written out (-inf exactly where
 * the id's bit is clear, every other value and every unlisted row as it
 * was), and k_mask.cu's own code (tests/emu, 64-thread blocks) against the
 * CPU op, at widths that do and do not fill their last word. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "test.h"

struct CUstream_st;
void emu_ks_cuda_mask_rows(struct CUstream_st *s, float *logits, int cols, const int32_t *rows, const uint32_t *bits,
                           int n);

static unsigned mrng = 4242;
static unsigned mnext(void) {
    mrng = mrng * 1664525u + 1013904223u;
    return mrng >> 4;
}

/* words: all set, none set, a few set (a schema's next key), most set (a
 * free string), random */
static uint32_t mask_word(int kind) {
    switch (kind) {
    case 0: return 0xffffffffu;
    case 1: return 0;
    case 2: return 1u << (mnext() % 32);
    case 3: return ~(1u << (mnext() % 32));
    default: return mnext() ^ (mnext() << 16);
    }
}

TEST(test_mask_rows_cpu_and_emulated_follow_the_bits) {
    backend *be = NULL;
    CHECK(backend_cpu_new(&be, 1) == 0);
    const int widths[] = {3000, 3001, 32, 33, 151936};
    int cleared = 0, kept = 0;
    for (int wi = 0; wi < 5; wi++) {
        int cols = widths[wi], R = 12, words = (cols + 31) / 32, n = 5;
        size_t bytes = (size_t)R * cols * sizeof(float);
        float *orig = malloc(bytes), *a = malloc(bytes), *b = malloc(bytes);
        uint32_t *bits = malloc((size_t)n * words * 4);
        int32_t rows[5] = {1, 4, 5, 9, 11};
        for (size_t i = 0; i < (size_t)R * cols; i++) orig[i] = (float)(mnext() % 2000) / 100.0f - 10.0f;
        for (int k = 0; k < n; k++)
            for (int w = 0; w < words; w++) bits[(size_t)k * words + w] = mask_word((int)((w + k) % 5));
        memcpy(a, orig, bytes);
        memcpy(b, orig, bytes);
        be->ops->mask_rows(be, a, cols, rows, bits, n);
        emu_ks_cuda_mask_rows(NULL, b, cols, rows, bits, n);
        CHECK_MSG(!memcmp(a, b, bytes), "cols %d: the emulated kernel differs from the CPU op", cols);
        for (int r = 0, k = 0; r < R; r++) {
            bool listed = k < n && rows[k] == r;
            for (int i = 0; i < cols; i++) {
                float want = orig[(size_t)r * cols + i];
                if (listed && !(bits[(size_t)k * words + i / 32] >> (i % 32) & 1)) want = -INFINITY;
                CHECK_MSG(a[(size_t)r * cols + i] == want, "cols %d row %d id %d", cols, r, i);
                if (listed) cleared += want == -INFINITY, kept += want != -INFINITY;
            }
            k += listed;
        }
        free(orig); free(a); free(b); free(bits);
    }
    printf("    %d ids cleared, %d kept on masked rows\n", cleared, kept);
    CHECK(cleared > 1000 && kept > 1000);
    backend_free(be);
}
