// anthropic.test.mjs — Anthropic Messages API through the official
// `@anthropic-ai/sdk` client: system, content blocks, stop_reason
// (end_turn / max_tokens / stop_sequence), usage, the stream events
// (message_start ... message_stop), count_tokens, tools (tool_use blocks,
// tool_result inputs), models (list and retrieve, in Anthropic's shape).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from './lib.mjs';

const client = L.anthropic();
const SYS = 'You are a helpful coding assistant.';

async function create(params) {
  return client.messages.create({ model: await L.model(), temperature: 0, ...params });
}
const textOf = (m) => m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
const user = (text) => [{ role: 'user', content: text }];

test('anthropic: GET /v1/models lists and retrieves the served model in Anthropic\'s shape', async () => {
  const name = await L.model();
  const list = [];
  for await (const m of client.models.list()) list.push(m);
  assert.equal(list.length, 1);
  assert.equal(list[0].type, 'model');
  assert.equal(list[0].id, name);
  assert.ok(!Number.isNaN(Date.parse(list[0].created_at)), list[0].created_at);
  const m = await client.models.retrieve(name);
  assert.equal(m.id, name);
  assert.equal(m.display_name, name);
  await assert.rejects(client.models.retrieve('no-such-model'), (e) => e.status === 404 && e.error?.error?.type === 'not_found_error');
});

// Raw stream events; returns {events, text, stopReason, usage}.
async function rawStream(params) {
  const st = await create({ ...params, stream: true });
  const events = [];
  let text = '';
  for await (const ev of st) {
    events.push(ev);
    if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') text += ev.delta.text;
  }
  const md = events.find((e) => e.type === 'message_delta');
  return { events, text, stopReason: md?.delta.stop_reason, stopSequence: md?.delta.stop_sequence, usage: md?.usage };
}

// prompt tokens of a request: Anthropic counts prefix-cache reads apart from input_tokens
const inTok = (u) => u.input_tokens + (u.cache_read_input_tokens ?? 0);

test('messages: non-streaming, max_tokens stop_reason, usage', async () => {
  const r = await create({ system: SYS, messages: user('Write a Python function `is_even`: Return True if n is even.'), max_tokens: 12 });
  assert.equal(r.type, 'message');
  assert.equal(r.role, 'assistant');
  assert.match(r.id, /^msg_/);
  assert.equal(r.model, await L.model());
  assert.equal(r.content[0].type, 'text');
  assert.ok(textOf(r).length > 0);
  assert.equal(r.stop_reason, 'max_tokens');
  assert.equal(r.stop_sequence, null);
  assert.equal(r.usage.output_tokens, 12);
  assert.ok(r.usage.input_tokens > 0);
});

test('messages: end_turn; input_tokens == tokens of the rendered prompt; == chat completions', async () => {
  const u = 'Write a Python function `add`: Return the sum of a and b.';
  const r = await create({ system: SYS, messages: user(u), max_tokens: 400 });
  assert.equal(r.stop_reason, 'end_turn');
  assert.ok(textOf(r).length > 0);
  assert.ok(!textOf(r).includes('<|im_end|>'));
  const ids = await L.tokenize(L.chatml([{ role: 'system', content: SYS }, { role: 'user', content: u }]));
  assert.equal(inTok(r.usage), ids.length);
  const c = await L.openai().chat.completions.create({
    model: await L.model(),
    temperature: 0,
    max_tokens: 400,
    messages: [
      { role: 'system', content: SYS },
      { role: 'user', content: u },
    ],
  });
  assert.equal(textOf(r), c.choices[0].message.content);
  assert.equal(r.usage.output_tokens, c.usage.completion_tokens);
});

test('messages: system and content as blocks == as strings', async () => {
  const a = await create({ system: SYS, messages: user('Write a Python function `sq`: Square x.'), max_tokens: 16 });
  const b = await create({
    system: [{ type: 'text', text: SYS }],
    messages: [{ role: 'user', content: [{ type: 'text', text: 'Write a Python function `sq`: Square x.' }] }],
    max_tokens: 16,
  });
  assert.equal(textOf(b), textOf(a));
});

test('messages: stream events in order; streamed text == non-streamed text', async () => {
  for (const [u, max] of [
    ['Write a Python function `add`: Return the sum of a and b.', 400],
    ['Write a Python function `parse_header`: Parse an HTTP header line into a (name, value) tuple.', 40],
  ]) {
    const params = { system: SYS, messages: user(u), max_tokens: max };
    const full = await create(params);
    const s = await rawStream(params);
    const types = s.events.map((e) => e.type).filter((t) => t !== 'ping');
    assert.equal(types[0], 'message_start');
    assert.equal(types[1], 'content_block_start');
    assert.equal(types[types.length - 1], 'message_stop');
    assert.equal(types[types.length - 2], 'message_delta');
    assert.equal(types[types.length - 3], 'content_block_stop');
    assert.ok(types.slice(2, -3).every((t) => t === 'content_block_delta'), types.join(','));
    const start = s.events[0].message;
    assert.equal(start.role, 'assistant');
    assert.equal(inTok(start.usage), inTok(full.usage));
    assert.equal(s.events[1].content_block.type, 'text');
    assert.equal(s.text, textOf(full));
    assert.equal(s.stopReason, full.stop_reason);
    assert.equal(s.usage.output_tokens, full.usage.output_tokens);
    // the SDK's stream helper assembles the same message
    const fm = await client.messages.stream({ model: await L.model(), temperature: 0, ...params }).finalMessage();
    assert.equal(textOf(fm), textOf(full));
    assert.equal(fm.stop_reason, full.stop_reason);
  }
});

test('messages: stop_sequences -> stop_reason stop_sequence, text cut before it', async () => {
  const params = { system: SYS, messages: user('Write a Python function `word_count`: Count the words in a string.'), max_tokens: 64 };
  const full = textOf(await create(params));
  const stop = L.pickStop(full);
  const r = await create({ ...params, stop_sequences: [stop] });
  assert.equal(r.stop_reason, 'stop_sequence');
  assert.equal(r.stop_sequence, stop);
  assert.equal(textOf(r), L.cutAt(full, stop));
  assert.ok(!textOf(r).includes(stop));
  const s = await rawStream({ ...params, stop_sequences: [stop] });
  assert.equal(s.text, L.cutAt(full, stop));
  assert.equal(s.stopReason, 'stop_sequence');
  assert.equal(s.stopSequence, stop);
});

test('messages: a final assistant message is a prefill the answer continues', async () => {
  const u = 'Write a Python function `add`: Return the sum of a and b.';
  const prefill = '```python\ndef add(a, b):';
  const r = await create({ system: SYS, messages: [...user(u), { role: 'assistant', content: prefill }], max_tokens: 20 });
  // the same continuation as the raw rendered prompt + prefill on /v1/completions
  const raw = L.chatml([{ role: 'system', content: SYS }, { role: 'user', content: u }]) + prefill;
  const c = await L.openai().completions.create({ model: await L.model(), prompt: raw, max_tokens: 20, temperature: 0 });
  assert.equal(textOf(r), c.choices[0].text);
  assert.equal(inTok(r.usage), (await L.tokenize(raw)).length);
  // trailing whitespace in the prefill is refused, as by Anthropic
  const bad = await L.post('/v1/messages', { model: await L.model(), max_tokens: 2, messages: [...user(u), { role: 'assistant', content: 'x ' }] }, { headers: { 'anthropic-version': '2023-06-01' } });
  L.assertAnthropicError(bad, 400, 'invalid_request_error');
});

test('count_tokens == usage.input_tokens of the same request', async () => {
  const params = { system: SYS, messages: user('Write a Python function `clamp`: Clamp x into [lo, hi].') };
  const c = await client.messages.countTokens({ model: await L.model(), ...params });
  assert.equal(typeof c.input_tokens, 'number');
  const r = await create({ ...params, max_tokens: 2 });
  assert.equal(c.input_tokens, inTok(r.usage));
  const withTools = await client.messages.countTokens({ model: await L.model(), ...params, tools: [weatherTool] });
  assert.ok(withTools.input_tokens > c.input_tokens, 'tools count as input');
});

const weatherTool = { name: 'get_weather', description: L.weatherDesc, input_schema: L.weatherParams };

test('messages tools: a tool call the model emits is a tool_use block', async (t) => {
  for (const prompt of L.TOOL_PROMPTS) {
    const params = { messages: user(prompt), tools: [weatherTool], max_tokens: 64 };
    const r = await create(params);
    const uses = r.content.filter((b) => b.type === 'tool_use');
    if (!uses.length) {
      assert.ok(!textOf(r).includes('</tool_call>'), 'unparsed tool call in text: ' + textOf(r));
      continue;
    }
    assert.equal(r.stop_reason, 'tool_use');
    assert.equal(uses[0].name, 'get_weather');
    assert.match(uses[0].id, /\S/);
    assert.equal(typeof uses[0].input, 'object');
    const fm = await client.messages.stream({ model: await L.model(), temperature: 0, ...params }).finalMessage();
    const su = fm.content.filter((b) => b.type === 'tool_use');
    assert.equal(fm.stop_reason, 'tool_use');
    assert.deepEqual(su[0].input, uses[0].input);
    return;
  }
  t.skip(L.NO_TOOL_CALL);
});

test('messages tools: tool_result goes back and the model answers', async () => {
  const messages = [
    { role: 'user', content: 'What is the weather in Paris?' },
    { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '{"temperature_c": 18, "sky": "clear"}' }] },
  ];
  const r = await create({ messages, tools: [weatherTool], max_tokens: 24 });
  assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(r.stop_reason));
  assert.ok(r.content.length > 0);
  const plain = await create({ messages: messages.slice(0, 1), max_tokens: 1 });
  assert.ok(r.usage.input_tokens > plain.usage.input_tokens + 20, 'tools, tool_use and tool_result are in the prompt');
  // tool_result content given as blocks
  const r2 = await create({
    messages: [
      ...messages.slice(0, 2),
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: '{"temperature_c": 18, "sky": "clear"}' }] }] },
    ],
    tools: [weatherTool],
    max_tokens: 24,
  });
  assert.equal(textOf(r2), textOf(r));
  const s = await rawStream({ messages, tools: [weatherTool], max_tokens: 24 });
  assert.equal(s.text, textOf(r));
  await L.health();
});

test('client errors: unknown model -> NotFoundError (404)', async () => {
  await assert.rejects(
    client.messages.create({ model: 'no-such-model', messages: user('hi'), max_tokens: 2 }),
    (e) => e.status === 404 && e.error?.type === 'error' && e.error?.error?.type === 'not_found_error',
  );
  await L.health();
});
