// openai.test.mjs — OpenAI Chat Completions, Completions and Models through
// the official `openai` client: streaming == non-streaming at temperature 0,
// finish reasons, stop strings, usage == tokenizer counts, seeds, logprobs, logit_bias,
// tools (tool call parsed when the model emits one; tool results accepted).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from './lib.mjs';

const client = L.openai();
const SYS = 'You are a helpful coding assistant.';
const msgs = (user) => [
  { role: 'system', content: SYS },
  { role: 'user', content: user },
];

async function chat(params) {
  return client.chat.completions.create({ model: await L.model(), temperature: 0, ...params });
}

// Streams a chat completion; returns {text, finish, usage, chunks, toolCalls}.
async function chatStream(params) {
  const stream = await chat({ ...params, stream: true });
  let text = '';
  let finish = null;
  let usage = null;
  const chunks = [];
  const toolCalls = [];
  for await (const c of stream) {
    chunks.push(c);
    assert.equal(c.object, 'chat.completion.chunk');
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      if (ch.delta?.content) text += ch.delta.content;
      for (const tc of ch.delta?.tool_calls ?? []) {
        const t = (toolCalls[tc.index] ??= { id: tc.id, type: tc.type, name: '', arguments: '' });
        if (tc.function?.name) t.name += tc.function.name;
        if (tc.function?.arguments) t.arguments += tc.function.arguments;
      }
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { text, finish, usage, chunks, toolCalls };
}

test('GET /v1/models lists the served model', async () => {
  const list = [];
  for await (const m of client.models.list()) list.push(m);
  assert.equal(list.length, 1);
  assert.equal(list[0].object, 'model');
  assert.equal(typeof list[0].id, 'string');
  assert.ok(list[0].id.length > 0);
});

test('GET /v1/models/{id} retrieves the served model; an unknown id is a 404', async () => {
  const name = await L.model();
  const m = await client.models.retrieve(name);
  assert.equal(m.id, name);
  assert.equal(m.object, 'model');
  assert.equal(m.owned_by, 'kestrel');
  await assert.rejects(client.models.retrieve('no-such-model'), (e) => e.status === 404 && /does not exist/.test(e.message));
});

test('chat: non-streaming answer, finish_reason length, usage', async () => {
  const r = await chat({ messages: msgs('Write a Python function `is_even`: Return True if n is even.'), max_tokens: 12 });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(c.message.content.length > 0);
  assert.equal(c.finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test('chat: ends with finish_reason stop at end of turn', async () => {
  const r = await chat({ messages: msgs('Write a Python function `add`: Return the sum of a and b.'), max_tokens: 400 });
  const c = r.choices[0];
  assert.equal(c.finish_reason, 'stop');
  assert.ok(c.message.content.length > 0);
  assert.ok(!c.message.content.includes('<|im_end|>'), 'end-of-turn token leaked into the content');
  assert.ok(r.usage.completion_tokens < 400);
});

test('chat: ignore_eos (vLLM / llama-server extension) decodes past the end of turn', async () => {
  const m = msgs('Write a Python function `add`: Return the sum of a and b.');
  const a = await chat({ messages: m, max_tokens: 400 });
  assert.equal(a.choices[0].finish_reason, 'stop');
  const n = a.usage.completion_tokens + 8;
  const b = await chat({ messages: m, max_tokens: n, ignore_eos: true });
  assert.equal(b.choices[0].finish_reason, 'length');
  assert.equal(b.usage.completion_tokens, n);
});

test('chat: streamed text == non-streamed text (temperature 0), usage chunk', async () => {
  for (const [user, max] of [
    ['Write a Python function `add`: Return the sum of a and b.', 400],
    ['Write a Python function `parse_header`: Parse an HTTP header line into a (name, value) tuple.', 48],
  ]) {
    const params = { messages: msgs(user), max_tokens: max };
    const full = await chat(params);
    const s = await chatStream({ ...params, stream_options: { include_usage: true } });
    assert.equal(s.text, full.choices[0].message.content);
    assert.equal(s.finish, full.choices[0].finish_reason);
    assert.ok(s.text.length > 0);
    // role first, then content deltas, one finish chunk, then the usage chunk
    assert.equal(s.chunks[0].choices[0].delta.role, 'assistant');
    assert.deepEqual(s.usage && { p: s.usage.prompt_tokens, c: s.usage.completion_tokens }, {
      p: full.usage.prompt_tokens,
      c: full.usage.completion_tokens,
    });
    const last = s.chunks[s.chunks.length - 1];
    assert.deepEqual(last.choices, []);
    const ids = new Set(s.chunks.map((c) => c.id));
    assert.equal(ids.size, 1, 'one id for all chunks');
  }
});

test('chat: usage.prompt_tokens == tokens of the rendered ChatML prompt', async () => {
  const m = msgs('Write a Python function `clamp`: Clamp x into [lo, hi].');
  const r = await chat({ messages: m, max_tokens: 4 });
  const ids = await L.tokenize(L.chatml(m), false);
  assert.equal(r.usage.prompt_tokens, ids.length);
});

test('chat: stop strings end the output before the stop string', async () => {
  const params = { messages: msgs('Write a Python function `word_count`: Count the words in a string.'), max_tokens: 64 };
  const full = (await chat(params)).choices[0].message.content;
  const stop = L.pickStop(full);
  const expect = L.cutAt(full, stop);
  const r = await chat({ ...params, stop: [stop, 'zzqqxx-never'] });
  const got = r.choices[0].message.content;
  assert.equal(got, expect);
  assert.ok(!got.includes(stop));
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.ok(r.usage.completion_tokens < 64);
  const s = await chatStream({ ...params, stop });
  assert.equal(s.text, expect);
  assert.equal(s.finish, 'stop');
});

test('chat: the same seed gives the same sample at temperature 1', async () => {
  const params = { messages: msgs('Write a Python function `mean`: Average of a list.'), max_tokens: 24, temperature: 1, seed: 1234 };
  const a = await chat(params);
  const b = await chat(params);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
});

test('chat: logprobs and top_logprobs', async () => {
  const r = await chat({ messages: msgs('Write a Python function `neg`: Negate x.'), max_tokens: 5, logprobs: true, top_logprobs: 3 });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, 5);
  for (const e of lp) {
    assert.equal(typeof e.token, 'string');
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 3);
    // greedy: the chosen token is the most likely one; the rest in order
    assert.equal(e.token, e.top_logprobs[0].token);
    for (let i = 1; i < e.top_logprobs.length; i++) assert.ok(e.top_logprobs[i].logprob <= e.top_logprobs[i - 1].logprob);
    assert.equal(new Set(e.top_logprobs.map((t) => t.token)).size, e.top_logprobs.length);
  }
  assert.equal(lp.map((e) => e.token).join(''), r.choices[0].message.content);
});

// logprobs through the other paths: a streamed chat (each chunk carries its
// tokens' entries) and the legacy completions answer, whole and streamed
test('streamed chat and completions: logprobs for every generated token', async () => {
  const p = { messages: msgs('Write a Python function `neg`: Negate x.'), max_tokens: 6, logprobs: true, top_logprobs: 2 };
  const whole = await chat(p);
  const s = await chatStream({ ...p, stream_options: { include_usage: true } });
  const entries = s.chunks.flatMap((c) => c.choices.flatMap((ch) => ch.logprobs?.content ?? []));
  assert.equal(entries.length, s.usage.completion_tokens);
  assert.deepEqual(entries.map((e) => [e.token, e.logprob]), whole.choices[0].logprobs.content.map((e) => [e.token, e.logprob]));
  assert.equal(entries.map((e) => e.token).join(''), s.text);

  const cp = { model: await L.model(), prompt: 'def fibonacci(n):\n', max_tokens: 6, temperature: 0, logprobs: 2 };
  const c = await client.completions.create(cp);
  const lp = c.choices[0].logprobs;
  assert.equal(lp.tokens.length, c.usage.completion_tokens);
  assert.equal(lp.token_logprobs.length, lp.tokens.length);
  assert.equal(lp.top_logprobs.length, lp.tokens.length);
  for (const v of lp.token_logprobs) assert.ok(v <= 0);
  assert.equal(lp.tokens.join(''), c.choices[0].text);
  const stream = await client.completions.create({ ...cp, stream: true });
  const toks = [];
  for await (const ch of stream) toks.push(...(ch.choices[0]?.logprobs?.tokens ?? []));
  assert.deepEqual(toks, lp.tokens);
});

test('chat: content given as an array of text parts', async () => {
  const a = await chat({ messages: msgs('Write a Python function `sq`: Square x.'), max_tokens: 16 });
  const b = await chat({
    messages: [
      { role: 'system', content: [{ type: 'text', text: SYS }] },
      { role: 'user', content: [{ type: 'text', text: 'Write a Python function `sq`: ' }, { type: 'text', text: 'Square x.' }] },
    ],
    max_tokens: 16,
  });
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
});

const weatherTool = {
  type: 'function',
  function: { name: 'get_weather', description: L.weatherDesc, parameters: L.weatherParams },
};

test('chat tools: a tool call the model emits is parsed (stream and non-stream)', async (t) => {
  for (const prompt of L.TOOL_PROMPTS) {
    const params = { messages: [{ role: 'user', content: prompt }], tools: [weatherTool], max_tokens: 64 };
    const r = await chat(params);
    const m = r.choices[0].message;
    if (!m.tool_calls?.length) {
      // no call parsed: then the raw tag must not be left in the content either
      assert.ok(!(m.content ?? '').includes('</tool_call>'), 'unparsed tool call in content: ' + m.content);
      continue;
    }
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    const tc = m.tool_calls[0];
    assert.equal(tc.type, 'function');
    assert.match(tc.id, /\S/);
    assert.equal(tc.function.name, 'get_weather');
    assert.equal(typeof JSON.parse(tc.function.arguments), 'object');
    const s = await chatStream(params);
    assert.equal(s.finish, 'tool_calls');
    assert.equal(s.toolCalls.length, m.tool_calls.length);
    assert.equal(s.toolCalls[0].name, 'get_weather');
    assert.deepEqual(JSON.parse(s.toolCalls[0].arguments), JSON.parse(tc.function.arguments));
    return;
  }
  t.skip(L.NO_TOOL_CALL);
});

test('chat tools: the tool result goes back (tool role) and the model answers', async () => {
  const messages = [
    { role: 'system', content: SYS },
    { role: 'user', content: 'What is the weather in Paris?' },
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
    },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temperature_c": 18, "sky": "clear"}' },
  ];
  const r = await chat({ messages, tools: [weatherTool], max_tokens: 24 });
  assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
  const m = r.choices[0].message;
  assert.ok((m.content ?? '').length > 0 || m.tool_calls?.length > 0);
  // the history (tools, tool call, tool response) is in the prompt
  const plain = await chat({ messages: messages.slice(0, 2), max_tokens: 1 });
  assert.ok(r.usage.prompt_tokens > plain.usage.prompt_tokens + 20);
  const s = await chatStream({ messages, tools: [weatherTool], max_tokens: 24 });
  assert.equal(s.text, m.content ?? '');
  await L.health();
});

test('chat tools: tool_choice none behaves as no tools', async () => {
  const base = { messages: msgs('Write a Python function `inc`: Add one.'), max_tokens: 16 };
  const a = await chat(base);
  const b = await chat({ ...base, tools: [weatherTool], tool_choice: 'none' });
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
});

// -- /v1/completions: raw prompt, no template --

const CODE = 'def fibonacci(n):\n';

test('logit_bias: +100 forces a token, -100 bans tokens, on chat and completions; bad maps are 400', async () => {
  const m = msgs('Write a Python function `add`: Return the sum of a and b.');
  const t = (await L.tokenize(' banana'))[0];
  const forced = await chat({ messages: m, max_tokens: 4, logit_bias: { [t]: 100 } });
  assert.equal(forced.choices[0].message.content, await L.detokenize([t, t, t, t]));
  assert.equal(forced.choices[0].finish_reason, 'length');
  const c = await client.completions.create({ model: await L.model(), prompt: CODE, max_tokens: 3, temperature: 0, logit_bias: { [t]: 100 } });
  assert.equal(c.choices[0].text, await L.detokenize([t, t, t]));
  // every token of the greedy answer banned: the answer changes
  const base = (await chat({ messages: m, max_tokens: 8 })).choices[0].message.content;
  const ban = Object.fromEntries((await L.tokenize(base)).map((id) => [id, -100]));
  const banned = (await chat({ messages: m, max_tokens: 8, logit_bias: ban })).choices[0].message.content;
  assert.notEqual(banned, base);
  for (const bad of [{ x: 1 }, { 5: 101 }, { 5: 'a' }, { 99999999: 1 }])
    await assert.rejects(chat({ messages: m, max_tokens: 4, logit_bias: bad }), (e) => e.status === 400, JSON.stringify(bad));
});

// penalties run on the backend before the choice; logprobs are the model's,
// taken before them: the same text with or without logprobs
test('repetition / frequency penalties change greedy text; the same with logprobs, whose values are the model\'s', async () => {
  const m = msgs('Write a Python function `add`: Return the sum of a and b.');
  const base = (await chat({ messages: m, max_tokens: 60 })).choices[0].message.content;
  // (tinycoder is sure of its output's few repeats: the repetition penalty, over the prompt too, moves it)
  const pen = { messages: m, max_tokens: 60, repetition_penalty: 1.5, frequency_penalty: 1 };
  const a = await chat(pen);
  const b = await chat({ ...pen, logprobs: true, top_logprobs: 2 });
  assert.notEqual(a.choices[0].message.content, base);
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
  const lp = b.choices[0].logprobs.content;
  assert.ok(lp.length > 0);
  // the chosen token need not be the model's most likely one once penalised
  assert.ok(lp.some((t) => t.top_logprobs[0].logprob > t.logprob), 'some chosen token was not the unpenalised argmax');
});

test('completions: non-streaming, finish_reason length, usage == tokenizer counts', async () => {
  const r = await client.completions.create({ model: await L.model(), prompt: CODE, max_tokens: 20, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  const c = r.choices[0];
  assert.ok(c.text.length > 0);
  assert.equal(c.finish_reason, 'length');
  assert.equal(r.usage.prompt_tokens, (await L.tokenize(CODE, true)).length);
  assert.equal(r.usage.completion_tokens, 20);
  // the text is plain code (no special tokens): it re-tokenizes to as many tokens
  assert.equal((await L.tokenize(c.text, false)).length, r.usage.completion_tokens);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test('completions: streamed text == non-streamed text', async () => {
  for (const prompt of [CODE, 'import os\n\n\ndef list_files(path):\n    """Return the files under path."""\n']) {
    const params = { model: await L.model(), prompt, max_tokens: 40, temperature: 0 };
    const full = await client.completions.create(params);
    const stream = await client.completions.create({ ...params, stream: true });
    let text = '';
    let finish = null;
    for await (const c of stream) {
      text += c.choices[0]?.text ?? '';
      if (c.choices[0]?.finish_reason) finish = c.choices[0].finish_reason;
    }
    assert.equal(text, full.choices[0].text);
    assert.equal(finish, full.choices[0].finish_reason);
  }
});

test('completions: stop strings', async () => {
  const params = { model: await L.model(), prompt: CODE, max_tokens: 40, temperature: 0 };
  const full = (await client.completions.create(params)).choices[0].text;
  const stop = L.pickStop(full);
  const r = await client.completions.create({ ...params, stop });
  assert.equal(r.choices[0].text, L.cutAt(full, stop));
  assert.equal(r.choices[0].finish_reason, 'stop');
});

test('completions: prompt as token ids', async () => {
  const ids = await L.tokenize(CODE, true);
  const a = await client.completions.create({ model: await L.model(), prompt: CODE, max_tokens: 10, temperature: 0 });
  const b = await client.completions.create({ model: await L.model(), prompt: ids, max_tokens: 10, temperature: 0 });
  assert.equal(b.choices[0].text, a.choices[0].text);
});

test('client errors: unknown model -> NotFoundError (404)', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'no-such-model', messages: msgs('hi'), max_tokens: 2 }),
    (e) => e.status === 404 && typeof e.message === 'string',
  );
  await assert.rejects(client.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 2 }), (e) => e.status === 404);
  await L.health();
});

test('chat completions: prediction (predicted outputs) leaves the text unchanged and reports accepted tokens', async () => {
  const client = L.openai();
  const model = await L.model();
  const messages = [{ role: 'user', content: 'Rename `x` to `total` in this code:\n```python\ndef add(x, y):\n    return x + y\n```' }];
  const plain = await client.chat.completions.create({ model, messages, max_tokens: 48, temperature: 0 });
  const text = plain.choices[0].message.content;
  assert.ok(text.length > 0);
  const pred = await client.chat.completions.create({
    model, messages, max_tokens: 48, temperature: 0, prediction: { type: 'content', content: text },
  });
  assert.equal(pred.choices[0].message.content, text);
  const d = pred.usage.completion_tokens_details;
  assert.ok(d.accepted_prediction_tokens > 0, JSON.stringify(d));
  assert.equal(typeof d.rejected_prediction_tokens, 'number');
  // the prediction as text parts, split in two: joined, the same draft
  const half = Math.floor(text.length / 2);
  const parts = await client.chat.completions.create({
    model, messages, max_tokens: 48, temperature: 0,
    prediction: { type: 'content', content: [{ type: 'text', text: text.slice(0, half) }, { type: 'text', text: text.slice(half) }] },
  });
  assert.equal(parts.choices[0].message.content, text);
  assert.equal(parts.usage.completion_tokens_details.accepted_prediction_tokens, d.accepted_prediction_tokens);
  // streaming with a prediction: the same text
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 48, temperature: 0, stream: true, prediction: { type: 'content', content: text },
  });
  let streamed = '';
  for await (const c of stream) streamed += c.choices[0]?.delta?.content ?? '';
  assert.equal(streamed, text);
});
