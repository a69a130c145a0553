/* test_jinja.c — the Jinja interpreter on small templates. The reference
 * tables were rendered by jinja2 3.1.6 configured as transformers does
 * (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
 * raise_exception, json.dumps tojson): every feature must render exactly
 * that, and every error case must fail with jinja2's message. Then syntax
 * errors (with line:col), unknown filters/tests, limits (recursion, nesting,
 * output size, iterations, deep input) and random hostile templates. */
#include "test.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "chat/jinja.h"

struct jcase { const char *name, *tmpl, *ctx, *want; };

/* Renders tmpl with ctx (JSON text); NULL on error (err_msg() says why). */
static char *render(const char *tmpl, const char *ctx) {
    jinja_template *t = NULL;
    err_clear();
    if (jinja_parse(&t, tmpl, strlen(tmpl)) < 0) return NULL;
    json_t *c = ctx ? json_loads(ctx, 0, NULL) : NULL;
    char *out = NULL;
    size_t n = 0;
    int rc = jinja_render(t, c, &out, &n);
    json_decref(c);
    jinja_free(t);
    if (rc < 0) return NULL;
    if (strlen(out) != n) { free(out); err_set(-1, "length mismatch"); return NULL; }
    return out;
}

#define EXPECT(tmpl, ctx, want)                                                                  \
    do {                                                                                         \
        char *_o = render((tmpl), (ctx));                                                        \
        CHECK_MSG(_o && !strcmp(_o, (want)), "%s\n  got:  %s\n  want: %s", (tmpl),               \
                  _o ? _o : err_msg(), (want));                                                  \
        free(_o);                                                                                \
    } while (0)

#define EXPECT_ERR(tmpl, ctx, needle)                                                            \
    do {                                                                                         \
        char *_o = render((tmpl), (ctx));                                                        \
        CHECK_MSG(!_o && strstr(err_msg(), (needle)), "%s\n  got:  %s\n  want error containing: %s", \
                  (tmpl), _o ? _o : err_msg(), (needle));                                        \
        free(_o);                                                                                \
    } while (0)

static const struct jcase cases[] = {
    {"text",
     "hello",
     "{}",
     "hello"},
    {"print_types",
     "{{ 1 }} {{ 1.5 }} {{ true }} {{ none }} {{ 'x' }} {{ [1, 'a', none, true] }} {{ {'a': 1, 'b': [2]} }} {{ (1,) }} {{ (1, 2) }} {{ () }}",
     "{}",
     "1 1.5 True None x [1, 'a', None, True] {'a': 1, 'b': [2]} (1,) (1, 2) ()"},
    {"print_floats",
     "{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e-5 }} {{ 0.0001 }} {{ 1/3 }} {{ 2.0 }} {{ 10 / 4 }} {{ 123456789012345.0 }} {{ -0.5 }} {{ 3e100 }}",
     "{}",
     "0.30000000000000004 1e+16 1e-05 0.0001 0.3333333333333333 2.0 2.5 123456789012345.0 -0.5 3e+100"},
    {"string_escapes",
     "{{ 'a\\nb\\tc\\\\d\\'e\"f' }}|{{ \"q\\\"x\" }}|{{ '\\u00e9\\x41' }}|{{ 'ab' 'cd' }}",
     "{}",
     "a\nb\tc\\d'e\"f|q\"x|\xc3""\xa9""A|abcd"},
    {"repr_strings",
     "{{ ['it\\'s', 'say \"hi\"', 'both \\' \"', 'nl\\n', '\xc3""\xa9""'] }}",
     "{}",
     "[\"it's\", 'say \"hi\"', 'both \\' \"', 'nl\\n', '\xc3""\xa9""']"},
    {"undefined_prints_empty",
     "[{{ nothing }}][{{ d.missing }}]",
     "{\"d\": {}}",
     "[][]"},
    {"ctx_json_types",
     "{{ v }} {{ v.b }} {{ v.c }} {{ v.d }} {{ v.e }}",
     "{\"v\": {\"a\": 1, \"b\": 2.5, \"c\": null, \"d\": true, \"e\": [1, {\"x\": \"y\"}]}}",
     "{'a': 1, 'b': 2.5, 'c': None, 'd': True, 'e': [1, {'x': 'y'}]} 2.5 None True [1, {'x': 'y'}]"},
    {"arith",
     "{{ 7 + 3 }} {{ 7 - 10 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ [1] + [2] }} {{ 'a' ~ 1 ~ none }} {{ -3|abs }} {{ 2 ** 3 ** 2 }}",
     "{}",
     "10 -3 21 3.5 3 -4 1 2 1024 0.5 3.0 ababab [1, 1] [1, 2] a1None 3 64"},
    {"precedence",
     "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ not true or true }} {{ not (true or true) }} {{ 1 if false else 2 if true else 3 }} {{ [1,2,3]|length - 1 }} {{ 'a' + 'b'|upper }} {{ -2 ** 2 }}",
     "{}",
     "7 9 True False 2 2 aB 4"},
    {"and_or_values",
     "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 'b' }} {{ none or [] }}",
     "{}",
     "x b  []"},
    {"compare",
     "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 != 2 }} {{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ true == 1 }} {{ none == none }} {{ x == y }}",
     "{}",
     "True False True True True True True True True True True True True"},
    {"ternary_noelse",
     "[{{ 'y' if false }}]",
     "{}",
     "[]"},
    {"if_elif_else",
     "{% for i in [1, 2, 3] %}{% if i == 1 %}one{% elif i == 2 %}two{% else %}many{% endif %},{% endfor %}",
     "{}",
     "one,two,many,"},
    {"for_loop_vars",
     "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}",
     "{}",
     "1032TrueFalse3b;2121FalseFalse3ac;3210FalseTrue3b;"},
    {"for_else",
     "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1] %}{{ x }}{% else %}empty{% endfor %}",
     "{}",
     "empty|1"},
    {"for_unpack",
     "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}{% for (a, b) in [(1, 2)] %}{{ a }}{{ b }}{% endfor %}",
     "{\"d\": {\"x\": 1, \"y\": [2]}}",
     "x=1;y=[2];3712"},
    {"for_dict_keys",
     "{% for k in d %}{{ k }}{% endfor %}",
     "{\"d\": {\"b\": 1, \"a\": 2}}",
     "ba"},
    {"for_if_filter",
     "{% for x in range(10) if x is odd %}{{ x }}{{ '/' ~ loop.length if loop.last }}{% endfor %}",
     "{}",
     "13579/5"},
    {"for_break_continue",
     "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}",
     "{}",
     "0134"},
    {"loop_cycle",
     "{% for x in range(4) %}{{ loop.cycle('a', 'b', 'c') }}{% endfor %}",
     "{}",
     "abca"},
    {"nested_loops",
     "{% for i in range(2) %}{% for j in range(2) %}{{ i }}{{ j }}{{ loop.index }} {% endfor %}{{ loop.index }}|{% endfor %}",
     "{}",
     "001 012 1|101 112 2|"},
    {"scoping",
     "{% set x = 1 %}{% for i in range(2) %}{% set x = x + 10 %}{{ x }} {% endfor %}{{ x }}{% if true %}{% set y = 5 %}{% endif %}{{ y }}",
     "{}",
     "11 11 15"},
    {"namespace",
     "{% set ns = namespace(total=0, names=[]) %}{% for i in range(4) %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }} {{ ns.names }} {{ ns.missing is defined }}",
     "{}",
     "6 [] False"},
    {"set_tuple_and_block",
     "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set blk %}  inner {{ a }}  {% endset %}[{{ blk }}]{% set up | upper %}shout{% endset %}{{ up }}",
     "{}",
     "12[  inner 1  ]SHOUT"},
    {"macro",
     "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', punct='?') }} {{ greet(name='Cy', punct='.') }} [{{ greet() }}]",
     "{}",
     "Hi Bob! Hi Al? Hi Cy. [Hi !]"},
    {"macro_recursive",
     "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(6) }}",
     "{}",
     "720"},
    {"macro_sees_toplevel",
     "{% set g = 'G' %}{% macro m() %}{{ g }}{{ top }}{% endmacro %}{{ m() }}",
     "{\"top\": \"T\"}",
     "GT"},
    {"call_block",
     "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}",
     "{}",
     "<b>bold 2</b>"},
    {"call_block_args",
     "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(item) each([1, 2]) %}[{{ item }}]{% endcall %}",
     "{}",
     "[1][2]"},
    {"filter_block",
     "{% filter upper %}abc {{ 'd' }}{% endfilter %}",
     "{}",
     "ABC D"},
    {"with_block",
     "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]",
     "{}",
     "3[]"},
    {"raw_block",
     "{% raw %}{{ not evaluated }} {% if %}{% endraw %}",
     "{}",
     "{{ not evaluated }} {% if %}"},
    {"comments",
     "a{# comment {{ x }} #}b\n  {# own line #}\nc",
     "{}",
     "ab\nc"},
    {"ws_trim_lstrip",
     "<ul>\n  {% for x in [1, 2] %}\n    <li>{{ x }}</li>\n  {% endfor %}\n</ul>\n",
     "{}",
     "<ul>\n    <li>1</li>\n    <li>2</li>\n</ul>"},
    {"ws_minus",
     "a  {{- 'b' -}}  c\n  {%- if true -%}\n  d  \n{%- endif %}  e",
     "{}",
     "abcd  e"},
    {"ws_plus",
     "  {%+ if true %}x{% endif +%}\ny",
     "{}",
     "  x\ny"},
    {"ws_var_no_trim",
     "{{ 'a' }}\n{{ 'b' }}\n",
     "{}",
     "a\nb"},
    {"ws_crlf",
     "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n",
     "{}",
     "a\nb\n"},
    {"ws_comment_lstrip",
     "x\n    {# c #}\ny",
     "{}",
     "x\ny"},
    {"tests",
     "{{ x is defined }}{{ y is undefined }}{{ n is none }}{{ 's' is string }}{{ 1 is number }}{{ 1.5 is float }}{{ 1 is integer }}{{ true is boolean }}{{ false is false }}{{ true is true }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ 1 is eq 1 }}{{ 1 is ne 1 }}{{ 'a' is in 'abc' }}{{ range is callable }}{{ 'ab' is lower }}{{ 2 is gt 1 }}{{ x is not none }}{{ y is not defined }}{{ true is number }}{{ true is integer }}",
     "{\"x\": 1, \"n\": null}",
     "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueFalseTrueFalseTrueTrueTrueTrueTrueTrueTrueFalse"},
    {"filters_str",
     "{{ '  hi  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'hello world'|title }}|{{ 'hELLO'|capitalize }}|{{ 'ab'|upper }}{{ 'AB'|lower }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'one two  three'|wordcount }}|{{ '<a href=\"x\">&\\'</a>'|e }}|{{ 'x'|safe }}|{{ 42|string ~ '!' }}",
     "{}",
     "hi|hi|Hello World|Hello|ABab|bba|3|&lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;/a&gt;|x|42!"},
    {"filters_seq",
     "{{ [3, 1, 2]|sort }}{{ [3, 1, 2]|sort(reverse=true) }}{{ ['b', 'A', 'c']|sort }}{{ ['b', 'A', 'c']|sort(case_sensitive=true) }}{{ [1, 2, 3]|first }}{{ [1, 2, 3]|last }}{{ 'abc'|first }}{{ [1, 2]|reverse|list }}{{ 'abc'|reverse }}{{ [1, 1, 2, 'a', 'A']|unique|list }}{{ [1, 2]|join(', ') }}{{ [1, 2, 3]|length }}{{ 'h\xc3""\xa9""llo'|length }}{{ {'a': 1}|count }}{{ [1, 2, 3]|sum }}{{ [1, 5, 3]|max }}{{ [4, 2]|min }}",
     "{}",
     "[1, 2, 3][3, 2, 1]['A', 'b', 'c']['A', 'b', 'c']13a[2, 1]cba[1, 2, 'a']1, 2351652"},
    {"filters_attr",
     "{{ users|map(attribute='name')|join(',') }} {{ users|selectattr('admin')|map(attribute='name')|list }} {{ users|rejectattr('admin')|map(attribute='name')|first }} {{ users|selectattr('name', 'equalto', 'b')|list|length }} {{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('even')|list }} {{ [0, 1, '', 'x']|select|list }} {{ users|map(attribute='age', default=0)|list }} {{ users|sort(attribute='name', reverse=true)|map(attribute='name')|join }} {{ ['1', '2']|map('int')|sum }} {{ users|selectattr('age', 'defined')|list|length }}",
     "{\"users\": [{\"name\": \"a\", \"admin\": true, \"age\": 3}, {\"name\": \"b\", \"admin\": false}, {\"name\": \"c\", \"admin\": true}]}",
     "a,b,c ['a', 'c'] b 1 [1, 3] [1, 3] [1, 'x'] [3, 0, 0] cba 3 1"},
    {"filters_dict",
     "{{ d|items|list }} {{ d|dictsort }} {{ d|dictsort(by='value', reverse=true) }} {{ d|list }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }}",
     "{\"d\": {\"b\": 1, \"a\": 2, \"C\": 0}}",
     "[('b', 1), ('a', 2), ('C', 0)] [('a', 2), ('b', 1), ('C', 0)] [('a', 2), ('b', 1), ('C', 0)] ['b', 'a', 'C'] ['b', 'a', 'C'] [1, 2, 0] 2 dflt None"},
    {"filters_num",
     "{{ '42'|int + 1 }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '2.5'|float }} {{ 'x'|float }} {{ 3|float }} {{ 2.5|round }} {{ 3.5|round }} {{ 3.14159|round(2) }} {{ 3.14159|round(2, 'floor') }} {{ 3.1|round(0, 'ceil') }} {{ 7|round }} {{ -2.5|abs }}",
     "{}",
     "43 4 0 7 3 2.5 0.0 3.0 2.0 4.0 3.14 3.14 4.0 7 2.5"},
    {"filters_default",
     "{{ x|default('d') }} {{ none|default('d') }} {{ ''|default('d', true) }} {{ x|d('dd') }} {{ 0|default(5, boolean=true) }} {{ 'v'|default('d') }}",
     "{}",
     "d None d dd 5 v"},
    {"filters_indent",
     "{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'x\\ny'|indent('>') }}",
     "{}",
     "a\n  b\n\n  c|  a\n  b|a\n  \n  b|x\n>y"},
    {"filters_batch_list",
     "{{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3]|batch(2, 'x')|list }} {{ 'ab'|list }} {{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }}",
     "{}",
     "[[1, 2], [3, 4], [5]] [[1, 2], [3, 'x']] ['a', 'b'] [0, 1, 2] [1, 4, 7] [5, 3, 1]"},
    {"tojson",
     "{{ v|tojson }}|{{ v|tojson(indent=2) }}|{{ '\xc3""\xa9""\"\\n<>&'|tojson }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ [1.0, 0.5, none, true]|tojson }}|{{ []|tojson(indent=2) }}|{{ {1: 2}|tojson }}|{{ '\xc3""\xa9""'|tojson(ensure_ascii=true) }}",
     "{\"v\": {\"name\": \"f\", \"args\": {\"a\": [1, 2], \"b\": {}}, \"s\": \"x\"}}",
     "{\"name\": \"f\", \"args\": {\"a\": [1, 2], \"b\": {}}, \"s\": \"x\"}|{\n  \"name\": \"f\",\n  \"args\": {\n    \"a\": [\n      1,\n      2\n    ],\n    \"b\": {}\n  },\n  \"s\": \"x\"\n}|\"\xc3""\xa9""\\\"\\n<>&\"|{\"a\": 2, \"b\": 1}|[1.0, 0.5, null, true]|[]|{\"1\": 2}|\"\\u00e9\""},
    {"str_methods",
     "{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\n\\na\\n'.lstrip('\\n') }}|{{ 'a\\n\\n'.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b c '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aXa'.replace('a', 'b') }}|{{ 'hello'.find('l') }}{{ 'hello'.find('z') }}{{ 'hello'.rfind('l') }}|{{ 'hello'.count('l') }}|{{ '-'.join(['a', 'b']) }}|{{ 'Hi {} {name}'.format(1, name='n') }}|{{ 'ab'.upper() }}{{ 'AB'.lower() }}{{ 'hi there'.title() }}{{ 'hI'.capitalize() }}|{{ '12'.isdigit() }}{{ 'ab'.isalpha() }}{{ ' '.isspace() }}|{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ 'prefix_x'.removeprefix('prefix_') }}",
     "{}",
     "a b|a|a\n|a|['a', 'b', '', 'c']|['a', 'b', 'c']|['a', 'b c']|['a,b', 'c']|TrueTrue|bXb|2-13|2|a-b|Hi 1 n|ABabHi ThereHi|TrueTrueTrue|['a', 'b', 'c']|x"},
    {"think_split",
     "{% set c = m.split('</think>')[-1].lstrip('\\n') %}{% set r = m.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}[{{ r }}][{{ c }}]",
     "{\"m\": \"<think>\\nreason\\n</think>\\n\\nanswer\"}",
     "[reason][answer]"},
    {"list_methods",
     "{{ [1, 2, 3].index(2) }} {{ [1, 1].count(1) }}",
     "{}",
     "1 2"},
    {"subscripts",
     "{{ xs[0] }} {{ xs[-1] }} {{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ 'h\xc3""\xa9""llo'[1] }} {{ 'h\xc3""\xa9""llo'[::-1] }} {{ 'hello'[1:3] }} {{ d['k'] }} {{ d.k }} {{ xs.0 }} [{{ xs[10] }}] {{ xs[10] is defined }} {{ d['nope'] is defined }} {{ xs[5:1:-2] }} {{ xs[-100:100] }}",
     "{\"xs\": [1, 2, 3, 4, 5], \"d\": {\"k\": \"v\"}}",
     "1 5 [2, 3, 4, 5] [1, 2, 3, 4] [5, 4, 3, 2, 1] [1, 3, 5] \xc3""\xa9"" oll\xc3""\xa9""h el v v 1 [] False False [5, 3] [1, 2, 3, 4, 5]"},
    {"dict_literal_attr",
     "{% set d = {'items': 1, 'x': {'y': [10, 20]}} %}{{ d.x.y[1] }} {{ d['items'] }} {{ d.items()|list|length }}",
     "{}",
     "20 1 2"},
    {"builtins",
     "{{ dict(a=1, b='x') }} {{ namespace(a=1).a }} {{ range(3) | list }} {{ dict(a=1).a }}",
     "{}",
     "{'a': 1, 'b': 'x'} 1 [0, 1, 2] 1"},
    {"none_attr_is_undefined",
     "{{ n.foo is defined }} [{{ n.foo }}] {{ n['x'] is defined }}",
     "{\"n\": null}",
     "False [] False"},
    {"trailing_newline",
     "a\n\n",
     "{}",
     "a\n"},
    {"trailing_newline_one",
     "{% if true %}a{% endif %}\n",
     "{}",
     "a"},
    {"unicode_ops",
     "{{ '\xc3""\x80""\xc3""\x89""\xc3""\x8e""'|lower }} {{ 'stra\xc3""\x9f""e'|upper }} {{ '\xc3""\xb1""and\xc3""\xba""'|title }} {{ '\xe6""\x97""\xa5""\xe6""\x9c""\xac""\xe8""\xaa""\x9e""'|length }} {{ '\xe6""\x97""\xa5""\xe6""\x9c""\xac""\xe8""\xaa""\x9e""'[1:] }} {{ 'a\xe2""\x86""\x92""b'.split('\xe2""\x86""\x92""') }}",
     "{}",
     "\xc3""\xa0""\xc3""\xa9""\xc3""\xae"" STRASSE \xc3""\x91""and\xc3""\xba"" 3 \xe6""\x9c""\xac""\xe8""\xaa""\x9e"" ['a', 'b']"},
    {"generation_unsupported_is_ok",
     "{% for m in msgs %}{{ m.role }}:{{ m.content }};{% endfor %}",
     "{\"msgs\": [{\"role\": \"u\", \"content\": \"hi\"}, {\"role\": \"a\", \"content\": \"yo\"}]}",
     "u:hi;a:yo;"},
};
static const struct jcase error_cases[] = {
    {"err_raise",
     "{{ raise_exception('bad role: ' ~ r) }}",
     "{\"r\": \"x\"}",
     "bad role: x"},
    {"err_undef_attr",
     "{{ x.y.z }}",
     "{\"x\": {}}",
     "'dict object' has no attribute 'y'"},
    {"err_undef_name_attr",
     "{{ nope.attr }}",
     "{}",
     "'nope' is undefined"},
    {"err_undef_add",
     "{{ nope + 1 }}",
     "{}",
     "'nope' is undefined"},
    {"err_str_plus_int",
     "{{ 'a' + 1 }}",
     "{}",
     "can only concatenate str (not \"int\") to str"},
    {"err_int_plus_str",
     "{{ 1 + 'a' }}",
     "{}",
     "unsupported operand type(s) for +: 'int' and 'str'"},
    {"err_in_none",
     "{{ 'a' in n }}",
     "{\"n\": null}",
     "argument of type 'NoneType' is not iterable"},
    {"err_in_str_int",
     "{{ 1 in 'abc' }}",
     "{}",
     "'in <string>' requires string as left operand, not int"},
    {"err_div_zero",
     "{{ 1 / 0 }}",
     "{}",
     "division by zero"},
    {"err_mod_zero",
     "{{ 1 % 0 }}",
     "{}",
     "integer modulo by zero"},
    {"err_not_callable",
     "{{ 'a'() }}",
     "{}",
     "'str' object is not callable"},
    {"err_ns_assign",
     "{% set d = {} %}{% set d.x = 1 %}",
     "{}",
     "cannot assign attribute on non-namespace object"},
    {"err_append_unsafe",
     "{% set xs = [] %}{{ xs.append(1) }}",
     "{}",
     "access to attribute 'append' of 'list' object is unsafe."},
    {"err_unpack",
     "{% for a, b in [[1, 2, 3]] %}{% endfor %}",
     "{}",
     "too many values to unpack (expected 2)"},
    {"err_iter_none",
     "{% for a in n %}{% endfor %}",
     "{\"n\": null}",
     "'NoneType' object is not iterable"},
    {"err_len_int",
     "{{ 5|length }}",
     "{}",
     "object of type 'int' has no len()"},
    {"err_lt_mixed",
     "{{ 1 < 'a' }}",
     "{}",
     "'<' not supported between instances of 'int' and 'str'"},
    {"err_join_int",
     "{{ ', '.join([1, 2]) }}",
     "{}",
     "sequence item 0: expected str instance, int found"},
    {"err_tojson_undefined",
     "{{ nope|tojson }}",
     "{}",
     "Object of type Undefined is not JSON serializable"},
    {"err_range_big",
     "{{ range(1000000)|length }}",
     "{}",
     "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000)."},
    {"err_split_empty",
     "{{ 'a'.split('') }}",
     "{}",
     "empty separator"},
    {"err_items_non_mapping",
     "{{ 5|items|list }}",
     "{}",
     "Can only get item pairs from a mapping."},
};

TEST(test_jinja_reference_cases) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *o = render(cases[i].tmpl, cases[i].ctx);
        CHECK_MSG(o && !strcmp(o, cases[i].want), "%s: %s\n  got:  %s\n  want: %s", cases[i].name, cases[i].tmpl,
                  o ? o : err_msg(), cases[i].want);
        free(o);
    }
}

TEST(test_jinja_reference_errors) {
    for (size_t i = 0; i < sizeof error_cases / sizeof error_cases[0]; i++) {
        char *o = render(error_cases[i].tmpl, error_cases[i].ctx);
        CHECK_MSG(!o && strstr(err_msg(), error_cases[i].want), "%s: %s\n  got:  %s\n  want error containing: %s",
                  error_cases[i].name, error_cases[i].tmpl, o ? o : err_msg(), error_cases[i].want);
        CHECK_MSG(o || strstr(err_msg(), "line 1"), "%s: no line in \"%s\"", error_cases[i].name, err_msg());
        free(o);
    }
}

TEST(test_jinja_raise_exception_line) {
    EXPECT_ERR("a\n{% if x %}\n{{ raise_exception('Conversation roles must alternate') }}\n{% endif %}", "{\"x\": 1}",
               "line 3: TemplateError: Conversation roles must alternate");
}

TEST(test_jinja_syntax_errors) {
    static const struct { const char *tmpl, *needle; } bad[] = {
        {"{% if x %}never closed", "expected 'elif' or 'else' or 'endif'"},
        {"{% for x in xs %}", "'endfor'"},
        {"{{ x ", "expected '}}'"},
        {"{{ 'abc }}", "unterminated string"},
        {"ok {# comment", "missing end of comment"},
        {"{% endfor %}", "no block is open"},
        {"{% if x %}{% endfor %}", "unexpected 'endfor'"},
        {"{% include 'x.j2' %}", "unknown tag 'include'"},
        {"{% break %}", "outside of a loop"},
        {"{{ x | }}", "filter name"},
        {"{{ x is }}", "test name"},
        {"{{ (1 + 2 }}", "unexpected end of template"},
        {"{{ [1, 2 }}", "unexpected end of template"},
        {"{{ (1 + 2] }}", "expected ')'"},
        {"{{ {'a' 1} }}", "':'"},
        {"{{ f(a=1, 2) }}", "positional argument follows keyword argument"},
        {"{% set %}", "variable name"},
        {"{% macro %}{% endmacro %}", "macro name"},
        {"{{ 1 + }}", "expected an expression"},
        {"{{ x @ y }}", "unexpected character '@'"},
        {"{% raw %}never ends", "missing end of raw"},
        {"{{ 99999999999999999999 }}", "integer literal too large"},
        {"{% for x in y recursive %}{% endfor %}", "recursive"},
        {"{{ '\\xZZ' }}", "escape"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        jinja_template *t = NULL;
        err_clear();
        int rc = jinja_parse(&t, bad[i].tmpl, strlen(bad[i].tmpl));
        CHECK_MSG(rc < 0 && t == NULL, "parsed: %s", bad[i].tmpl);
        CHECK_MSG(strstr(err_msg(), bad[i].needle) && strstr(err_msg(), "syntax error at 1:"),
                  "%s: \"%s\" lacks \"%s\"", bad[i].tmpl, err_msg(), bad[i].needle);
        jinja_free(t);
    }
    /* line:col of the offending token */
    jinja_template *t = NULL;
    const char *src = "line one\n  {{ ok }}\n    {% if %}";
    CHECK(jinja_parse(&t, src, strlen(src)) < 0);
    CHECK_MSG(strstr(err_msg(), "at 3:11"), "%s", err_msg());
}

TEST(test_jinja_unknown_filter_and_test) {
    EXPECT_ERR("{{ x|frobnicate }}", "{\"x\": 1}", "No filter named 'frobnicate'");
    EXPECT_ERR("{{ x is frobnicated }}", "{\"x\": 1}", "No test named 'frobnicated'");
    /* an unknown filter in a branch not taken does not matter */
    EXPECT("{% if false %}{{ x|frobnicate }}{% endif %}ok", "{}", "ok");
}

TEST(test_jinja_transformers_extras) {
    EXPECT("{% generation %}gen {{ 1 }}{% endgeneration %}", "{}", "gen 1");
    char *o = render("{{ strftime_now('%Y') }}", "{}");
    CHECK(o && strlen(o) == 4 && o[0] >= '1' && o[0] <= '9');
    free(o);
    /* tojson never HTML-escapes (transformers' override) */
    EXPECT("{{ '<b>&'|tojson }}", "{}", "\"<b>&\"");
    /* no context at all */
    EXPECT("{{ x is defined }}", NULL, "False");
}

TEST(test_jinja_limits) {
    /* unbounded macro recursion */
    EXPECT_ERR("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}", "RecursionError");
    /* call block caller recursion */
    EXPECT_ERR("{% macro m() %}{% call m() %}x{% endcall %}{% endmacro %}{{ m() }}", "{}", "RecursionError");
    /* deep expression / block nesting is a syntax error, not a crash */
    char *deep = malloc(40100);
    if (!deep) return;
    memcpy(deep, "{{", 2);
    memset(deep + 2, '(', 20000);
    strcpy(deep + 20002, "1");
    memset(deep + 20003, ')', 20000);
    strcpy(deep + 40003, "}}");
    jinja_template *t = NULL;
    CHECK(jinja_parse(&t, deep, strlen(deep)) < 0);
    CHECK(strstr(err_msg(), "nested too deeply") != NULL);
    for (int i = 0; i < 5000; i++) memcpy(deep + i * 8, "{%if 1%}", 8);
    deep[40000] = 0;
    CHECK(jinja_parse(&t, deep, strlen(deep)) < 0);
    for (int i = 0; i < 10000; i++) memcpy(deep + i * 4, "not ", 4);
    strcpy(deep + 40000, "1");
    char *d2 = malloc(40100);
    if (!d2) { free(deep); return; }
    snprintf(d2, 40100, "{{ %s }}", deep);
    CHECK(jinja_parse(&t, d2, strlen(d2)) < 0);
    for (int i = 0; i < 10000; i++) memcpy(deep + i * 2, "-(", 2);
    deep[20000] = 0;
    snprintf(d2, 40100, "{{ %s }}", deep);
    CHECK(jinja_parse(&t, d2, strlen(d2)) < 0);
    free(d2);
    free(deep);
    /* output and string size */
    EXPECT_ERR("{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}", "{}", "output too large");
    EXPECT_ERR("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "{}",
               "too large");
    EXPECT_ERR("{{ 'x' * 100000000 }}", "{}", "too large");
    EXPECT_ERR("{{ [1, 2] * 100000000 }}", "{}", "too large");
    /* iterations */
    EXPECT_ERR("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "{}",
               "too many loop iterations");
    /* integer overflow is an error, not UB */
    EXPECT_ERR("{{ 9223372036854775807 + 1 }}", "{}", "OverflowError");
    EXPECT_ERR("{{ 2 ** 64 }}", "{}", "OverflowError");
    /* self-referencing namespace: printable, freed */
    char *o = render("{% set ns = namespace() %}{% set ns.me = ns %}{{ (ns ~ '')|length > 0 }}", "{}");
    CHECK(o != NULL);
    free(o);
    /* deep input */
    json_t *root = json_array(), *cur = root;
    for (int i = 0; i < 1000; i++) {
        json_t *n = json_array();
        json_array_append_new(cur, n);
        cur = n;
    }
    jinja_template *tt = NULL;
    CHECK(jinja_parse(&tt, "{{ x }}", 7) == 0);
    json_t *ctx = json_object();
    json_object_set_new(ctx, "x", root);
    char *out = NULL;
    CHECK(jinja_render(tt, ctx, &out, NULL) < 0);
    CHECK(strstr(err_msg(), "nested too deeply") != NULL);
    json_decref(ctx);
    jinja_free(tt);
    /* render with a non-object context */
    CHECK(jinja_parse(&tt, "x", 1) == 0);
    json_t *arr = json_array();
    CHECK(jinja_render(tt, arr, &out, NULL) < 0);
    json_decref(arr);
    jinja_free(tt);
}

/* Random mutations of a realistic template: parse + render must never crash. */
TEST(test_jinja_hostile_mutations) {
    static const char base[] =
        "{%- set ns = namespace(i=0, s='') %}{% macro m(a, b=2) %}[{{ a ~ b }}]{% endmacro %}\n"
        "{%- for message in messages[::-1] if message.role != 'x' %}{% set ns.i = ns.i + 1 %}"
        "{{ m(loop.index, b=message.content|trim|length) }}{{ message.content.split('</think>')[-1].lstrip('\\n') }}"
        "{% if message.tool_calls is defined %}{{ message.tool_calls|tojson(indent=2) }}{% elif loop.last %}L{% else %}"
        "{{ (message.role == 'user') != (loop.index0 % 2 == 0) }}{% endif %}{% endfor %}{{ ns.i }}"
        "{% raw %}{{ raw }}{% endraw %}{# c #}{{ {'a': [1, 2.5, none]}|dictsort }}";
    static const char alphabet[] = "{}%#()[]|.,:'\"-+*/~<>=!_ \nab0123456789ifforendsetmacro";
    const char *ctx_text = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi</think>\\nyo\"}, "
                           "{\"role\": \"assistant\", \"content\": \"a\", \"tool_calls\": [{\"name\": \"f\"}]}]}";
    json_t *ctx = json_loads(ctx_text, 0, NULL);
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    size_t n = sizeof base - 1;
    char *buf = malloc(n + 64);
    int parsed = 0, rendered = 0;
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(buf, base, n + 1);
        size_t len = n;
        int muts = 1 + (int)(seed % 4);
        for (int k = 0; k < muts; k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            size_t pos = (size_t)(seed >> 33) % len;
            int op = (int)((seed >> 20) % 3);
            char c = alphabet[(seed >> 8) % (sizeof alphabet - 1)];
            if (op == 0) buf[pos] = c;
            else if (op == 1 && len > 1) { memmove(buf + pos, buf + pos + 1, len - pos); len--; }
            else if (op == 2 && len < n + 60) { memmove(buf + pos + 1, buf + pos, len - pos + 1); buf[pos] = c; len++; }
        }
        jinja_template *t = NULL;
        if (jinja_parse(&t, buf, len) == 0) {
            parsed++;
            char *out = NULL;
            if (jinja_render(t, ctx, &out, NULL) == 0) rendered++;
            free(out);
            jinja_free(t);
        }
    }
    CHECK(parsed > 100);
    CHECK(rendered > 10);  /* most mutations misspell a name: legit errors */
    free(buf);
    json_decref(ctx);
}

/* The same parsed template rendered from several threads at once. */
#include <pthread.h>
static jinja_template *shared_t;
static void *render_thread(void *arg) {
    (void)arg;
    for (int i = 0; i < 200; i++) {
        char *out = NULL;
        json_t *ctx = json_pack("{s:i}", "n", i);
        if (jinja_render(shared_t, ctx, &out, NULL) < 0) { json_decref(ctx); return (void *)1; }
        char want[64];
        snprintf(want, sizeof want, "%d:%d", i, i * 2);
        int bad = strcmp(out, want) != 0;
        free(out);
        json_decref(ctx);
        if (bad) return (void *)1;
    }
    return NULL;
}
TEST(test_jinja_render_concurrent) {
    const char *src = "{% set ns = namespace(v=n * 2) %}{{ n }}:{{ ns.v }}";
    CHECK(jinja_parse(&shared_t, src, strlen(src)) == 0);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, render_thread, NULL);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(th[i], &r);
        CHECK(r == NULL);
    }
    jinja_free(shared_t);
}
