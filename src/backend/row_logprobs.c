/* row_logprobs.c — bk_logprob_row: a row's log-probabilities, the rule of
 * backend.h's logprob_rows. The CPU op and the engine's host rows use it;
 * the CUDA kernel (k_logprobs.cu) finds the same ids and, within rounding,
 * the same values. The normaliser's sum in double; the top ids by a
 * min-heap of the best `top` in one pass (ties: the lower id ranks first,
 * as a scan would), then sorted best first. */
#include <math.h>

#include "backend/backend.h"

void bk_logprob_row(const float *row, int cols, int id, int top, bk_logprobs *out) {
    float mx = -INFINITY;
    for (int i = 0; i < cols; i++) mx = row[i] > mx ? row[i] : mx;
    double z = 0;
    for (int i = 0; i < cols; i++) z += exp((double)(row[i] - mx));
    out->lz = mx + (float)log(z);
    out->id = id;
    out->logit = id >= 0 && id < cols ? row[id] : -INFINITY;
    if (top > cols) top = cols;
    if (top > BK_MAX_TOP) top = BK_MAX_TOP;
    int32_t *h = out->top_id;
    int n = 0;
#define WORSE(a, b) (row[a] < row[b] || (row[a] == row[b] && (a) > (b)))
    for (int i = 0; i < cols; i++) {
        if (n == top && (n == 0 || !WORSE(h[0], i))) continue;
        int j;
        if (n < top) { /* sift up */
            for (j = n++; j > 0 && WORSE(i, h[(j - 1) / 2]); j = (j - 1) / 2) h[j] = h[(j - 1) / 2];
        } else { /* replace the root, sift down */
            for (j = 0;;) {
                int c = 2 * j + 1;
                if (c >= n) break;
                if (c + 1 < n && WORSE(h[c + 1], h[c])) c++;
                if (!WORSE(h[c], i)) break;
                h[j] = h[c];
                j = c;
            }
        }
        h[j] = i;
    }
    /* heap -> best first: repeatedly move the worst (root) to the end */
    for (int m = n; m > 1; m--) {
        int32_t last = h[m - 1], j = 0;
        h[m - 1] = h[0];
        for (;;) {
            int c = 2 * j + 1;
            if (c >= m - 1) break;
            if (c + 1 < m - 1 && WORSE(h[c + 1], h[c])) c++;
            if (!WORSE(h[c], last)) break;
            h[j] = h[c];
            j = c;
        }
        h[j] = last;
    }
#undef WORSE
    out->n_top = n;
    for (int k = 0; k < n; k++) out->top[k] = row[h[k]];
}
