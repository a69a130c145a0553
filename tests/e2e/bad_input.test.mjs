// bad_input.test.mjs — every bad-input case on every surface: malformed JSON,
// wrong types, API fields of the wrong type, empty messages, a prompt longer
// than the context (400, never a silent truncation), unknown model (404),
// oversized body (413), wrong or missing API key (401 on the --api-key
// server; Bearer and x-api-key both accepted with the right key). Each answer
// carries the original API's status code and the surface's own error body,
// and the server still serves afterwards. OpenAI's bodies carry OpenAI's
// error codes where clients test them: context_length_exceeded (to shorten
// a conversation and retry), model_not_found, invalid_api_key.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from './lib.mjs';

const ANTHROPIC_HEADERS = { 'anthropic-version': '2023-06-01' };
const checkers = {
  openai: (r, status, _type, code) => L.assertOpenAIError(r, status, { code }),
  anthropic: (r, status, type) => L.assertAnthropicError(r, status, type),
  ollama: (r, status) => L.assertOllamaError(r, status),
};
const anthropicType = { 400: 'invalid_request_error', 401: 'authentication_error', 404: 'not_found_error', 413: 'request_too_large' };

// Runs one case as a subtest: POST, check status + error format, health.
function bad(t, surface, name, path, body, status, { url, headers, code } = {}) {
  return t.test(`${path}: ${name} -> ${status}`, async () => {
    const h = { ...(surface === 'anthropic' ? ANTHROPIC_HEADERS : {}), ...headers };
    const r = await L.post(path, body, { url, headers: h });
    checkers[surface](r, status, surface === 'anthropic' ? anthropicType[status] : undefined, code);
    await L.health(url);
  });
}

let MODEL, LONG;
test.before(async () => {
  MODEL = await L.model();
  LONG = await L.overlongText();
});

const msg = (content) => [{ role: 'user', content }];

test('OpenAI chat completions: bad input', async (t) => {
  const P = '/v1/chat/completions';
  const ok = { model: MODEL, messages: msg('hi'), max_tokens: 2 };
  await bad(t, 'openai', 'malformed JSON', P, '{"model": "x", "messages": [', 400);
  await bad(t, 'openai', 'empty body', P, '', 400);
  await bad(t, 'openai', 'body is not an object', P, '[1, 2]', 400);
  await bad(t, 'openai', 'messages missing', P, { model: MODEL }, 400);
  await bad(t, 'openai', 'messages is a string', P, { ...ok, messages: 'hi' }, 400);
  await bad(t, 'openai', 'empty messages', P, { ...ok, messages: [] }, 400);
  await bad(t, 'openai', 'content is a number', P, { ...ok, messages: [{ role: 'user', content: 42 }] }, 400);
  await bad(t, 'openai', 'unknown role', P, { ...ok, messages: [{ role: 'wizard', content: 'hi' }] }, 400);
  await bad(t, 'openai', 'message is not an object', P, { ...ok, messages: ['hi'] }, 400);
  await bad(t, 'openai', 'temperature is a string', P, { ...ok, temperature: 'hot' }, 400);
  await bad(t, 'openai', 'temperature out of range', P, { ...ok, temperature: -1 }, 400);
  await bad(t, 'openai', 'max_tokens is a string', P, { ...ok, max_tokens: '10' }, 400);
  await bad(t, 'openai', 'max_tokens is negative', P, { ...ok, max_tokens: -5 }, 400);
  await bad(t, 'openai', 'stream is a string', P, { ...ok, stream: 'yes' }, 400);
  await bad(t, 'openai', 'stop is a number', P, { ...ok, stop: 5 }, 400);
  await bad(t, 'openai', 'tools is a string', P, { ...ok, tools: 'get_weather' }, 400);
  await bad(t, 'openai', 'tool without a function name', P, { ...ok, tools: [{ type: 'function', function: {} }] }, 400);
  await bad(t, 'openai', 'model is a number', P, { ...ok, model: 7 }, 400);
  await bad(t, 'openai', 'field the server does not use, wrong type (user: 123)', P, { ...ok, user: 123 }, 400);
  await bad(t, 'openai', 'stream_options is a string', P, { ...ok, stream: true, stream_options: 'usage' }, 400);
  await bad(t, 'openai', 'response_format of an unknown type', P, { ...ok, response_format: { type: 'yaml' } }, 400);
  await bad(t, 'openai', 'prediction is a string', P, { ...ok, prediction: 'def f():' }, 400);
  await bad(t, 'openai', 'prediction of an unknown type', P, { ...ok, prediction: { type: 'tokens', content: 'x' } }, 400);
  await bad(t, 'openai', 'prediction with a non-text part', P, { ...ok, prediction: { type: 'content', content: [{ type: 'image_url', image_url: { url: 'x' } }] } }, 400);
  await bad(t, 'openai', 'prediction content is a number', P, { ...ok, prediction: { type: 'content', content: 5 } }, 400);
  await bad(t, 'openai', 'prompt longer than the context', P, { ...ok, messages: msg(LONG) }, 400, { code: 'context_length_exceeded' });
  await bad(t, 'openai', 'unknown model', P, { ...ok, model: 'no-such-model' }, 404, { code: 'model_not_found' });
});

test('OpenAI completions: bad input', async (t) => {
  const P = '/v1/completions';
  const ok = { model: MODEL, prompt: 'def f():\n', max_tokens: 2 };
  await bad(t, 'openai', 'malformed JSON', P, '{"prompt": "x",', 400);
  await bad(t, 'openai', 'prompt missing', P, { model: MODEL }, 400);
  await bad(t, 'openai', 'prompt is a number', P, { ...ok, prompt: 42 }, 400);
  await bad(t, 'openai', 'empty prompt', P, { ...ok, prompt: '' }, 400);
  await bad(t, 'openai', 'prompt token id out of range', P, { ...ok, prompt: [1, 2, 99999999] }, 400);
  await bad(t, 'openai', 'prompt token id past 32 bits (never wrapped to a valid one)', P, { ...ok, prompt: [4294967301] }, 400);
  await bad(t, 'openai', 'negative prompt token id past 32 bits', P, { ...ok, prompt: [-4294967295] }, 400);
  await bad(t, 'openai', 'max_tokens is a string', P, { ...ok, max_tokens: 'many' }, 400);
  await bad(t, 'openai', 'top_p is a string', P, { ...ok, top_p: 'x' }, 400);
  await bad(t, 'openai', 'field the server does not use, wrong type (user: 123)', P, { ...ok, user: 123 }, 400);
  await bad(t, 'openai', 'prompt longer than the context', P, { ...ok, prompt: LONG }, 400, { code: 'context_length_exceeded' });
  await bad(t, 'openai', 'unknown model', P, { ...ok, model: 'no-such-model' }, 404, { code: 'model_not_found' });
});

test('OpenAI responses: bad input', async (t) => {
  const P = '/v1/responses';
  const ok = { model: MODEL, input: 'hi', max_output_tokens: 2 };
  await bad(t, 'openai', 'malformed JSON', P, '{"input": ', 400);
  await bad(t, 'openai', 'input missing', P, { model: MODEL }, 400);
  await bad(t, 'openai', 'input is a number', P, { ...ok, input: 42 }, 400);
  await bad(t, 'openai', 'empty input items', P, { ...ok, input: [] }, 400);
  await bad(t, 'openai', 'input item of an unknown type', P, { ...ok, input: [{ type: 'bogus' }] }, 400);
  await bad(t, 'openai', 'instructions is a number', P, { ...ok, instructions: 5 }, 400);
  await bad(t, 'openai', 'max_output_tokens is a string', P, { ...ok, max_output_tokens: 'ten' }, 400);
  await bad(t, 'openai', 'temperature is a string', P, { ...ok, temperature: 'hot' }, 400);
  await bad(t, 'openai', 'tools is a string', P, { ...ok, tools: 'x' }, 400);
  await bad(t, 'openai', 'include with a number', P, { ...ok, include: [5] }, 400);
  await bad(t, 'openai', 'top_logprobs above 20', P, { ...ok, include: ['message.output_text.logprobs'], top_logprobs: 21 }, 400);
  await bad(t, 'openai', 'field the server does not use, wrong type (metadata: "x")', P, { ...ok, metadata: 'x' }, 400);
  await bad(t, 'openai', 'prompt longer than the context', P, { ...ok, input: LONG }, 400, { code: 'context_length_exceeded' });
  await bad(t, 'openai', 'unknown model', P, { ...ok, model: 'no-such-model' }, 404, { code: 'model_not_found' });
});

test('Anthropic messages: bad input', async (t) => {
  const P = '/v1/messages';
  const ok = { model: MODEL, messages: msg('hi'), max_tokens: 2 };
  await bad(t, 'anthropic', 'malformed JSON', P, '{"messages": [', 400);
  await bad(t, 'anthropic', 'max_tokens missing', P, { model: MODEL, messages: msg('hi') }, 400);
  await bad(t, 'anthropic', 'max_tokens is a string', P, { ...ok, max_tokens: '2' }, 400);
  await bad(t, 'anthropic', 'messages missing', P, { model: MODEL, max_tokens: 2 }, 400);
  await bad(t, 'anthropic', 'messages is a string', P, { ...ok, messages: 'hi' }, 400);
  await bad(t, 'anthropic', 'empty messages', P, { ...ok, messages: [] }, 400);
  await bad(t, 'anthropic', 'system role inside messages', P, { ...ok, messages: [{ role: 'system', content: 'x' }, ...msg('hi')] }, 400);
  await bad(t, 'anthropic', 'content is a number', P, { ...ok, messages: [{ role: 'user', content: 42 }] }, 400);
  await bad(t, 'anthropic', 'content block of an unknown type', P, { ...ok, messages: [{ role: 'user', content: [{ type: 'bogus' }] }] }, 400);
  await bad(t, 'anthropic', 'temperature is a string', P, { ...ok, temperature: 'hot' }, 400);
  await bad(t, 'anthropic', 'stop_sequences is a string', P, { ...ok, stop_sequences: 'x' }, 400);
  await bad(t, 'anthropic', 'tools is a string', P, { ...ok, tools: 'x' }, 400);
  await bad(t, 'anthropic', 'field the server does not use, wrong type (metadata: "x")', P, { ...ok, metadata: 'x' }, 400);
  await bad(t, 'anthropic', 'prompt longer than the context', P, { ...ok, messages: msg(LONG) }, 400);
  await bad(t, 'anthropic', 'unknown model', P, { ...ok, model: 'no-such-model' }, 404);
  const C = '/v1/messages/count_tokens';
  await bad(t, 'anthropic', 'malformed JSON', C, '{', 400);
  await bad(t, 'anthropic', 'messages is a string', C, { model: MODEL, messages: 'hi' }, 400);
  await bad(t, 'anthropic', 'unknown model', C, { model: 'no-such-model', messages: msg('hi') }, 404);
});

test('Ollama chat / generate: bad input', async (t) => {
  const P = '/api/chat';
  const ok = { model: MODEL, messages: msg('hi'), stream: false, options: { num_predict: 2 } };
  await bad(t, 'ollama', 'malformed JSON', P, '{"model": ', 400);
  await bad(t, 'ollama', 'model missing', P, { messages: msg('hi'), stream: false }, 400);
  await bad(t, 'ollama', 'messages is a string', P, { ...ok, messages: 'hi' }, 400);
  await bad(t, 'ollama', 'content is a number', P, { ...ok, messages: [{ role: 'user', content: 42 }] }, 400);
  await bad(t, 'ollama', 'unknown role', P, { ...ok, messages: [{ role: 'wizard', content: 'hi' }] }, 400);
  await bad(t, 'ollama', 'options is a string', P, { ...ok, options: 'fast' }, 400);
  await bad(t, 'ollama', 'options.temperature is a string', P, { ...ok, options: { temperature: 'hot' } }, 400);
  await bad(t, 'ollama', 'options.num_predict is a string', P, { ...ok, options: { num_predict: 'x' } }, 400);
  await bad(t, 'ollama', 'options.repeat_last_n is a string', P, { ...ok, options: { repeat_last_n: 'all' } }, 400);
  await bad(t, 'ollama', 'options.repeat_last_n below -1', P, { ...ok, options: { repeat_last_n: -2 } }, 400);
  await bad(t, 'ollama', 'stream is a string', P, { ...ok, stream: 'no' }, 400);
  await bad(t, 'ollama', 'field the server does not use, wrong type (keep_alive: [1])', P, { ...ok, keep_alive: [1] }, 400);
  await bad(t, 'ollama', 'format is a number', P, { ...ok, format: 42 }, 400);
  await bad(t, 'ollama', 'prompt longer than the context', P, { ...ok, messages: msg(LONG) }, 400);
  await bad(t, 'ollama', 'unknown model', P, { ...ok, model: 'no-such-model' }, 404);
  // Ollama answers an empty chat by loading the model: done, done_reason "load"
  await t.test('/api/chat: empty messages -> 400, or 200 done_reason load (as Ollama)', async () => {
    const r = await L.post(P, { ...ok, messages: [] });
    if (r.status === 200) {
      assert.equal(r.json.done, true);
      assert.equal(r.json.done_reason, 'load');
    } else L.assertOllamaError(r, 400);
    await L.health();
  });
  const G = '/api/generate';
  const okg = { model: MODEL, prompt: 'hi', stream: false, options: { num_predict: 2 } };
  await bad(t, 'ollama', 'malformed JSON', G, '{"prompt": "hi"', 400);
  await bad(t, 'ollama', 'prompt is a number', G, { ...okg, prompt: 42 }, 400);
  await bad(t, 'ollama', 'options.stop is a number', G, { ...okg, options: { stop: 7 } }, 400);
  await bad(t, 'ollama', 'prompt longer than the context', G, { ...okg, prompt: LONG }, 400);
  await bad(t, 'ollama', 'raw prompt longer than the context', G, { ...okg, prompt: LONG, raw: true }, 400);
  await bad(t, 'ollama', 'unknown model', G, { ...okg, model: 'no-such-model' }, 404);
  await bad(t, 'ollama', 'malformed JSON', '/api/show', '{', 400);
});

test('oversized body (17 MiB > the 16 MiB default limit) -> 413 on every surface', async (t) => {
  const big = JSON.stringify({ model: MODEL, messages: msg('a'.repeat(17 << 20)), prompt: 'x', input: 'x', max_tokens: 2 });
  assert.ok(big.length > 17 << 20);
  await bad(t, 'openai', 'oversized body', '/v1/chat/completions', big, 413);
  await bad(t, 'openai', 'oversized body', '/v1/completions', big, 413);
  await bad(t, 'openai', 'oversized body', '/v1/responses', big, 413);
  await bad(t, 'anthropic', 'oversized body', '/v1/messages', big, 413);
  await bad(t, 'ollama', 'oversized body', '/api/chat', big, 413);
  await bad(t, 'openai', 'oversized body', '/tokenize', big, 413);
  // just under the limit is read (and then judged on its content)
  const under = JSON.stringify({ content: 'a'.repeat((16 << 20) - 64) });
  const r = await L.post('/detokenize', under);
  L.assertOpenAIError(r, 400); // no "tokens": a 400, not a 413
});

// -- API key: the second server runs with --api-key --

test('API key: wrong or missing key -> 401 in each surface format; right key accepted (Bearer and x-api-key)', async (t) => {
  const url = L.URL_AUTH;
  assert.ok(url, 'KESTREL_URL_AUTH is not set');
  const key = L.API_KEY;
  const cases = [
    ['openai', '/v1/chat/completions', { model: MODEL, messages: msg('hi'), max_tokens: 2 }],
    ['openai', '/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 2 }],
    ['openai', '/v1/responses', { model: MODEL, input: 'hi', max_output_tokens: 2 }],
    ['anthropic', '/v1/messages', { model: MODEL, messages: msg('hi'), max_tokens: 2 }],
    ['anthropic', '/v1/messages/count_tokens', { model: MODEL, messages: msg('hi') }],
    ['ollama', '/api/chat', { model: MODEL, messages: msg('hi'), stream: false, options: { num_predict: 2 } }],
    ['ollama', '/api/generate', { model: MODEL, prompt: 'hi', stream: false, options: { num_predict: 2 } }],
    ['openai', '/tokenize', { content: 'hi' }],
  ];
  for (const [surface, path, body] of cases) {
    const code = surface === 'openai' ? 'invalid_api_key' : undefined; // (OpenAI's error code; the others have none)
    await bad(t, surface, 'no key', path, body, 401, { url, code });
    await bad(t, surface, 'wrong Bearer key', path, body, 401, { url, code, headers: { authorization: 'Bearer wrong' } });
    await bad(t, surface, 'wrong x-api-key', path, body, 401, { url, code, headers: { 'x-api-key': 'wrong' } });
    await bad(t, surface, 'key in the wrong scheme', path, body, 401, { url, code, headers: { authorization: 'Basic ' + key } });
    for (const headers of [{ authorization: 'Bearer ' + key }, { 'x-api-key': key }]) {
      await t.test(`${path}: right key (${Object.keys(headers)[0]}) -> 200`, async () => {
        const r = await L.post(path, body, { url, headers: { ...ANTHROPIC_HEADERS, ...headers } });
        assert.equal(r.status, 200, r.text);
      });
    }
  }
  for (const path of ['/v1/models', '/api/tags', '/api/version', '/metrics']) {
    await t.test(`GET ${path}: no key -> 401`, async () => {
      const r = await L.get(path, { url });
      assert.equal(r.status, 401);
    });
  }
  await t.test('GET /v1/responses/{id}: no key -> 401', async () => {
    L.assertOpenAIError(await L.get('/v1/responses/resp_x', { url }), 401);
  });
});

// Messages that quote the request's own bytes: a path with invalid UTF-8
// (libmicrohttpd decodes %ff to a lone byte) and a model name whose quote a
// bounded message cuts inside a character still get a JSON error body.
test('errors quoting invalid or cut UTF-8 keep their JSON body', async (t) => {
  for (const path of ['/%ff', '/v1/models/%c3', '/v1/responses/%ff']) {
    await t.test(`GET ${path} -> 404`, async () => {
      L.assertOpenAIError(await L.get(path), 404);
      await L.health();
    });
  }
  await t.test('POST /api/show, a long model name cut inside a character -> 404', async () => {
    L.assertOllamaError(await L.post('/api/show', { model: 'a\u00e9'.repeat(300) }), 404);
  });
  const name = 'a' + '\u00e9'.repeat(600);
  await bad(t, 'openai', 'a long model name cut inside a character', '/v1/chat/completions', { model: name, messages: msg('hi'), max_tokens: 2 }, 404);
  await bad(t, 'anthropic', 'a long model name cut inside a character', '/v1/messages', { model: name, messages: msg('hi'), max_tokens: 2 }, 404);
  await bad(t, 'ollama', 'a long model name cut inside a character', '/api/chat', { model: name, messages: msg('hi') }, 404);
  await bad(t, 'openai', 'a logit_bias key cut inside a character', '/v1/chat/completions',
    { model: MODEL, messages: msg('hi'), max_tokens: 2, logit_bias: { ['a'.repeat(63) + '\u00e9']: 1 } }, 400);
});

test('API key: the official clients authenticate with the key and fail without it', async () => {
  const url = L.URL_AUTH;
  const key = L.API_KEY;
  const good = await L.openai(url, key).chat.completions.create({ model: MODEL, messages: msg('hi'), max_tokens: 2 });
  assert.ok(good.choices.length === 1);
  await assert.rejects(L.openai(url, 'wrong').chat.completions.create({ model: MODEL, messages: msg('hi'), max_tokens: 2 }), (e) => e.status === 401);
  const ga = await L.anthropic(url, key).messages.create({ model: MODEL, messages: msg('hi'), max_tokens: 2 });
  assert.equal(ga.type, 'message');
  await assert.rejects(
    L.anthropic(url, 'wrong').messages.create({ model: MODEL, messages: msg('hi'), max_tokens: 2 }),
    (e) => e.status === 401 && e.error?.error?.type === 'authentication_error',
  );
  const go = await L.ollama(url, { Authorization: 'Bearer ' + key }).chat({ model: MODEL, messages: msg('hi'), options: { num_predict: 2 } });
  assert.equal(go.done, true);
  await assert.rejects(L.ollama(url).chat({ model: MODEL, messages: msg('hi'), options: { num_predict: 2 } }), (e) => e.status_code === 401);
  await L.health(url);
});
