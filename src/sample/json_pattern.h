/* json_pattern.h — a JSON Schema string's `pattern` (an ECMA-262 regular
 * expression, the subset below) compiled to a DFA over code points, with
 * the string's minLength / maxLength folded in, so the recognizer
 * (json_match.c) can refuse a character as soon as no text that starts
 * with it can match. Search semantics, as JSON Schema says: the pattern
 * may match anywhere unless ^ / $ anchor it.
 *
 * Syntax: literals, '.', classes [...] / [^...] with ranges, \d \D \w \W
 * \s \S (ECMA's sets), the escapes \t \n \v \f \r \0 \cX \xHH \uHHHH
 * \u{H..} and identity escapes of non-alphanumerics, groups ( ) (?: )
 * (?<name> ), alternation, * + ? {n} {n,} {n,m} (lazy forms too: a
 * language does not care), ^ and $. Refused at compile with a message:
 * backreferences, lookaround, \b / \B, \p{..}, patterns past
 * JP_MAX_STATES DFA states or past about 0.1 s of compiling (json_pattern.c's
 * MAX_WORK: a compile runs on a request's thread), and length limits no
 * match can meet.
 *
 * The alphabet: the characters a JSON string can carry as itself or by a
 * short escape (\" \\ \/ \b \f \n \r \t) — U+0008-000A, U+000C-000D,
 * U+0020-U+D7FF, U+E000-U+10FFFF. A text's other control characters need
 * \u escapes, which a patterned string does not take (json_match.c), so
 * the DFA's "can finish" reasons only over these.
 *
 * Ownership: a jp_dfa is immutable after jp_compile; the json_constraint
 * that compiled it frees it. States are ints from 0; -1 is dead. */
#ifndef KS_JSON_PATTERN_H
#define KS_JSON_PATTERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JP_MAX_STATES 16384
#define JP_MAX_REPEAT 1000   /* the largest n / m of {n,m} */

typedef struct jp_dfa jp_dfa;

/* Compiles `pattern` for strings of min_len to max_len characters. On
 * failure returns NULL with the reason in err. */
jp_dfa *jp_compile(const char *pattern, int min_len, int max_len, char *err, size_t errlen);
/* The same for texts every one of n patterns matches (1 <= n <=
 * JP_MAX_PATTERNS): one DFA over the patterns' states together. */
#define JP_MAX_PATTERNS 8
jp_dfa *jp_compile_all(const char *const *patterns, int n, int min_len, int max_len, char *err, size_t errlen);
void jp_free(jp_dfa *d);
/* The bytes it holds (json_constraint_cache.h's budget). */
size_t jp_bytes(const jp_dfa *d);

int jp_start(const jp_dfa *d);
/* the state after character cp (-1: dead) */
int jp_step(const jp_dfa *d, int state, uint32_t cp);
/* After len characters, in `state`: some continuation matches within the
 * length limits. */
bool jp_can_finish(const jp_dfa *d, int state, int len);
/* Some character in [lo, hi] leads to a state that can finish after
 * len + 1 characters (a UTF-8 character half read). */
bool jp_range_can_finish(const jp_dfa *d, int state, uint32_t lo, uint32_t hi, int len);
/* The text so far (len characters) matches and meets minLength. */
bool jp_can_end(const jp_dfa *d, int state, int len);

#endif
