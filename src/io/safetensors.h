/* safetensors.h — memory-mapped safetensors checkpoints: one file or a
 * sharded set (model.safetensors.index.json), every header field validated
 * before use (JSON shape, known dtype, offsets inside the file's data area,
 * dtype size x shape == byte length, no overlapping tensors, no duplicates).
 *
 * Ownership: st_set owns the mappings and the tensor table; st_tensor.data
 * points into a read-only mapping and is valid until st_close(). */
#ifndef KS_SAFETENSORS_H
#define KS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/file.h"

#define ST_MAX_DIMS 8

typedef struct {
    char *name;                  /* e.g. "model.layers.0.self_attn.q_proj.weight" */
    dtype_t dtype;
    int n_dims;
    int64_t shape[ST_MAX_DIMS];  /* row-major, as in the header */
    int64_t n_elems;
    const void *data;            /* borrowed view into the mapping */
    size_t nbytes;
    int file_index;              /* index into st_set.paths */
} st_tensor;

typedef struct {
    int n_files;
    char **paths;                /* owned */
    file_mapping *maps;          /* owned, one per file */
    int n_tensors;
    st_tensor *tensors;          /* owned, sorted by name */
} st_set;

/* Opens one .safetensors file. */
int st_open_file(st_set *s, const char *path);
/* Opens a model directory: model.safetensors.index.json (every shard it
 * names must exist and hold exactly the tensors the index assigns to it) or,
 * without an index, model.safetensors. */
int st_open_dir(st_set *s, const char *dir);
/* NULL when absent. Binary search by name. */
const st_tensor *st_find(const st_set *s, const char *name);
void st_close(st_set *s);
/* Every file's pages out of this process's memory (file_drop_pages): once
 * the backend holds its own copies of the weights (both backends do). */
void st_drop_pages(const st_set *s);

#endif
