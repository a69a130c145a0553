// ops.test.mjs — the operational endpoints: /health, /tokenize + /detokenize
// round trips, /metrics (Prometheus text: requests by surface and status,
// token counters, latency histograms, queue depth), GET / and HEAD, CORS,
// unknown routes, and cancellation: a client that disconnects mid-stream
// stops its generation.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from './lib.mjs';

test('GET /health', async () => {
  const h = await L.health();
  assert.equal(typeof h.active, 'number');
  assert.equal(typeof h.queued, 'number');
});

test('tokenize / detokenize round trip', async () => {
  const texts = [
    'def add(a, b):\n    return a + b\n',
    'héllo wörld — 日本語 🙂',
    '    indented\t\ttabs\n\n\nblank lines',
    '<|im_start|>user\nhi<|im_end|>\n',
    '',
  ];
  for (const t of texts) {
    const ids = await L.tokenize(t);
    assert.ok(Array.isArray(ids));
    assert.ok(ids.every((x) => Number.isInteger(x) && x >= 0));
    assert.equal(await L.detokenize(ids), t);
  }
  // special tokens are single ids
  const ids = await L.tokenize('<|im_start|>');
  assert.equal(ids.length, 1);
  // add_special: tinycoder adds no BOS (add_bos_token false), so both agree here
  assert.deepEqual(await L.tokenize('x = 1', true), await L.tokenize('x = 1', false));
});

test('tokenize / detokenize: bad input is 400 with an OpenAI error body', async () => {
  L.assertOpenAIError(await L.post('/tokenize', { add_special: true }), 400);
  L.assertOpenAIError(await L.post('/tokenize', { content: 42 }), 400);
  L.assertOpenAIError(await L.post('/tokenize', '{"content": '), 400);
  L.assertOpenAIError(await L.post('/detokenize', { tokens: 'abc' }), 400);
  L.assertOpenAIError(await L.post('/detokenize', { tokens: [1, -5] }), 400);
  L.assertOpenAIError(await L.post('/detokenize', { tokens: [1e9] }), 400);
  await L.health();
});

const reEscape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
function metricValue(text, name, labels = '') {
  const re = new RegExp('^' + reEscape(name) + (labels ? reEscape('{' + labels + '}') : '') + ' (\\S+)$', 'm');
  const m = text.match(re);
  return m ? Number(m[1]) : undefined;
}

test('GET /metrics: Prometheus text with request counters and histograms', async () => {
  const before = (await L.get('/metrics')).text;
  const reqBefore = metricValue(before, 'kestrel_requests_total', 'surface="chat_completions",status="2xx"') ?? 0;
  const genBefore = metricValue(before, 'kestrel_generated_tokens_total');
  const client = L.openai();
  await client.chat.completions.create({
    model: await L.model(),
    messages: [{ role: 'user', content: 'Write a Python function `inc`: Add one.' }],
    max_tokens: 8,
    temperature: 0,
  });
  const r = await L.get('/metrics');
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type') ?? '', /^text\/plain/);
  const m = r.text;
  assert.match(m, /^# TYPE kestrel_requests_total counter$/m);
  assert.equal(metricValue(m, 'kestrel_requests_total', 'surface="chat_completions",status="2xx"'), reqBefore + 1);
  assert.equal(metricValue(m, 'kestrel_generated_tokens_total'), genBefore + 8);
  assert.ok(metricValue(m, 'kestrel_prompt_tokens_total') > 0);
  assert.equal(typeof metricValue(m, 'kestrel_queue_depth'), 'number');
  assert.equal(typeof metricValue(m, 'kestrel_active_sequences'), 'number');
  for (const h of ['kestrel_time_to_first_token_seconds', 'kestrel_time_per_output_token_seconds']) {
    assert.match(m, new RegExp(`^# TYPE ${h} histogram$`, 'm'));
    const inf = metricValue(m, h + '_bucket', 'le="+Inf"');
    assert.ok(inf >= 1, `${h} has observations`);
    assert.equal(metricValue(m, h + '_count'), inf);
    assert.equal(typeof metricValue(m, h + '_sum'), 'number');
    // buckets are cumulative
    const buckets = [...m.matchAll(new RegExp(`^${h}_bucket\\{le="([^"]+)"\\} (\\d+)$`, 'mg'))].map((x) => Number(x[2]));
    assert.ok(buckets.length >= 2);
    for (let i = 1; i < buckets.length; i++) assert.ok(buckets[i] >= buckets[i - 1]);
  }
  // verify steps by the source of their drafts add up to all verify steps; passes by model proposer
  const bySource = [...m.matchAll(/^kestrel_spec_source_verify_steps_total\{source="(\w+)"\} (\d+)$/gm)];
  assert.deepEqual(bySource.map((x) => x[1]), ['lookup', 'drafter', 'mtp', 'dflash']);
  assert.equal(bySource.reduce((sum, x) => sum + Number(x[2]), 0), metricValue(m, 'kestrel_spec_verify_steps_total'));
  for (const p of ['drafter', 'mtp', 'dflash'])
    assert.ok(metricValue(m, 'kestrel_spec_proposer_passes_total', `proposer="${p}"`) >= 0, `passes of ${p}`);
  // device memory by kind, where the backend has a device (a GPU server): the three kinds, the weights loaded
  const mem = Object.fromEntries([...m.matchAll(/^kestrel_device_memory_bytes\{kind="(\w+)"\} (\d+)$/gm)].map((x) => [x[1], Number(x[2])]));
  if (Object.keys(mem).length) {
    assert.deepEqual(Object.keys(mem).sort(), ['buffers', 'weights', 'workspace']);
    assert.ok(mem.weights > 0 && mem.buffers > 0, 'weights and buffers are on the device');
  }
  // an error counts under its status class
  await L.post('/v1/chat/completions', '{bad json');
  const m2 = (await L.get('/metrics')).text;
  assert.ok((metricValue(m2, 'kestrel_requests_total', 'surface="chat_completions",status="4xx"') ?? 0) >= 1);
});

test('CORS: preflight and headers on answers', async () => {
  const r = await fetch(L.URL_MAIN + '/v1/chat/completions', {
    method: 'OPTIONS',
    headers: { Origin: 'http://example.com', 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'content-type, authorization' },
  });
  assert.ok(r.status === 204 || r.status === 200, `preflight status ${r.status}`);
  assert.ok(r.headers.get('access-control-allow-origin'));
  assert.match(r.headers.get('access-control-allow-methods') ?? '', /POST/);
  const g = await L.get('/v1/models');
  assert.ok(g.headers.get('access-control-allow-origin'));
});

test('GET / answers in plain text; HEAD takes the GET routes, headers only', async () => {
  const r = await fetch(L.URL_MAIN + '/');
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/plain/);
  assert.equal(await r.text(), 'kestrel is running');
  for (const path of ['/', '/api/version', '/v1/models', '/health']) {
    const h = await fetch(L.URL_MAIN + path, { method: 'HEAD' });
    assert.equal(h.status, 200, path);
    assert.equal(await h.text(), '', path);
  }
  assert.equal((await fetch(L.URL_MAIN + '/v1/chat/completions', { method: 'HEAD' })).status, 405);
});

test('unknown route -> 404, wrong method -> 405, each in its surface format', async () => {
  L.assertOpenAIError(await L.get('/v1/nope'), 404);
  L.assertOpenAIError(await L.get('/v1/chat/completions'), 405);
  L.assertAnthropicError(await L.get('/v1/messages'), 405);
  L.assertOllamaError(await L.get('/api/chat'), 405);
  L.assertOllamaError(await L.post('/api/nope', {}), 404);
  await L.health();
});

test('keep-alive: many requests on one connection', async () => {
  // fetch (undici) reuses the connection; the server must keep serving on it
  for (let i = 0; i < 20; i++) await L.health();
  const models = await Promise.all(Array.from({ length: 8 }, () => L.get('/v1/models')));
  assert.ok(models.every((r) => r.status === 200));
});

// -- cancellation --

async function assertCancelled(label, startStream) {
  await L.waitIdle();
  const genBefore = metricValue((await L.get('/metrics')).text, 'kestrel_generated_tokens_total');
  const ac = new AbortController();
  const chunks = await startStream(ac);
  assert.ok(chunks >= 2, `${label}: got ${chunks} chunks before aborting`);
  const t0 = Date.now();
  await L.waitIdle(10_000); // the engine dropped the sequence
  const genAfter = metricValue((await L.get('/metrics')).text, 'kestrel_generated_tokens_total');
  assert.ok(genAfter - genBefore < 1500, `${label}: generation went on after the disconnect (${genAfter - genBefore} tokens)`);
  return Date.now() - t0;
}

test('client disconnect mid-stream cancels the generation (chat completions, openai client)', async () => {
  const client = L.openai();
  await assertCancelled('chat', async (ac) => {
    const stream = await client.chat.completions.create(
      {
        model: await L.model(),
        messages: [{ role: 'user', content: 'Write a long Python module with many functions.' }],
        max_tokens: 3000,
        temperature: 0, // greedy output for this prompt runs to max_tokens
        stream: true,
      },
      { signal: ac.signal },
    );
    let n = 0;
    try {
      for await (const _ of stream) {
        if (++n === 5) ac.abort();
      }
    } catch (e) {
      if (!(e.name === 'AbortError' || /abort/i.test(e.message))) throw e;
    }
    return n;
  });
  await L.health();
});

test('client disconnect mid-stream cancels the generation (raw fetch, every streaming surface)', async () => {
  const model = await L.model();
  const long = 'Write a long Python module with many functions.'; // greedy: runs to the token limit
  const cases = [
    ['/v1/completions', { model, prompt: 'x = [\n    1,\n    2,\n    3,\n    4,\n', max_tokens: 3000, temperature: 0, stream: true }],
    ['/v1/responses', { model, input: long, max_output_tokens: 3000, temperature: 0, stream: true }],
    ['/v1/messages', { model, messages: [{ role: 'user', content: long }], max_tokens: 3000, temperature: 0, stream: true }],
    ['/api/chat', { model, messages: [{ role: 'user', content: long }], options: { num_predict: 3000, temperature: 0 }, stream: true }],
    ['/api/generate', { model, prompt: long, options: { num_predict: 3000, temperature: 0 }, stream: true }],
  ];
  const failures = [];
  for (const [path, body] of cases) {
    try {
      await assertCancelled(path, async (ac) => {
        const r = await fetch(L.URL_MAIN + path, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
          body: JSON.stringify(body),
          signal: ac.signal,
        });
        assert.equal(r.status, 200, `${path}: HTTP ${r.status}`);
        const reader = r.body.getReader();
        let n = 0;
        while (n < 5) {
          const { done } = await reader.read();
          if (done) break;
          n++;
        }
        ac.abort();
        await reader.cancel().catch(() => {});
        return n;
      });
    } catch (e) {
      failures.push(`${path}: ${e.message.split('\n')[0]}`);
    }
  }
  await L.health();
  assert.deepEqual(failures, []);
});
