/* drafter_load.c — finds and loads the draft models for `serve` and `run`:
 * --drafter DIR (a draft model, or a DFlash block drafter when its config
 * says DFlashDraftModel), else what the model directory ships: drafter/ (a
 * draft model, or a DFlash drafter by its config) and dflash/. Refuses a
 * draft model whose tokenizer differs from the model's, and a DFlash drafter
 * that does not fit it (dflash_load). */
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

/* 0: no config.json there, 1: a draft model, 2: a DFlash drafter */
static int drafter_kind(const char *dir) {
    char *cfg = path_join(dir, "config.json"), *text = NULL;
    size_t n;
    int kind = cfg && file_read(cfg, &text, &n) == 0 ? (strstr(text, "DFlashDraftModel") ? 2 : 1) : 0;
    free(cfg);
    free(text);
    err_clear();
    return kind;
}

static int load_draft_model(const char *model_dir, const char *dir, backend *be, const model *target, model **out) {
    int rc = 0;
    char *tj = path_join(model_dir, "tokenizer.json"), *dj = path_join(dir, "tokenizer.json");
    if (tj && dj && file_exists(dj) && !same_file(tj, dj)) {
        rc = err_set(KS_EINVAL, "%s: the drafter's tokenizer differs from the model's (%s)", dj, tj);
    } else if ((rc = model_load(out, dir, be))) {
        err_wrap(rc, "drafter");
    } else if ((rc = drafter_check(target, *out, dir))) {
        model_free(*out);
        *out = NULL;
    }
    free(tj);
    free(dj);
    return rc;
}

int cli_load_drafters(const char *model_dir, const char *drafter_dir, int disabled, backend *be, model *target,
                      model **dm, dflash **fl) {
    *dm = NULL;
    *fl = NULL;
    if (disabled) return 0;
    if (drafter_dir) { /* asked for: it must load */
        if (drafter_kind(drafter_dir) == 2) return dflash_load(fl, drafter_dir, target);
        return load_draft_model(model_dir, drafter_dir, be, target, dm);
    }
    char *d1 = path_join(model_dir, "drafter"), *d2 = path_join(model_dir, "dflash");
    int rc = 0, k1 = d1 ? drafter_kind(d1) : 0, k2 = d2 ? drafter_kind(d2) : 0;
    if (k1 == 1) rc = load_draft_model(model_dir, d1, be, target, dm);
    if (!rc && (k2 == 2 || k1 == 2)) rc = dflash_load(fl, k2 == 2 ? d2 : d1, target);
    if (rc) {
        model_free(*dm);
        *dm = NULL;
    }
    free(d1);
    free(d2);
    return rc;
}
