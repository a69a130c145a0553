/* drafter_load.c — finds and loads the draft model for `serve` and `run`:
 * --drafter DIR, or a drafter/ folder inside the model directory (skipped
 * when it is a DFlash block drafter, which is a different proposer). Refuses
 * a drafter whose tokenizer differs from the model's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/file.h"
#include "cli/cli.h"
#include "spec/drafter.h"

static int same_file(const char *a, const char *b) {
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    int same = file_read(a, &x, &nx) == 0 && file_read(b, &y, &ny) == 0 && nx == ny && !memcmp(x, y, nx);
    free(x);
    free(y);
    return same;
}

int cli_load_drafter(const char *model_dir, const char *drafter_dir, int disabled, backend *be, const model *target,
                     model **out) {
    *out = NULL;
    if (disabled) return 0;
    char *auto_dir = NULL;
    if (!drafter_dir) {
        auto_dir = path_join(model_dir, "drafter");
        char *cfg = auto_dir ? path_join(auto_dir, "config.json") : NULL;
        char *text = NULL;
        size_t n;
        int usable = cfg && file_read(cfg, &text, &n) == 0 && !strstr(text, "DFlashDraftModel");
        free(cfg);
        free(text);
        err_clear();
        if (!usable) {
            free(auto_dir);
            return 0; /* no drafter: fine */
        }
        drafter_dir = auto_dir;
    }
    int rc = 0;
    char *tj = path_join(model_dir, "tokenizer.json"), *dj = path_join(drafter_dir, "tokenizer.json");
    if (tj && dj && file_exists(dj) && !same_file(tj, dj)) {
        rc = err_set(KS_EINVAL, "%s: the drafter's tokenizer differs from the model's (%s)", dj, tj);
        goto done;
    }
    model *dm = NULL;
    if ((rc = model_load(&dm, drafter_dir, be))) {
        err_wrap(rc, "drafter");
        goto done;
    }
    if ((rc = drafter_check(target, dm, drafter_dir))) {
        model_free(dm);
        goto done;
    }
    *out = dm;
done:
    free(tj);
    free(dj);
    free(auto_dir);
    return rc;
}
