/* file.h — reading and mapping files, with errors set through err.h.
 *
 * Ownership: file_read() returns a malloc'd, NUL-terminated buffer the caller
 * frees; file_map() returns a read-only mapping released by file_unmap(). */
#ifndef KS_FILE_H
#define KS_FILE_H

#include <stddef.h>

typedef struct {
    const unsigned char *data; /* read-only mapping (NULL when size == 0) */
    size_t size;
} file_mapping;

int file_read(const char *path, char **out, size_t *out_len);
int file_map(const char *path, file_mapping *m);
void file_unmap(file_mapping *m);
/* Drops the mapping's pages from this process (MADV_DONTNEED; the page
 * cache keeps them and a later read refaults them from the file): for
 * mappings whose contents have been copied elsewhere. */
void file_drop_pages(const file_mapping *m);
int file_exists(const char *path);
/* Joins dir and name into a malloc'd path ("dir/name"). NULL on OOM. */
char *path_join(const char *dir, const char *name);
int path_is_dir(const char *path);

#endif
