// ollama.test.mjs — the Ollama API through the official `ollama` client:
// /api/chat and /api/generate (NDJSON streaming, options temperature /
// num_predict / stop / repeat_penalty with repeat_last_n, done_reason, eval counts), /api/tags, /api/ps, /api/show,
// /api/version, tools (message.tool_calls, tool role results), a chat past the context truncated.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from './lib.mjs';

const client = L.ollama();
const SYS = 'You are a helpful coding assistant.';
const msgs = (u) => [
  { role: 'system', content: SYS },
  { role: 'user', content: u },
];

async function chat(params) {
  const { options, ...rest } = params;
  return client.chat({ model: await L.model(), ...rest, options: { temperature: 0, ...options } });
}
async function generate(params) {
  const { options, ...rest } = params;
  return client.generate({ model: await L.model(), ...rest, options: { temperature: 0, ...options } });
}
async function chatStream(params) {
  const it = await chat({ ...params, stream: true });
  let text = '';
  const parts = [];
  const toolCalls = [];
  for await (const p of it) {
    parts.push(p);
    text += p.message?.content ?? '';
    toolCalls.push(...(p.message?.tool_calls ?? []));
  }
  return { text, parts, last: parts[parts.length - 1], toolCalls };
}

test('ollama: GET /api/version', async () => {
  const v = await client.version();
  assert.equal(typeof v.version, 'string');
  assert.ok(v.version.length > 0);
});

test('ollama: GET /api/tags lists the model', async () => {
  const l = await client.list();
  assert.ok(Array.isArray(l.models));
  const name = await L.model();
  const m = l.models.find((x) => x.name === name || x.name === name + ':latest' || x.model === name || x.model === name + ':latest');
  assert.ok(m, JSON.stringify(l));
  assert.equal(typeof m.details, 'object');
});

test('ollama: GET /api/ps lists the loaded model', async () => {
  const l = await client.ps();
  assert.equal(l.models.length, 1);
  const m = l.models[0];
  const name = await L.model();
  assert.ok(m.name === name || m.name === name + ':latest', JSON.stringify(m));
  assert.equal(typeof m.details, 'object');
  assert.equal(typeof m.size_vram, 'number');
  assert.ok(m.size_vram >= 0);
  assert.ok(new Date(m.expires_at).getTime() > Date.now(), m.expires_at);
});

test('ollama: POST /api/show describes the model', async () => {
  const s = await client.show({ model: await L.model() });
  assert.equal(typeof s, 'object');
  assert.ok(s.details || s.model_info || s.template, JSON.stringify(s).slice(0, 300));
  if (s.template !== undefined) assert.equal(typeof s.template, 'string');
  const r = await L.post('/api/show', { model: 'no-such-model' });
  L.assertOllamaError(r, 404);
});

test('ollama chat: a chat past the context drops its oldest messages (system and last kept); truncate false -> 400', async () => {
  const { ctx, part, partTokens } = await L.contextPart(0.42); // each turn ~42% of the context
  const messages = [
    { role: 'system', content: SYS },
    { role: 'user', content: 'A: ' + part },
    { role: 'assistant', content: 'Noted.' },
    { role: 'user', content: 'B: ' + part },
    { role: 'assistant', content: 'Noted.' },
    { role: 'user', content: 'C: ' + part },
  ];
  const r = await chat({ messages, options: { num_predict: 4 } });
  assert.ok(r.message.content.length > 0);
  // A's message went, B's and C's stayed
  const n = r.prompt_eval_count;
  assert.ok(n > 2 * partTokens && n < 2.5 * partTokens && n + 4 <= ctx, `prompt_eval_count ${n}, a turn ${partTokens}, ctx ${ctx}`);
  // the system message was kept: the same chat without it is shorter
  const noSys = await chat({ messages: messages.slice(1), options: { num_predict: 4 } });
  assert.ok(noSys.prompt_eval_count < n, `without the system message ${noSys.prompt_eval_count} vs ${n}`);
  const bad = await L.post('/api/chat', { model: await L.model(), messages, stream: false, truncate: false, options: { num_predict: 4 } });
  L.assertOllamaError(bad, 400);
  await L.health();
});

test('ollama chat: non-streaming, done_reason length, eval counts', async () => {
  const r = await chat({ messages: msgs('Write a Python function `is_even`: Return True if n is even.'), options: { num_predict: 12 } });
  assert.equal(r.done, true);
  assert.equal(r.done_reason, 'length');
  assert.equal(r.message.role, 'assistant');
  assert.ok(r.message.content.length > 0);
  assert.equal(r.eval_count, 12);
  assert.ok(r.prompt_eval_count > 0);
  assert.equal(typeof r.created_at, 'string');
  assert.equal(typeof r.total_duration, 'number');
});

test('ollama chat: done_reason stop; prompt_eval_count == tokens of the rendered prompt; == chat completions', async () => {
  const u = 'Write a Python function `add`: Return the sum of a and b.';
  const r = await chat({ messages: msgs(u), options: { num_predict: 400 } });
  assert.equal(r.done_reason, 'stop');
  assert.ok(r.message.content.length > 0);
  assert.ok(!r.message.content.includes('<|im_end|>'));
  assert.equal(r.prompt_eval_count, (await L.tokenize(L.chatml(msgs(u)))).length);
  const c = await L.openai().chat.completions.create({ model: await L.model(), temperature: 0, max_tokens: 400, messages: msgs(u) });
  assert.equal(r.message.content, c.choices[0].message.content);
  assert.equal(r.eval_count, c.usage.completion_tokens);
});

test('ollama chat: NDJSON stream == non-streamed text', async () => {
  for (const [u, n] of [
    ['Write a Python function `add`: Return the sum of a and b.', 400],
    ['Write a Python function `parse_header`: Parse an HTTP header line into a (name, value) tuple.', 40],
  ]) {
    const params = { messages: msgs(u), options: { num_predict: n } };
    const full = await chat(params);
    const s = await chatStream(params);
    assert.ok(s.parts.length > 1, 'streamed in several parts');
    assert.equal(s.text, full.message.content);
    assert.equal(s.last.done, true);
    assert.equal(s.last.done_reason, full.done_reason);
    assert.equal(s.last.eval_count, full.eval_count);
    assert.ok(s.parts.slice(0, -1).every((p) => p.done === false));
  }
  // the wire format is NDJSON
  const raw = await L.post('/api/chat', { model: await L.model(), messages: msgs('Write a Python function `sq`: Square x.'), options: { temperature: 0, num_predict: 4 } });
  assert.equal(raw.status, 200);
  assert.match(raw.headers.get('content-type') ?? '', /ndjson|json/);
  const lines = raw.text.trim().split('\n');
  assert.ok(lines.length >= 2, 'stream is the default on /api/chat');
  for (const l of lines) JSON.parse(l);
});

test('ollama chat: stop option', async () => {
  const params = { messages: msgs('Write a Python function `word_count`: Count the words in a string.'), options: { num_predict: 64 } };
  const full = (await chat(params)).message.content;
  const stop = L.pickStop(full);
  const r = await chat({ ...params, options: { num_predict: 64, stop: [stop] } });
  assert.equal(r.message.content, L.cutAt(full, stop));
  assert.equal(r.done_reason, 'stop');
  const s = await chatStream({ ...params, options: { num_predict: 64, stop: [stop] } });
  assert.equal(s.text, L.cutAt(full, stop));
});

// repeat_penalty reads the last repeat_last_n tokens (64 unless given, as
// Ollama; -1 the whole context; 0 turns the penalty off)
test('ollama chat: repeat_penalty over repeat_last_n tokens', async () => {
  const m = msgs('Write a Python function `add`: Return the sum of a and b.');
  const text = async (options) => (await chat({ messages: m, options: { num_predict: 60, ...options } })).message.content;
  const base = await text({});
  const whole = await text({ repeat_penalty: 1.5, repeat_last_n: -1 });
  assert.notEqual(whole, base, 'the penalty over the whole context moves the text');
  assert.equal(await text({ repeat_penalty: 1.5, repeat_last_n: 0 }), base, 'repeat_last_n 0: no penalty');
  const last4 = await text({ repeat_penalty: 1.5, repeat_last_n: 4 });
  assert.notEqual(last4, whole, 'a window of 4 tokens penalises fewer of them');
  assert.equal(await text({ repeat_penalty: 1.5 }), await text({ repeat_penalty: 1.5, repeat_last_n: 64 }), 'default 64');
});

test('ollama generate: non-streaming and streaming agree; system + prompt use the template', async () => {
  const u = 'Write a Python function `parse_header`: Parse an HTTP header line into a (name, value) tuple.';
  const r = await generate({ prompt: u, system: SYS, options: { num_predict: 32 } });
  assert.equal(r.done, true);
  assert.equal(r.done_reason, 'length');
  assert.ok(r.response.length > 0);
  assert.equal(r.eval_count, 32);
  const c = await chat({ messages: msgs(u), options: { num_predict: 32 } });
  assert.equal(r.response, c.message.content);
  const it = await generate({ prompt: u, system: SYS, options: { num_predict: 32 }, stream: true });
  let text = '';
  let last;
  for await (const p of it) {
    text += p.response;
    last = p;
  }
  assert.equal(text, r.response);
  assert.equal(last.done, true);
  assert.equal(last.done_reason, 'length');
});

test('ollama generate: raw prompt == /v1/completions; stop option', async () => {
  const prompt = 'def fibonacci(n):\n';
  const r = await generate({ prompt, raw: true, options: { num_predict: 24 } });
  const c = await L.openai().completions.create({ model: await L.model(), prompt, max_tokens: 24, temperature: 0 });
  assert.equal(r.response, c.choices[0].text);
  assert.equal(r.prompt_eval_count, (await L.tokenize(prompt, true)).length);
  const stop = L.pickStop(r.response);
  const s = await generate({ prompt, raw: true, options: { num_predict: 24, stop: [stop] } });
  assert.equal(s.response, L.cutAt(r.response, stop));
  assert.equal(s.done_reason, 'stop');
});

test('ollama: model name with :latest is the same model', async () => {
  const r = await chat({ model: (await L.model()) + ':latest', messages: msgs('Write a Python function `sq`: Square x.'), options: { num_predict: 4 } });
  assert.ok(r.message.content.length > 0);
});

const weatherTool = { type: 'function', function: { name: 'get_weather', description: L.weatherDesc, parameters: L.weatherParams } };

test('ollama tools: a tool call the model emits is in message.tool_calls', async (t) => {
  for (const prompt of L.TOOL_PROMPTS) {
    const params = { messages: [{ role: 'user', content: prompt }], tools: [weatherTool], options: { num_predict: 64 } };
    const r = await chat(params);
    const calls = r.message.tool_calls ?? [];
    if (!calls.length) {
      assert.ok(!r.message.content.includes('</tool_call>'), 'unparsed tool call in content: ' + r.message.content);
      continue;
    }
    assert.equal(calls[0].function.name, 'get_weather');
    assert.equal(typeof calls[0].function.arguments, 'object'); // an object on this wire, not a JSON string
    const s = await chatStream(params);
    assert.equal(s.toolCalls.length, calls.length);
    assert.deepEqual(s.toolCalls[0].function.arguments, calls[0].function.arguments);
    return;
  }
  t.skip(L.NO_TOOL_CALL);
});

test('ollama tools: the tool result goes back (tool role) and the model answers', async () => {
  const messages = [
    { role: 'user', content: 'What is the weather in Paris?' },
    { role: 'assistant', content: '', tool_calls: [{ function: { name: 'get_weather', arguments: { city: 'Paris' } } }] },
    { role: 'tool', content: '{"temperature_c": 18, "sky": "clear"}', tool_name: 'get_weather' },
  ];
  const r = await chat({ messages, tools: [weatherTool], options: { num_predict: 24 } });
  assert.equal(r.done, true);
  assert.ok(r.message.content.length > 0 || r.message.tool_calls?.length > 0);
  const plain = await chat({ messages: messages.slice(0, 1), options: { num_predict: 1 } });
  assert.ok(r.prompt_eval_count > plain.prompt_eval_count + 20, 'tools, call and result are in the prompt');
  const s = await chatStream({ messages, tools: [weatherTool], options: { num_predict: 24 } });
  assert.equal(s.text, r.message.content);
  await L.health();
});

test('client errors: unknown model -> ResponseError 404', async () => {
  await assert.rejects(
    client.chat({ model: 'no-such-model', messages: msgs('hi'), stream: false }),
    (e) => e.status_code === 404 && typeof e.error === 'string',
  );
  await assert.rejects(client.generate({ model: 'no-such-model', prompt: 'hi', stream: false }), (e) => e.status_code === 404);
  await L.health();
});
