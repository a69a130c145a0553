"""fuzz_values.py — the hostile values api_fuzz.py puts into requests: odd
strings (special tokens, lone surrogates, MARK for raw invalid UTF-8 at
serialization), extreme numbers, deep nesting, values of the wrong type, and
JSON schemas (valid ones for the valid requests, weird ones for mutations)."""
import copy

# ---------------------------------------------------------------------------
# hostile values

BAD_UTF8 = [b"\xff", b"\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\xf4\x90\x80\x80", b"\x80abc", b"a\xfe\xfeb"]
MARK = "@@BADUTF8_%d@@"

SPECIAL_STRINGS = [
    "", " ", "\n", "\t\r\n ", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>",
    "<think>", "</think>", "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
    "{{ messages }}", "{% for x in range(999999999) %}x{% endfor %}", "{{ raise_exception('x') }}",
    "\u0000", "\ud800", "\udfff", "a\ud800b", "\ud83d", "\U0010ffff", "\uffff", "\ufeff", "\u202e", "e\u0301",
    "😀" * 10, "\u00e9" * 300, "%s%n%x", "\\", "\"", "'", "null", "[]", "{}", "def f():\n    return 1\n",
    "a" * 63 + "\u00e9", "\u00e9" * 103 + "a",
]

HUGE_NUMS = [0, -0.0, 1, -1, 2, -2, 0.5, -0.5, 1.5, 1e-300, 1e300, -1e300, 1e308, 2 ** 31 - 1, 2 ** 31, -2 ** 31 - 1,
             2 ** 32 + 5, 2 ** 53 + 1, 2 ** 62, 2 ** 63 - 1, -2 ** 63, 123456789012345678, 9e15, 9.5e15, 100, 101,
             -100, -101, 3.14159, 1e-7, 20, 21, 1 << 30, (1 << 30) + 1, 65536, 8191, 8192, 8193]
RAW_NUM_LITERALS = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "18446744073709551616",
                    "-9223372036854775809", "1.", ".5", "01", "+1", "0x10", "1e", "--1", "1_000"]


def hostile_value(rng, depth=0):
    c = rng.randrange(14)
    if c == 0:
        return None
    if c == 1:
        return rng.choice([True, False])
    if c in (2, 3):
        return rng.choice(HUGE_NUMS)
    if c == 4:
        return rng.choice(SPECIAL_STRINGS)
    if c == 5:
        return huge_string(rng)
    if c == 6:
        return []
    if c == 7:
        return {}
    if c == 8 and depth < 3:
        return [hostile_value(rng, depth + 1) for _ in range(rng.randrange(1, 4))]
    if c == 9 and depth < 3:
        return {rng.choice(["type", "text", "name", "content", "role", "x", ""]): hostile_value(rng, depth + 1)}
    if c == 10:
        return nested(rng, rng.choice([50, 200, 1000, 2100]))
    if c == 11:
        return MARK  # replaced by raw invalid UTF-8 bytes at serialization
    if c == 12:
        return rng.choice(["5", "1.0", "true", "null", "yes", "-1"])
    return rng.random() * rng.choice([1, 100, 1e6]) * rng.choice([1, -1])


def huge_string(rng):
    n = rng.choice([1000, 5000, 70000, 300000])
    unit = rng.choice(["a", "ab ", "\u00e9", "😀", "def f(x):\n", "<|im_start|>", " ", "\n"])
    return (unit * (n // len(unit) + 1))[:n]


def nested(rng, depth):
    leaf = rng.choice([1, "x", None, {}, []])
    v = leaf
    for _ in range(depth):
        v = [v] if rng.random() < 0.5 else {"a": v}
    return v


def wrong_type_for(rng, v):
    """A value of another JSON type than v."""
    cands = [None, True, 7, 1.5, "str", [], {}, [1, "x"], {"k": "v"}]
    t = type(v)
    cands = [c for c in cands if type(c) != t]
    return rng.choice(cands)


# ---------------------------------------------------------------------------
# JSON schemas

VALID_SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "ok": {"type": "boolean"}},
     "required": ["name", "ok"], "additionalProperties": False},
    {"type": "string", "enum": ["red", "green", "blue"]},
    {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 10}, "maxItems": 3},
    {"type": "string", "pattern": "^[a-z]{3}-[0-9]{2}$"},
    {"type": "string", "format": "date"},
    {"type": "integer", "minimum": -5, "maximum": 5},
    {"type": "number", "multipleOf": 0.25},
    {"$defs": {"p": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
     "type": "object", "properties": {"p": {"$ref": "#/$defs/p"}}, "required": ["p"]},
    {"anyOf": [{"type": "object", "properties": {"k": {"const": "a"}, "v": {"type": "integer"}}, "required": ["k", "v"]},
               {"type": "null"}]},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": True}}},
    {"type": "string", "format": "uuid"},
    {"const": {"fixed": [1, 2, 3]}},
    {},
    True,
]


def valid_schema(rng, object_only=False):
    # a copy: later mutations edit requests in place
    return copy.deepcopy(rng.choice(VALID_SCHEMAS[:-1] if object_only else VALID_SCHEMAS))


def weird_schema(rng, depth=0):
    c = rng.randrange(40)
    if c == 0:
        return {"type": "string", "minLength": rng.choice([1000, 5000, 100000, 10 ** 9, 2 ** 31, -1, 1.5, "5"])}
    if c == 1:
        return {"type": "string", "minLength": 5, "maxLength": 2}
    if c == 2:
        return {"type": "string", "pattern": rng.choice([
            "(", ")", "[z-a]", "a{99999}", "a{2,1}", "(?=x)", "(?<=x)y", "\\p{L}", "\\bx", "(a)\\1", "(?\u00e9)",
            "(" * 70 + "x" + ")" * 70, "(a|b)*c{1,1000}", ".*.*.*.*.*.*.*.*", "[^\\u0000-\\uffff]", "\\u{10FFFF}",
            "\\ud800", "[\\ud800-\\udfff]", "\\", "a**", "x{1000}{1000}", "(((a{100}){100}){100})", "[", "\\c", "\\x1",
            "\\u12", "^$", "$^", "^*", "(?<n>a)\\k<n>", "[\\w\\W]{3000}", "\u00e9" * 50 + "(", "(?:)" * 5000,
            "|" * 3000, "[a-\\d]", "x{,5}", "\\0", "\\08", "(?i)abc", "(?P<x>a)", "[]", "[^]", "\x00",
            "(x+x+)+y", "(.|\n){3000}", "a{0}", "a{,}"])}
    if c == 3:
        return {"$ref": rng.choice(["#/$defs/missing", "#", "http://example.com/s.json", "#/definitions/a", "",
                                    "#/$defs/", "#/$defs/a/properties/x", "#/$defs/%ff", "#/$defs/a~1b"]),
                "$defs": {"a": {"type": "integer"}}}
    if c == 4:
        return {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
    if c == 5:
        return {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
    if c == 6:
        return {"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}, "required": ["next"]}},
                "$ref": "#/$defs/n"}
    if c == 7:
        return {"enum": rng.choice([[], [None], list(range(300)), [{"a": 1}, [1], "x", 1.5, None, True],
                                    ["\u00e9" * 1000], ["x"] * 50, [MARK], [1, 1.0]])}
    if c == 8:
        return {"type": rng.choice([["string", "null"], "bogus", 5, [], ["integer", "string", "boolean", "array"],
                                    "object", "null", None])}
    if c == 9:
        return {"type": "object", "properties": rng.choice([[], "x", {"a": 5}, {"": {"type": "string"}},
                                                            {"\"q\\": {}}, {MARK: {"type": "integer"}},
                                                            {f"p{i}": {"type": "integer"} for i in range(300)}]),
                "required": rng.choice([["a"], "a", [1], ["nope"], [], ["a", "a"]])}
    if c == 10:
        return {rng.choice(["not", "if", "then", "else", "prefixItems", "allOf", "oneOf", "patternProperties",
                            "dependentRequired", "contains", "unevaluatedProperties", "propertyNames"]):
                rng.choice([{}, [], {"type": "string"}, [{"type": "string"}]])}
    if c == 11:
        return {"type": "number", "multipleOf": rng.choice([0, -1, 1e-9, 0.3, 1e300, 0.000001, 0.0000001, "2"])}
    if c == 12:
        return {"type": rng.choice(["integer", "number"]), "minimum": rng.choice([10, 1e308, -1e308]),
                "maximum": rng.choice([-10, 5, 1e-300]), "exclusiveMinimum": rng.choice([True, 3, None]),
                "exclusiveMaximum": rng.choice([False, 3, 1e308])}
    if c == 13:
        return {"type": "array", "items": rng.choice([{"type": "integer"}, [], {"enum": [1, 2]}, True, False]),
                "minItems": rng.choice([0, 5, 10 ** 9, -1]), "maxItems": rng.choice([0, 2, -1, 10 ** 12]),
                "uniqueItems": rng.choice([True, False, "yes"])}
    if c == 14:
        return {"anyOf": rng.choice([[], [{"type": "object"}, {"type": "object"}], [{"type": "string"}] * 2,
                                     [{"type": "string"}, {"type": "integer"}, {"type": "null"}],
                                     [{"const": i} for i in range(300)], "x"])}
    if c == 15:
        return {"oneOf": [{"type": "object", "properties": {"t": {"const": "a"}}, "required": ["t"]},
                          {"type": "object", "properties": {"t": {"const": "a"}}, "required": ["t"]}]}
    if c == 16:
        return {"type": "object", "minProperties": rng.choice([100, 5, -1]), "maxProperties": rng.choice([0, 1, -5])}
    if c == 17:
        return {"type": "object", "additionalProperties": rng.choice([{"type": "integer"}, True, False, 5, "x"])}
    if c == 18:
        return {"type": "string", "format": rng.choice(["date", "time", "date-time", "duration", "uuid", "ipv4", "ipv6",
                                                        "hostname", "email", "uri", "uri-reference", "json-pointer",
                                                        "regex", "bogus", "", 5])}
    if c == 19:
        return {"const": rng.choice([nested(rng, 100), "x" * 10000, {"a": [1, {"b": None}]}, MARK, 1e308])}
    if c == 20:
        v = {"type": "integer"}
        for _ in range(rng.choice([30, 63, 64, 65, 100, 500])):
            v = {"type": "object", "properties": {"a": v}, "required": ["a"]}
        return v
    if c == 21:
        v = {"type": "integer"}
        for _ in range(rng.choice([60, 70, 300])):
            v = {"type": "array", "items": v, "minItems": 1}
        return v
    if c == 22:
        return {"type": "object", "properties": {"s": {"type": "string", "minLength": 3, "maxLength": 3,
                                                       "pattern": "^[0-9]+$", "format": "date"}}}
    if c == 23:
        return {"description": "x" * 100000, "title": MARK, "default": nested(rng, 50), "type": "string"}
    if c == 24:
        return rng.choice([False, None, 5, "string", [], [{"type": "string"}]])
    if c == 25:
        return {"type": "string", "enum": ["a", "b"], "pattern": "c", "minLength": 4}
    if c == 26:
        return {"type": "array", "items": {"enum": list(range(40))}, "uniqueItems": True, "minItems": 40}
    if c == 27:
        return {"type": "string", "maxLength": rng.choice([0, 1, 10 ** 9]), "pattern": ".{5,}"}
    if c == 28:
        return {"type": "number", "minimum": 0.1, "maximum": 0.2, "multipleOf": 1}
    if c == 29:
        return {"type": "integer", "minimum": 2 ** 63, "maximum": 2 ** 64}
    if depth < 4:
        # a random tree
        t = rng.choice(["object", "array", "string", "integer", "number", "boolean", "null"])
        if t == "object":
            return {"type": "object",
                    "properties": {rng.choice(["a", "b", "c", "\u00e9", "k k", "x" * 200]): weird_schema(rng, depth + 1)
                                   for _ in range(rng.randrange(1, 4))},
                    "required": rng.choice([[], ["a"], ["a", "b"]])}
        if t == "array":
            return {"type": "array", "items": weird_schema(rng, depth + 1), "maxItems": rng.choice([1, 3, 50])}
        if t == "string":
            return {"type": "string", "maxLength": rng.choice([1, 5, 30])}
        return {"type": t}
    return {"type": "string"}


def any_schema(rng):
    return valid_schema(rng) if rng.random() < 0.4 else weird_schema(rng)
