/* json_constraint_cache.h — compiled JSON constraints kept by their
 * schema's text: agents send the same tools and response formats request
 * after request, and a schema with patterns can take milliseconds to
 * compile (a pathological one up to json_pattern.c's work budget, ~0.1 s),
 * so each distinct schema is compiled once while it stays among the
 * recently used. Refusals are kept too (with their message): a schema
 * that cannot be enforced costs its compile once.
 *
 * Key: the schema's compact JSON with sorted keys (NULL: the any-object
 * constraint). At most JCC_ENTRIES schemas and JCC_BYTES of compiled
 * constraints (json_constraint's jc_bytes); the least recently used leave
 * first. Thread-safe (one mutex; a compile runs outside it, so two
 * requests with one new schema may both compile it — the first kept).
 *
 * Ownership: the returned constraint is the caller's reference (jc_free
 * it); the cache holds its own. */
#ifndef KS_JSON_CONSTRAINT_CACHE_H
#define KS_JSON_CONSTRAINT_CACHE_H

#include "sample/json_constraint.h"

#define JCC_ENTRIES 64
#define JCC_BYTES ((size_t)64 << 20)

/* As jc_compile, through the cache. */
json_constraint *jc_compile_cached(const json_t *schema, char *err, size_t errlen);
/* Drops every entry (tests; the process's end needs nothing). */
void jc_cache_clear(void);
/* Hits and misses so far (tests, diagnostics). */
void jc_cache_counts(long *hits, long *misses);

#endif
