/* kv_upload.h — test helper: a KV cache written from host f32 values into a
 * backend buffer in that backend's KV format (backend.kv_elem_bytes).
 * With a 16-bit format the host values are rounded in place first, so a
 * CPU reference computed from them sees exactly what the device holds. */
#ifndef KS_TEST_KV_UPLOAD_H
#define KS_TEST_KV_UPLOAD_H

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/dtype.h"

/* returns the device buffer (n elements), NULL on failure */
static inline void *kv_upload(backend *be, float *host, size_t n) {
    size_t eb = (size_t)be->kv_elem_bytes;
    void *d = be->ops->buf_alloc(be, n * eb), *tmp = eb == 4 ? host : malloc(n * eb);
    if (!d || !tmp) {
        if (d) be->ops->buf_free(be, d);
        return NULL;
    }
    if (eb == 2)
        for (size_t i = 0; i < n; i++) {
            uint16_t h = f32_to_bf16(host[i]);
            ((uint16_t *)tmp)[i] = h;
            host[i] = bf16_to_f32(h);
        }
    be->ops->buf_upload(be, d, tmp, n * eb);
    if (tmp != host) free(tmp);
    return d;
}

/* the device cache back as f32 (n elements into host) */
static inline void kv_download(backend *be, float *host, const void *dev, size_t n) {
    size_t eb = (size_t)be->kv_elem_bytes;
    if (eb == 4) {
        be->ops->buf_download(be, host, dev, n * 4);
        return;
    }
    uint16_t *tmp = malloc(n * 2);
    if (!tmp) return;
    be->ops->buf_download(be, tmp, dev, n * 2);
    for (size_t i = 0; i < n; i++) host[i] = bf16_to_f32(tmp[i]);
    free(tmp);
}

#endif
