/* dflash_fixture.h — test helper: tinycoder, its DFlash drafter and the
 * drafter's report (dflash_report.json: the prompts, their greedy
 * continuations and the reference implementation's blocks) on one backend.
 * dflash_fixture_open CHECKs each load and returns false, everything freed,
 * when one failed; dflash_fixture_close frees what is left (NULL members
 * are skipped, so a test may free the drafter first). */
#ifndef KS_TEST_DFLASH_FIXTURE_H
#define KS_TEST_DFLASH_FIXTURE_H

#include <jansson.h>
#include <stdbool.h>

#include "backend/backend.h"
#include "model/dflash.h"
#include "model/model.h"
#include "test.h"

typedef struct {
    json_t *rep;
    backend *be;
    model *m;
    dflash *d;
} dflash_fixture;

static inline void dflash_fixture_close(dflash_fixture *f) {
    dflash_free(f->d);
    model_free(f->m);
    backend_free(f->be);
    json_decref(f->rep);
    *f = (dflash_fixture){0};
}

static inline bool dflash_fixture_open(dflash_fixture *f, const char *device) {
    *f = (dflash_fixture){0};
    f->rep = json_load_file(test_shared_path("models/tinycoder/dflash/dflash_report.json"), 0, NULL);
    CHECK(f->rep != NULL);
    CHECK(backend_new(&f->be, device, 2) == 0);
    if (f->be) CHECK(model_load(&f->m, test_shared_path("models/tinycoder"), f->be) == 0);
    if (f->m) CHECK(dflash_load(&f->d, test_shared_path("models/tinycoder/dflash"), f->m) == 0);
    if (f->rep && f->d) return true;
    dflash_fixture_close(f);
    return false;
}

#endif
