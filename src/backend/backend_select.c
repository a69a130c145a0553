/* backend_select.c — picks a backend by name ("auto", "cpu", "cuda[:N]"):
 * auto means CUDA when a GPU is present, else the CPU. Without nvcc at build
 * time the CUDA entry points exist and say so. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/err.h"

#ifndef KS_HAVE_CUDA
int backend_cuda_available(void) { return 0; }
int backend_cuda_new(backend **out, int device) {
    (void)out;
    (void)device;
    return err_set(KS_EUNSUPPORTED, "--device cuda: this kestrel was built without CUDA (no nvcc at build time)");
}
const char *backend_cuda_name(void) { return "none"; }
#endif

int backend_new(backend **out, const char *device, int n_threads) {
    if (!device || !strcmp(device, "auto")) {
        if (backend_cuda_available()) return backend_cuda_new(out, 0);
        return backend_cpu_new(out, n_threads);
    }
    if (!strcmp(device, "cpu")) return backend_cpu_new(out, n_threads);
    if (!strncmp(device, "cuda", 4)) {
        int dev = 0;
        if (device[4] == ':') {
            char *end;
            long d = strtol(device + 5, &end, 10);
            if (*end || d < 0 || d > 64) return err_set(KS_EINVAL, "--device %s: bad GPU index", device);
            dev = (int)d;
        } else if (device[4]) {
            return err_set(KS_EINVAL, "--device %s: expected cpu, cuda or cuda:N", device);
        }
        return backend_cuda_new(out, dev);
    }
    return err_set(KS_EINVAL, "--device %s: expected cpu, cuda or cuda:N", device);
}

int backend_set_kv_type(backend *be, const char *type) {
    int bytes = !strcmp(type, "bf16") ? 2 : !strcmp(type, "f32") ? 4 : 0;
    if (!bytes) return err_set(KS_EINVAL, "--kv-type %s: expected bf16 or f32", type);
    if (!(be->kv_elem_choices & 1u << bytes))
        return err_set(KS_EUNSUPPORTED, "--kv-type %s: the %s backend keeps its KV cache in bf16 only", type,
                       be->ops->name);
    be->kv_elem_bytes = bytes;
    return KS_OK;
}

const char *backend_describe(const backend *be) {
    if (!strcmp(be->ops->name, "cpu")) return backend_cpu_isa(be);
    return backend_cuda_name();
}
