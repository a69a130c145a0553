// responses.test.mjs — OpenAI Responses API through the official `openai`
// client: input as string and as items, instructions, streaming events with
// sequence_number (response.created ... output_text.delta ... completed),
// status / incomplete_details, usage, the in-memory store (GET by id,
// previous_response_id, truncation "auto"), function tools (function_call items, function_call_output),
// logprobs (include: message.output_text.logprobs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from './lib.mjs';

const client = L.openai();
const INSTR = 'You are a helpful coding assistant.';

async function create(params) {
  return client.responses.create({ model: await L.model(), temperature: 0, ...params });
}

function textOf(resp) {
  let s = '';
  for (const item of resp.output ?? [])
    if (item.type === 'message') for (const c of item.content) if (c.type === 'output_text') s += c.text;
  return s;
}

// Streams; returns {events, text, final}.
async function stream(params) {
  const st = await create({ ...params, stream: true });
  const events = [];
  let text = '';
  for await (const ev of st) {
    events.push(ev);
    if (ev.type === 'response.output_text.delta') text += ev.delta;
  }
  const final = events[events.length - 1]?.response;
  return { events, text, final };
}

test('responses: non-streaming, string input, max_output_tokens -> incomplete', async () => {
  const r = await create({ input: 'Write a Python function `is_even`: Return True if n is even.', instructions: INSTR, max_output_tokens: 12 });
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.equal(r.status, 'incomplete');
  assert.equal(r.incomplete_details?.reason, 'max_output_tokens');
  const msg = r.output.find((o) => o.type === 'message');
  assert.ok(msg, 'a message output item');
  assert.equal(msg.role, 'assistant');
  assert.equal(msg.content[0].type, 'output_text');
  assert.ok(r.output_text.length > 0);
  assert.equal(r.output_text, textOf(r));
  assert.equal(r.usage.output_tokens, 12);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
});

test('responses: completed at end of turn; input_tokens == tokens of the rendered prompt', async () => {
  const user = 'Write a Python function `add`: Return the sum of a and b.';
  const r = await create({ input: user, instructions: INSTR, max_output_tokens: 400 });
  assert.equal(r.status, 'completed');
  assert.ok(!r.incomplete_details);
  assert.ok(r.output_text.length > 0);
  assert.ok(!r.output_text.includes('<|im_end|>'));
  const ids = await L.tokenize(L.chatml([{ role: 'system', content: INSTR }, { role: 'user', content: user }]));
  assert.equal(r.usage.input_tokens, ids.length);
  // same answer as chat completions for the same conversation
  const c = await client.chat.completions.create({
    model: await L.model(),
    temperature: 0,
    max_tokens: 400,
    messages: [
      { role: 'system', content: INSTR },
      { role: 'user', content: user },
    ],
  });
  assert.equal(r.output_text, c.choices[0].message.content);
});

test('responses: input as message items == input as string', async () => {
  const a = await create({ input: 'Write a Python function `sq`: Square x.', max_output_tokens: 16 });
  const b = await create({
    input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Write a Python function `sq`: Square x.' }] }],
    max_output_tokens: 16,
  });
  const c = await create({ input: [{ role: 'user', content: 'Write a Python function `sq`: Square x.' }], max_output_tokens: 16 });
  assert.equal(b.output_text, a.output_text);
  assert.equal(c.output_text, a.output_text);
});

test('responses: streaming events in order with sequence_number; text == non-streamed', async () => {
  for (const [input, max] of [
    ['Write a Python function `add`: Return the sum of a and b.', 400],
    ['Write a Python function `parse_header`: Parse an HTTP header line into a (name, value) tuple.', 40],
  ]) {
    const params = { input, instructions: INSTR, max_output_tokens: max };
    const full = await create(params);
    const s = await stream(params);
    const types = s.events.map((e) => e.type);
    assert.equal(types[0], 'response.created');
    assert.ok(types.includes('response.output_item.added'));
    assert.ok(types.includes('response.content_part.added'));
    assert.ok(types.includes('response.output_text.delta'));
    assert.ok(types.includes('response.output_text.done'));
    assert.ok(types.includes('response.output_item.done'));
    const last = types[types.length - 1];
    assert.equal(last, full.status === 'completed' ? 'response.completed' : 'response.incomplete');
    s.events.forEach((e, i) => assert.equal(e.sequence_number, i, `sequence_number of event ${i} (${e.type})`));
    assert.equal(s.text, full.output_text);
    const done = s.events.find((e) => e.type === 'response.output_text.done');
    assert.equal(done.text, full.output_text);
    assert.equal(s.final.status, full.status);
    assert.equal(s.final.usage.output_tokens, full.usage.output_tokens);
    assert.equal(textOf(s.final), full.output_text);
  }
});

// include: ["message.output_text.logprobs"] (top_logprobs alternatives): one
// entry per output token, on each text delta and on the message's part; the
// same entries streamed and not; without the include, none
test('responses: logprobs with include, streamed and not', async () => {
  const p = { input: 'Write a Python function `neg`: Negate x.', instructions: INSTR, max_output_tokens: 6 };
  const lpParams = { ...p, include: ['message.output_text.logprobs'], top_logprobs: 2 };
  const r = await create(lpParams);
  const part = r.output.find((i) => i.type === 'message').content[0];
  assert.equal(part.logprobs.length, r.usage.output_tokens);
  assert.equal(part.logprobs.map((e) => e.token).join(''), part.text);
  for (const e of part.logprobs) {
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 2);
    assert.equal(e.top_logprobs[0].token, e.token); // greedy: the chosen token is the likeliest
  }
  const s = await stream(lpParams);
  const streamed = s.events.filter((ev) => ev.type === 'response.output_text.delta').flatMap((ev) => ev.logprobs);
  assert.deepEqual(streamed.map((e) => [e.token, e.logprob]), part.logprobs.map((e) => [e.token, e.logprob]));
  const done = s.events.find((ev) => ev.type === 'response.output_text.done');
  assert.equal(done.logprobs.length, part.logprobs.length);
  const plain = await create(p);
  assert.equal(plain.output.find((i) => i.type === 'message').content[0].logprobs, undefined);
});

test('responses: GET /v1/responses/{id} returns the stored response', async () => {
  const r = await create({ input: 'Write a Python function `neg`: Negate x.', max_output_tokens: 16 });
  const g = await client.responses.retrieve(r.id);
  assert.equal(g.id, r.id);
  assert.equal(g.status, r.status);
  assert.equal(textOf(g), r.output_text);
  // a streamed response is stored too
  const s = await stream({ input: 'Write a Python function `inc`: Add one.', max_output_tokens: 8 });
  const g2 = await client.responses.retrieve(s.final.id);
  assert.equal(textOf(g2), s.text);
});

test('responses: previous_response_id continues the conversation', async () => {
  const first = await create({ input: 'Write a Python function `inc`: Add one.', instructions: INSTR, max_output_tokens: 24 });
  const second = await create({ input: 'Now write `dec`: Subtract one.', previous_response_id: first.id, max_output_tokens: 16 });
  assert.equal(second.previous_response_id, first.id);
  assert.ok(second.output_text.length > 0);
  // the earlier turn (its input and output) is part of the prompt now
  const alone = await create({ input: 'Now write `dec`: Subtract one.', max_output_tokens: 16 });
  assert.ok(
    second.usage.input_tokens >= alone.usage.input_tokens + first.usage.output_tokens,
    `input_tokens ${second.usage.input_tokens} vs alone ${alone.usage.input_tokens} + previous output ${first.usage.output_tokens}`,
  );
});

test('responses: truncation "auto" drops the oldest turns of a chain past the context; "disabled" (the default) -> 400', async () => {
  const { ctx, part, partTokens } = await L.contextPart(0.42); // each turn ~42% of the context
  const first = await create({ input: 'A: ' + part, instructions: INSTR, max_output_tokens: 4 });
  const second = await create({ input: 'B: ' + part, previous_response_id: first.id, max_output_tokens: 4 });
  assert.ok(second.usage.input_tokens > 2 * partTokens, `two turns: ${second.usage.input_tokens} tokens`);
  // a third turn: ~126% of the context
  for (const truncation of [undefined, 'disabled']) {
    await assert.rejects(
      create({ input: 'C: ' + part, previous_response_id: second.id, max_output_tokens: 4, truncation }),
      (err) => err.status === 400 && err.code === 'context_length_exceeded' && /maximum context length/.test(err.message),
    );
  }
  const cut = await create({ input: 'C: ' + part, previous_response_id: second.id, max_output_tokens: 4, truncation: 'auto' });
  assert.equal(cut.truncation, 'auto');
  assert.ok(cut.output_text.length > 0);
  // A's turn went, B's and C's stayed, with room for the answer
  const inTok = cut.usage.input_tokens;
  assert.ok(inTok > 2 * partTokens && inTok < 2.5 * partTokens && inTok + 4 <= ctx, `input_tokens ${inTok}, a turn ${partTokens}, ctx ${ctx}`);
  // the store kept the whole conversation: chaining on drops again, the oldest first
  const next = await create({ input: 'D: one more', previous_response_id: cut.id, max_output_tokens: 4, truncation: 'auto' });
  assert.ok(next.usage.input_tokens > partTokens && next.usage.input_tokens < 2.5 * partTokens, `next: ${next.usage.input_tokens}`);
  // room for max_output_tokens is not there even with the chain dropped: the answer gets what is left, as
  // with truncation disabled (never stricter than that)
  const bigLast = await L.contextPart(0.6);
  const short = await create({ input: bigLast.part, previous_response_id: second.id, max_output_tokens: 100000, truncation: 'auto' });
  assert.ok(short.output_text.length > 0 && short.usage.input_tokens < 0.7 * ctx, `input_tokens ${short.usage.input_tokens}`);
  // a value that is neither -> 400 naming truncation
  const bad = await L.post('/v1/responses', { model: await L.model(), input: 'hi', truncation: 'sometimes', max_output_tokens: 2 });
  L.assertOpenAIError(bad, 400);
  assert.equal(bad.json.error.param, 'truncation');
  await L.health();
});

test('responses: unknown id -> 404 (GET) / 400 or 404 (previous_response_id), OpenAI error body', async () => {
  const g = await L.get('/v1/responses/resp_doesnotexist000');
  L.assertOpenAIError(g, 404);
  const p = await L.post('/v1/responses', { model: await L.model(), input: 'hi', previous_response_id: 'resp_doesnotexist000', max_output_tokens: 2 });
  assert.ok([400, 404].includes(p.status), `status ${p.status}`);
  L.assertOpenAIError(p, p.status);
  await L.health();
});

const weatherTool = { type: 'function', name: 'get_weather', description: L.weatherDesc, parameters: L.weatherParams };

test('responses tools: a tool call the model emits is a function_call item', async (t) => {
  for (const prompt of L.TOOL_PROMPTS) {
    const params = { input: prompt, tools: [weatherTool], max_output_tokens: 64 };
    const r = await create(params);
    const calls = r.output.filter((o) => o.type === 'function_call');
    if (!calls.length) {
      assert.ok(!r.output_text.includes('</tool_call>'), 'unparsed tool call in text: ' + r.output_text);
      continue;
    }
    assert.equal(calls[0].name, 'get_weather');
    assert.match(calls[0].call_id, /\S/);
    assert.equal(typeof JSON.parse(calls[0].arguments), 'object');
    const s = await stream(params);
    const added = s.events.filter((e) => e.type === 'response.output_item.added' && e.item.type === 'function_call');
    assert.equal(added.length, calls.length);
    const fc = s.final.output.filter((o) => o.type === 'function_call');
    assert.equal(fc[0].name, 'get_weather');
    assert.deepEqual(JSON.parse(fc[0].arguments), JSON.parse(calls[0].arguments));
    return;
  }
  t.skip(L.NO_TOOL_CALL);
});

test('responses tools: function_call_output goes back and the model answers', async () => {
  const input = [
    { role: 'user', content: 'What is the weather in Paris?' },
    { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
    { type: 'function_call_output', call_id: 'call_1', output: '{"temperature_c": 18, "sky": "clear"}' },
  ];
  const r = await create({ input, tools: [weatherTool], max_output_tokens: 24 });
  assert.ok(['completed', 'incomplete'].includes(r.status));
  assert.ok(r.output.length > 0);
  assert.ok(r.output_text.length > 0 || r.output.some((o) => o.type === 'function_call'));
  const plain = await create({ input: 'What is the weather in Paris?', max_output_tokens: 1 });
  assert.ok(r.usage.input_tokens > plain.usage.input_tokens + 20, 'tools, call and output are in the prompt');
  const s = await stream({ input, tools: [weatherTool], max_output_tokens: 24 });
  assert.equal(s.text, r.output_text);
  await L.health();
});
