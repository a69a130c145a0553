// structured.test.mjs — structured output (JSON mode and JSON Schema) on
// every surface through the official clients: OpenAI chat
// (`chat.completions.parse`, response_format json_schema / json_object),
// completions, Responses (`responses.parse`, text.format), Anthropic
// (`messages.parse`, output_config.format) and Ollama (format: schema /
// "json"). The answers are checked against the schema by a validator of
// this file's own; greedy answers are the same streamed or not and with
// speculation on or off, sampled ones conform at every seed tried; schemas
// the server cannot enforce are a 400 in each surface's own error format.
// Forced tool calls (tool_choice "required" / a named function; Anthropic's
// "any" / "tool") come back as tool calls whose arguments follow the tool's
// schema, on OpenAI chat (streamed too), Responses and Anthropic. Strict
// tools under tool_choice auto: a call the model opens follows the schema.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from './lib.mjs';
import { isIPv6 } from 'node:net';

const LANG = {
  type: 'object',
  properties: {
    language: { enum: ['python', 'javascript', 'c'] },
    typed: { type: 'boolean' },
    year: { type: 'integer' },
    tags: { type: 'array', items: { type: 'string', enum: ['fast', 'safe', 'old'] }, maxItems: 2, uniqueItems: true },
  },
  required: ['language', 'typed', 'year', 'tags'],
  additionalProperties: false,
};
const ASK = 'Describe the Python language as JSON.';

// RFC 3339 / RFC 4122 shapes of the formats the server enforces
const TIME = '([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])';
const DATE = '[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])';
const FORMATS = {
  date: new RegExp(`^${DATE}$`), time: new RegExp(`^${TIME}$`), 'date-time': new RegExp(`^${DATE}T${TIME}$`),
  uuid: /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/,
  ipv4: /^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$/,
  email: /^[A-Za-z0-9_%+-]+(\.[A-Za-z0-9_%+-]+)*@([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])$/,
  hostname: { test: (v) => v.length <= 253 && v.split('.').every((l) => /^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/.test(l)) },
  ipv6: { test: (v) => isIPv6(v) }, // node's own parser judges
  uri: /^[A-Za-z][A-Za-z0-9+.-]*:([A-Za-z0-9\-._~:/?#[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})*$/, // RFC 3986's characters
};

// Does v conform to schema s (the keywords the tests use)?
function conforms(v, s) {
  if (s.enum) return s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v));
  const t = s.type;
  if (t === 'object') {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
    const props = s.properties ?? {};
    for (const r of s.required ?? []) if (!(r in v)) return false;
    for (const [k, x] of Object.entries(v)) {
      if (props[k]) {
        if (!conforms(x, props[k])) return false;
      } else if (s.additionalProperties === false || (s.properties && s.additionalProperties === undefined)) return false;
    }
    return true;
  }
  if (t === 'array') {
    if (!Array.isArray(v) || v.length > (s.maxItems ?? Infinity) || v.length < (s.minItems ?? 0)) return false;
    if (s.uniqueItems && new Set(v.map((x) => JSON.stringify(x))).size !== v.length) return false;
    return v.every((x) => !s.items || conforms(x, s.items));
  }
  if (t === 'integer')
    return Number.isInteger(v) && v % (s.multipleOf ?? 1) === 0 && v >= (s.minimum ?? -Infinity) && v <= (s.maximum ?? Infinity) &&
      v > (s.exclusiveMinimum ?? -Infinity) && v < (s.exclusiveMaximum ?? Infinity);
  if (t === 'number')
    return typeof v === 'number' && v >= (s.minimum ?? -Infinity) && v <= (s.maximum ?? Infinity) &&
      (s.multipleOf === undefined || Math.abs(v / s.multipleOf - Math.round(v / s.multipleOf)) < 1e-6) &&
      v > (s.exclusiveMinimum ?? -Infinity) && v < (s.exclusiveMaximum ?? Infinity);
  if (t === 'string')
    return typeof v === 'string' && [...v].length >= (s.minLength ?? 0) && [...v].length <= (s.maxLength ?? Infinity) &&
      (!FORMATS[s.format] || FORMATS[s.format].test(v)) && (s.pattern === undefined || new RegExp(s.pattern, 'u').test(v));
  if (t === 'boolean') return typeof v === 'boolean';
  if (t === 'null') return v === null;
  return true;
}

test('conforms() itself tells a good answer from bad ones', () => {
  assert.ok(conforms({ language: 'c', typed: true, year: 1972, tags: ['fast'] }, LANG));
  assert.ok(!conforms({ language: 'go', typed: true, year: 2009, tags: [] }, LANG));
  assert.ok(!conforms({ language: 'c', typed: 'yes', year: 1972, tags: [] }, LANG));
  assert.ok(!conforms({ language: 'c', typed: true, year: 19.5, tags: [] }, LANG));
  assert.ok(!conforms({ language: 'c', typed: true, year: 1, tags: [], extra: 1 }, LANG));
  assert.ok(!conforms({ language: 'c', typed: true, year: 1 }, LANG));
  assert.ok(!conforms({ language: 'c', typed: true, year: 1, tags: ['fast', 'safe', 'old'] }, LANG));
  assert.ok(!conforms({ language: 'c', typed: true, year: 1, tags: ['fast', 'fast'] }, LANG));
  assert.ok(conforms('h\u00e9', { type: 'string', minLength: 2, maxLength: 2 }));
  assert.ok(!conforms('h\u00e9!', { type: 'string', maxLength: 2 }));
  assert.ok(!conforms('h', { type: 'string', minLength: 2 }));
  assert.ok(conforms(5, { type: 'integer', minimum: 1, maximum: 5 }));
  assert.ok(!conforms(6, { type: 'integer', minimum: 1, maximum: 5 }));
  assert.ok(!conforms(1, { type: 'integer', exclusiveMinimum: 1 }));
  assert.ok(!conforms(1.5, { type: 'number', maximum: 1 }));
  assert.ok(conforms(19.95, { type: 'number', multipleOf: 0.05 }) && !conforms(19.97, { type: 'number', multipleOf: 0.05 }));
  assert.ok(conforms('2024-02-29T23:59:59.5+05:30', { type: 'string', format: 'date-time' }));
  assert.ok(!conforms('2024-02-29 23:59:59Z', { type: 'string', format: 'date-time' }));
  assert.ok(!conforms('2024-13-01', { type: 'string', format: 'date' }));
  assert.ok(!conforms('1.2.3.256', { type: 'string', format: 'ipv4' }));
  assert.ok(conforms('a.b@c-d.io', { type: 'string', format: 'email' }));
  assert.ok(!conforms('a@b', { type: 'string', format: 'email' }));
  assert.ok(conforms('fe80::1', { type: 'string', format: 'ipv6' }) && !conforms('1::2::3', { type: 'string', format: 'ipv6' }));
  assert.ok(conforms('a-b.c', { type: 'string', format: 'hostname' }) && !conforms('a-.c', { type: 'string', format: 'hostname' }));
  assert.ok(conforms('https://x.org/a?b#c', { type: 'string', format: 'uri' }) && !conforms('/a b', { type: 'string', format: 'uri' }));
  assert.ok(conforms('ABC-123', { type: 'string', pattern: '^[A-Z]{3}-\\d{3}$' }));
  assert.ok(!conforms('ABC-12', { type: 'string', pattern: '^[A-Z]{3}-\\d{3}$' }));
  assert.ok(conforms('a caf\u00e9', { type: 'string', pattern: 'caf\u00e9' }));
});

// string patterns are enforced (an ECMA-262 subset; JavaScript's RegExp is the judge here), the
// same schema without them gives answers that break them
test('OpenAI chat: string patterns hold at temperature 0 and at five seeds', async () => {
  const schema = {
    type: 'object',
    properties: {
      code: { type: 'string', pattern: '^[A-Z]{3}-\\d{3}$' },
      slug: { type: 'string', pattern: '^[a-z]+(-[a-z]+)*$', maxLength: 20 },
      version: { type: 'string', pattern: '^v\\d+\\.\\d+\\.\\d+$', maxLength: 12 },
    },
    required: ['code', 'slug', 'version'], additionalProperties: false,
  };
  const base = { model: await L.model(), messages: [{ role: 'user', content: ASK }], max_tokens: 200, response_format: jsonSchemaFormat(schema) };
  await conformsAtSeeds(base, schema);
  const free = structuredClone(schema);
  for (const p of Object.values(free.properties)) delete p.pattern;
  const r = await client.chat.completions.create({ ...base, temperature: 0, response_format: jsonSchemaFormat(free) });
  const c = r.choices[0].message.content;
  assert.ok(!conforms(JSON.parse(c), schema), `without the patterns the answer keeps them anyway: ${c}`);
});

// The answers to base at temperature 0 and at seeds 1-5 (temperature 1) finish and conform to
// schema; their texts.
async function conformsAtSeeds(base, schema) {
  const seen = new Set();
  for (const [temperature, seed] of [[0, 0], [1, 1], [1, 2], [1, 3], [1, 4], [1, 5]]) {
    const r = await client.chat.completions.create({ ...base, temperature, seed });
    const c = r.choices[0].message.content;
    assert.equal(r.choices[0].finish_reason, 'stop', c);
    assert.ok(conforms(JSON.parse(c), schema), c);
    seen.add(c);
  }
  return seen;
}

// string formats are enforced: date, date-time, uuid, ipv4, email, hostname, ipv6 and uri answers
// have their shapes (the email within its maxLength: tinycoder would run a
// domain label on to max_tokens)
test('OpenAI chat: format date / date-time / uuid / ipv4 / email / hostname / ipv6 / uri hold at temperature 0 and at five seeds', async () => {
  const schema = {
    type: 'object',
    properties: {
      released: { type: 'string', format: 'date' }, updated: { type: 'string', format: 'date-time' }, id: { type: 'string', format: 'uuid' },
      host: { type: 'string', format: 'ipv4' }, contact: { type: 'string', format: 'email', maxLength: 24 },
      server: { type: 'string', format: 'hostname', maxLength: 30 }, v6: { type: 'string', format: 'ipv6' },
      home: { type: 'string', format: 'uri', maxLength: 40 },
    },
    required: ['released', 'updated', 'id', 'host', 'contact', 'server', 'v6', 'home'], additionalProperties: false,
  };
  const base = { model: await L.model(), messages: [{ role: 'user', content: ASK }], max_tokens: 400, response_format: jsonSchemaFormat(schema) };
  await conformsAtSeeds(base, schema);
});

// number ranges and an integer's multipleOf are enforced: greedy and sampled answers stay inside them
// (tinycoder, without the ranges, writes {"stars": 1000, "year": 1000} greedily)
test('OpenAI chat: integer and number minimum / maximum and multipleOf (whole and decimal) hold at temperature 0 and at five seeds', async () => {
  const schema = {
    type: 'object',
    properties: {
      year: { type: 'integer', minimum: 2030, maximum: 2035 }, lines: { type: 'integer', minimum: 10, maximum: 100000, multipleOf: 25 }, stars: { type: 'integer', exclusiveMinimum: 0, maximum: 5 },
      score: { type: 'number', minimum: 0, maximum: 1 }, price: { type: 'number', minimum: 0, maximum: 100, multipleOf: 0.05 },
    },
    required: ['year', 'stars', 'score', 'lines', 'price'], additionalProperties: false,
  };
  const base = { model: await L.model(), messages: [{ role: 'user', content: ASK }], max_tokens: 120, response_format: jsonSchemaFormat(schema) };
  const seen = await conformsAtSeeds(base, schema);
  assert.ok(seen.size > 1, 'six answers, one text');
});

const client = L.openai();
const jsonSchemaFormat = (schema) => ({ type: 'json_schema', json_schema: { name: 'answer', strict: true, schema } });

test('OpenAI chat: json_schema through chat.completions.parse; streamed and speculation off give the same text', async () => {
  const base = { model: await L.model(), messages: [{ role: 'user', content: ASK }], max_tokens: 120, temperature: 0 };
  const r = await client.chat.completions.parse({ ...base, response_format: jsonSchemaFormat(LANG) });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'stop', m.content);
  assert.ok(conforms(m.parsed, LANG), m.content);
  // streamed
  const stream = await client.chat.completions.create({ ...base, response_format: jsonSchemaFormat(LANG), stream: true });
  let text = '';
  for await (const c of stream) text += c.choices[0]?.delta?.content ?? '';
  assert.equal(text, m.content);
  // speculation off (kestrel extension): the same greedy text
  const off = await client.chat.completions.create({ ...base, response_format: jsonSchemaFormat(LANG), speculative: false });
  assert.equal(off.choices[0].message.content, m.content);
  // and unconstrained, the model answers otherwise (the constraint is what made it JSON)
  const free = await client.chat.completions.create(base);
  assert.notEqual(free.choices[0].message.content, m.content);
});

test('OpenAI chat: sampled answers conform at every seed, the same with speculation on and off', async () => {
  const base = { model: await L.model(), messages: [{ role: 'user', content: ASK }], max_tokens: 200, temperature: 1.0, response_format: jsonSchemaFormat(LANG) };
  const texts = new Set();
  for (const seed of [1, 2, 3, 4, 5]) {
    const r = await client.chat.completions.create({ ...base, seed });
    const c = r.choices[0].message.content;
    assert.equal(r.choices[0].finish_reason, 'stop', c);
    assert.ok(conforms(JSON.parse(c), LANG), c);
    texts.add(c);
    if (seed <= 2) {
      const off = await client.chat.completions.create({ ...base, seed, speculative: false });
      assert.equal(off.choices[0].message.content, c);
    }
  }
  assert.ok(texts.size > 1, 'sampling at temperature 1 gave one answer for five seeds');
});

test('OpenAI chat: string lengths hold at every seed (the same seeds write longer strings without them)', async () => {
  const str = (b) => ({ type: 'string', ...b });
  const schema = (b1, b2) => ({
    type: 'object', properties: { name: str(b1), summary: str(b2) }, required: ['name', 'summary'], additionalProperties: false,
  });
  const bounded = schema({ minLength: 3, maxLength: 8 }, { maxLength: 12 });
  const base = { model: await L.model(), messages: [{ role: 'user', content: 'Name a Python web framework and sum it up, as JSON.' }], max_tokens: 200, temperature: 1.0 };
  let longer = 0;
  for (const seed of [1, 2, 3, 4]) {
    const r = await client.chat.completions.create({ ...base, seed, response_format: jsonSchemaFormat(bounded) });
    const c = r.choices[0].message.content;
    assert.equal(r.choices[0].finish_reason, 'stop', c);
    assert.ok(conforms(JSON.parse(c), bounded), c);
    const free = await client.chat.completions.create({ ...base, seed, response_format: jsonSchemaFormat(schema({}, {})) });
    const f = free.choices[0].message.content;
    if (free.choices[0].finish_reason !== 'stop' || !conforms(JSON.parse(f), bounded)) longer++;
  }
  assert.ok(longer > 0, 'no seed wrote a string past the bounds without them: the test shows nothing');
});

test('OpenAI chat: json_object gives a JSON object', async () => {
  const r = await client.chat.completions.create({
    model: await L.model(), messages: [{ role: 'user', content: 'Write a JSON config for a Python project.' }],
    max_tokens: 100, temperature: 0, response_format: { type: 'json_object' },
  });
  const c = r.choices[0].message.content;
  assert.equal(r.choices[0].finish_reason, 'stop', c);
  const v = JSON.parse(c);
  assert.ok(typeof v === 'object' && v !== null && !Array.isArray(v), c);
});

// logprobs are the model's, before the mask: the same object with them, and
// where the constraint overrode the model's favourite the chosen token's
// logprob is below the top alternative's
test('OpenAI chat: json_object with logprobs gives the same object, and logprobs of the tokens it chose', async () => {
  const base = {
    model: await L.model(), messages: [{ role: 'user', content: 'Write a JSON config for a Python project.' }],
    max_tokens: 100, temperature: 0, response_format: { type: 'json_object' },
  };
  const a = await client.chat.completions.create(base);
  const b = await client.chat.completions.create({ ...base, logprobs: true, top_logprobs: 3 });
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
  const lp = b.choices[0].logprobs.content;
  assert.ok(lp.length > 0);
  for (const t of lp) {
    assert.ok(Number.isFinite(t.logprob) && t.logprob <= 0, JSON.stringify(t));
    assert.equal(t.top_logprobs.length, 3);
    assert.ok(t.top_logprobs[0].logprob >= t.logprob - 1e-6, JSON.stringify(t));
  }
  assert.ok(lp.some((t) => t.top_logprobs[0].logprob > t.logprob + 1e-6), 'the constraint never overrode the model here');
});

test('OpenAI completions: response_format json_schema on a raw prompt', async () => {
  const schema = { type: 'object', properties: { n: { type: 'integer' }, ok: { type: 'boolean' } }, required: ['n', 'ok'], additionalProperties: false };
  const r = await client.completions.create({
    model: await L.model(), prompt: 'def count(xs):\n    return len(xs)\n# result as JSON:\n', max_tokens: 60, temperature: 0,
    response_format: jsonSchemaFormat(schema),
  });
  const c = r.choices[0].text;
  assert.equal(r.choices[0].finish_reason, 'stop', c);
  assert.ok(conforms(JSON.parse(c), schema), c);
});

test('OpenAI Responses: text.format json_schema through responses.parse', async () => {
  const r = await client.responses.parse({
    model: await L.model(), input: ASK, max_output_tokens: 120, temperature: 0,
    text: { format: { type: 'json_schema', name: 'answer', strict: true, schema: LANG } },
  });
  assert.equal(r.status, 'completed', r.output_text);
  assert.ok(conforms(r.output_parsed, LANG), r.output_text);
});

test('Anthropic: output_config.format through messages.parse', async () => {
  const r = await L.anthropic().messages.parse({
    model: await L.model(), max_tokens: 120, temperature: 0, messages: [{ role: 'user', content: ASK }],
    output_config: { format: { type: 'json_schema', schema: LANG } },
  });
  assert.equal(r.stop_reason, 'end_turn', JSON.stringify(r.content));
  assert.ok(conforms(r.parsed_output, LANG), JSON.stringify(r.content));
});

test('Ollama: format as a schema on chat, "json" on generate', async () => {
  const ol = L.ollama();
  const model = await L.model();
  const r = await ol.chat({ model, messages: [{ role: 'user', content: ASK }], format: LANG, options: { temperature: 0, num_predict: 120 } });
  assert.equal(r.done_reason, 'stop', r.message.content);
  assert.ok(conforms(JSON.parse(r.message.content), LANG), r.message.content);
  const g = await ol.generate({ model, prompt: 'Write a JSON config for a Python project.', format: 'json', options: { temperature: 0, num_predict: 100 } });
  assert.equal(g.done_reason, 'stop', g.response);
  const v = JSON.parse(g.response);
  assert.ok(typeof v === 'object' && v !== null && !Array.isArray(v), g.response);
});

test('schemas that cannot be enforced are a 400 in each surface\'s format, naming the keyword', async () => {
  const model = await L.model();
  const NOT = { type: 'object', properties: { a: { not: { type: 'string' } } } };
  const msg = [{ role: 'user', content: 'hi' }];
  let r = await L.post('/v1/chat/completions', { model, messages: msg, max_tokens: 4, response_format: jsonSchemaFormat(NOT) });
  L.assertOpenAIError(r, 400);
  assert.match(r.json.error.message, /'not' is not supported/);
  r = await L.post('/v1/chat/completions', { model, messages: msg, max_tokens: 4, response_format: jsonSchemaFormat({ type: 'objekt' }) });
  L.assertOpenAIError(r, 400);
  assert.match(r.json.error.message, /unknown type 'objekt'/);
  r = await L.post('/v1/chat/completions', { model, messages: msg, max_tokens: 4, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: 'string' } } });
  L.assertOpenAIError(r, 400);
  r = await L.post('/v1/responses', { model, input: 'hi', max_output_tokens: 4, text: { format: { type: 'json_schema', name: 'x', schema: NOT } } });
  L.assertOpenAIError(r, 400);
  r = await L.post('/v1/messages', { model, max_tokens: 4, messages: msg, output_config: { format: { type: 'json_schema', schema: NOT } } },
    { headers: { 'anthropic-version': '2023-06-01' } });
  L.assertAnthropicError(r, 400, 'invalid_request_error');
  assert.match(r.json.error.message, /'not' is not supported/);
  r = await L.post('/api/chat', { model, messages: msg, stream: false, format: 'yaml' });
  L.assertOllamaError(r, 400);
  r = await L.post('/api/generate', { model, prompt: 'hi', stream: false, format: NOT });
  L.assertOllamaError(r, 400);
  assert.match(r.json.error, /'not' is not supported/);
  const LOOK = { type: 'object', properties: { a: { type: 'string', pattern: '^(?=x)' } } };
  r = await L.post('/v1/chat/completions', { model, messages: msg, max_tokens: 4, response_format: jsonSchemaFormat(LOOK) });
  L.assertOpenAIError(r, 400);
  assert.match(r.json.error.message, /pattern: lookahead/);
  await L.health();
});

// -- forced tool calls: tool_choice "required" / a named function (Anthropic "any" / "tool") --

// enum arguments: free strings run on in tinycoder (it is a small code model), enums end
const WEATHER = { type: 'object', properties: { city: { enum: ['Paris', 'London', 'Tokyo'] }, days: { type: 'integer' } }, required: ['city'], additionalProperties: false };
const CLOCK = { type: 'object', properties: { tz: { enum: ['UTC', 'CET'] } }, required: ['tz'], additionalProperties: false };
const weather = { type: 'function', function: { name: 'get_weather', description: L.weatherDesc, parameters: WEATHER } };
const clock = { type: 'function', function: { name: 'get_time', description: 'Current time in a time zone', parameters: CLOCK } };
const ASK_TOOL = 'What is the weather in Paris?';

test('OpenAI chat: a named tool_choice is that call, its arguments per the schema; streamed the same', async () => {
  const base = { model: await L.model(), messages: [{ role: 'user', content: ASK_TOOL }], max_tokens: 80, temperature: 0, tools: [weather, clock] };
  const r = await client.chat.completions.create({ ...base, tool_choice: { type: 'function', function: { name: 'get_weather' } } });
  const ch = r.choices[0];
  assert.equal(ch.finish_reason, 'tool_calls', JSON.stringify(ch.message));
  assert.equal(ch.message.tool_calls.length, 1);
  assert.equal(ch.message.tool_calls[0].function.name, 'get_weather');
  const args = JSON.parse(ch.message.tool_calls[0].function.arguments);
  assert.ok(conforms(args, WEATHER), ch.message.tool_calls[0].function.arguments);
  const stream = await client.chat.completions.create({ ...base, tool_choice: { type: 'function', function: { name: 'get_weather' } }, stream: true });
  let name = '', argText = '', finish = null;
  for await (const c of stream) {
    for (const tc of c.choices[0]?.delta?.tool_calls ?? []) {
      name += tc.function?.name ?? '';
      argText += tc.function?.arguments ?? '';
    }
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(name, 'get_weather');
  assert.equal(argText, ch.message.tool_calls[0].function.arguments);
  assert.equal(finish, 'tool_calls');
  // the other tool named: that one is called
  const r2 = await client.chat.completions.create({ ...base, tool_choice: { type: 'function', function: { name: 'get_time' } } });
  assert.equal(r2.choices[0].message.tool_calls[0].function.name, 'get_time');
  assert.ok(conforms(JSON.parse(r2.choices[0].message.tool_calls[0].function.arguments), CLOCK));
  // "required": a call to one of the tools
  const r3 = await client.chat.completions.create({ ...base, tool_choice: 'required' });
  assert.equal(r3.choices[0].finish_reason, 'tool_calls', JSON.stringify(r3.choices[0].message));
  const c3 = r3.choices[0].message.tool_calls[0].function;
  assert.ok(conforms(JSON.parse(c3.arguments), c3.name === 'get_weather' ? WEATHER : c3.name === 'get_time' ? CLOCK : { enum: [] }), JSON.stringify(c3));
  // auto: the model's own choice (tinycoder writes text)
  const r4 = await client.chat.completions.create({ ...base, tool_choice: 'auto' });
  assert.equal(r4.choices[0].message.tool_calls, undefined);
});

test('OpenAI Responses: a named tool_choice gives a function_call item', async () => {
  const r = await client.responses.create({
    model: await L.model(), input: ASK_TOOL, max_output_tokens: 80, temperature: 0,
    tools: [{ type: 'function', name: 'get_weather', description: L.weatherDesc, parameters: WEATHER }],
    tool_choice: { type: 'function', name: 'get_weather' },
  });
  const call = r.output.find((o) => o.type === 'function_call');
  assert.ok(call, JSON.stringify(r.output));
  assert.equal(call.name, 'get_weather');
  assert.ok(conforms(JSON.parse(call.arguments), WEATHER), call.arguments);
});

test('Anthropic: tool_choice tool / any give a tool_use block', async () => {
  const an = L.anthropic();
  const tools = [
    { name: 'get_weather', description: L.weatherDesc, input_schema: WEATHER },
    { name: 'get_time', description: 'Current time', input_schema: CLOCK },
  ];
  const base = { model: await L.model(), max_tokens: 80, temperature: 0, messages: [{ role: 'user', content: ASK_TOOL }], tools };
  const r = await an.messages.create({ ...base, tool_choice: { type: 'tool', name: 'get_weather' } });
  assert.equal(r.stop_reason, 'tool_use', JSON.stringify(r.content));
  const use = r.content.find((b) => b.type === 'tool_use');
  assert.equal(use.name, 'get_weather');
  assert.ok(conforms(use.input, WEATHER), JSON.stringify(use.input));
  const r2 = await an.messages.create({ ...base, tool_choice: { type: 'any' } });
  assert.equal(r2.stop_reason, 'tool_use', JSON.stringify(r2.content));
  const use2 = r2.content.find((b) => b.type === 'tool_use');
  assert.ok(conforms(use2.input, use2.name === 'get_weather' ? WEATHER : CLOCK), JSON.stringify(use2));
});

test('a forced tool call naming no offered tool is a 400 on each surface', async () => {
  const model = await L.model();
  const msg = [{ role: 'user', content: 'hi' }];
  let r = await L.post('/v1/chat/completions', { model, messages: msg, max_tokens: 4, tools: [weather], tool_choice: { type: 'function', function: { name: 'nope' } } });
  L.assertOpenAIError(r, 400);
  assert.match(r.json.error.message, /'nope' is not among the tools/);
  r = await L.post('/v1/chat/completions', { model, messages: msg, max_tokens: 4, tool_choice: 'required' });
  L.assertOpenAIError(r, 400);
  r = await L.post('/v1/chat/completions', { model, messages: msg, max_tokens: 4, tools: [weather], tool_choice: 'sometimes' });
  L.assertOpenAIError(r, 400);
  r = await L.post('/v1/responses', { model, input: 'hi', max_output_tokens: 4, tools: [{ type: 'function', name: 'get_weather', parameters: L.weatherParams }], tool_choice: { type: 'function', name: 'nope' } });
  L.assertOpenAIError(r, 400);
  r = await L.post('/v1/responses', { model, input: 'hi', max_output_tokens: 4, tools: [{ type: 'function', name: 'get_weather', parameters: L.weatherParams }], tool_choice: { type: 'function' } });
  L.assertOpenAIError(r, 400);
  r = await L.post('/v1/chat/completions', { model, messages: msg, max_tokens: 4, tools: [weather], tool_choice: { type: 'function', function: {} } });
  L.assertOpenAIError(r, 400);
  r = await L.post('/v1/messages', { model, max_tokens: 4, messages: msg, tools: [{ name: 'get_weather', input_schema: L.weatherParams }], tool_choice: { type: 'tool', name: 'nope' } },
    { headers: { 'anthropic-version': '2023-06-01' } });
  L.assertAnthropicError(r, 400, 'invalid_request_error');
  await L.health();
});

test('strict tools under tool_choice auto: a call the model opens follows the schema', async () => {
  // tinycoder never opens <tool_call> on its own: a logit_bias on that token makes it (then again after each call)
  const [tc] = await L.tokenize('<tool_call>');
  const strictFn = { type: 'function', function: { name: 'get_weather', strict: true, parameters: WEATHER } };
  const base = { model: await L.model(), messages: [{ role: 'user', content: ASK_TOOL }], max_tokens: 60, temperature: 0, logit_bias: { [tc]: 100 } };
  const r = await client.chat.completions.create({ ...base, tools: [strictFn, clock] });
  const calls = r.choices[0].message.tool_calls ?? [];
  assert.ok(calls.length >= 1, JSON.stringify(r.choices[0].message));
  for (const c of calls) assert.ok(conforms(JSON.parse(c.function.arguments), c.function.name === 'get_weather' ? WEATHER : { type: 'object' }), JSON.stringify(c));
  // the same request without strict: nothing constrains the calls, and tinycoder writes none that parse
  const loose = await client.chat.completions.create({ ...base, tools: [{ ...strictFn, function: { ...strictFn.function, strict: false } }, clock] });
  assert.equal(loose.choices[0].message.tool_calls, undefined, JSON.stringify(loose.choices[0].message));
});

test('strict tools are read in each surface\'s tool shape: an unenforceable strict schema is a 400', async () => {
  const model = await L.model();
  const NOT = { type: 'object', properties: { city: { not: { type: 'null' } } } };
  const msg = [{ role: 'user', content: 'hi' }];
  let r = await L.post('/v1/chat/completions', { model, messages: msg, max_tokens: 4, tools: [{ type: 'function', function: { name: 'f', strict: true, parameters: NOT } }] });
  L.assertOpenAIError(r, 400);
  r = await L.post('/v1/responses', { model, input: 'hi', max_output_tokens: 4, tools: [{ type: 'function', name: 'f', strict: true, parameters: NOT }] });
  L.assertOpenAIError(r, 400);
  r = await L.post('/v1/messages', { model, max_tokens: 4, messages: msg, tools: [{ name: 'f', input_schema: NOT, strict: true }] },
    { headers: { 'anthropic-version': '2023-06-01' } });
  L.assertAnthropicError(r, 400, 'invalid_request_error');
  // not strict: the same schemas are only shown to the model
  r = await L.post('/v1/chat/completions', { model, messages: msg, max_tokens: 4, tools: [{ type: 'function', function: { name: 'f', parameters: NOT } }] });
  assert.equal(r.status, 200, r.text);
  r = await L.post('/v1/messages', { model, max_tokens: 4, messages: msg, tools: [{ name: 'f', input_schema: NOT }] },
    { headers: { 'anthropic-version': '2023-06-01' } });
  assert.equal(r.status, 200, r.text);
});
